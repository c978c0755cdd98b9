"""Triton device functions called only inside kernels of their own module that are already named
scopes (issue #16, wave 27, BV#3's `_dequant8`; whole run, runplan.py right after kernelgates26.py).
It was part of attrflags27.py; it runs callgates21's `Gates`, which asks attrflags27.py, so it
lives in a module of its own (no import circle)."""

from __future__ import annotations

import ast
from typing import Optional

_NOT_RUN_910 = "not run on an NPU host (NPU910): "


def review_device_functions(results: list, paths: dict) -> list:
    """The results, with each open NPU910 place on the Triton decorator of a device function
    (called, never launched) lowered to a named scope when every reference of the run to it is a
    call inside other Triton functions of its own module whose places are already such scopes (or
    become so here, a few rounds: a device function calling another).

    kernelgates26.py lowers a kernel when its launches lie behind a gate false on an NPU host a few
    calls deep; a device function sits one or two calls further from that gate (`_dequant8` called
    by `_dequant_rows`, called by the lowered kernels) and ran out of depth. It runs only where the
    kernels calling it run. Kept: a device function any reference of which is something else (a
    launch, a value handed on, a string, an attribute read, another module's mention, a test's
    call), or called by a kernel still reported."""
    from .callgates21 import Gates
    from .flagcalls19 import Run, lower_result
    from .flags16 import BRANCH
    from .kernelgates26 import triton_decorated
    from .modpaths import RunTexts, open_python, parsed
    from .moot import is_moot

    def open_kernel(f) -> bool:
        return (f.code == "NPU910" and not f.fixable and f.cell is None and not is_moot(f)
                and f.severity != "info")

    text_of = RunTexts(results, paths)
    out = list(results)
    state = None
    for i, tree in parsed(open_python(results, open_kernel), text_of, b"triton"):
        if tree is None:
            continue
        result = results[i]
        if state is not None:
            tree = state[0].trees.setdefault(i, tree)
        kernels = triton_decorated(tree)
        units = {id(u): u for u in kernels.values()}
        first_line = {id(u): min(ln for ln, v in kernels.items() if v is u) for u in units.values()}
        lowered = {ln for f in result.findings if f.code == "NPU910" and is_moot(f)
                   for ln in (f.line, *(a for a, _c, _s in f.also))}
        # (a kernel a later pass already moved into a named scope, supportgates27's `_all_regions`:
        # round 32 GB#15; a scope's ends are its finding's places, the lines between need not be)
        lowered |= {ln for a, b, why in result.skipped_scopes if why.startswith(_NOT_RUN_910) for ln in (a, b)}
        dead = {uid for uid in units if any(kernels.get(ln) is units[uid] for ln in lowered)}
        open_units = {id(kernels[ln]) for f in result.findings if open_kernel(f)
                      for ln in (f.line, *(a for a, _c, _s in f.also)) if ln in kernels}
        if not open_units or not dead:
            continue
        callers = {uid: _device_callers(tree, units, units[uid]) for uid in open_units}
        if state is None:
            run = Run(results, text_of)
            state = (run, Gates(run))
        elsewhere: dict = {}  # (uid -> other modules' lowered kernels calling it: CC#20)
        callers = {uid: c for uid, c in callers.items()
                   if c is not None and _others_dead(state, i, units[uid].name, elsewhere.setdefault(uid, []))}
        why: dict = {}
        for _round in range(4):
            more = {uid: c for uid, c in callers.items() if uid not in why and c and c <= dead}
            if not more:
                break
            for uid, c in more.items():
                names = ", ".join(f"`{units[k].name}` (line {first_line[k]})" for k in sorted(c, key=first_line.get))
                more_names = sorted(set(elsewhere.get(uid, ())))
                also = f" (and in {', '.join(more_names[:2])}{' and more' if len(more_names) > 2 else ''}, already scopes)" \
                    if more_names else ""
                why[uid] = (f"{BRANCH}: the Triton device function `{units[uid].name}` is called only inside "
                            f"this module's Triton functions {names}{also}, which an NPU host does not run")
                dead.add(uid)
        if not why:
            continue

        def reason_of(line: int, kernels=kernels, why=why):
            unit = kernels.get(line)
            return None if unit is None else why.get(id(unit))

        out[i] = lower_result(result, open_kernel, reason_of)
    return out


