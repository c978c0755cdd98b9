"""Slowdown of a tiny training step on the virtual NPU against plain CPU.

    python scripts/vnpu_bench.py [--steps 50] [--width 256] [--repeats 3]

Runs the same training loop (a 3-layer MLP with LayerNorm, AdamW, cross-entropy; fp32) in two
fresh processes, one on the CPU and one on ``npu`` with the virtual device (the stand-in
torch_npu of npu_migrate/vnpu/site first on PYTHONPATH), with one thread each, and prints the
median milliseconds per step of each and their ratio. The virtual device runs the same CPU
kernels; the difference is the per-operator cost of the Python dispatch (unwrap, device checks,
wrap, memory accounting), so the ratio is largest for small tensors.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
SITE_DIR = REPO_ROOT / "npu_migrate" / "vnpu" / "site"


def train(device: str, steps: int, width: int) -> float:
    """Median seconds per step of ``steps`` training steps (after 3 warm-up steps)."""
    import torch

    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Linear(width, width), torch.nn.LayerNorm(width), torch.nn.GELU(),
        torch.nn.Linear(width, width), torch.nn.GELU(), torch.nn.Linear(width, 10)).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    x = torch.randn(32, width).to(device)
    y = torch.randint(0, 10, (32,)).to(device)
    times = []
    for step in range(steps + 3):
        start = time.perf_counter()
        opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        loss.item()  # a host sync, as a training loop's logging does
        if step >= 3:
            times.append(time.perf_counter() - start)
    return statistics.median(times)


def run(device: str, steps: int, width: int) -> float:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["OMP_NUM_THREADS"] = "1"
    if device == "npu":
        env["PYTHONPATH"] = os.pathsep.join([str(SITE_DIR), str(REPO_ROOT)])
    proc = subprocess.run(
        [sys.executable, __file__, "--inner", device, "--steps", str(steps), "--width",
         str(width)], env=env, capture_output=True, text=True, check=True)
    return json.loads(proc.stdout.splitlines()[-1])["seconds_per_step"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=50)
    parser.add_argument("--width", type=int, default=256)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--inner", choices=["cpu", "npu"], help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.inner:
        if args.inner == "npu":
            import torch_npu  # noqa: F401  (the stand-in: registers the npu device)
        print(json.dumps({"seconds_per_step": train(args.inner, args.steps, args.width)}))
        return
    import torch

    cpu = min(run("cpu", args.steps, args.width) for _ in range(args.repeats))
    npu = min(run("npu", args.steps, args.width) for _ in range(args.repeats))
    print(f"torch {torch.__version__}, MLP width {args.width}, batch 32, {args.steps} steps, "
          "1 thread")
    print(f"cpu          {cpu * 1e3:8.3f} ms/step")
    print(f"virtual npu  {npu * 1e3:8.3f} ms/step")
    print(f"slowdown     {npu / cpu:8.2f}x")


if __name__ == "__main__":
    main()
