"""Methods of a switched-off CUDA library wrapper whose every caller tests the switch first (issue
#16, precision wave 27, helper h125; round audit BR#20). Whole run, from runplan.whole_run_passes.

disabled.py (per file) scopes the uses of a CUDA library a class loads in a `try` whose `except`
disables the feature (`try: self.nccl = NCCLLibrary(path) except Exception: self.disabled = True;
return`) where the method itself tests the flag first (`if self.disabled: return`). A method of
that class that calls the library with no test of its own stayed reported, though the class's
users ask the flag before calling it:

    # comm/pynccl.py
    class PyNcclCommunicator:
        def __init__(self, path):
            try:
                self.nccl = NCCLLibrary(path)
            except Exception:
                self.disabled = True
                return
            self.disabled = False
        def all_gather_async(self, out, inp):
            self.nccl.ncclAllGather(...)            # NPU990: no flag test here
        def group_start(self):
            self.nccl.ncclGroupStart()              # NPU990

    # comm/state.py
    if comm is None or comm.disabled:
        fallback(out, inp)
    else:
        comm.all_gather_async(out, inp)             # the only call: behind the flag
    assert comm is not None and not comm.disabled
    comm.group_start()                              # the only call: after an assert of it

A report-only finding (not fixable, not info) every line of which lies in such a method (a
method of the class, not a dunder, whose line names `self.<library>`) is decided per method:

* **every reference of the run to the method name is a call whose receiver the caller tests**
  (in the body of `if <on>:`, the `else` of `if <off>:`, or after an `assert <on>` or an `if
  <off>: return/raise` earlier in an enclosing block of statements; `<on>`/`<off>` as disabled.py
  reads them, with the receiver in place of `self`: `not comm.disabled`, `comm is None or
  comm.disabled`), or a call on `self` at a line disabled.py already found guarded: the method
  runs only where the library loaded. The finding takes disabled.py's reason
  (LIBRARY_DISABLED, a named "runs as written" scope) naming the calls.
* **no file of the run references the method at all** (policy P3 of wave 27: public API nothing in
  the package reaches): info naming that, not a scope.

A finding with both kinds of lines is info naming both. Kept as it is: a method called anywhere
without such a test, one referenced otherwise (stored, passed on, named in a string), a method
name another class's call may share that is not so guarded (the name is matched, not the type),
a line that does not name the library.
"""

from __future__ import annotations

import ast
import copy
from dataclasses import replace
from typing import Optional

from . import astcache

UNCALLED = "a method no file of the run calls (public API: reached on an NPU host only by a user's own call)"
_SHOWN = 3
_FUNCTIONS = (ast.FunctionDef, ast.AsyncFunctionDef)


class _AsSelf(ast.NodeTransformer):
    """The test with the receiver expression in place of `self`."""

    def __init__(self, receiver: ast.AST):
        self.shape = ast.dump(receiver)

    def visit(self, node):
        if isinstance(node, ast.expr) and ast.dump(node) == self.shape:
            return ast.copy_location(ast.Name(id="self", ctx=ast.Load()), node)
        return super().visit(node)


def _as_self(test: ast.AST, receiver: ast.AST) -> ast.AST:
    return _AsSelf(receiver).visit(copy.deepcopy(test))


def _guarded_call(call: ast.Call, parents: dict, attr: str, flags: dict) -> bool:
    """Whether the caller tests the call's receiver before it (module doc)."""
    from .disabled import disables as _disables, enables as _enables, exits as _exits

    receiver = call.func.value

    def on(test):
        return _enables(_as_self(test, receiver), attr, flags)

    def off(test):
        return _disables(_as_self(test, receiver), attr, flags)

    child, up = call, parents.get(id(call))
    while up is not None and not isinstance(up, (*_FUNCTIONS, ast.ClassDef, ast.Module)):
        if isinstance(up, ast.If):
            if child in up.body and on(up.test) or child in up.orelse and off(up.test):
                return True
        if isinstance(child, ast.stmt):
            for field in ("body", "orelse", "finalbody"):
                block = getattr(up, field, None)
                if isinstance(block, list) and child in block:
                    for earlier in block[:block.index(child)]:
                        if isinstance(earlier, ast.Assert) and on(earlier.test):
                            return True
                        if isinstance(earlier, ast.If) and _exits(earlier.body) and off(earlier.test):
                            return True
        child, up = up, parents.get(id(up))
    if isinstance(up, _FUNCTIONS) and isinstance(child, ast.stmt):
        for earlier in up.body[:up.body.index(child)] if child in up.body else []:
            if isinstance(earlier, ast.Assert) and on(earlier.test):
                return True
            if isinstance(earlier, ast.If) and _exits(earlier.body) and off(earlier.test):
                return True
    return False


def _libraries(tree: ast.Module) -> list[tuple[ast.ClassDef, str, dict]]:
    """(class, library attribute, flags) of each class binding a disabled CUDA library once."""
    from .disabled import bound_once

    return [(cls, attr, flags) for cls, _methods, _method, _stmt, attr, flags, _returns in bound_once(tree) if flags]


