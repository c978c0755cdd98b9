#!/usr/bin/env python3
"""Build ``rules/torch_npu_api.json``: the API surface of real torch_npu wheels.

No machine building npu-migrate has an Ascend NPU, and importing torch_npu needs the
CANN libraries, so this script never imports the wheel.  It opens each wheel as a zip
file and reads:

* the Python sources, with :mod:`ast` (nothing is executed):
  - ``torch_npu/npu/__init__.py`` and the other public modules listed in
    ``PUBLIC_MODULES`` (their ``__all__`` plus the public names they define or
    re-export from inside torch_npu).  Each name is followed through imports,
    star-imports and aliases to the ``def`` / ``class`` that defines it, which gives
    the parameter names, kinds and default values (as source text);
  - public methods, class attributes and the attribute names an object answers in
    ``__getattr__`` / ``__setattr__`` (this is how ``torch.npu.matmul.allow_hf32``
    and ``torch.npu.conv.allow_hf32`` are defined);
  - ``torch_npu/utils/exposed_api.py`` (``public_npu_functions``: the ops listed in
    ``torch_npu.__all__``), ``torch_npu/_op_plugin_docs.py`` (which ops have a
    docstring) and ``torch_npu/op_plugin/atb/_atb_ops.py`` (the lazily loaded ATB ops);
* the operator schema files ``torch_npu/csrc/aten/npu_native_functions*.yaml``:
  every entry of their ``custom:`` section is an op in the ``npu`` namespace, and
  ``torch_npu/__init__.py`` copies every ``torch.ops.npu.<op>`` to ``torch_npu.<op>``.
  The schema gives the parameter names, types and defaults of the default overload.

Names that ``__all__`` lists but no Python source defines are kept with kind
``"unresolved"`` and no signature: for example the typed tensor classes
``torch.npu.FloatTensor`` ..., which the C extension creates at import time.

The output records, per qualified name, the scanned torch_npu versions that have it.
Names under ``torch.npu`` are stored as ``torch_npu.npu.<name>`` (``torch.npu`` *is*
``torch_npu.npu``; the loader in ``npu_migrate/npu_api.py`` maps the prefix).

Rerun (from the repository root)::

    python scripts/build_npu_api_table.py /path/to/torch_npu-2.7.1-*.whl \\
        /path/to/torch_npu-2.14.0-*.whl
    # or let pip fetch the wheels (pip download --no-deps) into a temporary directory:
    python scripts/build_npu_api_table.py --download 2.7.1 2.14.0

Use ``-o PATH`` to write somewhere other than ``rules/torch_npu_api.json``.  The
output is deterministic: the same wheels give byte-identical JSON.
"""

from __future__ import annotations

import argparse
import ast
import hashlib
import json
import os
import re
import subprocess
import sys
import tempfile
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

FORMAT_VERSION = 1
REPO_ROOT = Path(__file__).resolve().parent.parent
DEFAULT_OUTPUT = REPO_ROOT / "rules" / "torch_npu_api.json"

# Modules whose public names go into the table (when the wheel has them).
PUBLIC_MODULES = (
    "torch_npu",
    "torch_npu.npu",
    "torch_npu.npu.amp",
    "torch_npu.npu.aclnn",
    "torch_npu.npu.mstx",
    "torch_npu.npu.utils",
    "torch_npu.npu.random",
    "torch_npu.npu.memory",
    "torch_npu.npu.streams",
    "torch_npu.npu.graphs",
    "torch_npu.npu.npu_config",
    "torch_npu.optim",
    "torch_npu.contrib",
    "torch_npu.contrib.function",
    "torch_npu.contrib.module",
    "torch_npu.contrib.transfer_to_npu",
    "torch_npu.utils",
    "torch_npu.profiler",
    "torch_npu.distributed",
)

OP_SCHEMA_FILES = (
    "torch_npu/csrc/aten/npu_native_functions.yaml",
    "torch_npu/csrc/aten/npu_native_functions_by_codegen.yaml",
)
EXPOSED_API_FILE = "torch_npu/utils/exposed_api.py"
OP_DOCS_FILE = "torch_npu/_op_plugin_docs.py"
ATB_OPS_FILE = "torch_npu/op_plugin/atb/_atb_ops.py"
# torch_npu >= 2.9 (or so) sets some top-level names lazily from a dict
# {"erase_stream": ("torch_npu.npu.utils", "_erase_stream"), ...} in this module:
LAZY_EXPORTS = ("torch_npu._init.core._exports", "_LAZY_PYTHON_SYMBOLS", "torch_npu")

