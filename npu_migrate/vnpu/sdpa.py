"""``scaled_dot_product_attention`` on the virtual NPU, computed by the CPU's own kernel.

PyTorch picks an SDPA backend per device type; for a PrivateUse1 device without a registered
choice it decomposes into the math path (matmul, softmax), while the CPU runs its flash kernel.
The two round differently in the last bits, so a migrated program would not reproduce its CPU
run. Here a call whose query is an NPU tensor runs the CPU function on the tensors inside, under
an autograd function whose backward asks the CPU graph for the gradients; the results go back
onto the NPU. (The real NPU runs torch_npu's own attention kernels: the virtual device does not
model kernel numerics.)
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from . import amp
from .tensor import NPUTensor, unwrap

_ORIGINAL = F.scaled_dot_product_attention


class _CpuAttention(torch.autograd.Function):
    @staticmethod
    def forward(ctx, query, key, value, attn_mask, kwargs):
        index = query.device.index
        inner = [unwrap(t).detach().requires_grad_(t.requires_grad) if isinstance(t, torch.Tensor) else t
                 for t in (query, key, value)]
        mask = unwrap(attn_mask) if isinstance(attn_mask, torch.Tensor) else attn_mask
        with torch.enable_grad():
            out = _ORIGINAL(*inner, attn_mask=mask, **kwargs)
        ctx.saved = (inner, out, index)
        return NPUTensor(out.detach(), index)

    @staticmethod
    def backward(ctx, grad):
        inner, out, index = ctx.saved
        wanted = [t for t in inner if t.requires_grad]
        grads = iter(torch.autograd.grad(out, wanted, unwrap(grad)) if wanted else ())
        result = [NPUTensor(next(grads), index) if t.requires_grad else None for t in inner]
        return (*result, None, None)


def scaled_dot_product_attention(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False,
                                 scale=None, enable_gqa=False):
    if not isinstance(query, NPUTensor):
        return _ORIGINAL(query, key, value, attn_mask=attn_mask, dropout_p=dropout_p,
                         is_causal=is_causal, scale=scale, enable_gqa=enable_gqa)
    if torch.is_autocast_enabled("npu") and amp.casts():  # autocast casts q, k, v first, as on CUDA
        dtype = torch.get_autocast_dtype("npu")
        query, key, value = (t.to(dtype) if t.is_floating_point() else t for t in (query, key, value))
    kwargs = {"dropout_p": dropout_p, "is_causal": is_causal, "scale": scale, "enable_gqa": enable_gqa}
    return _CpuAttention.apply(query, key, value, attn_mask, kwargs)


def install() -> None:
    """Replace ``torch.nn.functional.scaled_dot_product_attention`` (the name its callers look up)."""
    F.scaled_dot_product_attention = scaled_dot_product_attention
