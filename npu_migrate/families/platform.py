"""Code that already decides between CUDA and the NPU, and device checks in front of CUDA-only
code: what the `Context` reads from the whole file before a rule rewrites anything.

Both questions need more than the node a rule is leaving: the other arms of a branch chain, a
sibling class, the body a check guards. With hot slices those may be cold placeholders, so they
are answered here from the file's own text (with the cold statements put back), parsed once by
`ast`, and only when a rule asks.

- **Platform-aware scopes** (`platform_scopes`). A branch chain (`if`/`elif`/`else`), a
  conditional expression, a boolean chain (`a or b`), a dict display or a family of sibling
  classes that handles an NPU value ("npu", "hccl", `ASCEND_RT_VISIBLE_DEVICES`) next to a CUDA
  value is platform-aware: its authors decided what runs where, and no rule may rewrite inside it.
  So is a backend or device comparison whose comment (right above it, or the enclosing function's
  docstring) names HCCL, the NPU or Ascend: the exclusion is deliberate. Only the outermost scope
  is recorded. A family may also span the modules of one folder (DeepSpeed's
  `accelerator/cuda_accelerator.py` beside `npu_accelerator.py`, subclasses of one base the
  folder defines): the run finds those before the files are migrated (`sibling_class_families`).
- **CUDA-only gates** (`CudaOnlyGates`). An `if` or conditional expression whose test checks for
  CUDA (`x.is_cuda`, `device.type == "cuda"`, `"cuda" in device`) and whose guarded branch uses
  CUDA-only code (an import of a CUDA-only package or a compiled extension, a name bound by one,
  a Triton kernel, `torch._C._cuda*`, CUDA IPC) keeps meaning CUDA: widening it would send NPU
  tensors into that code (NPU110).

The knowledge (which values, attributes, modules and names) is read from rules/device.toml
(`[platform]`) and rules/sweep.toml (the CUDA-only modules).
"""

from __future__ import annotations

import ast
import functools
import re
from dataclasses import dataclass
from typing import Optional

from .. import astcache, catalogue, earlyexits27

# A file whose text has none of these holds no platform-aware scope (the cheap test first).
_LINE_BREAK = re.compile(r"\r\n|\r|\n")


@dataclass(frozen=True)
class Scope:
    """A region of the file, (line, column) 1-based with the column in characters, end exclusive."""

    start: tuple[int, int]
    end: tuple[int, int]
    reason: str

    def contains(self, position: tuple[int, int]) -> bool:
        return self.start <= position < self.end

    @property
    def lines(self) -> tuple[int, int]:
        """First and last line (a scope ending at column 1 ends on the line before)."""
        last = self.end[0] if self.end[1] > 1 else max(self.start[0], self.end[0] - 1)
        return self.start[0], last


@functools.lru_cache(maxsize=None)
def _tables():
    t = catalogue.device_table()["platform"]
    sweep = catalogue.read_table("sweep.toml")
    exempt = tuple(t["gate_module_exempt"])
    modules = tuple(m for m in sweep["modules"] if not any(m == e or m.startswith(e + ".") for e in exempt))
    return (
        re.compile(t["npu_values"]),
        re.compile(t["cuda_values"]),
        frozenset(t["npu_attributes"]),
        frozenset(t["cuda_attributes"]),
        re.compile(t["npu_comment_pattern"], re.IGNORECASE),
        modules,
        exempt,
        re.compile(t["gate_names"]),
        re.compile(t["gate_toolchain_refs"]),
        re.compile(t["gate_toolchain_names"]),
    )


class _Lines:
    """ast positions (1-based lines, UTF-8 byte columns) as the source map's (character columns)."""

    def __init__(self, text: str) -> None:
        self.lines = _LINE_BREAK.split(text)

    def column(self, line: int, byte_offset: int) -> int:
        if not 0 < line <= len(self.lines):
            return byte_offset + 1
        text = self.lines[line - 1]
        if text.isascii():
            return byte_offset + 1
        return len(text.encode("utf-8")[:byte_offset].decode("utf-8", "replace")) + 1

    def scope(self, node: ast.AST, reason: str, end_node: Optional[ast.AST] = None) -> Scope:
        end_node = end_node or node
        start = (node.lineno, self.column(node.lineno, node.col_offset))
        end = (end_node.end_lineno, self.column(end_node.end_lineno, end_node.end_col_offset))
        return Scope(start, end, reason)


def node_scopes(text: str, regions) -> list[Scope]:
    """The scopes of (first node, last node, reason) regions another module found in the file's
    tree (pinned33.py: a test that pins the platform's device type to CUDA)."""
    lines = _Lines(text)
    return [lines.scope(first, reason, last) for first, last, reason in regions]


def may_hold_scopes(text: str) -> bool:
    """The cheap test first: a file without these words holds no platform-aware scope (plain
    substring tests before the case-blind pattern, which costs far more on the many files that
    name none of them)."""
    for match in _NPU_WORDS.finditer(text):
        start, word = match.start(), match.group()
        before = text[start - 1] if start else " "
        if word[0] in "sS":  # (a)scend, not "descend"
            if before in "aA" and (start < 2 or not text[start - 2].isalpha()):
                return True
        elif word[0] not in "nN" or not before.isalpha():  # npu, not the "npu" of "input"
            return True
    return False


# Case-sensitive words, checked one by one in may_hold_scopes ("npu" not inside a word: `input`
# holds the letters too): far cheaper than a case-blind pattern with a look-behind. `PrivateUse1`:
# the backend slot torch_npu registers the NPU in (rules/device.toml npu_attributes).
_NPU_WORDS = re.compile(r"npu|NPU|Npu|hccl|HCCL|Hccl|scend|SCEND|PrivateUse1")


