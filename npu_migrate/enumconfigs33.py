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
class whose one base is `Enum`, no member of which the library produces: every library reference
(tests, benchmarks and examples aside: testcallers27's library) is `Cls.MEMBER` compared (`==`,
`!=`, `is`, `in` a literal tuple), an annotation, an `isinstance` test or an import (the enum is
a vocabulary of the user's input); the member not a device, backend or default word
(enumchoices29's `_NOT_A_CHOICE`: `AUTO`, `NONE`, `CUDA`, ...), in an enum no instance method of
which resolves to another member. testcallers27 then reads a reference in the body of `if x ==
Cls.MEMBER:` (or `elif`) as chosen: info "reached on an NPU host only when `mode == AMP_TYPE.APEX`
(the choice `AMP_TYPE.APEX`) is chosen ...". Never dropped.

Kept (the nearest true cases): an enum one member of which the library itself uses as a value (a
default `mode: AMP_TYPE = AMP_TYPE.APEX`, a stored or returned member: a state the code reaches on
its own, as SGLang's `ForwardMode.DECODE`; a vocabulary another package extends, as vLLM's
`PlatformEnum.OOT`, which a platform plugin sets while vLLM sets the others), an enum the library builds from a value (`AMP_TYPE(name)`,
`AMP_TYPE[name]`), iterates or subclasses (any member may come out), an `IntEnum`, a `StrEnum` or a
`(str, Enum)` (its members equal numbers or strings the library may compute), a reference under `!=`
or in an `else:`.
"""

from __future__ import annotations

import ast
from typing import Callable, Iterable

from . import astcache

_COMPARE_OPS = (ast.Eq, ast.NotEq, ast.Is, ast.IsNot, ast.In, ast.NotIn)


def _enums(trees: Iterable[ast.Module], every: dict) -> dict:
    """{class name: [member names]} of the module-level enums no instance method of which resolves
    to another member, their names defined once (`every`: each one's members, default words too)."""
    from .enumchoices29 import NOT_A_CHOICE, enum_values, member_names, resolves

    out: dict = {}
    seen: dict = {}
    for tree in trees:
        for node in tree.body:
            if isinstance(node, ast.ClassDef):
                seen[node.name] = seen.get(node.name, 0) + 1
                if _plain_enum(node) and not resolves(node):
                    values = enum_values(node)
                    every[node.name] = set(member_names(node))
                    out[node.name] = [n for n in member_names(node) if n.lower() not in NOT_A_CHOICE
                                      and str(values.get(n, n)).lower() not in NOT_A_CHOICE]
    return {name: members for name, members in out.items() if seen.get(name) == 1 and members}


def _plain_enum(node: ast.ClassDef) -> bool:
    """A class whose one base is `Enum` itself: no `IntEnum`/`StrEnum`/`(str, Enum)`, whose members
    compare equal to plain numbers or strings the library may compute."""
    return len(node.bases) == 1 and not node.keywords and astcache.dotted(node.bases[0]) in ("Enum", "enum.Enum")


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
    every: dict = {}
    enums = _enums(trees_naming(b"Enum"), every)
    if not enums:
        return frozenset()
    used: dict = {name: set() for name in enums}  # (members the library uses as a value)
    whole = set(enums)
    for tree in trees_naming(b""):
        parents = None
        for node in astcache.walk(tree):
            if isinstance(node, ast.ClassDef):
                for base in node.bases:
                    word = (astcache.dotted(base) or "").rsplit(".", 1)[-1]
                    whole.discard(word)  # (a subclass: its members and methods are another story)
                continue
            name = node.id if isinstance(node, ast.Name) else node.attr if isinstance(node, ast.Attribute) else None
            if name not in whole or not isinstance(node.ctx, ast.Load):
                continue
            if parents is None:
                parents = astcache.parents(tree)
            up = parents.get(id(node))
            if isinstance(up, ast.Attribute) and up.value is node:
                if up.attr in every[name]:
                    if not _compared(up, parents):
                        used[name].add(up.attr)
                else:
                    whole.discard(name)  # (`Cls.__members__`, `Cls._missing_`, a method: built otherwise)
                continue
            if _harmless(node, parents) or _in_annotation(node, parents):
                continue
            whole.discard(name)  # (`Cls(name)`, `Cls[name]`, `for m in Cls`, handed on: any member may come out)
    # (an enum one member of which the library produces is a state it goes through, or a vocabulary
    # another package may extend, as vLLM's `PlatformEnum.OOT` that a platform plugin sets: the
    # members of an enum the library never produces at all are a user's input)
    return frozenset(f"{name}.{m}" for name in whole if not used[name] for m in enums[name])
