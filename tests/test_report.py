"""The migration report (Markdown and HTML), the CSV files in Huawei's layout, and the torch_npu pin.

Every summary here comes from real engine runs: the golden inputs of fixtures/rules/ (each file on
its own, as tests/test_golden.py runs them, or as one project through the command line, whose
JSON output the report must agree with), a copy of fixtures/projects/nanochat_mini, and small
files written into tmp_path whose names or contents exercise escaping. One test renders the page
with headless Chromium (scripts/render_report.py) where /usr/bin/chromium exists.
"""

from __future__ import annotations

import csv
import json
import re
import shutil
import struct
import subprocess
import sys
import urllib.parse
import xml.etree.ElementTree as ET
from collections import Counter
from dataclasses import dataclass
from html.parser import HTMLParser
from pathlib import Path
from typing import Optional

import pytest
from click.testing import CliRunner

from npu_migrate import __version__, catalogue
from npu_migrate.cli import main
from npu_migrate.discover import discover
from npu_migrate.engine import migrate_source
from npu_migrate.findings import Finding
from npu_migrate.model import FileResult, Options
from npu_migrate.pins import (
    HEADER,
    advise,
    find_torch_pins,
    parse_requirement,
    satisfies,
)
from npu_migrate.render import RunSummary
from npu_migrate.report import (
    CHANGE_LIST_HEADER,
    LEVEL_MINUTES,
    UNSUPPORTED_API_HEADER,
    RequirementsConflict,
    duration,
    level,
    lines_of_code,
    md_inline,
    minutes,
    percent,
    public_guidance,
    rich,
    suggest_requirements,
    write_csv,
    write_report,
    write_requirements,
)
from npu_migrate.run import package_dirs, run_files

REPO = Path(__file__).resolve().parent.parent
RULES = REPO / "fixtures" / "rules"
NANOCHAT = REPO / "fixtures" / "projects" / "nanochat_mini"
OPTIONS = Options(enabled=catalogue.enabled_codes())
# A real parse error whose message holds < & | * (the parser lists the tokens it expected).
BAD_SYNTAX = b"import torch\nif x <> y: torch.cuda.synchronize()\n"
MULTILINE = b"""import torch


def pick(device_type):
    assert device_type in [
        "cuda",
        "cpu",
    ]
    return torch.nn.DataParallel(torch.nn.Linear(2, 2))
"""
HOSTILE = 'odd<b>&"q" (1).py'  # markup, an ampersand, quotes, a space and parentheses
INTERNAL = re.compile(r"(?<![\w./-])(?:npu_migrate|rules|docs|families|tests|fixtures|scripts)/\w")


@pytest.fixture(scope="module")
def rules_summary() -> RunSummary:
    results = [
        migrate_source(p.read_bytes(), p.relative_to(RULES).as_posix(), OPTIONS)
        for p in sorted(RULES.rglob("*.py"))
        if "expected" not in p.relative_to(RULES).parts
    ]
    return RunSummary(root="fixtures/rules", dry_run=True, results=sorted(results, key=lambda r: r.relpath))


def _run_dir(root: Path, dry_run: bool = True) -> RunSummary:
    items = [(path, Path(path).relative_to(root).as_posix()) for path, _ in discover(root, (), "npu_compat")]
    options = Options(enabled=catalogue.enabled_codes(), package_dirs=package_dirs(root, items))
    return RunSummary(root=str(root), dry_run=dry_run, results=run_files(items, options))


def _run_files(root: Path, files: dict[str, bytes]) -> RunSummary:
    items = []
    for name, data in files.items():
        (root / name).write_bytes(data)
        items.append((str(root / name), name))
    return RunSummary(root=str(root), dry_run=True, results=run_files(sorted(items), OPTIONS))


def _section(text: str, title: str) -> str:
    start = text.index(f"\n## {title}\n")
    end = text.find("\n## ", start + 1)
    return text[start:end if end != -1 else len(text)]


def _subsection(text: str, title: str) -> str:
    start = text.index(f"\n### {title}\n")
    end = re.search(r"\n##+ ", text[start + 1:])
    return text[start:start + 1 + end.start() if end else len(text)]


def _cells(row: str) -> list[str]:
    """The cells of a Markdown table row, split on pipes that are not escaped."""
    return [c.strip() for c in re.split(r"(?<!\\)\|", row.strip())[1:-1]]


def _table(text: str) -> list[list[str]]:
    return [_cells(line) for line in text.splitlines() if line.startswith("|")][2:]


def _overview_value(text: str, item: str) -> str:
    rows = {r[0]: r[1] for r in _table(_section(text, "Run details").split("\n### ")[0])}
    return rows[item]


def _markdown(summary: RunSummary, tmp_path: Path, name: str = "report.md") -> str:
    path = tmp_path / name
    write_report(summary, path)
    return path.read_text(encoding="utf-8")


def _share(findings: list[dict]) -> str:
    """The headline's share, computed from the JSON output's findings (NPU0xx left out)."""
    cuda = [f for f in findings if not f["code"].startswith("NPU0")]
    rewritten = sum(1 for f in cuda if f["fixable"])
    return f"{100 * rewritten // len(cuda)}%" if cuda else "n/a"


# -- Markdown -------------------------------------------------------------------------------------


