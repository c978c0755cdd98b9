"""Code that serves only a package the module imports under a gate false on an NPU host (issue #16,
round 24: BO#29). Whole run, from runplan.whole_run_passes, after callgates21.py.

    # deep_gemm_wrapper/compile_utils.py
    from .configurer import ENABLE_JIT_DEEPGEMM   # False on an NPU host (flagcalls19 reads it)
    if ENABLE_JIT_DEEPGEMM:
        import deep_gemm                          # NPU911: info already (flagcalls19.py)

    def _empty_fp8(size):
        return torch.empty(size, dtype=torch.float8_e4m3fn)     # NPU913: a named scope now

    class _Base:
        @staticmethod
        def create(kind, **kw):
            return {1: _Normal, 2: _Grouped}[kind](**kw)
    class _Normal(_Base):
        def __init__(self, m, k):
            self.lhs = _empty_fp8((m, k))
        def execute(self, m):
            deep_gemm.fp8_gemm_nt(self.lhs[:m], ...)

    def _compile_all(kind, m_list):
        try:
            executor = _Base.create(kind, m=max(m_list), k=128)
            mode = deep_gemm.get_compile_mode()   # always used: NameError on an NPU host
            ...
        finally:
            ...

The tool already finds the gate false there (flagcalls19.blocks: the flag bound by a call in
another module) and lowers the import; fp8cpu.review_gated lowers FP8 in a function that always
*calls* a name so bound (`prepare_moe_input(...)` under `if _is_cuda:`). Two shapes stayed errors:
a module used as `deep_gemm.fp8_gemm_nt(...)` (an attribute of the gated name, inside a `try:`
that only has a `finally:`), and a helper whose callers are those functions: the FP8 buffers of
`_empty_fp8` exist only to feed `deep_gemm`.

Read here, one module at a time:

* the gated names: bound only by the imports in the body of a module-level `if` that
  flagcalls19.blocks finds false on an NPU host (nowhere else in the module, no `global`);
* a function that needs one (a module-level function or a method of a module-level class): its
  body evaluates the name, not as a local, in a statement that runs whenever the function runs
  (not inside a branch, loop body, `except`, lambda, comprehension or short-circuit; inside a
  `try` only when no handler catches NameError), with no `return` or `yield` before it (and no
  generator): it never completes on an NPU host;
* a unit serving only such functions: a module-level function or class (no decorator but
  `dataclass`, `lru_cache`, `cache`, `contextmanager`, `total_ordering`; not named in a string of
  the module; its name a word of no other file of the run) every reference of which lies in a
  function that needs a gated name, in a method of a class serving only them, or in the base list
  of such a class; at least one chain of references ends in a function that needs the name (a
  cycle of helpers nothing else uses is no evidence).

A report-only finding (not fixable, not moot, not info) every place of which lies in the body of
such a function, or of a method of such a class, becomes info:

* FP8 (NPU913) with fp8cpu.CANNOT_RUN (a moot phrase: a named skipped scope), naming the unit, the
  function needing the name, and the gate: FP8 buffers feeding the package are no port item of
  their own (fp8cpu's reading);
* any other finding (a CUDA-only import in such a helper) with NEEDS / SERVES, information naming
  the function to port or gate, and only where that function is named in no other file of the
  run: an API other modules call fails on an NPU host where they do, and the CUDA-only import on
  its way stays an error (SGLang's `fused_marlin_moe`, called from a quantization scheme).

And in any module of the run, a finding every place of which lies after a top-level statement of
its function (or method) that always calls such a function (`deep_gemm_wrapper.grouped_gemm(...)`,
resolved through flagcalls19.Run.lookup, a package `__init__`'s `from .entrypoint import *`
included), with no `return`/`yield` before it, becomes info (raisefirst23.UNREACHED, not a scope:
the function does run there, and fails at that call), naming the call and the gate.

A merged finding with a place kept stays whole (its other places are folded into it already). A
place in a default, a decorator or a class body (run at import) stays; so does any unit with a
reference at module level, in another function, in a string or in another file, a use inside
`with suppress(...)` or a `try` whose handler catches NameError, and a call under a condition.
"""

from __future__ import annotations

import ast
import dataclasses
import re
from typing import Optional

from . import astcache

