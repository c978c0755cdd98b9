"""Jupyter notebooks (.ipynb): code cells migrated by the same engine as .py files.

Why a module of its own: a notebook is JSON holding Python written for IPython, and a reviewable
change to it must touch nothing but the code that changed. So:

- The JSON is never re-serialised. The exact span of each cell's `source` value is located in the
  original text, and only the values of changed cells are spliced, written in the file's own style
  (a list of lines or one string, the same indentation, `\\u` escapes or not). Outputs, metadata,
  key order and the trailing newline stay byte-identical.
- IPython syntax is set aside before parsing, one line for one line, and put back verbatim after:
  line magics (`%matplotlib inline`), shell escapes (`!nvidia-smi`, `files = !ls`), help
  (`torch.cuda?`), autocall (`/f x`) and the header of a cell magic. A `%time` / `%timeit` line is
  Python after the magic: the statement is migrated and the magic kept. The body of `%%time`,
  `%%timeit`, `%%capture`, `%%prun` and `%%debug` is Python; any other cell magic (`%%bash`,
  `%%writefile`, ...) is not. CUDA words in what is set aside are reported (NPU752 shell, NPU753
  magic), never rewritten.
- Cells are parsed one by one (a cell that does not parse is NPU751 and stays as it is), then
  migrated together as one module, so that a name imported in one cell is known in the next
  (`import torch` in cell 1, `torch.cuda.synchronize()` in cell 4).
- The shim import goes once into the first code cell that runs in the notebook's namespace (not
  a `%%timeit` cell), after its leading imports: `import npu_compat` for a notebook at the
  repository root; for a notebook in a subfolder a guarded import that appends the repository
  root computed from `os.getcwd()` (Jupyter runs a notebook in its own folder; there is no
  `__file__`). A notebook that already imports the shim there gets nothing new.
- The line of the .ipynb text that holds a cell's line is `file_line(...)`, for formats that
  point into the file.

Findings carry `cell`: the 1-based index of the cell among *all* cells of the notebook (markdown
and raw cells count; Jupyter's `In [n]` execution counts are not used), with line and column
within the cell's source. A file that is not valid JSON or not an nbformat 4 notebook is NPU001
(NPU002 when it is not UTF-8) and is left unchanged.
"""

from __future__ import annotations

import dataclasses
import json
import re
from dataclasses import dataclass, field
from json.decoder import scanstring
from typing import Any, Iterator, Optional

import libcst as cst

from . import catalogue, placement, suppress
from .engine import NPU_AWARE, NPU_AWARE_REASON, PREFILTER, already_imports_shim, import_line, migrate_source, pathological
from .findings import Finding
from .model import FileResult, Options, tool_finding

# ------------------------------------------------------------------ the JSON: where each source is


class NotebookError(Exception):
    """The file is not a notebook this module can migrate (the message says why)."""


_WS = re.compile(r"[ \t\n\r]*")
_DECODER = json.JSONDecoder()


def _skip(text: str, i: int) -> int:
    return _WS.match(text, i).end()


def _members(text: str, i: int) -> Iterator[tuple[str, int, int, Any]]:
    """(key, value start, value end, value) of the JSON object at text[i], in file order.

    Only called on text that `json.loads` accepted, so the grammar checks are assertions."""
    if text[i] != "{":
        raise NotebookError(f"expected an object at offset {i}")
    i = _skip(text, i + 1)
    if text[i] == "}":
        return
    while True:
        key, i = scanstring(text, i + 1)
        i = _skip(text, i)
        i = _skip(text, i + 1)  # the colon
        value, end = _DECODER.raw_decode(text, i)
        yield key, i, end, value
        i = _skip(text, end)
        if text[i] == "}":
            return
        i = _skip(text, i + 1)  # the comma


def _elements(text: str, i: int) -> Iterator[tuple[int, int, Any]]:
    """(start, end, value) of each element of the JSON array at text[i]."""
    if text[i] != "[":
        raise NotebookError(f"expected an array at offset {i}")
    i = _skip(text, i + 1)
    if text[i] == "]":
        return
    while True:
        value, end = _DECODER.raw_decode(text, i)
        yield i, end, value
        i = _skip(text, end)
        if text[i] == "]":
            return
        i = _skip(text, i + 1)


@dataclass
class SourceSpan:
    """Where one cell's `source` value sits in the notebook text."""

    start: int
    end: int
    value: Any  # as decoded: a list of strings or a string


@dataclass
class Document:
    text: str
    data: dict
    cells: list[tuple[dict, Optional[SourceSpan]]]  # every cell, in order, with its source's span
    ensure_ascii: bool  # non-ASCII written as \\u escapes


