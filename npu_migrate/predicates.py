"""Platform predicates an NPU host answers False, read where testscopes does not reach (issue #16).

**Short-circuited operands.** In `if data.device.type == "cpu" or ((data.device.type == "cuda"
and torch.version.cuda) and version.parse(torch.version.cuda).release >= (12, 1)):` the operand
`(... and torch.version.cuda)` is None/False on an NPU host, so the `and` stops there: the operands
after it are never evaluated on that host. `short_circuit_blocks` gives the lines of those operands
as blocks in testscopes.untaken_branches' shape (findings there become info, "in a branch an NPU
host does not take", a named skipped scope). Only whole lines: the skipped operands must start on
a line after the false operand ends, and no other code of the statement may share their lines.
"""

from __future__ import annotations

import ast
import re

from . import astcache

_COMPOUND = (ast.If, ast.While, ast.Assert, ast.Return, ast.Assign, ast.AnnAssign, ast.Expr)


def _statements(tree: ast.Module):
    for node in ast.walk(tree):
        if isinstance(node, _COMPOUND):
            yield node


def _header(stmt: ast.stmt) -> list[ast.AST]:
    """The expressions of a statement that are evaluated before its body (none of its body)."""
    if isinstance(stmt, (ast.If, ast.While)):
        return [stmt.test]
    if isinstance(stmt, ast.Assert):
        return [stmt.test, *([stmt.msg] if stmt.msg is not None else [])]
    if isinstance(stmt, (ast.Return, ast.Expr)):
        return [stmt.value] if stmt.value is not None else []
    if isinstance(stmt, ast.Assign):
        return [*stmt.targets, stmt.value]
    if isinstance(stmt, ast.AnnAssign):
        return [stmt.target, stmt.annotation, *([stmt.value] if stmt.value is not None else [])]
    return []


def short_circuit_blocks(tree: ast.Module, lines: list, truth, segment,
                         interest: set | None = None) -> list[tuple[int, int, str, bool]]:
    """(first line, last line, the reason, False) of the operands of an `and` after one false on
    an NPU host (`truth(operand) is False`), on lines of their own; with `interest`, only blocks
    holding one of those lines."""
    out = []
    for stmt in _statements(tree):
        header = _header(stmt)
        if not header:
            continue
        first_body = min((s.lineno for s in getattr(stmt, "body", ()) if isinstance(s, ast.stmt)), default=None)
        for expr in header:
            for node in ast.walk(expr):
                if not (isinstance(node, ast.BoolOp) and isinstance(node.op, ast.And)):
                    continue
                at = next((i for i, v in enumerate(node.values[:-1]) if truth(v) is False), None)
                if at is None:
                    continue
                false, rest = node.values[at], node.values[at + 1:]
                first, last = rest[0].lineno, max(v.end_lineno or v.lineno for v in rest)
                if first <= (false.end_lineno or false.lineno):
                    continue
                if first_body is not None and last >= first_body:
                    continue
                if interest is not None and not any(first <= line <= last for line in interest):
                    continue
                inside = {id(n) for v in rest for n in ast.walk(v)}
                clash = False
                for e in header:
                    for n in ast.walk(e):
                        if id(n) in inside or not hasattr(n, "lineno"):
                            continue
                        start, end = n.lineno, n.end_lineno or n.lineno
                        encloses = (start, n.col_offset) <= (first, rest[0].col_offset) and \
                            (end, n.end_col_offset or 0) >= (last, rest[-1].end_col_offset or 0)
                        if not encloses and start <= last and end >= first:
                            clash = True
                            break
                    if clash:
                        break
                if clash:
                    continue
                out.append((first, last, f"`{segment(lines, false)}` is false or None there: the rest "
                            f"of its `and` is never evaluated", False))
    return out


# ----------------------------------------------------------------------------- the project's NPU accelerator
# (a moot.PHRASES entry: the importers' test is false on an NPU host, Triton-Ascend or not)
NPU_ACCELERATOR_NO_TRITON = "imported only behind `is_triton_supported()`, which the project's NPU accelerator answers False"
_NPU_CLASS = re.compile(r"(?i)npu|ascend")


