"""A call of the project's own CUDA-built `_C` op that fails first in a benchmark or a test (issue
#16, round 32 GA#14's rest, round 33's `_C` rows). Asked by firstfail33._fails, so its answer
becomes firstfail33's AFTER_FAILING_CALL scope: the report-only places after that call, in the rest
of its block, are a named "not run" scope naming the call and the op, never dropped.

vLLM's `benchmarks/kernels/benchmark_cutlass_moe_nvfp4.py`:

    def bench_run(...):
        a = torch.randn((m, k), device=device, dtype=dtype) / 10
        _, a_fp8_scale = ops.scaled_fp8_quant(a)                 # `from vllm import _custom_ops as ops`
        w1_fp8q = torch.empty(..., dtype=torch.float8_e4m3fn)    # NPU913: never reached there

`_custom_ops.scaled_fp8_quant` calls `torch.ops._C.dynamic_scaled_fp8_quant` (or the per-token or
static op) on every path. Those ops exist only in the `_C` extension the project builds from its
CUDA sources (reported where they are built, NPU912). An Ascend install has no vLLM `_C`: the
plugin registers its own compiled ops in `torch.ops._C_ascend`
(vllm-project/vllm-ascend@001c5b567b085d3edfdbdfd916397f41f7e13f39 csrc/torch_binding.cpp,
`TORCH_LIBRARY_EXPAND(CONCAT(_C, _ascend), ops)`), and its placeholders for vLLM's fusion ops are
not callable objects put in that namespace as well (vllm-ascend@02e290d2dc4f564792af3c82aa721d784c1f9d4c
vllm_ascend/ops/__init__.py, `register_dummy_fusion_op`). So on an NPU host the call raises and the
lines after it are never the failing point.

A call that fails so: in a test or benchmark file (firstfail33's script paths) of a run that reports
a CUDA source (NPU912), `alias.f(...)` where `alias` is bound at module level to the project's
`_custom_ops` wrapper module (optests.wrapper_aliases) and the wrapper's top-level `f` calls a
compiled op (optests.compiled_op: `torch.ops._C.x`, `torch.ops._moe_C.y`) on every path through its
body (both arms of each `if`, before any `return`), or a direct `torch.ops._C.x(...)` call. Kept: a
library module's call (the op's port may come with its caller's), a wrapper function that has a
path without the op (`if current_platform.is_cuda(): torch.ops._C.x(...) else: native(...)`), a
wrapper module that registers an NPU (`PrivateUse1`) kernel, a function rules/vllm_ascend.toml says
the plugin rebinds, a namespace naming the NPU (`_C_ascend`, `_npu_C`), a run without NPU912.
"""

from __future__ import annotations

import ast
import re
from typing import Optional

from . import astcache

_SCRIPT_PATH = re.compile(r"(^|/)(tests?|benchmarks?|bench)/|(^|/)(test_|bench(mark)?_)[^/]*\.py$")
_CONDITIONAL = (ast.BoolOp, ast.IfExp, ast.Lambda, ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp,
                ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)
_EXITS = (ast.Return, ast.Raise, ast.Yield, ast.YieldFrom, ast.Break, ast.Continue)
_FUNCTIONS = (ast.FunctionDef, ast.AsyncFunctionDef)
FACT = ("an NPU host has no such op: vllm-ascend registers its own ops in `torch.ops._C_ascend`, "
        "and the op's CUDA source is reported where it is built (NPU912)")


def _op(call: ast.Call) -> Optional[str]:
    """`_C.x` for a call of `torch.ops._C.x` (a compiled namespace not naming the NPU), else None."""
    from .optests import compiled_op

    target = compiled_op(astcache.dotted(call.func, strict=True) or "")
    if target and not re.search(r"(?i)npu|ascend", target.split(".")[0]):
        return target
    return None


