"""Triton kernels defined only under an availability flag IMPORTED from a sibling module that probes
Triton (issue #16, round-21 audit BG#13: "`from pkg._triton import _TRITON_AVAILABLE, triton, tl`
plus `if _TRITON_AVAILABLE:` kernel blocks, where the availability flag is imported rather than
computed in the file"). Whole run, from runplan.whole_run_passes, after optionalext.py and gates15.py (a kernel launched only
under an accelerator method False on NPU is a named scope there first).

    # pkg/_triton.py
    try:
        import triton
        import triton.language as tl
        _TRITON_AVAILABLE = any(b.driver.is_active() for b in backends.values())
    except Exception:
        triton = None
        tl = None
        _TRITON_AVAILABLE = False

    # pkg/ep_kernels.py
    from pkg._triton import _TRITON_AVAILABLE, triton, tl
    if _TRITON_AVAILABLE:
        @triton.jit
        def _fill_kernel(...): ...
    def fill(x):
        if not _TRITON_AVAILABLE:
            return fill_cpu(x)            # the NPU host without Triton goes here
        _fill_kernel[grid](x)

optionalext.py lowers the in-file form (`try: import triton` in the module itself, every use under
`if HAS_TRITON:`) to info; here the `try` is the sibling's. The NPU910 error (not the "imported
unguarded" one) of a module that imports no Triton itself becomes info with the same words when:

* a module-level `from M import FLAG, ...` names a run module M all of whose Triton imports sit
  in module-level `try` bodies catching the failure (optionalext's probe), whose handler binds
  FLAG to False, FLAG named like an availability flag (tritonguards' `_availability`);
* every place of the finding lies in the body of a module-level `if` whose test requires Triton's
  availability (tritonguards' `_tests_triton`: FLAG not negated);
* the names those blocks define, and the Triton names imported from M, are read outside the blocks
  only in the bodies of the module's functions (flagreads20.functions_reading: nothing at import),
  a read after a top-level `if not FLAG: return/raise` of its function not counting; any other
  reader is named in the message (it fails there if called without Triton);
* no module of the run imports one of the names the blocks define (that import would fail).

Kept: a module importing Triton itself (optionalext's), a kernel outside the blocks, a flag the
sibling computes without a `try` (it may be True without Triton), a read at import, and an
unguarded reader that another module of the run names (directly, or through the module's own
functions that call it): that launch is reached and fails on an NPU host without Triton.
"""

from __future__ import annotations

import ast
import dataclasses
from typing import Optional

from . import astcache

REASON = ("Triton and `{flag}` imported from {probe}, which imports Triton in a `try` and sets `{flag}` False "
          "where it is missing; every kernel here is under `if {test}:`: an NPU host without Triton skips "
          "these kernels; with Triton-Ascend installed they run there: verify them")


def _open(finding) -> bool:
    from .tritonguards import UNGUARDED

    return finding.code == "NPU910" and not finding.fixable and finding.cell is None \
        and finding.severity != "info" and UNGUARDED not in finding.message


def _imports_triton(tree: ast.Module) -> bool:
    from .tritonguards import is_triton

    for node in astcache.walk(tree):
        if isinstance(node, ast.Import) and any(is_triton(a.name) for a in node.names):
            return True
        if isinstance(node, ast.ImportFrom) and not node.level and is_triton(node.module or ""):
            return True
    return False


def _handler_clears(tree: ast.Module, flag: str) -> bool:
    """A module-level `try` of the probe binds `flag` in its body and `flag = False` in a handler."""
    for stmt in tree.body:
        if not isinstance(stmt, ast.Try):
            continue
        in_body = any(isinstance(t, ast.Name) and t.id == flag for s in stmt.body for n in ast.walk(s)
                      if isinstance(n, ast.Assign) for t in n.targets)
        cleared = any(isinstance(s, ast.Assign) and any(isinstance(t, ast.Name) and t.id == flag for t in s.targets)
                      and isinstance(s.value, ast.Constant) and s.value.value is False
                      for h in stmt.handlers for s in h.body)
        if in_body and cleared:
            return True
    return False


