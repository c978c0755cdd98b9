"""Hot slices: hand libcst only the statements a rule can act on.

libcst builds a Python object for every token of a file, which costs about ten times what
CPython's own parser (`ast`) costs. Most statements of a real file cannot matter to any rule:
their text holds no trigger word and no name bound to a CUDA module, so the Migrator would skip
them anyway (see `Migrator.on_visit`). This module finds those *cold* statements with `ast`, at
every nesting level, and replaces each by a one-name placeholder that spans the same lines:

    __npu_migrate_cold_7__(<the statement's line endings>)

libcst then parses the reduced text, the rules run on it unchanged, and the placeholders are
spliced back, byte for byte, into the generated code. Line numbers are kept, so findings point
at the original lines. Anything unusual (no `ast` parse, non-UTF-8 source, a placeholder that
did not come back exactly once) makes the caller fall back to parsing the whole file, so the
result is always the one a whole-file parse gives; `tests/test_hotslice.py` checks that on every
fixture, and `scripts/robustness.py --compare-slices` on the torch tree.

What keeps a statement real (never a placeholder):
- its text, with the comment lines around it, has a trigger word or a CUDA alias name;
- at module level: imports, statements holding imports (the shim's bootstrap `try`), the
  docstring (they decide where the shim import goes);
- it binds a name that an import of torch binds (the Migrator forgets the alias then);
- it shares a line with another statement (`a = 1; b = 2`, `if x: y`), or is an `elif`.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from typing import Optional

PLACEHOLDER_PREFIX = b"__npu_migrate_cold_"
_PLACEHOLDER_RE = re.compile(rb"__npu_migrate_cold_(\d+)__\(")
_ALIAS_QUALNAME = re.compile(r"cuda|cudnn|nccl|nvtx")
_COOKIE = re.compile(rb"^[ \t\f]*#.*?coding[:=][ \t]*([-\w.]+)")
# Statements smaller than this are not worth a placeholder of their own (their parent may be).
MIN_LINES = 2


@dataclass
class Slices:
    reduced: bytes
    chunks: dict[int, bytes]  # placeholder number -> the original statement (indentation excluded)
    cold_lines: int


def _is_utf8(source: bytes) -> bool:
    for line in source.splitlines()[:2]:
        match = _COOKIE.match(line)
        if match:
            return match.group(1).lower().replace(b"_", b"-") in (b"utf-8", b"utf8")
    return True


def _bound_names(target: ast.AST) -> list[str]:
    if isinstance(target, ast.Name):
        return [target.id]
    if isinstance(target, (ast.Tuple, ast.List)):
        return [n for element in target.elts for n in _bound_names(element)]
    return []


def _binds(stmt: ast.stmt) -> list[str]:
    """Names a skipped statement rebinds, as `Migrator._shadow_statement` sees them."""
    if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return [stmt.name]
    if isinstance(stmt, ast.Assign):
        return [n for t in stmt.targets for n in _bound_names(t)]
    if isinstance(stmt, (ast.AnnAssign, ast.AugAssign)):
        return _bound_names(stmt.target)
    return []


def _import_names(tree: ast.Module, triggers: re.Pattern) -> tuple[set[str], set[str]]:
    """(names bound by imports of torch, names that make a statement hot without a trigger word).

    The second set is a superset of what the rules track: every name an import binds from a
    module path with a trigger word in it (`from torch.cuda import synchronize as sync`,
    `from triton import jit`), unless the name itself has one.
    """
    torch_names: set[str] = set()
    alias_words: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            pairs = [(a.asname or a.name.split(".")[0], a.name) for a in node.names]
            roots = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            module = node.module or ""
            pairs = [(a.asname or a.name, f"{module}.{a.name}") for a in node.names]
            roots = [module] if node.level == 0 else []
        else:
            continue
        if any(r == "torch" or r.startswith("torch.") for r in roots):
            torch_names.update(local for local, _ in pairs)
        for local, qual in pairs:
            if (triggers.search(qual) or _ALIAS_QUALNAME.search(qual)) and not triggers.search(local):
                alias_words.add(local)
    return torch_names, alias_words


def _bodies(stmt: ast.stmt) -> list[list[ast.stmt]]:
    out = []
    for name in ("body", "orelse", "finalbody"):
        value = getattr(stmt, name, None)
        if isinstance(value, list) and value and isinstance(value[0], ast.stmt):
            out.append(value)
    for handler in getattr(stmt, "handlers", ()) or ():
        out.append(handler.body)
    for case in getattr(stmt, "cases", ()) or ():
        out.append(case.body)
    return out


def _start(stmt: ast.stmt) -> int:
    decorators = getattr(stmt, "decorator_list", None)
    if decorators:
        return min(stmt.lineno, min(d.lineno for d in decorators))
    return stmt.lineno


class _Reducer:
    def __init__(self, lines: list[bytes], hot: re.Pattern, alias_re: Optional[re.Pattern],
                 torch_names: set[str]) -> None:
        self.lines = lines
        self.hot = hot
        self.alias_re = alias_re
        self.torch_names = torch_names
        self.replace: dict[int, int] = {}  # first line (0-based) -> placeholder number
        self.spans: list[tuple[int, int, int, ast.stmt]] = []  # (first, last, number, stmt)
        self.cold_lines = 0

    def region_is_hot(self, first: int, last: int) -> bool:
        text = b"".join(self.lines[first:last + 1]).decode("utf-8", "replace")
        return bool(self.hot.search(text) or (self.alias_re is not None and self.alias_re.search(text)))

    def body(self, stmts: list[ast.stmt], before: int, after: int, top: bool) -> None:
        """`before`/`after`: 1-based lines that bound the comment region around the block."""
        for index, stmt in enumerate(stmts):
            first = _start(stmt)
            last = stmt.end_lineno or stmt.lineno
            prev_end = stmts[index - 1].end_lineno if index else before
            next_start = _start(stmts[index + 1]) if index + 1 < len(stmts) else after
            # comment lines on either side belong to this statement for libcst, or to a neighbour
            if self.region_is_hot(prev_end, next_start - 2):
                if _bodies(stmt):
                    self.compound(stmt, first, last, next_start)
                continue
            if not self.eligible(stmt, index, stmts, first, last, prev_end, next_start, top):
                continue
            number = len(self.spans)
            self.spans.append((first - 1, last - 1, number, stmt))
            self.cold_lines += last - first + 1

    def compound(self, stmt: ast.stmt, first: int, last: int, after: int) -> None:
        blocks = sorted(_bodies(stmt), key=lambda block: _start(block[0]))
        before = first  # the header; comment lines after it go to the block's first statement
        for index, block in enumerate(blocks):
            block_after = _start(blocks[index + 1][0]) if index + 1 < len(blocks) else after
            self.body(block, before, block_after, top=False)
            before = block[-1].end_lineno or block[-1].lineno

    def eligible(self, stmt, index, stmts, first, last, prev_end, next_start, top) -> bool:
        if last - first + 1 < MIN_LINES:
            return False
        if prev_end >= first or next_start <= last:
            return False  # shares a line with a neighbour
        line = self.lines[first - 1]
        indent = line[:stmt.col_offset]
        if indent.strip():
            return False
        rest = line[stmt.col_offset:]
        if getattr(stmt, "decorator_list", None):
            if not rest.startswith(b"@"):
                return False
        elif rest.startswith(b"elif"):
            return False
        after_last = self.lines[last - 1][(stmt.end_col_offset or 0):]
        if after_last.strip() and not after_last.strip().startswith(b"#"):
            return False  # something follows the statement on its last line
        if self.lines[last - 1].endswith(b"\\\n") or self.lines[last - 1].endswith(b"\\\r\n"):
            return False
        if top:
            if isinstance(stmt, (ast.Import, ast.ImportFrom)):
                return False
            if index == 0 and isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Constant):
                return False
            if any(isinstance(n, (ast.Import, ast.ImportFrom)) for n in ast.walk(stmt)):
                return False
        if any(name in self.torch_names for name in _binds(stmt)):
            return False
        return True


def _ending(line: bytes) -> bytes:
    if line.endswith(b"\r\n"):
        return b"\r\n"
    if line.endswith(b"\n"):
        return b"\n"
    return b""


def reduce(source: bytes, hot: re.Pattern, triggers: re.Pattern) -> Optional[Slices]:
    """The reduced text, or None when slicing would not help or is not safe for this file."""
    if PLACEHOLDER_PREFIX in source or b"\f" in source or b"\x00" in source:
        return None
    body = source[3:] if source.startswith(b"\xef\xbb\xbf") else source
    if not _is_utf8(body):
        return None
    if b"\r" in body.replace(b"\r\n", b""):
        return None  # old Mac line endings: ast and bytes.splitlines may disagree
    try:
        tree = ast.parse(body)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None
    lines = body.splitlines(keepends=True)
    torch_names, alias_words = _import_names(tree, triggers)
    alias_re = re.compile(r"\b(" + "|".join(sorted(map(re.escape, alias_words))) + r")\b") if alias_words else None
    reducer = _Reducer(lines, hot, alias_re, torch_names)
    reducer.body(tree.body, 0, len(lines) + 2, top=True)
    if not reducer.spans:
        return None
    out = list(lines)
    chunks: dict[int, bytes] = {}
    for first, last, number, stmt in reducer.spans:
        indent = lines[first][:stmt.col_offset]
        original = b"".join(lines[first:last + 1])
        ending = _ending(lines[last])
        chunks[number] = original[len(indent):len(original) - len(ending)]
        inner = b"".join(_ending(line) for line in lines[first:last])
        out[first] = indent + PLACEHOLDER_PREFIX + str(number).encode() + b"__(" + inner + b")" + ending
        for k in range(first + 1, last + 1):
            out[k] = b""
    prefix = source[:len(source) - len(body)]
    return Slices(prefix + b"".join(out), chunks, reducer.cold_lines)


def restore(generated: bytes, slices: Slices) -> Optional[bytes]:
    """Put the original statements back; None if a placeholder did not survive exactly once."""
    pieces = []
    position = 0
    seen = set()
    for match in _PLACEHOLDER_RE.finditer(generated):
        number = int(match.group(1))
        if number in seen or number not in slices.chunks:
            return None
        seen.add(number)
        end = generated.find(b")", match.end())
        if end < 0 or generated[match.end():end].strip(b"\r\n"):
            return None
        pieces.append(generated[position:match.start()])
        pieces.append(slices.chunks[number])
        position = end + 1
    if len(seen) != len(slices.chunks):
        return None
    pieces.append(generated[position:])
    return b"".join(pieces)


def restore_text(text: str, slices: Slices) -> str:
    """The same for a piece of generated text (a finding's source); unknown placeholders stay."""
    def put_back(match: re.Match) -> str:
        number = int(match.group(1))
        chunk = slices.chunks.get(number)
        return chunk.decode("utf-8", "replace") if chunk is not None else match.group(0)

    return re.sub(r"__npu_migrate_cold_(\d+)__\([\r\n]*\)", put_back, text)
