"""flash-attn's functions, with flash-attn's signatures, on Ascend NPU, CUDA or (opt-in) SDPA.

npu-migrate rewrites ``from flash_attn import flash_attn_func`` (and the other functions below)
to this module. Which implementation runs is decided per call, by the shim's ``device_type()``:

* ``"npu"`` (torch_npu and an NPU): torch_npu's fused attention operators. Tensors are used
  where they are -- this module never moves a tensor to another device.
* otherwise, when ``flash_attn`` imports: the real flash_attn, called with the arguments exactly
  as given (nothing is normalised or defaulted).
* otherwise, only when the user opted in -- ``NPU_COMPAT_ATTENTION_FALLBACK=sdpa`` in the
  environment or ``enable_sdpa_fallback()`` -- ``torch.nn.functional.scaled_dot_product_attention``
  with explicit masks that keep flash-attn's semantics.
* otherwise calling a function raises ``ModuleNotFoundError`` (an ``ImportError``), as if
  flash_attn were missing -- which it is.

Guarded imports (for the codemod)
---------------------------------
Code like ``try: from flash_attn import flash_attn_func`` / ``except ImportError: <fallback>``
must keep taking its fallback on a machine that has neither an NPU, nor flash_attn, nor the
opt-in (DESIGN.md invariant 1). Importing this module never fails, so the rewritten ``try``
body must ask explicitly::

    try:
        import npu_compat.attention
        flash_attn_func, flash_attn_varlen_func = npu_compat.attention.require(
            "flash_attn_func", "flash_attn_varlen_func")
    except ImportError:
        <fallback, unchanged>

``require(*names)`` raises ``ModuleNotFoundError(name="flash_attn")`` when no backend is usable
(so ``except ImportError`` and ``except ModuleNotFoundError`` both still catch it), and otherwise
returns the named functions of this module: one object for one name, a tuple for several, None
for none (``require()`` alone is a pure check). ``available()`` is the same test as a bool;
``AVAILABLE`` (module attribute, computed lazily on access) is ``available()``. ``backend()``
says which path a call takes: ``"npu"``, ``"flash_attn"``, ``"sdpa"`` or None. Calling
``require`` decides the device (it may import torch_npu); importing this module does not.

Semantics this module relies on (flash-attn 2.x, torch_npu docs; see docs/attention.md)
-----------------------------------------------------------------------------------------
* flash-attn layouts: q ``(B, Sq, H, D)``, k/v ``(B, Sk, Hk, D)``, ``H % Hk == 0`` (GQA/MQA);
  varlen ``(T, H, D)`` with ``cu_seqlens`` (B+1,) int32 starting at 0.
* ``softmax_scale=None`` means ``1/sqrt(D)``. torch_npu's ``scale`` defaults to 1.0, so it is
  always passed.
* flash-attn's causal mask is aligned to the bottom-right corner (``j <= i + Sk - Sq``);
  ``window_size=(left, right)`` keeps ``i + Sk - Sq - left <= j <= i + Sk - Sq + right``, -1 is
  unbounded, ``causal`` sets ``right = 0``; a row with no visible key outputs 0.
* torch_npu: ``atten_mask`` True = masked OUT; ``sparse_mode=3`` is bottom-right causal and
  ``sparse_mode=4`` a band around the bottom-right diagonal with ``pre_tockens``/``next_tockens``,
  both taking the compressed 2048x2048 mask ``triu(ones, 1)``; without a mask the sparse mode is
  ignored (full attention), so the mask is always passed with them. ``keep_prob = 1 - p``.
  TND ``actual_seq_qlen/kvlen`` are cumulative ends without the leading 0 (``cu_seqlens[1:]``);
  the inference operators take PER-BATCH kv lengths instead.
"""

import importlib
import inspect
import math
import os
import threading

import torch
import torch.nn.functional as F

from . import device_type

