"""FP8, Triton and compile findings in code only a CUDA backend or an NVIDIA capability flag
reaches (issue #16, round 16).

* **A Triton import of a kernel-less module that cannot import anyway** (`fold_triton_imports`,
  per file, from foldbackend.review): a benchmark writes `import triton` / `import triton.testing`,
  then `from flashinfer import ...` unguarded at module level, and uses Triton only for
  `triton.testing.do_bench_cudagraph`, a use foldbackend already folded into the flashinfer
  import's finding (NPU911). What is left of the Triton finding (NPU910) is the import statements
  themselves: no kernel, and the module does not import on an NPU host whatever Triton does. They
  fold into the same finding ("also at lines ..."). A file that defines a Triton kernel keeps its
  Triton finding.
* **FP8 in a branch that first calls a name only a false gate binds** (`review`, whole run, beside
  fp8cpu.review_gated, which does this for whole functions): `if self.use_flashinfer:` whose body
  calls `mxfp8_quantize(...)` (imported only under `if is_flashinfer_available():`), or a module
  helper that always calls such a name, before the FP8 place, in the same block or one around it.
  Every run that reaches the place has called the unbound name first (a NameError on an NPU
  host): info, "in a branch an NPU host cannot run" (a named scope).
* **A flag imported from a module of the run that binds it to a test false on an NPU host**
  (`review`): torchtune's `from torchtune.utils._import_guard import _SUPPORTS_FLEX_ATTENTION`,
  bound once there to `torch.cuda.is_available() and torch.cuda.get_device_capability() >= (7, 5)`
  (the shim answers (0, 0) on an NPU host, so the flag is False). A report-only finding in the body
  of `if <test>:` that such a flag makes false: info, "in a branch an NPU host does not take"
  (a named scope). A flag that another module of the run assigns (`guard.FLAG = True`) is left
  alone.
"""

from __future__ import annotations

import ast
import dataclasses
import re

from . import astcache
from .findings import Finding

TRITON = "NPU910"
FAILING = "NPU911"
FP8 = "NPU913"
FOLDED_IMPORT = ("a Triton import of a module without Triton kernels that already fails to import on an NPU "
                 "host at this import")
CANNOT_RUN = "in a branch an NPU host cannot run"  # (moot.PHRASES)
UNTAKEN = "in a branch an NPU host does not take"  # (moot.PHRASES, testscopes' phrase)
_FUNCTIONS = (ast.FunctionDef, ast.AsyncFunctionDef)
_KERNEL = re.compile(rb"@\s*(?:triton\.)?(?:jit|autotune|heuristics)\b|\btriton\.language\b|\bimport\s+triton\.language")


# ----------------------------------------------------------------------------- a Triton import folded
def _triton_import(stmt: ast.stmt) -> bool:
    if isinstance(stmt, ast.Import):
        return all(a.name.split(".")[0] == "triton" for a in stmt.names)
    return isinstance(stmt, ast.ImportFrom) and not stmt.level and (stmt.module or "").split(".")[0] == "triton"


def fold_triton_imports(findings: list[Finding], tree: ast.Module, text: bytes | None = None) -> list[Finding]:
    """A Triton finding (NPU910) left standing only for module-level `import triton...`
    statements of a module without Triton kernels, folded into the module's unguarded failing
    CUDA-only import (NPU911) (see the module's doc)."""
    from .folding import Fold, ours, places_of

    failing = [f for f in findings if f.code == FAILING and f.severity == "error" and ours(f)]
    triton = [f for f in findings if f.code == TRITON and f.severity == "error" and ours(f)]
    if not failing or not triton:
        return findings
    if text is not None and _KERNEL.search(text):
        return findings
    if any(isinstance(d, (ast.Name, ast.Attribute, ast.Call)) and re.search(r"\b(jit|autotune|heuristics)\b",
                                                                              ast.unparse(d))
           for node in astcache.walk(tree) if isinstance(node, _FUNCTIONS) for d in node.decorator_list):
        return findings  # (a kernel: the Triton finding is about it)
    module_imports = {s.lineno: s for s in tree.body if isinstance(s, (ast.Import, ast.ImportFrom))}
    target = None
    for finding in failing:
        if any(line in module_imports for line, _c, _s in places_of(finding)):
            target = finding
            break
    if target is None:
        return findings  # (the failing import runs only in a function or under an `if`)
    fold = Fold(findings)
    fold.targets.add(id(target))
    for finding in triton:
        places = places_of(finding)
        if all(p[0] in module_imports and _triton_import(module_imports[p[0]]) for p in places) \
                and fold.movable(finding, target):
            fold.move(finding, list(places), target)
    return sorted(fold.result(name_them=FOLDED_IMPORT))


