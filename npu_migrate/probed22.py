"""CUDA-only kernel modules loaded only inside modules that probe the package first (issue #16, round 22).

A CuTe-DSL kernel module (NPU911: `import cutlass`, `from cuda.bindings.driver import CUstream`,
at module level or in its functions) is reported as an error. Round-22 audits (BJ#7, BJ#40) found
such modules loaded only lazily, by a function-local import in a wrapper module that tests for the
package itself with an availability probe before it uses its kernels:

    # kit/ops/_router_common.py
    def is_cute_available() -> bool:
        try:
            import cutlass
        except ImportError:
            return False
        return True

    # kit/ops/router.py (the wrapper)
    from ._router_common import is_cute_available
    def is_available() -> bool:
        return is_cute_available()
    class RouterGemm:
        def _compile(self, key):
            from ._router_kernel import RouterKernel      # the only import of the kernel module

    # kit/ops/_router_kernel.py
    import cutlass                                       # NPU911 error

Where the package is missing, as on an NPU host, the probe answers False and the project's callers
take their other path (a plain matmul, a clear NotImplementedError); only a call that skips the
probe reaches the kernel module. tritonguards.py credits Triton-availability tests the same way,
importers19.py an `if` probe around the import itself; here the probe belongs to the importing
module, and the import is inside one of its functions.

`review` (whole run, from runplan.whole_run_passes after lazyimports21, before firstfail22)
decides per open NPU911 error whose every line imports CUDA-only packages (sweep.toml
`module_codes`, importfolders.packages), at module level or in a function. Every import site of the
module in the library (tests aside, as lazyimports21 reads them: a test is no runtime importer;
for a package `__init__`, the imports of its submodules from outside it too) must be either:

* `probed`: inside a function of an importing module that either offers an availability test
  of one of the packages the finding names for its callers (a function or method of its own whose
  every `return` holds a probe: `def is_available(): return is_cute_available("router")`), or
  calls the module-level function holding the import only under a probe (in the body of `if
  <probe>:`, or after `if not <probe>: raise/return` in the caller; a flag bound at module level
  to one counts: `_KERNELS = _is_sm100() and _runtime_available()`), no other library file naming
  that function, and its other uses only decorators (`@op.register_fake`). A probe is a function
  (or method) that imports the package in a `try` of imports only, whose handlers catch
  ImportError; or calls `find_spec` / `import_module` / a `has_module`-style helper with the
  package's name (or a loop variable over a module-level display holding it: `{"cutlass":
  "nvidia-cutlass-dsl"}` looked up one by one) outside an `if` test (a function that tests the
  package to guard its own work, `if find_spec("cutlass"): ...`, is a guarded importer, not a
  probe it offers); or one whose every `return` holds another probe, its call, an `and` conjunct
  or a comparison (`len(_missing()) == 0`); the importing module's own, or one it imports by name
  from a module of the run;
* or one lazyimports21.classify calls `guarded` or `selected` (a degrading `try`, a name-selected
  branch), or `typing`.

At least one site must be probed. A module with no library importer, one whose dotted name a string
of another file holds (a dynamic import), or with a site at module level of its importer (or in a
function of a module that offers no probe, nor calls it only under one: h76's `if not
has_cutedsl():`, `if has_numpy():` and plain lazy importers) keeps its error, and so does one whose message folds sibling
modules (importfolders) unless every sibling named passes the same test. The finding becomes info:
the "imported unguarded" clause goes, and the message says what happens (the probe answers False
where the package is missing; only a call that skips it fails) and names the sites with each
module's probe. Not a scope: a host may install the package (the DSL wheels install without a
GPU), and a caller may skip the probe.
"""

from __future__ import annotations

import ast
import dataclasses
import posixpath
import re
from typing import Optional

from . import astcache
from .firstfail22 import RunIndex, finding_lines, open_import
from .importfolders import FOLDED

PROBED = ("loaded only lazily, inside functions of modules that first test for one of the packages it needs "
          "({packs}) with an availability probe: where they are missing, as on an NPU host, the probe answers "
          "False, and only a call that skips it reaches this import")
_PROBE_CALL = re.compile(r"(?i)^(find_spec|import_module|_?(has|is)_?(module|package)\w*|"
                         r"\w*(module|package)_?(available|installed|exists))$")
_FUNCTIONS = (ast.FunctionDef, ast.AsyncFunctionDef)
_MAX_SHOWN = 3
_SIBLINGS = re.compile(re.escape(FOLDED) + r"[^:]*: ([^)]*)\)")


def _under(name: str, packages: set) -> bool:
    return any(name == p or name.startswith(p + ".") for p in packages)


