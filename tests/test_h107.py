"""Round-25 precision wave, helper h107 (issue #16): info notes the run itself proves unreached on an
NPU host become named scopes (unreached25.py: BR#23, BS#15, BR#28), beside the nearest notes that
stay info because something a user can change on an NPU host (an installed package, a caller's
flag) opens the way."""

from __future__ import annotations

import pytest

from tests.precision_helpers import findings_at, migrate_json, moot_lines, write_project

# ------------------------------------------------------------------ a CuTe-DSL module behind a capability flag
_PROBE = """\
from importlib.util import find_spec


def dsl_runtime_available() -> bool:
    return find_spec("cutlass") is not None
"""

_KERNEL = """\
import cutlass
import cutlass.cute as cute


def quantize_dsl(x):
    return cute.compile(x)
"""


def _quant(flag: str) -> str:
    return f"""\
import torch

from pkg.ops._probe import dsl_runtime_available


def _is_sm_100() -> bool:
    return torch.cuda.is_available() and torch.cuda.get_device_capability()[0] == 10


_DSL_READY = {flag}


def _dsl_quantize(x):
    from pkg.ops.dsl_kernel import quantize_dsl

    return quantize_dsl(x)


def quantize(x):
    if _DSL_READY:
        return _dsl_quantize(x)
    return x.to(torch.bfloat16)
"""


def _dsl_project(tmp_path, flag: str) -> dict:
    files = {"pkg/__init__.py": "", "pkg/ops/__init__.py": "", "pkg/ops/_probe.py": _PROBE,
             "pkg/ops/dsl_kernel.py": _KERNEL, "pkg/ops/quant.py": _quant(flag)}
    return migrate_json(write_project(tmp_path, files))


def test_a_dsl_module_behind_a_capability_flag_is_a_named_scope(tmp_path):
    """BR#23, BS#15: the only way in is a function the module calls only under a flag whose
    conjunct `_is_sm_100()` is a capability test false on an NPU host: a named scope naming it."""
    report = _dsl_project(tmp_path, "_is_sm_100() and dsl_runtime_available()")
    assert not findings_at(report, "pkg/ops/dsl_kernel.py", "NPU911"), report["findings"]
    scopes = moot_lines(report["skipped"], "NPU911", "pkg/ops/dsl_kernel.py")
    assert 1 in scopes and 2 in scopes, report["skipped"]
    assert ("proven unreached on an NPU host: every function that loads it is called only under a module "
            "flag false on an NPU host: `_DSL_READY` (pkg/ops/quant.py:10) holds `_is_sm_100()` (line 6: ") \
        in scopes[1]
    assert "a compute-capability test false there" in scopes[1]


def test_a_dsl_module_behind_a_package_probe_only_stays_info(tmp_path):
    """The nearest true case: the flag is only the package probe; the DSL wheels install without a
    GPU, so a user can open the way on an NPU host: the note stays info, naming the probe."""
    report = _dsl_project(tmp_path, "dsl_runtime_available()")
    found = findings_at(report, "pkg/ops/dsl_kernel.py", "NPU911")
    assert found and all(f["severity"] == "info" for f in found.values()), found
    assert any("which the module calls only under `_DSL_READY`" in f["message"] for f in found.values())
    assert not moot_lines(report["skipped"], "NPU911", "pkg/ops/dsl_kernel.py")


def test_a_capability_helper_with_more_than_a_return_stays_info(tmp_path):
    """A helper the run cannot read as one `return` of a capability test (it may answer True on
    another path) proves nothing: the note stays info."""
    files_quant = _quant("_sm_or_env() and dsl_runtime_available()").replace(
        "_DSL_READY = ", "def _sm_or_env():\n    import os\n    if os.environ.get(\"FORCE_DSL\"):\n"
        "        return True\n    return _is_sm_100()\n\n\n_DSL_READY = ")
    report = migrate_json(write_project(tmp_path / "b", {
        "pkg/__init__.py": "", "pkg/ops/__init__.py": "", "pkg/ops/_probe.py": _PROBE,
        "pkg/ops/dsl_kernel.py": _KERNEL, "pkg/ops/quant.py": files_quant}))
    found = findings_at(report, "pkg/ops/dsl_kernel.py", "NPU911")
    assert found and all(f["severity"] == "info" for f in found.values()), found
    assert not moot_lines(report["skipped"], "NPU911", "pkg/ops/dsl_kernel.py")


def test_a_cuda_version_flag_closes_the_way_too(tmp_path):
    """`torch.version.cuda` is None on an NPU build: a flag needing it is false there."""
    report = _dsl_project(tmp_path, "torch.version.cuda is not None and dsl_runtime_available()")
    assert not findings_at(report, "pkg/ops/dsl_kernel.py", "NPU911"), report["findings"]
    scopes = moot_lines(report["skipped"], "NPU911", "pkg/ops/dsl_kernel.py")
    assert "a CUDA version test false there" in scopes[1], scopes


