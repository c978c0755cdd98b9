"""Guarded imports whose fallback names are read only in private helpers every caller of which tests
the probe (issue #16, precision wave 19). Per file, right after probes16.review (run.py). NPU911 only,
as probes16.py (a Triton probe's import works on an NPU host with Triton-Ascend: tritonguards.py).

`try: from fastkern.ops import gemm_cuda as _gemm; _fused_ok = True` / `except Exception: _gemm =
None; _fused_ok = False` at module level, the names read only in a module-level helper
`def _fused_mlp(x): ... _gemm(...)` that the module calls only under `if _fused_ok:` (in a method of a
class, or through a second such helper): on an NPU host the import fails, the handler binds the
fallback and clears the flag, and the helper never runs. probes16.py counts a read as checked only
when the test of the probe's names or flags encloses the read itself, so the helper's reads kept the
import an error. Here, for an NPU911 error or warning that probes16.py left on an import in the body
of a module-level probe `try` (probes.probe_tries: a body that only imports, sets flags, returns)
whose every handler binds a fallback and never raises:

* every read of a name the import binds, outside the `try`, must be checked as probes16.py checks it
  (`probes16.checked`: behind a test of the names or flags, an early `return`, a skip marker), or
  lie in a GATED helper;
* a gated helper is a module-level function with a private name (a leading underscore: no other
  module is meant to call it), no decorator but a cache, compile or no-grad wrapper, not rebinding
  the name, referenced in the module only as the callee of calls (never passed on as a value), at
  least once, each call lying in the helper itself (recursion), in another gated helper, or on the
  branch of an `if`/`while`/conditional expression (or after an `and` operand, or after an
  `if <test>: return`) where a test of the probe says the import worked: a flag the `try` body sets
  True and every handler sets False (`if flag:`, `if not flag: return`; the reverse for a flag set
  False in the body), or a name every handler binds to None (`if _gemm is not None:`, `if _gemm:`);
* then the import is info with probes.GUARDED and probes16.READ_CHECKED (moot.AS_WRITTEN: a named
  scope "runs as written on an NPU host"), naming the helpers and the lines of their gated calls.

A helper called once outside such a branch (`return y + _fused_mlp(x)` after the `if`), on the
branch where the probe failed (`if not _fused_ok: _fused_mlp(x)`), passed as a value, public (another
module may call it), or a flag set in the `try` body but not in every handler keeps the import's
finding and severity. Nothing is dropped: each change lowers to info with the reason. The helper's
own findings are samefile.py's (FLAG: "a branch an NPU host does not take"); this module judges only
the import that binds what the helper calls.

An availability function that imports the package only after its own test of it (issue #16, wave 19):
`def is_bnb_4bit_available(): if not is_bnb_available(): return False; import bitsandbytes as bnb;
return hasattr(bnb.nn, "Linear4bit")` (or `... return version.parse(pkg.__version__) >= ...`). The
import runs only where the package is installed (the earlier `if <test naming the package or its
alias>: return <constant>`, or an enclosing `if` naming it), and what it binds is read only by
`hasattr(...)` tests and `__version__` reads: it answers a question and computes nothing, so on an
NPU host it either is not reached or works (bitsandbytes imports on an NPU host; see gates16.py).
NPU911 or NPU914 there is info with probes.GUARDED and PROBE_ONLY (moot.AS_WRITTEN: a named scope).
A read that calls or builds anything (`bnb.nn.Linear4bit(...)`, `bnb.functional.f(...)`, the module
returned or passed on), an import with no test before it (it fails where the package is missing),
or a test that names another package keeps the finding. Code that runs under such a function's
`if is_x_available():` (peft's LoftQ quantizing with `bnb.nn.Params4bit`) keeps its finding: the
test says the package is installed, not that its kernels run on the NPU.

A comparison with "nccl" over a backend the run resolves (whole run, review_backend_comparisons,
from runplan before moot.to_scopes): `def init(..., backend: str = "nccl"): if backend == "nccl" and
not current_platform.is_cuda_alike(): backend = "gloo"` (a CPU fallback the comparison rewrite
NPU302 leaves alone, so NPU990 reports the string). The run rewrote the default to the shim's backend
and every call in the file passes none or one the platform layer gives (resolved.rewritten_default,
NPU304's test): on an NPU host the backend is "hccl", the test is false and the branch is not taken.
NPU990 there is info with resolved.BACKEND (moot.NO_WORK: a named scope). `!=`, an `else` that
raises, a parameter assigned again before the test, a caller passing a backend from elsewhere, or a
default the run left alone keeps the finding.
"""

