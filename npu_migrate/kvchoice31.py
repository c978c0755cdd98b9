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


def subclass_of(tree: ast.Module, parents: dict, node: ast.AST) -> Optional[ast.ClassDef]:
    """The module-level class whose bases hold `node` (`class Sub(pkg.Base):`), else None."""
    child, current = node, parents.get(id(node))
    while isinstance(current, ast.Attribute):
        child, current = current, parents.get(id(current))
    if isinstance(current, ast.ClassDef) and current in tree.body \
            and any(child is base for base in current.bases):
        return current
    return None
