"""The leftover sweep: report every CUDA reference that no rule claimed (NPU990).

Runs over the original tree after the rewrite rules, skipping the subtrees a rule rewrote or
reported, and reports each remaining construct once, at its outermost expression. Imports of
CUDA-only packages get their family's code, and NPU934 when they run unguarded at import time.
The profiler's CUDA activity (`ProfilerActivity.CUDA`, `use_cuda=True`) is NPU935; a CUDA
environment variable set inside a command string (`"CUDA_VISIBLE_DEVICES=0 python ..."`) is NPU604
(NPU602 for NCCL), unless the string is prose: a docstring, a log, print, warning or exception
message, a help text. Inside a platform-aware scope (code that already handles the NPU next to
CUDA, families/platform.py) every leftover is NPU991 instead, for information only.
"""

from __future__ import annotations

import ast
import functools
import re
from dataclasses import replace
from typing import Optional

import libcst as cst

from . import astcache, catalogue, cpufakes26, fp8data, gates15, hotslice, labelflow, labels, labels5, labels6, labels8, labels9
from . import labels34
from .families.context import (
    GRAPH_CAPTURES,
    INERT,
    Context,
    asks_platform_layer,
    dotted_name,
    literal_value,
)
from .visitors import CachedVisitorDispatch


@functools.lru_cache(maxsize=None)
def _tables():
    t = catalogue.read_table("sweep.toml")
    strings = re.compile("|".join(f"(?:{s})" for s in t["strings"]), re.DOTALL)
    return (frozenset(t["attributes"]), tuple(t["modules"]), strings, frozenset(t["names"]),
            dict(t["module_codes"]), dict(t["name_codes"]))


@functools.lru_cache(maxsize=None)
def _portable() -> tuple[str, ...]:
    return tuple(catalogue.read_table("sweep.toml").get("portable", ()))


@functools.lru_cache(maxsize=None)
def _env_tables() -> tuple[frozenset, re.Pattern]:
    env = catalogue.env_table()
    return frozenset(env["rename"]), re.compile(env["report"]["pattern"])


def string_may_matter(value: str) -> bool:
    """Whether a rule or the sweep may act on a string literal of this value for more than its
    trigger words: a leftover string pattern, an environment variable NPU601/NPU602 handle.

    Hot slices leave out literal data whose strings all answer no (hotslice.reduce).
    """
    strings = _tables()[2]
    renamed, reported = _env_tables()
    return bool(strings.fullmatch(value) or value in renamed or reported.match(value))


@functools.lru_cache(maxsize=None)
def rule_reads() -> hotslice.RuleReads:
    """What the rules read besides the hot patterns, for hot slices (hotslice.reduce).

    `qualnames`: every qualified name a rule or the sweep matches in an expression (the tables'
    entries); those without a trigger word (`torch.distributed.new_subgroups`) keep the part of
    a statement that names them from being left out.
    """
    attributes, _modules, _strings, names, _module_codes, name_codes = _tables()
    distributed = catalogue.distributed_table()
    qualnames = (
        *attributes, *names, *name_codes,
        *distributed["backend_first_arg_calls"], *distributed["backend_getters"], distributed["enum"],
        *catalogue.cuda_api()["report_qualnames"],
        *_profiler_table()[0],  # profile(use_cuda=...): NPU935
    )
    return hotslice.RuleReads(
        getters=tuple(catalogue.cuda_api()["device_properties"]["getters"]),
        captures=tuple(GRAPH_CAPTURES),
        qualnames=tuple(sorted(set(qualnames))),
        string_may_matter=string_may_matter,
    )


@functools.lru_cache(maxsize=None)
def _label_table() -> tuple[frozenset, frozenset, re.Pattern, frozenset, re.Pattern]:
    t = catalogue.read_table("sweep.toml")["labels"]
    switches = re.compile(catalogue.env_table()["switches"]["pattern"])
    return (frozenset(t["platform_labels"]), frozenset(t["device_types"]), re.compile(t["accelerator_name"]),
            frozenset(t["name_methods"]), switches)


@functools.lru_cache(maxsize=None)
def _name_calls() -> dict[str, frozenset]:
    table = catalogue.read_table("sweep.toml")["labels"].get("name_calls", {})
    return {key: frozenset(table.get(key, ())) for key in ("module_probes", "module_imports", "fx_node_calls")}


# moot.NO_WORK carries this reason (a finding with it becomes a named skipped scope)
FX_METHOD = "a method name an FX tracer records, not a device: `create_proxy(\"call_method\", ...)`"


@functools.lru_cache(maxsize=None)
def _capability_names() -> frozenset:
    return frozenset(catalogue.read_table("sweep.toml")["labels"].get("capability_names", ()))


@functools.lru_cache(maxsize=None)
def _prose_call_words() -> frozenset:
    return frozenset(catalogue.read_table("sweep.toml")["commands"].get("prose_call_words", ()))


def _label_tables(tree: Optional[ast.AST]) -> frozenset:
    """Names bound at module level to a dict literal whose string keys hold "cuda" next to a
    platform label (`DEVICE_BACKENDS = {"cuda": ..., "rocm": ...}`): a table keyed by platform."""
    if not isinstance(tree, ast.Module):
        return frozenset()
    labels = _label_table()[0]
    names = set()
    for statement in tree.body:
        targets = statement.targets if isinstance(statement, ast.Assign) else (
            [statement.target] if isinstance(statement, ast.AnnAssign) else [])
        value = getattr(statement, "value", None)
        if not isinstance(value, ast.Dict):
            continue
        keys = {k.value for k in value.keys if isinstance(k, ast.Constant) and isinstance(k.value, str)}
        if "cuda" in keys and keys & labels:
            names.update(t.id for t in targets if isinstance(t, ast.Name))
    return frozenset(names)


@functools.lru_cache(maxsize=None)
def _guard_table() -> tuple[tuple[str, ...], frozenset]:
    t = catalogue.read_table("sweep.toml")["guard"]
    return tuple(t["modules"]), frozenset(t["extension_exempt"])


@functools.lru_cache(maxsize=None)
def _profiler_table() -> tuple[frozenset, frozenset, frozenset]:
    t = catalogue.read_table("sweep.toml")["profiler"]
    return frozenset(t["calls"]), frozenset(t["cuda_keywords"]), frozenset(t["device_keywords"])


@functools.lru_cache(maxsize=None)
def _command_table() -> tuple[re.Pattern, frozenset, frozenset]:
    t = catalogue.read_table("sweep.toml")["commands"]
    return re.compile(t["assignment"]), frozenset(t["prose_calls"]), frozenset(t["prose_keywords"])


def _module_matches(module: str, prefixes: tuple[str, ...]) -> bool:
    return any(module == p or module.startswith(p + ".") for p in prefixes)


def _is_extension(parts: list[str]) -> bool:
    """A compiled extension module by PyTorch's naming habits: `_C`, `_CUDA`, `selective_scan_cuda`."""
    return any(p in ("_C", "_CUDA") or p.endswith("_cuda") for p in parts)


_WHITESPACE = re.compile(r"\s")

_PREDICATE = re.compile(r"(is|has|use|uses|get|set|enable|disable|supports?|check|with|can)_")
# a function's name: a verb first (`get_temp_total_chunk_on_cuda`, `move_to_cuda`), or `..._on_cuda`
_VERB = re.compile(r"(get|set|to|move|make|build|load|init|create|check|run|copy|send|put|apply|convert)_|.*_(on|to)_cuda$")

_FP8_VARIABLE = re.compile(r"(?i)(^|_)(float8|fp8|f8e\d\w*)(_|$)")  # `float8_dtype`, `FP8_DTYPE`

