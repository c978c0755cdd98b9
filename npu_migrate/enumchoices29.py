"""Modules loaded only when a user's enum choice selects them (issue #16, policy P1, round-28 audit
CA#12, CB#32). Read by lazyimports21.py's walk (whole run), beside its `impl == "FA3"` selection.

SGLang names its choices by enum members and tests them through one-line predicates:

    class SpeculativeAlgorithm(Enum):
        NGRAM = auto()
        def is_ngram(self) -> bool:
            return self == SpeculativeAlgorithm.NGRAM

        def create_worker(self, server_args):
            ...
            elif self.is_ngram():
                from sglang.srt.speculative.ngram_worker import NGRAMWorker     # `sgl_kernel` at its top

and builds a runner class only when the option names it, the class importing its kernels lazily:

    # moe_runner/runner.py
    elif runner_backend.is_triton_kernels():
        self.runner_core = TritonKernelsRunnerCore(config)
    # moe_runner/triton_kernels.py
    class TritonKernelsRunnerCore(MoeRunnerCore):
        def run(self, ...):
            from ...fused_moe_triton.triton_kernels_moe import triton_kernel_fused_experts

An NPU host imports `ngram_worker.py` only after its user passes `--speculative-algorithm NGRAM`, and
`triton_kernels_moe.py` only with `--moe-runner-backend triton_kernel` (or the optional
triton_kernels package found): the enum analog of lazyimports21's `name == "FA3"` selection. The
module's "imported unguarded" error becomes lazyimports21's info naming the import site and the
choice (P1: never dropped, never a scope).

* `predicates(trees, offered)`: the run's enum predicates, {method name: "Cls.MEMBER"}: a method of
  a class deriving from an `...Enum` base whose body (a docstring aside) is `return self ==
  Cls.MEMBER` (or `is`), the member not a device, communication backend or default word (`AUTO`,
  `NONE`, `CUDA`, ...), and offered by a command-line option of the run (its string value, in any
  case, or its name, exactly, where the value is no string, among the strings of a `choices=` list:
  `"triton_kernel"`, `"NGRAM"`), which tells a user's choice from a state the code goes through on its own
  (`ForwardMode.DECODE`, an `auto()` member named as no option offers it); an enum with an instance
  method that returns a member (`DeepEPMode.resolve`: AUTO becomes NORMAL or LOW_LATENCY at run
  time) is left out, and so is a name the run also defines otherwise (another body, a plain
  function). A member an automatic default may still resolve to elsewhere (the option's "auto"
  value) is read as lazyimports21 reads `name == "FA3"`: a selection.
* `selection(test, predicates)`: an `if` test (or the first operand of its `and`) that is a call
  of such a predicate with no arguments (`self.is_ngram()`, `runner_backend.is_triton_kernels()`):
  its text and the member.
* `built_only_when_selected(...)`: an import inside an instance method of a module-level class
  (not a static or class method) that the run's library builds only by calls `Cls(...)` inside
  such a selected `if` of a function; any other reference to the class (a base of another class,
  a value stored or passed, a call outside a selection) keeps the site unknown.
"""

from __future__ import annotations

import ast
from typing import Callable, Iterable, Optional

from . import astcache

_FUNCTIONS = (ast.FunctionDef, ast.AsyncFunctionDef)
# members that name a device, a communication backend or a default, not a feature a user opts in to
_NOT_A_CHOICE = frozenset(("cuda", "cpu", "npu", "xpu", "hip", "rocm", "mps", "gpu", "meta", "nccl", "hccl",
                           "gloo", "mpi", "auto", "default", "none", "null", "unset", "disabled", "no", "off",
                           "false", ""))


def _is_enum(node: ast.ClassDef) -> bool:
    return any((astcache.dotted(base) or "").rsplit(".", 1)[-1].endswith("Enum") for base in node.bases)


