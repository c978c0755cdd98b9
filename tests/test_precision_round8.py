"""Issue #16, round-8 audit: shapes the reviewers read as false that the lead fixed directly.

- a tuple of wrapper classes read only by `isinstance` (accelerate's `extract_model_from_parallel`,
  mmengine's jit analysis) names DataParallel without building it: no NPU901; a tuple that is
  iterated and called still builds it;
- a registration (`MODEL_WRAPPERS.register_module(module=DataParallel)`) is NPU901 at info: the
  registry builds it only for a configuration that selects it.
"""

from __future__ import annotations

from pathlib import Path

from .precision_helpers import migrate_json, write_project

WRAPPERS = """\
import torch
from torch import nn
from mmengine.registry import MODEL_WRAPPERS


def unwrap(model):
    options = (torch.nn.parallel.DistributedDataParallel, torch.nn.DataParallel)
    if isinstance(model, options):
        return model.module
    return model


def build(model):
    wrappers = (nn.DataParallel, nn.parallel.DistributedDataParallel)
    for cls in wrappers:
        model = cls(model)
    return model


MODEL_WRAPPERS.register_module(module=nn.DataParallel)
"""


def test_dataparallel_in_a_type_check_tuple_or_a_registry(tmp_path: Path) -> None:
    report = migrate_json(write_project(tmp_path, {"wrap.py": WRAPPERS}))
    found = {f["line"]: f for f in report["findings"] if f["code"] == "NPU901"}
    assert 7 not in found  # read only by isinstance
    assert found[14]["severity"] == "error"  # iterated and called: DataParallel is built
    assert found[20]["severity"] == "info" and "registered here, not built" in found[20]["message"]
