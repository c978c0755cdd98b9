"""The rewrite rules: one libcst transformer, one traversal per file.

Every rule decides on the *original* nodes (positions, the chain of parents) and builds its
replacement from the *updated* ones. A node a rule rewrote or reported is "claimed"; the leftover
sweep (`sweep.py`) then reports every CUDA reference that no rule claimed, so nothing is missed
silently (DESIGN.md invariant 2).

Device strings change only where they are provably devices (invariant 4): the argument of
`torch.device`, a device keyword, a variable named like a device, and so on (rules/device.toml).
"""

from __future__ import annotations

import ast
import functools
import re
from typing import Optional, Sequence

import libcst as cst

from . import catalogue, hotslice
from .findings import Finding
from .sourcemap import TRIVIA

# Nodes no rule visits or leaves: whitespace, comments, punctuation and operators (read, where
# a rule needs them, as attributes of their parent), and number literals (read as arguments).
INERT: frozenset[type] = TRIVIA | {cst.Integer, cst.Float, cst.Imaginary}

_CUDA_INDEX_RE = re.compile(r"^cuda:(\d+)$")
_WS_RE = re.compile(r"\s+")


def _device_tables():
    t = catalogue.device_table()
    words = {w.lower() for w in t["device_name_words"]}
    return (
        frozenset(t["device_types"]),
        frozenset(t["device_keywords"]),
        frozenset(t["device_first_arg_calls"]),
        frozenset(t["device_first_arg_methods"]),
        frozenset(t["framework_accelerator_keywords"]),
        words,
        re.compile(t["cuda_only_feature_pattern"], re.IGNORECASE),
    )


def is_device_name(identifier: str, words: frozenset | set) -> bool:
    """`DEV`, `device_type`, `self.compute_device`: one underscore-separated word names a device."""
    low = identifier.lower()
    if low in words:
        return True
    return any(part in words for part in low.split("_") if part)


@functools.lru_cache(maxsize=8192)
def literal_value(literal: str):
    """`SimpleString.evaluated_value` (ast.literal_eval, a compile each time) for the literal's
    text: several rules and the sweep read the same string. Errors are raised, not remembered."""
    return ast.literal_eval(literal)


def _string_value(node: cst.CSTNode) -> Optional[str]:
    if isinstance(node, cst.SimpleString):
        value = literal_value(node.value)
        return value if isinstance(value, str) else None
    return None


def _cuda_literal(node: cst.CSTNode):
    """("cuda", None) for "cuda", ("cuda", N) for "cuda:N", else None."""
    value = _string_value(node)
    if value == "cuda":
        return ("cuda", None)
    if value is not None:
        m = _CUDA_INDEX_RE.match(value)
        if m:
            return ("cuda", int(m.group(1)))
    return None


def _cuda_fstring_expr(node: cst.CSTNode) -> Optional[cst.BaseExpression]:
    """The expression of an f-string that is exactly `f"cuda:{expr}"`, else None."""
    if not isinstance(node, cst.FormattedString) or len(node.parts) != 2:
        return None
    text, expr = node.parts
    if (
        isinstance(text, cst.FormattedStringText)
        and text.value == "cuda:"
        and isinstance(expr, cst.FormattedStringExpression)
        and expr.conversion is None
        and expr.format_spec is None
        and expr.equal is None
    ):
        return expr.expression
    return None


def dotted_name(node: cst.CSTNode) -> Optional[str]:
    """`a.b.c` for a chain of Names and Attributes, else None."""
    parts = []
    while isinstance(node, cst.Attribute):
        parts.append(node.attr.value)
        node = node.value
    if isinstance(node, cst.Name):
        parts.append(node.value)
        return ".".join(reversed(parts))
    return None


def _last_identifier(node: cst.CSTNode) -> Optional[str]:
    if isinstance(node, cst.Name):
        return node.value
    if isinstance(node, cst.Attribute):
        return node.attr.value
    return None


FLASH_MODULES = frozenset({"flash_attn", "flash_attn.flash_attn_interface"})
FLASH_FUNCTIONS = frozenset({
    "flash_attn_func", "flash_attn_varlen_func", "flash_attn_qkvpacked_func",
    "flash_attn_kvpacked_func", "flash_attn_varlen_qkvpacked_func",
    "flash_attn_varlen_kvpacked_func", "flash_attn_with_kvcache",
})
# parameter -> literal values that are harmless (the default); anything else has no NPU path
FLASH_UNSUPPORTED = {
    "softcap": {"0", "0.0"},
    "alibi_slopes": {"None"},
    "deterministic": {"False"},
    "return_attn_probs": {"False"},
    "rotary_cos": {"None"},
    "rotary_sin": {"None"},
    "cache_leftpad": {"None"},
}

_BACKEND_SPEC_RE = re.compile(r"^\w+:\w+(,\w+:\w+)*$")

# Statements the engine's trigger words miss but the diagnostics need to see: compiled extension
# modules (`import pkg._C`), apex's `amp_C`, Triton- and CUDA-based libraries (rules/sweep.toml).
EXTRA_HOT = re.compile(
    r"\bamp_C\b|\b_C\b|\bliger_kernel\b|\bmamba_ssm\b|\bcausal_conv1d\b|\bflashinfer\b"
    # (`[^\S\n]*`, not `\s*`: the same lines match, without trying every blank line of a run)
    r"|^[^\S\n]*(?:import|from)\s+fla\b",
    re.MULTILINE,
)
_ALIAS_QUALNAME = re.compile(r"cuda|cudnn|nccl|nvtx")  # without the engine's trigger words
_FLOAT64 = frozenset({"torch.float64", "torch.double"})
_CUDA_DOUBLE = "torch.cuda.DoubleTensor"
GRAPH_CAPTURES = frozenset({"torch.cuda.graph", "torch.cuda.graphs.graph"})
_TRAINING_METHODS = frozenset({"backward", "step"})  # loss.backward(), optimizer.step()
_TRAINING_CALLS = frozenset({"torch.autograd.backward", "torch.autograd.grad"})


def _is_nccl_spec(value: str) -> bool:
    """"nccl", or a mixed spec such as "cuda:nccl,cpu:gloo"."""
    return value == "nccl" or (_BACKEND_SPEC_RE.match(value) is not None and ":nccl" in value)


def _is_named(node: Optional[cst.CSTNode], words) -> bool:
    ident = _last_identifier(node) if node is not None else None
    return ident is not None and is_device_name(ident, words)


def normalise_source(code: str) -> str:
    return _WS_RE.sub(" ", code).strip()


# isinstance(node, cst.BaseStatement), as a set lookup (an isinstance check against an abstract
# class costs more than the rest of on_visit)
_STATEMENTS: frozenset[type] = frozenset(
    cls for cls in vars(cst).values() if isinstance(cls, type) and issubclass(cls, cst.BaseStatement)
)

_METHODS: dict[tuple, object] = {}  # (visitor class, kind, node type, attribute) -> function or None


def _method(visitor: object, kind: str, node_type: type, attribute: str = ""):
    """The callback libcst would call (`visit_Name`, `leave_If_test`), or None for its no-op stub."""
    key = (type(visitor), kind, node_type, attribute)
    try:
        return _METHODS[key]
    except KeyError:
        name = f"{kind}_{node_type.__name__}" + (f"_{attribute}" if attribute else "")
        found = getattr(type(visitor), name, None)
        if getattr(found, "_is_no_op", False):  # libcst's mark_no_op
            found = None
        _METHODS[key] = found
        return found


def _attribute_types(visitor_class: type) -> frozenset:
    """Node types for which the visitor class has attribute callbacks (`visit_If_test`): for
    the other types (nearly all) no name needs looking up at all."""
    types = set()
    for name in dir(visitor_class):
        match = re.fullmatch(r"(?:visit|leave)_([A-Za-z]+)_\w+", name)
        node_type = getattr(cst, match.group(1), None) if match else None
        if isinstance(node_type, type) and not getattr(getattr(visitor_class, name), "_is_no_op", False):
            types.add(node_type)
    return frozenset(types)


