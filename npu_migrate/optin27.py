"""Code reached only through a False-default flag that only a store_true command-line option sets
(issue #16, policy P1, round-27 audit BX#34). Per file, after sameguards27.py (run.py).

A benchmark or script wires an opt-in flag through its functions:

    def main(..., do_profile: bool = False):
        def run(num_iters, profile: bool = False):
            if profile:
                torch.cuda.cudart().cudaProfilerStart()      # the finding
            ...
        run(num_iters=5, profile=False)
        if do_profile:
            run(num_iters=1, profile=True)

    parser.add_argument("--profile", action="store_true")
    main(..., do_profile=args.profile)

The finding's block runs only when the user passes `--profile`: an explicit choice. Under policy P1 it
is info, never an error and never dropped: "reached on an NPU host only when `--profile` is chosen".

The decision, per report-only error or warning: an enclosing `if NAME:` (or `if NAME and ...:`) of
its function, NAME a parameter of that function whose default is `False`; every call of the
function in the file (through a plain alias `run_benchmark = run` too) passes NAME as nothing,
`False`, `True` only inside a block that is itself opt-in in the same sense, another such
False-default parameter of the caller (followed the same way), or `args.X` where the file declares
`--x` with `action="store_true"`; and at least one of them is such an option (the option is what
the message names). Kept (the nearest true cases): a function referenced any other way (handed to
another function, exported: its callers are unknown), a flag with no call that sets it (left to
unsetcallers26.py / optparams20.py), a flag set from a value the tool cannot read (`args.x` of an
option that is not store_true, a computed value), a default that is not `False`, and code after the
`if` rather than inside it.
"""

from __future__ import annotations

import ast
import dataclasses
from typing import Optional

from . import astcache
from .findings import Finding
from .folding import ours, places_of

CHOSEN = "reached on an NPU host only when {options} is chosen ({why}): an opt-in, to port if it is used there"
_FUNCTIONS = (ast.FunctionDef, ast.AsyncFunctionDef)
_DEPTH = 4


def review(findings: list[Finding], text: str) -> list[Finding]:
    wanted = [f for f in findings if ours(f) and f.severity != "info"]
    if not wanted or "store_true" not in text or "add_argument" not in text:
        return findings
    tree = astcache.parse(text.encode("utf-8", "surrogatepass"))
    if tree is None:
        return findings
    try:
        module = _Module(tree)
        if not module.options:
            return findings
        out = []
        for finding in findings:
            if finding not in wanted:
                out.append(finding)
                continue
            why = None
            for line, _c, _s in places_of(finding):
                found = module.opt_in_at(line)
                if found is None:
                    why = None
                    break
                why = why or found
            out.append(finding if why is None else dataclasses.replace(
                finding, severity="info", message=f"{finding.message} ({CHOSEN.format(**why)})"))
        return out
    except RecursionError:
        return findings


