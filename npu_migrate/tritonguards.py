"""Triton kernels and imports that the code already keeps off an NPU host (issue #16, NPU910).

A Triton finding says that CUDA Triton kernels do not run on an NPU. Three shapes of real projects
make it moot, because the code as written never sends an NPU host into Triton:

* **Kernels launched only on CUDA tensors** (`review`, per file). Every launch `kernel[grid](...)`
  of every `@triton.jit` / `@triton.autotune` kernel of the module sits behind a test of the
  tensor's device (`x.is_cuda`, `x.device.type == "cuda"`) that the migration keeps meaning CUDA
  (no rewrite lands in it), and the function has a torch path for the other devices: an early
  `if not x.is_cuda or ...: return x.float() + y.float()`, an `else`, or the statements after the
  `if`. The guard may be one step away: the kernels launch in a private function or class that
  the module uses only in such a branch, or in a branch whose test calls a private selector that
  holds a device check the migration kept for the Triton path (NPU110, rewrite_gates.py:
  `_resolve_backend(...) == "triton"`). A launch may also be chosen against a torch tile by a
  conditional on such a test (`fold = _kernel[(n,)] if _use_triton(device) else _fold_tile`, then
  `fold(...)`), a kernel may be made by a module wrapper that calls `triton.jit` (`@_jit`), and a
  kernel called only inside another kernel runs where that one runs (trl, round-16 AS#23).
  An NPU host runs the fallback: the finding becomes info
  with an AS_WRITTEN reason (moot.py names it as a skipped scope). A device test the migration
  rewrites (NPU104: `.is_cuda` to the accelerator) would send the NPU into the kernel: it is no
  guard, and the error stays; so does a kernel launched anywhere without one, or named any other
  way (passed, stored, exported), and a module that imports `triton` unguarded.
* **Benchmark harness only** (`review`, per file). A file that uses only `triton.testing`
  (lowered to info by testscopes.lower_triton_harness) and imports it inside `try`/`except
  ImportError` (or an `if`) runs its fallback where Triton is missing: a named scope. Where the file
  already reports an unguarded CUDA-only import as an error (flashinfer, sgl_kernel: the file's real
  blocker), the harness joins that error as a place of it ("also at"), not a finding of its own.
* **Modules only guarded importers load** (`review_importers`, whole program). A module that
  imports `triton` at module level is reported as failing to import where Triton is missing. When
  every importer of the run imports it behind a Triton-availability test (`if has_triton():`,
  `if deepspeed.HAS_TRITON and ...:`), or inside `try`/`except ImportError`, the module is not
  loaded where Triton is missing: the clause goes, and the finding is info naming the importers.
  It stays a finding (not a named scope): Triton-Ascend installs `triton` on an NPU host, where
  the availability test is then true and these kernels run (round-8 audit: ColossalAI's paged
  attention kernels behind `if HAS_TRITON:`).

Nothing is dropped: each shape ends as info with its reason, or as a place of another finding.
"""

from __future__ import annotations

import ast
import dataclasses
import re
from typing import Optional

from . import astcache, predicates, tritonascend26
from .findings import Finding

# (a helper whose importers' own unguarded Triton import fails first: redundant, info)
RESTATED = "imported only where its importer's own unguarded Triton import fails first"
# a kernel the module defines: `@triton.jit`, `@triton.autotune(...)`, `@jit` (decorator lines)
_KERNEL_DEF = re.compile(rb"^[ \t]*@[ \t]*(?:triton\.)?(?:jit|autotune|heuristics)\b", re.MULTILINE)
# the reasons (moot.AS_WRITTEN holds their first words)
KERNELS_ON_CUDA = "Triton kernels launched only on CUDA tensors: the torch fallback runs on NPU"
HARNESS_GUARDED = "guarded import of Triton's benchmark harness: the fallback runs on NPU"
# (not a moot.AS_WRITTEN phrase: Triton-Ascend installs `triton` on an NPU host, where the test is
# then true and these kernels run: an info finding that asks to verify them there)
# (round-20 audits: "runs the fallback" claimed a fallback the importers need not have; an unguarded
# import of a name bound only under the test fails instead: importguards20.py reports it)
TRITON_GATED_IMPORTERS = ("imported only behind a Triton-availability test: an NPU host without Triton does not "
                          "load these kernels; with Triton-Ascend installed (a module named `triton`) the test "
                          "may hold there (" + tritonascend26.HAS_TRITON_ON_NPU + ") and they run: verify them")