def _calls(stmt: ast.AST):
    """The calls a simple statement makes whenever it runs (not in a condition, a short circuit, a
    lambda, a comprehension or a nested definition)."""
    stack = [stmt]
    while stack:
        node = stack.pop()
        if node is not stmt and isinstance(node, _CONDITIONAL):
            continue
        if isinstance(node, ast.Call):
            yield node
        stack.extend(ast.iter_child_nodes(node))


def _exits(stmt: ast.AST) -> bool:
    return any(isinstance(n, _EXITS) for n in ast.walk(stmt))


def always_calls_op(body: list) -> Optional[str]:
    """The compiled op a block calls on every path through it (module doc), or None."""
    for stmt in body:
        if isinstance(stmt, ast.If):
            first = always_calls_op(stmt.body)
            if first and stmt.orelse and always_calls_op(stmt.orelse):
                return first
            if _exits(stmt):
                return None
            continue
        if isinstance(stmt, (ast.With, ast.AsyncWith)):
            for item in stmt.items:
                found = next(filter(None, map(_op, _calls(item.context_expr))), None)
                if found:
                    return found
            found = always_calls_op(stmt.body)
            if found or _exits(stmt):
                return found
            continue
        if isinstance(stmt, (ast.For, ast.AsyncFor, ast.While, ast.Try, *_FUNCTIONS, ast.ClassDef)) \
                or type(stmt).__name__ in ("Match", "TryStar"):
            if _exits(stmt):
                return None
            continue
        found = next(filter(None, map(_op, _calls(stmt))), None)
        if found:
            return found
        if isinstance(stmt, _EXITS) or _exits(stmt):
            return None
    return None


class CompiledOpCalls:
    """Which calls of a run's tests and benchmarks reach a CUDA-built compiled op first (module doc)."""

    def __init__(self, results: list, modules, rebound: frozenset) -> None:
        self.results, self.modules, self.rebound = results, modules, rebound
        self.reported = any(f.code == "NPU912" for r in results for f in r.findings)
        self.wrappers: dict = {}
        self.aliases: dict = {}

    def _wrapped(self, dotted: str) -> dict:
        """{function: op} of the run's wrapper module `dotted` whose body always calls the op."""
        if dotted not in self.wrappers:
            j = self.modules.by_name.get(dotted)
            tree = self.modules.tree(j) if j is not None else None
            out = {}
            if tree is not None and not any(isinstance(n, ast.Attribute) and n.attr == "PrivateUse1"
                                            or isinstance(n, ast.Constant) and n.value == "PrivateUse1"
                                            for n in ast.walk(tree)):
                names = [n.name for n in tree.body if isinstance(n, (*_FUNCTIONS, ast.ClassDef))]
                for node in tree.body:
                    if isinstance(node, _FUNCTIONS) and names.count(node.name) == 1 and node.name not in self.rebound:
                        op = always_calls_op(node.body)
                        if op:
                            out[node.name] = op
            self.wrappers[dotted] = out
        return self.wrappers[dotted]

    def why(self, call: ast.Call, i: int, tree: ast.Module) -> Optional[str]:
        """Why the call fails first on an NPU host (module doc), or None."""
        if not self.reported or not _SCRIPT_PATH.search(self.results[i].relpath):
            return None
        op = _op(call)
        if op:
            return f"`{astcache.dotted(call.func)}` is an op of the project's CUDA-built `{op.split('.')[0]}` extension: {FACT}"
        func = call.func
        if not (isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name)):
            return None
        if i not in self.aliases:
            from .optests import wrapper_aliases

            self.aliases[i] = wrapper_aliases(tree)
        dotted = self.aliases[i].get(func.value.id)
        op = self._wrapped(dotted).get(func.attr) if dotted else None
        if op is None:
            return None
        return (f"`{func.value.id}.{func.attr}` ({dotted}) calls an op of the project's CUDA-built extension on "
                f"every path (`torch.ops.{op}` first): {FACT}")