def _escapes_non_ascii(text: str) -> bool:
    """True when the file writes non-ASCII text as `\\u` escapes (json's ensure_ascii)."""
    if not text.isascii():
        return False
    for match in re.finditer(r"(\\+)u([0-9a-fA-F]{4})", text):
        if len(match.group(1)) % 2 == 1 and int(match.group(2), 16) > 0x7F:
            return True
    return False


def read_document(text: str) -> Document:
    start = 1 if text.startswith("\ufeff") else 0
    try:
        data = json.loads(text[start:])
    except json.JSONDecodeError as exc:
        raise NotebookError(f"not valid JSON: {exc}") from None
    except RecursionError:
        raise NotebookError("not valid JSON: nested too deeply") from None
    if not isinstance(data, dict) or not isinstance(data.get("cells"), list):
        raise NotebookError("not a Jupyter notebook (no list of cells)")
    if data.get("nbformat") != 4:
        raise NotebookError(f"nbformat {data.get('nbformat')!r} is not supported (nbformat 4 only)")
    cells: list[tuple[dict, Optional[SourceSpan]]] = []
    for key, value_start, _end, _value in _members(text, _skip(text, start)):
        if key != "cells":
            continue
        cells = []  # a repeated key: the last one wins, as in json.loads
        for cell_start, _cell_end, cell in _elements(text, value_start):
            span = None
            if isinstance(cell, dict):
                for cell_key, s, e, v in _members(text, cell_start):
                    if cell_key == "source":
                        span = SourceSpan(s, e, v)
            cells.append((cell, span))
    for number, (cell, span) in enumerate(cells, start=1):
        if not isinstance(cell, dict):
            raise NotebookError(f"cell {number} is not an object")
        value = cell.get("source", "")
        if not (isinstance(value, str) or (isinstance(value, list) and all(isinstance(v, str) for v in value))):
            raise NotebookError(f"cell {number}: source is neither a string nor a list of strings")
    return Document(text, data, cells, _escapes_non_ascii(text))


def file_line(text: str, cell: int, line: int) -> int:
    """The line of the .ipynb text that holds line `line` of cell `cell` (both 1-based), for
    formats that point into the file itself (github, sarif, gitlab, --diff-base). In a list
    source (nbformat's style) that is the JSON line of the source line; in a string source, the
    line where the string starts. NotebookError if the text is not a notebook."""
    doc = read_document(text)
    if not 1 <= cell <= len(doc.cells) or doc.cells[cell - 1][1] is None:
        raise NotebookError(f"no cell {cell} with a source")
    span = doc.cells[cell - 1][1]
    position = span.start
    if isinstance(span.value, list):
        seen = 1  # source line at which the current item starts
        for start, _end, value in _elements(text, span.start):
            position = start
            seen += value.count("\n")
            if seen > line:
                break
    return text.count("\n", 0, position) + 1


def _source_text(value: Any) -> str:
    return value if isinstance(value, str) else "".join(value)


def _json_lines(text: str) -> list[str]:
    """A cell source as nbformat stores it: lines with their endings."""
    return text.splitlines(keepends=True)


def serialise_source(doc: Document, span: SourceSpan, new: str) -> str:
    """The JSON text of a new `source` value, in the style of the one it replaces."""
    old_raw = doc.text[span.start:span.end]
    if isinstance(span.value, str):
        return json.dumps(new, ensure_ascii=doc.ensure_ascii)
    raw_items: list[str] = []
    gaps: list[str] = []  # text between `[` / items / `]`
    cursor = span.start + 1
    for s, e, _v in _elements(doc.text, span.start):
        gaps.append(doc.text[cursor:s])
        raw_items.append(doc.text[s:e])
        cursor = e
    gaps.append(doc.text[cursor:span.end - 1])
    known = {}
    for raw, value in zip(raw_items, span.value):
        known.setdefault(value, raw)  # unchanged lines keep their exact bytes
    items = [known.get(line) or json.dumps(line, ensure_ascii=doc.ensure_ascii) for line in _json_lines(new)]
    if not items:
        return "[]"
    if not raw_items:
        return old_raw[0] + ", ".join(items) + old_raw[-1]
    opening, closing = gaps[0], gaps[-1]
    separator = gaps[1] if len(gaps) > 2 else "," + opening if "\n" in opening else ", "
    return "[" + opening + separator.join(items) + closing + "]"


# ------------------------------------------------------------------ IPython syntax, set aside

