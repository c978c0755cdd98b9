"""Gates that decide nothing on an NPU host (issue #16, round-14 audits).

- **A "cuda" test that only records why an op is unsupported** (NPU990, AL#18: xformers'
  `not_supported_reasons()`: `if dtype is torch.bfloat16 and (not device_type.startswith("cuda")
  or ...): reasons.append("bf16 is only supported on A100+ GPUs")`). The "cuda" string sits in the
  test of an `if` whose body only appends (or adds) a message (a string or an f-string) to a
  collection and has no `else`: the test picks no device and runs nothing on the device; on an NPU
  host it only records that a CUDA kernel does not apply, which is right there. Not reported (the
  sweep's gates). A test whose body does anything else (sets a device, calls a kernel, returns,
  raises), or that has an `else`, keeps its finding: there "cuda" selects what runs.

- **Triton kernels launched only where an accelerator method the NPU accelerator answers False
  is true** (NPU910, AH#29: DeepSpeed's `group_gemm_triton` runs only from
  `_run_experts_triton_grouped_mm`, called only under `if self.use_triton_grouped_mm:`, a flag
  set only to False or to `get_accelerator().prefer_triton_grouped_mm()`; the run's NPU
  accelerator class (`NPU_Accelerator` in an `accelerator/` folder) does not define that method
  and inherits it from a base whose body is `return False`). The kernel module's finding becomes
  info with the reason (ACCELERATOR_FALSE, a moot.PHRASES entry: a named skipped scope). Every
  name another file imports from the kernel module must be referenced (anywhere in the run) only
  under such a flag, or in an undecorated module-level function referenced only so (a few steps);
  an import or an `__all__` entry is no call. One reference anywhere else (plain code, another
  string naming it, an import of the module object), a flag set any other way (or by another
  file), an accelerator method the NPU class defines (even `return True`), or a module whose own
  top-level code calls its functions keeps the finding. `review_accelerator_gated` is called once,
  from runplan.whole_run_passes; it parses only files whose bytes name what it looks for.

The sweep calls `mark` for each node it enters (Sweep.on_visit, after labels6.mark), as labels6.py
does.
"""

from __future__ import annotations

import ast
import dataclasses
import re
from typing import Any, Optional

from . import astcache

Sweep = Any  # sweep.Sweep

_RECORDERS = frozenset({"append", "add"})


def mark(sweep: Sweep, node) -> None:
    # (libcst's SimpleString, named: no libcst import here)
    if type(node).__name__ != "SimpleString":
        return
    found = _found(sweep)
    if found and tuple(sweep.m.position(node)) in found:
        sweep.gates.add(id(node))


def _found(sweep: Sweep) -> frozenset:
    """The (line, column) of the "cuda" strings this module reads as gates, once per file."""
    found = getattr(sweep, "_gates15_found", None)
    if found is not None:
        return found
    out: set = set()
    text = sweep.m.file_text()
    if "cuda" in text and (".append(" in text or ".add(" in text):
        tree = sweep.m._ast()
        if tree is not None:
            for stmt in astcache.walk(tree):
                if isinstance(stmt, ast.If) and records_only(stmt):
                    out.update((n.lineno, n.col_offset + 1) for n in ast.walk(stmt.test)
                               if isinstance(n, ast.Constant) and n.value == "cuda")
    found = frozenset(out)
    sweep._gates15_found = found
    return found


def _message(node: ast.AST) -> bool:
    return isinstance(node, ast.JoinedStr) or isinstance(node, ast.Constant) and isinstance(node.value, str)


def records_only(stmt: ast.If) -> bool:
    """Whether the `if` has no `else` and its body only appends or adds a message to a
    collection (`reasons.append("...")`, `self.errors.add(f"...")`)."""
    if stmt.orelse or not stmt.body:
        return False
    for inner in stmt.body:
        call = inner.value if isinstance(inner, ast.Expr) else None
        if not (isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute)
                and call.func.attr in _RECORDERS and len(call.args) == 1 and not call.keywords
                and _message(call.args[0])):
            return False
    return True


# --------------------------------------------------------------------------- accelerator-gated kernels
# (moot.PHRASES holds it: the finding becomes a named skipped scope)
ACCELERATOR_FALSE = "launched only under an accelerator method the NPU accelerator answers False"

