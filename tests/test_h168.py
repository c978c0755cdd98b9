"""Round 32's backends and kernels only the CUDA/ROCm platform selects, and quantization facts
(helper h168, issue #16; ascendfacts30.py, rules/vllm_ascend.toml): each false shape paired with
the nearest true case that must stay reported as before."""

from __future__ import annotations

from .precision_helpers import migrate_json, write_project
from .precision_helpers import VLLM_PLATFORM_INTERFACE as INTERFACE

QUANT = "vllm/model_executor/layers/quantization"
REGISTRY = '''def get_quantization_config(quantization: str):
    from .mxfp4 import GptOssMxfp4Config, Mxfp4Config

    method_to_config = {"mxfp4": Mxfp4Config, "gpt_oss_mxfp4": GptOssMxfp4Config}
    return method_to_config[quantization]
'''
# (vLLM's ModelConfig: the registry is imported on every host)
CONFIG = '''from vllm.model_executor.layers.quantization import get_quantization_config


def quant_config_class(method: str):
    return get_quantization_config(method)
'''
# (vLLM's mxfp4.py: the MoE method packs FP8 scale bytes into a uint8 buffer, an info already)
MXFP4 = '''import torch


class Mxfp4MoEMethod:
    def __init__(self, moe):
        self.moe = moe

    @staticmethod
    def _encode_mxfp4_weight_scale(loaded_weight: torch.Tensor) -> torch.Tensor:
        if loaded_weight.is_floating_point():
            return loaded_weight.to(torch.float8_e8m0fnu).view(torch.uint8)
        return loaded_weight


class Mxfp4Config:
    def get_quant_method(self, layer):
        return Mxfp4MoEMethod(layer.moe_config)


class GptOssMxfp4Config(Mxfp4Config):
    pass
'''
# (a model that subclasses the MoE method)
SUBCLASS = '''from vllm.model_executor.layers.quantization.mxfp4 import Mxfp4MoEMethod


class HeterogeneousMxfp4MoEMethod(Mxfp4MoEMethod):
    pass


def maybe_wrap(quant_method, moe_config):
    if not isinstance(quant_method, Mxfp4MoEMethod):
        return quant_method
    return HeterogeneousMxfp4MoEMethod(moe_config)
'''


def _mxfp4_project(extra: dict) -> dict:
    files = {
        "vllm/platforms/interface.py": INTERFACE,
        f"{QUANT}/__init__.py": REGISTRY,
        f"{QUANT}/mxfp4.py": MXFP4,
        "vllm/config/model.py": CONFIG,
    }
    files.update(extra)
    return files


def _at(report: dict, path: str, code: str, line_text: str, files: dict) -> dict:
    line = next(n for n, text in enumerate(files[path].splitlines(), 1) if line_text in text)
    found = [f for f in report["findings"] if f["path"] == path and f["code"] == code and f["line"] == line
             and not f["fixable"]]
    assert len(found) == 1, (path, code, line, [(f["line"], f["message"]) for f in report["findings"] if f["path"] == path])
    return found[0]


def test_mxfp4_method_subclassed_only_by_rocm_code_names_the_plugin_fact(tmp_path):
    """GA#9: `Mxfp4MoEMethod._encode_mxfp4_weight_scale`'s FP8 cast (an info: bytes packed into
    uint8) is reached only through the "mxfp4"/"gpt_oss_mxfp4" methods vllm-ascend rejects at config
    time; the only other module naming the class is ROCm model code (an `amd` folder the run leaves
    alone). The info names the plugin's fact, so its advice (make the bytes on the CPU) is read as
    moot there."""
    files = _mxfp4_project({"vllm/models/dsv4/amd/model.py": SUBCLASS})
    report = migrate_json(write_project(tmp_path, files))
    fp8 = _at(report, f"{QUANT}/mxfp4.py", "NPU913", "float8_e8m0fnu", files)
    assert fp8["severity"] == "info"
    assert "vllm-ascend" in fp8["message"] and '"mxfp4", "gpt_oss_mxfp4"' in fp8["message"]
    assert "Mxfp4MoEMethod" in fp8["message"]


