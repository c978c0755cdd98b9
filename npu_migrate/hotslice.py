"""Hot slices: hand libcst only the statements a rule can act on.

libcst builds a Python object for every token of a file, which costs about ten times what
CPython's own parser (`ast`) costs. Most statements of a real file cannot matter to any rule:
their text holds no trigger word and no name bound to a CUDA module, so the rule dispatcher would skip
them anyway (see `Dispatcher.on_visit`). This module finds those *cold* statements with `ast`, at
every nesting level, and replaces each run of consecutive cold statements of a block by one
one-name placeholder that spans the same lines, its line endings in a triple-quoted string:

    __npu_migrate_cold_7__(<three double quotes, the line endings, three double quotes>)

libcst then parses the reduced text, the rules run on it unchanged, and the placeholders are
spliced back, byte for byte, into the generated code. Line numbers are kept, so findings point
at the original lines. Anything unusual (no `ast` parse, non-UTF-8 source, a placeholder that
did not come back exactly once) makes the caller fall back to parsing the whole file, so the
result is always the one a whole-file parse gives; `tests/test_hotslice.py` checks that on every
fixture, and `scripts/robustness.py --compare-slices` on the torch tree.

What keeps a statement real (never inside a placeholder):
- its text, with the comment lines around it, matches a hot pattern (the rule dispatcher's trigger
  words and extra words) or holds a name the rule dispatcher may come to treat as hot: a name bound by
  an import from a module path with a trigger word in it, or assigned the result of a tracked
  getter (`props = torch.cuda.get_device_properties(0)`: `props.warp_size` is hot);
- at module level: imports, the docstring, and the imports directly in a module-level `try`
  (they decide where the shim import goes and whether it is there already); a module-level
  statement holding imports is kept but its blocks are sliced;
- it binds a name that an import of torch binds (the rule dispatcher forgets the alias then).
A run of cold statements is cut back until it starts and ends on lines of its own (`a = 1; b = 2`
next to a hot statement, `if x: y`, an `elif`, a trailing backslash), and spans MIN_LINES.

Inside the statements that stay, the elements of list, tuple, set and dict displays that no rule
can read are left out the same way (`_Data`): the tables of numbers or of calls that fill much
of torch's test code. Whatever is left out, the rule dispatcher sees the text it would see without
slices wherever a rule reads text (`SourceMap.original_text_of`).
"""

from __future__ import annotations

import ast
import bisect
import functools
import re
from dataclasses import dataclass
from itertools import accumulate
from typing import Callable, Iterable, Optional, Sequence, Union

from . import astcache

PLACEHOLDER_PREFIX = b"__npu_migrate_cold_"
# The line endings go inside a string: one token for libcst, where bare line breaks inside the
# brackets would each become a node of their own (EmptyLine, Newline, whitespace). Spaces after
# them keep the columns of what follows a placeholder on its last line.
_PLACEHOLDER_RE = re.compile(rb'__npu_migrate_cold_(\d+)__\("""[\r\n]* *"""\)')
_PLACEHOLDER_TEXT_RE = re.compile(r'__npu_migrate_cold_(\d+)__\("""[\r\n]* *"""\)')
_ALIAS_QUALNAME = re.compile(r"cuda|cudnn|nccl|nvtx")
_COOKIE = re.compile(rb"^[ \t\f]*#.*?coding[:=][ \t]*([-\w.]+)")
# Runs of statements shorter than this are not worth a placeholder (their parent may be).
MIN_LINES = 2


@dataclass
class Slices:
    reduced: bytes
    chunks: dict[int, bytes]  # placeholder number -> the original statements (first indentation excluded)
    cold_lines: int


@dataclass(frozen=True)
class RuleReads:
    """What the rules read besides the hot patterns, from the rule tables (sweep.rule_reads)."""

    getters: tuple = ()  # calls whose result the rule dispatcher follows by the name it is assigned to
    captures: tuple = ()  # context managers whose whole `with` body the rule dispatcher reads
    qualnames: tuple = ()  # names a rule acts on in expressions (`torch.distributed.new_subgroups`)
    string_may_matter: Optional[Callable[[str], bool]] = None  # a rule may read a string of this value
    # Without string_may_matter, nothing inside a statement is left out (see _Data).


