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


BENCH_UTILS = '''import torch


def do_bench_graph(fn, rep: int = 20) -> float:
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        fn()
    g.replay()
    return float(rep)
'''

GRAPHS = '''import torch


def capture_graph(fn):
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        fn()
    return g
'''

BENCH_TEST = '''import torch

from pkg.graphs import capture_graph
from pkg.utils import do_bench_graph


def test_speed():
    assert do_bench_graph(lambda: torch.ones(2)) > 0
    assert capture_graph(lambda: torch.ones(2)) is not None
'''

BENCH_SCRIPT = '''import torch

from pkg.utils import do_bench_graph


def main():
    print(do_bench_graph(lambda: torch.ones(2)))


if __name__ == "__main__":
    main()
'''


def _graph_findings(report, path="pkg/utils.py"):
    return [f for f in report["findings"] if f["code"] == "NPU202" and f["path"] == path]


def test_public_benchmark_helper_only_a_test_and_a_benchmark_call_is_info_naming_them(tmp_path):
    """IA#17 (P2): xformers' `do_bench_cudagraph` (xformers/utils.py), a public benchmarking helper
    only tests/test_tree_attention.py and the package's own benchmark call: info naming them."""
    root = write_project(tmp_path, {"pkg/__init__.py": "", "pkg/utils.py": BENCH_UTILS, "pkg/graphs.py": GRAPHS,
                                    "tests/test_speed.py": BENCH_TEST,
                                    "pkg/benchmarks/benchmark_graph.py": BENCH_SCRIPT})
    report = migrate_json(root)
    bench = _graph_findings(report)
    assert bench and all(f["severity"] == "info" for f in bench)
    assert "reached on an NPU host only from tests/benchmarks" in bench[0]["message"]
    assert "`do_bench_graph`" in bench[0]["message"]
    # nearest true case: a public helper that is no benchmark helper, with the same only caller, stays
    other = _graph_findings(report, "pkg/graphs.py")
    assert other and all(f["severity"] == "error" for f in other)


def test_public_benchmark_helper_library_code_also_calls_stays(tmp_path):
    """Nearest true case: the same helper also called from library code an NPU host runs."""
    user = "from pkg.utils import do_bench_graph\\n\\n\\ndef autotune(fn):\\n    return do_bench_graph(fn)\\n"
    root = write_project(tmp_path, {"pkg/__init__.py": "", "pkg/utils.py": BENCH_UTILS, "pkg/graphs.py": GRAPHS,
                                    "pkg/tune.py": user, "tests/test_speed.py": BENCH_TEST})
    bench = _graph_findings(migrate_json(root))
    assert bench and all(f["severity"] == "error" for f in bench)
