"""An import of a CUDA-only package inside a local function that only a `try` catching ImportError
calls (issue #16, round-32 audit GC#6; round 31 FC#15 the same shape). Per file, from
run.migrate_file (after the per-file merge, last).

vLLM's `vllm/models/muse_spark/nvidia/ops/mnnvl_fusions.py`:

    def _create_on_all_tp_ranks(name, create):
        ...
        try:
            workspace = create()
        except (ImportError, RuntimeError, ValueError) as exc:
            logger.warning("Muse Spark fused %s failed: %s", name, exc)
            workspace = None
        ...

    def maybe_create_all_gather_dual_norm(hidden_size, max_tokens, *, enable_pdl):
        def create():
            from flashinfer.comm.mnnvl_cutedsl_ag import MNNVLCuteDSLAllGatherDualNormWorkspace   # NPU911
            return MNNVLCuteDSLAllGatherDualNormWorkspace(...)

        return _create_on_all_tp_ranks("...", create)

The local function (`create`) is named nowhere but as an argument of a module-level function of the
same file, which calls that parameter only inside the body of a `try` whose handler catches
ImportError and goes on (`workspace = None`). Where the package is missing, as on an NPU host, the
import fails inside that `try` and the code takes its fallback: a guarded import one call away, run
as written (moot.AS_WRITTEN "guarded import: the fallback runs on NPU": a named scope). The note
probed22.py gave before ("a probe for its callers to ask first ... only a call that skips it reaches
this import") did not fit: no caller can reach a local function.

`review` lowers a report-only NPU911 finding (error, warning or info not yet moot) all of whose
places are import statements directly in the body of such a local function.

Kept (the nearest true cases): a local function the receiver calls outside such a `try` (or in one
whose handlers do not catch ImportError), one its enclosing function also calls or returns itself,
one handed to a function of another module (whose body is not read here), and an import in a
module-level function (callers elsewhere may call it unguarded).
"""

from __future__ import annotations

import ast
from dataclasses import replace
from typing import Optional

from . import astcache
from .findings import Finding

GUARDED_CLOSURE = ("guarded import: the fallback runs on NPU: it sits in `{closure}`, a local function `{outer}` "
                   "hands only to `{receiver}` (line {line}), which calls it only inside a `try` whose `except` "
                   "catches ImportError and goes on")
_IMPORT_ERRORS = frozenset({"ImportError", "ModuleNotFoundError", "Exception", "BaseException"})


def _open(finding: Finding) -> bool:
    from .moot import is_moot

    return finding.code == "NPU911" and not finding.fixable and finding.cell is None and not is_moot(finding)


def review(findings: list[Finding], text: str) -> list[Finding]:
    """The findings, with those of the docstring's shape lowered to info with GUARDED_CLOSURE."""
    if not any(_open(f) for f in findings) or "def " not in text or "try:" not in text:
        return findings
    tree = astcache.parse(text.encode("utf-8", "surrogatepass"))
    if tree is None:
        return findings
    out = []
    for finding in findings:
        if _open(finding):
            reasons = [_reason(tree, line) for line in (finding.line, *(p[0] for p in finding.also))]
            if reasons and all(reasons):
                finding = replace(finding, severity="info", message=f"{finding.message} ({reasons[0]})")
        out.append(finding)
    return out


def _catches_import_error(handler: ast.ExceptHandler) -> bool:
    if handler.type is None:
        return True
    kinds = handler.type.elts if isinstance(handler.type, ast.Tuple) else [handler.type]
    return any((astcache.dotted(k) or "").rpartition(".")[2] in _IMPORT_ERRORS for k in kinds)


def _reason(tree: ast.Module, line: int) -> Optional[str]:
    """GUARDED_CLOSURE filled in for the import on `line`, or None."""
    functions = {stmt.name: stmt for stmt in tree.body if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef))}
    for outer in functions.values():
        if not outer.lineno <= line <= (outer.end_lineno or outer.lineno):
            continue
        for closure in outer.body:
            if not (isinstance(closure, ast.FunctionDef) and any(
                    isinstance(s, (ast.Import, ast.ImportFrom)) and s.lineno <= line <= (s.end_lineno or s.lineno)
                    for s in closure.body)):
                continue
            receiver = _only_receiver(outer, closure, functions)
            if receiver is not None:
                return GUARDED_CLOSURE.format(closure=closure.name, outer=outer.name, receiver=receiver[0].name,
                                              line=receiver[1])
        return None
    return None


def _only_receiver(outer: ast.AST, closure: ast.FunctionDef, functions: dict) -> Optional[tuple[ast.AST, int]]:
    """(the module function, the line of its guarded call) when every use of `closure` in `outer`
    is an argument of calls to one module-level function that calls that parameter only in a
    `try` catching ImportError."""
    parents: dict[int, ast.AST] = {}
    uses: list[ast.Name] = []
    for node in ast.walk(outer):
        for child in ast.iter_child_nodes(node):
            parents[id(child)] = node
        if isinstance(node, ast.Name) and node.id == closure.name:
            if not isinstance(node.ctx, ast.Load):
                return None  # (bound again)
            uses.append(node)
    found: Optional[tuple[ast.AST, int]] = None
    for use in uses:
        call = parents.get(id(use))
        keyword = None
        if isinstance(call, ast.keyword):
            keyword, call = call.arg, parents.get(id(call))
        if not (isinstance(call, ast.Call) and isinstance(call.func, ast.Name) and call.func.id in functions
                and use is not call.func):
            return None  # (called, returned, stored, or handed to a function not of this module)
        receiver = functions[call.func.id]
        params = [a.arg for a in (*receiver.args.posonlyargs, *receiver.args.args)]
        if keyword is not None:
            param = keyword
        else:
            index = next(i for i, a in enumerate(call.args) if a is use) if use in call.args else -1
            if index < 0 or index >= len(params):
                return None  # (in *args)
            param = params[index]
        line = _guarded_calls(receiver, param)
        if line is None or (found is not None and found[0] is not receiver):
            return None
        found = (receiver, line)
    return found


def _guarded_calls(function: ast.AST, param: str) -> Optional[int]:
    """The line of the first call of `param` in `function` when every use of it is a call inside
    the body of a `try` with a handler catching ImportError; None otherwise."""
    guarded: set[int] = set()
    for node in ast.walk(function):
        if isinstance(node, ast.Try) and any(_catches_import_error(h) for h in node.handlers):
            for stmt in node.body:
                guarded.update(id(n) for n in ast.walk(stmt))
    calls = []
    for node in ast.walk(function):
        if isinstance(node, ast.Name) and node.id == param:
            calls.append(node)
        elif isinstance(node, ast.arg) and node.arg == param and node not in (
                *function.args.posonlyargs, *function.args.args, *function.args.kwonlyargs):
            return None  # (a nested function's own parameter of that name: not read here)
    func_of = {id(n.func): n for n in ast.walk(function) if isinstance(n, ast.Call)}
    if not calls or any(id(n) not in func_of or id(n) not in guarded for n in calls):
        return None
    return min(n.lineno for n in calls)
