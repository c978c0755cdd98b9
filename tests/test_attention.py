"""npu_compat.attention: flash-attn semantics on the NPU path (fake torch_npu whose kernels are the
reference model of the documented operators) and on the opt-in SDPA path, both checked against an
independent naive flash-attn reference (tests/attention_reference.py).

The fake torch_npu registers itself process-wide, so everything runs in a few subprocesses, each
of which runs a whole grid and reports JSON; the parent asserts on it.
"""

import json
from pathlib import Path

import pytest

from npu_migrate import npu_api

from .shim_fixtures import FAKE_NPU, check, install_shim, run_python

TESTS = Path(__file__).resolve().parent

# ---------------------------------------------------------------------------------------------
# The grid, run in a child. It prints one JSON object: the backend, one record per case, and
# every attention operator call the fake saw (name, positional count, keyword names).

GRID = r'''
import itertools, json, math, os, sys
import torch
import attention_reference as R
import npu_compat
import npu_compat.attention as A

torch.set_num_threads(1)  # tiny tensors: threading only adds overhead
MODE = os.environ["GRID_MODE"]          # "full" or "decode-only"
SKIP_LEADING_EMPTY = os.environ.get("GRID_SKIP_LEADING_EMPTY") == "1"
TOL = 2e-5
gen = torch.Generator().manual_seed(1234)
results = []


def rand(*shape, grad=False):
    t = torch.randn(*shape, generator=gen, dtype=torch.float32)
    return t.requires_grad_(grad)


def err(a, b):
    if a.numel() == 0 and b.numel() == 0:
        return 0.0
    return float((a.double() - b.double()).abs().max())


def record(case, e, **extra):
    entry = {"case": case, "err": e, "ok": bool(e <= TOL)}
    entry.update(extra)
    results.append(entry)


WINDOWS = [(False, (-1, -1)), (True, (-1, -1)), (True, (2, -1)), (True, (0, -1)),
           (False, (1, 2)), (False, (-1, 0)), (False, (3, -1)), (False, (-1, 1))]

if MODE == "full":
    # -- fixed length: batch x (Sq, Sk) x (H, Hk) x D x causal/window ---------------------------
    for b, (sq, sk), (h, hk), d, (causal, ws) in itertools.product(
            [1, 2], [(5, 5), (3, 8), (8, 3), (1, 6)], [(4, 4), (4, 2), (4, 1)], [16, 40], WINDOWS):
        q, k, v = rand(b, sq, h, d), rand(b, sk, hk, d), rand(b, sk, hk, d)
        out = A.flash_attn_func(q, k, v, causal=causal, window_size=ws)
        ref = R.flash_attn_ref(q, k, v, causal=causal, window_size=ws)
        record("fixed b{} sq{} sk{} h{}/{} d{} causal={} ws={}".format(
            b, sq, sk, h, hk, d, causal, ws), err(out, ref))

    # explicit softmax_scale and dropout_p=0.0 passed positionally
    q, k, v = rand(2, 6, 4, 32), rand(2, 9, 2, 32), rand(2, 9, 2, 32)
    out = A.flash_attn_func(q, k, v, 0.0, 0.3, True)
    record("fixed positional scale=0.3 causal", err(out, R.flash_attn_ref(q, k, v, 0.3, True)))

    # packed variants
    qkv = rand(2, 7, 3, 4, 16)
    for causal, ws in WINDOWS[:5]:
        out = A.flash_attn_qkvpacked_func(qkv, causal=causal, window_size=ws)
        ref = R.flash_attn_ref(qkv[:, :, 0], qkv[:, :, 1], qkv[:, :, 2], causal=causal,
                               window_size=ws)
        record("qkvpacked causal={} ws={}".format(causal, ws), err(out, ref))
        q, kv = rand(2, 4, 4, 16), rand(2, 9, 2, 2, 16)
        out = A.flash_attn_kvpacked_func(q, kv, causal=causal, window_size=ws)
        ref = R.flash_attn_ref(q, kv[:, :, 0], kv[:, :, 1], causal=causal, window_size=ws)
        record("kvpacked causal={} ws={}".format(causal, ws), err(out, ref))

    # -- varlen: uneven and zero-length sequences --------------------------------------------------
    LENGTHS = [
        ([3, 5, 2], [3, 5, 2]),           # self-attention, uneven
        ([2, 4, 1], [5, 3, 6]),           # Sq != Sk per sequence, both directions
        ([3, 0, 4], [3, 2, 4]),           # empty query sequence in the middle
        ([3, 2, 4], [3, 0, 4]),           # empty key sequence: rows output 0
        ([2, 3, 0], [2, 3, 0]),           # trailing empty sequence
        ([0, 3, 2], [0, 3, 2]),           # leading empty sequence
        ([0, 3, 2], [4, 3, 2]),           # leading empty query, non-empty keys
        ([1], [7]),                       # single sequence
    ]
    for (lq, lk), (h, hk), (causal, ws) in itertools.product(
            LENGTHS, [(4, 4), (4, 2), (4, 1)], WINDOWS):
        if SKIP_LEADING_EMPTY and (lq[0] == 0 or lk[0] == 0):
            continue
        cu_q = torch.tensor([0] + list(itertools.accumulate(lq)), dtype=torch.int32)
        cu_k = torch.tensor([0] + list(itertools.accumulate(lk)), dtype=torch.int32)
        q, k, v = rand(sum(lq), h, 16), rand(sum(lk), hk, 16), rand(sum(lk), hk, 16)
        out = A.flash_attn_varlen_func(q, k, v, cu_q, cu_k, max(lq), max(lk), causal=causal,
                                       window_size=ws)
        ref = R.flash_attn_varlen_ref(q, k, v, cu_q, cu_k, causal=causal, window_size=ws)
        record("varlen q{} k{} h{}/{} causal={} ws={}".format(lq, lk, h, hk, causal, ws),
               err(out, ref))
    lens = [3, 1, 4]
    cu = torch.tensor([0, 3, 4, 8], dtype=torch.int32)
    qkv = rand(8, 3, 4, 16)
    for causal, ws in WINDOWS[:4]:
        out = A.flash_attn_varlen_qkvpacked_func(qkv, cu, 4, causal=causal, window_size=ws)
        ref = R.flash_attn_varlen_ref(qkv[:, 0], qkv[:, 1], qkv[:, 2], cu, cu, causal=causal,
                                      window_size=ws)
        record("varlen qkvpacked causal={} ws={}".format(causal, ws), err(out, ref))
        q, kv = rand(8, 4, 16), rand(8, 2, 2, 16)
        out = A.flash_attn_varlen_kvpacked_func(q, kv, cu, cu, 4, 4, causal=causal, window_size=ws)
        ref = R.flash_attn_varlen_ref(q, kv[:, 0], kv[:, 1], cu, cu, causal=causal, window_size=ws)
        record("varlen kvpacked causal={} ws={}".format(causal, ws), err(out, ref))

    # -- gradients of the training path ------------------------------------------------------------
    def grads(fn, tensors, upstream):
        out = fn(*tensors)
        return torch.autograd.grad(out, tensors, upstream)

    for (sq, sk), (h, hk), (causal, ws) in itertools.product(
            [(5, 5), (3, 7), (7, 3)], [(4, 2), (4, 1)], WINDOWS[:5]):
        q, k, v = rand(2, sq, h, 16, grad=True), rand(2, sk, hk, 16, grad=True), \
            rand(2, sk, hk, 16, grad=True)
        up = rand(2, sq, h, 16)
        got = grads(lambda a, b_, c: A.flash_attn_func(a, b_, c, causal=causal, window_size=ws),
                    (q, k, v), up)
        q64, k64, v64 = [t.detach().double().requires_grad_() for t in (q, k, v)]
        want = grads(lambda a, b_, c: R.flash_attn_ref(a, b_, c, causal=causal, window_size=ws),
                     (q64, k64, v64), up.double())
        record("grad fixed sq{} sk{} h{}/{} causal={} ws={}".format(sq, sk, h, hk, causal, ws),
               max(err(g, w) for g, w in zip(got, want)))
    for (lq, lk), (causal, ws) in itertools.product(
            [([3, 5, 2], [3, 5, 2]), ([2, 0, 4], [5, 3, 3])], WINDOWS[:5]):
        cu_q = torch.tensor([0] + list(itertools.accumulate(lq)), dtype=torch.int32)
        cu_k = torch.tensor([0] + list(itertools.accumulate(lk)), dtype=torch.int32)
        q, k, v = rand(sum(lq), 4, 16, grad=True), rand(sum(lk), 2, 16, grad=True), \
            rand(sum(lk), 2, 16, grad=True)
        up = rand(sum(lq), 4, 16)
        got = grads(lambda a, b_, c: A.flash_attn_varlen_func(
            a, b_, c, cu_q, cu_k, max(lq), max(lk), causal=causal, window_size=ws), (q, k, v), up)
        q64, k64, v64 = [t.detach().double().requires_grad_() for t in (q, k, v)]
        want = grads(lambda a, b_, c: R.flash_attn_varlen_ref(
            a, b_, c, cu_q, cu_k, causal=causal, window_size=ws), (q64, k64, v64), up.double())
        record("grad varlen q{} k{} causal={} ws={}".format(lq, lk, causal, ws),
               max(err(g, w) for g, w in zip(got, want)))

# -- kv cache: decode and chunked prefill, batch index, paged ----------------------------------
KV_WINDOWS = WINDOWS[:5]
sq_values = [1] if MODE == "decode-only" else [1, 3, 4]
for sq, (h, hk), (causal, ws), append, variant in itertools.product(
        sq_values, [(4, 4), (4, 2), (4, 1)], KV_WINDOWS, [True, False],
        ["plain", "batch_idx", "paged", "int_seqlens"]):
    b, d = 3, 16
    snew = sq if append else 0
    if variant == "paged":
        page, nblocks = 128, 7
        k_cache, v_cache = rand(nblocks, page, hk, d), rand(nblocks, page, hk, d)
        block_table = torch.tensor([[4, 1], [0, 6], [2, 5]], dtype=torch.int32)
        seqlens = torch.tensor([130, 5, 200], dtype=torch.int32)
        extra = {"block_table": block_table}
    else:
        k_cache, v_cache = rand(4, 12, hk, d), rand(4, 12, hk, d)
        seqlens = torch.tensor([3, 0, 7], dtype=torch.int32) if append else \
            torch.tensor([3, 1, 7], dtype=torch.int32)
        extra = {}
        if variant == "batch_idx":
            extra["cache_batch_idx"] = torch.tensor([2, 0, 3], dtype=torch.int32)
        if variant == "int_seqlens":
            seqlens = 5
    q = rand(b, sq, h, d)
    k_new = rand(b, snew, hk, d) if append else None
    v_new = rand(b, snew, hk, d) if append else None
    ref, ref_k, ref_v = R.flash_attn_kvcache_ref(q, k_cache, v_cache, k_new, v_new,
                                                 cache_seqlens=seqlens, causal=causal,
                                                 window_size=ws, **extra)
    kc, vc = k_cache.clone(), v_cache.clone()
    out = A.flash_attn_with_kvcache(q, kc, vc, k_new, v_new, cache_seqlens=seqlens,
                                    causal=causal, window_size=ws, **extra)
    same_cache = bool(torch.equal(kc, ref_k) and torch.equal(vc, ref_v))
    record("kvcache sq{} h{}/{} causal={} ws={} append={} {}".format(
        sq, h, hk, causal, ws, append, variant), err(out, ref) if same_cache else 1.0,
        cache_ok=same_cache)

# whole cache valid (cache_seqlens=None, no append)
q, kc, vc = rand(2, 2, 4, 16), rand(2, 9, 2, 16), rand(2, 9, 2, 16)
if MODE == "full":
    out = A.flash_attn_with_kvcache(q, kc, vc, causal=True)
    ref, _, _ = R.flash_attn_kvcache_ref(q, kc, vc, causal=True)
    record("kvcache full cache causal", err(out, ref))

# softmax lse (NPU only): log-sum-exp over the visible keys, flash-attn's (B, H, Sq)
if A.backend() == "npu" and MODE == "full":
    q, kc, vc = rand(2, 3, 4, 16), rand(2, 9, 2, 16), rand(2, 9, 2, 16)
    seqlens = torch.tensor([4, 6], dtype=torch.int32)
    out, lse = A.flash_attn_with_kvcache(q, kc, vc, cache_seqlens=seqlens, causal=True,
                                         return_softmax_lse=True)
    want = torch.empty(2, 4, 3, dtype=torch.float64)
    for bi in range(2):
        n = int(seqlens[bi])
        for hi in range(4):
            for i in range(3):
                hi_key = i + n - 3
                s = (kc[bi, :hi_key + 1, hi // 2].double() @ q[bi, i, hi].double()) / 4.0
                want[bi, hi, i] = torch.logsumexp(s, 0)
    record("kvcache softmax lse", err(lse, want))

calls = []
if "torch_npu" in sys.modules:
    import torch_npu
    for name, args, kwargs in torch_npu.calls:
        if name.startswith("npu_") and "attention" in name:
            calls.append({
                "name": name, "nargs": len(args), "kwargs": sorted(kwargs),
                "sparse_mode": kwargs.get("sparse_mode", 0),
                "mask": kwargs.get("atten_mask") is not None,
            })
print(json.dumps({"backend": A.backend(), "device": npu_compat.device_type(),
                  "results": results, "calls": calls}))
'''


