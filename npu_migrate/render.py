"""Everything a run prints: the diff, the findings, the summary, the JSON report, the rule list."""

from __future__ import annotations

import difflib
import json
from collections import Counter
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Iterable

from . import __version__, catalogue
from .model import FileResult

if TYPE_CHECKING:  # rich is imported where it prints: `check` uses this module's plain helpers only
    from rich.console import Console


@dataclass
class RunSummary:
    root: str
    dry_run: bool
    results: list[FileResult]
    shim: str = ""
    errors: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)  # things the user must do by hand
    # packaging files changed so that the wheel ships the shim (not scanned: no findings)
    packaging: list[FileResult] = field(default_factory=list)

    @property
    def findings(self):
        return sorted(f for r in self.results for f in r.findings)

    @property
    def rewrites(self) -> Counter:
        return Counter(f.code for f in self.findings if f.fixable)

    @property
    def reported(self) -> Counter:
        return Counter(f.code for f in self.findings if not f.fixable)

    @property
    def changed(self) -> list[FileResult]:
        return sorted((r for r in self.results + self.packaging if r.changed), key=lambda r: r.relpath)

    @property
    def skipped(self) -> Counter:
        return Counter(r.skipped for r in self.results if r.skipped)

    @property
    def skipped_named(self) -> list[dict]:
        """Every file and scope left as its authors wrote it (see `skipped_entries`)."""
        return skipped_entries(self.results)

    def exit_code(self) -> int:
        if self.errors:
            return 2
        # Info findings (review notes, e.g. CUDA references inside a platform-aware scope) are
        # shown but never fail a run: nothing there needs to change.
        return 1 if any(not f.fixable and f.severity != "info" for f in self.findings) else 0


# Files skipped because there is nothing in them to migrate: counted, not named.
NOTHING_TO_DO = frozenset({"no CUDA trigger words", "not a script, config or CUDA source"})


def skipped_entries(results: Iterable[FileResult]) -> list[dict]:
    """The files and scopes left as their authors wrote them, in path order: a whole file
    (`{"path", "reason"}`: it imports torch_npu, has a skip-file comment, ...) or a platform-aware
    scope inside a migrated file (`{"path", "start_line", "end_line", "reason"}`, lines 1-based and
    inclusive). Files with nothing to migrate (NOTHING_TO_DO) are only counted."""
    entries: list[dict] = []
    for result in sorted(results, key=lambda r: r.relpath):
        if result.skipped and result.skipped not in NOTHING_TO_DO:
            entries.append({"path": result.relpath, "reason": result.skipped})
        for first, last, reason in result.skipped_scopes:
            entries.append({"path": result.relpath, "start_line": first, "end_line": last, "reason": reason})
    return entries


def skipped_line(entry: dict) -> str:
    """`path: reason` for a file, `path:10-18: reason` for a scope."""
    if "start_line" not in entry:
        return f"{entry['path']}: {entry['reason']}"
    first, last = entry["start_line"], entry["end_line"]
    lines = str(first) if first == last else f"{first}-{last}"
    return f"{entry['path']}:{lines}: {entry['reason']}"


def skipped_summary(entries: list[dict], listed: bool) -> str:
    """The summary line: how many files and scopes were left as written or named as never run
    on an NPU host (moot.py)."""
    files = sum(1 for e in entries if "start_line" not in e)
    scopes = len(entries) - files
    text = (f"left as written: {files} skipped file{'s' if files != 1 else ''} and {scopes} "
            f"skipped scope{'s' if scopes != 1 else ''} "
            "(platform-aware code, type-checking blocks, code an NPU host never runs, runs as written "
            "or needs no port work for)")
    return text if listed else text + " (--show-skipped lists them)"


def print_skipped(console: Console, summary: RunSummary, show: bool) -> None:
    """The summary line about skipped files and scopes, and with `show` the list itself."""
    entries = summary.skipped_named
    if not entries:
        return
    if show:
        for entry in entries:
            console.print(f"skipped {skipped_line(entry)}", markup=False, highlight=False)
    console.print(skipped_summary(entries, show), markup=False, highlight=False)


def unified_diff(result: FileResult) -> str:
    encoding = result.encoding or "utf-8"
    old = (result.original or b"").decode(encoding, "replace")
    new = (result.new or b"").decode(encoding, "replace")
    lines = difflib.unified_diff(
        old.splitlines(keepends=True),
        new.splitlines(keepends=True),
        fromfile=f"a/{result.relpath}",
        tofile=f"b/{result.relpath}",
    )
    out = []
    for line in lines:
        out.append(line if line.endswith("\n") else line + "\n\\ No newline at end of file\n")
    return "".join(out)


