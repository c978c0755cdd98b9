"""Mixed precision on the virtual NPU: autocast kernels and ``torch_npu.npu.amp``.

``torch.autocast("npu")`` turns on PyTorch's ``AutocastPrivateUse1`` dispatch key. This module
registers kernels for that key (with ``torch.library``) that cast like CUDA's autocast lists:

- ``LOWER``: run in the autocast dtype (fp16 by default, or bf16): matmul, mm, bmm, baddbmm,
  addmm, addmv, addbmm, addr, mv, dot-free linear algebra (linear, einsum, chain_matmul,
  linalg_multi_dot), convolutions (conv1d/2d/3d, conv_transpose1d/2d/3d, convolution,
  _convolution), prelu, the RNN cells, scaled_dot_product_attention.
- ``FP32``: run in float32: softmax, log_softmax, layer_norm, native_layer_norm, group_norm,
  cross_entropy_loss, nll_loss, nll_loss2d, mse_loss, l1_loss, smooth_l1_loss, huber_loss,
  kl_div, binary_cross_entropy_with_logits, exp, log, log1p, log2, log10, pow, rsqrt,
  reciprocal, erfinv, acos, asin, cosh, sinh, tan, expm1, softplus, logsumexp, cumsum, cumprod,
  prod, sum, norm, linalg_vector_norm, cosine_similarity, cdist, dist, renorm.
- every other operator falls through (runs in the dtype it is given), as on CUDA.

Casting rule (CUDA's ``cached_cast``): floating-point tensors on the NPU other than float64 are
cast; CPU tensors, integers and float64 are left alone. Casts of weights are not cached (CUDA
caches them for speed only; the values are the same).
"""

from __future__ import annotations

import os

import torch
from torch.utils._pytree import tree_map

LOWER = ["matmul", "mm", "bmm", "baddbmm", "addmm", "addmv", "addbmm", "addr", "mv", "linear",
         "einsum", "chain_matmul", "linalg_multi_dot", "conv1d", "conv2d", "conv3d",
         "conv_transpose1d", "conv_transpose2d", "conv_transpose3d", "convolution",
         "_convolution", "prelu", "lstm_cell", "gru_cell", "rnn_tanh_cell", "rnn_relu_cell",
         "scaled_dot_product_attention"]
FP32 = ["softmax", "log_softmax", "layer_norm", "native_layer_norm", "group_norm",
        "cross_entropy_loss", "nll_loss", "nll_loss2d", "mse_loss", "l1_loss", "smooth_l1_loss",
        "huber_loss", "kl_div", "binary_cross_entropy_with_logits", "exp", "log", "log1p",
        "log2", "log10", "pow", "rsqrt", "reciprocal", "erfinv", "acos", "asin", "cosh", "sinh",
        "tan", "expm1", "softplus", "logsumexp", "cumsum", "cumprod", "prod", "sum", "norm",
        "linalg_vector_norm", "cosine_similarity", "cdist", "dist", "renorm"]

_KEY = "AutocastPrivateUse1"
_libs: list = []


def _eligible(x) -> bool:
    return (isinstance(x, torch.Tensor) and x.is_floating_point() and x.device.type == "npu"
            and x.dtype != torch.float64)


def _kernel(packet, policy):
    exclude = torch._C.DispatchKeySet(torch._C.DispatchKey.AutocastPrivateUse1)

    def kernel(*args, **kwargs):
        target = torch.get_autocast_dtype("npu") if policy == "lower" else torch.float32

        def cast(x):
            return x.to(target) if _eligible(x) and x.dtype != target else x

        with torch._C._ExcludeDispatchKeyGuard(exclude):
            return packet(*tree_map(cast, args), **tree_map(cast, kwargs))

    return kernel


def casts() -> bool:
    """Whether autocast regions cast (False with NPU_MIGRATE_VNPU_AUTOCAST=off)."""
    return os.environ.get("NPU_MIGRATE_VNPU_AUTOCAST", "").lower() not in ("off", "0", "false", "fp32")


def register() -> None:
    """The autocast kernels; with NPU_MIGRATE_VNPU_AUTOCAST=off only the fallthrough: autocast
    regions then compute in the dtype they are given (fp32), so that a migrated program whose NPU
    path turns autocast on can still be compared bit for bit with its fp32 run on the CPU."""
    if _libs:
        return
    fallthrough = torch.library.Library("_", "IMPL")  # noqa: TOR901
    fallthrough.fallback(torch.library.fallthrough_kernel, _KEY)
    if not casts():
        _libs.append(fallthrough)
        return
    lib = torch.library.Library("aten", "IMPL")  # noqa: TOR901
    for names, policy in ((LOWER, "lower"), (FP32, "fp32")):
        for name in names:
            packet = getattr(torch.ops.aten, name, None)
            if packet is None:
                continue
            for overload in packet.overloads():
                op = getattr(packet, overload)
                qualname = name if overload == "default" else f"{name}.{overload}"
                if "out" in overload:
                    continue
                try:
                    lib.impl(qualname, _kernel(op, policy), _KEY)
                except RuntimeError:
                    pass  # an overload the dispatcher refuses to take a kernel for
    _libs.extend([fallthrough, lib])


# ---------------------------------------------------------------------------------------------
# torch_npu.npu.amp


class autocast(torch.amp.autocast_mode.autocast):
    """``torch_npu.npu.amp.autocast``: ``torch.autocast("npu", ...)``."""

    def __init__(self, enabled=True, dtype=torch.float16, cache_enabled=True):
        super().__init__("npu", enabled=enabled, dtype=dtype, cache_enabled=cache_enabled)


class GradScaler(torch.amp.GradScaler):
    """``torch_npu.npu.amp.GradScaler``; ``dynamic=False`` keeps the scale fixed."""

    def __init__(self, init_scale=2.0 ** 16, growth_factor=2.0, backoff_factor=0.5,
                 growth_interval=2000, dynamic=True, enabled=True):
        self.dynamic = dynamic
        super().__init__("npu", init_scale=init_scale, growth_factor=growth_factor,
                         backoff_factor=backoff_factor, growth_interval=growth_interval,
                         enabled=enabled)

    def update(self, new_scale=None):
        # dynamic=False: a static loss scale (overflowing steps are still skipped)
        if not self.dynamic and new_scale is None and self._enabled and self._scale is not None:
            new_scale = float(self.get_scale())
        super().update(new_scale)


def custom_fwd(fwd=None, **kwargs):
    return torch.amp.custom_fwd(fwd, device_type="npu", cast_inputs=kwargs.get("cast_inputs"))


def custom_bwd(bwd):
    return torch.amp.custom_bwd(bwd, device_type="npu")
