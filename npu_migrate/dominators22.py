"""Guards that dominate later code, and Triton-availability guards read the same way everywhere
(issue #16, round-22 audits BK#26, BJ#1, BI#15, BI#33, BJ#20, BK#40).

Per file (`review`, run.py after fp8shapes21.py):

* **A constructor that raises where a package is missing** (BK#26). A module-level class whose
  `__init__` says, at its top level, `if not FLAG: raise ...` (no `return` before it), `FLAG` a
  module-level binding probing a package an NPU host never has (rules/sweep.toml `[availability]
  never_on_npu`: `FLAG = RequirementCache("transformer_engine>=0.11")`, `module_available("pkg")`,
  `find_spec("pkg") is not None`, or a name `_PKG_AVAILABLE`) builds no instance there. A lazy import
  of that package in another method of the class (not a `staticmethod`/`classmethod`, which run
  without an instance), or in a private module function (`_convert_layers`) every reference of
  the module to which lies in such methods (or itself), is never reached on an NPU host: a named
  scope (probes15.GATED) naming the constructor's guard. An import of another package, a public
  function, a static method, or a guard after a `return` stays reported.
* **The untaken arm of a conditional expression** (BJ#1). `X if current_platform.is_cuda_alike() else
  Y`: testscopes' npu_truth reads the test on an NPU host (False here), so a report-only place in
  `X` is not reached there. When `Y` is portable the place is a named scope (flags16.BRANCH naming
  the test). When `Y` calls another vendor's API (`torch.xpu.XPUGraph()`, `torch.mps`, `torch.hpu`,
  `intel_extension_for_pytorch`), which fails on an NPU host, the finding moves to `Y` and says so
  (same code and severity, naming the CUDA arm it replaced): that was a silent miss before.
* **A torch reference in a module-level Triton-availability block** (BI#15). guards15 made the
  block's NPU910 info (`if has_triton(): ... else: <stubs>`); fp8shapes21 folds the FP8 of its
  Triton ops but keeps an FP8 place of a block function that launches no kernel. Where the `else:`
  binds the same name (a stub that raises), that function exists only where the kernels do: an FP8
  place in it, handed as an argument to a call (`to_mx(x, torch.float8_e4m3fn, ...)`), folds into
  the NPU910 ("verify them there"), whose message names the function. A scaled matmul, a cast of
  the function's own (`x.to(torch.float8_e4m3fn)`), or a function the `else:` does not rebind
  stays its own NPU913.
* **The tuning helper of a guarded kernel builder** (BI#33). fp8shapes21 makes the NPU910 of a
  builder (`if not has_triton(): return <unavailable>`) info when every Triton place comes after
  its guard or after a caller's `if not impls.available: raise`. `through_callers` (called from
  fp8shapes21) also accepts a place in a module function every reference of the module to which
  lies after such a check (`tune_bsr_dense_addmm`, called from `bsr_dense_addmm` after `raise
  AssertionError("unsupported without triton")`); this pass then names that helper in the
  message: called directly where Triton is missing, its lazy `import triton` fails.

Whole run:

* **A flag-guarded import whose readers are called only under the same flag** (BJ#20). flagreads20
  leaves `if ENABLE_JIT_DEEPGEMM: import deep_gemm` as info asking to review the callers of the
  functions reading its names. `callers_gated` (from flagcalls19.review) answers that where every
  reference of the module to each such function lies in a block flagcalls19 finds an NPU host
  does not run (`if _ENABLE_MM and ENABLE_JIT_DEEPGEMM and ...:`) or in the function itself, and no
  other file of the run names it: the import is a named scope naming those calls. A reference
  outside such a block, a function another file names, a value handed on: the info stays.
* **Triton-Ascend projects: TMA descriptors behind a probe** (BK#40). platforms.triton_on_npu keeps
  the NPU910 error of a file holding what Triton-Ascend does not compile. `probed_descriptors`
  answers for TMA descriptors whose only import is `from triton.tools.tensor_descriptor import
  TensorDescriptor` in a module-level `try` whose handler binds a flag (a probe: the module imports
  either way): the file's kernels get the project's info "verify" note, which names the probe and
  its first use. PTX, libdevice, an unprobed descriptor import stay errors.
"""