def test_run_details_count_what_the_summary_holds(rules_summary, tmp_path):
    text = _markdown(rules_summary, tmp_path)
    reported = [f for f in rules_summary.findings if not f.fixable]
    assert _overview_value(text, "files scanned") == str(len(rules_summary.results))
    assert _overview_value(text, "files that would change") == str(len(rules_summary.changed))
    assert _overview_value(text, "files skipped") == str(sum(rules_summary.skipped.values()))
    assert _overview_value(text, "files with findings") == str(len({f.path for f in reported}))
    assert _overview_value(text, "rewrites") == str(sum(rules_summary.rewrites.values()))
    assert _overview_value(text, "findings reported (not rewritten)") == str(sum(rules_summary.reported.values()))
    assert _overview_value(text, "tool") == f"npu-migrate {__version__}"
    assert f"version {__version__}" in _overview_value(text, "shim")
    assert _overview_value(text, "mode").startswith("dry run")
    loc = sum(lines_of_code(r) for r in rules_summary.results)
    assert _overview_value(text, "lines of code scanned") == str(loc) and loc > 0
    assert rules_summary.reported, "the fixtures hold report-only constructs"
    # severity: findings (report-only) and rewrites apart; rewrites are never findings
    rows = {r[0]: r[1:3] for r in _table(_subsection(text, "Severity"))}
    assert set(rows) == {"error", "warning", "info"}
    for severity, (left, fixed) in rows.items():
        assert int(left) == sum(1 for f in reported if f.severity == severity)
        assert int(fixed) == sum(1 for f in rules_summary.findings if f.fixable and f.severity == severity)


def test_effort_levels_count_every_item_once(rules_summary, tmp_path):
    text = _markdown(rules_summary, tmp_path)
    rows = {r[0]: r[1:5] for r in _table(_section(text, "How the numbers are computed"))}
    assert set(rows) == {"high", "medium", "low", "none"}
    findings = rules_summary.findings
    for lv, (each, left, fixed, estimate) in rows.items():
        assert int(each) == LEVEL_MINUTES[lv]
        assert int(left) == sum(1 for f in findings if not f.fixable and level(f) == lv)
        assert int(fixed) == sum(1 for f in findings if f.fixable and level(f) == lv)
        assert estimate == duration(LEVEL_MINUTES[lv] * (int(left) + int(fixed)))
    assert sum(int(v[1]) + int(v[2]) for v in rows.values()) == len(findings)
    assert int(rows["none"][1]) == 0 and int(rows["high"][2]) == 0  # a rewrite is never high


def test_effort_model():
    def one(code: str, fixable: bool, severity: str = "") -> Finding:
        return Finding("a.py", 1, 1, code, "m", fixable, "", severity=severity)

    assert level(one("NPU901", False)) == "high"  # manual: port by hand
    assert level(one("NPU930", False)) == "medium"  # review, warning
    assert level(one("NPU991", False)) == "low"  # review, info
    assert level(one("NPU109", False, "info")) == "low"  # a rule lowered the severity
    assert level(one("NPU201", True)) == "none"  # rewritten; nothing to do
    assert level(one("NPU702", True)) == "low"  # a rewrite whose rule asks for a look
    assert minutes([one("NPU901", False), one("NPU930", False), one("NPU201", True)]) == 80
    assert [duration(m) for m in (0, 45, 60, 80, 123, 1065)] == ["0 min", "45 min", "1 h", "1 h 20 min",
                                                                  "2 h 5 min", "17 h 45 min"]
    assert percent(None) == "n/a" and percent(0.999) == "99%" and percent(1.0) == "100%"


def test_per_file_table(rules_summary, tmp_path):
    text = _markdown(rules_summary, tmp_path)
    rows = {r[0].strip("`"): r for r in _table(_section(text, "Files"))}
    by_path = {r.relpath: r for r in rules_summary.results}
    listed = {p for p, r in by_path.items()
              if r.findings or r.changed or (r.skipped and r.skipped != "no CUDA trigger words")}
    assert set(rows) == listed
    for path, (_, status, loc, rewrites, error, warning, info, estimate) in rows.items():
        result = by_path[path]
        left = Counter(f.severity for f in result.findings if not f.fixable)
        assert int(loc) == lines_of_code(result)
        assert int(rewrites) == sum(f.fixable for f in result.findings)
        assert (int(error), int(warning), int(info)) == (left["error"], left["warning"], left["info"])
        assert estimate == duration(minutes(result.findings))
        if result.skipped:
            assert status == f"skipped: {result.skipped}"
        else:
            assert status == ("would change" if result.changed else "unchanged")


def test_findings_are_grouped_by_code_with_guidance_once(rules_summary, tmp_path):
    text = _markdown(rules_summary, tmp_path)
    section = _section(text, "Findings by code")
    reported = [f for f in rules_summary.findings if not f.fixable]
    codes = sorted({f.code for f in reported})
    table = {r[0].strip("`"): r for r in _table(section.split("\n### ")[0])}
    assert set(table) == set(codes)
    for code in codes:
        group = [f for f in reported if f.code == code]
        assert int(table[code][5]) == len(group)
        title = f"`{code}` {catalogue.rule(code).name} ({len(group)})"
        assert section.count(f"### {title}\n") == 1
        sub = _subsection(section, title)
        guidance = md_inline(rich(public_guidance(catalogue.rule(code).guidance)))
        assert text.count(guidance) == 1, code
        assert guidance in sub
        summary = f"<summary>{len(group)} location{'s' if len(group) > 1 else ''}</summary>"
        assert summary in sub
        items = [line for line in sub.splitlines() if line.startswith("- ")]
        assert len(items) == len(group)
        for f, line in zip(group, items, strict=True):  # in file, line, column order, each a link
            status = f"rewritten ({f.severity}):" if f.fixable else f"reported ({f.severity}):"
            match = re.match(rf"- \[`{re.escape(f'{f.path}:{f.line}:{f.column}')}`\]\((\S+)#L{f.line}\) ", line)
            assert match and line[match.end():].startswith(status), line
            assert (tmp_path / match.group(1)).resolve() == (REPO / rules_summary.root / f.path).resolve()
            assert md_inline(rich(f.message)) in line
    # rewrites are listed in their own section, never among the findings
    rewrites = _section(text, "Rewritten automatically")
    assert {r[0].strip("`"): int(r[4]) for r in _table(rewrites)} == dict(rules_summary.rewrites)
    assert not any(f"`{c}`" in section for c in rules_summary.rewrites if c not in rules_summary.reported)


