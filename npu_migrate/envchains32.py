"""Code a script reaches only through calls made under a module-level environment switch off by
default (issue #16, policy P1; round-31 audit FA#23, a multi-step chain). Whole run, from
runplan.whole_run_passes, after envskips29.py (whose reading of the project's `envs.py` table it
extends).

vLLM's `setup.py`:

    envs = load_module_from_path("envs", os.path.join(ROOT_DIR, "vllm", "envs.py"))
    USE_PRECOMPILED_RUST_FRONTEND = envs.VLLM_USE_PRECOMPILED or envs.VLLM_USE_PRECOMPILED_RUST

    class precompiled_wheel_utils:
        @staticmethod
        def detect_system_cuda_variant() -> str:
            ...
            cuda_version = torch.version.cuda            # NPU990
        @staticmethod
        def determine_wheel_url() -> tuple[str, str | None]:
            ...
            variant = precompiled_wheel_utils.detect_system_cuda_variant()

    if USE_PRECOMPILED_RUST_FRONTEND and not is_metadata_only_build():
        wheel_url, download_filename = precompiled_wheel_utils.determine_wheel_url()

and `vllm/envs.py`: `"VLLM_USE_PRECOMPILED": lambda: (os.environ.get("VLLM_USE_PRECOMPILED",
"").strip().lower() in ("1", "true") or bool(os.environ.get("VLLM_PRECOMPILED_WHEEL_LOCATION")))`.
By default the module-level `if` is false, on an NPU host as anywhere: the precompiled-wheel
download runs only when the user sets the variable, an explicit choice. Under policy P1 the
report-only errors and warnings of a function (a module-level function or a method of a
module-level class) every reference of which in its file lies in the body of such an `if`, or in
another function so reached (four steps at most), become info naming the variables and the chain:
"reached on an NPU host only when the environment variable `X` is set (...)". Never dropped, never
a scope (the user may set it there).

The switch: `envs.X` where X is an entry of the project's `envs.py` table off by default
(registryoptin28.env_switches, and here also a `.strip().lower()` chain and an `or` of such reads,
`bool(os.environ.get("Y"))` among them), no library file setting it; a module-level name bound once
to such a read, `A or B` of two off, `A and B` with one off.

Kept (the nearest true cases): a switch on by default (`os.getenv("X", "1")`), one the library
sets, a function also called outside the `if` (or from its `else:`), a name another library file
mentions (a module others import may call it; a test's mention is none, policy P2), a function nothing references, and code outside any
function.
"""

from __future__ import annotations

import ast
import re
from typing import Optional

from . import astcache

SET = ("reached on an NPU host only when the environment variable {names} is set ({how}): `{unit}` "
       "runs only {path}: an opt-in, to port if it is used there")
_DEFS = (ast.FunctionDef, ast.AsyncFunctionDef)
_DEPTH = 4
_ENV_READS = frozenset(("os.getenv", "os.environ.get", "getenv", "environ.get"))


def _peeled(value: ast.AST) -> ast.AST:
    """`os.environ.get("X", "").strip().lower() in (...)` read as `os.environ.get("X", "") in (...)`."""
    if isinstance(value, ast.Compare) and len(value.ops) == 1:
        left = value.left
        while isinstance(left, ast.Call) and isinstance(left.func, ast.Attribute) \
                and left.func.attr in ("lower", "strip", "casefold") and not left.args and not left.keywords:
            left = left.func.value
        if left is not value.left:
            return ast.Compare(left=left, ops=value.ops, comparators=value.comparators)
    return value


def _unset_none(value: ast.AST) -> Optional[str]:
    """X of `bool(os.environ.get("X"))`: False while X is unset (its default)."""
    if isinstance(value, ast.Call) and astcache.dotted(value.func) == "bool" and len(value.args) == 1:
        inner = value.args[0]
        if isinstance(inner, ast.Call) and (astcache.dotted(inner.func) or "") in _ENV_READS \
                and len(inner.args) == 1 and not inner.keywords \
                and isinstance(inner.args[0], ast.Constant) and isinstance(inner.args[0].value, str):
            return inner.args[0].value
    return None


