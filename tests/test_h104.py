"""Round-24 precision wave, helper h104 (issue #16): code serving only a package the module imports
under a gate false on an NPU host (gatedusers24.py, BO#29)."""

from __future__ import annotations

from tests.precision_helpers import findings_at, migrate_json, moot_lines, write_project
from tests.test_h71 import _UTILS  # (the capability helper of test_h71's configurer: one fixture)

# (the only way out of `_compute_enable` on an NPU host: the capability check, then the import probe)
_CONFIGURER = """\
import os

from pkg.utils import get_device_sm


def _compute_enable():
    if get_device_sm() < 90:
        return False
    try:
        import deep_gemm  # noqa: F401
    except ImportError:
        return False
    return os.environ.get("USE_FAST_GEMM", "1") == "1"


USE_FAST_GEMM = _compute_enable()
"""

# the warm-up module: FP8 buffers only executors driving `deep_gemm` use
_WARMUP = """\
import torch

from pkg.configurer import USE_FAST_GEMM

if USE_FAST_GEMM:
    import deep_gemm


def _fp8_buffer(size):
    return torch.empty(size, dtype=torch.float8_e4m3fn)


class _Executor:
    @staticmethod
    def create(kind, **kwargs):
        return {1: _Dense, 2: _Grouped}[kind](**kwargs)

    def execute(self, m):
        raise NotImplementedError


class _Dense(_Executor):
    def __init__(self, m, k):
        self.lhs = _fp8_buffer((m, k))

    def execute(self, m):
        deep_gemm.gemm(self.lhs[:m])


class _Grouped(_Executor):
    def __init__(self, m, k):
        self.lhs = _fp8_buffer((4, m, k))

    def execute(self, m):
        deep_gemm.grouped_gemm(self.lhs[:, :m])


def _copy_kernel():
    from sgl_kernel import copy_to_gpu

    return copy_to_gpu


def compile_all(kind, sizes):
    try:
        executor = _Executor.create(kind, m=max(sizes), k=128)
        copy = _copy_kernel()
        mode = deep_gemm.get_mode()
        for m in sizes:
            executor.execute(m)
        deep_gemm.set_mode(mode)
    finally:
        pass


def run_checked(x):
    x8 = x.to(torch.float8_e4m3fn)
    return deep_gemm.gemm(x8)


"""

# the nearest true cases, beside the same gated import in another module
_KEPT = """\
import torch

from pkg.configurer import USE_FAST_GEMM

if USE_FAST_GEMM:
    import deep_gemm


def _shared_fp8(size):
    return torch.zeros(size, dtype=torch.float8_e4m3fn)


def maybe_gemm(x):
    x8 = x.to(torch.float8_e4m3fn)
    if USE_FAST_GEMM:
        return deep_gemm.gemm(x8)
    return x8.float() @ x8.float().t()


def reference(x):
    return x.to(torch.float8_e4m3fn).float()


def with_fallback(x):
    y = _shared_fp8(x.shape)
    try:
        return deep_gemm.gemm(y)
    except NameError:
        return y.float()
"""

# another module calls `reference` (an NPU host may run it) and `_shared_fp8`'s caller catches
_OTHER = """\
from pkg.kept import reference


def check(x):
    return reference(x)
"""


# a runner in another module: FP8 after an unconditional call of `run_checked` (which always needs
# the gated package), and FP8 after a call under a condition
_RUNNER = """\
import torch

from pkg import warmup


def run_masked(x):
    y = torch.empty(x.shape, dtype=torch.bfloat16)
    warmup.run_checked(y)
    return torch.empty(x.shape, dtype=torch.float8_e4m3fn)
"""

_RUNNER2 = """\
import torch

from pkg import warmup


def run_maybe(x):
    if x.numel() > 1:
        warmup.run_checked(x)
    return torch.empty(x.shape, dtype=torch.float8_e4m3fn)
"""


def _project(tmp_path, warmup=_WARMUP, extra=None):
    root = write_project(tmp_path, {**(extra or {}), 
        "pkg/__init__.py": "",
        "pkg/utils.py": _UTILS,
        "pkg/configurer.py": _CONFIGURER,
        "pkg/warmup.py": warmup,
        "pkg/other.py": _OTHER,
        "pkg/runner.py": _RUNNER,
        "pkg/runner2.py": _RUNNER2,
        "pkg/kept.py": _KEPT,
    })
    return migrate_json(root)


def _open_places(report, path: str = "pkg/warmup.py", code: str = "NPU913") -> set:
    """Every line of the open (not info) findings of `code` in `path`, merged places included."""
    return {n for f in findings_at(report, path, code).values() if f["severity"] != "info"
            for n in (f["line"], *(a[0] for a in f.get("also", [])))}


def _line(text: str, needle: str) -> int:
    return next(n for n, line in enumerate(text.splitlines(), 1) if needle in line)