from __future__ import annotations

import ast
import dataclasses
import re
from typing import Callable, Optional

from . import astcache
from .findings import Finding

_FUNCTIONS = (ast.FunctionDef, ast.AsyncFunctionDef)
_PROBES = frozenset({"RequirementCache", "module_available", "package_available", "find_spec",
                     "_module_available", "_package_available", "is_package_available"})
_FLAG_NAME = re.compile(r"^_*(?:HAS_|IS_)?([A-Z0-9_]+?)_(?:AVAILABLE|INSTALLED)$")
_OTHER_VENDOR = re.compile(r"^(torch\.(xpu|mps|hpu)\.|intel_extension_for_pytorch\.|ipex\.|habana_frameworks\.)")
_SCALED_MM = re.compile(r"_scaled_(grouped_)?mm")
_BUILDER_NOTE = re.compile(r"guarded by the Triton-availability test at the top of `(\w+)` \(line (\d+):")
HELPER = ("with the lazy Triton import of `{name}` (line {line}), a helper this module calls only after that "
          "check ({calls}): called directly where Triton is missing, it fails with ImportError")
REFERENCE = ("handed to `{callee}` by `{name}` (line {line}), a torch reference defined only in this Triton-availability "
             "block (its `else:` binds a stub in its place): it runs only where these kernels run; verify it "
             "with them")


def _open(finding: Finding) -> bool:
    from .moot import is_moot

    return not finding.fixable and finding.cell is None and finding.severity != "info" and not is_moot(finding)


def _segment(text: str, node: ast.AST, limit: int = 80) -> str:
    shown = " ".join((ast.get_source_segment(text, node) or ast.unparse(node)).split())
    return shown if len(shown) <= limit else shown[:limit - 3] + "..."


# ----------------------------------------------------------------------------- per file
def review(findings: list[Finding], text: str) -> list[Finding]:
    """The file's findings read against the guards of this module's docstring (per-file shapes)."""
    if not findings or not any(_open(f) or f.code == "NPU910" for f in findings):
        return findings
    constructor = "__init__" in text and "raise" in text
    conditional = " else " in text and " if " in text
    reference = "NPU913" in {f.code for f in findings} and "else:" in text
    helper = any(f.code == "NPU910" and _BUILDER_NOTE.search(f.message) for f in findings)
    if not (constructor or conditional or reference or helper):
        return findings
    tree = astcache.parse(text.encode("utf-8", "surrogatepass"))
    if tree is None:
        return findings
    try:
        if constructor and any(_open(f) for f in findings):
            findings = _constructor_guard(findings, tree, text)
        if conditional and any(_open(f) for f in findings):
            findings = _conditional_arms(findings, tree, text)
        if reference and any(_open(f) for f in findings):
            findings = _reference_fp8(findings, tree)
        if helper:
            findings = _name_helper(findings, tree)
    except RecursionError:
        pass
    return findings


# --- BK#26
def _probed_package(value: ast.AST) -> Optional[str]:
    """The package a module-level probe looks up: `RequirementCache("pkg>=1")`, `find_spec("pkg") is
    not None`, `module_available("pkg.sub")`."""
    if isinstance(value, ast.Compare) and len(value.ops) == 1 and isinstance(value.ops[0], ast.IsNot):
        value = value.left
    if isinstance(value, ast.Call) and value.args and isinstance(value.args[0], ast.Constant) \
            and isinstance(value.args[0].value, str):
        called = (astcache.dotted(value.func, strict=False) or "").rsplit(".", 1)[-1]
        if called in _PROBES:
            found = re.match(r"[A-Za-z_][\w.-]*", value.args[0].value.strip())
            return found.group(0).split(".")[0].replace("-", "_") if found else None
    return None


def _flags(tree: ast.Module) -> dict[str, str]:
    """{module-level name: the package it probes}."""
    out: dict[str, str] = {}
    for stmt in tree.body:
        if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name):
            package = _probed_package(stmt.value)
            if package:
                out[stmt.targets[0].id] = package
    return out


