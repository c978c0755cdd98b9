"""A capability raise read as the MIGRATED code evaluates it on an NPU host (issue #16, round 19).

capgates.py makes the rest of a block a branch an NPU host does not take after `if
<capability check true there>: raise ...` (`if not is_sm_at_least_100(): raise
NotImplementedError`). Its conditions are read as the original code answers them, so a compound
one that asks for CUDA first, `if torch.cuda.is_available() and not is_sm_at_least_100(): raise
NotImplementedError("needs SM100")` (audit AZ#24, a Triton FP8 wrapper), stays unknown: the
original's `torch.cuda.is_available()` is False on an NPU host. But the migration REWRITES that
call to the shim's `npu_compat.is_available()`, which is true there, while the capability check
(`is_sm_at_least_100()`, `get_device_capability() < (10, 0)`) is still false-for-NVIDIA there: the
migrated function always raises, and the code after the `if` in its block (FP8 buffers, kernel
launches) never runs on an NPU host.

`review(findings, text, relpath)`: for each `if` whose last statement raises an exception, whose
test calls a capability check (capgates.capability_test) and a `*.cuda.is_available()` that the
migration rewrote on that line (a fixable finding of the file there), the test is evaluated with
each rewritten availability call as True (testscopes' truth for the rest). When it is true, the
report-only findings in the statements after the `if` in the same block are lowered to info with
the reason ("in a branch an NPU host does not take: after a capability raise ..."), as
testscopes.review_untaken_branches does for the plain form. A finding that also stands for other
places keeps its severity unless each of them is in such a block or in a branch testscopes finds
untaken (the plain form's, for one FP8 finding spanning two functions).

Left reported: an availability check the migration KEPT as written (NPU110: it guards CUDA-only
code, so it is False there and the raise never fires); a raise that fires only on capable hardware
(`is_available() and is_sm_at_least_100()`: false there); code before the raise; a bare
re-raise. Nothing here changes what is rewritten.
"""

from __future__ import annotations

import ast
import copy
from dataclasses import replace

from . import astcache
from .capgates import capability_test
from .findings import Finding

_dotted = astcache.dotted


def _availability_calls(test: ast.AST) -> list[ast.Call]:
    return [n for n in ast.walk(test) if isinstance(n, ast.Call)
            and (_dotted(n.func) or "").endswith("cuda.is_available")]


class _Rewritten(ast.NodeTransformer):
    """The availability calls the migration rewrote (on `lines`) as True: the shim's
    `is_available()` on an NPU host."""

    def __init__(self, lines: frozenset):
        self.lines = lines

    def visit_Call(self, node: ast.Call):
        if node.lineno in self.lines and (_dotted(node.func) or "").endswith("cuda.is_available"):
            return ast.copy_location(ast.Constant(True), node)
        return self.generic_visit(node)


def _segment(lines: list, node: ast.AST) -> str:
    from .testscopes import source_segment

    return source_segment(lines, node)


def _first(stmt: ast.stmt) -> int:
    return min([stmt.lineno, *(d.lineno for d in getattr(stmt, "decorator_list", ()))])


def raise_blocks(tree: ast.Module, lines: list, rewritten: frozenset) -> list[tuple[int, int, str]]:
    """(first line, last line, reason) of the statements after a capability raise that fires on
    an NPU host once the availability calls on `rewritten` lines are the shim's."""
    from .testscopes import npu_truth as _truth

    out = []
    for node in ast.walk(tree):
        for field in ("body", "orelse", "finalbody"):
            block = getattr(node, field, None)
            if not isinstance(block, list):
                continue
            for index, stmt in enumerate(block[:-1]):
                if not (isinstance(stmt, ast.If) and stmt.body and isinstance(stmt.body[-1], ast.Raise)
                        and stmt.body[-1].exc is not None):
                    continue
                calls = _availability_calls(stmt.test)
                if not calls or not any(c.lineno in rewritten for c in calls) or not capability_test(stmt.test):
                    continue
                if _truth(stmt.test) is True:
                    continue  # (the plain form: capgates/reach already make the block)
                if _truth(_Rewritten(rewritten).visit(copy.deepcopy(stmt.test))) is not True:
                    continue
                rest = block[index + 1:]
                out.append((_first(rest[0]), rest[-1].end_lineno or rest[-1].lineno,
                            f"after a capability raise: `{_segment(lines, stmt.test)}` is true on an NPU host "
                            f"once migrated (the rewritten `cuda.is_available()` is the shim's, true there), "
                            f"so it raises there"))
                break
    return out


def review(findings: list[Finding], text: str, relpath: str = "") -> list[Finding]:
    """The findings, with the report-only ones after such a raise lowered to info."""
    if "is_available" not in text or "raise" not in text:
        return findings
    open_ = [f for f in findings if not f.fixable and f.cell is None and f.severity != "info"]
    rewritten = frozenset(f.line for f in findings if f.fixable and f.cell is None
                          and f.source.endswith("is_available"))
    if not open_ or not rewritten:
        return findings
    tree = astcache.parse(text.encode("utf-8"))
    if tree is None:
        return findings
    lines = text.splitlines(keepends=True)
    try:
        blocks = raise_blocks(tree, lines, rewritten)
    except RecursionError:
        return findings
    if not blocks:
        return findings
    others = None
    out = []
    for finding in findings:
        if finding in open_:
            block = next((b for b in blocks if b[0] <= finding.line <= b[1]), None)
            if block is None:
                block = next((b for b in blocks for place in finding.also if b[0] <= place[0] <= b[1]), None)
            if block is not None:
                places = [finding.line, *(place[0] for place in finding.also)]
                outside = [p for p in places if not any(b[0] <= p <= b[1] for b in blocks)]
                if outside and others is None:
                    from .testscopes import untaken_branches

                    others = untaken_branches(text, relpath, set(places))
                if not outside or all(any(b[0] <= p <= b[1] for b in others) for p in outside):
                    finding = replace(finding, severity="info",
                                      message=f"{finding.message} (in a branch an NPU host does not take: {block[2]})")
        out.append(finding)
    return out
