"""An attribute of another object is no reference of a module-level function (issue #16, round-31
audit FA#6; callgates21.py's walk over a unit's references asks this module, which imports none of
the passes).

callgates21 (and the walks built on it: callees22, testcallers27, publichelpers27, methods29)
follows every reference of the run to a module-level unit by its name, and any reference it cannot
show dead keeps the finding. A reference read as `<value>.name` counted wherever it stood, so a
unit with a common name was kept by the attributes of other objects:

    # vllm/models/flint/ops/moe_cute.py
    def grouped_moe(...):
        from flashinfer.fused_moe.cute_dsl.blackwell import moe_w4a16      # NPU911
    def warmup(weights, ...):
        grouped_moe(...)                    # warmup is called only by FlintNvfp4Experts._repack,
                                            # built only where `_flint_kernels()` (SM100) is true
    # benchmarks/kernels/benchmark_fused_collective.py (never names moe_cute)
    lines.append(f"... {args.warmup}")      # argparse's field: read as a live call of warmup

`foreign` answers True for `<value>.name` in module j (another module than the unit's i) when the
value cannot be module i: module j's bytes name neither module i's leaf (`moe_cute`) nor the leaf
of a module that binds `name` from module i (`from .moe_cute import warmup`, a star import) or
binds module i under another name (`from . import moe_cute as mc`, `import a.moe_cute as mc`),
followed through such re-exports. Where module i is handed on as a value anywhere in the run
(`run(moe_cute)`, `MODULES = [moe_cute]`: a parameter may then be the module) nothing is foreign.
A string naming the unit (`getattr(obj, "warmup")`) stays callgates21's question.

Kept (the nearest true cases, tests/test_h153.py): `moe_cute.warmup(...)` in a live module that
imports it; `ops.warmup(...)` through a package `__init__` re-exporting it; a module handed on as
a value and its function called on the parameter.

A bare `name` in another module is the unit only through `from M import name` (or a star import),
M.name not itself a module of the run: a dataclass field, a parameter of an enclosing function or
`import x as name` (vLLM's benchmarks and tests, by the dozen for `warmup`) are other objects.

`unreferring` answers the same from a file's bytes alone, so the walk neither parses nor indexes a
file holding only other objects' `name` (no leaf of `_words`, no import naming it, no string
naming it); a file that does not parse is then left out too (it runs nowhere). testcallers27's
walk, which counts locals by the unit's name as references (`skip_locals` False), reads as before.

Cost: one regular-expression test per file naming the unit (the files callgates21 already reads),
and per (module, name) one scan of the files naming the module's leaf, memoised on the walk; the
walk it saves (parsing and indexing the files it leaves out) pays for it.
"""

from __future__ import annotations

import ast
import re
from typing import Optional

from . import astcache
from .modpaths import module_names, resolve_relative


def _leaf(relpath: str) -> Optional[str]:
    names = module_names(relpath) if relpath.endswith(".py") else []
    return names[0].rsplit(".", 1)[-1] if names else None


def _imported(run, k: int, stmt: ast.ImportFrom) -> tuple[str, ...]:
    """The dotted names a `from M import a, b` of module k may import: M and each M.a."""
    if stmt.level:
        base = resolve_relative(run.results[k].relpath, stmt.level, stmt.module or "").replace("/", ".")
    else:
        base = stmt.module or ""
    return (base, *(f"{base}.{a.name}" if base else a.name for a in stmt.names))