def _guard_package(test: ast.AST, flags: dict[str, str]) -> Optional[str]:
    if not (isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not) and isinstance(test.operand, ast.Name)):
        return None
    name = test.operand.id
    if name in flags:
        return flags[name]
    match = _FLAG_NAME.match(name)
    return match.group(1).lower() if match else None


def _imported(node: ast.AST) -> list[str]:
    if isinstance(node, ast.Import):
        return [a.name for a in node.names]
    if isinstance(node, ast.ImportFrom) and not node.level and node.module:
        return [node.module]
    return []


def _static(function: ast.AST) -> bool:
    return any((astcache.dotted(d, strict=False) or "") in ("staticmethod", "classmethod")
               for d in function.decorator_list)


def _constructor_guards(tree: ast.Module, text: str) -> list[tuple[ast.ClassDef, ast.If, str, str]]:
    """(class, guard, package, shown guard) of module-level classes whose `__init__` raises first
    where a package an NPU host never has is missing."""
    from .probes15 import never_on_npu

    flags = _flags(tree)
    out = []
    for cls in tree.body:
        if not isinstance(cls, ast.ClassDef):
            continue
        init = next((f for f in cls.body if isinstance(f, _FUNCTIONS) and f.name == "__init__"), None)
        if init is None:
            continue
        for stmt in init.body:
            if isinstance(stmt, ast.If) and not stmt.orelse and len(stmt.body) == 1 \
                    and isinstance(stmt.body[0], ast.Raise):
                package = _guard_package(stmt.test, flags)
                if package and package in never_on_npu():
                    exc = stmt.body[0].exc
                    shown = _segment(text, exc.func if isinstance(exc, ast.Call) else exc, 50) if exc else ""
                    out.append((cls, stmt, package, f"if {_segment(text, stmt.test)}: raise"
                                + (f" {shown}(...)" if isinstance(exc, ast.Call) else f" {shown}" if exc else "")))
                    break
            if any(isinstance(n, ast.Return) for n in ast.walk(stmt)):
                break
    return out


def _dominated_units(tree: ast.Module, cls: ast.ClassDef) -> dict[int, str]:
    """{id(function): shown name} of the class's instance methods but `__init__`, and of the private
    module functions referenced only there (or in themselves, or in each other)."""
    units: dict[int, tuple[ast.AST, str]] = {
        id(f): (f, f"`{cls.name}.{f.name}` never runs on an instance there") for f in cls.body
        if isinstance(f, _FUNCTIONS) and f.name != "__init__" and not _static(f)}
    private = {f.name: f for f in tree.body if isinstance(f, _FUNCTIONS) and f.name.startswith("_")
               and not f.name.startswith("__")}
    changed = True
    while changed:
        changed = False
        for name, function in private.items():
            if id(function) in units:
                continue
            refs = [n for n in astcache.nodes(tree, ast.Name) if n.id == name]
            if refs and all(_within(n, function) or any(_within(n, u) for u, _s in units.values()) for n in refs) \
                    and any(not _within(n, function) for n in refs):
                units[id(function)] = (function, f"`{name}`, called only from its methods, never runs there")
                changed = True
    return {k: v[1] for k, v in units.items()}


def _within(node: ast.AST, unit: ast.AST) -> bool:
    return unit.body[0].lineno <= node.lineno <= (unit.end_lineno or unit.lineno)


def _constructor_guard(findings: list[Finding], tree: ast.Module, text: str) -> list[Finding]:
    guards = _constructor_guards(tree, text)
    if not guards:
        return findings
    from .findings import lower_pieces as lower
    from .probes15 import GATED

    imports = [n for n in astcache.walk(tree) if isinstance(n, (ast.Import, ast.ImportFrom))]
    plans = []
    for cls, guard, package, shown in guards:
        units = _dominated_units(tree, cls)
        functions = [n for n in astcache.walk(tree) if id(n) in units]
        plans.append((cls, guard, package, shown, units, functions))

    def reason_of(line: int) -> Optional[str]:
        statement = next((n for n in imports if n.lineno <= line <= (n.end_lineno or n.lineno)), None)
        if statement is None:
            return None
        for cls, guard, package, shown, units, functions in plans:
            if not all(m.split(".")[0] == package for m in _imported(statement) or ["?"]):
                continue
            unit = next((f for f in functions if _within(statement, f)), None)
            if unit is None:
                continue
            return (f"{GATED}: `{cls.name}.__init__` raises first where `{package}` is missing (line "
                    f"{guard.lineno}: `{shown}`), as on every NPU host (it has no NPU build), so "
                    f"{units[id(unit)]}")
        return None

    out, changed = [], False
    for finding in findings:
        pieces = lower(finding, reason_of) if _open(finding) else None
        changed = changed or pieces is not None
        out.extend([finding] if pieces is None else pieces)
    return sorted(out) if changed else findings


