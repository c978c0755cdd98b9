"""Same-file guards and pairs the per-file reviews missed (issue #16, round-27 audit BX#16, BX#22,
BX#30). Per file, at the end of the Python reviews (run.py).

- **Triton kernels defined under a module-level availability `if` with no `else:`, used only
  through a conditional on the same test** (NPU910, info, BX#16): guards15.py lowers kernels under
  `if HAS_TRITON: ... else: <placeholders>`; the same decision holds where the block has no
  `else:` but every use of a name the block defines, outside the block, sits in the true branch of
  a conditional on a Triton-availability test of the same file:

      if HAS_TRITON:
          @triton.jit
          def _kernel(...): ...
          def triton_interp(...): ... _kernel[grid](...)

      fn = triton_interp if HAS_TRITON else interp_native

  An NPU host without Triton never defines or runs the kernels (the native function runs); with
  Triton-Ascend installed the test may hold there and the kernels run on the NPU: verify them
  (guards15.GATED_KERNELS' wording, with "no `else:`, every use of its names behind the same test").
  Kept an error (the nearest true cases): a name of the block used anywhere else unguarded (a plain
  call after the block fails or runs the kernel), a block with no use of its names in the file (the
  importers decide), inline assembly in the file (no Triton-Ascend runs it), a kernel outside the block.

- **A get/set pair of one torch.cuda API in one function** (NPU202, folded, BX#22, BX#30's sibling):
  `old = torch.cuda.get_X(); torch.cuda.set_X(...); ...; torch.cuda.set_X(old)` is one bracket: the
  port is one change (the `torch.npu` counterpart, or dropping the bracket on the NPU path). The
  `set_X` finding folds into the `get_X` finding of the same innermost function, whose message names
  it ("with `torch.cuda.set_X` in the same function"). Not folded: a `set_X` in another function than
  every `get_X` (two places to port), a `set_X` with no `get_X` finding, two different APIs.

- Not here: tests skipped unless an optional package's probe holds (BX#33, `skipif(not
  has_fancy_ep())`). The name alone cannot tell a package probe from the project's own feature
  probe (`has_fast_links()`, which test_precision_secondary keeps an error); the whole-run pass
  optpkgtests28.py reads the probe's definition in its own module (a `find_spec`/import of a
  package) and lowers such tests to info (P1).
"""

from __future__ import annotations

import ast
import dataclasses
import re
from typing import Optional

from . import astcache, tritonascend26
from .findings import Finding
from .folding import Fold, ours, places_of

GATED_NO_ELSE = ("defined under the module-level Triton-availability test `{test}` (line {line}), which has no "
                 "`else:`, and every use of its names in this file is behind the same test (`{use}`, line "
                 "{use_line}, takes the other branch where Triton is missing): an NPU host without Triton never "
                 "runs these kernels; with Triton-Ascend installed (a module named `triton`), whether the test "
                 "holds there depends on what it probes (" + tritonascend26.HAS_TRITON_ON_NPU + "): where it "
                 "holds, these kernels run on the NPU host: verify them there")
PAIR = "in the same function: one read/set/restore bracket of one API, one change"
_CODE_TRITON = "NPU910"
_CODE_API = "NPU202"
_GET_SET = re.compile(r"^(torch\.cuda\.)(get|set)_(\w+)$")


def review(findings: list[Finding], text: str, relpath: str = "") -> list[Finding]:
    """The file's NPU910 under a no-`else` Triton test and its get/set NPU202 pairs (see the doc)."""
    triton = [f for f in findings if ours(f) and f.code == _CODE_TRITON and f.severity != "info"]
    pairs = [f for f in findings if ours(f) and f.code == _CODE_API and _GET_SET.match(f.source or "")]
    if not triton and len(pairs) < 2:
        return findings
    if triton and not (re.search(r"^if\b", text, re.M) and " else " in text):
        triton = []
    if not triton and len(pairs) < 2:
        return findings
    tree = astcache.parse(text.encode("utf-8", "surrogatepass"))
    if tree is None:
        return findings
    try:
        if triton and "inline_asm" not in text:
            findings = _gated_no_else(findings, tree, text)
        if len(pairs) >= 2:
            findings = _fold_pairs(findings, tree)
    except RecursionError:
        pass
    return findings


# ----------------------------------------------------------------------------- Triton under `if FLAG:` only
def _span(statement: ast.stmt) -> tuple[int, int]:
    start = min([statement.lineno, *(d.lineno for d in getattr(statement, "decorator_list", ()))])
    return start, statement.end_lineno or statement.lineno


