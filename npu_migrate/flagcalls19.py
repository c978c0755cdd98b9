"""Code gated by a flag another module of the project computes, by calling a project function that
returns False on an NPU host (issue #16, round-19 precision wave: "backends and methods chosen in
another file under a condition false on an NPU host"). Whole run, from runplan.whole_run_passes,
after flags16.py.

flags16.py reads flags bound DIRECTLY to the project's platform predicate (`_is_cuda = is_cuda()`).
This pass goes one step further: a module-level flag bound to a call of a project function whose
every `return` on an NPU host is False, read from another module:

    # configurer.py
    def _compute_enable_deep_gemm():
        if get_device_sm() < 90:
            return False
        try:
            import deep_gemm          # no NPU build (scopes.toml probed_without_npu_build)
        except ImportError:
            return False              # <- the only way out on an NPU host
        return envs.ENABLE.get()      # (an env override, reached only after the import succeeds)
    ENABLE_JIT_DEEPGEMM = _compute_enable_deep_gemm()
    DEEPGEMM_BLACKWELL = ENABLE_JIT_DEEPGEMM and is_blackwell_supported()

    # another module
    from pkg.layers import deep_gemm_wrapper          # (its __init__ re-exports the flag: `import *`)
    if deep_gemm_wrapper.ENABLE_JIT_DEEPGEMM: ...      # never taken on an NPU host
    assert deep_gemm_wrapper.ENABLE_JIT_DEEPGEMM       # the rest of the function never runs there

The function is read by a small interpreter (`_Run.call`): statements in order, `if`s decided where
testscopes.npu_truth (or a value computed here) decides them, both arms walked otherwise; a `try`
whose body imports a package with no NPU build (testscopes.absent_packages) goes to its
`except ImportError`/`Exception` handler; locals bound by plain assignments are followed; any
`raise`, loop or other statement holding a `return` makes the answer unknown. Calls followed are
those of the project's own functions, their parameters unknown whatever a call passes (round 21:
`triton_x_supported(x)` returning `HAS_TRITON and current_platform.is_cuda() and x.is_cuda`,
`is_cuda_version_at_least(12, 8)`: False there for any argument), found through the module's
top-level imports (`from M import f`, `from M import *`, `import M as m`), each name bound once.
The flag is strict: the name must be bound exactly once in its module, and no file of the run may
assign `.NAME = ...` to anything but `False` (`deep_gemm_wrapper.DEEPGEMM_SCALE_UE8M0 = False` is
fine; an assignment of True or of a computed value could turn it on, and the flag is not read).

A parameter of the function holding the test is read as False where every call of the run passes
it a value false there (flagargs21.py: `if scale_ue8m0:` whose callers pass `wrapper.FLAG`).

Two constructs are decided, only when what decides them reads another module (a flag bound there, a
project function defined there, or this module's own flag bound to one: `USE_ROWWISE_MM =
use_rowwise_mm()` whose body returns False unless the imported `_is_hip`); a condition the file
decides alone is flags16's/importgates' work:

* the body of an `if` whose test is false on an NPU host, the `else` of one true there;
* the rest of a function after a top-level `assert` false there, or after an `if` true there whose
  body always ends in `raise`/`return` (`if not FLAG: raise RuntimeError(...)`).

The report-only places inside become info "in a branch an NPU host does not take" (moot.PHRASES: a
named skipped scope), naming the flag, the file and line that computes it, and the function called.
A CUDA-only import (NPU911) in such a block whose names are read outside every block stays as it
is (a NameError there is a real failure); where those reads all lie in the module's functions,
flagreads20.py makes it info saying so (the import never runs; the functions fail if called). Registries of string names and enum values chosen by
user options (a `--moe-runner-backend` choice) are not decided here.
"""

from __future__ import annotations

import ast
import dataclasses
import re

from . import astcache
from .flagtruth import UNKNOWN as _U
from .flagtruth import always_exits as _always_exits
from .flagtruth import local_names as _locals
from .modpaths import RunModules

