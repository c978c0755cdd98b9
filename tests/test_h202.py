"""Round 34's rows on vLLM code vllm-ascend replaces or never reaches, and two repeats (helper h202,
issue #16): each false or redundant shape paired with the nearest true case that stays reported."""

from __future__ import annotations

from .precision_helpers import migrate_json, write_project

LONE_HEADER = """\
#pragma once

__device__ inline float scaled_fp8(float x) { return 448.0f * x; }
"""


def _lone_header_project(tmp_path, extra: dict | None = None):
    from .test_h111 import CMAKE, KERNEL, SETUP, SOURCES

    files = {"setup.py": SETUP, "CMakeLists.txt": CMAKE}
    for name in SOURCES:
        files[f"csrc/{name}.cu"] = KERNEL.format(name=name.replace("/", "_"))
    for name in ("alpha", "beta"):
        files[f"csrc/{name}.cu"] = '#include "quant/nvidia/quant_utils.cuh"\n' + files[f"csrc/{name}.cu"]
    files["csrc/quant/nvidia/quant_utils.cuh"] = LONE_HEADER
    files.update(extra or {})
    return write_project(tmp_path, files)


def _npu912(report):
    return {f["path"]: f for f in report["findings"] if f["code"] == "NPU912"}


def test_lone_header_in_a_subfolder_only_one_targets_sources_include_folds_into_its_note(tmp_path):
    """IA#27 (REDUNDANT): vLLM's csrc/quantization/w8a8/fp8/nvidia/quant_utils.cuh, the only header of
    its folder, is included only by sources the CMake target's note names: it folds into that note."""
    found = _npu912(migrate_json(_lone_header_project(tmp_path)))
    assert "csrc/quant/nvidia/quant_utils.cuh" not in found
    kept = found["csrc/alpha.cu"]
    assert "the CMake target `_pkg_C`" in kept["message"]
    assert ("the CUDA header `csrc/quant/nvidia/quant_utils.cuh`, included only through this target's "
            "sources: `csrc/alpha.cu`, `csrc/beta.cu`") in kept["message"]


def test_lone_header_a_cpu_source_also_includes_keeps_its_note(tmp_path):
    """Nearest true case: a .cpp no target note names includes it too: its own note stays."""
    cpu = {"csrc/cpu/ops.cpp": '#include "../quant/nvidia/quant_utils.cuh"\nint cpu_op() { return 0; }\n'}
    found = _npu912(migrate_json(_lone_header_project(tmp_path, cpu)))
    assert found["csrc/quant/nvidia/quant_utils.cuh"]["severity"] == "info"
    assert "quant_utils.cuh" not in found["csrc/alpha.cu"]["message"]
