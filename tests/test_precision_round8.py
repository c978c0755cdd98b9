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
from mypkg import Wrapper


def unwrap(model):
    options = (torch.nn.parallel.DistributedDataParallel, torch.nn.DataParallel)
    options += (Wrapper,)
    while isinstance(model, options):
        model = model.module
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
    assert 8 not in found  # read only by isinstance (the tuple grown with +=)
    assert found[16]["severity"] == "error"  # iterated and called: DataParallel is built
    # a registration names the class, builds none: a named scope (round 14, AM#29), not a finding
    assert 22 not in found
    assert any(s.get("start_line") == 22 and "(NPU901)" in s["reason"] and "registered here, not built" in s["reason"]
               for s in report["skipped"])


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


ENV_REPORT = """\
import os
import subprocess

import torch
from torch.utils.cpp_extension import CUDA_HOME


def collect_env():
    info = {"torch": torch.__version__}
    if CUDA_HOME is not None and os.path.isdir(CUDA_HOME):
        info["nvcc"] = subprocess.check_output([os.path.join(CUDA_HOME, "bin", "nvcc"), "-V"]).decode()
    return info
"""

JOINED = """\
import os

import torch.utils.cpp_extension

cuda_include_path = os.path.join(torch.utils.cpp_extension.CUDA_HOME, "include")
"""


def test_a_cuda_home_tested_for_none_outside_a_build_runs_as_written(tmp_path: Path) -> None:
    """mmengine's collect_env, colossalai's check_installation, vLLM's CMake preset tool: CUDA_HOME is
    None on an NPU host and the file tests for it; a file joining it unchecked keeps its error."""
    report = migrate_json(write_project(tmp_path, {"envinfo.py": ENV_REPORT, "client.py": JOINED,
                                                   "build.py": ENV_REPORT + "from torch.utils.cpp_extension import "
                                                                            "CUDAExtension\n"}))
    codes = {(f["path"], f["severity"]) for f in report["findings"] if f["code"] == "NPU911"}
    assert ("client.py", "error") in codes and ("build.py", "error") in codes
    assert not any(path == "envinfo.py" for path, _ in codes)
    assert not [f for f in report["findings"] if f["path"] == "envinfo.py" and not f["fixable"]]  # uses too
    reasons = [s["reason"] for s in report["skipped"] if s.get("path") == "envinfo.py"]
    assert reasons and reasons[0].startswith("runs as written on an NPU host (NPU911): ")
    assert "a CUDA toolkit path whose absence the file handles" in reasons[0]


PARENT = """\
import torch


class CudaGraphRunner:
    def start_profile(self):
        torch.cuda.memory._record_memory_history()

    def stop_profile(self):
        torch.cuda.memory._dump_snapshot("memory.pickle")
        torch.cuda.memory._record_memory_history(enabled=None)
"""

NPU_RUNNER = """\
import torch_npu

from .cuda_graph_runner import CudaGraphRunner


class NPUGraphRunner(CudaGraphRunner):
    def start_profile(self):
        torch_npu.npu.memory._record_memory_history()

    def stop_profile(self):
        torch_npu.npu.memory._record_memory_history(enabled=None)
"""


def test_a_finding_merged_over_two_overridden_methods_is_a_scope(tmp_path: Path) -> None:
    """sglang's CudaGraphRunner: one NPU202 stands for the allocator-history calls of two methods,
    and NPUGraphRunner overrides both (round-8 audit); with one method not overridden it stays."""
    files = {"runner/__init__.py": "", "runner/cuda_graph_runner.py": PARENT, "runner/npu_graph_runner.py": NPU_RUNNER}
    report = migrate_json(write_project(tmp_path, files))
    assert not [f for f in report["findings"] if f["path"] == "runner/cuda_graph_runner.py" and not f["fixable"]]
    reasons = " ".join(s["reason"] for s in report["skipped"] if s.get("path") == "runner/cuda_graph_runner.py")
    assert "`NPUGraphRunner.start_profile`" in reasons and "`NPUGraphRunner.stop_profile`" in reasons
    files["runner/npu_graph_runner.py"] = NPU_RUNNER.split("    def stop_profile")[0]
    report = migrate_json(write_project(tmp_path / "again", files))
    kept = [f for f in report["findings"] if f["path"] == "runner/cuda_graph_runner.py" and f["code"] == "NPU202"]
    assert kept and kept[0]["severity"] == "error"


PROFILER = """\
from typing import Union

import torch

_PROFILER = Union[torch.profiler.profile, torch.autograd.profiler.emit_nvtx]


def start(emit_nvtx):
    if emit_nvtx:
        return torch.autograd.profiler.emit_nvtx()
    return torch.profiler.profile()
"""


