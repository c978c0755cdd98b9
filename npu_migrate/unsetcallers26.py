"""A private helper reached only through another function's opt-in branch that no call of the run
enters (issue #16, round-23 audit BO#18). Whole run, from runplan.whole_run_passes, after
importfolds25.py.

flagargs21.py reads a flag parameter of the function that holds the `if`: a lazy CUDA-only import
under `if scale_ue8m0:` that every call of the run leaves False is info "under a parameter no call
of the run sets" (a caller outside the project, a library's user, may set it: the owner's policy
for a public function, unreached25.py). One step further the same opt-in stayed an error: the
import lies in a private helper, and the `if` in its public caller:

    # quant/kernels.py
    def _quant_fused(x, group_size):
        from deep_gemm import transform_sf     # NPU911: info now, as the sibling below
        ...
    def _quant_raw(x, group_size, scale_ue8m0=False):
        if scale_ue8m0:
            from deep_gemm import transform_sf # flagargs21: info already
        ...
    def quant(x, group_size, fuse=False):      # public; no call of the run sets `fuse`
        if fuse:
            return _quant_fused(x, group_size)
        return _quant_raw(x, group_size)

A report-only finding (error or warning, not fixable) every place of which lies in the body of one
private module-level function (`_name`) becomes info with flagargs21's reason (flagargs21.UNSET,
naming the parameter, the caller and its calls) when ALL of these hold:

* every reference of the run to the helper is a call in the same module (no other file names it,
  no string names it; `__all__` aside), each in the body (not the `else:`) of an `if` whose test is
  a parameter `p`, alone or as an operand of `and`, of the module-level function `F` around it;
* `p` defaults to False in `F`, and `F` never assigns it;
* every reference of the run to `F` (files defining their own top-level `F` aside) is a call, with
  no `*args`/`**kwargs`, that leaves `p` at its default or passes a literal False/None/0 (keyword,
  or positional at its index); no string names `F`. A run with no call of `F` at all counts too
  (a public function nobody in the project calls: its users may).

Kept: a helper called outside such a branch, named in another file or handed on as a value; a call
of `F` passing anything else for `p` (a flag, a local, `True`), `*args`/`**kwargs`; a method; a
negated test or `else:`; a parameter defaulting to anything but False. The info is not a named
scope: a library's user may set the parameter (unreached25.py scopes only the flagargs21 clauses
whose `if` holds the finding itself).
"""

from __future__ import annotations

import ast
import dataclasses
from typing import Optional

from . import astcache

_FUNCTIONS = (ast.FunctionDef, ast.AsyncFunctionDef)


def _off(node: Optional[ast.AST]) -> bool:
    return node is None or (isinstance(node, ast.Constant) and node.value in (False, None, 0)
                            and not isinstance(node.value, float))


def _false_default(function: ast.AST, param: str) -> Optional[int]:
    """The parameter's positional index (-1: keyword-only) where it defaults to literal False, else None."""
    args = function.args
    positional = [*args.posonlyargs, *args.args]
    for arg, default in zip(positional[len(positional) - len(args.defaults):], args.defaults):
        if arg.arg == param:
            return positional.index(arg) if isinstance(default, ast.Constant) and default.value is False else None
    for arg, default in zip(args.kwonlyargs, args.kw_defaults):
        if arg.arg == param:
            return -1 if isinstance(default, ast.Constant) and default.value is False else None
    return None


def _stores(function: ast.AST, name: str) -> bool:
    return any(isinstance(n, ast.Name) and n.id == name and not isinstance(n.ctx, ast.Load)
               for n in ast.walk(function) if n is not function)


def _all_ids(tree: ast.Module) -> set:
    """ids of the nodes of `__all__ = [...]` lists (names, not references)."""
    out: set = set()
    for stmt in tree.body:
        if isinstance(stmt, (ast.Assign, ast.AugAssign)):
            targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
            if any(isinstance(t, ast.Name) and t.id == "__all__" for t in targets):
                out.update(id(n) for n in ast.walk(stmt.value))
    return out


def _references(tree: ast.Module, name: str) -> Optional[list]:
    """The Name/Attribute loads of `name` in the tree, or None where a string or a store names it."""
    skip = _all_ids(tree)
    found = []
    for node in astcache.walk(tree):
        if id(node) in skip:
            continue
        if isinstance(node, ast.Constant) and node.value == name:
            return None
        if (isinstance(node, ast.Name) and node.id == name) or (isinstance(node, ast.Attribute) and node.attr == name):
            if not isinstance(node.ctx, ast.Load):
                return None
            found.append(node)
    return found


def _gate(parents: dict, node: ast.AST, tree: ast.Module):
    """(the module-level function around `node`, the parameter, the `if`) where `node` lies in the
    body of an `if p:` / `if ... and p and ...:` of that function's False-default parameter `p`."""
    child, current = node, parents.get(id(node))
    while current is not None and not isinstance(current, (*_FUNCTIONS, ast.ClassDef, ast.Lambda, ast.Module)):
        if isinstance(current, ast.If) and any(child is s for s in current.body):
            test = current.test
            parts = test.values if isinstance(test, ast.BoolOp) and isinstance(test.op, ast.And) else [test]
            names = [p.id for p in parts if isinstance(p, ast.Name)]
            function = current
            while function is not None and not isinstance(function, (*_FUNCTIONS, ast.ClassDef, ast.Lambda)):
                function = parents.get(id(function))
            if isinstance(function, _FUNCTIONS) and any(function is s for s in tree.body):
                for name in names:
                    if _false_default(function, name) is not None and not _stores(function, name):
                        return function, name, current
        child, current = current, parents.get(id(current))
    return None