def _is_utf8(source: bytes) -> bool:
    for line in source.splitlines()[:2]:
        match = _COOKIE.match(line)
        if match:
            return match.group(1).lower().replace(b"_", b"-") in (b"utf-8", b"utf8")
    return True


def _bound_names(target: ast.AST) -> list[str]:
    if isinstance(target, ast.Name):
        return [target.id]
    if isinstance(target, ast.Starred):
        return _bound_names(target.value)
    if isinstance(target, (ast.Tuple, ast.List)):
        return [n for element in target.elts for n in _bound_names(element)]
    return []


def _binds(stmt: ast.stmt) -> list[str]:
    """Names a skipped statement rebinds, as `Context.shadow_statement` sees them."""
    if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return [stmt.name]
    if isinstance(stmt, ast.Assign):
        return [n for t in stmt.targets for n in _bound_names(t)]
    if isinstance(stmt, (ast.AnnAssign, ast.AugAssign)):
        return _bound_names(stmt.target)
    return []


def _dotted(node: ast.AST) -> Optional[list[str]]:
    """["a", "b", "c"] for `a.b.c`, else None (as `families.context.dotted_name`)."""
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        return None
    parts.append(node.id)
    return parts[::-1]


# The statements that hold blocks of statements; the others (most) are answered at once.
_COMPOUND = tuple(
    getattr(ast, name) for name in (
        "FunctionDef", "AsyncFunctionDef", "ClassDef", "For", "AsyncFor", "While", "If", "With",
        "AsyncWith", "Try", "TryStar", "Match",
    ) if hasattr(ast, name)
)


def _bodies(stmt: ast.stmt) -> list[list[ast.stmt]]:
    if not isinstance(stmt, _COMPOUND):
        return []
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


def _statements(body: list[ast.stmt]):
    """Every statement of a block and of the blocks inside it, without entering expressions.

    Statements live only in blocks (`_bodies`), so this finds every import and assignment at a
    fraction of the cost of `ast.walk`, which also visits every expression node.
    """
    stack = list(reversed(body))
    while stack:
        stmt = stack.pop()
        yield stmt
        for block in reversed(_bodies(stmt)):
            stack.extend(reversed(block))


@dataclass
class _Names:
    torch: set[str]  # names bound by imports of torch
    hot: set[str]  # names that make a statement hot without a trigger word
    holds_import: set[int]  # ids of the module-level statements that hold an import
    whole: set[int]  # ids of the `with` statements whose body a rule reads as a whole
    words: Optional[re.Pattern] = None  # rule names without a trigger word, and their import aliases
    libcst_rejects: bool = False  # a statement Python accepts and libcst does not


