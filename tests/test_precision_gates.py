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

from .precision_helpers import migrate_json, moot_lines, write_project

ENABLED = catalogue.enabled_codes()


def _migrated(text: str, relpath: str = "pkg/mod.py") -> str:
    result = migrate_source(text.encode(), relpath, Options(enabled=ENABLED))
    return (result.new or result.original).decode()


def _findings(tmp_path: Path, files: dict[str, str]) -> list[dict]:
    report = migrate_json(write_project(tmp_path, files))
    _LAST_SKIPPED[:] = report["skipped"]
    return report["findings"]


_LAST_SKIPPED: list[dict] = []  # the `skipped` list of the last _findings run


def _moot(code: str, path: str | None = None) -> dict[int, str]:
    """{line: reason} of the last run's findings of `code` about code an NPU host never runs."""
    return moot_lines(_LAST_SKIPPED, code, path)


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
    return torch.cuda.get_arch_list()[-1]


def cudnn(x):
    if x.device.type == "cuda":
        return torch.backends.cudnn.version() // 1000
    return 0


def place(model):
    if torch.cuda.is_available():
        print("CUDA", torch.version.cuda)
        model.cuda()
    if torch.cuda.is_available() and torch.version.cuda and torch.version.cuda.startswith("12"):
        model.half()
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
    assert 'if x.device.type == "cuda":\n        return torch.backends.cudnn.version() // 1000' in new
    # the normal case is still rewritten (a version only printed does not make a gate)
    assert 'if npu_compat.is_available():\n        print("CUDA", torch.version.cuda)\n        model.to(npu_compat.device())' in new
    assert 'device = npu_compat.device_type() if npu_compat.is_available() else "cpu"' in new
    # a version tested for None first is safe where it is None
    assert 'if npu_compat.is_available() and torch.version.cuda and torch.version.cuda.startswith("12"):' in new
    assert 'if npu_compat.is_accelerator_type(x.device.type):\n        return x * 2' in new

    findings = _findings(tmp_path, {"pkg/gates.py": GATES})
    gates = [f for f in findings if f["code"] == "NPU110"]
    lines = {f["line"] for f in gates} | {int(n) for f in gates for n in _also(f["message"])}
    # the `assert` fails on an NPU host: it stays a warning
    assert lines == {24}, gates
    assert all(f["severity"] == "warning" for f in gates)
    # the others fall back on an NPU host as on any machine without CUDA (`ok` stays True, the
    # predicate answers False, `return None`, `return 0`): named scopes that run as written
    # (npu_migrate/keptgates.py); 8, the `torch.version.cuda` that line 7's check guards, goes
    # into line 7's scope (npu_migrate/redundant.py)
    written = {line for e in _LAST_SKIPPED if "start_line" in e
               and e["reason"].startswith("runs as written on an NPU host (NPU110)")
               for line in range(e["start_line"], e["end_line"] + 1)}
    assert {7, 8, 14, 18, 29} <= written, _LAST_SKIPPED
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
    # the kept skips still skip their tests off CUDA: named as scopes an NPU host never runs
    assert not [f for f in findings if f["code"] == "NPU110"]
    moot = _moot("NPU110")
    assert 7 in moot and 18 in moot, _LAST_SKIPPED
    assert all("does not run on an NPU host" in moot[n] or "keeps being skipped" in moot[n] for n in (7, 18))
    assert not _at(findings, "tests/test_skips.py", 9, "NPU990") and 9 in _moot("NPU990")
    # a widened skip runs on the NPU: its rewrite is listed, nothing lowered there
    assert _at(findings, "tests/test_skips.py", 12, "NPU201")


# ----------------------------------------------------------------------------- 2. tests that never run on an NPU host
HELPERS = '''\
import functools

import pytest
import torch
import torch.multiprocessing as mp

from myproj.platforms import current_platform


def _table(rows):
    return torch.randn(rows, 8).to(torch.float8_e4m3fn)


def _check(rank):
    weight = _table(4)
    assert weight.dtype == torch.float8_e4m3fn


def _worker(rank, size):
    _check(rank)


def _shared(rows):
    return torch.zeros(rows).to(torch.float8_e5m2)


@pytest.mark.skipif(not current_platform.is_cuda(), reason="CUDA required")
def test_spawned():
    mp.spawn(_worker, args=(2,), nprocs=2)
    functools.partial(_shared, 3)()


def test_runs_everywhere():
    assert _shared(2).numel() == 2
'''


