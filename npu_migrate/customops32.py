"""A function registered as a custom op is reached through `torch.ops.<namespace>.<op>` (issue #16,
round-32 audit GB#22). Read by callgates21.py's walk of a unit's references (and so by every pass
that reuses it: callees22, supportgates27, testcallers27), where a reference lies in module-level
code.

vLLM registers the launcher of the compressed-tensors Triton scaled-mm kernel as a custom op:

    # kernels/linear/scaled_mm/triton.py
    def _int8_scaled_mm_func(qx, weight, x_scale, weight_scale, output_dtype, bias=None):
        return triton_scaled_mm(qx, weight, ...)          # -> the `@triton.jit` kernel (NPU910)

    direct_register_custom_op("int8_scaled_mm_func", _int8_scaled_mm_func, fake_impl=...)

    class TritonInt8ScaledMMLinearKernel(CutlassInt8ScaledMMLinearKernel):
        @classmethod
        def is_supported(cls, compute_capability=None):
            if current_platform.is_cuda_alike() or current_platform.is_xpu():
                return True, None
            return False, "requires ROCm, CUDA or XPU."
        def apply_weights(self, layer, x, bias=None):
            ...
            return torch.ops.vllm.int8_scaled_mm_func(x_q, w_q, x_s, w_s, x.dtype, bias)

customops26.py lowers the registered function's own findings this way; a kernel two calls
further (the function's callee) was read through callgates21's walk, where the registration is
module-level code, which runs on every host: the walk took the function as reached there and kept
the kernel an error, though the registration calls nothing: the op runs
only where some code calls `torch.ops.<namespace>.int8_scaled_mm_func`. Here a reference that is
the function argument (`op_func`: the second positional argument, or the keyword) of a
module-level statement `direct_register_custom_op(...)` (any callee whose name ends in
`register_custom_op`) whose op name is a string literal (the first positional argument, or
`op_name=`) is followed to the op's callers instead: every attribute read `<...>.ops.<ns>.<op>` (or
`<...>.<op>.default`) in the run, each read as the walk reads a reference (a gate around it, the
unit holding it, a few callers deep).

Kept (no verdict, the walk's answer stands): a string holding the op's name in a library file (a
compilation pass's op list, `"vllm::int8_scaled_mm_func"`, a `getattr` by name), a read of the op
outside `torch.ops` (an alias of the namespace), a registration whose op name is not a literal,
and the fake implementation (`fake_impl=`), which the walk reads as before.
"""

from __future__ import annotations

import ast
import re
from typing import Optional

_DEFS = (ast.FunctionDef, ast.AsyncFunctionDef)


def _called(call: ast.Call) -> str:
    func = call.func
    return func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else ""


def registered_op(tree: ast.Module, parents: dict, node: ast.AST) -> Optional[str]:
    """The op name where `node` is the function a module-level `direct_register_custom_op(...)`
    statement registers; None otherwise."""
    call = parents.get(id(node))
    if not (isinstance(call, ast.Call) and _called(call).endswith("register_custom_op")):
        return None
    stmt = parents.get(id(call))
    if not (isinstance(stmt, ast.Expr) and stmt in tree.body):
        return None
    words = {k.arg: k.value for k in call.keywords if k.arg}
    func = call.args[1] if len(call.args) > 1 else words.get("op_func")
    op = call.args[0] if call.args else words.get("op_name")
    if func is not node or not (isinstance(op, ast.Constant) and isinstance(op.value, str) and op.value.isidentifier()):
        return None
    return op.value


def _registering(parents: dict, constant: ast.Constant) -> bool:
    """The op-name literal of a registration call (`direct_register_custom_op("op", ...)`)."""
    parent = parents.get(id(constant))
    if isinstance(parent, ast.keyword):
        parent = parents.get(id(parent))
    return isinstance(parent, ast.Call) and _called(parent).endswith("register_custom_op")


def _through_torch_ops(node: ast.Attribute) -> bool:
    """`torch.ops.<ns>.<op>`: the op read through torch's op registry (customops26's reading)."""
    from . import astcache

    parts = (astcache.dotted(node.value) or "").split(".")
    return len(parts) == 3 and parts[:2] == ["torch", "ops"]


def op_sites(gates, j: int, tree: ast.Module, parents: dict, node: ast.AST, depth: int, seen: frozenset,
             helpers: tuple) -> tuple:
    """(registration, sites): `registration` True where `node` (module j) is the function argument
    of a module-level custom-op registration; then `sites` is [(module, "path:line (why)")] of
    every read of the op in the run, each in code an NPU host does not run (or a test's, as the
    walk spares it), or None where one may run there. (False, None) for any other reference.
    `helpers`: callgates21's (unit_of, inside) (this module is imported by callgates21)."""
    op = registered_op(tree, parents, node)
    if op is None:
        return False, None
    unit_of, _inside = helpers
    word = re.compile(rb"\b" + re.escape(op.encode()) + rb"\b")
    found: list = []
    for k, other in gates.naming(op):
        if other is None:
            return True, None
        relpath = gates.run.results[k].relpath
        side = gates.test_file(relpath)
        data = gates.run.text_of(k) or b""
        if not word.search(data):
            continue
        their_parents, refs, _strings = gates._index(k, other)
        for constant in ast.walk(other):
            if isinstance(constant, ast.Constant) and isinstance(constant.value, str) and not side \
                    and re.search(r"\b" + re.escape(op) + r"\b", constant.value) \
                    and not _registering(their_parents, constant):
                return True, None  # (named in a string: looked up some other way)
        for ref in refs.get(op, ()):
            if isinstance(ref, ast.Name):
                continue  # (the function's own name where it is also the op's: the walk reads it)
            if not isinstance(ref.ctx, ast.Load) or not _through_torch_ops(ref):
                return True, None
            why = gates.dead(k, other, their_parents, ref)
            if why is not None:
                found.append((k, f"{relpath}:{ref.lineno} (`torch.ops` read of the custom op `{op}`: {why})"))
                continue
            spared = gates.live_reference(k, relpath, ref, their_parents, side)
            if spared is not None:
                found.append(spared)
                continue
            outer = unit_of(other, ref.lineno)
            if outer is None:
                return True, None
            inner = None
            if isinstance(outer, ast.ClassDef):  # (through the method's own calls first: methods29.py)
                from .methods29 import method_sites
                inner = method_sites(gates, k, other, their_parents, ref, outer, depth, seen, helpers)
            if inner is None:
                inner = gates.sites(k, outer, depth + 1, seen)
            if inner is None:
                return True, None
            found.extend(inner)
    return True, (found or None)
