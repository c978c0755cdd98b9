"""Round 34's selectors, backends and capability gates in other files (audit IC, IB, ID; helper
h205, issue #16): each false shape paired with the nearest true case that must stay reported."""

from __future__ import annotations

from .precision_helpers import finding_places as _places
from .precision_helpers import migrate_json, write_project
from .precision_helpers import scope_reasons as _scopes

# ----------------------------------------------------------------------------- IC#28: forward_oot takes the torch path
CUSTOM_OP = '''class CustomOp:
    def forward(self, *args, **kwargs):
        return self.dispatch_forward()(*args, **kwargs)

    def forward_native(self, *args, **kwargs):
        raise NotImplementedError

    def forward_oot(self, *args, **kwargs):
        return self.forward_native(*args, **kwargs)
'''

TRITON_UTILS = '''try:
    import triton
    import triton.language as tl

    HAS_TRITON = True
except ImportError:
    triton = tl = None
    HAS_TRITON = False
'''

NORM = '''import torch

from proj.custom_op import CustomOp
from proj.triton_utils import tl, triton


@triton.jit
def _norm_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=offs < n), mask=offs < n)


def norm_triton(x, out):
    _norm_kernel[(1,)](x, out, x.numel(), BLOCK=1024)


class FusedNorm(CustomOp):
    def forward_native(self, x):
        return x * 2.0

    def forward_cuda(self, x):
        out = torch.empty_like(x)
        norm_triton(x, out)
        return out

    def forward_xpu(self, x):
        return self.forward_cuda(x)

    def forward_oot(self, x):
        return {oot}(x)


def build_norm():
    return FusedNorm()
'''

NORM_TEST = '''import pytest
import torch

from proj.layers.{mod} import norm_triton
from proj.platforms import current_platform

requires_accelerator = pytest.mark.skipif(current_platform.is_cpu(), reason="needs an accelerator")


@requires_accelerator
def test_kernel():
    x = torch.randn(8, device="cuda")
    out = torch.empty_like(x)
    norm_triton(x, out)
'''

PLATFORMS = '''class _Platform:
    def is_cpu(self):
        return False


current_platform = _Platform()
'''

MODEL = '''from proj.layers.{mod} import build_norm


class Model:
    def __init__(self):
        self.norm = build_norm()
'''


def test_kernel_of_a_custom_ops_cuda_method_whose_forward_oot_takes_the_native_path(tmp_path):
    """IC#28: a Triton kernel launched by a helper that only `FusedNorm.forward_cuda` (and
    `forward_xpu` through it) calls in the library, the class's `forward_oot` returning
    `forward_native`, and a test an NPU host runs: the library never reaches it there, so the
    kernel is info naming the test (P2). The nearest true case, the same op whose `forward_oot`
    returns `self.forward_cuda`, keeps its error: an NPU host runs the kernel."""
    files = {
        "proj/__init__.py": "",
        "proj/custom_op.py": CUSTOM_OP,
        "proj/platforms.py": PLATFORMS,
        "proj/triton_utils.py": TRITON_UTILS,
        "proj/layers/__init__.py": "",
        "proj/layers/norm.py": NORM.format(oot="self.forward_native"),
        "proj/layers/cuda_norm.py": NORM.format(oot="self.forward_cuda"),
        "proj/models/__init__.py": "",
        "proj/models/a.py": MODEL.format(mod="norm"),
        "proj/models/b.py": MODEL.format(mod="cuda_norm"),
        "tests/test_norm.py": NORM_TEST.format(mod="norm"),
        "tests/test_cuda_norm.py": NORM_TEST.format(mod="cuda_norm"),
    }
    report = migrate_json(write_project(tmp_path, files))
    false = _places(report, "proj/layers/norm.py", "NPU910")[7]
    assert false["severity"] == "info"
    assert "reached on an NPU host only from tests/benchmarks (tests/test_norm.py:14)" in false["message"]
    assert "`FusedNorm.forward_cuda`, a platform-dispatched op" in false["message"]
    true = _places(report, "proj/layers/cuda_norm.py", "NPU910")[7]
    assert true["severity"] == "error"


