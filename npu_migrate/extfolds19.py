"""Extensions and CUDA-only imports reported once where the port is one piece of work (issue #16, round 19).

Four shapes, read across files (whole-run passes, runplan.whole_run_passes):

* **Optional extensions imported together** (`fold_together_imported`, after srcfolds17). Two or
  more `.cu` files whose NPU912 optionalcu.py lowered to info ("an optional extension:
  `q.py:13` imports it only inside a `try` ...") where those probe sites are imports of one
  `try` statement, whose handlers are the one fallback (auto-gptq's `try: import
  autogptq_cuda_64; import autogptq_cuda_256 except ImportError: ... = None`): the extensions are
  variants of one fast path, and "port the kernels for speed" is one item. The first import's
  finding keeps the note and names the other sources (with their extension modules); theirs are
  dropped. Sites in different `try` statements, or in different files, keep their findings; an
  error is never folded (only the info optionalcu.py wrote is).
* **Sources an extension class's method lists** (`fold_method_sources`, after srcfolds17). A
  class method whose name says sources (`sources_files`, `get_sources`, `sources`) and that holds
  two or more `.cu` path strings (ColossalAI's `_CudaExtension` subclasses:
  `return [self.csrc_abs_path(f) for f in ["kernel/cuda/a.cu", ...]]`) declares one extension,
  as a setup.py `CUDAExtension(...)` does (cudasources.fold_extension_sources folds those): the
  open NPU912 findings of the `.cu` files it lists (resolved by their trailing path components;
  among several run files that end so, the one nearest the Python file, a tie resolves nothing)
  become one, the first listed file's, naming the others (with what their own messages added,
  such as a byte-identical copy) and the extension (the `name=` its `__init__` passes up, else the
  class). A `.cu` listed by two different extensions keeps its
  finding; the findings of a group must share a severity (an error never folds into an info);
  identical copies of one class (the same sources listed twice) count as one extension.
* **Sibling scripts failing on one unguarded import** (`fold_sibling_scripts`, before
  importfolders.py). importfolders.py folds a folder's NPU911 errors only when every line of each
  is a module-level import; a benchmark script's finding also carries what the file does after
  that import (`triton.testing.perf_report(...)`, a lazy import of the same package: lines
  already folded into it as "reached only after ... this CUDA-only package's import"), so
  siblings with the same cause stayed separate (SGLang's jit_kernel/benchmark/bench_*.py). Here
  the cause decides: an open NPU911 error anchored on a module-level (column 0) import of a
  package the sweep reports as NPU911 (rules/sweep.toml), in a script (`if __name__ ==
  "__main__":` at column 0), groups with the folder's other such scripts (modules without a
  `__main__` block are importfolders' and folds19's business). A group of two or
  more with at least one script carrying other lines becomes one finding, the first file's, with
  importfolders' wording (so it does not fold it again), naming each other file and how many
  more lines its own finding carried. A library module (no `__main__` block) whose finding
  carries other lines is its own porting item and keeps its finding; groups of pure import-only
  modules are left to importfolders.py.
* **A lazy import of a CUDA-only submodule another file reports** (`fold_repeated_lazy_imports`,
  before importfolders.py). An open NPU911 finding every line of which is an import inside a
  function, in an `if`/`elif` branch and in no `try` (vLLM's attention builder: `elif
  self.use_flashinfer_replayssm: from flashinfer.mamba.checkpointing_ssu import ...`), of exactly
  the submodule (three or more dotted parts: a specific module, not a package) that another
  file's open NPU911 finding imports inside a `try` whose every handler raises (the backend's
  initialisation: `except ImportError as e: raise ImportError("... requires ...") from e`): the
  porting item is that submodule, already asked for, and the opt-in path fails first with the
  clear error there. The lazy finding folds into that one, which names its `file:line`. A plain
  package import (`import flashinfer`), an import in a `try` or outside a branch, a submodule no
  raising `try` imports, or an error into a lower severity keeps its finding.

Cheap first: nothing is parsed without two candidate findings; Python files are byte-tested
(`.cu` and `source`; `__main__`) before a parse.
"""

