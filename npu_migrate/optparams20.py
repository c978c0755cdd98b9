"""CUDA-only code behind a function's own opt-in flag that no NPU path sets (issue #16, wave 20:
round-19 audits AZ#4, AZ#6). Whole run, from runplan.whole_run_passes.

A function parameter whose default is `False` (`use_cuda_graph: bool = False`, `nsys=False`) makes
the code under `if <param>:` (the parameter a plain conjunct of the test, not negated) an opt-in
path of that function; so is a class or function defined in the function and used only inside
such an `if` (`if nsys: return NsysProfiler(...)`). Which callers set the flag decides what a
report-only finding there (error or warning, not fixable) is:

* **Set only by tests that do not run on an NPU host** (`helper`). Every call of the function in
  the run that passes the flag anything but `False`/`None`/`0` (keyword, or positional at its
  index) lies in a test scope testscopes.cuda_only_test_scopes finds skipped there (vLLM's
  attention-backend helper whose `use_cuda_graph=True` comes only from FlashInfer tests skipped
  where `import flashinfer` fails), or passes on a parameter of the same kind of its own caller
  (`use_cuda_graph=use_cuda_graph` in a helper whose own flag only such tests set), a few steps
  deep; or it lies in a test that first calls a helper of its file that skips it there
  (`_require_x()` with `if not current_platform.is_cuda() ...: pytest.skip(...)`), or whose
  `skipif(X not in LIST or ...)` is true there because the file removes X from LIST in the
  `except ImportError` of a package with no NPU build (`import flashinfer`). The finding
  becomes info "in a helper whose `if <flag>:` branch only tests not run on an NPU host reach:
  `<skip condition>`" (a moot.PHRASES reason: a named scope). At least one call must set the
  flag, so that such a test is what reaches the branch.
* **Set by nobody, an NVIDIA profiler hook** (`optin`). Where no call in the run sets the flag
  and the finding is one of the NVIDIA profiler hooks (`torch.cuda.cudart` for
  `cudaProfilerStart/Stop`, `torch.cuda.nvtx`, `torch.cuda.profiler`: an Nsight Systems capture
  range), it becomes info naming the opt-in: the hook runs only when a user asks for an Nsight
  run, which an NPU host does not have (its profiler is torch_npu's). Other constructs under an
  unset flag stay as they are: a library's user may set it.

Kept: a flag passed `*args`/`**kwargs`, a function named elsewhere than in calls (handed on as a
value, named in a string), a method (its callers are not resolved), a flag whose default is not
`False`, a call that sets it outside a skipped test, anything in a file that does not parse.
"""

from __future__ import annotations

import ast
import dataclasses
import re
from typing import Optional

_ALSO_SUFFIX = re.compile(r" \(also at [^()]*\)$")
_HOOKS = ("torch.cuda.cudart", "torch.cuda.nvtx", "torch.cuda.profiler")
_DEPTH = 4


def _off(node: Optional[ast.AST]) -> bool:
    return isinstance(node, ast.Constant) and node.value in (False, None, 0)


def _flags(function: ast.AST) -> dict[str, int]:
    """{parameter: positional index or -1 (keyword-only)} of parameters defaulting to False."""
    args = function.args
    positional = [*args.posonlyargs, *args.args]
    out = {}
    for arg, default in zip(positional[len(positional) - len(args.defaults):], args.defaults):
        if isinstance(default, ast.Constant) and default.value is False:
            out[arg.arg] = positional.index(arg)
    for arg, default in zip(args.kwonlyargs, args.kw_defaults):
        if isinstance(default, ast.Constant) and default.value is False:
            out[arg.arg] = -1
    return out


def _gated_by(test: ast.AST, flag: str) -> bool:
    if isinstance(test, ast.Name):
        return test.id == flag
    return isinstance(test, ast.BoolOp) and isinstance(test.op, ast.And) and any(
        isinstance(v, ast.Name) and v.id == flag for v in test.values)


