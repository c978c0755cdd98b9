"""State that holds an "off" value unless an opt-in choice set it (issue #16, policy P1; round 33
HA#24, HB#3, h191). Read by optchoice29.py's `_off`, so testcallers27.py's walk takes such a test as
the choice it derives from.

optchoice29 reads a test of a configuration field off by default (`if x.enable_F:`), and `self.A`
bound only from such a test. An option's value often flows one step further: the code under the
option builds an object or sets a flag, and later code tests that state instead of the option:

    # vLLM's Model Runner V2 (HA#24)
    self.batch_sharder: BatchSharder | None = None          # the off value
    if self.parallel_config.enable_batch_sharded_sampling:  # ParallelConfig's field, default None
        self.batch_sharder = BatchSharder(...)               # set only under the option
    ...
    shard_metadata = None                                    # a local, off
    if self.batch_sharder is not None:                       # off unless the option is on
        ..., shard_metadata = self.batch_sharder.shard_sampler_inputs(...)
    if shard_metadata is not None:                           # the same, one step further
        out = gather_sampler_output(...)                     # its Triton kernels: HA#24

    # vLLM's ViT attention (HB#3)
    self.fp8_enabled = False
    mm_cfg = get_multimodal_config()
    if mm_cfg is None or mm_cfg.mm_encoder_attn_dtype != "fp8":   # default None: taken
        return
    self.fp8_enabled = True                                  # only after the exit
    ...
    if self.fp8_enabled:
        query, key, value = self._quantize_qkv_fp8(query, key, value)   # its Triton kernel

`state_off(fields, part, parents, depth)` answers for a test operand `S` or `S is not None`, S
either `self.A` (the stores are every store of `self.A` in its class; A stored on no other object in
the library, optchoice29's `_foreign`) or a local name of the function (not a parameter, not
`global`/`nonlocal`; its stores are every binding of the name in the function). Every store must be
either the off value (`= None`, `= False`; an annotation alone binds nothing) or lie behind a gate
optchoice29 reads off at the default (an enclosing `if`, an earlier early exit taken there, the
true branch of `X() if <opt-in> else None`), and at least one store must be so gated. The answer is
optchoice29's (operand, field), worded "`self.fp8_enabled` is chosen (`mm_cfg.mm_encoder_attn_dtype`;
`MultiModalConfig.mm_encoder_attn_dtype` defaults to None (...))"; policy P1 makes it
info, never dropped. `state_taken(fields, part, parents)` answers for an early exit's test the same
state holds at its off value (`S is None`, `not S`): what follows the exit is the opt-in's too.

Kept (the nearest true cases, tests/test_h191.py): a store outside any gate (`self.batch_sharder =
BatchSharder()` in `__init__`), a store under a gate on by default or the library sets, a store
under an `else:`, a binding by a `for`/`with`/walrus/augmented assignment/`del`, a parameter, a
name also stored on another object or by another class (a subclass's own ungated store), a name only
ever None (never set: no choice to name), an `if S is None:` body (true at the off value), an exit
`if S is not None: return`.
"""

from __future__ import annotations

import ast
import weakref
from typing import Optional

from . import astcache
from .gatewalk30 import gate_of

_DEFS = (ast.FunctionDef, ast.AsyncFunctionDef)
_MAX_DEPTH = 3  # (optchoice29's bound on a chain of readings)
_STORES: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # ({reader: {state: its stores}}: one walk each)
_OWNERS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # ({reader: {attribute: classes storing it}})
_BUSY: set = set()  # (the states being read: a store gated by a test of its own state answers nothing)


def _subject(part: ast.AST) -> Optional[ast.AST]:
    """`S` of `S` or `S is not None` (a test false while S holds None or False)."""
    if isinstance(part, ast.Compare) and len(part.ops) == 1 and isinstance(part.ops[0], ast.IsNot) \
            and isinstance(part.comparators[0], ast.Constant) and part.comparators[0].value is None:
        part = part.left
    if isinstance(part, ast.Attribute) and isinstance(part.value, ast.Name) and part.value.id == "self":
        return part
    return part if isinstance(part, ast.Name) else None


def _enclosing(node: ast.AST, parents: dict, kinds) -> Optional[ast.AST]:
    current = parents.get(id(node))
    while current is not None and not isinstance(current, kinds):
        current = parents.get(id(current))
    return current


def _statement(target: ast.AST, parents: dict) -> Optional[ast.AST]:
    """The assignment binding `target` (directly or as an element of a tuple/list target), or None
    for any other binding (`for`, `with`, walrus, `del`, augmented assignment)."""
    current = parents.get(id(target))
    while isinstance(current, (ast.Tuple, ast.List, ast.Starred)):
        current = parents.get(id(current))
    return current if isinstance(current, (ast.Assign, ast.AnnAssign)) else None


def _binds(node: ast.AST, subject: ast.AST) -> bool:
    """`node` binds (or deletes) the subject: `self.A` as the subject's, or the local name."""
    if isinstance(subject, ast.Attribute):
        return isinstance(node, ast.Attribute) and node.attr == subject.attr and isinstance(node.value, ast.Name) \
            and node.value.id == "self" and isinstance(node.ctx, (ast.Store, ast.Del))
    return isinstance(node, ast.Name) and node.id == subject.id and isinstance(node.ctx, (ast.Store, ast.Del))


