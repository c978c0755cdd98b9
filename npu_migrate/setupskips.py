"""A unittest class whose `setUp` (or `setUpClass`, pytest's `setup_method`/`setup_class`) skips on
an NPU host: none of its tests runs there (testscopes.cuda_only_test_scopes asks, for each class).

The shape the round-7 audits met (issue #16):

    class TestMLA(unittest.TestCase):
        def setUp(self):
            if torch.cuda.is_available():
                cc = torch.cuda.get_device_capability()
                if cc[0] < 9:
                    self.skipTest("requires Hopper")

After the migration the availability check asks the shim (true on an NPU host) and the capability
query is the shim's, which answers (0, 0) there: a test of a capability of at least N (N >= 1)
skips, so every test of the class does. `torch.cuda.is_available()` left as written (NPU110: its
line in `kept`) is False there; a condition that cannot be decided keeps the class a test.
"""

from __future__ import annotations

import ast
from typing import Callable, Optional

from . import astcache

SETUPS = frozenset({"setUp", "setUpClass", "setup_method", "setup_class", "setup"})
_UNKNOWN = object()
_NPU_CAPABILITY = (0, 0)  # npu_compat.get_device_capability on an NPU host (shim/__init__.py)


def _skip_statement(stmt: ast.stmt) -> bool:
    """`self.skipTest(...)`, `pytest.skip(...)`, `raise unittest.SkipTest(...)`."""
    call = stmt.value if isinstance(stmt, ast.Expr) else stmt.exc if isinstance(stmt, ast.Raise) else None
    if not isinstance(call, ast.Call):
        return False
    name = astcache.dotted(call.func).rpartition(".")[2]
    return name in ("skipTest", "skip", "SkipTest")


def _value(node: ast.AST, env: dict, kept: frozenset, truth: Callable):
    """The value of `node` on an NPU host after the migration, or _UNKNOWN."""
    if isinstance(node, ast.Constant) and isinstance(node.value, (int, float, bool)):
        return node.value
    if isinstance(node, ast.Tuple):
        items = [_value(e, env, kept, truth) for e in node.elts]
        return _UNKNOWN if any(i is _UNKNOWN for i in items) else tuple(items)
    if isinstance(node, ast.Name):
        return env.get(node.id, _UNKNOWN)
    if isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Constant) and isinstance(node.slice.value, int):
        base = _value(node.value, env, kept, truth)
        if isinstance(base, tuple) and -len(base) <= node.slice.value < len(base):
            return base[node.slice.value]
        return _UNKNOWN
    if isinstance(node, ast.Call):
        name = astcache.dotted(node.func)
        if name.endswith("cuda.get_device_capability"):
            return _NPU_CAPABILITY
        if name.endswith("cuda.is_available") and not node.args:
            return node.lineno not in kept  # (rewritten to the shim: true; left as written: false)
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
        inner = _value(node.operand, env, kept, truth)
        return _UNKNOWN if inner is _UNKNOWN else not inner
    if isinstance(node, ast.BoolOp):
        values = [_value(v, env, kept, truth) for v in node.values]
        if isinstance(node.op, ast.And):
            if any(v is not _UNKNOWN and not v for v in values):
                return False
            return _UNKNOWN if any(v is _UNKNOWN for v in values) else True
        if any(v is not _UNKNOWN and v for v in values):
            return True
        return _UNKNOWN if any(v is _UNKNOWN for v in values) else False
    if isinstance(node, ast.Compare) and len(node.ops) == 1:
        left = _value(node.left, env, kept, truth)
        right = _value(node.comparators[0], env, kept, truth)
        if left is _UNKNOWN or right is _UNKNOWN or type(left) is not type(right):
            return _UNKNOWN
        if not _capability_bound(left, right):
            return _UNKNOWN
        op = node.ops[0]
        try:
            return {ast.Lt: left < right, ast.LtE: left <= right, ast.Gt: left > right,
                    ast.GtE: left >= right, ast.Eq: left == right, ast.NotEq: left != right}[type(op)]
        except KeyError:
            return _UNKNOWN
    value = truth(node)
    return value if value in (True, False) else _UNKNOWN


def _capability_bound(left, right) -> bool:
    """A comparison with a capability of at least 1 (`cc[0] < 9`, `cc < (8, 0)`): the shim's (0, 0)
    answers it as no CUDA architecture would; a comparison with 0 may mean "unknown"."""
    for side in (left, right):
        first = side[0] if isinstance(side, tuple) and side else side
        if isinstance(first, (int, float)) and not isinstance(first, bool) and first >= 1:
            return True
    return False


def _bind(stmt: ast.stmt, env: dict, kept: frozenset, truth: Callable) -> None:
    """`cc = torch.cuda.get_device_capability()`, `major, minor = ...`."""
    if not isinstance(stmt, ast.Assign) or len(stmt.targets) != 1:
        return
    target = stmt.targets[0]
    value = _value(stmt.value, env, kept, truth)
    if isinstance(target, ast.Name):
        if value is _UNKNOWN:
            env.pop(target.id, None)
        else:
            env[target.id] = value
    elif isinstance(target, ast.Tuple):
        names = [e.id if isinstance(e, ast.Name) else None for e in target.elts]
        for i, name in enumerate(names):
            if name is None:
                continue
            if isinstance(value, tuple) and len(value) == len(names):
                env[name] = value[i]
            else:
                env.pop(name, None)


def _skips(body: list, env: dict, kept: frozenset, truth: Callable) -> Optional[ast.AST]:
    """The condition under which `body` certainly skips on an NPU host, or None."""
    env = dict(env)
    for stmt in body:
        if _skip_statement(stmt):
            return stmt
        if isinstance(stmt, ast.If):
            test = _value(stmt.test, env, kept, truth)
            if test is True:
                found = _skips(stmt.body, env, kept, truth)
                if found is not None:
                    return stmt.test if found is stmt.body[0] or _skip_statement(found) else found
            elif test is False and stmt.orelse:
                found = _skips(stmt.orelse, env, kept, truth)
                if found is not None:
                    return found
            if test is _UNKNOWN:
                continue
        elif isinstance(stmt, (ast.Return, ast.Raise)):
            return None
        else:
            _bind(stmt, env, kept, truth)
    return None


def skipping_setup(cls: ast.ClassDef, kept: frozenset, truth: Callable) -> Optional[tuple[ast.AST, str]]:
    """(the skip's condition, the setup method's name) when a setup method of `cls` skips every
    test on an NPU host, else None."""
    for method in cls.body:
        if isinstance(method, (ast.FunctionDef, ast.AsyncFunctionDef)) and method.name in SETUPS:
            found = _skips(method.body, {}, kept, truth)
            if found is not None and not _skip_statement(found):
                return found, method.name
    return None


def may_skip(text: str) -> bool:
    """A cheap text test: a setup method and a capability query in the file."""
    return "get_device_capability" in text and any(f"def {name}(" in text for name in SETUPS)
