"""A project that loads Huawei's runtime patcher `torch_npu.contrib.transfer_to_npu` on its own NPU
path (issue #16, round-19 audit BB#25, BB#40). Whole run, from runplan.whole_run_passes.

SGLang's model runner module calls, at module level and under its NPU flag,

    if _is_npu:
        from ...hardware_backend.npu.utils import init_npu_backend
        init_npu_backend()          # def init_npu_backend(): ... from torch_npu.contrib import transfer_to_npu

From then on the process has every name of `torch_npu.npu.__all__` copied onto `torch.cuda`
(`torch.cuda.is_current_stream_capturing` is torch.npu's), `torch.cuda.CUDAGraph` bound to
`torch.npu.NPUGraph` and `torch.profiler.ProfilerActivity.CUDA` to the NPU activity (torch_npu 2.7.1
`transfer_to_npu._init`, `_patch_cuda`, `_patch_profiler`; the names: rules/transfer_to_npu.toml).
A report-only "left unchanged" finding on such a `torch.cuda` name (NPU202) or a profiler CUDA
activity (NPU935) is then no failure in the processes that load the patcher; it is lowered to info,
never dropped (the porter must still know the code relies on the patcher), with a message naming
the patcher and where the project loads it (a load in the project's own NPU layer, its NPU start-up:
a named scope since round 23, BL#40, platformlayer23.py). Nothing the tool rewrites changes.

A load is an import of the patcher module (any form) either at module level or in a top-level
function that a run module calls at module level (defined there, or imported by name from the run's
module that defines it); every block around the import and the call is the body of a `try` or of an
`if` whose condition names the NPU (`npu`, `ascend`, without `not`), or none. A name the loading
code binds again after the import (`torch.cuda.is_available = lambda: False`) is not taken as
covered.

Where the patcher is loaded (the module whose module-level code loads it, "the loader"):

* every run module that imports the loader at module level, directly or through other run modules
  (SGLang's bench_one_batch.py): "the module imports <loader>";
* the loader's subsystem: the package that holds the loader's package (sglang/srt for
  sglang/srt/model_executor/model_runner.py; the package itself for a loading `__init__.py`), whose
  modules a loading process imports (models, layers, graph runners): "runs on the NPU where the
  process imports <loader> first", where loaderproof20.py proves the module runs in that process
  (the loader's process imports it, or every run module that imports it is so proven): a helper
  nothing imports, or a server only a launcher's function imports, keeps its finding (wave 20).
  Its tests and `__main__` scripts that do not import the loader run in processes of their own
  and keep their findings. A loader one folder below the top (`pkg/sub/x.py`)
  covers its own package only; a top-level module, a test or a `__main__` script that loads the
  patcher (a test runner helper) covers only its importers.

Kept as before: a `torch.cuda` name the patcher does not cover (`torch.cuda.cudart`), a finding
whose problem is not the name (NPU931: a device property unset on NPU), anything outside these
files, and any run with no load under the NPU path.

Cheap byte tests first: only files whose bytes name `transfer_to_npu` are parsed for loads, only
files whose bytes name a loading function for calls, only files naming the loader's module for
imports.
"""

from __future__ import annotations

import ast
import dataclasses
import re
from typing import Optional

from . import astcache, catalogue

_NPU_CONDITION = re.compile(r"npu|ascend", re.IGNORECASE)
_MAIN = re.compile(rb"^if\s+__name__\s*==\s*['\"]__main__['\"]", re.MULTILINE)
_TORCH_CUDA = re.compile(r"torch\.cuda\.([A-Za-z_][\w.]*)")
PATCHER_PHRASE = "torch_npu's transfer_to_npu maps it to the NPU"


def _table() -> tuple[str, frozenset, frozenset]:
    data = catalogue.read_table("transfer_to_npu.toml")
    covered = data.get("covered", {})
    cuda = frozenset((*covered.get("cuda_all", ()), *covered.get("cuda_extra", ())))
    return data["patcher"]["module"], cuda, frozenset(covered.get("profiler", ()))


def _imports_patcher(node: ast.AST, patcher: str) -> bool:
    parent, _, leaf = patcher.rpartition(".")
    if isinstance(node, ast.Import):
        return any(a.name == patcher or a.name.startswith(patcher + ".") for a in node.names)
    if isinstance(node, ast.ImportFrom) and not node.level and node.module:
        return node.module == patcher or node.module.startswith(patcher + ".") or (
            node.module == parent and any(a.name == leaf for a in node.names))
    return False


