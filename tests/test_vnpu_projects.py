"""End-to-end proof of the virtual Ascend NPU: the fixture mini-projects, migrated, run their
NPU path on the virtual device (the stand-in torch_npu of npu_migrate/vnpu/site first on
PYTHONPATH) and are compared with the original projects run on the CPU.

- flatquant_mini (fp32): the losses are bit-identical to the CPU run.
- nanochat_mini: its NPU path trains under bf16 autocast (as it would on an Ascend NPU); the
  losses stay within a relative 1e-3 of the fp32 CPU run.
- ddp_mini under torchrun with 2 processes on hccl: the NPU path turns on fp16 autocast and a
  GradScaler; the run finishes with finite losses and step 0 (before any optimizer step can
  differ) is within a relative 1e-3 of the CPU run. Later steps differ more: the dynamic loss
  scale skips the first overflowing steps, as on real hardware.
- fa_mini: its flash-attn calls go through the shim to npu_fusion_attention /
  npu_fused_infer_attention_score (reference model) and print what the naive twin prints. The
  project itself keeps its tensors on the CPU, so run as it is it fails on the NPU path: the
  virtual device reports that, as a real NPU would.
- a leftover "cuda" device and a CPU tensor mixed with NPU tensors fail naming the file and line.
"""

from __future__ import annotations

import math
import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from npu_migrate.vnpu import SITE_DIR
from tests.project_runs import run_migration, step_losses, torchrun_should_retry

REPO_ROOT = Path(__file__).resolve().parent.parent
PROJECTS = REPO_ROOT / "fixtures" / "projects"
TIMEOUT = 240
NUM_STEPS = 5
pytestmark = pytest.mark.integration


def _env(vnpu: bool, **extra: str) -> dict:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("NPU_MIGRATE_VNPU", "ASCEND_", "PYTHONPATH", "CUDA_",
                                "NPU_COMPAT"))}
    if vnpu:
        # npu_migrate must be importable by the stand-in: the repository after the site dir
        env["PYTHONPATH"] = os.pathsep.join([str(SITE_DIR), str(REPO_ROOT)])
    env["OMP_NUM_THREADS"] = "1"
    env.update(extra)
    return env


def _run(cwd: Path, args: list[str], vnpu: bool, **extra: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, *args], check=False, cwd=cwd, env=_env(vnpu, **extra),
                          capture_output=True, text=True, timeout=TIMEOUT)


@pytest.fixture(scope="module")
def migrated(tmp_path_factory):
    """name -> (original copy, migrated copy); each migrated once for the module."""
    root = tmp_path_factory.mktemp("vnpu_projects")
    copies = {}
    for name in ("flatquant_mini", "nanochat_mini", "ddp_mini", "fa_mini"):
        original = root / "original" / name
        copy = root / "migrated" / name
        ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
        shutil.copytree(PROJECTS / name, original, ignore=ignore)
        shutil.copytree(PROJECTS / name, copy, ignore=ignore)
        run_migration(copy)
        copies[name] = (original, copy)
    return copies


@pytest.mark.parametrize("args", [["-m", "flatquant_mini.main"], ["scripts/eval_fq.py"]],
                         ids=["main", "eval_fq"])
def test_flatquant_fp32_bit_identical(migrated, args):
    original, copy = migrated["flatquant_mini"]
    cpu = _run(original, args, vnpu=False)
    npu = _run(copy, args, vnpu=True)
    assert cpu.returncode == 0, cpu.stderr
    assert npu.returncode == 0, npu.stderr
    # it did take the NPU path: it logs the device, or reports the device's peak memory
    assert "calibrating on npu:0" in npu.stderr or any(
        line.startswith("peak memory ") and line != "peak memory 0.0 MiB"
        for line in npu.stdout.splitlines())
    cpu_lines = [line for line in cpu.stdout.splitlines() if line.startswith("step ")]
    npu_lines = [line for line in npu.stdout.splitlines() if line.startswith("step ")]
    assert len(cpu_lines) == NUM_STEPS and npu_lines == cpu_lines  # the same reprs, bit for bit


