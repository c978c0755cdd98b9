"""Helpers reached only through a function a registry decorator files under a CUDA-only backend's
name (issue #16, audit BQ#24). Whole run, from runplan.whole_run_passes, right after
backendpreds25.py.

A project files the glue between two of its backends in a registry keyed by their names (SGLang's
MoE permute functions, keyed by the dispatch format and the runner backend):

    # moe/runner/base.py
    def register_pre_permute(dispatch_name: str, runner_backend_name: str):
        ...                                    # a decorator: PermutePool[(a, b)] = func

    # moe/runner/deep_gemm.py
    def copy_list_to_gpu_no_ce(arr):
        from sgl_kernel.elementwise import copy_to_gpu_no_ce   # NPU911: info now
        ...

    @register_pre_permute("deepep_normal", "deep_gemm")
    def pre_permute_deepep_normal_to_deep_gemm(dispatch_output, quant_info, config):
        ...
        return copy_list_to_gpu_no_ce(counts)

The registered function has no reference in the run (the pool hands it out by key), so
callgates21's walk kept the helper's error as if every NPU run reached it. Here a module-level
function counts as reached only through its registration when ALL of these hold:

* no file of the run names it otherwise (a call, a value, a string; `__all__` aside);
* one of its decorators is a call of a function named `register...` whose arguments are string
  literals, each a plain name (not an op's qualified name, `@register_fake("ns::op")`), at least
  one naming a CUDA-only backend (a `never_on_npu` package of rules/sweep.toml
  [availability], or a word of rules/scopes.toml [backendpreds25] `cuda_backend_words`, as a
  `_`-separated part: "deep_gemm", "flashinfer_trtllm");
* where two or more names are given, every def of the decorator in the run (module-level
  functions for a bare `@register_x(...)`, methods for a dotted `@Pool.register_x(...)`) has that
  many named positional parameters and no `*args`: each name is a part of one key, so the function
  runs only when every part is chosen (not aliases of one entry).

A report-only error or warning (every place of it: a merged finding is lowered whole or not at
all) whose unit's every reference (callgates21's walk, a few callers deep:
a gate false there, or such a registered function) is so reached, at least one through such a
registration, becomes info naming the registration and the backend (a user may still select the
backend by name on an NPU host, as backendpreds25.py says of a backend predicate): "runs only when
the CUDA-only backend ... is chosen".

Kept: a registered function something else names, a decorator with a non-literal argument, several
names none of which is CUDA-only, several names to a decorator the run does not define or defines
with `*args` (aliases), a helper with a caller an NPU host may run.
"""

from __future__ import annotations

import ast
import dataclasses
import functools
import re
from typing import Optional

from . import astcache, catalogue
from .callgates21 import Gates

_FUNCTIONS = (ast.FunctionDef, ast.AsyncFunctionDef)
_REGISTERED = "registered only as "


@functools.lru_cache(maxsize=None)
def _cuda_words() -> frozenset:
    words = set(catalogue.read_table("sweep.toml").get("availability", {}).get("never_on_npu", ()))
    words |= set(catalogue.read_table("scopes.toml").get("backendpreds25", {}).get("cuda_backend_words", ()))
    return frozenset(w.lower() for w in words)


def cuda_backend(value: str) -> Optional[str]:
    """The CUDA-only word `value` names as one or more `_`-separated parts, or None."""
    low = value.lower()
    found = [(m.start(), word) for word in _cuda_words()
             for m in [re.search(r"(?:^|_)" + re.escape(word) + r"(?:_|$)", low)] if m]
    return min(found)[1] if found else None


class _Registry(Gates):
    """callgates21's walk, with a function only a CUDA-only registration names counted as never
    run unless that backend is chosen."""

    def __init__(self, run, arities) -> None:
        super().__init__(run)
        self.arities = arities  # (decorator name -> {named positional parameter counts} of its defs)
        self.registered: dict = {}

    def registration(self, i: int, unit) -> Optional[tuple[str, str]]:
        """("path:line (registered only as `@register_x("a", "b")`)", CUDA-only value), or None."""
        key = (i, unit.name)
        if key in self.registered:
            return self.registered[key]
        self.registered[key] = None
        if not isinstance(unit, _FUNCTIONS):
            return None
        tree = self.run.tree(i)
        if tree is None or not any(unit is s for s in tree.body):
            return None
        for deco in unit.decorator_list:
            if not (isinstance(deco, ast.Call) and not deco.keywords and deco.args):
                continue
            name = (astcache.dotted(deco.func) or "").rpartition(".")[2]
            if not name.startswith("register") or not all(
                    isinstance(a, ast.Constant) and isinstance(a.value, str) and a.value.isidentifier()
                    for a in deco.args):
                continue
            values = [a.value for a in deco.args]
            cuda = [v for v in values if cuda_backend(v)]
            if not cuda or (len(values) > 1 and self.arities(name, isinstance(deco.func, ast.Attribute))
                            != {len(values)}):
                continue
            if not self._unnamed(i, unit.name):
                return None
            shown = f"{astcache.dotted(deco.func) or name}({', '.join(chr(34) + v + chr(34) for v in values)})"[:100]
            found = (f"{self.run.results[i].relpath}:{deco.lineno} ({_REGISTERED}`@{shown}` of `{unit.name}`)",
                     cuda[0])
            self.registered[key] = found
            return found
        return None

    def _unnamed(self, i: int, name: str) -> bool:
        """No file of the run names `name` other than by its own def (strings included)."""
        for j, tree in self.naming(name):
            if tree is None:
                return False
            if j != i and any(isinstance(s, (*_FUNCTIONS, ast.ClassDef)) and s.name == name for s in tree.body):
                continue
            _parents, refs, strings = self._index(j, tree)
            if refs.get(name) or name in strings:
                return False
        return True

    def sites(self, i: int, unit, depth: int = 0, seen: frozenset = frozenset()) -> Optional[list]:
        found = self.registration(i, unit)
        if found is not None:
            return [(i, found[0])]
        return super().sites(i, unit, depth, seen)


