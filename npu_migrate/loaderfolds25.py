"""A module-level kernel loader reported once along an import chain (issue #16, precision wave 25,
round-25 audit BR#30). Whole run (runplan.whole_run_passes, after singles21.py):

singles21.report_module_loaders reports a module-level `Loader().load()` whose registry lists only
CUDA extensions as an NPU911 error ("`InferenceOpsLoader().load()` at module level, whose registry
lists only CUDA extensions (...): on an NPU host this module fails at import; port that loader's
ops ..."), once per module that runs it. Where module M imports, at its top level and before its
own loader line, a module K of the run (directly, or through other modules of the run that M's or
their top-level imports load, parent packages included, up to four hops) whose own finding reports
the same loader call for the same reason (ColossalAI's `nopadding_baichuan.py` imports
`nopadding_llama.py`, which runs `InferenceOpsLoader().load()` first), M's import fails at K's
loader on an NPU host before M's own line runs, and the work asked for ("port that loader's ops")
is one item. M's finding folds into K's, whose message names M's file, its loader line and the
import that reaches K. A top-level import means a statement of the module body (not inside an
`if`, a `try`, a `with` or a function): a guarded or lazy import may not run first, so M keeps its
finding; so does a module whose loader comes before that import, a loader of another class or
registry, and modules that import each other (a cycle: neither is first). Chains resolve to the
module that fails first (the one with no such import).

Nothing is dropped silently: the kept finding names each folded module and line.
"""

from __future__ import annotations

import ast
import re
from dataclasses import replace
from typing import Optional

from . import astcache

_LOADER = re.compile(r"`(\w+)\(\)\.load\(\)` at module level, (.*?): on an NPU host this module fails at import")
_MAX_HOPS = 4


def _key(finding) -> Optional[str]:
    """The loader and the reason of a singles21 module-level loader finding (open NPU911 error)."""
    from .moot import is_moot

    if finding.code != "NPU911" or finding.severity != "error" or finding.fixable or finding.cell is not None \
            or is_moot(finding):
        return None
    match = _LOADER.search(finding.message)
    return f"{match.group(1)}|{match.group(2)}" if match else None


def _top_imports(tree: ast.Module, relpath: str, before: int) -> list[tuple[str, int]]:
    """(dotted module name, line) of each top-level import statement of `tree` before line `before`
    (`from a.b import c` gives `a.b.c` and `a.b`; relative imports resolved against `relpath`)."""
    from .modpaths import resolve_relative

    out = []
    for stmt in tree.body:
        if stmt.lineno >= before:
            break
        if isinstance(stmt, ast.Import):
            out += [(alias.name, stmt.lineno) for alias in stmt.names]
        elif isinstance(stmt, ast.ImportFrom):
            base = stmt.module or ""
            if stmt.level:
                base = resolve_relative(relpath, stmt.level, base).replace("/", ".")
            if base:
                out.append((base, stmt.lineno))
                out += [(f"{base}.{alias.name}", stmt.lineno) for alias in stmt.names if alias.name != "*"]
    return out


def _with_parents(name: str) -> list[str]:
    parts = name.split(".")
    return [".".join(parts[:k]) for k in range(len(parts), 0, -1)]


def fold_importing_loaders(results: list, paths: Optional[dict] = None) -> list:
    """Module's doc (a new list)."""
    from .modpaths import RunModules, RunTexts

    sites = {i: [(f, k) for f in r.findings if (k := _key(f)) is not None] for i, r in enumerate(results)
             if r.relpath.endswith(".py")}
    sites = {i: found for i, found in sites.items() if found}
    if sum(len(v) for v in sites.values()) < 2 or len({k for v in sites.values() for _f, k in v}) == sum(
            len(v) for v in sites.values()):
        return results
    text_of = RunTexts(results, paths or {})
    by_name = RunModules(results, text_of).by_name
    trees: dict[int, Optional[ast.Module]] = {}

    def tree_of(i: int) -> Optional[ast.Module]:
        if i not in trees:
            trees[i] = astcache.parse(text_of(i) or b"")
        return trees[i]

    def reached(i: int, before: int) -> dict[int, tuple[str, int]]:
        """Run modules the top-level imports of module i before line `before` load: index -> (the
        first import of i on the way (name, line))."""
        tree = tree_of(i)
        if tree is None:
            return {}
        found: dict[int, tuple[str, int]] = {}
        frontier = []
        for name, line in _top_imports(tree, results[i].relpath, before):
            for candidate in _with_parents(name):
                k = by_name.get(candidate)
                if k is not None and k != i and k not in found:
                    found[k] = (name, line)
                    frontier.append(k)
        for _hop in range(_MAX_HOPS - 1):
            nxt = []
            for k in frontier:
                sub = tree_of(k)
                if sub is None:
                    continue
                for name, _line in _top_imports(sub, results[k].relpath, 10 ** 9):
                    for candidate in _with_parents(name):
                        m = by_name.get(candidate)
                        if m is not None and m != i and m not in found:
                            found[m] = found[k]
                            nxt.append(m)
            frontier = nxt
        return found

    # (module i's finding f -> the module k whose same loader fails first, with the import of i that reaches it)
    into: dict[int, tuple[int, object, tuple[str, int]]] = {}
    for i, found in sites.items():
        for finding, key in found:
            for k, via in reached(i, finding.line).items():
                hit = next((f for f, other in sites.get(k, []) if other == key), None)
                if hit is not None:
                    into[id(finding)] = (k, hit, via)
                    break
    if not into:
        return results

    def end(finding) -> Optional[tuple[int, object]]:
        seen = {id(finding)}
        k, target = into[id(finding)][0], into[id(finding)][1]
        while id(target) in into:
            if id(target) in seen:
                return None  # (a cycle: no module fails first)
            seen.add(id(target))
            k, target = into[id(target)][0], into[id(target)][1]
        return k, target

    notes: dict[int, tuple[int, object, list[str]]] = {}
    dropped: dict[int, set] = {}
    for i, found in sites.items():
        for finding, _key_ in found:
            if id(finding) not in into:
                continue
            last = end(finding)
            if last is None:
                continue
            k, target = last
            name, line = into[id(finding)][2]
            notes.setdefault(id(target), (k, target, []))[2].append(
                f"`{results[i].relpath}` (line {finding.line}), whose import of `{name}` (line {line}) loads this "
                f"module first")
            dropped.setdefault(i, set()).add(id(finding))
    out = list(results)
    for k, target, named in notes.values():
        note = (f"also {', '.join(named)}: the same loader runs at module level there, but on an NPU host the import "
                f"fails here first; one loader to port")
        out[k] = replace(out[k], findings=[replace(f, message=f"{f.message} ({note})") if f is target else f
                                           for f in out[k].findings])
    for i, ids in dropped.items():
        out[i] = replace(out[i], findings=[f for f in out[i].findings if id(f) not in ids])
    return out