def _if_spans(function: ast.AST, flag: str) -> list[tuple[int, int]]:
    """Line spans of the bodies of `if <flag>:` statements in `function` (not in nested defs)."""
    out = []

    def visit(node):
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
                continue
            if isinstance(child, ast.If) and _gated_by(child.test, flag) and child.body:
                out.append((child.body[0].lineno, child.body[-1].end_lineno or child.body[-1].lineno))
            visit(child)
    visit(function)
    return out


def _within(line: int, spans) -> bool:
    return any(a <= line <= b for a, b in spans)


def _gate(function: ast.AST, flag: str, lines: list[int]) -> Optional[str]:
    """How every line of `lines` sits on `function`'s `flag` path: "branch" (inside `if flag:`),
    the name of a local class/def used only inside it, or None."""
    spans = _if_spans(function, flag)
    if not spans:
        return None
    if all(_within(line, spans) for line in lines):
        return "branch"
    for stmt in ast.walk(function):
        if stmt is function or not isinstance(stmt, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        end = stmt.end_lineno or stmt.lineno
        if not all(stmt.lineno <= line <= end for line in lines):
            continue
        uses = [n.lineno for n in ast.walk(function) if isinstance(n, ast.Name) and n.id == stmt.name]
        if uses and all(_within(u, spans) for u in uses):
            return stmt.name
    return None


@dataclasses.dataclass
class _Site:
    function: ast.AST
    owner: Optional[ast.AST]  # the enclosing function of a nested one; None at module level


def _enclosing(tree: ast.Module, lines: list[int]) -> list[_Site]:
    """The functions around all of `lines`, innermost first (methods and their contents aside)."""
    out: list[_Site] = []

    def holds(node) -> bool:
        end = getattr(node, "end_lineno", None) or getattr(node, "lineno", 0)
        return all(getattr(node, "lineno", 0) <= line <= end for line in lines)

    def visit(body, owner) -> None:
        for stmt in body:
            if not holds(stmt):
                continue
            if isinstance(stmt, ast.ClassDef):
                if owner is not None:
                    visit(stmt.body, owner)
                return  # (a module-level class: a method's callers are not resolved)
            if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)):
                out.insert(0, _Site(stmt, owner))
                visit(stmt.body, stmt)
                return
            for field in ("body", "orelse", "finalbody"):
                inner = getattr(stmt, field, None)
                if isinstance(inner, list):
                    visit(inner, owner)
            for handler in getattr(stmt, "handlers", ()) or ():
                visit(handler.body, owner)
            for case in getattr(stmt, "cases", ()) or ():
                visit(case.body, owner)
    visit(tree.body, None)
    return out


