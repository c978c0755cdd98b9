"""Audit round 31 rows left by wave 31 (helper h163, issue #16): vllm-ascend facts (ascendfacts30.py)
and same-file gates in tests and benchmarks. Each false shape is paired with the nearest true case
(same shape, reached on an NPU host) that stays reported at its severity."""

from __future__ import annotations

from .precision_helpers import migrate_json, write_project
from .precision_helpers import VLLM_PLATFORM_INTERFACE as INTERFACE



def _findings(report: dict, path: str, code: str) -> list:
    return [f for f in report["findings"] if f["path"] == path and f["code"] == code and not f["fixable"]]


def _at(report: dict, path: str, code: str, line_text: str, files: dict, before: int = 0) -> dict:
    """The finding of `code` standing for the line holding `line_text`, or `before` lines above it
    (its own line or an also-line)."""
    line = next(n for n, text in enumerate(files[path].splitlines(), 1) if line_text in text) - before
    found = [f for f in _findings(report, path, code)
             if f["line"] == line or any(a[0] == line for a in f.get("also", ()))]
    assert len(found) == 1, (path, code, line, [(f["line"], f["message"]) for f in report["findings"] if f["path"] == path])
    return found[0]


# ---------------------------------------------------------------- FA#11: gumbel.apply_temperature

GUMBEL_PATH = "vllm/v1/worker/gpu/sample/gumbel.py"
GUMBEL = '''import torch

from vllm.triton_utils import tl, triton


@triton.jit
def _temperature_kernel(logits_ptr, n: tl.constexpr):
    offs = tl.arange(0, n)
    tl.store(logits_ptr + offs, tl.load(logits_ptr + offs) * 0.5)


def apply_temperature(logits, temperature):
    _temperature_kernel[(1,)](logits, logits.numel())


@triton.jit
def _gumbel_sample_kernel(logits_ptr, n: tl.constexpr):
    offs = tl.arange(0, n)
    tl.store(logits_ptr + offs, tl.load(logits_ptr + offs) + 1.0)


def gumbel_sample(logits):
    _gumbel_sample_kernel[(1,)](logits, logits.numel())
'''
# (vLLM's states.py from-imports apply_temperature: the plugin rebinds `states.apply_temperature`)
STATES = '''from vllm.v1.worker.gpu.sample.gumbel import apply_temperature


def apply(logits, temperature):
    apply_temperature(logits, temperature)
'''
# (the watermarker from-imports gumbel_sample: the plugin does not patch it)
WATERMARKER = '''from vllm.v1.worker.gpu.sample.gumbel import gumbel_sample


def watermark(logits):
    return gumbel_sample(logits)
'''
# (an importer the plugin does not patch: it binds vLLM's apply_temperature)
OTHER_TEMPERATURE = '''from vllm.v1.worker.gpu.sample.gumbel import apply_temperature


def scale(logits, temperature):
    apply_temperature(logits, temperature)
'''


def _gumbel_project(extra: dict | None = None) -> dict:
    files = {"vllm/platforms/interface.py": INTERFACE, GUMBEL_PATH: GUMBEL,
             "vllm/v1/worker/gpu/sample/states.py": STATES, "vllm/v1/watermarking/watermarker.py": WATERMARKER}
    files.update(extra or {})
    return files


def test_temperature_kernel_the_plugin_rebinds_is_split_off_as_info(tmp_path):
    """FA#11: vllm-ascend rebinds `gumbel.apply_temperature` and `states.apply_temperature`, so
    `_temperature_kernel` (launched only by vLLM's `apply_temperature`) never runs on an Ascend host:
    the place is split off the file's merged NPU910 finding as info naming the patch. The
    `gumbel_sample` kernel, which the watermarker reaches through an import the plugin does not
    patch, stays an error in its own finding."""
    files = _gumbel_project()
    report = migrate_json(write_project(tmp_path, files))
    temperature = _at(report, GUMBEL_PATH, "NPU910", "def _temperature_kernel", files, before=1)
    assert temperature["severity"] == "info" and "patch_triton.py" in temperature["message"]
    assert "apply_temperature" in temperature["message"] and not temperature.get("also")
    sample = _at(report, GUMBEL_PATH, "NPU910", "def _gumbel_sample_kernel", files, before=1)
    assert sample["severity"] == "error" and "vllm-ascend" not in sample["message"]


def test_temperature_kernel_an_unpatched_importer_reaches_stays_an_error(tmp_path):
    """Nearest true case: another module from-imports `apply_temperature` (the plugin rebinds only
    gumbel's and states' globals), so vLLM's function and its kernel may run: nothing split off."""
    files = _gumbel_project({"vllm/v1/worker/gpu/sample/other.py": OTHER_TEMPERATURE})
    report = migrate_json(write_project(tmp_path, files))
    kernels = _findings(report, GUMBEL_PATH, "NPU910")
    assert [f["severity"] for f in kernels] == ["error"]
    assert "vllm-ascend" not in kernels[0]["message"]