ESCAPES = ("!", "%", "?", ",", ";", "/")  # IPython's escape characters at the start of a line
MAGIC_ASSIGN = re.compile(r"[A-Za-z_][\w.]*(?:[ \t]*,[ \t]*[A-Za-z_][\w.]*)*[ \t]*=[ \t]*(?P<escape>[!%])")
MAGIC_NAME = re.compile(r"%+(?P<name>[\w.-]*)")
SHELL_LINE_MAGICS = frozenset({"pip", "conda", "mamba", "sx", "system", "sc"})
# Line magics whose argument is a Python statement (after options): migrated, magic kept.
PYTHON_LINE_MAGIC = re.compile(
    r"(?P<prefix>%(?:time|timeit(?:[ \t]+-(?:[nrp][ \t]*\d+|[tcqo]+))*)[ \t]+)(?P<rest>\S.*)"
)
PYTHON_CELL_MAGICS = frozenset({"time", "timeit", "capture", "prun", "debug"})
SHELL_CELL_MAGICS = frozenset({"bash", "sh", "script", "sx", "system"})
DISPLAY_CELL_MAGICS = frozenset({"html", "markdown", "latex", "svg", "javascript", "js"})
TIMEIT_SETUP = re.compile(r"(?P<prefix>%%timeit(?:[ \t]+-(?:[nrp][ \t]*\d+|[tcqo]+))*[ \t]+)(?P<rest>\S.*)")
# What is reported in text that is not migrated (shell commands, magics): CUDA-only words.
CUDA_WORDS = re.compile(
    r"cuda|nccl|cudnn|nvidia|nvcc|nvtx|flash[-_]?attn|flash[-_]attention|xformers|\btriton\b"
    r"|\bapex\b|bitsandbytes|transformer[-_]engine|\bcupy|pycuda|\bvllm\b|\bcudf\b",
    re.IGNORECASE,
)
_LINE = re.compile(r"[^\r\n]*(?:\r\n|\r|\n)|[^\r\n]+\Z")


def physical_lines(text: str) -> list[str]:
    """Lines as Python's tokenizer sees them (\\n, \\r\\n, \\r), with their endings."""
    return _LINE.findall(text)


def _ending(line: str) -> str:
    return line[len(line.rstrip("\r\n")):]


def _escaped_extent(lines: list[str], first: int) -> int:
    """Last line of an IPython command: it continues only with a trailing backslash."""
    last = first
    while last + 1 < len(lines) and lines[last].rstrip("\r\n").endswith("\\"):
        last += 1
    return last


def _starts_escaped(line: str) -> bool:
    stripped = line.lstrip(" \t")
    return stripped[:1] in ESCAPES or bool(MAGIC_ASSIGN.match(stripped))


@dataclass
class Group:
    """A logical line: physical lines first..last (0-based)."""

    first: int
    last: int
    escaped: bool  # starts with IPython syntax (magic, shell, help, autocall, x = !cmd)
    help_end: bool = False  # ends with `?` (IPython help)
    open_end: bool = False  # the text ends inside a string, a bracket or after a backslash


def logical_lines(lines: list[str], start: int = 0) -> list[Group]:
    """Group physical lines into logical lines the way IPython finds its syntax.

    Python lines continue inside brackets, triple-quoted strings and after a backslash; a line
    that starts with IPython syntax continues only after a backslash."""
    groups: list[Group] = []
    number = start
    while number < len(lines):
        if _starts_escaped(lines[number]):
            last = _escaped_extent(lines, number)
            groups.append(Group(number, last, True))
            number = last + 1
            continue
        first = number
        depth, quote, last_char = 0, "", ""
        while number < len(lines):
            body = lines[number].rstrip("\r\n")
            i, n, continued = 0, len(body), False
            while i < n:
                c = body[i]
                if quote:
                    if c == "\\":
                        i += 2
                    elif body.startswith(quote, i):
                        i += len(quote)
                        quote = ""
                    else:
                        i += 1
                    continue
                if c == "#":
                    break
                if c in "\"'":
                    quote = c * 3 if body.startswith(c * 3, i) else c
                    i += len(quote)
                    last_char = c
                    continue
                if c in "([{":
                    depth += 1
                elif c in ")]}":
                    depth = max(0, depth - 1)
                elif c == "\\" and i == n - 1:
                    continued = True
                if not c.isspace():
                    last_char = c
                i += 1
            if len(quote) == 1 and i <= n:
                quote = ""  # an unterminated one-line string ends with its line
            number += 1
            if depth == 0 and not quote and not continued:
                break
        open_end = bool(depth or quote or continued)
        groups.append(Group(first, number - 1, False, help_end=last_char == "?", open_end=open_end))
    return groups


