"""End-to-end checks on the distributed mini-project fixtures/projects/ddp_mini.

The project is a DDP training script (gloo on CPU, nccl on GPU) and a launcher that sets CUDA
environment variables before starting torchrun. Each run below is a real 2-process torchrun on
127.0.0.1 (no other network). Invariant 1 (faithful) requires that, on this CPU-only machine, the
migrated copy prints exactly what the original prints: the same backend, device and losses to the
last bit, and the launcher sets the same variables. The original project is also checked on its own,
so a broken fixture is told apart from a broken migration.
"""
import os
import re
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from tests.project_runs import run_migration, step_losses, torchrun_should_retry

REPO_ROOT = Path(__file__).resolve().parents[1]
PROJECT = "ddp_mini"
PROJECT_SRC = REPO_ROOT / "fixtures" / "projects" / PROJECT
FAKE_NPU = REPO_ROOT / "tests" / "fake_npu"  # a torch_npu test double that reports one NPU

RUN_TIMEOUT = 120
NUM_STEPS = 5
NPROC = 2
STEP_LINE = re.compile(r"^step (\d+) loss (\S+)$")
HEADER = "backend gloo world_size 2 device cpu amp False"
TRAIN_MODULE = ["-m", "ddp_mini.train"]
LAUNCH_DRY = ["scripts/launch.py", "--dry"]
# What the original launcher prints on a machine where none of these variables were set before.
EXPECTED_DRY_PREFIX = [
    "visible devices: 0,1 -> 2 processes",
    "set CUDA_VISIBLE_DEVICES=0,1",
    "set NCCL_DEBUG=WARN",
    "set PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True",
    "set TORCH_NCCL_ASYNC_ERROR_HANDLING=1",
]
# Variables the launcher reads or sets (CUDA names and their NPU counterparts): removed from the
# test environment so its setdefault() calls take effect and the output does not depend on the host.
LAUNCHER_VAR_PREFIXES = ("CUDA_", "NCCL_", "TORCH_NCCL_", "PYTORCH_CUDA_", "PYTORCH_NPU_", "ASCEND_", "HCCL_")


def _copy_project(dest):
    shutil.copytree(PROJECT_SRC, dest, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    return dest


def _free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _base_env():
    """No PYTHONPATH (the project is reachable only through the working directory), one thread."""
    env = dict(os.environ)
    env.pop("PYTHONPATH", None)
    # never look like we are already inside a torchrun launch
    for var in list(env):
        if var in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_RANK", "MASTER_ADDR",
                   "MASTER_PORT") or var.startswith("TORCHELASTIC_"):
            env.pop(var)
    env["OMP_NUM_THREADS"] = "1"  # same thread count in both runs, so the same reduction order
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    if sys.platform.startswith("linux") and Path("/sys/class/net/lo").exists():
        env["GLOO_SOCKET_IFNAME"] = "lo"  # keep gloo's traffic on the loopback interface
    return env


def _train_env():
    env = _base_env()
    env["CUDA_VISIBLE_DEVICES"] = ""
    return env


def _launcher_env():
    env = _base_env()
    for var in list(env):
        if var.startswith(LAUNCHER_VAR_PREFIXES):
            env.pop(var)
    return env


def _run(project_dir, args, env):
    proc = subprocess.run(
        [sys.executable, *args],
        cwd=project_dir,
        env=env,
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT,
    )
    return proc


def _check(proc, project_dir, what):
    assert proc.returncode == 0, (
        f"`{what}` failed in {project_dir} (exit {proc.returncode})\n"
        f"--- stdout ---\n{proc.stdout}\n--- stderr ---\n{proc.stderr}"
    )
    return proc.stdout


def _port_clash(proc):
    """True when the run should be retried (project_runs.torchrun_should_retry)."""
    return torchrun_should_retry(proc, NUM_STEPS)


def _run_torchrun(project_dir):
    """`torchrun --nproc_per_node=2 --master-port <free> -m ddp_mini.train` from the project root."""
    for _ in range(3):  # another process may grab the free port between probe and bind
        args = ["-m", "torch.distributed.run", "--nnodes=1", f"--nproc_per_node={NPROC}",
                "--master-addr=127.0.0.1", f"--master-port={_free_port()}", *TRAIN_MODULE]
        proc = _run(project_dir, args, _train_env())
        if not _port_clash(proc):
            break
    return _check(proc, project_dir, "torchrun " + " ".join(args[2:]))


def _run_launcher(project_dir, *extra):
    for _ in range(3):
        args = ["scripts/launch.py", *extra]
        if "--dry" not in extra:
            args += ["--master-port", str(_free_port())]
        proc = _run(project_dir, args, _launcher_env())
        if not _port_clash(proc):
            break
    return _check(proc, project_dir, "python " + " ".join(args))


def _step_losses(stdout):
    return step_losses(stdout, NUM_STEPS)


def _training_lines(stdout):
    """The header and the step lines rank 0 prints (the launcher adds its own lines before them)."""
    return [line for line in stdout.splitlines() if line == HEADER or line.startswith("step ")]


def _run_migration(project_dir):
    return run_migration(project_dir, timeout=RUN_TIMEOUT)


# ---------------------------------------------------------------------------------------------
# The fixture itself (no migration): must always pass.


@pytest.fixture(scope="module")
def original(tmp_path_factory):
    """A pristine copy of the project and the stdout of one torchrun training run in it."""
    project_dir = _copy_project(tmp_path_factory.mktemp("original") / PROJECT)
    return project_dir, _run_torchrun(project_dir)


