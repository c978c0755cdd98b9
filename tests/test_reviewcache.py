"""The whole-run passes' cache (reviewcache.py): a warm run over the same files reuses what the
passes made of them; an edit, a changed header outside the run, or a tampered entry runs them
again, and the output is the same as a run without a cache in every case."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from npu_migrate import runplan
from npu_migrate.cli import main

KERNEL_LESS = '#include "helpers.h"\nint f() { return __CUDACC_VER_MAJOR__; }\n'
TRAIN = """\
import torch


def train(model):
    model.cuda()
    torch.cuda.synchronize()
"""


@pytest.fixture
def calls(monkeypatch) -> list:
    """Each run of the whole-run passes, counted."""
    seen: list = []
    passes = runplan.whole_run_passes

    def counting(results, paths):
        seen.append(len(results))
        return passes(results, paths)

    monkeypatch.setattr(runplan, "whole_run_passes", counting)
    return seen


def project(tmp_path: Path) -> Path:
    root = tmp_path / "proj"
    (root / "csrc").mkdir(parents=True)
    (root / "csrc" / "entry.cu").write_text(KERNEL_LESS)
    (root / "train.py").write_text(TRAIN)
    # a header found above the run's root: read by builders.py, never part of the run
    (tmp_path / "helpers.h").write_text("int g();\n")
    return root


def check(root: Path, *flags: str) -> dict:
    result = CliRunner().invoke(main, ["check", str(root), "--output-format", "json", *flags])
    assert result.exit_code in (0, 1), result.output
    return json.loads(result.stdout)


def severities(report: dict, path: str) -> list[str]:
    """The file's findings' severities; "scope" for a named scope of the passes (a kernel-less
    `.cu` is no port work since round 18: builders.NO_KERNEL, a moot.NO_WORK phrase)."""
    found = [f["severity"] for f in report["findings"] if f["path"].endswith(path)]
    return found + ["scope" for s in report["skipped"] if s["path"].endswith(path) and "no kernel in the file" in s["reason"]]


def test_a_warm_run_reuses_the_passes_and_says_the_same(tmp_path, calls):
    root, folder = project(tmp_path), str(tmp_path / "cache")
    cold = check(root, "--cache-dir", folder)
    assert len(calls) == 1
    assert severities(cold, "entry.cu") == ["scope"]  # (the passes made it a named scope: no kernel)
    warm = check(root, "--cache-dir", folder)
    assert len(calls) == 1, "a warm run over unchanged files ran the whole-run passes again"
    assert warm == cold == check(root, "--no-cache")


def test_an_edited_file_runs_the_passes_again(tmp_path, calls):
    root, folder = project(tmp_path), str(tmp_path / "cache")
    check(root, "--cache-dir", folder)
    (root / "csrc" / "entry.cu").write_text(KERNEL_LESS + "__global__ void k() {}\n")
    edited = check(root, "--cache-dir", folder)
    assert len(calls) == 2
    assert severities(edited, "entry.cu") == ["error"]
    assert edited == check(root, "--no-cache")


def test_a_changed_header_outside_the_run_is_read_again(tmp_path, calls):
    """The header is no file of the run, so the run's digest is unchanged: the cached entry's
    record of what the passes read outside the run makes it a miss."""
    root, folder = project(tmp_path), str(tmp_path / "cache")
    assert severities(check(root, "--cache-dir", folder), "entry.cu") == ["scope"]
    (tmp_path / "helpers.h").write_text("int g();\n__global__ void k() {}\n")
    again = check(root, "--cache-dir", folder)
    assert len(calls) == 2
    assert severities(again, "entry.cu") == ["error"] == severities(check(root, "--no-cache"), "entry.cu")
    (tmp_path / "helpers.h").unlink()  # (gone: a header not found may bring kernels in)
    assert severities(check(root, "--cache-dir", folder), "entry.cu") == ["error"]
    assert len(calls) == 4  # (and one run without a cache above)


def test_a_tampered_entry_is_not_used(tmp_path, calls):
    root, folder = project(tmp_path), tmp_path / "cache"
    cold = check(root, "--cache-dir", str(folder))
    (cache_file,) = folder.glob("*.json")
    data = json.loads(cache_file.read_text())
    (run, (payload, mac)), = data["reviews"].items()
    # what an attacker would write: the kernel-less source's scope made to say something else
    assert "no kernel in the file" in payload
    data["reviews"][run] = [payload.replace("no kernel in the file", "nothing to see here"), mac]
    cache_file.write_text(json.dumps(data))
    result = CliRunner().invoke(main, ["check", str(root), "--output-format", "json", "--cache-dir", str(folder)])
    assert "failed verification" in result.stderr
    assert json.loads(result.stdout) == cold
    assert len(calls) == 2


def test_a_signed_but_malformed_entry_is_a_miss(tmp_path, calls, monkeypatch):
    """An entry that verifies but does not hold the known fields (a bug, an older layout) runs
    the passes again instead of failing the run."""
    from npu_migrate.cache import Cache

    root, folder = project(tmp_path), str(tmp_path / "cache")
    cold = check(root, "--cache-dir", folder)
    monkeypatch.setattr(Cache, "lookup_review", lambda self, run: '{"changed": [["nowhere.py", [], []]], "reads": []}')
    assert check(root, "--cache-dir", folder) == cold
    assert len(calls) == 2
