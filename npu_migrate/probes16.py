"""Guarded imports whose `except` binds a fallback, still reported as failing (issue #16, round-16
audits AS#18, AS#38, AR#4). Per file, after probes15.review and before the per-file merge (run.py).
NPU911 only: a Triton probe's import works on an NPU host with Triton-Ascend (tritonguards.py).

A `try: from sgl_kernel.scalar_type import ScalarType, scalar_types; return ScalarType, scalar_types
except ImportError: class MockScalarType: ...; return MockScalarType, MockScalarTypes()` (SGLang's
quantization utils), `try: from flashinfer.fused_moe import f except ImportError: f = None`, or
`try: import flashinfer.comm as comm; _ok = hasattr(...) except ImportError: comm = None; _ok = False`
(vLLM's PCIe IPC all-reduce) is a probe: on an NPU host the import fails, the `except` binds the
fallback, and the import itself fails nothing. probes.review_guarded_probes leaves such an import an
error when a name it binds is read anywhere else, or when the file has another finding of the same
code to merge it into; the merged finding then stands on the probe's line for unrelated code
(round 16: "the anchor sits in a clean fallback"). Here, for an NPU911 error or warning on an
import in the body of a `try` that catches ImportError and whose every handler binds (a name, a
class, a `return`) and never raises:

* the reads of its names are counted in the probe's own scope only: a `try` inside a function binds
  function locals, so the module-level `ScalarType, scalar_types = get_scalar_types()` and its reads
  are the function's result, not the import;
* a read behind a test of one of the probe's names (`if comm is not None:`, `x and x(...)`, after
  `if not _ok: return` in the same function) or on a line the file reports anyway is checked;
* with no other read, the import is info with probes.GUARDED (moot.AS_WRITTEN: a named scope), even
  where the file reports other findings of the same code: those stand on their own lines;
* a class whose constructor keeps an attribute at its first constant when a test of the probe
  returns early (`self.disabled = True`, `if not _ipc_available: return`, `self.disabled = False`,
  vLLM's PCIe IPC all-reduce) checks the probe wherever its methods test that attribute;
* where the `try` sits under an `if` whose test names the package (`if get_moe_runner_backend().
  is_flashinfer_trtllm():`) and the other reads all lie in a class or function named for it
  (`FlashInferFP4MoE`: that backend's class, chosen under the same test), the import is info with
  BACKEND_ONLY naming them: a named scope (moot.AS_WRITTEN, "guarded import with a fallback"; round
  20, BC#17: an info that concedes the import fails nothing asks for no work). A lazy import of the
  package in such a class or function is a named scope of its own (BACKEND_LAZY, moot.PHRASES: code
  of a CUDA package's backend an NPU host runs only if a user selects that backend there); `merge`
  keeps each apart from the file's other scopes of the same code, which would otherwise name it under
  their reason, and from each other (a scope spans only its own construct).
  Without such a test (`try: from nunchaku.ops import svdq_gemm_cuda except ImportError: ... = None`
  read in `NunchakuSVDQLinearMethod`, round-15 AO#24: a model an NPU host may load) the error stays.

A read outside such places (the fallback's None called on a path an NPU host takes) keeps the
import's finding and severity; so does a handler that raises, an unguarded import, and a `try` whose
handler binds nothing. Nothing is dropped: each change lowers to info with the reason.
"""

from __future__ import annotations

import ast
import re
from dataclasses import replace

from . import astcache
from .findings import Finding

BACKEND_ONLY = ("guarded import with a fallback (line {line}) under `{test}`: the import fails nothing on an "
                "NPU host; its names are read only in {owners}, code named for that package's backend, which an "
                "NPU host runs only if that backend is selected there")

# (a probes.GUARDED reason: moot.AS_WRITTEN makes it a named scope; the words after it keep it apart
# in `merge` from the file's other scopes of the code, which would otherwise name it their reason)
READ_CHECKED = "its names are read only where the import worked: its own function, or behind a test of them"
# (moot.PHRASES: a named scope, round 20 BC#17)
BACKEND_CODE = "in a CUDA package's backend code an NPU host runs only if that backend is selected"
BACKEND_LAZY = (BACKEND_CODE + ": imported in {owner}, code named for that package's backend, in a module that "
                "imports the package only under `{test}`")
