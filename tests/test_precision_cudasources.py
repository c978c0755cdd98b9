"""Issue #16, round-12 audits: CUDA sources and build helpers that are not the CUDA port
(npu_migrate/cudasources.py). (a) a `.cu` whose code is all under `#if defined(USE_ROCM)` with an
`#else` stub that raises: a named scope; (b) a `.cu` of host code that registers CPU
implementations with CUTLASS host types only: info; (c) a setup.py CUDA_HOME probe whose build
falls back to a CppExtension: a named scope ("runs as written"); (d) a `torch.version.cuda`
helper that raises on None, reached only from a CUDA extension class: a named scope. Each nearby
true case stays a finding."""

from __future__ import annotations

from .precision_helpers import (
    AS_WRITTEN_PREFIX,
    migrate_json,
    moot_lines,
    write_project,
)

ROCM_ONLY = """\
// A HIP kernel kept under the .cu suffix
#include <cstdint>
#include <torch/all.h>

#if defined(USE_ROCM)
  #include <hip/hip_runtime.h>

__global__ void scale_kernel(float* x, float s) { x[threadIdx.x] *= s; }

void scale(torch::Tensor x, double s) {
  scale_kernel<<<1, 64>>>(x.data_ptr<float>(), (float)s);
}
#else
void scale(torch::Tensor, double) {
  TORCH_CHECK(false, "scale requires ROCm");
}
#endif
"""

ROCM_NO_ELSE = """\
#include <torch/all.h>
#ifdef USE_ROCM
__global__ void k(float* x) { x[0] = 1.0f; }
#endif  // USE_ROCM
"""

# the same kernel with a CUDA branch: a CUDA build compiles it
BOTH = """\
#include <torch/all.h>
#if defined(USE_ROCM)
__global__ void scale_kernel(float* x, float s) { x[threadIdx.x] *= s; }
#else
__global__ void scale_kernel(float* x, float s) { x[threadIdx.x] *= s * 1.0f; }
#endif
void scale(torch::Tensor x, double s) {
  scale_kernel<<<1, 64>>>(x.data_ptr<float>(), (float)s);
}
"""


def _finding(report: dict, path: str, code: str) -> dict | None:
    return next((f for f in report["findings"] if f["path"] == path and f["code"] == code), None)


def test_rocm_only_source_is_a_named_scope_and_a_cuda_one_stays(tmp_path):
    root = write_project(tmp_path, {
        "csrc/hip_ops/octave_like.cu": ROCM_ONLY,
        "csrc/hip_ops/decode_like.cu": ROCM_NO_ELSE,
        "csrc/ops/scale.cu": BOTH,
    })
    report = migrate_json(root)
    for path in ("csrc/hip_ops/octave_like.cu", "csrc/hip_ops/decode_like.cu"):
        assert _finding(report, path, "NPU912") is None
        reasons = moot_lines(report["skipped"], "NPU912", path)
        assert reasons and "ROCm-only source, never built for CUDA" in reasons[1]
    true = _finding(report, "csrc/ops/scale.cu", "NPU912")
    assert true is not None and true["severity"] == "error"


def test_rocm_else_branch_with_code_is_not_a_stub(tmp_path):
    text = ROCM_ONLY.replace('TORCH_CHECK(false, "scale requires ROCm");', "x.mul_(s);")
    report = migrate_json(write_project(tmp_path, {"csrc/ops/scale.cu": text}))
    finding = _finding(report, "csrc/ops/scale.cu", "NPU912")
    assert finding is not None and finding["severity"] == "error"


HOST_ONLY = """\
#include <cutlass/half.h>
#include <cutlass/layout/matrix.h>
#include <cutlass/tensor_ref.h>
#include <torch/library.h>
#include "helpers.h"

using Layout = cutlass::layout::RowMajor;

at::Tensor reorder(at::Tensor meta) {
  cutlass::MatrixCoord dim{meta.size(0), meta.size(1)};
  return meta.clone();
}

TORCH_LIBRARY_IMPL(mylib, CPU, m) {
  m.impl("reorder", reorder);
}
"""

HELPERS = """\
#pragma once
#include <vector>
inline int twice(int x) { return 2 * x; }
"""

# a host-side dispatcher of kernels in other translation units: no CPU registration
DISPATCHER = """\
#include <cutlass/numeric_types.h>
#include <torch/library.h>

void gemm_sm90(at::Tensor& c, const at::Tensor& a);

void gemm(at::Tensor& c, const at::Tensor& a) { gemm_sm90(c, a); }
"""