_TRY_IMPORTERS = "imported only inside `try`/`except ImportError`, whose fallback runs where Triton is missing"

UNGUARDED = "; imported unguarded at module level, so the module fails to import where it is not installed"
_HARNESS = " (only `triton.testing`, a benchmark harness)"
# a decorator that makes a Triton kernel: `triton.jit`, `triton.autotune(...)`, `triton.heuristics(...)`
_KERNEL_DECORATOR = re.compile(r"(^|\.)(jit|autotune|heuristics)$")
# a name that tests whether Triton is there (and usable): `has_triton()`, `HAS_TRITON`,
# `_TRITON_AVAILABLE`, `is_triton_available()`, `is_triton_supported()`, `_should_use_triton(...)`
_TRITON_AVAILABILITY = re.compile(
    r"(?i)(^|_)(has|is|use|should_use|can_use|enable)_?triton|triton_?(is_)?(available|supported|enabled|installed)")
IMPORT_ERRORS = frozenset(("ImportError", "ModuleNotFoundError", "Exception", "BaseException"))
_MAX_HOPS = 3


def _is_triton(module: str) -> bool:
    return module == "triton" or module.startswith("triton.")


def parents(tree: ast.AST) -> dict[int, ast.AST]:
    if isinstance(tree, ast.Module):
        return astcache.parents(tree)
    return {id(child): node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}


# ------------------------------------------------------------------ a CUDA device test of a tensor
def _device_check(node: ast.AST) -> Optional[bool]:
    """True: `x.is_cuda` / `x.device.type == "cuda"` (holds on CUDA only); False: its negation
    (`not x.is_cuda`, `x.device.type != "cuda"`); None: no such test. Availability calls
    (`torch.cuda.is_available()`) are not tensor tests."""
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
        inner = _device_check(node.operand)
        return None if inner is None else not inner
    if isinstance(node, ast.Attribute) and node.attr == "is_cuda":
        return True
    if isinstance(node, ast.Compare) and len(node.ops) == 1:
        left, right = node.left, node.comparators[0]
        sides = [s for s in (left, right) if isinstance(s, ast.Constant) and s.value == "cuda"]
        other = right if sides and sides[0] is left else left
        name = astcache.dotted(other) or ""
        if sides and (name.endswith("device.type") or name.endswith(".type") or name.endswith("device")):
            if isinstance(node.ops[0], (ast.Eq, ast.Is)):
                return True
            if isinstance(node.ops[0], (ast.NotEq, ast.IsNot)):
                return False
    return None


def operands(test: ast.AST, op: type) -> list[ast.AST]:
    if isinstance(test, ast.BoolOp) and isinstance(test.op, op):
        return [v for value in test.values for v in operands(value, op)]
    return [test]


