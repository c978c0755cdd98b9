"""A gate read through a property (issue #16, round 26: BE#1; for callgates21.py).

callgates21.py reads `self.X` where the class assigns it once (`self.X = <false there>`). Round
19's BE#1 gates a launcher on `self._can_fuse_query_quant`, a `@cached_property` whose one
`return` is `can_fuse_query_quant(linears)`, a function the method imports itself and which returns
False first thing off CUDA (`if not current_platform.is_cuda(): return False`). `property_value`
gives the value of such a property on an NPU host: a `@property`, `@cached_property` or
`@functools.cached_property` method that is the only `def X(` of the run (no override), where no
`.X` is assigned or patched anywhere (no setter; callgates21 checks the run's assignments), whose
body has one `return`, its last statement, whose value flagcalls19's interpreter reads: also
through a call of a function the method imports itself from an absolute module
(`from pkg.ops import can_fuse` inside the method), read as flagcalls19 reads a module-level
import. Anything else (two returns, a second definition, a relative import, a value the
interpreter does not know) is unknown: the gate stays undecided and what it guards reported.
kernelgates26.py lowers the kernels such a gate leaves unlaunched.
"""

from __future__ import annotations

import ast

from . import astcache

_PROPERTY = frozenset({"property", "cached_property", "functools.cached_property"})
_DEFS = (ast.FunctionDef, ast.AsyncFunctionDef)


def _own_returns(function: ast.AST) -> list:
    """The `return` statements of `function` itself (not of functions or lambdas inside it)."""
    out, todo = [], list(ast.iter_child_nodes(function))
    while todo:
        node = todo.pop()
        if isinstance(node, (*_DEFS, ast.Lambda, ast.ClassDef)):
            continue
        if isinstance(node, ast.Return):
            out.append(node)
        todo.extend(ast.iter_child_nodes(node))
    return out


def _defined_once(run, attr: str) -> bool:
    """Exactly one `def attr(` in the run's Python files (no override, no second class's own)."""
    word = f"def {attr}(".encode()
    count = 0
    for i, result in enumerate(run.results):
        if result.relpath.endswith(".py"):
            count += (run.text_of(i) or b"").count(word)
            if count > 1:
                return False
    return count == 1


def is_property(owner: ast.ClassDef, attr: str) -> bool:
    """Whether `owner` defines `attr` as one method decorated as a property (cheap: asked before
    the run-wide scans)."""
    methods = [n for n in owner.body if isinstance(n, _DEFS) and n.name == attr]
    return len(methods) == 1 and any((astcache.dotted(d) or "") in _PROPERTY for d in methods[0].decorator_list)


def property_value(run, j: int, owner: ast.ClassDef, attr: str, used: list):
    """The value on an NPU host of `self.attr` where `attr` is a property of `owner` (module j),
    with the place to name, as (value, "path:line"); (flagtruth.UNKNOWN, "") where unknown.
    `run`: flagcalls19's interpreter; `used` gets what the answer read, as run.value gives it."""
    from .flagtruth import UNKNOWN, local_names

    unknown = (UNKNOWN, "")
    methods = [n for n in owner.body if isinstance(n, _DEFS) and n.name == attr]
    if len(methods) != 1:
        return unknown
    method = methods[0]
    if not any((astcache.dotted(d) or "") in _PROPERTY for d in method.decorator_list):
        return unknown
    returns = _own_returns(method)
    if len(returns) != 1 or returns[0] is not method.body[-1] or returns[0].value is None:
        return unknown
    if not _defined_once(run, attr):
        return unknown
    expr = returns[0].value
    value = UNKNOWN
    if isinstance(expr, ast.Call) and isinstance(expr.func, ast.Name):
        imported = [(stmt, alias) for stmt in method.body if isinstance(stmt, ast.ImportFrom) and not stmt.level
                    for alias in stmt.names if (alias.asname or alias.name) == expr.func.id]
        stores = [n for n in ast.walk(method) if isinstance(n, ast.Name) and n.id == expr.func.id
                  and not isinstance(n.ctx, ast.Load)]
        if len(imported) == 1 and not stores:
            stmt, alias = imported[0]
            k = run.module(stmt.module or "")
            target = run.lookup(k, alias.name) if k is not None else None
            if target is not None and target[0] == "def":
                value = run.call(target[2], target[1], 1)
                if value is True or value is False:
                    used.append((target[2], f"{target[1].name}()"))
    if value is UNKNOWN:
        value = run.value(j, expr, {}, local_names(method), 0, used)
    if value is not True and value is not False:
        return unknown
    shown = " ".join(ast.unparse(expr).split())[:60]
    return value, f"returned by the property at {run.results[j].relpath}:{method.lineno} (`return {shown}`)"
