"""Code a library runs only under a configuration field a user turns on: an opt-in (issue #16, policy
P1, round-29 audit DA#27, DB#35, DC#29). Read by testcallers27.py's walk, beside optinprops28.py.

optinprops28.py reads a configuration *property* false by default. Most opt-ins are plain fields of a
configuration class whose class-level default keeps the code off:

    # vllm/config/model.py
    class ModelConfig:
        enable_prompt_embeds: bool = False

    # vllm/v1/worker/gpu/model_states/default.py
    if self.model_config.enable_prompt_embeds:
        self.prompt_embeds_state = PromptEmbedsState(...)   # its Triton kernel: DA#27

    # deepspeed/module_inject/auto_ep_presets/base.py: `async_split_plan: bool = False` of AutoEPConfig
    # deepspeed/module_inject/auto_ep_layer.py
    self.async_split_plan = resolved_config.async_split_plan
    if self.async_split_plan and self.ep_size > 1 and ...:
        pending_plan = self._start_async_split_plan(...)   # its "cuda" check: DB#35

An NPU host runs that code only after its user sets `--enable-prompt-embeds` or
`expert_parallel.async_split_plan`: an explicit choice. Policy P1: info naming the choice and where its
default is set, never an error, never dropped.

`OptInFields(run, test_side)` finds, once per run, each annotated field `F: T = <constant>` (or
`Field(default=<constant>)`, `field(default=<constant>)`) of a library class named `*Config` whose
default is False, None or a string (a model's own configuration aside: a class deriving from
`PretrainedConfig`, or in a `models/` or `transformers_utils/` folder, is what a checkpoint sets; not
a number: `tensor_parallel_size: int = 1` tested `> 1` is how
NPU hosts serve too), one default for the name in every such class of the run. A field the library
sets to anything else (`x.F = True`, `self.F = computed()`, a keyword `F=<computed>`, a dict entry
`"F": <computed>`, in library code: an example's or a tool's `LLM(enable_prompt_embeds=True)` is a
user's choice) is no opt-in; reading the user's setting is none: passing it on (`F=self.F`,
`F=F`), a falsy constant, `d.get("F", <falsy>)` (DeepSpeed's JSON parser).

`chosen(node, parents)` answers for a reference. It lies in the body of an `if`/`elif` (or the true
branch of `a if test else b`) whose test, alone or one operand of an `and`, reads such a field and is
false at the default (`x.F`, `x.F is not None`, `x.F == "name"` with another default); or after an
early exit of its function taken at the default (`if not x.F: return`, `if (s := x.F) is None:
return`). The field is read as `<x>.F`, as `self.A` of a class whose every `self.A = ...` is `<y>.F`,
or as a parameter `F` of the function defaulting as the field does and never rebound (vLLM's
`Sampler(..., enable_trace_replay: bool = False)`, handed `{"enable_trace_replay":
model_config.enable_trace_replay}`: DC#29). Or it lies in a private method (`_name`) whose every
reference in its file is so gated (DeepSpeed's `_start_async_split_plan`). The answer: "`x.F` is
chosen (`Class.F` defaults to `False`, path:line)".

Wave 30 (h145, round 30 EA#27, EB#28, EB#11, EB#40) widens the reading, each with its nearest true
case in tests/test_h145.py:
* `chosen_at(tree, line)`: the finding's own place (testcallers27's `reason_of`), not only a
  reference to its unit: vLLM's `ProfilerActivity.CUDA` inside `if enable_profiler:`.
* a local name bound once, before, in the function's own body to such a test (`enable_profiler =
  local_rank == 0 and cfg.capture_torch_profiler`); `self.A` every store of which in its class is
  such a test (`self.use_mega_moe = mega_backend`), A stored on no other object in the library.
* a name two classes default differently (`KernelConfig.moe_backend = "auto"`,
  `SpeculativeConfig.moe_backend = None`): read under every default, off only when off at all.
* a constructor flag: `self.A = F`, the class's only store of A, in `__init__` whose parameter F
  defaults to False or None and is never rebound, no library keyword `F=<computed>` (Lightning's
  `PyTorchProfiler(emit_nvtx=False)`): "`self._emit_nvtx` is chosen (`PyTorchProfiler(emit_nvtx=...)`
  defaults to `False`, line N)".
* a `@dataclass` named `*Args`/`*Arguments` (`ServerArgs`, `EngineArgs`) holds options as a `*Config`
  does (a field whose default mirrors a config's, `= ModelConfig.F`, is left to that config); and
  `getattr(x, "F", None)` passes the user's setting on.
* a field read on a receiver named after its class (`vllm_config.kernel_config.moe_backend`:
  `KernelConfig`, `_class_of`) is that class's own (`_typed_table`): set only by library code that
  stores it on such an object (`kernel_config.F = v`, `self.F = v` in that class or a subclass, a
  keyword to that class or to a callee the run does not define); another class's `self.F = ...`
  (`MuseSparkMoEConfig.__post_init__`) and a keyword to functions whose own parameter is F
  (`resolve_layer_fused_shared_expert(..., moe_backend="aiter_mega_moe")`) set none of it.
* `F=F` (and `x.F = F`) passes the user's setting on only where F is a parameter of the function
  never bound again (`_unpassed`): ColossalAI's `use_flash_attn = can_use_flash_attn2(dtype)` handed
  on as `use_flash_attn=use_flash_attn` is computed, so the field is the library's.

What stays (the nearest true cases): a field true by default, or whose default the test keeps (`if
x.F is None:`, `if not x.F:` in the body); a field the library computes; a name two config classes
default differently; a class not named `*Config`; a model's configuration (`class
TextConfig` in `models/`, an HF `PretrainedConfig`); an `or` test; an `else:` branch; a method also
called ungated.
"""

