"""A constructor's flag parameter off by default that no file of the run sets (issue
#16, policy P1; round-33 audit HA#6). Whole run, from runplan.whole_run_passes (after envchains32).

torchao's `_models/sam2/modeling/sam2_base.py`:

    class SAM2Base(torch.nn.Module):
        def __init__(self, image_encoder, ..., compile_image_encoder: bool = False):   # the 30th parameter
            ...
            if compile_image_encoder:
                self.image_encoder.forward = torch.compile(..., mode="max-autotune")  # NPU903

The name `compile_image_encoder` appears nowhere else in the run (no call, no keyword, no config
file, no string): the block runs only where a user's own code passes `compile_image_encoder=True`.
Policy P1: info naming the choice and its default, never an error, never dropped. optin27.py reads
the same test when the file's own calls and `store_true` options set the flag; optparams20.py and
unsetcallers26.py read private helpers; this pass takes a public class's constructor whose callers
are unknown but none in the run can set the flag.

Each report-only place (error or warning, open, not fixable) inside the body of an `if NAME:` (or
`if NAME and ...:`) of a class's constructor (`__init__`: a choice made once, when the object is
built), NAME a parameter of it with the default `False` that it never assigns, becomes info when:
* the word NAME occurs in no other file of the run (Python, YAML, TOML, shell: any text the run
  reads), and in its own file only inside that function;
* the parameter cannot be set by position: it is keyword-only, or every call in the run of the
  function's name (the class's name for `__init__`, and any `.__init__(...)` call in a file naming the
  class) passes fewer positional arguments than its index and no `*args`.
The place is split from the finding's other places (envskips29.lower_places): they keep their
severity.

Kept (the nearest true cases): a library caller that passes `NAME=True` (or any value) anywhere in the
run, a config file that names the key, a positional call long enough to reach it, a default that is
not `False` (`True`, None: "auto"), a parameter reassigned in the function, code after the `if` or in
its `else`, a plain function's flag (test_h86's `capture(fn, use_graph=False)`: a library's user may
call it with the flag on at any step, the finding stays), a configuration class (`*Config`, `*Args`,
a `PretrainedConfig`: a checkpoint's JSON or a parser sets its flags by name; optchoice29.py reads
its fields).
"""

from __future__ import annotations

import ast
import re
from typing import Optional

from . import astcache

_FUNCTIONS = (ast.FunctionDef, ast.AsyncFunctionDef)
_SCOPES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)
CHOSEN = ("reached on an NPU host only when `{name}=True` is passed to `{owner}` (default False at line "
          "{line}; no file of the run sets it): an opt-in, to port if it is used there")


def _own_nodes(function):
    """The nodes of the function's own scope (nested functions, lambdas and classes left out)."""
    stack = list(function.body)
    while stack:
        node = stack.pop()
        yield node
        if not isinstance(node, _SCOPES):
            stack.extend(ast.iter_child_nodes(node))


def _tested(test: ast.expr) -> list[str]:
    if isinstance(test, ast.Name):
        return [test.id]
    if isinstance(test, ast.BoolOp) and isinstance(test.op, ast.And):
        return [v.id for v in test.values if isinstance(v, ast.Name)]
    return []


def _false_params(function) -> dict[str, tuple[int, Optional[int]]]:
    """{name: (line, positional index or None for keyword-only)} of the parameters defaulting to False."""
    args = function.args
    positional = [*args.posonlyargs, *args.args]
    out: dict[str, tuple[int, Optional[int]]] = {}
    for index, (arg, default) in enumerate(zip(positional[len(positional) - len(args.defaults):], args.defaults),
                                           start=len(positional) - len(args.defaults)):
        if isinstance(default, ast.Constant) and default.value is False and arg not in args.posonlyargs:
            out[arg.arg] = (arg.lineno, index)
    for arg, default in zip(args.kwonlyargs, args.kw_defaults):
        if isinstance(default, ast.Constant) and default.value is False:
            out[arg.arg] = (arg.lineno, None)
    return out


def _configuration(cls: ast.ClassDef) -> bool:
    """A configuration class (`*Config`, `*Args`, a `PretrainedConfig`): a checkpoint's JSON or a
    parser's namespace sets its constructor's flags by name, out of the run's sight (optchoice29's fields)."""
    bases = {(astcache.dotted(b) or "").rsplit(".", 1)[-1] for b in cls.bases}
    return cls.name.endswith(("Config", "Args", "Arguments")) or any(b.endswith("Config") for b in bases)