def test_mxfp4_method_subclassed_by_code_an_npu_host_runs_keeps_its_message(tmp_path):
    """Nearest true case: the same subclass in a model folder an NPU host imports (no ROCm folder)
    builds the method there: the finding keeps its own message, with no plugin fact."""
    files = _mxfp4_project({"vllm/models/dsv4/model.py": SUBCLASS})
    report = migrate_json(write_project(tmp_path, files))
    fp8 = _at(report, f"{QUANT}/mxfp4.py", "NPU913", "float8_e8m0fnu", files)
    assert "vllm-ascend" not in fp8["message"]


# ------------------------------------------------------------------ GB#22: a custom op's launcher
SM_PLATFORMS = '''class Platform:
    _enum = "cuda"

    def is_cuda_alike(self):
        return self._enum in ("cuda", "rocm")

    def is_xpu(self):
        return self._enum == "xpu"

    def is_rocm(self):
        return self._enum == "rocm"


current_platform = Platform()
'''
SM_TRITON_UTILS = '''try:
    import triton
    import triton.language as tl
except ImportError:
    triton = None
    tl = None
'''
# (the compressed-tensors Triton scaled-mm kernel and its launcher)
SM_KERNEL = '''from proj.triton_utils import tl, triton


@triton.jit
def scaled_mm_kernel(a_ptr, n):
    pid = tl.program_id(0)
    tl.store(a_ptr + pid, tl.load(a_ptr + pid) * 2)


def triton_scaled_mm(a):
    scaled_mm_kernel[(a.numel(),)](a, a.numel())
    return a
'''
# (the launcher registered as a custom op; the kernel class calls it through torch.ops)
SM_TRITON_CLASS = '''import torch

from proj.ops.triton_scaled_mm import triton_scaled_mm
from proj.platforms import current_platform
from proj.utils import direct_register_custom_op


def _int8_scaled_mm_func(a):
    return triton_scaled_mm(a)


def _int8_scaled_mm_fake(a):
    return torch.empty_like(a)


direct_register_custom_op("int8_scaled_mm_func", _int8_scaled_mm_func, fake_impl=_int8_scaled_mm_fake)


class TritonInt8ScaledMMLinearKernel:
    @classmethod
    def is_supported(cls, compute_capability=None):
        if current_platform.is_cuda_alike() or current_platform.is_xpu():
            return True, None
        return False, "requires ROCm, CUDA or XPU."

    def apply_weights(self, x):
        return torch.ops.proj.int8_scaled_mm_func(x)
'''
SM_UTILS = '''def direct_register_custom_op(op_name, op_func, fake_impl=None):
    return op_name
'''
SM_SELECTOR = '''from proj.kernels.triton import TritonInt8ScaledMMLinearKernel

_POSSIBLE_INT8_KERNELS = {"cuda": [TritonInt8ScaledMMLinearKernel]}


def choose_int8_kernel(platform):
    for kernel in _POSSIBLE_INT8_KERNELS.get(platform, []):
        ok, why = kernel.is_supported()
        if ok:
            return kernel
    raise ValueError("no kernel")
'''
SM_TEST = '''import torch

from proj.ops.triton_scaled_mm import triton_scaled_mm


def test_triton_scaled_mm():
    a = torch.ones(4, device="cuda")
    assert triton_scaled_mm(a).sum() == 8
'''


def _scaled_mm_project(extra: dict) -> dict:
    files = {
        "proj/__init__.py": "",
        "proj/platforms.py": SM_PLATFORMS,
        "proj/triton_utils.py": SM_TRITON_UTILS,
        "proj/utils.py": SM_UTILS,
        "proj/ops/__init__.py": "",
        "proj/ops/triton_scaled_mm.py": SM_KERNEL,
        "proj/kernels/__init__.py": SM_SELECTOR,
        "proj/kernels/triton.py": SM_TRITON_CLASS,
        "tests/test_triton_scaled_mm.py": SM_TEST,
    }
    files.update(extra)
    return files


