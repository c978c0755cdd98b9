"""Precision wave 30, helper h143 (issue #16): support checks of selectable classes, test probes,
same-file fallbacks and labels (round-30 audit rows EA#25, EC#19, EB#38, ...). Each false case is
paired with its nearest true case, which stays reported."""

from __future__ import annotations

from .precision_helpers import migrate_json, write_project

from npu_migrate import mocked29, scriptfolds30, siblingnames30


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


# ------------------------------------------------------------- EB#38: a script's read of the caller's devices
DETECTING_SCRIPT = '''#!/bin/bash
SMI_BIN=$(which nvidia-smi || which rocm-smi || echo "")
if [[ "$SMI_BIN" == *"rocm"* ]]; then
  GPU_DEVICE_VAR="HIP_VISIBLE_DEVICES"
else
  GPU_DEVICE_VAR="CUDA_VISIBLE_DEVICES"
fi
echo "using ${GPU_DEVICE_VAR}"

# Accept either CUDA_VISIBLE_DEVICES or HIP_VISIBLE_DEVICES
VISIBLE_DEVICES="${CUDA_VISIBLE_DEVICES:-${HIP_VISIBLE_DEVICES:-}}"
echo "$VISIBLE_DEVICES"
'''

READING_SCRIPT = '''#!/bin/bash
VISIBLE_DEVICES="${CUDA_VISIBLE_DEVICES:-0}"
python serve.py --devices "$VISIBLE_DEVICES"
'''


def test_read_of_the_callers_devices_folds_into_the_scripts_own_report_and_a_lone_read_stays(tmp_path):
    root = write_project(tmp_path, {"detect.sh": DETECTING_SCRIPT, "read.sh": READING_SCRIPT})
    report = migrate_json(root)
    detect = _hits(report, "detect.sh", "NPU701")
    assert len(detect) == 1 and detect[0]["line"] == 6 and detect[0]["severity"] == "warning"
    assert [a[0] for a in detect[0]["also"]] == [11] and "(also at line 11)" in detect[0]["message"]
    read = _hits(report, "read.sh", "NPU701")  # the script's only report of the variable: kept
    assert [(f["line"], f["severity"]) for f in read] == [(2, "warning")]
    assert scriptfolds30.READ_FROM_CALLER in read[0]["message"]


# ------------------------------------------------------------- EC#19: a sibling module's `..._cuda` helper
SIBLING_UTILS = '''import pytest
import torch

skip_if_not_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")


def tolerance():
    return 1e-3
'''

SIBLING_TEST = '''from utils import (
    skip_if_not_cuda,
    tolerance,
)


@skip_if_not_cuda
def test_runs():
    assert tolerance() > 0
'''

EXTENSION_TEST = '''from kernels import selective_scan_cuda


def test_scan():
    assert selective_scan_cuda.fwd is not None
'''

REEXPORTING_UTILS = '''from scan_ext import selective_scan_cuda
'''

REEXPORT_TEST = '''from helpers import selective_scan_cuda


def test_scan():
    assert selective_scan_cuda.fwd is not None
'''


def test_sibling_python_helper_is_no_extension_and_a_compiled_one_stays(tmp_path):
    root = write_project(tmp_path, {
        "tests/det/utils.py": SIBLING_UTILS, "tests/det/test_det.py": SIBLING_TEST,
        "tests/ext/test_ext.py": EXTENSION_TEST,  # (no kernels.py beside it: a compiled module)
        "tests/re/helpers.py": REEXPORTING_UTILS, "tests/re/test_re.py": REEXPORT_TEST,
    })
    report = migrate_json(root)
    assert not _hits(report, "tests/det/test_det.py", "NPU911")
    scopes = [s for s in report["skipped"] if s.get("path") == "tests/det/test_det.py"]
    assert [(s["start_line"], siblingnames30.SIBLING_NAME in s["reason"]) for s in scopes] == [(1, True)]
    for path in ("tests/ext/test_ext.py", "tests/re/test_re.py"):
        kept = _hits(report, path, "NPU911")
        assert [(f["line"], f["severity"]) for f in kept] == [(1, "error")], path
