"""Triton kernels reached only through the Triton side of a module-level `X = f_triton if HAS_TRITON
else f_torch` (issue #16, round-30 audit EC#27, policies P1 and P2). Whole run, from
runplan.whole_run_passes (after choicelabels26.py, before moot.to_scopes).

vLLM's `vllm/models/qwen4_exp/common/qsa_cache.py`:

    from vllm.triton_utils import HAS_TRITON, tl, triton

    @triton.jit(do_not_specialize=[...])                       # NPU910 error
    def _build_qsa_metadata_kernel(...): ...

    def build_qsa_metadata_triton(...):
        _build_qsa_metadata_kernel[(n,)](...)                  # the kernel's only launch

    def _build_qsa_metadata_torch(...): ...                    # the torch fallback

    build_qsa_metadata = (
        build_qsa_metadata_triton if HAS_TRITON else _build_qsa_metadata_torch
    )

The library calls `build_qsa_metadata`; an NPU host without Triton gets the torch fallback, and the
kernel runs there only when the user installs Triton-Ascend (opt-in, P1). The tests that call
`build_qsa_metadata_triton` directly (tests/models/qwen4_exp/test_qsa_reference.py) do not make the
library code reached (P2). guards15.py reads kernels in the body of an availability `if ...:
else:` statement; tritonguards23.py an early `return`; neither reads a conditional expression.

`review`: an open NPU910 place inside a `@triton.jit` kernel of a .py file is lowered to info with
the reason `SELECTED` (the test, the line, the fallback; tritonascend26.HAS_TRITON_ON_NPU for what
makes the test hold on an NPU host, and the tests or benchmarks that call the Triton side
directly, if any) where
* the file binds at module level `NAME = A if TEST else B` (or `B if not TEST else A`), TEST a
  Triton-availability name or call (tritonguards.TRITON_AVAILABILITY: `HAS_TRITON`, `has_triton()`),
  A and B module-level functions of the file;
* every launch (`kernel[grid](...)`) and every other reference of the kernel in the file lies in
  A or in a module-level function of the file only A reaches (calls through the file's own
  functions, three hops), and A itself is named in the file only there and in that expression;
* no library file of the run (not a test or benchmark: testcallers27.test_side) names A or the
  kernel.

Kept (the nearest true cases): a kernel the file also launches outside A, an A the file or a
library module calls directly, a selection on another test (a setting, a device check), inline
assembly (no Triton-Ascend runs it: guards15's PTX rule keeps those errors).
"""

from __future__ import annotations

import ast
import re
from typing import Optional

from . import tritonascend26

SELECTED = ("opt-in: the kernel runs only through `{triton}`, which `{name} = {triton} if {test} else {other}` "
            "(line {line}) selects where Triton is available; an NPU host without Triton takes `{other}`; "
            "with Triton-Ascend installed, whether `{test}` holds there depends on what it probes ("
            + tritonascend26.HAS_TRITON_ON_NPU + "): where it holds, verify the kernel on the NPU host")
BY_TESTS = "; tests/benchmarks call `{triton}` directly (policy P2: not library use): {files}"
_DEFS = (ast.FunctionDef, ast.AsyncFunctionDef)
_ASM = re.compile(rb"inline_asm|\basm\b|\.ptx\b")
_MAX_HOPS = 3


def _test_name(test: ast.AST) -> Optional[tuple[str, bool]]:
    """(the availability test's text, negated) of `HAS_TRITON`, `has_triton()`, `not ...`."""
    from .astcache import dotted
    from .tritonguards import TRITON_AVAILABILITY

    negated = isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not)
    inner = test.operand if negated else test
    node = inner.func if isinstance(inner, ast.Call) and not inner.args else inner
    name = dotted(node) or ""
    if not name or not TRITON_AVAILABILITY.search(name.rsplit(".", 1)[-1]):
        return None
    return name + ("()" if node is not inner else ""), negated


def _selections(tree: ast.Module, functions: dict) -> list[tuple[str, str, str, str, int]]:
    """(name, Triton side, fallback, test, line) of each module-level selection of the shape."""
    out = []
    for stmt in tree.body:
        if not isinstance(stmt, ast.Assign) or len(stmt.targets) != 1 or not isinstance(stmt.targets[0], ast.Name):
            continue
        value = stmt.value
        if not isinstance(value, ast.IfExp) or not isinstance(value.body, ast.Name) \
                or not isinstance(value.orelse, ast.Name):
            continue
        test = _test_name(value.test)
        if test is None:
            continue
        text, negated = test
        triton, other = (value.orelse.id, value.body.id) if negated else (value.body.id, value.orelse.id)
        if triton in functions and other in functions and triton != other:
            out.append((stmt.targets[0].id, triton, other, text, stmt.lineno))
    return out


