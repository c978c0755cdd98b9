"""Code a library reaches only when a user picks a non-default value of a config dataclass field
(issue #16, policy P1 across modules; round-28 audit CC#25 and CA#27). Read by testcallers27.py's
walk, next to optinprops28.py.

vLLM keeps every option in a dataclass of its `vllm/config/` package, with the default beside the
field and a CLI flag built from it:

    # vllm/config/parallel.py
    class ParallelConfig:
        all2all_backend: All2AllBackend = "allgather_reducescatter"

    # vllm/model_executor/layers/fused_moe/config.py (another class, the same field passed on)
    @property
    def use_fi_nvl_one_sided_kernels(self):
        return self.use_all2all_kernels and self.all2all_backend == "flashinfer_nvlink_one_sided"

    # vllm/model_executor/layers/fused_moe/all2all_utils.py
    elif moe.use_fi_nvl_one_sided_kernels:
        dispatch_layout = flashinfer_one_sided_dispatch_layout(...)   # imports flashinfer.fused_moe

and a model reads `kernel_config.moe_backend == "deep_gemm_mega_moe"` into a local, stores it as
`self.use_mega_moe`, and builds its DeepGEMM experts only under `if self.use_mega_moe:`. An NPU host
runs that code only after its user passes `--all2all-backend flashinfer_nvlink_one_sided` or
`--moe-backend deep_gemm_mega_moe`: an explicit choice. Policy P1: info naming the option, the
value and where the default is set ("`KernelConfig.moe_backend` defaults to 'auto'
(vllm/config/kernel.py:305)"), never an error and never dropped.

`OptConfigs(run, test_side)` reads, once per run:
* the fields: each class-level field of a class in a library `config/` package module with a
  constant default (a string, a number, a bool, None, or an enum member `Enum.MEMBER`, also through
  `Field(default=...)`/`field(default=...)`); a name two such classes give different defaults is
  left out;
* the library's settings of those names: every attribute store `x.F = v`, every keyword `F=v` of a
  call and every class-level `F: T = v` of another class (tests and benchmarks aside: policy P2).
  A constant (or a module-level constant name, or an enum member) is a value the library picks
  itself; the user's own value passed on (`F=self.F`, `F=cfg.F`, `F=self.x_F`) is none; anything
  else (a computed value) makes the field unknown: it is left out;
* the properties false by default: a class's `@property` whose one `return` is false by this
  reading (its `self.F` fields at their defaults), or forwards another such property
  (`return self.moe_parallel_config.P`); a name also stored anywhere, or defined elsewhere with
  another reading, is none.

An expression is read with every such field at its default or at a value the library sets: a
field read `<x>.F` (any receiver: the field name is the option's), a comparison of it with
constants (`==`, `!=`, `in`, `not in` a tuple of them), `and`/`or`/`not`, an opt-in property
`<x>.P`, a local name every binding of which in its function reads so (`mega = cfg.moe_backend ==
"deep_gemm_mega_moe"`), and `self.A` every store of which in its class reads so. `chosen(node,
parents)` answers for a reference: it lies in the body of an `if`/`elif` whose test reads false
that way, or after an early exit of its function (`if <test true by default>: return/raise`).

What stays (the nearest true cases): a comparison with the field's default value, or with a value
the library sets itself somewhere; a field whose value the library computes; a name a parameter
brings in; an `else:` branch (the default's own path); a property that reads anything else.
"""

from __future__ import annotations

import ast
import re
from typing import Optional

from . import astcache
from .optenvs32 import EnvSwitches, single_class_store
from .optreads32 import constructor_assert, foreign_only, getattr_field

_DEFS = (ast.FunctionDef, ast.AsyncFunctionDef)
_CONFIG_FILE = re.compile(r"(^|/)config/[^/]+\.py$")
_CONST_NAME = re.compile(r"^[A-Z][A-Z0-9_]*$")
_ENUM_CLASS = re.compile(r"^[A-Z][A-Za-z0-9_]*$")
_UNKNOWN = None  # (an expression whose values are not known)
_SIZE_FIELD = re.compile(r"_(size|gb|mb|bytes)$")  # (an amount whose 0 default turns a feature off: `x.F > 0`)


class _Enum(tuple):
    """An enum member `Cls.MEMBER` as a value (truthy; equal only to the same member)."""


def _member(node: ast.AST) -> Optional[_Enum]:
    if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) \
            and _ENUM_CLASS.match(node.value.id) and _CONST_NAME.match(node.attr):
        return _Enum((node.value.id, node.attr))
    return None


def _constant(node: ast.AST, consts: dict):
    """(True, value) for a constant, an enum member or a module-level constant name; (False, None)."""
    if isinstance(node, ast.Constant) and isinstance(node.value, (str, int, float, bool, type(None))):
        return True, node.value
    member = _member(node)
    if member is not None:
        return True, member
    if isinstance(node, ast.Name) and node.id in consts:
        return True, consts[node.id]
    return False, None


