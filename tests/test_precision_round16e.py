"""Round-16 audits (issue #16): guarded imports whose `except` binds a fallback, still reported as
failing (npu_migrate/probes16.py: AS#18, AS#38, AR#4). Each test asserts the false finding is gone
(a named scope, or info with the reason) and that a nearby true case is still reported."""

from __future__ import annotations

from .precision_helpers import migrate_json, write_project


def _findings(report: dict, path: str, code: str | None = None) -> list[dict]:
    return [f for f in report["findings"] if f["path"] == path and not f["fixable"]
            and (code is None or f["code"] == code)]


def _lines(finding: dict) -> set[int]:
    return {finding["line"], *(place[0] for place in finding.get("also") or ())}


def _scoped(report: dict, path: str, line: int) -> list[str]:
    return [s["reason"] for s in report["skipped"] if s["path"] == path and "start_line" in s
            and s["start_line"] <= line <= s["end_line"]]


_MOCK_TYPES = '''\
import torch


def get_scalar_types():
    try:
        from sgl_kernel.scalar_type import ScalarType, scalar_types

        return ScalarType, scalar_types
    except ImportError:

        class MockScalarType:
            pass

        class MockScalarTypes:
            uint4b8 = "uint4b8"

            def __getattr__(self, name):
                return f"mock_{name}"

        return MockScalarType, MockScalarTypes()


ScalarType, scalar_types = get_scalar_types()


def pick(bits):
    return scalar_types.uint4b8 if bits == 4 else None


def gemm(x, w):
    try:
        from sgl_kernel import fp8_gemm
    except ImportError:
        fp8_gemm = None
    return fp8_gemm(x, w)
'''


def test_function_local_probe_with_mock_types_is_a_scope(tmp_path):
    """AS#18: `try: from sgl_kernel.scalar_type import ...; return ...` with Mock types in the
    `except`: the module-level `scalar_types` is the function's result, not the import. The probe is
    a named scope and anchors no finding; a probe whose None the same function calls stays an error."""
    root = write_project(tmp_path, {"qutils.py": _MOCK_TYPES})
    report = migrate_json(root)
    errors = [f for f in _findings(report, "qutils.py", "NPU911") if f["severity"] == "error"]
    lines = set().union(*map(_lines, errors)) if errors else set()
    assert 6 not in lines, errors
    assert any("guarded import" in r for r in _scoped(report, "qutils.py", 6)), report["skipped"]
    assert 32 in lines and errors[0]["line"] == 32, errors  # (its None called unchecked)


_BACKEND = '''\
import torch

from mypkg.runner import get_moe_runner_backend

trtllm_moe = None
if get_moe_runner_backend().is_flashinfer_trtllm():
    try:
        from flashinfer.fused_moe import trtllm_moe
    except ImportError:
        trtllm_moe = None


class FusedMoE(torch.nn.Module):
    def forward(self, x):
        return x * 2


class FlashInferFP4MoE(FusedMoE):
    def forward(self, x):
        return trtllm_moe(x)


class FlashInferFusedMoE(FusedMoE):
    def forward(self, x):
        try:
            from flashinfer.fused_moe import bf16_moe
        except ImportError as e:
            raise ImportError("flashinfer too old") from e
        return bf16_moe(x)
'''


def test_fallback_read_only_in_the_packages_backend_class_is_a_scope(tmp_path):
    """AS#38: the `= None` probe's name is called only in `FlashInferFP4MoE`, the flashinfer
    backend's class: the import is a named scope naming that class. The same call in the generic `FusedMoE`
    (a path an NPU host takes) keeps the error."""
    root = write_project(tmp_path, {"layer.py": _BACKEND})
    report = migrate_json(root)
    # (round 20, BC#17: a named scope now, the import failing nothing; the lazy import in the other
    # flashinfer class is a scope of its own, not an error)
    assert any("`FlashInferFP4MoE`" in r for r in _scoped(report, "layer.py", 8)), report["skipped"]
    assert any("backend code" in r for r in _scoped(report, "layer.py", 26)), report["skipped"]
    assert not _findings(report, "layer.py"), report["findings"]
    text = _BACKEND.replace("        return x * 2\n", "        return trtllm_moe(x)\n")
    root = write_project(tmp_path / "kept", {"layer.py": text})
    report = migrate_json(root)
    kept = [f for f in _findings(report, "layer.py", "NPU911") if 8 in _lines(f)]
    assert kept and kept[0]["severity"] == "error" and 26 in _lines(kept[0]), kept
    # without the test naming the package around the `try`, a class named for it may still be
    # loaded on an NPU host (a quantization method of a checkpoint format): the error stays
    text = _BACKEND.replace("if get_moe_runner_backend().is_flashinfer_trtllm():\n", "if True:\n")
    root = write_project(tmp_path / "unselected", {"layer.py": text})
    report = migrate_json(root)
    kept = [f for f in _findings(report, "layer.py", "NPU911") if 8 in _lines(f)]
    assert kept and kept[0]["severity"] == "error", kept


_FLAG = '''\
import torch

try:
    import flashinfer.comm as flashinfer_comm

    _ipc_available = hasattr(flashinfer_comm, "IpcWorkspace")
except ImportError:
    flashinfer_comm = None
    _ipc_available = False


def make_workspace(size):
    if not _ipc_available:
        return None
    return flashinfer_comm.IpcWorkspace(size)


class FlashInferIpcAllReduce:
    def __init__(self, size):
        self.disabled = True
        self.workspace = None
        if not _ipc_available:
            return
        self.disabled = False

    def setup(self, size):
        if self.disabled:
            return
        self.workspace = flashinfer_comm.IpcWorkspace(size)
'''