def test_guidance_shows_no_internal_path():
    cited = [r for r in catalogue.rules().values() if INTERNAL.search(r.guidance)]
    for rule in catalogue.rules().values():
        shown = public_guidance(rule.guidance)
        assert not INTERNAL.search(shown), (rule.code, shown)
        if rule not in cited:
            assert shown == rule.guidance
        else:
            assert shown and len(shown) > len(rule.guidance) / 2, rule.code
    text = ("Use X (the notes live in rules/cuda_api.toml, table [report]). See docs/attention.md. "
            "rules/env.toml maps A to B. Keep `pyproject.toml` and setup.py.")
    assert public_guidance(text) == "Use X. npu-migrate's rule table maps A to B. Keep `pyproject.toml` and setup.py."


def test_markdown_escapes_tables_and_text(tmp_path):
    summary = _run_files(tmp_path, {"a|b.py": b"import torch\nx = torch.zeros(1).cuda()\n", "bad.py": BAD_SYNTAX})
    text = _markdown(summary, tmp_path)
    # the pipe in the file name stays inside its cell: every row has the header's cell count
    files = [line for line in _section(text, "Files").splitlines() if line.startswith("|")]
    assert all(len(_cells(line)) == 8 for line in files)
    assert "`a\\|b.py`" in files[2] or "`a\\|b.py`" in files[3]
    for table in re.split(r"\n\n", text):
        lines = [line for line in table.splitlines() if line.startswith("|")]
        assert len({len(_cells(line)) for line in lines}) <= 1, table
    # a parse error's message lists tokens such as <, <<, &, |, *: escaped outside code spans
    (bad,) = [f for f in summary.findings if f.path == "bad.py"]
    assert "<" in bad.message and "&" in bad.message
    item = next(line for line in _section(text, "Findings by code").splitlines() if "`bad.py:" in line)
    assert "\\<\\<" in item and "\\&" in item and "\\*\\*" in item
    assert re.search(r"(?<!\\)<", item) is None


# -- HTML -----------------------------------------------------------------------------------------


VOID = {"meta", "br", "hr", "img", "link", "input", "wbr"}


