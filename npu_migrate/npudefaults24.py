"""The project's NPU defaults decide more than its backend registry (issue #16, round-24 audit
BP#18, round-23 BL#35, round-22 BK#33).

dispatch.gates reads a project's NPU defaults as data: an unconditional assignment of an NPU name
to the field a backend registry is named for (SGLang's `set_default_server_args`, in
`hardware_backend/npu/`, sets `args.attention_backend = "ascend"` at the top of the function, so
it overrides whatever the user chose), and the factories registered under the other names
(`@register_attention_backend("fa3")`) become spans an NPU host never enters. Two more readers of
that same forced value, both whole run:

* **A check that rejects the forced value** (BL#35, BK#33; `rejection_spans`, called from
  dispatch.gates with its forced defaults). A method of the class whose method hands `self` to the
  defaults function validates the field in an `if`/`elif` chain, and with the forced value the
  chain takes a branch that raises: `if self.attention_backend is None: ... elif
  self.attention_backend not in CHOICES: raise ValueError(...)`, CHOICES a list of strings without
  "ascend" (a literal, or a module-level name bound once to one). The statements after that `if`
  in its block never run on an NPU host (SGLang's `os.environ["NCCL_ALGO"] = ...` for
  deterministic inference): a span, whose findings wholeprogram lowers as in a branch an NPU host
  does not take, and moot.py names as skipped scopes. Decided only where every test of the chain
  up to the raising branch reads the field with `is None`, `is not None`, `==`, `!=`, `in` or
  `not in` a string or a list of strings (`and`, `or`, `not` of such, and a method of the class
  returning one, `self.is_attention_backend_not_set()`, are read too); where one method of the
  class calls the method handing `self` to the defaults before the method holding the chain,
  which nothing else in the class calls (SGLang's `__post_init__`: `_handle_npu_backends()` at
  its line 727, `_handle_deterministic_inference()` at line 788); and where no assignment of a
  forced field of `self` in the class may give it another value in between: each one lies under
  an `if` decided against it with the forced values (`if self.attention_backend is None:`, `if
  self.attention_backend == "fa3" and ...`), assigns the forced value (or another field forced
  to it), lies in a method only that caller runs before the defaults or after the check, or in
  the checked chain itself. The fields are every string the defaults function assigns at the top
  of its body to its first parameter's fields (`attention_backend`, `prefill_attention_backend`,
  `decode_attention_backend`: `defaults_function`); one assigned only under `if args.x is None:`
  fills in an unset field, the user's choice stands, and it decides nothing. A chain on another
  object, a test of another shape (a capability probe), an assignment under a user's option
  (`if self.page_size == 1: self.attention_backend = "triton"`), a `try` around the check, or a
  `return` in the raising branch keep everything.

* **A module loaded only through backends the forced value does not select** (BP#18;
  `decided_ways`, read by lazyimports21). lazyimports21 lowers to info the "imported unguarded"
  error of a module only name-selected imports load, listing the first three ways in. Where some
  of them lie in dispatch.gates' registry spans (a factory registered under another name, a method
  a dict keyed by the registry's names reaches only under another name), the message lists the
  ways left open on an NPU host first and the others after them as "ways the NPU defaults close",
  with the defaults' place and the note that the assignment overrides the user's choice of that
  field. It stays an info whenever some way is left open (SGLang's FlashAttention backend module
  is still loaded by the draft backends of speculative decoding and the multi-layer EAGLE worker,
  opt-ins the NPU defaults leave to the user); where every way is such a factory, the module is
  imported only where an NPU host does not go, and the finding becomes that named scope, on
  dispatch.gates' proof (which, like wholeprogram's use of it, does not follow a registry lookup
  by a field the defaults leave alone, such as a draft model's own backend option).
"""

from __future__ import annotations

import ast
from typing import Callable, Optional

# dispatch.gates' reason for a registry span (a factory under another name, a keyed method)
DECIDED = "while an NPU host selects"
OVERRIDES = "assigned unconditionally there, so it overrides the user's choice of that field"
NOT_GONE = "imported only where an NPU host does not go"  # (a moot.PHRASES entry: a named scope)

_FUNCTIONS = (ast.FunctionDef, ast.AsyncFunctionDef)
_BLOCKS = ("body", "orelse", "finalbody")