from __future__ import annotations

import ast
from dataclasses import replace

from . import astcache, probes16
from .findings import Finding

THROUGH = "through {helpers}, called only where the probe's test says the import worked (line {lines})"
PROBE_ONLY = ("an availability probe: imported only after the function's own test of the package "
              "(line {line}), and read only by {reads}: it computes nothing")
_CODES = frozenset({"NPU911"})
_PROBE_CODES = frozenset({"NPU911", "NPU914"})
# (wrappers that keep a helper a plain function of this module: the last part of the decorator's name)
_WRAPPERS = frozenset({"lru_cache", "cache", "compile", "no_grad", "inference_mode", "script", "wraps"})


def _candidate(finding: Finding) -> bool:
    return finding.code in _CODES and not finding.fixable and finding.cell is None \
        and finding.severity != "info" and not finding.also


def _constant(block: list, name: str) -> object:
    """The constant every plain assignment of `name` in `block` binds (a sentinel when none or several)."""
    assigns = [node for stmt in block for node in ast.walk(stmt) if isinstance(node, ast.Assign)
               and any(isinstance(t, ast.Name) and t.id == name for t in node.targets)]
    values = {repr(node.value.value) for node in assigns if isinstance(node.value, ast.Constant)}
    plain = all(isinstance(node.value, ast.Constant) for node in assigns)
    return values.pop() if len(values) == 1 and plain else _NONE


_NONE = object()


def _tests(trial: ast.Try, names: set[str]) -> dict[str, bool]:
    """{name: True when its truth means the import worked, False when its falsity does}: flags the
    body sets to a bool constant that every handler sets to the other one, and the import's names
    every handler binds to None."""
    out: dict[str, bool] = {}
    for name in probes16.stored(trial.body):
        body = _constant(trial.body, name)
        handlers = {_constant(h.body, name) for h in trial.handlers}
        if body in ("True", "False") and len(handlers) == 1:
            other = handlers.pop()
            if other in ("True", "False") and other != body:
                out[name] = body == "True"
    for name in names:
        if all(_constant(h.body, name) == "None" for h in trial.handlers):
            out[name] = True
    return out


def _worked(test: ast.AST, tests: dict[str, bool]) -> bool | None:
    """True when `test` holds only where the import worked, False when it fails only there (its
    negation holds only where it worked), None when it says neither."""
    if isinstance(test, ast.Name) and test.id in tests:
        return tests[test.id]
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        inner = _worked(test.operand, tests)
        return None if inner is None else not inner
    if isinstance(test, ast.Compare) and len(test.ops) == 1 and isinstance(test.left, ast.Name) \
            and tests.get(test.left.id) is True and isinstance(test.comparators[0], ast.Constant) \
            and test.comparators[0].value is None:
        return {ast.IsNot: True, ast.NotEq: True, ast.Is: False, ast.Eq: False}.get(type(test.ops[0]))
    if isinstance(test, ast.BoolOp):
        values = [_worked(v, tests) for v in test.values]
        if isinstance(test.op, ast.And) and True in values:
            return True
        if isinstance(test.op, ast.Or) and False in values:
            return False
    return None


