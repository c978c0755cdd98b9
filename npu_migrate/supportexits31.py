"""Code after a test's or a script's own exit on a support check that answers no on an NPU host
(issue #16, round-31 audit FC#21, FA#22). Whole run, from runplan.whole_run_passes, right after
supportgates27.py, whose reading of support checks it reuses.

vLLM's `tests/model_executor/kernels/test_b12x_linear.py`:

    supported, reason = B12xNvFp4W4A16LinearKernel.is_supported()
    if not supported:
        pytest.skip(reason)
    ...
    scales = (...).to(torch.float8_e4m3fn)                               # NPU913

and `benchmarks/kernels/benchmark_dsv41_mega_attn.py`:

    def main():
        ok, reason = is_flashmla_mega_attn_supported()
        if not ok:
            raise SystemExit(reason)
        ... bench_decode(...)            # -> time_graph(): torch.cuda.CUDAGraph   NPU202

The check lives in another module: the kernel class inherits `is_supported` from a base whose
first test is `if not current_platform.is_cuda(): return False, "..."`; the function returns
`False, ...` unless `current_platform.is_device_capability_family(100)`. reach.py and capgates.py
read exits whose condition they decide in the file itself; this condition is a name bound from
such a call. Here, in a block (a function's body, a module's, an `if __name__ == "__main__":`
body), a statement

- `ok, why = C.<check>()` (C a class the run defines once, <check> a support-check name
  supportgates27.checks() knows; its answer, inherited or its own, read by supportgates27's
  `candidate_rejected`), or `ok, why = f()` / `ok = f()` (f a function the module binds, its
  definition found through the run's imports: flagcalls19.Run.lookup), with no arguments but
  constants,
- followed within a few statements, with `ok` not bound again, by `if not ok:` (no `else`)
  whose last statement leaves the block (`pytest.skip(...)`, `sys.exit(...)`, `return`, `raise
  SystemExit(...)`; in a test or a benchmark any `raise`),

where the check answers no on an NPU host: f's statements read in order (flagcalls19's truth for
each `if`): a `return False` (the first element where the caller unpacks a tuple, the whole value
where it does not), a `raise`, or an `if` the reading cannot decide whose taken branch only
answers no, passed over; an assignment or a call statement is passed over (it may raise: no
answer of yes either). The statements after the `if` in that block, and the module-level
functions of the file referenced only from them (reach.reached_only_from), never run there: their
report-only findings become named scopes (flags16.BRANCH, moot.py: "in a branch an NPU host does
not take"), naming the check and why it says no.

Kept (the nearest true cases): a check that answers yes or cannot be decided on an NPU host
(`is_cuda_alike() or is_npu()`, a capability only), a check with non-constant arguments, `ok = C.
is_supported()` without unpacking (a tuple is always true), an `if not ok:` that only warns and
goes on, the code before the exit, and a function also called from code an NPU host runs.
"""

from __future__ import annotations

import ast
from typing import Optional

_FUNCTIONS = (ast.FunctionDef, ast.AsyncFunctionDef)
_WINDOW = 4  # statements between the check and its `if not ok:`
_LEAVE_CALLS = frozenset({"skip", "exit", "_exit", "SkipTest"})
_QUIET = frozenset({"SystemExit", "pytest.skip.Exception", "unittest.SkipTest", "SkipTest"})


def _constant_args(call: ast.Call) -> bool:
    return all(isinstance(a, ast.Constant) for a in [*call.args, *(k.value for k in call.keywords)]) \
        and all(k.arg is not None for k in call.keywords)


def _check_call(stmt: ast.stmt) -> Optional[tuple]:
    """(flag name, unpacked, call) of `ok, why = <call>()` / `ok = <call>()`, or None."""
    if not (isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.value, ast.Call)):
        return None
    target, call = stmt.targets[0], stmt.value
    if not _constant_args(call):
        return None
    if isinstance(target, ast.Tuple) and target.elts and isinstance(target.elts[0], ast.Name):
        return target.elts[0].id, True, call
    if isinstance(target, ast.Name):
        return target.id, False, call
    return None


def _leaves(stmt: ast.stmt, test_side: bool) -> bool:
    from . import astcache

    if isinstance(stmt, ast.Return):
        return True
    if isinstance(stmt, ast.Raise) and stmt.exc is not None:
        exc = stmt.exc.func if isinstance(stmt.exc, ast.Call) else stmt.exc
        return test_side or (astcache.dotted(exc) or "") in _QUIET
    if isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call):
        return (astcache.dotted(stmt.value.func) or "").rpartition(".")[2] in _LEAVE_CALLS
    return False


