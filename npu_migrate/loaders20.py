"""Findings in a class whose constructor loads a kernel registry of CUDA extensions only (issue #16,
round 20, audit BE#10).

ColossalAI's kernel loaders are classes with a class-level registry of extension classes
(`class InferenceOpsLoader(KernelLoader): REGISTRY = [InferenceOpsCudaExtension]`), whose inherited
`load()` keeps the extensions available on the machine and asserts that one is
(`assert len(usable_exts) != 0, "No usable kernel found ..."`). A class whose `__init__` runs such a
loader as a plain statement of its body (`self.inference_ops = InferenceOpsLoader().load()`, not in
a `try` or an `if`) cannot be built on an NPU host when every registered extension is a CUDA one:
the constructor fails there before any method runs. A finding in another method of that class
(a flash-attn `alibi_slopes=` in `CudaAttentionBackend.prefill`) then points at a line an NPU host
never reaches: the failure, and the porter's decision, is the constructor's loader.

Such a finding (report-only, error or warning) becomes info naming the constructor's loader and
its registry; not a named scope, since the class still fails where it is built (the porter either
ports the loader's ops or keeps the class off the NPU path). The loader class is resolved through
the file's own `from M import Loader` to a module of the run (or the file itself); its registry is
a class-level list or tuple of names, every one naming CUDA (`*Cuda*`) and none naming the NPU,
the CPU or a portable path (`Npu`, `Ascend`, `Cpu`, `Sdpa`, `Triton`, `Torch`); its `load` (its own
or a base class's of the same module) must assert or raise. A loader whose registry has an NPU
or CPU extension, a loader call inside a `try`/`if`, or a finding in `__init__` itself is left as
it is. Whole run; called from runplan.whole_run_passes.
"""

from __future__ import annotations

import ast
import dataclasses
import re
from typing import Optional

from . import astcache

_CUDA = re.compile(r"(?i)cuda")
_PORTABLE = re.compile(r"(?i)npu|ascend|cpu|sdpa|triton|torch")
_FUNCTIONS = (ast.FunctionDef, ast.AsyncFunctionDef)


def _open(finding) -> bool:
    return not finding.fixable and finding.cell is None and finding.severity in ("error", "warning")


def _loader_call(stmt: ast.stmt) -> Optional[tuple[str, int]]:
    """(`Loader`, line) of a plain statement that calls `Loader().load(...)`."""
    value = getattr(stmt, "value", None) if isinstance(stmt, (ast.Assign, ast.AnnAssign, ast.Expr)) else None
    if (isinstance(value, ast.Call) and isinstance(value.func, ast.Attribute) and value.func.attr == "load"
            and isinstance(value.func.value, ast.Call) and isinstance(value.func.value.func, ast.Name)
            and not value.func.value.args):
        return value.func.value.func.id, stmt.lineno
    return None


def _registry(cls: ast.ClassDef) -> Optional[list[str]]:
    for stmt in cls.body:
        if isinstance(stmt, ast.Assign) and isinstance(stmt.value, (ast.List, ast.Tuple)) and stmt.value.elts \
                and all(isinstance(e, ast.Name) for e in stmt.value.elts):
            return [e.id for e in stmt.value.elts]
    return None


def _load_fails(cls: ast.ClassDef, classes: dict, depth: int = 0) -> bool:
    """Whether `load` (the class's own, or a base class's of the same module) asserts or raises."""
    for stmt in cls.body:
        if isinstance(stmt, _FUNCTIONS) and stmt.name == "load":
            return any(isinstance(n, (ast.Assert, ast.Raise)) for n in ast.walk(stmt))
    if depth > 3:
        return False
    return any(isinstance(b, ast.Name) and b.id in classes and _load_fails(classes[b.id], classes, depth + 1)
               for b in cls.bases)


loader_call = _loader_call  # (singles21.py: a module-level `Loader().load()`)


def review(results: list, paths: Optional[dict] = None) -> list:
    """The results, with findings of the module docstring's shape lowered to info."""
    from .modpaths import RunTexts, module_names, resolve_relative

    candidates = [i for i, r in enumerate(results) if r.relpath.endswith(".py") and any(map(_open, r.findings))]
    if not candidates:
        return results
    text_of = RunTexts(results, paths or {})
    by_name: dict[str, int] = {}
    for i, r in enumerate(results):
        if r.relpath.endswith(".py"):
            for name in module_names(r.relpath):
                by_name.setdefault(name, i)
    out = list(results)
    for i in candidates:
        data = text_of(i)
        if not data or b").load(" not in data or b"__init__" not in data:
            continue
        tree = astcache.parse(data)
        if tree is None:
            continue
        lowered: dict[int, str] = {}  # finding line range start -> reason, per method
        spans = []
        for cls in (n for n in astcache.walk(tree) if isinstance(n, ast.ClassDef)):
            init = next((s for s in cls.body if isinstance(s, _FUNCTIONS) and s.name == "__init__"), None)
            if init is None:
                continue
            call = next((c for c in map(_loader_call, init.body) if c is not None), None)
            if call is None:
                continue
            why = _why(call, tree, results[i].relpath, by_name, text_of, results, resolve_relative)
            if why is None:
                continue
            reason = (f"in a class whose constructor fails on an NPU host: `{cls.name}.__init__` calls "
                      f"`{call[0]}().load()` (line {call[1]}), {why}, so `{cls.name}` is never built there and "
                      f"this line is not reached; port that loader's ops, or keep `{cls.name}` off the NPU path")
            for method in cls.body:
                if isinstance(method, _FUNCTIONS) and method is not init:
                    spans.append((method.lineno, method.end_lineno or method.lineno, reason))
        if not spans:
            continue
        findings = []
        for finding in out[i].findings:
            places = [finding.line, *(a[0] for a in finding.also)]
            span = next((s for s in spans if all(s[0] <= p <= s[1] for p in places)), None)
            if span is not None and _open(finding):
                finding = dataclasses.replace(finding, severity="info", message=f"{finding.message} ({span[2]})")
                lowered[finding.line] = span[2]
            findings.append(finding)
        if lowered:
            out[i] = dataclasses.replace(out[i], findings=findings)
    return out


def _why(call, tree, relpath, by_name, text_of, results, resolve_relative) -> Optional[str]:
    """`Loader (path:line) registers only CUDA extensions (...)`, or None."""
    name = call[0]
    target: Optional[int] = None
    module_tree = tree
    for stmt in tree.body:
        if isinstance(stmt, ast.ImportFrom) and any((a.asname or a.name) == name and a.name == name for a in stmt.names):
            module = (resolve_relative(relpath, stmt.level, stmt.module or "").replace("/", ".") if stmt.level
                      else stmt.module or "")
            target = by_name.get(module)
            if target is None:
                return None
            module_tree = astcache.parse(text_of(target) or b"")
            break
    if module_tree is None:
        return None
    classes = {n.name: n for n in module_tree.body if isinstance(n, ast.ClassDef)}
    loader = classes.get(name)
    if loader is None:
        return None
    registry = _registry(loader)
    if not registry or not all(_CUDA.search(n) and not _PORTABLE.search(n) for n in registry):
        return None
    if not _load_fails(loader, classes):
        return None
    where = results[target].relpath if target is not None else relpath
    return (f"whose registry lists only CUDA extensions ({', '.join(f'`{n}`' for n in registry)}; "
            f"{where}:{loader.lineno}) and whose `load` fails where none is available")


fails_why = _why  # (singles21.py)
