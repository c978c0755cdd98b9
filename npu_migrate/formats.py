"""Output formats of `npu-migrate check`: text, json, github, sarif, gitlab; and --statistics.

Every format lists the *new* findings of the run (those not accepted by the baseline, not outside
the diff, not suppressed). Paths are relative to the current directory when the file is under it
(as CI systems expect: GitHub and GitLab resolve them against the repository root), else absolute.
A notebook finding points at the line of the .ipynb file that holds it (what an editor opens),
with its cell, line and column within the cell in the message.

`check` proposes and does not write: a rewritable finding's message says what npu-migrate *can*
do ("can be rewritten to ..."), not what a run did (`proposal`). Each rule's severity
(rules/codes*.toml, through findings.py) sets the level of every format: SARIF `level`, GitHub
`::error`/`::warning`/`::notice`, GitLab `severity`. SARIF rules carry a `helpUri`: the rule's
page, docs/rules/<CODE>.md, under $NPU_MIGRATE_DOCS_URL when set (a URL ending in /), else as a
path relative to the npu-migrate repository (see docs/cli.md).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

from . import __version__, catalogue
from .baseline import Stale
from .findings import Finding

FORMATS = ("text", "json", "github", "sarif", "gitlab")
# A finding's severity (catalogue.SEVERITIES) in each format: text shows the word itself
SEVERITY_COLOURS = {"error": "red", "warning": "yellow", "info": "blue"}
SARIF_LEVELS = {"error": "error", "warning": "warning", "info": "note"}
GITHUB_COMMANDS = {"error": "error", "warning": "warning", "info": "notice"}
CODE_CLIMATE_SEVERITIES = {"error": "critical", "warning": "major", "info": "info"}
INFORMATION_URI = "https://pypi.org/project/npu-migrate/"
SARIF_SCHEMA = "https://json.schemastore.org/sarif-2.1.0.json"
DOCS_URL_VARIABLE = "NPU_MIGRATE_DOCS_URL"  # base of the rule pages' URL (docs/rules/ of a release)
RULE_PAGES = "docs/rules/"  # the pages, relative to the npu-migrate repository


def help_uri(code: str) -> str:
    """The URI of a rule's page: $NPU_MIGRATE_DOCS_URL + CODE.md, else docs/rules/CODE.md."""
    base = os.environ.get(DOCS_URL_VARIABLE, "").strip()
    if base:
        return f"{base if base.endswith('/') else base + '/'}{code}.md"
    return f"{RULE_PAGES}{code}.md"


# What a run did, as `check` says it (it writes nothing): "rewritten to" -> "can be rewritten to"
_PROPOSALS = (
    (re.compile(r"\b(rewritten|converted|added)\b(?= to\b| with\b|$| \()"), r"can be \1"),
)


def proposal(message: str) -> str:
    """A rewritable finding's message as a proposal: `.cuda()` moves to the accelerator: can be
    rewritten to `.to(npu_compat.device(...))`."""
    for pattern, replacement in _PROPOSALS:
        message = pattern.sub(replacement, message, count=1)
    return message


@dataclass(frozen=True)
class Item:
    finding: Finding
    path: str  # as shown: relative to the current directory, or absolute; forward slashes
    occurrence: int = 1  # 1-based, among findings with the same (path, code, source)
    file_line: Optional[int] = None  # notebooks: the line of the .ipynb text holding the cell line

    @property
    def line(self) -> int:
        """The line in the file itself (for annotations and code scanning): for a notebook
        finding, the JSON line that holds it; its column is then not a column of that line."""
        return self.file_line if self.file_line is not None else self.finding.line

    @property
    def column(self) -> Optional[int]:
        return None if self.finding.cell is not None else self.finding.column

    @property
    def end_column(self) -> Optional[int]:
        """One past the construct's last column, when it is one line of known text (its
        whitespace-normalised source, so an estimate where the code had runs of spaces)."""
        source = self.finding.source
        if self.column is None or not source or "\n" in source:
            return None
        return self.column + len(source)

    @property
    def message(self) -> str:
        """The message as `check` shows it: a proposal for a rewrite, the cell for a notebook."""
        f = self.finding
        text = proposal(f.message) if f.fixable else f.message
        if f.cell is not None:
            text += f" (cell {f.cell}, line {f.line}, column {f.column})"
        return text

    @property
    def where(self) -> str:
        """`path:line:col`; a notebook's `path:line` of its JSON file (`path` alone if unknown)."""
        if self.finding.cell is None:
            return f"{self.path}:{self.finding.line}:{self.finding.column}"
        return f"{self.path}:{self.file_line}" if self.file_line is not None else self.path

    @property
    def fingerprint(self) -> str:
        """Stable across unrelated edits: no line numbers (like the baseline's key)."""
        f = self.finding
        text = "\0".join((self.path, f.code, f.source or f.message, str(self.occurrence)))
        return hashlib.sha256(text.encode("utf-8")).hexdigest()[:32]