# ----------------------------------------------------------------------------- whole run
_GATED_IMPORT = re.compile(rb"\nif [^\n]*:[ \t]*\n[ \t]+(?:from|import) ")
_IF_TEST = re.compile(rb"^[ \t]*(?:el)?if[ \t]+([^\n]*)", re.MULTILINE)
_BARE_NAME = re.compile(rb"(?<![\w.])([A-Za-z_]\w*)\b(?![ \t]*[(.\[])")  # (a name read as a value, not called)
_FROM_IMPORT = re.compile(rb"^from[ \t]+([\w.]+)[ \t]+import[ \t]+(?:\(([^)]*)\)|([^\n]*))", re.MULTILINE)


def _open(finding: Finding, codes=None) -> bool:
    from .moot import is_moot

    return (not finding.fixable and finding.cell is None and finding.severity != "info"
            and (codes is None or finding.code in codes) and not is_moot(finding))


def review(results: list, paths: dict) -> list:
    """The run's results with FP8 in branches that first call a gated name, and report-only
    findings under a flag another module binds false on an NPU host, lowered to info (see the
    module's doc)."""
    results = _review_gated_branches(results, paths)
    return _review_imported_flags(results, paths)


def gated_module_names(tree: ast.Module) -> dict[str, str]:
    """{name: condition} of the names the module binds only by imports in the body of a
    module-level `if` whose own test is false on an NPU host (`if is_flashinfer_available():`),
    and nowhere else at module level."""
    from .testscopes import false_on_npu

    out: dict[str, str] = {}
    tests = [s for s in tree.body if isinstance(s, ast.If) and s.body and false_on_npu(ast.unparse(s.test))]
    if not tests:
        return out
    inside: dict[str, str] = {}
    for stmt in tests:
        for node in stmt.body:
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                for alias in node.names:
                    if alias.name != "*":
                        inside[(alias.asname or alias.name).split(".", 1)[0]] = ast.unparse(stmt.test)
    bound_elsewhere: set[str] = set()
    chosen = {id(s) for s in tests}
    for stmt in tree.body:
        if id(stmt) in chosen:
            nodes = [n for s in stmt.orelse for n in ast.walk(s)]
        else:
            nodes = [stmt] if isinstance(stmt, (*_FUNCTIONS, ast.ClassDef)) else list(ast.walk(stmt))
        for node in nodes:
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                bound_elsewhere.update((a.asname or a.name).split(".", 1)[0] for a in node.names)
            elif isinstance(node, (*_FUNCTIONS, ast.ClassDef)):
                bound_elsewhere.add(node.name)
            elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
                bound_elsewhere.add(node.id)
    bound_elsewhere.update(n for node in astcache.walk(tree) if isinstance(node, ast.Global) for n in node.names)
    return {n: c for n, c in inside.items() if n not in bound_elsewhere}


def _failing_helpers(tree: ast.Module, gated: dict[str, str]) -> dict[str, str]:
    """{helper: why} of the module-level functions that always call a gated name (fp8cpu's
    reading: unconditionally, with no `return` before the call)."""
    from .fp8cpu import cannot_run

    out = {}
    for stmt in tree.body:
        if isinstance(stmt, _FUNCTIONS) and stmt.body and stmt.name not in gated:
            why = cannot_run(tree, stmt.body[0].lineno, gated)
            if why:
                called = re.search(r"always calls `(\w+)`", why)
                out[stmt.name] = called.group(1) if called else ""
    return out


def _blocks(node: ast.AST):
    for field in ("body", "orelse", "finalbody"):
        block = getattr(node, field, None)
        if isinstance(block, list) and block and isinstance(block[0], ast.stmt):
            yield block
    for handler in getattr(node, "handlers", ()) or ():
        yield handler.body
    for case in getattr(node, "cases", ()) or ():
        yield case.body


def _chain(function: ast.AST, line: int) -> list[tuple[list, int]]:
    """[(block, index of the statement holding `line`)] from the function's body inward."""
    out = []
    node = function
    while True:
        found = None
        for block in _blocks(node):
            for index, stmt in enumerate(block):
                if stmt.lineno <= line <= (stmt.end_lineno or stmt.lineno):
                    found = (block, index)
                    break
            if found:
                break
        if found is None or isinstance(found[0][found[1]], (*_FUNCTIONS, ast.ClassDef, ast.Lambda)):
            return out
        out.append(found)
        node = found[0][found[1]]


