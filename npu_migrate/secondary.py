"""Secondary findings that restate what the file already shows (issue #16, round-10 audits).

* **A backend parameter passed through.** NPU304 ("the process-group backend comes from a value
  npu-migrate cannot see") on a function's parameter (`dist.new_group(ranks, backend=backend)` in
  `def _get_group(self, ranks, backend: Optional[str] = None)`) where the file shows every value
  the parameter takes: each call of the function in the file passes None, a string literal, or a
  parameter of its own enclosing function that is seen the same way (followed up the chain:
  `get_group_along_axis(backend=None)` -> `create_group_along_axis(backend=backend)` ->
  `_get_group(backend=backend)`); where no call in the file passes it, its default must be None or
  a literal. `multiprocessing.Process(target=f, args=(...))` counts as a call of `f`. None is the
  default backend, HCCL on an NPU host; a literal "nccl" is rewritten or reported where it is
  written (NPU301/NPU990), so the parameter adds nothing. The finding is lowered to information
  with the reason PASSED_THROUGH, which moot.py names as a scope that runs as written (nothing is
  silent: `skipped`, `--show-skipped`). A parameter without a default and without a call in the
  file, or a call that passes anything else (`cfg.backend`, `*args`, `**kwargs`), keeps the
  warning, and so does a parameter the function assigns anew (`backend = accel.comm_backend`).
  (redundant.fold_backend_callers handles the case where every call passes a literal
  first; this step takes what it leaves.)
"""

from __future__ import annotations

import ast
import re
from dataclasses import replace
from typing import Optional

from . import astcache
from .findings import Finding

BACKEND = "NPU304"
# (moot.AS_WRITTEN carries this phrase)
PASSED_THROUGH = "a backend parameter whose every value is seen"
_IDENTIFIER = re.compile(r"[A-Za-z_]\w*")
_FUNCTIONS = (ast.FunctionDef, ast.AsyncFunctionDef)
_DEPTH = 6
FOLDED = "passed by the calls of the function in this file"  # (redundant.fold_backend_callers)


def _params(function) -> list[str]:
    a = function.args
    return [p.arg for p in (*a.posonlyargs, *a.args, *a.kwonlyargs)]


def _enclosing(functions, line: int, name: str):
    """The innermost function around `line` with a parameter `name`."""
    best = None
    for node in functions:
        if node.lineno <= line <= (node.end_lineno or node.lineno) and name in _params(node):
            if best is None or node.lineno > best.lineno:
                best = node
    return best


def _default(function, name: str) -> tuple[bool, Optional[ast.expr]]:
    """(has a default, the default) of parameter `name`."""
    a = function.args
    positional = [p.arg for p in (*a.posonlyargs, *a.args)]
    defaults = dict(zip(positional[len(positional) - len(a.defaults):], a.defaults))
    defaults.update((p.arg, d) for p, d in zip(a.kwonlyargs, a.kw_defaults) if d is not None)
    return (name in defaults, defaults.get(name))


def _calls(tree: ast.Module, function) -> list[tuple[ast.AST, list[ast.expr], list[ast.keyword], bool]]:
    """The calls of `function` in the file: (node, positional args, keywords, bound), `bound` when
    the call goes through an attribute (`self.f(...)`: the first parameter is already bound).
    `Process(target=f, args=(a, b))` counts as `f(a, b)`."""
    out = []
    for node in astcache.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        if (isinstance(func, ast.Name) and func.id == function.name) or (
                isinstance(func, ast.Attribute) and func.attr == function.name):
            out.append((node, list(node.args), list(node.keywords), isinstance(func, ast.Attribute)))
            continue
        called = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""
        if called != "Process":
            continue
        keywords = {k.arg: k.value for k in node.keywords}
        target = keywords.get("target")
        if isinstance(target, ast.Name) and target.id == function.name:
            args = keywords.get("args")
            if isinstance(args, ast.Tuple):
                out.append((node, list(args.elts), [], False))
            else:
                out.append((node, [ast.Starred(value=args)] if args is not None else [], [], False))
    return out


def _rebound(function, name: str) -> bool:
    """Whether the function's body assigns `name` (an assignment, a loop or `with` target, `:=`,
    `del`, `global`/`nonlocal`): the parameter is then not the only value the name holds."""
    for node in ast.walk(function):
        if isinstance(node, ast.Name) and node.id == name and isinstance(node.ctx, (ast.Store, ast.Del)):
            return True
        if isinstance(node, (ast.Global, ast.Nonlocal)) and name in node.names:
            return True
    return False