def _run_grid(tmp_path, *, npu, env=None, mode="full", before=""):
    root = tmp_path / "site"
    install_shim(root)
    path = [root, FAKE_NPU, TESTS] if npu else [root, TESTS]
    child_env = {"GRID_MODE": mode}
    child_env.update(env or {})
    out = check(run_python(before + GRID, path=path, cwd=tmp_path, env=child_env))
    return json.loads(out.strip().splitlines()[-1])


def _assert_all_ok(report, minimum):
    failures = [r for r in report["results"] if not r["ok"]]
    assert not failures, "{} of {} cases differ from flash-attn:\n{}".format(
        len(failures), len(report["results"]),
        "\n".join("{case}: err={err}".format(**r) for r in failures[:20]))
    assert len(report["results"]) >= minimum


def _assert_calls_in_api_table(calls, version):
    """Every operator and keyword the shim passed exists in that torch_npu version's table."""
    assert calls, "no torch_npu attention operator was called"
    positional = {"npu_fusion_attention": 5, "npu_fusion_attention_v3": 5,
                  "npu_incre_flash_attention": 3, "npu_fused_infer_attention_score": 3}
    for call in calls:
        qualname = "torch_npu." + call["name"]
        assert npu_api.has_name(qualname, version), qualname
        allowed = npu_api.keywords(qualname, version)
        assert allowed is not None, qualname
        unknown = set(call["kwargs"]) - allowed
        assert not unknown, "{} has no keyword(s) {} in torch_npu {}".format(
            qualname, sorted(unknown), version)
        assert call["nargs"] <= positional[call["name"]], call
        # the traps: scale is always passed (defaults to 1.0); modes 2-4 always with the mask
        scale_kw = "scale_value" if call["name"] == "npu_incre_flash_attention" else "scale"
        assert scale_kw in call["kwargs"], call
        if call["sparse_mode"] in (2, 3, 4):
            assert call["mask"], call


