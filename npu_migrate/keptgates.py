"""Device checks kept meaning CUDA whose other path is the code's own fallback (issue #16).

NPU110 ("Device check guards CUDA-only code; left unchanged") keeps a device check meaning CUDA
because the code it guards only works on CUDA. On an NPU host the check is then false, as on any
machine without CUDA, and the code's own other path runs: the `else` branch, the statements after
the `if`, the other arm of a conditional expression, the `False` a predicate returns. Where that
path is a fallback (a generic torch path, "not compatible", a CPU build, a skipped probe), the
check runs as written on an NPU host: the audits of issue #16 read such findings as false (a
backend import `if torch.cuda.is_available(): from .backends.cuda import ops`; a CUDA toolchain
probe in an op builder's `is_compatible()`; a `tensor.device.type == "cuda"` dispatch with the
generic path after it; the CUDA build of a `setup.py`, whose CPU build an NPU host gets).

`lower_fallback_gates` lowers such a finding to info with the reason `FALLBACK` (a moot.AS_WRITTEN
phrase: the finding becomes a named skipped scope, `runs as written on an NPU host (NPU110): ...`).
What it absorbs later (redundant.fold_guarded_branches: the CUDA-only code of the branch an NPU
host does not take) goes with it into that scope. The check stays a finding (warning) when the
NPU host's path is not a fallback:

- it raises, asserts, exits or skips (`if not x.is_cuda: raise ...`, `assert x.is_cuda`,
  `raise unittest.SkipTest`), or the CUDA branch holds a test's skips (the NPU host runs the test
  without the checks a CUDA device gets), or the check is in a test function's body (skipping its
  CUDA branch leaves a test that checks nothing on an NPU host);
- the CUDA branch calls what torch_npu has under another name (the run's finding names the
  `torch.npu` counterpart: torchtune's `torch.cuda.memory._record_memory_history` gate): the NPU
  host would silently skip a feature it has (round-8 audit);
- the branch an NPU host takes returns a "cuda" label, holds a CUDA-only reference the run
  reports, is followed by a `raise` (`if torch.cuda.is_available(): ...` then `raise`), or falls
  through into the CUDA-only code (`if not torch.cuda.is_available(): log(...)` then the CUDA code);
- the guarded branch binds a name the code reads after the `if` and nothing else binds it
  before (`if torch.cuda.is_available(): device = "cuda"` then `model.to(device)`), nor again
  after the `if`, ahead of the read, in the same block (`output = torch_path(...)`);
- a CUDA-only call the run reports (a non-rewritable error or warning) follows the `if`
  unguarded in the same function;
- the check's reason names a method that raises unless the device is CUDA, or the check is not
  the test of an `if`, a conditional expression, a `return` or a name assigned and then only
  tested (an `assert`, a device default, an attribute: left as findings).

NPU108 (a comparison with "cuda" kept because its branch uses a CUDA-only feature: FP8, Triton,
CUDA graphs) is judged the same way: optimum-quanto's `device.type == "cuda" and torch.version.cuda`
in front of its FP8 Marlin path, else a torch path, runs as written on an NPU host.

Run on one file's findings before merge_per_file (each check is judged at its own place), from
run.migrate_file.
"""

from __future__ import annotations

import ast
import re
from dataclasses import replace
from typing import Optional

from . import astcache
from .findings import Finding

FALLBACK = "a device check kept meaning CUDA whose fallback an NPU host runs"

# reasons of rewrite_gates.py whose CUDA-only part an NPU host still reaches another way
_REACHES_RAISE = re.compile(r"raises unless the device is CUDA|fails unless the device is CUDA")
# a "cuda" label kept in a test's device list: information already, with its own hint (probes.py)
_LABELLED = re.compile(r'the label "cuda"')
_CUDA_LABEL = re.compile(r"cuda(:\d+)?")
_EXITS = frozenset(("exit", "_exit", "abort", "skip", "fail", "skipTest", "xfail", "SkipTest"))
_SKIPS = frozenset(("skip", "skipTest", "SkipTest", "xfail"))
_SCOPES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)


