"""Round-32 audit GA#1 (stubcalls34.py): a function that calls, unconditionally, a name its
module imports from a module binding a Triton kernel only under a flag an NPU host answers False,
and in the `else:` a stub that only raises (torchao's `triton_to_mxfp8_dim0`), fails there at the
call. The call is reported (NPU910 error naming the stub and the gate) and the findings past it
fold into that finding; nothing is scoped away. Each false case is paired with its nearest true
case, which stays reported where it was."""

from __future__ import annotations

from .precision_helpers import findings_at, migrate_json, write_project

UTILS = '''import torch


def is_sm_at_least_100():
    return torch.cuda.is_available() and torch.version.cuda and torch.cuda.get_device_capability() >= (10, 0)
'''

KERNELS = '''import torch
from torch.utils._triton import has_triton

from pkg.utils import is_sm_at_least_100

_triton_kernels_available = has_triton() and torch.cuda.is_available() and is_sm_at_least_100()

if _triton_kernels_available:
    import triton
    import triton.language as tl

    @triton.jit
    def _quant_kernel(x_ptr, n, BLOCK: tl.constexpr):
        pass

    def to_mxfp8(x, block_size=32):
        out = torch.empty_like(x)
        _quant_kernel[(1,)](x, x.numel(), BLOCK=block_size)
        return out, out

else:

    def to_mxfp8(x, block_size=32):
        """The Triton kernel is missing."""
        raise AssertionError("needs triton")
'''

# nearest true case: the gate is a Triton probe alone, which holds on an NPU host with Triton-Ascend
MAYBE = KERNELS.replace("has_triton() and torch.cuda.is_available() and is_sm_at_least_100()", "has_triton()")

DISPATCH = '''import torch

from pkg.kernels import to_mxfp8


def dispatch(x, block_size=32):
    assert x.dtype in (torch.bfloat16, torch.float32)
    data, scales = to_mxfp8(x, block_size=block_size)
    return wrap(data, scales, elem_dtype=torch.float8_e4m3fn)


def dispatch_if(x, quantize):
    if quantize:
        data, scales = to_mxfp8(x)
    return wrap(x, x, elem_dtype=torch.float8_e4m3fn)


def label_first(x):
    dtype = torch.float8_e4m3fn
    data, scales = to_mxfp8(x)
    return data.to(dtype)


def wrap(data, scales, elem_dtype):
    return data, scales, elem_dtype
'''


def _project(tmp_path, kernels: str):
    files = {"setup.py": "from setuptools import setup\nsetup(name='pkg')\n", "pkg/__init__.py": "",
             "pkg/utils.py": UTILS, "pkg/kernels.py": kernels, "pkg/dispatch.py": DISPATCH}
    return migrate_json(write_project(tmp_path, files))


def _line(text: str, needle: str, start: int = 0) -> int:
    return next(n for n, line in enumerate(text.splitlines(), 1) if n > start and needle in line)


def test_call_of_a_raising_stub_is_reported_and_the_fp8_label_past_it_folds_into_it(tmp_path):
    report = _project(tmp_path, KERNELS)
    call = _line(DISPATCH, "data, scales = to_mxfp8(x, block_size")
    label = _line(DISPATCH, "elem_dtype=torch.float8_e4m3fn)", call)
    triton = findings_at(report, "pkg/dispatch.py", "NPU910")
    assert call in triton, triton
    finding = triton[call]
    assert finding["severity"] == "error"
    assert "stub at pkg/kernels.py" in finding["message"] and "AssertionError('needs triton')" in finding["message"]
    assert "_triton_kernels_available" in finding["message"]
    assert [a[0] for a in finding.get("also", ())] == [label]
    assert label not in findings_at(report, "pkg/dispatch.py", "NPU913")
    # nearest true cases in the same file: the call under an `if`, and a label before the call
    fp8 = findings_at(report, "pkg/dispatch.py", "NPU913")
    places = {fp8_line for f in fp8.values() for fp8_line in (f["line"], *(a[0] for a in f.get("also", ())))}
    assert _line(DISPATCH, "return wrap(x, x, elem_dtype") in places
    assert _line(DISPATCH, "dtype = torch.float8_e4m3fn") in places
    assert len(triton) == 1


def test_a_stub_behind_a_gate_an_npu_host_may_take_keeps_the_later_finding(tmp_path):
    report = _project(tmp_path, MAYBE)
    call = _line(DISPATCH, "data, scales = to_mxfp8(x, block_size")
    label = _line(DISPATCH, "elem_dtype=torch.float8_e4m3fn)", call)
    assert call not in findings_at(report, "pkg/dispatch.py", "NPU910")
    fp8 = findings_at(report, "pkg/dispatch.py", "NPU913")
    places = {n for f in fp8.values() for n in (f["line"], *(a[0] for a in f.get("also", ())))}
    assert label in places
