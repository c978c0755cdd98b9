"""Info notes the run itself proves unreached on an NPU host become named scopes (issue #16, round 25:
BR#9, BR#19, BR#23, BR#28, BS#15, BT#11; the owner's policy for "the note says an NPU host does
not get there").

Several passes lower a report-only finding to info with a clause that says why an NPU host does
not reach the construct. Where that clause rests on a test the tool PROVES false on an NPU host,
and the code already handles the closed path, the note asks for no work: the round-25 reviewers
read it as false. Where the test is something a user can change on an NPU host (a CLI or config
flag, an environment variable, a package one may install: `triton` is Triton-Ascend there, and
the CuTe-DSL wheels install without a GPU, as probed22.py says), the note stays info, as it is.

This module decides it once, per finding, reading the clause the earlier pass wrote and checking
the closing test again on the code (never the file or the package as a whole):

* probed22.PROBED: a CUDA-only kernel module loaded only inside functions that the importing
  module calls only under a flag: every site shown in the note (no "and N more") is
  "`f`, which the module calls only under `FLAG`", and FLAG is bound once at the importer's module
  level to a test with a conjunct proven false on an NPU host: a compute-capability / SM /
  capability-family test (capgates.capability_test, testscopes.npu_truth: the shim and torch_npu
  answer (0, 0) or None) or a `torch.version.cuda` test, directly or as the single `return` of a
  function of that module called without arguments (`_is_sm_10x()`, a few levels deep). The
  package probe that is also a conjunct (`_cutedsl_runtime_available()`) is not needed: the
  capability test closes the way whatever is installed. probed22 proved the callers skip the
  call (their other path or a clear error) where the flag is False. A flag that is only a
  package probe keeps its note.
* lazyimports21.LOADED_ONLY "loaded only through imports that run only when a feature is
  selected" (BR#9, BR#19, BT#11: a Triton module only an FA3 backend's setup loads): every way
  shown (no "and N more", none the NPU defaults close) is "`f` of its file", and every reference
  to `f` in the library (tests aside) is a call that either comes after a statement of its
  module-level function that always raises on an NPU host (`backend = _available()`, or an
  `if`/`else` each arm of which calls such a function: the function's every way ends in a
  `raise`, its `if`s decided by the capability tests above or testscopes.npu_truth, both arms
  walked otherwise, anything that may return ending the proof), or lies in a module that fails
  to import on every host (a module-level `from pkg.sub.mod import x` whose package `pkg.sub`
  of the run has no `mod`) and that no file of the run imports (a missing module something
  imports may be one a build generates, `_version.py`); at least one call. The project's own "no compatible backend" error
  is the handling. A reference that is no call (handed on as a value), a call with no such
  statement before it, keep the note.
* optparams20's opt-in NVIDIA profiler path and flagargs21.UNSET: code under `if <param>:` of a
  function parameter that defaults to False and that no call in the run sets (every call passes
  False or leaves the default); the False path is the function's own. The reason names the
  `if` (file:line). Only where no user of the package can pass True: a private function (its
  name or a class around it with a leading underscore, or a private module path), a test, a
  module outside any package (no `__init__.py` beside it) or under a top-level folder a build never
  ships (examples/, benchmarks/, scripts/, tools/: BR#28's examples/language/ is a package). A public
  function of an importable package keeps its info note: its users may set the parameter on an
  NPU host (the owner's decision, session 36; tests/test_h86.py, test_h87.py, test_h107.py).

Not decided here, on purpose: `torch.utils._triton.has_triton()`. torch's own source (torch 2.13,
torch/utils/_triton.py `has_triton`) answers False on an NPU host unless a cuda (capability major
>= 7), xpu, mtia device or a Triton "cpu" backend is there, none of which an NPU host has; but
torch_npu's inductor patch (`torch_npu/_inductor/utils.py` `patch_has_triton`) replaces it with
one that also counts an available "npu" device, so with Triton-Ascend installed it may hold: a
user-installable package decides it, and those notes stay info, naming Triton-Ascend.

The earlier pass's clause is opened with "(proven unreached on an NPU host: <the closing test,
file:line>: ...)" (a moot.PHRASES reason that keeps that clause's evidence), and moot.to_scopes
makes the finding a named skipped scope. Whole run, from runplan.whole_run_passes, last (after
platformlayer23.review_startup, whose no-effect scopes come first: every pass that writes these
clauses has run).
"""

from __future__ import annotations

import ast
import dataclasses
import re
from typing import Optional

from . import astcache

UNREACHED = "proven unreached on an NPU host: "

