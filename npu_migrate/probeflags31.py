"""Module flags a guarded import of a package with no NPU build sets (issue #16, round-31 audit
FA#28). Per file: reach.with_file_facts asks `false_flags(tree)` for the module names it writes as
`False` into a test module's skip conditions (testscopes.py).

vLLM's `tests/kernels/mamba/test_ssu_dispatch.py`:

    try:
        import flashinfer.mamba  # noqa: F401

        HAS_FLASHINFER = True
    except ImportError:
        HAS_FLASHINFER = False

    @pytest.mark.skipif(not HAS_FLASHINFER, reason="flashinfer not installed")
    def test_flashinfer_forwards_ssu_algorithm(...):
        import flashinfer.mamba                                       # NPU911

probes16.py already reads the module-level `try` as a probe whose fallback runs; the test behind the
mark was left reported, because the flag is bound twice (reach._false_names takes a name bound once,
and never a constant: `DEBUG = False` is a setting a user edits). Here the constant is the `except`
branch's answer to a failed import: on an NPU host, where the package has no build
(catalogue.absent_packages: flashinfer, flash_attn, apex, ...), the import fails and only that
branch binds the name. So a module name is false there when

- a module-level `try` whose handlers all catch ImportError (`ImportError`, `ModuleNotFoundError`,
  `Exception`, a bare `except`) imports such a package (not relatively) before it binds the name;
- every handler binds the name to a false constant (`False`, `None`, `0`);
- nothing else in the module binds it (no other assignment, no `global` of it in a function).

The test the skip keeps off such a host then does not run there (a named scope, moot.py: "in a test
that does not run on an NPU host"), with the helpers only such tests reach, as for every other skip
condition testscopes decides.

Kept (the nearest true cases): a flag of a package an NPU host has (Triton: triton-ascend installs
it; torch), a flag the `except` sets True or to a computed value, a flag set again elsewhere in the
module (`HAS_FLASHINFER = os.environ.get(...)`), a `try` with a handler that does not catch
ImportError, and a test marked to skip where the package IS present (`skipif(HAS_FLASHINFER)`).
"""

from __future__ import annotations

import ast

from . import astcache, catalogue

_CAUGHT = frozenset({"ImportError", "ModuleNotFoundError", "Exception", "BaseException"})
_FUNCTIONS = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)


def _catches(handler: ast.ExceptHandler) -> bool:
    if handler.type is None:
        return True
    kinds = handler.type.elts if isinstance(handler.type, ast.Tuple) else [handler.type]
    return any((astcache.dotted(k) or "").rpartition(".")[2] in _CAUGHT for k in kinds)


def _absent_import(stmt: ast.stmt, absent: frozenset) -> bool:
    if isinstance(stmt, ast.Import):
        return any(a.name.split(".")[0] in absent for a in stmt.names)
    return isinstance(stmt, ast.ImportFrom) and not stmt.level and (stmt.module or "").split(".")[0] in absent


def _falsy(value: ast.AST) -> bool:
    return isinstance(value, ast.Constant) and value.value in (False, None, 0) and not isinstance(value.value, str)


def _assigned(block: list) -> dict[str, list]:
    """{name: the values a block's own plain assignments bind it to}."""
    out: dict[str, list] = {}
    for stmt in block:
        if isinstance(stmt, ast.Assign):
            for target in stmt.targets:
                if isinstance(target, ast.Name):
                    out.setdefault(target.id, []).append(stmt.value)
        elif isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name) and stmt.value is not None:
            out.setdefault(stmt.target.id, []).append(stmt.value)
    return out


def _stores(tree: ast.Module) -> dict[str, int]:
    """{name: how many times the module's own code binds it} (functions and classes left out), plus
    the names a `global` statement anywhere names (counted high: never decided)."""
    counts: dict[str, int] = {}
    stack = list(tree.body)
    while stack:
        node = stack.pop()
        if isinstance(node, ast.Name) and not isinstance(node.ctx, ast.Load):
            counts[node.id] = counts.get(node.id, 0) + 1
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            for alias in node.names:
                name = (alias.asname or alias.name).split(".")[0]
                counts[name] = counts.get(name, 0) + 1
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            counts[node.name] = counts.get(node.name, 0) + 1
        if not isinstance(node, (*_FUNCTIONS, ast.ClassDef)):
            stack.extend(ast.iter_child_nodes(node))
    for node in ast.walk(tree):
        if isinstance(node, (ast.Global, ast.Nonlocal)):
            for name in node.names:
                counts[name] = counts.get(name, 0) + 1000
    return counts


def false_flags(tree: ast.Module) -> frozenset:
    """The module names false on an NPU host because only a failed import's handler binds them
    there (this module's docstring)."""
    tries = [s for s in tree.body if isinstance(s, ast.Try) and s.handlers and all(map(_catches, s.handlers))]
    if not tries:
        return frozenset()
    absent = catalogue.absent_packages()
    out: set[str] = set()
    counts = None
    for trial in tries:
        first = next((i for i, s in enumerate(trial.body) if _absent_import(s, absent)), None)
        if first is None:
            continue
        candidates = _assigned(trial.body[first + 1:])
        handlers = [_assigned(h.body) for h in trial.handlers]
        for name, values in candidates.items():
            if len(values) != 1 or not all(len(h.get(name, ())) == 1 and _falsy(h[name][0]) for h in handlers):
                continue
            counts = counts if counts is not None else _stores(tree)
            if counts.get(name, 0) == 1 + len(handlers):
                out.add(name)
    return frozenset(out)