def test_host_only_cu_is_info_and_a_dispatcher_stays_an_error(tmp_path):
    root = write_project(tmp_path, {
        "csrc/sparse/meta_utils.cu": HOST_ONLY,
        "csrc/sparse/helpers.h": HELPERS,
        "csrc/gemm/entry.cu": DISPATCHER,
        "csrc/gemm/kernel.cu": HOST_ONLY.replace("at::Tensor reorder", "__global__ void k(float* x) { x[0] = 0; }\n"
                                                  "at::Tensor reorder"),
    })
    report = migrate_json(root)
    # (nothing to port since round 18: a named "no port work" scope, no finding)
    assert _finding(report, "csrc/sparse/meta_utils.cu", "NPU912") is None
    host = next(s for s in report["skipped"] if s["path"] == "csrc/sparse/meta_utils.cu" and "(NPU912)" in s["reason"])
    assert host["reason"].startswith("no port work on an NPU host")
    assert "host code compiled only in the CUDA build" in host["reason"]
    assert "registers CPU implementations" in host["reason"]
    for path in ("csrc/gemm/entry.cu", "csrc/gemm/kernel.cu"):
        finding = _finding(report, path, "NPU912")
        assert finding is not None and finding["severity"] == "error", path


def test_host_only_cu_whose_header_launches_kernels_stays_an_error(tmp_path):
    root = write_project(tmp_path, {
        "csrc/sparse/meta_utils.cu": HOST_ONLY,
        "csrc/sparse/helpers.h": HELPERS + "__global__ void k(float* x) { x[0] = 0; }\n",
    })
    finding = _finding(migrate_json(root), "csrc/sparse/meta_utils.cu", "NPU912")
    assert finding is not None and finding["severity"] == "error"


SETUP = """\
import glob
import os

import torch
from setuptools import setup
from torch.utils.cpp_extension import (
    BuildExtension,
    CppExtension,
    CUDA_HOME,
    CUDAExtension,
)


def get_cuda_version(home):
    return int(open(os.path.join(home, "version.txt")).read().strip() or 0)


def get_extensions():
    sources = glob.glob(os.path.join("csrc", "*.cpp"))
    extension = CppExtension
    if (
        (torch.cuda.is_available() and CUDA_HOME is not None)
        or os.getenv("FORCE_CUDA", "0") == "1"
    ):
        cuda_version = get_cuda_version(CUDA_HOME)
        extension = CUDAExtension
        sources += glob.glob(os.path.join("csrc", "*.cu"))
    return [extension("mylib._C", sources)]


setup(name="mylib", ext_modules=get_extensions(), cmdclass={"build_ext": BuildExtension})
"""


def test_setup_cuda_home_probe_with_cpp_fallback_runs_as_written(tmp_path):
    root = write_project(tmp_path, {"setup.py": SETUP, "csrc/op.cpp": "int f() { return 0; }\n",
                                    "csrc/op.cu": "__global__ void k(float* x) { x[0] = 0; }\n"})
    report = migrate_json(root)
    assert _finding(report, "setup.py", "NPU911") is None
    assert any(s["path"] == "setup.py" and s.get("reason", "").startswith(AS_WRITTEN_PREFIX + "NPU911")
               for s in report["skipped"])
    assert any("setup.py builds its `CppExtension` on an NPU host" in s.get("reason", "") for s in report["skipped"])
    kernel = _finding(report, "csrc/op.cu", "NPU912")
    # still reported on its own; info since round 16 (buildgated.py): the setup.py compiles it only
    # under the CUDA test, so an NPU host never builds it (its ops still need a review)
    assert kernel is not None and kernel["severity"] == "info"
    assert "not compiled on an NPU host (setup.py:21 builds CUDA sources only when" in kernel["message"]
    # without CUDA sources in the run, setup.py's finding is the only word on the CUDA build: it stays
    alone = migrate_json(write_project(tmp_path / "alone", {"setup.py": SETUP, "csrc/op.cpp": "int f() { return 0; }\n"}))
    probe = _finding(alone, "setup.py", "NPU911")
    assert probe is not None and probe["severity"] == "info"


UTILS = """\
import os


def get_cuda_version_in_pytorch():
    import torch

    try:
        major = torch.version.cuda.split(".")[0]
        minor = torch.version.cuda.split(".")[1]
    except Exception:
        raise ValueError("cannot read the CUDA version of the torch build")
    return major, minor


def check_system_pytorch_cuda_match(cuda_dir):
    major, minor = get_cuda_version_in_pytorch()
    if not os.path.exists(cuda_dir):
        raise RuntimeError(f"{cuda_dir} missing for CUDA {major}.{minor}")
"""

