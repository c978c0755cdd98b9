"""Gates in callers and the project's own CUDA-built `_C` ops (helper h194, issue #16, rounds 32
and 33; opcalls34.py, ...): each false shape paired with the nearest true case that must stay
reported as before."""

from __future__ import annotations

from .precision_helpers import migrate_json, write_project

# ------------------------------------------------------------------ GA#14: a benchmark's `_C` op call first
CUSTOM_OPS = '''import torch


def scaled_fp8_quant(x, scale=None, per_token=False):
    out = torch.empty_like(x)
    if scale is None:
        if per_token:
            scale = torch.empty((x.shape[0], 1))
            torch.ops._C.dynamic_per_token_scaled_fp8_quant(out, x, scale)
        else:
            scale = torch.empty(1)
            torch.ops._C.dynamic_scaled_fp8_quant(out, x, scale)
    else:
        torch.ops._C.static_scaled_fp8_quant(out, x, scale)
    return out, scale


def silu_and_mul(out, x):
    if x.is_cpu:
        return torch.nn.functional.silu(x[..., : x.shape[-1] // 2]) * x[..., x.shape[-1] // 2:]
    torch.ops._C.silu_and_mul(out, x)
    return out
'''
KERNEL_CU = '''#include <cuda_runtime.h>

__global__ void quant_kernel(float* x) { x[threadIdx.x] = 0.f; }
'''
BENCH = '''import torch

from proj import _custom_ops as ops


def bench_run(m, k):
    a = torch.randn((m, k), device="cuda")
    _, a_scale = ops.scaled_fp8_quant(a)
    w = torch.empty((m, k), device="cuda", dtype=torch.float8_e4m3fn)
    return w, a_scale


if __name__ == "__main__":
    bench_run(16, 32)
'''
# (nearest true case: the benchmark calls a wrapper with a path that does not reach the op)
BENCH_PORTABLE = BENCH.replace("_, a_scale = ops.scaled_fp8_quant(a)", "a_scale = ops.silu_and_mul(a, a)")
# (nearest true case: the same call in a library module; the op's port may come with its caller's)
LIBRARY = BENCH.replace('\n\nif __name__ == "__main__":\n    bench_run(16, 32)\n', "\n")


def _op_project(tmp_path, files: dict) -> dict:
    base = {"setup.py": "from setuptools import setup\nsetup(name='proj')\n", "proj/__init__.py": "",
            "proj/_custom_ops.py": CUSTOM_OPS, "csrc/quant.cu": KERNEL_CU}
    return migrate_json(write_project(tmp_path, {**base, **files}))


def _fp8(report: dict, path: str) -> list:
    return [f for f in report["findings"] if f["path"] == path and f["code"] == "NPU913"]


def test_fp8_after_a_benchmarks_call_of_a_cuda_built_op_is_a_named_scope(tmp_path):
    """GA#14: `ops.scaled_fp8_quant(a)` calls a `torch.ops._C` op on every path; an NPU host has no
    vLLM `_C` (vllm-ascend registers `torch.ops._C_ascend`), so the FP8 line after it never runs."""
    report = _op_project(tmp_path, {"benchmarks/bench_quant.py": BENCH})
    assert any(f["code"] == "NPU912" for f in report["findings"])
    assert not _fp8(report, "benchmarks/bench_quant.py"), report["findings"]
    scope = [s for s in report["skipped"] if s["path"] == "benchmarks/bench_quant.py" and s["start_line"] == 9]
    assert len(scope) == 1, report["skipped"]
    reason = scope[0]["reason"]
    assert reason.startswith("not run on an NPU host (NPU913): after a call that fails first")
    assert "the call at line 8" in reason and "`ops.scaled_fp8_quant`" in reason and "_C_ascend" in reason


def test_fp8_after_a_wrapper_with_a_portable_path_stays_an_error(tmp_path):
    """Nearest true case: `silu_and_mul` returns before its op on a CPU tensor: it may pass."""
    report = _op_project(tmp_path, {"benchmarks/bench_quant.py": BENCH_PORTABLE})
    found = _fp8(report, "benchmarks/bench_quant.py")
    assert [f["severity"] for f in found] == ["error"], report["findings"]


def test_fp8_after_the_same_call_in_a_library_module_stays_an_error(tmp_path):
    """Nearest true case: a library function makes the same call; it stays reported."""
    report = _op_project(tmp_path, {"proj/quant.py": LIBRARY})
    found = _fp8(report, "proj/quant.py")
    assert [f["severity"] for f in found] == ["error"], report["findings"]


def test_fp8_after_the_call_without_a_reported_cuda_source_stays_an_error(tmp_path):
    """Nearest true case: no CUDA source in the run (NPU912): the op may come from elsewhere."""
    root = write_project(tmp_path, {"setup.py": "from setuptools import setup\nsetup(name='proj')\n",
                                    "proj/__init__.py": "", "proj/_custom_ops.py": CUSTOM_OPS,
                                    "benchmarks/bench_quant.py": BENCH})
    report = migrate_json(root)
    found = _fp8(report, "benchmarks/bench_quant.py")
    assert [f["severity"] for f in found] == ["error"], report["findings"]