_NPU_CLASS = re.compile(rb"^class\s+(NPU_?Accelerator)\b", re.MULTILINE | re.IGNORECASE)
_PLAIN_BASES = frozenset({"object", "ABC", "abc.ABC"})
_FUNCTIONS = (ast.FunctionDef, ast.AsyncFunctionDef)
_MAX_DEPTH = 3


def _returns_false(function: ast.AST) -> bool:
    body = list(function.body)
    if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) \
            and isinstance(body[0].value.value, str):
        body = body[1:]  # (a docstring)
    return len(body) == 1 and isinstance(body[0], ast.Return) and isinstance(body[0].value, ast.Constant) \
        and body[0].value.value is False


def _false_methods(tree: ast.Module, name: str, classes_in: dict) -> tuple[dict, str]:
    """{method: base class name} of the methods the class `name` of `tree` neither defines nor
    inherits other than as `return False` from a base in its folder (`classes_in`: {class name:
    ClassDef}), and the class's name; empty when a base cannot be read."""
    npu = next((n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == name), None)
    if npu is None:
        return {}, name
    order, stack, seen = [], [npu], set()
    while stack:  # (depth first through the bases: the first definition of a name wins)
        cls = stack.pop(0)
        if id(cls) in seen:
            continue
        seen.add(id(cls))
        order.append(cls)
        bases = []
        for base in cls.bases:
            dotted = astcache.dotted(base) or ""
            if dotted in _PLAIN_BASES:
                continue
            found = classes_in.get(dotted.rsplit(".", 1)[-1])
            if found is None:
                return {}, name  # (a base not read: it may define the method)
            bases.append(found)
        stack[:0] = bases
    defined: set = set()
    out: dict = {}
    for cls in order:
        for stmt in cls.body:
            names = [stmt.name] if isinstance(stmt, _FUNCTIONS) else \
                [t.id for t in getattr(stmt, "targets", [getattr(stmt, "target", None)]) if isinstance(t, ast.Name)]
            for method in names:
                if method in defined:
                    continue
                defined.add(method)
                if cls is not npu and isinstance(stmt, _FUNCTIONS) and not stmt.decorator_list and _returns_false(stmt):
                    out[method] = cls.name
    return out, npu.name


