"""The migration report: what a run rewrote, what is left to port by hand, and which torch_npu to install.

`write_report` writes Markdown, or one self-contained HTML page when the name ends in .html/.htm;
both come from the same document model, so they say the same thing. `write_csv` writes the two
CSV files of Huawei's migration tool (msFmkTransplt, MindStudio's PyTorch GPU2Ascend), in its
column layout, so Ascend users can put the two tools side by side. Everything is sorted and holds
no date: the same run gives the same bytes.

The report is read by whoever plans the port: a headline (the share of CUDA references migrated
automatically, the findings left by severity, an estimate of the hand work), two charts as inline
SVG (findings and rewrites per rule family; the files with the most work), the findings grouped by
code with their guidance once and their locations in collapsible lists linked to the source lines,
and a per-file table. Its numbers are those of the JSON output of the same run (`numbers`,
`level`; "How the numbers are computed" in the report says how). Rewrites are never findings.
"""

from __future__ import annotations

import csv
import html
import io
import json
import os
import re
import urllib.parse
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


# -- the document model: inline text with code spans and links, and a few kinds of block ---------

# A segment is (text, is code) or (text, is code, href): a link (relative to the report's folder).
Inline = tuple[tuple, ...]


def plain(text: object) -> Inline:
    return ((str(text), False),)


def code(text: object) -> Inline:
    return ((str(text), True),)


def link(text: object, href: str, is_code: bool = True) -> Inline:
    return ((str(text), is_code, href),) if href else ((str(text), is_code),)


def rich(text: str) -> Inline:
    """A catalogue text: `backticked` parts are code, the rest plain."""
    parts = re.split(r"(`[^`\n]+`)", text)
    return tuple(
        (p[1:-1], True) if p.startswith("`") and p.endswith("`") and len(p) > 1 else (p, False)
        for p in parts if p
    )


def join(*parts: Inline) -> Inline:
    return tuple(segment for part in parts for segment in part)


def _segment(segment: tuple) -> tuple[str, bool, str]:
    return segment[0], segment[1], segment[2] if len(segment) > 2 else ""


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
    css_class: str = ""  # HTML only


@dataclass(frozen=True)
class Items:
    items: tuple[Inline, ...]


@dataclass(frozen=True)
class Pre:
    text: str


@dataclass(frozen=True)
class Tile:
    """One headline number: `value` big, `label` under it, `detail` in small print; `share` (0..1)
    draws a bar under the number."""

    value: str
    label: str
    detail: Inline = ()
    share: Optional[float] = None


@dataclass(frozen=True)
class Tiles:
    tiles: tuple[Tile, ...]


@dataclass(frozen=True)
class Series:
    name: str
    colour: str


@dataclass(frozen=True)
class Bar:
    label: str
    values: tuple[int, ...]  # one per series
    note: str  # printed after the bar


@dataclass(frozen=True)
class Chart:
    """A horizontal stacked bar chart: inline SVG in HTML, a table in Markdown."""

    title: str
    series: tuple[Series, ...]
    bars: tuple[Bar, ...]
    label_header: str
    note_header: str
    mono_labels: bool = False  # file paths: monospace, cut from the left when long
    unit: str = ""  # of the values, shown after them in Markdown


@dataclass(frozen=True)
class Details:
    """A collapsible list (<details>); open from the start when it is short."""

    summary: str
    items: tuple[Inline, ...]
    open: bool = False


Block = Union[Heading, Para, Table, Items, Pre, Tiles, Chart, Details]


# -- rules, guidance, links -----------------------------------------------------------------------


def _rule(code_: str, fixable: bool = False) -> Rule:
    """The catalogue entry; a code no table defines still gets a row (effort review)."""
    found = catalogue.rules().get(code_)
    if found is not None:
        return found
    return Rule(code_, "unknown-code", fixable, "", "No guidance: this code is not in the catalogue.", "review")


def _effort(finding: Finding) -> str:
    return _rule(finding.code, finding.fixable).effort


# Paths inside npu-migrate's own source tree mean nothing to the reader of a report about their
# project: a sentence or parenthesis that cites one is left out of the guidance shown.
_INTERNAL_PATH = re.compile(r"(?<![\w./-])(?:npu_migrate|rules|docs|families|tests|fixtures|scripts)/[\w./-]*\w")


