"""An FP8 dtype a user picks by name for a function only the host framework calls (issue #16,
precision wave 27, helper h125; round audit BQ#34, policy P1). Whole run, from
runplan.whole_run_passes.

A plug-in node of a host application (a ComfyUI node class: `FUNCTION = "load_unet"`, its inputs
a drop-down list) maps the user's choice to a dtype:

    def load_unet(self, unet_name, weight_dtype, options=None):
        model_options = {}
        if weight_dtype == "fp8_e4m3fn":
            model_options["dtype"] = torch.float8_e4m3fn      # NPU913
        elif weight_dtype == "fp8_e5m2":
            model_options["dtype"] = torch.float8_e5m2

The FP8 dtype is reached only when the caller passes that string, and no call of the run calls
the function at all: the caller is outside the package (the framework, handing on what its user
chose). Under the owner's policy P1 (opt-in code stays an info note) the finding is **info**
"reached on an NPU host only when a user chooses "fp8_e4m3fn" for `weight_dtype`", naming the
function and that no call of the run calls it; never a scope (the user may choose it on an NPU
host, where FP8 compute still needs porting).

An NPU913 report-only finding (error or warning, not fixable) qualifies when every line of it lies
in the body of an `if` (an `elif` too) whose test is `P == "literal"` (either side), where P is a
parameter of the innermost enclosing function F that F never assigns, with no default or a
default other than the literal; and no file of the run calls F by its name (`F(...)`,
`obj.F(...)`) or refers to it as a value other than in a string (a registration by name). Kept: a
function the run calls (its callers' values decide), a parameter F rebinds, a default equal to the
literal, an `else:` branch, a test of anything else.
"""

from __future__ import annotations

import ast
from dataclasses import replace
from typing import Optional

from . import astcache

CHOSEN = "reached on an NPU host only when a user chooses {choices} for `{param}` (policy P1: opt-in)"
_FUNCTIONS = (ast.FunctionDef, ast.AsyncFunctionDef)
_NO_DEFAULT = object()


def _choice(test: ast.AST, params: set) -> Optional[tuple[str, str]]:
    """(parameter, literal) of a test `P == "literal"` (either side)."""
    if not (isinstance(test, ast.Compare) and len(test.ops) == 1 and isinstance(test.ops[0], ast.Eq)):
        return None
    left, right = test.left, test.comparators[0]
    for name, value in ((left, right), (right, left)):
        if isinstance(name, ast.Name) and name.id in params and isinstance(value, ast.Constant) \
                and isinstance(value.value, str):
            return name.id, value.value
    return None


def _params(function: ast.AST) -> dict[str, object]:
    """Parameter -> its default: a constant's value, `...` for another expression, _NO_DEFAULT."""
    args = function.args
    positional = [*args.posonlyargs, *args.args]
    out: dict[str, object] = {a.arg: _NO_DEFAULT for a in positional + args.kwonlyargs}
    for a, d in zip(positional[len(positional) - len(args.defaults):], args.defaults):
        out[a.arg] = d.value if isinstance(d, ast.Constant) else ...
    for a, d in zip(args.kwonlyargs, args.kw_defaults):
        if d is not None:
            out[a.arg] = d.value if isinstance(d, ast.Constant) else ...
    return out



def _rebinds(function: ast.AST, name: str) -> bool:
    for node in ast.walk(function):
        if isinstance(node, ast.Name) and node.id == name and isinstance(node.ctx, (ast.Store, ast.Del)):
            return True
    return False


def _place(tree: ast.Module, parents: dict, line: int) -> Optional[tuple[ast.AST, str, str]]:
    """(function, parameter, literal) of the chosen branch holding line `line`, or None."""
    statements = [n for n in astcache.walk(tree) if isinstance(n, ast.stmt) and n.lineno == line
                  and not isinstance(n, (ast.If, *_FUNCTIONS, ast.ClassDef))]
    if not statements:
        return None
    child, up = statements[0], parents.get(id(statements[0]))
    branch = None
    while up is not None and not isinstance(up, _FUNCTIONS):
        if isinstance(up, ast.If) and branch is None:
            if child not in up.body:
                return None  # (an `else:`)
            branch = up
        child, up = up, parents.get(id(up))
    if branch is None or up is None:
        return None
    params = _params(up)
    found = _choice(branch.test, set(params))
    if found is None:
        return None
    param, literal = found
    default = params[param]
    if default is ... or default == literal or _rebinds(up, param):
        return None
    return up, param, literal


def _called(name: str, python: list, text_of) -> bool:
    """Whether any file of the run calls `name` or refers to it as a value (a string aside)."""
    from .modpaths import parsed

    for _j, tree in parsed(python, text_of, name.encode()):
        if tree is None:
            return True
        for node in astcache.walk(tree):
            if isinstance(node, ast.Name) and node.id == name and isinstance(node.ctx, ast.Load):
                return True
            if isinstance(node, ast.Attribute) and node.attr == name:
                return True
    return False


def review(results: list, paths: Optional[dict] = None) -> list:
    """The results, with the NPU913 findings of the module doc's shape info (policy P1)."""
    from .modpaths import RunTexts
    from .moot import is_moot

    def candidate(f) -> bool:
        return (f.code == "NPU913" and not f.fixable and f.cell is None and f.severity != "info"
                and not is_moot(f))

    targets = [i for i, r in enumerate(results) if r.relpath.endswith(".py") and any(candidate(f) for f in r.findings)]
    if not targets:
        return results
    text_of = RunTexts(results, paths or {})
    python = [i for i, r in enumerate(results) if r.relpath.endswith(".py")]
    out = list(results)
    for i in targets:
        data = text_of(i)
        if not data or b"==" not in data:
            continue
        tree = astcache.parse(data)
        if tree is None:
            continue
        parents = astcache.parents(tree)
        findings = list(results[i].findings)
        changed = False
        for k, f in enumerate(findings):
            if not candidate(f):
                continue
            places = [_place(tree, parents, line) for line in dict.fromkeys([f.line, *(a[0] for a in f.also)])]
            if not places or any(p is None for p in places):
                continue
            functions = {id(p[0]) for p in places}
            params = {p[1] for p in places}
            if len(functions) != 1 or len(params) != 1:
                continue
            function = places[0][0]
            if _called(function.name, python, text_of):
                continue
            choices = " or ".join(f'"{c}"' for c in dict.fromkeys(p[2] for p in places))
            note = CHOSEN.format(choices=choices, param=places[0][1])
            message = (f"{f.message} ({note}: no call of the run calls `{function.name}` (line "
                       f"{function.lineno}); its caller, outside the package, passes the user's choice)")
            findings[k] = replace(f, severity="info", message=message)
            changed = True
        if changed:
            out[i] = replace(results[i], findings=findings)
    return out
