"""Rewrites that would widen a CUDA-only gate (issue #16; DESIGN.md invariants 1 and 4).

`platform.CudaOnlyGates` keeps a device check meaning CUDA when the code it guards in the same
`if` is CUDA-only. This module adds the shapes where the CUDA-only part is one step away, so
that rewriting the check (or a device value next to it) would send an NPU host into code the
original never ran there. Each answer is a reason for NPU110 ("Device check guards CUDA-only
code (<why>); left unchanged"), or None:

- A device list in a predicate that chooses a Triton path (`_use_triton(device)` returning
  `_TRITON_AVAILABLE and device.type in ("cuda", "xpu")`): "npu" is not added (kind "list"), and
  a comparison there is not widened (kind "check").
- An availability check (`torch.cuda.is_available()`, kind "available") paired with a "cuda"
  label the rules keep: in a test or fixture parametrized with "cuda", or guarding code that
  appends "cuda" to a list (`if torch.cuda.is_available(): devices += ["cuda"]`). Rewriting the
  check alone would make "cuda" a device on an NPU host.
- An availability check inside a class or function that builds or loads CUDA extensions
  (`CUDA_HOME`, nvcc, `CUDAExtension`, `.cu` sources): such an extension is not available on an
  NPU host, whatever the accelerator.
- A check that raises (or asserts) unless the device is CUDA, in a module that runs CUDA kernels
  (Triton kernels, CUDA-only packages, CuTe/CUTLASS), with a message that names CUDA or kernels.
- A function holding a kept "raise unless CUDA" check: its device defaults (`device or
  torch.device("cuda")`, kind "value") stay CUDA, and a device check of the same class whose
  guarded code calls that method (directly or through another method) stays too.

Everything here is read from the file's ast, once per file, on the first question.
"""

from __future__ import annotations

import ast
import re
from typing import Callable, Optional

from . import astcache

# A "cuda" label: the literal device type (with an index)
_CUDA_LABEL = re.compile(r"cuda(:\d+)?")
# A name in a predicate that chooses a Triton or CUDA-kernel path
_KERNEL_PREDICATE = re.compile(r"triton|cuda_?kernel|cuda_?ext", re.IGNORECASE)


def _fast_path(name: str) -> str:
    """What a kernel predicate's name selects: a Triton path (`_TRITON_AVAILABLE`), or a CUDA
    kernel or extension path (ColossalAI's `enable_cuda_kernels` picks its `fused_optim` extension)."""
    return "Triton path" if re.search(r"(?i)triton", name) else "CUDA-kernel (extension) path"
# What builds or loads a CUDA extension (names, attributes, string values)
_EXTENSION_NAMES = re.compile(r"CUDA_HOME|CUDAExtension|nvcc(_\w+)?")
_EXTENSION_STRINGS = re.compile(r"\bnvcc\b|\.cu$|\.cuh$")
# Messages that say the check is about CUDA (kernels)
_CUDA_MESSAGE = re.compile(r"\bcuda\b|\bkernels?\b|\btriton\b", re.IGNORECASE)
# Imports that are kernel languages (besides the CUDA-only modules of rules/sweep.toml)
_KERNEL_IMPORTS = ("triton", "cutlass", "cupy", "pycuda", "numba.cuda", "cuda")
# Methods that add an element to a collection
_ADDERS = frozenset(("append", "add", "insert", "extend", "appendleft"))
_PARAMETRIZERS = frozenset(("parametrize", "fixture"))


def _dotted(node: ast.AST) -> Optional[str]:
    return astcache.dotted(node, strict=True)


def _label(node: ast.AST) -> bool:
    return isinstance(node, ast.Constant) and isinstance(node.value, str) and bool(_CUDA_LABEL.fullmatch(node.value))


def guarded_nodes(blocks: list) -> list[tuple[ast.AST, Optional[ast.AST]]]:
    """(node, parent) for every node under the guarded blocks."""
    out: list[tuple[ast.AST, Optional[ast.AST]]] = []
    stack: list[tuple[ast.AST, Optional[ast.AST]]] = [(b, None) for b in blocks]
    while stack:
        node, parent = stack.pop()
        out.append((node, parent))
        stack.extend((child, node) for child in ast.iter_child_nodes(node))
    return out


def _polarity(test: ast.AST) -> tuple[bool, bool]:
    """(a check that holds on CUDA, a check that holds off CUDA) in `test` (platform's notion)."""
    from .families import platform  # (families import this module)

    return platform.polarity(test)


def _strings(node: ast.AST) -> str:
    return " ".join(n.value for n in ast.walk(node) if isinstance(n, ast.Constant) and isinstance(n.value, str))