def test_a_merged_finding_stands_on_a_use_not_on_a_type_alias(tmp_path: Path) -> None:
    """Lightning's `_PROFILER = Union[..., emit_nvtx]`: the alias names the class, the call uses it;
    the finding stands on the call (round-8 audit: a poor anchor), and the alias, a type only, is a
    named scope (labels20.py, round-20 audit BC#36), not a place of the finding."""
    report = migrate_json(write_project(tmp_path, {"prof.py": PROFILER}))
    (found,) = [f for f in report["findings"] if "emit_nvtx" in f["message"] and not f["fixable"]]
    assert found["line"] == 10 and not found.get("also"), found
    assert any(s["path"] == "prof.py" and s["start_line"] == 5 for s in report["skipped"]), report["skipped"]


SELECT = """\
import torch


def pick(data, weights):
    if data.device.type == "cuda" and torch.version.cuda and weights.dtype == torch.int8:
        return torch._scaled_mm(data.to(torch.float8_e4m3fn), weights, out_dtype=torch.bfloat16)
    return data @ weights.float()


def must(data):
    if data.device.type != "cuda":
        raise ValueError("this kernel needs a CUDA tensor")
    return torch._scaled_mm(data.to(torch.float8_e4m3fn), data.t(), out_dtype=torch.bfloat16)
"""


def test_a_kept_feature_comparison_with_a_fallback_runs_as_written(tmp_path: Path) -> None:
    """optimum-quanto's qbytes.py: `device.type == "cuda" and torch.version.cuda` selects a CUDA
    feature (FP8), else a torch path (NPU108, round-8 audit): a scope that runs as written."""
    report = migrate_json(write_project(tmp_path, {"select.py": SELECT}))
    scopes = {s["start_line"]: s["reason"] for s in report["skipped"] if s.get("path") == "select.py"}
    assert scopes[5].startswith("runs as written on an NPU host (NPU108): "), scopes
    assert [f["line"] for f in report["findings"] if f["code"] == "NPU108"] == [11]
    # the check whose error says the kernel "needs a CUDA tensor" stays as written (session 32,
    # round-21 BG#12: widened, it sent an NPU host past its clear error; before, it was widened as
    # NPU104), with the warning asking to review it; the FP8 compute behind it stays reported
    assert {(f["line"], f["code"], f["severity"]) for f in report["findings"] if f["line"] >= 11} >= {
        (11, "NPU108", "warning"), (13, "NPU913", "error")}


ATEN_FP8 = """\
import torch


def mm(a, b, sa, sb):
    return torch.ops.aten._scaled_mm_v2(a, b, sa, sb, out_dtype=torch.bfloat16)


FP8 = torch.float8_e4m3fn
"""


def test_the_aten_scaled_mm_ops_are_fp8_compute(tmp_path: Path) -> None:
    """torchao's blockwise FP8 kernels call `torch.ops.aten._scaled_mm_v2`: FP8 compute, so the
    file's FP8 names are not "names only" (round-8 audit: an error read as a no-work scope)."""
    report = migrate_json(write_project(tmp_path, {"mm.py": ATEN_FP8}))
    (found,) = [f for f in report["findings"] if f["code"] == "NPU913"]
    assert found["severity"] == "error" and found["line"] == 5 and "_scaled_mm_v2" in found["message"]
    assert not [s for s in report["skipped"] if s.get("path") == "mm.py"]


DTYPE_MAP = """\
import torch


def to_underlying_dtype(qdtype):
    mapping = {
        torch.qint8: torch.int8,
        torch.float8_e5m2: torch.float8_e5m2,
        torch.float8_e4m3fn: torch.float8_e4m3fn,
    }
    return mapping[qdtype]
"""


def test_a_dtype_to_dtype_map_names_fp8_dtypes_only(tmp_path: Path) -> None:
    """torchao's to_underlying_dtype maps each quantized dtype to its storage dtype, FP8 ones to
    themselves: no FP8 compute (round 8: an error read as false); a cast in the file still is."""
    cast = DTYPE_MAP + "\n\ndef quantize(x):\n    return x.to(torch.float8_e4m3fn)\n"
    report = migrate_json(write_project(tmp_path, {"names.py": DTYPE_MAP, "cast.py": cast}))
    assert not [f for f in report["findings"] if f["path"] == "names.py" and not f["fixable"]]
    assert any(s["reason"].startswith("no port work on an NPU host (NPU913)") for s in report["skipped"]
               if s.get("path") == "names.py")
    assert [(f["code"], f["severity"]) for f in report["findings"] if f["path"] == "cast.py"] == [("NPU913", "error")]
