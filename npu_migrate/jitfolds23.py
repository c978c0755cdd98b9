"""Findings of tests and benchmarks that only exercise a project CUDA JIT kernel, folded into the
NPU912 of that kernel's CUDA source (issue #16, precision wave 23, round-23 audits BM#23, BM#29).

A project may compile CUDA kernels at run time through a JIT loader of its own: a Python module of
the run (outside tests and benchmarks) whose function hands a literal list of CUDA sources to a
loader (`load_jit("rmsnorm", cuda_files=["elementwise/rmsnorm.cuh"])`, `load_inline(...,
cuda_sources=[src])`) and names no NPU (cudaonly21.py's "JIT kernel module"). The kernel's source
is reported as NPU912 ("its kernels do not run on an NPU"): porting that kernel is the work. fp8folds19
folds FP8 that only feeds a module's Triton kernels into its NPU910; this pass does the same for a
test's or benchmark's findings whose only subject is such a JIT kernel. Whole run (runplan.py, last):

* **A finding cudaonly21 already lowered as "in a test of the project's CUDA JIT kernel"**
  (cudaonly21.JIT_TEST: the CUDA reference import `from sgl_kernel import rmsnorm` in a helper only
  the kernel's tests call). It names the kernel and its module: the kernel function's loader calls
  (followed through the module's functions by name) give its CUDA sources, and the one open NPU912
  error that covers all of them (the source's own, or its folder's `folder/*.cuh` finding) stands
  for it: the finding is dropped from the test and that NPU912's message names it (file, lines).
* **An FP8 place (NPU913) that only feeds the kernel** in a test or benchmark file. A statement in a
  function that binds a name (`fp8 = torch.float8_e4m3fn`) read only as the `dtype=` of an
  allocation bound to a name (`out = torch.empty_like(x, dtype=fp8)`) that is passed into a call of
  a function imported from a JIT kernel module (`per_tensor_quant_fp8(x, out, scale)`) and
  otherwise only returned, or an FP8 dtype written straight into such an allocation or call: the
  FP8 buffer is the kernel's output, made for it, and goes with it. A module-level FP8 binding no
  code of the file reads (every function that reads the name binds its own) is no work and goes
  with the place it is merged with. The whole finding folds when every place is one of these and at
  least one feeds a kernel. A name also passed to another call (`torch._scaled_mm(out, w)`: FP8
  compute beside the kernel), a kernel module that names the NPU, a kernel whose sources no single
  open NPU912 error covers: kept. In a test (round-25 audit BT#13, oracles25.py) the kernel's
  output buffer may also be compared with its reference (`assert_close(out.float(), ref)`), a
  module-level FP8 binding folds where every read of it (in functions not binding their own)
  feeds a kernel, and the FP8 of a reference helper that only tests calling the kernel call
  (`torch_scaled_fp8_quant`, the oracle the kernel's output is checked against) goes with the kernel.

An error folds only into an error (folding.may_absorb's rank rule), and never into a scoped
(moot) finding. Nothing is dropped silently: the NPU912 message names each folded file and its lines.
"""

from __future__ import annotations

import ast
import dataclasses
import posixpath
import re
from typing import Optional

from . import astcache, catalogue


FOLDED = ("also {what}: tests and benchmarks of the project's CUDA JIT kernel{s} {kernels} compiled from "
          "this source, which fail at {which} on an NPU host; ported with {it}")
_JIT_KEYWORDS = ("cuda_files", "cuda_sources")
_KERNEL_NAMED = re.compile(r"in a test of the project's CUDA JIT kernel `([^`]+)` \(`([^`]+)`")
_ALLOCATIONS = frozenset({"empty", "empty_like", "zeros", "zeros_like", "ones", "ones_like", "full",
                          "full_like", "new_empty", "new_zeros", "new_full", "empty_strided"})
_RANK = {"info": 0, "warning": 1, "error": 2}
_FUNCTIONS = (ast.FunctionDef, ast.AsyncFunctionDef)
_MAX_DEPTH = 4
_SHOWN = 5  # (lines named per folded finding)


