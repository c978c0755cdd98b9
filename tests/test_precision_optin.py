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


TRITON = '''\
try:
    import triton
    import triton.language as tl

    HAS_TRITON = True
except ImportError:
    triton = tl = None
    HAS_TRITON = False
'''

KERNELS = '''\
"""Fused restore kernels."""
import torch

from pkg.ops._triton import HAS_TRITON, tl, triton

if HAS_TRITON:

    @triton.jit
    def _scale_kernel(x_ptr, n, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        tl.store(x_ptr + offs, tl.load(x_ptr + offs, mask=offs < n) * 2, mask=offs < n)


def assert_supported(rows):
    """Reject what the kernels cannot run before any collective starts."""
    if rows.dtype not in (torch.float16, torch.bfloat16):
        raise RuntimeError('impl="fused" needs half rows; leave impl unset')
    if rows.device.type != "cuda":
        raise RuntimeError('impl="fused" runs CUDA kernels; leave impl unset to run here')


def _launch(rows):
    _scale_kernel[(triton.cdiv(rows.numel(), 256),)](rows, rows.numel(), BLOCK=256)
    return rows


def fused_scale(rows):
    assert_supported(rows)
    return _launch(rows)


def fused_restore(rows):
    return _launch(rows)
'''

LAYER = '''\
import torch

from pkg.ops import fused as fused_ops


class Layer(torch.nn.Module):
    def __init__(self, impl):
        super().__init__()
        self.impl = impl
        self._checked = False

    def forward(self, x):
        if self.impl == "fused" and not self._checked:
            fused_ops.assert_supported(x)
            self._checked = True
        y = x * 3
        if self.impl == "fused":
            y = fused_ops.fused_restore(y)
        else:
            y = y * 2
        return fused_ops.fused_scale(y)
'''


def _kernel_errors(report: dict, path: str) -> list[dict]:
    return [f for f in report["findings"] if f["path"] == path and f["code"] == "NPU910" and f["severity"] == "error"]


def test_kernels_behind_the_projects_raising_device_check_are_a_named_scope(tmp_path):
    root = write_project(tmp_path, {"pkg/__init__.py": "", "pkg/ops/__init__.py": "",
                                    "pkg/ops/_triton.py": TRITON, "pkg/ops/fused.py": KERNELS, "pkg/layer.py": LAYER})
    report = migrate_json(root)
    assert not _kernel_errors(report, "pkg/ops/fused.py"), report["findings"]
    assert [s for s in report["skipped"] if s.get("path") == "pkg/ops/fused.py"
            and "CUDA kernels behind the project's own device check" in s["reason"]], report["skipped"]


def test_kernels_reached_without_the_device_check_keep_their_error(tmp_path):
    # the caller launches the unchecked entry outside the branch its check guards
    layer = LAYER.replace('        if self.impl == "fused":\n            y = fused_ops.fused_restore(y)',
                          '        if self.impl != "eager":\n            y = fused_ops.fused_restore(y)')
    root = write_project(tmp_path, {"pkg/__init__.py": "", "pkg/ops/__init__.py": "",
                                    "pkg/ops/_triton.py": TRITON, "pkg/ops/fused.py": KERNELS, "pkg/layer.py": layer})
    report = migrate_json(root)
    assert _kernel_errors(report, "pkg/ops/fused.py"), report["findings"]


def test_kernels_whose_check_does_not_test_the_device_keep_their_error(tmp_path):
    kernels = KERNELS.replace('    if rows.device.type != "cuda":\n        raise RuntimeError(\'impl="fused" runs CUDA kernels; leave impl unset to run here\')\n', "")
    root = write_project(tmp_path, {"pkg/__init__.py": "", "pkg/ops/__init__.py": "",
                                    "pkg/ops/_triton.py": TRITON, "pkg/ops/fused.py": kernels, "pkg/layer.py": LAYER})
    report = migrate_json(root)
    assert _kernel_errors(report, "pkg/ops/fused.py"), report["findings"]


LOADER = '''\
"""Optional fused CUDA kernels for the sampler."""


def _load_fused():
    from flashinfer.sampling import top_k_top_p_sampling

    return top_k_top_p_sampling


def select_sampler(name):
    if name != "fused":
        return None
    try:
        return _load_fused()
    except ImportError as error:
        raise RuntimeError("sampler='fused' needs flashinfer; leave --sampler unset") from error
'''


def test_loader_called_only_inside_the_projects_try_is_a_named_scope(tmp_path):
    root = write_project(tmp_path, {"pkg/__init__.py": "", "pkg/sampler.py": LOADER})
    report = migrate_json(root)
    assert not [f for f in _findings(report, "pkg/sampler.py") if f["severity"] == "error"], report["findings"]
    assert _as_written(report, "pkg/sampler.py"), report["skipped"]


def test_loader_also_called_outside_the_try_keeps_its_error(tmp_path):
    text = LOADER + "\n\ndef warm():\n    return _load_fused()\n"
    root = write_project(tmp_path, {"pkg/__init__.py": "", "pkg/sampler.py": text})
    report = migrate_json(root)
    assert [f for f in _findings(report, "pkg/sampler.py") if f["severity"] == "error"], report["findings"]



def test_kernels_whose_device_check_the_migration_rewrites_keep_their_error():
    # a device test rewritten to the accelerator would let an NPU tensor through: no guard then
    from npu_migrate.optin import kernels_behind_device_check

    line = KERNELS.splitlines().index('    if rows.device.type != "cuda":') + 1
    importers = [("pkg/layer.py", LAYER.encode())]
    assert kernels_behind_device_check("pkg/ops/fused.py", KERNELS.encode(), importers)
    assert kernels_behind_device_check("pkg/ops/fused.py", KERNELS.encode(), importers, frozenset({line})) is None