def _module_lists(tree: ast.Module) -> dict[str, frozenset]:
    """Module-level names bound once, to a list, tuple or set of strings."""
    counts: dict[str, int] = {}
    values: dict[str, frozenset] = {}
    for statement in tree.body:
        targets = statement.targets if isinstance(statement, ast.Assign) else \
            [statement.target] if isinstance(statement, (ast.AnnAssign, ast.AugAssign)) else []
        for target in targets:
            if isinstance(target, ast.Name):
                counts[target.id] = counts.get(target.id, 0) + 1
                value = getattr(statement, "value", None)
                strings = _strings(value) if isinstance(statement, (ast.Assign, ast.AnnAssign)) else None
                if strings is not None:
                    values[target.id] = strings
    return {name: found for name, found in values.items() if counts.get(name) == 1}


def _strings(node) -> Optional[frozenset]:
    if isinstance(node, (ast.List, ast.Tuple, ast.Set)) and all(
            isinstance(e, ast.Constant) and isinstance(e.value, str) for e in node.elts):
        return frozenset(e.value for e in node.elts)
    return None


def _field_test(test: ast.AST, owner: str, fields: dict[str, str], lists: dict[str, frozenset]
                ) -> Optional[tuple[str, bool]]:
    """(field, truth) of `owner.<field> <op> <value>` with the field at its forced value, or None."""
    if not (isinstance(test, ast.Compare) and len(test.ops) == 1 and isinstance(test.left, ast.Attribute)
            and isinstance(test.left.value, ast.Name) and test.left.value.id == owner
            and test.left.attr in fields):
        return None
    field, value = test.left.attr, fields[test.left.attr]
    op, right = test.ops[0], test.comparators[0]
    if isinstance(op, (ast.Is, ast.IsNot)) and isinstance(right, ast.Constant) and right.value is None:
        return field, isinstance(op, ast.IsNot)
    if isinstance(op, (ast.Eq, ast.NotEq)) and isinstance(right, ast.Constant) and isinstance(right.value, str):
        return field, (right.value == value) == isinstance(op, ast.Eq)
    if isinstance(op, (ast.In, ast.NotIn)):
        strings = _strings(right)
        if strings is None and isinstance(right, ast.Name):
            strings = lists.get(right.id)
        if strings is not None:
            return field, (value in strings) == isinstance(op, ast.In)
    return None


def _truth(test: ast.AST, fields: dict[str, str], lists: dict[str, frozenset], methods: dict,
           depth: int = 0) -> Optional[bool]:
    """The value of `test` with the fields of `self` at their forced values: comparisons of a
    field, `and`/`or`/`not` of such, and a method of the class returning one (`self.is_unset()`)."""
    if isinstance(test, ast.BoolOp):
        values = [_truth(v, fields, lists, methods, depth) for v in test.values]
        stop = isinstance(test.op, ast.Or)
        if stop in values:
            return stop
        return None if None in values else not stop
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        value = _truth(test.operand, fields, lists, methods, depth)
        return None if value is None else not value
    if isinstance(test, ast.Call) and not test.args and not test.keywords and isinstance(test.func, ast.Attribute) \
            and isinstance(test.func.value, ast.Name) and test.func.value.id == "self" and depth < 2:
        body = getattr(methods.get(test.func.attr), "body", [])
        body = [b for b in body if not (isinstance(b, ast.Expr) and isinstance(b.value, ast.Constant))]  # (a docstring)
        if len(body) == 1 and isinstance(body[0], ast.Return) and body[0].value is not None:
            return _truth(body[0].value, fields, lists, methods, depth + 1)
        return None
    decided = _field_test(test, "self", fields, lists)
    return None if decided is None else decided[1]


def _raising_branch(node: ast.If, fields: dict[str, str], lists: dict[str, frozenset], methods: dict
                    ) -> Optional[tuple[ast.AST, str]]:
    """(the test that raises, the field) where the chain at `node`, with the fields at their
    forced values, takes a branch that raises; None where it is not decided so."""
    current: Optional[ast.If] = node
    while current is not None:
        decided = _field_test(current.test, "self", fields, lists)
        truth = _truth(current.test, fields, lists, methods)
        if truth is None:
            return None
        if truth:
            body = current.body
            if decided is not None and any(isinstance(s, ast.Raise) for s in body) and not any(
                    isinstance(n, (ast.Return, ast.Yield, ast.YieldFrom)) for s in body for n in ast.walk(s)):
                return current.test, decided[0]
            return None
        orelse = current.orelse
        current = orelse[0] if len(orelse) == 1 and isinstance(orelse[0], ast.If) else None
    return None