# --- BJ#1
def _span_holds(node: ast.AST, line: int, column: int) -> bool:
    start, end = (node.lineno, node.col_offset + 1), (node.end_lineno or node.lineno, (node.end_col_offset or 0) + 1)
    return start <= (line, column) < end


def _vendor_call(node: ast.AST) -> Optional[ast.AST]:
    for sub in ast.walk(node):
        if isinstance(sub, (ast.Call, ast.Attribute)):
            target = sub.func if isinstance(sub, ast.Call) else sub
            if _OTHER_VENDOR.match((astcache.dotted(target, strict=False) or "") + "."):
                return sub
    return None


def _conditional_arms(findings: list[Finding], tree: ast.Module, text: str) -> list[Finding]:
    from .findings import merge_per_file, split_merged
    from .flags16 import BRANCH
    from .testscopes import npu_truth

    arms = []
    for node in astcache.nodes(tree, ast.IfExp):
        truth = npu_truth(node.test)
        if truth is True or truth is False:
            arms.append((node, node.orelse if truth else node.body, node.body if truth else node.orelse, truth))
    if not arms:
        return findings
    out, changed = [], False
    for finding in findings:
        if not _open(finding):
            out.append(finding)
            continue
        kept, moved = [], []
        for piece in split_merged(finding):
            arm = next((a for a in arms if _span_holds(a[1], piece.line, piece.column)), None)
            if arm is None:
                kept.append(piece)
                continue
            node, untaken, taken, truth = arm
            which = "true" if untaken is node.body else "`else`"
            test = _segment(text, node.test)
            vendor = _vendor_call(taken)
            if vendor is None:
                moved.append(dataclasses.replace(
                    piece, severity="info", message=f"{piece.message} ({BRANCH}: the {which} arm of the "
                    f"conditional expression on `{test}` (line {node.lineno}), which is {truth} there)"))
                continue
            called = _segment(text, vendor)
            moved.append(dataclasses.replace(
                piece, line=vendor.lineno, column=vendor.col_offset + 1, source=called, also=(),
                message=(f"`{called}` is what an NPU host runs here: `{test}` is {truth} there, so the "
                         f"conditional expression at line {node.lineno} takes this arm, another vendor's API "
                         f"that fails on an NPU host; its CUDA arm (`{piece.source}`, line {piece.line}) is "
                         f"not reached there: give the NPU an arm of its own ({piece.message})")))
        if not moved:
            out.append(finding)
            continue
        changed = True
        out.extend(moved)
        if kept:
            out.extend(merge_per_file(kept))
    return sorted(out) if changed else findings


# --- BI#15
def _rebound_in_else(statement: ast.If) -> set[str]:
    names: set[str] = set()
    for stmt in statement.orelse:
        if isinstance(stmt, (*_FUNCTIONS, ast.ClassDef)):
            names.add(stmt.name)
        elif isinstance(stmt, ast.Assign):
            names.update(t.id for t in stmt.targets if isinstance(t, ast.Name))
    return names


def _launches(function: ast.AST) -> bool:
    return any(isinstance(n, ast.Call) and isinstance(n.func, ast.Subscript) for n in ast.walk(function))


def _handed_on(function: ast.AST, line: int, column: int) -> Optional[ast.Call]:
    """The call of another function (not a method of a value: `x.to(...)`) that takes the place as an
    argument."""
    for call in ast.walk(function):
        if not isinstance(call, ast.Call) or not isinstance(call.func, ast.Name):
            continue
        for arg in [*call.args, *(k.value for k in call.keywords)]:
            if _span_holds(arg, line, column):
                return call
    return None