def _names_in(node: ast.AST) -> set[str]:
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name)}


def _kernels(tree: ast.Module) -> dict[str, ast.AST]:
    from .astcache import dotted

    out = {}
    for stmt in tree.body:
        if isinstance(stmt, _DEFS) and any(
                (dotted(d.func if isinstance(d, ast.Call) else d) or "").endswith(("triton.jit", "triton.autotune"))
                for d in stmt.decorator_list):
            out[stmt.name] = stmt
    return out


def _naming(tree: ast.Module, name: str) -> list[ast.AST]:
    """The module-level statements that name `name` (a definition does not name itself)."""
    return [stmt for stmt in tree.body if name in _names_in(stmt)]


def _exclusive(tree: ast.Module, functions: dict, triton: str, line: int) -> set[str]:
    """`triton` and the module-level functions of the file that only it reaches: named only in the
    selection (line `line`) and in functions of the set, grown to a fixpoint (three rounds)."""
    if [s.lineno for s in _naming(tree, triton) if not (isinstance(s, _DEFS) and s.name == triton)] != [line]:
        return set()  # (the Triton side named elsewhere in the file: called directly)
    out = {triton}
    for _round in range(_MAX_HOPS):
        grown = {f for f in functions if f not in out and (users := _naming(tree, f))
                 and all(isinstance(u, _DEFS) and u.name in out for u in users)}
        if not grown:
            break
        out |= grown
    return out


def _verdicts(tree: ast.Module) -> dict[str, tuple]:
    """kernel name -> (selection) for each kernel of the docstring's shape."""
    functions = {s.name: s for s in tree.body if isinstance(s, _DEFS)}
    kernels = _kernels(tree)
    out: dict[str, tuple] = {}
    for selection in _selections(tree, functions):
        _name, triton, _other, _test, line = selection
        exclusive = _exclusive(tree, {f: n for f, n in functions.items() if f not in kernels}, triton, line)
        for kernel in kernels:
            users = _naming(tree, kernel)
            if users and all(isinstance(u, _DEFS) and u.name in exclusive for u in users):
                out[kernel] = selection
    return out


def review(results: list, paths: dict) -> list:
    """The results, with each kernel place of the docstring's shape lowered to info."""
    from .envskips29 import lower_result
    from .modpaths import RunModules, RunTexts
    from .moot import is_open
    from .testcallers27 import test_side

    def wanted(f) -> bool:
        return f.code == "NPU910" and is_open(f) and f.severity in ("error", "warning")

    text_of = RunTexts(results, paths)
    candidates = [i for i, r in enumerate(results) if r.relpath.endswith(".py") and any(map(wanted, r.findings))
                  and b" if " in (text_of(i) or b"") and not _ASM.search(text_of(i) or b"")]
    if not candidates:
        return results
    modules = RunModules(results, text_of)
    python = [i for i, r in enumerate(results) if r.relpath.endswith(".py")]
    out = list(results)
    for i in candidates:
        tree = modules.tree(i)
        if tree is None:
            continue
        verdicts = _verdicts(tree)
        if not verdicts:
            continue
        words = {w for _n, triton, *_r in verdicts.values() for w in (triton,)} | set(verdicts)
        named_by: dict[str, list[str]] = {w: [] for w in words}
        pattern = re.compile(rb"\b(" + b"|".join(re.escape(w.encode()) for w in sorted(words)) + rb")\b")
        for j in python:
            if j == i:
                continue
            data = text_of(j) or b""
            for word in {m.group(1).decode() for m in pattern.finditer(data)}:
                named_by[word].append(results[j].relpath)
        spans = []
        for kernel, (name, triton, other, test, line) in verdicts.items():
            users = named_by[kernel] + named_by[triton]
            if any(not test_side(path) for path in users):
                continue  # (a library module names the kernel or its Triton side: reached there)
            reason = SELECTED.format(triton=triton, name=name, test=test, other=other, line=line)
            callers = sorted(set(named_by[triton]))
            if callers:
                reason += BY_TESTS.format(triton=triton, files=", ".join(f"`{p}`" for p in callers[:3])
                                          + (f" and {len(callers) - 3} more" if len(callers) > 3 else ""))
            node = _kernels(tree)[kernel]
            first = min([node.lineno, *(d.lineno for d in node.decorator_list)])
            spans.append((first, node.end_lineno or node.lineno, reason))
        if not spans:
            continue

        def reason_of(at: int, spans=spans) -> Optional[str]:
            return next((r for a, b, r in spans if a <= at <= b), None)

        out[i] = lower_result(results[i], reason_of, wanted)
    return out
