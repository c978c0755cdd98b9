"""vLLM code that vllm-ascend rejects or replaces on an Ascend host: review-level notes (issue #16,
audit rows round 30 EA#24, EC#24; round 29 DB#25, DA#2). Whole run, from
runplan.whole_run_passes, after the passes that name code an NPU host never runs.

vLLM runs on Ascend through the vllm-ascend plugin (NPU916/NPU934 say so). The plugin's platform
rejects some of vLLM's quantization methods at config time (`NPUPlatform.supported_quantization`,
checked by `ModelConfig._verify_quantization` -> `current_platform.verify_quantization`: modelopt,
quark), replaces others with its own config registered under the same name (compressed-tensors),
and rebinds some module functions before use (Model Runner V2's `penalties.apply_penalties` and
`bincount`). Code reached only through such a method or function never runs on an Ascend host.
These are facts of the plugin's public sources, not of the run: rules/vllm_ascend.toml holds them,
each with the vllm-ascend file and the version it was read from. They can drift with the plugin, so
a finding they answer is not made a skipped scope: it becomes info (review level), its message
naming the fact and its source. Nothing is dropped.

Applied only when the project is vLLM itself: a file `vllm/platforms/interface.py` defining
`verify_quantization` (its folder is the package root the table's paths start from).

* **A rejected or replaced quantization method** (`[[quantization]]`). The method's modules (its
  file, or its folder) form a package. A top-level function or class of the package is reached when
  code outside the package names it (a name read, an attribute, a dotted string; a test, a
  benchmark, the quantization registry's method table and an `isinstance`/`issubclass` class
  argument aside: an instance only the method builds), when the package's module-level code names
  it, or when a reached unit of the package names it; a module the plugin itself imports
  (`plugin_uses`) is reached whole. An open finding whose every line lies in units not reached
  becomes info. Kept: module-level code, a unit another module calls, subclasses or builds (the
  compressed-tensors `triton_scaled_mm` that vLLM's scaled-mm kernel selection launches).

* **A function the plugin rebinds** (`[[functions]]`). In the function's module, a call of the
  rebound name through the module's globals, or an attribute read of it elsewhere
  (`penalties.apply_penalties`), reaches the plugin's function; a `from module import name` read
  elsewhere binds vLLM's own (it may run before the patch) and keeps it. The units only the rebound
  functions reach (their Triton kernels) become info the same way.

  Wave 32 (h163; round 31 FA#11, FC#24): an entry may name importers whose from-imported global
  the plugin rebinds too (`rebound_in`: `states.apply_temperature`); the module whose attribute the
  plugin rebinds when it is a package re-exporting the function (`rebound_at`: FLA's
  `fla_ops.chunk_gated_delta_rule`, rebound before the model loads, so a `from package import f`
  binds the plugin's while a `from package.module import f` keeps vLLM's); modules only the
  function's module calls into (`package`); and `split`: a merged finding only some of whose places
  lie in units the rebound functions alone reach is split, those places info, the others kept.

* **A torch.cuda name the plugin remaps** (`[[remapped]]`). vllm-ascend runs Model Runner V2
  (`vllm/v1/worker/gpu/`) under `torch_cuda_wrapper()`, which sets `torch.cuda.CUDAGraph`,
  `torch.cuda.graph`, streams and events to their torch.npu counterparts and never undoes it. An
  open NPU202 finding there whose every place is such a name becomes info (the capture builds an NPU
  graph: an inference capture). The same names elsewhere in vLLM keep their severity.

* **A backend only a registry the plugin never selects names** (`[[backends]]`, round 32 GA#30,
  GA#31). vLLM names its attention and MLA prefill backends in registries by dotted strings;
  vllm-ascend's `get_attn_backend_cls` returns only its own backends, and its capability is None
  (the MLA prefill selector then never picks TRT-LLM ragged). The backend module's units no other
  library module names (the registry aside) become info the same way.

Wave 33 (h173, round 32 GB#5 and a re-read of the plugin's sources): a `[[quantization]]` entry's
`plugin_uses` may name a class (`path:Name`), and `plugin_overrides` the methods the plugin's own
subclass of it overrides without calling them. The newer plugin subclasses vLLM's Fp8Config,
DeepseekV4FP8Config and ModelOptMxFp8Config ("modelopt_mxfp8" is supported now): such a class is
reached with all its other methods name, its bases walked the same way; its overridden methods
(`get_quant_method`, which built vLLM's own methods) are units not reached unless another route
names the class. "inc" is rejected too. fp8_utils.py is a `helpers` module (GB#5:
`create_fp8_weight_parameter` stays reached in vLLM, whose HY V4 MTP builds Fp8Config itself).

Round 32 (h168): a module the run leaves alone as ROCm source (`amd/` model code subclassing
`Mxfp4MoEMethod`) is never imported on an NPU host and reaches nothing; an info finding (not moot)
in such a unit gets the note too (GA#9: its "make the FP8 bytes on the CPU" advice is moot there).

Not answered here (round 30 EA#21, EC#23, round 29 DB#11, EB#27, DB#37): code that another module
builds itself (`flint/model.py` builds `ModelOptNvFp4Config`; `muse_spark` subclasses Quark's MoE
method and lists `QuarkConfig`), shared helpers (`w8a8_utils.py`, `mxfp8_utils.py`) other methods
call, and a layer the plugin replaces (`MultiHeadLatentAttentionWrapper`) whose inner module's
`forward` is reached through `nn.Module.__call__`: they stay as reported.
"""