def review_accelerator_gated(results: list, paths: dict) -> list:
    """The review of the module docstring (accelerator-gated kernels) over a run's results."""
    from .moot import is_moot

    def open_(f) -> bool:
        return f.code == "NPU910" and not f.fixable and f.cell is None and f.severity != "info" and not is_moot(f)

    targets = [i for i, r in enumerate(results) if r.relpath.endswith(".py") and any(open_(f) for f in r.findings)]
    if not targets:
        return results
    from .modpaths import RunTexts, module_names, resolve_relative

    text_of = RunTexts(results, paths)
    python = [j for j, r in enumerate(results) if r.relpath.endswith(".py")]
    trees: dict = {}

    def tree(j: int):
        if j not in trees:
            trees[j] = astcache.parse(text_of(j) or b"")
        return trees[j]

    # the run's NPU accelerator and the methods it answers False (every copy of it agreeing)
    false: Optional[dict] = None
    npu_at = ""
    for j in python:
        relpath = results[j].relpath
        if "accelerator/" not in relpath:
            continue
        data = text_of(j) or b""
        match = _NPU_CLASS.search(data)
        if match is None or tree(j) is None:
            continue
        folder = relpath.rsplit("/", 1)[0] + "/"
        classes_in: dict = {}
        for k in python:
            if results[k].relpath.startswith(folder) and "/" not in results[k].relpath[len(folder):] \
                    and b"class " in (text_of(k) or b"") and tree(k) is not None:
                for node in tree(k).body:
                    if isinstance(node, ast.ClassDef):
                        classes_in.setdefault(node.name, node)
        methods, name = _false_methods(tree(j), match.group(1).decode(), classes_in)
        false = methods if false is None else {m: b for m, b in false.items() if m in methods}
        npu_at = npu_at or f"`{name}` ({relpath})"
    if not false:
        return results

    # flags: `self.X = <...accelerator...>.m()` with m answered False, set no other way
    method_call = re.compile(rb"\.(?:" + b"|".join(re.escape(m.encode()) for m in sorted(false)) + rb")\s*\(\s*\)")
    flags: dict = {}  # (file, class name, attribute) -> method

    def accelerator_call(value) -> Optional[str]:
        if isinstance(value, ast.Call) and not value.args and not value.keywords and isinstance(value.func, ast.Attribute) \
                and value.func.attr in false and "accelerator" in ast.unparse(value.func.value).lower():
            return value.func.attr
        return None

    for j in python:
        data = text_of(j) or b""
        if not method_call.search(data) or tree(j) is None:
            continue
        for cls in astcache.walk(tree(j)):
            if not isinstance(cls, ast.ClassDef):
                continue
            for node in ast.walk(cls):
                if isinstance(node, ast.Assign) and len(node.targets) == 1:
                    target = node.targets[0]
                    if isinstance(target, ast.Attribute) and isinstance(target.value, ast.Name) and target.value.id == "self":
                        method = accelerator_call(node.value)
                        if method is not None:
                            flags.setdefault((j, cls.name, target.attr), method)
    settled: dict = {}
    for (j, cls_name, attr), method in list(flags.items()):
        # every other write of the attribute, in the whole run, sets it False or from the same call
        setter = re.compile(rb"\." + re.escape(attr.encode()) + rb"\s*(?:=(?!=)|\+=|\|=)|['\"]" + re.escape(attr.encode()) + rb"['\"]")
        ok = True
        for k in python:
            data = text_of(k) or b""
            if not setter.search(data):
                continue
            if k != j or tree(k) is None:
                ok = False
                break
            for node in ast.walk(tree(k)):
                if isinstance(node, ast.Constant) and node.value == attr:
                    ok = False  # (setattr, a lookup by name)
                written = node.targets if isinstance(node, ast.Assign) else \
                    [node.target] if isinstance(node, (ast.AugAssign, ast.AnnAssign)) else []
                for target in written:
                    for t in ast.walk(target):
                        if isinstance(t, ast.Attribute) and t.attr == attr and isinstance(t.ctx, ast.Store):
                            value = node.value
                            if isinstance(node, ast.AugAssign) or not (
                                    isinstance(value, ast.Constant) and value.value is False
                                    or accelerator_call(value) == method):
                                ok = False
        if ok:
            settled[(j, cls_name, attr)] = method
    if not settled:
        return results

    def gate_of(j: int, node: ast.AST) -> Optional[str]:
        """The flag whose `if self.X:` body holds `node` in file j, shown; or None."""
        parents = astcache.parents(tree(j))
        child, cur = node, parents.get(id(node))
        chain = []
        while cur is not None:
            chain.append((cur, child))
            child, cur = cur, parents.get(id(cur))
        cls = next((c for c, _ in chain if isinstance(c, ast.ClassDef)), None)
        if cls is None:
            return None
        for cur, child in chain:
            if isinstance(cur, ast.If) and any(child is s for s in cur.body):
                tests = cur.test.values if isinstance(cur.test, ast.BoolOp) and isinstance(cur.test.op, ast.And) else [cur.test]
                for test in tests:
                    if isinstance(test, ast.Attribute) and isinstance(test.value, ast.Name) and test.value.id == "self":
                        method = settled.get((j, cls.name, test.attr))
                        if method is not None:
                            return f"under `if self.{test.attr}:` (set only from `get_accelerator().{method}()`)"
        return None

    def references(name: str, skip: int, seen: frozenset, depth: int) -> Optional[list]:
        """Where `name` is referenced in the run (but file `skip`), each under such a flag: "file:line
        (why)"; None when one is elsewhere."""
        if name in seen or depth > _MAX_DEPTH:
            return None
        seen = seen | {name}
        word = re.compile(rb"\b" + re.escape(name.encode()) + rb"\b")
        out = []
        for j in python:
            data = text_of(j) or b""
            if j == skip or name.encode() not in data or not word.search(data):
                continue
            if tree(j) is None:
                return None
            parents = astcache.parents(tree(j))
            for node in ast.walk(tree(j)):
                if isinstance(node, ast.Constant) and node.value == name:
                    owner = parents.get(id(parents.get(id(node))))
                    if not (isinstance(owner, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "__all__" for t in owner.targets)):
                        return None  # (a lookup by name)
                    continue
                if isinstance(node, ast.alias) and node.asname not in (None, name):
                    if (node.name.rsplit(".", 1)[-1]) == name:
                        return None  # (imported under another name)
                    continue
                if not (isinstance(node, ast.Name) and node.id == name or isinstance(node, ast.Attribute) and node.attr == name):
                    continue
                if not isinstance(node.ctx, ast.Load):
                    return None
                why = gate_of(j, node)
                if why is None:
                    function = next((s for s in tree(j).body if isinstance(s, _FUNCTIONS)
                                     and s.lineno < node.lineno <= (s.end_lineno or s.lineno)), None)
                    if function is None or function.decorator_list or function.name == name \
                            or node.lineno < function.body[0].lineno:
                        return None
                    deeper = references(function.name, -1, seen, depth + 1)
                    if not deeper:
                        return None
                    why = f"in `{function.name}`, referenced only at " + "; ".join(deeper[:2])
                out.append(f"{results[j].relpath}:{node.lineno} ({why})")
        return out

    out = list(results)
    for i in targets:
        module = tree(i)
        if module is None:
            continue
        defined = {n.name for n in astcache.walk(module) if isinstance(n, (*_FUNCTIONS, ast.ClassDef))}
        if _calls_own_at_import(module, defined):
            continue
        relpath = results[i].relpath
        dotted = set(module_names(relpath))
        stem = relpath[:-3].rsplit("/", 1)[-1]
        entries: set = set()
        blocked = False
        for k in python:
            data = text_of(k) or b""
            if k == i or stem.encode() not in data or tree(k) is None:
                continue
            for node in ast.walk(tree(k)):
                if isinstance(node, ast.Import):
                    blocked = blocked or any(a.name in dotted for a in node.names)  # (the module object)
                elif isinstance(node, ast.ImportFrom):
                    if node.level:
                        base = resolve_relative(results[k].relpath, node.level, node.module or "")
                        own, member = base == relpath[:-3], [f"{base}/{a.name}" == relpath[:-3] for a in node.names]
                    else:
                        own = (node.module or "") in dotted
                        member = [f"{node.module}.{a.name}" in dotted for a in node.names]
                    if own:
                        for alias in node.names:
                            blocked = blocked or alias.name == "*"
                            entries.add(alias.name)
                    elif any(member):
                        blocked = True  # (`from pkg import module`: its names are read by attribute)
        if blocked or not entries:
            continue
        reasons = []
        for name in sorted(entries):
            where = references(name, i, frozenset(), 0)
            if not where:
                reasons = []
                break
            reasons.append(f"`{name}` is referenced only at " + "; ".join(where[:3]) +
                           (f"; and {len(where) - 3} more" if len(where) > 3 else ""))
        if not reasons:
            continue
        methods = sorted({m for k, m in settled.items()})
        base_of = ", ".join(f"`{m}`, which its base `{false[m]}` answers `return False`" for m in methods)
        why = (f"{ACCELERATOR_FALSE}: the run's NPU accelerator {npu_at} does not define {base_of}; "
               + "; ".join(reasons))
        out[i] = dataclasses.replace(results[i], findings=[
            dataclasses.replace(f, severity="info", message=f"{f.message} ({why})") if open_(f) else f
            for f in results[i].findings])
    return out


def _calls_own_at_import(module: ast.Module, defined: set) -> bool:
    """Whether the module's top-level code (outside functions and classes; decorators excepted)
    calls one of its own functions: then a kernel may run when it is imported."""
    stack = list(module.body)
    while stack:
        stmt = stack.pop()
        if isinstance(stmt, (*_FUNCTIONS, ast.ClassDef)):
            continue
        if isinstance(stmt, (ast.If, ast.Try, ast.With, ast.For, ast.While)):
            for field in ("test", "iter", "items"):
                part = getattr(stmt, field, None)
                if part is not None and any(isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id in defined
                                            for n in ast.walk(part if isinstance(part, ast.AST) else ast.Tuple(elts=[], ctx=ast.Load()))):
                    return True
            stack.extend(s for field in ("body", "orelse", "finalbody") for s in getattr(stmt, field, ()))
            stack.extend(s for h in getattr(stmt, "handlers", ()) for s in h.body)
            continue
        if any(isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id in defined for n in ast.walk(stmt)):
            return True
    return False