def _seen(value: Optional[ast.expr]) -> bool:
    """None or a string literal: the default backend, or a literal reported where it is written."""
    return isinstance(value, ast.Constant) and (value.value is None or isinstance(value.value, str))


def _all_seen(tree: ast.Module, functions, function, name: str, depth: int, visiting: set,
              elsewhere: tuple = ()) -> bool:
    """Whether every value of parameter `name` of `function` is seen in the file (module doc).
    `elsewhere`: (tree, functions) of the project's other files whose calls of the function count
    too, where the file itself has none (wholeprogram.py); the values there are followed in those
    files."""
    key = (id(tree), function.lineno, name)
    if depth > _DEPTH or key in visiting:
        return False
    visiting = visiting | {key}
    if _rebound(function, name):
        return False  # (`backend = accelerator.communication_backend` before the call: not the parameter)
    has_default, default = _default(function, name)
    calls = [(tree, functions, call) for call in _calls(tree, function)]
    if not calls and elsewhere:
        calls = [(t, fs, call) for t, fs in elsewhere for call in _calls(t, function)]
    if not calls:
        return has_default and _seen(default)
    a = function.args
    positional = [p.arg for p in (*a.posonlyargs, *a.args)]
    index = positional.index(name) if name in positional else None
    method = bool(positional) and positional[0] in ("self", "cls")
    for at_tree, at_functions, (node, args, keywords, bound) in calls:
        if any(isinstance(x, ast.Starred) for x in args) or any(k.arg is None for k in keywords):
            return False
        value = next((k.value for k in keywords if k.arg == name), None)
        if value is None and index is not None:
            at = index - (1 if method and bound else 0)
            if 0 <= at < len(args):
                value = args[at]
        if value is None:
            if not (has_default and _seen(default)):
                return False
            continue
        if _seen(value):
            continue
        if isinstance(value, ast.Name):
            line = getattr(node, "lineno", 0)
            outer = _enclosing(at_functions, line, value.id)
            if outer is not None and outer is not function \
                    and _all_seen(at_tree, at_functions, outer, value.id, depth + 1, visiting):
                continue
        return False
    return True


def review_backend_params(findings: list[Finding], tree: ast.Module) -> list[Finding]:
    """NPU304 warnings on a parameter whose every value the file shows: information with the
    reason PASSED_THROUGH (see the module's doc); the other places of a merged finding stay."""
    if not any(f.code == BACKEND and f.severity != "info" and not f.fixable for f in findings):
        return findings
    from .folding import ALSO as _ALSO, places_of as _places, rebuilt as _rebuilt

    functions = [n for n in astcache.walk(tree) if isinstance(n, _FUNCTIONS)]
    out = []
    for finding in findings:
        if finding.code != BACKEND or finding.severity == "info" or finding.fixable or finding.cell is not None \
                or FOLDED in finding.message:
            # (a finding that took the literals the calls pass, reported where they are: it names them)
            out.append(finding)
            continue
        kept, lowered = [], []
        for place in _places(finding):
            name = place[2] or ""
            function = _enclosing(functions, place[0], name) if _IDENTIFIER.fullmatch(name) else None
            seen = function is not None and _all_seen(tree, functions, function, name, 0, set())
            (lowered if seen else kept).append(place)
        if not lowered:
            out.append(finding)
            continue
        if kept:
            out.append(_rebuilt(finding, kept))
        for line, column, source in lowered:
            out.append(replace(finding, line=line, column=column, source=source, also=(), severity="info",
                               message=(f"{_ALSO.sub('', finding.message)} ({PASSED_THROUGH}: every call in this file "
                                        f"passes None (the default backend, HCCL on an NPU host), a literal "
                                        f"rewritten or reported where it is written, or a parameter seen "
                                        f"the same way)")))
    return sorted(out)


# ----------------------------------------------------------------------------- after a call that fails first
# (a finding reached only after a call of a function of the same file whose CUDA build, reported
# there, fails on an NPU host: `self.pool = use_mem_pool(get_nccl_mem_pool())` before
# `torch.cuda.is_current_stream_capturing()`, where get_nccl_mem_pool() runs the reported
# `load_inline(..., with_cuda=True)`; round-10 Z22)
FAILING = ("NPU911",)  # report-only errors that raise on an NPU host where they run (a CUDA build, a CUDA import)
AFTER_FAILING = "reached only after a call of a function whose CUDA build, reported here, fails on an NPU host"


