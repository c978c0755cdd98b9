"""CUDA sources compiled only by JIT loaders whose every library use an NPU host never runs (issue
#16, precision wave 23, round-23 audit BM#16).

jitgated20.py scopes an NPU912 error on a JIT-compiled CUDA source (`load_jit("hicache",
cuda_files=["hicache.cuh"])` in a loader module of the library) when every library import of the
loader lies in a block an NPU host does not take (`if _is_cuda:`). A project can also import the
loader unguarded and gate its uses instead:

    # mem_cache/host_pool.py
    from proj.jit_kernel.hicache import can_use_hicache_jit_kernel, transfer_one_layer
    _is_cuda = is_cuda()                                  # the project's predicate, False on an NPU host
    class HostPool:
        def __init__(self):
            self.can_use_jit = _is_cuda and can_use_hicache_jit_kernel(...)
        def load(self):
            if self.can_use_jit:
                transfer_one_layer(...)                   # never run on an NPU host

or import it from no library module at all (a demo kernel only its test compiles, a loader nothing
imports). The rule (whole run, runplan.py right after jitgated20.py): an open NPU912 error on a
`.cu`/`.cuh` file, or on a folder of headers (group_cuda_headers' `folder/*.cuh` finding: every
`.cu`/`.cuh` of the folder), is a named skipped scope when each of its files is named by a string
of a JIT loader call (in a `cuda_files=`/`cuda_sources=` list, or any argument of a call to
`load`/`load_jit`/`load_inline`; a list element counts) in a library module (tests, benchmarks and
setup scripts aside: a build's `CUDAExtension(sources=[...])` is buildgated.py's), and for each
such loader module:

* no library file names the loader module in a string (a dynamic import), no library module
  imports it as a module (`import pkg.loader`, `from pkg import loader`), and no package
  `__init__` re-exports its names;
* every `from pkg.loader import name` of a library module is followed to every read of the name
  there, and each read is never run on an NPU host: a later operand of an `and` whose earlier
  operand is False there (`_is_cuda and f(...)`), a place callgates21.Gates.dead finds under a gate
  false there (with `self.can_use_jit` read through its one assignment), or the body of a function
  or class whose every reference of the run is such a place (Gates.sites);
* a `from pkg.loader import name` in a module that fails to import first on an NPU host (an
  earlier top-level CUDA-only import the run reports as an error) is a dead use too
  (jitcallers27.fails_first);
* a loader no library module imports at all (its tests and benchmarks compile it on their own)
  may be the package's API for its users, who would call it on an NPU host and need the kernel
  ported: the finding is info, not a scope, naming who imports it (jitcallers27.unimported_note,
  wave 27's policies P2/P3; until then it stayed an error).

What stays reported: a source no library loader names (or a folder with one such file), a loader a
library module imports as a module or names in a string, one read an NPU host may run (a call
under a gate whose value is unknown there, a value handed on), a re-export.

The scope keeps what the finding stood for: a folder finding's "(also the kernel-less CUDA headers
...)" clause moves into the scope's reason.
"""

from __future__ import annotations

import ast
import dataclasses
import posixpath
import re
from typing import Optional

from . import astcache

JIT_UNREACHED = "compiled only by JIT loaders whose every library use an NPU host never runs"  # (moot.PHRASES)
_SUFFIXES = (".cu", ".cuh")
_UNIMPORTED = "no library module imports "
_HEADERS_CLAUSE = re.compile(r" \((also the kernel-less CUDA headers [^()]*)\)")


def _open_error(finding) -> bool:
    from .moot import is_moot

    return (finding.code == "NPU912" and finding.severity == "error" and not finding.fixable
            and finding.cell is None and not is_moot(finding))


_JIT_KEYWORDS = frozenset({"cuda_files", "cuda_sources"})
_JIT_LOADERS = frozenset({"load", "load_jit", "load_inline", "jit_load"})


def _string_args(call: ast.Call):
    """The string arguments of a JIT loader call: those in a `cuda_files=`/`cuda_sources=` list of
    any call, every one of a call to `load`/`load_jit`/`load_inline` (a build's `CUDAExtension(
    sources=[...])` is buildgated.py's, not a loader)."""
    loader = (astcache.dotted(call.func, strict=False) or "").rpartition(".")[2] in _JIT_LOADERS
    nodes = [*call.args, *(k.value for k in call.keywords)] if loader else \
        [k.value for k in call.keywords if k.arg in _JIT_KEYWORDS]
    for node in nodes:
        for element in (node.elts if isinstance(node, (ast.List, ast.Tuple)) else [node]):
            if isinstance(element, ast.Constant) and isinstance(element.value, str):
                yield element