# An NPU value or reference as code holds it (a quoted "npu"/"hccl", `.npu`, `is_npu`, an Ascend
# or HCCL variable): what an NPU class of a family needs (`_marks`), tested before parsing.
_NPU_CODE = re.compile(r"""["'](?:npu|hccl)\b|\.npu\b|\bis_npu\b|ASCEND_[A-Z]|HCCL_[A-Z]""")


def parse(text: str) -> Optional[ast.Module]:
    """The file's tree; the one the hot-slice reduction parsed from the same bytes where the text
    is that file's (astcache), so a file is parsed once. A text with a coding declaration is
    parsed as text: its bytes would be read in the declared encoding."""
    head = text[:2000].split("\n", 2)[:2]
    if not any("coding" in line for line in head):
        return astcache.parse(text.encode("utf-8", "surrogatepass"))
    try:
        return ast.parse(text)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None


# ----------------------------------------------------------------------------- markers
def _string(node: ast.AST) -> Optional[str]:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr) and node.values:  # f"npu:{i}": its leading text
        first = node.values[0]
        if isinstance(first, ast.Constant) and isinstance(first.value, str) and first.value.endswith(":"):
            return first.value[:-1]
    return None


def _marks(node: ast.AST) -> tuple[bool, bool]:
    """(a CUDA value or reference, an NPU value or reference) anywhere in the subtree."""
    npu_values, cuda_values, npu_attrs, cuda_attrs = _tables()[:4]
    cuda = npu = False
    for sub in ast.walk(node):
        value = _string(sub)
        if value is not None:
            cuda = cuda or cuda_values.fullmatch(value) is not None
            npu = npu or npu_values.fullmatch(value) is not None
        elif isinstance(sub, ast.Attribute):
            owner = sub.value.attr if isinstance(sub.value, ast.Attribute) else getattr(sub.value, "id", "")
            cuda = cuda or sub.attr in cuda_attrs or f"{owner}.{sub.attr}" in cuda_attrs
            npu = npu or sub.attr in npu_attrs or f"{owner}.{sub.attr}" in npu_attrs
        if cuda and npu:
            break
    return cuda, npu


def _any_marks(nodes) -> tuple[bool, bool]:
    cuda = npu = False
    for node in nodes:
        c, n = _marks(node)
        cuda, npu = cuda or c, npu or n
    return cuda, npu


# ----------------------------------------------------------------------------- platform-aware scopes
def platform_scopes(text: str, tree: Optional[ast.Module] = None,
                    sibling_classes: Optional[dict[str, str]] = None) -> list[Scope]:
    """The outermost platform-aware scopes of the file (see the module docstring).

    `sibling_classes`: class name -> reason for the file's classes that belong to a family of
    per-device classes across the modules of its folder (`sibling_class_families`)."""
    if not may_hold_scopes(text) and not sibling_classes:
        return []
    tree = tree if tree is not None else parse(text)
    if tree is None:
        return []
    lines = _Lines(text)
    comment_re = _tables()[4]
    families = _class_families(tree)
    if sibling_classes:
        for node in astcache.walk(tree):
            if isinstance(node, ast.ClassDef) and node.name in sibling_classes:
                families.setdefault(id(node), sibling_classes[node.name])
    found: list[Scope] = []

    def visit(node: ast.AST, parent: Optional[ast.AST], docstring: str) -> None:
        reason = _scope_reason(node, parent, families)
        if reason is None and isinstance(node, ast.stmt):
            reason = _commented_choice(node, lines, docstring, comment_re)
            if reason is not None and isinstance(node, (ast.If, ast.While)):
                found.append(lines.scope(node.test, reason))  # the test only: the body is its own
                reason = None
                for child in (*node.body, *node.orelse):
                    visit(child, node, docstring)
                return
        if reason is not None:
            found.append(lines.scope(node, reason))
            return
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            docstring = ast.get_docstring(node, clean=False) or ""
        for child in ast.iter_child_nodes(node):
            visit(child, node, docstring)

    try:
        visit(tree, None, "")
    except RecursionError:
        return []
    return found


def _scope_reason(node: ast.AST, parent: Optional[ast.AST], families: dict[int, str]) -> Optional[str]:
    if isinstance(node, ast.If):
        tests, blocks = [], []
        arm: ast.If = node
        while True:
            tests.append(arm.test)
            blocks.extend(arm.body)
            if len(arm.orelse) == 1 and isinstance(arm.orelse[0], ast.If):
                arm = arm.orelse[0]
                continue
            blocks.extend(arm.orelse)
            break
        cuda_tests, npu_tests = _any_marks(tests)
        if npu_tests and (cuda_tests or _any_marks(blocks)[0]):
            return "branch chain handles NPU"
        if cuda_tests and _any_marks(blocks)[1]:
            return "branch chain handles NPU"
        return None
    if isinstance(node, ast.IfExp) and not isinstance(parent, ast.IfExp):
        return "conditional expression handles NPU" if all(_marks(node)) else None
    if isinstance(node, ast.BoolOp) and not isinstance(parent, ast.BoolOp):
        word = "or" if isinstance(node.op, ast.Or) else "and"
        return f"`{word}` chain handles NPU" if all(_marks(node)) else None
    if isinstance(node, ast.Dict):
        return "dict handles NPU" if all(_marks(node)) else None
    if (isinstance(node, (ast.List, ast.Tuple, ast.Set)) and not isinstance(parent, (ast.List, ast.Tuple, ast.Set))
            and not (isinstance(parent, ast.Compare) and node in parent.comparators)
            and not (isinstance(parent, ast.keyword) and parent.arg == "choices")):
        # (a membership test `x in ("cuda", "npu")` and a CLI's `choices=[...]` are the device and
        # CLI families': they keep or widen them, and their own output has both values)
        kind = type(node).__name__.lower()  # `return ["cuda", "npu"]`, `runs_on(("cuda", "npu"))`
        return f"{kind} handles NPU" if all(_marks(node)) else None
    if isinstance(node, ast.ClassDef):
        return families.get(id(node))
    return None


