"""Round-14/15 audits (issue #16): helpers reached only behind NVIDIA capability or FlashInfer
gates in their callers (npu_migrate/callersonly.py, capcallers.py). Each test writes a small
project of its own, checks that the false finding is gone (a named skipped scope with its reason)
and that a nearby true case stays reported."""

from __future__ import annotations

from .precision_helpers import findings_at as _findings
from .precision_helpers import migrate_json, write_project
from .precision_helpers import scopes_at as _scopes

_WARMUP = '''\
from vllm.platforms import current_platform
from vllm.utils.flashinfer import has_flashinfer


def autotune_all(runner):
    from flashinfer.autotuner import autotune

    with autotune(True):
        runner.run()


def kernel_warmup(worker, enabled):
    if enabled is False:
        print("skip")
    elif has_flashinfer() and current_platform.has_device_capability(90):
        autotune_all(worker)
    worker.done()
'''

_CACHE = '''\
from vllm.platforms import current_platform
from vllm.utils.flashinfer import has_flashinfer


class Cache:
    kind = "autotune_all"

    def warmup(self, cfg, runner):
        if cfg.disabled or not has_flashinfer() or not current_platform.has_device_capability(90):
            return
        from pkg.warm import autotune_all

        autotune_all(runner)
'''

# (another module binds the same name to another object; a test replaces the attribute and calls
# the helper with the package stubbed in sys.modules)
_SPARSE = '''\
from vllm.utils.flashinfer import autotune as autotune_all


def sparse_warmup(path):
    with autotune_all(True, cache=path):
        pass
'''

_TEST = '''\
import sys
from types import ModuleType

import pkg.sparse as sparse
from pkg.warm import autotune_all


REQUEST = {"kind": "autotune_all", "token": "t"}


def test_autotune(monkeypatch):
    monkeypatch.setattr(sparse, "autotune_all", lambda *a, **k: None)
    stub = ModuleType("flashinfer.autotuner")
    monkeypatch.setitem(sys.modules, "flashinfer.autotuner", stub)
    autotune_all(object())
'''


def test_helper_behind_flashinfer_and_capability_gates_is_a_scope(tmp_path):
    """AP#2: a lazy flashinfer import in a helper called only behind `has_flashinfer() and
    current_platform.has_device_capability(90)` (and after its negation's early return), from a
    module that binds the name to another object, and from a test that stubs the package in
    sys.modules and replaces the attribute with `monkeypatch.setattr`; strings naming it are held
    as data (a class attribute, a dict value) where nothing holding its module looks names up: a
    named scope."""
    report = migrate_json(write_project(tmp_path, {
        "pkg/__init__.py": "", "pkg/warm.py": _WARMUP, "pkg/cache.py": _CACHE, "pkg/sparse.py": _SPARSE,
        "tests/test_warm.py": _TEST}))
    assert 6 not in _findings(report, "pkg/warm.py", "NPU911")
    reason = _scopes(report, "pkg/warm.py", "NPU911")[6]
    assert "called only from code an NPU host does not run" in reason
    assert "installs stubs of `flashinfer.autotuner`" in reason


def test_helper_with_a_test_caller_that_does_not_stub_stays_reported(tmp_path):
    """The same helper called from a test that stubs nothing: reported."""
    plain = _TEST.replace('    monkeypatch.setitem(sys.modules, "flashinfer.autotuner", stub)\n', "")
    report = migrate_json(write_project(tmp_path, {
        "pkg/__init__.py": "", "pkg/warm.py": _WARMUP, "pkg/cache.py": _CACHE, "tests/test_warm.py": plain}))
    assert _findings(report, "pkg/warm.py", "NPU911")[6]["severity"] == "error"


def test_helper_imported_under_another_name_stays_reported(tmp_path):
    """A helper imported under another name (`import autotune_all as tune`) and called ungated
    through it: its calls by that name are not read, so the finding stays (it was scoped before)."""
    other = "from pkg.warm import autotune_all as tune\n\n\ndef run(worker):\n    tune(worker)\n"
    report = migrate_json(write_project(tmp_path, {
        "pkg/__init__.py": "", "pkg/warm.py": _WARMUP, "pkg/cache.py": _CACHE, "pkg/other.py": other}))
    assert _findings(report, "pkg/warm.py", "NPU911")[6]["severity"] == "error"


def test_string_lookup_of_the_helper_keeps_it_reported(tmp_path):
    """A string naming the helper other than an attribute write (`getattr(mod, "autotune_all")`,
    a registry entry) may be a lookup: the finding stays."""
    lookup = "import pkg.warm as warm\n\n\ndef run(worker):\n    getattr(warm, \"autotune_all\")(worker)\n"
    report = migrate_json(write_project(tmp_path, {
        "pkg/__init__.py": "", "pkg/warm.py": _WARMUP, "pkg/cache.py": _CACHE, "pkg/other.py": lookup}))
    assert _findings(report, "pkg/warm.py", "NPU911")[6]["severity"] == "error"


_TINY = '''\
import functools


@functools.cache
def _tinygemm():
    from flashinfer.jit import gen_tinygemm2_module

    return gen_tinygemm2_module().build_and_load()

'''

# (in a file of its own: a file's NPU911 findings merge into one)
_PLAIN = '''\
import functools


@functools.lru_cache(maxsize=None)
def _plain():
    from flashinfer.jit import gen_plain_module

    return gen_plain_module().build_and_load()
'''

_PROJECT = '''\
from vllm.platforms import current_platform

from pkg.plain import _plain
from pkg.proj import _tinygemm


def project(x, w):
    if current_platform.is_device_capability_family(100):
        return _tinygemm().run(x, w)
    return _plain().run(x, w)
'''


def test_memoized_helper_behind_blackwell_family_gate_is_a_scope(tmp_path):
    """AO#2 (its first step): a lazy flashinfer import in a `@functools.cache` helper called only
    under `is_device_capability_family(100)`: a named scope; the same import in an
    `@lru_cache` helper called ungated stays an error."""
    report = migrate_json(write_project(tmp_path, {"pkg/__init__.py": "", "pkg/proj.py": _TINY,
                                                         "pkg/plain.py": _PLAIN, "pkg/use.py": _PROJECT}))
    found = _findings(report, "pkg/proj.py", "NPU911")
    assert 6 not in found
    assert "called only from code an NPU host does not run" in _scopes(report, "pkg/proj.py", "NPU911")[6]
    assert _findings(report, "pkg/plain.py", "NPU911")[6]["severity"] == "error"


def test_computed_lookup_on_the_helper_module_keeps_it_reported(tmp_path):
    """The held string `kind = "autotune_all"` is harmless only while no file holding the module
    looks a name up in it: a `getattr(warm, kind)` with a computed name keeps the finding."""
    lookup = "import pkg.warm as warm\n\n\ndef run(worker, kind):\n    getattr(warm, kind)(worker)\n"
    report = migrate_json(write_project(tmp_path, {
        "pkg/__init__.py": "", "pkg/warm.py": _WARMUP, "pkg/cache.py": _CACHE, "pkg/other.py": lookup}))
    assert _findings(report, "pkg/warm.py", "NPU911")[6]["severity"] == "error"