def _gated_call(node: ast.AST, tests: dict[str, bool], parents: dict) -> int | None:
    """The line of the test that keeps `node` to where the import worked, inside its own function
    (None when there is none)."""
    child, parent = node, parents.get(id(node))
    while parent is not None and not isinstance(parent, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda,
                                                         ast.ClassDef, ast.Module)):
        if isinstance(parent, (ast.If, ast.IfExp, ast.While)) and child is not parent.test:
            worked = _worked(parent.test, tests)
            into_body = child is parent.body or (isinstance(parent.body, list) and child in parent.body)
            if worked is not None and worked == into_body and not (isinstance(parent, ast.While) and not into_body):
                return parent.test.lineno
        if isinstance(parent, ast.BoolOp) and isinstance(parent.op, ast.And) and child in parent.values \
                and any(_worked(v, tests) is True for v in parent.values[:parent.values.index(child)]):
            return parent.lineno
        for field in ("body", "orelse", "finalbody"):
            block = getattr(parent, field, None)
            if isinstance(block, list) and child in block:
                for stmt in block[:block.index(child)]:
                    if isinstance(stmt, ast.If) and not stmt.orelse and probes16.exits(stmt.body) \
                            and _worked(stmt.test, tests) is False:
                        return stmt.test.lineno
        child, parent = parent, parents.get(id(parent))
    if isinstance(parent, (ast.FunctionDef, ast.AsyncFunctionDef)):
        for stmt in parent.body[:parent.body.index(child)] if child in parent.body else ():
            if isinstance(stmt, ast.If) and not stmt.orelse and probes16.exits(stmt.body) \
                    and _worked(stmt.test, tests) is False:
                return stmt.test.lineno
    return None


def _in_test(node: ast.AST, tests: dict[str, bool], parents: dict) -> bool:
    """Whether `node` is read only by a test of the probe (`if _gemm is not None:`, `not _gemm`)."""
    child, parent = node, parents.get(id(node))
    while isinstance(parent, (ast.Compare, ast.UnaryOp, ast.BoolOp)):
        child, parent = parent, parents.get(id(parent))
    return isinstance(parent, (ast.If, ast.While, ast.IfExp, ast.Assert)) and child is parent.test \
        and _worked(child, tests) is not None


def _top_function(node: ast.AST, parents: dict, tree: ast.Module) -> ast.AST | None:
    """The module-level function holding `node` (None when it is not in one)."""
    while node is not None:
        parent = parents.get(id(node))
        if parent is tree:
            return node if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) else None
        node = parent
    return None


def _plain(function: ast.AST) -> bool:
    for decorator in function.decorator_list:
        target = decorator.func if isinstance(decorator, ast.Call) else decorator
        name = astcache.dotted(target) or ""
        if name.rsplit(".", 1)[-1] not in _WRAPPERS:
            return False
    return function.name.startswith("_") and not function.name.startswith("__")


def _gated_helper(function: ast.AST, tree: ast.Module, parents: dict, tests: dict[str, bool],
                  memo: dict[str, list[int] | None], visiting: set[str]) -> list[int] | None:
    """The lines of the tests that keep every call of the module-level `function` to where the import
    worked (see the module's docstring), or None."""
    name = function.name
    if name in memo:
        return memo[name]
    if name in visiting or not _plain(function) \
            or sum(isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and s.name == name
                   or isinstance(s, ast.Assign) and any(isinstance(t, ast.Name) and t.id == name for t in s.targets)
                   for s in tree.body) != 1:
        return None
    visiting.add(name)
    lines: list[int] = []
    calls = 0
    for node in astcache.nodes(tree, ast.Name):
        if node.id != name or not isinstance(node.ctx, ast.Load):
            continue
        call = parents.get(id(node))
        if not (isinstance(call, ast.Call) and call.func is node):
            lines = None
            break
        holder = _top_function(node, parents, tree)
        if holder is function:
            continue  # (a recursive call: reached only through a gated one)
        calls += 1
        line = _gated_call(node, tests, parents)
        if line is None and holder is not None and name not in probes16.local_names(holder):
            outer = _gated_helper(holder, tree, parents, tests, memo, visiting)
            line = min(outer) if outer else None
        if line is None:
            lines = None
            break
        lines.append(line)
    visiting.discard(name)
    memo[name] = sorted(set(lines)) if lines is not None and calls else None
    return memo[name]


