"""Round-34 audit ID#12 (echo35.py): a test that hands the code under test a CUDA device string and
asserts the same string comes back (`assert result["device"] == "cuda"`, which the tool cannot
rewrite): rewriting the input alone made vLLM's `tests/multimodal/media/test_video.py` fail on an
NPU host. Each false case is paired with its nearest true case, which is still rewritten or
reported."""

from __future__ import annotations

import ast

import pytest
from click.testing import CliRunner

from npu_migrate import echo35
from npu_migrate.cli import main

from .precision_helpers import migrate_json, write_project

LIB = '''import torch


def merge(default_kwargs, runtime_kwargs):
    out = dict(default_kwargs)
    out.update(runtime_kwargs)
    return out


def lookup():
    return {"device": "cuda"}
'''

TESTS = '''import unittest

import pytest
import torch

from lib import lookup, merge


def test_echo():
    result = merge(default_kwargs={"backend": "x", "device": "cuda"}, runtime_kwargs={"n": 8})  # L:echo-in
    assert result["device"] == "cuda"  # L:echo-out


@pytest.mark.parametrize(
    "kwargs",
    [
        {"backend": "x", "device": "cuda"},  # L:table-in
    ],
)
def test_table(kwargs):
    result = merge(default_kwargs=kwargs, runtime_kwargs={})
    assert result.get("device") == "cuda"


def test_same_dict():
    kwargs = {"device": "cuda"}  # L:same-in
    merge(default_kwargs=kwargs, runtime_kwargs={})
    assert "cuda" == kwargs["device"]


def test_through_name():
    kwargs = {"device": "cuda"}  # L:name-in
    result = merge(default_kwargs=kwargs, runtime_kwargs={})
    assert result["device"] == "cuda"


class TestMerge(unittest.TestCase):
    def test_unittest(self):
        out = merge(default_kwargs={"device": "cuda"}, runtime_kwargs={})  # L:unit-in
        self.assertEqual(out["device"], "cuda")


def test_rewritable_comparison():
    t = torch.zeros(2, device="cuda")  # L:tensor-in
    assert t.device.type == "cuda"  # L:tensor-out


def test_tensor_device():
    out = [torch.zeros(2, device="cuda")]  # L:gemma-in
    assert out[0].device.type == "cuda"  # L:gemma-out


class TestTensor(unittest.TestCase):
    def test_tensor_device_unittest(self):
        out = {"x": torch.zeros(2, device="cuda")}  # L:unit-tensor-in
        self.assertEqual(out["x"].device.type, "cuda")  # L:unit-tensor-out


def test_no_string_assertion():
    result = merge(default_kwargs={"device": "cuda"}, runtime_kwargs={})  # L:plain-in
    assert "device" in result


def check_merge():
    result = merge(default_kwargs={"device": "cuda"}, runtime_kwargs={})  # L:lib-in
    assert result["device"] == "cuda"  # L:lib-out


def test_other_value():
    result = merge(default_kwargs={"device": "cuda"}, runtime_kwargs={})  # L:other-in
    other = lookup()
    assert other["device"] == "cuda"  # L:other-out
    assert result


def test_rebound():
    result = merge(default_kwargs={"device": "cuda"}, runtime_kwargs={})  # L:rebound-in
    result = lookup()
    assert result["device"] == "cuda"  # L:rebound-out
'''

PATH = "tests/test_merge.py"


def _line(marker: str) -> int:
    return next(i for i, text in enumerate(TESTS.splitlines(), 1) if text.endswith(f"# L:{marker}"))


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    """(rewritten lines, {line: open finding}, {line: scope reason}) of the test file: one run."""
    root = write_project(tmp_path_factory.mktemp("h196"), {"lib.py": LIB, PATH: TESTS})
    report = migrate_json(root)
    rewrites = {f["line"] for f in report["findings"] if f["path"] == PATH and f["fixable"]}
    left: dict[int, dict] = {}
    for f in report["findings"]:
        if f["path"] == PATH and not f["fixable"]:
            left.setdefault(f["line"], f)
            for line, _column, _source in f.get("also", []):
                left.setdefault(line, f)
    scopes = {}
    for s in report["skipped"]:
        if s.get("path") == PATH:
            for line in range(s["start_line"], s["end_line"] + 1):
                scopes[line] = s["reason"]
    return rewrites, left, scopes


