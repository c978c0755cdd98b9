"""A platform-dispatched op's CUDA method is dead in testcallers27's walk too (issue #16, round 34
IC#28). Per reference, from testcallers27's `TestGates.dead`.

callees22.py reads a reference inside `forward_cuda` / `forward_xpu` ... of a class that also has
`forward_oot` / `forward_native` / `forward_npu` (dispatchops.cuda_dispatch_reason) as code an NPU
host never runs; testcallers27's walk (policy P2: library code only tests reach) did not, so a
helper reached from such a method and from a test kept its error:

    @triton.jit
    def _norm_kernel(x_ptr, ...): ...            # NPU910: info now, "only from tests" naming them

    def norm_triton(x, out):
        _norm_kernel[grid](x, out, ...)          # called from forward_cuda and from a test

    class FusedNorm(CustomOp):
        def forward_native(self, x): ...         # pure torch
        def forward_cuda(self, x): norm_triton(x, out)
        def forward_xpu(self, x): return self.forward_cuda(x)
        def forward_oot(self, x): return self.forward_native(x)   # the out-of-tree platform's path

    # tests/test_norm.py (skipped on CPU only: an NPU host runs it)
    def test_kernel(): norm_triton(x, out)

vLLM's `custom_op.py` sends an out-of-tree platform to `forward_oot`, so the library reaches the
kernel only from the test: the place becomes info naming it (P2). Kept: a class whose
`forward_oot` / `forward_native` names a CUDA method (dispatchops.npu_method's reading: an NPU host
runs it after all), a class with only `forward_cuda`, a library caller outside such a method.
"""

from __future__ import annotations

import ast
from typing import Optional

_HOLDERS = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)


def dispatch_dead(tree: ast.Module, parents: dict, node: ast.AST) -> Optional[str]:
    """The reason `node` lies in a platform-dispatched op's CUDA method an NPU host never runs
    (dispatchops.cuda_dispatch_reason over the classes and functions holding it), or None."""
    chain, current = [], parents.get(id(node))
    while current is not None and not isinstance(current, ast.Module):
        if isinstance(current, _HOLDERS):
            chain.insert(0, current)
        current = parents.get(id(current))
    if len(chain) < 2:
        return None
    from .dispatchops import cuda_dispatch_reason

    return cuda_dispatch_reason(tree, chain)


def named_outside_python(run, name: str) -> bool:
    """A configuration, notebook or script of the run names the unit (`_target_:
    pkg.tune2.other_autotune`, configkeys26's reading, as callersonly reads it): a caller the walk
    does not see, so testcallers27 keeps the unit reached (tests/test_h116.py's nearest true case,
    whose other caller, a `forward_cuda`, this module now reads as dead)."""
    from .configkeys26 import names_helper

    memo = getattr(run, "named_outside34", None)
    if memo is None:
        memo = {}
        setattr(run, "named_outside34", memo)
    if name not in memo:
        word = name.encode()
        texts = (run.text_of(j) or b"" for j, result in enumerate(run.results) if not result.relpath.endswith(".py"))
        memo[name] = any(word in text and names_helper(text, name) for text in texts)
    return memo[name]
