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

A string equal to the helper's name, held as data (`kind = "flashinfer_autotune"`, a dict value in a
test) and passed to no call (passed_strings), is no lookup where no file that names the helper's
module can look a name up in it (looks_up: a computed `getattr` on a name bound to that module,
`globals()`, `vars()`, `__dict__`, `sys.modules` read by a computed or its own name,
`import_module`, `attrgetter`); a string in the helper's own module, or for a package's
`__init__`, still keeps the finding.

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
    assignment, a plain import of `name`, a parameter, a star import). `nodes`: the file's nodes on lines naming
    it (callersonly's byte test); the whole tree is walked only when one of them is such an alias."""
    if not any(isinstance(n, ast.alias) and n.asname == name and n.name.rsplit(".", 1)[-1] != name for n in nodes):
        return False
    for node in ast.walk(tree):
        if isinstance(node, ast.alias):
            if node.name == "*":
                return False  # (a star import may bind it too)
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


_LOOKUP_CALLS = frozenset({"__import__", "import_module", "attrgetter", "methodcaller", "getmembers"})
_SYS_WRITES = frozenset({"setitem", "dict", "delitem", "pop"})


def module_bindings(tree: ast.Module, stem: str) -> set[str]:
    """The names (dotted) by which a file holds the module whose last component is `stem`:
    `import a.b.stem` (`a.b.stem`), `import a.b.stem as m` (`m`), `from a.b import stem [as m]`."""
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                if a.name == stem or a.name.endswith("." + stem):
                    out.add(a.asname or a.name)
        elif isinstance(node, ast.ImportFrom):
            for a in node.names:
                if a.name == stem:
                    out.add(a.asname or stem)
    return out


def looks_up(tree: ast.Module, stem: str) -> str | None:
    """What in a file naming the module `stem` may look a function of it up by a string (a lookup
    by name needs the module object, so a file that does not name the module cannot): `getattr`
    with a computed name on a name bound to the module, `globals()`, `vars()`, `__dict__`,
    `sys.modules` read (not only written: stubs; not only read by another module's name),
    `import_module`, `__import__`, `attrgetter`,
    `getmembers`. None when there is none."""
    from . import astcache

    held = module_bindings(tree, stem)
    writes: set[int] = set()
    def other_module(key: ast.AST | None) -> bool:  # (`sys.modules.get("pkg.other")`: another module)
        return isinstance(key, ast.Constant) and isinstance(key.value, str) \
            and key.value.rpartition(".")[2] != stem

    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and _last(node.func) in _SYS_WRITES and node.args:
            writes.add(id(node.args[0]))
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "get" \
                and node.args and other_module(node.args[0]):
            writes.add(id(node.func.value))
        elif isinstance(node, ast.Subscript) and (not isinstance(node.ctx, ast.Load) or other_module(node.slice)):
            writes.add(id(node.value))
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            last = _last(node.func)
            if last in _LOOKUP_CALLS:
                return f"`{last}(...)`"
            if last in ("globals", "vars") and not node.args and isinstance(node.func, ast.Name):
                return f"`{last}()`"
            if last == "getattr" and isinstance(node.func, ast.Name) and len(node.args) >= 2 \
                    and not isinstance(node.args[1], ast.Constant) and astcache.dotted(node.args[0], strict=True) in held:
                return f"`getattr({astcache.dotted(node.args[0])}, ...)`"
        elif isinstance(node, ast.Attribute):
            if node.attr == "__dict__":
                return "`__dict__`"
            if _sys_modules(node) and id(node) not in writes:
                return "`sys.modules`"
    return None


def passed_strings(tree: ast.Module, name: str) -> set[int]:
    """The ids of the string constants `name` passed to a call (`getattr(mod, "name")`,
    `registry.get("name")`, `resolve("name")`): a call may look the name up; a string merely held
    (a dict value, a class attribute, a comparison) is not, unless something holding the module
    looks names up (looks_up)."""
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            for arg in (*node.args, *(k.value for k in node.keywords)):
                if isinstance(arg, ast.Constant) and arg.value == name:
                    out.add(id(arg))
    return out
