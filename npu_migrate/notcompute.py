"""Findings about code that is not device compute (issue #16, round 9): seen here, once a file's
findings are known, and lowered with the reason in the message.

* **An annotation never evaluated.** `def groups(self) -> tuple[ExternalStream, ExternalStream]:`
  in a module with `from __future__ import annotations` (or an annotation written as a string):
  the annotation is text for type checkers, Python never evaluates it, so it touches no CUDA API
  on any host. A report-only finding every place of which lies in such annotations is lowered to
  info with ANNOTATION (a named skipped scope, moot.py); the import of the name is reported where
  it is (a finding of its own), and a use of the class outside annotations keeps the finding.
* **A branch that only sets a test tolerance.** `if device.type == "cuda" and ...: atol = 1e-2`
  (the CUDA kernel is less exact): a kept CUDA check (NPU108/NPU110) whose `if` has no `else`
  and whose body only assigns tolerance names (`atol`, `rtol`, `tol`, `*_tol`, `tolerance`) asks
  for no port work: on an NPU host the branch is not taken and the default tolerance applies.
  Lowered with the reason "in a branch an NPU host does not take" (a named scope). A branch that
  does anything else (skips, calls a kernel) keeps its finding.
* **A DataParallel built in a test and never called.** `distributed = torch.nn.DataParallel(model)`
  in a test function (of a test file), then only passed on (`extract_model_from_parallel(
  distributed)`, `torch.compile(distributed)`), with neither it nor what is derived from it called:
  no forward runs through DataParallel, the test checks wrapping and unwrapping. The NPU901 error
  is lowered to information with DP_UNCALLED, which moot.py names as a scope that runs as written
  (AS_WRITTEN: the constructor runs there, nothing is ported; round-10 audit).
  A DataParallel that is called (`dp(x)`, `dp.forward(x)`), or built outside a test, stays an error.
* **FP8 in CPU tests.** An FP8 error (NPU913) every place of which is in a CPU test of a test file
  (skipped unless the op's CPU kernel is built: `"CPU" not in torch._C._dispatch_dump(op)`, or
  `device = "cpu"`; its source names no CUDA, GPU or accelerator) or in a helper only such tests
  call: FP8 casts of CPU tensors run on an NPU host's CPU as written (CPU_TEST, moot.AS_WRITTEN).
  An FP8 place in any other test keeps the error.
* **The Triton anchor.** A file's NPU910 anchors on its first `@triton.jit` kernel rather than on a
  lazy `import triton` inside a function that comes first (a tuning helper).
"""

from __future__ import annotations

import ast
import dataclasses
import re
from typing import Optional

from . import astcache
from .findings import Finding

ANNOTATION = "a type annotation, never evaluated"
TOLERANCE = "in a branch an NPU host does not take"  # (moot.PHRASES)
DP_UNCALLED = "information: a DataParallel built in a test and never called"

_TEST_FILE = re.compile(r"(^|/)(tests?/|test_[^/]*\.py$|[^/]*_test\.py$)")
_TOLERANCE_NAME = re.compile(r"(?i)^(a|r)?tol(erance)?s?$|^\w*_(a|r)?tol(erance)?s?$|^(atol|rtol)_\w+$")
_FUNCTIONS = (ast.FunctionDef, ast.AsyncFunctionDef)


def _parse(text: str) -> Optional[ast.Module]:
    body = text.encode("utf-8", "surrogatepass")
    return astcache.parse(body[3:] if body.startswith(b"\xef\xbb\xbf") else body)


