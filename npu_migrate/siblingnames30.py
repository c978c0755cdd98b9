"""A name a test imports from its sibling Python module, read as a compiled extension by its
spelling (issue #16, round-30 audit EC#19). Whole run, from runplan.whole_run_passes (before
moot.to_scopes, which names it).

vLLM's `tests/v1/determinism/test_batch_invariance.py`:

    from utils import (BACKENDS, skip_if_not_cuda, skip_unsupported)    # NPU911 "compiled extension
                                                                          # module `utils.skip_if_not_cuda`"

`utils` is the test's sibling `tests/v1/determinism/utils.py` (the test's folder is on the path
when it runs), and `skip_if_not_cuda = pytest.mark.skipif(...)` is a pytest marker defined there.
The sweep reads a member named `..._cuda`, `_C` or `_CUDA` of a module that is not the project's
package (sweep._is_extension: `from kernels import selective_scan_cuda`) as a compiled extension; a
per-file rule cannot see that the module is a Python file beside the importer.

`review`: an open NPU911 place on an absolute `from M import ...` (M: one or more dotted parts) in
a .py file, where the run holds `M` as a Python file in the importer's folder (`<folder>/M.py` or
`<folder>/M/__init__.py`) and every member of the import spelled like an extension is bound at
that module's top level by a `def`, a `class` or an assignment (not by an import: a re-exported
`from ..._cuda import x` stays), is lowered with the reason `SIBLING_NAME` (a moot.NO_WORK phrase:
a named scope). The import runs as written on an NPU host: nothing of it is CUDA-only.

Kept (the nearest true cases): the same import where no such sibling file is in the run (a compiled
`selective_scan_cuda` beside the script is a `.so`, not a `.py`), and a sibling module that only
re-exports the member from another import.
"""

from __future__ import annotations

import ast
import posixpath
from typing import Optional

SIBLING_NAME = "a Python name of the importer's sibling module, not a compiled extension"


def _is_extension(name: str) -> bool:
    return name in ("_C", "_CUDA") or name.endswith("_cuda")


def _bound(tree: ast.Module) -> set[str]:
    """The names a module binds at its top level by `def`, `class` or assignment."""
    names: set[str] = set()
    for stmt in tree.body:
        if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(stmt.name)
        elif isinstance(stmt, (ast.Assign, ast.AnnAssign)):
            targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
            for target in targets:
                for node in ast.walk(target):
                    if isinstance(node, ast.Name):
                        names.add(node.id)
    return names


def review(results: list, paths: dict) -> list:
    """The results, with each place of the docstring's shape lowered to info."""
    import dataclasses

    from .envskips29 import lower_places
    from .modpaths import RunModules, RunTexts
    from .moot import is_open

    def wanted(f) -> bool:
        return f.code == "NPU911" and is_open(f) and "compiled extension module `" in f.message

    candidates = [i for i, r in enumerate(results) if r.relpath.endswith(".py") and any(map(wanted, r.findings))]
    if not candidates:
        return results
    by_path = {r.relpath: i for i, r in enumerate(results) if r.relpath.endswith(".py")}
    text_of = RunTexts(results, paths)
    modules = RunModules(results, text_of)
    out = list(results)
    for i in candidates:
        tree = modules.tree(i)
        if tree is None:
            continue
        folder = posixpath.dirname(results[i].relpath)
        lines: dict[int, Optional[str]] = {}
        for node in ast.walk(tree):
            if not isinstance(node, ast.ImportFrom) or node.level or not node.module:
                continue
            members = [a.name for a in node.names if _is_extension(a.name)]
            if not members:
                continue
            stem = posixpath.join(folder, *node.module.split("."))
            j = by_path.get(stem + ".py", by_path.get(stem + "/__init__.py"))
            sibling = modules.tree(j) if j is not None else None
            if sibling is None or not set(members) <= _bound(sibling):
                continue
            for line in range(node.lineno, (node.end_lineno or node.lineno) + 1):
                lines[line] = SIBLING_NAME
        if not lines:
            continue
        findings, changed = [], False
        for finding in results[i].findings:
            pieces = lower_places(finding, lines.get) if wanted(finding) else None
            changed = changed or pieces is not None
            findings.extend([finding] if pieces is None else pieces)
        if changed:
            out[i] = dataclasses.replace(results[i], findings=sorted(findings))
    return out
