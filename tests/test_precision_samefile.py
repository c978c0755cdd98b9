"""CUDA-only code beside a clean fallback the NPU host takes, in the same file (issue #16, round 9;
npu_migrate/samefile.py, and testscopes' untaken branches for decorated definitions). Each test
writes a small project of its own, checks that the false finding became a named scope (or info with
its reason), and that a nearby true case is still reported."""

from __future__ import annotations

from tests.precision_helpers import migrate_json, write_project


def _findings(report: dict, path: str, code: str | None = None) -> list[dict]:
    return [f for f in report["findings"] if f["path"] == path and not f["fixable"]
            and (code is None or f["code"] == code)]


def _scopes(report: dict, path: str, code: str) -> list[dict]:
    return [s for s in report["skipped"] if s.get("path") == path and f"({code})" in s.get("reason", "")]


# ----------------------------------------------------------------------------- (a) platform if/else
PLATFORM_KERNEL = '''\
import torch
from pkg.platforms import current_platform
from pkg.triton_utils import tl, triton

if current_platform.is_cuda_alike() or current_platform.is_xpu():

    @triton.jit
    def _map_kernel(ids_ptr, out_ptr, n, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        tl.store(out_ptr + offs, tl.load(ids_ptr + offs, mask=offs < n), mask=offs < n)

    def map_ids(ids):
        out = torch.empty_like(ids)
        _map_kernel[(1,)](ids, out, ids.numel(), BLOCK=128)
        return out
else:

    def map_ids(ids):
        return ids
'''

UNGUARDED_KERNEL = '''\
import torch
from pkg.triton_utils import tl, triton


@triton.jit
def _copy_kernel(ids_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(out_ptr + offs, tl.load(ids_ptr + offs, mask=offs < n), mask=offs < n)


def copy_ids(ids):
    out = torch.empty_like(ids)
    _copy_kernel[(1,)](ids, out, ids.numel(), BLOCK=128)
    return out
'''


def test_kernel_defined_only_under_a_cuda_platform_test_is_a_named_scope(tmp_path):
    report = migrate_json(write_project(tmp_path, {"pkg/router.py": PLATFORM_KERNEL,
                                                   "pkg/copy.py": UNGUARDED_KERNEL}))
    assert not _findings(report, "pkg/router.py", "NPU910")
    scopes = _scopes(report, "pkg/router.py", "NPU910")
    assert scopes and scopes[0]["start_line"] == 7 and "is_cuda_alike" in scopes[0]["reason"]
    # the same kernel with no platform test and no fallback stays an error
    assert [f["severity"] for f in _findings(report, "pkg/copy.py", "NPU910")] == ["error"]


# ----------------------------------------------------------------------------- (b) probe, eager fallback
PROBE = '''\
"""Shared Triton availability check."""

try:
    import triton
    import triton.language as tl
    from triton.backends import backends

    _TRITON_AVAILABLE = any(backend.driver.is_active() for backend in backends.values())
except Exception:
    triton = None
    tl = None
    _TRITON_AVAILABLE = False


def is_triton_available() -> bool:
    return _TRITON_AVAILABLE
'''

FUSED = '''\
import torch

from pkg._triton import _TRITON_AVAILABLE, triton, tl

if _TRITON_AVAILABLE:

    @triton.jit
    def _scale_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=offs < n) * 2, mask=offs < n)


def _check_device(x):
    if not _TRITON_AVAILABLE:
        raise RuntimeError("fused scale needs Triton")
    if x.device.type != "cuda":
        raise RuntimeError(f"fused scale runs CUDA kernels but x is on {x.device.type}")


def assert_supported(x):
    _check_device(x)
    if x.dim() == 0:
        raise RuntimeError("fused scale needs a tensor")


def _run(x):
    out = torch.empty_like(x)
    _scale_kernel[(1,)](x, out, x.numel(), BLOCK=1024)
    return out


def fused_scale(x):
    assert_supported(x)
    return _run(x)


def _make_fused(eager):
    def forward(x):
        try:
            assert_supported(x)
        except RuntimeError:
            return eager(x)
        return _run(x)
    return forward
'''