def print_diffs(console: Console, results: Iterable[FileResult], color: bool) -> None:
    for result in results:
        if not result.changed:
            continue
        text = unified_diff(result)
        if color:
            from rich.syntax import Syntax

            console.print(Syntax(text, "diff", theme="ansi_dark", background_color="default"))
        else:
            console.out(text, end="", highlight=False)


def print_findings(console: Console, summary: RunSummary) -> None:
    """`path:line:col: CODE message [severity]`; in a notebook `path:cell_N:line:col: ...` (N: the
    cell's 1-based index among all cells, line and column within the cell)."""
    colours = {"error": "red", "warning": "yellow", "info": "blue"}
    for f in summary.findings:
        if f.fixable:
            continue
        console.print(
            f"[bold]{f.path}[/]:{f.location}: [red]{f.code}[/] {f.message} "
            f"[{colours.get(f.severity, 'yellow')}]\\[{f.severity}][/]",
            highlight=False,
        )


def print_summary(console: Console, summary: RunSummary) -> None:
    from rich.table import Table

    table = Table(title=f"npu-migrate {'--dry-run ' if summary.dry_run else ''}summary", show_header=True)
    table.add_column("item")
    table.add_column("count", justify="right")
    table.add_row("files scanned", str(len(summary.results)))
    verb = "would change" if summary.dry_run else "changed"
    table.add_row(f"files {verb}", str(len(summary.changed)))
    for reason, count in sorted(summary.skipped.items()):
        table.add_row(f"files skipped: {reason}", str(count))
    for code, count in sorted(summary.rewrites.items()):
        table.add_row(f"rewrites {code} {catalogue.rule(code).name}", str(count))
    for code, count in sorted(summary.reported.items()):
        table.add_row(f"[red]findings {code} {catalogue.rule(code).name}[/]", str(count))
    console.print(table)
    if summary.shim:
        console.print(summary.shim, highlight=False)
    for warning in summary.warnings:
        console.print(f"warning: {warning}", markup=False, highlight=False)
    for error in summary.errors:
        console.print(f"[red]error:[/] {error}", highlight=False)


def json_report(summary: RunSummary) -> str:
    payload = {
        "tool": "npu-migrate",
        "version": __version__,
        "root": summary.root,
        "dry_run": summary.dry_run,
        "files_scanned": len(summary.results),
        "files_changed": len(summary.changed),
        "files_skipped": dict(sorted(summary.skipped.items())),
        # every file and platform-aware scope left as its authors wrote it (skipped_entries)
        "skipped": summary.skipped_named,
        "changed_files": [r.relpath for r in summary.changed],
        "rewrites_by_code": dict(sorted(summary.rewrites.items())),
        "findings_by_code": dict(sorted(summary.reported.items())),
        "findings": [f.as_dict() for f in summary.findings],
        "shim": summary.shim,
        "warnings": summary.warnings,
        "errors": summary.errors,
    }
    return json.dumps(payload, indent=2, sort_keys=False)


def rules_text(fmt: str = "text") -> str:
    """The rule list, from rules/codes.toml; the README's rules section is this in markdown."""
    rules = catalogue.rules()
    if fmt == "json":
        return json.dumps(
            [
                {"code": r.code, "name": r.name, "fixable": r.fixable, "family": r.family, "effort": r.effort,
                 "severity": catalogue.severity(r.code), "message": r.message, "guidance": r.guidance}
                for r in rules.values()
            ],
            indent=2,
        )
    if fmt == "markdown":
        lines = ["| code | name | action | severity | effort | summary |", "|---|---|---|---|---|---|"]
        for r in rules.values():
            action = "rewrites" if r.fixable else "reports"
            message = r.message.replace("|", "\\|")
            lines.append(f"| {r.code} | {r.name} | {action} | {catalogue.severity(r.code)} | {r.effort} | {message} |")
        return "\n".join(lines) + "\n"
    lines = []
    for r in rules.values():
        action = "rewrites" if r.fixable else "reports "
        lines.append(f"{r.code}  {action}  {catalogue.severity(r.code):<7}  {r.name:<30} {r.message}")
    return "\n".join(lines) + "\n"
