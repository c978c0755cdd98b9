"""Import statements the way ruff's isort and pyflakes want them (I001, F401).

`add_import` puts one import where `ruff check --select I` with isort's default settings would
put it, so that a file that was I001-clean stays clean. `newly_unused`, `names_used_in_text` and
`remove_import_bindings` find and drop the module-level imports that a rewrite left unused (F401)
without touching an import that was unused before (a side-effect import, a re-export).

Pure functions over libcst modules: nothing is read from disk, no configuration is looked up.
The isort model (ruff 0.x defaults):

* sections in this order, one blank line between two of them: future, standard library, third
  party, first party, local folder (relative imports);
* within a section, every `import x` before every `from x import y` (force-sort-within-sections
  off), each group by module name: case-insensitive, then case-sensitive, digits compared as
  numbers ("natural" order); relative imports furthest first (`from ..` before `from .`);
* members of a `from` import: CONSTANTS, then Classes, then the rest (order-by-type), each by
  the same case-insensitive natural order; `from x import a as b` is a statement of its own
  (combine-as-imports off);
* a comment above an import that is not the first of its section has one blank line before it;
* a `from` import longer than 88 columns is wrapped in parentheses, one member a line, with a
  trailing comma; after the block, two blank lines before a class or def, one before other code.
"""

from __future__ import annotations

import io
import re
import sys
import tokenize
from collections.abc import Iterable, Sequence
from typing import Optional

import libcst as cst

LINE_LENGTH = 88

# isort sections, in ruff's default order
FUTURE, STDLIB, THIRD_PARTY, FIRST_PARTY, LOCAL_FOLDER = range(5)

_BLANK = cst.EmptyLine()


# ---------------------------------------------------------------------------------------------
# Sort keys (ruff's isort/sorting.rs, default settings)


def _is_digit(char: str) -> bool:
    return len(char) == 1 and "0" <= char <= "9"


def _compare_digits_right(a: str, i: int, b: str, j: int) -> int:
    """Two runs of digits without leading zeros: the longer is larger, else the first difference."""
    bias = 0
    while True:
        ca = a[i] if i < len(a) else ""
        cb = b[j] if j < len(b) else ""
        da, db = _is_digit(ca), _is_digit(cb)
        if not da and not db:
            return bias
        if not da:
            return -1
        if not db:
            return 1
        if not bias and ca != cb:
            bias = -1 if ca < cb else 1
        i += 1
        j += 1


def _compare_digits_left(a: str, i: int, b: str, j: int) -> int:
    """Runs of digits with a leading zero: compared digit by digit, left-aligned (a fraction)."""
    while True:
        ca = a[i] if i < len(a) else ""
        cb = b[j] if j < len(b) else ""
        da, db = _is_digit(ca), _is_digit(cb)
        if not da and not db:
            return 0
        if not da:
            return -1
        if not db:
            return 1
        if ca != cb:
            return -1 if ca < cb else 1
        i += 1
        j += 1


def natural_compare(a: str, b: str) -> int:
    """-1, 0 or 1: `a` against `b` in natural order ("mod2" < "mod10"), as strnatcmp does."""
    i = j = 0
    while True:
        while i < len(a) and a[i].isspace():
            i += 1
        while j < len(b) and b[j].isspace():
            j += 1
        ca = a[i] if i < len(a) else ""
        cb = b[j] if j < len(b) else ""
        if _is_digit(ca) and _is_digit(cb):
            if ca == "0" or cb == "0":
                result = _compare_digits_left(a, i, b, j)
            else:
                result = _compare_digits_right(a, i, b, j)
            if result:
                return result
        if not ca and not cb:
            return 0
        if ca != cb:
            return -1 if ca < cb else 1
        i += 1
        j += 1


class _Natural:
    """A string that compares in natural order (for use inside sort-key tuples)."""

    __slots__ = ("text",)

    def __init__(self, text: str) -> None:
        self.text = text

    def __lt__(self, other: _Natural) -> bool:
        return natural_compare(self.text, other.text) < 0

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _Natural) and natural_compare(self.text, other.text) == 0

    def __hash__(self) -> int:
        return hash(self.text)

    def __repr__(self) -> str:
        return f"_Natural({self.text!r})"


def _option(value) -> tuple:
    """Rust's Option ordering: None before any value."""
    return (0,) if value is None else (1, value)


