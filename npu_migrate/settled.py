"""Dispatch values and capability tests the class itself settles (issue #16, round-13 audits AJ#4, AI#18).

testscopes.untaken_branches finds the blocks an NPU host never runs from one condition. Two shapes
need a look at the class around the condition, and are judged here:

* **A backend value its own resolver never gives on an NPU host.** vLLM's
  `backend = self.resolve_backend(...)` then `elif backend == "flashinfer": from flashinfer ...`:
  the method returns literals other than "flashinfer", the values of other methods of the class
  that return only such literals (`self._resolve_auto(...)`), or the configured value
  (`return self._backend`) only after validating it, and its "flashinfer" branch fails on an NPU
  host (`if not self._is_cuda: failures.append(...)` then `if failures: raise ...`, or a `raise`
  directly; `self._is_cuda = current_platform.is_cuda()`, the only assignment in the class). The
  branch comparing the value with "flashinfer" is then never taken there (`untaken`). Anything
  else the method may return (a parameter, a call of something outside the class, a value not
  validated first) keeps the branch.
* **An isinstance test against a CUDA op builder or extension class** (`isinstance(self,
  CUDAOpBuilder)`): the NPU accelerator builds its ops with its own builder classes (DeepSpeed's
  `NPUOpBuilder`, ColossalAI's NPU extensions), never instances of a class named for CUDA, so
  the test is false on an NPU host (`known_value`, read by testscopes._value). Only class names
  matching rules/scopes.toml [settled] cuda_class count.

The findings inside such a block are lowered to info by testscopes.review_untaken_branches with
"in a branch an NPU host does not take" and the reason (moot.py names the block as a skipped
scope: nothing is silent).
"""

from __future__ import annotations

import ast
import copy
import functools
import re
from typing import Optional

from . import astcache, catalogue

_FUNCTIONS = (ast.FunctionDef, ast.AsyncFunctionDef)
_DEPTH = 3


@functools.lru_cache(maxsize=None)
def _table() -> dict:
    return catalogue.read_table("scopes.toml").get("settled", {})


@functools.lru_cache(maxsize=None)
def _cuda_class() -> re.Pattern:
    return re.compile(_table().get("cuda_class", "(?!)"))


@functools.lru_cache(maxsize=None)
def _resolver_test() -> re.Pattern:
    return re.compile(_table().get("resolver_test", "(?!)"))


def decide_words() -> str:
    """A regular expression of the words this module's conditions need (testscopes' text test)."""
    return _table().get("decide_words", "(?!)")


def known_value(node: ast.AST) -> Optional[bool]:
    """False for `isinstance(x, CUDAOpBuilder)` (every class named for CUDA), else None."""
    if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "isinstance"
            and len(node.args) == 2 and not node.keywords):
        return None
    kinds = node.args[1]
    kinds = kinds.elts if isinstance(kinds, ast.Tuple) else [kinds]
    names = [(astcache.dotted(k) or "").rpartition(".")[2] for k in kinds]
    if names and all(name and _cuda_class().match(name) for name in names):
        return False
    return None


# ----------------------------------------------------------------------------- resolved backends
def _str(node: ast.AST) -> Optional[str]:
    return node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else None


def _own_nodes(function: ast.AST):
    """The nodes of a function's body, without those of nested functions, classes and lambdas."""
    stack = list(function.body)
    while stack:
        node = stack.pop()
        yield node
        stack.extend(child for child in ast.iter_child_nodes(node)
                     if not isinstance(child, (*_FUNCTIONS, ast.ClassDef, ast.Lambda)))


def _self_method(node: ast.AST, methods: dict) -> Optional[str]:
    """`M` of `self.M(...)`, a method of the class."""
    if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
            and isinstance(node.func.value, ast.Name) and node.func.value.id == "self"
            and node.func.attr in methods):
        return node.func.attr
    return None


def _compared(test: ast.AST) -> Optional[tuple[ast.expr, str]]:
    """(the compared expression, the literal) of `x == "lit"` / `"lit" == x`."""
    if isinstance(test, ast.Compare) and len(test.ops) == 1 and isinstance(test.ops[0], ast.Eq):
        left, right = test.left, test.comparators[0]
        if _str(right) is not None and _str(left) is None:
            return left, _str(right)
        if _str(left) is not None and _str(right) is None:
            return right, _str(left)
    return None


