"""Subsystems built only from a config that an NPU host never gets: an opt-in enabler that returns
None or raises there, and kernel modules imported only under a predicate false there (issue #16,
wave 27: AZ#2, BU#20, BU#33, BE#8, BJ#10, BV#12, BV#17, BU#29, BO#1).

The shape (a model's "specialized decode" folder): a module-level enabler `F(cfg)` returns None
unless the user opts in (`if backend == "auto": return None`) and otherwise calls a requirement
check `G(cfg)` and raises when G reports a miss:

* G's misses: `checks = ((failed, reason), ...); return next((r for failed, r in checks if
  failed), None)` (a reason, None when clear) or `requirements = {need: ok, ...}; return [need
  for need, ok in requirements.items() if not ok]` (the missing needs). One `failed` true on an
  NPU host, or one `ok` false there (testscopes.npu_truth: `not is_device_capability_family(100)`,
  `is_device_capability(103)`), makes G report a miss there.
* F's raise: `r = G(cfg)` then `if r is not None: raise` / `if r: raise`, or the collective form
  `s = torch.tensor([0 if r else 1]); dist.all_reduce(s, op=ReduceOp.MIN, ...); if not s.item():
  raise` (the minimum of a 0 stays 0). Any `return` of a value before that raise: not this shape.

So on an NPU host F returns None (the default) or raises (the opt-in is rejected). A class that
stores it (`self.A = F(cfg)`, otherwise only `self.A = None`) then never holds a config there, and
what only such a config reaches is dead there:

* an import inside `if self.A is not None:` / `if self.A:` of that class;
* a method B of that class every reference of which in the run is a call `r.B(...)` inside `if
  r.A is not None:` (the same receiver: were it this class's B, r holds this class's A) or in a
  module found dead here;
* the modules only such imports load, and what they alone import (a greatest fixpoint: a module
  stays live where any other runtime site imports it, a module-level import or a lazy one in a
  function not found dead; a package `__init__` above a live module is live; `if TYPE_CHECKING:`
  imports do not count).

The same fixpoint takes a second kind of dead site (BU#29, BO#1): an import under `if pred(x):`
(or a conjunct `... and pred(x)`) where `pred` is a function the module defines or imports whose
one `return`, its last statement, is false on an NPU host (`return
current_platform.is_device_capability_family(100) and ...`), also read through a local or `self.x`
bound just before in the same block (`s = Stream() if pred(c) else None; self.f = s is not None
and ...; if self.f:`); and an import inside a module-level function every reference of which in
the run is a call in such an `if` or in a dead module (a name only imported is no reference).

Their report-only findings become named scopes (moot.PHRASES' "in a branch an NPU host does not
take") naming the entry (the gated import or method), F, and the check of G that fails there with
its file:line. Policy P2 (wave 27): a dead module that a test or benchmark imports (directly or
through other dead modules) is lowered to info "reached on an NPU host only from
tests/benchmarks (file:line)" instead, its errors no longer errors; the test keeps its own findings.

Kept: an enabler with a `return` of a value before the raise, a G whose checks an NPU host may
pass (a check npu_truth cannot decide, no capability test), an attribute assigned anything else, a
method called outside such an `if` (or named in a string or decorator), a module any live site
imports, a module no gated site reaches (a user may import it: left to the other passes).
Whole run, from runplan.whole_run_passes (before unreached25.py).
"""

from __future__ import annotations

import ast
import dataclasses
import os
import re
from typing import Optional

from . import astcache

_DEFS = (ast.FunctionDef, ast.AsyncFunctionDef)
_SHIPPED = re.compile(r"(^|/)(benchmarks?|examples|scripts|tools)/|(^|/)bench[^/]*\.py$")
_FAIL, _ZERO = "fail", "zero"


def _src(node: ast.AST) -> str:
    try:
        return ast.unparse(node)
    except Exception:  # pragma: no cover (unparse of a parsed tree)
        return "?"


