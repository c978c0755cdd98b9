"""CUDA extensions the project selects only where its own import probe finds them (issue #16,
round-25 audit BT#30). Whole run, from runplan.whole_run_passes, after optionalcu.py.

    # utils/import_utils.py
    try:
        import fast_kernels                       # the extension setup.py builds from the .cu files
        FAST_KERNELS_AVAILABLE = True
    except Exception:
        FAST_KERNELS_AVAILABLE = False

    def select_linear(bits, disable_fast=False):
        if bits == 4 and not disable_fast and FAST_KERNELS_AVAILABLE:
            from ..qlinear.qlinear_fast import QuantLinear    # the layer needing the extension
        else:
            from ..qlinear.qlinear_plain import QuantLinear   # plain torch
        return QuantLinear

    # qlinear/qlinear_fast.py
    try:
        from fast_kernels import q4_matmul
    except ImportError as e:
        def _raiser(*args, **kwargs):
            raise ValueError(f"fast kernels missing: {e}")   # (raised when called, not at import)
        q4_matmul = _raiser

optionalcu.py makes a `.cu` finding info when every import of its extension sits in a `try` that
falls back. Here the fallback is one level up: the layer module's `try` binds stubs that raise
when called (no fallback of its own), but the project builds that layer only where the probe of
the same extension holds, and takes another layer otherwise. An NPU host, where the extension
cannot be built, never selects it: the kernels are a fast path to port for speed, as optionalcu
says of a sibling extension imported in a plain `try`.

Read, for an open NPU912 error naming its extension (`of the extension `fast_kernels``,
extfolds19's folded message):

* the probe: a module-level `try` of a module of the run that imports the extension and sets a
  flag True, with a handler catching the failure that sets it False (the flag bound nowhere else);
* the selection: an `if`/`elif` whose test is the flag, or an `and` holding it, in that module or
  one importing the flag from it, whose body imports from a module of the run (the layer module);
* the layer module imports the extension at module level only in such a `try`, whose handlers
  catch the import's failure and raise nowhere but inside the stubs they define;
* every other import of the layer module outside the tests, at module level, binds names the file
  never calls (`isinstance` tests, annotations); every other import of the extension, and any other
  import of the layer module that calls what it binds, lies inside a function (lazy, named in the
  message: helpers serving the selected layers).

The NPU912 error becomes info naming the probe, the selection and the lazy imports; not a scope.
An extension selected by a user flag alone (`if not disable_marlin:`), a layer module importing it
plainly, or a module-level importer that builds the layer, keeps its error.
"""

from __future__ import annotations

import ast
import dataclasses
import re

from . import astcache
from .modpaths import RunTexts, module_names, resolve_relative
from .probes16 import scope_of

_EXTENSION = re.compile(r"of the extension `([\w.]+)`")
_DEFS = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)
_CATCHES = frozenset({"ImportError", "ModuleNotFoundError", "Exception", "BaseException"})
PROBED = ("an optional extension: the project takes the layers that need it (`{layer}`) only where its import probe "
          "`{flag}` ({probe}) holds ({selection}), and `{layer}` imports it in a `try` whose fallback binds stubs; "
          "an NPU host, where it cannot be built, runs the project's other kernels{lazy}; port the kernels for speed")


def _open912(finding) -> bool:
    from .moot import is_moot

    return (finding.code == "NPU912" and finding.severity == "error" and not finding.fixable
            and finding.cell is None and not is_moot(finding))


def _imports(node: ast.AST, module: str) -> bool:
    if isinstance(node, ast.Import):
        return any(a.name == module or a.name.startswith(module + ".") for a in node.names)
    if isinstance(node, ast.ImportFrom) and not node.level and node.module:
        return node.module == module or node.module.startswith(module + ".")
    return False


def _caught(handler: ast.ExceptHandler) -> bool:
    if handler.type is None:
        return True
    kinds = handler.type.elts if isinstance(handler.type, ast.Tuple) else [handler.type]
    return any((astcache.dotted(k) or "").rsplit(".", 1)[-1] in _CATCHES for k in kinds)


