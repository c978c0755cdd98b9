"""FP8 places (NPU913) that are Triton's own, a guarded function's default, or a selector handed to
another module's FP8 code (issue #16, round-21 audits BG#39, BG#20, BF#24, BH#36).

Per file (`review`, run.py after guards15.py):

* **FP8 inside a module-level Triton-availability block** (BG#39). guards15 made the file's NPU910
  information (GATED_KERNELS: `if has_triton():` whose `else:` binds stubs or raises). An NPU913
  place in the body of that same `if`, as a default of its custom ops
  (`output_dtype: torch.dtype = torch.float8_e4m3fn`) or a key of its `tl` dtype map, runs only
  where the Triton kernels run: it folds into the NPU910, whose message names it (`TRITON_BLOCK`).
  A place in a function of the block that computes in FP8 outside the kernels (a scaled matmul:
  `torch._scaled_mm`) stays its own error: with Triton-Ascend installed that op runs on the NPU.
* **Triton kernels built behind a function-level availability guard** (BG#20). A builder function
  that defines Triton kernels and whose top-level statement `if not has_triton(): return
  <unavailable record>` comes before every Triton place of the file's NPU910 (its `import
  triton`, its `@triton.jit` kernels; a lazy `import triton` of a caller after its `if not
  impls.available: raise`) is the module-level guard moved into a function: the NPU910 becomes
  information (`BUILDER`), as guards15 makes the module-level form. An FP8 buffer or cast
  (NPU913) of another function of the module bound only to be passed into a kernel launch
  (`impls.act_quant[grid](x, y, s)`, the `y = torch.empty_like(x, dtype=dtype)` of an FP8
  default) goes with those kernels and folds into that finding (fp8folds19.TRITON). A builder
  with no such guard, Triton places before it, or a guarded function that builds no kernel (it
  patches Triton's runtime: its imports of Triton internals may fail under Triton-Ascend) keeps
  its error; an FP8 name also passed to another call stays its own NPU913.

Whole run (`review_run`, runplan.py after fp8folds19.py):

* **The FP8 default of a function an NPU host leaves at once** (BF#24). flagcalls19 lowers the
  rest of a function after `assert is_ROCM()` (a project predicate False on an NPU host) to "in a
  branch an NPU host does not take". A parameter's FP8 default in that function's signature
  (`float8_dtype: torch.dtype = torch.float8_e4m3fn`) is read only by the code after the guard,
  when the statements up to the guard do not read the parameter: it takes the same reason (a
  named scope). The default of a function without such a guard stays.
* **An FP8 dtype handed to another module's FP8 code as a selector** (BH#36). Every place of a
  file's NPU913 is an FP8 dtype given as a keyword argument (`activation_dtype=torch.float8_e4m3fn`)
  to a class or function of another module of the run (`Int4Tensor.from_hp(...)`, imported by
  name) whose definition reaches, through calls by name (fp8folds19's walk), an open NPU913 place
  of its own: the FP8 compute is there and reported there; this file names a dtype. It becomes
  information with the sweep's "names FP8 dtypes only" reason (kernels.py `_NAMES_ONLY`; a named
  scope, moot.NO_WORK) naming the callee and its finding. A file with an FP8 op of its own
  (`torch._scaled_mm`), a callee that is a parameter or outside the run, or one whose code
  reports no FP8 place keeps its error.

findings.renamed (shared): a place split off a finding anchored on a cast helper no longer keeps
the helper's "(a cast to FP8)" label once it names a dtype instead of the call (BF#24's message).
"""

from __future__ import annotations

import ast
import dataclasses
import re
from typing import Optional

from . import astcache, tritonascend26
from .findings import Finding

FP8 = "NPU913"
TRITON_BLOCK = ("in this Triton-availability block, the dtypes of its Triton ops (run only where these "
                "kernels run; verified with them)")
BUILDER = ("guarded by the Triton-availability test at the top of `{function}` (line {line}: `if {test}: "
           "return {value}`), which returns before these kernels are built where Triton is missing: an NPU host "
           "without Triton never runs them (the feature is unavailable there); with Triton-Ascend "
           "installed (a module named `triton`), whether the test holds there depends on what it probes "
           "(" + tritonascend26.HAS_TRITON_ON_NPU + "): where it holds, these kernels run on the NPU host: "
           "verify them there")
