"""A capability flag kept on `self` through a local of the same method (issue #16, round 26: BV#3,
BV#11, BV#13; for callgates21.py).

callgates21.py reads `self.X` where the class assigns it once (`self.X = <false there>`), but it
read the assigned value with no locals known. A model's block keeps the capability answer in a
local first and combines it:

    class Block(nn.Module):
        def __init__(self, config, quant_config):
            is_nvfp4 = isinstance(quant_config, Nvfp4Config)
            use_fast = _fast_kernels(quant_config)      # False first thing unless the capability family is 100
            self.use_fast_kernel = use_fast and is_nvfp4
            if self.use_fast_kernel:
                self.experts = FastExperts(...)          # the only builder of the kernels' class
                return
            ...
        def forward_ll(self, x):
            if not self.use_fast_kernel or x.shape[0] > 8:
                return None
            return fast_moe_ll(x, ...)                   # the only launcher of the kernels

What this module adds (callgates21.py asks it):

* `attr_env`/`stores_value`: the assigned value read with the method's once-bound locals; several
  stores of one class read together (BU#19), known when all give the same True/False there.
* `raise_implied`: a flag whose `if self.X:` in `__init__` refuses an NPU host's capability first
  (BU#16/BU#17): False in every later read.
* `shadowed`/`instance_attribute`: a local of a function, or `self.X`, sharing a module-level
  function's name is no reference to it (BV#11's `gate_up, _ = self.gate_up_proj(x)`, BV#13's
  `self._workspace = torch.empty(...)` in other classes).
* devicefns27.py (its own module: it runs callgates21's Gates, which asks this one) reads a
  Triton device function called only inside kernels of its module that are already named scopes
  (BV#3's `_dequant8`, too deep for callgates21's walk).

`bound_locals` gives the locals of the method bound once, by a plain `name = value` statement
of its own body before the statement holding the store (the same reading callgates21.truth gives
a test's locals), so `self.use_fast_kernel` reads as `use_fast and is_nvfp4`, False there whatever
`is_nvfp4` is. A local stored twice (a loop, a second branch), bound after the store, or in a
nested function stays unknown, and with it the attribute: what the flag guards stays reported. A
flag from a plain config option or an environment variable is no capability answer the
interpreter knows: unknown, so the kernels stay reported too (policy P1 leaves such opt-in code to
the passes that name the option).
"""

from __future__ import annotations

import ast

_DEFS = (ast.FunctionDef, ast.AsyncFunctionDef)
_SCOPES = (*_DEFS, ast.Lambda, ast.ClassDef)


def bound_locals(method: ast.AST, store: ast.AST) -> dict:
    """{name: value expression} of the locals `method` binds once, by a plain assignment among its
    own top-level statements before the one holding `store` (a node of its body)."""
    if not isinstance(method, _DEFS):
        return {}
    counts: dict = {}
    for node in ast.walk(method):
        if isinstance(node, ast.Name) and not isinstance(node.ctx, ast.Load):
            counts[node.id] = counts.get(node.id, 0) + 1
        elif isinstance(node, ast.arg):
            counts[node.arg] = counts.get(node.arg, 0) + 1
    return once_bound(method, store.lineno, counts)


def once_bound(function: ast.AST, line: int, counts: dict) -> dict:
    """{name: value expression} of each plain `name = value` among `function`'s own top-level
    statements before `line` whose name `counts` ({name: how many stores}) says is stored once
    (bound_locals here; callgates21's truth, with its own counts)."""
    bound: dict = {}
    for stmt in function.body:
        if stmt.lineno >= line:
            break
        if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name) \
                and counts.get(stmt.targets[0].id) == 1:
            bound[stmt.targets[0].id] = stmt.value
    return bound


