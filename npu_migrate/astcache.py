"""One `ast` parse of a file's bytes, shared by the passes that need it: the hot-slice reduction
(hotslice.py) before libcst, and the scopes read after the engine (testscopes.py). Parsing is the
largest cost after libcst's own; a file is parsed once per process, not once per question."""

from __future__ import annotations

import ast
import functools
from typing import Optional


@functools.lru_cache(maxsize=2)
def parse(body: bytes) -> Optional[ast.Module]:
    """The tree of `body` (UTF-8, no BOM), or None when it does not parse. Callers only read it."""
    try:
        return ast.parse(body)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None


def dotted(node: ast.AST, strict: bool = False) -> Optional[str]:
    """`a.b.c` of an attribute chain on a name. A chain on something else (a call, a subscript)
    gives its attribute names (`f().x.y` -> `x.y`), or None when `strict`."""
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        parts.append(node.id)
    elif strict:
        return None
    return ".".join(reversed(parts))


def walk_statements(tree: ast.Module, blocks: dict | None = None):
    """Every statement of the file, nested blocks included, without walking expressions;
    `blocks`, when given, gets id(statement) -> id(the list of statements that holds it)."""
    stack: list = [tree]
    while stack:
        current = stack.pop()
        if isinstance(current, ast.stmt):
            yield current
        for field in ("body", "orelse", "finalbody", "handlers", "cases"):
            block = getattr(current, field, None)
            if isinstance(block, list):
                children = [child for child in block if isinstance(child, (ast.stmt, ast.excepthandler,
                                                                            ast.match_case))]
                if blocks is not None:
                    blocks.update((id(child), id(block)) for child in children)
                stack.extend(children)