_DEFS = (ast.FunctionDef, ast.AsyncFunctionDef)
_PLAIN_STMTS = (ast.Expr, ast.Assign, ast.AnnAssign, ast.AugAssign, ast.Return)
# expression nodes evaluated whenever their statement runs (no short-circuit, condition, lambda or
# comprehension)
_PLAIN_EXPRS = (ast.Call, ast.Attribute, ast.Subscript, ast.Tuple, ast.List, ast.keyword, ast.Starred, ast.BinOp,
                ast.UnaryOp, ast.Name, ast.Constant, ast.Slice, ast.Compare, ast.Dict, ast.Set, ast.JoinedStr,
                ast.FormattedValue, ast.Await)
_HARMLESS_DECORATORS = frozenset({"dataclass", "lru_cache", "cache", "contextmanager", "total_ordering"})
# FP8 in code that cannot complete there is no port item of its own (fp8cpu.CANNOT_RUN, a named scope);
# any other finding (a CUDA-only import in a helper) is information naming what to port
_SCOPED = frozenset({"NPU913"})
NEEDS = "information: this function cannot complete on an NPU host"
SERVES = "information: only code that cannot complete on an NPU host reaches it"
_CATCHES_NAME_ERROR = frozenset({"NameError", "Exception", "BaseException"})
_GATED_IF = re.compile(rb"(?:^|\n)if [^\n]*:[ \t]*(?:#[^\n]*)?\n[ \t]+(?:from|import) ")


# ----------------------------------------------------------------------------- the gated names
def _bound(node: ast.AST) -> list:
    if isinstance(node, (ast.Import, ast.ImportFrom)):
        return [(a.asname or a.name).split(".", 1)[0] for a in node.names if a.name != "*"]
    if isinstance(node, (*_DEFS, ast.ClassDef)):
        return [node.name]
    if isinstance(node, ast.Name) and not isinstance(node.ctx, ast.Load):
        return [node.id]
    if isinstance(node, ast.alias) and node.name == "*":
        return ["*"]
    return []


def _module_level_nodes(stmt: ast.AST):
    """The nodes of a module-level statement that run at import (function and class bodies left
    out; their `def`/`class` statements kept: they bind a name)."""
    stack = [stmt]
    while stack:
        node = stack.pop()
        yield node
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (*_DEFS, ast.ClassDef)):
                yield child
            elif not isinstance(child, ast.Lambda):
                stack.append(child)


def gated_names(tree: ast.Module, false_blocks: list) -> dict:
    """{name: (the `if` test, why it is false there)} of the names module binds only by imports in
    the body of a module-level `if` whose body is one of `false_blocks` ((first, last, why))."""
    starts = {first: why for first, _last, why in false_blocks}
    inside: dict = {}
    elsewhere: set = set()
    for stmt in tree.body:
        why = starts.get(stmt.body[0].lineno) if isinstance(stmt, ast.If) and stmt.body else None
        tops = [stmt] if why is None else [*stmt.body, *stmt.orelse]
        for top in tops:
            own = why is not None and any(top is s for s in stmt.body) and isinstance(top, (ast.Import, ast.ImportFrom))
            for node in _module_level_nodes(top):
                names = _bound(node)
                if own and isinstance(node, (ast.Import, ast.ImportFrom)):
                    test = " ".join(ast.unparse(stmt.test).split())[:80]
                    inside.update((n, (test, why)) for n in names)
                else:
                    elsewhere.update(names)
    if "*" in elsewhere or "*" in inside:
        return {}  # (a star import may bind anything)
    elsewhere.update(n for node in astcache.walk(tree) if isinstance(node, ast.Global) for n in node.names)
    return {n: v for n, v in inside.items() if n not in elsewhere}


# ----------------------------------------------------------------------------- functions that need one
def _locals(function: ast.AST) -> set:
    out = {a.arg for a in ast.walk(function.args) if isinstance(a, ast.arg)}
    for node in ast.walk(function):
        if node is not function:
            out.update(n for n in _bound(node) if n != "*")
    return out


def _catches(handler: ast.ExceptHandler) -> bool:
    if handler.type is None:
        return True
    kinds = handler.type.elts if isinstance(handler.type, ast.Tuple) else [handler.type]
    return any((astcache.dotted(k) or "").rpartition(".")[2] in _CATCHES_NAME_ERROR for k in kinds)


