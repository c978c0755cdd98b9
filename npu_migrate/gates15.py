"""Gates that decide nothing on an NPU host (issue #16, round-14 audits).

- **A "cuda" test that only records why an op is unsupported** (NPU990, AL#18: xformers'
  `not_supported_reasons()`: `if dtype is torch.bfloat16 and (not device_type.startswith("cuda")
  or ...): reasons.append("bf16 is only supported on A100+ GPUs")`). The "cuda" string sits in the
  test of an `if` whose body only appends (or adds) a message (a string or an f-string) to a
  collection and has no `else`: the test picks no device and runs nothing on the device; on an NPU
  host it only records that a CUDA kernel does not apply, which is right there. Not reported (the
  sweep's gates). A test whose body does anything else (sets a device, calls a kernel, returns,
  raises), or that has an `else`, keeps its finding: there "cuda" selects what runs.

The sweep calls `mark` for each node it enters (Sweep.on_visit, after labels6.mark), as labels6.py
does.
"""

from __future__ import annotations

import ast
from typing import Any

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