@pytest.mark.parametrize(("args", "marker"), [
    (["-m", "nanochat_mini.train"], "device npu, compute dtype torch.bfloat16"),
    (["scripts/base_train.py"], "device_type: npu, export dtype: bfloat16"),
], ids=["train", "base_train"])
def test_nanochat_mixed_precision_within_tolerance(migrated, args, marker):
    original, copy = migrated["nanochat_mini"]
    cpu = _run(original, args, vnpu=False)
    npu = _run(copy, args, vnpu=True)
    assert cpu.returncode == 0, cpu.stderr
    assert npu.returncode == 0, npu.stderr
    assert marker in npu.stdout
    cpu_losses = step_losses(cpu.stdout, NUM_STEPS)
    npu_losses = step_losses(npu.stdout, NUM_STEPS)
    for a, b in zip(cpu_losses, npu_losses):
        assert math.isfinite(b) and abs(a - b) <= 1e-3 * abs(a), (cpu_losses, npu_losses)


@pytest.mark.parametrize("args", [["-m", "nanochat_mini.train"], ["scripts/base_train.py"]],
                         ids=["train", "base_train"])
def test_nanochat_fp32_bit_identical_on_an_npu_without_bf16(migrated, args):
    """nanochat picks bf16 (its rotary tables, autocast) on a bf16-capable accelerator. On a
    virtual NPU without bf16 (NPU_MIGRATE_VNPU_BF16=0, like the first Ascend 910) its NPU path
    computes in fp32: the fused AdamW, the GradScaler and SDPA included, every loss is the CPU
    original's, bit for bit."""
    original, copy = migrated["nanochat_mini"]
    cpu = _run(original, args, vnpu=False)
    npu = _run(copy, args, vnpu=True, NPU_MIGRATE_VNPU_BF16="0")
    assert cpu.returncode == 0, cpu.stderr
    assert npu.returncode == 0, npu.stderr
    assert "npu" in npu.stdout and "float32" in npu.stdout
    cpu_lines = [line for line in cpu.stdout.splitlines() if line.startswith("step ")]
    npu_lines = [line for line in npu.stdout.splitlines() if line.startswith("step ")]
    assert len(cpu_lines) == NUM_STEPS and npu_lines == cpu_lines


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _torchrun(cwd: Path, vnpu: bool, **extra: str) -> subprocess.CompletedProcess:
    for _ in range(3):  # a port taken before torchrun binds it, or gloo's teardown abort: again
        args = ["-m", "torch.distributed.run", "--nproc-per-node", "2", "--master-addr",
                "127.0.0.1", "--master-port", str(_free_port()), "-m", "ddp_mini.train"]
        proc = _run(cwd, args, vnpu, NPU_MIGRATE_VNPU_COUNT="2", **extra)
        if not torchrun_should_retry(proc, NUM_STEPS):
            break
    return proc


def test_ddp_on_hccl_fp32_bit_identical(migrated):
    """With autocast computing in fp32 (NPU_MIGRATE_VNPU_AUTOCAST=off), the migrated DDP run on
    hccl, with torch_npu's GradScaler (its power-of-two scale is exact in fp32), prints the CPU
    original's losses bit for bit."""
    original, copy = migrated["ddp_mini"]
    cpu = _torchrun(original, vnpu=False)
    npu = _torchrun(copy, vnpu=True, NPU_MIGRATE_VNPU_AUTOCAST="off")
    assert npu.returncode == 0, npu.stderr[-3000:]
    assert npu.stdout.splitlines()[0] == "backend hccl world_size 2 device npu amp True"
    cpu_lines = [line for line in cpu.stdout.splitlines() if line.startswith("step ")]
    npu_lines = [line for line in npu.stdout.splitlines() if line.startswith("step ")]
    assert len(cpu_lines) == NUM_STEPS and npu_lines == cpu_lines


def test_ddp_on_hccl_with_two_processes(migrated):
    original, copy = migrated["ddp_mini"]
    cpu = _torchrun(original, vnpu=False)
    npu = _torchrun(copy, vnpu=True)
    assert cpu.returncode == 0, cpu.stderr[-3000:]
    assert npu.returncode == 0, npu.stderr[-3000:]
    assert npu.stdout.splitlines()[0] == "backend hccl world_size 2 device npu amp True"
    cpu_losses = step_losses(cpu.stdout, NUM_STEPS)
    npu_losses = step_losses(npu.stdout, NUM_STEPS)
    assert all(math.isfinite(x) for x in npu_losses)
    assert abs(cpu_losses[0] - npu_losses[0]) <= 1e-3 * abs(cpu_losses[0])