def _names(tail: str, member: str) -> bool:
    tail = tail.replace("\\", "/").lstrip("./")
    return bool(tail) and tail.endswith(_SUFFIXES) and (member == tail or member.endswith("/" + tail))


class _Reach:
    """The loader modules' verdicts, with callgates21's gates over the run."""

    def __init__(self, results: list, text_of, library: list):
        from .callgates21 import Gates
        from .flagcalls19 import Run

        self.results, self.text_of, self.library = results, text_of, library
        self.run = Run(results, text_of)
        self.gates = Gates(run=self.run)
        self.verdicts: dict[int, Optional[str]] = {}
        self.late: set = set()  # (loaders judged dead through jitcallers27's readings)
        from .importfolders import packages

        self.packages = packages()

    def _dead(self, j: int, tree: ast.Module, parents: dict, node: ast.AST) -> Optional[str]:
        """Why an NPU host never runs the read `node` of module j, or None."""
        from .callgates21 import unit_of

        child, current = node, parents.get(id(node))
        while current is not None and not isinstance(current, ast.stmt):
            if isinstance(current, ast.BoolOp) and isinstance(current.op, ast.And) and child in current.values:
                for earlier in current.values[:current.values.index(child)]:
                    if self.gates.truth(j, tree, parents, earlier, current, []) is False:
                        shown = " ".join(ast.unparse(earlier).split())[:60]
                        return f"after `{shown} and`, False there"
            child, current = current, parents.get(id(current))
        why = self.gates.dead(j, tree, parents, node)
        if why is not None:
            head, sep, rest = why.partition(": ")
            return rest if sep and rest.startswith(head) else why  # (the gate named once)
        unit = unit_of(tree, node.lineno)
        found = self.gates.sites(j, unit) if unit is not None else None
        if not found:
            return None
        return f"in `{unit.name}`, reached only from code an NPU host does not run ({found[0][1]})"

    def verdict(self, i: int) -> Optional[str]:
        """Why no library code an NPU host runs uses loader module i, or None."""
        if i not in self.verdicts:
            self.verdicts[i] = None
            self.verdicts[i] = self._verdict(i)
        return self.verdicts[i]

    def _verdict(self, i: int) -> Optional[str]:
        from .jitcallers27 import fails_first, gated_import
        from .modpaths import module_names, resolve_relative
        from .tritonguards import named_in_a_string

        relpath = self.results[i].relpath
        dotted = set(module_names(relpath))
        stem = relpath[:-3].rsplit("/", 1)[-1]
        parent = relpath[:-3].rsplit("/", 1)[0].replace("/", ".") if "/" in relpath else ""
        if stem == "__init__" or named_in_a_string(self.results, i, self.text_of, self.library):
            return None
        told = []
        for j in self.library:
            data = self.text_of(j) if j != i else None
            if not data or stem.encode() not in data:
                continue
            tree = self.run.tree(j)
            if tree is None:
                return None
            parents = None
            for node in astcache.walk(tree):
                if isinstance(node, ast.Import) and any(
                        a.name in dotted or any(a.name.startswith(d + ".") for d in dotted) for a in node.names):
                    return None
                if not isinstance(node, ast.ImportFrom):
                    continue
                module = (resolve_relative(self.results[j].relpath, node.level, node.module or "").replace("/", ".")
                          if node.level else node.module or "")
                same_package = module and (module == parent or parent.endswith("." + module)
                                           or module.endswith("." + parent))
                if same_package and any(a.name == stem for a in node.names):
                    return None  # (the loader imported as a module)
                if module not in dotted and not ("." in module and any(
                        module.endswith("." + d) or d.endswith("." + module) for d in dotted)):
                    continue
                if self.results[j].relpath.endswith("__init__.py") or any(a.name == "*" for a in node.names):
                    return None  # (a re-export: its users are elsewhere)
                parents = parents or astcache.parents(tree)
                first = fails_first(self.results[j], tree, node, parents, self.packages) or gated_import(
                    self._dead(j, tree, parents, node))
                if first is not None:  # (the importer fails first, or imports it only under a false gate: jitcallers27.py)
                    told.append(f"{self.results[j].relpath}:{node.lineno} ({first})")
                    self.late.add(i)
                    continue
                for alias in node.names:
                    local = alias.asname or alias.name
                    for read in astcache.walk(tree):
                        if not (isinstance(read, ast.Name) and read.id == local and isinstance(read.ctx, ast.Load)):
                            continue
                        why = self._dead(j, tree, parents, read)
                        if why is None:
                            return None
                        if why.count("(") != why.count(")"):  # (a test cut short: the scope's reason stays balanced)
                            why = why.replace("(", "[").replace(")", "]")
                        told.append(f"{self.results[j].relpath}:{read.lineno} ({why})")
        if not told:
            return f"{_UNIMPORTED}`{relpath}` (only its tests or benchmarks compile it, if any)"
        more = f"; and {len(told) - 2} more" if len(told) > 2 else ""
        return f"every use of `{relpath}`'s functions is in code an NPU host never runs: {'; '.join(told[:2])}{more}"


