"""A Triton kernel a test defines and never launches (issue #16, round-29 audit DA#24; round-33 HA#13). Per file, from
run.migrate_file (after buildprobes29.py).

vLLM's `tests/model_executor/test_triton_dispatcher.py` checks that a kernel override registry
patches a real `@triton.jit` function:

    def test_real_triton_kernel_override_end_to_end() -> None:
        if not triton.__class__.__module__.startswith("triton"):
            pytest.skip("Triton is not installed")

        @triton.jit
        def _add_one_kernel(x_ptr, out_ptr, BLOCK: tl.constexpr):     # NPU910
            ...

        module = types.ModuleType("vllm.tests.real_jit_kernel_home")
        module._add_one_kernel = _add_one_kernel
        sys.modules[module.__name__] = module
        register_kernels({"vllm.tests.real_jit_kernel_home._add_one_kernel": cpu_impl})
        assert module._add_one_kernel.arg_names == ("x_ptr", "out_ptr", "BLOCK")

Decorating a function with `@triton.jit` compiles nothing and needs no GPU (Triton-Ascend
installs `triton` on an NPU host); only a launch (`kernel[grid](...)`) runs the kernel. The test
never launches it: nothing here fails there, nothing is to port. Such an NPU910 place (a merged
finding is split where its places differ, envskips29.lower_places) on the decorator of a function defined inside a function
of a test file, where the enclosing function only reads the kernel's attributes (`k.arg_names`, not called) or stores
it into an attribute (`module.k = k`), and nothing in the file calls or indexes the kernel or such
an attribute (`module.k[grid](...)`, `module.k(...)`), nor hands either to a call, becomes info
with the reason `NEVER_LAUNCHED` (a moot.NO_WORK phrase: a named scope).

A module-level kernel of a test file whose body does nothing (`pass`, `...`, a docstring: vLLM's
`tests/model_executor/test_jit_warmup_triton_launcher.py`, round-33 audit HA#13) and that the file
never indexes (`k[grid]`) nor calls (`k(...)`) is lowered the same way, even when the file hands it
to a helper (`triton_warmup_inputs(k, ...)` reads its argument names): a kernel with an empty body
holds no CUDA code to port, and Triton-Ascend compiles it as it is.

Kept (the nearest true cases): a module-level test kernel with a body (`tl.store(...)`), or an
empty one the file launches (`k[(1,)](x)`); a kernel the test launches (`_add_one_kernel[(1,)](x, out, BLOCK=4)`)
or hands to a helper that may (`run(_add_one_kernel)`), a module-level kernel (other modules may
import and launch it), and a kernel in library code.
"""

from __future__ import annotations

import ast
from . import astcache
from .envskips29 import lower_places

NEVER_LAUNCHED = "a Triton kernel a test defines and never launches: decorating it runs nothing"

_DEFS = (ast.FunctionDef, ast.AsyncFunctionDef)


def _jit(decorator: ast.AST) -> bool:
    target = decorator.func if isinstance(decorator, ast.Call) else decorator
    return astcache.dotted(target).rsplit(".", 1)[-1] in ("jit", "autotune", "heuristics")


def _never_launched(outer: ast.AST, kernel: ast.AST, tree: ast.Module) -> bool:
    parents = {id(child): node for node in ast.walk(outer) for child in ast.iter_child_nodes(node)}
    stored: set[str] = set()
    for node in ast.walk(outer):
        if not (isinstance(node, ast.Name) and node.id == kernel.name and isinstance(node.ctx, ast.Load)):
            continue
        parent = parents.get(id(node))
        if isinstance(parent, ast.Attribute) and not isinstance(parents.get(id(parent)), ast.Call):
            continue  # (`k.arg_names`: metadata)
        if isinstance(parent, ast.Assign) and parent.value is node and all(
                isinstance(t, ast.Attribute) for t in parent.targets):
            stored.update(t.attr for t in parent.targets)  # (`module.k = k`)
            continue
        return False
    all_parents = {id(child): node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and node.attr in stored and isinstance(node.ctx, ast.Load):
            parent = all_parents.get(id(node))
            if isinstance(parent, (ast.Call, ast.Subscript, ast.keyword, ast.Starred)) or (
                    isinstance(parent, ast.Attribute) and isinstance(all_parents.get(id(parent)), ast.Call)):
                return False  # (called, indexed for a launch, handed on, or a method of it called)
    return True


def _empty(kernel: ast.AST) -> bool:
    """True when `kernel`'s body does nothing: only `pass`, `...` or a docstring."""
    return all(isinstance(stmt, ast.Pass) or (isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Constant))
               for stmt in kernel.body)


def _launched_in(name: str, tree: ast.Module) -> bool:
    """True when the file indexes (`k[grid]`) or calls (`k(...)`) the name `name` anywhere."""
    for node in ast.walk(tree):
        target = node.value if isinstance(node, ast.Subscript) else node.func if isinstance(node, ast.Call) else None
        if isinstance(target, ast.Name) and target.id == name:
            return True
    return False


def review(findings: list, text: str, relpath: str) -> list:
    """`findings`, with each NPU910 finding on never-launched test-local kernels lowered to info."""
    from .importgates import is_test

    hits = [f for f in findings if f.code == "NPU910" and not f.fixable and f.severity != "info"]
    if not hits or not is_test(relpath):
        return findings
    tree = astcache.parse(text.encode("utf-8", "surrogatepass"))
    if tree is None:
        return findings
    decorated: dict[int, bool] = {}  # a decorator's line -> a never-launched nested kernel
    for outer in astcache.walk(tree):
        if not isinstance(outer, _DEFS):
            continue
        for inner in ast.walk(outer):
            if inner is outer or not isinstance(inner, _DEFS):
                continue
            for decorator in inner.decorator_list:
                if _jit(decorator):
                    decorated[decorator.lineno] = decorated.get(decorator.lineno, True) and \
                        _never_launched(outer, inner, tree)
    for kernel in tree.body:  # (round-33 audit HA#13: a module-level kernel with an empty body)
        if isinstance(kernel, _DEFS) and _empty(kernel) and not _launched_in(kernel.name, tree):
            for decorator in kernel.decorator_list:
                if _jit(decorator):
                    decorated[decorator.lineno] = decorated.get(decorator.lineno, True)
    if not any(decorated.values()):
        return findings
    out = []
    for finding in findings:
        # (a merged finding is split: its launched kernels stay one finding at their severity)
        pieces = lower_places(finding, lambda line: NEVER_LAUNCHED if decorated.get(line) else None) \
            if any(finding is hit for hit in hits) else None
        out.extend([finding] if pieces is None else pieces)
    return sorted(out) if len(out) != len(findings) or out != findings else findings