def _first_call(function, line: int, column: int, failing: dict[str, str]) -> tuple[str, ast.If] | None:
    """(the failing name, the innermost enclosing `if`) when every run of `function` that reaches
    (line, column) has called a failing name before, in a statement of the same block or of a
    block around it; None otherwise (or when no `if` encloses the place: fp8cpu reads whole
    functions)."""
    from .fp8cpu import plain_calls

    local = {a.arg for a in ast.walk(function.args) if isinstance(a, ast.arg)}
    local |= {n.id for n in ast.walk(function) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}
    local |= {(a.asname or a.name).split(".")[0] for n in ast.walk(function)
              if isinstance(n, (ast.Import, ast.ImportFrom)) for a in n.names}
    chain = _chain(function, line)
    branch = next((stmt for block, i in reversed(chain) for stmt in [block[i]] if isinstance(stmt, ast.If)), None)
    if branch is None:
        return None
    for block, index in reversed(chain):
        for position, stmt in enumerate(block[:index + 1]):
            for call in plain_calls(stmt):
                name = call.func.id
                if name not in failing or name in local:
                    continue
                if position == index and (call.lineno, call.col_offset) > (line, column):
                    continue  # (the same statement: the place must be in the call or after it)
                return name, branch
    return None


def _review_gated_branches(results: list, paths: dict) -> list:
    from .modpaths import result_bytes

    def open_error(f) -> bool:
        return _open(f, (FP8,))

    out = list(results)
    for i, result in enumerate(results):
        if not result.relpath.endswith(".py") or not any(map(open_error, result.findings)):
            continue
        data = result_bytes(result, paths)
        if not data or not _GATED_IMPORT.search(data):
            continue  # (cheap before the parse: a module-level `if` holding an import)
        tree = astcache.parse(data)
        if tree is None:
            continue
        gated = gated_module_names(tree)
        if not gated:
            continue
        failing = {n: n for n in gated}
        failing.update(_failing_helpers(tree, gated))
        functions = [n for n in astcache.walk(tree) if isinstance(n, _FUNCTIONS)]
        findings, changed = [], False
        for finding in result.findings:
            if open_error(finding):
                why = []
                for line, column, _s in [(finding.line, finding.column, None), *finding.also]:
                    holding = [f for f in functions if f.lineno <= line <= (f.end_lineno or f.lineno)]
                    first = _first_call(min(holding, key=lambda f: (f.end_lineno or f.lineno) - f.lineno), line,
                                        column - 1, failing) if holding else None
                    if first is None:
                        why = []
                        break
                    name, branch = first
                    gate = gated[failing[name]]
                    via = f"`{name}`, which always calls `{failing[name]}`" if failing[name] != name else f"`{name}`"
                    why.append(f"{CANNOT_RUN}: the branch `if {ast.unparse(branch.test)}:` first calls {via}, "
                               f"imported only under `if {gate}:`, which an NPU host does not take")
                if why:
                    finding = dataclasses.replace(finding, severity="info",
                                                  message=f"{finding.message} ({'; '.join(dict.fromkeys(why))})")
                    changed = True
            findings.append(finding)
        if changed:
            out[i] = dataclasses.replace(result, findings=findings)
    return out


# ----------------------------------------------------------------------------- a flag of another module
class _Substitute(ast.NodeTransformer):
    def __init__(self, values: dict):
        self.values = values

    def visit_Name(self, node: ast.Name):
        value = self.values.get(node.id)
        return ast.copy_location(value, node) if value is not None else node


class _Flags:
    """What the modules of the run bind their flags to: a module is read (bytes) once, and parsed
    only when it binds one of the names asked at module level (`NAME = ...`)."""

    def __init__(self, results, texts, index) -> None:
        self.results, self.texts, self.index = results, texts, index
        self.bindings: dict[int, dict | None] = {}

    def values(self, importer: int, module: str, names: list[str]) -> dict:
        """{name: (value expression, defining relpath, line)} of the names `module` (a file of the
        run) binds once at module level to an expression false on an NPU host."""
        from .importgates import module_bindings
        from .testscopes import false_on_npu

        found = self.index.files([(module, 0, False)], importer)
        if len(found) != 1:
            return {}
        j = found[0][0]
        data = self.texts(j)
        if not data or not any(re.search(rb"^" + re.escape(n.encode()) + rb"[ \t]*(?::[^=\n]*)?=[^=]", data,
                                         re.MULTILINE) for n in names):
            return {}  # (cheap before the parse: no module-level binding of these names)
        if j not in self.bindings:
            tree = astcache.parse(data)
            self.bindings[j] = None if tree is None else module_bindings(tree)
        bound = self.bindings[j] or {}
        out = {}
        for name in names:
            value = bound.get(name)
            if value is not None and false_on_npu(ast.unparse(value)):
                out[name] = (value, self.results[j].relpath, value.lineno)
        return out