def review(results: list, paths: Optional[dict] = None) -> list:
    """The results, with the NPU912 errors of the module docstring's shape lowered to info naming
    JIT_UNREACHED (a named skipped scope through moot.to_scopes); a loader no library module
    imports keeps its finding."""
    targets = [(i, k) for i, r in enumerate(results) for k, f in enumerate(r.findings)
               if r.relpath.endswith(_SUFFIXES) and _open_error(f)]
    if not targets:
        return results
    from .modpaths import RunTexts

    text_of = RunTexts(results, paths or {})
    from .jitcallers27 import tested_late
    from .jitgated20 import sources_and_library

    by_folder, library = sources_and_library(results)
    loading = [i for i in library if not results[i].relpath.rsplit("/", 1)[-1].startswith("setup")]
    reach: Optional[_Reach] = None
    out = list(results)
    for i, k in targets:
        finding = results[i].findings[k]
        members = sorted(by_folder.get(posixpath.dirname(finding.path), [])) if "*" in (finding.source or "") \
            else [finding.path]
        names = {posixpath.basename(m).encode() for m in members}
        loaders: dict[str, list[int]] = {}  # member -> loader modules naming it
        for j in loading:
            data = text_of(j)
            if not data or not any(n in data for n in names):
                continue
            tree = astcache.parse(data)
            if tree is None:
                continue
            for node in astcache.walk(tree):
                if isinstance(node, ast.Call):
                    for constant in _string_args(node):
                        for member in members:
                            if _names(constant.value, member) and j not in loaders.get(member, []):
                                loaders.setdefault(member, []).append(j)
        if not members or set(loaders) != set(members):
            continue
        reach = reach or _Reach(results, text_of, library)
        verdicts = {j: reach.verdict(j) for js in loaders.values() for j in js}
        if any(v is None for v in verdicts.values()):
            continue
        if tested_late(results, paths or {}, [j for j in verdicts if j in reach.late]):
            continue  # (its tests' findings fold into it: jitcallers27.tested_late)
        told = "; ".join(dict.fromkeys(verdicts.values()))
        clause = _HEADERS_CLAUSE.search(finding.message)
        base = _HEADERS_CLAUSE.sub("", finding.message)
        extra = f"; {clause.group(1)}" if clause else ""
        if any(v.startswith(_UNIMPORTED) for v in verdicts.values()):
            # a loader the library never imports may be the package's API for its users, who call
            # it on an NPU host and meet the CUDA compile there: info naming who imports it, not a
            # scope (wave 27's policies P2/P3: jitcallers27.py)
            from .jitcallers27 import unimported_note

            note = unimported_note(results, paths or {}, verdicts, _UNIMPORTED, text_of, _compiles_at_import)
            if note is None:
                continue
            message = f"{base} ({note}{extra})"
        else:
            message = f"{base} ({JIT_UNREACHED}: {told}{extra})"
        findings = list(out[i].findings)
        findings[k] = dataclasses.replace(finding, severity="info", message=message)
        out[i] = dataclasses.replace(out[i], findings=findings)
    return out


def _compiles_at_import(data: Optional[bytes]) -> bool:
    """Whether a loader module (its text) calls a JIT loader with CUDA sources outside any function (`_C =
    load(name, sources=["k.cu"])` at module level: importing the module compiles them): such a
    module is no helper a user calls but the project's kernel module itself, and keeps its error."""
    tree = astcache.parse(data) if data else None
    if tree is None:
        return True
    inside = {id(n) for f in astcache.walk(tree) if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
              for n in ast.walk(f)}
    return any(isinstance(node, ast.Call) and id(node) not in inside
               and any(c.value.endswith(_SUFFIXES) for c in _string_args(node))
               for node in astcache.walk(tree))
