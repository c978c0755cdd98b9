"""CUDA sources that only tests or only CUDA-gated code reach (issue #16, round-13 audits).

Two shapes the reviewers read as false or redundant, each proven from the run's own files:

(a) A `.cu` whose registered ops no library code calls (AI#28, AJ#32: xformers'
    `csrc/sparse24/sparseNM_dense.cu` and `sparse24_pack_test.cu`): the file registers CUDA
    implementations (`TORCH_LIBRARY_IMPL(ns, CUDA, m)`) of ops (`m.impl("name", ...)`,
    `m.def("name(...)")`) that no Python module of the run but tests names, while another `.cu` of
    the same folder that keeps its NPU912 error registers an op that library code does call (the
    folder's feature is reported there, and the library is in the run). Its NPU912 error is
    folded into that sibling's finding, whose message names it (as `.cuh` headers are folded per
    folder): one port item, not two.
(b) A JIT-compiled `.cu`/`.cuh` whose loader is called only where an NPU host never goes (AH#22:
    SGLang's `jit_kernel/csrc/diffusion/timestep_embedding.cuh`): the only non-test Python files
    that name the source are loader modules holding a string that is a tail of its path
    (`cuda_files=["diffusion/timestep_embedding.cuh"]`), no other C/C++ file of the run names it
    (no `#include`), and every name any non-test module imports from a loader is used only in
    blocks an NPU host never runs (testscopes.untaken_branches: `if _is_cuda:` with `_is_cuda =
    current_platform.is_cuda()`), or lie in one undecorated module-level function whose every
    reference in the run is CUDA-only code (callersonly.CallerFinder; round-14 AL#23: SGLang's
    `hadamard_jit.cuh`, whose loader only `rotate_activation` imports, reached only from
    `Indexer.forward_cuda` of a `MultiPlatformOp` with `forward_npu`). Its finding becomes a named
    skipped scope ("in a branch an NPU host does not take", moot.PHRASES) whose reason names the
    loader and the gate or the callers.

Whole-run, text first: only `.cu`/`.cuh` files with an open NPU912 error are read; a Python file is
parsed only when its bytes name the source's file name or the loader's module name (byte
pre-tests). Called once, from cudasources.review.
"""

from __future__ import annotations

import ast
import os
import re
from dataclasses import replace

# (moot.PHRASES carries "in a branch an NPU host does not take")
GATED_LOADER = "in a branch an NPU host does not take"
TESTS_ONLY = "reported once with it: no library module calls their ops"

_FOLDED = ("with the CUDA header", "CUDA headers in", "byte-identical", "reported once", "its other sources")
_CUDA_IMPL = re.compile(rb"TORCH_LIBRARY_IMPL\s*\(\s*\w+\s*,\s*CUDA\b")
_OP_NAME = re.compile(rb"\.\s*(?:impl|def)\s*\(\s*\"(?:\w+::)?(\w+)")
_CPP = (".cu", ".cuh", ".h", ".hpp", ".hh", ".cpp", ".cc", ".cxx", ".c", ".inl")


def _open_error(finding) -> bool:
    from .moot import is_moot

    return (finding.code == "NPU912" and finding.severity == "error" and not finding.fixable
            and finding.cell is None and not is_moot(finding)
            and not any(word in finding.message for word in _FOLDED))


def review(results: list, paths: dict | None = None) -> list:
    """Both reviews of the module docstring over a run's results (a new list)."""
    paths = paths or {}
    errors = [i for i, r in enumerate(results) if r.relpath.lower().endswith((".cu", ".cuh"))
              and any(_open_error(f) for f in r.findings)]
    if not errors:
        return results
    from .importgates import is_test
    from .modpaths import RunTexts

    texts = RunTexts(results, paths)
    library = [i for i, r in enumerate(results) if r.relpath.endswith(".py") and not is_test(r.relpath)]
    out = fold_test_only_ops(results, errors, library, texts)
    return lower_gated_jit_sources(out, errors, library, texts, paths)


# ----------------------------------------------------------------------------- (a) ops only tests call

