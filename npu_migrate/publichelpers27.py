"""A library's public function that only tests an NPU host does not run call, lowered to info
naming them (issue #16, policy P3; round 24 BQ#23). Whole run, from runplan.whole_run_passes (after
callgates21.py).

callgates21.py turns the findings of a function every reference of which lies in code an NPU host
does not run into a named scope, except a public function of a library module (no `_` name, not in
a test, benchmark, example, tool or script) whose only references are tests skipped there: its
users may call it, so it stayed reported at its own severity, an error:

    def to_float8_per_group(x, offs, target_dtype=torch.float8_e4m3fn):   # FP8 place (a default)
        ...                                                               # a torch reference helper
    # tests/test_kernels.py: pytestmark = skipif(not is_sm100(), ...); to_float8_per_group(...)

The project's policy P3: a public helper that nothing in the package reaches on an NPU host except
dead callers is still public API: info, not an error, with the message saying who calls it ("a
public function of the library; nothing in the package calls it on an NPU host: its only callers,
tests/test_kernels.py:12 (in a test an NPU host skips ...), are not run there; a user's own call
still reaches this"). Nothing is dropped: the finding stays, lowered.

Decided per place, on the exact construct: the place lies in a module-level public function of a
library module (its body, or a default or annotation of its parameters: evaluated at import, but
an FP8 dtype there matters only when the function runs; not a decorator), callgates21's Gates finds
every reference of the run to it in code an NPU host does not run (asked with `keep_public` off),
one at least in another module, and every such reference is in a test. A reference from library
code, dead or not, is callgates21's (a scope) or keeps the finding; a reference that may run there
keeps it; so does a method or a class (a class's users reach it through other names).
"""

from __future__ import annotations

import ast
from typing import Optional

from . import astcache

_DEFS = (ast.FunctionDef, ast.AsyncFunctionDef)


def _function(tree: ast.Module, line: int) -> Optional[ast.AST]:
    """The module-level function whose `def` (not its decorators) holds `line`."""
    for stmt in tree.body:
        if isinstance(stmt, _DEFS) and stmt.lineno <= line <= (stmt.end_lineno or stmt.lineno):
            return stmt
    return None


def review(results: list, paths: dict) -> list:
    """Module's doc."""
    from .callgates21 import Gates, public_api
    from .flagcalls19 import Run, lower_result
    from .importgates import is_test
    from .modpaths import RunTexts
    from .moot import is_open as open_finding

    class _PublicGates(Gates):
        keep_public = False

    text_of = RunTexts(results, paths)
    state = None
    out = list(results)
    for i, result in enumerate(results):
        if not result.relpath.endswith(".py") or is_test(result.relpath) or \
                not any(open_finding(f) for f in result.findings):
            continue
        data = text_of(i)
        tree = astcache.parse(data) if data else None
        if tree is None:
            continue
        lines = {n for f in result.findings if open_finding(f) for n in (f.line, *(ln for ln, _c, _s in f.also))}
        units = {n: _function(tree, n) for n in lines}
        if not any(u is not None and public_api(result.relpath, u.name) for u in units.values()):
            continue
        if state is None:
            run = Run(results, text_of)
            state = (run, _PublicGates(run))
        run, gates = state
        tree = run.trees.setdefault(i, tree)
        units = {n: _function(tree, n) for n in lines}
        verdicts: dict = {}

        def reason_of(line: int, i=i, units=units, verdicts=verdicts, relpath=result.relpath) -> Optional[str]:
            unit = units.get(line)
            if unit is None or not public_api(relpath, unit.name):
                return None
            if unit.name not in verdicts:
                found = gates.sites(i, unit)
                ok = bool(found) and any(j != i for j, _s in found) and all(
                    is_test(run.results[j].relpath) for j, _s in found)
                shown = "; ".join(s for _j, s in found[:2]) + (
                    f"; and {len(found) - 2} more" if found and len(found) > 2 else "") if ok else ""
                verdicts[unit.name] = (
                    f"in `{unit.name}`, a public function of the library: nothing in the package calls it on an "
                    f"NPU host; its only callers, {shown}, are tests not run there; a user's own call still "
                    "reaches this") if ok else None
            return verdicts[unit.name]

        out[i] = lower_result(result, open_finding, reason_of)
    return out
