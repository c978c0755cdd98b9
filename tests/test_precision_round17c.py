"""Round 17 (issue #16): CUDA sources and build files whose findings repeat others or claim what
the file does not hold (npu_migrate/srcfolds17.py). Each test: the false or redundant finding is
gone or reworded, and a nearby true case is still reported as before."""

from __future__ import annotations

from .precision_helpers import migrate_json, write_project

GATED_SETUP = """\
import glob
import torch
from setuptools import setup
from torch.utils.cpp_extension import CUDAExtension

ext_modules = []
if torch.cuda.is_available():
    sources = glob.glob("csrc/**/*.cu", recursive=True)
    ext_modules.append(CUDAExtension("proj._C", sources))
setup(name="proj", ext_modules=ext_modules)
"""

HOST_HELPER = """\
#include <mutex>
#include <vector>
#include "props.h"

namespace {
std::vector<cudaDeviceProp> cached;
void fill_cache() {
  int n = 0;
  cudaGetDeviceCount(&n);
  cached.resize(n);
}
}  // namespace

cudaDeviceProp* proj_device_props(int device) {
  fill_cache();
  cudaGetDeviceProperties(&cached[device], device);
  return &cached[device];
}
"""

USER = """\
#include <torch/extension.h>
#include "props.h"

__global__ void scale_kernel(float* x, int n) { x[threadIdx.x] *= 2.0f; }

torch::Tensor scale(torch::Tensor x) {
  cudaDeviceProp* props = proj_device_props(0);
  scale_kernel<<<1, props->maxThreadsPerBlock>>>(x.data_ptr<float>(), x.numel());
  return x;
}

TORCH_LIBRARY(proj, m) { m.def("scale", &scale); }
"""

# host code only, but a function no reported source calls: it may be an op a binding file registers
HOST_OP = """\
#include <cstdint>

int64_t proj_device_attribute(int64_t attribute, int64_t device) {
  int value = 0;
  cudaDeviceGetAttribute(&value, static_cast<cudaDeviceAttr>(attribute), static_cast<int>(device));
  return value;
}
"""


def _by_path(report: dict, code: str) -> dict:
    return {f["path"]: f for f in report["findings"] if f["code"] == code and not f["fixable"]}


def test_host_only_cu_of_a_gated_build_says_no_kernel(tmp_path):
    root = write_project(tmp_path, {
        "setup.py": GATED_SETUP,
        "csrc/props.h": "#pragma once\ncudaDeviceProp* proj_device_props(int device);\n",
        "csrc/props.cu": HOST_HELPER,
        "csrc/scale.cu": USER,
        "csrc/attr.cu": HOST_OP,
    })
    found = _by_path(migrate_json(root), "NPU912")
    # (worded "no kernel in the file", then folded into its caller's finding, compiled by the same
    # build: singles21.fold_host_helpers, round 21 BG#18)
    assert "csrc/props.cu" not in found
    assert "also `props.cu`, host code with no kernel that it calls" in found["csrc/scale.cu"]["message"]
    # kept: the source with kernels and registrations, and a host-only file no reported source calls
    assert "the ops it registers" in found["csrc/scale.cu"]["message"]
    assert "the ops it registers" in found["csrc/attr.cu"]["message"]
    assert "no kernel in the file" not in found["csrc/attr.cu"]["message"]


KERNELS = """\
__global__ void fill_kernel(float* out, float value, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = value;
}

void launch_fill(float* out, float value, int n, cudaStream_t stream) {
  fill_kernel<<<(n + 255) / 256, 256, 0, stream>>>(out, value, n);
}
"""

OPS = """\
#include <torch/extension.h>
#include "fill.h"

__global__ void twice_kernel(float* x, int n) { x[threadIdx.x] *= 2.0f; }

torch::Tensor fill_(torch::Tensor t, double value) {
  launch_fill(t.data_ptr<float>(), static_cast<float>(value), t.numel(), 0);
  return t;
}

TORCH_LIBRARY(proj, m) { m.def("fill_", &fill_); }
"""

# kernels whose launcher nothing in the run calls: its own finding stays
LONELY = """\
__global__ void zero_kernel(float* out, int n) { out[threadIdx.x] = 0.0f; }

void launch_zero(float* out, int n) { zero_kernel<<<1, n>>>(out, n); }
"""

# kernels next to an op's implementation (names `Tensor`): a binding file may register it
TENSOR_HELPER = """\
#include <torch/extension.h>
__global__ void neg_kernel(float* out, int n) { out[threadIdx.x] = -out[threadIdx.x]; }

void launch_neg(float* out, int n) { neg_kernel<<<1, n>>>(out, n); }
torch::Tensor neg_(torch::Tensor t) { launch_neg(t.data_ptr<float>(), t.numel()); return t; }
"""

NEG_USER = """\
#include <torch/extension.h>
__global__ void abs_kernel(float* out, int n) { out[threadIdx.x] = fabsf(out[threadIdx.x]); }
void launch_neg(float* out, int n);
torch::Tensor abs_neg_(torch::Tensor t) {
  launch_neg(t.data_ptr<float>(), t.numel());
  abs_kernel<<<1, t.numel()>>>(t.data_ptr<float>(), t.numel());
  return t;
}
"""


