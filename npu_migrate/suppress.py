"""Suppression comments: `# noqa: NPU201`, `# npu-migrate: ignore[NPU201]`, `# npu-migrate: skip-file`.

Syntax (codes are full codes or prefixes, comma- or space-separated):

    x = torch.cuda.mem_get_info()        # noqa: NPU202
    x = torch.cuda.mem_get_info()        # npu-migrate: ignore[NPU202]
    x = torch.cuda.mem_get_info()        # npu-migrate: ignore        (every code on this line)
    # npu-migrate: skip-file                                          (the whole file, any line)
    # npu-migrate: skip-file[NPU990]                                  (these codes, whole file)

A bare `# noqa` (no codes) does NOT suppress npu-migrate findings: code bases are full of bare
`noqa` comments written for flake8 or ruff, and letting them hide CUDA-only code would break
"nothing silently missed". `# noqa: E501, NPU202` works: only the NPU codes are read.

A comment applies to the whole logical line it ends or sits in: a statement spread over several
lines in brackets is one logical line, so the comment may be on any of its physical lines. The
line of a finding is the line where its construct starts.

`parse(source)` is cheap for files without any suppression comment (a byte test), so the engine
can call it for every file; `Suppressions.suppresses(code, line)` is the hook a rule calls before
it rewrites or reports (see `filter_findings` for the post-filter used by `check`).
"""

from __future__ import annotations

import io
import re
import tokenize
from dataclasses import dataclass, field
from typing import Iterable, Optional

from .findings import Finding

# Bytes without a match hold no comment that can suppress one of our codes: a `noqa` must name an
# NPU code on its line, the other forms start with `npu-migrate:`. (Code bases are full of
# noqa comments for other linters; tokenizing each of those files would cost more than the migration.)
_ANY = re.compile(rb"noqa[ \t]*:[^\n]*?npu|npu-migrate[ \t]*:", re.I)
_CODE = r"NPU\d{0,3}"
NOQA = re.compile(r"#\s*noqa\s*:\s*(?P<codes>[A-Z]+[0-9]*(?:[\s,]+[A-Z]+[0-9]*)*)", re.I)
IGNORE = re.compile(r"#\s*npu-migrate\s*:\s*ignore\b(?:\[(?P<codes>[^\]]*)\])?", re.I)
SKIP_FILE = re.compile(r"#\s*npu-migrate\s*:\s*skip-file\b(?:\[(?P<codes>[^\]]*)\])?", re.I)
_NPU_CODE = re.compile(rf"^{_CODE}$")

ALL = None  # "every code" in the maps below


def _codes(text: str) -> frozenset[str]:
    return frozenset(
        c.upper() for c in re.split(r"[\s,]+", text.strip()) if _NPU_CODE.match(c.upper())
    )


def _matches(code: str, codes: Optional[frozenset[str]]) -> bool:
    return codes is ALL or any(code.startswith(c) for c in codes)


@dataclass
class Suppressions:
    """Which codes are suppressed on which lines of one file."""

    lines: dict[int, Optional[frozenset[str]]] = field(default_factory=dict)  # None: every code
    file: Optional[frozenset[str]] = frozenset()  # None: the whole file is skipped

    @property
    def skips_file(self) -> bool:
        """`# npu-migrate: skip-file` without codes: the file is left alone entirely."""
        return self.file is ALL

    def suppresses(self, code: str, line: int) -> bool:
        if _matches(code, self.file):
            return True
        codes = self.lines.get(line, frozenset())
        return _matches(code, codes)

    def _add(self, lines: Iterable[int], codes: Optional[frozenset[str]]) -> None:
        for line in lines:
            old = self.lines.get(line, frozenset())
            if old is ALL or codes is ALL:
                self.lines[line] = ALL
            else:
                self.lines[line] = old | codes

    def _comment(self, text: str, lines: Iterable[int]) -> None:
        lines = list(lines)
        skip = SKIP_FILE.search(text)
        if skip:
            if skip.group("codes") is None:
                self.file = ALL
            elif self.file is not ALL:
                self.file = self.file | _codes(skip.group("codes"))
            return
        ignore = IGNORE.search(text)
        if ignore:
            codes = ALL if ignore.group("codes") is None else _codes(ignore.group("codes"))
            self._add(lines, codes)
        noqa = NOQA.search(text)
        if noqa:
            codes = _codes(noqa.group("codes"))
            if codes:  # (a noqa naming only E501 says nothing about our codes)
                self._add(lines, codes)


EMPTY = Suppressions()


def parse(source: bytes) -> Suppressions:
    """The suppression comments of a file's bytes (any encoding tokenize understands)."""
    if not source or not _ANY.search(source):
        return Suppressions()
    result = Suppressions()
    try:
        _parse_tokens(source, result)
    except (tokenize.TokenError, SyntaxError, UnicodeDecodeError, LookupError, ValueError):
        result = Suppressions()
        parse_lines(source, result)
    return result


def _parse_tokens(source: bytes, result: Suppressions) -> None:
    start: Optional[int] = None  # first line of the logical line being read
    pending: list[tuple[str, int]] = []  # comments seen in it
    for tok in tokenize.tokenize(io.BytesIO(source).readline):
        kind = tok.type
        if kind == tokenize.COMMENT:
            if start is None:  # a comment on a line of its own: that line only
                result._comment(tok.string, [tok.start[0]])
            else:
                pending.append((tok.string, tok.start[0]))
        elif kind == tokenize.NEWLINE or kind == tokenize.ENDMARKER:
            if start is not None:
                end = tok.start[0]
                for text, _line in pending:
                    result._comment(text, range(start, end + 1))
            start, pending = None, []
        elif kind in (tokenize.NL, tokenize.INDENT, tokenize.DEDENT, tokenize.ENCODING):
            continue
        elif start is None:
            start = tok.start[0]


def parse_lines(source: bytes, result: Suppressions) -> None:
    """Fallback for files tokenize rejects: a comment applies to its own physical line."""
    text = source.decode("utf-8", "replace")
    for number, line in enumerate(text.splitlines(), start=1):
        if "#" in line:
            result._comment(line[line.index("#"):], [number])


def filter_findings(findings: Iterable[Finding], suppressions: Suppressions) -> tuple[list[Finding], int]:
    """(kept findings, number suppressed)."""
    kept, dropped = [], 0
    for f in findings:
        if suppressions.suppresses(f.code, f.line):
            dropped += 1
        else:
            kept.append(f)
    return kept, dropped
