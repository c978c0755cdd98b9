"""A capability read bound by a bare call right before its test (vLLM's test_cache.py, found when
the session-39 ecosystem run was compared with the snapshot): `cap = get_device_capability()` is
None on an NPU host, so `if cap is None or cap.major != 10: pytest.skip(...)` is the exit an NPU
host takes and the FP8 reference helper only the rest of the test calls is not run there. Round
28's reading of a name bound just before its `if` (reach.py, CA#21) took the bare call's falsy
answer for False and lost the None: the scope became a finding again. The nearest true case, a
test whose exit an NPU host does not take (`major != 10` alone on a capability it has), keeps the
finding."""

from __future__ import annotations

from .precision_helpers import migrate_json, write_project

TEMPLATE = '''import pytest
import torch

from vllm.platforms import current_platform


def _ref_scale_bytes(vals):
    return vals.to(torch.float8_e4m3fn).view(torch.uint8).sum()


@pytest.mark.parametrize("n", [16, 32])
@torch.inference_mode()
def test_pack(n):
    if current_platform.is_rocm():
        pytest.skip("not on ROCm")
    cap = current_platform.get_device_capability()
    if CONDITION:
        pytest.skip("needs SM 10.x")
    assert _ref_scale_bytes(torch.ones(n)) >= 0
'''


def _scoped(report: dict) -> bool:
    return any(s.get("path") == "test_pack.py" and "(NPU913)" in s.get("reason", "") for s in report["skipped"])


def _reported(report: dict) -> bool:
    return any(f["path"] == "test_pack.py" and f["code"] == "NPU913" and not f["fixable"] for f in report["findings"])


def test_a_none_capability_bound_by_a_call_still_exits(tmp_path):
    report = migrate_json(write_project(tmp_path, {"test_pack.py": TEMPLATE.replace(
        "CONDITION", "cap is None or cap.major != 10")}))
    assert _scoped(report) and not _reported(report)


def test_an_exit_an_npu_host_does_not_take_keeps_the_finding(tmp_path):
    """Nearest true case: `cap is not None and cap.major != 10` is False where the capability is
    None, so an NPU host goes on to the FP8 helper: reported."""
    report = migrate_json(write_project(tmp_path, {"test_pack.py": TEMPLATE.replace(
        "CONDITION", "cap is not None and cap.major != 10")}))
    assert _reported(report) and not _scoped(report)