# (and probes19.PROBE_ONLY: an availability function's own import, kept apart the same way; the
# BACKEND_ONLY mark first: its message also names the backend's code)
_MARKS = ("the import fails nothing on an NPU host; its names are read only in", BACKEND_CODE,
          "code named for that package's backend", READ_CHECKED, "an availability probe: imported only after")
# (NPU911 only: Triton-Ascend installs `triton` on an NPU host, where a Triton probe's import works
# and the kernels behind it run; tritonguards.py, guards15.py and optionalguards.py judge those)
_CODES = frozenset({"NPU911"})
_FUNCTIONS = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)
_SCOPES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)
_DEFINED = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)


def _candidates(findings: list[Finding]) -> bool:
    return any(f.code in _CODES and not f.fixable and f.cell is None and f.severity != "info" and not f.also
               for f in findings)


def _binds_fallback(handler: ast.ExceptHandler) -> bool:
    """A handler that never raises nor imports (`except ImportError: from sgl_kernel import
    other_name`: a second import, judged on its own) and binds something (a name, a class, a def) or
    returns."""
    binds = False
    for node in ast.walk(handler):
        if isinstance(node, (ast.Raise, ast.Import, ast.ImportFrom)):
            return False
        if isinstance(node, (ast.Return, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            binds = True
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            binds = True
    return binds


def _bound(stmt: ast.AST) -> set[str]:
    if isinstance(stmt, ast.Import):
        return {alias.asname or alias.name.split(".")[0] for alias in stmt.names}
    return {alias.asname or alias.name for alias in stmt.names if alias.name != "*"}


def _package(stmt: ast.AST) -> str:
    if isinstance(stmt, ast.Import):
        return stmt.names[0].name.split(".")[0]
    return "" if stmt.level else (stmt.module or "").split(".")[0]


def _stored(block: list) -> set[str]:
    """Plain names the statements bind (a flag, a placeholder)."""
    return {node.id for stmt in block for node in ast.walk(stmt)
            if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store)}


def _reads(node: ast.AST | None, names: set[str]) -> bool:
    """Whether `node` reads one of `names` (plain names, or `self.attr` for a flag attribute)."""
    return node is not None and any(
        (isinstance(n, ast.Name) and n.id in names)
        or (isinstance(n, ast.Attribute) and (astcache.dotted(n) or "") in names) for n in ast.walk(node))


def _flag_attributes(tree: ast.Module, checks: set[str]) -> dict[str, set[str]]:
    """{class name: {"self.attr"}} of the attributes a constructor keeps at their first value when
    the probe failed: `self.disabled = True`, then `if not _ipc_available: ...; return`, then
    `self.disabled = False` (vLLM's PCIe IPC all-reduce, AR#4): a test of `self.disabled` in that
    class's methods is a test of the probe."""
    out: dict[str, set[str]] = {}
    for cls in tree.body:
        if not isinstance(cls, ast.ClassDef):
            continue
        init = next((n for n in cls.body if isinstance(n, ast.FunctionDef) and n.name == "__init__"), None)
        if init is None:
            continue
        first: dict[str, int] = {}
        exits: list[int] = []
        for index, stmt in enumerate(init.body):
            if isinstance(stmt, ast.If) and _reads(stmt.test, checks) and _exits(stmt.body):
                exits.append(index)
            elif isinstance(stmt, ast.Assign) and len(stmt.targets) == 1:
                name = astcache.dotted(stmt.targets[0]) or ""
                if name.startswith("self.") and name.count(".") == 1:
                    if name not in first and isinstance(stmt.value, ast.Constant):
                        first[name] = index
                    elif name in first and any(first[name] < e < index for e in exits):
                        out.setdefault(cls.name, set()).add(name)
    return out


def _exits(block: list) -> bool:
    return bool(block) and isinstance(block[-1], (ast.Return, ast.Raise, ast.Continue, ast.Break))


def _checked(read: ast.Name, names: set[str], parents: dict) -> bool:
    """Whether the read lies behind a test of one of `names`: in an `if`/`while`/conditional
    expression on such a test, after such an operand of `and`/`or`, or after an earlier statement
    `if <such a test>: return` of a block holding it."""
    child: ast.AST = read
    node = parents.get(id(read))
    while node is not None and not isinstance(node, (ast.Lambda, ast.ClassDef, ast.Module)):
        if isinstance(node, (ast.If, ast.While, ast.IfExp)) and child is not node.test and _reads(node.test, names):
            return True
        if isinstance(node, ast.BoolOp) and child in node.values:
            if any(_reads(v, names) for v in node.values[:node.values.index(child)]):
                return True
        for field in ("body", "orelse", "finalbody"):
            block = getattr(node, field, None)
            if isinstance(block, list) and child in block:
                for stmt in block[:block.index(child)]:
                    if isinstance(stmt, ast.If) and _reads(stmt.test, names) and _exits(stmt.body):
                        return True
                    if isinstance(stmt, ast.Assert) and _reads(stmt.test, names):
                        return True
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            # (the function's own body was the last block; a test skipped unless the probe passed,
            # `@pytest.mark.skipif(not AVAILABLE, ...)` on it or on its class, or a module
            # `pytestmark` of that kind, runs its reads only where the import succeeded)
            holder = parents.get(id(node))
            marked = [node, *([holder] if isinstance(holder, ast.ClassDef) else [])]
            if any(_skip_marker(d, names) for owner in marked for d in owner.decorator_list):
                return True
            module = node
            while parents.get(id(module)) is not None:
                module = parents[id(module)]
            return isinstance(module, ast.Module) and any(
                isinstance(stmt, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "pytestmark" for t in stmt.targets)
                and any(_skip_marker(v, names) for v in (stmt.value.elts if isinstance(stmt.value, (ast.List, ast.Tuple))
                                                          else [stmt.value]))
                for stmt in module.body)
        child, node = node, parents.get(id(node))
    return False


_SKIP_MARKERS = ("skipif", "skipIf", "skipUnless")


def _skip_marker(node: ast.AST, names: set[str]) -> bool:
    """`pytest.mark.skipif(<reads names>, ...)`, `unittest.skipIf(...)` / `skipUnless(...)`."""
    if not (isinstance(node, ast.Call) and node.args):
        return False
    func = node.func
    last = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""
    return last in _SKIP_MARKERS and _reads(node.args[0], names)


def _tests_only(read: ast.Name, parents: dict) -> bool:
    """A read that is itself the test of the probe's name, not a use of it: `x is None`, `x is not
    None`, `not x`, or the bare test of an `if`/`while`/`assert`/conditional expression, or a value
    of an `and`/`or` there (`assert o_norm_sigmoid_gate is not None`, `... and f is not None and ...`:
    round 31 FB#15). It runs the same on an NPU host, where the fallback bound the name."""
    parent = parents.get(id(read))
    if isinstance(parent, ast.Compare) and parent.left is read and len(parent.ops) == 1 and isinstance(
            parent.ops[0], (ast.Is, ast.IsNot)) and isinstance(parent.comparators[0], ast.Constant) \
            and parent.comparators[0].value is None:
        read, parent = parent, parents.get(id(parent))
    elif isinstance(parent, ast.UnaryOp) and isinstance(parent.op, ast.Not):
        read, parent = parent, parents.get(id(parent))
    while isinstance(parent, ast.BoolOp):
        read, parent = parent, parents.get(id(parent))
    return isinstance(parent, (ast.If, ast.While, ast.IfExp, ast.Assert)) and parent.test is read


def _holders(node: ast.AST, parents: dict) -> list[ast.AST]:
    out = []
    node = parents.get(id(node))
    while node is not None:
        out.append(node)
        node = parents.get(id(node))
    return out


def _owners(read: ast.AST, parents: dict) -> list[str]:
    out = []
    node = parents.get(id(read))
    while node is not None:
        if isinstance(node, _SCOPES):
            out.append(node.name)
        node = parents.get(id(node))
    return out


def _squash(name: str) -> str:
    return re.sub(r"[^a-z0-9]", "", name.lower())


def _scope(node: ast.AST, parents: dict) -> ast.AST | None:
    """The function holding `node` (None at module or class level)."""
    node = parents.get(id(node))
    while node is not None:
        if isinstance(node, _FUNCTIONS):
            return node
        node = parents.get(id(node))
    return None


def _reason(stmt: ast.AST, trial: ast.Try, tree: ast.Module, parents: dict, reported: set[int]) -> str | None:
    """GUARDED, a BACKEND_ONLY reason, or None (the import keeps its finding)."""
    from .probes import GUARDED

    names = _bound(stmt)
    if not names:
        return None
    function = _scope(trial, parents)
    if function is not None and any(isinstance(n, (ast.Global, ast.Nonlocal)) and names & set(n.names)
                                    for n in ast.walk(function)):
        return None
    checks = names | _stored(trial.body) | {n for h in trial.handlers for n in _stored(h.body)}
    # (a name every handler defines as a function or class of its own, `def supports_x(*_args):
    # return False`: read anywhere, it is that fallback on an NPU host, which runs as written;
    # round 31 FB#15. A handler's `x = None` is no such fallback: its reads must be checked)
    fallbacks = names & set.intersection(*({n.name for n in ast.walk(h) if isinstance(n, _DEFINED)}
                                           for h in trial.handlers))
    first, last = trial.lineno, trial.end_lineno or trial.lineno
    package = _squash(_package(stmt))
    flags = _flag_attributes(tree, checks) if function is None else {}
    # (the module imports the package only where a test naming it holds: `if get_moe_runner_backend().
    # is_flashinfer_trtllm():` around the `try`, AS#38; its backend's classes may then read the names)
    selected = next((node.test for node in _holders(trial, parents) if len(package) >= 4
                     and isinstance(node, ast.If) and package in _squash(ast.unparse(node.test))), None)
    owners: list[str] = []
    for node in ast.walk(function if function is not None else tree):
        if not (isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load) and node.id in names):
            continue
        if node.id in fallbacks or _tests_only(node, parents):
            continue
        if first <= node.lineno <= last or node.lineno in reported:
            continue
        if function is None and _scope(node, parents) is not None and node.id in _local_names(_scope(node, parents)):
            continue  # (a function's own binding of the name)
        held = _owners(node, parents)
        if _checked(node, checks | (flags.get(held[-1], set()) if held else set()), parents):
            continue
        named = [o for o in held if selected is not None and package in _squash(o)]
        if not named:
            return None
        owners.append(named[-1])
    if not owners:
        return f"{GUARDED}; {READ_CHECKED}"
    shown = ", ".join(f"`{o}`" for o in dict.fromkeys(owners))
    test = ast.unparse(selected)
    return BACKEND_ONLY.format(test=test if len(test) <= 80 else test[:77] + "...",
                               line=trial.handlers[0].lineno, owners=shown)