def _member_type(name: str) -> int:
    if len(name) > 1 and name.isupper():
        return 0  # CONSTANT
    if name[:1].isupper():
        return 1  # Class
    return 2  # variable


def member_key(name: str, asname: Optional[str] = None) -> tuple:
    """Where `name` (imported as `asname`) goes among the members of a `from` import."""
    return (
        name != "*",
        _member_type(name),
        _Natural(name.lower()),
        _Natural(name),
        _option(_Natural(asname) if asname is not None else None),
    )


def module_key(module: Optional[str], *, level: int = 0, asname: Optional[str] = None,
               first_member: Optional[tuple[str, Optional[str]]] = None) -> tuple:
    """The order of statements of one style within a section (ruff's ModuleKey)."""
    return (
        -level,  # relative-imports-order = furthest-to-closest
        _option(_Natural(module.lower()) if module is not None else None),
        _option(_Natural(module) if module is not None else None),
        _option(member_key(*first_member) if first_member is not None else None),
        _option(_Natural(asname) if asname is not None else None),
    )


def section_of(module: Optional[str], level: int, first_party: Iterable[str] = ()) -> int:
    """The isort section of `import module` / `from {'.' * level}{module} import ...`."""
    if level:
        return LOCAL_FOLDER
    parts = (module or "").split(".")
    if parts[0] == "__future__":
        return FUTURE
    known = first_party if isinstance(first_party, (set, frozenset)) else frozenset(first_party)
    if any(".".join(parts[:n]) in known for n in range(1, len(parts) + 1)):
        return FIRST_PARTY
    if parts[0] in sys.stdlib_module_names:
        return STDLIB
    return THIRD_PARTY


# ---------------------------------------------------------------------------------------------
# Reading import statements


def _dotted(node: Optional[cst.BaseExpression]) -> Optional[str]:
    if isinstance(node, cst.Name):
        return node.value
    if isinstance(node, cst.Attribute):
        value = _dotted(node.value)
        return None if value is None else f"{value}.{node.attr.value}"
    return None


def _asname(alias: cst.ImportAlias) -> Optional[str]:
    if alias.asname is None or not isinstance(alias.asname.name, cst.Name):
        return None
    return alias.asname.name.value


def _level(node: cst.ImportFrom) -> int:
    return len(node.relative)


def _split_relative(from_module: str) -> tuple[int, Optional[str]]:
    stripped = from_module.lstrip(".")
    return len(from_module) - len(stripped), (stripped or None)


def is_import_line(stmt: cst.CSTNode) -> bool:
    return (
        isinstance(stmt, cst.SimpleStatementLine)
        and bool(stmt.body)
        and all(isinstance(s, (cst.Import, cst.ImportFrom)) for s in stmt.body)
    )


def _is_docstring(stmt: cst.CSTNode) -> bool:
    return (
        isinstance(stmt, cst.SimpleStatementLine)
        and bool(stmt.body)
        and isinstance(stmt.body[0], cst.Expr)
        and isinstance(stmt.body[0].value, (cst.SimpleString, cst.ConcatenatedString))
    )


def leading_block(module: cst.Module) -> tuple[int, int]:
    """(start, end): module.body[start:end] are the statement lines of the leading import block,
    after the docstring (comments are the statements' leading lines); start == end when the file
    has none. The same notion as engine._insertion_index: the block ends at the first statement
    line that is not all imports (a `try:`, an `if TYPE_CHECKING:`, code)."""
    body = module.body
    start = 1 if body and _is_docstring(body[0]) else 0
    end = start
    while end < len(body) and is_import_line(body[end]):
        end += 1
    return start, end


def _sort_entry(small: cst.BaseSmallStatement, first_party: frozenset) -> Optional[tuple]:
    """(section, key) of an import statement in its canonical (ruff-sorted) form, or None when
    ruff would rewrite it (`import a, b`, unsorted members, an alias beside other members)."""
    if isinstance(small, cst.Import):
        if len(small.names) != 1:
            return None
        alias = small.names[0]
        name = _dotted(alias.name)
        if name is None:
            return None
        section = section_of(name, 0, first_party)
        style = 1 if section == FUTURE else 0
        return (section, style, module_key(name, asname=_asname(alias)))
    if isinstance(small, cst.ImportFrom):
        level = _level(small)
        module = _dotted(small.module) if small.module is not None else None
        section = section_of(module, level, first_party)
        style = 0 if section == FUTURE else 1
        if isinstance(small.names, cst.ImportStar):
            first = ("*", None)
        else:
            members = [(a.name.value, _asname(a)) for a in small.names if isinstance(a.name, cst.Name)]
            if len(members) != len(small.names) or not members:
                return None
            if len(members) > 1 and any(asname is not None for _n, asname in members):
                return None
            keys = [member_key(n, a) for n, a in members]
            if any(not (x < y) for x, y in zip(keys, keys[1:])):
                return None
            first = members[0]
        return (section, style, module_key(module, level=level, first_member=first))
    return None


