"""Same-file reachability: code an NPU host never reaches, shown from guards in the same file.

testscopes.py knows conditions that are false on an NPU host on their own (`current_platform.
is_rocm()`, `torch.version.cuda`). Real projects put one step between such a condition and the
CUDA-only code it guards, in the same file (issue #16 audits):

- a flag handed down: `use_cudagraph = n >= 1024 and current_platform.is_cuda_alike()`, then
  `run(..., use_cudagraph=use_cudagraph)` and `if use_cudagraph:` inside `run`: a parameter that
  every call in the file leaves at a false default or passes a value false on an NPU host;
- a local or module name bound once to such a value (`USE_GRAPH = current_platform.is_cuda()`);
- a name the statement right before an `if` binds through a conditional expression such a value
  decides (`_env = launch_env if _lib_has_no_cache() else {}` then `if _env:`), bound elsewhere too;
- a function of the file whose every return is false on an NPU host (`def is_supported(cls):
  return current_platform.has_device_capability(90)`), called in a condition;
- an early exit anywhere in a function or at module level (`if not hasattr(torch.ops._C, "op"):
  raise SystemExit(...)`): nothing after it runs;
- a module-level function referenced only from code an NPU host never runs (`_bench_graph`, called
  only after that exit);
- an autouse fixture that skips every test of the module (`if not current_platform.is_cuda():
  pytest.skip(...)`).

`untaken(tree, text, relpath, ...)` gives the extra blocks, in testscopes.untaken_branches' shape: the
findings inside become info with the usual "in a branch an NPU host does not take" reason (a named
skipped scope, moot.py). `known_value(node)` answers the conditions false on an NPU host with no
context at all (the custom ops namespace of a CUDA build, Windows and macOS checks); testscopes'
evaluation asks it first. Nothing here changes what is rewritten.
"""

from __future__ import annotations

import ast
import bisect
import copy
import functools
import re
from collections import OrderedDict

from . import astcache, capgates, catalogue, npugates, probeflags31

_dotted = astcache.dotted


@functools.lru_cache(maxsize=None)
def _table() -> dict:
    """rules/scopes.toml [reach]."""
    return catalogue.read_table("scopes.toml").get("reach", {})


@functools.lru_cache(maxsize=None)
def decide_words() -> str:
    """A regular expression of the words reach.py's own conditions need (testscopes' text test)."""
    return _table().get("decide_words", "(?!)")


@functools.lru_cache(maxsize=None)
def none_calls() -> frozenset:
    """Calls whose value is None on an NPU host (rules/scopes.toml [reach] none_calls)."""
    return frozenset(_table().get("none_calls", ()))


def _str(node: ast.AST) -> str | None:
    return node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else None


def known_value(node: ast.AST):
    """True or False where `node`, with no context, is certainly so on an NPU host (a Linux host
    without a CUDA build's custom ops), else None."""
    table = _table()
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "hasattr" \
            and len(node.args) == 2 and _str(node.args[1]) is not None \
            and _dotted(node.args[0]) in table.get("cuda_op_namespaces", ()):
        return False  # `hasattr(torch.ops._C, "fused_kda_decode")`: a CUDA build's custom op
    if isinstance(node, ast.Compare) and len(node.ops) == 1 and isinstance(node.ops[0], (ast.Eq, ast.NotEq, ast.In, ast.NotIn)):
        host = _host_value(node.left)
        if host is not None:
            other = node.comparators[0]
            values = [_str(other)] if isinstance(node.ops[0], (ast.Eq, ast.NotEq)) else (
                [_str(e) for e in other.elts] if isinstance(other, (ast.Tuple, ast.List, ast.Set)) else [None])
            if values and all(v is not None for v in values):
                linux = host == "linux"
                equal = any((v.lower().startswith("linux") if linux else v.lower() == "posix")
                            if host in ("linux", "posix") else False for v in values)
                foreign = all(_foreign_os(host, v) for v in values)
                if equal or foreign:
                    result = equal
                    return result if isinstance(node.ops[0], (ast.Eq, ast.In)) else not result
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "startswith" \
            and len(node.args) == 1 and _dotted(node.func.value) == "sys.platform":
        prefixes = [_str(node.args[0])] if _str(node.args[0]) is not None else (
            [_str(e) for e in node.args[0].elts] if isinstance(node.args[0], ast.Tuple) else [None])
        if prefixes and all(p is not None for p in prefixes):
            if any("linux".startswith(p) for p in prefixes):
                return True
            if all(_foreign_os("linux", p) for p in prefixes):
                return False
    return None


def missing_op(node: ast.AST) -> bool:
    """`getattr(torch.ops._C, "op", None)`: None on an NPU host, where a CUDA build's custom ops are
    not built (round 33 HC#9, h194: vLLM's `_MINIMAX_FUSED_AR_RMS_QK`; testscopes reads it as None)."""
    return (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "getattr"
            and len(node.args) == 3 and not node.keywords and _str(node.args[1]) is not None
            and isinstance(node.args[2], ast.Constant) and node.args[2].value is None
            and _dotted(node.args[0]) in _table().get("cuda_op_namespaces", ()))


