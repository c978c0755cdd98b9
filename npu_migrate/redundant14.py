"""Findings that restate another finding of the run (issue #16, round-13 audits AH#24, AH#5).

* **After the function's own CUDA build** (`fold_after_own_build`, per file). A report-only error
  in a function body that comes after a simple statement of an enclosing block of the same
  function holding a CUDA build or CUDA-only import the run reports as failing (NPU911, an error,
  outside any `try`): `torch.utils.cpp_extension.load_inline(..., with_cuda=True)` then
  `CUDAPluggableAllocator(f"{out_dir}/{name}.so", ...)` that only consumes the built .so (sglang's
  `get_nccl_mem_pool`). Where the build runs on an NPU host it raises, so the later statement is
  reached only after it: the finding is folded into the build's finding (its "also at lines ..."
  with the reason), at the same severity or a lower one. A module-level import place merged into
  the folded finding (`from torch.cuda.memory import CUDAPluggableAllocator`) moves with it when
  every read of the names it binds is a moved place. secondary.fold_after_failing_calls does the
  same for the callers of such a function; this step takes the function itself. A finding before
  the build, in the build's own statement, after the block that holds it (the build sits in an
  `if`), or with the build inside a `try`, stays.
* **A Triton helper its importers' findings report** (`review_triton_helpers`, whole run). An info
  NPU910 on a module without kernels of its own (no `@triton.jit` / `@triton.autotune`: an
  autotuner class, helpers) whose every import site in the run (tests aside) comes after its
  importer's own Triton import in the same block (`import triton` at the top of kernels.py, then
  `from . import custom_autotune`; `if TRITON_AVAILABLE: import triton ... from .triton_utils
  import custom_autotune`), that importer carrying an NPU910 finding of its own: the helper runs
  only where those kernels run and those findings report them. A named scope (moot.AS_WRITTEN)
  naming the importers' findings. An importer without its own Triton finding, an import site
  before the importer's Triton import or in another block, a module with kernels, or one named in a
  string (a dynamic import) keeps the finding.
"""

from __future__ import annotations

import ast
import dataclasses
import re

from .findings import Finding

FAILING = ("NPU911",)  # a CUDA build or CUDA-only compiled package: raises on an NPU host where it runs
AFTER_OWN_BUILD = ("reached only after this function's CUDA build or CUDA-only import, reported here, which fails "
                   "on an NPU host")
# (moot.AS_WRITTEN holds this phrase)
HELPER_OF_REPORTED = "a Triton helper without kernels, imported only after its importers' own Triton imports"
# (a kernel of the module's own; the harness clause of kernels.py / testscopes.lower_triton_harness,
# which a file that subclasses `triton.KernelInterface` does not deserve)
_KERNEL_DEF = re.compile(rb"^[ \t]*@[ \t]*(?:triton\.)?(?:jit|autotune|heuristics)\b", re.MULTILINE)
_HARNESS = " (only `triton.testing`, a benchmark harness)"
_FUNCTIONS = (ast.FunctionDef, ast.AsyncFunctionDef)
_COMPOUND = (ast.If, ast.For, ast.AsyncFor, ast.While, ast.With, ast.AsyncWith, ast.Try, *_FUNCTIONS, ast.ClassDef,
             *((ast.Match,) if hasattr(ast, "Match") else ()), *((ast.TryStar,) if hasattr(ast, "TryStar") else ()))
_DEFERRED = (ast.Lambda, ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp, ast.IfExp, ast.BoolOp)


def _inside(node: ast.AST, line: int) -> bool:
    return node.lineno <= line <= (node.end_lineno or node.lineno)


# ----------------------------------------------------------------------------- after the function's own build
def _runs_at(stmt: ast.stmt, line: int) -> bool:
    """Whether a simple statement runs what lies at `line` whenever it runs (not deferred in a
    lambda or a comprehension, not behind a conditional expression or a boolean operator)."""
    return not any(isinstance(n, _DEFERRED) and _inside(n, line) for n in ast.walk(stmt))


