"""Enum members only a user's configuration names (issue #16, policy P1; round-32 audit GB#10). For
testcallers27.py's enum choices (enumchoices29.py), beside the members a command-line option offers.

ColossalAI's legacy AMP:

    # legacy/amp/amp_type.py
    class AMP_TYPE(Enum):
        APEX = "apex"
        TORCH = "torch"
        NAIVE = "naive"

    # legacy/amp/__init__.py
    def convert_to_amp(model, optimizer, criterion, mode: AMP_TYPE, amp_config=None):
        if mode == AMP_TYPE.TORCH:
            ...
        elif mode == AMP_TYPE.APEX:
            model, optimizer = convert_to_apex_amp(model, optimizer, amp_config)   # `import apex.amp` inside

    # legacy/initialize.py: `fp16_cfg = gpc.config.get("fp16", None)`, and only where the user's
    # configuration has one, `convert_to_amp(..., mode=fp16_cfg.pop("mode"), ...)`

The library never produces `AMP_TYPE.APEX`: every reference to it is an operand of a comparison. The
member reaches `mode` only from the user's configuration file (`fp16 = dict(mode=AMP_TYPE.APEX)`), so
the Apex path is the user's explicit backend choice (P1), as enumchoices29 reads a member a
command-line option offers. `compared_only(trees)` gives such members: "Cls.MEMBER" of a module-level
`...Enum` class of the library whose every library reference (tests, benchmarks and examples aside:
testcallers27's library) is `Cls.MEMBER` compared (`==`, `!=`, `is`, `in` a literal tuple), an
annotation, an `isinstance` test or an import; the member not a device, backend or default word
(enumchoices29's `_NOT_A_CHOICE`: `AUTO`, `NONE`, `CUDA`, ...), in an enum no instance method of
which resolves to another member. testcallers27 then reads a reference in the body of `if x ==
Cls.MEMBER:` (or `elif`) as chosen: info "reached on an NPU host only when `mode == AMP_TYPE.APEX`
(the choice `AMP_TYPE.APEX`) is chosen ...". Never dropped.

Kept (the nearest true cases): a member the library itself uses as a value (a default `mode:
AMP_TYPE = AMP_TYPE.APEX`, a stored or returned member: a state the code reaches on its own, as
SGLang's `ForwardMode.DECODE`), an enum the library builds from a value (`AMP_TYPE(name)`,
`AMP_TYPE[name]`), iterates or subclasses (any member may come out), a reference under `!=` or in an
`else:`.
"""

from __future__ import annotations

import ast
from typing import Callable, Iterable

from . import astcache

_COMPARE_OPS = (ast.Eq, ast.NotEq, ast.Is, ast.IsNot, ast.In, ast.NotIn)


def _enums(trees: Iterable[ast.Module]) -> dict:
    """{class name: [member names]} of the module-level enums no instance method of which resolves
    to another member, their names defined once."""
    from .enumchoices29 import NOT_A_CHOICE, enum_values, is_enum, member_names, resolves

    out: dict = {}
    seen: dict = {}
    for tree in trees:
        for node in tree.body:
            if isinstance(node, ast.ClassDef):
                seen[node.name] = seen.get(node.name, 0) + 1
                if is_enum(node) and not resolves(node):
                    values = enum_values(node)
                    out[node.name] = [n for n in member_names(node) if n.lower() not in NOT_A_CHOICE
                                      and str(values.get(n, n)).lower() not in NOT_A_CHOICE]
    return {name: members for name, members in out.items() if seen.get(name) == 1 and members}


def _compared(node: ast.AST, parents: dict) -> bool:
    """`Cls.MEMBER` as an operand of a comparison (or an element of a literal tuple compared)."""
    up = parents.get(id(node))
    if isinstance(up, (ast.Tuple, ast.List, ast.Set)) and node in up.elts:
        node, up = up, parents.get(id(up))
    return isinstance(up, ast.Compare) and all(isinstance(op, _COMPARE_OPS) for op in up.ops)


def _harmless(node: ast.AST, parents: dict) -> bool:
    """The class named as a type only: an annotation, `isinstance(x, Cls)`."""
    up = parents.get(id(node))
    if isinstance(up, ast.Call) and astcache.dotted(up.func) in ("isinstance", "issubclass") and node in up.args[1:]:
        return True
    if isinstance(up, ast.Tuple) and isinstance(parents.get(id(up)), ast.Call) \
            and astcache.dotted(parents[id(up)].func) in ("isinstance", "issubclass"):
        return True
    child = node
    while up is not None and not isinstance(up, (ast.stmt, ast.arguments)):
        child, up = up, parents.get(id(up))
    if isinstance(up, ast.arg) or (isinstance(up, ast.arguments)):
        return False
    if isinstance(up, ast.AnnAssign) and child is up.annotation:
        return True
    if isinstance(up, (ast.FunctionDef, ast.AsyncFunctionDef)) and child is up.returns:
        return True
    return False


def _in_annotation(node: ast.AST, parents: dict) -> bool:
    current = node
    while current is not None:
        up = parents.get(id(current))
        if isinstance(up, ast.arg) and current is up.annotation:
            return True
        if isinstance(up, (ast.stmt, ast.arguments)) or up is None:
            return False
        current = up


def compared_only(trees_naming: Callable[[bytes], Iterable[ast.Module]]) -> frozenset:
    """"Cls.MEMBER" of each library enum member the library only compares (this module's doc).
    `trees_naming(word)`: the library's trees whose text holds `word`."""
    enums = _enums(trees_naming(b"Enum"))
    out: set = set()
    for name, members in enums.items():
        used: set = set()  # (members the library uses as a value)
        whole = True
        for tree in trees_naming(name.encode()):
            parents = astcache.parents(tree)
            for node in astcache.walk(tree):
                if isinstance(node, ast.ClassDef) and any((astcache.dotted(b) or "").rsplit(".", 1)[-1] == name
                                                          for b in node.bases):
                    whole = False  # (a subclass: its members and methods are another story)
                ref = (isinstance(node, ast.Name) and node.id == name) or (
                    isinstance(node, ast.Attribute) and node.attr == name and isinstance(node.ctx, ast.Load))
                if not ref or not isinstance(node.ctx, ast.Load):
                    continue
                up = parents.get(id(node))
                if isinstance(up, ast.Attribute) and up.value is node:
                    if up.attr in members or up.attr not in ("value", "name"):
                        if up.attr in members:
                            if not _compared(up, parents):
                                used.add(up.attr)
                        elif not up.attr.startswith("__") and up.attr.isupper():
                            used.add(up.attr)  # (a member a device word names: none of ours)
                        else:
                            whole = False  # (`Cls.__members__`, `Cls._missing_`, a method: built otherwise)
                    continue
                if isinstance(up, ast.ClassDef):
                    continue
                if _harmless(node, parents) or _in_annotation(node, parents):
                    continue
                whole = False  # (`Cls(name)`, `Cls[name]`, `for m in Cls`, handed on: any member may come out)
            if not whole:
                break
        if whole:
            out.update(f"{name}.{m}" for m in members if m not in used)
    return frozenset(out)
