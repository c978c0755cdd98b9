"""Issue #16, precision wave 25, helper h111: the CUDA sources of one CMake build target reported
once (npu_migrate/cmakefolds25.py; round-25 audit BR#2, BR#4, BR#8), and a CUDA JIT kernel's test
whose reference helper and module-level dtype use FP8 folded into the kernel's NPU912
(npu_migrate/oracles25.py with jitfolds23.py; BT#13), and a module-level kernel loader reported
once along an import chain (npu_migrate/loaderfolds25.py; BR#30), and an info import the same file
reports again as an error (npu_migrate/importfolds25.py; BR#17). Each false case is paired with
the nearest true case that stays reported."""

from __future__ import annotations

from pathlib import Path

from npu_migrate import cmakefolds25

from .precision_helpers import migrate_json, write_project
from .test_h100 import _findings, _kernel_finding
from .test_h100 import _project as _jit_project

KERNEL = """\
#include <torch/extension.h>

__global__ void {name}_kernel(float* x, int n) {{
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) x[i] *= 2.0f;
}}

void {name}(torch::Tensor x) {{
  int n = x.numel();
  {name}_kernel<<<(n + 255) / 256, 256>>>(x.data_ptr<float>(), n);
}}
"""

SETUP = """\
import os

import torch
from setuptools import setup

TARGET_DEVICE = os.getenv("TARGET_DEVICE")
if TARGET_DEVICE is None:
    if torch.version.cuda is not None:
        TARGET_DEVICE = "cuda"
    else:
        TARGET_DEVICE = "cpu"

setup(name="pkg")
"""

CMAKE = """\
cmake_minimum_required(VERSION 3.26)
project(pkg LANGUAGES CXX)

if (NOT TARGET_DEVICE STREQUAL "cuda")
    return()
endif()

set(PKG_EXT_SRC
  "csrc/bindings.cpp"
  "csrc/alpha.cu"
  "csrc/beta.cu")

if(WITH_EXTRA)
  set(EXTRA_SRC "csrc/sub/gamma.cu")
  list(APPEND PKG_EXT_SRC "${EXTRA_SRC}")
else()
  set(EXTRA_SRC "csrc/delta.cu")
  list(APPEND PKG_EXT_SRC ${EXTRA_SRC})
endif()

define_extension_target(
  _pkg_C
  DESTINATION pkg
  LANGUAGE CUDA
  SOURCES ${PKG_EXT_SRC}
  USE_SABI 3)

set(MOE_SRC "csrc/moe_a.cu" "csrc/moe_b.cu" "csrc/shared.cu")
add_library(_pkg_moe SHARED ${MOE_SRC})
add_library(_pkg_other SHARED csrc/shared.cu csrc/other.cu)
"""

SOURCES = ["alpha", "beta", "sub/gamma", "delta", "moe_a", "moe_b", "shared", "other", "lonely"]


def _project(tmp_path: Path) -> Path:
    files = {"setup.py": SETUP, "CMakeLists.txt": CMAKE}
    for name in SOURCES:
        files[f"csrc/{name}.cu"] = KERNEL.format(name=name.replace("/", "_"))
    return write_project(tmp_path, files)


def _npu912(report: dict) -> dict[str, dict]:
    return {f["path"]: f for f in report["findings"] if f["code"] == "NPU912"}


def test_one_note_per_cmake_target(tmp_path: Path) -> None:
    """BR#2, BR#4, BR#8 (vLLM's `csrc/*.cu`, one note each): the sources a CMake target lists
    (`set`, `list(APPEND)` in both branches of an `if`, `${VAR}` expanded) fold into the first
    listed source's note, which names the target and each other file with its CMakeLists.txt line."""
    found = _npu912(migrate_json(_project(tmp_path)))
    kept = found["csrc/alpha.cu"]
    assert kept["severity"] == "info"
    assert "the CMake target `_pkg_C` (CMakeLists.txt:21)" in kept["message"]
    assert "`csrc/beta.cu` (CMakeLists.txt:11)" in kept["message"]
    assert "`csrc/sub/gamma.cu` (CMakeLists.txt:14)" in kept["message"]
    assert "`csrc/delta.cu` (CMakeLists.txt:17)" in kept["message"]
    for gone in ("csrc/beta.cu", "csrc/sub/gamma.cu", "csrc/delta.cu", "csrc/moe_b.cu"):
        assert gone not in found
    moe = found["csrc/moe_a.cu"]
    assert "the CMake target `_pkg_moe`" in moe["message"] and "`csrc/moe_b.cu` (CMakeLists.txt:28)" in moe["message"]


def test_sources_no_target_or_two_targets_list_keep_their_notes(tmp_path: Path) -> None:
    """The nearest true cases: a `.cu` no target lists, one that two targets list, and the only
    `.cu` of a target keep a note each (per file, as before)."""
    found = _npu912(migrate_json(_project(tmp_path)))
    for kept in ("csrc/lonely.cu", "csrc/shared.cu", "csrc/other.cu"):
        assert kept in found and found[kept]["severity"] == "info"
        assert "CMake target" not in found[kept]["message"]
    assert "shared.cu" not in found["csrc/moe_a.cu"]["message"]


