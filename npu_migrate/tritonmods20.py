"""Triton and CuTe-DSL module shapes that the code keeps off an NPU host or another finding covers
(issue #16, round-20 audits BD#14, BD#22, BE#37). Three reviews:

* **Triton kernels launched behind a selector imported from a sibling module** (NPU910,
  `review_imported_selectors`, whole run, from runplan.whole_run_passes before moot.to_scopes).
  tritonguards.review credits a kernel launched only behind a private selector of its own file
  whose device check the migration kept (NPU110), and a kernel made by a wrapper of its own file
  (`def _jit(fn): return triton.jit(fn) if ... else fn`). A sibling module may import both:

      from .chunked_logprob import _jit, _use_triton      # `_use_triton`: `device.type in ("cuda", "xpu")`
      if is_triton_available():
          import triton
      @_jit
      def _stats_kernel(...): ...
      fold = _stats_kernel[(n,)] if _use_triton(device) else _stats_tile

  Here the names are followed to the run module that defines them: a function there that calls
  `triton.jit` is a kernel wrapper, and a private function whose body holds a device check the
  migration kept (an NPU110 of that file) is a selector. The file is then read as tritonguards
  reads a file with its own selector (every launch behind it, a torch fallback beside it, the
  Triton import guarded): the finding becomes info "Triton kernels launched only on CUDA tensors"
  (moot.AS_WRITTEN: a named scope), naming the selector's file and line. A selector the migration
  rewrites (its device test widened to the NPU), a kernel launched anywhere else, or an unguarded
  `import triton` keeps the error.
* **CuTe-DSL code behind a module-level probe of its package** (NPU911, `review_probed_modules`,
  per file, from run.py after guards15.review). Every place of the finding lies in the body of a
  module-level `if` whose test has a conjunct, not negated, that calls a function of the same file
  (followed through argument-less calls of the file, a few steps) which calls `find_spec` (or a
  `has_module`-style probe) and reads a string naming the package the finding imports (`"cutlass"`,
  directly or through a module-level table it iterates):

      def _cutedsl_runtime_available():
          return len(_missing_cutedsl_runtime_packages()) == 0   # find_spec over {"cutlass": ...}
      if _cutedsl_runtime_available():
          import cutlass

  Where the package is missing, as on an NPU host, the module imports cleanly and skips the code:
  the finding becomes info naming the probe. Not a named scope (as importers19.py): a host may
  still install the package (the nvidia-cutlass-dsl wheel installs without a GPU), and then the
  code runs there. A negated probe, a probe of another package, a probe in another file or an
  import outside the `if` keeps the error.

* **Triton device functions only a reported kernel module calls** (NPU910, `fold_device_helpers`,
  whole run, after moot.to_scopes; round-20 audit BD#14). A module defining
  `@triton.jit` functions (barriers, thread ids in inline PTX) reported as imported unguarded,
  whose every library import site (tests aside) is a module-level `from M import f, g` in a file
  that reports its own unguarded Triton import (an error) and reads the names only inside its own
  Triton kernels: the helpers run only where those kernels run, and porting them is the same
  piece of work. The helper's finding is folded into the importer's, whose message names the
  module, the line of its finding, the functions and, where the helper holds inline assembly, that
  no Triton-Ascend runs it. It runs after the named scopes are made: an importer whose finding
  became a scope (platforms.py: the project runs Triton on its own NPU backend) takes no fold, so a
  helper that keeps its error for its own reason (libdevice, PTX) keeps it. A name read outside a
  kernel (a host call, a list, `__all__`), an importer without its own error, another library
  importer, an importer that is folded itself, or a dynamic import by name keeps the finding. (A
  kernel-less helper is redundant14.py's.)

Nothing is dropped: each shape ends as info with its reason, or as a module named in the finding
that covers it.
"""

from __future__ import annotations

import ast
import dataclasses
import re
from typing import Optional

from . import astcache
from .findings import Finding

