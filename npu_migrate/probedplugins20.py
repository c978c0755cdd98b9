"""A plugin class whose `load()` repeats the import its own `is_available()` probes, built only by a
registry that loads available plugins and lists an NPU one (issue #16, wave 20: round-19 audit
BA#18). Whole run, from runplan.whole_run_passes.

ColossalAI's kernel extensions have the shape

    class FlashAttentionDaoCudaExtension(_Extension):
        def is_available(self):
            try:
                from flash_attn.bert_padding import index_first_axis  # noqa
                ...
            except:
                cuda_available = False
            return cuda_available
        def load(self):
            from flash_attn.bert_padding import index_first_axis, pad_input
            ...

    class FlashAttentionLoader(KernelLoader):           # another module
        REGISTRY = [FlashAttentionNpuExtension, FlashAttentionDaoCudaExtension, ...]
    # KernelLoader.load(): `if ext.is_available(): ...` before `ext.load()`

On an NPU host the probe's import fails, `is_available()` answers False and the loader picks the
NPU extension: `load()` never runs there. A report-only finding (error or warning) whose every place
is an import in `load()` of a module `is_available()` imports inside a `try` whose handler binds or
returns `False` (or that probe's own import) is lowered to info with samefile.DISABLED, a
moot.AS_WRITTEN reason (a named "runs as written" scope), naming the probe and the registry, when:

* the class is defined at module level with both methods;
* every reference to the class name in the run's other files is an element of a list or tuple
  (a registry) in a file whose text calls `.is_available()` and `.load(`, and there is one, or of
  a module-level list in a file that loads nothing (a catalogue such as `ALL_EXTENSIONS`) whose
  every reader that loads also probes; its own file names it nowhere else. The message names an NPU plugin of the registry (`Npu`, `NPU`,
  `Ascend` in its name) where there is one; a registry without one fails in its loader on an NPU
  host (no plugin available), which is reported where the loader is used.

Kept: an import of another module in `load()` (the probe does not decide it), a class built or
loaded directly anywhere (`Ext().load()`), a probe that does not answer False.
"""

from __future__ import annotations

import ast
import dataclasses
import re
from typing import Optional

_NPU_NAME = re.compile(r"npu|ascend", re.IGNORECASE)
_ALSO_SUFFIX = re.compile(r" \(also at [^()]*\)$")


def _imported_modules(nodes) -> set:
    out = set()
    for node in nodes:
        for inner in ast.walk(node):
            if isinstance(inner, ast.ImportFrom) and not inner.level and inner.module:
                out.add(inner.module)
            elif isinstance(inner, ast.Import):
                out.update(a.name for a in inner.names)
    return out


def _answers_false(handler: ast.ExceptHandler) -> bool:
    return any(isinstance(n, ast.Constant) and n.value is False for s in handler.body for n in ast.walk(s))


def _probe(method: ast.FunctionDef) -> tuple[set, set]:
    """(modules the method imports in a `try` whose handler answers False, lines of those imports)."""
    modules, lines = set(), set()
    for node in ast.walk(method):
        if isinstance(node, ast.Try) and node.handlers and all(_answers_false(h) for h in node.handlers):
            for stmt in node.body:
                for inner in ast.walk(stmt):
                    if isinstance(inner, (ast.Import, ast.ImportFrom)):
                        found = _imported_modules([inner])
                        modules |= found
                        lines.update(range(inner.lineno, (inner.end_lineno or inner.lineno) + 1))
    return modules, lines


def _import_lines(method: ast.FunctionDef, modules: set) -> set:
    lines = set()
    for inner in ast.walk(method):
        if isinstance(inner, (ast.Import, ast.ImportFrom)) and _imported_modules([inner]) <= modules:
            lines.update(range(inner.lineno, (inner.end_lineno or inner.lineno) + 1))
    return lines


def _probed_wherever_loaded(text_of, py, listname: str) -> bool:
    """Every run file naming the module-level list `listname` that loads (`.load(`) also probes
    (`.is_available()`): a catalogue (`ALL_EXTENSIONS` a setup.py builds from) loads nothing."""
    word = listname.encode()
    for i in py:
        data = text_of(i) or b""
        if word in data and b".load(" in data and b".is_available()" not in data:
            return False
    return True


