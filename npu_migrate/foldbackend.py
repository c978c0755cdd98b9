"""Findings redundant with a failing CUDA-only import reported in the same file (issue #16, round 12).

A file that imports a CUDA-only package with no NPU build (flashinfer, the CuTe DSL, ...) has that
import reported as an error (NPU911): where it runs on an NPU host, it raises. Code that runs only
after that import, or whose value only goes into it, restates that finding:

* **After the import** (`fold_after_failing_import`): an FP8 or Triton finding (NPU913, NPU910) in a
  function whose body imports the package unconditionally (a direct statement of the body, not in a
  `try`, an `if`) before it (`from flashinfer import shuffle_matrix_a` at the top of a weight
  preparation, then `.view(torch.float8_e4m3fn)`); or anywhere in a module that imports it
  unguarded at module level (the module does not import there at all).
* **Only into the import** (same pass): an FP8 value assigned to a name that the function only
  passes to calls of a failing callable: a name the reported import binds, a module-level function
  of the file whose body imports the package unconditionally, or a class whose `__init__` does
  (`kv_dtype = torch.float8_e4m3fn ...` then `_SM90State(device, kv_dtype)` whose `__init__` runs
  `from flashinfer.mla import ...`), or an FP8 expression written in such a call's arguments.
* **One import, one finding** (`fold_repeated_imports`): the same CUDA-only import (same code, same
  message) twice in one class or at one file's top level is one finding. An occurrence inside a
  `try` whose handler catches everything or ImportError and sets a flag, returns False or passes
  (a probe: `is_available()` of an extension loader) is not a failure: it joins the one that is.

Nothing is dropped: each folded place is listed in the import's finding ("also at lines ...", with
the reason that names them), at that finding's severity or a lower one (folding.Fold).
"""

from __future__ import annotations

import ast
import functools
from dataclasses import replace

from .findings import Finding

FAILING = "NPU911"  # a CUDA-only compiled package's import (flashinfer, cupy, pycuda, mamba_ssm, ...)
FOLDED_CODES = ("NPU913", "NPU910")  # FP8 compute, Triton kernels: ports that come after the package's
AFTER_IMPORT = "reached only after, or only passed into, this CUDA-only package's import, which fails on an NPU host"
REPEATED = ("NPU502", "NPU911", "NPU910", "NPU902", "NPU915")  # import findings
REPEATED_WHERE = ("one finding for the same import again in this class or module: a probe's import in a `try` "
                  "that falls back joins the one that fails")

_FUNCTIONS = (ast.FunctionDef, ast.AsyncFunctionDef)
TRITON = "NPU910"
# (moot.PHRASES: the class cannot be built on an NPU host, so its methods never run there)
ASSERTED = "in a class whose constructor requires a CUDA-only package"
# (not a moot.py phrase: with Triton-Ascend installed the flag is true on an NPU host and the tests run)
SKIPPED_WITHOUT_TRITON = ("a test module skipped where Triton is missing (its Triton import sets `{flag}` in "
                          "`try`/`except ImportError`, and `pytestmark` skips on `not {flag}`): with Triton-Ascend "
                          "installed these kernels run on an NPU host: verify them there")


def _cheap(findings: list[Finding]) -> bool:
    return any(f.code == FAILING and f.severity == "error" for f in findings) and \
        any(f.code in FOLDED_CODES for f in findings)


def review(findings: list[Finding], tree: ast.Module) -> list[Finding]:
    """A Python file's findings with the ones this module folds folded (after the per-file merge)."""
    if _cheap(findings):
        findings = fold_after_failing_import(findings, tree)
        from .backend16 import fold_triton_imports  # (round 16: what is left is a kernel-less module's import)
        findings = fold_triton_imports(findings, tree)
    if sum(f.code in REPEATED for f in findings) > 1:
        findings = fold_repeated_imports(findings, tree)
        from .optional13 import fold_class_loader_imports  # (round 13: a class and its loaders)
        findings = fold_class_loader_imports(findings, tree)
    if any(f.code == TRITON and f.severity == "error" for f in findings):
        findings = lower_skipped_triton_tests(findings, tree)
    if any(f.code.startswith("NPU9") and f.severity != "info" for f in findings):
        findings = lower_in_asserted_classes(findings, tree)
    return findings


# ----------------------------------------------------------------------------- after / into a failing import
def _bound_names(node: ast.stmt) -> list[str]:
    return [(alias.asname or alias.name).split(".")[0] for alias in node.names if alias.name != "*"]