def _parse(text: str) -> Optional[ast.Module]:
    body = text.encode("utf-8", "surrogatepass")
    return astcache.parse(body[3:] if body.startswith(b"\xef\xbb\xbf") else body)


class _File:
    def __init__(self, tree: ast.Module, text: str) -> None:
        self.tree = tree
        self.lines = text.splitlines()
        self.parents: dict[int, ast.AST] = astcache.parents(tree)
        self.starting: dict[int, list[ast.expr]] = {}  # line -> the expressions starting there
        for node in astcache.nodes(tree, ast.expr):
            self.starting.setdefault(node.lineno, []).append(node)

    def column(self, node: ast.AST) -> int:
        """The 1-based character column of a node (ast gives UTF-8 byte offsets)."""
        line = self.lines[node.lineno - 1] if 0 < node.lineno <= len(self.lines) else ""
        return len(line.encode("utf-8", "surrogatepass")[:node.col_offset].decode("utf-8", "replace")) + 1

    def check_at(self, line: int, column: int) -> Optional[ast.AST]:
        """The check a finding points at: the innermost expression starting at (line, column)
        and the calls, attributes and comparison it heads (`torch.cuda.is_available()` at
        `torch`, `x.device.type != "cuda"` at `x`, `x.type in ("cuda", "xpu")` at the list), not
        the `and`/`or` chain around it."""
        best: Optional[ast.AST] = None
        for node in self.starting.get(line, ()):
            if self.column(node) == column:
                if best is None or _size(node) < _size(best):
                    best = node
        if best is None:
            return None
        node = best
        while True:
            parent = self.parents.get(id(node))
            if ((isinstance(parent, ast.Attribute) and parent.value is node)
                    or (isinstance(parent, ast.Call) and parent.func is node)
                    or (isinstance(parent, ast.Subscript) and parent.value is node)
                    or (isinstance(parent, ast.Compare) and len(parent.ops) == 1)):
                # (a device list is the check with its comparison: `device.type in ("cuda", "xpu")`)
                node = parent
                continue
            return node

    def up(self, node: ast.AST):
        """(node, parent) pairs from `node` up to the module."""
        while True:
            parent = self.parents.get(id(node))
            if parent is None:
                return
            yield node, parent
            node = parent

    def scope_of(self, node: ast.AST) -> ast.AST:
        for _child, parent in self.up(node):
            if isinstance(parent, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Module)):
                return parent
        return self.tree


def _size(node: ast.AST) -> tuple[int, int]:
    """Where a node ends (of nodes starting at one place, the inner one ends first)."""
    return (node.end_lineno or node.lineno, node.end_col_offset or 0)


def _polarity(test: ast.AST, check: ast.AST) -> Optional[bool]:
    """True when `test` can only hold with the check, or holds without it only through other
    (non-device) operands of an `or`, as on any machine without CUDA; False when it holds where
    the check is false; None when the check is inside a call or something else."""
    node, positive = test, True
    while node is not check:
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
            positive, node = not positive, node.operand
        elif isinstance(node, ast.BoolOp):
            inner = next((v for v in node.values if _holds(v, check)), None)
            if inner is None:
                return None
            node = inner
        elif isinstance(node, ast.Compare) and len(node.ops) == 1 and _holds(node, check):
            # `check != "cuda"`: the comparison is the check
            flip = isinstance(node.ops[0], (ast.NotEq, ast.IsNot, ast.NotIn))
            return positive != flip
        else:
            return None
    if isinstance(check, ast.Compare) and len(check.ops) == 1 and isinstance(check.ops[0], (ast.NotEq, ast.IsNot, ast.NotIn)):
        positive = not positive
    return positive


