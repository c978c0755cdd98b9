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


DOCKERFILE = """\
ARG CUDA_VERSION=12.4.1
ARG NCCL_VERSION=2.21
FROM nvidia/cuda:${CUDA_VERSION}-devel-ubuntu22.04
ENV TORCH_CUDA_ARCH_LIST="8.0 9.0"
ENV NCCL_NET_PLUGIN=ofi
RUN pip install torch --index-url https://download.pytorch.org/whl/cu124
RUN echo ${CUDA_VERSION}
"""


def test_a_cuda_images_build_variables_are_part_of_its_base_image_finding(tmp_path: Path) -> None:
    """vLLM's Dockerfile: `ARG CUDA_VERSION` parametrises the nvidia/cuda image (NPU707) and its
    wheel index; the reviewers read a finding for it beside the image's as redundant."""
    report = migrate_json(write_project(tmp_path, {"Dockerfile": DOCKERFILE}))
    found = {f["line"]: f for f in report["findings"] if not f["fixable"]}
    assert sorted(found) == [3, 5]
    image = found[3]
    assert image["code"] == "NPU707" and "`CUDA_VERSION`, `NCCL_VERSION`, `TORCH_CUDA_ARCH_LIST`" in image["message"]
    # an NCCL runtime setting is not the image's build: its own finding
    assert found[5]["code"] == "NPU703" and "`NCCL_NET_PLUGIN`" in found[5]["message"]


def test_without_a_cuda_image_the_build_variables_stay(tmp_path: Path) -> None:
    report = migrate_json(write_project(tmp_path, {"Dockerfile": DOCKERFILE.replace(
        "nvidia/cuda:${CUDA_VERSION}-devel-ubuntu22.04", "python:3.11")}))
    names = sorted(f["message"].split("`")[1] for f in report["findings"] if f["code"] == "NPU703")
    assert names == ["CUDA_VERSION", "NCCL_NET_PLUGIN", "NCCL_VERSION", "TORCH_CUDA_ARCH_LIST"]
