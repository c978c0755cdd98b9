"""Backend selectors ("oracles") that raise on an NPU host because every candidate they may pick
answers no there (issue #16, round 28: CA#39, CC#22; for supportgates27.py).

vLLM's quantized-MoE methods choose their experts in `__init__`, through an oracle of another
module that asks each candidate kernel class in turn and raises when none fits:

    # fused_moe/oracle/w4a8.py
    def backend_to_kernel_cls(backend):
        if backend == W4A8MoeBackend.CUTLASS:
            from ..experts.cutlass_moe import CutlassExpertsW4A8Fp8
            return [CutlassExpertsW4A8Fp8]
        elif backend == W4A8MoeBackend.HUMMING:
            from ..experts.fused_humming_moe import HummingGroupedExperts, HummingIndexedExperts
            return [HummingGroupedExperts, HummingIndexedExperts]
        raise ValueError(...)

    def select_w4a8_moe_backend(config):
        for backend in backends:
            for kernel_cls in backend_to_kernel_cls(backend):
                supported, reason = kernel_cls.is_supported_config(kernel_cls, config, ...)
                if supported:
                    return backend, kernel_cls
        raise NotImplementedError("No W4A8 MoE backend supports the deployment configuration")

    # compressed_tensors_moe_w4a8_fp8.py (another module)
    class CompressedTensorsW4A8Fp8MoEMethod(FusedMoEMethodBase):
        def __init__(self, ...):
            ...
            self.w4a8_backend, self.experts_cls = select_w4a8_moe_backend(config=self.moe)
        def get_fused_moe_quant_config(self, layer):
            return make_w4a8_moe_quant_config(...)     # FP8 two modules away (CA#39)

`raises(support, k, tree, function)` answers, for a function of module k, the candidate classes
whose rejection makes it raise on an NPU host, or None:

* its last statement is a `raise` (it never falls off the end), it is no generator;
* each of its `return`s (its own, nested functions aside) lies under `if <name>:` inside a `for
  <cls> in <lister>(...)` loop, where `<lister>` is a module-level function of module k and the
  loop's body binds `<name>` first from `<cls>.<check>(...)` (supportgates27's checks:
  `is_supported_config`, `is_supported`, ...); or returns a call of a function nested in it that
  answers the same way (nvfp4's `_return_or_raise` for an explicit backend);
* every `return` of each lister is a list or tuple display of class names, each of which
  supportgates27 finds rejected on an NPU host (its own check, or one it inherits unchanged from
  a base the run defines once: the Humming experts' `HummingExpertsBase._supports_current_device`
  requires `is_cuda()`), every reference to it a selector's question.

supportgates27.raising_init then reads a class whose `__init__` calls such a function (a
statement of its own, before any `return`; its value bound or not) as one of which no instance
exists on an NPU host: the user who picks that quantization there gets the project's own "no
backend supports the deployment configuration" error first. What stays: an oracle with a `return`
of anything else (a default backend, a value the loop did not ask about), a lister that returns a
computed list or a name the run defines twice, a candidate whose check is true or undecided there
(`is_cuda_alike() or is_xpu()` is false on an NPU host; `is_cuda_alike() or is_npu()` is not), a
candidate also built by name.
"""

from __future__ import annotations

import ast
from typing import Optional

_DEFS = (ast.FunctionDef, ast.AsyncFunctionDef)
_MAX_DEPTH = 2


def _own_nodes(function: ast.AST):
    """The nodes of a function's body, nested functions, classes and lambdas not entered."""
    stack = list(reversed(function.body))
    while stack:
        node = stack.pop()
        yield node
        if isinstance(node, (*_DEFS, ast.ClassDef, ast.Lambda)):
            continue
        stack.extend(reversed(list(ast.iter_child_nodes(node))))


def _first_bound(stmt: ast.Assign) -> Optional[str]:
    target = stmt.targets[0] if len(stmt.targets) == 1 else None
    if isinstance(target, ast.Tuple) and target.elts:
        target = target.elts[0]
    return target.id if isinstance(target, ast.Name) else None


def _asked_loop(ret: ast.Return, function: ast.AST, parents: dict, checks, module_defs: dict):
    """The lister function of the `for` loop whose check guards `ret`, or None."""
    node, tests = ret, []
    while node is not function:
        up = parents.get(id(node))
        if up is None or isinstance(up, (*_DEFS, ast.ClassDef, ast.Lambda)) and up is not function:
            return None
        if isinstance(up, ast.If) and node in up.body and isinstance(up.test, ast.Name):
            tests.append(up.test.id)
        if isinstance(up, ast.For) and node in up.body:
            iterated = up.iter
            if not (isinstance(up.target, ast.Name) and isinstance(iterated, ast.Call)
                    and isinstance(iterated.func, ast.Name) and iterated.func.id in module_defs):
                return None
            receiver = up.target.id
            for stmt in up.body:
                if stmt is node:
                    return None  # (the return comes before the check is asked)
                call = stmt.value if isinstance(stmt, ast.Assign) else None
                if isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute) \
                        and isinstance(call.func.value, ast.Name) and call.func.value.id == receiver \
                        and call.func.attr in checks:
                    name = _first_bound(stmt)
                    return module_defs[iterated.func.id] if name is not None and name in tests else None
            return None
        node = up
    return None


def _listed(support, lister: ast.AST) -> Optional[list]:
    """The class names every `return` of the lister displays, each rejected there; else None."""
    names: list = []
    for node in _own_nodes(lister):
        if isinstance(node, (ast.Yield, ast.YieldFrom)):
            return None
        if not isinstance(node, ast.Return):
            continue
        value = node.value
        if not isinstance(value, (ast.List, ast.Tuple)) or not value.elts:
            return None
        for element in value.elts:
            if not isinstance(element, ast.Name) or support.candidate_rejected(element.id) is None:
                return None
            names.append(element.id)
    return names or None


def raises(support, k: int, tree: Optional[ast.Module], function: ast.AST, depth: int = 0) -> Optional[list]:
    """The candidate class names whose rejection makes `function` (module k) raise on an NPU host,
    or None (this module's docstring). `support`: supportgates27's reading (its checks and its
    `candidate_rejected`)."""
    from . import astcache

    if tree is None or depth > _MAX_DEPTH or not function.body or not isinstance(function.body[-1], ast.Raise):
        return None
    parents = astcache.parents(tree)
    nested = {s.name: s for s in _own_nodes(function) if isinstance(s, _DEFS)}
    module_defs = {s.name: s for s in tree.body if isinstance(s, _DEFS)}
    names: list = []
    for node in _own_nodes(function):
        if isinstance(node, (ast.Yield, ast.YieldFrom, ast.Await)):
            return None
        if not isinstance(node, ast.Return):
            continue
        value = node.value
        if isinstance(value, ast.Call) and isinstance(value.func, ast.Name) and value.func.id in nested:
            inner = raises(support, k, tree, nested[value.func.id], depth + 1)
            if inner is None:
                return None
            names.extend(inner)
            continue
        lister = _asked_loop(node, function, parents, support.checks, module_defs)
        listed = _listed(support, lister) if lister is not None else None
        if listed is None:
            return None
        names.extend(listed)
    return list(dict.fromkeys(names)) or None