@dataclass(frozen=True)
class Report:
    """A finding about text set aside (not migrated), relative to the cell."""

    line: int
    column: int
    code: str
    what: str
    source: str


@dataclass
class Cell:
    """One code cell: its source, and the same as plain Python for the engine."""

    number: int  # 1-based among all cells
    original: str
    python: Optional[str] = None  # None: not Python (a cell magic such as %%bash)
    masks: dict[str, str] = field(default_factory=dict)  # sentinel -> original line (no ending)
    magics: dict[str, str] = field(default_factory=dict)  # sentinel -> magic prefix ("%time ")
    reports: list[Report] = field(default_factory=list)
    namespace: bool = True  # runs in the notebook's namespace (not %%timeit)
    header: bool = False  # starts with a cell magic: nothing may go above it
    failed: Optional[Finding] = None  # did not parse (NPU751)
    open_end: bool = False  # ends inside a string or bracket: must not run into the next cell
    keep_magics: bool = False  # set aside %time lines too (after a failed round trip)


def _shorten(text: str, limit: int = 80) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _without_comment(line: str) -> str:
    """A command line without its shell comment (`#` at a word start, outside quotes)."""
    quote = ""
    for i, c in enumerate(line):
        if quote:
            quote = "" if c == quote else quote
        elif c in "'\"":
            quote = c
        elif c == "#" and (i == 0 or line[i - 1].isspace()):
            return line[:i]
    return line


def _report_words(cell: Cell, lines: list[str], first: int, last: int, code: str) -> None:
    """One report for the first CUDA word in lines first..last (a command set aside)."""
    for number in range(first, last + 1):
        match = CUDA_WORDS.search(_without_comment(lines[number]))
        if match:
            text = " ".join(lines[k].strip() for k in range(first, last + 1))
            cell.reports.append(Report(number + 1, match.start() + 1, code, f"`{_shorten(text)}`", _shorten(text, 200)))
            return


def _kind(stripped: str) -> str:
    """What a line starting with IPython syntax is: shell, magic, help or autocall."""
    assign = MAGIC_ASSIGN.match(stripped)
    if assign:
        stripped = stripped[assign.start("escape"):]
    if stripped.startswith("!"):
        return "shell"
    if stripped.startswith("%"):
        return "shell" if MAGIC_NAME.match(stripped).group("name") in SHELL_LINE_MAGICS else "magic"
    return "help" if stripped.startswith("?") else "autocall"


def _parses_alone(code: str) -> bool:
    if pathological(code.encode("utf-8", "surrogatepass")) is not None:
        return False  # (never handed to libcst's parser: it would crash or take minutes)
    try:
        cst.parse_module(code + "\n")
    except (cst.ParserSyntaxError, SyntaxError, ValueError, LookupError, RecursionError):
        return False
    return True


