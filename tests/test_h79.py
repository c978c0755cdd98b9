"""Round 19 (h79): branches an NPU host never takes, read as the migrated code runs there."""

from __future__ import annotations

import ast

from npu_migrate import capraise19
from tests.precision_helpers import migrate_json, moot_lines, write_project

UTILS = '''import torch


def is_sm_at_least_100():
    return torch.cuda.is_available() and torch.cuda.get_device_capability() >= (10, 0)
'''

COMPOUND = '''import torch

from pkg.utils import is_sm_at_least_100


def quantize(x):
    before = torch.empty(2, dtype=torch.float8_e4m3fn, device=x.device)
    if torch.cuda.is_available() and not is_sm_at_least_100():
        raise NotImplementedError("needs SM100")
    scale = torch.empty(4, dtype=torch.float8_e4m3fn, device=x.device)
    return x.to(torch.float8_e4m3fn), scale, before
'''


def _open(report, path):
    return {f["line"]: f for f in report["findings"] if not f["fixable"] and f["path"] == path}


def test_compound_capability_raise_with_rewritten_availability_scopes_what_follows(tmp_path):
    # AZ#24: the rewritten `npu_compat.is_available()` is true on an NPU host, the capability
    # check false: the function always raises there, the FP8 after it never runs
    source = COMPOUND.replace("    before = torch.empty(2, dtype=torch.float8_e4m3fn, device=x.device)\n", "")
    root = write_project(tmp_path, {"pkg/__init__.py": "", "pkg/utils.py": UTILS, "pkg/k.py": source})
    report = migrate_json(root)
    moot = moot_lines(report["skipped"], "NPU913", "pkg/k.py")
    assert 9 in moot and 10 in moot, report
    assert "after a capability raise" in moot[9] and "once migrated" in moot[9]
    assert "NPU913" not in {f["code"] for f in _open(report, "pkg/k.py").values()}


def test_fp8_before_the_compound_raise_stays_reported(tmp_path):
    # nearest true case: an FP8 buffer BEFORE the raise runs on an NPU host; the file's one FP8
    # finding stands for it too and keeps its severity
    root = write_project(tmp_path, {"pkg/__init__.py": "", "pkg/utils.py": UTILS, "pkg/k.py": COMPOUND})
    report = migrate_json(root)
    reported = [f for f in report["findings"] if f["code"] == "NPU913" and f["path"] == "pkg/k.py"]
    assert reported and reported[0]["severity"] == "error", report
    assert 7 in [reported[0]["line"], *(p[0] for p in reported[0].get("also") or ())]


def test_plain_capability_raise_with_helper_in_another_module_is_scoped(tmp_path):
    # the /tmp/t24 fixture: a plain `if not is_sm_at_least_100(): raise` with the helper imported
    plain = COMPOUND.replace("torch.cuda.is_available() and not", "not").replace(
        "    before = torch.empty(2, dtype=torch.float8_e4m3fn, device=x.device)\n", "").replace(", before", "")
    root = write_project(tmp_path, {"pkg/__init__.py": "", "pkg/utils.py": UTILS, "pkg/k.py": plain})
    report = migrate_json(root)
    assert "NPU913" not in {f["code"] for f in _open(report, "pkg/k.py").values()}, report
    assert moot_lines(report["skipped"], "NPU913", "pkg/k.py")


def test_raise_only_on_capable_hardware_stays_reported(tmp_path):
    # nearest true case: `is_available() and is_sm_at_least_100()` is false on an NPU host (the
    # capability check fails), so the raise never fires and the FP8 code runs there
    source = COMPOUND.replace("and not is_sm_at_least_100()", "and is_sm_at_least_100()")
    root = write_project(tmp_path, {"pkg/__init__.py": "", "pkg/utils.py": UTILS, "pkg/k.py": source})
    report = migrate_json(root)
    reported = [f for f in report["findings"] if f["code"] == "NPU913" and f["path"] == "pkg/k.py"]
    assert reported and reported[0]["severity"] == "error", report
    assert not moot_lines(report["skipped"], "NPU913", "pkg/k.py")


def test_availability_kept_as_written_does_not_make_the_raise_fire():
    # an availability check the migration left as written (NPU110) is False on an NPU host: the
    # raise never fires, nothing after it is scoped
    tree = ast.parse(COMPOUND)
    lines = COMPOUND.splitlines(keepends=True)
    assert capraise19.raise_blocks(tree, lines, frozenset()) == []
    blocks = capraise19.raise_blocks(tree, lines, frozenset({8}))
    assert [(b[0], b[1]) for b in blocks] == [(10, 11)]


def test_or_form_and_bare_reraise():
    source = '''import torch


def f(x):
    if torch.cuda.is_available() and torch.cuda.get_device_capability() < (9, 0):
        raise RuntimeError("needs Hopper")
    return x.to(torch.float8_e4m3fn)


def g(x):
    try:
        pass
    except Exception:
        if torch.cuda.is_available() and not is_sm_at_least_100():
            raise
        return x.to(torch.float8_e4m3fn)
'''
    tree = ast.parse(source)
    lines = source.splitlines(keepends=True)
    # the rewritten availability is true, the shim's capability (0, 0) < (9, 0) true there
    blocks = capraise19.raise_blocks(tree, lines, frozenset({5, 14}))
    assert [(b[0], b[1]) for b in blocks] == [(7, 7)]  # (a bare re-raise is no capability raise)
