"""Code in the CUDA method of a platform-dispatched op: an NPU host never runs it (issue #16, AL#23).

vLLM's `CustomOp` and SGLang's `MultiPlatformOp` define `forward_cuda` (and `forward_hip`, ...)
beside `forward_native` / `forward_npu` / `forward_oot`; the base class's `dispatch_forward` picks
one per host (an NPU host is none of CUDA, ROCm, XPU, TPU, HPU, MUSA). vLLM
(`vllm/model_executor/custom_op.py`): `elif current_platform.is_out_of_tree():
return self.forward_oot` (whose default is `return self.forward_native(...)`), `else: return
self.forward_cuda`; SGLang (`sglang/srt/layers/utils/multi_platform.py`): `elif _is_npu: return
self.forward_npu`. A reference inside `forward_cuda` / `forward_hip` / `forward_xpu` ...
(rules/scopes.toml [dispatch] cuda_methods) of a class that derives from a base and also has one of npu_methods (itself or
through a base class defined in the same file) is CUDA-only code for callersonly's purposes: the
NPU host runs the other method, unless one of those NPU methods (or a `forward` override) of the
class or such a base names a CUDA method (vLLM's `HpcRopeNorm.forward_native` returns
`self.forward_cuda(...)`). A class without such a method keeps its findings (its
`forward_cuda` may be all there is, and the only thing an NPU host could run).

Read off the tree callersonly already parsed (no parse of its own); called from callersonly._cheap.
"""

from __future__ import annotations

import ast
import functools

from . import astcache, catalogue

_FUNCTIONS = (ast.FunctionDef, ast.AsyncFunctionDef)


@functools.lru_cache(maxsize=None)
def methods() -> tuple[frozenset, tuple]:
    """rules/scopes.toml [dispatch]: (the CUDA methods, the methods an NPU host runs, in order)."""
    table = catalogue.read_table("scopes.toml").get("dispatch", {})
    return frozenset(table.get("cuda_methods", ())), tuple(table.get("npu_methods", ()))


def _own_methods(cls: ast.ClassDef) -> set[str]:
    return {n.name for n in cls.body if isinstance(n, _FUNCTIONS)}


def npu_method(tree: ast.Module, cls: ast.ClassDef) -> tuple[str, str] | None:
    """(the method an NPU host runs instead, the class defining it) for `cls` or a base class of
    its file (followed by simple name, a few steps), or None; None too when one of those classes'
    NPU methods or `forward` names a CUDA method (vLLM's `HpcRopeNorm.forward_native` returns
    `self.forward_cuda(...)`: an NPU host runs it after all)."""
    cuda, npu = methods()
    classes = {n.name: n for n in astcache.walk(tree) if isinstance(n, ast.ClassDef)}
    seen, todo, found = set(), [cls], None
    while todo:
        current = todo.pop(0)
        if current.name in seen or len(seen) > 8:
            continue
        seen.add(current.name)
        from .nativecuda34 import names_cuda_method  # (not under `if current_platform.is_cuda():`: nativecuda34.py)

        for method in current.body:
            if isinstance(method, _FUNCTIONS) and (method.name in npu or method.name == "forward") \
                    and names_cuda_method(method, cuda):
                return None
        if found is None:
            own = next((m for m in npu if m in _own_methods(current)), None)
            found = (own, current.name) if own is not None else None
        todo.extend(classes[b.id] for b in current.bases if isinstance(b, ast.Name) and b.id in classes)
    return found


def cuda_dispatch_reason(tree: ast.Module, chain: list) -> str | None:
    """The reason a reference whose holders are `chain` (outermost first, classes and functions)
    lies in code an NPU host never runs as a platform-dispatched op's CUDA method, or None."""
    cuda, _ = methods()
    for k in range(len(chain) - 1):
        cls, method = chain[k], chain[k + 1]
        if not (isinstance(cls, ast.ClassDef) and isinstance(method, _FUNCTIONS) and method.name in cuda):
            continue
        if not cls.bases or method.decorator_list:
            continue
        other = npu_method(tree, cls)
        if other is None:
            continue
        bases = ", ".join(f"`{astcache.dotted(b) or ast.unparse(b)}`" for b in cls.bases)
        where = "" if other[1] == cls.name else f" (from `{other[1]}`)"
        return (f"in `{cls.name}.{method.name}`, a platform-dispatched op ({bases}) that also has "
                f"`{other[0]}`{where}: its base's dispatch_forward sends an NPU host to `forward_npu` or "
                f"`forward_oot` (→ `forward_native`), never to `{method.name}`")
    return None