_ENV_LIKE = re.compile(r"[A-Z][A-Z0-9_]*")  # a keyword spelled like an environment variable

_IMPORT_ERRORS = frozenset({"ImportError", "ModuleNotFoundError", "Exception", "BaseException"})


def _catches_import_error(handler: cst.CSTNode) -> bool:
    kind = getattr(handler, "type", None)
    if kind is None:
        return True  # a bare `except:`
    values = [e.value for e in kind.elements] if isinstance(kind, cst.Tuple) else [kind]
    return any((dotted_name(v) or "").rsplit(".", 1)[-1] in _IMPORT_ERRORS for v in values)


def unguarded_imports(module: cst.Module) -> set[int]:
    """Import statements that run unconditionally when the module is imported.

    Module level, and inside module-level `with` blocks and `try` blocks that do not catch
    ImportError. Imports in functions, classes and `if` blocks (`if TYPE_CHECKING:`) are not.
    """
    found: set[int] = set()

    def suite(block: cst.BaseSuite) -> None:
        if isinstance(block, cst.SimpleStatementSuite):
            found.update(id(s) for s in block.body if isinstance(s, (cst.Import, cst.ImportFrom)))
        else:
            statements(block.body)

    def statements(body) -> None:
        for stmt in body:
            if isinstance(stmt, cst.SimpleStatementLine):
                found.update(id(s) for s in stmt.body if isinstance(s, (cst.Import, cst.ImportFrom)))
            elif isinstance(stmt, (cst.Try, cst.TryStar)):
                if not any(_catches_import_error(h) for h in stmt.handlers):
                    suite(stmt.body)
                    if stmt.orelse is not None:
                        suite(stmt.orelse.body)
                if stmt.finalbody is not None:
                    suite(stmt.finalbody.body)
            elif isinstance(stmt, cst.With):
                suite(stmt.body)

    statements(module.body)
    return found


