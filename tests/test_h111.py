"""Issue #16, precision wave 25 (round-25 audit BR#2, BR#4, BR#8): the CUDA sources of one CMake
build target reported once (npu_migrate/cmakefolds25.py)."""

from __future__ import annotations

from pathlib import Path

from npu_migrate import cmakefolds25

from .precision_helpers import migrate_json, write_project

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
