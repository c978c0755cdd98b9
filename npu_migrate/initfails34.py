"""References in the methods of a class an NPU host cannot build (issue #16, round 32 audit GC#29).
For callgates21.Gates.dead, asked last (after importfirst33.py), and so every pass that walks a
unit's references with it (kernelgates26, callees22, testcallers27, ...).

    # models/flint/model.py
    class FlintAttention(nn.Module):
        def __init__(self, ...):
            self.attn = Attention(...)
            from vllm.v1.attention.backends.flashinfer import FlashInferImpl   # line 311
            ...
        def forward(self, positions, hidden_states):
            q = qk_norm_rope_cache(...)      # the only library launch of a `@triton.jit` kernel

    # v1/attention/backends/flashinfer.py
    from flashinfer import (...)              # line 12: NPU911, reported there

The class's `__init__` runs, whatever it is given, a direct statement (not in a `try`, an `if` or
a `with`, and no `return` before it) that imports a module of the run whose own first top-level
statement importing a package an NPU host never has (rules/sweep.toml `never_on_npu`:
importfirst33.first_failure) is reported there as an open finding, or imports such a package
itself: the constructor fails there first on an NPU host, so no instance exists and the class's
other methods never run. A reference inside such a method is dead; the reason names the class,
the import in `__init__` and the failing import it loads, which stays reported where it is
(nothing is hidden: the first line an NPU host hits is the one reported). The rest of `__init__`
past that import is dead the same way (a lazy `from .ops.decode_attention import ...` there).

Kept: a `staticmethod`/`classmethod` (callable without an instance), `__init__` up to the import, a class
another class of its module derives from (a subclass may build itself another way), an import
under a `try`, an `if` or a `with`, one after a `return`, a module whose failing import is not
reported (nothing would name the failure), a package an NPU host may install (triton, xformers),
a class whose `__init__` rules/vllm_ascend.toml says the plugin replaces (`[[methods]]`).
"""

from __future__ import annotations

import ast
import functools
from typing import Optional

_FUNCTIONS = (ast.FunctionDef, ast.AsyncFunctionDef)
_EXITS = (ast.Return, ast.Yield, ast.YieldFrom)
_BLOCKS = (ast.If, ast.Try, ast.With, ast.AsyncWith, ast.For, ast.AsyncFor, ast.While, ast.Match)


def _method(parents: dict, node: ast.AST) -> Optional[tuple]:
    """(class, method) of the innermost class whose method holds `node`, or None."""
    child, current = node, parents.get(id(node))
    while current is not None and not isinstance(current, ast.Module):
        if isinstance(current, ast.ClassDef):
            if isinstance(child, _FUNCTIONS) and any(child is s for s in current.body):
                return current, child
            return None
        child, current = current, parents.get(id(current))
    return None


def _exits(stmt: ast.AST) -> bool:
    stack = [stmt]
    while stack:
        node = stack.pop()
        if isinstance(node, _EXITS):
            return True
        stack.extend(c for c in ast.iter_child_nodes(node) if not isinstance(c, (*_FUNCTIONS, ast.Lambda, ast.ClassDef)))
    return False


def _reported(result, line: int) -> bool:
    from .moot import is_open

    return any(is_open(f) and not f.fixable and (f.line == line or any(p[0] == line for p in f.also))
               for f in result.findings)


def _fails(gates, j: int, stmt: ast.AST) -> Optional[str]:
    """Why the import statement `stmt` of module j fails on an NPU host, or None."""
    from .importfirst33 import first_failure
    from .modpaths import resolve_relative

    own = first_failure(ast.Module(body=[stmt], type_ignores=[]))
    if own is not None:
        return f"which fails where `{own[2]}` is missing, as on an NPU host"
    run = gates.run
    if isinstance(stmt, ast.ImportFrom):
        names = [resolve_relative(run.results[j].relpath, stmt.level, stmt.module or "").replace("/", ".")
                 if stmt.level else (stmt.module or "")]
    else:
        names = [a.name for a in stmt.names]
    for name in names:
        k = run.by_name.get(name)
        if k is None or k == j:
            continue
        tree = run.tree(k)
        found = first_failure(tree) if tree is not None else None
        if found is not None and _reported(run.results[k], found[1]):
            return (f"which loads {run.results[k].relpath}, failing first at its `{found[3]}` (line {found[1]}) "
                    f"where `{found[2]}` is missing, as on an NPU host (reported there)")
    return None


@functools.lru_cache(maxsize=1)
def _replaced() -> frozenset:
    """(module, "Class.method") of the methods rules/vllm_ascend.toml says the plugin replaces."""
    from . import catalogue

    return frozenset((entry.get("module", ""), name) for table in catalogue.read_table("vllm_ascend.toml").get("methods", ())
                     for entry in table.get("replaced", ()) for name in entry.get("names", ()))


def _constructor_fails(gates, j: int, tree: ast.Module, cls: ast.ClassDef) -> Optional[tuple]:
    """(last line of the failing import, why) of a class whose `__init__` fails first there, or None."""
    relpath = gates.run.results[j].relpath
    if any(name == f"{cls.name}.__init__" and module and (relpath == module or relpath.endswith("/" + module))
           for module, name in _replaced()):
        return None  # (vllm-ascend builds it with its own `__init__`)
    if any(isinstance(other, ast.ClassDef) and any(
            (b.id if isinstance(b, ast.Name) else b.attr if isinstance(b, ast.Attribute) else None) == cls.name
            for b in other.bases) for other in ast.walk(tree)):
        return None
    inits = [s for s in cls.body if isinstance(s, _FUNCTIONS) and s.name == "__init__"]
    if len(inits) != 1:
        return None
    for stmt in inits[0].body:
        if isinstance(stmt, (ast.Import, ast.ImportFrom)):
            why = _fails(gates, j, stmt)
            if why is not None:
                shown = " ".join(ast.unparse(stmt).split())
                shown = shown if len(shown) <= 70 else shown[:67] + "..."
                return stmt.end_lineno or stmt.lineno, \
                    f"`{cls.name}.__init__` fails first there: its `{shown}` (line {stmt.lineno}), {why}"
            continue
        if isinstance(stmt, ast.Raise) or _exits(stmt):
            return None
    return None


def in_unbuilt_class(gates, j: int, tree: ast.Module, parents: dict, node: ast.AST) -> Optional[str]:
    """The reason `node` of module j never runs on an NPU host (in a method of a class whose
    `__init__` fails first there), or None. Memoized per class on `gates`."""
    found = _method(parents, node)
    if found is None:
        return None
    cls, method = found
    if any((d.id if isinstance(d, ast.Name) else getattr(d, "attr", None)) in ("staticmethod", "classmethod")
           for d in method.decorator_list):
        return None
    memo = gates.first_failures
    key = ("init", j, cls.lineno, cls.name)
    if key not in memo:
        memo[key] = _constructor_fails(gates, j, tree, cls)
    found = memo[key]
    if found is None or (method.name == "__init__" and getattr(node, "lineno", 0) <= found[0]):
        return None  # (`__init__`'s own lines up to the failing import run)
    where = f"past line {found[0]} of `{cls.name}.__init__`" if method.name == "__init__" else f"in `{cls.name}.{method.name}`"
    return f"{where}: {found[1]}"
