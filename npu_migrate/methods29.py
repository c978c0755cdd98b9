"""A reference inside an instance method that only code an NPU host does not run calls (issue #16,
round 28: CC#20). For callgates21.py's walk over a unit's references, from `Gates._sites`.

callgates21 followed a reference lying in a method of a module-level class to the class's own
references: a class built on every host kept the unit reached, whatever method held it. vLLM's
step5 SWA decode kernels are imported and launched only by one method of an attention impl that
every non-DSA layer builds:

    # models/step5/nvidia/sparse_attention.py
    class Step5SplitKVFlashAttentionImpl(FlashAttentionImpl):
        def forward_with_headwise_gate(self, layer, q, k, v, kv_cache, md, out, gate):
            ...
            from .ops.swa_decode import swa_decode_gated      # the kernels' only launcher
            swa_decode_gated(...)

    # models/step5/nvidia/model.py
    def step5_swa_attention_with_output(q, k, v, out, layer_name, gate):
        ...
        layer.impl.forward_with_headwise_gate(layer, q, k, v, kv_cache, md, out, gate)
    class Step5Attention(nn.Module):
        def __init__(self, ...):
            self.fuse_swa_gate = (... and current_platform.is_device_capability(103) and ...)
        def forward(self, ...):
            ...
            elif self.fuse_swa_gate:
                step5_swa_attention_with_output(...)           # False off SM103

Here such a reference is followed through the method instead, where the method can only run
when called by its name: a plain instance method (no decorator), whose name has an underscore
and is no dunder nor a name frameworks call by themselves (`forward_*` hooks of a dispatching
base are spelled out in [`_HOOKS`], `setUp`, `test_*`, ...), named nowhere in the run as a string
outside tests, never assigned (`obj.M = ...`). Every `.M` attribute of the run, whatever its
receiver, is then a call (or a handing-on) of it: each must lie in code an NPU host does not run
(the walk's `dead`), in the method itself, or in a unit (a function, or another such method)
whose own references all do, a few steps deep. Where that holds, the reference counts as never
run, naming the method's callers.

Kept: a method a decorator wraps, a dunder or hook name, a name without an underscore (`apply`,
`run`: too common to read by name), a string naming it, an assignment to `.M`, one `.M` an NPU
host may run, a file naming it that does not parse.
"""

from __future__ import annotations

import ast
from typing import Optional

_DEFS = (ast.FunctionDef, ast.AsyncFunctionDef)
# (methods a framework calls by itself: torch modules and autograd functions, unittest, vLLM's
# CustomOp dispatch and layer hooks, pickling)
_HOOKS = frozenset({
    "forward", "backward", "setup_context", "jvp", "vjp", "extra_repr", "reset_parameters",
    "forward_native", "forward_cuda", "forward_hip", "forward_xpu", "forward_cpu", "forward_tpu",
    "forward_hpu", "forward_oot", "forward_npu", "forward_impl", "process_weights_after_loading",
    "create_weights", "load_weights", "get_state_dict", "state_dict", "load_state_dict",
    "set_up", "tear_down", "setup_method", "teardown_method", "setup_class", "teardown_class",
})
_DEPTH = 3


def plain_method(cls: ast.ClassDef, node: ast.AST, parents: dict) -> Optional[ast.AST]:
    """The method of `cls` (a direct child) holding `node` in its body, where it is one this module
    reads by name (no decorator, an underscore in its name, no dunder, no hook); else None."""
    child, current = node, parents.get(id(node))
    while current is not None and current is not cls:
        child, current = current, parents.get(id(current))
    if current is None or not isinstance(child, _DEFS) or child not in cls.body:
        return None
    name = child.name
    if child.decorator_list or name.startswith("__") or "_" not in name.strip("_") or name in _HOOKS \
            or name.startswith(("test", "setUp", "tearDown")):
        return None
    if not child.args.args or child.args.args[0].arg != "self":
        return None
    if node.lineno < child.body[0].lineno:
        return None  # (a default, an annotation: run when the class is defined)
    return child


def method_sites(gates, j: int, tree: ast.Module, parents: dict, node: ast.AST, cls: ast.ClassDef,
                 depth: int, seen: frozenset, helpers: tuple) -> Optional[list]:
    """[(module, "path:line (why)")] of every call of the run of the method of `cls` holding `node`
    (module j), each in code an NPU host does not run (this module's docstring); None: no verdict
    (the caller follows the class's references instead). `helpers`: callgates21's (unit_of,
    inside), handed in (this module is imported by callgates21: no import circle)."""
    method = plain_method(cls, node, parents)
    if method is None or depth > _DEPTH:
        return None
    key = ("method", j, cls.name, method.name)
    if key in seen:
        return []
    seen = seen | {key}
    return _calls(gates, j, method, depth, seen, helpers, cls.name)


def _calls(gates, home: int, method, depth: int, seen: frozenset, helpers: tuple, cls: str = "") -> Optional[list]:
    from .capchains30 import other_members  # (`self.A.M`, A built from other classes only: capchains30.py)

    unit_of, inside = helpers
    name = method.name
    found: list = []
    for k, tree in gates.naming(name):
        if tree is None:
            return None
        parents, refs, strings = gates._index(k, tree)
        relpath = gates.run.results[k].relpath
        side = gates.test_file(relpath)
        if name in strings and not side:
            from .instances29 import dead_strings

            if not dead_strings(gates, k, tree, parents, name):
                return None
        for ref in refs.get(name, ()):
            if isinstance(ref, ast.Name):
                continue  # (a local or a module-level name of that spelling: not the method)
            if not isinstance(ref.ctx, ast.Load):
                if side:
                    continue
                return None  # (`obj.M = ...`: a replacement the run installs)
            if k == home and inside(ref, method, parents):
                continue  # (its own recursion)
            if cls and other_members(gates, k, tree, parents, ref, cls):
                continue  # (another class's method of that name)
            why = gates.dead(k, tree, parents, ref)
            if why is not None:
                found.append((k, f"{relpath}:{ref.lineno} ({why})"))
                continue
            spared = gates.live_reference(k, relpath, ref, parents, side)
            if spared is not None:
                found.append(spared)
                continue
            outer = unit_of(tree, ref.lineno)
            if outer is None:
                return None
            inner = None
            if isinstance(outer, ast.ClassDef):
                inner = method_sites(gates, k, tree, parents, ref, outer, depth + 1, seen, helpers)
            if inner is None:
                inner = gates.sites(k, outer, depth + 1, seen)
            if inner is None:
                return None
            found.extend(inner)
    return found or None
