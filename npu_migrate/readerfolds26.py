"""Two notes asking one review: a flag-gated import whose readers only another such module's
readers reach (issue #16, audit BD#23). Whole run, from runplan.whole_run_passes, after
unsetcallers26.py.

flagreads20.py words a CUDA-only import an NPU host never runs (`if ENABLE_JIT_DEEPGEMM: import
deep_gemm`) as info naming the module's functions that read its names: "review that an NPU host
never calls them". A wrapper package often has two such modules, one serving the other:

    # wrapper/compile_utils.py
    if ENABLE_JIT_DEEPGEMM:
        import deep_gemm                       # info: read in `_compile_all`: folded now
    def _compile_all(n, k):
        deep_gemm.compile(n, k)
    def execution_hook(m, n, k):
        if m > 0:
            _compile_all(n, k)
        yield

    # wrapper/entrypoint.py
    if ENABLE_JIT_DEEPGEMM:
        import deep_gemm                       # info: read in `gemm_nt`: the review asked
    def gemm_nt(lhs, rhs, out):
        with compile_utils.execution_hook(m, n, k):
            deep_gemm.gemm_nt(lhs, rhs, out)

The first note's functions run only inside the second note's functions, so "review that an NPU host
never calls them" is answered by the second review: one porter's item, reported twice. Here the
first folds into the second when ALL of these hold:

* both are open NPU911 info notes of flagreads20's wording, in two modules, importing the same
  package (its first dotted part), each listing its readers in full (no "and N more");
* every reference of the run to each top-level function or class of the first note's list
  (callgates21.unit_of of the reader) lies in the body of a top-level function or class of its own
  module (a subclass's base list counting as the subclass), walked again (a few steps, a cycle adding nothing), or of a function or class the second
  note lists; at least one reference reaches the second note's list; files defining their own
  top-level unit of that name aside.

The second note's message then names the first (file, line, source) and the sites that reach its
readers; the first is no longer a finding of its own. Kept: a reader referenced at module level,
named in a string, reached from a third module or not at all (a library's user may call it), notes
of two packages, a note whose list is cut short.
"""

from __future__ import annotations

import ast
import dataclasses
import re
from typing import Optional

from . import astcache

_ASK = "which fail with a NameError there if called: review that an NPU host never calls them"
_LIST = "its names are read only in this module's functions "
_NAME = re.compile(r"`([\w.]+)` \(lines? [\d, ]+\)")
_DEPTH = 8


def _listed(message: str) -> Optional[list[str]]:
    """The readers a flagreads20 note lists (qualified names), or None (not one, or cut short)."""
    start = message.find(_LIST)
    end = message.find(_ASK, start)
    if start < 0 or end < 0:
        return None
    segment = message[start + len(_LIST):end]
    if re.search(r" and \d+ more", segment):
        return None
    names = _NAME.findall(segment)
    return names or None


def _package(source: Optional[str]) -> Optional[str]:
    try:
        stmt = ast.parse((source or "").strip()).body[0]
    except (SyntaxError, IndexError, ValueError):
        return None
    if isinstance(stmt, ast.Import) and len(stmt.names) == 1:
        return stmt.names[0].name.split(".")[0]
    if isinstance(stmt, ast.ImportFrom) and stmt.level == 0 and stmt.module:
        return stmt.module.split(".")[0]
    return None