def _span(node: ast.AST) -> tuple[int, int]:
    return node.lineno, node.end_lineno or node.lineno


def _failing_imports(findings: list[Finding], tree: ast.Module):
    """(import statement, its parent body owner or None for the module, the finding) of the
    reported failing imports that run unconditionally: direct statements of the module's body or
    of a function's body."""
    from .folding import ours, places_of

    lines: dict[int, Finding] = {}
    for finding in findings:
        if finding.code == FAILING and finding.severity == "error" and ours(finding):
            for line, _c, _s in places_of(finding):
                lines.setdefault(line, finding)
    out = []
    for owner in [tree, *(n for n in ast.walk(tree) if isinstance(n, _FUNCTIONS))]:
        for stmt in owner.body:
            if isinstance(stmt, (ast.Import, ast.ImportFrom)) and stmt.lineno in lines:
                out.append((stmt, None if owner is tree else owner, lines[stmt.lineno]))
    return out


def _failing_callables(tree: ast.Module, imports) -> dict[str, Finding]:
    """Names whose call fails on an NPU host: what a reported import binds (module level or in a
    function: looked up by name), the module-level functions whose body imports such a package
    unconditionally, and the classes whose `__init__` does."""
    out: dict[str, Finding] = {}
    for stmt, _owner, finding in imports:
        for name in _bound_names(stmt):
            out.setdefault(name, finding)
    by_function = {id(owner): finding for _s, owner, finding in imports if owner is not None}
    for node in tree.body:
        if isinstance(node, _FUNCTIONS) and id(node) in by_function:
            out.setdefault(node.name, by_function[id(node)])
        elif isinstance(node, ast.ClassDef):
            init = next((n for n in node.body if isinstance(n, _FUNCTIONS) and n.name == "__init__"), None)
            if init is not None and id(init) in by_function:
                out.setdefault(node.name, by_function[id(init)])
    return out


def _callee(call: ast.Call) -> str | None:
    func = call.func
    if isinstance(func, ast.Name):
        return func.id
    if isinstance(func, ast.Attribute):  # (`flashinfer.mla.run(...)`: the package bound by `import flashinfer`)
        base = func
        while isinstance(base, ast.Attribute):
            base = base.value
        if isinstance(base, ast.Name):
            return base.id
    return None


def _parents(root: ast.AST) -> dict[int, ast.AST]:
    out = {}
    for node in ast.walk(root):
        for child in ast.iter_child_nodes(node):
            out[id(child)] = node
    return out


def _only_into(function, name: str, after: int, failing: dict[str, Finding], parents) -> Finding | None:
    """The failing finding when every read of `name` in `function` after line `after` is an
    argument of a call of a failing callable (at least one), else None."""
    target = None
    for node in ast.walk(function):
        if not (isinstance(node, ast.Name) and node.id == name):
            continue
        if isinstance(node.ctx, ast.Store):
            if node.lineno > after:
                return None  # (rebound later: what it holds then is another value)
            continue
        parent = parents.get(id(node))
        if isinstance(parent, ast.keyword):
            parent = parents.get(id(parent))
        if not (isinstance(parent, ast.Call) and parent.func is not node):
            return None
        callee = _callee(parent)
        if callee not in failing:
            return None
        target = target or failing[callee]
    return target


