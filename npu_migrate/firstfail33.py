"""Code an NPU host never reaches because a call, an import or a skip before it fails or stops
first (issue #16, round 32 audits GC#24, GC#40, GC#26, GC#38).

Whole run (runplan.whole_run_passes, after ascendmodels32.py). Three shapes, each a named "not
run" scope (moot.PHRASES) that names the earlier failure, never a dropped finding:

* **After a warm-up call that fails first** (`AFTER_FAILING_CALL`, GC#24, GC#40). A function's
  statement, reached whenever the function runs (its own body, the body of a `try` or `with` in
  it, or a `for _ in range(N)` loop whose `N` is a positive literal or a parameter whose positive
  literal default no call of the file replaces), calls a callable that always fails on an NPU host:
  a local lambda or nested function, or directly a function imported from another module of the
  run, that
  - launches, unconditionally (no `return` before it, not under an `if`), a `@triton.jit` kernel
    of its own module while that module's CUDA Triton kernels are reported as an open NPU910
    error (vLLM's `selective_state_update`, launched by a benchmark's eager warm-up before the
    graph capture it times); or
  - always calls a name its module imports only under an `if` an NPU host never takes
    (fp8cpu.cannot_run: `cutlass_fused_experts_fp8` calls `prepare_moe_input`, bound only
    `if _is_cuda:`), where that import itself is reported (a finding or a named scope at its line).
  A function rules/vllm_ascend.toml says the plugin rebinds (`gumbel_sample`, `apply_penalties`) is
  never such a callable. The report-only findings after that statement, in the rest of its block, are never reached on an
  NPU host. A module-level `import triton` whose every read lies there is imported by Triton-Ascend
  and read only by that code: "runs as written" (TRITON_IMPORT, moot.AS_WRITTEN). The span goes on past an enclosing `for` (a loop does not catch), past a `try` whose
  every handler ends in `return` or `raise` (its `finally`, handlers and `else` left out), and
  stops at a `with` (a context manager may suppress the failure) and at the function's end. Kept:
  a callable that may succeed (portable code, a kernel module whose NPU910 is not an open error,
  a launch behind an `if` or after a `return`), a loop whose count is not known positive, a
  finding before the call, one after a `try` whose handler goes on.
* **In a module that imports a module of its own package that does not exist** (`MISSING_MODULE`,
  GC#26). A module-level, unguarded import (`from colossalai.inference.async_manager import
  start_dynamic_batching`) of a dotted name whose first part is a package of the run (its
  `__init__.py` in the run, in an import root: the run's root or a `src/`/`python/` folder that
  holds the project's packaging file, `setup.py`, `pyproject.toml`, `setup.cfg` or `PKG-INFO`, so
  that the tree is the whole package, not a partial copy) and one of whose parts exists neither in
  the run nor on disk (no `.py`, folder, stub or compiled file of that name in the parent folder) fails on
  every host: the report-only findings after that import are never reached. Kept: a name the
  project's build files or `.gitignore` mention (a compiled extension such as `vllm._C`, a
  generated `_version.py`), a parent whose `__init__.py` edits `sys.modules`, a guarded import,
  an import of a package outside the run, a run that does not hold the package's `__init__.py`.
* **A test-support helper only skipped test modules use** (`_SkippedCallers`, GC#38). A
  module-level function of a module under `tests/` that is not itself a test module
  (`tests/kernels/quant_utils.py`), which its own module never names, and whose name every other
  file of the run that holds it is a test module using it only inside a scope testscopes skips on
  an NPU host (a module-level `if capability is None or capability < (9, 0): pytest.skip(...,
  allow_module_level=True)`, a skipped test): its report-only findings are "in a helper only test
  modules skipped on an NPU host use", naming them and the skip. Kept: a helper a test that runs
  there uses, one a library module, a conftest or another helper names, one named in a string.
"""

from __future__ import annotations