from __future__ import annotations

import ast
import dataclasses
import functools
import re
from typing import Optional

from . import catalogue

PHRASE = "vllm-ascend, the plugin vLLM runs on Ascend through,"
_TEST_PART = re.compile(r"(^|/)(tests?|testing|benchmarks?)/|(^|/)test_[^/]*$|_test\.py$|(^|/)conftest\.py$")
_UNITS = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)


@functools.lru_cache(maxsize=None)
def facts() -> dict:
    """rules/vllm_ascend.toml."""
    return catalogue.read_table("vllm_ascend.toml")


def vllm_root(results, text_of) -> Optional[str]:
    """The relpath prefix of vLLM's package root ("" or "src/..."), when the run is vLLM itself."""
    project = facts().get("project", {})
    wanted, text = project.get("detect_file", ""), project.get("detect_text", "").encode()
    for i, result in enumerate(results):
        if wanted and (result.relpath == wanted or result.relpath.endswith("/" + wanted)):
            data = text_of(i)
            if data and text in data:
                return result.relpath[:len(result.relpath) - len(wanted)]
    return None


def _span(unit) -> tuple:
    first = min([unit.lineno, *(d.lineno for d in getattr(unit, "decorator_list", ()))])
    return first, unit.end_lineno or unit.lineno


def _class_arguments(tree) -> set:
    """ids of the nodes an `isinstance`/`issubclass` call tests against, a `cast` names, and of annotations."""
    out: set = set()
    for node in ast.walk(tree):
        parts = []
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in (
                "isinstance", "issubclass") and len(node.args) == 2:
            parts.append(node.args[1])
        elif isinstance(node, ast.Call) and _called(node) == "cast" and node.args:
            parts.append(node.args[0])  # (`typing.cast(Config, value)`: a type, no use)
        elif isinstance(node, ast.arg) and node.annotation is not None:
            parts.append(node.annotation)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.returns is not None:
            parts.append(node.returns)
        elif isinstance(node, ast.AnnAssign):
            parts.append(node.annotation)
        for part in parts:
            out.update(id(n) for n in ast.walk(part))
    return out


def _called(call: ast.Call) -> str:
    func = call.func
    return func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else ""


def _reads(nodes, names: frozenset, skip: set, cut: frozenset = frozenset(), attributes_cut: bool = False):
    """The names of `names` that `nodes` read: a Name, an Attribute, a dotted string. `cut`: names a
    global read of (a Name) resolves elsewhere; `attributes_cut`: an attribute read of them too."""
    out = set()
    for top in nodes:
        for node in ast.walk(top):
            if id(node) in skip:
                continue
            if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load):
                name = node.id
                if name in cut and not attributes_cut:
                    continue
            elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Load):
                name = node.attr
                if name in cut and attributes_cut:
                    continue
            elif isinstance(node, ast.Constant) and isinstance(node.value, str) and len(node.value) < 300:
                name = node.value.rpartition(".")[2]
            else:
                continue
            if name in names:
                out.add(name)
    return out


def _owner(stmt) -> Optional[str]:
    """`Name` of a module-level `Name.attr = value` / `Name[key] = value` (an extension of Name)."""
    if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(
            stmt.targets[0], (ast.Attribute, ast.Subscript)) and isinstance(stmt.targets[0].value, ast.Name):
        return stmt.targets[0].value.id
    return None