def _host_value(node: ast.AST) -> str | None:
    """What an NPU host (Linux) answers for `sys.platform` ("linux"), `os.name` ("posix") and
    `platform.system()` ("linux", compared case-blind)."""
    if _dotted(node) == "sys.platform":
        return "linux"
    if _dotted(node) == "os.name":
        return "posix"
    if isinstance(node, ast.Call) and not node.args and _dotted(node.func) == "platform.system":
        return "linux"
    return None


def _foreign_os(host: str, value: str) -> bool:
    value = value.lower()
    if host == "posix":
        return value in ("nt", "java")
    return any(value.startswith(p) for p in _table().get("other_os", ("win", "cygwin", "darwin")))


# ----------------------------------------------------------------------------- evaluation with the file's facts
_NONE_MARK = "\0"  # (a name bound to a value None on an NPU host is kept as "\0name" among the names)


class _Known(ast.NodeTransformer):
    """A condition with what the file tells about its names: a name bound once to a value false
    on an NPU host, and a call of a function of the file that returns only such values, become
    `False`."""

    def __init__(self, names: frozenset, functions: frozenset):
        self.names, self.functions = names, functions

    def visit_Name(self, node: ast.Name):
        if node.id in self.names:
            return ast.copy_location(ast.Constant(False), node)
        if _NONE_MARK + node.id in self.names:
            return ast.copy_location(ast.Constant(None), node)
        return node

    def visit_Call(self, node: ast.Call):
        callee = _callee(node)
        if callee is not None and _NONE_MARK + callee in self.functions:
            return ast.copy_location(ast.Constant(None), node)  # (npugates: its every live return is None)
        if callee in self.functions:
            return ast.copy_location(ast.Constant(False), node)
        return self.generic_visit(node)


_RECEIVERS: set[str] = set()  # the classes of the file being read (`Class.f(...)`), besides self and cls


def _callee(call: ast.Call) -> str | None:
    """The function of the file a call may name: `f(...)`, `cls.f(...)`, `self.f(...)`,
    `Class.f(...)` for a class of the file."""
    if isinstance(call.func, ast.Name):
        return call.func.id
    if isinstance(call.func, ast.Attribute) and isinstance(call.func.value, ast.Name) \
            and (call.func.value.id in ("self", "cls") or call.func.value.id in _RECEIVERS):
        return call.func.attr
    return None


# The evaluation of one condition on an NPU host (True, False or another value for unknown) and
# the one-line source of a node: testscopes' own, handed to the entry points (untaken,
# with_file_facts) by their caller, so that this module does not import testscopes back.
_PLAIN: list = [lambda node: None, lambda lines, node: ""]


def _truth(node: ast.AST, names: frozenset, functions: frozenset):
    if (names or functions) and any(
            (isinstance(n, ast.Name) and (n.id in names or _NONE_MARK + n.id in names))
            or (isinstance(n, ast.Call) and _callee(n) in functions) for n in ast.walk(node)):
        node = _Known(names, functions).visit(copy.deepcopy(node))  # (copied only when it matters)
    return _PLAIN[0](node)


def _segment(lines: list, node: ast.AST) -> str:
    return _PLAIN[1](lines, node)


_FUNCTIONS = (ast.FunctionDef, ast.AsyncFunctionDef)


def _own_nodes(function: ast.AST):
    """The nodes of a function's body, without those of functions, classes and lambdas inside."""
    stack = list(ast.iter_child_nodes(function))
    while stack:
        node = stack.pop()
        yield node
        if not isinstance(node, (*_FUNCTIONS, ast.ClassDef, ast.Lambda)):
            stack.extend(ast.iter_child_nodes(node))


def _own_statements(scope: ast.AST):
    """The statements (and `except` handlers, `with` items) of a function's or the module's body,
    nested blocks included, without the bodies of functions and classes inside."""
    stack = list(scope.body)
    while stack:
        node = stack.pop()
        yield node
        if isinstance(node, (*_FUNCTIONS, ast.ClassDef)):
            continue
        if isinstance(node, (ast.With, ast.AsyncWith)):
            yield from node.items
        for field in ("body", "orelse", "finalbody", "handlers", "cases"):
            block = getattr(node, field, None)
            if isinstance(block, list):
                stack.extend(block)


_CACHE: dict = {"bindings": {}, "walrus": True}  # per file (cleared by the entry points)


def _start(tree: ast.Module, text: str | None) -> None:
    """Start on a file: its functions and classes, from its statements (the expressions are
    read once, later, and only when needed: `_index`)."""
    _CACHE["bindings"] = {}
    _CACHE["walrus"] = text is None or ":=" in text
    _CACHE["tree"], _CACHE["indexed"] = tree, False
    defs: dict[str, list] = {}
    classes: set[str] = set()
    stack: list = list(tree.body)
    while stack:
        node = stack.pop()
        if isinstance(node, _FUNCTIONS):
            defs.setdefault(node.name, []).append(node)
        elif isinstance(node, ast.ClassDef):
            classes.add(node.name)
        for field in ("body", "orelse", "finalbody", "handlers", "cases"):
            block = getattr(node, field, None)
            if isinstance(block, list):
                stack.extend(block)
    _CACHE["defs"] = defs
    _RECEIVERS.clear()
    _RECEIVERS.update(classes)


