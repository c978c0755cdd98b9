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


_LAUNCH = '''\
import torch


def _launch_config(device, numel):
    props = torch.cuda.get_device_properties(device)
    blocks = props.multi_processor_count * props.max_threads_per_multi_processor // 1024
    return min(numel, blocks)


def _plain_config(device):
    props = torch.cuda.get_device_properties(device)
    return props.warp_size


def reorder_for_cutlass(x):
    grid = _launch_config(x.device, x.numel())
    return x, grid


def plain_grid(x):
    return _plain_config(x.device)
'''

_CUTLASS_MOE = '''\
import torch
from sgl_kernel import silu_and_mul

from pkg.kernels import reorder_for_cutlass


def cutlass_moe(x):
    y, grid = reorder_for_cutlass(x)
    return silu_and_mul(y)
'''

_USER = '''\
from pkg.kernels import plain_grid


def run(x):
    return plain_grid(x)
'''


def test_device_property_helper_called_only_from_a_module_that_fails_to_import(tmp_path):
    """AL#33: a launch-config helper reading a CUDA device property, reached only through a
    helper that a module importing a compiled package with no NPU build (`sgl_kernel`, unguarded)
    calls: a named scope naming the callers; a helper with one plain caller stays reported, with
    a message that says the field is missing or empty (torch_npu binds it, it may be 0)."""
    report = migrate_json(write_project(tmp_path, {"pkg/__init__.py": "", "pkg/kernels.py": _LAUNCH,
                                                   "pkg/cutlass_moe.py": _CUTLASS_MOE, "pkg/user.py": _USER}))
    found = _findings(report, "pkg/kernels.py", "NPU931")
    assert 6 not in found
    reason = _scopes(report, "pkg/kernels.py", "NPU931")[6]
    assert "called only from code an NPU host does not run" in reason and "sgl_kernel" in reason
    assert 12 in found and found[12]["severity"] == "error"
    assert "missing or empty on NPU" in found[12]["message"] and "does not exist" not in found[12]["message"]