# ------------------------------------------------------------------ HC#9: imported only under a missing `_C` op
NORM_TP = '''import torch

_FUSED_AR_RMS = getattr(torch.ops._C, "fused_allreduce_rms", None)


class NormTP:
    def __init__(self, world):
        self.world = world
        self.workspace = None
        if _FUSED_AR_RMS is not None and world > 1:
            from .workspace import get_workspace

            self.workspace = get_workspace(world)

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6)
'''
WORKSPACE = '''try:
    from cuda.bindings import runtime as cudart
except ImportError:
    from cuda import cudart


def get_workspace(world):
    return [cudart.cudaMalloc(1 << 20) for _ in range(world)]
'''
# (nearest true case: the op is looked up in the plugin's own namespace, which an NPU host has)
NORM_TP_ASCEND = NORM_TP.replace("torch.ops._C,", "torch.ops._C_ascend,")
# (nearest true case: the import is gated on the world size only: an NPU host with two ranks runs it)
NORM_TP_WORLD = NORM_TP.replace("_FUSED_AR_RMS is not None and world > 1", "world > 1")


def _workspace_project(tmp_path, norm: str) -> dict:
    files = {"proj/__init__.py": "", "proj/layers/__init__.py": "", "proj/layers/norm_tp.py": norm,
             "proj/layers/workspace.py": WORKSPACE}
    return migrate_json(write_project(tmp_path, files))


def _cuda_bindings(report: dict) -> list:
    return [f for f in report["findings"] if f["path"] == "proj/layers/workspace.py" and f["code"] == "NPU911"]


def test_module_imported_only_under_a_missing_c_op_is_a_named_scope(tmp_path):
    """HC#9: `getattr(torch.ops._C, "op", None)` is None on an NPU host (no CUDA build of the
    project's ops there), so the only import of the `cuda.bindings` module never runs."""
    report = _workspace_project(tmp_path, NORM_TP)
    assert not _cuda_bindings(report), report["findings"]
    scope = [s for s in report["skipped"] if s["path"] == "proj/layers/workspace.py" and s["start_line"] == 2]
    assert len(scope) == 1, report["skipped"]
    assert scope[0]["reason"].startswith("not run on an NPU host (NPU911): imported only behind a CUDA/ROCm-only gate")
    assert "proj/layers/norm_tp.py:11 under `_FUSED_AR_RMS is not None and world > 1`" in scope[0]["reason"]


def test_module_imported_under_the_plugins_op_namespace_stays_an_error(tmp_path):
    """Nearest true case: the op is looked up in `torch.ops._C_ascend`, which an NPU host has."""
    report = _workspace_project(tmp_path, NORM_TP_ASCEND)
    assert [f["severity"] for f in _cuda_bindings(report)] == ["error"], report["findings"]


def test_module_imported_under_a_world_size_gate_stays_an_error(tmp_path):
    """Nearest true case: only the world size gates the import; an NPU host with two ranks runs it."""
    report = _workspace_project(tmp_path, NORM_TP_WORLD)
    assert [f["severity"] for f in _cuda_bindings(report)] == ["error"], report["findings"]


# ------------------------------------------------------------------ HC#2: skipif on a support check's `[0]`
SUPPORT = '''from proj import envs
from proj.platforms import current_platform


def _lib_available():
    try:
        import proj._mla_C  # noqa: F401
    except ImportError:
        return False, "proj._mla_C is not built"
    return True, None


def is_mla_supported():
    available, reason = _lib_available()
    if not available:
        return False, reason
    if not current_platform.is_device_capability_family(90):
        return False, "MLA is only supported on Hopper"
    return True, None
'''
ENVS = "import os\n\nUSE_MLA = os.environ.get('PROJ_USE_MLA') == '1'\n"
PLATFORMS = '''class _Platform:
    def is_device_capability_family(self, family):
        return False


current_platform = _Platform()
'''
MLA_TEST = '''import pytest
import torch

from proj.ops.support import is_mla_supported


@pytest.mark.skipif(not is_mla_supported()[0], reason="MLA not supported")
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float8_e4m3fn])
def test_mla(dtype):
    q = torch.randn(4, 8, device="cuda").to(dtype)
    assert q.dtype == dtype
'''
# (nearest true case: the check's second gate is a user's environment setting, which an NPU host may set)
SUPPORT_ENV = SUPPORT.replace("not current_platform.is_device_capability_family(90)", "not envs.USE_MLA")


def _mla_project(tmp_path, support: str) -> dict:
    files = {"proj/__init__.py": "", "proj/envs.py": ENVS, "proj/platforms.py": PLATFORMS,
             "proj/ops/__init__.py": "", "proj/ops/support.py": support,
             "tests/kernels/test_mla.py": MLA_TEST}
    return migrate_json(write_project(tmp_path, files))


def test_fp8_in_a_test_skipped_on_a_support_checks_first_item_is_a_named_scope(tmp_path):
    """HC#2: `skipif(not is_mla_supported()[0])`: every `(flag, reason)` the check returns on an NPU
    host has a False flag (its capability family gate is false there), so the test never runs."""
    report = _mla_project(tmp_path, SUPPORT)
    assert not _fp8(report, "tests/kernels/test_mla.py"), report["findings"]
    scope = [s for s in report["skipped"] if s["path"] == "tests/kernels/test_mla.py" and s["start_line"] == 8]
    assert len(scope) == 1, report["skipped"]
    assert "in a test that does not run on an NPU host: `not is_mla_supported()[0]`" in scope[0]["reason"]


def test_fp8_in_a_test_skipped_on_a_user_setting_stays_an_error(tmp_path):
    """Nearest true case: the check's gate is an environment setting a user of an NPU host may set."""
    report = _mla_project(tmp_path, SUPPORT_ENV)
    assert [f["severity"] for f in _fp8(report, "tests/kernels/test_mla.py")] == ["error"], report["findings"]
