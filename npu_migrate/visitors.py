"""libcst visitors whose callbacks are found once per node type, not at every node.

libcst looks a visitor's callbacks up by name at every node, and at every attribute of every node
(`visit_If_test`): a formatted name and a lookup that mostly finds a no-op stub. The answer
depends only on the visitor's class and the node's type, so the classes here find it once; the
callbacks themselves run exactly as libcst would run them. Used by the leftover sweep and the
NPU206 import pruner (the rule dispatcher keeps its own table of family hooks).
"""

from __future__ import annotations

import re

import libcst as cst

# isinstance(node, cst.BaseStatement), as a set lookup (an isinstance check against an abstract
# class costs more than the rest of on_visit)
STATEMENTS: frozenset[type] = frozenset(
    cls for cls in vars(cst).values() if isinstance(cls, type) and cst.BaseStatement in cls.__mro__
)  # the MRO, not issubclass: an ABC subclass check at every start costs several ms

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