@dataclass
class Report:
    items: list[Item]  # the new findings, sorted
    files_checked: int = 0
    suppressed: int = 0
    baselined: int = 0
    outside_diff: int = 0
    stale: list[Stale] = field(default_factory=list)
    baseline: Optional[str] = None
    diff_base: Optional[str] = None
    errors: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    enabled: frozenset = frozenset()
    cwd: Optional[Path] = None
    fail_on_stale: bool = False  # stale baseline entries fail the check
    # files and scopes left as written or never run on an NPU host: {path, [start_line, end_line,]
    # reason}, as in migrate's JSON (render.skipped_entries)
    skipped: list[dict] = field(default_factory=list)


def render(fmt: str, report: Report, statistics: bool = False, color: bool = False,
           quiet: bool = False, fail_on_stale: bool = False) -> str:
    report.fail_on_stale = fail_on_stale
    if statistics:
        return statistics_json(report) if fmt == "json" else statistics_text(report)
    return {
        "text": lambda: text(report, color, quiet),
        "json": lambda: to_json(report),
        "github": lambda: github(report),
        "sarif": lambda: sarif(report),
        "gitlab": lambda: gitlab(report),
    }[fmt]()


# ------------------------------------------------------------------ text

def _style(s: str, color: bool, **kw) -> str:
    if not color:
        return s
    import click

    return click.style(s, **kw)


def _files(n: int) -> str:
    return f"{n} file" if n == 1 else f"{n} files"


def summary_lines(report: Report) -> list[str]:
    n = len(report.items)
    fixable = sum(1 for i in report.items if i.finding.fixable)
    extra = []
    if report.baselined:
        extra.append(f"{report.baselined} accepted by the baseline")
    if report.outside_diff:
        extra.append(f"{report.outside_diff} on lines unchanged since {report.diff_base}")
    if report.suppressed:
        extra.append(f"{report.suppressed} suppressed")
    tail = f" ({'; '.join(extra)})" if extra else ""
    lines = []
    if n:
        noun = "finding" if n == 1 else "findings"
        fix = f", {fixable} rewritable by `npu-migrate`" if fixable else ""
        info = sum(1 for i in report.items if i.finding.severity == "info")
        if info:  # review notes: listed, never failing the check
            fix += f", {info} of them info only (not failing)"
        lines.append(f"Found {n} new {noun}{fix} in {_files(report.files_checked)} checked{tail}.")
    elif report.stale and report.fail_on_stale:
        lines.append(f"No new findings in {_files(report.files_checked)}{tail}, but the check fails "
                     "on stale baseline entries (--fail-on-stale).")
    else:
        lines.append(f"All checks passed: no new findings in {_files(report.files_checked)}{tail}.")
    if report.stale:
        lines.append(
            f"{len(report.stale)} stale baseline entr{'y' if len(report.stale) == 1 else 'ies'} in "
            f"{report.baseline} (fixed or changed; refresh with --write-baseline):"
        )
        for s in report.stale:
            lines.append(f"  {s.path}: {s.code} `{s.source}` (x{s.missing})")
    return lines


def text(report: Report, color: bool = False, quiet: bool = False) -> str:
    """`path:line:col: CODE [*] message [severity]` per finding, then the summary; with `quiet`
    the summary alone."""
    out = []
    for item in [] if quiet else report.items:
        f = item.finding
        mark = "[*] " if f.fixable else ""
        path, _sep, place = item.where.partition(":")
        out.append(
            f"{_style(path, color, bold=True)}{_sep}{place}: "
            f"{_style(f.code, color, fg='red', bold=True)} {mark}{item.message} "
            f"{_style(f'[{f.severity}]', color, fg=SEVERITY_COLOURS[f.severity])}"
        )
    if out:
        out.append("")
    out.extend(summary_lines(report))
    if not quiet and any(i.finding.fixable for i in report.items):
        out.append("[*] can be rewritten: run `npu-migrate PATH` (or `npu-migrate check --fix`); "
                   "`npu-migrate rule CODE` explains a code.")
    return "\n".join(out) + "\n"


def statistics_rows(report: Report) -> list[dict]:
    counts = Counter(i.finding.code for i in report.items)
    rows = []
    for code, count in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])):
        rule = catalogue.rule(code)
        rows.append({"code": code, "name": rule.name, "count": count, "fixable": rule.fixable,
                     "severity": catalogue.severity(code), "message": rule.message})
    return rows


def statistics_text(report: Report) -> str:
    rows = statistics_rows(report)
    if not rows:
        return "\n".join(summary_lines(report)) + "\n"
    width = max(len(str(r["count"])) for r in rows)
    out = [
        f"{r['count']:>{width}}\t{r['code']}\t{'[*]' if r['fixable'] else '[ ]'} {r['name']}\t{r['severity']}"
        for r in rows
    ]
    return "\n".join(out + [""] + summary_lines(report)) + "\n"


def statistics_json(report: Report) -> str:
    return json.dumps(statistics_rows(report), indent=2) + "\n"


# ------------------------------------------------------------------ json