def _member_test(function: ast.AST) -> Optional[str]:
    """"Cls.MEMBER" of a body `return self == Cls.MEMBER` (a docstring aside), else None."""
    body = [s for s in function.body if not (isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant))]
    if len(body) != 1 or not isinstance(body[0], ast.Return):
        return None
    test = body[0].value
    if not (isinstance(test, ast.Compare) and len(test.ops) == 1 and isinstance(test.ops[0], (ast.Eq, ast.Is))):
        return None
    left, right = test.left, test.comparators[0]
    if isinstance(right, ast.Name) and right.id == "self":
        left, right = right, left
    if not (isinstance(left, ast.Name) and left.id == "self" and isinstance(right, ast.Attribute)):
        return None
    member = astcache.dotted(right)
    if member is None or right.attr.lower() in _NOT_A_CHOICE:
        return None
    return member


def _strings(node: Optional[ast.AST]) -> list[str]:
    if isinstance(node, (ast.List, ast.Tuple, ast.Set)):
        return [e.value for e in node.elts if isinstance(e, ast.Constant) and isinstance(e.value, str)]
    return []


def option_choices(trees: Iterable[ast.Module], explicit: bool = False) -> frozenset:
    """The choices of each command-line option of the run (one frozenset of strings per option):
    the strings of a `choices=` literal, or of the module-level list or tuple a `choices=NAME` names;
    not a value that is the string `default=` of its option (in any case: what it picks unasked is
    no choice). `explicit`: not an option whose default is `"auto"` (or another default word) or an
    expression (`default=ServerArgs.moe_runner_backend`: unknown here) either: the code may resolve
    that to one of its values on its own (SGLang's `--moe-runner-backend auto` picks `triton`)."""
    out: set[frozenset] = set()
    for tree in trees:
        lists = {t.id: _strings(s.value) for s in tree.body if isinstance(s, ast.Assign)
                 for t in s.targets if isinstance(t, ast.Name)}
        for node in astcache.walk(tree):
            if isinstance(node, ast.Call):
                given = {k.arg: k.value for k in node.keywords}
                value = given.get("choices")
                if value is None:
                    continue
                strings = lists.get(value.id, []) if isinstance(value, ast.Name) else _strings(value)
                default = given.get("default")
                if isinstance(default, ast.Constant) and isinstance(default.value, str):
                    if explicit and default.value.lower() in _NOT_A_CHOICE:
                        continue  # (`default="auto"`: the code may resolve to any of them unasked)
                    strings = [x for x in strings if x.lower() != default.value.lower()]
                elif explicit and default is not None and not isinstance(default, ast.Constant):
                    continue  # (`default=ServerArgs.moe_runner_backend`: unknown here, maybe "auto")
                if strings:
                    out.add(frozenset(strings))
    return frozenset(out)


def _resolves(node: ast.ClassDef) -> bool:
    """Whether an instance method returns a member of the class (`DeepEPMode.resolve`: AUTO turns
    into NORMAL or LOW_LATENCY at run time): its members are then states, not only choices."""
    for method in node.body:
        if isinstance(method, _FUNCTIONS) and not {(astcache.dotted(d) or "") for d in method.decorator_list} & {
                "staticmethod", "classmethod"}:
            for inner in ast.walk(method):
                if isinstance(inner, ast.Return) and isinstance(inner.value, ast.Attribute) \
                        and isinstance(inner.value.value, ast.Name) and inner.value.value.id == node.name:
                    return True
    return False


def _key(values: dict, name: str) -> str:
    return values[name].lower() if name in values else name


def _offered(values: dict, names: list, name: str, offered: frozenset) -> bool:
    """Whether an option of `offered` (option_choices) offers the member: its string value (in any
    case: `FP8BackendType("AO")` is built from `--fp8_backend ao`), or its name, exactly, where its
    value is no string, among the option's choices, three quarters of which at least are members of
    the same enum (the option is about this enum: `--gdn-prefill-backend`'s "triton" and
    "flashinfer" say nothing of `MambaBackendEnum`)."""
    keys = {_key(values, n) for n in names}
    mine = _key(values, name)
    for option in offered:
        choices = {c.lower() for c in option} if name in values else set(option)
        if mine in choices and 4 * len(choices & keys) >= 3 * len(choices):
            return True
    return False


def _names(node: ast.ClassDef) -> list:
    return [t.id for s in node.body if isinstance(s, ast.Assign) for t in s.targets if isinstance(t, ast.Name)]


def _enum_values(node: ast.ClassDef) -> dict:
    return {t.id: s.value.value for s in node.body if isinstance(s, ast.Assign)
            and isinstance(s.value, ast.Constant) and isinstance(s.value.value, str)
            for t in s.targets if isinstance(t, ast.Name)}