def _scan(tree: ast.Module, triggers: re.Pattern, reads: RuleReads) -> _Names:
    """One pass over the statements of the file (not its expressions).

    The hot names are a superset of what the rule dispatcher tracks (`Context.make_hot`), whatever
    the order of the statements: every name an import binds from a module path with a trigger
    word in it (`from torch.cuda import synchronize as sync`, `from triton import jit`), unless
    the name itself has one; and the last name of every target assigned a call of a getter
    (`self.props = torch.cuda.get_device_properties(i)`), the getter called by its own name or
    through an import alias. A `with` that calls one of `captures` (`with torch.cuda.graph(g):`)
    is not sliced inside: the rule dispatcher looks through its body for a training step.
    """
    names = _Names(set(), set(), set(), set())
    getters, captures = reads.getters, reads.captures
    # a rule's name without a trigger word, where a dotted name may hold it: `x._scaled_grouped_mm`
    tails = sorted({q.rsplit(".", 1)[-1] for q in reads.qualnames if not triggers.search(q)})
    tail_re = re.compile("|".join(rf"(?<!\w){re.escape(t)}" for t in tails)) if tails else None
    word_aliases: set[str] = set()
    imported: dict[str, set[str]] = {}  # local name -> qualified names imported under it
    assignments: list[tuple[list[ast.expr], ast.Call]] = []
    withs: list[ast.stmt] = []
    for top in tree.body:
        for node in _statements([top]):
            if isinstance(node, ast.AnnAssign) and (node.target.lineno, node.target.col_offset) != (
                node.lineno, node.col_offset
            ):
                # `(x): int`: valid Python that libcst cannot parse. The whole file must fail to
                # parse (NPU001), as it does without slices, not only when the line is kept.
                names.libcst_rejects = True
            if isinstance(node, (ast.Assign, ast.AnnAssign)) and isinstance(node.value, ast.Call):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                assignments.append((targets, node.value))
                continue
            if isinstance(node, (ast.With, ast.AsyncWith)):
                withs.append(node)
                continue
            if isinstance(node, ast.Import):
                pairs = [(a.asname or a.name.split(".")[0], a.name) for a in node.names]
                roots = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                module = node.module or ""
                pairs = [(a.asname or a.name, f"{module}.{a.name}") for a in node.names]
                roots = [module] if node.level == 0 else []
            else:
                continue
            names.holds_import.add(id(top))
            if any(r == "torch" or r.startswith("torch.") for r in roots):
                names.torch.update(local for local, _ in pairs)
            for local, qual in pairs:
                imported.setdefault(local, set()).add(qual)
                if tail_re is not None and tail_re.search(qual) and not tail_re.search(local):
                    word_aliases.add(local)  # `from torch import _scaled_grouped_mm as mm`
                if (triggers.search(qual) or _ALIAS_QUALNAME.search(qual)) and not triggers.search(local):
                    names.hot.add(local)

    def may_call(call: ast.expr, qualnames: Iterable[str]) -> bool:
        """Whether `Context.qualname(call.func)` may be one of `qualnames`: the last name of the
        dotted name called, or of the import its bare name stands for, is theirs."""
        func = _dotted(call.func) if isinstance(call, ast.Call) else None
        if func is None:
            return False
        tails = {q.rsplit(".", 1)[-1] for q in qualnames}
        if func[-1] in tails:
            return True
        return len(func) == 1 and any(q.rsplit(".", 1)[-1] in tails for q in imported.get(func[0], ()))

    for targets, call in assignments:
        if may_call(call, getters):
            for target in targets:
                dotted = _dotted(target)
                if dotted is not None:
                    names.hot.add(dotted[-1])
    names.whole.update(id(w) for w in withs if any(may_call(item.context_expr, captures) for item in w.items))
    words = [pattern for pattern in (
        tail_re and tail_re.pattern,
        word_aliases and r"\b(?:" + "|".join(map(re.escape, sorted(word_aliases))) + r")\b",
    ) if pattern]
    names.words = re.compile("|".join(words)) if words else None
    return names


def _start(stmt: ast.stmt) -> int:
    decorators = getattr(stmt, "decorator_list", None)
    if decorators:
        return min(stmt.lineno, min(d.lineno for d in decorators))
    return stmt.lineno


@dataclass
class _Member:
    """A cold statement that may go into a placeholder, with its 1-based lines and neighbours."""
    stmt: ast.stmt
    first: int
    last: int
    prev_end: int  # last line of the statement before it (or the line before the block)
    next_start: int  # first line of the statement after it (or the line after the block)


