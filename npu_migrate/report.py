"""The migration report: what a run rewrote, what is left to port by hand, and which torch_npu to install.

`write_report` writes Markdown, or one self-contained HTML page when the name ends in .html/.htm;
both come from the same document model, so they say the same thing. `write_csv` writes the two
CSV files of Huawei's migration tool (msFmkTransplt, MindStudio's PyTorch GPU2Ascend), in its
column layout, so Ascend users can put the two tools side by side. Everything is sorted and holds
no date: the same run gives the same bytes.
"""

from __future__ import annotations

import csv
import html
import io
import os
import re
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Optional, Union

from . import __version__, catalogue
from .catalogue import Rule
from .findings import Finding
from .model import FileResult
from .pins import (  # noqa: F401  (re-exported: the CLI calls them from here)
    REQUIREMENTS_NAME,
    TABLE_SOURCE,
    RequirementsAdvice,
    RequirementsConflict,
    suggest_requirements,
    write_requirements,
)
from .render import RunSummary
from .source import WriteError, output_problem, write_atomic

EFFORTS = ("auto", "review", "manual")
EFFORT_MEANING = {
    "auto": "rewritten by npu-migrate; nothing to do",
    "review": "check the decision: a rewrite worth a look, or a report with a likely fix",
    "manual": "port by hand on an NPU machine",
}
NO_CHANGE_REASON = "no CUDA trigger words"

# The CSV layout of Huawei's msFmkTransplt ("PyTorch GPU2Ascend" in MindStudio): transfer/transplant.py
# of Ascend/mstt (msfmktransplt/src/ms_fmk_transplt) writes change_list.csv with
# ('File', 'Start Line', 'End Line', 'Operation Type', 'Message') and unsupported_api.csv with
# ('File', 'Start Line', 'End Line', 'OP', 'Tips'); its Operation Type values are the names of its
# OperatorType enum (INSERT, MODIFY, DELETE, UNSUPPORTED). Our own columns come after theirs.
CHANGE_LIST = "change_list.csv"
UNSUPPORTED_API = "unsupported_api.csv"
CHANGE_LIST_HEADER = ("File", "Start Line", "End Line", "Operation Type", "Message")
UNSUPPORTED_API_HEADER = ("File", "Start Line", "End Line", "OP", "Tips")
EXTRA_HEADER = ("Column", "Code", "Rule", "Effort", "Cell", "Guidance", "Severity")
CSV_LINE_END = "\n"  # as Huawei's tool writes on Linux (pandas' default); UTF-8 without BOM


# -- the document model: inline text with code spans, and a few kinds of block -------------------

Inline = tuple[tuple[str, bool], ...]  # (text, is code)


def plain(text: object) -> Inline:
    return ((str(text), False),)


def code(text: object) -> Inline:
    return ((str(text), True),)


def rich(text: str) -> Inline:
    """A catalogue text: `backticked` parts are code, the rest plain."""
    parts = re.split(r"(`[^`\n]+`)", text)
    return tuple(
        (p[1:-1], True) if p.startswith("`") and p.endswith("`") and len(p) > 1 else (p, False)
        for p in parts if p
    )


def join(*parts: Inline) -> Inline:
    return tuple(segment for part in parts for segment in part)


@dataclass(frozen=True)
class Heading:
    level: int
    text: Inline
    anchor: str = ""


@dataclass(frozen=True)
class Para:
    text: Inline


@dataclass(frozen=True)
class Table:
    headers: tuple[str, ...]
    rows: tuple[tuple[Inline, ...], ...]
    numeric: frozenset = frozenset()  # indexes of right-aligned columns


@dataclass(frozen=True)
class Items:
    items: tuple[Inline, ...]


@dataclass(frozen=True)
class Pre:
    text: str


Block = Union[Heading, Para, Table, Items, Pre]


# -- what the report says -------------------------------------------------------------------------


def _rule(code_: str, fixable: bool = False) -> Rule:
    """The catalogue entry; a code no table defines still gets a row (effort review)."""
    found = catalogue.rules().get(code_)
    if found is not None:
        return found
    return Rule(code_, "unknown-code", fixable, "", "No guidance: this code is not in the catalogue.", "review")


