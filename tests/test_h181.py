"""Audit round 33 rows of vLLM code vllm-ascend replaces by rebinding module globals (helper h181,
issue #16): `[[functions]]` facts of rules/vllm_ascend.toml, applied by ascendfacts30.py. Each false
shape is paired with the nearest true case (same shape, reached on an NPU host) that stays reported
at its severity."""

from __future__ import annotations

from .precision_helpers import migrate_json, write_project
from .precision_helpers import VLLM_PLATFORM_INTERFACE as INTERFACE


def _findings(report: dict, path: str, code: str) -> list:
    return [f for f in report["findings"] if f["path"] == path and f["code"] == code and not f["fixable"]]


# ---------------------------------------------------------------- HA#16: the grammar-bitmask kernel

STRUCTURED_PATH = "vllm/v1/worker/gpu/structured_outputs.py"
STRUCTURED = '''import torch

from vllm.triton_utils import tl, triton


class StructuredOutputsWorker:
    def apply_grammar_bitmask(self, logits, bitmask):
        grid = (bitmask.shape[0],)
        _apply_grammar_bitmask_kernel[grid](logits, bitmask, logits.shape[-1], BLOCK_SIZE=8192)


@triton.jit
def _apply_grammar_bitmask_kernel(logits_ptr, bitmask_ptr, n, BLOCK_SIZE: tl.constexpr):
    offs = tl.arange(0, BLOCK_SIZE)
    tl.store(logits_ptr + offs, tl.load(bitmask_ptr + offs), mask=offs < n)
'''
RUNNER = '''from vllm.v1.worker.gpu.structured_outputs import StructuredOutputsWorker


def make():
    return StructuredOutputsWorker()
'''
# (a warmup that from-imports the kernel and launches it itself: the plugin does not rebind its global)
WARMUP = '''from vllm.v1.worker.gpu.structured_outputs import _apply_grammar_bitmask_kernel


def warm(logits, bitmask):
    _apply_grammar_bitmask_kernel[(1,)](logits, bitmask, 8, BLOCK_SIZE=8192)
'''


def _structured_project(extra: dict | None = None) -> dict:
    files = {"vllm/platforms/interface.py": INTERFACE, STRUCTURED_PATH: STRUCTURED,
             "vllm/v1/worker/gpu/model_runner.py": RUNNER}
    files.update(extra or {})
    return files


def test_grammar_bitmask_kernel_launched_through_the_rebound_global_is_info(tmp_path):
    """HA#16: StructuredOutputsWorker launches `_apply_grammar_bitmask_kernel` through its module
    global, which vllm-ascend's V2 patch rebinds to its own kernel: vLLM's kernel never runs on an
    Ascend host, so its NPU910 finding becomes info naming the patch."""
    report = migrate_json(write_project(tmp_path, _structured_project()))
    kernels = _findings(report, STRUCTURED_PATH, "NPU910")
    assert [f["severity"] for f in kernels] == ["info"]
    assert "patch_v2/patch_triton.py" in kernels[0]["message"]
    assert "_apply_grammar_bitmask_kernel" in kernels[0]["message"]


def test_grammar_bitmask_kernel_an_unpatched_importer_launches_stays_an_error(tmp_path):
    """Nearest true case: another module from-imports the kernel and launches it (its global is not
    rebound), so vLLM's kernel runs on an Ascend host: the finding stays an error."""
    report = migrate_json(write_project(tmp_path, _structured_project(
        {"vllm/v1/worker/gpu/warmup.py": WARMUP})))
    kernels = _findings(report, STRUCTURED_PATH, "NPU910")
    assert [f["severity"] for f in kernels] == ["error"]
    assert "vllm-ascend" not in kernels[0]["message"]


# ---------------------------------------------------------------- HA#9: MiniMax M2's attention forward

NORM_PATH = "vllm/model_executor/layers/minimax_rms_norm/rms_norm_tp.py"
NORM = '''import torch

from vllm.triton_utils import HAS_TRITON, tl, triton
from vllm.utils.torch_utils import direct_register_custom_op


@triton.jit
def _qk_var_kernel(x_ptr, n: tl.constexpr):
    offs = tl.arange(0, n)
    tl.store(x_ptr + offs, tl.load(x_ptr + offs) * 2.0)


def _eager(qkv):
    return qkv * 2.0


def _fallback(qkv):
    if not HAS_TRITON:
        return _eager(qkv)
    _qk_var_kernel[(1,)](qkv, 8)
    return qkv


def _fusion(qkv: torch.Tensor) -> torch.Tensor:
    return _fallback(qkv)


def _fusion_fake(qkv: torch.Tensor) -> torch.Tensor:
    return torch.empty_like(qkv)


direct_register_custom_op(op_name="qk_norm_fusion", op_func=_fusion, fake_impl=_fusion_fake)


class RMSNormTP(torch.nn.Module):
    def forward(self, x):
        return x * 2.0

    @staticmethod
    def forward_qkv(q_norm, k_norm, qkv):
        return torch.ops.vllm.qk_norm_fusion(qkv)
'''
M2_PATH = "vllm/model_executor/models/minimax_m2.py"
M2 = '''import torch

from vllm.model_executor.layers.minimax_rms_norm.rms_norm_tp import RMSNormTP


class MiniMaxM2Attention(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.q_norm = RMSNormTP()
        self.k_norm = RMSNormTP()

    def forward(self, qkv):
        return RMSNormTP.forward_qkv(self.q_norm, self.k_norm, qkv)
'''
# (an encoder whose subclass calls its own `forward_qkv` through self: not the norm's)
ENCODER = '''import torch


class EncoderAttention(torch.nn.Module):
    def forward_qkv(self, q, k, v):
        return q, k, v


class RelPosAttention(EncoderAttention):
    def forward(self, q, k, v):
        return self.forward_qkv(q, k, v)
'''
# (another model calls the norm's forward_qkv in a forward the plugin does not replace)
OTHER_MODEL = '''import torch

from vllm.model_executor.layers.minimax_rms_norm.rms_norm_tp import RMSNormTP


class OtherAttention(torch.nn.Module):
    def forward(self, qkv):
        return RMSNormTP.forward_qkv(self.q_norm, self.k_norm, qkv)
'''