def _is_check(node: ast.AST) -> bool:
    """A device check: a comparison (`x.device.type == "cuda"`), an availability call, `.is_cuda`."""
    if isinstance(node, ast.Compare):
        return True
    if isinstance(node, ast.Call):
        return _call_name(node) in ("is_available", "is_cuda")
    return isinstance(node, ast.Attribute) and node.attr == "is_cuda"


def _holds(node: ast.AST, check: ast.AST) -> bool:
    return any(sub is check for sub in ast.walk(node))


def _walk_here(nodes):
    """The nodes of statements, without nested functions or classes."""
    stack = list(nodes)
    while stack:
        node = stack.pop()
        yield node
        stack.extend(c for c in ast.iter_child_nodes(node) if not isinstance(c, _SCOPES))


def _call_name(node: ast.AST) -> str:
    func = node.func if isinstance(node, ast.Call) else node
    return (astcache.dotted(func) or "").rsplit(".", 1)[-1]


def _exits(block: list) -> Optional[str]:
    """What in the block raises, asserts, exits or skips, or None."""
    for node in _walk_here(block):
        if isinstance(node, ast.Raise):
            return "raises"
        if isinstance(node, ast.Assert) and isinstance(node.test, ast.Constant) and not node.test.value:
            return "asserts"
        if isinstance(node, ast.Call) and _call_name(node) in _EXITS:
            return f"calls `{_call_name(node)}`"
    return None


def _skips(block: list) -> bool:
    """The block skips a test (`pytest.skip(...)`, `self.skipTest(...)`, `raise SkipTest`)."""
    for node in _walk_here(block):
        if isinstance(node, ast.Call) and _call_name(node) in _SKIPS:
            return True
        if isinstance(node, ast.Raise) and node.exc is not None and _call_name(node.exc) in _SKIPS:
            return True
    return False


_CUDA_BUILD_FACTS = re.compile(r"^torch\.version\.(cuda|hip)$|(^|\.)get_device_capability$")
_REQUIREMENT_NAMES = frozenset(("torch", "version", "packaging", "int", "float", "tuple"))


def _cuda_requirement_skips(block: list) -> bool:
    """Every statement of the block is `if <a CUDA build fact>: <skip the test>`: the test reads
    only `torch.version.cuda` / `torch.version.hip` / `get_device_capability()` (through
    `version.parse(...)`), and the body is one skip (optimum-quanto's `if device.type == "cuda":
    if torch.version.hip: pytest.skip(...)`, `if version.parse(torch.version.cuda).release <
    (12, 1): pytest.skip(...)`)."""
    if not block:
        return False
    for stmt in block:
        if not (isinstance(stmt, ast.If) and not stmt.orelse and len(stmt.body) == 1 and _skips(stmt.body)):
            return False
        names = {n.id for n in ast.walk(stmt.test) if isinstance(n, ast.Name)}
        dotted = [astcache.dotted(n) or "" for n in ast.walk(stmt.test) if isinstance(n, ast.Attribute)]
        if not names <= _REQUIREMENT_NAMES or not any(_CUDA_BUILD_FACTS.search(d) for d in dotted):
            return False
    return True


def _labels(node: ast.AST) -> bool:
    return any(isinstance(n, ast.Constant) and isinstance(n.value, str) and _CUDA_LABEL.fullmatch(n.value)
               for n in ast.walk(node))


def _bound(block: list) -> set[str]:
    names: set[str] = set()
    for node in _walk_here(block):
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.add(node.id)
        elif isinstance(node, ast.alias) and node.name != "*":
            names.add((node.asname or node.name).split(".")[0])
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
    return names


_NPU_COUNTERPART = re.compile(r"\btorch\.npu\.|\btorch_npu\.")


