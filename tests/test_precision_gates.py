"""Issue #16, precision: gates that must not be widened, tests that never run on an NPU host,
NPU903 once per file, merged findings anchored on a real use.

Each test writes a small fixture of its own, asserts that the false (or widened) case is gone or
lowered to info with a reason, and that a nearby true case is still rewritten or reported.
"""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from npu_migrate import catalogue
from npu_migrate.cli import main
from npu_migrate.engine import migrate_source
from npu_migrate.model import Options

ENABLED = catalogue.enabled_codes()


def _migrated(text: str, relpath: str = "pkg/mod.py") -> str:
    result = migrate_source(text.encode(), relpath, Options(enabled=ENABLED))
    return (result.new or result.original).decode()


def _findings(tmp_path: Path, files: dict[str, str]) -> list[dict]:
    root = tmp_path / "project"
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    result = CliRunner().invoke(
        main, ["migrate", str(root), "--dry-run", "--no-cache", "--isolated", "--allow-dirty", "-j", "1",
               "--output-format", "json"],
        catch_exceptions=False,
    )
    assert result.exit_code in (0, 1), result.output
    report = json.loads(result.stdout)
    assert not report["errors"], report["errors"]
    return report["findings"]


def _at(findings: list[dict], path: str, line: int, code: str | None = None) -> list[dict]:
    return [f for f in findings if f["path"] == path and f["line"] == line and (code is None or f["code"] == code)]


# ----------------------------------------------------------------------------- 1. gates
GATES = '''\
import torch
from torch.utils.cpp_extension import CUDA_HOME


def toolkit_ok(builder):
    ok = True
    if not builder.is_rocm() and torch.cuda.is_available():
        major = int(torch.version.cuda.split(".")[0])
        ok = major >= 11
    return ok


def new_enough():
    return torch.cuda.is_available() and torch.version.cuda >= "11.8"


def nvcc_path():
    if not torch.cuda.is_available():
        return None
    return CUDA_HOME + "/bin/nvcc"


def arches():
    assert torch.cuda.is_available()
    return torch.backends.cudnn.version()


def cudnn(x):
    if x.device.type == "cuda":
        return torch.backends.cudnn.version()
    return 0


def place(model):
    if torch.cuda.is_available():
        print("CUDA", torch.version.cuda)
        model.cuda()
    device = "cuda" if torch.cuda.is_available() else "cpu"
    return device


def scale(x):
    if x.device.type == "cuda":
        return x * 2
    return x
'''


def test_availability_gate_in_front_of_cuda_toolchain_is_not_widened(tmp_path):
    new = _migrated(GATES)
    # the gates stay as written: an NPU host would reach torch.version.cuda (None), CUDA_HOME, nvcc
    assert 'if not builder.is_rocm() and torch.cuda.is_available():' in new
    assert 'return torch.cuda.is_available() and torch.version.cuda >= "11.8"' in new
    assert 'if not torch.cuda.is_available():\n        return None' in new
    assert 'assert torch.cuda.is_available()\n' in new
    assert 'if x.device.type == "cuda":\n        return torch.backends.cudnn.version()' in new
    # the normal case is still rewritten (a version only printed does not make a gate)
    assert 'if npu_compat.is_available():\n        print("CUDA", torch.version.cuda)\n        model.to(npu_compat.device())' in new
    assert 'device = npu_compat.device_type() if npu_compat.is_available() else "cpu"' in new
    assert 'if npu_compat.is_accelerator_type(x.device.type):\n        return x * 2' in new

    findings = _findings(tmp_path, {"pkg/gates.py": GATES})
    gates = [f for f in findings if f["code"] == "NPU110"]
    lines = {f["line"] for f in gates} | {int(n) for f in gates for n in _also(f["message"])}
    assert lines == {7, 14, 18, 24, 29}, gates
    assert any("torch.version.cuda" in f["message"] for f in gates)
    assert all(f["severity"] == "warning" for f in gates)
    assert not [f for f in findings if f["code"] == "NPU990" and "is_available" in f["source"]]


def _also(message: str) -> list[str]:
    import re

    match = re.search(r"\(also at lines? ([\d, ]+)", message)
    return [n.strip() for n in match.group(1).split(",")] if match else []


SKIPS = '''\
import unittest

import pytest
import torch


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_toolkit():
    assert torch.version.cuda.split(".")[0] == "12"


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_moves():
    assert torch.ones(2).cuda().sum() == 2


class TestArch(unittest.TestCase):
    @unittest.skipUnless(torch.cuda.is_available(), "needs CUDA")
    def test_arch(self):
        self.assertIn("sm_90", torch.cuda.get_arch_list())
'''


def test_skip_in_front_of_cuda_toolchain_keeps_its_condition(tmp_path):
    new = _migrated(SKIPS, "tests/test_skips.py")
    assert new.count("@pytest.mark.skipif(not torch.cuda.is_available()") == 1
    assert '@pytest.mark.skipif(not npu_compat.is_available(), reason="needs CUDA")\ndef test_moves' in new
    assert '@unittest.skipUnless(torch.cuda.is_available(), "needs CUDA")' in new
    findings = _findings(tmp_path, {"tests/test_skips.py": SKIPS})
    gates = [f for f in findings if f["code"] == "NPU110"]
    lines = {f["line"] for f in gates} | {int(n) for f in gates for n in _also(f["message"])}
    assert lines == {7, 18}, gates
    # the kept skip still skips the test off CUDA: what is reported inside it is for review
    assert all(f["severity"] == "info" and "does not run on an NPU host" in f["message"] for f in gates)
    inside = _at(findings, "tests/test_skips.py", 9, "NPU990")
    assert inside and inside[0]["severity"] == "info"
    # a widened skip runs on the NPU: its rewrite is listed, nothing lowered there
    assert _at(findings, "tests/test_skips.py", 12, "NPU201")
