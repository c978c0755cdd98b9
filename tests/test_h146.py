"""vLLM code that vllm-ascend rejects or replaces (audit rounds 30 EA#24, EC#24 and 29 DB#25; helper
h146, issue #16; ascendfacts30.py): each false shape paired with the nearest true case that must stay
reported at its severity."""

from __future__ import annotations

from .precision_helpers import migrate_json, write_project
from .precision_helpers import VLLM_PLATFORM_INTERFACE as INTERFACE

QUANT = "vllm/model_executor/layers/quantization"
REGISTRY = '''def get_quantization_config(quantization: str):
    from .compressed_tensors.compressed_tensors import CompressedTensorsConfig

    method_to_config = {"compressed-tensors": CompressedTensorsConfig}
    return method_to_config[quantization]
'''
CONFIG = '''from .schemes.w4a4_nvfp4 import CompressedTensorsW4A4Fp4
from .embedding import CompressedTensorsEmbedding


class CompressedTensorsConfig:
    def get_scheme(self, layer):
        if layer.is_embedding:
            return CompressedTensorsEmbedding()
        return CompressedTensorsW4A4Fp4()
'''
SCHEME = '''import torch


class CompressedTensorsW4A4Fp4:
    def process_weights(self, layer):
        layer.weight_scale = layer.weight_scale.to(torch.float8_e4m3fn)
'''
EMBEDDING = '''import torch

from vllm.triton_utils import tl, triton


@triton.jit
def _dequant_gather_kernel(x_ptr, out_ptr, n: tl.constexpr):
    offs = tl.arange(0, n)
    tl.store(out_ptr + offs, tl.load(x_ptr + offs))


def _dequant_gather(x):
    out = torch.empty_like(x)
    _dequant_gather_kernel[(1,)](x, out, x.numel())
    return out


class CompressedTensorsEmbedding:
    def embedding(self, layer, ids):
        return _dequant_gather(layer.weight)[ids]
'''
SCALED_MM = '''import torch

from vllm.triton_utils import tl, triton


@triton.jit
def scaled_mm_kernel(a_ptr, c_ptr, n: tl.constexpr):
    offs = tl.arange(0, n)
    tl.store(c_ptr + offs, tl.load(a_ptr + offs))


def triton_scaled_mm(a):
    c = torch.empty_like(a)
    scaled_mm_kernel[(1,)](a, c, a.numel())
    return c
'''
# (vLLM's scaled-mm kernel selection, used by every FP8 method, launches the compressed-tensors kernel)
KERNEL_SELECTION = '''from vllm.model_executor.layers.quantization.compressed_tensors.triton_scaled_mm import triton_scaled_mm


def apply_scaled_mm(a):
    return triton_scaled_mm(a)
'''
ATTENTION = '''from typing import cast

from vllm.model_executor.layers.quantization.compressed_tensors.compressed_tensors import CompressedTensorsConfig


def kv_cache_scheme(quant_method):
    if isinstance(quant_method.quant_config, CompressedTensorsConfig):
        return cast(CompressedTensorsConfig, quant_method.quant_config).kv_cache_scheme
    return None
'''
# (a model that builds the scheme itself, whatever the quantization method: an NPU host runs it)
BUILDER = '''from vllm.model_executor.layers.quantization.compressed_tensors.schemes.w4a4_nvfp4 import (
    CompressedTensorsW4A4Fp4,
)


def build_scheme():
    return CompressedTensorsW4A4Fp4()
'''


def _project(extra: dict | None = None, vllm: bool = True) -> dict:
    files = {
        f"{QUANT}/__init__.py": REGISTRY,
        f"{QUANT}/compressed_tensors/__init__.py": "",
        f"{QUANT}/compressed_tensors/compressed_tensors.py": CONFIG,
        f"{QUANT}/compressed_tensors/schemes/__init__.py": "",
        f"{QUANT}/compressed_tensors/schemes/w4a4_nvfp4.py": SCHEME,
        f"{QUANT}/compressed_tensors/embedding.py": EMBEDDING,
        f"{QUANT}/compressed_tensors/triton_scaled_mm.py": SCALED_MM,
        "vllm/model_executor/kernels/scaled_mm.py": KERNEL_SELECTION,
        "vllm/model_executor/layers/attention/attention.py": ATTENTION,
    }
    if vllm:
        files["vllm/platforms/interface.py"] = INTERFACE
    files.update(extra or {})
    return files


def _finding(report: dict, path: str, code: str) -> dict:
    found = [f for f in report["findings"] if f["path"] == path and f["code"] == code and not f["fixable"]]
    assert len(found) == 1, (path, code, [f["message"] for f in report["findings"] if f["path"] == path])
    return found[0]


def test_compressed_tensors_code_vllm_ascend_replaces_is_info_naming_the_fact(tmp_path):
    """EC#24, EA#24: vllm-ascend removes "compressed-tensors" from vLLM's methods and registers its own
    config under that name, so vLLM's scheme (FP8 compute) and embedding method (a Triton kernel) are
    never built on an Ascend host: info naming the fact and its vllm-ascend source, not a scope. The
    kernel module vLLM's scaled-mm selection imports (`triton_scaled_mm`, used by other methods) keeps
    its error: an Ascend host may run it. `isinstance`/`cast` of the config elsewhere builds nothing."""
    report = migrate_json(write_project(tmp_path, _project()))
    scheme = _finding(report, f"{QUANT}/compressed_tensors/schemes/w4a4_nvfp4.py", "NPU913")
    assert scheme["severity"] == "info"
    assert "vllm-ascend" in scheme["message"] and "compressed_tensors_config.py" in scheme["message"]
    kernel = _finding(report, f"{QUANT}/compressed_tensors/embedding.py", "NPU910")
    assert kernel["severity"] == "info" and "AscendCompressedTensorsConfig" in kernel["message"]
    kept = _finding(report, f"{QUANT}/compressed_tensors/triton_scaled_mm.py", "NPU910")
    assert kept["severity"] == "error" and "vllm-ascend" not in kept["message"]
    assert not any("compressed_tensors" in s.get("path", "") and "vllm-ascend" in s.get("reason", "")
                   for s in report["skipped"])


