"""CUDA sources of an extension the project treats as optional (issue #16, round 14).

A `.cu` file's NPU912 says "its kernels do not run on an NPU". Where the project builds or loads the
extension those kernels belong to only in a way that falls back when that fails, an NPU host runs
the project's other path: the kernels are a fast path to port for speed, not a failure. Two shapes,
read across files (whole-run pass, runplan.whole_run_passes):

* **A JIT build caught in place.** Every Python reference to the `.cu` (its file name in a string)
  is a source of a `load(...)`/`load_inline(...)` call (torch.utils.cpp_extension) inside a `try`
  whose handlers catch the failure (`except Exception:`) and do not raise: peft's BOFT builds
  `fbd_cuda_kernel.cu` so, warns, and uses its block-diagonal in torch.
* **A setup.py extension every importer probes.** The `.cu` is a source of a `CUDAExtension` in a
  setup.py, and every import of that extension's module outside the tests is in a `try` whose
  handlers catch `ImportError`/`Exception` and do not raise (`try: import autogptq_cuda_64 except
  ImportError: autogptq_cuda_64 = None`). The setup.py's CUDA build keeps its own finding.

The NPU912 error becomes info naming the fallback (`file:line`): the kernel is worth a look for
speed, which is what info means. A `.cu` named anywhere else (another call, outside a `try`, a
handler that raises, an extension imported plainly or not at all) keeps its error.

Cheap first: only `.cu` files with an open NPU912 error are considered, and a Python file is parsed
only when its bytes hold one of their file names or extension module names.
"""

from __future__ import annotations

import ast
import dataclasses
import posixpath
from typing import Optional

from . import astcache

CAUGHT = ("`{site}` {how} only inside a `try` that catches the failure and does not raise, so an NPU host, "
          "where it cannot be built, runs the project without it; port the kernels for speed")
_LOADERS = {"load", "load_inline"}
_SHIPPED = {"package_data", "data_files", "exclude_package_data"}
_CATCHES = {"Exception", "BaseException", "ImportError", "ModuleNotFoundError", "RuntimeError", "OSError"}


def _open_error(finding) -> bool:
    from .moot import is_moot

    return (finding.code == "NPU912" and finding.severity == "error" and not finding.fixable
            and finding.cell is None and not is_moot(finding))