def _effort(finding: Finding) -> str:
    return _rule(finding.code, finding.fixable).effort


def _location(finding: Finding) -> str:
    """`path:line:col`, or `path:cell_N:line:col` in a notebook (as the console output says it)."""
    cell = _cell(finding)
    where = f"{finding.line}:{finding.column}"
    return f"{finding.path}:{where}" if cell is None else f"{finding.path}:cell_{cell}:{where}"


def _cell(finding: Finding) -> Optional[object]:
    return getattr(finding, "cell", None)


def _status(result: FileResult, dry_run: bool) -> str:
    if result.skipped:
        return f"skipped: {result.skipped}"
    if result.changed:
        return "would change" if dry_run else "changed"
    return "unchanged"


def _count_rows(counts: Counter, fixable: bool) -> tuple[tuple[Inline, ...], ...]:
    rows = []
    for code_, count in sorted(counts.items()):
        rule = _rule(code_, fixable)
        rows.append((code(code_), plain(rule.name), plain(rule.effort), plain(count)))
    return tuple(rows)


def _overview(summary: RunSummary) -> list[Block]:
    findings = summary.findings
    skipped = sum(summary.skipped.values())
    with_findings = sum(1 for r in summary.results if r.findings)
    rewrites = sum(summary.rewrites.values())
    reported = sum(summary.reported.values())
    changed_label = "files that would change" if summary.dry_run else "files changed"
    rows: list[tuple[Inline, ...]] = [
        (plain("root"), code(summary.root)),
        (plain("mode"), plain("dry run: nothing was written" if summary.dry_run else "changes written")),
        (plain("tool"), plain(f"npu-migrate {__version__}")),
        (plain("shim"), join(plain(f"version {__version__}"),
                             plain(f"; {summary.shim}" if summary.shim else "; not touched by this run"))),
        (plain("files scanned"), plain(len(summary.results))),
        (plain(changed_label), plain(len(summary.changed))),
        (plain("files skipped"), plain(skipped)),
    ]
    rows += [(plain(f"skipped: {reason}"), plain(n)) for reason, n in sorted(summary.skipped.items())]
    rows += [
        (plain("files with findings"), plain(with_findings)),
        (plain("rewrites"), plain(rewrites)),
        (plain("findings reported (not rewritten)"), plain(reported)),
        (plain("constructs left alone by suppression comments"), plain(sum(r.suppressed for r in summary.results))),
        (plain("errors"), plain(len(summary.errors))),
    ]
    blocks: list[Block] = [Heading(2, plain("Overview"), "overview"), Table(("item", "value"), tuple(rows))]
    blocks.append(Heading(3, plain("Rewrites per code"), "rewrites-per-code"))
    blocks.append(_table_or_none(("code", "rule", "effort", "count"), _count_rows(summary.rewrites, True), {3}))
    blocks.append(Heading(3, plain("Findings per code (reported, not rewritten)"), "findings-per-code"))
    blocks.append(_table_or_none(("code", "rule", "effort", "count"), _count_rows(summary.reported, False), {3}))
    blocks.append(Heading(3, plain("Effort"), "effort"))
    blocks.append(Table(("effort", "findings", "rewritten", "reported", "what it means"),
                        _effort_rows(findings), frozenset({1, 2, 3})))
    blocks.append(Heading(3, plain("Severity"), "severity"))
    blocks.append(Table(("severity", "findings", "rewritten", "reported", "what it means"),
                        _severity_rows(findings), frozenset({1, 2, 3})))
    return blocks


SEVERITY_MEANING = {
    "error": "fails on an NPU host as written",
    "warning": "runs on an NPU host but behaves differently",
    "info": "runs on an NPU host; worth a review",
}


