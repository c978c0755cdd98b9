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


TRAIN = """\
import argparse

import torch


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--device", default="cuda:0")
    parser.add_argument("--label", default="cuda", type=str)
    args = parser.parse_args()
    print(args.label)
    return torch.nn.Linear(4, 4).to(args.device)
"""


def test_check_on_what_migrate_wrote_accepts_the_option_default_the_shim_maps(tmp_path):
    """NPU603 adds `type=npu_compat.device_arg` to an option whose value reaches a device
    position; argparse passes the string default through it too, so `check` on the migrated file
    must not call `default="cuda:0"` a leftover. An option without the converter keeps its NPU990."""
    import json

    from click.testing import CliRunner

    from npu_migrate.cli import main

    root = write_project(tmp_path, {"demo/__init__.py": "", "demo/train.py": TRAIN})
    out = tmp_path / "out"
    result = CliRunner().invoke(main, ["migrate", str(root), "--no-cache", "--isolated", "--allow-dirty",
                                       "--output-dir", str(out)], catch_exceptions=False)
    assert result.exit_code in (0, 1) and (out / "demo/train.py").exists(), result.output  # (1: findings left)
    migrated = (out / "demo/train.py").read_text()
    assert 'default="cuda:0", type=npu_compat.device_arg' in migrated, migrated
    result = CliRunner().invoke(main, ["check", str(out), "--no-cache", "--isolated",
                                       "--output-format", "json"], catch_exceptions=False)
    findings = [f for f in json.loads(result.stdout)["findings"] if f["code"] == "NPU990"]
    lines = migrated.splitlines()
    device = next(i for i, t in enumerate(lines, 1) if '"--device"' in t)
    label = next(i for i, t in enumerate(lines, 1) if '"--label"' in t)
    assert not [f for f in findings if f["line"] == device], findings
    assert [f for f in findings if f["line"] == label], findings