def _arities(results, python: list[int], text_of):
    """(name, method) -> {counts of named positional parameters (self/cls aside)} of the run's defs
    of it: module-level functions for a decorator named bare (`@register_x(...)`, imported or
    local), methods for a dotted one (`@Pool.register_x(...)`); a def with `*args` counts as 0
    (aliases, not key parts)."""
    memo: dict = {}

    def arities(name: str, method: bool) -> set:
        if (name, method) in memo:
            return memo[name, method]
        pattern = re.compile(rb"\bdef\s+" + re.escape(name.encode()) + rb"\s*\(")
        counts: set = set()
        for i in python:
            data = text_of(i) or b""
            if not pattern.search(data):
                continue
            tree = astcache.parse(data)
            if tree is None:
                counts.add(0)
                continue
            parents = astcache.parents(tree)
            for node in astcache.walk(tree):
                if isinstance(node, _FUNCTIONS) and node.name == name and (
                        isinstance(parents.get(id(node)), ast.ClassDef) if method else any(node is s for s in tree.body)):
                    args = [a.arg for a in (*node.args.posonlyargs, *node.args.args) if a.arg not in ("self", "cls")]
                    counts.add(0 if node.args.vararg is not None else len(args))
        memo[name, method] = counts
        return counts

    return arities


def review(results: list, paths: dict) -> list:
    """The results, with the report-only findings of this module's docstring lowered to info."""
    from .backendpreds25 import CHOSEN
    from .modpaths import RunTexts
    from .moot import is_moot

    def open_finding(f) -> bool:
        return not f.fixable and f.cell is None and not is_moot(f) and f.severity in ("error", "warning")

    candidates = [i for i, r in enumerate(results)
                  if r.relpath.endswith(".py") and any(open_finding(f) for f in r.findings)]
    if not candidates:
        return results
    text_of = RunTexts(results, paths)
    python = [i for i, r in enumerate(results) if r.relpath.endswith(".py")]
    if not any(b"@register" in (text_of(i) or b"") for i in python):
        return results

    def reason(gates, i: int, unit) -> Optional[str]:
        found = gates.sites(i, unit)
        if not found:
            return None
        registered = [s for _j, s in found if _REGISTERED in s]
        if not registered:
            return None  # (callgates21's own verdicts: decided before)
        value = next(v for (j, s) in found if _REGISTERED in s
                     for v in [_value_of(gates, s)] if v is not None)
        shown = "; ".join(s for _j, s in found[:2]) + (f"; and {len(found) - 2} more" if len(found) > 2 else "")
        return (f'{CHOSEN} "{value}" is chosen: `{unit.name}` is reached only from {shown}; an NPU host '
                f'reaches it only where the user selects "{value}" by name: leave it unselected there, or '
                f"port the backend")

    from .callgates21 import unit_of
    from .flagcalls19 import Run

    state: list = []
    out = list(results)
    for i in candidates:
        data = text_of(i) or b""
        lines_b = data.split(b"\n")
        places = [n for f in results[i].findings if open_finding(f) for n in (f.line, *(a[0] for a in f.also))]
        if not any(0 < n <= len(lines_b) and lines_b[n - 1][:1] in (b" ", b"\t") for n in places):
            continue  # (module-level code only: no unit holds it)
        tree = astcache.parse(data)
        if tree is None:
            continue
        findings, changed = [], False
        for finding in results[i].findings:
            why = None
            if open_finding(finding):
                units = [unit_of(tree, line) for line in (finding.line, *(a[0] for a in finding.also))]
                if units and all(u is not None for u in units):
                    if not state:
                        run = Run(results, text_of)
                        state.extend((run, _Registry(run, _arities(results, python, text_of))))
                    run, gates = state
                    tree = run.trees.setdefault(i, tree)  # (the tree the run's lookups hold)
                    units = [unit_of(tree, line) for line in (finding.line, *(a[0] for a in finding.also))]
                    distinct = list({id(u): u for u in units}.values())
                    reasons = [reason(gates, i, u) for u in distinct]
                    # (every place of the finding so reached, or none lowered: a merged finding is
                    # not split into an error and info pieces)
                    if all(reasons):
                        why = "; ".join(dict.fromkeys(reasons))
            if why is not None:
                finding = dataclasses.replace(finding, severity="info", message=f"{finding.message} ({why})")
                changed = True
            findings.append(finding)
        if changed:
            out[i] = dataclasses.replace(results[i], findings=sorted(findings))
    return out


def _value_of(gates: _Registry, site: str) -> Optional[str]:
    for (_i, _name), found in gates.registered.items():
        if found is not None and found[0] == site:
            return found[1]
    return None