POS_ONLY = "positional_only"
POS_OR_KW = "positional_or_keyword"
VAR_POS = "var_positional"
KW_ONLY = "keyword_only"
VAR_KW = "var_keyword"


# --------------------------------------------------------------------------- wheel I/O


@dataclass
class WheelSource:
    """The text files of one wheel, read from the zip (never extracted, never imported)."""

    version: str
    filename: str
    sha256: str
    files: dict[str, str]  # zip member path -> text, for *.py and *.yaml only

    @classmethod
    def from_path(cls, path: str | os.PathLike) -> "WheelSource":
        path = Path(path)
        data = path.read_bytes()
        files: dict[str, str] = {}
        with zipfile.ZipFile(path) as zf:
            for member in zf.namelist():
                if member.endswith((".py", ".pyi", ".yaml")) and member.startswith("torch_npu/"):
                    files[member] = zf.read(member).decode("utf-8", errors="replace")
        return cls(
            version=wheel_version(path.name, files),
            filename=path.name,
            sha256=hashlib.sha256(data).hexdigest(),
            files=files,
        )


def wheel_version(filename: str, files: dict[str, str] | None = None) -> str:
    """Version from the wheel file name (``torch_npu-2.7.1-cp311-...whl``)."""
    m = re.match(r"torch_npu-([^-]+)-", filename)
    if m:
        return m.group(1)
    src = (files or {}).get("torch_npu/version.py", "")
    m = re.search(r"__version__\s*=\s*['\"]([^'\"]+)['\"]", src)
    if m:
        return m.group(1)
    raise ValueError(f"cannot tell the torch_npu version of {filename}")


def version_key(version: str) -> tuple:
    return tuple(int(x) for x in re.findall(r"\d+", version))


def module_files(files: dict[str, str]) -> dict[str, str]:
    """Map dotted module name -> zip member path for the wheel's Python files."""
    out = {}
    for member in files:
        if not member.endswith(".py"):
            continue
        parts = member[: -len(".py")].split("/")
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = member
    return out


# ------------------------------------------------------------------- Python signatures


def _unparse(node: ast.AST | None) -> str | None:
    return None if node is None else ast.unparse(node)


def params_from_args(args: ast.arguments, drop_first: bool = False) -> list[dict]:
    """Parameters of a ``def`` as dicts: name, kind, and default source text if any."""
    out: list[dict] = []
    positional = [(a, POS_ONLY) for a in args.posonlyargs] + [(a, POS_OR_KW) for a in args.args]
    defaults = [None] * (len(positional) - len(args.defaults)) + list(args.defaults)
    for (arg, kind), default in zip(positional, defaults):
        out.append(_param(arg.arg, kind, _unparse(default)))
    if args.vararg is not None:
        out.append(_param(args.vararg.arg, VAR_POS))
    for arg, default in zip(args.kwonlyargs, args.kw_defaults):
        out.append(_param(arg.arg, KW_ONLY, _unparse(default)))
    if args.kwarg is not None:
        out.append(_param(args.kwarg.arg, VAR_KW))
    if drop_first and out and out[0].get("kind", POS_OR_KW) in (POS_ONLY, POS_OR_KW):
        out = out[1:]
    return out


def _param(name: str, kind: str, default: str | None = None, type_: str | None = None) -> dict:
    """One parameter; ``kind`` is left out when it is the common positional_or_keyword."""
    p = {"name": name}
    if kind != POS_OR_KW:
        p["kind"] = kind
    if type_ is not None:
        p["type"] = type_
    if default is not None:
        p["default"] = default
    return p


def _decorator_names(node: ast.FunctionDef | ast.AsyncFunctionDef) -> set[str]:
    names = set()
    for dec in node.decorator_list:
        target = dec.func if isinstance(dec, ast.Call) else dec
        if isinstance(target, ast.Name):
            names.add(target.id)
        elif isinstance(target, ast.Attribute):
            names.add(target.attr)
    return names


def method_info(node: ast.FunctionDef | ast.AsyncFunctionDef) -> dict:
    decorators = _decorator_names(node)
    if "property" in decorators or "cached_property" in decorators:
        return {"kind": "property"}
    if "staticmethod" in decorators:
        return {"kind": "staticmethod", "params": params_from_args(node.args)}
    kind = "classmethod" if "classmethod" in decorators else "method"
    return {"kind": kind, "params": params_from_args(node.args, drop_first=True)}