def test_custom_op_launcher_read_only_by_a_rejected_kernel_class_is_info_naming_the_test(tmp_path):
    """GB#22: the Triton kernel's launcher is reached from the library only through a custom op
    (`direct_register_custom_op("int8_scaled_mm_func", _int8_scaled_mm_func)`, module-level code that
    calls nothing) that only `TritonInt8ScaledMMLinearKernel` reads as `torch.ops.proj.<op>`, a class
    whose `is_supported()` answers no on an NPU host and that the selector only asks. A test calls
    the launcher itself: policy P2's info, naming the test side and the rejected class."""
    files = _scaled_mm_project({})
    report = migrate_json(write_project(tmp_path, files))
    kernel = _at(report, "proj/ops/triton_scaled_mm.py", "NPU910", "@triton.jit", files)
    assert kernel["severity"] == "info", kernel["message"]
    assert "only from tests/benchmarks" in kernel["message"]
    assert "custom op `int8_scaled_mm_func`" in kernel["message"] and "TritonInt8ScaledMMLinearKernel" in kernel["message"]


def test_custom_op_read_by_code_an_npu_host_runs_stays_an_error(tmp_path):
    """Nearest true case: a model an NPU host runs also calls `torch.ops.proj.int8_scaled_mm_func`:
    the op, and so the launcher and its kernel, run there: kept as an error."""
    model = '''import torch


def forward(x):
    return torch.ops.proj.int8_scaled_mm_func(x)
'''
    files = _scaled_mm_project({"proj/model.py": model})
    report = migrate_json(write_project(tmp_path, files))
    kernel = _at(report, "proj/ops/triton_scaled_mm.py", "NPU910", "@triton.jit", files)
    assert kernel["severity"] == "error", kernel["message"]


def test_custom_op_named_in_a_string_stays_an_error(tmp_path):
    """Nearest true case: the op's name in a library string (a compilation pass's op list) may be
    looked up by name: no verdict, kept as an error."""
    passes = '''SPLITTING_OPS = ["proj::int8_scaled_mm_func"]
'''
    files = _scaled_mm_project({"proj/compilation.py": passes})
    report = migrate_json(write_project(tmp_path, files))
    kernel = _at(report, "proj/ops/triton_scaled_mm.py", "NPU910", "@triton.jit", files)
    assert kernel["severity"] == "error", kernel["message"]


# ------------------------------------------------------------------ GB#15: a device function
REGIONS = '''from proj.triton_utils import tl, triton


@triton.jit
def _emit_all_regions(current, out_ptr, BLOCK: tl.constexpr):
    col = tl.arange(0, BLOCK)
    tl.store(out_ptr + col, col - current)


@triton.jit
def _all_regions(cur_ptr, out_ptr, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    current = tl.load(cur_ptr + row)
    _emit_all_regions(current, out_ptr + row * BLOCK, BLOCK)


def select_all_regions(current, out):
    _all_regions[(current.numel(),)](current, out, 16)
    return out


def region_count(capacity):
    return capacity + 1
'''
# (a model an NPU host runs uses the module for something else: the module is imported there)
REGIONS_MODEL = '''from proj.ops.regions import region_count


def width(capacity):
    return region_count(capacity)
'''
# (the launch a few calls below the kernel class, as vLLM's step5 selectors are)
REGIONS_KERNEL = '''from proj.ops.regions import select_all_regions
from proj.platforms import current_platform


def _stage_two(current, out):
    return select_all_regions(current, out)


def _stage_one(current, out):
    return _stage_two(current, out)


class TritonRegionsKernel:
    @classmethod
    def is_supported(cls, compute_capability=None):
        if current_platform.is_cuda_alike() or current_platform.is_xpu():
            return True, None
        return False, "requires ROCm, CUDA or XPU."

    def apply(self, current, out):
        return _stage_one(current, out)
'''
REGIONS_SELECTOR = '''from proj.kernels.regions_kernel import TritonRegionsKernel

_POSSIBLE_KERNELS = {"cuda": [TritonRegionsKernel]}


def choose_kernel(platform):
    for kernel in _POSSIBLE_KERNELS.get(platform, []):
        ok, why = kernel.is_supported()
        if ok:
            return kernel
    raise ValueError("no kernel")
'''


