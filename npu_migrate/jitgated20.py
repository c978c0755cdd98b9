"""CUDA sources compiled only by JIT loaders an NPU host never imports (issue #16, round 20).

NPU912 says "this `.cu`/`.cuh` file's kernels do not run on an NPU". buildgated.py, folds19.py
and extfolds19.py read the setup.py or CMake build that compiles a source; a project can also
compile its kernels at run time through a JIT loader of its own: a Python module whose function
names the sources in a call (SGLang's `load_jit("gptq_marlin", cuda_files=["gemm/marlin/
gptq_marlin.cuh"])` in `jit_kernel/gptq_marlin.py`). Round-20 audit BC#26: every library module
that imports such a loader module does so under `if _is_cuda:` (`_is_cuda = is_cuda()`, the
project's predicate, False on an NPU host), so an NPU host never imports the loader, never
compiles the headers, and the NPU912 error gives the porter no work.

othersources.py (b) scopes a single JIT-compiled source whose loader's names are used only in
untaken blocks, when no other C/C++ file includes it and its finding stands for no other file; a
header folder (one finding for `folder/*.cuh`) and headers the loaded ones include are this pass's.

The rule (whole run, runplan.whole_run_passes, after buildgated.py): an open NPU912 error on a
CUDA source, or on a folder of headers (group_cuda_headers' `folder/*.cuh` finding: every `.cu`/
`.cuh` of the folder), is a named skipped scope when

* each of its files is named in a string argument of a call (a list element counts) in a Python
  module of the run outside tests and benchmarks (the string is a path tail of the file:
  `gemm/marlin/gptq_marlin.cuh`), or is included (`#include "marlin.cuh"`, followed through
  other files, the `.h` files the run does not scan read from disk) by one that is;
* each such loader module has at least one import site in the library (tests and benchmarks
  aside: they compile the kernel on their own), and every import site (`from pkg.loader import f`,
  `import pkg.loader`, `from pkg import loader`, relative forms too) lies in a block an NPU host
  does not take, read as flags16 reads it (a module-level flag bound to the project's false
  predicate: `if _is_cuda:`, the `else` of `if _is_npu:`);
* no library file names the loader module in a string (a dynamic import).

A source also named in a test's or benchmark's loader only, a loader imported anywhere else (at
module level unguarded, in a function outside such a block), or a folder with a file no loader
reaches, keeps its error.

Cheap first: nothing runs without an open NPU912 error on a `.cu`/`.cuh`; Python files are
byte-tested for the sources' names before any parse, then for the loaders' stems.
"""

from __future__ import annotations

import ast
import dataclasses
import posixpath
import re
from typing import Optional

from . import astcache

JIT_GATED = "compiled only by JIT loaders an NPU host never imports"
_SIDE = re.compile(r"(^|/)(tests?|benchmarks?)/|(^|/)(test_|bench_|benchmark_)[^/]*\.py$|_test\.py$|(^|/)conftest\.py$")
_INCLUDE = re.compile(rb'^[ \t]*#[ \t]*include[ \t]*"([^"\n]+)"', re.MULTILINE)
_SUFFIXES = (".cu", ".cuh")


def _open_error(finding) -> bool:
    from .moot import is_moot

    return (finding.code == "NPU912" and finding.severity == "error" and not finding.fixable
            and finding.cell is None and not is_moot(finding))


def _members(finding, by_folder: dict) -> list[str]:
    folder = posixpath.dirname(finding.path)
    if "*" in (finding.source or ""):
        return sorted(by_folder.get(folder, []))
    return [finding.path]


def _string_args(call: ast.Call):
    for node in [*call.args, *(k.value for k in call.keywords)]:
        for element in (node.elts if isinstance(node, (ast.List, ast.Tuple)) else [node]):
            if isinstance(element, ast.Constant) and isinstance(element.value, str):
                yield element


def _names(tail: str, member: str) -> bool:
    tail = tail.replace("\\", "/").lstrip("./")
    return bool(tail) and (member == tail or member.endswith("/" + tail))


def _reached(referenced: set, read) -> set:
    """The files reached from `referenced` through quoted includes (`#include "marlin.cuh"`,
    resolved beside the including file; a few hundred files at most)."""
    seen, todo = set(referenced), list(referenced)
    while todo and len(seen) < 400:
        rel = todo.pop()
        data = read(rel) or b""
        for match in _INCLUDE.finditer(data):
            target = posixpath.normpath(posixpath.join(posixpath.dirname(rel), match.group(1).decode("utf-8", "replace")))
            if target not in seen and not target.startswith("../"):
                seen.add(target)
                todo.append(target)
    return seen


def _import_sites(tree: ast.Module, relpath: str, dotted: set, parent: str, stem: str) -> list[int]:
    """Lines of the imports of the loader module (`dotted`: its possible names) in a module."""
    from .modpaths import resolve_relative

    lines = []
    for node in astcache.walk(tree):
        if isinstance(node, ast.Import):
            if any(a.name in dotted or any(a.name.startswith(d + ".") for d in dotted) for a in node.names):
                lines.append(node.lineno)
        elif isinstance(node, ast.ImportFrom):
            module = (resolve_relative(relpath, node.level, node.module or "").replace("/", ".") if node.level
                      else node.module or "")
            same_package = module and (module == parent or parent.endswith("." + module)
                                       or module.endswith("." + parent))
            if module in dotted or (same_package and any(a.name == stem for a in node.names)):
                lines.append(node.lineno)
    return lines



