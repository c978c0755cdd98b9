"""FP8 and bitsandbytes findings that repeat another finding's work (issue #16, round-19 audit BB#12,
BA#9, BA#4, BB#38). Whole run, from runplan.whole_run_passes (after flags16.py).

Three shapes:

* **FP8 that only feeds the module's Triton kernels.** An FP8 place (NPU913) in the host wrapper
  that launches a `@triton.jit` kernel of the same module (`kernel[grid](...)`), in a statement
  that binds a name (`q_fp8 = torch.empty_like(q, dtype=torch.float8_e4m3fn)`, `q8 =
  q_rot.to(torch.float8_e4m3fn)`) passed into a kernel launch (`kernel[grid](q8, ...)`,
  `query_ptr=q8`) of that function and into no other call (its own `q8.stride(0)` is no use), or
  that sits in a launch's arguments itself: the FP8 buffer or cast goes with the kernel it feeds.
  So does a dtype bound to a name (`fp8_dtype = torch.float8_e4m3fn`) read only as the `dtype=` of
  such buffers, by `torch.finfo` or in a launch's arguments (round-28 audit CA#5).
  It folds into the module's open NPU910 finding, whose message names it ("with ... that only
  feeds this module's Triton kernels"), as flags16.fold_cute_fp8 does for CuTe-DSL kernels. FP8
  in a function that launches none of the module's kernels, or a name also passed to another call
  (`torch._scaled_mm(q8, w8)`: FP8 compute outside the kernel), stays its own NPU913.
* **A call to a project FP8 helper whose cast is reported in the helper.** kernels.py anchors a
  file's FP8 finding on a call to a cast helper from elsewhere (`hp_tensor_to_float8_dynamic(...)`,
  "(a cast to FP8)") when the file's other FP8 places only name dtypes. When that helper is
  defined in the run and its body reaches, through calls by name to the run's functions (and a
  class's `.apply`/methods; at most four calls deep), a function holding an open NPU913 place of
  its own module (`x.to(float8_dtype)`), the porter replaces the cast there once: the call site's
  finding folds into that finding, whose message names the calling file and lines. A helper not
  defined in the run, one whose body reaches no reported FP8 place, and a finding with FP8 work of
  its own (any other anchor, or FP8 uses another pass folded into it: "(with `...`") keep their
  findings.
* **bitsandbytes imported for wrappers that raise unless the device is CUDA.** The NPU914 warning
  of a bitsandbytes import with no 8-bit or paged optimizer ("runs on those kernels, slower than on
  CUDA") in a file where another open finding already says a function raises unless the device is
  CUDA (rewrite_gates: "`quantize` raises unless the device is CUDA (line N)"), that function (or
  its class) reading the import's name: the layers never reach those kernels on an NPU host until
  that check is widened, the work the other finding asks for. The NPU914 folds into it, which names
  the import. An NPU914 about optimizers, or in a file whose raising function does not use the
  import, stays.

Cheap first: only files with an open NPU913 and an open NPU910, a "(a cast to/from FP8)" anchor, or
an NPU914 beside a "raises unless the device is CUDA" finding are read.
"""

from __future__ import annotations

import ast
import dataclasses
import posixpath
import re
from typing import Optional

from . import astcache
from .modpaths import RunModules

TRITON = "that only feeds this module's Triton kernels (ported with them)"
BNB = ("imported for layers this file's wrappers build only on CUDA (they raise on any other device): "
       "ported with that check")
_RANK = {"info": 0, "warning": 1, "error": 2}
_CAST_ANCHOR = re.compile(r"\(a cast (?:to|from) FP8\)")
_RAISES = re.compile(r"`(\w+)` raises unless the device is CUDA \(line (\d+)\)")
_MAX_DEPTH = 4
_TRITON_DECORATORS = frozenset({"jit", "autotune", "heuristics"})


def _open(finding, code: str) -> bool:
    from .folding import ours
    from .moot import is_moot

    return finding.code == code and ours(finding) and finding.severity != "info" and not is_moot(finding)


