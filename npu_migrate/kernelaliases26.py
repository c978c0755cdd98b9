"""A module-level alias of Triton's CUDA extras used only by the file's reported kernels: folded into
the kernel finding (issue #16, round 26 BV#33).

    libdevice = tl.extra.cuda.libdevice      # NPU990: CUDA-only reference left unchanged

    @triton.jit                              # NPU910: the kernels to port
    def _accumulate(x):
        return libdevice.exp(x)

The leftover sweep already folds `tl.extra.cuda` written inside a kernel into the kernel's NPU910
finding (sweep.visit_FunctionDef: porting the kernel to triton-ascend includes replacing libdevice).
Hoisted to a module-level name, the same reference became a warning of its own, which the round-26
reviewer read as redundant with the kernels' finding. It moves into the NPU910 finding of the first
kernel that reads it, whose message names it and keeps the one fact the line adds: the alias is read
when the module is imported, so where Triton has no `tl.extra.cuda` the module fails to import.

Only the exact shape: a module-level assignment of one name from an attribute chain through
`extra.cuda`, every read of that name inside a Triton kernel (a function decorated by
`triton.jit` / `triton.autotune` / `triton.heuristics`, or through a local alias of triton), and
an NPU910 finding at one of those kernels. The nearest true cases stay warnings: the alias read by
plain Python code as well (it runs on the host, not in a ported kernel), or a file whose kernels
carry no NPU910 finding (nothing to fold into).

redundant.review calls `fold_into_kernels`.
"""

from __future__ import annotations

import ast

from . import astcache

from .findings import Finding
from .folding import Fold, ours, places_of

LEFTOVER = "NPU990"
KERNEL = "NPU910"
WHERE = ("as a module-level alias the kernels use, read when the module is imported: where Triton has no "
         "`tl.extra.cuda` the import fails")


def _dotted(node: ast.AST) -> str:
    """`a.b.c` of an attribute chain on a name, "" for a chain on anything else."""
    return astcache.dotted(node, strict=True) or ""


def _kernel_lines(tree: ast.Module, triton_names: set[str]) -> dict[int, tuple[int, int]]:
    """{decorator line: (first, last line)} of the file's Triton kernels."""
    out = {}
    for node in ast.walk(tree):
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        for decorator in node.decorator_list:
            target = decorator.func if isinstance(decorator, ast.Call) else decorator
            name = _dotted(target)
            if name.split(".")[0] in triton_names:
                out[decorator.lineno] = (node.lineno, node.end_lineno or node.lineno)
                break
    return out


def _triton_names(tree: ast.Module) -> set[str]:
    names = {"triton"}
    for node in tree.body:
        if isinstance(node, ast.Import):
            names.update(a.asname or a.name for a in node.names if a.name == "triton")
        elif isinstance(node, ast.ImportFrom):
            names.update(a.asname or a.name for a in node.names if a.name == "triton")
    return names


def fold_into_kernels(findings: list[Finding], tree: ast.Module) -> list[Finding]:
    leftovers = [f for f in findings if f.code == LEFTOVER and ours(f) and ".extra.cuda" in (f.source or "")]
    kernels_found = [f for f in findings if f.code == KERNEL and ours(f)]
    if not leftovers or not kernels_found:
        return findings
    aliases: dict[int, str] = {}  # line of a module-level alias -> its name
    for stmt in tree.body:
        if (isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name)
                and ".extra.cuda" in f".{_dotted(stmt.value)}"):
            aliases[stmt.lineno] = stmt.targets[0].id
    if not aliases:
        return findings
    kernels = _kernel_lines(tree, _triton_names(tree))
    fold = Fold(findings)
    for leftover in leftovers:
        name = aliases.get(leftover.line)
        if name is None or leftover.also:
            continue
        reads = [n.lineno for n in ast.walk(tree)
                 if isinstance(n, ast.Name) and n.id == name and isinstance(n.ctx, ast.Load)]
        holders = []
        for line in reads:
            holder = next((d for d, (first, last) in kernels.items() if first <= line <= last), None)
            if holder is None:
                holders = []
                break
            holders.append(holder)
        if not holders:
            continue  # read outside a kernel too (or never): a warning of its own
        first = min(holders)
        anchor = next((f for f in kernels_found if any(p[0] == first for p in places_of(f))), None)
        if anchor is not None and fold.movable(leftover, anchor):
            fold.move(leftover, places_of(leftover), anchor)
    return fold.result(name_them=WHERE)