def _backend_lazy(tree: ast.Module, parents: dict, lines: set[int], selected: list) -> dict[int, str]:
    """{line: BACKEND_LAZY} of the imports on `lines` of a package whose probe got BACKEND_ONLY (the
    module imports it only under a test naming it) that lie in a function or class named for it
    (`from flashinfer.fused_moe import trtllm_bf16_moe` in `FlashInferFusedMoE.forward_impl`, AS#38)."""
    out: dict[int, str] = {}
    if not selected or not lines:
        return out
    tests = {}
    for stmt, trial in selected:
        test = next(node.test for node in _holders(trial, parents) if isinstance(node, ast.If)
                    and _squash(_package(stmt)) in _squash(ast.unparse(node.test)))
        tests.setdefault(_squash(_package(stmt)), ast.unparse(test))
    for node in astcache.nodes(tree, (ast.Import, ast.ImportFrom)):
        package = _squash(_package(node))
        if node.lineno not in lines or package not in tests:
            continue
        named = [o for o in _owners(node, parents) if package in _squash(o)]
        if named and _scope(node, parents) is not None:
            test = tests[package]
            out[node.lineno] = BACKEND_LAZY.format(owner=f"`{named[-1]}`",
                                                   test=test if len(test) <= 80 else test[:77] + "...")
    return out