def review(findings: list[Finding], text: str, relpath: str = "") -> list[Finding]:
    """The file's findings with those about code that is not device compute lowered (module doc)."""
    candidates = [f for f in findings if not f.fixable and f.cell is None and f.severity != "info"]
    dp = [f for f in candidates if f.code == "NPU901"]
    gates = [f for f in findings if not f.fixable and f.cell is None and f.code in ("NPU108", "NPU110")
             and TOLERANCE not in f.message]
    if not candidates and not gates:
        return findings
    findings = _kernel_anchor(findings, text)
    if _TEST_FILE.search(relpath) and any(f.code == "NPU913" for f in candidates):
        findings = _fp8_in_cpu_tests(findings, text)
    candidates = [f for f in findings if not f.fixable and f.cell is None and f.severity != "info"]
    tree = _parse(text)
    if tree is None:
        return findings
    lowered: dict[int, Finding] = {}
    spans = _annotation_spans(tree)
    if spans:
        for finding in candidates:
            places = [(finding.line, finding.column), *((line, column) for line, column, _s in finding.also)]
            if all(any(start <= place < end for start, end in spans) for place in places):
                lowered[id(finding)] = dataclasses.replace(
                    finding, severity="info",
                    message=f"{finding.message} ({ANNOTATION}: `from __future__ import annotations` "
                            "or a string; the name's import is reported where it is)")
    if gates:
        for finding in gates:
            names = _tolerance_branch(tree, finding.line)
            if names:
                shown = ", ".join(f"`{n}`" for n in names)
                lowered[id(finding)] = dataclasses.replace(
                    finding, severity="info",
                    message=f"{finding.message} ({TOLERANCE}: it only sets the test tolerance {shown} for CUDA; "
                            "the default applies on an NPU host)")
    if dp and _TEST_FILE.search(relpath):
        for finding in dp:
            if id(finding) not in lowered and _uncalled_data_parallel(tree, finding.line):
                lowered[id(finding)] = dataclasses.replace(
                    finding, severity="info",
                    message=f"{finding.message} ({DP_UNCALLED}: the test wraps and unwraps the model, "
                            "no forward runs through it)")
    if not lowered:
        return findings
    return [lowered.get(id(f), f) for f in findings]


# ----------------------------------------------------------------------------- the Triton finding's anchor
_LAZY_IMPORT = re.compile(r"^\s+(import|from)\s+triton\b")
_JIT = re.compile(r"^\s*@\s*[\w.]*\b(jit|autotune|heuristics)\b")


def _kernel_anchor(findings: list[Finding], text: str) -> list[Finding]:
    """The file's Triton errors (NPU910, one per file once merged) anchored on its first kernel
    (`@triton.jit`) rather than on an import inside a function (a tuning helper's lazy `import
    triton`) that comes first in the file: the kernel is what the port is about. Merged here
    (findings.merge_per_file), so that the run's merge keeps that anchor."""
    triton = [f for f in findings if f.code == "NPU910" and not f.fixable and f.cell is None
              and f.severity == "error" and not f.also]
    if len(triton) < 2:
        return findings
    lines = text.splitlines()

    def line_of(finding: Finding) -> str:
        return lines[finding.line - 1] if 0 < finding.line <= len(lines) else ""

    first = min(triton)
    if not _LAZY_IMPORT.match(line_of(first)):
        return findings
    kernel = next((f for f in sorted(triton) if _JIT.match(line_of(f))), None)
    if kernel is None:
        return findings
    tree = _parse(text)
    if tree is None or not any(isinstance(n, _FUNCTIONS) and n.lineno < first.line <= (n.end_lineno or n.lineno)
                               for n in astcache.walk(tree)):
        return findings  # (an import in a module-level `try`: the module's own dependency)
    from .findings import merge_per_file

    merged = merge_per_file(triton, secondary=lambda f: f is not kernel)
    return [f for f in findings if f not in triton] + merged


# ----------------------------------------------------------------------------- FP8 in CPU tests
CPU_TEST = "FP8 on CPU tensors in a CPU test"  # (moot.AS_WRITTEN)
_CPU_KERNEL_SKIP = re.compile(r"""["']CPU["']\s+not\s+in\s+torch\._C\._dispatch_dump\(""")
_CUDA_WORD = re.compile(r"(?i)cuda|gpu|\.to\(\s*device|accelerator")


