"""Optional CUDA extensions and Triton modules behind guards read across files (issue #16).

Whole-program passes, run after tritonguards.review_importers and optionalguards.review
(runplan.py). Each lowers an error to info with its reason; nothing is dropped:

* **An import under a flag another module's probe sets** (`review_flag_imports`). `if
  MARLIN_AVAILABLE: import autogptq_marlin_cuda`, where `MARLIN_AVAILABLE` is imported from a
  module of the run that sets it in an import probe (`try: import autogptq_marlin_cuda;
  MARLIN_AVAILABLE = True except Exception: MARLIN_AVAILABLE = False`). Where the extension is
  missing, as on an NPU host, the flag is False and the import is skipped: the same as a probe in
  the file itself (probes.py), so info (NPU911, NPU914, NPU915, NPU502), asking to review the
  code that uses the names (it runs only where the flag holds when the code tests it). An import
  at module level outside such an `if`, or a flag the project sets any other way, keeps its error.
* **A Triton module guarded in the file itself** (`review_guarded_triton_modules`). `try: import
  triton ... HAS_TRITON = True except ImportError: HAS_TRITON = False`, then every kernel and every
  other use of the Triton names under `if HAS_TRITON:`. The module imports without Triton; when no
  module of the run imports it, or every importer imports it behind a Triton-availability test or
  in `try`, its NPU910 is the info its siblings get from tritonguards.review_importers (ColossalAI's
  `kernel/triton/qkv_matmul_kernel.py`): Triton-Ascend installs `triton` on an NPU host, where the
  kernels then run, so a finding that asks to verify them, not a scope. A use of a Triton name
  outside the gate, or an importer that imports the module unguarded, keeps the error.
* **A CUDA extension only loaded behind a CUDA test** (`review_gated_extensions`). A Python module
  that names the `.cu` files of its folder as the sources of an extension it builds (`sources =
  ["unpack.cu", "awq/v2/gemm_cuda.cu"]`), imported by the modules of the run (tests aside) only in
  an `if` false on an NPU host (`if torch.version.cuda: from .cuda import *`, optimum-quanto): an
  NPU host never builds it. Its `.cu`/`.cuh` files are one named scope (NPU912, "not run on an NPU
  host": a moot.PHRASES reason since wave 20, round-19 AZ#21) on the first `.cu`, naming the
  others, which become named scopes pointing at it; where the module registers
  its kernels for the CUDA dispatch key only (`torch.library.impl("ns::op", ["CUDA"])`), the ops
  keep their other implementations there: a CUDA fast path. A `.cu` of the folder the module does
  not name, or one other importer outside such a gate, keeps the errors.
* **A `setup.py` that builds CUDA only where it finds CUDA** (`review_setup_cuda_probe`). The import
  of `CUDA_HOME`/`CUDAExtension` from `torch.utils.cpp_extension` is a probe when every other place
  of the finding sits in an `if` whose test reads `CUDA_HOME` and the file builds a `CppExtension`
  otherwise (xformers): on an NPU host (no `CUDA_HOME`) it builds the C++ extension. Info; the CUDA
  sources keep their own NPU912 findings.
* **A test helper only skipped test modules import** (`review_skipped_test_helpers`). A module of
  the tests (`test/moe/reference_moe.py`) that every importer imports after a module-level skip
  true on an NPU host (`if not torch.cuda.is_available() or get_device_capability() < (8, 9):
  pytest.skip(..., allow_module_level=True)`, `pytestmark = pytest.mark.skipif(...)`:
  testscopes.cuda_only_test_scopes), directly or through another such helper: pytest stops those
  modules before the import, so the helper is never loaded on an NPU host. Its report-only findings
  become info "in a helper ..." (a moot.PHRASES phrase: a named skipped scope). A module no file
  imports, or one imported by any module that is not such a test, keeps its findings.
* **A Triton package only loaded behind an opt-in** (`review_opt_in_triton_packages`). The modules
  of a package folder (`deepspeed/ops/transformer/inference/triton/`) that import `triton`
  unguarded, when every import of a module of that folder from outside it (tests aside) is lazy,
  inside a function, under an `if` that tests Triton's availability and an opt-in flag
  (`deepspeed.HAS_TRITON and self.config.use_triton`) whose declared default is False
  (`use_triton: bool = False`), or inside a private function only called under such an `if`: the
  package is loaded only where a user opts in with Triton installed. Info "opt-in: verify the
  kernels on Triton-Ascend", not a scope. An import outside such a gate keeps the errors.
* **A test file whose Triton tests all skip without Triton** (`review_triton_skipped_tests`). A test
  module that imports `triton` only in a module-level `try` that catches the failure, and uses the
  names it binds only in tests marked `skipif(not enable_tests)` where `enable_tests` needs a
  Triton-availability flag (`_triton_available = xformers._is_triton_available()`, False in the
  `except`): where Triton is missing, or the project's availability test says no, the tests skip.
  Info asking to verify them where Triton-Ascend makes the flag true, not a scope (the project's
  test may answer yes on an NPU host, an opt-in environment variable for one).
"""

