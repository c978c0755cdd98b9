"""References in modules that fail to import first on an NPU host (issue #16, round 31 FA#33; helper
h176). For callgates21.Gates.dead, and so every pass that walks a unit's references with it
(callees22, testcallers27, publichelpers27, kernelgates26, ...).

    # warmup/cutedsl_helper.py
    def compile_cutedsl(entry, *args):
        import cutlass.cute as cute               # NPU911, lazily
        return cute.compile(entry, *args)
    class CuTeDSLKernel:
        def compile(self, key):
            self.cache[key] = compile_cutedsl(self.kernel(key))

    # ops/fused_q_cutedsl.py (every other importer is alike)
    import cutlass                                # line 8: fails where cutlass is missing
    from warmup.cutedsl_helper import CuTeDSLKernel
    class IndexerQKernel(CuTeDSLKernel): ...

A reference in a module whose body has, before the reference's line, a direct top-level statement
(not in a `try`, an `if`, a function) importing a package an NPU host never has installed
(rules/sweep.toml `[availability] never_on_npu`: cutlass, flashinfer, deep_gemm, ...) lies in
code an NPU host never runs: the module stops at that import there. Its reason names the import,
the file and the line. The importer's own import keeps its finding (an error, or info where its
importers are gated), so the work is still reported where it is; the helper's lazy import, which
runs only once the importer's has succeeded, becomes a named scope when every other reference is
dead too (callgates21's rule). A module-level reference before the import, an import inside a
`try` or an `if`, a package an NPU host may install (triton, xformers, bitsandbytes): no gate.
Nor for a unit of a module that itself fails first (its own findings are the per-file folds' and
firstfail22's: tests/test_h73.py), nor where the referring module imports the unit's module before
its failing import (the unit's module then loads, and import-time code may run: tests/test_h125.py).
One scan of a module's top level, memoized on the walk.
"""

from __future__ import annotations

import ast
import functools
from typing import Optional


@functools.lru_cache(maxsize=1)
def _never_on_npu() -> tuple:
    from . import catalogue

    return tuple(catalogue.read_table("sweep.toml").get("availability", {}).get("never_on_npu", ()))


def _package(name: str) -> Optional[str]:
    return next((p for p in _never_on_npu() if name == p or name.startswith(p + ".")), None)


def first_failure(tree: ast.Module) -> Optional[tuple[int, int, str, str]]:
    """(end line, line, package, statement) of the module's first direct top-level import of a package an
    NPU host never has installed, or None."""
    for statement in tree.body:
        names = []
        if isinstance(statement, ast.Import):
            names = [a.name for a in statement.names]
        elif isinstance(statement, ast.ImportFrom) and statement.level == 0 and statement.module:
            names = [statement.module]
        for name in names:
            package = _package(name)
            if package is not None:
                shown = " ".join(ast.unparse(statement).split())
                return statement.end_lineno or statement.lineno, statement.lineno, package, shown[:60]
    return None


def _loads_before(run, i: int, j: int, tree: ast.Module, line: int) -> bool:
    """Module j's code before its failing import (at `line`) may import module i (by any dotted
    name of it, a package holding it, or a module it holds): i loads there whatever j does next."""
    from .modpaths import module_names, resolve_relative

    names = module_names(run.results[i].relpath)
    importer = run.results[j].relpath

    def near(full: str) -> bool:
        return any(full == n or n.startswith(full + ".") or full.startswith(n + ".") for n in names)

    for statement in tree.body:
        if statement.lineno >= line:
            break
        for node in ast.walk(statement):
            if isinstance(node, ast.Import) and any(near(a.name) for a in node.names):
                return True
            if isinstance(node, ast.ImportFrom):
                base = resolve_relative(importer, node.level, node.module or "").replace("/", ".") \
                    if node.level else (node.module or "")
                if near(base) or any(near(f"{base}.{a.name}") for a in node.names):
                    return True
    return False


def after_failing_import(gates, i: Optional[int], j: int, tree: ast.Module, node: ast.AST) -> Optional[str]:
    """The reason `node` of module j, a reference to a unit of module i, never runs on an NPU host
    (after module j's own import of a never-installed package), or None. Not for a unit of a module
    that fails first itself (its findings are the per-file folds' and firstfail22's), nor where j
    imports module i before its failing import (i's own import-time code runs there: a loader may
    compile at import, tests/test_h125.py). Memoized per module on `gates`."""
    if i is None or i == j:
        return None
    memo = gates.first_failures
    for k in (i, j):
        if k not in memo:
            tree_k = tree if k == j else gates.run.tree(k)
            memo[k] = first_failure(tree_k) if tree_k is not None else None
    if memo[i] is not None:
        return None
    found = memo[j]
    if found is None or getattr(node, "lineno", 0) <= found[0]:
        return None
    end, line, package, shown = found
    key = ("before", i, j)
    if key not in memo:
        memo[key] = _loads_before(gates.run, i, j, tree, line)
    if memo[key]:
        return None
    return f"after `{shown}` (line {line}), which fails where `{package}` is missing, as on an NPU host"
