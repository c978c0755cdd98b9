"""Every rule family's EXAMPLES, run through the command line, and the rules reference built from
them (docs/rules.md).

One test per example (`device-3` is `Device.EXAMPLES[3]`): its `before` is written as
`example.py` into an empty folder (a project without packaging, so the shim import is a plain
`import npu_compat`), migrated in-process by `npu-migrate`, and then
- the file is exactly `after`, or byte-identical to `before` when `after` is None;
- the codes reported for it, in file order, are exactly `codes` (NPU991: one per skipped
  scope whose entry names CUDA references left as written); an example without codes (left
  alone) must not produce any code of its family (other families' reports may appear).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from npu_migrate import catalogue
from npu_migrate.cli import main
from npu_migrate.families import FAMILIES
from npu_migrate.ruledocs import REGENERATE, family_docs

REPO = Path(__file__).resolve().parent.parent
RULES_MD = REPO / "docs" / "rules.md"

CASES = [
    pytest.param(family, example, id=f"{family.NAME}-{index}")
    for family in FAMILIES
    for index, example in enumerate(family.EXAMPLES)
]


def migrate(root: Path, before: str) -> tuple[bytes, list[dict]]:
    """Run `npu-migrate ROOT` on a folder holding only example.py: its new bytes, its findings."""
    path = root / "example.py"
    path.write_bytes(before.encode("utf-8"))
    result = CliRunner().invoke(
        main,
        ["migrate", str(root), "--no-cache", "--isolated", "--allow-dirty", "-j", "1",
         "--output-format", "json"],
        catch_exceptions=False,
    )
    assert result.exit_code in (0, 1), result.output
    report = json.loads(result.stdout)
    assert not report["errors"], report["errors"]
    findings = [f for f in report["findings"] if f["path"] == "example.py"]
    assert len(findings) == len(report["findings"]), report["findings"]  # nothing but example.py
    # CUDA references left as written in a platform-aware scope (NPU991) are named in the scope's
    # skipped entry, not as findings (moot.py): one pseudo-finding per scope, at its first line
    # a guarded import whose fallback an NPU host runs: a scope "runs as written on an NPU host
    # (CODE): ..." (moot.py), one pseudo-finding with its code
    for entry in report["skipped"]:
        prefix = "runs as written on an NPU host ("
        if entry["path"] == "example.py" and entry["reason"].startswith(prefix):
            code = entry["reason"][len(prefix):].split(")", 1)[0]
            findings.append({"line": entry["start_line"], "column": 0, "code": code, "source": "(scope)"})
    for entry in report["skipped"]:
        marker = "CUDA references left as written: lines "
        if entry["path"] == "example.py" and marker in entry["reason"]:
            first = int(entry["reason"].split(marker)[1].split(",")[0].split(" ")[0])
            findings.append({"line": first, "column": 0, "code": "NPU991", "source": "(scope)"})
    return path.read_bytes(), sorted(findings, key=lambda f: (f["line"], f["column"]))


@pytest.mark.parametrize(("family", "example"), CASES)
def test_example(tmp_path, family, example):
    new, findings = migrate(tmp_path, example.before)
    codes = tuple(f["code"] for f in findings)
    shown = "\n".join(f"  {f['line']}:{f['column']} {f['code']} {f['source']}" for f in findings)
    if example.after is None:
        assert new.decode("utf-8") == example.before, "the example must come back byte-identical"
    else:
        assert new.decode("utf-8") == example.after
    if example.codes or example.after is not None:
        assert codes == tuple(example.codes), f"findings:\n{shown}"
    else:
        stray = [code for code in codes if code in family.CODES]
        assert not stray, f"left alone, yet {family.NAME} reported {stray}:\n{shown}"


@pytest.mark.parametrize("family", FAMILIES, ids=lambda family: family.NAME)
def test_every_code_of_the_family_has_an_example(family):
    shown = {code for example in family.EXAMPLES for code in example.codes}
    missing = [code for code in family.CODES if code not in shown]
    assert not missing, f"{family.NAME}: no example shows {missing}"


@pytest.mark.parametrize("family", FAMILIES, ids=lambda family: family.NAME)
def test_family_documents_itself(family):
    assert family.NAME and family.TITLE
    assert (family.__dict__.get("__doc__") or "").strip(), f"{family.__name__} needs a docstring for users"
    assert any(example.after is None and not example.codes for example in family.EXAMPLES), (
        f"{family.NAME}: needs at least one example it leaves alone (after=None, codes=())"
    )
    for code in family.CODES:
        assert code in catalogue.rules(), f"{family.NAME}: {code} is not in rules/codes*.toml"


def test_families_have_distinct_names_and_codes():
    names = [family.NAME for family in FAMILIES]
    assert len(names) == len(set(names))
    codes = [code for family in FAMILIES for code in family.CODES]
    assert len(codes) == len(set(codes)), "a code belongs to one family"


def test_rules_reference_is_up_to_date():
    expected = family_docs(FAMILIES)
    actual = RULES_MD.read_text(encoding="utf-8") if RULES_MD.is_file() else ""
    assert actual == expected, f"docs/rules.md is out of date: regenerate it with `{REGENERATE}`"
