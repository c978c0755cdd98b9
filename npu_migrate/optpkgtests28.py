"""Tests an NPU host runs only once a user installs an optional package (issue #16, round-28 audit
CB#8, CC#11; policy P1). A whole-run pass (runplan.whole_run_passes, right after capskips.py).

A test module skips itself, or marks its tests, unless a probe of the project finds an optional
package:

    from vllm.utils.import_utils import has_helion          # `return _has_module("helion")`
    if not has_helion():
        pytest.skip("Helion is not installed ...", allow_module_level=True)

    requires_deep_ep_v2 = pytest.mark.skipif(not has_deep_ep_v2(), reason="...")
    @requires_deep_ep_v2
    def test_deep_ep_v2_moe(...): ... parallel_launch(world_size, _deep_ep_v2_moe, ...)

testscopes cannot decide such a probe from its name alone (sameguards27's note: `has_fast_links()`
may be the project's own feature probe). Here the probe's definition is read in its own module (a
module of the run, imported by name; or the test file itself): a function whose body, or the body
of a function of its module it calls (two steps: `has_deep_ep_v2` -> `deep_ep_v2_unavailable_reason`
-> `_has_module("deep_ep")`), looks a package up (`_has_module("pkg")`, `find_spec("pkg")`, an
`import pkg` in a `try`) is a probe of that package. The code the skip keeps off a host without the
package (the module after a module-level skip; a test carrying the mark, directly or through a
module-level name bound to it; the module-level helpers only such tests reach, testscopes.
helper_scopes) runs on an NPU host only when a user installs the package: its report-only errors
and warnings become info saying so (P1: an opt-in, never dropped, never a scope: the package may be
installed there).

Kept as they were (the nearest true cases): a probe that looks no package up (a feature or hardware
probe of the project), a probe of Triton or of a package an NPU host has (scopes.toml
installed_on_npu: Triton-Ascend, bitsandbytes), a skip condition that needs another operand too
(`pytest and (...)`, `not has_x() and flag`), code before a module-level skip, a helper an unmarked
test or the module's top level also reaches, and a finding with a place outside those scopes.
"""

from __future__ import annotations

import ast
import dataclasses
import re

from . import astcache, catalogue
from .findings import lower_pieces, merge_per_file
from .modpaths import RunModules, RunTexts, resolve_relative

_TEST_FILE = re.compile(r"(^|/)(tests?/|test_[^/]*\.py$|[^/]*_test\.py$|conftest\.py$)")
_FUNCTIONS = (ast.FunctionDef, ast.AsyncFunctionDef)
# calls that look a package up by name
_LOOKUPS = frozenset({"_has_module", "_has_module_spec", "has_module", "find_spec", "_is_package_available",
                      "is_package_available", "import_module"})
_DEPTH = 2
OPT_IN = ("reached on an NPU host only when the optional package `{package}` is installed: `{test}` skips "
          "{what} where it is missing (`{probe}()`, {where}, looks the package up)")


def _open(finding) -> bool:
    from .moot import is_moot

    return not finding.fixable and finding.cell is None and finding.severity != "info" and not is_moot(finding)


def _lookup(function: ast.AST) -> tuple[str | None, list[str]]:
    """(the package a function's own body looks up, or None; the plain names it calls)."""
    called: list[str] = []
    for node in ast.walk(function):
        if isinstance(node, ast.Call):
            name = (astcache.dotted(node.func) or "").rpartition(".")[2]
            if name in _LOOKUPS and node.args and isinstance(node.args[0], ast.Constant) \
                    and isinstance(node.args[0].value, str) and node.args[0].value:
                return node.args[0].value.split(".")[0], called
            if isinstance(node.func, ast.Name):
                called.append(node.func.id)
        elif isinstance(node, ast.Try):
            for stmt in node.body:
                if isinstance(stmt, ast.Import) and stmt.names:
                    return stmt.names[0].name.split(".")[0], called
                if isinstance(stmt, ast.ImportFrom) and stmt.module and not stmt.level:
                    return stmt.module.split(".")[0], called
    return None, called


def _package(tree: ast.Module, name: str, depth: int = 0, seen: frozenset = frozenset()) -> str | None:
    """The package the module-level function `name` of `tree` probes, a few calls deep, or None."""
    function = next((s for s in tree.body if isinstance(s, _FUNCTIONS) and s.name == name), None)
    if function is None or name in seen:
        return None
    found, called = _lookup(function)
    if found is not None or depth >= _DEPTH:
        return found
    for callee in dict.fromkeys(called):
        found = _package(tree, callee, depth + 1, seen | {name})
        if found is not None:
            return found
    return None


class _Probes:
    """The probes a test file calls, resolved where they are defined (memo per run)."""

    def __init__(self, results: list, text_of) -> None:
        self.results, self.modules, self.memo = results, RunModules(results, text_of), {}
        platform = catalogue.read_table("scopes.toml")["platform"]
        self.present = frozenset({"torch", "triton", *platform.get("installed_on_npu", ())})

    def resolve(self, tree: ast.Module, relpath: str, name: str) -> tuple[str, str] | None:
        """(the package, `path:line` of the probe's def) of a probe the file calls by `name`."""
        source = None
        for stmt in tree.body:
            if isinstance(stmt, _FUNCTIONS) and stmt.name == name:
                source = (relpath, tree)
            elif isinstance(stmt, ast.ImportFrom) and any(a.name == name and (a.asname or a.name) == name
                                                          for a in stmt.names):
                if stmt.level:
                    stem = resolve_relative(relpath, stmt.level, stmt.module or "")
                    index = next((i for i, r in enumerate(self.results) if r.relpath in (f"{stem}.py",
                                                                                          f"{stem}/__init__.py")), None)
                else:
                    index = self.modules.by_name.get(stmt.module or "")
                if index is not None:
                    other = self.modules.tree(index)
                    source = (self.results[index].relpath, other) if other is not None else None
        if source is None:
            return None
        key = (source[0], name)
        if key not in self.memo:
            package = _package(source[1], name)
            function = next((s for s in source[1].body if isinstance(s, _FUNCTIONS) and s.name == name), None)
            self.memo[key] = None if package is None or package in self.present or function is None else (
                package, f"{source[0]}:{function.lineno}")
        return self.memo[key]


