"""A function registered as a torch op whose every `torch.ops.<ns>.<op>` call lies in code an NPU
host never runs or selects (issue #16, round-22 audit BK#7). Whole run, from
runplan.whole_run_passes, right after callees22.py.

callees22.py carries callgates21's verdicts (a gate false there, a platform-dispatched op's CUDA
method, a backend never selected) from the callers to the callees, through the references of the
callee's name. A function a project registers as a custom op is called through the op's name
instead, so its one reference (the registration, a value handed on) kept its finding:

    # layers/rope_common.py
    def _fast_rope(positions, query, key):
        from flashinfer.rope import apply_rope_inplace        # NPU911: a named scope now
        apply_rope_inplace(positions, query, key)

    register_op(op_name="fast_rope", op_func=_fast_rope, mutates_args=["query", "key"])

    # layers/rope.py (another module)
    class Rope(CustomOp):
        def forward_native(self, positions, query, key): ...
        def forward_cuda(self, positions, query, key):
            if self.use_fast:
                torch.ops.proj.fast_rope(positions, query, key)   # the op's only call

Here a module-level function whose only reference in the run is one argument of a module-level
call that also holds a string naming the op (an identifier: `op_name="fast_rope"`, positional or
keyword), the op named nowhere else as a string, has as its references every
`torch.ops.<namespace>.<op>` attribute of the run (`.default` after it too). Each is read as
callees22 reads a reference (callgates21's gates, the CUDA method of a platform-dispatched op with
`forward_native`/`forward_oot`/`forward_npu`, a dispatch.gates span, a module imported only where
an NPU host does not go, a few callers deep); where every one lies in such code, at least one in
another module, the function's report-only findings become a named scope (flags16.BRANCH) naming
the op and its calls. Kept: a second reference of the function (a direct call, a value handed on
elsewhere), the op name in another string (`getattr(torch.ops.proj, "fast_rope")`), a call of the
op an NPU host may run (`forward_native`, a module-level function with no gate), no call at all.
"""

from __future__ import annotations

import ast
from typing import Optional

from .callees22 import Callees

_FUNCTIONS = (ast.FunctionDef, ast.AsyncFunctionDef)
_P2 = " (a test or benchmark)"  # (the mark of a test's call met a few callers up, moved to `tests`)


def _is_op(node: ast.Attribute) -> bool:
    """`torch.ops.<ns>.<attr>`."""
    from . import astcache

    parts = (astcache.dotted(node.value) or "").split(".")
    return len(parts) == 3 and parts[:2] == ["torch", "ops"]


def _op_uses(tree: ast.Module, op: str) -> list[ast.Attribute]:
    """The `torch.ops.<ns>.<op>` attributes of the tree."""
    from . import astcache

    return [node for node in astcache.walk(tree) if isinstance(node, ast.Attribute) and node.attr == op
            and _is_op(node)]


def gated_name(tree: ast.Module, node: ast.AST) -> Optional[str]:
    """Why a reference by a bare name (`Pass(config)`) never reaches what it names on an NPU host:
    every binding of the name in its module (an import, a `def`, a `class`, an assignment) lies in
    the body of a module-level `if` false there (`if current_platform.is_cuda_alike(): from .x
    import Pass`), and no function binds it locally: there the name is unbound, so the reference
    raises NameError before it calls anything (round 28, CB#21: a fusion pass imported only on
    CUDA-alike platforms). None where any binding may run there."""
    from . import astcache
    from .testscopes import npu_truth

    if not isinstance(node, ast.Name):
        return None
    name = node.id

    def binds(stmt: ast.AST) -> bool:
        if isinstance(stmt, (ast.Import, ast.ImportFrom)):
            return any((a.asname or a.name.split(".")[0]) == name for a in stmt.names)
        if isinstance(stmt, (*_FUNCTIONS, ast.ClassDef)):
            return stmt.name == name
        targets = stmt.targets if isinstance(stmt, ast.Assign) else (
            [stmt.target] if isinstance(stmt, (ast.AnnAssign, ast.AugAssign, ast.For)) else [])
        return any(isinstance(t, ast.Name) and t.id == name for target in targets for t in ast.walk(target))

    gates = []
    for stmt in tree.body:
        if isinstance(stmt, ast.If):
            inner = [s for s in astcache.walk(stmt) if isinstance(s, ast.stmt) and binds(s)]
            if not inner:
                continue
            if npu_truth(stmt.test) is not False or any(binds(s) for s in stmt.orelse) or \
                    any(binds(s) for o in stmt.orelse for s in astcache.walk(o) if isinstance(s, ast.stmt)):
                return None
            gates.append(stmt)
        elif any(binds(s) for s in astcache.walk(stmt) if isinstance(s, ast.stmt)):
            return None  # (bound outside such a gate: a function's own local, a plain import)
    if not gates:
        return None
    shown = ast.unparse(gates[0].test)
    return f"`{name}` is bound only under the module-level `if {shown}:`, false on an NPU host"