_MAX_DEPTH = 6
_EXC = frozenset({"ImportError", "ModuleNotFoundError", "Exception", "BaseException"})


def _uniq(v):
    return v is not _U


class _Run(RunModules):
    """The run's modules by dotted name, what each binds once at its top, and the values of its
    flags and functions on an NPU host."""

    def __init__(self, results: list, text_of):
        super().__init__(results, text_of)
        self.stores: dict[int, dict] = {}
        self.values: dict[tuple, object] = {}  # (i, name) -> value of a module-level flag
        self.calls: dict[tuple, object] = {}  # (i, name) -> value a function returns
        self.origin: dict[tuple, str] = {}  # (i, name) -> "path:line `source`" where a flag is bound
        self.reads: dict[tuple, list] = {}  # (i, name) -> the other modules' values the flag's own value read
        self.overridden: dict[str, bool] = {}
        # A value left unknown because the walk met the depth limit is no fact about the flag or
        # function: asked again from a shallower depth, it is worked out again (`cut_at`: the depth
        # of the walk that left it unknown; `cuts`: how many walks the limit has stopped so far).
        self.cuts = 0
        self.cut_at: dict[tuple, int] = {}

    def _stores(self, i: int) -> dict:
        if i not in self.stores:
            counts: dict[str, int] = {}
            tree = self.tree(i)
            for node in astcache.walk(tree) if tree is not None else ():
                names = []
                if isinstance(node, ast.Name) and not isinstance(node.ctx, ast.Load):
                    names = [node.id]
                elif isinstance(node, ast.alias):
                    names = [(node.asname or node.name).split(".")[0]]
                elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                    names = [node.name]
                elif isinstance(node, ast.Global):
                    names = list(node.names)
                for name in names:
                    counts[name] = counts.get(name, 0) + 1
            self.stores[i] = counts
        return self.stores[i]

    def module(self, dotted: str) -> int | None:
        return self.by_name.get(dotted)

    def _from_module(self, i: int, stmt: ast.ImportFrom) -> str:
        from .modpaths import resolve_relative

        if stmt.level:
            return resolve_relative(self.results[i].relpath, stmt.level, stmt.module or "").replace("/", ".")
        return stmt.module or ""

    def lookup(self, i: int, name: str, depth: int = 0):
        """What `name` is at the top of module i, bound once there: ("value", expr, i), ("def",
        FunctionDef, i), ("module", j); or None."""
        tree = self.tree(i)
        if tree is None:
            return None
        if depth > _MAX_DEPTH:
            self.cuts += 1
            return None
        stores = self._stores(i)
        if stores.get(name, 0) > 1:
            return None
        for stmt in tree.body:
            if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name) \
                    and stmt.targets[0].id == name:
                return ("value", stmt, i) if stores.get(name, 0) == 1 else None
            if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)) and stmt.name == name:
                return ("def", stmt, i) if stores.get(name, 0) == 1 else None
            if isinstance(stmt, ast.ImportFrom):
                module = self._from_module(i, stmt)
                for alias in stmt.names:
                    if alias.name != "*" and (alias.asname or alias.name) == name:
                        j = self.module(f"{module}.{alias.name}")
                        if j is not None:
                            return ("module", j)
                        j = self.module(module)
                        return self.lookup(j, alias.name, depth + 1) if j is not None and j != i else None
            if isinstance(stmt, ast.Import):
                for alias in stmt.names:
                    if alias.asname == name:
                        j = self.module(alias.name)
                        return ("module", j) if j is not None else None
        if stores.get(name, 0):
            return None  # (bound some other way: in a block, by a class)
        for stmt in tree.body:  # (`from M import *`: a name M binds)
            if isinstance(stmt, ast.ImportFrom) and any(a.name == "*" for a in stmt.names):
                j = self.module(self._from_module(i, stmt))
                if j is not None and j != i:
                    found = self.lookup(j, name, depth + 1)
                    if found is not None:
                        return found
        return None

    # ------------------------------------------------------------------ values on an NPU host
    def _stale(self, memo: dict, key: tuple, depth: int) -> bool:
        """Whether `key` must be worked out (again): not known yet, or left unknown by a walk cut
        at the depth limit that started deeper than this one."""
        return key not in memo or (key in self.cut_at and depth < self.cut_at[key] and memo[key] is _U)

    def _settle(self, memo: dict, key: tuple, value, depth: int, cuts_before: int) -> None:
        memo[key] = value
        if value is _U and self.cuts != cuts_before:
            self.cut_at[key] = depth
        else:
            self.cut_at.pop(key, None)

    def flag(self, i: int, stmt: ast.Assign, depth: int):
        name = stmt.targets[0].id
        key = (i, name)
        if self._stale(self.values, key, depth):
            if depth + 1 > _MAX_DEPTH:
                self.cuts += 1
                return _U
            cuts_before = self.cuts
            self.values[key] = _U  # (a cycle is unknown)
            self.reads[key] = []
            value = self.value(i, stmt.value, {}, frozenset(), depth + 1, self.reads[key])
            if _uniq(value) and value is not False and not value:
                value = False  # (None, 0: falsy as a flag)
            if _uniq(value) and self._overridden(name):
                value = _U
            self._settle(self.values, key, value, depth, cuts_before)
            segment = ast.get_source_segment((self.text_of(i) or b"").decode("utf-8", "replace"), stmt.value) or ""
            segment = segment if len(segment) <= 60 and "\n" not in segment else segment.split("\n")[0][:57] + "..."
            called = " (a project function false there)" if isinstance(stmt.value, ast.Call) else ""
            self.origin[key] = f"{self.results[i].relpath}:{stmt.lineno} `{name} = {segment}`{called}"
        return self.values[key]

    def _overridden(self, name: str) -> bool:
        """Whether some file of the run assigns `X.name = ...` to anything but False, or names it
        as a string to `patch(...)`/`setattr(...)` (`mock.patch("pkg.guard.FLAG", True)`)."""
        if name not in self.overridden:
            pattern = re.compile(rb"\.\s*" + re.escape(name.encode()) + rb"\s*=(?!=)[ \t]*([^\n#]*)")
            named = re.compile(rb"(?:patch|setattr)\b[^\n]*[\"'](?:[\w.]*\.)?" + re.escape(name.encode()) + rb"[\"']")
            hit = False
            for i, result in enumerate(self.results):
                if not result.relpath.endswith(".py"):
                    continue
                data = self.text_of(i)
                if not data or name.encode() not in data:
                    continue
                if any(m.group(1).strip() != b"False" for m in pattern.finditer(data)) or named.search(data):
                    hit = True
                    break
            self.overridden[name] = hit
        return self.overridden[name]

    def call(self, i: int, node: ast.FunctionDef, depth: int):
        key = (i, node.name)
        if not self._stale(self.calls, key, depth):
            return self.calls[key]
        if depth > _MAX_DEPTH:
            self.cuts += 1
            return _U
        cuts_before = self.cuts
        self.calls[key] = _U
        args = node.args
        if isinstance(node, ast.AsyncFunctionDef):
            return _U
        # (every parameter unknown: the answer holds whatever a call passes, flagargs21.py)
        env: dict = {a.arg: _U for a in (*args.posonlyargs, *args.args, *args.kwonlyargs, args.vararg, args.kwarg)
                     if a is not None}
        rets: list = []
        falls = self._exec(i, node.body, env, depth + 1, rets)
        if falls:
            rets.append(None)
        value = _U
        if rets and all(_uniq(r) for r in rets):
            if all(not r for r in rets):
                value = rets[0] if all(r is rets[0] or r == rets[0] for r in rets) else False
            elif all(r == rets[0] for r in rets):
                value = rets[0]
        self._settle(self.calls, key, value, depth, cuts_before)
        return value

    def _exec(self, i: int, body: list, env: dict, depth: int, rets: list) -> bool:
        """Walk the statements; add each value returned on an NPU host to `rets`; True when the
        walk can go on past them."""
        from .testscopes import absent_packages

        for stmt in body:
            if isinstance(stmt, ast.Return):
                rets.append(None if stmt.value is None else self.value(i, stmt.value, env, frozenset(), depth, []))
                return False
            if isinstance(stmt, ast.Raise):
                rets.append(_U)
                return False
            if isinstance(stmt, ast.If):
                truth = self.truth(i, stmt.test, env, frozenset(), depth, [])
                if truth is True or truth is False:
                    if not self._exec(i, stmt.body if truth else stmt.orelse, env, depth, rets):
                        return False
                    continue
                first, second = dict(env), dict(env)
                a = self._exec(i, stmt.body, first, depth, rets)
                b = self._exec(i, stmt.orelse, second, depth, rets)
                if not (a or b):
                    return False
                merged = first if not b else second if not a else \
                    {k: v for k, v in first.items() if k in second and (second[k] is v or (_uniq(v) and second[k] == v))}
                env.clear()
                env.update(merged)
                continue
            if isinstance(stmt, ast.Try) and not stmt.finalbody:
                at = next((n for n, s in enumerate(stmt.body) if isinstance(s, (ast.Import, ast.ImportFrom))
                           and _imported_top(s) in absent_packages()), None)
                handler = next((h for h in stmt.handlers if _catches_import(h.type)), None)
                if at is not None and handler is not None:
                    if not self._exec(i, stmt.body[:at], env, depth, rets):
                        return False
                    if handler.name:
                        env[handler.name] = _U
                    if not self._exec(i, handler.body, env, depth, rets):
                        return False
                    continue
            if isinstance(stmt, (ast.Import, ast.ImportFrom)) and _imported_top(stmt) in absent_packages():
                rets.append(_U)  # (raises there, uncaught)
                return False
            if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name):
                env[stmt.targets[0].id] = self.value(i, stmt.value, env, frozenset(), depth, [])
                continue
            if any(isinstance(n, (ast.Return, ast.Raise)) for n in ast.walk(stmt)) and not isinstance(
                    stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                rets.append(_U)
                return False
            for node in ast.walk(stmt):
                if isinstance(node, ast.Name) and not isinstance(node.ctx, ast.Load):
                    env[node.id] = _U
                elif isinstance(node, ast.alias):
                    env[(node.asname or node.name).split(".")[0]] = _U
                elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                    env[node.name] = _U
        return True

    def truth(self, i: int, node: ast.AST, env: dict, local: frozenset, depth: int, used: list):
        value = self.value(i, node, env, local, depth, used)
        return _U if value is _U else bool(value)

    def value(self, i: int, node: ast.AST, env: dict, local: frozenset, depth: int, used: list):
        """The value of `node` in module i on an NPU host, or _U. `env`: locals known; `local`:
        names bound in the enclosing functions (never read as the module's); `used` gets the
        (module, name) of the flags of OTHER modules the answer read."""
        from . import testscopes

        if depth > _MAX_DEPTH:
            self.cuts += 1
            return _U
        if isinstance(node, ast.Constant):
            return node.value
        if isinstance(node, ast.BoolOp):
            values = [self.truth(i, v, env, local, depth, used) for v in node.values]
            decisive = isinstance(node.op, ast.Or)
            if decisive in values:
                return decisive
            return _U if _U in values else not decisive
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
            inner = self.truth(i, node.operand, env, local, depth, used)
            return _U if inner is _U else not inner
        if isinstance(node, ast.Compare) and len(node.ops) == 1:
            left = self.value(i, node.left, env, local, depth, used)
            right = self.value(i, node.comparators[0], env, local, depth, used)
            if _uniq(left) and _uniq(right):
                try:
                    return _compare(node.ops[0], left, right)
                except TypeError:
                    return _U
        if isinstance(node, ast.Name):
            if node.id in env:
                return env[node.id]
            if node.id not in local:
                found = self.lookup(i, node.id)
                if found is not None and found[0] == "value":
                    value = self.flag(found[2], found[1], depth)
                    if _uniq(value):
                        used.append((found[2], node.id))
                        # (a flag of this module bound to another module's function or flag)
                        used.extend(self.reads.get((found[2], node.id), ()) if found[2] == i else ())
                        return value
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and f"{node.value.id}.{node.attr}" in env:
            return env[f"{node.value.id}.{node.attr}"]  # (`self.X` a class assigns once: callgates21.py)
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Attribute) \
                and (astcache.dotted(node) or "") in env:
            return env[astcache.dotted(node)]  # (`self.A.X` through a member the class builds: capchains30.py)
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id not in env \
                and node.value.id not in local:
            owner = self.lookup(i, node.value.id)
            if owner is not None and owner[0] == "module":
                found = self.lookup(owner[1], node.attr)
                if found is not None and found[0] == "value":
                    value = self.flag(found[2], found[1], depth)
                    if _uniq(value):
                        used.append((found[2], node.attr))
                        return value
        if isinstance(node, ast.Call):  # (with arguments too: their values are never read)
            target = None
            if isinstance(node.func, ast.Name) and node.func.id not in env and node.func.id not in local:
                target = self.lookup(i, node.func.id)
            elif isinstance(node.func, ast.Attribute) and isinstance(node.func.value, ast.Name) \
                    and node.func.value.id not in env and node.func.value.id not in local:
                owner = self.lookup(i, node.func.value.id)
                target = self.lookup(owner[1], node.func.attr) if owner is not None and owner[0] == "module" else None
            if target is not None and target[0] == "def":
                value = self.call(target[2], target[1], depth + 1)
                if _uniq(value):
                    if target[2] != i:
                        used.append((target[2], f"{target[1].name}()"))
                    return value
            if isinstance(node.func, ast.Name) and node.func.id == "getattr":
                from .attrstores32 import getattr_value  # (an attribute every store of the run sets false there: attrstores32.py)
                value = getattr_value(self, i, node, local, used)
                if _uniq(value):
                    return value
        if isinstance(node, ast.Subscript):  # (`f()[0]` of a `(flag, reason)` answer: tupleitems34.py)
            from .tupleitems34 import item_value

            value = item_value(self, i, node, env, local, depth, used, _U)
            if _uniq(value):
                return value
        known = testscopes.npu_value(node)  # (True, False, None there: `torch.version.hip`; or unknown)
        if known is True or known is False:
            return known
        return None if known is testscopes.NONE_THERE else _U


