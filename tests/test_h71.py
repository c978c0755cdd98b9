"""Round 19 (issue #16): code gated by a flag ANOTHER module computes by calling a project function
that returns False on an NPU host (flagcalls19.py): `ENABLE = _compute_enable()`, the function
returning False unless an import of a package with no NPU build succeeds, read elsewhere as
`wrapper.ENABLE` (re-exported through `from .entry import *`) or an imported name. Each false case
is paired with the nearest true one that stays reported."""

from .precision_helpers import findings_at, migrate_json, moot_lines, write_project

_UTILS = """\
import torch


def is_hip():
    return torch.version.hip is not None


def get_device_sm():
    if torch.cuda.is_available():
        major, minor = torch.cuda.get_device_capability()
        return major * 10 + minor
    return 0
"""

# (the only way out of `_compute_enable` on an NPU host: `import fast_kernels` fails there)
_CONFIGURER = """\
import os

from pkg.utils import get_device_sm


def _compute_enable():
    sm_version = get_device_sm()
    if sm_version < 90:
        return False
{probe}
    return os.environ.get("ENABLE_FAST_GEMM", "1") == "1"


ENABLE_FAST_GEMM = _compute_enable()
FAST_GEMM_SCALE = ENABLE_FAST_GEMM and get_device_sm() >= 100
"""

_PROBE = """\
    try:
        import deep_gemm  # noqa: F401
    except ImportError:
        return False
"""

_CONSUMER = """\
import torch

from pkg import wrapper


def quantize(x):
    if wrapper.ENABLE_FAST_GEMM:
        return x.to(torch.float8_e4m3fn)
    return x


def fast_path(x):
    assert x.dim() == 2 and wrapper.FAST_GEMM_SCALE
    y = x.to(torch.float8_e4m3fn)
    return y


def fallback(x):
    if not wrapper.ENABLE_FAST_GEMM:
        return x.to(torch.float8_e5m2)
    return x


def plain(x):
    return x.to(torch.float8_e4m3fn)
"""

_CONSUMER2 = """\
import torch

from pkg.wrapper.configurer import ENABLE_FAST_GEMM


def quantize(x):
    if not ENABLE_FAST_GEMM:
        raise RuntimeError("fast gemm unavailable")
    return x.to(torch.float8_e4m3fn)
"""


def _project(tmp_path, probe: str = _PROBE, extra: dict | None = None):
    files = {"pkg/__init__.py": "", "pkg/utils.py": _UTILS,
             "pkg/wrapper/__init__.py": "from .entry import *\n",
             "pkg/wrapper/entry.py": "from pkg.wrapper.configurer import ENABLE_FAST_GEMM, FAST_GEMM_SCALE  # noqa: F401\n",
             "pkg/wrapper/configurer.py": _CONFIGURER.format(probe=probe.rstrip("\n")),
             "pkg/consumer.py": _CONSUMER, "pkg/consumer2.py": _CONSUMER2, **(extra or {})}
    return migrate_json(write_project(tmp_path, files))


def _open_lines(report: dict, path: str, code: str) -> set[int]:
    return {n for f in findings_at(report, path, code).values() if f["severity"] != "info"
            for n in (f["line"], *(line for line, _c, _s in f.get("also") or ()))}


def test_code_behind_a_flag_another_module_computes_false_is_a_named_scope(tmp_path):
    """`if wrapper.ENABLE_FAST_GEMM:` (the flag re-exported by `import *`), the rest of a function
    after `assert ... and wrapper.FAST_GEMM_SCALE` (a flag derived from it) and after `if not
    ENABLE_FAST_GEMM: raise`: never run on an NPU host, named scopes saying where the flag is
    computed. The FP8 use no flag gates (`plain`) and the one in the branch an NPU host takes (`if
    not wrapper.ENABLE_FAST_GEMM:`) stay reported."""
    report = _project(tmp_path)
    scopes = moot_lines(report["skipped"], "NPU913", "pkg/consumer.py")
    assert {8, 14} <= scopes.keys(), scopes
    assert "pkg/wrapper/configurer.py:17 `ENABLE_FAST_GEMM = _compute_enable()`" in scopes[8]
    assert "after `assert x.dim() == 2 and wrapper.FAST_GEMM_SCALE`" in scopes[14]
    assert _open_lines(report, "pkg/consumer.py", "NPU913") == {20, 25}
    scopes2 = moot_lines(report["skipped"], "NPU913", "pkg/consumer2.py")
    assert 9 in scopes2 and "after `if not ENABLE_FAST_GEMM: raise`" in scopes2[9], scopes2
    assert not _open_lines(report, "pkg/consumer2.py", "NPU913")