_REGISTRATIONS = frozenset({"register_fake", "register_kernel", "register_autograd", "register_torch_dispatch",
                            "register_vmap", "register_impl", "register_abstract"})


def _registered_ops(decorators) -> set:
    """ids of the `op` Names of `@op.register_fake`-like decorators (they name the op, call nothing)."""
    return {id(d.value) for top in decorators for d in ast.walk(top)
            if isinstance(d, ast.Attribute) and d.attr in _REGISTRATIONS and isinstance(d.value, ast.Name)}


def _registrations(tree, names: frozenset) -> list:
    """(op name, unit name, ids of the Names it hands on) of each module-level
    `direct_register_custom_op(op_name="op", op_func=unit, fake_impl=...)`: it registers the unit as
    the custom op `torch.ops.<namespace>.op` and calls nothing of it."""
    out = []
    for stmt in tree.body:
        call = stmt.value if isinstance(stmt, ast.Expr) else None
        if not isinstance(call, ast.Call) or not _called(call).endswith("register_custom_op"):
            continue
        words = {k.arg: k.value for k in call.keywords if k.arg}
        func, op = words.get("op_func"), words.get("op_name")
        if isinstance(func, ast.Name) and func.id in names:
            spelling = op.value if isinstance(op, ast.Constant) and isinstance(op.value, str) else func.id
            ids = {id(v) for k, v in words.items() if k in ("op_func", "fake_impl", "op_name")}
            out.append((spelling, func.id, ids))
    return out


def _is_custom_op(unit) -> bool:
    """A unit decorated with `custom_op(...)`/`triton_op(...)` (callable through torch.ops)."""
    for d in getattr(unit, "decorator_list", ()):
        call = d.func if isinstance(d, ast.Call) else d
        name = call.id if isinstance(call, ast.Name) else call.attr if isinstance(call, ast.Attribute) else ""
        if name in ("custom_op", "triton_op"):
            return True
    return False


def module_instances(tree) -> list:
    """(statement, target) of each module-level `NAME = Class()` of the module (ascendmodels32, round
    32 GB#38: `_SAVE_PARTIAL_STATES_KERNEL = SavePartialStatesKernel()`): an undecorated class of the
    same module that defines no `__init__`/`__new__`/`__post_init__` (nor does a base of that
    module), built with constant arguments only, its target bound once, so the statement runs
    nothing of the module's own code but the class body; what the instance's methods launch runs
    only when code reads the name. (A base from another module runs its own `__init__`: vLLM's
    VllmJitKernel only traces `dispatch` and fills a cache.)"""
    if tree is None:
        return []
    classes = {n.name: n for n in tree.body if isinstance(n, ast.ClassDef)}
    bound: dict = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and isinstance(node.ctx, (ast.Store, ast.Del)):
            bound[node.id] = bound.get(node.id, 0) + 1

    def builds(name, seen=()) -> bool:
        cls = classes.get(name)
        if cls is None or name in seen:
            return cls is None and name not in seen  # (a base outside the module: its own code)
        # (a decorated class, a dataclass's `__post_init__`: code of the module that building runs)
        if cls.decorator_list or any(isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n.name in (
                "__init__", "__new__", "__post_init__") for n in cls.body):
            return False
        bases = [b.id if isinstance(b, ast.Name) else b.value.id if isinstance(b, ast.Subscript) and isinstance(
            b.value, ast.Name) else None for b in cls.bases]
        return all(b is None or b not in classes or builds(b, (*seen, name)) for b in bases)

    out = []
    for stmt in tree.body:
        if not (isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name)):
            continue
        call, target = stmt.value, stmt.targets[0].id
        if (isinstance(call, ast.Call) and isinstance(call.func, ast.Name) and call.func.id in classes
                and bound.get(target) == 1 and target not in classes
                and all(isinstance(a, ast.Constant) for a in (*call.args, *(k.value for k in call.keywords)))
                and builds(call.func.id)):
            out.append((stmt, target))
    return out