class CachedDispatch:
    """libcst finds a visitor's callbacks by name at every node, and at every attribute of every
    node (`visit_If_test`): a formatted name and a lookup that mostly finds a no-op stub. The
    answer depends only on the visitor's class and the node's type, so it is found once; the
    callbacks themselves run exactly as libcst would run them. Mix in before the libcst class.
    """

    _attribute_types: frozenset = frozenset()  # node types with attribute callbacks, per class

    def __init_subclass__(cls, **kwargs) -> None:
        super().__init_subclass__(**kwargs)
        cls._attribute_types = _attribute_types(cls)

    def on_visit_attribute(self, node: cst.CSTNode, attribute: str) -> None:
        if type(node) in self._attribute_types:
            func = _method(self, "visit", type(node), attribute)
            if func is not None:
                func(self, node)

    def on_leave_attribute(self, original_node: cst.CSTNode, attribute: str) -> None:
        if type(original_node) in self._attribute_types:
            func = _method(self, "leave", type(original_node), attribute)
            if func is not None:
                func(self, original_node)


class CachedTransformerDispatch(CachedDispatch):
    def on_visit(self, node: cst.CSTNode) -> bool:
        func = _method(self, "visit", type(node))
        return func is None or func(self, node) is not False

    def on_leave(self, original_node, updated_node):
        func = _method(self, "leave", type(original_node))
        return updated_node if func is None else func(self, original_node, updated_node)


class CachedVisitorDispatch(CachedDispatch):
    def on_visit(self, node: cst.CSTNode) -> bool:
        func = _method(self, "visit", type(node))
        return func is None or func(self, node) is not False

    def on_leave(self, original_node: cst.CSTNode) -> None:
        func = _method(self, "leave", type(original_node))
        if func is not None:
            func(self, original_node)


