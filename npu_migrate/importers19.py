"""CUDA-only modules whose every importer reaches them only where they can load (issue #16, round 19).

A module that imports a CUDA-only compiled package unguarded at module level (NPU911: `import
cutlass`, `from cuda.bindings.driver import CUstream`) is reported as failing to import where the
package is missing. optionalguards.review_importers lowers it when every importer of the run imports
it inside `try`/`except ImportError`; tritonguards credits Triton-availability tests. Round-19
audits (BB#8, BB#32) found two more importer shapes that never load such a module on an NPU host:

* **Behind a probe of the same package** (`probe`). The importer's import sits in the body of an
  `if` whose test (each disjunct) has a conjunct, not negated, that probes one of the CUDA-only
  packages the module itself imports unguarded: `importlib.util.find_spec("cutlass") is not None`,
  `_has_module("cutlass")`, or a call of a function of the run whose body returns such a probe
  (`has_cutedsl()` defined as `return _has_module("cutlass")`, resolved through the importer's own
  `from ... import has_cutedsl` or its own definition), or a module-level name bound to one
  (`HAS_CUTLASS = find_spec("cutlass") is not None`). Where that package is missing, as on an NPU
  host, the module is never imported. A probe of another package (`has_numpy()`), a negated probe,
  or a name not resolved to such a probe is no guard.
* **Inside a platform-dispatched op's CUDA method** (`dispatch`). The import lies in `forward_cuda`
  (rules/scopes.toml [dispatch] cuda_methods) of a class that also has `forward_native` /
  `forward_npu` / `forward_oot`, read as dispatchops.cuda_dispatch_reason reads it: the base's
  dispatch_forward sends an NPU host to the other method (SGLang's multimodal CustomOp classes).

When every import site of the module in the run (test files aside: a test that imports it fails
on its own there, and is not the library's path; at least one site outside tests) is one of these,
and no library file names the module in a string (a test's `"pkg.mod"` for a dynamic import is aside too),
the "imported unguarded" clause goes and the finding becomes info naming the importers and what
keeps each off an NPU host. Not a named scope: a host may still install the package (cuda-python,
nvidia-cutlass-dsl wheels install without a GPU), so the probe is not provably false there. Where
every site is a `dispatch` one (or `through` modules only such sites load), the package installed
or not, an NPU host never calls the method: the reason is DISPATCHED_ONLY, a moot.PHRASES one, and
the finding becomes a named skipped scope (round-20 audit BD#38).
A module whose every library import site lies in modules so lowered is not loaded either (`through`,
a few steps: SGLang's CuTe-DSL helpers imported only by the module `forward_cuda` imports).
`__init__.py` and a module with one plain import site keep their error. A module loaded only after
its importer's own unguarded import of the same package, the importer being loaded, is left as it
is: importfolders.py folds it into its folder's finding (lowering it here would take it out of that
fold as a finding of its own). Whole-run; called from runplan.whole_run_passes after
optionalguards.review.
"""

from __future__ import annotations

import ast
import dataclasses
import re
from typing import Optional

from . import astcache
from .tritonguards import UNGUARDED, named_in_a_string, operands, parents, run_imports, source_text

CODES = ("NPU911",)
IMPORTERS_GATED = ("no import of it in the library runs on an NPU host, where its CUDA-only package is "
                   "missing, so the module is not loaded there")
# (moot.PHRASES: every import site is a platform-dispatched op's CUDA method, or a module only those load)
DISPATCHED_ONLY = ("imported only where an NPU host does not go: every import of it in the library lies in a "
                   "platform-dispatched op's CUDA method, or in a module only such methods load")
_TEST_FILE = re.compile(r"(^|/)(tests?/|test_[^/]*\.py$|[^/]*_test\.py$|conftest\.py$)")
# a call that probes a package by name: `find_spec("x")`, `_has_module("x")`, `is_package_available("x")`
_PROBE_CALL = re.compile(r"(?i)^(find_spec|_?(has|is)_?(module|package)\w*|\w*(module|package)_?(available|installed|exists))$")
_FUNCTIONS = (ast.FunctionDef, ast.AsyncFunctionDef)
_MAX_DEPTH = 3


def _target(finding) -> bool:
    return (finding.code in CODES and not finding.fixable and finding.cell is None
            and finding.severity != "info" and UNGUARDED in finding.message)


def _candidate(finding) -> bool:
    """An NPU911 error or warning; the clause may be missing where the per-file engine did not add
    it (SGLang's scale_residual_norm_scale_shift.py): _all_module_imports decides those."""
    return finding.code in CODES and not finding.fixable and finding.cell is None and finding.severity != "info"


def _all_module_imports(tree: ast.Module, lines: set[int]) -> bool:
    """Every place is a module-level import statement, unguarded (a direct statement of the module)."""
    found = {n.lineno for n in tree.body if isinstance(n, (ast.Import, ast.ImportFrom))}
    return bool(lines) and lines <= found


