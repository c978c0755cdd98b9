"""The leftover sweep: report every CUDA reference that no rule claimed (NPU990).

Runs over the original tree after the rewrite rules, skipping the subtrees a rule rewrote or
reported, and reports each remaining construct once, at its outermost expression. Imports of
CUDA-only packages get their family's code, and NPU934 when they run unguarded at import time.
"""

from __future__ import annotations

import functools
import re

import libcst as cst

from . import catalogue, hotslice
from .families.context import GRAPH_CAPTURES, INERT, Context, dotted_name, literal_value
from .visitors import CachedVisitorDispatch


@functools.lru_cache(maxsize=None)
def _tables():
    t = catalogue.read_table("sweep.toml")
    strings = re.compile("|".join(f"(?:{s})" for s in t["strings"]), re.DOTALL)
    return (frozenset(t["attributes"]), tuple(t["modules"]), strings, frozenset(t["names"]),
            dict(t["module_codes"]), dict(t["name_codes"]))


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


def _module_matches(module: str, prefixes: tuple[str, ...]) -> bool:
    return any(module == p or module.startswith(p + ".") for p in prefixes)


def _is_extension(parts: list[str]) -> bool:
    """A compiled extension module by PyTorch's naming habits: `_C`, `_CUDA`, `selective_scan_cuda`."""
    return any(p in ("_C", "_CUDA") or p.endswith("_cuda") for p in parts)


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
        self.attributes, self.modules, self.strings, self.names, self.module_codes, self.name_codes = _tables()
        self.guard_modules, self.extension_exempt = _guard_table()
        self.unguarded: set[int] = set()
        self.triton_names: set[str] = set()  # local names bound by imports of triton

    def visit_Module(self, node: cst.Module) -> bool:
        self.unguarded = unguarded_imports(node)
        return True

    def on_visit(self, node: cst.CSTNode) -> bool:
        if type(node) in INERT or id(node) in self.m.claimed or id(node) in self.m.cold:
            return False
        return super().on_visit(node)

    def on_leave(self, original_node: cst.CSTNode) -> None:
        if type(original_node) not in INERT:  # no leave_ method for those: skip the lookup
            super().on_leave(original_node)

    def _flag(self, node: cst.CSTNode, what: str, module: str = "", *specific: str) -> bool:
        """Report a leftover; `specific` names (`m.n` of `from m import n`) choose the code first."""
        code = "NPU990"
        for name in (*specific, module):
            code = next((c for m, c in self.module_codes.items() if _module_matches(name, (m,))), "NPU990")
            if code != "NPU990":
                break
        self.m.report(code, node, what=what)
        return False

    def _guard(self, node: cst.CSTNode, module: str) -> None:
        """NPU934: a CUDA-only package imported unguarded at module level."""
        if id(node) not in self.unguarded:
            return
        if _module_matches(module, self.guard_modules) or self._extension(module):
            name = module if self._extension(module) else module.split(".", 1)[0]
            self.m.report("NPU934", node, name=name)

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
            if _module_matches(name, self.modules):
                self._guard(node, name)
                return self._flag(node, f"import of CUDA-only module `{name}`", name)
            if self._extension(name):
                return self._flag_extension(node, name)
        return False

    def visit_ImportFrom(self, node: cst.ImportFrom) -> bool:
        names = [] if isinstance(node.names, cst.ImportStar) else list(node.names)
        module = dotted_name(node.module) if node.module is not None else ""
        if node.relative:  # the project's own modules: only compiled extensions are CUDA-only
            base = "." * len(node.relative) + (module or "")
            sep = "." if module else ""
            for full in ([base] if module else []) + [f"{base}{sep}{dotted_name(a.name)}" for a in names]:
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
        if _module_matches(module, self.modules):
            self._guard(node, module)
            return self._flag(node, f"import from CUDA-only module `{module}`", module, *fulls)
        for full in fulls:
            if _module_matches(full, self.modules):
                self._guard(node, full)
                return self._flag(node, f"import of CUDA-only module `{full}`", full)
        for full in [module, *fulls]:
            if self._extension(full):
                return self._flag_extension(node, full)
        return False

    def _flag_extension(self, node: cst.CSTNode, module: str) -> bool:
        """`import pkg._C`, `from . import _CUDA`: a compiled extension, built for CUDA (NPU911)."""
        self._guard(node, module)
        self.m.report("NPU911", node, what=f"import of compiled extension module `{module}`")
        return False

    def _name_code(self, node: cst.CSTNode) -> str | None:
        """A code of its own for fp8 dtypes, torch._scaled_mm, CUDAExtension, ..."""
        qual = self.m.qualname(node) or ""
        bare = dotted_name(node) or ""
        for key, code in self.name_codes.items():
            if qual.startswith(key) or bare == key or bare.startswith(key + "."):
                return code
        return None

    def visit_Decorator(self, node: cst.Decorator) -> bool:
        target = node.decorator.func if isinstance(node.decorator, cst.Call) else node.decorator
        name = dotted_name(target) or ""
        head = name.split(".")[0]
        if head == "triton" or head in self.triton_names or (self.m.qualname(target) or "").startswith("triton"):
            self.m.report("NPU910", node.decorator, what=f"`@{name}` kernel")
            return False
        return True

    def visit_Attribute(self, node: cst.Attribute) -> bool:
        if (dotted_name(node) or "").split(".", 1)[0] == self.m.shim:
            return False  # `npu_compat.nvtx.range_push`: the shim's own names, written by us
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
            return True
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
        if isinstance(value, str) and self.strings.fullmatch(value):
            self._flag(node, f"string {_short(node.value)}")
        return False

    def visit_FormattedString(self, node: cst.FormattedString) -> bool:
        first = node.parts[0] if node.parts else None
        if isinstance(first, cst.FormattedStringText) and re.match(r"cuda(:|$)", first.value):
            self._flag(node, f"f-string `{_short(self.m.source_map.original_text_of(node))}`")
            return False
        return True

    # Parameter names, keywords and definitions are the user's identifiers, not references.
    def visit_Param(self, node: cst.Param) -> bool:
        if node.default is not None:
            node.default.visit(self)
        if node.annotation is not None:
            node.annotation.visit(self)
        return False

    def visit_Arg(self, node: cst.Arg) -> bool:
        node.value.visit(self)
        return False


def _short(code: str, limit: int = 80) -> str:
    code = " ".join(code.split())
    return code if len(code) <= limit else code[: limit - 3] + "..."