class _Run:
    def __init__(self, results, paths) -> None:
        from .modpaths import RunTexts
        self.results, self.text_of = results, RunTexts(results, paths)
        self.py = [i for i, r in enumerate(results) if r.relpath.endswith(".py")]
        self.trees: dict = {}
        self.scopes: dict = {}
        self.indexes: dict = {}
        self.memo: dict = {}

    def tree(self, i):
        if i not in self.trees:
            from . import astcache
            data = self.text_of(i)
            self.trees[i] = astcache.parse(data) if data else None
        return self.trees[i]

    def skipped(self, i) -> list:
        if i not in self.scopes:
            from .testscopes import cuda_only_test_scopes
            data = self.text_of(i) or b""
            try:
                self.scopes[i] = cuda_only_test_scopes(data.decode("utf-8", "replace")) if b"skip" in data.lower() else []
            except RecursionError:
                self.scopes[i] = []
        return self.scopes[i]

    def _index(self, root: ast.AST) -> tuple[dict, dict]:
        """({name: [calls of it]}, {name: references that are no call}) of `root`, one walk each."""
        key = id(root)
        if key not in self.indexes:
            calls: dict = {}
            funcs = set()
            for node in ast.walk(root):
                if isinstance(node, ast.Call):
                    func = node.func
                    called = func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else ""
                    if called:
                        calls.setdefault(called, []).append(node)
                        funcs.add(id(func))
            others: dict = {}
            for node in ast.walk(root):
                if isinstance(node, (ast.Name, ast.Attribute)) and id(node) not in funcs and isinstance(node.ctx, ast.Load):
                    word = node.id if isinstance(node, ast.Name) else node.attr
                    others[word] = others.get(word, 0) + 1
                elif isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value.isidentifier():
                    others[node.value] = others.get(node.value, 0) + 1
            self.indexes[key] = (root, calls, others)  # (the root kept alive: its id stays its own)
        return self.indexes[key][1], self.indexes[key][2]

    def setters(self, home: int, site: _Site, flag: str, depth: int) -> Optional[list]:
        """[skip condition] of each call that sets `flag` of `site.function`, every one in a skipped
        test (or handed on from a flag only such tests set); None where a call sets it otherwise
        or the function is named in another way."""
        key = (home, id(site.function), flag)
        if key not in self.memo:
            self.memo[key] = self._setters(home, site, flag, depth)
        return self.memo[key]

    def _setters(self, home: int, site: _Site, flag: str, depth: int) -> Optional[list]:
        name, index = site.function.name, _flags(site.function)[flag]
        word = name.encode()
        files = [home] if site.owner is not None else [i for i in self.py if word in (self.text_of(i) or b"")]
        found: list = []
        for i in files:
            tree = self.tree(i)
            if tree is None:
                return None
            if i != home and any(isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef)) and s.name == name
                                 for s in tree.body):
                continue  # (a function of its own by that name)
            calls, others = self._index(site.owner if i == home and site.owner is not None else tree)
            if others.get(name):
                return None  # (handed on as a value, named in a string: its callers are not seen)
            for node in calls.get(name, ()):
                value = self._passed(node, flag, index)
                if value is False:
                    return None
                if value is None or _off(value):
                    continue
                why = self._why(i, node, value, depth)
                if why is None:
                    return None
                if why:  # ("": handed on from a flag no call sets)
                    found.append(why)
        return found

    @staticmethod
    def _passed(call: ast.Call, flag: str, index: int):
        """The expression passed for `flag`, None where absent, False where unknown (`**kw`)."""
        for keyword in call.keywords:
            if keyword.arg == flag:
                return keyword.value
            if keyword.arg is None:
                return False
        if any(isinstance(a, ast.Starred) for a in call.args):
            return False
        if 0 <= index < len(call.args):
            return call.args[index]
        return None

    def _why(self, i: int, call: ast.Call, value: ast.AST, depth: int) -> Optional[str]:
        scope = next((s for s in self.skipped(i) if s[0] <= call.lineno <= s[1]), None)
        if scope is not None:
            from .testscopes import HELPER_NOTE
            return scope[2].split(": ", 1)[1] if scope[2].startswith(HELPER_NOTE) else scope[2]
        tree = self.tree(i)
        sites = _enclosing(tree, [call.lineno]) if tree is not None else []
        skipped = None
        if sites:
            skipped = _skipped_first(tree, sites[-1].function, call.lineno) or \
                _skipped_without_member(tree, sites[-1].function)
        if skipped is not None:
            return skipped
        if not isinstance(value, ast.Name) or depth >= _DEPTH:
            return None
        if not sites or value.id not in _flags(sites[0].function):
            return None
        found = self.setters(i, sites[0], value.id, depth + 1)
        return None if found is None else found[0] if found else ""


def _skipped_first(tree: ast.Module, test: ast.AST, line: int) -> Optional[str]:
    """The skip condition of a test (`test_*`) that, before `line`, calls a module-level helper of
    its file that skips it on an NPU host (`_require_x()`: its body, after plain assignments, has
    `if not current_platform.is_cuda() or ...: pytest.skip(...)`); None otherwise."""
    from .testscopes import skipping_if as _skipping_if

    if not test.name.startswith("test"):
        return None
    helpers = {s.name: s for s in tree.body if isinstance(s, ast.FunctionDef)}
    for stmt in test.body:
        if stmt.lineno >= line:
            return None
        call = stmt.value if isinstance(stmt, ast.Expr) else None
        if not (isinstance(call, ast.Call) and isinstance(call.func, ast.Name) and call.func.id in helpers):
            continue
        for inner in helpers[call.func.id].body:
            if isinstance(inner, (ast.Assign, ast.AnnAssign)) or (
                    isinstance(inner, ast.Expr) and isinstance(inner.value, ast.Constant)):
                continue
            condition = _skipping_if(inner)
            if condition is None:
                break
            text = " ".join(ast.unparse(condition).split())
            return text if len(text) <= 70 else text[:67] + "..."
    return None