def _plain_nodes(expr: ast.AST):
    """The nodes of an expression evaluated whenever it is (no short-circuit, condition, lambda or
    comprehension), outer before inner."""
    stack = [expr]
    while stack:
        node = stack.pop()
        if not isinstance(node, _PLAIN_EXPRS):
            continue
        yield node
        stack.extend(reversed(list(ast.iter_child_nodes(node))))


def _leaves(stmt: ast.AST) -> bool:
    return any(isinstance(n, (ast.Return, ast.Yield, ast.YieldFrom)) for n in ast.walk(stmt))


def first_always(body: list, match) -> Optional[tuple]:
    """(what `match(node)` said, the statement holding the node) of the first node the statements
    always evaluate for which `match` answers; None when one may leave before (or none matches)."""
    for stmt in body:
        exprs: list = []
        if isinstance(stmt, _PLAIN_STMTS):
            exprs = list(ast.iter_child_nodes(stmt))
        elif isinstance(stmt, (ast.If, ast.While)):
            exprs = [stmt.test]
        elif isinstance(stmt, (ast.For, ast.AsyncFor)):
            exprs = [stmt.iter]
        elif isinstance(stmt, (ast.With, ast.AsyncWith)):
            exprs = [item.context_expr for item in stmt.items]
            if any("suppress" in ast.unparse(e) for e in exprs):
                return None  # (`with suppress(...)`: a NameError inside may be swallowed)
        for expr in exprs:
            for node in _plain_nodes(expr):
                said = match(node)
                if said is not None:
                    return said, stmt
        if isinstance(stmt, (ast.With, ast.AsyncWith)) or \
                (isinstance(stmt, ast.Try) and not any(map(_catches, stmt.handlers))):
            found = first_always(stmt.body, match)
            if found is not None:
                return found
        if isinstance(stmt, ast.Return) or _leaves(stmt):
            return None
    return None


def needs(function: ast.AST, gated: dict) -> Optional[tuple]:
    """(name, line) of a gated name the function always uses before it may leave, or None."""
    if any(isinstance(n, (ast.Yield, ast.YieldFrom)) for n in ast.walk(function)):
        return None  # (a generator runs only as it is iterated)
    local = _locals(function)

    def match(node):
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load) and node.id in gated and node.id not in local:
            return node.id, node.lineno
        return None

    found = first_always(function.body, match)
    return None if found is None else found[0]


# ----------------------------------------------------------------------------- units serving only them
def _decorated(stmt: ast.AST) -> bool:
    for d in stmt.decorator_list:
        target = d.func if isinstance(d, ast.Call) else d
        if (astcache.dotted(target) or "").rpartition(".")[2] not in _HARMLESS_DECORATORS:
            return True
    return False


def _container(node: ast.AST, parents: dict, units: dict) -> tuple:
    """Where a reference lies: ("f", name) a module-level function's body, ("m", class, method) a
    method's body, ("c", class) a class's base list, ("mod",) code run at import."""
    chain = []
    current = node
    while current is not None and not isinstance(current, ast.Module):
        chain.append(current)
        current = parents.get(id(current))
    chain.reverse()  # (module-level statement first)
    if not chain or chain[0].__class__ not in (*_DEFS, ast.ClassDef) or chain[0].name not in units:
        return ("mod",)
    top = chain[0]
    child = chain[1] if len(chain) > 1 else None
    if isinstance(top, _DEFS):
        return ("f", top.name) if any(child is s for s in top.body) else ("mod",)
    if any(child is b for b in top.bases) or any(child is k for k in top.keywords):
        return ("c", top.name)
    if isinstance(child, _DEFS) and any(child is s for s in top.body):
        grand = chain[2] if len(chain) > 2 else None
        return ("m", top.name, child.name) if any(grand is s for s in child.body) else ("mod",)
    return ("mod",)