class Migrator(CachedTransformerDispatch, cst.CSTTransformer):
    """Rewrites CUDA device placement and the `torch.cuda` API of one module."""

    def __init__(
        self,
        module: cst.Module,
        source_map,
        relpath: str,
        enabled: frozenset,
        shim: str = "npu_compat",
        shim_module: Optional[str] = None,
        defines_cuda_method: bool = False,
        hot_statement: Optional[re.Pattern] = None,
        suppressed=None,
    ) -> None:
        super().__init__()
        self.module = module
        self.source_map = source_map  # text and line/column of original nodes
        self.relpath = relpath
        self.enabled = enabled
        self.shim = shim
        self.shim_module = shim_module or shim  # dotted: `mypkg.npu_compat` for a package's shim
        self.defines_cuda_method = defines_cuda_method
        # statements whose text has no trigger word are neither traversed nor swept
        self.hot_statement = hot_statement
        self._hot_patterns = hotslice.branches(hot_statement) + hotslice.branches(EXTRA_HOT) if hot_statement else ()
        self.cold: set[int] = set()
        self._alias_words: set[str] = set()  # local names bound to CUDA modules...
        self._alias_re: Optional[re.Pattern] = None  # ...as one pattern
        (
            self.device_types,
            self.device_keywords,
            self.device_first_arg_calls,
            self.device_first_arg_methods,
            self.framework_keywords,
            self.device_words,
            self.feature_gate_re,
        ) = _device_tables()
        api = catalogue.cuda_api()
        self.api_shared = frozenset(api["shared"]["names"])
        self.api_renamed = dict(api.get("renamed", {}))
        self.api_capability = frozenset(api["capability"]["names"])
        self.api_typed = frozenset(api["typed_tensors"]["names"])
        self.api_report = dict(api["report"])
        self.api_amp = frozenset(api["amp"]["names"])
        self.api_nvtx = frozenset(api["nvtx"]["names"])
        self.api_tf32 = dict(api["tf32"])
        self.api_sdpa = frozenset(api["sdpa_switches"]["names"])
        self.report_qualnames = dict(api["report_qualnames"])
        self.api_report_codes = dict(api.get("report_codes", {}))
        properties = api["device_properties"]
        self.properties_getters = frozenset(properties["getters"])
        self.properties_fields = frozenset(properties["npu_fields"]) | frozenset(properties["shim_fields"])
        # name -> bound to get_device_properties(...)? [module level and dotted names, each function]
        self._properties_vars: list[dict[str, bool]] = [{}]
        self._training_captures: set[int] = set()  # `torch.cuda.graph` in a `with` that trains
        self._float64_seen: set[int] = set()  # calls of a chain already reported as NPU930
        dist = catalogue.distributed_table()
        self.backend_keywords = frozenset(dist["backend_keywords"])
        self.backend_first_arg_calls = frozenset(dist["backend_first_arg_calls"])
        self.backend_words = frozenset(dist["backend_name_words"])
        self.other_backends = frozenset(dist["other_backends"])
        self.backend_getters = frozenset(dist["backend_getters"])
        self.backend_enum = dist["enum"]
        env = catalogue.env_table()
        self.env_rename = dict(env["rename"])
        self.nccl_env_re = re.compile(env["report"]["pattern"])
        self.backend_variables: set[str] = set()  # names assigned a backend literal we rewrote
        # flash-attn: local name -> public function name; local names of the flash_attn module
        self.flash_functions: dict[str, str] = {}
        self.flash_modules: set[str] = set()

        self.suppressed = suppressed  # (code, line) -> bool: a `# noqa: CODE` comment says leave it
        self.suppressed_count = 0
        self.findings: list[Finding] = []
        self.claimed: set[int] = set()
        self.uses_shim = False
        # local name -> qualified name, for names bound by imports of torch (in source order)
        self.aliases: dict[str, str] = {}
        self._parents: list[cst.CSTNode] = []
        # Replacements made so far, and how many there were when each open node was entered: a
        # node under which nothing was replaced is kept as the original object (see on_leave).
        self.replacements = 0
        self._replacements_at_visit: list[int] = []
        self._functions: list[str] = []
        self._if_tests: list[cst.If] = []
        self._statements: list[cst.CSTNode] = []
        # imports that bind torch.cuda names: local name -> [references, rewritten references]
        self._cuda_import_uses: dict[str, list[int]] = {}
        self._cuda_imports: list[tuple] = []  # (original, updated)
        self.plain_torch_import = False  # `import torch` seen: `import torch.cuda` can go

    # ----------------------------------------------------------------- bookkeeping
    def on_visit(self, node: cst.CSTNode) -> bool:
        if type(node) in INERT:
            return False  # nothing to rewrite or report below (on_leave hands it back as is)
        self._parents.append(node)
        self._replacements_at_visit.append(self.replacements)
        if isinstance(node, cst.Call) and self._is_own_literal_call(node):
            self.claim(node)
            if node.func.attr.value == "dist_backend":
                self._note_backend_variable()
            return False
        if self.hot_statement is not None and type(node) in _STATEMENTS:
            text = self.source_map.text_of(node)
            # (the patterns' alternatives one by one: the same answer, found sooner)
            if not any(p.search(text) for p in self._hot_patterns) and not (
                self._alias_re is not None and self._alias_re.search(text)
            ):
                self.cold.add(id(node))
                self._shadow_statement(node)
                return False
        return super().on_visit(node)

    def on_leave(self, original_node, updated_node):
        if type(original_node) in INERT:
            return updated_node  # not entered: the original node itself
        try:
            if id(original_node) in self.cold:
                return updated_node
            if self.replacements == self._replacements_at_visit[-1]:
                # libcst rebuilt this node from children that all came back unchanged: the copy
                # equals the original. Handing on the original itself lets the engine see an
                # untouched module (`new is module`) and skip generating its code again.
                updated_node = original_node
            result = super().on_leave(original_node, updated_node)
            if result is not updated_node:
                self.replacements += 1
            return result
        finally:
            self._parents.pop()
            self._replacements_at_visit.pop()

    def _is_own_literal_call(self, node: cst.Call) -> bool:
        """`npu_compat.env_name("CUDA_VISIBLE_DEVICES")`: written by us, with a literal inside."""
        func = node.func
        return (
            isinstance(func, cst.Attribute)
            and isinstance(func.value, cst.Name)
            and func.value.value == self.shim
            and func.attr.value in ("env_name", "dist_backend")
            and all(isinstance(a.value, cst.SimpleString) for a in node.args)
        )

    def _note_backend_variable(self) -> None:
        """`backend = npu_compat.dist_backend() if ... else "gloo"` (an earlier run's output): the
        variable holds a backend npu-migrate wrote, as `backend = "nccl" ...` did before."""
        depth, child = 1, self._parents[-1]
        parent = self._parent(depth)
        while isinstance(parent, cst.IfExp) and (parent.body is child or parent.orelse is child):
            child, depth = parent, depth + 1
            parent = self._parent(depth)
        if isinstance(parent, (cst.Assign, cst.AnnAssign)) and parent.value is child:
            targets = [t.target for t in parent.targets] if isinstance(parent, cst.Assign) else [parent.target]
            self.backend_variables.update(t.value for t in targets if isinstance(t, cst.Name))

    def _shadow_statement(self, node: cst.CSTNode) -> None:
        """A skipped top-level statement may still rebind an imported name."""
        if isinstance(node, (cst.FunctionDef, cst.ClassDef)):
            self._shadow(node.name)
        elif isinstance(node, cst.SimpleStatementLine):
            for small in node.body:
                if isinstance(small, cst.Assign):
                    for target in small.targets:
                        self._shadow(target.target)
                elif isinstance(small, (cst.AnnAssign, cst.AugAssign)):
                    self._shadow(small.target)

    def _parent(self, depth: int = 1) -> Optional[cst.CSTNode]:
        # _parents[-1] is the node being left; its parent is _parents[-2]
        index = -1 - depth
        return self._parents[index] if len(self._parents) >= -index else None

    def _position(self, node: cst.CSTNode) -> tuple[int, int]:
        return self.source_map.position(node)

    def _add(self, code: str, node: cst.CSTNode, fixable: bool, **fmt: str) -> None:
        rule = catalogue.rule(code)
        line, column = self._position(node)
        try:
            message = rule.message.format(**fmt)
        except (KeyError, IndexError):
            message = rule.message
        source = normalise_source(self.source_map.original_text_of(node))  # as the file has it
        if len(source) > 200:
            source = source[:197] + "..."
        self.findings.append(
            Finding(self.relpath, line, column, code, message, fixable, source)
        )

    def claim(self, node: cst.CSTNode) -> None:
        self.claimed.add(id(node))

    def _suppressed(self, code: str, node: cst.CSTNode) -> bool:
        if self.suppressed is not None and self.suppressed(code, self._position(node)[0]):
            self.suppressed_count += 1
            return True
        return False

    def rewrite(self, code: str, original: cst.CSTNode, new: cst.CSTNode, needs_import: bool = True, **fmt: str):
        """Apply a rewrite if its code is enabled and not suppressed; claimed either way."""
        self.claim(original)
        if code not in self.enabled or self._suppressed(code, original):
            return None
        self._add(code, original, True, **fmt)
        self.uses_shim = self.uses_shim or needs_import
        return new

    def report(self, code: str, original: cst.CSTNode, **fmt: str) -> None:
        self.claim(original)
        if code in self.enabled and not self._suppressed(code, original):
            self._add(code, original, False, **fmt)

    def note(self, code: str, node: cst.CSTNode, **fmt: str) -> None:
        """Report without claiming: the sweep still looks inside `node` for other leftovers."""
        if code in self.enabled and not self._suppressed(code, node):
            self._add(code, node, False, **fmt)

    def shim_attr(self, name: str) -> cst.Attribute:
        return cst.Attribute(value=cst.Name(self.shim), attr=cst.Name(name))

    def shim_call(self, name: str, args: Sequence[cst.BaseExpression] = ()) -> cst.Call:
        return cst.Call(func=self.shim_attr(name), args=[cst.Arg(a) for a in args])

    def qualname(self, node: cst.CSTNode) -> Optional[str]:
        name = dotted_name(node)
        if name is None:
            return None
        head, _, rest = name.partition(".")
        target = self.aliases.get(head)
        if target is None:
            return None
        return f"{target}.{rest}" if rest else target

    # ----------------------------------------------------------------- imports and scopes
    def visit_Import(self, node: cst.Import) -> bool:
        for alias in node.names:
            module = dotted_name(alias.name) or ""
            if module == "triton" or module.startswith("triton."):
                local = alias.asname.name if alias.asname is not None else alias.name
                self._make_hot(local.value if isinstance(local, cst.Name) else "triton")
            if not (module == "torch" or module.startswith("torch.")):
                continue
            if alias.asname is not None and isinstance(alias.asname.name, cst.Name):
                local = alias.asname.name.value
                self._bind(local, module)
                if module.startswith("torch.cuda"):
                    self._cuda_import_uses.setdefault(local, [0, 0])
            else:
                self.aliases["torch"] = "torch"
                if module == "torch":
                    self.plain_torch_import = True
        return False

    def visit_ImportFrom(self, node: cst.ImportFrom) -> bool:
        if node.relative or node.module is None:
            return False
        module = dotted_name(node.module) or ""
        if isinstance(node.names, cst.ImportStar):
            return False
        if module == "triton" or module.startswith("triton."):
            for alias in node.names:  # `@jit` after `from triton import jit`: the sweep must see it
                local = alias.asname.name if alias.asname is not None else alias.name
                if isinstance(local, cst.Name):
                    self._make_hot(local.value)
        if not (module == "torch" or module.startswith("torch.")):
            return False
        for alias in node.names:
            name = dotted_name(alias.name)
            if name is None:
                continue
            local = name
            if alias.asname is not None and isinstance(alias.asname.name, cst.Name):
                local = alias.asname.name.value
            qual = f"{module}.{name}"
            self._bind(local, qual)
            if qual.startswith("torch.cuda"):
                self._cuda_import_uses.setdefault(local, [0, 0])
        return False

    def leave_Import(self, original_node, updated_node):
        names = [dotted_name(a.name) or "" for a in original_node.names]
        if names == ["flash_attn"]:
            return self._flash_module_import(original_node, updated_node)
        if any(n == "torch.cuda" or n.startswith("torch.cuda.") for n in names):
            self._cuda_imports.append((original_node, updated_node))
        return updated_node

    def leave_ImportFrom(self, original_node, updated_node):
        module = dotted_name(original_node.module) if original_node.module else None
        if module in FLASH_MODULES and not original_node.relative:
            return self._flash_import(original_node, updated_node)
        if module and not original_node.relative:
            binds_cuda = module.startswith("torch.cuda") or (
                module == "torch"
                and not isinstance(original_node.names, cst.ImportStar)
                and any(dotted_name(a.name) == "cuda" for a in original_node.names)
            )
            if binds_cuda:
                self._cuda_imports.append((original_node, updated_node))
        return updated_node

    def _bind(self, local: str, qualname: str) -> None:
        self.aliases[local] = qualname
        # `from torch.utils.cpp_extension import load_inline`, `from torch import float8_e4m3fn`
        trigger = self.hot_statement or _ALIAS_QUALNAME
        if trigger.search(qualname) and not trigger.search(local):
            self._make_hot(local)

    def _make_hot(self, local: str) -> None:
        """A statement using this name is hot even without a trigger word in its text."""
        if re.escape(local) in self._alias_words:
            return
        self._alias_words.add(re.escape(local))
        self._alias_re = re.compile(r"\b(" + "|".join(sorted(self._alias_words)) + r")\b")

    # ----------------------------------------------------------------- flash-attn (5xx)
    def _flash_import(self, original: cst.ImportFrom, updated: cst.ImportFrom):
        """from flash_attn[.flash_attn_interface] import f, g as h -> from npu_compat.flash_attn import ..."""
        if isinstance(original.names, cst.ImportStar):
            return updated  # the sweep reports it
        pairs = []
        for alias in original.names:
            name = dotted_name(alias.name) or ""
            local = alias.asname.name.value if alias.asname is not None and isinstance(alias.asname.name, cst.Name) else name
            pairs.append((name, local))
        if not all(name in FLASH_FUNCTIONS for name, _ in pairs):
            return updated  # partly unmapped: the sweep reports the import (NPU502)
        module = cst.parse_expression(f"{self.shim_module}.flash_attn")
        new = updated.with_changes(module=module, relative=())
        result = self.rewrite("NPU501", original, new, needs_import=False)
        if result is not None:
            self.flash_functions.update({local: name for name, local in pairs})
        return result or updated

    def _flash_module_import(self, original: cst.Import, updated: cst.Import):
        """import flash_attn [as fa] -> from npu_compat import flash_attn [as fa], when every use is mapped."""
        alias = original.names[0]
        local = alias.asname.name.value if alias.asname is not None and isinstance(alias.asname.name, cst.Name) else "flash_attn"
        code = "\n".join(  # attribute uses only: module paths in import lines are not uses
            line for line in self.source_map.original_text().splitlines()
            if not re.match(r"\s*(from|import)\s", line)
        )
        used = set(re.findall(rf"\b{re.escape(local)}\.(\w+)", code))
        if not used or not used <= FLASH_FUNCTIONS:
            return updated
        names = [cst.ImportAlias(name=cst.Name("flash_attn"), asname=alias.asname)]
        new = cst.ImportFrom(module=cst.parse_expression(self.shim_module), names=names)
        result = self.rewrite("NPU501", original, new, needs_import=False)
        if result is not None:
            self.flash_modules.add(local)
        return result or updated

    def _flash_call_parameters(self, original: cst.Call) -> None:
        func = original.func
        name = None
        if isinstance(func, cst.Name):
            name = self.flash_functions.get(func.value)
        elif isinstance(func, cst.Attribute) and isinstance(func.value, cst.Name) and func.value.value in self.flash_modules:
            name = func.attr.value if func.attr.value in FLASH_FUNCTIONS else None
        if name is None:
            return
        for arg in original.args:
            keyword = arg.keyword.value if arg.keyword is not None else None
            if keyword not in FLASH_UNSUPPORTED:
                continue
            harmless = FLASH_UNSUPPORTED[keyword]
            value = arg.value
            literal = value.value if isinstance(value, cst.Name) else None
            if isinstance(value, (cst.Integer, cst.Float)):
                literal = value.value
            if literal is not None and literal in harmless:
                continue
            self.report("NPU503", arg, name=keyword)

    def _shadow(self, target: cst.CSTNode) -> None:
        if isinstance(target, cst.Name):
            self.aliases.pop(target.value, None)
        elif isinstance(target, (cst.Tuple, cst.List)):
            for element in target.elements:
                self._shadow(element.value)

    def visit_Assign(self, node: cst.Assign) -> None:
        for target in node.targets:
            self._shadow(target.target)
            self._track_properties(target.target, node.value)

    def visit_AnnAssign(self, node: cst.AnnAssign) -> None:
        self._shadow(node.target)
        if node.value is not None:
            self._track_properties(node.target, node.value)

    def visit_For(self, node: cst.For) -> None:
        self._shadow(node.target)

    def visit_FunctionDef(self, node: cst.FunctionDef) -> None:
        self._shadow(node.name)
        self._functions.append(node.name.value)
        self._properties_vars.append({})
        for param in (*node.params.params, *node.params.kwonly_params, *node.params.posonly_params):
            self._shadow(param.name)
            self._properties_vars[-1][param.name.value] = False
        if node.name.value == "cuda" and self.defines_cuda_method:
            self.report("NPU107", node.name)

    def leave_FunctionDef(self, original_node, updated_node):
        self._functions.pop()
        self._properties_vars.pop()
        return updated_node

    def visit_With(self, node: cst.With) -> None:
        """`with torch.cuda.graph(g):` around backward or an optimizer step captures training."""
        for item in node.items:
            call = item.item
            if isinstance(call, cst.Call) and self.qualname(call.func) in GRAPH_CAPTURES:
                if self._runs_training_step(node.body):
                    self._training_captures.add(id(call.func))

    def _runs_training_step(self, body: cst.CSTNode) -> bool:
        for call in _walk_calls(body):
            func = call.func
            if isinstance(func, cst.Attribute) and func.attr.value in _TRAINING_METHODS:
                return True
            if self.qualname(func) in _TRAINING_CALLS:
                return True
        return False

    def visit_ClassDef(self, node: cst.ClassDef) -> None:
        self._shadow(node.name)

    def visit_If_test(self, node: cst.If) -> None:
        self._if_tests.append(node)

    def leave_If_test(self, node: cst.If) -> None:
        self._if_tests.pop()

    def visit_SimpleStatementLine(self, node) -> None:
        self._statements.append(node)

    def leave_SimpleStatementLine(self, original_node, updated_node):
        self._statements.pop()
        return updated_node

    # ----------------------------------------------------------------- module end: imports
    def leave_Module(self, original_node: cst.Module, updated_node: cst.Module) -> cst.Module:
        return updated_node

    def removable_cuda_imports(self) -> list[cst.CSTNode]:
        """Updated import nodes whose torch.cuda names have no unrewritten use left (NPU206)."""
        if "NPU206" not in self.enabled:
            return []
        out = []
        for original, updated in self._cuda_imports:
            locals_ = []
            if isinstance(original, cst.Import):
                for alias in original.names:
                    if alias.asname is not None and isinstance(alias.asname.name, cst.Name):
                        locals_.append(alias.asname.name.value)
            elif not isinstance(original.names, cst.ImportStar):
                for alias in original.names:
                    name = dotted_name(alias.name) or ""
                    if alias.asname is not None and isinstance(alias.asname.name, cst.Name):
                        name = alias.asname.name.value
                    module = dotted_name(original.module) or ""
                    if module == "torch" and (dotted_name(alias.name) != "cuda"):
                        continue  # `from torch import cuda, nn`: only cuda is ours
                    locals_.append(name)
            uses = [self._cuda_import_uses.get(n, [0, 0]) for n in locals_]
            # every use rewritten, and at least one (an import nobody uses is not ours to drop)
            if all(u[0] == u[1] for u in uses) and (not uses or any(u[1] for u in uses)):
                self.claim(original)
                self._add("NPU206", original, True)
                out.append(updated)
        return out

    # ----------------------------------------------------------------- torch.cuda API (2xx)
    def _is_chain_top(self) -> bool:
        """True when the node being left is not the `.value` of an enclosing Attribute."""
        node = self._parents[-1]
        parent = self._parent()
        return not (isinstance(parent, cst.Attribute) and parent.value is node)

    def _is_load_name(self) -> bool:
        node = self._parents[-1]
        parent = self._parent()
        if parent is None:
            return False
        if isinstance(parent, cst.Attribute):
            return parent.value is node
        if isinstance(parent, cst.Arg):
            return parent.value is node
        if isinstance(parent, (cst.Param, cst.FunctionDef, cst.ClassDef, cst.ImportAlias, cst.AsName, cst.NameItem)):
            return False
        if isinstance(parent, cst.AssignTarget):
            return False
        return True

    def leave_Name(self, original_node: cst.Name, updated_node: cst.Name):
        if original_node.value not in self.aliases or not self._is_load_name():
            return updated_node
        if not self._is_chain_top():
            return updated_node
        return self._cuda_reference(original_node, updated_node)

    def leave_Attribute(self, original_node: cst.Attribute, updated_node: cst.Attribute):
        attr = original_node.attr.value
        parent = self._parent()
        if self._missing_properties_field(original_node):
            self.note("NPU931", original_node, name=attr)
        if attr == "is_cuda" and not isinstance(parent, cst.AssignTarget):
            new = self.shim_call("on_accelerator", [updated_node.value])
            new = new.with_changes(lpar=updated_node.lpar, rpar=updated_node.rpar)
            return self.rewrite("NPU106", original_node, new) or updated_node
        if not self._is_chain_top():
            return updated_node
        return self._cuda_reference(original_node, updated_node)

    def _cuda_reference(self, original, updated):
        qual = self.qualname(original)
        if qual is None:
            return updated
        if not (qual == "torch.cuda" or qual.startswith("torch.cuda.")):
            result = self._torch_reference(original, updated, qual)
            return result if result is not None else updated
        head = dotted_name(original).split(".", 1)[0]
        uses = self._cuda_import_uses.get(head)
        if uses is not None:
            uses[0] += 1
        result = self._cuda_api(original, updated, qual)
        if result is not None and uses is not None:
            uses[1] += 1
        return result if result is not None else updated

    def _torch_reference(self, original, updated, qual: str):
        """References outside torch.cuda: backend flags, Backend.NCCL, DataParallel."""
        if qual == self.backend_enum:
            new = self.shim_call("dist_backend").with_changes(lpar=updated.lpar, rpar=updated.rpar)
            return self.rewrite("NPU303", original, new)
        if qual in self.report_qualnames:
            self.report(self.report_qualnames[qual], original)
            return None
        if qual.startswith(("torch.backends.cuda", "torch.backends.cudnn")):
            rest = qual[len("torch.backends."):]
            if rest in self.api_tf32:
                target = self.api_tf32[rest]
                new = cst.Attribute(value=self.shim_attr("tf32"), attr=cst.Name(target))
                return self.rewrite("NPU403", original, new.with_changes(lpar=updated.lpar, rpar=updated.rpar), name=target)
            parts = rest.split(".")
            if parts[0] == "cuda" and len(parts) > 1 and parts[1] in self.api_sdpa:
                self.report("NPU405", original, name=f"torch.backends.{rest}")
            elif parts[0] in ("cuda", "cudnn"):
                self.report("NPU404", original, name=f"torch.backends.{rest}")
        return None

    def _cuda_api(self, original, updated, qual: str):
        if qual == "torch.cuda":
            new = self.shim_call("device_module").with_changes(lpar=updated.lpar, rpar=updated.rpar)
            return self.rewrite("NPU205", original, new)
        rest = qual[len("torch.cuda."):]
        first = rest.split(".", 1)[0]
        parts = rest.split(".")
        if len(parts) == 2 and parts[0] == "amp" and parts[1] in self.api_amp:
            new = self.shim_attr(parts[1]).with_changes(lpar=updated.lpar, rpar=updated.rpar)
            return self.rewrite("NPU401", original, new, name=parts[1])
        if len(parts) == 2 and parts[0] == "nvtx" and parts[1] in self.api_nvtx:
            new = cst.Attribute(value=self.shim_attr("nvtx"), attr=cst.Name(parts[1]))
            return self.rewrite("NPU207", original, new.with_changes(lpar=updated.lpar, rpar=updated.rpar), name=parts[1])
        if id(original) in self._training_captures:
            self.report("NPU932", original)
            return None
        # longest listed prefix wins in the report tables; a code of its own before NPU202
        for n in range(len(parts), 0, -1):
            key = ".".join(parts[:n])
            if key in self.api_report_codes:
                self.report(self.api_report_codes[key], original, name=rest, what=f"`torch.cuda.{rest}`")
                return None
            if key in self.api_report:
                self.report("NPU202", original, name=rest, note=self.api_report[key])
                return None
        if "." in rest:
            self.report("NPU202", original, name=rest, note="no faithful NPU rewrite")
            return None
        target = None
        if first in self.api_shared:
            code, target = "NPU201", first
        elif first in self.api_renamed:
            code, target = "NPU201", self.api_renamed[first]
        elif first in self.api_capability:
            code, target = "NPU203", first
        elif first in self.api_typed:
            code, target = "NPU204", first
        if target is None:
            self.report("NPU202", original, name=rest, note="it is not in torch_npu's torch.cuda support list")
            return None
        new = self.shim_attr(target).with_changes(lpar=updated.lpar, rpar=updated.rpar)
        return self.rewrite(code, original, new, name=first)

    # ----------------------------------------------------------------- device strings (1xx)
    def _device_replacement(self, original, as_device: bool):
        """The shim expression for a "cuda" literal or `f"cuda:{i}"`, with its rule code."""
        literal = _cuda_literal(original)
        if literal is not None:
            _, index = literal
            args = [] if index is None else [cst.Integer(str(index))]
            if as_device:
                return "NPU102", self.shim_call("device", args)
            return "NPU102", self.shim_call("device_str" if args else "device_type", args)
        return None

    def _fstring_replacement(self, expression, as_device: bool):
        return self.shim_call("device" if as_device else "device_str", [expression])

    def _named_like_device(self, node: Optional[cst.CSTNode]) -> bool:
        ident = _last_identifier(node) if node is not None else None
        return ident is not None and is_device_name(ident, self.device_words)

    def _call_takes_device_first(self, call: cst.Call) -> bool:
        qual = self.qualname(call.func)
        if qual in self.device_first_arg_calls:
            return True
        func = call.func
        return isinstance(func, cst.Attribute) and func.attr.value in self.device_first_arg_methods and qual is None

    def _string_context(self, node: cst.CSTNode, role: str = "device") -> Optional[str]:
        """Why a string literal at `node` is a device (or, with role="backend", a backend).

        Returns 'device', 'report' or None (not provable). Walks up through IfExp branches to the
        construct that consumes the value.
        """
        if role == "backend":
            return self._backend_context(node)
        depth = 1
        child = node
        parent = self._parent(depth)
        via_ifexp = False
        while isinstance(parent, cst.IfExp) and (parent.body is child or parent.orelse is child):
            via_ifexp = True
            if self._ifexp_is_device_fallback(parent, child):
                return "device"
            child = parent
            depth += 1
            parent = self._parent(depth)
        if parent is None:
            return None
        if isinstance(parent, cst.Arg) and parent.value is child:
            call = self._parent(depth + 1)
            if not isinstance(call, cst.Call):
                return None
            keyword = parent.keyword.value if parent.keyword is not None else None
            if keyword in self.framework_keywords:
                return "report"
            if keyword in self.device_keywords:
                if keyword == "type" or self.qualname(call.func) == "torch.device":
                    return None  # torch.device(...) is rewritten as a whole
                return "device"
            if keyword is None and parent.star == "" and call.args and call.args[0] is parent:
                if self.qualname(call.func) == "torch.device" and not via_ifexp:
                    return None
                if self._call_takes_device_first(call):
                    return "device"
            return None
        if isinstance(parent, cst.Assign) and parent.value is child:
            if any(self._named_like_device(t.target) for t in parent.targets):
                return "device"
            return None
        if isinstance(parent, cst.AnnAssign) and parent.value is child:
            return "device" if self._named_like_device(parent.target) else None
        if isinstance(parent, cst.Param) and parent.default is child:
            return "device" if self._named_like_device(parent.name) else None
        if isinstance(parent, cst.DictElement) and parent.value is child:
            key = _string_value(parent.key)
            return "device" if key is not None and is_device_name(key, self.device_words) else None
        if isinstance(parent, cst.Return) and parent.value is child:
            if self._functions and is_device_name(self._functions[-1], self.device_words):
                return "device"
        return None

    def _backend_context(self, node: cst.CSTNode) -> Optional[str]:
        depth, child = 1, node
        parent = self._parent(depth)
        fallback = False
        while isinstance(parent, cst.IfExp) and (parent.body is child or parent.orelse is child):
            other = parent.orelse if parent.body is child else parent.body
            fallback = fallback or _string_value(other) in self.other_backends
            child, depth = parent, depth + 1
            parent = self._parent(depth)
        if fallback:  # "nccl" if ... else "gloo": a backend wherever it goes
            if isinstance(parent, cst.Assign) and parent.value is child:
                self.backend_variables.update(
                    t.target.value for t in parent.targets if isinstance(t.target, cst.Name)
                )
            return "device"
        if isinstance(parent, cst.Arg) and parent.value is child:
            call = self._parent(depth + 1)
            if not isinstance(call, cst.Call):
                return None
            if parent.keyword is not None:
                return "device" if parent.keyword.value in self.backend_keywords else None
            first = call.args and call.args[0] is parent and not parent.star
            return "device" if first and self.qualname(call.func) in self.backend_first_arg_calls else None
        if isinstance(parent, (cst.Assign, cst.AnnAssign)) and parent.value is child:
            targets = parent.targets if isinstance(parent, cst.Assign) else [parent]
            if any(_is_named(t.target, self.backend_words) for t in targets):
                for t in targets:
                    if isinstance(t.target, cst.Name):
                        self.backend_variables.add(t.target.value)
                return "device"
            return None
        words = self.backend_words
        if isinstance(parent, cst.Param) and parent.default is child:
            return "device" if _is_named(parent.name, words) else None
        if isinstance(parent, cst.DictElement) and parent.value is child:
            key = _string_value(parent.key)
            return "device" if key is not None and is_device_name(key, words) else None
        if isinstance(parent, cst.Return) and parent.value is child:
            if self._functions and is_device_name(self._functions[-1], words):
                return "device"
        return None

    def _ifexp_is_device_fallback(self, ifexp: cst.IfExp, branch: cst.CSTNode) -> bool:
        other = ifexp.orelse if ifexp.body is branch else ifexp.body
        other_value = _string_value(other)
        if other_value is not None and other_value != "cuda" and other_value.split(":")[0] in self.device_types:
            return True
        if isinstance(other, cst.Call) and self.qualname(other.func) == "torch.device":
            return True
        test = ifexp.test
        for sub in _walk_calls(test):
            if self.qualname(sub.func) == "torch.cuda.is_available":
                return True
        return False

    def leave_SimpleString(self, original_node, updated_node):
        if _cuda_literal(original_node) is None:
            return self._other_string(original_node, updated_node)
        context = self._string_context(original_node)
        if context == "report":
            self.report("NPU109", original_node)
            return updated_node
        if context != "device":
            return updated_node
        code, new = self._device_replacement(original_node, as_device=False)
        new = new.with_changes(lpar=updated_node.lpar, rpar=updated_node.rpar)
        return self.rewrite(code, original_node, new) or updated_node

    def _other_string(self, original, updated):
        """Backend strings (NPU301), environment variable names (NPU601/602)."""
        value = _string_value(original)
        if value is None:
            return updated
        if value in self.env_rename:
            new = self.shim_call("env_name", [updated])
            return self.rewrite("NPU601", original, new, name=value) or updated
        if self.nccl_env_re.match(value):
            self.report("NPU602", original, name=value)
            return updated
        if _is_nccl_spec(value) and self._string_context(original, "backend") == "device":
            new = self.shim_call("dist_backend", [] if value == "nccl" else [updated])
            new = new.with_changes(lpar=updated.lpar, rpar=updated.rpar)
            return self.rewrite("NPU301", original, new) or updated
        return updated

    def leave_FormattedString(self, original_node, updated_node):
        if _cuda_fstring_expr(original_node) is None:
            return updated_node
        context = self._string_context(original_node)
        if context != "device":
            if context == "report":
                self.report("NPU109", original_node)
            return updated_node
        expression = _cuda_fstring_expr(updated_node)
        new = self._fstring_replacement(expression, as_device=False)
        new = new.with_changes(lpar=updated_node.lpar, rpar=updated_node.rpar)
        return self.rewrite("NPU103", original_node, new) or updated_node

    def leave_Call(self, original_node: cst.Call, updated_node: cst.Call):
        self._float64_on_device(original_node)
        func = original_node.func
        if isinstance(func, cst.Attribute) and func.attr.value == "cuda" and self.qualname(func) is None:
            return self._cuda_method(original_node, updated_node)
        if self.flash_functions or self.flash_modules:
            self._flash_call_parameters(original_node)
        qual = self.qualname(func)
        if qual == "torch.device":
            return self._torch_device(original_node, updated_node)
        if qual in ("torch.amp.GradScaler", "torch.amp.grad_scaler.GradScaler"):
            return self._grad_scaler(original_node, updated_node)
        if qual in self.backend_first_arg_calls:
            self._unseen_backend(original_node)
        if qual == "torch.compile":
            for arg in original_node.args:
                if arg.keyword is not None and arg.keyword.value == "mode":
                    mode = _string_value(arg.value)
                    if mode in ("reduce-overhead", "max-autotune"):
                        self.report("NPU903", arg.value, name=mode)
            return updated_node
        if isinstance(func, cst.Name) and func.value == "dict":
            return self._env_dict_keywords(original_node, updated_node)
        if isinstance(func, cst.Attribute) and func.attr.value == "add_argument":
            return self._device_option(original_node, updated_node)
        if (dotted_name(func) or "").split(".")[-1] in ("option", "argument"):
            return self._click_device_option(original_node, updated_node)
        return updated_node

    def _unseen_backend(self, call: cst.Call) -> None:
        """NPU304: init_process_group(backend=cfg.backend): a backend npu-migrate cannot see."""
        for i, arg in enumerate(call.args):
            is_backend = (arg.keyword is not None and arg.keyword.value in self.backend_keywords) or (
                i == 0 and arg.keyword is None and not arg.star
                and self.qualname(call.func) != "torch.distributed.new_group"
            )
            if not is_backend:
                continue
            value = arg.value
            if isinstance(value, (cst.SimpleString, cst.FormattedString, cst.ConcatenatedString)):
                continue  # literals: NPU301 or, if no backend at all, left alone
            if isinstance(value, cst.Name) and value.value in self.backend_variables:
                continue
            if isinstance(value, cst.Call) and self._is_own_literal_call(value):
                continue
            if isinstance(value, (cst.IfExp, cst.Call)) and id(value) in self.claimed:
                continue
            self.report("NPU304", value)

    def _grad_scaler(self, original: cst.Call, updated: cst.Call):
        """torch.amp.GradScaler() / ("cuda", ...) / (device="cuda", ...) -> npu_compat.grad_scaler(...)."""
        args = list(updated.args)
        first = original.args[0] if original.args else None
        if first is not None and first.keyword is None and not first.star:
            if _string_value(first.value) != "cuda":
                return updated
            args = args[1:]
        else:
            for i, arg in enumerate(original.args):
                if arg.keyword is not None and arg.keyword.value == "device":
                    if _string_value(arg.value) != "cuda":
                        return updated
                    del args[i]
                    break
                if arg.star:
                    return updated
        if args:
            args[-1] = args[-1].with_changes(comma=cst.MaybeSentinel.DEFAULT)
        new = updated.with_changes(func=self.shim_attr("grad_scaler"), args=args)
        for arg in original.args:
            self.claim(arg.value)
        return self.rewrite("NPU402", original, new) or updated

    def _env_dict_keywords(self, original: cst.Call, updated: cst.Call):
        """dict(os.environ, CUDA_VISIBLE_DEVICES="0") -> dict(os.environ, **{npu_compat.env_name(...): "0"})."""
        args = list(updated.args)
        changed = False
        for i, arg in enumerate(original.args):
            name = arg.keyword.value if arg.keyword is not None else None
            if name in self.env_rename:
                key = self.shim_call("env_name", [cst.SimpleString(f'"{name}"')])
                mapping = cst.Dict([cst.DictElement(key, args[i].value)])
                new_arg = cst.Arg(value=mapping, star="**", comma=args[i].comma)
                if self.rewrite("NPU601", arg, new_arg, name=name) is not None:
                    args[i] = new_arg
                    changed = True
            elif name is not None and self.nccl_env_re.match(name):
                self.report("NPU602", arg, name=name)
        return updated.with_changes(args=args) if changed else updated

    def _device_values(self, node: cst.CSTNode) -> bool:
        if not isinstance(node, (cst.List, cst.Tuple, cst.Set)):
            return False
        values = [_string_value(e.value) for e in node.elements]
        return "cuda" in values and all(v in self.device_types for v in values)

    def _click_device_option(self, original: cst.Call, updated: cst.Call):
        """@click.option(..., type=click.Choice(["cuda", ...])): add callback=npu_compat.click_device_arg."""
        type_arg = next((a for a in original.args if a.keyword is not None and a.keyword.value == "type"), None)
        if type_arg is None or not isinstance(type_arg.value, cst.Call):
            return updated
        choice = type_arg.value
        if (dotted_name(choice.func) or "").split(".")[-1] != "Choice" or not choice.args:
            return updated
        if not self._device_values(choice.args[0].value):
            return updated
        if any(a.keyword is not None and a.keyword.value == "callback" for a in original.args):
            return updated  # the user's own callback: NPU105 still adds "npu" to the choices
        args = list(updated.args)
        args[-1] = args[-1].with_changes(comma=cst.Comma(whitespace_after=cst.SimpleWhitespace(" ")))
        args.append(cst.Arg(value=self.shim_attr("click_device_arg"), keyword=cst.Name("callback"),
                            equal=cst.AssignEqual(cst.SimpleWhitespace(""), cst.SimpleWhitespace(""))))
        for arg in original.args:
            if arg.keyword is not None and arg.keyword.value == "default" and _cuda_literal(arg.value):
                self.claim(arg.value)
        return self.rewrite("NPU603", type_arg, updated.with_changes(args=args)) or updated

    def _device_option(self, original: cst.Call, updated: cst.Call):
        """argparse option whose choices list "cuda": add type=npu_compat.device_arg (NPU603)."""
        choices = next((a for a in original.args if a.keyword is not None and a.keyword.value == "choices"), None)
        if choices is None or not isinstance(choices.value, (cst.List, cst.Tuple, cst.Set)):
            return updated
        values = [_string_value(e.value) for e in choices.value.elements]
        if "cuda" not in values or not all(v in self.device_types for v in values):
            return updated
        args = list(updated.args)
        type_index = next((i for i, a in enumerate(original.args) if a.keyword is not None and a.keyword.value == "type"), None)
        device_arg = self.shim_attr("device_arg")
        if type_index is None:
            args[-1] = args[-1].with_changes(comma=cst.Comma(whitespace_after=cst.SimpleWhitespace(" ")))
            args.append(cst.Arg(value=device_arg, keyword=cst.Name("type"),
                                equal=cst.AssignEqual(cst.SimpleWhitespace(""), cst.SimpleWhitespace(""))))
        elif isinstance(original.args[type_index].value, cst.Name) and original.args[type_index].value.value == "str":
            args[type_index] = args[type_index].with_changes(value=device_arg)
        else:
            return updated
        for arg in original.args:  # default="cuda" goes through device_arg too: handled
            if arg.keyword is not None and arg.keyword.value == "default" and _cuda_literal(arg.value):
                self.claim(arg.value)
        return self.rewrite("NPU603", choices, updated.with_changes(args=args)) or updated

    def _cuda_method(self, original: cst.Call, updated: cst.Call):
        if self.defines_cuda_method:
            self.report("NPU107", original)
            return updated
        index = None
        keep: list[cst.Arg] = []
        for position, (arg_o, arg_u) in enumerate(zip(original.args, updated.args)):
            keyword = arg_o.keyword.value if arg_o.keyword is not None else None
            if arg_o.star:
                self.report("NPU990", original, what="`.cuda(*args)` cannot be mapped to `.to()`")
                return updated
            if keyword is None and position == 0:
                index = arg_u.value
            elif keyword is None and position == 1:
                keep.append(cst.Arg(value=arg_u.value, keyword=cst.Name("non_blocking"),
                                    equal=cst.AssignEqual(cst.SimpleWhitespace(""), cst.SimpleWhitespace(""))))
            elif keyword == "device":
                index = arg_u.value
            elif keyword is not None:
                keep.append(arg_u.with_changes(comma=cst.MaybeSentinel.DEFAULT))
            else:
                self.report("NPU990", original, what="`.cuda()` with unexpected arguments")
                return updated
        device = self.shim_call("device", [] if index is None else [index])
        args = [cst.Arg(device)] + keep
        assert isinstance(updated.func, cst.Attribute)
        new = updated.with_changes(func=updated.func.with_changes(attr=cst.Name("to")), args=args)
        return self.rewrite("NPU101", original, new) or updated

    def _torch_device(self, original: cst.Call, updated: cst.Call):
        args_o = original.args
        positional = [a for a in args_o if a.keyword is None and not a.star]
        keywords = {a.keyword.value: i for i, a in enumerate(args_o) if a.keyword is not None}
        if len(positional) != len(args_o) - len(keywords) or set(keywords) - {"type", "index"}:
            return updated
        # the device-type argument and the optional index argument, as (original, updated) positions
        type_pos = keywords.get("type", 0 if positional else None)
        index_pos = keywords.get("index", 1 if len(positional) > 1 else None)
        if type_pos is None or type_pos >= len(args_o):
            return updated
        type_o = args_o[type_pos].value
        index_expr = updated.args[index_pos].value if index_pos is not None else None
        literal = _cuda_literal(type_o)
        fexpr = _cuda_fstring_expr(type_o)
        if literal is not None:
            if literal[1] is not None:
                if index_expr is not None:
                    return updated  # torch.device("cuda:0", 1) is an error already; leave it
                index_expr = cst.Integer(str(literal[1]))
            code = "NPU102"
        elif fexpr is not None and index_expr is None:
            index_expr = _cuda_fstring_expr(updated.args[type_pos].value)
            code = "NPU103"
        else:
            return updated
        new = self.shim_call("device", [] if index_expr is None else [index_expr])
        new = new.with_changes(lpar=updated.lpar, rpar=updated.rpar)
        self.claim(type_o)
        return self.rewrite(code, original, new) or updated

    # ----------------------------------------------------------------- diagnostics (NPU930/931)
    def _track_properties(self, target: cst.CSTNode, value: cst.CSTNode) -> None:
        """`props = torch.cuda.get_device_properties(i)`: remember `props` for NPU931."""
        name = dotted_name(target)
        if name is None:
            return
        # plain names live in their function; `self.props` is read from other methods too
        scope = self._properties_vars[0] if "." in name else self._properties_vars[-1]
        bound = isinstance(value, cst.Call) and self.qualname(value.func) in self.properties_getters
        scope[name] = bound
        if bound:
            self._make_hot(name.rsplit(".", 1)[-1])

    def _missing_properties_field(self, node: cst.Attribute) -> bool:
        """`get_device_properties(i).warp_size` / `props.warp_size`: a field NPU properties lack."""
        field = node.attr.value
        if field in self.properties_fields or field.startswith("__"):
            return False
        value = node.value
        if isinstance(value, cst.Call):
            return self.qualname(value.func) in self.properties_getters
        name = dotted_name(value)
        if name is None:
            return False
        local = self._properties_vars[-1]  # a parameter or local of that name hides a module-level one
        return local[name] if name in local else self._properties_vars[0].get(name, False)

    def _float64_on_device(self, call: cst.Call) -> None:
        """NPU930: a call chain that provably puts float64 data on the accelerator.

        Provably: a literal "cuda" device or `.cuda()` in the same chain as a float64 dtype or
        `.double()` (`x.cuda().double()`, `torch.zeros(n, dtype=torch.float64, device="cuda")`). A
        device held in a variable is not provably the accelerator and stays quiet.
        """
        chain = _call_chain(call)
        if any(id(c) in self._float64_seen for c in chain):
            return  # an inner part of this chain was reported already
        if not any(self._makes_float64(c) for c in chain):
            return
        if not any(self._puts_on_accelerator(c) for c in chain):
            return
        self._float64_seen.update(id(c) for c in chain)
        text = normalise_source(self.source_map.original_text_of(call))
        self.note("NPU930", call, what=f"`{text if len(text) <= 80 else text[:77] + '...'}`")

    def _double_tensor_type(self, call: cst.Call) -> bool:
        """`torch.cuda.DoubleTensor(...)`, `x.type(torch.cuda.DoubleTensor)`: float64 on the device."""
        if self.qualname(call.func) == _CUDA_DOUBLE:
            return True
        return any(a.keyword is None and self.qualname(a.value) == _CUDA_DOUBLE for a in call.args)

    def _makes_float64(self, call: cst.Call) -> bool:
        func = call.func
        method = func.attr.value if isinstance(func, cst.Attribute) else None
        if method == "double" and not call.args:
            return True
        if self._double_tensor_type(call):
            return True
        for arg in call.args:
            keyword = arg.keyword.value if arg.keyword is not None else None
            if keyword == "dtype" or (keyword is None and method in ("to", "type")):
                if self.qualname(arg.value) in _FLOAT64:
                    return True
        return False

    def _puts_on_accelerator(self, call: cst.Call) -> bool:
        func = call.func
        if isinstance(func, cst.Attribute) and func.attr.value == "cuda" and self.qualname(func) is None:
            return True
        if self._double_tensor_type(call):
            return True
        method = func.attr.value if isinstance(func, cst.Attribute) else None
        for position, arg in enumerate(call.args):
            keyword = arg.keyword.value if arg.keyword is not None else None
            if keyword == "device" or (keyword is None and position == 0 and method == "to"):
                if self._is_cuda_device(arg.value):
                    return True
        return False

    def _is_cuda_device(self, node: cst.CSTNode) -> bool:
        """"cuda", "cuda:0", f"cuda:{i}", torch.device(<one of those>), or the shim's device."""
        if _cuda_literal(node) is not None or _cuda_fstring_expr(node) is not None:
            return True
        if isinstance(node, cst.Call) and dotted_name(node.func) in (
            f"{self.shim}.device", f"{self.shim}.device_str", f"{self.shim}.device_type"
        ):
            return True  # what an earlier run made of "cuda": still the accelerator (check after migrate)
        if isinstance(node, cst.Call) and self.qualname(node.func) == "torch.device" and node.args:
            first = node.args[0].value
            return _cuda_literal(first) is not None or _cuda_fstring_expr(first) is not None
        return False

    # ----------------------------------------------------------------- comparisons (NPU104/108)
    def _device_like_operand(self, node: cst.CSTNode) -> bool:
        if isinstance(node, (cst.Name, cst.Attribute)):
            ident = _last_identifier(node)
            if ident == "type" and isinstance(node, cst.Attribute):
                return True
            return ident is not None and is_device_name(ident, self.device_words)
        if isinstance(node, cst.Call) and isinstance(node.func, cst.Name) and node.func.value == "str":
            return len(node.args) == 1 and self._device_like_operand(node.args[0].value)
        return False

    def _backend_like_operand(self, node: cst.CSTNode) -> bool:
        if isinstance(node, cst.Call):
            qual = self.qualname(node.func) or ""
            return qual in self.backend_getters or _last_identifier(node.func) == "get_backend"
        return _is_named(node, self.backend_words)

    def _guards_cuda_only_feature(self, comparison: cst.CSTNode) -> bool:
        scope: Optional[cst.CSTNode] = self._if_tests[-1] if self._if_tests else None
        if scope is None and self._statements:
            scope = self._statements[-1]
        if scope is None:
            return False
        # the whole `if`, body included: with hot slices, its cold statements are put back first
        return bool(self.feature_gate_re.search(self.source_map.original_text_of(scope)))

    def leave_Comparison(self, original_node: cst.Comparison, updated_node: cst.Comparison):
        if len(original_node.comparisons) != 1:
            return updated_node
        target_o = original_node.comparisons[0]
        op = target_o.operator
        left_o, right_o = original_node.left, target_o.comparator
        left_u, right_u = updated_node.left, updated_node.comparisons[0].comparator
        if isinstance(op, (cst.Equal, cst.NotEqual)) and "nccl" in (_string_value(left_o), _string_value(right_o)):
            operand = right_u if _string_value(left_o) == "nccl" else left_u
            other = right_o if _string_value(left_o) == "nccl" else left_o
            if not self._backend_like_operand(other):
                return updated_node
            new = self.shim_call("is_accelerator_backend", [operand])
            if isinstance(op, cst.NotEqual):
                new = cst.UnaryOperation(operator=cst.Not(), expression=new)
            new = new.with_changes(lpar=updated_node.lpar, rpar=updated_node.rpar)
            return self.rewrite("NPU302", original_node, new) or updated_node
        if isinstance(op, (cst.Equal, cst.NotEqual)):
            if _string_value(right_o) == "cuda" and self._device_like_operand(left_o):
                operand = left_u
            elif _string_value(left_o) == "cuda" and self._device_like_operand(right_o):
                operand = right_u
            else:
                return updated_node
            if self._guards_cuda_only_feature(original_node):
                self.report("NPU108", original_node)
                return updated_node
            new: cst.BaseExpression = self.shim_call("is_accelerator_type", [operand])
            if isinstance(op, cst.NotEqual):
                new = cst.UnaryOperation(operator=cst.Not(), expression=new)
            new = new.with_changes(lpar=updated_node.lpar, rpar=updated_node.rpar)
            return self.rewrite("NPU104", original_node, new) or updated_node
        if isinstance(op, (cst.In, cst.NotIn)) and _string_value(left_o) == "cuda":
            if not self._device_like_operand(right_o):
                return updated_node
            if self._guards_cuda_only_feature(original_node):
                self.report("NPU108", original_node)
                return updated_node
            new = updated_node.with_changes(
                left=self.shim_call("device_type").with_changes(lpar=left_u.lpar, rpar=left_u.rpar)
            )
            return self.rewrite("NPU104", original_node, new) or updated_node
        return updated_node

    # ----------------------------------------------------------------- device lists (NPU105)
    def _device_list_context(self) -> bool:
        node = self._parents[-1]
        parent = self._parent()
        if isinstance(parent, cst.ComparisonTarget) and parent.comparator is node:
            return isinstance(parent.operator, (cst.In, cst.NotIn))
        if isinstance(parent, cst.Arg) and parent.value is node:
            if parent.keyword is not None and parent.keyword.value == "choices":
                return True
            call = self._parent(2)
            if isinstance(call, cst.Call) and parent.keyword is None:
                name = dotted_name(call.func) or ""
                return name.split(".")[-1] == "Choice"
        return False

    def _add_npu(self, original, updated):
        values = [_string_value(e.value) if isinstance(e, cst.Element) else None for e in original.elements]
        if len(values) < 2 or any(v is None for v in values):
            return updated
        if "cuda" not in values or not all(v in self.device_types for v in values):
            return updated
        if not self._device_list_context():
            return updated
        if "npu" in values:  # already lists the NPU: nothing to do, nothing to report
            for element in original.elements:
                self.claim(element.value)
            return updated
        i = values.index("cuda")
        cuda_el = updated.elements[i]
        quote = cuda_el.value.quote if isinstance(cuda_el.value, cst.SimpleString) else '"'
        new_el = cst.Element(value=cst.SimpleString(f"{quote}npu{quote}"), comma=cuda_el.comma)
        if isinstance(cuda_el.comma, cst.MaybeSentinel):
            cuda_el = cuda_el.with_changes(comma=cst.Comma(whitespace_after=cst.SimpleWhitespace(" ")))
        elements = list(updated.elements)
        elements[i:i + 1] = [cuda_el, new_el]
        new = updated.with_changes(elements=elements)
        for element in original.elements:
            self.claim(element.value)
        return self.rewrite("NPU105", original, new) or updated

    def leave_List(self, original_node, updated_node):
        return self._add_npu(original_node, updated_node)

    def leave_Tuple(self, original_node, updated_node):
        return self._add_npu(original_node, updated_node)

    def leave_Set(self, original_node, updated_node):
        return self._add_npu(original_node, updated_node)