def public_guidance(text: str) -> str:
    """The catalogue's guidance without references to the tool's internal files."""
    if not _INTERNAL_PATH.search(text):
        return text
    text = re.sub(r"\s*\([^()]*\)", lambda m: "" if _INTERNAL_PATH.search(m.group(0)) else m.group(0), text)
    sentences = re.split(r"(?<=[.!?])\s+(?=[A-Z`\"]|" + _INTERNAL_PATH.pattern + ")", text)
    kept = []
    for sentence in sentences:
        if not _INTERNAL_PATH.search(sentence):
            kept.append(sentence)
        elif re.match(r"(?:See|Read|Details in)\b", sentence):
            continue
        else:  # the sentence says something on its own: name the tool instead of its file
            kept.append(_INTERNAL_PATH.sub("npu-migrate's rule table", sentence))
    return " ".join(kept).strip()


def _guidance(code_: str, fixable: bool = False) -> str:
    return public_guidance(_rule(code_, fixable).guidance)


def _location(finding: Finding) -> str:
    """`path:line:col`, or `path:cell_N:line:col` in a notebook (as the console output says it)."""
    cell = _cell(finding)
    where = f"{finding.line}:{finding.column}"
    return f"{finding.path}:{where}" if cell is None else f"{finding.path}:cell_{cell}:{where}"


def _cell(finding: Finding) -> Optional[object]:
    return getattr(finding, "cell", None)


class Links:
    """Links from the report to the project's files: relative to the folder the report is written
    to (`base`), so that they work wherever the project and its report are opened together; a
    line anchor `#L<line>` (the form GitHub, GitLab and most code browsers follow) except in a
    notebook, whose lines are counted within a cell. Without a base the paths are relative to the
    run's root (a report saved in the root)."""

    def __init__(self, root: str, base: Optional[Path]) -> None:
        self.root = Path(root)
        self.base = base
        self._cache: dict[str, str] = {}

    def file(self, relpath: str) -> str:
        if relpath not in self._cache:
            target = self.root / relpath
            if self.base is None:
                rel = relpath
            else:
                if not target.exists() and Path(relpath).exists():  # a path given from the working folder
                    target = Path(relpath)
                rel = os.path.relpath(os.path.abspath(target), os.path.abspath(self.base))
            self._cache[relpath] = urllib.parse.quote(Path(rel).as_posix(), safe="/")
        return self._cache[relpath]

    def finding(self, finding: Finding) -> str:
        href = self.file(finding.path)
        return href if _cell(finding) is not None else f"{href}#L{finding.line}"


# -- what the numbers are ---------------------------------------------------------------------------

SEVERITY_MEANING = {
    "error": "fails on an NPU host as written",
    "warning": "runs on an NPU host but behaves differently",
    "info": "runs on an NPU host; worth a review",
}
SEVERITY_COLOUR = {"error": "#cf222e", "warning": "#d4a72c", "info": "#54aeff"}
REWRITE_COLOUR = "#8fd19e"
TOOL_FAMILY = "tool"  # NPU0xx: about files the tool could not read or its shim, not CUDA references

# The effort model, in the spirit of SYCLomatic's analysis mode (which sorts what it cannot migrate
# into low, medium and high manual effort): minutes per item, a rough guide for planning only.
LEVELS = ("high", "medium", "low")
LEVEL_MINUTES = {"high": 60, "medium": 20, "low": 5, "none": 0}
LEVEL_MEANING = {
    "high": "port by hand (a finding whose rule says manual)",
    "medium": "check and fix (a finding whose rule says review, severity error or warning)",
    "low": "check (an info finding, or a rewrite whose rule asks for a look at the change)",
    "none": "rewritten; nothing to do beyond reading the diff",
}
LEVEL_SHORT = {"high": "port by hand", "medium": "check and fix", "low": "check", "none": "nothing to do"}
LEVEL_COLOUR = {"high": "#bc4c00", "medium": "#fb8f44", "low": "#ffd8b5"}


def level(finding: Finding) -> str:
    """high | medium | low | none: the finding's share of hand work (see LEVEL_MEANING)."""
    effort = _effort(finding)
    if finding.fixable:
        return "low" if effort in ("review", "manual") else "none"
    if effort == "manual":
        return "high"
    return "low" if finding.severity == "info" else "medium"


def minutes(findings: Iterable[Finding]) -> int:
    return sum(LEVEL_MINUTES[level(f)] for f in findings)


def duration(total: int) -> str:
    """`45 min`, `2 h`, `2 h 15 min`: a rough figure, rounded to 5 minutes above an hour."""
    if total < 60:
        return f"{total} min"
    total = round(total / 5) * 5
    hours, rest = divmod(total, 60)
    return f"{hours} h" if not rest else f"{hours} h {rest} min"


def _is_tool(code_: str) -> bool:
    return _rule(code_).family == TOOL_FAMILY


