"""CUDA names used only as types, aliases or compile-time helpers (issue #16, round 11): seen
once a file's findings are merged, and lowered or folded with the reason in the message.

* **A torch.cuda class named only as a type.** `stream: Optional[torch.cuda.streams.Stream] = None`
  (a parameter's annotation, evaluated when the `def` runs), or `from torch.cuda.streams import
  ExternalStream` whose every use is an annotation: the classes of rules/cuda_api.toml
  `[every_build]` exist in every torch build, CPU builds included, so naming them runs on an NPU
  host and nothing fails; the streams the code creates and uses are reported or rewritten where
  they are. Info with TYPE_ONLY (moot.NO_WORK: a named scope). A use outside annotations keeps
  the finding (`ExternalStream(ptr)` constructs a CUDA stream).
* **A module-level import whose uses have findings of their own.** `from torch.cuda.memory import
  CUDAPluggableAllocator` (NPU990) whose one use, `CUDAPluggableAllocator(...)`, is reported
  (NPU202): the import restates the use, and it imports on any torch build. Folded into the use's
  finding (its line listed there: "also at line 6"), at the use's severity or higher only. Where
  every use is in code an NPU host never runs (a named scope, moot.py: after an exit on
  `not current_platform.is_cuda()`), the import of a class every build has runs there and
  succeeds: info with UNUSED_THERE (moot.NO_WORK).
* **`torch.cuda.OutOfMemoryError`.** It is `torch.OutOfMemoryError` from torch 2.5. The torch_npu
  wheels read for this (libtorch_npu.so) show that 2.7.1 to 2.10 raise a plain RuntimeError for
  NPU out-of-memory (they never construct c10::OutOfMemoryError) and 2.14 raises
  torch.OutOfMemoryError: the handler is missed on older torch_npu, the program still runs, so a
  warning (the message, rules/cuda_api.toml, says which versions). Where the same function (or
  module-level statement) also names `torch.OutOfMemoryError` (`except (torch.cuda.
  OutOfMemoryError, torch.OutOfMemoryError)`), the CUDA name adds nothing: info with OOM_CAUGHT
  (moot.NO_WORK).
* **`CUDA_HOME`/`CUDAExtension` imported only to be passed on.** `from torch.utils.cpp_extension
  import CUDA_HOME` then `return CUDA_HOME` (an environment helper, mmengine): the module defines
  both on every torch build (CUDA_HOME is None without a CUDA toolkit), so the import does not
  fail, and a file that builds no CUDA extension (no `CUDAExtension(...)`, no JIT build, no `.cu`
  source) asks for no port work here. Info with PASSED_ON (moot.NO_WORK). A place that reads the
  value (`os.path.join(CUDA_HOME, ...)`, `CUDA_HOME + "/bin/nvcc"`) keeps the finding.
"""

from __future__ import annotations

import ast
import dataclasses
import functools
import re
from typing import Optional

from . import astcache, catalogue
from .findings import Finding

TYPE_ONLY = "a torch.cuda class named only as a type"  # (moot.NO_WORK)
OOM_CAUGHT = "`torch.OutOfMemoryError` is caught beside it"  # (moot.NO_WORK)
PASSED_ON = "imported from torch.utils.cpp_extension only to be passed on"  # (moot.NO_WORK)
UNUSED_THERE = "a torch.cuda class imported for code an NPU host never runs"  # (moot.NO_WORK)

_CODES = ("NPU202", "NPU990", "NPU911")
_WORDS = re.compile(r"torch\.cuda|CUDAPluggableAllocator|ExternalStream|OutOfMemoryError|cpp_extension")
_CUDA_BUILD = re.compile(r"\bCUDAExtension\s*\(|\bload_inline\s*\(|cpp_extension\.load\s*\(|"
                         r"\.(cu|cuh)['\"]|\bcuda_sources\b")
_FUNCTIONS = (ast.FunctionDef, ast.AsyncFunctionDef)


@functools.lru_cache(maxsize=None)
def every_build() -> frozenset:
    """The names after `torch.cuda.` of rules/cuda_api.toml `[every_build]` (`Stream`,
    `streams.ExternalStream`)."""
    table = catalogue.cuda_api().get("every_build", {})
    return frozenset((*table.get("names", ()), *table.get("qualified", ())))


def exists_everywhere(qual: str) -> bool:
    """`torch.cuda.Stream`, `torch.cuda.streams.ExternalStream`: a class every torch build has."""
    return qual.startswith("torch.cuda.") and qual[len("torch.cuda."):] in every_build()


def _open(finding: Finding) -> bool:
    return not finding.fixable and finding.cell is None and finding.severity != "info" and finding.code in _CODES


def _places(finding: Finding) -> list[tuple[int, int, str]]:
    return [(finding.line, finding.column, finding.source), *finding.also]


def _note(finding: Finding, why: str, severity: str = "info") -> Finding:
    return dataclasses.replace(finding, severity=severity, message=f"{finding.message} ({why})")