PROBED_MODULE = ("guarded by the module-level probe `{test}` (line {line}), which looks `{package}` up with "
                 "`{probe}` (line {at}): where the CUDA-only package is missing, as on an NPU host, the module "
                 "imports cleanly and skips this code; a host that installs the package runs it there")
IMPORTED_SELECTOR = "`{name}` from {path}:{line} keeps its device check CUDA"
# a call that looks a package up by name: `importlib.util.find_spec(name)`, `_has_module(name)`
_PROBE_CALL = re.compile(r"(?i)^(find_spec|_?(has|is)_?(module|package)\w*|\w*(module|package)_?(available|installed|exists))$")
_FUNCTIONS = (ast.FunctionDef, ast.AsyncFunctionDef)
_MAX_DEPTH = 3


# ------------------------------------------------------------------ NPU910: an imported selector
def _open_triton(finding: Finding) -> bool:
    from .tritonguards import UNGUARDED

    return (finding.code == "NPU910" and not finding.fixable and finding.cell is None
            and finding.severity != "info" and UNGUARDED not in finding.message)


def _imported_functions(result, tree: ast.Module, modules, stems: dict[str, int]) -> dict[str, tuple[int, ast.AST]]:
    """{local name: (result index, the module-level function it names)} of the file's module-level
    `from M import f` where M is a module of the run."""
    from .modpaths import resolve_relative

    found = {}
    for statement in tree.body:
        if not isinstance(statement, ast.ImportFrom):
            continue
        if statement.level:
            j = stems.get(resolve_relative(result.relpath, statement.level, statement.module or ""))
        else:
            j = modules.by_name.get(statement.module or "")
        if j is None:
            continue
        source = modules.tree(j)
        if source is None:
            continue
        functions = {n.name: n for n in source.body if isinstance(n, _FUNCTIONS)}
        for alias in statement.names:
            if alias.name in functions:
                found[alias.asname or alias.name] = (j, functions[alias.name])
    return found


def _makes_kernels(function: ast.AST) -> bool:
    from .tritonguards import KERNEL_DECORATOR as _KERNEL_DECORATOR

    for node in ast.walk(function):
        if isinstance(node, ast.Call):
            name = astcache.dotted(node.func, strict=True) or ""
            if "triton" in name.split(".")[0] and _KERNEL_DECORATOR.search(name):
                return True
    return False


def _keeps_cuda(function: ast.AST, findings: list[Finding]) -> bool:
    """A private function whose body holds a device check the migration kept (NPU110) and no
    rewrite (a device test widened to the NPU)."""
    if not function.name.startswith("_"):
        return False
    first, last = function.lineno, function.end_lineno or function.lineno
    kept = any(f.code == "NPU110" and not f.fixable and f.cell is None and first <= f.line <= last for f in findings)
    rewritten = any(f.fixable and f.cell is None and first <= f.line <= last for f in findings)
    return kept and not rewritten


