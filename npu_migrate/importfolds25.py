"""An info note on a CUDA-only import that the same file reports again as a warning or error
(issue #16, precision wave 25, round-25 audit BR#17). Whole run (runplan.whole_run_passes, after
jitfolds23.py):

A CUDA-only package's lazy import inside a function (NPU911) is lowered to info where an NPU host
does not reach it (flagargs21.py: "under a parameter no call of the run sets"), while the same file
imports the same name again elsewhere (SGLang's `fp8_kernel.py`: `from deep_gemm import
transform_sf_into_required_layout` at line 303 under `if scale_ue8m0:`, and at line 343 in another
function, an error). The porter's item is the import of that package's name, which the error already
asks for; the info adds a second place of the same work. It folds into the other finding, whose
message names its line and what its own message said (why it is only info).

Exact: the info must be a report-only NPU911 finding of one line (no other places) whose source is
one import statement; the other an open NPU911 warning or error of the same file one of whose
places (its line or a line merged into it) imports the same module and at least the same names (`import pkg` covers `import pkg` only; `from
pkg import a` covers `from pkg import a`, `from pkg import a, b` covers either). Another package,
other names, a finding of another file, or an info beside only infos keeps its finding.
"""

from __future__ import annotations

import ast
from dataclasses import replace
from typing import Optional

_RANK = {"info": 0, "warning": 1, "error": 2}


def _open(finding) -> bool:
    from .moot import is_moot

    return finding.code == "NPU911" and not finding.fixable and finding.cell is None and not is_moot(finding)


def _imports(source: Optional[str]) -> Optional[tuple[str, frozenset]]:
    """(module, imported names) of a finding's source when it is one import statement, else None."""
    if not source or "import" not in source:
        return None
    try:
        tree = ast.parse(source.strip())
    except SyntaxError:
        return None
    if len(tree.body) != 1:
        return None
    stmt = tree.body[0]
    if isinstance(stmt, ast.ImportFrom) and not stmt.level and stmt.module:
        return stmt.module, frozenset(alias.name for alias in stmt.names)
    if isinstance(stmt, ast.Import) and len(stmt.names) == 1:
        return stmt.names[0].name, frozenset()
    return None


def _why(message: str) -> str:
    """What an info finding's message adds after its first sentence (its parentheticals)."""
    at = message.find(" (")
    return message[at + 1:] if at >= 0 else ""


def fold_repeated_imports(results: list, paths: Optional[dict] = None) -> list:
    """Module's doc (a new list)."""
    out = list(results)
    for k, result in enumerate(results):
        if not result.relpath.endswith(".py") or sum(f.code == "NPU911" for f in result.findings) < 2:
            continue
        found = [(f, _imports(f.source)) for f in result.findings if _open(f)]
        infos = [(f, imp) for f, imp in found if f.severity == "info" and imp is not None and not f.also]
        if not infos:
            continue
        # (each open warning or error with the imports at its places: its line and its other lines)
        keepers = sorted(((f, [(line, imp) for line, source in [(f.line, f.source), *((a[0], a[2]) for a in f.also)]
                                if (imp := _imports(source)) is not None])
                          for f, _imp in found if f.severity in ("warning", "error")),
                         key=lambda p: (-_RANK[p[0].severity], p[0].line))
        notes: dict[int, list[str]] = {}
        dropped: set = set()
        for finding, (module, names) in infos:
            hit = next(((g, line) for g, places in keepers for line, (m, n) in places
                        if m == module and names <= n and bool(names) == bool(n)), None)
            if hit is None:
                continue
            target, line = hit
            what = f"`{', '.join(sorted(names))}` from `{module}`" if names else f"`{module}`"
            why = _why(finding.message)
            notes.setdefault(id(target), []).append(
                f"also line {finding.line}, the same import of {what} as line {line}" + (f" {why}" if why else ""))
            dropped.add(id(finding))
        if not dropped:
            continue
        findings = []
        for f in result.findings:
            if id(f) in dropped:
                continue
            if id(f) in notes:
                f = replace(f, message=f"{f.message} ({'; '.join(notes[id(f)])}: one import to port)")
            findings.append(f)
        out[k] = replace(result, findings=findings)
    return out