def extension_evidence(scope: ast.AST) -> Optional[str]:
    """What in `scope` (docstrings aside) says it builds or loads a CUDA extension (`CUDA_HOME`,
    `CUDAExtension`, nvcc, a `.cu` source), as the message names it, or None (also for wording21.py)."""
    docstrings = {id(n.value) for n in ast.walk(scope) if isinstance(n, ast.Expr)}
    for sub in ast.walk(scope):
        if id(sub) in docstrings:
            continue
        if isinstance(sub, ast.Name) and _EXTENSION_NAMES.fullmatch(sub.id):
            return sub.id
        if isinstance(sub, ast.Attribute) and _EXTENSION_NAMES.fullmatch(sub.attr):
            return sub.attr
        if isinstance(sub, ast.alias) and _EXTENSION_NAMES.fullmatch(sub.name.rsplit(".", 1)[-1]):
            return sub.name
        if isinstance(sub, ast.Constant) and isinstance(sub.value, str) and _EXTENSION_STRINGS.search(sub.value):
            return repr(sub.value)[:40]
    return None


class RewriteGates:
    """Answers `at(position, kind)` for one file (see the module docstring)."""

    def __init__(self, tree: ast.Module, lines, bound: Callable[[], dict], gate_at: Callable) -> None:
        self.tree = tree
        self.lines = lines  # platform._Lines of the file: ast byte columns as character columns
        self.bound = bound  # the file's names bound to CUDA-only code (platform.CudaOnlyGates)
        self.gate_at = gate_at  # platform.CudaOnlyGates.at
        self._parents: Optional[dict[int, ast.AST]] = None
        self._kernel_module: Optional[bool] = None
        self._raising: dict[int, Optional[str]] = {}  # function id -> why it raises unless CUDA

    # ------------------------------------------------------------------ the way down
    def _contains(self, node: ast.AST, position: tuple[int, int]) -> bool:
        if getattr(node, "lineno", None) is None or getattr(node, "end_lineno", None) is None:
            return False
        decorators = getattr(node, "decorator_list", None)
        if decorators:  # a definition starts at its first decorator
            return self.lines.scope(decorators[0], "", node).contains(position)
        return self.lines.scope(node, "").contains(position)

    def _path(self, position: tuple[int, int]) -> list[ast.AST]:
        """The nodes from the module down to the innermost one holding `position`."""
        path: list[ast.AST] = []
        node: Optional[ast.AST] = self.tree
        while node is not None:
            path.append(node)
            node = next((c for c in ast.iter_child_nodes(node) if self._contains(c, position)), None)
        return path

    def at(self, position: tuple[int, int], kind: str) -> Optional[str]:
        if not position[0]:
            return None
        try:
            path = self._path(position)
            if kind in ("list", "check"):
                why = self._kernel_predicate(path)
                if why:
                    return why
            if kind == "available":
                why = self._labelled(path, position) or self._extension_scope(path)
                if why:
                    return why
            if kind in ("check", "available"):
                why = self._raises_unless_cuda(path, position) or self._calls_raising_method(path, position)
                if why:
                    return why
            if kind == "value":
                return self._in_raising_function(path)
        except RecursionError:
            return None
        return None

    def raises_unless_cuda(self, position: tuple[int, int]) -> Optional[str]:
        """The reason when the check at `position` raises (or asserts) unless the device is CUDA in
        a module that runs CUDA kernels (`_raises_unless_cuda`), else None: the more exact reason
        for a check whose later code also uses a CUDA-only package (a CuTe-DSL module's input
        check: it raises on an NPU host, the right answer there)."""
        if not position[0]:
            return None
        try:
            return self._raises_unless_cuda(self._path(position), position)
        except RecursionError:
            return None

    # ------------------------------------------------------------------ Triton predicates
    def _kernel_predicate(self, path: list[ast.AST]) -> Optional[str]:
        """The check is an operand of an `and` chain with a Triton name (`_TRITON_AVAILABLE and
        device.type in (...)`), or returned by a function named for a Triton or CUDA-kernel path."""
        assigned: Optional[str] = None  # `on_cuda = x.device.type == "cuda"`: the name the check is kept in
        for node in reversed(path):
            if isinstance(node, ast.BoolOp) and isinstance(node.op, ast.And):
                name = self._kernel_operand(node)
                if name:
                    return f"it chooses a {_fast_path(name)} with `{name}`; the NPU takes the other path"
            if (isinstance(node, ast.Assign) and len(node.targets) == 1
                    and isinstance(node.targets[0], ast.Name)):
                assigned = node.targets[0].id
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and assigned:
                # the name is an operand of an `and` with a Triton name in the same function
                for chain in ast.walk(node):
                    if (isinstance(chain, ast.BoolOp) and isinstance(chain.op, ast.And)
                            and any(isinstance(v, ast.Name) and v.id == assigned for v in chain.values)):
                        name = self._kernel_operand(chain)
                        if name:
                            return (f"it is kept in `{assigned}`, which chooses a {_fast_path(name)} with "
                                    f"`{name}`; the NPU takes the other path")
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                if _KERNEL_PREDICATE.search(node.name) and self._returns_check(node, path):
                    return f"`{node.name}()` chooses a Triton or CUDA-kernel path; the NPU takes the other path"
                return None
            if isinstance(node, (ast.ClassDef, ast.Lambda)):
                return None
        return None

    @staticmethod
    def _kernel_operand(chain: ast.BoolOp) -> Optional[str]:
        """The Triton name among the operands of an `and` chain, if any."""
        for operand in chain.values:
            for sub in ast.walk(operand):
                name = sub.id if isinstance(sub, ast.Name) else sub.attr if isinstance(sub, ast.Attribute) else None
                if name and _KERNEL_PREDICATE.search(name):
                    return name
        return None

    @staticmethod
    def _returns_check(function: ast.AST, path: list[ast.AST]) -> bool:
        """The position is in a `return` statement of `function` (a predicate)."""
        index = path.index(function)
        return any(isinstance(n, ast.Return) for n in path[index + 1:])

    # ------------------------------------------------------------------ "cuda" labels
    def _labelled(self, path: list[ast.AST], position: tuple[int, int]) -> Optional[str]:
        guard = self._guard(path, position)
        if guard is not None:
            for block in guarded_nodes(guard[1]):
                if self._kept_label(*block):
                    return ('it guards adding the label "cuda", which stays: rewriting the check alone '
                            'would make "cuda" a device on an NPU host')
        for node in reversed(path):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                for decorator in node.decorator_list:
                    if not isinstance(decorator, ast.Call):
                        continue
                    name = (_dotted(decorator.func) or "").rsplit(".", 1)[-1]
                    if name in _PARAMETRIZERS and any(_label(n) for n in ast.walk(decorator)):
                        return ('the test is parametrized with the label "cuda", which stays: on an NPU host '
                                "the CUDA case must still skip")
        return None

    def _guard(self, path: list[ast.AST], position: tuple[int, int]):
        """(test, guarded nodes) of the innermost `if` or conditional expression whose test holds
        the position: its body (the test as written holds on CUDA) or else branch (negated)."""
        for node in reversed(path):
            if isinstance(node, (ast.If, ast.IfExp)) and self._contains(node.test, position):
                negated = isinstance(node.test, ast.UnaryOp) and isinstance(node.test.op, ast.Not)
                body = node.body if isinstance(node.body, list) else [node.body]
                orelse = node.orelse if isinstance(node.orelse, list) else [node.orelse]
                return node.test, (orelse if negated else body)
            if isinstance(node, ast.stmt):
                return None
        return None

    @staticmethod
    def _kept_label(node: ast.AST, parent: Optional[ast.AST]) -> bool:
        """A "cuda" literal no rule rewrites: an element of a list, tuple or set (not a device
        list the rules add "npu" to: `choices=`, `click.Choice(...)`, the right of `in`), or the
        value added by `.append("cuda")` and the like."""
        if isinstance(node, (ast.List, ast.Tuple, ast.Set)):
            if not any(_label(e) for e in node.elts):
                return False
            if isinstance(parent, ast.keyword) and parent.arg == "choices":
                return False
            if isinstance(parent, ast.Call) and (_dotted(parent.func) or "").rsplit(".", 1)[-1] == "Choice":
                return False
            if isinstance(parent, ast.Compare) and node in parent.comparators:
                return False
            return True
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in _ADDERS:
            return any(_label(a) for a in node.args)
        return False

    # ------------------------------------------------------------------ CUDA extensions
    def _extension_scope(self, path: list[ast.AST]) -> Optional[str]:
        """The check is in a class (or, outside classes, a function) that builds or loads CUDA
        extensions."""
        scope = next((n for n in path if isinstance(n, ast.ClassDef)), None)
        if scope is None:
            scope = next((n for n in path if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))), None)
        if scope is None:
            return None
        found = extension_evidence(scope)
        if found is None:
            return None
        kind = "class" if isinstance(scope, ast.ClassDef) else "function"
        return (f"the {kind} `{scope.name}` builds or loads CUDA extensions ({found}), "
                "which are not available on an NPU host")

    # ------------------------------------------------------------------ raise unless CUDA
    def kernel_module(self) -> bool:
        """The file runs CUDA kernels: it binds CUDA-only code (Triton kernels, CUDA-only
        packages) or imports a kernel language anywhere (CuTe/CUTLASS, CuPy, ...)."""
        if self._kernel_module is None:
            found = bool(self.bound())
            if not found:
                for sub in ast.walk(self.tree):
                    names = []
                    if isinstance(sub, ast.Import):
                        names = [a.name for a in sub.names]
                    elif isinstance(sub, ast.ImportFrom) and sub.module and not sub.level:
                        names = [sub.module]
                    if any(n == k or n.startswith(k + ".") for n in names for k in _KERNEL_IMPORTS):
                        found = True
                        break
            self._kernel_module = found
        return self._kernel_module

    def _raises_unless_cuda(self, path: list[ast.AST], position: tuple[int, int]) -> Optional[str]:
        """`if x.device.type != "cuda": raise ...("... CUDA kernels ...")` or `assert x.is_cuda,
        "must be CUDA"` in a module that runs CUDA kernels: widened, an NPU tensor would pass the
        check and reach the kernels."""
        statement = next((n for n in reversed(path) if isinstance(n, (ast.If, ast.Assert))
                          and self._contains(n.test, position)),
                         None)
        if statement is None or not self._cuda_guard(statement):
            return None
        if not self.kernel_module():
            return None
        return "it fails unless the device is CUDA, in a module that runs CUDA kernels"

    @staticmethod
    def _cuda_guard(statement: ast.AST) -> bool:
        """An `if <not CUDA>: raise` or `assert <CUDA>` whose message names CUDA or kernels."""
        positive, negative = _polarity(statement.test)
        if isinstance(statement, ast.Assert):
            return positive and not negative and statement.msg is not None and bool(
                _CUDA_MESSAGE.search(_strings(statement.msg)))
        if not (negative and not positive) or not statement.body or not isinstance(statement.body[-1], ast.Raise):
            return False
        return bool(_CUDA_MESSAGE.search(_strings(statement.body[-1])))

    def _raising_why(self, function: ast.AST) -> Optional[str]:
        """Why `function` raises unless the device is CUDA (a kept check of its own), or None."""
        key = id(function)
        if key not in self._raising:
            self._raising[key] = None
            for sub in ast.walk(function):
                if isinstance(sub, ast.If) and sub.body and isinstance(sub.body[-1], ast.Raise):
                    positive, negative = _polarity(sub.test)
                    if negative and not positive and (
                            self.gate_at((sub.test.lineno, self.lines.column(sub.test.lineno, sub.test.col_offset))) or
                            (self.kernel_module() and self._cuda_guard(sub))):
                        self._raising[key] = f"`{function.name}` raises unless the device is CUDA (line {sub.lineno})"
                        break
        return self._raising[key]

    def _in_raising_function(self, path: list[ast.AST]) -> Optional[str]:
        function = next((n for n in reversed(path) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))), None)
        if function is None:
            return None
        why = self._raising_why(function)
        return f"a device default of a function that stays CUDA-only: {why}" if why else None

    def _calls_raising_method(self, path: list[ast.AST], position: tuple[int, int]) -> Optional[str]:
        """A device check whose guarded code calls a method of its class that raises unless the
        device is CUDA (directly or through other methods of the class)."""
        cls = next((n for n in reversed(path) if isinstance(n, ast.ClassDef)), None)
        guard = self._guard(path, position)
        if cls is None or guard is None:
            return None
        methods = {m.name: m for m in cls.body if isinstance(m, (ast.FunctionDef, ast.AsyncFunctionDef))}
        if not methods:
            return None
        raising = {name: why for name, m in methods.items() if (why := self._raising_why(m))}
        if not raising:
            return None
        # methods that reach a raising one through `self.x()` / `cls.x()` / `Class.x()` calls
        reach = dict(raising)
        changed = True
        while changed:
            changed = False
            for name, method in methods.items():
                if name in reach:
                    continue
                callee = next((c for c in self._method_calls(method, cls.name) if c in reach), None)
                if callee is not None:
                    reach[name] = reach[callee]
                    changed = True
        for block in guard[1]:
            callee = next((c for c in self._method_calls(block, cls.name) if c in reach), None)
            if callee is not None:
                return f"it guards `{callee}()`, and {reach[callee]}"
        return None

    @staticmethod
    def _method_calls(node: ast.AST, class_name: str):
        for sub in ast.walk(node):
            if isinstance(sub, ast.Call) and isinstance(sub.func, ast.Attribute) and isinstance(sub.func.value, ast.Name):
                if sub.func.value.id in ("self", "cls", class_name):
                    yield sub.func.attr