class _Module:
    """The verdicts of one module: gated names, functions needing them, units serving only those."""

    def __init__(self, tree: ast.Module, gated: dict, elsewhere) -> None:
        self.tree, self.gated = tree, gated
        defined = [s for s in tree.body if isinstance(s, (*_DEFS, ast.ClassDef))]
        twice = {s.name for s in defined if sum(d.name == s.name for d in defined) > 1}
        self.units = {s.name: s for s in defined if s.name not in twice}  # (a name defined twice: which one runs?)
        self.needing: dict = {}  # (("f", name) / ("m", class, method) -> (gated name, line))
        for name, unit in self.units.items():
            if isinstance(unit, _DEFS):
                found = needs(unit, gated)
                if found:
                    self.needing[("f", name)] = found
            else:
                for item in unit.body:
                    if isinstance(item, _DEFS):
                        found = needs(item, gated)
                        if found:
                            self.needing[("m", name, item.name)] = found
        self.serving: dict = {}  # (unit name -> the container key that first anchored it)
        self.elsewhere = elsewhere
        if self.needing:
            self._serving(elsewhere)

    def _serving(self, elsewhere) -> None:
        parents = astcache.parents(self.tree)
        strings = {n.value for n in astcache.walk(self.tree) if isinstance(n, ast.Constant) and isinstance(n.value, str)}
        refs: dict = {name: [] for name in self.units}
        for node in astcache.walk(self.tree):
            if isinstance(node, ast.Name) and node.id in refs:
                if not isinstance(node.ctx, ast.Load):
                    refs[node.id].append(("mod",))
                else:
                    refs[node.id].append(_container(node, parents, self.units))
        candidates = {name for name, unit in self.units.items()
                      if refs[name] and not _decorated(unit) and name not in strings}
        while True:
            self.serving = self._anchored(refs, self._greatest(refs, candidates))
            named = {name for name in self.serving if elsewhere(name)}  # (asked last: a scan of the run)
            if not named:
                return
            candidates -= named

    def _greatest(self, refs: dict, candidates: set) -> set:
        candidates = set(candidates)
        # (the greatest set whose every reference lies in it or in a function needing a gated name)
        while True:
            dropped = {name for name in candidates
                       if not all(self._served(key, candidates) or key == ("f", name) or key[:2] == ("m", name)
                                  or key == ("c", name) for key in refs[name])}
            if not dropped:
                break
            candidates -= dropped
        return candidates

    def _anchored(self, refs: dict, candidates: set) -> dict:
        """{unit: the reference that anchors it} of the candidates a chain of references links to a
        function needing a gated name."""
        serving: dict = {}
        changed = True
        while changed:
            changed = False
            for name in sorted(candidates - serving.keys()):
                key = next((k for k in refs[name] if k in self.needing or self._owner(k) in serving), None)
                if key is not None:
                    serving[name] = key
                    changed = True
        return serving

    def _served(self, key: tuple, names: set) -> bool:
        return key in self.needing or self._owner(key) in names

    @staticmethod
    def _owner(key: tuple) -> Optional[str]:
        return key[1] if key[0] in ("f", "m", "c") else None

    def _show(self, key: tuple) -> str:
        return f"{key[1]}.{key[2]}" if key[0] == "m" else key[1]

    def reason(self, line: int, code: str) -> Optional[str]:
        """Why the code at `line` never completes on an NPU host, or None: for FP8 (NPU913, no port
        item of its own) a moot phrase, for any other finding information saying what to port."""
        from .fp8cpu import CANNOT_RUN

        unit = next((u for u in self.units.values() if u.lineno <= line <= (u.end_lineno or u.lineno)), None)
        if unit is None:
            return None
        key: Optional[tuple] = None
        if isinstance(unit, _DEFS):
            key = ("f", unit.name) if unit.body[0].lineno <= line else None
        else:
            method = next((m for m in unit.body if isinstance(m, _DEFS)
                           and m.body[0].lineno <= line <= (m.end_lineno or m.lineno)), None)
            key = ("m", unit.name, method.name) if method is not None else None
        if key is None:
            return None
        if key in self.needing:
            if code not in _SCOPED and self._called_elsewhere(key):
                return None
            head = CANNOT_RUN if code in _SCOPED else NEEDS
            return f"{head}: `{self._show(key)}` {self.needs_text(key)}"
        if unit.name not in self.serving:
            return None
        path, current = [unit.name], self.serving[unit.name]
        while current not in self.needing and len(path) < 6:
            owner = self._owner(current)
            path.append(owner)
            current = self.serving[owner]
        chain = " <- ".join(f"`{p}`" for p in path[1:])
        via = f" (through {chain})" if chain else ""
        if code not in _SCOPED and self._called_elsewhere(current):
            return None
        if code in _SCOPED:
            return (f"{CANNOT_RUN}: `{unit.name}` serves only code that cannot run there{via}: "
                    f"`{self._show(current)}` {self.needs_text(current)}")
        return (f"{SERVES}: `{unit.name}` is used only{via} by `{self._show(current)}`, which "
                f"{self.needs_text(current)}; port or gate that code, and this goes with it")

    def _called_elsewhere(self, key: tuple) -> bool:
        """The function needing the name is named in another file of the run (an API other modules
        call: a failure of theirs on an NPU host, so a CUDA-only import on its way stays reported)."""
        return self.elsewhere(key[-1] if key[0] == "m" else key[1])

    def needs_text(self, key: tuple, where: str = "this module") -> str:
        name, line = self.needing[key]
        test, why = self.gated[name]
        why = why.split(": ", 1)[1] if ": " in why else why
        shown = why[len(test) + 3:] if why.startswith(f"`{test}` (") else f"(false there: {why})"
        return f"always uses `{name}` (line {line}), which {where} imports only under `if {test}:` {shown}"