import ast
import functools
import os
import re
from typing import Optional

from . import astcache

AFTER_FAILING_CALL = "after a call that fails first on an NPU host"
MISSING_MODULE = "in a module that cannot be imported on any host"
TRITON_IMPORT = "a Triton import read only after a call that fails first on an NPU host"
_FUNCTIONS = (ast.FunctionDef, ast.AsyncFunctionDef)
_CONDITIONAL = (ast.BoolOp, ast.IfExp, ast.Lambda, ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp,
                ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.If, ast.While, ast.For, ast.AsyncFor,
                ast.Try, ast.With, ast.AsyncWith, ast.Match)
_EXITS = (ast.Return, ast.Yield, ast.YieldFrom, ast.Break, ast.Continue)
_BUILD_FILES = ("setup.py", "setup.cfg", "pyproject.toml", "CMakeLists.txt", ".gitignore", "MANIFEST.in")
_MAX_DEPTH = 3
_IDENTIFIER = re.compile(rb"[A-Za-z_][A-Za-z0-9_]*")
_SUPPORT = re.compile(r"(^|/)tests?/")
_TEST_MODULE = re.compile(r"(^|/)(test_[^/]*|[^/]*_test|conftest)\.py$")
_PACKAGING = ("setup.py", "pyproject.toml", "setup.cfg", "PKG-INFO")
_MAIN = re.compile(rb"^if\s+__name__\s*==\s*[\"']__main__[\"']", re.MULTILINE)
_SCRIPT_PATH = re.compile(r"(^|/)(tests?|benchmarks?|bench)/|(^|/)(test_|bench(mark)?_)[^/]*\.py$")


# ----------------------------------------------------------------------------- shared helpers
def _calls(stmt: ast.AST):
    """The calls a simple statement makes whenever it runs (not inside a condition, a short
    circuit, a lambda or a comprehension)."""
    stack = [stmt]
    while stack:
        node = stack.pop()
        if node is not stmt and isinstance(node, _CONDITIONAL):
            continue
        if isinstance(node, ast.Call):
            yield node
        stack.extend(ast.iter_child_nodes(node))


def _has_exit(stmt: ast.AST) -> bool:
    """A `return`, `yield`, `break` or `continue` of the statement itself (nested functions left out)."""
    stack = [stmt]
    while stack:
        node = stack.pop()
        if isinstance(node, _EXITS):
            return True
        stack.extend(c for c in ast.iter_child_nodes(node) if not isinstance(c, (*_FUNCTIONS, ast.Lambda, ast.ClassDef)))
    return False


def _positive(node: ast.AST, function: ast.AST, callers: list) -> bool:
    """`range(N)` runs its body: N a positive int literal, or a parameter of `function` whose default
    is one and that no call in `callers` passes."""
    if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "range"
            and len(node.args) == 1 and not node.keywords):
        return False
    count = node.args[0]
    if isinstance(count, ast.Constant):
        return type(count.value) is int and count.value > 0
    if callers is None or not (isinstance(count, ast.Name) and isinstance(function, _FUNCTIONS)):
        return False
    args = function.args
    positional = [*args.posonlyargs, *args.args]
    defaults = dict(zip([a.arg for a in positional][len(positional) - len(args.defaults):], args.defaults))
    defaults.update((a.arg, d) for a, d in zip(args.kwonlyargs, args.kw_defaults) if d is not None)
    default = defaults.get(count.id)
    if not (isinstance(default, ast.Constant) and type(default.value) is int and default.value > 0):
        return False
    if any(isinstance(n, ast.Name) and n.id == count.id and not isinstance(n.ctx, ast.Load) for n in ast.walk(function)):
        return False  # (the count is assigned again before or inside the loop)
    index = next((k for k, a in enumerate(positional) if a.arg == count.id), None)
    for call in callers:
        if any(k.arg is None or k.arg == count.id for k in call.keywords) or \
                any(isinstance(a, ast.Starred) for a in call.args):
            return False
        skip = 1 if positional and positional[0].arg in ("self", "cls") else 0
        if index is not None and len(call.args) + skip > index:
            return False
    return True