# ------------------------------------------------------------------ a parameter that defaults to False, set by no call
_PROFILE = '''\
import contextlib

import torch


def profile_context(enable, nsys=False):
    class NsysProfiler:
        def __enter__(self):
            torch.cuda.cudart().cudaProfilerStart()

        def __exit__(self, *exc):
            torch.cuda.cudart().cudaProfilerStop()

    if enable:
        if nsys:
            return NsysProfiler()
    return contextlib.nullcontext()
'''


@pytest.mark.parametrize("where", ["private function", "not a package", "examples package"])
def test_an_nsight_hook_under_a_flag_no_call_sets_is_a_named_scope(tmp_path, where):
    """BR#28: `nsys` defaults to False and no call of the run sets it, in a function no user of
    the package can call (a private one, or a module outside any package: BR#28's examples/
    script): a named scope naming the `if nsys:` line."""
    if where == "private function":
        path, text = "proj/perf.py", _PROFILE.replace("def profile_context", "def _profile_context")
        files = {"proj/__init__.py": "", path: text,
                 "proj/train.py": "from proj.perf import _profile_context\n\nwith _profile_context(True):\n    pass\n"}
    else:
        path = "examples/perf.py"
        files = {"proj/__init__.py": "", path: _PROFILE,
                 "examples/train.py": "from perf import profile_context\n\nwith profile_context(True):\n    pass\n"}
        if where == "examples package":  # BR#28: examples/language/ holds an __init__.py, still not shipped
            files["examples/__init__.py"] = ""
    report = migrate_json(write_project(tmp_path, files))
    assert not findings_at(report, path, "NPU202"), report["findings"]
    scopes = moot_lines(report["skipped"], "NPU202", path)
    assert (f"proven unreached on an NPU host: under `if nsys:` ({path}:15), a parameter that defaults "
            "to False and that no call in the run sets") in scopes[9], scopes


def test_an_nsight_hook_of_a_public_library_function_stays_info(tmp_path):
    """The package's users may call `profile_context(..., nsys=True)` on an NPU host: the way is
    theirs to open, so the note stays info (owner's decision, session 36)."""
    files = {"proj/__init__.py": "", "proj/perf.py": _PROFILE,
             "proj/train.py": "from proj.perf import profile_context\n\nwith profile_context(True):\n    pass\n"}
    report = migrate_json(write_project(tmp_path, files))
    found = findings_at(report, "proj/perf.py", "NPU202")
    assert found[9]["severity"] == "info" and "defaults to False and no call in the run sets it" in found[9]["message"]
    assert not moot_lines(report["skipped"], "NPU202", "proj/perf.py")


def test_an_nsight_hook_a_caller_turns_on_stays_reported(tmp_path):
    """The nearest true case: a caller passes a user's choice (`nsys=args.nsys`): reported."""
    files = {"proj/__init__.py": "", "proj/perf.py": _PROFILE,
             "proj/train.py": "import sys\n\nfrom proj.perf import profile_context\n\n"
                              "with profile_context(True, nsys='--nsys' in sys.argv):\n    pass\n"}
    report = migrate_json(write_project(tmp_path, files))
    found = findings_at(report, "proj/perf.py", "NPU202")
    assert found, report["findings"]
    assert not moot_lines(report["skipped"], "NPU202", "proj/perf.py")


_PLAIN = """\
def quant(x, scale=False):
    if scale:
        from deep_gemm import transform_sf

        return transform_sf(x)
    return x
"""


def test_a_cuda_only_import_under_a_parameter_no_call_sets_is_a_named_scope(tmp_path):
    """flagargs21's "under a parameter no call of the run sets": every call passes False, and the
    function is private (a public one stays info: test_h87)."""
    files = {"pkg/__init__.py": "", "pkg/plain.py": _PLAIN.replace("def quant", "def _quant"),
             "pkg/use.py": "from pkg.plain import _quant\n\n\ndef f(x):\n    return _quant(x, scale=False)\n"}
    report = migrate_json(write_project(tmp_path, files))
    assert not findings_at(report, "pkg/plain.py", "NPU911"), report["findings"]
    scopes = moot_lines(report["skipped"], "NPU911", "pkg/plain.py")
    assert "under `if scale:` (pkg/plain.py:2), a parameter that defaults to False" in scopes[3], scopes


def test_a_cuda_only_import_under_a_parameter_a_call_sets_stays_an_error(tmp_path):
    files = {"pkg/__init__.py": "", "pkg/plain.py": _PLAIN,
             "pkg/use.py": "from pkg.plain import quant\n\n\ndef f(x):\n    return quant(x, scale=True)\n"}
    report = migrate_json(write_project(tmp_path, files))
    found = findings_at(report, "pkg/plain.py", "NPU911")
    assert found and any(f["severity"] == "error" for f in found.values()), found
    assert not moot_lines(report["skipped"], "NPU911", "pkg/plain.py")


# ------------------------------------------------------------------ a name-selected backend behind a capability check that raises
_UTILS = """\
import torch


def _is_hopper() -> bool:
    if not torch.cuda.is_available():
        return False
    major, _ = torch.cuda.get_device_capability()
    return major == 9
"""

