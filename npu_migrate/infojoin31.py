"""One info finding per file per ecosystem, whatever lowered its places (the last whole-run pass).

A code merged per file (`per_file = "code"` in rules/codes*.toml: Triton, FP8 compute, the
CUDA-only packages) stands for all of a file's places as one finding. The passes that know why a
place does not fail on an NPU host take such a finding apart and lower each place they can name a
reason for (findings.lower_pieces, flagcalls19.lower and their kin); where the reasons differ place
by place, and where two passes lower places of one finding, the file ended with one info note per
place (session 41: vLLM's deep_gemm_moe.py went from one NPU913 error to seven info notes). The
rule is one finding per file per ecosystem with its lines listed: this pass joins a file's info
findings of such a code (the same moot-ness, findings outside notebooks; for a code merged per
message, `per_file = "message"`, those whose messages without the added reason merge_per_file
would have merged: `torch.cuda._sleep` at two lines, not `_sleep` with `CUDAGraph`) into the first of them,
which keeps its own message and lists the others' lines, each group of lines with its own reason
where that differs from the first's:

    ... (reason A) (also at line 61 for the same reason; at lines 272, 359: reason B; at line 642: reason C)

Nothing is dropped: every place stays in the joined finding's `also` (findings.split_merged gives
them back to the baseline and --diff-base), every reason stays in the message. Errors and
warnings are never joined here (merge_per_file already keeps one per file), nor an info note with
an error of the same code (different severities are different findings).
"""

from __future__ import annotations

import dataclasses
import re
from collections import defaultdict

from . import catalogue
from .findings import ALSO as _ALSO, Finding
from .model import FileResult
from .moot import is_moot

MAX_REASONS = 6  # reasons shown besides the first finding's own; further places are listed without theirs
MAX_LINES = 12  # lines shown per reason (findings.MAX_LISTED)


def _trailing_group(text: str) -> tuple[str, str] | None:
    """(the text before, the words inside) of the parenthesised group that ends `text`, or None when
    it does not end with one (or the brackets inside do not balance)."""
    if not text.endswith(")"):
        return None
    depth = 0
    in_code = False
    for i in range(len(text) - 1, -1, -1):
        ch = text[i]
        if ch == "`":
            in_code = not in_code  # (a quoted source is shown cut short: its brackets need not balance)
        elif in_code:
            continue
        elif ch == ")":
            depth += 1
        elif ch == "(":
            depth -= 1
            if depth == 0:
                return (text[:i].rstrip(), text[i + 1:-1]) if i > 0 else None
    return None


def _reason(finding: Finding) -> str:
    """Why a lowered finding is info: the group its lowering added to the end of its message; the
    whole message where it has none."""
    text = _ALSO.sub("", finding.message)
    split = _trailing_group(text)
    return split[1] if split else text


def _lines(findings: list[Finding]) -> list[int]:
    return sorted({n for f in findings for n in (f.line, *(line for line, _c, _s in f.also))})


def _shown(lines: list[int]) -> str:
    noun = "line" if len(lines) == 1 else "lines"
    more = f" and {len(lines) - MAX_LINES} more" if len(lines) > MAX_LINES else ""
    return f"{noun} {', '.join(map(str, lines[:MAX_LINES]))}{more}"


def join(group: list[Finding]) -> Finding:
    """The info findings of one file and code (file order) as one: the first's message and place,
    the others' lines and reasons listed, every place in `also`."""
    first, others = group[0], group[1:]
    own = _reason(first)
    by_reason: dict[str, list[Finding]] = defaultdict(list)
    for other in others:
        by_reason[_reason(other)].append(other)
    parts = []
    same = [n for n in _lines(by_reason.pop(own, [])) if n != first.line]
    own_also = [n for n in _lines([first]) if n != first.line]
    same = sorted({*same, *own_also})
    reasons = list(by_reason.items())
    if same:
        parts.append(_shown(same) + (" for the same reason" if reasons else ""))
    for why, members in reasons[:MAX_REASONS]:
        parts.append(f"{_shown(_lines(members))}: {why}")
    rest = _lines([m for _w, members in reasons[MAX_REASONS:] for m in members])
    if rest:
        parts.append(f"{_shown(rest)} for {len(reasons) - MAX_REASONS} other reasons of the same kind")
    places = sorted({*first.also, *((f.line, f.column, f.source) for f in others),
                     *(p for f in others for p in f.also)} - {(first.line, first.column, first.source)})
    if not parts:
        return dataclasses.replace(first, also=tuple(places))
    message = f"{_ALSO.sub('', first.message)} (also at {'; at '.join(parts)})"
    return dataclasses.replace(first, message=message, also=tuple(places))


def _group(finding: Finding) -> str | None:
    """What the finding is joined by besides its code (None: it is not joined): nothing more for a
    code merged per file (`per_file = "code"`); for one merged per message, what merge_per_file
    groups by, read on the message without the reason a lowering added (its trailing group)."""
    rule = catalogue.rules().get(finding.code)
    if finding.fixable or finding.cell is not None or finding.severity != "info" or rule is None:
        return None
    if rule.per_file == "code":
        return ""
    if rule.per_file != "message":
        return None
    text = _ALSO.sub("", finding.message)
    match = re.search(rule.merge_group, text) if rule.merge_group else None
    if match:
        return next((name for name, value in match.groupdict().items() if value), rule.merge_group)
    split = _trailing_group(text)
    return split[0] if split else text


def review(results: list[FileResult]) -> list[FileResult]:
    """The results, with each file's info findings of one per-file code joined (module docstring)."""
    out = list(results)
    for i, result in enumerate(results):
        groups: dict[tuple, list[Finding]] = defaultdict(list)
        for finding in result.findings:
            key = _group(finding)
            if key is not None:
                groups[(finding.code, key, is_moot(finding))].append(finding)
        several = [g for g in groups.values() if len(g) > 1]
        if not several:
            continue
        dropped = {id(f) for g in several for f in g}
        findings = [join(sorted(g)) for g in several]
        findings.extend(f for f in result.findings if id(f) not in dropped)
        out[i] = dataclasses.replace(result, findings=sorted(findings))
    return out
