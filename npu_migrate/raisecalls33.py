"""Code after a call of a helper that raises first where an NPU host lacks what it checks (issue #16,
round 31 FC#7; helper h176).

    # layers/indexer.py
    def _assert_supported(logits):
        if not has_cutedsl():                      # (`return _has_module("cutlass")`)
            raise RuntimeError("needs CuteDSL")
        if logits.dtype != torch.float32:
            raise RuntimeError("needs fp32")

    def merge(logits, world):
        if world <= 1:
            return
        _assert_supported(logits)
        from kernels.dcp_cutedsl import pack       # (dcp_cutedsl.py: `import cutlass` at module level)

An import site of a module that imports a CUDA-only package unguarded at module level counts for
importers19.py as kept off an NPU host (`probe`, so the finding becomes info under policy P1: a
host may still install the package) when an earlier direct statement of a body holding the site
(the import's own body or an enclosing one: code that runs before it, in order) is a plain call of
a module-level function of the run (the file's own, or one its `from ... import` names) whose
leading statements are `if ...: raise` checks (no `else`), one of them `if not <probe>: raise`
with the probe one of the module's packages as importers19 reads probes (`find_spec`,
`_has_module`, a helper returning one). Where the package is missing the call raises before the
import. A check after any other statement (a `return`, an assignment), a call inside a `try`
whose handler goes on, a call after the import, a method call or a call of a parameter: no guard.
Wired into importers19._guard.
"""

from __future__ import annotations

import ast
from typing import Optional

_FUNCTIONS = (ast.FunctionDef, ast.AsyncFunctionDef)
_BODIES = ("body", "orelse", "finalbody")


def _definition(resolver, name: str, j: int, depth: int = 0) -> Optional[tuple[int, ast.AST]]:
    """(file, def) of the module-level function `name` seen from file j: its own, or the one a
    `from M import name` of file j names (resolver: importers19's, its files by module name)."""
    tree = resolver.tree(j)
    if tree is None or depth > 2:
        return None
    for statement in tree.body:
        if isinstance(statement, _FUNCTIONS) and statement.name == name:
            return j, statement
    for statement in tree.body:
        if isinstance(statement, ast.ImportFrom) and statement.module:
            for alias in statement.names:
                if (alias.asname or alias.name) != name:
                    continue
                if statement.level:
                    from .modpaths import resolve_relative
                    target = resolver.by_name.get(resolve_relative(
                        resolver.results[j].relpath, statement.level, statement.module).replace("/", "."))
                else:
                    target = resolver.by_name.get(statement.module)
                if target is None or target == j:
                    return None
                return _definition(resolver, alias.name, target, depth + 1)
    return None


def _raising_probe(resolver, j: int, function: ast.AST, packages: set) -> Optional[tuple[str, str]]:
    """(package, the check's test) when `function`'s leading `if ...: raise` checks include `if not
    <probe of one of packages>: raise`."""
    from .tritonguards import source_text

    body = [s for s in function.body if not (isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant))]
    for statement in body:
        if not (isinstance(statement, ast.If) and not statement.orelse and statement.body
                and isinstance(statement.body[-1], ast.Raise)):
            return None  # (the leading checks end: what follows may return first)
        test = statement.test
        if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
            probed = resolver.probe(test.operand, j)  # (importers19's reading of a probe)
            if probed is not None and any(p == probed[0] or p.startswith(probed[0] + ".") for p in packages):
                return probed[0], source_text(test)
    return None


def raised_before(resolver, j: int, tree: ast.Module, parent: dict, statement: ast.AST,
                  packages: set) -> Optional[str]:
    """What keeps the import `statement` of file j off a host lacking `packages`: an earlier call
    of a helper raising first there (module doc), or None."""
    from .tritonguards import source_text

    child, current = statement, parent.get(id(statement))
    while current is not None and not isinstance(current, ast.Module):
        if isinstance(current, ast.ExceptHandler):
            return None
        for field in _BODIES:
            body = getattr(current, field, None)
            if not isinstance(body, list) or not any(child is s for s in body):
                continue
            if isinstance(current, ast.Try) and field == "body" and current.handlers:
                break  # (a handler may go on after the helper raised)
            for earlier in body:
                if earlier is child:
                    break
                if not (isinstance(earlier, ast.Expr) and isinstance(earlier.value, ast.Call)
                        and isinstance(earlier.value.func, ast.Name)):
                    continue
                found = _definition(resolver, earlier.value.func.id, j)
                if found is None:
                    continue
                raised = _raising_probe(resolver, found[0], found[1], packages)
                if raised is not None:
                    package, test = raised
                    return (f"after `{source_text(earlier.value)}` (line {earlier.lineno}), which raises "
                            f"where `{test}`, a probe of `{package}`")
        if isinstance(current, (*_FUNCTIONS, ast.ClassDef, ast.Lambda)):
            return None  # (the function's own body only: its callers are importers19's question)
        child, current = current, parent.get(id(current))
    return None
