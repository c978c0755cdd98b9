"""CUDA-only modules that only modules failing first on the same package load (issue #16, round 22).

A module that imports a CUDA-only compiled package unguarded at module level (NPU911: `from
cutlass import cute`) is reported as an error "imported unguarded at module level, so the module
fails to import where it is not installed". Round-22 audits found two shapes where that finding,
or another finding of such a package's modules, repeats one the run already gives:

* **A helper whose every importer fails first on the same package** (`fold_covered_helpers`,
  BJ#2). A CuTe-DSL helper package (`__init__.py`: `from cutlass import BFloat16, cute`) whose
  every importer in the run is a kernel module that imports `cutlass` itself, unguarded at module
  level, before it (`import cutlass` on line 5, `from pkg.cute_helpers import cvt` on line 12; or
  the helper imported inside a function of such a module, which runs after the module's own
  import). Where `cutlass` is missing, as on an NPU host, every way in fails at the importer's own
  import first: the helper is never the module that fails, and porting the importers (which need
  `cutlass` themselves) is the work. Its finding folds into one importer's finding on that import
  (an error first, then by path), whose message names the helper, its lines, and the folder
  modules its own message had folded in. A site counts as covered when the importing module has a
  top-level statement (not inside an `if`, a `try` or a function) importing every CUDA-only
  package (sweep.toml `module_codes` NPU911, as importfolders reads them) the helper's finding
  names: before the site's line for a site at module level, anywhere in the module for a site in a
  function. A site under `if TYPE_CHECKING:` never runs. Test files count as importers too (a test
  importing the helper first would meet its failure). A helper with no importer (an entry point),
  one with a site not so covered, one whose dotted name a string of another file holds (a dynamic
  import), one with an `if __name__ == "__main__":` block (run by its path), and one whose message
  folds sibling modules that are not its own package's (importfolders' note on a module that is
  not an `__init__`) keep their finding. A package `__init__`'s sites are the imports of it and
  of its submodules from outside the package (Python runs the `__init__` first). Chains resolve: a
  helper folded into an importer that is itself folded goes with it, to the end of the chain.
* **A module of a package whose `__init__` fails, that nothing imports** (`fold_package_only_modules`,
  BI#23). A package whose `__init__.py` reports NPU911 on a top-level unguarded import of a
  CUDA-only package (an error, or info where lazyimports21 found it loaded only through guarded
  ways) cannot be imported where that package is missing; every module inside it (subfolders
  included) is imported only after the `__init__` runs. A module there that no file of the run
  imports (a profiling or benchmark helper beside the kernels), with no `__main__` block, not
  named in a string of another file nor loaded by its path (`spec_from_file_location`,
  `run_path`, `sys.path` beside its file name), and not a test, cannot be imported on an NPU host
  before the package is ported: its report-only warnings and infos (`ProfilerActivity.CUDA` in a
  benchmark) fold into the `__init__`'s finding, which names each with its code and line. Its
  errors stay (a failure of its own, left after the package is ported), and so do its rewrites.

Nothing is dropped silently: each folded finding is named in the message of the finding that
covers it. Whole-run; called from runplan.whole_run_passes last, after lazyimports21 and probed22
(whose lowerings read the importers' own findings, which a fold here would make name other folders).
"""

from __future__ import annotations

import ast
import posixpath
import re
from dataclasses import replace
from typing import Optional

from . import astcache

CODES = ("NPU911",)
COVERED = ("also covers {what}, which every import in the run loads only after the importing module's own "
           "unguarded import of {packs} (this module's{count}), which fails first where it is missing: "
           "port it with them")
PACKAGE_ONLY = ("also covers the report-only findings of the package's modules that nothing in the run imports, and "
                "that cannot be imported on an NPU host before this `__init__` (which Python runs first) is ported")
_MAX_DEPTH = 8
_MAX_SHOWN = 8
_RANK = {"error": 0, "warning": 1, "info": 2}
_FUNCTIONS = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)
_MAIN = re.compile(rb"^if\s+__name__\s*==\s*[\"']__main__[\"']", re.MULTILINE)
_PATH_LOAD = (b"spec_from_file_location", b"run_path", b"sys.path")