def _reason(stmt: ast.AST, trial: ast.Try, tree: ast.Module, parents: dict, reported: set[int]) -> str | None:
    from .probes import GUARDED

    names = probes16.bound_names(stmt)
    tests = _tests(trial, names)
    if not names or not tests:
        return None
    checks = names | probes16.stored(trial.body) | {n for h in trial.handlers for n in probes16.stored(h.body)}
    first, last = trial.lineno, trial.end_lineno or trial.lineno
    memo: dict[str, list[int] | None] = {}
    helpers: dict[str, list[int]] = {}
    for node in astcache.nodes(tree, ast.Name):
        if node.id not in names or not isinstance(node.ctx, ast.Load):
            continue
        if first <= node.lineno <= last or node.lineno in reported:
            continue
        if _in_test(node, tests, parents):
            continue  # (`if _gemm is not None:`: the probe's test itself)
        scope = probes16.scope_of(node, parents)
        if scope is not None and not isinstance(scope, ast.Lambda) and node.id in probes16.local_names(scope):
            return None  # (rebound, or declared global: not the probe's name alone)
        if probes16.checked(node, checks, parents):
            continue
        holder = _top_function(node, parents, tree)
        if holder is None:
            return None
        gated = _gated_helper(holder, tree, parents, tests, memo, set())
        if gated is None:
            return None
        helpers[holder.name] = gated
    if not helpers:
        return None
    shown = ", ".join(f"`{h}`" for h in helpers)
    lines = ", ".join(str(n) for n in sorted({line for found in helpers.values() for line in found}))
    return f"{GUARDED}; {probes16.READ_CHECKED} ({THROUGH.format(helpers=shown, lines=lines)})"


def review(findings: list[Finding], text: str) -> list[Finding]:
    """Both shapes of the module's docstring: probes read through gated helpers, then availability
    functions (run.migrate_file, after probes16.review)."""
    return review_availability(review_helpers(findings, text), text)


def review_helpers(findings: list[Finding], text: str) -> list[Finding]:
    """NPU911 on the imports of module-level probes whose names are read only in private helpers
    called behind a test of the probe, lowered to info with the reason (module docstring)."""
    if "except" not in text or "import" not in text or not any(map(_candidate, findings)):
        return findings
    from .probes import parse_text, probe_tries

    tree = parse_text(text)
    if tree is None:
        return findings
    wanted = {f.line for f in findings if _candidate(f)}
    parents = astcache.parents(tree)
    imports: dict[int, tuple[ast.AST, ast.Try]] = {}
    for trial, _statements in probe_tries(tree):
        if parents.get(id(trial)) is not tree or not all(map(probes16.binds_fallback, trial.handlers)):
            continue
        for stmt in trial.body:
            if isinstance(stmt, (ast.Import, ast.ImportFrom)) and stmt.lineno in wanted:
                imports.setdefault(stmt.lineno, (stmt, trial))
    if not imports:
        return findings
    # (a package the module also imports unguarded at its top, reported: the module fails there anyway)
    failing = {probes16.package_of(stmt) for stmt in tree.body if isinstance(stmt, (ast.Import, ast.ImportFrom))
               and stmt.lineno in wanted}
    reported = {f.line for f in findings if (f.code in _CODES or f.code == "NPU990") and not f.fixable
                and f.cell is None and f.line not in imports}
    reasons = {line: _reason(stmt, trial, tree, parents, reported) for line, (stmt, trial) in imports.items()
               if probes16.package_of(stmt) not in failing}
    out = []
    for finding in findings:
        reason = reasons.get(finding.line) if _candidate(finding) else None
        out.append(replace(finding, severity="info", message=f"{finding.message} ({reason})") if reason else finding)
    return out


# ----------------------------------------------------------------------------- availability functions
def _probe_read(node: ast.Name, parents: dict) -> str | None:
    """`hasattr` or `__version__` when the read of a bound name only tests what the package has."""
    top = node
    while isinstance(parents.get(id(top)), ast.Attribute) and parents[id(top)].value is top:
        top = parents[id(top)]
        if top.attr == "__version__":
            holder = parents.get(id(top))
            return "`__version__`" if not (isinstance(holder, ast.Call) and holder.func is top) else None
    holder = parents.get(id(top))
    if isinstance(holder, ast.Call) and isinstance(holder.func, ast.Name) and holder.func.id == "hasattr" \
            and len(holder.args) == 2 and holder.args[0] is top and isinstance(holder.args[1], ast.Constant):
        return "`hasattr` tests"
    return None