def _members(cls: ast.ClassDef) -> dict[str, ast.AST]:
    """Class attributes and one-`return` methods (properties included): name -> value."""
    members: dict[str, ast.AST] = {}
    for stmt in cls.body:
        if isinstance(stmt, ast.Assign):
            for target in stmt.targets:
                if isinstance(target, ast.Name):
                    members[target.id] = stmt.value
        elif isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name) and stmt.value is not None:
            members[stmt.target.id] = stmt.value
        elif isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)):
            body = stmt.body[1:] if ast.get_docstring(stmt, clean=False) is not None else stmt.body
            if len(body) == 1 and isinstance(body[0], ast.Return) and body[0].value is not None:
                members[stmt.name] = body[0].value
    return members


def _class_families(tree: ast.Module) -> dict[int, str]:
    """Classes of one module that define the same member, one with a CUDA value and a sibling
    with an NPU value (`device_type = "cuda"` beside `device_type = "npu"`): id -> reason."""
    classes = [node for node in astcache.walk(tree) if isinstance(node, ast.ClassDef)]
    if len(classes) < 2:
        return {}
    sides: list[tuple[ast.ClassDef, set[str], set[str]]] = []  # class, CUDA members, NPU members
    for cls in classes:
        cuda_members, npu_members = set(), set()
        for name, value in _members(cls).items():
            cuda, npu = _marks(value)
            if cuda and not npu:
                cuda_members.add(name)
            elif npu and not cuda:
                npu_members.add(name)
        if cuda_members or npu_members:
            sides.append((cls, cuda_members, npu_members))
    out: dict[int, str] = {}
    for cls, cuda_members, _npu in sides:
        if not cuda_members:
            continue
        siblings = [other.name for other, _c, npu_members in sides if other is not cls and cuda_members & npu_members]
        if siblings:
            out[id(cls)] = f"class family: sibling class {siblings[0]} handles NPU"
    return out


def _commented_choice(stmt: ast.stmt, lines: _Lines, docstring: str, comment_re: re.Pattern) -> Optional[str]:
    """A statement comparing with a CUDA value whose comment (the lines right above, or one at
    the end of its own lines) or enclosing docstring names the NPU side: a deliberate choice."""
    if isinstance(stmt, (ast.If, ast.While)):
        checked: ast.AST = stmt.test
    elif isinstance(stmt, (ast.Return, ast.Assign, ast.AnnAssign, ast.AugAssign, ast.Expr, ast.Assert)):
        checked = stmt
    else:
        return None
    if not _compares_cuda(checked):
        return None
    texts = []
    line = stmt.lineno - 1
    while line >= 1 and lines.lines[line - 1].lstrip().startswith("#"):
        texts.append(lines.lines[line - 1])
        line -= 1
    last = checked.end_lineno if checked is not stmt else stmt.end_lineno
    for number in range(stmt.lineno, min(last, len(lines.lines)) + 1):
        text = lines.lines[number - 1]
        if "#" in text:
            texts.append(text[text.index("#"):])
    if docstring:
        texts.append(docstring)
    if any(comment_re.search(t) for t in texts):
        return "a comment explains the CUDA-only choice"
    return None


def _compares_cuda(node: ast.AST) -> bool:
    cuda_values = _tables()[1]
    for sub in ast.walk(node):
        if isinstance(sub, ast.Compare):
            for operand in (sub.left, *sub.comparators):
                value = _string(operand)
                if value is not None and cuda_values.fullmatch(value):
                    return True
    return False