class _Module:
    """One file's kernels, their launches and the guards in front of them."""

    def __init__(self, tree: ast.Module, findings: list[Finding]) -> None:
        self.tree = tree
        self.parent = parents(tree)
        # places the migration rewrites (a test holding one is widened to the NPU)
        self.fixed = [(f.line, f.column) for f in findings if f.fixable and f.cell is None]
        # places of the device checks the migration kept for a Triton or CUDA-only path (NPU110)
        self.kept = [f.line for f in findings if f.code == "NPU110" and not f.fixable and f.cell is None]
        self.functions = {n.name: n for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}
        self.guards: list[ast.AST] = []  # the tests that keep the kernels off the NPU

    def _wrappers(self) -> set[str]:
        """Module functions that make a kernel of what they wrap (`def _jit(fn): return triton.jit(fn)
        if is_triton_available() else fn`, round-16 AS#23): used as decorators, they make kernels."""
        found = set()
        for function in self.functions.values():
            for node in ast.walk(function):
                if isinstance(node, ast.Call):
                    name = astcache.dotted(node.func, strict=True) or ""
                    if "triton" in name.split(".")[0] and _KERNEL_DECORATOR.search(name):
                        found.add(function.name)
                        break
        return found

    def kernels(self) -> dict[str, ast.AST]:
        found = {}
        wrappers = self._wrappers()
        for node in ast.walk(self.tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                for decorator in node.decorator_list:
                    target = decorator.func if isinstance(decorator, ast.Call) else decorator
                    name = astcache.dotted(target, strict=True) or ""
                    if ("triton" in name.split(".")[0] and _KERNEL_DECORATOR.search(name)) or name in wrappers:
                        found[node.name] = node
                        break
        return found

    def _rewritten(self, node: ast.AST) -> bool:
        first, last = node.lineno, node.end_lineno or node.lineno
        for line, column in self.fixed:
            if first <= line <= last:
                if first == last and not (node.col_offset < column <= (node.end_col_offset or 0) + 1):
                    continue
                return True
        return False

    def _selector(self, node: ast.AST) -> bool:
        """A call of a private module function holding a device check the migration kept for a
        Triton path (`_resolve_backend(backend, logits)`, compared or alone)."""
        call = node.left if isinstance(node, ast.Compare) else node
        if not (isinstance(call, ast.Call) and isinstance(call.func, ast.Name)):
            return False
        function = self.functions.get(call.func.id)
        if function is None or not function.name.startswith("_"):
            return False
        last = function.end_lineno or function.lineno
        return any(function.lineno <= line <= last for line in self.kept)

    def _holds_on_cuda_only(self, test: ast.AST, positive: bool) -> Optional[ast.AST]:
        """The operand of `test` that keeps the branch on CUDA: a conjunct that holds on CUDA only
        (`positive`, the body of an `if`), or a disjunct that holds off CUDA (the `else` of an
        `if`, or the code after an `if ...: return`); None when there is none, or the migration
        rewrites it."""
        for operand in operands(test, ast.And if positive else ast.Or):
            check = _device_check(operand)
            if check is None and positive and self._selector(operand):
                return operand
            if check is positive and not self._rewritten(operand):
                return operand
        return None

    def launches_in(self, nodes) -> bool:
        names = set(self._kernel_names)
        return any(isinstance(n, ast.Name) and n.id in names for node in nodes for n in ast.walk(node))

    def guarded(self, node: ast.AST, hops: int = 0) -> bool:
        """The use `node` runs only on CUDA tensors, with a fallback in front of the other devices."""
        child, current = node, self.parent.get(id(node))
        while current is not None:
            if isinstance(current, (ast.If, ast.IfExp)) and child is not current.test:
                body = current.body if isinstance(current.body, list) else [current.body]
                orelse = current.orelse if isinstance(current.orelse, list) else [current.orelse]
                in_body = child in body
                test = self._holds_on_cuda_only(current.test, positive=in_body)
                fallback = orelse if in_body else body
                if test is not None and not self.launches_in(fallback) and (
                        fallback or self._followed(current)):
                    self.guards.append(test)
                    return True
            for block in ("body", "orelse", "finalbody"):
                statements = getattr(current, block, None)
                if isinstance(statements, list) and child in statements:
                    for before in statements[:statements.index(child)]:
                        if (isinstance(before, ast.If) and before.body and isinstance(before.body[-1], ast.Return)
                                and not self.launches_in(before.body)):
                            test = self._holds_on_cuda_only(before.test, positive=False)
                            if test is not None:
                                self.guards.append(test)
                                return True
            if isinstance(current, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.Module, ast.ClassDef)):
                break
            child, current = current, self.parent.get(id(current))
        if current is None or isinstance(current, (ast.Module, ast.Lambda)) or hops >= _MAX_HOPS:
            return False
        # one step out: the private function (or the class of the method) that launches, used
        # only in guarded places of the module
        unit = current
        holder = self.parent.get(id(current))
        if isinstance(current, (ast.FunctionDef, ast.AsyncFunctionDef)) and isinstance(holder, ast.ClassDef):
            unit = holder
        if not unit.name.startswith("_") or not self._top_level(unit):
            return False
        uses = [n for n in ast.walk(self.tree) if isinstance(n, ast.Name) and n.id == unit.name
                and not self._inside(n, unit)]
        return bool(uses) and all(
            isinstance(use.ctx, ast.Load) and self.guarded(use, hops + 1) for use in uses)

    def _followed(self, statement: ast.AST) -> bool:
        """Statements follow `statement` in its block (a fallthrough)."""
        holder = self.parent.get(id(statement))
        for block in ("body", "orelse", "finalbody"):
            statements = getattr(holder, block, None)
            if isinstance(statements, list) and statement in statements:
                rest = statements[statements.index(statement) + 1:]
                return bool(rest) and not self.launches_in(rest)
        return False

    def _top_level(self, node: ast.AST) -> bool:
        """Defined at module level (also under a module-level `if`/`try`: `if _TRITON_AVAILABLE:`)."""
        current = self.parent.get(id(node))
        while isinstance(current, (ast.If, ast.Try)):
            current = self.parent.get(id(current))
        return isinstance(current, ast.Module)

    def _inside(self, node: ast.AST, unit: ast.AST) -> bool:
        current = node
        while current is not None:
            if current is unit:
                return True
            current = self.parent.get(id(current))
        return False

    def gated(self) -> Optional[list[ast.AST]]:
        """The guards when every use of every kernel is a launch behind one; None otherwise."""
        kernels = self.kernels()
        if not kernels:
            return None
        self._kernel_names = kernels
        uses = [n for n in ast.walk(self.tree) if isinstance(n, ast.Name) and n.id in kernels
                and isinstance(n.ctx, ast.Load)]
        if not uses:
            return None
        for use in uses:
            if any(self._inside(use, k) for k in kernels.values()):
                continue  # (a device function called in a kernel's body runs where that kernel runs)
            subscript = self.parent.get(id(use))
            call = self.parent.get(id(subscript))
            # (`fold = _kernel[(n,)] if _use_triton(device) else _fold_tile`: the launch chosen against
            # a fallback by the conditional's test, then called; round-16 AS#23)
            chosen = isinstance(call, ast.IfExp) and subscript in (call.body, call.orelse)
            if not (isinstance(subscript, ast.Subscript) and subscript.value is use
                    and ((isinstance(call, ast.Call) and call.func is subscript) or chosen)):
                return None  # passed, stored, returned, exported: not known where it runs
            if not self.guarded(use):
                return None
        return self.guards

    def definitions_import_safely(self) -> bool:
        """Every kernel is defined under a Triton-availability test (`if _TRITON_AVAILABLE:`) or
        with a decorator from the project's own module (a placeholder where Triton is missing:
        `from vllm.triton_utils import triton`); not with `triton` imported in a `try` of this
        file, whose `except` leaves no `triton.jit` to call."""
        own = set()
        for node in ast.walk(self.tree):
            if isinstance(node, ast.Import):
                own.update((a.asname or a.name).split(".")[0] for a in node.names if _is_triton(a.name))
            elif isinstance(node, ast.ImportFrom) and not node.level and _is_triton(node.module or ""):
                own.update(a.asname or a.name for a in node.names)
        for kernel in self.kernels().values():
            current = self.parent.get(id(kernel))
            gated = False
            while current is not None and not isinstance(current, ast.Module):
                if isinstance(current, ast.If) and _tests_triton(current.test):
                    gated = True
                current = self.parent.get(id(current))
            if gated:
                continue
            for decorator in kernel.decorator_list:
                target = decorator.func if isinstance(decorator, ast.Call) else decorator
                if (astcache.dotted(target) or "").split(".")[0] in own:
                    return False
        return True

    def unguarded_triton_import(self) -> bool:
        """`import triton` (or `from triton... import`) at module level, outside `try` and `if`."""
        for statement in self.tree.body:
            if isinstance(statement, ast.Import) and any(_is_triton(a.name) for a in statement.names):
                return True
            if isinstance(statement, ast.ImportFrom) and not statement.level and _is_triton(statement.module or ""):
                return True
        return False


