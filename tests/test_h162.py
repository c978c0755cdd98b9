"""Round-32 precision wave, helper h162: capability and support gates written in another module
than the finding, the deep cases (issue #16; attrstores32.py for flagcalls19.py).

Each false shape is paired with the nearest true one, which stays reported."""

from __future__ import annotations

from tests.precision_helpers import migrate_json, write_project

_PLATFORMS = """\
class _Platform:
    def is_cuda(self):
        return True

    def get_device_capability(self, device_id=0):
        return (10, 0)

    def is_device_capability_family(self, capability, device_id=0):
        current = self.get_device_capability(device_id)
        return current is not None and current[0] == capability // 10


current_platform = _Platform()
"""


def _line(text: str, needle: str) -> int:
    return next(n for n, line in enumerate(text.splitlines(), 1) if needle in line)


def _open(report, path):
    """{line: finding} of every place of the report-only findings of `path` still at warning or error."""
    out = {}
    for f in report["findings"]:
        if f["path"] == path and not f["fixable"] and f["severity"] != "info":
            out[f["line"]] = f
            for place in f.get("also", []) or []:
                out[place[0] if isinstance(place, list) else place] = f
    return out


def _scopes(report, path):
    return {line: s["reason"] for s in report["skipped"] if s.get("path") == path and "start_line" in s
            for line in range(s["start_line"], s["end_line"] + 1)}


# ---------------------------------------------------------------- FA#27: `getattr(self.impl, "use_x", False)`
_SUPPORT = '''\
from pkg.platforms import current_platform


def supports_cutlass_decode(*, backend, kv_cache_dtype):
    return (
        backend == "cutlass"
        and current_platform.is_cuda()
        and current_platform.is_device_capability_family(100)
        and kv_cache_dtype == "fp8"
    )
'''

_IMPL = '''\
from .support import supports_cutlass_decode


class SparseImpl:
    def __init__(self, kv_cache_dtype, backend="triton"):
        self.use_cutlass_decode = supports_cutlass_decode(backend=backend, kv_cache_dtype=kv_cache_dtype)

    def decode(self, q):
        return q
'''

_MODEL = '''\
import torch

from .impl import SparseImpl


class Attention(torch.nn.Module):
    def __init__(self, kv_cache_dtype):
        super().__init__()
        self.impl = SparseImpl(kv_cache_dtype)

    def _allocate_query_fp8(self, qkv):
        if not getattr(self.impl, "use_cutlass_decode", False):
            return None
        return torch.empty(qkv.shape, dtype=torch.float8_e4m3fn, device=qkv.device)
'''

# A test that sets the flag by hand, skipped (module level) unless capability family 100.
_SKIPPED_TEST = '''\
import pytest

from pkg.platforms import current_platform
from pkg.model.impl import SparseImpl

if not current_platform.is_device_capability_family(100):
    pytest.skip("needs SM100", allow_module_level=True)


def test_decode():
    impl = object.__new__(SparseImpl)
    impl.use_cutlass_decode = True
    assert impl.decode(1) == 1
'''

_FP8 = _line(_MODEL, "float8_e4m3fn")
_MODEL_PATH = "pkg/model/model.py"


def _fa27(tmp_path, extra: dict, impl: str = _IMPL):
    files = {
        "pkg/__init__.py": "",
        "pkg/platforms.py": _PLATFORMS,
        "pkg/model/__init__.py": "",
        "pkg/model/support.py": _SUPPORT,
        "pkg/model/impl.py": impl,
        "pkg/model/model.py": _MODEL,
        "tests/test_sparse_impl.py": _SKIPPED_TEST,
    }
    files.update(extra)
    return migrate_json(write_project(tmp_path, files))


def test_fa27_attribute_every_store_sets_false_there_gates_the_fp8_buffer(tmp_path):
    """FA#27: `use_cutlass_decode` is stored only by `supports_cutlass_decode(...)` (CUDA and
    capability family 100: False on an NPU host) in another module, and by a test skipped there;
    `getattr(self.impl, "use_cutlass_decode", False)` is False, and the FP8 buffer never built."""
    report = _fa27(tmp_path, {})
    assert _FP8 not in _open(report, _MODEL_PATH)
    reason = _scopes(report, _MODEL_PATH)[_FP8]
    assert reason.startswith("not run on an NPU host (NPU913)")
    assert "`.use_cutlass_decode` is False there" in reason
    assert "pkg/model/impl.py:6" in reason
    assert "tests/test_sparse_impl.py:12" in reason


def test_fa27_pair_a_live_test_storing_true_keeps_the_finding(tmp_path):
    """The nearest true case: a test an NPU host runs (no skip) sets the flag True and calls the
    method: the FP8 buffer is built there."""
    report = _fa27(tmp_path, {"tests/test_sparse_impl.py": _SKIPPED_TEST.replace(
        'if not current_platform.is_device_capability_family(100):\n    pytest.skip("needs SM100", '
        'allow_module_level=True)\n', "")})
    assert _FP8 in _open(report, _MODEL_PATH)


