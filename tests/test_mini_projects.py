"""End-to-end checks on the two runnable mini-projects in fixtures/projects/.

Each project reproduces CUDA idioms from research code (see its README). The migration tests copy a
project twice, migrate one copy with `python -m npu_migrate`, run the same entry point in both copies
on CPU and require identical stdout: invariant 1 (faithful) says that on a machine without an NPU the
migrated code must print the same losses to the last bit. The original projects are also run on
their own, so a broken fixture is told apart from a broken migration.
"""
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.project_runs import run_migration, step_losses

REPO_ROOT = Path(__file__).resolve().parents[1]
PROJECTS_DIR = REPO_ROOT / "fixtures" / "projects"

RUN_TIMEOUT = 120
NUM_STEPS = 5
STEP_LINE = re.compile(r"^step (\d+) loss (\S+)$")

# (project, arguments after `python`), all run with the project root as the working directory
TRAINING_ENTRY_POINTS = [
    ("flatquant_mini", ["-m", "flatquant_mini.main"]),
    ("flatquant_mini", ["scripts/eval_fq.py"]),
    ("nanochat_mini", ["-m", "nanochat_mini.train"]),
    ("nanochat_mini", ["scripts/base_train.py"]),
]
# CLI behaviour that must survive migration (patterns.md trap 44): `--device-type cuda` is still
# accepted and resolves to the same config. (`--help` is checked separately: the migration may
# widen the choices with "npu", but must keep cuda, cpu, mps and the help text.)
CLI_ENTRY_POINTS = [
    ("nanochat_mini", ["-m", "nanochat_mini.train", "--device-type", "cuda", "--print-config"]),
    ("nanochat_mini", ["-m", "nanochat_mini.train", "--device-type", "cpu", "--num-iterations", "2"]),
]
ALL_ENTRY_POINTS = TRAINING_ENTRY_POINTS + CLI_ENTRY_POINTS

# Strings that contain "cuda" but are not devices; they must be in the migrated sources unchanged.
PRESERVED_STRINGS = {
    "nanochat_mini": {
        "nanochat_mini/train.py": [
            '"checkpoints/cuda_run/model.pt"',
            '"device to use: cuda|cpu|mps (empty = autodetect)"',
            '"tip: running on cuda enables bf16 autocast and the fused AdamW kernel"',
            "'cuda_rng_state' in state",
        ],
    },
    "flatquant_mini": {
        # a user's own method named `cuda` is a definition, not a call to rewrite
        "flatquant_mini/quantizer.py": ["def cuda(self, device=None):"],
    },
}

# Files whose migrated version must differ from the original, and text that must be gone from them.
EXPECTED_REWRITES = {
    "flatquant_mini": {
        "flatquant_mini/benchmark.py": ["torch.cuda.synchronize", "torch.cuda.max_memory_allocated"],
        "flatquant_mini/utils.py": [],
        "flatquant_mini/model_tools.py": [],
    },
    "nanochat_mini": {
        "nanochat_mini/common.py": ["torch.cuda.synchronize", "torch.cuda.max_memory_allocated"],
        "nanochat_mini/gpt.py": [],
        "scripts/base_train.py": [],
    },
}


def _entry_id(entry):
    project, args = entry
    return f"{project}:{' '.join(args)}"