class _Reducer:
    def __init__(self, lines: list[bytes], hot_lines: list[int], names: _Names) -> None:
        self.lines = lines
        self.hot_lines = hot_lines  # hot_lines[i]: how many of lines[:i] hold a hot match
        self.names = names
        self.spans: list[tuple[int, int, int, ast.stmt]] = []  # (first, last, number, first stmt), 0-based
        self.hidden: set[int] = set()  # ids of the statements inside those placeholders
        self.cold_lines = 0

    def region_is_hot(self, first: int, last: int) -> bool:
        """Whether lines[first:last + 1] hold a hot match (0-based; an empty region is cold)."""
        stop = min(last + 1, len(self.lines))
        return stop > first and self.hot_lines[stop] > self.hot_lines[first]

    def body(self, stmts: list[ast.stmt], before: int, after: int, top: bool = False,
             keep_imports: bool = False) -> None:
        """`before`/`after`: 1-based lines that bound the comment region around the block."""
        run: list[_Member] = []
        for index, stmt in enumerate(stmts):
            member = _Member(
                stmt,
                _start(stmt),
                stmt.end_lineno or stmt.lineno,
                stmts[index - 1].end_lineno if index else before,
                _start(stmts[index + 1]) if index + 1 < len(stmts) else after,
            )
            # comment lines on either side belong to this statement for libcst, or to a neighbour;
            # its own lines even when it shares them (`a = 1; b = 2`)
            cold = not self.region_is_hot(min(member.prev_end, member.first - 1),
                                          max(member.next_start - 2, member.last - 1))
            if cold and self.may_hide(stmt, index, top, keep_imports):
                run.append(member)
                continue
            self.close(run, top)
            run = []
            self.descend(member, top)
        self.close(run, top)

    def descend(self, member: _Member, top: bool) -> None:
        """Slice the blocks of a compound statement that stays."""
        stmt = member.stmt
        if id(stmt) in self.names.whole:
            return
        blocks = sorted(_bodies(stmt), key=lambda block: _start(block[0]))
        # the shim's bootstrap: a module-level `try` whose body imports the shim
        keep_imports = top and isinstance(stmt, (ast.Try, getattr(ast, "TryStar", ast.Try)))
        before = member.first  # the header; comment lines after it go to the block's first statement
        for index, block in enumerate(blocks):
            block_after = _start(blocks[index + 1][0]) if index + 1 < len(blocks) else member.next_start
            self.body(block, before, block_after, keep_imports=keep_imports)
            before = block[-1].end_lineno or block[-1].lineno

    def may_hide(self, stmt: ast.stmt, index: int, top: bool, keep_imports: bool) -> bool:
        """What the rule dispatcher and the shim injection need to see, whatever the text says."""
        if (top or keep_imports) and isinstance(stmt, (ast.Import, ast.ImportFrom)):
            return False
        if top:
            if index == 0 and isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Constant):
                return False  # the docstring
            if id(stmt) in self.names.holds_import:
                return False
        return not any(name in self.names.torch for name in _binds(stmt))

    def close(self, run: list[_Member], top: bool) -> None:
        """Turn a run of cold statements into one placeholder, once its ends are clean."""
        while run and not self.starts_clean(run[0]):
            self.descend(run.pop(0), top)
        while run and not self.ends_clean(run[-1]):
            self.descend(run.pop(), top)
        if not run:
            return
        first, last = run[0].first, run[-1].last
        if last - first + 1 < MIN_LINES:
            return  # one short statement (a one-line compound has nothing to slice either)
        self.spans.append((first - 1, last - 1, len(self.spans), run[0].stmt))
        self.hidden.update(id(member.stmt) for member in run)
        self.cold_lines += last - first + 1

    def starts_clean(self, member: _Member) -> bool:
        """The statement starts its line: the placeholder can take the line from its indentation."""
        stmt = member.stmt
        if member.prev_end >= member.first:
            return False  # shares its first line with the statement before
        line = self.lines[member.first - 1]
        if line[:stmt.col_offset].strip():
            return False
        rest = line[stmt.col_offset:]
        if getattr(stmt, "decorator_list", None):
            return rest.startswith(b"@")
        return not rest.startswith(b"elif")

    def ends_clean(self, member: _Member) -> bool:
        """Nothing but a comment follows the statement on its last line, and no backslash."""
        stmt = member.stmt
        if member.next_start <= member.last:
            return False  # shares its last line with the statement after
        line = self.lines[member.last - 1]
        after_last = line[(stmt.end_col_offset or 0):].strip()
        if after_last and not after_last.startswith(b"#"):
            return False
        return not (line.endswith(b"\\\n") or line.endswith(b"\\\r\n"))