def _assigned_once(function: ast.AST, name: str) -> Optional[ast.AST]:
    values = [n.value for n in ast.walk(function) if isinstance(n, ast.Assign)
              and any(isinstance(t, ast.Name) and t.id == name for t in n.targets)]
    return values[0] if len(values) == 1 else None


def miss_check(function: ast.AST) -> Optional[tuple[int, str]]:
    """(line, source) of a check of G (this module's doc) that reports a miss on an NPU host, where G
    is one of the two requirement shapes; None otherwise."""
    from .testscopes import npu_truth

    returns = [n for n in ast.walk(function) if isinstance(n, ast.Return)]
    if len(returns) != 1 or returns[0] is not function.body[-1] or returns[0].value is None:
        return None
    value = returns[0].value
    if (isinstance(value, ast.Call) and isinstance(value.func, ast.Name) and value.func.id == "next"
            and len(value.args) == 2 and isinstance(value.args[0], ast.GeneratorExp)
            and isinstance(value.args[1], ast.Constant) and value.args[1].value is None):
        gen = value.args[0]
        comp = gen.generators[0] if len(gen.generators) == 1 else None
        if (comp is None or not isinstance(comp.iter, ast.Name) or not isinstance(comp.target, ast.Tuple)
                or len(comp.target.elts) != 2 or not all(isinstance(e, ast.Name) for e in comp.target.elts)
                or len(comp.ifs) != 1 or not isinstance(comp.ifs[0], ast.Name)
                or comp.ifs[0].id != comp.target.elts[0].id
                or not isinstance(gen.elt, ast.Name) or gen.elt.id != comp.target.elts[1].id):
            return None
        table = _assigned_once(function, comp.iter.id)
        if not isinstance(table, ast.Tuple):
            return None
        for item in table.elts:
            if isinstance(item, ast.Tuple) and len(item.elts) == 2 and npu_truth(item.elts[0]) is True:
                return item.lineno, _src(item.elts[0])
        return None
    if isinstance(value, ast.ListComp) and len(value.generators) == 1:
        comp = value.generators[0]
        it = comp.iter
        if (not (isinstance(it, ast.Call) and isinstance(it.func, ast.Attribute) and it.func.attr == "items"
                 and isinstance(it.func.value, ast.Name) and not it.args)
                or not isinstance(comp.target, ast.Tuple) or len(comp.target.elts) != 2
                or not all(isinstance(e, ast.Name) for e in comp.target.elts) or len(comp.ifs) != 1
                or not (isinstance(comp.ifs[0], ast.UnaryOp) and isinstance(comp.ifs[0].op, ast.Not)
                        and isinstance(comp.ifs[0].operand, ast.Name)
                        and comp.ifs[0].operand.id == comp.target.elts[1].id)
                or not isinstance(value.elt, ast.Name) or value.elt.id != comp.target.elts[0].id):
            return None
        table = _assigned_once(function, it.func.value.id)
        if not isinstance(table, ast.Dict):
            return None
        for key, item in zip(table.keys, table.values):
            if key is not None and npu_truth(item) is False:
                return item.lineno, f"{_src(key)}: {_src(item)}"
    return None


def _returns_value(stmt: ast.stmt) -> bool:
    """Whether a statement may return a value other than None (nested definitions aside)."""
    todo = [stmt]
    while todo:
        node = todo.pop()
        if isinstance(node, (*_DEFS, ast.Lambda, ast.ClassDef)) and node is not stmt:
            continue
        if isinstance(node, ast.Return) and node.value is not None and not (
                isinstance(node.value, ast.Constant) and node.value.value is None):
            return True
        if isinstance(node, (ast.Yield, ast.YieldFrom)):
            return True
        todo.extend(ast.iter_child_nodes(node))
    return False


def _names(node: ast.AST) -> set:
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name)}


