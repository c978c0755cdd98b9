"""npu_migrate/astcache.py: the shared walk of a module gives what `ast.walk` gives, in its order,
and never mixes two modules up (the passes read nodes, types and parents from it); the engine's
import clean-up, which now settles unchanged statements by the new text, keeps an import still
used there and drops one the rewrite emptied."""

from __future__ import annotations

import ast

from npu_migrate import astcache, catalogue
from npu_migrate.engine import migrate_source
from npu_migrate.model import Options

SOURCE = '''\
import torch


class A:
    def f(self, x: int) -> int:
        self.y = [x, "cuda"]
        return self.y


def g():
    return A().f(1)
'''


def test_walk_nodes_and_parents_match_ast():
    tree = ast.parse(SOURCE)
    assert [type(n) for n in astcache.walk(tree)] == [type(n) for n in ast.walk(tree)]
    assert all(a is b for a, b in zip(astcache.walk(tree), ast.walk(tree)))
    calls = astcache.nodes(tree, (ast.Call, ast.Constant))
    assert calls == [n for n in ast.walk(tree) if isinstance(n, (ast.Call, ast.Constant))]
    parents = astcache.parents(tree)
    for node in ast.walk(tree):
        for child in ast.iter_child_nodes(node):
            if not isinstance(child, ast.expr_context):  # (Load/Store: one shared object per kind)
                assert parents[id(child)] is node
    assert id(tree) not in parents
    # a subtree is walked as ast.walk walks it, not from the module's index
    function = tree.body[-1]
    assert list(astcache.walk(function)) == list(ast.walk(function))


def test_two_modules_are_never_mixed_up():
    first, second = ast.parse(SOURCE), ast.parse("x = 1\n")
    names_first = [n.id for n in astcache.nodes(first, ast.Name)]
    assert [n.id for n in astcache.nodes(second, ast.Name)] == ["x"]
    # back to the first (the index keeps one module: it is computed again, the same)
    assert [n.id for n in astcache.nodes(first, ast.Name)] == names_first
    assert astcache.parents(second)[id(second.body[0].targets[0])] is second.body[0]


OPTIONS = Options(enabled=catalogue.enabled_codes(), hot_slices=True)


def test_an_import_used_only_by_rewritten_code_goes_one_used_elsewhere_stays():
    emptied = b"import torch\n\n\ndef sync():\n    torch.cuda.synchronize()\n"
    kept = b"import torch\n\n\ndef sync():\n    torch.cuda.synchronize()\n\n\nZEROS = torch.zeros(3)\n"
    new_emptied = migrate_source(emptied, "pkg/a.py", OPTIONS).new.decode()
    new_kept = migrate_source(kept, "pkg/b.py", OPTIONS).new.decode()
    assert "import torch\n" not in new_emptied and "synchronize()" in new_emptied
    assert "import torch\n" in new_kept and "torch.zeros(3)" in new_kept
    # re-runs change nothing
    for new, path in ((new_emptied, "pkg/a.py"), (new_kept, "pkg/b.py")):
        assert migrate_source(new.encode(), path, OPTIONS).new is None