class Masker:
    """Turns cells into Python with placeholders, and back. Sentinels are unique per notebook."""

    def __init__(self, notebook_text: str) -> None:
        token = "__npu_nb_"
        while token in notebook_text:
            token += "x"
        self.token = token
        self.restore_mask = re.compile(rf"^(?P<indent>[ \t]*)pass  # (?P<id>{token}m\d+_\d+)$")
        self.restore_magic = re.compile(rf"^(?P<code>.*)  # (?P<id>{token}p\d+_\d+)$")

    def _mask_lines(self, cell: Cell, lines: list[str], first: int, last: int, kind: str) -> None:
        """Replace lines first..last by `pass` placeholders at the first line's indentation."""
        if kind in ("shell", "magic", "autocall"):
            _report_words(cell, lines, first, last, "NPU752" if kind == "shell" else "NPU753")
        indent = lines[first][: len(lines[first]) - len(lines[first].lstrip(" \t"))]
        for number in range(first, last + 1):
            sentinel = f"{self.token}m{cell.number}_{number}"
            cell.masks[sentinel] = lines[number].rstrip("\r\n")
            lines[number] = f"{indent}pass  # {sentinel}{_ending(lines[number])}"

    def _python_magic(self, cell: Cell, lines: list[str], number: int, pattern: re.Pattern) -> bool:
        """Set a `%time stmt` line up as `stmt` (the magic kept aside); False if it is not Python."""
        body = lines[number].rstrip("\r\n")
        stripped = body.lstrip(" \t")
        indent = body[: len(body) - len(stripped)]
        match = pattern.fullmatch(stripped)
        if not match or body.endswith("\\") or not _parses_alone(match.group("rest")):
            return False
        sentinel = f"{self.token}p{cell.number}_{number}"
        cell.magics[sentinel] = match.group("prefix")
        lines[number] = f"{indent}{match.group('rest')}  # {sentinel}{_ending(lines[number])}"
        return True

    def mask(self, cell: Cell) -> None:
        """Fill cell.python, masks, magics and reports from cell.original."""
        cell.python, cell.masks, cell.magics, cell.reports = None, {}, {}, []
        lines = physical_lines(cell.original)
        start = next((n for n, line in enumerate(lines) if line.strip()), len(lines))
        if start < len(lines) and lines[start].startswith("%%"):
            name = MAGIC_NAME.match(lines[start]).group("name")
            cell.header = True
            if name not in PYTHON_CELL_MAGICS:
                if name.lower() not in DISPLAY_CELL_MAGICS and not name.endswith("?"):
                    code = "NPU752" if name in SHELL_CELL_MAGICS else "NPU753"
                    for number in range(start, len(lines)):
                        _report_words(cell, lines, number, number, code)
                return
            cell.namespace = name != "timeit"
            header_last = _escaped_extent(lines, start)
            if not (name == "timeit" and header_last == start and not cell.keep_magics
                    and self._python_magic(cell, lines, start, TIMEIT_SETUP)):
                self._mask_lines(cell, lines, start, header_last, "header")
            start = header_last + 1
        groups = logical_lines(lines, start)
        cell.open_end = bool(groups) and groups[-1].open_end
        for group in groups:
            if group.escaped:
                kind = _kind(lines[group.first].lstrip(" \t"))
                if (kind == "magic" and group.first == group.last and not cell.keep_magics
                        and self._python_magic(cell, lines, group.first, PYTHON_LINE_MAGIC)):
                    continue
                self._mask_lines(cell, lines, group.first, group.last, kind)
            elif group.help_end:
                self._mask_lines(cell, lines, group.first, group.last, "help")
        cell.python = "".join(lines)

    def restore(self, cell: Cell, migrated: str) -> Optional[str]:
        """The migrated Python with the IPython syntax put back; None if a sentinel went missing."""
        seen: set[str] = set()
        out = []
        for line in physical_lines(migrated):
            body, ending = line.rstrip("\r\n"), _ending(line)
            if self.token in body:
                mask = self.restore_mask.match(body)
                magic = None if mask else self.restore_magic.match(body)
                if mask and mask.group("id") in cell.masks and mask.group("id") not in seen:
                    seen.add(mask.group("id"))
                    body = cell.masks[mask.group("id")]
                elif magic and magic.group("id") in cell.magics and magic.group("id") not in seen:
                    seen.add(magic.group("id"))
                    code = magic.group("code")
                    stripped = code.lstrip(" \t")
                    body = code[: len(code) - len(stripped)] + cell.magics[magic.group("id")] + stripped
                    if not _parses_alone(stripped):
                        return None
                else:
                    return None
            out.append(body + ending)
        if seen != set(cell.masks) | set(cell.magics):
            return None
        return "".join(out)


# ------------------------------------------------------------------ migration


def _cell_parse_finding(relpath: str, cell: Cell) -> Optional[Finding]:
    refused = pathological(cell.python.encode("utf-8"))  # what would crash libcst's parser
    try:
        if refused is not None:
            raise SyntaxError(refused[0], (None, refused[1], 1, None))
        cst.parse_module(cell.python)
    except cst.ParserSyntaxError as exc:
        line, column, detail = exc.raw_line or 1, exc.raw_column + 1, exc.message
        where = re.search(r"error at (\d+):(\d+)", exc.message)  # the native parser's position
        if where and column == 1:
            line = min(int(where.group(1)), max(1, len(physical_lines(cell.python))))
            column = int(where.group(2)) + 1 if int(where.group(1)) == line else 1
    except (SyntaxError, ValueError, LookupError, RecursionError) as exc:
        line, column, detail = 1, 1, f"{type(exc).__name__}: {exc}"
        if refused is not None:
            line, detail = refused[1], refused[0]
    else:
        return None
    rule = catalogue.rule("NPU751")
    return Finding(relpath, line, column, "NPU751", f"{rule.message}: {detail}", False, "", cell.number)


@dataclass
class Round:
    """One engine run over the Python cells, split back into cells."""

    result: FileResult
    regions: dict[int, tuple[int, int]]  # cell number -> (first line, line count) in the module
    migrated: dict[int, str]  # cell number -> migrated Python (placeholders still in)


