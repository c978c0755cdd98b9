"""The shim's distributed, AMP, precision, nvtx, environment and CLI helpers, with and without an NPU."""

from __future__ import annotations

import textwrap

import pytest

from npu_migrate import catalogue, npu_api
from tests.shim_fixtures import FAKE_NPU, install_shim, run_python

PROBE = textwrap.dedent(
    """
    import argparse, torch, npu_compat as s
    print("backend", s.dist_backend(), s.dist_backend("cuda:nccl,cpu:gloo"), s.dist_backend("gloo"))
    print("is_backend", s.is_accelerator_backend("nccl"), s.is_accelerator_backend("hccl"), s.is_accelerator_backend("gloo"))
    print("env", s.env_name("CUDA_VISIBLE_DEVICES"), s.env_name("PYTORCH_CUDA_ALLOC_CONF"), s.env_name("HOME"))
    print("visible", s.VISIBLE_DEVICES_ENV)
    print("arg", s.device_arg("cuda"), s.device_arg("cuda:1"), s.device_arg("cpu"))
    try:
        s.device_arg("npu")
        print("npu-arg ok")
    except argparse.ArgumentTypeError as exc:
        print("npu-arg error", "torch_npu" in str(exc))
    import click
    try:
        print("click", s.click_device_arg(None, None, "cuda"), s.click_device_arg(None, None, "npu"))
    except click.BadParameter as exc:
        print("click error", "torch_npu" in exc.format_message())
    s.tf32.matmul = True
    s.tf32.conv = False
    print("tf32", torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32)
    print("amp", s.GradScaler.__module__.split(".")[0], s.autocast.__module__.split(".")[0])
    """
)


@pytest.fixture()
def shim_dir(tmp_path):
    install_shim(tmp_path)
    return tmp_path


def _lines(proc):
    assert proc.returncode == 0, proc.stderr
    return dict(line.split(" ", 1) for line in proc.stdout.strip().splitlines())


def test_without_an_npu_everything_is_the_cuda_original(shim_dir):
    out = _lines(run_python(PROBE, path=[shim_dir], cwd=shim_dir))
    assert out["backend"] == "nccl cuda:nccl,cpu:gloo gloo"
    assert out["is_backend"] == "True False False"  # "hccl" may be Habana's: never Ascend here
    assert out["env"] == "CUDA_VISIBLE_DEVICES PYTORCH_CUDA_ALLOC_CONF HOME"
    assert out["visible"] == "CUDA_VISIBLE_DEVICES"
    assert out["arg"] == "cuda cuda:1 cpu"
    assert out["npu-arg"] == "error True"  # on a CUDA host "npu" is a clear error
    assert out["click"] == "error True"  # the same through click's callback
    assert out["tf32"] == "True False"
    assert out["amp"] == "torch torch"  # torch.cuda.amp's own classes


def test_with_an_npu_cuda_means_the_npu(shim_dir):
    probe = PROBE + textwrap.dedent(
        """
        import torch_npu
        print("hf32", torch.npu.matmul.allow_hf32, torch.npu.conv.allow_hf32)
        s.nvtx.range_push("a"); s.nvtx.range_push("b"); s.nvtx.range_pop(); s.nvtx.mark("m")
        with s.nvtx.range("r{}", 1):
            pass
        s.nvtx.range_pop()
        print("calls", ",".join(n for n, _, _ in torch_npu.calls if n.startswith(("mstx", "matmul", "conv"))))
        scaler = s.GradScaler(enabled=False)
        import sys
        print("scaler", isinstance(scaler, sys.modules["torch_npu.npu.amp"].GradScaler), scaler.enabled)
        """
    )
    out = _lines(run_python(probe, path=[shim_dir, FAKE_NPU], cwd=shim_dir))
    assert out["backend"] == "hccl npu:hccl,cpu:gloo gloo"
    assert out["is_backend"] == "True True False"
    assert out["env"] == "ASCEND_RT_VISIBLE_DEVICES PYTORCH_NPU_ALLOC_CONF HOME"
    assert out["visible"] == "ASCEND_RT_VISIBLE_DEVICES"
    assert out["arg"] == "npu npu:1 cpu"
    assert out["npu-arg"] == "ok"
    assert out["click"] == "npu npu"
    assert out["tf32"] == "True False"  # the CUDA flags are still set as the original line did
    assert out["hf32"] == "True False"
    assert out["calls"] == (
        "matmul.allow_hf32,conv.allow_hf32,mstx.range_start,mstx.range_start,mstx.range_end,"
        "mstx.mark,mstx.range_start,mstx.range_end,mstx.range_end"
    )
    assert out["scaler"] == "True False"  # a torch_npu.npu.amp.GradScaler, enabled passed as enabled


def test_env_table_and_shim_agree():
    import importlib

    shim = importlib.import_module("npu_migrate.shim")
    assert shim.ENV_NAMES == catalogue.env_table()["rename"]


def test_amp_and_mstx_names_exist_in_torch_npu():
    for name in catalogue.cuda_api()["amp"]["names"]:
        assert npu_api.has_name(f"torch_npu.npu.amp.{name}", version="2.7.1"), name
    for name in ("mark", "range_start", "range_end"):
        assert npu_api.has_name(f"torch_npu.npu.mstx.{name}", version="2.7.1"), name
    assert npu_api.has_name("torch.npu.matmul.allow_hf32", version="2.7.1")
    assert npu_api.has_name("torch.npu.conv.allow_hf32", version="2.7.1")
