"""Code after a skip or a raise that fires unless an NVIDIA capability is present.

The round-14 audits of vLLM (issue #16) read findings as false that sit after a statement an NPU
host always leaves the block through, because it requires a compute capability the NPU never has
(the shim's `get_device_capability()` answers (0, 0); `current_platform.is_device_capability(89)`,
`has_device_capability(90)`, `is_sm_at_least_90()` are false there, testscopes._value):

- `if not (p.is_device_capability(89) or ...): raise ValueError("... only SM89 or SM12x")` then
  an FP8 return (AK#8): on an NPU host the function raises there, so what follows in the same
  block never runs. (reach.py's exits leave an ordinary `raise` alone: a failure should keep its
  findings in view. A raise whose condition is a capability check is the project's own "this
  device cannot run it", so the code after it is another device's code.)
- a test that first calls a helper of its file that `pytest.skip`s (or raises) on such a check,
  `_require_capability_and_cute((9, 0))` with `if torch.cuda.get_device_capability() !=
  capability: pytest.skip(...)` (AK#1): the rest of the test never runs there. The helper's
  parameters are read with the call's literal arguments (a tuple, a number); a helper that calls
  another such helper first counts too (a few levels).
- a raise unless another vendor's platform (round 28 CB#19): `if not current_platform.is_rocm():
  raise RuntimeError("This benchmark requires the ROCm platform.")` in a script's `__main__` block
  (or any block): the code after it is that platform's, as platforms.py names another vendor's
  files (`other_vendor_test`: `not <ROCm/HIP/XPU predicate>`, scopes.toml [platform] rocm_flag and
  false_calls, `torch.version.hip`). A raise unless CUDA (`not current_platform.is_cuda()`) is
  the port's own work (the check would be widened) and keeps what follows reported.

`exit_reason(stmt, ...)` answers for one statement of a block; reach.untaken makes the rest of the
block a block an NPU host never runs (a named skipped scope, moot.py: "in a branch an NPU host
does not take: after a capability skip ..."). Code before the exit, and a capability check that
only chooses a faster path (no exit), are left alone. Nothing here changes what is rewritten.
"""

from __future__ import annotations

import ast
import copy
import functools
import re

from . import astcache, catalogue

_dotted = astcache.dotted

# calls that ask for an NVIDIA compute capability or architecture
_CAPABILITY = re.compile(r"capability|(^|_)sm_?\d{2,3}(?![0-9])|sm_at_least|sm_version|hopper|blackwell",
                         re.IGNORECASE)
_SKIPS = frozenset({"skip", "SkipTest", "fail"})
_DEPTH = 3  # helpers calling helpers


def capability_test(test: ast.AST) -> bool:
    """Whether a condition calls a capability check (`is_device_capability(89)`,
    `torch.cuda.get_device_capability() != (9, 0)`, `is_sm_at_least_90()`)."""
    for node in ast.walk(test):
        if isinstance(node, ast.Call):
            name = (_dotted(node.func) or "").rpartition(".")[2]
            if name and _CAPABILITY.search(name):
                return True
    return False


_OTHER_VENDOR_METHODS = re.compile(r"^_?is_(xpu|hpu|tpu|mps|navi)$")


def other_vendor_test(test: ast.AST) -> bool:
    """Whether a condition is `not <predicate of another vendor's platform>` (`not
    current_platform.is_rocm()`, `not _is_hip`, `not torch.version.hip`, `not
    torch.xpu.is_available()`): true on every host but that vendor's, an NPU host included."""
    if not (isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not)):
        return False
    operand = test.operand
    platform = catalogue.read_table("scopes.toml")["platform"]
    if isinstance(operand, ast.Call) and not operand.args and not operand.keywords:
        name = _dotted(operand.func) or ""
        last = name.rpartition(".")[2]
        return bool(re.fullmatch(platform["rocm_flag"], last) or _OTHER_VENDOR_METHODS.match(last)
                    or name in platform.get("false_calls", ()))
    name = _dotted(operand) or ""
    return name == "torch.version.hip" or bool(re.fullmatch(platform["rocm_flag"], name.rpartition(".")[2]))


def _leaves(stmt: ast.stmt) -> bool:
    """A raise of an exception (not a bare re-raise), `pytest.skip(...)`, `pytest.fail(...)`."""
    if isinstance(stmt, ast.Raise):
        return stmt.exc is not None
    if isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call):
        return (_dotted(stmt.value.func) or "").rpartition(".")[2] in _SKIPS
    return False


