"""Triton kernels whose launchers another module calls only under a gate false on an NPU host
(issue #16, round-26 wave, audit BF#9). Whole run, from runplan.whole_run_passes, right after
callgates21.py.

    # model/nvidia/ihc_kernels.py
    from pkg.platforms import current_platform
    from pkg.triton_utils import HAS_TRITON, tl, triton   # placeholders where Triton is missing

    def ihc_supported(x):
        return HAS_TRITON and current_platform.is_cuda() and x.dtype == torch.bfloat16

    @triton.jit                                            # NPU910 (also at the next kernel)
    def _stage1(x_ptr, ...): ...

    def ihc_pre(x, w):
        _stage1[(n,)](x, w, ...)

    # model/nvidia/hc.py (another module)
    class PreLayer:
        def forward(self, x):
            if ihc_supported(x):
                return ihc_pre(x, self.w)                  # the only call of `ihc_pre`
            return torch_reference(x, self.w)              # what an NPU host runs

callgates21.py lowers a report-only finding in a function's body whose every reference lies in
code an NPU host does not run; an NPU910 on a module-level `@triton.jit` kernel is anchored on the
decorator (a line at module level, no body), so that pass never asked about it. Here: an open
NPU910 error (not fixable, not info, not moot) each place of which is a decorator line of a
module-level function decorated by Triton (`@triton.jit`, `@triton.autotune(...)`,
`@triton.heuristics(...)`: a decorator whose dotted name starts with `triton`) becomes a named
scope ("in a branch an NPU host does not take") when callgates21.Gates.sites finds every
reference of the run to that kernel in code an NPU host does not run, a few steps deep (the
kernel's launcher in its own module, the launcher's callers in another module under `if
ihc_supported(x):`, the predicate read by flagcalls19's interpreter: `current_platform.is_cuda()`
False there), at least one of them in another module. The reason names the kernel and each gate.

Kept: a kernel launched by code an NPU host may run (a launcher called unconditionally, a
predicate testing only `x.is_cuda`, which the shim answers for the NPU too, or `HAS_TRITON`, which
Triton-Ascend may make true); a kernel named in a string, handed on as a value, or read at import;
a place that is no Triton decorator line (the merged finding keeps it, flagcalls19.lower). A model
package whose `__init__` loads the `nvidia/` implementation on every platform but ROCm (round 25
BT#1) does not decide anything here: only the gates around the launches do.
"""

from __future__ import annotations

import ast
from typing import Optional

from . import astcache


def _triton_decorated(stmt: ast.AST) -> bool:
    """A module-level function one of whose decorators is Triton's (`triton.jit`, `triton.autotune(...)`)."""
    if not isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)):
        return False
    for deco in stmt.decorator_list:
        node = deco.func if isinstance(deco, ast.Call) else deco
        while isinstance(node, ast.Attribute):
            node = node.value
        if isinstance(node, ast.Name) and node.id == "triton":
            return True
    return False


def kernel_at(tree: ast.Module, line: int) -> Optional[ast.AST]:
    """The module-level Triton kernel whose decorator list holds `line`, or None."""
    for stmt in tree.body:
        if _triton_decorated(stmt) and stmt.decorator_list:
            first = min(d.lineno for d in stmt.decorator_list)
            if first <= line < stmt.body[0].lineno and line <= max(d.end_lineno or d.lineno for d in stmt.decorator_list):
                return stmt
    return None


def review(results: list, paths: dict) -> list:
    """The results, with the NPU910 kernel places of this module's docstring lowered to named scopes."""
    import dataclasses

    from .callgates21 import Gates
    from .flagcalls19 import Run, lower
    from .flags16 import BRANCH
    from .importgates import is_test
    from .modpaths import RunTexts
    from .moot import is_moot

    def open_finding(f) -> bool:
        return f.code == "NPU910" and not f.fixable and f.cell is None and not is_moot(f) and f.severity != "info"

    text_of = RunTexts(results, paths)
    state = None
    out = list(results)
    for i, result in enumerate(results):
        if not result.relpath.endswith(".py") or not any(open_finding(f) for f in result.findings):
            continue
        data = text_of(i)
        if not data or b"triton" not in data:
            continue
        tree = astcache.parse(data)
        if tree is None:
            continue
        if state is None:
            run = Run(results, text_of)
            state = (run, Gates(run))
        run, gates = state
        tree = run.trees.setdefault(i, tree)  # (the tree the run's lookups hold: nodes compared by identity)

        def reason_of(line: int, tree=tree, i=i) -> Optional[str]:
            kernel = kernel_at(tree, line)
            if kernel is None:
                return None
            found = gates.sites(i, kernel)
            if not found or not any(j != i for j, _s in found):
                return None
            found = sorted(found, key=lambda item: is_test(item[1].split(":", 1)[0]))  # (the library's gates first)
            shown = "; ".join(s for _j, s in found[:2]) + (f"; and {len(found) - 2} more" if len(found) > 2 else "")
            return f"{BRANCH}: Triton kernel `{kernel.name}` is launched only from code an NPU host does not run: {shown}"

        findings, changed = [], False
        for finding in result.findings:
            pieces = lower(finding, reason_of) if open_finding(finding) else None
            changed = changed or pieces is not None
            findings.extend([finding] if pieces is None else pieces)
        if changed:
            out[i] = dataclasses.replace(result, findings=sorted(findings))
    return out
