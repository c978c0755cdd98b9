"""Kernels an NPU host reaches only through a KV-cache dtype its user chooses by name (issue #16,
policy P1; round-31 audit FC#8, FB#12). Read by callgates21.py's walk (and so by testcallers27.py's)
and by optconfig29.py.

vLLM picks its TurboQuant and UltraQuant attention backends only for a `--kv-cache-dtype` the user
names; the default is "auto":

    # vllm/config/cache.py
    class CacheConfig:
        cache_dtype: CacheDType | str = "auto"

    # vllm/platforms/interface.py
    elif cache_config.cache_dtype.startswith("turboquant_") or cache_config.cache_dtype == "ultraquant_4bit":
        if cache_config.cache_dtype == "ultraquant_4bit":
            _pack_backend = UltraQuantAttentionBackend
        else:
            _pack_backend = TurboQuantAttentionBackend

    # vllm/v1/attention/backends/ultraquant_attn.py
    class UltraQuantAttentionBackend(TurboQuantAttentionBackend): ...

Two readings were missing, and the backends' Triton kernels stayed errors:

* optconfig29.py read `x.F == "v"` and `x.F in (...)` but not `x.F.startswith("turboquant_")`: it
  now reads `.startswith`/`.endswith` with string constants (or a tuple of them) over the field's
  known string values (`OptConfigs._prefix_test`): false at "auto", so the `elif` body is the
  user's choice;
* callgates21.py's walk kept a class reached when a subclass names it in its bases (`class
  UltraQuantAttentionBackend(TurboQuantAttentionBackend):` lies in no method body): the base's
  methods run through that subclass only where the subclass itself is built, so the reference is
  followed to the subclass like a reference in one of its methods (`subclass_of`).

What stays (the nearest true cases): a prefix test true at the default or at a value the library
sets (`"auto".startswith("au")`), a receiver whose values are not all known strings, a call with a
non-constant argument; a subclass any code an NPU host runs builds or references (the walk keeps
it, and so its bases); a base named anywhere else than a module-level class's bases (a keyword
such as `metaclass=`, a decorator, a call).
"""

from __future__ import annotations

import ast
from typing import Optional

from . import astcache

_TRITON = ("jit", "autotune", "heuristics")  # (kernelgates26's decorators; it imports callgates21: no import circle)


def subclass_of(tree: ast.Module, parents: dict, node: ast.AST) -> Optional[ast.ClassDef]:
    """The module-level class whose bases hold `node` (`class Sub(pkg.Base):`), else None."""
    child, current = node, parents.get(id(node))
    while isinstance(current, ast.Attribute):
        child, current = current, parents.get(id(current))
    if isinstance(current, ast.ClassDef) and current in tree.body \
            and any(child is base for base in current.bases):
        return current
    return None


def triton_kernel(stmt: ast.AST) -> bool:
    """A function carrying a Triton decorator (`@triton.jit`, `@triton.autotune(...)`)."""
    if not isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)):
        return False
    for decorator in stmt.decorator_list:
        words = (astcache.dotted(decorator.func if isinstance(decorator, ast.Call) else decorator) or "").split(".")
        if len(words) >= 2 and "triton" in words[:-1] and words[-1] in _TRITON:
            return True
    return False


def same_program(unit: ast.AST, outer: ast.AST, node: ast.AST, parents: dict) -> bool:
    """`unit` a Triton kernel (or device function) of the module whose function `outer` holds the
    reference `node`: a call inside another kernel, or a launch `unit[grid](...)` by a module-level
    function. The module's kernels and their launcher are one device program, so the walk follows
    the reference without spending one of its steps."""
    if not triton_kernel(unit) or not isinstance(outer, (ast.FunctionDef, ast.AsyncFunctionDef)):
        return False
    if triton_kernel(outer):
        return True
    subscript = parents.get(id(node))
    return isinstance(subscript, ast.Subscript) and subscript.value is node \
        and isinstance(parents.get(id(subscript)), ast.Call) and parents[id(subscript)].func is subscript


def aliased(run, i: int, j: int, tree: ast.Module, parents: dict, refs: dict, name: str) -> Optional[list]:
    """The references of module i's `name` that module j makes through `from M import name as other`
    (M module i): the `other` names in the import's function (or module); None where unsure (a
    store of `other` there besides the import). Round 31 FC#8: `_soa_imports()` imports the decode
    wrapper `as soa_decode` and returns it."""
    from .optobjects30 import module_of

    if f"{name} as ".encode() not in (run.text_of(j) or b""):
        return []
    out: list = []
    for stmt in astcache.nodes(tree, (ast.ImportFrom,)):
        for alias in stmt.names:
            if alias.name != name or not alias.asname or alias.asname == name or module_of(run, j, stmt) != i:
                continue
            scope = parents.get(id(stmt))
            while scope is not None and not isinstance(scope, (ast.FunctionDef, ast.AsyncFunctionDef)):
                scope = parents.get(id(scope))
            for node in refs.get(alias.asname, ()):
                if not isinstance(node, ast.Name) or scope is not None and not _within(node, scope, parents):
                    continue
                if not isinstance(node.ctx, ast.Load):
                    return None
                out.append(node)
    return out


def _within(node: ast.AST, scope: ast.AST, parents: dict) -> bool:
    current = parents.get(id(node))
    while current is not None:
        if current is scope:
            return True
        current = parents.get(id(current))
    return False