def _names_package(test: ast.AST, words: set[str]) -> bool:
    text = probes16.squash(ast.unparse(test))
    return any(len(word) >= 3 and word in text for word in words)


def _tested_first(stmt: ast.AST, function: ast.AST, parents: dict, words: set[str]) -> int | None:
    """The line of the test of the package that the import runs only after (or under), in `function`."""
    child, parent = stmt, parents.get(id(stmt))
    while parent is not None:
        if isinstance(parent, ast.If) and child in parent.body and _names_package(parent.test, words) \
                and not isinstance(parent.test, ast.UnaryOp):
            return parent.test.lineno
        for field in ("body", "orelse"):
            block = getattr(parent, field, None)
            if isinstance(block, list) and child in block:
                for earlier in block[:block.index(child)]:
                    if isinstance(earlier, ast.If) and not earlier.orelse and len(earlier.body) == 1 \
                            and isinstance(earlier.body[0], ast.Return) \
                            and isinstance(earlier.body[0].value, (ast.Constant, type(None))) \
                            and isinstance(earlier.test, ast.UnaryOp) and isinstance(earlier.test.op, ast.Not) \
                            and _names_package(earlier.test, words):
                        return earlier.test.lineno
        if parent is function:
            return None
        child, parent = parent, parents.get(id(parent))
    return None


def _probe_reason(stmt: ast.AST, tree: ast.Module, parents: dict) -> str | None:
    from .probes import GUARDED

    function = _scope_function(stmt, parents)
    names = probes16.bound_names(stmt)
    if function is None or not names or any(isinstance(n, (ast.Global, ast.Nonlocal)) for n in ast.walk(function)):
        return None
    words = {probes16.squash(probes16.package_of(stmt))} | {probes16.squash(n) for n in names}
    line = _tested_first(stmt, function, parents, words)
    if line is None:
        return None
    reads: list[str] = []
    for node in ast.walk(function):
        if isinstance(node, ast.Name) and node.id in names:
            if not isinstance(node.ctx, ast.Load):
                return None
            read = _probe_read(node, parents)
            if read is None:
                return None
            reads.append(read)
    if not reads:
        return None
    return f"{GUARDED}; " + PROBE_ONLY.format(line=line, reads=" and ".join(sorted(set(reads))))


def _scope_function(node: ast.AST, parents: dict) -> ast.AST | None:
    node = parents.get(id(node))
    while node is not None and not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
        if isinstance(node, (ast.ClassDef, ast.Lambda)):
            return None
        node = parents.get(id(node))
    return node


def review_availability(findings: list[Finding], text: str) -> list[Finding]:
    """NPU911/NPU914 on an import an availability function makes only after its own test of the
    package, reading only `hasattr`/`__version__`: info with PROBE_ONLY (module docstring)."""
    def wanted(f: Finding) -> bool:
        return f.code in _PROBE_CODES and not f.fixable and f.cell is None and f.severity != "info" and not f.also

    if "import" not in text or not any(map(wanted, findings)) or ("hasattr" not in text and "__version__" not in text):
        return findings
    from .probes import parse_text

    tree = parse_text(text)
    if tree is None:
        return findings
    parents = astcache.parents(tree)
    lines = {f.line for f in findings if wanted(f)}
    reasons: dict[int, str | None] = {}
    for stmt in astcache.nodes(tree, (ast.Import, ast.ImportFrom)):
        if stmt.lineno in lines and stmt.lineno not in reasons:
            same = [s for s in astcache.nodes(tree, (ast.Import, ast.ImportFrom)) if s.lineno == stmt.lineno]
            reasons[stmt.lineno] = _probe_reason(stmt, tree, parents) if len(same) == 1 else None
    out = []
    for finding in findings:
        reason = reasons.get(finding.line) if wanted(finding) else None
        out.append(replace(finding, severity="info", message=f"{finding.message} ({reason})") if reason else finding)
    return out


