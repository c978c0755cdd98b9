"""A CUDA-only import an NPU host never runs, its names read only inside the module's functions
(issue #16, round-20 audit BD#23: "an import under a module-level flag imported from a sibling module,
where the flag is a function that combines an SM-capability test with a try-import probe").
Called from flagcalls19.review for each import it finds in a block an NPU host does not take.

    # compile_utils.py (a wrapper module of a JIT kernel package)
    from pkg.deep_gemm_wrapper.configurer import ENABLE_JIT_DEEPGEMM   # False on an NPU host
    if ENABLE_JIT_DEEPGEMM:
        import deep_gemm                       # never runs there
    def _compile_all(...):
        deep_gemm.set_compile_mode(1)          # a NameError there, if an NPU host calls it

flagcalls19.py lowers the places in such a block to a named scope, except an import whose names are
read outside every block (flags16.read_outside): that import stayed an error worded as if the import
itself failed, which it never does on an NPU host (the audit read it as false). Whether an NPU host
calls the functions that read the names is another module's decision (SGLang calls one wrapper
helper, `configure_deep_gemm_num_sms`, from its two-batch-overlap path on any non-ROCm host), so the
finding is not dropped: when every such read lies in the body of a function (a method, a nested
function) of the module, and no top-level statement of the module calls that function (nor builds
its class) at import, the import is info saying what holds: the import does not run there (the
block's reason, the flag and where it is computed), and the functions that read its names fail
with a NameError if an NPU host calls them (their names and lines, to review their callers). Not a
named scope: a call on an NPU host is a real failure this pass cannot rule out.

A read at module level, in a class body, a decorator or a default value (all evaluated at import),
or in a function the module's top level calls, keeps the error: the module fails as soon as it loads.
"""

from __future__ import annotations

import ast

from . import astcache

_FUNCTIONS = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)


def _enclosing(node: ast.AST, parents: dict) -> tuple[list[str], str] | None:
    """(qualified name parts, outermost name) of the function whose BODY holds `node` (not its
    decorators, defaults or annotations: those run at definition), or None at import-time code."""
    child, parent = node, parents.get(id(node))
    function = None
    while parent is not None:
        if isinstance(parent, _FUNCTIONS):
            body = parent.body if isinstance(parent.body, list) else [parent.body]
            if any(child is stmt for stmt in body):
                function = parent
                break
        child, parent = parent, parents.get(id(parent))
    if function is None:
        return None
    names: list[str] = []
    node = function
    while node is not None:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.append(node.name)
        elif isinstance(node, ast.Lambda):
            names.append("<lambda>")
        node = parents.get(id(node))
    names.reverse()
    return names, names[0]


def _called_at_import(tree: ast.Module, parents: dict) -> set[str]:
    """Names the module's import-time code (top level, class bodies, decorators, defaults) calls,
    bare decorators included."""
    out: set[str] = set()
    for node in astcache.nodes(tree, ast.Call):
        if isinstance(node.func, ast.Name) and _enclosing(node, parents) is None:
            out.add(node.func.id)
    # (a bare `@helper` over a definition at import time calls the helper then)
    for node in astcache.nodes(tree, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        if _enclosing(node, parents) is None:
            out.update(d.id for d in node.decorator_list if isinstance(d, ast.Name))
    return out


def functions_reading(tree: ast.Module, reads: list[tuple[str, int]]) -> list[tuple[str, int]] | None:
    """(qualified function name, line) of each read (flags16.read_outside's (name, line) pairs) when
    every one lies in the body of a function the module's import-time code never calls; else None."""
    if not reads:
        return None
    parents = astcache.parents(tree)
    wanted = set(reads)
    found: list[tuple[str, int]] = []
    outermost: set[str] = set()
    for node in astcache.nodes(tree, ast.Name):
        if (node.id, node.lineno) not in wanted or not isinstance(node.ctx, ast.Load):
            continue
        held = _enclosing(node, parents)
        if held is None:
            return None
        found.append((".".join(held[0]), node.lineno))
        outermost.add(held[1])
    if not found or outermost & _called_at_import(tree, parents):
        return None
    return sorted(set(found), key=lambda item: item[1])


def reason(block_reason: str, reading: list[tuple[str, int]]) -> str:
    """The info's reason: the import does not run on an NPU host, and where its names are read."""
    from .flags16 import BRANCH

    why = block_reason[len(BRANCH) + 2:] if block_reason.startswith(f"{BRANCH}: ") else block_reason
    why = f"under {why}" if why.startswith("`") else why  # (`FLAG`, `not (FLAG)`; else "after `assert ...`")
    by_function: dict[str, list[int]] = {}
    for name, line in reading:
        by_function.setdefault(name, []).append(line)
    shown = [f"`{name}` (line{'s' if len(lines) > 1 else ''} {', '.join(map(str, lines))})"
             for name, lines in by_function.items()]
    listed = ", ".join(shown[:6]) + (f" and {len(shown) - 6} more" if len(shown) > 6 else "")
    return (f"the import lies in a block an NPU host does not run, {why}; its names are read only in this module's "
            f"functions {listed}, which fail with a NameError there if called: review that an NPU host "
            f"never calls them")