@dataclass(frozen=True)
class Numbers:
    """The headline's numbers, each also in the JSON output (see `migrated_share`)."""

    rewrites: int  # every rewrite (JSON: sum of rewrites_by_code)
    findings: int  # every report-only finding (JSON: sum of findings_by_code)
    cuda_rewrites: int  # rewrites outside the tool's own codes (NPU0xx)
    cuda_findings: int  # report-only findings outside NPU0xx
    by_severity: dict  # report-only findings per severity
    minutes: int

    @property
    def references(self) -> int:
        return self.cuda_rewrites + self.cuda_findings

    @property
    def share(self) -> Optional[float]:
        """Share of CUDA references migrated automatically (None when there is none)."""
        return self.cuda_rewrites / self.references if self.references else None


def numbers(summary: RunSummary) -> Numbers:
    findings = summary.findings
    reported = [f for f in findings if not f.fixable]
    return Numbers(
        rewrites=sum(1 for f in findings if f.fixable),
        findings=len(reported),
        cuda_rewrites=sum(1 for f in findings if f.fixable and not _is_tool(f.code)),
        cuda_findings=sum(1 for f in reported if not _is_tool(f.code)),
        by_severity={s: sum(1 for f in reported if f.severity == s) for s in catalogue.SEVERITIES},
        minutes=minutes(findings),
    )


def percent(share: Optional[float]) -> str:
    """Rounded down, so that 99.6% of references is not shown as all of them."""
    if share is None:
        return "n/a"
    return f"{int(share * 100)}%"


def _plural(n: int, one: str, many: Optional[str] = None) -> str:
    return f"{n} {one if n == 1 else (many or one + 's')}"


def _severities(counts: dict) -> str:
    """`17 errors, 2 warnings, 1 info`."""
    return ", ".join(_plural(counts.get(s, 0), s, "info" if s == "info" else None) for s in catalogue.SEVERITIES)


def lines_of_code(result: FileResult) -> Optional[int]:
    """Non-blank lines that are not only a `#` comment (docstrings count); in a notebook, those of
    its code cells. None when the file's bytes are not at hand."""
    if result.original is None:
        return None
    text = _decoded(result)
    if result.relpath.lower().endswith(".ipynb"):
        try:
            cells = json.loads(text).get("cells", [])
            sources = ["".join(c.get("source", "")) if isinstance(c.get("source"), list) else str(c.get("source", ""))
                       for c in cells if isinstance(c, dict) and c.get("cell_type") == "code"]
            text = "\n".join(sources)
        except (ValueError, AttributeError, TypeError):
            pass
    return sum(1 for line in text.splitlines() if line.strip() and not line.lstrip().startswith("#"))


# -- what the report says -------------------------------------------------------------------------


def _status(result: FileResult, dry_run: bool) -> str:
    if result.skipped:
        return f"skipped: {result.skipped}"
    if result.changed:
        return "would change" if dry_run else "changed"
    return "unchanged"


def _share_detail(n: Numbers) -> str:
    if not n.references:
        return "no CUDA reference found"
    text = f"{n.cuda_rewrites} rewritten, {n.cuda_findings} left to port by hand or check"
    tool = n.findings - n.cuda_findings
    return text + (f" (not counting {_plural(tool, 'finding')} about unreadable files or the shim)" if tool else "")


def _headline(summary: RunSummary, n: Numbers) -> list[Block]:
    worked = [r for r in summary.results if r.findings]
    files_with_work = sum(1 for r in summary.results if minutes(r.findings) > 0)
    severities = _severities(n.by_severity)
    changed_label = "would change" if summary.dry_run else "changed"
    tiles = (
        Tile(percent(n.share), "of CUDA references migrated automatically",
             plain(_share_detail(n)), n.share),
        Tile(str(n.findings), f"finding{'' if n.findings == 1 else 's'} left (not rewritten)", plain(severities)),
        Tile(duration(n.minutes), "estimated hand work",
             plain(f"in {_plural(files_with_work, 'file')}; a rough guide, see How the numbers are computed"
                   if n.minutes else "nothing to port by hand")),
        Tile(str(len(summary.results)), "file scanned" if len(summary.results) == 1 else "files scanned",
             plain(f"{len(summary.changed)} {changed_label}, {len(worked)} with rewrites or findings, "
                   f"{sum(summary.skipped.values())} skipped")),
    )
    if n.references:
        lead = (f"npu-migrate {'would rewrite' if summary.dry_run else 'rewrote'} "
                f"{n.cuda_rewrites} of {_plural(n.references, 'CUDA reference')} ({percent(n.share)}). ")
    else:
        lead = "npu-migrate found no CUDA reference to migrate. "
    if n.findings:
        lead += (f"{_plural(n.findings, 'finding')} {'is' if n.findings == 1 else 'are'} left "
                 f"({severities}); about {duration(n.minutes)} of hand work by the rough guide below.")
    else:
        lead += "Nothing is left to port by hand."
    if summary.errors:
        lead += f" The run reported {_plural(len(summary.errors), 'error')} (see Errors)."
    return [Heading(2, plain("Summary"), "summary"), Tiles(tiles), Para(plain(lead))]