def _places(finding: Finding) -> list[int]:
    return [finding.line, *(line for line, _column, source_text in finding.also)]


def _span(node: ast.AST) -> tuple[int, int]:
    first = min([node.lineno, *(d.lineno for d in getattr(node, "decorator_list", ()))])
    return first, node.end_lineno or node.lineno


# ------------------------------------------------------------------ per file
def review(findings: list[Finding], text: str) -> list[Finding]:
    """The file's NPU910 about kernels launched only on CUDA tensors, or about a guarded
    benchmark harness, as info with an AS_WRITTEN reason; a harness in a file with an unguarded
    CUDA-only import folded into that import's error (see the module's doc). Runs on the file's
    merged findings (run.py, after the folds)."""
    triton = [f for f in findings if f.code == "NPU910" and not f.fixable and f.cell is None]
    if not triton:
        return findings
    tree = astcache.parse(text.encode("utf-8", "surrogatepass"))
    if tree is None:
        return findings
    try:
        findings = _kernels_on_cuda(findings, tree)
        return _harness(findings, tree)
    except RecursionError:
        return findings


def _kernels_on_cuda(findings: list[Finding], tree: ast.Module, module: Optional["_Module"] = None,
                     origin: str = "") -> list[Finding]:
    """`module`: the file read with names another file defines (tritonmods20.py); `origin` says where."""
    targets = [f for f in findings if f.code == "NPU910" and not f.fixable and f.cell is None and f.severity != "info"]
    if not targets or any(UNGUARDED in f.message for f in targets):
        return findings
    module = module or _Module(tree, findings)
    if module.unguarded_triton_import() or not module.definitions_import_safely():
        return findings
    guards = module.gated()
    if not guards:
        return findings
    # every place of the finding is a kernel's definition, a Triton import in a guard, or a guard
    allowed = [_span(k) for k in module.kernels().values()]
    allowed += [(g.lineno, g.end_lineno or g.lineno) for g in guards]
    allowed += [(n.lineno, n.end_lineno or n.lineno) for n in astcache.walk(tree)
                if (isinstance(n, ast.Import) and any(_is_triton(a.name) for a in n.names))
                or (isinstance(n, ast.ImportFrom) and not n.level and _is_triton(n.module or ""))]
    if not all(any(a <= line <= b for a, b in allowed) for f in targets for line in _places(f)):
        return findings
    shown = ", ".join(dict.fromkeys(f"line {g.lineno}: `{source_text(g)}`" for g in guards))
    reason = f" ({KERNELS_ON_CUDA}; the device test stays CUDA: {shown}{origin})"
    guard_lines = {line for g in guards for line in range(g.lineno, (g.end_lineno or g.lineno) + 1)}
    out = []
    for finding in findings:
        if finding in targets:
            finding = dataclasses.replace(finding, severity="info", message=finding.message + reason)
        elif (finding.code == "NPU110" and not finding.fixable and finding.cell is None
              and finding.line in guard_lines and finding.severity != "info"):
            # the kept check in front of the kernels: part of the same scope
            finding = dataclasses.replace(finding, severity="info", message=finding.message + reason)
        out.append(finding)
    return out