# ----------------------------------------------------------------------------- CUDA-only gates
class CudaOnlyGates:
    """Tests of `if`s, `while`s and conditional expressions that check for CUDA in front of
    CUDA-only code, answered for one position at a time: only the statements and expressions on
    the way down to it are looked at (a device check is asked about where a rule meets it), and
    the names the file binds to CUDA-only code are collected once, on the first check that needs
    them. A whole-file pass cost more than the rest of the rules on files with many checks."""

    def __init__(self, text: str, tree: ast.Module, foreign: Optional[dict] = None, relpath: str = "") -> None:
        self.tree = tree
        self.lines = _Lines(text)
        self._bound: Optional[dict[str, str]] = None
        # (module as its imports resolve, name) -> what: CUDA-only code of other modules of the run
        self._foreign = foreign or {}
        self._relpath = relpath

    def bound(self) -> dict[str, str]:
        if self._bound is None:
            self._bound = _cuda_only_bindings(self.tree)
            if self._foreign:
                self._bound.update(_foreign_bindings(self.tree, self._foreign, self._relpath))
        return self._bound

    def at(self, position: tuple[int, int]) -> Optional[str]:
        """What CUDA-only code the test holding `position` guards, or None. A test is that of an
        `if`, `while` or conditional expression, the left operand of an `and` chain (the operands
        after it are guarded), an `assert` (the statements after it), or the condition of a
        `skipif`/`skipUnless` decorator (the decorated test)."""
        line = position[0]
        node: ast.AST = self.tree
        try:
            while True:
                for field in ("body", "orelse", "finalbody"):
                    block = getattr(node, field, None)
                    if not isinstance(block, list):
                        continue
                    for index, stmt in enumerate(block):
                        why = None
                        if isinstance(stmt, (ast.If, ast.While)) and _spans(stmt.test, line):
                            why = self._gate(stmt.test, stmt.body, stmt.orelse, block[index + 1:], position)
                        elif isinstance(stmt, ast.Assert) and _spans(stmt.test, line):
                            # `assert x.is_cuda` in front of a kernel fails on the NPU kept or
                            # widened (there is no fallback): only a CUDA version or toolchain
                            # fact read after it makes it a gate worth keeping
                            why = self._gate(stmt.test, block[index + 1:], [], [], position, toolchain_only=True)
                        elif isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                            why = self._decorators(stmt, position)
                        if why:
                            return why
                if isinstance(node, ast.IfExp) and _spans(node.test, line):
                    why = self._gate(node.test, [node.body], [node.orelse], [], position)
                    if why:
                        return why
                if isinstance(node, ast.BoolOp) and isinstance(node.op, ast.And):
                    for index, operand in enumerate(node.values[:-1]):
                        if _spans(operand, line):
                            # one chain, the test included: an operand may test the next's input
                            # (`(x.is_cuda and torch.version.cuda) and version.parse(...)`)
                            guarded = ast.BoolOp(op=ast.And(), values=node.values[index:])
                            why = self._gate(operand, [guarded], [], [], position)
                            if why:
                                return why
                node = next((child for child in ast.iter_child_nodes(node) if _spans(child, line)), None)
                if node is None:
                    return None
        except RecursionError:
            return None

    def _decorators(self, definition, position) -> Optional[str]:
        """`@pytest.mark.skipif(not torch.cuda.is_available(), ...)` / `@unittest.skipUnless(
        torch.cuda.is_available(), ...)`: the condition guards the decorated test's body."""
        for decorator in definition.decorator_list:
            if not (isinstance(decorator, ast.Call) and _spans(decorator, position[0])):
                continue
            name = _dotted(decorator.func) or ""
            last = name.rsplit(".", 1)[-1]
            if last not in ("skipif", "skipIf", "skipUnless"):
                continue
            condition = decorator.args[0] if decorator.args else next(
                (k.value for k in decorator.keywords if k.arg == "condition"), None)
            if condition is None:
                continue
            if last == "skipUnless":
                why = self._gate(condition, definition.body, [], [], position)
            else:
                why = self._gate(condition, [], definition.body, [], position)
            if why:
                return why
        return None

    def _gate(self, test, body, orelse, after, position, toolchain_only: bool = False) -> Optional[str]:
        scope = self.lines.scope(test, "")
        if not scope.contains(position):
            return None
        return _gate(test, body, orelse, after, (lambda: {}) if toolchain_only else self.bound, toolchain_only)


def _dotted(node: ast.AST) -> Optional[str]:
    return astcache.dotted(node, strict=True)  # None when the chain is not on a name


def _spans(node: ast.AST, line: int) -> bool:
    start, end = getattr(node, "lineno", None), getattr(node, "end_lineno", None)
    return start is not None and end is not None and start <= line <= end


def _polarity(test: ast.AST) -> tuple[bool, bool]:
    """(a check that holds on CUDA, a check that holds off CUDA) in the test."""
    positive = negative = False

    def walk(node: ast.AST, negated: bool) -> None:
        nonlocal positive, negative
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
            walk(node.operand, not negated)
            return
        check = None
        if isinstance(node, ast.Attribute) and node.attr == "is_cuda":
            check = True
        elif isinstance(node, ast.Call) and _dotted(node.func) in _AVAILABLE:
            check = True
        elif isinstance(node, ast.Compare) and len(node.ops) == 1:
            values = [_string(node.left), _string(node.comparators[0])]
            if "cuda" in values:
                check = isinstance(node.ops[0], (ast.Eq, ast.In, ast.Is))
                if isinstance(node.ops[0], (ast.NotEq, ast.NotIn, ast.IsNot)):
                    check = False
        if check is not None:
            if check != negated:
                positive = True
            else:
                negative = True
            return
        for child in ast.iter_child_nodes(node):
            walk(child, negated)

    walk(test, False)
    return positive, negative


polarity = _polarity  # (for rewrite_gates.py)


# `torch.cuda.is_available()` holds on CUDA only until npu-migrate widens it: a gate like `x.is_cuda`.
_AVAILABLE = ("torch.cuda.is_available", "cuda.is_available")


def _exits(block: list) -> bool:
    return bool(block) and isinstance(block[-1], (ast.Return, ast.Raise, ast.Continue, ast.Break))


def _gate(test, body: list, orelse: list, after: list, bound, toolchain_only: bool = False) -> Optional[str]:
    """`bound`: a callable giving the file's names bound to CUDA-only code (asked only when the
    test checks for CUDA at all)."""
    positive, negative = _polarity(test)
    if not (positive or negative):
        return None
    bound = bound()
    guarded = []
    if positive:
        guarded += body
    if negative:
        guarded += orelse
        if _exits(body):  # `if not x.is_cuda: return fallback(x)` guards what follows
            guarded += after
    for node in guarded:
        why = _cuda_only_code(node, bound, toolchain_only)
        if why:
            return why
    return None


