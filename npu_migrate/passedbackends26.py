"""A process-group backend a helper receives from callers that pick it for the device (issue #16,
precision wave 26, round-25 audit BT#34). Whole run (runplan.whole_run_passes, after resolved.py,
before moot.to_scopes).

resolved.py settles an NPU304 ("Process-group backend comes from a value npu-migrate cannot see")
whose value is assigned in the function or class from torch's device-to-backend map. A helper that
only passes its parameter on is left open:

    def _init_dist_connection(cluster_environment, torch_distributed_backend, ...):
        torch.distributed.init_process_group(torch_distributed_backend, ...)      # NPU304

while every caller hands it an attribute its class sets from that map:

    class DDPStrategy:
        def __init__(self, ..., process_group_backend: Optional[str] = None):
            self._process_group_backend: Optional[str] = process_group_backend
        def setup_distributed(self):
            self._process_group_backend = self._get_process_group_backend()
            _init_dist_connection(self.cluster_environment, self._process_group_backend)
        def _get_process_group_backend(self):
            return self._process_group_backend or _backend_for_device(self.root_device)

    def _backend_for_device(device):                  # reads default_device_backend_map
        ...

torch_npu registers "npu": "hccl" in `torch.distributed.Backend.default_device_backend_map`, so
the backend is HCCL on an NPU host unless the user configures one (their setting, which the tool
migrates where they write it). The finding becomes resolved.BACKEND's named scope, whose reason
names the callers and the function that reads the map.

Exact: the finding's value is a parameter of its function (with no default, or `None`), not
assigned again in the function; the run calls the function (by name, or as an attribute) at least
once, and at every call the argument for that parameter (by position or keyword) is `self.<attr>`
whose every assignment in the caller's class is (a) the value of a parameter of `__init__`
defaulting to None (the user's setting), or (b) a call of a method of that class (or of the run by
that name) every `return` of which is that same attribute or a call of a run function whose body
reads the device-to-backend map (resolved's table, rules/sweep.toml [resolved] backend_sources), or
an `or` of such values. A literal, a local, a call with the argument missing or unpacked
(`*args`), another attribute, a method returning anything else, or no call at all keeps the finding.
"""

from __future__ import annotations

import ast
import dataclasses
import functools
from typing import Optional

from . import astcache, catalogue

_FUNCTIONS = (ast.FunctionDef, ast.AsyncFunctionDef)
_OPEN = "Process-group backend comes from a value npu-migrate cannot see"


@functools.lru_cache(maxsize=None)
def _map_words() -> tuple[bytes, ...]:
    sources = catalogue.read_table("sweep.toml").get("resolved", {}).get("backend_sources", ())
    return tuple(s.encode() for s in sources if s != "hccl")


def _asks(finding) -> bool:
    return (finding.code == "NPU304" and not finding.fixable and finding.cell is None and finding.severity != "info"
            and not finding.also and finding.message.startswith(_OPEN))


class _Run:
    def __init__(self, results: list, paths: dict) -> None:
        from .modpaths import RunTexts

        self.results = results
        self.text_of = RunTexts(results, paths)
        self.trees: dict = {}

    def tree(self, i: int):
        if i not in self.trees:
            data = self.text_of(i)
            self.trees[i] = astcache.parse(data) if data else None
        return self.trees[i]

    def python(self):
        return [i for i, r in enumerate(self.results) if r.relpath.endswith(".py")]

    def functions_named(self, name: str) -> list[tuple[int, ast.AST]]:
        out = []
        needle = f"def {name}(".encode()
        for i in self.python():
            data = self.text_of(i)
            if data and needle in data and (tree := self.tree(i)) is not None:
                out.extend((i, n) for n in astcache.walk(tree) if isinstance(n, _FUNCTIONS) and n.name == name)
        return out


def _enclosing(tree: ast.AST, line: int, kinds: tuple) -> Optional[ast.AST]:
    best = None
    for node in astcache.walk(tree):
        if isinstance(node, kinds) and node.lineno <= line <= (node.end_lineno or node.lineno):
            if best is None or node.lineno >= best.lineno:
                best = node
    return best


def _parameter(func: ast.AST, name: str) -> Optional[tuple[int, bool]]:
    """(positional index or -1 for keyword-only, whether its default is absent or None)."""
    args = func.args
    positional = [*args.posonlyargs, *args.args]
    defaults = [None] * (len(positional) - len(args.defaults)) + list(args.defaults)
    for k, arg in enumerate(positional):
        if arg.arg == name:
            default = defaults[k]
            return k, default is None or (isinstance(default, ast.Constant) and default.value is None)
    for arg, default in zip(args.kwonlyargs, args.kw_defaults):
        if arg.arg == name:
            return -1, default is None or (isinstance(default, ast.Constant) and default.value is None)
    return None


def _assigned_again(func: ast.AST, name: str) -> bool:
    return any(isinstance(n, (ast.Assign, ast.AnnAssign, ast.AugAssign)) and any(
        isinstance(t, ast.Name) and t.id == name
        for t in (n.targets if isinstance(n, ast.Assign) else [n.target])) for n in ast.walk(func))


def _argument(call: ast.Call, index: int, name: str, method_call: bool) -> Optional[ast.AST]:
    if any(isinstance(a, ast.Starred) for a in call.args):
        return None
    given = next((k.value for k in call.keywords if k.arg == name), None)
    if given is None and index >= 0:
        at = index - (1 if method_call else 0)
        given = call.args[at] if 0 <= at < len(call.args) else None
    return given