def _failing_functions(findings: list[Finding], tree: ast.Module) -> dict[str, Finding]:
    """Module-level functions of the file (by name) with a failing error finding in their body,
    outside any `try` (a `try` may catch the failure): the finding."""
    out: dict[str, Finding] = {}
    for node in tree.body:
        if not isinstance(node, _FUNCTIONS):
            continue
        tries = [t for t in ast.walk(node) if isinstance(t, ast.Try)]
        for finding in findings:
            if finding.code in FAILING and finding.severity == "error" and not finding.fixable \
                    and finding.cell is None and not finding.also \
                    and node.lineno <= finding.line <= (node.end_lineno or node.lineno) \
                    and not any(t.lineno <= finding.line <= (t.end_lineno or t.lineno) for t in tries):
                out.setdefault(node.name, finding)
    return out


def _calls_of(stmt: ast.stmt, names: dict[str, Finding]) -> Optional[Finding]:
    """The failing finding of a function of `names` that `stmt` calls directly (not inside a
    lambda or a nested function, not behind a conditional expression or a boolean operator)."""
    stack = [stmt]
    while stack:
        node = stack.pop()
        if isinstance(node, (ast.Lambda, *_FUNCTIONS, ast.ClassDef, ast.IfExp, ast.BoolOp,
                             ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)) and node is not stmt:
            continue
        if isinstance(node, (ast.If, ast.Try, ast.While, ast.For, ast.With, ast.Match)
                      if hasattr(ast, "Match") else (ast.If, ast.Try, ast.While, ast.For, ast.With)):
            continue  # (only simple statements: their calls run)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in names:
            return names[node.func.id]
        stack.extend(ast.iter_child_nodes(node))
    return None


def fold_after_failing_calls(findings: list[Finding], tree: ast.Module) -> list[Finding]:
    """Report-only errors in a function body after a simple statement that calls a function of
    this file whose CUDA build fails on an NPU host (reported there): folded into that finding,
    which names them. The calling statement and the finding are in the same block, the call
    first; the finding's own statement may make the call too, on an earlier line."""
    if not any(f.code in FAILING for f in findings):
        return findings
    failing = _failing_functions(findings, tree)
    if not failing:
        return findings
    from .folding import Fold as _Fold, ours as _ours, places_of as _places

    blocks = []  # (statements of one block) in functions
    for node in astcache.walk(tree):
        if isinstance(node, _FUNCTIONS):
            for inner in ast.walk(node):
                for field in ("body", "orelse", "finalbody"):
                    body = getattr(inner, field, None)
                    if isinstance(body, list) and body and isinstance(body[0], ast.stmt):
                        blocks.append((node, body))
    fold = _Fold(findings)
    fold.targets.update(id(f) for f in failing.values())
    for finding in findings:
        if not _ours(finding) or finding.severity != "error" or finding.code in FAILING:
            continue
        moved = []
        for place in _places(finding):
            line = place[0]
            target = None
            for function, body in blocks:
                if not (function.lineno <= line <= (function.end_lineno or function.lineno)):
                    continue
                if any(f.line >= function.lineno and f.line <= (function.end_lineno or function.lineno)
                       for f in failing.values()):
                    continue  # (inside the failing function itself)
                for stmt in body:
                    if stmt.lineno > line:
                        break
                    if (stmt.end_lineno or stmt.lineno) < line:
                        target = _calls_of(stmt, failing) or target
                    else:
                        break  # (the statement holding the finding: its own calls may run after it)
                if target is not None:
                    break
            if target is not None:
                moved.append((place, target))
        for place, target in moved:
            if fold.movable(finding, target):
                fold.move(finding, [place], target)
    return sorted(fold.result(name_them=AFTER_FAILING))


# ----------------------------------------------------------------------------- FP8 in a class of a CUDA package
# (an FP8 dtype for the scales of a quantization method whose compute is the ops of a CUDA-only
# package imported and reported in the same file: `NunchakuSVDQLinearMethod` calls nunchaku's
# `svdq_gemm_w4a4_cuda`; the FP8 note adds nothing to that package's finding; round-10 Z29)
IN_PACKAGE_CLASS = "in a class that computes with this CUDA-only package's ops"


def _module_level_imports(tree: ast.Module) -> list:
    """The imports the module runs when imported (its body, and module-level `try`/`if` blocks):
    a package imported lazily inside a method (`from flashinfer import ...` in one branch) is one
    path of the class among others, not its compute."""
    out, stack = [], list(tree.body)
    while stack:
        node = stack.pop()
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            out.append(node)
        elif isinstance(node, (ast.Try, ast.If)):
            for field in ("body", "orelse", "finalbody", "handlers"):
                stack.extend(getattr(node, field, None) or [])
        elif isinstance(node, ast.ExceptHandler):
            stack.extend(node.body)
    return out