def _other_writes(cls: ast.ClassDef, methods: dict, skipped: set, chain: ast.If, holder: str,
                  fields: dict[str, str], lists: dict[str, frozenset]) -> Optional[str]:
    """The first assignment of a field of `self` in the class that may give it another value
    than its forced one, as "line N", or None: one under an `if` decided against it, one of the
    forced value (or of another field forced to it), one in a method `skipped` (run only before
    the defaults or after the check), and the checked chain's own branches aside."""
    for name, method in methods.items():
        if name in skipped:
            continue
        parent = {id(c): n for n in ast.walk(method) for c in ast.iter_child_nodes(n)}
        for node in ast.walk(method):
            if not isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
                continue
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            written = [t.attr for t in targets if isinstance(t, ast.Attribute) and t.attr in fields
                       and isinstance(t.value, ast.Name) and t.value.id == "self"]
            if not written:
                continue
            if name == holder and node.lineno >= chain.lineno:
                continue  # (in the checked chain, or after it: past the raise)
            value = getattr(node, "value", None)
            same = all(isinstance(node, ast.Assign) and (
                (isinstance(value, ast.Constant) and value.value == fields[f])
                or (isinstance(value, ast.Attribute) and isinstance(value.value, ast.Name) and value.value.id == "self"
                    and fields.get(value.attr) == fields[f])) for f in written)
            if same:
                continue
            child, up, decided = node, parent.get(id(node)), False
            while up is not None and not decided:
                if isinstance(up, ast.If):
                    truth = _truth(up.test, fields, lists, methods)
                    decided = (truth is False and any(child is b for b in up.body)) or \
                        (truth is True and any(child is b for b in up.orelse))
                child, up = up, parent.get(id(up))
            if not decided:
                return f"line {node.lineno}"
    return None


def _self_calls(function: ast.AST) -> list[tuple[int, str]]:
    """(line, name) of the `self.<name>()` calls in a method."""
    return [(n.lineno, n.func.attr) for n in ast.walk(function)
            if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute)
            and isinstance(n.func.value, ast.Name) and n.func.value.id == "self"]


def _hands_self(function: ast.AST, defaults: set[str]) -> bool:
    return any(isinstance(n, ast.Call) and isinstance(n.func, (ast.Name, ast.Attribute))
               and (n.func.id if isinstance(n.func, ast.Name) else n.func.attr) in defaults
               and any(isinstance(a, ast.Name) and a.id == "self" for a in n.args)
               for n in ast.walk(function))


def _runs_after_defaults(cls: ast.ClassDef, method: str, defaults: set[str]
                         ) -> Optional[tuple[str, set]]:
    """(how the class's caller runs `method` after the defaults: "`__post_init__` calls ...", the
    methods it alone runs before the defaults or after `method`), or None."""
    methods = {n.name: n for n in cls.body if isinstance(n, _FUNCTIONS)}
    handing = {name for name, node in methods.items() if _hands_self(node, defaults)}
    if not handing or method in handing:
        return None
    calls = [(name, line, called) for name, node in methods.items() for line, called in _self_calls(node)]
    callers = [(name, line) for name, line, called in calls if called == method]
    if len(callers) != 1:
        return None
    caller, line = callers[0]
    before = [(at, called) for at, called in _self_calls(methods[caller]) if called in handing and at < line]
    if caller in handing or not before:
        return None
    first = before[0][0]
    skipped = {called for name, at, called in calls if name == caller and (at < first or at > line)
               and sum(1 for _n, _a, c in calls if c == called) == 1}
    return f"`{caller}` calls `{before[0][1]}` (line {first}) before `{method}` (line {line})", skipped


def rejection_spans(tree: ast.Module, forced: dict[str, tuple[str, str, str]]) -> list[tuple[int, int, str]]:
    """(first line, last line, why) of the statements after a check that raises on a field's
    forced NPU default (see the module's doc). `forced`: field -> (value, "path:line", name of
    the defaults function)."""
    fields = {field: value for field, (value, _where, _name) in forced.items()}
    defaults = {name for _value, _where, name in forced.values()}
    lists: Optional[dict[str, frozenset]] = None
    out = []
    for cls in ast.walk(tree):
        if not isinstance(cls, ast.ClassDef):
            continue
        methods = {n.name: n for n in cls.body if isinstance(n, _FUNCTIONS)}
        for method in methods.values():
            if not any(isinstance(n, ast.If) and isinstance(n.test, ast.Compare) for n in ast.walk(method)):
                continue
            caught = {id(n) for t in ast.walk(method) if isinstance(t, ast.Try) and t.handlers
                      for b in t.body for n in ast.walk(b)}  # (a `try` around the check may catch the raise)
            found = []
            for holder in ast.walk(method):
                for block in (getattr(holder, name, None) for name in _BLOCKS):
                    if not isinstance(block, list):
                        continue
                    for k, statement in enumerate(block[:-1]):
                        if not isinstance(statement, ast.If) or id(statement) in caught:
                            continue
                        if lists is None:
                            lists = _module_lists(tree)
                        raising = _raising_branch(statement, fields, lists, methods)
                        if raising is not None:
                            found.append((statement, block[k + 1:], raising))
            if not found:
                continue
            order = _runs_after_defaults(cls, method.name, defaults)
            if order is None:
                continue
            how, skipped = order
            for statement, rest, (test, field) in found:
                if _other_writes(cls, methods, skipped, statement, method.name, fields, lists or {}) is not None:
                    continue
                value, where, name = forced[field]
                why = (f"after `{ast.unparse(test)}` (line {test.lineno}), which raises where `{field}` is "
                       f'"{value}": the NPU defaults `{name}` set it so at {where} ({OVERRIDES}; no method '
                       f"run between assigns it another value), and {how}")
                out.append((rest[0].lineno, rest[-1].end_lineno or rest[-1].lineno, why))
    return out