def _raises_there(test: ast.AST, env: dict) -> bool:
    """Whether an `if` test is true on an NPU host given the tracked names (G's miss, a zero tensor)."""
    if isinstance(test, ast.Name):
        return env.get(test.id, (None,))[0] == _FAIL
    if (isinstance(test, ast.Compare) and len(test.ops) == 1 and isinstance(test.ops[0], ast.IsNot)
            and isinstance(test.left, ast.Name) and isinstance(test.comparators[0], ast.Constant)
            and test.comparators[0].value is None):
        return env.get(test.left.id, (None,))[0] == _FAIL
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        inner = test.operand
        if (isinstance(inner, ast.Call) and isinstance(inner.func, ast.Attribute) and inner.func.attr == "item"
                and isinstance(inner.func.value, ast.Name) and not inner.args):
            return env.get(inner.func.value.id, (None,))[0] == _ZERO
    return False


def _zero_tensor(value: ast.AST, env: dict) -> bool:
    """`torch.tensor([0 if r else 1], ...)` with r G's miss: a tensor holding 0 on an NPU host."""
    if not (isinstance(value, ast.Call) and (astcache.dotted(value.func) or "").endswith("tensor") and value.args):
        return False
    first = value.args[0]
    if not (isinstance(first, ast.List) and len(first.elts) == 1 and isinstance(first.elts[0], ast.IfExp)):
        return False
    choice = first.elts[0]
    return (isinstance(choice.test, ast.Name) and env.get(choice.test.id, (None,))[0] == _FAIL
            and isinstance(choice.body, ast.Constant) and choice.body.value == 0)


def _min_reduce(stmt: ast.stmt, name: str) -> bool:
    """`dist.all_reduce(name, op=...ReduceOp.MIN, ...)`: a 0 stays 0."""
    call = stmt.value if isinstance(stmt, ast.Expr) else None
    if not (isinstance(call, ast.Call) and (astcache.dotted(call.func) or "").endswith("all_reduce")
            and call.args and isinstance(call.args[0], ast.Name) and call.args[0].id == name):
        return False
    op = next((k.value for k in call.keywords if k.arg == "op"), None)
    return op is not None and (astcache.dotted(op) or "").endswith(".MIN")


def none_or_raise(function: ast.AST, checker) -> Optional[dict]:
    """{"raise": line, "check": (G name, G's line, check line, check source)} where the enabler
    returns None or raises on an NPU host (this module's doc); `checker(name)` answers miss_check
    of the function a name calls, with its (name, line), or None."""
    env: dict = {}  # name -> (_FAIL or _ZERO, G's evidence)
    for stmt in function.body:
        if isinstance(stmt, ast.If) and not stmt.orelse and stmt.body and isinstance(stmt.body[-1], ast.Raise) \
                and _raises_there(stmt.test, env):
            evidence = next(v[1] for n, v in env.items() if n in _names(stmt.test))
            return {"raise": stmt.body[-1].lineno, "check": evidence}
        if _returns_value(stmt):
            return None
        if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name):
            name = stmt.targets[0].id
            value = stmt.value
            if isinstance(value, ast.Call) and isinstance(value.func, ast.Name):
                found = checker(value.func.id)
                if found is not None:
                    env[name] = (_FAIL, found)
                    continue
            if _zero_tensor(value, env):
                env[name] = (_ZERO, env[value.args[0].elts[0].test.id][1])
                continue
            env.pop(name, None)
            continue
        used = _names(stmt) & set(env)
        if used and not (len(used) == 1 and _min_reduce(stmt, next(iter(used)))
                         and env[next(iter(used))][0] == _ZERO):
            for name in used:
                env.pop(name, None)
    return None


def _stem(relpath: str) -> str:
    return relpath[:-3]


