"""A platform-dispatched op's `forward_native` that names `forward_cuda` only under a platform test
an NPU host answers False (issue #16, round 34 IC#10). For dispatchops.npu_method.

dispatchops reads a class whose NPU method (`forward_native`, `forward_oot`, ...) names a CUDA
method as one an NPU host runs after all (vLLM's `HpcRopeNorm.forward_native` returns
`self.forward_cuda(...)`). vLLM's `SparseAttnIndexer.forward_native` names it too, but only per
platform, and raises for the rest:

    def forward_native(self, hidden_states, q, k, weights):
        if current_platform.is_cuda() or current_platform.is_xpu():
            return self.forward_cuda(hidden_states, q, k, weights)    # not on an NPU host
        elif current_platform.is_rocm():
            return self.forward_hip(hidden_states, q, k, weights)
        else:
            raise NotImplementedError("only CUDA, ROCm, XPU and CPU")

An out-of-tree platform's `forward_oot` (default `forward_native`) never gets to `forward_cuda`,
so the code only `forward_cuda` reaches (`torch.ops.vllm.sparse_attn_indexer`, its kernels) is
not run there. Here a reference to a CUDA method counts only where it may run on an NPU host: one
in the body of an `if`/`elif` whose test is a call of one of rules/scopes.toml [platform]
`false_methods` on the project's platform object ([platform] `layer`: `current_platform.is_cuda()`),
or an `or` of such calls, is not. Kept (the class still names its CUDA method): a reference
outside such a branch, under a test of anything else (`if x.is_cuda:`, `if self.use_fast:`), an
`and` (`is_cuda() and flag` is False there too, but read narrowly), a `torch.` receiver.
"""

from __future__ import annotations

import ast
import functools
import re

from . import astcache, catalogue


@functools.lru_cache(maxsize=None)
def _platform() -> tuple:
    """rules/scopes.toml [platform]: (the methods false on an NPU host, the platform-object pattern)."""
    table = catalogue.read_table("scopes.toml").get("platform", {})
    return frozenset(table.get("false_methods", ())), re.compile(table.get("layer", r"(?!)"))


def _false_test(test: ast.AST) -> bool:
    """`current_platform.is_cuda()`, or an `or` of such calls: False on an NPU host."""
    if isinstance(test, ast.BoolOp) and isinstance(test.op, ast.Or):
        return all(_false_test(part) for part in test.values)
    methods, layer = _platform()
    if not (isinstance(test, ast.Call) and not test.args and not test.keywords
            and isinstance(test.func, ast.Attribute) and test.func.attr in methods):
        return False
    receiver = astcache.dotted(test.func.value) or ""
    return bool(receiver) and not receiver.startswith("torch") and bool(layer.search(receiver))


def names_cuda_method(method: ast.AST, cuda: frozenset) -> bool:
    """Whether `method` (an NPU method or `forward`) names one of the CUDA methods where an NPU host
    may run it: outside the body of an `if` whose test is a platform test false there."""
    parents = {id(child): node for node in ast.walk(method) for child in ast.iter_child_nodes(node)}
    for node in ast.walk(method):
        name = getattr(node, "attr", None) if isinstance(node, ast.Attribute) else \
            getattr(node, "id", None) if isinstance(node, ast.Name) else \
            getattr(node, "value", None) if isinstance(node, ast.Constant) else None
        if not isinstance(name, str) or name not in cuda:
            continue
        if not _untaken(node, parents, method):
            return True
    return False


def _untaken(node: ast.AST, parents: dict, top: ast.AST) -> bool:
    child, current = node, parents.get(id(node))
    while current is not None and current is not top:
        if isinstance(current, ast.If) and any(child is stmt for stmt in current.body) and _false_test(current.test):
            return True
        child, current = current, parents.get(id(current))
    return False
