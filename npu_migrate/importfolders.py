"""One NPU911 per folder of modules that fail at import on the same CUDA-only package (issue #16).

SGLang vendors a CuTe-DSL flash-attention (`jit_kernel/flash_attention/cute/`, 30 modules), and
vLLM and torchao hold folders of CuTe-DSL kernels: every module of such a folder starts with
`import cutlass` / `import cutlass.cute as cute` / `import cuda.bindings.driver`, and once those
packages became sweep packages (round 16: their imports had been silently missed) each module
got the same NPU911 error, one per file: the per-file repetition the issue names as redundant
(vendored `.cuh` headers one finding each). The port item is the folder: its kernels are written
for NVIDIA GPUs, and none of its modules imports on an NPU host.

A finding is folded when it is an open NPU911 error whose every line (its own and its `also`
lines) is a module-level import statement (at column 0: not in a `try`, a function or a branch)
of a package the sweep reports as NPU911 (rules/sweep.toml `module_codes`). Two or more such
findings in one folder become one: the first file's (by path) keeps
the error, and its message names the other modules; theirs are dropped (nothing is lost: each is
named). A finding may also hold places after such an import inside a statement of their own (an
indented line in a module-level `def` or `class`: a function's local `from cutlass.cute.runtime
import ...`, a `.is_cuda` test merged into it; round 28, CA#31, CB#10; a line of a module-level
block such as `if __name__ == "__main__":` is not one; a module that is also a script, and the
modules of a folder whose `__init__` fails itself, which folds19.py folds into it, are not folded
so): on an NPU host the module stops at its first failing
import, so they never run there, and the module is the port item as before. A finding with any
other line (a module-level call or cast, a line before the first failing import, a guarded
import or a later import of another CUDA-only package: another port item) is never folded, nor
is one alone in its folder. Text only: the lines are read from the files' bytes, no parse.
"""

from __future__ import annotations

import os
import re
from dataclasses import replace

MAX_NAMED = 12
FOLDED = "the other modules of this folder that import"

_IMPORT = re.compile(r"(?:from\s+([\w.]+)\s+import\b|import\s+([\w.]+(?:\s+as\s+\w+)?(?:\s*,\s*[\w.]+(?:\s+as\s+\w+)?)*)\s*(?:#.*)?$)")


def _packages() -> tuple[str, ...]:
    from . import catalogue

    codes = catalogue.read_table("sweep.toml")["module_codes"]
    return tuple(sorted(m for m, code in codes.items() if code == "NPU911" and not m.startswith("torch.")))


def _imported(line: str, packages: tuple[str, ...]) -> frozenset | None:
    """The NPU911 packages a module-level import line names (all its modules must be such), or None."""
    if not line or line[0].isspace():
        return None
    match = _IMPORT.match(line.rstrip())
    if match is None:
        return None
    modules = [match.group(1)] if match.group(1) else [part.split()[0] for part in match.group(2).split(",")]
    found = set()
    for module in modules:
        hit = next((p for p in packages if module == p or module.startswith(p + ".")), None)
        if hit is None:
            return None
        found.add(hit)
    return frozenset(found)


def _candidate(finding) -> bool:
    from .moot import is_moot

    return (finding.code == "NPU911" and finding.severity == "error" and not finding.fixable
            and finding.cell is None and not is_moot(finding) and FOLDED not in finding.message)