def _index() -> dict:
    """The file read once, expressions included: each node's parent, the function holding each
    call, the names and the string constants (one walk: a large file's tree costs a tenth of a
    second per walk)."""
    if _CACHE["indexed"]:
        return _CACHE
    tree = _CACHE["tree"]
    parents: dict[int, ast.AST] = {}
    enclosing: dict[int, ast.AST] = {}
    names: list[ast.Name] = []
    strings: set[str] = set()
    stack: list = [(tree, tree)]
    while stack:
        node, holder = stack.pop()
        for child in ast.iter_child_nodes(node):
            parents[id(child)] = node
            if isinstance(child, ast.Name):
                names.append(child)
            elif isinstance(child, ast.Constant) and isinstance(child.value, str):
                strings.add(child.value)
            elif isinstance(child, ast.Call):
                enclosing[id(child)] = holder
            stack.append((child, child if isinstance(child, _FUNCTIONS) else holder))
    _CACHE.update(parents=parents, enclosing=enclosing, names=names, strings=strings, indexed=True)
    return _CACHE


def _bindings(scope: ast.AST) -> dict[str, list]:
    """{name: the values bound to it} in a scope (a function's body or the module): an
    assignment's value, or None where the binding is of another kind (augmented, a loop or `with`
    target, an import, a `global`, a parameter, a nested def)."""
    cached = _CACHE["bindings"].get(id(scope))
    if cached is not None and cached[0] is scope:
        return cached[1]
    out: dict[str, list] = {}
    if _CACHE["walrus"]:  # (`:=` binds from inside an expression: every node is read)
        nodes = list(_own_nodes(scope)) if isinstance(scope, _FUNCTIONS) else list(_module_nodes(scope))
    else:
        nodes = list(_own_statements(scope))
    _CACHE["bindings"][id(scope)] = (scope, out)
    for node in nodes:
        if isinstance(node, ast.Assign):
            for target in node.targets:
                if isinstance(target, ast.Name):
                    out.setdefault(target.id, []).append(node.value if len(node.targets) == 1 else None)
                else:
                    for inner in ast.walk(target):
                        if isinstance(inner, ast.Name):
                            out.setdefault(inner.id, []).append(None)
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            out.setdefault(node.target.id, []).append(node.value)
        elif isinstance(node, (ast.AugAssign, ast.For, ast.AsyncFor, ast.comprehension)):
            for inner in ast.walk(node.target):
                if isinstance(inner, ast.Name):
                    out.setdefault(inner.id, []).append(None)
        elif isinstance(node, ast.withitem) and node.optional_vars is not None:
            for inner in ast.walk(node.optional_vars):
                if isinstance(inner, ast.Name):
                    out.setdefault(inner.id, []).append(None)
        elif isinstance(node, ast.NamedExpr) and isinstance(node.target, ast.Name):
            out.setdefault(node.target.id, []).append(None)
        elif isinstance(node, (ast.Global, ast.Nonlocal)):
            for name in node.names:
                out.setdefault(name, []).append(None)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            for alias in node.names:
                out.setdefault((alias.asname or alias.name).split(".")[0], []).append(None)
        elif isinstance(node, (*_FUNCTIONS, ast.ClassDef)):
            out.setdefault(node.name, []).append(None)
        elif isinstance(node, ast.ExceptHandler) and node.name:
            out.setdefault(node.name, []).append(None)
    if isinstance(scope, _FUNCTIONS):
        args = scope.args
        for arg in [*args.posonlyargs, *args.args, *args.kwonlyargs, args.vararg, args.kwarg]:
            if arg is not None:
                out.setdefault(arg.arg, []).append(None)
    return out


def _module_nodes(tree: ast.Module):
    """The module's own nodes (no function or class bodies)."""
    stack = list(tree.body)
    while stack:
        node = stack.pop()
        yield node
        if not isinstance(node, (*_FUNCTIONS, ast.ClassDef, ast.Lambda)):
            stack.extend(ast.iter_child_nodes(node))


def _false_names(bindings: dict[str, list], inherited: frozenset, functions: frozenset,
                 every: bool = False) -> frozenset:
    """The names of a scope bound once, to a value false on an NPU host (or inherited from the
    module and not bound here). A constant (`DEBUG = False`) is a setting a user edits, not one.
    A name whose value is None there (`cap = current_platform.get_device_capability()`) is kept
    as `_NONE_MARK + name` (`cap is None` is true there). `every` (with_file_facts: a test
    module's skip conditions, round-27 BX#21): a name bound several times by assignments, each
    value false there (`IS_SUPPORTED = cap is not None and cap[0] >= 9`, later
    `IS_SUPPORTED = current_platform.has_device_capability(90)`), is false too."""
    out = {name for name in inherited if name.lstrip(_NONE_MARK) not in bindings}
    changed = True
    while changed:
        changed = False
        for name, values in bindings.items():
            if every and len(values) > 1 and name not in out and all(
                    v is not None and not isinstance(v, ast.Constant) for v in values) and all(
                    _truth(v, frozenset(out), functions) is False for v in values):
                out.add(name)
                changed = True
                continue
            if name in out or _NONE_MARK + name in out or len(values) != 1 or values[0] is None \
                    or isinstance(values[0], ast.Constant):
                continue
            is_none = ast.Compare(left=values[0], ops=[ast.Is()], comparators=[ast.Constant(None)])
            if _truth(is_none, frozenset(out), functions) is True:
                out.add(_NONE_MARK + name)
                changed = True
            elif _truth(values[0], frozenset(out), functions) is False:
                out.add(name)
                changed = True
    return frozenset(out)