def _run_engine(cells: list[Cell], masker: Masker, relpath: str, options: Options) -> Round:
    # The module starts with the shim import, so the engine adds none: the notebook gets its own.
    scaffold = import_line(placement.spec_for(options, relpath)) + "\n"
    parts = [scaffold]
    regions = {}
    line = 2
    for cell in cells:
        parts.append(f"pass  # {masker.token}c{cell.number}\n")
        body = cell.python if not cell.python or cell.python.endswith(("\n", "\r")) else cell.python + "\n"
        parts.append(body)
        count = len(physical_lines(body))
        regions[cell.number] = (line + 1, count)
        line += 1 + count
    result = migrate_source("".join(parts).encode("utf-8"), relpath, options)
    migrated = {}
    if result.new is not None:
        text = result.new.decode("utf-8")
        current: Optional[int] = None
        chunks: dict[int, list[str]] = {}
        for index, physical in enumerate(physical_lines(text)):
            marker = re.fullmatch(rf"pass  # {masker.token}c(\d+)", physical.rstrip("\r\n"))
            if marker:
                current = int(marker.group(1))
                chunks[current] = []
            elif current is not None:
                chunks[current].append(physical)
            elif index > 0 or physical != scaffold:
                raise NotebookError("the engine changed the start of the module")  # cannot happen
        for cell in cells:
            new = "".join(chunks.get(cell.number, []))
            if not (cell.python.endswith(("\n", "\r")) or not cell.python) and new.endswith("\n"):
                new = new[:-1]
            migrated[cell.number] = new
    else:
        migrated = {cell.number: cell.python for cell in cells}
    return Round(result, regions, migrated)


def _cell_of(round_: Round, line: int) -> Optional[tuple[int, int]]:
    """(cell number, line within the cell) of a line of the engine's module."""
    for number, (first, count) in round_.regions.items():
        if first <= line < first + count:
            return number, line - first + 1
    return None


def _migrate_cells(cells: list[Cell], masker: Masker, relpath: str, options: Options) -> tuple[Optional[Round], list[Finding]]:
    """Run the engine until every Python cell parses and round-trips; failed cells drop out."""
    failures: list[Finding] = []
    for cell in cells:
        if cell.python is not None and cell.open_end:  # joined, it would swallow the next cells
            cell.failed = _cell_parse_finding(relpath, cell)
    for _attempt in range(2 * len(cells) + 2):
        live = [c for c in cells if c.python is not None and c.failed is None]
        if not live:  # every code cell failed to parse: each (with a trigger word) is still reported
            failures.extend(_reported_failures(cells, options))
            return None, failures
        round_ = _run_engine(live, masker, relpath, options)
        parse_error = next((f for f in round_.result.findings if f.code in ("NPU001", "NPU002")), None)
        if parse_error is not None:
            culprits = 0
            for cell in live:
                cell.failed = _cell_parse_finding(relpath, cell)
                culprits += cell.failed is not None
            if not culprits:  # the cells parse alone but not together: blame the reported line
                where = _cell_of(round_, parse_error.line)
                culprit = next((c for c in live if where and c.number == where[0]), live[-1])
                rule = catalogue.rule("NPU751")
                culprit.failed = Finding(relpath, where[1] if where else 1, 1, "NPU751",
                                         f"{rule.message}: {parse_error.message}", False, "", culprit.number)
            continue
        retry = False
        for cell in live:
            if masker.restore(cell, round_.migrated[cell.number]) is not None:
                continue
            retry = True
            if cell.magics and not cell.keep_magics:  # a %time statement did not survive: set it aside
                cell.keep_magics = True
                masker.mask(cell)
            else:
                rule = catalogue.rule("NPU751")
                cell.failed = Finding(relpath, 1, 1, "NPU751", f"{rule.message}: its IPython syntax "
                                      "could not be restored after migration", False, "", cell.number)
        if not retry:
            failures.extend(_reported_failures(cells, options))
            return round_, failures
    raise NotebookError("migration did not settle")  # cannot happen: each retry drops or masks a cell


def _reported_failures(cells, options) -> list:
    """NPU751 for the cells that failed. Like a file without trigger words, a broken cell without
    them is not worth a finding (and a second run, which may not parse at all, must report the same)."""
    return [c.failed for c in cells
            if c.failed is not None and "NPU751" in options.enabled
            and PREFILTER.search(c.python.encode("utf-8"))]


def _placeholder(stmt: cst.CSTNode, masker: Masker) -> bool:
    return (isinstance(stmt, cst.SimpleStatementLine) and stmt.trailing_whitespace.comment is not None
            and stmt.trailing_whitespace.comment.value.startswith(f"# {masker.token}m"))