def test_helpers_reached_only_from_tests_skipped_off_cuda_are_info(tmp_path):
    findings = _findings(tmp_path, {"tests/test_helpers.py": HELPERS})
    fp8 = [f for f in findings if f["code"] == "NPU913"]
    # the FP8 table of `_table` is reached only through `_worker` (spawned by a skipped test)
    assert not [f for f in fp8 if f["line"] == 11]
    assert "called only from tests that do not run on an NPU host" in _moot("NPU913")[11]
    # `_shared` is also called from a test that runs on the NPU: still an error
    kept = [f for f in fp8 if f["line"] == 24 or "24" in _also(f["message"])]
    assert kept and kept[0]["severity"] == "error", fp8


MODULE_SKIPS = {
    "tests/test_fp8_sm89.py": '''\
import pytest
import torch

from myproj.utils import is_sm_at_least_89

pytestmark = pytest.mark.skipif(not is_sm_at_least_89(), reason="needs SM89")


def test_fp8():
    x = torch.randn(4).to(torch.float8_e4m3fn)
    assert x.numel() == 4
''',
    "tests/test_mi300.py": '''\
import pytest
import torch

from myproj.utils import is_MI300

if not (torch.cuda.get_device_capability() >= (8, 9) or is_MI300()):
    pytest.skip("needs SM89 or MI300", allow_module_level=True)


def test_fp8():
    x = torch.randn(4).to(torch.float8_e4m3fn)
    assert x.numel() == 4
''',
    "tests/test_fp8_anywhere.py": '''\
import pytest
import torch

from myproj.utils import has_fp8

pytestmark = pytest.mark.skipif(not has_fp8(), reason="needs FP8")


def test_fp8():
    x = torch.randn(4, device="cuda").to(torch.float8_e4m3fn)
    assert x.numel() == 4
''',
}


def test_module_skipped_by_cuda_capability_helpers_is_info(tmp_path):
    findings = _findings(tmp_path, MODULE_SKIPS)
    for path in ("tests/test_fp8_sm89.py", "tests/test_mi300.py"):
        assert not [f for f in findings if f["path"] == path and f["code"] == "NPU913"]
        moot = _moot("NPU913", path)
        assert moot and all("does not run on an NPU host" in reason for reason in moot.values()), _LAST_SKIPPED
    # a helper the NPU host may answer True for does not skip the module
    fp8 = [f for f in findings if f["path"] == "tests/test_fp8_anywhere.py" and f["code"] == "NPU913"]
    assert fp8 and fp8[0]["severity"] == "error"


def test_kept_availability_skip_in_an_or_chain_still_skips(tmp_path):
    text = '''\
import pytest
import torch

from myproj.triton_kernels import quantize


@pytest.mark.skipif(not torch.cuda.is_available() or torch.cuda.device_count() < 2, reason="2 GPUs")
def test_quant():
    x = torch.randn(4, device="cuda").to(torch.float8_e4m3fn)
    assert quantize(x).numel() == 4
'''
    findings = _findings(tmp_path, {"tests/test_quant.py": text})
    assert not _at(findings, "tests/test_quant.py", 7, "NPU110") and 7 in _moot("NPU110")
    assert not _at(findings, "tests/test_quant.py", 9, "NPU913") and 9 in _moot("NPU913")
    assert 'not torch.cuda.is_available() or' in _migrated(text, "tests/test_quant.py")