from __future__ import annotations

import ast
import os
import posixpath
import re
from dataclasses import replace

from . import astcache

_RANK = {"info": 0, "warning": 1, "error": 2}


def _open912(finding) -> bool:
    from .moot import is_moot

    return finding.code == "NPU912" and not finding.fixable and finding.cell is None and not is_moot(finding)


# ----------------------------------------------------------------------------- optional extensions imported together

_SITE = re.compile(r"an optional extension: `([^`]+\.py):(\d+)` imports it only inside a `try`")
TOGETHER = "imported in the same `try`"


def _import_at(tree: ast.Module, line: int):
    return next((n for n in astcache.nodes(tree, (ast.Import, ast.ImportFrom)) if n.lineno == line), None)


def _imported_names(node) -> str:
    if isinstance(node, ast.Import):
        return ", ".join(f"`{a.name}`" for a in node.names)
    return f"`{node.module or ''}`"


def fold_together_imported(results: list, paths: dict) -> list:
    """Module's doc, first shape."""
    from .modpaths import RunTexts
    from .optionalcu import catching_try as _catching_try

    sites: dict[str, list[tuple[int, int]]] = {}  # python relpath -> [(line, result index)]
    for i, r in enumerate(results):
        if not r.relpath.lower().endswith(".cu"):
            continue
        found = [f for f in r.findings if _open912(f) and f.severity == "info"]
        if len(found) != 1:
            continue
        match = _SITE.search(found[0].message)
        if match and TOGETHER not in found[0].message:
            sites.setdefault(match.group(1), []).append((int(match.group(2)), i))
    if not any(len(v) >= 2 for v in sites.values()):
        return results
    by_path = {r.relpath: i for i, r in enumerate(results)}
    texts = RunTexts(results, paths)
    out = list(results)
    for py, members in sites.items():
        if len(members) < 2 or py not in by_path:
            continue
        tree = astcache.parse(texts(by_path[py]) or b"")
        if tree is None:
            continue
        parent = astcache.parents(tree)
        groups: dict[int, list[tuple[int, int, object]]] = {}
        for line, i in members:
            node = _import_at(tree, line)
            guard = _catching_try(node, parent) if node is not None else None
            if guard is not None:
                groups.setdefault(guard.lineno, []).append((line, i, node))
        for try_line, group in groups.items():
            if len(group) < 2:
                continue
            group.sort(key=lambda g: (g[0], results[g[1]].relpath))
            (_line, first, _node), rest = group[0], group[1:]
            named = ", ".join(f"`{results[i].relpath}` (the extension {_imported_names(node)}, line {line})"
                              for line, i, node in rest)
            note = (f"also {named}, {TOGETHER} (line {try_line}) with the same fallback: variants of one "
                    f"optional fast path, one piece of work")
            out[first] = replace(out[first], findings=[
                replace(f, message=f"{f.message} ({note})") if _open912(f) and f.severity == "info" else f
                for f in out[first].findings])
            for _l, i, _n in rest:
                out[i] = replace(out[i], findings=[f for f in out[i].findings
                                                   if not (_open912(f) and f.severity == "info")])
    return out


# ----------------------------------------------------------------------------- sources an extension class lists

_CU = re.compile(r"^[\w./\-]+\.cu$")
_METHOD = re.compile(r"(?:^|_)sources?(?:_|$)", re.IGNORECASE)  # (sources_files, get_sources; not resources)


def _label(cls: ast.ClassDef) -> str:
    """The extension's name: the `name=` (or first string) an `__init__` passes to `super().__init__`,
    else the class's name."""
    for item in cls.body:
        if not isinstance(item, ast.FunctionDef) or item.name != "__init__":
            continue
        for node in ast.walk(item):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "__init__"
                    and isinstance(node.func.value, ast.Call)
                    and getattr(node.func.value.func, "id", "") == "super"):
                for k in node.keywords:
                    if k.arg == "name" and isinstance(k.value, ast.Constant) and isinstance(k.value.value, str):
                        return k.value.value
                if node.args and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str):
                    return node.args[0].value
    return cls.name