def _compare(op: ast.cmpop, left, right):
    import operator

    table = {ast.Eq: operator.eq, ast.NotEq: operator.ne, ast.Lt: operator.lt, ast.LtE: operator.le,
             ast.Gt: operator.gt, ast.GtE: operator.ge, ast.Is: operator.is_, ast.IsNot: operator.is_not}
    func = table.get(type(op))
    if func is None:
        raise TypeError
    return bool(func(left, right))


def _imported_top(stmt: ast.stmt) -> str:
    if isinstance(stmt, ast.Import):
        return stmt.names[0].name.split(".")[0] if len(stmt.names) == 1 else ""
    return "" if stmt.level else (stmt.module or "").split(".")[0]


def _catches_import(kind: ast.AST | None) -> bool:
    if kind is None:
        return True
    names = kind.elts if isinstance(kind, ast.Tuple) else [kind]
    return any(isinstance(n, ast.Name) and n.id in _EXC for n in names)


def _describe(run: _Run, used: list) -> str:
    """`(`X` is False there, bound at path:line `X = f()`)` for the flags and functions an answer
    read, with the value each has on an NPU host."""
    parts = []
    for i, name in dict.fromkeys(used):
        if not name:
            continue  # (a module a call of flagargs21's proof lies in)
        if " " in name:  # (a parameter every call passes False: flagargs21.py)
            parts.append(run.origin[(i, name)])
        elif name.endswith("()"):
            value = run.calls.get((i, name[:-2]), False)
            parts.append(f"the project's `{name}` in {run.results[i].relpath} returns {value!r} there")
        elif (i, name) in run.origin:
            parts.append(f"`{name}` is {run.values.get((i, name), False)!r} there, bound at {run.origin[(i, name)]}")
    return f" ({'; '.join(parts[:2])})" if parts else ""