from __future__ import annotations

import ast
import dataclasses
import posixpath
import re
from typing import Optional

from . import astcache, singles21
from .tritonguards import (UNGUARDED, catches_import_errors, import_guard as _import_guard, is_triton as _is_triton,
                           tests_triton as _tests_triton,
                           named_in_a_string, parents, run_imports, source_text)

FLAG_PROBE = ("imported only under `{flag}`, a flag the import probe in {probe} sets: where the package is "
              "missing, as on an NPU host, the flag is False and the import is skipped; review the code that "
              "uses its names")
GUARDED_TRITON_MODULE = ("Triton imported in `try` and every use of it under `{test}`: the module imports where "
                         "Triton is missing and an NPU host without Triton skips these kernels; with Triton-Ascend "
                         "installed they run there: verify them")
_NO_IMPORTER = "no module of the project imports it"
# (moot.PHRASES) no module of the run imports it, by name or in a string, and it is no script: an
# NPU host never loads it (round 14, AK#32: "dead code with nothing for a port to do")
NOTHING_IMPORTS = "a module nothing imports: no module of the project imports it, by name or in a string"

_PACKAGE_CODES = ("NPU911", "NPU914", "NPU915", "NPU502")


def _places(finding) -> list[int]:
    return [finding.line, *(line for line, _column, _text in finding.also)]


def _open(finding, codes) -> bool:
    return finding.code in codes and not finding.fixable and finding.cell is None and finding.severity != "info"


def run_modules(results, python) -> tuple[dict[str, int], dict[str, int]]:
    """({dotted module name: file}, {relpath stem: file}) of the run's Python files."""
    from .modpaths import module_names

    by_name: dict[str, int] = {}
    by_stem: dict[str, int] = {}
    for i in python:
        relpath = results[i].relpath
        for name in module_names(relpath):
            by_name.setdefault(name, i)
        by_stem.setdefault(relpath[:-3].removesuffix("/__init__"), i)
    return by_name, by_stem


def _tree(i, trees, text_of) -> Optional[ast.Module]:
    if i not in trees:
        data = text_of(i)
        trees[i] = astcache.parse(data) if data is not None else None
    return trees[i]


# ------------------------------------------------------------------ (a) flags set by another module's probe
def _assigns(block: list, flag: str, value: bool) -> bool:
    return any(isinstance(s, ast.Assign) and any(isinstance(t, ast.Name) and t.id == flag for t in s.targets)
               and isinstance(s.value, ast.Constant) and s.value.value is value for s in block)


def _probe_sets(tree: ast.Module, flag: str) -> bool:
    """A module-level `try` that imports something and sets `flag = True`, with a handler that
    catches the import's failure and sets `flag = False`."""
    for statement in tree.body:
        if (isinstance(statement, ast.Try) and catches_import_errors(statement)
                and any(isinstance(s, (ast.Import, ast.ImportFrom)) for s in statement.body)
                and _assigns(statement.body, flag, True)
                and any(_assigns(h.body, flag, False) for h in statement.handlers)):
            others = [s for s in astcache.walk(tree) if isinstance(s, ast.Assign) and s not in statement.body
                      and not any(s in h.body for h in statement.handlers)
                      and any(isinstance(t, ast.Name) and t.id == flag for t in s.targets)]
            return not others
    return False


def _flag_sources(tree: ast.Module, relpath: str, by_name, by_stem) -> dict[str, int]:
    """{name: the run's file it is imported from} of the file's module-level `from M import name`."""
    from .modpaths import resolve_relative

    out = {}
    for statement in tree.body:
        if not isinstance(statement, ast.ImportFrom):
            continue
        if statement.level:
            k = by_stem.get(resolve_relative(relpath, statement.level, statement.module or ""))
        else:
            k = by_name.get(statement.module or "")
        if k is None:
            continue
        for alias in statement.names:
            if alias.name != "*":
                out[alias.asname or alias.name] = (k, alias.name)
    return out


def _flag_guard(tree: ast.Module, line: int, parent) -> Optional[str]:
    """The flag name of the module-level `if FLAG:` (or `if FLAG and ...:`) that holds each import
    at `line`, or None."""
    statements = [n for n in astcache.walk(tree) if isinstance(n, (ast.Import, ast.ImportFrom)) and n.lineno == line]
    if not statements:
        return None
    flags = set()
    for node in statements:
        child, current, found = node, parent.get(id(node)), None
        while current is not None and not isinstance(current, ast.Module):
            if isinstance(current, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)):
                return None
            if isinstance(current, ast.If) and child in current.body and found is None:
                tests = current.test.values if isinstance(current.test, ast.BoolOp) and isinstance(
                    current.test.op, ast.And) else [current.test]
                names = [t.id for t in tests if isinstance(t, ast.Name)]
                if names:
                    found = names
            child, current = current, parent.get(id(current))
        if not found:
            return None
        flags.add(tuple(found))
    return flags.pop()[0] if len(flags) == 1 else None