def _binds(stmt: ast.stmt, name: str) -> bool:
    return any(isinstance(n, ast.Name) and n.id == name and not isinstance(n.ctx, ast.Load) for n in ast.walk(stmt))


def _exit_after(body: list, index: int, flag: str, test_side: bool) -> Optional[int]:
    """The index of the `if not <flag>:` exit a few statements after `body[index]`, or None."""
    for k in range(index + 1, min(len(body), index + 1 + _WINDOW)):
        stmt = body[k]
        if isinstance(stmt, ast.If) and not stmt.orelse and isinstance(stmt.test, ast.UnaryOp) \
                and isinstance(stmt.test.op, ast.Not) and isinstance(stmt.test.operand, ast.Name) \
                and stmt.test.operand.id == flag and stmt.body and _leaves(stmt.body[-1], test_side):
            return k
        if _binds(stmt, flag):
            return None
    return None


def _blocks(tree: ast.Module):
    """Every statement list of the module (function bodies, `if` branches, the module's own)."""
    stack: list = [tree.body]
    while stack:
        body = stack.pop()
        yield body
        for stmt in body:
            for field in ("body", "orelse", "finalbody"):
                inner = getattr(stmt, field, None)
                if isinstance(inner, list) and inner and isinstance(inner[0], ast.stmt):
                    stack.append(inner)
            for handler in getattr(stmt, "handlers", ()) or ():
                stack.append(handler.body)


def _show(node: ast.AST) -> str:
    text = " ".join(ast.unparse(node).split())
    return text if len(text) <= 80 else text[:77] + "..."


class _Refusals:
    """The answers "no" of the run's support checks on an NPU host (memo per function)."""

    def __init__(self, run, support) -> None:
        self.run, self.support = run, support
        self.memo: dict = {}

    def of_call(self, i: int, call: ast.Call, unpacked: bool) -> Optional[str]:
        from .supportgates27 import checks

        func = call.func
        if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name) and func.attr in checks():
            if not unpacked:
                return None  # (`ok = C.is_supported()`: the check may answer a tuple, always true)
            words = self.support.candidate_rejected(func.value.id)
            return None if words is None else f"`{func.value.id}`, {words}"
        if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name):
            found = self._module_function(i, func)  # (`fm.is_x_supported()`, round 34 IC#33)
        elif isinstance(func, ast.Name):
            found = self.run.lookup(i, func.id)
        else:
            return None
        if not found or found[0] != "def":
            return None
        _kind, function, k = found
        key = (k, function.lineno, unpacked)
        if key not in self.memo:
            from . import astcache

            tree = self.run.tree(k)
            told = None if tree is None else self._refuses(k, tree, astcache.parents(tree), function.body, unpacked)
            where = self.run.results[k].relpath
            self.memo[key] = None if told is None else \
                f"`{function.name}()` ({where}:{function.lineno}) answers no on an NPU host: {told}"
        return self.memo[key]

    def _module_function(self, i: int, func: ast.Attribute):
        """("def", FunctionDef, j) of `m.f` where every binding of `m` in file i is `import a.b as m`
        (at its top or in a function: `import vllm.v1.attention.ops.flashmla as fm` in the test)
        and module a.b of the run defines f once at its top; None otherwise."""
        from . import astcache

        tree, name, dotted = self.run.tree(i), func.value.id, set()
        for node in astcache.walk(tree) if tree is not None else ():
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                for alias in node.names:
                    if (alias.asname or alias.name.split(".")[0]) == name:
                        dotted.add(alias.name if isinstance(node, ast.Import) and alias.asname else "")
            elif isinstance(node, (ast.Name, ast.arg)) and getattr(node, "id", getattr(node, "arg", None)) == name \
                    and not isinstance(getattr(node, "ctx", None), ast.Load):
                return None
            elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and node.name == name:
                return None
        if len(dotted) != 1 or "" in dotted:
            return None
        j = self.run.module(dotted.pop())
        return None if j is None else self.run.lookup(j, func.attr)

    def _refuses(self, k: int, tree: ast.Module, parents: dict, body: list, unpacked: bool) -> Optional[str]:
        """What makes the statements answer no on an NPU host, or None (yes, unknown, falls off)."""
        from .flagtruth import UNKNOWN as _U

        for stmt in body:
            if isinstance(stmt, (ast.Pass, ast.Import, ast.ImportFrom, ast.Assign, ast.AnnAssign, ast.Expr, ast.Delete)):
                continue  # (a docstring, a binding, a call: it may raise, never answers yes)
            if isinstance(stmt, ast.Raise):
                return f"line {stmt.lineno} raises"
            if isinstance(stmt, ast.Return):
                value = stmt.value
                if unpacked:
                    if not (isinstance(value, ast.Tuple) and value.elts):
                        return None
                    value = value.elts[0]
                elif isinstance(value, ast.Tuple):
                    return None
                if isinstance(value, ast.Constant) and value.value in (False, None):
                    return f"line {stmt.lineno} returns {value.value}"
                if value is not None and not isinstance(value, ast.Constant) \
                        and self.support.truth(k, tree, parents, value, stmt, []) is False:
                    return f"`{_show(value)}` (line {stmt.lineno}) is False there"
                return None
            if not isinstance(stmt, ast.If):
                return None
            truth = self.support.truth(k, tree, parents, stmt.test, stmt, [])
            if truth is True or truth is False:
                branch = stmt.body if truth else stmt.orelse
                if any(isinstance(n, (ast.Return, ast.Raise)) for s in branch for n in ast.walk(s)):
                    told = self._refuses(k, tree, parents, branch, unpacked)
                    return None if told is None else f"`{_show(stmt.test)}` is {truth} there, then {told}"
                continue
            if truth is not _U and truth not in (True, False):
                return None
            # (undecided: each branch that may leave must answer no; one that falls through goes on)
            for branch in (stmt.body, stmt.orelse):
                if any(isinstance(n, (ast.Return, ast.Raise)) for s in branch for n in ast.walk(s)) \
                        and self._refuses(k, tree, parents, branch, unpacked) is None:
                    return None
        return None