LEAVES = "which leaves the function there"
SELECTOR = ("names FP8 dtypes only: {given} selects the FP8 path of {callees}, whose FP8 compute is reported "
            "there; no FP8 compute found in this file")
_SCALED_MM = re.compile(r"_scaled_(grouped_)?mm")
_FUNCTIONS = (ast.FunctionDef, ast.AsyncFunctionDef)


def _open(finding: Finding, code: str = FP8) -> bool:
    from .moot import is_moot

    return (finding.code == code and not finding.fixable and finding.cell is None and finding.severity != "info"
            and not is_moot(finding))


def _places(finding: Finding) -> list[tuple[int, int, str]]:
    return [(finding.line, finding.column, finding.source), *finding.also]


def _absorbed(target: Finding, moved: list[tuple[Finding, list]], name_them: str) -> Finding:
    """`target` standing for the moved places too, whatever their severity (folding.absorb; the
    places fold into a finding that already says where the code runs)."""
    from .folding import absorb, rebuilt

    return absorb(target, [rebuilt(f, places) for f, places in moved], name_them)


def _rebuild(findings: list[Finding], taken: dict[int, list], target: Finding, name_them: str,
             replaced: Optional[Finding] = None) -> list[Finding]:
    """The file's findings with the `taken` places ({id(finding): places}) moved into `target`
    (`replaced`: target's new form before it absorbs them)."""
    from .folding import rebuilt

    out, moved = [], []
    for finding in findings:
        places = taken.get(id(finding))
        if places:
            moved.append((finding, places))
            rest = [p for p in _places(finding) if p not in places]
            if rest:
                out.append(rebuilt(finding, rest))
            continue
        out.append(finding)
    if not moved:
        return findings
    base = replaced if replaced is not None else target
    return sorted(_absorbed(base, moved, name_them) if f is target else f for f in out)


# ----------------------------------------------------------------------------- per file
def review(findings: list[Finding], text: str) -> list[Finding]:
    """The file's FP8 inside a Triton-availability block, and its Triton kernels behind a
    function-level availability guard (see the module's doc)."""
    if "NPU910" not in {f.code for f in findings} or "triton" not in text:
        return findings
    wanted_block = any(f.code == "NPU910" and f.severity == "info" and "Triton-availability test" in f.message
                       for f in findings) and any(_open(f) for f in findings)
    wanted_builder = any(_open(f, "NPU910") for f in findings) and "return" in text
    if not wanted_block and not wanted_builder:
        return findings
    tree = astcache.parse(text.encode("utf-8", "surrogatepass"))
    if tree is None:
        return findings
    try:
        if wanted_builder:
            findings = _builder_guard(findings, tree, text)
        if any(f.code == "NPU910" and f.severity == "info" and "Triton-availability test" in f.message
               for f in findings) and any(_open(f) for f in findings):
            findings = _block_fp8(findings, tree)
    except RecursionError:
        pass
    return findings


def _in_body(statement: ast.If, line: int) -> bool:
    """Whether `line` lies in the body of the `if` (decorators of its first statement included)."""
    first, last = statement.body[0], statement.body[-1]
    start = min([first.lineno, *(d.lineno for d in getattr(first, "decorator_list", ()))])
    return start <= line <= (last.end_lineno or last.lineno)


def _parenthesised(message: str, phrase: str) -> Optional[str]:
    """The text of the parentheses that open with `phrase` in `message` (nested ones kept), or None."""
    at = message.find("(" + phrase)
    if at < 0:
        return None
    depth = 0
    for k in range(at, len(message)):
        depth += {"(": 1, ")": -1}.get(message[k], 0)
        if depth == 0:
            return message[at + 1:k]
    return None


def _holding_function(tree: ast.AST, line: int) -> Optional[ast.AST]:
    holding = [n for n in astcache.walk(tree) if isinstance(n, _FUNCTIONS) and n.lineno <= line <= (n.end_lineno or n.lineno)]
    return min(holding, key=lambda n: (n.end_lineno or n.lineno) - n.lineno) if holding else None