def fold_fp8_into_package_class(findings: list[Finding], tree: ast.Module) -> list[Finding]:
    """NPU913 errors inside a class that calls names a module-level import binds, reported as an
    NPU911 error in this file: folded into that finding, which names them (nothing is dropped: the FP8
    place is listed there)."""
    if not any(f.code == "NPU913" for f in findings) or not any(f.code == "NPU911" for f in findings):
        return findings
    from .folding import Fold as _Fold, ours as _ours, places_of as _places

    imports = [f for f in findings if f.code == "NPU911" and f.severity == "error" and _ours(f)]
    bound: dict[str, Finding] = {}  # name an import binds -> its NPU911 finding
    for node in _module_level_imports(tree):
        if True:
            for target in imports:
                if node.lineno in {p[0] for p in _places(target)}:
                    for alias in node.names:
                        bound.setdefault((alias.asname or alias.name).split(".")[0], target)
    if not bound:
        return findings
    classes = []  # (class, the NPU911 finding of a package name it calls)
    for node in astcache.walk(tree):
        if isinstance(node, ast.ClassDef):
            called = next((bound[c.func.id] for c in ast.walk(node) if isinstance(c, ast.Call)
                           and isinstance(c.func, ast.Name) and c.func.id in bound), None)
            if called is not None:
                classes.append((node, called))
    if not classes:
        return findings
    fold = _Fold(findings)
    fold.targets.update(id(t) for _c, t in classes)
    for finding in findings:
        if finding.code != "NPU913" or finding.severity != "error" or not _ours(finding):
            continue
        for place in _places(finding):
            target = next((t for c, t in classes if c.lineno <= place[0] <= (c.end_lineno or c.lineno)), None)
            if target is not None and fold.movable(finding, target):
                fold.move(finding, [place], target)
    return sorted(fold.result(name_them=IN_PACKAGE_CLASS))


# ----------------------------------------------------------------------------- across the project's files
# (a backend parameter whose function has no call in its own file: `gpc.init_global_dist(rank,
# world_size, backend, host, port)` in legacy/initialize.py, whose `backend` comes from launchers'
# defaults that npu-migrate rewrites; round-10 AA40)
_GENERIC = frozenset({"get", "set", "run", "init", "main", "setup", "build", "create", "start", "launch", "__init__"})


def review_backend_params_across(results: list, python: list[int], texts: dict) -> list:
    """NPU304 warnings on a parameter of a function with no call in its file, where the project's
    other files call it (by name, a name specific enough: not `get`, `run`, `__init__`) and every
    value they pass is seen there (module doc): information with PASSED_THROUGH, which names the
    files. Called once from wholeprogram.review."""
    import dataclasses

    from . import astcache

    wanted = [i for i in python if any(f.code == BACKEND and f.severity == "warning" and not f.fixable
                                       and f.cell is None for f in results[i].findings)]
    if not wanted:
        return results
    trees: dict[int, Optional[tuple]] = {}

    def parsed(i: int):
        if i not in trees:
            data = texts.get(i)
            tree = astcache.parse(data) if data else None
            trees[i] = (tree, [n for n in astcache.walk(tree) if isinstance(n, _FUNCTIONS)]) if tree is not None else None
        return trees[i]

    from .folding import ALSO as _ALSO, places_of as _places, rebuilt as _rebuilt

    out = list(results)
    for i in wanted:
        mine = parsed(i)
        if mine is None:
            continue
        tree, functions = mine
        changed, findings = False, []
        for finding in out[i].findings:
            if finding.code != BACKEND or finding.severity != "warning" or finding.fixable or finding.cell is not None \
                    or FOLDED in finding.message:
                findings.append(finding)
                continue
            kept, lowered = [], []
            for place in _places(finding):
                name = place[2] or ""
                function = _enclosing(functions, place[0], name) if _IDENTIFIER.fullmatch(name) else None
                files = _seen_elsewhere(i, tree, functions, function, name, python, texts, parsed) \
                    if function is not None and function.name not in _GENERIC and not _calls(tree, function) else None
                if files:
                    lowered.append((place, ", ".join(results[j].relpath for j in files[:3])
                                    + (" and more" if len(files) > 3 else "")))
                else:
                    kept.append(place)
            if not lowered:
                findings.append(finding)
                continue
            changed = True
            if kept:
                findings.append(_rebuilt(finding, kept))
            for (line, column, source), files in lowered:
                findings.append(dataclasses.replace(
                    finding, line=line, column=column, source=source, also=(), severity="info", message=(
                        f"{_ALSO.sub('', finding.message)} ({PASSED_THROUGH}: every call, in {files}, passes "
                        f"None (the default backend, HCCL on an NPU host), a literal rewritten or reported "
                        f"where it is written, or a parameter seen the same way)")))
        if changed:
            out[i] = dataclasses.replace(out[i], findings=sorted(findings))
    return out