def _family_chart(summary: RunSummary) -> list[Block]:
    families: dict[str, list[int]] = {}
    for f in summary.findings:
        row = families.setdefault(_rule(f.code, f.fixable).family, [0, 0, 0, 0])
        row[3 if f.fixable else catalogue.SEVERITIES.index(f.severity)] += 1
    blocks: list[Block] = [Heading(2, plain("Findings and rewrites by family"), "families")]
    if not families:
        return blocks + [Para(plain("No rewrite and no finding."))]
    order = sorted(families.items(), key=lambda kv: (-sum(kv[1][:3]), -kv[1][3], kv[0]))
    bars = tuple(
        Bar(name, tuple(values),
            f"{_plural(sum(values[:3]), 'finding')}, {values[3]} rewritten") for name, values in order
    )
    series = tuple(Series(s, SEVERITY_COLOUR[s]) for s in catalogue.SEVERITIES) + (
        Series("rewritten (not a finding)", REWRITE_COLOUR),)
    blocks.append(Chart("Per rule family: the findings left, by severity, then the rewrites", series, bars,
                        "family", "total"))
    return blocks


def _work_chart(summary: RunSummary, limit: int = 10) -> list[Block]:
    blocks: list[Block] = [Heading(2, plain("Files with the most work"), "most-work")]
    ranked = sorted(((minutes(r.findings), r) for r in summary.results if minutes(r.findings) > 0),
                    key=lambda mr: (-mr[0], mr[1].relpath))
    if not ranked:
        return blocks + [Para(plain("No file needs hand work."))]
    bars = []
    for total, result in ranked[:limit]:
        levels = Counter(level(f) for f in result.findings)
        values = tuple(levels[lv] * LEVEL_MINUTES[lv] for lv in LEVELS)
        left = sum(1 for f in result.findings if not f.fixable)
        bars.append(Bar(result.relpath, values, f"{duration(total)}, {_plural(left, 'finding')}"))
    series = tuple(Series(f"{lv} ({LEVEL_MINUTES[lv]} min each)", LEVEL_COLOUR[lv]) for lv in LEVELS)
    shown = "" if len(ranked) <= limit else f" (the {limit} of {len(ranked)} files with the most)"
    blocks.append(Chart(f"Estimated hand work per file, by effort level{shown}", series, tuple(bars),
                        "file", "estimate", mono_labels=True, unit="min"))
    return blocks


def _severity_text(findings: list[Finding]) -> str:
    counts = Counter(f.severity for f in findings)
    if len(counts) == 1:
        return next(iter(counts))
    return ", ".join(f"{counts[s]} {s}" for s in catalogue.SEVERITIES if counts[s])


def _item(finding: Finding, links: Links, with_code: bool = False) -> Inline:
    parts = [link(_location(finding), links.finding(finding))]
    verb = "rewritten" if finding.fixable else "reported"
    parts.append(plain(f" {verb} ({finding.severity}): "))
    if with_code:
        parts.append(join(code(finding.code), plain(" ")))
    parts.append(rich(finding.message))
    if finding.source and finding.source not in finding.message:  # else the message already shows it
        parts.append(join(plain(" — "), code(finding.source)))
    return join(*parts)


OPEN_UP_TO = 5  # a list of at most this many locations is shown open


def _group_key(group: list[Finding]) -> tuple:
    worst = min(LEVELS.index(level(f)) if level(f) in LEVELS else len(LEVELS) for f in group)
    severity = min(catalogue.SEVERITIES.index(f.severity) for f in group)
    return worst, severity, -len(group), group[0].code


