"""Round-19 audit shapes fixed in the main line (issue #16): a skip helper whose result is bound,
`pytest.importorskip` of a package with no NPU build inside such a helper."""

from __future__ import annotations

from .precision_helpers import migrate_json, write_project

SPARSE_TESTS = '''\
import pytest
import torch


def _skip_unless_sm100():
    if not torch.cuda.is_available() or torch.cuda.get_device_capability()[0] != 10:
        pytest.skip("SM100 required")
    deep_gemm = pytest.importorskip("deep_gemm")
    return deep_gemm


def _quant_fp4(x):
    from deep_gemm.utils import per_token_cast_to_fp4

    return per_token_cast_to_fp4(x, use_ue8m0=True)


def test_sparse_logits():
    deep_gemm = _skip_unless_sm100()
    q = _quant_fp4(torch.ones(4))
    assert deep_gemm.fp8_mqa_logits(q) is not None
'''

UNGUARDED_CALLER = '''

def test_quant_alone():
    assert _quant_fp4(torch.ones(4)) is not None
'''


def _open(report: dict, path: str) -> list:
    return [(f["line"], f["code"]) for f in report["findings"] if f["path"] == path and not f["fixable"]]


def test_helper_called_only_after_a_bound_importorskip_helper_is_not_run_on_npu(tmp_path):
    """vLLM's test_mla_short_prefill_indexer.py: `deep_gemm = _skip_unless_sm100()` (the helper
    ends in `pytest.importorskip("deep_gemm")`, a package an NPU host never has), then a helper
    that imports `deep_gemm.utils`: not run there (a named scope). A test calling the helper
    without the skip keeps the import reported."""
    report = migrate_json(write_project(tmp_path, {"tests/test_sparse.py": SPARSE_TESTS}))
    assert _open(report, "tests/test_sparse.py") == [], report["findings"]
    assert any(s["path"] == "tests/test_sparse.py" and s.get("start_line") == 13
               and "_skip_unless_sm100" in s["reason"] for s in report["skipped"]), report["skipped"]
    # (the reason names the helper's first skip since session 32: its capability check, which the
    # shim's (0, 0) answers true on an NPU host, before the importorskip; cudaonly21.known_value)

    report = migrate_json(write_project(tmp_path / "b", {"tests/test_sparse.py": SPARSE_TESTS + UNGUARDED_CALLER}))
    assert _open(report, "tests/test_sparse.py") == [(13, "NPU911")], report["findings"]