class _Program:
    """The run's modules, their import sites and the enablers (this module's doc)."""

    def __init__(self, results: list, paths: dict) -> None:
        from .importgates import is_test
        from .modpaths import ImportIndex, RunModules, RunTexts, resolve_relative
        from .wholeprogram import file_facts

        self.results = results
        self.text_of = RunTexts(results, paths)
        self.modules = RunModules(results, self.text_of)
        self.resolve_relative = resolve_relative
        self.python = [i for i, r in enumerate(results) if r.relpath.endswith(".py")]
        self.testlike = {i for i in self.python if is_test(results[i].relpath) or _SHIPPED.search(results[i].relpath)}
        index = ImportIndex(results, self.python)
        self.importers: dict[int, list] = {}  # module -> [(importer, line)]
        self.imports: dict[int, list] = {}
        for i in self.python:
            facts = results[i].facts
            if facts is None:
                facts = file_facts(results[i].relpath, self.text_of(i) or b"")
            found = index.files(facts["imports"], i)
            self.imports[i] = found
            for j, line in found:
                self.importers.setdefault(j, []).append((i, line))

    def function(self, i: int, name: str, depth: int = 0) -> Optional[tuple[int, ast.AST]]:
        """(module, def) of a module-level function `name` module i defines or imports by name."""
        tree = self.modules.tree(i)
        if tree is None or depth > 2:
            return None
        for stmt in tree.body:
            if isinstance(stmt, _DEFS) and stmt.name == name:
                return i, stmt
        for stmt in tree.body:
            if isinstance(stmt, ast.ImportFrom) and any((a.asname or a.name) == name for a in stmt.names):
                alias = next(a for a in stmt.names if (a.asname or a.name) == name)
                if stmt.level:
                    stem = self.resolve_relative(self.results[i].relpath, stmt.level, stmt.module or "")
                    j = self._by_stem(stem)
                else:
                    j = self.modules.by_name.get(stmt.module or "")
                if j is not None:
                    return self.function(j, alias.name, depth + 1)
        return None

    def _by_stem(self, stem: str) -> Optional[int]:
        for i in self.python:
            if _stem(self.results[i].relpath) in (stem, f"{stem}/__init__"):
                return i
        return None


def _enablers(program: _Program) -> dict:
    """{(module, def name): evidence} of the run's enablers returning None or raising there."""
    out: dict = {}
    for i in program.python:
        data = program.text_of(i) or b""
        if i in program.testlike or b"raise" not in data or (b"next((" not in data and b".items() if not" not in data):
            continue
        tree = program.modules.tree(i)
        if tree is None:
            continue
        for g in tree.body:
            if not isinstance(g, _DEFS):
                continue
            check = miss_check(g)
            if check is None:
                continue
            for stmt in tree.body:  # the enablers of this module calling g
                if not isinstance(stmt, _DEFS) or stmt is g:
                    continue

                def checker(name, g=g, check=check):
                    return (g.name, g.lineno, *check) if name == g.name else None

                found = none_or_raise(stmt, checker)
                if found is not None:
                    out[(i, stmt.name)] = found
    return out


def _stores(program: _Program, enablers: dict) -> list:
    """[(module, class, attribute, enabler (module, name), evidence)] of `self.A = F(...)`."""
    if not enablers:
        return []
    names = {name.encode() for _i, name in enablers}
    out = []
    for i in program.python:
        data = program.text_of(i) or b""
        if i in program.testlike or not any(n in data for n in names):
            continue
        tree = program.modules.tree(i)
        if tree is None:
            continue
        for cls in astcache.nodes(tree, (ast.ClassDef,)):
            stores: dict = {}
            for node in ast.walk(cls):
                if not isinstance(node, ast.Assign):
                    continue
                for target in node.targets:
                    if isinstance(target, ast.Attribute) and isinstance(target.value, ast.Name) \
                            and target.value.id == "self":
                        stores.setdefault(target.attr, []).append(node.value)
            for attr, values in stores.items():
                calls = [v for v in values if isinstance(v, ast.Call) and isinstance(v.func, ast.Name)]
                if len(calls) != 1 or any(v is not calls[0] and not (isinstance(v, ast.Constant) and v.value is None)
                                          for v in values):
                    continue
                target = program.function(i, calls[0].func.id)
                if target is not None and (target[0], target[1].name) in enablers:
                    key = (target[0], target[1].name)
                    out.append((i, cls, attr, key, enablers[key], calls[0].lineno))
    return out