def fold_after_failing_import(findings: list[Finding], tree: ast.Module) -> list[Finding]:
    """FP8 and Triton findings reached only after, or only feeding, an import reported as failing
    (see the module's doc) folded into that import's finding."""
    from .folding import Fold, ours, places_of

    imports = _failing_imports(findings, tree)
    chained = _chain_bound(findings, tree)
    if not imports and not chained:
        return findings
    failing = _failing_callables(tree, imports)
    module_level = next((f for s, owner, f in imports if owner is None), None)
    functions = [n for n in ast.walk(tree) if isinstance(n, _FUNCTIONS)]
    parents = None
    fold = Fold(findings)
    fold.targets.update(id(f) for _s, _o, f in imports)
    for finding in findings:
        if finding.code not in FOLDED_CODES or finding.severity == "info" or not ours(finding):
            continue  # (an info finding keeps its own reason: "names FP8 dtypes only" asks for no port work)
        for place in places_of(finding):
            line = place[0]
            target = None
            if module_level is not None:
                stmt = next(s for s, owner, f in imports if owner is None and f is module_level)
                inside = any(n.lineno <= line <= (n.end_lineno or n.lineno) for n in functions)
                if inside or line > (stmt.end_lineno or stmt.lineno):
                    target = module_level
            holding = [n for n in functions if n.lineno <= line <= (n.end_lineno or n.lineno)]
            for stmt, owner, found in imports:  # (after an unconditional import of an enclosing function)
                if target is None and owner is not None and any(owner is n for n in holding) \
                        and (stmt.end_lineno or stmt.lineno) < line:
                    target = found
            if target is None and holding and chained:  # (after a call of a name bound only so)
                target = _after_chained_call(min(holding, key=lambda n: _span(n)[1] - _span(n)[0]), line, chained)
            if target is None and holding and failing:
                if parents is None:
                    parents = _parents(tree)
                target = _feeding(min(holding, key=lambda n: _span(n)[1] - _span(n)[0]), line, failing, parents)
            if target is not None and fold.movable(finding, target):
                fold.move(finding, [place], target)
    return sorted(fold.result(name_them=AFTER_IMPORT))


def _chain_bound(findings: list[Finding], tree: ast.Module) -> dict[str, Finding]:
    """{name: the failing finding} of the names the module binds only in a module-level `if`/`elif`/
    `else` chain, each binding an import of a CUDA-only package (one of them reported as failing)
    or None, at least one None (`if is_flashinfer_available(): from flashinfer import fp4_quantize elif is_cuda_alike():
    from sgl_kernel import scaled_fp4_quant as fp4_quantize else: fp4_quantize = None`, round-14
    AM#33): on an NPU host the name is None or its import fails, so a call of it fails there."""
    from .folding import ours, places_of

    lines: dict[int, Finding] = {}
    for finding in findings:
        if finding.code == FAILING and finding.severity == "error" and ours(finding):
            for line, _c, _s in places_of(finding):
                lines.setdefault(line, finding)
    if not lines:
        return {}
    reported: dict[str, Finding] = {}
    spoiled: set[str] = set()
    nones: set[str] = set()  # (a chain without its None branch leaves the name unbound: another pass's shape)

    def visit(block: list, in_chain: bool) -> None:
        for stmt in block:
            if isinstance(stmt, ast.If):
                visit(stmt.body, True)
                visit(stmt.orelse, True)
            elif isinstance(stmt, (ast.Import, ast.ImportFrom)):
                for alias in stmt.names:
                    module = (stmt.module or "") if isinstance(stmt, ast.ImportFrom) else alias.name
                    name = (alias.asname or alias.name).split(".")[0]
                    if not in_chain or (isinstance(stmt, ast.ImportFrom) and stmt.level) or not _cuda_only(module):
                        spoiled.add(name)
                    elif stmt.lineno in lines:
                        reported.setdefault(name, lines[stmt.lineno])
            elif isinstance(stmt, ast.Assign) and in_chain and isinstance(stmt.value, ast.Constant) \
                    and stmt.value.value is None and all(isinstance(t, ast.Name) for t in stmt.targets):
                nones.update(t.id for t in stmt.targets)
            else:
                for node in ast.walk(stmt):  # (any other binding: a def, an assignment, a `try`)
                    if isinstance(node, (*_FUNCTIONS, ast.ClassDef)):
                        spoiled.add(node.name)
                    elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
                        spoiled.add(node.id)
                    elif isinstance(node, ast.alias):
                        spoiled.add((node.asname or node.name).split(".")[0])

    visit(tree.body, False)
    return {name: finding for name, finding in reported.items() if name not in spoiled and name in nones}


def _after_chained_call(function, line: int, chained: dict[str, Finding]) -> Finding | None:
    """The failing finding of a chain-bound name that a simple statement of the function's own body
    calls before `line` (`hs_fp4, hs_sf = fp4_quantize(x, scale)`, then `hs_sf.view(torch.float8_e4m3fn)`):
    on an NPU host that call fails, and nothing after it runs. The function must not bind the name."""
    if any(isinstance(n, ast.Name) and n.id in chained and isinstance(n.ctx, ast.Store) for n in ast.walk(function)):
        return None
    for stmt in function.body:
        if (stmt.end_lineno or stmt.lineno) >= line:
            return None
        if isinstance(stmt, (ast.Expr, ast.Assign, ast.AnnAssign, ast.AugAssign, ast.Return)):
            stack = [stmt]
            while stack:
                node = stack.pop()
                if isinstance(node, (ast.Lambda, ast.IfExp, ast.BoolOp, ast.ListComp, ast.SetComp,
                                     ast.DictComp, ast.GeneratorExp)):
                    continue  # (a call there may not run)
                if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in chained:
                    return chained[node.func.id]
                stack.extend(ast.iter_child_nodes(node))
    return None