def _dynamic_attribute_names(func: ast.FunctionDef | ast.AsyncFunctionDef) -> set[str]:
    """String constants that ``__getattr__``/``__setattr__`` compare its ``name`` argument with."""
    all_args = func.args.posonlyargs + func.args.args
    if len(all_args) < 2:
        return set()
    argname = all_args[1].arg  # (self|cls, name, ...)
    found = set()
    for node in ast.walk(func):
        if not isinstance(node, ast.Compare):
            continue
        operands = [node.left, *node.comparators]
        if not any(isinstance(o, ast.Name) and o.id == argname for o in operands):
            continue
        for o in operands:
            if isinstance(o, ast.Constant) and isinstance(o.value, str):
                found.add(o.value)
            elif isinstance(o, (ast.Tuple, ast.List, ast.Set)):
                found.update(e.value for e in o.elts
                             if isinstance(e, ast.Constant) and isinstance(e.value, str))
    return found


@dataclass
class ClassInfo:
    module: str
    name: str
    bases: list[str]
    init: ast.FunctionDef | None  # __init__, or __new__ if the class has no __init__
    members: dict[str, dict]  # public member name -> info (kind, params)


def class_info(module: str, node: ast.ClassDef) -> ClassInfo:
    members: dict[str, dict] = {}
    init = new = None
    for stmt in node.body:
        if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)):
            if stmt.name == "__init__":
                init = stmt
            elif stmt.name == "__new__":
                new = stmt
            elif stmt.name in ("__getattr__", "__setattr__", "__getattribute__"):
                for attr in _dynamic_attribute_names(stmt):
                    if not attr.startswith("_"):
                        members.setdefault(attr, {"kind": "attribute"})
            elif not stmt.name.startswith("_"):
                members[stmt.name] = method_info(stmt)
        else:
            for target in _assigned_names(stmt) + _declared_names(stmt):
                if not target.startswith("_"):
                    members[target] = {"kind": "attribute"}
    # The constructor signature: __init__, else __new__ (torch_npu.npu.Stream / Event).
    return ClassInfo(module, node.name, [ast.unparse(b) for b in node.bases], init or new, members)


def _declared_names(stmt: ast.stmt) -> list[str]:
    """``name: type`` with no value."""
    if isinstance(stmt, ast.AnnAssign) and stmt.value is None and isinstance(stmt.target, ast.Name):
        return [stmt.target.id]
    return []


def _assigned_names(stmt: ast.stmt) -> list[str]:
    if isinstance(stmt, ast.Assign):
        targets = stmt.targets
    elif isinstance(stmt, ast.AnnAssign):
        targets = [stmt.target]
    else:
        return []
    names = []
    for t in targets:
        if isinstance(t, ast.Name):
            names.append(t.id)
        elif isinstance(t, ast.Tuple):
            names.extend(e.id for e in t.elts if isinstance(e, ast.Name))
    return names


# --------------------------------------------------------------------- module analysis


@dataclass
class ModuleInfo:
    """What a module binds at top level, without running it."""

    name: str
    is_package: bool
    all_names: list[str] | None = None
    # name -> ("def", node) | ("class", node) | ("import", module, attr|None)
    #        | ("assign", value-node)   (later statements override earlier ones)
    bindings: dict[str, tuple] = field(default_factory=dict)
    star_imports: list[str] = field(default_factory=list)
    str_lists: dict[str, list[str]] = field(default_factory=dict)  # NAME = ["a", "b"]
    # NAME = {"x": ("module", "attr"), ...}
    str_pair_dicts: dict[str, dict[str, tuple[str, str]]] = field(default_factory=dict)


def _top_level_statements(body: list[ast.stmt]):
    """Statements run at import time, including those inside top-level if/try blocks."""
    for stmt in body:
        if isinstance(stmt, ast.If):
            yield from _top_level_statements(stmt.body)
            yield from _top_level_statements(stmt.orelse)
        elif isinstance(stmt, ast.Try) or type(stmt).__name__ == "TryStar":
            yield from _top_level_statements(stmt.body)
            for handler in stmt.handlers:
                yield from _top_level_statements(handler.body)
            yield from _top_level_statements(stmt.orelse)
            yield from _top_level_statements(stmt.finalbody)
        else:
            yield stmt


def _string_list(node: ast.AST) -> list[str] | None:
    if isinstance(node, (ast.List, ast.Tuple)):
        items = [e.value for e in node.elts if isinstance(e, ast.Constant) and isinstance(e.value, str)]
        if len(items) == len(node.elts):
            return items
    return None


def _string_pair_dict(node: ast.AST) -> dict[str, tuple[str, str]] | None:
    if not isinstance(node, ast.Dict) or not node.keys:
        return None
    out = {}
    for k, v in zip(node.keys, node.values):
        pair = _string_list(v)
        if not (isinstance(k, ast.Constant) and isinstance(k.value, str) and pair and len(pair) == 2):
            return None
        out[k.value] = (pair[0], pair[1])
    return out