def _off_entry(body: ast.AST) -> Optional[list]:
    """The variables an `envs.py` entry's value reads, where it is false while they are unset."""
    from .tritonguards23 import env_opt_in

    parts = body.values if isinstance(body, ast.BoolOp) and isinstance(body.op, ast.Or) else [body]
    names = []
    for part in parts:
        name = env_opt_in(part) or env_opt_in(_peeled(part)) or (_unset_none(part) if len(parts) > 1 else None)
        if name is None:
            return None
        names.append(name)
    return names


def switches(results: list, library: list, text_of, modules) -> dict:
    """{entry: (its variables, "off unless set (envs.py:line)")}: registryoptin28's table, with the
    entries it does not read (`.strip().lower()`, an `or` of reads)."""
    from .registryoptin28 import env_switches

    out = {name: ((name,), how) for name, how in env_switches(results, library, text_of, modules).items()}
    for i in library:
        relpath = results[i].relpath
        if relpath.rsplit("/", 1)[-1] != "envs.py" or b"lambda" not in (text_of(i) or b""):
            continue
        tree = modules.tree(i)
        for node in astcache.nodes(tree, ast.Dict) if tree is not None else ():
            for key, value in zip(node.keys, node.values):
                if isinstance(key, ast.Constant) and isinstance(key.value, str) and key.value not in out \
                        and isinstance(value, ast.Lambda):
                    names = _off_entry(value.body)
                    if names and key.value in names:
                        out[key.value] = (tuple(names), f"`{key.value}` is off unless set ({relpath}:{value.lineno})")
    for entry, (names, _how) in list(out.items()):  # (a variable the library sets itself: no user's choice)
        for variable in names:
            write = re.compile(rb"(environ\[\s*|setdefault\(\s*|putenv\(\s*)[\"']" + re.escape(variable.encode())
                               + rb"[\"']\s*(\]\s*=[^=]|,)")
            if any(variable.encode() in (text_of(i) or b"") and write.search(text_of(i) or b"") for i in library):
                out.pop(entry, None)
                break
    return out


class _File:
    """One module's module-level switch gates and the functions reached only through them."""

    def __init__(self, tree: ast.Module, table: dict) -> None:
        self.tree, self.table = tree, table
        self.names: dict = {}  # (module-level name bound once -> its value)
        counts: dict = {}
        for node in astcache.walk(tree):
            if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
                counts[node.id] = counts.get(node.id, 0) + 1
        for stmt in tree.body:
            if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name) \
                    and counts.get(stmt.targets[0].id) == 1:
                self.names[stmt.targets[0].id] = stmt.value
        self.gates: list = []  # ((first, last line of the body), the test's variables, the `if`)
        self._gates(tree.body)
        self.units: dict = {}  # (name -> [function]: module-level functions and module-level classes' methods)
        for stmt in tree.body:
            for item in [stmt] if isinstance(stmt, _DEFS) else stmt.body if isinstance(stmt, ast.ClassDef) else ():
                if isinstance(item, _DEFS):
                    self.units.setdefault(item.name, []).append(item)
        self.refs: dict = {}  # (name -> its loads: a Name or an attribute's name)
        for node in astcache.walk(tree):
            word = node.id if isinstance(node, ast.Name) else node.attr if isinstance(node, ast.Attribute) else None
            if word in self.units and isinstance(node.ctx, ast.Load):
                self.refs.setdefault(word, []).append(node)

    def off(self, test: ast.AST, seen: frozenset = frozenset()) -> Optional[tuple]:
        """The variables of a test false while they are unset; None where not known so."""
        if isinstance(test, ast.Attribute) and isinstance(test.value, ast.Name) and test.value.id == "envs" \
                and test.attr in self.table:
            return (test.attr,)
        if isinstance(test, ast.Name) and test.id in self.names and test.id not in seen:
            return self.off(self.names[test.id], seen | {test.id})
        if isinstance(test, ast.BoolOp):
            parts = [self.off(v, seen) for v in test.values]
            if isinstance(test.op, ast.Or):
                return tuple(n for p in parts for n in p) if all(parts) else None
            return next((p for p in parts if p), None)
        return None

    def _gates(self, body: list) -> None:
        for stmt in body:
            if isinstance(stmt, ast.If):
                names = self.off(stmt.test)
                if names and stmt.body:
                    self.gates.append(((stmt.body[0].lineno, stmt.body[-1].end_lineno or stmt.body[-1].lineno),
                                       names, stmt))
                else:
                    self._gates(stmt.body)
                self._gates(stmt.orelse)

    def _holder(self, node: ast.AST, parents: dict) -> Optional[ast.AST]:
        """The unit (a function of self.units) holding `node`, outermost."""
        found, current = None, parents.get(id(node))
        while current is not None:
            if isinstance(current, _DEFS) and current in self.units.get(current.name, ()):
                found = current
            current = parents.get(id(current))
        return found

    def reached(self, unit: ast.AST, others, depth: int = 0, seen: frozenset = frozenset()) -> Optional[tuple]:
        """(variables, the path "from `g` (line n), ... under `if ...` (line m)") where every reference of
        `unit` in the file lies under a switch gate or in a function so reached; else None."""
        name = unit.name
        refs = self.refs.get(name, [])
        if depth > _DEPTH or name in seen or not refs or len(self.units.get(name, ())) != 1 or others(name):
            return None
        parents = astcache.parents(self.tree)
        names: list = []
        path = None
        for ref in refs:
            holder = self._holder(ref, parents)
            if holder is unit:
                continue  # (its own recursion)
            if holder is None:
                gate = next((g for g in self.gates if g[0][0] <= ref.lineno <= g[0][1]), None)
                if gate is None:
                    return None
                names.extend(gate[1])
                shown = " ".join(ast.unparse(gate[2].test).split())[:80]
                path = path or f"under `if {shown}:` (line {gate[2].lineno})"
                continue
            inner = self.reached(holder, others, depth + 1, seen | {name})
            if inner is None:
                return None
            names.extend(inner[0])
            path = path or f"from `{holder.name}` (line {ref.lineno}), {inner[1]}"
        if path is None:
            return None
        return tuple(dict.fromkeys(names)), path

    def unit_at(self, line: int) -> Optional[ast.AST]:
        for units in self.units.values():
            for unit in units:
                if unit.body[0].lineno <= line <= (unit.end_lineno or unit.lineno):
                    return unit
        return None