# ----------------------------------------------------------------------------- IB#21: a kept `.is_cuda` in the caller
SAMPLER = '''import torch

from proj.triton_utils import tl, triton


@triton.jit
def _row_stats_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=offs < n), mask=offs < n)


def sample_row_stats(logits):
    out = torch.empty_like(logits)
    _row_stats_kernel[(1,)](logits, out, logits.numel(), BLOCK=1024)
    return out


def sample_row_stats_reference(logits):
    return logits.float().softmax(-1)
'''

DIFFUSION = '''from proj.models.{mod} import sample_row_stats, sample_row_stats_reference


class Sampler:
    def sample(self, tile_logits, use_fused):
        if {test}:
            stats = sample_row_stats(tile_logits)
        else:
            stats = sample_row_stats_reference(tile_logits)
        return stats
'''

SAMPLER_TEST = '''import pytest
import torch

from proj.models.{mod} import sample_row_stats

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="the fused kernel needs a GPU")


def test_stats():
    logits = torch.randn(4, 16, device="cuda")
    sample_row_stats(logits)
'''


def test_kernel_behind_a_kept_is_cuda_check_and_a_test_an_npu_host_runs(tmp_path):
    """IB#21: the library launches the Triton kernel only under `if tile_logits.is_cuda:`, a check
    the engine keeps meaning CUDA (NPU110, a named scope "runs as written"), so an NPU host takes the
    torch reference; a test an NPU host runs (`torch.cuda.is_available()` rewritten) also calls it.
    The NPU110 had become a scope before testcallers27's walk, which then read the check as unknown:
    now it is False there and the kernel is info naming the test (P2). The nearest true case, the
    same caller choosing by a parameter (`if use_fused:`), keeps its error."""
    files = {
        "proj/__init__.py": "",
        "proj/triton_utils.py": TRITON_UTILS,
        "proj/models/__init__.py": "",
        "proj/models/sampler.py": SAMPLER,
        "proj/models/diffusion.py": DIFFUSION.format(mod="sampler", test="tile_logits.is_cuda"),
        "proj/models/chosen_sampler.py": SAMPLER + "\n\nFUSED = True\n",
        "proj/models/chosen.py": DIFFUSION.format(mod="chosen_sampler", test="use_fused"),
        "tests/test_sampler.py": SAMPLER_TEST.format(mod="sampler"),
        "tests/test_chosen_sampler.py": SAMPLER_TEST.format(mod="chosen_sampler"),
    }
    report = migrate_json(write_project(tmp_path, files))
    false = _places(report, "proj/models/sampler.py", "NPU910")[6]
    assert false["severity"] == "info"
    assert "reached on an NPU host only from tests/benchmarks (tests/test_sampler.py:11)" in false["message"]
    assert "`tile_logits.is_cuda` is kept meaning CUDA at line 6 (NPU110)" in false["message"]
    true = _places(report, "proj/models/chosen_sampler.py", "NPU910")[6]
    assert true["severity"] == "error"


# ----------------------------------------------------------------------------- IC#10: forward_native raises off CUDA
INDEXER = '''import torch

from proj.custom_op import CustomOp
from proj.platforms import current_platform


def sparse_indexer(hidden_states, weights):
    if torch.cuda.is_current_stream_capturing():
        return hidden_states
    return hidden_states @ weights


class SparseIndexer(CustomOp):
    def forward_native(self, hidden_states, weights):
        if {test}:
            return self.forward_cuda(hidden_states, weights)
        elif current_platform.is_rocm():
            return self.forward_hip(hidden_states, weights)
        else:
            raise NotImplementedError("only CUDA, ROCm and XPU")

    def forward_cuda(self, hidden_states, weights):
        return sparse_indexer(hidden_states, weights)

    def forward_hip(self, hidden_states, weights):
        return hidden_states
'''

INDEXER_MODEL = '''from proj.layers.{mod} import SparseIndexer, sparse_indexer
from proj.platforms import current_platform


class Attention:
    def __init__(self):
        self.indexer = SparseIndexer()

    def forward(self, x, w):
        if current_platform.is_cuda():
            return sparse_indexer(x, w)
        return self.indexer(x, w)
'''

PLATFORM_LAYER = '''class _Platform:
    def is_cuda(self):
        return True

    def is_rocm(self):
        return False

    def is_xpu(self):
        return False

    def is_cpu(self):
        return False


current_platform = _Platform()
'''