def source_text(node: ast.AST) -> str:
    try:
        text = " ".join(ast.unparse(node).split())
    except (ValueError, RecursionError):  # pragma: no cover - unparse of a parsed tree
        return ""
    return text if len(text) <= 60 else text[:57] + "..."


def _harness(findings: list[Finding], tree: ast.Module) -> list[Finding]:
    harness = [f for f in findings if f.code == "NPU910" and not f.fixable and f.cell is None
               and f.severity == "info" and _HARNESS in f.message]
    if not harness:
        return findings
    blockers = [f for f in findings if f.severity == "error" and not f.fixable and f.cell is None
                and f.code != "NPU910" and UNGUARDED in f.message]
    if blockers:
        from .moot import is_moot
        from .folding import absorb

        target = min(blockers)
        if is_moot(target) or any(is_moot(f) for f in harness):  # (code an NPU host never runs: its scope)
            return findings
        merged = absorb(target, harness, name_them="imported for its benchmark harness")
        return [merged if f is target else f for f in findings if f not in harness]
    parent = parents(tree)
    imports = [n for n in astcache.walk(tree) if (isinstance(n, ast.Import) and any(_is_triton(a.name) for a in n.names))
               or (isinstance(n, ast.ImportFrom) and not n.level and _is_triton(n.module or ""))]
    if not imports or not all(_guard_of(n, parent) for n in imports):
        return findings
    reason = f" ({HARNESS_GUARDED})"
    return [dataclasses.replace(f, message=f.message.replace(_HARNESS, "") + reason) if f in harness else f
            for f in findings]