def review(results: list, paths: dict) -> list:
    from .modpaths import RunTexts

    text_of = RunTexts(results, paths)
    results = fold_triton_fp8(results, text_of)
    results = fold_bnb_raising(results, text_of)
    return fold_helper_calls(results, text_of)


# ----------------------------------------------------------------------------- FP8 feeding Triton kernels
def _dotted(node: ast.AST) -> str:
    return astcache.dotted(node, strict=False) or ""


def _kernels(tree: ast.Module) -> set[str]:
    """The module's top-level functions decorated `@triton.jit` (or `@jit`, `@triton.autotune(...)`,
    `@triton.heuristics(...)` over it)."""
    out = set()
    for node in tree.body:
        if isinstance(node, ast.FunctionDef):
            for decorator in node.decorator_list:
                name = _dotted(decorator.func if isinstance(decorator, ast.Call) else decorator)
                if name.rsplit(".", 1)[-1] in _TRITON_DECORATORS:
                    out.add(node.name)
                    break
    return out


def _launch(node: ast.AST, names: set) -> Optional[str]:
    """The kernel name of `kernel[grid](...)` when `kernel` is one of `names`, else None."""
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Subscript) and isinstance(node.func.value, ast.Name):
        name = node.func.value.id
        return name if name in names else None
    return None


def _imported(tree: ast.Module) -> set[str]:
    """Names the module binds by `from M import name` (kernels of a sibling module may be launched
    with the module's own)."""
    return {a.asname or a.name for n in astcache.walk(tree) if isinstance(n, ast.ImportFrom) for a in n.names}


def _launch_args(call: ast.Call) -> list[ast.AST]:
    return [*call.args, *(k.value for k in call.keywords)]


def _reads(node: ast.AST, name: str) -> bool:
    return any(isinstance(n, ast.Name) and n.id == name and isinstance(n.ctx, ast.Load) for n in ast.walk(node))


def _only_feeds(function: ast.AST, name: str, launchable: set) -> bool:
    """Whether `name` is passed into a kernel launch of `function` and into no other call (a method
    call on it, `name.stride(0)`, is not a use elsewhere)."""
    fed = False
    for node in ast.walk(function):
        if not isinstance(node, ast.Call):
            continue
        if _launch(node, launchable) is not None:
            fed = fed or any(_reads(a, name) for a in _launch_args(node))
            continue
        if any(_reads(a, name) for a in _launch_args(node)) and not _in_launch(function, node, launchable):
            return False
    return fed


def _in_launch(function: ast.AST, call: ast.Call, launchable: set) -> bool:
    """Whether `call` lies in the arguments of a kernel launch (`kernel[grid](x.stride(0))`)."""
    for node in ast.walk(function):
        if _launch(node, launchable) is not None and any(call is n for a in _launch_args(node) for n in ast.walk(a)):
            return True
    return False


def _statement(function: ast.AST, line: int) -> Optional[ast.stmt]:
    """The innermost simple statement of `function` holding `line`."""
    best = None
    for node in ast.walk(function):
        if isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign, ast.Expr, ast.Return)) and \
                node.lineno <= line <= (node.end_lineno or node.lineno) and (best is None or node.lineno >= best.lineno):
            best = node
    return best


def _bound_names(statement: ast.stmt) -> list[str]:
    targets = statement.targets if isinstance(statement, ast.Assign) else \
        [statement.target] if isinstance(statement, ast.AnnAssign) else []
    out = []
    for target in targets:
        for node in ast.walk(target):
            if isinstance(node, ast.Name):
                out.append(node.id)
    return out


def _feeds(function: ast.AST, line: int, launchable: set) -> bool:
    statement = _statement(function, line)
    if statement is None:
        return False
    for node in ast.walk(statement):  # (the FP8 place inside a launch's own arguments)
        if _launch(node, launchable) is not None and any(
                a.lineno <= line <= (a.end_lineno or a.lineno) for a in _launch_args(node)):
            return True
    names = _bound_names(statement)
    return bool(names) and any(_only_feeds(function, n, launchable) or _dtype_only_feeds(function, n, launchable)
                               for n in names)