@functools.lru_cache(maxsize=None)
def branches(pattern: re.Pattern) -> tuple[re.Pattern, ...]:
    """The top-level alternatives of a (str) pattern, each compiled on its own.

    A position matches `A|B` exactly when it matches A or B, so scanning for each alternative
    finds every match the whole pattern has (and maybe more, which only keeps more lines). It is
    much faster: the regex engine skips ahead on a literal prefix only when all branches share
    one; with `^`, `\\b` and literal words mixed it tries every branch at every position.
    """
    if pattern.flags & re.VERBOSE:
        return (pattern,)  # (whitespace and comments in the pattern: not split)
    source = pattern.pattern
    pieces, depth, start, index, in_class = [], 0, 0, 0, False
    while index < len(source):
        char = source[index]
        if char == "\\":
            index += 2  # an escaped character, whatever it is
            continue
        if in_class:
            in_class = char != "]"
        elif char == "[":
            in_class = True
            index += 1 if source[index + 1:index + 2] == "^" else 0
            index += 1 if source[index + 1:index + 2] == "]" else 0  # "[]" and "[^]": a literal "]"
        elif char == "(":
            depth += 1
        elif char == ")":
            depth -= 1
        elif char == "|" and depth == 0:
            pieces.append(source[start:index])
            start = index + 1
        index += 1
    pieces.append(source[start:])
    try:
        return tuple(re.compile(_literal_first(piece), pattern.flags) for piece in pieces)
    except re.error:  # a reference from one branch to a group of another: keep it whole
        return (pattern,)


# One string literal, prefix included: a constant made of several (implicit concatenation) is
# not one node for libcst, and each of its parts is read on its own.
_ONE_STRING = re.compile(
    rb"[rRuUbB]{0,2}(?:" + b"|".join([
        rb"'''(?:[^'\\]|\\.|'(?!''))*'''",
        rb'"""(?:[^"\\]|\\.|"(?!""))*"""',
        rb"'(?:[^'\\\n]|\\.)*'",
        rb'"(?:[^"\\\n]|\\.)*"',
    ]) + rb")",
    re.DOTALL,
)
# The longest placeholder name in practice (up to a million placeholders), with its quotes.
_PLACEHOLDER_WIDTH = len(PLACEHOLDER_PREFIX) + 8 + len(b'("""""")')


class _Data:
    """Parts of the statements that stay which no rule can read: left out too.

    Inside a statement the rule dispatcher visits everything, so a part of it may be left out only if
    visiting it can do nothing, whatever surrounds it. That holds for an element of a list,
    tuple, set or dict display (keys and values) whose text holds no hot match and no name a
    rule acts on without a trigger word (`RuleReads.qualnames`), and none of whose strings a rule
    may read (their values: escapes hide words from the text). Rules that look at the
    elements of a display from outside ask only whether they are strings, so an element that is
    itself a string stays; a placeholder (a call) is then no different from what it stands for.
    The statement must stay hot, or cold, without the parts (the rule dispatcher decides by its text);
    nothing is left out inside an f-string (the placeholder's quotes) nor in the body of a
    `with` the rule dispatcher reads whole. The placeholder keeps the columns of what follows on its
    last line (padding in its string), so positions of findings stay those of the file.
    """

    def __init__(self, body: bytes, line_starts: list[int], hot_lines: list[int], patterns: list[re.Pattern],
                 triggers: re.Pattern, reads: RuleReads, words: Optional[re.Pattern]) -> None:
        self.body = body
        self.line_starts = line_starts
        self.hot_lines = hot_lines
        self.patterns = [branch for whole in patterns for branch in branches(whole)]
        self.words = words
        self.triggers = triggers
        self.string_may_matter = reads.string_may_matter

    def offset(self, line: int, column: int) -> int:
        return self.line_starts[line - 1] + column

    def text(self, node: ast.AST) -> bytes:
        return self.body[self.offset(node.lineno, node.col_offset):self.offset(node.end_lineno, node.end_col_offset)]

    def is_hot(self, text: bytes, first_line: int = 0, last_line: int = 0) -> bool:
        """Whether `text` (on those 1-based lines, if given) holds a hot match."""
        if first_line and self.hot_lines[last_line] == self.hot_lines[first_line - 1]:
            return False  # none of its lines holds one (see _hot_line_counts)
        decoded = text.decode("utf-8", "replace")
        return any(pattern.search(decoded) for pattern in self.patterns)

    def spans(self, stmt: ast.stmt) -> list[ast.expr]:
        """The parts to leave out of one simple statement."""
        found: list[ast.expr] = []
        try:
            self.scan(stmt, False, found)
        except RecursionError:
            return []
        if not found:
            return []
        # the statement's lines, as the rule dispatcher will test them, must be as hot as before
        first, last = self.line_starts[stmt.lineno - 1], self.line_starts[stmt.end_lineno]
        original = self.body[first:last]
        if self.is_hot(original, stmt.lineno, stmt.end_lineno):
            pieces, position = [], first
            for node in found:
                start, end = self.offset(node.lineno, node.col_offset), self.offset(node.end_lineno, node.end_col_offset)
                pieces += [self.body[position:start], _placeholder(0, self.body[start:end], 0)]
                position = end
            pieces.append(self.body[position:last])
            if not self.is_hot(b"".join(pieces)):
                return []
        return found

    def scan(self, node: ast.AST, in_display: bool, found: list[ast.expr]) -> bool:
        """Whether no rule may read a string of `node`; collects the outermost display elements
        worth a placeholder on the way."""
        if isinstance(node, ast.Constant):
            return not isinstance(node.value, str) or self.inert_string(node)
        if isinstance(node, ast.JoinedStr):
            return True  # its parts are read by their text (checked with the element's), not entered
        display = isinstance(node, (ast.Dict, ast.Set)) or (
            isinstance(node, (ast.List, ast.Tuple)) and isinstance(node.ctx, ast.Load))
        if isinstance(node, ast.Dict):
            children = [key for key in node.keys if key is not None] + node.values
        elif isinstance(node, (ast.List, ast.Tuple, ast.Set)):
            children = node.elts
        else:
            children = list(ast.iter_child_nodes(node))
        mark = len(found)
        inert = True
        for child in children:
            inert = self.scan(child, display, found) and inert
        if (inert and in_display and not isinstance(node, (ast.Starred, ast.Constant))
                and self.worth_hiding(node)):
            del found[mark:]  # the outermost one only
            found.append(node)
        return inert

    def inert_string(self, node: ast.Constant) -> bool:
        value = node.value
        if self.triggers.search(value) or self.string_may_matter(value):
            return False
        return _ONE_STRING.fullmatch(self.text(node)) is not None

    def worth_hiding(self, node: ast.expr) -> bool:
        text = self.text(node)
        if node.end_lineno > node.lineno:
            # the placeholder's last line, `<padding>""")`, must be as wide as the element's
            last_line = text.rsplit(b"\n", 1)[1].decode("utf-8", "replace")
            fits = len(last_line) >= 4
        else:
            fits = len(text.decode("utf-8", "replace")) >= _PLACEHOLDER_WIDTH
        if not fits or self.is_hot(text, node.lineno, node.end_lineno):
            return False
        return self.words is None or not self.words.search(text.decode("utf-8", "replace"))


