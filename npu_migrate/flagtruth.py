"""What the flag readers share (flagcalls19.py and the passes that extend it: flagargs21.py,
callgates21.py): the "unknown on an NPU host" answer, the test for a body that always leaves, and
the names a function binds (never read as a module's flags). Its own module so that flagcalls19
can call flagargs21 without an import circle."""

from __future__ import annotations

import ast

UNKNOWN = object()  # unknown on an NPU host


def always_exits(body: list) -> bool:
    return bool(body) and isinstance(body[-1], (ast.Raise, ast.Return))


def local_names(function: ast.AST | None) -> frozenset:
    """Names a function (and its parameters) binds: never read as the module's flags."""
    if function is None:
        return frozenset()
    names = {a.arg for a in ast.walk(function.args) if isinstance(a, ast.arg)}
    for node in ast.walk(function):
        if isinstance(node, ast.Name) and not isinstance(node.ctx, ast.Load):
            names.add(node.id)
        elif isinstance(node, ast.alias):
            names.add((node.asname or node.name).split(".")[0])
    return frozenset(names)
