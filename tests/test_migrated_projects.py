"""Migrated mini-projects: nothing left unreported, and dispatch to the NPU under the fake torch_npu.

(Bit-identical CPU runs of original and migrated copies are in tests/test_mini_projects.py.)
"""

from __future__ import annotations

import json
import re
import shutil
from collections import Counter
import subprocess
import sys
from pathlib import Path

import pytest

from npu_migrate import npu_api
from tests.shim_fixtures import FAKE_NPU

PROJECTS = Path(__file__).resolve().parent.parent / "fixtures" / "projects"
pytestmark = pytest.mark.integration


def _cli_json(*args: str) -> dict:
    proc = subprocess.run([sys.executable, "-m", "npu_migrate", *args, "--output-format", "json"],
                          capture_output=True, text=True)
    assert proc.returncode in (0, 1), proc.stderr
    return json.loads(proc.stdout)


@pytest.fixture(scope="module", params=["flatquant_mini", "nanochat_mini"])
def migrated(request, tmp_path_factory):
    copy = tmp_path_factory.mktemp(request.param) / request.param
    shutil.copytree(PROJECTS / request.param, copy)
    report = _cli_json(str(copy))
    return copy, report


def test_sweep_leaves_nothing_unreported(migrated):
    """Every CUDA construct still in the migrated code was reported by the migration (invariant 2)."""
    copy, first = migrated
    reported = Counter((f["path"], f["code"]) for f in first["findings"] if not f["fixable"])
    again = _cli_json(str(copy), "--dry-run")
    assert again["files_changed"] == 0
    assert not [f for f in again["findings"] if f["fixable"]]
    # by file and code, not by source text: a construct reported in a statement that was also
    # rewritten (`.cuda().to(torch.float64)`, NPU930) is still reported, in its migrated spelling
    left = Counter((f["path"], f["code"]) for f in again["findings"])
    assert not left - reported, f"found after migration but never reported: {left - reported}"


def test_migrated_code_uses_only_names_torch_npu_has(migrated):
    copy, _ = migrated
    used = set()
    for path in copy.rglob("*.py"):
        if "npu_compat" in path.parts:
            continue
        used |= set(re.findall(r"\bnpu_compat\.(\w+)", path.read_text()))
    assert used
    probe = (
        "import sys, npu_compat\n"
        "assert npu_compat.device_type() == 'npu'\n"
        "for name in sys.argv[1:]:\n"
        "    getattr(npu_compat, name)\n"  # the fake torch.npu has only real torch_npu names
        "print('ok')\n"
    )
    proc = subprocess.run([sys.executable, "-c", probe, *sorted(used)], cwd=copy,
                          env=_fake_env(copy), capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    shim = __import__("importlib").import_module("npu_migrate.shim")
    for name in used & set(shim.SHARED_NAMES):
        assert npu_api.has_name(f"torch.npu.{name}", version="2.7.1"), name


def _fake_env(copy: Path) -> dict:
    import os

    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "NPU_COMPAT_DEVICE")}
    env["PYTHONPATH"] = f"{copy}{os.pathsep}{FAKE_NPU}"
    env["TORCH_DEVICE_BACKEND_AUTOLOAD"] = "0"
    return env


def test_nanochat_on_a_fake_npu_host(tmp_path):
    """H40: the capability-gated dtype imports without crashing; the device is the NPU."""
    copy = tmp_path / "nanochat_mini"
    shutil.copytree(PROJECTS / "nanochat_mini", copy)
    _cli_json(str(copy))
    probe = (
        "from nanochat_mini import gpt, common\n"
        "import torch_npu\n"
        "print(gpt.COMPUTE_DTYPE, common.autodetect_device_type())\n"
        "print(sorted({name for name, _, _ in torch_npu.calls}))\n"
    )
    proc = subprocess.run([sys.executable, "-c", probe], cwd=copy, env=_fake_env(copy),
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    first, calls = proc.stdout.splitlines()[-2:]
    # issue #16: the `>= (8, 0)` bf16 choice asks the NPU for bf16, as the human ports do
    assert first == "torch.bfloat16 npu"
    assert "is_bf16_supported" in calls and "is_available" in calls
    # the original code crashes on such a host only if it reached torch.npu; it never does:
    original = subprocess.run([sys.executable, "-c", "from nanochat_mini import common;"
                               "print(common.autodetect_device_type())"],
                              cwd=PROJECTS / "nanochat_mini", env=_fake_env(PROJECTS / "nanochat_mini"),
                              capture_output=True, text=True)
    assert original.stdout.strip().splitlines()[-1] == "cpu"