def _flag_import(run, i: int, tree: ast.Module):
    """(flag, names imported with it, the probing module's index) of the module-level import of a
    Triton availability flag from a run module that probes Triton; None otherwise."""
    from .optionalext import probed_triton as _probed_triton
    from .tritonguards import availability as _availability

    for stmt in tree.body:
        if not isinstance(stmt, ast.ImportFrom):
            continue
        module = run._from_module(i, stmt)
        j = run.module(module)
        if j is None or j == i:
            continue
        flags = [a for a in stmt.names if a.asname is None and _availability(ast.Name(id=a.name))]
        if not flags:
            continue
        other = run.tree(j)
        probed = _probed_triton(other) if other is not None else None
        if probed is None:
            continue
        flag = flags[0].name
        if not _handler_clears(other, flag):
            continue
        triton_names = {a.asname or a.name for a in stmt.names if a.name in probed[0]}
        return flag, triton_names, j
    return None


def _exits_unless(stmt: ast.stmt, flag: str) -> bool:
    """`if not FLAG: return ...` / `raise ...` (the body always leaves)."""
    return isinstance(stmt, ast.If) and not stmt.orelse and isinstance(stmt.test, ast.UnaryOp) \
        and isinstance(stmt.test.op, ast.Not) and isinstance(stmt.test.operand, ast.Name) \
        and stmt.test.operand.id == flag and bool(stmt.body) and isinstance(stmt.body[-1], (ast.Return, ast.Raise))


def _reason(run, i: int, tree: ast.Module, finding) -> Optional[str]:
    from . import flagreads20
    from .tritonguards import tests_triton as _tests_triton

    found = _flag_import(run, i, tree)
    if found is None:
        return None
    flag, triton_names, j = found
    gates = [s for s in tree.body if isinstance(s, ast.If) and _tests_triton(s.test)]
    if not gates:
        return None
    spans = [(min([g.body[0].lineno, *(d.lineno for d in getattr(g.body[0], "decorator_list", ()))]),
              g.body[-1].end_lineno or g.body[-1].lineno) for g in gates if g.body]
    places = [finding.line, *(line for line, _c, _s in finding.also)]
    if not all(any(a <= n <= b for a, b in spans) for n in places):
        return None
    defined = {s.name for g in gates for s in g.body if isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))}
    defined |= {t.id for g in gates for s in g.body if isinstance(s, ast.Assign) for t in s.targets if isinstance(t, ast.Name)}
    # (a read after `if not FLAG: return` at the top of its function is guarded there)
    guarded: list[tuple[int, int]] = []
    for node in astcache.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            for k, stmt in enumerate(node.body[:-1]):
                if _exits_unless(stmt, flag):
                    guarded.append((node.body[k + 1].lineno, node.end_lineno or node.lineno))
                    break
    watched = defined | triton_names
    reads = [(n.id, n.lineno) for n in astcache.walk(tree) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)
             and n.id in watched and not any(a <= n.lineno <= b for a, b in spans + guarded)]
    readers = flagreads20.functions_reading(tree, reads) if reads else []
    if readers is None:
        return None  # (read at import: the module fails as it loads)
    if defined and _imported_elsewhere(run, i, defined):
        return None
    gated_note = None
    if readers:
        used, gated_note = _readers_used_elsewhere(run, i, tree, readers, flag)
        if used:
            return None  # (an unguarded launch other modules reach: it fails there, the error stands)
    test = " ".join((ast.get_source_segment((run.text_of(i) or b"").decode("utf-8", "replace"), gates[0].test)
                     or ast.unparse(gates[0].test)).split())
    why = REASON.format(flag=flag, probe=run.results[j].relpath, test=test)
    if readers:
        by_function: dict[str, list[int]] = {}
        for name, line in readers:
            by_function.setdefault(name, []).append(line)
        shown = ", ".join(f"`{name}` (line{'s' if len(lines) > 1 else ''} {', '.join(map(str, lines))})"
                          for name, lines in list(by_function.items())[:4])
        one = len(by_function) == 1
        if gated_note:  # (tritonguards23: other modules call them only under a predicate requiring the flag)
            why += f"; {shown} {'uses' if one else 'use'} them outside the block, and {gated_note}"
        else:
            why += (f"; {shown} {'uses' if one else 'use'} them outside the block and {'fails' if one else 'fail'}"
                    f" there without Triton if called: review {'its' if one else 'their'} callers")
    return why