def _sets(block: list, flag: str, value: bool) -> bool:
    return any(isinstance(s, ast.Assign) and any(isinstance(t, ast.Name) and t.id == flag for t in s.targets)
               and isinstance(s.value, ast.Constant) and s.value.value is value for s in block)


def probe_flag(tree: ast.Module, extension: str) -> tuple[str, int] | None:
    """(flag, line) of the module-level import probe of `extension`, or None."""
    for stmt in tree.body:
        if not (isinstance(stmt, ast.Try) and stmt.handlers and all(_caught(h) for h in stmt.handlers)
                and any(_imports(s, extension) for s in stmt.body)):
            continue
        for s in stmt.body:
            if isinstance(s, ast.Assign) and len(s.targets) == 1 and isinstance(s.targets[0], ast.Name) \
                    and isinstance(s.value, ast.Constant) and s.value.value is True:
                flag = s.targets[0].id
                if not all(_sets(h.body, flag, False) for h in stmt.handlers):
                    continue
                bound = [n for n in astcache.walk(tree) if isinstance(n, (ast.Assign, ast.AugAssign, ast.AnnAssign))
                         and any(isinstance(t, ast.Name) and t.id == flag
                                 for t in (n.targets if isinstance(n, ast.Assign) else [n.target]))]
                if len(bound) == 1 + len(stmt.handlers):
                    return flag, stmt.lineno
    return None


def _stub_fallback(tree: ast.Module, extension: str) -> bool:
    """Whether the module imports `extension` at module level, only in `try`s whose handlers catch
    the failure and raise only inside the functions they define (stubs)."""
    found = False
    for stmt in tree.body:
        if isinstance(stmt, (ast.Import, ast.ImportFrom)) and _imports(stmt, extension):
            return False
        if isinstance(stmt, ast.Try) and any(_imports(s, extension) for s in stmt.body):
            if not stmt.handlers or not all(_caught(h) for h in stmt.handlers):
                return False
            for handler in stmt.handlers:
                for s in handler.body:
                    if isinstance(s, ast.Raise) or (not isinstance(s, _DEFS) and any(
                            isinstance(n, ast.Raise) for n in ast.walk(s))):
                        return False
            found = True
        elif not isinstance(stmt, _DEFS + (ast.ClassDef,)) and any(
                _imports(n, extension) for n in ast.walk(stmt)):
            return False
    return found


def _flag_test(test: ast.AST, flag: str) -> bool:
    tests = test.values if isinstance(test, ast.BoolOp) and isinstance(test.op, ast.And) else [test]
    return any(isinstance(t, ast.Name) and t.id == flag for t in tests)


def _under_flag(node: ast.AST, parents: dict, flag: str) -> bool:
    child, current = node, parents.get(id(node))
    while current is not None:
        if isinstance(current, ast.If) and child in current.body and _flag_test(current.test, flag):
            return True
        child, current = current, parents.get(id(current))
    return False


def _target(results, by_name, by_stem, relpath: str, node: ast.ImportFrom) -> int | None:
    if node.level:
        return by_stem.get(resolve_relative(relpath, node.level, node.module or ""))
    return by_name.get(node.module or "")


def review(results: list, paths: dict) -> list:
    """NPU912 errors of extensions the project selects only under its own import probe: info."""
    from .importgates import is_test

    wanted: dict[str, list[int]] = {}
    for k, result in enumerate(results):
        for f in result.findings:
            match = _EXTENSION.search(f.message) if _open912(f) else None
            if match:
                wanted.setdefault(match.group(1), []).append(k)
    if not wanted:
        return results
    texts = RunTexts(results, paths)
    python = [i for i, r in enumerate(results) if r.relpath.endswith(".py") and not is_test(r.relpath)
              and r.relpath.rsplit("/", 1)[-1] != "setup.py"]
    from .optionalext import run_modules

    by_name, by_stem = run_modules(results, python)
    out = list(results)
    for extension, holders in wanted.items():
        why = _probed(extension, results, python, texts, by_name, by_stem)
        if why is None:
            continue
        for k in holders:
            out[k] = dataclasses.replace(out[k], findings=[
                dataclasses.replace(f, severity="info", message=f"{f.message} ({why})")
                if _open912(f) and _EXTENSION.search(f.message)
                and _EXTENSION.search(f.message).group(1) == extension else f
                for f in out[k].findings])
    return out