def blocks(run: _Run, i: int, tree: ast.Module, text: str, lines_wanted: list[int] | None) -> list[tuple[int, int, str]]:
    """(first, last, reason) of the code in module i an NPU host never runs because a value computed
    in another module decides so; only constructs around `lines_wanted` are read (all when None)."""
    from .flagargs21 import Params, false_parameters, head
    from .flags16 import BRANCH

    parents = astcache.parents(tree)
    if not hasattr(run, "params"):
        run.params = Params(run)

    def function_of(node: ast.AST) -> ast.AST | None:
        node = parents.get(id(node))
        while node is not None and not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            node = parents.get(id(node))
        return node

    def local_names(node: ast.AST) -> frozenset:
        names: set = set()
        function = function_of(node)
        while function is not None:
            names |= _locals(function)
            function = function_of(function)
        return frozenset(names)

    def decide(test: ast.AST, where: ast.AST):
        # (the enclosing function's parameters every call passes False there: flagargs21.py)
        env, used = false_parameters(run.params, i, tree, test, where)
        truth = run.truth(i, test, env, local_names(where), 0, used)
        # (decided only by what another module computes: this module's own flags are flags16's)
        return (truth, used) if truth is not _U and any(m != i for m, _n in used) else (_U, used)

    def shown(node: ast.AST) -> str:
        segment = ast.get_source_segment(text, node) or ast.unparse(node)
        segment = " ".join(segment.split())
        return segment if len(segment) <= 90 else segment[:87] + "..."

    out: list[tuple[int, int, str]] = []
    for node in astcache.walk(tree):
        if isinstance(node, ast.If) and node.body:
            last = node.end_lineno or node.lineno
            if lines_wanted is not None and not any(node.body[0].lineno <= n <= last for n in lines_wanted):
                continue
            truth, used = decide(node.test, node)
            if truth is False:
                out.append((node.body[0].lineno, node.body[-1].end_lineno or node.body[-1].lineno,
                            f"{head(used, BRANCH)}: `{shown(node.test)}`{_describe(run, used)}"))
            elif truth is True and node.orelse:
                out.append((node.orelse[0].lineno, node.orelse[-1].end_lineno or node.orelse[-1].lineno,
                            f"{head(used, BRANCH)}: `not ({shown(node.test)})`{_describe(run, used)}"))
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            last = node.end_lineno or node.lineno
            if lines_wanted is not None and not any(node.body[0].lineno <= n <= last for n in lines_wanted):
                continue
            for k, stmt in enumerate(node.body[:-1]):
                guard = None
                if isinstance(stmt, ast.Assert):
                    truth, used = decide(stmt.test, stmt)
                    guard = f"assert {shown(stmt.test)}" if truth is False else None
                elif isinstance(stmt, ast.If) and _always_exits(stmt.body) and not stmt.orelse:
                    truth, used = decide(stmt.test, stmt)
                    guard = f"if {shown(stmt.test)}: {type(stmt.body[-1]).__name__.lower()}" if truth is True else None
                if guard is not None:
                    out.append((node.body[k + 1].lineno, last,
                                f"{head(used, BRANCH)}: after `{guard}`, which leaves the function there{_describe(run, used)}"))
                    break
    return out