def _cuda_only_module(name: str) -> bool:
    modules, exempt = _tables()[5:7]
    clean = name.lstrip(".")
    if "nvidia" in clean.split("."):
        return True  # NVIDIA's packages, a project's NVIDIA code (`from vllm.models.x.nvidia.ops import k`)
    if any(clean == e or clean.startswith(e + ".") for e in exempt):
        return False
    if any(clean == m or clean.startswith(m + ".") for m in modules):
        return True
    parts = [p for p in name.split(".") if p]
    if parts and parts[0] in ("torch", "torchvision", "torchaudio", "torch_npu", "functorch"):
        return False
    if name.startswith(".") and "cuda" in parts:
        return True  # the project's own CUDA backend (`from .backends.cuda import ops`): rewrite_gates
    # compiled extensions (`pkg._C`, `_CUDA`, `*_cuda`, as the sweep names them) and Triton modules
    return any(p in ("_C", "_CUDA") or p.endswith("_cuda") or "triton" in p.lower() for p in parts)


def _import_names(node: ast.AST) -> list[tuple[str, str]]:
    """(local name, module it comes from) for the names an import binds."""
    out = []
    if isinstance(node, ast.Import):
        for alias in node.names:
            local = alias.asname or alias.name.split(".")[0]
            out.append((local, alias.name))
    elif isinstance(node, ast.ImportFrom):
        module = "." * node.level + (node.module or "")
        for alias in node.names:
            full = f"{module}.{alias.name}" if node.module else module + alias.name
            if _cuda_only_module(module) or _cuda_only_module(full):
                out.append((alias.asname or alias.name, module))
    return out


def _statements(node: ast.AST):
    """Every statement under `node`, nested blocks included (not the expressions: far fewer
    nodes than ast.walk)."""
    stack = [node]
    while stack:
        current = stack.pop()
        for field in ("body", "orelse", "finalbody", "handlers", "cases"):
            block = getattr(current, field, None)
            if isinstance(block, list):
                for child in reversed(block):
                    if isinstance(child, (ast.stmt, ast.excepthandler, ast.match_case)):
                        stack.append(child)
        if isinstance(current, ast.stmt):
            yield current


def _cuda_only_bindings(tree: ast.Module) -> dict[str, str]:
    """Names the file binds to CUDA-only code: imported from a CUDA-only module, or a Triton
    kernel (a function under `@triton.jit` / `@triton.autotune`): name -> what it is."""
    bound: dict[str, str] = {}
    statements = list(_statements(tree))  # imports and definitions are statements: no expressions
    for node in statements:
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            for local, module in _import_names(node):
                if local != "*" and _cuda_only_module(module):
                    bound[local] = f"`{module}`"
    for node in statements:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            for decorator in node.decorator_list:
                target = decorator.func if isinstance(decorator, ast.Call) else decorator
                head = target
                while isinstance(head, ast.Attribute):
                    head = head.value
                if isinstance(head, ast.Name) and (head.id == "triton" or "triton" in bound.get(head.id, "")):
                    bound[node.name] = "a Triton kernel"
    if any(what == "a Triton kernel" for what in bound.values()):
        bound.update(launchers(tree, bound))  # (the functions and classes that launch them)
    return bound


def _foreign_bindings(tree: ast.Module, foreign: dict, relpath: str) -> dict[str, str]:
    """Names the file imports (at module level or in a function) that another module of the run
    binds to CUDA-only code (`from .ops.norm import fused_norm`, where ops/norm.py launches a
    Triton kernel): local name -> what, as crossgates22.py found it. The module is keyed as the
    run's import facts name it: the relpath stem for a relative import, the dotted name else."""
    from ..modpaths import resolve_relative

    bound: dict[str, str] = {}
    top = {id(stmt) for stmt in tree.body}
    by_module: dict[str, dict[str, str]] = {}
    for (module, name), what in foreign.items():
        by_module.setdefault(module, {})[name] = what

    def bind(local: str, module: str, top_level: bool) -> None:
        """`local` names the module itself (`import pkg.ops as m`, `from pkg import ops`)."""
        names = by_module.get(module, {})
        if "*" in names:
            # the module fails at import on an NPU host: an import of it in the importer's own
            # top-level statements fails the importer first, and nothing in it runs there
            if not top_level:
                bound[local] = names["*"]
            return
        for name, what in names.items():  # `m.norm_concat(x)`: the attribute is bound
            bound[f"{local}.{name}"] = what

    for node in _statements(tree):
        top_level = id(node) in top
        if isinstance(node, ast.ImportFrom):
            module = resolve_relative(relpath, node.level, node.module or "") if node.level else (node.module or "")
            names = by_module.get(module, {})
            for alias in node.names:
                local = alias.asname or alias.name
                what = names.get(alias.name) or (None if top_level else names.get("*"))
                if what:
                    bound[local] = what
                elif module or node.level:
                    sub = f"{module}/{alias.name}" if node.level else f"{module}.{alias.name}"
                    bind(local, sub if module else alias.name, top_level)
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.asname:  # (`import pkg.ops` binds `pkg`, the whole package: not bound)
                    bind(alias.asname, alias.name, top_level)
    return bound


def module_level_bindings(tree: ast.Module) -> dict[str, str]:
    """The file's module-level names bound to a Triton kernel or to a function or class that
    launches one (what an importer's device check in front of them guards: crossgates22.py).
    A module whose own top-level statements import a package an NPU host never has installed
    (sweep.toml `[availability] never_on_npu`: `import flashinfer`, not under `try`/`if`) fails at
    import there, whatever name is taken from it: "*" stands for every name."""
    bound = _cuda_only_bindings(tree)
    kept = {name: what for name, what in bound.items()
            if what == "a Triton kernel" or what.startswith(_LAUNCHER)}
    failing = failing_import(tree)
    if failing:
        kept["*"] = f"`{failing}` imported at module level"
    if not kept:
        return {}
    top: set[str] = set()
    stack = list(tree.body)
    while stack:  # module level, and under module-level `if`/`try`
        node = stack.pop()
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            top.add(node.name)
        elif isinstance(node, ast.Assign):
            top.update(t.id for t in node.targets if isinstance(t, ast.Name))
        elif isinstance(node, (ast.If, ast.Try)):
            stack.extend([*node.body, *node.orelse, *getattr(node, "finalbody", []),
                          *(s for h in getattr(node, "handlers", []) for s in h.body)])
    return {name: what for name, what in kept.items() if name in top or name == "*"}


