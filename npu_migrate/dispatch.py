"""Cross-file dispatch an NPU host never takes: the import sites of backends the project itself
never selects there (issue #16, round 7).

`wholeprogram._never_imported` lowers the findings of a module every import site of which lies in
a branch an NPU host never takes. Three kinds of site it cannot see from one `if` line are found
here, from the whole project, and handed to it as more such spans (first line, last line, why):

* **A backend registry with an NPU default the project forces.** SGLang registers each attention
  backend with `@register_attention_backend("fa3")` on a factory that imports the backend's module,
  and on an NPU host `set_default_server_args` (in `hardware_backend/npu/`) assigns
  `args.attention_backend = "ascend"` unconditionally. The factories of the other names never run
  there, and neither do the methods a dict keyed by the same names (`{"fa3": self._create_fa3_...,
  "ascend": self._create_ascend_...}`) reaches only under another name. The NPU default counts
  only where it is certain: an unconditional assignment of a string literal, naming the NPU
  (`npu`, `ascend`) and registered under the same decorator, to the attribute the decorator is
  named for (`register_attention_backend` -> `.attention_backend`), at the top level of a function
  in an NPU module (a path naming the NPU) or directly under an `if` true on an NPU host.
* **A branch on the project's own NPU flag.** `if not _is_npu:` (with `_is_npu = is_npu()` in the
  file) or `if not is_npu():` is never entered on an NPU host.

Only import sites are handed over (wholeprogram still requires every site of a module to be one,
and a module named in a string stays); the findings lowered keep their place, at info, with the
reason (invariant 2: nothing silently missed).
"""

from __future__ import annotations

import ast
import re
from typing import Optional

_NPU_NAME = re.compile(r"(^|_)(npu|ascend)($|_)", re.IGNORECASE)
_NPU_WORD = re.compile(r"npu|ascend", re.IGNORECASE)
_REGISTER = re.compile(rb"@[\w.]*register\w*\(\s*[\"']\w+[\"']\s*\)")
_FLAG = re.compile(r"^_?(is|use|on)_(npu|ascend)$")
_FLAG_TEXT = re.compile(rb"if[ \t]+[^\n]*\b_?(?:is|use|on)_(?:npu|ascend)\b")
_ASSIGNED_FLAG = re.compile(r"^\s*(\w+)\s*=\s*[\w.]*is_npu\(\)\s*$", re.MULTILINE)


def _parse(data: bytes) -> Optional[ast.Module]:
    from . import astcache

    return astcache.parse(data)


def _span(node: ast.AST) -> tuple[int, int]:
    first = min([node.lineno, *(d.lineno for d in getattr(node, "decorator_list", ()))])
    return first, node.end_lineno or node.lineno


def _registrations(tree: ast.Module) -> list[tuple[str, str, ast.AST]]:
    """(decorator name, registered name, function) of `@register_x("name")` functions."""
    out = []
    for node in ast.walk(tree):
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            continue
        for decorator in node.decorator_list:
            if (isinstance(decorator, ast.Call) and len(decorator.args) == 1 and not decorator.keywords
                    and isinstance(decorator.args[0], ast.Constant) and isinstance(decorator.args[0].value, str)):
                func = decorator.func
                name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""
                if name.startswith("register_") and len(name) > len("register_"):
                    out.append((name, decorator.args[0].value, node))
    return out


def _npu_true(test: ast.AST, flags: set[str]) -> Optional[bool]:
    """The value of a condition on an NPU host where it reads the project's NPU flag only
    (`_is_npu`, `is_npu()`, `not _is_npu`, `x and not _is_npu`): True, False or None (unknown)."""
    if isinstance(test, ast.Name) and test.id in flags:
        return True
    if isinstance(test, ast.Call) and not test.args and not test.keywords:
        func = test.func
        name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""
        if name == "is_npu":
            return True
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        inner = _npu_true(test.operand, flags)
        return None if inner is None else not inner
    if isinstance(test, ast.BoolOp):
        values = [_npu_true(v, flags) for v in test.values]
        if isinstance(test.op, ast.And):
            return False if False in values else (True if all(v is True for v in values) else None)
        return True if True in values else (False if all(v is False for v in values) else None)
    return None


def _flags(text: str) -> set[str]:
    """The module-level names bound to `is_npu()` (`_is_npu = is_npu()`), each named for the NPU."""
    return {m.group(1) for m in _ASSIGNED_FLAG.finditer(text) if _FLAG.match(m.group(1))}


def _flag_branches(tree: ast.Module, flags: set[str]) -> list[tuple[int, int, str]]:
    """(first, last, why) of the bodies of `if`s false on an NPU host by its NPU flag."""
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and node.body and _npu_true(node.test, flags) is False:
            first, last = node.body[0].lineno, node.body[-1].end_lineno or node.body[-1].lineno
            condition = " ".join(ast.unparse(node.test).split())[:70]
            out.append((first, last, f"`{condition}`"))
    return out


