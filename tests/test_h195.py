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


# Round-32 audit GC#29 (initfails34.py): a Triton kernel launched only from a method of a class
# whose `__init__` first imports, unconditionally, a module that fails at its own unguarded
# `from flashinfer import ...` (reported there, NPU911): the class is never built on an NPU host.

FLASHINFER_BACKEND = '''import torch
from flashinfer import decode_kernel


class FIImpl:
    def run(self, x):
        return decode_kernel(x)
'''

ROPE = '''import torch
import triton
import triton.language as tl


@triton.jit
def _rope_kernel(x_ptr, n, BLOCK: tl.constexpr):
    pass


def rope_cache(x):
    _rope_kernel[(1,)](x, x.numel(), BLOCK=128)
    return x
'''

MODEL = '''import torch

from pkg.ops.rope import rope_cache
from pkg.ops.rope_try import rope_cache_try
from pkg.ops.rope_early import rope_cache_early
from pkg.ops.rope_late import rope_cache_late


class FlintAttention(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.scale = 1.0
        from pkg.backends.fi import FIImpl

        self.impl = FIImpl()

    def forward(self, x):
        return rope_cache(x) * self.scale


class TryAttention(torch.nn.Module):
    def __init__(self):
        super().__init__()
        try:
            from pkg.backends.fi import FIImpl
            self.impl = FIImpl()
        except ImportError:
            self.impl = None

    def forward(self, x):
        return rope_cache_try(x)


class EagerAttention(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.warm = rope_cache_early(torch.zeros(8))
        from pkg.backends.fi import FIImpl

        self.impl = FIImpl()
        self.cold = rope_cache_late(torch.zeros(8))
'''


def _flint_project(tmp_path):
    files = {"setup.py": "from setuptools import setup\nsetup(name='pkg')\n", "pkg/__init__.py": "",
             "pkg/backends/__init__.py": "", "pkg/backends/fi.py": FLASHINFER_BACKEND, "pkg/ops/__init__.py": "",
             "pkg/ops/rope.py": ROPE, "pkg/ops/rope_try.py": ROPE.replace("def rope_cache(", "def rope_cache_try("),
             "pkg/ops/rope_early.py": ROPE.replace("def rope_cache(", "def rope_cache_early("),
             "pkg/ops/rope_late.py": ROPE.replace("def rope_cache(", "def rope_cache_late("),
             "pkg/model.py": MODEL}
    return migrate_json(write_project(tmp_path, files))


def test_kernel_launched_only_by_a_class_whose_constructor_fails_first_is_a_named_scope(tmp_path):
    from .precision_helpers import scope_reasons

    report = _flint_project(tmp_path)
    kernel = _line(ROPE, "@triton.jit")
    assert kernel not in {n for f in findings_at(report, "pkg/ops/rope.py", "NPU910").values()
                          for n in (f["line"], *(a[0] for a in f.get("also", ())))}
    reasons = scope_reasons(report, "pkg/ops/rope.py", "NPU910")
    assert any("`FlintAttention.__init__` fails first" in why and "pkg/backends/fi.py" in why for why in reasons.values()), reasons
    # the failure it names stays reported where it is
    assert findings_at(report, "pkg/backends/fi.py", "NPU911")


def test_constructor_whose_import_is_caught_keeps_the_kernel_reported(tmp_path):
    report = _flint_project(tmp_path)
    kernel = _line(ROPE, "@triton.jit")
    places = {n for f in findings_at(report, "pkg/ops/rope_try.py", "NPU910").values()
              for n in (f["line"], *(a[0] for a in f.get("also", ())))}
    assert kernel in places, report["findings"]


def test_constructor_lines_past_the_failing_import_are_dead_and_those_before_it_run(tmp_path):
    from .precision_helpers import scope_reasons

    report = _flint_project(tmp_path)
    kernel = _line(ROPE, "@triton.jit")
    late = scope_reasons(report, "pkg/ops/rope_late.py", "NPU910")
    assert any("`EagerAttention.__init__` fails first" in why for why in late.values()), late
    early = {n for f in findings_at(report, "pkg/ops/rope_early.py", "NPU910").values()
             for n in (f["line"], *(a[0] for a in f.get("also", ())))}
    assert kernel in early, report["findings"]
