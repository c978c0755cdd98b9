"""Issue #16, round-10 audits: optional CUDA extensions and Triton modules behind guards read across
files (npu_migrate/optionalext.py): an import under a flag another module's probe sets (Y12), a
Triton module that guards Triton in the file itself (Y20)."""

from __future__ import annotations

from pathlib import Path

from .precision_helpers import migrate_json, write_project

PROBE = """\
try:
    import fastops_cuda  # noqa: F401

    FASTOPS_AVAILABLE = True
    FASTOPS_ERROR = None
except Exception as e:
    FASTOPS_AVAILABLE = False
    FASTOPS_ERROR = e
"""

FLAGGED = """\
import torch

from .probe import FASTOPS_AVAILABLE

if FASTOPS_AVAILABLE:
    import fastops_cuda


def repack(weight):
    if not FASTOPS_AVAILABLE:
        raise ValueError("fastops is not installed")
    return fastops_cuda.repack(weight)
"""

# a flag the project sets by hand, not by a probe: not known to be False on an NPU host
SETTINGS = """\
FASTOPS_ENABLED = True
"""

BY_HAND = """\
import torch

from .settings import FASTOPS_ENABLED

if FASTOPS_ENABLED:
    import fastops_cuda


def repack(weight):
    return fastops_cuda.repack(weight)
"""

PLAIN = """\
import torch
import fastops_cuda


def repack(weight):
    return fastops_cuda.repack(weight)
"""


def _by_path(report: dict, code: str) -> dict:
    return {f["path"]: f for f in report["findings"] if f["code"] == code and not f["fixable"]}


def test_import_under_a_flag_another_modules_probe_sets_is_info(tmp_path: Path) -> None:
    report = migrate_json(write_project(tmp_path, {
        "lib/__init__.py": "", "lib/probe.py": PROBE, "lib/marlin.py": FLAGGED,
        "lib/settings.py": SETTINGS, "lib/byhand.py": BY_HAND, "lib/plain.py": PLAIN,
    }))
    found = _by_path(report, "NPU911")
    flagged = found["lib/marlin.py"]
    assert flagged["severity"] == "info"
    assert "`if FASTOPS_AVAILABLE:`, a flag the import probe in lib/probe.py sets" in flagged["message"]
    # a flag set by hand guards nothing on an NPU host; an unguarded import fails there
    assert found["lib/byhand.py"]["severity"] == "error"
    assert found["lib/plain.py"]["severity"] == "error"


GUARDED_TRITON = """\
try:
    import triton
    import triton.language as tl

    HAS_TRITON = True
except ImportError:
    HAS_TRITON = False
    print("install triton")


if HAS_TRITON:

    @triton.jit
    def gemm_kernel(a_ptr, b_ptr, c_ptr, BLOCK: tl.constexpr):
        pid = tl.program_id(0)

    def gemm(a, b, c):
        gemm_kernel[(triton.cdiv(a.shape[0], 16),)](a, b, c, BLOCK=16)
"""

# the kernel is defined under the gate, but a function outside it launches it: a NameError there
LEAKY_TRITON = """\
try:
    import triton

    HAS_TRITON = True
except ImportError:
    HAS_TRITON = False

if HAS_TRITON:

    @triton.jit
    def copy_kernel(a_ptr):
        pass


def copy(a):
    copy_kernel[(1,)](a)
"""

# imported unguarded by a module of the run: its names are missing there where Triton is
IMPORTED_TRITON = GUARDED_TRITON.replace("gemm", "mm")
USER = """\
from .mm_kernel import mm


def run(a, b, c):
    return mm(a, b, c)
"""


def test_triton_module_guarded_in_the_file_is_info(tmp_path: Path) -> None:
    report = migrate_json(write_project(tmp_path, {
        "kern/__init__.py": "", "kern/gemm_kernel.py": GUARDED_TRITON, "kern/copy_kernel.py": LEAKY_TRITON,
        "kern/mm_kernel.py": IMPORTED_TRITON, "kern/user.py": USER,
    }))
    found = _by_path(report, "NPU910")
    # a guarded module nothing imports: a named scope (round 14, AK#32), no longer an info finding
    assert "kern/gemm_kernel.py" not in found
    guarded = next(s["reason"] for s in report["skipped"] if s.get("path") == "kern/gemm_kernel.py")
    assert guarded.startswith("not run on an NPU host (NPU910): a module nothing imports")
    assert "every use of it under `if HAS_TRITON:`" in guarded
    assert "verify them" in guarded and "no module of the project imports it" in guarded
    assert found["kern/copy_kernel.py"]["severity"] == "error"
    assert found["kern/mm_kernel.py"]["severity"] == "error"


EXT_INIT = """\
import platform

import torch

from .cpp import *

if torch.cuda.is_available() and platform.system() == "Linux":
    if torch.version.cuda:
        from .cuda import *
"""

CPP_INIT = """\
import torch


@torch.library.impl("mylib::unpack", "default")
def unpack(t, bits):
    return t
"""