_ALLOCATIONS = frozenset({"empty", "empty_like", "empty_strided", "zeros", "zeros_like", "full", "full_like"})


def _dtype_only_feeds(function: ast.AST, name: str, launchable: set) -> bool:
    """Whether `name` (an FP8 dtype bound to a name: `fp8_dtype = torch.float8_e4m3fn`) is read only
    as the `dtype=` of allocations bound to names that only feed the function's kernel launches
    (`y_q = torch.empty(shape, dtype=fp8_dtype)`, round-28 audit CA#5), as `torch.finfo(name)` (its
    range, no compute) or in a launch's own arguments; and at least one allocation feeds a launch."""
    assigned = {id(n.value): n for n in ast.walk(function) if isinstance(n, ast.Assign)}
    fed = False
    for node in ast.walk(function):
        if not isinstance(node, ast.Call) or not any(_reads(a, name) for a in _launch_args(node)):
            continue
        if _launch(node, launchable) is not None or _in_launch(function, node, launchable):
            continue
        callee = _dotted(node.func)
        if callee in ("torch.finfo", "finfo") and len(node.args) == 1 and not node.keywords:
            continue
        dtype = next((k.value for k in node.keywords if k.arg == "dtype"), None)
        if not (callee.rsplit(".", 1)[-1] in _ALLOCATIONS and isinstance(dtype, ast.Name) and dtype.id == name
                and not any(_reads(a, name) for a in [*node.args, *(k.value for k in node.keywords if k.arg != "dtype")])):
            return False
        statement = assigned.get(id(node))
        targets = _bound_names(statement) if statement is not None else []
        if len(targets) != 1 or not _only_feeds(function, targets[0], launchable):
            return False
        fed = True
    return fed


def fold_triton_fp8(results: list, text_of) -> list:
    """Module's doc, first shape."""
    from .folding import Fold, places_of

    out = list(results)
    for i, result in enumerate(results):
        if not result.relpath.endswith(".py") or not any(_open(f, "NPU913") for f in result.findings):
            continue
        targets = [f for f in result.findings if _open(f, "NPU910")]
        if not targets:
            continue
        data = text_of(i)
        if not data or b"float8" not in data or b"jit" not in data:
            continue
        tree = astcache.parse(data)
        if tree is None:
            continue
        kernels = _kernels(tree)
        if not kernels:
            continue
        launchable = kernels | _imported(tree)
        functions = [n for n in astcache.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))
                     and n.name not in kernels]
        target = next((f for f in targets if "jit" in (f.source or "")), targets[0])
        fold = Fold(result.findings)
        fold.targets.add(id(target))
        for finding in result.findings:
            if not _open(finding, "NPU913") or not fold.movable(finding, target):
                continue
            for place in places_of(finding):
                holding = [n for n in functions if n.lineno <= place[0] <= (n.end_lineno or n.lineno)]
                if not holding:
                    continue
                function = min(holding, key=lambda n: (n.end_lineno or n.lineno) - n.lineno)
                if any(_launch(n, kernels) for n in ast.walk(function)) and _feeds(function, place[0], launchable):
                    fold.move(finding, [place], target)
        folded = fold.result(name_them=TRITON)
        if folded is not result.findings:
            out[i] = dataclasses.replace(result, findings=sorted(folded))
    return out


# ----------------------------------------------------------------------------- bitsandbytes beside a raising wrapper
def _import_names(tree: ast.Module, line: int) -> set[str]:
    for node in astcache.walk(tree):
        if isinstance(node, (ast.Import, ast.ImportFrom)) and node.lineno <= line <= (node.end_lineno or node.lineno):
            return {(a.asname or a.name).split(".")[0] for a in node.names}
    return set()


