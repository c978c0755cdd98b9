"""Round-20 precision (issue #16), helper h84: scripts and configs written for another vendor's
hardware (npu_migrate/configs20.py). Each false shape is paired with the nearest true one that must
stay reported."""

from __future__ import annotations

from pathlib import Path

from npu_migrate import catalogue, textfiles
from npu_migrate.model import Options

from .precision_helpers import migrate_json, write_project

REPORT = Options(enabled=catalogue.enabled_codes())

NCCL_BLOCK = """#!/bin/bash
# fabric settings for the cluster
export NCCL_IB_HCA="${NCCL_IB_HCA:-mlx5_0,mlx5_1}"
export NCCL_IB_GID_INDEX="${NCCL_IB_GID_INDEX:-1}"
export NCCL_CROSS_NIC="${NCCL_CROSS_NIC:-0}"
"""


def _scan(text: str, relpath: str):
    return textfiles.scan_text_file(text.encode(), relpath, REPORT)


# ------------------------------------------------------------------------------------------------
# AMD/ROCm scripts (audit BC#1)


def test_script_in_an_amd_ci_folder_is_a_named_skipped_file():
    result = _scan(NCCL_BLOCK, "ci/amd-cluster/launch.sh")
    assert result.findings == []
    assert "AMD/ROCm script" in result.skipped and "amd-cluster" in result.skipped


def test_script_named_for_rocm_is_skipped():
    result = _scan(NCCL_BLOCK, "ci/scripts/run_rocm_bench.sh")
    assert result.findings == [] and "run_rocm_bench" in result.skipped


def test_script_recognised_by_rocm_tooling_in_its_code():
    text = NCCL_BLOCK + "rocm-smi --showuse\nexport HSA_NO_SCRATCH_RECLAIM=1\n"
    result = _scan(text, "ci/cluster/launch.sh")
    assert result.findings == []
    assert "rocm-smi" in result.skipped and "line 6" in result.skipped


def test_amd_gpu_architecture_in_code_marks_the_script():
    result = _scan(NCCL_BLOCK + 'export MORI_GPU_ARCHS="gfx950"\n', "ci/cluster/launch.sh")
    assert result.findings == [] and "gfx950" in result.skipped


def test_plain_nccl_script_stays_reported():
    result = _scan(NCCL_BLOCK, "ci/cluster/launch.sh")
    assert result.skipped is None
    assert {f.code for f in result.findings} == {"NPU703"}


def test_rocm_word_only_in_a_comment_is_no_evidence():
    text = NCCL_BLOCK + "# on the ROCm cluster use rocm-smi instead\n"
    result = _scan(text, "ci/cluster/launch.sh")
    assert result.skipped is None and result.findings


def test_script_for_both_vendors_stays_reported():
    # an amd-named folder, but the script also drives NVIDIA tooling: it serves CUDA hosts too
    text = NCCL_BLOCK + "if command -v rocm-smi; then rocm-smi; else nvidia-smi; fi\n"
    result = _scan(text, "ci/amd-cluster/launch.sh")
    assert result.skipped is None
    assert {"NPU703", "NPU704"} <= {f.code for f in result.findings}


def test_word_inside_a_name_is_no_vendor_name():
    # `ship`, `damd` contain the letters but not the word
    result = _scan(NCCL_BLOCK, "ci/shipping/damd_launch.sh")
    assert result.skipped is None and result.findings


def test_amd_script_in_a_project_run_is_a_named_skip(tmp_path: Path):
    root = write_project(tmp_path, {"pkg/__init__.py": "", ".buildkite/amd-disagg/cluster.sh": NCCL_BLOCK,
                                    ".buildkite/nv-disagg/cluster.sh": NCCL_BLOCK})
    report = migrate_json(root)
    paths = {f["path"] for f in report["findings"]}
    assert ".buildkite/nv-disagg/cluster.sh" in paths
    assert ".buildkite/amd-disagg/cluster.sh" not in paths
    skipped = {s["path"]: s["reason"] for s in report["skipped"]}
    assert "AMD/ROCm script" in skipped[".buildkite/amd-disagg/cluster.sh"]


# ------------------------------------------------------------------------------------------------
# YAML profiles pinned to other hardware (audit BE#5)

RECIPE = """meta:
  title: "Some model"
  hardware:
    h200: verified
    ascend_910c: verified

variants:
  default:
    supported_hardware: [h100, h200, mi300x]
    extra_env:
      NCCL_P2P_LEVEL: "NVL"
  ascend:
    supported_hardware: [ascend_910c]
    extra_env:
      NCCL_BUFFSIZE: "8"

strategies:
  multi_node:
    extra_env:
      NCCL_CUMEM_ENABLE: "1"

presets:
  gb200_lane:
    label: "lane"
    hardware: gb200
    env:
      NCCL_MNNVL_ENABLE: "1"
      NCCL_NVLS_ENABLE: "1"
      NCCL_CUMEM_ENABLE: "1"
  generic_lane:
    label: "lane"
    hardware: ${HARDWARE}
    env:
      NCCL_ALGO: "Ring"
  cpu_lane:
    hardware: xeon6
    env:
      NCCL_DEBUG: "INFO"
"""


def test_profile_pinned_to_nvidia_hardware_is_a_named_scope():
    result = _scan(RECIPE, "recipes/model.yaml")
    lines = sorted(f.line for f in result.findings)
    # kept: the strategy (no hardware pin), the Ascend variant, a templated pin, a non-vendor pin
    assert lines == [15, 20, 34, 38]
    reasons = [s[2] for s in result.skipped_scopes]
    assert any("`gb200_lane`" in r and "hardware: gb200" in r for r in reasons)
    assert any("`default`" in r and "supported_hardware: h100, h200, mi300x" in r for r in reasons)


def test_profile_scope_in_a_project_run(tmp_path: Path):
    root = write_project(tmp_path, {"pkg/__init__.py": "", "recipes/model.yaml": RECIPE})
    report = migrate_json(root)
    found = sorted((f["line"], *(a[0] for a in f.get("also", []))) for f in report["findings"]
                   if f["path"] == "recipes/model.yaml")
    places = sorted(line for group in found for line in group)
    assert 27 not in places and 11 not in places  # gb200 preset, NVIDIA/AMD-only variant
    assert 20 in places  # the strategy's NCCL_CUMEM_ENABLE stays
    scopes = [s for s in report["skipped"] if s["path"] == "recipes/model.yaml"]
    assert any("deployment profile for other hardware" in s["reason"] for s in scopes)