class _Class:
    def __init__(self, cls: ast.ClassDef, truth) -> None:
        self.cls, self.truth = cls, truth
        self.methods = {m.name: m for m in cls.body if isinstance(m, _FUNCTIONS)}
        self.assigned: dict[str, list[ast.expr]] = {}  # self.X -> the values assigned to it
        for method in self.methods.values():
            for node in _own_nodes(method):
                targets = node.targets if isinstance(node, ast.Assign) else \
                    [node.target] if isinstance(node, (ast.AnnAssign, ast.AugAssign)) else []
                for target in targets:
                    if (isinstance(target, ast.Attribute) and isinstance(target.value, ast.Name)
                            and target.value.id == "self"):
                        value = node.value if not isinstance(node, ast.AugAssign) else None
                        self.assigned.setdefault(target.attr, []).append(value)
        self._yields: dict[tuple[str, str], bool] = {}

    def npu_truth(self, test: ast.AST):
        """The test's value on an NPU host, each `self.X` read as the one value the class assigns it."""
        assigned = self.assigned

        class _Substitute(ast.NodeTransformer):
            def visit_Attribute(self, node: ast.Attribute):
                if (isinstance(node.value, ast.Name) and node.value.id == "self"
                        and len(assigned.get(node.attr, ())) == 1 and assigned[node.attr][0] is not None):
                    return copy.deepcopy(assigned[node.attr][0])
                return self.generic_visit(node)

        return self.truth(_Substitute().visit(copy.deepcopy(test)))

    def may_return(self, name: str, literal: str, depth: int = 0) -> bool:
        """Whether method `name` may return `literal` on an NPU host (True where unsure)."""
        key = (name, literal)
        if key in self._yields:
            return self._yields[key]
        self._yields[key] = True  # (a recursion answers "maybe")
        method = self.methods[name]
        answer = depth >= _DEPTH or any(
            self._may_give(method, node, node.value, literal, depth)
            for node in _own_nodes(method) if isinstance(node, ast.Return) and node.value is not None)
        answer = answer or any(isinstance(node, (ast.Yield, ast.YieldFrom)) for node in _own_nodes(method))
        self._yields[key] = answer
        return answer

    def _may_give(self, method, statement: ast.Return, value: ast.expr, literal: str, depth: int) -> bool:
        if _str(value) is not None:
            return _str(value) == literal
        if isinstance(value, ast.Constant) and value.value is None:
            return False
        if isinstance(value, ast.IfExp):
            return (self._may_give(method, statement, value.body, literal, depth)
                    or self._may_give(method, statement, value.orelse, literal, depth))
        callee = _self_method(value, self.methods)
        if callee is not None:
            return self.may_return(callee, literal, depth + 1)
        return not self._validated(method, statement, value, literal)

    def _validated(self, method, statement: ast.Return, value: ast.expr, literal: str) -> bool:
        """`return self._backend` at the top level of the method, after a chain that, for the value
        `literal`, raises on an NPU host (directly or through a list of failures raised after)."""
        body = method.body
        if statement not in body or not (isinstance(value, ast.Attribute) and isinstance(value.value, ast.Name)
                                         and value.value.id == "self"):
            return False
        shown = ast.dump(value)
        end = body.index(statement)
        for index, chain in enumerate(body[:end]):
            branch = chain
            while isinstance(branch, ast.If):
                compared = _compared(branch.test)
                if compared is not None and ast.dump(compared[0]) == shown and compared[1] == literal:
                    return self._fails(branch.body, body[index + 1:end])
                branch = branch.orelse[0] if len(branch.orelse) == 1 else None
        return False

    def _fails(self, block: list, after: list) -> bool:
        for statement in block:
            if not (isinstance(statement, ast.If) and self.npu_truth(statement.test) is True):
                continue
            if any(isinstance(s, ast.Raise) for s in statement.body):
                return True
            for s in statement.body:
                call = s.value if isinstance(s, ast.Expr) else None
                if (isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute)
                        and call.func.attr == "append" and isinstance(call.func.value, ast.Name)):
                    failures = call.func.value.id
                    if any(isinstance(a, ast.If) and isinstance(a.test, ast.Name) and a.test.id == failures
                           and any(isinstance(r, ast.Raise) for r in a.body) for a in after):
                        return True
        return False


def _bound_once(function: ast.AST, name: str) -> Optional[ast.expr]:
    """The value of the one assignment `name = value` of the function (not a parameter)."""
    a = function.args
    if name in {p.arg for p in (*a.posonlyargs, *a.args, *a.kwonlyargs, a.vararg, a.kwarg) if p is not None}:
        return None
    stores = [n for n in _own_nodes(function) if isinstance(n, ast.Name) and n.id == name
              and not isinstance(n.ctx, ast.Load)]
    assigns = [n for n in _own_nodes(function) if isinstance(n, ast.Assign) and len(n.targets) == 1
               and isinstance(n.targets[0], ast.Name) and n.targets[0].id == name]
    return assigns[0].value if len(stores) == 1 and len(assigns) == 1 else None


def untaken(tree: ast.Module, lines: list, truth, segment,
            interest: Optional[set] = None) -> list[tuple[int, int, str, bool]]:
    """(first line, last line, the reason, False) of the branches `if value == "lit":` whose value a
    method of the class returns, never "lit" on an NPU host (only in classes holding a line of
    `interest`)."""
    out: list[tuple[int, int, str, bool]] = []
    if not _resolver_test().search("".join(lines)):
        return out
    classes = [n for n in astcache.walk_statements(tree) if isinstance(n, ast.ClassDef)
               and (interest is None or any(n.lineno <= line <= (n.end_lineno or n.lineno) for line in interest))]
    for cls in classes:
        info = None
        for method in cls.body:
            if not isinstance(method, _FUNCTIONS):
                continue
            for branch in _own_nodes(method):
                if not isinstance(branch, ast.If) or not branch.body:
                    continue
                compared = _compared(branch.test)
                if compared is None or not isinstance(compared[0], ast.Name):
                    continue
                if interest is not None and not any(
                        branch.body[0].lineno <= line <= (branch.body[-1].end_lineno or 0) for line in interest):
                    continue
                info = info or _Class(cls, truth)
                value = _bound_once(method, compared[0].id)
                resolver = _self_method(value, info.methods) if value is not None else None
                if resolver is None or info.may_return(resolver, compared[1]):
                    continue
                first = min([branch.body[0].lineno, *(d.lineno for d in getattr(branch.body[0], "decorator_list", ()))])
                out.append((first, branch.body[-1].end_lineno or branch.body[-1].lineno,
                            f"`{segment(lines, branch.test)}`: `{cls.name}.{resolver}` never returns "
                            f"\"{compared[1]}\" on an NPU host (it validates that value against a CUDA-only test)",
                            False))
    return out
