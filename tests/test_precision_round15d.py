"""Round-15 audits (issue #16): classes only skipped tests use, a class's own `cuda()` that only
delegates, branches on another platform's enum member and on a module constant False. Each test
writes a small project of its own, checks that the false finding became a named skipped scope
(or left the findings) with its reason, and that a nearby true case keeps its severity."""

from __future__ import annotations

from .precision_helpers import migrate_json, moot_lines, write_project

_SKIPPED_HELPERS = '''
import pytest
import torch

from myproj.platforms import current_platform


class _SlowStream(torch.nn.Module):
    def forward(self, x):
        torch.cuda._sleep(1000)
        return x


class no_sync_allowed:
    def __enter__(self):
        self.mode = torch.cuda.get_sync_debug_mode()
        torch.cuda.set_sync_debug_mode("error")

    def __exit__(self, *args):
        torch.cuda.set_sync_debug_mode(self.mode)


class _SharedSleeper(torch.nn.Module):
    def forward(self, x):
        torch.cuda._sleep(1000)
        return x


@pytest.mark.skipif(not current_platform.is_cuda(), reason="needs CUDA streams")
def test_side_stream():
    module = _SlowStream()
    with no_sync_allowed():
        module(torch.ones(2))
    _SharedSleeper()(torch.ones(2))


def test_everywhere():
    _SharedSleeper()(torch.ones(2))
'''


def _line(text: str, needle: str) -> int:
    return next(i for i, line in enumerate(text.splitlines(), 1) if needle in line)


def _reported(report: dict, path: str, code: str) -> list[dict]:
    return [f for f in report["findings"] if f["path"] == path and f["code"] == code
            and not f["fixable"] and f["severity"] != "info"]


def test_classes_only_skipped_tests_use_are_scopes(tmp_path):
    """AN#2, AO#10: a module and a context manager of a test file whose only users are tests
    skipped off CUDA never run on an NPU host; a class an unskipped test also builds stays."""
    root = write_project(tmp_path, {"tests/test_streams.py": _SKIPPED_HELPERS})
    report = migrate_json(root)
    path = "tests/test_streams.py"
    moot = moot_lines(report["skipped"], "NPU202", path)
    for needle in ("torch.cuda._sleep(1000)", "torch.cuda.set_sync_debug_mode(\"error\")"):
        line = _line(_SKIPPED_HELPERS, needle)
        assert line in moot and "in a helper called only from tests" in moot[line], (needle, moot)
    shared = [i for i, text in enumerate(_SKIPPED_HELPERS.splitlines(), 1) if "torch.cuda._sleep" in text][-1]
    assert shared not in moot
    assert shared in {f["line"] for f in _reported(report, path, "NPU202")}, report["findings"]


def test_classes_of_a_shared_helpers_module_stay(tmp_path):
    """The same classes in a module other tests import (not a pytest test module) keep their
    findings: another file may build them in a test that runs on an NPU host."""
    root = write_project(tmp_path, {"tests/utils.py": _SKIPPED_HELPERS})
    report = migrate_json(root)
    line = _line(_SKIPPED_HELPERS, "torch.cuda._sleep(1000)")
    assert line not in moot_lines(report["skipped"], "NPU202", "tests/utils.py")
    assert line in {f["line"] for f in _reported(report, "tests/utils.py", "NPU202")}, report["findings"]


_DELEGATING = '''
import torch


class Holder:
    def __init__(self):
        self.weight = torch.ones(2)

    def cuda(self, device=None):
        self.weight = self.weight.cuda(device)
        return self
'''

_CALLING = _DELEGATING + '''

def build():
    return Holder().cuda()
'''


def test_own_cuda_delegating_to_members_is_no_work(tmp_path):
    """AN#15, AP#26: a class's own `cuda()` whose body's `.cuda()` calls are the file's only ones
    asks for nothing; a file that also calls `.cuda()` elsewhere keeps its NPU107."""
    root = write_project(tmp_path, {"pkg/holder.py": _DELEGATING, "pkg/caller.py": _CALLING})
    report = migrate_json(root)
    assert not [f for f in report["findings"] if f["path"] == "pkg/holder.py" and f["code"] == "NPU107"]
    named = [s for s in report["skipped"] if s.get("path") == "pkg/holder.py" and "(NPU107)" in s["reason"]]
    assert named and "delegating to its members" in named[0]["reason"], report["skipped"]
    assert [f for f in report["findings"] if f["path"] == "pkg/caller.py" and f["code"] == "NPU107"]


