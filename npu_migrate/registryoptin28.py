"""Modules loaded only by a registration a user selects by name (issue #16, policy P1, round-28
audit CA#34). Whole run, from runplan.whole_run_passes (after optinraise27.py).

A plug-in registry names its entries by a string and loads each module lazily, when a user's
configuration names the entry:

    # kv_connector/factory.py
    KVConnectorFactory.register_connector(
        "HiSparseConnector",                                    # what the user writes in a config
        "pkg.kv_connector.v1.hisparse.connector",               # loaded by importlib, only then
        "HiSparseConnector",
    )

Nothing else of the library imports `hisparse/connector.py`, and what only it (and the modules only
it loads) imports, such as `hisparse/worker.py`, is loaded by nothing else either. An NPU host runs
that code only when its user names "HiSparseConnector": an explicit choice. Under policy P1 the open
errors and warnings of such modules become info naming the entry, the registration (file:line) and
the module that loads them: "reached on an NPU host only when `HiSparseConnector` is chosen by
name ...". Never dropped.

The decision:
* a registration is a module-level call statement `X.register_*(...)` / `register_*(...)` of a
  library module whose first argument is a plain name string ("HiSparseConnector") and another
  positional argument a dotted module path ("a.b.c", no colon) of a run module that is not a package
  `__init__`;
* the name is nowhere in the library a value: each other string equal to it is an operand of a
  comparison or an argument of a call inside a test (`if cfg.has_connector("HiSparseConnector"):`).
  A name that is a default, an assigned or returned value, a list or dict element (a registry's
  default choice), or a second registration of it: the registration counts for nothing;
* the modules so loaded, and those they import, form a greatest fixpoint: a module stays in it
  only while every import site of it in the library (tests, benchmarks, examples and tools aside:
  policy P2; `if TYPE_CHECKING:` imports aside: they load nothing) lies in a module of the set,
  and it is not a package `__init__` (a package is loaded by any of its modules); no other library
  file names a registered module's dotted path in a string (a second, dynamic loader).

On vLLM 0.33 (round 28): hisparse/worker.py's two NPU202 errors (CA#34) and the encoder-cache
Mooncake connector's "cuda" warning; the weight-transfer engines stay ("nccl" is the default of
their setting), and so does any connector another module imports.

Kept (the nearest true cases): a module also imported by an ordinary library module, a registered
name that is some setting's default, a module-level import of the module by a package `__init__`, a
registration whose path names no run module.
"""

from __future__ import annotations

import ast
import dataclasses
import re
from typing import Optional

from . import astcache

CHOSEN = ("reached on an NPU host only when `{name}` is chosen by name ({how}): an opt-in, to port if it is "
          "used there")
_PATH = re.compile(r"[A-Za-z_]\w*(\.[A-Za-z_]\w*)+")
_NAME = re.compile(r"[A-Za-z_][\w-]*")
_SHIPPED = re.compile(r"(^|/)(benchmarks?|examples|scripts|tools)/|(^|/)bench[^/]*\.py$")
_TESTS = (ast.If, ast.While, ast.Assert, ast.IfExp, ast.BoolOp, ast.UnaryOp, ast.Compare)


def _registrations(tree: ast.Module) -> list[tuple[str, str, int, ast.Call]]:
    """(entry name, dotted module path, line, call) of the module-level registration calls."""
    out = []
    for stmt in tree.body:
        if not (isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call)):
            continue
        call = stmt.value
        func = call.func.attr if isinstance(call.func, ast.Attribute) else call.func.id if isinstance(call.func, ast.Name) else ""
        if not func.startswith("register") or len(call.args) < 2:
            continue
        strings = [a.value if isinstance(a, ast.Constant) and isinstance(a.value, str) else None for a in call.args]
        first = strings[0]
        if first is None or not _NAME.fullmatch(first):
            continue
        paths = [s for s in strings[1:] if s and _PATH.fullmatch(s)]
        if len(paths) == 1:
            out.append((first, paths[0], stmt.lineno, call))
    return out


def _type_checking_lines(tree: ast.Module) -> set[int]:
    lines: set[int] = set()
    for node in astcache.walk(tree):
        if isinstance(node, ast.If) and (astcache.dotted(node.test) or "").rsplit(".", 1)[-1] == "TYPE_CHECKING":
            for stmt in node.body:
                lines.update(range(stmt.lineno, (stmt.end_lineno or stmt.lineno) + 1))
    return lines