def _gated(tree: ast.Module, i: int, ask, test_side: bool) -> list:
    """(first line, last line, reason, False) of the code after each exit on a refusing check."""
    out = []
    for body in _blocks(tree):
        for index, stmt in enumerate(body):
            found = _check_call(stmt)
            if found is None:
                continue
            flag, unpacked, call = found
            exit_index = _exit_after(body, index, flag, test_side)
            if exit_index is None or exit_index + 1 >= len(body):
                continue
            told = ask(i, call, unpacked)
            if told is None:
                continue
            last = max(getattr(s, "end_lineno", None) or s.lineno for s in body)
            out.append((body[exit_index + 1].lineno, last,
                        f"after the exit on `not {flag}` (line {body[exit_index].lineno}): {told}", False))
            break  # (nothing after the exit in this block runs)
    return out


def review(results: list, paths: dict) -> list:
    """The results, with the report-only places after a support-check exit lowered to named scopes
    (this module's docstring)."""
    from . import astcache
    from .callees22 import never_imported
    from .dispatch import gates as dispatch_gates
    from .flagcalls19 import Run, lower_result
    from .flags16 import BRANCH
    from .modpaths import RunTexts, open_python
    from .moot import is_open, to_scopes
    from .reach import reached_only_from
    from .supportgates27 import Support, is_test_side

    candidates = open_python(results, is_open)
    if not candidates:
        return results
    text_of = RunTexts(results, paths)
    state: list = []
    out = list(results)
    changed = []
    for i in candidates:
        data = text_of(i)
        if not data or b"if not " not in data:
            continue
        tree = astcache.parse(data)
        if tree is None:
            continue

        def ask(j: int, call: ast.Call, unpacked: bool, tree=tree) -> Optional[str]:
            if not state:  # (the run's reading is built once, when a file first holds the shape)
                run = Run(results, text_of)
                python = [k for k, r in enumerate(results) if r.relpath.endswith(".py")]
                state.append(_Refusals(run, Support(run, dispatch_gates(results, python, text_of),
                                                    never_imported(results))))
            state[0].run.trees.setdefault(j, tree)
            return state[0].of_call(j, call, unpacked)

        relpath = results[i].relpath
        try:
            blocks = _gated(tree, i, ask, is_test_side(relpath))
        except RecursionError:
            continue
        if not blocks:
            continue
        blocks += reached_only_from(tree, blocks, relpath)

        def reason_of(line: int, blocks=blocks) -> Optional[str]:
            return next((f"{BRANCH}: {b[2]}" for b in blocks if b[0] <= line <= b[1]), None)

        lowered = lower_result(out[i], is_open, reason_of)
        if lowered is not out[i]:
            out[i] = lowered
            changed.append(i)
    for i, result in zip(changed, to_scopes([out[i] for i in changed])):
        out[i] = result
    return out
