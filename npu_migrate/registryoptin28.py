"""Modules loaded only by a registration a user selects by name, or only under an environment switch
off by default (issue #16, policy P1, round-28 audit CA#34, CC#19). Whole run, from
runplan.whole_run_passes (after optinraise27.py).

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

The same fixpoint takes a second kind of opt-in site (CC#19): an import inside `if envs.X:` (or `if
envs.X and ...:`), X an entry of the project's `envs.py` table read off by default (`"X": lambda:
bool(int(os.getenv("X", "0")))`, tritonguards23.env_opt_in) that no library file sets itself
(`os.environ["X"] = ...`; another vendor's platform file aside: vLLM's ROCm platform turns on
VLLM_USE_TRITON_AWQ). A module imported only there (vLLM's awq_triton.py, imported by
_custom_ops.py only under `if envs.VLLM_USE_TRITON_AWQ:`): info "reached on an NPU host only when the
environment variable `X` is set". Test and benchmark importers are named in the message (policy P2).

Kept (the nearest true cases): a module also imported by an ordinary library module, a registered
name that is some setting's default, a module-level import of the module by a package `__init__`, a
registration whose path names no run module, a switch on by default or one the library sets.
"""

from __future__ import annotations

import ast
import dataclasses
import re
from typing import Optional

from . import astcache
from .optreads32 import annotation_string, either_switch

CHOSEN = ("reached on an NPU host only when `{name}` is chosen by name ({how}): an opt-in, to port if it is "
          "used there")
SET = ("reached on an NPU host only when the environment variable `{name}` is set ({how}): an opt-in, to port "
       "if it is used there")
_PATH = re.compile(r"[A-Za-z_]\w*(\.[A-Za-z_]\w*)+")
_NAME = re.compile(r"[A-Za-z_][\w-]*")
_SHIPPED = re.compile(r"(^|/)(benchmarks?|examples|scripts|tools)/|(^|/)bench[^/]*\.py$")
_OTHER_VENDOR = re.compile(r"(^|/|_)(rocm|hip|amd|xpu|tpu|hpu|mps)([_/.]|$)")
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


def _env_switches(results: list, library: list, text_of, modules) -> dict[str, str]:
    """{variable: "off by default (envs.py:line)"} of a project's `envs.py` table entries
    `"X": lambda: bool(int(os.getenv("X", "0")))` (tritonguards23.env_opt_in reads the value)."""
    from .tritonguards23 import env_opt_in

    out: dict[str, str] = {}
    read_too: dict[str, list] = {}  # (a switch also on under other variables: `X or Y`, round 32 GB#30)
    for i in library:
        relpath = results[i].relpath
        if relpath.rsplit("/", 1)[-1] != "envs.py" or b"lambda" not in (text_of(i) or b""):
            continue
        tree = modules.tree(i)
        for node in astcache.walk(tree) if tree is not None else ():
            if isinstance(node, ast.Dict):
                for key, value in zip(node.keys, node.values):
                    if not (isinstance(key, ast.Constant) and isinstance(key.value, str) and isinstance(value, ast.Lambda)):
                        continue
                    either = either_switch(value.body, env_opt_in) if env_opt_in(value.body) != key.value else None
                    if env_opt_in(value.body) == key.value or (either and key.value in either):
                        others = [n for n in either or () if n != key.value]
                        read_too[key.value] = others
                        also = f" it or `{'`, `'.join(others)}` is" if others else ""
                        out[key.value] = f"`{key.value}` is off unless{also} set ({relpath}:{value.lineno})"
    # (a variable the library sets itself is no user's choice: kept, unless only another vendor's
    # platform file sets it, as vLLM's platforms/rocm.py sets VLLM_USE_TRITON_AWQ)
    for variable in list(out):
        for name in [variable, *read_too.get(variable, ())]:
            write = re.compile(rb"(environ\[\s*|setdefault\(\s*|putenv\(\s*)[\"']" + re.escape(name.encode()) + rb"[\"']\s*(\]\s*=[^=]|,)")
            if any((data := text_of(i)) and name.encode() in data and write.search(data)
                   and not _OTHER_VENDOR.search(results[i].relpath) for i in library):
                del out[variable]
                break
    return out