def resolve_relative(module: str, is_package: bool, level: int, target: str | None) -> str:
    if level == 0:
        return target or ""
    parts = module.split(".")
    if not is_package:
        parts = parts[:-1]
    if level > 1:
        parts = parts[: len(parts) - (level - 1)]
    base = ".".join(parts)
    return f"{base}.{target}" if target else base


def analyse_module(name: str, source: str, is_package: bool) -> ModuleInfo:
    info = ModuleInfo(name=name, is_package=is_package)
    tree = ast.parse(source)
    for stmt in _top_level_statements(tree.body):
        if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)):
            info.bindings[stmt.name] = ("def", stmt)
        elif isinstance(stmt, ast.ClassDef):
            info.bindings[stmt.name] = ("class", stmt)
        elif isinstance(stmt, ast.ImportFrom):
            src = resolve_relative(name, is_package, stmt.level, stmt.module)
            for alias in stmt.names:
                if alias.name == "*":
                    info.star_imports.append(src)
                else:
                    info.bindings[alias.asname or alias.name] = ("import", src, alias.name)
        elif isinstance(stmt, ast.Import):
            for alias in stmt.names:
                if alias.asname:
                    info.bindings[alias.asname] = ("import", alias.name, None)
                else:
                    top = alias.name.split(".")[0]
                    info.bindings[top] = ("import", top, None)
        elif isinstance(stmt, ast.AnnAssign) and stmt.value is None:
            for target in _declared_names(stmt):  # "allow_hf32: bool" (set up elsewhere)
                info.bindings.setdefault(target, ("declared",))
        elif isinstance(stmt, (ast.Assign, ast.AnnAssign)) and getattr(stmt, "value", None) is not None:
            for target in _assigned_names(stmt):
                strings = _string_list(stmt.value)
                if target == "__all__":
                    if strings is not None:
                        info.all_names = strings
                    continue
                if strings is not None:
                    info.str_lists[target] = strings
                pairs = _string_pair_dict(stmt.value)
                if pairs is not None:
                    info.str_pair_dicts[target] = pairs
                info.bindings[target] = ("assign", stmt.value)
        elif isinstance(stmt, ast.AugAssign) and isinstance(stmt.target, ast.Name) \
                and stmt.target.id == "__all__":
            extra = _string_list(stmt.value)
            if extra:
                info.all_names = (info.all_names or []) + extra
        elif isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call):
            call = stmt.value  # __all__.extend([...]) / __all__.append("x")
            f = call.func
            if (isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name)
                    and f.value.id == "__all__" and call.args):
                if f.attr == "extend":
                    extra = _string_list(call.args[0]) or []
                elif f.attr == "append" and isinstance(call.args[0], ast.Constant) \
                        and isinstance(call.args[0].value, str):
                    extra = [call.args[0].value]
                else:
                    extra = []
                info.all_names = (info.all_names or []) + extra
    return info


# ---------------------------------------------------------------------- name resolution


@dataclass
class Resolved:
    """What a public name turned out to be."""

    kind: str  # function | class | object | module | attribute | value | extension | external | unresolved
    module: str | None = None
    node: ast.AST | None = None
    target: str | None = None  # dotted name for external / module / object's class
    cls: ClassInfo | None = None  # for class and object


def _is_public_binding(binding: tuple) -> bool:
    """Whether a top-level binding is part of what a module offers.

    Its own def/class/assignments are; so are names imported from public torch_npu
    modules.  Third-party imports (torch, typing ...), helpers imported from private
    modules (ErrCode, PathManager ...) and plain ``import x`` statements are not.
    """
    if binding[0] != "import":
        return True
    src, attr = binding[1], binding[2]
    return (attr is not None and src.startswith("torch_npu")
            and not any(p.startswith("_") for p in src.split(".")))