def _matches(probed: str, packages: set[str]) -> Optional[str]:
    """The package of `packages` that a probe of `probed` tests (its absence means theirs)."""
    for package in sorted(packages):
        if package == probed or package.startswith(probed + "."):
            return probed
    return None


def _module_packages(tree: ast.Module, lines: set[int]) -> set[str]:
    """The dotted names that the module-level imports at `lines` import (`cutlass.cute`, `cuda.bindings.driver`)."""
    out = set()
    for node in tree.body:
        if isinstance(node, ast.Import) and node.lineno in lines:
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.lineno in lines and node.level == 0 and node.module:
            out.add(node.module)
    return out


class _Resolver:
    """Names of an importer file resolved to a probe of a package (through the run's files)."""

    def __init__(self, results, python, text_of) -> None:
        self.results, self.text_of = results, text_of
        self.by_name: dict[str, int] = {}
        for j in python:
            from .modpaths import module_names
            for name in module_names(results[j].relpath):
                self.by_name.setdefault(name, j)
        self.trees: dict[int, Optional[ast.Module]] = {}

    def tree(self, j: int) -> Optional[ast.Module]:
        if j not in self.trees:
            data = self.text_of(j)
            self.trees[j] = astcache.parse(data) if data is not None else None
        return self.trees[j]

    def probe(self, node: ast.AST, j: int, depth: int = 0) -> Optional[tuple[str, str]]:
        """(the package probed, how: the helper's body) when `node` (in file j) is true only where
        the package can be found; None otherwise."""
        if depth > _MAX_DEPTH:
            return None
        if isinstance(node, ast.Compare) and len(node.ops) == 1 and isinstance(node.ops[0], ast.IsNot) \
                and isinstance(node.comparators[0], ast.Constant) and node.comparators[0].value is None:
            return self.probe(node.left, j, depth)
        if isinstance(node, ast.BoolOp) and isinstance(node.op, ast.And):
            # (true only where each conjunct is: one probe of the package is enough)
            return next((p for p in (self.probe(v, j, depth) for v in node.values) if p is not None), None)
        if isinstance(node, ast.Call):
            name = (astcache.dotted(node.func) or "").rsplit(".", 1)[-1]
            if node.args and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str) \
                    and _PROBE_CALL.match(name):
                return node.args[0].value, " ".join(source_text(node).split())
            if not node.args and not node.keywords and isinstance(node.func, ast.Name):
                return self._resolved(node.func.id, j, depth, call=True)
            return None
        if isinstance(node, ast.Name):
            return self._resolved(node.id, j, depth, call=False)
        return None

    def _resolved(self, name: str, j: int, depth: int, call: bool) -> Optional[tuple[str, str]]:
        tree = self.tree(j)
        if tree is None:
            return None
        for statement in tree.body:
            if call and isinstance(statement, _FUNCTIONS) and statement.name == name:
                return self._function_probe(statement, j, depth)
            if not call and isinstance(statement, ast.Assign) and len(statement.targets) == 1 \
                    and isinstance(statement.targets[0], ast.Name) and statement.targets[0].id == name:
                return self.probe(statement.value, j, depth + 1)
        for node in astcache.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module:
                for alias in node.names:
                    if (alias.asname or alias.name) != name:
                        continue
                    if node.level:
                        from .modpaths import resolve_relative
                        target = self.by_name.get(resolve_relative(self.results[j].relpath, node.level,
                                                                   node.module).replace("/", "."))
                    else:
                        target = self.by_name.get(node.module)
                    if target is None or target == j:
                        return None
                    return self._resolved(alias.name, target, depth + 1, call)
        return None

    def _function_probe(self, function, j: int, depth: int) -> Optional[tuple[str, str]]:
        body = [s for s in function.body if not (isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant))]
        if len(body) != 1 or not isinstance(body[0], ast.Return) or body[0].value is None:
            return None
        found = self.probe(body[0].value, j, depth + 1)
        return found


def _holders(node: ast.AST, parent: dict[int, ast.AST]) -> list[ast.AST]:
    """The classes and functions holding `node`, outermost first."""
    chain, current = [], parent.get(id(node))
    while current is not None and not isinstance(current, ast.Module):
        if isinstance(current, (ast.ClassDef, *_FUNCTIONS)):
            chain.append(current)
        current = parent.get(id(current))
    return chain[::-1]


