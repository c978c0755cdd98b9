"""Module-level constants read only inside code an NPU host never runs (issue #16, round-29 audit
DA#38). Whole run, from supportgates27.review (after its units and methods are read).

callgates21.lower_units reads the unit (a module-level function or class) that holds a report-only
finding; a finding at module level has no unit and stayed open. vLLM's native-torch MXFP8 kernel:

    _E8M0 = torch.float8_e8m0fnu                      # NPU913, module level

    class TorchMxFp8LinearKernel(Mxfp8LinearKernel):
        @classmethod
        def is_supported(cls, compute_capability=None):
            if current_platform.is_xpu():
                return True, None
            if current_platform.is_cuda() and current_platform.has_device_capability(90):
                return True, None
            return False, "requires XPU or CUDA (>=sm_90)"
        def process_weights_after_loading(self, layer):
            ... .view(_E8M0)                          # the constant's only reads

The class's own findings are named scopes already (supportgates27: a selector rejects it on an
NPU host). The constant names a dtype and touches no device; it stands for the compute of its
readers, which never run there. `lower_constants` lowers such a module-level finding to the same
named scope, naming the constant, its readers and their reason, where all of this holds:

* every place of the finding lies in one module-level assignment to a single name
  (`NAME = ...`, `NAME: T = ...`);
* the file reads NAME at least once, and every read lies in the body of a module-level function
  or class (not at module level, not in a decorator or a default) whose unit the caller's
  `reason(lookup, i, unit)` finds never run on an NPU host (supportgates27's verdicts);
* the name is not named in `__all__` or any string of the file, and no other Python file of the
  run imports it (`from m import NAME`; a module attribute read `m.NAME` of another file is read
  as an import too, by the word).

Kept (the nearest true cases): a constant also read at module level or in a unit an NPU host runs
(a function any caller reaches, a class a selector may pick there), or one another module imports.
Nothing is dropped: the finding keeps its code and lines as a named skipped scope.
"""

from __future__ import annotations

import ast
import re
from typing import Optional

from . import astcache

_DEFS = (ast.FunctionDef, ast.AsyncFunctionDef)


def _assigned_name(tree: ast.Module, lines: list[int]) -> Optional[tuple[str, ast.stmt]]:
    """(the name, the statement) where every line lies in one module-level single-name assignment."""
    for stmt in tree.body:
        first, last = stmt.lineno, stmt.end_lineno or stmt.lineno
        if not all(first <= line <= last for line in lines):
            continue
        if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name):
            return stmt.targets[0].id, stmt
        if isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name) and stmt.value is not None:
            return stmt.target.id, stmt
        return None
    return None


def _reader_units(tree: ast.Module, name: str, unit_of) -> Optional[list]:
    """The units holding every read of `name` in the file, or None where a read lies outside one
    (module level, a decorator, a default) or the name is named in a string."""
    units: list = []
    reads = 0
    for node in astcache.walk(tree):
        if isinstance(node, ast.Constant) and node.value == name:
            return None  # (`__all__`, getattr: read from outside)
        if isinstance(node, ast.Name) and node.id == name and isinstance(node.ctx, ast.Load):
            reads += 1
            unit = unit_of(tree, node.lineno)
            if unit is None:
                return None
            if all(unit is not u for u in units):
                units.append(unit)
    return units if reads else None


def _imported_elsewhere(results: list, text_of, i: int, name: str) -> bool:
    word = re.compile(rb"\b" + re.escape(name.encode()) + rb"\b")
    return any(j != i and r.relpath.endswith(".py") and word.search(text_of(j) or b"")
               and re.search(rb"\bimport\b", text_of(j) or b"") and _imports(text_of(j), name)
               for j, r in enumerate(results))


def _imports(data: bytes, name: str) -> bool:
    """The file imports `name` from a module, or reads it as a module's attribute (`m.NAME`)."""
    tree = astcache.parse(data)
    if tree is None:
        return True
    for node in astcache.walk(tree):
        if isinstance(node, ast.ImportFrom) and any(a.name == name for a in node.names):
            return True
        if isinstance(node, ast.Attribute) and node.attr == name:
            return True
    return False


def lower_constants(results: list, text_of, open_finding, start, reason) -> list:
    """The results, with each open module-level finding of the docstring's shape lowered to the
    named scope `reason(lookup, i, unit)` gives its readers (`start()`: (run, lookup), as for
    callgates21.lower_units)."""
    from .callgates21 import unit_of
    from .flags16 import BRANCH
    from .flagcalls19 import lower_result
    from .modpaths import open_python

    out = list(results)
    for i in open_python(results, open_finding):
        result = results[i]
        data = text_of(i)
        if not data:
            continue
        places = [n for f in result.findings if open_finding(f) for n in (f.line, *(ln for ln, _c, _s in f.also))]
        if not places:
            continue
        tree = astcache.parse(data)
        if tree is None or not any(_assigned_name(tree, [n]) for n in places):
            continue
        run, lookup = start()
        tree = run.trees.setdefault(i, tree)
        verdicts: dict[int, Optional[str]] = {}

        def verdict(line: int, tree=tree, i=i, lookup=lookup) -> Optional[str]:
            if line in verdicts:
                return verdicts[line]
            verdicts[line] = None
            found = _assigned_name(tree, [line])
            if found is None:
                return None
            name, _stmt = found
            units = _reader_units(tree, name, unit_of)
            if not units:
                return None
            reasons = [reason(lookup, i, unit) for unit in units]
            if any(r is None for r in reasons) or _imported_elsewhere(results, text_of, i, name):
                return None
            readers = ", ".join(f"`{u.name}`" for u in units)
            # (the weakest verdict speaks: policy P2's info where one reader is also reached from tests)
            shown = next((r for r in reasons if not r.startswith(BRANCH)), reasons[0])
            head, _sep, tail = shown.partition(": ")
            how = ", which an NPU host does not run" if shown.startswith(BRANCH) else ""
            verdicts[line] = f"{head}: `{name}` is read only in {readers}{how}: {tail}"
            return verdicts[line]

        out[i] = lower_result(result, open_finding, verdict)
    return out
