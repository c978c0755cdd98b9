"""Repeats of a CUDA-only import the file already reports, read across a class and its loaders
(issue #16, round-13 audit AI#36).

foldbackend.fold_repeated_imports folds the same import finding twice in one class or at one
file's top level. A class whose methods call a module-level loader of the file (`_load_flash_attn()`
at the start of `RingAttention.attention`), whose body imports a CUDA-only package the run reports
(`from flash_attn.flash_attn_interface import ...`, an error), and which imports that package again
in a method (`import flash_attn` for a `__version__` check in `RingAttention.forward`): the second
import restates the loader's finding, under the same code and package. It is folded into that
finding (listed in its "also at lines ...", with the reason), at the same severity or a lower one:
nothing is dropped. A class that calls no such loader, or another package's import, keeps its own.
"""

from __future__ import annotations

import ast
import re

from .findings import Finding

REPEATED = ("NPU502", "NPU911", "NPU902", "NPU915")  # import findings of a package an NPU host lacks
IN_LOADER_CLASS = "imported again in a class whose methods call the loader that imports it"
_PACKAGE = re.compile(r"\bimport (?:of|from) (?:compiled extension module )?`([\w.]+)`")
_FUNCTIONS = (ast.FunctionDef, ast.AsyncFunctionDef)


def _package(finding: Finding) -> str | None:
    match = _PACKAGE.search(finding.message)
    return match.group(1).split(".")[0] if match else None


def _inside(node: ast.AST, line: int) -> bool:
    return node.lineno <= line <= (node.end_lineno or node.lineno)


def fold_class_loader_imports(findings: list[Finding], tree: ast.Module) -> list[Finding]:
    """An import finding in a class folded into the same package's finding in a module-level
    function the class's methods call (see the module's doc)."""
    from .folding import Fold, ours

    imports = [f for f in findings if f.code in REPEATED and ours(f) and f.severity != "info" and _package(f)]
    if len(imports) < 2:
        return findings
    functions = {n.name: n for n in tree.body if isinstance(n, _FUNCTIONS)}
    classes = [n for n in tree.body if isinstance(n, ast.ClassDef)]
    if not functions or not classes:
        return findings
    # (code, package) -> the first finding in each loader
    in_loader: dict[str, dict[tuple, Finding]] = {}
    for finding in sorted(imports):
        for name, function in functions.items():
            if _inside(function, finding.line):
                in_loader.setdefault(name, {}).setdefault((finding.code, _package(finding)), finding)
    if not in_loader:
        return findings
    fold = Fold(findings)
    for cls in classes:
        called = {n.func.id for n in ast.walk(cls) if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)
                  and n.func.id in in_loader}
        anchors: dict[tuple, Finding] = {}
        for name in sorted(called, key=lambda n: functions[n].lineno):
            for key, finding in in_loader[name].items():
                anchors.setdefault(key, finding)
        if not anchors:
            continue
        for finding in imports:
            anchor = anchors.get((finding.code, _package(finding)))
            if anchor is None or not _inside(cls, finding.line) or not fold.movable(finding, anchor):
                continue
            places = [p for p in [(finding.line, finding.column, finding.source), *finding.also] if _inside(cls, p[0])]
            fold.move(finding, places, anchor)
    return fold.result(IN_LOADER_CLASS) if fold.moved else findings


# ----------------------------------------------------------------------------- a guarded import only a built class reads
BUILT_AFTER = "guarded import whose names only `{cls}` reads, and every place of the run that builds `{cls}` " \
              "first imports `{package}` itself: the use is reported at {where}"


def _module_guard(tree: ast.Module, line: int) -> ast.Try | None:
    """The module-level `try` whose body imports at `line`, whose ImportError handlers only pass."""
    from .probes import catches_import_error

    for stmt in tree.body:
        if isinstance(stmt, ast.Try) and stmt.body and stmt.body[0].lineno <= line <= (stmt.body[-1].end_lineno or line):
            handlers = [h for h in stmt.handlers if catches_import_error(h)]
            if handlers and len(handlers) == len(stmt.handlers) and not stmt.orelse and not stmt.finalbody \
                    and all(all(isinstance(s, ast.Pass) for s in h.body) for h in handlers) \
                    and all(isinstance(s, (ast.Import, ast.ImportFrom)) for s in stmt.body):
                return stmt
    return None


def _readers(tree: ast.Module, names: set[str], guard: ast.Try) -> set[str] | None:
    """The module-level classes that read `names`; None when a read lies outside such a class."""
    classes = [n for n in tree.body if isinstance(n, ast.ClassDef)]
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load) and node.id in names:
            holder = next((c for c in classes if _inside(c, node.lineno)), None)
            if holder is None:
                return None
            out.add(holder.name)
    return out