def _guard_of(node: ast.AST, parent: dict[int, ast.AST]) -> Optional[tuple]:
    """("try", "") when `node` is in the body of a `try` that catches ImportError; ("triton", test)
    when in the body of an `if` on a Triton-availability name; ("if", test) in another `if`
    (a harness only); None when unguarded."""
    child, current = node, parent.get(id(node))
    found = None
    while current is not None and not isinstance(current, ast.Module):
        if isinstance(current, ast.Try) and child in current.body and catches_import_errors(current):
            return ("try", "")
        if isinstance(current, ast.If) and child in current.body:
            test = " ".join(source_text(current.test).split())
            if _tests_triton(current.test):  # (third: it asks `is_triton_supported()`, predicates.py)
                return ("triton", test, predicates.asks_triton_supported_node(current.test))
            found = found or ("if", test)
        child, current = current, parent.get(id(current))
    return found


def _availability(node: ast.AST) -> bool:
    """`has_triton()`, `HAS_TRITON`, `mod.is_triton_available()`, `_should_use_triton(x)`."""
    target = node.func if isinstance(node, ast.Call) else node
    name = target.id if isinstance(target, ast.Name) else target.attr if isinstance(target, ast.Attribute) else ""
    return bool(_TRITON_AVAILABILITY.search(name))


def _tests_triton(test: ast.AST) -> bool:
    """The test holds only where Triton is there: each of its disjuncts (but `TYPE_CHECKING`,
    false at run time) has a conjunct that tests Triton's availability, not negated."""
    disjuncts = [d for d in operands(test, ast.Or)
                 if (astcache.dotted(d) or "").rsplit(".", 1)[-1] != "TYPE_CHECKING"]
    return bool(disjuncts) and all(any(_availability(c) for c in operands(d, ast.And)) for d in disjuncts)


# ------------------------------------------------------------------ whole program
def review_importers(results: list, paths: Optional[dict[str, str]] = None) -> list:
    """NPU910 "imported unguarded at module level" on a module that every importer of the run
    imports behind a Triton-availability test or a `try`/`except ImportError`: the clause goes,
    info with the importers named (see the module's doc)."""
    from .importgates import is_test
    from .modpaths import module_names

    candidates = [i for i, r in enumerate(results) if r.relpath.endswith(".py") and any(
        f.code == "NPU910" and not f.fixable and f.cell is None and f.severity != "info" and UNGUARDED in f.message
        for f in r.findings)]
    if not candidates:
        return results
    paths = paths or {}
    python = [i for i, r in enumerate(results) if r.relpath.endswith(".py")]
    imports, text_of = run_imports(results, python, paths)
    reported = {i: next(f.line for f in results[i].findings if f.code == "NPU910" and not f.fixable
                        and f.cell is None and f.severity != "info" and UNGUARDED in f.message) for i in candidates}
    trees: dict[int, Optional[ast.Module]] = {}
    out = list(results)
    decided: dict[int, list] = {}  # file -> the guards of its import sites
    refs: dict[int, set[int]] = {}  # file -> the files whose own finding its sites restate
    for i in candidates:
        relpath = results[i].relpath
        names = set(module_names(relpath))
        stem = relpath[:-3]
        sites = [(j, line) for j in python if j != i for name, line, relative in imports[j]
                 if (name == stem or name == stem.removesuffix("/__init__")) if relative] + [
            (j, line) for j in python if j != i for name, line, relative in imports[j]
            if not relative and name in names]
        importers = {j for j, _line in sites}
        if not is_test(relpath):  # (a test is no runtime importer: the module's own tests import it as they like)
            sites = [(j, line) for j, line in sites if not is_test(results[j].relpath)]
        if not sites or relpath.endswith("__init__.py") or named_in_a_string(results, i, text_of, python):
            continue
        guards = []
        for j, line in sorted(set(sites)):
            if j not in trees:
                data = text_of(j)
                trees[j] = astcache.parse(data) if data is not None else None
            tree = trees[j]
            guard = _import_guard(tree, line) if tree is not None else None
            if guard is None and not _KERNEL_DEF.search(text_of(i) or b""):
                # (a helper without kernels of its own, whose importer's own unguarded Triton import
                # fails first: redundant; a module with kernels keeps its finding, they are its own)
                k = restating_site(results, reported, j, line, tree, importers)
                guard = ("restated", f"{results[k].relpath}:{reported[k]}") if k is not None else None
                if k is not None:
                    refs.setdefault(i, set()).add(k)
            if guard is None:
                break
            guards.append((results[j].relpath, line, guard))
        else:
            decided[i] = guards
    # a finding restated by an importer that is lowered itself, every import site of which is in a
    # `try`/`except ImportError`, is guarded through it: the chain is imported only in `try`
    # (torchao: autotuner.py imported by intmm_triton.py, imported only in `try` by intmm.py)
    for i, guards in decided.items():
        through = refs.get(i, set())
        if through and all(k in decided and not refs.get(k) and decided[k]
                           and all(g[0] == "try" for _p, _l, g in decided[k]) for k in through):
            chain = {f"{results[k].relpath}:{reported[k]}": "; ".join(f"{gp}:{gl}" for gp, gl, _g in decided[k])
                     for k in through}
            if all(g[1] in chain for _p, _l, g in guards if g[0] == "restated"):
                decided[i] = [(p, ln, ("through", chain[g[1]]) if g[0] == "restated" else g) for p, ln, g in guards]
                refs[i] = set()
        elif through and all(k in decided and not refs.get(k) and decided[k]
                             and all(g[0] == "triton" for _p, _l, g in decided[k]) for k in through):
            # the same through an importer imported only behind a Triton-availability test (round
            # 14, AM#16: xformers' matmul_perf_model.py, imported only by tiled_matmul_kernels.py)
            chain = {f"{results[k].relpath}:{reported[k]}": "; ".join(f"{gp}:{gl} under `{g[1][:60]}`"
                                                                      for gp, gl, g in decided[k][:2])
                     for k in through}
            if all(g[1] in chain for _p, _l, g in guards if g[0] == "restated"):
                decided[i] = [(p, ln, ("through-triton", chain[g[1]]) if g[0] == "restated" else g)
                              for p, ln, g in guards]
                refs[i] = set()
    # a finding restated by one that is lowered itself is not redundant: it stays (no cycle of
    # modules each redundant with the other leaves nothing reported)
    while True:
        dropped = [i for i in decided if refs.get(i, set()) & decided.keys()]
        if not dropped:
            break
        for i in dropped:
            del decided[i]
    npu_false = predicates.npu_accelerator_without_triton(results, python, text_of) if decided else None
    for i, guards in decided.items():
        out[i] = _lower_importers(out[i], guards, npu_false)
    return out