# ----------------------------------------------------------------------------- 3. NPU903
COMPILE_TESTS = '''\
import pytest
import torch

from myproj import prepare_for_hotswap


def test_already_compiled_raises():
    model = torch.nn.Linear(2, 2)
    model = torch.compile(model, mode="reduce-overhead")
    with pytest.raises(ValueError):
        prepare_for_hotswap(model)


def test_dropped():
    with pytest.raises(RuntimeError):
        torch.compile(torch.nn.Linear(2, 2), mode="reduce-overhead")


def test_runs_compiled():
    model = torch.compile(torch.nn.Linear(2, 2), mode="reduce-overhead")
    assert model(torch.ones(2)).shape == (2,)


def test_runs_at_once():
    out = torch.compile(torch.nn.Linear(2, 2), mode="reduce-overhead")(torch.ones(2))
    assert out.shape == (2,)
'''

COMPILE_MODULE = '''\
import torch


def build(model):
    fast = torch.compile(model, mode="reduce-overhead")
    slow = torch.compile(model, mode="reduce-overhead")
    return fast, slow
'''


def test_compile_cuda_graphs_once_per_file_and_info_when_never_called(tmp_path):
    findings = _findings(tmp_path, {"tests/test_compile.py": COMPILE_TESTS, "pkg/build.py": COMPILE_MODULE})
    tests = [f for f in findings if f["path"] == "tests/test_compile.py" and f["code"] == "NPU903"]
    assert not [f for f in tests if f["severity"] == "info"]
    warnings = [f for f in tests if f["severity"] == "warning"]
    # compiled only to see a helper refuse it (or dropped): one named scope for both lines
    moot = _moot("NPU903", "tests/test_compile.py")
    assert 9 in moot and 16 in moot and "never calls the compiled object" in moot[9], _LAST_SKIPPED
    # compiled and called: still a warning, once for the file
    assert len(warnings) == 1 and warnings[0]["line"] == 20 and "also at line 25" in warnings[0]["message"]
    # outside tests nothing is lowered, and the file has one finding
    module = [f for f in findings if f["path"] == "pkg/build.py" and f["code"] == "NPU903"]
    assert len(module) == 1 and module[0]["severity"] == "warning" and "also at line 6" in module[0]["message"]


# ----------------------------------------------------------------------------- 4. anchors
GRAPHS = '''\
from typing import Optional

import torch


class Runner:
    def __init__(self) -> None:
        self.graphs: dict[int, torch.cuda.CUDAGraph] = {}

    def last(self) -> Optional[torch.cuda.CUDAGraph]:
        return None

    def capture(self, size: int) -> None:
        graph = torch.cuda.CUDAGraph()
        self.graphs[size] = graph


def replay(graph: "torch.cuda.CUDAGraph", pool: torch.cuda.CUDAGraph) -> None:
    graph.replay()
'''


def test_merged_finding_anchors_on_a_use_not_an_annotation(tmp_path):
    findings = _findings(tmp_path, {"pkg/graphs.py": GRAPHS})
    graph = [f for f in findings if f["code"] == "NPU202" and "CUDAGraph" in f["message"]]
    assert len(graph) == 1, graph
    assert graph[0]["line"] == 14 and graph[0]["source"] == "torch.cuda.CUDAGraph"
    # the annotations are still listed (nothing silently missed)
    assert {8, 10, 18} <= {int(n) for n in _also(graph[0]["message"])}, graph[0]["message"]
    # a file with annotations only: CUDAGraph exists in every torch build and nothing builds one,
    # so the annotations run on an NPU host (typerefs.py): a named scope, anchored on the first
    only = GRAPHS.replace("        graph = torch.cuda.CUDAGraph()\n", "        graph = None\n")
    findings = _findings(tmp_path / "b", {"pkg/graphs.py": only})
    assert not [f for f in findings if f["code"] == "NPU202" and "CUDAGraph" in f["message"]], findings
    scopes = [s for s in _LAST_SKIPPED if s["path"] == "pkg/graphs.py" and "(NPU202)" in s["reason"]]
    assert [(s["start_line"], s["end_line"]) for s in scopes] == [(8, 18)], _LAST_SKIPPED