def _show(value) -> str:
    return ".".join(value) if isinstance(value, _Enum) else repr(value)


def _field_default(value: Optional[ast.AST]):
    if isinstance(value, ast.Call) and isinstance(value.func, (ast.Name, ast.Attribute)):
        name = value.func.id if isinstance(value.func, ast.Name) else value.func.attr
        if name not in ("Field", "field"):
            return False, None
        value = next((k.value for k in value.keywords if k.arg == "default"), None)
    if value is None:
        return False, None
    return _constant(value, {})


def _module_constants(tree: ast.Module) -> dict:
    out: dict = {}
    for stmt in tree.body:
        target = stmt.targets[0] if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 else \
            stmt.target if isinstance(stmt, ast.AnnAssign) and stmt.value is not None else None
        if isinstance(target, ast.Name) and _CONST_NAME.match(target.id):
            known, value = _constant(stmt.value, {})
            if known:
                out[target.id] = value
    return out


def _passed_on(value: ast.AST, name: str) -> bool:
    """`F=self.F`, `F=cfg.F`, `F=F`, `F=self.x_F`, `F=Enum[self.x_F.upper()]`: the user's own value
    handed on (converted at most by a subscript or a string method)."""
    words = [n.attr if isinstance(n, ast.Attribute) else n.id for n in ast.walk(value)
             if isinstance(n, (ast.Attribute, ast.Name))]
    if not any(word == name or word.endswith("_" + name) for word in words):
        return False
    return all(isinstance(n.func, ast.Attribute) and n.func.attr in _STR_METHODS and not n.args
               for n in ast.walk(value) if isinstance(n, ast.Call))


_STR_METHODS = frozenset({"upper", "lower", "strip", "casefold"})


def _parents(tree: ast.AST) -> dict:
    out = {}
    for node in astcache.walk(tree):
        for child in ast.iter_child_nodes(node):
            out[id(child)] = node
    return out