FUSED_NO_FALLBACK = FUSED.split("def _make_fused")[0]


def test_availability_probe_without_kernels_is_a_named_scope(tmp_path):
    report = migrate_json(write_project(tmp_path, {"pkg/_triton.py": PROBE, "pkg/copy.py": UNGUARDED_KERNEL}))
    assert not _findings(report, "pkg/_triton.py", "NPU910")
    assert any("availability probe without kernels" in s["reason"] for s in _scopes(report, "pkg/_triton.py", "NPU910"))
    assert [f["severity"] for f in _findings(report, "pkg/copy.py", "NPU910")] == ["error"]


def test_flagged_kernels_whose_device_check_falls_back_to_eager(tmp_path):
    report = migrate_json(write_project(tmp_path, {"pkg/_triton.py": PROBE, "pkg/fused.py": FUSED,
                                                   "pkg/fused_strict.py": FUSED_NO_FALLBACK}))
    assert not _findings(report, "pkg/fused.py", "NPU910")
    assert any("eager path" in s["reason"] for s in _scopes(report, "pkg/fused.py", "NPU910"))
    # without the caller that catches the check's error, the kernels stay an error
    assert [f["severity"] for f in _findings(report, "pkg/fused_strict.py", "NPU910")] == ["error"]


# ----------------------------------------------------------------------------- (c) opt-in lazy import
OPT_IN = '''\
import torch
from functools import lru_cache

from pkg.accelerator import get_accelerator


@lru_cache(maxsize=1)
def _load_fast_ce():
    try:
        from fla.modules.fused_cross_entropy import FusedCrossEntropyFunction
    except ImportError as error:
        raise ImportError("install flash-linear-attention or select backend='torch'") from error
    return FusedCrossEntropyFunction


def _fast_ce(logits, target):
    return _load_fast_ce().apply(logits, target)


def _fast_can_run(logits):
    return get_accelerator().is_triton_supported() and logits.dtype in (torch.float16, torch.bfloat16)


def cross_entropy(logits, target, backend="torch"):
    use_fast = backend == "fast" and _fast_can_run(logits)
    if use_fast:
        return _fast_ce(logits, target)
    return torch.nn.functional.cross_entropy(logits, target)
'''

# the loader also called on the default path: an NPU host runs it
ALWAYS = OPT_IN + '''

def fast_cross_entropy(logits, target):
    return _fast_ce(logits, target)
'''


def test_lazy_import_behind_a_capability_probe_is_info_to_verify(tmp_path):
    report = migrate_json(write_project(tmp_path, {"pkg/ce.py": OPT_IN, "pkg/ce_always.py": ALWAYS}))
    found = _findings(report, "pkg/ce.py", "NPU910")
    assert [f["severity"] for f in found] == ["info"] and "opt-in" in found[0]["message"]
    assert "is_triton_supported" in found[0]["message"]
    # loaded on every call: still an error
    assert [f["severity"] for f in _findings(report, "pkg/ce_always.py", "NPU910")] == ["error"]


# ----------------------------------------------------------------------------- (d) disabled communicator
COMMUNICATOR = '''\
import torch

from pkg import ops


class FastAllreduce:
    def __init__(self, group):
        self.disabled = True
        self._capturing = False
        if not ops.IS_FAST_AR_AVAILABLE:
            # disabled where the library is missing
            return
        self.group = group
        self.disabled = False

    def should_allreduce(self, inp):
        if self.disabled:
            return False
        return inp.numel() < 1024

    def all_reduce(self, tensor):
        if self._capturing:
            if torch.cuda.is_current_stream_capturing():
                pass
        return ops.fast_allreduce(tensor)
'''

COMMUNICATOR_ON = COMMUNICATOR.replace("        self.disabled = True\n", "        self.disabled = False\n")