def _computes_beside(function: Optional[ast.AST]) -> bool:
    """Whether the function computes in FP8 outside the Triton kernels: it launches none of them
    (a torch reference that casts with `to_mx(...)`), or calls a scaled matmul."""
    if function is None:
        return False
    return not any(_is_launch(n) for n in ast.walk(function)) or any(
        isinstance(n, ast.Call) and _SCALED_MM.search(astcache.dotted(n.func, strict=False) or "")
        for n in ast.walk(function))


_GATED_LINE = re.compile(r"Triton-availability test `[^`]*` \(line (\d+)\)")


def _block_fp8(findings: list[Finding], tree: ast.Module) -> list[Finding]:
    """Module's doc, first shape."""
    from .tritonguards import tests_triton

    guards = {s.lineno: s for s in tree.body if isinstance(s, ast.If) and s.orelse and tests_triton(s.test)}
    for target in [f for f in findings if f.code == "NPU910" and f.severity == "info" and not f.fixable
                   and f.cell is None]:
        match = _GATED_LINE.search(target.message)
        guard = guards.get(int(match.group(1))) if match else None
        if guard is None:
            continue
        taken: dict[int, list] = {}
        for finding in findings:
            if not _open(finding):
                continue
            for place in _places(finding):
                line, _column, source = place
                if not _in_body(guard, line) or _SCALED_MM.search(source or ""):
                    continue
                if _computes_beside(_holding_function(tree, line)):
                    continue
                taken.setdefault(id(finding), []).append(place)
        if taken:
            return _rebuild(findings, taken, target, TRITON_BLOCK)
    return findings


def _negated_triton_test(test: ast.AST) -> Optional[ast.AST]:
    from .tritonguards import tests_triton

    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not) and tests_triton(test.operand):
        return test.operand
    return None


def _guarded_builder(function: ast.AST) -> Optional[ast.If]:
    """The function's top-level `if not <Triton-availability test>: return <value>`, or None."""
    for stmt in function.body:
        if isinstance(stmt, ast.If) and not stmt.orelse and len(stmt.body) == 1 \
                and isinstance(stmt.body[0], ast.Return) and _negated_triton_test(stmt.test) is not None:
            return stmt
    return None


def _defines_kernels(function: ast.AST) -> bool:
    """Whether the function builds Triton kernels (`@triton.jit`, `@triton.autotune(...)` inside):
    a function that only patches Triton's runtime builds none, and its imports are no kernels."""
    from .tritonguards import KERNEL_DECORATOR

    return any(isinstance(n, _FUNCTIONS) and n is not function and any(
        KERNEL_DECORATOR.search(astcache.dotted(d.func if isinstance(d, ast.Call) else d, strict=False) or "")
        for d in n.decorator_list) for n in ast.walk(function))


def _segment(text: str, node: ast.AST, limit: int = 80) -> str:
    shown = " ".join((ast.get_source_segment(text, node) or ast.unparse(node)).split())
    return shown if len(shown) <= limit else shown[:limit - 3] + "..."


def _builder_guard(findings: list[Finding], tree: ast.Module, text: str) -> list[Finding]:
    """Module's doc, second shape."""
    builders = [(n, g) for n in tree.body if isinstance(n, _FUNCTIONS) and _defines_kernels(n)
                for g in [_guarded_builder(n)] if g is not None]
    if not builders:
        return findings
    for finding in findings:
        if not _open(finding, "NPU910"):
            continue
        lines = [line for line, _c, _s in _places(finding)]
        from .dominators22 import through_callers  # (a helper called only after the check: BI#33)

        found = next(((f, g) for f, g in builders
                      if all(g.end_lineno < n <= (f.end_lineno or f.lineno) or _after_check(tree, f, n)
                             or through_callers(tree, f, n, lambda k, f=f: _after_check(tree, f, k)) for n in lines)
                      and any(g.end_lineno < n <= (f.end_lineno or f.lineno) for n in lines)), None)
        if found is None:
            continue
        function, guard = found
        value = guard.body[0].value
        reason = BUILDER.format(test=_segment(text, guard.test), function=function.name, line=guard.lineno,
                                value=_segment(text, value) if value is not None else "None")
        from .folding import ALSO

        also = ALSO.search(finding.message)
        lowered = dataclasses.replace(finding, severity="info",
                                      message=f"{ALSO.sub('', finding.message)} ({reason}){also.group(0) if also else ''}")
        taken = _feeding_fp8(findings, tree, function)
        if taken:
            from .fp8folds19 import TRITON

            return _rebuild(findings, taken, finding, TRITON, replaced=lowered)
        return [lowered if f is finding else f for f in findings]
    return findings


