"""torch_npu's fused attention operators on the virtual NPU.

Each operator has the real signature of the emulated torch_npu version (a wrong or CUDA-only
keyword raises TypeError, as on the wheel), checks that its tensors are on one device (a CPU
tensor mixed with NPU tensors raises PyTorch's device error), and computes with the reference
model of the documented semantics in ``attention_ref`` on the CPU tensors inside, which
validates the arguments strictly (True = masked out, ``scale`` defaults to 1.0, cumulative
``actual_seq_qlen`` without a leading 0, compressed 2048x2048 masks for sparse modes 2-4, ...).

Operators: npu_fusion_attention, npu_incre_flash_attention, npu_fused_infer_attention_score,
npu_prompt_flash_attention (modelled by the fused inference model with ``scale=scale_value``),
and npu_fusion_attention_v3 where the version has it (2.14.0).
"""

from __future__ import annotations

import collections
import inspect

import torch
from torch.utils._pytree import tree_flatten, tree_map

from . import attention_ref as ref
from . import tensor as vt

_INF = 2147483647
CALLS: collections.Counter = collections.Counter()  # operator name -> calls (for the tests)


def _prompt_kernel(query, key, value, *, pse_shift=None, padding_mask=None, atten_mask=None,
                   actual_seq_lengths=None, deq_scale1=None, quant_scale1=None, deq_scale2=None,
                   quant_scale2=None, quant_offset2=None, num_heads=1, scale_value=1.0,
                   pre_tokens=_INF, next_tokens=0, input_layout="BSH", num_key_value_heads=0,
                   actual_seq_lengths_kv=None, sparse_mode=0):
    for name, value_ in (("pse_shift", pse_shift), ("padding_mask", padding_mask),
                         ("deq_scale1", deq_scale1), ("quant_scale1", quant_scale1),
                         ("deq_scale2", deq_scale2), ("quant_scale2", quant_scale2),
                         ("quant_offset2", quant_offset2)):
        if value_ is not None:
            raise NotImplementedError(
                f"npu_prompt_flash_attention: {name} is not modelled by the virtual NPU")
    return ref.npu_fused_infer_attention_score(
        query, key, value, atten_mask=atten_mask, actual_seq_lengths=actual_seq_lengths,
        actual_seq_lengths_kv=actual_seq_lengths_kv, num_heads=num_heads, scale=scale_value,
        pre_tokens=pre_tokens, next_tokens=next_tokens, input_layout=input_layout,
        num_key_value_heads=num_key_value_heads, sparse_mode=sparse_mode)[0]


def _op(name, prototype, kernel):
    signature = inspect.signature(prototype)

    def op(*args, **kwargs):
        try:
            bound = signature.bind(*args, **kwargs)  # TypeError for an unknown keyword
        except TypeError as exc:
            raise TypeError(f"{name}() {exc}") from None
        CALLS[name] += 1
        flat = tree_flatten((list(bound.args), dict(bound.kwargs)))[0]
        index = vt.check_devices(flat)
        if index is None:
            cpu = next((x for x in flat if isinstance(x, torch.Tensor)), None)
            if cpu is not None:  # what the dispatcher says for a CPU tensor to an NPU-only op
                exc = NotImplementedError(
                    f"Could not run 'npu::{name}' with arguments from the "
                    f"'{cpu.device.type.upper()}' backend. (virtual NPU: torch_npu's fused "
                    f"operators take tensors on the npu device)")
                vt.note_user_frame(exc)
                raise exc
        out = kernel(*tree_map(vt.unwrap, bound.args), **tree_map(vt.unwrap, bound.kwargs))
        if index is None:
            return out
        return tree_map(lambda x: vt.wrap(x, index) if isinstance(x, torch.Tensor) else x, out)

    op.__name__ = op.__qualname__ = name
    op.__signature__ = signature
    op.__doc__ = f"torch_npu.{name} on the virtual NPU (reference model of its documentation)."
    return op


def operators(version: str) -> dict:
    """name -> operator for the emulated torch_npu version."""
    ops = {
        "npu_fusion_attention": _op(
            "npu_fusion_attention",
            ref.prototype("npu_fusion_attention", version),
            ref.npu_fusion_attention),
        "npu_incre_flash_attention": _op("npu_incre_flash_attention", ref.prototype("npu_incre_flash_attention", version),
                                         ref.npu_incre_flash_attention),
        "npu_fused_infer_attention_score": _op("npu_fused_infer_attention_score",
                                               ref.prototype("npu_fused_infer_attention_score",
                                                             version),
                                               ref.npu_fused_infer_attention_score),
        "npu_prompt_flash_attention": _op("npu_prompt_flash_attention",
                                          ref.prototype("npu_prompt_flash_attention", version),
                                          _prompt_kernel),
    }
    if version != "2.7.1":
        ops["npu_fusion_attention_v3"] = _op("npu_fusion_attention_v3",
                                             ref.prototype("npu_fusion_attention_v3", version),
                                             ref.npu_fusion_attention_v3)
    return ops
