"""Tests that an NPU host never runs, seen one step further than testscopes.py and reach.py see them
(issue #16, round 7: FP8 findings in tests that are not port work).

* **A fixture that skips.** `def test_x(cuda_capture_stream):` where the file's own
  `@pytest.fixture def cuda_capture_stream():` starts with `if not HAS_DEVICE_GRAPH:
  pytest.skip(...)` and `HAS_DEVICE_GRAPH` is false on an NPU host (`current_platform.
  is_cuda_alike() or current_platform.is_xpu()`): pytest runs the fixture before the test's body,
  so the test is skipped there. The same for `@pytest.mark.usefixtures("name")` and for a fixture
  that requests such a fixture. (reach.py names an *autouse* fixture that skips: every test of the
  module.) `skipping_fixture_tests` gives the tests, in reach.untaken's shape; the findings inside
  take the usual "in a branch an NPU host does not take" reason (a named skipped scope, moot.py).
* **A compute-capability variable.** `compute_capability = (0, 0)` then, under `if
  torch.cuda.is_available():`, `compute_capability = torch.cuda.get_device_capability("cuda")`:
  on an NPU host it is (0, 0) either way (the shim's capability query answers (0, 0) there), so
  `pytest.mark.skipif(compute_capability < (9, 0))` skips there. `capability_names` gives the
  module's names bound only to such values; testscopes evaluates a comparison of one with a
  literal version tuple as it does `get_device_capability() >= (9, 0)`.
* **A test module whose import fails on an NPU host.** An FP8 finding (NPU913) in a test module
  that imports, unguarded at module level, a module of the project that itself imports a CUDA-only
  compiled package unguarded at module level (`sgl_kernel`: reported there as an error) is about a
  pure-torch reference of a kernel test that cannot even be collected on an NPU host: the port item
  is the kernel, reported where it is imported. `fold_into_failing_imports` (whole-program, after
  wholeprogram.review) lowers such a finding to info with the reason and the place (a named skipped
  scope, moot.py); an FP8 finding in a test module that imports nothing of the kind stays. A CUDA
  string left in such a module (NPU990) is folded the same way (round 10); the project's own
  packages are read, never judged by their name (xformers in xformers' tree).
"""

from __future__ import annotations

import ast
import dataclasses
import re
from typing import Callable, Optional

from . import astcache
from .modpaths import module_names, resolve_relative, result_bytes

_dotted = astcache.dotted
_FUNCTIONS = (ast.FunctionDef, ast.AsyncFunctionDef)


# ----------------------------------------------------------------------------- fixtures that skip

def _fixture_decorator(function: ast.AST) -> Optional[ast.AST]:
    """The `@pytest.fixture` / `@pytest.fixture(...)` / `@fixture` decorator, or None."""
    for decorator in function.decorator_list:
        target = decorator.func if isinstance(decorator, ast.Call) else decorator
        if _dotted(target).rpartition(".")[2] == "fixture":
            return decorator
    return None


def _fixture_name(function: ast.AST, decorator: ast.AST) -> str:
    if isinstance(decorator, ast.Call):
        for keyword in decorator.keywords:
            if keyword.arg == "name" and isinstance(keyword.value, ast.Constant) and isinstance(keyword.value.value, str):
                return keyword.value.value
    return function.name


def _requested(function: ast.AST) -> list[str]:
    """The fixtures a function requests: its parameters and `@pytest.mark.usefixtures("a", ...)`."""
    args = function.args
    names = [a.arg for a in [*args.posonlyargs, *args.args, *args.kwonlyargs]]
    for decorator in function.decorator_list:
        if isinstance(decorator, ast.Call) and _dotted(decorator.func).rpartition(".")[2] == "usefixtures":
            names += [a.value for a in decorator.args if isinstance(a, ast.Constant) and isinstance(a.value, str)]
    return names