def attr_env(run, j: int, method: ast.AST, store: ast.AST, local: frozenset, used: list) -> tuple:
    """(env, shown) for reading `store.value` (a `self.X = ...` of `method`, module j): the values on
    an NPU host of the once-bound locals it names, in order of binding (one may read an earlier one),
    unknown ones left out; `shown`, the `name = value` texts of the known ones, for the message."""
    from .flagtruth import UNKNOWN

    env: dict = {}
    shown: list = []
    bound = bound_locals(method, store)
    wanted = {n.id for n in ast.walk(store.value) if isinstance(n, ast.Name)}
    for name, expr in bound.items():
        if name not in wanted:
            continue
        value = run.value(j, expr, dict(env), local, 0, used)
        if value is UNKNOWN:
            continue
        env[name] = value
        text = " ".join(ast.unparse(expr).split())
        shown.append(f"`{name} = {text[:60]}{'...' if len(text) > 60 else ''}`")
    return env, shown


# ---------------------------------------------------------------------- device functions (whole run)
def shadowed(node: ast.Name, parents: dict, memo: dict) -> bool:
    """`node` names a local of its enclosing function (a parameter of it, or a plain store in its own
    body, nested functions and classes left out, no `global`/`nonlocal` of it; a name an import
    binds is no local here: it may be the unit itself): another object than a module-level function
    of that name (BV#11: a model's `gate_up, _ = self.gate_up_proj(x)` beside the ops module's
    `gate_up()`, which callgates21.py read as a store of the function). `memo`: {id(function):
    (it, its locals)}."""
    function = parents.get(id(node))
    while function is not None and not isinstance(function, _SCOPES):
        function = parents.get(id(function))
    if function is None or isinstance(function, ast.ClassDef):
        return False
    found = memo.get(id(function))
    if found is None or found[0] is not function:
        found = memo[id(function)] = (function, _own_locals(function))
    return node.id in found[1]


def _own_locals(function: ast.AST) -> frozenset:
    names = {a.arg for a in ast.walk(function.args) if isinstance(a, ast.arg)}
    declared: set = set()
    todo = list(function.body) if isinstance(function.body, list) else [function.body]
    while todo:
        node = todo.pop()
        if isinstance(node, _SCOPES):
            if not isinstance(node, ast.Lambda):
                names.add(node.name)  # (a nested def or class binds its name here)
            continue
        if isinstance(node, (ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)):
            continue  # (its targets are its own; a name read there is not counted as a local: kept)
        if isinstance(node, (ast.Global, ast.Nonlocal)):
            declared.update(node.names)
        elif isinstance(node, ast.Name) and not isinstance(node.ctx, ast.Load):
            names.add(node.id)
        todo.extend(ast.iter_child_nodes(node))
    return frozenset(names - declared)


def instance_attribute(node: ast.AST) -> bool:
    """`self.X` / `cls.X` (read or stored): an instance's or class's own attribute, never a reference
    to a module-level function X (BV#13: `_workspace()` of a kernel module beside other classes'
    `self._workspace = torch.empty(...)`, which callgates21.py read as stores of the function).
    What such an attribute holds came from another expression, read where it stands."""
    return isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in ("self", "cls")


def stores_value(gates, j: int, parents: dict, stores: list, used: list) -> tuple:
    """(the value on an NPU host of `self.X`, the place to name) from the class's `self.X = ...`
    statements (`stores`, module j; callgates21 has checked that the run assigns `.X` nowhere
    else), each read with its method's once-bound locals; (flagtruth.UNKNOWN, "") where unknown.
    One store: its value. Several (BU#19: `self.low = False` in `__init__`, `self.low = ok and
    use_fast_gemm(w)` in a warm-up method, False off SM10x): their common value when every one is
    the same `True` or `False` there, whichever runs last; unknown when any differs or is unknown."""
    from .flagtruth import UNKNOWN

    owner = parents.get(id(gates._function(parents, stores[0])))
    attr = stores[0].targets[0].attr
    if isinstance(owner, ast.ClassDef) and any(
            isinstance(t, ast.Name) and t.id == attr for item in owner.body
            for t in (item.targets if isinstance(item, ast.Assign) else [getattr(item, "target", None)])):
        return UNKNOWN, ""  # (a class-level default the instance reads until a store runs)
    values, places = [], []
    for store in stores:
        method = gates._function(parents, store)
        local = gates._local_names(method)
        env, shown = attr_env(gates.run, j, method, store, local, used)
        value = gates.run.value(j, store.value, env, local, 0, used)
        if value is UNKNOWN or (len(stores) > 1 and value is not True and value is not False):
            return UNKNOWN, ""
        values.append(value)
        places.append(f"{gates.run.results[j].relpath}:{store.lineno}" + (f" after {', '.join(shown[:2])}" if shown else ""))
    if any(v != values[0] or type(v) is not type(values[0]) for v in values):
        return UNKNOWN, ""
    if len(places) == 1:
        return values[0], places[0]
    return values[0], f"{places[0]} and at {'; '.join(places[1:3])}" + (" (every store)" if len(places) > 3 else "")


