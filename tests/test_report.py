"""The migration report (Markdown and HTML), the CSV files in Huawei's layout, and the torch_npu pin.

Every summary here comes from real engine runs: the golden inputs of fixtures/rules/ (each file on
its own, as tests/test_golden.py runs them), a copy of fixtures/projects/nanochat_mini, and small
files written into tmp_path whose names or contents exercise escaping.
"""

from __future__ import annotations

import csv
import re
import shutil
from collections import Counter
from dataclasses import dataclass
from html.parser import HTMLParser
from pathlib import Path
from typing import Optional

import pytest

from npu_migrate import __version__, catalogue
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
    UNSUPPORTED_API_HEADER,
    RequirementsConflict,
    md_inline,
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
    rows = {r[0]: r[1] for r in _table(_section(text, "Overview").split("\n### ")[0])}
    return rows[item]


def _markdown(summary: RunSummary, tmp_path: Path, name: str = "report.md") -> str:
    path = tmp_path / name
    write_report(summary, path)
    return path.read_text(encoding="utf-8")


# -- Markdown -------------------------------------------------------------------------------------


def test_overview_counts_match_the_summary(rules_summary, tmp_path):
    text = _markdown(rules_summary, tmp_path)
    assert _overview_value(text, "files scanned") == str(len(rules_summary.results))
    assert _overview_value(text, "files that would change") == str(len(rules_summary.changed))
    assert _overview_value(text, "files skipped") == str(sum(rules_summary.skipped.values()))
    assert _overview_value(text, "files with findings") == str(sum(1 for r in rules_summary.results if r.findings))
    assert _overview_value(text, "rewrites") == str(sum(rules_summary.rewrites.values()))
    assert _overview_value(text, "findings reported (not rewritten)") == str(sum(rules_summary.reported.values()))
    assert _overview_value(text, "tool") == f"npu-migrate {__version__}"
    assert f"version {__version__}" in _overview_value(text, "shim")
    assert _overview_value(text, "mode").startswith("dry run")

    def per_code(title: str) -> dict[str, int]:
        rows = _table(_subsection(text, title))
        for code, name, effort, _ in rows:
            rule = catalogue.rule(code.strip("`"))
            assert (name, effort) == (rule.name, rule.effort)
        return {code.strip("`"): int(count) for code, _, _, count in rows}

    assert per_code("Rewrites per code") == dict(rules_summary.rewrites)
    assert per_code("Findings per code (reported, not rewritten)") == dict(rules_summary.reported)
    assert rules_summary.reported, "the fixtures hold report-only constructs"


def test_effort_summary_counts_every_finding_once(rules_summary, tmp_path):
    text = _markdown(rules_summary, tmp_path)
    rows = {r[0]: r[1:4] for r in _table(_subsection(text, "Effort"))}
    findings = rules_summary.findings
    by_effort = Counter(catalogue.rule(f.code).effort for f in findings)
    fixed = Counter(catalogue.rule(f.code).effort for f in findings if f.fixable)
    assert set(rows) == {"auto", "review", "manual"}
    for effort, (total, rewritten, reported) in rows.items():
        assert int(total) == by_effort[effort]
        assert int(rewritten) == fixed[effort]
        assert int(reported) == by_effort[effort] - fixed[effort]
    assert sum(int(v[0]) for v in rows.values()) == len(findings)
    assert by_effort["manual"] > 0 and by_effort["review"] > 0


def test_per_file_table(rules_summary, tmp_path):
    text = _markdown(rules_summary, tmp_path)
    rows = {r[0].strip("`"): r for r in _table(_section(text, "Files"))}
    by_path = {r.relpath: r for r in rules_summary.results}
    listed = {p for p, r in by_path.items()
              if r.findings or r.changed or (r.skipped and r.skipped != "no CUDA trigger words")}
    assert set(rows) == listed
    for path, (_, status, rewrites, findings, auto, review, manual) in rows.items():
        result = by_path[path]
        efforts = Counter(catalogue.rule(f.code).effort for f in result.findings)
        assert int(rewrites) == sum(f.fixable for f in result.findings)
        assert int(findings) == sum(not f.fixable for f in result.findings)
        assert (int(auto), int(review), int(manual)) == (efforts["auto"], efforts["review"], efforts["manual"])
        if result.skipped:
            assert status == f"skipped: {result.skipped}"
        else:
            assert status == ("would change" if result.changed else "unchanged")


def test_every_manual_item_is_listed_with_its_guidance_once(rules_summary, tmp_path):
    text = _markdown(rules_summary, tmp_path)
    manual = _section(text, "Manual work")
    review = _section(text, "To review")
    for effort, section, other in (("manual", manual, review), ("review", review, manual)):
        chosen = [f for f in rules_summary.findings if catalogue.rule(f.code).effort == effort]
        assert chosen
        for f in chosen:
            location = f"`{f.path}:{f.line}:{f.column}`"
            status = f"rewritten ({f.severity}):" if f.fixable else f"reported ({f.severity}):"
            item = f"- {location} {status} {md_inline(rich(f.message))}"
            assert any(line.startswith(item) for line in section.splitlines()), item
        for code in {f.code for f in chosen}:
            group_findings = [f for f in chosen if f.code == code]
            title = f"`{code}` {catalogue.rule(code).name} ({len(group_findings)})"
            group = _subsection(section, title)
            assert f"### {title}" not in other
            guidance = md_inline(rich(catalogue.rule(code).guidance))
            assert text.count(guidance) == 1, code
            assert guidance in group
            items = [line for line in group.splitlines() if line.startswith("- ")]
            assert len(items) == len(group_findings)
            for f, line in zip(group_findings, items, strict=True):  # in file, line, column order
                assert line.startswith(f"- `{f.path}:{f.line}:{f.column}` ")


