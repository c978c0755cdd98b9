"""Code reached only through a private module-level dict: the walk of callgates21.py (and so
testcallers27.py's opt-in reading) follows such a reference to the functions that look the entry up
or fill the dict (issue #16, policy P1; round-31 audit FC#26, "private dict lookup").

vLLM's `model_executor/layers/quantization/online/lm_head.py`:

    def _quantize_nvfp4(weight): ... torch.float8_e4m3fn ...          # NPU913
    class _LMHeadNvfp4Method(OnlineLinearBase):
        def process_weights_after_loading(self, layer): ... _quantize_nvfp4(layer.weight) ...
    _LM_HEAD_METHODS = {"fp8": Fp8PtpcOnlineLinearMethod, "nvfp4": _LMHeadNvfp4Method}
    def _quantize_copy(lm_head, quantization):
        ... quant_method=_LM_HEAD_METHODS[quantization]() ...
    _SOURCES: WeakKeyDictionary = WeakKeyDictionary()
    def quantized_lm_head_copy(lm_head, quantization):
        head = _quantize_copy(lm_head, quantization)
        _SOURCES[head] = (lm_head, quantization)
    def refresh_quantized_lm_heads(model):
        for module in model.modules():
            if module not in _SOURCES:
                continue
            fresh = _quantize_copy(*_SOURCES[module])

and `quantized_lm_head_copy` is called only under `if speculative_config.draft_lm_head_quantization is
not None:`. A class named only as a value of the private registry runs where a lookup of it runs
(`_quantize_copy`), and a call whose arguments are an entry of a private dict (`*_SOURCES[module]`)
runs only after a function storing that entry ran (`quantized_lm_head_copy`): the walk follows those
functions' references instead of stopping at the module-level dict or the refreshing function (one
step each). With optconfig29's reading the NVFP4 copy is "reached on an NPU host only when
`speculative_config.draft_lm_head_quantization is not None` is chosen".

Kept (the nearest true cases): a registry used any other way (iterated, `.values()`, handed on,
looked up at module level), a dict filled at module level or through a method (`.update`,
`.setdefault`), a call fed otherwise, and a name another module binds or imports (its own dict
aside: a module that binds the name itself at module level).
"""

from __future__ import annotations

import ast
from typing import Optional

_READS = frozenset(("get", "keys", "items", "values", "pop", "clear", "__contains__"))


def _module_binding(tree: ast.Module, name: str) -> list:
    """The module-level statements binding `name` (a plain or annotated assignment)."""
    out = []
    for stmt in tree.body:
        targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target] if isinstance(stmt, ast.AnnAssign) \
            and stmt.value is not None else []
        if any(isinstance(t, ast.Name) and t.id == name for t in targets):
            out.append(stmt)
    return out


def _uses(tree: ast.Module, parents: dict, name: str, binding: ast.AST) -> list:
    from . import astcache

    return [n for n in astcache.nodes(tree, ast.Name) if n.id == name and parents.get(id(n)) is not binding]


def _others(gates, j: int, name: str) -> bool:
    """Another module names `name` without binding its own at module level."""
    for k, tree in gates.naming(name, but=j):
        if tree is None or not _module_binding(tree, name):
            return True
    return False


def _registry_lookups(gates, j: int, tree: ast.Module, parents: dict, node: ast.AST, unit_of) -> Optional[list]:
    """The units holding every lookup `_R[key]` of the private module-level registry whose value `node` is."""
    owner = parents.get(id(node))
    if not isinstance(owner, ast.Dict) or not any(v is node for v in owner.values):
        return None
    binding = parents.get(id(owner))
    if not (isinstance(binding, (ast.Assign, ast.AnnAssign)) and isinstance(parents.get(id(binding)), ast.Module)):
        return None
    target = binding.targets[0] if isinstance(binding, ast.Assign) and len(binding.targets) == 1 else \
        binding.target if isinstance(binding, ast.AnnAssign) else None
    if not (isinstance(target, ast.Name) and target.id.startswith("_")) or len(_module_binding(tree, target.id)) != 1:
        return None
    units = []
    for use in _uses(tree, parents, target.id, binding):
        around = parents.get(id(use))
        if isinstance(around, ast.Subscript) and around.value is use and isinstance(around.ctx, ast.Load):
            unit = unit_of(tree, around.lineno)
            if unit is None:
                return None  # (a lookup at module level: runs on import)
            units.append(unit)
        elif isinstance(around, ast.Compare) and any(c is use for c in around.comparators) \
                and all(isinstance(op, (ast.In, ast.NotIn)) for op in around.ops):
            continue
        elif isinstance(around, ast.Attribute) and around.attr == "keys":
            continue
        else:
            return None
    if not units or _others(gates, j, target.id):
        return None
    return units


def _fed_by_entry(gates, j: int, tree: ast.Module, parents: dict, node: ast.AST, unit_of) -> Optional[list]:
    """The units storing every entry of the private module-level dict `_D` of a call `node(*_D[k])`."""
    call = parents.get(id(node))
    if not (isinstance(call, ast.Call) and call.func is node):
        return None
    name = next((a.value.value.id for a in call.args if isinstance(a, ast.Starred)
                 and isinstance(a.value, ast.Subscript) and isinstance(a.value.value, ast.Name)
                 and a.value.value.id.startswith("_")), None)
    if name is None:
        return None
    bindings = _module_binding(tree, name)
    if len(bindings) != 1:
        return None
    units = []
    for use in _uses(tree, parents, name, bindings[0]):
        around = parents.get(id(use))
        if isinstance(around, ast.Subscript) and around.value is use:
            if isinstance(around.ctx, ast.Store):
                unit = unit_of(tree, around.lineno)
                if unit is None:
                    return None  # (an entry stored at module level: there on import)
                units.append(unit)
            continue  # (a read, `del _D[k]`)
        if isinstance(around, ast.Compare) and any(c is use for c in around.comparators) \
                and all(isinstance(op, (ast.In, ast.NotIn)) for op in around.ops):
            continue
        if isinstance(around, ast.Attribute) and around.attr in _READS:
            continue
        if isinstance(use.ctx, ast.Load) and isinstance(around, (ast.For, ast.comprehension)) and around.iter is use:
            continue
        return None  # (handed on, `.update`, `.setdefault`, rebound: filled some other way)
    if not units or _others(gates, j, name):
        return None
    return units


def dict_units(gates, j: int, tree: ast.Module, parents: dict, node: ast.AST, unit_of) -> Optional[list]:
    """The units (of module j) whose references the walk follows instead of the one holding `node`: the
    lookups of a private registry `node` is a value of, or the functions filling the private dict whose
    entry feeds the call of `node`; None for any other reference."""
    owner = parents.get(id(node))
    if isinstance(owner, ast.Dict):
        return _registry_lookups(gates, j, tree, parents, node, unit_of)
    if isinstance(owner, ast.Call):
        return _fed_by_entry(gates, j, tree, parents, node, unit_of)
    return None