def fold_bnb_raising(results: list, text_of) -> list:
    """Module's doc, third shape."""
    from .folding import Fold, places_of
    from .optionalguards import BNB_DEFAULT

    out = list(results)
    for i, result in enumerate(results):
        bnb = [f for f in result.findings if _open(f, "NPU914") and BNB_DEFAULT in f.message]
        raising = [f for f in result.findings if f.code != "NPU914" and _open_any(f) and _RAISES.search(f.message)]
        if not bnb or not raising or not result.relpath.endswith(".py"):
            continue
        data = text_of(i)
        tree = astcache.parse(data) if data else None
        if tree is None:
            continue
        fold = Fold(result.findings)
        for target in raising:
            fold.targets.add(id(target))
        for finding in bnb:
            for place in places_of(finding):
                names = _import_names(tree, place[0])
                target = next((t for t in raising if names and _raiser_reads(tree, t, names)
                               and fold.movable(finding, t)), None)
                if target is not None:
                    fold.move(finding, [place], target)
        folded = fold.result(name_them=BNB)
        if folded is not result.findings:
            out[i] = dataclasses.replace(result, findings=sorted(folded))
    return out


def _open_any(finding) -> bool:
    from .folding import ours
    from .moot import is_moot

    return ours(finding) and finding.severity != "info" and not is_moot(finding)


def _raiser_reads(tree: ast.Module, finding, names: set[str]) -> bool:
    """Whether the function the finding says raises unless the device is CUDA (at the line it
    names), or the class holding it, reads one of `names`."""
    match = _RAISES.search(finding.message)
    name, line = match.group(1), int(match.group(2))
    holding = [n for n in astcache.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
               and n.lineno <= line <= (n.end_lineno or n.lineno)]
    functions = [n for n in holding if not isinstance(n, ast.ClassDef)]
    if not functions:
        return False
    function = min(functions, key=lambda n: (n.end_lineno or n.lineno) - n.lineno)
    if function.name != name:
        return False
    classes = [n for n in holding if isinstance(n, ast.ClassDef) and n.lineno <= function.lineno]
    scope = min(classes, key=lambda n: (n.end_lineno or n.lineno) - n.lineno) if classes else function
    return any(_reads(scope, n) for n in names) or any(
        _reads(base, n) for c in classes[-1:] for base in c.bases for n in names)


# ----------------------------------------------------------------------------- a project FP8 helper's call sites
class _Run(RunModules):
    """The run's modules by dotted name; their trees and top-level definitions on first ask."""

    def module_of(self, i: int, node: ast.ImportFrom) -> Optional[int]:
        from .modpaths import resolve_relative

        module = resolve_relative(self.results[i].relpath, node.level, node.module or "").replace("/", ".") \
            if node.level else node.module or ""
        return self.by_name.get(module)

    def definition(self, i: int, name: str, depth: int = 0) -> Optional[tuple[int, ast.AST]]:
        """(module, node) of the function or class `name` means at the top of module `i`: its own
        definition, or one a `from M import name` (anywhere in the module) brings from the run."""
        tree = self.tree(i)
        if tree is None or depth > 3:
            return None
        for node in tree.body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and node.name == name:
                return i, node
        for node in astcache.walk(tree):
            if isinstance(node, ast.ImportFrom):
                for alias in node.names:
                    if (alias.asname or alias.name) == name and alias.name != "*":
                        k = self.module_of(i, node)
                        return self.definition(k, alias.name, depth + 1) if k is not None and k != i else None
        return None


def _called_names(node: ast.AST) -> list[str]:
    """Names called in `node`: `f(...)`, and the class of `Cls.apply(...)`/`Cls.method(...)`."""
    out = []
    for sub in ast.walk(node):
        if isinstance(sub, ast.Call):
            if isinstance(sub.func, ast.Name):
                out.append(sub.func.id)
            elif isinstance(sub.func, ast.Attribute) and isinstance(sub.func.value, ast.Name):
                out.append(sub.func.value.id)
    return list(dict.fromkeys(out))