def _removed_members(tree: ast.Module) -> set:
    """(list name, member source) removed where a package with no NPU build fails to import
    (removedmembers34.py, which testscopes reads too)."""
    from .removedmembers34 import removed_members

    return removed_members(tree)


def _skipped_without_member(tree: ast.Module, test: ast.AST) -> Optional[str]:
    """The skip condition of a test whose `skipif(X not in LIST ...)` is true on an NPU host because
    the file removes X from LIST where a package with no NPU build fails to import (vLLM's
    `BACKENDS_TO_TEST.remove(FLASHINFER)` under `except ImportError` of `import flashinfer`)."""
    import copy

    from .removedmembers34 import Members
    from .testscopes import truth as _truth

    if not test.name.startswith("test") or not test.decorator_list:
        return None
    removed = _removed_members(tree)
    if not removed:
        return None
    for decorator in test.decorator_list:
        if not (isinstance(decorator, ast.Call) and decorator.args
                and ast.unparse(decorator.func).rpartition(".")[2] == "skipif"):
            continue
        condition = Members(removed).visit(copy.deepcopy(decorator.args[0]))
        if _truth(condition) is True:
            text = " ".join(ast.unparse(decorator.args[0]).split())
            return text if len(text) <= 70 else text[:67] + "..."
    return None


def review(results: list, paths: dict) -> list:
    """The results, with the findings of this module's docstring lowered to info."""
    from .findings import split_merged
    from .moot import is_moot

    def open_finding(f) -> bool:
        return not f.fixable and f.cell is None and f.severity != "info" and not is_moot(f)

    candidates = [i for i, r in enumerate(results) if r.relpath.endswith(".py")
                  and any(open_finding(f) for f in r.findings)]
    if not candidates:
        return results
    run = _Run(results, paths)
    out = list(results)
    for i in candidates:
        data = run.text_of(i)
        if not data or b"=False" not in data.replace(b" ", b""):
            continue
        tree = run.tree(i)
        if tree is None:
            continue
        changed, findings = False, []
        for finding in results[i].findings:
            why = open_finding(finding) and _reason(run, i, tree, finding, split_merged)
            if why:
                also = _ALSO_SUFFIX.search(finding.message)
                head, tail = (finding.message[:also.start()], also.group(0)) if also else (finding.message, "")
                finding = dataclasses.replace(finding, severity="info", message=f"{head} ({why}){tail}")
                changed = True
            findings.append(finding)
        if changed:
            out[i] = dataclasses.replace(results[i], findings=sorted(findings))
    return out


def _reason(run: _Run, i: int, tree: ast.Module, finding, split_merged) -> Optional[str]:
    pieces = split_merged(finding)
    lines = sorted({p.line for p in pieces})
    for site in _enclosing(tree, lines):
        for flag in _flags(site.function):
            gate = _gate(site.function, flag, lines)
            if gate is None:
                continue
            setters = run.setters(i, site, flag, 0)
            if setters is None:
                continue
            place = f"`if {flag}:` branch" if gate == "branch" else f"`{gate}`, used only under `if {flag}:`,"
            if setters:  # ("in a helper ": a moot.PHRASES reason)
                built = f"`if {flag}:` branch" if gate == "branch" else f"`{gate}` (used only under `if {flag}:`)"
                return f"in a helper whose {built} only tests not run on an NPU host reach: `{setters[0]}`"
            if all((p.source or "").startswith(_HOOKS) for p in pieces):
                return (f"an opt-in NVIDIA profiler path: {place} where `{flag}` defaults to False and "
                        f"no call in the run sets it; an NPU host profiles with torch_npu's profiler")
    return None