class _Package:
    """The units of some modules of the run and which of them code outside or a reached unit names."""

    def __init__(self, results, text_of, members: list, cut: frozenset = frozenset(),
                 rebound_in: Optional[dict] = None, rebound_from: frozenset = frozenset(),
                 own_globals: bool = True, instances: bool = False) -> None:
        from . import astcache

        self.results, self.text_of, self.cut = results, text_of, cut
        # (ascendfacts32: {importer index: names the plugin rebinds in that importer's globals};
        # the modules (dotted names and relpath stems) whose attribute the plugin rebinds, so a
        # `from module import name` of a cut name there binds the plugin's; whether the plugin
        # rebinds the members' own globals, as `penalties.apply_penalties = ...` does)
        self.rebound_in, self.rebound_from = rebound_in or {}, rebound_from
        self.inner_cut = cut if own_globals else frozenset()
        self.members = members
        self.trees = {}
        self.units: dict = {}  # name -> [(index, unit)]
        for i in members:
            data = text_of(i)
            tree = astcache.parse(data) if data else (ast.Module(body=[], type_ignores=[]) if data == b"" else None)
            self.trees[i] = tree
            for node in tree.body if tree is not None else ():
                if isinstance(node, _UNITS):
                    self.units.setdefault(node.name, []).append((i, node))
        # (ascendmodels32 since wave 33, `instances`: a module-level `_KERNEL = KernelClass()` is a
        # unit of its own, named by its target: building it at import launches nothing, reading it does)
        self.instances: set = set()
        for i in members if instances else ():
            for stmt, target in module_instances(self.trees[i]):
                if target not in self.units:
                    self.units[target] = [(i, stmt)]
                    self.instances.add(id(stmt))
        # (h182, round 33 HC#38: a module-level set of classes only tested for membership, membersets34)
        self.memberships: dict = {}
        for i in members if instances else ():
            from .membersets34 import membership_sets
            mine = membership_sets(self.trees[i]) if self.trees[i] is not None else {}
            # (another member that spells the name may hand the set on: kept)
            self.memberships.update({sid: name for sid, name in mine.items() if not any(
                k != i and re.search(rb"\b" + re.escape(name.encode()) + rb"\b", text_of(k) or b"") for k in members)})
        self.names = frozenset(self.units)
        self.edges: dict = {}  # unit name -> module-level statements that only extend it
        self.why: dict = {}  # reached unit name -> what names it first
        # (wave 33: class name -> the methods a plugin subclass overrides, for a class reached only
        # through that subclass: those methods are not reached, the rest of the class is)
        self.partial: dict = {}

    def _why(self, names, origin) -> None:
        for name in names:
            self.why.setdefault(name, origin)

    def reached(self, outside: list, whole: frozenset = frozenset(), seeds: frozenset = frozenset(),
                subclassed: Optional[dict] = None) -> Optional[set]:
        """The names of units reached; None where a member does not parse. `seeds`: unit names
        reached from elsewhere (ascendmodels32: a registry route the facts leave open).
        `subclassed`: {class name: methods the plugin's subclass overrides} (wave 33, h173)."""
        from . import astcache
        from .modpaths import module_names

        if any(t is None for t in self.trees.values()):
            return None
        reached: set = set()
        if not self.names:
            return reached
        modules = {name for i in self.members for name in module_names(self.results[i].relpath)}
        dotted = re.compile(rb"\b(?:" + b"|".join(re.escape(m.encode()) for m in sorted(modules)) + rb")\b")
        # (a relative import names a member's module, or its package's, by its last part)
        lasts = re.compile(rb"\b(?:" + b"|".join(sorted({re.escape(p.encode()) for i in self.members
                                                                     for p in self.results[i].relpath[:-3].split("/")[-2:]})) + rb")\b")
        # (a custom op is called through `torch.ops.<namespace>.<name>` too: any outside file that
        # spells its name reaches it)
        ops = {n: n for n, places in self.units.items() if any(_is_custom_op(u) for _i, u in places)}
        registering: set = set()  # (ids of the Names a module-level registration call hands on)
        for tree in self.trees.values():
            for spelling, name, ids in _registrations(tree, self.names):
                ops[spelling] = ops[name] = name
                registering |= ids
        spelled = re.compile(rb"\b(?:" + b"|".join(re.escape(n.encode()) for n in sorted(ops)) + rb")\b") if ops else None
        memberships = dict(self.memberships)
        for j in outside:
            data = self.text_of(j)
            for sid, name in list(memberships.items()) if data else ():
                if re.search(rb"\b" + re.escape(name.encode()) + rb"\b", data):
                    memberships.pop(sid)
            if spelled is not None and data:
                found = {ops[m.decode()] for m in spelled.findall(data)}
                self._why(found, self.results[j].relpath + " (custom op)")
                reached |= found
            if not data or not dotted.search(data) and not (b"from ." in data and lasts.search(data)):
                continue
            tree = astcache.parse(data)
            if tree is None:  # (a file that does not parse: every unit name it spells is reached)
                reached |= {n for n in self.names if re.search(rb"\b" + re.escape(n.encode()) + rb"\b", data)}
                continue
            got = self._imported_reads(j, tree, modules)
            self._why(got, self.results[j].relpath)
            reached |= got
        for i, tree in self.trees.items():
            skip = _class_arguments(tree)
            if i in whole:
                self._why(_reads([tree], self.names, skip), self.results[i].relpath + " (plugin)")
                reached |= _reads([tree], self.names, skip)
                continue
            tops, edges = [], []
            for stmt in tree.body:
                if isinstance(stmt, (*_UNITS, ast.Import, ast.ImportFrom)) or isinstance(stmt, ast.Assign) and any(
                        isinstance(t, ast.Name) and t.id == "__all__" for t in stmt.targets) or id(stmt) in self.instances \
                        or id(stmt) in memberships:
                    continue
                owner = _owner(stmt)
                (edges if owner in self.names else tops).append((owner, stmt))
            got = _reads([stmt for _o, stmt in tops], self.names, skip | registering, self.inner_cut)
            self._why(got, self.results[i].relpath + " (module level)")
            reached |= got
            # (`Config.FusedMoEMethodCls = Method` at module level: Method is reached with Config)
            for owner, stmt in edges:
                self.edges.setdefault(owner, []).append(stmt)
            # (a decorator runs at import: what it names is reached; `@op.register_fake` registers
            # another implementation of the custom op `op` and calls nothing of it)
            decorators = [d for s in tree.body if isinstance(s, _UNITS) for d in s.decorator_list]
            reached |= _reads(decorators, self.names, skip | _registered_ops(decorators), self.inner_cut)
        self._why(seeds & self.names, "(seed)")
        reached |= seeds & self.names
        reached |= self._subclassed_reads(subclassed or {})
        todo = list(reached)
        while todo:
            name = todo.pop()
            nodes = [unit for _i, unit in self.units.get(name, ())] + self.edges.get(name, [])
            for node in nodes:
                for found in _reads([node], self.names, _class_arguments(node), self.inner_cut) - reached:
                    self._why({found}, name)
                    reached.add(found)
                    todo.append(found)
        return reached

    def _imported_reads(self, j: int, tree, modules: set) -> set:
        """The unit names file j reads through its imports of the members: a name imported from a
        member (under its alias), an attribute of a member module it imports, a dotted string naming
        a member module; `isinstance`/`issubclass` class arguments and annotations aside."""
        from .modpaths import resolve_relative

        relpath = self.results[j].relpath
        stems = {self.results[i].relpath[:-3] for i in self.members}
        stems |= {s[:-len("/__init__")] for s in stems if s.endswith("/__init__")}
        aliases: dict = {}  # local name -> unit name
        module_aliases: set = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom):
                if node.level:
                    source = resolve_relative(relpath, node.level, node.module or "")
                    ours, base = source in stems, source
                else:
                    base = node.module or ""
                    ours = base in modules
                rebound = self.rebound_in.get(j, frozenset()) | (
                    self.cut if base in self.rebound_from else frozenset())
                for alias in node.names:
                    if ours and alias.name in self.names and alias.name not in rebound:
                        aliases[alias.asname or alias.name] = alias.name
                    # (`from pkg.quantization import modelopt`: the module under a name)
                    sub = f"{base}.{alias.name}" if not node.level else f"{base}/{alias.name}"
                    if sub in modules or sub in stems:
                        module_aliases.add(alias.asname or alias.name)
            elif isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.name in modules:
                        module_aliases.add(alias.asname or alias.name.partition(".")[0])
        skip = _class_arguments(tree)
        out: set = set()
        for node in ast.walk(tree):
            if id(node) in skip:
                continue
            if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load) and node.id in aliases:
                out.add(aliases[node.id])  # (of a rebound function: `from m import f` binds vLLM's own)
            elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Load) and node.attr in self.names:
                if node.attr in self.cut:
                    continue  # (the module's attribute: the plugin's function)
                if module_aliases:
                    out.add(node.attr)
            elif isinstance(node, ast.Constant) and isinstance(node.value, str) and len(node.value) < 300:
                head, _dot, name = node.value.rpartition(".")
                if name in self.names and head in modules:
                    out.add(name)
        return out

    def named_from(self, indices: list) -> set:
        """The unit names the code of members `indices` names, and what those units name in turn."""
        named: set = set()
        for i in indices:
            tree = self.trees.get(i)
            if tree is not None:
                named |= _reads([tree], self.names, _class_arguments(tree), self.inner_cut)
        todo = list(named)
        while todo:
            for _i, unit in self.units.get(todo.pop(), ()):
                for found in _reads([unit], self.names, _class_arguments(unit), self.inner_cut) - named:
                    named.add(found)
                    todo.append(found)
        return named

    def _subclassed_reads(self, subclassed: dict) -> set:
        """What the classes the plugin subclasses name, their overridden methods aside; their bases
        in the package are walked the same way (an overridden method is not reached through the
        subclass at any level of its bases). Sets `partial`."""
        out: set = set()
        todo = [(name, frozenset(skip)) for name, skip in subclassed.items() if name in self.names]
        while todo:
            name, skip = todo.pop()
            known = self.partial.get(name)
            if known is not None and known <= skip:
                continue
            skip = skip if known is None else known & skip
            self.partial[name] = skip
            for _i, unit in self.units.get(name, ()):
                if not isinstance(unit, ast.ClassDef):
                    out.add(name)
                    continue
                bases = {b.id for b in unit.bases if isinstance(b, ast.Name)} & self.names
                todo.extend((b, skip) for b in bases)
                body = [s for s in unit.body if not (isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef))
                                                     and s.name in skip)]
                nodes = [*(b for b in unit.bases if not (isinstance(b, ast.Name) and b.id in bases)),
                         *unit.keywords, *unit.decorator_list, *body, *self.edges.get(name, [])]
                got = _reads(nodes, self.names, _class_arguments(unit), self.inner_cut) - {name} - bases
                self._why(got, f"{name} (subclassed by the plugin)")
                out |= got
        return out

    def unreached_spans(self, reached: set) -> dict:
        """{member index: [(first, last, name)]} of the units not reached; of a class reached only
        through a plugin subclass (`partial`), its overridden methods (`Class.method`)."""
        out: dict = {}
        for name, places in self.units.items():
            if name in reached:
                continue
            for i, unit in places:
                if name in self.partial and isinstance(unit, ast.ClassDef):
                    out.setdefault(i, []).extend(
                        (*_span(s), f"{name}.{s.name}") for s in unit.body
                        if isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef)) and s.name in self.partial[name])
                    continue
                out.setdefault(i, []).append((*_span(unit), name))
        return out