def _section_of_line(line: cst.SimpleStatementLine, first_party: frozenset) -> int:
    small = line.body[0]
    if isinstance(small, cst.Import):
        return section_of(_dotted(small.names[0].name), 0, first_party)
    return section_of(_dotted(small.module) if small.module is not None else None,
                      _level(small), first_party)


def _already_imported(module: cst.Module, name: str, level: int, from_name: Optional[str],
                      straight: bool) -> bool:
    for stmt in module.body:
        if not isinstance(stmt, cst.SimpleStatementLine):
            continue
        for small in stmt.body:
            if straight and isinstance(small, cst.Import):
                if any(_dotted(a.name) == name and a.asname is None for a in small.names):
                    return True
            elif not straight and isinstance(small, cst.ImportFrom):
                if _level(small) != level or isinstance(small.names, cst.ImportStar):
                    continue
                if (_dotted(small.module) if small.module is not None else None) != from_name:
                    continue
                if any(isinstance(a.name, cst.Name) and a.name.value == name and a.asname is None
                       for a in small.names):
                    return True
    return False


# ---------------------------------------------------------------------------------------------
# Leading lines


def _is_blank(line: cst.EmptyLine) -> bool:
    return line.comment is None


def _comments(lines: Sequence[cst.EmptyLine]) -> list[cst.EmptyLine]:
    return [line for line in lines if not _is_blank(line)]


def _split_attached(lines: Sequence[cst.EmptyLine]) -> tuple[list[cst.EmptyLine], list[cst.EmptyLine]]:
    """(prefix, attached): the comment lines right above a statement are attached to it."""
    lines = list(lines)
    cut = len(lines)
    while cut > 0 and not _is_blank(lines[cut - 1]):
        cut -= 1
    return lines[:cut], lines[cut:]


def _leading_blanks(lines: Sequence[cst.EmptyLine]) -> int:
    count = 0
    for line in lines:
        if not _is_blank(line):
            break
        count += 1
    return count


def _trailing_blanks(lines: Sequence[cst.EmptyLine]) -> int:
    count = 0
    for line in reversed(lines):
        if not _is_blank(line):
            break
        count += 1
    return count


def _join_lines(first: Sequence[cst.EmptyLine], second: Sequence[cst.EmptyLine],
                most: int = 2) -> list[cst.EmptyLine]:
    """`first` then `second`, the blank lines where they meet merged (the larger run, at most
    `most`): never three blank lines in a row where there were at most two."""
    a, b = _trailing_blanks(first), _leading_blanks(second)
    run = list(first[len(first) - a:]) if a >= b else list(second[:b])
    return [*first[:len(first) - a], *run[:max(most, 0)], *second[b:]]


def _blank_lines_before(stmt: cst.BaseStatement) -> int:
    """What ruff's isort wants between the import block and `stmt` (lines-after-imports = -1):
    two before a class or def (or the comments right above one), else one."""
    lines = list(stmt.leading_lines)
    if any(_is_blank(line) for line in lines[_leading_blanks(lines):]):
        return 1  # comments, a blank line, then the statement: the comments are code after imports
    return 2 if isinstance(stmt, (cst.FunctionDef, cst.ClassDef)) else 1


# ---------------------------------------------------------------------------------------------
# add_import


def _statement_text(module: cst.Module, line: cst.SimpleStatementLine) -> str:
    return module.code_for_node(line.with_changes(leading_lines=()))


def _too_long(module: cst.Module, line: cst.SimpleStatementLine) -> bool:
    text = _statement_text(module, line)
    return any(len(part) > LINE_LENGTH for part in text.splitlines())