def skipping_fixture_tests(tree: ast.Module, skips_first: Callable[[list], Optional[str]]
                           ) -> list[tuple[int, int, str, bool]]:
    """(first line, last line, reason, False) of the test functions (module level, or methods of a
    `Test...` class) that request a fixture of the file that skips on an NPU host.
    `skips_first(body)`: the source of the condition when the body (its docstring left out)
    starts with `if <true on an NPU host>: pytest.skip(...)`, else None (reach.py decides it)."""
    fixtures: dict[str, ast.AST] = {}
    for stmt in tree.body:
        if isinstance(stmt, _FUNCTIONS):
            decorator = _fixture_decorator(stmt)
            if decorator is not None:
                fixtures.setdefault(_fixture_name(stmt, decorator), stmt)
    if not fixtures:
        return []
    skipping: dict[str, str] = {}
    for name, function in fixtures.items():
        condition = skips_first(function.body)
        if condition is not None:
            skipping[name] = f"the fixture `{name}` it requests skips on `{condition}`"
    changed = bool(skipping)
    while changed:  # a fixture that requests one that skips skips too
        changed = False
        for name, function in fixtures.items():
            if name in skipping:
                continue
            inner = next((r for r in _requested(function) if r in skipping and r != name), None)
            if inner is not None:
                skipping[name] = f"the fixture `{name}` requests `{inner}`, which skips: {skipping[inner]}"
                changed = True
    if not skipping:
        return []
    tests = [s for s in tree.body if isinstance(s, _FUNCTIONS) and s.name.startswith("test")]
    for cls in tree.body:
        if isinstance(cls, ast.ClassDef) and cls.name.startswith("Test"):
            tests += [s for s in cls.body if isinstance(s, _FUNCTIONS) and s.name.startswith("test")]
    out = []
    for test in tests:
        if _fixture_decorator(test) is not None:
            continue
        inner = next((r for r in _requested(test) if r in skipping), None)
        if inner is not None:
            first = min([test.lineno, *(d.lineno for d in test.decorator_list)])
            out.append((first, test.end_lineno or test.lineno, skipping[inner], False))
    return out


# ----------------------------------------------------------------------------- capability variables

_CAPABILITY = "get_device_capability"


def _capability_value(node: ast.AST) -> Optional[bool]:
    """True for `...get_device_capability(...)`, False for a literal all-zero tuple (`(0, 0)`, the
    default before the query), None for anything else."""
    if isinstance(node, ast.Call) and _dotted(node.func).rpartition(".")[2] == _CAPABILITY:
        return True
    if isinstance(node, ast.Tuple) and node.elts and all(
            isinstance(e, ast.Constant) and type(e.value) is int and e.value == 0 for e in node.elts):
        return False
    return None


def capability_names(tree: ast.Module) -> frozenset:
    """Module names every binding of which is the device capability query or `(0, 0)`, at least
    one the query (`compute_capability = (0, 0)`; `if torch.cuda.is_available(): compute_capability
    = torch.cuda.get_device_capability()`): (0, 0) on an NPU host. A name bound any other way
    (a loop, `global` in a function, another value) is not one."""
    values: dict[str, list] = {}
    stack = list(tree.body)
    while stack:
        node = stack.pop()
        if isinstance(node, (*_FUNCTIONS, ast.ClassDef, ast.Lambda)):
            values.setdefault(getattr(node, "name", ""), []).append(None)
            continue
        if isinstance(node, ast.Assign):
            for target in node.targets:
                if isinstance(target, ast.Name):
                    values.setdefault(target.id, []).append(
                        _capability_value(node.value) if len(node.targets) == 1 else None)
                else:
                    for inner in ast.walk(target):
                        if isinstance(inner, ast.Name):
                            values.setdefault(inner.id, []).append(None)
        elif isinstance(node, (ast.AnnAssign, ast.AugAssign, ast.NamedExpr)) and isinstance(node.target, ast.Name):
            values.setdefault(node.target.id, []).append(
                _capability_value(node.value) if isinstance(node, ast.AnnAssign) and node.value is not None else None)
        elif isinstance(node, (ast.For, ast.AsyncFor, ast.comprehension)):
            for inner in ast.walk(node.target):
                if isinstance(inner, ast.Name):
                    values.setdefault(inner.id, []).append(None)
        elif isinstance(node, ast.withitem) and node.optional_vars is not None:
            for inner in ast.walk(node.optional_vars):
                if isinstance(inner, ast.Name):
                    values.setdefault(inner.id, []).append(None)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            for alias in node.names:
                values.setdefault((alias.asname or alias.name).split(".")[0], []).append(None)
        elif isinstance(node, ast.ExceptHandler) and node.name:
            values.setdefault(node.name, []).append(None)
        stack.extend(ast.iter_child_nodes(node))
    found = {name for name, bound in values.items() if True in bound and all(v is not None for v in bound)}
    if found:  # (rebound from inside a function: `global compute_capability`)
        for node in astcache.walk(tree):
            if isinstance(node, (ast.Global, ast.Nonlocal)):
                found -= set(node.names)
    return frozenset(found)


