"""Opt-in CUDA backends whose selection on an NPU host ends in the project's own error (issue #16,
npu_migrate/optin.py): the lazy import of an opt-in backend becomes a named scope; a backend built
anywhere outside the project's `try` keeps its error."""

from __future__ import annotations

from tests.precision_helpers import migrate_json, write_project

DISPATCH = '''\
"""Kernel backends: eager, or FlashInfer's CUDA kernels."""
import torch


class Backend:
    def __call__(self, x):
        raise NotImplementedError


class EagerBackend(Backend):
    def __call__(self, x):
        return x * 2


class FastBackend(Backend):
    def __init__(self):
        from flashinfer.mamba import fast_update

        self._kernel = fast_update

    def __call__(self, x):
        return self._kernel(x)


_REGISTRY: dict[str, type[Backend]] = {
    "eager": EagerBackend,
    "fast": FastBackend,
}

_backend = None


def init_backend(args):
    global _backend
    requested = args.kernel_backend or "eager"
    backend_cls = _REGISTRY.get(requested)
    if backend_cls is None:
        raise ValueError(f"unknown backend {requested}; choose one of {list(_REGISTRY.keys())}")
    try:
        _backend = backend_cls()
    except ImportError:
        raise ValueError(f"backend {requested} needs its package; use a different --kernel-backend value")
'''


def _findings(report: dict, path: str, code: str = "NPU911") -> list[dict]:
    return [f for f in report["findings"] if f["path"] == path and f["code"] == code]


def _as_written(report: dict, path: str) -> list[dict]:
    return [s for s in report["skipped"] if s.get("path") == path
            and "an opt-in backend: selecting it on an NPU host raises the project's error" in s["reason"]]


def test_opt_in_backend_built_only_inside_the_projects_try_is_a_named_scope(tmp_path):
    root = write_project(tmp_path, {"pkg/__init__.py": "", "pkg/dispatch.py": DISPATCH,
                                    "pkg/model.py": "from pkg.dispatch import init_backend\n"})
    report = migrate_json(root)
    assert not [f for f in _findings(report, "pkg/dispatch.py") if f["severity"] == "error"], report["findings"]
    scopes = _as_written(report, "pkg/dispatch.py")
    assert scopes and scopes[0]["start_line"] == 17 and "raises at line 42" in scopes[0]["reason"], report["skipped"]


def test_opt_in_backend_also_built_elsewhere_keeps_its_error(tmp_path):
    # a direct build outside the `try` (here, a module-level default) reaches the import unguarded
    text = DISPATCH + "\n_default = FastBackend()\n"
    root = write_project(tmp_path, {"pkg/__init__.py": "", "pkg/dispatch.py": text})
    report = migrate_json(root)
    assert [f for f in _findings(report, "pkg/dispatch.py") if f["severity"] == "error"], report["findings"]
    assert not _as_written(report, "pkg/dispatch.py")


def test_opt_in_backend_named_by_another_file_keeps_its_error(tmp_path):
    root = write_project(tmp_path, {"pkg/__init__.py": "", "pkg/dispatch.py": DISPATCH,
                                    "pkg/bench.py": "from pkg.dispatch import FastBackend\n\nk = FastBackend()\n"})
    report = migrate_json(root)
    assert [f for f in _findings(report, "pkg/dispatch.py") if f["severity"] == "error"], report["findings"]


def test_handler_that_falls_back_is_not_an_opt_in_error(tmp_path):
    # the `except ImportError` falls back instead of raising the project's error: not this shape
    text = DISPATCH.replace(
        '        raise ValueError(f"backend {requested} needs its package; use a different --kernel-backend value")',
        "        _backend = EagerBackend()")
    root = write_project(tmp_path, {"pkg/__init__.py": "", "pkg/dispatch.py": text})
    report = migrate_json(root)
    assert not _as_written(report, "pkg/dispatch.py")
    assert _findings(report, "pkg/dispatch.py"), report["findings"]
