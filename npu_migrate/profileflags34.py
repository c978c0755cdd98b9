"""A profiler a helper builds only when its caller asks, and nothing of the run calls the helper
(issue #16, policy P1; round-34 audit IC#3). Whole run, from runplan.whole_run_passes (after
optparams34.py).

ColossalAI's `examples/language/performance_evaluator.py`:

    def get_profile_context(enable_flag, warmup_steps, active_steps, save_dir, nsys=False):
        ...
        if enable_flag:
            ...
            return profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA], ...)   # NPU935
        else:
            return DummyProfiler()

The helper exists to pick between a profiler and a no-op stand-in, and no file of the run calls it:
a profile is taken only when a user's script calls it with the flag on, an explicit choice (the
tool's own opt-in profilers of vLLM are info for the same reason). Under policy P1 an NPU935 place
(a profiler asked for CUDA activity) inside the body of `if FLAG:` (or the true arm of `A if FLAG
else B`), FLAG a parameter of the enclosing function never reassigned there, whose other branch
returns or yields a no-op stand-in (`nullcontext()`, a `Dummy*`/`Null*`/`NoOp*`/`Fake*` call or
`None`), where the function's name occurs in no other file of the run and only at its `def` in its
own: info "reached on an NPU host only when `enable_flag` is passed true to `get_profile_context`
(...)". Never dropped (the user may pass it there).

Kept (the nearest true cases): a helper some file of the run calls (its flag may be on there: a
library's user of a plain function's flag, optparams34's test_h86 case), an `if FLAG:` whose other
branch profiles too or is missing, a flag reassigned in the function, any code other than NPU935.
"""

from __future__ import annotations

import ast
import re
from typing import Optional

from . import astcache

CHOSEN = ("reached on an NPU host only when `{flag}` is passed true to `{function}` (line {line}; otherwise "
          "it uses `{other}`, line {other_line}; no file of the run calls it): profiling on request, an opt-in")
_FUNCTIONS = (ast.FunctionDef, ast.AsyncFunctionDef)
_NO_OP = re.compile(r"^(Dummy|Null|NoOp|Noop|Fake)\w*$|^nullcontext$")


def _no_op(value: Optional[ast.AST]) -> bool:
    if value is None or isinstance(value, ast.Constant) and value.value is None:
        return True
    if isinstance(value, ast.Call):
        return bool(_NO_OP.match((astcache.dotted(value.func) or "").rpartition(".")[2]))
    return False


def _other(orelse: list) -> Optional[ast.AST]:
    """The no-op stand-in an `else:` returns or binds (its one statement), or None."""
    if len(orelse) != 1:
        return None
    stmt = orelse[0]
    if isinstance(stmt, ast.Return) and _no_op(stmt.value):
        return stmt.value if stmt.value is not None else stmt
    if isinstance(stmt, ast.Assign) and _no_op(stmt.value):
        return stmt.value
    return None


def _spans(function, flags: set) -> list[tuple[int, int, str, ast.AST, str]]:
    """(first, last line, the flag, the stand-in, the kind) of each profiled branch of the function."""
    out = []
    for node in ast.walk(function):
        if isinstance(node, ast.If) and isinstance(node.test, ast.Name) and node.test.id in flags and node.body:
            other = _other(node.orelse)
            if other is not None:
                out.append((node.body[0].lineno, node.body[-1].end_lineno or node.body[-1].lineno, node.test.id,
                            other, "if"))
        elif isinstance(node, ast.IfExp) and isinstance(node.test, ast.Name) and node.test.id in flags \
                and _no_op(node.orelse):
            out.append((node.body.lineno, node.body.end_lineno or node.body.lineno, node.test.id, node.orelse, "ifexp"))
    return out


def _flags(function) -> set:
    args = function.args
    names = {a.arg for a in (*args.posonlyargs, *args.args, *args.kwonlyargs)}
    stored = {n.id for n in ast.walk(function) if isinstance(n, ast.Name) and isinstance(n.ctx, (ast.Store, ast.Del))}
    return names - stored


def review(results: list, paths: Optional[dict] = None) -> list:
    """The results, with the NPU935 places of a profiler an uncalled helper builds only on request
    lowered to info (P1; this module's docstring)."""
    from .envskips29 import lower_result
    from .modpaths import RunTexts
    from .moot import is_open

    def wanted(f) -> bool:
        return f.code == "NPU935" and is_open(f) and not f.fixable and f.cell is None \
            and f.severity in ("error", "warning")

    candidates = [i for i, r in enumerate(results) if r.relpath.endswith(".py") and any(map(wanted, r.findings))]
    if not candidates:
        return results
    text_of = RunTexts(results, paths or {})
    out = list(results)
    for i in candidates:
        data = text_of(i)
        tree = astcache.parse(data) if data else None
        if tree is None:
            continue
        spans = []
        for function in (n for n in astcache.walk(tree) if isinstance(n, _FUNCTIONS)):
            found = _spans(function, _flags(function))
            if not found:
                continue
            word = re.compile(rb"\b" + re.escape(function.name.encode()) + rb"\b")
            if len(word.findall(data)) != 1 or any(j != i and word.search(text_of(j) or b"")
                                                    for j in range(len(results))):
                continue
            text = data.decode("utf-8", "replace")
            for first, last, flag, other, _kind in found:
                shown = " ".join((ast.get_source_segment(text, other) or "None").split())[:60]
                spans.append((first, last, CHOSEN.format(flag=flag, function=function.name, line=function.lineno,
                                                         other=shown, other_line=other.lineno)))
        if not spans:
            continue

        def reason_of(line: int, spans=spans) -> Optional[str]:
            return next((why for a, b, why in spans if a <= line <= b), None)

        out[i] = lower_result(results[i], reason_of, wanted)
    return out