class Resolver:
    def __init__(self, files: dict[str, str]):
        self.files = files
        self.modfiles = module_files(files)
        self._cache: dict[str, ModuleInfo | None] = {}
        # module -> {name: (source module, attribute)} for names set at import time
        self.lazy: dict[str, dict[str, tuple[str, str]]] = {}
        src_mod, dict_name, target = LAZY_EXPORTS
        info = self.module(src_mod)
        if info is not None and dict_name in info.str_pair_dicts:
            self.lazy[target] = info.str_pair_dicts[dict_name]

    def module(self, name: str) -> ModuleInfo | None:
        if name not in self._cache:
            member = self.modfiles.get(name)
            if member is None:
                self._cache[name] = None
            else:
                try:
                    self._cache[name] = analyse_module(
                        name, self.files[member], member.endswith("__init__.py"))
                except SyntaxError:
                    self._cache[name] = None
        return self._cache[name]

    def exported_names(self, modname: str) -> list[str]:
        """Names ``from modname import *`` would bind."""
        mod = self.module(modname)
        if mod is None:
            return []
        if mod.all_names is not None:
            return list(mod.all_names)
        return [n for n in mod.bindings if not n.startswith("_")]

    def public_names(self, modname: str) -> dict[str, bool]:
        """Public attribute names of a module -> whether listed in its ``__all__``.

        ``__all__`` plus what the module defines itself (def, class, assignment) or
        imports from inside torch_npu; imports of third-party names (``torch``,
        ``typing`` ...) are left out.
        """
        mod = self.module(modname)
        if mod is None:
            return {}
        names = {n: True for n in (mod.all_names or [])}
        for n in self.lazy.get(modname, {}):
            names.setdefault(n, False)
        for n, binding in mod.bindings.items():
            if not n.startswith("_") and n not in names and _is_public_binding(binding):
                names[n] = False
        for star in mod.star_imports:
            src = self.module(star)
            if src is None or not star.startswith("torch_npu"):
                continue
            for n in self.exported_names(star):
                if n.startswith("_") or n in names:
                    continue
                if src.all_names is not None and n in src.all_names:
                    names[n] = False
                elif n in src.bindings and _is_public_binding(src.bindings[n]):
                    names[n] = False
        return names

    def resolve(self, modname: str, name: str, depth: int = 0) -> Resolved:
        if depth > 25:
            return Resolved("external", target=f"{modname}.{name}")
        mod = self.module(modname)
        if mod is None:  # torch_npu._C... is the C extension; anything else is a third party
            kind = "extension" if modname.split(".")[0] == "torch_npu" else "external"
            return Resolved(kind, target=f"{modname}.{name}")
        binding = mod.bindings.get(name)
        if binding is not None:
            return self._resolve_binding(mod, name, binding, depth)
        for star in reversed(mod.star_imports):
            if name in self.exported_names(star):
                return self.resolve(star, name, depth + 1)
        if name in self.lazy.get(modname, {}):
            src, attr = self.lazy[modname][name]
            return self.resolve(src, attr, depth + 1)
        sub = f"{modname}.{name}"
        if sub in self.modfiles:
            return Resolved("module", module=sub, target=sub)
        return Resolved("unresolved", module=modname, target=f"{modname}.{name}")

    def _resolve_binding(self, mod: ModuleInfo, name: str, binding: tuple, depth: int) -> Resolved:
        tag = binding[0]
        if tag == "def":
            return Resolved("function", module=mod.name, node=binding[1])
        if tag == "class":
            return Resolved("class", module=mod.name, node=binding[1],
                            cls=class_info(mod.name, binding[1]))
        if tag == "import":
            src, attr = binding[1], binding[2]
            if attr is None:
                return Resolved("module" if src in self.modfiles else "external", module=src, target=src)
            if f"{src}.{attr}" in self.modfiles and (
                    self.module(src) is None or attr not in self.module(src).bindings):
                return Resolved("module", module=f"{src}.{attr}", target=f"{src}.{attr}")
            return self.resolve(src, attr, depth + 1)
        if tag == "declared":
            return Resolved("attribute", module=mod.name)
        value = binding[1]  # assignment
        return self._resolve_expr(mod, value, depth)

    def _resolve_expr(self, mod: ModuleInfo, value: ast.AST, depth: int) -> Resolved:
        if isinstance(value, ast.Name):
            return self.resolve(mod.name, value.id, depth + 1)
        if isinstance(value, ast.Attribute):
            base = self._resolve_expr(mod, value.value, depth + 1)
            if base.kind == "module" and self.module(base.module) is not None:
                return self.resolve(base.module, value.attr, depth + 1)
            if base.kind == "class" and value.attr == "apply" \
                    and base.cls.members.get("forward", {}).get("kind") == "staticmethod":
                # autograd.Function.apply(*args) takes forward's parameters after ctx
                return Resolved("apply", module=mod.name, target=ast.unparse(value), cls=base.cls)
            if base.kind == "class" and value.attr in base.cls.members:
                return Resolved("value", module=mod.name, target=ast.unparse(value))
            return Resolved("external" if base.kind == "external" else "value",
                            module=mod.name, target=ast.unparse(value))
        if isinstance(value, ast.Call):
            func = self._resolve_expr(mod, value.func, depth + 1)
            if func.kind == "class":
                return Resolved("object", module=func.module, cls=func.cls,
                                target=f"{func.module}.{func.cls.name}")
            return Resolved("value", module=mod.name, target=ast.unparse(value.func) + "(...)")
        return Resolved("value", module=mod.name)

    def class_params(self, cls: ClassInfo, depth: int = 0) -> list[dict] | None:
        """``__init__`` parameters, inherited from a base class inside the wheel if needed."""
        if cls.init is not None:
            return params_from_args(cls.init.args, drop_first=True)
        if depth > 10:
            return None
        mod = self.module(cls.module)
        for base in cls.bases:
            try:
                node = ast.parse(base, mode="eval").body
            except SyntaxError:
                continue
            if mod is None:
                break
            res = self._resolve_expr(mod, node, 0)
            if res.kind == "class" and res.cls is not None:
                return self.class_params(res.cls, depth + 1)
        return None


