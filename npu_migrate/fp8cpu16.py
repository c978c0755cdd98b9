"""FP8 that is no FP8 compute on an NPU device, and modules an NPU host stops before (issue #16, round 17).

The round-17 audits read these NPU913 errors as false:

* **A dtype getter** (AU#7). `Platform.fp8_dtype()` whose body (its docstring left out) is only
  `return torch.float8_e4m3fn`: the function hands a dtype object back, no tensor is made
  (`getter_reason`, asked by fp8data.FileData.reason).
* **A fresh CPU tensor cast to FP8** (AT#13). `torch.arange(8).reshape(4, 2).to(torch.float8_e4m3fn)`
  in a test file that sets no default device: the receiver is built from torch factories and
  constants only, with no `device=` and outside any `with torch.device(...)`, or is a local name
  assigned once from such an expression; the cast makes FP8 data on the CPU, which an NPU host's
  CPU holds as any other (`fresh_cpu_reason`).
* **A test-support module that names no device** (AV#3). `torchao/testing/pt2e/utils.py`, a
  fake-quant helper module under `testing/` (not a test file) whose text names no device at all (no
  device string, no `device` word, no `torch.cuda`, no `.cuda()`, no platform): its tensors are
  built on the CPU (`device_free_reason`).
* **A module an NPU host stops before** (AU#10). A module-level `assert current_platform.is_cuda(), "..."`
  (or `if not <predicate>: raise/sys.exit(...)`) on a predicate false on an NPU host
  (testscopes.false_on_npu): importing the module fails there with the module's own message, so
  every report-only finding after that statement is code an NPU host never runs: info with
  STOPPED (a named skipped scope, moot.py). The statement's own findings stay as they are.

Kept: FP8 on a device (`device="cuda"`, a device variable, a default device, a `with
torch.device(...)` block), `torch._scaled_mm`, a getter that computes anything, a module with no
such assert, an assert on a predicate an NPU host may pass.
"""

from __future__ import annotations

import ast
import dataclasses
import re
from typing import Callable, Optional

from . import astcache

_FUNCTIONS = (ast.FunctionDef, ast.AsyncFunctionDef)
# why findings after a module-level stop are moot (moot.PHRASES)
STOPPED = "after a module-level check an NPU host fails at import"
_FACTORIES = frozenset({"empty", "zeros", "ones", "full", "rand", "randn", "randint", "randperm", "arange",
                        "tensor", "as_tensor", "linspace", "eye"})
# a device anywhere in a file's text (fp8cpu's list, with the word `device` and platforms)
_ANY_DEVICE = re.compile(r"""["'](?:cuda|npu|xpu|hpu|mps|gpu|xla|musa)(?::\d+)?["']|\btorch\.cuda\b|\.(?:cuda|npu|xpu)\("""
                         r"""|\bis_cuda\b|set_default_device|_platform\b|\bplatform\.|\bis_(?:rocm|hip)\b|device|accelerator""")
# a test-support package (`torchao/testing/`): helpers for tests, not a test file itself (a test
# file's fixtures from elsewhere, a `model_runner`, may bring a device: fp8data keeps those)
_SUPPORT_PATH = re.compile(r"(^|/)testing/")
_TEST_PATH = re.compile(r"(^|/)tests?/|(^|/)test_[^/]*\.py$|_test\.py$")
Parent = Callable[[ast.AST], Optional[ast.AST]]


# ----------------------------------------------------------------------------- FP8 places (fp8data.FileData.reason)
def reason(relpath: str, text: str, node: ast.AST, parent: Parent, prefix: str) -> Optional[str]:
    """Why the FP8 place `node` is no FP8 compute (a reason starting with `prefix`), or None."""
    return (getter_reason(node, parent, prefix) or fresh_cpu_reason(relpath, text, node, parent, prefix)
            or device_free_reason(relpath, text, prefix))


def getter_reason(node: ast.AST, parent: Parent, prefix: str) -> Optional[str]:
    """`def fp8_dtype(cls): return torch.float8_e4m3fn` (a docstring aside, nothing else)."""
    holder = parent(node)
    if not isinstance(holder, ast.Return) or holder.value is not node:
        return None
    function = parent(holder)
    if not isinstance(function, _FUNCTIONS):
        return None
    body = [s for s in function.body if not (isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant)
                                             and isinstance(s.value.value, str))]
    if body != [holder]:
        return None
    return f"{prefix}a dtype getter, `{function.name}` only returns the dtype object; no tensor is made"