def failing_import(tree: ast.Module) -> Optional[str]:
    """The first package an NPU host never has installed (sweep.toml `[availability]
    never_on_npu`) that the module imports in a top-level statement of its own (not under `try`,
    `if` or a function: an ImportError there ends the module's import), or None."""
    never = _never_on_npu()
    for stmt in tree.body:
        names = []
        if isinstance(stmt, ast.Import):
            names = [alias.name for alias in stmt.names]
        elif isinstance(stmt, ast.ImportFrom) and not stmt.level and stmt.module:
            names = [stmt.module]
        for name in names:
            if name.split(".")[0] in never:
                return name
    return None


@functools.lru_cache(maxsize=None)
def _never_on_npu() -> frozenset:
    return frozenset(catalogue.read_table("sweep.toml")["availability"]["never_on_npu"])


def _cuda_only_code(node: ast.AST, bound: dict[str, str], toolchain_only: bool = False) -> Optional[str]:
    """What CUDA-only code `node` runs, or None. `toolchain_only`: only CUDA version and
    toolchain facts count (not CUDA-only packages, Triton kernels, `_C._cuda*`, IPC)."""
    names_re, refs_re, toolchain_re = _tables()[7:10]
    quiet, used = _quiet(node, refs_re)
    if toolchain_only:
        names_re = re.compile(r"(?!)")  # matches nothing
    dotted_bound = any("." in name for name in bound)
    for sub in ast.walk(node):
        if isinstance(sub, ast.Import):
            for alias in sub.names:
                if not toolchain_only and _cuda_only_module(alias.name):
                    return f"imports `{alias.name}`"
        elif isinstance(sub, ast.ImportFrom):
            module = "." * sub.level + (sub.module or "")
            for alias in sub.names:
                full = f"{module}.{alias.name}" if sub.module else module + alias.name
                if not toolchain_only and (_cuda_only_module(module) or _cuda_only_module(full)):
                    return f"imports `{full}`"
                if id(sub) not in quiet and toolchain_re.fullmatch(alias.asname or alias.name):
                    return f"uses `{alias.name}`, the CUDA toolchain"
        elif isinstance(sub, ast.Name):
            if sub.id in bound:
                return f"uses `{sub.id}` ({bound[sub.id]})"
            if names_re.fullmatch(sub.id):
                return f"uses `{sub.id}`"
            if id(sub) not in quiet and toolchain_re.fullmatch(sub.id):
                return f"uses `{sub.id}`, the CUDA toolchain"
        elif isinstance(sub, ast.Attribute):
            if names_re.fullmatch(sub.attr):
                return f"uses `.{sub.attr}`"
            if dotted_bound and isinstance(sub.value, ast.Name) and f"{sub.value.id}.{sub.attr}" in bound:
                name = f"{sub.value.id}.{sub.attr}"  # another module's kernel by its module's alias
                return f"uses `{name}` ({bound[name]})"
            if not toolchain_only and sub.attr.startswith("_") and _reported_cuda_api(sub):
                # `torch.cuda.memory._record_memory_history()`: a private CUDA API the tool leaves
                # as written (NPU202); widened, the check would call it on an NPU host
                return f"uses `{_dotted(sub)}`, which npu-migrate leaves as written"
            if not toolchain_only and (failing := earlyexits27.fails_off_cuda(sub)):
                return failing  # `torch.cuda.cudart()`: fails on an NPU host (earlyexits27.py)
            inner = sub.value
            if (not toolchain_only and sub.attr.startswith("_cuda") and isinstance(inner, ast.Attribute)
                    and inner.attr == "_C"):
                return f"uses `_C.{sub.attr}`"
            if id(sub) in quiet:
                continue
            if id(sub) in used:
                return f"uses `{_dotted(sub)}`, None or absent on an NPU host"
            if toolchain_re.fullmatch(sub.attr):
                return f"uses `.{sub.attr}`, the CUDA toolchain"
        elif isinstance(sub, ast.Constant) and isinstance(sub.value, str) and id(sub) not in quiet:
            if _NVCC.search(sub.value):
                return "runs `nvcc`"
    return None


@functools.lru_cache(maxsize=None)
def _reported_names() -> frozenset:
    return frozenset(catalogue.cuda_api()["report"])


def _reported_cuda_api(node: ast.Attribute) -> bool:
    """`torch.cuda.X` where X is a private name the tool reports and leaves (rules/cuda_api.toml
    [report]: `memory._record_memory_history`, `_sleep`, `_lazy_init`)."""
    dotted = _dotted(node)
    if not dotted or not dotted.startswith("torch.cuda."):
        return False
    return dotted[len("torch.cuda."):] in _reported_names()


_NVCC = re.compile(r"\bnvcc\b")
_LOG_CALLS = frozenset(("print", "debug", "info", "warning", "warn", "error", "log", "write", "exception",
                        "warning_once", "info_once", "critical"))