# ----------------------------------------------------------------------------- callables that fail
def import_origin(results: list, modules, i: int, tree: ast.Module, name: str) -> Optional[tuple]:
    """(j, real): the module of the run (index j, not i) and the name there that module i's top-level
    `from ... import` binds to `name` (the last such import), or None (also read by stubcalls34)."""
    from .modpaths import resolve_relative

    origin = None
    for node in tree.body:
        if isinstance(node, ast.ImportFrom):
            for alias in node.names:
                if (alias.asname or alias.name) == name:
                    origin = (node.module or "", node.level, alias.name)
    if origin is None:
        return None
    module, dots, real = origin
    if dots:
        stem = resolve_relative(results[i].relpath, dots, module)
        j = next((k for k, r in enumerate(results) if r.relpath in (stem + ".py", stem + "/__init__.py")), None)
    else:
        j = modules.by_name.get(module)
    if j is None or j == i:
        return None
    return j, real


class _Failing:
    """Which callables of the run always fail on an NPU host (module doc), with why."""

    def __init__(self, results: list, text_of, modules) -> None:
        self.results, self.text_of, self.modules = results, text_of, modules
        self.memo: dict = {}
        self.predicates: Optional[frozenset] = None
        self.ops = None

    def _false_predicates(self) -> frozenset:
        if self.predicates is None:
            from .importgates import false_predicates

            python = [j for j, r in enumerate(self.results) if r.relpath.endswith(".py")]
            self.predicates = false_predicates(python, self.text_of)
        return self.predicates

    def compiled_op(self, call: ast.Call, i: int, tree: ast.Module) -> Optional[str]:
        """Why a test's or benchmark's call of a CUDA-built compiled op fails there (opcalls34.py)."""
        if self.ops is None:
            from .opcalls34 import CompiledOpCalls

            self.ops = CompiledOpCalls(self.results, self.modules, _rebound_names())
        return self.ops.why(call, i, tree)

    def imported(self, i: int, tree: ast.Module, name: str) -> Optional[str]:
        """Why `name`, imported by module `i` from another module of the run, always fails there."""
        origin = import_origin(self.results, self.modules, i, tree, name)
        if origin is None:
            return None
        j, real = origin
        key = (j, real)
        if real in _rebound_names():
            return None  # (a function vllm-ascend rebinds before use: the call may reach the plugin's own)
        if key not in self.memo:
            self.memo[key] = self._defined(j, real)
        return self.memo[key]

    def _defined(self, j: int, name: str) -> Optional[str]:
        tree = self.modules.tree(j)
        function = next((n for n in (tree.body if tree is not None else [])
                         if isinstance(n, _FUNCTIONS) and n.name == name), None)
        if function is None or sum(1 for n in tree.body if isinstance(n, (*_FUNCTIONS, ast.ClassDef)) and n.name == name) != 1:
            return None
        where = f"`{name}` ({self.results[j].relpath}:{function.lineno})"
        kernel = self._launch(j, tree, function)
        if kernel is not None:
            return f"{where}, which launches the Triton kernel `{kernel[0]}`, reported there (NPU910, line {kernel[1]})"
        return self._gated_call(j, tree, function, where)

    def _launch(self, j: int, tree: ast.Module, function: ast.AST) -> Optional[tuple]:
        """(kernel, NPU910 line) of a `@triton.jit` kernel of the module the function launches
        unconditionally, where the module's NPU910 is an open error."""
        from .moot import is_open

        reported = next((f for f in self.results[j].findings
                         if f.code == "NPU910" and is_open(f) and f.severity == "error"), None)
        if reported is None:
            return None
        kernels = {n.name for n in tree.body if isinstance(n, _FUNCTIONS) and any(
            (astcache.dotted(d.func if isinstance(d, ast.Call) else d) or "").startswith("triton.")
            for d in n.decorator_list)}
        if not kernels:
            return None
        body = list(function.body)
        while body:
            stmt = body.pop(0)
            if isinstance(stmt, (ast.With, ast.AsyncWith)):
                body[:0] = stmt.body
                continue
            if isinstance(stmt, _CONDITIONAL) or isinstance(stmt, ast.Raise):
                if _has_exit(stmt) or isinstance(stmt, ast.Raise):
                    return None
                continue
            for call in _calls(stmt):
                func = call.func
                if isinstance(func, ast.Subscript) and isinstance(func.value, ast.Name) and func.value.id in kernels:
                    return func.value.id, reported.line
            if isinstance(stmt, ast.Return) or _has_exit(stmt):
                return None
        return None

    def _gated_call(self, j: int, tree: ast.Module, function: ast.AST, where: str) -> Optional[str]:
        from .fp8cpu import cannot_run, gated_names

        gated = gated_names(tree, self._false_predicates())
        if not gated or not function.body:
            return None
        why = cannot_run(tree, function.body[0].lineno, gated)
        match = re.search(r"always calls `(\w+)`", why or "")
        if not match:
            return None
        spans = [(s.lineno, s.end_lineno or s.lineno) for stmt in tree.body if isinstance(stmt, ast.If)
                 for s in stmt.body if isinstance(s, (ast.Import, ast.ImportFrom))
                 and any((a.asname or a.name).split(".")[0] == match.group(1) for a in s.names)]
        result = self.results[j]
        if not spans or not (any(a <= line <= b for a, b in spans for f in result.findings if not f.fixable
                                 for line in (f.line, *(p[0] for p in f.also)))
                             or any(a <= first <= b or first <= a <= last for a, b in spans
                                    for first, last, _why in result.skipped_scopes)):
            return None  # (the import that fails is reported nowhere: keep the later finding)
        return f"{where}, which always calls `{match.group(1)}`, imported only under an `if` an NPU host does not take " \
               f"(line {spans[0][0]}, reported or named there)"


