"""Issue #16, precision on real projects: Triton that the code already keeps off an NPU host
(NPU910; npu_migrate/tritonguards.py, and the rewrite gate it feeds in families/platform.py).

Each shape judged false by the audits is reproduced with a small fixture, next to a true case that
must still be reported:
- kernels launched only behind a tensor device test the migration keeps (`if not x.is_cuda or ...:
  return x * y`, `if x.is_cuda: ... else: ...`), the guard one step away (a private launcher, an
  autograd Function chosen by a selector that holds a kept check): a named scope "runs as written";
  a kernel launched unconditionally, or behind `torch.cuda.is_available()` (rewritten), stays an
  error;
- the rewrite: a device comparison whose branch calls the module's own kernel launcher stays CUDA
  (NPU110, no NPU104), so that the NPU takes the torch path as in the original;
- a module that imports triton at module level, imported only under `if has_triton():` by every
  importer: a named scope; one imported unguarded somewhere stays an error;
- a `triton.testing`-only import inside `try`/`except ImportError`: a named scope; a file whose
  real blocker is an unguarded CUDA-only import: the harness is a place of that error.
"""

from __future__ import annotations

from pathlib import Path

from .precision_helpers import AS_WRITTEN_PREFIX, migrate_json, write_project

PLACEHOLDER = '''\
try:
    import triton
    import triton.language as tl
except ImportError:

    class _Placeholder:
        constexpr = None

        @staticmethod
        def jit(fn=None, **kwargs):
            return fn if fn is not None else (lambda f: f)

    triton = tl = _Placeholder()
'''

KERNEL = '''\
import torch

from pkg.triton_utils import tl, triton


@triton.jit
def _mul_kernel(X, Y, Out, N, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(Out + offs, tl.load(X + offs) * tl.load(Y + offs), offs < N)

'''

EARLY_RETURN = KERNEL + '''
def mul(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    if not x.is_cuda or x.shape != y.shape:
        return x * y
    out = torch.empty_like(x)
    _mul_kernel[(triton.cdiv(x.numel(), 256),)](x, y, out, x.numel(), 256)
    return out
'''

IF_ELSE = KERNEL + '''
def mul(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    if x.is_cuda:
        out = torch.empty_like(x)
        _mul_kernel[(triton.cdiv(x.numel(), 256),)](x, y, out, x.numel(), 256)
    else:
        out = x * y
    return out
'''

UNCONDITIONAL = KERNEL + '''
def mul(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    out = torch.empty_like(x)
    _mul_kernel[(triton.cdiv(x.numel(), 256),)](x, y, out, x.numel(), 256)
    return out
'''

AVAILABLE = KERNEL + '''
def mul(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    if torch.cuda.is_available():
        out = torch.empty_like(x)
        _mul_kernel[(triton.cdiv(x.numel(), 256),)](x, y, out, x.numel(), 256)
        return out
    return x * y
'''

LAUNCHER = KERNEL + '''
def _launch(x, y):
    out = torch.empty_like(x)
    _mul_kernel[(triton.cdiv(x.numel(), 256),)](x, y, out, x.numel(), 256)
    return out


def mul(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    if x.device.type == "cuda":
        return _launch(x, y)
    return x * y
'''

SELECTOR = '''\
import torch

from pkg.triton_utils import HAS_TRITON, tl, triton

if HAS_TRITON:

    @triton.jit
    def _scale_kernel(X, Out, N, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        tl.store(Out + offs, tl.load(X + offs) * 2, offs < N)


def triton_ready() -> bool:
    return HAS_TRITON


def _pick(x: torch.Tensor) -> str:
    on_cuda = x.device.type == "cuda"
    return "triton" if on_cuda and triton_ready() else "torch"


class _TritonScale(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        out = torch.empty_like(x)
        _scale_kernel[(triton.cdiv(x.numel(), 256),)](x, out, x.numel(), 256)
        return out


def scale(x: torch.Tensor) -> torch.Tensor:
    if _pick(x) == "triton":
        return _TritonScale.apply(x)
    else:
        return x * 2
'''


def _run(tmp_path: Path, files: dict[str, str]) -> dict:
    return migrate_json(write_project(tmp_path, files))


def _findings(report: dict, path: str, code: str) -> list[dict]:
    return [f for f in report["findings"] if f["path"] == path and f["code"] == code and not f["fixable"]]


def _as_written(report: dict, path: str, code: str = "NPU910") -> list[str]:
    prefix = f"{AS_WRITTEN_PREFIX}{code}): "
    return [s["reason"] for s in report["skipped"] if s["path"] == path and s.get("reason", "").startswith(prefix)]