def _always_exits(body: list) -> bool:
    return bool(body) and isinstance(body[-1], (ast.Raise, ast.Return))


def _after_check(tree: ast.Module, builder: ast.AST, line: int) -> bool:
    """Whether `line` lies in a module function after a top-level `if <test>: raise` (or `return`)
    whose test reads a name bound there by a call of a module function that reaches `builder`
    (`impls = _get_impls()`, then `if not impls.available: raise AssertionError(...)`): the
    builder's unavailable record stops the function before `line` (its lazy `import triton`)."""
    from .fp8folds19 import reads as _reads

    functions = {n.name: n for n in tree.body if isinstance(n, _FUNCTIONS)}
    reach = {builder.name}
    while True:  # (the module functions that call the builder, directly or through each other)
        more = {name for name, f in functions.items() if name not in reach and any(
            isinstance(c, ast.Call) and isinstance(c.func, ast.Name) and c.func.id in reach for c in ast.walk(f))}
        if not more:
            break
        reach |= more
    function = _holding_function(tree, line)
    if function is None or function is builder or function.name not in functions:
        return False
    bound: set = set()
    for stmt in function.body:
        if stmt.lineno > line:
            return False
        if isinstance(stmt, ast.Assign) and isinstance(stmt.value, ast.Call) \
                and isinstance(stmt.value.func, ast.Name) and stmt.value.func.id in reach:
            bound.update(t.id for t in stmt.targets if isinstance(t, ast.Name))
        elif isinstance(stmt, ast.If) and not stmt.orelse and _always_exits(stmt.body) \
                and any(_reads(stmt.test, name) for name in bound) and (stmt.end_lineno or stmt.lineno) < line:
            return True
    return False


def _is_launch(node: ast.AST) -> bool:
    """`kernel[grid](...)`, `impls.kernel[grid](...)`: a Triton launch's shape."""
    return isinstance(node, ast.Call) and isinstance(node.func, ast.Subscript) and isinstance(
        node.func.value, (ast.Name, ast.Attribute))


def _feeding_fp8(findings: list[Finding], tree: ast.Module, builder: ast.AST) -> dict[int, list]:
    """{id(NPU913): its places} bound in another function of the module only to be passed into a
    kernel launch there (fp8folds19's test, with any subscripted launch)."""
    from .fp8folds19 import bound_names as _bound_names
    from .fp8folds19 import launch_args as _launch_args
    from .fp8folds19 import reads as _reads
    from .fp8folds19 import statement_at as _statement

    def only_feeds(function: ast.AST, name: str) -> bool:
        fed = False
        launches = [n for n in ast.walk(function) if _is_launch(n)]
        inside = {id(sub) for n in launches for a in _launch_args(n) for sub in ast.walk(a)}
        for node in ast.walk(function):
            if not isinstance(node, ast.Call):
                continue
            if _is_launch(node):
                fed = fed or any(_reads(a, name) for a in _launch_args(node))
                continue
            if id(node) not in inside and any(_reads(a, name) for a in _launch_args(node)):
                return False
        return fed

    taken: dict[int, list] = {}
    for finding in findings:
        if not _open(finding):
            continue
        for place in _places(finding):
            line = place[0]
            if (builder.lineno <= line <= (builder.end_lineno or builder.lineno)) or _SCALED_MM.search(place[2] or ""):
                continue
            function = _holding_function(tree, line)
            if function is None or not any(_is_launch(n) for n in ast.walk(function)):
                continue
            params = _default_parameter(function, line, place[1])
            if params is not None:
                # a default: the statements that pass the parameter on
                statements = [s for s in ast.walk(function) if isinstance(s, (ast.Assign, ast.AnnAssign))
                              and _reads(s.value, params) if s.value is not None]
                names = [n for s in statements for n in _bound_names(s)]
                if statements and all(only_feeds(function, n) for n in names) and not _read_elsewhere(
                        function, params, statements):
                    taken.setdefault(id(finding), []).append(place)
                continue
            statement = _statement(function, line)
            names = _bound_names(statement) if statement is not None else []
            if names and all(only_feeds(function, n) for n in names):
                taken.setdefault(id(finding), []).append(place)
    return taken