def _words(gates, i: int, name: str) -> Optional[frozenset]:
    """The module leaves through which `<value>.name` may be module i's unit (module i's own and
    those of its re-exporters, transitively); None where module i is handed on as a value."""
    memo = vars(gates).setdefault("_attrrefs31", {})
    key = (i, name)
    if key in memo:
        return memo[key]
    run = gates.run
    todo, done, words = [i], set(), set()
    result: Optional[frozenset] = None
    while todo:
        m = todo.pop()
        if m in done:
            continue
        done.add(m)
        leaf = _leaf(run.results[m].relpath)
        if leaf is None:
            break
        words.add(leaf)
        dotted = set(module_names(run.results[m].relpath))
        pattern = re.compile(rb"\b" + re.escape(leaf.encode()) + rb"\b")
        handed = False
        for k, result_k in enumerate(run.results):
            if k == m or not result_k.relpath.endswith(".py"):
                continue
            data = run.text_of(k) or b""
            if leaf.encode() not in data or not pattern.search(data):
                continue
            tree = run.tree(k)
            if tree is None:
                handed = True  # (a file that does not parse: unsure)
                break
            for stmt in astcache.nodes(tree, (ast.ImportFrom, ast.Import)):
                if isinstance(stmt, ast.ImportFrom):
                    base, *subs = _imported(run, k, stmt)
                    for alias, sub in zip(stmt.names, subs):
                        if (base in dotted and alias.name in (name, "*")) \
                                or (sub in dotted and alias.asname not in (None, leaf)):
                            todo.append(k)
                else:
                    if any(a.name in dotted and a.asname not in (None, leaf) for a in stmt.names):
                        todo.append(k)
            if _handed_on(tree, leaf):
                handed = True
                break
        if handed:
            memo[key] = None
            return None
    else:
        result = frozenset(words)
    memo[key] = result
    return result


def _handed_on(tree: ast.Module, leaf: str) -> bool:
    """The module's leaf read as a value (not the object of an attribute, not an import): passed,
    stored, returned."""
    parents = astcache.parents(tree)
    for node in astcache.nodes(tree, (ast.Name,)):
        if node.id != leaf or not isinstance(node.ctx, ast.Load):
            continue
        parent = parents.get(id(node))
        if not (isinstance(parent, ast.Attribute) and parent.value is node):
            return True
    return False


def _from_imported(gates, j: int) -> frozenset:
    """The names module j binds by `from M import name` anywhere (`*` for a star import), M.name not
    a module of the run: a bare name of another module is module i's unit only through one of
    these (a class field, a parameter of an enclosing function, `import x as name` are not)."""
    memo = vars(gates).setdefault("_attrrefs31_from", {})
    if j not in memo:
        tree = gates.run.tree(j)
        names: set = set()
        for stmt in astcache.nodes(tree, (ast.ImportFrom,)) if tree is not None else ():
            _base, *subs = _imported(gates.run, j, stmt)
            for alias, sub in zip(stmt.names, subs):
                if alias.asname in (None, alias.name) and sub not in gates.run.by_name:
                    names.add(alias.name)  # (`from pkg import mod` binds a module of the run: not a unit)
        memo[j] = frozenset({"*"}) if tree is None else frozenset(names)
    found = memo[j]
    return _EVERY if "*" in found else found


class _Every(frozenset):
    def __contains__(self, _item) -> bool:
        return True


_EVERY = _Every()


def foreign(gates, i: int, j: int, node: ast.AST) -> bool:
    """`node` (a reference of module j to the module-level unit `node.attr` of module i, found by
    its name) is `<value>.name` where the value cannot be module i (this module's docstring)."""
    if j == i:
        return False
    if isinstance(node, ast.Name):
        return node.id not in _from_imported(gates, j)
    if not isinstance(node, ast.Attribute):
        return False
    words = _words(gates, i, node.attr)
    if not words:
        return False
    data = gates.run.text_of(j) or b""
    return not any(re.search(rb"\b" + re.escape(w.encode()) + rb"\b", data) for w in words)


def unreferring(gates, i: int, j: int, name: str) -> bool:
    """Every reference by `name` module j may hold is `foreign`, read from its bytes alone (the
    walk then neither parses nor indexes it): j is another module than i, names no leaf of
    `_words`, imports nothing by that name (`import ... name`, a star import: read generously,
    across the lines of a parenthesised import) and holds no string naming it."""
    if j == i:
        return False
    words = _words(gates, i, name)
    if not words:
        return False
    data = gates.run.text_of(j) or b""
    if any(re.search(rb"\b" + re.escape(w.encode()) + rb"\b", data) for w in words):
        return False
    word = re.escape(name.encode())
    return not (re.search(rb"[\"']" + word + rb"[\"']", data)
                or re.search(rb"\bimport\s*\*", data)
                or re.search(rb"\bimport\b[^\n;]*\b" + word + rb"\b", data)
                or re.search(rb"\bimport\s*\([^)]*\b" + word + rb"\b", data))