def _quiet(node: ast.AST, refs_re: re.Pattern) -> tuple[set[int], set[int]]:
    """(quiet, used). Quiet: nodes where a toolchain fact is only shown or tested: inside an
    f-string or the arguments of a print or logging call, compared with None, tested for truth
    (`if CUDA_HOME:`), harmless where it is None. Used: the version references (`torch.version.cuda`,
    `torch.backends.cudnn.version`, ...) whose value is worked with: a method called on it
    (`.split`), indexed, passed to a function (`int(...)`, `version.parse(...)`), compared with
    something other than None, or computed with; not when an earlier operand of the same `and`
    (`or`) chain tests it for truth or None first (`torch.version.cuda and ...`)."""
    quiet: set[int] = set()
    used: set[int] = set()

    def hush(sub: ast.AST) -> None:
        quiet.update(id(n) for n in ast.walk(sub))

    def reference(sub: ast.AST):
        """The Attribute of a version reference that `sub` is (or calls), else None."""
        target = sub.func if isinstance(sub, ast.Call) else sub
        if isinstance(target, ast.Attribute):
            dotted = _dotted(target)
            if dotted is not None and refs_re.fullmatch(dotted):
                return target
        return None

    def tests_reference(value: ast.AST) -> bool:
        """`torch.version.cuda`, `not torch.version.cuda`, `torch.version.cuda is (not) None`, or
        an inner `and` chain holding one: what makes the rest of a chain safe."""
        if isinstance(value, ast.UnaryOp) and isinstance(value.op, ast.Not):
            value = value.operand
        if (isinstance(value, ast.Compare) and len(value.ops) == 1
                and isinstance(value.comparators[0], ast.Constant) and value.comparators[0].value is None):
            value = value.left
        if isinstance(value, ast.BoolOp):
            return any(tests_reference(v) for v in value.values)
        return reference(value) is not None

    def use(sub: ast.AST) -> None:
        ref = reference(sub)
        if ref is not None:
            used.add(id(ref))

    for sub in ast.walk(node):
        if isinstance(sub, ast.Attribute) and not isinstance(sub.ctx, ast.Store):
            use(sub.value)
        elif isinstance(sub, ast.Subscript):
            use(sub.value)
        elif isinstance(sub, ast.BinOp):
            use(sub.left)
            use(sub.right)
        elif isinstance(sub, ast.Compare):
            operands = (sub.left, *sub.comparators)
            if not any(isinstance(o, ast.Constant) and o.value is None for o in operands):
                for operand in operands:
                    use(operand)
        if id(sub) in quiet:
            continue
        if isinstance(sub, ast.JoinedStr):
            hush(sub)
        elif isinstance(sub, ast.Call):
            name = _dotted(sub.func) or ""
            if name.rsplit(".", 1)[-1] in _LOG_CALLS:
                for arg in (*sub.args, *(k.value for k in sub.keywords)):
                    hush(arg)
            else:
                for arg in (*sub.args, *(k.value for k in sub.keywords)):
                    use(arg)
        elif isinstance(sub, ast.Compare) and any(
                isinstance(o, ast.Constant) and o.value is None for o in (sub.left, *sub.comparators)):
            hush(sub)
        elif isinstance(sub, (ast.If, ast.IfExp, ast.While, ast.Assert)):
            if isinstance(sub.test, (ast.Attribute, ast.Name)):
                hush(sub.test)
        elif isinstance(sub, ast.BoolOp):
            for index, value in enumerate(sub.values):
                tested = value.operand if isinstance(value, ast.UnaryOp) and isinstance(value.op, ast.Not) else value
                if (isinstance(tested, ast.Compare) and len(tested.ops) == 1
                        and isinstance(tested.comparators[0], ast.Constant) and tested.comparators[0].value is None):
                    tested = tested.left
                if isinstance(tested, (ast.Attribute, ast.Name)):
                    hush(tested)
                if tests_reference(value):  # tested first: the later operands are safe
                    for later in sub.values[index + 1:]:
                        hush(later)
        elif isinstance(sub, ast.UnaryOp) and isinstance(sub.op, ast.Not):
            if isinstance(sub.operand, (ast.Attribute, ast.Name)):
                hush(sub.operand)
    return quiet, used


# ----------------------------------------------------------------------------- class families across modules
def _base_names(cls: ast.ClassDef) -> set[str]:
    """The last identifiers of a class's bases (`accel.DeepSpeedAccelerator` -> DeepSpeedAccelerator)."""
    names = set()
    for base in cls.bases:
        while isinstance(base, ast.Subscript):  # Generic[...]-style bases
            base = base.value
        if isinstance(base, ast.Attribute):
            names.add(base.attr)
        elif isinstance(base, ast.Name):
            names.add(base.id)
    return names


def _classes(text: str) -> list[tuple[ast.ClassDef, set[str]]]:
    """The classes of a module with their base names; none when it does not parse."""
    tree = parse(text)
    if tree is None:
        return []
    try:
        return [(node, _base_names(node)) for node in astcache.walk(tree) if isinstance(node, ast.ClassDef)]
    except RecursionError:
        return []