def review(findings: list[Finding], text: str) -> list[Finding]:
    """The file's findings with the type-only, restating and passed-on ones lowered or folded
    (module doc)."""
    if not any(_open(f) and _WORDS.search(f"{f.message} {f.source or ''}") for f in findings):
        return findings
    body = text.encode("utf-8", "surrogatepass")
    tree = astcache.parse(body[3:] if body.startswith(b"\xef\xbb\xbf") else body)
    if tree is None:
        return findings
    facts = _Facts(tree)
    out: list[Finding] = []
    for finding in findings:
        lowered = _lowered(finding, facts, text) if _open(finding) else finding
        out.extend(lowered if isinstance(lowered, list) else [lowered])
    if len(out) == len(findings) and all(a is b for a, b in zip(out, findings)):
        return _fold_imports(findings, facts)
    return _fold_imports(sorted(out), facts)


# ----------------------------------------------------------------------------- what the file says
class _Facts:
    """The file's annotations, its torch.cuda imports and the uses of the names they bind."""

    def __init__(self, tree: ast.Module) -> None:
        self.tree = tree
        notes = []
        self.imports: dict[int, list[tuple[str, str]]] = {}  # line -> (local, qualified name)
        self.module_imports: set[int] = set()
        self.loads: dict[str, list[ast.Name]] = {}
        self.stores: dict[str, list[int]] = {}
        self.returns: list[tuple[int, int]] = []
        self.functions: list[ast.AST] = []
        for node in astcache.walk(tree):
            if isinstance(node, ast.AnnAssign):
                notes.append(node.annotation)
            elif isinstance(node, ast.arg) and node.annotation is not None:
                notes.append(node.annotation)
            elif isinstance(node, _FUNCTIONS):
                self.functions.append(node)
                if node.returns is not None:
                    notes.append(node.returns)
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                for alias in node.names:
                    self.imports.setdefault(node.lineno, []).append(
                        (alias.asname or alias.name, f"{node.module}.{alias.name}"))
            elif isinstance(node, ast.Name):
                if isinstance(node.ctx, ast.Load):
                    self.loads.setdefault(node.id, []).append(node)
                else:
                    self.stores.setdefault(node.id, []).append(node.lineno)
            elif isinstance(node, ast.Return) and node.value is not None and all(
                    isinstance(n, ast.Name) for n in (
                        node.value.elts if isinstance(node.value, (ast.Tuple, ast.List)) else [node.value])):
                # `return CUDA_HOME`, `return BuildExtension, CppExtension`: names passed on as they are
                self.returns.append((node.lineno, node.end_lineno or node.lineno))
        self.module_imports = {s.lineno for s in tree.body if isinstance(s, ast.ImportFrom)}
        self.notes = [((n.lineno, n.col_offset + 1), (n.end_lineno or n.lineno, (n.end_col_offset or 0) + 1))
                      for n in notes]

    def in_annotation(self, line: int, column: int) -> bool:
        return any(start <= (line, column) < end for start, end in self.notes)

    def uses(self, local: str) -> list[ast.Name]:
        return self.loads.get(local, [])

    def scope_of(self, line: int) -> Optional[ast.AST]:
        """The innermost function holding `line`, else the module-level statement holding it."""
        inner = None
        for fn in self.functions:
            if fn.lineno <= line <= (fn.end_lineno or fn.lineno) and (
                    inner is None or fn.lineno >= inner.lineno):
                inner = fn
        if inner is not None:
            return inner
        return next((s for s in self.tree.body if s.lineno <= line <= (s.end_lineno or s.lineno)), None)


def _qualified(finding: Finding) -> str:
    """The torch.cuda name a finding's message names first (`torch.cuda.streams.Stream`)."""
    match = re.search(r"`(torch\.cuda\.[\w.]+)`", finding.message)
    return match.group(1) if match else ""


# ----------------------------------------------------------------------------- lowering
def _lowered(finding: Finding, facts: _Facts, text: str):
    qual = _qualified(finding)
    places = _places(finding)
    if qual.endswith("OutOfMemoryError") and finding.code == "NPU202":
        return _out_of_memory(finding, facts)
    if finding.code in ("NPU202", "NPU990") and qual and exists_everywhere(qual) and all(
            facts.in_annotation(line, column) for line, column, _s in places):
        return _note(finding, f"{TYPE_ONLY}: `{qual}` exists in every torch build, CPU builds included, so "
                              "the annotation runs on an NPU host; the objects of it the code creates (streams, "
                              "graphs, allocators) are reported or rewritten where they are created")
    if finding.code == "NPU990" and all(line in facts.imports for line, _c, _s in places):
        bound = [(local, q) for line, _c, _s in places for local, q in facts.imports[line]
                 if q.startswith("torch.cuda.")]
        if bound and all(exists_everywhere(q) for _l, q in bound):
            uses = [n for local, _q in bound for n in facts.uses(local)]
            if uses and all(facts.in_annotation(n.lineno, n.col_offset + 1) for n in uses):
                shown = ", ".join(f"`{q}`" for _l, q in bound)
                return _note(finding, f"{TYPE_ONLY}: {shown} exists in every torch build, CPU builds included, "
                                      "and the file names it only in annotations; the import runs on an NPU host")
    if finding.code == "NPU911" and "cpp_extension" in f"{finding.message} {finding.source or ''}":
        return _passed_on(finding, facts, text)
    return finding


