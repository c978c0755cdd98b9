"""The leftover sweep: report every CUDA reference that no rule claimed (NPU990).

Runs over the original tree after the rewrite rules, skipping the subtrees a rule rewrote or
reported, and reports each remaining construct once, at its outermost expression.
"""

from __future__ import annotations

import functools
import re

import libcst as cst

from . import catalogue
from .transform import Migrator, dotted_name


@functools.lru_cache(maxsize=None)
def _tables():
    t = catalogue._read_table("sweep.toml")
    strings = re.compile("|".join(f"(?:{s})" for s in t["strings"]), re.DOTALL)
    return (frozenset(t["attributes"]), tuple(t["modules"]), strings, frozenset(t["names"]),
            dict(t["module_codes"]), dict(t["name_codes"]))


def _module_matches(module: str, prefixes: tuple[str, ...]) -> bool:
    return any(module == p or module.startswith(p + ".") for p in prefixes)


class Sweep(cst.CSTVisitor):
    def __init__(self, migrator: Migrator) -> None:
        super().__init__()
        self.m = migrator
        self.attributes, self.modules, self.strings, self.names, self.module_codes, self.name_codes = _tables()

    def on_visit(self, node: cst.CSTNode) -> bool:
        if id(node) in self.m.claimed or id(node) in self.m.cold:
            return False
        return super().on_visit(node)

    def _flag(self, node: cst.CSTNode, what: str, module: str = "") -> bool:
        code = next((c for m, c in self.module_codes.items() if _module_matches(module, (m,))), "NPU990")
        self.m.report(code, node, what=what)
        return False

    def visit_Import(self, node: cst.Import) -> bool:
        for alias in node.names:
            name = dotted_name(alias.name) or ""
            if _module_matches(name, self.modules):
                return self._flag(node, f"import of CUDA-only module `{name}`", name)
        return False

    def visit_ImportFrom(self, node: cst.ImportFrom) -> bool:
        if node.module is not None and not node.relative:
            module = dotted_name(node.module) or ""
            if _module_matches(module, self.modules):
                return self._flag(node, f"import from CUDA-only module `{module}`", module)
            if not isinstance(node.names, cst.ImportStar):
                for alias in node.names:
                    full = f"{module}.{dotted_name(alias.name)}"
                    if _module_matches(full, self.modules):
                        return self._flag(node, f"import of CUDA-only module `{full}`", full)
        return False

    def _name_code(self, node: cst.CSTNode) -> str | None:
        """A code of its own for fp8 dtypes, torch._scaled_mm, CUDAExtension, ..."""
        qual = self.m.qualname(node) or ""
        bare = dotted_name(node) or ""
        for key, code in self.name_codes.items():
            if qual.startswith(key) or bare == key:
                return code
        return None

    def visit_Decorator(self, node: cst.Decorator) -> bool:
        target = node.decorator.func if isinstance(node.decorator, cst.Call) else node.decorator
        name = dotted_name(target) or ""
        if name.split(".")[0] == "triton" or (self.m.qualname(target) or "").startswith("triton"):
            self.m.report("NPU910", node.decorator, what=f"`@{name}` kernel")
            return False
        return True

    def visit_Attribute(self, node: cst.Attribute) -> bool:
        if (dotted_name(node) or "").split(".", 1)[0] == self.m.shim:
            return False  # `npu_compat.nvtx.range_push`: the shim's own names, written by us
        code = self._name_code(node)
        if code is not None:
            self.m.report(code, node, what=f"`{_short(self.m.source_map.text_of(node))}`")
            return False
        current: cst.CSTNode = node
        while isinstance(current, cst.Attribute):
            if current.attr.value in self.attributes:
                code = self.m.source_map.text_of(node)
                return self._flag(node, f"`{_short(code)}`")
            current = current.value
        if isinstance(current, cst.Name) and self._cuda_name(current):
            return self._flag(node, f"`{_short(self.m.source_map.text_of(node))}`")
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
        value = node.evaluated_value
        if isinstance(value, str) and self.strings.fullmatch(value):
            self._flag(node, f"string {_short(node.value)}")
        return False

    def visit_FormattedString(self, node: cst.FormattedString) -> bool:
        first = node.parts[0] if node.parts else None
        if isinstance(first, cst.FormattedStringText) and re.match(r"cuda(:|$)", first.value):
            self._flag(node, f"f-string `{_short(self.m.source_map.text_of(node))}`")
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