def _forced_defaults(relpath: str, tree: ast.Module, registered: dict[str, set[str]],
                     flags: set[str]) -> list[tuple[str, str, int]]:
    """(decorator, NPU name, line) of the unconditional assignments `x.<kind> = "<npu name>"` of a
    module: at the top of a function of an NPU module, or directly under an `if` true on NPU."""
    npu_module = any(_NPU_NAME.search(part) for part in relpath[:-3].split("/"))
    bodies: list[list[ast.stmt]] = []
    for node in ast.walk(tree):
        if npu_module and isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            bodies.append(node.body)
        elif isinstance(node, ast.If) and _npu_true(node.test, flags) is True:
            bodies.append(node.body)
    out = []
    for body in bodies:
        for stmt in body:
            if not (isinstance(stmt, ast.Assign) and isinstance(stmt.value, ast.Constant)
                    and isinstance(stmt.value.value, str) and _NPU_WORD.search(stmt.value.value)):
                continue
            for target in stmt.targets:
                if not isinstance(target, ast.Attribute):
                    continue
                for decorator, names in registered.items():
                    if target.attr == decorator[len("register_"):] and stmt.value.value in names:
                        out.append((decorator, stmt.value.value, stmt.lineno))
    return out


def _keyed_methods(tree: ast.Module, names: set[str], npu: set[str]) -> list[tuple[int, int, str]]:
    """(first, last, key) of the functions a dict keyed by registered names reaches only under
    names other than the NPU's (`"fa3": self._create_fa3_decode_backend`): every mention of the
    function's name in the file is such a value."""
    under: dict[str, set[str]] = {}
    values: set[int] = set()  # id() of the value nodes read as keyed references
    for node in ast.walk(tree):
        if not isinstance(node, ast.Dict) or len(node.keys) < 2:
            continue
        keys = [k.value if isinstance(k, ast.Constant) and isinstance(k.value, str) else None for k in node.keys]
        if sum(1 for k in keys if k in names) < 2:
            continue
        for key, value in zip(keys, node.values):
            ref = value.attr if isinstance(value, ast.Attribute) else value.id if isinstance(value, ast.Name) else None
            if ref is None:
                continue
            values.add(id(value))
            under.setdefault(ref, set()).add(key if key in names and key not in npu else "")
    if not under:
        return []
    mentions: dict[str, int] = {}
    for node in ast.walk(tree):
        ref = node.attr if isinstance(node, ast.Attribute) else node.id if isinstance(node, ast.Name) else None
        if ref in under and id(node) not in values:
            mentions[ref] = mentions.get(ref, 0) + 1
    out = []
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name in under \
                and "" not in under[node.name] and not mentions.get(node.name):
            first, last = _span(node)
            out.append((first, last, ", ".join(f'"{k}"' for k in sorted(under[node.name]))))
    return out


def gates(results, python: list[int], texts: dict[int, Optional[bytes]]) -> dict[int, list[tuple[int, int, str]]]:
    """{file index: [(first line, last line, why)]}: spans of the run's Python files whose import
    statements an NPU host never runs (see the module docstring); `why` is ready to quote."""
    out: dict[int, list[tuple[int, int, str]]] = {}
    trees: dict[int, Optional[ast.Module]] = {}

    def tree(i: int) -> Optional[ast.Module]:
        if i not in trees:
            trees[i] = _parse(texts.get(i) or b"")
        return trees[i]

    flags_of: dict[int, set[str]] = {}
    for i in python:
        data = texts.get(i) or b""
        if b"npu" not in data or not (_FLAG_TEXT.search(data) or b"is_npu()" in data):
            continue
        flags_of[i] = _flags(data.decode("utf-8", "replace"))
        if tree(i) is not None:
            spans = _flag_branches(tree(i), flags_of[i])
            if spans:
                out.setdefault(i, []).extend(spans)

    # registries: @register_x("name") functions, by decorator
    registered: dict[str, set[str]] = {}
    factories: list[tuple[int, str, str, ast.AST]] = []
    for i in python:
        data = texts.get(i) or b""
        if b"@" not in data or not _REGISTER.search(data) or tree(i) is None:
            continue
        for decorator, name, node in _registrations(tree(i)):
            registered.setdefault(decorator, set()).add(name)
            factories.append((i, decorator, name, node))
    registered = {d: names for d, names in registered.items()
                  if len(names) >= 2 and any(_NPU_WORD.search(n) for n in names)}
    if not registered:
        return out
    forced: dict[str, tuple[str, str]] = {}  # decorator -> (NPU name, "path:line")
    for i in python:
        data = texts.get(i) or b""
        if b"_backend" not in data and not any(d[len("register_"):].encode() in data for d in registered):
            continue
        if not re.search(rb"\.\w+[ \t]*=[ \t]*[\"'][^\"'\n]*(?:npu|ascend)", data, re.IGNORECASE) or tree(i) is None:
            continue
        for decorator, name, line in _forced_defaults(results[i].relpath, tree(i), registered, flags_of.get(i, set())):
            forced.setdefault(decorator, (name, f"{results[i].relpath}:{line}"))
    if not forced:
        return out
    for i, decorator, name, node in factories:
        if decorator in forced and name != forced[decorator][0]:
            npu_name, where = forced[decorator]
            first, last = _span(node)
            out.setdefault(i, []).append(
                (first, last, f'`@{decorator}("{name}")`, while an NPU host selects "{npu_name}" ({where})'))
    # the dicts keyed by the same names (SGLang's draft backends)
    for decorator, (npu_name, where) in forced.items():
        names = registered[decorator]
        wanted = [n.encode() for n in names if n != npu_name]
        for i in python:
            data = texts.get(i) or b""
            if f'"{npu_name}"'.encode() not in data or sum(1 for w in wanted if b'"' + w + b'"' in data) < 2:
                continue
            if tree(i) is None:
                continue
            for first, last, keys in _keyed_methods(tree(i), names, {npu_name}):
                out.setdefault(i, []).append(
                    (first, last, f"the {keys} entry of a dict keyed by `@{decorator}` names, while an NPU "
                                  f'host selects "{npu_name}" ({where})'))
    return out
