"""Issue #16, round-13 audits (AI#10, AJ#27, AI#24): probes that fall back, test modules that cannot
be collected on an NPU host, an extension every caller catches (NPU202, NPU911). Each test checks
that the false finding is gone (a named scope, with its reason) and that a nearby true one stays."""

from __future__ import annotations

from pathlib import Path

from .precision_helpers import migrate_json, moot_lines, with_as_written, write_project


def _open(report: dict, path: str, code: str) -> list[dict]:
    return [f for f in report["findings"] if not f["fixable"] and f["path"] == path and f["code"] == code]


ARCH_PROBE = """\
import torch


def max_arch():
    capabilities = []
    supported = [int(arch.split("_")[1]) for arch in torch.cuda.get_arch_list() if "sm_" in arch]
    if supported:
        best = max((sm // 10, sm % 10) for sm in supported)
        capabilities.append(best)
    return capabilities


def archs():
    names = []
    for arch in torch.cuda.get_arch_list():
        names.append(arch)
    if not torch.cuda.get_arch_list():
        return None
    return names
"""

ARCH_INDEXED = """\
import torch


def first_arch():
    return torch.cuda.get_arch_list()[0]


def newest():
    archs = [a for a in torch.cuda.get_arch_list()]
    return archs[-1]


def has_hopper():
    return "sm_90" in torch.cuda.get_arch_list()
"""


def test_arch_list_only_iterated_or_tested_runs_as_written(tmp_path: Path) -> None:
    """AI#10: `torch.cuda.get_arch_list()` is [] without CUDA; a list only iterated, tested for
    truth, or bound to a name read only under `if name:` runs as written on an NPU host: a named
    scope, not a finding. An indexed list, one read unguarded, or a membership test stay NPU202."""
    root = write_project(tmp_path, {"pkg/__init__.py": "", "pkg/probe.py": ARCH_PROBE, "pkg/indexed.py": ARCH_INDEXED})
    report = migrate_json(root)
    assert not _open(report, "pkg/probe.py", "NPU202"), report["findings"]
    scoped = {f["line"]: f for f in with_as_written(report) if f["path"] == "pkg/probe.py" and f.get("scope")}
    assert {6, 15, 17} <= set(scoped), scoped
    assert "CUDA architecture probe whose empty answer the code handles" in scoped[6]["message"], scoped
    kept = _open(report, "pkg/indexed.py", "NPU202")
    assert len(kept) == 1 and kept[0]["severity"] == "error", kept
    assert {kept[0]["line"], *(place[0] for place in kept[0].get("also", ()))} == {5, 9, 14}, kept


LOADER = '''\
class CudaOpsExtension:
    def is_available(self):
        return False

    def load(self):
        import ops_cuda_ext

        return ops_cuda_ext


class NpuOpsExtension:
    def is_available(self):
        return True

    def load(self):
        return None


class KernelLoader:
    REGISTRY = []

    def load(self):
        usable = [ext() for ext in self.REGISTRY if ext().is_available()]
        assert usable, f"No usable kernel for {type(self).__name__}"
        return usable[0].load()


class OpsLoader(KernelLoader):
    REGISTRY = [CudaOpsExtension]


class AnyOpsLoader(KernelLoader):
    REGISTRY = [NpuOpsExtension, CudaOpsExtension]
'''

LOADED_TEST = """\
import torch

from pkg.kernel_loader import OpsLoader

ops = OpsLoader().load()


def test_ops():
    flags = torch.cuda.get_gencode_flags()
    assert ops is not None and flags
"""

PORTABLE_TEST = """\
import torch

from pkg.kernel_loader import AnyOpsLoader

ops = AnyOpsLoader().load()


def test_ops():
    flags = torch.cuda.get_gencode_flags()
    assert ops is not None and flags
"""

LAZY_TEST = """\
import torch

from pkg.kernel_loader import OpsLoader


def test_ops():
    ops = OpsLoader().load()
    flags = torch.cuda.get_gencode_flags()
    assert ops is not None and flags
"""