FA_NPU_DRIVER = '''"""fa_mini.run with its tensors on the NPU device."""
import torch

from fa_mini import attention
from npu_migrate.vnpu.attention import CALLS

B, S, H, D, WINDOW, STEPS, CACHE = 2, 12, 2, 16, 4, 3, 32
dev = torch.device("npu")
gen = torch.Generator().manual_seed(0)
q, k, v = (torch.randn(B, S, H, D, generator=gen).to(dev) for _ in range(3))
out = attention.prefill(q, k, v, WINDOW)
print("prefill", [round(x, 4) for x in out.sum(dim=(1, 2, 3)).tolist()])
k_cache = torch.zeros(B, CACHE, H, D, device=dev)
v_cache = torch.zeros(B, CACHE, H, D, device=dev)
k_cache[:, :S], v_cache[:, :S] = k, v
seqlens = torch.tensor([S, S - 3], dtype=torch.int32, device=dev)
for step in range(STEPS):
    qn, kn, vn = (torch.randn(B, 1, H, D, generator=gen).to(dev) for _ in range(3))
    out = attention.decode(qn, kn, vn, k_cache, v_cache, seqlens, WINDOW)
    seqlens = seqlens + 1
    print("decode", step, [round(x, 4) for x in out.sum(dim=(1, 2, 3)).tolist()],
          round(float(k_cache.sum()), 4))
print("path", "flash" if attention.USE_FLASH else "naive")
print("calls", sorted(CALLS.items()))
'''


def test_fa_mini_through_fused_attention(migrated):
    original, copy = migrated["fa_mini"]
    twin = _run(original, ["-m", "fa_mini.run"], vnpu=False, FA_MINI_ATTN="naive")
    assert twin.returncode == 0, twin.stderr
    (copy / "run_on_npu.py").write_text(FA_NPU_DRIVER)
    npu = _run(copy, ["run_on_npu.py"], vnpu=True)
    assert npu.returncode == 0, npu.stderr
    lines = npu.stdout.splitlines()
    assert lines[-2] == "path flash"
    assert lines[:-2] == twin.stdout.splitlines()[:-1]
    assert "('npu_fusion_attention', 1)" in lines[-1]
    assert "('npu_fused_infer_attention_score', 3)" in lines[-1]
    # as it is, the project leaves its tensors on the CPU: the NPU path cannot take them
    as_is = _run(copy, ["-m", "fa_mini.run"], vnpu=True)
    assert as_is.returncode == 1
    assert "Could not run 'npu::npu_fusion_attention' with arguments from the 'CPU'" in as_is.stderr
    assert f"[virtual NPU] raised by {copy / 'fa_mini' / 'attention.py'}, line " in as_is.stderr


def _break(migrated, tmp_path, old: str, new: str) -> tuple[Path, int]:
    """A copy of migrated flatquant_mini with ``old`` replaced by ``new`` in to_device()."""
    copy = tmp_path / "flatquant_mini"
    shutil.copytree(migrated["flatquant_mini"][1], copy)
    path = copy / "flatquant_mini" / "model_tools.py"
    text = path.read_text()
    assert old in text
    path.write_text(text.replace(old, new, 1))
    line = next(i for i, t in enumerate(path.read_text().splitlines(), 1) if new in t)
    return path, line


def test_leftover_cuda_names_file_and_line(migrated, tmp_path):
    path, line = _break(migrated, tmp_path, "batch.pin_memory().to(npu_compat.device(), ",
                        "batch.pin_memory().to(\"cuda\", ")
    proc = _run(path.parent.parent, ["-m", "flatquant_mini.main"], vnpu=True)
    assert proc.returncode == 1
    assert "Torch not compiled with CUDA enabled" in proc.stderr
    assert f"[virtual NPU] raised by {path}, line {line}" in proc.stderr


def test_cpu_tensor_mixed_in_names_file_and_line(migrated, tmp_path):
    path, line = _break(migrated, tmp_path, "return batch.pin_memory()",
                        "return torch.ones(batch.shape) + batch.pin_memory()")
    proc = _run(path.parent.parent, ["-m", "flatquant_mini.main"], vnpu=True)
    assert proc.returncode == 1
    assert ("Expected all tensors to be on the same device, but found at least two devices, "
            "npu:0 and cpu!") in proc.stderr
    assert f"[virtual NPU] raised by {path}, line {line}" in proc.stderr
