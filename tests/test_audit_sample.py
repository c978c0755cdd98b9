"""scripts/audit_sample.py: the precision audit's sampling method and scores (issue #16)."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def _script():
    spec = importlib.util.spec_from_file_location("_script_audit_sample", REPO / "scripts" / "audit_sample.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


audit = _script()


def _tree(tmp_path: Path, counts: dict[str, int]) -> Path:
    for package, n in counts.items():
        findings = []
        for i in range(n):
            findings.append({"path": f"{package}/m{i}.py", "line": i + 1, "column": 0, "code": "NPU910",
                             "message": "Triton | kernel", "source": "import triton", "fixable": False,
                             "severity": "error"})
            # a rewrite is never part of the population
            findings.append({"path": f"{package}/m{i}.py", "line": i + 1, "column": 4, "code": "NPU101",
                             "message": "rewritten", "source": ".cuda()", "fixable": True, "severity": "info"})
        (tmp_path / package).mkdir()
        (tmp_path / package / "npu-migrate.json").write_text(json.dumps({"findings": findings}))
    return tmp_path


def test_population_is_report_only_findings(tmp_path):
    pool = audit.population(_tree(tmp_path, {"big": 5, "small": 2}))
    assert len(pool) == 7
    assert {f["code"] for f in pool} == {"NPU910"}


def test_draw_caps_each_package_and_is_reproducible(tmp_path):
    tree = _tree(tmp_path, {"big": 50, "small": 3, "mid": 10})
    first = audit.draw(tree, 7, size=12, per_package=5, exclude=[])
    again = audit.draw(tree, 7, size=12, per_package=5, exclude=[])
    other = audit.draw(tree, 8, size=12, per_package=5, exclude=[])
    assert first == again
    assert first != other
    per = {p: sum(f["package"] == p for f in first) for p in ("big", "small", "mid")}
    assert per["big"] <= 5 and per["mid"] <= 5 and per["small"] <= 3
    assert len(first) == 12 and sum(per.values()) == 12


def test_later_samples_are_disjoint_from_earlier_ones(tmp_path):
    tree = _tree(tmp_path, {"big": 30, "small": 4})
    first = audit.draw(tree, 1, size=10, per_package=8, exclude=[])
    audit.write_sample(first, tmp_path / "a.md", tree, 1)
    second = audit.draw(tree, 2, size=10, per_package=8, exclude=[tmp_path / "a.md"])

    def key(f):
        return f["package"], f["path"], f["line"]

    assert not {key(f) for f in first} & {key(f) for f in second}
    # the message's "|" is escaped, so the table still parses back to every row
    assert len(audit.drawn([tmp_path / "a.md"])) == 10


def test_score_as_drawn_and_weighted(tmp_path):
    tree = _tree(tmp_path, {"big": 90, "small": 10})
    sample = audit.draw(tree, 3, size=8, per_package=4, exclude=[])
    out = tmp_path / "s.md"
    audit.write_sample(sample, out, tree, 3)
    # big: 2 of 4 false; small: 0 of 4 false; one row left unjudged
    rows, big_bad, small_seen = [], 0, 0
    for line in out.read_text().splitlines():
        if line.startswith("| ") and "| big |" in line and big_bad < 2:
            line = line.replace("|  | big |", "| FALSE | big |", 1)
            big_bad += 1
        elif "|  | big |" in line:
            line = line.replace("|  | big |", "| TRUE | big |", 1)
        elif "|  | small |" in line:
            small_seen += 1
            if small_seen < 4:
                line = line.replace("|  | small |", "| TRUE | small |", 1)
        rows.append(line)
    out.write_text("\n".join(rows) + "\n")
    text = audit.score(tree, [out])
    assert "7 findings judged" in text
    assert "as drawn: 2/7 = 28.6%" in text
    # the Wilson interval of 2 of 7: 8.2% to 64.1%
    assert "95% interval (Wilson, 2/7 decided): 8.2% to 64.1%" in text
    # big's rate 2/4 weighs 90 of 100, small's 0/3 weighs 10: 45.0%
    assert "weighted by population share" in text and "45.0%" in text


def _judge(path: Path, verdicts: list[str]) -> None:
    """Fill a written sample's verdict column, row by row."""
    lines, i = [], 0
    for line in path.read_text().splitlines():
        if line.startswith("| ") and "|  |" in line and i < len(verdicts):
            line = line.replace("|  |", f"| {verdicts[i]} |", 1)
            i += 1
        lines.append(line)
    path.write_text("\n".join(lines) + "\n")