def sibling_class_families(folders: dict[str, dict[str, str]]) -> frozenset[tuple[str, str, str]]:
    """Classes that belong to a family of per-device classes spread over the modules of one folder:
    DeepSpeed's `CUDA_Accelerator(DeepSpeedAccelerator)` in accelerator/cuda_accelerator.py beside
    `NPU_Accelerator(DeepSpeedAccelerator)` in npu_accelerator.py. The project already decides per
    device there; migrating the CUDA class would make it a second NPU class.

    `folders`: folder -> {relpath: text} for the .py files of each folder that may hold such a
    family (the caller's cheap test). A class is a member when it shares a base with an NPU class
    of the same folder (one with NPU values and no CUDA value anywhere in its body), that base is a
    class defined in the same folder (the project's own platform base, not `object`, `nn.Module` or
    `ABC`), and it has a CUDA value itself. Returns (relpath, class name, reason) for each member.
    Only the modules that name the NPU are parsed first; the others only when they name a base
    of an NPU class found there.
    """
    found: set[tuple[str, str, str]] = set()
    for files in folders.values():
        npu_classes = [(rel, cls, bases) for rel, text in sorted(files.items()) if _NPU_CODE.search(text)
                       for cls, bases in _classes(text) if bases and _marks(cls) == (False, True)]
        if not npu_classes:
            continue
        wanted = set().union(*(bases for _rel, _cls, bases in npu_classes))
        defined = {base for base in wanted
                   if any(re.search(rf"\bclass\s+{re.escape(base)}\b", text) for text in files.values())}
        npu_classes = [(rel, cls, bases & defined) for rel, cls, bases in npu_classes if bases & defined]
        if not npu_classes:
            continue
        for relpath, text in sorted(files.items()):
            if not any(base in text for _rel, _cls, bases in npu_classes for base in bases):
                continue
            for cls, bases in _classes(text):
                if not _marks(cls)[0]:
                    continue  # no CUDA value: nothing a rule would change
                sibling = next(((rel, npu) for rel, npu, npu_bases in npu_classes
                                if npu.name != cls.name and bases & npu_bases), None)
                if sibling is not None:
                    rel, npu = sibling
                    where = rel.rsplit("/", 1)[-1]
                    found.add((relpath, cls.name, f"class family: sibling class {npu.name} ({where}) handles NPU"))
    return frozenset(found)


def version_references() -> re.Pattern:
    """The pattern of CUDA version references (`torch.version.cuda`, `cudnn.version`, ...), from
    rules/device.toml: for testscopes' module-level check, the same notion as the gates'."""
    return _tables()[8]


def version_uses(node: ast.AST, refs_re: re.Pattern) -> tuple[set[int], set[int]]:
    """(quiet, used) of `node`: see `_quiet`."""
    return _quiet(node, refs_re)


# ------------------------------------------------------------------ Triton kernel launchers
_LAUNCHER = "launches the Triton kernel "


def _registered_ops(tree: ast.Module) -> dict[str, str]:
    """Custom ops the module registers at module level with a function of its own as their
    implementation: op name -> the function's name. vLLM's `direct_register_custom_op(op_name="x",
    op_func=_x_impl, ...)` (or positionally); a call through `torch.ops.<ns>.x(...)` then runs
    `_x_impl` (round 30 EA#2: a `.is_cuda` check in front of such a call guards the Triton kernel
    the implementation launches)."""
    found: dict[str, str] = {}
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Call) and (_dotted(node.func) or "").split(".")[-1] == "direct_register_custom_op"):
            continue
        keywords = {k.arg: k.value for k in node.keywords if k.arg}
        name = keywords.get("op_name", node.args[0] if node.args else None)
        func = keywords.get("op_func", node.args[1] if len(node.args) > 1 else None)
        if isinstance(name, ast.Constant) and isinstance(name.value, str) and isinstance(func, ast.Name):
            found[name.value] = func.id
    return found


def launchers(tree: ast.Module, bound: dict[str, str]) -> dict[str, str]:
    """The module's own functions and classes that launch a Triton kernel of the file (`_launch`
    calling `_kernel[grid](...)`, an autograd Function whose `forward` does), directly or through
    another such name, and module-level names bound to one (`_impl = _launch`): name -> what.
    A device check in front of one guards CUDA-only code (platform._cuda_only_bindings; tritonguards.py then reads the kept check as the kernels' guard), so it
    stays CUDA: widened, it would send an NPU tensor into the kernel the original kept from it."""
    kernels = {name for name, what in bound.items() if what == "a Triton kernel"}
    found: dict[str, str] = {}
    definitions = []
    stack = list(tree.body)
    while stack:  # module level, and under module-level `if`/`try` (`if _TRITON_AVAILABLE:`)
        node = stack.pop()
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            definitions.append(node)
        elif isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            definitions.append(node)
        elif isinstance(node, (ast.If, ast.Try)):
            stack.extend([*node.body, *node.orelse, *getattr(node, "finalbody", []),
                          *(s for h in getattr(node, "handlers", []) for s in h.body)])
    ops = _registered_ops(tree)
    used = {}
    for node in definitions:
        names = {n.id for n in ast.walk(node) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}
        if ops:  # `torch.ops.ns.op(...)` of an op this file registers: a use of its implementation
            names |= {ops[n.attr] for n in ast.walk(node) if isinstance(n, ast.Attribute) and n.attr in ops
                      and (_dotted(n) or "").startswith("torch.ops.")}
        target = node.targets[0].id if isinstance(node, ast.Assign) else node.name
        used[id(node)] = (target, names)
    for _round in range(3):  # (a launcher of a launcher of a launcher)
        grew = False
        for node in definitions:
            target, names = used[id(node)]
            if target in kernels or target in found:
                continue
            if isinstance(node, ast.Assign) and not isinstance(node.value, ast.Name):
                continue  # (an alias only: `_impl = _launch`)
            via = next((n for n in sorted(names) if n in kernels or n in found), None)
            if via is not None:
                found[target] = _LAUNCHER + (f"`{via}`" if via in kernels else found[via][len(_LAUNCHER):])
                grew = True
        if not grew:
            break
    return found