def test_custom_op_whose_forward_native_names_forward_cuda_only_under_a_cuda_test(tmp_path):
    """IC#10: `SparseIndexer.forward_native` returns `self.forward_cuda(...)` only under
    `if current_platform.is_cuda() or current_platform.is_xpu():` and raises for other platforms, so
    the out-of-tree platform's `forward_oot` (→ `forward_native`) never reaches `forward_cuda`: the
    graph-capture query of the function only `forward_cuda` calls becomes a named scope. The nearest
    true case (its other caller, in another module, also under a CUDA test), a `forward_native`
    that sends every platform but ROCm to `forward_cuda`
    (`if not current_platform.is_rocm():`), keeps its error."""
    files = {
        "proj/__init__.py": "",
        "proj/custom_op.py": CUSTOM_OP,
        "proj/platforms.py": PLATFORM_LAYER,
        "proj/layers/__init__.py": "",
        "proj/layers/indexer.py": INDEXER.format(
            test="current_platform.is_cuda() or current_platform.is_xpu()"),
        "proj/layers/any_indexer.py": INDEXER.format(test="not current_platform.is_rocm()"),
        "proj/models/__init__.py": "",
        "proj/models/a.py": INDEXER_MODEL.format(mod="indexer"),
        "proj/models/b.py": INDEXER_MODEL.format(mod="any_indexer"),
    }
    report = migrate_json(write_project(tmp_path, files))
    assert 8 not in _places(report, "proj/layers/indexer.py", "NPU202")
    assert "`SparseIndexer.forward_cuda`, a platform-dispatched op" in _scopes(report, "proj/layers/indexer.py", "NPU202")[8]
    assert _places(report, "proj/layers/any_indexer.py", "NPU202")[8]["severity"] == "error"


# ----------------------------------------------------------------------------- IB#23/IC#17: the OOT backend first
FLASHINFER_HELPERS = '''import torch


def prepare_trtllm_weights(w):
    from flashinfer import shuffle_matrix_a

    return shuffle_matrix_a(w, 128)
'''

ORACLE = '''from enum import Enum

from proj.platforms import current_platform
from proj.utils.{mod} import prepare_trtllm_weights


class MoeBackend(Enum):
    OOT = "oot"
    TRITON = "triton"
    FLASHINFER_TRTLLM = "flashinfer_trtllm"


def select_moe_backend(config, w):
    if current_platform.{exit}():
        return MoeBackend.OOT, w
    if config.use_trtllm:
        return MoeBackend.FLASHINFER_TRTLLM, prepare_trtllm_weights(w)
    return MoeBackend.TRITON, w
'''

OOT_PLATFORM = PLATFORM_LAYER.replace("    def is_cpu(self):", """    def is_out_of_tree(self):
        return False

    def is_tpu(self):
        return False

    def is_cpu(self):""")


def test_code_after_the_out_of_tree_platforms_return_is_not_run(tmp_path):
    """IB#23/IC#17's first step: vLLM's MoE oracle returns the out-of-tree backend
    (`if current_platform.is_out_of_tree(): return UnquantizedMoeBackend.OOT`) before any CUDA
    backend, and vllm-ascend's platform is out of tree, so a helper called only after that return
    (a lazy FlashInfer import) is a named scope. The nearest true case, the same oracle returning
    first only on a TPU (`is_tpu()`, false there), keeps its error."""
    files = {
        "proj/__init__.py": "",
        "proj/platforms.py": OOT_PLATFORM,
        "proj/utils/__init__.py": "",
        "proj/utils/fi_utils.py": FLASHINFER_HELPERS,
        "proj/utils/fi_utils_tpu.py": FLASHINFER_HELPERS + "\n\nTPU = True\n",
        "proj/moe/__init__.py": "",
        "proj/moe/oracle.py": ORACLE.format(mod="fi_utils", exit="is_out_of_tree"),
        "proj/moe/oracle_tpu.py": ORACLE.format(mod="fi_utils_tpu", exit="is_tpu"),
    }
    report = migrate_json(write_project(tmp_path, files))
    assert 5 not in _places(report, "proj/utils/fi_utils.py", "NPU911")
    assert "is_out_of_tree()" in _scopes(report, "proj/utils/fi_utils.py", "NPU911")[5]
    assert _places(report, "proj/utils/fi_utils_tpu.py", "NPU911")[5]["severity"] == "error"