from __future__ import annotations

import ast
import re
from typing import Optional

from . import astcache
from .optinprops28 import UNKNOWN, field_default
from .optreads32 import read_field
from .optstates34 import state_off, state_taken

_DEFS = (ast.FunctionDef, ast.AsyncFunctionDef)
_MODEL_FILES = re.compile(r"(^|/)(models|transformers_utils)/")
_PRETRAINED = re.compile(r"(?i)pretrainedconfig$")
# (a field's constant default, `Field(default=...)` included, read as optinprops28.py reads it)
_UNKNOWN = UNKNOWN
_default = field_default


def _typed_table(typed: dict, records: list, defs: dict, bases: dict) -> dict:
    """{(class, field): entry} of the option fields no library code sets on an object of that class
    (wave 30): a keyword to another known class, or to functions that all name the parameter, sets
    none; `self.F = ...` sets its own class's (and its bases'); `r.F = ...` the class `r` is named
    after, where the run has one (any class otherwise)."""
    if not typed:
        return {}
    hit: set = set()
    by_field: dict = {}
    for cls, field in typed:
        by_field.setdefault(field, set()).add(cls)
    for kind, field, where in records:
        classes = by_field.get(field)
        if not classes:
            continue
        if kind == "kw":
            if where in bases:
                hit.update((c, field) for c in classes if c == where or c in bases.get(where, ()))
            elif where in defs and all(field in params and not kwargs for params, kwargs in defs[where]):
                continue  # (a function's own parameter by that name)
            else:
                hit.update((c, field) for c in classes)
        elif kind == "self":
            hit.update((c, field) for c in classes if where is None or c == where or c in bases.get(where, ()))
        elif kind == "name" and _class_of(where) in bases:
            hit.update((c, field) for c in classes if c == _class_of(where))
        else:
            hit.update((c, field) for c in classes)
    return {key: entry for key, entry in typed.items() if key not in hit}


_ARGS = re.compile(r"^[A-Z]\w*(Args|Arguments)$")


def _arguments(cls: ast.ClassDef) -> bool:
    """A dataclass of a server's or engine's command-line arguments (`ServerArgs`, `EngineArgs`): its
    fields are options a user sets, as a `*Config`'s are (wave 30, round 30 EB#40)."""
    return bool(_ARGS.match(cls.name)) and any(
        (astcache.dotted(d.func if isinstance(d, ast.Call) else d, strict=False) or "").rsplit(".", 1)[-1] == "dataclass"
        for d in cls.decorator_list)


def _unpassed(tree: ast.Module) -> set:
    """ids of the names handed on as `F=F` / `x.F = F` that are no parameter of their innermost
    function (a local or a global the code computes: `use_flash_attn = can_use_flash_attn2(dtype)`
    then `Config(use_flash_attn=use_flash_attn)`; wave 30)."""
    candidates, parents = [], {}
    for node in astcache.walk(tree):
        for child in ast.iter_child_nodes(node):
            parents[id(child)] = node
        if isinstance(node, ast.keyword) and isinstance(node.value, ast.Name) and node.value.id == node.arg:
            candidates.append(node.value)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)) and isinstance(node.value, ast.Name) and any(
                isinstance(t, ast.Attribute) and t.attr == node.value.id
                for t in (node.targets if isinstance(node, ast.Assign) else [node.target])):
            candidates.append(node.value)
    out = set()
    for name in candidates:
        up = parents.get(id(name))
        while up is not None and not isinstance(up, (*_DEFS, ast.Lambda)):
            up = parents.get(id(up))
        args = up.args if up is not None else None
        if args is None or name.id not in {a.arg for a in (*args.posonlyargs, *args.args, *args.kwonlyargs,
                                                              args.vararg, args.kwarg) if a is not None} \
                or any(isinstance(n, ast.Name) and n.id == name.id and isinstance(n.ctx, ast.Store)
                       for n in ast.walk(up)):  # (a parameter bound again: computed too)
            out.add(id(name))
    return out