def test_kernel_launched_only_on_cuda_tensors_is_a_named_scope(tmp_path):
    report = _run(tmp_path, {"pkg/__init__.py": "", "pkg/triton_utils.py": PLACEHOLDER,
                             "pkg/early.py": EARLY_RETURN, "pkg/ifelse.py": IF_ELSE,
                             "pkg/always.py": UNCONDITIONAL, "pkg/available.py": AVAILABLE})
    for path in ("pkg/early.py", "pkg/ifelse.py"):
        assert not _findings(report, path, "NPU910"), path
        assert not _findings(report, path, "NPU110"), path
        (reason,) = _as_written(report, path)
        assert "Triton kernels launched only on CUDA tensors" in reason and "x.is_cuda" in reason
    # true cases: no guard, or a guard the migration widens to the NPU
    for path in ("pkg/always.py", "pkg/available.py"):
        (finding,) = _findings(report, path, "NPU910")
        assert finding["severity"] == "error", path
        assert not _as_written(report, path)


def test_kernel_decorated_with_a_triton_the_file_may_lack_stays(tmp_path):
    """`triton` imported in a `try` of the file itself, `None` where it is missing: the module-level
    `@triton.jit` fails at import on an NPU host, guard or not."""
    own = EARLY_RETURN.replace("from pkg.triton_utils import tl, triton\n", """try:
    import triton
    import triton.language as tl
except ImportError:
    triton = tl = None
""")
    report = _run(tmp_path, {"pkg/__init__.py": "", "pkg/early.py": own})
    (finding,) = _findings(report, "pkg/early.py", "NPU910")
    assert finding["severity"] == "error"


def test_device_check_in_front_of_a_kernel_launcher_stays_cuda(tmp_path):
    report = _run(tmp_path, {"pkg/__init__.py": "", "pkg/triton_utils.py": PLACEHOLDER,
                             "pkg/launcher.py": LAUNCHER})
    rewritten = [f for f in report["findings"] if f["path"] == "pkg/launcher.py" and f["fixable"]]
    assert not [f for f in rewritten if f["code"] == "NPU104"], rewritten
    assert not _findings(report, "pkg/launcher.py", "NPU910")
    assert any("launched only on CUDA tensors" in r for r in _as_written(report, "pkg/launcher.py"))
    # the check kept is named (NPU110, a scope that runs as written: keptgates.py reads its fallback
    # first, tritonguards.py would give the kernels' reason)
    assert _as_written(report, "pkg/launcher.py", "NPU110") and not _findings(report, "pkg/launcher.py", "NPU110")


def test_launcher_rule_keeps_a_widened_check_elsewhere(tmp_path):
    """A device comparison in front of plain torch code is still rewritten in a Triton file."""
    text = LAUNCHER + '''

def describe(x):
    if x.device.type == "cuda":
        return "gpu"
    return "other"
'''
    report = _run(tmp_path, {"pkg/__init__.py": "", "pkg/triton_utils.py": PLACEHOLDER, "pkg/launcher.py": text})
    rewritten = [f for f in report["findings"] if f["path"] == "pkg/launcher.py" and f["fixable"]]
    assert [f["line"] for f in rewritten if f["code"] == "NPU104"] == [text.splitlines().index(
        '    if x.device.type == "cuda":', 20) + 1]


def test_kernel_chosen_by_a_selector_with_a_kept_check(tmp_path):
    placeholder = PLACEHOLDER + "HAS_TRITON = not isinstance(triton, _Placeholder)\n"
    report = _run(tmp_path, {"pkg/__init__.py": "", "pkg/triton_utils.py": placeholder,
                             "pkg/select.py": SELECTOR})
    assert not _findings(report, "pkg/select.py", "NPU910")
    assert any("launched only on CUDA tensors" in r for r in _as_written(report, "pkg/select.py"))
    assert not [f for f in report["findings"] if f["path"] == "pkg/select.py" and f["code"] == "NPU104"]
    # the same file with the class used outside the selector's branch: an error
    unguarded = SELECTOR + "\n\ndef scale_always(x):\n    return _TritonScale.apply(x)\n"
    report = _run(tmp_path / "b", {"pkg/__init__.py": "", "pkg/triton_utils.py": placeholder,
                                   "pkg/select.py": unguarded})
    (finding,) = _findings(report, "pkg/select.py", "NPU910")
    assert finding["severity"] == "error"


TRITON_MODULE = '''\
import torch
import triton
import triton.language as tl


@triton.jit
def _matmul_kernel(A, B, C, BLOCK: tl.constexpr):
    pass


def int8_mm(a, b):
    c = torch.empty(a.shape[0], b.shape[1], device=a.device)
    _matmul_kernel[(1,)](a, b, c, 16)
    return c
'''

