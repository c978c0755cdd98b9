"""Scripts that exit where an optional package is missing (issue #16, policy P1, round-28 audit
CB#30). A whole-run pass (runplan.whole_run_passes, right after optpkgtests28.py).

A tool of the project imports an optional package at module level and stops where it is missing:

    try:
        from helion.autotuner.accuracy import assert_close as helion_assert_close
        from vllm.utils.import_utils import has_helion        # `return _has_module("helion")`
        ...
    except ImportError as e:
        print(f"Error importing vLLM: {e}")
        sys.exit(1)

    ...
        graph = torch.cuda.CUDAGraph()                        # NPU202, line 446

Everything after the `try` runs only where the import succeeded, so an NPU host reaches the CUDA
graph only once a user installs Helion: an explicit choice. Under policy P1 the open errors and
warnings after the `try` become info naming the package, the exit and the probe that shows the
project treats the package as optional: "reached on an NPU host only when the optional package
`helion` is installed: the script exits where it is missing (...)". Never dropped, never a scope
(the package may be installed there).

The decision, per Python file with open findings:
* a `try` statement of the module's top level whose body imports (`import P...`, `from P... import`,
  no relative import) a package P that is not a module of the run, and every handler of which
  catches ImportError or ModuleNotFoundError (alone or in a tuple) and ends in `sys.exit(...)`,
  `exit(...)`, `quit(...)` or `raise SystemExit(...)`;
* P is optional: a probe function the file calls (by a plain name, defined in the file or imported
  from a module of the run, inside that `try` too) looks P up (optpkgtests28's probe reading:
  `_has_module("P")`, `find_spec("P")`, a `try: import P`, a few calls deep), and P is not a package
  an NPU host has (torch, Triton, scopes.toml installed_on_npu);
* only the places on lines after the `try` are lowered.

Round 30 (audit EC#26, vLLM's `quantization/utils/humming/schema.py`): a module-level block the
file enters only where the probe finds the package, `if has_humming():` (`return
_has_module("humming")`), holding the tables of the package's dtypes (`torch.float8_e5m2`,
NPU913), is the same choice: its places become info with `BLOCK_OPT_IN` (the body only, not an
`else:`; the probe resolved as above, a plain call with no arguments, alone as the condition; the
body imports the package or a module named after it, `from vllm.utils.humming import dtypes`).
Kept: a block under a probe of another package (`if _numpy_available(): import cutlass`).

Kept as they were (the nearest true cases): a script that exits where a package the project never
probes is missing (a required dependency: the script runs wherever the project is installed), a
handler that falls back instead of exiting, a `try` inside a function, and the places before the
`try`.
"""

from __future__ import annotations

import ast
import dataclasses
import re

from . import astcache
from .findings import lower_pieces, merge_per_file
from .modpaths import RunTexts
from .optpkgtests28 import Probes, is_open

OPT_IN = ("reached on an NPU host only when the optional package `{package}` is installed: the script exits "
          "where it is missing (`{handler}`, line {line}; `{probe}()`, {where}, looks the package up)")
BLOCK_OPT_IN = ("reached on an NPU host only when the optional package `{package}` is installed: the block "
                "runs only under `if {probe}():` (line {line}; `{probe}()`, {where}, looks the package up)")
_IMPORT_ERRORS = frozenset({"ImportError", "ModuleNotFoundError"})
_EXITS = frozenset({"sys.exit", "exit", "quit", "os._exit"})


def _catches_import(handler: ast.ExceptHandler) -> bool:
    kinds = handler.type.elts if isinstance(handler.type, ast.Tuple) else [handler.type]
    return any(isinstance(k, ast.Name) and k.id in _IMPORT_ERRORS for k in kinds)


def _exits(handler: ast.ExceptHandler) -> bool:
    last = handler.body[-1] if handler.body else None
    if isinstance(last, ast.Expr) and isinstance(last.value, ast.Call):
        return (astcache.dotted(last.value.func) or "") in _EXITS
    if isinstance(last, ast.Raise) and last.exc is not None:
        target = last.exc.func if isinstance(last.exc, ast.Call) else last.exc
        return (astcache.dotted(target) or "") == "SystemExit"
    return False


def _packages(body: list) -> list[str]:
    out: list[str] = []
    for stmt in body:
        if isinstance(stmt, ast.Import):
            out += [a.name.split(".")[0] for a in stmt.names]
        elif isinstance(stmt, ast.ImportFrom) and stmt.module and not stmt.level:
            out.append(stmt.module.split(".")[0])
    return list(dict.fromkeys(out))


def _guard(tree: ast.Module, own, probes: Probes, relpath: str, text: str):
    """(the first line after the guard, the reason) of the file's exit-unless-installed `try`, or None."""
    for stmt in tree.body:
        if not (isinstance(stmt, ast.Try) and stmt.handlers
                and all(h.type is not None and _catches_import(h) and _exits(h) for h in stmt.handlers)):
            continue
        packages = [p for p in _packages(stmt.body) if p not in own]
        if not packages:
            continue
        flat = ast.Module(body=[*tree.body, *stmt.body], type_ignores=[])
        called = dict.fromkeys(n.func.id for n in astcache.walk(tree) if isinstance(n, ast.Call)
                               and isinstance(n.func, ast.Name) and not n.args and not n.keywords)
        for name in called:
            found = probes.resolve(flat, relpath, name)
            if found is None or found[0] not in packages:
                continue
            handler = stmt.handlers[0]
            shown = " ".join((ast.get_source_segment(text, handler.body[-1]) or "").split())
            kinds = " ".join((ast.get_source_segment(text, handler.type) or "ImportError").split())
            return (stmt.end_lineno or stmt.lineno) + 1, OPT_IN.format(
                package=found[0], handler=f"except {kinds}: {shown}", line=handler.body[-1].lineno,
                probe=name, where=found[1])
    return None