def _severity_rows(findings: list[Finding]) -> tuple[tuple[Inline, ...], ...]:
    total = Counter(f.severity for f in findings)
    fixed = Counter(f.severity for f in findings if f.fixable)
    return tuple(
        (plain(s), plain(total[s]), plain(fixed[s]), plain(total[s] - fixed[s]), plain(SEVERITY_MEANING[s]))
        for s in catalogue.SEVERITIES
    )


def _effort_rows(findings: list[Finding]) -> tuple[tuple[Inline, ...], ...]:
    total = Counter(_effort(f) for f in findings)
    fixed = Counter(_effort(f) for f in findings if f.fixable)
    return tuple(
        (plain(e), plain(total[e]), plain(fixed[e]), plain(total[e] - fixed[e]), plain(EFFORT_MEANING[e]))
        for e in EFFORTS
    )


def _table_or_none(headers, rows, numeric=()) -> Block:
    return Table(tuple(headers), rows, frozenset(numeric)) if rows else Para(plain("None."))


def _files(summary: RunSummary) -> list[Block]:
    rows = []
    quiet = 0
    for result in sorted(summary.results, key=lambda r: r.relpath):
        if not result.findings and not result.changed and result.skipped in (None, NO_CHANGE_REASON):
            quiet += 1
            continue
        efforts = Counter(_effort(f) for f in result.findings)
        rewrites = sum(1 for f in result.findings if f.fixable)
        rows.append((
            code(result.relpath), plain(_status(result, summary.dry_run)), plain(rewrites),
            plain(len(result.findings) - rewrites), *(plain(efforts[e]) for e in EFFORTS),
        ))
    blocks: list[Block] = [
        Heading(2, plain("Files"), "files"),
        _table_or_none(("file", "status", "rewrites", "findings", *EFFORTS), tuple(rows), {2, 3, 4, 5, 6}),
    ]
    if quiet:
        blocks.append(Para(plain(f"{quiet} other scanned file{'s' if quiet != 1 else ''} "
                                 f"{'hold' if quiet != 1 else 'holds'} no CUDA-only code.")))
    return blocks


def _item(finding: Finding) -> Inline:
    parts = [code(_location(finding))]
    verb = "rewritten" if finding.fixable else "reported"
    parts.append(plain(f" {verb} ({finding.severity}): "))
    parts.append(rich(finding.message))
    if finding.source:
        parts.append(join(plain(" — "), code(finding.source)))
    return join(*parts)


def _work(summary: RunSummary, effort: str, title: str, anchor: str) -> list[Block]:
    chosen = [f for f in summary.findings if _effort(f) == effort]
    blocks: list[Block] = [Heading(2, plain(title), anchor)]
    if not chosen:
        return blocks + [Para(plain("None."))]
    noun = "finding" if len(chosen) == 1 else "findings"
    blocks.append(Para(plain(f"{len(chosen)} {noun}: {EFFORT_MEANING[effort]}. "
                             f"The guidance is given once per code.")))
    for code_ in sorted({f.code for f in chosen}):
        group = [f for f in chosen if f.code == code_]
        rule = _rule(code_, group[0].fixable)
        blocks.append(Heading(3, join(code(code_), plain(f" {rule.name} ({len(group)})")),
                              f"{anchor}-{code_.lower()}"))
        if rule.guidance:
            blocks.append(Para(rich(rule.guidance)))
        blocks.append(Items(tuple(_item(f) for f in group)))
    return blocks