REPORT = """\


def report_versions():
    import torch

    return torch.version.cuda.split(".")
"""

CUDA_EXT = """\
from .utils import check_system_pytorch_cuda_match


class _CudaExtension:
    def assert_compatible(self):
        from torch.utils.cpp_extension import CUDA_HOME

        if not CUDA_HOME:
            raise AssertionError("CUDA_HOME is not found")
        check_system_pytorch_cuda_match(CUDA_HOME)
"""


def test_toolchain_helper_reached_only_from_a_cuda_extension_is_a_named_scope(tmp_path):
    root = write_project(tmp_path, {"pkg/__init__.py": "", "pkg/ext/__init__.py": "",
                                    "pkg/ext/info.py": REPORT.lstrip("\n"),
                                    "pkg/ext/utils.py": UTILS, "pkg/ext/cuda_extension.py": CUDA_EXT})
    report = migrate_json(root)
    reasons = moot_lines(report["skipped"], "NPU990", "pkg/ext/utils.py")
    assert 8 in reasons and "a CUDA toolchain helper called only by CUDA extension classes" in reasons[8]
    # a helper that does not raise on None, and is called from nowhere known, stays a finding
    left = [f for f in report["findings"] if f["path"] == "pkg/ext/info.py" and f["code"] == "NPU990"]
    assert [f["line"] for f in left] == [4]


def test_toolchain_finding_with_places_outside_the_helper_stays(tmp_path):
    root = write_project(tmp_path, {"pkg/__init__.py": "", "pkg/ext/__init__.py": "",
                                    "pkg/ext/utils.py": UTILS + REPORT, "pkg/ext/cuda_extension.py": CUDA_EXT})
    report = migrate_json(root)
    assert not moot_lines(report["skipped"], "NPU990", "pkg/ext/utils.py")
    assert any(f["path"] == "pkg/ext/utils.py" and f["code"] == "NPU990" and f["line"] == 8
               for f in report["findings"])


def test_toolchain_helper_with_another_caller_stays(tmp_path):
    runner = "from .ext.utils import get_cuda_version_in_pytorch\n\n\ndef main():\n    return get_cuda_version_in_pytorch()\n"
    root = write_project(tmp_path, {"pkg/__init__.py": "", "pkg/ext/__init__.py": "", "pkg/run.py": runner,
                                    "pkg/ext/utils.py": UTILS, "pkg/ext/cuda_extension.py": CUDA_EXT})
    report = migrate_json(root)
    assert 8 not in moot_lines(report["skipped"], "NPU990", "pkg/ext/utils.py")
    assert any(f["path"] == "pkg/ext/utils.py" and f["code"] == "NPU990" and f["line"] == 8
               for f in report["findings"])


FOLD_SETUP = """\
from setuptools import setup
from torch.utils.cpp_extension import BuildExtension, CUDAExtension

setup(
    name="pkg",
    ext_modules=[
        CUDAExtension("quant_kernels", ["ext/quant.cpp", "ext/cuda/gemm.cu", "ext/cuda/repack.cu", "ext/buffers.cu"]),
        CUDAExtension("single_kernel", ["ext/single/one.cu"]),
    ],
    cmdclass={"build_ext": BuildExtension},
)
"""

KERNEL = "__global__ void k(float* x) { x[threadIdx.x] = 0; }\n"


def test_cu_files_of_one_extension_are_one_finding(tmp_path):
    root = write_project(tmp_path, {"setup.py": FOLD_SETUP, "ext/quant.cpp": "int f() { return 0; }\n",
                                    "ext/cuda/gemm.cu": KERNEL, "ext/cuda/repack.cu": KERNEL.replace("0;", "1;"),
                                    "ext/buffers.cu": KERNEL.replace("0;", "2;"),
                                    "ext/single/one.cu": KERNEL.replace("0;", "3;"),
                                    "other/loose.cu": KERNEL.replace("0;", "4;")})
    report = migrate_json(root)
    found = {f["path"]: f for f in report["findings"] if f["code"] == "NPU912"}
    assert set(found) == {"ext/buffers.cu", "ext/single/one.cu", "other/loose.cu"}
    first = found["ext/buffers.cu"]
    assert first["severity"] == "error"
    assert "3 CUDA sources of the extension `quant_kernels`" in first["message"]
    assert "`ext/cuda/gemm.cu`" in first["message"] and "`ext/cuda/repack.cu`" in first["message"]
    assert found["ext/single/one.cu"]["severity"] == "error" and "reported once" not in found["ext/single/one.cu"]["message"]