class _Calls:
    """Every reference of the run to a method name, judged (module doc)."""

    def __init__(self, results: list, text_of, python: list):
        self.results, self.text_of, self.python = results, text_of, python
        self.verdicts: dict[tuple, Optional[list]] = {}

    def verdict(self, name: str, attr: str, flags: dict, home: int, guarded: set) -> Optional[list]:
        """`path:line` of each call (all guarded), [] for no reference, None for one unguarded."""
        key = (name, attr, tuple(sorted(flags.items())), home)
        if key not in self.verdicts:
            self.verdicts[key] = self._verdict(name, attr, flags, home, guarded)
        return self.verdicts[key]

    def _verdict(self, name, attr, flags, home, guarded) -> Optional[list]:
        from .modpaths import parsed

        told = []
        for j, tree in parsed(self.python, self.text_of, name.encode()):
            if tree is None:
                return None
            parents = astcache.parents(tree)
            for node in astcache.walk(tree):
                if isinstance(node, ast.Constant) and node.value == name:
                    return None  # (a string names it: getattr, a table)
                if isinstance(node, ast.Name) and node.id == name and isinstance(node.ctx, ast.Load):
                    return None
                if not (isinstance(node, ast.Attribute) and node.attr == name):
                    continue
                call = parents.get(id(node))
                if not (isinstance(call, ast.Call) and call.func is node):
                    return None  # (stored or passed on)
                if isinstance(node.value, ast.Name) and node.value.id == "self":
                    if j != home or node.lineno not in guarded:
                        return None
                elif not _guarded_call(call, parents, attr, flags):
                    return None
                told.append(f"{self.results[j].relpath}:{node.lineno}")
        return told


def review(results: list, paths: Optional[dict] = None) -> list:
    """The results, with the findings of the module doc's shape a named scope or info."""
    from .disabled import LIBRARY_DISABLED, library_lines as _library_lines
    from .modpaths import RunTexts
    from .moot import is_moot

    def candidate(f) -> bool:
        return not f.fixable and f.cell is None and f.severity != "info" and not is_moot(f)

    targets = [i for i, r in enumerate(results) if r.relpath.endswith(".py")
               and any(candidate(f) and "self." in (f.source or "") for f in r.findings)]
    if not targets:
        return results
    text_of = RunTexts(results, paths or {})
    python = [i for i, r in enumerate(results) if r.relpath.endswith(".py")]
    calls: Optional[_Calls] = None
    out = list(results)
    for i in targets:
        data = text_of(i)
        if not data or b"try" not in data:
            continue
        tree = astcache.parse(data)
        if tree is None:
            continue
        libraries = _libraries(tree)
        if not libraries:
            continue
        lines = data.decode("utf-8", "replace").splitlines(keepends=True)
        guarded = set(_library_lines(tree, lines))
        findings = list(results[i].findings)
        changed = False
        for k, f in enumerate(findings):
            if not candidate(f):
                continue
            at = list(dict.fromkeys([f.line, *(a[0] for a in f.also)]))
            done, uncalled, why = True, [], {}
            for line in at:
                hit = None
                for cls, attr, flags in libraries:
                    if not (cls.lineno <= line <= (cls.end_lineno or cls.lineno)):
                        continue
                    text = lines[line - 1] if 0 < line <= len(lines) else ""
                    method = next((m for m in cls.body if isinstance(m, _FUNCTIONS)
                                   and m.lineno <= line <= (m.end_lineno or m.lineno)), None)
                    if method is not None and f"self.{attr}" in text and not method.name.startswith("__"):
                        hit = (method.name, attr, flags)
                        break
                if hit is None:
                    done = False
                    break
                calls = calls or _Calls(results, text_of, python)
                told = calls.verdict(hit[0], hit[1], hit[2], i, guarded)
                if told is None:
                    done = False
                    break
                if told:
                    why.setdefault((hit[0], hit[1]), told)
                else:
                    uncalled.append(hit[0])
            if not done:
                continue
            guards = "; ".join(f"every call of `{m}` tests the receiver's switch first ({_shown(t)})"
                               for (m, _a), t in why.items())
            attr = next(a for (_m, a) in why) if why else None
            if not uncalled:
                message = f"{f.message} ({LIBRARY_DISABLED} (`self.{attr}`; {guards}))"
            else:
                names = ", ".join(f"`{m}`" for m in dict.fromkeys(uncalled))
                also = f"; the other lines run only where the library loaded: {guards}" if guards else ""
                message = f"{f.message} ({UNCALLED}: {names}{also})"
            findings[k] = replace(f, severity="info", message=message)
            changed = True
        if changed:
            out[i] = replace(results[i], findings=findings)
    changed_files = [i for i in range(len(out)) if out[i] is not results[i]]
    if changed_files:
        from .moot import to_scopes

        for i, result in zip(changed_files, to_scopes([out[i] for i in changed_files])):
            out[i] = result
    return out


def _shown(sites: list) -> str:
    more = f", and {len(sites) - _SHOWN} more" if len(sites) > _SHOWN else ""
    return ", ".join(sites[:_SHOWN]) + more