def _defined(block: list[ast.stmt]) -> set[str]:
    names: set[str] = set()
    for stmt in block:
        if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(stmt.name)
        elif isinstance(stmt, (ast.Assign, ast.AnnAssign)):
            targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
            for target in targets:
                names.update(n.id for n in ast.walk(target) if isinstance(n, ast.Name))
        elif isinstance(stmt, (ast.Import, ast.ImportFrom)):
            names.update((a.asname or a.name).split(".")[0] for a in stmt.names)
    return names


def _guarded_uses(tree: ast.Module, guard: ast.If, names: set[str], tests_triton) -> Optional[tuple[ast.AST, int]]:
    """(the first guarding construct, its line) when every load of `names` outside `guard` lies in
    the true branch of an `IfExp`/`if` on a Triton-availability test; None if one does not, or if
    there is no use at all."""
    parent = astcache.parents(tree)
    first: Optional[tuple[ast.AST, int]] = None
    start, end = _span(guard)
    for node in astcache.walk(tree):
        if not (isinstance(node, ast.Name) and node.id in names and isinstance(node.ctx, ast.Load)):
            continue
        if start <= node.lineno <= end:
            continue
        child, up, holder = node, parent.get(id(node)), None
        while up is not None:
            if isinstance(up, ast.IfExp) and child is up.body and tests_triton(up.test):
                holder = up
                break
            if isinstance(up, ast.If) and any(child is s for s in up.body) and tests_triton(up.test):
                holder = up
                break
            child, up = up, parent.get(id(up))
        if holder is None:
            return None
        if first is None or holder.lineno < first[1]:
            first = (holder, holder.lineno)
    return first


def _gated_no_else(findings: list[Finding], tree: ast.Module, text: str) -> list[Finding]:
    from .tritonguards import UNGUARDED, tests_triton

    guards = [s for s in tree.body if isinstance(s, ast.If) and not s.orelse and tests_triton(s.test)]
    if not guards:
        return findings
    facts: dict[int, Optional[dict]] = {}
    out = []
    for finding in findings:
        if not (ours(finding) and finding.code == _CODE_TRITON and finding.severity != "info"
                and UNGUARDED not in finding.message):
            out.append(finding)
            continue
        lines = [line for line, _c, _s in places_of(finding)]
        guard = next((g for g in guards if all(_span(g.body[0])[0] <= n <= _span(g)[1] for n in lines)), None)
        if guard is None:
            out.append(finding)
            continue
        if id(guard) not in facts:
            use = _guarded_uses(tree, guard, _defined(guard.body), tests_triton)
            facts[id(guard)] = None if use is None else {
                "test": " ".join((ast.get_source_segment(text, guard.test) or "...").split()),
                "line": guard.lineno,
                "use": " ".join((ast.get_source_segment(text, use[0].test) or "...").split()) if isinstance(
                    use[0], ast.If) else " ".join((ast.get_source_segment(text, use[0]) or "...").split()),
                "use_line": use[1]}
        found = facts[id(guard)]
        if found is None:
            out.append(finding)
            continue
        out.append(dataclasses.replace(finding, severity="info",
                                       message=f"{finding.message} ({GATED_NO_ELSE.format(**found)})"))
    return out


# ----------------------------------------------------------------------------- get_X / set_X in one function
def _function_of(tree: ast.Module, line: int) -> Optional[ast.AST]:
    best = None
    for node in astcache.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.lineno <= line <= (
                node.end_lineno or node.lineno):
            if best is None or node.lineno > best.lineno:
                best = node
    return best


def _fold_pairs(findings: list[Finding], tree: ast.Module) -> list[Finding]:
    gets: dict[tuple[str, int], Finding] = {}
    sets: list[tuple[str, Finding]] = []
    for finding in findings:
        if not (ours(finding) and finding.code == _CODE_API):
            continue
        match = _GET_SET.match(finding.source or "")
        if not match:
            continue
        function = _function_of(tree, finding.line)
        if function is None:
            continue
        if match.group(2) == "get":
            gets.setdefault((match.group(3), id(function)), finding)
        else:
            sets.append((match.group(3), finding))
    if not gets or not sets:
        return findings
    fold = Fold(findings)
    for api, finding in sets:
        places = places_of(finding)
        movable = []
        for place in places:
            function = _function_of(tree, place[0])
            target = gets.get((api, id(function))) if function is not None else None
            if target is not None and fold.movable(finding, target):
                movable.append((place, target))
        for place, target in movable:
            fold.move(finding, [place], target)
    return fold.result(name_them=PAIR)