def _chain(body: list, target: ast.AST) -> Optional[list]:
    """The statements (and their field: 'body'/'orelse'/...) around `target`, outermost first."""
    for stmt in body:
        if stmt is target:
            return []
        for field in ("body", "orelse", "handlers", "finalbody"):
            inner = getattr(stmt, field, None)
            if not isinstance(inner, list):
                continue
            for part in inner:
                sub = _chain(part.body, target) if isinstance(part, ast.ExceptHandler) else None
                if sub is not None:
                    return [(stmt, "handlers"), *sub]
            found = _chain([s for s in inner if not isinstance(s, ast.ExceptHandler)], target)
            if found is not None:
                return [(stmt, field), *found]
    return None


def _on_npu_path(chain: list) -> bool:
    """Every block of `chain` is a `try` body or the body of an `if` naming the NPU (no `not`)."""
    for stmt, field in chain:
        if isinstance(stmt, ast.Try) and field == "body":
            continue
        if isinstance(stmt, ast.If) and field == "body":
            condition = ast.unparse(stmt.test)
            if _NPU_CONDITION.search(condition) and not re.search(r"\bnot\b", condition):
                continue
        return False
    return True


def _rebound(scope: ast.AST, after: int) -> frozenset:
    """`torch.cuda.X` / `torch.profiler.X` names assigned in `scope` after line `after`."""
    out = set()
    for node in ast.walk(scope):
        if isinstance(node, (ast.Assign, ast.AugAssign, ast.AnnAssign)) and node.lineno > after:
            for target in (node.targets if isinstance(node, ast.Assign) else [node.target]):
                text = ast.unparse(target)
                for prefix in ("torch.cuda.", "torch.profiler."):
                    if text.startswith(prefix):
                        out.add(text[len(prefix):])
    return frozenset(out)


@dataclasses.dataclass(frozen=True)
class Load:
    loader: int  # index of the module whose module-level code loads the patcher
    where: str  # relpath:line of the patcher's import
    rebound: frozenset  # names the loading code binds again after the import


def _direct_loads(results, text_of, py, patcher) -> tuple[list, dict]:
    """Module-level loads, and {(file index, function name): (import line, rebound)} of top-level
    functions that load the patcher on their NPU path."""
    loads, functions = [], {}
    for i in py:
        data = text_of(i)
        if not data or b"transfer_to_npu" not in data:
            continue
        tree = astcache.parse(data)
        if tree is None:
            continue
        for node in ast.walk(tree):
            if not _imports_patcher(node, patcher):
                continue
            chain = _chain(tree.body, node)
            if chain is None:
                continue
            where = f"{results[i].relpath}:{node.lineno}"
            defs = [k for k, (stmt, _f) in enumerate(chain) if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef))]
            if not defs:
                if _on_npu_path(chain):
                    loads.append(Load(i, where, _rebound(tree, node.lineno)))
            elif defs == [0] and _on_npu_path(chain[1:]):
                function = chain[0][0]
                functions[(i, function.name)] = (where, _rebound(function, node.lineno))
    return loads, functions


def _module_of(results, index, relpath_stem: str) -> Optional[int]:
    return index.by_stem.get(relpath_stem, index.by_stem.get(f"{relpath_stem}/__init__"))


def _imported_from(results, index, importer: int, node: ast.ImportFrom) -> set:
    """The run files a `from X import ...` names as X."""
    from .modpaths import resolve_relative
    if node.level:
        stem = resolve_relative(results[importer].relpath, node.level, node.module or "")
        found = _module_of(results, index, stem)
        return {found} if found is not None else set()
    return set(index.by_dotted.get(node.module or "", ()))