# ----------------------------------------------------------------------------- ID#31: a ROCm ops object's predicate
OPS_OBJECT = '''class {name}:
    @classmethod
    def is_fp8bmm_enabled(cls) -> bool:
        return False
'''

MLA = '''import torch

from proj.{mod} import {name}


class MLAAttention:
    def __init__(self):
        self.fp8_bmm_enabled = {name}.is_fp8bmm_enabled()

    def process_weights(self, w):
        if self.fp8_bmm_enabled:
            return w.to(torch.float8_e4m3fn)
        return w
'''


def test_fp8_branch_behind_a_rocm_ops_objects_predicate(tmp_path):
    """ID#31: `self.fp8_bmm_enabled = rocm_aiter_ops.is_fp8bmm_enabled()` (vLLM's ROCm AITER
    wrapper, None unless AITER is found on a ROCm host) is False on an NPU host, so the FP8 branch
    under `if self.fp8_bmm_enabled:` is a named scope. The nearest true case, the same predicate of
    an ops object not named for ROCm (`kernel_ops.is_fp8bmm_enabled()`), keeps its error."""
    files = {
        "proj/__init__.py": "",
        "proj/aiter_ops.py": OPS_OBJECT.format(name="rocm_aiter_ops"),
        "proj/kernel_ops.py": OPS_OBJECT.format(name="kernel_ops"),
        "proj/mla.py": MLA.format(mod="aiter_ops", name="rocm_aiter_ops"),
        "proj/mla_any.py": MLA.format(mod="kernel_ops", name="kernel_ops"),
    }
    report = migrate_json(write_project(tmp_path, files))
    assert 12 not in _places(report, "proj/mla.py", "NPU913")
    assert "rocm_aiter_ops.is_fp8bmm_enabled()" in _scopes(report, "proj/mla.py", "NPU913")[12]
    assert _places(report, "proj/mla_any.py", "NPU913")[12]["severity"] == "error"


MLA_DEFAULT = '''import torch

from proj.{mod} import {name}


def per_batched_quant(x, dtype=torch.float8_e4m3fn):
    return x.to(dtype)


class MLAAttention:
    def __init__(self, fp4):
        self.fp4_bmm_enabled = fp4
        self.fp8_bmm_enabled = {name}.is_fp8bmm_enabled()

    def process_weights(self, w, act_dtype):
        if self.fp4_bmm_enabled:
            return w
        elif self.fp8_bmm_enabled:
            return per_batched_quant(w, dtype=act_dtype)
        return w
'''


def test_fp8_default_moved_to_a_call_behind_a_rocm_ops_objects_predicate(tmp_path):
    """ID#31 as vLLM writes it: the FP8 default of a helper every call overrides is reported at the
    calls (secondary.py), after the untaken-branch review ran; the one call lies under `elif
    self.fp8_bmm_enabled:` (`rocm_aiter_ops.is_fp8bmm_enabled()`), so it is read again and becomes a
    named scope. The nearest true case (`kernel_ops.is_fp8bmm_enabled()`) keeps its error."""
    files = {
        "proj/__init__.py": "",
        "proj/aiter_ops.py": OPS_OBJECT.format(name="rocm_aiter_ops"),
        "proj/kernel_ops.py": OPS_OBJECT.format(name="kernel_ops"),
        "proj/mla.py": MLA_DEFAULT.format(mod="aiter_ops", name="rocm_aiter_ops"),
        "proj/mla_any.py": MLA_DEFAULT.format(mod="kernel_ops", name="kernel_ops"),
    }
    report = migrate_json(write_project(tmp_path, files))
    assert 19 not in _places(report, "proj/mla.py", "NPU913")
    assert "rocm_aiter_ops.is_fp8bmm_enabled()" in _scopes(report, "proj/mla.py", "NPU913")[19]
    true = _places(report, "proj/mla_any.py", "NPU913")[19]
    assert true["severity"] == "error" and "default of `dtype` is never used" in true["message"]
