"""One `ast` parse of a file's bytes, shared by the passes that need it: the hot-slice reduction
(hotslice.py) before libcst, and the scopes read after the engine (testscopes.py). Parsing is the
largest cost after libcst's own; a file is parsed once per process, not once per question."""

from __future__ import annotations

import ast
import functools
from collections import OrderedDict
from typing import Optional


@functools.lru_cache(maxsize=2)
def parse(body: bytes) -> Optional[ast.Module]:
    """The tree of `body` (UTF-8, no BOM), or None when it does not parse. Callers only read it."""
    try:
        return ast.parse(body)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None


# ----------------------------------------------------------------------------- one walk per tree
# Most passes ask the same question of a whole module: each of its nodes, or the parent of one.
# `ast.walk` is a generator of about 1.7 microseconds a node; a file's passes walked its module
# about fifteen times (torch's tree: 40 million nodes on a cold run). The nodes and the parents of
# the last few modules are kept, in `ast.walk`'s order, with the tree itself (so its id stays its
# own). Callers only read them; a pass that changes a tree works on a copy (`copy.deepcopy`).
_INDEX_SIZE = 1
_INDEXED: OrderedDict[int, list] = OrderedDict()  # id(tree) -> [tree, nodes, parents, {types: nodes}]


def _entry(tree: ast.Module) -> list:
    key = id(tree)
    entry = _INDEXED.get(key)
    if entry is not None and entry[0] is tree:
        _INDEXED.move_to_end(key)
        return entry
    entry = [tree, list(ast.walk(tree)), None, {}]
    _INDEXED[key] = entry
    while len(_INDEXED) > _INDEX_SIZE:
        _INDEXED.popitem(last=False)
    return entry


def walk(node: ast.AST):
    """The nodes `ast.walk(node)` gives, in its order; for a module, computed once and shared
    (a list: do not change it)."""
    if not isinstance(node, ast.Module):
        return ast.walk(node)
    return _entry(node)[1]


def nodes(tree: ast.Module, types) -> list:
    """The module's nodes that are instances of `types` (a class or a tuple of them), in
    `ast.walk`'s order (a shared list: do not change it)."""
    entry = _entry(tree)
    found = entry[3].get(types)
    if found is None:
        found = entry[3][types] = [n for n in entry[1] if isinstance(n, types)]
    return found


def parents(tree: ast.Module) -> dict:
    """{id(node): its parent} for every node of the module but the module (shared: do not change)."""
    entry = _entry(tree)
    if entry[2] is None:
        entry[2] = {id(child): node for node in entry[1] for child in ast.iter_child_nodes(node)}
    return entry[2]


def strings_at(tree: ast.Module) -> dict:
    """{(line, column + 1): node} of the module's string constants: a finding's place (1-based
    column, as findings give it) to the literal it names."""
    return {(n.lineno, n.col_offset + 1): n for n in nodes(tree, ast.Constant) if isinstance(n.value, str)}


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
