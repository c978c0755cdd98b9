"""Modules imported only past a project predicate that answers False on an NPU host unless an
environment variable is set (issue #16, policy P1; round-32 audit GA#37). For registryoptin28.py,
whose fixpoint over import sites takes these gates beside its `if envs.X:` blocks.

xformers:

    # xformers/__init__.py
    @compute_once
    def _is_triton_available():
        if os.environ.get("XFORMERS_ENABLE_TRITON", "0") == "1":
            return True
        if not torch.cuda.is_available():
            return False
        ...
        if torch.cuda.get_device_capability("cuda") < (8, 0):   # the shim answers (0, 0)
            return False
        ...

    # xformers/ops/rope_padded.py
    def rope_padded(...):
        ...
        assert _is_triton_available()
        from ._triton.rope_padded_kernels import _rope_padded_kernel    # NPU910 in that module

The predicate is another library's own switch, not an entry of a project `envs.py` table: read by
flagcalls19's interpreter it is unknown on an NPU host (the variable may be set), and read with
every environment switch of the `env_opt_in` shape (`os.environ.get("X", "0") == "1"`,
`bool(int(os.getenv("X", 0)))`) at its default, unset, it returns False there. So an NPU host
imports rope_padded_kernels.py only when its user sets XFORMERS_ENABLE_TRITON=1: an explicit
choice (P1). The gates read (`blocks`): the rest of a block after `assert T` with T so false, the
body of `if T:` so false, the rest of a block after `if T: <always leaves>` with T so true, T
calling such a predicate (`P()`, `mod.P()`; `TYPE_CHECKING` is false at run time). registryoptin28
then lowers the open findings of a module every library import site of which lies in such a gate
(or in a module so loaded) to info "reached on an NPU host only when the environment variable
`XFORMERS_ENABLE_TRITON` is set (...)", naming the predicate and the sites. Never dropped.

Kept (the nearest true cases): a predicate whose other returns an NPU host may reach are not all
false (`return HAS_TRITON` of an unknown probe), one already false without the variable (no user's
choice: flagcalls19's "not run" reading), a switch on by default (`os.environ.get("X", "1")`), a
variable a library file sets itself (`os.environ["X"] = "1"`), a module also imported outside the
gate (xformers' splitk_kernels.py: `get_kernel` imports it with no gate).
"""

from __future__ import annotations

import ast
import re
from typing import Optional

from . import astcache
from .flagcalls19 import Run as _FlagRun

_FUNCTIONS = (ast.FunctionDef, ast.AsyncFunctionDef)


def _env_test(node: ast.AST) -> Optional[str]:
    from .tritonguards23 import env_opt_in

    return env_opt_in(node)


def _written(name: str, results: list, library: list, text_of) -> bool:
    """Whether a library file sets the variable itself (`os.environ["X"] = ...`, `setdefault("X", ...)`)."""
    write = re.compile(rb"(environ\[\s*|setdefault\(\s*|putenv\(\s*)[\"']" + re.escape(name.encode())
                       + rb"[\"']\s*(\]\s*=[^=]|,)")
    return any((data := text_of(i)) and name.encode() in data and write.search(data) for i in library)


def _is_type_checking(node: ast.AST) -> bool:
    return (astcache.dotted(node) or "").rsplit(".", 1)[-1] == "TYPE_CHECKING"


class _EnvRun(_FlagRun):
    """flagcalls19's interpreter with every environment switch of the `env_opt_in` shape at its
    default (unset: false), each such variable read recorded in `assumed`."""

    def __init__(self, results: list, text_of, written) -> None:
        super().__init__(results, text_of)
        self.assumed: list = []
        self.written = written

    def value(self, i, node, env, local, depth, used):
        name = _env_test(node)
        if name is not None and not self.written(name):
            if name not in self.assumed:
                self.assumed.append(name)
            return False
        if _is_type_checking(node):
            return False  # (`if TYPE_CHECKING or P():` at run time)
        return super().value(i, node, env, local, depth, used)


def _enabling(function: ast.AST) -> list:
    """The variables of `if <switch>: return <true constant>` statements of the function (the
    switches that turn the predicate on); empty when it has none."""
    out = []
    for node in ast.walk(function):
        if isinstance(node, ast.If) and (name := _env_test(node.test)) is not None and any(
                isinstance(s, ast.Return) and isinstance(s.value, ast.Constant) and s.value.value
                for s in node.body):
            out.append(name)
    return out