def _import_guard(tree: ast.Module, line: int) -> Optional[tuple]:
    statements = [n for n in astcache.walk(tree) if isinstance(n, (ast.Import, ast.ImportFrom)) and n.lineno == line]
    if not statements:
        return None
    parent = parents(tree)
    guards = [_guard_of(n, parent) for n in statements]
    if any(g is None or g[0] == "if" for g in guards):
        return None
    return guards[0]


def run_imports(results, python, paths):
    """({file: its imports, from the whole-program facts}, text_of(file): its bytes, read once)
    of the run's Python files."""
    from .modpaths import result_bytes
    from .wholeprogram import file_facts

    texts: dict[int, Optional[bytes]] = {}

    def text_of(i: int) -> Optional[bytes]:
        if i not in texts:
            texts[i] = result_bytes(results[i], paths)
        return texts[i]

    imports: dict[int, list] = {}
    for i in python:
        facts = results[i].facts
        if facts is None:
            data = text_of(i) or b""
            facts = file_facts(results[i].relpath, data) if b"import" in data else {"imports": []}
        imports[i] = facts.get("imports") or []
    return imports, text_of


def catches_import_errors(statement: ast.Try) -> bool:
    """Whether a `try` has a handler for ImportError (by name, in a tuple, or a bare `except`)."""
    caught = set()
    for handler in statement.handlers:
        if handler.type is None:
            caught.add("BaseException")
        for sub in ([handler.type] if handler.type is not None else []):
            for element in (sub.elts if isinstance(sub, ast.Tuple) else [sub]):
                caught.add((astcache.dotted(element) or "").rsplit(".", 1)[-1])
    return bool(caught & IMPORT_ERRORS)


def named_in_a_string(results, i: int, text_of, python) -> bool:
    """The module's folder and name in a string of another file (a dynamic import by name)."""
    # (its folder and name: `triton.attention`, `triton/attention`; a bare last name such as
    # "attention" is in many strings that name no module)
    parts = results[i].relpath[:-3].split("/")
    stem = parts[-1].encode()
    tail = re.escape(parts[-2].encode()) + rb"[./]" if len(parts) > 1 else b""
    quoted = re.compile(rb"[\"'][\w./:-]*\b" + tail + re.escape(stem) + rb"\b[\w./:-]*[\"']")
    for j in python:
        if j == i:
            continue
        data = text_of(j)
        if data and stem in data and quoted.search(data):
            return True
    return False


