"""Which inline assembly keeps a gated Triton module's error (issue #16, round 19, audit BA#36).

guards15.py lowers to info the NPU910 of Triton kernels that all sit in the body of a module-level
`if has_triton(): ... else: <stubs>` (an NPU host without Triton takes the `else`; with
Triton-Ascend the kernels run there: verify them), but kept the error for any file holding
`tl.inline_asm_elementwise`: PTX assembly runs on no Triton-Ascend. The text test was file-wide,
so a module whose assembly sits in ANOTHER block, one an NPU host never runs (torchao-style
`if _triton_kernels_available:` where that flag needs SM100 and CUDA 12.8 or ROCm MI350:
testscopes/reach already name the block a branch an NPU host does not take), kept the error on
kernels that hold no assembly at all.

`keeps_error(tree, text, guard)`: an `inline_asm_elementwise` call keeps the error when it lies in
the body of the finding's own guard, or anywhere an NPU host may run it: outside every block
testscopes.untaken_branches finds untaken (a `@triton.jit` helper at module level, called from the
gated kernels, still counts). Only assembly inside an untaken block of another statement stops
counting. A string mention of `inline_asm` with no call keeps the old reading (the error stays).
"""

from __future__ import annotations

import ast

from . import astcache


def _asm_lines(tree: ast.Module) -> list[int]:
    return [n.lineno for n in astcache.walk(tree) if isinstance(n, ast.Call)
            and (astcache.dotted(n.func) or "").endswith("inline_asm_elementwise")]


def keeps_error(tree: ast.Module, text: str, guard: ast.If) -> bool:
    """Whether the module's inline assembly may run where the kernels under `guard` run."""
    lines = _asm_lines(tree)
    if not lines:
        return True  # (`inline_asm` in the text, no call read: as before)
    start, end = guard.body[0].lineno, guard.body[-1].end_lineno or guard.body[-1].lineno
    outside = [line for line in lines if not start <= line <= end]
    if len(outside) < len(lines):
        return True  # (assembly in the kernels' own block)
    from .testscopes import untaken_branches

    try:
        blocks = untaken_branches(text, "", set(outside))
    except RecursionError:
        return True
    return not all(any(b[0] <= line <= b[1] and not (b[0] <= start and end <= b[1]) for b in blocks)
                   for line in outside)


asm_lines = _asm_lines  # public name (guards15.py names the first in its message)