# ----------------------------------------------------------------------------- "nccl" comparisons
COMPARED = ("compared with \"nccl\" in the test of the `if` at line {line}, false on an NPU host: "
            "that branch is not taken there and nothing else raises for the backend")


def _comparison_if(constant: ast.AST, parents: dict) -> tuple[str, ast.If] | None:
    """(the parameter, the `if`) of `if <name> == "nccl" [and ...]:` holding the string, whose
    `else` branches raise nothing."""
    compare = parents.get(id(constant))
    if not (isinstance(compare, ast.Compare) and len(compare.ops) == 1 and isinstance(compare.ops[0], ast.Eq)
            and isinstance(compare.left, ast.Name) and compare.comparators[0] is constant):
        return None
    child, holder = compare, parents.get(id(compare))
    if isinstance(holder, ast.BoolOp) and isinstance(holder.op, ast.And):
        child, holder = holder, parents.get(id(holder))
    if not (isinstance(holder, ast.If) and holder.test is child):
        return None
    if any(isinstance(n, ast.Raise) for stmt in holder.orelse for n in ast.walk(stmt)):
        return None
    return compare.left.id, holder


def review_backend_comparisons(results: list, paths: dict) -> list:
    """NPU990 on the "nccl" of `if backend == "nccl" ...:` where `backend` is a parameter whose
    "nccl" default the run rewrote to the shim's backend and no call in the file passes "nccl"
    (resolved.py's test, NPU304): on an NPU host the test is false and the branch is not taken.
    Info with resolved.BACKEND (moot: a named scope "no port work"). A comparison with `!=`, an
    `else` that raises (an unsupported-backend error), a parameter the function assigns again first,
    or a default the run left as "nccl" keeps the finding. Called once from runplan.whole_run_passes
    (before moot.to_scopes)."""
    from . import resolved
    from .findings import lower_pieces

    def asks(finding: Finding) -> bool:
        return finding.code == "NPU990" and not finding.fixable and finding.cell is None \
            and finding.severity != "info" and finding.source.strip("'\"") == "nccl"

    run = resolved.Run(results, paths)  # (reads and parses only what a check asks for)
    out = []
    for result in results:
        if not result.relpath.endswith(".py") or result.new is None or not any(map(asks, result.findings)):
            out.append(result)
            continue
        tree = run.tree(result.relpath)
        if tree is None:
            out.append(result)
            continue
        findings = []
        for finding in result.findings:
            pieces = lower_pieces(finding, lambda line, f=finding, r=result, t=tree, u=run: _comparison_reason(
                u, r, t, f, line)) if asks(finding) else None
            findings.extend(pieces if pieces is not None else [finding])
        out.append(replace(result, findings=sorted(findings)))
    return out


def _comparison_reason(run, result, tree: ast.Module, finding: Finding, line: int) -> str | None:
    """resolved.BACKEND with COMPARED for the "nccl" of `finding` at `line`, or None."""
    from . import resolved

    column = finding.column if line == finding.line else next(
        (place[1] for place in finding.also or () if place[0] == line), None)
    constant = astcache.strings_at(tree).get((line, column))
    parents = astcache.parents(tree)
    found = _comparison_if(constant, parents) if constant is not None and constant.value == "nccl" else None
    if found is None:
        return None
    name, test = found
    func = resolved.enclosing(tree, line, (ast.FunctionDef, ast.AsyncFunctionDef))
    if func is None or not any(a.arg == name for a in resolved.params(func)) or any(
            isinstance(node, (ast.Assign, ast.AugAssign, ast.AnnAssign)) and node.lineno < line
            and any(isinstance(t, ast.Name) and t.id == name for target in
                    (node.targets if isinstance(node, ast.Assign) else [node.target]) for t in ast.walk(target))
            for node in ast.walk(func)):
        return None
    why = resolved.rewritten_default(run, result, tree, func, name)
    return f"{resolved.BACKEND}{why}; {COMPARED.format(line=test.lineno)}" if why else None