@pytest.mark.integration
def test_original_trains_with_torchrun(original):
    _, stdout = original
    assert stdout.splitlines()[0] == HEADER, stdout
    losses = _step_losses(stdout)
    assert len(losses) == NUM_STEPS
    assert all(loss == loss and 0.0 < loss < 100.0 for loss in losses), losses
    assert len(stdout.splitlines()) == 1 + NUM_STEPS, "only rank 0 may print"


@pytest.mark.integration
def test_original_launcher_dry_run(original):
    project_dir, _ = original
    lines = _run_launcher(project_dir, "--dry").splitlines()
    assert lines[:-1] == EXPECTED_DRY_PREFIX, lines
    assert lines[-1] == (
        "command: python -m torch.distributed.run --nnodes=1 --nproc_per_node=2 "
        "--master-addr=127.0.0.1 --master-port=29500 -m ddp_mini.train"
    ), lines


@pytest.mark.integration
def test_original_launcher_runs_training_deterministically(original):
    # a second, independent 2-process run (through the launcher): the migration test below compares
    # two runs bit for bit, which only means something if the project agrees with itself
    project_dir, first = original
    stdout = _run_launcher(project_dir)
    assert _training_lines(stdout) == first.splitlines()


# ---------------------------------------------------------------------------------------------
# Migration: needs the engine (`python -m npu_migrate PATH`) and the distributed/AMP/env rules.


@pytest.fixture(scope="module")
def migrated(tmp_path_factory):
    project_dir = _copy_project(tmp_path_factory.mktemp("migrated") / PROJECT)
    _run_migration(project_dir)
    return project_dir


@pytest.mark.integration
def test_migrated_project_has_shim(migrated):
    assert (migrated / "npu_compat" / "__init__.py").is_file(), "no npu_compat/__init__.py at the project root"


@pytest.mark.integration
@pytest.mark.parametrize("rel", ["ddp_mini/train.py", "scripts/launch.py"])
def test_migrated_sources_use_the_shim(rel, migrated):
    before = (PROJECT_SRC / rel).read_text()
    after = (migrated / rel).read_text()
    assert after != before, f"{rel} was not migrated"
    assert "npu_compat" in after, f"{rel} does not use the shim"


@pytest.mark.integration
def test_migrated_training_is_bit_identical(original, migrated):
    _, expected = original
    actual = _run_torchrun(migrated)
    assert actual == expected
    assert len(_step_losses(actual)) == NUM_STEPS


@pytest.mark.integration
def test_migrated_launcher_dry_run_is_identical(original, migrated):
    original_dir, _ = original
    assert _run_launcher(migrated, "--dry") == _run_launcher(original_dir, "--dry")


# ---------------------------------------------------------------------------------------------
# The migrated project on an "NPU host" (tests/fake_npu on the path): the same code now means the
# NPU. Nothing is launched; the launcher's dry run and setup() with the process group stubbed out.


def _fake_npu_env(extra_path=()):
    env = _launcher_env()
    env.pop("NPU_COMPAT_DEVICE", None)
    env["PYTHONPATH"] = os.pathsep.join(str(p) for p in (*extra_path, FAKE_NPU))
    env["TORCH_DEVICE_BACKEND_AUTOLOAD"] = "0"  # a real torch_npu must not sneak in
    return env


@pytest.mark.integration
def test_migrated_launcher_sets_npu_variables_on_a_fake_npu_host(migrated):
    proc = _run(migrated, LAUNCH_DRY, _fake_npu_env())
    lines = _check(proc, migrated, "python scripts/launch.py --dry (fake NPU)").splitlines()
    assert lines[:-1] == [
        "visible devices: 0,1 -> 2 processes",
        "set ASCEND_RT_VISIBLE_DEVICES=0,1",
        # the fake is torch_npu 2.7.1, which reads the HCCL_* names (TORCH_HCCL_* from 2.14.0 on)
        "set HCCL_ASYNC_ERROR_HANDLING=1",
        "set NCCL_DEBUG=WARN",  # no HCCL counterpart: reported as a finding, left as it was
        "set PYTORCH_NPU_ALLOC_CONF=expandable_segments:True",
    ], lines


FAKE_NPU_SETUP_PROBE = """
import torch.distributed as dist
import torch_npu
import ddp_mini.train as train

seen = {}
dist.init_process_group = lambda backend=None, **kwargs: seen.setdefault("backend", backend)
dist.get_backend = lambda group=None: seen["backend"]
dist.get_rank = lambda group=None: 0
dist.get_world_size = lambda group=None: 2
rank, world_size, local_rank, device = train.setup()
print("backend", seen["backend"], "device", device)
train.make_scaler(True)
print("calls", sorted({name for name, _, _ in torch_npu.calls}))
"""


@pytest.mark.integration
def test_migrated_setup_selects_hccl_on_a_fake_npu_host(migrated):
    env = _fake_npu_env(extra_path=[migrated])
    env["LOCAL_RANK"] = "1"
    proc = _run(migrated, ["-c", FAKE_NPU_SETUP_PROBE], env)
    lines = _check(proc, migrated, "setup() probe (fake NPU)").splitlines()
    assert lines[-2] == "backend hccl device npu:1", lines
    calls = lines[-1]
    assert "'set_device'" in calls, calls  # torch.cuda.set_device(local_rank) -> the NPU's
    assert "'amp.GradScaler'" in calls, calls  # torch.amp.GradScaler() -> torch_npu's GradScaler