def test_kernel_file_a_reported_cu_calls_folds_into_its_caller(tmp_path):
    root = write_project(tmp_path, {
        "csrc/fill.h": "#pragma once\nvoid launch_fill(float* out, float value, int n, cudaStream_t stream);\n",
        "csrc/fill_kernels.cu": KERNELS,
        "csrc/ops.cu": OPS,
        "csrc/zero_kernels.cu": LONELY,
        "csrc/neg/neg.cu": TENSOR_HELPER,
        "csrc/neg/abs_neg.cu": NEG_USER,
    })
    found = _by_path(migrate_json(root), "NPU912")
    assert "csrc/fill_kernels.cu" not in found
    assert "`fill_kernels.cu`, whose `launch_fill` it calls" in found["csrc/ops.cu"]["message"]
    assert found["csrc/ops.cu"]["severity"] == "error"
    # kept: a kernel file no reported source calls, and one that names `Tensor`
    assert "csrc/zero_kernels.cu" in found
    assert "csrc/neg/neg.cu" in found and "neg.cu`, whose" not in found["csrc/neg/abs_neg.cu"]["message"]


SETUP_EXTENSIONS = """\
import os
import sys
import torch
from setuptools import setup
from torch.utils import cpp_extension

ROCM_VERSION = os.environ.get("ROCM_VERSION", None)
if ROCM_VERSION:
    print("rocm")
else:
    CUDA_VERSION = "".join(os.environ.get("CUDA_VERSION", torch.version.cuda).split("."))
    if not CUDA_VERSION:
        print("needs CUDA")
        sys.exit(1)

extensions = [
    cpp_extension.CUDAExtension("a_cuda", ["ext/a/a.cpp", "ext/a/a_kernel.cu"]),
]
extensions.append(cpp_extension.CUDAExtension("b_cuda", ["ext/b/b.cpp", "ext/b/b_kernel.cu"]))
setup(name="proj", ext_modules=extensions, cmdclass={"build_ext": cpp_extension.BuildExtension})
"""

KERNEL = "__global__ void k(float* x) { x[threadIdx.x] = 1.0f; }\n"


def test_setup_cuda_extensions_fold_into_the_cuda_requirement(tmp_path):
    root = write_project(tmp_path / "folded", {
        "setup.py": SETUP_EXTENSIONS,
        "ext/a/a_kernel.cu": KERNEL,
        "ext/b/b_kernel.cu": KERNEL.replace("k(", "kb("),
    })
    report = migrate_json(root)
    setup_findings = [f for f in report["findings"] if f["path"] == "setup.py" and not f["fixable"]]
    assert not [f for f in setup_findings if f["code"] == "NPU911"]
    requirement = [f for f in setup_findings if "CUDAExtension` declarations at lines" in f["message"]]
    assert len(requirement) == 1 and requirement[0]["code"] == "NPU990" and requirement[0]["line"] == 11
    assert {"ext/a/a_kernel.cu", "ext/b/b_kernel.cu"} <= set(_by_path(report, "NPU912"))

    # kept: an extension whose CUDA source has no finding of the run (not in the project)
    root = write_project(tmp_path / "kept", {
        "setup.py": SETUP_EXTENSIONS,
        "ext/a/a_kernel.cu": KERNEL,
    })
    report = migrate_json(root)
    assert [f for f in report["findings"] if f["path"] == "setup.py" and f["code"] == "NPU911"]


DOCKERFILE = """\
ARG BASE_IMAGE=example/serving:latest
FROM ${BASE_IMAGE}

ENV NCCL_NET_PLUGIN=ofi
RUN CUDA_MAJOR=$(nvcc --version | sed -n 's/.*release \\\\([0-9]*\\\\).*/\\\\1/p') && echo $CUDA_MAJOR
RUN export NCCL_ROOT="$(python3 -c 'import nvidia.nccl, os; print(os.path.dirname(nvidia.nccl.__file__))')" && \\
    TORCH_CUDA_ARCH_LIST="9.0" pip install --no-build-isolation ./ext
"""


def test_cuda_build_variables_of_a_dockerfile_that_runs_nvcc(tmp_path):
    from .precision_helpers import moot_lines

    root = write_project(tmp_path / "nvcc", {"docker/Dockerfile.ext": DOCKERFILE})
    report = migrate_json(root)
    docker = [f for f in report["findings"] if f["path"] == "docker/Dockerfile.ext" and f["code"] == "NPU703"]
    assert not [f for f in docker if "TORCH_CUDA_ARCH_LIST" in f["source"] or "NCCL_ROOT" in f["source"]]
    assert "runs `nvcc` (line 5)" in moot_lines(report["skipped"], "NPU703", "docker/Dockerfile.ext")[7]
    # kept: an NCCL runtime setting of the same file, and the same variables without an nvcc step
    assert [f for f in docker if "NCCL_NET_PLUGIN" in f["source"]]
    root = write_project(tmp_path / "plain", {"docker/Dockerfile.ext": DOCKERFILE.replace(
        "RUN CUDA_MAJOR=$(nvcc --version | sed -n 's/.*release \\\\([0-9]*\\\\).*/\\\\1/p') && echo $CUDA_MAJOR\n", "")})
    report = migrate_json(root)
    assert [f for f in report["findings"] if f["code"] == "NPU703" and "TORCH_CUDA_ARCH_LIST" in f["source"]]