def _findings_by_code(summary: RunSummary, links: Links) -> list[Block]:
    reported = [f for f in summary.findings if not f.fixable]
    blocks: list[Block] = [Heading(2, plain("Findings by code"), "findings")]
    if not reported:
        return blocks + [Para(plain("None: everything found was rewritten."))]
    groups: dict[str, list[Finding]] = {}
    for f in reported:
        groups.setdefault(f.code, []).append(f)
    ordered = sorted(groups.values(), key=_group_key)
    blocks.append(Para(plain(
        f"{_plural(len(reported), 'finding')} of {_plural(len(groups), 'code')}, the most work first. "
        "Each code's guidance is given once; its locations link to the source lines.")))
    rows = []
    for group in ordered:
        rule = _rule(group[0].code)
        lv = Counter(level(f) for f in group).most_common(1)[0][0]
        rows.append((link(rule.code, f"#{_code_anchor(rule.code)}"), plain(rule.name), plain(rule.family),
                     plain(_severity_text(group)), plain(lv), plain(len(group)),
                     plain(duration(minutes(group)))))
    blocks.append(Table(("code", "rule", "family", "severity", "effort", "findings", "estimate"),
                        tuple(rows), frozenset({5, 6})))
    for group in ordered:
        rule = _rule(group[0].code)
        title = join(code(rule.code), plain(f" {rule.name} ({len(group)})"))
        blocks.append(Heading(3, title, _code_anchor(rule.code)))
        lv = level(group[0])
        blocks.append(Para(plain(f"Severity {_severity_text(group)} · {lv} effort ({LEVEL_SHORT[lv]}) · "
                                 f"family: {rule.family} · about {duration(minutes(group))} in all")))
        guidance = _guidance(rule.code)
        if guidance:
            blocks.append(Para(rich(guidance)))
        blocks.append(Details(f"{_plural(len(group), 'location')}", tuple(_item(f, links) for f in group),
                              len(group) <= OPEN_UP_TO))
    return blocks


def _code_anchor(code_: str) -> str:
    return f"code-{code_.lower()}"


def _rewrites(summary: RunSummary, links: Links) -> list[Block]:
    fixed = [f for f in summary.findings if f.fixable]
    blocks: list[Block] = [Heading(2, plain("Rewritten automatically"), "rewrites")]
    if not fixed:
        return blocks + [Para(plain("None."))]
    groups: dict[str, list[Finding]] = {}
    for f in fixed:
        groups.setdefault(f.code, []).append(f)
    verb = "would rewrite" if summary.dry_run else "rewrote"
    blocks.append(Para(plain(f"npu-migrate {verb} {_plural(len(fixed), 'construct')} "
                             f"(rewrites are not findings). Codes marked \"check\" ask for a look at the change.")))
    rows = tuple((code(c), plain(_rule(c, True).name), plain(_rule(c, True).family),
                  plain("check" if level(g[0]) != "none" else "none"), plain(len(g)))
                 for c, g in sorted(groups.items()))
    blocks.append(Table(("code", "rule", "family", "effort", "rewrites"), rows, frozenset({4})))
    for c, group in sorted(groups.items()):
        blocks.append(Details(f"{c} {_rule(c, True).name}: where the {_plural(len(group), 'rewrite')} "
                              f"{'is' if len(group) == 1 else 'are'}",
                              tuple(_item(f, links) for f in group), False))
    return blocks


def _files(summary: RunSummary, links: Links) -> list[Block]:
    rows = []
    quiet = 0
    for result in sorted(summary.results, key=lambda r: r.relpath):
        if not result.findings and not result.changed and result.skipped in (None, NO_CHANGE_REASON):
            quiet += 1
            continue
        left = Counter(f.severity for f in result.findings if not f.fixable)
        loc = lines_of_code(result)
        rows.append((
            link(result.relpath, links.file(result.relpath)), plain(_status(result, summary.dry_run)),
            plain("" if loc is None else loc), plain(sum(1 for f in result.findings if f.fixable)),
            *(plain(left[s]) for s in catalogue.SEVERITIES), plain(duration(minutes(result.findings))),
        ))
    blocks: list[Block] = [
        Heading(2, plain("Files"), "files"),
        _table_or_none(("file", "status", "lines of code", "rewrites", *catalogue.SEVERITIES, "estimate"),
                       tuple(rows), {2, 3, 4, 5, 6, 7}, "files"),
    ]
    if quiet:
        blocks.append(Para(plain(f"{quiet} other scanned file{'s' if quiet != 1 else ''} "
                                 f"{'hold' if quiet != 1 else 'holds'} no CUDA-only code.")))
    return blocks


def _table_or_none(headers, rows, numeric=(), css_class: str = "") -> Block:
    return Table(tuple(headers), rows, frozenset(numeric), css_class) if rows else Para(plain("None."))