# ----------------------------------------------------------------------------- the review
class _State:
    """The run's modules read once: their gated names and verdicts (`module(i)`, None where none)."""

    def __init__(self, results: list, paths: dict) -> None:
        from .modpaths import RunTexts

        self.results = results
        self.text_of = RunTexts(results, paths)
        self.python = [i for i, r in enumerate(results) if r.relpath.endswith(".py")]
        self.run = None
        self.modules: dict = {}

    def start(self):
        if self.run is None:
            from .flagcalls19 import Run

            self.run = Run(self.results, self.text_of)
        return self.run

    def module(self, i: int) -> Optional[_Module]:
        if i in self.modules:
            return self.modules[i]
        from .flagcalls19 import blocks

        self.modules[i] = None
        data = self.text_of(i)
        if not data or not _GATED_IF.search(data):
            return None  # (cheap before the parse: a module-level `if` holding an import)
        run = self.start()
        tree = run.tree(i)
        if tree is None:
            return None
        heads = [s.body[0].lineno for s in tree.body if isinstance(s, ast.If) and s.body
                 and any(isinstance(b, (ast.Import, ast.ImportFrom)) for b in s.body)]
        if not heads:
            return None
        found = [b for b in blocks(run, i, tree, data.decode("utf-8", "replace"), heads) if b[0] in heads]
        gated = gated_names(tree, found)
        if not gated:
            return None

        def elsewhere(name: str) -> bool:
            word = re.compile(rb"\b" + re.escape(name.encode()) + rb"\b")
            return any(j != i and word.search(self.text_of(j) or b"") for j in self.python)

        module = _Module(tree, gated, elsewhere)
        self.modules[i] = module if module.needing else None
        return self.modules[i]


def _open_finding(f) -> bool:
    from .moot import is_moot

    return not f.fixable and f.cell is None and not is_moot(f) and f.severity != "info"


def _indented_places(result, data: bytes) -> bool:
    lines_b = data.split(b"\n")
    places = [n for f in result.findings if _open_finding(f) for n in (f.line, *(ln for ln, _c, _s in f.also))]
    return any(0 < n <= len(lines_b) and lines_b[n - 1][:1] in (b" ", b"\t") for n in places)


def _relowered(result, reason_of):
    """The result with each open finding every place of which `reason_of(line, code)` explains
    lowered to info with the anchor's reason; None if none is. A merged finding with a place kept
    stays whole (its other places are folded into it already: split off, they would be findings
    of their own)."""
    findings, changed = [], False
    for finding in result.findings:
        if _open_finding(finding):
            whys = [reason_of(line, finding.code) for line in (finding.line, *(p[0] for p in finding.also))]
            if all(whys):
                distinct = list(dict.fromkeys(whys))
                why = "; ".join(distinct[:2]) + (f"; and {len(distinct) - 2} more" if len(distinct) > 2 else "")
                finding = dataclasses.replace(finding, severity="info", message=f"{finding.message} ({why})")
                changed = True
        findings.append(finding)
    return dataclasses.replace(result, findings=findings) if changed else None