class _AsQuery(ast.NodeTransformer):
    """A capability name read as the query itself (`compute_capability < (9, 0)` as
    `torch.cuda.get_device_capability() < (9, 0)`), which testscopes evaluates."""

    def __init__(self, names: frozenset):
        self.names = names

    def visit_Name(self, node: ast.Name):
        if node.id in self.names and isinstance(node.ctx, ast.Load):
            query = ast.Call(func=ast.Attribute(value=ast.Attribute(value=ast.Name("torch", ast.Load()), attr="cuda",
                                                                   ctx=ast.Load()),
                                                attr=_CAPABILITY, ctx=ast.Load()), args=[], keywords=[])
            return ast.copy_location(query, node)
        return node


def with_capability_names(tree: ast.Module, text: str) -> ast.Module:
    """The tree (a copy, when anything changes) with the module's capability names
    (capability_names) read as the capability query in module-level statements, decorators and
    the `if`s of a function's own body: where testscopes reads skip conditions
    (`sm90_or_better_only = pytest.mark.skipif(compute_capability < (9, 0))`, `if
    compute_capability < (9, 0): pytest.skip(...)`)."""
    if _CAPABILITY not in text:
        return tree
    names = capability_names(tree)
    if not names:
        return tree
    import copy

    tree = copy.deepcopy(tree)
    transform = _AsQuery(names)

    def fix(body: list) -> None:
        for index, stmt in enumerate(body):
            if isinstance(stmt, (*_FUNCTIONS, ast.ClassDef)):
                stmt.decorator_list = [transform.visit(d) for d in stmt.decorator_list]
                if isinstance(stmt, _FUNCTIONS):
                    _fix_skips(stmt)
                fix(stmt.body)
            elif body is tree.body:
                body[index] = transform.visit(stmt)

    def _fix_skips(function) -> None:
        """`if compute_capability < (9, 0): pytest.skip(...)` in a test's own body, where the
        function binds no name of that kind itself."""
        args = function.args
        local = {a.arg for a in [*args.posonlyargs, *args.args, *args.kwonlyargs, args.vararg, args.kwarg] if a}
        local |= {n.id for n in ast.walk(function) if isinstance(n, ast.Name) and not isinstance(n.ctx, ast.Load)}
        if names & local:
            return
        for stmt in function.body:
            if isinstance(stmt, ast.If):
                stmt.test = transform.visit(stmt.test)

    fix(tree.body)
    return tree


# ----------------------------------------------------------------------------- test modules that fail to import

FAILS_TO_IMPORT = "in a test module whose import fails on an NPU host"
TEST_FILE = re.compile(r"(^|/)(tests?/|test_[^/]*\.py$|[^/]*_test\.py$)")
_MAX_MODULES = 400  # modules parsed for one run (the chains from the test modules with an FP8 finding)