def _feeding(function, line: int, failing: dict[str, Finding], parents) -> Finding | None:
    """The failing finding that the FP8 value at `line` only goes into: an argument of a failing
    call on that line, or a name assigned there that the function only passes to failing calls."""
    for node in ast.walk(function):
        if isinstance(node, ast.Call) and _callee(node) in failing and node.lineno <= line <= (node.end_lineno or 0):
            args = [*node.args, *(k.value for k in node.keywords)]
            if any(a.lineno <= line <= (a.end_lineno or a.lineno) for a in args):
                return failing[_callee(node)]
    for node in ast.walk(function):
        if isinstance(node, (ast.Assign, ast.AnnAssign)) and node.value is not None \
                and node.value.lineno <= line <= (node.value.end_lineno or node.value.lineno):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if len(targets) == 1 and isinstance(targets[0], ast.Name):
                found = _only_into(function, targets[0].id, node.end_lineno or node.lineno, failing, parents)
                if found is not None:
                    return found
    return None


# ----------------------------------------------------------------------------- one import, one finding
def _probe(handler_owner: ast.Try) -> bool:
    """A `try` whose handlers catch everything or an import error and only fall back (set a
    name, return a constant, pass): a probe of availability, not a failure."""
    for handler in handler_owner.handlers:
        kind = handler.type
        names = [kind] if kind is None or not isinstance(kind, ast.Tuple) else list(kind.elts)
        caught = any(k is None or (isinstance(k, ast.Name) and k.id in ("ImportError", "ModuleNotFoundError",
                                                                      "Exception", "BaseException"))
                     for k in names)
        quiet = all(isinstance(s, (ast.Pass, ast.Assign, ast.AnnAssign)) or
                    (isinstance(s, ast.Return) and (s.value is None or isinstance(s.value, ast.Constant)))
                    or (isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant))
                    for s in handler.body)
        if caught and quiet:
            return True
    return False


def fold_repeated_imports(findings: list[Finding], tree: ast.Module) -> list[Finding]:
    """The same report-only import finding (same code and message) twice in one class, or twice at
    a file's top level, folded into one: the first occurrence outside a probing `try` stands for
    the others (see the module's doc)."""
    from .folding import ALSO, Fold, ours, places_of

    classes = [n for n in ast.walk(tree) if isinstance(n, ast.ClassDef)]
    tries = [n for n in ast.walk(tree) if isinstance(n, ast.Try) and _probe(n)]

    def scope(line: int):
        holding = [c for c in classes if c.lineno <= line <= (c.end_lineno or c.lineno)]
        return id(min(holding, key=lambda c: _span(c)[1] - _span(c)[0])) if holding else None

    def probed(line: int) -> bool:
        return any(t.body[0].lineno <= line <= (t.body[-1].end_lineno or t.body[-1].lineno) for t in tries)

    groups: dict[tuple, list[tuple[Finding, tuple]]] = {}
    for finding in sorted(findings):
        if finding.code in REPEATED and ours(finding):
            for place in places_of(finding):
                key = (finding.code, ALSO.sub("", finding.message), finding.severity, scope(place[0]))
                groups.setdefault(key, []).append((finding, place))
    fold = Fold(findings)
    for key, members in groups.items():
        if len(members) < 2 or len({id(f) for f, _p in members}) < 2:
            continue
        anchor = next((f for f, p in members if not probed(p[0])), members[0][0])
        fold.targets.add(id(anchor))
        for finding, place in members:
            if finding is not anchor and fold.movable(finding, anchor):
                fold.move(finding, [place], anchor)
    out = []
    for finding in fold.result():
        if id(finding) not in fold.targets and finding.also and REPEATED_WHERE not in finding.message \
                and any(f.line == finding.line and f.code == finding.code for f in findings if id(f) in fold.targets):
            also = ALSO.search(finding.message)
            head = finding.message[:also.start()] if also else finding.message
            finding = replace(finding, message=f"{head} ({REPEATED_WHERE}){also.group(0) if also else ''}")
        out.append(finding)
    return sorted(out)