# ------------------------------------------------------------------------ op schemas

_SCHEMA_RE = re.compile(r"^\s*(?P<name>[A-Za-z_]\w*)(?:\.(?P<overload>\w+))?\s*\((?P<args>.*)\)\s*->\s*(?P<ret>.+?)\s*$")
_ARG_RE = re.compile(r"^(?P<type>.+?)\s+(?P<name>[A-Za-z_]\w*)\s*(?:=\s*(?P<default>.+))?$")


def split_top_level(text: str, sep: str = ",") -> list[str]:
    """Split on ``sep`` outside brackets and quotes."""
    parts, depth, quote, cur = [], 0, None, []
    for ch in text:
        if quote:
            cur.append(ch)
            if ch == quote:
                quote = None
            continue
        if ch in "\"'":
            quote = ch
        elif ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
        elif ch == sep and depth == 0:
            parts.append("".join(cur).strip())
            cur = []
            continue
        cur.append(ch)
    tail = "".join(cur).strip()
    if tail:
        parts.append(tail)
    return parts


def parse_schema(schema: str) -> dict | None:
    """Parse ``name.overload(Type arg=default, *, ...) -> ret`` (the torch op schema language)."""
    m = _SCHEMA_RE.match(schema)
    if not m:
        return None
    params, kind = [], POS_OR_KW
    for raw in split_top_level(m.group("args")):
        if raw == "*":
            kind = KW_ONLY
            continue
        am = _ARG_RE.match(raw)
        if not am:
            return None
        params.append(_param(am.group("name"), kind, am.group("default"), am.group("type").strip()))
    return {"name": m.group("name"), "overload": m.group("overload") or "",
            "params": params, "returns": m.group("ret")}


def custom_op_schemas(yaml_text: str) -> list[tuple[str, bool]]:
    """``(schema, exposed)`` for each entry of the top-level ``custom:`` section.

    The files are simple block YAML: a top-level ``custom:`` key whose entries start with
    ``- `` and hold ``func: <schema>`` (and optionally ``exposed: true``).  This reader
    handles exactly that (and entries written as a bare schema string), so the builder
    needs no YAML library.
    """
    out: list[tuple[str, bool]] = []
    in_custom = False
    current: dict | None = None

    def flush():
        if current and current.get("func"):
            out.append((current["func"], current.get("exposed", False)))

    for line in yaml_text.splitlines():
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        if not line[0].isspace() and not line.startswith("-"):
            flush()
            current = None
            in_custom = line.split(":", 1)[0].strip() == "custom"
            continue
        if not in_custom:
            continue
        stripped = line.strip()
        if stripped.startswith("- "):
            flush()
            current = {}
            stripped = stripped[2:].strip()
            if ":" not in stripped.split("(", 1)[0]:  # "- name(args) -> ret"
                current["func"] = _yaml_scalar(stripped)
                continue
        if current is None:
            continue
        key, _, value = stripped.partition(":")
        key = key.strip()
        if key == "func":
            current["func"] = _yaml_scalar(value.strip())
        elif key == "exposed":
            current["exposed"] = value.strip().lower() == "true"
    flush()
    return out


def _yaml_scalar(text: str) -> str:
    if len(text) >= 2 and text[0] == text[-1] and text[0] in "\"'":
        return text[1:-1]
    return text


# ---------------------------------------------------------------------- table building


def _qual(module: str, name: str) -> str:
    return f"{module}.{name}"