def _requirements(advice: Optional[RequirementsAdvice]) -> list[Block]:
    blocks: list[Block] = [Heading(2, plain("Requirements"), "requirements")]
    if advice is None:
        return blocks + [Para(plain("Not computed: the run's root is not a folder."))]
    if advice.pin is None:
        blocks.append(Para(plain("No torch requirement was found in requirements*.txt, pyproject.toml, "
                                 "setup.cfg, setup.py or environment.yml.")))
    else:
        blocks.append(Para(join(plain("torch requirement followed: "), code(advice.pin.requirement),
                                plain(" in "), code(advice.pin.source), plain("."))))
    blocks.append(Para(plain("Suggested pins (torch_npu is built for one exact torch version):")))
    blocks.append(Pre("\n".join(advice.requirement_lines())))
    if advice.pair is not None:
        p = advice.pair
        blocks.append(Para(join(
            plain(f"torch {p.torch} with torch_npu {p.torch_npu} needs CANN {p.cann} (source branch "),
            code(p.branch), plain(f"), from {TABLE_SOURCE}."),
        )))
    if advice.alternatives:
        blocks.append(Para(plain("For an older CANN installation use the torch_npu release built for it:")))
        rows = tuple((code(f"torch_npu=={a.torch_npu}"), plain(f"CANN {a.cann}"), code(a.branch))
                     for a in advice.alternatives)
        blocks.append(Table(("pin", "CANN", "branch"), rows))
    if advice.notes:
        blocks.append(Items(tuple(plain(n) for n in advice.notes)))
    blocks.append(Para(join(code("--emit-requirements"), plain(" writes these pins to "),
                            code(REQUIREMENTS_NAME), plain(" with the reasons as comments."))))
    return blocks


def _errors(summary: RunSummary) -> list[Block]:
    blocks: list[Block] = [Heading(2, plain("Errors"), "errors")]
    if not summary.errors:
        return blocks + [Para(plain("None."))]
    return blocks + [Items(tuple(plain(e) for e in summary.errors))]


def document(summary: RunSummary, requirements: Optional[RequirementsAdvice]) -> list[Block]:
    """The report as blocks, in order."""
    mode = "dry run, nothing written" if summary.dry_run else "changes written"
    blocks: list[Block] = [
        Heading(1, plain("npu-migrate migration report")),
        Para(join(code(summary.root), plain(f" ({mode}); npu-migrate {__version__}, shim version {__version__}."))),
    ]
    blocks += _overview(summary)
    blocks += _files(summary)
    blocks += _work(summary, "manual", "Manual work", "manual")
    blocks += _work(summary, "review", "To review", "review")
    blocks += _requirements(requirements)
    blocks += _errors(summary)
    blocks.append(Para(plain(f"Generated by npu-migrate {__version__} (shim version {__version__}).")))
    return blocks


# -- Markdown -------------------------------------------------------------------------------------

_MD_SPECIAL = re.compile(r"([\\`*<>&])")


def _md_code(text: str, in_table: bool) -> str:
    text = text.replace("\r", " ").replace("\n", " ")
    longest = max((len(run) for run in re.findall(r"`+", text)), default=0)
    fence = "`" * (longest + 1)
    pad = " " if text.startswith("`") or text.endswith("`") or not text.strip() else ""
    body = text.replace("|", "\\|") if in_table else text
    return f"{fence}{pad}{body}{pad}{fence}"


def _md_text(text: str, in_table: bool) -> str:
    text = _MD_SPECIAL.sub(r"\\\1", text.replace("\r", " ").replace("\n", " "))
    return text.replace("|", "\\|") if in_table else text


def md_inline(inline: Inline, in_table: bool = False) -> str:
    return "".join(_md_code(t, in_table) if is_code else _md_text(t, in_table) for t, is_code in inline)


def _md_block(block: Block) -> str:
    if isinstance(block, Heading):
        return "#" * block.level + " " + md_inline(block.text)
    if isinstance(block, Para):
        return md_inline(block.text)
    if isinstance(block, Items):
        return "\n".join("- " + md_inline(item) for item in block.items)
    if isinstance(block, Pre):
        longest = max((len(run) for run in re.findall(r"`{3,}", block.text)), default=2)
        fence = "`" * (longest + 1)
        return f"{fence}text\n{block.text}\n{fence}"
    head = "| " + " | ".join(_md_text(h, True) for h in block.headers) + " |"
    rule = "|" + "|".join("---:" if i in block.numeric else "---" for i in range(len(block.headers))) + "|"
    rows = ["| " + " | ".join(md_inline(cell, True) for cell in row) + " |" for row in block.rows]
    return "\n".join([head, rule, *rows])


def markdown(blocks: Iterable[Block]) -> str:
    return "\n\n".join(_md_block(b) for b in blocks) + "\n"