def _placeholder(number: int, chunk: bytes, pad: int) -> bytes:
    """The call that stands for `chunk`: its line endings (and `pad` spaces) in a string."""
    inner = b"\n" * chunk.count(b"\n") if b"\r" not in chunk else b"".join(re.findall(rb"\r?\n", chunk))
    return PLACEHOLDER_PREFIX + str(number).encode() + b'__("""' + inner + b" " * pad + b'""")'


def _padding(chunk: bytes, number: int) -> Optional[int]:
    """Spaces that make the placeholder end at the column where `chunk` ends, or None."""
    if b"\n" in chunk:
        width = len(chunk.rsplit(b"\n", 1)[1].decode("utf-8", "replace"))
        pad = width - len(b'""")')
    else:
        pad = len(chunk.decode("utf-8", "replace")) - len(_placeholder(number, b"", 0))
    return pad if pad >= 0 else None


@functools.lru_cache(maxsize=None)
def _required_words(pattern: re.Pattern) -> Optional[tuple[tuple, bool]]:
    """For each top-level alternative, the literal words (letters, digits, `_`) any match of it
    must contain; and whether the alternatives are nothing but plain words (then each is its
    own single word). None if an alternative requires none (or the pattern ignores case)."""
    if pattern.flags & (re.IGNORECASE | re.VERBOSE):
        return None
    source = pattern.pattern
    text = source.decode("latin-1") if isinstance(source, bytes) else source
    required, only_words = [], True
    for branch in branches(re.compile(text, pattern.flags & ~re.UNICODE if isinstance(source, bytes) else pattern.flags)):
        words, depth, index, word = [], 0, 0, ""
        branch_text = branch.pattern
        if re.fullmatch(r"[\w -]+", branch_text):  # a plain word (`reduce-overhead`): itself
            required.append((branch_text.encode("latin-1") if isinstance(source, bytes) else branch_text,))
            continue
        only_words = False
        while index <= len(branch_text):
            char = branch_text[index] if index < len(branch_text) else ""
            if char and (char.isalnum() or char == "_") and depth == 0:
                word += char
                index += 1
                continue
            if word and char in ("*", "+", "?", "{"):
                word = word[:-1]  # the quantifier belongs to the last letter
            if len(word) >= 2:
                words.append(word)
            word = ""
            if char == "\\":
                index += 2  # an escape (`\b`, `\.`): not a letter of a word
                continue
            if char in "([":
                depth += 1
            elif char in ")]":
                depth -= 1
            index += 1
        if not words:
            return None
        required.append(tuple(w.encode("latin-1") if isinstance(source, bytes) else w for w in words))
    return tuple(required), only_words