__all__ = [
    "flash_attn_func",
    "flash_attn_varlen_func",
    "flash_attn_qkvpacked_func",
    "flash_attn_kvpacked_func",
    "flash_attn_varlen_qkvpacked_func",
    "flash_attn_varlen_kvpacked_func",
    "flash_attn_with_kvcache",
    "require",
    "available",
    "backend",
    "enable_sdpa_fallback",
]

FALLBACK_ENV = "NPU_COMPAT_ATTENTION_FALLBACK"  # "sdpa" opts into the SDPA fallback

_INF_TOKENS = 2147483647  # torch_npu's "unbounded" pre/next tokens
_MASK_SIZE = 2048  # the compressed causal/band mask is always 2048 x 2048

_lock = threading.Lock()
_sdpa_opt_in = False
_flash_attn = None  # the imported flash_attn module, False if it does not import
_flash_attn_error = ""
_masks = {}  # str(device) -> compressed mask, built once per device


# ---------------------------------------------------------------------------------------------
# Which path a call takes.


def enable_sdpa_fallback(enabled=True):
    """Opt into (or out of) the SDPA fallback where there is neither an NPU nor flash_attn."""
    global _sdpa_opt_in
    _sdpa_opt_in = bool(enabled)


def _sdpa_enabled():
    return _sdpa_opt_in or os.environ.get(FALLBACK_ENV, "").strip().lower() == "sdpa"


def _real_flash_attn():
    """The flash_attn module if it imports (cached), else None."""
    global _flash_attn, _flash_attn_error
    if _flash_attn is None:
        with _lock:
            if _flash_attn is None:
                try:
                    _flash_attn = importlib.import_module("flash_attn")
                except Exception as exc:  # ImportError, or a broken CUDA extension
                    _flash_attn = False
                    _flash_attn_error = "{}: {}".format(type(exc).__name__, exc)
    return _flash_attn or None


def backend():
    """``"npu"``, ``"flash_attn"``, ``"sdpa"`` (opted in) or None (nothing usable)."""
    if device_type() == "npu":
        return "npu"
    if _real_flash_attn() is not None:
        return "flash_attn"
    if _sdpa_enabled():
        return "sdpa"
    return None


def available():
    return backend() is not None


def _missing():
    detail = " ({})".format(_flash_attn_error) if _flash_attn_error else ""
    return ModuleNotFoundError(
        "flash_attn is not installed{} and there is no Ascend NPU; set {}=sdpa or call "
        "{}.enable_sdpa_fallback() to use torch's scaled_dot_product_attention "
        "instead".format(detail, FALLBACK_ENV, __name__),
        name="flash_attn",
    )


def require(*names):
    """Raise ModuleNotFoundError unless a backend is usable; return the named functions."""
    if not available():
        raise _missing()
    found = tuple(globals()[name] if name in __all__ else _no_such(name) for name in names)
    if not found:
        return None
    return found[0] if len(found) == 1 else found


def _no_such(name):
    raise ImportError("cannot import name {!r} from {!r}".format(name, __name__), name=__name__)


def __getattr__(name):
    if name == "AVAILABLE":
        return available()
    raise AttributeError("module {!r} has no attribute {!r}".format(__name__, name))


def _dispatch(name, impl):
    """A flash-attn function: the real one on CUDA (arguments untouched), else ``impl``."""

    def call(*args, **kwargs):
        which = backend()
        if which == "flash_attn":
            return getattr(_real_flash_attn(), name)(*args, **kwargs)
        if which is None:
            raise _missing()
        return impl(which, *args, **kwargs)

    call.__name__ = call.__qualname__ = name
    call.__doc__ = impl.__doc__
    # inspect.signature(call) shows flash-attn's signature: impl's without its `which`.
    signature = inspect.signature(impl)
    call.__signature__ = signature.replace(parameters=list(signature.parameters.values())[1:])
    return call


# ---------------------------------------------------------------------------------------------
# Shared helpers.