class _Module:
    def __init__(self, tree: ast.Module) -> None:
        self.tree = tree
        self.parent = astcache.parents(tree)
        self.options: dict[str, str] = {}  # dest -> "--option" (store_true)
        self.functions: dict[str, list] = {}
        for node in astcache.walk(tree):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "add_argument":
                action = next((k.value for k in node.keywords if k.arg == "action"), None)
                if not (isinstance(action, ast.Constant) and action.value == "store_true"):
                    continue
                flags = [a.value for a in node.args if isinstance(a, ast.Constant) and isinstance(a.value, str)]
                longs = [f for f in flags if f.startswith("--")]
                dest = next((k.value.value for k in node.keywords if k.arg == "dest"
                             and isinstance(k.value, ast.Constant) and isinstance(k.value.value, str)), None)
                if longs:
                    self.options[dest or longs[0][2:].replace("-", "_")] = longs[0]
            elif isinstance(node, _FUNCTIONS):
                self.functions.setdefault(node.name, []).append(node)

    # ---------------------------------------------------------------- what encloses a node
    def _function_of(self, node: ast.AST) -> Optional[ast.AST]:
        up = self.parent.get(id(node))
        while up is not None and not isinstance(up, _FUNCTIONS):
            up = self.parent.get(id(up))
        return up

    def _guards(self, node: ast.AST) -> list[str]:
        """Names NAME of the `if NAME:` (or `if NAME and ...:`) whose body holds `node`, up to its function."""
        names, child, up = [], node, self.parent.get(id(node))
        while up is not None and not isinstance(up, _FUNCTIONS):
            if isinstance(up, ast.If) and any(child is s for s in up.body):
                tests = up.test.values if isinstance(up.test, ast.BoolOp) and isinstance(up.test.op, ast.And) else [up.test]
                names += [t.id for t in tests if isinstance(t, ast.Name)]
            child, up = up, self.parent.get(id(up))
        return names

    def _node_at(self, line: int) -> Optional[ast.AST]:
        best = None
        for node in astcache.walk(self.tree):
            if isinstance(node, ast.stmt) and node.lineno <= line <= (node.end_lineno or node.lineno):
                if not hasattr(node, "body") or node.lineno == line:
                    if best is None or node.lineno >= best.lineno:
                        best = node
        return best

    def opt_in_at(self, line: int) -> Optional[dict]:
        node = self._node_at(line)
        return None if node is None else self._opt_in(node, 0)

    def _opt_in(self, node: ast.AST, depth: int) -> Optional[dict]:
        if depth > _DEPTH:
            return None
        function = self._function_of(node)
        if function is None:
            return None
        for name in self._guards(node):
            found = self._flag(function, name, depth)
            if found is not None:
                return found
        return None

    # ---------------------------------------------------------------- a False-default flag and its callers
    @staticmethod
    def _false_default(function, name: str) -> Optional[int]:
        """The position of parameter `name` (-1 for keyword-only) when its default is False; else None."""
        args = function.args
        positional = [*args.posonlyargs, *args.args]
        defaults = [None] * (len(positional) - len(args.defaults)) + list(args.defaults)
        for index, (arg, default) in enumerate(zip(positional, defaults)):
            if arg.arg == name:
                return index if isinstance(default, ast.Constant) and default.value is False else None
        for arg, default in zip(args.kwonlyargs, args.kw_defaults):
            if arg.arg == name:
                return -1 if isinstance(default, ast.Constant) and default.value is False else None
        return None

    def _calls(self, function) -> Optional[list[ast.Call]]:
        """The calls of `function` (by name, or a plain alias of it); None if it is referenced otherwise."""
        if len(self.functions.get(function.name, [])) != 1:
            return None
        names, calls = {function.name}, []
        changed = True
        while changed:  # (aliases: `run_benchmark = run_cuda_benchmark`)
            changed = False
            for node in astcache.walk(self.tree):
                if (isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name)
                        and isinstance(node.value, ast.Name) and node.value.id in names
                        and node.targets[0].id not in names):
                    names.add(node.targets[0].id)
                    changed = True
        for node in astcache.walk(self.tree):
            if not (isinstance(node, ast.Name) and node.id in names and isinstance(node.ctx, ast.Load)):
                continue
            up = self.parent.get(id(node))
            if isinstance(up, ast.Call) and up.func is node:
                calls.append(up)
            elif not (isinstance(up, ast.Assign) and up.value is node):
                return None
        return calls

    def _flag(self, function, name: str, depth: int) -> Optional[dict]:
        position = self._false_default(function, name)
        if position is None:
            return None
        calls = self._calls(function)
        if not calls:
            return None
        options: list[str] = []
        whys: list[str] = []
        for call in calls:
            arg = next((k.value for k in call.keywords if k.arg == name), None)
            if arg is None and position >= 0 and position - (1 if self._is_method(function) else 0) < len(call.args):
                arg = call.args[position - (1 if self._is_method(function) else 0)]
            if any(isinstance(a, ast.Starred) for a in call.args) or any(k.arg is None for k in call.keywords):
                return None
            if arg is None or (isinstance(arg, ast.Constant) and arg.value is False):
                continue
            if isinstance(arg, ast.Constant) and arg.value is True:
                found = self._opt_in(call, depth + 1)
            elif isinstance(arg, ast.Attribute) and isinstance(arg.value, ast.Name) and arg.attr in self.options:
                found = {"options": f"`{self.options[arg.attr]}`",
                         "why": f"`{name}` of `{function.name}` defaults to False and is set from "
                                f"`{arg.value.id}.{arg.attr}`, line {call.lineno}"}
            elif isinstance(arg, ast.Name):
                caller = self._function_of(call)
                found = self._flag(caller, arg.id, depth + 1) if caller is not None and depth < _DEPTH else None
            else:
                found = None
            if found is None:
                return None
            options.append(found["options"])
            whys.append(found["why"])
        if not options:
            return None
        return {"options": " or ".join(dict.fromkeys(options)), "why": "; ".join(dict.fromkeys(whys))}

    def _is_method(self, function) -> bool:
        return isinstance(self.parent.get(id(function)), ast.ClassDef)