def test_markdown_escapes_tables_and_text(tmp_path):
    summary = _run_files(tmp_path, {"a|b.py": b"import torch\nx = torch.zeros(1).cuda()\n", "bad.py": BAD_SYNTAX})
    text = _markdown(summary, tmp_path)
    # the pipe in the file name stays inside its cell: every row has the header's cell count
    files = [line for line in _section(text, "Files").splitlines() if line.startswith("|")]
    assert all(len(_cells(line)) == 7 for line in files)
    assert "`a\\|b.py`" in files[2] or "`a\\|b.py`" in files[3]
    for line in text.splitlines():
        if line.startswith("|"):
            assert len(_cells(line)) in (2, 3, 4, 5, 7), line
    # a parse error's message lists tokens such as <, <<, &, |, *: escaped outside code spans
    (bad,) = [f for f in summary.findings if f.path == "bad.py"]
    assert "<" in bad.message and "&" in bad.message
    item = next(line for line in _section(text, "To review").splitlines() if "`bad.py:" in line)
    assert "\\<\\<" in item and "\\&" in item and "\\*\\*" in item
    assert re.search(r"(?<!\\)<", item) is None


# -- HTML -----------------------------------------------------------------------------------------


VOID = {"meta", "br", "hr", "img", "link", "input"}


class _Structure(HTMLParser):
    """Checks nesting, and collects tags, ids, table shapes and text."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.stack: list[str] = []
        self.errors: list[str] = []
        self.tags: Counter = Counter()
        self.ids: list[str] = []
        self.text: list[str] = []
        self.rows: list[list[str]] = []
        self.tables: list[list[list[str]]] = []
        self.li: list[str] = []
        self._cell: Optional[list[str]] = None

    def handle_starttag(self, tag, attrs):
        self.tags[tag] += 1
        self.ids += [v for k, v in attrs if k == "id"]
        if tag == "link" or (tag == "script"):
            self.errors.append(f"external or active content: <{tag}>")
        if tag not in VOID:
            self.stack.append(tag)
        if tag == "table":
            self.tables.append([])
        if tag == "tr":
            self.rows.append([])
            self.tables[-1].append(self.rows[-1])
        if tag in ("td", "th", "li"):
            self._cell = []

    def handle_endtag(self, tag):
        if not self.stack or self.stack[-1] != tag:
            self.errors.append(f"</{tag}> closes {self.stack[-1:] or 'nothing'}")
            return
        self.stack.pop()
        if tag in ("td", "th") and self._cell is not None:
            self.rows[-1].append("".join(self._cell))
            self._cell = None
        if tag == "li" and self._cell is not None:
            self.li.append("".join(self._cell))
            self._cell = None

    def handle_data(self, data):
        self.text.append(data)
        if self._cell is not None:
            self._cell.append(data)


def _parse(page: str) -> _Structure:
    parser = _Structure()
    parser.feed(page)
    parser.close()
    return parser


def test_html_is_well_formed_self_contained_and_escaped(tmp_path):
    project = tmp_path / "proj"
    project.mkdir()
    weird = 'odd<b>&"q".py'
    summary = _run_files(project, {weird: b"import torch\nx = torch.zeros(1).cuda()\n", "bad.py": BAD_SYNTAX,
                                   "m.py": MULTILINE})
    path = tmp_path / "report.html"
    write_report(summary, path)
    page = path.read_text(encoding="utf-8")
    assert page.startswith("<!DOCTYPE html>")
    doc = _parse(page)
    assert doc.errors == [] and doc.stack == []
    assert doc.tags["html"] == doc.tags["head"] == doc.tags["body"] == doc.tags["title"] == doc.tags["h1"] == 1
    assert doc.tags["style"] == 1 and "b" not in doc.tags  # the file name's <b> is text, not markup
    assert "http://" not in page.split("<body>")[0] and "src=" not in page
    for anchor in ("overview", "files", "manual", "review", "requirements", "errors"):
        assert anchor in doc.ids
    assert doc.tags["table"] == doc.tags["thead"] == doc.tags["tbody"]
    assert doc.tables and all(len({len(row) for row in table}) == 1 for table in doc.tables)
    assert all(table[0] and len(table) >= 2 for table in doc.tables)  # a header row and a body
    # the odd name and the parse error's message come back exactly after unescaping
    assert any(weird in cell for row in doc.rows for cell in row)
    (bad,) = [f for f in summary.findings if f.path == "bad.py"]
    assert any(bad.message in item for item in doc.li)
    assert "&lt;&lt;" in page and "&amp;" in page
    # same counts as the Markdown version
    cells = {row[0]: row[1] for row in doc.rows if len(row) == 2}
    assert cells["files scanned"] == "3"
    assert cells["rewrites"] == str(sum(summary.rewrites.values()))


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
    requirements = _section(text, "Requirements")
    assert "torch==2.1.0\ntorch_npu==2.1.0.post17\n" in requirements
    assert "CANN 8.3.RC1" in requirements and "`requirements.txt:2`" in requirements


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
        assert row["Guidance"] == catalogue.rule(f.code).guidance
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