def _top_imports(tree: ast.Module, packages: tuple) -> dict[int, set]:
    """{line: CUDA-only packages} of the module's top-level import statements (not in an `if`,
    a `try` or a function)."""
    from .localcover23 import statement_packages

    out: dict[int, set] = {}
    for node in tree.body:
        found = statement_packages(node, packages)
        if found:
            out.setdefault(node.lineno, set()).update(found)
    return out


def finding_lines(finding) -> list[int]:
    return list(dict.fromkeys([finding.line, *(a[0] for a in finding.also)]))


def _target_packages(finding, tree: ast.Module, packages: tuple) -> Optional[set]:
    """The CUDA-only packages of a finding whose every line is a top-level import of such
    packages, or None."""
    tops = _top_imports(tree, packages)
    found: set = set()
    for line in finding_lines(finding):
        if line not in tops:
            return None
        found |= tops[line]
    return found or None


def open_import(finding) -> bool:
    from .moot import is_moot, named

    return (finding.code in CODES and not finding.fixable and finding.cell is None
            and not is_moot(finding) and not named(finding))


class RunIndex:
    """The run's Python files with their import sites, parsed trees and dynamic loads (public for
    probed22.py, which reads the same sites)."""

    def __init__(self, results, paths) -> None:
        from .modpaths import ImportIndex
        from .tritonguards import run_imports

        self.results = results
        self.python = [i for i, r in enumerate(results) if r.relpath.endswith(".py")]
        self.imports, self.text_of = run_imports(results, self.python, paths)
        self.index = ImportIndex(results, self.python)
        self._sites: Optional[dict[int, list]] = None
        self._trees: dict[int, Optional[ast.Module]] = {}
        self._path_loaders: Optional[list[bytes]] = None

    def tree(self, i: int) -> Optional[ast.Module]:
        if i not in self._trees:
            data = self.text_of(i)
            self._trees[i] = astcache.parse(data) if data is not None else None
        return self._trees[i]

    def sites(self, i: int) -> list[tuple[int, int]]:
        """(importer, line) of every import of file i in the run, tests included; for a package
        `__init__`, also the imports of its submodules from outside the package."""
        if self._sites is None:
            self._sites = {}
            for k in self.python:
                for j, line in self.index.files(self.imports[k], k):
                    self._sites.setdefault(j, []).append((k, line))
        relpath = self.results[i].relpath
        if posixpath.basename(relpath) != "__init__.py":
            return sorted(set(self._sites.get(i, ())))
        folder = posixpath.dirname(relpath) + "/"
        out = set()
        for j in self.python:
            if self.results[j].relpath.startswith(folder):
                out |= {(k, line) for k, line in self._sites.get(j, ())
                        if not self.results[k].relpath.startswith(folder)}
        return sorted(out)

    def texts_but(self, i: int) -> list[bytes]:
        """The text of every other Python file of the run."""
        return [self.text_of(j) or b"" for j in self.python if j != i]

    def dynamic(self, i: int) -> bool:
        """Named in a string of another file, run as a script, or loaded by its path."""
        from .tritonguards import named_in_a_string

        data = self.text_of(i) or b""
        if _MAIN.search(data):
            return True
        relpath = self.results[i].relpath
        if posixpath.basename(relpath) != "__init__.py" \
                and named_in_a_string(self.results, i, self.text_of, self.python):
            return True
        if self._path_loaders is None:
            self._path_loaders = [self.text_of(j) or b"" for j in self.python
                                  if any(m in (self.text_of(j) or b"") for m in _PATH_LOAD)]
        needle = posixpath.basename(relpath).encode()
        return posixpath.basename(relpath) != "__init__.py" and any(
            needle in other for other in self._path_loaders if other is not data)