def _builds_after_import(tree: ast.Module, cls: str, package: str, reported: dict[int, Finding]) -> list | None:
    """The reported imports of `package` that precede each place building `cls` in this file: each
    call `cls(...)` lies in a function whose body imports the package unguarded (a direct
    statement) before it, with a finding; None when one call does not."""
    found = []
    for function in ast.walk(tree):
        if not isinstance(function, _FUNCTIONS):
            continue
        calls = [n for n in ast.walk(function) if isinstance(n, ast.Call)
                 and ((isinstance(n.func, ast.Name) and n.func.id == cls)
                      or (isinstance(n.func, ast.Attribute) and n.func.attr == cls))]
        if not calls:
            continue
        imports = [s for s in function.body if isinstance(s, (ast.Import, ast.ImportFrom)) and s.lineno in reported
                   and _package(reported[s.lineno]) == package]
        if not imports or any(c.lineno < imports[0].lineno for c in calls):
            return None
        found.append(reported[imports[0].lineno])
    # (a call at module level or in a class body: not after such an import)
    inside = {id(n) for f in ast.walk(tree) if isinstance(f, _FUNCTIONS) for n in ast.walk(f)}
    if any(isinstance(n, ast.Call) and id(n) not in inside and isinstance(n.func, ast.Name) and n.func.id == cls
           for n in ast.walk(tree)):
        return None
    return found


def review_guarded_class_imports(results: list, paths: dict) -> list:
    """A module-level `try: import apex.amp as apex_amp except ImportError: pass` (an error finding:
    NPU902, NPU911, NPU502, NPU915) whose names the file reads only inside module-level classes,
    each built by the run only in functions that import the same package themselves (unguarded,
    reported with the same code) before building it (`convert_to_apex_amp`): the guarded import
    restates those findings. Info naming where the use is reported (round-13 audit AI#13). A class
    built anywhere else (or nowhere in the run), or a read outside a class, keeps the error."""
    import dataclasses

    from .modpaths import RunTexts

    def errors(result) -> list:
        return [f for f in result.findings if f.code in REPEATED and not f.fixable and f.cell is None
                and f.severity == "error" and _package(f)]

    candidates = [i for i, r in enumerate(results) if r.relpath.endswith(".py") and errors(r)]
    if not candidates:
        return results
    text_of = RunTexts(results, paths)

    from . import astcache

    python = None
    out = list(results)
    for i in candidates:
        data = text_of(i)
        if not data or b"except ImportError" not in data or b"\nclass " not in data:
            continue
        source = data.split(b"\n")
        # (cheap before the parse: an import at module level, not indented, right after `try:`)
        hits = [f for f in errors(results[i]) if not f.also and 1 < f.line <= len(source)
                and source[f.line - 1][:1] in (b" ", b"\t") and source[f.line - 2].strip() == b"try:"
                and not source[f.line - 2][:1].isspace()]
        if not hits:
            continue
        tree = astcache.parse(data)
        if tree is None:
            continue
        changed = {}
        for finding in hits:
            guard = _module_guard(tree, finding.line)
            if guard is None:
                continue
            names = {(a.asname or a.name).split(".")[0] for s in guard.body for a in s.names}
            readers = _readers(tree, names, guard)
            if not readers or len(readers) != 1:
                continue
            cls = next(iter(readers))
            package = _package(finding)
            if python is None:
                python = [j for j, r in enumerate(results) if r.relpath.endswith(".py")]
            where: list[str] = []
            ok = True
            for j in python:
                data_j = text_of(j)
                if not data_j or cls.encode() + b"(" not in data_j:
                    continue
                tree_j = tree if j == i else astcache.parse(data_j)
                if tree_j is None:
                    ok = False
                    break
                reported = {f.line: f for f in errors(results[j]) if f.code == finding.code}
                found = _builds_after_import(tree_j, cls, package, reported)
                if found is None:
                    ok = False
                    break
                where += [f"{results[j].relpath}:{f.line}" for f in found]
            if ok and where:
                why = BUILT_AFTER.format(cls=cls, package=package, where=", ".join(dict.fromkeys(where)))
                changed[id(finding)] = dataclasses.replace(finding, severity="info",
                                                           message=f"{finding.message} ({why})")
        if changed:
            out[i] = dataclasses.replace(results[i], findings=[changed.get(id(f), f) for f in results[i].findings])
    return out


# ----------------------------------------------------------------------------- an extension every caller guards
CALLERS_CATCH = ("an optional step every caller catches: every caller of `{function}` in the run calls it inside "
                 "`try`/`except Exception` that goes on without it (a warning, a fallback value): where the "
                 "extension is missing, as on an NPU host, that optional step is skipped: the results differ")
_BROAD = ("Exception", "BaseException")