def _may_return(stmt: ast.stmt) -> bool:
    """Whether a statement may return from the function it is in (nested functions aside)."""
    stack = [stmt]
    while stack:
        node = stack.pop()
        if isinstance(node, (ast.Return, ast.Yield, ast.YieldFrom, ast.Await)):
            return True
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)):
            continue
        stack.extend(ast.iter_child_nodes(node))
    return False


def _literal(node: ast.AST) -> bool:
    if isinstance(node, ast.Constant):
        return True
    if isinstance(node, (ast.Tuple, ast.List)):
        return all(_literal(e) for e in node.elts)
    return isinstance(node, ast.UnaryOp) and isinstance(node.operand, ast.Constant)


class _Bind(ast.NodeTransformer):
    """The helper's parameters replaced by the call's literal arguments (lambdas19.py: a lambda's
    parameters by its call's arguments)."""

    def __init__(self, values: dict):
        self.values = values

    def visit_Name(self, node: ast.Name):
        if isinstance(node.ctx, ast.Load) and node.id in self.values:
            return ast.copy_location(copy.deepcopy(self.values[node.id]), node)
        return node


def _bindings(function: ast.FunctionDef, call: ast.Call) -> dict:
    """{parameter: literal argument} of a call of `function` (defaults included), leaving out
    parameters the function assigns again."""
    args = function.args
    if args.vararg or args.kwarg or any(isinstance(a, ast.Starred) for a in call.args) \
            or any(k.arg is None for k in call.keywords):
        return {}
    positional = [*args.posonlyargs, *args.args]
    values: dict = {}
    defaults = dict(zip([a.arg for a in positional][len(positional) - len(args.defaults):], args.defaults))
    defaults.update({a.arg: d for a, d in zip(args.kwonlyargs, args.kw_defaults) if d is not None})
    values.update(defaults)
    for parameter, value in zip(positional, call.args):
        values[parameter.arg] = value
    for keyword in call.keywords:
        values[keyword.arg] = keyword.value
    stored = {n.id for n in ast.walk(function) if isinstance(n, ast.Name) and not isinstance(n.ctx, ast.Load)}
    return {k: v for k, v in values.items() if _literal(v) and k not in stored}


def _module_helpers(tree: ast.Module) -> dict[str, ast.FunctionDef]:
    """The module-level functions defined once (plain `def`, undecorated, no generator), by name."""
    seen: dict[str, list] = {}
    for stmt in tree.body:
        if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            seen.setdefault(stmt.name, []).append(stmt)
        elif isinstance(stmt, (ast.Assign, ast.AnnAssign, ast.Import, ast.ImportFrom)):
            for node in ast.walk(stmt):
                if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
                    seen.setdefault(node.id, []).append(stmt)
                elif isinstance(node, ast.alias):
                    seen.setdefault((node.asname or node.name).split(".")[0], []).append(stmt)
    return {name: defs[0] for name, defs in seen.items()
            if len(defs) == 1 and isinstance(defs[0], ast.FunctionDef) and not defs[0].decorator_list
            and not any(isinstance(n, (ast.Yield, ast.YieldFrom)) for n in ast.walk(defs[0]))}


def _helper_exit(function: ast.FunctionDef, call: ast.Call, helpers: dict, truth, segment, lines,
                 depth: int) -> str | None:
    """The reason a call of `function` never returns on an NPU host, or None: before anything
    that may return, an `if <capability check true there>: pytest.skip/raise`, or a call of
    another such helper."""
    if depth > _DEPTH:
        return None
    values = _bindings(function, call)
    body = function.body
    if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
        body = body[1:]
    stored, capability_names = None, set()
    for stmt in body:
        if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.value, ast.Call) \
                and _dotted(stmt.value.func) in _zero_capability_calls():
            if stored is None:
                stored = [n.id for n in ast.walk(function) if isinstance(n, ast.Name) and not isinstance(n.ctx, ast.Load)]
            bound = _capability_names(stmt.targets[0], stored)
            values, capability_names = {**values, **bound}, capability_names | set(bound)
        if isinstance(stmt, ast.If) and stmt.body and _leaves(stmt.body[-1]) and (
                capability_test(stmt.test) or any(isinstance(n, ast.Name) and n.id in capability_names for n in ast.walk(stmt.test))):
            test = _Fold().visit(_Bind(values).visit(copy.deepcopy(stmt.test))) if values else stmt.test
            if truth(test) is True:
                return f"`{function.name}` {_verb(stmt.body[-1])} on `{segment(lines, stmt.test)}`"
        asked = importorskip_module(stmt)
        if asked is not None and asked.split(".")[0] in catalogue.absent_packages():
            return f'`{function.name}` skips on `pytest.importorskip("{asked}")` (no NPU build)'
        inner = _call_of(stmt, helpers)
        if inner is not None:
            callee, inner_call = inner
            bound = _Bind(values).visit(copy.deepcopy(inner_call)) if values else inner_call
            why = _helper_exit(callee, bound, helpers, truth, segment, lines, depth + 1)
            if why is not None:
                return f"`{function.name}` calls {why}"
        if _may_return(stmt):
            return None
    return None


