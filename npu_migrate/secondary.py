"""Secondary findings that restate what the file already shows (issue #16, round-10 audits).

* **A backend parameter passed through.** NPU304 ("the process-group backend comes from a value
  npu-migrate cannot see") on a function's parameter (`dist.new_group(ranks, backend=backend)` in
  `def _get_group(self, ranks, backend: Optional[str] = None)`) where the file shows every value
  the parameter takes: each call of the function in the file passes None, a string literal, or a
  parameter of its own enclosing function that is seen the same way (followed up the chain:
  `get_group_along_axis(backend=None)` -> `create_group_along_axis(backend=backend)` ->
  `_get_group(backend=backend)`); where no call in the file passes it, its default must be None or
  a literal. `multiprocessing.Process(target=f, args=(...))` counts as a call of `f`. None is the
  default backend, HCCL on an NPU host; a literal "nccl" is rewritten or reported where it is
  written (NPU301/NPU990), so the parameter adds nothing. The finding is lowered to information
  with the reason PASSED_THROUGH, which moot.py names as a scope that runs as written (nothing is
  silent: `skipped`, `--show-skipped`). A parameter without a default and without a call in the
  file, or a call that passes anything else (`cfg.backend`, `*args`, `**kwargs`), keeps the
  warning, and so does a parameter the function assigns anew (`backend = accel.comm_backend`).
  (redundant.fold_backend_callers handles the case where every call passes a literal
  first; this step takes what it leaves.)
"""

from __future__ import annotations

import ast
import re
from dataclasses import replace
from typing import Optional

from .findings import Finding

BACKEND = "NPU304"
# (moot.AS_WRITTEN carries this phrase)
PASSED_THROUGH = "a backend parameter whose every value in this file is seen"
_IDENTIFIER = re.compile(r"[A-Za-z_]\w*")
_FUNCTIONS = (ast.FunctionDef, ast.AsyncFunctionDef)
_DEPTH = 6
FOLDED = "passed by the calls of the function in this file"  # (redundant.fold_backend_callers)


def _params(function) -> list[str]:
    a = function.args
    return [p.arg for p in (*a.posonlyargs, *a.args, *a.kwonlyargs)]


def _enclosing(functions, line: int, name: str):
    """The innermost function around `line` with a parameter `name`."""
    best = None
    for node in functions:
        if node.lineno <= line <= (node.end_lineno or node.lineno) and name in _params(node):
            if best is None or node.lineno > best.lineno:
                best = node
    return best


def _default(function, name: str) -> tuple[bool, Optional[ast.expr]]:
    """(has a default, the default) of parameter `name`."""
    a = function.args
    positional = [p.arg for p in (*a.posonlyargs, *a.args)]
    defaults = dict(zip(positional[len(positional) - len(a.defaults):], a.defaults))
    defaults.update((p.arg, d) for p, d in zip(a.kwonlyargs, a.kw_defaults) if d is not None)
    return (name in defaults, defaults.get(name))


def _calls(tree: ast.Module, function) -> list[tuple[ast.AST, list[ast.expr], list[ast.keyword], bool]]:
    """The calls of `function` in the file: (node, positional args, keywords, bound), `bound` when
    the call goes through an attribute (`self.f(...)`: the first parameter is already bound).
    `Process(target=f, args=(a, b))` counts as `f(a, b)`."""
    out = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        if (isinstance(func, ast.Name) and func.id == function.name) or (
                isinstance(func, ast.Attribute) and func.attr == function.name):
            out.append((node, list(node.args), list(node.keywords), isinstance(func, ast.Attribute)))
            continue
        called = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""
        if called != "Process":
            continue
        keywords = {k.arg: k.value for k in node.keywords}
        target = keywords.get("target")
        if isinstance(target, ast.Name) and target.id == function.name:
            args = keywords.get("args")
            if isinstance(args, ast.Tuple):
                out.append((node, list(args.elts), [], False))
            else:
                out.append((node, [ast.Starred(value=args)] if args is not None else [], [], False))
    return out


