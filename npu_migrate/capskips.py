"""Test modules that skip themselves through a helper that requires a capability an NPU lacks.

A test module of a distributed FP8 suite skips at import unless its shared helper finds the device
fit (round-14 audit AM#12, our own shape below):

    from _dist_utils import get_skip_reason          # a module beside the test
    if skip_reason := get_skip_reason(min_devices=4):
        pytest.skip(skip_reason, allow_module_level=True)

where `get_skip_reason` returns a reason string on each failed check, among them `if not
is_sm_at_least_90(): return "requires SM90+"`, and None at the end. On an NPU host that check is
true (testscopes: `is_sm_at_least_90()` is false there), so every return it reaches there is a
non-empty reason (npugates.live_returns): the module skips, and nothing after the skip runs. The
findings after it are lowered to info "in a test that does not run on an NPU host" (a named
skipped scope, moot.py); the code before the skip (imports) keeps its findings.

The helper is read one level deep: defined in the file itself, or imported by name from a module
of the run beside it (`from _dist_utils import f`, `from ._dist_utils import f`). A whole-run pass
(runplan.whole_run_passes): only test files whose text holds `allow_module_level` are parsed.
"""

from __future__ import annotations

import ast
import dataclasses
import posixpath
import re

from . import astcache

_TEST_FILE = re.compile(r"(^|/)(tests?/|test_[^/]*\.py$|[^/]*_test\.py$|conftest\.py$)")
_FUNCTIONS = (ast.FunctionDef, ast.AsyncFunctionDef)


def _module_skip(stmt: ast.stmt) -> bool:
    """`pytest.skip(..., allow_module_level=True)` in an `if` body."""
    for node in ast.walk(stmt):
        if isinstance(node, ast.Call) and (astcache.dotted(node.func) or "").rpartition(".")[2] == "skip" \
                and any(k.arg == "allow_module_level" for k in node.keywords):
            return True
    return False


def _skip_calls(tree: ast.Module):
    """(the `if`, the helper's name) of the module-level `if <helper(...)>:` / `if r := helper(...):`
    statements whose body skips the module."""
    for stmt in tree.body:
        if isinstance(stmt, ast.If) and not stmt.orelse and any(_module_skip(s) for s in stmt.body):
            test = stmt.test.value if isinstance(stmt.test, ast.NamedExpr) else stmt.test
            if isinstance(test, ast.Call) and isinstance(test.func, ast.Name):
                yield stmt, test.func.id


def _source_of(tree: ast.Module, name: str, relpath: str) -> str | None:
    """The relpath of the module the file imports `name` from, beside it (or the file itself when
    it defines `name` at module level), else None."""
    for stmt in tree.body:
        if isinstance(stmt, _FUNCTIONS) and stmt.name == name:
            return relpath
        if isinstance(stmt, ast.ImportFrom) and stmt.module and stmt.level in (0, 1) \
                and any((a.asname or a.name) == name and a.name == name for a in stmt.names):
            folder = posixpath.dirname(relpath)
            return posixpath.join(folder, *stmt.module.split(".")) + ".py"
    return None


def _truthy(node: ast.AST | None) -> bool:
    """A value true wherever it is returned: a non-empty string, an f-string with text, True."""
    if isinstance(node, ast.Constant):
        return node.value is True or (isinstance(node.value, str) and node.value != "")
    if isinstance(node, ast.JoinedStr):
        return any(isinstance(v, ast.Constant) and v.value for v in node.values)
    return False


def _always_reason(function: ast.AST, truth) -> bool:
    """Whether every return of the function an NPU host may reach is a skip reason, a gate
    decided there having cut off the others (`return None` at the end)."""
    from .npugates import live_returns

    if any(isinstance(n, (ast.Yield, ast.YieldFrom, ast.Await)) for n in ast.walk(function)):
        return False
    found = live_returns(function, truth)
    if found is None:
        return False
    values, cut = found
    return bool(cut and values and all(_truthy(v) for v in values))


def review(results: list, paths: dict) -> list:
    """The results, with the report-only findings after a module-level skip that fires on an NPU
    host through a helper (this module's docstring) lowered to info."""
    from .modpaths import RunTexts
    from .moot import is_moot

    candidates = [i for i, r in enumerate(results) if r.relpath.endswith(".py") and _TEST_FILE.search(r.relpath)
                  and any(not f.fixable and f.cell is None and not is_moot(f) for f in r.findings)]
    if not candidates:
        return results
    text_of = RunTexts(results, paths)
    index = {r.relpath: i for i, r in enumerate(results)}
    out = list(results)
    for i in candidates:
        data = text_of(i)
        if not data or b"allow_module_level" not in data:
            continue
        tree = astcache.parse(data)
        if tree is None:
            continue
        gate = _firing_skip(tree, results[i].relpath, data, index, text_of)
        if gate is None:
            continue
        after, why = gate
        changed, findings = False, []
        for finding in results[i].findings:
            if not finding.fixable and finding.cell is None and not is_moot(finding) and finding.line > after \
                    and all(p[0] > after for p in finding.also or ()):
                finding = dataclasses.replace(finding, severity="info", message=(
                    f"{finding.message} (in a test that does not run on an NPU host: {why})"))
                changed = True
            findings.append(finding)
        if changed:
            out[i] = dataclasses.replace(results[i], findings=findings)
    return out


def _firing_skip(tree: ast.Module, relpath: str, data: bytes, index: dict, text_of):
    """(the last line of the first module-level skip that fires on an NPU host, the reason), or None."""
    from .testscopes import npu_truth, source_segment

    lines = None
    for stmt, name in _skip_calls(tree):
        source = _source_of(tree, name, relpath)
        if source is None:
            continue
        if source == relpath:
            helper_tree = tree
        else:
            j = index.get(source)
            helper_data = text_of(j) if j is not None else None
            if not helper_data or f"def {name}(".encode() not in helper_data:
                continue
            helper_tree = astcache.parse(helper_data)
            if helper_tree is None:
                continue
        function = next((s for s in helper_tree.body if isinstance(s, ast.FunctionDef) and s.name == name), None)
        if function is None or not _always_reason(function, npu_truth):
            continue
        if lines is None:
            lines = data.decode("utf-8", "replace").splitlines(keepends=True)
        where = "" if source == relpath else f" in `{source}`"
        return stmt.end_lineno or stmt.lineno, (
            f"`{source_segment(lines, stmt.test)}` skips the module: `{name}`{where} returns a skip reason "
            f"at every return an NPU host reaches (a capability or platform check it fails)")
    return None