class OptConfigs:
    """The run's config dataclass fields and what reads them at their defaults (this module's doc)."""

    def __init__(self, run, test_side) -> None:
        self.run, self.test_side = run, test_side
        self._fields: Optional[dict] = None
        self._props: dict = {}
        self._parents: dict = {}
        self._self_class: Optional[str] = None
        self._stored_in: dict = {}
        self._stored_at: dict = {}
        self._gated_sets: dict = {}  # ((name, owner) -> the opt-in gate of its computed settings)
        self._read: dict = {}  # ((kind, id of its function or class, name) -> (values, what they read))
        self._lines: dict = {}  # (id of a tree -> {line: its first statement})
        self._envs = EnvSwitches(run, test_side)

    # -- the tables ---------------------------------------------------------------------------
    def fields(self) -> dict:
        """{field name: [(class name, default value, "relpath:line")]} of the run's config classes;
        self._set_values: {(name, class or None): the values the library sets} (None: any class)."""
        if self._fields is not None:
            return self._fields
        found: dict = {}
        library = []
        for j, result in enumerate(self.run.results):
            if not result.relpath.endswith(".py") or self.test_side(result.relpath):
                continue
            library.append(j)
            if not _CONFIG_FILE.search(result.relpath):
                continue
            tree = self.run.tree(j)
            for cls in tree.body if tree is not None else ():
                if not isinstance(cls, ast.ClassDef):
                    continue
                for stmt in cls.body:
                    if isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name) \
                            and not stmt.target.id.startswith("_"):
                        known, value = _field_default(stmt.value)
                        if known:
                            found.setdefault(stmt.target.id, []).append(
                                (cls.name, value, f"{result.relpath}:{stmt.lineno}"))
        self._set_values: dict = {}
        self._dropped: set = set()
        self._stored_in: dict = {}  # (attribute name -> the trees that store it: `self.A` read from one only)
        self._stored_at: dict = {}  # (attribute name -> the run's indexes of those modules)
        self._pending: list = []  # ((name, owner, value, tree) of each computed setting)
        self._setting_tree = None
        if found or self._envs.switches():  # (the stores of `self.A` an environment switch sets too: optenvs32.py)
            self._settings(library, found)
        self._fields = found
        self._read_properties(library)
        if self._pending:  # (computed settings only an opt-in reaches: optreads32.py)
            self._resolve_pending()
        return self._fields

    def _owner(self, receiver: ast.AST, name: str, node: ast.AST = None) -> Optional[str]:
        """The config class a receiver names by its own name (`kernel_config` -> KernelConfig)."""
        word = receiver.attr if isinstance(receiver, ast.Attribute) else receiver.id if isinstance(receiver, ast.Name) else ""
        for cls, _default, _where in (self._fields or {}).get(name, ()):
            if word == _snake(cls):
                return cls
        return None

    def _store_owner(self, target: ast.Attribute, tree: ast.Module, config_classes: set) -> Optional[str]:
        """Whose field a store `x.F = v` sets: a config class the receiver names, "self:C" for
        `self.F` in a method of another class C (that class's own attribute), else None (any)."""
        owner = self._owner(target.value, target.attr)
        if owner is None and isinstance(target.value, ast.Name) and target.value.id == "self":
            cls = self._class_at(tree, target)
            if cls is not None and id(cls) not in config_classes:
                return f"self:{cls.name}"
            if cls is not None and any(c == cls.name for c, _d, _w in self._fields.get(target.attr, ())):
                return cls.name  # (a config class setting its own field)
        return owner

    def _class_at(self, tree: ast.Module, node: ast.AST) -> Optional[ast.ClassDef]:
        if id(tree) not in self._parents:
            self._parents[id(tree)] = (tree, _parents(tree))
        parents = self._parents[id(tree)][1]
        return self._enclosing(node, parents, ast.ClassDef)

    def _settings(self, library: list, found: dict) -> None:
        self._fields = found  # (read by _owner while the settings are gathered)
        constants: dict = {}
        for j in library:
            tree = self.run.tree(j)
            for name, value in (_module_constants(tree) if tree is not None else {}).items():
                constants.setdefault(name, set()).add(value)
        consts = {name: next(iter(values)) for name, values in constants.items() if len(values) == 1}
        classes = {cls for entries in found.values() for cls, _d, _w in entries}
        for j in library:
            tree = self.run.tree(j)
            if tree is None:
                continue
            config_classes = set()
            if _CONFIG_FILE.search(self.run.results[j].relpath):
                config_classes = {id(c) for c in tree.body if isinstance(c, ast.ClassDef)}
            for node in astcache.walk(tree):
                if isinstance(node, ast.Attribute) and not isinstance(node.ctx, ast.Load):
                    self._stored_in.setdefault(node.attr, set()).add(id(tree))
                    self._stored_at.setdefault(node.attr, set()).add(j)  # (which modules: optreads32.py)
                pairs = []
                if isinstance(node, ast.Call):
                    callee = node.func.attr if isinstance(node.func, ast.Attribute) else \
                        node.func.id if isinstance(node.func, ast.Name) else ""
                    if callee in classes or callee.endswith(("Config", "Args")) or callee == "replace":
                        owner = callee if callee in classes else None
                        pairs = [(k.arg, owner, k.value) for k in node.keywords if k.arg in found]
                elif isinstance(node, (ast.Assign, ast.AnnAssign)) and node.value is not None:
                    targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                    pairs = [(t.attr, self._store_owner(t, tree, config_classes), node.value) for t in targets
                             if isinstance(t, ast.Attribute) and t.attr in found]
                elif isinstance(node, ast.AugAssign) and isinstance(node.target, ast.Attribute) \
                        and node.target.attr in found:
                    self._dropped.add((node.target.attr, None))
                elif isinstance(node, ast.ClassDef) and id(node) not in config_classes:
                    for stmt in node.body:
                        if isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name) \
                                and stmt.target.id in found and stmt.value is not None:
                            pairs.append((stmt.target.id, None, stmt.value))
                self._setting_tree = tree
                for name, owner, value in pairs:
                    self._set(name, owner, value, consts)
            for node in astcache.walk(tree):  # (setattr(x, "F", v): a setting the reading cannot follow)
                if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "setattr" \
                        and len(node.args) == 3 and isinstance(node.args[1], ast.Constant) and node.args[1].value in found:
                    self._dropped.add((node.args[1].value, None))

    def _set(self, name: str, owner: Optional[str], value: ast.AST, consts: dict) -> None:
        if isinstance(value, ast.IfExp):
            self._set(name, owner, value.body, consts)
            self._set(name, owner, value.orelse, consts)
            return
        known, constant = _constant(value, consts)
        if known:
            self._set_values.setdefault((name, owner), set()).add(constant)
        elif isinstance(value, ast.Attribute) and isinstance(value.value, ast.Name) and value.attr == name \
                and value.value.id[:1].isupper():
            pass  # (`ParallelConfig.all2all_backend`: the default itself)
        elif not _passed_on(value, name):
            self._dropped.add((name, owner))
            self._pending.append((name, owner, value, self._setting_tree))  # (unless an opt-in gate holds it)

    def _field_values(self, node: ast.Attribute, used: list, scope: dict):
        """The values a field read `<x>.F` may have (its defaults, what the library sets), or _UNKNOWN."""
        name = node.attr
        entries = self._fields[name]
        owner = self._owner(node.value, name)
        mine = None  # ("self:C": `self.F` read in a method of class C)
        if owner is None and isinstance(node.value, ast.Name) and node.value.id == "self":
            cls = self._self_class
            if cls is None and scope:
                found = self._enclosing(node, scope["parents"], ast.ClassDef)
                cls = found.name if found is not None else None
            owner = cls if any(c == cls for c, _d, _w in entries) else None
            mine = f"self:{cls}" if owner is None and cls is not None else None
        if owner is not None:
            entries = [e for e in entries if e[0] == owner]
        keys = [None] + [cls for cls, _d, _w in entries]
        if mine is not None:
            keys.append(mine)
        elif owner is None:  # (any object: another class's own attribute of that name too)
            keys.extend(k[1] for k in list(self._set_values) + list(self._dropped)
                        if k[0] == name and isinstance(k[1], str) and k[1].startswith("self:"))
        if any((name, key) in self._dropped for key in keys):
            return _UNKNOWN
        values = {default for _c, default, _w in entries}
        for key in keys:
            values |= self._set_values.get((name, key), set())
        enums = {v[0] for v in values if isinstance(v, _Enum) and v in {d for _c, d, _w in entries}}
        if owner is not None and len(enums) == 1:
            # (an enum field: a string stored into it is parsed to its member, `Enum[value.upper()]`;
            # another enum's member belongs to another object's attribute of that name)
            enum = next(iter(enums))
            values = {_Enum((enum, v.upper())) if isinstance(v, str) else v for v in values
                      if isinstance(v, str) or (isinstance(v, _Enum) and v[0] == enum)}
        for cls, default, where in entries[:2]:
            used.append(f"`{cls}.{name}` defaults to {_show(default)} ({where})")
        for key in keys:
            if (name, key) in self._gated_sets:
                used.append(self._gated_sets[(name, key)])
        return values

    def _read_properties(self, library: list) -> None:
        """Fills self._props: {property name: (class, "relpath:line", expression, the fields read)}."""
        definitions: dict = {}
        stored: set = set()
        for j in library:
            data = self.run.text_of(j) or b""
            if b"@property" not in data:
                continue
            tree = self.run.tree(j)
            for cls in tree.body if tree is not None else ():
                if not isinstance(cls, ast.ClassDef):
                    continue
                for method in cls.body:
                    if isinstance(method, _DEFS) and any(
                            isinstance(d, ast.Name) and d.id == "property" for d in method.decorator_list):
                        body = [s for s in method.body if not (isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant))]
                        returned = body[0].value if len(body) == 1 and isinstance(body[0], ast.Return) else None
                        definitions.setdefault(method.name, []).append(
                            (cls.name, f"{self.run.results[j].relpath}:{method.lineno}", returned))
        for j in library:
            tree = self.run.tree(j)
            for node in astcache.walk(tree) if tree is not None else ():
                if isinstance(node, ast.Attribute) and not isinstance(node.ctx, ast.Load) and node.attr in definitions:
                    stored.add(node.attr)
        changed = True
        while changed:  # (a property forwarding another is read once that one is)
            changed = False
            for name, defs in definitions.items():
                if name in self._props or name in stored:
                    continue
                readings = []
                for cls, where, returned in defs:
                    if returned is None:
                        break
                    if isinstance(returned, ast.Attribute) and returned.attr == name:
                        readings.append(None)  # (forwards the same property of another object)
                        continue
                    used: list = []
                    self._self_class = cls
                    values = self._values(returned, {}, used, frozenset(), fields_of_self=True)
                    self._self_class = None
                    if values is _UNKNOWN or any(values) or not used:
                        break
                    readings.append((cls, where, " ".join(ast.unparse(returned).split())[:100], tuple(used)))
                else:
                    own = [r for r in readings if r is not None]
                    if own:
                        self._props[name] = own[0]
                        changed = True

    # -- reading an expression ----------------------------------------------------------------
    def _values(self, node: ast.AST, scope: dict, used: list, seen: frozenset, fields_of_self: bool = False):
        """The set of values `node` may have with every config field at its default or a value the
        library sets; _UNKNOWN where not known. scope: {"tree", "parents"} of the node's module."""
        fields = self._fields or {}
        known, constant = _constant(node, {})
        if known:
            return {constant}
        if isinstance(node, ast.Attribute):
            # (`envs.X`, an environment switch off by default, stored in a local or `self.A` (a test
            # of `envs.X` itself is registryoptin28's): optenvs32.py)
            switch = self._envs.read(node) if seen else None
            if switch is not None:
                used.append(switch)
                return {False}
            if node.attr in fields:
                return self._field_values(node, used, scope)
            if node.attr in self._props:
                cls, where, expression, reads = self._props[node.attr]
                used.append(f"`{cls}.{node.attr}` is `{expression}` ({where}; {'; '.join(reads[:2])})")
                return {False}
            if not fields_of_self and isinstance(node.value, ast.Name) and node.value.id == "self" and scope:
                return self._self_attribute(node, scope, used, seen)
            if not fields_of_self and scope:  # (`self.sampler.compute_nans`: one class's own attribute, optenvs32.py)
                store = single_class_store(self.run, self._stored_at.get(node.attr, set()), node.attr)
                if store is not None:
                    return self._self_attribute(store, self._scope_of(store, self._tree_parents(store)), used, seen)
            return _UNKNOWN
        if isinstance(node, ast.Name) and scope and not fields_of_self:
            return self._local(node, scope, used, seen)
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
            values = self._values(node.operand, scope, used, seen, fields_of_self)
            return _UNKNOWN if values is _UNKNOWN else {not v for v in values}
        if isinstance(node, ast.BoolOp):
            parts = [self._values(v, scope, used, seen, fields_of_self) for v in node.values]
            decided = True if isinstance(node.op, ast.Or) else False
            # (one operand always falsy decides an `and`, one always truthy an `or`)
            if any(p is not _UNKNOWN and all(bool(v) is decided for v in p) for p in parts):
                return {decided}
            if any(p is _UNKNOWN for p in parts):
                return _UNKNOWN
            return {bool(v) for p in parts for v in p}
        if isinstance(node, ast.Compare) and len(node.ops) == 1:
            op, right = node.ops[0], node.comparators[0]
            used.append(f"`{' '.join(ast.unparse(node).split())[:90]}`")
            if isinstance(op, (ast.In, ast.NotIn)):
                if not isinstance(right, (ast.Tuple, ast.List, ast.Set)):
                    return _UNKNOWN
                options = [_constant(e, {}) for e in right.elts]
                if not all(k for k, _v in options):
                    return _UNKNOWN
                lefts = self._values(node.left, scope, used, seen, fields_of_self)
                if lefts is _UNKNOWN or not self._comparable(lefts, [v for _k, v in options]):
                    return _UNKNOWN
                hits = {any(_same(a, v) for _k, v in options) for a in lefts}
                return hits if isinstance(op, ast.In) else {not h for h in hits}
            if isinstance(op, (ast.Eq, ast.NotEq)):
                lefts = self._values(node.left, scope, used, seen, fields_of_self)
                rights = self._values(right, scope, used, seen, fields_of_self)
                if lefts is _UNKNOWN or rights is _UNKNOWN or not self._comparable(lefts, rights):
                    return _UNKNOWN
                hits = {_same(a, b) for a in lefts for b in rights}
                return hits if isinstance(op, ast.Eq) else {not h for h in hits}
            if isinstance(op, ast.Gt) and _zero(right) and isinstance(node.left, ast.Attribute) \
                    and _SIZE_FIELD.search(node.left.attr):
                # (`prefetch.offload_group_size > 0`: a size whose default 0 turns its feature off, round
                # 31 FC#23; `tensor_parallel_size > 1`, a default 1: unknown, how NPU hosts serve; a rank,
                # a port, a seed: no size, the launcher sets them)
                lefts = self._values(node.left, scope, used, seen, fields_of_self)
                if lefts is _UNKNOWN or not lefts or not all(_number(v) for v in lefts):
                    return _UNKNOWN
                return {v > 0 for v in lefts}
            if isinstance(op, (ast.Is, ast.IsNot)) and isinstance(right, ast.Constant) and right.value is None:
                # (`x.speculative_config is not None`: an object built only from a user's choice, round 30)
                lefts = self._values(node.left, scope, used, seen, fields_of_self)
                if lefts is _UNKNOWN:
                    return _UNKNOWN
                hits = {a is None for a in lefts}
                return hits if isinstance(op, ast.Is) else {not h for h in hits}
        if isinstance(node, ast.Call):
            read = getattr_field(node, fields)  # (`getattr(x, "F", default)`: round 32 GB#31, optreads32.py)
            if read is not None:
                values = self._values(read[0], scope, used, seen, fields_of_self)
                known, fallback = _constant(read[1], {}) if read[1] is not None else (True, None)
                if values is _UNKNOWN or not known:
                    return _UNKNOWN
                return values | ({fallback} if read[1] is not None else set())
            return self._prefix_test(node, scope, used, seen, fields_of_self)
        return _UNKNOWN

    def _prefix_test(self, node: ast.Call, scope: dict, used: list, seen: frozenset, fields_of_self: bool):
        """`<x>.F.startswith("turboquant_")` (or `.endswith`, a tuple of strings): a KV-cache dtype
        chosen by name, read over F's string values (round 31 FC#8, FB#12: kvchoice31.py)."""
        func = node.func
        if not (isinstance(func, ast.Attribute) and func.attr in ("startswith", "endswith")
                and len(node.args) == 1 and not node.keywords):
            return _UNKNOWN
        arg = node.args[0]
        parts = arg.elts if isinstance(arg, ast.Tuple) else [arg]
        if not parts or not all(isinstance(p, ast.Constant) and isinstance(p.value, str) for p in parts):
            return _UNKNOWN
        lefts = self._values(func.value, scope, used, seen, fields_of_self)
        if lefts is _UNKNOWN or not lefts or not all(isinstance(v, str) for v in lefts):
            return _UNKNOWN
        used.append(f"`{' '.join(ast.unparse(node).split())[:90]}`")
        affixes = tuple(p.value for p in parts)
        return {getattr(v, func.attr)(affixes) for v in lefts}

    @staticmethod
    def _comparable(lefts, rights) -> bool:
        """An enum member and a plain constant: unknown (a str enum may equal the string)."""
        kinds = {isinstance(v, _Enum) for v in list(lefts) + list(rights)}
        return len(kinds) == 1

    def _scope_of(self, node: ast.AST, parents: dict) -> dict:
        current = node
        while id(current) in parents:
            current = parents[id(current)]
        if not isinstance(current, ast.Module):
            return {}
        if id(current) not in self._parents:
            self._parents[id(current)] = (current, _parents(current))
        return {"tree": current, "parents": self._parents[id(current)][1]}

    def _enclosing(self, node: ast.AST, parents: dict, kinds) -> Optional[ast.AST]:
        current = parents.get(id(node))
        while current is not None and not isinstance(current, kinds):
            current = parents.get(id(current))
        return current

    def _local(self, node: ast.Name, scope: dict, used: list, seen: frozenset):
        function = self._enclosing(node, scope["parents"], _DEFS)
        return self._memo(("local", id(function), node.id), lambda told: self._local_read(node, scope, told, seen), used)

    def _memo(self, key: tuple, read, used: list):
        """One reading per local or attribute (the walk asks for the same ones again and again)."""
        if key not in self._read:
            told: list = []
            self._read[key] = (read(told), told)
        values, told = self._read[key]
        used.extend(told)
        return values

    def _local_read(self, node: ast.Name, scope: dict, used: list, seen: frozenset):
        parents = scope["parents"]
        function = self._enclosing(node, parents, _DEFS)
        if function is None or ("local", id(function), node.id) in seen:
            return _UNKNOWN
        arguments = function.args
        if node.id in {a.arg for a in arguments.args + arguments.kwonlyargs + arguments.posonlyargs} \
                or (arguments.vararg and arguments.vararg.arg == node.id) or (arguments.kwarg and arguments.kwarg.arg == node.id):
            return _UNKNOWN
        seen = seen | {("local", id(function), node.id)}
        values: set = set()
        bound = False
        for sub in ast.walk(function):
            if isinstance(sub, ast.Name) and sub.id == node.id and not isinstance(sub.ctx, ast.Load):
                owner = parents.get(id(sub))
                if not (isinstance(owner, ast.Assign) and len(owner.targets) == 1 and owner.targets[0] is sub):
                    return _UNKNOWN  # (a tuple target, a loop, a with, an augmented store: not read here)
                if self._enclosing(sub, parents, _DEFS) is not function:
                    return _UNKNOWN
                if self._bound_off(owner, function, scope, seen):
                    continue  # (`if x.size > 0: backend = "prefetch"`: a binding only a choice makes, FC#23)
                found = self._values(owner.value, scope, used, seen)
                if found is _UNKNOWN:
                    return _UNKNOWN
                values |= found
                bound = True
            elif isinstance(sub, (ast.Global, ast.Nonlocal)) and node.id in sub.names:
                return _UNKNOWN
        return values if bound else _UNKNOWN

    def _bound_off(self, stmt: ast.AST, function: ast.AST, scope: dict, seen: frozenset) -> bool:
        """A local's binding in the body of an `if`/`elif` of its function whose test is false at the
        defaults (round 31 FC#23: `backend = "prefetch"` under `if prefetch.offload_group_size > 0:`):
        not a value the local has unless the user chooses; its `else:` branch is read as bound."""
        parents = scope["parents"]
        child, current = stmt, parents.get(id(stmt))
        while current is not None and current is not function:
            if isinstance(current, ast.If) and any(child is s for s in current.body):
                used: list = []
                values = self._values(current.test, scope, used, seen)
                if values is not _UNKNOWN and values and not any(values) and used:
                    return True
            child, current = current, parents.get(id(current))
        return False

    def _self_attribute(self, node: ast.Attribute, scope: dict, used: list, seen: frozenset):
        cls = self._enclosing(node, scope["parents"], ast.ClassDef)
        return self._memo(("self", id(cls), node.attr), lambda told: self._self_read(node, scope, told, seen), used)

    def _self_read(self, node: ast.Attribute, scope: dict, used: list, seen: frozenset):
        parents, tree = scope["parents"], scope["tree"]
        cls = self._enclosing(node, parents, ast.ClassDef)
        if cls is None or ("self", id(cls), node.attr) in seen:
            return _UNKNOWN
        if self._stored_in.get(node.attr, {id(tree)}) != {id(tree)} and not self._foreign_only(node.attr, tree, cls):
            return _UNKNOWN  # (another module stores an attribute of that name: `model.use_x = True`)
        seen = seen | {("self", id(cls), node.attr)}
        values: set = set()
        bound = False
        for sub in astcache.walk(tree):
            if isinstance(sub, ast.Attribute) and sub.attr == node.attr and not isinstance(sub.ctx, ast.Load):
                owner = parents.get(id(sub))
                mine = isinstance(sub.value, ast.Name) and sub.value.id == "self" \
                    and self._enclosing(sub, parents, ast.ClassDef) is cls
                if not mine or not (isinstance(owner, (ast.Assign, ast.AnnAssign)) and owner.value is not None and (
                        owner.targets == [sub] if isinstance(owner, ast.Assign) else owner.target is sub)):
                    return _UNKNOWN
                found = self._values(owner.value, scope, used, seen)
                if found is _UNKNOWN:
                    return _UNKNOWN
                values |= found
                bound = True
        return values if bound else _UNKNOWN

    def _resolve_pending(self) -> None:
        """A computed setting `cfg.F = <expr>` lying behind a gate false by default (the body of `if
        <off>:`, after `if not <off>: return`) is made only after the user's choice: F keeps its
        default and the constants the library sets (round 32 GC#4). Read with every computed setting
        unknown (never more known than before); the readings made meanwhile are forgotten."""
        from .gatewalk30 import gate_of

        hard = set(self._dropped) - {(n, o) for n, o, _v, _t in self._pending}
        ungated, gated = set(), {}
        for name, owner, value, tree in self._pending:
            if (name, owner) in ungated:
                continue
            parents = self._parents.setdefault(id(tree), (tree, _parents(tree)))[1]
            scope = {"tree": tree, "parents": parents}

            def off(test, scope=scope):
                used = self._false_by_default(test, scope)
                return None if used is None else self._say(test, used, "")

            def taken(test, scope=scope):
                used = self._true_by_default(test, scope)
                return None if used is None else self._say(test, used, "not ")

            why = gate_of(value, parents, off, taken)
            if why is None or f".{name}`" in why or f"`{name}`" in why:
                ungated.add((name, owner))  # (a gate reading the field itself proves nothing)
            else:
                gated.setdefault((name, owner), f"set to a computed value only where {why}: line {value.lineno} "
                                                f"of {self._relpath(tree)}")
        self._dropped = hard | ungated
        self._gated_sets = {key: why for key, why in gated.items() if key not in ungated}
        self._read.clear()

    def _relpath(self, tree: ast.Module) -> str:
        return next((self.run.results[j].relpath for j in range(len(self.run.results))
                     if self.run.trees.get(j) is tree), "?") if hasattr(self.run, "trees") else "?"

    def _tree_parents(self, node: ast.AST) -> dict:
        """The parents of the run module holding `node` (a store found by optenvs32.single_class_store)."""
        for j in self._stored_at.get(node.attr, ()):
            tree = self.run.tree(j)
            if tree is not None:
                if id(tree) not in self._parents:
                    self._parents[id(tree)] = (tree, _parents(tree))
                return self._parents[id(tree)][1]
        return {}

    def _foreign_only(self, attr: str, tree: ast.Module, cls: ast.ClassDef) -> bool:
        """The other modules' stores of `.attr` are other classes' own `self.attr` (optreads32.py)."""
        own = next((j for j in self._stored_at.get(attr, ()) if self.run.tree(j) is tree), None)
        return own is not None and foreign_only(self.run, self._stored_at[attr], own, attr, cls)

    def _false_by_default(self, test: ast.AST, scope: dict) -> Optional[list]:
        used: list = []
        values = self._values(test, scope, used, frozenset())
        if values is _UNKNOWN or not values or any(values) or not used:
            return None
        return used

    def _true_by_default(self, test: ast.AST, scope: dict) -> Optional[list]:
        used: list = []
        values = self._values(test, scope, used, frozenset())
        if values is _UNKNOWN or not values or not all(values) or not used:
            return None
        return used

    # -- the answer ---------------------------------------------------------------------------
    def chosen_at(self, tree: ast.Module, line: int) -> Optional[str]:
        """The opt-in choice of a config field the statement at `line` of `tree` lies behind, or None."""
        if id(tree) not in self._parents:
            self._parents[id(tree)] = (tree, _parents(tree))
        parents = self._parents[id(tree)][1]
        if id(tree) not in self._lines:
            lines: dict = {}
            for n in astcache.walk(tree):
                if isinstance(n, ast.stmt):
                    lines.setdefault(n.lineno, n)
            self._lines[id(tree)] = lines
        stmt = self._lines[id(tree)].get(line)
        return None if stmt is None else self.chosen(stmt, parents)

    def _registry(self, node: ast.AST, parents: dict) -> Optional[str]:
        """`_REGISTRY = {Enum.X: Cls, ...}` at module level, every use of `_REGISTRY` a lookup
        `_REGISTRY[e]` where e is never X by this reading (or a membership test, `.keys()`): the
        entry is chosen only by a value the user picks."""
        owner = parents.get(id(node))
        if not isinstance(owner, ast.Dict) or not any(v is node for v in owner.values):
            return None
        assign = parents.get(id(owner))
        if not (isinstance(assign, (ast.Assign, ast.AnnAssign)) and isinstance(parents.get(id(assign)), ast.Module)):
            return None
        target = assign.targets[0] if isinstance(assign, ast.Assign) and len(assign.targets) == 1 else \
            assign.target if isinstance(assign, ast.AnnAssign) else None
        if not (isinstance(target, ast.Name) and target.id.startswith("_")):
            return None
        key = owner.keys[[id(v) for v in owner.values].index(id(node))]
        known, value = _constant(key, {}) if key is not None else (False, None)
        if not known:
            return None
        scope = self._scope_of(node, parents)
        lookups, told = 0, []
        for use in ast.walk(scope["tree"]):
            if not (isinstance(use, ast.Name) and use.id == target.id) or use is target:
                continue
            around = scope["parents"].get(id(use))
            if isinstance(around, ast.Subscript) and around.value is use and isinstance(around.ctx, ast.Load):
                used: list = []
                values = self._values(around.slice, scope, used, frozenset())
                if values is _UNKNOWN or not self._comparable(values, [value]) or any(_same(v, value) for v in values):
                    return None
                lookups += 1
                told.append(f"`{' '.join(ast.unparse(around).split())[:60]}` (line {around.lineno}; {'; '.join(used[:1])})")
            elif isinstance(around, ast.Compare) and use in around.comparators and all(
                    isinstance(op, (ast.In, ast.NotIn)) for op in around.ops):
                continue
            elif isinstance(around, ast.Attribute) and around.attr == "keys":
                continue
            else:
                return None
        if not lookups:
            return None
        return f"`{_show(value)}` is chosen (its entry of `{target.id}` is looked up only by {told[0]}, never that value by default)"

    def chosen(self, node: ast.AST, parents: dict) -> Optional[str]:
        """The opt-in choice of a config field the reference `node` lies behind, or None."""
        if not self.fields() and not self._props and not self._envs.switches():
            return None
        registry = self._registry(node, parents)
        if registry is not None:
            return registry
        from .gatewalk30 import gate_of

        scopes: list = []  # (the node's module, read once a test asks for it)

        def scope() -> dict:
            if not scopes:
                scopes.append(self._scope_of(node, parents))
            return scopes[0]

        def off(test: ast.AST) -> Optional[str]:
            used = self._false_by_default(test, scope())
            return None if used is None else self._say(test, used, "")

        def taken(test: ast.AST) -> Optional[str]:
            used = self._true_by_default(test, scope())
            return None if used is None else self._say(test, used, "not ")

        # (the enclosing `if`s, `a if test else None` (round 30: a manager built only under a choice),
        # the function's earlier exits: gatewalk30.py)
        # (a method of a class whose `__init__` asserts such a test: optreads32.py)
        return gate_of(node, parents, off, taken, if_exp=True) or constructor_assert(node, parents, off)

    @staticmethod
    def _say(test: ast.AST, used: list, negated: str) -> str:
        shown = " ".join(ast.unparse(test).split())[:90]
        told = "; ".join(list(dict.fromkeys(used))[:2])
        if negated:
            return f"`{shown}` is false (its function returns first otherwise; {told}), an opt-in choice"
        return f"`{shown}` is chosen ({told})"


def _zero(node: ast.AST) -> bool:
    return isinstance(node, ast.Constant) and _number(node.value) and node.value == 0


def _number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _snake(name: str) -> str:
    return re.sub(r"(?<!^)(?=[A-Z])", "_", name).lower()


def _same(a, b) -> bool:
    if isinstance(a, _Enum) or isinstance(b, _Enum):
        return isinstance(a, _Enum) and isinstance(b, _Enum) and tuple(a) == tuple(b)
    return type(a) is type(b) and a == b if isinstance(a, bool) or isinstance(b, bool) else a == b


def attribute_store(node: ast.AST, parents: dict) -> bool:
    """`Cls.method.flag = True`: a name only the root of an attribute store's target (runs none of
    the unit's code; read by testcallers27's walk)."""
    current = parents.get(id(node))
    while isinstance(current, ast.Attribute) and isinstance(current.ctx, ast.Load):
        current = parents.get(id(current))
    if not (isinstance(current, ast.Attribute) and isinstance(current.ctx, ast.Store)):
        return False
    return isinstance(parents.get(id(current)), ast.Assign)