@pytest.fixture(scope="module")
def npu_271(tmp_path_factory):
    return _run_grid(tmp_path_factory.mktemp("npu271"), npu=True)


@pytest.fixture(scope="module")
def npu_214(tmp_path_factory):
    # The v3 path keeps the lengths on the device, so it cannot peel off a leading empty
    # sequence; the reference model rejects a leading 0 (see docs/attention.md).
    return _run_grid(tmp_path_factory.mktemp("npu214"), npu=True,
                     env={"FAKE_TORCH_NPU_VERSION": "2.14.0", "GRID_SKIP_LEADING_EMPTY": "1"})


@pytest.fixture(scope="module")
def sdpa(tmp_path_factory):
    return _run_grid(tmp_path_factory.mktemp("sdpa"), npu=False,
                     env={"NPU_COMPAT_ATTENTION_FALLBACK": "sdpa"})


def test_npu_path_matches_flash_attn_on_torch_npu_2_7_1(npu_271):
    assert npu_271["device"] == "npu" and npu_271["backend"] == "npu"
    _assert_all_ok(npu_271, 700)
    names = {c["name"] for c in npu_271["calls"]}
    assert names == {"npu_fusion_attention", "npu_fused_infer_attention_score"}


def test_npu_path_uses_v3_with_tensor_lengths_on_torch_npu_2_14(npu_214):
    assert npu_214["backend"] == "npu"
    _assert_all_ok(npu_214, 600)
    names = {c["name"] for c in npu_214["calls"]}
    assert "npu_fusion_attention_v3" in names  # varlen prefers the tensor-length variant