class _Structure(HTMLParser):
    """Checks nesting, and collects tags, ids, tables (with the heading above them), links,
    <details> lists, text and the SVG charts."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.stack: list[str] = []
        self.errors: list[str] = []
        self.tags: Counter = Counter()
        self.ids: list[str] = []
        self.text: list[str] = []
        self.rows: list[list[str]] = []
        self.tables: list[list[list[str]]] = []
        self.table_after: list[str] = []  # the id of the last heading before each table
        self.li: list[str] = []
        self.hrefs: list[str] = []
        self.details: list[dict] = []  # {"open", "summary", "items", "after"}
        self.titles_outside_svg = 0
        self._heading = ""
        self._cell: Optional[list[str]] = None
        self._summary: Optional[list[str]] = None

    def handle_starttag(self, tag, attrs):
        attributes = dict(attrs)
        self.tags[tag] += 1
        self.ids += [v for k, v in attrs if k == "id"]
        if tag in ("h1", "h2", "h3") and attributes.get("id"):
            self._heading = attributes["id"]
        if tag == "link" or tag == "script" or tag in ("img", "iframe", "object", "embed"):
            self.errors.append(f"external or active content: <{tag}>")
        if any(k.startswith("on") for k in attributes):
            self.errors.append(f"an event handler on <{tag}>")
        if tag == "title" and "svg" not in self.stack:
            self.titles_outside_svg += 1
        if tag == "a":
            self.hrefs.append(attributes.get("href", ""))
        if tag == "details":
            self.details.append({"open": "open" in attributes, "summary": "", "items": [], "after": self._heading})
        if tag == "summary":
            self._summary = []
        if tag not in VOID:
            self.stack.append(tag)
        if tag == "table":
            self.tables.append([])
            self.table_after.append(self._heading)
        if tag == "tr":
            self.rows.append([])
            self.tables[-1].append(self.rows[-1])
        if tag in ("td", "th", "li"):
            self._cell = []

    def handle_endtag(self, tag):
        if tag in VOID:
            return
        if not self.stack or self.stack[-1] != tag:
            self.errors.append(f"</{tag}> closes {self.stack[-1:] or 'nothing'}")
            return
        self.stack.pop()
        if tag in ("td", "th") and self._cell is not None:
            self.rows[-1].append("".join(self._cell))
            self._cell = None
        if tag == "li" and self._cell is not None:
            self.li.append("".join(self._cell))
            if "details" in self.stack:
                self.details[-1]["items"].append(self.li[-1])
            self._cell = None
        if tag == "summary" and self._summary is not None:
            self.details[-1]["summary"] = "".join(self._summary)
            self._summary = None

    def handle_data(self, data):
        self.text.append(data)
        if self._cell is not None:
            self._cell.append(data)
        if self._summary is not None:
            self._summary.append(data)

    def table(self, heading: str, index: int = 0) -> list[list[str]]:
        """The index-th table under the heading with this id (its header row first)."""
        return [t for t, h in zip(self.tables, self.table_after) if h == heading][index]


def _parse(page: str) -> _Structure:
    parser = _Structure()
    parser.feed(page)
    parser.close()
    return parser


def _svgs(page: str) -> list[ET.Element]:
    """Every inline SVG, parsed as XML (ElementTree raises on anything not well-formed)."""
    return [ET.fromstring(m) for m in re.findall(r"<svg\b.*?</svg>", page, flags=re.DOTALL)]


def _rows(table: list[list[str]]) -> dict[str, list[str]]:
    return {row[0]: row for row in table[1:]}


def test_html_is_well_formed_self_contained_and_escaped(tmp_path):
    project = tmp_path / "proj"
    project.mkdir()
    summary = _run_files(project, {HOSTILE: b"import torch\nx = torch.zeros(1).cuda()\nm = torch.nn.DataParallel(m)\n",
                                   "bad.py": BAD_SYNTAX, "m.py": MULTILINE})
    path = tmp_path / "report.html"
    write_report(summary, path)
    page = path.read_text(encoding="utf-8")
    assert page.startswith("<!DOCTYPE html>")
    doc = _parse(page)
    assert doc.errors == [] and doc.stack == []
    assert doc.tags["html"] == doc.tags["head"] == doc.tags["body"] == doc.tags["h1"] == 1
    assert doc.titles_outside_svg == 1
    assert doc.tags["style"] == 1 and "b" not in doc.tags  # the file name's <b> is text, not markup
    assert "http://" not in page.split("<body>")[0] and "src=" not in page and "url(" not in page
    assert all(not h.startswith(("http:", "https:", "javascript:", "//")) for h in doc.hrefs)
    for anchor in ("summary", "families", "most-work", "findings", "files", "rewrites", "requirements",
                   "overview", "severity", "errors", "method"):
        assert anchor in doc.ids
    assert len(doc.ids) == len(set(doc.ids))
    assert all(h[1:] in doc.ids for h in doc.hrefs if h.startswith("#"))  # in-page links land
    assert doc.tags["table"] == doc.tags["thead"] == doc.tags["tbody"]
    assert doc.tables and all(len({len(row) for row in table}) == 1 for table in doc.tables)
    assert all(table[0] and len(table) >= 2 for table in doc.tables)  # a header row and a body
    # the odd name and the parse error's message come back exactly after unescaping
    assert any(HOSTILE in cell for row in doc.rows for cell in row)
    (bad,) = [f for f in summary.findings if f.path == "bad.py"]
    assert any(bad.message in item for item in doc.li)
    assert "&lt;&lt;" in page and "&amp;" in page
    # the links to the odd file are percent-encoded, so no quote ends the attribute
    quoted = "proj/" + urllib.parse.quote(HOSTILE)
    assert f'href="{quoted}"' in page and f'href="{quoted}#L3"' in page
    assert f"{quoted}#L3" in doc.hrefs and "(" not in quoted and '"' not in quoted
    # and in the charts, whose text is XML
    labels = [t.text for svg in _svgs(page) for t in svg.iter("{http://www.w3.org/2000/svg}title")]
    assert any(label and label.startswith(HOSTILE + ":") for label in labels)
    # same counts as the Markdown version
    cells = {row[0]: row[1] for row in doc.table("overview")}
    assert cells["files scanned"] == "3"
    assert cells["rewrites"] == str(sum(summary.rewrites.values()))


def _cli_run(root: Path, report: Path) -> dict:
    result = CliRunner().invoke(
        main, ["migrate", str(root), "--dry-run", "--no-cache", "--isolated", "--allow-dirty", "-j", "1",
               "--output-format", "json", "--report", str(report)],
        catch_exceptions=False,
    )
    assert result.exit_code in (0, 1), result.output
    return json.loads(result.stdout)


@pytest.fixture(scope="module")
def cli_report(tmp_path_factory) -> tuple[dict, str, str, Path]:
    """fixtures/rules as one project, run through the command line: the JSON output and the
    HTML and Markdown reports of the same run (two runs of a deterministic tool)."""
    base = tmp_path_factory.mktemp("cli")
    root = base / "proj"
    shutil.copytree(RULES, root, ignore=shutil.ignore_patterns("expected"))
    out = base / "out"
    out.mkdir()
    data = _cli_run(root, out / "report.html")
    again = _cli_run(root, out / "report.md")
    assert again == data
    return data, (out / "report.html").read_text(encoding="utf-8"), (out / "report.md").read_text(encoding="utf-8"), root


def test_report_numbers_equal_the_json_output(cli_report):
    data, page, text, _ = cli_report
    findings = data["findings"]
    reported = [f for f in findings if not f["fixable"]]
    fixed = [f for f in findings if f["fixable"]]
    assert reported and fixed and any(f["code"].startswith("NPU0") for f in reported)
    doc = _parse(page)
    assert doc.errors == []
    # headline: the share of CUDA references, findings by severity, files
    tiles = re.findall(r'<div class="value">([^<]*)</div>', page)
    assert tiles[0] == _share(findings) != "n/a"
    assert tiles[1] == str(sum(data["findings_by_code"].values())) == str(len(reported))
    assert tiles[3] == str(data["files_scanned"])
    by_severity = Counter(f["severity"] for f in reported)
    assert f"{by_severity['error']} errors, {by_severity['warning']} warnings, {by_severity['info']} info" in page
    # findings by code: counts and severities
    table = _rows(doc.table("findings"))
    assert {code: int(row[5]) for code, row in table.items()} == data["findings_by_code"]
    for code, row in table.items():
        severities = Counter(f["severity"] for f in reported if f["code"] == code)
        expected = next(iter(severities)) if len(severities) == 1 else \
            ", ".join(f"{severities[s]} {s}" for s in catalogue.SEVERITIES if severities[s])
        assert row[3] == expected
    # the severity table: findings and rewrites apart
    severity = _rows(doc.table("severity"))
    for name in catalogue.SEVERITIES:
        assert int(severity[name][1]) == by_severity[name]
        assert int(severity[name][2]) == sum(1 for f in fixed if f["severity"] == name)
    # rewrites per code
    assert {code: int(row[4]) for code, row in _rows(doc.table("rewrites")).items()} == data["rewrites_by_code"]
    # files: the changed ones, and per file its rewrites and findings by severity
    files = _rows(doc.table("files"))
    assert sorted(p for p, row in files.items() if row[1] == "would change") == data["changed_files"]
    for path in {f["path"] for f in findings}:
        row = files[path]
        mine = [f for f in findings if f["path"] == path]
        left = Counter(f["severity"] for f in mine if not f["fixable"])
        assert int(row[3]) == sum(1 for f in mine if f["fixable"])
        assert [int(row[4]), int(row[5]), int(row[6])] == [left[s] for s in catalogue.SEVERITIES]
    details = _rows(doc.table("overview"))
    assert details["files scanned"][1] == str(data["files_scanned"])
    assert details["files that would change"][1] == str(data["files_changed"])
    assert details["rewrites"][1] == str(sum(data["rewrites_by_code"].values()))
    assert details["findings reported (not rewritten)"][1] == str(len(reported))
    # the Markdown report of the same run says the same
    assert f"| rewrites | {len(fixed)} |" in text
    assert f"| findings reported (not rewritten) | {len(reported)} |" in text
    assert f"- **{_share(findings)}** of CUDA references migrated automatically" in text
    md_codes = {r[0].strip("`"): int(r[5]) for r in _table(_section(text, "Findings by code").split("\n### ")[0])}
    assert md_codes == data["findings_by_code"]


def test_every_finding_is_listed_once_under_its_code_with_a_link_to_its_line(cli_report):
    data, page, _, root = cli_report
    doc = _parse(page)
    reported = [f for f in data["findings"] if not f["fixable"]]
    groups = [d for d in doc.details if d["after"].startswith("code-")]
    assert [d["after"] for d in groups] == [h for h in doc.ids if h.startswith("code-")]
    assert {d["after"]: len(d["items"]) for d in groups} == {
        f"code-{c.lower()}": n for c, n in data["findings_by_code"].items()}
    for d in groups:
        count = len(d["items"])
        assert d["summary"] == f"{count} location{'s' if count > 1 else ''}"
        assert d["open"] == (count <= 5)
    listed = {d["after"]: d["items"] for d in groups}
    for f in reported:
        location = f"{f['path']}:{f['line']}:{f['column']} "
        mine = [item for item in listed[f"code-{f['code'].lower()}"] if item.startswith(location)]
        same = [g for g in reported if (g["code"], g["path"], g["line"], g["column"]) ==
                (f["code"], f["path"], f["line"], f["column"])]
        assert len(mine) == len(same) and any(f["message"].replace("`", "") in item for item in mine), location
    # the links: relative to the report's folder (out/, beside proj/), with the finding's line
    for f in reported:
        href = f"../proj/{urllib.parse.quote(f['path'])}#L{f['line']}"
        assert href in doc.hrefs
        target = (root.parent / "out" / urllib.parse.unquote(href.split("#")[0])).resolve()
        assert target == (root / f["path"]).resolve() and target.is_file()
        if f["source"] and not f["source"].endswith("..."):
            lines = target.read_bytes().decode("utf-8", "replace").splitlines()
            assert f["source"].split()[0] in lines[f["line"] - 1], f
    # guidance once per code, without the tool's internal paths
    for code in data["findings_by_code"]:
        guidance = public_guidance(catalogue.rule(code).guidance)
        assert "".join(doc.text).count(guidance.replace("`", "")) == 1, code
    assert not INTERNAL.search("".join(doc.text).split("How the numbers are computed")[0])


def test_charts_are_well_formed_svg(cli_report):
    data, page, _, _ = cli_report
    svgs = _svgs(page)
    assert len(svgs) == 2 and page.count("<svg") == 2
    ns = "{http://www.w3.org/2000/svg}"
    families, work = svgs
    # findings by family: one bar per family, segments whose values add up to the JSON's
    bars = [g for g in families.iter(f"{ns}g")]
    totals: Counter = Counter()
    for g in bars:
        for rect in g.iter(f"{ns}rect"):
            name, value = rect.find(f"{ns}title").text.rsplit(": ", 1)
            totals[name] += int(value)
    reported = [f for f in data["findings"] if not f["fixable"]]
    for severity in catalogue.SEVERITIES:
        assert totals[severity] == sum(1 for f in reported if f["severity"] == severity)
    assert totals["rewritten (not a finding)"] == sum(data["rewrites_by_code"].values())
    family_names = {catalogue.rule(f["code"]).family for f in data["findings"]}
    assert {g.find(f"{ns}title").text.split(":")[0] for g in bars} == family_names
    # files with the most work: at most ten, the largest first
    rows = [g.find(f"{ns}title").text for g in work.iter(f"{ns}g")]
    assert 0 < len(rows) <= 10
    for svg in svgs:
        assert svg.get("viewBox") and not svg.findall(f".//{ns}script") and not svg.findall(".//script")
        for rect in svg.iter(f"{ns}rect"):
            assert float(rect.get("width")) > 0


def test_links_are_relative_to_the_reports_folder(tmp_path):
    project = tmp_path / "proj"
    (project / "pkg").mkdir(parents=True)
    summary = _run_files(project, {"pkg/m.py": MULTILINE})
    (tmp_path / "deep" / "er").mkdir(parents=True)
    for report in (tmp_path / "deep" / "er" / "r.html", project / "r.html"):
        write_report(summary, report)
        doc = _parse(report.read_text(encoding="utf-8"))
        data_parallel = next(f for f in summary.findings if not f.fixable)
        href = next(h for h in doc.hrefs if h.endswith(f"#L{data_parallel.line}"))
        assert (report.parent / href.split("#")[0]).resolve() == (project / "pkg" / "m.py").resolve()
    assert href == f"pkg/m.py#L{data_parallel.line}"


def test_lines_of_code():
    text = b'# a comment\n\nimport torch  # code\n    # indented comment\n"""doc"""\nx = 1\n'
    assert lines_of_code(FileResult("a.py", original=text)) == 3
    notebook = json.dumps({"cells": [{"cell_type": "markdown", "source": ["# title\n", "text\n"]},
                                     {"cell_type": "code", "source": ["import torch\n", "\n", "x = 1\n"]}]})
    assert lines_of_code(FileResult("n.ipynb", original=notebook.encode())) == 2
    assert lines_of_code(FileResult("a.py")) is None


def test_markdown_and_html_are_deterministic_and_undated(rules_summary, tmp_path):
    for name in ("a.md", "a.html"):
        write_report(rules_summary, tmp_path / name)
        first = (tmp_path / name).read_bytes()
        write_report(rules_summary, tmp_path / name)
        assert (tmp_path / name).read_bytes() == first
        assert not re.search(rb"\b20\d\d-\d\d-\d\d\b", first)
    assert (tmp_path / "a.htm").exists() is False
    write_report(rules_summary, tmp_path / "A.HTM")
    assert (tmp_path / "A.HTM").read_text().startswith("<!DOCTYPE html>")


def test_a_run_without_cuda_references(tmp_path):
    summary = _run_files(tmp_path, {"plain.py": b"print('hello')\n"})
    page = (tmp_path / "r.html")
    write_report(summary, page)
    doc = _parse(page.read_text(encoding="utf-8"))
    assert doc.errors == [] and "svg" not in doc.tags
    text = "".join(doc.text)
    assert "n/a" in text and "no CUDA reference found" in text and "No file needs hand work." in text


def test_written_run_of_a_copied_project(tmp_path):
    root = tmp_path / "nanochat_mini"
    shutil.copytree(NANOCHAT, root)
    (root / "requirements.txt").write_text("numpy\ntorch==2.1.0\n")
    summary = _run_dir(root, dry_run=False)
    summary.shim = "created shim npu_compat/ (test)"
    text = _markdown(summary, tmp_path)
    assert _overview_value(text, "files changed") == str(len(summary.changed)) != "0"
    assert _overview_value(text, "mode") == "changes written"
    assert "created shim npu_compat/ (test)" in _overview_value(text, "shim")
    assert "- **100%** of CUDA references migrated automatically" in text
    requirements = _section(text, "Requirements")
    assert "torch==2.1.0\ntorch_npu==2.1.0.post17\n" in requirements
    assert "CANN 8.3.RC1" in requirements and "`requirements.txt:2`" in requirements


def _png_size(path: Path) -> tuple[int, int]:
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and data[12:16] == b"IHDR"
    return struct.unpack(">II", data[16:24])


@pytest.mark.skipif(not Path("/usr/bin/chromium").exists(), reason="needs Chromium (/usr/bin/chromium)")
def test_render_script_takes_a_screenshot(tmp_path):
    project = tmp_path / "nanochat_mini"
    shutil.copytree(NANOCHAT, project)
    before = sorted(p.relative_to(project) for p in project.rglob("*"))
    png, page = tmp_path / "shot.png", tmp_path / "report.html"
    proc = subprocess.run([sys.executable, str(REPO / "scripts" / "render_report.py"), str(project),
                           "--html", str(page), "--png", str(png), "--window-size", "1280,900",
                           "--chromium", "/usr/bin/chromium"],
                          capture_output=True, text=True, timeout=180)
    assert proc.returncode == 0, proc.stderr
    assert _png_size(png) == (1280, 900) and png.stat().st_size > 10_000
    assert page.read_text(encoding="utf-8").startswith("<!DOCTYPE html>")
    assert sorted(p.relative_to(project) for p in project.rglob("*")) == before  # a dry run, no cache


def _cell_finding(path: str, line: int, column: int, code: str, message: str, cell: int) -> Finding:
    """A notebook finding; with a stand-in subclass while Finding has no `cell` field yet."""
    if "cell" in Finding.__dataclass_fields__:
        return Finding(path, line, column, code, message, False, "x", cell=cell)  # type: ignore[call-arg]

    @dataclass(frozen=True, order=True)
    class WithCell(Finding):
        cell: Optional[int] = None

    return WithCell(path, line, column, code, message, False, "x", cell)


def test_errors_and_notebook_cells_are_shown(tmp_path):
    result = migrate_source(MULTILINE, "m.py", OPTIONS)
    reported = next(f for f in result.findings if not f.fixable)
    cell_finding = _cell_finding("nb.ipynb", 2, 5, reported.code, "in a notebook cell", 3)
    notebook = FileResult(relpath="nb.ipynb", findings=[cell_finding], original=b"{}")
    summary = RunSummary(root=str(tmp_path), dry_run=True, results=[notebook, result],
                         errors=["x.py: not written: boom"])
    text = _markdown(summary, tmp_path)
    assert "`nb.ipynb:cell_3:2:5`" in text
    assert "- x.py: not written: boom" in _section(text, "Errors")
    paths = write_csv(summary, tmp_path / "csv")
    rows = list(csv.DictReader(paths[1].open(encoding="utf-8", newline="")))
    nb = next(r for r in rows if r["File"] == "nb.ipynb")
    assert (nb["Cell"], nb["Start Line"], nb["End Line"]) == ("3", "2", "2")
    assert all(r["Cell"] == "" for r in rows if r["File"] != "nb.ipynb")


# -- CSV ------------------------------------------------------------------------------------------


def _read_csv(path: Path) -> tuple[list[str], list[dict]]:
    data = path.read_bytes()
    assert b"\r\n" not in data, "lines end with \\n"
    data.decode("utf-8")
    with path.open(encoding="utf-8", newline="") as handle:
        rows = list(csv.reader(handle))
    header = rows[0]
    return header, [dict(zip(header, r, strict=True)) for r in rows[1:]]


def test_csv_in_huaweis_layout(rules_summary, tmp_path):
    change_path, unsupported_path = write_csv(rules_summary, tmp_path / "out")
    assert (change_path.name, unsupported_path.name) == ("change_list.csv", "unsupported_api.csv")
    header, changes = _read_csv(change_path)
    assert tuple(header[:5]) == CHANGE_LIST_HEADER == ("File", "Start Line", "End Line", "Operation Type", "Message")
    assert header[5:] == ["Column", "Code", "Rule", "Effort", "Cell", "Guidance", "Severity"]
    header, unsupported = _read_csv(unsupported_path)
    assert tuple(header[:5]) == UNSUPPORTED_API_HEADER == ("File", "Start Line", "End Line", "OP", "Tips")

    rewrites = [f for f in rules_summary.findings if f.fixable]
    reported = [f for f in rules_summary.findings if not f.fixable]
    assert len(changes) == len(rewrites) and len(unsupported) == len(reported)
    for row, f in zip(changes, rewrites, strict=True):
        assert (row["File"], int(row["Start Line"]), int(row["Column"])) == (f.path, f.line, f.column)
        assert row["Code"] == f.code
        assert row["Operation Type"] == "MODIFY" and row["Message"] == f.message
        assert int(row["End Line"]) >= f.line
        assert row["Effort"] == catalogue.rule(f.code).effort
    for row, f in zip(unsupported, reported, strict=True):
        assert (row["File"], int(row["Start Line"]), row["Code"], row["Tips"]) == (f.path, f.line, f.code, f.message)
        assert row["OP"] == (f.source or catalogue.rule(f.code).name)
        assert row["Guidance"] == public_guidance(catalogue.rule(f.code).guidance)
    assert Counter(r["Code"] for r in unsupported) == rules_summary.reported


def test_csv_end_line_and_spreadsheet_safety(tmp_path):
    summary = _run_files(tmp_path, {"m.py": MULTILINE, "=cmd.py": b"import torch\nx = torch.zeros(1).cuda()\n"})
    change_path, unsupported_path = write_csv(summary, tmp_path / "out")
    _, changes = _read_csv(change_path)
    _, unsupported = _read_csv(unsupported_path)
    membership = next(r for r in changes if r["File"] == "m.py" and r["Code"] == "NPU105")
    assert (membership["Start Line"], membership["End Line"]) == ("5", "8")  # the list spans 4 lines
    data_parallel = next(r for r in unsupported if r["File"] == "m.py")
    assert data_parallel["Start Line"] == data_parallel["End Line"] == "9"
    formula = [r for r in changes if r["File"].endswith("cmd.py")]
    assert formula and all(r["File"] == "'=cmd.py" for r in formula)


# -- requirements ----------------------------------------------------------------------------------


def _advice(tmp_path: Path, files: dict[str, str]):
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    return suggest_requirements(tmp_path)


@pytest.mark.parametrize("files, torch, torch_npu, cann, source", [
    ({"requirements.txt": "numpy>=1.24\ntorchvision==0.16.0\ntorch==2.1.0  # pinned\n"},
     "2.1.0", "2.1.0.post17", "8.3.RC1", "requirements.txt:3"),
    ({"requirements-dev.txt": "# dev\ntorch>=2.1,<2.4\n"}, "2.3.1", "2.3.1.post6", "8.1.RC1", "requirements-dev.txt:2"),
    ({"requirements/base.txt": "torch==2.5.1+cpu ; platform_machine == 'x86_64'\n"},
     "2.5.1", "2.5.1.post1", "8.2.RC1", "requirements/base.txt:1"),
    ({"pyproject.toml": '[project]\nname = "x"\ndependencies = [\n  "numpy",\n  "torch~=2.6.0",\n]\n'},
     "2.6.0", "2.6.0.post5", "8.5.0", "pyproject.toml:5"),
    ({"pyproject.toml": '[project]\nname = "x"\n[project.optional-dependencies]\ngpu = ["torch>=2.5,<2.6"]\n'},
     "2.5.1", "2.5.1.post1", "8.2.RC1", "pyproject.toml:4"),
    ({"pyproject.toml": '[tool.poetry.dependencies]\npython = "^3.10"\ntorch = "~2.7.1"\n'},
     "2.7.1", "2.7.1.post5", "9.1.0", "pyproject.toml:3"),
    ({"setup.py": 'raise SystemExit("never executed")\nsetup(install_requires=["numpy", "torch>=2.8,<2.9"])\n'},
     "2.8.0", "2.8.0.post4", "9.0.0", "setup.py:2"),
    ({"setup.cfg": "[options]\ninstall_requires =\n    numpy\n    torch==2.4.0\n"},
     "2.4.0", "2.4.0.post4", "8.1.RC1", "setup.cfg:4"),
    ({"environment.yml": "name: x\ndependencies:\n  - python=3.10\n  - pytorch-cuda=12.1\n"
                         "  - pytorch=2.5.1=py3.10_cpu_0\n"},
     "2.5.1", "2.5.1.post1", "8.2.RC1", "environment.yml:5"),
    ({"environment.yml": "dependencies:\n  - pip\n  - pip:\n    - torch==2.7.1\n"},
     "2.7.1", "2.7.1.post5", "9.1.0", "environment.yml:4"),
    ({"requirements.txt": "torch==2.1.*\n"}, "2.1.0", "2.1.0.post17", "8.3.RC1", "requirements.txt:1"),
    ({"requirements.txt": "torch @ https://download.pytorch.org/whl/cpu/torch-2.6.0%2Bcpu-cp310-linux_x86_64.whl\n"},
     "2.6.0", "2.6.0.post5", "8.5.0", "requirements.txt:1"),
])
def test_torch_pin_detection(tmp_path, files, torch, torch_npu, cann, source):
    advice = _advice(tmp_path, files)
    assert advice.pin is not None and advice.pin.source == source
    assert (advice.torch_version, advice.torch_npu_version, advice.cann) == (torch, torch_npu, cann)
    assert advice.known
    assert advice.requirement_lines() == [f"torch=={torch}", f"torch_npu=={torch_npu}"]
    for alt in advice.alternatives:  # older releases for the same torch, each for its own CANN
        assert alt.torch == torch and alt.torch_npu != torch_npu


def test_alternatives_and_ranges(tmp_path):
    advice = _advice(tmp_path, {"requirements.txt": "torch==2.1.0\n"})
    assert [a.torch_npu for a in advice.alternatives][:3] == ["2.1.0.post13", "2.1.0.post12", "2.1.0.post10"]
    assert satisfies("2.6.0", ((">=", "2.6"), ("<", "2.7")))
    assert not satisfies("2.7.1", (("~=", "2.6.0"),))
    assert satisfies("2.7.1", (("~=", "2.6"),)) and not satisfies("3.0.0", (("~=", "2.6"),))
    assert satisfies("2.1.0", (("==", "2.1.*"),)) and not satisfies("2.10.0", (("==", "2.1.*"),))
    assert not satisfies("2.4.0", (("!=", "2.4.0"),))
    ranged = advise(parse_requirement("torch>=2.1,!=2.3.1,<2.4", "r:1"))
    assert ranged.torch_version == "2.2.0" and ranged.torch_npu_version == "2.2.0.post2"
    assert any("allows a range" in n for n in ranged.notes)


def test_unknown_and_missing_torch_versions(tmp_path):
    unknown = _advice(tmp_path, {"requirements.txt": "torch==2.13.0\n"})
    assert unknown.torch_npu_version == "2.13.0" and not unknown.known and unknown.cann is None
    assert any("not among the pairs" in n and "check" in n and "2.12.0" in n for n in unknown.notes)
    between = advise(parse_requirement("torch==2.7.0", "r:1"))
    assert between.torch_npu_version == "2.7.0"
    assert any("2.6.0 and 2.7.1" in n for n in between.notes)
    above = advise(parse_requirement("torch>=2.40", "r:1"))
    assert above.torch_version == "2.40.0" and above.torch_npu_version == "2.40.0"
    nothing = advise(parse_requirement("torch<1.0", "r:1"))
    assert nothing.torch_version is None and nothing.requirement_lines() == ["torch<1.0"]
    (tmp_path / "empty").mkdir()
    empty = suggest_requirements(tmp_path / "empty")
    assert empty.pin is None and empty.known and any("No torch requirement" in n for n in empty.notes)


def test_what_is_not_a_torch_pin(tmp_path):
    for line in ("torchvision==0.16", "torch-npu==2.1.0", "torch_npu==2.1.0", "# torch==2.1.0", "pytorch-lightning>=2",
                 "-r other.txt", "torchaudio"):
        assert parse_requirement(line, "r:1") is None, line
    (tmp_path / "requirements-npu.txt").write_text(f"{HEADER} 0.0.1\ntorch==2.4.0\n")  # our own output
    (tmp_path / "requirements.txt").write_text("torch\n")
    (tmp_path / "setup.py").write_text('install_requires=["torch==2.1.0"]\n')
    pins = find_torch_pins(tmp_path)
    assert [p.source for p in pins] == ["requirements.txt:1", "setup.py:1"]
    advice = suggest_requirements(tmp_path)  # the pinned one wins over the bare name
    assert advice.pin.source == "setup.py:1" and advice.torch_npu_version == "2.1.0.post17"


def test_disagreeing_pins_are_noted(tmp_path):
    advice = _advice(tmp_path, {"requirements.txt": "torch==2.1.0\n",
                                "pyproject.toml": '[project]\nname="x"\ndependencies=["torch>=2.6"]\n'})
    assert advice.pin.source == "requirements.txt:1"
    assert any("disagree" in n and "torch>=2.6 (pyproject.toml:3)" in n for n in advice.notes)


def test_write_requirements_writes_refreshes_and_refuses(tmp_path):
    advice = _advice(tmp_path, {"requirements.txt": "torch==2.6.0\n"})
    path = write_requirements(tmp_path, advice)
    assert path == tmp_path / "requirements-npu.txt"
    text = path.read_text()
    assert text.startswith(HEADER) and text.endswith("torch==2.6.0\ntorch_npu==2.6.0.post5\n")
    assert "# For CANN 8.3.RC1 use torch_npu==2.6.0.post3 instead." in text
    assert "requirements.txt:1" in text and "CANN 8.5.0" in text
    assert all(line.startswith("#") for line in text.splitlines()[:-2])
    assert path.stat().st_mode & 0o777 != 0o600
    assert suggest_requirements(tmp_path).pin.source == "requirements.txt:1"  # our file is not read back

    (tmp_path / "requirements.txt").write_text("torch==2.1.0\n")  # refreshed when the pin moves
    write_requirements(tmp_path, suggest_requirements(tmp_path))
    assert path.read_text().endswith("torch==2.1.0\ntorch_npu==2.1.0.post17\n")

    theirs = tmp_path / "other" / "requirements-npu.txt"
    theirs.parent.mkdir()
    theirs.write_text("torch_npu==2.1.0\n")
    with pytest.raises(RequirementsConflict, match="not generated by npu-migrate"):
        write_requirements(tmp_path / "other", advice)
    assert theirs.read_text() == "torch_npu==2.1.0\n"
    custom = write_requirements(tmp_path, advice, tmp_path / "npu.txt")
    assert custom.read_text().endswith("torch_npu==2.6.0.post5\n")


def test_report_reads_the_requirements_of_the_root_when_not_given(tmp_path):
    (tmp_path / "pyproject.toml").write_text('[project]\nname = "x"\ndependencies = ["torch==2.13.0"]\n')
    summary = _run_files(tmp_path, {"m.py": MULTILINE})
    requirements = _section(_markdown(summary, tmp_path), "Requirements")
    assert "torch==2.13.0\ntorch_npu==2.13.0\n" in requirements
    assert "not among the pairs" in requirements