def test_module_loading_a_cuda_only_extension_at_import_is_never_collected(tmp_path: Path) -> None:
    """AJ#27: a test module whose module-level code runs `OpsLoader().load()`, a loader whose
    REGISTRY lists only CUDA extensions and which asserts when none is usable, never imports on an
    NPU host: its findings are a named skipped scope. A loader with an NPU extension, or the same
    load inside a test function, keep theirs."""
    root = write_project(tmp_path, {"pkg/__init__.py": "", "pkg/kernel_loader.py": LOADER,
                                    "tests/test_loaded.py": LOADED_TEST, "tests/test_portable.py": PORTABLE_TEST,
                                    "tests/test_lazy.py": LAZY_TEST})
    report = migrate_json(root)
    assert not _open(report, "tests/test_loaded.py", "NPU202"), report["findings"]
    lines = moot_lines(report["skipped"], "NPU202", "tests/test_loaded.py")
    assert 9 in lines and "registers only CUDA extensions" in lines[9], lines
    for path in ("tests/test_portable.py", "tests/test_lazy.py"):
        kept = _open(report, path, "NPU202")
        assert kept and kept[0]["severity"] == "error", (path, report["findings"])


CALLEE = '''\
import warnings

DEVICE = "cuda"


def components(mask):
    from ext_pkg import _C

    return _C.label(mask)


def fill(mask):
    try:
        mask = components(mask)
    except Exception as e:
        warnings.warn(f"{e}: skipped")
    return mask
'''

STRICT = '''\
DEVICE = "cuda"


def strict_components(mask):
    from ext_pkg import _C

    return _C.label(mask)


def use(mask):
    return strict_components(mask)
'''


def test_extension_every_caller_catches_is_a_warning(tmp_path: Path) -> None:
    """AI#24 / AK#26: the import of a compiled extension whose every caller catches `Exception` and
    goes on is a warning naming the optional step (it runs, its results differ), not a scope; one
    called outside a `try` stays an error."""
    root = write_project(tmp_path, {"pkg/__init__.py": "", "pkg/misc.py": CALLEE, "pkg/strict.py": STRICT})
    report = migrate_json(root)
    found = _open(report, "pkg/misc.py", "NPU911")
    assert found and found[0]["severity"] == "warning", found
    assert "an optional step every caller catches" in found[0]["message"]
    kept = _open(report, "pkg/strict.py", "NPU911")
    assert kept and kept[0]["line"] == 5 and kept[0]["severity"] == "error", kept


DEEP_GEMM_TEST = """\
import pytest
import torch

from pkg.utils import has_deep_gemm, is_deep_gemm_supported

requires_deep_gemm = pytest.mark.skipif(not has_deep_gemm(), reason="needs DeepGEMM")
requires_supported = pytest.mark.skipif(not is_deep_gemm_supported(), reason="needs DeepGEMM")


def make_fp8_weights(w):
    return w.to(torch.float8_e4m3fn)


def make_fp8_scales(s):
    return s.to(torch.float8_e4m3fn)


@requires_deep_gemm
def test_gemm():
    assert make_fp8_weights(torch.ones(4)).dtype


@requires_supported
def test_gemm_supported():
    assert make_fp8_scales(torch.ones(4)).dtype


def test_reference():
    assert make_fp8_scales(torch.ones(4)).dtype
"""

UTILS = """\
import importlib.util


def has_deep_gemm():
    return importlib.util.find_spec("deep_gemm") is not None


def is_deep_gemm_supported():
    return has_deep_gemm()
"""


def test_fp8_helper_only_deep_gemm_tests_call_is_moot(tmp_path: Path) -> None:
    """AI#7: an FP8 helper of a test module whose only callers are tests marked
    `skipif(not has_deep_gemm())` (DeepGEMM: no NPU build) is code an NPU host never runs: a named
    skipped scope. A helper that an unmarked test also calls keeps its NPU913."""
    root = write_project(tmp_path, {"pkg/__init__.py": "", "pkg/utils.py": UTILS,
                                    "tests/test_deep_gemm.py": DEEP_GEMM_TEST})
    report = migrate_json(root)
    kept = _open(report, "tests/test_deep_gemm.py", "NPU913")
    lines = {f["line"] for f in kept} | {place[0] for f in kept for place in f.get("also", ())}
    assert lines == {15}, report["findings"]
    assert 11 in moot_lines(report["skipped"], "NPU913", "tests/test_deep_gemm.py"), report["skipped"]