def _reference_fp8(findings: list[Finding], tree: ast.Module) -> list[Finding]:
    from .folding import absorb, rebuilt
    from .tritonguards import tests_triton

    guards = {s.lineno: s for s in tree.body if isinstance(s, ast.If) and s.orelse and tests_triton(s.test)}
    if not guards:
        return findings
    gated = re.compile(r"Triton-availability test `[^`]*` \(line (\d+)\)")
    for target in [f for f in findings if f.code == "NPU910" and f.severity == "info" and f.cell is None]:
        match = gated.search(target.message)
        guard = guards.get(int(match.group(1))) if match else None
        if guard is None:
            continue
        rebound = _rebound_in_else(guard)
        functions = [s for s in guard.body if isinstance(s, _FUNCTIONS) and s.name in rebound]
        for finding in findings:
            if finding.code != "NPU913" or not _open(finding):
                continue
            places = [(finding.line, finding.column, finding.source), *finding.also]
            for place in places:
                line, column, source = place
                function = next((f for f in functions if f.lineno <= line <= (f.end_lineno or f.lineno)), None)
                if function is None or _launches(function) or _SCALED_MM.search(source or "") or any(
                        _SCALED_MM.search(astcache.dotted(n.func, strict=False) or "")
                        for n in ast.walk(function) if isinstance(n, ast.Call)):
                    continue
                call = _handed_on(function, line, column)
                if call is None:
                    continue
                rest = [p for p in places if p != place]
                name_them = REFERENCE.format(callee=call.func.id, name=function.name, line=function.lineno)
                folded = absorb(target, [rebuilt(finding, [place])], name_them)
                out = [folded if f is target else (rebuilt(f, rest) if f is finding else f)
                       for f in findings if not (f is finding and not rest)]
                return _reference_fp8(sorted(out), tree)
    return findings


# --- BI#33
def through_callers(tree: ast.Module, builder: ast.AST, line: int, after_check: Callable[[int], bool]) -> bool:
    """Whether `line` lies in a module function (not the builder) every reference of the module to
    which (but in itself) is a place `after_check` accepts: a helper the module calls only once a
    caller's availability check passed (fp8shapes21._builder_guard's extension)."""
    return _helper_calls(tree, builder, line, after_check) is not None


def _helper_calls(tree: ast.Module, builder: ast.AST, line: int,
                  after_check: Callable[[int], bool]) -> Optional[tuple[ast.AST, list[int]]]:
    holder = next((f for f in tree.body if isinstance(f, _FUNCTIONS) and f is not builder
                   and f.lineno <= line <= (f.end_lineno or f.lineno)), None)
    if holder is None:
        return None
    refs = [n for n in astcache.nodes(tree, ast.Name) if n.id == holder.name and not _within(n, holder)]
    if not refs or not all(after_check(n.lineno) for n in refs):
        return None
    return holder, sorted({n.lineno for n in refs})


def _name_helper(findings: list[Finding], tree: ast.Module) -> list[Finding]:
    """Name in the builder's NPU910 info a place of a helper `through_callers` accepted."""
    functions = {f.name: f for f in tree.body if isinstance(f, _FUNCTIONS)}
    out = []
    for finding in findings:
        match = _BUILDER_NOTE.search(finding.message) if finding.code == "NPU910" else None
        builder = functions.get(match.group(1)) if match else None
        if builder is None or "a helper this module calls only after that check" in finding.message:
            out.append(finding)
            continue
        notes = []
        for line, _c, _s in [(finding.line, finding.column, finding.source), *finding.also]:
            if builder.lineno <= line <= (builder.end_lineno or builder.lineno):
                continue
            holder = next((f for f in functions.values() if f.lineno <= line <= (f.end_lineno or f.lineno)), None)
            if holder is None or any(f"`{holder.name}`" in n for n in notes) or any(
                    isinstance(st, ast.If) and st.body and isinstance(st.body[-1], (ast.Raise, ast.Return))
                    and (st.end_lineno or st.lineno) < line for st in holder.body):
                continue  # (a place after the holder's own check is fp8shapes21's: no helper to name)
            refs = sorted({n.lineno for n in astcache.nodes(tree, ast.Name)
                           if n.id == holder.name and not _within(n, holder)})
            if refs:
                calls = "line" + ("s " if len(refs) > 1 else " ") + ", ".join(map(str, refs))
                notes.append(HELPER.format(name=holder.name, line=line, calls=calls))
        if notes:
            from .folding import ALSO

            also = ALSO.search(finding.message)
            finding = dataclasses.replace(finding, message=f"{ALSO.sub('', finding.message)} ({'; '.join(notes)})"
                                          f"{also.group(0) if also else ''}")
        out.append(finding)
    return out


