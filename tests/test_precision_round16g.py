"""Round 16 (issue #16): FP8, Triton and compile findings in code only a CUDA backend or an NVIDIA
capability flag reaches (npu_migrate/backend16.py). Each test asserts the false finding is gone
(folded, or a named skipped scope with its reason) and that a nearby true case stays reported."""

from __future__ import annotations

from tests.precision_helpers import migrate_json, moot_lines, write_project

AVAIL = """\
import importlib.util


def is_flashinfer_available():
    return importlib.util.find_spec("flashinfer") is not None
"""

BRANCH = """\
import torch

from pkg.avail import is_flashinfer_available

if is_flashinfer_available():
    from flashinfer import get_permute_indices, mxfp8_quantize


def _indices(x):
    idx = get_permute_indices(x)
    return idx + 1


class Method:
    def __init__(self, backend):
        self.use_fi = backend == "flashinfer"

    def prepare(self, w, n):
        if self.use_fi:
            idx = _indices(w)
            w = w[idx]
            scale = torch.stack([w, w]).reshape(n, -1).view(torch.float8_e4m3fn)
            return scale
        return w

    def apply(self, x, n):
        if self.use_fi:
            q, s = mxfp8_quantize(x, False)
            s = s.view(torch.float8_e4m3fn).reshape(n, -1)
            return q, s
        return x
"""

# (the FP8 cast runs before the gated call: it stays reported)
BRANCH_CAST_FIRST = """\
import torch

from pkg.avail import is_flashinfer_available

if is_flashinfer_available():
    from flashinfer import mxfp8_quantize


class Method:
    def __init__(self, backend):
        self.use_fi = backend == "flashinfer"

    def apply(self, x, n):
        if self.use_fi:
            s = x.to(torch.float8_e4m3fn).reshape(n, -1)
            q = mxfp8_quantize(x, False)
            return q, s
        return x
"""


def _open(report: dict, path: str, code: str) -> list[dict]:
    return [f for f in report["findings"] if not f["fixable"] and f["path"] == path and f["code"] == code
            and f["severity"] != "info"]


def test_fp8_in_a_branch_that_first_calls_a_gated_name_is_a_named_scope(tmp_path):
    root = write_project(tmp_path, {"pkg/__init__.py": "", "pkg/avail.py": AVAIL,
                                    "pkg/quant.py": BRANCH, "pkg/quant_cast.py": BRANCH_CAST_FIRST})
    report = migrate_json(root)
    assert not _open(report, "pkg/quant.py", "NPU913")
    scopes = moot_lines(report["skipped"], "NPU913", "pkg/quant.py")
    assert {22, 28, 29} <= scopes.keys()
    assert "in a branch an NPU host cannot run" in scopes[28] and "`mxfp8_quantize`" in scopes[28]
    assert "`_indices`, which always calls `get_permute_indices`" in scopes[22]
    # nearby true case: the FP8 cast runs before the branch reaches the gated call
    kept = _open(report, "pkg/quant_cast.py", "NPU913")
    assert [f["line"] for f in kept] == [15]


GUARD = """\
import torch

HAS_FLEX = torch.cuda.is_available() and torch.cuda.get_device_capability() >= (7, 5)
HAS_CUDA = torch.cuda.is_available()
"""

FLAGGED = """\
import torch

from pkg.guard import HAS_FLEX

if HAS_FLEX:
    def compiled():
        return torch.compile(torch.nn.functional.softmax, mode="max-autotune")
"""

FLAGGED_PARENTHESIZED = """\
import torch

from pkg.guard import (
    HAS_FLEX,
)

if HAS_FLEX and torch.__version__ >= "2.5":
    def compiled():
        return torch.compile(torch.nn.functional.softmax, mode="max-autotune")
"""

# (a flag an NPU host may set: torch.cuda.is_available() is migrated to the NPU's)
FLAGGED_AVAILABLE = """\
import torch

from pkg.guard import HAS_CUDA

if HAS_CUDA:
    def compiled():
        return torch.compile(torch.nn.functional.softmax, mode="max-autotune")
"""

PLAIN = """\
import torch


def always():
    return torch.compile(torch.nn.functional.relu, mode="max-autotune")
"""


def test_compile_under_an_imported_capability_flag_is_a_named_scope(tmp_path):
    root = write_project(tmp_path, {"pkg/__init__.py": "", "pkg/guard.py": GUARD, "pkg/attn.py": FLAGGED,
                                    "pkg/attn_paren.py": FLAGGED_PARENTHESIZED,
                                    "pkg/attn_cuda.py": FLAGGED_AVAILABLE, "pkg/plain.py": PLAIN})
    report = migrate_json(root)
    assert not _open(report, "pkg/attn.py", "NPU903")
    scopes = moot_lines(report["skipped"], "NPU903", "pkg/attn.py")
    assert "in a branch an NPU host does not take" in scopes[7] and "pkg/guard.py:3" in scopes[7]
    assert not _open(report, "pkg/attn_paren.py", "NPU903")
    assert 9 in moot_lines(report["skipped"], "NPU903", "pkg/attn_paren.py")
    # nearby true cases: the same compile without the flag, and under a flag true on an NPU host
    assert [f["line"] for f in _open(report, "pkg/plain.py", "NPU903")] == [5]
    assert [f["line"] for f in _open(report, "pkg/attn_cuda.py", "NPU903")] == [7]


def test_a_flag_another_module_assigns_is_not_trusted(tmp_path):
    for setter in ("import pkg.guard as g\ng.HAS_FLEX = True\n",
                   "from unittest import mock\n\nPATCH = mock.patch('pkg.guard.HAS_FLEX', True)\n"):
        root = write_project(tmp_path / str(len(setter)), {"pkg/__init__.py": "", "pkg/guard.py": GUARD,
                                                           "pkg/attn.py": FLAGGED, "pkg/setup_flags.py": setter})
        report = migrate_json(root)
        assert [f["line"] for f in _open(report, "pkg/attn.py", "NPU903")] == [7]


BENCH = """\
import torch
import triton
import triton.testing
from flashinfer import rmsnorm


def run():
    x = torch.randn(8, 8, device="cuda")
    fn = lambda: rmsnorm(x, x)
    return triton.testing.do_bench_cudagraph(fn)
"""

BENCH_KERNEL = """\
import torch
import triton
import triton.language as tl
from flashinfer import rmsnorm


@triton.jit
def kernel(x_ptr):
    tl.store(x_ptr, 1)


def run():
    x = torch.randn(8, 8, device="cuda")
    kernel[(1,)](x)
    return rmsnorm(x, x)
"""


def test_kernel_less_triton_import_folds_into_the_failing_import(tmp_path):
    root = write_project(tmp_path, {"bench/bench_norm.py": BENCH, "bench/bench_kernel.py": BENCH_KERNEL})
    report = migrate_json(root)
    assert not _open(report, "bench/bench_norm.py", "NPU910")
    (failing,) = _open(report, "bench/bench_norm.py", "NPU911")
    assert {2, 3, 10} <= {line for line, _c, _s in failing["also"]}
    assert "do_bench_cudagraph" in failing["message"] and "without Triton kernels" in failing["message"]
    # nearby true case: a file with a Triton kernel keeps its Triton finding
    assert _open(report, "bench/bench_kernel.py", "NPU910")
