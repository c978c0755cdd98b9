"""Code a library builds only under a configuration property false by default: an opt-in (issue #16,
policy P1, round-28 audit CA#35). Read by testcallers27.py's walk.

vLLM wraps its model in `UBatchWrapper` (dual-batch overlap, DBO) only when the user asks for it:

    # vllm/config/parallel.py
    class ParallelConfig:
        enable_dbo: bool = False
        ubatch_size: int = Field(default=0, ge=0)

        @property
        def use_ubatching(self) -> bool:
            return self.enable_dbo or self.ubatch_size > 1

    # vllm/v1/worker/gpu_model_runner.py
    elif self.parallel_config.use_ubatching:
        self.model = UBatchWrapper(self.model, self.vllm_config, CUDAGraphMode.FULL, self.device)

    # vllm/v1/worker/gpu/ubatch_utils.py (Model Runner V2)
    def maybe_build_ubatch_runner(vllm_config, ...):
        if not parallel_config.use_ubatching or parallel_config.data_parallel_size <= 1:
            return None
        return UBatchRunner(...)

The wrapper's capture thread calls `torch.cuda.current_blas_handle()` (NPU202): an NPU host reaches
it only after the user sets `--enable-dbo` or `--ubatch-size`, an explicit choice. Policy P1: info
naming the choice and where it is made, never an error, never dropped.

`OptInProperties(run, test_side)` finds, once per run, each property of a class of the library (a method
decorated `@property` whose body is one `return <expression>`) whose expression reads only fields
of its own class (`self.F`) through `or`, `and`, `not` and comparisons with constants, and is False
when every field has its class-level default (`F: bool = False`, `F: int = Field(default=0)`,
`field(default=None)`); a field the library assigns anything else to (`x.F = True`, or a keyword
`F=<computed>`; a keyword passing the user's setting on, `F=self.F`, is none) or a property name defined twice in
the run with another reading is no opt-in. `chosen(node, parents)` answers for a reference: it lies
in the body of an `if`/`elif` whose test is `<x>.P` (alone, or a part of an `and`), or after an
early exit of its function `if not <x>.P [or ...]: return/raise` (at the function's top level,
before the reference): "`<x>.P` is chosen (`Class.P` is `<expression>`, False by default,
path:line)". What stays: a property true by default or that reads anything else (a method call, a
platform test, an environment variable), a reference outside such a block, a block under `if not
<x>.P:` (the default's own path).
"""

from __future__ import annotations

import ast
from typing import Optional

from . import astcache

_DEFS = (ast.FunctionDef, ast.AsyncFunctionDef)
_UNKNOWN = object()


def _default(value: Optional[ast.AST]):
    """The constant a field's class-level value gives by default, or _UNKNOWN."""
    if value is None:
        return _UNKNOWN
    if isinstance(value, ast.Constant):
        return value.value
    if isinstance(value, ast.Call) and isinstance(value.func, (ast.Name, ast.Attribute)):
        name = value.func.id if isinstance(value.func, ast.Name) else value.func.attr
        if name in ("Field", "field"):
            for keyword in value.keywords:
                if keyword.arg == "default" and isinstance(keyword.value, ast.Constant):
                    return keyword.value.value
    return _UNKNOWN


UNKNOWN, field_default = _UNKNOWN, _default  # (public: optchoice29.py reads fields the same way)


def _fields(cls: ast.ClassDef) -> dict:
    out = {}
    for stmt in cls.body:
        if isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name):
            out[stmt.target.id] = _default(stmt.value)
        elif isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name):
            out[stmt.targets[0].id] = _default(stmt.value)
    return out


def _value(node: ast.AST, fields: dict, used: list):
    """The expression's value with every field at its default, or _UNKNOWN."""
    if isinstance(node, ast.Constant):
        return node.value
    if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "self":
        value = fields.get(node.attr, _UNKNOWN)
        if value is not _UNKNOWN:
            used.append(node.attr)
        return value
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
        value = _value(node.operand, fields, used)
        return _UNKNOWN if value is _UNKNOWN else not value
    if isinstance(node, ast.BoolOp):
        values = [_value(v, fields, used) for v in node.values]
        if any(v is _UNKNOWN for v in values):
            return _UNKNOWN
        if isinstance(node.op, ast.Or):
            return next((v for v in values if v), values[-1])
        return next((v for v in values if not v), values[-1])
    if isinstance(node, ast.Compare) and len(node.ops) == 1:
        left, right = _value(node.left, fields, used), _value(node.comparators[0], fields, used)
        if left is _UNKNOWN or right is _UNKNOWN:
            return _UNKNOWN
        op = node.ops[0]
        try:
            if isinstance(op, ast.Gt):
                return left > right
            if isinstance(op, ast.GtE):
                return left >= right
            if isinstance(op, ast.Lt):
                return left < right
            if isinstance(op, ast.LtE):
                return left <= right
            if isinstance(op, ast.Eq):
                return left == right
            if isinstance(op, ast.NotEq):
                return left != right
            if isinstance(op, ast.Is):
                return left is right
            if isinstance(op, ast.IsNot):
                return left is not right
        except TypeError:
            return _UNKNOWN
    return _UNKNOWN


