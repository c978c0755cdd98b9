"""Tests an NPU host runs only once a user sets an environment switch off by default (issue #16, policy
P1, round-29 audit DC#33). Whole run, from runplan.whole_run_passes (after registryoptin28.py, whose
reading of the project's `envs.py` table this one shares).

vLLM's `tests/distributed/test_split_group.py`:

    # The whole module exercises the split_group code path, which is opt-in
    # behind VLLM_DISTRIBUTED_USE_SPLIT_GROUP=1.
    pytestmark = pytest.mark.skipif(
        not envs.VLLM_DISTRIBUTED_USE_SPLIT_GROUP,
        reason=("VLLM_DISTRIBUTED_USE_SPLIT_GROUP=1 not set; split_group path is opt-in."),
    )

and `vllm/envs.py`: `"VLLM_DISTRIBUTED_USE_SPLIT_GROUP": lambda: bool(int(os.getenv(
"VLLM_DISTRIBUTED_USE_SPLIT_GROUP", "0")))`. By default the module is skipped, on an NPU host as
anywhere; it runs only when the user sets the variable: an explicit choice. Under policy P1 its
report-only errors and warnings become info naming the variable, where its default is read
(envs.py:line) and the skip that reads it: "reached on an NPU host only when the environment
variable `X` is set (...)". Never dropped, never a scope (the user may set it there).

The skip: a module-level `pytestmark = pytest.mark.skipif(not envs.X, ...)` (a list of marks too),
or a `@pytest.mark.skipif(not envs.X, ...)` decorator of a test function or class (with the
module-level helpers only such tests reach, testscopes.helper_scopes); X an entry of the project's
`envs.py` table off by default that no library file sets itself (registryoptin28.env_switches).

Kept (the nearest true cases): a switch on by default (`os.getenv("X", "1")`), one the library
sets, a condition with another operand (`not envs.X or not is_cuda()`: left to testscopes), a
variable outside the table, and code before the module-level skip.
"""

from __future__ import annotations

import ast
from typing import Optional

from . import astcache

SET = ("reached on an NPU host only when the environment variable `{name}` is set ({how}): `{skip}` "
       "(line {line}) skips {what} otherwise: an opt-in, to port if it is used there")


def _switch(condition: ast.AST, switches: dict) -> Optional[str]:
    """X of `not envs.X` where X is a switch off by default."""
    if isinstance(condition, ast.UnaryOp) and isinstance(condition.op, ast.Not):
        operand = condition.operand
        if isinstance(operand, ast.Attribute) and isinstance(operand.value, ast.Name) \
                and operand.value.id == "envs" and operand.attr in switches:
            return operand.attr
    return None


def _skip_switch(mark: ast.AST, switches: dict) -> Optional[str]:
    """The switch a `pytest.mark.skipif(not envs.X, ...)` mark (or a list of marks) reads."""
    marks = mark.elts if isinstance(mark, (ast.List, ast.Tuple)) else [mark]
    for node in marks:
        if isinstance(node, ast.Call) and astcache.dotted(node.func).endswith("mark.skipif"):
            condition = node.args[0] if node.args else next(
                (k.value for k in node.keywords if k.arg == "condition"), None)
            found = _switch(condition, switches) if condition is not None else None
            if found is not None:
                return found
    return None


def _scopes(tree: ast.Module, switches: dict) -> list[tuple[int, int, str, str, int, str]]:
    """(first, last line, variable, the skip's text, its line, what it skips) of the opt-in scopes."""
    from .testscopes import helper_scopes

    end = max((getattr(n, "end_lineno", 0) or 0) for n in tree.body) if tree.body else 1
    for stmt in tree.body:
        if isinstance(stmt, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "pytestmark" for t in stmt.targets):
            name = _skip_switch(stmt.value, switches)
            if name is not None:
                return [(stmt.lineno, end, name, "pytestmark", stmt.lineno, "this test module")]
    out = []
    for stmt in tree.body:
        if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            for decorator in stmt.decorator_list:
                name = _skip_switch(decorator, switches)
                if name is not None:
                    first = min([stmt.lineno, *(d.lineno for d in stmt.decorator_list)])
                    out.append((first, stmt.end_lineno or stmt.lineno, name, "@pytest.mark.skipif", decorator.lineno,
                                f"`{stmt.name}`"))
                    break
    if out:
        helpers = helper_scopes(tree, [(a, b, f"{name}\0{skip}\0{line}\0{what}") for a, b, name, skip, line, what in out])
        for first, last, why in helpers:
            name, skip, line, what = why.split(": ", 1)[-1].split("\0")
            out.append((first, last, name, skip, int(line), what))
    return out


def lower_places(finding, reason_of) -> Optional[list]:
    """The finding lowered whole where every place has one reason (one finding stays one), else
    split (findings.lower_pieces). Public: mainroute29, mocked29 and unlaunched29 lower the same way."""
    import dataclasses

    from .findings import lower_pieces

    reasons = {reason_of(line) for line in (finding.line, *(line for line, _c, _s in finding.also))}
    if len(reasons) == 1 and None not in reasons:
        return [dataclasses.replace(finding, severity="info", message=f"{finding.message} ({reasons.pop()})")]
    return lower_pieces(finding, reason_of)


def lower_result(result, reason_of, wanted):
    """`result` with each finding `wanted` accepts lowered by lower_places (the same result when
    none changes). Public: envchains32 and ifexpfallbacks30 lower a file's findings the same way."""
    import dataclasses

    findings, changed = [], False
    for finding in result.findings:
        pieces = lower_places(finding, reason_of) if wanted(finding) else None
        changed = changed or pieces is not None
        findings.extend([finding] if pieces is None else pieces)
    return dataclasses.replace(result, findings=sorted(findings)) if changed else result


def review(results: list, paths: Optional[dict] = None) -> list:
    """The results, with the open places inside such opt-in tests lowered to info (P1)."""
    from .importgates import is_test
    from .modpaths import RunModules, RunTexts
    from .moot import is_open
    from .registryoptin28 import env_switches

    def wanted(f) -> bool:
        return is_open(f) and not f.fixable and f.cell is None and f.severity in ("error", "warning")

    candidates = [i for i, r in enumerate(results) if r.relpath.endswith(".py") and is_test(r.relpath)
                  and any(map(wanted, r.findings))]
    if not candidates:
        return results
    text_of = RunTexts(results, paths or {})
    candidates = [i for i in candidates if b"skipif" in (text_of(i) or b"") and b"envs." in (text_of(i) or b"")]
    if not candidates:
        return results
    python = [i for i, r in enumerate(results) if r.relpath.endswith(".py")]
    library = [i for i in python if not is_test(results[i].relpath)]
    modules = RunModules(results, text_of)
    switches = env_switches(results, library, text_of, modules)
    if not switches:
        return results
    out = list(results)
    for i in candidates:
        tree = modules.tree(i)
        if tree is None:
            continue
        scopes = _scopes(tree, switches)
        if not scopes:
            continue

        def reason_of(line: int, scopes=scopes) -> Optional[str]:
            scope = next((s for s in scopes if s[0] <= line <= s[1]), None)
            if scope is None:
                return None
            _a, _b, name, skip, at, what = scope
            return SET.format(name=name, how=switches[name], skip=skip, line=at, what=what)

        out[i] = lower_result(results[i], reason_of, wanted)
    return out
