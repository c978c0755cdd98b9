#!/usr/bin/env python3
"""Invariant 1 on a real CUDA machine: the migrated mini-projects print what the originals print.

The test suite checks invariant 1 ("faithful on CUDA/CPU machines") on CPU only: there every
CUDA-only line of the fixtures in fixtures/projects/ sits on a branch that is not taken. On a
machine with an NVIDIA GPU those branches run (NCCL, AMP with a GradScaler, TF32 flags, CUDA
events, bf16 autocast, `.cuda()` moves), and the migrated copies send them through the injected
`npu_compat` shim, which must then behave exactly as `torch.cuda` did. This script checks that.

It works in two steps, so that the tool itself need not be installed where the GPU is:

    python scripts/cuda_parity.py prepare DIR       # here: copy each project twice, migrate one copy
    python scripts/cuda_parity.py run DIR           # on the GPU machine (needs torch only)

`run` starts every entry point of every project (the list below) in the original copy twice and
in the migrated copy once, each in a fresh process, and compares standard output:

* identical: the migrated run printed exactly what the original printed;
* within spread: the two original runs already differ (a nondeterministic kernel), and every
  `step N loss X` of the migrated run lies within the spread of the originals widened to a
  relative 1e-3; every other line is identical;
* DIFFERENT: anything else, or a run that failed.

Every process loads a probe (a `sitecustomize` module on PYTHONPATH) that records at exit whether
CUDA was initialised and how much device memory was allocated at peak, so that the report shows
that the CUDA branches ran (with `--require-cuda`, a run that never touched the GPU is a failure).
`run` also checks the shim of a migrated project directly: on a CUDA host every name it forwards
must be the very `torch.cuda` object, and its own helpers (device, capability, bf16, backend,
GradScaler) must answer what torch.cuda answers.

    python scripts/cuda_parity.py run DIR --require-cuda --json DIR/parity.json

Exit codes: 0 all identical or within spread (and CUDA used where required), 1 a difference or a
failed run, 2 setup failure (DIR not prepared, no torch).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
PROJECTS_DIR = REPO_ROOT / "fixtures" / "projects"
STEP_LINE = re.compile(r"^step (\d+) loss (\S+)$")
RUN_TIMEOUT = 300
LOSS_RTOL = 1e-3

# (project, entry id, argv after `python`, extra environment, must use CUDA on a CUDA machine);
# "{nproc}" and "{port}" are filled in. fa_mini never touches CUDA (its flash path needs flash_attn,
# which a plain CUDA machine lacks, and then runs the naive twin on the CPU): it checks only that the
# migrated imports and fallbacks print the same. `launch_dry` only prints, `print_config` and
# `train_cpu` ask for a configuration or the CPU explicitly.
ENTRY_POINTS = [
    ("flatquant_mini", "main", ["-m", "flatquant_mini.main"], {}, True),
    ("flatquant_mini", "eval_fq", ["scripts/eval_fq.py"], {}, True),
    ("nanochat_mini", "train", ["-m", "nanochat_mini.train"], {}, True),
    ("nanochat_mini", "base_train", ["scripts/base_train.py"], {}, True),
    ("nanochat_mini", "print_config", ["-m", "nanochat_mini.train", "--device-type", "cuda", "--print-config"], {},
     False),
    ("nanochat_mini", "train_cpu", ["-m", "nanochat_mini.train", "--device-type", "cpu", "--num-iterations", "2"], {},
     False),
    ("ddp_mini", "torchrun", ["-m", "torch.distributed.run", "--nnodes=1", "--nproc_per_node={nproc}",
                              "--master-addr=127.0.0.1", "--master-port={port}", "-m", "ddp_mini.train"], {}, True),
    ("ddp_mini", "launch_dry", ["scripts/launch.py", "--dry"], {}, False),
    ("fa_mini", "run", ["-m", "fa_mini.run"], {}, False),
    ("fa_mini", "run_naive", ["-m", "fa_mini.run"], {"FA_MINI_ATTN": "naive"}, False),
]
PROJECTS = sorted({entry[0] for entry in ENTRY_POINTS})

PROBE = '''\
# written by scripts/cuda_parity.py: records whether this process used CUDA
import atexit
import os
import sys


def _cuda_parity_probe():
    path = os.environ.get("CUDA_PARITY_PROBE")
    torch = sys.modules.get("torch")
    if not path or torch is None:
        return
    try:
        used = bool(torch.cuda.is_initialized())
        peak = int(torch.cuda.max_memory_allocated()) if used else 0
    except Exception:
        used, peak = False, 0
    with open(path, "a") as f:
        f.write(f"{os.getpid()} {int(used)} {peak}\\n")


atexit.register(_cuda_parity_probe)
'''

def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def prepare(out: Path, only: list[str] | None = None) -> int:
    """Copy each project to OUT/P/original and OUT/P/migrated, and migrate the second copy."""
    if out.exists() and any(out.iterdir()):
        print(f"error: {out} exists and is not empty", file=sys.stderr)
        return 2
    out.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO_ROOT), env.get("PYTHONPATH")) if p)
    for name in only or PROJECTS:
        for side in ("original", "migrated"):
            shutil.copytree(PROJECTS_DIR / name, out / name / side,
                            ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        proc = subprocess.run([sys.executable, "-m", "npu_migrate", str(out / name / "migrated"), "--no-cache"],
                              cwd=out, env=env, capture_output=True, text=True, timeout=RUN_TIMEOUT)
        if proc.returncode not in (0, 1) or "Traceback (most recent call last)" in proc.stderr:
            print(f"error: npu-migrate failed on {name} (exit {proc.returncode})\n{proc.stdout}\n{proc.stderr}",
                  file=sys.stderr)
            return 2
        print(f"prepared {name}: {proc.stdout.strip().splitlines()[-1] if proc.stdout.strip() else 'migrated'}")
    (out / "_probe").mkdir()
    (out / "_probe" / "sitecustomize.py").write_text(PROBE)
    return 0


def _env(probe_dir: Path, probe_file: Path, extra: dict) -> dict:
    env = dict(os.environ)
    for var in list(env):
        if var in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_RANK", "MASTER_ADDR",
                   "MASTER_PORT", "NPU_COMPAT_DEVICE") or var.startswith("TORCHELASTIC_"):
            env.pop(var)
    env["PYTHONPATH"] = str(probe_dir)
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    env["PYTHONHASHSEED"] = "0"
    env["OMP_NUM_THREADS"] = "1"
    env["CUBLAS_WORKSPACE_CONFIG"] = ":4096:8"  # deterministic cuBLAS reductions where it matters
    env["CUDA_PARITY_PROBE"] = str(probe_file)
    env.update(extra)
    return env


def _run_once(cwd: Path, argv: list[str], env_extra: dict, probe_dir: Path, nproc: int) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        probe_file = Path(tmp) / "probe.txt"
        args = [a.replace("{nproc}", str(nproc)).replace("{port}", str(_free_port())) for a in argv]
        start = time.perf_counter()
        try:
            proc = subprocess.run([sys.executable, *args], cwd=cwd, env=_env(probe_dir, probe_file, env_extra),
                                  capture_output=True, text=True, timeout=RUN_TIMEOUT)
            rc, stdout, stderr = proc.returncode, proc.stdout, proc.stderr
        except subprocess.TimeoutExpired as exc:
            rc, stdout, stderr = 124, exc.stdout or "", f"timed out after {RUN_TIMEOUT} s"
        seconds = time.perf_counter() - start
        rows = [line.split() for line in probe_file.read_text().splitlines()] if probe_file.exists() else []
    return {
        "rc": rc, "stdout": stdout if isinstance(stdout, str) else stdout.decode(errors="replace"),
        "stderr_tail": (stderr if isinstance(stderr, str) else stderr.decode(errors="replace"))[-2000:],
        "seconds": round(seconds, 2),
        "cuda_processes": sum(1 for r in rows if r[1] == "1"),
        "processes": len(rows),
        "peak_bytes": max((int(r[2]) for r in rows), default=0),
    }


def _losses(stdout: str) -> dict[int, float]:
    return {int(m.group(1)): float(m.group(2)) for m in map(STEP_LINE.match, stdout.splitlines()) if m}


def compare(first: str, second: str, migrated: str) -> tuple[str, str]:
    """(verdict, detail) for the migrated stdout against two runs of the original."""
    if migrated == first and first == second:
        return "identical", ""
    if first == second:
        return "DIFFERENT", _first_difference(first, migrated)
    # the original is nondeterministic here: step losses within the originals' spread, the rest equal
    rest = [[line for line in s.splitlines() if not STEP_LINE.match(line)] for s in (first, second, migrated)]
    if not rest[0] == rest[1] == rest[2]:
        return "DIFFERENT", "non-loss lines differ: " + _first_difference("\n".join(rest[0]), "\n".join(rest[2]))
    a, b, m = _losses(first), _losses(second), _losses(migrated)
    if not set(a) == set(b) == set(m):
        return "DIFFERENT", f"step numbers differ: {sorted(a)} / {sorted(m)}"
    worst = 0.0
    for step in a:
        low, high = min(a[step], b[step]), max(a[step], b[step])
        slack = LOSS_RTOL * max(abs(low), abs(high), 1e-12)
        if not (low - slack <= m[step] <= high + slack):
            return "DIFFERENT", f"step {step}: migrated {m[step]!r} outside [{low!r}, {high!r}] +- rtol {LOSS_RTOL}"
        worst = max(worst, abs(a[step] - b[step]) / max(abs(a[step]), 1e-12))
    return "within spread", f"original runs differ by up to a relative {worst:.2e}"


def _first_difference(expected: str, actual: str) -> str:
    exp, act = expected.splitlines(), actual.splitlines()
    for i, (x, y) in enumerate(zip(exp, act)):
        if x != y:
            return f"line {i + 1}: original {x!r}, migrated {y!r}"
    return f"original has {len(exp)} lines, migrated {len(act)}"


def shim_check(project_dir: Path, probe_dir: Path) -> dict:
    """Run a check of the migrated project's `npu_compat` against torch.cuda in a fresh process."""
    code = r'''
import json
import torch
import npu_compat as s

out = {"device_type": s.device_type(), "mismatches": [], "checked": []}
def same(name, got, want):
    out["checked"].append(name)
    if not (got is want or got == want):
        out["mismatches"].append(f"{name}: shim {got!r}, torch.cuda {want!r}")

names = [n for n in dir(s) if not n.startswith("_") and hasattr(torch.cuda, n)]
for n in names:
    if n in ("is_available", "device_count", "get_device_capability", "get_device_properties",
             "device", "amp", "nvtx"):
        continue  # wrapped, checked by value below
    same(f"forwarded {n}", getattr(s, n), getattr(torch.cuda, n))
same("is_available()", s.is_available(), torch.cuda.is_available())
same("device_count()", s.device_count(), torch.cuda.device_count())
same("dist_backend()", s.dist_backend(), "nccl")
same("dist_backend('gloo')", s.dist_backend("gloo"), "gloo")
if torch.cuda.is_available():
    same("device()", s.device(), torch.device("cuda"))
    same("device(0)", s.device(0), torch.device("cuda", 0))
    same("get_device_capability()", s.get_device_capability(), torch.cuda.get_device_capability())
    same("get_device_properties().name", s.get_device_properties().name, torch.cuda.get_device_properties(0).name)
    same("get_device_name()", s.get_device_name(), torch.cuda.get_device_name())
    same("is_bf16_supported()", s.is_bf16_supported(), torch.cuda.is_bf16_supported())
    same("type(grad_scaler())", type(s.grad_scaler()), torch.amp.GradScaler)
    x = torch.ones(3).to(s.device())
    same("tensor on shim device", x.device.type, "cuda")
    same("on_accelerator(x)", s.on_accelerator(x), True)
    same("is_accelerator_type('cuda')", s.is_accelerator_type("cuda"), True)
print(json.dumps(out))
'''
    env = _env(probe_dir, probe_dir / "unused.txt", {})
    env["PYTHONPATH"] = os.pathsep.join([str(project_dir), str(probe_dir)])
    proc = subprocess.run([sys.executable, "-c", code], cwd=project_dir, env=env, capture_output=True, text=True,
                          timeout=RUN_TIMEOUT)
    if proc.returncode != 0:
        return {"ok": False, "error": proc.stderr[-2000:]}
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    result["ok"] = not result["mismatches"]
    return result


