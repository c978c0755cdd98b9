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


REGISTRY = '''import importlib

_LAZY = {"attn_res": "vllm.models.other.nvidia.ops.attn_res", "triton": "aiter.ops.triton"}


def load(key):
    return importlib.import_module(_LAZY[key])
'''


def test_package_named_only_by_strings_of_other_ops_packages_is_a_scope(tmp_path):
    """DB#36: strings naming other `ops` packages (`"vllm.models.other.nvidia.ops.attn_res"`,
    `"aiter.ops.triton"`), even in a file that imports by name, do not name `mm/nvidia/ops`."""
    report = migrate_json(write_project(tmp_path, {**_indexer_project(INDEXER), "mm/registry.py": REGISTRY}))
    assert not findings_at(report, "mm/nvidia/ops/index_decode_score.py", "NPU911")


def test_package_named_by_its_own_dotted_path_stays_reported(tmp_path):
    """The nearest true case: a string naming `mm.nvidia.ops` itself, imported by name, may load it
    on an NPU host: the module-level `import cutlass` stays an error."""
    registry = REGISTRY.replace("vllm.models.other.nvidia.ops.attn_res", "mm.nvidia.ops")
    report = migrate_json(write_project(tmp_path, {**_indexer_project(INDEXER), "mm/registry.py": registry}))
    found = findings_at(report, "mm/nvidia/ops/index_decode_score.py", "NPU911")
    assert found and found[1]["severity"] == "error"


def test_package_imported_under_a_local_flag_an_npu_host_may_set_stays_reported(tmp_path):
    """The nearest true case: the same local flag without the capability test (`is_sm100 =
    topk_blocks > 0`): an NPU host may take the branch, the module stays an error."""
    indexer = INDEXER.replace("is_cuda and current_platform.is_device_capability_family(100)", "topk_blocks > 0")
    report = migrate_json(write_project(tmp_path, _indexer_project(indexer)))
    found = findings_at(report, "mm/nvidia/ops/index_decode_score.py", "NPU911")
    assert found and found[1]["severity"] == "error"


# DA#21: a lazy CUDA-only import in a kernel builder only a capability-gated layer reaches, whose
# name another module holds as a string that cannot look it up (a frame's code name)
GEMV = '''def _build():
    import cutlass
    import cutlass.cute as cute

    return cute, cutlass


_CACHE = {}


def _compile(key):
    if key not in _CACHE:
        _CACHE[key] = _build()
    return _CACHE[key]


def gate_up(x):
    return _compile(x.shape)
'''

MOE = '''from . import gemv


def fused_moe(x):
    return gemv.gate_up(x)
'''

MODEL = '''from vllm.platforms import current_platform

from .ops.moe import fused_moe


def _fast_kernels():
    if not current_platform.is_device_capability_family(100):
        return False
    return True


class Block:
    def __init__(self):
        self.use_fast = _fast_kernels()

    def forward(self, x):
        if not self.use_fast:
            return x
        return fused_moe(x)
'''

FRAMES = '''import sys


def compiling_frame():
    frame = sys._getframe()
    while frame.f_back:
        frame = frame.f_back
        if frame.f_code.co_name == "_compile":
            return frame
    return None
'''

LOOKUP = '''import importlib


def warm(key):
    module = importlib.import_module("pkg.ops.gemv")
    return getattr(module, "_compile")(key)
'''


def _gemv_project(other: str) -> dict:
    return {"pkg/__init__.py": "", "pkg/ops/__init__.py": "", "pkg/ops/gemv.py": GEMV, "pkg/ops/moe.py": MOE,
            "pkg/model.py": MODEL, "pkg/frames.py": other}


def test_builder_named_only_by_a_string_that_cannot_look_it_up_is_a_scope(tmp_path):
    """DA#21: `_build` (lazy `import cutlass`) is reached through `_compile` and `gemv.gate_up` only
    from a layer whose flag is False on an NPU host; `"_compile"` in another module that never names
    `gemv` (a frame's code name) is no lookup of it."""
    report = migrate_json(write_project(tmp_path, _gemv_project(FRAMES)))
    assert not findings_at(report, "pkg/ops/gemv.py", "NPU911")
    assert 2 in moot_lines(report["skipped"], "NPU911", "pkg/ops/gemv.py")


def test_builder_looked_up_by_name_through_its_module_stays_reported(tmp_path):
    """The nearest true case: a module that imports `pkg.ops.gemv` by name and looks `_compile` up
    with getattr may run it on an NPU host: the lazy import stays an error."""
    report = migrate_json(write_project(tmp_path, _gemv_project(LOOKUP)))
    found = findings_at(report, "pkg/ops/gemv.py", "NPU911")
    assert found and found[2]["severity"] == "error"