def _cpu_tests(tree: ast.Module, text: str) -> list[tuple[int, int, str, str]]:
    """(first line, last line, name, why) of the file's CPU tests: a test function (module level
    or a `Test...` class's method) skipped unless a CPU kernel is registered (`"CPU" not in
    torch._C._dispatch_dump(op)`), or one that sets `device = "cpu"`, and whose source (its
    decorators included) names no CUDA, GPU or accelerator and moves nothing to another device."""
    functions = [s for s in tree.body if isinstance(s, _FUNCTIONS)]
    for cls in tree.body:
        if isinstance(cls, ast.ClassDef):
            functions += [s for s in cls.body if isinstance(s, _FUNCTIONS)]
    out = []
    for fn in functions:
        if not fn.name.startswith("test"):
            continue
        first = min([fn.lineno, *(d.lineno for d in fn.decorator_list)])
        source = "\n".join(text.splitlines()[first - 1:fn.end_lineno or fn.lineno])
        if _CUDA_WORD.search(source):
            continue
        decorators = "\n".join(ast.get_source_segment(text, d) or "" for d in fn.decorator_list)
        if _CPU_KERNEL_SKIP.search(decorators):
            why = "skipped unless the op's CPU kernel is built"
        elif any(isinstance(n, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "device" for t in n.targets)
                 and isinstance(n.value, ast.Constant) and n.value.value == "cpu" for n in ast.walk(fn)) and not any(
                isinstance(n, ast.Name) and n.id == "device" and isinstance(n.ctx, ast.Store)
                and not (isinstance(p := _assign_value(fn, n), ast.Constant) and p.value == "cpu")
                for n in ast.walk(fn)):
            why = 'its device is "cpu"'
        else:
            continue
        out.append((first, fn.end_lineno or fn.lineno, fn.name, why))
    return out


def _assign_value(fn: ast.AST, target: ast.Name) -> Optional[ast.AST]:
    for node in ast.walk(fn):
        if isinstance(node, ast.Assign) and target in node.targets:
            return node.value
    return None


def _helpers_of(tree: ast.Module, text: str, scopes: list[tuple[int, int, str, str]]) -> list[tuple[int, int, str, str]]:
    """The file's own helper functions (not tests) every reference of which sits in a CPU test
    (`self._ref(...)`, `_helper(...)`): they run only there."""
    functions = [s for s in tree.body if isinstance(s, _FUNCTIONS)]
    for cls in tree.body:
        if isinstance(cls, ast.ClassDef):
            functions += [s for s in cls.body if isinstance(s, _FUNCTIONS)]
    names = [fn.name for fn in functions]
    out = []
    for fn in functions:
        if fn.name.startswith("test") or names.count(fn.name) > 1 or fn.decorator_list:
            continue
        uses = [n.lineno for n in astcache.walk(tree)
                if (isinstance(n, ast.Name) and n.id == fn.name) or (isinstance(n, ast.Attribute) and n.attr == fn.name)]
        if uses and all(any(a <= line <= b for a, b, _n, _w in scopes) for line in uses):
            users = sorted({name for line in uses for a, b, name, _w in scopes if a <= line <= b})
            out.append((fn.lineno, fn.end_lineno or fn.lineno, fn.name, f"called only by the CPU tests {', '.join(users[:3])}"))
    return out


def _fp8_in_cpu_tests(findings: list[Finding], text: str) -> list[Finding]:
    """FP8 errors (NPU913) every place of which is in a CPU test (or a helper only CPU tests
    call): FP8 casts of CPU tensors, which run on an NPU host's CPU as on any other; lowered
    with CPU_TEST (a named scope, moot.AS_WRITTEN)."""
    tree = _parse(text)
    if tree is None:
        return findings
    scopes = _cpu_tests(tree, text)
    if not scopes:
        return findings
    scopes += _helpers_of(tree, text, scopes)
    out = []
    for finding in findings:
        if finding.code == "NPU913" and not finding.fixable and finding.cell is None and finding.severity != "info":
            lines = [finding.line, *(line for line, _c, _s in finding.also)]
            holders = [next((s for s in scopes if s[0] <= line <= s[1]), None) for line in lines]
            if all(holders):
                first = holders[0]
                finding = dataclasses.replace(
                    finding, severity="info",
                    message=f"{finding.message} ({CPU_TEST}: `{first[2]}` {first[3]}; "
                            "FP8 casts on CPU run on an NPU host as written)")
        out.append(finding)
    return out