def run(out: Path, require_cuda: bool, json_path: Path | None, only: list[str] | None,
        entries: list[str] | None = None) -> int:
    probe_dir = out / "_probe"
    if not probe_dir.is_dir():
        print(f"error: {out} was not prepared (run `prepare {out}` first)", file=sys.stderr)
        return 2
    try:
        import torch
    except ImportError:
        print("error: torch is not importable", file=sys.stderr)
        return 2
    cuda = torch.cuda.is_available()
    nproc = max(1, torch.cuda.device_count()) if cuda else 2
    machine = {
        "python": sys.version.split()[0], "torch": torch.__version__, "cuda_available": cuda,
        "torch_cuda": torch.version.cuda,
        "device_name": torch.cuda.get_device_name(0) if cuda else None, "ddp_processes": nproc,
    }
    print(f"torch {torch.__version__}, CUDA {'available: ' + machine['device_name'] if cuda else 'not available'}")
    results, failed = [], 0
    for project, entry, argv, extra, needs_cuda in ENTRY_POINTS:
        if (only and project not in only) or (entries and f"{project}:{entry}" not in entries):
            continue
        if not (out / project / "migrated").is_dir():
            print(f"error: {project} was not prepared in {out}", file=sys.stderr)
            return 2
        runs = [_run_once(out / project / "original", argv, extra, probe_dir, nproc) for _ in range(2)]
        runs.append(_run_once(out / project / "migrated", argv, extra, probe_dir, nproc))
        if any(r["rc"] != 0 for r in runs):
            verdict = "DIFFERENT"
            detail = "; ".join(f"{side} exit {r['rc']}: {r['stderr_tail'][-600:]}"
                               for side, r in zip(("original", "original", "migrated"), runs) if r["rc"] != 0)
        else:
            verdict, detail = compare(runs[0]["stdout"], runs[1]["stdout"], runs[2]["stdout"])
        used = [r["cuda_processes"] > 0 for r in runs]
        if require_cuda and needs_cuda and not all(used):
            verdict, detail = "DIFFERENT", f"CUDA not used (original, original, migrated: {used}) {detail}"
        failed += verdict == "DIFFERENT"
        results.append({"project": project, "entry": entry, "argv": argv, "env": extra, "verdict": verdict,
                        "detail": detail, "cuda_used": used, "peak_bytes": [r["peak_bytes"] for r in runs],
                        "seconds": [r["seconds"] for r in runs], "stdout_lines": len(runs[2]["stdout"].splitlines()),
                        "needs_cuda": needs_cuda, "runs": runs})
        print(f"{verdict:>13}  {project}:{entry}  cuda={used} peak={runs[2]['peak_bytes']} "
              f"s={[r['seconds'] for r in runs]}  {detail}")
    shim = shim_check(out / results[0]["project"] / "migrated", probe_dir) if results else {"ok": False,
                                                                                            "error": "no entry ran"}
    failed += not shim["ok"]
    print(f"shim check: {'ok' if shim['ok'] else 'FAILED'} ({len(shim.get('checked', []))} checks, "
          f"device_type {shim.get('device_type')}) {shim.get('mismatches') or shim.get('error') or ''}")
    if json_path:
        json_path.write_text(json.dumps({"machine": machine, "entries": results, "shim": shim}, indent=2))
    bad = sum(r["verdict"] == "DIFFERENT" for r in results)
    print(f"{len(results) - bad} of {len(results)} entry points identical or within spread; "
          f"shim check {'ok' if shim['ok'] else 'FAILED'}")
    return 1 if failed else 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("prepare", help="copy each mini-project twice and migrate one copy")
    p.add_argument("dir", type=Path)
    p.add_argument("--project", action="append", choices=PROJECTS, help="only this project (repeatable)")
    r = sub.add_parser("run", help="run originals and migrated copies, compare their output")
    r.add_argument("dir", type=Path)
    r.add_argument("--require-cuda", action="store_true", help="fail an entry point that never initialised CUDA")
    r.add_argument("--json", type=Path, help="write the full report here")
    r.add_argument("--project", action="append", choices=PROJECTS, help="only this project (repeatable)")
    r.add_argument("--entry", action="append", metavar="PROJECT:ENTRY",
                   choices=[f"{e[0]}:{e[1]}" for e in ENTRY_POINTS], help="only this entry point (repeatable)")
    args = parser.parse_args(argv)
    if args.command == "prepare":
        return prepare(args.dir.resolve(), args.project)
    return run(args.dir.resolve(), args.require_cuda, args.json, args.project, args.entry)


if __name__ == "__main__":
    sys.exit(main())
