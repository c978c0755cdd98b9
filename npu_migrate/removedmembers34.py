"""`X not in LIST` where the test module drops X from LIST when a package with no NPU build fails to
import (issue #16, round-33 audit HC#1; helper h193). For testscopes.py (and optparams20.py, whose
round-20 reading this is):

    BACKENDS_TO_TEST = [AttentionBackendEnum.FLASH_ATTN, AttentionBackendEnum.FLASHINFER, ...]
    try:
        import flashinfer  # noqa: F401
    except ImportError:
        BACKENDS_TO_TEST.remove(AttentionBackendEnum.FLASHINFER)

    @pytest.mark.skipif(AttentionBackendEnum.FLASHINFER not in BACKENDS_TO_TEST, reason="...")
    def test_flashinfer_xqa_bmm1_scale_matches_decode_q_dtype(): ...

On an NPU host flashinfer is missing (catalogue.absent_packages), so the module removes the member
at import and `FLASHINFER not in BACKENDS_TO_TEST` is true there: the test is skipped, as a skip
written with the package's own probe would be. `with_removed_members(tree)` gives a copy of the
tree in which each such comparison is that constant (`in`: False), so testscopes reads the
`skipif` (and any `if`) as decided; the tree itself is left alone.

Exact: a module-level `try:` whose body imports such a package and whose `except ImportError` /
`ModuleNotFoundError` handler calls `LIST.remove(X)`; LIST a module-level name bound once, never
otherwise changed in the file (`append`, `insert`, `extend`, `+=`, item stores, another `remove`
outside the handler do not occur); the comparison's left side spelled as X is. A package an NPU host
may have (triton, numpy), a list the file changes elsewhere, and another member keep the condition
unknown.

Round 34 (IC#5, vLLM's `tests/v1/attention/test_mla_backends.py`, helper h203): the `try` may also
be the only statement of a module-level `if X in LIST:` (no `else`) whose handler removes that X
(`_module_tries`: where the `if` is not taken X is out already), and the list may be changed
elsewhere by removals (`remove`, `pop`, `clear`), `sort`, or an `append`/`insert` of another member
spelled as a name or attribute (`_only_removals`): none of them puts X back. An `extend`, `+=`, an
item store, or an `append` of X itself keeps the condition unknown.
"""

from __future__ import annotations

import ast
import copy

_CHANGES = frozenset({"append", "insert", "extend", "clear", "pop", "remove", "__setitem__", "__iadd__", "sort"})


def removed_members(tree: ast.Module) -> set:
    """(list name, member source) of `NAME.remove(X)` in the `except ImportError` handler of a
    module-level `try: import P` of a package with no NPU build (catalogue.absent_packages)."""
    from .catalogue import absent_packages

    out = set()
    for stmt in _module_tries(tree):
        imported = {a.name.split(".")[0] for s in stmt.body if isinstance(s, ast.Import) for a in s.names} | {
            (s.module or "").split(".")[0] for s in stmt.body if isinstance(s, ast.ImportFrom) and not s.level}
        if not imported & absent_packages():
            continue
        for handler in stmt.handlers:
            if not (handler.type is not None and ast.unparse(handler.type) in ("ImportError", "ModuleNotFoundError")):
                continue
            for inner in handler.body:
                call = inner.value if isinstance(inner, ast.Expr) else None
                if isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute) and call.func.attr == "remove" \
                        and isinstance(call.func.value, ast.Name) and len(call.args) == 1:
                    out.add((call.func.value.id, ast.unparse(call.args[0])))
    return out


def _module_tries(tree: ast.Module):
    """The module-level `try:` statements, and (round 34 IC#5) those alone in the body of a
    module-level `if X in LIST:` (no `else`) whose handler removes that X from that LIST: where the
    `if` is not taken, X is not in LIST already."""
    for stmt in tree.body:
        if isinstance(stmt, ast.Try):
            yield stmt
        elif isinstance(stmt, ast.If) and not stmt.orelse and len(stmt.body) == 1 and isinstance(stmt.body[0], ast.Try) \
                and isinstance(stmt.test, ast.Compare) and len(stmt.test.ops) == 1 \
                and isinstance(stmt.test.ops[0], ast.In) and isinstance(stmt.test.comparators[0], ast.Name):
            wanted = (stmt.test.comparators[0].id, ast.unparse(stmt.test.left))
            removes = {(c.func.value.id, ast.unparse(c.args[0])) for h in stmt.body[0].handlers for c in ast.walk(h)
                       if isinstance(c, ast.Call) and isinstance(c.func, ast.Attribute) and c.func.attr == "remove"
                       and isinstance(c.func.value, ast.Name) and len(c.args) == 1}
            if removes == {wanted}:
                yield stmt.body[0]


