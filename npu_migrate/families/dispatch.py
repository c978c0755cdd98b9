"""One traversal per file: every rule family's hooks, called from one libcst transformer.

The dispatcher owns the traversal; the families (`FAMILIES`, in order) own the decisions. At each
node it:
1. skips inert nodes (whitespace, punctuation, numbers) and cold statements (no trigger word in
   their text, no name bound to a CUDA module: nothing to rewrite or report);
2. on the way down, runs the context's bookkeeping (`Context.visit_<Node>`: imports bind names,
   assignments shadow them, the enclosing function, `if` and statement) and then every family's
   `visit_<Node>`; a False from any of them skips the node's children;
3. on the way up, asks the families in order (`leave_<Node>(original, updated)`) until one
   answers; a Name or Attribute chain that no family answered and that resolves through the
   imports (`torch.cuda.synchronize`) is offered to the families' `reference` hooks the same way;
4. then runs every family's and the context's `depart_<Node>(original)`, which always run.
A node under which nothing was replaced is handed back as the original object, so an untouched
module comes back as itself and the engine does not generate its code again. After the traversal
`finish(new_module)` gives each family its end-of-module step (NPU206's import pruning).
"""

from __future__ import annotations

import functools
import re
from typing import Optional

import libcst as cst

from .. import hotslice
from ..visitors import STATEMENTS
from . import FAMILIES
from .context import EXTRA_HOT, INERT, Context

_NAME_OR_ATTRIBUTE = (cst.Name, cst.Attribute)
_ATTRIBUTE_HOOK = re.compile(r"(?:visit|leave)_([A-Za-z]+)_\w+")


@functools.cache
def _attribute_types(classes: tuple) -> frozenset:
    """Node types with attribute callbacks (`visit_If_test`) in any of the classes."""
    types = set()
    for cls in classes:
        for name in dir(cls):
            match = _ATTRIBUTE_HOOK.fullmatch(name)
            node_type = getattr(cst, match.group(1), None) if match else None
            if isinstance(node_type, type):
                types.add(node_type)
    return frozenset(types)


class Dispatcher(cst.CSTTransformer):
    """Runs the rule families over one module in a single traversal (see the module docstring)."""

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
        first_party: frozenset = frozenset(),
        sibling_classes: Optional[dict[str, str]] = None,
        foreign_bound: Optional[dict] = None,
    ) -> None:
        super().__init__()
        self.ctx = Context(module, source_map, relpath, enabled, shim, shim_module, defines_cuda_method,
                           hot_statement, suppressed, first_party, sibling_classes, foreign_bound)
        self.families = tuple(family(self.ctx) for family in FAMILIES)
        self._hot_patterns = hotslice.branches(hot_statement) + hotslice.branches(EXTRA_HOT) if hot_statement else ()
        # Replacements made so far, and how many there were when each open node was entered: a
        # node under which nothing was replaced is kept as the original object (see on_leave).
        self.replacements = 0
        self._replacements_at_visit: list[int] = []
        self._hooks: dict[tuple[str, type], tuple] = {}
        self._reference_hooks = self._find("reference")
        self._attribute_types = _attribute_types((Context, *FAMILIES))

    # ------------------------------------------------------------------ the hooks, found once
    def _find(self, name: str, with_context: bool = False) -> tuple:
        objects = (self.ctx, *self.families) if with_context else self.families
        return tuple(getattr(obj, name) for obj in objects if hasattr(type(obj), name))

    def _hooks_for(self, kind: str, node_type: type) -> tuple:
        key = (kind, node_type)
        hooks = self._hooks.get(key)
        if hooks is None:
            name = f"{kind}_{node_type.__name__}"
            if kind == "depart":  # the families' first, the context's bookkeeping last
                hooks = self._find(name) + ((getattr(self.ctx, name),) if hasattr(type(self.ctx), name) else ())
            else:
                hooks = self._find(name, with_context=kind == "visit")
            self._hooks[key] = hooks
        return hooks

    # ------------------------------------------------------------------ the traversal
    def on_visit(self, node: cst.CSTNode) -> bool:
        if type(node) in INERT:
            return False  # nothing to rewrite or report below (on_leave hands it back as is)
        ctx = self.ctx
        ctx.parents.append(node)
        self._replacements_at_visit.append(self.replacements)
        if ctx.hot_statement is not None and type(node) in STATEMENTS:
            text = ctx.source_map.text_of(node)
            # (the patterns' alternatives one by one: the same answer, found sooner)
            if not any(p.search(text) for p in self._hot_patterns) and not (
                ctx.alias_re is not None and ctx.alias_re.search(text)
            ):
                ctx.cold.add(id(node))
                ctx.shadow_statement(node)
                return False
        descend = True
        for hook in self._hooks_for("visit", type(node)):
            if hook(node) is False:
                descend = False
        return descend

    def on_leave(self, original_node, updated_node):
        if type(original_node) in INERT:
            return updated_node  # not entered: the original node itself
        try:
            if id(original_node) in self.ctx.cold:
                return updated_node
            if self.replacements == self._replacements_at_visit[-1]:
                # libcst rebuilt this node from children that all came back unchanged: the copy
                # equals the original. Handing on the original itself lets the engine see an
                # untouched module (`new is module`) and skip generating its code again.
                updated_node = original_node
            node_type = type(original_node)
            result = None
            for hook in self._hooks_for("leave", node_type):
                result = hook(original_node, updated_node)
                if result is not None:
                    break
            if result is None and node_type in _NAME_OR_ATTRIBUTE:
                result = self._reference(original_node, updated_node)
            if result is None:
                result = updated_node
            for hook in self._hooks_for("depart", node_type):
                hook(original_node)
            if result is not updated_node:
                self.replacements += 1
            return result
        finally:
            self.ctx.parents.pop()
            self._replacements_at_visit.pop()

    def _reference(self, original, updated):
        """A name chain resolved through the imports: the families' `reference` hooks decide."""
        ctx = self.ctx
        if type(original) is cst.Name and (original.value not in ctx.aliases or not ctx.is_load_name()):
            return None
        if not ctx.is_chain_top():
            return None
        qual = ctx.qualname(original)
        if qual is None:
            return None
        result = None
        for hook in self._reference_hooks:
            result = hook(original, updated, qual)
            if result is not None:
                break
        if qual == "torch.cuda" or qual.startswith("torch.cuda."):
            ctx.count_reference(original, result is not None and result is not updated)
        return result

    def on_visit_attribute(self, node: cst.CSTNode, attribute: str) -> None:
        if type(node) in self._attribute_types:
            for hook in self._find(f"visit_{type(node).__name__}_{attribute}", with_context=True):
                hook(node)

    def on_leave_attribute(self, original_node: cst.CSTNode, attribute: str) -> None:
        if type(original_node) in self._attribute_types:
            for hook in self._find(f"leave_{type(original_node).__name__}_{attribute}", with_context=True):
                hook(original_node)

    def finish(self, new_module: cst.Module) -> cst.Module:
        """After the traversal: each family's end-of-module step, in order."""
        for family in self.families:
            step = getattr(family, "finish", None)
            if step is not None:
                new_module = step(new_module)
        return new_module
