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

import functools
import re
from typing import Optional

import libcst as cst

from . import catalogue, hotslice
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

    def visit_Module(self, node: cst.Module) -> bool:
        self.unguarded = unguarded_imports(node)
        return True

    def on_visit(self, node: cst.CSTNode) -> bool:
        if type(node) in INERT or id(node) in self.m.claimed or id(node) in self.m.cold or id(node) in self.gates:
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

    def _flag_import(self, node: cst.CSTNode, what: str, module: str, *specific: str) -> bool:
        """An import of a CUDA-only module. Unguarded at module level it is also NPU934, unless the
        import has an ecosystem code of its own (Triton, apex, bitsandbytes, ...): then that one
        finding says it is unguarded, rather than two findings on one line."""
        code = self._code(module, *specific)
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
        if code is not None:
            self.m.report(code, node, what=f"`{_short(self.m.source_map.original_text_of(node))}`")
            return False
        current: cst.CSTNode = node
        while isinstance(current, cst.Attribute):
            if current.attr.value in self.attributes:
                code = self.m.source_map.original_text_of(node)
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
        if code is not None:
            self.m.report(code, node, what=f"`{node.value}`")
            return False
        if self._cuda_name(node):
            return self._flag(node, f"`{node.value}`")
        return False

    def visit_SimpleString(self, node: cst.SimpleString) -> bool:
        value = literal_value(node.value)
        # a device, backend or variable name holds no whitespace, and prose (a docstring, a log
        # or exception message) is text for people: neither is a leftover
        if isinstance(value, str) and not self.prose and not _WHITESPACE.search(value) and self.strings.fullmatch(value):
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
        prose_calls = _command_table()[1]
        if called in prose_calls or called.endswith(("Error", "Exception", "Warning")):
            self.prose.append(id(node))
        return True

    def leave_Call(self, original_node: cst.Call) -> None:
        self._pop_prose(original_node)

    # Parameter names, keywords and definitions are the user's identifiers, not references.
    def visit_Param(self, node: cst.Param) -> bool:
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


_DEVICE_QUERIES = frozenset({"get_device_capability", "get_device_properties", "get_device_name"})


def _is_cuda_version(node: cst.CSTNode) -> bool:
    """`torch.version.cuda` (None on an NPU or CPU build of torch), or `CUDA_HOME` (None where no
    CUDA toolkit is installed): a test of either already takes the non-CUDA path there."""
    name = dotted_name(node) or ""
    return (isinstance(node, cst.Attribute) and name.endswith("version.cuda")) or name.rsplit(".", 1)[-1] == "CUDA_HOME"


_UNGUARDED = "; imported unguarded at module level, so the module fails to import where it is not installed"


def _short(code: str, limit: int = 80) -> str:
    code = " ".join(code.split())
    return code if len(code) <= limit else code[: limit - 3] + "..."