class Predicates:
    """The run's library functions false on an NPU host unless an environment variable is set."""

    def __init__(self, results: list, library: list, text_of, modules) -> None:
        self.results, self.library, self.text_of = results, library, text_of
        self.modules = modules
        self.known: dict = {}  # (i, name) -> (variables, "how") or None
        self.names: set = set()  # (candidates' names: the only calls looked up)
        self._written: dict = {}
        self.run = _EnvRun(results, text_of, self.written)

    def candidates(self) -> set:
        """The names (bytes) of module-level library functions testing an environment switch."""
        out = set()
        for i in self.library:
            data = self.text_of(i)
            if not data or (b"environ" not in data and b"getenv" not in data) or (tree := self.modules.tree(i)) is None:
                continue
            for stmt in tree.body:
                if isinstance(stmt, _FUNCTIONS) and any(isinstance(n, ast.If) and _env_test(n.test)
                                                        for n in ast.walk(stmt)):
                    out.add(stmt.name.encode())
        self.names = out
        return out

    def written(self, name: str) -> bool:
        if name not in self._written:
            self._written[name] = _written(name, self.results, self.library, self.text_of)
        return self._written[name]

    def of(self, i: int, function: ast.AST) -> Optional[tuple]:
        """(variables, "how") of a module-level function of module i so false, else None."""
        key = (i, function.name)
        if key in self.known:
            return self.known[key]
        self.known[key] = None
        if not any(isinstance(n, ast.If) and _env_test(n.test) for n in ast.walk(function)):
            return None
        if _FlagRun(self.results, self.text_of).call(i, function, 0) is False:
            return None  # (false with no variable at all: flagcalls19's "not run" reading)
        run = _EnvRun(self.results, self.text_of, self.written)
        value = run.call(i, function, 0)
        if value is not False or not run.assumed:
            return None
        names = [n for n in _enabling(function) if n in run.assumed] or run.assumed
        shown = " or ".join(f"`{n}`" for n in names)
        how = (f"`{function.name}()` ({self.results[i].relpath}:{function.lineno}) answers False on an NPU "
               f"host unless {shown} is set")
        self.known[key] = (tuple(names), how)
        return self.known[key]

    def called(self, i: int, test: ast.AST, local: frozenset) -> list:
        """The predicates a test calls: [(variables, how)]."""
        out = []
        for node in ast.walk(test):
            if not isinstance(node, ast.Call):
                continue
            word = node.func.id if isinstance(node.func, ast.Name) else node.func.attr \
                if isinstance(node.func, ast.Attribute) else None
            if word is None or word.encode() not in self.names:
                continue
            target = None
            if isinstance(node.func, ast.Name) and node.func.id not in local:
                target = self.run.lookup(i, node.func.id)
            elif isinstance(node.func, ast.Attribute) and isinstance(node.func.value, ast.Name) \
                    and node.func.value.id not in local:
                owner = self.run.lookup(i, node.func.value.id)
                target = self.run.lookup(owner[1], node.func.attr) if owner is not None and owner[0] == "module" else None
            if target is not None and target[0] == "def":
                found = self.of(target[2], target[1])
                if found is not None:
                    out.append(found)
        return out

    def truth(self, i: int, test: ast.AST, local: frozenset):
        from .flagtruth import UNKNOWN

        value = self.run.truth(i, test, {}, local, 0, [])
        return None if value is UNKNOWN else value


def _segment(test: ast.AST) -> str:
    return " ".join(ast.unparse(test).split())[:80]


def blocks(i: int, tree: ast.Module, preds: Predicates) -> list:
    """(first, last line, variable, line of the gate, "after `assert P()` (line n)") of each region of
    module i an NPU host runs only when a predicate's variable is set."""
    from .flagtruth import always_exits, local_names

    data = preds.text_of(i) or b""
    if b"(" not in data:
        return []
    out: list = []
    locals_of: dict = {}

    def gate(test: ast.AST, function) -> Optional[tuple]:
        if not any(isinstance(n, ast.Call) and ((isinstance(n.func, ast.Name) and n.func.id.encode() in preds.names)
                   or (isinstance(n.func, ast.Attribute) and n.func.attr.encode() in preds.names))
                   for n in ast.walk(test)):
            return None
        if id(function) not in locals_of:
            locals_of[id(function)] = local_names(function)
        local = locals_of[id(function)]
        found = preds.called(i, test, local)
        if not found:
            return None
        return found, preds.truth(i, test, local)

    def visit(body: list, function) -> None:
        for k, stmt in enumerate(body):
            if isinstance(stmt, _FUNCTIONS):
                visit(stmt.body, stmt)
                continue
            if isinstance(stmt, ast.ClassDef):
                visit(stmt.body, None)
                continue
            rest = body[k + 1:]
            if isinstance(stmt, ast.Assert) and rest and (g := gate(stmt.test, function)) and g[1] is False:
                for variables, _how in g[0]:
                    out.append((rest[0].lineno, rest[-1].end_lineno or rest[-1].lineno, variables[0], stmt.lineno,
                                f"after `assert {_segment(stmt.test)}` (line {stmt.lineno})"))
            if isinstance(stmt, ast.If) and (g := gate(stmt.test, function)):
                found, value = g
                if value is False and stmt.body:
                    for variables, _how in found:
                        out.append((stmt.body[0].lineno, stmt.body[-1].end_lineno or stmt.body[-1].lineno,
                                    variables[0], stmt.lineno, f"under `if {_segment(stmt.test)}:` (line {stmt.lineno})"))
                elif value is True and rest and not stmt.orelse and always_exits(stmt.body):
                    for variables, _how in found:
                        out.append((rest[0].lineno, rest[-1].end_lineno or rest[-1].lineno, variables[0], stmt.lineno,
                                    f"after `if {_segment(stmt.test)}:` leaves (line {stmt.lineno})"))
            for field in ("body", "orelse", "finalbody"):
                inner = getattr(stmt, field, None)
                if isinstance(inner, list) and not isinstance(stmt, _FUNCTIONS):
                    visit(inner, function)
            for handler in getattr(stmt, "handlers", ()) or ():
                visit(handler.body, function)

    visit(tree.body, None)
    return out


def switches(preds: Predicates) -> dict:
    """{variable: how} of the predicates worked out so far (registryoptin28's wording table)."""
    out: dict = {}
    for found in preds.known.values():
        if found is not None:
            for name in found[0]:
                out.setdefault(name, found[1])
    return out