class _OpCallees(Callees):
    """callees22's reading, with a registered op's calls standing for its function's references."""

    def __init__(self, run, spans: dict, modules: dict) -> None:
        super().__init__(run, spans, modules)
        self.ops: dict = {}  # ((module, function name) -> the op's name)
        self.tests: dict = {}  # ((module, function name) -> the op's calls in tests and benchmarks, policy P2)

    def registered(self, i: int, unit: ast.AST) -> Optional[str]:
        """The op name `unit` (a module-level function of module i) is registered under, or None."""
        from . import astcache

        if not isinstance(unit, _FUNCTIONS):
            return None
        tree = self.run.tree(i)
        if tree is None:
            return None
        found = []
        for stmt in tree.body:
            call = stmt.value if isinstance(stmt, (ast.Expr, ast.Assign)) else None
            if not isinstance(call, ast.Call):
                continue
            values = [*call.args, *(k.value for k in call.keywords)]
            if not any(isinstance(v, ast.Name) and v.id == unit.name for v in values):
                continue
            names = [v.value for v in values if isinstance(v, ast.Constant) and isinstance(v.value, str)
                     and v.value.isidentifier()]
            if len(names) != 1:
                return None
            found.append((names[0], call))
        if len(found) != 1:
            return None
        op, call = found[0]
        # (the function's only reference is that argument; the op's name no other string)
        for j, result in enumerate(self.run.results):
            data = self.run.text_of(j) or b""
            if not result.relpath.endswith(".py") or (unit.name.encode() not in data and op.encode() not in data):
                continue
            other = self.run.tree(j)
            if other is None:
                return None
            for node in astcache.walk(other):
                if isinstance(node, ast.Name) and node.id == unit.name and not (j == i and node in call.args) \
                        and not (j == i and any(node is k.value for k in call.keywords)):
                    return None
                if isinstance(node, ast.Attribute) and node.attr == unit.name and not (
                        op == unit.name and _is_op(node)):
                    return None  # (`torch.ops.<ns>.<op>` of an op named as its function: the op's call)
                if isinstance(node, ast.Constant) and node.value == op and not (
                        j == i and (node in call.args or any(node is k.value for k in call.keywords))):
                    return None
        return op

    def dead(self, j: int, tree: ast.Module, parents: dict, node: ast.AST) -> Optional[str]:
        why = super().dead(j, tree, parents, node)
        return why if why is not None else gated_name(tree, node)

    def _handle_only(self, tree: ast.Module, parents: dict, node: ast.AST) -> bool:
        """`node` is the op of a module-level `NAME = torch.ops.<ns>.<op>[.default]` whose NAME no
        file of the run calls (`NAME(`): the op's handle kept as data (a fusion pass's pattern list,
        a test's expected ops), which calls nothing."""
        import re

        value = node
        up = parents.get(id(value))
        if isinstance(up, ast.Attribute) and up.attr == "default":
            value = up
        stmt = parents.get(id(value))
        if not (isinstance(stmt, ast.Assign) and stmt.value is value and stmt in tree.body
                and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name)):
            return False
        called = re.compile(rb"\b" + re.escape(stmt.targets[0].id.encode()) + rb"\s*\(")
        return not any(called.search(self.run.text_of(j) or b"") for j, r in enumerate(self.run.results)
                       if r.relpath.endswith(".py"))

    def _sites(self, i: int, unit: ast.AST, depth: int, seen: frozenset) -> Optional[list]:
        from . import astcache
        from .callgates21 import unit_of
        from .testcallers27 import test_side

        if depth > 0:
            return super()._sites(i, unit, depth, seen)
        op = self.registered(i, unit)
        if op is None:
            return None
        self.ops[(i, unit.name)] = op
        found: list = []
        tests: list = []
        for j, result in enumerate(self.run.results):
            if not result.relpath.endswith(".py") or f".{op}".encode() not in (self.run.text_of(j) or b""):
                continue
            tree = self.run.tree(j)
            if tree is None:
                return None
            parents = astcache.parents(tree)
            for node in _op_uses(tree, op):
                if test_side(result.relpath):  # (policy P2: a test's or benchmark's call, named, not "reached")
                    tests.append(f"{result.relpath}:{node.lineno}")
                    continue
                if self._handle_only(tree, parents, node):
                    continue  # (`OP = torch.ops.ns.op.default` at module level, OP never called: no call)
                why = self.dead(j, tree, parents, node)
                if why is not None:
                    found.append((j, f"{result.relpath}:{node.lineno} ({why})"))
                    continue
                outer = unit_of(tree, node.lineno)
                if outer is None:
                    return None
                inner = self.sites(j, outer, depth + 1, seen)
                if inner is None:
                    return None
                found.extend(inner)
        # (a test's or benchmark's call of a caller further up: named with the op's own, policy P2)
        tests.extend(s[:-len(_P2)] for _j, s in found if s.endswith(_P2))
        found = [(j, s) for j, s in found if not s.endswith(_P2)]
        self.tests[(i, unit.name)] = tests
        return found or None

    def test_file(self, relpath: str) -> bool:
        from .testcallers27 import test_side

        return test_side(relpath)

    def live_reference(self, j: int, relpath: str, node: ast.AST, parents: dict, test_file: bool) -> Optional[tuple]:
        """A test's or benchmark's call of a function between the op and its function (policy P2:
        `vit_wrapper` calls `torch.ops.vllm.wrapper`, a test calls `vit_wrapper`): named, not
        "reached" (round-30 EB#3)."""
        return (j, f"{relpath}:{node.lineno}{_P2}") if test_file else None