def quick_search(pattern: re.Pattern, data) -> bool:
    """`pattern.search(data) is not None`, skipping the regex when a word it needs is absent.

    `in` finds a word many times faster than a regex with a leading `^` or `\\b` scans for
    it; an alternation of plain words is answered by `in` alone."""
    found = _required_words(pattern)
    if found is None:
        return pattern.search(data) is not None
    required, only_words = found
    if only_words:
        return any(words[0] in data for words in required)
    if not any(all(word in data for word in words) for words in required):
        return False
    return pattern.search(data) is not None


_LEADING_WORD = re.compile(r"\\b(\w+)")


def _literal_first(branch: str) -> str:
    """`\\bword...` as `word(?<!\\wword)...`: the same matches, found twenty times faster.

    The regex engine jumps from one occurrence of a leading literal to the next, but does not
    see past a leading `\\b`. Before a word character `\\b` means "no word character just
    before", which the look-behind checks once the word has matched.
    """
    match = _LEADING_WORD.match(branch)
    if match is None:
        return branch
    word = match.group(1)
    if branch[match.end():match.end() + 1] in ("*", "+", "?", "{"):
        word = word[:-1]  # the quantifier belongs to the last letter
    if not word:
        return branch
    return f"{word}(?<!\\w{word}){branch[2 + len(word):]}"


def _hot_line_counts(text: str, count: int, patterns: Sequence[re.Pattern]) -> list[int]:
    """Running count of the lines that hold (part of) a match: entry i counts lines[:i].

    Every line a match touches is marked, so a region of whole lines that holds a match (or the
    text of any statement in it) has a marked line; the hot patterns are words and "[^\\n]*", so
    that is exact for them, and merely cautious for a pattern such as "^\\s*import" that may
    start on a blank line above. One scan of the file answers every region test, where searching
    each statement's text anew rescanned nested blocks once per level.
    """
    # where each line starts in `text`: lines end with "\n" ("\r" alone is refused earlier)
    starts = list(accumulate((len(part) + 1 for part in text.split("\n")), initial=0))
    hot = bytearray(count + 1)
    for pattern in (branch for whole in patterns for branch in branches(whole)):
        words = _required_words(pattern)
        if words is not None and not any(all(w in text for w in branch) for branch in words[0]):
            continue  # a word every match needs is absent: `in` says so faster than the scan
        for match in pattern.finditer(text):
            line = bisect.bisect_right(starts, match.start()) - 1
            end = bisect.bisect_right(starts, max(match.end() - 1, match.start())) - 1
            hot[line:end + 1] = b"\x01" * (end + 1 - line)
    return list(accumulate(hot[:count], initial=0))


def _ending(line: bytes) -> bytes:
    if line.endswith(b"\r\n"):
        return b"\r\n"
    if line.endswith(b"\n"):
        return b"\n"
    return b""