def test_fa27_pair_a_library_store_of_true_keeps_the_finding(tmp_path):
    """The nearest true case: a library method (run on an NPU host) turns the flag on."""
    impl = _IMPL + "\n    def force_cutlass(self):\n        self.use_cutlass_decode = True\n"
    report = _fa27(tmp_path, {}, impl=impl)
    assert _FP8 in _open(report, _MODEL_PATH)


def test_fa27_pair_a_store_of_a_user_option_keeps_the_finding(tmp_path):
    """The nearest true case: the flag comes from a user's option, unknown there."""
    impl = _IMPL.replace("supports_cutlass_decode(backend=backend, kv_cache_dtype=kv_cache_dtype)",
                         'backend == "cutlass"')
    report = _fa27(tmp_path, {}, impl=impl)
    assert _FP8 in _open(report, _MODEL_PATH)


def test_fa27_pair_a_keyword_of_that_name_keeps_the_finding(tmp_path):
    """The nearest true case: a constructor somewhere takes `use_cutlass_decode=` (a namespace or a
    config object may carry the attribute): not read."""
    report = _fa27(tmp_path, {"pkg/runner.py": (
        "from types import SimpleNamespace\n\n\n"
        "def fake_impl():\n"
        "    return SimpleNamespace(use_cutlass_decode=True)\n")})
    assert _FP8 in _open(report, _MODEL_PATH)


def test_fa27_pair_setattr_by_name_keeps_the_finding(tmp_path):
    """The nearest true case: `setattr(impl, "use_cutlass_decode", flag)` (the string named
    other than as getattr's attribute)."""
    report = _fa27(tmp_path, {"pkg/runner.py": (
        "def enable(impl, flag):\n"
        '    setattr(impl, "use_cutlass_decode", flag)\n')})
    assert _FP8 in _open(report, _MODEL_PATH)


def test_fa27_pair_a_plain_attribute_read_is_not_decided(tmp_path):
    """The nearest true case for the read: `self.impl.use_cutlass_decode` without getattr's
    default is not read through the run's stores (an object the run does not build may carry it)."""
    model = _MODEL.replace('getattr(self.impl, "use_cutlass_decode", False)', "self.impl.use_cutlass_decode")
    report = _fa27(tmp_path, {_MODEL_PATH: model})
    assert _FP8 in _open(report, _MODEL_PATH)


# A kernel module whose only launcher calls it under the same `getattr` (callgates21's walk).
_KERNEL = '''\
def cutlass_decode(q):
    import cutlass.cute as cute

    return cute.run(q)
'''

_LAUNCHER = '''\
from .kernel import cutlass_decode


class Decoder:
    def __init__(self, impl):
        self.impl = impl

    def decode(self, q):
        if getattr(self.impl, "use_cutlass_decode", False):
            return cutlass_decode(q)
        return q
'''

_CUTE = _line(_KERNEL, "import cutlass")


def test_fa27_a_kernel_launched_only_under_the_getattr_is_not_run_there(tmp_path):
    """callgates21's walk reads the same answer: the kernel's only call lies under the `getattr`."""
    report = _fa27(tmp_path, {"pkg/model/kernel.py": _KERNEL, "pkg/model/launcher.py": _LAUNCHER})
    assert _CUTE not in _open(report, "pkg/model/kernel.py")
    reason = _scopes(report, "pkg/model/kernel.py")[_CUTE]
    assert "pkg/model/launcher.py" in reason
    assert "`.use_cutlass_decode` is False there" in reason and "pkg/model/impl.py:6" in reason


def test_fa27_pair_the_kernel_stays_when_a_live_caller_turns_the_flag_on(tmp_path):
    """The nearest true case: a library function an NPU host runs stores True on the object."""
    report = _fa27(tmp_path, {"pkg/model/kernel.py": _KERNEL, "pkg/model/launcher.py": _LAUNCHER,
                              "pkg/model/enable.py": "def enable(impl):\n    impl.use_cutlass_decode = True\n"})
    assert _CUTE in _open(report, "pkg/model/kernel.py")


def test_fa27_pair_a_property_of_that_name_keeps_the_finding(tmp_path):
    """The nearest true case: another class of the run answers `use_cutlass_decode` by a property
    (True): an impl of that class makes the getattr True."""
    report = _fa27(tmp_path, {"pkg/model/other_impl.py": (
        "class CutlassImpl:\n"
        "    @property\n"
        "    def use_cutlass_decode(self):\n"
        "        return True\n")})
    assert _FP8 in _open(report, _MODEL_PATH)