# ----------------------------------------------------------------------------- whole run
def callers_gated(tree: ast.Module, reading: list[tuple[str, int]], blocks: list[tuple[int, int, str]],
                  named_elsewhere: Callable[[str], bool]) -> Optional[str]:
    """BJ#20: where every function of `reading` (flagreads20.functions_reading: qualified names) is
    a module-level function every reference of the module to which lies in one of `blocks`
    (flagcalls19.blocks: code an NPU host does not run) or in itself, and no other file of the run
    names it: the text naming those calls and their block (for a named scope); else None."""
    functions = {f.name: f for f in tree.body if isinstance(f, _FUNCTIONS)}
    shown = []
    for name in dict.fromkeys(n for n, _line in reading):
        function = functions.get(name)
        if function is None or named_elsewhere(name):
            return None
        refs = [n for n in astcache.nodes(tree, ast.Name) if n.id == name and not _within(n, function)]
        if not refs:
            return None
        held = []
        for ref in refs:
            block = next((b for b in blocks if b[0] <= ref.lineno <= b[1]), None)
            if block is None:
                return None
            held.append((ref.lineno, block))
        lines = sorted({n for n, _b in held})
        test = re.search(r"`([^`]+)`", held[0][1][2])  # (the block's test, not again where its flag is bound)
        shown.append(f"`{name}` (line{'s' if len(lines) > 1 else ''} {', '.join(map(str, lines))}"
                     + (f": under `{test.group(1)}`)" if test else ")"))
    if not shown:
        return None
    return ("its names are read only in functions this module calls only in blocks an NPU host does not run: "
            + "; ".join(shown))


def probed_descriptors(data: bytes, markers: tuple) -> Optional[str]:
    """BK#40: where every marker of `markers` (platforms._NOT_PORTABLE) the file holds is the name
    `TensorDescriptor` (or the module `tensor_descriptor`), imported only in a module-level `try`
    whose handler binds a name and does not raise (a probe): the text naming the probe and the
    descriptors' first use; else None."""
    held = [m for m in markers if m in data]
    if not held or any(m not in (b"TensorDescriptor",) for m in held):
        return None
    tree = astcache.parse(data)
    if tree is None:
        return None
    probe = None
    for node in astcache.walk(tree):
        if isinstance(node, (ast.Import, ast.ImportFrom)) and any(
                "tensor_descriptor" in m or "TensorDescriptor" in m
                for m in [*_imported(node), *(a.name for a in node.names)]):
            parent = next((s for s in tree.body if isinstance(s, ast.Try) and node in s.body), None)
            if parent is None or probe is not None:
                return None
            handlers = parent.handlers
            if not handlers or any(isinstance(n, ast.Raise) for h in handlers for n in ast.walk(h)):
                return None
            flag = next((t.id for h in handlers for s in h.body if isinstance(s, ast.Assign)
                         for t in s.targets if isinstance(t, ast.Name)), None)
            if flag is None:
                return None
            probe = (parent, flag)
    if probe is None:
        return None
    uses = sorted(n.lineno for n in astcache.nodes(tree, ast.Name) if n.id == "TensorDescriptor"
                  and isinstance(n.ctx, ast.Load) and not (probe[0].lineno <= n.lineno <= (probe[0].end_lineno or 0)))
    first = f", first used at line {uses[0]}" if uses else ""
    return (f"its TMA descriptors (`TensorDescriptor`{first}) are imported in a `try` (line {probe[0].lineno}) "
            f"that sets `{probe[1]}` where Triton lacks them, so the module imports either way: verify that "
            f"the descriptor path stays off there")
