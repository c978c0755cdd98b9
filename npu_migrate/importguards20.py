"""An unguarded import of names a package binds only under its Triton-availability test (issue #16,
round-19/20 audits AZ#26, BD#11, BD#17: a silent miss). Whole run, from runplan.py after
importers19.py.

A package's `__init__.py` may import its Triton kernels only where Triton is there:

    try:
        import triton
        HAS_TRITON = True
    except ImportError:
        HAS_TRITON = False
    if HAS_TRITON:
        from .context_attn import context_attention
        from .rms_layernorm import rms_layernorm

The kernel modules get an info finding (tritonguards.TRITON_GATED_IMPORTERS: imported only behind a
Triton-availability test). But a module elsewhere that imports those names from the package at
module level, outside any `try` or `if` (`from pkg.kernel.triton import rms_layernorm`), raises
ImportError ("cannot import name") where Triton is not installed (an NPU host without
Triton-Ascend): the module fails to load, and no finding said so. As flags16.py reports a name
imported only under a platform flag and read on the NPU branch, this pass reports that import:
NPU910, error, naming the names, the package's test and its line.

What counts: the names an `if` at the top level of a package `__init__.py` binds in its body (an
import, an assignment, a `def` or `class`), whose test is a Triton-availability test
(tritonguards.TRITON_AVAILABILITY: `HAS_TRITON`, `has_triton()`, `is_triton_available()`), not
negated, and that nothing else at the module's top level binds (no `else:` of placeholders, no
binding before or after). The importer's statement must be at its module's top level (not in a
`try`, an `if` or a function); tests are left to their own findings (a Triton test module fails on
its own Triton use), and a line already reported as an error or warning is not reported twice.
The importers of one package are one finding, at the first, naming the others: one fix (placeholders
in the package's `else:`, or a guard at each importer) for what fails the same way.
"""

from __future__ import annotations

import ast
import re
from typing import Optional

from . import astcache
from .findings import MAX_LISTED, Finding
from .modpaths import RunTexts, module_names, resolve_relative

MESSAGE = ("Triton kernel or Triton import: CUDA Triton kernels do not run on NPU: import of {names} from "
           "`{module}`, which binds them only under `{test}` ({where}:{line}): where Triton is not installed "
           "(an NPU host without Triton-Ascend) this import raises ImportError and the module fails to load; "
           "guard it (or import the names where they are used) and give the NPU host another path")
_TEST_FILE = re.compile(r"(^|/)(tests?/|test_[^/]*\.py$|[^/]*_test\.py$|conftest\.py$)")


def _bound(stmt: ast.stmt) -> set[str]:
    """The names a top-level statement binds (imports, assignments, definitions), its nested
    blocks included."""
    names: set[str] = set()
    for node in ast.walk(stmt):
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            names.update((a.asname or a.name).split(".")[0] for a in node.names if a.name != "*")
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.add(node.id)
    return names


def gated_names(tree: ast.Module) -> Optional[tuple[set[str], str, int]]:
    """(the names bound only under a top-level Triton-availability `if`, its test, its line)."""
    from .tritonguards import TRITON_AVAILABILITY

    gated: set[str] = set()
    test, line = "", 0
    others: set[str] = set()
    for stmt in tree.body:
        if isinstance(stmt, ast.If) and not isinstance(stmt.test, ast.UnaryOp) and \
                TRITON_AVAILABILITY.search(ast.unparse(stmt.test)):
            gated |= {n for s in stmt.body for n in _bound(s)} - {"__all__"}
            others |= {n for s in stmt.orelse for n in _bound(s)}
            test, line = test or " ".join(ast.unparse(stmt.test).split()), line or stmt.lineno
        else:
            others |= _bound(stmt)
    gated -= others
    return (gated, test, line) if gated else None


def review(results: list, paths: Optional[dict[str, str]] = None) -> list:
    """The results, with an NPU910 error at each unguarded import of such names."""
    python = [i for i, r in enumerate(results) if r.relpath.endswith(".py")]
    text_of = RunTexts(results, paths or {})
    packages: dict[str, tuple[int, set[str], str, int]] = {}
    for i in python:
        relpath = results[i].relpath
        if not relpath.endswith("__init__.py"):
            continue
        data = text_of(i)
        if not data or b"triton" not in data.lower() or b"if " not in data:
            continue
        tree = astcache.parse(data)
        found = gated_names(tree) if tree is not None else None
        if found is None:
            continue
        for name in module_names(relpath):
            packages.setdefault(name, (i, *found))
        packages.setdefault("/" + relpath[:-len("/__init__.py")], (i, *found))  # (by stem, for relative imports)
    if not packages:
        return results
    heads = {name.lstrip("/").split(".")[0].split("/")[-1].encode() for name in packages}
    sites: dict[int, list[tuple[int, ast.ImportFrom, list[str]]]] = {}  # package -> its unguarded importers
    for j in python:
        relpath = results[j].relpath
        if _TEST_FILE.search(relpath):
            continue
        data = text_of(j)
        if not data or b"import" not in data or not any(h in data for h in heads):
            continue
        tree = astcache.parse(data)
        if tree is None:
            continue
        open_lines = {f.line for f in results[j].findings if not f.fixable and f.severity != "info" and f.cell is None}
        for stmt in tree.body:
            if not isinstance(stmt, ast.ImportFrom) or stmt.lineno in open_lines:
                continue
            key = ("/" + resolve_relative(relpath, stmt.level, stmt.module or "")) if stmt.level else stmt.module
            package = packages.get(key or "")
            if package is None or package[0] == j:
                continue
            names = [a.name for a in stmt.names if a.name in package[1]]
            if names:
                sites.setdefault(package[0], []).append((j, stmt, names))
    out = list(results)
    for i, found in sites.items():
        # one finding per package, at its first importer, naming the others: one fix (placeholders in
        # the package's `else:`, or a guard at each importer) for what fails the same way
        _i, _gated, test, line = next(p for p in packages.values() if p[0] == i)
        j, stmt, names = found[0]
        module = stmt.module if not stmt.level else "." * stmt.level + (stmt.module or "")
        message = MESSAGE.format(names=", ".join(f"`{n}`" for n in names), module=module, test=test,
                                 where=results[i].relpath, line=line)
        if len(found) > 1:
            others = [f"{results[k].relpath}:{s.lineno}" for k, s, _n in found[1:]]
            message += (f" (also imported so at {'; '.join(others[:MAX_LISTED])}"
                        + (f" and {len(others) - MAX_LISTED} more" if len(others) > MAX_LISTED else "") + ")")
        finding = Finding(path=results[j].relpath, line=stmt.lineno, column=stmt.col_offset + 1, code="NPU910",
                          message=message, fixable=False, source=" ".join(ast.unparse(stmt).split()),
                          severity="error")
        out[j] = _with(out[j], [finding])
    return out


def _with(result, added: list[Finding]):
    import dataclasses

    return dataclasses.replace(result, findings=sorted([*result.findings, *added]))