def _called_loads(results, text_of, py, functions, index) -> list:
    """Module-level calls of a loading function, on the NPU path (the function defined in the file
    or imported by name from the file that defines it)."""
    loads = []
    names = {name.encode() for _i, name in functions}
    for i in py:
        data = text_of(i)
        if not data or not any(name + b"(" in data for name in names):
            continue
        tree = astcache.parse(data)
        if tree is None:
            continue
        bound = {}  # local name -> (defining file, function name)
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom):
                for source in _imported_from(results, index, i, node):
                    for alias in node.names:
                        if (source, alias.name) in functions:
                            bound[alias.asname or alias.name] = (source, alias.name)
        for name in {n for (j, n) in functions if j == i}:
            bound.setdefault(name, (i, name))
        for node in ast.walk(tree):
            if not (isinstance(node, ast.Expr) and isinstance(node.value, ast.Call)
                    and isinstance(node.value.func, ast.Name) and node.value.func.id in bound):
                continue
            chain = _chain(tree.body, node)
            if chain is None or not _on_npu_path(chain):
                continue
            where, rebound = functions[bound[node.value.func.id]]
            loads.append(Load(i, where, rebound))
    return loads


def _module_imports(tree: ast.Module, results, index, importer: int) -> set:
    """Run files `tree` imports at module level (not under `if TYPE_CHECKING`, not in a function)."""
    out = set()

    def visit(body):
        for stmt in body:
            if isinstance(stmt, ast.Import):
                for alias in stmt.names:
                    out.update(index.by_dotted.get(alias.name, ()))
            elif isinstance(stmt, ast.ImportFrom):
                sources = _imported_from(results, index, importer, stmt)
                out.update(sources)
                base = (results[importer].relpath, stmt.level, stmt.module or "")
                for alias in stmt.names:  # (`from pkg import module`)
                    if stmt.level:
                        from .modpaths import resolve_relative
                        stem = resolve_relative(base[0], stmt.level, f"{base[2]}.{alias.name}".strip("."))
                        found = _module_of(results, index, stem.replace(".", "/"))
                        if found is not None:
                            out.add(found)
                    else:
                        out.update(index.by_dotted.get(f"{base[2]}.{alias.name}", ()))
            elif isinstance(stmt, ast.If):
                if "TYPE_CHECKING" not in ast.unparse(stmt.test):
                    visit(stmt.body)
                visit(stmt.orelse)
            elif isinstance(stmt, ast.Try):
                visit(stmt.body)
                for handler in stmt.handlers:
                    visit(handler.body)
                visit(stmt.orelse)
                visit(stmt.finalbody)
    visit(tree.body)
    out.discard(importer)
    return out


def _importers(results, text_of, py, loader: int, index, memo: dict) -> set:
    """Run files that import the loader at module level, directly or through other run files
    (`memo`: file index -> the run files it imports at module level)."""
    from .modpaths import module_names
    reached, frontier = {loader}, [loader]
    while frontier:
        target = frontier.pop()
        leaf = results[target].relpath[:-3].split("/")
        word = (leaf[-2] if leaf[-1] == "__init__" and len(leaf) > 1 else leaf[-1]).encode()
        if not module_names(results[target].relpath):
            continue
        for i in py:
            if i in reached:
                continue
            data = text_of(i)
            if not data or word not in data:
                continue
            if i not in memo:
                tree = astcache.parse(data)
                memo[i] = set() if tree is None else _module_imports(tree, results, index, i)
            if target not in memo[i]:
                continue
            reached.add(i)
            frontier.append(i)
    reached.discard(loader)
    return reached


def _subsystem(relpath: str, data: Optional[bytes]) -> Optional[str]:
    """The folder (with a trailing slash) whose modules a process loading `relpath` imports: the
    package holding the loader's package, or the loading `__init__.py`'s own package; the loader's
    own package where that would be the top-level one; None for a loader that is a test or a
    `__main__` script (its process is its own) or a top-level module."""
    if _own_process(relpath, data):
        return None
    parts = relpath.split("/")[:-1]
    if not relpath.endswith("/__init__.py") and len(parts) > 2:
        parts = parts[:-1]
    return "/".join(parts) + "/" if len(parts) >= 2 or relpath.endswith("/__init__.py") and parts else None


def _own_process(relpath: str, data: Optional[bytes]) -> bool:
    """A test or a `__main__` script: it runs in a process of its own."""
    parts = relpath.split("/")
    name = parts[-1]
    if any(p in ("test", "tests", "testing") for p in parts[:-1]) or name.startswith("test_") or \
            name.endswith("_test.py") or name == "conftest.py":
        return True
    return bool(data and _MAIN.search(data))