def _rebound(function, name: str) -> bool:
    """Whether the function's body assigns `name` (an assignment, a loop or `with` target, `:=`,
    `del`, `global`/`nonlocal`): the parameter is then not the only value the name holds."""
    for node in ast.walk(function):
        if isinstance(node, ast.Name) and node.id == name and isinstance(node.ctx, (ast.Store, ast.Del)):
            return True
        if isinstance(node, (ast.Global, ast.Nonlocal)) and name in node.names:
            return True
    return False


def _seen(value: Optional[ast.expr]) -> bool:
    """None or a string literal: the default backend, or a literal reported where it is written."""
    return isinstance(value, ast.Constant) and (value.value is None or isinstance(value.value, str))


def _all_seen(tree: ast.Module, functions, function, name: str, depth: int, visiting: set) -> bool:
    """Whether every value of parameter `name` of `function` is seen in the file (module doc)."""
    key = (function.lineno, name)
    if depth > _DEPTH or key in visiting:
        return False
    visiting = visiting | {key}
    if _rebound(function, name):
        return False  # (`backend = accelerator.communication_backend` before the call: not the parameter)
    has_default, default = _default(function, name)
    calls = _calls(tree, function)
    if not calls:
        return has_default and _seen(default)
    a = function.args
    positional = [p.arg for p in (*a.posonlyargs, *a.args)]
    index = positional.index(name) if name in positional else None
    method = bool(positional) and positional[0] in ("self", "cls")
    for node, args, keywords, bound in calls:
        if any(isinstance(x, ast.Starred) for x in args) or any(k.arg is None for k in keywords):
            return False
        value = next((k.value for k in keywords if k.arg == name), None)
        if value is None and index is not None:
            at = index - (1 if method and bound else 0)
            if 0 <= at < len(args):
                value = args[at]
        if value is None:
            if not (has_default and _seen(default)):
                return False
            continue
        if _seen(value):
            continue
        if isinstance(value, ast.Name):
            line = getattr(node, "lineno", 0)
            outer = _enclosing(functions, line, value.id)
            if outer is not None and outer is not function \
                    and _all_seen(tree, functions, outer, value.id, depth + 1, visiting):
                continue
        return False
    return True


def review_backend_params(findings: list[Finding], tree: ast.Module) -> list[Finding]:
    """NPU304 warnings on a parameter whose every value the file shows: information with the
    reason PASSED_THROUGH (see the module's doc); the other places of a merged finding stay."""
    if not any(f.code == BACKEND and f.severity != "info" and not f.fixable for f in findings):
        return findings
    from .redundant import _ALSO, _places, _rebuilt  # (redundant.py calls this module)

    functions = [n for n in ast.walk(tree) if isinstance(n, _FUNCTIONS)]
    out = []
    for finding in findings:
        if finding.code != BACKEND or finding.severity == "info" or finding.fixable or finding.cell is not None \
                or FOLDED in finding.message:
            # (a finding that took the literals the calls pass, reported where they are: it names them)
            out.append(finding)
            continue
        kept, lowered = [], []
        for place in _places(finding):
            name = place[2] or ""
            function = _enclosing(functions, place[0], name) if _IDENTIFIER.fullmatch(name) else None
            seen = function is not None and _all_seen(tree, functions, function, name, 0, set())
            (lowered if seen else kept).append(place)
        if not lowered:
            out.append(finding)
            continue
        if kept:
            out.append(_rebuilt(finding, kept))
        for line, column, source in lowered:
            out.append(replace(finding, line=line, column=column, source=source, also=(), severity="info",
                               message=(f"{_ALSO.sub('', finding.message)} ({PASSED_THROUGH}: every call "
                                        f"passes None (the default backend, HCCL on an NPU host), a literal "
                                        f"rewritten or reported where it is written, or a parameter seen "
                                        f"the same way)")))
    return sorted(out)