Probes = _Probes  # (public: optpkgexit29.py reads the same probes)
is_open = _open


def _negated_probe(test: ast.AST) -> str | None:
    """The probe's name of a skip condition true wherever the probe answers False: `not p()`, or
    an `or` holding it."""
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not) and isinstance(test.operand, ast.Call) \
            and isinstance(test.operand.func, ast.Name) and not test.operand.args and not test.operand.keywords:
        return test.operand.func.id
    if isinstance(test, ast.BoolOp) and isinstance(test.op, ast.Or):
        return next((n for n in map(_negated_probe, test.values) if n is not None), None)
    return None


def _skipif_test(node: ast.AST) -> ast.AST | None:
    """The condition of a `pytest.mark.skipif(<cond>, ...)` call, or None."""
    if isinstance(node, ast.Call) and node.args and (astcache.dotted(node.func) or "").endswith("mark.skipif"):
        return node.args[0]
    return None


def _module_skip(stmt: ast.stmt) -> bool:
    return isinstance(stmt, ast.If) and not stmt.orelse and any(
        isinstance(n, ast.Call) and (astcache.dotted(n.func) or "").rpartition(".")[2] == "skip"
        and any(k.arg == "allow_module_level" for k in n.keywords) for s in stmt.body for n in ast.walk(s))


def _scopes(tree: ast.Module, relpath: str, probes: _Probes, text: str, end: int) -> list[tuple[int, int, str]]:
    """(first line, last line, the reason) of the code each optional-package skip keeps off."""
    out: list[tuple[int, int, str]] = []
    marks: dict[str, ast.AST] = {}

    def reason(test: ast.AST, what: str) -> str | None:
        name = _negated_probe(test)
        found = probes.resolve(tree, relpath, name) if name else None
        if found is None:
            return None
        shown = " ".join((ast.get_source_segment(text, test) or ast.unparse(test)).split())
        return OPT_IN.format(package=found[0], test=shown, what=what, probe=name, where=found[1])

    for stmt in tree.body:
        if _module_skip(stmt):
            why = reason(stmt.test, "the module")
            if why is not None:
                return [((stmt.end_lineno or stmt.lineno) + 1, end, why)]
        if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name):
            test = _skipif_test(stmt.value)
            if test is not None:
                marks[stmt.targets[0].id] = test

    def visit(body: list) -> None:
        for stmt in body:
            if not isinstance(stmt, (*_FUNCTIONS, ast.ClassDef)):
                continue
            why = None
            for decorator in stmt.decorator_list:
                test = marks.get(decorator.id) if isinstance(decorator, ast.Name) else _skipif_test(decorator)
                why = reason(test, f"`{stmt.name}`") if test is not None else None
                if why is not None:
                    break
            if why is not None:
                first = min([stmt.lineno, *(d.lineno for d in stmt.decorator_list)])
                out.append((first, stmt.end_lineno or stmt.lineno, why))
            elif isinstance(stmt, ast.ClassDef):
                visit(stmt.body)

    visit(tree.body)
    if out:
        from .testscopes import helper_scopes

        out += [(first, last, f"{why.split(': ', 1)[1]}; in a helper only such tests reach")
                for first, last, why in helper_scopes(tree, out, True)]
    return out


def review(results: list, paths: dict) -> list:
    """The results, with the open findings of tests an NPU host runs only once an optional package
    is installed lowered to info (this module's docstring)."""
    candidates = [i for i, r in enumerate(results) if r.relpath.endswith(".py") and _TEST_FILE.search(r.relpath)
                  and any(_open(f) for f in r.findings)]
    if not candidates:
        return results
    text_of = RunTexts(results, paths)
    probes = None
    out = list(results)
    for i in candidates:
        data = text_of(i)
        if not data or b"skip" not in data or not re.search(rb"\bnot\s+\w+\(\)", data):
            continue
        tree = astcache.parse(data)
        if tree is None:
            continue
        text = data.decode("utf-8", "replace")
        probes = probes or _Probes(results, text_of)
        try:
            scopes = _scopes(tree, results[i].relpath, probes, text, len(text.splitlines()) or 1)
        except RecursionError:
            continue
        if not scopes:
            continue
        def reason_of(line: int, scopes=scopes) -> str | None:
            return next((s[2] for s in scopes if s[0] <= line <= s[1]), None)

        changed, findings = False, []
        for finding in results[i].findings:
            pieces = lower_pieces(finding, reason_of) if _open(finding) else None
            if pieces is None:
                findings.append(finding)
                continue
            lowered = [p for p in pieces if p.severity == "info" and "only when the optional package" in p.message]
            # (the places lowered here stay one finding, as they were; the others are merged again)
            findings.extend(merge_per_file(lowered) + [p for p in pieces if p not in lowered])
            changed = True
        if changed:
            out[i] = dataclasses.replace(results[i], findings=sorted(findings))
    return out