def _seen_elsewhere(i, tree, functions, function, name, python, texts, parsed) -> Optional[list[int]]:
    """The other files whose calls of `function` pass only seen values for `name`, or None."""
    word = f"{function.name}(".encode()
    others = [j for j in python if j != i and word in (texts.get(j) or b"") and parsed(j) is not None
              and _calls(parsed(j)[0], function)]
    if not others:
        return None
    elsewhere = tuple(parsed(j) for j in others)
    return others if _all_seen(tree, functions, function, name, 0, set(), elsewhere) else None


# ----------------------------------------------------------------------------- an FP8 parameter default
# (`def quant(x, dtype=torch.float8_e4m3fn)` whose every call in the file passes `dtype`: the
# default is never used, and is no FP8 compute; the calls are where the FP8 cast is asked for;
# round-10 Y6)
OVERRIDDEN_DEFAULT = ("the helper's FP8 default of `{param}` is never used: every call in this file passes "
                      "its own; review the dtype the calls pass")


def _default_of(functions, line: int, column: int):
    """(function, parameter) whose default expression starts at (line, column), or None."""
    for function in functions:
        a = function.args
        positional = [*a.posonlyargs, *a.args]
        pairs = list(zip(positional[len(positional) - len(a.defaults):], a.defaults))
        pairs += [(p, d) for p, d in zip(a.kwonlyargs, a.kw_defaults) if d is not None]
        for param, default in pairs:
            if default.lineno == line and default.col_offset + 1 == column:
                return function, param.arg
    return None


def move_fp8_defaults_to_calls(findings: list[Finding], tree: ast.Module, text: str) -> list[Finding]:
    """NPU913 places on a parameter's default that every call of the function in this file
    overrides (passes the parameter, by keyword or position): the place moves to those calls,
    whose source names them (nothing is dropped). A function without a call in the file, or a
    call that leaves the default, keeps the place."""
    if not any(f.code == "NPU913" and f.severity == "error" for f in findings):
        return findings
    from .folding import ours as _ours, places_of as _places, rebuilt as _rebuilt

    functions = [n for n in astcache.walk(tree) if isinstance(n, _FUNCTIONS)]
    out = []
    for finding in findings:
        if finding.code != "NPU913" or finding.severity != "error" or not _ours(finding):
            out.append(finding)
            continue
        kept, moved = [], []
        for place in _places(finding):
            found = _default_of(functions, place[0], place[1])
            calls = _overriding_calls(tree, *found) if found is not None else None
            if calls:
                moved.extend((call, found[1]) for call in calls)
            else:
                kept.append(place)
        if not moved:
            out.append(finding)
            continue
        from . import catalogue
        from .folding import absorb

        pieces = []
        for call, param in moved:
            shown = " ".join((ast.get_source_segment(text, call) or "").split())
            shown = shown if len(shown) <= 80 else shown[:77] + "..."
            pieces.append(replace(finding, line=call.lineno, column=call.col_offset + 1, source=shown, also=(),
                                  message=catalogue.rule("NPU913").message.format(what=f"`{shown}`") + (
                                      f" ({OVERRIDDEN_DEFAULT.format(param=param)})")))
        pieces.sort()
        if kept:  # (one finding per file and code: the moved places join the rest)
            out.append(absorb(_rebuilt(finding, kept), pieces))
        else:
            out.append(absorb(pieces[0], pieces[1:]) if len(pieces) > 1 else pieces[0])
    return sorted(out)


def _overriding_calls(tree: ast.Module, function, param: str) -> Optional[list]:
    """The calls of `function` in the file when every one passes `param`; None otherwise."""
    a = function.args
    positional = [p.arg for p in (*a.posonlyargs, *a.args)]
    index = positional.index(param) if param in positional else None
    method = bool(positional) and positional[0] in ("self", "cls")
    calls = _calls(tree, function)
    if not calls:
        return None
    for node, args, keywords, bound in calls:
        if not isinstance(node, ast.Call) or node.func is None or any(isinstance(x, ast.Starred) for x in args):
            return None
        if any(k.arg == param for k in keywords):
            continue
        at = index - (1 if method and bound else 0) if index is not None else -1
        if not (0 <= at < len(args)):
            return None
    return [node for node, *_rest in calls]