def _ops(data: bytes) -> list[str]:
    """The op names a `.cu` registers CUDA implementations of (empty when it registers none)."""
    if not _CUDA_IMPL.search(data):
        return []
    return sorted({m.group(1).decode() for m in _OP_NAME.finditer(data)})


def fold_test_only_ops(results: list, errors: list, library: list, texts) -> list:
    """Module's doc, (a)."""
    folders: dict[str, list[int]] = {}
    for i in errors:
        if results[i].relpath.lower().endswith(".cu"):
            folders.setdefault(os.path.dirname(results[i].relpath), []).append(i)
    out = list(results)
    for members in folders.values():
        if len(members) < 2:
            continue
        called: dict[int, list[str]] = {}  # (file: its ops that library code names)
        ops_of: dict[int, list[str]] = {}
        for i in members:
            ops_of[i] = _ops(texts.get(i) or b"")
            called[i] = []
            for name in ops_of[i]:
                word = re.compile(rb"\b" + re.escape(name.encode()) + rb"\b")
                if any(name.encode() in (texts.get(j) or b"") and word.search(texts.get(j) or b"") for j in library):
                    called[i].append(name)
        unused = [i for i in members if ops_of[i] and not called[i]]
        kept = sorted((i for i in members if called[i]), key=lambda i: results[i].relpath)
        if not unused or not kept:
            continue
        first = kept[0]
        names = sorted((results[i].relpath for i in unused))
        ops = sorted({op for i in unused for op in ops_of[i]})
        note = (f"also {', '.join(f'`{os.path.basename(n)}`' for n in names)} of this folder, "
                f"{TESTS_ONLY} ({', '.join(f'`{op}`' for op in ops[:6])}{', ...' if len(ops) > 6 else ''}); "
                "only tests do")
        done = False
        findings = []
        for f in out[first].findings:
            if not done and _open_error(f):
                f = replace(f, message=f"{f.message} ({note})")
                done = True
            findings.append(f)
        out[first] = replace(out[first], findings=findings)
        for i in unused:
            out[i] = replace(out[i], findings=[f for f in out[i].findings if not _open_error(f)])
    return out


# ----------------------------------------------------------------------------- (b) JIT sources behind a CUDA gate

def _tail_strings(data: bytes, relpath: str) -> bool:
    """The loader holds a string naming the source: a tail of its path (`"diffusion/x.cuh"`),
    read from its bytes (no parse)."""
    base = re.escape(os.path.basename(relpath).encode())
    for match in re.finditer(rb"[\"']([^\"'\n]*" + base + rb")[\"']", data):
        tail = match.group(1).decode("utf-8", "replace").replace("\\", "/").lstrip("./")
        if relpath == tail or relpath.endswith("/" + tail):
            return True
    return False


def _bound_names(tree: ast.Module, importer: str, loader: str, dotted: set) -> list[str] | None:
    """Names `importer` binds from the loader module (`from pkg.loader import f as g`); None when
    it names the loader some other way (`import pkg.loader`, `from pkg import loader`, a string)."""
    from .modpaths import resolve_relative

    stem, last = loader[:-3], os.path.basename(loader)[:-3]
    names: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            module = node.module or ""
            target = resolve_relative(importer, node.level, module) if node.level else None
            if (target == stem) if node.level else (module in dotted):
                if any(a.name == "*" for a in node.names):
                    return None
                names += [a.asname or a.name for a in node.names]
            elif any(a.name == last for a in node.names):
                parent = resolve_relative(importer, node.level, module) if node.level else module
                if (node.level and parent == os.path.dirname(stem)) or (
                        not node.level and any(d.rsplit(".", 1)[0] == module for d in dotted if "." in d)):
                    return None
        elif isinstance(node, ast.Import) and any(a.name in dotted for a in node.names):
            return None
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value in dotted:
            return None
    return names