def test_helpers_serving_only_a_package_imported_under_a_false_flag_are_scopes(tmp_path):
    """BO#29: `_fp8_buffer` is used only by the constructors of executors built only by
    `_Executor.create`, which only `compile_all` calls, and `compile_all` always uses `deep_gemm`
    (inside a `try` with only a `finally`), imported only under `if USE_FAST_GEMM:` (False on an
    NPU host). `run_checked` always calls it itself: a named scope too."""
    report = _project(tmp_path)
    scopes = moot_lines(report["skipped"], "NPU913", "pkg/warmup.py")
    helper = _line(_WARMUP, "def _fp8_buffer") + 1
    assert helper in scopes, scopes
    assert "`_fp8_buffer` serves only code that cannot run there" in scopes[helper]
    assert "`compile_all` always uses `deep_gemm`" in scopes[helper]
    assert "`if USE_FAST_GEMM:`" in scopes[helper]
    checked = _line(_WARMUP, "x8 = x.to(torch.float8_e4m3fn)")
    assert checked in scopes and "`run_checked` always uses `deep_gemm`" in scopes[checked], scopes


def test_code_an_npu_host_may_run_beside_them_stays_reported(tmp_path):
    """The nearest true cases stay errors: FP8 before a gated use under the flag's own `if` (the
    fallback runs there), a public helper another module calls, and a helper whose only caller
    catches the NameError (its fallback runs on an NPU host)."""
    report = _project(tmp_path)
    open_lines = _open_places(report, "pkg/kept.py")
    assert _line(_KEPT, "x8 = x.to(torch.float8_e4m3fn)") in open_lines, open_lines
    assert _line(_KEPT, "return x.to(torch.float8_e4m3fn).float()") in open_lines
    assert _line(_KEPT, "def _shared_fp8") + 1 in open_lines
    assert not moot_lines(report["skipped"], "NPU913", "pkg/kept.py")


def test_a_flag_that_may_be_true_there_keeps_everything(tmp_path):
    """Without the gate false on an NPU host (the import at module level), nothing is lowered."""
    unguarded = _WARMUP.replace("if USE_FAST_GEMM:\n    import deep_gemm\n", "import deep_gemm\n")
    report = _project(tmp_path, warmup=unguarded)
    assert not moot_lines(report["skipped"], "NPU913", "pkg/warmup.py")
    checked = _line(unguarded, "x8 = x.to(torch.float8_e4m3fn)")
    assert checked in _open_places(report) | _open_places(report, code="NPU911")  # (folded into the import's error)


def test_a_helper_also_used_at_module_level_stays_reported(tmp_path):
    """A module-level use of `_fp8_buffer` (run at import, an NPU host included) keeps its error
    (and the finding its place is merged into stays whole)."""
    report = _project(tmp_path, warmup=_WARMUP + "\n\nPROBE = _fp8_buffer((1, 1))\n")
    helper = _line(_WARMUP, "def _fp8_buffer") + 1
    assert helper not in moot_lines(report["skipped"], "NPU913", "pkg/warmup.py")
    assert helper in _open_places(report)


def test_a_cuda_only_import_in_such_a_helper_is_information_naming_what_to_port(tmp_path):
    """Not FP8: a CUDA-only import in a helper only `compile_all` uses is a port item if that code
    is reached, so it is information (not a named scope) naming the function to port or gate."""
    report = _project(tmp_path)
    line = _line(_WARMUP, "from sgl_kernel import copy_to_gpu")
    found = findings_at(report, "pkg/warmup.py", "NPU911")
    # (the file's other NPU911 note, the gated `import deep_gemm`, is info too: since session 42 the
    # two are one finding (infojoin31: one per file per ecosystem), listing this line with its reason)
    note = next((f for f in found.values() if line == f["line"] or line in [p[0] for p in f.get("also", [])]), None)
    assert note is not None and note["severity"] == "info", found
    assert "only code that cannot complete on an NPU host reaches it: `_copy_kernel` is used only by `compile_all`" \
        in note["message"]
    assert f"line {line}: information: only code" in note["message"] or line == note["line"], note["message"]
    assert line not in moot_lines(report["skipped"], "NPU911", "pkg/warmup.py")


def test_a_cuda_only_import_on_the_way_to_an_api_other_modules_call_stays_an_error(tmp_path):
    """The same helper, when another module calls `compile_all` (an API whose failure on an NPU
    host matters): its CUDA-only import stays an error; its FP8 buffers are still a scope."""
    report = _project(tmp_path, extra={"pkg/api.py": "from pkg.warmup import compile_all\n\n\n"
                                                      "def warm(kind):\n    return compile_all(kind, [1])\n"})
    line = _line(_WARMUP, "from sgl_kernel import copy_to_gpu")
    found = findings_at(report, "pkg/warmup.py", "NPU911")
    assert line in found and found[line]["severity"] == "error", found
    assert _line(_WARMUP, "def _fp8_buffer") + 1 in moot_lines(report["skipped"], "NPU913", "pkg/warmup.py")


def test_lines_after_an_unconditional_call_of_such_a_function_are_information(tmp_path):
    """In another module, FP8 after `warmup.run_checked(...)` (always needing the gated package)
    only runs where that package is loaded: information. After the same call under a condition,
    it stays an error."""
    report = _project(tmp_path)
    masked = _line(_RUNNER, "return torch.empty(x.shape, dtype=torch.float8_e4m3fn)")
    found = findings_at(report, "pkg/runner.py", "NPU913")
    assert masked in found and found[masked]["severity"] == "info", found
    assert "not reached on an NPU host: after `warmup.run_checked(...)`" in found[masked]["message"]
    assert len(_RUNNER2.splitlines()) in _open_places(report, "pkg/runner2.py")