def _out_of_memory(finding: Finding, facts: _Facts) -> list[Finding]:
    """`torch.cuda.OutOfMemoryError` (module doc): info where `torch.OutOfMemoryError` is named in
    the same function, else a warning (the handler is missed on torch_npu up to 2.10)."""
    from .folding import rebuilt

    def beside(line: int) -> bool:
        scope = facts.scope_of(line)
        return scope is not None and any(
            isinstance(n, ast.Attribute) and n.attr == "OutOfMemoryError" and astcache.dotted(n) == "torch.OutOfMemoryError"
            for n in ast.walk(scope))

    places = _places(finding)
    caught = [p for p in places if beside(p[0])]
    missed = [p for p in places if not beside(p[0])]
    out = []
    if caught:
        out.append(_note(rebuilt(finding, caught), f"{OOM_CAUGHT}: torch.cuda.OutOfMemoryError is torch.OutOfMemoryError "
                                                   "from torch 2.5; the code catches it as it does on CUDA once torch_npu "
                                                   "raises it (2.14; 2.7.1 to 2.10 raise RuntimeError, which neither name catches)"))
    if missed:
        kept = rebuilt(finding, missed)
        out.append(dataclasses.replace(kept, severity="warning") if kept.severity == "error" else kept)
    return out


def _passed_on(finding: Finding, facts: _Facts, text: str) -> Finding:
    """NPU911 on `from torch.utils.cpp_extension import CUDA_HOME` whose other places only return
    or rebind the names, in a file that builds no CUDA extension (module doc)."""
    if _CUDA_BUILD.search(text):
        return finding
    names = {"CUDA_HOME", "CUDAExtension", "BuildExtension"}
    imported = False
    for line, _column, _source in _places(finding):
        bound = facts.imports.get(line, [])
        if bound and all(q.startswith("torch.utils.cpp_extension.") for _l, q in bound):
            imported = True
            continue
        if any(a <= line <= b for a, b in facts.returns):
            continue
        if any(line in facts.stores.get(n, []) for n in names):
            continue  # `CUDAExtension = partial(Extension, cuda=True)`: the file's own binding
        return finding
    if not imported:
        return finding
    return _note(finding, f"{PASSED_ON}: the module defines CUDA_HOME and CUDAExtension on every torch build "
                          "(CUDA_HOME is None without a CUDA toolkit), and this file only returns them and builds no "
                          "CUDA extension; review the callers that build with them")


# ----------------------------------------------------------------------------- an import restating its uses
def _fold_imports(findings: list[Finding], facts: _Facts) -> list[Finding]:
    """An NPU990 at a module-level torch.cuda import whose every use (annotations of a class every
    build has aside) sits on a place of another finding naming it: folded into that finding; where
    those findings are all about code an NPU host never runs (moot.py) and the class is one every
    build has, the import (which runs there and succeeds) is lowered with UNUSED_THERE."""
    from . import moot
    from .folding import Fold

    fold, moved, lowered = None, False, {}
    for finding in findings:
        if not (_open(finding) and finding.code == "NPU990" and not finding.also
                and finding.line in facts.module_imports and finding.line in facts.imports):
            continue
        bound = [(local, q) for local, q in facts.imports[finding.line] if q.startswith("torch.cuda.")]
        if not bound:
            continue
        live, idle, ok = [], [], True
        for local, qual in bound:
            for use in facts.uses(local):
                if exists_everywhere(qual) and facts.in_annotation(use.lineno, use.col_offset + 1):
                    continue
                holder = next((f for f in findings if f is not finding and not f.fixable and f.cell is None
                               and any(line == use.lineno and local in (source or "")
                                       for line, _c, source in _places(f))), None)
                if holder is None:
                    ok = False
                    break
                (idle if moot.is_moot(holder) else live).append((holder, use.lineno))
            if not ok:
                break
        targets = list({id(h): h for h, _line in live}.values())
        if not ok or len(targets) > 1:
            continue
        if targets:
            fold = fold or Fold(findings)
            if fold.movable(finding, targets[0]):
                fold.move(finding, _places(finding), targets[0])
                moved = True
        elif idle and all(exists_everywhere(q) for _l, q in bound):
            lines = ", ".join(str(n) for n in sorted({line for _h, line in idle}))
            shown = ", ".join(f"`{q}`" for _l, q in bound)
            lowered[id(finding)] = _note(finding, f"{UNUSED_THERE}: {shown} exists in every torch build, so the "
                                                  f"import runs there; its uses (line {lines}) are named where they are")
    if lowered:
        findings = [lowered.get(id(f), f) for f in findings]
    return fold.result() if moved else findings