GUARDED_IMPORTER = '''\
import torch

from pkg.utils import has_triton

if has_triton():
    from .int8_mm import int8_mm
else:
    def int8_mm(a, b):
        return torch._int_mm(a, b)
'''

UNGUARDED_IMPORTER = '''\
from pkg.int8_mm import int8_mm


def run(a, b):
    return int8_mm(a, b)
'''


def test_module_imported_only_under_a_triton_availability_test(tmp_path):
    files = {"pkg/__init__.py": "", "pkg/utils.py": "def has_triton():\n    return False\n",
             "pkg/int8_mm.py": TRITON_MODULE, "pkg/mixed.py": GUARDED_IMPORTER,
             "pkg/bitnet.py": GUARDED_IMPORTER}
    report = _run(tmp_path, files)
    # info, not a named scope: Triton-Ascend makes the test true on an NPU host, where the kernels run
    (found,) = _findings(report, "pkg/int8_mm.py", "NPU910")
    reason = found["message"]
    assert found["severity"] == "info" and not _as_written(report, "pkg/int8_mm.py")
    assert "imported only behind a Triton-availability test" in reason and "Triton-Ascend" in reason
    assert "pkg/mixed.py:6" in reason and "has_triton()" in reason
    assert "imported unguarded" not in reason
    # true case: one importer imports it unguarded
    report = _run(tmp_path / "b", {**files, "pkg/plain.py": UNGUARDED_IMPORTER})
    (finding,) = _findings(report, "pkg/int8_mm.py", "NPU910")
    assert finding["severity"] == "error" and "imported unguarded" in finding["message"]


def test_module_imported_under_a_negated_triton_test_stays(tmp_path):
    negated = GUARDED_IMPORTER.replace("if has_triton():", "if not has_triton():")
    report = _run(tmp_path, {"pkg/__init__.py": "", "pkg/utils.py": "def has_triton():\n    return False\n",
                             "pkg/int8_mm.py": TRITON_MODULE, "pkg/mixed.py": negated})
    (finding,) = _findings(report, "pkg/int8_mm.py", "NPU910")
    assert finding["severity"] == "error"


HARNESS_GUARDED = '''\
import logging

import torch

_has_triton = torch.cuda.is_available()
if _has_triton:
    try:
        import triton
    except ImportError as e:
        logging.warning(f"no triton: {e}")
        _has_triton = False


def timed(fn):
    if _has_triton:
        try:
            return triton.testing.do_bench(fn)
        except triton.runtime.autotuner.OutOfResources:
            return None
    return None
'''

HARNESS_BLOCKED = '''\
import torch
import triton
import triton.testing
from flashinfer import rmsnorm


@triton.testing.perf_report(triton.testing.Benchmark(x_names=["n"], x_vals=[1], line_arg="p",
                                                     line_vals=["a"], line_names=["a"], ylabel="us",
                                                     plot_name="rms", args={}))
def bench(n, p):
    x = torch.randn(n, device="cuda")
    return triton.testing.do_bench(lambda: rmsnorm(x, x))
'''

HARNESS_UNGUARDED = HARNESS_GUARDED.replace('''    try:
        import triton
    except ImportError as e:
        logging.warning(f"no triton: {e}")
        _has_triton = False
''', '''    pass
import triton
''')


def test_guarded_benchmark_harness_is_a_named_scope(tmp_path):
    report = _run(tmp_path, {"bench/utils.py": HARNESS_GUARDED, "bench/plain.py": HARNESS_UNGUARDED})
    assert not _findings(report, "bench/utils.py", "NPU910")
    (reason,) = _as_written(report, "bench/utils.py")
    assert "guarded import of Triton's benchmark harness" in reason
    # the harness imported unguarded in a file with no other blocker keeps its own finding (info)
    (finding,) = _findings(report, "bench/plain.py", "NPU910")
    assert "benchmark harness" in finding["message"] and not _as_written(report, "bench/plain.py")


def test_harness_folds_into_the_files_unguarded_cuda_only_import(tmp_path):
    report = _run(tmp_path, {"bench/rms.py": HARNESS_BLOCKED})
    assert not _findings(report, "bench/rms.py", "NPU910")
    (blocker,) = _findings(report, "bench/rms.py", "NPU911")
    assert blocker["severity"] == "error" and "flashinfer" in blocker["message"]
    # only `perf_report` / `do_bench`: the harness runs as written on Triton-Ascend (kernels.py's
    # host-helper scope, which now reads `perf_report` as a decorator too), so nothing to fold
    assert any(s["path"] == "bench/rms.py" and "NPU910" in s["reason"] and "host helpers" in s["reason"]
               for s in report["skipped"])