_FALSE_MEMO: OrderedDict = OrderedDict()  # (id(tree), module names, truth) -> (tree, names), newest last
_FALSE_MEMO_SIZE = 16


def _false_functions(tree: ast.Module, module_names: frozenset) -> frozenset:
    """Names of the file's functions and methods (every definition of the name) that return only
    values false on an NPU host: each `return` has a value, false there, and the body ends with a
    `return` or `raise` (no implicit None: `f() is None` would be misread), or the body starts
    with an exit an NPU host takes that returns such a value.
    Worked out once per tree: `untaken` (asked by several passes with different lines of
    interest) and `with_file_facts` ask the same file the same question, at a quarter of a second
    a large file (a cold check of torch/_inductor asked 161 times for 70 files). The entry holds
    the tree itself, so that its `id` names no other tree while the entry lives; the answer depends
    only on the tree, `module_names` and the truth function (`_PLAIN[0]`), all in the key."""
    key = (id(tree), module_names, _PLAIN[0] if _PLAIN else None)
    held = _FALSE_MEMO.get(key)
    if held is not None and held[0] is tree:
        _FALSE_MEMO.move_to_end(key)
        return held[1]
    found = _compute_false_functions(module_names)
    _FALSE_MEMO[key] = (tree, found)
    while len(_FALSE_MEMO) > _FALSE_MEMO_SIZE:
        _FALSE_MEMO.popitem(last=False)
    return found


def _compute_false_functions(module_names: frozenset) -> frozenset:
    defs: dict[str, list] = _CACHE["defs"]
    found: set[str] = set()
    for _ in range(3):
        before = len(found)
        for name, functions in defs.items():
            if name in found:
                continue
            answers = [_returns_false(f, module_names, frozenset(found)) for f in functions]
            if all(answers):
                found.add(name)
                if all(a == "none" for a in answers):
                    found.add(_NONE_MARK + name)
        if len(found) == before:
            break
    return frozenset(found)


def _returns_false(function: ast.AST, module_names: frozenset, functions: frozenset) -> bool:
    body = _without_docstring(function.body)
    if not body or any(isinstance(d, ast.Name) and d.id == "property" for d in function.decorator_list):
        return False
    guard = body[0]
    guarded = (isinstance(guard, ast.If) and not guard.orelse and isinstance(guard.body[-1], ast.Return)
               and guard.body[-1].value is not None)
    returns = [n for n in _own_statements(function) if isinstance(n, ast.Return)]
    # (a stub that returns a constant is not an NPU fact: a subclass elsewhere may answer otherwise)
    plain = (isinstance(body[-1], (ast.Return, ast.Raise)) and any(not isinstance(r.value, ast.Constant) for r in returns)
             and all(r.value is not None for r in returns))
    names = None
    if guarded or plain:
        names = _false_names(_bindings(function), module_names, functions)
        if guarded and _truth(guard.test, names, functions) is True \
                and _truth(guard.body[-1].value, names, functions) is False:
            pass
        elif not (plain and all(_truth(r.value, names, functions) is False for r in returns)):
            guarded = plain = False
    if not guarded and not plain:
        # (returns cut off by a gate an NPU host fails: `if is_device_capability((10, 0)): return
        # "cute-dsl"` then `return None`; npugates.py)
        def truth(node):
            nonlocal names
            if names is None:
                names = _false_names(_bindings(function), module_names, functions)
            return _truth(node, names, functions)
        answer = npugates.live_returns_false(function, truth, lambda node: _truth(node, module_names, functions))
        return "none" if answer == "none" else answer == "false"
    # (a generator or coroutine function returns an object, not its `return` value)
    return not any(isinstance(n, (ast.Yield, ast.YieldFrom, ast.Await)) for n in _own_nodes(function))


def _bound_just_before(body: list, index: int, names: frozenset, functions: frozenset) -> frozenset:
    """`names`, with the name the statement right before `body[index]` binds when an NPU host's
    answer picks a false value for it: `_env = launch_env if _lib_has_no_cache() else {}` then
    `if _env:` (vLLM's NCCL_NO_CACHE pin, a `global` the scope binds elsewhere too; wave 19,
    probes19.py's area). Only the arm of a conditional expression an NPU fact selects counts (an
    empty literal, None, False, 0 there too); a plain `X = False` stays a setting a user edits."""
    previous = body[index - 1] if index else None
    if not (isinstance(previous, ast.Assign) and len(previous.targets) == 1 and isinstance(previous.targets[0], ast.Name)) \
            or previous.targets[0].id in names:
        return names
    if isinstance(previous.value, (ast.BoolOp, ast.Compare, ast.UnaryOp)):
        # `eligible = current_platform.is_cuda() and ...` right before `if eligible:` (round 28
        # CA#21): the value the `if` reads is the one just bound, whatever the scope binds later.
        # Not a bare call: its falsy answer may be None (`cap = get_device_capability()` before
        # `if cap is None or cap.major != 10:`), which a name bound False would misread.
        return names | {previous.targets[0].id} if _truth(previous.value, names, functions) is False else names
    if not isinstance(previous.value, ast.IfExp):
        return names
    test = _truth(previous.value.test, names, functions)
    if test not in (True, False):
        return names
    value = previous.value.body if test else previous.value.orelse
    empty = (isinstance(value, ast.Constant) and not value.value) or (
        isinstance(value, (ast.Dict, ast.List, ast.Tuple, ast.Set)) and not getattr(value, "keys", getattr(value, "elts", None)))
    if empty or (not isinstance(value, ast.Constant) and _truth(value, names, functions) is False):
        return names | {previous.targets[0].id}
    return names