# ----------------------------------------------------------------------------- a test module skipped without Triton
def _triton_import(node: ast.AST) -> bool:
    return (isinstance(node, ast.Import) and any(a.name.split(".")[0] == "triton" for a in node.names)) or \
        (isinstance(node, ast.ImportFrom) and not node.level and (node.module or "").split(".")[0] == "triton")


def _flag_try(tree: ast.Module):
    """(the module-level `try`, the flag) of `try: import triton ...; FLAG = True` / `except
    ImportError: FLAG = False`, or (None, None)."""
    for stmt in tree.body:
        if not isinstance(stmt, ast.Try) or not any(_triton_import(n) for n in stmt.body):
            continue
        flags = _flags_cleared(stmt, set())
        if flags:
            return stmt, flags[0]
    return None, None


def _flags_cleared(stmt: ast.Try, set_true: set) -> list[str]:
    """The names the `try` sets True (or `set_true` holds) that its `except ImportError` sets
    False, in order."""
    set_true = set_true | {t.id for n in stmt.body if isinstance(n, ast.Assign) and isinstance(n.value, ast.Constant)
                           and n.value.value is True for t in n.targets if isinstance(t, ast.Name)}
    out: list[str] = []
    for handler in stmt.handlers:
        kinds = handler.type.elts if isinstance(handler.type, ast.Tuple) else [handler.type]
        if not any(isinstance(k, ast.Name) and k.id in ("ImportError", "ModuleNotFoundError") for k in kinds):
            continue
        for n in handler.body:
            if isinstance(n, ast.Assign) and isinstance(n.value, ast.Constant) and n.value.value is False:
                out.extend(t.id for t in n.targets if isinstance(t, ast.Name) and t.id in set_true)
    return out


def _needs(test: ast.AST, flag: str) -> bool:
    """Whether `test` is true only where `flag` is (`flag`, `a and flag`)."""
    if isinstance(test, ast.Name):
        return test.id == flag
    return isinstance(test, ast.BoolOp) and isinstance(test.op, ast.And) and any(_needs(v, flag) for v in test.values)


def _skips_without(tree: ast.Module, flag: str) -> bool:
    """A module-level `pytestmark = pytest.mark.skipif(not (... and flag), ...)` (or a list of
    marks holding one): every test of the module skips where the flag is false."""
    for stmt in tree.body:
        if not (isinstance(stmt, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "pytestmark"
                                                      for t in stmt.targets)):
            continue
        marks = stmt.value.elts if isinstance(stmt.value, (ast.List, ast.Tuple)) else [stmt.value]
        for mark in marks:
            if isinstance(mark, ast.Call) and isinstance(mark.func, ast.Attribute) and mark.func.attr == "skipif" \
                    and mark.args and isinstance(mark.args[0], ast.UnaryOp) and isinstance(mark.args[0].op, ast.Not) \
                    and _needs(mark.args[0].operand, flag):
                return True
    return False


def lower_skipped_triton_tests(findings: list[Finding], tree: ast.Module) -> list[Finding]:
    """NPU910 errors of a test module whose Triton import is guarded by a flag, whose kernels are
    defined only under `if flag:` and whose `pytestmark` skips every test without the flag: info
    that asks to verify the kernels on Triton-Ascend (see SKIPPED_WITHOUT_TRITON)."""
    from .folding import ALSO, ours, places_of

    guard, flag = _flag_try(tree)
    if guard is None or not _skips_without(tree, flag):
        return findings
    allowed = [_span(guard)] + [_span(s) for s in tree.body if isinstance(s, ast.If) and _needs(s.test, flag)
                                and not s.orelse]
    reason = f" ({SKIPPED_WITHOUT_TRITON.format(flag=flag)})"
    out = []
    for finding in findings:
        if finding.code == TRITON and finding.severity == "error" and ours(finding) \
                and all(any(a <= p[0] <= b for a, b in allowed) for p in places_of(finding)):
            also = ALSO.search(finding.message)
            head = finding.message[:also.start()] if also else finding.message
            finding = replace(finding, severity="info", message=f"{head}{reason}{also.group(0) if also else ''}")
        out.append(finding)
    return out


# ----------------------------------------------------------------------------- a class that asserts its CUDA package
@functools.lru_cache(maxsize=1)
def _packages() -> tuple[frozenset, tuple]:
    from .fp8tests import compiled_packages

    return compiled_packages()  # (read from rules/*.toml once per process)


