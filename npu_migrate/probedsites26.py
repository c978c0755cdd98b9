"""A lazy CUDA-only import inside a function of a module that offers an availability probe of the
same package (issue #16, round-22 audit BE#9). Whole run, from runplan.whole_run_passes, right
after probed22.py.

probed22.py lowers a CuTe-DSL kernel module whose only importers are functions of a module that
offers its callers a probe of the package. The probing module's own lazy imports of the package
were left at error:

    # kit/ops/_router_common.py
    def is_cute_available(name) -> bool:
        try:
            import cutlass
        except ImportError:
            return False
        return True

    # kit/ops/router.py
    from ._router_common import is_cute_available
    def is_available() -> bool:                    # what the module's callers ask first
        return is_cute_available("router")
    class RouterGemm:
        def _compile_splitk(self, key):
            from cutlass import BFloat16, Float32  # NPU911: info now

Where the package is missing, as on an NPU host, the probe answers False and the module's callers
take their other path; only a call that skips it reaches the import. An open NPU911 error whose
every line is an import of packages with no NPU build (importfolders.packages), each statement inside a
function (a method or a module-level function, its outermost holder named) that is not itself a
probe and that no module-level statement of the file names, in a library module (no test) that
offers a probe of one of those packages (probed22's probes: a try-import, `find_spec` of its name,
or a function whose every `return` holds one, defined here or imported by name from a module of
the run; offered: a module-level function of the module, not a flag, nor a method guarding its
own work such as an `__init__` holding a try-import), becomes info naming the holder and the
probe. Not a scope: a host may install the package (the DSL wheels install without a GPU), and a
caller may skip the probe. Kept: a module-level import, a module with no probe or a probe of
another package, a holder the module calls at import time, a test.
"""

from __future__ import annotations

import ast
import dataclasses
from typing import Optional

from . import astcache

NOTE = ("imported only inside {holders}, in a module that offers `{probe}()` ({how}) for its callers to ask "
        "first: where {packs} is missing, as on an NPU host, the probe answers False, and only a call that "
        "skips it reaches this import")
_FUNCTIONS = (ast.FunctionDef, ast.AsyncFunctionDef)


def _holders(tree: ast.Module, lines: list[int]) -> Optional[list[ast.AST]]:
    """The outermost function holding each import statement at `lines`, or None where one lies
    outside every function or a line holds no import."""
    parents = astcache.parents(tree)
    out = []
    imports = [n for n in astcache.walk(tree) if isinstance(n, (ast.Import, ast.ImportFrom))]
    if not set(lines) <= {n.lineno for n in imports}:
        return None  # (a place merged in that is no import: another construct, read elsewhere)
    for node in imports:
        if node.lineno in lines:
            up, outer = parents.get(id(node)), None
            while up is not None:
                if isinstance(up, _FUNCTIONS):
                    outer = up
                up = parents.get(id(up))
            if outer is None:
                return None
            out.append(outer)
    return out or None


def _named_at_import_time(tree: ast.Module, names: set) -> bool:
    """A module-level statement (outside every function and class body) names one of `names`."""
    for stmt in tree.body:
        if isinstance(stmt, (*_FUNCTIONS, ast.ClassDef)):
            parts = [*stmt.decorator_list] + ([*stmt.bases, *(k.value for k in stmt.keywords)]
                                              if isinstance(stmt, ast.ClassDef) else [])
        else:
            parts = [stmt]
        for part in parts:
            for n in ast.walk(part):
                if (isinstance(n, ast.Name) and n.id in names) or (isinstance(n, ast.Attribute) and n.attr in names):
                    return True
    return False


def review(results: list, paths: Optional[dict] = None) -> list:
    """Lower the NPU911 errors of lazy imports inside probing modules' own functions to info (see the
    module's doc)."""
    from .firstfail22 import RunIndex, finding_lines, open_import
    from .importfolders import packages as _packages
    from .importgates import is_test
    from .probed22 import Probes, line_packages

    targets = [i for i, r in enumerate(results) if r.relpath.endswith(".py") and not is_test(r.relpath)
               and any(open_import(f) and f.severity == "error" for f in r.findings)]
    if not targets:
        return results
    run = RunIndex(results, paths or {})
    found = Probes(run)
    packages = _packages()
    out = list(results)
    for i in targets:
        tree = run.tree(i)
        if tree is None:
            continue
        flags = {t.id for n in tree.body if isinstance(n, ast.Assign) for t in n.targets if isinstance(t, ast.Name)}
        findings = list(results[i].findings)
        for index, f in enumerate(findings):
            if not (open_import(f) and f.severity == "error"):
                continue
            lines = finding_lines(f)
            needed = line_packages(tree, lines, packages)
            holders = _holders(tree, lines) if needed else None
            if not holders:
                continue
            names, own = found.of(i, frozenset(needed))
            # (a module-level function the module's callers can call first; a method guarding its
            # own work, `__init__` with a try-import, is no probe the module offers)
            functions = {n.name for n in tree.body if isinstance(n, _FUNCTIONS) and not n.name.startswith("__")}
            offered = sorted(n for n in own if n not in flags and n in functions)
            held = {h.name for h in holders}
            if not offered or held & set(names) or _named_at_import_time(tree, held):
                continue
            shown = ", ".join(f"`{n}`" for n in dict.fromkeys(h.name for h in holders))
            packs = ", ".join(f"`{p}`" for p in sorted(needed))
            note = NOTE.format(holders=shown, probe=offered[0], how=names[offered[0]], packs=packs)
            findings[index] = dataclasses.replace(f, severity="info", message=f"{f.message} ({note})")
        if findings != results[i].findings:
            out[i] = dataclasses.replace(results[i], findings=findings)
    return out