@functools.lru_cache(maxsize=1)
def _rebound_names() -> frozenset:
    """The function names rules/vllm_ascend.toml says the plugin rebinds (its [[functions]] entries)."""
    from . import catalogue

    names = set()
    for entry in catalogue.read_table("vllm_ascend.toml").get("functions", ()):
        names.update(entry.get("names", ()))
        for other in entry.get("rebound_in", ()):
            names.update(other.get("names", ()))
    return frozenset(names)


def _local_callables(function: ast.AST) -> dict:
    """{name: node} of the lambdas and nested functions the function binds once."""
    out: dict = {}
    counts: dict = {}
    for node in ast.walk(function):
        if node is function:
            continue
        if isinstance(node, _FUNCTIONS):
            out[node.name] = node
            counts[node.name] = counts.get(node.name, 0) + 1
        elif isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            name = node.targets[0].id
            counts[name] = counts.get(name, 0) + 1
            if isinstance(node.value, ast.Lambda):
                out[name] = node.value
        elif isinstance(node, (ast.AugAssign, ast.AnnAssign)) and isinstance(node.target, ast.Name):
            counts[node.target.id] = counts.get(node.target.id, 0) + 2
    return {n: v for n, v in out.items() if counts.get(n) == 1}


def _fails(call: ast.Call, i: int, tree: ast.Module, function: ast.AST, failing: _Failing, depth: int) -> Optional[str]:
    """Why the call always fails on an NPU host (module doc), or None."""
    if isinstance(call.func, ast.Attribute) and depth <= _MAX_DEPTH:
        return failing.compiled_op(call, i, tree)  # (a call of the project's CUDA-built `_C` op: opcalls34.py)
    if not isinstance(call.func, ast.Name) or depth > _MAX_DEPTH:
        return None
    name = call.func.id
    local = _local_callables(function)
    if name in local:
        target = local[name]
        body = [ast.Expr(target.body)] if isinstance(target, ast.Lambda) else target.body
        inner = _first_failure(body, i, tree, target, failing, depth + 1, None)
        return None if inner is None else f"`{name}` calls {inner[1]}"
    if any(isinstance(a, ast.arg) and a.arg == name for a in ast.walk(function.args)):
        return None
    why = failing.imported(i, tree, name)
    return why