def compiled_packages() -> tuple[frozenset, tuple]:
    """(top-level packages, dotted modules) with no NPU build: the sweep's [guard] modules but
    those an NPU host may have (testscopes.absent_packages), scopes.toml's
    `compiled_without_npu_build`, and the compiled `_C` modules among the sweep's NPU911 modules
    (`vllm._C`; not `vllm._custom_ops`, a Python module that imports on any host)."""
    from . import catalogue

    # (testscopes.absent_packages, read here: testscopes calls this module)
    guard = catalogue.read_table("sweep.toml")["guard"]["modules"]
    platform = catalogue.read_table("scopes.toml")["platform"]
    tops = {m.split(".")[0] for m in guard} - set(platform.get("installed_on_npu", ()))
    tops.update(platform.get("compiled_without_npu_build", ()))
    dotted = tuple(module for module, code in catalogue.read_table("sweep.toml")["module_codes"].items()
                   if code == "NPU911" and "." in module and not module.startswith("torch.")
                   and module.rpartition(".")[2].endswith("_C"))
    return frozenset(tops), dotted


def _top_level_imports(tree: ast.Module) -> list[tuple[str, int, int]]:
    """(dotted module, line, relative dots) of the import statements directly in the module's body
    (not in a `try`, an `if`, a function): those run, unguarded, whenever the module is imported.
    `from a.b import c` gives `a.b` and `a.b.c` (c may be a module)."""
    out = []
    for stmt in tree.body:
        if isinstance(stmt, ast.Import):
            out += [(alias.name, stmt.lineno, 0) for alias in stmt.names]
        elif isinstance(stmt, ast.ImportFrom):
            base = stmt.module or ""
            out.append((base, stmt.lineno, stmt.level))
            out += [(f"{base}.{alias.name}" if base else alias.name, stmt.lineno, stmt.level)
                    for alias in stmt.names if alias.name != "*"]
    return out


def _may_fail(results: list, paths: dict, tops: set) -> Callable[[int], bool]:
    """A cheap test, with no parse, that file i may fail `fold_into_failing_imports`'s `fails`:
    a file reachable from it through the imports the text shows (the facts run.py reads with wholeprogram.file_facts: every
    import statement, guarded or not, so a superset of the unguarded ones that `fails` follows)
    imports a compiled package at its top level by its text. False means `fails(i)` is None (torch's tree: some 400
    parses a run saved)."""
    from .modpaths import ImportIndex

    python = [i for i, r in enumerate(results) if r.relpath.endswith(".py")]
    index = ImportIndex(results, python)
    # (an import statement at the module's top level that names one: `import a, apex.amp` or
    # `from flash_attn import x` at the start of a line, or after a `;`)
    names = re.compile(rb"(?:^|;[ \t]*)(?:from|import)[ \t][^\n;]*?\b(?:"
                       + b"|".join(re.escape(t.encode()) for t in sorted(tops)) + rb")\b", re.MULTILINE) if tops else None
    verdict: dict[int, bool] = {}

    def text(i: int) -> bytes:
        return result_bytes(results[i], paths) or b""

    def test(i: int) -> bool:
        if i not in verdict:
            # one walk from i over what it imports: what it meets reaches no more than i does, so a
            # walk that finds no such name settles them all as False; one that does marks them all
            # True (an over-approximation: True only means "parse and see")
            seen, stack, found = {i}, [i], False
            while stack and not found:
                j = stack.pop()
                if verdict.get(j) or (names is not None and names.search(text(j))):
                    found = True
                    break
                if j in verdict:
                    continue  # (settled False by an earlier walk)
                facts = results[j].facts
                if facts is None:  # (run.py gives every .py file its facts; without them: parse and see)
                    found = True
                    break
                for k, _line in index.files(facts["imports"], j):
                    if k not in seen:
                        seen.add(k)
                        stack.append(k)
            for k in seen:
                if k not in verdict or found:
                    verdict[k] = found
        return verdict[i]

    return test