def _reject_unsupported(softcap=0.0, alibi_slopes=None, deterministic=False,
                        return_attn_probs=False, **more):
    """Parameters with no NPU / SDPA path: a clear error naming the parameter."""
    if softcap:
        raise NotImplementedError(
            "softcap={!r}: soft-capping of attention scores has no torch_npu or SDPA "
            "equivalent in npu_compat.attention".format(softcap))
    if alibi_slopes is not None:
        raise NotImplementedError(
            "alibi_slopes: ALiBi biases are not supported by npu_compat.attention")
    if deterministic:
        raise NotImplementedError(
            "deterministic=True: flash-attn's deterministic backward has no equivalent switch "
            "in npu_compat.attention")
    if return_attn_probs:
        raise NotImplementedError(
            "return_attn_probs=True: the attention probabilities / softmax LSE are not returned "
            "by npu_compat.attention's fused path")
    for name, value in more.items():
        if value is not None:
            raise NotImplementedError(
                "{}: not supported by npu_compat.attention on NPU or SDPA".format(name))


def _scale(softmax_scale, q):
    return float(softmax_scale) if softmax_scale is not None else 1.0 / math.sqrt(q.shape[-1])


def _window(window_size, causal):
    """flash-attn's (left, right) with None for unbounded; causal means right = 0."""
    left, right = (int(window_size[0]), int(window_size[1])) if window_size is not None else (-1, -1)
    if causal:
        right = 0
    return (left if left >= 0 else None), (right if right >= 0 else None)


# ---------------------------------------------------------------------------------------------
# NPU path.


def _torch_npu():
    return importlib.import_module("torch_npu")


def _compressed_mask(device):
    """torch_npu's optimized 2048x2048 mask: True (masked) strictly above the diagonal."""
    key = str(device)
    mask = _masks.get(key)
    if mask is None:
        with _lock:
            mask = _masks.get(key)
            if mask is None:
                mask = torch.triu(
                    torch.ones(_MASK_SIZE, _MASK_SIZE, dtype=torch.bool, device=device), diagonal=1)
                _masks[key] = mask
    return mask


def _sparse_kwargs(left, right, device, tokens_spelling):
    """sparse_mode / atten_mask / pre / next for a flash-attn window (bottom-right aligned).

    No window: no mask (sparse_mode 0, full attention). Plain causal (right == 0, left
    unbounded): sparse_mode 3, rightDownCausal. Anything else: sparse_mode 4, the band
    ``diag - pre <= j <= diag + next`` around the bottom-right diagonal -- exactly
    flash-attn's window with pre = left, next = right (unbounded -> 2147483647).
    ``tokens_spelling`` is "tockens" (npu_fusion_attention) or "tokens" (inference ops).
    """
    if left is None and right is None:
        return {}
    kwargs = {"atten_mask": _compressed_mask(device)}
    if left is None and right == 0:
        kwargs["sparse_mode"] = 3
        return kwargs
    kwargs["sparse_mode"] = 4
    kwargs["pre_" + tokens_spelling] = _INF_TOKENS if left is None else left
    kwargs["next_" + tokens_spelling] = _INF_TOKENS if right is None else right
    return kwargs


def _npu_fixed(q, k, v, dropout_p, scale, left, right):
    """BSND: q (B, Sq, H, D), k/v (B, Sk, Hk, D); head_num is the query head count."""
    torch_npu = _torch_npu()
    kwargs = _sparse_kwargs(left, right, q.device, "tockens")
    out = torch_npu.npu_fusion_attention(
        q.contiguous(), k.contiguous(), v.contiguous(), q.shape[2], "BSND",
        scale=scale, keep_prob=1.0 - dropout_p, **kwargs)
    return out[0]