def fresh_cpu_reason(relpath: str, text: str, node: ast.AST, parent: Parent, prefix: str) -> Optional[str]:
    """`<torch factories, no device>.to(torch.float8_*)` in a test file with no default device."""
    if not _TEST_PATH.search(relpath) or "set_default_device" in text:
        return None
    call = parent(node)
    if not (isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute) and call.func.attr == "to"
            and call.args == [node] and not call.keywords):
        return None
    receiver = call.func.value
    function, current, counters = None, call, set()
    while current is not None:
        holder = parent(current)
        if isinstance(holder, (ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)) and function is None:
            counters |= _counters(holder)
        if isinstance(holder, (ast.With, ast.AsyncWith)) and any(
                "device" in (astcache.dotted(n) or "") for item in holder.items for n in ast.walk(item.context_expr)
                if isinstance(n, (ast.Name, ast.Attribute))):
            return None  # (`with torch.device(device):` sets the factories' device)
        if isinstance(holder, _FUNCTIONS) and function is None:
            function = holder
        current = holder
    if isinstance(receiver, ast.Name) and function is not None:
        values = [n.value for n in ast.walk(function) if isinstance(n, ast.Assign)
                  and any(isinstance(t, ast.Name) and t.id == receiver.id for t in n.targets)]
        stores = [n for n in ast.walk(function) if isinstance(n, ast.Name) and n.id == receiver.id
                  and isinstance(n.ctx, ast.Store)]
        args = {a.arg for a in ast.walk(function.args) if isinstance(a, ast.arg)}
        if len(values) != 1 or len(stores) != 1 or receiver.id in args:
            return None
        receiver = values[0]
    if not _fresh_cpu(receiver, frozenset(counters)):
        return None
    return f"{prefix}FP8 data on the CPU: a tensor built by torch factories with no device, cast to FP8"


def _counters(comprehension: ast.AST) -> set[str]:
    """The names a comprehension binds to integers: `for i in range(<constants>)` (round-31 audit
    FB#13: `{f"...shard_{i}.weight": torch.arange(i * 8, (i + 1) * 8).to(fp8) for i in range(2)}`)."""
    out: set[str] = set()
    for generator in comprehension.generators:
        source = generator.iter
        if isinstance(generator.target, ast.Name) and isinstance(source, ast.Call) \
                and isinstance(source.func, ast.Name) and source.func.id == "range" and not source.keywords \
                and all(isinstance(a, ast.Constant) and isinstance(a.value, int) for a in source.args):
            out.add(generator.target.id)
    return out


def _fresh_cpu(expr: ast.AST, counters: frozenset = frozenset()) -> bool:
    """An expression of constants, torch factories with no device and methods on them only (and
    the integer counters of an enclosing comprehension)."""
    factories = 0
    for node in ast.walk(expr):
        if isinstance(node, ast.Name) and node.id != "torch" and node.id not in counters:
            return False
        if isinstance(node, ast.keyword) and (node.arg is None or "device" in node.arg):
            return False
        if isinstance(node, ast.Call):
            name = astcache.dotted(node.func) or ""
            if name.startswith("torch."):
                if name.count(".") != 1 or name.rsplit(".", 1)[-1] not in _FACTORIES:
                    return False
                factories += 1
            elif isinstance(node.func, ast.Attribute):
                if node.func.attr in ("cuda", "npu", "xpu", "to", "pin_memory"):
                    return False
            else:
                return False
    return factories > 0


def device_free_reason(relpath: str, text: str, prefix: str) -> Optional[str]:
    """A test-support module (under `testing/`, not a test file) whose text names no device at all."""
    if not _SUPPORT_PATH.search(relpath) or _TEST_PATH.search(relpath) or _ANY_DEVICE.search(text):
        return None
    return (f"{prefix}FP8 data on the CPU: `{relpath.rsplit('/', 1)[-1]}`, a test-support module, names no "
            "device (no device string, `device` or CUDA call): its tensors are built on the CPU")


# ----------------------------------------------------------------------------- modules an NPU host stops before
_STOP = re.compile(r"^(?:assert\s|if\s+not\b)", re.M)


