"""Issue #16, round-14/15 audits (AL#1, AL#2, AN#4, AN#11, AN#22, AN#21): CUDA sources a project's
own build compiles only on a CUDA host, and kernel-less headers whose includers are reported
(npu_migrate/buildgated.py). A gated build lowers NPU912 to info (not a named scope: the ops
those kernels register are still port work); an ungated build and a JIT load keep the error."""

from __future__ import annotations

import ast
from pathlib import Path

from npu_migrate import buildgated

from .precision_helpers import migrate_json, write_project

KERNEL = """\
#include <torch/extension.h>

__global__ void scale_kernel(float* x, float s, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) x[i] *= s;
}

void scale(torch::Tensor x, float s) {
  int n = x.numel();
  scale_kernel<<<(n + 255) / 256, 256>>>(x.data_ptr<float>(), s, n);
}
"""

GATED_SETUP = """\
import glob
import os

import torch
from setuptools import setup
from torch.utils.cpp_extension import CUDA_HOME, BuildExtension, CppExtension, CUDAExtension


def get_extensions():
    sources = glob.glob("mypkg/csrc/*.cpp")
    source_cuda = glob.glob(os.path.join("mypkg", "csrc", "**", "*.cu"), recursive=True)
    extension = CppExtension
    if (
        torch.cuda.is_available()
        and CUDA_HOME is not None
        and torch.version.cuda is not None
    ) or os.getenv("FORCE_CUDA", "0") == "1":
        extension = CUDAExtension
        sources += source_cuda
    return [extension("mypkg._C", sources)]


setup(name="mypkg", ext_modules=get_extensions(), cmdclass={"build_ext": BuildExtension})
"""

UNGATED_SETUP = """\
from setuptools import setup
from torch.utils.cpp_extension import BuildExtension, CUDAExtension

setup(
    name="mypkg",
    ext_modules=[CUDAExtension("mypkg._C", ["mypkg/csrc/scale.cu"])],
    cmdclass={"build_ext": BuildExtension},
)
"""


def _npu912(report: dict, path: str) -> list[dict]:
    return [f for f in report["findings"] if f["code"] == "NPU912" and f["path"] == path]


def test_setup_gating_cuda_glob_lowers_to_info(tmp_path: Path) -> None:
    """AN#22 (xformers): `*.cu` sources added only when CUDA is available or forced: info, with the
    gate's line; a named scope it is not."""
    root = write_project(tmp_path, {"setup.py": GATED_SETUP, "mypkg/csrc/scale.cu": KERNEL,
                                    "mypkg/csrc/ops.cpp": "// host\n"})
    report = migrate_json(root)
    [finding] = _npu912(report, "mypkg/csrc/scale.cu")
    assert finding["severity"] == "info"
    assert "not compiled on an NPU host (setup.py:13 builds CUDA sources only when" in finding["message"]
    assert "review their Python callers" in finding["message"]
    assert not [s for s in report["skipped"] if s["path"] == "mypkg/csrc/scale.cu"]


def test_ungated_cuda_extension_keeps_error(tmp_path: Path) -> None:
    """The true case nearby: a setup.py that builds its CUDAExtension on any host keeps the error."""
    root = write_project(tmp_path, {"setup.py": UNGATED_SETUP, "mypkg/csrc/scale.cu": KERNEL})
    [finding] = _npu912(migrate_json(root), "mypkg/csrc/scale.cu")
    assert finding["severity"] == "error"


def test_gate_in_one_branch_only_keeps_error(tmp_path: Path) -> None:
    """A CUDA source also added outside the gate (an `else` an NPU host takes): the error stays."""
    setup = GATED_SETUP.replace("    return [extension", "    else:\n        sources += source_cuda\n"
                                "    return [extension")
    root = write_project(tmp_path, {"setup.py": setup, "mypkg/csrc/scale.cu": KERNEL})
    [finding] = _npu912(migrate_json(root), "mypkg/csrc/scale.cu")
    assert finding["severity"] == "error"


def test_jit_load_elsewhere_keeps_error(tmp_path: Path) -> None:
    """A gated setup.py, but a Python module JIT-builds the same source (`cpp_extension.load`)
    without a guard: the error stays."""
    loader = ("from torch.utils.cpp_extension import load\n\n"
              "_C = load(name='scale', sources=['mypkg/csrc/scale.cu'])\n")
    root = write_project(tmp_path, {"setup.py": GATED_SETUP, "mypkg/csrc/scale.cu": KERNEL,
                                    "mypkg/jit.py": loader})
    [finding] = _npu912(migrate_json(root), "mypkg/csrc/scale.cu")
    assert finding["severity"] == "error"


CMAKE = """\
cmake_minimum_required(VERSION 3.26)
project(mypkg LANGUAGES CXX)

# Forward the non-CUDA targets to other scripts.
if (NOT MYPKG_TARGET_DEVICE STREQUAL "cuda" AND
    NOT MYPKG_TARGET_DEVICE STREQUAL "rocm")
    return()
endif()

set(MYPKG_EXT_SRC
  "csrc/scale.cu"
  "csrc/ops.cpp")
"""