def _first_failure(body: list, i: int, tree: ast.Module, function: ast.AST, failing: _Failing, depth: int,
                   callers: list) -> Optional[tuple]:
    """(path, why) of the first statement of `body` (walked into `try`/`with` bodies and loops that
    run) that always fails: `path` the (block, index) pairs from the outside in."""
    for index, stmt in enumerate(body):
        if isinstance(stmt, (ast.Try, ast.With, ast.AsyncWith)) or (
                isinstance(stmt, ast.For) and _positive(stmt.iter, function, callers)):
            found = _first_failure(stmt.body, i, tree, function, failing, depth, callers)
            if found is not None:
                return [(body, index), *found[0]], found[1]
            if _has_exit(stmt):
                return None
            continue
        if isinstance(stmt, _CONDITIONAL):
            if _has_exit(stmt):
                return None
            continue
        for call in _calls(stmt):
            why = _fails(call, i, tree, function, failing, depth)
            if why is not None:
                return [(body, index)], why
        if _has_exit(stmt) or isinstance(stmt, ast.Raise):
            return None
    return None


def _span(path: list, function: ast.AST) -> list:
    """The line ranges never reached after the failing statement (module doc)."""
    spans = []
    for level in range(len(path) - 1, -1, -1):
        block, index = path[level]
        rest = block[index + 1:]
        if rest:
            spans.append((rest[0].lineno if not getattr(rest[0], "decorator_list", None)
                          else min(d.lineno for d in rest[0].decorator_list), block[-1].end_lineno or block[-1].lineno))
        if level == 0:
            break
        holder = path[level - 1][0][path[level - 1][1]]
        if isinstance(holder, (ast.With, ast.AsyncWith)):
            break
        if isinstance(holder, ast.Try):
            if not holder.handlers or not all(h.body and isinstance(h.body[-1], (ast.Return, ast.Raise))
                                              for h in holder.handlers):
                break
    return spans


def _warmup_spans(i: int, tree: ast.Module, lines: set, failing: _Failing, data: bytes, relpath: str) -> list:
    """(first, last, why) of the spans of the file's functions after a call that fails first."""
    out = []
    # (a script's or test's own calls are all its functions' calls: a loop count they never pass is its default)
    script = bool(_MAIN.search(data)) or bool(_SCRIPT_PATH.search(relpath))
    # (a function handed on by name, `partial(bench, num_warmup=0)`, may be called with any count)
    funcs = {id(c.func) for c in astcache.nodes(tree, (ast.Call,))}
    passed = {n.id for n in astcache.walk(tree) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)
              and id(n) not in funcs} | {n.attr for n in astcache.walk(tree) if isinstance(n, ast.Attribute)
                                        and id(n) not in funcs}
    for function in astcache.nodes(tree, _FUNCTIONS):
        first, last = function.lineno, function.end_lineno or function.lineno
        if not any(first < line <= last for line in lines):
            continue
        callers = [c for c in astcache.nodes(tree, (ast.Call,))
                   if isinstance(c.func, (ast.Name, ast.Attribute))
                   and (c.func.id if isinstance(c.func, ast.Name) else c.func.attr) == function.name] \
            if script and function.name not in passed else None
        found = _first_failure(function.body, i, tree, function, failing, 0, callers)
        if found is None:
            continue
        path, why = found
        block, index = path[-1]
        line = block[index].lineno
        for a, b in _span(path, function):
            out.append((a, b, f"{AFTER_FAILING_CALL}: the call at line {line} fails there first: {why}"))
    return out