# ---------------------------------------------------------------- FC#24: FLA's chunk_gated_delta_rule

FLA = "vllm/third_party/flash_linear_attention/ops"
FLA_INIT = '''from .chunk import chunk_gated_delta_rule

__all__ = ["chunk_gated_delta_rule"]
'''
FLA_CHUNK = '''import torch

from .chunk_scaled_dot_kkt import chunk_scaled_dot_kkt_fwd


def chunk_gated_delta_rule_fwd(q, k):
    return chunk_scaled_dot_kkt_fwd(k)


class ChunkGatedDeltaRuleFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k):
        return chunk_gated_delta_rule_fwd(q, k)


def chunk_gated_delta_rule(q, k):
    return ChunkGatedDeltaRuleFunction.apply(q, k)
'''
FLA_KKT = '''import torch

from vllm.triton_utils import tl, triton


@triton.jit
def chunk_scaled_dot_kkt_fwd_kernel(k_ptr, n: tl.constexpr):
    offs = tl.arange(0, n)
    tl.store(k_ptr + offs, tl.load(k_ptr + offs) * 2.0)


def chunk_scaled_dot_kkt_fwd(k):
    chunk_scaled_dot_kkt_fwd_kernel[(1,)](k, k.numel())
    return k
'''
# (the model imports the function from the package, whose attribute the plugin rebinds)
GDN_FROM_PACKAGE = '''from vllm.third_party.flash_linear_attention.ops import (
    chunk_gated_delta_rule as fla_chunk_gated_delta_rule,
)


def forward_native(q, k):
    return fla_chunk_gated_delta_rule(q, k)
'''
# (the model imports it from the defining module, which the plugin does not patch)
GDN_FROM_MODULE = '''from vllm.third_party.flash_linear_attention.ops.chunk import chunk_gated_delta_rule


def forward_native(q, k):
    return chunk_gated_delta_rule(q, k)
'''


def _fla_project(model: str) -> dict:
    return {"vllm/platforms/interface.py": INTERFACE, f"{FLA}/__init__.py": FLA_INIT, f"{FLA}/chunk.py": FLA_CHUNK,
            f"{FLA}/chunk_scaled_dot_kkt.py": FLA_KKT,
            "vllm/model_executor/layers/mamba/gdn/qwen_gdn_linear_attn.py": model}


def test_fla_kernel_only_the_rebound_package_function_reaches_is_info(tmp_path):
    """FC#24: chunk_scaled_dot_kkt.py's kernel is called only inside chunk.py's
    `chunk_gated_delta_rule` path, and the models import that function from the FLA package, whose
    attribute vllm-ascend's worker patch rebinds before the model loads: info naming the patch."""
    report = migrate_json(write_project(tmp_path, _fla_project(GDN_FROM_PACKAGE)))
    kernel = _findings(report, f"{FLA}/chunk_scaled_dot_kkt.py", "NPU910")
    assert [f["severity"] for f in kernel] == ["info"]
    assert "fla_ops.chunk_gated_delta_rule" in kernel[0]["message"]


def test_fla_kernel_reached_through_the_defining_module_stays_an_error(tmp_path):
    """Nearest true case: `from ...ops.chunk import chunk_gated_delta_rule` binds vLLM's function
    (the plugin rebinds the package's attribute, not chunk.py's), so the kernel may run: kept."""
    report = migrate_json(write_project(tmp_path, _fla_project(GDN_FROM_MODULE)))
    kernel = _findings(report, f"{FLA}/chunk_scaled_dot_kkt.py", "NPU910")
    assert [f["severity"] for f in kernel] == ["error"]
    assert "vllm-ascend" not in kernel[0]["message"]


# ---------------------------------------------------------------- FB#15: module-level guarded imports

GUARDED_MODEL = '''import inspect

import torch

try:
    from flashinfer.norm import fused_norm, supports_fused_norm
except (ImportError, AttributeError):
    fused_norm = None

    def supports_fused_norm(*_args: object) -> bool:
        return False


try:
    from flashinfer.norm.kernels.router import run as norm_router

    HAS_ROUTER = "router_input" in inspect.signature(norm_router).parameters
except ImportError:
    HAS_ROUTER = False


HAS_POST_WEIGHT = "post_weight" in inspect.signature(supports_fused_norm).parameters


def norm(x, w, router=None):
    if fused_norm is not None and supports_fused_norm(x, w):
        if router is not None and HAS_ROUTER:
            return norm_router(x, w, router)
        return fused_norm(x, w)
    return x * w


def gate(x, w):
    assert fused_norm is not None
    return fused_norm(x, w)


def gather(x):
    from flashinfer.comm import all_gather_norm

    return all_gather_norm(x)
'''
# (the nearest true case: the fallback is None and a function calls it with no test first)
UNCHECKED_MODEL = GUARDED_MODEL + '''

def always(x, w):
    return fused_norm(x, w)
'''