def review_flag_imports(results: list, paths: Optional[dict[str, str]] = None) -> list:
    """NPU911/914/915/502 at an import under `if FLAG:`, FLAG imported from a module of the run
    whose import probe sets it: info with that reason (see the module's doc)."""
    candidates = [i for i, r in enumerate(results) if r.relpath.endswith(".py")
                  and any(_open(f, _PACKAGE_CODES) and UNGUARDED not in f.message for f in r.findings)]
    if not candidates:
        return results
    python = [i for i, r in enumerate(results) if r.relpath.endswith(".py")]
    _imports, text_of = run_imports(results, python, paths or {})
    by_name, by_stem = run_modules(results, python)
    trees: dict = {}
    out = list(results)
    for i in candidates:
        tree = _tree(i, trees, text_of)
        if tree is None:
            continue
        sources = _flag_sources(tree, results[i].relpath, by_name, by_stem)
        if not sources:
            continue
        parent = parents(tree)
        findings, changed = [], False
        for finding in out[i].findings:
            if _open(finding, _PACKAGE_CODES) and UNGUARDED not in finding.message:
                flags = {_flag_guard(tree, line, parent) for line in _places(finding)}
                flag = flags.pop() if len(flags) == 1 else None
                source = sources.get(flag) if flag else None
                if source is not None:
                    k, original = source
                    probe = _tree(k, trees, text_of)
                    if probe is not None and k != i and _probe_sets(probe, original):
                        reason = FLAG_PROBE.format(flag=f"if {flag}:", probe=results[k].relpath)
                        finding = dataclasses.replace(finding, severity="info", message=f"{finding.message} ({reason})")
                        changed = True
            findings.append(finding)
        if changed:
            out[i] = dataclasses.replace(out[i], findings=findings)
    return out


# ------------------------------------------------------------------ (b) Triton modules guarded in the file
def _probed_triton(tree: ast.Module) -> Optional[tuple[set, list]]:
    """(names the file's Triton imports bind, their `try` statements) when every Triton import
    sits in the body of a module-level `try` that catches its failure; None otherwise, or when the
    file imports no Triton."""
    bound: set[str] = set()
    probes = []
    # (the module-level `try` of each import in one's body: no parent map of the whole tree)
    holders = {id(s): t for t in tree.body if isinstance(t, ast.Try) for s in t.body}
    for node in astcache.walk(tree):
        if isinstance(node, ast.Import):
            names = [(a.asname or a.name).split(".")[0] for a in node.names if _is_triton(a.name)]
        elif isinstance(node, ast.ImportFrom) and not node.level and _is_triton(node.module or ""):
            names = [a.asname or a.name for a in node.names]
        else:
            continue
        if not names:
            continue
        holder = holders.get(id(node))
        if holder is None or not catches_import_errors(holder):
            return None
        bound.update(names)
        probes.append(holder)
    return (bound, probes) if bound else None