def test_ungated_cmake_sources_keep_their_errors(tmp_path: Path) -> None:
    """An error is never folded: without the CUDA gate each source keeps its own error."""
    files = {"setup.py": SETUP, "CMakeLists.txt": CMAKE.replace('if (NOT TARGET_DEVICE STREQUAL "cuda")\n    return()\nendif()\n', "")}
    for name in SOURCES:
        files[f"csrc/{name}.cu"] = KERNEL.format(name=name.replace("/", "_"))
    found = _npu912(migrate_json(write_project(tmp_path, files)))
    assert found["csrc/alpha.cu"]["severity"] == "error" and found["csrc/beta.cu"]["severity"] == "error"
    assert "CMake target" not in found["csrc/alpha.cu"]["message"]


def test_cmake_targets_reader() -> None:
    """Comments, quoted lists with `;`, GLOB against the run's files, a keyword ending SOURCES."""
    text = """\
# set(IGNORED "x.cu")
set(A "a.cu;b.cu")  # trailing comment
file(GLOB GEN "gen/*.cu")
list(APPEND A ${GEN})
define_extension_target(t SOURCES ${A} ${CMAKE_CURRENT_SOURCE_DIR}/c.cu LANGUAGE CUDA)
"""
    found = cmakefolds25.targets(text, ["gen/g1.cu", "gen/g2.cu", "gen/x.h"])
    line, sources = found["t"]
    assert line == 5
    assert [s for s, _ in sources] == ["a.cu", "b.cu", "gen/g1.cu", "gen/g2.cu", "c.cu"]


# ----------------------------------------------------------------------------- BT#13: a kernel test's reference helper

KERNEL_TEST = """\
import pytest
import torch

from proj.kern.quant import quant_fp8

try:
    from proj.platform import is_hip

    _is_hip = is_hip()
except ImportError:
    _is_hip = False

FP8 = torch.float8_e4m3fnuz if _is_hip else torch.float8_e4m3fn


def reference_quant(x, scale):
    info = torch.finfo(torch.float8_e4m3fn)
    y = (x.float() / scale).clamp(info.min, info.max)
    return y.to(torch.float8_e4m3fn)


@pytest.mark.parametrize("n", [16, 64])
def test_quant_matches_reference(n):
    x = torch.rand(n, 128, dtype=torch.float16)
    out = torch.empty_like(x, dtype=FP8)
    scale = torch.ones(1)
    quant_fp8(x, out, scale)
    torch.testing.assert_close(out.float(), reference_quant(x, scale).float())
{extra}"""

TEST_PATH = "proj/kern/tests/test_quant_fp8.py"


def test_reference_helper_and_dtype_of_a_jit_kernel_test_fold_into_its_source(tmp_path: Path) -> None:
    """BT#13 (SGLang's jit_kernel test_per_tensor_quant_fp8.py): the pure-torch reference the test
    compares the kernel's output with, and the module-level FP8 dtype of the output buffer, exist
    only to check that kernel: folded into its NPU912, which names the file and lines."""
    report = _jit_project(tmp_path, files={TEST_PATH: KERNEL_TEST.format(extra="")})
    assert _findings(report, TEST_PATH, "NPU913") == []
    target = _kernel_finding(report, "proj/kern/csrc/gemm/quant_fp8.cuh")
    assert target["severity"] == "error"
    assert f"(NPU913) in `{TEST_PATH}` (lines 13, 19)" in target["message"]


def test_reference_helper_other_code_calls_keeps_the_finding(tmp_path: Path) -> None:
    """The nearest true case: a non-test function also calls the FP8 helper (FP8 work of the
    file's own, not only the kernel's oracle): the finding stays."""
    extra = "\n\ndef export(x):\n    return reference_quant(x, 2.0)\n"
    report = _jit_project(tmp_path, files={TEST_PATH: KERNEL_TEST.format(extra=extra)})
    found = _findings(report, TEST_PATH, "NPU913")
    assert found and all(f["severity"] == "error" for f in found)
    assert "test_quant_fp8" not in _kernel_finding(report, "proj/kern/csrc/gemm/quant_fp8.cuh")["message"]


def test_reference_helper_in_a_test_without_the_kernel_keeps_the_finding(tmp_path: Path) -> None:
    """A test that calls the FP8 helper but no kernel is FP8 work of its own: the finding stays."""
    extra = "\n\ndef test_reference_alone():\n    reference_quant(torch.ones(4), 1.0)\n"
    report = _jit_project(tmp_path, files={TEST_PATH: KERNEL_TEST.format(extra=extra)})
    found = _findings(report, TEST_PATH, "NPU913")
    assert found and all(f["severity"] == "error" for f in found)