def members(trees: Iterable[ast.Module], offered: frozenset) -> frozenset:
    """"Cls.MEMBER" of each enum member a command-line option offers (as `predicates` reads it; not
    a device, communication backend or default word), in an enum that resolves to no other member."""
    out: set[str] = set()
    for tree in trees:
        for node in astcache.walk(tree):
            if isinstance(node, ast.ClassDef) and _is_enum(node) and not _resolves(node):
                values, names = _enum_values(node), _names(node)
                out.update(f"{node.name}.{n}" for n in names
                           if n.lower() not in _NOT_A_CHOICE and values.get(n, n).lower() not in _NOT_A_CHOICE
                           and _offered(values, names, n, offered))
    return frozenset(out)


def chosen_branch(node: ast.AST, parents: dict, known: dict, offered: frozenset) -> Optional[str]:
    """"under `<test>` (the choice `Cls.MEMBER`)" of the `if` (within its function) in whose body
    `node` lies, the test (or the first operand of its `and`) a predicate of `known` or a comparison
    `x == Cls.MEMBER` with a member of `offered` (`members`); else None. `parents`: id -> parent."""
    child, current = node, parents.get(id(node))
    while current is not None and not isinstance(current, (*_FUNCTIONS, ast.Module)):
        if isinstance(current, ast.If) and any(child is stmt for stmt in current.body):
            found = selection(current.test, known) or _member_compared(current.test, offered)
            if found:
                return found
        child, current = current, parents.get(id(current))
    return None


def chosen_through_private_method(node: ast.AST, parents: dict, tree: ast.Module, known: dict,
                                  offered: frozenset) -> Optional[tuple[str, int, str]]:
    """(what `chosen_branch` says, the line, the method's name) of the first call that runs the private method holding
    `node` (`_prepare_ao` of a module-level class), where every reference to the method in its
    file is such a call `self._m(...)` under a chosen branch; else None. (The caller makes sure no
    other file names the method.)"""
    method, current = None, parents.get(id(node))
    while current is not None and not isinstance(current, ast.Module):
        if isinstance(current, _FUNCTIONS):
            method = current
        current = parents.get(id(current))
    owner = parents.get(id(method)) if method is not None else None
    if not (isinstance(owner, ast.ClassDef) and owner in tree.body and method.name.startswith("_")
            and not method.name.endswith("__")):
        return None
    first = None
    for ref in astcache.walk(tree):
        if isinstance(ref, ast.Name) and ref.id == method.name:
            return None  # (handed on or called bare: not only `self._m(...)`)
        if not (isinstance(ref, ast.Attribute) and ref.attr == method.name):
            continue
        call = parents.get(id(ref))
        if not (isinstance(ref.value, ast.Name) and ref.value.id == "self" and isinstance(call, ast.Call)
                and call.func is ref):
            return None
        found = chosen_branch(call, parents, known, offered)
        if found is None:
            return None
        first = first or (found, call.lineno, method.name)
    return first


def _member_compared(test: ast.AST, offered: frozenset) -> Optional[str]:
    for node in ([test.values[0]] if isinstance(test, ast.BoolOp) and isinstance(test.op, ast.And) else []) + [test]:
        if isinstance(node, ast.Compare) and len(node.ops) == 1 and isinstance(node.ops[0], (ast.Eq, ast.Is)):
            for side in (node.left, node.comparators[0]):
                member = astcache.dotted(side) if isinstance(side, ast.Attribute) else None
                if member and ".".join(member.split(".")[-2:]) in offered:
                    return (f"under `{' '.join(ast.unparse(node).split())[:70]}` "
                            f"(the choice `{'.'.join(member.split('.')[-2:])}`)")
    return None


