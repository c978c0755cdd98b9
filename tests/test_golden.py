"""Golden pairs: every input in fixtures/rules/ against its expected output and findings.

Inputs live in fixtures/rules/ (relative path = the path the engine sees, so a case in
`scripts/` is a script in a subfolder). Expected files: fixtures/rules/expected/<rel>.out
(migrated text; absent when the file must stay byte-identical) and <rel>.findings (one line per
finding: `line:column CODE rewrite|report`).

To refresh after a deliberate change: NPU_MIGRATE_UPDATE_GOLDENS=1 pytest tests/test_golden.py,
then read the diff of fixtures/rules/expected/ before committing it.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from npu_migrate import catalogue
from npu_migrate.engine import migrate_source
from npu_migrate.model import Options

RULES = Path(__file__).resolve().parent.parent / "fixtures" / "rules"
EXPECTED = RULES / "expected"
UPDATE = os.environ.get("NPU_MIGRATE_UPDATE_GOLDENS") == "1"
CASES = sorted(
    p.relative_to(RULES).as_posix()
    for p in RULES.rglob("*.py")
    if EXPECTED not in p.parents
)
# fixtures/rules/ has no __init__.py: every case in a subfolder is a script
OPTIONS = Options(enabled=catalogue.enabled_codes())


def _findings_text(result) -> str:
    return "".join(
        f"{f.line}:{f.column} {f.code} {'rewrite' if f.fixable else 'report'}\n" for f in result.findings
    )


@pytest.mark.parametrize("rel", CASES)
def test_golden(rel):
    source = (RULES / rel).read_bytes()
    result = migrate_source(source, rel, OPTIONS)
    out_path = EXPECTED / (rel + ".out")
    findings_path = EXPECTED / (rel + ".findings")
    if UPDATE:
        out_path.parent.mkdir(parents=True, exist_ok=True)
        if result.changed:
            out_path.write_bytes(result.new)
        elif out_path.exists():
            out_path.unlink()
        findings_path.write_text(_findings_text(result))
    if out_path.exists():
        assert result.new == out_path.read_bytes()
    else:
        assert not result.changed, f"{rel} must stay byte-identical"
    assert _findings_text(result) == findings_path.read_text()


@pytest.mark.parametrize("rel", CASES)
def test_golden_output_is_stable(rel):
    """Re-running on migrated output changes nothing and finds nothing left to rewrite."""
    out_path = EXPECTED / (rel + ".out")
    if not out_path.exists():
        pytest.skip("input stays unchanged")
    migrated = out_path.read_bytes()
    compile(migrated, rel, "exec")
    again = migrate_source(migrated, rel, OPTIONS)
    assert not again.changed
    assert not [f for f in again.findings if f.fixable]


def test_every_fixable_rule_has_a_golden_rewrite():
    """Each code is exercised by a reviewed fixture: the Python golden pairs here, the scripts and
    configs of fixtures/textfiles/ (with the opt-in script rewrite) and the notebooks of
    fixtures/notebooks/, whose expectations live in their own test modules, and the shim's
    placement cases of test_placement.py."""
    from tests.test_notebook import EVAL_FINDINGS, TRAIN_FINDINGS
    from tests.test_placement import PLACEMENT_FINDINGS
    from tests.test_textfiles import EXPECTED_FINDINGS

    seen = set()
    for path in EXPECTED.rglob("*.findings"):
        for line in path.read_text().splitlines():
            _, code, kind = line.split()
            seen.add((code, kind))
    for rows in EXPECTED_FINDINGS.values():
        seen.update((code, kind) for _line, _column, code, kind in rows)
    notebook_codes = {code for code, *_where in TRAIN_FINDINGS + EVAL_FINDINGS}
    seen.update((code, "rewrite" if catalogue.rule(code).fixable else "report") for code in notebook_codes)
    seen.update(PLACEMENT_FINDINGS)  # the shim's placement: packaged projects, git (test_placement.py)
    for rule in catalogue.rules().values():
        kind = "rewrite" if rule.fixable else "report"
        assert (rule.code, kind) in seen, f"no golden case exercises {rule.code} ({kind})"
