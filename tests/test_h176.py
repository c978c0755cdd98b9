"""Round 31's gates in another module (helper h176, issue #16; raisecalls33.py): each false shape
paired with the nearest true case that must stay reported as before."""

from __future__ import annotations

from .precision_helpers import migrate_json, write_project

# ------------------------------------------------------------------ FC#7: after a helper raising first
IMPORT_UTILS = '''import importlib.util


def _has_module(name):
    return importlib.util.find_spec(name) is not None


def has_cutedsl():
    return _has_module("cutlass")
'''
# (a CuTe-DSL kernel module: fails to import where cutlass is missing)
KERNEL = '''import cutlass
import cutlass.cute as cute


def pack(x):
    return cute.pack(x)
'''
INDEXER = '''from proj.utils.import_utils import has_cutedsl


def _assert_supported(logits):
    """Checks."""
    if not has_cutedsl():
        raise RuntimeError("needs CuteDSL")
    if logits.dim() != 2:
        raise RuntimeError("needs 2-D logits")


def merge(logits, world):
    if world <= 1:
        return logits
    _assert_supported(logits)
    from proj.kernels.dcp_cutedsl import pack

    return pack(logits)
'''


def _kernel_import(report: dict) -> dict:
    found = [f for f in report["findings"] if f["path"] == "proj/kernels/dcp_cutedsl.py"
             and f["code"] == "NPU911" and f["line"] == 1]
    assert len(found) == 1, [(f["path"], f["line"], f["code"]) for f in report["findings"]]
    return found[0]


def _indexer_project(tmp_path, indexer: str):
    files = {
        "proj/__init__.py": "",
        "proj/utils/__init__.py": "",
        "proj/utils/import_utils.py": IMPORT_UTILS,
        "proj/kernels/__init__.py": "",
        "proj/kernels/dcp_cutedsl.py": KERNEL,
        "proj/layers/__init__.py": "",
        "proj/layers/indexer.py": indexer,
    }
    return migrate_json(write_project(tmp_path, files))


def test_import_after_a_helper_raising_without_the_package_is_info(tmp_path):
    """FC#7: the kernel module is imported only after `_assert_supported(logits)`, whose first
    check raises unless `has_cutedsl()` (a probe of cutlass): where cutlass is missing the import is
    never reached. Info under P1 (a host may install the package), naming the helper."""
    finding = _kernel_import(_indexer_project(tmp_path, INDEXER))
    assert finding["severity"] == "info"
    assert "_assert_supported(logits)" in finding["message"]
    assert "a probe of `cutlass`" in finding["message"]


def test_import_after_a_helper_checking_something_else_stays_an_error(tmp_path):
    """Nearest true case: the helper checks only the logits' shape; the import runs on an NPU host
    and fails there."""
    indexer = INDEXER.replace('''    if not has_cutedsl():
        raise RuntimeError("needs CuteDSL")
''', "")
    finding = _kernel_import(_indexer_project(tmp_path, indexer))
    assert finding["severity"] == "error"


def test_import_before_the_raising_helper_stays_an_error(tmp_path):
    """Nearest true case: the import comes before the check, so it runs (and fails) first."""
    indexer = INDEXER.replace('''    _assert_supported(logits)
    from proj.kernels.dcp_cutedsl import pack
''', '''    from proj.kernels.dcp_cutedsl import pack
    _assert_supported(logits)
''')
    finding = _kernel_import(_indexer_project(tmp_path, indexer))
    assert finding["severity"] == "error"


def test_probe_check_after_a_return_path_stays_an_error(tmp_path):
    """Nearest true case: the helper may return before its probe check (not a leading check)."""
    indexer = INDEXER.replace('''    if not has_cutedsl():''', '''    if logits is None:
        return
    if not has_cutedsl():''')
    finding = _kernel_import(_indexer_project(tmp_path, indexer))
    assert finding["severity"] == "error"


# ------------------------------------------------------------------ FA#33: importers failing first
HELPER = '''def fake_stream():
    import cutlass.cute as cute

    return cute.runtime.make_fake_stream()


class CuteKernel:
    def compile(self, key):
        return fake_stream()
'''
IMPORTER = '''import cutlass
import torch

from proj.warmup.cute_helper import CuteKernel


class IndexerKernel(CuteKernel):
    def __call__(self, x):
        return self.compile(x.shape)
'''
# (the nearest true case: an importer that loads without cutlass, its own import guarded)
GUARDED_IMPORTER = '''try:
    import cutlass
except ImportError:
    cutlass = None

from proj.warmup.cute_helper import CuteKernel


class IndexerKernel(CuteKernel):
    def __call__(self, x):
        return self.compile(x.shape)
'''


def _helper_project(tmp_path, second: str):
    files = {
        "proj/__init__.py": "",
        "proj/warmup/__init__.py": "",
        "proj/warmup/cute_helper.py": HELPER,
        "proj/ops/__init__.py": "",
        "proj/ops/indexer_cutedsl.py": IMPORTER,
        "proj/ops/compress_cutedsl.py": second,
    }
    return migrate_json(write_project(tmp_path, files))


def _helper_import(report: dict):
    return [f for f in report["findings"] if f["path"] == "proj/warmup/cute_helper.py" and f["code"] == "NPU911"]


def test_lazy_helper_import_reached_only_from_modules_failing_first_is_a_scope(tmp_path):
    """FA#33: the helper's lazy `import cutlass.cute` runs only through `CuteKernel`, whose every
    subclass lives in a module that imports cutlass unguarded at module level first: where cutlass
    is missing those modules stop at that import. A named scope naming the import and its line."""
    report = _helper_project(tmp_path, IMPORTER.replace("IndexerKernel", "CompressKernel"))
    assert _helper_import(report) == []
    scopes = [s for s in report["skipped"] if s["path"] == "proj/warmup/cute_helper.py"]
    assert scopes and "not run on an NPU host" in scopes[0]["reason"]
    assert "after `import cutlass` (line 1)" in scopes[0]["reason"]
    # (the importers keep theirs: one error, the folder's other module folded into it)
    kept = [f for f in report["findings"] if f["code"] == "NPU911" and f["path"].startswith("proj/ops/")]
    assert len(kept) == 1 and kept[0]["severity"] == "error"
    assert "indexer_cutedsl.py" in kept[0]["path"] + kept[0]["message"]
    assert "compress_cutedsl.py" in kept[0]["path"] + kept[0]["message"]


def test_lazy_helper_import_reached_from_a_module_loading_without_the_package_stays_reported(tmp_path):
    """Nearest true case: one importer guards its own `import cutlass`, so it loads on an NPU host
    and its kernel reaches the helper's import, which fails there."""
    found = _helper_import(_helper_project(tmp_path, GUARDED_IMPORTER))
    assert len(found) == 1 and found[0]["severity"] == "error"
