"""CUDA kernels and graph captures reached only through code nothing runs on an NPU host (issue #16,
precision wave 26, helper h114).

The audits of a CUDA C++ source (BM#32) and a graph capture (BS#18) found two ways the earlier
reach passes stopped one step short:

- **A private module's function nothing names ends an unreached chain** (BM#32, called by
  extreach23.py's walk). extreach23 scopes the NPU912 error of a `.cu` whose extension class is
  reached only through `torch.autograd.Function` subclasses nothing applies, imports or names, and
  keeps it where the chain ends in an ordinary function or class: those are the library's API for
  its users. A module-level function of a private module (a path part with a leading underscore:
  `moe/_operation.py`, `__init__.py` aside) that no file of the run names at all (no call, import,
  re-export, string or attribute; only its own `def`) is not such an API: nothing in the package
  calls it, no public module hands it on, and users are not meant to import private modules; and
  where it reads the chain's next unit (`load_moe()`) only under an `if` testing a parameter that
  defaults to False (`def moe_cumsum(x, use_kernel=False): if ... and use_kernel: load_moe()`),
  even a direct call leaves the kernel unloaded. It ends the chain like an unused autograd
  Function (`unnamed_private_function`). A function of a public module, one a package `__init__`
  re-exports, one any other file or string names, one that loads unconditionally: kept.

- **A capture of its callers' own nested steps** (BS#18, called by singles22.review_run).
  singles22 names an NPU202 `torch.cuda.CUDAGraph`/`graph` that transfer_to_npu maps to NPUGraph an
  inference capture when the file computes no gradients, but keeps a file whose `with
  torch.cuda.graph(...)` body calls a parameter of its function: that callable is the caller's, a
  training step as well. Where the capturing function is a private method (`def
  _capture_graph(self, graph, pool, stream, run_once_fn)`) and every call of the run by that
  attribute name that supplies the parameter hands in a name bound by a `def` nested in the
  calling function (`def run_once(): ...; self._capture_graph(graph, pool, stream, run_once)`),
  whose own text names no gradient machinery, the capture is that inference step
  (`handed_local_steps`, naming each nested function). A caller handing on its own parameter, a
  lambda or an attribute, `*args`/`**kwargs`, a nested step that trains, a public method, a method
  no call reaches: kept.
"""

from __future__ import annotations

import ast
import re
from typing import Optional

from . import astcache


def _private_module(relpath: str) -> bool:
    parts = relpath.split("/")
    return any(p.startswith("_") and p != "__init__.py" and not p.startswith("__") for p in parts)


def unnamed_private_function(i: int, relpath: str, unit: ast.AST, python: list, text_of, tree_of) -> Optional[str]:
    """Why `unit` (a module-level function of module i, `relpath`) ends an unreached chain, or
    None: its module is private and no file of the run names it outside its own `def` (module
    doc)."""
    if not isinstance(unit, (ast.FunctionDef, ast.AsyncFunctionDef)) or not _private_module(relpath):
        return None
    if unit.decorator_list:
        return None  # (a decorator may register it: a name in a table)
    word = re.compile(rb"\b" + re.escape(unit.name.encode()) + rb"\b")
    for j in python:
        if j != i and word.search(text_of(j) or b""):
            return None  # (another file names it: an import, a call, a string)
    tree = tree_of(i)
    if tree is None or not any(s is unit for s in tree.body):
        return None
    inside = {id(n) for n in ast.walk(unit)}
    for node in astcache.walk(tree):
        if id(node) in inside:
            continue
        if (isinstance(node, ast.Name) and node.id == unit.name) or (
                isinstance(node, ast.Attribute) and node.attr == unit.name) or (
                isinstance(node, ast.Constant) and isinstance(node.value, str) and unit.name in node.value) or (
                isinstance(node, ast.alias) and unit.name in (node.name, node.asname)):
            return None
    flag = _off_by_default(tree, unit)
    if flag is None:
        return None
    return f"a function of a private module that no file of the run names, reaching it only under `{flag}`, False by default"