def _readers_used_elsewhere(run, i: int, tree: ast.Module, readers: list, flag: str) -> tuple[bool, Optional[str]]:
    """Whether a top-level function or class of module i that reads the kernels outside the
    blocks unguarded (or reaches such a reader through the module's own names) is named by another
    module of the run: then the launch is reached from outside and fails on an NPU host without
    Triton (test_precision_optin: `fused_scale` -> `_launch` called by a layer's `forward`). A
    reader nothing else names (a helper the module keeps for later) leaves the info standing; nor
    does one other modules call only under a predicate of this module that requires the flag
    (tritonguards23.flag_predicate_callers: `if permute_rows_supported(x): permute_rows(x)`), whose
    words come back with False."""
    import re

    tops = {s.name: s for s in tree.body if isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))}
    lines = {line for _name, line in readers}
    reaching = {name for name, s in tops.items() if any(s.lineno <= n <= (s.end_lineno or s.lineno) for n in lines)}
    changed = True
    while changed:
        changed = False
        for name, s in tops.items():
            if name in reaching:
                continue
            if any(isinstance(n, ast.Name) and n.id in reaching for n in ast.walk(s)):
                reaching.add(name)
                changed = True
    if not reaching:
        return False, None
    from .tritonguards23 import flag_predicate_callers

    note = flag_predicate_callers(run, i, tree, flag, reaching)
    if note is not None:
        return False, note
    pattern = re.compile(rb"\b(" + b"|".join(re.escape(n.encode()) for n in sorted(reaching)) + rb")\b")
    for j, result in enumerate(run.results):
        if j != i and result.relpath.endswith(".py") and pattern.search(run.text_of(j) or b""):
            return True, None
    return False, None


def _imported_elsewhere(run, i: int, names: set) -> bool:
    """Whether a module of the run imports one of `names` from module i (`from M import name`)."""
    from .modpaths import module_names

    own = set(module_names(run.results[i].relpath))
    for j, result in enumerate(run.results):
        if j == i or not result.relpath.endswith(".py"):
            continue
        data = run.text_of(j) or b""
        if not any(n.encode() in data for n in names):
            continue
        tree = run.tree(j)
        if tree is None:
            return True
        for node in astcache.walk(tree):
            if isinstance(node, ast.ImportFrom) and run._from_module(j, node) in own \
                    and any(a.name in names for a in node.names):
                return True
    return False


def review(results: list, paths: dict) -> list:
    """The results, with the NPU910 errors of this module's docstring lowered to info."""
    from .flagcalls19 import Run as _Run
    from .modpaths import RunTexts

    candidates = [i for i, r in enumerate(results) if r.relpath.endswith(".py")
                  and any(_open(f) for f in r.findings)]
    if not candidates:
        return results
    text_of = RunTexts(results, paths)
    run: Optional[_Run] = None
    out = list(results)
    for i in candidates:
        data = text_of(i) or b""
        if b"import" not in data or b"if " not in data:
            continue
        tree = astcache.parse(data)
        if tree is None or _imports_triton(tree):
            continue
        if run is None:
            run = _Run(results, text_of)
        tree = run.trees.setdefault(i, tree)  # (the tree the run's lookups hold: nodes compared by identity)
        findings, changed = [], False
        for finding in out[i].findings:
            why = _reason(run, i, tree, finding) if _open(finding) else None
            if why is not None:
                finding = dataclasses.replace(finding, severity="info", message=f"{finding.message} ({why})")
                changed = True
            findings.append(finding)
        if changed:
            out[i] = dataclasses.replace(out[i], findings=findings)
    return out
