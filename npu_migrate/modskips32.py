"""Module-level test skips in two shapes testscopes.py did not read (issue #16, round-32 audit
GC#8, GC#12).

testscopes.py reads a test module's own skip at its top level: `pytestmark = pytest.mark.skipif(
<condition>, ...)` and `if <condition>: pytest.skip(..., allow_module_level=True)`, where the
condition is certainly true on an NPU host. Two real shapes hid the same skip one step away:

* **A `pytestmark` inside a `try` that only guards the pytest import** (GC#8, vLLM's
  `tests/kernels/mamba/test_memcpy_u64_tiled.py`, a file that also runs as a script):

      try:
          import pytest
          pytestmark = pytest.mark.skipif(
              not (current_platform.is_cuda_alike() or current_platform.is_xpu()), reason=...)
      except ModuleNotFoundError:
          pytest = None

  Under pytest the import succeeds, so the body runs and the mark applies to every test of the
  module. `module_statements` gives such a body's statements in place of the `try`, when every
  handler catches only an import failure and every statement before the skip in the body imports
  pytest (or unittest): an import of anything else may fail on an NPU host (flashinfer), and then
  the mark is never set.
* **A skip whose test also asks that pytest was imported** (GC#12, vLLM's
  `tests/kernels/moe/test_trtllm_nvfp4_moe.py`):

      import pytest
      if pytest and (not has_flashinfer_trtllm_fused_moe() or not current_platform.is_device_capability_family(100)):
          pytest.skip("...", allow_module_level=True)

  A name bound only by a top-level `import` statement of the module (not inside a `try` or an
  `if`, never assigned elsewhere) is a module object, which is always true. `with_modules_true`
  gives the test with those names read as True; testscopes decides the rest as before.

Kept (the nearest true cases): a `try` whose body imports another package before the mark, a
handler that catches more than an import failure, a name also bound elsewhere (`pytest = None` in
a handler), and a condition an NPU host may pass (`skipif(current_platform.is_rocm())`): the test
runs there and its findings stay.
"""

from __future__ import annotations

import ast
import copy
from collections.abc import Iterator

from . import astcache

_IMPORT_ERRORS = frozenset({"ImportError", "ModuleNotFoundError"})
_HARNESS = frozenset({"pytest", "unittest"})


def _catches_import_failure_only(handler: ast.ExceptHandler) -> bool:
    kinds = handler.type.elts if isinstance(handler.type, ast.Tuple) else [handler.type]
    return bool(kinds) and all(k is not None and astcache.dotted(k) in _IMPORT_ERRORS for k in kinds)


def _imports_harness(stmt: ast.stmt) -> bool:
    if isinstance(stmt, ast.Import):
        return all(a.name.split(".")[0] in _HARNESS for a in stmt.names)
    return isinstance(stmt, ast.ImportFrom) and not stmt.level and (stmt.module or "").split(".")[0] in _HARNESS


def module_statements(tree: ast.Module) -> Iterator[ast.stmt]:
    """The module's top-level statements, a `try` that guards only the pytest import read as the
    statements of its body, up to the first import of anything else (which may fail on an NPU
    host, leaving the rest unrun)."""
    for stmt in tree.body:
        if (isinstance(stmt, ast.Try) and stmt.handlers and not stmt.finalbody
                and all(_catches_import_failure_only(h) for h in stmt.handlers)
                and stmt.body and _imports_harness(stmt.body[0])):
            for inner in stmt.body:
                if isinstance(inner, (ast.Import, ast.ImportFrom)) and not _imports_harness(inner):
                    break
                yield inner
        else:
            yield stmt


def _module_names(tree: ast.Module) -> frozenset[str]:
    """Names bound only by top-level `import X` / `import X as Y` statements (module objects)."""
    imported: set[str] = set()
    for stmt in tree.body:
        if isinstance(stmt, ast.Import):
            imported.update((a.asname or a.name.split(".")[0]) for a in stmt.names)
    if not imported:
        return frozenset()
    bound_twice: set[str] = set()
    top = {id(stmt) for stmt in tree.body}
    for node in astcache.walk(tree):
        if isinstance(node, ast.Name) and isinstance(node.ctx, (ast.Store, ast.Del)):
            bound_twice.add(node.id)
        elif isinstance(node, (ast.Global, ast.Nonlocal)):
            bound_twice.update(node.names)
        elif isinstance(node, (ast.Import, ast.ImportFrom)) and id(node) not in top:
            bound_twice.update((a.asname or a.name.split(".")[0]) for a in node.names)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            bound_twice.add(node.name)
    return frozenset(imported - bound_twice)


class _ModulesTrue(ast.NodeTransformer):
    def __init__(self, names: frozenset[str]):
        self.names = names

    def visit_Name(self, node: ast.Name):
        if node.id in self.names and isinstance(node.ctx, ast.Load):
            return ast.copy_location(ast.Constant(True), node)
        return node


def with_modules_true(stmt: ast.stmt, tree: ast.Module) -> ast.stmt | None:
    """A copy of the top-level `if` `stmt` whose test reads a module name (`if pytest and ...:`)
    with those names as True; None when its test names none."""
    if not isinstance(stmt, ast.If):
        return None
    names = {n.id for n in ast.walk(stmt.test) if isinstance(n, ast.Name)}
    if not names:
        return None
    modules = _module_names(tree) & names
    if not modules:
        return None
    out = copy.copy(stmt)
    out.test = _ModulesTrue(frozenset(modules)).visit(copy.deepcopy(stmt.test))
    return out