SwitchGates = _File  # (public: envblocks34.py reads gates inside functions too)


def review(results: list, paths: Optional[dict] = None) -> list:
    """The results, with the open places of functions only a default-off switch's `if` reaches lowered
    to info (P1; this module's docstring)."""
    from .envskips29 import lower_result
    from .importgates import is_test
    from .modpaths import RunModules, RunTexts
    from .moot import is_open

    def wanted(f) -> bool:
        return is_open(f) and not f.fixable and f.cell is None and f.severity in ("error", "warning")

    python = [i for i, r in enumerate(results) if r.relpath.endswith(".py")]
    library = [i for i in python if not is_test(results[i].relpath)]
    candidates = [i for i in library if any(map(wanted, results[i].findings))]
    if not candidates:
        return results
    text_of = RunTexts(results, paths or {})
    candidates = [i for i in candidates if b"envs." in (text_of(i) or b"") and b"\nif " in (text_of(i) or b"")]
    if not candidates:
        return results
    modules = RunModules(results, text_of)
    table = switches(results, library, text_of, modules)
    if not table:
        return results
    out = list(results)
    for i in candidates:
        tree = modules.tree(i)
        if tree is None:
            continue
        file = _File(tree, table)
        if not file.gates:
            continue

        def others(name: str, i=i) -> bool:  # (another library file mentions it: it may call it; tests, P2, do not)
            word = name.encode()
            return any(j != i and word in (text_of(j) or b"") for j in library)

        memo: dict = {}

        def reason_of(line: int, file=file, others=others, memo=memo) -> Optional[str]:
            unit = file.unit_at(line)
            if unit is None:
                return None
            if id(unit) not in memo:
                memo[id(unit)] = file.reached(unit, others)
            found = memo[id(unit)]
            if found is None:
                return None
            variables, path = found
            shown = " or ".join(f"`{v}`" for v in dict.fromkeys(n for e in variables for n in table[e][0]))
            how = "; ".join(table[e][1] for e in variables[:2])
            return SET.format(names=shown, how=how, unit=unit.name, path=path)

        out[i] = lower_result(results[i], reason_of, wanted)
    return out