def test_method_of_a_class_disabled_without_its_cuda_library_is_a_named_scope(tmp_path):
    report = migrate_json(write_project(tmp_path, {"pkg/comm.py": COMMUNICATOR, "pkg/comm_on.py": COMMUNICATOR_ON}))
    assert not _findings(report, "pkg/comm.py", "NPU202")
    assert any("disabled where its CUDA library is missing" in s["reason"]
               for s in _scopes(report, "pkg/comm.py", "NPU202"))
    # a class enabled from the start: the call stays a finding
    assert [f["severity"] for f in _findings(report, "pkg/comm_on.py", "NPU202")] == ["error"]


# ----------------------------------------------------------------------------- (e) dispatch table
DISPATCH = '''\
from collections import defaultdict

import torch


def alloc_with_host_register(dims, dtype, device, pin_memory):
    buffer = torch.empty(dims, dtype=dtype, device=device)
    if pin_memory:
        torch.cuda.cudart().cudaHostRegister(buffer.data_ptr(), buffer.numel() * buffer.element_size(), 0)
    return buffer


def alloc_with_pin_memory(dims, dtype, device, pin_memory):
    return torch.empty(dims, dtype=dtype, device=device, pin_memory=pin_memory)


ALLOC_FUNCS = defaultdict(lambda: alloc_with_host_register, {"npu": alloc_with_pin_memory})
'''

# the same helper, also called directly: an NPU host may run it
DISPATCH_AND_CALLED = DISPATCH + '''

def pinned(dims, dtype, device):
    return alloc_with_host_register(dims, dtype, device, True)
'''


def test_function_only_a_dispatch_table_selects_beside_an_npu_entry_is_a_named_scope(tmp_path):
    report = migrate_json(write_project(tmp_path, {"pkg/pool.py": DISPATCH, "pkg/pool2.py": DISPATCH_AND_CALLED}))
    assert not _findings(report, "pkg/pool.py", "NPU202")
    assert any("dispatch table" in s["reason"] and s["start_line"] == 9 for s in _scopes(report, "pkg/pool.py", "NPU202"))
    # called directly as well: the error stays
    assert [f["severity"] for f in _findings(report, "pkg/pool2.py", "NPU202")] == ["error"]


# ----------------------------------------------------------------------------- (g) a flag a CUDA import sets
FLAGGED = '''\
import torch

try:
    from fastops.ops.gemm import gemm_w4a4_cuda as _gemm

    _fused_ops_available = True
except Exception:
    _gemm = None
    _fused_ops_available = False


def _fused_mlp(x):
    scales = torch.empty(x.shape[0], dtype=torch.float8_e4m3fn, device=x.device)
    return _gemm(x, scales)


class Block(torch.nn.Module):
    def forward(self, x):
        if _fused_ops_available:
            x = _fused_mlp(x)
        return x
'''

# the fused path also called without the flag: an NPU host may run it
FLAGGED_AND_CALLED = FLAGGED + '''

def run_fused(x):
    return _fused_mlp(x)
'''


def test_private_function_called_only_under_a_cuda_extension_flag_is_a_named_scope(tmp_path):
    report = migrate_json(write_project(tmp_path, {"pkg/dit.py": FLAGGED, "pkg/dit2.py": FLAGGED_AND_CALLED}))
    assert not _findings(report, "pkg/dit.py", "NPU913")
    assert any(s["start_line"] <= 13 <= s["end_line"] and "_fused_ops_available" in s["reason"]
               for s in _scopes(report, "pkg/dit.py", "NPU913"))
    # the extension import itself is a named scope since round 19 (probes19.py: its names are read
    # only in a helper called only where the flag says the import worked, so the fallback runs on
    # an NPU host; round 18 judged the error false); where the helper is also called without the
    # flag, the import and the FP8 buffer an NPU host may reach stay reported
    assert not _findings(report, "pkg/dit.py", "NPU911")
    assert any(s["start_line"] == 4 and "runs as written" in s["reason"] for s in _scopes(report, "pkg/dit.py", "NPU911"))
    assert _findings(report, "pkg/dit2.py", "NPU911")
    assert [f["severity"] for f in _findings(report, "pkg/dit2.py", "NPU913")] == ["error"]