def to_json(report: Report) -> str:
    payload = {
        "tool": "npu-migrate",
        "version": __version__,
        "files_checked": report.files_checked,
        "findings": [
            {**i.finding.as_dict(), "path": i.path, "name": catalogue.rule(i.finding.code).name,
             "fingerprint": i.fingerprint}
            for i in report.items
        ],
        "suppressed": report.suppressed,
        "baselined": report.baselined,
        "outside_diff": report.outside_diff,
        "baseline": report.baseline,
        "diff_base": report.diff_base,
        "stale": [s.as_dict() for s in report.stale],
        "errors": report.errors,
        "skipped": report.skipped,
    }
    return json.dumps(payload, indent=2) + "\n"


# ------------------------------------------------------------------ github

def _gh_data(s: str) -> str:
    return s.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def _gh_property(s: str) -> str:
    return _gh_data(s).replace(":", "%3A").replace(",", "%2C")


def github(report: Report) -> str:
    """GitHub Actions workflow commands: one annotation per new finding, `::error`, `::warning` or
    `::notice` by its severity."""
    out = []
    for item in report.items:
        f = item.finding
        end = f"endLine={item.line},"
        if item.column is not None:
            end = f"col={item.column},{end}"
            if item.end_column is not None:
                end += f"endColumn={item.end_column - 1},"  # (GitHub's end column is inclusive)
        out.append(
            f"::{GITHUB_COMMANDS[f.severity]} file={_gh_property(item.path)},line={item.line},{end}"
            + f"title={_gh_property(f.code)}::{_gh_data(item.message)}"
        )
    for s in report.stale:
        out.append(f"::warning title=stale baseline entry::{_gh_data(f'{s.path}: {s.code} {s.source}')}")
    return "\n".join(out) + ("\n" if out else "")


# ------------------------------------------------------------------ sarif

def _level(severity: str) -> str:
    """SARIF's level for a severity: error, warning, note."""
    return SARIF_LEVELS.get(severity, "warning")


def _region(item: Item) -> dict:
    region = {"startLine": item.line, "endLine": item.line}
    if item.column is not None:
        region["startColumn"] = item.column
        if item.end_column is not None:
            region["endColumn"] = item.end_column  # (SARIF's end column is exclusive)
    return region


def sarif(report: Report) -> str:
    """SARIF 2.1.0: one run; the driver lists every enabled rule with its help text."""
    rules = catalogue.rules()
    codes = sorted(report.enabled or rules.keys())
    index = {code: n for n, code in enumerate(codes)}
    driver_rules = []
    for code in codes:
        r = rules[code]
        action = "rewrites" if r.fixable else "reports only"
        driver_rules.append({
            "id": code,
            "name": r.name,
            "shortDescription": {"text": r.message},
            "fullDescription": {"text": f"{r.message} ({action})"},
            "help": {
                "text": r.guidance,
                "markdown": f"**{code} {r.name}** ({action})\n\n{r.guidance}",
            },
            "helpUri": help_uri(code),
            "defaultConfiguration": {"level": _level(catalogue.severity(code))},
            "properties": {"tags": ["cuda", "npu", r.family], "fixable": r.fixable,
                           "severity": catalogue.severity(code)},
        })
    results = []
    for item in report.items:
        f = item.finding
        location: dict = {"uri": item.path}
        if not item.path.startswith("/"):
            location["uriBaseId"] = "%SRCROOT%"
        result = {
            "ruleId": f.code,
            "level": _level(f.severity),
            "message": {"text": item.message},
            "locations": [{
                "physicalLocation": {
                    "artifactLocation": location,
                    "region": _region(item),
                }
            }],
            "partialFingerprints": {"npuMigrate/v1": item.fingerprint},
            "properties": {"fixable": f.fixable, "severity": f.severity},
        }
        if f.code in index:
            result["ruleIndex"] = index[f.code]
        results.append(result)
    run: dict = {
        "tool": {"driver": {
            "name": "npu-migrate",
            "version": __version__,
            "semanticVersion": __version__,
            "informationUri": INFORMATION_URI,
            "rules": driver_rules,
        }},
        "columnKind": "unicodeCodePoints",
        "results": results,
    }
    cwd = report.cwd or Path.cwd()
    run["originalUriBaseIds"] = {"%SRCROOT%": {"uri": cwd.absolute().as_uri() + "/"}}
    if report.errors:
        run["invocations"] = [{
            "executionSuccessful": False,
            "toolExecutionNotifications": [{"level": "error", "message": {"text": e}} for e in report.errors],
        }]
    else:
        run["invocations"] = [{"executionSuccessful": True}]
    return json.dumps({"$schema": SARIF_SCHEMA, "version": "2.1.0", "runs": [run]}, indent=2) + "\n"


# ------------------------------------------------------------------ gitlab

def gitlab(report: Report) -> str:
    """GitLab code quality report (a JSON array, the Code Climate subset GitLab reads)."""
    issues = []
    for item in report.items:
        f = item.finding
        issues.append({
            "type": "issue",
            "check_name": f.code,
            "description": f"{f.code} {item.message}",
            "categories": ["Compatibility"],
            "severity": CODE_CLIMATE_SEVERITIES.get(f.severity, "major"),
            "fingerprint": item.fingerprint,
            "location": {"path": item.path, "lines": {"begin": item.line, "end": item.line}},
        })
    return json.dumps(issues, indent=2) + "\n"
