"""Round 29's capability rows (helper h138, issue #16): modules that only a lazy import behind a
compute-capability test loads (capflows29.py), each paired with the nearest true case that stays
reported."""

from __future__ import annotations

from .precision_helpers import findings_at, migrate_json, moot_lines, write_project

CUTEDSL = '''import cuda.bindings.driver as cuda
import cutlass
import cutlass.cute as cute


def run(x, out):
    cute.compile(x, cuda.CUstream(0))
    return out
'''

# DA#29: the only importer imports it under a multi-line `if (... and is_device_capability_family(100)):`
GATE_OPS = '''import torch

from vllm.platforms import current_platform


def output_gate(x):
    out = torch.empty_like(x)
    if (
        x.dtype == torch.bfloat16
        and current_platform.is_device_capability_family(100)
    ):
        from .cutedsl_ops import run

        run(x, out)
        return out
    return x * 2
'''

# the nearest true case: the same import under a dtype test alone (an NPU host takes it)
DTYPE_OPS = GATE_OPS.replace(
    """        x.dtype == torch.bfloat16
        and current_platform.is_device_capability_family(100)
""", """        x.dtype == torch.bfloat16
        and x.numel() > 0
""")

# ... and under a capability test true there (`not`), or an `or` with the NPU
NOT_OPS = GATE_OPS.replace("and current_platform.is_device_capability_family(100)",
                           "and not current_platform.is_device_capability_family(100)")
OR_NPU_OPS = GATE_OPS.replace("and current_platform.is_device_capability_family(100)",
                              "and (current_platform.is_device_capability_family(100) or current_platform.is_npu())")

LAYER = '''from .ops import output_gate


class Layer:
    def forward(self, x):
        return output_gate(x)
'''


def _cutedsl_finding(tmp_path, ops: str):
    report = migrate_json(write_project(tmp_path, {
        "pkg/__init__.py": "", "pkg/cutedsl_ops.py": CUTEDSL, "pkg/ops.py": ops, "pkg/layer.py": LAYER}))
    return findings_at(report, "pkg/cutedsl_ops.py", "NPU911"), moot_lines(report["skipped"], "NPU911", "pkg/cutedsl_ops.py")


def test_module_imported_only_under_multiline_capability_and_is_a_scope(tmp_path):
    """DA#29: attention_ops_cutedsl.py, loaded only by `from .attention_ops_cutedsl import run`
    under `if (dtype test and current_platform.is_device_capability_family(100)):`, is never
    imported on an NPU host (capability None): a named scope naming the gate."""
    found, scopes = _cutedsl_finding(tmp_path, GATE_OPS)
    assert not found
    assert 1 in scopes and "imported only where an NPU host does not go" in scopes[1]
    assert "is_device_capability" in scopes[1]


def test_module_imported_under_a_test_an_npu_host_passes_stays_reported(tmp_path):
    """The nearest true cases: the same lazy import under a dtype test alone, under `not
    is_device_capability_family(100)` (true there), or under a capability test `or` is_npu()."""
    for k, ops in enumerate((DTYPE_OPS, NOT_OPS, OR_NPU_OPS)):
        found, scopes = _cutedsl_finding(tmp_path / f"case{k}", ops)
        assert found and found[1]["severity"] == "error", ops
        assert 1 not in scopes


def test_module_imported_also_unguarded_stays_reported(tmp_path):
    """The nearest true case: a second importer loads the module at its top level."""
    report = migrate_json(write_project(tmp_path, {
        "pkg/__init__.py": "", "pkg/cutedsl_ops.py": CUTEDSL, "pkg/ops.py": GATE_OPS, "pkg/layer.py": LAYER,
        "pkg/eager.py": "from .cutedsl_ops import run\n\n\ndef go(x, out):\n    return run(x, out)\n"}))
    assert findings_at(report, "pkg/cutedsl_ops.py", "NPU911")[1]["severity"] == "error"


# DB#36: a local flag bound (over two names, one a parenthesized multi-line value) to a capability test
INDEXER = '''from vllm.platforms import current_platform


def make_indexer(topk_blocks, kv_dtype):
    is_cuda = current_platform.is_cuda()
    is_sm100 = is_cuda and current_platform.is_device_capability_family(100)
    use_msa = (
        is_sm100
        and topk_blocks == 16
        and kv_dtype in ("bf16", "fp8")
    )
    if use_msa:
        from ..nvidia.indexer_msa import MSAIndexer

        return MSAIndexer()
    return None
'''

MSA = '''from .ops import decode_score


class MSAIndexer:
    def forward(self, q, k):
        return decode_score(q, k)
'''

SCORE = '''import cutlass
import cutlass.cute as cute


def decode_score(q, k):
    return cute.compile(q, k)
'''


def _indexer_project(indexer: str) -> dict:
    return {"mm/__init__.py": "", "mm/common/__init__.py": "", "mm/nvidia/__init__.py": "",
            "mm/common/indexer.py": indexer, "mm/nvidia/indexer_msa.py": MSA,
            "mm/nvidia/ops/__init__.py": "from .index_decode_score import decode_score\n",
            "mm/nvidia/ops/index_decode_score.py": SCORE}


def test_package_imported_only_under_a_local_capability_flag_is_a_scope(tmp_path):
    """DB#36: nvidia/ops (module-level `import cutlass`) is loaded only through indexer_msa, which
    the common indexer imports only under `if use_msa:`, `use_msa = (is_sm100 and ...)`,
    `is_sm100 = is_cuda and is_device_capability_family(100)`: false on an NPU host."""
    report = migrate_json(write_project(tmp_path, _indexer_project(INDEXER)))
    assert not findings_at(report, "mm/nvidia/ops/index_decode_score.py", "NPU911")
    scopes = moot_lines(report["skipped"], "NPU911", "mm/nvidia/ops/index_decode_score.py")
    assert 1 in scopes and "imported only where an NPU host does not go" in scopes[1]


def test_package_imported_under_a_local_flag_an_npu_host_may_set_stays_reported(tmp_path):
    """The nearest true case: the same local flag without the capability test (`is_sm100 =
    topk_blocks > 0`): an NPU host may take the branch, the module stays an error."""
    indexer = INDEXER.replace("is_cuda and current_platform.is_device_capability_family(100)", "topk_blocks > 0")
    report = migrate_json(write_project(tmp_path, _indexer_project(indexer)))
    found = findings_at(report, "mm/nvidia/ops/index_decode_score.py", "NPU911")
    assert found and found[1]["severity"] == "error"