def _string_tail(node: ast.AST) -> Optional[str]:
    """A string constant, or the constant end of an f-string (`f"{here}/fbd/kernel.cu"`)."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr) and node.values and isinstance(node.values[-1], ast.Constant):
        return str(node.values[-1].value)
    return None


def _catching_try(node: ast.AST, parent: dict) -> Optional[ast.Try]:
    """The innermost `try` whose body holds `node` and whose handlers all catch a failure to build
    or import and none raises; None otherwise (or when no `try` holds it)."""
    child, current = node, parent.get(id(node))
    while current is not None and not isinstance(current, (ast.FunctionDef, ast.AsyncFunctionDef,
                                                           ast.ClassDef, ast.Module)):
        if isinstance(current, ast.Try) and child in current.body:
            if current.handlers and all(_falls_back(h) for h in current.handlers):
                return current
            return None
        child, current = current, parent.get(id(current))
    return None


def _falls_back(handler: ast.ExceptHandler) -> bool:
    names = []
    if handler.type is None:
        names = ["Exception"]
    else:
        for t in (handler.type.elts if isinstance(handler.type, ast.Tuple) else [handler.type]):
            name = astcache.dotted(t)
            names.append((name or "").rsplit(".", 1)[-1])
    if not any(n in _CATCHES for n in names):
        return False
    return not any(isinstance(n, ast.Raise) for stmt in handler.body for n in ast.walk(stmt))


def _call_name(call: ast.Call) -> str:
    return (astcache.dotted(call.func) or "").rsplit(".", 1)[-1]


def review(results: list, paths: dict) -> list:
    """NPU912 errors of `.cu` files whose extension the project only builds or imports where a
    failure falls back (module's doc): info with the fallback's place."""
    from .importgates import is_test
    from .modpaths import RunTexts

    cu = {r.relpath: i for i, r in enumerate(results)
          if r.relpath.lower().endswith(".cu") and any(map(_open_error, r.findings))}
    if not cu:
        return results
    by_base: dict[str, list[str]] = {}
    for rel in cu:
        by_base.setdefault(posixpath.basename(rel), []).append(rel)
    texts = RunTexts(results, paths)
    python = [i for i, r in enumerate(results) if r.relpath.endswith(".py")]
    needles = [b.encode() for b in by_base]
    # relpath of a .cu -> list of ("jit", file, line) / ("ext", module name, setup line) / ("bad", ...)
    uses: dict[str, list] = {}
    for i in python:
        data = texts(i) or b""
        if b".cu" not in data or not any(n in data for n in needles):
            continue  # (byte pre-test before a parse)
        tree = astcache.parse(data)
        if tree is None:
            continue
        parent = astcache.parents(tree)
        relpath = results[i].relpath
        for node in astcache.walk(tree):
            tail = _string_tail(node)
            if not tail or not tail.lower().endswith(".cu"):
                continue
            base = posixpath.basename(tail.replace("\\", "/"))
            for rel in by_base.get(base, []):
                if not _same_file(relpath, tail, rel):
                    continue
                uses.setdefault(rel, []).append(_use(node, parent, relpath))
    if not uses:
        return results
    # extension modules named in setup.py: which of them every importer probes
    modules = {u[1] for found in uses.values() for u in found if u[0] == "ext"}
    probed = _probed_modules(modules, results, python, texts, is_test) if modules else {}
    out = list(results)
    for rel, found in uses.items():
        sites = []
        for use in found:
            if use[0] == "data":
                continue
            if use[0] == "jit":
                sites.append(f"{use[1]}:{use[2]}")
            elif use[0] == "ext" and probed.get(use[1]):
                sites.append(probed[use[1]])
            else:
                sites = []
                break
        if not sites:
            continue
        kind = next(u[0] for u in found if u[0] != "data")
        how = "builds it (JIT)" if kind == "jit" else "imports it"
        why = CAUGHT.format(site=sites[0], how=how)
        k = cu[rel]
        out[k] = dataclasses.replace(out[k], findings=[
            dataclasses.replace(f, severity="info", message=f"{f.message} (an optional extension: {why})")
            if _open_error(f) else f for f in out[k].findings])
    return out


def _same_file(relpath: str, tail: str, cu_rel: str) -> bool:
    """Whether the string `tail` in `relpath` names the run's `.cu` at `cu_rel`: a path with `..`
    resolved from the file's folder, any other path (or an f-string's constant end) by its whole
    trailing components."""
    tail = tail.replace("\\", "/")
    parts = [p for p in tail.split("/") if p and p != "."]
    if ".." in parts:
        return posixpath.normpath(posixpath.join(posixpath.dirname(relpath), tail)) == cu_rel
    return ("/" + cu_rel).endswith("/" + "/".join(parts))


def _use(node: ast.AST, parent: dict, relpath: str) -> tuple:
    """What names a `.cu` at `node`: a JIT load caught in place, a CUDAExtension, or anything else
    (the enclosing calls up to the statement are read: `os.path.join(here, "k.cu")` inside a load)."""
    current = parent.get(id(node))
    while current is not None and not isinstance(current, ast.stmt):
        if isinstance(current, ast.keyword) and current.arg in _SHIPPED:
            return ("data",)  # (shipped as a file of the package: neither a build nor a load)
        if isinstance(current, ast.Call):
            name = _call_name(current)
            if name in _LOADERS:
                guard = _catching_try(current, parent)
                return ("jit", relpath, current.lineno) if guard is not None else ("bad",)
            if name == "CUDAExtension" and posixpath.basename(relpath) == "setup.py":
                return _extension(current)
        current = parent.get(id(current))
    return ("bad",)


def _extension(call: ast.Call) -> tuple:
    label = None
    if call.args and isinstance(call.args[0], ast.Constant) and isinstance(call.args[0].value, str):
        label = call.args[0].value
    for keyword in call.keywords:
        if keyword.arg == "name" and isinstance(keyword.value, ast.Constant) and isinstance(keyword.value.value, str):
            label = keyword.value.value
    return ("ext", label, call.lineno) if label else ("bad",)


def _probed_modules(modules: set, results: list, python: list, texts, is_test) -> dict:
    """{extension module: the first probe's `file:line`} for the modules every import of which
    (outside the tests and setup.py) sits in a `try` that falls back; modules never imported, or
    imported once otherwise, are left out."""
    needles = {m: m.rsplit(".", 1)[-1].encode() for m in modules}
    seen: dict[str, list] = {m: [] for m in modules}
    bad: set = set()
    for i in python:
        relpath = results[i].relpath
        if is_test(relpath) or posixpath.basename(relpath) == "setup.py":
            continue
        data = texts(i) or b""
        hits = [m for m, n in needles.items() if n in data and m not in bad]
        if not hits:
            continue
        tree = astcache.parse(data)
        if tree is None:
            continue
        parent = astcache.parents(tree)
        for node in astcache.nodes(tree, (ast.Import, ast.ImportFrom)):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif node.level:
                continue
            else:
                names = [node.module or ""] + [f"{node.module}.{a.name}" for a in node.names]
            for m in hits:
                if any(n == m or n.startswith(m + ".") for n in names):
                    if _catching_try(node, parent) is None:
                        bad.add(m)
                    else:
                        seen[m].append(f"{relpath}:{node.lineno}")
    return {m: sites[0] for m, sites in seen.items() if sites and m not in bad}


# (public for extfolds19.py: extensions imported together in one catching `try`)
catching_try = _catching_try
