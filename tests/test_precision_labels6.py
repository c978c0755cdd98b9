"""Round-10 audits (issue #16): labels and text files that only name CUDA (labels6)."""

from __future__ import annotations

from tests.precision_helpers import migrate_json, write_project


def _findings(report: dict, path: str, code: str) -> list[dict]:
    return [f for f in report["findings"] if f["path"] == path and f["code"] == code and not f["fixable"]]


def _scopes(report: dict, path: str) -> list[str]:
    return [s["reason"] for s in report["skipped"] if s.get("path") == path]


HARNESS = '''\
import torch
from myproj.triton_utils import triton


@triton.testing.perf_report(
    triton.testing.Benchmark(x_names=["n"], x_vals=[1, 2], line_arg="provider",
                             line_vals=["a"], line_names=["A"], plot_name="p", args={}))
def benchmark(n, provider):
    x = torch.ones(n, device="cuda")
    return triton.testing.do_bench(lambda: x + 1)
'''

KERNEL = '''\
import triton
import triton.language as tl


@triton.jit
def add(x_ptr, n: tl.constexpr):
    pass


@triton.testing.perf_report(
    triton.testing.Benchmark(x_names=["n"], x_vals=[1, 2], line_arg="provider",
                             line_vals=["a"], line_names=["A"], plot_name="p", args={}))
def benchmark(n, provider):
    return triton.testing.do_bench(lambda: add[(1,)](None, n))
'''


def test_triton_testing_harness_only_is_a_scope_kernel_stays(tmp_path):
    root = write_project(tmp_path, {"bench.py": HARNESS, "kernel_bench.py": KERNEL,
                                    "myproj/__init__.py": "", "myproj/triton_utils.py": "import triton\n"})
    report = migrate_json(root)
    assert not _findings(report, "bench.py", "NPU910")
    assert any("NPU910" in r and "triton.testing.perf_report" in r for r in _scopes(report, "bench.py"))
    kept = _findings(report, "kernel_bench.py", "NPU910")
    assert kept and kept[0]["severity"] != "info"