def _open(finding) -> bool:
    from .moot import is_moot

    return not finding.fixable and finding.cell is None and not is_moot(finding)


def _target_open(finding) -> bool:
    return finding.code == "NPU912" and finding.severity == "error" and _open(finding)


def _loader_sources(node: ast.AST) -> list[str]:
    """The literal CUDA sources a JIT loader call hands over (`cuda_files=["a/b.cuh"]`), else []."""
    if not isinstance(node, ast.Call):
        return []
    for keyword in node.keywords:
        if keyword.arg in _JIT_KEYWORDS and isinstance(keyword.value, (ast.List, ast.Tuple)) and keyword.value.elts:
            return [e.value for e in keyword.value.elts if isinstance(e, ast.Constant) and isinstance(e.value, str)]
    return []


class _KernelModule:
    """A JIT kernel module: which CUDA sources each of its functions reaches."""

    def __init__(self, relpath: str, tree: ast.Module):
        self.relpath = relpath
        self.functions = {n.name: n for n in tree.body if isinstance(n, _FUNCTIONS)}
        self.all_sources = [s for n in ast.walk(tree) for s in _loader_sources(n)]

    def sources(self, name: str) -> list[str]:
        """The sources the loader calls reached from function `name` hand over (through calls by
        name to the module's functions), or all of the module's when `name` reaches none."""
        seen, stack, found = set(), [(name, 0)], []
        while stack:
            current, depth = stack.pop()
            function = self.functions.get(current)
            if function is None or current in seen or depth > _MAX_DEPTH:
                continue
            seen.add(current)
            for node in ast.walk(function):
                found.extend(_loader_sources(node))
                if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
                    stack.append((node.func.id, depth + 1))
                elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
                        and isinstance(node.func.value, ast.Call) and isinstance(node.func.value.func, ast.Name):
                    stack.append((node.func.value.func.id, depth + 1))  # (`_module(...).kernel(...)`)
        return list(dict.fromkeys(found)) or list(dict.fromkeys(self.all_sources))


def _kernel_modules(results: list, paths: dict) -> dict[str, _KernelModule]:
    """dotted module name -> the JIT kernel module (cudaonly21's reading: a library module that
    hands a literal list of CUDA sources to a loader and names no NPU)."""
    from .cudaonly21 import BENCH_FILE
    from .fp8tests import TEST_FILE
    from .modpaths import module_names, result_bytes

    npu = re.compile(catalogue.read_table("scopes.toml").get("cudaonly21", {}).get("npu_words", r"(?!)"))
    out: dict[str, _KernelModule] = {}
    for result in results:
        if not result.relpath.endswith(".py") or TEST_FILE.search(result.relpath) or BENCH_FILE.search(result.relpath):
            continue
        data = result_bytes(result, paths)
        if not data or not any(k.encode() in data for k in _JIT_KEYWORDS):
            continue
        if npu.search(data.decode("utf-8", "replace")):
            continue
        tree = astcache.parse(data)
        if tree is None:
            continue
        module = _KernelModule(result.relpath, tree)
        if module.all_sources:
            for name in module_names(result.relpath):
                out.setdefault(name, module)
    return out


def _covering(results: list) -> dict[str, tuple[int, object]]:
    """CUDA source relpath -> (result index, the open NPU912 error that stands for it: its own or
    its folder's `folder/*.cuh` finding)."""
    by_folder: dict[str, list[str]] = {}
    for result in results:
        if result.relpath.endswith((".cu", ".cuh")):
            by_folder.setdefault(posixpath.dirname(result.relpath), []).append(result.relpath)
    out: dict[str, tuple[int, object]] = {}
    for i, result in enumerate(results):
        for finding in result.findings:
            if not _target_open(finding):
                continue
            members = by_folder.get(posixpath.dirname(finding.path), []) if "*" in (finding.source or "") \
                else [finding.path]
            for member in members:
                out.setdefault(member, (i, finding))
    return out