def test_npu_calls_exist_in_the_api_table(npu_271, npu_214):
    _assert_calls_in_api_table(npu_271["calls"], "2.7.1")
    _assert_calls_in_api_table(npu_214["calls"], "2.14.0")


def test_npu_path_uses_every_sparse_mode_it_needs(npu_271):
    modes = {(c["name"], c["sparse_mode"]) for c in npu_271["calls"]}
    for name in ("npu_fusion_attention", "npu_fused_infer_attention_score"):
        assert {(name, 0), (name, 3), (name, 4)} <= modes


def test_sdpa_fallback_matches_flash_attn(sdpa):
    assert sdpa["device"] == "cuda" and sdpa["backend"] == "sdpa"
    _assert_all_ok(sdpa, 700)
    assert sdpa["calls"] == []


def test_decode_with_incre_flash_attention_when_no_fused_operator(tmp_path):
    report = _run_grid(tmp_path, npu=True, mode="decode-only",
                       before="import torch_npu\ndel torch_npu.npu_fused_infer_attention_score\n")
    _assert_all_ok(report, 100)
    assert {c["name"] for c in report["calls"]} == {"npu_incre_flash_attention"}
    _assert_calls_in_api_table(report["calls"], "2.7.1")


# ---------------------------------------------------------------------------------------------
# Errors, opt-in, the guarded-import API, the CUDA delegation.