def _lower_importers(result, guards: list[tuple[str, int, tuple[str, str]]], npu_false: Optional[str] = None):
    shown = [f"{path}:{line}" + (f" under `{guard[1][:70]}`" if guard[0] == "triton" else
                                 f" (reported at {guard[1]})" if guard[0] == "restated" else
                                 f", itself imported only in `try` ({guard[1]})" if guard[0] == "through" else
                                 f", itself imported only behind a Triton-availability test ({guard[1]})"
                                 if guard[0] == "through-triton" else " in `try`")
             for path, line, guard in guards]
    listed = "; ".join(shown[:2]) + (f"; and {len(shown) - 2} more" if len(shown) > 2 else "")
    why = (RESTATED if any(g[0] == "restated" for _p, _l, g in guards) else
           TRITON_GATED_IMPORTERS if all(g[0] in ("triton", "through-triton") for _p, _l, g in guards)
           else _TRY_IMPORTERS)
    if npu_false and guards and all(g[0] == "triton" and g[-1] is True for _p, _l, g in guards):
        # (the project's NPU accelerator answers `is_triton_supported()` with a literal False: the
        # test is false on an NPU host, Triton-Ascend or not)
        why = f"{predicates.NPU_ACCELERATOR_NO_TRITON} ({npu_false})"
    findings = []
    for finding in result.findings:
        if (finding.code == "NPU910" and not finding.fixable and finding.cell is None
                and finding.severity != "info" and UNGUARDED in finding.message):
            finding = dataclasses.replace(finding, severity="info",
                                          message=f"{finding.message.replace(UNGUARDED, '')} ({why}: {listed})")
        findings.append(finding)
    return dataclasses.replace(result, findings=findings)


# ----------------------------------------------------------------------------- shared with samefile.py
KERNEL_DECORATOR = _KERNEL_DECORATOR
TRITON_AVAILABILITY = _TRITON_AVAILABILITY
device_check = _device_check
is_triton = _is_triton
# (and with optionalext.py)
import_guard = _import_guard
tests_triton = _tests_triton
availability = _availability


# ------------------------------------------------------------------ a Triton import its importers restate

def restating_site(results, reported: dict[int, int], importer: int, line: int, tree,
                   importers: set) -> Optional[int]:
    """The file whose own finding already reports the failure an import site of a module with an
    unguarded `import triton` would add (NPU910), or None. `reported`: {file: line of its NPU910
    unguarded-import finding}; `importers`: the files that import the module. The site restates it
    when its importer is such a file (the importer fails to import first), or when the function
    holding a lazy import also imports such a file that imports the module itself (xformers'
    `merge_attentions_varargs` imports `vararg_kernel` beside `_triton.splitk_kernels`, which
    imports `vararg_kernel` at module level)."""
    if importer in reported:
        return importer
    if tree is None:
        return None
    from .modpaths import module_names, resolve_relative

    function = None
    for node in astcache.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.lineno <= line <= (node.end_lineno or node.lineno):
            if function is None or node.lineno > function.lineno:
                function = node
    if function is None:
        return None
    by_name: dict[str, int] = {}
    for k in reported:
        for name in module_names(results[k].relpath):
            by_name.setdefault(name, k)
        by_name.setdefault("rel:" + results[k].relpath[:-3], k)
    relpath = results[importer].relpath
    for node in ast.walk(function):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = resolve_relative(relpath, node.level, node.module or "")
                keys = ["rel:" + base, *("rel:" + f"{base}/{a.name}" for a in node.names)]
            else:
                keys = [node.module or "", *(f"{node.module}.{a.name}" for a in node.names)]
        elif isinstance(node, ast.Import):
            keys = [a.name for a in node.names]
        else:
            continue
        for key in keys:
            k = by_name.get(key)
            if k is not None and k != importer and k in importers and node.lineno != line:
                return k
    return None


# public names for tritonmods20.py (one reading of a kernel decorator and of a kernel module)
KERNEL_DEF = _KERNEL_DEF
KERNEL_DECORATOR = _KERNEL_DECORATOR
KernelModule = _Module
kernels_on_cuda = _kernels_on_cuda
