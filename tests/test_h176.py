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