def covered(source: str, cuda: frozenset, profiler: frozenset, rebound: frozenset) -> bool:
    """Whether the construct `source` resolves to the NPU's once the patcher has run."""
    source = source.strip()
    if source.endswith("ProfilerActivity.CUDA"):
        return "ProfilerActivity.CUDA" in profiler and "ProfilerActivity.CUDA" not in rebound
    match = _TORCH_CUDA.fullmatch(source)
    if match is None:
        return False
    name = match.group(1)
    return name in cuda and name not in rebound


CODES = {"NPU202": "cuda", "NPU935": "profiler"}
_ALSO_SUFFIX = re.compile(r" \(also at [^()]*\)$")


def review(results: list, paths: dict) -> list:
    """The results, with the findings of this module's docstring lowered to info."""
    from .findings import lower_pieces, merge_per_file, split_merged
    from .loaderproof20 import LoaderProof
    from .modpaths import ImportIndex, RunTexts, module_names
    from .moot import is_moot

    def open_finding(f) -> bool:
        return (f.code in CODES and not f.fixable and f.cell is None and f.severity != "info"
                and not is_moot(f))

    candidates = [i for i, r in enumerate(results)
                  if r.relpath.endswith(".py") and any(open_finding(f) for f in r.findings)]
    if not candidates:
        return results
    text_of = RunTexts(results, paths)
    py = [i for i, r in enumerate(results) if r.relpath.endswith(".py")]
    patcher, cuda, profiler = _table()
    loads, functions = _direct_loads(results, text_of, py, patcher)
    index = ImportIndex(results, py)
    if functions:
        loads.extend(_called_loads(results, text_of, py, functions, index))
    if not loads:
        return results
    # file index -> the reason and the names bound again (the first load that reaches the file)
    reach: dict[int, tuple[str, frozenset]] = {}
    memo: dict[int, set] = {}
    for load in sorted(loads, key=lambda x: (results[x.loader].relpath, x.where)):
        names = module_names(results[load.loader].relpath)
        module = names[0] if names else results[load.loader].relpath
        told = f"the module imports `{module}`, which loads transfer_to_npu on the NPU at {load.where}"
        for i in sorted(_importers(results, text_of, py, load.loader, index, memo)):
            reach.setdefault(i, (f"{PATCHER_PHRASE}: {told}", load.rebound))
        folder = _subsystem(results[load.loader].relpath, text_of(load.loader))
        told = (f"runs on the NPU where the process imports `{module}` first: it loads "
                f"transfer_to_npu at {load.where}")
        proof = LoaderProof(results, text_of, py, index, load.loader, set(reach),
                            lambda j: _own_process(results[j].relpath, None), _imported_from)
        for i in candidates:
            if i == load.loader or (folder is not None and results[i].relpath.startswith(folder)
                                    and not _own_process(results[i].relpath, text_of(i))
                                    and proof.proven(i)):  # (loaderproof20.py)
                reach.setdefault(i, (f"{PATCHER_PHRASE}: {told}", load.rebound))
    out = list(results)
    for i in candidates:
        if i not in reach:
            continue
        why, rebound = reach[i]
        changed, findings = False, []
        for finding in results[i].findings:
            if not open_finding(finding):
                findings.append(finding)
                continue
            sources: dict[int, list[str]] = {}
            for piece in split_merged(finding):
                sources.setdefault(piece.line, []).append(piece.source or "")

            def reason_of(line: int, sources=sources, why=why, rebound=rebound) -> Optional[str]:
                found = sources.get(line, [])
                return why if found and all(covered(s, cuda, profiler, rebound) for s in found) else None

            if all(reason_of(line) for line in sources):  # (every place: the finding as it stands)
                also = _ALSO_SUFFIX.search(finding.message)
                head = finding.message[:also.start()] if also else finding.message
                findings.append(dataclasses.replace(finding, severity="info", message=(
                    f"{head} ({why})" + (also.group(0) if also else ""))))
                changed = True
                continue
            pieces = lower_pieces(finding, reason_of)
            if pieces is not None:  # (the lowered places of a merged finding stay one finding)
                lowered = [p for p in pieces if p.severity == "info"]
                pieces = merge_per_file(lowered) + [p for p in pieces if p.severity != "info"]
            changed = changed or pieces is not None
            findings.extend([finding] if pieces is None else pieces)
        if changed:
            out[i] = dataclasses.replace(results[i], findings=sorted(findings))
    return out