def test_kept_skip_whose_test_may_run_elsewhere_is_info(tmp_path):
    text = '''\
import pytest
import torch
import bitsandbytes as bnb

from myproj import is_xpu_available


@pytest.mark.skipif(not (torch.cuda.is_available() or is_xpu_available()), reason="GPU")
class TestQuant:
    def test_int8(self):
        assert bnb.functional.int8_vectorwise_quant(torch.ones(2, 2, device="cuda")) is not None


def test_plain():
    if torch.cuda.is_available():
        assert bnb.functional.int8_vectorwise_quant(torch.ones(2, 2, device="cuda")) is not None
'''
    findings = _findings(tmp_path, {"tests/test_bnb.py": text})
    gates = [f for f in findings if f["code"] == "NPU110"]
    # the kept skip is about a test an NPU host never runs: a named skipped scope (moot.py)
    assert not [f for f in gates if f["line"] == 8]
    # (the class skips on an NPU host whole: `is_xpu_available()` is False there too, scopes.toml
    # false_calls; before, the decorator alone was named "keeps being skipped")
    reason = moot_lines(_LAST_SKIPPED, "NPU110", "tests/test_bnb.py")[8]
    assert "keeps being skipped" in reason or "in a test that does not run on an NPU host" in reason
    # the same availability check in front of bitsandbytes inside a test body stays a warning
    body = [f for f in gates if f["line"] == 15]
    assert body and body[0]["severity"] == "warning", gates


# ----------------------------------------------------------------------------- 5. torch.version.cuda at import
def test_module_level_cuda_version_used_unguarded_is_an_error(tmp_path):
    text = '''\
import torch
from packaging import version

TRITON_OK = version.parse(torch.version.cuda) > version.parse("11.4")
MAJOR = torch.version.cuda.split(".")[0]
HAS_CUDA = torch.version.cuda is not None
SAFE = torch.version.cuda and torch.version.cuda.startswith("12")


def later():
    return version.parse(torch.version.cuda)
'''
    findings = _findings(tmp_path, {"tests/test_version.py": text})
    leftovers = [f for f in findings if f["code"] == "NPU990"]
    places = {f["line"]: f for f in leftovers}
    for f in leftovers:
        for n in _also(f["message"]):
            places.setdefault(int(n), f)
    errors = [f for f in leftovers if f["severity"] == "error"]
    assert errors and "None on an NPU host" in errors[0]["message"]
    error_lines = {f["line"] for f in errors} | {int(n) for f in errors for n in _also(f["message"])}
    assert error_lines == {4, 5}, leftovers
    # tested for None first, or inside a function (not run at import): still a warning
    assert all(places[line]["severity"] == "warning" for line in (6, 7, 11) if line in places)
    assert 11 in places


def test_asserts_and_tested_versions_are_not_gates():
    text = '''\
import torch
from packaging import version

from .triton_kernels import scores_kernel


def scores(x):
    assert x.is_cuda
    scores_kernel[(1,)](x)


def fast_path(data):
    return (data.device.type == "cuda" and torch.version.cuda) and version.parse(torch.version.cuda).release >= (12, 1)


def version_asserted():
    assert torch.cuda.is_available()
    return torch.version.cuda.split(".")
'''
    new = _migrated(text)
    # `assert x.is_cuda` before a kernel fails on the NPU kept or widened: rewritten as before
    assert "assert npu_compat.on_accelerator(x)" in new
    # the version is tested for truth before it is parsed: the check is widened
    assert '(npu_compat.is_accelerator_type(data.device.type) and torch.version.cuda) and version.parse' in new
    # an assert in front of a CUDA version read stays
    assert "assert torch.cuda.is_available()\n    return torch.version.cuda.split" in new


def test_check_keeps_the_anchor_on_the_use(tmp_path, monkeypatch):
    root = tmp_path / "repo"
    (root / "pkg").mkdir(parents=True)
    (root / "pkg" / "graphs.py").write_text(GRAPHS)
    monkeypatch.chdir(root)
    result = CliRunner().invoke(main, ["check", ".", "--no-cache", "--isolated", "--output-format", "json"],
                                catch_exceptions=False)
    assert result.exit_code in (0, 1), result.output
    report = json.loads(result.stdout)
    items = report["findings"] if "findings" in report else report["items"]
    graph = [f for f in items if f["code"] == "NPU202" and "CUDAGraph" in f["message"]]
    assert len(graph) == 1 and graph[0]["line"] == 14, graph
