"""Shared by the mini-project tests: run the migration on a copied project as a user would."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
STEP_LINE = re.compile(r"^step (\d+) loss (\S+)$")


def step_losses(stdout: str, num_steps: int) -> list[float]:
    """The losses of the `step {i} loss {repr}` lines; exactly steps 0..num_steps-1."""
    lines = [line for line in stdout.splitlines() if line.startswith("step ")]
    matches = [STEP_LINE.match(line) for line in lines]
    assert all(matches), f"malformed step lines: {lines}"
    assert [int(m.group(1)) for m in matches] == list(range(num_steps)), stdout
    return [float(m.group(2)) for m in matches]


def run_migration(project_dir: Path, timeout: float = 300) -> subprocess.CompletedProcess:
    """`python -m npu_migrate PROJECT`; fails the test when the tool itself fails."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO_ROOT), env.get("PYTHONPATH")) if p)
    proc = subprocess.run(
        [sys.executable, "-m", "npu_migrate", str(project_dir)],
        cwd=project_dir.parent,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    # 0: nothing left to report, 1: findings remain (both fine here), 2: the tool itself failed.
    # An uncaught exception also exits 1, so a traceback counts as a failure too.
    assert proc.returncode in (0, 1) and "Traceback (most recent call last)" not in proc.stderr, (
        f"npu_migrate failed on {project_dir} (exit {proc.returncode})\n"
        f"--- stdout ---\n{proc.stdout}\n--- stderr ---\n{proc.stderr}"
    )
    return proc


def commit_all(root: Path, env: dict | None = None) -> None:
    """Make root a git repository with everything committed (a clean work tree)."""
    for args in (("init", "-q", "-b", "main"), ("config", "user.email", "t@example.com"),
                 ("config", "user.name", "t"), ("config", "commit.gpgsign", "false"),
                 ("add", "-A"), ("commit", "-q", "-m", "base", "--no-verify")):
        subprocess.run(["git", *args], cwd=root, check=True, capture_output=True, env=env)


# gloo can abort a rank at interpreter exit on a loaded machine, after the run completed
# ("terminate called without an active exception", exit -6): a torch teardown race, not ours;
# and the port probed free may be taken before torchrun binds it.
TEARDOWN_ABORT = "terminate called without an active exception"
PORT_CLASH_SIGNS = ("EADDRINUSE", "Address already in use", "DistNetworkError")


# a frame of a Python traceback outside the installed packages (the project's own code failing)
_OWN_FRAME = re.compile(r'^\s*File "(?![^"]*(?:site-packages|dist-packages|/lib/python3)[^"]*")[^"]+", line \d+', re.M)


def torchrun_should_retry(proc, steps: int) -> bool:
    """True when a failed torchrun should be run again: the port was taken between probe and
    bind, or gloo aborted a rank at exit. The abort counts when every `steps` step line was
    printed, or when no traceback names a frame of the project's own code: a rank's C++ abort
    can take the other rank down before it prints its last lines (session 41's clean-clone CI),
    and a run that fails for a reason of its own shows its traceback. The callers try three
    times, so a run that always aborts still fails."""
    if proc.returncode == 0:
        return False
    if TEARDOWN_ABORT in proc.stderr and (proc.stdout.count("step ") >= steps or not _OWN_FRAME.search(proc.stderr)):
        return True
    return any(sign in proc.stderr for sign in PORT_CLASH_SIGNS)