def test_flag_probe_read_behind_its_flag_or_in_the_backend_class(tmp_path):
    """AR#4: the import sets `_ipc_available = False` where flashinfer is missing; its module is read
    after `if not _ipc_available: return`, and in a method that returns on `self.disabled`, which the
    constructor leaves True when `_ipc_available` is false. A named scope, not an error; a read with
    no check in plain code keeps the error."""
    root = write_project(tmp_path, {"allreduce.py": _FLAG})
    report = migrate_json(root)
    assert not _findings(report, "allreduce.py", "NPU911"), report["findings"]
    assert any("guarded import" in r for r in _scoped(report, "allreduce.py", 4)), report["skipped"]
    text = _FLAG.replace("        self.disabled = False\n", "")
    root = write_project(tmp_path / "never", {"allreduce.py": text})
    report = migrate_json(root)  # (an attribute the constructor never sets again is no such flag)
    kept = [f for f in _findings(report, "allreduce.py", "NPU911") if 4 in _lines(f)]
    assert kept and kept[0]["severity"] == "error", kept
    text = _FLAG + "\n\ndef all_reduce(x):\n    return flashinfer_comm.all_reduce(x)\n"
    root = write_project(tmp_path / "plain", {"allreduce.py": text})
    report = migrate_json(root)
    kept = [f for f in _findings(report, "allreduce.py", "NPU911") if 4 in _lines(f)]
    assert kept and kept[0]["severity"] == "error", kept


def test_a_handler_that_raises_is_no_fallback(tmp_path):
    """`except ImportError: raise ImportError(...)` binds nothing: the import keeps its error, even
    in a class named for the package."""
    text = '''\
import torch


class FlashInferMoE(torch.nn.Module):
    def forward(self, x):
        try:
            from flashinfer.fused_moe import bf16_moe
        except ImportError as e:
            raise ImportError("flashinfer too old") from e
        return bf16_moe(x)
'''
    root = write_project(tmp_path, {"moe.py": text})
    report = migrate_json(root)
    kept = [f for f in _findings(report, "moe.py", "NPU911") if 7 in _lines(f)]
    assert kept and kept[0]["severity"] == "error", kept


_WRAPPED_KERNELS = '''\
import torch

from mypkg.utils import is_triton_available

if is_triton_available():
    import triton
    import triton.language as tl


def _jit(fn):
    return triton.jit(fn) if is_triton_available() else fn


_TRITON = is_triton_available()


def _use_triton(device):
    return _TRITON and device.type in ("cuda", "xpu")


@_jit
def _scale(z, s):
    return z * s


@_jit
def _fold_kernel(x_ptr, out_ptr, s, BLOCK: tl.constexpr):
    i = tl.arange(0, BLOCK)
    tl.store(out_ptr + i, _scale(tl.load(x_ptr + i), s))


def _fold_tile(x, out, s, BLOCK):
    out.copy_(x * s)


def fold(x, s):
    out = torch.empty_like(x)
    step = _fold_kernel[(1,)] if _use_triton(x.device) else _fold_tile
    step(x, out, s, BLOCK=1024)
    return out
'''


def test_wrapped_kernels_chosen_only_for_a_cuda_device_are_a_scope(tmp_path):
    """AS#23: kernels made by a module wrapper (`@_jit`, which calls `triton.jit`), chosen by
    `_kernel[grid] if _use_triton(device) else _tile` where `_use_triton` needs a "cuda"/"xpu"
    device the migration keeps: an NPU host runs the torch tile. A launch with no such choice keeps
    the error."""
    root = write_project(tmp_path, {"chunked.py": _WRAPPED_KERNELS})
    report = migrate_json(root)
    errors = [f for f in _findings(report, "chunked.py", "NPU910") if f["severity"] != "info"]
    assert not errors, errors
    assert any("launched only on CUDA tensors" in r for r in _scoped(report, "chunked.py", 6)), report["skipped"]
    text = _WRAPPED_KERNELS.replace("_fold_kernel[(1,)] if _use_triton(x.device) else _fold_tile",
                                    "_fold_kernel[(1,)]")
    root = write_project(tmp_path / "kept", {"chunked.py": text})
    report = migrate_json(root)
    kept = [f for f in _findings(report, "chunked.py", "NPU910") if f["severity"] == "error"]
    assert kept, report["findings"]


def test_backend_only_info_is_not_swallowed_by_a_named_scope(tmp_path):
    """AS#38 as SGLang has it: an `if is_flashinfer_available(): from flashinfer import ...` (a
    branch an NPU host does not take: a named scope of NPU911) before the probe. The probe's info is
    merged apart: it stays a finding with its own reason, not a line of that scope."""
    text = _BACKEND.replace(
        "from mypkg.runner import get_moe_runner_backend\n",
        "from mypkg.runner import get_moe_runner_backend, is_flashinfer_available\n\n"
        "if is_flashinfer_available():\n    from flashinfer import fp4_quantize\n")
    root = write_project(tmp_path, {"layer.py": text})
    report = migrate_json(root)
    # (round 20, BC#17: the probe is a named scope of its own, under its own reason)
    scoped = [s for s in report["skipped"] if s["path"] == "layer.py" and "start_line" in s
              and s["start_line"] <= 11 <= s["end_line"]]
    assert scoped and all("`FlashInferFP4MoE`" in s["reason"] and s["start_line"] > 6 for s in scoped), scoped
