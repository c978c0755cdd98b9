"""Findings whose message or level misled the porter, left from the round-21 audits (issue #16).

Per file (run.py, after wording20.py, before the per-file merge), on the finding's own construct:

- **A raise guard in a method that uses no CUDA extension itself** (NPU110, round 21 BF#29): the
  migration keeps an availability check (`if not torch.cuda.is_available(): raise ...`) in a class
  that builds or loads CUDA extensions (rewrite_gates.py), and the message said the check "guards
  CUDA-only code". Where that evidence lies only in the class's other methods (a warning string
  that names nvcc in `from_quantized`) and the method holding the check neither shows any itself
  nor calls (through `self.`/`cls.`, a few steps) a method of the class that does, the check does
  not protect CUDA-only code: it turns an NPU host away from a method that may well run there. The
  warning stays (nothing is rewritten: the porter decides) and says so: it names the method and
  the class's evidence and asks to review what the method runs and widen the check where it runs
  on torch_npu, as NPU108 does for a check kept only on the code's own words (round 21 BF#18).
  A method that shows the evidence itself, or calls one that does, keeps the message.
- **A CUDA-profiler mode picked by an option value that names the NVIDIA tool** (NPU202 on
  `torch.cuda.cudart`, round 21 BG#37): `if "CUDA_PROFILER" in profile_activities:` (or `==`, a
  literal naming the CUDA profiler, Nsight or nsys) around `torch.cudart().cudaProfilerStart()`
  in a `try` whose broad `except` only reports the failure and goes on (flags16.caught_by, whose
  whole-run pass would make it a warning). The branch runs only when the user asks for the
  NVIDIA tool by name, a mode for running under Nsight Systems, and on an NPU host its failure is
  printed: info naming the option test, the handler and the NPU-side profilers (as labels20.py's
  `if nsys:` capture ranges). A call outside such a test, or one not in such a `try`, keeps its
  level.
- **An op registered for the CUDA dispatch key only** (`@torch.library.impl(lib, "scale", "CUDA")`,
  `torch.library.impl("ns::scale", ["CUDA"])`, `lib.impl("scale", fn, "CUDA")`, a left-over named in
  the brief of round 21 beside wording20.py's `device_types="cuda"`): no rule reported the
  `"CUDA"` key, so an op the file defines (`lib.define("scale(...)")`, `torch.library.define(
  "ns::scale", ...)`) and gives a kernel for CUDA only went unreported, and a call with NPU tensors
  raises there (no kernel for PrivateUse1). Where the file defines the op and registers it only for
  "CUDA" (no other key: CPU, a Composite key, "default", PrivateUse1, a `register_kernel` or
  `custom_op` of the same name), each `"CUDA"` key gets an NPU990 finding: an error when the
  registration runs at import (module level, outside `if`/`try`), else a warning naming where. An
  op the file registers for another key too, or does not define (its other kernels may live in
  another module), is left alone, and so is a module of the project's CUDA backend (a path part
  `cuda`, `cuda_*` or `*_cuda`: optimum-quanto's `library/extensions/cuda/__init__.py`, which its
  package imports only when `torch.version.cuda` is set): there the CUDA key is the right one, and
  what an NPU host lacks is a backend module of its own.

Nothing is dropped; the only findings added are the CUDA-only op registrations above; every other
finding keeps its place, code and source.
"""

from __future__ import annotations

import ast
import re
from dataclasses import replace
from typing import Optional

from . import astcache
from .findings import Finding
from .rewrite_gates import extension_evidence

_CLASS_EVIDENCE = re.compile(r"the class `(\w+)` builds or loads CUDA extensions \((.*?)\), which are not available")
WIDEN_RAISE = ("Device check turns an NPU host away (`{test}` raises, line {line}) from `{method}`, which uses no "
               "CUDA extension itself: the class `{cls}` builds or loads CUDA extensions ({found}) only in its "
               "other methods; left unchanged. Review what `{method}` runs: if that runs on torch_npu (plain "
               "torch, the `torch.cuda` calls the migration rewrote), widen the check to the NPU")


def _raises_only(body: list[ast.stmt]) -> bool:
    return len(body) == 1 and isinstance(body[0], ast.Raise)


def _raise_guard(func: ast.AST, line: int) -> Optional[ast.stmt]:
    """The `if <test>: raise ...` (no `else`) or `assert <test>` of `func` at `line`."""
    for node in ast.walk(func):
        if getattr(node, "lineno", None) != line:
            continue
        if isinstance(node, ast.If) and not node.orelse and _raises_only(node.body):
            return node
        if isinstance(node, ast.Assert):
            return node
    return None


def _called_methods(func: ast.AST) -> set[str]:
    """The names `self.x(...)` / `cls.x(...)` that `func` calls."""
    out = set()
    for node in ast.walk(func):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
                and isinstance(node.func.value, ast.Name) and node.func.value.id in ("self", "cls"):
            out.add(node.func.attr)
    return out