CMAKE_SETUP = """\
import os

import torch
from setuptools import setup

MYPKG_TARGET_DEVICE = os.getenv("MYPKG_TARGET_DEVICE")
if MYPKG_TARGET_DEVICE is None:
    if torch.version.hip is not None:
        MYPKG_TARGET_DEVICE = "rocm"
    elif torch.version.cuda is not None:
        MYPKG_TARGET_DEVICE = "cuda"
    else:
        MYPKG_TARGET_DEVICE = "cpu"

setup(name="mypkg")
"""


def test_cmake_returning_before_cuda_sources_lowers_to_info(tmp_path: Path) -> None:
    """AL#1, AL#2, AN#4, AN#11 (vLLM csrc): the CMake list returns for a non-"cuda" target before any
    `.cu`, and setup.py picks "cuda" only from `torch.version.cuda`: info."""
    root = write_project(tmp_path, {"setup.py": CMAKE_SETUP, "CMakeLists.txt": CMAKE, "csrc/scale.cu": KERNEL})
    [finding] = _npu912(migrate_json(root), "csrc/scale.cu")
    assert finding["severity"] == "info"
    assert "CMakeLists.txt:5 builds CUDA sources only when `MYPKG_TARGET_DEVICE` is \"cuda\"" in finding["message"]


def test_cmake_listing_cuda_sources_first_keeps_error(tmp_path: Path) -> None:
    """A CMake list that names its `.cu` before any target check builds it on every host: error."""
    cmake = CMAKE.replace('set(MYPKG_EXT_SRC\n  "csrc/scale.cu"\n  "csrc/ops.cpp")\n', "")
    cmake = cmake.replace("project(mypkg LANGUAGES CXX)\n", 'project(mypkg LANGUAGES CXX)\nset(SRC "csrc/scale.cu")\n')
    root = write_project(tmp_path, {"setup.py": CMAKE_SETUP, "CMakeLists.txt": cmake, "csrc/scale.cu": KERNEL})
    [finding] = _npu912(migrate_json(root), "csrc/scale.cu")
    assert finding["severity"] == "error"


def test_npu_value_of_build_conditions() -> None:
    """What the gate reads as false on an NPU host, and what it leaves undecided."""
    def value(src: str):
        return buildgated.npu_value(ast.parse(src, mode="eval").body)

    assert value("torch.cuda.is_available() and CUDA_HOME is not None") is False
    assert value("torch.version.cuda is not None or os.getenv('FORCE_CUDA', '0') == '1'") is False
    assert value("_is_cuda()") is False
    assert value("not torch.cuda.is_available()") is True
    assert value("os.getenv('BUILD_EXT', '0') == '1'") is None
    assert value("torch.cuda.is_available() or USE_EXT") is None


HEADER_UTIL = "#pragma once\n#include <cuda_runtime.h>\n\ninline __device__ float twice(float x) { return 2 * x; }\n"
HEADER_VEC = "#pragma once\n#include <mykern/util.cuh>\n\ntemplate <int N> struct Vec { float v[N]; };\n"


def _kernel_header(include: str, name: str = "k") -> str:
    return (f"#pragma once\n#include <{include}>\n\n"
            f"__global__ void {name}(float* x) {{ x[threadIdx.x] = twice(x[threadIdx.x]); }}\n")


def test_kernelless_headers_fold_into_their_reported_includers(tmp_path: Path) -> None:
    """AN#21 (sglang jit_kernel/include/sgl_kernel): a folder of kernel-less headers whose includers
    carry their own NPU912 finding is named in the first includer's finding, not reported apart."""
    root = write_project(tmp_path, {
        "pkg/include/mykern/util.cuh": HEADER_UTIL,
        "pkg/include/mykern/vec.cuh": HEADER_VEC,
        "pkg/csrc/a.cuh": _kernel_header("mykern/util.cuh"),
        "pkg/csrc/b.cuh": _kernel_header("mykern/vec.cuh"),
        "pkg/other/c.cuh": _kernel_header("mykern/vec.cuh", "kc"),
    })
    report = migrate_json(root)
    assert not [f for f in report["findings"] if f["code"] == "NPU912" and "/include/" in f["path"]]
    [host] = _npu912(report, "pkg/csrc/a.cuh")
    assert host["severity"] == "error"
    assert "also the kernel-less CUDA headers of `pkg/include/mykern/`, included by 3 reported sources" in host["message"]
    assert "util.cuh, vec.cuh" in host["message"]
    assert _npu912(report, "pkg/other/c.cuh")


def test_header_with_kernels_or_unincluded_keeps_its_finding(tmp_path: Path) -> None:
    """A header folder with a `__global__` kernel, or one nothing in the run includes, keeps its own
    finding."""
    root = write_project(tmp_path, {
        "pkg/include/mykern/util.cuh": HEADER_UTIL,
        "pkg/include/mykern/vec.cuh": HEADER_VEC,
        "pkg/include/kern2/k.cuh": _kernel_header("cuda_runtime.h"),
        "pkg/csrc/a.cuh": _kernel_header("mykern/util.cuh") + '#include "../include/kern2/k.cuh"\n',
    })
    report = migrate_json(root)
    # vec.cuh is included by nothing outside its folder: the folder keeps its finding
    assert [f for f in report["findings"] if f["code"] == "NPU912" and f["path"].startswith("pkg/include/mykern/")]
    assert _npu912(report, "pkg/include/kern2/k.cuh")
