"""The fake torch_npu's attention operators: record the call, compute with the reference model.

The kernels are tests/attention_reference.py (a plain-torch model of the documented semantics,
with strict input validation). Each function here has the real operator's signature for the
emulated torch_npu version (rules/torch_npu_api.json), so a wrong keyword fails as it would on
the real wheel. Tensors stay where they are (CPU): there is no real "npu" device here.

``FAKE_TORCH_NPU_VERSION`` (read at import): "2.7.1" (default) or "2.14.0"; 2.14.0 adds the
``sink``/``dropout_mask``/``seed``/``offset`` parameters of npu_fusion_attention and
``npu_fusion_attention_v3`` (Tensor sequence lengths).
"""

import importlib.util
import inspect
import os
import sys
from pathlib import Path

import torch_npu

VERSION = os.environ.get("FAKE_TORCH_NPU_VERSION", "2.7.1")
if VERSION not in ("2.7.1", "2.14.0"):
    raise RuntimeError("FAKE_TORCH_NPU_VERSION must be 2.7.1 or 2.14.0, got {!r}".format(VERSION))

_INF = 2147483647


def _reference():
    module = sys.modules.get("attention_reference")
    if module is None:
        path = Path(__file__).resolve().parents[2] / "attention_reference.py"
        spec = importlib.util.spec_from_file_location("attention_reference", str(path))
        module = importlib.util.module_from_spec(spec)
        sys.modules["attention_reference"] = module
        spec.loader.exec_module(module)
    return module


_ref = _reference()


def _op(name, prototype):
    """The operator ``name``: exactly ``prototype``'s signature; records (name, args, kwargs)
    as the caller passed them, then runs the reference model."""
    signature = inspect.signature(prototype)
    kernel = getattr(_ref, name)

    def op(*args, **kwargs):
        bound = signature.bind(*args, **kwargs)  # TypeError for unknown/duplicate parameters
        torch_npu.calls.append((name, args, kwargs))
        return kernel(**bound.arguments)

    op.__name__ = op.__qualname__ = name
    op.__signature__ = signature
    return op


if VERSION == "2.7.1":

    def _proto_npu_fusion_attention(query, key, value, head_num, input_layout, pse=None,
                             padding_mask=None, atten_mask=None, scale=1.0, keep_prob=1.0,
                             pre_tockens=_INF, next_tockens=_INF, inner_precise=0, prefix=None,
                             actual_seq_qlen=None, actual_seq_kvlen=None, sparse_mode=0,
                             gen_mask_parallel=True, sync=False, softmax_layout=""):
        pass

else:

    def _proto_npu_fusion_attention(query, key, value, head_num, input_layout, pse=None,
                             padding_mask=None, atten_mask=None, scale=1.0, keep_prob=1.0,
                             pre_tockens=_INF, next_tockens=_INF, inner_precise=0, prefix=None,
                             actual_seq_qlen=None, actual_seq_kvlen=None, sparse_mode=0,
                             gen_mask_parallel=True, sync=False, softmax_layout="", sink=None,
                             dropout_mask=None, seed=0, offset=0):
        pass

    def _proto_npu_fusion_attention_v3(query, key, value, head_num, input_layout, pse=None,
                                padding_mask=None, atten_mask=None, scale=1.0, keep_prob=1.0,
                                pre_tockens=_INF, next_tockens=_INF, inner_precise=0,
                                prefix=None, actual_seq_qlen=None, actual_seq_kvlen=None,
                                sparse_mode=0, gen_mask_parallel=True, sync=False,
                                softmax_layout="", sink=None):
        pass


def _proto_npu_incre_flash_attention(query, key, value, *, padding_mask=None, atten_mask=None,
                              pse_shift=None, actual_seq_lengths=None, antiquant_scale=None,
                              antiquant_offset=None, block_table=None, dequant_scale1=None,
                              quant_scale1=None, dequant_scale2=None, quant_scale2=None,
                              quant_offset2=None, kv_padding_size=None, num_heads=1,
                              scale_value=1.0, input_layout="BSH", num_key_value_heads=0,
                              block_size=0, inner_precise=1):
    pass


def _proto_npu_fused_infer_attention_score(query, key, value, *, pse_shift=None, atten_mask=None,
                                    actual_seq_lengths=None, actual_seq_lengths_kv=None,
                                    dequant_scale1=None, quant_scale1=None, dequant_scale2=None,
                                    quant_scale2=None, quant_offset2=None, antiquant_scale=None,
                                    antiquant_offset=None, key_antiquant_scale=None,
                                    key_antiquant_offset=None, value_antiquant_scale=None,
                                    value_antiquant_offset=None, block_table=None,
                                    query_padding_size=None, kv_padding_size=None,
                                    key_shared_prefix=None, value_shared_prefix=None,
                                    actual_shared_prefix_len=None, query_rope=None,
                                    key_rope=None, key_rope_antiquant_scale=None, num_heads=1,
                                    scale=1.0, pre_tokens=_INF, next_tokens=_INF,
                                    input_layout="BSH", num_key_value_heads=0, sparse_mode=0,
                                    inner_precise=0, block_size=0, antiquant_mode=0,
                                    key_antiquant_mode=0, value_antiquant_mode=0,
                                    softmax_lse_flag=False):
    pass


OPS = ["npu_fusion_attention", "npu_incre_flash_attention", "npu_fused_infer_attention_score"]
if VERSION == "2.14.0":
    OPS.append("npu_fusion_attention_v3")

npu_fusion_attention = _op("npu_fusion_attention", _proto_npu_fusion_attention)
npu_incre_flash_attention = _op("npu_incre_flash_attention", _proto_npu_incre_flash_attention)
npu_fused_infer_attention_score = _op("npu_fused_infer_attention_score",
                                      _proto_npu_fused_infer_attention_score)
if VERSION == "2.14.0":
    npu_fusion_attention_v3 = _op("npu_fusion_attention_v3", _proto_npu_fusion_attention_v3)