ERRORS = r'''
import torch
import npu_compat.attention as A
q = torch.randn(1, 4, 2, 8)
cu = torch.tensor([0, 4], dtype=torch.int32)
cases = [
    ("softcap", lambda: A.flash_attn_func(q, q, q, softcap=30.0)),
    ("alibi_slopes", lambda: A.flash_attn_func(q, q, q, alibi_slopes=torch.ones(2))),
    ("deterministic", lambda: A.flash_attn_func(q, q, q, deterministic=True)),
    ("return_attn_probs", lambda: A.flash_attn_func(q, q, q, return_attn_probs=True)),
    ("softcap", lambda: A.flash_attn_varlen_func(q[0], q[0], q[0], cu, cu, 4, 4, softcap=5.0)),
    ("block_table", lambda: A.flash_attn_varlen_func(
        q[0], q[0], q[0], cu, cu, 4, 4, block_table=torch.zeros(1, 1, dtype=torch.int32))),
    ("rotary_cos", lambda: A.flash_attn_with_kvcache(
        q, q.clone(), q.clone(), rotary_cos=torch.ones(4, 4), rotary_sin=torch.ones(4, 4))),
    ("cache_leftpad", lambda: A.flash_attn_with_kvcache(
        q, q.clone(), q.clone(), cache_leftpad=torch.zeros(1, dtype=torch.int32))),
    ("alibi_slopes", lambda: A.flash_attn_with_kvcache(q, q.clone(), q.clone(),
                                                       alibi_slopes=torch.ones(2))),
]
for name, fn in cases:
    try:
        fn()
    except (NotImplementedError, ValueError) as exc:
        assert name in str(exc), (name, str(exc))
        print("raised", name)
    else:
        raise AssertionError("no error for " + name)
'''


@pytest.mark.parametrize("npu", [True, False], ids=["npu", "sdpa"])
def test_unsupported_parameters_raise_naming_them(tmp_path, npu):
    root = tmp_path / "site"
    install_shim(root)
    path = [root, FAKE_NPU] if npu else [root]
    env = {} if npu else {"NPU_COMPAT_ATTENTION_FALLBACK": "sdpa"}
    out = check(run_python(ERRORS, path=path, cwd=tmp_path, env=env))
    assert out.count("raised") == 9


def test_without_npu_flash_attn_or_opt_in_it_is_an_import_error(tmp_path):
    root = tmp_path / "site"
    install_shim(root)
    code = r'''
import inspect, sys, torch
import npu_compat.attention as A
assert "torch_npu" not in sys.modules
assert A.backend() is None and A.available() is False and A.AVAILABLE is False
q = torch.randn(1, 3, 2, 8)
for call in (lambda: A.flash_attn_func(q, q, q),
             lambda: A.flash_attn_with_kvcache(q, q.clone(), q.clone()),
             lambda: A.require(),
             lambda: A.require("flash_attn_func")):
    try:
        call()
    except ModuleNotFoundError as exc:
        assert exc.name == "flash_attn" and "flash_attn is not installed" in str(exc), exc
    else:
        raise AssertionError("expected ModuleNotFoundError")

# The codemod's guarded import keeps its fallback ...
try:
    import npu_compat.attention
    flash_attn_func = npu_compat.attention.require("flash_attn_func")
except ImportError:
    flash_attn_func = None
assert flash_attn_func is None

# ... until the user opts in.
A.enable_sdpa_fallback()
assert A.backend() == "sdpa" and A.AVAILABLE is True
f, g = A.require("flash_attn_func", "flash_attn_with_kvcache")
assert f is A.flash_attn_func and g is A.flash_attn_with_kvcache
assert A.require() is None
assert f(q, q, q, causal=True).shape == q.shape
try:
    A.require("flash_attn_nonexistent")
except ImportError as exc:
    assert "flash_attn_nonexistent" in str(exc)
else:
    raise AssertionError

# flash-attn's signatures
params = list(inspect.signature(A.flash_attn_func).parameters)
assert params == ["q", "k", "v", "dropout_p", "softmax_scale", "causal", "window_size", "softcap",
                  "alibi_slopes", "deterministic", "return_attn_probs"], params
params = list(inspect.signature(A.flash_attn_with_kvcache).parameters)
assert params[:10] == ["q", "k_cache", "v_cache", "k", "v", "rotary_cos", "rotary_sin",
                       "cache_seqlens", "cache_batch_idx", "cache_leftpad"], params
print("ok")
'''
    assert check(run_python(code, path=[root], cwd=tmp_path)).strip() == "ok"


