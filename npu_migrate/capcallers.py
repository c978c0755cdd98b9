"""Which mentions of a helper's name callersonly reads as its references (issue #16, round 16).

callersonly.py lowers a lazy CUDA-only import (NPU911: `from flashinfer.autotuner import ...` in
vLLM's `flashinfer_autotune()`) to info when every reference of its helper lies in code an NPU
host never runs, such as `elif has_flashinfer() and current_platform.has_device_capability(90):`
(round-15 audit AP#2). Any other mention keeps the finding. Three kinds of mention are no call of
the helper, read here off the tree callersonly already parsed (no parse of its own):

- a string that names the attribute a test *writes* (`monkeypatch.setattr(mod, "name", fake)`,
  `setattr(mod, "name", v)`, `mock.patch.object(mod, "name", ...)`, `delattr`): it replaces the
  attribute, it looks nothing up (attribute_writes);
- a bare name in a file that binds that name only to another object (`from vllm.utils.flashinfer
  import autotune as flashinfer_autotune`, no def, class, assignment or plain import of the name):
  there it is that object (rebinds_other);
- a reference in a test file that installs stubs of the package's modules in `sys.modules`
  (`monkeypatch.setitem(sys.modules, "flashinfer.autotuner", stub)`, `sys.modules["flashinfer.x"]
  = stub`, `patch.dict(sys.modules, {"flashinfer.x": stub})`): there the lazy import resolves to
  the stub, it does not reach the CUDA-only package (stub_reason).

A helper imported under another name (`from pkg.warm import helper as tune`) keeps its finding:
its calls through that name are not read (callersonly, fixed in the same change: the test it had
could never hold).
"""

from __future__ import annotations

import ast
import re

_WRITES = frozenset({"setattr", "delattr", "object"})  # (`patch.object(mod, "name", ...)` writes too)
_TEST_FILE = re.compile(r"(^|/)(tests?/|test_[^/]*\.py$|[^/]*_test\.py$|conftest\.py$)")
_STUB_FUNCS = frozenset({"setitem", "dict"})  # (monkeypatch.setitem(sys.modules, k, v), patch.dict(sys.modules, {...}))


def _last(func: ast.AST) -> str:
    return func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""


def attribute_writes(tree: ast.Module, name: str) -> set[int]:
    """The ids of the string constants `name` that are the attribute argument of a write
    (`setattr(obj, "name", v)`, `monkeypatch.setattr(obj, "name", v)`, `patch.object(obj, "name")`,
    `delattr(obj, "name")`): the second positional argument, after an object."""
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and _last(node.func) in _WRITES and len(node.args) >= 2:
            arg = node.args[1]
            if isinstance(arg, ast.Constant) and arg.value == name and not isinstance(node.args[0], ast.Constant):
                out.add(id(arg))
    return out


def rebinds_other(tree: ast.Module, name: str, nodes: list) -> bool:
    """Whether the file binds `name` only as another object's alias (`import x as name`, `from m
    import other as name`, `other` not `name`): nothing else binds it (a def, a class, an
    assignment, a plain import of `name`, a parameter). `nodes`: the file's nodes on lines naming
    it (callersonly's byte test); the whole tree is walked only when one of them is such an alias."""
    if not any(isinstance(n, ast.alias) and n.asname == name and n.name.rsplit(".", 1)[-1] != name for n in nodes):
        return False
    for node in ast.walk(tree):
        if isinstance(node, ast.alias):
            if (node.asname or node.name.split(".", 1)[0]) == name and not (
                    node.asname == name and node.name.rsplit(".", 1)[-1] != name):
                return False
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and node.name == name:
            return False
        elif isinstance(node, ast.Name) and node.id == name and not isinstance(node.ctx, ast.Load):
            return False
        elif isinstance(node, ast.arg) and node.arg == name:
            return False
        elif isinstance(node, (ast.Global, ast.Nonlocal)) and name in node.names:
            return False
    return True


def _sys_modules(node: ast.AST) -> bool:
    return isinstance(node, ast.Attribute) and node.attr == "modules" and isinstance(node.value, ast.Name) \
        and node.value.id == "sys"


def stubbed_modules(tree: ast.Module) -> set[str]:
    """The module names a file installs in `sys.modules` (keys of `sys.modules[...] = ...`,
    `monkeypatch.setitem(sys.modules, "m", ...)`, `patch.dict(sys.modules, {"m": ...})`)."""
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign):
            for target in node.targets:
                if isinstance(target, ast.Subscript) and _sys_modules(target.value) \
                        and isinstance(target.slice, ast.Constant) and isinstance(target.slice.value, str):
                    out.add(target.slice.value)
        elif isinstance(node, ast.Call) and _last(node.func) in _STUB_FUNCS and node.args and _sys_modules(node.args[0]):
            if len(node.args) >= 2 and isinstance(node.args[1], ast.Constant) and isinstance(node.args[1].value, str):
                out.add(node.args[1].value)
            elif len(node.args) >= 2 and isinstance(node.args[1], ast.Dict):
                out.update(k.value for k in node.args[1].keys
                           if isinstance(k, ast.Constant) and isinstance(k.value, str))
    return out


def stub_reason(relpath: str, data: bytes, tree: ast.Module, package: str | None) -> str | None:
    """The reason a reference in a test file does not reach the CUDA-only `package`: the file
    installs stubs of it in `sys.modules` (the lazy import resolves to them); else None. A byte
    test first: only a test file whose text names `sys.modules` and the package is walked."""
    if package is None or not _TEST_FILE.search(relpath) or b"modules" not in data or package.encode() not in data:
        return None
    stubs = sorted(m for m in stubbed_modules(tree) if m == package or m.startswith(package + "."))
    if not stubs:
        return None
    shown = ", ".join(f"`{m}`" for m in stubs[:3]) + (f" and {len(stubs) - 3} more" if len(stubs) > 3 else "")
    return f"in a test that installs stubs of {shown} in sys.modules: the import there resolves to them"