def shim_import_code(spec, path: str) -> str:
    """`import npu_compat` (or `from mypkg import npu_compat`), or for a notebook whose folder
    is not where the shim is importable from, a guarded import that appends `path` (from the
    notebook's working folder) to sys.path."""
    line = import_line(spec)
    if not path:
        return f"{line}\n"
    parts = ", ".join(f'"{part}"' for part in path.split("/"))
    error = "ImportError" if spec.package else "ModuleNotFoundError"
    what = "the package" if spec.package else "the repository root"
    return (
        f"try:\n"
        f"    {line}\n"
        f"except {error}:  # notebook in a subfolder: make {what} importable (npu-migrate)\n"
        f"    import os\n"
        f"    import sys\n"
        f"\n"
        f"    sys.path.append(os.path.abspath(os.path.join(os.getcwd(), {parts})))\n"
        f"    {line}\n"
    )


def add_shim_import(code: str, cell: Cell, masker: Masker, spec, path: str) -> str:
    """Insert the shim import after the cell's leading imports (magics among them are skipped),
    never above the cell's magic, never below a trailing magic whose value the cell displays."""
    missing_newline = bool(code) and not code.endswith(("\n", "\r"))
    module = cst.parse_module(code + "\n" if missing_newline else code)
    if already_imports_shim(module, spec.name):
        return code
    body = list(module.body)
    index = 1 if cell.header and body else 0
    for position, stmt in enumerate(body):
        if position < index:
            continue
        if isinstance(stmt, cst.SimpleStatementLine) and all(
            isinstance(s, (cst.Import, cst.ImportFrom)) for s in stmt.body
        ):
            index = position + 1
        elif not _placeholder(stmt, masker):
            break
    body[index:index] = [cst.parse_statement(shim_import_code(spec, path))]
    new = module.with_changes(body=body).code
    return new[:-1] if missing_newline and new.endswith("\n") else new


def _notebook_skip(cells: list[Cell], relpath: str, options: Options) -> Optional[str]:
    """Why the whole notebook is left alone, as the engine says it for a file; None to migrate."""
    joined = "\n".join(c.original for c in cells).encode("utf-8")
    if not PREFILTER.search(joined):
        return "no CUDA trigger words"
    if NPU_AWARE.search(joined):
        return NPU_AWARE_REASON
    if suppress.parse(joined).skips_file:
        return "npu-migrate: skip-file comment"
    return None


def _lone_surrogate(relpath: str, cell: Cell) -> Optional[Finding]:
    """NPU002 for a code cell whose JSON holds a lone surrogate escape ("\\ud800"): json
    decodes it, but it is not text, and no Python source (nor UTF-8) can hold it."""
    try:
        cell.original.encode("utf-8")
    except UnicodeEncodeError as exc:
        before = cell.original[:exc.start]
        line = before.count("\n") + 1
        column = exc.start - before.rfind("\n")
        char = f"\\u{ord(cell.original[exc.start]):04x}"
        finding = tool_finding("NPU002", relpath, f"code cell {cell.number} holds a lone surrogate ({char}), "
                                "which is not Unicode text; the notebook was left unchanged", line, column)
        return dataclasses.replace(finding, cell=cell.number)
    return None


def _language(data: dict) -> str:
    metadata = data.get("metadata") if isinstance(data.get("metadata"), dict) else {}
    for key, name in (("language_info", "name"), ("kernelspec", "language")):
        section = metadata.get(key)
        if isinstance(section, dict) and isinstance(section.get(name), str):
            return section[name].lower()
    return "python"


def migrate_notebook(source: bytes, relpath: str, options: Options) -> FileResult:
    """Migrate one notebook's bytes. Never raises for bad input: problems become findings.

    Only the `source` values of changed code cells change; findings carry `cell`, the 1-based
    index of the cell among all cells, with line and column within that cell."""
    result = FileResult(relpath=relpath, original=source)
    try:
        text = source.decode("utf-8")
    except UnicodeDecodeError as exc:
        result.findings.append(tool_finding("NPU002", relpath, f"a notebook must be UTF-8: {exc}"))
        return result
    try:
        doc = read_document(text)
    except NotebookError as exc:
        result.findings.append(tool_finding("NPU001", relpath, str(exc)))
        return result
    language = _language(doc.data)
    if not language.startswith(("python", "ipython")):
        result.skipped = f"not a Python notebook ({language})"
        return result

    masker = Masker(text)
    cells: list[Cell] = []
    for number, (cell_data, span) in enumerate(doc.cells, start=1):
        if cell_data.get("cell_type") == "code" and span is not None:
            cell = Cell(number, _source_text(span.value))
            unencodable = _lone_surrogate(relpath, cell)
            if unencodable is not None:
                result.findings.append(unencodable)
                return result
            masker.mask(cell)
            cells.append(cell)
    reason = _notebook_skip(cells, relpath, options)
    if reason:
        result.skipped = reason
        return result

    try:
        findings, new_sources = _migrate(doc, cells, masker, relpath, options, result)
        new_text = _splice(doc, new_sources) if new_sources else None
    except (NotebookError, cst.ParserSyntaxError) as exc:  # a bug of ours: say so, write nothing
        result.findings = [tool_finding("NPU001", relpath, f"internal error, notebook left unchanged: {exc}")]
        return result
    result.findings = sorted(findings)
    if new_text is not None:
        result.new = new_text.encode("utf-8")
    return result