def _local_names(function: ast.AST) -> set[str]:
    if any(isinstance(n, (ast.Global, ast.Nonlocal)) for n in ast.walk(function)):
        return set()
    args = function.args
    params = {a.arg for a in (*args.posonlyargs, *args.args, *args.kwonlyargs)}
    params |= {a.arg for a in (args.vararg, args.kwarg) if a is not None}
    return params | {n.id for n in ast.walk(function) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}


def review(findings: list[Finding], text: str) -> list[Finding]:
    """NPU911 on the imports of guarded probes whose `except` binds a fallback, lowered to
    info with the reason (see the module's docstring)."""
    if "except" not in text or "import" not in text or not _candidates(findings):
        return findings
    from .probes import parse_text, probe_tries

    tree = parse_text(text)
    if tree is None:
        return findings
    wanted = {f.line for f in findings if f.code in _CODES and not f.fixable and f.cell is None
              and f.severity != "info" and not f.also}
    # (a package the module imports unguarded at its top, reported: the module fails to import
    # there anyway, and probes.review_guarded_probes merges the probe into that finding)
    failing = {(f.code, _package(stmt)) for stmt in tree.body if isinstance(stmt, (ast.Import, ast.ImportFrom))
               for f in findings if f.line == stmt.lineno and f.code in _CODES and f.severity != "info"
               and not f.fixable and f.cell is None}
    imports: dict[int, tuple[ast.AST, ast.Try]] = {}
    for trial, _statements in probe_tries(tree):  # (a body that only imports, sets flags, returns)
        if not all(map(_binds_fallback, trial.handlers)):
            continue
        for stmt in trial.body:
            if isinstance(stmt, (ast.Import, ast.ImportFrom)) and stmt.lineno in wanted \
                    and not any((code, _package(stmt)) in failing for code in _CODES):
                imports.setdefault(stmt.lineno, (stmt, trial))
    if not imports:
        return findings
    parents = astcache.parents(tree)
    reported = {f.line for f in findings if (f.code in _CODES or f.code == "NPU990") and not f.fixable
                and f.cell is None and f.line not in imports}
    reasons = {line: _reason(stmt, trial, tree, parents, reported) for line, (stmt, trial) in imports.items()}
    reasons.update(_backend_lazy(tree, parents, wanted - set(reasons), [
        (stmt, trial) for line, (stmt, trial) in imports.items() if "the import fails nothing on an NPU host" in (reasons[line] or "")]))
    out = []
    for finding in findings:
        reason = reasons.get(finding.line) if finding.code in _CODES and not finding.fixable \
            and finding.cell is None and finding.severity != "info" and not finding.also else None
        if reason:
            finding = replace(finding, severity="info", message=f"{finding.message} ({reason})")
        out.append(finding)
    return out


def merge(findings: list[Finding], secondary=None) -> list[Finding]:
    """findings.merge_per_file, with this module's infos merged apart (each reason by itself): merged
    with a named scope's info of the same code they would become that scope (moot.to_scopes), under
    its reason (a BACKEND_ONLY scope would be named an untaken branch, and so would a probe)."""
    from .findings import merge_per_file

    groups: dict[str, list[Finding]] = {}
    rest = []
    for finding in findings:
        mark = next((m for m in _MARKS if m in finding.message), None) \
            if finding.severity == "info" and not finding.fixable else None
        (groups.setdefault(mark, []) if mark else rest).append(finding)
    if not groups:
        return merge_per_file(findings, secondary)
    return sorted([*merge_per_file(rest, secondary), *(f for group in groups.values() for f in merge_per_file(group))])


# (public for probes19.py, which reads probes, their flags and checked reads the same way)
stored, bound_names, squash, package_of, scope_of, checked, exits, local_names, binds_fallback = (
    _stored, _bound, _squash, _package, _scope, _checked, _exits, _local_names, _binds_fallback)