def _method_uses_extension(cls: ast.ClassDef, method: ast.AST) -> bool:
    """`method` shows extension evidence itself or calls a method of `cls` that does (a few steps)."""
    methods = {m.name: m for m in cls.body if isinstance(m, (ast.FunctionDef, ast.AsyncFunctionDef))}
    seen: set[str] = set()
    todo = [method]
    while todo and len(seen) < 50:
        func = todo.pop()
        if extension_evidence(func) is not None:
            return True
        for name in _called_methods(func):
            if name in methods and name not in seen:
                seen.add(name)
                todo.append(methods[name])
    return False


def _widen_raise(finding: Finding, tree: ast.Module) -> Optional[Finding]:
    match = _CLASS_EVIDENCE.search(finding.message)
    if match is None:
        return None
    cls = next((n for n in ast.walk(tree) if isinstance(n, ast.ClassDef) and n.name == match.group(1)
                and n.lineno <= finding.line <= (n.end_lineno or n.lineno)), None)
    if cls is None:
        return None
    method = next((m for m in cls.body if isinstance(m, (ast.FunctionDef, ast.AsyncFunctionDef))
                   and m.lineno <= finding.line <= (m.end_lineno or m.lineno)), None)
    if method is None:
        return None
    guard = _raise_guard(method, finding.line)
    if guard is None or _method_uses_extension(cls, method):
        return None
    test = ast.unparse(guard.test)
    shown = f"if {test}" if isinstance(guard, ast.If) else f"assert {test}"
    return replace(finding, message=WIDEN_RAISE.format(
        test=shown if len(shown) <= 70 else shown[:67] + "...", line=guard.lineno, method=method.name,
        cls=cls.name, found=match.group(2)))


_TOOL_VALUE = re.compile(r"(?i)^(cuda[_ ]?profiler|nsys|nsight(?:[_ ]systems)?)$")
TOOL_MODE = ("an NVIDIA profiler mode, run only when `{test}` selects it by name, for Nsight "
             "Systems, which does not run on an NPU host; inside a `try` whose `{handler}` reports the failure "
             "and goes on; profile there with msprof or `torch_npu.profiler`")


def _tool_test(test: ast.AST) -> bool:
    """`"CUDA_PROFILER" in x`, `x == "nsys"` (either side): a comparison with a literal naming the tool."""
    if not (isinstance(test, ast.Compare) and len(test.ops) == 1
            and isinstance(test.ops[0], (ast.In, ast.Eq))):
        return False
    return any(isinstance(n, ast.Constant) and isinstance(n.value, str) and _TOOL_VALUE.match(n.value)
               for n in (test.left, *test.comparators))


def _tool_branch(tree: ast.Module, parents: dict, line: int) -> Optional[ast.If]:
    """The innermost `if` whose body holds `line` and whose test selects the NVIDIA tool by name."""
    best = None
    for node in astcache.nodes(tree, ast.If):
        if node.body[0].lineno <= line <= (node.body[-1].end_lineno or 0) and _tool_test(node.test):
            if best is None or node.lineno > best.lineno:
                best = node
    return best


def _tool_mode(finding: Finding, tree: ast.Module, parents: dict, text: str) -> Optional[Finding]:
    from .flags16 import caught_by

    branch = _tool_branch(tree, parents, finding.line)
    caught = caught_by(tree, finding.line) if branch is not None else None
    if caught is None:
        return None
    test = " ".join((ast.get_source_segment(text, branch.test) or ast.unparse(branch.test)).split())
    # (no line: the start and stop of one mode, each under its own `if`, stay one finding)
    why = TOOL_MODE.format(test=test, handler=f"except {caught}" if caught else "except")
    return replace(finding, severity="info", message=f"{finding.message} ({why})")


_OP_DEFINITION = re.compile(r"^\s*(?:[\w.]+::)?(\w+)\s*(?:\(|$)")
IMPL_ONLY = ("the dispatch key of `{how}` for the op `{op}`, which the file defines and registers for CUDA only: "
             "a call with NPU tensors raises (no kernel for the NPU's dispatch key, PrivateUse1); register a "
             "\"PrivateUse1\" kernel (or a \"CompositeExplicitAutograd\" one) where its body runs on an NPU")
CONDITIONAL_IMPL = "; registered only {where} (line {line})"
_CUDA_PART = re.compile(r"^cuda$|^cuda_|_cuda$")


def _str(node) -> Optional[str]:
    return node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else None


def _keys(node) -> list[tuple[str, Optional[ast.AST]]]:
    """(key, its string node) of a dispatch-key argument: a string or a list/tuple of strings."""
    if node is None:
        return [("DEFAULT", None)]
    if isinstance(node, (ast.List, ast.Tuple)):
        return [(_str(e) or "?", e) for e in node.elts]
    return [(_str(node) or "?", node)]


def _op_name(value: Optional[str]) -> Optional[str]:
    match = _OP_DEFINITION.match(value or "")
    return match.group(1) if match else None