def fold_after_own_build(findings: list[Finding], tree: ast.Module) -> list[Finding]:
    """Report-only errors after a failing CUDA build in the same function (see the module's doc)."""
    from .folding import Fold, ours, places_of

    builds = [f for f in findings if f.code in FAILING and f.severity == "error" and ours(f)]
    if not builds or not any(ours(f) and f.severity == "error" and f.code not in FAILING for f in findings):
        return findings
    from . import astcache

    functions = [n for n in astcache.walk(tree) if isinstance(n, _FUNCTIONS) and any(_inside(n, b.line) for b in builds)]
    if not functions:
        return findings
    # the statements that run a failing build: (function, block, index of the statement, finding)
    anchors = []
    for function in functions:
        tries = [t for t in ast.walk(function) if isinstance(t, ast.Try)]
        inner = [n for n in ast.walk(function) if isinstance(n, (*_FUNCTIONS, ast.ClassDef)) and n is not function]
        for build in builds:
            if not _inside(function, build.line) or any(_inside(t, build.line) for t in tries) \
                    or any(_inside(n, build.line) for n in inner):
                continue
            for node in ast.walk(function):
                for field in ("body", "orelse", "finalbody"):
                    body = getattr(node, field, None)
                    if not (isinstance(body, list) and body and isinstance(body[0], ast.stmt)):
                        continue
                    for k, stmt in enumerate(body):
                        if not isinstance(stmt, _COMPOUND) and _inside(stmt, build.line) and _runs_at(stmt, build.line):
                            anchors.append((function, body, k, build))
    if not anchors:
        return findings
    fold = Fold(findings)
    fold.targets.update(id(a[3]) for a in anchors)
    moved_lines: dict[int, set[int]] = {}
    targets: dict[int, Finding] = {}
    for finding in findings:
        if not ours(finding) or finding.severity != "error" or finding.code in FAILING:
            continue
        for place in places_of(finding):
            line = place[0]
            target = next((build for function, body, k, build in anchors
                           if _inside(function, line) and any(_inside(s, line) for s in body[k + 1:])), None)
            if target is not None and fold.movable(finding, target):
                fold.move(finding, [place], target)
                moved_lines.setdefault(id(finding), set()).add(line)
                targets.setdefault(id(finding), target)
    if not fold.moved:
        return findings
    # a module-level import merged into a moved finding whose names only the moved places read
    for finding in findings:
        lines = moved_lines.get(id(finding))
        if not lines:
            continue
        target = targets[id(finding)]
        for place in places_of(finding):
            if place[0] in lines:
                continue
            stmt = next((s for s in tree.body if isinstance(s, (ast.Import, ast.ImportFrom)) and s.lineno == place[0]), None)
            if stmt is None:
                continue
            names = {(a.asname or a.name).split(".")[0] for a in stmt.names if a.name != "*"}
            reads = [n.lineno for n in astcache.walk(tree) if isinstance(n, ast.Name) and n.id in names]
            if names and reads and all(r in lines for r in reads):
                fold.move(finding, [place], target)
    return sorted(fold.result(name_them=AFTER_OWN_BUILD))


# ----------------------------------------------------------------------------- a Triton helper of reported importers
def _after_triton_import(tree: ast.Module, line: int) -> bool:
    """Whether the import statement at `line` follows, in the same block, an import of Triton."""
    from . import astcache
    from .tritonguards import is_triton

    for node in astcache.walk(tree):
        for field in ("body", "orelse", "finalbody"):
            body = getattr(node, field, None)
            if not (isinstance(body, list) and body and isinstance(body[0], ast.stmt)):
                continue
            for k, stmt in enumerate(body):
                if isinstance(stmt, (ast.Import, ast.ImportFrom)) and stmt.lineno == line:
                    return any(
                        (isinstance(s, ast.Import) and any(is_triton(a.name) for a in s.names))
                        or (isinstance(s, ast.ImportFrom) and not s.level and is_triton(s.module or ""))
                        for s in body[:k])
    return False


def _open(finding: Finding) -> bool:
    from . import moot

    return (finding.code == "NPU910" and not finding.fixable and finding.cell is None
            and finding.severity == "info" and not moot.is_moot(finding))


def review_triton_helpers(results: list, paths: dict) -> list:
    """Info NPU910 on a kernel-less Triton helper whose importers report their own Triton import
    (see the module's doc)."""
    candidates = [i for i, r in enumerate(results) if r.relpath.endswith(".py")
                  and not r.relpath.endswith("__init__.py") and r.findings
                  and any(_open(f) for f in r.findings)
                  and all(_open(f) for f in r.findings if f.code == "NPU910")]
    if not candidates:
        return results
    from . import astcache
    from .importgates import is_test
    from .modpaths import module_names
    from .tritonguards import named_in_a_string, run_imports

    python = [i for i, r in enumerate(results) if r.relpath.endswith(".py")]
    imports, text_of = run_imports(results, python, paths or {})
    own = {j: next((f for f in results[j].findings if f.code == "NPU910" and not f.fixable and f.cell is None), None)
           for j in python}
    trees: dict[int, ast.Module | None] = {}
    out = list(results)
    for i in candidates:
        data = text_of(i) or b""
        if _KERNEL_DEF.search(data):
            continue
        relpath = results[i].relpath
        names, stem = set(module_names(relpath)), relpath[:-3]
        sites = sorted({(j, line) for j in python if j != i for name, line, relative in imports[j]
                        if (relative and name == stem) or (not relative and name in names)})
        if not is_test(relpath):
            sites = [(j, line) for j, line in sites if not is_test(results[j].relpath)]
        if not sites or any(own[j] is None for j, _line in sites) or named_in_a_string(results, i, text_of, python):
            continue
        ok = True
        for j, line in sites:
            if j not in trees:
                raw = text_of(j)
                trees[j] = astcache.parse(raw) if raw is not None else None
            if trees[j] is None or not _after_triton_import(trees[j], line):
                ok = False
                break
        if not ok:
            continue
        shown = [f"{results[j].relpath}:{line} (reported at {results[j].relpath}:{own[j].line})" for j, line in sites]
        listed = "; ".join(shown[:2]) + (f"; and {len(shown) - 2} more" if len(shown) > 2 else "")
        why = f"{HELPER_OF_REPORTED}: {listed}"
        from .tritonguards import UNGUARDED

        findings = [dataclasses.replace(f, message=f"{f.message.replace(_HARNESS, '').replace(UNGUARDED, '')} ({why})")
                    if _open(f) else f for f in results[i].findings]
        out[i] = dataclasses.replace(results[i], findings=findings)
    return out

