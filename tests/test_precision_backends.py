"""Issue #16, round-7/8 audits: NPU304 ("process-group backend comes from a value npu-migrate cannot
see") where the value is visible: a choice between two literals (the "nccl" one rewritten, NPU301)
or a variable the device picks (`self.backend = get_distributed_backend(device_type)`)."""

from __future__ import annotations

from pathlib import Path

from .precision_helpers import migrate_json, write_project

RECIPE = """\
import torch.distributed as dist
from torchtune import training


def setup(cfg):
    dist.init_process_group(backend="gloo" if cfg.device == "cpu" else "nccl")


class Recipe:
    def __init__(self, cfg, device_type):
        self.distributed_backend = training.get_distributed_backend(device_type, offload=False)
        dist.init_process_group(self.distributed_backend)

    def again(self, cfg):
        dist.init_process_group(backend=cfg.backend)


def other(cfg, backend_name):
    chosen = backend_name or cfg.backend
    dist.init_process_group(chosen)
"""


def test_visible_backends_are_not_unseen_and_unseen_ones_stay(tmp_path: Path) -> None:
    report = migrate_json(write_project(tmp_path, {"recipe.py": RECIPE}))
    codes = sorted((f["line"], f["code"]) for f in report["findings"] if f["code"].startswith("NPU30"))
    # line 6: the "nccl" literal is rewritten and "gloo" is what it says: nothing unseen
    assert (6, "NPU301") in codes and (6, "NPU304") not in codes
    # line 12: the device picks the backend (HCCL on an NPU host)
    assert (12, "NPU304") not in codes
    # a configured backend and a variable assigned something else stay unseen
    unseen = [f for f in report["findings"] if f["code"] == "NPU304"]
    lines = {f["line"] for f in unseen} | {a[0] for f in unseen for a in f.get("also") or []}
    assert {15, 20} <= lines