def entries_for_resolved(qualname: str, res: Resolved, resolver: Resolver, in_all: bool) -> dict[str, dict]:
    """Entries for one public name (plus its members if it is a class or object)."""
    out: dict[str, dict] = {}
    entry: dict = {"kind": res.kind}
    if in_all:
        entry["in_all"] = True
    if res.kind == "function":
        entry["params"] = params_from_args(res.node.args)
        entry["defined_in"] = res.module
    elif res.kind == "apply":
        entry["kind"] = "function"
        entry["params"] = res.cls.members["forward"]["params"][1:]
        entry["defined_in"] = f"{res.cls.module}.{res.cls.name}.apply"
    elif res.kind == "class":
        entry["defined_in"] = f"{res.cls.module}.{res.cls.name}"
        if res.cls.bases:
            entry["bases"] = res.cls.bases
        params = resolver.class_params(res.cls)
        if params is not None:
            entry["params"] = params
    elif res.kind == "object":
        entry["class"] = res.target
    elif res.kind in ("module", "external", "extension") and res.target:
        entry["target"] = res.target
    out[qualname] = entry
    if res.kind in ("class", "object") and res.cls is not None:
        for member, info in res.cls.members.items():
            out[f"{qualname}.{member}"] = dict(info)
    return out


def scan_wheel(wheel: WheelSource) -> dict[str, dict]:
    """All table entries of one wheel: qualified name -> entry (without versions)."""
    resolver = Resolver(wheel.files)
    names: dict[str, dict] = {}

    def add(qualname: str, entry: dict):
        if qualname in names:  # first definition wins; merge flags
            if entry.get("in_all"):
                names[qualname]["in_all"] = True
            return
        names[qualname] = entry

    # 1. Python modules.
    for modname in PUBLIC_MODULES:
        if resolver.module(modname) is None:
            continue
        add(modname, {"kind": "module"})
        for name, in_all in sorted(resolver.public_names(modname).items()):
            res = resolver.resolve(modname, name)
            if res.kind in ("external", "value") and not in_all:
                continue
            for q, e in entries_for_resolved(_qual(modname, name), res, resolver, in_all).items():
                add(q, e)

    # 2. Custom operators: every torch.ops.npu.<op> becomes torch_npu.<op>.
    public_ops = set()
    exposed = resolver.module(EXPOSED_API_FILE[:-3].replace("/", "."))
    if exposed is not None:
        public_ops = set(exposed.str_lists.get("public_npu_functions", []))
    documented = documented_ops(wheel.files.get(OP_DOCS_FILE, ""))
    overloads: dict[str, dict[str, dict]] = {}
    for path in OP_SCHEMA_FILES:
        for schema, _exposed in custom_op_schemas(wheel.files.get(path, "")):
            parsed = parse_schema(schema)
            if parsed is None:
                continue
            overloads.setdefault(parsed["name"], {}).setdefault(parsed["overload"], parsed)
    for op, by_overload in sorted(overloads.items()):
        default = by_overload.get("") or next(
            (by_overload[k] for k in sorted(by_overload) if k != "out"), None) \
            or by_overload[sorted(by_overload)[0]]
        entry = {"kind": "op", "params": default["params"], "returns": default["returns"]}
        named = sorted(k for k in by_overload if k)
        if named:
            entry["overloads"] = named
        if op in public_ops:
            entry["in_all"] = True
        if op in documented:
            entry["documented"] = True
        names.pop(f"torch_npu.{op}", None)  # the op object replaces any Python binding
        names[f"torch_npu.{op}"] = entry

    # 3. ATB ops, set on torch_npu / torch_npu.atb by op_plugin/atb/_atb_ops.py.
    atb = resolver.module(ATB_OPS_FILE[:-3].replace("/", "."))
    if atb is not None:
        for op in atb.str_lists.get("API_LIST", []):
            add(f"torch_npu.{op}", {"kind": "atb_op"})
        if atb.str_lists.get("ATB_API_LIST"):
            add("torch_npu.atb", {"kind": "module"})
        for op in atb.str_lists.get("ATB_API_LIST", []):
            add(f"torch_npu.atb.{op}", {"kind": "atb_op"})
    return names


def documented_ops(source: str) -> set[str]:
    """Op names passed to ``_add_torch_npu_docstr("name", ...)``."""
    if not source:
        return set()
    found = set()
    for node in ast.walk(ast.parse(source)):
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
                and node.func.id == "_add_torch_npu_docstr" and node.args
                and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str)):
            found.add(node.args[0].value)
    return found