def _reported_in(run: _Run, start: tuple[int, ast.AST], fp8_lines: dict[int, list]) -> Optional[tuple[int, int]]:
    """(module, line) of an open NPU913 place inside a function the helper reaches, or None."""
    seen, frontier = set(), [start]
    for _depth in range(_MAX_DEPTH + 1):
        following = []
        for k, node in frontier:
            if (k, id(node)) in seen:
                continue
            seen.add((k, id(node)))
            for line in fp8_lines.get(k, []):
                if node.lineno <= line <= (node.end_lineno or node.lineno):
                    return k, line
            for name in _called_names(node):
                found = run.definition(k, name)
                if found is not None:
                    following.append(found)
        frontier = following
        if not frontier:
            break
    return None


def fold_helper_calls(results: list, text_of) -> list:
    """Module's doc, second shape."""
    from .findings import split_merged

    # (a finding another pass folded FP8 uses into, "(with `bmm_fp8(...)` ...)", holds FP8 work of the
    # file's own: kept)
    candidates = [(i, f) for i, r in enumerate(results) if r.relpath.endswith(".py")
                  for f in r.findings if _open(f, "NPU913") and _CAST_ANCHOR.search(f.message)
                  and "(with `" not in f.message]
    if not candidates:
        return results
    fp8_lines: dict[int, list] = {}
    for k, result in enumerate(results):
        lines = sorted({p.line for f in result.findings if _open(f, "NPU913") and not _CAST_ANCHOR.search(f.message)
                        for p in split_merged(f)})
        if lines:
            fp8_lines[k] = lines
    if not fp8_lines:
        return results
    run = _Run(results, text_of)
    notes: dict[tuple[int, int], list[tuple[int, object, str]]] = {}  # covering place -> (file, finding, note)
    for i, finding in candidates:
        tree = run.tree(i)
        if tree is None:
            continue
        call = next((n for n in astcache.walk(tree) if isinstance(n, ast.Call) and n.lineno == finding.line
                     and n.col_offset + 1 == finding.column), None)
        if call is None:
            continue
        name = call.func.id if isinstance(call.func, ast.Name) else None
        start = run.definition(i, name) if name else None
        if start is None or start[0] == i:
            continue  # (a helper from outside the run, or the file's own: kernels.py judged it by its body)
        covering = _reported_in(run, start, fp8_lines)
        if covering is None:
            continue
        k, line = covering
        lines = sorted({finding.line, *(n for n, _c, _s in finding.also)})
        where = posixpath.relpath(results[i].relpath, posixpath.dirname(results[k].relpath) or ".")
        shown = ", ".join(map(str, lines))
        notes.setdefault((k, line), []).append(
            (i, finding, f"`{name}(...)` in `{where}` (line{'s' if len(lines) > 1 else ''} {shown})"))
    out = list(results)
    dropped: dict[int, set] = {}
    for (k, line), calls in notes.items():
        target = next((f for f in out[k].findings if _open(f, "NPU913") and any(
            p.line == line for p in split_merged(f))), None)
        calls = [c for c in calls if target is not None and _RANK[c[1].severity] <= _RANK[target.severity]]
        if not calls:
            continue  # (an error does not fold into a lower finding)
        named = list(dict.fromkeys(note for _i, _f, note in calls))
        more = f" and {len(named) - 3} more" if len(named) > 3 else ""
        note = (f"also the FP8 cast of {', '.join(named[:3])}{more}: calls of a project FP8 helper "
                f"that reaches this cast, ported here once")
        out[k] = dataclasses.replace(out[k], findings=sorted(
            dataclasses.replace(f, message=f"{f.message} ({note})") if f is target else f for f in out[k].findings))
        for i, finding, _note in calls:
            dropped.setdefault(i, set()).add(id(finding))
    for i, ids in dropped.items():
        out[i] = dataclasses.replace(out[i], findings=[f for f in out[i].findings if id(f) not in ids])
    return out


# (public for fp8shapes21.py: the same walks over a kernel module's functions and the run's helpers)
reads = _reads
bound_names = _bound_names
statement_at = _statement
launch_args = _launch_args
reported_in = _reported_in
RunDefinitions = _Run