class Sweep(CachedVisitorDispatch, cst.CSTVisitor):
    def __init__(self, ctx: Context) -> None:
        super().__init__()
        self.m = ctx  # the rules' context: their claims, the cold statements, name resolution
        ctx.sweeping = True  # from now on a report inside a platform-aware scope is NPU991 (info)
        self.attributes, self.modules, self.strings, self.names, self.module_codes, self.name_codes = _tables()
        self.guard_modules, self.extension_exempt = _guard_table()
        self.unguarded: set[int] = set()
        self.triton_names: set[str] = set()  # local names bound by imports of triton
        self.prose: list[int] = []  # ids of the prose nodes being visited (_command_string)
        self.gates: set[int] = set()  # ids of tests that only ask (an fp8 dtype, torch.version.cuda)
        # FP8 (NPU913), reported once the file is read (leave_Module): the places that compute in
        # FP8, those that compute only in ROCm's fnuz formats, and those that only name a dtype
        self.fp8_named: set[int] = set()  # ids of fp8 dtypes in a naming place (_fp8_naming)
        self.fp8_defaults: dict[int, str] = {}  # ids of fp8 dtypes that are a parameter's default: its name
        self.fp8: dict[str, list[tuple[cst.CSTNode, str]]] = {"compute": [], "rocm": [], "named": [], "variable": []}
        self.fp8_data: Optional[fp8data.FileData] = None  # the file's FP8 data places (fp8data.py), on demand
        self.functions: list[cst.FunctionDef] = []  # the enclosing function definitions
        # `return "cuda"` per function (id): reported when the function leaves, unless it also
        # returns a platform label ("tpu", "auto": a registry of accelerator names)
        self.returns: dict[int, list[cst.SimpleString]] = {}
        self.label_returns: set[int] = set()  # ids of functions that return a platform label
        self.label_info: dict[int, str] = {}  # ids of strings listed as information: why
        self.label_hint: dict[int, str] = {}  # ids of strings reported with a hint: what to do
        self.annotation_strings: set[int] = set()  # ids of the strings inside type annotations
        self.returned: Optional[dict[int, set]] = None  # function's line -> strings it returns
        self.default_casts: Optional[set[tuple[int, str]]] = None  # (line, parameter): see _default_cast
        self.compared_only: Optional[dict] = None  # the file's functions that only compare a parameter
        self.label_tables: Optional[frozenset] = None  # names of module-level tables keyed by platform

    def visit_Module(self, node: cst.Module) -> bool:
        self.unguarded = unguarded_imports(node)
        return True

    def leave_Module(self, original_node: cst.Module) -> None:
        self._report_fp8()

    # ------------------------------------------------------------------ FP8 (NPU913)
    def _fp8(self, node: cst.CSTNode, what: str) -> None:
        """An FP8 name (NPU913), sorted by what it does: computes, computes only in ROCm's fnuz
        formats, or only names a dtype (an allow-list, a dtype map's key, a default value, a
        descriptor constant); reported once the whole file is read."""
        qual = self.m.qualname(node) or dotted_name(node) or ""
        data = None if id(node) in self.fp8_named else self._fp8_data(node)
        if data is not None:
            kind, what = "named", f"{what} ({data})"  # data or metadata, not FP8 compute (fp8data.py)
        elif id(node) in self.fp8_named and not self._default_cast(node):
            kind = "named"
        elif re.search(r"float8_\w*fnuz$", qual):
            kind = "rocm"
        else:
            kind = "compute"
        self.fp8[kind].append((node, what))

    def _fp8_data(self, node: cst.CSTNode) -> Optional[str]:
        """Why the FP8 place `node` (a dtype's name, an import) is data or metadata rather than FP8
        compute (fp8data.py: a dtype's `.itemsize`, a supported-dtypes listing, tensors kept on
        the CPU, an import used only for type checks); None when it may compute."""
        if self.fp8_data is None:
            self.fp8_data = fp8data.FileData(self.m._ast(), self.m.relpath, self.m.file_text())
        line, column = self.m.position(node)
        if isinstance(node, (cst.Import, cst.ImportFrom)):
            return self.fp8_data.reason("Import", line, column, unguarded=id(node) in self.unguarded)
        kind = "Name" if isinstance(node, cst.Name) else "Attribute"
        return self.fp8_data.reason(kind, line, column, dotted_name(node) or "")

    def _default_cast(self, node: cst.CSTNode) -> bool:
        """Whether `node` is the default of a parameter that its function casts to (`def quant(x,
        dtype=torch.float8_e4m3fn): ... torch.empty_like(x, dtype=dtype)`, `.to(dtype)`): FP8
        compute by default. Read from the whole file's ast (the cast has no trigger word, so it
        is not in the hot slices the sweep visits)."""
        param = self.fp8_defaults.get(id(node))
        if param is None:
            return False
        if self.default_casts is None:
            self.default_casts = set()
            tree = self.m._ast()
            for fn in astcache.walk(tree) if tree is not None else ():
                if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    continue
                if any((astcache.dotted(d.func if isinstance(d, ast.Call) else d) or "").rsplit(".", 1)[-1]
                       in _LOWERINGS for d in fn.decorator_list):
                    # `@register_lowering(op) def quantize_fp8(..., float8_dtype=torch.float8_e4m3fn)`:
                    # an Inductor lowering builds IR nodes (`Pointwise.create(dtype=float8_dtype)`),
                    # it computes nothing itself; the op it lowers is reported where it is computed
                    continue
                from .fp8cpu import meta_registration

                if meta_registration(fn) is not None:
                    continue  # (a meta/fake registration makes shapes, no data: fp8cpu.meta_reason)
                arguments = [*fn.args.posonlyargs, *fn.args.args, *fn.args.kwonlyargs]
                defaults = dict(zip([a.arg for a in [*fn.args.posonlyargs, *fn.args.args]][::-1], fn.args.defaults[::-1]))
                defaults.update((a.arg, d) for a, d in zip(fn.args.kwonlyargs, fn.args.kw_defaults) if d is not None)
                named = {name: [b for b in ([d.body, d.orelse] if isinstance(d, ast.IfExp) else [d])
                                if isinstance(b, ast.Attribute) and b.attr.startswith("float8_")]
                         for name, d in defaults.items()}
                named = {name: branches for name, branches in named.items() if branches}
                if not named or not arguments:
                    continue
                for call in ast.walk(fn):
                    if not isinstance(call, ast.Call):
                        continue
                    held = [k.value for k in call.keywords if k.arg == "dtype"]
                    if isinstance(call.func, ast.Attribute) and call.func.attr in ("to", "view"):
                        held += call.args[:1]
                    for value in held:
                        if isinstance(value, ast.Name) and value.id in named:
                            self.default_casts.update((b.lineno, value.id) for b in named[value.id])
        return (self.m.position(node)[0], param) in self.default_casts

    def _report_fp8(self) -> None:
        """NPU913 at the places that compute in FP8 (the first one anchors the file's finding).
        ROCm's fnuz formats count only in a file with no other FP8 compute (a helper that converts
        e4m3fn to e4m3fnuz is taken on ROCm only). A file that only names FP8 dtypes computes
        nothing in FP8: its places are listed for review, as information."""
        reported = any(f.code == "NPU913" and f.severity != "info" for f in self.m.findings)
        # a cast to a dtype held by a variable named for FP8 (`x.to(float8_dtype)`) is FP8 compute
        # in a file that names FP8 dtypes
        places = self.fp8["compute"] or self.fp8["rocm"] or (self.fp8["variable"] if self.fp8["named"] else [])
        for node, what in places:
            self.m.report("NPU913", node, what=what)
        if places or reported:
            return  # the names are the file's FP8 compute's: its finding stands for them
        for node, what in self.fp8["named"]:
            count = len(self.m.findings)
            self.m.report("NPU913", node, what=what)
            if len(self.m.findings) > count and self.m.findings[-1].code == "NPU913":
                self.m.findings[-1] = replace(
                    self.m.findings[-1], severity="info",
                    message=self.m.findings[-1].message + " (names FP8 dtypes only; no FP8 compute found in this file)")

    def _mark_fp8_named(self, node: Optional[cst.CSTNode]) -> None:
        """`node` (or each element of a tuple, list or set `node`, or each branch of a conditional
        `node`) only names an FP8 dtype."""
        if node is None:
            return
        if isinstance(node, cst.IfExp):
            # `torch.float8_e4m3fnuz if is_MI300() else torch.float8_e4m3fn` as a default or a
            # table's value: each branch names a dtype, as the plain name would
            self._mark_fp8_named(node.body)
            self._mark_fp8_named(node.orelse)
            return
        items = [e.value for e in node.elements] if isinstance(node, (cst.Tuple, cst.List, cst.Set)) else [node]
        for item in items:
            if isinstance(item, (cst.Name, cst.Attribute)) and self._name_code(item) == "NPU913" \
                    and "float8_" in (self.m.qualname(item) or dotted_name(item) or ""):
                self.fp8_named.add(id(item))

    def visit_Dict(self, node: cst.Dict) -> bool:
        """`{torch.float8_e4m3fn: tl.float8e4nv}`: a dtype map's keys name dtypes; so do the
        values of a table keyed by literals (`{24: torch.float8_e4m3fn}`: an enum's dtypes)."""
        literal_keys = all(isinstance(e, cst.DictElement) and isinstance(e.key, (cst.Integer, cst.SimpleString))
                           for e in node.elements)
        # a dtype -> dtype map (`{torch.qint8: torch.int8, torch.float8_e4m3fn: torch.float8_e4m3fn}`,
        # torchao's to_underlying_dtype): its values name dtypes as its keys do
        dtype_map = bool(node.elements) and all(
            isinstance(e, cst.DictElement) and _DTYPE_NAME.match(dotted_name(e.key) or "")
            and _DTYPE_NAME.match(dotted_name(e.value) or "") for e in node.elements)
        for element in node.elements:
            if isinstance(element, cst.DictElement):
                self._mark_fp8_named(element.key)
                if literal_keys or dtype_map:
                    self._mark_fp8_named(element.value)
        self._label_keys(node)
        return True

    # ------------------------------------------------------------------ labels, not devices
    def _label_keys(self, node: cst.Dict) -> None:
        """`"cuda"` keys of a table of platforms. With a platform label (`{"cuda": [...], "hip":
        [...]}`) the keys are labels: not reported. With torch device types only (`{"cpu": 0,
        "cuda": 0}`, per-device values) not reported when the file handles "npu" itself (an "npu"
        key, or `"npu"` mapped to "cuda" elsewhere in it), else reported with what to do: a lookup
        by an NPU device's type finds no entry. Keys that are all `"cuda:N"` (a map keyed by device string,
        looked up as `"cuda:" + str(index)`): one finding for the table, as information."""
        keys = [(e.key, literal_value(e.key.value)) for e in node.elements
                if isinstance(e, cst.DictElement) and isinstance(e.key, cst.SimpleString)]
        values = {v for _, v in keys if isinstance(v, str)}
        cuda = [k for k, v in keys if v == "cuda"]
        labels, device_types, *_ = _label_table()
        # (inside a platform-aware scope the sweep lists it as NPU991, as it does any leftover there)
        cuda = [k for k in cuda if self.m.platform_scope(k) is None]
        echoes = [e for e in node.elements if isinstance(e, cst.DictElement) and isinstance(e.key, cst.SimpleString)
                  and isinstance(e.value, cst.Name) and literal_value(e.key.value) == e.value.value]
        if cuda and len(echoes) >= 3 and any(literal_value(e.key.value) == "cuda" for e in echoes):
            # a record of settings, each key echoing the argument of its name (`{"cpu": cpu, "cuda":
            # cuda, "profile_memory": profile_memory}`: torchtune's profiler config): "cuda" names the
            # boolean `cuda`, a label no device type looks up (round-16 audit AQ#4)
            self.gates.update(id(e.key) for e in echoes if literal_value(e.key.value) == "cuda")
        elif cuda and values & labels:
            self.gates.update(id(k) for k in cuda)
        elif cuda and values & device_types:
            if "npu" in values or re.search(r"""["']npu["']""", self.m.file_text()):
                self.gates.update(id(k) for k in cuda)
            elif labelflow.kept_label_line(self) is not None:
                # the device list gets "cuda" only behind a check kept meaning CUDA (labelflow.py)
                for key in cuda:
                    self.label_info[id(key)] = labelflow.KEPT_LABEL_KEY.format(line=labelflow.kept_label_line(self))
            else:
                for key in cuda:  # (a warning still: looked up by an NPU tensor's type, it finds nothing)
                    self.label_hint[id(key)] = ("a key of a table of per-device values: add an \"npu\" "
                                                "entry where it is looked up by a tensor's device type")
        elif len(keys) >= 2 and all(isinstance(v, str) and re.fullmatch(r"cuda:\d+", v) for _, v in keys):
            self.label_info[id(keys[0][0])] = (f"the first of {len(keys)} keys \"cuda:N\" of a table keyed by "
                                               "device string: a label unless looked up by an NPU device's name")
            self.gates.update(id(k) for k, _ in keys[1:])

    def _label_elements(self, node: cst.CSTNode) -> bool:
        """`("auto", "cuda", "gpu")`, `["cpu", "cuda", "hip"]`: "cuda" among platform labels."""
        strings = [e.value for e in node.elements if isinstance(e.value, cst.SimpleString)]
        values = {literal_value(s.value) for s in strings}
        if "cuda" in values and values & _label_table()[0]:
            self.gates.update(id(s) for s in strings if literal_value(s.value) == "cuda")
        return True

    visit_Tuple = visit_List = visit_Set = _label_elements

    def visit_ClassDef(self, node: cst.ClassDef) -> bool:
        """`SUPPORTED_DEVICES = {"cuda"}` in a class body: the op declares the devices it supports
        and its dispatcher leaves it out on an NPU host; "npu" added there would be a false claim."""
        names = _capability_names()
        body = node.body.body if isinstance(node.body, cst.IndentedBlock) else ()
        for line in body:
            for small in line.body if isinstance(line, cst.SimpleStatementLine) else ():
                if isinstance(small, cst.Assign):
                    targets = [t.target for t in small.targets]
                elif isinstance(small, cst.AnnAssign) and small.value is not None:
                    targets = [small.target]
                else:
                    continue
                if any(isinstance(t, cst.Name) and t.value in names for t in targets) \
                        and isinstance(small.value, (cst.Tuple, cst.List, cst.Set, cst.SimpleString)):
                    self._gate_strings(small.value)
                if not self.functions and _config_class(node):
                    # `e4m3_dtype = torch.float8_e4m3fn` in a config class body: a default
                    self._mark_fp8_named(small.value)
        return True

    def visit_Subscript(self, node: cst.Subscript) -> bool:
        """`DEVICE_BACKENDS["cuda"]` of a module-level table keyed by platform (a sibling key
        "rocm", "hip", ...): a lookup by label, as the table's own "cuda" key is."""
        if isinstance(node.value, cst.Name) and len(node.slice) == 1 and isinstance(node.slice[0].slice, cst.Index):
            key = node.slice[0].slice.value
            if isinstance(key, cst.SimpleString) and literal_value(key.value) == "cuda":
                if self.label_tables is None:
                    self.label_tables = _label_tables(self.m._ast())
                if node.value.value in self.label_tables:
                    self.gates.add(id(key))
        return True

    def _accelerator_name(self, node: cst.CSTNode) -> bool:
        """A variable or attribute named for a framework's accelerator (`self._accelerator_flag`)."""
        name = dotted_name(node) if isinstance(node, (cst.Name, cst.Attribute)) else None
        return bool(name) and bool(_label_table()[2].search(name.rsplit(".", 1)[-1]))

    def _gate_strings(self, node: cst.CSTNode) -> None:
        items = node.elements if isinstance(node, (cst.Tuple, cst.List, cst.Set)) else [node]
        for item in items:
            value = item.value if isinstance(item, cst.BaseElement) else item
            if isinstance(value, cst.SimpleString):
                self.gates.add(id(value))

    def visit_Assign(self, node: cst.Assign) -> bool:
        """`SUPPORTED = (torch.uint8, torch.float8_e8m0fnu)`: an allow-list names dtypes (a
        single dtype assigned is not: it may be what the file casts to)."""
        if isinstance(node.value, (cst.Tuple, cst.List, cst.Set)) and all(
                isinstance(t.target, (cst.Name, cst.Attribute)) for t in node.targets):
            self._mark_fp8_named(node.value)  # (not `fp8, device = torch.float8_e4m3fn, x.device`)
        if isinstance(node.value, cst.SimpleString) and any(self._accelerator_name(t.target) for t in node.targets):
            self.gates.add(id(node.value))  # `self._accelerator_flag = "cuda"`: an accelerator's name
        return True

    def visit_Return(self, node: cst.Return) -> bool:
        """`return "cuda"` from an accelerator's `name()` is its registry name; from a function that
        also returns a platform label (`"tpu"`, `"auto"`) it is one of a registry's names. Other
        `return "cuda"` are reported when their function has been read (leave_FunctionDef)."""
        if isinstance(node.value, (cst.Tuple, cst.List, cst.Set)):
            self._mark_fp8_named(node.value)
        value = literal_value(node.value.value) if isinstance(node.value, cst.SimpleString) else None
        if not self.functions or not isinstance(value, str):
            return True
        function = self.functions[-1]
        labels, _types, _accelerator, name_methods, _switches = _label_table()
        if value in labels:
            self.label_returns.add(id(function))
        elif value == "cuda" and not {id(node.value), id(node)} & (self.gates | self.m.claimed | self.m.cold):
            if function.name.value in name_methods or _accelerator.search(function.name.value):
                self.gates.add(id(node.value))
            elif not self.prose and not self.m.in_platform_scope(node.value):
                self.returns.setdefault(id(function), []).append(node.value)
                self.gates.add(id(node.value))
        return True

    def leave_FunctionDef(self, original_node: cst.FunctionDef) -> None:
        if self.functions and self.functions[-1] is original_node:
            self.functions.pop()
        pending = self.returns.pop(id(original_node), [])
        if pending and (id(original_node) in self.label_returns or self._returns_label(original_node)):
            return  # `return "cuda"` next to `return "tpu"`: a registry of accelerator names
        for string in pending:
            self._flag(string, f"string {_short(string.value)}")

    def _returns_label(self, node: cst.FunctionDef) -> bool:
        """Whether the function returns a platform label somewhere, read from the whole file's
        ast (a statement without trigger words is not in the hot slices the sweep visits)."""
        if self.returned is None:
            self.returned = {}
            tree = self.m._ast()
            for fn in astcache.walk(tree) if tree is not None else ():
                if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    values = {r.value.value for r in ast.walk(fn) if isinstance(r, ast.Return)
                              and isinstance(r.value, ast.Constant) and isinstance(r.value.value, str)}
                    self.returned.setdefault(fn.lineno, set()).update(values)
        line = self.m.position(node.name)[0]  # (the node's own position counts its leading lines)
        return bool(self.returned.get(line, set()) & _label_table()[0])

    def _in_lowering(self) -> bool:
        """Inside a function registered as a compiler lowering (`@register_lowering(op)`): IR
        nodes are built there (`Pointwise.create(dtype=float8_dtype)`), no tensor is computed;
        or as a meta/fake implementation, which computes shapes only."""
        from .fp8cpu import is_meta_decorator

        names = [dotted_name(d.decorator.func if isinstance(d.decorator, cst.Call) else d.decorator) or ""
                 for f in self.functions for d in f.decorators]
        # (and a meta/fake registration: it makes shapes, no data; fp8cpu.meta_reason)
        return any(n.rsplit(".", 1)[-1] in _LOWERINGS or is_meta_decorator(n) for n in names)

    def _fp8_compared_only(self, node: cst.Call) -> None:
        """`gemm_time(m, k, torch.float8_e4m3fn)` where the file's own `gemm_time` only compares
        that parameter (`dtype is torch.bfloat16`, `dtype in (torch.float8_e4m3fn, ...)`): the
        dtype is a key of an analytic model, no tensor is made in FP8 (notcompute.py)."""
        if self.compared_only is None:
            from .notcompute import compared_only_parameters

            self.compared_only = compared_only_parameters(self.m._ast())
        function = node.func.value
        positional = self.compared_only.get(function)
        if positional is None:
            return
        index = 0
        for arg in node.args:
            if arg.star:
                return  # (`*args`: the positions are not known past it)
            if arg.keyword is None:
                if index < len(positional) and positional[index] is not None:
                    self._mark_fp8_named(arg.value)
                index += 1
            elif f"{function}:{arg.keyword.value}" in self.compared_only:
                self._mark_fp8_named(arg.value)

    def _fp8_naming_call(self, node: cst.Call) -> None:
        """`torch.finfo(torch.float8_e4m3fn)` asks about a dtype; `ScaleDesc(torch.float8_e8m0fnu,
        ...)` at module or class level is a descriptor constant (not a float8 tensor's
        construction: `Float8Tensor(...)`)."""
        name = dotted_name(node.func) or ""
        last = name.rsplit(".", 1)[-1]
        if isinstance(node.func, cst.Name) and "float8_" in self.m.source_map.original_text_of(node):
            self._fp8_compared_only(node)
        for arg in node.args:
            keyword = arg.keyword.value if arg.keyword is not None else None
            cast = keyword == "dtype" or (keyword is None and last in ("to", "view") and isinstance(node.func, cst.Attribute))
            held = dotted_name(arg.value) if cast and isinstance(arg.value, (cst.Name, cst.Attribute)) else None
            if held and _FP8_VARIABLE.search(held.rsplit(".", 1)[-1]) and self._name_code(arg.value) != "NPU913" \
                    and not self._in_lowering():
                self.fp8["variable"].append((arg.value, f"`{_short(self.m.source_map.original_text_of(node))}`"))
        qual = self.m.qualname(node.func) or name
        descriptor = (not self.functions and last[:1].isupper() and any(c.islower() for c in last)
                      and not re.search(r"tensor|float8|fp8|quantiz", last, re.IGNORECASE))
        if qual in ("torch.finfo", "torch.iinfo") or descriptor:
            for arg in node.args:
                self._mark_fp8_named(arg.value)
        elif last in _FACTORIES and any(a.keyword is not None and a.keyword.value == "dtype"
                                        and "float8_" in (dotted_name(a.value) or "") for a in node.args) \
                and self._cpu_test_tensor(node):
            # `torch.empty((n, k), dtype=torch.float8_e4m3fn)` in a test, no device: a CPU tensor
            # (the kernel under test mocked, a loader's shapes), no accelerator FP8 compute
            for arg in node.args:
                if arg.keyword is not None and arg.keyword.value == "dtype":
                    self._mark_fp8_named(arg.value)
        elif isinstance(node.func, cst.Attribute) and node.func.attr.value == "view" and len(node.args) == 1:
            # `uint8_data.view(torch.float8_e4m3fn)`: bytes read as FP8 (weight loading), no cast
            self._mark_fp8_named(node.args[0].value)
        elif not self.functions and not re.search(r"tensor|float8|fp8|quantiz|^(to|empty|zeros|ones|full|rand\w*)$",
                                                  last, re.IGNORECASE):
            # `qfloat8_e4m3fn = qfloat(torch.float8_e4m3fn)` at module level: a descriptor constant
            for arg in node.args:
                if arg.keyword is None:
                    self._mark_fp8_named(arg.value)

    def _cpu_test_tensor(self, node: cst.Call) -> bool:
        """A tensor factory call in a test file with no device (no `device=`, no `**kwargs`, not
        followed by `.cuda()`/`.to(` on its line), in a file that sets no default device."""
        if not _TEST_PATH.search(self.m.relpath):
            return False
        if any(a.star == "**" or (a.keyword is not None and a.keyword.value == "device") for a in node.args):
            return False
        text = self.m.file_text()
        if re.search(r"set_default_device|with\s+torch\.device\(|torch\.cuda\.set_device", text):
            return False
        end = self.m.position(node)[0]
        lines = text.splitlines()
        code = self.m.source_map.original_text_of(node)
        last_line = lines[end - 1 + code.count("\n")] if end - 1 + code.count("\n") < len(lines) else ""
        after = last_line[last_line.rfind(code.splitlines()[-1]) + len(code.splitlines()[-1]):] if code else last_line
        return not re.match(r"\s*\.(cuda|to|npu)\(", after)

    def on_visit(self, node: cst.CSTNode) -> bool:
        if type(node) in INERT or id(node) in self.m.claimed or id(node) in self.m.cold:
            return False
        labels.mark(self, node)  # labels, not devices: gated, or listed as information (labels.py)
        labelflow.mark(self, node)  # labels by where they flow (labelflow.py)
        labels5.mark(self, node)  # references, version probes, choices, storage tags (labels5.py)
        labels6.mark(self, node)  # implementation names, direction labels, fixtures skipping "cuda" (labels6.py)
        labels8.mark(self, node)  # "cuda" compared with a command-line option that names choices (labels8.py)
        labels9.mark(self, node)  # "cuda" among Tensor method names beside "to" (labels9.py)
        labels34.mark(self, node)  # a word of a spelling table, a choice of the message shown (labels34.py)
        gates15.mark(self, node)  # "cuda" tests that only record why an op is unsupported (gates15.py)
        cpufakes26.mark(self, node)  # the "cuda" pair of a test's CPU fake of torch (cpufakes26.py)
        if id(node) in self.gates:
            return False
        return super().on_visit(node)

    def on_leave(self, original_node: cst.CSTNode) -> None:
        if type(original_node) not in INERT:  # no leave_ method for those: skip the lookup
            super().on_leave(original_node)

    def _own(self, module: str) -> bool:
        """`module` belongs to the project being migrated (vLLM's `import vllm.utils`, DeepSpeed's
        `from deepspeed.ops import ...`): the project itself, not a dependency on an ecosystem. Its
        CUDA-only code is reported where it is (kernels, extensions, .cu files), not at each import."""
        return module.split(".", 1)[0] in self.m.first_party or _module_matches(module, _portable())

    def _code(self, module: str, *specific: str) -> str:
        """The code of a CUDA-only module: `specific` names (`m.n` of `from m import n`) first."""
        code = "NPU990"
        for name in (*specific, module):
            # the longest entry that matches: `vllm._custom_ops` (NPU911) before `vllm` (NPU916)
            matches = [m for m in self.module_codes if _module_matches(name, (m,))]
            code = self.module_codes[max(matches, key=len)] if matches else "NPU990"
            if code != "NPU990":
                break
        return code

    def _flag(self, node: cst.CSTNode, what: str, module: str = "", *specific: str) -> bool:
        """Report a leftover under its module's code (NPU990 when it has none)."""
        self.m.report(self._code(module, *specific), node, what=what)
        return False

    def _flag_info(self, node: cst.CSTNode, what: str, reason: str) -> None:
        """An NPU990 at information severity, with the reason in its message."""
        count = len(self.m.findings)
        self.m.report("NPU990", node, what=what)
        if len(self.m.findings) > count and self.m.findings[-1].code == "NPU990":
            found = self.m.findings[-1]
            self.m.findings[-1] = replace(found, severity="info", message=f"{found.message} ({reason})")

    def _flag_import(self, node: cst.CSTNode, what: str, module: str, *specific: str) -> bool:
        """An import of a CUDA-only module. Unguarded at module level it is also NPU934, unless the
        import has an ecosystem code of its own (Triton, apex, bitsandbytes, ...): then that one
        finding says it is unguarded, rather than two findings on one line."""
        code = self._code(module, *specific)
        if code == "NPU913" and self._fp8_data(node) is not None:
            # `from torchao.float8... import Float8Linear` only for `isinstance`: no FP8 compute
            self.fp8["named"].append((node, f"{what} ({self._fp8_data(node)})"))
            return False
        if self._unguarded(node, module):
            if code == "NPU990":
                self.m.report("NPU934", node, name=module.split(".", 1)[0])
            else:
                what += _UNGUARDED
        self.m.report(code, node, what=what)
        return False

    def _unguarded(self, node: cst.CSTNode, module: str) -> bool:
        """A CUDA-only package (or compiled extension) imported at module level outside try/except
        ImportError: the module fails to import where the package is not installed."""
        return id(node) in self.unguarded and (_module_matches(module, self.guard_modules) or self._extension(module))

    def _extension(self, module: str) -> bool:
        parts = module.split(".")
        if module.startswith("."):
            return _is_extension([p for p in parts if p])
        return parts[0] not in self.extension_exempt and _is_extension(parts)

    def visit_Import(self, node: cst.Import) -> bool:
        for alias in node.names:
            name = dotted_name(alias.name) or ""
            if _module_matches(name, ("triton",)):
                local = alias.asname.name if alias.asname is not None else None
                self.triton_names.add(local.value if isinstance(local, cst.Name) else "triton")
        for alias in node.names:
            name = dotted_name(alias.name) or ""
            if _module_matches(name, self.modules) and not self._own(name):
                return self._flag_import(node, f"import of `{name}`", name)
            if self._extension(name):
                return self._flag_extension(node, name)
        return False

    def visit_ImportFrom(self, node: cst.ImportFrom) -> bool:
        names = [] if isinstance(node.names, cst.ImportStar) else list(node.names)
        module = dotted_name(node.module) if node.module is not None else ""
        if node.relative:  # the project's own modules: only compiled extensions are CUDA-only
            base = "." * len(node.relative) + (module or "")
            sep = "." if module else ""
            # a member named like a function is not an extension (colossalai's own `from .utils
            # import get_temp_total_chunk_on_cuda`); `from .kernels import selective_scan_cuda` is
            members = [f"{base}{sep}{dotted_name(a.name)}" for a in names
                       if not _PREDICATE.match(dotted_name(a.name) or "") and not _VERB.match(dotted_name(a.name) or "")]
            for full in ([base] if module else []) + members:
                if self._extension(full):
                    return self._flag_extension(node, full)
            return False
        module = module or ""
        fulls = [f"{module}.{dotted_name(alias.name)}" for alias in names]
        if _module_matches(module, ("triton",)):
            for alias in names:
                local = alias.asname.name if alias.asname is not None else alias.name
                if isinstance(local, cst.Name):
                    self.triton_names.add(local.value)
        if _module_matches(module, self.modules) and not self._own(module) and not all(map(self._own, fulls)):
            return self._flag_import(node, f"import from `{module}`", module, *fulls)
        for full in fulls:
            if _module_matches(full, self.modules) and not self._own(full):
                return self._flag_import(node, f"import of `{full}`", full)
        members = [f for f in fulls if self._member_may_be_extension(module, f.rsplit(".", 1)[1])]
        for full in [module, *members]:
            if self._extension(full):
                return self._flag_extension(node, full)
        return False

    def _member_may_be_extension(self, module: str, member: str) -> bool:
        """Whether `from module import member` may import a compiled extension by its name: not a
        predicate (`is_cuda`, `has_cuda`, `use_cuda`: functions), and from the project's own
        modules only `_C`/`_CUDA` (sglang's `from sglang.srt.utils import is_cuda`, torchao's own
        `..._cuda` functions; the project's CUDA sources are reported as files, NPU912)."""
        if _PREDICATE.match(member):
            return False
        return not self._own(module) or member in ("_C", "_CUDA")

    def _flag_extension(self, node: cst.CSTNode, module: str) -> bool:
        """`import pkg._C`, `from . import _CUDA`: a compiled extension, built for CUDA (NPU911)."""
        what = f"import of compiled extension module `{module}`"
        self.m.report("NPU911", node, what=what + (_UNGUARDED if self._unguarded(node, module) else ""))
        return False

    def _name_code(self, node: cst.CSTNode) -> str | None:
        """A code of its own for fp8 dtypes, torch._scaled_mm, CUDAExtension, ..."""
        qual = self.m.qualname(node) or ""
        bare = dotted_name(node) or ""
        for key, code in self.name_codes.items():
            if qual.startswith(key) or bare == key or bare.startswith(key + "."):
                # a project's own ecosystem name (DeepSpeed's `deepspeed.ops...`) is the project
                own = ("." in key and self._own(key)) or _module_matches(qual or bare, _portable())
                return None if own else code
        return None

    def _triton_decorator(self, node: cst.Decorator) -> Optional[str]:
        """The decorator's name when it makes a Triton kernel (`@triton.jit`, `@triton.autotune`)."""
        target = node.decorator.func if isinstance(node.decorator, cst.Call) else node.decorator
        name = dotted_name(target) or ""
        head = name.split(".")[0]
        if head not in self.triton_names and labels8.local_binding(self.functions, head):
            return None  # (`triton = TritonPlaceholder()` in the enclosing function: a local object, labels8.py)
        if head == "triton" or head in self.triton_names or (self.m.qualname(target) or "").startswith("triton"):
            return name
        return None

    def visit_FunctionDef(self, node: cst.FunctionDef) -> bool:
        """A Triton kernel is one finding (NPU910): the CUDA names in its body (`tl.extra.cuda`,
        `libdevice`) are part of the kernel to port, not leftovers of their own."""
        for decorator in node.decorators:
            name = self._triton_decorator(decorator)
            if name is not None:
                self.m.report("NPU910", decorator.decorator, what=f"`@{name}` kernel")
                return False
        self.functions.append(node)
        return True

    # ------------------------------------------------------------------ tests that only ask
    def visit_Comparison(self, node: cst.Comparison) -> bool:
        """Tests that ask rather than use: an fp8 dtype compared (`x.dtype == torch.float8_e4m3fn`,
        `dtype in (torch.float8_e5m2, ...)`: the gate NPU913's guidance asks to keep, false on an
        NPU host that has no fp8 tensors), and `torch.version.cuda is None` / `is not None`
        (None on an NPU or CPU build of torch, so the test already takes the non-CUDA path)."""
        operands = [node.left, *(c.comparator for c in node.comparisons)]
        for operand in operands:
            items = operand.elements if isinstance(operand, (cst.Tuple, cst.List, cst.Set)) else [operand]
            for item in items:
                value = item.value if isinstance(item, cst.BaseElement) else item
                if isinstance(value, (cst.Name, cst.Attribute)) and self._name_code(value) == "NPU913":
                    self.gates.add(id(value))
        if any(self._accelerator_name(o) for o in operands):
            # `_accelerator_flag in ("auto", "cuda", "gpu")`: a framework's accelerator name (the
            # migration keeps its CUDA accelerator serving the NPU), not a torch device
            for operand in operands:
                self._gate_strings(operand)
        if any(asks_platform_layer(o) for o in operands):
            # `get_accelerator().device_name() == "cuda"`, `current_platform.device_type == "cuda"`:
            # the project's own platform layer answers "npu" on an NPU host, so the comparison is
            # already a deliberate CUDA-only decision, not a device left behind
            self.gates.update(id(o) for o in operands if isinstance(o, cst.SimpleString))
        if all(isinstance(c.operator, (cst.Is, cst.IsNot)) for c in node.comparisons) and any(
            isinstance(o, cst.Name) and o.value == "None" for o in operands
        ):
            self.gates.update(id(o) for o in operands if _is_cuda_version(o))
        return True

    def visit_If(self, node: cst.If) -> bool:
        """`if torch.version.cuda:` (and `not`, `and`/`or` operands): a test, as above."""
        self._truth_test(node.test)
        return True

    def visit_IfExp(self, node: cst.IfExp) -> bool:
        self._truth_test(node.test)
        # `["cuda", "cpu"] if not is_rocm else ["hip", "cpu"]`: one list of platform labels
        # chosen by platform, as `["cpu", "cuda", "hip"]` is
        sides = (node.body, node.orelse)
        if all(isinstance(side, (cst.Tuple, cst.List, cst.Set)) for side in sides):
            values = {literal_value(e.value.value) for side in sides for e in side.elements
                      if isinstance(e.value, cst.SimpleString)}
            if "cuda" in values and values & _label_table()[0]:
                for side in sides:
                    self.gates.update(id(e.value) for e in side.elements if isinstance(e.value, cst.SimpleString)
                                      and literal_value(e.value.value) == "cuda")
        return True

    def visit_While(self, node: cst.While) -> bool:
        self._truth_test(node.test)
        return True

    def visit_BooleanOperation(self, node: cst.BooleanOperation) -> bool:
        """`IS_CUDA = torch.cuda.is_available() and torch.version.cuda`: an operand of `and`/`or`
        is tested for truth, which is False on an NPU build, as for an `if`."""
        self._truth_test(node)
        return True

    def _truth_test(self, test: cst.BaseExpression) -> None:
        while isinstance(test, cst.UnaryOperation) and isinstance(test.operator, cst.Not):
            test = test.expression
        if isinstance(test, cst.BooleanOperation):
            self._truth_test(test.left)
            self._truth_test(test.right)
        elif _is_cuda_version(test):
            self.gates.add(id(test))

    def visit_Attribute(self, node: cst.Attribute) -> bool:
        if (dotted_name(node) or "").split(".", 1)[0] == self.m.shim:
            return False  # `npu_compat.nvtx.range_push`: the shim's own names, written by us
        if _module_matches(self.m.qualname(node) or dotted_name(node) or "", _portable()):
            return False  # `deepspeed.ops.adam.FusedAdam`: runs on an NPU host (nor is its prefix a leftover)
        code = self._name_code(node)
        if code == "NPU913":
            self._fp8(node, f"`{_short(self.m.source_map.original_text_of(node))}`")
            return False
        if code is not None:
            self.m.report(code, node, what=f"`{_short(self.m.source_map.original_text_of(node))}`")
            return False
        current: cst.CSTNode = node
        while isinstance(current, cst.Attribute):
            if current.attr.value in self.attributes:
                code = self.m.source_map.original_text_of(node)
                if id(node) in self.label_info:  # (`torch.version.cuda` only shown: labelflow.py)
                    self._flag_info(node, f"`{_short(code)}`", self.label_info[id(node)])
                    return False
                return self._flag(node, f"`{_short(code)}`")
            current = current.value
        if isinstance(current, cst.Name) and self._cuda_name(current):
            return self._flag(node, f"`{_short(self.m.source_map.original_text_of(node))}`")
        node.value.visit(self)  # `x.attr`: the attribute's own name is not a reference
        return False

    def _cuda_name(self, node: cst.Name) -> bool:
        qual = self.m.aliases.get(node.value)
        if qual is not None and _module_matches(qual, self.modules):
            return not self._own(qual)
        return node.value in self.names

    def visit_Name(self, node: cst.Name) -> bool:
        code = self._name_code(node)
        if code == "NPU913":
            self._fp8(node, f"`{node.value}`")
            return False
        if code is not None:
            self.m.report(code, node, what=f"`{node.value}`")
            return False
        if self._cuda_name(node):
            return self._flag(node, f"`{node.value}`")
        return False

    def visit_Annotation(self, node: cst.Annotation) -> bool:
        """A type annotation is for type checkers: the strings of `Literal["nccl", "ipc"]` name
        what a value may be (a registry's keys, device labels), they hold no device at run time.
        The rest of an annotation is swept as usual (`torch.cuda.Stream`)."""
        stack = [node.annotation]
        while stack:
            current = stack.pop()
            if isinstance(current, cst.SimpleString):
                self.annotation_strings.add(id(current))
            stack.extend(current.children)
        return True

    def visit_SimpleString(self, node: cst.SimpleString) -> bool:
        if id(node) in self.annotation_strings:
            return False
        value = literal_value(node.value)
        # a device, backend or variable name holds no whitespace, and prose (a docstring, a log
        # or exception message) is text for people: neither is a leftover
        if isinstance(value, str) and not self.prose and not _WHITESPACE.search(value) and self.strings.fullmatch(value):
            reason = self.label_info.get(id(node))
            if reason is None and _label_table()[4].fullmatch(value):
                reason = "a CUDA runtime switch with no effect on an NPU host"
            if reason is not None:
                self._flag_info(node, f"string {_short(node.value)}", reason)
            elif id(node) in self.label_hint:
                self._flag(node, f"string {_short(node.value)} ({self.label_hint[id(node)]})")
            else:
                self._flag(node, f"string {_short(node.value)}")
        elif isinstance(value, str) and not self.prose:
            self._command_string(node, [value])
        return False

    def visit_FormattedString(self, node: cst.FormattedString) -> bool:
        first = node.parts[0] if node.parts else None
        if isinstance(first, cst.FormattedStringText) and re.match(r"cuda(:|$)", first.value):
            self._flag(node, f"f-string `{_short(self.m.source_map.original_text_of(node))}`")
            return False
        if not self.prose:
            self._command_string(node, [p.value for p in node.parts if isinstance(p, cst.FormattedStringText)])
        return True  # the expressions inside are swept as usual

    # ------------------------------------------------------------------ commands and prose
    def _command_string(self, node: cst.CSTNode, texts: list[str]) -> None:
        """`NAME=value` of a CUDA environment variable inside a string: a command line or an
        environment assignment built as text (`"CUDA_VISIBLE_DEVICES=0 python train.py"`,
        `f"CUDA_VISIBLE_DEVICES={rank}"`), or a test's expected value for one.

        Reported, not rewritten: the text may be compared with a string built elsewhere (another
        file, a shell script, a test's expectation) that a rewrite would not change with it, so
        only the user can change both ends together. One finding per string: NPU604 for a name
        with an Ascend counterpart, else NPU602 for an NCCL variable, else NPU990.
        """
        assignment = _command_table()[0]
        names = [m.group(1) for text in texts if "=" in text for m in assignment.finditer(text)]
        if not names:
            return
        renamed, nccl = _env_tables()
        shown = _short(self.m.source_map.original_text_of(node))
        name = next((n for n in names if n in renamed), None)
        if name is not None:
            ascend = catalogue.env_table()["rename"][name]
            self.m.report("NPU604", node, name=name, ascend=ascend)
            return
        name = next((n for n in names if nccl.match(n)), None)
        if name is not None:
            self.m.report("NPU602", node, name=name)
            return
        name = next((n for n in names if self.strings.fullmatch(n)), None)
        if name is not None:
            self._flag(node, f"`{name}=` set in {shown}")

    def _pop_prose(self, node: cst.CSTNode) -> None:
        if self.prose and self.prose[-1] == id(node):
            self.prose.pop()

    def visit_Expr(self, node: cst.Expr) -> bool:
        """A string as a statement (a docstring) is prose: `NAME=` there is not a command."""
        if isinstance(node.value, (cst.SimpleString, cst.ConcatenatedString, cst.FormattedString)):
            self.prose.append(id(node))
        return True

    def leave_Expr(self, original_node: cst.Expr) -> None:
        self._pop_prose(original_node)

    def visit_Assert(self, node: cst.Assert) -> bool:
        node.test.visit(self)
        if node.msg is not None:  # the failure message is prose
            self.prose.append(id(node))
            node.msg.visit(self)
            self._pop_prose(node)
        return False

    def visit_Call(self, node: cst.Call) -> bool:
        """Profiler keywords that ask for CUDA (NPU935); log, print, warning and exception
        messages are prose (their strings are not commands)."""
        self._fp8_naming_call(node)
        calls, cuda_keywords, device_keywords = _profiler_table()
        if self.m.qualname(node.func) in calls:
            for arg in node.args:
                keyword = arg.keyword.value if arg.keyword is not None else None
                value = arg.value
                if keyword in cuda_keywords:
                    off = isinstance(value, cst.Name) and value.value in ("False", "None")
                    if not off:
                        self.m.report("NPU935", arg, what=f"`{_short(self.m.source_map.original_text_of(arg))}`")
                elif keyword in device_keywords and isinstance(value, cst.SimpleString):
                    device = literal_value(value.value)
                    if isinstance(device, str) and re.fullmatch(r"cuda(:\d+)?", device):
                        self.m.report("NPU935", arg, what=f"`{_short(self.m.source_map.original_text_of(arg))}`")
        called = (dotted_name(node.func) or "").rsplit(".", 1)[-1]
        if called in _DEVICE_QUERIES and node.args and isinstance(node.args[0].value, cst.SimpleString) \
                and (self.m.qualname(node.func) or "").startswith("torch.cuda."):
            # `torch.cuda.get_device_capability("cuda")`: the query is rewritten to the shim, which
            # asks the NPU; its device argument names the current device, not a CUDA one
            self.gates.add(id(node.args[0].value))
        if node.args and node.args[0].keyword is None and isinstance(node.args[0].value, cst.SimpleString) \
                and set(called.lower().split("_")) & _prose_call_words():
            # `_report_implicit_sync("cuda", "H2D", ...)`: an op named in a report, not a device
            self.gates.add(id(node.args[0].value))
        self._module_and_method_names(node, called)
        prose_calls = _command_table()[1]
        if called in prose_calls or called.endswith(("Error", "Exception", "Warning")):
            self.prose.append(id(node))
        return True

    def _module_and_method_names(self, node: cst.Call, called: str) -> None:
        """Strings that name a module or a method, not a device or a backend (round-13 audits):
        - the module a probe looks for (`pytest.importorskip("nccl.m2n")`, `find_spec("nvidia.nccl")`):
          the probe answers "missing" on an NPU host and the code goes on without it: no finding;
        - the module an import by name loads (`importlib.import_module(...)`, `__import__(...)`):
          still reported, named as a module (it fails where the module is missing);
        - the method name an FX tracer records (`create_proxy("call_method", "cuda", ...)`): the
          user's `.cuda()` calls that reach it are rewritten or reported where they are written;
          information with that reason (a named skipped scope, moot.NO_WORK)."""
        table = _name_calls()
        positional = [a.value for a in node.args if a.keyword is None]
        first = positional[0] if positional else None
        if called in table["module_probes"] and isinstance(first, cst.SimpleString):
            self.gates.add(id(first))
        elif called in table["module_imports"] and isinstance(first, cst.SimpleString):
            self.label_hint.setdefault(id(first), "a module imported by name: it fails where the module is missing")
        elif (called in table["fx_node_calls"] and len(positional) > 1 and isinstance(first, cst.SimpleString)
              and literal_value(first.value) == "call_method" and isinstance(positional[1], cst.SimpleString)):
            self.label_info[id(positional[1])] = FX_METHOD

    def leave_Call(self, original_node: cst.Call) -> None:
        self._pop_prose(original_node)

    # Parameter names, keywords and definitions are the user's identifiers, not references.
    def visit_Param(self, node: cst.Param) -> bool:
        self._mark_fp8_named(node.default)  # `dtype=torch.float8_e4m3fn`: a default names a dtype
        # (each branch of `torch.float8_e4m3fnuz if is_mi300() else torch.float8_e4m3fn`)
        for default in [node.default.body, node.default.orelse] if isinstance(node.default, cst.IfExp) else [node.default]:
            if default is not None and id(default) in self.fp8_named:
                self.fp8_defaults[id(default)] = node.name.value
        if node.default is not None:
            node.default.visit(self)
        if node.annotation is not None:
            node.annotation.visit(self)
        return False

    def visit_Arg(self, node: cst.Arg) -> bool:
        keyword = node.keyword.value if node.keyword is not None else None
        if keyword is not None and _ENV_LIKE.fullmatch(keyword):
            self._env_keyword(node, keyword)
        prose = keyword in _command_table()[2]  # help="...", description="...": prose
        if prose:
            self.prose.append(id(node))
        node.value.visit(self)
        if prose:
            self._pop_prose(node)
        return False

    def _env_keyword(self, node: cst.Arg, keyword: str) -> None:
        """`f(CUDA_VISIBLE_DEVICES="0")` in a call no rule knows (NPU601 rewrites the keywords of
        `dict(...)`, `.update(...)` and `patch.dict(...)`): an environment variable passed as a
        keyword, most likely into an environment; reported (NPU602 for NCCL, else NPU990)."""
        renamed, nccl = _env_tables()
        if keyword not in renamed and nccl.match(keyword):
            self.m.report("NPU602", node, name=keyword)
        elif keyword in renamed or self.strings.fullmatch(keyword):
            self.m.report("NPU990", node, what=f"keyword `{keyword}=`, an environment variable of CUDA")