def review(results: list, paths: dict) -> list:
    """The results, with the report-only findings of this module's docstring lowered to named
    scopes."""
    from .callees22 import never_imported
    from .callgates21 import lower_units
    from .dispatch import gates as dispatch_gates
    from .flags16 import BRANCH
    from .importgates import is_test
    from .modpaths import RunTexts
    from .moot import is_moot, to_scopes
    from .testcallers27 import ONLY_TESTS

    def open_finding(f) -> bool:
        return not f.fixable and f.cell is None and not is_moot(f)

    candidates = [i for i, r in enumerate(results)
                  if r.relpath.endswith(".py") and any(open_finding(f) for f in r.findings)]
    if not candidates:
        return results
    text_of = RunTexts(results, paths)
    # (only modules registering a function of theirs with a module-level call: a cheap first look)
    candidates = [i for i in candidates if b"op" in (text_of(i) or b"")]
    if not candidates:
        return results
    python = [i for i, r in enumerate(results) if r.relpath.endswith(".py")]

    def reason(callees, i: int, unit) -> Optional[str]:
        if not isinstance(unit, _FUNCTIONS):
            return None
        found = callees.sites(i, unit)
        if not found or not any(j != i for j, _s in found):
            return None
        op = callees.ops.get((i, unit.name), "")
        found = sorted(dict.fromkeys(found), key=lambda item: is_test(item[1].split(":", 1)[0]))
        shown = "; ".join(s for _j, s in found[:2]) + (f"; and {len(found) - 2} more" if len(found) > 2 else "")
        tests = callees.tests.get((i, unit.name)) or []
        if tests:  # (policy P2: info naming the tests and benchmarks that call the op, never a scope)
            named = ", ".join(tests[:3]) + (f" and {len(tests) - 3} more" if len(tests) > 3 else "")
            return (f"{ONLY_TESTS} ({named}): `{unit.name}`, registered as the op `{op}`; its library "
                    f"calls are code an NPU host never runs or selects: {shown}")
        return (f"{BRANCH}: `{unit.name}`, registered as the op `{op}`, is reached only through "
                f"`torch.ops.*.{op}` in code an NPU host never runs or selects: {shown}")

    def start():
        from .flagcalls19 import Run

        run = Run(results, text_of)
        return run, _OpCallees(run, dispatch_gates(results, python, text_of), never_imported(results))

    out = lower_units(results, text_of, candidates, open_finding, start, reason)
    changed_files = [i for i in range(len(out)) if out[i] is not results[i]]
    if not changed_files:
        return out
    scoped = to_scopes([out[i] for i in changed_files])
    for i, result in zip(changed_files, scoped):
        out[i] = result
    return out