def _plain_info(finding) -> bool:
    """A report-only info finding not moot: its advice ("make the FP8 bytes on the CPU") is moot
    where the plugin's fact closes the code, so the fact is named on it too (round 32 GA#9)."""
    from .moot import is_moot

    return not finding.fixable and finding.cell is None and finding.severity == "info" and not is_moot(finding)


def _lowered(results, spans: dict, note, split: bool = False) -> tuple:
    """The results with each open finding whose every line lies in an unreached unit made info,
    `note(name)` appended; and how many findings changed. `split`: a merged finding some of whose
    places lie in unreached units is split, those places made info, the others merged again and
    kept (round 31 FA#11: gumbel.py's one NPU910 finding stands for the temperature kernel the
    plugin's rebinding closes and for kernels other modules reach)."""
    from .findings import lower_pieces, merge_per_file
    from .moot import is_open

    out, count = list(results), 0
    for i, found in spans.items():
        findings, changed = [], False
        for finding in results[i].findings:
            lines = (finding.line, *(line for line, _c, _s in finding.also))
            names = [next((s[2] for s in found if s[0] <= n <= s[1]), None) for n in lines]
            if split and any(names) and not all(names) and is_open(finding) and PHRASE not in finding.message:
                def reason_of(line, found=found):
                    name = next((s[2] for s in found if s[0] <= line <= s[1]), None)
                    return None if name is None else note(name)

                pieces = lower_pieces(finding, reason_of)
                if pieces is not None:
                    lowered = [p for p in pieces if p.severity == "info" and PHRASE in p.message]
                    findings.extend(merge_per_file(lowered) + [p for p in pieces if p not in lowered])
                    changed, count = True, count + 1
                    continue
            if (is_open(finding) or _plain_info(finding)) and all(names) and PHRASE not in finding.message:
                finding = dataclasses.replace(finding, severity="info",
                                              message=f"{finding.message} ({note(names[0])})")
                changed, count = True, count + 1
            findings.append(finding)
        if changed:
            out[i] = dataclasses.replace(results[i], findings=sorted(findings) if split else findings)
    return out, count


