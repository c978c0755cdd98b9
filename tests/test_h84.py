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


# ------------------------------------------------------------------------------------------------
# CUDA headers compiled only by JIT loaders an NPU host never imports (audit BC#26)

UTILS = """import torch


def is_cuda():
    return torch.cuda.is_available() and torch.version.cuda


def load_jit(name, *args, cuda_files=(), cuda_wrappers=()):
    raise NotImplementedError
"""

LOADER = """from pkg.jit.utils import load_jit


def _module():
    return load_jit("gemm", cuda_files=["gemm/kernels/gemm.cuh"])


def gemm(x):
    return _module().gemm(x)
"""

GATED_USER = """from pkg.jit.utils import is_cuda

_is_cuda = is_cuda()

if _is_cuda:
    from pkg.jit.gemm import gemm


def run(x):
    return gemm(x)
"""

HEADERS = {  # common.cuh is reached only through kernel.h, a file the run does not scan
    "pkg/jit/csrc/gemm/kernels/gemm.cuh": '#include "kernel.h"\n__global__ void gemm_kernel() {}\n',
    "pkg/jit/csrc/gemm/kernels/kernel.h": '#pragma once\n#include "common.cuh"\n',
    "pkg/jit/csrc/gemm/kernels/common.cuh": "__device__ int helper() { return 0; }\n",
}


def _jit_project(tmp_path: Path, user: str, extra: dict | None = None) -> dict:
    files = {"pkg/__init__.py": "", "pkg/jit/__init__.py": "", "pkg/jit/utils.py": UTILS,
             "pkg/jit/gemm.py": LOADER, "pkg/layers/__init__.py": "", "pkg/layers/quant.py": user,
             "pkg/jit/tests/test_gemm.py": "from pkg.jit.gemm import gemm\n", **HEADERS, **(extra or {})}
    return migrate_json(write_project(tmp_path, files))


def _header_findings(report: dict) -> list[dict]:
    return [f for f in report["findings"] if f["code"] == "NPU912" and f["path"].startswith("pkg/jit/csrc/")]


def test_headers_of_a_jit_loader_imported_only_under_is_cuda_are_a_named_scope(tmp_path: Path):
    report = _jit_project(tmp_path, GATED_USER)
    assert _header_findings(report) == []
    scopes = [s for s in report["skipped"] if s["path"].startswith("pkg/jit/csrc/")]
    assert scopes and "compiled only by JIT loaders an NPU host never imports" in scopes[0]["reason"]
    assert "pkg/jit/gemm.py:5" in scopes[0]["reason"] and "_is_cuda" in scopes[0]["reason"]


def test_headers_stay_reported_when_a_library_module_imports_the_loader_plainly(tmp_path: Path):
    plain = GATED_USER + "\nfrom pkg.jit import gemm as _gemm_module\n"
    report = _jit_project(tmp_path, plain)
    assert [f["severity"] for f in _header_findings(report)] == ["error"]


def test_headers_stay_reported_when_the_loader_is_imported_under_a_gate_an_npu_host_takes(tmp_path: Path):
    taken = GATED_USER.replace("if _is_cuda:", "if not _is_cuda:")
    report = _jit_project(tmp_path, taken)
    assert [f["severity"] for f in _header_findings(report)] == ["error"]


def test_headers_stay_reported_when_a_header_is_reached_by_no_loader(tmp_path: Path):
    extra = {"pkg/jit/csrc/gemm/kernels/other.cuh": "__global__ void other_kernel() {}\n"}
    report = _jit_project(tmp_path, GATED_USER, extra)
    assert [f["severity"] for f in _header_findings(report)] == ["error"]


# ------------------------------------------------------------------------------------------------
# A class whose constructor loads a registry of CUDA extensions only (audit BE#10)

KERNEL_LOADER = """class CudaOpsExtension:
    def is_available(self):
        return False


class NpuOpsExtension:
    def is_available(self):
        return True


class KernelLoader:
    REGISTRY = []

    def load(self):
        usable = [e() for e in self.REGISTRY if e().is_available()]
        assert usable, "No usable kernel found"
        return usable[0]


class OpsLoader(KernelLoader):
    REGISTRY = [CudaOpsExtension]


class MixedLoader(KernelLoader):
    REGISTRY = [NpuOpsExtension, CudaOpsExtension]
"""

BACKEND = """from flash_attn import flash_attn_varlen_func

from pkg.kernels.loader import {loader}


class CudaBackend:
    def __init__(self):
        self.ops = {loader}().load()

    def prefill(self, q, k, v, cu, n, slopes):
        return flash_attn_varlen_func(q, k, v, cu_seqlens_q=cu, cu_seqlens_k=cu, max_seqlen_q=n,
                                      max_seqlen_k=n, causal=True, alibi_slopes=slopes)
"""


def _backend_findings(tmp_path: Path, loader: str) -> list[dict]:
    files = {"pkg/__init__.py": "", "pkg/kernels/__init__.py": "", "pkg/kernels/loader.py": KERNEL_LOADER,
             "pkg/backends/__init__.py": "", "pkg/backends/attn.py": BACKEND.format(loader=loader)}
    report = migrate_json(write_project(tmp_path, files))
    return [f for f in report["findings"] if f["path"] == "pkg/backends/attn.py" and f["code"] == "NPU503"]


def test_finding_in_a_class_whose_constructor_loads_only_cuda_extensions_is_info(tmp_path: Path):
    found = _backend_findings(tmp_path, "OpsLoader")
    assert len(found) == 1 and found[0]["severity"] == "info"
    assert "`CudaBackend.__init__` calls `OpsLoader().load()` (line 8)" in found[0]["message"]
    assert "`CudaOpsExtension`" in found[0]["message"]


def test_finding_stays_an_error_when_the_loader_registers_an_npu_extension(tmp_path: Path):
    found = _backend_findings(tmp_path, "MixedLoader")
    assert len(found) == 1 and found[0]["severity"] == "error"