# ----------------------------------------------------------------------------- annotations
def _annotation_spans(tree: ast.Module) -> list[tuple[tuple[int, int], tuple[int, int]]]:
    """((line, column), (end line, end column)) of the annotations Python never evaluates: every
    annotation of a module with `from __future__ import annotations`, a string annotation in any."""
    future = any(isinstance(s, ast.ImportFrom) and s.module == "__future__"
                 and any(a.name == "annotations" for a in s.names) for s in tree.body)
    notes = []
    for node in astcache.walk(tree):
        if isinstance(node, ast.AnnAssign):
            notes.append(node.annotation)
        elif isinstance(node, ast.arg) and node.annotation is not None:
            notes.append(node.annotation)
        elif isinstance(node, _FUNCTIONS) and node.returns is not None:
            notes.append(node.returns)
    if not future:
        notes = [n for n in notes if isinstance(n, ast.Constant) and isinstance(n.value, str)]
    return [((n.lineno, n.col_offset + 1), (n.end_lineno or n.lineno, (n.end_col_offset or 0) + 1)) for n in notes]


# ----------------------------------------------------------------------------- tolerance branches
def _tolerance_branch(tree: ast.Module, line: int) -> list[str]:
    """The tolerance names assigned when the `if` whose test holds `line` (no `else`) only assigns
    tolerances; [] otherwise."""
    for node in astcache.walk(tree):
        if not isinstance(node, ast.If) or not (node.test.lineno <= line <= (node.test.end_lineno or node.test.lineno)):
            continue
        if node.orelse or not node.body:
            return []
        names = []
        for stmt in node.body:
            targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target] if isinstance(
                stmt, (ast.AnnAssign, ast.AugAssign)) else None
            if targets is None:
                if isinstance(stmt, ast.Pass):
                    continue
                return []
            for target in targets:
                items = target.elts if isinstance(target, ast.Tuple) else [target]
                for item in items:
                    if not (isinstance(item, ast.Name) and _TOLERANCE_NAME.match(item.id)):
                        return []
                    names.append(item.id)
            value = getattr(stmt, "value", None)
            if value is not None and any(isinstance(n, ast.Call) for n in ast.walk(value)):
                return []  # (a value computed by a call: not only a tolerance)
        return list(dict.fromkeys(names))
    return []


# ----------------------------------------------------------------------------- DataParallel never called
def _uncalled_data_parallel(tree: ast.Module, line: int) -> bool:
    """Whether the DataParallel built at `line` is assigned to a name inside a test function, and
    neither that name nor any name bound from an expression using it is ever called (`x(...)`,
    `x.forward(...)`) or returned or yielded in that function."""
    tests = [n for n in astcache.walk(tree) if isinstance(n, _FUNCTIONS) and n.name.startswith("test")
             and n.lineno <= line <= (n.end_lineno or n.lineno)]
    if not tests:
        return False
    function = min(tests, key=lambda n: (n.end_lineno or n.lineno) - n.lineno)
    built = None
    for node in ast.walk(function):
        if (isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name)
                and isinstance(node.value, ast.Call) and node.value.lineno == line
                and (astcache.dotted(node.value.func) or "").rsplit(".", 1)[-1] == "DataParallel"):
            built = node.targets[0].id
    if built is None:
        return False
    names = {built}
    changed = True
    while changed:  # names bound from expressions that use one (`compiled = torch.compile(dp)`)
        changed = False
        for node in ast.walk(function):
            if isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign, ast.NamedExpr)) and node.value is not None:
                used = {n.id for n in ast.walk(node.value) if isinstance(n, ast.Name)}
                if used & names:
                    targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                    for target in targets:
                        for n in ast.walk(target):
                            if isinstance(n, ast.Name) and n.id not in names:
                                names.add(n.id)
                                changed = True
                        if not isinstance(target, ast.Name):
                            return False  # (an attribute or subscript: kept somewhere else)
            elif isinstance(node, (ast.For, ast.AsyncFor, ast.With, ast.AsyncWith)):
                sources = [node.iter] if isinstance(node, (ast.For, ast.AsyncFor)) else [i.context_expr for i in node.items]
                if any(isinstance(n, ast.Name) and n.id in names for s in sources for n in ast.walk(s)):
                    return False
    for node in ast.walk(function):
        if isinstance(node, ast.Call):
            func = node.func
            while isinstance(func, ast.Attribute):
                if isinstance(func.value, ast.Name) and func.value.id in names and func.attr in (
                        "forward", "__call__", "module", "train_step", "generate"):
                    return False
                func = func.value
            if isinstance(node.func, ast.Name) and node.func.id in names:
                return False
        elif isinstance(node, (ast.Return, ast.Yield, ast.YieldFrom)) and node.value is not None:
            if any(isinstance(n, ast.Name) and n.id in names for n in ast.walk(node.value)):
                return False
    return True