def _assignments(tree: ast.Module, out: set) -> None:
    """(field, class) of each `self.F = <value>` in a method of a class (the field of that class),
    (field, None) of each `x.F = <value>` (any class's): a setting the library makes, not the
    class's default. A falsy constant (`parallel_config.enable_dbo = False`) keeps the default's
    answer and is left out."""
    owner: dict = {}
    for cls in astcache.nodes(tree, ast.ClassDef):
        if isinstance(cls, ast.ClassDef):
            for method in cls.body:
                if isinstance(method, _DEFS):
                    for node in ast.walk(method):
                        owner[id(node)] = cls.name
    for node in astcache.walk(tree):
        if isinstance(node, ast.Call):
            # (a keyword the library computes, `Config(enable_x=needs_x(model))`, is a setting too;
            # passing the user's own value on, `enable_x=self.enable_x` or `enable_x=enable_x`, is not)
            for keyword in node.keywords:
                value = keyword.value
                passed = (isinstance(value, ast.Attribute) and value.attr == keyword.arg) or (
                    isinstance(value, ast.Name) and value.id == keyword.arg) or (
                    isinstance(value, ast.Constant) and not value.value)
                if keyword.arg is not None and not passed:
                    out.add((keyword.arg, None))
            continue
        if not isinstance(node, (ast.Assign, ast.AugAssign, ast.AnnAssign)) or node.value is None:
            continue
        if isinstance(node.value, ast.Constant) and not node.value.value and not isinstance(node, ast.AugAssign):
            continue
        for target in (node.targets if isinstance(node, ast.Assign) else [node.target]):
            if isinstance(target, ast.Attribute):
                mine = isinstance(target.value, ast.Name) and target.value.id == "self"
                out.add((target.attr, owner.get(id(node)) if mine else None))


class OptInProperties:
    """The run's configuration properties false by default (this module's doc)."""

    def __init__(self, run, test_side) -> None:
        self.run, self.test_side = run, test_side  # (test_side: testcallers27's test or benchmark file)
        self._table: Optional[dict] = None

    def table(self) -> dict:
        """{property name: (class name, "relpath:line", the expression's source, its fields)}."""
        if self._table is not None:
            return self._table
        found: dict = {}
        dropped: set = set()
        assigned: set = set()
        for j, result in enumerate(self.run.results):
            if not result.relpath.endswith(".py") or self.test_side(result.relpath):
                continue
            data = self.run.text_of(j) or b""
            if b"@property" not in data and b"=" not in data:
                continue
            tree = self.run.tree(j)
            if tree is None:
                continue
            _assignments(tree, assigned)
            if b"@property" not in data:
                continue
            for cls in tree.body:
                if not isinstance(cls, ast.ClassDef):
                    continue
                fields = None
                for method in cls.body:
                    if not (isinstance(method, _DEFS) and any(
                            isinstance(d, ast.Name) and d.id == "property" for d in method.decorator_list)):
                        continue
                    body = [s for s in method.body if not (isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant))]
                    if method.name in found or method.name in dropped:
                        dropped.add(method.name)
                        found.pop(method.name, None)
                        continue
                    if len(body) != 1 or not isinstance(body[0], ast.Return) or body[0].value is None:
                        continue
                    fields = _fields(cls) if fields is None else fields
                    used: list = []
                    value = _value(body[0].value, fields, used)
                    if value is _UNKNOWN or value or not used:
                        continue
                    found[method.name] = (cls.name, f"{result.relpath}:{method.lineno}",
                                          " ".join(ast.unparse(body[0].value).split())[:100], tuple(dict.fromkeys(used)))
        self._table = {name: entry for name, entry in found.items()
                       if not any((f, None) in assigned or (f, entry[0]) in assigned for f in entry[3])}
        return self._table

    def _tested(self, test: ast.AST) -> Optional[str]:
        """The property name `test` reads as `<x>.P` (alone or in an `and`), or None."""
        parts = test.values if isinstance(test, ast.BoolOp) and isinstance(test.op, ast.And) else [test]
        for part in parts:
            if isinstance(part, ast.Attribute) and part.attr in self.table():
                return part.attr
        return None

    def _negated(self, test: ast.AST) -> Optional[str]:
        """The property name `test` reads as `not <x>.P` (alone or in an `or`), or None."""
        parts = test.values if isinstance(test, ast.BoolOp) and isinstance(test.op, ast.Or) else [test]
        for part in parts:
            if isinstance(part, ast.UnaryOp) and isinstance(part.op, ast.Not) and isinstance(part.operand, ast.Attribute) \
                    and part.operand.attr in self.table():
                return part.operand.attr
        return None

    def chosen(self, node: ast.AST, parents: dict) -> Optional[str]:
        """The opt-in choice the reference `node` lies behind (this module's doc), or None."""
        from .gatewalk30 import gate_of

        def off(test: ast.AST) -> Optional[str]:
            name = self._tested(test)
            return None if name is None else self._say(test, name)

        def taken(test: ast.AST) -> Optional[str]:
            name = self._negated(test)
            return None if name is None else self._say(test, name)

        return gate_of(node, parents, off, taken)  # (the enclosing `if`s, the earlier exits: gatewalk30.py)

    def _say(self, test: ast.AST, name: str) -> str:
        cls, where, expression, _fields_used = self.table()[name]
        read = next((ast.unparse(n) for n in ast.walk(test) if isinstance(n, ast.Attribute) and n.attr == name), name)
        return f"`{read}` is chosen (`{cls}.{name}` is `{expression}`, False by default, {where})"