def _user_value(value: ast.AST, name: Optional[str], unpassed: frozenset = frozenset()) -> bool:
    """A value that only passes the user's setting on, or keeps the default's answer (`F=F` only
    where F is a parameter of the function: a local is computed)."""
    if isinstance(value, ast.IfExp):  # (`getattr(cfg, "F", False) if cfg else False`, round 32 GB#39: optreads32.py)
        return _user_value(value.body, name, unpassed) and _user_value(value.orelse, name, unpassed)
    if isinstance(value, ast.Constant):
        return not value.value
    if isinstance(value, ast.Attribute) and value.attr == name:
        return True
    if isinstance(value, ast.Name) and value.id == name:
        return id(value) not in unpassed
    # (`getattr(x, "F", None)`: the user's setting read defensively, wave 30)
    if isinstance(value, ast.Call) and isinstance(value.func, ast.Name) and value.func.id == "getattr" \
            and len(value.args) in (2, 3) and isinstance(value.args[1], ast.Constant) and value.args[1].value == name \
            and (len(value.args) == 2 or isinstance(value.args[2], ast.Constant) and not value.args[2].value):
        return True
    # (`d.get("F", False)`: the user's JSON setting, off by default)
    return (isinstance(value, ast.Call) and isinstance(value.func, ast.Attribute) and value.func.attr == "get"
            and len(value.args) == 2 and isinstance(value.args[1], ast.Constant) and not value.args[1].value
            and isinstance(value.args[0], ast.Constant) and value.args[0].value == name)


def _settings(tree: ast.Module, out: set, unpassed: frozenset = frozenset()) -> None:
    """The names the library sets to a computed value: `x.F = v`, keyword `F=v` (not a user value)."""
    for node in astcache.walk(tree):
        if isinstance(node, ast.Call):
            for keyword in node.keywords:
                if keyword.arg is not None and not _user_value(keyword.value, keyword.arg, unpassed):
                    out.add(keyword.arg)
        elif isinstance(node, ast.Dict):  # (keyword arguments gathered in a dict: `{"F": computed}`)
            for key, value in zip(node.keys, node.values):
                if isinstance(key, ast.Constant) and isinstance(key.value, str) and not _user_value(value, key.value, unpassed):
                    out.add(key.value)
        elif isinstance(node, (ast.Assign, ast.AugAssign, ast.AnnAssign)) and node.value is not None:
            for target in (node.targets if isinstance(node, ast.Assign) else [node.target]):
                if isinstance(target, ast.Attribute) and (isinstance(node, ast.AugAssign)
                                                          or not _user_value(node.value, target.attr, unpassed)):
                    out.add(target.attr)


def _chained_settings(library: list, found: dict, assigned: set, dropped: set) -> set:
    """Round 33 GA#7 (LLaMA-Factory's `hparams/parser.py`): the fields of `found` the library sets
    to a computed value only inside the body of an `if` whose test (alone or an operand of an `and`)
    reads another opt-in field, off at its default (`x.G` defaulting to False or None, `x.G is not
    None`; G itself never set by the library):

        if training_args.fp8_enable_fsdp_float8_all_gather and not training_args.fp8:
            model_args.fp8 = True                    # (the user's other FP8 option turns it on)

    F stays off until a user turns one of the two on: still an opt-in. A store on a module the file
    imports (`te.fp8 = types.ModuleType("fp8")`, `import transformer_engine.pytorch as te`) sets no
    option. A store anywhere else (under a test of anything but such a field, an `else:`, a
    function's own body) keeps F the library's."""
    candidates = {name for name in assigned if name in found and name not in dropped}
    gates = {name: entry[2] for name, entry in found.items()
             if name not in assigned and name not in dropped and (entry[2] is False or entry[2] is None)}
    if not candidates or not gates:
        return set()
    chained, other = set(), set()
    for tree, unpassed in library:
        stores = []
        for node in astcache.nodes(tree, (ast.Call, ast.Dict, ast.Assign, ast.AugAssign, ast.AnnAssign)):
            if isinstance(node, ast.Call):
                stores.extend((k.arg, node) for k in node.keywords if k.arg in candidates
                              and not _user_value(k.value, k.arg, unpassed))
            elif isinstance(node, ast.Dict):
                stores.extend((key.value, node) for key, value in zip(node.keys, node.values)
                              if isinstance(key, ast.Constant) and key.value in candidates
                              and not _user_value(value, key.value, unpassed))
            elif node.value is not None:
                stores.extend((t.attr, node) for t in (node.targets if isinstance(node, ast.Assign) else [node.target])
                              if isinstance(t, ast.Attribute) and t.attr in candidates
                              and (isinstance(node, ast.AugAssign) or not _user_value(node.value, t.attr, unpassed)))
        if not stores:
            continue
        parents = astcache.parents(tree)
        modules = {(alias.asname or alias.name).split(".")[0] for node in astcache.nodes(tree, (ast.Import, ast.ImportFrom))
                   for alias in node.names}
        for name, node in stores:
            if isinstance(node, (ast.Assign, ast.AugAssign, ast.AnnAssign)) and all(
                    isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name) and t.value.id in modules
                    for t in (node.targets if isinstance(node, ast.Assign) else [node.target])
                    if isinstance(t, ast.Attribute) and t.attr == name):
                continue  # (`te.fp8 = types.ModuleType("fp8")`: an attribute of an imported module, no option)
            (chained if _under_other_opt_in(node, parents, gates, name) else other).add(name)
    return chained - other