def test_census_counts_earlier_verdicts_and_estimates_the_unjudged_rest(tmp_path):
    (tmp_path / "eco").mkdir()
    tree = _tree(tmp_path / "eco", {"big": 40, "small": 10})
    earlier = audit.draw(tree, 5, size=10, per_package=5, exclude=[])
    audit.write_sample(earlier, tmp_path / "r1.md", tree, 5)
    # 3 of the 10 judged bad earlier, 1 unsure
    _judge(tmp_path / "r1.md", ["FALSE", "FALSE-WP", "REDUNDANT", "UNSURE"] + ["TRUE"] * 6)
    new = audit.draw(tree, 6, size=10, per_package=10, exclude=[tmp_path / "r1.md"])
    audit.write_sample(new, tmp_path / "r2.md", tree, 6)
    _judge(tmp_path / "r2.md", ["FALSE", "FALSE"] + ["TRUE"] * 8)   # 20% of the never-judged stratum
    out = audit.census(tree, [tmp_path / "r1.md"], [tmp_path / "r2.md"])
    assert "50 report-only findings today" in out
    assert "judged in an earlier round and still reported: 10, of which false or redundant: 3" in out
    assert "new samples: 2/10 false or redundant = 20.0%" in out
    # 3 known + 20% of the 40 never judged before = 11 of 50
    assert "= 11 of 50 = 22.0%" in out
    assert out.count("(FALSE") + out.count("(REDUNDANT") == 3

    # a finding fixed since (no longer reported) leaves the census; a re-judgement overrides
    first_bad = next(line for line in (tmp_path / "r1.md").read_text().splitlines() if "| FALSE |" in line)
    package = first_bad.split("|")[3].strip()
    location = first_bad.split("|")[4].strip().strip("`")
    (tmp_path / "rj.txt").write_text(f"# re-judged\n{package} {location} NPU910 TRUE\n")
    out = audit.census(tree, [tmp_path / "r1.md"], [tmp_path / "r2.md"], tmp_path / "rj.txt")
    assert "of which false or redundant: 2" in out

    assert "no longer reported" not in out
    # without new samples the script gives only the lower bound
    out = audit.census(tree, [tmp_path / "r1.md"], [])
    assert "lower bound (the unjudged counted as true): 3/50 = 6.0%" in out

    # a sampled finding fixed since: the estimate says it no longer measures this tree
    row = next(line for line in (tmp_path / "r2.md").read_text().splitlines() if "| FALSE |" in line)
    gone_path = row.split("|")[4].strip().strip("`").rsplit(":", 1)[0]
    report = tree / row.split("|")[3].strip() / "npu-migrate.json"
    data = json.loads(report.read_text())
    data["findings"] = [f for f in data["findings"] if f["path"] != gone_path or f["fixable"]]
    report.write_text(json.dumps(data))
    out = audit.census(tree, [tmp_path / "r1.md"], [tmp_path / "r2.md"])
    assert "1 of the 10 sampled findings are no longer reported" in out


def test_census_lists_verdicts_whose_severity_changed(tmp_path):
    (tmp_path / "eco").mkdir()
    tree = _tree(tmp_path / "eco", {"pkg": 4})
    sample = audit.draw(tree, 1, size=4, per_package=4, exclude=[])
    audit.write_sample(sample, tmp_path / "r1.md", tree, 1)
    _judge(tmp_path / "r1.md", ["FALSE", "TRUE", "TRUE", "TRUE"])
    report = tree / "pkg" / "npu-migrate.json"
    data = json.loads(report.read_text())
    for item in data["findings"]:
        if not item["fixable"]:
            item["severity"] = "info"
            break
    report.write_text(json.dumps(data))
    out = audit.census(tree, [tmp_path / "r1.md"], [])
    assert "severity changed since the verdict" in out
    assert out.count("as error, now info") == 1
    # judged again as reported today (a later round's re-judgement file): no longer stale, and
    # re-judgement files are read oldest first, a later one winning
    stale = next(line for line in out.splitlines() if "as error, now info" in line)
    package, location, code = stale.split(": ", 1)[1].split()[:3]
    assert "of which false or redundant: 1" in out  # the row judged FALSE, another one
    (tmp_path / "rj1.txt").write_text(f"{package} {location} {code} FALSE\n")
    (tmp_path / "rj2.txt").write_text(f"# now info, under P1\n{package} {location} {code} TRUE\n")
    out = audit.census(tree, [tmp_path / "r1.md"], [], [tmp_path / "rj1.txt", tmp_path / "rj2.txt"])
    assert "severity changed since the verdict" not in out
    assert "of which false or redundant: 1" in out
    out = audit.census(tree, [tmp_path / "r1.md"], [], [tmp_path / "rj2.txt", tmp_path / "rj1.txt"])
    assert "of which false or redundant: 2" in out and "severity changed" not in out