def source_methods(tree: ast.Module) -> list[tuple[str, str, int, list[str]]]:
    """(extension label, `Class.method`, line, [`.cu` path strings]) of each class method whose name
    says sources, that returns something and holds two or more `.cu` strings."""
    found = []
    for cls in astcache.nodes(tree, (ast.ClassDef,)):
        for item in cls.body:
            if not isinstance(item, ast.FunctionDef) or not _METHOD.search(item.name):
                continue
            if not any(isinstance(n, ast.Return) and n.value is not None for n in ast.walk(item)):
                continue
            sources = []
            for n in ast.walk(item):
                if (isinstance(n, ast.Constant) and isinstance(n.value, str) and _CU.match(n.value.strip())
                        and n.value.strip() not in sources):
                    sources.append(n.value.strip())
            if len(sources) >= 2:
                found.append((_label(cls), f"{cls.name}.{item.name}", item.lineno, sources))
    return found


def _common(a: str, b: str) -> int:
    pa, pb = a.split("/"), b.split("/")
    n = 0
    while n < min(len(pa), len(pb)) and pa[n] == pb[n]:
        n += 1
    return n


def _resolve(source: str, pyfile: str, reported: dict[str, int]) -> int | None:
    parts = [p for p in source.replace("\\", "/").split("/") if p and p != "."]
    if not parts or ".." in parts:
        rel = posixpath.normpath(posixpath.join(posixpath.dirname(pyfile), source))
        return reported.get(rel)
    tail = "/" + "/".join(parts)
    hits = [rel for rel in reported if ("/" + rel).endswith(tail)]
    if not hits:
        return None
    score = {rel: _common(posixpath.dirname(pyfile), rel) for rel in hits}
    best = max(score.values())
    chosen = [rel for rel in hits if score[rel] == best]
    return reported[chosen[0]] if len(chosen) == 1 else None


def _extra(finding) -> str:
    """What a folded finding's message adds to its rule's text (" (byte-identical copy: `x.cu`)"):
    carried into the note, so that what it named stays named."""
    _stem, _sep, rest = finding.message.partition(" (")
    return f" ({rest}" if rest else ""


def fold_method_sources(results: list, paths: dict) -> list:
    """Module's doc, second shape."""
    from .modpaths import RunTexts

    reported = {r.relpath: i for i, r in enumerate(results)
                if r.relpath.lower().endswith(".cu") and any(map(_open912, r.findings))}
    if len(reported) < 2:
        return results
    texts = RunTexts(results, paths)
    groups: dict[tuple, tuple[str, str, str, int]] = {}  # members -> (label, pyfile, Class.method, line)
    for k, r in enumerate(results):
        if not r.relpath.endswith(".py"):
            continue
        data = texts(k) or b""
        if b".cu" not in data or b"source" not in data.lower() or b"class" not in data:
            continue  # (byte pre-test before a parse)
        tree = astcache.parse(data)
        if tree is None:
            continue
        for label, where, line, sources in source_methods(tree):
            members = []
            for s in sources:
                i = _resolve(s, r.relpath, reported)
                if i is not None and i not in members:
                    members.append(i)
            if len(members) >= 2:
                groups.setdefault(tuple(members), (label, r.relpath, where, line))
    listed: dict[int, int] = {}
    for members in groups:
        for i in set(members):
            listed[i] = listed.get(i, 0) + 1
    out = list(results)
    for members, (label, pyfile, where, line) in groups.items():
        members = [i for i in members if listed[i] == 1]
        if len(members) < 2:
            continue
        severities = {next(f for f in results[i].findings if _open912(f)).severity for i in members}
        if len(severities) != 1:
            continue
        first, rest = members[0], members[1:]
        names = ", ".join(f"`{results[i].relpath}`{_extra(next(f for f in results[i].findings if _open912(f)))}"
                          for i in rest)
        note = (f"{len(members)} CUDA sources of the extension `{label}` ({pyfile} line {line}, `{where}`), "
                f"reported once for the extension; also {names}")
        target = next(f for f in out[first].findings if _open912(f))
        out[first] = replace(out[first], findings=[
            replace(f, message=f"{f.message} ({note})") if f is target else f for f in out[first].findings])
        for i in rest:
            drop = next(f for f in out[i].findings if _open912(f))
            out[i] = replace(out[i], findings=[f for f in out[i].findings if f is not drop])
    return out