_ENUM = '''
import enum


class DistributedType(str, enum.Enum):
    NO = "NO"
    MULTI_GPU = "MULTI_GPU"
    MULTI_NPU = "MULTI_NPU"
'''

_STATE = '''
from myproj.utils import DistributedType


def pick(npu):
    return DistributedType.MULTI_NPU if npu else DistributedType.MULTI_GPU
'''

_SCRIPT = '''
import torch

from myproj.utils import DistributedType


def sync_states(kinds):
    return [torch.tensor(0) for _ in kinds]


def check(state):
    if state.distributed_type == DistributedType.MULTI_GPU:
        sync_states(["cuda"])
    sync_states(["cuda"])
'''

_ENUM_WITHOUT_NPU = '''
import enum


class DistributedType(str, enum.Enum):
    NO = "NO"
    MULTI_GPU = "MULTI_GPU"
'''


def _codes_at(report: dict, path: str, line: int) -> list[dict]:
    return [f for f in report["findings"] if f["path"] == path and not f["fixable"] and f["severity"] != "info"
            and (f["line"] == line or any(p == line or (isinstance(p, list) and p[0] == line)
                                          for p in f.get("places", []) or []))]


def test_branch_on_another_platforms_enum_member_is_a_scope(tmp_path):
    """AO#3: `if state.distributed_type == DistributedType.MULTI_GPU:` where the project's enum has
    a separate MULTI_NPU it selects on an NPU host; the line after the branch stays reported, and
    a project whose enum has no NPU member keeps the branch's finding."""
    files = {"myproj/__init__.py": "", "myproj/utils.py": _ENUM, "myproj/state.py": _STATE,
             "myproj/scripts/check.py": _SCRIPT}
    report = migrate_json(write_project(tmp_path, files))
    path = "myproj/scripts/check.py"
    inside = _line(_SCRIPT, 'sync_states(["cuda"])')
    after = inside + 1
    moot = moot_lines(report["skipped"], None, path)
    assert inside in moot and "separate NPU member" in moot[inside], moot
    assert after not in moot and _codes_at(report, path, after), report["findings"]

    plain = write_project(tmp_path / "plain", {"myproj/__init__.py": "", "myproj/utils.py": _ENUM_WITHOUT_NPU,
                                               "myproj/scripts/check.py": _SCRIPT})
    report = migrate_json(plain)
    assert inside not in moot_lines(report["skipped"], None, path) and _codes_at(report, path, inside)


_PIXTRAL = '''
import torch

USE_FAST_OPS = False
USE_ENV_OPS = bool(int(__import__("os").environ.get("USE_ENV_OPS", "0")))


def attend(q, k, v):
    if USE_FAST_OPS:
        from xformers import ops as xops
        return xops.memory_efficient_attention(q, k, v)
    if USE_ENV_OPS:
        from xformers import ops as xops
        return xops.memory_efficient_attention(q, k, v)
    return torch.nn.functional.scaled_dot_product_attention(q, k, v)
'''


def test_branch_on_a_constant_false_flag_is_a_scope(tmp_path):
    """AP#24: xformers under `if USE_FAST_OPS:` where the module binds `USE_FAST_OPS = False` once;
    a flag read from the environment stays, and so does the constant flag once another file of
    the run assigns it."""
    report = migrate_json(write_project(tmp_path, {"pkg/__init__.py": "", "pkg/model.py": _PIXTRAL}))
    path = "pkg/model.py"
    lines = [i for i, text in enumerate(_PIXTRAL.splitlines(), 1) if "from xformers" in text]
    moot = moot_lines(report["skipped"], None, path)
    assert lines[0] in moot and "constant false" in moot[lines[0]], (moot, report["findings"])
    assert lines[1] not in moot and _codes_at(report, path, lines[1]), report["findings"]

    patched = write_project(tmp_path / "patched", {
        "pkg/__init__.py": "", "pkg/model.py": _PIXTRAL,
        "pkg/setup_fast.py": "from pkg import model\n\nmodel.USE_FAST_OPS = True\n"})
    report = migrate_json(patched)
    assert lines[0] not in moot_lines(report["skipped"], None, path)