def _wrapped(module: cst.Module, line: cst.SimpleStatementLine) -> cst.SimpleStatementLine:
    """`from m import a, b` as ruff wraps a long one: parenthesized, one member a line."""
    node = line.body[0]
    assert isinstance(node, cst.ImportFrom) and not isinstance(node.names, cst.ImportStar)
    head = f"from {'.' * _level(node)}{_dotted(node.module) or ''} import ("
    comment = line.trailing_whitespace.comment
    if comment is not None:
        head += "  " + comment.value
    indent = module.default_indent
    members = [module.code_for_node(alias.with_changes(comma=cst.MaybeSentinel.DEFAULT)).strip()
               for alias in node.names]
    text = "\n".join([head, *(f"{indent}{member}," for member in members), ")"]) + "\n"
    wrapped = cst.parse_statement(text, config=module.config_for_parsing)
    return wrapped.with_changes(leading_lines=line.leading_lines)


def _breaks_line(whitespace: cst.CSTNode) -> bool:
    return isinstance(whitespace, cst.ParenthesizedWhitespace)


def _separator(last_line: cst.SimpleWhitespace) -> cst.Comma:
    """The comma after a member of a parenthesized, one-member-a-line `from` import."""
    return cst.Comma(
        whitespace_before=cst.SimpleWhitespace(""),
        whitespace_after=cst.ParenthesizedWhitespace(
            first_line=cst.TrailingWhitespace(), empty_lines=[], indent=True, last_line=last_line
        ),
    )


def _add_member(module: cst.Module, line: cst.SimpleStatementLine, name: str) -> cst.SimpleStatementLine:
    node = line.body[0]
    assert isinstance(node, cst.ImportFrom) and not isinstance(node.names, cst.ImportStar)
    aliases = list(node.names)
    keys = [member_key(a.name.value, None) for a in aliases]
    new_key = member_key(name, None)
    if all(x < y for x, y in zip(keys, keys[1:])):
        index = sum(1 for key in keys if key < new_key)
    else:
        index = len(aliases)  # members not in ruff's order: the name goes last
    new = cst.ImportAlias(name=cst.Name(name))
    lpar = node.lpar
    multiline = isinstance(lpar, cst.LeftParen) and _breaks_line(lpar.whitespace_after)
    if multiline and all(isinstance(a.comma, cst.Comma) and _breaks_line(a.comma.whitespace_after)
                         for a in aliases[:-1]):
        member_indent = lpar.whitespace_after.last_line
        if index < len(aliases):
            aliases.insert(index, new.with_changes(comma=_separator(member_indent)))
        else:
            last = aliases[-1]
            if isinstance(last.comma, cst.Comma) and _breaks_line(last.comma.whitespace_after):
                closing = last.comma.whitespace_after
                aliases[-1] = last.with_changes(comma=last.comma.with_changes(
                    whitespace_after=closing.with_changes(indent=True, last_line=member_indent)))
                new = new.with_changes(comma=cst.Comma(
                    whitespace_before=cst.SimpleWhitespace(""),
                    whitespace_after=cst.ParenthesizedWhitespace(
                        first_line=cst.TrailingWhitespace(), empty_lines=[], indent=closing.indent,
                        last_line=closing.last_line)))
            else:  # no trailing comma: the newline before `)` is the parenthesis's own
                aliases[-1] = last.with_changes(comma=_separator(member_indent))
            aliases.append(new)
        return line.with_changes(body=[node.with_changes(names=aliases)])
    comma = cst.Comma(whitespace_after=cst.SimpleWhitespace(" "))
    if index < len(aliases):
        aliases.insert(index, new.with_changes(comma=comma))
    else:
        last = aliases[-1]
        if isinstance(last.comma, cst.Comma):  # a trailing comma stays trailing
            new = new.with_changes(comma=last.comma)
        aliases[-1] = last.with_changes(comma=comma)
        aliases.append(new)
    updated = line.with_changes(body=[node.with_changes(names=aliases)])
    if not multiline and _too_long(module, updated):
        updated = _wrapped(module, updated)
    return updated