class _Judge:
    def __init__(self, file: _File, findings: list[Finding]) -> None:
        self.file = file
        # CUDA-only code the run reports (not rewritten): what a fall-through must not reach
        self.reported = sorted({f.line for f in findings if not f.fixable and f.cell is None
                                and f.severity in ("error", "warning") and f.code not in ("NPU110", "NPU108")})
        # CUDA-only calls the run reports with an NPU counterpart named in the message (`torch.cuda.
        # memory._record_memory_history` -> torch.npu.memory._record_memory_history): a branch
        # holding one is a feature the NPU host has and silently skips, not a fallback
        self.npu_has = sorted({f.line for f in findings if not f.fixable and f.cell is None
                               and _NPU_COUNTERPART.search(f.message)})

    def why(self, gate: Finding) -> Optional[str]:
        if _REACHES_RAISE.search(gate.message) or _LABELLED.search(gate.message):
            return None
        check = self.file.check_at(gate.line, gate.column)
        if check is None or not _is_check(check):
            return None  # (a device value kept CUDA, a call's argument: not a check with two paths)
        for child, parent in self.file.up(check):
            if isinstance(parent, ast.If) and child is parent.test:
                return self._if(parent, check)
            if isinstance(parent, ast.IfExp) and child is parent.test:
                return self._ifexp(parent, check)
            if isinstance(parent, ast.Return):
                return self._returned(parent, check)
            if isinstance(parent, ast.Assign):
                return self._assigned(parent, check)
            if isinstance(parent, (ast.stmt, *_SCOPES, ast.comprehension)):
                return None
        return None

    # ------------------------------------------------------------------ an `if`
    def _if(self, statement: ast.If, check: ast.AST) -> Optional[str]:
        polarity = _polarity(statement.test, check)
        if polarity is None:
            return None
        if polarity:  # the body is the CUDA path: the NPU host takes the `else` or falls through
            if (_cuda_requirement_skips(statement.body) and not statement.orelse
                    and not self._next_exits(statement) and self._falls_through_cleanly(statement)):
                # (the test's own checks follow the `if`; only CUDA's build requirements are skipped)
                return ("its CUDA branch only skips the test on CUDA build requirements (ROCm, the CUDA "
                        "runtime's version, the compute capability), which do not apply to an NPU device")
            if _exits(statement.orelse) or _skips(statement.body) or self._in_test(statement):
                return None
            if self._npu_has_it(statement.body):
                return None
            if self._reported_in(statement.orelse) or self._next_exits(statement):
                return None
            if not self._falls_through_cleanly(statement):
                return None
            if statement.orelse:
                return "the `else` branch runs there, as on any machine without CUDA"
            return "it skips the CUDA branch and goes on, as any machine without CUDA does"
        # the body is the NPU host's path: a fallback that returns, or the CUDA code is the `else`
        if _exits(statement.body) or self._reported_in(statement.body):
            return None
        last = statement.body[-1] if statement.body else None
        if isinstance(last, ast.Return):
            if last.value is not None and _labels(last.value):
                return None
            return "it returns the fallback of the branch for hosts without CUDA"
        if isinstance(last, (ast.Continue, ast.Break)):
            return "it leaves the loop step for hosts without CUDA"
        if statement.orelse and self._falls_through_cleanly(statement, body=statement.orelse):
            return "it runs the branch for hosts without CUDA"
        return None

    def _npu_has_it(self, block: list) -> bool:
        """The CUDA branch calls what torch_npu has under another name: the NPU host skips a
        feature it could run (torchtune's memory-history recording): port it, not a fallback."""
        spans = [(b.lineno, b.end_lineno or b.lineno) for b in block]
        return any(a <= line <= b for line in self.npu_has for a, b in spans)

    def _reported_in(self, block: list) -> bool:
        """The branch an NPU host takes holds a CUDA-only reference the run reports."""
        spans = [(b.lineno, b.end_lineno or b.lineno) for b in block]
        return any(a <= line <= b for line in self.reported for a, b in spans)

    def _next_exits(self, statement: ast.stmt) -> bool:
        """The statements after the `if` in its block raise or exit (`raise RuntimeError("needs
        CUDA")`): falling through is not a fallback."""
        parent = self.file.parents.get(id(statement))
        for field in ("body", "orelse", "finalbody", "handlers"):
            block = getattr(parent, field, None)
            if isinstance(block, list) and statement in block:
                after = block[block.index(statement) + 1:]
                return any(isinstance(s, ast.Raise) or (isinstance(s, ast.Assert) and isinstance(s.test, ast.Constant)
                                                        and not s.test.value)
                           or (isinstance(s, ast.Expr) and isinstance(s.value, ast.Call)
                               and _call_name(s.value) in _EXITS) for s in after)
        return False

    def _reads(self, scope: ast.AST) -> list[ast.Name]:
        """The names a scope reads: a function's own body; at module level the whole file (its
        functions read the module's names whenever they are called)."""
        nodes = ast.walk(scope) if isinstance(scope, ast.Module) else _walk_here(scope.body)
        return [n for n in nodes if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)]

    def _in_test(self, statement: ast.stmt) -> bool:
        """The check is in a test function: skipping its CUDA branch leaves a test that passes
        without checking anything on an NPU host (runs, but differs)."""
        scope = self.file.scope_of(statement)
        return getattr(scope, "name", "").startswith("test")

    def _falls_through_cleanly(self, statement: ast.stmt, body: Optional[list] = None) -> bool:
        """Nothing after `statement` in its function needs what the CUDA branch set up, and no
        CUDA-only call the run reports follows it unguarded."""
        scope = self.file.scope_of(statement)
        end = statement.end_lineno or statement.lineno
        body = statement.body if body is None else body
        needed = _bound(body) - _bound(getattr(statement, "orelse", []) if body is statement.body else statement.body)
        if needed:
            before = {n.id for n in _walk_here(scope.body if hasattr(scope, "body") else [])
                      if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store) and n.lineno < statement.lineno}
            before |= {(a.asname or a.name).split(".")[0] for n in _walk_here(scope.body)
                       if isinstance(n, (ast.Import, ast.ImportFrom)) and n.lineno < statement.lineno
                       for a in n.names}
            if isinstance(scope, (ast.FunctionDef, ast.AsyncFunctionDef)):
                arguments = scope.args
                before |= {a.arg for a in (*arguments.posonlyargs, *arguments.args, *arguments.kwonlyargs,
                                           arguments.vararg, arguments.kwarg) if a is not None}
            rebound = self._rebound_after(statement, needed)
            for node in self._reads(scope):
                # (at module level a function defined before the check reads it when called)
                if node.id in needed and node.id not in before and (
                        node.lineno > end or (isinstance(scope, ast.Module) and node.lineno < statement.lineno)):
                    if node.id in rebound and node.lineno > rebound[node.id]:
                        continue  # the fall-through binds it again before this read
                    return False
        return not self._reported_after(scope, statement, end)

    def _rebound_after(self, statement: ast.stmt, names: set[str]) -> dict[str, int]:
        """Of `names`, those a plain assignment after `statement`, in the same block and not
        nested in a branch, binds again: name -> the last line of the first such assignment
        (`if x.is_cuda: ... output = kernel(...); return output` then `output = fallback(...)`)."""
        parent = self.file.parents.get(id(statement))
        for field in ("body", "orelse", "finalbody"):
            block = getattr(parent, field, None)
            if isinstance(block, list) and statement in block:
                break
        else:
            return {}
        rebound: dict[str, int] = {}
        for later in block[block.index(statement) + 1:]:
            if isinstance(later, ast.Assign):
                targets = later.targets
            elif isinstance(later, ast.AnnAssign) and later.value is not None:
                targets = [later.target]
            else:
                continue
            for target in targets:
                for node in ast.walk(target):
                    if isinstance(node, ast.Name) and node.id in names and node.id not in rebound:
                        rebound[node.id] = later.end_lineno or later.lineno
        return rebound

    def _reported_after(self, scope: ast.AST, statement: ast.stmt, end: int) -> bool:
        last = scope.end_lineno if isinstance(scope, (ast.FunctionDef, ast.AsyncFunctionDef)) else None
        lines = [line for line in self.reported if line > end and (last is None or line <= last)]
        if not lines:
            return False
        # a line inside a later `if` (another check) or `try` is guarded there, one in a function
        # defined later is not run by falling through
        guarded: list[tuple[int, int]] = []
        for node in ast.walk(scope):
            if node is scope:
                continue
            if isinstance(node, (ast.If, ast.Try, *_SCOPES)) and node.lineno > end:
                guarded.append((node.lineno, node.end_lineno or node.lineno))
        return any(not any(a <= line <= b for a, b in guarded) for line in lines)

    # ------------------------------------------------------------------ expressions
    def _ifexp(self, expression: ast.IfExp, check: ast.AST) -> Optional[str]:
        polarity = _polarity(expression.test, check)
        if polarity is None:
            return None
        other = expression.orelse if polarity else expression.body
        if _labels(other) or self._reported_in([other]):
            return None
        return "the other arm of the conditional expression runs there"

    def _returned(self, statement: ast.Return, check: ast.AST) -> Optional[str]:
        """`return _TRITON_AVAILABLE and x.device.type == "cuda"`: the predicate answers False
        on an NPU host, as on any machine without CUDA, and its callers take their other path."""
        value = statement.value
        if value is None or _polarity(value, check) is not True or isinstance(value, ast.IfExp):
            return None
        function = self.file.scope_of(statement)
        name = getattr(function, "name", None)
        if name is None:
            return None
        return f"`{name}()` answers False there and its callers take their other path"

    def _assigned(self, statement: ast.Assign, check: ast.AST) -> Optional[str]:
        """`on_cuda = x.device.type == "cuda"` then only tested: each test judged as the check."""
        if len(statement.targets) != 1 or not isinstance(statement.targets[0], ast.Name):
            return None
        if _polarity(statement.value, check) is not True:
            return None
        name = statement.targets[0].id
        scope = self.file.scope_of(statement)
        uses = [n for n in self._reads(scope) if n.id == name and n.lineno >= statement.lineno]
        if not uses:
            return None
        whys = []
        for use in uses:
            why = None
            for child, parent in self.file.up(use):
                if isinstance(parent, ast.If) and child is parent.test:
                    why = self._if(parent, use)
                    break
                if isinstance(parent, ast.IfExp) and child is parent.test:
                    why = self._ifexp(parent, use)
                    break
                if isinstance(parent, ast.Return):
                    why = self._returned(parent, use)
                    break
                if isinstance(parent, (ast.stmt, *_SCOPES, ast.comprehension)):
                    break
            if why is None:
                return None
            whys.append(why)
        return f"it is kept in `{name}`, and {whys[0]}"


# a comparison with "cuda" kept because its branch uses a CUDA-only feature (info already): the
# same judgement names it as a scope when the other path is the code's own fallback
FEATURE_GATE = "NPU108"


def lower_fallback_gates(findings: list[Finding], text: str) -> list[Finding]:
    """NPU110 (and NPU108) findings whose check's other path is the code's own fallback, lowered
    to info with the reason FALLBACK (see the module docstring)."""
    gates = [f for f in findings if not f.fixable and f.cell is None and (
        (f.code == "NPU110" and f.severity != "info") or f.code == FEATURE_GATE)]
    if not gates:
        return findings
    tree = _parse(text)
    if tree is None:
        return findings
    try:
        judge = _Judge(_File(tree, text), findings)
        lowered = {}
        for gate in gates:
            why = judge.why(gate)
            if why:
                lowered[id(gate)] = replace(gate, severity="info", message=f"{gate.message} ({FALLBACK}: {why})")
    except RecursionError:
        return findings
    return [lowered.get(id(f), f) for f in findings]
