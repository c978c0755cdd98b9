"""Triton kernels whose every launch lies behind another module's gate false on an NPU host, and
gates read through a property (issue #16, round 26: BE#1).

Round 19's BE#1: the three `@triton.jit` functions of a model's `ops/query_quant.py` are launched
only by `fused_q_kv_rmsnorm_quant()` of the same file, whose only caller is an attention layer
(another module) that calls it only under `if self.q_lora_rank % 32 == 0 and
self._can_fuse_query_quant:`. `_can_fuse_query_quant` is a `@cached_property` returning
`can_fuse_query_quant(linears)`, which returns False first thing off CUDA (`if not
current_platform.is_cuda(): return False`). Two pieces were missing:

* **A gate read through a property.** callgates21.py reads `self.X` where the class assigns it
  once; a property is a method the attribute calls: propgates26.py reads it (its one `return`,
  also through a function the method imports itself), and callgates21.py asks it for a `self.X`
  it finds no assignment of.
* **The kernel itself.** callgates21.py lowers the findings in a function's body; a Triton
  kernel's NPU910 sits on its decorator (`@triton.jit`), outside the body, so the kernel stayed an
  error while the FP8 line of its launcher became a scope. `review` (whole run, right after
  callgates21.py) takes each open NPU910 place that lies on the decorator of a module-level
  function decorated by Triton (`triton.jit`, `triton.autotune`, `triton.heuristics`, bare or
  called), and lowers it the same way when callgates21's `Gates.sites` finds every reference of
  the run to that function in code an NPU host does not run, one at least in another module (its
  launcher's callers, a few steps deep). The decorator itself runs at import, where the module's
  import of Triton is judged on its own (an unguarded `import triton` keeps its own finding).

* **A device function the lowered kernels shared.** A place kept that way, on a Triton device
  function (called, never launched) whose every reference in the run is a call inside a Triton
  kernel, the other modules' kernels having their own open NPU910, is folded into the first of
  those findings, which names it (BE#1's `mxfp8_scale_offset`, also called inside an engram
  module's kernels, which are reported there): it runs only where those kernels run.

What stays: a kernel one of whose references may run there and is no call inside a kernel (a
launch, a value handed on, a string, a test's call: that place of a merged finding stays, split
off); a gate callgates21 cannot read (a property with two returns, a setter, a second `def
X(` in the run, a value the interpreter does not know); a decorator that is not Triton's. A
kernel whose every reference lies in its own module counts as well (round 28, CC#18: launched only
by a function of its file after `assert current_platform.is_cuda()`, false there): reach.py and
testscopes lower the code of such a branch, never the kernel's decorator place, outside it.
"""

from __future__ import annotations

import ast
import dataclasses
from typing import Optional

from . import astcache

_TRITON = ("jit", "autotune", "heuristics")
_DEFS = (ast.FunctionDef, ast.AsyncFunctionDef)


def triton_decorated(tree: ast.Module) -> dict:
    """{line: the module-level function} for every line of a Triton decorator of such a function."""
    out: dict = {}
    for stmt in tree.body:
        if not isinstance(stmt, _DEFS):
            continue
        for decorator in stmt.decorator_list:
            target = decorator.func if isinstance(decorator, ast.Call) else decorator
            words = (astcache.dotted(target) or "").split(".")
            if len(words) >= 2 and "triton" in words[:-1] and words[-1] in _TRITON:
                for line in range(decorator.lineno, (decorator.end_lineno or decorator.lineno) + 1):
                    out[line] = stmt
    return out


def review(results: list, paths: dict) -> list:
    """The results, with each open NPU910 place on a Triton decorator of a kernel that only code
    an NPU host does not run references lowered to a named scope (this module's docstring)."""
    from .callgates21 import Gates
    from .flagcalls19 import Run
    from .flags16 import BRANCH
    from .importgates import is_test
    from .modpaths import RunTexts
    from .moot import is_moot

    def open_kernel(f) -> bool:
        return (f.code == "NPU910" and not f.fixable and f.cell is None and not is_moot(f)
                and f.severity != "info")

    text_of = RunTexts(results, paths)
    state: list = []

    def start() -> tuple:
        if not state:
            run = Run(results, text_of)
            state.append((run, Gates(run)))
        return state[0]

    def reason(gates, i: int, unit) -> Optional[str]:
        found = gates.sites(i, unit)
        if not found:
            return None
        found = sorted(found, key=lambda item: is_test(item[1].split(":", 1)[0]))
        shown = "; ".join(s for _j, s in found[:2]) + (f"; and {len(found) - 2} more" if len(found) > 2 else "")
        return (f"{BRANCH}: the Triton kernel `{unit.name}` is reached only from code an NPU host "
                f"does not run: {shown}")

    folds: list = []  # ((module, line) of a kept kernel place of a file whose other places were lowered)
    out = lower_kernels(results, text_of, open_kernel, start, reason, folds)
    return _fold_device_functions(out, folds, state[0][0] if state else None, open_kernel)