def _gate_attr(test: ast.AST) -> Optional[tuple[str, str]]:
    """(receiver source, attribute) of `r.A is not None` or `r.A`."""
    if (isinstance(test, ast.Compare) and len(test.ops) == 1 and isinstance(test.ops[0], ast.IsNot)
            and isinstance(test.comparators[0], ast.Constant) and test.comparators[0].value is None):
        test = test.left
    if isinstance(test, ast.Attribute):
        return _src(test.value), test.attr
    return None


def _in_body(node: ast.AST, stmt: ast.If, parents: dict) -> bool:
    """Whether node lies in the `if` body (not its test or else)."""
    child, up = node, parents.get(id(node))
    while up is not None and up is not stmt:
        child, up = up, parents.get(id(up))
    return up is stmt and any(child is s for s in stmt.body)


def _ancestors(node: ast.AST, parents: dict):
    up = parents.get(id(node))
    while up is not None:
        yield up
        up = parents.get(id(up))


def review(results: list, paths: Optional[dict] = None) -> list:
    """The report-only findings of modules only a config an NPU host never gets reaches become named
    scopes, or info where a test or benchmark imports them (this module's doc)."""
    from .flags16 import BRANCH
    from .moot import is_moot, named, to_scopes

    if not any(r.relpath.endswith(".py") for r in results):
        return results
    program = _Program(results, paths or {})
    enablers = _enablers(program)
    stores = _stores(program, enablers)
    rel = [r.relpath for r in results]
    by_class = {}  # id(class) -> [(attr, why)]
    methods = []  # (module, class, method def, attr, why)
    for i, cls, attr, key, found, line in stores:
        g_name, g_line, check_line, check = found["check"]
        why = (f"`self.{attr} = {key[1]}(...)` ({rel[i]}:{line}) holds a config only past `{key[1]}`'s raise "
               f"({rel[key[0]]}:{found['raise']}), which an NPU host always takes when the option is chosen: "
               f"`{g_name}()` reports `{check}` there ({rel[key[0]]}:{check_line})")
        by_class.setdefault(id(cls), []).append((attr, why))
        for stmt in cls.body:
            if isinstance(stmt, _DEFS) and not stmt.name.startswith("__"):
                methods.append((i, cls, stmt, attr, why))

    preds: dict = {}

    def false_pred(i: int, name: str) -> Optional[str]:
        """`name` (a function module i defines or imports) as `path:line` where its one `return`, its
        last statement, is false on an NPU host (`return is_device_capability_family(100) and ...`)."""
        from .testscopes import npu_truth

        if (i, name) not in preds:
            preds[(i, name)] = None
            found = program.function(i, name)
            if found is not None:
                j, function = found
                returns = [n for n in ast.walk(function) if isinstance(n, ast.Return)]
                if (len(returns) == 1 and returns[0] is function.body[-1] and returns[0].value is not None
                        and npu_truth(returns[0].value) is False):
                    preds[(i, name)] = f"{rel[j]}:{returns[0].lineno}"
        return preds[(i, name)]

    def false_test(i: int, test: ast.AST, before: list, depth: int = 0) -> Optional[str]:
        """Why an `if` test is false on an NPU host: a conjunct that is a call of a false predicate,
        or a local or `self.x` the statements before bound to one (`s = X() if pred(c) else None`
        then `s is not None and ...`); None where unknown."""
        if depth > 3:
            return None
        if isinstance(test, ast.BoolOp) and isinstance(test.op, ast.And):
            return next((w for w in (false_test(i, v, before, depth + 1) for v in test.values) if w), None)
        if isinstance(test, ast.Call) and isinstance(test.func, ast.Name):
            where = false_pred(i, test.func.id)
            return f"`{test.func.id}()` is false there ({where})" if where else None
        target = _src(test)
        negated_none = (isinstance(test, ast.Compare) and len(test.ops) == 1 and isinstance(test.ops[0], ast.IsNot)
                        and isinstance(test.comparators[0], ast.Constant) and test.comparators[0].value is None)
        if negated_none:
            target = _src(test.left)
        elif not isinstance(test, (ast.Name, ast.Attribute)):
            return None
        for k in range(len(before) - 1, -1, -1):
            stmt = before[k]
            if not (isinstance(stmt, ast.Assign) and len(stmt.targets) == 1):
                if target in {_src(n) for n in ast.walk(stmt) if isinstance(n, (ast.Name, ast.Attribute))
                              and isinstance(n.ctx, ast.Store)}:
                    return None
                continue
            if _src(stmt.targets[0]) != target:
                continue
            value = stmt.value
            if negated_none:
                if isinstance(value, ast.IfExp) and isinstance(value.orelse, ast.Constant) and value.orelse.value is None:
                    why = false_test(i, value.test, before[:k], depth + 1)
                    return f"`{target}` is None there: {why}" if why else None
                return None
            why = false_test(i, value, before[:k], depth + 1)
            return f"`{target}` is false there: {why}" if why else None
        return None

    def block_before(up: ast.AST, parents: dict) -> list:
        container = parents.get(id(up))
        for field in ("body", "orelse", "finalbody"):
            block = getattr(container, field, None)
            if isinstance(block, list):
                for k, stmt in enumerate(block):
                    if stmt is up:
                        return block[:k]
        return []

    def dead_region(i: int, node: ast.AST, parents: dict) -> Optional[str]:
        """Why node lies in the body of an `if` an NPU host does not enter (a false predicate)."""
        for up in _ancestors(node, parents):
            if isinstance(up, ast.If) and _in_body(node, up, parents):
                why = false_test(i, up.test, block_before(up, parents))
                if why:
                    return f"under `if {_src(up.test)}:` ({rel[i]}:{up.lineno}), and {why}"
        return None

    def naming(word: bytes, dead: set):
        """(j, tree or None) of each Python file of the run naming `word`, the dead modules aside."""
        for j in program.python:
            if j not in dead and word in (program.text_of(j) or b""):
                yield j, program.modules.tree(j)

    def called_in(dead: set, word: bytes, before: bytes) -> bool:
        """Whether a dead module calls `word` (`before` the pattern ahead of the name: `\\b`, `\\.`)."""
        texts = (program.text_of(j) or b"" for j in program.python if j in dead)
        return any(word in t and re.search(before + word + rb"\(", t) is not None for t in texts)

    dead_functions: dict = {}

    def function_dead(i: int, function: ast.AST, dead: set) -> Optional[str]:
        """Why every reference of the run to a module-level function is a call in a dead region or a
        dead module (a name imported is no reference); None where one is not, or none is found."""
        key = (i, id(function))
        if key in dead_functions:
            return dead_functions[key]
        dead_functions[key] = None
        name, word = function.name, function.name.encode()
        sites: list = []
        for j, tree in naming(word, dead):
            if tree is None or j in program.testlike:
                return None
            parents = astcache.parents(tree)
            for node in astcache.walk(tree):
                if isinstance(node, ast.Constant) and node.value == name:
                    return None
                if not ((isinstance(node, ast.Name) and node.id == name)
                        or (isinstance(node, ast.Attribute) and node.attr == name)):
                    continue
                if isinstance(node, ast.Name) and j != i and not any(
                        isinstance(n, ast.ImportFrom) and any(a.name == name for a in n.names) for n in tree.body):
                    return None  # (another module's own name: not this function)
                call = parents.get(id(node))
                if not (isinstance(call, ast.Call) and call.func is node):
                    return None
                why = dead_region(j, node, parents)
                if why is None:
                    return None
                sites.append(why)
        elsewhere = called_in(dead, word, rb"\b")
        if not sites and not elsewhere:
            return None
        dead_functions[key] = (f"imported only in `{name}()`, called only "
                               f"{sites[0] if sites else 'from modules found dead here'}")
        return dead_functions[key]

    def gated_site(i: int, line: int, dead_methods: dict) -> Optional[str]:
        """Why an import site of module i at `line` is dead there, "" for a TYPE_CHECKING import, else None."""
        tree = program.modules.tree(i)
        if tree is None:
            return None
        parents = astcache.parents(tree)
        node = next((n for n in astcache.nodes(tree, (ast.Import, ast.ImportFrom)) if n.lineno == line), None)
        if node is None:
            return None
        cls = None
        for up in _ancestors(node, parents):
            if isinstance(up, ast.ClassDef):
                cls = up
                break
        for up in _ancestors(node, parents):
            if isinstance(up, ast.If) and _in_body(node, up, parents):
                if _src(up.test).endswith("TYPE_CHECKING"):
                    return ""
                gate = _gate_attr(up.test)
                if gate is not None and gate[0] == "self" and cls is not None:
                    why = next((w for a, w in by_class.get(id(cls), ()) if a == gate[1]), None)
                    if why is not None:
                        return f"imported only under `if {_src(up.test)}:` ({rel[i]}:{up.lineno}); {why}"
                why = false_test(i, up.test, block_before(up, parents))
                if why:
                    return f"imported only under `if {_src(up.test)}:` ({rel[i]}:{up.lineno}), and {why}"
            if isinstance(up, _DEFS) and (i, id(up)) in dead_methods:
                return dead_methods[(i, id(up))]
            if isinstance(up, _DEFS) and isinstance(parents.get(id(up)), ast.Module):
                return function_dead(i, up, candidates_now[0])
        return None

    def method_dead(home: int, method: ast.AST, attr: str, why: str, dead: set) -> Optional[str]:
        """Why every reference of the run to the method is a call under `if r.<attr> is not None:`
        with the same receiver, or in a dead module; None where one is not."""
        word = method.name.encode()
        sites: list = []
        for j, tree in naming(word, dead):
            if tree is None:
                return None
            parents = astcache.parents(tree)
            for node in astcache.walk(tree):
                if isinstance(node, ast.Constant) and node.value == method.name:
                    return None
                if isinstance(node, ast.Name) and node.id == method.name:
                    return None
                if not (isinstance(node, ast.Attribute) and node.attr == method.name):
                    continue
                call = parents.get(id(node))
                if j in program.testlike:
                    return None
                if not (isinstance(call, ast.Call) and call.func is node):
                    return None
                receiver = _src(node.value)
                gate = next((up for up in _ancestors(node, parents) if isinstance(up, ast.If)
                             and _gate_attr(up.test) == (receiver, attr) and _in_body(node, up, parents)), None)
                if gate is None:
                    return None
                sites.append(f"{rel[j]}:{gate.lineno}")
        elsewhere = called_in(dead, word, rb"\.")
        if not sites and not elsewhere:
            return None
        sites.sort(key=lambda site: -len(os.path.commonprefix([site, rel[home]])))
        shown = ", ".join(sites[:2]) + ("; and from modules found dead here" if elsewhere else "")
        shown = shown.lstrip("; ") or "only modules found dead here"
        return f"imported only in `{method.name}()`, called only under `if <obj>.{attr} is not None:` ({shown}); {why}"

    # (a gated import is indented, in a file naming a stored attribute or reading one)
    words = {attr.encode() for _i, _c, attr, *_rest in stores}
    gating = [i for i in program.python if i not in program.testlike
              and any(b"." + w in (program.text_of(i) or b"") for w in words)]
    lines_of: dict = {}

    def indented(i: int, line: int) -> bool:
        if i not in lines_of:
            lines_of[i] = (program.text_of(i) or b"").split(b"\n")
        text = lines_of[i][line - 1] if 0 < line <= len(lines_of[i]) else b""
        return text[:1] in (b" ", b"\t")

    def open_finding(f) -> bool:
        return not f.fixable and f.cell is None and f.severity != "info" and not is_moot(f)

    wanted = {j for j in program.python if j not in program.testlike and any(open_finding(f) for f in results[j].findings)}
    for _hop in range(2):
        wanted |= {i for j in list(wanted) for i, _line in program.importers.get(j, ()) if i not in program.testlike}
    gating = sorted(set(gating) | {i for i in program.python if i not in program.testlike and any(
        j in wanted and indented(i, line) for j, line in program.imports.get(i, ()))})

    # the greatest fixpoint: candidates shrink until every one is imported only by dead sites
    candidates: set = set()
    candidates_now = [candidates]
    dead_methods: dict = {}
    for _round in range(8):
        dead_methods = {}
        dead_functions.clear()
        candidates_now[0] = candidates
        for i, _cls, method, attr, why in methods:
            found = method_dead(i, method, attr, why, candidates)
            if found is not None:
                dead_methods[(i, id(method))] = found
        seeds: dict = {}
        for i in gating:
            if i in candidates:
                continue
            for j, line in program.imports.get(i, ()):
                if indented(i, line) and gated_site(i, line, dead_methods):
                    seeds.setdefault(j, True)
        grown = set(seeds) | (candidates & set(program.importers))
        todo = list(seeds)
        while todo:
            k = todo.pop()
            for j, _line in program.imports.get(k, ()):
                if j not in grown:
                    grown.add(j)
                    todo.append(j)
        changed = True
        while changed:
            changed = False
            for j in sorted(grown):
                live = False
                for i, line in program.importers.get(j, ()):
                    if i in grown or i in program.testlike:
                        continue
                    why = gated_site(i, line, dead_methods) if indented(i, line) else None
                    if why is None:
                        live = True
                        break
                folder = _stem(rel[j])[: -len("/__init__")] + "/" if rel[j].endswith("/__init__.py") else None
                if live or (folder and any(rel[k].startswith(folder) and k not in grown and k not in program.testlike
                                           for k in program.python)):
                    grown.discard(j)
                    changed = True
        if grown == candidates:
            break
        candidates = grown
    else:
        return results  # (no fixed point within the rounds: nothing is proven)
    if not candidates:
        return results
    # why each dead module is dead: the gated site it is reached from, and the module that loads it
    reasons: dict = {}  # module -> (the dead module importing it or None, line, the gated site's reason)
    for j, sites in program.importers.items():
        if j not in candidates:
            continue
        for i, line in sites:
            if i not in candidates and i not in program.testlike:
                why = gated_site(i, line, dead_methods)
                if why:
                    reasons.setdefault(j, (None, 0, why))
    todo = list(reasons)
    while todo:
        k = todo.pop(0)
        for j, line in program.imports.get(k, ()):
            if j in candidates and j not in reasons:
                reasons[j] = (k, line, reasons[k][2])
                todo.append(j)
    tested: dict = {}
    for j in candidates:
        for i, line in program.importers.get(j, ()):
            if i in program.testlike:
                tested.setdefault(j, f"{rel[i]}:{line}")
    todo = list(tested)
    while todo:
        k = todo.pop()
        for j, _line in program.imports.get(k, ()):
            if j in candidates and j not in tested:
                tested[j] = tested[k]
                todo.append(j)

    out = list(results)
    changed_at = []
    for j in sorted(candidates):
        if j not in reasons:
            continue
        via, line, root = reasons[j]
        why = f"loaded only through {rel[via]}:{line}, part of what is {root}" if via is not None else root
        findings, touched = [], False
        for f in results[j].findings:
            if f.fixable or f.cell is not None or is_moot(f) or named(f):
                findings.append(f)
                continue
            touched = True
            if j in tested:
                findings.append(dataclasses.replace(
                    f, severity="info",
                    message=(f"{f.message} (reached on an NPU host only from tests/benchmarks ({tested[j]}): the "
                             f"library never loads this module there, {why})")))
            else:
                findings.append(dataclasses.replace(f, severity="info", message=f"{f.message} ({BRANCH}: {why})"))
        if touched:
            out[j] = dataclasses.replace(results[j], findings=findings)
            changed_at.append(j)
    for j, result in zip(changed_at, to_scopes([out[j] for j in changed_at])):
        out[j] = result
    return out