def review(findings: list, text: str) -> list:
    """Report-only findings after a module-level assert (or `if not <p>: raise/sys.exit`) on a
    predicate false on an NPU host: info with STOPPED (module doc)."""
    open_ = [f for f in findings if not f.fixable and f.cell is None and f.severity != "info"]
    if not open_ or not _STOP.search(text):
        return findings
    body = text.encode("utf-8", "surrogatepass")
    tree = astcache.parse(body[3:] if body.startswith(b"\xef\xbb\xbf") else body)
    if tree is None:
        return findings
    stop = _module_stop(tree)
    if stop is None:
        return findings
    line, end, shown = stop
    out = []
    for finding in findings:
        if finding in open_ and finding.line > end and all(p[0] > end for p in finding.also):
            finding = dataclasses.replace(
                finding, severity="info",
                message=f"{finding.message} ({STOPPED}: line {line}, `{shown}`, is false there)")
        out.append(finding)
    return out


def _module_stop(tree: ast.Module) -> Optional[tuple[int, int, str]]:
    """(line, end line, predicate) of the first module-level statement that stops an NPU host."""
    from .testscopes import false_on_npu

    for stmt in tree.body:
        if isinstance(stmt, ast.Assert):
            shown = ast.unparse(stmt.test)
            if false_on_npu(shown):
                return stmt.lineno, stmt.end_lineno or stmt.lineno, shown
        elif isinstance(stmt, ast.If) and not stmt.orelse and isinstance(stmt.test, ast.UnaryOp) \
                and isinstance(stmt.test.op, ast.Not) and stmt.body and _stops(stmt.body[-1]):
            shown = ast.unparse(stmt.test.operand)
            if false_on_npu(shown):
                return stmt.lineno, stmt.end_lineno or stmt.lineno, shown
    return None


def _stops(stmt: ast.AST) -> bool:
    if isinstance(stmt, ast.Raise):
        return True
    return (isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call)
            and (astcache.dotted(stmt.value.func) or "") in ("sys.exit", "exit", "quit", "os._exit"))


# ----------------------------------------------------------------------------- tests behind an imported skip marker
_DECORATED = re.compile(rb"^[ \t]*@(\w+)[ \t]*$", re.M)
_FROM_IMPORT = re.compile(rb"^from[ \t]+(\.?[\w.]+)[ \t]+import[ \t]+([\w, \t]+)$", re.M)
SKIPPED_TEST = "in a test that does not run on an NPU host"  # (moot.PHRASES)
SKIPPED_HELPER = "in a helper only tests an NPU host skips call"  # (moot.PHRASES: "in a helper ")


def review_imported_markers(results: list, paths: dict) -> list:
    """Report-only findings of a test file every place of which lies in a test decorated with a
    skip marker the file imports (`from utils import requires_mx`, where the run's utils.py binds
    `requires_mx = pytest.mark.skipif(not (current_platform.is_rocm() and ...), ...)`, a condition
    true on an NPU host), or in a helper of the file only such tests call: info, with the reason
    (a named skipped scope, moot.py). A whole-run pass: the marker is another file's fact."""
    from .modpaths import result_bytes

    def open_(f) -> bool:
        return not f.fixable and f.cell is None and f.severity != "info"

    candidates = [i for i, r in enumerate(results) if r.relpath.endswith(".py") and _TEST_PATH.search(r.relpath)
                  and any(map(open_, r.findings))]
    if not candidates:
        return results
    by_path = {r.relpath: i for i, r in enumerate(results)}
    out = list(results)
    for i in candidates:
        result = results[i]
        data = result_bytes(result, paths)
        if not data:
            continue
        decorated = set(_DECORATED.findall(data))
        if not decorated:
            continue  # (cheap before any parse: a bare `@name` decorator)
        imported = {}
        for module, names in _FROM_IMPORT.findall(data):
            for item in names.split(b","):
                parts = item.split()
                if parts and parts[-1] in decorated and (len(parts) == 1 or (len(parts) == 3 and parts[1] == b"as")):
                    imported[parts[-1].decode()] = (module.decode(), parts[0].decode())
        markers = {}
        for local, (module, name) in imported.items():
            found = _marker(results, paths, by_path, result.relpath, module, name, result_bytes)
            if found is not None:
                markers[local] = found
        if not markers:
            continue
        tree = astcache.parse(data)
        if tree is None:
            continue
        scopes = _marked_scopes(tree, markers)
        if not scopes:
            continue
        findings, changed = [], False
        for finding in result.findings:
            if open_(finding):
                lines = [finding.line, *(p[0] for p in finding.also)]
                holders = [next((s for s in scopes if s[0] <= line <= s[1]), None) for line in lines]
                if all(holders):
                    finding = dataclasses.replace(finding, severity="info",
                                                  message=f"{finding.message} ({holders[0][2]})")
                    changed = True
            findings.append(finding)
        if changed:
            out[i] = dataclasses.replace(result, findings=findings)
    return out