def test_guarded_imports_whose_names_are_fallbacks_or_tested_are_named_scopes(tmp_path):
    """FB#15: `try: from flashinfer.norm import f, supports_f except ImportError: f = None; def
    supports_f(...): return False` read at module level through the fallback function
    (`inspect.signature(supports_f)`), `f` read only in `f is not None and ...` and after `assert f is
    not None`; and a probe whose body sets a flag from `inspect.signature(run)`, its name called only
    behind that flag: on an NPU host the fallbacks run as written, so no import is an open finding."""
    files = {"pkg/model.py": GUARDED_MODEL}
    report = migrate_json(write_project(tmp_path, files))
    lazy = _findings(report, "pkg/model.py", "NPU911")
    assert [(f["line"], f.get("also", [])) for f in lazy] == [(39, [])], lazy
    scopes = [s for s in report["skipped"] if s["path"] == "pkg/model.py" and "NPU911" in s["reason"]]
    lines = {n for s in scopes for n in range(s["start_line"], s["end_line"] + 1)}
    assert {6, 15} <= lines, scopes


def test_guarded_import_whose_none_fallback_is_called_untested_stays_an_error(tmp_path):
    """Nearest true case: a function calls the `None` fallback with no test first (it fails on an
    NPU host): the import keeps its error, the file's lazy import merged into it."""
    files = {"pkg/model.py": UNCHECKED_MODEL}
    report = migrate_json(write_project(tmp_path, files))
    found = _findings(report, "pkg/model.py", "NPU911")
    assert [(f["line"], f["severity"]) for f in found] == [(6, "error")], found


# ---------------------------------------------------------------- FC#4: a private helper after the load

COMMUNICATOR = '''import torch

from .nccl_wrapper import NCCLLibrary


class Communicator:
    def __init__(self, world_size, library_path=None):
        self.world_size = world_size
        try:
            self.nccl = NCCLLibrary(library_path)
        except Exception:
            self.available = False
            self.disabled = True
            return
        self.available = True
        self.disabled = False
        self._init_comm()

    @classmethod
    def from_bytes(cls, unique_id, world_size, library_path=None):
        self = cls.__new__(cls)
        self.world_size = world_size
        try:
            self.nccl = NCCLLibrary(library_path)
        except Exception as e:
            raise RuntimeError("failed to load the NCCL library") from e
        self.disabled = False
        self._init_comm()
        return self

    def _init_comm(self):
        self.comm = self.nccl.ncclCommInitRank(self.world_size, 0)

    def all_reduce(self, tensor):
        if self.disabled:
            return
        self.nccl.ncclAllReduce(tensor, self.comm)
'''
# (the nearest true case: a public method calls the helper without asking whether the library loaded)
UNGUARDED_CALLER = COMMUNICATOR + '''
    def reinit(self):
        self._init_comm()
'''
NCCL_WRAPPER = '''import ctypes


class NCCLLibrary:
    def __init__(self, path=None):
        self.lib = ctypes.CDLL(path or "libnccl.so.2")
'''


def _comm_report(tmp_path, text: str) -> list:
    files = {"pkg/comm.py": text, "pkg/nccl_wrapper.py": NCCL_WRAPPER, "pkg/__init__.py": ""}
    report = migrate_json(write_project(tmp_path, files))
    return [f for f in _findings(report, "pkg/comm.py", "NPU990") if f["severity"] != "info"]


def test_private_helper_called_only_after_the_library_loaded_is_a_named_scope(tmp_path):
    """FC#4: `_init_comm` (its `self.nccl.ncclCommInitRank`) is called only after `self.nccl =
    NCCLLibrary(path)` succeeded: in `__init__` after the `try` whose `except` disables the feature
    and returns, and in a classmethod after a `try` whose `except` raises. It never runs on an NPU
    host: no open finding there."""
    open_findings = _comm_report(tmp_path, COMMUNICATOR)
    assert not [f for f in open_findings if "ncclCommInitRank" in json_text(f)], open_findings


def test_private_helper_a_method_calls_without_the_load_stays_reported(tmp_path):
    """Nearest true case: `reinit` calls `_init_comm` with no test that the library loaded (on an
    NPU host `self.nccl` is missing there): the helper's NCCL call stays reported."""
    open_findings = _comm_report(tmp_path, UNGUARDED_CALLER)
    assert [f for f in open_findings if "ncclCommInitRank" in json_text(f)], open_findings


def json_text(finding: dict) -> str:
    return finding["source"] + " " + " ".join(a[2] for a in finding.get("also", ()))