CUDA_INIT = """\
import os

import torch
from torch.utils.cpp_extension import load

sources = ["unpack.cu", "gemm/gemm_cuda.cu"]
ext = load("my_cuda", sources=[os.path.join(os.path.dirname(__file__), s) for s in sources])


@torch.library.impl("mylib::unpack", ["CUDA"])
def unpack_cuda(t, bits):
    return ext.unpack(t, bits)
"""

KERNEL = """\
#include <torch/extension.h>
__global__ void unpack_kernel(int* x) { x[0] = %d; }
"""

# an extension loaded unconditionally: its sources stay errors
EAGER_INIT = """\
import os

from torch.utils.cpp_extension import load

ext = load("eager_cuda", sources=[os.path.join(os.path.dirname(__file__), "eager.cu")])
"""


def test_cuda_extension_loaded_only_behind_a_cuda_test_is_one_info(tmp_path: Path) -> None:
    report = migrate_json(write_project(tmp_path, {
        "pkg/__init__.py": "", "pkg/ext/__init__.py": EXT_INIT, "pkg/ext/cpp/__init__.py": CPP_INIT,
        "pkg/ext/cuda/__init__.py": CUDA_INIT, "pkg/ext/cuda/unpack.cu": KERNEL % 1,
        "pkg/ext/cuda/gemm/gemm_cuda.cu": KERNEL % 2,
        "pkg/eager/__init__.py": EAGER_INIT, "pkg/eager/eager.cu": KERNEL % 3, "pkg/user.py": "import pkg.eager\n",
    }))
    found = [f for f in report["findings"] if f["code"] == "NPU912"]
    # (a named scope since wave 20, round-19 AZ#21: the extension never builds on an NPU host)
    assert not [f for f in found if f["path"].startswith("pkg/ext/")]
    gated = [{"message": s["reason"]} for s in report["skipped"] if s.get("path") == "pkg/ext/cuda/gemm/gemm_cuda.cu"]
    assert len(gated) == 1 and gated[0]["message"].startswith("not run on an NPU host (NPU912): built and loaded only by ")
    assert "under `torch.version.cuda`, false on an NPU host" in gated[0]["message"]
    assert "a CUDA fast path" in gated[0]["message"] and "pkg/ext/cuda/unpack.cu" in gated[0]["message"]
    scoped = [s for s in report["skipped"] if s.get("path") == "pkg/ext/cuda/unpack.cu"]
    assert scoped and "reported once, at pkg/ext/cuda/gemm/gemm_cuda.cu" in scoped[0]["reason"]
    eager = [f for f in found if f["path"] == "pkg/eager/eager.cu"]
    assert eager and eager[0]["severity"] == "error"


SETUP = """\
import os

import torch
from setuptools import setup
from torch.utils.cpp_extension import BuildExtension, CppExtension, CUDA_HOME, CUDAExtension

extension = CppExtension
sources = ["csrc/ops.cpp"]
if (torch.cuda.is_available() and CUDA_HOME is not None) or os.getenv("FORCE_CUDA", "0") == "1":
    extension = CUDAExtension
    sources += ["csrc/ops_cuda.cu"]

setup(name="pkg", ext_modules=[extension("pkg._C", sources)], cmdclass={"build_ext": BuildExtension})
"""

# a CUDA build with no other branch: fails where there is no CUDA toolkit
SETUP_CUDA_ONLY = """\
from setuptools import setup
from torch.utils.cpp_extension import BuildExtension, CUDA_HOME, CUDAExtension

if CUDA_HOME is None:
    print("no CUDA")
ext = CUDAExtension("pkg._C", ["csrc/ops_cuda.cu"])
setup(name="pkg", ext_modules=[ext], cmdclass={"build_ext": BuildExtension})
"""


def test_setup_py_cuda_home_probe_with_a_cpp_build_is_info(tmp_path: Path) -> None:
    report = migrate_json(write_project(tmp_path / "a", {"setup.py": SETUP}))
    found = [f for f in report["findings"] if f["code"] == "NPU911" and f["path"] == "setup.py"]
    assert found and all(f["severity"] == "info" for f in found)
    assert "imports `CUDA_HOME` as a probe" in found[0]["message"]
    report = migrate_json(write_project(tmp_path / "b", {"setup.py": SETUP_CUDA_ONLY}))
    found = [f for f in report["findings"] if f["code"] == "NPU911" and f["path"] == "setup.py"]
    assert found and any(f["severity"] == "error" for f in found)


REFERENCE = """\
import torch
import triton
import triton.language as tl


@triton.jit
def fill_kernel(out_ptr, BLOCK: tl.constexpr):
    tl.store(out_ptr + tl.arange(0, BLOCK), 1)


def fill(out):
    fill_kernel[(1,)](out, BLOCK=16)
"""

SKIPPED_TEST = """\
import pytest
import torch

if not torch.cuda.is_available() or torch.cuda.get_device_capability() < (8, 9):
    pytest.skip("needs SM89", allow_module_level=True)

from .reference import fill


def test_fill():
    fill(torch.empty(16, device="cuda"))
"""

