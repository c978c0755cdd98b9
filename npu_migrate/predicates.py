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
    for node in astcache.walk(tree):
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