def _unset_everywhere(run_trees, i: int, function: ast.AST, param: str) -> Optional[list]:
    """["path:line"] of the run's calls of `function` (of module i), each leaving `param` unset or
    False; None where a reference is no such call."""
    index = _false_default(function, param)
    name = function.name
    calls: list = []
    for j, relpath, tree in run_trees(name):
        if tree is None:
            return None
        if j != i and any(isinstance(s, _FUNCTIONS + (ast.ClassDef,)) and s.name == name for s in tree.body):
            continue  # (its own by that name)
        refs = _references(tree, name)
        if refs is None:
            return None
        parents = astcache.parents(tree)
        for ref in refs:
            call = parents.get(id(ref))
            if not (isinstance(call, ast.Call) and call.func is ref):
                return None
            if any(isinstance(a, ast.Starred) for a in call.args) or any(k.arg is None for k in call.keywords):
                return None
            value = next((k.value for k in call.keywords if k.arg == param), None)
            if value is None and 0 <= index < len(call.args):
                value = call.args[index]
            if not _off(value):
                return None
            calls.append(f"{relpath}:{ref.lineno}")
    return calls


def _reason(unit, function, param: str, gate: ast.If, calls: list) -> str:
    from .flagargs21 import UNSET

    test = " ".join(ast.unparse(gate.test).split())[:80]
    if calls:
        shown = f"e.g. {calls[0]}" if len(calls) > 1 else calls[0]
        who = (f"`{param}` of `{function.name}` defaults to False and is passed False or left at its "
               f"default by every call of the run ({len(calls)} call{'s' if len(calls) > 1 else ''}, {shown})")
    else:
        who = (f"`{param}` of `{function.name}` defaults to False and no call of the run sets it: the run "
               f"never calls `{function.name}`")
    return (f"{UNSET}: `{param}` (`{unit.name}` is called only under `if {test}:` of `{function.name}` "
            f"(line {gate.lineno}); {who}): the helper runs only where a caller outside the project sets it")


def review(results: list, paths: dict) -> list:
    """The results, with the findings of this module's docstring lowered to info."""
    from .callgates21 import unit_of
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
    trees: dict = {}

    def tree_of(j: int):
        if j not in trees:
            trees[j] = astcache.parse(text_of(j) or b"")
        return trees[j]

    def run_trees(name: str):
        word = name.encode()
        for j in python:
            if word in (text_of(j) or b""):
                yield j, results[j].relpath, tree_of(j)

    out = list(results)
    for i in candidates:
        result = results[i]
        data = text_of(i) or b""
        if b"def _" not in data or b"if " not in data:
            continue
        tree = tree_of(i)
        if tree is None:
            continue
        memo: dict = {}
        findings, changed = [], False
        for finding in result.findings:
            lowered = None
            if open_finding(finding):
                units = {id(u): u for u in (unit_of(tree, ln) for ln in (finding.line, *(a[0] for a in finding.also)))}
                unit = next(iter(units.values())) if len(units) == 1 else None
                if isinstance(unit, _FUNCTIONS) and unit.name.startswith("_"):
                    if unit.name not in memo:
                        memo[unit.name] = _helper_reason(tree, i, unit, run_trees)
                    why = memo[unit.name]
                    if why is not None:
                        lowered = dataclasses.replace(finding, severity="info", message=f"{finding.message} ({why})")
            changed = changed or lowered is not None
            findings.append(lowered or finding)
        if changed:
            out[i] = dataclasses.replace(result, findings=sorted(findings))
    return out


def _helper_reason(tree: ast.Module, i: int, unit, run_trees) -> Optional[str]:
    """The info reason of a finding of the private helper `unit` (module i), or None: kept."""
    refs_here = None
    for j, _relpath, other in run_trees(unit.name):
        if j == i:
            refs_here = _references(other, unit.name)
            if refs_here is None:
                return None
        elif other is None or _references(other, unit.name) != []:
            return None  # (named in another module: not this module's private helper alone)
    parents = astcache.parents(tree)
    refs = [r for r in refs_here or () if not _inside(parents, r, unit)]
    if not refs:
        return None
    gates = []
    for ref in refs:
        call = parents.get(id(ref))
        if not (isinstance(ref, ast.Name) and isinstance(call, ast.Call) and call.func is ref):
            return None
        found = _gate(parents, ref, tree)
        if found is None:
            return None
        gates.append(found)
    function, param, gate = gates[0]
    if any(g[0] is not function or g[1] != param for g in gates):
        return None
    calls = _unset_everywhere(run_trees, i, function, param)
    if calls is None:
        return None
    return _reason(unit, function, param, gate, calls)


def _inside(parents: dict, node: ast.AST, unit: ast.AST) -> bool:
    current = parents.get(id(node))
    while current is not None:
        if current is unit:
            return True
        current = parents.get(id(current))
    return False