def add_import(module: cst.Module, *, name: str, from_module: str | None = None,
               first_party: Iterable[str] = frozenset()) -> cst.Module:
    """`import {name}` or `from {from_module} import {name}` added to the leading import block
    where ruff's isort (default settings) puts it; `first_party`: the project's own top-level
    modules and packages. An existing `from {from_module} import ...` without aliases in the block
    gets the name as a member. Unchanged when the name is already imported that way. A block
    whose imports are not in ruff's order gets the import at its end (never reordered)."""
    first_party = frozenset(first_party)
    straight = from_module is None
    if straight:
        level, from_name = 0, None
    else:
        level, from_name = _split_relative(from_module)
    if _already_imported(module, name, level, from_name, straight):
        return module
    body = list(module.body)
    start, end = leading_block(module)

    if not straight:
        for index in range(start, end):
            line = body[index]
            node = line.body[0]
            if (len(line.body) == 1 and isinstance(node, cst.ImportFrom)
                    and not isinstance(node.names, cst.ImportStar) and _level(node) == level
                    and (_dotted(node.module) if node.module is not None else None) == from_name
                    and all(a.asname is None and isinstance(a.name, cst.Name) for a in node.names)):
                body[index] = _add_member(module, line, name)
                return module.with_changes(body=body)

    text = f"import {name}\n" if straight else f"from {from_module} import {name}\n"
    new = cst.parse_statement(text, config=module.config_for_parsing)
    assert isinstance(new, cst.SimpleStatementLine)
    if not straight and _too_long(module, new):
        new = _wrapped(module, new)
    if straight:
        section = section_of(name, 0, first_party)
        new_key = (section, 1 if section == FUTURE else 0, module_key(name))
    else:
        section = section_of(from_name, level, first_party)
        new_key = (section, 0 if section == FUTURE else 1,
                   module_key(from_name, level=level, first_member=(name, None)))

    if start == end:  # no imports yet: after the docstring, before the code
        new = new.with_changes(leading_lines=[_BLANK] if start > 0 else [])
        if start < len(body):
            following = body[start]
            lines = list(following.leading_lines)
            rest = lines[_leading_blanks(lines):]
            body[start] = following.with_changes(
                leading_lines=[_BLANK] * _blank_lines_before(following) + rest)
        body.insert(start, new)
        if len(body) == 1:  # an empty file
            return module.with_changes(body=body, has_trailing_newline=True)
        return module.with_changes(body=body)

    entries = []
    for index in range(start, end):
        line = body[index]
        entries.append(_sort_entry(line.body[0], first_party) if len(line.body) == 1 else None)
    canonical = all(e is not None for e in entries) and all(
        x < y for x, y in zip(entries, entries[1:]))
    if not canonical:
        body.insert(end, new)  # the user's order stays: the import goes last
        return module.with_changes(body=body)

    position = start + sum(1 for entry in entries if entry < new_key)
    if position == start:
        first = body[start]
        prefix, attached = _split_attached(first.leading_lines)
        new = new.with_changes(leading_lines=prefix)
        separate = attached or entries[0][0] != section
        body[start] = first.with_changes(leading_lines=([_BLANK] if separate else []) + attached)
    else:
        previous_section = entries[position - 1 - start][0]
        new = new.with_changes(leading_lines=[_BLANK] if previous_section != section else [])
        if position < end:
            following = body[position]
            attached = _comments(following.leading_lines)
            separate = attached or entries[position - start][0] != section
            body[position] = following.with_changes(
                leading_lines=([_BLANK] if separate else []) + attached)
    body.insert(position, new)
    return module.with_changes(body=body)


# ---------------------------------------------------------------------------------------------
# Unused imports


def _alias_binding(alias: cst.ImportAlias, from_import: bool) -> Optional[str]:
    """The name an import alias binds; None for `x as x` (an explicit re-export)."""
    asname = _asname(alias)
    name = _dotted(alias.name)
    if asname is not None:
        return None if asname == name else asname
    if name is None:
        return None
    return name if from_import else name.split(".")[0]


def _small_bindings(small: cst.BaseSmallStatement) -> list[Optional[str]]:
    """One entry per alias of an import statement: the name it binds (None: leave it alone)."""
    if isinstance(small, cst.Import):
        return [_alias_binding(a, False) for a in small.names]
    if isinstance(small, cst.ImportFrom):
        if isinstance(small.names, cst.ImportStar):
            return []
        if small.module is not None and not small.relative and _dotted(small.module) == "__future__":
            return [None] * len(small.names)
        return [_alias_binding(a, True) for a in small.names]
    return []


def module_import_bindings(module: cst.Module) -> set[str]:
    """Names bound by import statements at module level (statement lines of module.body)."""
    names: set[str] = set()
    for stmt in module.body:
        if isinstance(stmt, cst.SimpleStatementLine):
            for small in stmt.body:
                names.update(n for n in _small_bindings(small) if n is not None)
    return names