def _without_docstring(body: list) -> list:
    if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) \
            and isinstance(body[0].value.value, str):
        return body[1:]
    return body


# ----------------------------------------------------------------------------- blocks
_EXITS = frozenset({"sys.exit", "exit", "quit", "os._exit", "pytest.skip", "pytest.exit", "skip"})
_QUIET_RAISES = frozenset({"SystemExit", "SkipTest", "unittest.SkipTest", "pytest.skip.Exception"})


def _exits(stmt: ast.stmt) -> bool:
    """A statement after which nothing of its block runs, and which does not fail: `return`,
    `sys.exit(...)`, `raise SystemExit(...)`, `pytest.skip(...)`. Another `raise` is a failure on
    an NPU host, which the findings after it should keep showing."""
    if isinstance(stmt, ast.Return):
        return True
    if isinstance(stmt, ast.Raise) and stmt.exc is not None:
        exc = stmt.exc.func if isinstance(stmt.exc, ast.Call) else stmt.exc
        return _dotted(exc) in _QUIET_RAISES
    return _is_exit_call(stmt)


def _is_exit_call(stmt: ast.stmt, skip_only: bool = False) -> bool:
    if not (isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call)):
        return False
    name = _dotted(stmt.value.func)
    return name.rpartition(".")[2] == "skip" if skip_only else name in _EXITS


_TEST_PATH = re.compile(r"(^|/)(tests?|benchmarks?|examples?|scripts?)/|(^|/)(test_[^/]*|[^/]*_test|conftest|bench[^/]*)\.py$")


def untaken(tree: ast.Module, text: str, relpath: str, known: list | tuple,
            truth, segment, interest: set | None = None) -> list[tuple[int, int, str, bool]]:
    """The blocks of the file an NPU host never runs, found through the file's own names, calls
    and exits: (first line, last line, the reason, False), testscopes.untaken_branches' shape.
    `known`: the blocks testscopes found on its own (functions reached only from them count);
    `truth(node)`: a condition's value on an NPU host; `segment(lines, node)`: its source;
    `interest`: the lines of the findings the blocks are for (None: every line). Only the code
    that holds one, or calls a function that does, is read (a large file has hundreds of
    functions: evaluating every binding of each costs seconds)."""
    _PLAIN[:] = [truth, segment]
    _start(tree, text)
    lines = text.splitlines(keepends=True)
    wanted = None if interest is None else _interest(tree, text, set(interest))

    def holds(first: int, last: int) -> bool:
        return wanted is None or any(first <= line <= last for line in wanted)

    module_bindings = _bindings(tree)
    functions = _false_functions(tree, frozenset())
    module_names = _false_names(module_bindings, frozenset(), functions)
    if module_names:
        functions = _false_functions(tree, module_names) | functions
    flags = _false_parameters(tree, relpath, module_names, functions, holds)
    out: list[tuple[int, int, str, bool]] = []

    def scope_names(function) -> frozenset:
        inherited = module_names | frozenset(flags.get(id(function), ()))
        bindings = {k: v for k, v in _bindings(function).items() if k not in flags.get(id(function), ())}
        return _false_names(bindings, inherited, functions)

    def shown(test: ast.AST, negated: bool) -> str:
        segment = _segment(lines, test)
        segment = f"`not ({segment})`" if negated else f"`{segment}`"
        if _truth(test, frozenset(), frozenset()) not in (True, False):
            segment += " (false on an NPU host through this file's own flags and functions)" if not negated else \
                " (true on an NPU host through this file's own flags and functions)"
        return segment

    exits = capgates.Exits(tree, lines, truth, segment)  # (a raise or a helper's skip on a capability check)

    def blocks(body: list, names) -> None:
        """`if` statements whose test is decided, and exits an NPU host takes, in one block.
        `names`: the scope's false names, or a function that computes them (once, when needed)."""
        for index, stmt in enumerate(body):
            if not holds(stmt.lineno, _end(body)):
                return  # (nothing of interest from here on in this block)
            if index + 1 < len(body) and isinstance(stmt, (ast.If, ast.Expr, ast.Assign)):
                why = exits.reason(stmt)
                if why is not None:
                    out.append((body[index + 1].lineno, _end(body), why, False))
                    if isinstance(stmt, ast.If):
                        blocks(stmt.body, names)
                    return
            if isinstance(stmt, ast.If):
                if callable(names):
                    names = names()
                truth = _truth(stmt.test, _bound_just_before(body, index, names, functions), functions)
                if truth is False:
                    out.append((_first(stmt.body[0]), _end(stmt.body), shown(stmt.test, False), False))
                elif truth is True:
                    if stmt.orelse:
                        out.append((_first(stmt.orelse[0]), _end(stmt.orelse), shown(stmt.test, True), False))
                    if _exits(stmt.body[-1]) and index + 1 < len(body):
                        out.append((body[index + 1].lineno, _end(body),
                                    f"after the exit on {shown(stmt.test, False)}", False))
                        return
            for field in ("body", "orelse", "finalbody"):
                inner = getattr(stmt, field, None)
                if isinstance(inner, list) and inner and not isinstance(stmt, (*_FUNCTIONS, ast.ClassDef)):
                    blocks(inner, names)
            for handler in getattr(stmt, "handlers", ()) or ():
                blocks(handler.body, names)

    def visit(body: list, names: frozenset) -> None:
        for stmt in body:
            if isinstance(stmt, _FUNCTIONS):
                if not holds(stmt.lineno, stmt.end_lineno or stmt.lineno):
                    continue
                own = functools.lru_cache(maxsize=1)(functools.partial(scope_names, stmt))
                blocks(stmt.body, own)
                visit(stmt.body, own)
            elif isinstance(stmt, ast.ClassDef):
                visit(stmt.body, names)
            else:
                for field in ("body", "orelse", "finalbody"):
                    inner = getattr(stmt, field, None)
                    if isinstance(inner, list):
                        visit(inner, names)
                for handler in getattr(stmt, "handlers", ()) or ():
                    visit(handler.body, names)

    blocks(tree.body, module_names)
    visit(tree.body, module_names)
    out += _skipping_fixture(tree, module_names, functions, lines)
    out += _requested_skipping_fixtures(tree, module_names, functions, lines)  # (fp8tests.py)
    known = [(b[0], b[1], b[2] if "`" in b[2] else f"`{b[2]}`", b[3]) for b in known if not b[3]]
    if "supported=" in text:  # (an op implementation registered as unsupported there, and its kernels)
        out += npugates.unsupported_registrations(tree, lines, lambda n: _truth(n, module_names, functions), _segment)
        out += npugates.kernels_reached_only_from(tree, [*known, *out])
    out += _reached_only_from(tree, [*known, *out], relpath, holds)
    out += npugates.methods_reached_only_from(tree, [*known, *out], holds, lines)  # (`self._tune()` only there)
    return out