_SITE = re.compile(r"([\w./-]+\.py):(\d+) in `(\w+)`, which the module calls only under `(\w+)`")
_OPTIN = re.compile(r"\(an opt-in NVIDIA profiler path: .*? where `(\w+)` defaults to False and no call in the run sets it")
_UNSET = re.compile(r"\(under a parameter no call of the run sets: `(\w+)`")
_FUNCTIONS = (ast.FunctionDef, ast.AsyncFunctionDef)
_SELECTED = "only through imports that run only when a feature is selected"
_DEPTH = 3


def _text(node: ast.AST) -> str:
    try:
        text = ast.unparse(node)
    except (ValueError, RecursionError):  # pragma: no cover (a tree ast.parse made)
        return "?"
    return text if len(text) <= 80 else text[:77] + "..."


def _single_return(function: ast.AST) -> Optional[ast.AST]:
    """The expression of a function whose body (docstring aside) is one `return <expr>`."""
    body = [s for s in function.body
            if not (isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant) and isinstance(s.value.value, str))]
    if len(body) == 1 and isinstance(body[0], ast.Return) and body[0].value is not None:
        return body[0].value
    return None


def _module_functions(tree: ast.Module) -> dict:
    """Module-level functions defined once (a name bound twice is not read)."""
    seen: dict = {}
    for node in tree.body:
        if isinstance(node, _FUNCTIONS):
            seen[node.name] = node if node.name not in seen else None
        elif isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign, ast.ClassDef)):
            for target in getattr(node, "targets", [getattr(node, "target", None)]):
                if isinstance(target, ast.Name) and target.id in seen:
                    seen[target.id] = None
    return {k: v for k, v in seen.items() if v is not None}


def _closed(node: ast.AST, functions: dict, depth: int = 0) -> Optional[str]:
    """Why one test is proven false on an NPU host (a capability or CUDA-version test), or None."""
    from .capgates import capability_test
    from .testscopes import npu_truth

    if isinstance(node, ast.BoolOp) and isinstance(node.op, ast.And):
        for value in node.values:
            why = _closed(value, functions, depth)
            if why:
                return why
        return None
    if (depth < _DEPTH and isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
            and not node.args and not node.keywords and node.func.id in functions):
        function = functions[node.func.id]
        value = _single_return(function)
        if value is not None:
            inner = _closed(value, functions, depth + 1)
            return f"`{node.func.id}()` (line {function.lineno}: {inner})" if inner else None
    dotted = {astcache.dotted(n) for n in ast.walk(node) if isinstance(n, ast.Attribute)}
    cuda_version = "torch.version.cuda" in dotted
    if (capability_test(node) or cuda_version) and npu_truth(node) is False:
        kind = "a CUDA version test" if cuda_version and not capability_test(node) else "a compute-capability test"
        return f"`{_text(node)}`, {kind} false there (the shim and torch_npu answer (0, 0) or None)"
    return None


def _flag_binding(tree: ast.Module, flag: str) -> Optional[ast.Assign]:
    """The one module-level `FLAG = <test>` of the module (None where bound otherwise or again)."""
    found = []
    for node in astcache.walk(tree):
        if isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if any(isinstance(n, ast.Name) and n.id == flag for t in targets for n in ast.walk(t)):
                found.append(node)
        elif isinstance(node, (ast.Global, ast.Nonlocal)) and flag in node.names:
            return None
    if len(found) == 1 and isinstance(found[0], ast.Assign) and found[0] in tree.body \
            and len(found[0].targets) == 1 and isinstance(found[0].targets[0], ast.Name):
        return found[0]
    return None


class _Trees:
    def __init__(self, results: list, paths: dict) -> None:
        from .modpaths import RunTexts

        self.by_path = {r.relpath: i for i, r in enumerate(results)}
        self.texts = RunTexts(results, paths or {})
        self.cache: dict = {}

    def __call__(self, relpath: str) -> Optional[ast.Module]:
        if relpath not in self.cache:
            i = self.by_path.get(relpath)
            data = self.texts(i) if i is not None else None
            self.cache[relpath] = astcache.parse(data) if data is not None else None
        return self.cache[relpath]


