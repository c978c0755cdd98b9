"""The virtual Ascend NPU (npu_migrate/vnpu): each emulated behaviour, checked on torch 2.13.

Everything that needs the device runs in a subprocess with the stand-in ``torch_npu``
(npu_migrate/vnpu/site) first on PYTHONPATH: registering the ``npu`` device in the pytest process
would change torch for every other test. One subprocess runs user code (CHECKS below) that
exercises the device and prints JSON; the tests read it. Lines marked ``# LINE:<name>`` are the
user lines the error reports must name.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from npu_migrate.vnpu import SITE_DIR

from .project_runs import PORT_CLASH_SIGNS, TEARDOWN_ABORT

REPO_ROOT = Path(__file__).resolve().parent.parent
TIMEOUT = 120

CHECKS = r'''"""User code on the virtual NPU: prints what each emulated behaviour gave, as JSON."""
import io
import json
import math
import sys
import time

import torch
import torch_npu

import npu_migrate.vnpu
from npu_migrate.vnpu import attention as vnpu_attention
from npu_migrate.vnpu import attention_ref

out = {}


def record(name, fn):
    try:
        out[name] = fn()
    except Exception as exc:  # reported, the test fails on it
        out[name] = {"error": f"{type(exc).__name__}: {exc}"}


# -- device basics -------------------------------------------------------------------------
def basics():
    x = torch.randn(2, 3, device="npu")
    lin = torch.nn.Linear(3, 2).to("npu")
    y = lin(x).sum()
    y.backward()
    return {
        "torch_npu_is_torch_npu": torch.npu is torch_npu.npu,
        "cuda_available": torch.cuda.is_available(),
        "npu_available": torch.npu.is_available(),
        "device_count": torch.npu.device_count(),
        "x_device": str(x.device), "grad_device": str(lin.weight.grad.device),
        "is_npu": x.is_npu, "item_is_float": isinstance(y.item(), float),
        "cpu": str(x.cpu().device), "to_cpu": str(x.to("cpu").device),
        "cpu_equal": torch.equal(x.cpu(), x.to("cpu")),
        "repr": repr(torch.ones(2, device="npu")),
        "tensor_factory": str(torch.tensor([1, 2], device="npu").device),
        "capability": torch.npu.get_device_capability(),
        "bf16": torch.npu.is_bf16_supported(),
        "name": torch.npu.get_device_name(0),
        "hf32": [torch.npu.matmul.allow_hf32, torch.npu.conv.allow_hf32],
    }


record("basics", basics)


def mixed():
    a = torch.ones(3, device="npu")
    scalar_ok = str((a + torch.tensor(2.0)).device)  # a 0-dim CPU tensor is accepted
    try:
        a + torch.ones(3)  # LINE:mixed
    except RuntimeError as exc:
        return {"message": str(exc), "notes": getattr(exc, "__notes__", []),
                "scalar_ok": scalar_ok}
    return {"message": None}


record("mixed", mixed)


def leftover_cuda():
    try:
        torch.zeros(2, device="cuda")  # LINE:cuda
    except Exception as exc:
        return {"type": type(exc).__name__, "where": npu_migrate.vnpu.report_user_frame(exc)}
    return {"type": None}


record("leftover_cuda", leftover_cuda)


# -- save / load ---------------------------------------------------------------------------
def save_load():
    model = torch.nn.Linear(4, 3).to("npu")
    buf = io.BytesIO()
    torch.save(model.state_dict(), buf)
    data = buf.getvalue()
    on_cpu = torch.load(io.BytesIO(data), map_location="cpu")
    default = torch.load(io.BytesIO(data))
    to_npu = torch.load(io.BytesIO(data), map_location="npu")
    model.load_state_dict(on_cpu)
    return {
        "cpu": sorted({str(v.device) for v in on_cpu.values()}),
        "default": sorted({str(v.device) for v in default.values()}),
        "npu": sorted({str(v.device) for v in to_npu.values()}),
        "equal": all(torch.equal(on_cpu[k], model.state_dict()[k].cpu()) for k in on_cpu),
        "equal_npu": all(torch.equal(to_npu[k].cpu(), on_cpu[k]) for k in on_cpu),
    }


record("save_load", save_load)


# -- memory --------------------------------------------------------------------------------
def memory():
    torch.npu.empty_cache()
    torch.npu.reset_peak_memory_stats()
    before = torch.npu.memory_allocated()
    t = torch.empty(1024 * 256, dtype=torch.float32, device="npu")  # 1 MiB
    during = torch.npu.memory_allocated()
    view = t[:10]
    del t
    with_view = torch.npu.memory_allocated()
    del view
    after = torch.npu.memory_allocated()
    peak = torch.npu.max_memory_allocated()
    reserved = torch.npu.memory_reserved()
    torch.npu.reset_peak_memory_stats()
    return {"before": before, "during": during, "with_view": with_view, "after": after,
            "peak": peak, "reserved": reserved, "peak_after_reset": torch.npu.max_memory_allocated(),
            "stats_current": torch.npu.memory_stats()["allocated_bytes.all.current"]}


record("memory", memory)


# -- API table -----------------------------------------------------------------------------
def api():
    res = {}
    for name, get in (("missing", lambda: torch.npu.nvtx), ("v3", lambda: torch_npu.npu_fusion_attention_v3),
                      ("module_missing", lambda: torch_npu.npu.amp.not_a_name)):
        try:
            get()
            res[name] = "no error"
        except AttributeError as exc:
            res[name] = f"AttributeError: {exc}"
    try:
        torch_npu.npu_rms_norm(torch.ones(2, device="npu"), torch.ones(2, device="npu"))
        res["not_emulated"] = "no error"
    except NotImplementedError as exc:
        res["not_emulated"] = f"NotImplementedError: {exc}"
    try:
        torch.npu.make_graphed_callables(None, None)
        res["not_emulated_npu"] = "no error"
    except NotImplementedError as exc:
        res["not_emulated_npu"] = f"NotImplementedError: {exc}"
    res["hasattr_rms_norm"] = hasattr(torch_npu, "npu_rms_norm")
    try:
        __import__("importlib").import_module("torch_npu.contrib.transfer_to_npu")
        res["import_not_emulated"] = "no error"
    except NotImplementedError as exc:
        res["import_not_emulated"] = f"NotImplementedError: {exc}"
    try:
        torch.npu.is_bf16_supported(including_emulation=True)
        res["wrong_keyword"] = "no error"
    except TypeError as exc:
        res["wrong_keyword"] = f"TypeError: {exc}"
    res["dir_npu"] = sorted(n for n in dir(torch.npu) if not n.startswith("_"))
    res["version"] = torch_npu.__version__
    return res


record("api", api)


# -- autocast and GradScaler ----------------------------------------------------------------
def autocast():
    a = torch.randn(4, 4, device="npu")
    lin = torch.nn.Linear(4, 4).to("npu")
    res = {"outside": str((a @ a).dtype)}
    with torch.autocast(device_type="npu", dtype=torch.bfloat16):
        res["bf16_matmul"] = str((a @ a).dtype)
        res["bf16_linear"] = str(lin(a).dtype)
        res["bf16_softmax"] = str(torch.softmax(lin(a), -1).dtype)
        res["bf16_layer_norm"] = str(torch.nn.functional.layer_norm(lin(a), (4,)).dtype)
        res["bf16_add"] = str((a + a).dtype)
        target = torch.tensor([1, 0, 3, 2], device="npu")
        res["bf16_cross_entropy"] = str(torch.nn.functional.cross_entropy(lin(a), target).dtype)
    with torch.autocast(device_type="npu", dtype=torch.float16):
        res["fp16_mm"] = str(torch.mm(a, a).dtype)
        res["fp16_bmm"] = str(torch.bmm(a[None], a[None]).dtype)
    with torch_npu.npu.amp.autocast():
        res["npu_amp_default"] = str((a @ a).dtype)
    exact = (a.to(torch.bfloat16) @ a.to(torch.bfloat16)).cpu()
    with torch.autocast(device_type="npu", dtype=torch.bfloat16):
        res["bf16_values_match"] = torch.equal((a @ a).cpu(), exact)
    return res


record("autocast", autocast)


def grad_scaler():
    model = torch.nn.Linear(2, 1).to("npu")
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    scaler = torch_npu.npu.amp.GradScaler(init_scale=8.0, growth_interval=1)
    scales, weights = [], []
    for step in range(3):
        opt.zero_grad()
        loss = model(torch.ones(1, 2, device="npu")).sum()
        if step == 1:
            loss = loss * float("inf")  # an overflow: the step is skipped, the scale backs off
        before = model.weight.detach().cpu().clone()
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
        scales.append(scaler.get_scale())
        weights.append(not torch.equal(before, model.weight.detach().cpu()))
    fixed = torch_npu.npu.amp.GradScaler(8.0, 2.0, 0.5, 1, False)
    opt.zero_grad()
    fixed.scale(model(torch.ones(1, 2, device="npu")).sum()).backward()
    fixed.step(opt)
    fixed.update()
    return {"scales": scales, "stepped": weights, "fixed": fixed.get_scale(),
            "signature": list(__import__("inspect").signature(torch_npu.npu.amp.GradScaler).parameters)}


record("grad_scaler", grad_scaler)


# -- fused attention -----------------------------------------------------------------------
def fused_attention():
    gen = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(2, 5, 4, 8, generator=gen) for _ in range(3))
    mask = torch.triu(torch.ones(2048, 2048, dtype=torch.bool), diagonal=1)
    kwargs = dict(scale=1 / math.sqrt(8), sparse_mode=3)
    out = torch_npu.npu_fusion_attention(q.to("npu"), k.to("npu"), v.to("npu"), 4, "BSND",
                                         atten_mask=mask.to("npu"), **kwargs)
    ref = attention_ref.npu_fusion_attention(q, k, v, 4, "BSND", atten_mask=mask, **kwargs)
    flash = attention_ref.flash_attn_ref(q, k, v, causal=True)
    res = {"device": str(out[0].device), "equal_ref": torch.equal(out[0].cpu(), ref[0]),
           "close_flash": bool(torch.allclose(out[0].cpu().double(), flash, atol=1e-5)),
           "calls": vnpu_attention.CALLS["npu_fusion_attention"]}
    try:
        torch_npu.npu_fusion_attention(q, k, v, 4, "BSND", scale=0.3)
        res["cpu_inputs"] = "no error"
    except NotImplementedError as exc:
        res["cpu_inputs"] = f"NotImplementedError: {exc}"
    try:
        torch_npu.npu_fusion_attention(q.to("npu"), k, v.to("npu"), 4, "BSND", scale=0.3)
        res["mixed_inputs"] = "no error"
    except RuntimeError as exc:
        res["mixed_inputs"] = str(exc)
    try:
        torch_npu.npu_fusion_attention(q.to("npu"), k.to("npu"), v.to("npu"), 4, "BSND",
                                       softmax_scale=0.3)
        res["cuda_keyword"] = "no error"
    except TypeError as exc:
        res["cuda_keyword"] = f"TypeError: {exc}"
    qd = torch.randn(2, 1, 4, 8, generator=gen)
    kc, vc = (torch.randn(2, 6, 4, 8, generator=gen) for _ in range(2))
    got, _ = torch_npu.npu_fused_infer_attention_score(
        qd.to("npu"), kc.to("npu"), vc.to("npu"), num_heads=4, input_layout="BSND",
        scale=0.3, actual_seq_lengths_kv=[6, 4])
    want, _ = attention_ref.npu_fused_infer_attention_score(
        qd, kc, vc, num_heads=4, input_layout="BSND", scale=0.3, actual_seq_lengths_kv=[6, 4])
    res["infer_equal_ref"] = torch.equal(got.cpu(), want)
    prompt = torch_npu.npu_prompt_flash_attention(
        q.to("npu"), k.to("npu"), v.to("npu"), num_heads=4, input_layout="BSND", scale_value=0.3,
        next_tokens=2147483647)
    want, _ = attention_ref.npu_fused_infer_attention_score(q, k, v, num_heads=4,
                                                            input_layout="BSND", scale=0.3)
    res["prompt_equal_ref"] = torch.equal(prompt.cpu(), want)
    return res


record("fused_attention", fused_attention)


# -- streams, events, rng, mstx --------------------------------------------------------------
def misc():
    start, end = torch.npu.Event(enable_timing=True), torch.npu.Event(enable_timing=True)
    start.record()
    time.sleep(0.02)
    end.record()
    end.synchronize()
    stream = torch.npu.Stream()
    with torch.npu.stream(stream):
        inside = torch.npu.current_stream() == stream
    torch.npu.synchronize()
    torch.manual_seed(3)
    a = torch.randn(4, device="npu").cpu()
    torch.manual_seed(3)
    b = torch.randn(4)
    state = torch.npu.get_rng_state()
    c = torch.randn(4, device="npu").cpu()
    torch.npu.set_rng_state(state)
    d = torch.randn(4, device="npu").cpu()
    torch_npu.npu.mstx.mark("m")
    rid = torch_npu.npu.mstx.range_start("r")
    torch_npu.npu.mstx.range_end(rid)
    gen = torch.Generator(device="npu").manual_seed(1)
    drawn = torch.randn(2, device="npu", generator=gen)
    return {"elapsed_ms": start.elapsed_time(end), "stream_ctx": inside,
            "npu_generator": [str(gen.device), str(drawn.device)],
            "after_stream": torch.npu.current_stream() == torch.npu.default_stream(),
            "seed_like_cpu": torch.equal(a, b), "rng_state_roundtrip": torch.equal(c, d)}


record("misc", misc)


def modules():
    import copy

    res = {}
    for name, make, shape in (("lstm", lambda: torch.nn.LSTM(4, 6, num_layers=2), (5, 2, 4)),
                              ("gru", lambda: torch.nn.GRU(4, 6), (5, 2, 4)),
                              ("conv", lambda: torch.nn.Conv2d(3, 2, 3), (1, 3, 6, 6))):
        torch.manual_seed(0)
        module, x = make(), torch.randn(*shape, requires_grad=True)
        ref = module(x)
        ref = ref[0] if isinstance(ref, tuple) else ref
        ref.sum().backward()
        grads = [p.grad.clone() for p in module.parameters()]
        module.zero_grad()
        module.to("npu")
        xn = x.detach().to("npu").requires_grad_()
        out = module(xn)
        out = out[0] if isinstance(out, tuple) else out
        out.sum().backward()
        res[name] = [torch.allclose(out.cpu(), ref.detach(), atol=1e-5),
                     torch.allclose(xn.grad.cpu(), x.grad, atol=1e-5),
                     all(torch.allclose(p.grad.cpu(), g, atol=1e-5)
                         for p, g in zip(module.parameters(), grads))]
    twin = copy.deepcopy(module)
    res["deepcopy"] = [str(twin.weight.device), isinstance(twin.weight, torch.nn.Parameter),
                       torch.equal(twin.weight.cpu(), module.weight.cpu())]
    return res


record("modules", modules)

json.dump(out, sys.stdout)
'''

UNCAUGHT = r'''import torch
x = torch.ones(2, device="npu")
y = x.cuda()  # LINE:uncaught
'''

HCCL = r'''import json, os, sys
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

dist.init_process_group("hccl")
rank, world = dist.get_rank(), dist.get_world_size()
torch.npu.set_device(int(os.environ["LOCAL_RANK"]))
dev = torch.device("npu")
res = {"backend": dist.get_backend(), "default_for_npu": dist.get_default_backend_for_device("npu"),
       "device_count": torch.npu.device_count(), "current": torch.npu.current_device()}
t = torch.full((3,), float(rank + 1), device=dev)
dist.all_reduce(t)
res["all_reduce"] = t.tolist()
b = torch.full((2,), float(rank + 5), device=dev)
dist.broadcast(b, src=1)
res["broadcast"] = b.tolist()
outs = [torch.zeros(2, device=dev) for _ in range(world)]
dist.all_gather(outs, torch.full((2,), float(rank), device=dev))
res["all_gather"] = [o.tolist() for o in outs]
rs = torch.zeros(1, device=dev)
dist.reduce_scatter_tensor(rs, torch.arange(2.0, device=dev) + rank)
res["reduce_scatter"] = rs.tolist()
dist.barrier()
torch.manual_seed(0)
model = DDP(torch.nn.Linear(4, 2).to(dev))
model(torch.randn(8, 4, device=dev) + rank).sum().backward()
grads = [torch.zeros(2, 4, device=dev) for _ in range(world)]
dist.all_gather(grads, model.module.weight.grad)
res["ddp_grads_equal"] = torch.equal(grads[0].cpu(), grads[1].cpu())
res["grad_device"] = str(model.module.weight.grad.device)
try:
    dist.all_reduce(torch.ones(2))
    res["cpu_tensor"] = "no error"
except RuntimeError as exc:
    res["cpu_tensor"] = str(exc)
with open(f"result_{rank}.json", "w") as f:  # (the ranks' stdout lines may interleave)
    json.dump(res, f)
dist.destroy_process_group()
'''


def vnpu_env(**extra: str) -> dict:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("NPU_MIGRATE_VNPU", "ASCEND_", "TORCH_NPU", "PYTHONPATH"))}
    env["PYTHONPATH"] = os.pathsep.join([str(SITE_DIR), str(REPO_ROOT)])
    env["OMP_NUM_THREADS"] = "1"
    env.update(extra)
    return env


def line_of(source: str, marker: str) -> int:
    return next(i for i, text in enumerate(source.splitlines(), 1) if f"# LINE:{marker}" in text)


@pytest.fixture(scope="module")
def checks(tmp_path_factory):
    script = tmp_path_factory.mktemp("vnpu") / "user_code.py"
    script.write_text(CHECKS)
    proc = subprocess.run([sys.executable, str(script)], check=False, cwd=script.parent, env=vnpu_env(),
                          capture_output=True, text=True, timeout=TIMEOUT)
    assert proc.returncode == 0, proc.stderr
    results = json.loads(proc.stdout)
    results["_script"] = str(script)
    return results


def ok(results: dict, name: str) -> dict:
    value = results[name]
    assert "error" not in value, value
    return value


def test_device_basics(checks):
    basics = ok(checks, "basics")
    assert basics["torch_npu_is_torch_npu"] and basics["npu_available"] and basics["is_npu"]
    assert basics["cuda_available"] is False  # as on an Ascend host
    assert basics["device_count"] == 1
    assert basics["x_device"] == basics["grad_device"] == "npu:0"
    assert basics["cpu"] == basics["to_cpu"] == "cpu" and basics["cpu_equal"]
    assert basics["item_is_float"]
    assert basics["repr"] == "tensor([1., 1.], device='npu:0')"
    assert basics["tensor_factory"] == "npu:0"
    assert basics["capability"] is None and basics["bf16"] is True
    assert basics["hf32"] == [False, True]  # torch_npu's defaults: matmul off, conv on


def test_mixed_devices_fail_with_pytorch_message_and_user_line(checks):
    mixed = ok(checks, "mixed")
    assert mixed["message"] == ("Expected all tensors to be on the same device, but found at "
                                "least two devices, npu:0 and cpu!")
    line = line_of(CHECKS, "mixed")
    assert mixed["notes"] == [f"[virtual NPU] raised by {checks['_script']}, line {line}"]
    assert mixed["scalar_ok"] == "npu:0"  # 0-dim CPU tensors are accepted, as on CUDA


def test_leftover_cuda_device_names_the_user_line(checks):
    leftover = ok(checks, "leftover_cuda")
    assert leftover["type"] == "AssertionError"  # "Torch not compiled with CUDA enabled"
    assert leftover["where"] == f"{checks['_script']}:{line_of(CHECKS, 'cuda')}"


def test_uncaught_error_gets_the_user_line(tmp_path):
    script = tmp_path / "train.py"
    script.write_text(UNCAUGHT)
    proc = subprocess.run([sys.executable, str(script)], check=False, cwd=tmp_path, env=vnpu_env(),
                          capture_output=True, text=True, timeout=TIMEOUT)
    assert proc.returncode == 1
    assert "Torch not compiled with CUDA enabled" in proc.stderr
    assert f"[virtual NPU] raised by {script}, line {line_of(UNCAUGHT, 'uncaught')}" in proc.stderr


def test_save_load_roundtrip(checks):
    saved = ok(checks, "save_load")
    assert saved["cpu"] == ["cpu"]  # map_location="cpu" (weights_only=True, the default)
    assert saved["default"] == ["npu:0"] and saved["npu"] == ["npu:0"]
    assert saved["equal"] and saved["equal_npu"]


def test_memory_stats_follow_live_tensors(checks):
    mem = ok(checks, "memory")
    assert mem["during"] - mem["before"] == 1024 * 1024
    assert mem["with_view"] == mem["during"]  # a view keeps the storage alive
    assert mem["after"] == mem["before"]
    assert mem["peak"] >= mem["during"] and mem["reserved"] >= mem["during"]
    assert mem["peak_after_reset"] == mem["after"] and mem["stats_current"] == mem["after"]


def test_api_table_names_only(checks):
    from npu_migrate import npu_api

    api = ok(checks, "api")
    assert api["missing"].startswith("AttributeError")  # no torch.npu.nvtx in torch_npu
    assert api["v3"].startswith("AttributeError")  # npu_fusion_attention_v3 is 2.14.0 only
    assert api["module_missing"].startswith("AttributeError")
    assert api["not_emulated"].startswith("NotImplementedError: torch_npu.npu_rms_norm")
    assert api["not_emulated_npu"].startswith(
        "NotImplementedError: torch_npu.npu.make_graphed_callables")
    assert api["hasattr_rms_norm"] is True  # hasattr() is True, as on the real module
    assert api["import_not_emulated"].startswith(
        "NotImplementedError: torch_npu.contrib.transfer_to_npu")
    assert api["wrong_keyword"].startswith("TypeError")  # 2.7.1: is_bf16_supported()
    assert api["version"] == "2.7.1"
    for name in api["dir_npu"]:
        assert npu_api.has_name(f"torch_npu.npu.{name}", "2.7.1"), name


def test_autocast_really_casts(checks):
    cast = ok(checks, "autocast")
    assert cast["outside"] == "torch.float32"
    assert cast["bf16_matmul"] == cast["bf16_linear"] == "torch.bfloat16"
    assert cast["bf16_softmax"] == cast["bf16_layer_norm"] == "torch.float32"
    assert cast["bf16_add"] == "torch.float32"  # not on a list: runs in its input dtype
    assert cast["bf16_cross_entropy"] == "torch.float32"
    assert cast["fp16_mm"] == cast["fp16_bmm"] == cast["npu_amp_default"] == "torch.float16"
    assert cast["bf16_values_match"]  # the very values of a bf16 matmul


def test_grad_scaler_steps(checks):
    scaler = ok(checks, "grad_scaler")
    assert scaler["signature"] == ["init_scale", "growth_factor", "backoff_factor",
                                   "growth_interval", "dynamic", "enabled"]
    assert scaler["scales"] == [16.0, 8.0, 16.0]  # grow, back off on inf, grow
    assert scaler["stepped"] == [True, False, True]  # the overflowing step is skipped
    assert scaler["fixed"] == 8.0  # dynamic=False keeps the scale


def test_fused_attention_is_the_reference_model(checks):
    fa = ok(checks, "fused_attention")
    assert fa["device"] == "npu:0" and fa["equal_ref"] and fa["close_flash"]
    assert fa["calls"] == 1 and fa["infer_equal_ref"] and fa["prompt_equal_ref"]
    assert fa["cpu_inputs"].startswith("NotImplementedError: Could not run 'npu::npu_fusion")
    assert fa["mixed_inputs"].startswith("Expected all tensors to be on the same device")
    assert fa["cuda_keyword"].startswith("TypeError") and "softmax_scale" in fa["cuda_keyword"]


def test_streams_events_rng(checks):
    misc = ok(checks, "misc")
    assert misc["elapsed_ms"] >= 15
    assert misc["stream_ctx"] and misc["after_stream"]
    assert misc["seed_like_cpu"] and misc["rng_state_roundtrip"]
    assert misc["npu_generator"] == ["npu:0", "npu:0"]


def test_modules_forward_backward(checks):
    mods = ok(checks, "modules")
    # LSTM/GRU take the fused-cell kernels PyTorch picks for accelerators (computed in tensor.py)
    assert mods["lstm"] == mods["gru"] == mods["conv"] == [True, True, True]
    assert mods["deepcopy"] == ["npu:0", True, True]


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_hccl_two_processes(tmp_path):
    script = tmp_path / "hccl_run.py"
    script.write_text(HCCL)
    for _attempt in range(3):
        for rank in (0, 1):
            (tmp_path / f"result_{rank}.json").unlink(missing_ok=True)
        torchrun = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2",
                    "--master-addr", "127.0.0.1", "--master-port", str(_free_port())]
        proc = subprocess.run([*torchrun, str(script)], check=False, cwd=tmp_path,
                              env=vnpu_env(NPU_MIGRATE_VNPU_COUNT="2"), capture_output=True,
                              text=True, timeout=TIMEOUT)
        # (gloo's teardown abort after both ranks wrote their results, or a port taken between
        # probe and bind: run again, as the DDP tests do; any other failure is one)
        done = all((tmp_path / f"result_{rank}.json").exists() for rank in (0, 1))
        if proc.returncode == 0 or not ((TEARDOWN_ABORT in proc.stderr and done)
                                        or any(sign in proc.stderr for sign in PORT_CLASH_SIGNS)):
            break
    assert proc.returncode == 0, proc.stderr[-3000:]
    results = {rank: json.loads((tmp_path / f"result_{rank}.json").read_text())
               for rank in (0, 1)}
    for rank, res in results.items():
        assert res["backend"] == res["default_for_npu"] == "hccl"
        assert res["device_count"] == 2 and res["current"] == rank
        assert res["all_reduce"] == [3.0, 3.0, 3.0]
        assert res["broadcast"] == [6.0, 6.0]
        assert res["all_gather"] == [[0.0, 0.0], [1.0, 1.0]]
        assert res["reduce_scatter"] == [[1.0], [3.0]][rank]
        assert res["ddp_grads_equal"] and res["grad_device"] == "npu:0"
        assert res["cpu_tensor"].startswith("hccl (virtual NPU): expected a tensor on npu")


# -- in-process: no device registered ------------------------------------------------------


def test_visible_devices_parsing():
    from npu_migrate.vnpu.device import parse_visible_devices

    assert parse_visible_devices("0,1,2") == 3
    assert parse_visible_devices("") == 0
    assert parse_visible_devices("1,0") == 0  # not strictly ascending: no device
    assert parse_visible_devices("0,1x,2") == 2  # parsing stops at the first non-digit


def test_device_count_from_environment(monkeypatch):
    from npu_migrate.vnpu import device

    monkeypatch.delenv("NPU_MIGRATE_VNPU_COUNT", raising=False)
    monkeypatch.delenv("ASCEND_RT_VISIBLE_DEVICES", raising=False)
    assert device.device_count() == 1
    monkeypatch.setenv("ASCEND_RT_VISIBLE_DEVICES", "0,1,2")
    assert device.device_count() == 3
    monkeypatch.setenv("NPU_MIGRATE_VNPU_COUNT", "2")  # the launcher's --npus wins
    assert device.device_count() == 2


def test_unsupported_torch_is_refused():
    from npu_migrate.vnpu.install import SUPPORTED_TORCH, check_torch

    check_torch("2.13.0+cpu")
    with pytest.raises(ImportError, match="supports torch 2.13"):
        check_torch("2.12.1")
    assert SUPPORTED_TORCH == ("2.13",)


def test_emulated_share():
    from npu_migrate.vnpu.api_surface import emulated_share

    emulated, total, missing = emulated_share("2.7.1")
    assert total == emulated + len(missing) and total > 50
    assert emulated / total > 0.5
    assert "make_graphed_callables" in missing and "memory_allocated" not in missing


SAME_BITS = r'''
import json
import torch
import torch.nn.functional as F
import torch_npu

torch.manual_seed(0)
w, x = torch.randn(5, 3), torch.randn(4, 5)
res = {}


def adam(device, fused, scaled):
    p = torch.nn.Parameter(w.clone().to(device))
    opt = torch.optim.AdamW([p], lr=3e-3, betas=(0.9, 0.95), weight_decay=0.01, fused=fused)
    scaler = torch_npu.npu.amp.GradScaler() if scaled else None
    for i in range(3):
        opt.zero_grad()
        loss = ((x.to(device) @ p) ** 2).mean() * (i + 1)
        (scaler.scale(loss) if scaler else loss).backward()
        if scaler:
            scaler.step(opt)
            scaler.update()
        else:
            opt.step()
    return p.detach().cpu()


cpu = adam("cpu", None, False)
res["fused_adamw"] = torch.equal(cpu, adam("npu", True, False))
res["fused_adamw_scaled"] = torch.equal(cpu, adam("npu", True, True))
q, k, v = (torch.randn(2, 4, 8, 16) for _ in range(3))


def attention(device):
    qq, kk, vv = (t.clone().to(device).requires_grad_() for t in (q, k, v))
    out = F.scaled_dot_product_attention(qq, kk, vv, is_causal=True)
    out.sum().backward()
    return out.detach().cpu(), qq.grad.cpu(), str(out.device), str(qq.grad.device)


a, b = attention("cpu"), attention("npu")
res["sdpa"] = [torch.equal(a[0], b[0]), torch.equal(a[1], b[1]), b[2], b[3]]
print(json.dumps(res))
'''


def test_fused_adamw_and_sdpa_give_the_cpu_bits(tmp_path):
    """A program that picks the fused AdamW and SDPA on an accelerator gets the bits of its CPU
    run (the virtual device computes them with the CPU's arithmetic; a real NPU rounds its own way)."""
    script = tmp_path / "same_bits.py"
    script.write_text(SAME_BITS)
    proc = subprocess.run([sys.executable, str(script)], check=False, cwd=tmp_path, env=vnpu_env(),
                          capture_output=True, text=True, timeout=TIMEOUT)
    assert proc.returncode == 0, proc.stderr
    res = json.loads(proc.stdout.strip().splitlines()[-1])
    assert res == {"fused_adamw": True, "fused_adamw_scaled": True, "sdpa": [True, True, "npu:0", "npu:0"]}