def _under_other_opt_in(node: ast.AST, parents: dict, gates: dict, name: str) -> bool:
    child, current = node, parents.get(id(node))
    while current is not None and not isinstance(current, (*_DEFS, ast.ClassDef, ast.Module)):
        if isinstance(current, ast.If) and any(child is stmt for stmt in current.body):
            test = current.test
            for part in test.values if isinstance(test, ast.BoolOp) and isinstance(test.op, ast.And) else [test]:
                if isinstance(part, ast.Compare) and len(part.ops) == 1 and isinstance(part.ops[0], ast.IsNot) \
                        and isinstance(part.comparators[0], ast.Constant) and part.comparators[0].value is None:
                    part = part.left if gates.get(getattr(part.left, "attr", None), False) is None else None
                if isinstance(part, ast.Attribute) and part.attr != name and part.attr in gates:
                    return True
        child, current = current, parents.get(id(current))
    return False


def _typed_settings(tree: ast.Module, records: list, defs: dict, bases: dict, unpassed: frozenset = frozenset()) -> None:
    """Wave 30 (EB#11): the settings of `_settings` with their receiver, for a field read on a
    receiver named after its class (`kernel_config.moe_backend`): ("kw", F, callee), ("self", F,
    class), ("name", F, receiver's last name), ("any", F, None); and the run's functions ({name:
    [(parameter names, takes **kwargs)]}) and classes ({name: base names})."""
    owner: dict = {}
    for node in astcache.walk(tree):
        if isinstance(node, ast.ClassDef):
            bases[node.name] = {(astcache.dotted(b, strict=False) or "").rsplit(".", 1)[-1] for b in node.bases}
            for inner in ast.walk(node):
                owner[id(inner)] = node.name  # (the innermost class last: ast.walk goes outside in)
        elif isinstance(node, _DEFS):
            args = node.args
            defs.setdefault(node.name, []).append(
                ({a.arg for a in (*args.posonlyargs, *args.args, *args.kwonlyargs)}, args.kwarg is not None))
    for node in astcache.walk(tree):
        if isinstance(node, ast.Call):
            callee = node.func.attr if isinstance(node.func, ast.Attribute) else \
                node.func.id if isinstance(node.func, ast.Name) else None
            for keyword in node.keywords:
                if keyword.arg is not None and not _user_value(keyword.value, keyword.arg, unpassed):
                    records.append(("kw", keyword.arg, callee))
        elif isinstance(node, ast.Dict):
            for key, value in zip(node.keys, node.values):
                if isinstance(key, ast.Constant) and isinstance(key.value, str) and not _user_value(value, key.value, unpassed):
                    records.append(("any", key.value, None))
        elif isinstance(node, (ast.Assign, ast.AugAssign, ast.AnnAssign)) and node.value is not None:
            for target in (node.targets if isinstance(node, ast.Assign) else [node.target]):
                if not isinstance(target, ast.Attribute) or (not isinstance(node, ast.AugAssign)
                                                             and _user_value(node.value, target.attr, unpassed)):
                    continue
                receiver = target.value
                if isinstance(receiver, ast.Name) and receiver.id == "self":
                    records.append(("self", target.attr, owner.get(id(node))))
                elif isinstance(receiver, (ast.Name, ast.Attribute)):
                    records.append(("name", target.attr, receiver.id if isinstance(receiver, ast.Name) else receiver.attr))
                else:
                    records.append(("any", target.attr, None))


def _class_of(receiver: str) -> str:
    """`kernel_config` -> `KernelConfig`: the class a receiver is named after."""
    return "".join(part[:1].upper() + part[1:] for part in receiver.split("_") if part)