def _tested_only(tree: ast.Module, name: str, registration: Optional[ast.Call]) -> bool:
    """Every string `name` of the file is a comparison's operand or an argument of a call inside a
    test (or the registration's own argument)."""
    parents = None
    for node in astcache.walk(tree):
        if not (isinstance(node, ast.Constant) and node.value == name):
            continue
        if registration is not None and any(node is a for a in registration.args):
            continue
        if parents is None:
            parents = astcache.parents(tree)
        up = parents.get(id(node))
        if isinstance(up, ast.Compare):
            continue
        if isinstance(up, ast.Call) and node in up.args and isinstance(parents.get(id(up)), _TESTS):
            continue
        return False
    return True


def review(results: list, paths: Optional[dict] = None) -> list:
    from .importgates import is_test
    from .modpaths import ImportIndex, RunModules, RunTexts
    from .moot import is_open
    from .wholeprogram import file_facts

    if not any(r.relpath.endswith(".py") and any(map(is_open, r.findings)) for r in results):
        return results
    text_of = RunTexts(results, paths or {})
    python = [i for i, r in enumerate(results) if r.relpath.endswith(".py")]
    aside = {i for i in python if is_test(results[i].relpath) or _SHIPPED.search(results[i].relpath)}
    library = [i for i in python if i not in aside]
    modules = RunModules(results, text_of)
    registered: dict[int, tuple[str, int, str, ast.Call, str]] = {}  # module -> (name, registry, line, call, path)
    names_seen: dict[str, int] = {}
    for i in library:
        data = text_of(i)
        if not data or b"register" not in data:
            continue
        tree = modules.tree(i)
        if tree is None:
            continue
        for name, path, line, call in _registrations(tree):
            names_seen[name] = names_seen.get(name, 0) + 1
            j = modules.by_name.get(path)
            if j is not None and not results[j].relpath.endswith("__init__.py") and j not in aside:
                registered[j] = (name, i, line, call, path)
    registered = {j: r for j, r in registered.items() if names_seen[r[0]] == 1}
    if not registered:
        return results
    # the entry's name is no setting's value anywhere in the library
    for j, (name, home, _line, call, path) in list(registered.items()):
        word = name.encode()
        for i in library:
            data = text_of(i)
            if not data or word not in data:
                continue
            tree = modules.tree(i)
            if tree is None or not _tested_only(tree, name, call if i == home else None):
                del registered[j]
                break
    for j, (name, home, _line, call, path) in list(registered.items()):
        dotted = re.compile(rb"[\"']" + re.escape(path.encode()) + rb"[\"':.]")
        if any(i != home and dotted.search(text_of(i) or b"") for i in library):
            del registered[j]  # (its path in another string: a second, dynamic loader)
    if not registered:
        return results

    index = ImportIndex(results, python)
    imports: dict[int, list] = {}
    importers: dict[int, list] = {}
    for i in python:
        facts = results[i].facts
        if facts is None:
            facts = file_facts(results[i].relpath, text_of(i) or b"")
        imports[i] = index.files(facts.get("imports") or [], i)
        for j, line in imports[i]:
            importers.setdefault(j, []).append((i, line))
    checking: dict[int, set] = {}

    def loads(i: int, line: int) -> bool:
        if i not in checking:
            tree = modules.tree(i)
            checking[i] = _type_checking_lines(tree) if tree is not None else set()
        return line not in checking[i]

    # the greatest fixpoint: what the registrations reach, shrunk until only its own modules import each
    grown = set(registered)
    todo = list(registered)
    while todo:
        k = todo.pop()
        for j, line in imports.get(k, ()):
            if j not in grown and j not in aside and loads(k, line):
                grown.add(j)
                todo.append(j)
    changed = True
    while changed:
        changed = False
        for j in sorted(grown):
            live = results[j].relpath.endswith("__init__.py") or any(
                i not in grown and i not in aside and loads(i, line) for i, line in importers.get(j, ()))
            if live:
                grown.discard(j)
                changed = True
    if not grown:
        return results
    # how each module is reached: its registration, or the module of the set that loads it
    via: dict[int, tuple] = {j: (None, 0, j) for j in registered if j in grown}
    todo = list(via)
    while todo:
        k = todo.pop(0)
        for j, line in imports.get(k, ()):
            if j in grown and j not in via and loads(k, line):
                via[j] = (k, line, via[k][2])
                todo.append(j)
    out = list(results)
    for j in sorted(via):
        if not any(map(is_open, results[j].findings)):
            continue
        loader, line, root = via[j]
        name, home, reg_line, _call, path = registered[root]
        how = (f"registered at {results[home].relpath}:{reg_line} as `{path}`, loaded lazily when a "
               f"configuration names it, and imported by no other library module")
        if loader is not None:
            how += f"; this module is loaded only through {results[loader].relpath}:{line}"
        note = CHOSEN.format(name=name, how=how)
        out[j] = dataclasses.replace(results[j], findings=[
            dataclasses.replace(f, severity="info", message=f"{f.message} ({note})") if is_open(f) else f
            for f in results[j].findings])
    return out