def _serves(body: list, package: str) -> bool:
    """The block imports the probed package or a module named after it (`from vllm.utils.humming
    import dtypes`): it serves that package, not another one (`if _numpy_available(): import
    cutlass` stays: cutlass is not what the probe finds)."""
    for node in (n for stmt in body for n in ast.walk(stmt)):
        names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
            [node.module or ""] if isinstance(node, ast.ImportFrom) and not node.level else []
        if any(package in name.split(".") for name in names):
            return True
    return False


def _probed_blocks(tree: ast.Module, own: frozenset, probes: Probes, relpath: str) -> list[tuple[int, int, str]]:
    """(first, last line, reason) of each module-level `if probe():` body of the round-30 shape."""
    out = []
    for stmt in tree.body:
        test = stmt.test if isinstance(stmt, ast.If) else None
        if not (isinstance(test, ast.Call) and isinstance(test.func, ast.Name) and not test.args
                and not test.keywords):
            continue
        found = probes.resolve(tree, relpath, test.func.id)
        if found is None or found[0] in own or not _serves(stmt.body, found[0]):
            continue
        why = BLOCK_OPT_IN.format(package=found[0], probe=test.func.id, line=stmt.lineno, where=found[1])
        out.append((stmt.body[0].lineno, stmt.body[-1].end_lineno or stmt.body[-1].lineno, why))
    return out


def _own_packages(relpath: str, top: frozenset, stems: frozenset) -> "OwnPackages":
    """The packages a script's `try` imports from the run itself (round-43 check of CB#30, h164):
    the run's top-level packages and the modules and folders beside the script (`from common import
    x` in `tools/`), not every folder name deep in the tree (vLLM's `tests/kernels/helion/`, a
    folder with no `__init__.py`, made `helion` look like a module of the run and kept the script's
    guard on the optional package `helion` unread)."""
    return OwnPackages(top, stems, relpath.rsplit("/", 1)[0] + "/" if "/" in relpath else "")


@dataclasses.dataclass(frozen=True)
class OwnPackages:
    top: frozenset
    stems: frozenset
    folder: str

    def __contains__(self, package: object) -> bool:
        return package in self.top or f"{self.folder}{package}" in self.stems


def review(results: list, paths: dict) -> list:
    """The results, with the open findings of a script that exits where an optional package is
    missing lowered to info after its guard (this module's docstring)."""
    candidates = [i for i, r in enumerate(results) if r.relpath.endswith(".py") and any(is_open(f) for f in r.findings)]
    if not candidates:
        return results
    text_of = RunTexts(results, paths)
    probes = None
    out = list(results)
    # (the run's top-level packages: a folder `humming/` deep in the tree is no package `humming`)
    top = frozenset(p.removesuffix(".py") for r in results
                    for p in [r.relpath.split("/")[1 if r.relpath.startswith("src/") else 0]])
    # (the run's module paths, for the folders a script's own imports name: `_own_packages`)
    stems = frozenset(p for r in results if r.relpath.endswith(".py")
                      for p in (r.relpath[:-3], r.relpath.rsplit("/", 1)[0] if "/" in r.relpath else ""))
    for i in candidates:
        data = text_of(i)
        exits = bool(data) and bool(re.search(rb"\b(ImportError|ModuleNotFoundError)\b", data)) \
            and bool(re.search(rb"\b(exit|quit|SystemExit)\b", data))
        if not data or not (exits or re.search(rb"^if \w+\(\):", data, re.M)):
            continue
        tree = astcache.parse(data)
        if tree is None:
            continue
        probes = probes or Probes(results, text_of)
        own = _own_packages(results[i].relpath, top, stems)
        try:
            found = _guard(tree, own, probes, results[i].relpath, data.decode("utf-8", "replace")) if exits else None
            blocks = _probed_blocks(tree, top, probes, results[i].relpath)
        except RecursionError:
            continue
        if found is None and not blocks:
            continue
        first, why = found if found is not None else (None, None)

        def reason_of(line: int, first=first, why=why, blocks=blocks) -> str | None:
            if first is not None and line >= first:
                return why
            return next((r for a, b, r in blocks if a <= line <= b), None)

        changed, findings = False, []
        for finding in results[i].findings:
            pieces = lower_pieces(finding, reason_of) if is_open(finding) else None
            if pieces is None:
                findings.append(finding)
                continue
            reasons = [r for r in (why, *(b[2] for b in blocks)) if r]
            lowered = [p for p in pieces if p.severity == "info" and any(r in p.message for r in reasons)]
            findings.extend(merge_per_file(lowered) + [p for p in pieces if p not in lowered])
            changed = True
        if changed:
            out[i] = dataclasses.replace(results[i], findings=sorted(findings))
    return out