def _site_covered(tree: ast.Module, line: int, needed: set, packages: tuple, others=None) -> Optional[list[int]]:
    """The top-level import lines of the importer that cover its site at `line` (they import
    every package in `needed` before it runs), or a function-local site's own covering imports
    (localcover23.py; `others()` gives the other files' texts), [] for a site that never runs
    (TYPE_CHECKING), None for a site not covered."""
    statements = [n for n in astcache.walk(tree) if isinstance(n, (ast.Import, ast.ImportFrom)) and n.lineno == line]
    if not statements:
        return None
    parent = astcache.parents(tree)
    deferred = True
    for statement in statements:
        child, up = statement, parent.get(id(statement))
        in_function = False
        while up is not None:
            if isinstance(up, ast.If) and child in up.body \
                    and (astcache.dotted(up.test) or "").rsplit(".", 1)[-1] == "TYPE_CHECKING":
                return []
            if isinstance(up, _FUNCTIONS):
                in_function = True
            child, up = up, parent.get(id(up))
        deferred = deferred and in_function
    tops = _top_imports(tree, packages)
    covering = [n for n, found in sorted(tops.items()) if deferred or n < line]
    got = set().union(*(tops[n] for n in covering)) if covering else set()
    if needed <= got:
        return covering
    if not deferred:
        return None
    from .localcover23 import local_cover  # (the function's own imports before the site, round-23 BM#10)

    lines: set = set()
    for statement in statements:
        own = local_cover(tree, statement, needed, packages, others)
        if own is None:
            return None
        lines.update(own)
    return sorted(lines)


def _what(finding) -> str:
    return finding.message.split(":", 1)[-1].split(";", 1)[0].split(" (", 1)[0].strip()


def _folded_siblings(finding) -> str:
    from .importfolders import FOLDED

    match = re.search(re.escape(FOLDED) + r"[^:]*: ([^)]*)\)", finding.message)
    return f", with the modules of its folder folded into it ({match.group(1)})" if match else ""


def _lines_text(lines: list[int]) -> str:
    shown = ", ".join(map(str, lines[:_MAX_SHOWN])) + (f" and {len(lines) - _MAX_SHOWN} more"
                                                        if len(lines) > _MAX_SHOWN else "")
    return f"line{'s' if len(lines) > 1 else ''} {shown}"


def fold_covered_helpers(results: list, paths: Optional[dict] = None) -> list:
    """Module's doc, first shape: a CUDA-only helper's NPU911 error folded into the finding of an
    importer that fails first on the same package."""
    from .importfolders import FOLDED, packages as _packages

    candidates = [i for i, r in enumerate(results) if r.relpath.endswith(".py")
                  and any(open_import(f) and f.severity == "error" for f in r.findings)]
    if not candidates:
        return results
    run = RunIndex(results, paths or {})
    packages = _packages()
    # (helper file, finding index) -> (importer file, finding index, importers count, packages)
    carriers: dict[tuple[int, int], tuple[int, int, int, set]] = {}
    for i in candidates:
        tree = run.tree(i)
        if tree is None:
            continue
        relpath = results[i].relpath
        for k, f in enumerate(results[i].findings):
            if not (open_import(f) and f.severity == "error"):
                continue
            if FOLDED in f.message and posixpath.basename(relpath) != "__init__.py":
                continue
            needed = _target_packages(f, tree, packages)
            if not needed:
                continue
            carrier = _carrier(run, i, needed, packages)
            if carrier is not None:
                carriers[(i, k)] = (*carrier, needed)
            break
    if not carriers:
        return results
    notes: dict[tuple[int, int], list[str]] = {}
    gone: set = set()
    for (i, k), (j, kj, count, needed) in sorted(carriers.items(), key=lambda e: results[e[0][0]].relpath):
        root = (j, kj)
        seen = {(i, k)}
        while root in carriers and root not in seen and len(seen) <= _MAX_DEPTH:
            seen.add(root)
            root = carriers[root][:2]
        if root in seen or root in carriers:
            continue  # (a cycle, or a chain too long: kept)
        f = results[i].findings[k]
        packs = ", ".join(f"`{p}`" for p in sorted(needed))
        what = (f"`{results[i].relpath}` ({_what(f)}, {_lines_text(finding_lines(f))}{_folded_siblings(f)})")
        others = f", and those of {count - 1} more importer{'s' if count != 2 else ''}" if count > 1 else ""
        notes.setdefault(root, []).append(COVERED.format(what=what, packs=packs, count=others))
        gone.add((i, k))
    return apply_folds(results, notes, gone)