def _call_chain(node: cst.CSTNode) -> list[cst.Call]:
    """The calls of a method chain, outermost first: `a.cuda()[0].double()` -> [double, cuda]."""
    calls = []
    while True:
        if isinstance(node, cst.Call):
            calls.append(node)
            node = node.func
        elif isinstance(node, (cst.Attribute, cst.Subscript)):
            node = node.value
        else:
            return calls


def _walk_calls(node: cst.CSTNode):
    """Every Call inside an expression (a small explicit walk; conditions are short)."""
    stack = [node]
    while stack:
        current = stack.pop()
        if isinstance(current, cst.Call):
            yield current
        stack.extend(current.children)


# Nodes on the way from a module to its import statements (the statement lines included).
_HOLDS_STATEMENTS = (
    cst.Module, cst.SimpleStatementLine, cst.BaseCompoundStatement, cst.BaseSuite, cst.Else,
    cst.ExceptHandler, cst.ExceptStarHandler, cst.Finally, cst.MatchCase,
)


class ImportPruner(CachedTransformerDispatch, cst.CSTTransformer):
    """Second, rare pass: drop torch.cuda imports whose every use was rewritten (NPU206)."""

    def __init__(self, targets: list[cst.CSTNode], torch_imported: bool) -> None:
        super().__init__()
        self.targets = {id(t) for t in targets}
        self.torch_imported = torch_imported

    def on_visit(self, node: cst.CSTNode) -> bool:
        # Imports sit in statement lines, statement lines in blocks: nothing below an expression
        # (or a decorator, parameters, ...) can hold one, so those subtrees are not rebuilt.
        if not isinstance(node, _HOLDS_STATEMENTS):
            return False
        return super().on_visit(node)

    def leave_Import(self, original_node, updated_node):
        if id(original_node) not in self.targets:
            return updated_node
        names = [dotted_name(a.name) for a in original_node.names]
        kept = []
        for alias, name in zip(original_node.names, names):
            if name and name.startswith("torch.cuda"):
                if alias.asname is None and not self.torch_imported:
                    kept.append(alias.with_changes(name=cst.Name("torch")))
                continue
            kept.append(alias)
        if not kept:
            return cst.RemoveFromParent()
        kept[-1] = kept[-1].with_changes(comma=cst.MaybeSentinel.DEFAULT)
        return updated_node.with_changes(names=kept)

    def leave_ImportFrom(self, original_node, updated_node):
        if id(original_node) not in self.targets:
            return updated_node
        module = dotted_name(original_node.module) or ""
        if module == "torch":
            kept = [a for a in updated_node.names if dotted_name(a.name) != "cuda"]
        else:
            kept = []
        if not kept:
            return cst.RemoveFromParent()
        kept[-1] = kept[-1].with_changes(comma=cst.MaybeSentinel.DEFAULT)
        return updated_node.with_changes(names=kept)