def _marker(results, paths, by_path, importer: str, module: str, name: str, read) -> Optional[tuple[str, str]]:
    """(where, condition) of `name = pytest.mark.skipif(<condition>, ...)` at module level in the
    run's file `module` names (beside the importer, or from the run's root), with a condition true
    on an NPU host; None otherwise."""
    from .testscopes import false_on_npu

    folder = importer.rsplit("/", 1)[0] if "/" in importer else ""
    dots = len(module) - len(module.lstrip("."))
    rest = module.lstrip(".").replace(".", "/")
    if dots:
        base = folder
        for _ in range(dots - 1):
            base = base.rsplit("/", 1)[0] if "/" in base else ""
        options = [f"{base}/{rest}.py" if base else f"{rest}.py"]
    else:
        options = [f"{folder}/{rest}.py" if folder else f"{rest}.py", f"{rest}.py"]
    for option in options:
        j = by_path.get(option)
        if j is None:
            continue
        data = read(results[j], paths)
        if not data or f"{name} =".encode() not in data or b"skipif" not in data:
            return None
        tree = astcache.parse(data)
        if tree is None:
            return None
        for stmt in tree.body:
            if (isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name)
                    and stmt.targets[0].id == name and isinstance(stmt.value, ast.Call) and stmt.value.args
                    and (astcache.dotted(stmt.value.func) or "").endswith("mark.skipif")):
                condition = ast.unparse(stmt.value.args[0])
                if false_on_npu(f"not ({condition})"):
                    return f"{option}:{stmt.lineno}", condition
        return None
    return None


def _marked_scopes(tree: ast.Module, markers: dict) -> list[tuple[int, int, str]]:
    """(first line, last line, reason) of the tests a skipping marker decorates (a test class's
    methods too), then of the module-level helpers only those tests reference."""
    scopes = []
    for stmt in tree.body:
        members = [stmt] if isinstance(stmt, _FUNCTIONS) else []
        if isinstance(stmt, ast.ClassDef):
            members = [stmt] if any(isinstance(d, ast.Name) and d.id in markers for d in stmt.decorator_list) \
                else [s for s in stmt.body if isinstance(s, _FUNCTIONS)]
        for member in members:
            mark = next((d.id for d in member.decorator_list if isinstance(d, ast.Name) and d.id in markers), None)
            if mark is not None and (isinstance(member, ast.ClassDef) or member.name.startswith("test")):
                where, condition = markers[mark]
                first = min([member.lineno, *(d.lineno for d in member.decorator_list)])
                scopes.append((first, member.end_lineno or member.lineno,
                               f"{SKIPPED_TEST}: `@{mark}` ({where}) skips it, `{condition}` is true there"))
    if not scopes:
        return scopes
    helpers = [s for s in tree.body if isinstance(s, _FUNCTIONS) and not s.name.startswith("test")
               and not s.decorator_list]
    names = [s.name for s in tree.body if isinstance(s, (*_FUNCTIONS, ast.ClassDef))]
    uses: dict[str, list[int]] = {}
    for node in astcache.walk(tree):
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load):
            uses.setdefault(node.id, []).append(node.lineno)
    tests = list(scopes)
    for helper in helpers:
        lines = uses.get(helper.name, [])
        if names.count(helper.name) == 1 and lines and all(any(a <= line <= b for a, b, _r in tests) for line in lines):
            scopes.append((helper.lineno, helper.end_lineno or helper.lineno,
                           f"{SKIPPED_HELPER}: `{helper.name}` is referenced only by tests an imported skip "
                           "marker skips there"))
    return scopes