def _only_removals(tree: ast.Module, name: str, member: str) -> bool:
    """Round 34 IC#5: every change of LIST `name` in the file is a `remove` (or `pop`, `clear`:
    nothing comes back), an `append`/`insert` of another member spelled as a name or attribute, or
    `sort`; never an `extend`, `+=`, item store, nor an `append` of `member` or of a call's value."""
    for node in ast.walk(tree):
        if isinstance(node, ast.AugAssign) and isinstance(node.target, ast.Name) and node.target.id == name:
            return False
        if isinstance(node, ast.Subscript) and isinstance(node.value, ast.Name) and node.value.id == name \
                and isinstance(node.ctx, (ast.Store, ast.Del)):
            return False
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == name \
                and node.attr in _CHANGES and node.attr not in ("remove", "pop", "clear", "sort"):
            if node.attr not in ("append", "insert"):
                return False
            calls = [c for c in ast.walk(tree) if isinstance(c, ast.Call) and c.func is node]
            added = [c.args[-1] for c in calls if c.args]
            if len(calls) != 1 or len(added) != 1 or not isinstance(added[0], (ast.Name, ast.Attribute)) \
                    or ast.unparse(added[0]) == member:
                return False
    return True


class Members(ast.NodeTransformer):
    """`X not in LIST` (True) and `X in LIST` (False) for the removed members given."""

    def __init__(self, removed: set) -> None:
        self.removed = removed

    def visit_Compare(self, node: ast.Compare):
        if len(node.ops) == 1 and isinstance(node.ops[0], (ast.In, ast.NotIn)) and \
                isinstance(node.comparators[0], ast.Name) and \
                (node.comparators[0].id, ast.unparse(node.left)) in self.removed:
            return ast.copy_location(ast.Constant(isinstance(node.ops[0], ast.NotIn)), node)
        return self.generic_visit(node)


def _unchanged_lists(tree: ast.Module, removed: set) -> set:
    """The removed members whose list is bound once at module level and changed only by its one
    `remove` in the handler."""
    names = {name for name, _member in removed}
    binds: dict[str, int] = {}
    changes: dict[str, int] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and node.id in names and isinstance(node.ctx, (ast.Store, ast.Del)):
            binds[node.id] = binds.get(node.id, 0) + 1
        elif isinstance(node, ast.AugAssign) and isinstance(node.target, ast.Name) and node.target.id in names:
            changes[node.target.id] = changes.get(node.target.id, 0) + 2
        elif isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in names \
                and node.attr in _CHANGES:
            changes[node.value.id] = changes.get(node.value.id, 0) + 1
        elif isinstance(node, ast.Subscript) and isinstance(node.value, ast.Name) and node.value.id in names \
                and isinstance(node.ctx, (ast.Store, ast.Del)):
            changes[node.value.id] = changes.get(node.value.id, 0) + 2
    module_bound = {t.id for s in tree.body if isinstance(s, (ast.Assign, ast.AnnAssign))
                    for t in (s.targets if isinstance(s, ast.Assign) else [s.target]) if isinstance(t, ast.Name)}
    return {(n, m) for n, m in removed if binds.get(n) == 1 and n in module_bound
            and (changes.get(n, 0) == 1 or _only_removals(tree, n, m))}


def with_removed_members(tree: ast.Module) -> ast.Module:
    """The tree, or a copy with the module doc's comparisons decided."""
    removed = removed_members(tree)
    if not removed:
        return tree
    removed = _unchanged_lists(tree, removed)
    if not removed:
        return tree
    return Members(removed).visit(copy.deepcopy(tree))
