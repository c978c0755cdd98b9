"""A project's compiled ops in namespaces other than `_C` (vLLM's `torch.ops._C_cache_ops.*`,
`torch.ops._moe_C.*`) count as its compiled ops for optests.py and cudaonly21.py (round-21 audit
BH#6: a benchmark timing `reshape_and_cache_flash`, a `_C_cache_ops` op, kept its CUDA-graph error)."""

from __future__ import annotations

from npu_migrate.optests import compiled_op

from .precision_helpers import migrate_json, write_project
from .test_h90 import BENCHMARK, CUSTOM_OPS, KERNEL_SOURCE


def test_compiled_op_namespaces():
    assert compiled_op("torch.ops._C.fused_norm") == "_C.fused_norm"
    assert compiled_op("torch.ops._C_cache_ops.reshape_and_cache") == "_C_cache_ops.reshape_and_cache"
    assert compiled_op("torch.ops._moe_C.topk_softmax") == "_moe_C.topk_softmax"
    for other in ("torch.ops.aten.mm", "torch.ops._rocm_C.paged_attention", "torch.ops.mylib.op",
                  "torch.ops._C", "ops._C.fused_norm", "torch.ops._Cx.op"):
        assert compiled_op(other) is None, other


def _scopes(tmp_path, namespace):
    """The benchmark's scopes when `cache_insert` (what its portable-looking baseline calls) wraps
    an op of `namespace`."""
    ops = CUSTOM_OPS.replace("torch.ops._C.cache_insert", f"torch.ops.{namespace}.cache_insert")
    report = migrate_json(write_project(tmp_path, {
        "proj/__init__.py": "",
        "proj/_custom_ops.py": ops,
        "csrc/fused_norm.cu": KERNEL_SOURCE,
        "benchmarks/benchmark_fused_norm.py": BENCHMARK.format(extra=""),
    }))
    return [s for s in report["skipped"] if s["path"] == "benchmarks/benchmark_fused_norm.py"]


def test_a_benchmark_of_cache_ops_fails_at_the_warmup_too(tmp_path):
    (scope,) = _scopes(tmp_path, "_C_cache_ops")
    assert scope["reason"].startswith("not run on an NPU host (NPU202)")


def test_an_op_of_another_library_is_no_compiled_op_of_the_project(tmp_path):
    assert _scopes(tmp_path, "mylib") == []