def _probed_reason(finding, trees: _Trees) -> Optional[tuple[int, str]]:
    """(where probed22's clause opens, why every way in is closed), or None."""
    from .probed22 import PROBED

    head = PROBED.split("(")[0]
    at = finding.message.find("(" + head)
    if at < 0:
        return None
    note = finding.message[at:]
    start = note.find(": ", len(head))
    body = note[start + 2:] if start >= 0 else ""
    if re.search(r"\band \d+ more\b", body):
        return None
    sites = _SITE.findall(body)
    # every shown way in must be a call under a module flag (no offered probe, no guarded or
    # name-selected import: those keep the note)
    if not sites or len(re.findall(r"\.py:\d+", body)) != len(sites):
        return None
    parts = []
    for relpath, _line, _function, flag in dict.fromkeys(sites):
        tree = trees(relpath)
        if tree is None:
            return None
        binding = _flag_binding(tree, flag)
        if binding is None:
            return None
        why = _closed(binding.value, _module_functions(tree))
        if why is None:
            return None
        parts.append(f"`{flag}` ({relpath}:{binding.lineno}) holds {why}")
    return at, ("every function that loads it is called only under a module flag false on an NPU host: "
                + "; ".join(parts))


def _param_if(tree: ast.Module, lines: list[int], flag: str) -> Optional[ast.If]:
    """The `if` testing the parameter `flag` (a plain conjunct) that holds the finding's lines,
    in the function that has that parameter, or (optparams20's class used only under it) the
    first such `if` of that function."""
    holders = [n for n in astcache.walk(tree) if isinstance(n, _FUNCTIONS)
               and n.lineno <= min(lines) and max(lines) <= (n.end_lineno or n.lineno)
               and flag in {a.arg for a in (*n.args.posonlyargs, *n.args.args, *n.args.kwonlyargs)}]
    if not holders:
        return None
    function = max(holders, key=lambda n: n.lineno)

    def tests_flag(test: ast.AST) -> bool:
        if isinstance(test, ast.Name):
            return test.id == flag
        return isinstance(test, ast.BoolOp) and isinstance(test.op, ast.And) and any(
            isinstance(v, ast.Name) and v.id == flag for v in test.values)

    ifs = [n for n in ast.walk(function) if isinstance(n, ast.If) and tests_flag(n.test)]
    holding = [n for n in ifs if n.body[0].lineno <= min(lines) and max(lines) <= (n.body[-1].end_lineno or 0)]
    if holding:
        return max(holding, key=lambda n: n.lineno)
    return min(ifs, key=lambda n: n.lineno) if ifs else None


# top-level folders a package's build never ships (setuptools' flat-layout exclusions): what is in
# them is the project's own example or tool, not an API its users import
_UNSHIPPED = frozenset({"example", "examples", "benchmark", "benchmarks", "scripts", "tools"})


def _library_api(tree: ast.Module, gate: ast.If, relpath: str, relpaths: set) -> bool:
    """Whether the package's users may call the function holding `gate` with the parameter set
    (then the way stays open to them on an NPU host, and the note stays info): a public function
    (its name and those of the classes around it without a leading underscore) of a module of an
    importable package (its folder holds an `__init__.py` of the run, no part of its path private,
    not a test, not under a top-level examples/benchmarks/scripts/tools folder)."""
    from .importgates import is_test

    parts = relpath.split("/")
    folder = "/".join(parts[:-1])
    if is_test(relpath) or not folder or f"{folder}/__init__.py" not in relpaths or parts[0] in _UNSHIPPED or any(
            p.startswith("_") and p != "__init__.py" for p in parts):
        return False
    around = [n for n in astcache.walk(tree) if isinstance(n, (*_FUNCTIONS, ast.ClassDef))
              and n.lineno <= gate.lineno <= (n.end_lineno or n.lineno)]
    return bool(around) and not any(n.name.startswith("_") for n in around)


def _param_reason(finding, trees: _Trees, relpaths: set) -> Optional[tuple[int, str]]:
    """(where the earlier pass's clause opens, the `if` that closes the way), or None."""
    match = _OPTIN.search(finding.message) or _UNSET.search(finding.message)
    if match is None:
        return None
    tree = trees(finding.path)
    if tree is None:
        return None
    flag = match.group(1)
    lines = [finding.line, *(line for line, _c, _s in finding.also)]
    gate = _param_if(tree, lines, flag)
    if gate is None or _library_api(tree, gate, finding.path, relpaths):
        return None
    return match.start(), (f"under `if {_text(gate.test)}:` ({finding.path}:{gate.lineno}), a parameter that "
                           "defaults to False and that no call in the run sets")


_WAY = re.compile(r"^([\w./-]+\.py):(\d+) in `(\w+)`")


def _truth(test: ast.AST, functions: dict):
    """A test's value on an NPU host: False where _closed proves it, else testscopes.npu_truth's
    answer (True, False or unknown)."""
    from .testscopes import npu_truth

    if _closed(test, functions):
        return False
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not) and _closed(test.operand, functions):
        return True
    return npu_truth(test)


