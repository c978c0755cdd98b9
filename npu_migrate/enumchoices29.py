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
  `NONE`, `CUDA`, ...), and offered by a command-line option of the run (its string value, or its
  name where the value is no string, among the strings of a `choices=` list: `"triton_kernel"`,
  `"NGRAM"`), which tells a user's choice from a state the code goes through on its own
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
                           "gloo", "mpi", "auto", "default", "none", "null", "unset", "disabled", ""))


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


def option_choices(trees: Iterable[ast.Module]) -> frozenset:
    """The values a command-line option of the run offers: the strings of a `choices=` literal,
    or of the module-level list or tuple a `choices=NAME` names."""
    out: set[str] = set()
    for tree in trees:
        lists = {t.id: _strings(s.value) for s in tree.body if isinstance(s, ast.Assign)
                 for t in s.targets if isinstance(t, ast.Name)}
        for node in astcache.walk(tree):
            if isinstance(node, ast.Call):
                for keyword in node.keywords:
                    if keyword.arg == "choices":
                        value = keyword.value
                        out.update(lists.get(value.id, []) if isinstance(value, ast.Name) else _strings(value))
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
                values = {t.id: s.value.value for s in node.body if isinstance(s, ast.Assign)
                          and isinstance(s.value, ast.Constant) and isinstance(s.value.value, str)
                          for t in s.targets if isinstance(t, ast.Name)}
                for statement in node.body:
                    if isinstance(statement, _FUNCTIONS):
                        enum_methods.add(id(statement))
                        member = _member_test(statement)
                        name = member.rsplit(".", 1)[-1] if member else ""
                        if member is None or found.get(statement.name, member) != member or _resolves(node) \
                                or values.get(name, name) not in offered:
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