def _migrate(doc: Document, cells: list[Cell], masker: Masker, relpath: str, options: Options,
             result: FileResult) -> tuple[list[Finding], dict[int, str]]:
    """(findings, new source text by cell number) of the notebook's code cells."""
    round_, failures = _migrate_cells(cells, masker, relpath, options)
    findings: list[Finding] = list(failures)
    new_sources: dict[int, str] = {}
    if round_ is not None:
        result.suppressed += round_.result.suppressed
        for f in round_.result.findings:
            where = _cell_of(round_, f.line)
            if where is None:
                continue  # a line of the scaffolding (cannot carry a finding)
            number, line = where
            cell = next(c for c in cells if c.number == number)
            column = f.column
            original_line = physical_lines(cell.python)[line - 1]
            sentinel = re.search(rf"  # ({masker.token}p\d+_\d+)$", original_line.rstrip("\r\n"))
            if sentinel:  # a %time line: columns were counted without the magic
                indent = len(original_line) - len(original_line.lstrip(" \t"))
                if column > indent:
                    column += len(cell.magics[sentinel.group(1)])
            findings.append(dataclasses.replace(f, line=line, column=column, cell=number))
        migrated = dict(round_.migrated)
        live = [c for c in cells if c.python is not None and c.failed is None]
        changed = [c for c in live if migrated[c.number] != c.python]
        shim_used = re.compile(rf"(?<![\w.]){re.escape(options.shim_name)}\s*\.")
        if changed and any(shim_used.search(migrated[c.number]) for c in changed):
            target = next((c for c in live if c.namespace and c.python.strip()), None)
            if target is not None:
                spec = placement.spec_for(options, relpath)
                migrated[target.number] = add_shim_import(
                    migrated[target.number], target, masker, spec, spec.bootstrap(True))
        for cell in live:
            if migrated[cell.number] != cell.python:
                restored = masker.restore(cell, migrated[cell.number])
                if restored is None:  # checked in _migrate_cells, before the shim import went in
                    raise NotebookError(f"cell {cell.number}: IPython syntax lost after the shim import")
                if restored != cell.original:
                    new_sources[cell.number] = restored
    findings.extend(_reported(cells, relpath, options, result))
    return findings, new_sources


def _reported(cells: list[Cell], relpath: str, options: Options, result: FileResult) -> list[Finding]:
    """Findings about text set aside, minus suppressed ones (a comment on the line, or skip-file)."""
    whole = suppress.parse("\n".join(c.original for c in cells).encode("utf-8"))
    out = []
    for cell in cells:
        if not cell.reports:
            continue
        local = suppress.parse(cell.original.encode("utf-8"))
        for report in cell.reports:
            if report.code not in options.enabled:
                continue
            # line 0 holds no comment: whole.suppresses(code, 0) asks for `skip-file[CODE]` only
            if local.suppresses(report.code, report.line) or whole.suppresses(report.code, 0):
                result.suppressed += 1
                continue
            rule = catalogue.rule(report.code)
            message = rule.message.format(what=report.what)
            out.append(Finding(relpath, report.line, report.column, report.code, message, False,
                               report.source, cell.number))
    return out


def _splice(doc: Document, new_sources: dict[int, str]) -> str:
    """The notebook text with the given cells' sources replaced, and nothing else changed."""
    text = doc.text
    expected = json.loads(text.removeprefix("\ufeff"))
    edits = []
    for number, new in new_sources.items():
        _cell, span = doc.cells[number - 1]
        edits.append((span.start, span.end, serialise_source(doc, span, new)))
        expected["cells"][number - 1]["source"] = new if isinstance(span.value, str) else _json_lines(new)
    for start, end, value in sorted(edits, reverse=True):
        text = text[:start] + value + text[end:]
    check = json.loads(text.removeprefix("\ufeff"))
    if json.dumps(check, sort_keys=True) != json.dumps(expected, sort_keys=True):
        raise NotebookError("re-serialised notebook differs from the expected one")  # a bug if it happens
    return text