def _interest(tree: ast.Module, text: str, lines: set[int]) -> set[int]:
    """The lines worth reading: `lines`, and the lines that name a module-level function that
    holds one of them (and the functions that call those: a few rounds; a text search)."""
    spans = [(s.name, s.lineno, s.end_lineno or s.lineno) for s in tree.body if isinstance(s, _FUNCTIONS)]
    spans += npugates.private_method_spans(tree)  # (a private method called only from an untaken block)
    taken: set[str] = set()
    starts = None
    for _ in range(4):
        names = {name for name, first, last in spans if name not in taken
                 and any(first <= line <= last for line in lines)}
        if not names:
            break
        taken |= names
        if starts is None:
            starts = [0] + [m.end() for m in re.finditer("\n", text)]
        for match in re.finditer(r"\b(?:" + "|".join(map(re.escape, names)) + r")\b", text):
            lines.add(bisect.bisect_right(starts, match.start()))
    return lines


def _first(stmt: ast.stmt) -> int:
    """A statement's first line, its decorators included (a kernel is reported at `@triton.jit`)."""
    return min([stmt.lineno, *(d.lineno for d in getattr(stmt, "decorator_list", ()))])


def _end(body: list) -> int:
    return body[-1].end_lineno or body[-1].lineno


def _false_parameters(tree: ast.Module, relpath: str, module_names: frozenset,
                      functions: frozenset, holds=lambda first, last: True) -> dict[int, set[str]]:
    """{id(function): its parameters false on an NPU host at every call}: a module-level function
    (not a test, not decorated) whose name is only ever called in the file, never handed on, and
    every call leaves the parameter at a false default or passes a value false there. Only where
    no other file should call it: a private name, or a file of tests, benchmarks or examples."""
    defs = {s.name: s for s in tree.body if isinstance(s, _FUNCTIONS) and not s.decorator_list
            and not s.name.startswith("test") and (s.name.startswith("_") or _TEST_PATH.search(relpath))
            and holds(s.lineno, s.end_lineno or s.lineno) and _tests_a_parameter(s)}
    if not defs:
        return {}
    calls: dict[str, list] = {name: [] for name in defs}
    escaped: set[str] = set(defs) & _index()["strings"]
    parents: dict[int, ast.AST] = _index()["parents"]
    enclosing: dict[int, ast.AST] = dict(_index()["enclosing"])  # id(call) -> the function holding it (or the module)
    for node in _index()["names"]:
        if node.id in defs:
            parent = parents.get(id(node))
            if isinstance(node.ctx, ast.Load) and isinstance(parent, ast.Call) and parent.func is node:
                calls[node.id].append(parent)
            else:
                through = _partial_calls(node, parents, enclosing)
                if through is None:
                    escaped.add(node.id)
                else:
                    calls[node.id] += through
    if sum(len(_bindings(tree).get(name, ())) for name in defs) != len(defs):
        escaped |= {name for name in defs if len(_bindings(tree).get(name, ())) != 1}
    out: dict[int, set[str]] = {}
    names_of: dict[int, frozenset] = {}
    for name, function in defs.items():
        if name in escaped or not calls[name]:
            continue
        args = function.args
        positional = [*args.posonlyargs, *args.args]
        defaults = dict(zip([a.arg for a in positional][len(positional) - len(args.defaults):], args.defaults))
        defaults.update({a.arg: d for a, d in zip(args.kwonlyargs, args.kw_defaults) if d is not None})
        own = _bindings(function)
        for index, arg in enumerate([*positional, *args.kwonlyargs]):
            if len(own.get(arg.arg, ())) != 1:
                continue  # (rebound in the function: `flag = flag or force`)
            default = defaults.get(arg.arg)
            false_default = default is not None and isinstance(default, ast.Constant) and not default.value
            ok = True
            for call in calls[name]:
                if any(isinstance(a, ast.Starred) for a in call.args) or any(k.arg is None for k in call.keywords):
                    ok = False
                    break
                given = next((k.value for k in call.keywords if k.arg == arg.arg), None)
                if given is None and index < len(positional) and index < len(call.args):
                    given = call.args[index]
                if given is None:
                    if not false_default:
                        ok = False
                        break
                    continue
                holder = enclosing.get(id(call), tree)
                if id(holder) not in names_of:
                    names_of[id(holder)] = (module_names if holder is tree else _false_names(
                        _bindings(holder), module_names, functions))
                if _truth(given, names_of[id(holder)], functions) is not False:
                    ok = False
                    break
            if ok:
                out.setdefault(id(function), set()).add(arg.arg)
    return out