# (another module's kernel also calls the device function; it is launched only a few calls below a
# ROCm-only branch, which the first passes read from the kernel, one step nearer than from the
# device function: its place is a named scope before supportgates27 runs)
PREP = '''from proj.ops.regions import _emit_all_regions
from proj.platforms import current_platform
from proj.triton_utils import tl, triton


@triton.jit
def _prep_kernel(cur_ptr, out_ptr, BLOCK: tl.constexpr):
    _emit_all_regions(tl.load(cur_ptr), out_ptr, BLOCK)


def launch_prep(current, out):
    _prep_kernel[(1,)](current, out, 16)
    return out


def prep_a(current, out):
    return launch_prep(current, out)


def prep_b(current, out):
    return prep_a(current, out)


def prep_c(current, out):
    return prep_b(current, out)


def prepare(current, out):
    if current_platform.is_rocm():
        return prep_c(current, out)
    return out
'''
PREP_MODEL = '''from proj.ops.prep import prepare


def forward(current, out):
    return prepare(current, out)
'''


def _regions_project(extra: dict) -> dict:
    files = {
        "proj/__init__.py": "",
        "proj/platforms.py": SM_PLATFORMS,
        "proj/triton_utils.py": SM_TRITON_UTILS,
        "proj/ops/__init__.py": "",
        "proj/ops/regions.py": REGIONS,
        "proj/kernels/__init__.py": REGIONS_SELECTOR,
        "proj/kernels/regions_kernel.py": REGIONS_KERNEL,
        "proj/models/regions_model.py": REGIONS_MODEL,
        "proj/ops/prep.py": PREP,
        "proj/models/prep_model.py": PREP_MODEL,
    }
    files.update(extra)
    return files


def _scope_reason(report: dict, path: str, line: int) -> str | None:
    return next((s["reason"] for s in report["skipped"] if s["path"] == path and s.get("start_line") == line), None)


def test_device_function_inside_a_kernel_only_a_rejected_class_launches_is_a_named_scope(tmp_path):
    """GB#15: `_emit_all_regions` (a Triton device function) is called only inside `_all_regions`,
    a kernel launched only by a kernel class whose support check answers no on an NPU host
    (supportgates27 makes it a named scope, after the device-function pass first ran): the device
    function becomes the same kind of named scope, naming the kernel that calls it."""
    files = _regions_project({})
    report = migrate_json(write_project(tmp_path, files))
    line = next(n for n, text in enumerate(REGIONS.splitlines(), 1) if text.startswith("@triton.jit"))
    assert not [f for f in report["findings"] if f["path"] == "proj/ops/regions.py" and f["code"] == "NPU910"]
    reason = _scope_reason(report, "proj/ops/regions.py", line)
    assert reason is not None and reason.startswith("not run on an NPU host (NPU910)") and "`_all_regions`" in reason


def test_device_function_also_inside_a_live_kernel_stays_an_error(tmp_path):
    """Nearest true case: another module's kernel, launched by a function a model an NPU host runs
    calls, also calls the device function: it runs there, kept as an error."""
    live = '''from proj.ops.regions import _emit_all_regions
from proj.triton_utils import tl, triton


@triton.jit
def _live_regions(cur_ptr, out_ptr, BLOCK: tl.constexpr):
    _emit_all_regions(tl.load(cur_ptr), out_ptr, BLOCK)


def live_regions(current, out):
    _live_regions[(1,)](current, out, 16)
    return out
'''
    model = '''from proj.ops.live import live_regions


def forward(current, out):
    return live_regions(current, out)
'''
    files = _regions_project({"proj/ops/live.py": live, "proj/model.py": model})
    report = migrate_json(write_project(tmp_path, files))
    device = _at(report, "proj/ops/regions.py", "NPU910", "@triton.jit", files)
    assert device["severity"] == "error", device["message"]