def _value(node: ast.AST, default):
    """The value of a test's operand with the field at `default` (the operand reads the field)."""
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
        inner = _value(node.operand, default)
        return _UNKNOWN if inner is _UNKNOWN else not inner
    if not isinstance(node, ast.Compare):
        return default
    if len(node.ops) != 1 or not isinstance(node.comparators[0], ast.Constant):
        return _UNKNOWN
    left, right, op = default, node.comparators[0].value, node.ops[0]
    try:
        return {ast.Gt: lambda: left > right, ast.GtE: lambda: left >= right, ast.Lt: lambda: left < right,
                ast.LtE: lambda: left <= right, ast.Eq: lambda: left == right, ast.NotEq: lambda: left != right,
                ast.Is: lambda: left is right, ast.IsNot: lambda: left is not right}[type(op)]()
    except (KeyError, TypeError):
        return _UNKNOWN


def _subject(node: ast.AST) -> ast.AST:
    while isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
        node = node.operand
    if isinstance(node, ast.Compare):
        node = node.left
    return node.value if isinstance(node, ast.NamedExpr) else node


class OptInFields:
    """The run's configuration fields a user turns on (this module's doc)."""

    def __init__(self, run, test_side) -> None:
        self.run, self.test_side = run, test_side
        self._table: Optional[dict] = None
        self._assigned: set = set()
        self._flags: dict = {}  # (constructor flags read as `self.A`: `Cls(F=False)`, wave 30)
        self._lines: dict = {}
        self._others: dict = {}  # (a name's other defaults in other `*Config` classes)
        self._via: dict = {}  # (id of a `self.A` operand: the test it was bound from)
        self._foreign: set = set()  # (attribute names library code stores on something other than `self`)
        self._typed: dict = {}  # ((class, field): entry) read on a receiver named after its class

    def table(self) -> dict:
        """{field name: (class name, "relpath:line", default)}."""
        if self._table is not None:
            return self._table
        found: dict = {}
        dropped: set = set()
        assigned: set = set()
        records: list = []
        defs: dict = {}
        bases: dict = {}
        typed: dict = {}
        library: list = []  # ((tree, unpassed) of each library module read: _chained_settings)
        from .callgates21 import NOT_LIBRARY

        for j, result in enumerate(self.run.results):
            if not result.relpath.endswith(".py") or self.test_side(result.relpath) or any(
                    part in NOT_LIBRARY for part in result.relpath.split("/")[:-1]):
                continue  # (an example's `LLM(enable_prompt_embeds=True)` is a user's choice too)
            data = self.run.text_of(j) or b""
            if b"=" not in data:
                continue
            tree = self.run.tree(j)
            if tree is None:
                continue
            unpassed = _unpassed(tree)
            _settings(tree, assigned, unpassed)
            self._foreign.update(t.attr for n in astcache.walk(tree) if isinstance(n, (ast.Assign, ast.AnnAssign, ast.AugAssign))
                                 for t in (n.targets if isinstance(n, ast.Assign) else [n.target])
                                 if isinstance(t, ast.Attribute) and not (isinstance(t.value, ast.Name) and t.value.id == "self"))
            _typed_settings(tree, records, defs, bases, unpassed)
            library.append((tree, unpassed))
            if b"Config" not in data and b"Arg" not in data:  # (`*Args` and `*Arguments`: round 33 GA#7)
                continue
            model = bool(_MODEL_FILES.search(result.relpath))
            for cls in tree.body:
                args = isinstance(cls, ast.ClassDef) and _arguments(cls)
                if not (isinstance(cls, ast.ClassDef) and (cls.name.endswith("Config") or args)):
                    continue
                if model or any(_PRETRAINED.search(astcache.dotted(b, strict=False) or "") for b in cls.bases):
                    # (a model's own configuration: the checkpoint sets it, not the user; its names
                    # read on another object could be either)
                    dropped.update(stmt.target.id for stmt in cls.body
                                   if isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name))
                    continue
                for stmt in cls.body:
                    if not (isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name)):
                        continue
                    name, value = stmt.target.id, _default(stmt.value)
                    # (a number is no opt-in here: `tensor_parallel_size > 1` is how NPU hosts serve too)
                    ok = value is False or value is None or isinstance(value, str)
                    if args and not ok:
                        continue  # (a server's argument mirroring a config's default, `= ModelConfig.F`: that one decides)
                    if ok:
                        typed[(cls.name, name)] = (cls.name, f"{result.relpath}:{stmt.lineno}", value)
                    if not ok or name in dropped:
                        dropped.add(name)
                        found.pop(name, None)
                        continue
                    if name in found and found[name][2] != value:
                        # (wave 30, EB#11: two classes default a name differently, `moe_backend` "auto"
                        # and None: a test false at every default still keeps the code off)
                        if value not in self._others.setdefault(name, []):
                            self._others[name].append(value)
                        continue
                    found.setdefault(name, (cls.name, f"{result.relpath}:{stmt.lineno}", value))
        assigned -= _chained_settings(library, found, assigned, dropped)  # (set only under another opt-in: round 33 GA#7)
        self._table = {name: entry for name, entry in found.items() if name not in assigned and name not in dropped}
        self._assigned = assigned
        self._typed = _typed_table(typed, records, defs, bases)
        return self._table

    def _at_every_default(self, part: ast.AST, name: str):
        """The operand's value at the field's default, the same under every class's default, else unknown."""
        values = {_value(part, d) for d in [self._entry(name)[2], *self._others.get(name, ())]}
        if len(values) == 1:
            return values.pop()
        return _UNKNOWN if _UNKNOWN in values or len({bool(v) for v in values}) != 1 else bool(values.pop())

    def _entry(self, name: str) -> tuple:
        return self._flags[name] if name in self._flags else self.table()[name]

    # ------------------------------------------------------------------ reading a test
    def _field(self, node: ast.AST, parents: dict) -> Optional[str]:
        """The field an operand's subject reads: `<x>.F`, or `self.A` bound only from `<y>.F`."""
        while isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
            node = node.operand
        if isinstance(node, ast.Compare):
            node = node.left
        if isinstance(node, ast.NamedExpr):
            node = node.value
        if isinstance(node, ast.Name):
            return self._parameter(node, parents)
        if not isinstance(node, ast.Attribute):
            return None
        self.table()
        receiver = node.value.attr if isinstance(node.value, ast.Attribute) else \
            node.value.id if isinstance(node.value, ast.Name) and node.value.id != "self" else None
        if receiver is not None and (_class_of(receiver), node.attr) in self._typed:
            key = f"{_class_of(receiver)}.{node.attr}"  # (`kernel_config.moe_backend`: KernelConfig's field)
            self._flags[key] = self._typed[(_class_of(receiver), node.attr)]
            return key
        if node.attr in self.table():
            return node.attr
        if not (isinstance(node.value, ast.Name) and node.value.id == "self"):
            return None
        cls = parents.get(id(node))
        while cls is not None and not isinstance(cls, ast.ClassDef):
            cls = parents.get(id(cls))
        if cls is None:
            return None
        fields, stores = set(), []
        for stmt in ast.walk(cls):
            for target in (stmt.targets if isinstance(stmt, ast.Assign) else
                           [stmt.target] if isinstance(stmt, (ast.AnnAssign, ast.AugAssign)) else []):
                if isinstance(target, ast.Attribute) and isinstance(target.value, ast.Name) \
                        and target.value.id == "self" and target.attr == node.attr:
                    stores.append(stmt)
                    # (`<y>.F`, or `getattr(cfg, "F", False) if cfg else False`: optreads32.py)
                    read = None if isinstance(stmt, ast.AugAssign) else read_field(stmt.value, self.table())
                    fields.add(read)
        if len(fields) == 1 and None not in fields:
            return next(iter(fields))
        return self._constructor_flag(cls, node.attr, stores, parents)

    def _constructor_flag(self, cls: ast.ClassDef, attr: str, stores: list, parents: dict) -> Optional[str]:
        """Wave 30 (round 30 EA#27): `self.A` whose only store is `self.A = F` in the class's
        `__init__`, F a parameter of it defaulting to False or None, never rebound, and no library
        call handing a keyword `F=` a computed value (Lightning's `PyTorchProfiler(emit_nvtx=False)`)."""
        if len(stores) != 1 or not isinstance(stores[0], ast.Assign) or not isinstance(stores[0].value, ast.Name):
            return None
        init = parents.get(id(stores[0]))
        if not (isinstance(init, _DEFS) and init.name == "__init__" and parents.get(id(init)) is cls):
            return None  # (bound in the constructor's own body, not under a test of its own)
        flag = stores[0].value.id
        self.table()  # (fills the names the library sets)
        if flag in self._assigned:
            return None
        args = init.args
        positional = [*args.posonlyargs, *args.args]
        pairs = list(zip(positional[len(positional) - len(args.defaults):], args.defaults))
        pairs += [(a, d) for a, d in zip(args.kwonlyargs, args.kw_defaults) if d is not None]
        for arg, value in pairs:
            if arg.arg != flag:
                continue
            if not (isinstance(value, ast.Constant) and (value.value is False or value.value is None)):
                return None
            if any(isinstance(n, ast.Name) and n.id == flag and isinstance(n.ctx, ast.Store) for n in ast.walk(init)):
                return None
            key = f"{cls.name}({flag}=)"
            self._flags[key] = (f"{cls.name}({flag}=...)", f"line {value.lineno}", value.value)
            return key
        return None

    def _self_bound(self, part: ast.AST, parents: dict, depth: int) -> Optional[tuple]:
        """Wave 30 (EB#11, EC#3): `self.A` (plain, not negated) every store of which in its class is
        a value itself off at the default (`self.use_mega_moe = mega_backend`, the local bound to
        `cfg.moe_backend == "deep_gemm_mega_moe"`): (operand, field) of the first store's reading."""
        if not (isinstance(part, ast.Attribute) and isinstance(part.value, ast.Name) and part.value.id == "self"):
            return None
        self.table()
        if part.attr in self._foreign:
            return None  # (another object's code stores it: `block.use_mega_moe = True`)
        cls = parents.get(id(part))
        while cls is not None and not isinstance(cls, ast.ClassDef):
            cls = parents.get(id(cls))
        if cls is None:
            return None
        found = None
        for stmt in ast.walk(cls):
            targets = stmt.targets if isinstance(stmt, ast.Assign) else \
                [stmt.target] if isinstance(stmt, (ast.AnnAssign, ast.AugAssign)) else []
            for target in targets:
                if isinstance(target, ast.Attribute) and isinstance(target.value, ast.Name) \
                        and target.value.id == "self" and target.attr == part.attr:
                    if not isinstance(stmt, ast.Assign) or len(stmt.targets) != 1 or stmt.value is None:
                        return None
                    off = self._off(stmt.value, parents, depth=depth + 1)
                    if off is None:
                        return None
                    found = found or off
        if found is None:
            return None
        self._via[id(part)] = found[0]  # (what the attribute was bound from: named in the answer)
        return part, found[1]

    def _local(self, node: ast.AST, parents: dict) -> Optional[ast.AST]:
        return local_value(node, parents)

    def _parameter(self, node: ast.Name, parents: dict) -> Optional[str]:
        """A parameter of the enclosing function named as a field and defaulting as it does (`def
        __init__(..., enable_trace_replay: bool = False)`): the setting handed down by keyword."""
        if node.id not in self.table():
            return None
        function = parents.get(id(node))
        while function is not None and not isinstance(function, _DEFS):
            function = parents.get(id(function))
        if function is None:
            return None
        args = function.args
        positional = [*args.posonlyargs, *args.args]
        pairs = list(zip(positional[len(positional) - len(args.defaults):], args.defaults))
        pairs += [(a, d) for a, d in zip(args.kwonlyargs, args.kw_defaults) if d is not None]
        default = self.table()[node.id][2]
        for arg, value in pairs:
            if arg.arg == node.id:
                ok = isinstance(value, ast.Constant) and type(value.value) is type(default) and value.value == default
                rebound = any(isinstance(n, ast.Name) and n.id == node.id and isinstance(n.ctx, ast.Store)
                              for n in ast.walk(function))
                return node.id if ok and not rebound else None
        return None

    def _off(self, test: ast.AST, parents: dict, conjunction: bool = True, depth: int = 0) -> Optional[tuple]:
        """(operand, field) of an operand of `test` (an `and`'s when `conjunction`) false at the default."""
        parts = test.values if isinstance(test, ast.BoolOp) and isinstance(test.op, ast.And) and conjunction else [test]
        for part in parts:
            bound = self._local(part, parents) if depth < 3 else None
            if bound is not None:  # (a local name bound once to such a test: wave 30)
                found = self._off(bound, parents, depth=depth + 1)
                if found is not None:
                    return found
                continue
            name = self._field(part, parents)
            if name is not None:
                value = self._at_every_default(part, name)
                if value is not _UNKNOWN and not value:
                    return part, name
            elif depth < 3:
                found = self._self_bound(part, parents, depth)
                if found is None:  # (state off unless an opt-in set it: `if self.sharder is not None:`, optstates34.py)
                    found = state_off(self, part, parents, depth)
                if found is not None:
                    return found
        return None

    def _taken(self, test: ast.AST, parents: dict) -> Optional[tuple]:
        """(operand, field) of an operand of `test` (an `or`'s) true at the default: an early exit
        taken unless the user sets the field (`if not x.F: return`, `if (s := x.F) is None: return`)."""
        parts = test.values if isinstance(test, ast.BoolOp) and isinstance(test.op, ast.Or) else [test]
        for part in parts:
            name = self._field(part, parents)
            if name is not None:
                value = self._at_every_default(part, name)
                if value is not _UNKNOWN and value:
                    return _subject(part), name  # (what the user sets: the field, not the exit's test)
            else:
                found = state_taken(self, part, parents)  # (`if self.sharder is None: return`: optstates34.py)
                if found is not None:
                    return found
        return None

    def _gated(self, node: ast.AST, parents: dict) -> Optional[str]:
        from .gatewalk30 import gate_of  # (the enclosing-if / early-exit walk the opt-in readers share)

        def off(test: ast.AST) -> Optional[str]:
            found = self._off(test, parents)
            return None if found is None else self._say(*found)

        def taken(test: ast.AST) -> Optional[str]:
            found = self._taken(test, parents)
            return None if found is None else self._say(*found)

        return gate_of(node, parents, off, taken, if_exp=True)

    def chosen(self, node: ast.AST, parents: dict) -> Optional[str]:
        """The opt-in choice the reference `node` lies behind (this module's doc), or None."""
        said = self._gated(node, parents)
        if said is not None:
            return said
        # (a private method whose every reference in its file is so gated)
        method = parents.get(id(node))
        while method is not None and not isinstance(method, _DEFS):
            method = parents.get(id(method))
        cls = parents.get(id(method)) if method is not None else None
        if method is None or not isinstance(cls, ast.ClassDef) or not method.name.startswith("_") \
                or method.name.startswith("__"):
            return None
        module = cls
        while parents.get(id(module)) is not None:
            module = parents[id(module)]
        answers = []
        for ref in ast.walk(module):
            if isinstance(ref, (ast.Attribute, ast.Name)) and (getattr(ref, "attr", None) or getattr(ref, "id", None)) == method.name:
                said = self._gated(ref, parents)
                if said is None:
                    return None
                answers.append(f"{said}, through `{method.name}` (line {ref.lineno})")
        return answers[0] if answers else None

    def chosen_at(self, tree: ast.Module, line: int) -> Optional[str]:
        """The opt-in choice a place at `line` of `tree` lies behind (its outermost node starting
        there), or None: the finding's own place, not a reference to its unit (wave 30)."""
        if id(tree) not in self._lines:
            parents = {}
            starts: dict = {}
            for parent in astcache.walk(tree):
                for child in ast.iter_child_nodes(parent):
                    parents[id(child)] = parent
                if isinstance(parent, (ast.stmt, ast.expr)):
                    starts.setdefault(parent.lineno, parent)
            self._lines[id(tree)] = (tree, parents, starts)
        _tree, parents, starts = self._lines[id(tree)]
        node = starts.get(line)
        return None if node is None else self.chosen(node, parents)

    def _say(self, operand: ast.AST, name: str) -> str:
        cls, where, default = self._entry(name)
        via = self._via.get(id(operand))
        if via is not None:
            # (worded as optconfig29.py words the same reading)
            return (f"`{' '.join(ast.unparse(operand).split())[:80]}` is chosen (`{' '.join(ast.unparse(via).split())[:80]}`; "
                    f"`{name if '.' in name else f'{cls}.{name}'}` defaults to {default!r} ({where}))")
        if name in self._flags and "." in name:  # (a field read on a receiver named after its class)
            return (f"`{' '.join(ast.unparse(operand).split())[:80]}` is chosen (`{name}` defaults to "
                    f"`{default!r}`, {where})")
        if name in self._flags:
            return (f"`{' '.join(ast.unparse(operand).split())[:80]}` is chosen (`{cls}` defaults to "
                    f"`{default!r}`, {where})")
        return (f"`{' '.join(ast.unparse(operand).split())[:80]}` is chosen (`{cls}.{name}` defaults to "
                f"`{default!r}`, {where})")


def local_value(node: ast.AST, parents: dict) -> Optional[ast.AST]:
    """Wave 30 (round 30 EB#28): the value of a local name bound once, before, in its function
    (`enable_profiler = local_rank == 0 and cfg.capture_torch_profiler`), not a parameter."""
    if not isinstance(node, ast.Name):
        return None
    function = parents.get(id(node))
    while function is not None and not isinstance(function, _DEFS):
        function = parents.get(id(function))
    if function is None:
        return None
    args = function.args
    if any(a.arg == node.id for a in (*args.posonlyargs, *args.args, *args.kwonlyargs, args.vararg, args.kwarg)
           if a is not None):
        return None
    stores = [n for n in ast.walk(function) if isinstance(n, ast.Name) and n.id == node.id
              and isinstance(n.ctx, (ast.Store, ast.Del))]
    if len(stores) != 1:
        return None
    assign = parents.get(id(stores[0]))
    if not (isinstance(assign, ast.Assign) and len(assign.targets) == 1 and assign.targets[0] is stores[0]
            and assign.lineno < node.lineno):
        return None
    inner = parents.get(id(assign))  # (bound in the function's own body or a plain block of it)
    return assign.value if inner is function else None