def merge_params(per_version: list[tuple[str, list[dict] | None]], name_versions: list[str]) -> list[dict] | None:
    """Merge parameter lists of several versions (oldest first).

    The newest known signature gives the order and the fields; a parameter that not every
    version of the name has gets its own ``versions`` list.
    """
    known = [(v, ps) for v, ps in per_version if ps is not None]
    if not known:
        return None
    have: dict[str, list[str]] = {}
    for v, ps in known:
        for p in ps:
            have.setdefault(p["name"], []).append(v)
    merged, seen = [], set()
    for v, ps in reversed(known):  # newest first, then older-only parameters
        for p in ps:
            if p["name"] in seen:
                continue
            seen.add(p["name"])
            q = dict(p)
            if have[p["name"]] != [kv for kv, _ in known]:
                q["versions"] = have[p["name"]]
            merged.append(q)
    return merged


def build_table(wheels: list[WheelSource]) -> dict:
    wheels = sorted(wheels, key=lambda w: version_key(w.version))
    scans = [(w.version, scan_wheel(w)) for w in wheels]
    all_names = sorted(set().union(*(s.keys() for _, s in scans)))
    names: dict[str, dict] = {}
    for q in all_names:
        present = [(v, s[q]) for v, s in scans if q in s]
        newest = dict(present[-1][1])
        entry = {"kind": newest.pop("kind"), "versions": [v for v, _ in present]}
        newest.pop("params", None)
        entry.update(newest)
        if any("params" in e for _, e in present):
            entry["params"] = merge_params([(v, e.get("params")) for v, e in present],
                                           entry["versions"])
        names[q] = entry
    return {
        "format": FORMAT_VERSION,
        "generated_by": "scripts/build_npu_api_table.py",
        "note": ("torch.npu is torch_npu.npu: names are stored as torch_npu.npu.<name>. "
                 "A parameter without 'kind' is positional_or_keyword; defaults are source text; "
                 "a parameter's own 'versions' lists the versions that have it when not all do. "
                 "Op signatures (kind 'op') come from the op schema yaml of the wheel."),
        "prefix_aliases": {"torch.npu": "torch_npu.npu"},
        "versions": [{"version": w.version, "wheel": w.filename, "sha256": w.sha256} for w in wheels],
        "names": names,
    }


# --------------------------------------------------------------------------- output


def _is_leaf(obj) -> bool:
    scalars = (str, int, float, bool, type(None))
    if isinstance(obj, dict):
        return all(isinstance(v, scalars) or (isinstance(v, list) and all(isinstance(x, scalars) for x in v))
                   for v in obj.values())
    if isinstance(obj, list):
        return all(isinstance(x, scalars) for x in obj)
    return True


def dumps(obj, indent: int = 0) -> str:
    """JSON with one name / one parameter per line: small, and readable in diffs."""
    if _is_leaf(obj) and (indent > 1 or not isinstance(obj, dict) or not obj):
        return json.dumps(obj, ensure_ascii=False)
    pad, inner = " " * indent, " " * (indent + 1)
    if isinstance(obj, dict):
        items = [f"{inner}{json.dumps(k)}: {dumps(v, indent + 1)}" for k, v in obj.items()]
        return "{\n" + ",\n".join(items) + "\n" + pad + "}"
    items = [f"{inner}{dumps(v, indent + 1)}" for v in obj]
    return "[\n" + ",\n".join(items) + "\n" + pad + "]"


def download_wheels(versions: list[str], dest: str) -> list[Path]:
    paths = []
    for v in versions:
        subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
                        "-d", dest, f"torch-npu=={v}"], check=True)
        found = sorted(Path(dest).glob(f"torch_npu-{v}-*.whl"))
        if not found:
            raise SystemExit(f"pip did not produce a wheel for torch-npu=={v}")
        paths.append(found[0])
    return paths


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("wheels", nargs="*", help="torch_npu wheel files")
    ap.add_argument("--download", nargs="+", metavar="VERSION", default=[],
                    help="also fetch these torch-npu versions with pip download --no-deps")
    ap.add_argument("-o", "--output", default=str(DEFAULT_OUTPUT))
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        paths = [Path(p) for p in args.wheels] + download_wheels(args.download, tmp)
        if not paths:
            ap.error("give wheel paths or --download VERSION...")
        wheels = [WheelSource.from_path(p) for p in paths]
    if len({w.version for w in wheels}) != len(wheels):
        ap.error("two wheels have the same version")
    table = build_table(wheels)
    Path(args.output).write_text(dumps(table) + "\n", encoding="utf-8")
    for w in sorted(wheels, key=lambda w: version_key(w.version)):
        count = sum(1 for e in table["names"].values() if w.version in e["versions"])
        print(f"{w.version}: {count} names ({w.filename})")
    print(f"wrote {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
