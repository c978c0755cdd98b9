"""Round-13/14 audits (issue #16): gates read from another file or that decide nothing on an NPU
host (npu_migrate/gates15.py, callersonly.py). Each test writes a small project of its own, checks
that the false finding is gone (not reported, or a named skipped scope with its reason) and that a
nearby true case stays reported."""

from __future__ import annotations

from .precision_helpers import migrate_json, write_project


def _findings(report: dict, path: str, code: str) -> dict[int, dict]:
    return {f["line"]: f for f in report["findings"] if f["path"] == path and f["code"] == code and not f["fixable"]}


def _scopes(report: dict, path: str, code: str) -> dict[int, str]:
    return {s["start_line"]: s["reason"] for s in report["skipped"]
            if s.get("path") == path and "start_line" in s and f"({code})" in s["reason"]}


_REASONS = '''\
import torch


class Op:
    @classmethod
    def not_supported_reasons(cls, d):
        reasons = []
        device_type = d.device.type
        if d.dtype is torch.bfloat16 and (not device_type.startswith("cuda") or d.old):
            reasons.append("bf16 is only supported on A100+ GPUs")
        return reasons


def pick(d):
    if not d.device.type.startswith("cuda"):
        return "cpu"
    return d.device
'''


def test_cuda_test_that_only_records_a_reason_is_not_reported(tmp_path):
    """AL#18: a "cuda" test whose body only appends a reason to the list of why a CUDA op does not
    apply decides nothing on an NPU host: not reported; a "cuda" test that picks the device to
    run on stays reported."""
    report = migrate_json(write_project(tmp_path, {"pkg/ops.py": _REASONS}))
    found = _findings(report, "pkg/ops.py", "NPU990")
    assert 9 not in found
    assert 15 in found and found[15]["severity"] != "info"