def _target(module: _KernelModule, kernel: str, covering: dict) -> Optional[tuple[int, object]]:
    """The one open NPU912 error covering every CUDA source `kernel` of `module` compiles, or None."""
    targets = []
    for source in module.sources(kernel):
        hits = [path for path in covering if path == source or path.endswith("/" + source)]
        if len(hits) != 1:
            return None
        targets.append(covering[hits[0]])
    if not targets or any(t[1] is not targets[0][1] for t in targets):
        return None
    return targets[0]


# ----------------------------------------------------------------------------- FP8 feeding a JIT kernel
def _kernel_names(tree: ast.Module, kernels: dict) -> dict[str, tuple[str, str]]:
    """Names the file binds by `from <kernel module> import f` (anywhere): local name -> (f, module)."""
    out = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and not node.level and node.module in kernels:
            for alias in node.names:
                out[alias.asname or alias.name] = (alias.name, node.module)
    return out


def _binds(function: ast.AST, name: str) -> bool:
    return any(isinstance(n, ast.Name) and n.id == name and isinstance(n.ctx, ast.Store) for n in ast.walk(function))


def _statement(scope: ast.AST, line: int) -> Optional[ast.stmt]:
    best = None
    for node in ast.walk(scope):
        if isinstance(node, (ast.Assign, ast.AnnAssign, ast.Expr, ast.Return)) and \
                node.lineno <= line <= (node.end_lineno or node.lineno) and (best is None or node.lineno >= best.lineno):
            best = node
    return best


def _bound(statement: ast.stmt) -> Optional[str]:
    targets = statement.targets if isinstance(statement, ast.Assign) else \
        [statement.target] if isinstance(statement, ast.AnnAssign) else []
    if len(targets) == 1 and isinstance(targets[0], ast.Name):
        return targets[0].id
    return None


class _Feeds:
    """Which names of one function only feed a JIT kernel call."""

    def __init__(self, function: ast.AST, kernel_names: dict):
        self.function = function
        self.kernel_names = kernel_names
        self.parents = astcache.parents(function)
        self.fed: list[tuple[str, str]] = []

    def kernel_call(self, node: ast.AST) -> Optional[tuple[str, str]]:
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in self.kernel_names \
                and not _binds(self.function, node.func.id):
            return self.kernel_names[node.func.id]
        return None

    def _enclosing_call_arg(self, node: ast.AST) -> Optional[tuple[ast.Call, Optional[str]]]:
        """(the call whose argument holds `node`, the keyword or None), the argument reached through
        attribute reads and method calls on it (`out.view(-1)`), else None."""
        current = node
        while True:
            parent = self.parents.get(id(current))
            if parent is None:
                return None
            if isinstance(parent, ast.keyword):
                call = self.parents.get(id(parent))
                return (call, parent.arg) if isinstance(call, ast.Call) else None
            if isinstance(parent, ast.Call):
                if current in parent.args:
                    return parent, None
                if parent.func is current:  # (`out.view(-1)`: a method call on it; go on up)
                    current = parent
                    continue
                return None
            if isinstance(parent, ast.Attribute) or isinstance(parent, ast.Starred):
                current = parent
                continue
            return None

    def value_feeds(self, node: ast.AST, depth: int = 0) -> bool:
        """Whether the expression `node` (an FP8 dtype, or a read of a name bound to one) ends only
        in a kernel call: as its argument, or as the `dtype=` of an allocation whose bound name
        only feeds one (and is otherwise returned)."""
        hit = self._enclosing_call_arg(node)
        if hit is None:
            return False
        call, keyword = hit
        kernel = self.kernel_call(call)
        if kernel is not None:
            self.fed.append(kernel)
            return True
        callee = astcache.dotted(call.func, strict=False) or ""
        if keyword != "dtype" or callee.rpartition(".")[2] not in _ALLOCATIONS or depth > 2:
            return False
        statement = self.parents.get(id(call))
        if not isinstance(statement, (ast.Assign, ast.AnnAssign)) or statement.value is not call:
            return False
        name = _bound(statement)
        return name is not None and self.name_feeds(name, depth + 1)

    def checked(self, node: ast.AST) -> bool:
        """Whether `node` is an argument of a comparison of results (`torch.testing.assert_close(
        out.float(), ref)`): a test reading the kernel's output."""
        from .oracles25 import COMPARES

        hit = self._enclosing_call_arg(node)
        callee = astcache.dotted(hit[0].func, strict=False) or "" if hit else ""
        return callee.rpartition(".")[2] in COMPARES

    def name_feeds(self, name: str, depth: int = 0) -> bool:
        reads = [n for n in ast.walk(self.function) if isinstance(n, ast.Name) and n.id == name
                 and isinstance(n.ctx, ast.Load)]
        if not reads:
            return False
        fed = False
        for read in reads:
            holder = self.parents.get(id(read))
            if isinstance(holder, ast.Tuple):  # (`return out, scale`)
                holder = self.parents.get(id(holder))
            if isinstance(holder, ast.Return) and depth > 0:
                continue  # (the kernel's output handed back)
            if depth > 0 and self.checked(read):
                continue  # (the kernel's output compared with its reference: BT#13, oracles25.py)
            if not self.value_feeds(read, depth):
                return False
            fed = True
        return fed


