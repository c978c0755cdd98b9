"""Round 19 (issue #16, fp8consts19.py): a module-level FP8 dtype constant below a module import
that already fails on an NPU host folds into that import's finding; one the file never computes
with is information; FP8 in a method that the file calls only under a dispatch value the project
selects only off an NPU host is a named scope. Each beside the nearest case that stays an error."""

from .precision_helpers import findings_at, migrate_json, scopes_at, write_project

# ----------------------------------------------------------------------------- module-level constants
_KERNELS = """\
import torch
import triton
import triton.language as tl


def is_fnuz():
    return False


if is_fnuz():
    fp8_dtype = torch.float8_e4m3fnuz
    fp8_max = 224.0
else:
    fp8_dtype = torch.float8_e4m3fn
    fp8_max = torch.finfo(fp8_dtype).max


@triton.jit
def _quant_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=offs < n), mask=offs < n)


def quant(x):
    y = torch.empty_like(x, dtype=fp8_dtype)
    _quant_kernel[(1,)](x, y, x.numel(), BLOCK=128)
    return y
{extra}"""

_CAST = """

def reference(x):
    return x.to(torch.float8_e4m3fn)
"""


def _lines(finding):
    return {finding["line"], *(line for line, _c, _s in finding.get("also") or ())}


def test_a_module_level_fp8_constant_folds_into_the_failing_triton_import(tmp_path):
    """`fp8_dtype = torch.float8_e4m3fn` at module level (in the `else` of a module-level `if`),
    below an unguarded `import triton` the file reports as an error: the constant's place moves
    into that import's finding, which names it; no NPU913 of its own is left."""
    root = write_project(tmp_path, {"pkg/__init__.py": "", "pkg/kernels.py": _KERNELS.format(extra="")})
    report = migrate_json(root)
    assert not findings_at(report, "pkg/kernels.py", "NPU913"), report["findings"]
    triton = findings_at(report, "pkg/kernels.py", "NPU910")
    target = next(f for f in triton.values() if f["severity"] == "error" and 2 in _lines(f))
    assert 14 in _lines(target), target
    assert "`torch.float8_e4m3fn` in a module-level FP8 dtype constant" in target["message"], target


def test_fp8_in_a_function_of_that_module_stays_an_fp8_error(tmp_path):
    """The nearest true case: the same module with a cast to FP8 in a function keeps its NPU913
    error, anchored there; only the constant's place moves into the import's finding."""
    root = write_project(tmp_path, {"pkg/__init__.py": "", "pkg/kernels.py": _KERNELS.format(extra=_CAST)})
    report = migrate_json(root)
    fp8 = findings_at(report, "pkg/kernels.py", "NPU913")
    assert [f["severity"] for f in fp8.values()] == ["error"], fp8
    (finding,) = fp8.values()
    assert _lines(finding) == {31}, finding


_CONSTANTS = """\
import torch

FP8_DTYPE = torch.float8_e4m3fn
FP8_MAX = torch.finfo(torch.float8_e4m3fn).max


def is_fp8(x):
    return x.dtype == FP8_DTYPE


def clamp(x):
    return x.cuda().clamp(-FP8_MAX, FP8_MAX)
{extra}"""

_USE = """

def quantize(x):
    return (x.cuda() / FP8_MAX).to(FP8_DTYPE)
"""


def test_a_constant_the_file_never_computes_with_is_information(tmp_path):
    """No failing import precedes it and the file only compares against it and takes its
    `finfo` limit: information naming the constant, not an error."""
    root = write_project(tmp_path, {"pkg/__init__.py": "", "pkg/consts.py": _CONSTANTS.format(extra="")})
    report = migrate_json(root)
    fp8 = findings_at(report, "pkg/consts.py", "NPU913")
    assert [f["severity"] for f in fp8.values()] == ["info"], fp8
    assert "FP8 dtype constant" in next(iter(fp8.values()))["message"]