def _tests_a_parameter(function: ast.AST) -> bool:
    """Whether an `if` of the function (its own) names one of its parameters in its test."""
    args = function.args
    params = {a.arg for a in [*args.posonlyargs, *args.args, *args.kwonlyargs]}
    return any(isinstance(stmt, ast.If) and any(isinstance(n, ast.Name) and n.id in params for n in ast.walk(stmt.test))
               for stmt in _own_statements(function))


def _partial_calls(node: ast.Name, parents: dict, enclosing: dict) -> list | None:
    """The calls of `f` through `runner = functools.partial(f, a=1)` and `runner(b=2)` in one
    function (each as one call with the partial's arguments first), or None when the partial
    goes anywhere else (returned, stored, handed on, bound twice)."""
    partial = parents.get(id(node))
    if not (isinstance(partial, ast.Call) and _dotted(partial.func) in ("functools.partial", "partial")
            and partial.args and partial.args[0] is node):
        return None
    assign = parents.get(id(partial))
    holder = enclosing.get(id(partial))
    if not (isinstance(assign, ast.Assign) and len(assign.targets) == 1 and isinstance(assign.targets[0], ast.Name)
            and isinstance(holder, _FUNCTIONS)):
        return None
    alias = assign.targets[0].id
    if len(_bindings(holder).get(alias, ())) != 1:
        return None
    out = []
    for use in _own_nodes(holder):
        if isinstance(use, ast.Name) and use.id == alias and use is not assign.targets[0]:
            call = parents.get(id(use))
            if not (isinstance(use.ctx, ast.Load) and isinstance(call, ast.Call) and call.func is use):
                return None
            merged = ast.Call(func=use, args=[*partial.args[1:], *call.args],
                              keywords=[*partial.keywords, *call.keywords])
            enclosing[id(merged)] = holder
            out.append(merged)
    everywhere = sum(1 for use in ast.walk(holder) if isinstance(use, ast.Name) and use.id == alias)
    if everywhere != len(out) + 1:
        return None  # (used in a function or lambda inside: not followed)
    return out


def _skipping_fixture(tree: ast.Module, names: frozenset, functions: frozenset, lines: list) -> list:
    """The tests of a module with an autouse fixture that skips on an NPU host (its body starts
    with `if <true there>: pytest.skip(...)`): every test function and class of the module."""
    for stmt in tree.body:
        if not isinstance(stmt, _FUNCTIONS) or not any(
                isinstance(d, ast.Call) and _dotted(d.func).rpartition(".")[2] == "fixture"
                and any(k.arg == "autouse" and isinstance(k.value, ast.Constant) and k.value.value is True
                        for k in d.keywords) for d in stmt.decorator_list):
            continue
        body = _without_docstring(stmt.body)
        guard = body[0] if body else None
        if (isinstance(guard, ast.If) and not guard.orelse and _is_exit_call(guard.body[-1], skip_only=True)
                and _truth(guard.test, names, functions) is True):
            reason = f"an autouse fixture skips the module's tests on `{_segment(lines, guard.test)}`"
            return [(min([t.lineno, *(d.lineno for d in t.decorator_list)]), t.end_lineno or t.lineno, reason, False)
                    for t in tree.body if (isinstance(t, _FUNCTIONS) and t.name.startswith("test"))
                    or (isinstance(t, ast.ClassDef) and t.name.startswith("Test"))]
    return []


