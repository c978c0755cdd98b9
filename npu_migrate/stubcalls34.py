"""A call of a stub that raises on an NPU host, reported, with the findings past it folded into it
(issue #16, round 32 audit GA#1).

Whole run (runplan.whole_run_passes, right after firstfail33.py). torchao's
`prototype/mx_formats/kernels.py` binds its Triton kernels only under a module-level flag an NPU
host answers False (`if _triton_kernels_available:`, built of `torch.cuda.is_available()`,
`is_sm_at_least_100()`, ...: importgates.gate_spans), and in the `else:` binds a stub of each
public name whose one statement is a `raise` (`def triton_to_mxfp8_dim0(...): raise
AssertionError("needs triton")`). A function of another module that imports the name and calls it
unconditionally (firstfail33's walk: its body, a `try`/`with` body, a loop that runs) fails there
on an NPU host, every time; an FP8 dtype label it hands `MXTensor` further down
(`elem_dtype=torch.float8_e4m3fn`, NPU913) is never reached.

Scoping the later finding would hide that failure, which nothing reported: the run reports the
call instead, an NPU910 error at the call ("call of `triton_to_mxfp8_dim0`: on an NPU host it is
the stub at kernels.py:997, which raises ...; the Triton kernels are bound only under `if
_triton_kernels_available:`"), and the open report-only findings past it in the same span
(firstfail33's `span`: the rest of its block, past a `for` and a `try` whose handlers leave, not
past a `with`) fold into that finding ("also at line N"): nothing lost, the first line an NPU
host really hits named.

Read narrowly: the gated `if` imports `triton` (the stub stands for a Triton kernel: NPU910); the
name is bound at module level only by that `if` and its `else`; the stub's body (its docstring
aside) is one `raise` of an exception. Kept as they are: a gate an NPU host may take (`if
has_triton():`, true with Triton-Ascend), a call under an `if` or after a `return`, a stub that
does something before raising, a caller with no open finding past the call (nothing to fold: no
new finding either), a finding before the call, a merged finding with a place outside the span whose message
goes on past its "also at" list (a note naming those places too: it stays whole).
"""

from __future__ import annotations

import ast
from dataclasses import replace
from typing import Optional

from . import astcache

_FUNCTIONS = (ast.FunctionDef, ast.AsyncFunctionDef)
FOLDED = "past it in the same function, never reached on an NPU host"


def _stub_body(function: ast.AST) -> Optional[ast.Raise]:
    """The one `raise` a stub's body is (its docstring aside), or None."""
    body = list(function.body)
    if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) \
            and isinstance(body[0].value.value, str):
        body = body[1:]
    if len(body) == 1 and isinstance(body[0], ast.Raise) and body[0].exc is not None:
        return body[0]
    return None


def _imports_triton(block: list) -> bool:
    for stmt in block:
        if isinstance(stmt, ast.Import) and any(a.name.split(".")[0] == "triton" for a in stmt.names):
            return True
        if isinstance(stmt, ast.ImportFrom) and not stmt.level and (stmt.module or "").split(".")[0] == "triton":
            return True
    return False


def stubs(tree: ast.Module, predicates: frozenset) -> dict:
    """{name: (stub, raise, gate)} of the module's Triton stubs an NPU host binds (module doc)."""
    from .importgates import gate_spans, module_bindings

    false_starts = {first for first, _last, _test in gate_spans(tree, module_bindings(tree), predicates)}
    out: dict = {}
    for stmt in tree.body:
        if not (isinstance(stmt, ast.If) and stmt.body and stmt.orelse and stmt.body[0].lineno in false_starts
                and _imports_triton(stmt.body)):
            continue
        for node in stmt.orelse:
            raised = _stub_body(node) if isinstance(node, _FUNCTIONS) else None
            if raised is not None:
                out[node.name] = (node, raised, stmt)
    if not out:
        return out
    # (a name the module binds anywhere else at module level may be another object there)
    for stmt in tree.body:
        if isinstance(stmt, ast.If) and any(stmt is gate for _s, _r, gate in out.values()):
            continue
        for node in ast.walk(stmt):
            names = [node.name] if isinstance(node, (*_FUNCTIONS, ast.ClassDef)) else \
                [(a.asname or a.name).split(".")[0] for a in node.names] if isinstance(node, (ast.Import, ast.ImportFrom)) \
                else [n.id for n in ast.walk(node) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)] \
                if isinstance(node, (ast.Assign, ast.AugAssign, ast.AnnAssign)) else []
            for name in names:
                out.pop(name, None)
            if isinstance(node, ast.Global):
                for name in node.names:
                    out.pop(name, None)
    return out