def _overview(summary: RunSummary, n: Numbers) -> list[Block]:
    skipped = sum(summary.skipped.values())
    with_findings = sum(1 for r in summary.results if any(not f.fixable for f in r.findings))
    changed_label = "files that would change" if summary.dry_run else "files changed"
    loc = [lines_of_code(r) for r in summary.results]
    rows: list[tuple[Inline, ...]] = [
        (plain("root"), code(summary.root)),
        (plain("mode"), plain("dry run: nothing was written" if summary.dry_run else "changes written")),
        (plain("tool"), plain(f"npu-migrate {__version__}")),
        (plain("shim"), join(plain(f"version {__version__}"),
                             plain(f"; {summary.shim}" if summary.shim else "; not touched by this run"))),
        (plain("files scanned"), plain(len(summary.results))),
        (plain("lines of code scanned"), plain(sum(x for x in loc if x is not None))),
        (plain(changed_label), plain(len(summary.changed))),
        (plain("files skipped"), plain(skipped)),
    ]
    rows += [(plain(f"skipped: {reason}"), plain(count)) for reason, count in sorted(summary.skipped.items())]
    rows += [
        (plain("files with findings"), plain(with_findings)),
        (plain("rewrites"), plain(n.rewrites)),
        (plain("findings reported (not rewritten)"), plain(n.findings)),
        (plain("CUDA references migrated automatically"), plain(f"{percent(n.share)} "
                                                                 f"({n.cuda_rewrites} of {n.references})")),
        (plain("estimated hand work"), plain(duration(n.minutes))),
        (plain("constructs left alone by suppression comments"), plain(sum(r.suppressed for r in summary.results))),
        (plain("errors"), plain(len(summary.errors))),
    ]
    blocks: list[Block] = [Heading(2, plain("Run details"), "overview"), Table(("item", "value"), tuple(rows))]
    blocks.append(Heading(3, plain("Severity"), "severity"))
    blocks.append(Table(("severity", "findings", "rewrites (not findings)", "what it means"),
                        _severity_rows(summary.findings), frozenset({1, 2})))
    return blocks


def _severity_rows(findings: list[Finding]) -> tuple[tuple[Inline, ...], ...]:
    left = Counter(f.severity for f in findings if not f.fixable)
    fixed = Counter(f.severity for f in findings if f.fixable)
    return tuple((plain(s), plain(left[s]), plain(fixed[s]), plain(SEVERITY_MEANING[s])) for s in catalogue.SEVERITIES)


def _level_rows(findings: list[Finding]) -> tuple[tuple[Inline, ...], ...]:
    left = Counter(level(f) for f in findings if not f.fixable)
    fixed = Counter(level(f) for f in findings if f.fixable)
    return tuple(
        (plain(lv), plain(LEVEL_MINUTES[lv]), plain(left[lv]), plain(fixed[lv]),
         plain(duration(LEVEL_MINUTES[lv] * (left[lv] + fixed[lv]))), plain(LEVEL_MEANING[lv]))
        for lv in (*LEVELS, "none")
    )


def _method(summary: RunSummary, n: Numbers) -> list[Block]:
    rows = _level_rows(summary.findings)
    return [
        Heading(2, plain("How the numbers are computed"), "method"),
        Para(plain(
            "A CUDA reference is one rewrite or one report-only finding, as the JSON output "
            "(--output-format json) counts them, leaving out the tool's own codes (NPU0xx: a file "
            "it could not read or parse, the shim), which are not CUDA references. Share migrated "
            "automatically = rewrites / (rewrites + report-only findings), both without NPU0xx, "
            f"here {n.cuda_rewrites} / ({n.cuda_rewrites} + {n.cuda_findings}), rounded down. "
            "A finding that stands for several places of one file (\"also at lines ...\") counts once. "
            "Findings are what is left: rewrites are never counted as findings.")),
        Para(plain(
            "The estimate of hand work follows the idea of SYCLomatic's analysis mode: each item gets "
            "an effort level from its rule's effort and its severity, and a fixed number of minutes per "
            "level. It is a rough guide for planning, not a measurement: a team that knows its code "
            "will do better or worse.")),
        Table(("level", "minutes each", "findings", "rewrites", "estimate", "which items"), rows,
              frozenset({1, 2, 3, 4})),
        Para(plain(
            "Links: each location links to the file, relative to the folder the report was written to, "
            "with a #L<line> anchor; they work when the report is opened where it was written, next to "
            "the project (a browser opens the file; GitHub and GitLab also jump to the line).")),
    ]


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


def document(summary: RunSummary, requirements: Optional[RequirementsAdvice],
             link_base: Optional[Path] = None) -> list[Block]:
    """The report as blocks, in order; links relative to `link_base` (the report's folder)."""
    links = Links(summary.root, link_base)
    n = numbers(summary)
    mode = "dry run, nothing written" if summary.dry_run else "changes written"
    blocks: list[Block] = [
        Heading(1, plain("npu-migrate migration report")),
        Para(join(code(summary.root), plain(f" ({mode}); npu-migrate {__version__}, shim version {__version__}."))),
    ]
    blocks += _headline(summary, n)
    blocks += _family_chart(summary)
    blocks += _work_chart(summary)
    blocks += _findings_by_code(summary, links)
    blocks += _files(summary, links)
    blocks += _rewrites(summary, links)
    blocks += _requirements(requirements)
    blocks += _overview(summary, n)
    blocks += _errors(summary)
    blocks += _method(summary, n)
    blocks.append(Para(plain(f"Generated by npu-migrate {__version__} (shim version {__version__}).")))
    return blocks