def _catches_all(handler: ast.ExceptHandler) -> bool:
    kinds = handler.type.elts if isinstance(handler.type, ast.Tuple) else [handler.type]
    return any(k is None or (isinstance(k, ast.Name) and k.id in _BROAD) for k in kinds)


def _guarded_uses(tree: ast.Module, name: str, skip: ast.AST | None = None) -> int | None:
    """How many calls of `name` the file makes, each inside the body of a `try` whose handler catches
    everything and goes on (fallbacks.falls_back); None when one read of `name` is not such a call."""
    from .fallbacks import goes_on

    guarded: set[int] = set()
    for node in ast.walk(tree):
        # (a handler that warns, logs or binds a fallback and goes on; not one that raises or exits)
        if isinstance(node, ast.Try) and any(_catches_all(h) and goes_on(h.body) is not False for h in node.handlers):
            for stmt in node.body:
                guarded.update(id(n) for n in ast.walk(stmt))
    calls = 0
    funcs = {id(n.func) for n in ast.walk(tree) if isinstance(n, ast.Call)}
    for node in ast.walk(tree):
        read = (isinstance(node, ast.Name) and node.id == name and isinstance(node.ctx, ast.Load)) or \
               (isinstance(node, ast.Attribute) and node.attr == name)
        if not read:
            continue
        if id(node) not in funcs or id(node) not in guarded:
            return None
        calls += 1
    return calls


def _single_extension_errors(result) -> list:
    """The open NPU911 errors of a Python file that hold one place (no `also`): what
    review_guarded_extension_callers and review_guarded_constructors read."""
    return [f for f in result.findings if f.code == "NPU911" and not f.fixable and f.cell is None
            and f.severity == "error" and not f.also]


def review_guarded_extension_callers(results: list, paths: dict) -> list:
    """A compiled extension's import (NPU911, an error) as the first statement of a module-level
    function's body (after its docstring) that every caller in the run calls inside `try`/`except
    Exception` going on without it (SAM2's `get_connected_components`, whose callers skip the
    hole filling with a warning): where the extension is missing the step is skipped, as on a CUDA
    host without it. A warning with that reason (CALLERS_CATCH), not an error: the code runs and its
    results differ (round-13 audit AI#24 read the error as false; round 14 (AK#26) read the warning as
    true, so it is not made a scope). A caller
    outside such a `try`, a use that is no call, or no caller at all keeps the error."""
    import dataclasses

    from . import astcache
    from .modpaths import RunTexts

    errors = _single_extension_errors
    candidates = [i for i, r in enumerate(results) if r.relpath.endswith(".py") and errors(r)]
    if not candidates:
        return results
    text_of = RunTexts(results, paths)

    python = None
    out = list(results)
    for i in candidates:
        data = text_of(i)
        if not data or b"\ndef " not in data:
            continue
        source = data.split(b"\n")
        hits = [f for f in errors(results[i]) if 0 < f.line <= len(source) and source[f.line - 1][:4] == b"    "
                and source[f.line - 1][4:5] != b" "]
        if not hits:
            continue
        tree = astcache.parse(data)
        if tree is None:
            continue
        changed = {}
        for finding in hits:
            function = next((n for n in tree.body if isinstance(n, _FUNCTIONS) and _inside(n, finding.line)), None)
            if function is None:
                continue
            body = function.body[1:] if ast.get_docstring(function) is not None else function.body
            if not body or body[0].lineno != finding.line:
                continue
            if python is None:
                python = [j for j, r in enumerate(results) if r.relpath.endswith(".py")]
            word = function.name.encode()
            total, ok = 0, True
            for j in python:
                data_j = text_of(j)
                if not data_j or word not in data_j:
                    continue
                tree_j = tree if j == i else astcache.parse(data_j)
                calls = None if tree_j is None else _guarded_uses(tree_j, function.name)
                if calls is None:
                    ok = False
                    break
                total += calls
            if ok and total:
                changed[id(finding)] = dataclasses.replace(
                    finding, severity="warning",
                    message=f"{finding.message} ({CALLERS_CATCH.format(function=function.name)})")
        if changed:
            out[i] = dataclasses.replace(results[i], findings=[changed.get(id(f), f) for f in results[i].findings])
    return out


CONSTRUCTION_CATCHES = ("an optional feature every construction catches: `{cls}.__init__` raises where the package is "
                        "missing (its `except ImportError` raises again), and every construction of `{cls}` in the "
                        "run sits inside `try`/`except Exception` that goes on without it ({sites}): where the "
                        "package is missing, as on an NPU host, the feature is switched off and the code's own "
                        "fallback runs")


