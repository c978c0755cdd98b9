"""An item of a support check's `(flag, reason)` answer, read on an NPU host (issue #16, round 33
HC#2; helper h194). For flagcalls19's evaluation (Run.value), so testgates26's skip decorators and
every other reader of that evaluation see it.

vLLM's `tests/kernels/attention/test_flashmla.py`:

    @pytest.mark.skipif(not is_flashmla_dense_supported()[0], reason=...)
    @pytest.mark.parametrize("torch_dtype", [torch.bfloat16, torch.float16, torch.float8_e4m3fn])
    def test_flash_mla(...): ...

    # vllm/v1/attention/ops/flashmla.py
    def is_flashmla_dense_supported() -> tuple[bool, str | None]:
        is_available, maybe_reason = _is_flashmla_available()
        if not is_available:
            return False, maybe_reason
        if not current_platform.is_device_capability_family(90):
            return False, "FlashMLA Dense is only supported on Hopper devices."
        return True, None

flagcalls19 reads a function's value from its `return`s on an NPU host; a tuple was no value it
knew, so `f()[0]` stayed unknown and the test's FP8 parameter an error. Here `f()[k]` (k a
non-negative int literal, f a module-level function the evaluation resolves, across modules) is
the value of a copy of f whose every `return (e0, e1, ...)` returns its item k (any other `return`
an unknown value), and whose `a, b = g()` binds `a = g()[0]`, `b = g()[1]` (read the same way):
False above, since `is_device_capability_family(90)` is false there whatever `_is_flashmla_available`
answers. A return whose item k may be true there (`return True, None` reached), a tuple held in a
name, a starred target: unknown, as before.
"""

from __future__ import annotations

import ast
import copy
from typing import Optional

_FUNCTIONS = (ast.FunctionDef, ast.AsyncFunctionDef)
_UNKNOWN = "__npu_migrate_unknown_item__"  # (a call of a name no module binds: unknown to the evaluation)


class _Items(ast.NodeTransformer):
    """A function's copy returning item k of its tuples (module doc)."""

    def __init__(self, k: int):
        self.k = k

    def visit_FunctionDef(self, node):
        return node if getattr(self, "_inside", False) else self._top(node)

    visit_AsyncFunctionDef = visit_FunctionDef

    def _top(self, node):
        self._inside = True
        body = []
        for stmt in node.body:
            done = self.visit(stmt)
            body.extend(done if isinstance(done, list) else [done])
        node.body = body
        self._inside = False
        return node

    def visit_ClassDef(self, node):
        return node

    def visit_Lambda(self, node):
        return node

    def visit_Return(self, node):
        value = node.value
        if isinstance(value, ast.Tuple) and len(value.elts) > self.k \
                and not any(isinstance(e, ast.Starred) for e in value.elts):
            node.value = value.elts[self.k]
        else:
            node.value = ast.Call(func=ast.Name(id=_UNKNOWN, ctx=ast.Load()), args=[], keywords=[])
        return node

    def visit_Assign(self, node):
        target = node.targets[0] if len(node.targets) == 1 else None
        if isinstance(target, ast.Tuple) and isinstance(node.value, ast.Call) and target.elts \
                and all(isinstance(e, ast.Name) for e in target.elts):
            return [ast.Assign(targets=[ast.Name(id=e.id, ctx=ast.Store())],
                               value=ast.Subscript(value=node.value, slice=ast.Constant(index), ctx=ast.Load()),
                               lineno=node.lineno) for index, e in enumerate(target.elts)]
        return node


def item_of(node: ast.AST) -> Optional[tuple]:
    """(the call, k) of `call(...)[k]`, else None."""
    if isinstance(node, ast.Subscript) and isinstance(node.value, ast.Call) and isinstance(node.slice, ast.Constant) \
            and type(node.slice.value) is int and 0 <= node.slice.value < 8:
        return node.value, node.slice.value
    return None


def item_function(function: ast.AST, k: int) -> Optional[ast.AST]:
    """The copy of `function` that returns item k of its tuples, named `name[k]` (memo key), cached
    on the function node."""
    if not isinstance(function, ast.FunctionDef):
        return None
    cache = function.__dict__.setdefault("_npu_migrate_items", {})
    if k not in cache:
        clone = _Items(k).visit(copy.deepcopy(function))
        clone.name = f"{function.name}[{k}]"
        ast.fix_missing_locations(clone)
        cache[k] = clone
    return cache[k]


def item_value(run, i: int, node: ast.AST, env: dict, local: frozenset, depth: int, used: list, unknown):
    """The value of `f()[k]` in module i on an NPU host (module doc), or `unknown`."""
    item = item_of(node)
    if item is None:
        return unknown
    call, k = item
    func, target = call.func, None
    if isinstance(func, ast.Name) and func.id not in env and func.id not in local:
        target = run.lookup(i, func.id)
    elif isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name) \
            and func.value.id not in env and func.value.id not in local:
        owner = run.lookup(i, func.value.id)
        target = run.lookup(owner[1], func.attr) if owner is not None and owner[0] == "module" else None
    if target is None or target[0] != "def":
        return unknown
    clone = item_function(target[1], k)
    if clone is None:
        return unknown
    value = run.call(target[2], clone, depth + 1)
    if value is not unknown and target[2] != i:
        used.append((target[2], f"{target[1].name}()[{k}]"))
    return value