def _npu_varlen(q, k, v, cu_seqlens_q, cu_seqlens_k, dropout_p, scale, left, right):
    """TND: q (Tq, H, D), k/v (Tk, Hk, D); lengths as cumulative ends without the leading 0."""
    torch_npu = _torch_npu()
    kwargs = _sparse_kwargs(left, right, q.device, "tockens")
    heads = q.shape[1]
    q, k, v = q.contiguous(), k.contiguous(), v.contiguous()
    if hasattr(torch_npu, "npu_fusion_attention_v3"):
        # Tensor lengths: no host sync. cu_seqlens[1:] are the cumulative ends.
        out = torch_npu.npu_fusion_attention_v3(
            q, k, v, heads, "TND", scale=scale, keep_prob=1.0 - dropout_p,
            actual_seq_qlen=cu_seqlens_q[1:].to(torch.int64),
            actual_seq_kvlen=cu_seqlens_k[1:].to(torch.int64), **kwargs)
        return out[0]
    # Host List[int] (one sync). Leading sequences that are empty in q (no output rows) or in k
    # (rows that see no key: output 0) are peeled off first, so the lists never start with 0.
    ends_q = [int(x) for x in cu_seqlens_q[1:].tolist()]
    ends_k = [int(x) for x in cu_seqlens_k[1:].tolist()]
    start_q = start_k = 0
    while ends_q and (ends_q[0] == start_q or ends_k[0] == start_k):
        start_q, start_k = ends_q.pop(0), ends_k.pop(0)
    total_q = ends_q[-1] if ends_q else start_q
    out = q.new_zeros(q.shape[0], heads, v.shape[-1])
    if ends_q:
        part = torch_npu.npu_fusion_attention(
            q[start_q:total_q], k[start_k:ends_k[-1]], v[start_k:ends_k[-1]], heads, "TND",
            scale=scale, keep_prob=1.0 - dropout_p,
            actual_seq_qlen=[e - start_q for e in ends_q],
            actual_seq_kvlen=[e - start_k for e in ends_k], **kwargs)[0]
        if start_q == 0 and total_q == q.shape[0]:
            return part
        out = torch.cat([out[:start_q], part, out[total_q:]])
    return out


# ---------------------------------------------------------------------------------------------
# SDPA path (opt-in): plain torch, any device, flash-attn semantics via explicit masks.


def _visible(sq, sk, left, right, device):
    """(Sq, Sk) bool, True = may attend, with flash-attn's bottom-right alignment.

    ``sk`` may be a (B, 1, 1) tensor of per-batch key lengths (kv-cache), giving (B, Sq, Sk').
    """
    if torch.is_tensor(sk):
        width = int(sk.max()) if sk.numel() else 0
        lengths = sk
    else:
        width = lengths = sk
    i = torch.arange(sq, device=device).view(-1, 1)
    j = torch.arange(width, device=device).view(1, -1)
    diag = i + lengths - sq
    keep = j < lengths
    if left is not None:
        keep = keep & (j >= diag - left)
    if right is not None:
        keep = keep & (j <= diag + right)
    return keep


