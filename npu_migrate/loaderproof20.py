"""Which modules of a transfer_to_npu loader's subsystem are proven to run in its process (issue
#16, wave 20: round-20 audit BE#13 and the SGLang encode server). Used by patcher19.review.

patcher19.py lowers a `torch.cuda` name or a profiler CUDA activity to info in the modules of the
folder that holds the loader's package (the loader: the module whose module-level code imports
`torch_npu.contrib.transfer_to_npu` on its NPU path). A folder is no proof: SGLang's
`srt/utils/bench_utils.py` (a benchmark helper no run module imports) and
`srt/disaggregation/encode_server.py` (a server of its own, imported only inside the launcher's
function) run in processes that never import the loader, and there `ProfilerActivity.CUDA` records
no NPU activity. A subsystem module now keeps the lowering only when it is proven to run where the
loader ran:

* it is the loader, or imports it at module level, directly or through run modules (patcher19's
  `_importers`, unchanged);
* or the loader's process imports it: the loader imports it (at any level: a graph runner is
  imported in a method, `if TYPE_CHECKING:` imports aside), or a module so imported does, or a
  module so imported scans its folder (`pkgutil.iter_modules`/`walk_packages` and
  `importlib.import_module` in one file: SGLang's model registry loads every model module, and
  each model's own imports follow: ernie45_vl.py loads ernie45_moe_vl.py);
* or every way the run loads it leads back to the loader: each run module that imports it (at any
  level: a model module is imported in a function of the model loader; `if TYPE_CHECKING:`
  imports aside; test files aside, a test is its own process and not the library's path) and each
  module of its folder that imports the folder's modules by a package scan
  (`pkgutil.iter_modules`/`walk_packages` and `importlib.import_module` in one file: SGLang's and
  vLLM's model registries) is itself proven, or reaches it only through the module being proven
  (a model module that imports the registry which scans it), and at least one is proven.

A module nothing imports (a standalone helper), or one that only modules outside the loader's
process import (a launcher's other server: SGLang's encode server, which `launch_server.py` imports
in a function) keeps its finding as it was. A chain longer than `_DEPTH` is no proof.
"""

from __future__ import annotations

import ast
from typing import Callable, Optional

_DEPTH = 40


class LoaderProof:
    """`proven(i)`: whether run file `i` runs in a process that imported the loader first."""

    def __init__(self, results, text_of, py: list, index, loader: int, chained: set,
                 is_test: Callable[[int], bool], imported_from: Callable) -> None:
        self.results, self.text_of, self.py, self.index = results, text_of, py, index
        self.base = {loader, *chained}
        self.is_test, self.imported_from = is_test, imported_from
        self.imports: dict[int, set] = {}
        self.memo: dict[int, bool] = {}
        self.folders: dict[str, list] = {}
        for i in py:
            self.folders.setdefault(results[i].relpath.rpartition("/")[0], []).append(i)

    # ----------------------------------------------------------------- the run's import graph
    def _imports_of(self, i: int) -> set:
        if i in self.imports:
            return self.imports[i]
        from . import astcache
        from .modpaths import resolve_relative
        data = self.text_of(i)
        tree = astcache.parse(data) if data else None
        out: set = set()
        index, results = self.index, self.results

        def visit(node: ast.AST) -> None:
            if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
                for stmt in node.orelse:
                    visit(stmt)
                return
            if isinstance(node, ast.Import):
                for alias in node.names:
                    out.update(index.by_dotted.get(alias.name, ()))
            elif isinstance(node, ast.ImportFrom):
                out.update(self.imported_from(results, index, i, node))
                for alias in node.names:  # (`from pkg import module`)
                    if node.level:
                        stem = resolve_relative(results[i].relpath, node.level,
                                                f"{node.module or ''}.{alias.name}".strip("."))
                        found = index.by_stem.get(stem, index.by_stem.get(f"{stem}/__init__"))
                        if found is not None:
                            out.add(found)
                    else:
                        out.update(index.by_dotted.get(f"{node.module or ''}.{alias.name}", ()))
            for child in ast.iter_child_nodes(node):
                visit(child)

        if tree is not None:
            visit(tree)
        out.discard(i)
        self.imports[i] = out
        return out

    def _importers(self, i: int) -> list:
        leaf = self.results[i].relpath[:-3].split("/")
        word = (leaf[-2] if leaf[-1] == "__init__" and len(leaf) > 1 else leaf[-1]).encode()
        out = []
        for j in self.py:
            if j == i:
                continue
            data = self.text_of(j)
            if data and word in data and i in self._imports_of(j):
                out.append(j)
        return out

    def _scanners(self, i: int) -> list:
        out = []
        for j in self.folders.get(self.results[i].relpath.rpartition("/")[0], ()):
            data = (self.text_of(j) or b"") if j != i else b""
            if (b"iter_modules" in data or b"walk_packages" in data) and b"import_module" in data:
                out.append(j)
        return out

    # ----------------------------------------------------------------------------- the proof
    def proven(self, i: int) -> bool:
        return i in self.loaded() or self._proven(i, 0, frozenset()) is True

    def loaded(self) -> set:
        """The run files the loader's process imports: the loader, what it imports at any level,
        the modules of a folder whose scanner it imports, and so on."""
        if getattr(self, "_loaded", None) is None:
            seen, frontier = set(self.base), list(self.base)
            scanned: set = set()
            while frontier:
                j = frontier.pop()
                found = set(self._imports_of(j))
                data = self.text_of(j) or b""
                folder = self.results[j].relpath.rpartition("/")[0]
                if (b"iter_modules" in data or b"walk_packages" in data) and b"import_module" in data \
                        and folder not in scanned:
                    scanned.add(folder)
                    found.update(self.folders.get(folder, ()))
                for k in found - seen:
                    if not self.is_test(k):
                        seen.add(k)
                        frontier.append(k)
            self._loaded = seen
        return self._loaded

    def _proven(self, i: int, depth: int, stack: frozenset) -> Optional[bool]:
        """True (proven), False, or None: every way to load `i` passes through `stack` (a cycle
        back to a module being proven: neither proof nor disproof)."""
        if i in self.base:
            return True
        if i in self.memo:
            return self.memo[i]
        if i in stack:
            return None
        if depth > _DEPTH:
            return False
        stack = stack | {i}
        entries = [j for j in self._importers(i) if not self.is_test(j)] + self._scanners(i)
        verdicts = []
        for j in entries:
            verdict = self._proven(j, depth + 1, stack)
            if verdict is False:
                break
            verdicts.append(verdict)
        else:
            if True in verdicts:
                self.memo[i] = True
                return True
            if verdicts:
                return None
        self.memo[i] = False
        return False