def _triton_imports_read_after(tree: ast.Module, spans: list) -> list:
    """(line, line, why) of the module-level Triton imports (`import triton`, `import triton.testing`)
    whose every read in the file lies in those spans: Triton-Ascend imports them on an NPU host, and
    what reads them is never reached there (module doc, GC#24)."""
    if not spans:
        return []
    out = []
    for node in tree.body:
        if isinstance(node, ast.Import):
            names = {(a.asname or a.name).split(".")[0] for a in node.names if a.name.split(".")[0] == "triton"}
            if len(names) != len(node.names):
                continue
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and (node.module or "").split(".")[0] == "triton":
            names = {a.asname or a.name for a in node.names}
        else:
            continue
        reads = [n.lineno for n in astcache.walk(tree) if isinstance(n, ast.Name) and n.id in names]
        where = [next((s for s in spans if s[0] <= line <= s[1]), None) for line in reads]
        if reads and all(where):
            out.append((node.lineno, node.end_lineno or node.lineno,
                        f"{TRITON_IMPORT}: its reads (line{'s' if len(reads) > 1 else ''} "
                        f"{', '.join(map(str, sorted(set(reads))))}) come {where[0][2]}"))
    return out


# ----------------------------------------------------------------------------- missing own modules
def _missing_module(i: int, tree: ast.Module, results: list, paths: dict, relpaths: set) -> Optional[tuple]:
    """(line, module, missing part) of the first module-level import of a module of the run's own
    package that does not exist (module doc), or None."""
    from .modpaths import resolve_relative

    relpath = results[i].relpath
    full = paths.get(relpath)
    if not full:
        return None
    root = full[: len(full) - len(relpath)] if full.replace(os.sep, "/").endswith(relpath) else None
    if root is None:
        return None
    for node in tree.body:
        names = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            names = [resolve_relative(relpath, node.level, node.module or "").replace("/", ".")
                     if node.level else (node.module or "")]
        for dotted in names:
            found = _missing_part(dotted, relpath, root, relpaths, relative=isinstance(node, ast.ImportFrom) and node.level)
            if found is not None:
                return node.lineno, dotted, found
    return None


def _missing_part(dotted: str, importer: str, root: str, relpaths: set, relative) -> Optional[str]:
    parts = [p for p in dotted.split(".") if p]
    if len(parts) < 2:
        return None
    if relative:
        base = ""
    else:
        folders = importer.split("/")[:-1]
        # (an absolute import starts at an import root: the run's root or a `src/`/`python/` folder, not
        # itself a package, holding the first part's package; `inference/triton/` beside the importer is not
        # `triton`, and a namespace folder (no `__init__.py`) is no root)
        base = next((prefix for prefix in ("/".join(folders[:k]) + "/" if k else "" for k in range(len(folders), -1, -1))
                     if prefix in ("", "src/", "python/") or prefix.endswith(("/src/", "/python/"))
                     if prefix + "__init__.py" not in relpaths and prefix + parts[0] + "/__init__.py" in relpaths), None)
        if base is None:
            return None
    if base + parts[0] + "/__init__.py" not in relpaths:
        return None
    if not any(os.path.isfile(os.path.join(root, base, name)) for name in _PACKAGING):
        return None  # (a bare folder may be a partial copy of its package: only a packaged project is whole)
    current = base + parts[0]
    for part in parts[1:]:
        if f"{current}/{part}.py" in relpaths or f"{current}/{part}/__init__.py" in relpaths:
            current = f"{current}/{part}"
            continue
        folder = os.path.join(root, current)
        try:
            entries = os.listdir(folder)
        except OSError:
            return None
        if any(e == part or e.startswith(part + ".") for e in entries):
            return None  # (on disk: a compiled module, a stub, a namespace folder, a file the run left out)
        try:
            with open(os.path.join(folder, "__init__.py"), "rb") as handle:
                if b"sys.modules" in handle.read():
                    return None
        except OSError:
            return None
        if _named_in_build_files(root, current, part):
            return None
        return f"{current}/{part}"
    return None