RUNNING_TEST = """\
import pytest
import torch

from .reference2 import fill


def test_fill():
    fill(torch.empty(16, device="cuda"))
"""


def test_helper_imported_only_after_module_level_skips_is_a_scope(tmp_path: Path) -> None:
    report = migrate_json(write_project(tmp_path, {
        "test/moe/__init__.py": "", "test/moe/reference.py": REFERENCE, "test/moe/test_moe.py": SKIPPED_TEST,
        "test/moe/reference2.py": REFERENCE + "\n\nSIZE = 16\n", "test/moe/test_other.py": RUNNING_TEST,
    }))
    found = _by_path(report, "NPU910")
    assert "test/moe/reference.py" not in found
    scoped = [s for s in report["skipped"] if s.get("path") == "test/moe/reference.py"]
    assert scoped and "imported only by test modules that skip at module level" in scoped[0]["reason"]
    assert "test/moe/test_moe.py:4" in scoped[0]["reason"]
    # imported by a test that runs on an NPU host: the error stays
    assert found["test/moe/reference2.py"]["severity"] == "error"


TRITON_GELU = """\
import torch
import triton
import triton.language as tl


@triton.jit
def gelu_kernel(x_ptr, BLOCK: tl.constexpr):
    tl.store(x_ptr + tl.arange(0, BLOCK), 0)


def gelu(x):
    gelu_kernel[(1,)](x, BLOCK=16)
    return x
"""

CONFIG = """\
class InferenceConfig:
    use_triton: bool = False
    triton_autotune: bool = False
"""

LAYER = """\
import torch

import mylib


class Layer:
    def __init__(self, config):
        self.config = config
        if mylib.HAS_TRITON and self.config.use_triton:
            from mylib.kernels.triton.gelu import gelu
            self.act = gelu
            if config.triton_autotune:
                self._triton_autotune()
        else:
            self.act = torch.nn.functional.gelu

    @staticmethod
    def _triton_autotune():
        from mylib.kernels.triton import gelu
        return gelu
"""

# the same package imported eagerly by another module: the errors stay
EAGER_LAYER = """\
from mylib.kernels.triton2.gelu import gelu


def act(x):
    return gelu(x)
"""


def test_triton_package_loaded_only_behind_an_opt_in_is_info(tmp_path: Path) -> None:
    report = migrate_json(write_project(tmp_path, {
        "mylib/__init__.py": "HAS_TRITON = False\n", "mylib/config.py": CONFIG, "mylib/layer.py": LAYER,
        "mylib/kernels/__init__.py": "",
        "mylib/kernels/triton/__init__.py": "from .gelu import gelu\n", "mylib/kernels/triton/gelu.py": TRITON_GELU,
        "mylib/kernels/triton2/__init__.py": "", "mylib/kernels/triton2/gelu.py": TRITON_GELU + "\n\nSIZE = 2\n",
        "mylib/eager.py": EAGER_LAYER,
    }))
    found = _by_path(report, "NPU910")
    lazy = found["mylib/kernels/triton/gelu.py"]
    assert lazy["severity"] == "info", lazy
    assert "opt-in" in lazy["message"] and "`use_triton` defaults to False" in lazy["message"]
    assert "imported unguarded at module level" not in lazy["message"]
    assert found["mylib/kernels/triton2/gelu.py"]["severity"] == "error"


VARARGS_TEST = """\
import logging
import sys

import pytest
import torch

import mylib

try:
    import triton
    import triton.language as tl

    _triton_available = mylib._is_triton_available()
except ImportError as e:
    logging.warning(f"Triton is not available: {e}")
    _triton_available = False

enable_tests = sys.version_info >= (3, 9) and _triton_available and torch.cuda.is_available()


@pytest.mark.skipif(not enable_tests, reason="needs triton")
def test_kernel():
    @triton.jit
    def add(x_ptr, BLOCK: tl.constexpr):
        tl.store(x_ptr + tl.arange(0, BLOCK), 1)

    x = torch.zeros(16, device="cuda")
    add[(1,)](x, BLOCK=16)
"""

# one test without the skip: it runs Triton on an NPU host that has Triton-Ascend, unguarded
UNSKIPPED_TEST = VARARGS_TEST + """

def test_other():
    assert triton.cdiv(4, 2) == 2
"""


def test_triton_tests_all_skipped_without_triton_are_info(tmp_path: Path) -> None:
    report = migrate_json(write_project(tmp_path, {
        "mylib/__init__.py": "def _is_triton_available():\n    return False\n",
        "tests/test_varargs.py": VARARGS_TEST, "tests/test_unskipped.py": UNSKIPPED_TEST,
    }))
    found = _by_path(report, "NPU910")
    skipped = found["tests/test_varargs.py"]
    assert skipped["severity"] == "info", skipped
    assert "used only in tests skipped unless `enable_tests`" in skipped["message"]
    assert "`_triton_available`" in skipped["message"]
    assert found["tests/test_unskipped.py"]["severity"] == "error"
