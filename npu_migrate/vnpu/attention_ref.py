"""Plain-torch references of attention semantics (moved here from tests/attention_reference.py,
which re-exports it). Nothing here imports the shim. The virtual NPU (attention.py) computes
torch_npu's fused attention operators with half (b); the tests use both halves.

Two independent halves:

(a) ``flash_*_ref``: naive flash-attn (v2) semantics, written from its documentation, used as
    the ground truth. Computed in float64, one (batch, head) at a time, with an explicit
    per-row key range, so it shares no code with the shim's mask construction:

    * q ``(B, Sq, H, D)``, k/v ``(B, Sk, Hk, D)``; ``H % Hk == 0`` and query head ``h`` reads
      key/value head ``h // (H // Hk)`` (GQA/MQA).
    * ``softmax_scale`` defaults to ``1/sqrt(D)``.
    * Causal is aligned to the bottom-right corner of the (Sq, Sk) score matrix: query row ``i``
      may see key ``j`` iff ``j <= i + Sk - Sq``.
    * ``window_size=(left, right)``, -1 meaning unbounded: row ``i`` sees keys
      ``i + Sk - Sq - left <= j <= i + Sk - Sq + right``. ``causal`` forces ``right = 0``.
    * A row that sees no key at all outputs 0.
    * varlen: ``cu_seqlens`` (B+1,) int32 starting at 0; sequence ``b`` is rows
      ``cu[b]:cu[b+1]``; zero-length sequences are allowed; each sequence is attended on its own.
    * kv-cache: for each batch row ``b`` (cache row ``cache_batch_idx[b]`` if given, or the pages
      of ``block_table[b]`` for a paged cache), the new ``k``/``v`` are written at positions
      ``cache_seqlens[b] ... cache_seqlens[b] + Snew - 1`` of the cache, then q attends to the
      first ``cache_seqlens[b] + Snew`` cached positions with the rules above (Sk = that length).

(b) ``npu_fusion_attention`` / ``npu_fusion_attention_v3`` / ``npu_incre_flash_attention`` /
    ``npu_fused_infer_attention_score``: a reference model of torch_npu's operators written from
    their documentation (op-plugin docs, see /work/shared/reference/torch_npu.md section 1.8).
    They are the kernels of the fake torch_npu (tests/fake_npu) and of the virtual NPU. They validate inputs strictly:
    whatever the documentation forbids, or what is most likely one of its traps, raises.
    Documented semantics modelled:

    * ``atten_mask``: bool/uint8 (int8 too for the inference ops); **True/1 = masked out**.
    * ``scale`` / ``scale_value`` default 1.0 (the caller must pass ``1/sqrt(D)``).
    * ``keep_prob``: dropout keep probability in (0, 1]; only 1.0 is checked numerically.
    * ``head_num`` / ``num_heads`` = number of query heads; GQA when ``Nq % Nkv == 0``.
    * ``sparse_mode`` 0 (mask as given + top-left band pre/next), 1 (full mask), 2 (top-left
      causal), 3 (bottom-right causal), 4 (band around the bottom-right diagonal:
      ``i + Skv - Sq - pre <= j <= i + Skv - Sq + next``). Modes 2-4 require the compressed
      2048x2048 mask, which must be ``triu(ones(2048, 2048), diagonal=1)`` (True above the
      diagonal). With ``atten_mask=None`` the fusion op ignores sparse_mode/pre/next and attends
      fully (a documented trap); the inference ops raise for modes 2-4 without the mask.
    * TND: ``actual_seq_qlen``/``actual_seq_kvlen`` are cumulative END offsets without the
      leading 0 (``[2, 4, 6]``), a zero-length sequence repeats the previous value, trailing 0s
      exclude batches. Host ``List[int]`` for npu_fusion_attention, Tensors for ``_v3``.
      Stricter than the docs (to catch the cu_seqlens trap): a list whose first entry is 0 is
      rejected; the last (non-excluded) entry must equal T.
    * Inference ops: ``actual_seq_lengths(_kv)`` are PER-BATCH lengths (not cumulative) in the
      BSH/BSND/BNSD layouts; paged KV via ``block_table`` (int32, (B, maxBlocks)) and
      ``block_size``, the cache laid out (blocknum, blocksize, H) or (blocknum, N, blocksize, D).
      Q_S == 1 ignores sparse_mode/pre/next (documented) and accepts only inner_precise 0/1.
    * Fully masked ("invalid") rows: the fusion op corrects them automatically (output 0, as
      documented for e.g. mode 3 with Sq > Skv); the fused inference op only when
      ``inner_precise`` has bit 1 set (2 or 3) -- otherwise this model returns NaN for such rows
      (undefined on hardware), so a caller that forgets the flag fails loudly. An empty KV
      (length 0) gives zeros, as documented.
    * Returns: npu_fusion_attention ``(out, softmax_max, softmax_sum, softmax_out, seed, offset,
      mask_len)`` with three ints; ``_v3`` the same first four plus seed/offset as tensors;
      npu_incre_flash_attention ``out``; npu_fused_infer_attention_score ``(out, lse)`` where lse
      is ``(B, N, Q_S, 1)`` float32 if ``softmax_lse_flag`` else a (1,) zero tensor.
"""

import math

import torch

INF_TOKENS = 2147483647
COMPRESSED = 2048


# =============================================================================================
# (a) flash-attn semantics, naive.