def test_a_flag_an_env_override_can_turn_on_stays_reported(tmp_path):
    """Without the import probe, `_compute_enable()` can return the environment's answer on an NPU
    host (the capability check is not known false there): nothing is lowered."""
    report = _project(tmp_path, probe="    pass\n")
    assert {8, 14, 20, 25} <= _open_lines(report, "pkg/consumer.py", "NPU913")
    assert not moot_lines(report["skipped"], "NPU913", "pkg/consumer.py")
    assert _open_lines(report, "pkg/consumer2.py", "NPU913") == {9}


def test_a_flag_another_file_assigns_stays_reported(tmp_path):
    """A module of the run that sets `wrapper.ENABLE_FAST_GEMM = True` can turn the flag on: the
    code behind it stays reported (an assignment of False, as a model that disables it, would not)."""
    for n, setter in enumerate(("from pkg import wrapper\n\n\ndef force():\n    wrapper.ENABLE_FAST_GEMM = True\n",
                                "from unittest import mock\n\nPATCH = mock.patch('pkg.wrapper.ENABLE_FAST_GEMM', True)\n")):
        report = _project(tmp_path / str(n), extra={"pkg/setter.py": setter})
        # (FAST_GEMM_SCALE, derived from it, is not read either)
        assert {8, 14, 20, 25} <= _open_lines(report, "pkg/consumer.py", "NPU913"), setter
        assert not moot_lines(report["skipped"], "NPU913", "pkg/consumer.py")


def test_a_probe_that_raises_instead_of_returning_false_is_not_read(tmp_path):
    """A function that raises on its way out (`except ImportError: raise`) is not known to return
    False: the code behind the flag stays reported."""
    probe = "    try:\n        import deep_gemm  # noqa: F401\n    except ImportError:\n        raise\n"
    report = _project(tmp_path, probe=probe)
    assert {8, 14, 20, 25} <= _open_lines(report, "pkg/consumer.py", "NPU913")


def test_a_cuda_only_import_behind_the_flag_read_outside_it_stays_reported(tmp_path):
    """`if ENABLE_FAST_GEMM: from sgl_kernel import fp8_gemm` whose name is read in a function no
    flag gates: a NameError on an NPU host wherever that function runs, the import stays reported (as
    info naming that function since round 20: the import itself never runs there);
    the same import read only inside the gated branch is a named scope."""
    module = ("import torch\n\nfrom pkg.wrapper.configurer import ENABLE_FAST_GEMM\n\n"
              "if ENABLE_FAST_GEMM:\n    from sgl_kernel import fp8_gemm\n\n\n"
              "def run(a, b):\n    return fp8_gemm(a, b)\n")
    gated = module.replace("def run(a, b):\n    return fp8_gemm(a, b)\n",
                           "def run(a, b):\n    if ENABLE_FAST_GEMM:\n        return fp8_gemm(a, b)\n    return a @ b\n")
    report = _project(tmp_path, extra={"pkg/kernels.py": module, "pkg/kernels2.py": gated})
    # (round 20, flagreads20.py: read only in the module's functions, the import is info naming the
    # function that fails with a NameError if called, still a finding, not a scope)
    kept = [f for f in findings_at(report, "pkg/kernels.py", "NPU911").values() if f["line"] == 6]
    assert kept and "`run` (line 10)" in kept[0]["message"] and "NameError" in kept[0]["message"], kept
    assert 6 not in moot_lines(report["skipped"], "NPU911", "pkg/kernels.py")
    assert 6 not in _open_lines(report, "pkg/kernels2.py", "NPU911")


def test_the_branch_an_npu_host_takes_after_a_rocm_flag_stays_reported(tmp_path):
    """`_is_hip = is_hip()` (`torch.version.hip is not None`: None there, so False): the `else:` of
    `if _is_hip:` is the branch an NPU host takes, its FP8 stays reported; the ROCm body is a scope."""
    module = ("import torch\n\nfrom pkg.utils import is_hip\n\n_is_hip = is_hip()\n\n\n"
              "def pick(x):\n    if _is_hip:\n        return x.to(torch.float8_e4m3fnuz)\n"
              "    else:\n        return x.to(torch.float8_e4m3fn)\n")
    report = _project(tmp_path, extra={"pkg/dtypes.py": module})
    assert 12 in _open_lines(report, "pkg/dtypes.py", "NPU913"), report["findings"]
    assert 12 not in moot_lines(report["skipped"], "NPU913", "pkg/dtypes.py")
