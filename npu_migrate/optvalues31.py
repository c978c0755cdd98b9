"""A mode a configuration field takes only when the user names it (issue #16, policy P1, audit round 31
FB#3). Read by testcallers27.py's walk, beside optchoice29.py.

optchoice29.py reads a field false at its default and never set by library code to a computed value.
ColossalAI's sequence-parallel mode is a string field the library does set, but only to its own
other modes:

    # colossalai/shardformer/shard/shard_config.py
    class ShardConfig:
        sequence_parallelism_mode: str = None
        ...
            self.sequence_parallelism_mode = (
                "split_gather" if self.sequence_parallelism_mode is None else self.sequence_parallelism_mode)

    # colossalai/booster/plugin/hybrid_parallel_plugin.py
    self.sequence_parallelism_mode = sequence_parallelism_mode if sequence_parallelism_mode is not None else "all_to_all"

    # colossalai/shardformer/modeling/llama.py
    sp_mode = shard_config.sequence_parallelism_mode
    if sp_mode == "ring_attn":
        attn_output = RingAttention.attention(...)      # flash-attn's varlen kernels: FB#3

`"ring_attn"` is neither the default nor any value the library stores: only a user's
`HybridParallelPlugin(sequence_parallelism_mode="ring_attn")` selects it, an explicit choice. Policy
P1: info naming the choice and where its default is set, never an error, never dropped.

`ChosenValues(run, test_side)` finds, once per run, each annotated field `F: T = <None or a string>`
(`Field(default=...)` alike) of a library class named `*Config` (a model's configuration aside, as in
optchoice29.py), one default for the name in the run, and the values library code stores in it: every
`x.F = v` (chained ones too), keyword `F=v` and dict entry `"F": v` of a library file, v a constant, a
conditional expression or `or` of such values, or the user's setting passed on (`x.F`, `getattr(x,
"F", ...)`, or a parameter `F` of its function never bound again). Any other value (a computed one,
`F=mode` of a local) drops the field: the library may choose the mode itself.

`chosen(node, parents)` answers for a reference in the body of an `if`/`elif` (or the true branch of
`a if test else b`, gatewalk30.py) whose test, alone or one operand of an `and`, is `S == "v"` or `S
in ("v", ...)`, S reading the field (`<x>.F`, or a local bound once before in its function to `<x>.F`
or `<x>.F or None`), where no value among the default and the library's stored ones is tested:
"`sp_mode == 'ring_attn'` is chosen (`ShardConfig.sequence_parallelism_mode` defaults to `None`,
path:line; the library stores only 'all_to_all', 'split_gather', None)". `chosen_at(tree, line)` asks
the same for a finding's own place.

Kept (the nearest true cases, tests/test_h152.py): a value the library stores itself (`mode =
"ring_attn"` on some path), the default's own value, a computed store, `!=`, an `or` test, an `else:`
branch; a class not named `*Config`.
"""

from __future__ import annotations

import ast
import re
from typing import Optional

from . import astcache
from .optchoice29 import local_value as _local
from .optinprops28 import UNKNOWN, field_default

_DEFS = (ast.FunctionDef, ast.AsyncFunctionDef)
_MODEL_FILES = re.compile(r"(^|/)(models|transformers_utils)/")
_PRETRAINED = re.compile(r"(?i)pretrainedconfig$")
_COMPUTED = object()


def _parameter_passed(name: ast.Name, parents: dict) -> bool:
    """`F` is a parameter of its innermost function, never bound again there (the user's value)."""
    up = parents.get(id(name))
    while up is not None and not isinstance(up, (*_DEFS, ast.Lambda)):
        up = parents.get(id(up))
    if up is None:
        return False
    args = up.args
    if name.id not in {a.arg for a in (*args.posonlyargs, *args.args, *args.kwonlyargs) if a is not None}:
        return False
    return not any(isinstance(n, ast.Name) and n.id == name.id and isinstance(n.ctx, ast.Store) for n in ast.walk(up))


def _stored(value: ast.AST, field: str, parents: dict):
    """The constants `value` may give the field (a set; the user's own setting adds none), or _COMPUTED."""
    if isinstance(value, ast.Constant):
        return {value.value}
    if isinstance(value, ast.IfExp):
        body, orelse = _stored(value.body, field, parents), _stored(value.orelse, field, parents)
        return _COMPUTED if _COMPUTED in (body, orelse) else body | orelse
    if isinstance(value, ast.BoolOp) and isinstance(value.op, ast.Or):
        out: set = set()
        for part in value.values:
            found = _stored(part, field, parents)
            if found is _COMPUTED:
                return _COMPUTED
            out |= found
        return out
    if isinstance(value, ast.Attribute) and value.attr == field:
        return set()
    if isinstance(value, ast.Name) and value.id == field and _parameter_passed(value, parents):
        return set()
    if isinstance(value, ast.Call) and isinstance(value.func, ast.Name) and value.func.id == "getattr" \
            and len(value.args) in (2, 3) and isinstance(value.args[1], ast.Constant) and value.args[1].value == field:
        return set() if len(value.args) == 2 else _stored(value.args[2], field, parents)
    return _COMPUTED