def npu_accelerator_without_triton(results, python, text_of) -> str | None:
    """"path:line" of the `def is_triton_supported(self): return False` of a class of the run named
    for the NPU (DeepSpeed's `accelerator/npu_accelerator.py`, `class NPU_Accelerator`), or None.
    On an NPU host the project's `get_accelerator()` is that class, so `get_accelerator().
    is_triton_supported()` is False there whatever is installed."""
    for i in python:
        relpath = results[i].relpath
        if not _NPU_CLASS.search(relpath.rsplit("/", 1)[-1]):
            continue
        data = text_of(i)
        if not data or b"def is_triton_supported" not in data:
            continue
        tree = astcache.parse(data)
        if tree is None:
            continue
        for cls in tree.body:
            if not isinstance(cls, ast.ClassDef) or not _NPU_CLASS.search(cls.name):
                continue
            for method in cls.body:
                if isinstance(method, (ast.FunctionDef, ast.AsyncFunctionDef)) and method.name == "is_triton_supported":
                    body = [s for s in method.body if not (isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant))]
                    if len(body) == 1 and isinstance(body[0], ast.Return) and isinstance(body[0].value, ast.Constant) \
                            and body[0].value.value is False:
                        return f"{relpath}:{body[0].lineno}"
    return None


def _or_operands(node: ast.AST, op: type) -> list:
    if isinstance(node, ast.BoolOp) and isinstance(node.op, op):
        return [v for value in node.values for v in _or_operands(value, op)]
    return [node]


def asks_triton_supported_node(node: ast.AST) -> bool:
    """Whether each disjunct of a test (but `TYPE_CHECKING`) has a conjunct
    `<something>.is_triton_supported()`, not negated."""
    disjuncts = [d for d in _or_operands(node, ast.Or)
                 if (astcache.dotted(d) or "").rsplit(".", 1)[-1] != "TYPE_CHECKING"]
    return bool(disjuncts) and all(any(
        isinstance(c, ast.Call) and isinstance(c.func, ast.Attribute) and c.func.attr == "is_triton_supported"
        for c in _or_operands(d, ast.And)) for d in disjuncts)


# ----------------------------------------------------------------------------- the project's own CUDA predicates
def predicate_branches(results, python: list, targets: list, texts, skip=()) -> dict[int, list]:
    """{file: [(first line, last line, reason)]} of the `if` bodies of the run's files whose test
    is false on an NPU host once the project's own predicates are read (importgates'
    `_false_predicates`: `def is_cuda(): return torch.cuda.is_available() and torch.version.cuda`,
    None there) and the module's flags bound to them resolved (`_is_cuda = is_cuda()`): SGLang's
    `if is_cuda(): return torch.cuda.device_memory_used(...)` never runs there. importgates uses
    the same blocks for whole modules; these are the blocks' own findings (files in `skip`, whole
    modules already lowered, are left alone)."""
    from . import importgates

    candidates = [i for i in targets if i not in skip]
    if not candidates:
        return {}
    found: frozenset | None = None
    out: dict[int, list] = {}
    for i in candidates:
        data = texts.get(i) or b""
        if b"if " not in data:
            continue
        if found is None:
            found = importgates._false_predicates(python, texts)
            if not found:
                return {}
            calls = re.compile(rb"\b(?:" + b"|".join(re.escape(p.encode()) for p in sorted(found)) + rb")\(\)")
        if not calls.search(data):
            continue
        tree = astcache.parse(data)
        if tree is None:
            continue
        spans = importgates._gate_spans(tree, importgates._module_bindings(tree), found)
        if spans:
            named = ", ".join(f"`{p}()`" for p in sorted(found) if p.encode() in data)
            out[i] = [(first, last, f"in a branch an NPU host does not take: `{test}` (the project's {named} "
                       f"is false or None there)") for first, last, test in spans]
    return out