def test_a_constant_the_file_casts_to_stays_an_error(tmp_path):
    """The nearest true case: `x.to(FP8_DTYPE)` in a function is FP8 compute that names no FP8
    dtype itself; the constant's finding stands for it and stays an error."""
    root = write_project(tmp_path, {"pkg/__init__.py": "", "pkg/consts.py": _CONSTANTS.format(extra=_USE)})
    report = migrate_json(root)
    fp8 = findings_at(report, "pkg/consts.py", "NPU913")
    assert [f["severity"] for f in fp8.values()] == ["error"], fp8


# ----------------------------------------------------------------------------- a dispatch value chosen off NPU
_PLATFORM = """\
import torch


def is_cuda():
    return torch.cuda.is_available() and torch.version.cuda


def is_hip():
    return torch.cuda.is_available() and torch.version.hip
"""

_UTILS = """\
from pkg.platform import is_cuda, is_hip

_is_cuda = is_cuda()
_is_hip = is_hip()
"""

_METHODS = """\
from enum import Enum, auto


class ForwardMethod(Enum):
    PLAIN = auto()
    FUSED = auto()
"""

_DISPATCH = """\
from pkg.methods import ForwardMethod
from pkg.utils import _is_hip


def choose(layer, decode):
    if _is_hip:
        if layer.fused_decode and decode:
            return ForwardMethod.FUSED
        return ForwardMethod.PLAIN
    else:
        return {other}
"""

_MODEL = """\
import torch
from torch import nn

from pkg.dispatch import choose
from pkg.methods import ForwardMethod
from pkg.utils import _is_cuda

if _is_cuda:
    from sgl_kernel import bmm_fp8


class Attention(nn.Module):
    def forward(self, x, decode):
        method = choose(self, decode)
        if method == ForwardMethod.PLAIN:
            return self.forward_plain(x)
        elif method == ForwardMethod.FUSED:
            return self.forward_fused(x)

    def forward_plain(self, x):
        return x @ self.weight

    def forward_fused(self, x):
        if self.weight.dtype == torch.float8_e4m3fn:
            x_fp8 = torch.ops.fused.quant(
                x, torch.float8_e4m3fn
            )
            return bmm_fp8(x_fp8, self.weight, torch.bfloat16)
        return torch.bmm(x, self.weight)
"""


def _dispatch_project(tmp_path, other):
    return write_project(tmp_path, {"pkg/__init__.py": "", "pkg/platform.py": _PLATFORM, "pkg/utils.py": _UTILS,
                                    "pkg/methods.py": _METHODS, "pkg/dispatch.py": _DISPATCH.format(other=other),
                                    "pkg/model.py": _MODEL})


def test_an_unfolded_fp8_use_in_a_method_only_another_platforms_dispatch_selects_is_a_scope(tmp_path):
    """`forward_fused` runs only under `method == ForwardMethod.FUSED`, which the project returns
    only under `if _is_hip:` (false on an NPU host: dispatch.py's span). Its FP8 use, folded into
    the `if _is_cuda:` import of `bmm_fp8` and given back as its own NPU913 by flags16.unfold_fp8,
    is lowered like the other findings of that span: a named scope naming the dispatch value."""
    report = migrate_json(_dispatch_project(tmp_path, "ForwardMethod.PLAIN"))
    fp8 = findings_at(report, "pkg/model.py", "NPU913")
    assert not [f for f in fp8.values() if f["severity"] != "info"], fp8
    scopes = scopes_at(report, "pkg/model.py", "NPU913")
    assert 26 in scopes and "`method == ForwardMethod.FUSED`" in scopes[26], report["skipped"]


def test_an_unfolded_fp8_use_in_a_method_the_npu_host_may_select_stays_an_error(tmp_path):
    """The nearest true case: the `else` (the branch an NPU host takes) may return
    `ForwardMethod.FUSED` too, so an FP8 checkpoint reaches the FP8 use there: it stays an error
    (as minicpm3's forward, whose own branch calls `bmm_fp8` the same way)."""
    report = migrate_json(_dispatch_project(
        tmp_path, "ForwardMethod.FUSED if layer.fused_decode else ForwardMethod.PLAIN"))
    fp8 = findings_at(report, "pkg/model.py", "NPU913")
    assert [f["severity"] for f in fp8.values()] == ["error"], fp8
    assert 26 in fp8 and "reported on its own" in fp8[26]["message"], fp8