def _spans(tree: ast.Module) -> list:
    """(function, owner name, is a method, {param: (line, index)}, [(first, last, param) of the `if` bodies])."""
    out = []

    def visit(node, owner_class):
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.ClassDef):
                if not _configuration(child):
                    visit(child, child)
            elif isinstance(child, _FUNCTIONS):
                params = _false_params(child) if owner_class is not None and child.name == "__init__" else {}
                if params:
                    stored = {n.id for n in _own_nodes(child) if isinstance(n, ast.Name) and not isinstance(n.ctx, ast.Load)}
                    bodies = []
                    for n in _own_nodes(child):
                        if isinstance(n, ast.If) and n.body:
                            for name in _tested(n.test):
                                if name in params and name not in stored:
                                    bodies.append((n.body[0].lineno, n.body[-1].end_lineno or n.body[-1].lineno, name))
                    if bodies:
                        out.append((child, owner_class, params, bodies))
                visit(child, None)
            else:
                visit(child, owner_class)

    visit(tree, None)
    return out


def _positional_reach(tree: ast.Module, callee: str, init: bool) -> int:
    """The most positional arguments a call of `callee` (or of `.__init__` when `init`) passes in the
    tree; a large number where one splats `*args`."""
    most = 0
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        name = func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else None
        if name != callee and not (init and name == "__init__"):
            continue
        if any(isinstance(a, ast.Starred) for a in node.args):
            return 1 << 20
        most = max(most, len(node.args))
    return most


def review(results: list, paths: dict) -> list:
    """The results, with each open place of the docstring's shape lowered to info (P1)."""
    from .envskips29 import lower_result
    from .modpaths import RunTexts
    from .moot import is_open

    def wanted(f) -> bool:
        return is_open(f) and not f.fixable and f.cell is None and f.severity in ("error", "warning")

    candidates = [i for i, r in enumerate(results) if r.relpath.endswith(".py") and any(map(wanted, r.findings))]
    if not candidates:
        return results
    text_of = RunTexts(results, paths)
    out = list(results)
    for i in candidates:
        data = text_of(i)
        if not data or b"False" not in data or b"if " not in data:
            continue
        tree = astcache.parse(data)
        if tree is None:
            continue
        lines = data.split(b"\n")
        spans = []
        for function, owner_class, params, bodies in _spans(tree):
            first, last = function.lineno, function.end_lineno or function.lineno
            for name in {b[2] for b in bodies}:
                word = re.compile(rb"\b" + re.escape(name.encode()) + rb"\b")
                if any(word.search(line) for k, line in enumerate(lines, start=1) if not first <= k <= last):
                    continue
                raw = name.encode()
                if any(j != i and raw in (text := text_of(j) or b"") and word.search(text) for j in range(len(results))):
                    continue
                line, index = params[name]
                init = function.name == "__init__" and owner_class is not None
                callee = owner_class.name if init else function.name
                owner = f"{owner_class.name}.{function.name}" if owner_class is not None else function.name
                if index is not None:
                    method = owner_class is not None and function.args.args[:1] and \
                        function.args.args[0].arg in ("self", "cls")
                    reach = index - (1 if method else 0)
                    needle = re.compile(rb"\b" + re.escape(callee.encode()) + rb"\b")
                    blocked = False
                    for j in range(len(results)):
                        if not results[j].relpath.endswith(".py"):
                            continue
                        text = text_of(j) or b""
                        if callee.encode() not in text or not needle.search(text):
                            continue
                        other = tree if j == i else astcache.parse(text)
                        if other is None or _positional_reach(other, callee, init) > reach:
                            blocked = True
                            break
                    if blocked:
                        continue
                spans.extend((b0, b1, CHOSEN.format(name=name, owner=owner, line=line))
                             for b0, b1, n in bodies if n == name)

        if not spans:
            continue

        def reason_of(line: int, spans=spans) -> Optional[str]:
            for b0, b1, reason in spans:
                if b0 <= line <= b1:
                    return reason
            return None

        out[i] = lower_result(results[i], reason_of, wanted)
    return out