def _raises(body: list, functions: dict, tests: list, depth: int = 0) -> bool:
    """Whether every way through `body` ends in a `raise` on an NPU host: `if`s decided where
    _truth decides them, both arms otherwise; a `return` (or anything that may return) on the way
    ends it as False. `tests` collects the deciding tests (line, source)."""
    for stmt in body:
        if isinstance(stmt, ast.Raise):
            return stmt.exc is not None
        if isinstance(stmt, ast.If):
            value = _truth(stmt.test, functions)
            if value is False or value is True:
                arm = stmt.body if value is True else stmt.orelse
                why = _closed(stmt.test.operand if value is True and isinstance(stmt.test, ast.UnaryOp)
                              else stmt.test, functions)
                tests.append((stmt.lineno, why or f"`{_text(stmt.test)}`, {str(value).lower()} there"))
                if _raises(arm, functions, tests, depth):
                    return True
                if _returns(arm):
                    return False
                continue
            if stmt.orelse and _raises(stmt.body, functions, tests, depth) and _raises(stmt.orelse, functions, tests, depth):
                return True
            if _returns(stmt.body) or _returns(stmt.orelse):
                return False
            continue
        if _returns([stmt]):
            return False
    return False


def _returns(body: list) -> bool:
    """A statement of `body` may return from the function (nested definitions aside)."""
    stack = list(body)
    while stack:
        node = stack.pop()
        if isinstance(node, (ast.Return, ast.Yield, ast.YieldFrom)):
            return True
        if isinstance(node, (*_FUNCTIONS, ast.Lambda, ast.ClassDef)):
            continue
        stack.extend(ast.iter_child_nodes(node))
    return False


def _raising_call(stmt: ast.stmt, functions: dict) -> Optional[str]:
    """`f(...)` (a bare call or an assignment of one, f a module-level function of the file whose
    every way raises on an NPU host), or an `if`/`else` every arm of which holds such a statement:
    the callee's description, else None."""
    value = stmt.value if isinstance(stmt, (ast.Expr, ast.Assign, ast.AnnAssign)) else None
    if isinstance(value, ast.Call) and isinstance(value.func, ast.Name) and value.func.id in functions:
        function = functions[value.func.id]
        tests: list = []
        body = function.body[1:] if (function.body and isinstance(function.body[0], ast.Expr)
                                     and isinstance(function.body[0].value, ast.Constant)) else function.body
        if _raises(body, functions, tests):
            shown = f": line {tests[0][0]}, {tests[0][1]}" if tests else ""
            return f"`{value.func.id}()` (line {function.lineno}: raises on an NPU host{shown})"
        return None
    if isinstance(stmt, ast.If) and stmt.orelse:
        arms = [[_raising_call(s, functions) for s in arm] for arm in (stmt.body, stmt.orelse)]
        if all(any(arm) for arm in arms):
            return " / ".join(next(a for a in arm if a) for arm in arms)
    return None


def _closed_call(tree: ast.Module, call: ast.Call) -> Optional[str]:
    """Why a call never runs on an NPU host: a statement before it in its module-level function's
    body always raises there."""
    parent = astcache.parents(tree)
    child, up = call, parent.get(id(call))
    while up is not None and not (isinstance(up, _FUNCTIONS) and up in tree.body):
        child, up = up, parent.get(id(up))
    if up is None or child not in up.body:
        return None
    functions = _module_functions(tree)
    for stmt in up.body[:up.body.index(child)]:
        why = _raising_call(stmt, functions)
        if why:
            return f"`{up.name}` calls it (line {call.lineno}) only after line {stmt.lineno}, {why}"
        if _returns([stmt]):
            return None
    return None


def _missing_module(tree: ast.Module, relpaths: set) -> Optional[str]:
    """A module-level `from pkg.sub.mod import x` (outside any `try`/`if`) whose `pkg.sub` is a
    package of the run that has no `mod`: the module fails to import on every host."""
    for stmt in tree.body:
        if not (isinstance(stmt, ast.ImportFrom) and stmt.level == 0 and stmt.module and "." in stmt.module):
            continue
        path = stmt.module.replace(".", "/")
        folder = path.rpartition("/")[0]
        has_folder = any(r.startswith(folder + "/") for r in relpaths)
        if has_folder and f"{path}.py" not in relpaths and not any(r.startswith(path + "/") for r in relpaths) \
                and f"{folder}/__init__.py" in relpaths:
            return f"line {stmt.lineno} imports `{stmt.module}`, a module the package does not have"
    return None