# ----------------------------------------------------------------------------- (f) NPU110 fast paths
SELECTOR = '''\
import torch

from pkg._triton import _TRITON_AVAILABLE


def triton_backend_available() -> bool:
    return _TRITON_AVAILABLE


def _resolve_backend(backend, logits):
    on_cuda = logits.device.type == "cuda"
    if backend == "auto":
        return "triton" if on_cuda and triton_backend_available() else "torch"
    if backend == "triton" and not (on_cuda and triton_backend_available()):
        raise RuntimeError('the Triton backend needs CUDA logits; use backend="torch"')
    return backend
'''

EXTENSION_SELECTOR = '''\
import torch

try:
    from pkg._C import fused_optim
except ImportError:
    fused_optim = None


def scale_grads(params, coeff, norm_type=2.0):
    enable_cuda_kernels = params[0].grad.device.type == "cuda"
    if norm_type == 2.0 and enable_cuda_kernels:
        norms = [p.grad.norm() for p in params]
    else:
        norms = [p.grad.norm(norm_type) for p in params]
    total = _to_tensor(norms, enable_cuda_kernels)
    if enable_cuda_kernels:
        fused_optim.multi_tensor_scale([p.grad for p in params], coeff)
    else:
        for p in params:
            p.grad.mul_(coeff)
    return total


def _to_tensor(norms, on_cuda):
    return torch.stack(norms).sum()
'''


def test_fast_path_selectors_are_named_scopes_and_name_the_path(tmp_path):
    report = migrate_json(write_project(tmp_path, {"pkg/_triton.py": PROBE, "pkg/select.py": SELECTOR,
                                                   "pkg/clip.py": EXTENSION_SELECTOR}))
    assert not _findings(report, "pkg/select.py", "NPU110")
    assert any("fast-path selector" in s["reason"] for s in _scopes(report, "pkg/select.py", "NPU110"))
    gates = _findings(report, "pkg/clip.py", "NPU110")
    scopes = [s["reason"] for s in _scopes(report, "pkg/clip.py", "NPU110")]
    reasons = [g["message"] for g in gates] + scopes
    assert reasons and not any("Triton path" in r for r in reasons)
    assert any("CUDA-kernel (extension) path with `enable_cuda_kernels`" in r for r in reasons)
    assert all(g["severity"] == "info" for g in gates)
    # the extension the fast path calls is still reported
    assert _findings(report, "pkg/clip.py", "NPU911") or _scopes(report, "pkg/clip.py", "NPU911")


KERNEL_MODULE = '''\
import torch

_available = None


def is_cutedsl_available() -> bool:
    global _available
    if _available is None:
        try:
            import cutlass.cute  # noqa: F401

            _available = True
        except ImportError:
            _available = False
    return _available


def check_inputs(hidden_states, weight):
    if hidden_states.dim() != 2:
        raise ValueError("hidden_states must be 2D")
    if hidden_states.device.type != "cuda" or weight.device.type != "cuda":
        raise ValueError("hidden_states and weight must be on a CUDA device for the CuTe kernel")
'''


def test_kernel_module_input_check_is_a_named_scope_and_the_kernel_stays(tmp_path):
    report = migrate_json(write_project(tmp_path, {"pkg/router_common.py": KERNEL_MODULE,
                                                   "pkg/copy.py": UNGUARDED_KERNEL}))
    assert not _findings(report, "pkg/router_common.py", "NPU110")
    assert any("input check kept meaning CUDA" in s["reason"] and s["start_line"] == 21
               for s in _scopes(report, "pkg/router_common.py", "NPU110"))
    # a kernel launched with no check and no fallback stays an error
    assert [f["severity"] for f in _findings(report, "pkg/copy.py", "NPU910")] == ["error"]
