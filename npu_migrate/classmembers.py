"""A class body's attribute stores, indexed once per class.

callgates21 (`self.X` of a class, `_attr`) and capchains30 (`self.<member> = C(...)`,
`member_classes`) asked one class body about one member at a time, walking the whole body for
each question: on vLLM's `model_executor/layers` about a tenth of the run (session 43's profile).
`members(owner, name)` walks the body once and answers every later question from the index; the
answers are the nodes the old walks collected, in the same (ast.walk) order.

The index depends only on the class's own syntax tree, so it is kept per tree node (weakly: it
goes with the tree) and may serve several runs of one process.
"""

import ast
import weakref
from typing import NamedTuple


class Members(NamedTuple):
    """The stores of one attribute name in one class body."""

    self_assigns: tuple  # (`self.<name> = value`: a plain assignment with one target)
    stores: tuple  # (every `<anything>.<name>` in a store or del context)
    bare: tuple  # (`<anything>.<name>: T` with no value)


_NONE = Members((), (), ())
_INDEX: "weakref.WeakKeyDictionary[ast.ClassDef, dict]" = weakref.WeakKeyDictionary()


def members(owner: ast.ClassDef, name: str) -> Members:
    """The stores of `name` in `owner`'s body (nested classes and functions included)."""
    index = _INDEX.get(owner)
    if index is None:
        index = _INDEX[owner] = _build(owner)
    return index.get(name, _NONE)


def _build(owner: ast.ClassDef) -> dict:
    found: dict = {}

    def entry(name: str) -> tuple:
        if name not in found:
            found[name] = ([], [], [])
        return found[name]

    for node in ast.walk(owner):
        if isinstance(node, ast.Attribute) and not isinstance(node.ctx, ast.Load):
            entry(node.attr)[1].append(node)
        elif isinstance(node, ast.Assign):
            if len(node.targets) == 1 and isinstance(node.targets[0], ast.Attribute) \
                    and isinstance(node.targets[0].value, ast.Name) and node.targets[0].value.id == "self":
                entry(node.targets[0].attr)[0].append(node)
        elif isinstance(node, ast.AnnAssign):
            if node.value is None and isinstance(node.target, ast.Attribute):
                entry(node.target.attr)[2].append(node)
    return {name: Members(tuple(a), tuple(s), tuple(b)) for name, (a, s, b) in found.items()}