# ---------------------------------------------------------------------- a flag whose True raises first
def raise_implied(gates, j: int, parents: dict, owner: ast.ClassDef, attr: str, stores: list, used: list):
    """(False, the place to name, (the `__init__`, the last line before which reads stay unknown))
    where `self.attr` is set once in `owner.__init__`, and a later top-level `if self.attr:` of that
    `__init__` raises first on an NPU host: a statement of its body, `if T: raise ...` with T true
    there (read with the body's once-bound locals, `capability = current_platform.get_device_capability()`
    being None there), no `return` before it (BU#16/BU#17: a model layer that builds its sparse
    attention objects only `if self.use_dsa_backend:`, after refusing any capability but SM90/100/103
    in that same `if`). No instance with the flag True is built there, so every read after that
    `if`, in `__init__` or another method, is False; reads before or inside it stay unknown (the
    imports before the refusal run). None otherwise."""
    from .flagtruth import UNKNOWN, always_exits

    if len(stores) != 1:
        return None
    init = gates._function(parents, stores[0])
    if not isinstance(init, _DEFS) or init.name != "__init__" or parents.get(id(init)) is not owner:
        return None
    top = next((s for s in init.body if s.lineno <= stores[0].lineno <= (s.end_lineno or s.lineno)), None)
    if top is None:
        return None
    for stmt in init.body:
        if stmt.lineno <= (top.end_lineno or top.lineno):
            continue
        if not (isinstance(stmt, ast.If) and isinstance(stmt.test, ast.Attribute) and stmt.test.attr == attr
                and isinstance(stmt.test.value, ast.Name) and stmt.test.value.id == "self"):
            continue
        local = gates._local_names(init)
        counts = gates._stores(init)
        env: dict = {}
        for inner in stmt.body:
            if any(isinstance(n, ast.Return) for n in ast.walk(inner)):
                break
            if isinstance(inner, ast.Assign) and len(inner.targets) == 1 and isinstance(inner.targets[0], ast.Name) \
                    and counts.get(inner.targets[0].id) == 1:
                value = gates.run.value(j, inner.value, dict(env), local, 0, used)
                if value is not UNKNOWN or inner.targets[0].id in env:
                    env[inner.targets[0].id] = value
                continue
            if isinstance(inner, ast.If) and not inner.orelse and always_exits(inner.body) \
                    and all(isinstance(s, ast.Raise) for s in inner.body[-1:]):
                if gates.run.truth(j, inner.test, dict(env), local, 0, used) is True:
                    shown = " ".join(ast.unparse(inner.test).split())[:60]
                    place = (f"{gates.run.results[j].relpath}:{stores[0].lineno}, and its `if self.{attr}:` "
                             f"raises first there (line {inner.lineno}: `if {shown}: raise`)")
                    return False, place, (init, stmt.end_lineno or stmt.lineno)
        return None
    return None


def read_allowed(guard, function: ast.AST, node: ast.AST) -> bool:
    """A read of a flag `raise_implied` answered may use that answer: outside the `__init__`, or
    after its raising `if`."""
    if guard is None:
        return True
    init, last = guard
    return function is not init or node.lineno > last