def reduce(source: bytes, hot: Union[re.Pattern, Sequence[re.Pattern]], triggers: re.Pattern,
           reads: RuleReads = RuleReads()) -> Optional[Slices]:
    """The reduced text, or None when slicing would not help or is not safe for this file.

    `hot`: the pattern(s) that make a statement's text hot for the rule dispatcher; `triggers`: the
    trigger words; `reads`: what else the rules read.
    """
    if PLACEHOLDER_PREFIX in source or b"\f" in source or b"\x00" in source:
        return None
    body = source[3:] if source.startswith(b"\xef\xbb\xbf") else source
    if not _is_utf8(body):
        return None
    if b"\r" in body.replace(b"\r\n", b""):
        return None  # old Mac line endings: ast and bytes.splitlines may disagree
    tree = astcache.parse(body)  # (shared with testscopes.py, which reads the same file after)
    if tree is None:
        return None
    lines = body.splitlines(keepends=True)
    names = _scan(tree, triggers, reads)
    if names.libcst_rejects:
        return None
    patterns = [hot] if isinstance(hot, re.Pattern) else list(hot)
    if names.hot:
        patterns.append(re.compile(r"\b(" + "|".join(sorted(map(re.escape, names.hot))) + r")\b"))
    hot_lines = _hot_line_counts(body.decode("utf-8", "replace"), len(lines), patterns)
    reducer = _Reducer(lines, hot_lines, names)
    reducer.body(tree.body, 0, len(lines) + 2, top=True)
    line_starts = list(accumulate(map(len, lines), initial=0))

    # (start, end) byte ranges of `body` to leave out, with the padding of their placeholder
    ranges: list[tuple[int, int, int]] = []
    for first, last, _number, stmt in reducer.spans:  # whole statements, from their indentation on
        start = line_starts[first] + len(lines[first][:stmt.col_offset])
        ranges.append((start, line_starts[last] + len(lines[last]) - len(_ending(lines[last])), 0))
    if reads.string_may_matter is not None:
        data = _Data(body, line_starts, hot_lines, patterns, triggers, reads, names.words)
        for stmt in _kept_statements(tree.body, reducer.hidden | names.whole):
            if isinstance(stmt, _COMPOUND) or stmt.end_lineno == stmt.lineno:
                continue  # (not the header of a compound statement; little to gain on one line)
            for node in data.spans(stmt):
                start = data.offset(node.lineno, node.col_offset)
                end = data.offset(node.end_lineno, node.end_col_offset)
                ranges.append((start, end, -1))
    if not ranges:
        return None
    ranges.sort()
    out: list[bytes] = []
    chunks: dict[int, bytes] = {}
    position = 0
    for start, end, pad in ranges:
        number = len(chunks)
        chunk = body[start:end]
        if pad < 0:
            pad = _padding(chunk, number)
            if pad is None:
                continue
        chunks[number] = chunk
        out += [body[position:start], _placeholder(number, chunk, pad)]
        position = end
    out.append(body[position:])
    prefix = source[:len(source) - len(body)]
    return Slices(prefix + b"".join(out), chunks, reducer.cold_lines)


def _kept_statements(body: list[ast.stmt], hidden: set[int]):
    """The statements outside the placeholders (those of compound statements that stay, too)."""
    stack = list(reversed(body))
    while stack:
        stmt = stack.pop()
        if id(stmt) in hidden:
            continue
        yield stmt
        for block in reversed(_bodies(stmt)):
            stack.extend(reversed(block))


def restore(generated: bytes, slices: Slices) -> Optional[bytes]:
    """Put the original statements back; None if a placeholder did not survive exactly once."""
    pieces = []
    position = 0
    seen = set()
    for start in _occurrences(generated, PLACEHOLDER_PREFIX):
        match = _PLACEHOLDER_RE.match(generated, start)
        if match is None:
            return None  # a placeholder changed on the way
        number = int(match.group(1))
        if number in seen or number not in slices.chunks:
            return None
        seen.add(number)
        pieces.append(generated[position:start])
        pieces.append(slices.chunks[number])
        position = match.end()
    if len(seen) != len(slices.chunks):
        return None
    pieces.append(generated[position:])
    return b"".join(pieces)


def _occurrences(data: bytes, word: bytes):
    start = data.find(word)
    while start >= 0:
        yield start
        start = data.find(word, start + len(word))


def restore_text(text: str, slices: Slices) -> str:
    """The same for a piece of generated text (a finding's source); unknown placeholders stay."""
    def put_back(match: re.Match) -> str:
        number = int(match.group(1))
        chunk = slices.chunks.get(number)
        return chunk.decode("utf-8", "replace") if chunk is not None else match.group(0)

    return _PLACEHOLDER_TEXT_RE.sub(put_back, text)