def _probed(extension, results, python, texts, by_name, by_stem) -> str | None:
    """The reason for an extension selected only under its probe, or None."""
    needle = extension.rsplit(".", 1)[-1].encode()
    trees = {}
    for i in python:
        data = texts(i) or b""
        if needle in data:
            tree = astcache.parse(data)
            if tree is not None:
                trees[i] = tree
    probes = [(i, found) for i, tree in trees.items() if (found := probe_flag(tree, extension)) is not None]
    if len(probes) != 1:
        return None
    p, (flag, probe_line) = probes[0]
    probe_names = set(module_names(results[p].relpath))
    # the selections: `if FLAG ...: from M import X` in the probe's module or an importer of the flag
    layers: dict[int, str] = {}
    for i in python:
        data = texts(i) or b""
        if flag.encode() not in data:
            continue
        tree = trees.get(i) or astcache.parse(data)
        if tree is None:
            continue
        if i != p and not any(isinstance(s, ast.ImportFrom) and any(a.name == flag and a.asname is None
                                                                    for a in s.names)
                              and (_target(results, by_name, by_stem, results[i].relpath, s) == p
                                   or (s.module or "") in probe_names) for s in tree.body):
            continue
        parents = astcache.parents(tree)
        for node in astcache.nodes(tree, ast.ImportFrom):
            if _under_flag(node, parents, flag):
                m = _target(results, by_name, by_stem, results[i].relpath, node)
                if m is not None and m != p:
                    layers.setdefault(m, f"{results[i].relpath}:{node.lineno}")
    layers = {m: where for m, where in layers.items()
              if (m in trees or astcache.parse(texts(m) or b"") is not None)
              and _stub_fallback(trees.get(m) or astcache.parse(texts(m) or b""), extension)}
    if len(layers) != 1:
        return None
    (m, selection), = layers.items()
    layer_names = set(module_names(results[m].relpath))
    lazy: list[str] = []
    # every other importer of the extension or of the layer module
    for i in python:
        if i in (p, m):
            continue
        data = texts(i) or b""
        stem = results[m].relpath[:-3].rsplit("/", 1)[-1].encode()
        if needle not in data and stem not in data:
            continue
        tree = trees.get(i) or astcache.parse(data)
        if tree is None:
            return None
        parents = astcache.parents(tree)
        called = {n.func.id for n in astcache.nodes(tree, ast.Call) if isinstance(n.func, ast.Name)}
        for node in astcache.nodes(tree, (ast.Import, ast.ImportFrom)):
            inside = scope_of(node, parents) is not None
            if _imports(node, extension):
                if not inside:
                    return None
                lazy.append(f"{results[i].relpath}:{node.lineno}")
            if isinstance(node, ast.ImportFrom) and (
                    _target(results, by_name, by_stem, results[i].relpath, node) == m
                    or (not node.level and (node.module or "") in layer_names)):
                bound = {a.asname or a.name for a in node.names}
                if inside and bound & called:
                    lazy.append(f"{results[i].relpath}:{node.lineno}")
                elif not inside and not _under_flag(node, parents, flag) and bound & called:
                    return None
    more = f" (its other uses are lazy imports inside functions, for those layers: {', '.join(sorted(lazy))})" \
        if lazy else ""
    return PROBED.format(layer=results[m].relpath, flag=flag, probe=f"{results[p].relpath}:{probe_line}",
                         selection=selection, lazy=more)