def _registry(results, text_of, py, home: int, name: str) -> Optional[tuple[str, str]]:
    """(registry file, an NPU plugin beside it or "") when every reference to `name` outside `home`
    is a registry element in a file that probes before it loads; None otherwise."""
    from . import astcache

    word = name.encode()
    found = None
    for i in py:
        data = text_of(i)
        if not data or word not in data:
            continue
        tree = astcache.parse(data)
        if tree is None:
            return None
        if i == home:
            refs = [n for n in ast.walk(tree) if isinstance(n, ast.Name) and n.id == name]
            if refs:
                return None
            continue
        allowed: set = set()
        npu = None
        bound = {id(stmt.value): stmt.targets[0].id for stmt in tree.body if isinstance(stmt, ast.Assign)
                 and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name)}
        for node in ast.walk(tree):
            if isinstance(node, (ast.List, ast.Tuple)):
                names = [e.id for e in node.elts if isinstance(e, ast.Name)]
                if name not in names:
                    continue
                if b".load(" in data:
                    if b".is_available()" not in data:
                        return None
                    npu = npu or next((n for n in names if n != name and _NPU_NAME.search(n)), "")
                elif id(node) not in bound or not _probed_wherever_loaded(text_of, py, bound[id(node)]):
                    return None
                allowed.update(id(e) for e in node.elts)
        for node in ast.walk(tree):
            if isinstance(node, ast.Name) and node.id == name and id(node) not in allowed:
                return None
            if isinstance(node, ast.Attribute) and node.attr == name:
                return None
        if npu is not None and found is None:
            found = (results[i].relpath, npu)
    return found


def review(results: list, paths: dict) -> list:
    """The results, with the findings of this module's docstring lowered to info."""
    from . import astcache
    from .findings import split_merged
    from .modpaths import RunTexts
    from .moot import is_moot
    from .samefile import DISABLED

    def open_finding(f) -> bool:
        return not f.fixable and f.cell is None and f.severity != "info" and not is_moot(f)

    text_of = RunTexts(results, paths)
    candidates = []
    for i, r in enumerate(results):
        if r.relpath.endswith(".py") and any(open_finding(f) for f in r.findings):
            data = text_of(i)
            if data and b"def is_available" in data and b"def load" in data:
                candidates.append(i)
    if not candidates:
        return results
    py = [i for i, r in enumerate(results) if r.relpath.endswith(".py")]
    out = list(results)
    for i in candidates:
        tree = astcache.parse(text_of(i))
        if tree is None:
            continue
        classes = []
        for cls in tree.body:
            if not isinstance(cls, ast.ClassDef):
                continue
            methods = {s.name: s for s in cls.body if isinstance(s, ast.FunctionDef)}
            if "is_available" not in methods or "load" not in methods:
                continue
            modules, probe_lines = _probe(methods["is_available"])
            if not modules:
                continue
            lines = probe_lines | _import_lines(methods["load"], modules)
            classes.append((cls, sorted(modules), lines))
        if not classes:
            continue
        changed, findings = False, []
        for finding in results[i].findings:
            if open_finding(finding):
                places = {p.line for p in split_merged(finding)}
                for cls, modules, lines in classes:
                    if not places <= lines:
                        continue
                    registry = _registry(results, text_of, py, i, cls.name)
                    if registry is None:
                        continue
                    beside = f", beside `{registry[1]}`" if registry[1] else ""
                    named = next((m for m in sorted(modules, key=len, reverse=True) if m in (finding.source or "")),
                                 modules[0])
                    why = (f"{DISABLED}: `{cls.name}.is_available()` imports `{named}` in a `try` that "
                           f"answers False where it fails, and {registry[0]} loads only available "
                           f"plugins{beside}")
                    also = _ALSO_SUFFIX.search(finding.message)
                    head, tail = (finding.message[:also.start()], also.group(0)) if also else (finding.message, "")
                    finding = dataclasses.replace(finding, severity="info", message=f"{head} ({why}){tail}")
                    changed = True
                    break
            findings.append(finding)
        if changed:
            out[i] = dataclasses.replace(results[i], findings=sorted(findings))
    return out