def fold(results: list, paths: dict) -> list:
    """The results, with the notes of this module's docstring folded."""
    from .callgates21 import unit_of
    from .modpaths import RunTexts
    from .moot import is_moot

    notes = []  # ((file index, finding, package, top-level names listed))
    for i, result in enumerate(results):
        if not result.relpath.endswith(".py"):
            continue
        for f in result.findings:
            if f.code != "NPU911" or f.severity != "info" or f.fixable or f.cell is not None or is_moot(f):
                continue
            names = _listed(f.message)
            package = _package(f.source)
            if names and package:
                notes.append((i, f, package, {n.split(".")[0] for n in names}))
    if len(notes) < 2:
        return results
    text_of = RunTexts(results, paths)
    python = [i for i, r in enumerate(results) if r.relpath.endswith(".py")]
    trees: dict = {}

    def tree_of(j: int):
        if j not in trees:
            trees[j] = astcache.parse(text_of(j) or b"")
        return trees[j]

    indexes: dict = {}

    def index(j: int):
        """(parents, {name: [loads]}, {identifier strings}) of module j."""
        if j not in indexes:
            tree = tree_of(j)
            parents, refs, strings = astcache.parents(tree), {}, set()
            for node in astcache.walk(tree):
                if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load):
                    refs.setdefault(node.id, []).append(node)
                elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Load):
                    refs.setdefault(node.attr, []).append(node)
                elif isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value.isidentifier():
                    strings.add(node.value)
            indexes[j] = (parents, refs, strings)
        return indexes[j]

    def top(j: int, name: str):
        tree = tree_of(j)
        return next((s for s in (tree.body if tree else ()) if isinstance(
            s, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and s.name == name), None)

    def reaches(a: int, unit, b: int, targets: set, depth: int, seen: set) -> Optional[list]:
        """["path:line"] of the sites in module b's listed units that reach `unit` of module a, or
        None where a reference leads elsewhere."""
        if (a, unit.name) in seen:
            return []
        if depth > _DEPTH:
            return None
        seen.add((a, unit.name))
        word = unit.name.encode()
        sites: list = []
        referenced = False
        for j in python:
            if word not in (text_of(j) or b""):
                continue
            tree = tree_of(j)
            if tree is None:
                return None
            if j != a and top(j, unit.name) is not None:
                continue  # (its own by that name)
            parents, refs, strings = index(j)
            if unit.name in strings:
                return None
            for node in refs.get(unit.name, ()):
                outer = unit_of(tree, node.lineno) or _based(tree, node)
                if outer is unit and j == a:
                    continue  # (its own recursion, `self.x` inside the class)
                if outer is None or not any(outer is s for s in tree.body):
                    return None
                referenced = True
                if j == b and outer.name in targets:
                    sites.append(f"{results[j].relpath}:{node.lineno}")
                elif j == a:
                    inner = reaches(a, outer, b, targets, depth + 1, seen)
                    if inner is None:
                        return None
                    sites.extend(inner)
                else:
                    return None
        return sites if referenced else None

    out = list(results)
    folded: dict = {}  # (id of a folded note -> True)
    notes_into: dict = {}  # (id of the covering note -> [texts])
    for a, first, package, names in notes:
        for b, second, other_package, targets in notes:
            if b == a or other_package != package or id(second) in folded or id(first) in folded \
                    or id(first) in notes_into:
                continue
            sites: list = []
            for name in sorted(names):
                unit = top(a, name)
                found = None if unit is None else reaches(a, unit, b, targets, 0, set())
                if not found:
                    sites = []
                    break
                sites.extend(found)
            if not sites:
                continue
            shown = sorted(set(sites), key=lambda s: (s.rsplit(":", 1)[0], int(s.rsplit(":", 1)[1])))
            readers = ", ".join(f"`{n}`" for n in sorted(names))
            note = (f"also {results[a].relpath}:{first.line} `{' '.join((first.source or '').split())}`, under "
                    f"the same gate: its readers {readers} are reached only through this module's listed "
                    f"functions ({', '.join(shown[:4])}{f' and {len(shown) - 4} more' if len(shown) > 4 else ''}): "
                    "the same review")
            folded[id(first)] = True
            notes_into.setdefault(id(second), []).append(note)
            break
    if not folded:
        return results
    for i, result in enumerate(out):
        if not any(id(f) in folded or id(f) in notes_into for f in result.findings):
            continue
        findings = []
        for f in result.findings:
            if id(f) in folded:
                continue
            if id(f) in notes_into:
                f = dataclasses.replace(f, message=f"{f.message} ({'; '.join(notes_into[id(f)])})")
            findings.append(f)
        out[i] = dataclasses.replace(result, findings=findings)
    return out


def _based(tree: ast.Module, node: ast.AST):
    """The top-level class whose bases hold `node` (`class _Normal(_Base):` uses `_Base` as the
    class does), or None."""
    for stmt in tree.body:
        if isinstance(stmt, ast.ClassDef) and any(node is n for b in stmt.bases for n in ast.walk(b)):
            return stmt
    return None