@functools.cache
def _zero_capability_calls() -> frozenset:
    """rules/scopes.toml [npugates] zero_capability_calls: (0, 0) on an NPU host (the shim)."""
    return frozenset(catalogue.read_table("scopes.toml").get("npugates", {}).get("zero_capability_calls", ()))


def _capability_names(target: ast.AST, stored: list) -> dict:
    """`major, minor = torch.cuda.get_device_capability()` (each 0 there) or `cap = ...` ((0, 0)),
    for names bound only there."""
    zero = ast.Constant(0)
    if isinstance(target, ast.Name) and stored.count(target.id) == 1:
        return {target.id: ast.Tuple(elts=[zero, zero], ctx=ast.Load())}
    if isinstance(target, ast.Tuple) and all(isinstance(e, ast.Name) for e in target.elts):
        return {e.id: zero for e in target.elts if stored.count(e.id) == 1}
    return {}


class _Fold(ast.NodeTransformer):
    """A comparison of literals (`(0, 0) != (9, 0)`, `0 < 9`) as its value."""

    def visit_Compare(self, node: ast.Compare):
        self.generic_visit(node)
        operands = [node.left, *node.comparators]
        if not all(_literal(o) for o in operands):
            return node
        try:
            values = [ast.literal_eval(o) for o in operands]
            result = all(_COMPARE[type(op)](a, b) for op, a, b in zip(node.ops, values, values[1:]))
        except (KeyError, TypeError, ValueError):
            return node
        return ast.copy_location(ast.Constant(result), node)


_COMPARE = {ast.Eq: lambda a, b: a == b, ast.NotEq: lambda a, b: a != b, ast.Lt: lambda a, b: a < b,
            ast.LtE: lambda a, b: a <= b, ast.Gt: lambda a, b: a > b, ast.GtE: lambda a, b: a >= b,
            ast.In: lambda a, b: a in b, ast.NotIn: lambda a, b: a not in b}


def _verb(stmt: ast.stmt) -> str:
    return "raises" if isinstance(stmt, ast.Raise) else "skips"


def _call_of(stmt: ast.stmt, helpers: dict):
    """(the helper, the call) of a statement that only calls a module-level helper of the file,
    or binds its result (`deep_gemm = _skip_unless_sm100()`: a skip helper that returns the
    module it imported)."""
    value = _helper_call(stmt)
    if value is not None:
        function = helpers.get(value.func.id)
        if function is not None:
            return function, value
    return None


def importorskip_module(stmt: ast.stmt) -> str | None:
    """The module a `pytest.importorskip("pkg")` statement (bare or bound: `dg =
    pytest.importorskip(...)`) asks for, or None (probes15.py reads it too)."""
    value = stmt.value if isinstance(stmt, (ast.Expr, ast.Assign)) else None
    if isinstance(value, ast.Call) and value.args and isinstance(value.args[0], ast.Constant) \
            and isinstance(value.args[0].value, str) \
            and (_dotted(value.func) or "").rpartition(".")[2] == "importorskip":
        return value.args[0].value
    return None


def _helper_call(stmt: ast.stmt):
    """The call of a plain name a statement makes on its own (`f(...)`, `x = f(...)`), or None."""
    if isinstance(stmt, (ast.Expr, ast.Assign)) and isinstance(stmt.value, ast.Call) \
            and isinstance(stmt.value.func, ast.Name):
        return stmt.value
    return None