_API = """\
from pkg.attn.setup import setup_backend
from pkg.attn.utils import _is_hopper


def _available():
    if _is_hopper():
        return "fa3"
    raise RuntimeError("no compatible backend")


def _check(backend):
    if backend == "fa3":
        if not _is_hopper():
            raise RuntimeError("fa3 needs Hopper")
    else:
        raise ValueError(backend)


def apply(model, backend=None):
    if backend is None:
        backend = _available()
    else:
        _check(backend)
    return setup_backend(model, backend)
"""

_SETUP = """\
def setup_backend(model, name):
    if name == "fa3":
        from pkg.attn.fa3.kernels import wrap

        return wrap(model)
    raise ValueError(name)
"""

_KERNELS = """\
import triton
import triton.language as tl


@triton.jit
def _scale_kernel(x_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(x_ptr + offs, tl.load(x_ptr + offs, mask=offs < n) * 2, mask=offs < n)


def wrap(model):
    return model
"""


def _attention_project(tmp_path, extra: dict | None = None) -> dict:
    files = {"pkg/__init__.py": "", "pkg/attn/__init__.py": "", "pkg/attn/utils.py": _UTILS,
             "pkg/attn/api.py": _API, "pkg/attn/setup.py": _SETUP, "pkg/attn/fa3/__init__.py": "",
             "pkg/attn/fa3/kernels.py": _KERNELS, **(extra or {})}
    return migrate_json(write_project(tmp_path, files))


def test_a_kernel_module_selected_only_after_a_raising_capability_check_is_a_named_scope(tmp_path):
    """BR#9, BR#19, BT#11: the Triton module is loaded only by `setup_backend` when "fa3" is
    selected, and the one call of `setup_backend` comes after `_available()` / `_check()`, each of
    which raises on an NPU host (`_is_hopper()` is false there): a named scope naming them."""
    report = _attention_project(tmp_path)
    assert not findings_at(report, "pkg/attn/fa3/kernels.py", "NPU910"), report["findings"]
    scopes = moot_lines(report["skipped"], "NPU910", "pkg/attn/fa3/kernels.py")
    assert scopes, report["skipped"]
    reason = next(iter(scopes.values()))
    assert ("proven unreached on an NPU host: every call of `setup_backend` that loads it is closed there: "
            "pkg/attn/api.py:24: `apply` calls it (line 24) only after line 20, `_available()` (line 5: raises "
            "on an NPU host: line 6, `_is_hopper()`, a compute-capability test false there") in reason, reason
    assert "only when a feature is selected" in reason


def test_a_kernel_module_a_caller_selects_without_the_check_stays_info(tmp_path):
    """The nearest true case: another module selects "fa3" without the capability check; a user
    can take that way on an NPU host: the note stays info."""
    direct = {"pkg/attn/direct.py": "from pkg.attn.setup import setup_backend\n\n\n"
                                    "def fast(model):\n    return setup_backend(model, \"fa3\")\n"}
    report = _attention_project(tmp_path, direct)
    found = findings_at(report, "pkg/attn/fa3/kernels.py", "NPU910")
    assert found and all(f["severity"] == "info" for f in found.values()), found
    assert not moot_lines(report["skipped"], "NPU910", "pkg/attn/fa3/kernels.py")


def test_a_check_that_may_return_keeps_the_note(tmp_path):
    """A check whose other arm returns (an eager fallback it picks itself) proves no raise."""
    api = _API.replace('    raise RuntimeError("no compatible backend")', '    return "eager"')
    report = _attention_project(tmp_path, {"pkg/attn/api.py": api})
    found = findings_at(report, "pkg/attn/fa3/kernels.py", "NPU910")
    assert found and all(f["severity"] == "info" for f in found.values()), found


_LEGACY = """\
from pkg.attn.config import AttnConfig
from pkg.attn.setup import setup_backend


def setup_fa3(model, config: AttnConfig):
    return setup_backend(model, "fa3")
"""


def test_a_caller_in_a_module_that_cannot_import_closes_its_way(tmp_path):
    """BR#9's second way: a stale module nothing imports names `pkg.attn.config`, which the
    package does not have: it fails to import on every host, so its call closes nothing open."""
    report = _attention_project(tmp_path, {"pkg/attn/legacy.py": _LEGACY})
    assert not findings_at(report, "pkg/attn/fa3/kernels.py", "NPU910"), report["findings"]
    reason = next(iter(moot_lines(report["skipped"], "NPU910", "pkg/attn/fa3/kernels.py").values()))
    assert ("pkg/attn/legacy.py:6: `setup_backend` called at line 6 of a module that fails to import on any "
            "host (line 1 imports `pkg.attn.config`, a module the package does not have)") in reason, reason


def test_a_module_with_a_missing_import_that_another_imports_keeps_the_note(tmp_path):
    """The nearest true case: another module imports it (the missing module may be one a build
    generates): its call may run, and the note stays info."""
    report = _attention_project(tmp_path, {"pkg/attn/legacy.py": _LEGACY,
                                           "pkg/attn/__init__.py": "from pkg.attn import legacy\n"})
    found = findings_at(report, "pkg/attn/fa3/kernels.py", "NPU910")
    assert found and all(f["severity"] == "info" for f in found.values()), found