def _guard(resolver: _Resolver, j: int, line: int, packages: set[str]) -> Optional[tuple[str, str]]:
    """(kind, what) when the import of the module at `line` of file j is never run where the
    module's packages are missing (module doc); None otherwise."""
    from .dispatchops import cuda_dispatch_reason

    tree = resolver.tree(j)
    if tree is None:
        return None
    statements = [n for n in astcache.walk(tree) if isinstance(n, (ast.Import, ast.ImportFrom)) and n.lineno == line]
    if len(statements) != 1:
        return None
    statement = statements[0]
    parent = parents(tree)
    # behind a probe of one of the module's packages
    child, current = statement, parent.get(id(statement))
    while current is not None and not isinstance(current, ast.Module):
        if isinstance(current, ast.If) and child in current.body:
            disjuncts = operands(current.test, ast.Or)
            probes = []
            for disjunct in disjuncts:
                found = None
                for conjunct in operands(disjunct, ast.And):
                    probed = resolver.probe(conjunct, j)
                    if probed is not None and _matches(probed[0], packages):
                        found = (probed, " ".join(source_text(conjunct).split()))
                        break
                if found is None:
                    break
                probes.append(found)
            else:
                (package, how), shown = probes[0]
                detail = f"`{shown}`" + (f" (`{how}`)" if how != shown else "")
                return "probe", f"under {detail}, a probe of `{package}`"
        child, current = current, parent.get(id(current))
    from .raisecalls33 import raised_before  # (after a call of a helper raising first where the probe fails: raisecalls33.py)
    raised = raised_before(resolver, j, tree, parent, statement, packages)
    if raised is not None:
        return "probe", raised
    holders = _holders(statement, parent)
    # in a platform-dispatched op's CUDA method
    reason = cuda_dispatch_reason(tree, holders)
    if reason is not None:
        return "dispatch", reason
    return None


def review(results: list, paths: Optional[dict[str, str]] = None) -> list:
    """NPU911 "imported unguarded at module level" on a module every import site of which (tests
    aside) is kept off an NPU host as the module doc says: info naming the importers."""
    from .modpaths import module_names

    candidates = [i for i, r in enumerate(results) if r.relpath.endswith(".py")
                  and not r.relpath.endswith("__init__.py") and any(map(_candidate, r.findings))]
    if not candidates:
        return results
    paths = paths or {}
    python = [i for i, r in enumerate(results) if r.relpath.endswith(".py")]
    imports, text_of = run_imports(results, python, paths)
    resolver = _Resolver(results, python, text_of)
    outside_tests = [j for j in python if not _TEST_FILE.search(results[j].relpath)]
    out = list(results)
    prepared = {}
    for i in candidates:
        relpath = results[i].relpath
        tree = resolver.tree(i)
        if tree is None:
            continue
        names = set(module_names(relpath))
        stem = relpath[:-3]
        sites = sorted({(j, line) for j in python if j != i for name, line, relative in imports[j]
                        if (relative and name == stem) or (not relative and name in names)})
        library = [(j, line) for j, line in sites if not _TEST_FILE.search(results[j].relpath)]
        if not library or _TEST_FILE.search(relpath) or named_in_a_string(results, i, text_of, outside_tests):
            continue
        prepared[i] = (tree, library, len(sites) - len(library))
    # (a module imported only by modules this pass found never loaded is not loaded either: a few rounds)
    unloaded: set[int] = set()
    dispatched: set[int] = set()  # (of those, modules only a platform-dispatched op's CUDA method loads)
    for _round in range(_MAX_DEPTH + 1):
        grown = False
        for i, (tree, library, tests) in prepared.items():
            if i in unloaded:
                continue
            findings = []
            for finding in out[i].findings:
                places = {finding.line, *(a[0] for a in finding.also)}
                if _target(finding) or (_candidate(finding) and _all_module_imports(tree, places)):
                    packages = _module_packages(tree, places)
                    guards, only_dispatch = [], True
                    for j, line in library:
                        guard = (("through", "in a module that itself is not loaded there") if j in unloaded
                                 else _guard(resolver, j, line, packages) if packages else None)
                        if guard is None:
                            break
                        guards.append((results[j].relpath, line, guard))
                        only_dispatch = only_dispatch and (guard[0] == "dispatch" or j in dispatched)
                    else:
                        finding = _lowered(finding, guards, tests, only_dispatch)
                        unloaded.add(i)
                        if only_dispatch:
                            dispatched.add(i)
                        grown = True
                findings.append(finding)
            out[i] = dataclasses.replace(out[i], findings=findings)
        if not grown:
            break
    return out


def _lowered(finding, guards: list, tests: int, dispatched: bool = False):
    """Info naming the importers; where every one is a platform-dispatched op's CUDA method (or a
    module only such methods load: round-20 audit BD#38), the module is never loaded on an NPU host
    whatever it installs: DISPATCHED_ONLY, a moot.PHRASES reason (a named scope)."""
    shown = [f"{path}:{line} {guard[1][:160]}" for path, line, guard in guards]
    listed = "; ".join(shown[:2]) + (f"; and {len(shown) - 2} more" if len(shown) > 2 else "")
    aside = f"; {tests} import site{'s' if tests > 1 else ''} in tests aside" if tests else ""
    reason = DISPATCHED_ONLY if dispatched else IMPORTERS_GATED
    return dataclasses.replace(
        finding, severity="info",
        message=f"{finding.message.replace(UNGUARDED, '')} ({reason}: {listed}{aside})")


# (public for proberaise34.py, which reads the same probes of a package)
Resolver = _Resolver