def _imports_of(node: ast.AST) -> list[str]:
    if isinstance(node, ast.Import):
        return [a.name for a in node.names]
    if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
        return [node.module]
    return []


def _line_packages(tree: ast.Module, lines: list[int], packages: tuple) -> Optional[set]:
    """The CUDA-only packages the import statements at `lines` name, or None where the first line
    is no such import or another import line names another package. Other lines (an `x.is_cuda`
    assertion, an FP8 dtype another pass merged in) lie in the same module, loaded the same way."""
    by_line: dict[int, list[str]] = {}
    for node in astcache.walk(tree):
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            by_line.setdefault(node.lineno, []).extend(_imports_of(node))
    if not lines or not by_line.get(lines[0]):
        return None
    found: set = set()
    for line in lines:
        names = by_line.get(line)
        if not names:
            continue
        hits = {next((p for p in packages if n == p or n.startswith(p + ".")), None) for n in names}
        if None in hits:
            return None
        found |= hits
    return found or None


def _named_containers(tree: ast.Module, packages: set) -> set:
    """Module-level names bound to a display holding a package's name as a string
    (`_RUNTIME = {"cutlass": "nvidia-cutlass-dsl"}`)."""
    out = set()
    for node in tree.body:
        if isinstance(node, (ast.Assign, ast.AnnAssign)) and node.value is not None and any(
                isinstance(n, ast.Constant) and isinstance(n.value, str) and _under(n.value, packages)
                for n in ast.walk(node.value)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            out.update(t.id for t in targets if isinstance(t, ast.Name))
    return out


def _names_a_package(function: ast.AST, call: ast.Call, packages: set, containers: set) -> bool:
    """The probing call's first argument is the package's name, or a loop variable over a
    module-level display that holds it."""
    if not call.args:
        return False
    arg = call.args[0]
    if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
        return _under(arg.value, packages)
    if not isinstance(arg, ast.Name):
        return False
    for loop in ast.walk(function):
        if isinstance(loop, (ast.For, ast.comprehension)):
            root = loop.iter.func.value if isinstance(loop.iter, ast.Call) and isinstance(loop.iter.func, ast.Attribute) \
                else loop.iter
            if isinstance(root, ast.Name) and root.id in containers \
                    and any(isinstance(n, ast.Name) and n.id == arg.id for n in ast.walk(loop.target)):
                return True
    return False


def _callee(node: ast.AST) -> str:
    return (astcache.dotted(node.func) or "").rsplit(".", 1)[-1] if isinstance(node, ast.Call) else ""


def probe_in(node: ast.AST, names: dict) -> Optional[str]:
    """The probe (a name of `names`) that a test or a returned value holds, not negated: its call,
    a flag bound to one, an `and` conjunct, or a comparison of a call of one (`len(_missing()) == 0`)."""
    if isinstance(node, ast.Call):
        return _callee(node) if _callee(node) in names else None
    if isinstance(node, ast.Name):
        return node.id if node.id in names else None
    if isinstance(node, ast.BoolOp) and isinstance(node.op, ast.And):
        return next((p for p in (probe_in(v, names) for v in node.values) if p), None)
    if isinstance(node, ast.Compare):
        return next((_callee(n) for n in ast.walk(node.left) if _callee(n) in names), None)
    return None


def _base_probes(tree: ast.Module, packages: set) -> dict[str, str]:
    from .tritonguards import catches_import_errors

    containers = _named_containers(tree, packages)
    found: dict[str, str] = {}
    for function in (n for n in astcache.walk(tree) if isinstance(n, _FUNCTIONS)):
        # (a function that tests the package to guard its own work, `if find_spec("x"): from .k
        # import f`, is a guarded importer, not a probe its module offers)
        tested = {id(n) for t in ast.walk(function) if isinstance(t, (ast.If, ast.While, ast.IfExp))
                  for n in ast.walk(t.test)}
        for node in ast.walk(function):
            if isinstance(node, ast.Try) and catches_import_errors(node) and all(
                    isinstance(s, (ast.Import, ast.ImportFrom, ast.Assign, ast.Pass, ast.Expr)) for s in node.body) \
                    and any(_under(n, packages) for s in node.body for n in _imports_of(s)):
                found[function.name] = "a try-import of the package"
                break
            callee = _callee(node)
            if callee and id(node) not in tested and _PROBE_CALL.match(callee) \
                    and _names_a_package(function, node, packages, containers):
                found[function.name] = f"`{callee}` of the package's name"
                break
    return found


def probes(tree: ast.Module, packages: set, seeds: Optional[dict] = None) -> dict[str, str]:
    """{name: how} of the module's functions and methods that probe one of `packages` (a
    try-import, `find_spec` of its name, or every `return` holding another probe: `return
    is_cute_available("x")`), and of its module-level flags bound to one; `seeds`: probes it
    imports, by their local names."""
    found = dict(seeds or {})
    found.update(_base_probes(tree, packages))
    functions = [n for n in astcache.walk(tree) if isinstance(n, _FUNCTIONS)]
    changed = True
    while changed:
        changed = False
        for function in functions:
            if function.name in found:
                continue
            values = [n.value for n in ast.walk(function) if isinstance(n, ast.Return)]
            held = [probe_in(v, found) if v is not None else None for v in values]
            if held and all(held):
                found[function.name] = f"through `{held[0]}()` ({found[held[0]]})"
                changed = True
    for node in tree.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            held = probe_in(node.value, found)
            if held:
                found[node.targets[0].id] = f"bound to `{held}()` ({found[held]})"
    return found


class _Probes:
    """The probes each importing module defines or imports (memoized per packages)."""

    def __init__(self, run: RunIndex) -> None:
        self.run = run
        self.memo: dict = {}

    def of(self, k: int, packages: frozenset) -> tuple[dict, set]:
        """({name: how} of the probes module k can read, {the names it defines itself})."""
        key = (k, packages)
        if key not in self.memo:
            self.memo[key] = self._of(k, packages)
        return self.memo[key]

    def _of(self, k: int, packages: frozenset) -> tuple[dict, set]:
        tree = self.run.tree(k)
        if tree is None:
            return {}, set()
        imported = {a.asname or a.name: a.name for n in tree.body if isinstance(n, ast.ImportFrom) for a in n.names}
        seeds: dict[str, str] = {}
        if imported:
            for j, _line in self.run.index.files(self.run.imports[k], k):
                other = self.run.tree(j)
                theirs = probes(other, set(packages)) if other is not None else {}
                for local, name in imported.items():
                    if name in theirs and local not in seeds:
                        seeds[local] = f"from {posixpath.basename(self.run.results[j].relpath)}: {theirs[name]}"
        found = probes(tree, set(packages), seeds)
        return found, set(found) - set(seeds)


def _guarded_calls(tree: ast.Module, function: ast.AST, names: dict, other_texts) -> Optional[str]:
    """How every use of module-level `function` in its module is a call under a probe: in the
    body of an `if` holding one, or after `if not <probe>: raise/return` in the caller; a use in
    a decorator (`@op.register_fake`) registers, and calls nothing. None where a use is not so
    (or another library file names the function, or nothing calls it)."""
    name = function.name
    if any(name.encode() in text for text in other_texts()):
        return None
    parent = astcache.parents(tree)
    held = None
    for node in astcache.walk(tree):
        if not (isinstance(node, ast.Name) and node.id == name):
            continue
        chain, up = [node], parent.get(id(node))
        while up is not None:
            chain.append(up)
            up = parent.get(id(up))
        if any(isinstance(c, _FUNCTIONS) and any(chain[i - 1] is d for d in c.decorator_list)
               for i, c in enumerate(chain) if i):
            continue
        up = parent.get(id(node))
        if not (isinstance(up, ast.Call) and up.func is node):
            return None
        probe = _dominating_probe(chain, names)
        if probe is None:
            return None
        held = held or probe
    return held


def _dominating_probe(chain: list, names: dict) -> Optional[str]:
    """The probe an `if` around the node tests, or that an `if not <probe>:` exiting earlier in
    the enclosing function's body tests."""
    for i, up in enumerate(chain[1:], 1):
        if isinstance(up, ast.If) and chain[i - 1] in up.body:
            probe = probe_in(up.test, names)
            if probe:
                return probe
        if isinstance(up, _FUNCTIONS):
            statement = chain[i - 1]
            for earlier in up.body:
                if earlier is statement:
                    break
                if isinstance(earlier, ast.If) and isinstance(earlier.test, ast.UnaryOp) \
                        and isinstance(earlier.test.op, ast.Not) and earlier.body \
                        and isinstance(earlier.body[-1], (ast.Raise, ast.Return)):
                    probe = probe_in(earlier.test.operand, names)
                    if probe:
                        return probe
            return None
    return None


def _site(run: RunIndex, found: _Probes, k: int, line: int, packages: frozenset) -> Optional[tuple[str, str]]:
    """(kind, how) of an import site: "probed" (checked first), else lazyimports21's "guarded",
    "selected" or "typing"; None otherwise."""
    from .importgates import is_test
    from .lazyimports21 import classify

    tree = run.tree(k)
    if tree is None:
        return None
    statements = [n for n in astcache.walk(tree) if isinstance(n, (ast.Import, ast.ImportFrom)) and n.lineno == line]
    parent = astcache.parents(tree)
    holders = []
    for statement in statements:
        up, outer = parent.get(id(statement)), None
        while up is not None:
            if isinstance(up, _FUNCTIONS):
                outer = up
            up = parent.get(id(up))
        holders.append(outer)
    if holders and None not in holders:
        names, own = found.of(k, packages)
        offered = sorted(n for n in own if n not in _flags(tree))
        if offered:
            return "probed", (f"in `{holders[0].name}` (the module offers `{offered[0]}()` "
                              f"({names[offered[0]]}) for its callers to ask first)")
        outer = holders[0]
        if names and outer in tree.body and len({id(h) for h in holders}) == 1:
            texts = lambda: (run.text_of(j) or b"" for j in run.python  # noqa: E731
                             if j != k and not is_test(run.results[j].relpath))
            probe = _guarded_calls(tree, outer, names, texts)
            if probe:
                return "probed", f"in `{outer.name}`, which the module calls only under `{probe}` ({names[probe]})"
    kind, how = classify(tree, line)
    if kind in ("typing", "guarded", "selected"):
        return kind, how
    return None


def _flags(tree: ast.Module) -> set:
    return {t.id for n in tree.body if isinstance(n, ast.Assign) for t in n.targets if isinstance(t, ast.Name)}


def _ways(run: RunIndex, found: _Probes, i: int, packages: frozenset) -> Optional[list[str]]:
    from .importgates import is_test

    if run.dynamic(i):
        return None
    shown, probed = [], False
    for k, line in run.sites(i):
        if is_test(run.results[k].relpath):
            continue
        site = _site(run, found, k, line, packages)
        if site is None:
            return None
        kind, how = site
        if kind == "typing":
            continue
        probed = probed or kind == "probed"
        shown.append(f"{run.results[k].relpath}:{line} {how}")
    return list(dict.fromkeys(shown)) if probed else None


def _siblings(run: RunIndex, i: int, finding) -> Optional[list[int]]:
    """The folder's modules the finding's message folds in (importfolders), or None when not all
    can be read from it."""
    match = _SIBLINGS.search(finding.message)
    if match is None:
        return []
    text = match.group(1)
    if re.search(r"\band \d+ more\b", text):
        return None
    folder = posixpath.dirname(run.results[i].relpath)
    by_path = {run.results[j].relpath: j for j in run.python}
    out = []
    for name in re.findall(r"`([^`]+\.py)`", text):
        j = by_path.get(f"{folder}/{name}" if folder else name)
        if j is None:
            return None
        out.append(j)
    return out


def review(results: list, paths: Optional[dict] = None) -> list:
    """Lower the NPU911 errors of CUDA-only modules loaded only inside probing modules' functions
    to info (see the module's doc)."""
    from .importfolders import packages as _packages
    from .importgates import is_test
    from .tritonguards import UNGUARDED

    targets = [i for i, r in enumerate(results) if r.relpath.endswith(".py") and not is_test(r.relpath)
               and any(open_import(f) and f.severity == "error" for f in r.findings)]
    if not targets:
        return results
    run = RunIndex(results, paths or {})
    found = _Probes(run)
    packages = _packages()
    out = list(results)
    for i in targets:
        tree = run.tree(i)
        if tree is None:
            continue
        findings = list(results[i].findings)
        for index, f in enumerate(findings):
            if not (open_import(f) and f.severity == "error"):
                continue
            needed = _line_packages(tree, finding_lines(f), packages)
            if not needed:
                continue
            needed = frozenset(needed)
            ways = _ways(run, found, i, needed)
            siblings = _siblings(run, i, f)
            if ways is None or siblings is None:
                continue
            if siblings and posixpath.basename(results[i].relpath) != "__init__.py":
                more = [_ways(run, found, j, needed) for j in siblings]
                if any(w is None for w in more):
                    continue
                ways = list(dict.fromkeys(ways + [w for m in more for w in m]))
            shown = ways[:_MAX_SHOWN] + ([f"and {len(ways) - _MAX_SHOWN} more"] if len(ways) > _MAX_SHOWN else [])
            packs = ", ".join(f"`{p}`" for p in sorted(needed))
            note = f"({PROBED.format(packs=packs)}: {'; '.join(shown)})"
            findings[index] = dataclasses.replace(f, severity="info",
                                                  message=f"{f.message.replace(UNGUARDED, '')} {note}")
        if findings != results[i].findings:
            out[i] = dataclasses.replace(results[i], findings=findings)
    return out


# (public for probedsites26.py: the same probes, read for a lazy import in the probing module itself)
Probes = _Probes
line_packages = _line_packages