def review_imported_selectors(results: list, paths: dict) -> list:
    """The NPU910 of files whose kernels launch only behind a selector imported from a run module
    (see the module's doc), as info with tritonguards' KERNELS_ON_CUDA reason."""
    from .modpaths import RunModules, RunTexts
    from .tritonguards import KernelModule as _Module, kernels_on_cuda as _kernels_on_cuda

    candidates = [i for i, r in enumerate(results) if r.relpath.endswith(".py")
                  and any(_open_triton(f) for f in r.findings)]
    if not candidates:
        return results
    text_of = RunTexts(results, paths)
    modules = RunModules(results, text_of)
    stems = {r.relpath[:-3]: i for i, r in enumerate(results) if r.relpath.endswith(".py")}
    stems.update({r.relpath[:-12]: i for i, r in enumerate(results) if r.relpath.endswith("/__init__.py")})
    out = list(results)
    for i in candidates:
        data = text_of(i)
        if not data or b"import" not in data:
            continue
        tree = modules.tree(i)
        if tree is None:
            continue
        try:
            imported = _imported_functions(results[i], tree, modules, stems)
            wrappers = {name for name, (_j, f) in imported.items() if _makes_kernels(f)}
            selectors = {name: (j, f) for name, (j, f) in imported.items() if _keeps_cuda(f, results[j].findings)}
            if not selectors:
                continue

            class _Imported(_Module):
                def _wrappers(self) -> set[str]:
                    return super()._wrappers() | wrappers

                def _selector(self, node: ast.AST) -> bool:
                    if super()._selector(node):
                        return True
                    call = node.left if isinstance(node, ast.Compare) else node
                    return (isinstance(call, ast.Call) and isinstance(call.func, ast.Name)
                            and call.func.id in selectors)

            module = _Imported(tree, results[i].findings)
            origin = "; ".join(IMPORTED_SELECTOR.format(name=name, path=results[j].relpath, line=f.lineno)
                               for name, (j, f) in sorted(selectors.items()))
            findings = _kernels_on_cuda(results[i].findings, tree, module=module, origin=f"; {origin}")
        except RecursionError:
            continue
        if findings != results[i].findings:
            out[i] = dataclasses.replace(results[i], findings=findings)
    return out