def _module_spellings(prefix: str, relpath: Optional[str]) -> frozenset:
    """The ways an import names the module at `relpath` (under the package root `prefix`): its dotted
    names and its relpath stem (the folder of a package's `__init__.py` too)."""
    from .modpaths import module_names

    if not relpath:
        return frozenset()
    stem = (prefix + relpath)[:-3]
    return frozenset({*module_names(relpath), stem, stem[:-len("/__init__")] if stem.endswith("/__init__") else stem})


def _rocm_skipped(result) -> bool:
    """A file the run left alone as ROCm/HIP source (run.rocm_reason): never imported on an NPU host."""
    return bool(result.skipped) and result.skipped.startswith("ROCm/HIP source")


def _in(relpath: str, prefix: str, paths) -> bool:
    return any(relpath == prefix + p or (p.endswith("/") and relpath.startswith(prefix + p)) for p in paths)


def _note(kind: str, entry: dict) -> str:
    """The reason appended to a lowered finding: the plugin's fact, its source, what it means here."""
    return (f"review: {PHRASE} {entry['fact']} ({entry['source']}); {kind}: an external fact that can "
            f"change with the plugin's version: check it against the vllm-ascend release you deploy")


def review(results: list, paths: dict) -> list:
    """Open findings of vLLM's code only a quantization method vllm-ascend rejects or replaces, or a
    function it rebinds, reaches, and graph names it remaps: info naming the fact and its source."""
    from .modpaths import RunTexts

    table = facts()
    if not any(table.get(kind) for kind in ("quantization", "functions", "remapped", "backends")):
        return results
    text_of = RunTexts(results, paths or {})
    prefix = vllm_root(results, text_of)
    if prefix is None:
        return results
    from .moot import is_open

    python = [i for i, r in enumerate(results) if r.relpath.endswith(".py")]
    library = [i for i in python if not _TEST_PART.search(results[i].relpath[len(prefix):])]
    # (the methods' modules form one package: code only another rejected method's code names is
    # not reached either, `DeepseekV4FP8Config` building `ModelOptNvFp4Config`)
    entries = table.get("quantization", ())
    of = {i: e for e in entries for i in library if _in(results[i].relpath, prefix, e["modules"])}
    helpers = {i: e for e in entries for i in library if _in(results[i].relpath, prefix, e.get("helpers", ()))
               and i not in of}
    of.update(helpers)
    members = sorted(of)
    if any(is_open(f) or _plain_info(f) for i in members for f in results[i].findings):
        registry = {i for e in entries for i in library if _in(results[i].relpath, prefix, e.get("registry", ()))}
        whole = frozenset(i for i in members if _in(results[i].relpath, prefix, of[i].get("plugin_uses", ())))
        package = _Package(results, text_of, members)
        # (a ROCm module the run leaves alone is never imported on an NPU host: what it subclasses
        # or builds is not reached through it, round 32 GA#9)
        outside = [j for j in library if j not in of and j not in registry and not _rocm_skipped(results[j])]
        seeds, subclassed = plugin_seeds(results, prefix, members, of)
        reached = package.reached(outside, whole, seeds, subclassed)
        if reached is not None:
            spans = {i: s for i, s in package.unreached_spans(reached).items() if i not in whole}
            # (a shared helper module: only its units the methods' own code names are theirs)
            theirs = package.named_from([i for i in members if i not in helpers])
            spans = {i: [s for s in found if i not in helpers or s[2] in theirs] for i, found in spans.items()}
            for entry in entries:
                methods = ", ".join(f'"{m}"' for m in entry["methods"])

                def note(name, methods=methods, entry=entry):
                    if "." in name:  # (a method the plugin's own subclass overrides, wave 33)
                        return _note(f"this code is reached only through the quantization method {methods}, and `{name}` is overridden "
                                     f"by the plugin's own subclass of that class, which never calls it", entry)
                    return _note(f"this code is reached only through the quantization method {methods} (`{name}` is named only by the code of "
                                 f"methods the plugin rejects or replaces)", entry)

                results, _count = _lowered(results, {i: s for i, s in spans.items() if of[i] is entry}, note)
    for entry in table.get("functions", ()):
        # (`package`: modules only the function's module calls into; `rebound_at`: the module whose
        # attribute the plugin rebinds when it is not the function's own (a package re-exporting
        # it); `rebound_in`: importers whose from-imported global the plugin rebinds too)
        wanted = [entry["module"], *entry.get("package", ()), *([entry["rebound_at"]] if entry.get("rebound_at") else ())]
        members = [i for i in library if any(results[i].relpath == prefix + m for m in wanted)]
        if not any(is_open(f) for i in members for f in results[i].findings):
            continue
        cut = frozenset(entry["names"])
        rebound_in = {j: frozenset(r["names"]) for r in entry.get("rebound_in", ()) for j in library
                      if results[j].relpath == prefix + r["module"]}
        package = _Package(results, text_of, members, cut, rebound_in, _module_spellings(prefix, entry.get("rebound_at")),
                           own_globals=not entry.get("rebound_at"))
        reached = package.reached([j for j in library if j not in members])
        if reached is None:
            continue
        names = ", ".join(f"`{n}`" for n in entry["names"])

        def note(name, names=names, entry=entry):
            return _note(f"this code is reached only through the functions the plugin rebinds, {names} (`{name}` is named only by them)", entry)

        results, _count = _lowered(results, package.unreached_spans(reached), note, split=bool(entry.get("split")))
    for entry in table.get("remapped", ()):
        results = _remapped(results, [i for i in library if _in(results[i].relpath, prefix, entry["modules"])], entry)
    for entry in table.get("backends", ()):
        results = _backends(results, text_of, prefix, library, entry)
    return results