def sources_and_library(results: list) -> tuple[dict[str, list[str]], list[int]]:
    """(folder -> the run's `.cu`/`.cuh` files there, the indexes of its library Python files:
    tests, benchmarks and conftest aside); also jitreach23.py's."""
    by_folder: dict[str, list[str]] = {}
    for r in results:
        if r.relpath.endswith(_SUFFIXES):
            by_folder.setdefault(posixpath.dirname(r.relpath), []).append(r.relpath)
    library = [i for i, r in enumerate(results) if r.relpath.endswith(".py") and not _SIDE.search(r.relpath)]
    return by_folder, library

def review(results: list, paths: Optional[dict] = None) -> list:
    """The results, with the NPU912 errors of the module docstring's shape a named skipped scope."""
    targets = [(i, k) for i, r in enumerate(results) for k, f in enumerate(r.findings)
               if r.relpath.endswith(_SUFFIXES) and _open_error(f)]
    if not targets:
        return results
    from .flags16 import bindings, false_blocks, false_predicates
    from .modpaths import RunTexts, module_names
    from .tritonguards import named_in_a_string

    paths = paths or {}
    text_of = RunTexts(results, paths)
    index_of = {r.relpath: i for i, r in enumerate(results)}
    by_folder, library = sources_and_library(results)
    python = [i for i, r in enumerate(results) if r.relpath.endswith(".py")]
    trees: dict[int, Optional[ast.Module]] = {}

    def tree_of(i: int) -> Optional[ast.Module]:
        if i not in trees:
            data = text_of(i)
            trees[i] = astcache.parse(data) if data else None
        return trees[i]

    roots = {paths[r.relpath][:-len(r.relpath)] for r in results
             if r.relpath in paths and paths[r.relpath].replace("\\", "/").endswith(r.relpath)}
    root = next(iter(roots)) if len(roots) == 1 else None

    def read(rel: str) -> Optional[bytes]:
        """A file of the run, or one beside its sources the run does not scan (`kernel.h`)."""
        i = index_of.get(rel)
        if i is not None:
            return text_of(i)
        if root is None:
            return None
        from .reviewcache import read_outside

        return read_outside(root + rel)[1]

    predicates: Optional[frozenset] = None
    verdicts: dict[int, Optional[str]] = {}  # loader module -> its gates, or None

    def loader_gates(i: int) -> Optional[str]:
        nonlocal predicates
        if i in verdicts:
            return verdicts[i]
        verdicts[i] = None
        relpath = results[i].relpath
        dotted = set(module_names(relpath))
        stem = relpath[:-3].rsplit("/", 1)[-1]
        parent = relpath[:-3].rsplit("/", 1)[0].replace("/", ".") if "/" in relpath else ""
        if stem == "__init__" or named_in_a_string(results, i, text_of, library):
            return None
        shown = []
        for j in library:
            if j == i:
                continue
            data = text_of(j)
            if not data or stem.encode() not in data:
                continue
            tree = tree_of(j)
            if tree is None:
                return None
            sites = _import_sites(tree, results[j].relpath, dotted, parent, stem)
            if not sites:
                continue
            if predicates is None:
                predicates = false_predicates(results, text_of)
            lines = data.decode("utf-8", "replace").split("\n")
            blocks = false_blocks(tree, lines, bindings(tree, None, results[j].relpath), predicates)
            for line in sites:
                block = next((b for b in blocks if b[0] <= line <= b[1]), None)
                if block is None:
                    return None
                shown.append(f"`if {block[2]}:` ({results[j].relpath}:{line})")
        if not shown:
            return None
        verdicts[i] = ", ".join(dict.fromkeys(shown))
        return verdicts[i]

    out = list(results)
    for i, k in targets:
        finding = results[i].findings[k]
        members = _members(finding, by_folder)
        if not members:
            continue
        names = {posixpath.basename(m).encode() for m in members}
        loaders: dict[int, list[int]] = {}  # loader module -> lines naming a member
        referenced: set[str] = set()
        side_only = False
        for j in python:
            data = text_of(j)
            if not data or not any(n in data for n in names):
                continue
            tree = tree_of(j)
            if tree is None:
                continue
            for node in astcache.walk(tree):
                if not isinstance(node, ast.Call):
                    continue
                for constant in _string_args(node):
                    hit = [m for m in members if _names(constant.value, m)]
                    if not hit:
                        continue
                    if _SIDE.search(results[j].relpath):
                        side_only = True
                        continue
                    referenced.update(hit)
                    loaders.setdefault(j, []).append(constant.lineno)
        if not loaders:
            continue
        if not set(members) <= _reached(referenced, read):
            continue
        gates = [loader_gates(j) for j in loaders]
        if any(g is None for g in gates):
            continue
        named = ", ".join(f"`{results[j].relpath}:{lines[0]}`" for j, lines in sorted(loaders.items()))
        told = "; ".join(dict.fromkeys(gates))
        also = " (a test or benchmark compiles it too, on its own)" if side_only else ""
        message = (f"{finding.message} ({JIT_GATED}: {named}; every library import of them is in a "
                   f"block an NPU host does not take: {told}){also}")
        findings = list(out[i].findings)
        findings[k] = dataclasses.replace(finding, severity="info", message=message)
        out[i] = dataclasses.replace(out[i], findings=findings)
    return out