def _named_in_build_files(root: str, folder: str, part: str) -> bool:
    """Whether a build file or `.gitignore` of the project names `part` (it may be built or generated)."""
    word = re.compile(rb"\b" + re.escape(part.encode()) + rb"\b")
    places = {root}
    steps = folder.split("/")
    for k in range(len(steps) + 1):
        places.add(os.path.join(root, *steps[:k]))
    places.add(os.path.dirname(os.path.normpath(root)))
    for place in places:
        for name in _BUILD_FILES:
            try:
                with open(os.path.join(place, name), "rb") as handle:
                    if word.search(handle.read()):
                        return True
            except OSError:
                continue
    return False


# ----------------------------------------------------------------------------- helpers of skipped modules
class _SkippedCallers:
    """Test-support helpers whose every use in the run lies in test modules skipped off an NPU host
    (module doc, GC#38)."""

    def __init__(self, results: list, text_of, paths: dict, candidates: list) -> None:
        self.results, self.text_of, self.paths = results, text_of, paths
        self.python = [j for j, r in enumerate(results) if r.relpath.endswith(".py")]
        self.scopes: dict = {}
        self.candidates = [i for i in candidates if _SUPPORT.search(results[i].relpath)
                           and not _TEST_MODULE.search(results[i].relpath)]
        self.mentions: Optional[dict] = None

    def _index(self) -> dict:
        """{name: files naming it} for the module-level functions of the candidate support modules
        that hold an open finding: one scan of the run's files, not one per name."""
        if self.mentions is None:
            from .firstfail22 import finding_lines
            from .modpaths import result_bytes
            from .moot import is_open

            names: set = set()
            for i in self.candidates:
                lines = {line for f in self.results[i].findings if is_open(f) for line in finding_lines(f)}
                tree = astcache.parse(self.text_of(i) or b"")
                names.update(n.name for n in (tree.body if tree is not None else []) if isinstance(n, _FUNCTIONS)
                             and any(n.lineno <= line <= (n.end_lineno or n.lineno) for line in lines))
            self.mentions = {name: [] for name in names}
            if names:
                for j in self.python:
                    data = result_bytes(self.results[j], self.paths) or b""  # (not kept: a scan of every file)
                    for word in set(_IDENTIFIER.findall(data)):
                        held = self.mentions.get(word.decode("ascii", "replace"))
                        if held is not None:
                            held.append(j)
        return self.mentions

    def _skip_scopes(self, j: int) -> list:
        if j not in self.scopes:
            from .testscopes import cuda_only_test_scopes

            text = (self.text_of(j) or b"").decode("utf-8", "replace")
            self.scopes[j] = cuda_only_test_scopes(text) if "skip" in text else []
        return self.scopes[j]

    def spans(self, i: int, tree: ast.Module, lines: set) -> list:
        """(first, last, why) of the module-level functions of test-support module `i` holding one
        of `lines` that only such skipped modules use."""
        relpath = self.results[i].relpath
        if not _SUPPORT.search(relpath) or _TEST_MODULE.search(relpath):
            return []
        own = {n.id for n in astcache.walk(tree) if isinstance(n, ast.Name)}
        own |= {n.attr for n in astcache.walk(tree) if isinstance(n, ast.Attribute)}
        strings = {n.value for n in astcache.walk(tree) if isinstance(n, ast.Constant) and isinstance(n.value, str)}
        out = []
        for function in tree.body:
            if not isinstance(function, _FUNCTIONS) or function.name in own or function.name in strings:
                continue  # (the module itself calls, passes or names it)
            first, last = min([function.lineno, *(d.lineno for d in function.decorator_list)]), function.end_lineno
            if not any(first <= line <= last for line in lines):
                continue
            users = self._users(i, function.name)
            if users:
                out.append((first, last, f"in a helper only test modules skipped on an NPU host use: {users}"))
        return out

    def _users(self, i: int, name: str) -> Optional[str]:
        """The users of `name` (each skipped from a line before every use), or None."""
        from .modpaths import result_bytes

        shown = []
        for j in self._index().get(name, ()):
            if j == i:
                continue
            data = result_bytes(self.results[j], self.paths) or b""
            if not _TEST_MODULE.search(self.results[j].relpath):
                return None  # (a library module, a conftest or another helper names it)
            tree = astcache.parse(data)
            if tree is None:
                return None
            uses = [n.lineno for n in astcache.walk(tree)
                    if (isinstance(n, ast.Name) and n.id == name) or (isinstance(n, ast.Attribute) and n.attr == name)
                    or (isinstance(n, ast.Constant) and n.value == name)]
            imports = {n.lineno for n in astcache.walk(tree) if isinstance(n, (ast.Import, ast.ImportFrom))
                       and any((a.asname or a.name) == name for a in n.names)}
            uses = [line for line in uses if line not in imports]
            scopes = self._skip_scopes(j)
            why = [next((w for a, b, w in scopes if a <= line <= b), None) for line in uses]
            if not uses or not all(why):
                return None
            shown.append(f"{self.results[j].relpath} (skipped there: `{why[0]}`)")
        return ", ".join(shown[:3]) + (f" and {len(shown) - 3} more" if len(shown) > 3 else "") if shown else None