def _import_at(tree: ast.Module, line: int) -> ast.stmt | None:
    for node in astcache.walk(tree):
        if isinstance(node, (ast.Import, ast.ImportFrom)) and node.lineno <= line <= (node.end_lineno or node.lineno):
            return node
    return None


def _lower(finding, reason_of) -> list | None:
    """findings.lower_pieces, the places kept merged again on the finding's own anchor where it is
    among them (a scaled matmul the FP8 finding was anchored on stays its anchor)."""
    from .findings import merge_per_file, split_merged

    lowered, kept = [], []
    for piece in split_merged(finding):
        why = reason_of(piece.line)
        if why is None:
            kept.append(piece)
        else:
            lowered.append(dataclasses.replace(piece, severity="info", message=f"{piece.message} ({why})"))
    if not lowered:
        return None
    anchor = (finding.line, finding.column)
    keep_anchor = any((p.line, p.column) == anchor for p in kept)
    return lowered + (merge_per_file(kept, secondary=(lambda f: (f.line, f.column) != anchor) if keep_anchor else None)
                      if kept else [])


def _lower_result(result, wanted, reason_of):
    """`result` with each finding `wanted` lowered by `lower(finding, reason_of)` (sorted again), or
    `result` itself where none is: the tail each pass that lowers places by a reason shares."""
    findings, changed = [], False
    for finding in result.findings:
        pieces = _lower(finding, reason_of) if wanted(finding) else None
        changed = changed or pieces is not None
        findings.extend([finding] if pieces is None else pieces)
    return dataclasses.replace(result, findings=sorted(findings)) if changed else result