def predicates(trees: Iterable[ast.Module], offered: frozenset = frozenset()) -> dict[str, str]:
    """The run's enum predicates (see the module's doc) whose member a command-line option offers
    (`offered`: option_choices; its string value, or its name where its value is no string), in an
    enum no instance method of which resolves to another member."""
    found: dict[str, str] = {}
    other: set[str] = set()
    for tree in trees:
        enum_methods: set[int] = set()
        for node in astcache.walk(tree):
            if isinstance(node, ast.ClassDef) and _is_enum(node):
                values = _enum_values(node)
                for statement in node.body:
                    if isinstance(statement, _FUNCTIONS):
                        enum_methods.add(id(statement))
                        member = _member_test(statement)
                        name = member.rsplit(".", 1)[-1] if member else ""
                        if member is None or found.get(statement.name, member) != member or _resolves(node) \
                                or not _offered(values, _names(node), name, offered):
                            other.add(statement.name)
                        else:
                            found[statement.name] = member
        for node in astcache.walk(tree):
            if isinstance(node, _FUNCTIONS) and id(node) not in enum_methods:
                other.add(node.name)
    return {name: member for name, member in found.items() if name not in other}


def selection(test: ast.AST, known: dict[str, str]) -> Optional[str]:
    """"under `<test>` (the choice `Cls.MEMBER`)" of an enum choice an `if` test makes (see the
    module's doc), or None."""
    if not known:
        return None
    for node in ([test.values[0]] if isinstance(test, ast.BoolOp) and isinstance(test.op, ast.And) else []) + [test]:
        if isinstance(node, ast.Call) and not node.args and not node.keywords \
                and isinstance(node.func, ast.Attribute) and node.func.attr in known:
            return f"under `{' '.join(ast.unparse(node).split())[:70]}` (the choice `{known[node.func.attr]}`)"
    return None


def _enclosing_method(tree: ast.Module, line: int) -> Optional[tuple[ast.ClassDef, ast.AST]]:
    """(the module-level class, its instance method) around `line`, or None."""
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and node.lineno <= line <= (node.end_lineno or node.lineno):
            for method in node.body:
                if isinstance(method, _FUNCTIONS) and method.lineno <= line <= (method.end_lineno or method.lineno):
                    decorators = {(astcache.dotted(d) or "") for d in method.decorator_list}
                    if decorators & {"staticmethod", "classmethod"}:
                        return None
                    return node, method
    return None


def built_only_when_selected(tree: ast.Module, line: int, library: Callable[[str], Iterable[tuple[str, ast.Module]]],
                             selects: Callable[[ast.AST, ast.AST], Optional[str]],
                             parents: Callable[[ast.Module], dict]) -> Optional[tuple[str, int, str]]:
    """(relpath, line, how) of the one selected construction that every build of the class around
    `line` goes through (the first, where several), or None (see the module's doc). `selects(test,
    function)` says "under `<test>`" of a selection test, `library(name)` gives the library's
    (relpath, tree) that hold the name; `parents(tree)` maps id(node) to its parent."""
    found = _enclosing_method(tree, line)
    if found is None:
        return None
    cls, method = found
    name = cls.name
    first: Optional[tuple[str, int, str]] = None
    for relpath, other in library(name):
        parent = None
        for node in astcache.walk(other):
            if node is cls:
                continue
            if not ((isinstance(node, ast.Name) and node.id == name) or (isinstance(node, ast.Attribute) and node.attr == name)):
                continue
            parent = parent or parents(other)
            up = parent.get(id(node))
            if isinstance(up, ast.Attribute):
                continue  # (the inner part of a longer name: the whole name is visited too)
            if not (isinstance(up, ast.Call) and up.func is node):
                return None  # (a base, a value handed on, a registry entry: built elsewhere too)
            how = _selected_call(up, parent, selects)
            if how is None:
                return None
            if first is None:
                first = (relpath, up.lineno, f"in `{method.name}` of `{name}`, which the run builds only {how}")
    return first


def _selected_call(call: ast.Call, parent: dict, selects) -> Optional[str]:
    child, up = call, parent.get(id(call))
    chain = []
    while up is not None:
        chain.append((child, up))
        child, up = up, parent.get(id(up))
    function = next((u for _c, u in chain if isinstance(u, _FUNCTIONS)), None)
    if function is None:
        return None
    for child, up in chain:
        if up is function:
            break
        if isinstance(up, ast.If) and child in up.body:
            found = selects(up.test, function)
            if found:
                return f"in `{function.name}` {found}"
    return None


# (public: enumconfigs33.py reads the run's enums as this module does)
NOT_A_CHOICE = _NOT_A_CHOICE
resolves = _resolves
enum_values = _enum_values
member_names = _names