# ----------------------------------------------------------------------------- BR#30: one module-level loader per import chain

LOADER = """\
class KernelLoader:
    REGISTRY = []

    def load(self):
        usable = [ext for ext in self.REGISTRY if ext().is_available()]
        assert len(usable) != 0, "no usable kernel"
        return usable[0]().load()


class FusedOpsLoader(KernelLoader):
    REGISTRY = [FusedOpsCudaExtension]
"""

BASE_MODEL = """\
import torch

from proj.kernels.loader import FusedOpsLoader

fused_ops = FusedOpsLoader().load()


class BaseMLP(torch.nn.Module):
    def forward(self, x):
        return fused_ops.silu_and_mul(x)
"""

DERIVED_MODEL = """\
import torch

{importing}
from proj.kernels.loader import FusedOpsLoader

fused_ops = FusedOpsLoader().load()


class DerivedMLP(torch.nn.Module):
    def forward(self, x):
        return fused_ops.rms_layernorm(x)
"""


def _loader_project(tmp_path: Path, importing: str) -> dict:
    return migrate_json(write_project(tmp_path, {
        "proj/__init__.py": "",
        "proj/kernels/__init__.py": "",
        "proj/kernels/loader.py": LOADER,
        "proj/models/__init__.py": "",
        "proj/models/base.py": BASE_MODEL,
        "proj/models/derived.py": DERIVED_MODEL.format(importing=importing),
    }))


def _loader_findings(report: dict, path: str) -> list[dict]:
    return [f for f in report["findings"] if f["path"] == path and f["code"] == "NPU911" and "().load()" in f["message"]]


def test_module_level_loader_an_imported_module_runs_first_folds(tmp_path: Path) -> None:
    """BR#30 (ColossalAI's nopadding_baichuan.py imports nopadding_llama.py, both running
    `InferenceOpsLoader().load()` at module level): the importer's note folds into the imported
    module's, which names it, its line and the import."""
    report = _loader_project(tmp_path, "from proj.models.base import BaseMLP")
    assert _loader_findings(report, "proj/models/derived.py") == []
    [kept] = _loader_findings(report, "proj/models/base.py")
    assert kept["severity"] == "error"
    assert ("also `proj/models/derived.py` (line 6), whose import of `proj.models.base` (line 3) loads this module "
            "first") in kept["message"]


def test_module_level_loader_with_a_guarded_import_keeps_its_finding(tmp_path: Path) -> None:
    """The nearest true cases: an import in a `try` (it may not run first), and a module importing
    nothing that runs the loader: both modules keep their error."""
    guarded = "try:\n    from proj.models.base import BaseMLP\nexcept ImportError:\n    BaseMLP = None"
    for importing in (guarded, "import os"):
        report = _loader_project(tmp_path / importing[:3].strip(), importing)
        [own] = _loader_findings(report, "proj/models/derived.py")
        assert own["severity"] == "error" and "also" not in own["message"]
        [base] = _loader_findings(report, "proj/models/base.py")
        assert "derived" not in base["message"]


# ----------------------------------------------------------------------------- BR#17: one CUDA-only import, one finding per file

QUANT = """\
import torch


def quant_raw(x, group_size, scale_ue8m0=False):
    x_s = x.abs().amax(-1)
    if scale_ue8m0:
        from deep_gemm import transform_layout

        x_s = transform_layout(x_s, group_size)
    return x, x_s


def quant_fused(x, group_size):
    from deep_gemm import {name}

    return {name}(x, group_size)
"""

QUANT_USER = """\
from proj.quant import quant_fused, quant_raw


def run(x):
    return quant_raw(x, 128), quant_fused(x, 128)
"""


def _quant_project(tmp_path: Path, name: str) -> list[dict]:
    report = migrate_json(write_project(tmp_path, {
        "proj/__init__.py": "", "proj/quant.py": QUANT.format(name=name), "proj/user.py": QUANT_USER}))
    return [f for f in report["findings"] if f["path"] == "proj/quant.py" and f["code"] == "NPU911"]


def test_info_import_the_file_reports_again_as_an_error_folds(tmp_path: Path) -> None:
    """BR#17 (SGLang's fp8_kernel.py: `from deep_gemm import transform_sf_into_required_layout`
    under a parameter no call sets, info, and the same import in another function, an error):
    the info folds into the error, which names its line and why it was info."""
    [kept] = _quant_project(tmp_path, "transform_layout")
    assert kept["severity"] == "error" and kept["line"] == 14
    assert "also line 7, the same import of `transform_layout` from `deep_gemm` as line 14 (under a parameter" \
        in kept["message"]


def test_info_import_of_another_name_keeps_its_finding(tmp_path: Path) -> None:
    """The nearest true case: the other function imports another name of the package: both stay."""
    found = {f["line"]: f for f in _quant_project(tmp_path, "fused_layout")}
    assert found[7]["severity"] == "info" and found[14]["severity"] == "error"
    assert "also line 7" not in found[14]["message"]