def apply_folds(results: list, notes: dict, gone: set) -> list:
    """The results with each covering finding's notes appended to its message ({(j, k): [text]}) and
    the folded findings ({(i, k)}) removed (also tritonfirst34's)."""
    out = list(results)
    for (j, kj), texts in notes.items():
        findings = list(out[j].findings)
        findings[kj] = replace(findings[kj], message=f"{findings[kj].message} ({'; '.join(texts)})")
        out[j] = replace(out[j], findings=findings)
    for i in {i for i, _k in gone}:
        out[i] = replace(out[i], findings=[f for k, f in enumerate(out[i].findings) if (i, k) not in gone])
    return out


def _carrier(run: RunIndex, i: int, needed: set, packages: tuple) -> Optional[tuple[int, int, int]]:
    """(importer, its finding, count of covering importers) that helper i's finding folds into."""
    if run.dynamic(i):
        return None
    sites = run.sites(i)
    if not sites:
        return None
    covering: dict[int, set] = {}
    for k, line in sites:
        tree = run.tree(k)
        if tree is None:
            return None
        lines = _site_covered(tree, line, needed, packages, lambda: run.texts_but(k))
        if lines is None:
            return None
        if lines:
            covering.setdefault(k, set()).update(lines)
    best = None
    for k, lines in covering.items():
        for index, f in enumerate(run.results[k].findings):
            if open_import(f) and set(finding_lines(f)) & lines:
                key = (_RANK.get(f.severity, 3), run.results[k].relpath, index)
                if best is None or key < best[0]:
                    best = (key, k, index)
    if best is None:
        return None
    return best[1], best[2], len(covering)


def fold_package_only_modules(results: list, paths: Optional[dict] = None) -> list:
    """Module's doc, second shape: the warnings and infos of a module nothing imports, inside a
    package whose `__init__` fails on a CUDA-only package, folded into the `__init__`'s finding."""
    from .importfolders import packages as _packages
    from .importgates import is_test

    inits = [i for i, r in enumerate(results) if posixpath.basename(r.relpath) == "__init__.py"
             and any(open_import(f) and f.severity in ("error", "info") for f in r.findings)]
    if not inits:
        return results
    run = RunIndex(results, paths or {})
    packages = _packages()
    out = list(results)
    for init in sorted(inits, key=lambda n: results[n].relpath):
        tree = run.tree(init)
        if tree is None:
            continue
        carrier = next((k for k, f in enumerate(out[init].findings)
                        if open_import(f) and f.severity in ("error", "info") and _target_packages(f, tree, packages)), None)
        if carrier is None:
            continue
        folder = posixpath.dirname(results[init].relpath) + "/"
        named = []
        for i in run.python:
            relpath = results[i].relpath
            if i == init or not relpath.startswith(folder) or is_test(relpath):
                continue
            movable = [f for f in out[i].findings if not f.fixable and f.severity in ("warning", "info")
                       and not _named_scope(f)]
            if not movable or run.sites(i) or run.dynamic(i):
                continue
            shown = ", ".join(f"{f.code} {_lines_text(finding_lines(f))}" for f in movable)
            named.append(f"`{relpath[len(folder):]}` ({shown})")
            out[i] = replace(out[i], findings=[f for f in out[i].findings if not any(f is m for m in movable)])
        if named:
            findings = list(out[init].findings)
            f = findings[carrier]
            findings[carrier] = replace(f, message=f"{f.message} ({PACKAGE_ONLY}: {'; '.join(named)})")
            out[init] = replace(out[init], findings=findings)
    return out


def _named_scope(finding) -> bool:
    from .moot import is_moot, named

    return is_moot(finding) or named(finding)


def review(results: list, paths: Optional[dict] = None) -> list:
    """Both folds of the module's doc."""
    return fold_package_only_modules(fold_covered_helpers(results, paths), paths)


# public for tritonfirst34.py (the same fold for a Triton module's NPU910 import)
site_covered = _site_covered
lines_text = _lines_text
what = _what
