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
and per module one scan of the bytes of the files naming its leaf (their import lines parsed alone,
no tree; a leaf more than `_COMMON` files name, or one read as a value or in prose, gives up:
nothing is foreign). The walk then goes further where a false reference used to end it early
(sglang's callgates21 candidates: 49 s -> 67 s on this loaded machine, trees not shared).
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
    those of its re-exporters, transitively); None where module i is handed on as a value, or
    where a leaf is too common a word to read its files (`_COMMON`)."""
    memo = vars(gates).setdefault("_attrrefs31", {})
    key = (i, name)
    if key not in memo:
        todo, done, words = [i], set(), set()
        while todo:
            m = todo.pop()
            if m in done:
                continue
            done.add(m)
            facts = _module_facts(gates, m)
            if facts is None:
                memo[key] = None
                return None
            leaf, importers = facts
            words.add(leaf)
            todo.extend(k for k, names, aliased in importers if aliased or name in names or "*" in names)
        memo[key] = frozenset(words)
    return memo[key]


_COMMON = 150  # (files naming a module's leaf beyond which it is read as a common word: no narrowing)


def _module_facts(gates, m: int) -> Optional[tuple]:
    """(leaf, [(k, names module k imports from module m, module k binds module m under another
    name)]) of module m, once per module; None where it is handed on as a value somewhere, a file
    naming it does not parse, or its leaf is named by more than `_COMMON` files."""
    memo = vars(gates).setdefault("_attrrefs31_modules", {})
    if m in memo:
        return memo[m]
    memo[m] = None
    run = gates.run
    leaf = _leaf(run.results[m].relpath)
    if leaf is None:
        return None
    dotted = set(module_names(run.results[m].relpath))
    word = leaf.encode()
    pattern = re.compile(rb"\b" + re.escape(word) + rb"\b")
    naming = [k for k, r in enumerate(run.results)
              if k != m and r.relpath.endswith(".py") and word in (run.text_of(k) or b"")
              and pattern.search(run.text_of(k) or b"")]
    if len(naming) > _COMMON:
        return None
    value = re.compile(rb"(?<![`'\"\w.])" + re.escape(word) + rb"\b(?!\s*\.|[`'\"])")
    importers = []
    for k in naming:
        data = run.text_of(k) or b""
        lines = data.split(b"\n")
        names, aliased = set(), False
        for n, line in enumerate(lines):
            if word not in line:
                continue
            code = line.split(b"#", 1)[0]
            if b"import" in code:
                statement = _statement(lines, n)
                if statement is None:
                    return None
                for stmt in statement:
                    if isinstance(stmt, ast.ImportFrom):
                        base, *subs = _imported(run, k, stmt)
                        for alias, sub in zip(stmt.names, subs):
                            if base in dotted:
                                names.add(alias.name)
                            elif sub in dotted and alias.asname not in (None, leaf):
                                aliased = True
                    elif any(a.name in dotted and a.asname not in (None, leaf) for a in stmt.names):
                        aliased = True
            elif value.search(code):
                return None  # (the leaf read as a value, or named in prose: unsure, no narrowing)
        if names or aliased:
            importers.append((k, frozenset(names), aliased))
    memo[m] = (leaf, importers)
    return memo[m]


def _statement(lines: list, n: int) -> Optional[list]:
    """The import statements of the line n of a file (a parenthesised import read to its closing
    parenthesis), parsed alone; [] where the line holds none; None where it does not parse."""
    text = lines[n].split(b"#", 1)[0].strip()
    if not text.startswith((b"from ", b"import ")) and b"import " not in text:
        return []
    if b"(" in text and b")" not in text:
        for more in lines[n + 1:n + 200]:
            text += b" " + more.split(b"#", 1)[0].strip()
            if b")" in more:
                break
    statement = text.startswith((b"from ", b"import "))
    if not statement:
        at = text.find(b"from ") if b"from " in text else text.find(b"import ")
        text = text[at:]
    try:
        tree = ast.parse(text.decode("utf-8", "replace"))
    except SyntaxError:
        return None if statement else []  # (a continued line: unsure; the word `import` in prose: none)
    return [s for s in tree.body if isinstance(s, (ast.Import, ast.ImportFrom))]


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