def _requested_skipping_fixtures(tree: ast.Module, names: frozenset, functions: frozenset, lines: list) -> list:
    """The tests that request a fixture of the file that skips on an NPU host (fp8tests.py)."""
    from .fp8tests import skipping_fixture_tests

    def skips_first(body: list) -> str | None:
        body = _without_docstring(body)
        guard = body[0] if body else None
        if (isinstance(guard, ast.If) and not guard.orelse and _is_exit_call(guard.body[-1], skip_only=True)
                and _truth(guard.test, names, functions) is True):
            return _segment(lines, guard.test)
        return None

    return skipping_fixture_tests(tree, skips_first)


# decorators that register nothing: the function is still called only where its name is read
# (`@torch.inference_mode()` on a benchmark's `main`, round 28 CB#19)
# (`@contextmanager`: a helper called as `with _checked_region(mode):`, round 29 DA#36)
_PLAIN_DECORATOR = re.compile(r"(^|\.)(cache|lru_cache|cached|wraps|contextmanager|asynccontextmanager)$"
                              r"|^torch\.(inference_mode|no_grad)$")


def _reached_only_from(tree: ast.Module, blocks: list, relpath: str, holds=lambda first, last: True) -> list:
    """Module-level functions every reference of which sits in a block an NPU host never runs
    (or in another such function): not tests, never named in a string, referenced at least once,
    and private or in a file of tests, benchmarks or examples (no other module should import it)."""
    if not blocks:
        return []
    public = bool(_TEST_PATH.search(relpath))
    defs = {s.name: s for s in tree.body if isinstance(s, _FUNCTIONS) and not s.name.startswith("test")
            and (public or s.name.startswith("_")) and holds(s.lineno, s.end_lineno or s.lineno)
            and all(_PLAIN_DECORATOR.search(_dotted(d.func if isinstance(d, ast.Call) else d)) for d in s.decorator_list)}
    if not defs:
        return []
    refs: dict[str, list[int]] = {name: [] for name in defs}
    for node in _index()["names"]:
        if node.id in refs:
            refs[node.id].append(node.lineno if isinstance(node.ctx, ast.Load) else 0)
    for name in set(refs) & _index()["strings"]:
        refs[name].append(0)
    span = {name: (min([d.lineno, *(x.lineno for x in d.decorator_list)]), d.end_lineno or d.lineno)
            for name, d in defs.items()}
    found: dict[str, str] = {}

    def why(line: int, own: str) -> str | None:
        if line and span[own][0] <= line <= span[own][1]:
            return ""  # recursion
        block = next((b for b in blocks if b[0] <= line <= b[1]), None)
        if block is not None:
            return block[2]
        helper = next((h for h in found if span[h][0] <= line <= span[h][1]), None)
        return found[helper] if helper is not None else None

    changed = True
    while changed:
        changed = False
        for name, lines in refs.items():
            if name in found or not lines or 0 in lines:
                continue
            reasons = [why(line, name) for line in lines]
            if any(r is None for r in reasons):
                continue
            real = [r for r in reasons if r]
            if real:
                reason = real[0].split(" an NPU host does not run: ", 1)[-1]
                found[name] = f"`{name}` is reached only from code an NPU host does not run: {reason}"
                changed = True
    return [(*span[name], why, False) for name, why in found.items()]


def reached_only_from(tree: ast.Module, blocks: list, relpath: str) -> list:
    """`_reached_only_from` on a file of its own (public: supportexits31.py)."""
    _start(tree, None)
    return _reached_only_from(tree, blocks, relpath)


def with_file_facts(tree: ast.Module, truth) -> ast.Module:
    """The tree (a copy, when anything changes) with the file's facts written in, for the skip
    conditions testscopes reads at module level and in decorators (`pytestmark = pytest.mark.
    skipif(not _op_available(), ...)` where `_op_available` returns `hasattr(torch.ops._C, ...)`):
    calls of the file's functions false on an NPU host, and, at module level and in decorators,
    module names bound once to such a value, become `False`. `truth`: as for `untaken`."""
    _PLAIN[0] = truth
    _start(tree, None)
    functions = _false_functions(tree, frozenset())
    names = _false_names(_bindings(tree), frozenset(), functions, every=True)
    names |= probeflags31.false_flags(tree)  # (`HAS_X = False` only where `import x` failed: probeflags31.py)
    functions = _false_functions(tree, names) | functions
    if not functions and not names:
        return tree
    tree = copy.deepcopy(tree)
    calls_only = _Known(frozenset(), functions)
    both = _Known(names, functions)

    def fix(body: list) -> None:
        for index, stmt in enumerate(body):
            if isinstance(stmt, (*_FUNCTIONS, ast.ClassDef)):
                stmt.decorator_list = [both.visit(d) for d in stmt.decorator_list]
                fix(stmt.body)
            else:
                body[index] = calls_only.visit(stmt)

    for index, stmt in enumerate(tree.body):
        if isinstance(stmt, (*_FUNCTIONS, ast.ClassDef)):
            stmt.decorator_list = [both.visit(d) for d in stmt.decorator_list]
            fix(stmt.body)
        else:
            tree.body[index] = both.visit(stmt)
    return tree