# -- HTML -----------------------------------------------------------------------------------------

_CSS = """\
body{font:15px/1.5 system-ui,-apple-system,"Segoe UI",sans-serif;margin:2rem auto;max-width:72rem;
  padding:0 1rem;color:#1f2328}
h1,h2,h3{line-height:1.25}h2{border-bottom:1px solid #d0d7de;padding-bottom:.3rem;margin-top:2rem}
table{border-collapse:collapse;margin:.5rem 0}
th,td{border:1px solid #d0d7de;padding:.25rem .6rem;text-align:left;vertical-align:top}
th{background:#f6f8fa}td.num{text-align:right;font-variant-numeric:tabular-nums}
code,pre{font:13px ui-monospace,SFMono-Regular,Menlo,Consolas,monospace;background:#f6f8fa;border-radius:4px}
code{padding:.1rem .3rem}pre{padding:.75rem;overflow:auto}li{margin:.2rem 0}"""


def html_inline(inline: Inline) -> str:
    return "".join(
        f"<code>{html.escape(t)}</code>" if is_code else html.escape(t) for t, is_code in inline
    )


def _html_block(block: Block) -> str:
    if isinstance(block, Heading):
        anchor = f' id="{html.escape(block.anchor)}"' if block.anchor else ""
        return f"<h{block.level}{anchor}>{html_inline(block.text)}</h{block.level}>"
    if isinstance(block, Para):
        return f"<p>{html_inline(block.text)}</p>"
    if isinstance(block, Items):
        return "<ul>\n" + "\n".join(f"<li>{html_inline(i)}</li>" for i in block.items) + "\n</ul>"
    if isinstance(block, Pre):
        return f"<pre>{html.escape(block.text)}</pre>"
    head = "".join(f"<th>{html.escape(h)}</th>" for h in block.headers)
    rows = []
    for row in block.rows:
        cells = "".join(
            f'<td class="num">{html_inline(c)}</td>' if i in block.numeric else f"<td>{html_inline(c)}</td>"
            for i, c in enumerate(row)
        )
        rows.append(f"<tr>{cells}</tr>")
    return f"<table>\n<thead><tr>{head}</tr></thead>\n<tbody>\n" + "\n".join(rows) + "\n</tbody>\n</table>"


def html_page(blocks: list[Block], title: str) -> str:
    body = "\n".join(_html_block(b) for b in blocks)
    return (
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
        "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n"
        f"<title>{html.escape(title)}</title>\n<style>\n{_CSS}\n</style>\n</head>\n"
        f"<body>\n<main>\n{body}\n</main>\n</body>\n</html>\n"
    )


# -- writing --------------------------------------------------------------------------------------


def _write(path: Path, data: bytes) -> None:
    """Replace a regular file, or create one, in a folder that exists: no folder is created, and
    a FIFO, a device or a link at `path` is refused (WriteError) without being opened."""
    problem = output_problem(path)
    if problem:
        raise WriteError(problem)
    new = not path.exists()
    write_atomic(path, data)
    if new:  # mkstemp made it 0600; a report gets the usual permissions
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(path, 0o666 & ~umask)


def render_report(summary: RunSummary, html_format: bool,
                  requirements: Optional[RequirementsAdvice] = None) -> str:
    blocks = document(summary, requirements)
    if html_format:
        return html_page(blocks, f"npu-migrate report: {summary.root}")
    return markdown(blocks)


def write_report(summary: RunSummary, path: Path, requirements: Optional[RequirementsAdvice] = None) -> None:
    """Markdown, or HTML when the name ends in .html/.htm. Without `requirements`, they are read
    from the run's root (when it is a folder)."""
    path = Path(path)
    if requirements is None and Path(summary.root).is_dir():
        requirements = suggest_requirements(Path(summary.root))
    html_format = path.suffix.lower() in (".html", ".htm")
    _write(path, render_report(summary, html_format, requirements).encode("utf-8"))


# -- CSV (Huawei's layout) --------------------------------------------------------------------------