# ----------------------------------------------------------------------------- the pass
def review(results: list, paths: dict) -> list:
    """The results, with the report-only places after a failing warm-up call or in a module whose
    own-package import does not exist made named scopes (this module's docstring)."""
    from .envskips29 import lower_result
    from .firstfail22 import finding_lines
    from .modpaths import RunModules, RunTexts, open_python
    from .moot import is_open, to_scopes

    candidates = open_python(results, is_open)
    if not candidates:
        return results
    text_of = RunTexts(results, paths)
    modules = RunModules(results, text_of)
    failing = _Failing(results, text_of, modules)
    relpaths = {r.relpath for r in results}
    skipped_callers = None
    out = list(results)
    changed = []
    for i in candidates:
        data = text_of(i)
        if not data or b"import" not in data:
            continue
        tree = modules.tree(i)
        if tree is None:
            continue
        lines = {line for f in results[i].findings if is_open(f) for line in finding_lines(f)}
        blocks = []
        missing = _missing_module(i, tree, results, paths, relpaths)
        if missing is not None:
            line, dotted, part = missing
            blocks.append((line + 1, max(lines), f"{MISSING_MODULE}: its import of `{dotted}` at line {line} fails "
                                                 f"first everywhere (no module `{part}` in the package)"))
        if b"def " in data:
            try:
                blocks += _warmup_spans(i, tree, lines, failing, data, results[i].relpath)
            except RecursionError:
                pass
        if skipped_callers is None:
            skipped_callers = _SkippedCallers(results, text_of, paths, candidates)
        blocks += skipped_callers.spans(i, tree, lines)
        if not blocks:
            continue
        blocks += _triton_imports_read_after(tree, [b for b in blocks if b[2].startswith(AFTER_FAILING_CALL)])

        def reason_of(line: int, blocks=blocks) -> Optional[str]:
            return next((why for a, b, why in blocks if a <= line <= b), None)

        lowered = lower_result(out[i], reason_of, is_open)
        if lowered is not out[i]:
            out[i] = lowered
            changed.append(i)
    for i, result in zip(changed, to_scopes([out[i] for i in changed])):
        out[i] = result
    return out


# public names for stubcalls34.py (the walk to the first failing statement, and the span past it)
first_failure = _first_failure
span = _span