def _device_callers(tree: ast.Module, units: dict, unit: ast.AST):
    """The ids of the module's other Triton functions whose bodies call `unit`, when every reference
    of the module to it is such a call; None otherwise (also when there is none)."""
    from . import astcache

    spans = [(uid, u.lineno, u.end_lineno or u.lineno) for uid, u in units.items() if u is not unit]
    parents = astcache.parents(tree)
    found: set = set()
    for node in astcache.walk(tree):
        if isinstance(node, ast.Constant) and node.value == unit.name:
            return None
        if isinstance(node, ast.Attribute) and node.attr == unit.name:
            return None
        if isinstance(node, ast.Name) and node.id == unit.name:
            call = parents.get(id(node))
            owner = next((uid for uid, a, b in spans if a <= node.lineno <= b), None)
            if owner is None or not (isinstance(call, ast.Call) and call.func is node
                                     and isinstance(node.ctx, ast.Load)):
                return None
            found.add(owner)
    return found or None


def _others_dead(state, i: int, name: str, kernels: list = None) -> bool:
    """Every mention of `name` in the run's other Python files is a name or attribute read in code
    an NPU host does not run (callgates21's reading: a test it skips, a branch false there); no
    file that does not parse, no string naming it."""
    _run, gates = state
    for j, tree in gates.naming(name, but=i):
        if tree is None:
            return False
        parents, refs, strings = gates._index(j, tree)
        if name in strings:
            return False
        for node in refs.get(name, ()):
            if not isinstance(node.ctx, ast.Load):
                return False
            if gates.dead(j, tree, parents, node) is None:
                owner = _in_lowered_kernel(gates, j, tree, parents, node)
                if owner is None:
                    return False
                if kernels is not None:
                    kernels.append(f"`{owner}` of {gates.run.results[j].relpath}")
    return True


def _in_lowered_kernel(gates, j: int, tree: ast.Module, parents: dict, node: ast.AST) -> Optional[str]:
    """`node` is a call inside a Triton function of module j whose NPU910 place is already a named
    scope (round 28, CC#20: the step5 `_gate` device function, called inside the SWA decode kernels
    of another module that kernelgates26 lowered): it runs only where that kernel runs. The
    kernel's name, or None."""
    from .kernelgates26 import triton_decorated
    from .moot import is_moot

    call = parents.get(id(node))
    if not (isinstance(call, ast.Call) and call.func is node):
        return None
    kernels = triton_decorated(tree)
    owner = next((u for u in {id(u): u for u in kernels.values()}.values()
                  if u.lineno <= node.lineno <= (u.end_lineno or u.lineno)), None)
    if owner is None:
        return None
    lines = {ln for ln, u in kernels.items() if u is owner}
    result = gates.run.results[j]
    places = [(f, ln) for f in result.findings if f.code == "NPU910"
              for ln in (f.line, *(a for a, _c, _s in f.also)) if ln in lines]
    if not places:  # (its place already moved into a named scope by a later pass: round 32 GB#15)
        scoped = any(ln in lines for a, b, why in result.skipped_scopes if why.startswith(_NOT_RUN_910) for ln in (a, b))
        return owner.name if scoped else None
    return owner.name if all(is_moot(f) for f, _ln in places) else None




def review_late(results: list, paths: dict) -> list:
    """review_device_functions again after supportgates27/supportexits31 (runplan.py), whose kernels
    are named scopes by then (round 32 GB#15: step5's `_emit_all_regions`, called only inside
    `_all_regions`, which supportgates27 scoped); what it lowers becomes a named scope at once."""
    from .moot import to_scopes

    out = review_device_functions(results, paths)
    changed = [i for i in range(len(out)) if out[i] is not results[i]]
    for i, result in zip(changed, to_scopes([out[i] for i in changed])):
        out[i] = result
    return out
