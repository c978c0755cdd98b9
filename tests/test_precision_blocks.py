"""Issue #16, round-7 audit: a block of NCCL/CUDA variables set on consecutive lines of a script or
a recipe is one decision on an NPU host, one NPU703 finding that names the others
(redundant.fold_adjacent_lines); a variable set apart keeps its own finding."""

from __future__ import annotations

from pathlib import Path

from .precision_helpers import migrate_json, write_project

SCRIPT = """\
#!/bin/bash
export NCCL_IB_HCA=mlx5
export NCCL_IB_DISABLE=0
# pin the bootstrap interface
export NCCL_SOCKET_IFNAME=eth0

echo "starting"
python -c "print('warm up')"
export NCCL_P2P_LEVEL=NVL
torchrun train.py
"""

RECIPE = """\
strategies:
  pd_cluster:
    replicas: 2
    env:
      NCCL_CUMEM_ENABLE: "1"
      NCCL_MNNVL_ENABLE: "1"
      NCCL_NVLS_ENABLE: "1"
    args: --tensor-parallel-size 4
  single_node:
    replicas: 1
    args: --tensor-parallel-size 8
    env:
      NCCL_MIN_NCHANNELS: "16"
"""


def _npu703(report: dict, path: str) -> list[dict]:
    return [f for f in report["findings"] if f["code"] == "NPU703" and f["path"] == path]


def test_a_scripts_block_of_nccl_variables_is_one_finding_and_a_later_one_its_own(tmp_path: Path) -> None:
    report = migrate_json(write_project(tmp_path, {"run.sh": SCRIPT}))
    found = _npu703(report, "run.sh")
    assert [f["line"] for f in found] == [2, 9]
    block = found[0]["message"]
    assert "`NCCL_IB_HCA`" in block and "`NCCL_IB_DISABLE`" in block and "`NCCL_SOCKET_IFNAME`" in block
    assert "in the same block" in block and "also at lines 3, 5" in block
    assert "`NCCL_P2P_LEVEL`" in found[1]["message"] and "same block" not in found[1]["message"]
    assert {f["severity"] for f in found} == {"info"}


def test_a_recipes_env_block_is_one_finding_per_block(tmp_path: Path) -> None:
    # (no `hardware:` pin in the profiles: a profile pinned to NVIDIA hardware is a named scope,
    # yamlscopes.pinned_profiles)
    report = migrate_json(write_project(tmp_path, {"recipe.yaml": RECIPE}))
    found = _npu703(report, "recipe.yaml")
    assert [f["line"] for f in found] == [5, 13]
    assert "`NCCL_MNNVL_ENABLE`, `NCCL_NVLS_ENABLE` in the same block" in found[0]["message"]
    assert "`NCCL_MIN_NCHANNELS`" in found[1]["message"]


PER_HARDWARE = """\
model: some/model
variants:
  default:
    args: --tp 8
    hardware_overrides:
      amd:
        extra_env:
          NCCL_MIN_NCHANNELS: "16"
      gb200:
        extra_env:
          NCCL_CUMEM_ENABLE: "1"
          NCCL_MNNVL_ENABLE: "1"
      ascend_910c:
        extra_env:
          NCCL_DEBUG: INFO
env:
  NCCL_P2P_LEVEL: NVL
"""


def test_another_vendors_entry_of_a_per_hardware_mapping_is_a_named_scope(tmp_path: Path) -> None:
    """A vLLM recipe's `hardware_overrides.amd` / `.gb200` entries: the deployment picks its own
    hardware's entry, an NPU host the `ascend_*` one or the defaults (round-8 audit)."""
    report = migrate_json(write_project(tmp_path, {"recipe.yaml": PER_HARDWARE}))
    assert [f["line"] for f in _npu703(report, "recipe.yaml")] == [15, 17]  # the NPU's entry, the defaults
    scopes = {(s["start_line"], s["end_line"]): s["reason"] for s in report["skipped"]
              if s.get("path") == "recipe.yaml" and "start_line" in s}
    assert scopes == {
        (6, 8): "another platform's configuration (the `hardware_overrides.amd` section of a per-hardware mapping)",
        (9, 12): "another platform's configuration (the `hardware_overrides.gb200` section of a per-hardware mapping)",
    }
