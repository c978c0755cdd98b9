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

* `probed`: inside a function of an importing module that defines, or calls by a name it imports
  from a module of the run, a probe of one of the packages the finding names. A probe is a
  function (or method) whose body imports the package in a `try` that catches ImportError, or
  calls `find_spec` / `import_module` / a `has_module`-style helper where the module holds the
  package's name as a string (`{"cutlass": "nvidia-cutlass-dsl"}` looked up one by one), or
  returns, tests or combines another probe of its module (`len(_missing()) == 0`, `return
  is_cute_available("router")`);
* or one lazyimports21.classify calls `guarded` or `selected` (a degrading `try`, a name-selected
  branch), or `typing`.

At least one site must be probed. A module with no library importer, one whose dotted name a string
of another file holds (a dynamic import), or with a site at module level of its importer (or in a
function of a module without a probe) keeps its error, and so does one whose message folds sibling
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

PROBED = ("loaded only lazily, inside functions of modules that test for {packs} first with an availability "
          "probe: where it is missing, as on an NPU host, the probe answers False, and only a call that skips "
          "it reaches this import")
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


def probes(tree: ast.Module, packages: set) -> dict[str, str]:
    """{function name: how} of the module's functions and methods that probe one of `packages`."""
    from .tritonguards import catches_import_errors

    functions = [n for n in astcache.walk(tree) if isinstance(n, _FUNCTIONS)]
    containers = _named_containers(tree, packages)
    found: dict[str, str] = {}
    for function in functions:
        for node in ast.walk(function):
            if isinstance(node, ast.Try) and catches_import_errors(node) and any(
                    _under(n, packages) for s in node.body for m in ast.walk(s) for n in _imports_of(m)):
                found[function.name] = "a try-import of the package"
                break
            callee = (astcache.dotted(node.func) or "").rsplit(".", 1)[-1] if isinstance(node, ast.Call) else ""
            if callee and _PROBE_CALL.match(callee) and _names_a_package(function, node, packages, containers):
                found[function.name] = f"`{callee}` of the package's name"
                break
    changed = True
    while changed:  # (a function returning, testing or combining another probe of the module)
        changed = False
        for function in functions:
            if function.name in found:
                continue
            for node in ast.walk(function):
                callee = (astcache.dotted(node.func) or "").rsplit(".", 1)[-1] if isinstance(node, ast.Call) else ""
                if callee in found and callee != function.name:
                    found[function.name] = f"through `{callee}()`, {found[callee]}"
                    changed = True
                    break
    return found


class _Probes:
    def __init__(self, run: RunIndex) -> None:
        self.run = run
        self.memo: dict = {}

    def of(self, k: int, packages: frozenset) -> Optional[str]:
        """How module k tests for one of `packages` (its own probe, or one it imports by name and
        calls), or None."""
        key = (k, packages)
        if key not in self.memo:
            self.memo[key] = self._of(k, packages)
        return self.memo[key]

    def _of(self, k: int, packages: frozenset) -> Optional[str]:
        tree = self.run.tree(k)
        if tree is None:
            return None
        own = probes(tree, set(packages))
        if own:
            name = sorted(own)[0]
            return f"`{name}()`, {own[name]}"
        imported = {a.asname or a.name: a.name for n in astcache.walk(tree) if isinstance(n, ast.ImportFrom)
                    for a in n.names}
        called = {(astcache.dotted(n.func) or "").rsplit(".", 1)[-1] for n in astcache.walk(tree)
                  if isinstance(n, ast.Call)} & set(imported)
        if not called:
            return None
        for j, _line in self.run.index.files(self.run.imports[k], k):
            other = self.run.tree(j)
            if other is None:
                continue
            theirs = probes(other, set(packages))
            for local in sorted(called):
                if imported[local] in theirs:
                    return f"`{local}()` of {posixpath.basename(self.run.results[j].relpath)}, {theirs[imported[local]]}"
        return None


def _site(run: RunIndex, found: _Probes, k: int, line: int, packages: frozenset) -> Optional[tuple[str, str]]:
    """(kind, how) of an import site: "probed" (checked first), else lazyimports21's "guarded",
    "selected" or "typing"; None otherwise."""
    from .lazyimports21 import classify

    tree = run.tree(k)
    if tree is None:
        return None
    statements = [n for n in astcache.walk(tree) if isinstance(n, (ast.Import, ast.ImportFrom)) and n.lineno == line]
    parent = astcache.parents(tree)
    holders = []
    for statement in statements:
        up = parent.get(id(statement))
        while up is not None and not isinstance(up, _FUNCTIONS):
            up = parent.get(id(up))
        holders.append(up.name if up is not None else None)
    if holders and None not in holders:
        probe = found.of(k, packages)
        if probe is not None:
            return "probed", f"in `{holders[0]}` (the module tests with {probe})"
    kind, how = classify(tree, line)
    if kind in ("typing", "guarded", "selected"):
        return kind, how
    return None


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