def _raises_out(function: ast.AST, line: int) -> bool:
    """Whether an import failure at `line` leaves `function`: every `try` of the function around the
    line either catches no ImportError or re-raises from each handler that does."""
    from .fallbacks import goes_on

    for node in ast.walk(function):
        if isinstance(node, ast.Try) and any(_inside(s, line) for s in node.body):
            for handler in node.handlers:
                kinds = handler.type.elts if isinstance(handler.type, ast.Tuple) else [handler.type]
                if any(k is None or (isinstance(k, ast.Name) and k.id in (*_BROAD, "ImportError", "ModuleNotFoundError"))
                       for k in kinds) and goes_on(handler.body) is not False:
                    return False
    return True


def _annotation_ids(tree: ast.Module) -> set[int]:
    ids: set[int] = set()
    for node in ast.walk(tree):
        notes = []
        if isinstance(node, ast.AnnAssign):
            notes.append(node.annotation)
        elif isinstance(node, ast.arg) and node.annotation is not None:
            notes.append(node.annotation)
        elif isinstance(node, _FUNCTIONS) and node.returns is not None:
            notes.append(node.returns)
        for note in notes:
            ids.update(id(n) for n in ast.walk(note))
    return ids


def _constructions_caught(tree: ast.Module, reads: list) -> bool:
    """Whether every one of `reads` (a class's name) is called, inside the body of a `try` whose
    handler catches everything and goes on."""
    from .fallbacks import goes_on

    guarded: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Try) and any(_catches_all(h) and goes_on(h.body) is not False for h in node.handlers):
            for stmt in node.body:
                guarded.update(id(n) for n in ast.walk(stmt))
    funcs = {id(n.func) for n in ast.walk(tree) if isinstance(n, ast.Call)}
    return all(id(n) in funcs and id(n) in guarded for n in reads)


def review_guarded_constructors(results: list, paths: dict) -> list:
    """The class form of review_guarded_extension_callers (round-28 audit CC#8): an NPU911 error on
    a CUDA-only import inside a module-level class's `__init__`, whose failure leaves `__init__` (no
    `try` there swallows it: `except ImportError as e: raise RuntimeError(...) from e` counts),
    where every read of the class's name in the run, annotations aside, is a construction inside
    `try`/`except Exception` that goes on (`_STATE_FAILED = True; logger.exception("... use the NCCL
    fallback")`): info with that reason (CONSTRUCTION_CATCHES; a warning until round 29, when policy
    P1 made an optional package the code falls back from info). A
    construction outside such a `try`, a read that is no call (a subclass, a registry entry), a class
    nothing constructs, an import an `__init__` handler swallows itself (fallbacks.py's shape): kept."""
    import dataclasses

    from . import astcache
    from .modpaths import RunTexts

    errors = _single_extension_errors
    candidates = [i for i, r in enumerate(results) if r.relpath.endswith(".py") and errors(r)]
    if not candidates:
        return results
    text_of = RunTexts(results, paths)
    python = None
    out = list(results)
    for i in candidates:
        data = text_of(i)
        if not data or b"\nclass " not in data or b"__init__" not in data:
            continue
        tree = astcache.parse(data)
        if tree is None:
            continue
        changed = {}
        for finding in errors(results[i]):
            cls = next((n for n in tree.body if isinstance(n, ast.ClassDef) and _inside(n, finding.line)), None)
            init = next((n for n in cls.body if isinstance(n, _FUNCTIONS) and n.name == "__init__"
                         and _inside(n, finding.line)), None) if cls is not None else None
            if init is None or not _raises_out(init, finding.line):
                continue
            if python is None:
                python = [j for j, r in enumerate(results) if r.relpath.endswith(".py")]
            word, total, sites = cls.name.encode(), 0, []
            for j in python:
                data_j = text_of(j)
                if not data_j or word not in data_j:
                    continue
                tree_j = tree if j == i else astcache.parse(data_j)
                if tree_j is None:
                    total = 0
                    break
                notes = _annotation_ids(tree_j)
                reads = [n for n in ast.walk(tree_j) if isinstance(n, ast.Name) and n.id == cls.name
                         and isinstance(n.ctx, ast.Load) and id(n) not in notes]
                if not reads:
                    continue
                if not _constructions_caught(tree_j, reads):
                    total = 0
                    break
                total += len(reads)
                sites += [f"{results[j].relpath}:{n.lineno}" for n in reads][:2]
            if total:
                # (info, round 29: policy P1, an optional package whose absence the code's own fallback
                # handles; round 28's CC#8 reviewer read the warning as too strong)
                changed[id(finding)] = dataclasses.replace(
                    finding, severity="info",
                    message=f"{finding.message} ({CONSTRUCTION_CATCHES.format(cls=cls.name, sites=', '.join(sites[:3]))})")
        if changed:
            out[i] = dataclasses.replace(results[i], findings=[changed.get(id(f), f) for f in results[i].findings])
    return out
