"""Precision wave 30, helper h143 (issue #16): support checks of selectable classes, test probes,
same-file fallbacks and labels (round-30 audit rows EA#25, EC#19, EB#38, ...). Each false case is
paired with its nearest true case, which stays reported."""

from __future__ import annotations

from .precision_helpers import migrate_json, write_project

from npu_migrate import mocked29


def _hits(report: dict, path: str, code: str) -> list[dict]:
    return [f for f in report["findings"] if f["path"] == path and f["code"] == code]


# ------------------------------------------------------------- EA#25: a mock's expected call arguments
PROFILER_TEST = '''from unittest.mock import MagicMock, patch

import torch


def test_profiler_activities_are_parsed():
    with patch("pkg.wrapper.torch.profiler.profile", side_effect=[MagicMock()]) as profile:
        start()
    assert profile.call_args.kwargs["activities"] == [
        torch.profiler.ProfilerActivity.CUDA
    ]
    profile.assert_called_once_with(activities=[torch.profiler.ProfilerActivity.CUDA])


def test_real_profiler_records_cuda():
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        step()
    assert prof is not None
'''


def test_value_compared_with_a_mocks_recorded_call_is_moot_and_a_real_profiler_request_stays(tmp_path):
    root = write_project(tmp_path, {"tests/test_profiler.py": PROFILER_TEST})
    report = migrate_json(root)
    assert [(f["line"], f["severity"]) for f in _hits(report, "tests/test_profiler.py", "NPU935")] \
        == [(16, "warning")]  # the real profiler is asked for CUDA activity: kept
    moot = {s["start_line"]: s["reason"] for s in report["skipped"]
            if s.get("path") == "tests/test_profiler.py" and "(NPU935)" in s["reason"]}
    assert set(moot) == {10, 12} and all(mocked29.MOCK_VALUE in why for why in moot.values())