def _copy_project(name, dest):
    shutil.copytree(PROJECTS_DIR / name, dest, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    return dest


def _run_env():
    """CPU-only, deterministic, and the project reachable only through the working directory."""
    env = dict(os.environ)
    env.pop("PYTHONPATH", None)
    for var in ("RANK", "LOCAL_RANK", "WORLD_SIZE"):  # never look like a torchrun launch
        env.pop(var, None)
    env["CUDA_VISIBLE_DEVICES"] = ""
    env["OMP_NUM_THREADS"] = "1"  # same thread count in both runs, so the same reduction order
    env["COLUMNS"] = "100"  # argparse wraps --help to the terminal width
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    return env


def _run_entry_point(project_dir, args):
    proc = subprocess.run(
        [sys.executable, *args],
        cwd=project_dir,
        env=_run_env(),
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT,
    )
    assert proc.returncode == 0, (
        f"`python {' '.join(args)}` failed in {project_dir} (exit {proc.returncode})\n"
        f"--- stdout ---\n{proc.stdout}\n--- stderr ---\n{proc.stderr}"
    )
    return proc.stdout


def _run_migration(project_dir):
    return run_migration(project_dir, timeout=RUN_TIMEOUT)


def _snapshot(project_dir):
    return {
        str(p.relative_to(project_dir)): p.read_bytes()
        for p in sorted(project_dir.rglob("*"))
        if p.is_file() and "__pycache__" not in p.parts
    }


def _step_losses(stdout):
    return step_losses(stdout, NUM_STEPS)


# ---------------------------------------------------------------------------------------------
# The fixtures themselves (no migration): must always pass.


@pytest.mark.parametrize("entry", TRAINING_ENTRY_POINTS, ids=_entry_id)
def test_original_entry_point_runs_deterministically(entry, tmp_path):
    project, args = entry
    project_dir = _copy_project(project, tmp_path / project)
    first = _run_entry_point(project_dir, args)
    losses = _step_losses(first)
    assert len(losses) == NUM_STEPS
    assert all(loss == loss and 0.0 < loss < 100.0 for loss in losses), losses
    # the migration tests compare two runs bit for bit; that only means something if one project
    # run twice already agrees with itself
    assert _run_entry_point(project_dir, args) == first


def test_original_cli_keeps_cuda_choices(tmp_path):
    project_dir = _copy_project("nanochat_mini", tmp_path / "nanochat_mini")
    help_text = _run_entry_point(project_dir, ["-m", "nanochat_mini.train", "--help"])
    assert "{cuda,cpu,mps}" in help_text
    assert "device to use: cuda|cpu|mps" in help_text
    config = _run_entry_point(project_dir, ["-m", "nanochat_mini.train", "--device-type", "cuda", "--print-config"])
    assert config.strip() == "device_type=cuda num_iterations=5 checkpoint=checkpoints/cuda_run/model.pt"


def test_original_output_shows_non_device_strings(tmp_path):
    project_dir = _copy_project("nanochat_mini", tmp_path / "nanochat_mini")
    out = _run_entry_point(project_dir, ["-m", "nanochat_mini.train"])
    assert "running on cuda" in out
    assert "checkpoints/cuda_run/model.pt" in out
    assert "has cuda_rng_state: False" in out
    assert "compute dtype torch.float32" in out  # trap 40: the capability query was never reached


# ---------------------------------------------------------------------------------------------
# Migration: needs the engine (`python -m npu_migrate PATH`).


@pytest.fixture(scope="module")
def project_pair(tmp_path_factory):
    """(original copy, migrated copy) of a project; each project is migrated once per module."""
    pairs = {}

    def get(name):
        if name not in pairs:
            base = tmp_path_factory.mktemp(name)
            original = _copy_project(name, base / "original" / name)
            migrated = _copy_project(name, base / "migrated" / name)
            _run_migration(migrated)
            pairs[name] = (original, migrated)
        return pairs[name]

    return get


@pytest.mark.integration
@pytest.mark.parametrize("entry", ALL_ENTRY_POINTS, ids=_entry_id)
def test_migrated_entry_point_matches_original(entry, project_pair):
    project, args = entry
    original, migrated = project_pair(project)
    expected = _run_entry_point(original, args)
    actual = _run_entry_point(migrated, args)
    assert actual == expected
    if entry in TRAINING_ENTRY_POINTS:
        assert len(_step_losses(actual)) == NUM_STEPS


def _run_with_warnings_as_errors(project_dir, args):
    proc = subprocess.run([sys.executable, "-W", "error", *args], cwd=project_dir, env=_run_env(),
                          capture_output=True, text=True, timeout=RUN_TIMEOUT)
    last = proc.stderr.strip().splitlines()[-1:] if proc.returncode else []
    return proc.returncode, proc.stdout, last


@pytest.mark.integration
@pytest.mark.parametrize("entry", TRAINING_ENTRY_POINTS, ids=_entry_id)
def test_migrated_entry_point_adds_no_warning(entry, project_pair):
    """`python -W error`: a warning the migration added (a deprecated API it called, such as
    torch.cuda.amp.GradScaler for torch.amp.GradScaler) would stop the migrated run where the
    original goes on, or end it with another error. Both runs must end alike."""
    project, args = entry
    original, migrated = project_pair(project)
    assert _run_with_warnings_as_errors(migrated, args) == _run_with_warnings_as_errors(original, args)


@pytest.mark.integration
def test_migrated_cli_still_offers_cuda(project_pair):
    _, migrated = project_pair("nanochat_mini")
    help_text = _run_entry_point(migrated, ["-m", "nanochat_mini.train", "--help"])
    choices = re.search(r"--device-type \{([a-z,]+)\}", help_text)
    assert choices, help_text
    assert {"cuda", "cpu", "mps"} <= set(choices.group(1).split(",")), help_text
    assert "device to use: cuda|cpu|mps (empty = autodetect)" in " ".join(help_text.split())


@pytest.mark.integration
@pytest.mark.parametrize("project", sorted(EXPECTED_REWRITES))
def test_migrated_project_is_rewritten(project, project_pair):
    original, migrated = project_pair(project)
    shims = sorted(p.relative_to(migrated) for p in migrated.rglob("npu_compat/__init__.py"))
    assert shims, "no npu_compat/__init__.py shim injected"
    assert (migrated / "npu_compat" / "__init__.py").exists(), f"shim not at the project root: {shims}"
    for rel, gone in EXPECTED_REWRITES[project].items():
        before = (original / rel).read_text()
        after = (migrated / rel).read_text()
        assert after != before, f"{rel} was not migrated"
        assert "npu_compat" in after, f"{rel} does not use the shim"
        for text in gone:
            assert text not in after, f"{rel} still contains {text!r}"


@pytest.mark.integration
@pytest.mark.parametrize("project", sorted(PRESERVED_STRINGS))
def test_migration_keeps_non_device_strings(project, project_pair):
    _, migrated = project_pair(project)
    for rel, needles in PRESERVED_STRINGS[project].items():
        text = (migrated / rel).read_text()
        for needle in needles:
            assert needle in text, f"{rel} lost {needle!r}"


@pytest.mark.integration
@pytest.mark.parametrize("project", sorted(EXPECTED_REWRITES))
def test_migration_is_idempotent(project, tmp_path):
    migrated = _copy_project(project, tmp_path / project)
    _run_migration(migrated)
    once = _snapshot(migrated)
    _run_migration(migrated)
    assert _snapshot(migrated) == once