def _self_attr(node: ast.AST) -> Optional[str]:
    if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "self":
        return node.attr
    return None


class _Resolver:
    def __init__(self, run: _Run) -> None:
        self.run = run
        self.readers: list[str] = []

    def reads_map(self, name: str) -> bool:
        found = self.run.functions_named(name)
        if not found:
            return False
        for i, func in found:
            lines = (self.run.text_of(i) or b"").splitlines()[func.lineno - 1:func.end_lineno]
            if not any(word in b"\n".join(lines) for word in _map_words()):
                return False
        i, func = found[0]
        self.readers.append(f"`{name}` ({self.run.results[i].relpath}:{func.lineno})")
        return True

    def returned(self, value: ast.AST, attr: str) -> bool:
        if isinstance(value, ast.BoolOp) and isinstance(value.op, ast.Or):
            return all(self.returned(v, attr) for v in value.values)
        if _self_attr(value) == attr:
            return True
        if isinstance(value, ast.Call) and isinstance(value.func, ast.Name):
            return self.reads_map(value.func.id)
        return False

    def method(self, cls: Optional[ast.ClassDef], name: str, attr: str) -> bool:
        """Every `return` of the method `name` (of `cls`, else of the run) resolves (`self.<attr>`
        itself, a map reader's call, an `or` of them)."""
        found = [n for n in cls.body if isinstance(n, _FUNCTIONS) and n.name == name] if cls is not None else []
        funcs = found or [f for _i, f in self.run.functions_named(name)]
        if not funcs:
            return False
        for func in funcs:
            returns = [n for n in ast.walk(func) if isinstance(n, ast.Return)]
            if not returns or any(r.value is None for r in returns):
                return False
            if not all(self.returned(r.value, attr) for r in returns):
                return False
        return True

    def attribute(self, cls: ast.ClassDef, attr: str) -> bool:
        """Every assignment of `self.<attr>` in `cls` is a user setting or a device pick."""
        values = []
        for node in ast.walk(cls):
            if isinstance(node, ast.Assign) and any(_self_attr(t) == attr for t in node.targets):
                values.append((node, node.value))
            elif isinstance(node, ast.AnnAssign) and _self_attr(node.target) == attr and node.value is not None:
                values.append((node, node.value))
            elif isinstance(node, ast.AugAssign) and _self_attr(node.target) == attr:
                return False
        picked = False
        for node, value in values:
            method = _enclosing(cls, node.lineno, _FUNCTIONS)
            if isinstance(value, ast.Name) and method is not None and method.name == "__init__":
                facts = _parameter(method, value.id)
                if facts is None or not facts[1]:
                    return False
            elif isinstance(value, ast.Call) and isinstance(value.func, ast.Attribute) \
                    and _self_attr(value.func) is not None and not value.args and not value.keywords:
                if not self.method(cls, value.func.attr, attr):
                    return False
                picked = True
            else:
                return False
        return picked


def _why(run: _Run, result_index: int, finding) -> Optional[str]:
    tree = run.tree(result_index)
    name = (finding.source or "").strip()
    if tree is None or not name.isidentifier():
        return None
    func = _enclosing(tree, finding.line, _FUNCTIONS)
    if func is None or _assigned_again(func, name):
        return None
    facts = _parameter(func, name)
    if facts is None or not facts[1]:
        return None
    index, _none = facts
    resolver = _Resolver(run)
    callers = []
    needle = f"{func.name}(".encode()
    for i in run.python():
        data = run.text_of(i)
        if not data or needle not in data or (other := run.tree(i)) is None:
            continue
        for call in astcache.walk(other):
            if not isinstance(call, ast.Call):
                continue
            callee = call.func.attr if isinstance(call.func, ast.Attribute) else getattr(call.func, "id", None)
            if callee != func.name:
                continue
            given = _argument(call, index, name, isinstance(call.func, ast.Attribute) and isinstance(
                call.func.value, ast.Name) and call.func.value.id in ("self", "cls"))
            attr = _self_attr(given) if given is not None else None
            cls = _enclosing(other, call.lineno, (ast.ClassDef,))
            if attr is None or cls is None or not resolver.attribute(cls, attr):
                return None
            callers.append(f"{run.results[i].relpath}:{call.lineno}")
    if not callers or not resolver.readers:
        return None
    from .resolved import BACKEND

    shown = ", ".join(callers[:3]) + (f" and {len(callers) - 3} more" if len(callers) > 3 else "")
    return (f"{BACKEND}`{name}` is passed by every caller ({shown}) from an attribute their class sets to the "
            f"user's setting or else to the backend {resolver.readers[0]} picks for the device from torch's "
            f"device-to-backend map")


def review(results: list, paths: dict) -> list:
    """Module's doc (a new list)."""
    if not any(_asks(f) for r in results for f in r.findings):
        return results
    run = _Run(results, paths)
    out = list(results)
    for i, result in enumerate(results):
        if not any(_asks(f) for f in result.findings):
            continue
        findings = []
        for finding in result.findings:
            why = _why(run, i, finding) if _asks(finding) else None
            findings.append(dataclasses.replace(finding, severity="info", message=f"{finding.message} ({why})")
                            if why else finding)
        out[i] = dataclasses.replace(result, findings=sorted(findings))
    return out