def _review_imported_flags(results: list, paths: dict) -> list:
    from .modpaths import ImportIndex, RunTexts

    candidates = []
    texts = RunTexts(results, paths)
    for i, result in enumerate(results):
        if not result.relpath.endswith(".py") or not any(_open(f) for f in result.findings):
            continue
        data = texts(i)
        if not data or b"from " not in data or b"if " not in data:
            continue
        imported = {}
        for match in _FROM_IMPORT.finditer(data):
            for part in re.split(rb"[,\s]+", match.group(2) or match.group(3) or b""):
                if re.fullmatch(rb"\w+", part) and part != b"as":
                    imported[part.decode()] = match.group(1).decode()
        if not imported:
            continue
        flags = {m.decode() for test in _IF_TEST.findall(data) for m in _BARE_NAME.findall(test)}
        tested = [n for n in imported if n in flags]
        if tested:
            candidates.append((i, {n: imported[n] for n in tested}))
    if not candidates:
        return results
    python = [j for j, r in enumerate(results) if r.relpath.endswith(".py")]
    flags = _Flags(results, texts, ImportIndex(results, python))
    rebound: dict[str, bool] = {}
    out = list(results)
    for i, tested in candidates:
        by_module: dict[str, list[str]] = {}
        for name, module in tested.items():
            by_module.setdefault(module, []).append(name)
        if not any(flags.values(i, module, names) for module, names in by_module.items()):
            continue  # (no flag bound false on an NPU host: the importer is not parsed)
        tree = astcache.parse(texts(i))
        if tree is None:
            continue
        aliases = {}
        for stmt in tree.body:  # (module-level `from m import FLAG`, not renamed)
            if isinstance(stmt, ast.ImportFrom) and not stmt.level and stmt.module:
                for alias in stmt.names:
                    if alias.asname is None and tested.get(alias.name) == stmt.module:
                        aliases.setdefault(stmt.module, []).append(alias.name)
        values = {}
        for module, names in aliases.items():
            values.update(flags.values(i, module, names))
        if not values or _rebound(values, results, paths, python, tree, rebound):
            continue
        branches = []
        for node in astcache.walk(tree):
            if isinstance(node, ast.If) and node.body and any(
                    isinstance(n, ast.Name) and n.id in values for n in ast.walk(node.test)):
                import copy

                test = _Substitute({n: copy.deepcopy(v[0]) for n, v in values.items()}).visit(copy.deepcopy(node.test))
                from .testscopes import false_on_npu

                if false_on_npu(ast.unparse(test)):
                    names = sorted(n.id for n in ast.walk(node.test) if isinstance(n, ast.Name) and n.id in values)
                    where = "; ".join(f"`{n}` is `{ast.unparse(values[n][0])}` at {values[n][1]}:{values[n][2]}, "
                                      "false on an NPU host (the shim's capability is (0, 0))" for n in names)
                    last = max(s.end_lineno or s.lineno for s in node.body)
                    branches.append((node.body[0].lineno, last, f"`{ast.unparse(node.test)}`: {where}"))
        if not branches:
            continue
        findings, changed = [], False
        for finding in results[i].findings:
            if _open(finding):
                lines = [finding.line, *(p[0] for p in finding.also)]
                held = [next((b for b in branches if b[0] <= line <= b[1]), None) for line in lines]
                if all(held):
                    finding = dataclasses.replace(finding, severity="info",
                                                  message=f"{finding.message} ({UNTAKEN}: {held[0][2]})")
                    changed = True
            findings.append(finding)
        if changed:
            out[i] = dataclasses.replace(results[i], findings=findings)
    return out


def _rebound(values: dict, results, paths: dict, python: list[int], tree: ast.Module, seen: dict) -> bool:
    """Whether a module of the run assigns one of the flags as an attribute (`guard.FLAG = True`)
    or patches it, or the importer rebinds it: then its value is not the one bound where it is
    defined. `seen`: name -> answer, so that the run's files are read once per flag name."""
    from .modpaths import result_bytes

    for name in values:
        if name not in seen:
            word = re.escape(name.encode())
            # (`guard.FLAG = True`, `setattr(guard, "FLAG", ...)`, `mock.patch("pkg.guard.FLAG", ...)`)
            pattern = re.compile(rb"\." + word + rb"\s*=[^=]|(?:setattr|patch|patch\.object)\([^)]*\b" + word + rb"\b")
            seen[name] = any(name.encode() in data and pattern.search(data) is not None
                             for j in python for data in [result_bytes(results[j], paths)] if data)
        if seen[name]:
            return True
    return any(isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store) and n.id in values
               for n in astcache.walk(tree))