def _off_by_default(tree: ast.Module, unit: ast.AST) -> Optional[str]:
    """The parameter, defaulting to False, under whose test (`if p:`, `if x and p:`) every read in
    `unit` of a module-level function or class of its module lies, or None."""
    a = unit.args
    positional = [*a.posonlyargs, *a.args]
    defaults = dict(zip([p.arg for p in positional[len(positional) - len(a.defaults):]], a.defaults))
    defaults.update({p.arg: d for p, d in zip(a.kwonlyargs, a.kw_defaults) if d is not None})
    off = {name for name, d in defaults.items() if isinstance(d, ast.Constant) and d.value is False}
    units = {s.name for s in tree.body if isinstance(s, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))}
    parents = astcache.parents(tree)
    found: set = set()
    for node in ast.walk(unit):
        if not (isinstance(node, ast.Name) and node.id in units and isinstance(node.ctx, ast.Load)):
            continue
        guards: set = set()
        child, current = node, parents.get(id(node))
        while current is not None and current is not unit:
            if isinstance(current, ast.If) and child in current.body:
                test = current.test
                operands = test.values if isinstance(test, ast.BoolOp) and isinstance(test.op, ast.And) else [test]
                guards.update(o.id for o in operands if isinstance(o, ast.Name) and o.id in off)
            child, current = current, parents.get(id(current))
        if not guards:
            return None
        found = guards if not found else found & guards
        if not found:
            return None
    return sorted(found)[0] if found else None


def _parameters(function: ast.AST) -> list:
    a = function.args
    return [p.arg for p in (*a.posonlyargs, *a.args)]


def handed_local_steps(results: list, tree: ast.Module, text_of, gradients, captures) -> Optional[str]:
    """Where every `with torch.cuda.graph(...)` (`captures`) of `tree` whose body calls a parameter
    of its function captures only nested functions its callers define (BS#18, called by
    singles22.review_run): the places of those nested functions, or None.

    The capturing function must be a private method (`def _capture_graph(self, graph, ..., fn)`);
    every call of the run of an attribute by that name that supplies the parameter (by position
    after `self`, or by keyword; a call that cannot supply it is another class's method) hands in a
    name bound by a `def` nested in the calling function, whose own text names no gradient
    machinery (`gradients`). No call, a parameter handed on from the caller's own parameters, a
    lambda or an attribute, a nested step that trains: None (the capture may be the caller's
    training step)."""
    parents = astcache.parents(tree)
    told: list = []
    for node in astcache.nodes(tree, (ast.With, ast.AsyncWith)):
        if not any(isinstance(i.context_expr, ast.Call) and astcache.dotted(i.context_expr.func) in captures
                   for i in node.items):
            continue
        function = parents.get(id(node))
        while function is not None and not isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef)):
            function = parents.get(id(function))
        if function is None:
            continue
        params = _parameters(function)
        called = {n.func.id for statement in node.body for n in ast.walk(statement)
                  if isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id in params}
        if not called:
            continue
        if not (function.name.startswith("_") and not function.name.startswith("__") and params
                and params[0] in ("self", "cls")):
            return None
        for param in called:
            places = _local_steps(results, function.name, params.index(param) - 1, param, text_of, gradients)
            if not places:
                return None
            told.extend(places)
    return ", ".join(dict.fromkeys(told)) if told else None


def _local_steps(results: list, method: str, index: int, param: str, text_of, gradients) -> Optional[list]:
    places: list = []
    word = f".{method}(".encode()
    for j, result in enumerate(results):
        data = text_of(j) if result.relpath.endswith(".py") else None
        if not data or word not in data:
            continue
        tree = astcache.parse(data)
        if tree is None:
            return None
        parents = astcache.parents(tree)
        for call in astcache.nodes(tree, (ast.Call,)):
            if not (isinstance(call.func, ast.Attribute) and call.func.attr == method):
                continue
            given = next((k.value for k in call.keywords if k.arg == param), None)
            if given is None and any(k.arg is None for k in call.keywords) or any(
                    isinstance(a, ast.Starred) for a in call.args):
                return None  # (`**kwargs`, `*args`: unknown)
            if given is None:
                if index >= len(call.args):
                    continue  # (cannot supply the parameter: another class's method)
                given = call.args[index]
            if not isinstance(given, ast.Name):
                return None
            caller = parents.get(id(call))
            while caller is not None and not isinstance(caller, (ast.FunctionDef, ast.AsyncFunctionDef)):
                caller = parents.get(id(caller))
            if caller is None:
                return None
            nested = [n for n in ast.walk(caller) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))
                      and n is not caller and n.name == given.id]
            rebound = [n for n in ast.walk(caller) if isinstance(n, ast.Name) and n.id == given.id
                       and isinstance(n.ctx, ast.Store)]
            if len(nested) != 1 or rebound or given.id in _parameters(caller):
                return None
            if gradients.search(ast.unparse(nested[0])):
                return None
            places.append(f"`{given.id}` ({result.relpath}:{nested[0].lineno})")
    return places or None