class ChosenValues:
    """The run's string-valued configuration fields whose tested modes only the user names."""

    def __init__(self, run, test_side) -> None:
        self.run, self.test_side = run, test_side
        self._table: Optional[dict] = None
        self._lines: dict = {}
        self._params: dict = {}

    def table(self) -> dict:
        """{field: (class, "relpath:line", default, frozenset of the values the library stores)}."""
        if self._table is not None:
            return self._table
        from .callgates21 import NOT_LIBRARY

        fields: dict = {}
        dropped: set = set()
        stores: dict = {}
        trees = []
        for j, result in enumerate(self.run.results):
            if not result.relpath.endswith(".py") or self.test_side(result.relpath) or any(
                    part in NOT_LIBRARY for part in result.relpath.split("/")[:-1]):
                continue
            data = self.run.text_of(j) or b""
            if b"Config" not in data:
                continue
            tree = self.run.tree(j)
            if tree is None:
                continue
            trees.append(j)
            model = bool(_MODEL_FILES.search(result.relpath))
            for cls in tree.body:
                if not (isinstance(cls, ast.ClassDef) and cls.name.endswith("Config")):
                    continue
                for stmt in cls.body:
                    if not (isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name)):
                        continue
                    name, value = stmt.target.id, field_default(stmt.value)
                    if model or any(_PRETRAINED.search(astcache.dotted(b, strict=False) or "") for b in cls.bases) \
                            or value is UNKNOWN or not (value is None or isinstance(value, str)) \
                            or name in fields and fields[name][2] != value:
                        dropped.add(name)
                        continue
                    fields.setdefault(name, (cls.name, f"{result.relpath}:{stmt.lineno}", value))
        names = {name for name in fields if name not in dropped}
        if not names:
            self._table = {}
            return self._table
        words = [name.encode() for name in names]
        for j, result in enumerate(self.run.results):
            if not result.relpath.endswith(".py") or self.test_side(result.relpath) or any(
                    part in NOT_LIBRARY for part in result.relpath.split("/")[:-1]):
                continue
            data = self.run.text_of(j) or b""
            if not any(w in data for w in words):
                continue
            tree = self.run.tree(j)
            if tree is None:
                continue
            parents = astcache.parents(tree)
            for node in astcache.nodes(tree, (ast.Assign, ast.AnnAssign, ast.AugAssign, ast.keyword, ast.Dict)):
                pairs = []
                if isinstance(node, ast.keyword):
                    if node.arg in names:
                        pairs.append((node.arg, node.value))
                elif isinstance(node, ast.Dict):
                    pairs += [(k.value, v) for k, v in zip(node.keys, node.values)
                              if isinstance(k, ast.Constant) and k.value in names]
                elif node.value is not None:
                    targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                    for target in targets:
                        if isinstance(target, ast.Attribute) and target.attr in names:
                            pairs.append((target.attr, None if isinstance(node, ast.AugAssign) else node.value))
                for name, value in pairs:
                    found = _COMPUTED if value is None else _stored(value, name, parents)
                    if found is _COMPUTED:
                        dropped.add(name)
                    else:
                        stores.setdefault(name, set()).update(found)
        self._table = {name: (*fields[name], frozenset(stores.get(name, ()))) for name in names if name not in dropped}
        return self._table

    # ------------------------------------------------------------------ reading a test
    def _field(self, node: ast.AST, parents: dict, depth: int = 0) -> Optional[str]:
        if isinstance(node, ast.BoolOp) and isinstance(node.op, ast.Or) and len(node.values) == 2 \
                and isinstance(node.values[1], ast.Constant) and node.values[1].value is None:
            node = node.values[0]  # (`x.F or None`)
        if isinstance(node, ast.Attribute) and node.attr in self.table():
            return node.attr
        if isinstance(node, ast.Name) and depth == 0:
            bound = _local(node, parents)
            if bound is not None:
                return self._field(bound, parents, depth + 1)
            return self._passed(node, parents)
        return None

    def _passed(self, node: ast.Name, parents: dict) -> Optional[str]:
        """The field a parameter reads: `sp_mode` of a module-level `def f(shard_config, sp_mode=None)`
        (a closure inside it included), defaulting to None or the field's default, never bound again,
        every library call of f passing the field there (`f(cfg, sp_mode)`, `sp_mode = cfg.F or None`)."""
        function = parents.get(id(node))
        while function is not None and not (isinstance(function, _DEFS) and any(
                a.arg == node.id for a in (*function.args.posonlyargs, *function.args.args, *function.args.kwonlyargs))):
            if isinstance(function, (*_DEFS, ast.Lambda)) and node.id in {
                    a.arg for a in (*function.args.posonlyargs, *function.args.args, *function.args.kwonlyargs)}:
                return None
            function = parents.get(id(function))
        if function is None or not isinstance(parents.get(id(function)), ast.Module):
            return None
        key = (id(function), node.id)
        if key not in self._params:
            self._params[key] = self._param_field(function, node.id)
        return self._params[key]

    def _param_field(self, function: ast.AST, name: str) -> Optional[str]:
        args = function.args
        positional = [*args.posonlyargs, *args.args]
        defaults = dict(zip([a.arg for a in positional[len(positional) - len(args.defaults):]], args.defaults))
        defaults.update((a.arg, d) for a, d in zip(args.kwonlyargs, args.kw_defaults) if d is not None)
        index = next((k for k, a in enumerate(positional) if a.arg == name), None)
        if any(isinstance(n, ast.Name) and n.id == name and isinstance(n.ctx, (ast.Store, ast.Del))
               for n in ast.walk(function)):
            return None
        word, found = function.name.encode(), None
        for j, result in enumerate(self.run.results):
            if not result.relpath.endswith(".py") or self.test_side(result.relpath):
                continue
            data = self.run.text_of(j) or b""
            if word not in data:
                continue
            tree = self.run.tree(j)
            if tree is None:
                return None
            parents = astcache.parents(tree)
            for ref in astcache.nodes(tree, (ast.Name, ast.Attribute)):
                if (ref.id if isinstance(ref, ast.Name) else ref.attr) != function.name or ref is function:
                    continue
                call = parents.get(id(ref))
                if not (isinstance(call, ast.Call) and call.func is ref):
                    return None  # (handed on as a value: its calls are unknown)
                if any(isinstance(a, ast.Starred) for a in call.args) or any(k.arg is None for k in call.keywords):
                    return None
                value = next((k.value for k in call.keywords if k.arg == name), None)
                if value is None and index is not None and index < len(call.args):
                    value = call.args[index]
                field = self._field(value, parents) if value is not None else None
                if field is None or found not in (None, field):
                    return None
                found = field
        if found is None:
            return None
        default = defaults.get(name)
        if default is not None and not (isinstance(default, ast.Constant) and default.value == self.table()[found][2]):
            return None
        return found

    def _off(self, test: ast.AST, parents: dict) -> Optional[str]:
        parts = test.values if isinstance(test, ast.BoolOp) and isinstance(test.op, ast.And) else [test]
        for part in parts:
            if not (isinstance(part, ast.Compare) and len(part.ops) == 1 and isinstance(part.ops[0], (ast.Eq, ast.In))):
                continue
            right = part.comparators[0]
            tested = [right] if isinstance(part.ops[0], ast.Eq) else \
                list(right.elts) if isinstance(right, (ast.Tuple, ast.List, ast.Set)) else []
            if not tested or not all(isinstance(t, ast.Constant) and isinstance(t.value, str) for t in tested):
                continue
            name = self._field(part.left, parents)
            if name is None:
                continue
            cls, where, default, stored = self.table()[name]
            values = {t.value for t in tested}
            if default in values or values & stored:
                continue
            told = ", ".join(repr(v) for v in sorted(stored, key=repr)) if stored else "nothing else"
            return (f"`{' '.join(ast.unparse(part).split())[:80]}` is chosen (`{cls}.{name}` defaults to "
                    f"`{default!r}`, {where}; the library stores only {told})")
        return None

    def chosen(self, node: ast.AST, parents: dict) -> Optional[str]:
        """The user's choice of a mode the reference `node` lies behind (this module's doc), or None."""
        if not self.table():
            return None
        from .gatewalk30 import gate_of

        return gate_of(node, parents, lambda test: self._off(test, parents), lambda _test: None, if_exp=True)

    def chosen_at(self, tree: ast.Module, line: int) -> Optional[str]:
        """The same for a place at `line` of `tree` (its outermost node starting there)."""
        if not self.table():
            return None
        if id(tree) not in self._lines:
            starts: dict = {}
            for node in astcache.walk(tree):
                if isinstance(node, (ast.stmt, ast.expr)):
                    starts.setdefault(node.lineno, node)
            self._lines[id(tree)] = (tree, starts)
        node = self._lines[id(tree)][1].get(line)
        return None if node is None else self.chosen(node, astcache.parents(tree))


