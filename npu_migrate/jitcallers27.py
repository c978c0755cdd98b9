"""JIT-compiled CUDA sources whose loaders only tests, benchmarks or failing importers reach (issue
#16, precision wave 27, helper h125; round audits BM#16, BP#15).

jitreach23.py scopes the NPU912 error of a `.cu`/`.cuh` that JIT loaders compile (`load_jit("x",
cuda_files=["x.cuh"])`) when every library use of each loader is code an NPU host never runs.
Three shapes stopped it one step short; they are decided here and called from jitreach23.review:

* **An importer that fails first** (`fails_first`, BP#15). A library module imports the loader
  (`from pkg.jit_kernel.quant import quant_fp8`, at module level or in a function) after its own
  top-level, unguarded import of a CUDA-only package (sweep.toml `module_codes` NPU911, not inside
  an `if`, a `try` or a function) that the run reports there as an NPU911 error:

      from cudapkg import silu_and_mul                     # NPU911 error: fails first on an NPU host
      from pkg.jit_kernel.quant import quant_fp8          # never reached there

  Python stops at the earlier import where the package is missing, so nothing of that module,
  the loader's uses included, runs on an NPU host: the import is a dead use of the loader, named
  with the failing line. A CUDA-only import after the loader's (at module level), one under an
  `if`/`try`, one the run does not report as an error (lowered, or a package with an NPU build):
  not such a use.

* **An import of the loader that never runs** (`gated_import`, BP#15). `if _is_cuda: from
  pkg.jit_kernel.quant import quant_fp8` (a gate false on an NPU host, as callgates21 reads it),
  or the import inside a function only such code calls: whatever later reads `quant_fp8` there
  (a function defined in the `else:` of another platform test) meets a NameError, never the
  loader, so the statement is a dead use as a whole; its reads are not asked. An import an NPU
  host may run: its reads are followed as before.

  Where a test or benchmark of the run imports a loader that only these two readings found dead,
  the source keeps its finding as it was (`tested_late`): the tests compile the kernel on an NPU
  host, and jitfolds23 folds their findings into that NPU912 (one finding); a scope would release
  them as findings of their own (round 23's BP#15 shape: two FP8 errors for one).

* **A loader no library module imports** (`unimported_note`, BM#16; owner's policies P2 and P3
  of wave 27, replacing session 34's "the error stands"). A loader only tests or benchmarks import,
  or no file of the run imports at all, is public API nothing in the package reaches on an NPU host:
  its sources' NPU912 is **info**, not a scope (a user may still call it there and meet the CUDA
  compile), and the message says who imports each such loader: "reached on an NPU host only from
  tests/benchmarks (file:line, ...)" or "no file of the run imports it", with the other loaders'
  dead uses as jitreach23 found them. This holds for a loader that compiles inside a function (a
  helper a user calls); a module that compiles its sources at import (`_C = load(name,
  sources=["k.cu"])` at module level) is the project's kernel module itself, not a helper, and
  keeps its error (session 34's small projects, tests/test_findings_precision.py). Kept as they are: a loader a library module imports and
  uses where an NPU host runs it (jitreach23 keeps the error), a re-export, a loader named in a
  string.
"""

from __future__ import annotations

import ast
from typing import Optional

USER_ONLY = ("reached on an NPU host only by a user's own call of a JIT loader the library never imports "
             "(public API: a caller there meets the CUDA compile, so port the kernel if users need it)")
_SHOWN = 3


def fails_first(result, tree: ast.Module, statement: ast.AST, parents: dict, packages: tuple) -> Optional[str]:
    """Why module `result` (parsed `tree`) never reaches the import `statement` of a loader on an
    NPU host: an earlier top-level unguarded import of a CUDA-only package that the run reports
    there as an NPU911 error (module doc, first shape), or None."""
    from .localcover23 import statement_packages

    top = statement
    while parents.get(id(top)) is not None and not isinstance(parents.get(id(top)), ast.Module):
        top = parents[id(top)]
    deferred = top is not statement and isinstance(top, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
    if top is not statement and not deferred:
        return None  # (under an `if`/`try` at module level: the earlier imports are asked as they stand)
    errors = {line for f in result.findings
              if f.code == "NPU911" and f.severity == "error" and not f.fixable and f.cell is None
              for line in (f.line, *(a[0] for a in f.also))}
    for node in tree.body:
        if not deferred and node.lineno >= statement.lineno:
            break
        found = statement_packages(node, packages)
        if found and node.lineno in errors and node is not top:
            shown = " ".join(ast.unparse(node).split())[:70]
            return (f"`{result.relpath}` fails to import first on an NPU host, at line {node.lineno} "
                    f"(`{shown}`, a CUDA-only package imported unguarded at module level, reported there)")
    return None


def gated_import(why: Optional[str]) -> Optional[str]:
    """The reason an import statement of the loader never runs on an NPU host (jitreach23's
    reading of the statement itself: a gate false there, a function only such code calls), or
    None: none of the names it binds then comes from the loader, whatever reads them."""
    return f"the import itself never runs on an NPU host: {why}" if why else None


def tested_late(results: list, paths: dict, late: list) -> bool:
    """Whether a test or benchmark of the run imports one of the loaders `late` that only the two
    readings above found dead: then the source keeps its finding as it was (module doc)."""
    return any(_importers(results, paths, j)[0] for j in late)


def _importers(results: list, paths: dict, loader: int) -> tuple[list[str], list[str]]:
    """(`path:line` of the imports of module `loader` in tests, benchmarks and conftest, those in
    library modules, which read none of its names), over the whole run."""
    from .firstfail22 import RunIndex
    from .jitgated20 import sources_and_library

    library = set(sources_and_library(results)[1])
    side, lib = [], []
    for k, line in RunIndex(results, paths).sites(loader):
        (lib if k in library else side).append(f"{results[k].relpath}:{line}")
    return side, lib


def _shown(sites: list[str]) -> str:
    more = f", and {len(sites) - _SHOWN} more" if len(sites) > _SHOWN else ""
    return ", ".join(sites[:_SHOWN]) + more


def unimported_note(results: list, paths: dict, verdicts: dict, unimported: str, text_of,
                    compiles_at_import) -> Optional[str]:
    """The info note of a source some of whose loaders no library module imports (module doc,
    second shape): each such loader with who imports it, the others' dead uses; None when a
    loader has no verdict, or when one compiles its sources at import (`compiles_at_import(text)`,
    jitreach23.py: the project's kernel module itself, which keeps its error)."""
    if any(v is None for v in verdicts.values()):
        return None
    parts = []
    for j, why in verdicts.items():
        if not why.startswith(unimported):
            parts.append(why)
            continue
        if compiles_at_import(text_of(j)):
            return None
        relpath = results[j].relpath
        side, lib = _importers(results, paths, j)
        if lib:
            parts.append(f"`{relpath}` is imported by library code that reads none of its names ({_shown(lib)})")
        if side:
            parts.append(f"`{relpath}` is reached on an NPU host only from tests/benchmarks ({_shown(side)})")
        if not side and not lib:
            parts.append(f"no file of the run imports `{relpath}`")
    return f"{USER_ONLY}: {'; '.join(dict.fromkeys(parts))}"

