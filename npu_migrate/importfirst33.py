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


def after_failing_import(gates, j: int, tree: ast.Module, node: ast.AST) -> Optional[str]:
    """The reason `node` of module j never runs on an NPU host (after the module's own import of a
    never-installed package), or None. Memoized per module on `gates`."""
    memo = gates.first_failures
    if j not in memo:
        memo[j] = first_failure(tree)
    found = memo[j]
    if found is None or getattr(node, "lineno", 0) <= found[0]:
        return None
    _end, line, package, shown = found
    return f"after `{shown}` (line {line}), which fails where `{package}` is missing, as on an NPU host"