# ----------------------------------------------------------------------------- sibling scripts, one cause

_MAIN = re.compile(rb"^if\s+__name__\s*==\s*['\"]__main__['\"]\s*:", re.MULTILINE)


def fold_sibling_scripts(results: list, paths: dict) -> list:
    """Module's doc, third shape."""
    from .importfolders import fold_into
    from .importfolders import candidate as _candidate
    from .importfolders import imported as _imported
    from .importfolders import packages as _packages
    from .modpaths import RunTexts

    candidates = [(i, k) for i, r in enumerate(results) if r.relpath.endswith(".py")
                  for k, f in enumerate(r.findings) if _candidate(f)]
    if len(candidates) < 2:
        return results
    packages = _packages()
    texts = RunTexts(results, paths)
    # folder -> [(result index, finding index, packages, other lines (0: import-only), script)]
    groups: dict[str, list[tuple[int, int, frozenset, int, bool]]] = {}
    for i, k in candidates:
        finding = results[i].findings[k]
        data = texts(i)
        if data is None:
            continue
        lines = data.decode("utf-8", "replace").splitlines()

        def at(n: int, lines: list = lines) -> str:
            return lines[n - 1] if 0 < n <= len(lines) else ""

        anchor = _imported(at(finding.line), packages)
        if anchor is None:
            continue
        others = [a[0] for a in finding.also if _imported(at(a[0]), packages) is None]
        script = bool(_MAIN.search(data))
        if others and not script:
            continue  # (a library module's other lines are its own porting item)
        names = set(anchor)
        for a in finding.also:
            names |= _imported(at(a[0]), packages) or set()
        groups.setdefault(os.path.dirname(results[i].relpath), []).append(
            (i, k, frozenset(names), len(others), script))
    out = list(results)
    for members in groups.values():
        # (scripts only: a module the folder's package loads is folds19.fold_package_submodules' or
        # importfolders' member, and a script run by its path fails on its own import)
        members = [m for m in members if m[4]]
        if len(members) < 2 or not any(m[3] for m in members):
            continue  # (import-only groups: importfolders.py)
        members.sort(key=lambda m: results[m[0]].relpath)
        (first, index, *_), rest = members[0], members[1:]
        names = frozenset().union(*(m[2] for m in members))
        shown = [f"`{os.path.basename(results[i].relpath)}`"
                 + (f" (with {n} more line{'s' if n > 1 else ''} reached only after that import)" if n else "")
                 for i, _k, _p, n, _s in rest]
        out = fold_into(out, (first, index), [(i, k) for i, k, *_ in rest], names, shown)
    return out


# ----------------------------------------------------------------------------- a lazy import another file's finding reports

REPEATED = "also imported lazily, in a branch, at"


def _import_modules(node) -> frozenset:
    if isinstance(node, ast.Import):
        return frozenset(a.name for a in node.names)
    if isinstance(node, ast.ImportFrom) and not node.level and node.module:
        return frozenset([node.module])
    return frozenset()


def _enclosing(node, parent: dict) -> list:
    """The statements holding `node`, innermost first, up to its function (inclusive); empty
    when no function holds it."""
    chain, current = [], parent.get(id(node))
    while current is not None and not isinstance(current, ast.Module):
        chain.append(current)
        if isinstance(current, (ast.FunctionDef, ast.AsyncFunctionDef)):
            return chain
        current = parent.get(id(current))
    return []