def _gate(tree: ast.Module) -> Optional[str]:
    """The test of the in-file Triton gate when `triton` is imported only in module-level `try`
    bodies that catch its failure and every other use of the names they bind (kernels included)
    sits under an `if` on Triton's availability; None otherwise."""
    found = _probed_triton(tree)
    if found is None:
        return None
    parent = parents(tree)
    bound, probes = found
    # (what the gates define, kernels included, is missing where Triton is: its uses count too)
    for node in astcache.walk(tree):
        if isinstance(node, ast.If) and isinstance(parent.get(id(node)), ast.Module) and _tests_triton(node.test):
            for statement in node.body:
                if isinstance(statement, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                    bound.add(statement.name)
    tests = set()
    for node in astcache.walk(tree):
        if not (isinstance(node, ast.Name) and node.id in bound and isinstance(node.ctx, ast.Load)):
            continue
        child, current, test = node, parent.get(id(node)), None
        while current is not None and not isinstance(current, ast.Module):
            if current in probes:
                test = ""
                break
            if isinstance(current, ast.If) and child in current.body and _tests_triton(current.test):
                test = " ".join(source_text(current.test).split())
                break
            child, current = current, parent.get(id(current))
        if test is None:
            return None
        if test:
            tests.add(test)
    if not tests:
        return None
    return sorted(tests)[0]


def review_guarded_triton_modules(results: list, paths: Optional[dict[str, str]] = None) -> list:
    """NPU910 (not "imported unguarded") on a module that guards Triton itself, imported by no
    module of the run or only behind a Triton-availability test: info (see the module's doc)."""
    from .importgates import is_test
    from .modpaths import module_names

    candidates = [i for i, r in enumerate(results) if r.relpath.endswith(".py") and not r.relpath.endswith("__init__.py")
                  and any(_open(f, ("NPU910",)) and UNGUARDED not in f.message for f in r.findings)]
    if not candidates:
        return results
    python = [i for i, r in enumerate(results) if r.relpath.endswith(".py")]
    imports, text_of = run_imports(results, python, paths or {})
    trees: dict = {}
    out = list(results)
    for i in candidates:
        tree = _tree(i, trees, text_of)
        if tree is None:
            continue
        test = _gate(tree)
        if test is None:
            continue
        relpath = results[i].relpath
        names = set(module_names(relpath))
        stem = relpath[:-3]
        sites = sorted({(j, line) for j in python if j != i for name, line, relative in imports[j]
                        if (relative and name == stem) or (not relative and name in names)})
        if not is_test(relpath):
            sites = [(j, line) for j, line in sites if not is_test(results[j].relpath)]
        shown = []
        init = next((j for j in python if results[j].relpath == f"{relpath.rpartition('/')[0]}/__init__.py"), None)
        for j, line in sites:
            importer = _tree(j, trees, text_of)
            guard = _import_guard(importer, line) if importer is not None else None
            if guard is None and init is not None and singles21.reaches_package_attribute(
                    importer, line, names, _tree(init, trees, text_of), _tests_triton):
                continue  # (`from pkg import x`: the package's attribute, bound under its gate: singles21.py)
            if guard is None:
                break
            shown.append(f"{results[j].relpath}:{line}" + (f" under `{guard[1][:70]}`" if guard[0] == "triton" else " in `try`"))
        else:
            if not sites and named_in_a_string(results, i, text_of, python):
                continue  # (loaded by name somewhere: not known how)
            where = ("; ".join(shown[:2]) + (f"; and {len(shown) - 2} more" if len(shown) > 2 else "")
                     if shown else _NO_IMPORTER)
            reason = GUARDED_TRITON_MODULE.format(test=f"if {test}:") + f"; {where}"
            if not sites and b"__main__" not in (text_of(i) or b""):
                reason = f"{NOTHING_IMPORTS}; {GUARDED_TRITON_MODULE.format(test=f'if {test}:')}"
            findings = [dataclasses.replace(f, severity="info", message=f"{f.message} ({reason})")
                        if _open(f, ("NPU910",)) and UNGUARDED not in f.message else f for f in out[i].findings]
            out[i] = dataclasses.replace(out[i], findings=findings)
    return out


# ------------------------------------------------------------------ (e) CUDA extensions loaded behind a CUDA test
GATED_EXTENSION = ("built and loaded only by {loader}, which the project imports only under `{gate}`, false on an "
                   "NPU host: it never builds there")
FAST_PATH = ("; its kernels are registered for the CUDA dispatch key only: a CUDA fast path, an NPU host "
             "uses the ops' other implementations where the project has them")
ONCE = "built only by a CUDA extension an NPU host never loads; reported once, at"  # (moot.PHRASES)
_SOURCE_LITERAL = re.compile(rb"""["']([\w./-]+\.cu)["']""")
_CUDA_IMPL = re.compile(rb"""library\.impl\([^)]*?["']CUDA["']""", re.DOTALL)
_OTHER_IMPL = re.compile(rb"""library\.impl\([^)]*?["'](?:CPU|default|CompositeExplicitAutograd|CompositeImplicitAutograd|Meta|PrivateUse1)["']""", re.DOTALL)


def _site_gate(tree: ast.Module, line: int) -> Optional[str]:
    """The source of an enclosing `if` test false on an NPU host for every import at `line`."""
    from .testscopes import false_on_npu

    parent = parents(tree)
    statements = [n for n in astcache.walk(tree) if isinstance(n, (ast.Import, ast.ImportFrom)) and n.lineno == line]
    gates = []
    for node in statements:
        child, current, gate = node, parent.get(id(node)), None
        while current is not None:
            if isinstance(current, ast.If) and child in current.body:
                test = " ".join(source_text(current.test).split())
                if false_on_npu(test):
                    gate = test
                    break
            child, current = current, parent.get(id(current))
        if gate is None:
            return None
        gates.append(gate)
    return gates[0] if gates else None


def review_gated_extensions(results: list, paths: Optional[dict[str, str]] = None) -> list:
    """NPU912 of the `.cu` files of an extension only loaded behind a CUDA test (module's doc)."""
    from .importgates import is_test
    from .modpaths import module_names

    cuda = {r.relpath: i for i, r in enumerate(results) if r.relpath.lower().endswith((".cu", ".cuh"))
            and any(f.code == "NPU912" and _open(f, ("NPU912",)) for f in r.findings)}
    if not cuda:
        return results
    python = [i for i, r in enumerate(results) if r.relpath.endswith(".py")]
    folders = {posixpath.dirname(p) for p in cuda}
    loaders = [i for i in python if any(f == posixpath.dirname(results[i].relpath) or f.startswith(
        posixpath.dirname(results[i].relpath) + "/") for f in folders)]
    if not loaders:
        return results
    imports, text_of = run_imports(results, python, paths or {})
    trees: dict = {}
    out = list(results)
    for i in loaders:
        data = text_of(i) or b""
        named = {m.group(1).decode("utf-8", "replace") for m in _SOURCE_LITERAL.finditer(data)}
        if not named:
            continue
        home = posixpath.dirname(results[i].relpath)
        mine = sorted(p for p in cuda if p.startswith(home + "/"))
        sources = [p for p in mine if p.lower().endswith(".cu")]
        if not sources or not all(any(p == posixpath.join(home, n) or p.endswith("/" + n.lstrip("./")) for n in named)
                                  for p in sources):
            continue
        relpath = results[i].relpath
        names = set(module_names(relpath))
        stem = relpath[:-3]
        sites = sorted({(j, line) for j in python if j != i for name, line, relative in imports[j]
                        if (relative and (name == stem or name == stem.removesuffix("/__init__")))
                        or (not relative and name in names)})
        sites = [(j, line) for j, line in sites if not is_test(results[j].relpath)]
        if not sites or named_in_a_string(results, i, text_of, python):
            continue
        gates = []
        for j, line in sites:
            tree = _tree(j, trees, text_of)
            gate = _site_gate(tree, line) if tree is not None else None
            if gate is None:
                break
            gates.append((j, line, gate))
        else:
            j, line, gate = gates[0]
            why = GATED_EXTENSION.format(loader=relpath, gate=gate[:70]) + f" ({results[j].relpath}:{line})"
            if _CUDA_IMPL.search(data) and not _OTHER_IMPL.search(data):
                why += FAST_PATH
            first, rest = sources[0], [p for p in mine if p != sources[0]]
            listed = f"; its other sources: {', '.join(rest[:6])}" + (f" and {len(rest) - 6} more" if len(rest) > 6 else "") if rest else ""
            k = cuda[first]
            out[k] = _lower_all(out[k], "NPU912", f"{why}{listed}")
            for p in rest:
                out[cuda[p]] = _lower_all(out[cuda[p]], "NPU912", f"{ONCE} {first}: {why}")
    return out


def _lower_all(result, code: str, why: str):
    return dataclasses.replace(result, findings=[
        dataclasses.replace(f, severity="info", message=f"{f.message} ({why})") if _open(f, (code,)) else f
        for f in result.findings])


# ------------------------------------------------------------------ (f) setup.py that finds CUDA or builds C++
SETUP_PROBE = ("setup.py imports `CUDA_HOME` as a probe: it builds the CUDA extension only under `{gate}` and a "
               "`CppExtension` otherwise, which is what an NPU host (no `CUDA_HOME`) builds; the CUDA sources are "
               "reported on their own")


def review_setup_cuda_probe(results: list, paths: Optional[dict[str, str]] = None) -> list:
    """NPU911 at a `setup.py`'s import of `CUDA_HOME`/`CUDAExtension` whose other places are in an
    `if` on `CUDA_HOME`, in a file that builds a `CppExtension` (module's doc)."""
    from .modpaths import result_bytes

    out = list(results)
    for i, result in enumerate(results):
        if posixpath.basename(result.relpath) != "setup.py" or not any(
                _open(f, ("NPU911",)) and "cpp_extension" in f.message for f in result.findings):
            continue
        data = result_bytes(result, paths or {}) or b""
        tree = astcache.parse(data)
        if tree is None or b"CppExtension" not in data:
            continue
        parent = parents(tree)
        findings, changed = [], False
        for finding in out[i].findings:
            if _open(finding, ("NPU911",)) and "cpp_extension" in finding.message:
                gate = _setup_gate(tree, parent, finding)
                if gate is not None:
                    finding = dataclasses.replace(finding, severity="info",
                                                  message=f"{finding.message} ({SETUP_PROBE.format(gate=gate[:90])})")
                    changed = True
            findings.append(finding)
        if changed:
            out[i] = dataclasses.replace(out[i], findings=findings)
    return out


def _setup_gate(tree: ast.Module, parent, finding) -> Optional[str]:
    first = [n for n in tree.body if isinstance(n, ast.ImportFrom) and n.lineno == finding.line
             and n.module == "torch.utils.cpp_extension"]
    if not first or not any(a.name in ("CUDA_HOME", "CUDAExtension") for a in first[0].names):
        return None
    # the CppExtension is used outside any `if` on CUDA_HOME (the default build)
    gates = set()
    for line, _column, _text in finding.also:
        nodes = [n for n in astcache.walk(tree) if isinstance(n, ast.stmt) and n.lineno == line]
        if not nodes:
            return None
        child, current, gate = nodes[0], parent.get(id(nodes[0])), None
        while current is not None:
            if isinstance(current, ast.If) and child in current.body and any(
                    isinstance(n, ast.Name) and n.id == "CUDA_HOME" for n in ast.walk(current.test)):
                gate = " ".join(source_text(current.test).split())
                break
            child, current = current, parent.get(id(current))
        if gate is None:
            return None
        gates.add(gate)
    if not gates:
        return None
    cpp = [n for n in astcache.walk(tree) if isinstance(n, ast.Name) and n.id == "CppExtension" and isinstance(n.ctx, ast.Load)]
    if not cpp:
        return None
    return sorted(gates)[0]


# ------------------------------------------------------------------ (g) helpers of tests skipped at module level
SKIPPED_HELPER = "in a helper module imported only by test modules that skip at module level on an NPU host"


def _module_skip(result, data: bytes) -> Optional[tuple[int, str]]:
    """(first line, condition) of the module-level skip of a test module that covers the rest of
    the file, or None."""
    from .testscopes import cuda_only_test_scopes

    text = data.decode("utf-8", "replace")
    if "skip" not in text:
        return None
    kept = frozenset(f.line for f in result.findings if f.code == "NPU110" and f.source.endswith("is_available"))
    end = len(text.splitlines()) or 1
    for first, last, condition in cuda_only_test_scopes(text, kept):
        if last == end and first <= end:
            tree = astcache.parse(data)
            if tree is not None and any(s.lineno == first and not isinstance(
                    s, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) for s in tree.body):
                return first, condition
    return None


def review_skipped_test_helpers(results: list, paths: Optional[dict[str, str]] = None) -> list:
    """Report-only findings of a test helper imported only after module-level skips (module doc)."""
    from .importgates import is_test
    from .moot import is_moot
    from .modpaths import module_names

    def open_finding(f) -> bool:
        return not f.fixable and f.cell is None and f.severity != "info" and not is_moot(f)

    candidates = [i for i, r in enumerate(results) if r.relpath.endswith(".py") and is_test(r.relpath)
                  and not r.relpath.endswith(("__init__.py", "conftest.py"))
                  and not posixpath.basename(r.relpath).startswith("test_") and any(open_finding(f) for f in r.findings)]
    if not candidates:
        return results
    python = [i for i, r in enumerate(results) if r.relpath.endswith(".py")]
    imports, text_of = run_imports(results, python, paths or {})
    skips: dict[int, Optional[tuple[int, str]]] = {}

    def skip_of(j: int):
        if j not in skips:
            skips[j] = _module_skip(results[j], text_of(j) or b"") if is_test(results[j].relpath) else None
        return skips[j]

    memo: dict[int, Optional[list]] = {}

    def sites(i: int) -> list:
        relpath = results[i].relpath
        names = set(module_names(relpath))
        stem = relpath[:-3]
        return sorted({(j, line) for j in python if j != i for name, line, relative in imports[j]
                       if (relative and name == stem) or (not relative and name in names)})

    def skipped_only(i: int, stack: frozenset) -> Optional[list]:
        """Where each importer of test module `i` skips first, or None when one does not."""
        if i in memo:
            return memo[i]
        found = sites(i)
        shown: Optional[list] = [] if found else None
        for j, line in found:
            skip = skip_of(j)
            if skip is not None and skip[0] < line:
                shown.append(f"{results[j].relpath}:{skip[0]} `{skip[1]}`")
                continue
            helper = results[j].relpath
            if (j not in stack and is_test(helper) and not posixpath.basename(helper).startswith("test_")
                    and skipped_only(j, stack | {i}) is not None):
                shown.append(f"{helper} (itself imported only by such modules)")
                continue
            shown = None
            break
        memo[i] = shown
        return shown

    helpers = {i: shown for i in candidates if (shown := skipped_only(i, frozenset())) is not None}
    if not helpers:
        return results
    out = list(results)
    for i, shown in helpers.items():
        listed = "; ".join(dict.fromkeys(shown[:2])) + (f"; and {len(shown) - 2} more" if len(shown) > 2 else "")
        out[i] = dataclasses.replace(out[i], findings=[
            dataclasses.replace(f, severity="info", message=f"{f.message} ({SKIPPED_HELPER}: {listed})")
            if open_finding(f) else f for f in out[i].findings])
    return out


# ------------------------------------------------------------------ (c) Triton packages behind an opt-in
OPT_IN = ("opt-in: every import of this package from outside it is lazy, under `{gate}`, whose flag `{flag}` "
          "defaults to False: an NPU host loads these kernels only when a user opts in with Triton-Ascend "
          "installed: verify them there; {where}")
_FLAG = re.compile(r"^use_\w+$")


def _opt_in_flag(test: ast.AST) -> Optional[str]:
    """The `use_x` name of an `and` conjunct (`self.config.use_triton`) beside a Triton test."""
    from .tritonguards import operands

    if not _tests_triton(test):
        return None
    for operand in operands(test, ast.And):
        name = operand.attr if isinstance(operand, ast.Attribute) else operand.id if isinstance(operand, ast.Name) else ""
        if _FLAG.match(name):
            return name
    return None


def _defaults_false(flag: str, texts) -> bool:
    """A field declaration of `flag` in the run says False (`use_triton: bool = False`, pydantic's
    `Field(False)`) and none says True (a keyword of a call or another function, `use_triton=True`,
    is no declaration of the setting)."""
    field = rb"^[ \t]+" + flag.encode() + rb"[ \t]*:[ \t]*[\w\[\], .]+=[ \t]*(?:Field\([ \t]*(?:default[ \t]*=[ \t]*)?)?"
    false, true = re.compile(field + rb"False\b", re.MULTILINE), re.compile(field + rb"True\b", re.MULTILINE)
    found = False
    for data in texts:
        if data and flag.encode() in data:
            if true.search(data):
                return False
            found = found or bool(false.search(data))
    return found


def _lazy_gate(tree: ast.Module, line: int, parent) -> Optional[tuple[str, str]]:
    """(gate source, flag) of the opt-in `if` that holds the imports at `line` inside a function,
    or that holds every call of the private function they are in; None otherwise."""
    statements = [n for n in astcache.walk(tree) if isinstance(n, (ast.Import, ast.ImportFrom)) and n.lineno == line]
    if not statements:
        return None
    node = statements[0]
    child, current, function = node, parent.get(id(node)), None
    while current is not None and not isinstance(current, ast.Module):
        if isinstance(current, ast.If) and child in current.body:
            flag = _opt_in_flag(current.test)
            if flag is not None:
                function = function or next((p for p in _ancestors(current, parent)
                                             if isinstance(p, (ast.FunctionDef, ast.AsyncFunctionDef))), None)
                return (" ".join(source_text(current.test).split()), flag) if function is not None else None
        if isinstance(current, (ast.FunctionDef, ast.AsyncFunctionDef)) and function is None:
            function = current
        child, current = current, parent.get(id(current))
    if function is None or not function.name.startswith("_"):
        return None
    # a private function: every reference to its name in the file lies under an opt-in `if`
    uses = [n for n in astcache.walk(tree) if (isinstance(n, ast.Attribute) and n.attr == function.name)
            or (isinstance(n, ast.Name) and n.id == function.name)]
    gates = set()
    for use in uses:
        gate = next(((" ".join(source_text(p.test).split()), _opt_in_flag(p.test)) for p in _ancestors(use, parent)
                     if isinstance(p, ast.If) and _opt_in_flag(p.test)), None)
        if gate is None:
            return None
        gates.add(gate)
    return sorted(gates)[0] if gates else None


def _ancestors(node: ast.AST, parent):
    current = parent.get(id(node))
    while current is not None:
        yield current
        current = parent.get(id(current))


def review_opt_in_triton_packages(results: list, paths: Optional[dict[str, str]] = None) -> list:
    """NPU910 "imported unguarded" in a package folder loaded only lazily behind an opt-in flag
    (module doc)."""
    from .importgates import is_test
    from .modpaths import module_names

    candidates = [i for i, r in enumerate(results) if r.relpath.endswith(".py") and not is_test(r.relpath)
                  and any(_open(f, ("NPU910",)) and UNGUARDED in f.message for f in r.findings)]
    if not candidates:
        return results
    python = [i for i, r in enumerate(results) if r.relpath.endswith(".py")]
    relpaths = {results[i].relpath for i in python}
    folders = {posixpath.dirname(results[i].relpath) for i in candidates
               if posixpath.dirname(results[i].relpath) + "/__init__.py" in relpaths}
    if not folders:
        return results
    imports, text_of = run_imports(results, python, paths or {})
    trees: dict = {}
    out = list(results)
    for folder in sorted(folders):
        dotted = {n for n in module_names(folder + "/__init__.py")}
        inside = [i for i in python if results[i].relpath.startswith(folder + "/")]
        sites = []
        for j in python:
            if results[j].relpath.startswith(folder + "/") or is_test(results[j].relpath):
                continue
            for name, line, relative in imports[j]:
                if relative:
                    hit = name == folder or name.startswith(folder + "/")
                else:
                    hit = any(name == d or name.startswith(d + ".") for d in dotted)
                if hit:
                    sites.append((j, line))
        sites = sorted(set(sites))
        if not sites:
            continue
        gates = []
        for j, line in sites:
            tree = _tree(j, trees, text_of)
            gate = _lazy_gate(tree, line, parents(tree)) if tree is not None else None
            if gate is None:
                break
            gates.append((j, line, gate))
        else:
            flags = {g[1] for _j, _l, g in gates}
            texts = [text_of(k) for k in python]
            if not all(_defaults_false(flag, texts) for flag in flags):
                continue
            shown = [f"{results[j].relpath}:{line}" for j, line, _g in gates]
            where = "imported at " + "; ".join(shown[:2]) + (f"; and {len(shown) - 2} more" if len(shown) > 2 else "")
            gate, flag = gates[0][2]
            reason = OPT_IN.format(gate=gate[:80], flag=flag, where=where)
            for i in inside:
                if i in candidates:
                    out[i] = dataclasses.replace(out[i], findings=[
                        dataclasses.replace(f, severity="info", message=f"{f.message.replace(UNGUARDED, '')} ({reason})")
                        if _open(f, ("NPU910",)) and UNGUARDED in f.message else f for f in out[i].findings])
    return out


# ------------------------------------------------------------------ (d) tests that skip without Triton
SKIPPED_WITHOUT_TRITON = ("Triton imported in `try` and used only in tests skipped unless `{flag}`, which needs "
                          "Triton's availability (`{probe}`): they skip where Triton is missing; where Triton-Ascend "
                          "makes it true they run: verify them there")


def _needs_triton(test: ast.AST, bindings: dict, depth: int = 0) -> Optional[str]:
    """The Triton-availability name that `test` (a value that must hold) needs: itself, an `and`
    conjunct of it, or of a module-level name bound to one (two steps)."""
    from .tritonguards import availability as _availability, operands

    for operand in operands(test, ast.And):
        if _availability(operand):
            return source_text(operand)
        if isinstance(operand, ast.Name) and operand.id in bindings and depth < 2:
            found = _needs_triton(bindings[operand.id], bindings, depth + 1)
            if found is not None:
                return found
    return None


def _skip_flag(decorator: ast.AST, bindings: dict) -> Optional[tuple[str, str]]:
    """(flag, probe) of `@pytest.mark.skipif(not flag, ...)` where flag needs Triton."""
    if not (isinstance(decorator, ast.Call) and (astcache.dotted(decorator.func) or "").endswith("skipif")
            and decorator.args):
        return None
    condition = decorator.args[0]
    if not (isinstance(condition, ast.UnaryOp) and isinstance(condition.op, ast.Not)):
        return None
    probe = _needs_triton(condition.operand, bindings)
    return (" ".join(source_text(condition.operand).split()), probe) if probe else None


def review_triton_skipped_tests(results: list, paths: Optional[dict[str, str]] = None) -> list:
    """NPU910 of a test module whose Triton uses are all in tests skipped without Triton (doc)."""
    from .importgates import is_test
    from .modpaths import result_bytes

    out = list(results)
    for i, result in enumerate(results):
        if not (result.relpath.endswith(".py") and is_test(result.relpath) and any(
                _open(f, ("NPU910",)) and UNGUARDED not in f.message for f in result.findings)):
            continue
        data = result_bytes(result, paths or {})
        tree = astcache.parse(data) if data is not None else None
        if tree is None:
            continue
        found = _probed_triton(tree)
        if found is None:
            continue
        parent = parents(tree)
        bound, probes = found
        bindings = {t.id: n.value for n in astcache.walk(tree) if isinstance(n, ast.Assign) and isinstance(parent.get(id(n)), (ast.Module, ast.Try))
                    for t in n.targets if isinstance(t, ast.Name)}
        flags = set()
        for node in astcache.walk(tree):
            if not (isinstance(node, ast.Name) and node.id in bound and isinstance(node.ctx, ast.Load)):
                continue
            flag = None
            for holder in _ancestors(node, parent):
                if holder in probes:
                    flag = ()
                    break
                if isinstance(holder, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and isinstance(
                        parent.get(id(holder)), ast.Module):
                    flag = next((f for f in (_skip_flag(d, bindings) for d in holder.decorator_list) if f), None)
                    break
            if flag is None:
                flags = None
                break
            if flag:
                flags.add(flag)
        if not flags:
            continue
        flag, probe = sorted(flags)[0]
        reason = SKIPPED_WITHOUT_TRITON.format(flag=flag[:60], probe=" ".join(probe.split())[:70])
        if len(flags) == 1 and probe in bindings:  # (a project probe that needs CUDA itself: labels7.py)
            from .labels7 import cuda_gated_probe

            reason = cuda_gated_probe(results, paths or {}, tree, bindings[probe], flag, probe) or reason
        out[i] = dataclasses.replace(out[i], findings=[
            dataclasses.replace(f, severity="info", message=f"{f.message} ({reason})")
            if _open(f, ("NPU910",)) and UNGUARDED not in f.message else f for f in out[i].findings])
    return out


def review(results: list, paths: Optional[dict[str, str]] = None) -> list:
    """The passes, in order (runplan.py, after optionalguards.review)."""
    results = review_guarded_triton_modules(review_flag_imports(results, paths), paths)
    results = review_setup_cuda_probe(review_gated_extensions(results, paths), paths)
    results = review_triton_skipped_tests(review_opt_in_triton_packages(results, paths), paths)
    return review_skipped_test_helpers(results, paths)


probed_triton = _probed_triton  # public name (tritonflags21.py)