def review(results: list, paths: dict) -> list:
    """The results, with the report-only places of this module's docstring lowered: named scopes
    in the functions and units of the module itself, information after a call of such a function."""
    state = _State(results, paths)
    out = list(results)
    for i in state.python:
        result = results[i]
        if not any(map(_open_finding, result.findings)):
            continue
        data = state.text_of(i)
        if not data or not _GATED_IF.search(data) or not _indented_places(result, data):
            continue  # (module-level code only: no function holds it)
        module = state.module(i)
        if module is not None:
            out[i] = _relowered(result, module.reason) or result
    return _after_calls(out, state)


# ----------------------------------------------------------------------------- lines after such a call
def _after_calls(results: list, state: _State) -> list:
    """Report-only places of a function after a top-level statement that always calls a function
    needing a gated name (in any module of the run): information, UNREACHED."""
    needing: dict = {}  # (function name -> [(module, key)])
    for j in state.python:
        module = state.module(j)
        for key in (module.needing if module is not None else ()):
            if key[0] == "f":
                needing.setdefault(key[1], []).append((j, key))
    if not needing:
        return results
    words = re.compile(rb"\b(?:" + b"|".join(re.escape(n.encode()) for n in sorted(needing)) + rb")\s*\(")
    out = list(results)
    for i in state.python:
        result = results[i]
        if not any(map(_open_finding, result.findings)):
            continue
        data = state.text_of(i)
        if not data or not words.search(data) or not _indented_places(result, data):
            continue
        run = state.start()
        tree = run.tree(i)
        if tree is None:
            continue
        memo: dict = {}

        def reason_of(line: int, _code: str, tree=tree, i=i, memo=memo) -> Optional[str]:
            function = _function_at(tree, line)
            if function is None:
                return None
            if id(function) not in memo:
                memo[id(function)] = _first_failing_call(state, i, function, needing)
            found = memo[id(function)]
            if found is None or line <= found[0]:
                return None
            return found[1]

        out[i] = _relowered(result, reason_of) or result
    return out


def _function_at(tree: ast.Module, line: int) -> Optional[ast.AST]:
    """The module-level function, or method of a module-level class, whose body holds `line`."""
    for stmt in tree.body:
        members = [stmt] if isinstance(stmt, _DEFS) else \
            [s for s in stmt.body if isinstance(s, _DEFS)] if isinstance(stmt, ast.ClassDef) else []
        for member in members:
            if member.body[0].lineno <= line <= (member.end_lineno or member.lineno):
                return member
    return None


def _first_failing_call(state: _State, i: int, function: ast.AST, needing: dict) -> Optional[tuple]:
    """(the last line of the top-level statement holding it, why) of the first call the function
    always makes of a function needing a gated name; None where there is none."""
    from .raisefirst23 import UNREACHED

    if any(isinstance(n, (ast.Yield, ast.YieldFrom)) for n in ast.walk(function)):
        return None
    run = state.run
    local = _locals(function)

    def match(node):
        if not isinstance(node, ast.Call):
            return None
        func = node.func
        if isinstance(func, ast.Name) and func.id in needing and func.id not in local:
            found = run.lookup(i, func.id)
        elif isinstance(func, ast.Attribute) and func.attr in needing and isinstance(func.value, ast.Name) \
                and func.value.id not in local:
            owner = run.lookup(i, func.value.id)
            found = run.lookup(owner[1], func.attr) if owner is not None and owner[0] == "module" \
                and owner[1] is not None else None
        else:
            return None
        if found is None or found[0] != "def":
            return None
        k, key = found[2], ("f", found[1].name)
        module = state.module(k)
        if module is None or key not in module.needing:
            return None
        return node, k, key

    found = first_always(function.body, match)
    if found is None:
        return None
    (call, k, key), stmt = found
    top = next(s for s in function.body if s.lineno <= stmt.lineno <= (s.end_lineno or s.lineno))
    shown = " ".join(ast.unparse(call.func).split())
    where = "this module" if k == i else f"`{state.results[k].relpath}`"
    return (top.end_lineno or top.lineno,
            f"{UNREACHED}: after `{shown}(...)` at line {call.lineno}, whose `{key[1]}` "
            f"{state.modules[k].needs_text(key, where)}; this line runs only where that package is loaded")