def _stores(subject: ast.AST, parents: dict, fields) -> Optional[list]:
    """[(statement, target)] binding the subject, or None where some binding is of another kind."""
    if isinstance(subject, ast.Attribute):
        if subject.attr in fields._foreign:
            return None  # (another object's code stores it)
        scope = _enclosing(subject, parents, ast.ClassDef)
        if scope is None or _owners(fields, subject.attr) != {scope.name}:
            return None  # (another class, a subclass perhaps, stores its own `self.A`)
    else:
        scope = _enclosing(subject, parents, (*_DEFS, ast.Lambda, ast.ClassDef))
        if not isinstance(scope, _DEFS):
            return None
        args = scope.args
        if any(a.arg == subject.id for a in (*args.posonlyargs, *args.args, *args.kwonlyargs, args.vararg, args.kwarg)
               if a is not None):
            return None
        if any(isinstance(n, (ast.Global, ast.Nonlocal)) and subject.id in n.names for n in ast.walk(scope)):
            return None
    out = []
    for node in ast.walk(scope):
        if not _binds(node, subject):
            continue
        stmt = _statement(node, parents)
        if stmt is None or isinstance(node.ctx, ast.Del):
            return None
        if isinstance(stmt, ast.AnnAssign) and stmt.value is None:
            continue  # (`self.x: T`: an annotation binds nothing)
        out.append((stmt, node))
    return out


def _owners(fields, attr: str) -> set:
    """The names of the library classes storing `self.<attr>` anywhere in the run (a class nested in
    another counts for both): one walk of the library's classes, on the first question."""
    table = _OWNERS.get(fields)
    if table is None:
        from .callgates21 import NOT_LIBRARY

        table = {}
        for j, result in enumerate(fields.run.results):
            if not result.relpath.endswith(".py") or fields.test_side(result.relpath) or any(
                    part in NOT_LIBRARY for part in result.relpath.split("/")[:-1]):
                continue
            if b"self." not in (fields.run.text_of(j) or b""):
                continue
            tree = fields.run.tree(j)
            for cls in astcache.nodes(tree, (ast.ClassDef,)) if tree is not None else ():
                for node in ast.walk(cls):
                    if isinstance(node, ast.Attribute) and isinstance(node.ctx, (ast.Store, ast.Del)) \
                            and isinstance(node.value, ast.Name) and node.value.id == "self":
                        table.setdefault(node.attr, set()).add(cls.name)
        _OWNERS[fields] = table
    return table.get(attr, set())


def _off_value(stmt: ast.AST, target: ast.AST) -> bool:
    value = stmt.value
    return value is not None and _whole(stmt, target) and isinstance(value, ast.Constant) \
        and (value.value is None or value.value is False)


def _whole(stmt: ast.AST, target: ast.AST) -> bool:
    """The target is the statement's whole (single) target, not a tuple's element."""
    targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
    return len(targets) == 1 and targets[0] is target


def state_off(fields, part: ast.AST, parents: dict, depth: int) -> Optional[tuple]:
    """(operand, field) where `part` tests state off unless an opt-in set it (this module's doc)."""
    subject = _subject(part)
    found = None if subject is None else _derived(fields, subject, parents, depth)
    if found is None:
        return None
    fields._via[id(part)] = found[0]  # (the option the state derives from)
    return part, found[1]


def state_taken(fields, part: ast.AST, parents: dict) -> Optional[tuple]:
    """(state, field) where `part`, an early exit's test, holds at the off value: `S is None` or
    `not S`, S state off unless an opt-in set it (`if self.sharder is None: return`)."""
    subject = None
    if isinstance(part, ast.UnaryOp) and isinstance(part.op, ast.Not):
        subject = _subject(part.operand)
    elif isinstance(part, ast.Compare) and len(part.ops) == 1 and isinstance(part.ops[0], ast.Is) \
            and isinstance(part.comparators[0], ast.Constant) and part.comparators[0].value is None:
        subject = _subject(part.left)
    if subject is None or isinstance(subject, ast.Compare):
        return None
    found = _derived(fields, subject, parents, len(_BUSY))
    if found is None:
        return None
    fields._via[id(subject)] = found[0]
    return subject, found[1]


def _derived(fields, subject: ast.AST, parents: dict, depth: int) -> Optional[tuple]:
    """(root operand, field) of the opt-in every non-off store of `subject` lies behind, or None."""
    if depth >= _MAX_DEPTH:
        return None
    busy = _BUSY
    key = (subject.attr if isinstance(subject, ast.Attribute) else subject.id, id(_enclosing(
        subject, parents, (ast.ClassDef,) if isinstance(subject, ast.Attribute) else (*_DEFS, ast.Lambda, ast.ClassDef))))
    if key in busy:
        return None  # (a store gated by a test of the same state: no answer)
    busy.add(key)
    try:
        cache = _STORES.setdefault(fields, {})
        if key not in cache:
            cache[key] = _stores(subject, parents, fields)
        stores = cache[key]
        if not stores:
            return None
        found = None
        for stmt, target in stores:
            if _off_value(stmt, target):
                continue
            gated = _gate(fields, stmt, target, parents, depth)
            if gated is None:
                return None
            found = found or gated
        if found is None:
            return None  # (only ever the off value: nothing a user chooses)
    finally:
        busy.discard(key)
    operand, name = found
    return fields._via.get(id(operand), operand), name


def _gate(fields, stmt: ast.AST, target: ast.AST, parents: dict, depth: int) -> Optional[tuple]:
    value = stmt.value
    if _whole(stmt, target) and isinstance(value, ast.IfExp) \
            and isinstance(value.orelse, ast.Constant) and value.orelse.value in (None, False):
        found = fields._off(value.test, parents, depth=depth + 1)  # (`X() if <opt-in> else None`)
        if found is not None:
            return found
    return gate_of(stmt, parents, lambda test: fields._off(test, parents, depth=depth + 1),
                   lambda test: fields._taken(test, parents), if_exp=True)