def test_env_opt_in_and_npu_make_it_available(tmp_path):
    root = tmp_path / "site"
    install_shim(root)
    code = "import npu_compat.attention as A; print(A.backend(), A.AVAILABLE)"
    out = check(run_python(code, path=[root], cwd=tmp_path,
                           env={"NPU_COMPAT_ATTENTION_FALLBACK": "sdpa"}))
    assert out.split() == ["sdpa", "True"]
    out = check(run_python(code, path=[root, FAKE_NPU], cwd=tmp_path))
    assert out.split() == ["npu", "True"]
    # importing the module alone does not decide the device (no torch_npu import)
    code = "import sys, npu_compat.attention; print('torch_npu' in sys.modules)"
    assert check(run_python(code, path=[root, FAKE_NPU], cwd=tmp_path)).strip() == "False"


def test_real_flash_attn_gets_the_arguments_untouched(tmp_path):
    root = tmp_path / "site"
    install_shim(root)
    fake_fa = tmp_path / "fa" / "flash_attn"
    fake_fa.mkdir(parents=True)
    (fake_fa / "__init__.py").write_text(
        "def flash_attn_func(*args, **kwargs):\n    return ('real', args, kwargs)\n"
        "def flash_attn_with_kvcache(*args, **kwargs):\n    return ('real kv', args, kwargs)\n")
    code = r'''
import npu_compat.attention as A
assert A.backend() == "flash_attn"
print(A.flash_attn_func(1, 2, 3, causal=True))
print(A.flash_attn_with_kvcache("q", "kc", "vc", cache_seqlens=7))
'''
    out = check(run_python(code, path=[root, tmp_path / "fa"], cwd=tmp_path)).splitlines()
    assert out == ["('real', (1, 2, 3), {'causal': True})",
                   "('real kv', ('q', 'kc', 'vc'), {'cache_seqlens': 7})"]


@pytest.mark.parametrize("version", ["2.7.1", "2.14.0"])
def test_fake_operators_have_the_real_signatures(tmp_path, version):
    """The double must not invent (or drop) parameters: same names, kinds and order as the table."""
    code = r'''
import inspect, json, torch_npu
from torch_npu import _attention_ops
print(json.dumps({name: [[p.name, p.kind.name] for p in
                         inspect.signature(getattr(torch_npu, name)).parameters.values()]
                  for name in _attention_ops.OPS}))
'''
    out = check(run_python(code, path=[FAKE_NPU], cwd=tmp_path,
                           env={"FAKE_TORCH_NPU_VERSION": version}))
    fake = json.loads(out.strip().splitlines()[-1])
    expected_ops = {"npu_fusion_attention", "npu_incre_flash_attention",
                    "npu_fused_infer_attention_score"}
    if version == "2.14.0":
        expected_ops.add("npu_fusion_attention_v3")
    assert set(fake) == expected_ops
    kinds = {"POSITIONAL_OR_KEYWORD": "positional_or_keyword", "KEYWORD_ONLY": "keyword_only"}
    for name, params in fake.items():
        entry = npu_api.lookup("torch_npu." + name)
        table = [[p["name"], p.get("kind", "positional_or_keyword")] for p in entry["params"]
                 if version in p.get("versions", entry["versions"])]
        assert [[n, kinds[k]] for n, k in params] == table, name
