"""A plain class whose one instance of the library sits on an attribute read only in code an NPU
host does not run (issue #16, round 28: CB#34). For callgates21.py's walk over a unit's
references, from `Gates._sites`.

    # ops/sparse_decode.py
    @triton.jit
    def _update_kernel(...): ...              # NPU910
    @dataclass
    class PlanCache:
        plans: dict = field(init=False, default_factory=dict)
        def prepare(self, table):
            _update_kernel[(n,)](...)         # the kernel's only launch
    def prepare_decode_metadata(table, plan_cache=None):
        cache = plan_cache or PlanCache()
        return cache.prepare(table)

    # sparse_attention.py (another module)
    class Builder:
        def __init__(self, cfg):
            self.plan_cache = PlanCache()      # built on every host
        def build(self, md):
            if should_prepare_decode_metadata(...):   # False off CUDA SM100
                md.plan = prepare_decode_metadata(md.table, plan_cache=self.plan_cache)

callgates21's walk reached the kernel's launch in `PlanCache.prepare`, went on to the class's
references, and kept the kernel reached at `self.plan_cache = PlanCache()`, a construction every
host runs. Building the class runs none of its code: it defines no `__init__`, `__post_init__`,
`__new__` or `__del__`, derives from nothing (`object` aside), is decorated by nothing but
`dataclass` and its fields' `default_factory` are builtin containers. Its methods run only where
an instance's attribute is read; the instance is stored on `self.A` and every read of `.A` in the
run (an attribute of that name, whatever its receiver) lies in code an NPU host does not run
(the walk's own `dead` verdicts). Such a construction counts as never reaching the class's
methods there, and says so: "built at ... into `self.A`, read only at ... (gate)".

A string naming a unit (callgates21 keeps a unit a string names: a `getattr`, a registry, a
`monkeypatch.setattr(module, "name", fake)`) counts as no reference where every such string of its
file lies in code an NPU host does not run (CB#34's test, skipped off SM100, patches the
metadata function by name).

Kept: a class with a constructor or finalizer of its own, a base class, another decorator, a
`default_factory` the run defines; a construction handed on (`use(PlanCache())`, `x = C()`, a
default argument), stored anywhere but a `self` attribute; one read of `.A` an NPU host may run, a
string naming `A` outside tests (`getattr(self, "A")`), a file naming it that does not parse.
"""

from __future__ import annotations

import ast
from typing import Optional

from . import astcache

_CONSTRUCTION = frozenset({"__init__", "__post_init__", "__new__", "__del__", "__init_subclass__",
                           "__set_name__", "__class_getitem__", "__getattr__", "__getattribute__",
                           "__setattr__"})
_FACTORIES = frozenset({"dict", "list", "set", "tuple", "frozenset", "bytearray"})
_DEFS = (ast.FunctionDef, ast.AsyncFunctionDef)


def inert(cls: ast.ClassDef) -> bool:
    """Building the class runs none of its code (this module's docstring)."""
    if cls.keywords or any(astcache.dotted(b) not in ("object",) for b in cls.bases):
        return False
    for decorator in cls.decorator_list:
        target = decorator.func if isinstance(decorator, ast.Call) else decorator
        if astcache.dotted(target) not in ("dataclass", "dataclasses.dataclass"):
            return False
    for stmt in cls.body:
        if isinstance(stmt, _DEFS):
            if stmt.name in _CONSTRUCTION:
                return False
            continue
        if isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Constant):
            continue  # (the docstring)
        if not isinstance(stmt, (ast.AnnAssign, ast.Assign, ast.Pass)):
            return False
        for node in ast.walk(stmt):
            if isinstance(node, ast.keyword) and node.arg == "default_factory" \
                    and not (isinstance(node.value, ast.Name) and node.value.id in _FACTORIES):
                return False
    return True


def _stored_attribute(node: ast.AST, parents: dict) -> Optional[str]:
    """A for `self.A = Cls(...)` (or `self.A: T = Cls(...)`), `node` the `Cls` of the call."""
    call = parents.get(id(node))
    if not (isinstance(call, ast.Call) and call.func is node):
        return None
    stmt = parents.get(id(call))
    if isinstance(stmt, ast.Assign) and stmt.value is call and len(stmt.targets) == 1:
        target = stmt.targets[0]
    elif isinstance(stmt, ast.AnnAssign) and stmt.value is call:
        target = stmt.target
    else:
        return None
    if isinstance(target, ast.Attribute) and isinstance(target.value, ast.Name) and target.value.id == "self":
        return target.attr
    return None


def unread_instance(gates, j: int, tree: ast.Module, parents: dict, node: ast.AST,
                    unit: ast.AST) -> Optional[str]:
    """Why the reference `node` (module j) to the class `unit` runs none of its methods on an NPU
    host: a construction of an inert class stored on `self.A`, every read of `.A` in the run dead
    there (`gates.dead`); None otherwise."""
    if not (isinstance(unit, ast.ClassDef) and isinstance(node, ast.Name) and inert(unit)):
        return None
    attr = _stored_attribute(node, parents)
    if attr is None:
        return None
    reads: list = []
    for k, other in gates.naming(attr):
        if other is None:
            return None
        other_parents, refs, strings = gates._index(k, other)
        relpath = gates.run.results[k].relpath
        if attr in strings and not gates.test_file(relpath):
            return None  # (`getattr(self, "A")`: read some other way)
        for ref in refs.get(attr, ()):
            if not isinstance(ref, ast.Attribute) or not isinstance(ref.ctx, ast.Load):
                continue  # (a store or another value's local of that name: no read of the instance)
            why = gates.dead(k, other, other_parents, ref)
            if why is None:
                return None
            reads.append(f"{relpath}:{ref.lineno} ({why})")
    if not reads:
        return None  # (never read: a value kept for something else, maybe a string-named lookup)
    shown = "; ".join(reads[:2]) + (f"; and {len(reads) - 2} more" if len(reads) > 2 else "")
    return (f"`{unit.name}` built into `self.{attr}` (its construction runs none of its code), "
            f"read only at {shown}")


def dead_strings(gates, j: int, tree: ast.Module, parents: dict, name: str) -> bool:
    """Every string of module j naming `name` lies in code an NPU host does not run (`gates.dead`:
    `monkeypatch.setattr(mod, "prepare_decode_metadata", fake)` in a test skipped there, CB#34): no
    other way of loading the unit there. One such string where it may run: False."""
    strings = [n for n in astcache.walk(tree) if isinstance(n, ast.Constant) and n.value == name]
    return bool(strings) and all(gates.dead(j, tree, parents, n) is not None for n in strings)