def test_scheme_another_module_builds_itself_stays_an_error(tmp_path):
    """Nearest true case: a model that builds the scheme itself (not through the method's config)
    reaches its FP8 compute on an Ascend host whatever the quantization method: kept."""
    report = migrate_json(write_project(tmp_path, _project({"vllm/models/builder.py": BUILDER})))
    scheme = _finding(report, f"{QUANT}/compressed_tensors/schemes/w4a4_nvfp4.py", "NPU913")
    assert scheme["severity"] == "error"


def test_not_vllm_itself_the_facts_do_not_apply(tmp_path):
    """Nearest true case: the same tree without vLLM's platform interface (`verify_quantization`) is
    not vLLM, and vllm-ascend says nothing of it: kept."""
    report = migrate_json(write_project(tmp_path, _project(vllm=False)))
    scheme = _finding(report, f"{QUANT}/compressed_tensors/schemes/w4a4_nvfp4.py", "NPU913")
    assert scheme["severity"] == "error"


PENALTIES = '''import torch

from vllm.triton_utils import tl, triton


class PenaltiesState:
    def apply(self, logits, counts):
        bincount(counts)
        apply_penalties(logits, counts)


@triton.jit
def _penalties_kernel(logits_ptr, n: tl.constexpr):
    offs = tl.arange(0, n)
    tl.store(logits_ptr + offs, tl.load(logits_ptr + offs) * 0.5)


def apply_penalties(logits, counts):
    _penalties_kernel[(1,)](logits, logits.numel())


@triton.jit
def _bincount_kernel(counts_ptr, n: tl.constexpr):
    offs = tl.arange(0, n)
    tl.store(counts_ptr + offs, tl.load(counts_ptr + offs) + 1)


def bincount(counts):
    _bincount_kernel[(1,)](counts, counts.numel())
'''
SAMPLER = '''from vllm.v1.worker.gpu.sample import penalties


def sample(logits, counts):
    penalties.apply_penalties(logits, counts)
'''
EARLY_IMPORTER = '''from vllm.v1.worker.gpu.sample.penalties import apply_penalties


def sample(logits, counts):
    apply_penalties(logits, counts)
'''
PENALTIES_PATH = "vllm/v1/worker/gpu/sample/penalties.py"


def test_penalty_kernels_of_functions_vllm_ascend_rebinds_are_info(tmp_path):
    """DB#25: vllm-ascend's V2 patch rebinds `penalties.apply_penalties` and `penalties.bincount`, so
    the module's own calls (global lookups) and `penalties.apply_penalties(...)` elsewhere reach the
    plugin's functions: the Triton kernels only vLLM's versions launch become info naming the patch."""
    files = {"vllm/platforms/interface.py": INTERFACE, PENALTIES_PATH: PENALTIES,
             "vllm/v1/worker/gpu/sample/sampler.py": SAMPLER}
    report = migrate_json(write_project(tmp_path, files))
    kernel = _finding(report, PENALTIES_PATH, "NPU910")
    assert kernel["severity"] == "info" and "patch_triton.py" in kernel["message"]


def test_penalty_kernel_a_from_import_binds_before_the_patch_stays_an_error(tmp_path):
    """Nearest true case: `from penalties import apply_penalties` binds vLLM's own function (the
    import may run before the plugin's patch), so its kernel may run on an Ascend host: kept."""
    files = {"vllm/platforms/interface.py": INTERFACE, PENALTIES_PATH: PENALTIES,
             "vllm/v1/worker/gpu/sample/sampler.py": EARLY_IMPORTER}
    report = migrate_json(write_project(tmp_path, files))
    kernel = _finding(report, PENALTIES_PATH, "NPU910")
    assert kernel["severity"] == "error"


GRAPHS = '''import torch


class CudaGraphManager:
    def capture(self, fn):
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            fn()
        return graph
'''


def test_graph_capture_of_model_runner_v2_vllm_ascend_remaps_is_info(tmp_path):
    """DA#2: vllm-ascend runs Model Runner V2 (vllm/v1/worker/gpu/) under `torch_cuda_wrapper()`,
    which sets `torch.cuda.CUDAGraph = torch.npu.NPUGraph` and `torch.cuda.graph = torch.npu.graph`:
    the capture builds an NPU graph there (inference): info naming the wrapper. The same capture in
    another module of vLLM (not run under the wrapper) keeps its error."""
    files = {"vllm/platforms/interface.py": INTERFACE, "vllm/v1/worker/gpu/cudagraph_utils.py": GRAPHS,
             "vllm/compilation/cuda_graph.py": GRAPHS.replace("CudaGraphManager", "CompilationGraphs")}
    report = migrate_json(write_project(tmp_path, files))
    remapped = _finding(report, "vllm/v1/worker/gpu/cudagraph_utils.py", "NPU202")
    assert remapped["severity"] == "info" and "torch_cuda_wrapper" in remapped["message"]
    kept = _finding(report, "vllm/compilation/cuda_graph.py", "NPU202")
    assert kept["severity"] == "error" and "vllm-ascend" not in kept["message"]