def cuda_only_helper(tree: ast.Module, refs: list, finder) -> str | None:
    """Where every line of `refs` lies in one undecorated module-level function whose every
    reference in the run is CUDA-only code (callersonly.CallerFinder: a platform-dispatched op's
    `forward_cuda`, a block an NPU host never runs, ...): "`name`, reached only from ..."; else None."""
    functions = {next((s for s in tree.body if isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef))
                       and s.lineno < line <= (s.end_lineno or s.lineno)), None) for line in refs}
    if len(functions) != 1 or None in functions:
        return None
    function = functions.pop()
    if function.decorator_list:
        return None
    ends = finder.callers(function.name, None, frozenset(), 0)
    if not ends:
        return None
    return f"`{function.name}`, reached only from " + "; ".join(ends[:2]) + (
        f"; and {len(ends) - 2} more" if len(ends) > 2 else "")


def lower_gated_jit_sources(results: list, errors: list, library: list, texts, paths: dict | None = None) -> list:
    """Module's doc, (b)."""
    from . import astcache
    from .modpaths import module_names
    from .testscopes import untaken_branches

    cpp = None
    finder = None  # (callersonly.CallerFinder, made on first need)
    out = list(results)
    for i in errors:
        relpath = results[i].relpath
        base = os.path.basename(relpath).encode()
        loaders = [j for j in library if base in (texts.get(j) or b"")]
        if not loaders:
            continue
        if cpp is None:
            cpp = [k for k, r in enumerate(results) if r.relpath.lower().endswith(_CPP)]
        if any(k != i and base in (texts.get(k) or b"") for k in cpp):
            continue  # (another C/C++ file names it: an `#include` may bring it into other kernels)
        gates: list[str] = []
        ok = True
        for j in loaders:
            if not _tail_strings(texts.get(j) or b"", relpath):
                ok = False
                break
            loader = results[j].relpath
            dotted = set(module_names(loader))
            last = os.path.basename(loader)[:-3].encode()
            # (byte pre-test before a parse: the file names the loader's dotted name or its
            # package's (`from pkg import loader`), or imports relatively)
            parents = {d.rsplit(".", 1)[0] for d in dotted if "." in d}
            names_it = re.compile(b"|".join(re.escape(d.encode()) + rb"\b"
                                            for d in sorted(dotted | parents, key=len, reverse=True))
                                  + rb"|\bfrom\s+\.")
            for k in library:
                if k == j:
                    continue
                data = texts.get(k) or b""
                if last not in data or not names_it.search(data):
                    continue
                other = astcache.parse(data)
                if other is None:
                    ok = False
                    break
                names = _bound_names(other, results[k].relpath, loader, dotted)
                if names is None:
                    ok = False
                    break
                if not names:
                    continue
                refs = [n.lineno for n in astcache.walk(other) if isinstance(n, ast.Name) and n.id in names]
                if not refs:
                    ok = False  # (imported, never used here: maybe re-exported)
                    break
                blocks = untaken_branches(data.decode("utf-8", "replace"), results[k].relpath, set(refs))
                inside = [next((b for b in blocks if b[0] <= line <= b[1]), None) for line in refs]
                if any(b is None for b in inside):
                    if finder is None:
                        from .callersonly import CallerFinder

                        finder = CallerFinder(results, paths)
                    reached = cuda_only_helper(other, refs, finder)
                    if reached is None:
                        ok = False
                        break
                    gates.append(f"`{results[k].relpath}` line {refs[0]}, in {reached}")
                    continue
                condition = inside[0][2]
                shown = condition if "`" in condition else f"`{condition}`"
                gates.append(f"`{results[k].relpath}` line {refs[0]}, under {shown}")
            if not ok:
                break
        if not ok or not gates:
            continue
        shown_loaders = ", ".join(f"`{results[j].relpath}`" for j in loaders)
        why = (f"{GATED_LOADER}: it is compiled only by the JIT loader {shown_loaders}, which library code "
               f"calls only in blocks an NPU host never runs ({'; '.join(gates[:3])})")
        out[i] = replace(out[i], findings=[replace(f, severity="info", message=f"{f.message} ({why})")
                                           if _open_error(f) else f for f in out[i].findings])
    return out