def _cuda_only(module: str) -> bool:
    tops, dotted = _packages()
    return module.split(".")[0] in tops or any(module == d or module.startswith(d + ".") for d in dotted)


def _import_flags(tree: ast.Module) -> dict[str, str]:
    """{flag: package} of module-level `try: import <CUDA-only package> ...` whose `except
    ImportError` sets the flag False (set True in the `try` or before it)."""
    true_before: set[str] = set()
    out: dict[str, str] = {}
    for stmt in tree.body:
        if isinstance(stmt, ast.Assign) and isinstance(stmt.value, ast.Constant) and stmt.value.value is True:
            true_before.update(t.id for t in stmt.targets if isinstance(t, ast.Name))
        if not isinstance(stmt, ast.Try):
            continue
        modules = [a.name for n in stmt.body if isinstance(n, ast.Import) for a in n.names]
        modules += [n.module or "" for n in stmt.body if isinstance(n, ast.ImportFrom) and not n.level]
        package = next((m for m in modules if _cuda_only(m)), None)
        if package is None:
            continue
        out.update((flag, package.split(".")[0]) for flag in _flags_cleared(stmt, true_before))
    return out


def _asserts(init, flags: dict[str, str]) -> tuple[str, int] | None:
    """(flag, line) of the constructor's own `assert FLAG` or `if not FLAG: raise ...`."""
    for stmt in init.body:
        if isinstance(stmt, ast.Assert) and isinstance(stmt.test, ast.Name) and stmt.test.id in flags:
            return stmt.test.id, stmt.lineno
        if isinstance(stmt, ast.If) and isinstance(stmt.test, ast.UnaryOp) and isinstance(stmt.test.op, ast.Not) \
                and isinstance(stmt.test.operand, ast.Name) and stmt.test.operand.id in flags and stmt.body \
                and isinstance(stmt.body[-1], ast.Raise):
            return stmt.test.operand.id, stmt.lineno
    return None


def lower_in_asserted_classes(findings: list[Finding], tree: ast.Module) -> list[Finding]:
    """Report-only NPU9xx findings in the methods of a class whose `__init__` asserts a flag that a
    guarded import of a CUDA-only package (no NPU build) sets False where it fails: no instance
    exists on an NPU host, so they become info with the ASSERTED reason (a named scope, moot.py).
    Static and class methods, and the constructor's lines before the assertion, keep theirs."""
    from .folding import ALSO, ours, places_of

    flags = _import_flags(tree)
    if not flags:
        return findings
    spans = []  # (first line, last line, reason)
    for cls in tree.body:
        if not isinstance(cls, ast.ClassDef):
            continue
        init = next((n for n in cls.body if isinstance(n, _FUNCTIONS) and n.name == "__init__"), None)
        found = _asserts(init, flags) if init is not None else None
        if found is None:
            continue
        flag, line = found
        reason = (f"{ASSERTED}: `{cls.name}.__init__` asserts `{flag}` (line {line}), False where "
                  f"`{flags[flag]}` does not import, as on an NPU host")
        for method in cls.body:
            if not isinstance(method, _FUNCTIONS) or any(
                    isinstance(d, ast.Name) and d.id in ("staticmethod", "classmethod") for d in method.decorator_list):
                continue
            first = line + 1 if method is init else method.lineno
            spans.append((first, method.end_lineno or method.lineno, reason))
    from .folding import rebuilt

    out = []
    for finding in findings:
        if not (finding.code.startswith("NPU9") and finding.severity != "info" and ours(finding)):
            out.append(finding)
            continue
        places = places_of(finding)
        held = [next((r for a, b, r in spans if a <= p[0] <= b), None) for p in places]
        if not any(held):
            out.append(finding)
            continue
        # (a merged finding: its places in such a class split off, the others stay as they were)
        rest = [p for p, r in zip(places, held) if r is None]
        if rest:
            out.append(rebuilt(finding, rest))
        for reason in dict.fromkeys(r for r in held if r):
            part = rebuilt(finding, [p for p, r in zip(places, held) if r == reason])
            also = ALSO.search(part.message)
            head = part.message[:also.start()] if also else part.message
            out.append(replace(part, severity="info", message=f"{head} ({reason}){also.group(0) if also else ''}"))
    return sorted(out)