@pytest.mark.parametrize("marker", ["echo-in", "table-in", "same-in", "name-in", "unit-in"])
def test_an_echo_tests_inputs_stay_as_written_in_a_named_scope(report, marker):
    rewrites, left, scopes = report
    line = _line(marker)
    assert line not in rewrites and line not in left
    assert echo35.ECHO in scopes[line]


def test_the_echoed_assertion_is_named_by_the_scope_not_an_open_warning(report):
    rewrites, left, scopes = report
    line = _line("echo-out")
    assert line not in left and echo35.ECHO in scopes[line]
    assert "CUDA references left as written" in scopes[line]


@pytest.mark.parametrize("marker", ["tensor", "gemma"])
def test_a_comparison_the_tool_rewrites_is_no_echo(report, marker):
    # (vLLM's test_gemma4_unified.py: `assert out[0].device.type == "cuda"` is rewritten, NPU104)
    rewrites, left, scopes = report
    assert _line(f"{marker}-in") in rewrites and _line(f"{marker}-out") in rewrites
    assert _line(f"{marker}-in") not in scopes


def test_a_tensors_device_checked_by_assert_equal_stays_an_open_finding(report):
    # (a tensor the CUDA input put on the GPU: as written it fails on an NPU host too; the user
    # changes the assertion, so it stays a warning)
    rewrites, left, scopes = report
    assert _line("unit-tensor-in") in rewrites and _line("unit-tensor-in") not in scopes
    assert left[_line("unit-tensor-out")]["code"] == "NPU990"


@pytest.mark.parametrize("marker", ["plain-in", "other-in", "rebound-in", "lib-in"])
def test_inputs_of_a_test_asserting_nothing_about_them_are_rewritten(report, marker):
    rewrites, left, scopes = report
    assert _line(marker) in rewrites and _line(marker) not in scopes


@pytest.mark.parametrize("marker", ["lib-out", "other-out", "rebound-out"])
def test_an_unrewritable_cuda_comparison_outside_an_echo_stays_reported(report, marker):
    rewrites, left, scopes = report
    assert _line(marker) in left and left[_line(marker)]["code"] == "NPU990"
    assert _line(marker) not in scopes


def test_the_migrated_echo_tests_are_byte_identical(tmp_path):
    root = write_project(tmp_path, {"lib.py": LIB, PATH: TESTS})
    out = tmp_path / "out"
    result = CliRunner().invoke(main, ["migrate", str(root), "--output-dir", str(out), "--no-cache", "--isolated",
                                       "--allow-dirty", "-j", "1"], catch_exceptions=False)
    assert result.exit_code in (0, 1), result.output
    migrated = (out / PATH).read_text()

    def functions(text: str) -> dict[str, str]:
        tree = ast.parse(text)
        return {n.name: ast.get_source_segment(text, n) for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)}

    before, after = functions(TESTS), functions(migrated)
    for name in ("test_echo", "test_table", "test_same_dict", "test_through_name", "test_unittest"):
        assert after[name] == before[name]
    for name in ("test_rewritable_comparison", "test_no_string_assertion", "check_merge", "test_other_value"):
        assert after[name] != before[name]
    assert '{"backend": "x", "device": "cuda"},  # L:table-in' in migrated  # (the table feeding the echo)


def test_echo_regions_directly():
    tree = ast.parse(TESTS)
    names = set()
    for first, last, reason in echo35.echo_regions(tree):
        assert reason == echo35.ECHO
        names.add(last.name)
    assert names == {"test_echo", "test_table", "test_same_dict", "test_through_name", "test_unittest"}
    assert echo35.echo_regions(None) == []
    assert not echo35.may_echo("def test_x():\n    assert f() == 'cpu'\n")