env_switches = _env_switches  # (envskips29.py: a test module skipped unless such a switch is set)


def _env_blocks(tree: ast.Module, switches: dict) -> list[tuple[int, int, str, int, str]]:
    """(first, last line of the body, variable, line, how the site is shown) of each `if envs.X:` (or
    `if envs.X and ...:`)."""
    out = []
    for node in astcache.walk(tree):
        if not isinstance(node, ast.If) or not node.body:
            continue
        tests = node.test.values if isinstance(node.test, ast.BoolOp) and isinstance(node.test.op, ast.And) else [node.test]
        for test in tests:
            if (isinstance(test, ast.Attribute) and isinstance(test.value, ast.Name) and test.value.id == "envs"
                    and test.attr in switches):
                out.append((node.body[0].lineno, node.body[-1].end_lineno or node.body[-1].lineno, test.attr, node.lineno,
                            f"under `if envs.{test.attr}:`"))
                break
    return out


def _predicate_gates(results: list, library: list, text_of, modules, gated: dict) -> dict:
    """Adds to `gated` the regions past a library predicate false on an NPU host unless an
    environment variable is set (envpreds33.py); {variable: how} of those predicates."""
    from .envpreds33 import Predicates, blocks, switches

    preds = Predicates(results, library, text_of, modules)
    names = preds.candidates()
    if not names:
        return {}
    for i in library:
        data = text_of(i)
        if not data or not any(name in data for name in names) or (tree := modules.tree(i)) is None:
            continue
        found = blocks(i, tree, preds)
        if found:
            gated[i] = [*gated.get(i, ()), *found]
    return switches(preds)


def _type_checking_lines(tree: ast.Module) -> set[int]:
    lines: set[int] = set()
    for node in astcache.walk(tree):
        if isinstance(node, ast.If) and (astcache.dotted(node.test) or "").rsplit(".", 1)[-1] == "TYPE_CHECKING":
            for stmt in node.body:
                lines.update(range(stmt.lineno, (stmt.end_lineno or stmt.lineno) + 1))
    return lines


def _tested_only(tree: ast.Module, name: str, registration: Optional[ast.Call]) -> bool:
    """Every string `name` of the file is a comparison's operand or an argument of a call inside a
    test (or the registration's own argument, or that of another registration of the name to the
    same module: a second registry's, round 32 GC#2)."""
    parents = None
    calls = [] if registration is None else [registration] + same_registrations(tree, name, registration)
    for node in astcache.walk(tree):
        if not (isinstance(node, ast.Constant) and node.value == name):
            continue
        if any(node is a for call in calls for a in call.args):
            continue
        if parents is None:
            parents = astcache.parents(tree)
        up = parents.get(id(node))
        if isinstance(up, ast.Compare) or annotation_string(node, parents):
            continue  # (an annotation `x: "Name"` is a forward reference, no value: optreads32.py)
        if isinstance(up, ast.Call) and node in up.args and isinstance(parents.get(id(up)), _TESTS):
            continue
        return False
    return True