def lower_kernels(results: list, text_of, open_kernel, start, reason, folds: Optional[list] = None) -> list:
    """The results, with each `open_kernel` place (an open NPU910) on the Triton decorator of a
    module-level kernel lowered to what `reason(gates, i, unit)` says of the kernel (None: kept).
    `start()` gives (the flagcalls19 run, the gates `reason` asks) on the first file that needs
    them; `folds` takes (module, line) of each kernel place kept of a finding whose other places
    were lowered. This module's review, and supportgates27.py's with its own gates."""
    from .flagcalls19 import lower
    from .modpaths import open_python, parsed

    out = list(results)
    for i, tree in parsed(open_python(results, open_kernel), text_of, b"triton"):
        if tree is None:
            continue
        result = results[i]
        run, gates = start()
        tree = run.trees.setdefault(i, tree)
        kernels = triton_decorated(tree)
        if not kernels:
            continue

        def reason_of(line: int, i=i, kernels=kernels, gates=gates) -> Optional[str]:
            unit = kernels.get(line)
            return None if unit is None else reason(gates, i, unit)

        findings, changed = [], False
        for finding in result.findings:
            pieces = lower(finding, reason_of) if open_kernel(finding) else None
            changed = changed or pieces is not None
            findings.extend([finding] if pieces is None else pieces)
            if pieces is not None and folds is not None:
                folds.extend((i, p.line) for p in pieces if open_kernel(p) and p.line in kernels)
        if changed:
            out[i] = dataclasses.replace(result, findings=sorted(findings))
    return out


def _kernel_spans(tree: ast.Module) -> list:
    return sorted({(f.lineno, f.end_lineno or f.lineno) for f in triton_decorated(tree).values()})


def _device_callers(run, i: int, name: str) -> Optional[list]:
    """The other modules whose every reference to `name` (module i's Triton function) is a call
    inside one of their own Triton kernels, as do module i's own references; None where any
    reference is anything else (a launch `name[grid](...)`, a value handed on, a string, a test)."""
    from .importgates import is_test

    word = name.encode()
    callers = []
    for j, result in enumerate(run.results):
        if not result.relpath.endswith(".py") or word not in (run.text_of(j) or b""):
            continue
        tree = run.tree(j)
        if tree is None:
            return None
        spans = _kernel_spans(tree)
        parents = astcache.parents(tree)
        found = False
        for node in astcache.walk(tree):
            if isinstance(node, ast.Constant) and node.value == name:
                return None
            if isinstance(node, ast.Attribute) and node.attr == name:
                return None
            if isinstance(node, ast.Name) and node.id == name:
                call = parents.get(id(node))
                if not (isinstance(call, ast.Call) and call.func is node and isinstance(node.ctx, ast.Load)
                        and any(a <= node.lineno <= b for a, b in spans)):
                    return None
                found = True
        if found and j != i:
            if is_test(result.relpath):
                return None
            callers.append(j)
    return callers or None


def _fold_device_functions(out: list, folds: list, run, open_kernel) -> list:
    """A kept place on the decorator of a Triton device function (called, never launched) whose
    every reference in the run is a call inside a Triton kernel, the other modules' kernels having
    their own open NPU910: folded into the first such finding, which names it (BE#1's
    `mxfp8_scale_offset`, which another model file's kernels call; the kernels of its own file
    launched only behind a gate false there)."""
    if run is None:
        return out
    for i, line in folds:
        tree = run.tree(i)
        unit = triton_decorated(tree).get(line) if tree is not None else None
        if unit is None:
            continue
        callers = _device_callers(run, i, unit.name)
        if not callers:
            continue
        target = next(((j, k) for j in callers for k, f in enumerate(out[j].findings) if open_kernel(f)), None)
        if target is None:
            continue
        j, k = target
        mine = [f for f in out[i].findings if open_kernel(f) and f.line == line]
        if len(mine) != 1:
            continue
        note = (f"also the Triton device function `{unit.name}` of {out[i].relpath} (its NPU910 at line {line}), "
                "which this file calls only inside its own kernels: it runs only where these kernels run")
        findings = list(out[j].findings)
        findings[k] = dataclasses.replace(findings[k], message=f"{findings[k].message} ({note})")
        out[j] = dataclasses.replace(out[j], findings=findings)
        out[i] = dataclasses.replace(out[i], findings=[f for f in out[i].findings if f is not mine[0]])
    return out