def _unread_module_binding(tree: ast.Module, statement: ast.stmt) -> bool:
    """A module-level `NAME = <FP8 dtype>` no code of the file reads (a function that reads the
    name binds its own)."""
    name = _bound(statement)
    if name is None or statement not in tree.body:
        return False
    parents = astcache.parents(tree)
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Name) and node.id == name and isinstance(node.ctx, ast.Load)):
            continue
        holder = parents.get(id(node))
        while holder is not None and not isinstance(holder, _FUNCTIONS):
            holder = parents.get(id(holder))
        if holder is None or not _binds(holder, name) or any(
                isinstance(n, (ast.Global, ast.Nonlocal)) and name in n.names for n in ast.walk(holder)):
            return False
    return True


def _binding_fed(tree: ast.Module, statement: ast.stmt, kernel_names: dict) -> Optional[list[tuple[str, str]]]:
    """The kernels a module-level `NAME = <FP8 dtype>` feeds where every read of NAME, in a
    function, only feeds a kernel call (oracles25.binding_reads), else None."""
    from .oracles25 import binding_reads

    name = _bound(statement)
    reads = binding_reads(tree, name) if name is not None and statement in tree.body else None
    if not reads:
        return None
    fed: list[tuple[str, str]] = []
    for function, read in reads:
        feeds = _Feeds(function, kernel_names)
        if not feeds.value_feeds(read):
            return None
        fed.extend(feeds.fed)
    return fed or None


def _fp8_fed(tree: ast.Module, finding, kernel_names: dict) -> Optional[list[tuple[str, str]]]:
    """The kernels every place of an NPU913 finding feeds (module's doc, second shape), or None."""
    functions = [n for n in ast.walk(tree) if isinstance(n, _FUNCTIONS)]
    fed: list[tuple[str, str]] = []
    for line, column, _source in [(finding.line, finding.column, finding.source), *finding.also]:
        holding = [f for f in functions if f.lineno <= line <= (f.end_lineno or f.lineno)]
        if not holding:
            statement = _statement(tree, line)
            if statement is None:
                return None
            if not _unread_module_binding(tree, statement):
                read_fed = _binding_fed(tree, statement, kernel_names)  # (BT#13: oracles25.py)
                if read_fed is None:
                    return None
                fed.extend(read_fed)
            continue
        function = min(holding, key=lambda n: (n.end_lineno or n.lineno) - n.lineno)
        feeds = _Feeds(function, kernel_names)
        place = next((n for n in ast.walk(function) if isinstance(n, ast.Attribute) and n.lineno == line
                      and n.col_offset + 1 == column), None)
        statement = _statement(function, line)
        if place is None or statement is None:
            return None
        name = _bound(statement)
        if name is not None and statement.value is place:
            ok = feeds.name_feeds(name)
        else:
            ok = feeds.value_feeds(place)
        if not ok:
            from .oracles25 import oracle_kernels

            reference = oracle_kernels(tree, function, kernel_names)  # (a test's reference helper: BT#13)
            if reference is None:
                return None
            fed.extend(reference)
            continue
        fed.extend(feeds.fed)
    return list(dict.fromkeys(fed)) or None