def _failing_names(lines: list[str], places, packages: tuple[str, ...]) -> frozenset | None:
    """The NPU911 packages a finding's module-level import lines name, where every place of it
    is such a line or lies after one of them inside a statement of its own (indented: a function,
    a class, a branch; round 28, CA#31, CB#10), and none of those later places imports a CUDA-only
    package the module-level lines do not name (another port item: kept); else None. The module
    fails at its first such import on an NPU host, so nothing after it there runs."""
    names: set = set()
    later = []
    for line in places:
        text = lines[line - 1] if 0 < line <= len(lines) else ""
        got = _imported(text, packages)
        if got is not None:
            names |= got
        elif text[:1].isspace():
            later.append((line, text.strip()))
        else:
            return None
    if not names:
        return None
    if later and any(text.startswith("if __name__") for text in lines):
        return None  # (a script as well, run by its path: its own entry point, kept)
    first = min(line for line in places if _imported(lines[line - 1], packages) is not None)
    for line, text in later:
        if line < first or not _in_definition(lines, line):
            return None
        if _IMPORT.match(text) or re.match(r"(?:from|import)\s", text):
            got = _imported(text, packages)
            if got is None or not got <= names:
                return None
    return frozenset(names)


def _in_definition(lines: list[str], line: int) -> bool:
    """The indented line lies in a module-level `def` or `class` (its nearest line at column 0
    above opens one), not in a module-level block that runs at import or as a script (`if
    __name__ == "__main__":`, a `try`: kept)."""
    for text in reversed(lines[:line - 1]):
        if text and not text[0].isspace() and not text.startswith(("#", ")", "]", "}")):
            return text.startswith(("def ", "async def ", "class ", "@"))
    return False


def fold(results: list, paths: dict | None = None) -> list:
    """The run's results with the folders' repeated import-only NPU911 errors folded (module doc)."""
    paths = paths or {}
    packages = _packages()
    groups: dict[str, list[tuple[int, int, frozenset]]] = {}
    from .modpaths import RunTexts

    texts = RunTexts(results, paths)
    for i, result in enumerate(results):
        if not result.relpath.endswith(".py"):
            continue
        for k, finding in enumerate(result.findings):
            if not _candidate(finding):
                continue
            data = texts(i)
            if data is None:
                continue
            lines = data.decode("utf-8", "replace").splitlines()
            places = (finding.line, *(a[0] for a in finding.also))
            names = _failing_names(lines, places, packages)
            if names:
                later = any(0 < n <= len(lines) and lines[n - 1][:1].isspace() for n in places)
                groups.setdefault(os.path.dirname(result.relpath), []).append((i, k, names, later))
    out = list(results)
    for members in groups.values():
        if any(results[m[0]].relpath.endswith("__init__.py") for m in members):
            # (a failing package `__init__`: the submodules it loads are folds19's, with their later places)
            members = [m for m in members if not m[3]]
        if len(members) < 2:
            continue
        members.sort(key=lambda m: results[m[0]].relpath)
        (first, index, _names, _later), rest = members[0], members[1:]
        names = frozenset().union(*(m[2] for m in members))
        shown = [f"`{os.path.basename(results[i].relpath)}`" for i, _k, _n, _l in rest]
        out = fold_into(out, (first, index), [(i, k) for i, k, _n, _l in rest], names, shown)
    return out


def fold_into(out: list, kept: tuple[int, int], folded: list[tuple[int, int]], names, shown: list[str]) -> list:
    """Finding `kept` (result index, finding index) names the folder's other files (`shown`) that
    fail on the same CUDA-only packages (`names`); the `folded` findings go (extfolds19.py folds
    sibling scripts with the same wording, so that this module does not fold them again)."""
    first, index = kept
    more = f" and {len(shown) - MAX_NAMED} more" if len(shown) > MAX_NAMED else ""
    packs = ", ".join(f"`{p}`" for p in sorted(names))
    note = (f"({FOLDED} CUDA-only packages ({packs}) unguarded at module level, and so fail to import on an NPU host "
            f"all the same: {', '.join(shown[:MAX_NAMED])}{more})")
    out = list(out)
    findings = list(out[first].findings)
    findings[index] = replace(findings[index], message=f"{findings[index].message} {note}")
    out[first] = replace(out[first], findings=findings)
    for i, k in folded:
        out[i] = replace(out[i], findings=[f for j, f in enumerate(out[i].findings) if j != k])
    return out


# (public for folds19.py and extfolds19.py, which fold by the same import test)
imported, packages, candidate = _imported, _packages, _candidate
