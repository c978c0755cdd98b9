"""infojoin31.py: one info finding per file per ecosystem, however its places were lowered (issue #16
section 2; session 41's regression: vLLM's deep_gemm_moe.py went from one NPU913 error to seven
info notes when passes lowered its places for reasons that differ place by place)."""

from __future__ import annotations

from npu_migrate.findings import Finding, split_merged
from npu_migrate.infojoin31 import MAX_REASONS, join, review
from npu_migrate.model import FileResult
from tests.precision_helpers import findings_at, migrate_json, write_project


def _info(line: int, why: str, code: str = "NPU913", source: str = "torch.float8_e4m3fn") -> Finding:
    return Finding("proj/kern.py", line, 5, code, f"FP8 compute: `{source}` ({why})", False, source, severity="info")


def _result(findings: list[Finding]) -> FileResult:
    return FileResult(relpath="proj/kern.py", findings=sorted(findings))


def test_places_lowered_for_different_reasons_become_one_finding_naming_each_reason():
    a, b, c = "reached only from tests: `_a` (tests/t.py:3)", "in `_b`, whose gate is False (x.py:2)", "opt-in `c`"
    out = review([_result([_info(9, a), _info(13, b), _info(14, b), _info(20, c)])])[0].findings
    assert len(out) == 1
    joined = out[0]
    assert (joined.line, joined.severity) == (9, "info")
    assert joined.message.startswith(f"FP8 compute: `torch.float8_e4m3fn` ({a}) (also at ")
    assert f"lines 13, 14: {b}" in joined.message and f"line 20: {c}" in joined.message
    assert [p[0] for p in joined.also] == [13, 14, 20]
    # nothing lost: the baseline and --diff-base get every place back, in the first place's words
    pieces = split_merged(joined)
    assert [p.line for p in pieces] == [9, 13, 14, 20]
    assert all(p.message == f"FP8 compute: `torch.float8_e4m3fn` ({a})" for p in pieces)


def test_same_reason_lists_the_lines_only():
    why = "reached only from tests: `_a`"
    joined = join([_info(9, why), _info(13, why)])
    assert joined.message == f"FP8 compute: `torch.float8_e4m3fn` ({why}) (also at line 13)"
    assert split_merged(joined)[1].line == 13


def test_same_and_other_reasons_are_told_apart():
    joined = join([_info(9, "r1"), _info(10, "r1"), _info(11, "r2")])
    assert joined.message.endswith("(r1) (also at line 10 for the same reason; at line 11: r2)")


def test_an_error_and_another_code_stay_their_own_findings():
    error = Finding("proj/kern.py", 30, 5, "NPU913", "FP8 compute: `torch.float8_e5m2`", False,
                    "torch.float8_e5m2", severity="error")
    triton = _info(40, "r3", code="NPU910", source="triton.jit")
    out = review([_result([_info(9, "r1"), _info(13, "r2"), error, triton])])[0].findings
    assert sorted((f.line, f.code, f.severity) for f in out) == [
        (9, "NPU913", "info"), (30, "NPU913", "error"), (40, "NPU910", "info")]


def test_codes_merged_per_message_join_only_the_same_message():
    sleep_a = Finding("t.py", 5, 1, "NPU202", "`torch.cuda._sleep` left unchanged: no kernel (r1)", False,
                      "torch.cuda._sleep", severity="info")
    sleep_b = Finding("t.py", 9, 1, "NPU202", "`torch.cuda._sleep` left unchanged: no kernel (r2)", False,
                      "torch.cuda._sleep", severity="info")
    graph = Finding("t.py", 12, 1, "NPU202", "`torch.cuda.CUDAGraph` left unchanged: inference only (r3)", False,
                    "torch.cuda.CUDAGraph", severity="info")
    out = review([FileResult(relpath="t.py", findings=[sleep_a, sleep_b, graph])])[0].findings
    assert [(f.line, f.also and f.also[0][0]) for f in out] == [(5, 9), (12, ())]


def test_many_reasons_are_capped_but_every_place_is_kept():
    group = [_info(10 + i, f"reason {i}") for i in range(MAX_REASONS + 3)]
    joined = join(group)
    assert f"reason {MAX_REASONS}" in joined.message and f"reason {MAX_REASONS + 1}" not in joined.message
    assert "for 2 other reasons of the same kind" in joined.message
    assert len(joined.also) == MAX_REASONS + 2


_KERN = """
    import torch


    def _quant_a(x):
        return x.to(torch.float8_e4m3fn)


    def _quant_b(x):
        y = x.to(torch.float8_e4m3fn)
        return y.to(torch.float8_e4m3fn)
"""


def test_end_to_end_helpers_reached_only_from_tests_are_one_note_with_both_reasons(tmp_path):
    root = write_project(tmp_path, {
        "proj/__init__.py": "",
        "proj/kern.py": _KERN,
        "proj/kern2.py": _KERN.replace("_quant_", "_cast_"),
        "proj/train.py": """
            from proj.kern2 import _cast_b


            def step(x):
                return _cast_b(x)
        """,
        "tests/test_kern.py": """
            from proj.kern import _quant_a, _quant_b
            from proj.kern2 import _cast_a as qa


            def test_a():
                _quant_a(None)
                _quant_b(None)
                qa(None)
        """,
    }, dedent=True)
    report = migrate_json(root)
    found = findings_at(report, "proj/kern.py", "NPU913")
    assert [f["severity"] for f in found.values()] == ["info"], found  # (two notes before infojoin31)
    note = found[6]
    assert "`_quant_a`" in note["message"] and "`_quant_b`" in note["message"]
    assert sorted(line for line, _c, _s in note["also"]) == [10, 11]
    # nearest true case: the same helpers where the library calls one stay one error
    kept = findings_at(report, "proj/kern2.py", "NPU913")
    assert [(line, f["severity"]) for line, f in kept.items()] == [(6, "error")]