def _registrations(tree: ast.Module) -> tuple[set, dict]:
    """({ops the file defines}, {op: [(key, key node, call, how)]}) of the file's op registrations."""
    defined: set[str] = set()
    kernels: dict[str, list] = {}
    for call in astcache.nodes(tree, ast.Call):
        func = call.func
        dotted = astcache.dotted(func) or ""
        attr = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""
        keyword = {k.arg: k.value for k in call.keywords if k.arg}
        if attr == "define" and call.args:
            name = _op_name(_str(call.args[0]))
            if name:
                defined.add(name)
        elif attr == "impl" and dotted.endswith("library.impl") and call.args:
            first = _str(call.args[0])
            if first is not None:  # torch.library.impl("ns::op", types)
                name, types = _op_name(first), call.args[1] if len(call.args) > 1 else keyword.get("types")
            else:  # torch.library.impl(lib, "op", "CUDA")
                name = _op_name(_str(call.args[1])) if len(call.args) > 1 else None
                types = call.args[2] if len(call.args) > 2 else keyword.get("dispatch_key")
            for key, node in _keys(types):
                kernels.setdefault(name, []).append((key, node, call, "torch.library.impl"))
        elif attr == "impl" and call.args:  # lib.impl("op", fn, "CUDA")
            name = _op_name(_str(call.args[0]))
            types = call.args[2] if len(call.args) > 2 else keyword.get("dispatch_key")
            for key, node in _keys(types):
                kernels.setdefault(name, []).append((key, node, call, "Library.impl"))
        elif attr in ("register_kernel", "custom_op", "register_fake", "impl_abstract") and call.args:
            name = _op_name(_str(call.args[0]))
            types = call.args[1] if attr == "register_kernel" and len(call.args) > 1 else keyword.get("device_types")
            for key, node in _keys(types):
                kernels.setdefault(name, []).append((key if attr == "register_kernel" else "OTHER", node, call, attr))
    return defined, kernels


def _where(call: ast.AST, parents: dict) -> Optional[tuple[str, int]]:
    """(what holds the registration, its line) when it does not run at import unconditionally."""
    node = parents.get(id(call))
    while node is not None and not isinstance(node, ast.Module):
        if isinstance(node, ast.If):
            return f"when `{' '.join(ast.unparse(node.test).split())[:60]}` holds", node.lineno
        if isinstance(node, ast.Try):
            return "inside a `try`", node.lineno
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and not any(
                call is d or call in ast.walk(d) for d in getattr(node, "decorator_list", [])):
            return f"when `{node.name}` runs", node.lineno
        node = parents.get(id(node))
    return None


def cuda_only_ops(findings: list[Finding], source: bytes, relpath: str) -> list[Finding]:
    """NPU990 findings on the `"CUDA"` keys of ops the file defines and registers for CUDA only
    (run.py, on the engine's findings, before the per-file reviews)."""
    if b"CUDA" not in source or b".impl(" not in source or b"define(" not in source:
        return findings
    if any(_CUDA_PART.search(part) for part in relpath.lower()[:-3].split("/")):
        return findings  # (the project's CUDA backend module: an NPU host loads another backend's, or none)
    tree = astcache.parse(source)
    if tree is None:
        return findings
    defined, kernels = _registrations(tree)
    taken = {(f.line, f.column) for f in findings}
    parents = None
    added = []
    for name, entries in kernels.items():
        if name not in defined or not entries or any(key.upper() != "CUDA" for key, *_rest in entries):
            continue
        for _key, node, call, how in entries:
            place = (node.lineno, node.col_offset + 1)
            if place in taken:
                continue
            parents = parents if parents is not None else astcache.parents(tree)
            where = _where(call, parents)
            why = IMPL_ONLY.format(how=how, op=name)
            if where is not None:
                why += CONDITIONAL_IMPL.format(where=where[0], line=where[1])
            added.append(Finding(path=relpath, line=place[0], column=place[1], code="NPU990",
                                 message=f'CUDA-only reference left unchanged: string "{node.value}" ({why})',
                                 fixable=False, source=f'"{node.value}"',
                                 severity="warning" if where is not None else "error"))
    return sorted([*findings, *added]) if added else findings


def review(findings: list[Finding], text: str) -> list[Finding]:
    """The findings, with the shapes above given their level and an accurate message."""
    wanted = [i for i, f in enumerate(findings) if f.code == "NPU110" and not f.fixable and f.cell is None
              and _CLASS_EVIDENCE.search(f.message)]
    tools = [i for i, f in enumerate(findings) if f.code == "NPU202" and not f.fixable and f.cell is None
             and f.severity != "info" and not f.also and (f.source or "") == "torch.cuda.cudart"]
    if not wanted and not tools:
        return findings
    tree = astcache.parse(text.encode("utf-8"))
    if tree is None:
        return findings
    out = list(findings)
    for i in wanted:
        changed = _widen_raise(out[i], tree)
        if changed is not None:
            out[i] = changed
    parents = astcache.parents(tree) if tools else {}
    for i in tools:
        changed = _tool_mode(out[i], tree, parents, text)
        if changed is not None:
            out[i] = changed
    return out