_IDENTIFIER = re.compile(r"(?<![\w.])[^\W\d]\w*")
_TYPING_CALLS = frozenset({"cast", "TypeVar", "NewType", "ForwardRef", "TypeAliasType", "assert_type",
                           "ParamSpec", "TypeVarTuple", "NamedTuple", "TypedDict"})


class _References(cst.CSTVisitor):
    """Names a module refers to outside import statements: `Name` nodes (not an attribute's
    `.attr`, not a keyword argument's name), identifiers in strings that are type expressions
    (annotations, subscripts, `cast(...)`/`TypeVar(...)` arguments) and `__all__` entries.
    Stores count too: an over-approximation, which only ever keeps an import."""

    def __init__(self) -> None:
        super().__init__()
        self.names: set[str] = set()
        self._typing = 0
        self._all = 0
        self._counted: list[tuple[bool, bool]] = []

    def visit_Import(self, node: cst.Import) -> bool:
        return False

    def visit_ImportFrom(self, node: cst.ImportFrom) -> bool:
        return False

    def visit_Name(self, node: cst.Name) -> None:
        self.names.add(node.value)

    def visit_Attribute(self, node: cst.Attribute) -> bool:
        node.value.visit(self)
        return False

    def visit_Arg(self, node: cst.Arg) -> bool:
        node.value.visit(self)
        return False

    def visit_Annotation(self, node: cst.Annotation) -> None:
        self._typing += 1

    def leave_Annotation(self, original_node: cst.Annotation) -> None:
        self._typing -= 1

    def visit_SubscriptElement(self, node: cst.SubscriptElement) -> None:
        self._typing += 1

    def leave_SubscriptElement(self, original_node: cst.SubscriptElement) -> None:
        self._typing -= 1

    def visit_Call(self, node: cst.Call) -> None:
        func = node.func
        called = func.value if isinstance(func, cst.Name) else (
            func.attr.value if isinstance(func, cst.Attribute) else None)
        typing = called in _TYPING_CALLS
        exports = (isinstance(func, cst.Attribute) and isinstance(func.value, cst.Name)
                   and func.value.value == "__all__" and called in ("append", "extend", "insert"))
        self._typing += typing
        self._all += exports
        self._counted.append((typing, exports))

    def leave_Call(self, original_node: cst.Call) -> None:
        typing, exports = self._counted.pop()
        self._typing -= typing
        self._all -= exports

    def _enter_all(self, targets: Iterable[cst.BaseExpression]) -> None:
        exports = any(isinstance(t, cst.Name) and t.value == "__all__" for t in targets)
        self._all += exports
        self._counted.append((False, exports))

    def _leave_all(self) -> None:
        _typing, exports = self._counted.pop()
        self._all -= exports

    def visit_Assign(self, node: cst.Assign) -> None:
        self._enter_all(t.target for t in node.targets)

    def leave_Assign(self, original_node: cst.Assign) -> None:
        self._leave_all()

    def visit_AugAssign(self, node: cst.AugAssign) -> None:
        self._enter_all([node.target])

    def leave_AugAssign(self, original_node: cst.AugAssign) -> None:
        self._leave_all()

    def visit_AnnAssign(self, node: cst.AnnAssign) -> None:
        self._enter_all([node.target])

    def leave_AnnAssign(self, original_node: cst.AnnAssign) -> None:
        self._leave_all()

    def visit_SimpleString(self, node: cst.SimpleString) -> None:
        if not (self._typing or self._all):
            return
        try:
            value = node.evaluated_value
        except Exception:  # noqa: BLE001 - a string libcst cannot evaluate: its raw text
            value = node.value
        if isinstance(value, bytes):
            value = value.decode("latin-1")
        if self._all:
            self.names.add(value)
        if self._typing:
            self.names.update(_IDENTIFIER.findall(value))


def referenced_names(module: cst.CSTNode | Iterable[cst.CSTNode]) -> set[str]:
    """The names `module` (or each of a list of statements) refers to outside import statements
    (see _References)."""
    visitor = _References()
    for node in [module] if isinstance(module, cst.CSTNode) else module:
        node.visit(visitor)
    return visitor.names