def _orphan(relpath: str, results: list, trees: _Trees) -> bool:
    """No other file of the run names the module (its dotted name, or `from .leaf` / `import leaf`
    beside it): a module with a missing import that something imports may be one a build generates."""
    from .modpaths import module_names

    names = [n.encode() for n in module_names(relpath)]
    folder, _, leaf = relpath[:-3].rpartition("/")
    near = re.compile(rb"from\s+\.\s*" + re.escape(leaf.encode()) + rb"\b|\bimport\s+[^\n]*\b"
                      + re.escape(leaf.encode()) + rb"\b")
    for i, result in enumerate(results):
        if result.relpath == relpath or not result.relpath.endswith(".py"):
            continue
        data = trees.texts(i) or b""
        if any(n in data for n in names):
            return False
        if result.relpath.rpartition("/")[0] == folder and near.search(data):
            return False
    return True


def _selected_reason(finding, trees: _Trees, results: list) -> Optional[tuple[int, str]]:
    """lazyimports21's "loaded only through imports that run only when a feature is selected":
    every shown way is `f` of its file, and every call of `f` in the library lies after a
    statement that always raises on an NPU host (a capability check), or in a module that fails
    to import on any host; at least one call."""
    from .importgates import is_test
    from .lazyimports21 import LOADED_ONLY

    head = LOADED_ONLY.split("{")[0]
    at = finding.message.find("(" + head)
    if at < 0 or "ways the NPU defaults close" in finding.message[at:]:
        return None
    end = finding.message.find("fails there: ", at)
    if end < 0:
        return None
    shown = finding.message[end + len("fails there: "):].rstrip(")").split("; ")
    if any(re.match(r"and \d+ more", w) for w in shown):
        return None
    names = set()
    for way in shown:
        match = _WAY.match(way)
        if match is None:
            return None
        tree = trees(match.group(1))
        if tree is None or match.group(3) not in _module_functions(tree):
            return None
        names.add(match.group(3))
    relpaths = {r.relpath for r in results}
    closed = []
    for result in results:
        relpath = result.relpath
        if not relpath.endswith(".py") or is_test(relpath):
            continue
        data = trees.texts(trees.by_path[relpath])
        if not data or not any(n.encode() in data for n in names):
            continue
        tree = trees(relpath)
        if tree is None:
            return None
        missing = None
        for node in astcache.walk(tree):
            name = node.id if isinstance(node, ast.Name) else node.attr if isinstance(node, ast.Attribute) else None
            if name not in names:
                continue
            call = astcache.parents(tree).get(id(node))
            if not (isinstance(call, ast.Call) and call.func is node):
                return None  # (handed on as a value: its callers are not seen)
            why = _closed_call(tree, call)
            if why is None:
                missing = missing or (_missing_module(tree, relpaths) if _orphan(relpath, results, trees) else None)
                if missing is None:
                    return None
                why = f"`{name}` called at line {call.lineno} of a module that fails to import on any host ({missing})"
            closed.append(f"{relpath}:{call.lineno}: {why}")
    if not closed:
        return None
    return at, ("every call of " + ", ".join(f"`{n}`" for n in sorted(names)) + " that loads it is closed there: "
                + "; ".join(dict.fromkeys(closed)))


def review(results: list, paths: Optional[dict] = None) -> list:
    """The info notes above become named scopes (see the module's doc)."""
    from .moot import is_moot, named, to_scopes

    def candidate(f) -> bool:
        return (f.severity == "info" and not f.fixable and f.cell is None and not is_moot(f) and not named(f)
                and ("which the module calls only under `" in f.message or _OPTIN.search(f.message) is not None
                     or _UNSET.search(f.message) is not None or _SELECTED in f.message))

    indices = [i for i, r in enumerate(results) if r.relpath.endswith(".py") and any(candidate(f) for f in r.findings)]
    if not indices:
        return results
    trees = _Trees(results, paths or {})
    relpaths = {r.relpath for r in results}
    out = list(results)
    changed = []
    for i in indices:
        findings = list(results[i].findings)
        for index, f in enumerate(findings):
            if not candidate(f):
                continue
            found = _probed_reason(f, trees) or _param_reason(f, trees, relpaths) or _selected_reason(f, trees, results)
            if found is None:
                continue
            # (the earlier pass's clause goes inside ours: the scope's reason keeps its evidence)
            at, reason = found
            message = f"{f.message[:at]}({UNREACHED}{reason}: {f.message[at + 1:]}"
            findings[index] = dataclasses.replace(f, message=message)
        if findings != results[i].findings:
            out[i] = dataclasses.replace(results[i], findings=findings)
            changed.append(i)
    for i, result in zip(changed, to_scopes([out[i] for i in changed])):
        out[i] = result
    return out