# ----------------------------------------------------------------------------- public helpers called only behind a gate
_CACHE_DECORATOR = re.compile(r"(^|\.)(cache|lru_cache|cached|wraps)$")


def public_helpers(results, python: list, targets: list, texts, skip=()) -> dict[int, list]:
    """{file: [(first line, last line, reason)]} of public module-level functions of a runtime
    module (not a test) every reference of which in the file sits in a block an NPU host never
    runs (testscopes.untaken_branches: vLLM's `flashinfer_autotune(...)`, called only under `elif
    has_flashinfer() and current_platform.has_device_capability(90):`), that no other module of the
    run but tests names, and that the file never names in a string or `__all__`. reach.py does
    this for private helpers in the file alone; a public one needs the run's other files (a test
    that imports the helper runs it on its own and is reported on its own)."""
    from .importgates import is_test
    from .testscopes import untaken_branches

    out: dict[int, list] = {}
    others = None
    for i in targets:
        if i in skip or is_test(results[i].relpath):
            continue
        lines = sorted({f.line for f in results[i].findings if not f.fixable and f.cell is None
                        and f.severity != "info"})
        data = texts.get(i) or b""
        if not lines or b"def " not in data:
            continue
        tree = astcache.parse(data)
        if tree is None:
            continue
        defs = [s for s in tree.body if isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef))
                and not s.name.startswith(("_", "test")) and any(s.lineno <= n <= (s.end_lineno or s.lineno) for n in lines)
                and all(_CACHE_DECORATOR.search(astcache.dotted(d.func if isinstance(d, ast.Call) else d) or "")
                        for d in s.decorator_list)]
        if not defs:
            continue
        text = data.decode("utf-8", "replace")
        blocks = None
        strings = {n.value for n in ast.walk(tree) if isinstance(n, ast.Constant) and isinstance(n.value, str)}
        for d in defs:
            if d.name in strings:
                continue
            refs = [n.lineno for n in ast.walk(tree) if isinstance(n, ast.Name) and n.id == d.name
                    and not (d.lineno <= n.lineno <= (d.end_lineno or d.lineno))]
            refs += [n.lineno for n in ast.walk(tree) if isinstance(n, ast.Attribute) and n.attr == d.name]
            if not refs:
                continue
            if blocks is None:
                blocks = [b for b in untaken_branches(text, results[i].relpath) if not b[3]]
            inside = [next((b for b in blocks if b[0] <= line <= b[1]), None) for line in refs]
            if not blocks or any(b is None for b in inside):
                continue
            word = re.compile(rb"\b" + re.escape(d.name.encode()) + rb"\b")
            if others is None:
                others = [j for j in python if not is_test(results[j].relpath)]
            if any(j != i and d.name.encode() in (texts.get(j) or b"") and word.search(texts.get(j) or b"")
                   for j in others):
                continue
            condition = inside[0][2]
            shown = condition if "`" in condition else f"`{condition}`"
            out.setdefault(i, []).append((
                min([d.lineno, *(x.lineno for x in d.decorator_list)]), d.end_lineno or d.lineno,
                f"in a branch an NPU host does not take: `{d.name}` is called only under {shown}, "
                f"and no other module of the run but tests names it"))
    return out


# ----------------------------------------------------------------------------- classes an NPU host never builds
def gated_class_spans(tree: ast.Module, data: bytes) -> list[tuple[int, int, str]]:
    """(first line, last line, reason) of the methods of the file's classes an NPU host never
    builds (capability.gated_methods): for importgates, whose "names used only behind a gate"
    then covers a helper module whose names only such a class uses (SGLang's `int4fp8_utils.py`,
    used only by `QuarkInt4Fp8MoEMethod`, whose `__init__` raises unless on ROCm)."""
    from . import capability, testscopes

    lines = data.decode("utf-8", "replace").splitlines(keepends=True)
    try:
        return [(first, last, why) for first, last, why, _typing in
                capability.gated_methods(tree, lines, testscopes.npu_truth, testscopes.source_segment)]
    except RecursionError:
        return []