def newly_unused(before: cst.Module, after: cst.Module) -> set[str]:
    """Module-level import bindings that `before` refers to and `after` does not: the imports the
    rewrite left unused. Never a name that was unused before (side-effect imports, re-exports),
    never a `from __future__` import or an `x as x` re-export.

    The rewrite hands back the statements it did not change as the same objects (the dispatcher
    returns untouched nodes themselves), so only the changed statements are read first: a name
    that they refer to before and not after is then looked for in the unchanged ones. Reading
    both whole modules cost a sixth of a cold run of the torch tree."""
    lost = lost_in_changed(before, after)
    if not lost:
        return set()
    kept = {id(stmt) for stmt in before.body} & {id(stmt) for stmt in after.body}
    return lost - referenced_names([s for s in before.body if id(s) in kept])


def lost_in_changed(before: cst.Module, after: cst.Module) -> set[str]:
    """`newly_unused` without its last step: the module-level import bindings that the changed
    statements refer to before and not after, whether or not the unchanged ones still do. For a
    caller that settles that by the new text (`names_used_in_text`, which finds every use
    `referenced_names` finds, and more): reading the unchanged statements with libcst was a
    seventh of a cold check of torch's test utilities."""
    candidates = module_import_bindings(before) & module_import_bindings(after)
    if not candidates:
        return set()
    kept = {id(stmt) for stmt in before.body} & {id(stmt) for stmt in after.body}
    lost = referenced_names([s for s in before.body if id(s) not in kept]) & candidates
    if not lost:
        return set()
    return lost - referenced_names([s for s in after.body if id(s) not in kept])


def names_used_in_text(text: str, names: Iterable[str]) -> set[str]:
    """The subset of `names` that Python source `text` (statements that need not parse on their
    own) refers to: NAME tokens not after a `.` and outside `import` / `from ... import`
    statements, and strings holding the name as a word. All of `names` when `text` does not
    tokenize (conservative)."""
    wanted = set(names)
    if not wanted:
        return set()
    try:
        tokens = list(tokenize.generate_tokens(io.StringIO(text).readline))
    except (tokenize.TokenError, SyntaxError, ValueError):
        return wanted
    string_types = {tokenize.STRING}
    if hasattr(tokenize, "FSTRING_MIDDLE"):
        string_types.add(tokenize.FSTRING_MIDDLE)
    skipped = {tokenize.NL, tokenize.COMMENT, tokenize.INDENT, tokenize.DEDENT, tokenize.ENCODING}
    found: set[str] = set()
    statement_start = True
    in_import = False
    depth = 0
    previous: Optional[tokenize.TokenInfo] = None
    for token in tokens:
        kind = token.type
        if kind in skipped:
            continue
        if kind in (tokenize.NEWLINE, tokenize.ENDMARKER):
            statement_start, in_import, depth, previous = True, False, 0, None
            continue
        if kind == tokenize.OP:
            if token.string in ("(", "[", "{"):
                depth += 1
            elif token.string in (")", "]", "}"):
                depth = max(0, depth - 1)
            elif token.string == ";" and depth == 0:
                statement_start, in_import, previous = True, False, token
                continue
            elif token.string == ":" and depth == 0 and not in_import:
                statement_start, previous = True, token  # `try: import x`, `else: from y import z`
                continue
        if statement_start:
            statement_start = False
            in_import = kind == tokenize.NAME and token.string in ("import", "from")
        if kind == tokenize.NAME:
            after_dot = previous is not None and previous.type == tokenize.OP and previous.string == "."
            if not in_import and not after_dot and token.string in wanted:
                found.add(token.string)
        elif kind in string_types:
            for name in wanted - found:
                if re.search(rf"(?<!\w){re.escape(name)}(?!\w)", token.string):
                    found.add(name)
        previous = token
        if len(found) == len(wanted):
            break
    return found


def _without_aliases(aliases: Sequence[cst.ImportAlias], keep: Sequence[bool]) -> list[cst.ImportAlias]:
    kept = [alias for alias, k in zip(aliases, keep) if k]
    if not kept or keep[-1]:
        return kept
    # the last member went: the new last one takes its closing comma (or lack of one)
    closing = aliases[-1].comma
    last = kept[-1]
    if not isinstance(closing, cst.Comma):
        kept[-1] = last.with_changes(comma=cst.MaybeSentinel.DEFAULT)
    elif (isinstance(last.comma, cst.Comma) and _breaks_line(last.comma.whitespace_after)
          and _breaks_line(closing.whitespace_after)):
        own = last.comma.whitespace_after
        end = closing.whitespace_after
        kept[-1] = last.with_changes(comma=last.comma.with_changes(whitespace_after=own.with_changes(
            empty_lines=[*own.empty_lines, *end.empty_lines], indent=end.indent, last_line=end.last_line)))
    else:
        kept[-1] = last.with_changes(comma=closing)
    return kept