class _Stubbed:
    """firstfail33's `failing` questions (`imported(i, tree, name)`, `compiled_op`), answered for stubs only."""

    def __init__(self, results: list, modules, predicates: frozenset) -> None:
        self.results, self.modules, self.predicates = results, modules, predicates
        self.memo: dict = {}

    def compiled_op(self, call: ast.Call, i: int, tree: ast.Module) -> Optional[str]:
        """Compiled-op calls are firstfail33's own question (opcalls34.py), never a stub."""
        return None

    def imported(self, i: int, tree: ast.Module, name: str) -> Optional[str]:
        from .firstfail33 import import_origin

        origin = import_origin(self.results, self.modules, i, tree, name)
        if origin is None:
            return None
        j, real = origin
        if j not in self.memo:
            other = self.modules.tree(j)
            self.memo[j] = stubs(other, self.predicates) if other is not None else {}
        found = self.memo[j].get(real)
        if found is None:
            return None
        stub, raised, gate = found
        where = self.results[j].relpath
        return (f"`{real}`: on an NPU host it is the stub at {where}:{stub.lineno}, which raises "
                f"`{ast.unparse(raised.exc)}`: the Triton kernels are bound only under `if {ast.unparse(gate.test)}:` "
                f"({where}:{gate.lineno}), false there")


def review(results: list, paths: dict) -> list:
    """The results, with a call of a raising stub reported and the findings past it folded into
    it (this module's docstring)."""
    from .findings import Finding
    from .firstfail22 import finding_lines
    from .firstfail33 import first_failure, span
    from .folding import ALSO, Fold, ours, places_of
    from .importgates import false_predicates
    from .modpaths import RunModules, RunTexts, open_python
    from .moot import is_open

    candidates = open_python(results, is_open)
    if not candidates:
        return results
    text_of = RunTexts(results, paths)
    modules = RunModules(results, text_of)
    stubbed = None
    out = list(results)
    for i in candidates:
        data = text_of(i)
        if not data or b"import" not in data or b"def " not in data:
            continue
        tree = modules.tree(i)
        if tree is None:
            continue
        lines = {line for f in results[i].findings if is_open(f) and ours(f) for line in finding_lines(f)}
        if stubbed is None:
            python = [j for j, r in enumerate(results) if r.relpath.endswith(".py")]
            stubbed = _Stubbed(results, modules, false_predicates(python, text_of))
        added = []
        for function in astcache.nodes(tree, _FUNCTIONS):
            first, last = function.lineno, function.end_lineno or function.lineno
            if not any(first < line <= last for line in lines):
                continue
            try:
                found = first_failure(function.body, i, tree, function, stubbed, 0, None)
            except RecursionError:
                continue
            if found is None:
                continue
            path, why = found
            stmt = path[-1][0][path[-1][1]]
            call = next((c for c in ast.walk(stmt) if isinstance(c, ast.Call) and isinstance(c.func, ast.Name)
                         and why.startswith(f"`{c.func.id}`")), None)
            spans = span(path, function)
            if call is None or not any(a <= line <= b for a, b in spans for line in lines):
                continue
            added.append((Finding(path=results[i].relpath, line=call.lineno, column=call.col_offset + 1, code="NPU910",
                                  message=f"Triton kernel or Triton import: CUDA Triton kernels do not run on NPU: "
                                          f"call of {why}", fixable=False, source=ast.unparse(call.func),
                                  severity="error"), spans))
        if not added:
            continue
        findings = [*results[i].findings, *(f for f, _spans in added)]
        fold = Fold(findings)
        for new, spans in added:
            for finding in results[i].findings:
                if not (is_open(finding) and fold.movable(finding, new)):
                    continue
                places = [p for p in places_of(finding) if any(a <= p[0] <= b for a, b in spans)]
                # (a merged finding whose notes follow its "also at" list stays whole: they name its other places too)
                if places and (len(places) == len(places_of(finding)) or ALSO.search(finding.message)):
                    fold.move(finding, places, new)
        kept = [f for f in fold.result(FOLDED) if f not in [n for n, _s in added] or f.also]
        out[i] = replace(results[i], findings=sorted(kept))
    return out
