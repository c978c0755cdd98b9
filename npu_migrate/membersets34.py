"""Module-level sets of classes only tested for membership: they build nothing (issue #16, audit
round 33 HC#38). Used by ascendfacts30's package walk for ascendmodels32 (`instances=True`).

`_RECORDABLE_BUILDERS = frozenset({CompressorMetadataBuilder, ...})` at module level (DeepSeek
V4.1's GB300 decode-graph runtime) names the classes, but building the set instantiates nothing,
and a read `type(builder) in _RECORDABLE_BUILDERS` compares a class already built elsewhere: the
statement reaches none of the classes it lists. Only when:

* the statement is `NAME = frozenset({A, B})` / `set(...)`, `{A, B}`, `(A, B)` or `[A, B]` with
  bare names only, its one target bound once in the module;
* every read of NAME in the module is the right operand of `in` / `not in`;
* no file outside the package spells NAME (the walk checks the texts it reads).

Otherwise (the set iterated, indexed, returned, passed on, imported elsewhere) the statement reaches
its names as any module-level code does.
"""

from __future__ import annotations

import ast

_BUILDERS = ("frozenset", "set", "tuple")


def _elements(value):
    """The element nodes of a literal collection of bare names (maybe wrapped in frozenset()/set()/
    tuple()); None for anything else."""
    if (isinstance(value, ast.Call) and isinstance(value.func, ast.Name) and value.func.id in _BUILDERS
            and len(value.args) == 1 and not value.keywords):
        value = value.args[0]
    if isinstance(value, (ast.Set, ast.Tuple, ast.List)) and value.elts and all(
            isinstance(e, ast.Name) for e in value.elts):
        return value.elts
    return None


def membership_sets(tree) -> dict:
    """{id(statement): target name} of the module's membership-only class sets."""
    candidates: dict = {}
    bound: dict = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and isinstance(node.ctx, (ast.Store, ast.Del)):
            bound[node.id] = bound.get(node.id, 0) + 1
        elif isinstance(node, (ast.Global, ast.Nonlocal)):
            for name in node.names:
                bound[name] = bound.get(name, 0) + 2
    for stmt in tree.body:
        if (isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name)
                and _elements(stmt.value) is not None):
            candidates[stmt.targets[0].id] = id(stmt)
    candidates = {name: sid for name, sid in candidates.items() if bound.get(name) == 1}
    if not candidates:
        return {}
    tested: set = set()  # (ids of the Names read as the right operand of in / not in)
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare) and all(isinstance(op, (ast.In, ast.NotIn)) for op in node.ops):
            tested |= {id(c) for c in node.comparators if isinstance(c, ast.Name)}
    for node in ast.walk(tree):
        if (isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load) and node.id in candidates
                and id(node) not in tested):
            candidates.pop(node.id)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value in candidates:
            candidates.pop(node.value)  # (`__all__`, getattr by name: handed on)
    return {sid: name for name, sid in candidates.items()}