def _sdpa_core(q, k, v, keep, dropout_p, scale):
    """q (B, Sq, H, D), k/v (B, Sk, Hk, D), keep broadcastable to (B, H, Sq, Sk) or None."""
    heads, kv_heads = q.shape[2], k.shape[2]
    if heads != kv_heads:  # GQA/MQA: query head h reads kv head h // (H // Hk)
        k = k.repeat_interleave(heads // kv_heads, dim=2)
        v = v.repeat_interleave(heads // kv_heads, dim=2)
    qt, kt, vt = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
    if keep is None:
        out = F.scaled_dot_product_attention(qt, kt, vt, dropout_p=dropout_p, scale=scale)
        return out.transpose(1, 2)
    # Rows that see no key output 0 in flash-attn; SDPA would give NaN. Let them see every key
    # (finite, NaN-free gradients) and zero their output afterwards.
    empty = ~keep.any(dim=-1, keepdim=True)
    out = F.scaled_dot_product_attention(qt, kt, vt, attn_mask=keep | empty,
                                         dropout_p=dropout_p, scale=scale)
    out = out.masked_fill(empty, 0.0)
    return out.transpose(1, 2)


def _sdpa_fixed(q, k, v, dropout_p, scale, left, right):
    if k.shape[1] == 0:
        return q.new_zeros(q.shape[:3] + v.shape[3:])
    keep = None
    if left is not None or right is not None:
        keep = _visible(q.shape[1], k.shape[1], left, right, q.device)
    return _sdpa_core(q, k, v, keep, dropout_p, scale)


def _sdpa_varlen(q, k, v, cu_seqlens_q, cu_seqlens_k, dropout_p, scale, left, right):
    """One SDPA call per sequence (segments of the packed tokens)."""
    bounds_q = [int(x) for x in cu_seqlens_q.tolist()]
    bounds_k = [int(x) for x in cu_seqlens_k.tolist()]
    pieces = []
    for b in range(len(bounds_q) - 1):
        qs, qe, ks, ke = bounds_q[b], bounds_q[b + 1], bounds_k[b], bounds_k[b + 1]
        if qe == qs:
            continue
        pieces.append(_sdpa_fixed(q[None, qs:qe], k[None, ks:ke], v[None, ks:ke], dropout_p,
                                  scale, left, right)[0])
    done = bounds_q[-1] - bounds_q[0] if bounds_q else 0
    if done < q.shape[0]:  # rows outside cu_seqlens_q: not attended, output 0
        pieces.append(q.new_zeros((q.shape[0] - done,) + q.shape[1:2] + v.shape[2:]))
    return torch.cat(pieces) if pieces else q.new_zeros(q.shape[:2] + v.shape[2:])


# ---------------------------------------------------------------------------------------------
# Training-style functions.


def _run(which, q, k, v, dropout_p, scale, left, right):
    if which == "npu":
        return _npu_fixed(q, k, v, dropout_p, scale, left, right)
    return _sdpa_fixed(q, k, v, dropout_p, scale, left, right)


def _run_varlen(which, q, k, v, cu_q, cu_k, dropout_p, scale, left, right):
    if which == "npu":
        return _npu_varlen(q, k, v, cu_q, cu_k, dropout_p, scale, left, right)
    return _sdpa_varlen(q, k, v, cu_q, cu_k, dropout_p, scale, left, right)


def _flash_attn_func(which, q, k, v, dropout_p=0.0, softmax_scale=None, causal=False,
                     window_size=(-1, -1), softcap=0.0, alibi_slopes=None, deterministic=False,
                     return_attn_probs=False):
    """flash_attn_func: q (B, Sq, H, D), k/v (B, Sk, Hk, D) -> (B, Sq, H, D)."""
    _reject_unsupported(softcap, alibi_slopes, deterministic, return_attn_probs)
    left, right = _window(window_size, causal)
    return _run(which, q, k, v, dropout_p, _scale(softmax_scale, q), left, right)


def _flash_attn_qkvpacked_func(which, qkv, dropout_p=0.0, softmax_scale=None, causal=False,
                               window_size=(-1, -1), softcap=0.0, alibi_slopes=None,
                               deterministic=False, return_attn_probs=False):
    """flash_attn_qkvpacked_func: qkv (B, S, 3, H, D) -> (B, S, H, D)."""
    q, k, v = qkv.unbind(dim=2)
    return _flash_attn_func(which, q, k, v, dropout_p, softmax_scale, causal, window_size,
                            softcap, alibi_slopes, deterministic, return_attn_probs)


def _flash_attn_kvpacked_func(which, q, kv, dropout_p=0.0, softmax_scale=None, causal=False,
                              window_size=(-1, -1), softcap=0.0, alibi_slopes=None,
                              deterministic=False, return_attn_probs=False):
    """flash_attn_kvpacked_func: q (B, Sq, H, D), kv (B, Sk, 2, Hk, D) -> (B, Sq, H, D)."""
    k, v = kv.unbind(dim=2)
    return _flash_attn_func(which, q, k, v, dropout_p, softmax_scale, causal, window_size,
                            softcap, alibi_slopes, deterministic, return_attn_probs)


def _flash_attn_varlen_func(which, q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q,
                            max_seqlen_k, dropout_p=0.0, softmax_scale=None, causal=False,
                            window_size=(-1, -1), softcap=0.0, alibi_slopes=None,
                            deterministic=False, return_attn_probs=False, block_table=None):
    """flash_attn_varlen_func: q (Tq, H, D), k/v (Tk, Hk, D), cu_seqlens (B+1,) -> (Tq, H, D).

    max_seqlen_q/k are accepted and not needed. A paged ``block_table`` is not supported here.
    """
    _reject_unsupported(softcap, alibi_slopes, deterministic, return_attn_probs,
                        block_table=block_table)
    left, right = _window(window_size, causal)
    return _run_varlen(which, q, k, v, cu_seqlens_q, cu_seqlens_k, dropout_p,
                       _scale(softmax_scale, q), left, right)


def _flash_attn_varlen_qkvpacked_func(which, qkv, cu_seqlens, max_seqlen, dropout_p=0.0,
                                      softmax_scale=None, causal=False, window_size=(-1, -1),
                                      softcap=0.0, alibi_slopes=None, deterministic=False,
                                      return_attn_probs=False):
    """flash_attn_varlen_qkvpacked_func: qkv (T, 3, H, D) -> (T, H, D)."""
    q, k, v = qkv.unbind(dim=1)
    return _flash_attn_varlen_func(which, q, k, v, cu_seqlens, cu_seqlens, max_seqlen,
                                   max_seqlen, dropout_p, softmax_scale, causal, window_size,
                                   softcap, alibi_slopes, deterministic, return_attn_probs)


def _flash_attn_varlen_kvpacked_func(which, q, kv, cu_seqlens_q, cu_seqlens_k, max_seqlen_q,
                                     max_seqlen_k, dropout_p=0.0, softmax_scale=None,
                                     causal=False, window_size=(-1, -1), softcap=0.0,
                                     alibi_slopes=None, deterministic=False,
                                     return_attn_probs=False):
    """flash_attn_varlen_kvpacked_func: q (Tq, H, D), kv (Tk, 2, Hk, D) -> (Tq, H, D)."""
    k, v = kv.unbind(dim=1)
    return _flash_attn_varlen_func(which, q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q,
                                   max_seqlen_k, dropout_p, softmax_scale, causal, window_size,
                                   softcap, alibi_slopes, deterministic, return_attn_probs)


# ---------------------------------------------------------------------------------------------
# KV cache.


def _cache_lengths(cache_seqlens, batch, capacity, device):
    """cache_seqlens as an int64 (B,) tensor; None means the whole cache is valid."""
    if cache_seqlens is None:
        return torch.full((batch,), capacity, dtype=torch.int64, device=device)
    if isinstance(cache_seqlens, int):
        return torch.full((batch,), cache_seqlens, dtype=torch.int64, device=device)
    return cache_seqlens.to(torch.int64)


def _append_kv(k_cache, v_cache, k, v, lengths, cache_batch_idx, block_table):
    """Write k/v (B, Snew, Hk, D) into the caches IN PLACE at positions lengths[b] + t.

    Non-paged: cache row cache_batch_idx[b] (or b). Paged: position p of batch b lives in block
    block_table[b, p // page] at offset p % page. One index_put per cache, no host sync.
    """
    batch, snew = k.shape[0], k.shape[1]
    pos = lengths.view(batch, 1) + torch.arange(snew, device=lengths.device).view(1, snew)
    if block_table is not None:
        page = k_cache.shape[1]
        blocks = torch.gather(block_table.long(), 1, pos // page)
        index = (blocks, pos % page)
    else:
        rows = (cache_batch_idx.long() if cache_batch_idx is not None else
                torch.arange(batch, device=lengths.device))
        index = (rows.view(batch, 1).expand(batch, snew), pos)
    k_cache.index_put_(index, k.to(k_cache.dtype))
    v_cache.index_put_(index, v.to(v_cache.dtype))


def _npu_kvcache(q, k_cache, v_cache, kv_lengths, cache_batch_idx, block_table, scale, left,
                 right, return_softmax_lse):
    torch_npu = _torch_npu()
    batch, sq, heads, dim = q.shape
    kv_heads = k_cache.shape[2]
    q = q.contiguous()
    kwargs = {"num_heads": heads, "num_key_value_heads": kv_heads, "input_layout": "BSND"}
    if block_table is not None:
        # Paged: BSH/BSND queries take the cache as (blocknum, blocksize, H) -- a view of
        # flash-attn's (num_blocks, page_block_size, Hk, D).
        blocks, page = k_cache.shape[0], k_cache.shape[1]
        key = k_cache.view(blocks, page, kv_heads * dim)
        value = v_cache.view(blocks, page, kv_heads * dim)
        kwargs["block_table"] = block_table.to(torch.int32)
        kwargs["block_size"] = page
        capacity = block_table.shape[1] * page
    else:
        if cache_batch_idx is not None:
            key, value = k_cache.index_select(0, cache_batch_idx.long()), \
                v_cache.index_select(0, cache_batch_idx.long())
        else:
            key, value = k_cache[:batch], v_cache[:batch]
        key, value = key.contiguous(), value.contiguous()
        capacity = key.shape[1]
    lengths = [int(x) for x in kv_lengths.tolist()]  # PER-BATCH kv lengths, not cumulative
    mask = None
    if sq == 1 and left is not None:
        # Decode with a left window: the inference ops ignore pre/next tokens when Q_S == 1, so
        # pass an explicit (B, 1, 1, KV_S) mask, True = masked: keys before len - 1 - left.
        j = torch.arange(capacity, device=q.device).view(1, -1)
        mask = (j < (kv_lengths.view(-1, 1) - 1 - left)).view(batch, 1, 1, capacity)
    fused = getattr(torch_npu, "npu_fused_infer_attention_score", None)
    if fused is not None:
        if sq > 1:
            kwargs.update(_sparse_kwargs(left, right, q.device, "tokens"))
            if "sparse_mode" in kwargs:
                kwargs["inner_precise"] = 2  # rows that see no key (Sq > Sk) -> 0, like flash-attn
        elif mask is not None:
            kwargs["atten_mask"] = mask
        if return_softmax_lse:
            kwargs["softmax_lse_flag"] = True
        out, lse = fused(q, key, value, scale=scale, actual_seq_lengths_kv=lengths, **kwargs)
        if return_softmax_lse:
            return out, lse.squeeze(-1)  # (B, N, Sq, 1) -> flash-attn's (B, H, Sq)
        return out
    if sq != 1 or return_softmax_lse:
        raise NotImplementedError(
            "this torch_npu has no npu_fused_infer_attention_score; npu_incre_flash_attention "
            "only covers decoding (seqlen_q == 1) without return_softmax_lse")
    if mask is not None:
        kwargs["atten_mask"] = mask
    return torch_npu.npu_incre_flash_attention(q, key, value, scale_value=scale,
                                               actual_seq_lengths=lengths, **kwargs)


def _sdpa_kvcache(q, k_cache, v_cache, kv_lengths, cache_batch_idx, block_table, scale, left,
                  right):
    batch = q.shape[0]
    if block_table is not None:
        # (B, maxBlocks) pages -> (B, maxBlocks * page, Hk, D) in logical order.
        key = k_cache[block_table.long()].flatten(1, 2)
        value = v_cache[block_table.long()].flatten(1, 2)
    elif cache_batch_idx is not None:
        key = k_cache.index_select(0, cache_batch_idx.long())
        value = v_cache.index_select(0, cache_batch_idx.long())
    else:
        key, value = k_cache[:batch], v_cache[:batch]
    width = int(kv_lengths.max()) if batch else 0
    key, value = key[:, :width], value[:, :width]
    if width == 0:
        return q.new_zeros(q.shape)
    keep = _visible(q.shape[1], kv_lengths.view(batch, 1, 1), left, right, q.device)
    return _sdpa_core(q, key, value, keep.unsqueeze(1), 0.0, scale)


def _flash_attn_with_kvcache(which, q, k_cache, v_cache, k=None, v=None, rotary_cos=None,
                             rotary_sin=None, cache_seqlens=None, cache_batch_idx=None,
                             cache_leftpad=None, block_table=None, softmax_scale=None,
                             causal=False, window_size=(-1, -1), softcap=0.0,
                             rotary_interleaved=True, alibi_slopes=None, num_splits=0,
                             return_softmax_lse=False):
    """flash_attn_with_kvcache: appends k/v to the caches in place, then attends.

    q (B, Sq, H, D); k_cache/v_cache (B_cache, S_cache, Hk, D), or paged
    (num_blocks, page_block_size, Hk, D) with block_table (B, max_blocks) int32; k/v
    (B, Snew, Hk, D) are written at cache_seqlens[b] (int or (B,) int32) of cache row
    cache_batch_idx[b] (or b); q attends to the first cache_seqlens[b] + Snew positions.
    num_splits is a CUDA performance knob and is ignored.
    """
    _reject_unsupported(softcap, alibi_slopes, rotary_cos=rotary_cos, rotary_sin=rotary_sin,
                        cache_leftpad=cache_leftpad)
    if (k is None) != (v is None):
        raise ValueError("k and v must be given together")
    if block_table is not None and cache_batch_idx is not None:
        raise ValueError("cache_batch_idx is not supported with a paged KV cache (block_table)")
    if k is not None and cache_seqlens is None:
        raise ValueError("appending k/v needs cache_seqlens (where to write in the cache)")
    if return_softmax_lse and which != "npu":
        raise NotImplementedError(
            "return_softmax_lse=True: not available on the SDPA fallback")
    batch = q.shape[0]
    capacity = (block_table.shape[1] * k_cache.shape[1] if block_table is not None
                else k_cache.shape[1])
    lengths = _cache_lengths(cache_seqlens, batch, capacity, q.device)
    if k is not None:
        _append_kv(k_cache, v_cache, k, v, lengths, cache_batch_idx, block_table)
        lengths = lengths + k.shape[1]
    left, right = _window(window_size, causal)
    scale = _scale(softmax_scale, q)
    if which == "npu":
        return _npu_kvcache(q, k_cache, v_cache, lengths, cache_batch_idx, block_table, scale,
                            left, right, return_softmax_lse)
    return _sdpa_kvcache(q, k_cache, v_cache, lengths, cache_batch_idx, block_table, scale,
                         left, right)


# ---------------------------------------------------------------------------------------------
# The public functions (flash-attn 2.x signatures; see the _-prefixed implementations).

flash_attn_func = _dispatch("flash_attn_func", _flash_attn_func)
flash_attn_qkvpacked_func = _dispatch("flash_attn_qkvpacked_func", _flash_attn_qkvpacked_func)
flash_attn_kvpacked_func = _dispatch("flash_attn_kvpacked_func", _flash_attn_kvpacked_func)
flash_attn_varlen_func = _dispatch("flash_attn_varlen_func", _flash_attn_varlen_func)
flash_attn_varlen_qkvpacked_func = _dispatch("flash_attn_varlen_qkvpacked_func",
                                             _flash_attn_varlen_qkvpacked_func)
flash_attn_varlen_kvpacked_func = _dispatch("flash_attn_varlen_kvpacked_func",
                                            _flash_attn_varlen_kvpacked_func)
flash_attn_with_kvcache = _dispatch("flash_attn_with_kvcache", _flash_attn_with_kvcache)