def _read_elsewhere(function: ast.AST, name: str, statements: list) -> bool:
    """Whether `name` is read in `function` outside `statements`, an `assert` and a comparison."""
    skip = {id(sub) for s in statements for sub in ast.walk(s)}
    for node in ast.walk(function):
        if isinstance(node, (ast.Assert, ast.Compare)):
            skip.update(id(sub) for sub in ast.walk(node))
    return any(isinstance(n, ast.Name) and n.id == name and isinstance(n.ctx, ast.Load) and id(n) not in skip
               for n in ast.walk(function))


def _default_parameter(function: ast.AST, line: int, column: Optional[int] = None) -> Optional[str]:
    """The parameter whose default (in `function`'s signature) holds `line` (and `column`, 1-based,
    when given), or None."""
    args = function.args
    positional = [*args.posonlyargs, *args.args]
    pairs = list(zip(positional[len(positional) - len(args.defaults):], args.defaults))
    pairs += [(a, d) for a, d in zip(args.kwonlyargs, args.kw_defaults) if d is not None]
    for arg, default in pairs:
        if column is not None:
            start = (default.lineno, default.col_offset + 1)
            end = (default.end_lineno or default.lineno, (default.end_col_offset or 0) + 1)
            if start <= (line, column) < end:
                return arg.arg
        elif default.lineno <= line <= (default.end_lineno or default.lineno) and any(
                isinstance(n, ast.Attribute) and n.attr.startswith("float8_") for n in ast.walk(default)):
            return arg.arg  # (by line only: the FP8 default on it)
    return None


# ----------------------------------------------------------------------------- whole run
def review_run(results: list, paths: dict) -> list:
    """The run's results with the two whole-run shapes of the module's doc reviewed."""
    from .modpaths import RunTexts

    text_of = RunTexts(results, paths)
    results = _defaults_after_guard(results, text_of)
    return _selectors(results, text_of)


_GUARD_IN_REASON = re.compile(r"after `([^`]+)`, " + re.escape(LEAVES))


def _leaving_reason(finding: Finding) -> Optional[str]:
    """The reason of a place flagcalls19 lowered "after `assert X`, which leaves the function there"."""
    if finding.severity != "info" or finding.fixable or LEAVES not in finding.message:
        return None
    from .flags16 import BRANCH

    reason = _parenthesised(finding.message, f"{BRANCH}: after `")
    return reason if reason and LEAVES in reason else None


def _defaults_after_guard(results: list, text_of) -> list:
    """Module's doc, third shape."""
    from .findings import lower_pieces

    out = list(results)
    for i, result in enumerate(results):
        if not result.relpath.endswith(".py"):
            continue
        left = [(f, r) for f in result.findings for r in [_leaving_reason(f)] if r is not None]
        if not left or not any(_open(f) for f in result.findings):
            continue
        data = text_of(i)
        tree = astcache.parse(data) if data else None
        if tree is None:
            continue
        text = data.decode("utf-8", "replace")
        functions = [n for n in astcache.walk(tree) if isinstance(n, _FUNCTIONS)]

        def reason_of(line: int) -> Optional[str]:
            holding = [n for n in functions if n.lineno <= line < n.body[0].lineno]
            if not holding:
                return None
            function = min(holding, key=lambda n: (n.end_lineno or n.lineno) - n.lineno)
            param = _default_parameter(function, line)
            if param is None:
                return None
            for finding, reason in left:
                if not (function.body[0].lineno <= finding.line <= (function.end_lineno or function.lineno)):
                    continue
                if _holding_function(tree, finding.line) is not function:
                    continue
                guard = _GUARD_IN_REASON.search(reason)
                shown = guard.group(1) if guard else ""
                # (the guard as flagcalls19 shows it: `assert X`, `if X: raise`)
                index = next((k for k, s in enumerate(function.body)
                              if (isinstance(s, ast.Assert) and shown == f"assert {_segment(text, s.test, 90)}")
                              or (isinstance(s, ast.If) and shown.startswith(f"if {_segment(text, s.test, 90)}: "))),
                             None)
                if index is None:
                    continue
                from .fp8folds19 import reads as _reads

                if any(_reads(s, param) for s in function.body[:index + 1]):
                    continue  # (the guard or a statement before it uses the default)
                return reason
            return None

        findings, changed = [], False
        for finding in result.findings:
            lowered = lower_pieces(finding, reason_of) if _open(finding) else None
            if lowered is None:
                findings.append(finding)
            else:
                findings.extend(lowered)
                changed = True
        if changed:
            out[i] = dataclasses.replace(result, findings=sorted(findings))
    return out


