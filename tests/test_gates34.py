"""A device check in front of a CUDA device-property field torch_npu's properties lack stays CUDA
(round-22 BK#6: vLLM's FlexAttention read `props.shared_memory_per_block_optin` under
`torch.cuda.is_available()`; widened, an NPU host entered the block and raised where the original
kept its default block sizes). rules/device.toml gate_names."""

from __future__ import annotations

from .precision_helpers import migrate_json, write_project

OPTIONS = """\
import torch


def kernel_options(block):
    if torch.cuda.is_available():
        props = torch.cuda.get_device_properties()
        if hasattr(props, "shared_memory_per_block_optin"):
            smem = props.shared_memory_per_block_optin
        else:
            raise RuntimeError("unknown shared memory")
        if smem < 144 * 1024:
            block //= 2
    return block


def memory_budget():
    if torch.cuda.is_available():
        return torch.cuda.get_device_properties().total_memory // 2
    return 0


def threads(x):
    if x.is_cuda:
        return torch.cuda.get_device_properties(x.device).max_threads_per_multi_processor
    return 1
"""


def test_a_check_in_front_of_a_field_npu_lacks_is_kept_one_in_front_of_a_field_it_has_is_widened(tmp_path):
    report = migrate_json(write_project(tmp_path, {"pkg/__init__.py": "", "pkg/opts.py": OPTIONS}))
    rewritten = {f["line"]: f["code"] for f in report["findings"] if f["fixable"]}
    assert 5 not in rewritten and 23 not in rewritten, rewritten
    scopes = [s for s in report["skipped"] if s["path"] == "pkg/opts.py"]
    assert any(s["start_line"] <= 5 <= s["end_line"] and "NPU110" in s["reason"] for s in scopes), scopes
    assert any(s["start_line"] <= 23 <= s["end_line"] for s in scopes), scopes
    # total_memory exists on an NPU: the check in front of it means "an accelerator" there
    assert rewritten.get(17) == "NPU201", rewritten