class Exits:
    """One file's exits on a capability check (the helpers read once, on first need)."""

    def __init__(self, tree: ast.Module, lines: list, truth, segment):
        self.tree, self.lines, self.truth, self.segment = tree, lines, truth, segment
        self._helpers: dict | None = None
        self._seen: dict = {}
        self._bound: dict | None = None  # (id of an `if` -> the capability names bound before it)

    def reason(self, stmt: ast.stmt) -> str | None:
        """Why nothing after `stmt` in its block runs on an NPU host, or None: `if <capability
        check true there>: raise ...` (a skip is reach.py's exit already), or a call of a helper of
        the file that skips or raises on such a check."""
        if isinstance(stmt, ast.If):
            if stmt.body and isinstance(stmt.body[-1], ast.Raise) and _leaves(stmt.body[-1]) \
                    and capability_test(stmt.test) and self.truth(stmt.test) is True:
                return (f"after a capability raise: `{self.segment(self.lines, stmt.test)}` is true on an NPU "
                        f"host, so it raises there")
            if stmt.body and isinstance(stmt.body[-1], ast.Raise) and _leaves(stmt.body[-1]):
                why = self._bound_raise(stmt)
                if why is not None:
                    return why
            if stmt.body and isinstance(stmt.body[-1], ast.Raise) and _leaves(stmt.body[-1]) \
                    and other_vendor_test(stmt.test) and self.truth(stmt.test) is True:
                return (f"after a raise unless another vendor's platform: `{self.segment(self.lines, stmt.test)}` "
                        f"is true on an NPU host, so it raises there (the code after it is that platform's)")
            return None
        if _helper_call(stmt) is None:
            return None
        if self._helpers is None:
            self._helpers = _module_helpers(self.tree)
        found = _call_of(stmt, self._helpers)
        if found is None:
            return None
        call = found[1]
        key = (call.func.id, tuple(ast.dump(a) if _literal(a) else None for a in call.args),
               tuple((k.arg, ast.dump(k.value) if _literal(k.value) else None) for k in call.keywords))
        if key not in self._seen:  # (a helper called from many tests is read once per argument list)
            self._seen[key] = _helper_exit(*found, self._helpers, self.truth, self.segment, self.lines, 1)
        why = self._seen[key]
        if why is None:
            return None
        return f"after a capability skip: `{self.segment(self.lines, stmt.value)}` never returns on an NPU host ({why})"


    def _bound_raise(self, stmt: ast.If) -> str | None:
        """Round-31 audit FB#24: `capability = torch.cuda.get_device_capability(device)` earlier in
        the same function (or module), bound only there, then `if ... or capability not in ((10, 0),
        (10, 3)): raise RuntimeError(...)`: the name is the shim's (0, 0) on an NPU host, as in a
        helper (`_helper_exit`); the test is read with it and folded (`in`/`not in` too)."""
        if self._bound is None:
            self._bound = _scope_capabilities(self.tree)
        values = self._bound.get(id(stmt))
        used = [n for n in (values or ()) if any(isinstance(x, ast.Name) and x.id == n for x in ast.walk(stmt.test))]
        if not used:
            return None
        if self.truth(_Fold().visit(_Bind(values).visit(copy.deepcopy(stmt.test)))) is not True:
            return None
        names = ", ".join(f"`{n}`" for n in used)
        return (f"after a capability raise: `{self.segment(self.lines, stmt.test)}` is true on an NPU host "
                f"({names} bound to `get_device_capability()`, the shim's (0, 0) there), so it raises there")


def _scope_capabilities(tree: ast.Module) -> dict:
    """{id of an `if` statement: {name: literal}} for the names its function (or the module) binds
    once, before it, to a zero-capability call (`_capability_names`)."""
    out: dict = {}
    for scope in ast.walk(tree):
        if not isinstance(scope, (ast.Module, ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        own = list(_own_walk(scope))
        binds = [n for n in own if isinstance(n, ast.Assign) and len(n.targets) == 1 and isinstance(n.value, ast.Call)
                 and _dotted(n.value.func) in _zero_capability_calls()]
        if not binds:
            continue
        stored = [n.id for n in own if isinstance(n, ast.Name) and not isinstance(n.ctx, ast.Load)]
        for node in own:
            if isinstance(node, ast.If):
                values: dict = {}
                for bind in binds:
                    if bind.lineno < node.lineno:
                        values.update(_capability_names(bind.targets[0], stored))
                if values:
                    out[id(node)] = values
    return out


def _own_walk(scope: ast.AST):
    """The nodes of a function or module, nested functions, lambdas and classes left out."""
    stack = list(ast.iter_child_nodes(scope))
    while stack:
        node = stack.pop()
        yield node
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)):
            stack.extend(ast.iter_child_nodes(node))


Substitute = _Bind  # (public for lambdas19.py)