def _config_class(node: cst.ClassDef) -> bool:
    """A dataclass or a class named for configuration (`Float8TypeConfig`, `QuantArgs`): its
    class-level values are defaults a user may override, not what the class computes with."""
    if re.search(r"(Config|Args|Arguments|Options|Settings|Params|Recipe)$", node.name.value):
        return True
    return any((dotted_name(d.decorator.func if isinstance(d.decorator, cst.Call) else d.decorator) or "")
               .rsplit(".", 1)[-1] == "dataclass" for d in node.decorators)


# tensor factories, and the test files whose FP8 tensors built without a device are CPU tensors
_FACTORIES = frozenset({"empty", "zeros", "ones", "full", "rand", "randn", "empty_like", "zeros_like",
                        "ones_like", "full_like", "tensor"})
_TEST_PATH = re.compile(r"(^|/)tests?/|(^|/)test_[^/]*\.py$|_test\.py$")

_DEVICE_QUERIES = frozenset({"get_device_capability", "get_device_properties", "get_device_name"})


# decorators that register a compiler lowering (torch._inductor.lowering.register_lowering): the
# function builds IR, it computes no tensor (a default FP8 dtype there is no cast)
_LOWERINGS = frozenset({"register_lowering"})
_DTYPE_NAME = re.compile(r"^(torch|tl|triton\.language)\.[a-z]\w*$")  # `torch.int8`, `tl.float8e4nv`


def _is_cuda_version(node: cst.CSTNode) -> bool:
    """`torch.version.cuda` (None on an NPU or CPU build of torch), or `CUDA_HOME` (None where no
    CUDA toolkit is installed): a test of either already takes the non-CUDA path there."""
    name = dotted_name(node) or ""
    return (isinstance(node, cst.Attribute) and name.endswith("version.cuda")) or name.rsplit(".", 1)[-1] == "CUDA_HOME"


_UNGUARDED = "; imported unguarded at module level, so the module fails to import where it is not installed"


def _short(code: str, limit: int = 80) -> str:
    code = " ".join(code.split())
    return code if len(code) <= limit else code[: limit - 3] + "..."
