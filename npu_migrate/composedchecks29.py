"""A support check a base class composes from the candidate classes its subclass names (issue #16,
round 28: CC#12). For supportgates27.py's `_first_check`, when the base's check, read alone, has no
verdict.

vLLM's DeepGEMM experts are built by name inside a fallback wrapper, which a selector asks first:

    # experts/fallback.py
    class FallbackExperts(FusedMoEExpertsModular):
        @classmethod
        def _supports_current_device(cls) -> bool:
            experts_cls, fallback_cls = cls.get_clses()
            return experts_cls._supports_current_device() and fallback_cls._supports_current_device()

    # experts/triton_deep_gemm_moe.py
    class TritonOrDeepGemmExperts(FallbackExperts):
        def __init__(self, moe_config, quant_config):
            super().__init__(experts=DeepGemmExperts(moe_config, quant_config), ...)
        @staticmethod
        def get_clses():
            return (DeepGemmExperts, TritonExperts)

    # experts/deep_gemm_moe.py
    class DeepGemmExperts(FusedMoEExpertsModular):
        @staticmethod
        def _supports_current_device() -> bool:
            return is_deep_gemm_supported()       # False off CUDA: its FP8 code never runs there

supportgates27 read the wrapper's inherited check as a plain function: its first statement binds
names from a call, so there was no verdict, the wrapper counted as built on every host, and so did
the DeepGEMM class it builds by name. Here the inherited check is read for the class asked: its
statements (the docstring aside) are exactly `a, b, ... = cls.<getter>()` and `return <and of
x.<the same check>() calls on those names>`; the getter, found on the asked class (or the first of
its bases the run defines once that has it), is a static or class method whose one statement
returns a tuple or list of class names, each defined once in the run. An `and` one of whose calls
names a class whose own check (supportgates27's `_first_check`) answers no on an NPU host answers
no: the words name the composed check, the candidate and its reason.

A class built by name only inside such a rejected class (the wrapper's `__init__`, its getter's
tuple) counts as asked only there (`inside_rejected`, for supportgates27's `_only_asked`): so
`DeepGemmExperts`, whose own check answers no, is never built there either.

Kept (no verdict): an `or` (either candidate suffices), a getter computing its list, a name the
run defines twice or not at all, any other statement in the check, every candidate's check true or
unknown there.
"""

from __future__ import annotations

import ast
from typing import Optional

_DEFS = (ast.FunctionDef, ast.AsyncFunctionDef)


def _getter_classes(gates, j: int, cls: ast.ClassDef, getter: str) -> Optional[list]:
    """The class names `getter` (a static/class method of `cls` or of its first base the run
    defines once that has one) returns as a tuple or list display of names; None otherwise."""
    from . import astcache
    from .capability import docless_body

    current, k = cls, j
    for _step in range(6):
        method = next((s for s in current.body if isinstance(s, _DEFS) and s.name == getter), None)
        if method is not None:
            decorators = {astcache.dotted(d) for d in method.decorator_list}
            body = docless_body(method)
            if not decorators & {"staticmethod", "classmethod"} or len(body) != 1 \
                    or not isinstance(body[0], ast.Return) or not isinstance(body[0].value, (ast.Tuple, ast.List)):
                return None
            names = [e.id for e in body[0].value.elts if isinstance(e, ast.Name)]
            return names if len(names) == len(body[0].value.elts) and names else None
        homes = [gates._homes().get((astcache.dotted(b) or "").rpartition(".")[2], []) for b in current.bases]
        found = next((h for h in homes if len(h) == 1), None)
        if found is None:
            return None
        k, current = found[0]
    return None


def composed_answer(gates, j: int, cls: ast.ClassDef, base: ast.ClassDef) -> Optional[str]:
    """Why the support check `cls` inherits from `base` answers no on an NPU host, read with the
    candidate classes `cls`'s getter names (this module's docstring); None: no verdict."""
    from . import astcache
    from .capability import docless_body, gate_methods

    busy = gates.__dict__.setdefault("composing", set())  # (candidates naming each other: no verdict)
    if (j, cls.name) in busy:
        return None
    busy.add((j, cls.name))
    try:
        return _composed(gates, j, cls, base, astcache, docless_body, gate_methods)
    finally:
        busy.discard((j, cls.name))


def _composed(gates, j, cls, base, astcache, docless_body, gate_methods) -> Optional[str]:
    for method in base.body:
        if not (isinstance(method, _DEFS) and method.name in gate_methods()):
            continue
        if "classmethod" not in {astcache.dotted(d) for d in method.decorator_list}:
            continue
        body = docless_body(method)
        if len(body) != 2 or not isinstance(body[0], ast.Assign) or not isinstance(body[1], ast.Return):
            continue
        bind, ret = body
        target, call = bind.targets[0], bind.value
        if not (len(bind.targets) == 1 and isinstance(target, (ast.Tuple, ast.List))
                and all(isinstance(e, ast.Name) for e in target.elts)
                and isinstance(call, ast.Call) and not call.args and not call.keywords
                and isinstance(call.func, ast.Attribute) and isinstance(call.func.value, ast.Name)
                and call.func.value.id == "cls"):
            continue
        classes = _getter_classes(gates, j, cls, call.func.attr)
        if classes is None or len(classes) != len(target.elts):
            continue
        bound = {e.id: name for e, name in zip(target.elts, classes)}
        value = ret.value
        parts = value.values if isinstance(value, ast.BoolOp) and isinstance(value.op, ast.And) else [value]
        for part in parts:
            if not (isinstance(part, ast.Call) and not part.args and not part.keywords
                    and isinstance(part.func, ast.Attribute) and part.func.attr == method.name
                    and isinstance(part.func.value, ast.Name) and part.func.value.id in bound):
                continue
            name = bound[part.func.value.id]
            homes = gates._homes().get(name, [])
            if len(homes) != 1 or homes[0][1] is cls:
                continue
            told = gates._first_check(*homes[0])
            if told is not None:
                return (f"whose `{cls.name}.{method.name}()` (inherited from `{base.name}`, asking "
                        f"`{cls.name}.{call.func.attr}()`'s candidates) answers no on an NPU host: its "
                        f"candidate `{name}`, {told}")
    return None


def inside_rejected(gates, j: int, tree: ast.Module, parents: dict, node: ast.AST, cls: ast.ClassDef) -> bool:
    """`node` (module j) lies in another module-level class that supportgates27 finds never
    selected or built on an NPU host (`gates.rejected`): the wrapper's `DeepGemmExperts(...)` in its
    `__init__`, its `get_clses()` naming the class. Its code runs nowhere there, so the reference
    asks nothing of `cls` (CC#12)."""
    current = parents.get(id(node))
    while current is not None and not isinstance(current, ast.Module):
        if isinstance(current, ast.ClassDef) and isinstance(parents.get(id(current)), ast.Module):
            return current is not cls and gates.rejected(j, tree, current) is not None
        current = parents.get(id(current))
    return False