def defaults_function(tree: ast.Module, line: int) -> Optional[tuple[str, dict[str, tuple[str, int]]]]:
    """(name, {field: (value, line)}) of the function holding `line` (an NPU default dispatch.gates
    found): every `<param>.<field> = "<string>"` at the top of its body, with `<param>` its first
    parameter: the values it assigns whatever the user chose (an assignment under `if <param>.<field>
    is None:` only fills in an unset field, and is left out)."""
    found = None
    for node in ast.walk(tree):
        if isinstance(node, _FUNCTIONS) and node.lineno <= line <= (node.end_lineno or node.lineno):
            if found is None or node.lineno >= found.lineno:
                found = node
    if found is None or not found.args.args:
        return None
    param = found.args.args[0].arg
    values: dict[str, list[tuple[str, int]]] = {}
    for statement in found.body:
        if isinstance(statement, ast.Assign) and isinstance(statement.value, ast.Constant) \
                and isinstance(statement.value.value, str):
            for target in statement.targets:
                if isinstance(target, ast.Attribute) and isinstance(target.value, ast.Name) and target.value.id == param:
                    values.setdefault(target.attr, []).append((statement.value.value, statement.lineno))
    # (a field assigned anywhere else in the function, or twice, is not one value)
    counts: dict[str, int] = {}
    for node in ast.walk(found):
        targets = node.targets if isinstance(node, ast.Assign) else \
            [node.target] if isinstance(node, (ast.AnnAssign, ast.AugAssign)) else []
        for target in targets:
            if isinstance(target, ast.Attribute) and isinstance(target.value, ast.Name) and target.value.id == param:
                counts[target.attr] = counts.get(target.attr, 0) + 1
    return found.name, {field: found_values[0] for field, found_values in values.items()
                        if len(found_values) == 1 and counts.get(field) == 1}


def decided_ways(results, spans: dict) -> Callable[[str, int], Optional[str]]:
    """`decided(relpath, line)`: the reason of dispatch.gates' `spans` where the import at that
    place lies in a factory or keyed method of a backend the NPU defaults never select, else None."""
    by_path: dict[str, list[tuple[int, int, str]]] = {}
    for i, found in spans.items():
        kept = [span for span in found if DECIDED in span[2]]
        if kept:
            by_path[results[i].relpath] = kept

    def decided(relpath: str, line: int) -> Optional[str]:
        return next((why for first, last, why in by_path.get(relpath, ()) if first <= line <= last), None)

    return decided


def split_ways(ways: list, decided: Callable[[str, int], Optional[str]]) -> tuple[list, list]:
    """(the ways left open on an NPU host, [(way, dispatch's reason)] of the others)."""
    left, closed = [], []
    for way in ways:
        why = decided(way.relpath, way.line)
        if why is None:
            left.append(way)
        else:
            closed.append((way, why))
    return left, closed


def closed_note(closed: list, shown: int = 3) -> str:
    """The ways in backends the NPU defaults never select, named once per default: `and 4 ways in
    backends the project's NPU defaults never select (...)`."""
    by_default: dict[str, list[str]] = {}
    for way, why in closed:
        at = why.find(", " + DECIDED)
        head, tail = (why[:at], why[at + 2:]) if at >= 0 else (why, "")
        by_default.setdefault(tail, []).append(f"{way.relpath}:{way.line} under {head}")
    parts = []
    for tail, places in by_default.items():
        listed = "; ".join(places[:shown]) + (f"; and {len(places) - shown} more" if len(places) > shown else "")
        parts.append(f"{listed}, {tail}, {OVERRIDES}")
    return "; ".join(parts)