# the findings folded into the failing import, with what the port item is instead. A CUDA string
# left in such a module (NPU990: a parameter's "cuda", an assertion's expected device) cannot run
# either: the module never imports there (round-10 audit: sglang's FA3 backend test).
_FOLDED = {
    "NPU913": "the port item is that kernel, not the reference's FP8 dtype",
    "NPU990": "the port item is that import, not this CUDA string",
}


def fold_into_failing_imports(results: list, paths: Optional[dict] = None) -> list:
    """The FP8 findings (NPU913) of test modules that cannot be imported on an NPU host lowered to
    info with the import that fails there (see the module's doc); `results` is not changed."""
    from .moot import is_moot

    def candidate(finding) -> bool:
        return finding.code in _FOLDED and not finding.fixable and finding.cell is None and not is_moot(finding)

    targets = [i for i, r in enumerate(results) if r.relpath.endswith(".py") and TEST_FILE.search(r.relpath)
               and any(candidate(f) for f in r.findings)]
    if not targets:
        return results
    paths = paths or {}
    tops, dotted = compiled_packages()
    by_dotted: dict[str, int] = {}
    by_stem: dict[str, int] = {}
    for i, result in enumerate(results):
        if result.relpath.endswith(".py"):
            by_stem[result.relpath[:-3]] = i
            for name in module_names(result.relpath):
                by_dotted.setdefault(name, i)
    imports_of: dict[int, Optional[list]] = {}

    def imports(i: int) -> list:
        if i not in imports_of:
            imports_of[i] = []
            if len(imports_of) <= _MAX_MODULES:
                data = result_bytes(results[i], paths)
                tree = astcache.parse(data[3:] if data and data.startswith(b"\xef\xbb\xbf") else data) if data else None
                if tree is not None:
                    imports_of[i] = _top_level_imports(tree)
        return imports_of[i]

    # the project's own packages (xformers in xformers' tree) are read, not judged by their name
    own = {name.split(".")[0] for name in by_dotted if "." in name}

    def compiled(name: str) -> bool:
        return (name.split(".")[0] in tops and name.split(".")[0] not in own) or \
            any(name == d or name.startswith(d + ".") for d in dotted)

    def project_file(importer: int, name: str, level: int) -> Optional[int]:
        if level:
            stem = resolve_relative(results[importer].relpath, level, name)
            return by_stem.get(stem, by_stem.get(f"{stem}/__init__"))
        return by_dotted.get(name)

    failing: dict[int, Optional[str]] = {}
    may_fail = _may_fail(results, paths, tops | {d.split(".")[0] for d in dotted})

    def fails(i: int, depth: int = 0) -> Optional[str]:
        """Why importing file i fails on an NPU host (the unguarded import of a compiled package,
        through the project's modules), or None."""
        if i in failing:
            return failing[i]
        if not may_fail(i):
            return None
        failing[i] = None  # (an import cycle: not shown to fail)
        why = None
        for name, line, level in imports(i):
            # (a module of the project is read, not judged by its name: `vllm._custom_ops` imports)
            if not level and compiled(name) and project_file(i, name, level) is None:
                why = f"`{name}` imported unguarded at {results[i].relpath}:{line}, a CUDA-only compiled package"
                break
        if why is None and depth < 6:
            for name, line, level in imports(i):
                j = project_file(i, name, level)
                if j is not None and j != i:
                    inner = fails(j, depth + 1)
                    if inner is not None:
                        why = inner
                        break
        failing[i] = why
        return why

    out = list(results)
    for i in targets:
        why = fails(i)
        if why is None:
            continue
        findings = [dataclasses.replace(f, severity="info", message=f"{f.message} ({FAILS_TO_IMPORT}: {why}; "
                                        f"{_FOLDED[f.code]})")
                    if candidate(f) else f for f in results[i].findings]
        out[i] = dataclasses.replace(results[i], findings=findings)
    return out