# ----------------------------------------------------------------------------- the pass
def review(results: list, paths: Optional[dict] = None) -> list:
    """Module's doc. Whole run, last of runplan.whole_run_passes."""
    from .cudaonly21 import BENCH_FILE
    from .fp8tests import TEST_FILE
    from .modpaths import result_bytes

    paths = paths or {}
    sides = [i for i, r in enumerate(results) if r.relpath.endswith(".py")
             and (TEST_FILE.search(r.relpath) or BENCH_FILE.search(r.relpath))
             and any(_open(f) and (f.code == "NPU913" or _KERNEL_NAMED.search(f.message)) for f in r.findings)]
    if not sides or not any(_target_open(f) for r in results for f in r.findings):
        return results
    kernels = _kernel_modules(results, paths)
    if not kernels:
        return results
    covering = _covering(results)
    notes: dict[int, tuple] = {}  # id(target) -> (its file's index, target, [(file index, finding, kernels)])
    for i in sides:
        tree = None
        for finding in results[i].findings:
            if not _open(finding):
                continue
            named = _KERNEL_NAMED.search(finding.message)
            fed: list = []
            if named and named.group(2) in kernels:
                fed = [(named.group(1), named.group(2))]
            elif finding.code == "NPU913" and finding.severity != "info":
                if tree is None:
                    data = result_bytes(results[i], paths)
                    tree = astcache.parse(data[3:] if data and data.startswith(b"\xef\xbb\xbf") else data) \
                        if data else None
                    names = _kernel_names(tree, kernels) if tree is not None else {}
                if tree is None or not names:
                    continue
                fed = _fp8_fed(tree, finding, names) or []
            targets = [_target(kernels[module], kernel, covering) for kernel, module in fed]
            if not targets or any(t is None for t in targets) or any(t[1] is not targets[0][1] for t in targets):
                continue
            k, target = targets[0]
            if _RANK[finding.severity] > _RANK[target.severity]:
                continue
            notes.setdefault(id(target), (k, target, []))[2].append((i, finding, [kernel for kernel, _m in fed]))
    if not notes:
        return results
    out = list(results)
    dropped: dict[int, set] = {}
    for k, target, folded in notes.values():
        pieces = []
        for i, finding, _kernels in folded:
            lines = sorted({finding.line, *(line for line, _c, _s in finding.also)})
            where = results[i].relpath
            shown = ", ".join(map(str, lines[:_SHOWN])) + (
                f" and {len(lines) - _SHOWN} more" if len(lines) > _SHOWN else "")
            piece = f"`{finding.source or finding.code}` ({finding.code}) in `{where}` " \
                    f"(line{'s' if len(lines) > 1 else ''} {shown})"
            pieces.append(piece)
            dropped.setdefault(i, set()).add(id(finding))
        pieces = list(dict.fromkeys(pieces))
        kernels_named = list(dict.fromkeys(n for _i, _f, names in folded for n in names))
        more = f" and {len(pieces) - 3} more" if len(pieces) > 3 else ""
        plural = len(kernels_named) > 1
        note = FOLDED.format(what=", ".join(pieces[:3]) + more, s="s" if plural else "",
                             kernels=", ".join(f"`{n}`" for n in kernels_named),
                             which="those kernels" if plural else "that kernel", it="them" if plural else "it")
        out[k] = dataclasses.replace(out[k], findings=sorted(
            dataclasses.replace(f, message=f"{f.message} ({note})") if f is target else f for f in out[k].findings))
    for i, ids in dropped.items():
        out[i] = dataclasses.replace(out[i], findings=[f for f in out[i].findings if id(f) not in ids])
    return out