# ------------------------------------------------------------------ NPU911: a module-level probe
def _packages(finding: Finding, tree: ast.Module) -> set[str]:
    """The top-level packages the finding's places import (`import cutlass.cute` -> cutlass)."""
    lines = {finding.line, *(line for line, _c, _s in finding.also)}
    found = set()
    for node in astcache.walk(tree):
        if isinstance(node, ast.Import) and node.lineno in lines:
            found.update(a.name.split(".")[0] for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.lineno in lines and not node.level and node.module:
            found.add(node.module.split(".")[0])
    return found


def _probe(tree: ast.Module, call: ast.AST, package: str) -> Optional[tuple[str, int]]:
    """(the probe call's name, its line) when `call` is an argument-less call of a function of the
    file that (through argument-less calls of the file) looks a package up by name and reads a
    string naming `package`; else None."""
    if not (isinstance(call, ast.Call) and isinstance(call.func, ast.Name) and not call.args and not call.keywords):
        return None
    functions = {n.name: n for n in tree.body if isinstance(n, _FUNCTIONS)}
    tables: dict[str, ast.AST] = {}
    for statement in tree.body:
        if isinstance(statement, (ast.Assign, ast.AnnAssign)) and statement.value is not None:
            for target in (statement.targets if isinstance(statement, ast.Assign) else [statement.target]):
                if isinstance(target, ast.Name):
                    tables[target.id] = statement.value
    seen, todo, probe, named = set(), [call.func.id], None, False
    depth = 0
    while todo and depth <= _MAX_DEPTH:
        following = []
        for name in todo:
            function = functions.get(name)
            if function is None or name in seen:
                continue
            seen.add(name)
            for node in ast.walk(function):
                if isinstance(node, ast.Call):
                    called = astcache.dotted(node.func) or ""
                    if _PROBE_CALL.match(called.rsplit(".", 1)[-1]) and probe is None:
                        probe = (called, node.lineno)
                    if isinstance(node.func, ast.Name) and node.func.id in functions and not node.args:
                        following.append(node.func.id)
                strings = [node] if isinstance(node, ast.Constant) else (
                    list(ast.walk(tables[node.id])) if isinstance(node, ast.Name) and node.id in tables else [])
                named = named or any(isinstance(s, ast.Constant) and isinstance(s.value, str)
                                     and s.value.split(".")[0] == package for s in strings)
        todo, depth = following, depth + 1
    return probe if probe is not None and named else None


def review_probed_modules(findings: list[Finding], text: str) -> list[Finding]:
    """The file's NPU911 whose places all lie under a module-level `if` on a same-file probe of
    their package, as info naming it (see the module's doc)."""
    targets = [f for f in findings if f.code == "NPU911" and not f.fixable and f.cell is None
               and f.severity != "info"]
    if not targets or "find_spec" not in text and "_module" not in text and "package" not in text:
        return findings
    tree = astcache.parse(text.encode("utf-8", "surrogatepass"))
    if tree is None:
        return findings
    from .tritonguards import operands

    guards = [s for s in tree.body if isinstance(s, ast.If) and s.body]
    out = []
    for finding in findings:
        if finding not in targets:
            out.append(finding)
            continue
        lines = [finding.line, *(line for line, _c, _s in finding.also)]
        packages = _packages(finding, tree)
        guard = next((g for g in guards if all(
            g.body[0].lineno <= line <= (g.body[-1].end_lineno or g.body[-1].lineno) for line in lines)), None)
        found = None
        if guard is not None and len(packages) == 1:
            package = next(iter(packages))
            try:
                found = next(((c, p) for c in operands(guard.test, ast.And)
                              if (p := _probe(tree, c, package)) is not None), None)
            except RecursionError:
                found = None
        if found is None:
            out.append(finding)
            continue
        conjunct, (probe, at) = found
        reason = PROBED_MODULE.format(test=f"{conjunct.func.id}()", line=guard.lineno, package=package,
                                      probe=probe, at=at)
        out.append(dataclasses.replace(finding, severity="info", message=f"{finding.message} ({reason})"))
    return out


# ------------------------------------------------------------------ NPU910: device helpers of a reported kernel
DEVICE_HELPERS = ("also the Triton device functions of {path} (its NPU910 at line {line}), which this file "
                  "imports unguarded and calls only inside its own kernels: {names}; they run only where these "
                  "kernels run{asm}")
_ASM = ("; their inline assembly (`inline_asm_elementwise`/`asm`, line {line}) runs under no Triton-Ascend "
        "either: port them with these kernels")
_INLINE_ASM = re.compile(rb"inline_asm(?:_elementwise)?\s*\(")


def _unguarded_error(finding: Finding) -> bool:
    from .tritonguards import UNGUARDED

    return (finding.code == "NPU910" and not finding.fixable and finding.cell is None
            and finding.severity == "error" and UNGUARDED in finding.message)


def _kernel_bodies(tree: ast.Module) -> list[ast.AST]:
    from .tritonguards import KERNEL_DECORATOR as _KERNEL_DECORATOR

    found = []
    for node in astcache.walk(tree):
        if isinstance(node, _FUNCTIONS) and any(
                "triton" in (astcache.dotted(d.func if isinstance(d, ast.Call) else d, strict=True) or "").split(".")[0]
                and _KERNEL_DECORATOR.search(astcache.dotted(d.func if isinstance(d, ast.Call) else d, strict=True) or "")
                for d in node.decorator_list):
            found.append(node)
    return found


def _only_in_kernels(tree: ast.Module, statement: ast.ImportFrom, only=None) -> list[str] | None:
    """The names `statement` (a module-level `from M import a, b`) binds when every read of each
    lies in the body of one of the file's Triton kernels (and no string of the file names one:
    `__all__`); else None. `only` (a set of names of M): the names checked, the others free; []
    when the statement binds none of them."""
    if statement not in tree.body or any(a.name == "*" for a in statement.names):
        return None
    names = [a.asname or a.name for a in statement.names if only is None or a.name in only]
    if only is not None and not names:
        return []
    spans = [(k.lineno, k.end_lineno or k.lineno) for k in _kernel_bodies(tree)]
    used = False
    for node in astcache.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value in names:
            return None
        if isinstance(node, ast.Name) and node.id in names:
            if not isinstance(node.ctx, ast.Load) or not any(a <= node.lineno <= b for a, b in spans):
                return None
            used = True
        elif isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in names:
            return None
    return names if used else None


def fold_device_helpers(results: list, paths: dict, is_open=None, helper_ok=None, kernels_of=None) -> list:
    """A module of Triton device functions whose every library import site is a module-level
    `from M import f` in a file that reports its own unguarded Triton import, reading the names
    only inside its kernels: its NPU910 folded into that file's (round-20 audit BD#14).
    `is_open` (a finding -> bool): the NPU910 findings folded and folded into (default: the
    unguarded-import errors); `helper_ok` (the helper's text -> bool): a further test of the helper
    module (tritonguards23.fold_kernel_helpers: it launches none of its functions); `kernels_of` (the
    helper's text -> its kernels' names): only those names are checked at an import site, a site
    binding none of them is no site (tritonhelpers34.py: a helper module with host functions too)."""
    is_open = is_open or _unguarded_error
    from .importgates import is_test
    from .modpaths import module_names
    from .tritonguards import KERNEL_DEF as _KERNEL_DEF, named_in_a_string, run_imports

    candidates = [i for i, r in enumerate(results) if r.relpath.endswith(".py") and not is_test(r.relpath)
                  and not r.relpath.endswith("__init__.py") and any(is_open(f) for f in r.findings)]
    if not candidates:
        return results
    python = [i for i, r in enumerate(results) if r.relpath.endswith(".py")]
    imports, text_of = run_imports(results, python, paths or {})
    trees: dict[int, Optional[ast.Module]] = {}

    def tree_of(j: int) -> Optional[ast.Module]:
        if j not in trees:
            data = text_of(j)
            trees[j] = astcache.parse(data) if data is not None else None
        return trees[j]

    out = list(results)
    plans: dict[int, list] = {}
    for i in candidates:
        data = text_of(i) or b""
        if not _KERNEL_DEF.search(data) or (helper_ok is not None and not helper_ok(data)):
            continue  # (a kernel-less helper: redundant14.py)
        relpath = results[i].relpath
        names, stem = set(module_names(relpath)), relpath[:-3]
        sites = sorted({(j, line) for j in python if j != i for name, line, relative in imports[j]
                        if (relative and name == stem) or (not relative and name in names)})
        sites = [(j, line) for j, line in sites if not is_test(results[j].relpath)]
        if not sites or named_in_a_string(results, i, text_of, python):
            continue
        plan = []
        only = kernels_of(data) if kernels_of is not None else None
        for j, line in sites:
            tree = tree_of(j)
            own = next((k for k, f in enumerate(out[j].findings) if is_open(f)), None)
            statements = [s for s in (tree.body if tree is not None else ())
                          if isinstance(s, ast.ImportFrom) and s.lineno <= line <= (s.end_lineno or s.lineno)]
            if only is not None and len(statements) == 1 and _only_in_kernels(tree, statements[0], only) == []:
                continue  # (a site importing only the helper's host functions)
            used = _only_in_kernels(tree, statements[0], only) if own is not None and len(statements) == 1 else None
            if used is None:
                break
            plan.append((j, own, used))
        else:
            if plan:
                plans[i] = plan
    # (a module folded into one that is folded itself would leave no finding naming it: not folded)
    for i, plan in plans.items():
        if any(j in plans for j, _own, _used in plan):
            continue
        data = text_of(i) or b""
        relpath = results[i].relpath
        mine = [f for f in out[i].findings if is_open(f)]
        match = _INLINE_ASM.search(data)
        asm = _ASM.format(line=data[:match.start()].count(b"\n") + 1) if match else ""
        for j, own, used in plan:
            note = DEVICE_HELPERS.format(path=relpath, line=mine[0].line, asm=asm,
                                         names=", ".join(f"`{n}`" for n in used))
            findings = list(out[j].findings)
            findings[own] = dataclasses.replace(findings[own], message=f"{findings[own].message} ({note})")
            out[j] = dataclasses.replace(out[j], findings=findings)
        out[i] = dataclasses.replace(out[i], findings=[f for f in out[i].findings if not is_open(f)])
    return out