def end_line(text: str, finding: Finding) -> int:
    """The last line of the construct a finding points at, when its recorded source text can be
    walked from the finding's position in `text`; else the finding's own line."""
    source = finding.source
    if not source or (len(source) >= 200 and source.endswith("...")) or _cell(finding) is not None:
        return finding.line
    wanted = "".join(source.split())
    starts = [0] + [m.end() for m in re.finditer(r"\r\n|\r|\n", text)]
    if not wanted or not 1 <= finding.line <= len(starts):
        return finding.line
    index = starts[finding.line - 1] + finding.column - 1
    line, matched = finding.line, 0
    while index < len(text):
        ch = text[index]
        if ch == "\n" or (ch == "\r" and text[index + 1:index + 2] != "\n"):
            line += 1
        elif not ch.isspace():
            if ch != wanted[matched]:
                return finding.line
            matched += 1
            if matched == len(wanted):
                return line
        index += 1
    return finding.line


def _decoded(result: FileResult) -> str:
    text = (result.original or b"").decode(result.encoding or "utf-8", "replace")
    return text[1:] if text.startswith("\ufeff") else text


def _csv_safe(value: object) -> object:
    """Spreadsheets run a cell that starts with = + - @ as a formula: quote such text cells."""
    if isinstance(value, str) and value[:1] in ("=", "+", "-", "@", "\t", "\r"):
        return "'" + value
    return value


def _csv_bytes(header: tuple[str, ...], rows: list[tuple]) -> bytes:
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator=CSV_LINE_END)
    writer.writerow(header + EXTRA_HEADER)
    for row in rows:
        writer.writerow([_csv_safe(v) for v in row])
    return buffer.getvalue().encode("utf-8")


def csv_rows(summary: RunSummary) -> tuple[list[tuple], list[tuple]]:
    """(change_list rows, unsupported_api rows), sorted by file, line, column, code."""
    texts = {r.relpath: r for r in summary.results}
    decoded: dict[str, str] = {}
    changes, unsupported = [], []
    for f in summary.findings:
        result = texts.get(f.path)
        if result is not None and f.path not in decoded:
            decoded[f.path] = _decoded(result)
        last = end_line(decoded[f.path], f) if f.path in decoded else f.line
        rule = _rule(f.code, f.fixable)
        cell = _cell(f)
        extra = (f.column, f.code, rule.name, rule.effort, "" if cell is None else cell, rule.guidance, f.severity)
        if f.fixable:
            changes.append((f.path, f.line, last, "MODIFY", f.message, *extra))
        else:
            unsupported.append((f.path, f.line, last, f.source or rule.name, f.message, *extra))
    return changes, unsupported


def csv_problem(directory: Path) -> str | None:
    """Why the CSV files cannot go to `directory` (None: they can). The folder itself is created
    when its parent exists; nothing further up is."""
    directory = Path(directory)
    if directory.is_symlink() or (directory.exists() and not directory.is_dir()):
        return f"{directory}: not a folder"
    if not directory.exists() and not directory.parent.is_dir():
        return f"{directory}: the folder {directory.parent} does not exist; create it first"
    if directory.is_dir():
        for name in (CHANGE_LIST, UNSUPPORTED_API):
            problem = output_problem(directory / name)
            if problem:
                return problem
    return None


def write_csv(summary: RunSummary, directory: Path) -> list[Path]:
    """change_list.csv (rewritten constructs) and unsupported_api.csv (reported ones) in `directory`
    (created when its parent folder exists; WriteError otherwise)."""
    directory = Path(directory)
    problem = csv_problem(directory)
    if problem:
        raise WriteError(problem)
    if not directory.is_dir():
        directory.mkdir()
    changes, unsupported = csv_rows(summary)
    written = []
    for name, header, rows in ((CHANGE_LIST, CHANGE_LIST_HEADER, changes),
                               (UNSUPPORTED_API, UNSUPPORTED_API_HEADER, unsupported)):
        path = directory / name
        _write(path, _csv_bytes(header, rows))
        written.append(path)
    return written