def review(results: list, paths: dict) -> list:
    """The results, with the report-only places inside the blocks of this module's docstring
    lowered to info (a named skipped scope)."""
    from . import flagreads20
    from .dominators22 import callers_gated
    from .flags16 import read_outside
    from .modpaths import RunTexts
    from .moot import is_moot

    def open_places(result) -> list[int]:
        return [n for f in result.findings if not f.fixable and f.cell is None and not is_moot(f)
                for n in (f.line, *(line for line, _c, _s in f.also))]

    text_of = RunTexts(results, paths)
    run: _Run | None = None
    out = list(results)

    def named_elsewhere(i: int, name: str) -> bool:
        word = re.compile(rb"\b" + re.escape(name.encode()) + rb"\b")
        return any(j != i and r.relpath.endswith(".py") and word.search(text_of(j) or b"")
                   for j, r in enumerate(results))

    for i, result in enumerate(results):
        if not result.relpath.endswith(".py"):
            continue
        places = open_places(result)
        if not places:
            continue
        data = text_of(i)
        if not data or not (b"import" in data and (b"if " in data or b"assert " in data)):
            continue
        lines_b = data.split(b"\n")
        if not any(0 < n <= len(lines_b) and lines_b[n - 1][:1] in (b" ", b"\t") for n in places):
            continue  # (a place inside an `if` block or a function is indented)
        tree = astcache.parse(data)
        if tree is None:
            continue
        if run is None:
            run = _Run(results, text_of)
        tree = run.trees.setdefault(i, tree)  # (the tree the run's lookups hold: nodes compared by identity)
        text = data.decode("utf-8", "replace")
        found = blocks(run, i, tree, text, places)
        if not found:
            continue

        everywhere: list = []

        def reason_of(line: int, found=found, tree=tree, text=text, i=i, everywhere=everywhere, run=run) -> str | None:
            block = next((b for b in found if b[0] <= line <= b[1]), None)
            if block is None:
                return None
            statement = _import_at(tree, line)
            if statement is not None:
                if not everywhere:
                    everywhere.append(blocks(run, i, tree, text, None))
                reads = read_outside(tree, statement, everywhere[0])
                if reads:
                    # (its names are read where an NPU host may go: a NameError there is real; only in
                    # the module's functions, info saying so, flagreads20.py)
                    reading = flagreads20.functions_reading(tree, reads)
                    if reading is None:
                        return None
                    # (their callers under the same gate: a named scope, dominators22.py)
                    gated = callers_gated(tree, reading, everywhere[0], lambda name, i=i: named_elsewhere(i, name))
                    return f"{block[2]}; {gated}" if gated else flagreads20.reason(block[2], reading)
            return block[2]

        out[i] = _lower_result(result, lambda f: not f.fixable and f.cell is None and not is_moot(f), reason_of)
    return out


# public names for the passes that extend this one (callgates21.py, tritonflags21.py)
Run = _Run
lower = _lower
lower_result = _lower_result