# ------------------------------------------------------------------ GA#31, GA#30: registry-only backends
BACKENDS = "vllm/v1/attention/backends"
ATTN_REGISTRY = '''import enum


class AttentionBackendEnum(enum.Enum):
    FLASH_ATTN = "vllm.v1.attention.backends.flash_attn.FlashAttentionBackend"
    FLASHINFER_MLA_SPARSE_SM90 = (
        "vllm.v1.attention.backends.mla.flashinfer_mla_sparse_sm90."
        "FlashInferMLASparseSM90Backend"
    )
'''
SM90 = '''class _SM90State:
    def __init__(self, workspace):
        from flashinfer.mla import BatchMLAPagedAttentionWrapper

        self.wrapper = BatchMLAPagedAttentionWrapper(workspace)


class FlashInferMLASparseSM90Impl:
    def __init__(self, workspace):
        self.state = _SM90State(workspace)


class FlashInferMLASparseSM90Backend:
    @staticmethod
    def get_impl_cls():
        return FlashInferMLASparseSM90Impl

    @classmethod
    def supports_compute_capability(cls, capability):
        return capability is not None and capability.major == 9
'''


def _backend_project(extra: dict) -> dict:
    files = {
        "vllm/platforms/interface.py": INTERFACE,
        f"{BACKENDS}/registry.py": ATTN_REGISTRY,
        f"{BACKENDS}/mla/flashinfer_mla_sparse_sm90.py": SM90,
    }
    files.update(extra)
    return files


def test_backend_named_only_by_the_attention_registry_is_info_naming_the_plugin_fact(tmp_path):
    """GA#31: `FlashInferMLASparseSM90Backend` is named only by a dotted string of vLLM's attention
    backend registry; vllm-ascend's NPUPlatform.get_attn_backend_cls returns only its own backends,
    so the backend's lazy `flashinfer.mla` import (in `_SM90State`, which only the backend's impl
    builds) is info naming the fact."""
    files = _backend_project({})
    report = migrate_json(write_project(tmp_path, files))
    found = _at(report, f"{BACKENDS}/mla/flashinfer_mla_sparse_sm90.py", "NPU911", "from flashinfer.mla", files)
    assert found["severity"] == "info", found["message"]
    assert "vllm-ascend" in found["message"] and "get_attn_backend_cls" in found["message"]


def test_backend_another_library_module_imports_stays_an_error(tmp_path):
    """Nearest true case: a library module builds the backend's impl itself (a model that picks it
    by name, not through the registry): reached there, kept as an error with no plugin fact."""
    model = '''from vllm.v1.attention.backends.mla.flashinfer_mla_sparse_sm90 import FlashInferMLASparseSM90Impl


def build(workspace):
    return FlashInferMLASparseSM90Impl(workspace)
'''
    files = _backend_project({"vllm/models/sparse_model.py": model})
    report = migrate_json(write_project(tmp_path, files))
    found = _at(report, f"{BACKENDS}/mla/flashinfer_mla_sparse_sm90.py", "NPU911", "from flashinfer.mla", files)
    assert found["severity"] == "error" and "vllm-ascend" not in found["message"]


def test_backend_outside_the_table_stays_an_error(tmp_path):
    """Nearest true case: another backend of the same registry that the table does not list (its
    module not read from the plugin's sources) keeps its finding."""
    other = SM90.replace("FlashInferMLASparseSM90", "FlashInferMLASparseSM100").replace("_SM90State", "_SM100State")
    registry = ATTN_REGISTRY + '''    FLASHINFER_MLA_SPARSE_SM100 = "vllm.v1.attention.backends.mla.flashinfer_mla_sparse_sm100.FlashInferMLASparseSM100Backend"
'''
    files = _backend_project({f"{BACKENDS}/registry.py": registry, f"{BACKENDS}/mla/flashinfer_mla_sparse_sm100.py": other})
    report = migrate_json(write_project(tmp_path, files))
    found = _at(report, f"{BACKENDS}/mla/flashinfer_mla_sparse_sm100.py", "NPU911", "from flashinfer.mla", files)
    assert found["severity"] == "error" and "vllm-ascend" not in found["message"]