def _key_range(i, sq, sk, left, right, causal):
    """Inclusive [lo, hi] of the keys query row ``i`` may see (flash-attn, bottom-right)."""
    if causal:
        right = 0
    diag = i + sk - sq
    lo = 0 if left < 0 else max(0, diag - left)
    hi = sk - 1 if right < 0 else min(sk - 1, diag + right)
    return lo, hi


def _naive_one(q, k, v, causal, window_size, scale):
    """One sequence: q (Sq, H, D), k/v (Sk, Hk, D) -> (Sq, H, Dv) in float64."""
    sq, nh, _ = q.shape
    sk, nkv, _ = k.shape
    group = nh // nkv
    left, right = window_size
    rows = []
    for i in range(sq):
        lo, hi = _key_range(i, sq, sk, left, right, causal)
        heads = []
        for h in range(nh):
            if lo > hi:
                heads.append(q.new_zeros(v.shape[-1]))
                continue
            kh = k[lo:hi + 1, h // group]
            vh = v[lo:hi + 1, h // group]
            scores = (kh @ q[i, h]) * scale
            heads.append(torch.softmax(scores, dim=0) @ vh)
        rows.append(torch.stack(heads))
    if not rows:
        return q.new_zeros(0, nh, v.shape[-1])
    return torch.stack(rows)


def flash_attn_ref(q, k, v, softmax_scale=None, causal=False, window_size=(-1, -1)):
    """flash_attn_func: q (B, Sq, H, D), k/v (B, Sk, Hk, D) -> (B, Sq, H, D), float64."""
    scale = softmax_scale if softmax_scale is not None else 1.0 / math.sqrt(q.shape[-1])
    q, k, v = q.double(), k.double(), v.double()
    return torch.stack(
        [_naive_one(q[b], k[b], v[b], causal, window_size, scale) for b in range(q.shape[0])]
    )


def flash_attn_varlen_ref(q, k, v, cu_seqlens_q, cu_seqlens_k, softmax_scale=None, causal=False,
                          window_size=(-1, -1)):
    """flash_attn_varlen_func: q (Tq, H, D), k/v (Tk, Hk, D) -> (Tq, H, D), float64."""
    scale = softmax_scale if softmax_scale is not None else 1.0 / math.sqrt(q.shape[-1])
    q, k, v = q.double(), k.double(), v.double()
    cq = [int(x) for x in cu_seqlens_q]
    ck = [int(x) for x in cu_seqlens_k]
    pieces = []
    for b in range(len(cq) - 1):
        pieces.append(_naive_one(q[cq[b]:cq[b + 1]], k[ck[b]:ck[b + 1]], v[ck[b]:ck[b + 1]],
                                 causal, window_size, scale))
    out = torch.cat(pieces) if pieces else q.new_zeros(0, q.shape[1], v.shape[-1])
    if out.shape[0] < q.shape[0]:  # rows past cu[-1] are not attended; compare only up to it
        out = torch.cat([out, q.new_zeros(q.shape[0] - out.shape[0], q.shape[1], v.shape[-1])])
    return out


def flash_attn_kvcache_ref(q, k_cache, v_cache, k=None, v=None, cache_seqlens=None,
                           cache_batch_idx=None, block_table=None, softmax_scale=None,
                           causal=False, window_size=(-1, -1)):
    """flash_attn_with_kvcache on copies: returns (out float64, new k_cache, new v_cache)."""
    k_cache = k_cache.clone()
    v_cache = v_cache.clone()
    batch = q.shape[0]
    snew = 0 if k is None else k.shape[1]
    if block_table is not None:
        page = k_cache.shape[1]
        capacity = block_table.shape[1] * page
    else:
        capacity = k_cache.shape[1]
    if cache_seqlens is None:
        lengths = [capacity] * batch
    elif isinstance(cache_seqlens, int):
        lengths = [cache_seqlens] * batch
    else:
        lengths = [int(x) for x in cache_seqlens]

    def slot(b, pos):
        """(cache row, position) of logical position ``pos`` of batch row ``b``."""
        if block_table is not None:
            return int(block_table[b, pos // page]), pos % page
        row = int(cache_batch_idx[b]) if cache_batch_idx is not None else b
        return row, pos

    for b in range(batch):
        for t in range(snew):
            row, pos = slot(b, lengths[b] + t)
            k_cache[row, pos] = k[b, t]
            v_cache[row, pos] = v[b, t]
    outs = []
    for b in range(batch):
        total = lengths[b] + snew
        keys = torch.stack([k_cache[slot(b, p)] for p in range(total)]) if total else \
            k_cache.new_zeros(0, *k_cache.shape[2:])
        vals = torch.stack([v_cache[slot(b, p)] for p in range(total)]) if total else \
            v_cache.new_zeros(0, *v_cache.shape[2:])
        outs.append(flash_attn_ref(q[b:b + 1], keys[None], vals[None], softmax_scale, causal,
                                   window_size)[0])
    return torch.stack(outs), k_cache, v_cache


# =============================================================================================
# (b) reference model of the torch_npu attention operators.


class NpuOpError(ValueError):
    """An input the documented torch_npu operator does not accept (raised by the model)."""


def _require(condition, message):
    if not condition:
        raise NpuOpError(message)


# ---------------------------------------------------------------------------------------------
# The operators' signatures per torch_npu version (rules/torch_npu_api.json): the virtual NPU and
# the tests' fake torch_npu both bind calls to these, so a wrong keyword fails as on the wheel.


def _proto_fusion_271(query, key, value, head_num, input_layout, pse=None, padding_mask=None,
                      atten_mask=None, scale=1.0, keep_prob=1.0, pre_tockens=INF_TOKENS,
                      next_tockens=INF_TOKENS, inner_precise=0, prefix=None, actual_seq_qlen=None,
                      actual_seq_kvlen=None, sparse_mode=0, gen_mask_parallel=True, sync=False,
                      softmax_layout=""):
    pass


def _proto_fusion_214(query, key, value, head_num, input_layout, pse=None, padding_mask=None,
                      atten_mask=None, scale=1.0, keep_prob=1.0, pre_tockens=INF_TOKENS,
                      next_tockens=INF_TOKENS, inner_precise=0, prefix=None, actual_seq_qlen=None,
                      actual_seq_kvlen=None, sparse_mode=0, gen_mask_parallel=True, sync=False,
                      softmax_layout="", sink=None, dropout_mask=None, seed=0, offset=0):
    pass


def _proto_fusion_v3(query, key, value, head_num, input_layout, pse=None, padding_mask=None,
                     atten_mask=None, scale=1.0, keep_prob=1.0, pre_tockens=INF_TOKENS,
                     next_tockens=INF_TOKENS, inner_precise=0, prefix=None, actual_seq_qlen=None,
                     actual_seq_kvlen=None, sparse_mode=0, gen_mask_parallel=True, sync=False,
                     softmax_layout="", sink=None):
    pass


def _proto_incre(query, key, value, *, padding_mask=None, atten_mask=None, pse_shift=None,
                 actual_seq_lengths=None, antiquant_scale=None, antiquant_offset=None,
                 block_table=None, dequant_scale1=None, quant_scale1=None, dequant_scale2=None,
                 quant_scale2=None, quant_offset2=None, kv_padding_size=None, num_heads=1,
                 scale_value=1.0, input_layout="BSH", num_key_value_heads=0, block_size=0,
                 inner_precise=1):
    pass


def _proto_fused_infer(query, key, value, *, pse_shift=None, atten_mask=None,
                       actual_seq_lengths=None, actual_seq_lengths_kv=None, dequant_scale1=None,
                       quant_scale1=None, dequant_scale2=None, quant_scale2=None,
                       quant_offset2=None, antiquant_scale=None, antiquant_offset=None,
                       key_antiquant_scale=None, key_antiquant_offset=None,
                       value_antiquant_scale=None, value_antiquant_offset=None,
                       block_table=None, query_padding_size=None, kv_padding_size=None,
                       key_shared_prefix=None, value_shared_prefix=None,
                       actual_shared_prefix_len=None, query_rope=None, key_rope=None,
                       key_rope_antiquant_scale=None, num_heads=1, scale=1.0,
                       pre_tokens=INF_TOKENS, next_tokens=INF_TOKENS, input_layout="BSH",
                       num_key_value_heads=0, sparse_mode=0, inner_precise=0, block_size=0,
                       antiquant_mode=0, key_antiquant_mode=0, value_antiquant_mode=0,
                       softmax_lse_flag=False):
    pass


def _proto_prompt(query, key, value, *, pse_shift=None, padding_mask=None, atten_mask=None,
                  actual_seq_lengths=None, deq_scale1=None, quant_scale1=None, deq_scale2=None,
                  quant_scale2=None, quant_offset2=None, num_heads=1, scale_value=1.0,
                  pre_tokens=INF_TOKENS, next_tokens=0, input_layout="BSH", num_key_value_heads=0,
                  actual_seq_lengths_kv=None, sparse_mode=0):
    pass


_PROTOTYPES = {
    "2.7.1": {"npu_fusion_attention": _proto_fusion_271},
    "2.14.0": {"npu_fusion_attention": _proto_fusion_214,
               "npu_fusion_attention_v3": _proto_fusion_v3},
}
_COMMON = {"npu_incre_flash_attention": _proto_incre,
           "npu_fused_infer_attention_score": _proto_fused_infer,
           "npu_prompt_flash_attention": _proto_prompt}


def prototype(name: str, version: str):
    """The signature-only function of operator ``name`` in torch_npu ``version``; KeyError when
    that version lacks it."""
    table = _PROTOTYPES["2.7.1" if version == "2.7.1" else "2.14.0"]
    return table[name] if name in table else _COMMON[name]


def _not_modelled(name, value):
    if value is not None:
        raise NotImplementedError("the reference model does not implement {}".format(name))


_EXPECTED = {}  # device -> triu(ones(2048, 2048), 1)
_VERIFIED = {}  # (data_ptr, version) of masks already checked -> True


def _compressed_mask_ok(mask):
    """Modes 2/3/4: the optimized 2048x2048 mask, True strictly above the diagonal."""
    if mask is None:
        return False
    m = mask
    while m.dim() > 2 and m.shape[0] == 1:
        m = m[0]
    if tuple(m.shape) != (COMPRESSED, COMPRESSED):
        return False
    key = (m.data_ptr(), m._version, m.dtype, tuple(m.stride()))
    if key in _VERIFIED:  # the same unchanged tensor (the shim caches it per device)
        return True
    expected = _EXPECTED.get(str(m.device))
    if expected is None:
        expected = torch.triu(torch.ones(COMPRESSED, COMPRESSED, dtype=torch.bool,
                                         device=m.device), 1)
        _EXPECTED[str(m.device)] = expected
    ok = bool(torch.equal(m.bool(), expected))
    if ok:
        _VERIFIED[key] = True
    return ok


def _band(sq, sk, sparse_mode, pre, nxt, device):
    """(Sq, Sk) bool, True = masked, for the mask-less part of a sparse mode."""
    i = torch.arange(sq, device=device).view(-1, 1)
    j = torch.arange(sk, device=device).view(1, -1)
    if sparse_mode == 0:  # band limits relative to the top-left diagonal
        return (j - i > nxt) | (i - j > pre)
    if sparse_mode == 1:
        return torch.zeros(sq, sk, dtype=torch.bool, device=device)
    if sparse_mode == 2:  # leftUpCausal
        return j > i
    diag = i + (sk - sq)
    if sparse_mode == 3:  # rightDownCausal
        return j > diag
    if sparse_mode == 4:  # band, origin at the bottom-right
        return (j > diag + nxt) | (j < diag - pre)
    raise NotImplementedError("sparse_mode {} is not modelled".format(sparse_mode))


def _softmax_attend(q, k, v, masked, scale, keep_prob, invalid_value):
    """q (N, Sq, D), k/v (Nkv, Sk, D), masked (N|1, Sq, Sk) True = out.

    Returns (out (N, Sq, Dv) in q's dtype, row max (N, Sq), row sum (N, Sq), invalid rows
    (N|1, Sq)). Rows with every key masked get ``invalid_value`` (0.0 or NaN).
    """
    n, nkv = q.shape[0], k.shape[0]
    _require(n % nkv == 0, "query heads {} must be a multiple of key/value heads {}".format(n, nkv))
    group = n // nkv
    if group > 1:
        k = k.repeat_interleave(group, dim=0)
        v = v.repeat_interleave(group, dim=0)
    scores = torch.matmul(q.float(), k.float().transpose(-1, -2)) * scale
    invalid = masked.all(dim=-1) if masked.shape[-1] else torch.ones(
        masked.shape[:-1], dtype=torch.bool, device=q.device)
    # Fully masked rows: give them a harmless finite row so autograd stays NaN-free, then
    # replace their output below.
    safe_mask = masked & ~invalid.unsqueeze(-1)
    scores = scores.masked_fill(safe_mask, float("-inf"))
    if scores.shape[-1] == 0:
        probs = scores
        row_max = scores.new_zeros(scores.shape[:-1])
        row_sum = scores.new_zeros(scores.shape[:-1])
    else:
        row_max = scores.detach().amax(dim=-1)
        probs = torch.softmax(scores, dim=-1)
        row_sum = torch.exp(scores.detach() - row_max.unsqueeze(-1)).sum(dim=-1)
    if keep_prob < 1.0:
        keep = torch.rand_like(probs) < keep_prob
        probs = probs * keep / keep_prob
    out = torch.matmul(probs, v.float()) if probs.shape[-1] else \
        probs.new_zeros(n, q.shape[1], v.shape[-1])
    fill = out.new_full((), invalid_value)
    out = torch.where(invalid.unsqueeze(-1).expand_as(out), fill, out)
    return out.to(q.dtype), row_max, row_sum, invalid


def _check_qkv(query, key, value, allowed=(torch.float16, torch.bfloat16, torch.float32)):
    _require(query.dtype == key.dtype == value.dtype,
             "query/key/value must share a dtype, got {}, {}, {}".format(
                 query.dtype, key.dtype, value.dtype))
    _require(query.dtype in allowed, "dtype {} is not supported".format(query.dtype))


def _check_mask_dtype(mask, allowed=(torch.bool, torch.uint8)):
    if mask is not None:
        _require(mask.dtype in allowed,
                 "atten_mask must be one of {} (True/1 = masked out), got {}".format(
                     allowed, mask.dtype))


def _to_bnsd(x, layout, heads):
    """A query/key/value of ``layout`` as (B, N, S, D); TND handled by the caller."""
    if layout == "BSND":
        return x.transpose(1, 2)
    if layout == "BNSD":
        return x
    if layout == "BSH":
        b, s, h = x.shape
        _require(h % heads == 0, "H={} is not a multiple of the head count {}".format(h, heads))
        return x.view(b, s, heads, h // heads).transpose(1, 2)
    if layout == "SBH":
        s, b, h = x.shape
        _require(h % heads == 0, "H={} is not a multiple of the head count {}".format(h, heads))
        return x.view(s, b, heads, h // heads).permute(1, 2, 0, 3)
    raise NpuOpError("unsupported input_layout {!r}".format(layout))


def _from_bnsd(x, layout):
    if layout == "BSND":
        return x.transpose(1, 2)
    if layout == "BNSD":
        return x
    if layout == "BSH":
        b, n, s, d = x.shape
        return x.transpose(1, 2).reshape(b, s, n * d)
    if layout == "SBH":
        b, n, s, d = x.shape
        return x.permute(2, 0, 1, 3).reshape(s, b, n * d)
    raise NpuOpError("unsupported input_layout {!r}".format(layout))


def _heads_of(x, layout, head_num=None):
    if layout in ("BSND", "TND"):
        return x.shape[-2]
    if layout == "BNSD":
        return x.shape[1]
    return head_num


def _cumulative(name, values, total):
    """Validate a TND cumulative-end list; return the per-batch [start, end) pairs."""
    _require(len(values) > 0, "{} must not be empty".format(name))
    _require(all(int(v) >= 0 for v in values), "{} has a negative entry".format(name))
    _require(int(values[0]) != 0,
             "{} starts with 0: these are cumulative END offsets without the leading 0 "
             "(cu_seqlens[1:]), e.g. lengths 2,2,2 -> [2, 4, 6]".format(name))
    # Trailing zeros exclude batches (documented); strip them.
    used = [int(v) for v in values]
    while used and used[-1] == 0:
        used.pop()
    for a, b in zip(used, used[1:]):
        _require(b >= a, "{} must be cumulative (non-decreasing), got {}".format(name, list(values)))
    _require(used[-1] == total,
             "{} must end at the number of tokens T={}, got {}".format(name, total, used[-1]))
    starts = [0] + used[:-1]
    spans = list(zip(starts, used))
    spans += [(used[-1], used[-1])] * (len(values) - len(used))  # excluded batches: empty
    return spans


def _fusion_attention(query, key, value, head_num, input_layout, pse, padding_mask, atten_mask,
                      scale, keep_prob, pre_tockens, next_tockens, inner_precise, prefix,
                      actual_seq_qlen, actual_seq_kvlen, sparse_mode, lengths_are_tensors):
    _not_modelled("pse", pse)
    _require(padding_mask is None, "padding_mask is not supported (documented)")
    _not_modelled("prefix", prefix)
    _check_qkv(query, key, value)
    _check_mask_dtype(atten_mask)
    _require(isinstance(head_num, int) and head_num > 0, "head_num must be a positive int")
    _require(input_layout in ("BSH", "SBH", "BSND", "BNSD", "TND"),
             "unsupported input_layout {!r}".format(input_layout))
    _require(isinstance(scale, (int, float)), "scale must be a float")
    _require(0.0 < keep_prob <= 1.0, "keep_prob must be in (0, 1], got {}".format(keep_prob))
    _require(sparse_mode in range(0, 9), "sparse_mode must be 0..8")
    if sparse_mode > 4:
        raise NotImplementedError("sparse_mode {} is not modelled".format(sparse_mode))
    _require(inner_precise in (0, 1, 2), "inner_precise must be 0, 1 or 2")
    _require(query.shape[-1] == key.shape[-1] and key.shape[-1] >= value.shape[-1]
             if input_layout in ("BSND", "BNSD", "TND") else True,
             "Dq must equal Dk and Dk >= Dv")

    use_mask = atten_mask is not None
    if use_mask and sparse_mode in (2, 3, 4):
        _require(_compressed_mask_ok(atten_mask),
                 "sparse_mode {} needs the compressed 2048x2048 mask "
                 "triu(ones(2048, 2048), diagonal=1).bool() (True = masked)".format(sparse_mode))

    def masked_for(sq, sk, full_mask_slice):
        if not use_mask:  # documented: no mask -> sparse_mode/pre/next ignored, full attention
            return torch.zeros(sq, sk, dtype=torch.bool, device=query.device)
        band = _band(sq, sk, sparse_mode, pre_tockens, next_tockens, query.device)
        if sparse_mode in (0, 1):
            return band | full_mask_slice
        return band

    if input_layout == "TND":
        _require(actual_seq_qlen is not None and actual_seq_kvlen is not None,
                 "TND needs actual_seq_qlen and actual_seq_kvlen")
        if lengths_are_tensors:
            _require(torch.is_tensor(actual_seq_qlen) and torch.is_tensor(actual_seq_kvlen),
                     "npu_fusion_attention_v3 takes actual_seq_qlen/kvlen as Tensors")
            _require(not actual_seq_qlen.is_floating_point()
                     and not actual_seq_kvlen.is_floating_point(),
                     "actual_seq_qlen/kvlen must be integer tensors")
            qlen = actual_seq_qlen.tolist()
            kvlen = actual_seq_kvlen.tolist()
        else:
            for name, val in (("actual_seq_qlen", actual_seq_qlen),
                              ("actual_seq_kvlen", actual_seq_kvlen)):
                _require(isinstance(val, (list, tuple)) and all(
                    isinstance(x, int) and not isinstance(x, bool) for x in val),
                    "{} must be a host List[int] (int[]), got {}".format(name, type(val).__name__))
            qlen, kvlen = list(actual_seq_qlen), list(actual_seq_kvlen)
        _require(len(qlen) == len(kvlen), "actual_seq_qlen and actual_seq_kvlen differ in length")
        _require(query.dim() == 3 and key.dim() == 3 and value.dim() == 3, "TND tensors are 3-D")
        _require(query.shape[1] == head_num, "head_num {} != query heads {}".format(
            head_num, query.shape[1]))
        q_spans = _cumulative("actual_seq_qlen", qlen, query.shape[0])
        k_spans = _cumulative("actual_seq_kvlen", kvlen, key.shape[0])
        _require(key.shape[0] == value.shape[0], "key and value token counts differ")
        if use_mask and sparse_mode in (0, 1):
            maxq = max(e - s for s, e in q_spans)
            maxk = max(e - s for s, e in k_spans)
            _require(tuple(atten_mask.shape) == (maxq, maxk),
                     "TND modes 0/1 take an SS mask (maxSq, maxSkv)")
        outs, maxes, sums = [], [], []
        for (qs, qe), (ks, ke) in zip(q_spans, k_spans):
            if qe == qs:
                continue
            sq, sk = qe - qs, ke - ks
            full = atten_mask[:sq, :sk].bool() if use_mask and sparse_mode in (0, 1) else None
            masked = masked_for(sq, sk, full)
            out, mx, sm, _ = _softmax_attend(query[qs:qe].transpose(0, 1),
                                             key[ks:ke].transpose(0, 1),
                                             value[ks:ke].transpose(0, 1), masked.unsqueeze(0),
                                             scale, keep_prob, 0.0)
            outs.append(out.transpose(0, 1))
            maxes.append(mx.transpose(0, 1))
            sums.append(sm.transpose(0, 1))
        out = torch.cat(outs) if outs else query.new_zeros(0, head_num, value.shape[-1])
        row_max = torch.cat(maxes) if maxes else query.new_zeros(0, head_num, dtype=torch.float32)
        row_sum = torch.cat(sums) if sums else query.new_zeros(0, head_num, dtype=torch.float32)
        stats = (row_max.unsqueeze(-1).expand(-1, -1, 8).contiguous(),
                 row_sum.unsqueeze(-1).expand(-1, -1, 8).contiguous())
        return out, stats

    _require(actual_seq_qlen is None and actual_seq_kvlen is None,
             "actual_seq_qlen/kvlen are for the TND layout")
    nq = _heads_of(query, input_layout, head_num)
    _require(nq == head_num, "head_num {} != query heads {}".format(head_num, nq))
    q = _to_bnsd(query, input_layout, head_num)
    nkv = _heads_of(key, input_layout, None)
    if nkv is None:  # BSH/SBH: derive Nkv from H_kv and D
        nkv = key.shape[-1] // q.shape[-1]
    k = _to_bnsd(key, input_layout, nkv)
    v = _to_bnsd(value, input_layout, nkv)
    _require(q.shape[-1] == k.shape[-1] and k.shape[-1] >= v.shape[-1],
             "Dq must equal Dk and Dk >= Dv")
    b, _, sq, _ = q.shape
    sk = k.shape[2]
    full = None
    if use_mask and sparse_mode in (0, 1):
        _require(atten_mask.dim() in (2, 4), "atten_mask must be BNSS, B1SS, 11SS or SS")
        _require(tuple(atten_mask.shape[-2:]) == (sq, sk),
                 "atten_mask must end in (Sq, Skv)=({}, {})".format(sq, sk))
        full = atten_mask.bool()
        if full.dim() == 2:
            full = full.view(1, 1, sq, sk)
    outs, maxes, sums = [], [], []
    for bi in range(b):
        fm = None
        if full is not None:
            fm = full[bi if full.shape[0] > 1 else 0]
        masked = masked_for(sq, sk, fm if fm is not None else None)
        if masked.dim() == 2:
            masked = masked.unsqueeze(0)
        out, mx, sm, _ = _softmax_attend(q[bi], k[bi], v[bi], masked, scale, keep_prob, 0.0)
        outs.append(out)
        maxes.append(mx)
        sums.append(sm)
    out = _from_bnsd(torch.stack(outs), input_layout)
    stats = (torch.stack(maxes).unsqueeze(-1).expand(-1, -1, -1, 8).contiguous(),
             torch.stack(sums).unsqueeze(-1).expand(-1, -1, -1, 8).contiguous())
    return out, stats


def npu_fusion_attention(query, key, value, head_num, input_layout, pse=None, padding_mask=None,
                         atten_mask=None, scale=1.0, keep_prob=1.0, pre_tockens=INF_TOKENS,
                         next_tockens=INF_TOKENS, inner_precise=0, prefix=None,
                         actual_seq_qlen=None, actual_seq_kvlen=None, sparse_mode=0,
                         gen_mask_parallel=True, sync=False, softmax_layout="", sink=None,
                         dropout_mask=None, seed=0, offset=0):
    """Model of torch_npu.npu_fusion_attention (host List[int] lengths); a 7-tuple."""
    _not_modelled("sink", sink)
    _not_modelled("dropout_mask", dropout_mask)
    _require(softmax_layout in ("", "BSND", "TND", "SBH", "BSH", "BNSD"), "bad softmax_layout")
    out, (row_max, row_sum) = _fusion_attention(
        query, key, value, head_num, input_layout, pse, padding_mask, atten_mask, scale,
        keep_prob, pre_tockens, next_tockens, inner_precise, prefix, actual_seq_qlen,
        actual_seq_kvlen, sparse_mode, lengths_are_tensors=False)
    reserved = query.new_zeros(0)
    return out, row_max, row_sum, reserved, 0, 0, 0


def npu_fusion_attention_v3(query, key, value, head_num, input_layout, pse=None,
                            padding_mask=None, atten_mask=None, scale=1.0, keep_prob=1.0,
                            pre_tockens=INF_TOKENS, next_tockens=INF_TOKENS, inner_precise=0,
                            prefix=None, actual_seq_qlen=None, actual_seq_kvlen=None,
                            sparse_mode=0, gen_mask_parallel=True, sync=False, softmax_layout="",
                            sink=None):
    """Model of torch_npu.npu_fusion_attention_v3 (Tensor lengths); a 6-tuple of tensors."""
    _not_modelled("sink", sink)
    out, (row_max, row_sum) = _fusion_attention(
        query, key, value, head_num, input_layout, pse, padding_mask, atten_mask, scale,
        keep_prob, pre_tockens, next_tockens, inner_precise, prefix, actual_seq_qlen,
        actual_seq_kvlen, sparse_mode, lengths_are_tensors=True)
    zero = torch.zeros((), dtype=torch.int64, device=query.device)
    return out, row_max, row_sum, query.new_zeros(0), zero, zero.clone()


# ---------------------------------------------------------------------------------------------
# Inference operators.


def _per_batch(name, values, batch, limit):
    """Per-batch lengths: List[int] of length 1 (broadcast) or >= B (first B used)."""
    _require(isinstance(values, (list, tuple)) and all(
        isinstance(x, int) and not isinstance(x, bool) for x in values),
        "{} must be a host List[int], got {}".format(name, type(values).__name__))
    _require(len(values) == 1 or len(values) >= batch,
             "{} must have 1 or >= B={} entries, got {}".format(name, batch, len(values)))
    lengths = [values[0]] * batch if len(values) == 1 else list(values[:batch])
    for x in lengths:
        _require(0 <= x <= limit,
                 "{} entries are PER-BATCH lengths in [0, {}], got {} (cumulative?)".format(
                     name, limit, list(values)))
    return lengths


def _gather_kv(key, value, b, length, block_table, block_size, nkv, d):
    """The first ``length`` positions of batch ``b``'s KV as (Nkv, length, D)."""
    if block_table is None:
        return key[b, :, :length], value[b, :, :length]
    needed = (length + block_size - 1) // block_size
    _require(needed <= block_table.shape[1],
             "block_table has {} columns, batch {} needs {}".format(
                 block_table.shape[1], b, needed))
    blocks = block_table[b, :needed].long()
    for blk in blocks.tolist():
        _require(0 <= blk < key.shape[0], "block id {} out of range".format(blk))

    def pages(cache):
        if cache.dim() == 3:  # (blocknum, blocksize, H)
            x = cache[blocks].reshape(-1, nkv, d)[:length]
            return x.transpose(0, 1)
        x = cache[blocks]  # (n, Nkv, blocksize, D)
        return x.permute(1, 0, 2, 3).reshape(nkv, -1, d)[:, :length]

    return pages(key), pages(value)


def _infer_attention(op, query, key, value, atten_mask, actual_seq_lengths,
                     actual_seq_lengths_kv, block_table, num_heads, scale, pre_tokens,
                     next_tokens, input_layout, num_key_value_heads, sparse_mode, inner_precise,
                     block_size, softmax_lse_flag):
    _check_qkv(query, key, value)
    _check_mask_dtype(atten_mask, (torch.bool, torch.int8, torch.uint8))
    _require(input_layout in ("BSH", "BSND", "BNSD"),
             "input_layout {!r} is not modelled/supported".format(input_layout))
    _require(query.is_contiguous() and key.is_contiguous() and value.is_contiguous(),
             "non-contiguous tensors are not supported")
    _require(tuple(key.shape) == tuple(value.shape), "key and value shapes must match")
    _require(isinstance(num_heads, int) and num_heads > 0, "num_heads must be a positive int")
    nkv = num_key_value_heads or num_heads
    _require(num_heads % nkv == 0 and num_heads // nkv <= 64,
             "num_heads must be a multiple of num_key_value_heads (ratio <= 64)")
    _require(isinstance(scale, (int, float)), "scale must be a float")
    q = _to_bnsd(query, input_layout, num_heads)
    _require(q.shape[1] == num_heads, "num_heads {} != query heads {}".format(num_heads, q.shape[1]))
    batch, _, sq, d = q.shape
    paged = block_table is not None
    if paged:
        _require(block_table.dtype == torch.int32 and block_table.dim() == 2
                 and block_table.shape[0] == batch, "block_table must be int32 (B, maxBlocks)")
        _require(actual_seq_lengths_kv is not None, "paged attention needs actual_seq_lengths_kv")
        _require(isinstance(block_size, int) and block_size > 0, "paged attention needs block_size")
        if op == "fused" and sq > 1:
            _require(block_size % 128 == 0 and 128 <= block_size <= 512,
                     "Q_S > 1 paged attention: block_size must be a multiple of 128 in [128, 512]")
        else:
            _require(block_size % 16 == 0, "paged attention: block_size must be 16-aligned")
        if key.dim() == 3:
            _require(key.shape[1] == block_size and key.shape[2] == nkv * d,
                     "paged KV (blocknum, blocksize, H) must have blocksize={} and H={}".format(
                         block_size, nkv * d))
        else:
            _require(input_layout == "BNSD", "BSH/BSND queries take paged KV as (blocknum, "
                                             "blocksize, H) only")
            _require(key.dim() == 4 and key.shape[1] == nkv and key.shape[2] == block_size,
                     "paged KV must be (blocknum, blocksize, H) or (blocknum, Nkv, blocksize, D)")
        kv_capacity = block_table.shape[1] * block_size
    else:
        _require(block_size == 0, "block_size is only for paged attention")
        k = _to_bnsd(key, input_layout, nkv)
        v = _to_bnsd(value, input_layout, nkv)
        _require(k.shape[0] == batch, "key batch {} != query batch {}".format(k.shape[0], batch))
        _require(k.shape[1] == nkv, "num_key_value_heads {} != key heads {}".format(nkv, k.shape[1]))
        kv_capacity = k.shape[2]
    kv_lengths = ([kv_capacity] * batch if actual_seq_lengths_kv is None else
                  _per_batch("actual_seq_lengths_kv", actual_seq_lengths_kv, batch, kv_capacity))

    if sq == 1:
        # Q_S == 1: sparse_mode, pre_tokens, next_tokens and actual_seq_lengths are ignored.
        _require(inner_precise in (0, 1), "Q_S == 1 supports inner_precise 0 and 1 only")
        q_lengths = [1] * batch
        mask = None
        if atten_mask is not None:
            m = atten_mask.bool()
            _require(m.dim() in (2, 3, 4) and m.shape[0] == batch and m.shape[-1] >= kv_capacity
                     and all(s == 1 for s in m.shape[1:-1]),
                     "Q_S == 1 atten_mask must be (B, KV_S), (B, 1, KV_S) or (B, 1, 1, KV_S)")
            mask = m.reshape(batch, m.shape[-1])
    else:
        _require(sparse_mode in (0, 1, 2, 3, 4), "sparse_mode must be 0..4")
        _require(inner_precise in (0, 1, 2, 3), "inner_precise must be 0..3")
        q_lengths = ([sq] * batch if actual_seq_lengths is None else
                     _per_batch("actual_seq_lengths", actual_seq_lengths, batch, sq))
        mask = None
        if sparse_mode in (2, 3, 4):
            _require(_compressed_mask_ok(atten_mask),
                     "sparse_mode {} needs the compressed 2048x2048 mask "
                     "triu(ones(2048, 2048), diagonal=1) (True = masked)".format(sparse_mode))
        elif atten_mask is not None:
            m = atten_mask.bool()
            _require(tuple(m.shape[-2:])[0] >= sq and m.shape[-1] >= kv_capacity,
                     "atten_mask must cover (Q_S, KV_S)")
            mask = m
    lses = []
    outs = []
    for b in range(batch):
        if paged:
            kb, vb = _gather_kv(key, value, b, kv_lengths[b], block_table, block_size, nkv, d)
        else:
            kb, vb = k[b, :, :kv_lengths[b]], v[b, :, :kv_lengths[b]]
        sqb, skb = q_lengths[b], kv_lengths[b]
        if sq == 1:
            masked = torch.zeros(1, skb, dtype=torch.bool, device=query.device)
            if mask is not None:
                masked = mask[b, :skb].view(1, skb)
        else:
            if atten_mask is None:
                masked = torch.zeros(sqb, skb, dtype=torch.bool, device=query.device)
            elif sparse_mode in (2, 3, 4):
                masked = _band(sqb, skb, sparse_mode, pre_tokens, next_tokens, query.device)
            else:
                mb = mask
                while mb.dim() > 2:
                    mb = mb[b if mb.shape[0] > 1 else 0]
                masked = mb[:sqb, :skb] | _band(sqb, skb, 0 if sparse_mode == 0 else 1,
                                                 pre_tokens, next_tokens, query.device)
        invalid_value = 0.0 if (skb == 0 or inner_precise & 2) else float("nan")
        out, mx, sm, invalid = _softmax_attend(q[b, :, :sqb], kb, vb, masked.unsqueeze(0),
                                               scale, 1.0, invalid_value)
        if sqb < sq:  # rows past the valid query length: zero
            out = torch.cat([out, out.new_zeros(num_heads, sq - sqb, out.shape[-1])], dim=1)
            mx = torch.cat([mx, mx.new_zeros(num_heads, sq - sqb)], dim=1)
            sm = torch.cat([sm, sm.new_ones(num_heads, sq - sqb)], dim=1)
        outs.append(out)
        lses.append(mx + torch.log(sm))
    out = _from_bnsd(torch.stack(outs), input_layout)
    if softmax_lse_flag:
        lse = torch.stack(lses).unsqueeze(-1).float()
    else:
        lse = torch.zeros(1, dtype=torch.float32, device=query.device)
    return out, lse


_INFER_UNMODELLED = (
    "pse_shift", "padding_mask", "dequant_scale1", "quant_scale1", "dequant_scale2",
    "quant_scale2", "quant_offset2", "antiquant_scale", "antiquant_offset", "key_antiquant_scale",
    "key_antiquant_offset", "value_antiquant_scale", "value_antiquant_offset",
    "query_padding_size", "kv_padding_size", "key_shared_prefix", "value_shared_prefix",
    "actual_shared_prefix_len", "query_rope", "key_rope", "key_rope_antiquant_scale",
)


def npu_incre_flash_attention(query, key, value, *, padding_mask=None, atten_mask=None,
                              pse_shift=None, actual_seq_lengths=None, antiquant_scale=None,
                              antiquant_offset=None, block_table=None, dequant_scale1=None,
                              quant_scale1=None, dequant_scale2=None, quant_scale2=None,
                              quant_offset2=None, kv_padding_size=None, num_heads=1,
                              scale_value=1.0, input_layout="BSH", num_key_value_heads=0,
                              block_size=0, inner_precise=1):
    """Model of torch_npu.npu_incre_flash_attention (decode, Q_S == 1); returns out."""
    local = dict(locals())
    for name in _INFER_UNMODELLED:
        _not_modelled(name, local.get(name))
    q = _to_bnsd(query, input_layout, num_heads) if input_layout in ("BSH", "BSND", "BNSD") \
        else None
    _require(q is not None and q.shape[2] == 1, "npu_incre_flash_attention needs Q_S == 1")
    out, _ = _infer_attention("incre", query, key, value, atten_mask, None, actual_seq_lengths,
                              block_table, num_heads, scale_value, INF_TOKENS, INF_TOKENS,
                              input_layout, num_key_value_heads, 0, inner_precise, block_size,
                              False)
    return out


def npu_fused_infer_attention_score(query, key, value, *, pse_shift=None, atten_mask=None,
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
                                    scale=1.0, pre_tokens=INF_TOKENS, next_tokens=INF_TOKENS,
                                    input_layout="BSH", num_key_value_heads=0, sparse_mode=0,
                                    inner_precise=0, block_size=0, antiquant_mode=0,
                                    softmax_lse_flag=False, key_antiquant_mode=0,
                                    value_antiquant_mode=0):
    """Model of torch_npu.npu_fused_infer_attention_score; returns (out, softmax_lse)."""
    local = dict(locals())
    for name in _INFER_UNMODELLED:
        _not_modelled(name, local.get(name))
    return _infer_attention("fused", query, key, value, atten_mask, actual_seq_lengths,
                            actual_seq_lengths_kv, block_table, num_heads, scale, pre_tokens,
                            next_tokens, input_layout, num_key_value_heads, sparse_mode,
                            inner_precise, block_size, softmax_lse_flag)