# -- Markdown -------------------------------------------------------------------------------------

_MD_SPECIAL = re.compile(r"([\\`*<>&\[\]])")


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
    """Markdown; links only outside tables (a table cell keeps its plain text, for tools that
    read the tables)."""
    out = []
    for segment in inline:
        text, is_code, href = _segment(segment)
        body = _md_code(text, in_table) if is_code else _md_text(text, in_table)
        if href and not in_table:
            body = f"[{body}]({href.replace('(', '%28').replace(')', '%29').replace(' ', '%20')})"
        out.append(body)
    return "".join(out)


def _md_chart(block: Chart) -> str:
    headers = (block.label_header, *(s.name for s in block.series), block.note_header)
    head = "| " + " | ".join(_md_text(h, True) for h in headers) + " |"
    rule = "|---|" + "---:|" * len(block.series) + "---|"
    rows = []
    for bar in block.bars:
        label = _md_code(bar.label, True) if block.mono_labels else _md_text(bar.label, True)
        unit = f" {block.unit}" if block.unit else ""
        cells = [label, *(f"{v}{unit}" for v in bar.values), _md_text(bar.note, True)]
        rows.append("| " + " | ".join(cells) + " |")
    return "\n".join([_md_text(block.title, False), "", head, rule, *rows])


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
    if isinstance(block, Tiles):
        return "\n".join(f"- **{_md_text(t.value, False)}** {_md_text(t.label, False)}"
                         + (f": {md_inline(t.detail)}" if t.detail else "") for t in block.tiles)
    if isinstance(block, Chart):
        return _md_chart(block)
    if isinstance(block, Details):
        items = "\n".join("- " + md_inline(item) for item in block.items)
        opened = " open" if block.open else ""
        return f"<details{opened}><summary>{html.escape(block.summary)}</summary>\n\n{items}\n\n</details>"
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
h1,h2,h3{line-height:1.25}h2{border-bottom:1px solid #d0d7de;padding-bottom:.3rem;margin-top:2.2rem}
h3{margin:1.6rem 0 .4rem}
table{border-collapse:collapse;margin:.5rem 0}
th,td{border:1px solid #d0d7de;padding:.25rem .6rem;text-align:left;vertical-align:top}
th{background:#f6f8fa}td.num{text-align:right;font-variant-numeric:tabular-nums;white-space:nowrap}
tbody tr:nth-child(even){background:#fafbfc}td.zero{color:#8c959f}th.num{white-space:nowrap}table.files td.num{width:1%}table.files td:nth-child(2){min-width:13rem}
table.files td:first-child{max-width:24rem}td code{overflow-wrap:break-word}
code,pre{font:13px ui-monospace,SFMono-Regular,Menlo,Consolas,monospace;background:#f6f8fa;border-radius:4px}
code{padding:.1rem .3rem;overflow-wrap:anywhere}pre{padding:.75rem;overflow:auto}li{margin:.2rem 0}
a{color:#0969da;text-decoration:none}a:hover{text-decoration:underline}a code{color:#0969da}
.tiles{display:grid;grid-template-columns:repeat(auto-fit,minmax(14rem,1fr));gap:1rem;margin:1rem 0}
.tile{border:1px solid #d0d7de;border-radius:8px;padding:.9rem 1rem;background:#fff}
.tile .value{font-size:2.2rem;font-weight:600;line-height:1.1}
.tile .label{font-weight:600;margin-top:.2rem}.tile .detail{color:#59636e;font-size:13px;margin-top:.3rem}
.meter{height:8px;background:#eaeef2;border-radius:4px;margin-top:.5rem;overflow:hidden}
.meter span{display:block;height:100%;background:#2da44e}
figure{margin:.5rem 0 1rem}figcaption{color:#59636e;font-size:13px;margin-bottom:.3rem}
svg.chart{width:100%;height:auto;display:block}
details{margin:.3rem 0 .8rem}summary{cursor:pointer;color:#0969da}
details ul{margin:.3rem 0}"""


ZERO = (plain(0), plain("0 min"))  # numbers shown in grey


def html_inline(inline: Inline) -> str:
    out = []
    for segment in inline:
        text, is_code, href = _segment(segment)
        escaped = html.escape(text)
        if href and is_code:  # a path: it may wrap after a slash, not inside a name
            escaped = escaped.replace("/", "/<wbr>")
        body = f"<code>{escaped}</code>" if is_code else escaped
        out.append(f'<a href="{html.escape(href)}">{body}</a>' if href else body)
    return "".join(out)


def _cut(label: str, chars: int) -> str:
    return label if len(label) <= chars else "\u2026" + label[-(chars - 1):]


def svg_chart(block: Chart) -> str:
    """The chart as SVG (well-formed XML): a legend, then one stacked bar per row."""
    width, label_w, note_w, row_h, bar_h, top = 960, 300, 190, 26, 16, 34
    chars = 40 if block.mono_labels else 44
    x0 = label_w + 10
    span = width - x0 - note_w
    scale = max((sum(b.values) for b in block.bars), default=0) or 1
    height = top + row_h * len(block.bars) + 6
    esc = html.escape
    out = [(f'<svg class="chart" xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {width} {height}" '
            f'width="{width}" height="{height}" role="img" aria-label="{esc(block.title)}" '
            f'font-family="system-ui,-apple-system,Segoe UI,sans-serif" font-size="13">'),
           f"<title>{esc(block.title)}</title>"]
    x = 0
    for series in block.series:  # the legend
        out.append(f'<rect x="{x}" y="6" width="12" height="12" fill="{esc(series.colour)}"/>'
                   f'<text x="{x + 17}" y="16" fill="#1f2328">{esc(series.name)}</text>')
        x += 17 + int(len(series.name) * 7.2) + 22
    for i, bar in enumerate(block.bars):
        y = top + i * row_h
        family = ' font-family="ui-monospace,SFMono-Regular,Menlo,Consolas,monospace" font-size="12"' \
            if block.mono_labels else ""
        out.append(f'<g><title>{esc(bar.label)}: {esc(bar.note)}</title>'
                   f'<text x="{label_w}" y="{y + bar_h - 3}" text-anchor="end" fill="#1f2328"{family}>'
                   f"{esc(_cut(bar.label, chars))}</text>")
        left = float(x0)
        for series, value in zip(block.series, bar.values):
            if not value:
                continue
            w = max(value / scale * span, 1.5)
            out.append(f'<rect x="{left:.1f}" y="{y}" width="{w:.1f}" height="{bar_h}" '
                       f'fill="{esc(series.colour)}"><title>{esc(series.name)}: {value}</title></rect>')
            left += w
        out.append(f'<text x="{left + 6:.1f}" y="{y + bar_h - 3}" fill="#59636e">{esc(bar.note)}</text></g>')
    out.append("</svg>")
    return "\n".join(out)


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
    if isinstance(block, Tiles):
        tiles = []
        for t in block.tiles:
            meter = "" if t.share is None else \
                f'<div class="meter"><span style="width:{t.share * 100:.1f}%"></span></div>'
            tiles.append(f'<div class="tile"><div class="value">{html.escape(t.value)}</div>{meter}'
                         f'<div class="label">{html.escape(t.label)}</div>'
                         f'<div class="detail">{html_inline(t.detail)}</div></div>')
        return '<div class="tiles">\n' + "\n".join(tiles) + "\n</div>"
    if isinstance(block, Chart):
        return f"<figure>\n<figcaption>{html.escape(block.title)}</figcaption>\n{svg_chart(block)}\n</figure>"
    if isinstance(block, Details):
        items = "\n".join(f"<li>{html_inline(i)}</li>" for i in block.items)
        opened = " open" if block.open else ""
        return f"<details{opened}><summary>{html.escape(block.summary)}</summary>\n<ul>\n{items}\n</ul>\n</details>"
    head = "".join(f'<th class="num">{html.escape(h)}</th>' if i in block.numeric else f"<th>{html.escape(h)}</th>"
                   for i, h in enumerate(block.headers))
    rows = []
    for row in block.rows:
        cells = "".join(
            (f'<td class="num zero">{html_inline(c)}</td>' if c in ZERO else f'<td class="num">{html_inline(c)}</td>')
            if i in block.numeric else f"<td>{html_inline(c)}</td>"
            for i, c in enumerate(row)
        )
        rows.append(f"<tr>{cells}</tr>")
    table = f'<table class="{html.escape(block.css_class)}">' if block.css_class else "<table>"
    return f"{table}\n<thead><tr>{head}</tr></thead>\n<tbody>\n" + "\n".join(rows) + "\n</tbody>\n</table>"


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
                  requirements: Optional[RequirementsAdvice] = None, link_base: Optional[Path] = None) -> str:
    """The report's text; its links are relative to `link_base`, the folder it goes to (None: the
    run's root)."""
    blocks = document(summary, requirements, link_base)
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
    _write(path, render_report(summary, html_format, requirements, path.parent).encode("utf-8"))


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
        extra = (f.column, f.code, rule.name, rule.effort, "" if cell is None else cell,
                 public_guidance(rule.guidance), f.severity)
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