def _in_raising_try(node, chain: list) -> bool:
    """Inside a `try` (within its function) whose every handler raises (a clear ImportError)."""
    child = node
    for holder in chain:
        if isinstance(holder, ast.Try) and child in holder.body:
            return bool(holder.handlers) and all(
                any(isinstance(n, ast.Raise) for s in h.body for n in ast.walk(s)) for h in holder.handlers)
        child = holder
    return False


def _in_branch_only(node, chain: list) -> bool:
    """Inside an `if`/`elif` branch of its function and in no `try`."""
    return (any(isinstance(h, ast.If) for h in chain)
            and not any(isinstance(h, (ast.Try, getattr(ast, "TryStar", ast.Try))) for h in chain))


def fold_repeated_lazy_imports(results: list, paths: dict) -> list:
    """Module's doc, fourth shape."""
    from .modpaths import RunTexts
    from .moot import is_moot

    def open911(f) -> bool:
        return (f.code == "NPU911" and not f.fixable and f.cell is None and not is_moot(f)
                and f.severity in ("error", "warning"))

    files = [i for i, r in enumerate(results) if r.relpath.endswith(".py") and any(map(open911, r.findings))]
    if len(files) < 2:
        return results
    texts = RunTexts(results, paths)
    targets: dict[str, tuple[int, object, int]] = {}  # module -> (result index, finding, line)
    lazy: list[tuple[int, object, frozenset]] = []  # (result index, finding, modules)
    for i in files:
        data = texts(i) or b""
        if b"import" not in data:
            continue
        tree = astcache.parse(data)
        if tree is None:
            continue
        parent = astcache.parents(tree)
        at: dict[int, object] = {}
        for node in astcache.nodes(tree, (ast.Import, ast.ImportFrom)):
            at.setdefault(node.lineno, node)
        for f in filter(open911, results[i].findings):
            nodes = [at.get(line) for line in (f.line, *(a[0] for a in f.also))]
            for node in filter(None, nodes):
                chain = _enclosing(node, parent)
                if chain and _in_raising_try(node, chain):
                    for m in _import_modules(node):
                        if m.count(".") >= 2:
                            targets.setdefault(m, (i, f, node.lineno))
            if all(nodes):
                chains = [_enclosing(n, parent) for n in nodes]
                modules = frozenset().union(*map(_import_modules, nodes))
                if modules and all(c and _in_branch_only(n, c) for n, c in zip(nodes, chains)):
                    lazy.append((i, f, modules))
    folds: dict[tuple[int, int], list[tuple[int, object, str]]] = {}  # (target file, id(target)) -> [...]
    for i, f, modules in lazy:
        hits = [targets.get(m) for m in modules]
        if not all(hits) or len({(h[0], id(h[1])) for h in hits}) != 1:
            continue
        ti, tf, tline = hits[0]
        if ti == i or _RANK[tf.severity] < _RANK[f.severity]:
            continue
        folds.setdefault((ti, id(tf)), []).append((i, f, ", ".join(f"`{m}`" for m in sorted(modules))))
    if not folds:
        return results
    out = list(results)
    dropped: dict[int, list] = {}
    for (ti, fid), items in folds.items():
        target = next(f for f in out[ti].findings if id(f) == fid)
        named = "; ".join(f"`{results[i].relpath}:{f.line}` ({mods})" for i, f, mods in items)
        tline = next(t[2] for t in targets.values() if t[0] == ti and id(t[1]) == fid)
        note = (f"{REPEATED} {named}: the same CUDA-only submodule this finding's line {tline} imports in a "
                f"`try` that raises a clear ImportError, one piece of work")
        out[ti] = replace(out[ti], findings=[replace(f, message=f"{f.message} ({note})") if f is target else f
                                             for f in out[ti].findings])
        for i, f, _m in items:
            dropped.setdefault(i, []).append(f)
    for i, gone in dropped.items():
        out[i] = replace(out[i], findings=[f for f in out[i].findings if not any(f is g for g in gone)])
    return out