# ----------------------------------------------------------------------------- FP8 dtypes only compared (sweep.py)
_ASKING = frozenset({"torch.finfo", "torch.iinfo", "finfo", "iinfo", "str", "repr", "print", "isinstance"})


def compared_only_parameters(tree: Optional[ast.AST]) -> dict[str, list[Optional[str]]]:
    """{function name: [the positional parameters' names, None for one used otherwise]} plus
    `"<name>:<kw>"` keys for keyword ones, of the module-level functions of the file whose
    parameter is only compared (`dtype is torch.bfloat16`, `dtype in (torch.float8_e4m3fn, ...)`),
    shown (an f-string, `str(dtype)`) or asked about (`torch.finfo(dtype)`): an FP8 dtype passed
    there is a key of an analytic model (a roofline's peak-TOPS table), no tensor is cast to it.
    A parameter rebound, passed to any other call, returned, stored or used as a keyword value is
    used otherwise."""
    out: dict[str, list[Optional[str]]] = {}
    if tree is None:
        return out
    for fn in getattr(tree, "body", ()):
        if not isinstance(fn, _FUNCTIONS):
            continue
        params = [a.arg for a in [*fn.args.posonlyargs, *fn.args.args]]
        kwonly = [a.arg for a in fn.args.kwonlyargs]
        compared = {name for name in [*params, *kwonly] if _only_compared(fn, name)}
        if compared:
            out[fn.name] = [p if p in compared else None for p in params]
            out.update({f"{fn.name}:{p}": [p] for p in [*params, *kwonly] if p in compared})
    # a name defined twice (or rebound at module level) is not known
    names = [s.name for s in getattr(tree, "body", ()) if isinstance(s, (*_FUNCTIONS, ast.ClassDef))]
    for name in {n for n in names if names.count(n) > 1}:
        out.pop(name, None)
    return out


def _only_compared(fn: ast.AST, name: str) -> bool:
    parent: dict[int, ast.AST] = {}
    for node in ast.walk(fn):
        for child in ast.iter_child_nodes(node):
            parent[id(child)] = node
    used = False
    for node in ast.walk(fn):
        if isinstance(node, (ast.Lambda, *_FUNCTIONS)) and node is not fn:
            args = node.args
            if name in {a.arg for a in [*args.posonlyargs, *args.args, *args.kwonlyargs]}:
                return False  # (shadowed: not followed)
        if isinstance(node, (ast.Global, ast.Nonlocal)) and name in node.names:
            return False
        if not (isinstance(node, ast.Name) and node.id == name):
            continue
        if not isinstance(node.ctx, ast.Load):
            return False
        used = True
        up = parent.get(id(node))
        if isinstance(up, (ast.Tuple, ast.List, ast.Set)):
            up = parent.get(id(up))
            if not isinstance(up, ast.Compare):
                return False
        if isinstance(up, ast.Compare):
            continue
        if isinstance(up, ast.FormattedValue):
            continue
        if isinstance(up, ast.Call) and node in up.args and (astcache.dotted(up.func) or "") in _ASKING:
            continue
        return False
    return used
