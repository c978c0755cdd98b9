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
the message names). Round 28 (h130) widens the same reading by three steps (CB#1, CB#19):
* a value option: `if NAME == "fp8":` (or `NAME in ("a", "b")`) where every call passes `args.dist`
  of an option `--dist` whose constant default (None without one) is not among the values, or a
  value that is not (a literal, another such parameter): "only when `--dist fp8` is chosen";
* a parameter with no default (`do_profile: bool`) counts as one defaulting to False when every call
  passes it, and `if args.profile:` / `if args.dist == "fp8":` tested directly on the namespace too;
* in a script (a module-level `if __name__ == ...:`), a module-level function every call of which
  in the file lies in such opt-in code (`graph = capture(run)` only under `if args.graph:`).
Kept: an option whose default is the tested value, a call passing the value itself outside opt-in
code, a helper also called outside the branch, a helper of a module with no `__main__` block
(another module may call it), `self.x` (not a command line).

Kept (the nearest true cases): a function referenced any other way (handed to
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
    if not wanted or "add_argument" not in text:
        return findings
    tree = astcache.parse(text.encode("utf-8", "surrogatepass"))
    if tree is None:
        return findings
    try:
        module = _Module(tree)
        if not module.options and not module.valued:
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
        self.valued: dict[str, tuple[str, object]] = {}  # dest -> ("--option", its constant default), a stored value
        self.functions: dict[str, list] = {}
        self.script = any(isinstance(s, ast.If) and isinstance(s.test, ast.Compare)
                          and isinstance(s.test.left, ast.Name) and s.test.left.id == "__name__" for s in tree.body)
        for node in astcache.walk(tree):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "add_argument":
                flags = [a.value for a in node.args if isinstance(a, ast.Constant) and isinstance(a.value, str)]
                longs = [f for f in flags if f.startswith("--")]
                dest = next((k.value.value for k in node.keywords if k.arg == "dest"
                             and isinstance(k.value, ast.Constant) and isinstance(k.value.value, str)), None)
                if not longs:
                    continue
                dest = dest or longs[0][2:].replace("-", "_")
                action = next((k.value for k in node.keywords if k.arg == "action"), None)
                if isinstance(action, ast.Constant) and action.value == "store_true":
                    self.options[dest] = longs[0]
                elif action is None or (isinstance(action, ast.Constant) and action.value == "store"):
                    # (h130, CB#1: `--dist` with `default="indexer"`; no default reads None)
                    default = next((k.value for k in node.keywords if k.arg == "default"), ast.Constant(None))
                    if isinstance(default, ast.Constant) and not any(k.arg in ("const", "nargs") for k in node.keywords):
                        self.valued[dest] = (longs[0], default.value)
            elif isinstance(node, _FUNCTIONS):
                self.functions.setdefault(node.name, []).append(node)

    # ---------------------------------------------------------------- what encloses a node
    def _function_of(self, node: ast.AST) -> Optional[ast.AST]:
        up = self.parent.get(id(node))
        while up is not None and not isinstance(up, _FUNCTIONS):
            up = self.parent.get(id(up))
        return up

    def _guards(self, node: ast.AST) -> list[tuple[ast.AST, Optional[frozenset]]]:
        """The tests of the `if`s whose body holds `node`, up to its function: (NAME, None) of `if NAME:`
        (or `if NAME and ...:`), (NAME, values) of `if NAME == "v":` or `if NAME in ("v", "w"):`, and
        the same with `args.x` in the place of NAME."""
        guards, child, up = [], node, self.parent.get(id(node))
        while up is not None and not isinstance(up, _FUNCTIONS):
            if isinstance(up, ast.If) and any(child is s for s in up.body):
                tests = up.test.values if isinstance(up.test, ast.BoolOp) and isinstance(up.test.op, ast.And) else [up.test]
                for test in tests:
                    if isinstance(test, (ast.Name, ast.Attribute)):
                        guards.append((test, None))
                    elif (isinstance(test, ast.Compare) and len(test.ops) == 1
                          and isinstance(test.left, (ast.Name, ast.Attribute))):
                        values = _values(test.ops[0], test.comparators[0])
                        if values:
                            guards.append((test.left, values))
            child, up = up, self.parent.get(id(up))
        return guards

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
        for test, values in self._guards(node):
            if isinstance(test, ast.Attribute):
                found = self._option(test, values, f"the test of line {test.lineno}")
            elif function is not None:
                found = self._flag(self._binder(function, test.id), test.id, depth, values)
            else:
                found = None
            if found is not None:
                return found
        if function is not None and self.script and not self._is_method(function):
            return self._callers_opt_in(function, depth)
        return None

    def _binder(self, function, name: str):
        """The function whose parameter `name` is: `function` itself, or for a name it reads from an
        enclosing function (a closure: `def get_benchmark(..., use_cuda_graph): def benchmark(...):
        if use_cuda_graph: ...`, round 32 GA#28) that one, when no function between binds it."""
        current = function
        while current is not None:
            args = current.args
            if name in {a.arg for a in (*args.posonlyargs, *args.args, *args.kwonlyargs, args.vararg, args.kwarg)
                        if a is not None}:
                return current
            if any(isinstance(n, ast.Name) and n.id == name and not isinstance(n.ctx, ast.Load) for n in ast.walk(current)) \
                    or any(isinstance(n, (ast.Global, ast.Nonlocal)) and name in n.names for n in ast.walk(current)):
                return function  # (bound here: not the enclosing function's parameter)
            current = self._function_of(current)
        return function

    def _callers_opt_in(self, function, depth: int) -> Optional[dict]:
        """Every call of `function` in the file lies in opt-in code (h130: `graph = capture(run)` only
        under `if args.graph:`); a function referenced otherwise, or not called, is kept."""
        calls = self._calls(function)
        if not calls or depth >= _DEPTH:
            return None
        found = [self._opt_in(call, depth + 1) for call in calls]
        if any(f is None for f in found):
            return None
        return {"options": " or ".join(dict.fromkeys(f["options"] for f in found)),
                "why": f"every call of `{function.name}` is: " + "; ".join(dict.fromkeys(f["why"] for f in found))}

    def _option(self, arg: ast.AST, values: Optional[frozenset], where: str) -> Optional[dict]:
        """`args.x` of a store_true option `--x` (values None), or of an option whose default is not
        among `values`: the choice a user makes on the command line."""
        if not (isinstance(arg, ast.Attribute) and isinstance(arg.value, ast.Name)) or arg.value.id in ("self", "cls"):
            return None
        if values is None and arg.attr in self.options:
            return {"options": f"`{self.options[arg.attr]}`", "why": f"`{arg.value.id}.{arg.attr}`, {where}"}
        option = self.valued.get(arg.attr)
        if values is None or option is None or option[1] in values:
            return None
        chosen = " or ".join(f"`{option[0]} {v}`" for v in sorted(values, key=str))
        return {"options": chosen, "why": f"`{arg.value.id}.{arg.attr}` of `{option[0]}`, whose default is "
                                          f"{option[1]!r}, {where}"}

    # ---------------------------------------------------------------- a False-default flag and its callers
    @staticmethod
    def _parameter(function, name: str, values: Optional[frozenset]) -> tuple[Optional[int], bool]:
        """The position of parameter `name` (-1 for keyword-only) when its default is False (values
        None) or a constant not among `values`, or when it has none; else None. And whether it has one."""
        args = function.args
        positional = [*args.posonlyargs, *args.args]
        defaults = [None] * (len(positional) - len(args.defaults)) + list(args.defaults)
        pairs = [(i, a, d) for i, (a, d) in enumerate(zip(positional, defaults))]
        pairs += [(-1, a, d) for a, d in zip(args.kwonlyargs, args.kw_defaults)]
        for index, arg, default in pairs:
            if arg.arg != name:
                continue
            if default is None:  # (h130, CB#19: `do_profile: bool` with no default, always passed)
                return index, False
            if not isinstance(default, ast.Constant):
                return None, True
            if values is None:
                return (index if default.value is False else None), True
            return (index if default.value not in values else None), True
        return None, False

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

    def _flag(self, function, name: str, depth: int, values: Optional[frozenset] = None) -> Optional[dict]:
        position, has_default = self._parameter(function, name, values)
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
            if arg is None:
                if not has_default:
                    return None
                continue
            if isinstance(arg, ast.Constant) and (arg.value is False if values is None else arg.value not in values):
                continue
            if isinstance(arg, ast.Constant) and (arg.value is True if values is None else arg.value in values):
                found = self._opt_in(call, depth + 1)
            elif isinstance(arg, ast.Attribute):
                found = self._option(arg, values, f"passed as `{name}` of `{function.name}`, line {call.lineno}")
                if found is not None and values is None:
                    found["why"] = (f"`{name}` of `{function.name}` is False unless set from "
                                    f"`{arg.value.id}.{arg.attr}`, line {call.lineno}")
            elif isinstance(arg, ast.Name):
                caller = self._function_of(call)
                found = self._flag(caller, arg.id, depth + 1, values) if caller is not None and depth < _DEPTH else None
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


def _values(op: ast.cmpop, right: ast.AST) -> Optional[frozenset]:
    """The string constants of `== "v"` or `in ("v", "w")`; None for any other comparison."""
    if isinstance(op, ast.Eq) and isinstance(right, ast.Constant) and isinstance(right.value, str):
        return frozenset((right.value,))
    if isinstance(op, ast.In) and isinstance(right, (ast.Tuple, ast.List, ast.Set)) and right.elts and all(
            isinstance(e, ast.Constant) and isinstance(e.value, str) for e in right.elts):
        return frozenset(e.value for e in right.elts)
    return None