def plugin_seeds(results, prefix: str, members: list, of: dict) -> tuple:
    """(unit names, {class name: overridden methods}) of the `plugin_uses` entries `path:Name`
    (wave 33, h173): a class the plugin imports or subclasses is reached with all it names, except
    the methods its subclass overrides (`plugin_overrides`, `AscendFp8Config.get_quant_method`);
    the rest of its module keeps the fact's walk."""
    seeds, subclassed = set(), {}
    for i in members:
        overrides = of[i].get("plugin_overrides", {})
        for use in of[i].get("plugin_uses", ()):
            path, _colon, name = use.partition(":")
            if name and results[i].relpath == prefix + path:
                if overrides.get(name):
                    subclassed[name] = frozenset(overrides[name])
                else:
                    seeds.add(name)
    return frozenset(seeds), subclassed


def _backends(results: list, text_of, prefix: str, library: list, entry: dict) -> list:
    """`[[backends]]` (round 32 GA#30, GA#31): a backend module vLLM names only by a dotted string in
    a selector's registry (`registry`), a registry whose entries the plugin's platform never selects.
    Its units that no other library module names (the registry, ROCm modules the run leaves alone
    aside), nor its module-level code, nor a unit so reached, are reached only through that registry:
    their open findings become info naming the fact."""
    from .moot import is_open

    members = [i for i in library if _in(results[i].relpath, prefix, entry["modules"])]
    if not any(is_open(f) or _plain_info(f) for i in members for f in results[i].findings):
        return results
    registry = {i for i in library if _in(results[i].relpath, prefix, entry["registry"])}
    package = _Package(results, text_of, members)
    outside = [j for j in library if j not in members and j not in registry and not _rocm_skipped(results[j])]
    reached = package.reached(outside)
    if reached is None:
        return results
    where = ", ".join(f"`{r}`" for r in entry["registry"])

    def note(name, entry=entry, where=where):
        return _note(f"this backend is reached only through the registry {where}, whose entries name it by a dotted "
                     f"string (`{name}` is named only by the backend's own code)", entry)

    results, _count = _lowered(results, package.unreached_spans(reached), note)
    return results


def _remapped(results, indices, entry) -> list:
    """Open findings of `indices` whose every place names a torch.cuda name the plugin remaps."""
    from .moot import is_open

    names, out = set(entry["names"]), list(results)
    note = _note("every name of this finding is one the plugin remaps, so its NPU counterpart is what runs", entry)
    for i in indices:
        findings, changed = [], False
        for finding in results[i].findings:
            sources = (finding.source, *(source for _l, _c, source in finding.also))
            if is_open(finding) and finding.code == "NPU202" and all(s in names for s in sources):
                finding = dataclasses.replace(finding, severity="info", message=f"{finding.message} ({note})")
                changed = True
            findings.append(finding)
        if changed:
            out[i] = dataclasses.replace(results[i], findings=findings)
    return out


# (public names for ascendmodels32.py, which applies the `[[models]]` facts with the same package walk)
Package = _Package
lowered = _lowered
note_for = _note
in_paths = _in
TEST_PART = _TEST_PART
# (and for ascendmethods34.py, which walks methods as units: registered and decorated custom ops)
registrations = _registrations
is_custom_op = _is_custom_op
