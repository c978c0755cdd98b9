"""A guarded CUDA-only import with a None fallback whose readers nothing in the package reaches
(issue #16, precision wave 27, helper h125; round audit BM#30, policy P3). Whole run, from
runplan.whole_run_passes.

    # quant/marlin_utils.py
    try:
        from cudapkg import _custom_ops as ops            # NPU911 error
    except ImportError:
        ops = None

    class MarlinConfig:                                   # no other file of the run names it
        def get_quant_method(self, layer):
            return MarlinLinearMethod(self)

    class MarlinLinearMethod:                             # only MarlinConfig creates it
        def apply(self, layer, x):
            return ops.marlin_gemm(x, layer.weight)       # the only read of `ops`

The import cannot fail (the `except` binds None); what fails on an NPU host is a read of the None,
and every read lies in a module-level class or function that nothing in the package reaches: no
other file of the run refers to it (an import, a name, an attribute, a string other than an
element of a list, tuple or set of class names), and in its own module only other such units
refer to it (never module-level code). It is public API nothing reaches (owner's policy P3): the
error becomes **info** naming the readers and who refers to them ("reached on an NPU host only by
a user's own use of `MarlinConfig`").

An NPU911 error (not fixable) every line of which is an import statement in the body of a
module-level `try` whose handlers catch ImportError (ModuleNotFoundError, Exception) and bind each
imported name to None qualifies. Kept: a fallback other than None (fallbacks.py's), a read at
module level, a reader another file imports or names, a reader module-level code calls, a handler
that re-raises.
"""

from __future__ import annotations

import ast
import re
from dataclasses import replace
from typing import Optional

from . import astcache

UNREACHED = ("a guarded import whose None fallback is read only by {readers}, which nothing in the package "
             "reaches (public API: reached on an NPU host only by a user's own use of {roots})")
_CATCHES = frozenset({"ImportError", "ModuleNotFoundError", "Exception"})
_UNITS = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)


def _guarded_names(tree: ast.Module, line: int) -> Optional[set]:
    """The names a `try`-guarded import at `line` binds, when every handler binds each to None."""
    for node in tree.body:
        if not isinstance(node, ast.Try) or not node.handlers:
            continue
        imports = [s for s in node.body if isinstance(s, (ast.Import, ast.ImportFrom)) and s.lineno == line]
        if not imports:
            continue
        names = {(a.asname or a.name).split(".")[0] for s in imports for a in s.names}
        for handler in node.handlers:
            caught = handler.type
            kinds = caught.elts if isinstance(caught, ast.Tuple) else [caught]
            if caught is None or not all(isinstance(k, ast.Name) and k.id in _CATCHES for k in kinds):
                return None
            if any(isinstance(n, ast.Raise) for n in ast.walk(handler)):
                return None
            nones = {t.id for s in handler.body if isinstance(s, ast.Assign)
                     and isinstance(s.value, ast.Constant) and s.value.value is None
                     for t in s.targets if isinstance(t, ast.Name)}
            if not names <= nones:
                return None
        return names
    return None


def _unit_of(tree: ast.Module, node: ast.AST) -> Optional[ast.AST]:
    line = getattr(node, "lineno", None)
    for unit in tree.body:
        if isinstance(unit, _UNITS) and unit.lineno <= (line or 0) <= (unit.end_lineno or unit.lineno):
            return unit
    return None


def _named_elsewhere(name: str, i: int, python: list, text_of) -> bool:
    """Whether another file of the run refers to `name` (module doc)."""
    word = re.compile(rb"\b" + re.escape(name.encode()) + rb"\b")
    for j in python:
        if j == i:
            continue
        data = text_of(j)
        if not data or not word.search(data):
            continue
        tree = astcache.parse(data)
        if tree is None:
            return True
        parents = astcache.parents(tree)
        for node in astcache.walk(tree):
            if isinstance(node, ast.Name) and node.id == name or isinstance(node, ast.Attribute) and node.attr == name:
                return True
            if isinstance(node, ast.alias) and name in (node.name.split(".")[-1], node.asname):
                return True
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and word.search(node.value.encode()):
                if not (node.value == name and isinstance(parents.get(id(node)), (ast.List, ast.Tuple, ast.Set))):
                    return True
    return False


def _unreached(tree: ast.Module, i: int, python: list, text_of, start: set) -> Optional[tuple[list, list]]:
    """(the units, the roots: those no unit refers to) when every unit in `start` and every unit
    that refers to one of them, transitively, is referred to only by such units; else None."""
    units = {u.name: u for u in tree.body if isinstance(u, _UNITS)}
    refs: dict[str, set] = {}  # unit name -> the units (or "<module>") referring to it
    for node in astcache.walk(tree):
        name = node.id if isinstance(node, ast.Name) else None
        if name in units:
            unit = _unit_of(tree, node)
            if unit is None or unit.name != name:
                refs.setdefault(name, set()).add(unit.name if unit is not None else "<module>")
    seen, todo = set(), list(start)
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        if "<module>" in refs.get(name, set()) or _named_elsewhere(name, i, python, text_of):
            return None
        if units[name].decorator_list:
            return None  # (a decorator may register it)
        todo.extend(refs.get(name, set()))
    roots = sorted(n for n in seen if not refs.get(n)) or sorted(seen)  # (units that refer to each other)
    return sorted(seen), roots


def review(results: list, paths: Optional[dict] = None) -> list:
    """The results, with the NPU911 errors of the module doc's shape info (policy P3)."""
    from .modpaths import RunTexts
    from .moot import is_moot

    def candidate(f) -> bool:
        return f.code == "NPU911" and f.severity == "error" and not f.fixable and f.cell is None and not is_moot(f)

    targets = [i for i, r in enumerate(results) if r.relpath.endswith(".py") and any(candidate(f) for f in r.findings)]
    if not targets:
        return results
    text_of = RunTexts(results, paths or {})
    python = [i for i, r in enumerate(results) if r.relpath.endswith(".py")]
    out = list(results)
    for i in targets:
        data = text_of(i)
        if not data or b"None" not in data or b"try" not in data:
            continue
        tree = astcache.parse(data)
        if tree is None:
            continue
        findings = list(results[i].findings)
        changed = False
        for k, f in enumerate(findings):
            if not candidate(f):
                continue
            names: set = set()
            for line in dict.fromkeys([f.line, *(a[0] for a in f.also)]):
                found = _guarded_names(tree, line)
                if found is None:
                    names = set()
                    break
                names |= found
            if not names:
                continue
            readers, module_level = {}, False
            for node in astcache.walk(tree):
                if isinstance(node, ast.Name) and node.id in names and isinstance(node.ctx, ast.Load):
                    unit = _unit_of(tree, node)
                    if unit is None:
                        module_level = True
                        break
                    readers.setdefault(unit.name, node.lineno)
            if module_level or not readers:
                continue
            found = _unreached(tree, i, python, text_of, set(readers))
            if found is None:
                continue
            _units, roots = found
            shown = ", ".join(f"`{n}` (line {readers[n]})" for n in sorted(readers))
            note = UNREACHED.format(readers=shown, roots=", ".join(f"`{r}`" for r in roots))
            findings[k] = replace(f, severity="info", message=f"{f.message} ({note})")
            changed = True
        if changed:
            out[i] = replace(results[i], findings=findings)
    return out