def same_registrations(tree: ast.Module, name: str, registration: ast.Call) -> list:
    """The file's other registrations of `name` to the module `registration` names."""
    found = [(p, c) for n, p, _line, c in _registrations(tree) if n == name]
    path = next((p for p, c in found if c is registration), None)
    return [c for p, c in found if p == path and c is not registration]


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
    paths_seen: dict[str, set] = {}
    for i in library:
        data = text_of(i)
        if not data or b"register" not in data:
            continue
        tree = modules.tree(i)
        if tree is None:
            continue
        for name, path, line, call in _registrations(tree):
            names_seen[name] = names_seen.get(name, 0) + (path not in paths_seen.setdefault(name, set()))
            paths_seen[name].add(path)  # (one name registered in two registries to one module: one choice, GC#2)
            j = modules.by_name.get(path)
            if j is not None and not results[j].relpath.endswith("__init__.py") and j not in aside:
                registered[j] = (name, i, line, call, path)
    registered = {j: r for j, r in registered.items() if names_seen[r[0]] == 1}
    switches = _env_switches(results, library, text_of, modules)
    gated: dict[int, list] = {}  # importer -> [(first, last, variable, line of the `if`)]
    if switches:
        for i in library:
            data = text_of(i)
            if data and b"envs." in data and (tree := modules.tree(i)) is not None:
                gated[i] = _env_blocks(tree, switches)
    # (h172, round 32 GA#37: past a library predicate false there unless a variable is set: envpreds33.py)
    switches = {**switches, **_predicate_gates(results, library, text_of, modules, gated)}
    if not registered and not any(gated.values()):
        return results
    # the entry's name is no setting's value anywhere in the library
    for j, (name, home, _line, call, path) in list(registered.items()):
        word = name.encode()
        for i in library:
            data = text_of(i)
            if not data or word not in data or i == j:  # (the module's own name for itself loads nothing: GC#2)
                continue
            tree = modules.tree(i)
            if tree is None or not _tested_only(tree, name, call if i == home else None):
                del registered[j]
                break
    for j, (name, home, _line, call, path) in list(registered.items()):
        dotted = re.compile(rb"[\"']" + re.escape(path.encode()) + rb"[\"':.]")
        if any(i != home and dotted.search(text_of(i) or b"") for i in library):
            del registered[j]  # (its path in another string: a second, dynamic loader)
    if not registered and not any(gated.values()):
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

    def switched(i: int, line: int) -> Optional[tuple]:
        return next((b for b in gated.get(i, ()) if b[0] <= line <= b[1]), None)

    # (h130, CC#19: a module imported only under `if envs.VLLM_USE_TRITON_AWQ:`, off by default)
    seeds: dict[int, tuple] = {}
    for i, blocks in gated.items():
        for j, line in imports.get(i, ()):
            block = switched(i, line) if blocks else None
            if block is not None and j not in aside and not results[j].relpath.endswith("__init__.py"):
                seeds.setdefault(j, (i, line, block))
    # the greatest fixpoint: what the registrations reach, shrunk until only its own modules import each
    grown = set(registered) | set(seeds)
    todo = list(grown)
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
                i not in grown and i not in aside and loads(i, line) and switched(i, line) is None
                for i, line in importers.get(j, ()))
            if live:
                grown.discard(j)
                changed = True
    if not grown:
        return results
    # how each module is reached: its registration, or the module of the set that loads it
    via: dict[int, tuple] = {j: (None, 0, j) for j in [*registered, *seeds] if j in grown}
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
        if root in registered:
            name, home, reg_line, _call, path = registered[root]
            how = (f"registered at {results[home].relpath}:{reg_line} as `{path}`, loaded lazily when a "
                   f"configuration names it, and imported by no other library module")
        else:
            sites = sorted({(results[i].relpath, site, block[2], block[4], switches[block[2]])
                            for i, site in importers.get(root, ()) if i not in aside and i not in grown
                            and (block := switched(i, site)) is not None})
            name = " or ".join(dict.fromkeys(f"{s[2]}" for s in sites))
            shown = "; ".join(f"{p}:{n} {g}" for p, n, _v, g, _w in sites[:3])
            how = (f"imported only there: {shown}; {', '.join(dict.fromkeys(w for *_r, w in sites))}; "
                   f"imported by no other library module")
        if loader is not None:
            how += f"; this module is loaded only through {results[loader].relpath}:{line}"
        tested = sorted({f"{results[i].relpath}:{site}" for i, site in importers.get(j, ()) if i in aside})
        if tested:
            how += f"; tests/benchmarks import it too ({', '.join(tested[:2])}), policy P2"
        note = (CHOSEN if root in registered else SET).format(name=name, how=how)
        out[j] = dataclasses.replace(results[j], findings=[
            dataclasses.replace(f, severity="info", message=f"{f.message} ({note})") if is_open(f) else f
            for f in results[j].findings])
    return out