def _prune_small(small: cst.BaseSmallStatement, names: set[str]) -> Optional[cst.BaseSmallStatement]:
    """The statement without the aliases binding `names`; None when none is left."""
    bindings = _small_bindings(small)
    keep = [binding is None or binding not in names for binding in bindings]
    if all(keep):
        return small
    if not any(keep):
        return None
    assert isinstance(small, (cst.Import, cst.ImportFrom))
    return small.with_changes(names=_without_aliases(list(small.names), keep))


def remove_import_bindings(module: cst.Module, names: Iterable[str]) -> cst.Module:
    """`module` without the module-level import bindings of `names`. A statement left with no
    name goes with its line; the comments above it move to the next statement; the blank lines
    between sections of the leading import block stay as ruff's isort wants them."""
    names = set(names)
    if not names:
        return module
    start, end = leading_block(module)
    body = list(module.body)
    dropped: set[int] = set()
    changed = False
    for index, stmt in enumerate(body):
        if not isinstance(stmt, cst.SimpleStatementLine):
            continue
        if not any(isinstance(s, (cst.Import, cst.ImportFrom)) for s in stmt.body):
            continue
        smalls = []
        for small in stmt.body:
            pruned = _prune_small(small, names)
            if pruned is not None:
                smalls.append(pruned)
        if len(smalls) == len(stmt.body) and all(a is b for a, b in zip(smalls, stmt.body)):
            continue
        changed = True
        if not smalls:
            dropped.add(index)
            continue
        if isinstance(smalls[-1].semicolon, cst.Semicolon):
            smalls[-1] = smalls[-1].with_changes(semicolon=cst.MaybeSentinel.DEFAULT)
        body[index] = stmt.with_changes(body=smalls)
    if not changed:
        return module
    if not dropped:
        return module.with_changes(body=body)

    out: list[cst.BaseStatement] = []
    out_in_block: list[bool] = []
    pending: list[int] = []  # dropped indexes since the last statement kept
    for index in range(len(body) + 1):
        if index in dropped:
            pending.append(index)
            continue
        stmt = body[index] if index < len(body) else None
        if pending:
            lines = _lines_after_drops(body, pending, stmt, index, start, end,
                                       previous_in_block=bool(out_in_block) and out_in_block[-1],
                                       at_top=not out, header=module.header)
            if stmt is None:
                module = module.with_changes(footer=_join_lines(lines, module.footer))
            else:
                stmt = stmt.with_changes(leading_lines=lines)
            pending = []
        if stmt is not None:
            out.append(stmt)
            out_in_block.append(start <= index < end)
    if not out and not module.header and not module.footer:
        return module.with_changes(body=out, has_trailing_newline=False)  # nothing left
    return module.with_changes(body=out)


def _lines_after_drops(body, pending, stmt, index, start, end, *, previous_in_block, at_top, header):
    """The leading lines of `stmt` (None: the module's footer) once the statement lines at
    `pending` (consecutive, just before it) are gone."""
    own = list(stmt.leading_lines) if stmt is not None else []
    first = list(body[pending[0]].leading_lines)
    moved = _comments([line for i in pending[1:] for line in body[i].leading_lines])
    drops_in_block = start <= pending[0] < end
    if drops_in_block and previous_in_block and stmt is not None and start <= index < end:
        # between two imports of the block: one blank line before a section or a comment
        comments = _comments(first) + moved + _comments(own)
        separate = bool(comments) or any(
            _leading_blanks(lines) for lines in [first, *(body[i].leading_lines for i in pending[1:]), own])
        return ([_BLANK] if separate else []) + comments
    if drops_in_block and previous_in_block and stmt is not None:
        # the block's last imports went: its blank lines before the code stay as they were
        blanks = _leading_blanks(own)
        return own[:blanks] + _comments(first) + moved + own[blanks:]
    if drops_in_block and stmt is not None and start <= index < end:
        # the block's first imports went: the next one takes their place (and lines above)
        return first + moved + _comments(own)
    lines = _join_lines(first + moved, own)
    if at_top and (not header or _is_blank(header[-1])):
        lines = lines[_leading_blanks(lines):]
    return lines