def _fp8_keyword(tree: ast.Module, line: int, column: int) -> Optional[tuple[ast.Call, ast.keyword]]:
    """(call, keyword) when the FP8 dtype at (line, column) is a keyword argument's value (not a
    `dtype=`: a cast), else None."""
    for node in astcache.walk(tree):
        if isinstance(node, ast.Call) and node.lineno <= line <= (node.end_lineno or node.lineno):
            for keyword in node.keywords:
                value = keyword.value
                if keyword.arg and keyword.arg != "dtype" and isinstance(value, ast.Attribute) \
                        and value.attr.startswith("float8_") and value.lineno == line \
                        and value.col_offset + 1 == column:
                    return node, keyword
    return None


def _selectors(results: list, text_of) -> list:
    """Module's doc, fourth shape."""
    from .findings import split_merged
    from .fp8folds19 import RunDefinitions as _Run
    from .fp8folds19 import reported_in as _reported_in

    candidates = [i for i, r in enumerate(results) if r.relpath.endswith(".py") and any(_open(f) for f in r.findings)]
    if not candidates:
        return results
    from .libgates23 import folded_fp8_lines  # (FP8 folded into a kernel library's gate is reported there)

    fp8_lines: dict[int, list] = {}
    for k, result in enumerate(results):
        lines = sorted({p.line for f in result.findings if _open(f) for p in split_merged(f)}
                       | {n for f in result.findings for n in folded_fp8_lines(f)})
        if lines:
            fp8_lines[k] = lines
    run: Optional[_Run] = None
    out = list(results)
    for i in candidates:
        result = results[i]
        fp8 = [f for f in result.findings if f.code == FP8 and not f.fixable and f.cell is None]
        if len(fp8) != 1 or not _open(fp8[0]):
            continue  # (one open NPU913 per file: the sweep merged them; other FP8 findings say more)
        finding = fp8[0]
        data = text_of(i)
        if not data or b"float8_" not in data:
            continue
        run = run or _Run(results, text_of)
        tree = run.tree(i)
        if tree is None:
            continue
        notes = []
        for line, column, _source in _places(finding):
            found = _fp8_keyword(tree, line, column)
            if found is None:
                notes = []
                break
            call, keyword = found
            func = call.func
            head = func.value if isinstance(func, ast.Attribute) else func
            if not isinstance(head, ast.Name):
                notes = []
                break
            start = run.definition(i, head.id)
            covering = _reported_in(run, start, {k: v for k, v in fp8_lines.items() if k != i}) \
                if start is not None and start[0] != i else None
            if covering is None:
                notes = []
                break
            k, at = covering
            callee = astcache.dotted(func, strict=False) or head.id
            notes.append((keyword, callee, results[k].relpath, at))
        if not notes:
            continue
        given = ", ".join(dict.fromkeys(f"`{k.arg}={astcache.dotted(k.value, strict=False)}`" for k, *_ in notes))
        callees = ", ".join(dict.fromkeys(f"`{callee}` ({path}:{at})" for _k, callee, path, at in notes))
        note = SELECTOR.format(given=given, callees=callees)
        from .folding import ALSO

        also = ALSO.search(finding.message)
        lowered = dataclasses.replace(finding, severity="info",
                                      message=f"{ALSO.sub('', finding.message)} ({note}){also.group(0) if also else ''}")
        out[i] = dataclasses.replace(result, findings=[lowered if f is finding else f for f in result.findings])
    return out
