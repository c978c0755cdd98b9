"""findings.stands_for_copies: a Python file's finding that also stands for byte-identical copies of
the file (textfiles._group_identical_sources) is not lowered by a reason read on the first file's
callers. Found in session 42: two identical modules, the library calling a helper of the second
only, were reported once, on the first path, as info "reached on an NPU host only from tests",
although the second copy's helper runs on an NPU host."""

from __future__ import annotations

from tests.precision_helpers import findings_at, migrate_json, write_project

_KERN = """
    import torch


    def _quant_a(x):
        return x.to(torch.float8_e4m3fn)


    def _quant_b(x):
        return x.to(torch.float8_e4m3fn)
"""


def _project(tmp_path, second: str, called: str = "_quant_b") -> dict:
    return migrate_json(write_project(tmp_path, {
        "proj/__init__.py": "",
        "proj/kern.py": _KERN,
        "proj/kern2.py": second,
        "proj/train.py": f"""
            from proj.kern2 import {called}


            def step(x):
                return {called}(x)
        """,
        "tests/test_kern.py": """
            from proj.kern import _quant_a, _quant_b


            def test_a():
                _quant_a(None)
                _quant_b(None)
        """,
    }, dedent=True))


def test_a_finding_standing_for_an_identical_copy_the_library_calls_stays_an_error(tmp_path):
    report = _project(tmp_path, _KERN)
    found = findings_at(report, "proj/kern.py", "NPU913")
    assert [f["severity"] for f in found.values()] == ["error"], found
    assert "(byte-identical copy: `proj/kern2.py`)" in found[6]["message"]
    assert not findings_at(report, "proj/kern2.py", "NPU913")  # (reported once, on the first path)


def test_nearest_false_case_a_different_file_is_judged_on_its_own_callers(tmp_path):
    report = _project(tmp_path, _KERN.replace("_quant_", "_cast_"), called="_cast_b")
    assert [f["severity"] for f in findings_at(report, "proj/kern.py", "NPU913").values()] == ["info"]