def _m2_project(extra: dict | None = None) -> dict:
    files = {"vllm/platforms/interface.py": INTERFACE, NORM_PATH: NORM, M2_PATH: M2,
             "vllm/model_executor/models/conformer.py": ENCODER}
    files.update(extra or {})
    return files


def test_norm_kernel_reached_only_through_the_replaced_attention_forward_is_info(tmp_path):
    """HA#9: the QK-norm kernel runs only in the custom op's Triton path, which only the norm's
    `forward_qkv` calls, which only `MiniMaxM2Attention.forward` calls: the method vllm-ascend's
    patch_minimax_m2.py replaces with its own fused op. The finding becomes info naming the patch;
    an encoder's own `self.forward_qkv` does not reach the norm's."""
    report = migrate_json(write_project(tmp_path, _m2_project()))
    kernels = _findings(report, NORM_PATH, "NPU910")
    assert [f["severity"] for f in kernels] == ["info"]
    assert "patch_minimax_m2.py" in kernels[0]["message"]
    assert "MiniMaxM2Attention.forward" in kernels[0]["message"]


def test_norm_kernel_another_model_forward_reaches_stays_an_error(tmp_path):
    """Nearest true case: another model's forward, which the plugin does not replace, calls the
    norm's `forward_qkv`: the kernel runs on an Ascend host, so the finding stays an error."""
    report = migrate_json(write_project(tmp_path, _m2_project(
        {"vllm/model_executor/models/other.py": OTHER_MODEL})))
    kernels = _findings(report, NORM_PATH, "NPU910")
    assert [f["severity"] for f in kernels] == ["error"]
    assert "vllm-ascend" not in kernels[0]["message"]


# ---------------------------------------------------------------- HC#33: FlashInfer's sparse-MLA backends

SPARSE_PATH = "vllm/v1/attention/backends/mla/flashinfer_mla_sparse.py"
SPARSE = '''import torch


class FlashInferMLASparseImpl:
    def _forward_mqa_kernel(self, q, kv):
        from flashinfer.decode import trtllm_batch_decode_with_kv_cache_mla

        return trtllm_batch_decode_with_kv_cache_mla(q, kv)


class FlashInferMLASparseTRTLLMBackend:
    @staticmethod
    def get_impl_cls():
        return FlashInferMLASparseImpl
'''
# (a sibling backend of the package subclasses the Impl: a route inside the package)
FA4 = '''from vllm.v1.attention.backends.mla.flashinfer_mla_sparse import FlashInferMLASparseImpl


class FlashAttnMLASparseFA4Impl(FlashInferMLASparseImpl):
    pass


class FlashAttnMLASparseFA4Backend:
    @staticmethod
    def get_impl_cls():
        return FlashAttnMLASparseFA4Impl
'''
REGISTRY = '''import enum


class AttentionBackendEnum(enum.Enum):
    FLASHINFER_MLA_SPARSE = "vllm.v1.attention.backends.mla.flashinfer_mla_sparse.FlashInferMLASparseTRTLLMBackend"
    FLASH_ATTN_MLA_SPARSE_FA4 = "vllm.v1.attention.backends.mla.flashattn_mla_sparse.FlashAttnMLASparseFA4Backend"
'''
# (a model that builds the Impl itself: a route the plugin's backend selection does not close)
SPARSE_MODEL = '''from vllm.v1.attention.backends.mla.flashinfer_mla_sparse import FlashInferMLASparseImpl


def build():
    return FlashInferMLASparseImpl()
'''


def _sparse_project(extra: dict | None = None) -> dict:
    files = {"vllm/platforms/interface.py": INTERFACE, SPARSE_PATH: SPARSE,
             "vllm/v1/attention/backends/mla/flashattn_mla_sparse.py": FA4,
             "vllm/v1/attention/backends/registry.py": REGISTRY}
    files.update(extra or {})
    return files


def test_sparse_mla_impl_named_only_by_its_registry_backends_is_info(tmp_path):
    """HC#33: FlashInferMLASparseImpl is named only by the sparse-MLA backends of its package (its
    own backend, the FA4 subclass), which only the attention registry names, and vllm-ascend's
    platform selects only its own backends: the CUDA-only import inside it becomes info naming the fact."""
    report = migrate_json(write_project(tmp_path, _sparse_project()))
    found = _findings(report, SPARSE_PATH, "NPU911")
    assert [f["severity"] for f in found] == ["info"]
    assert "get_attn_backend_cls" in found[0]["message"]


def test_sparse_mla_impl_a_model_builds_stays_an_error(tmp_path):
    """Nearest true case: a model module builds the Impl itself (not through the registry), so it
    runs wherever that model runs: the finding stays an error."""
    report = migrate_json(write_project(tmp_path, _sparse_project(
        {"vllm/models/sparse_model/attention.py": SPARSE_MODEL})))
    found = _findings(report, SPARSE_PATH, "NPU911")
    assert [f["severity"] for f in found] == ["error"]
    assert "vllm-ascend" not in found[0]["message"]
