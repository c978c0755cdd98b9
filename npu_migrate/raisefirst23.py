"""Test lines after a call that always raises on an NPU host (issue #16, round 23, BN#4).

Whole run (runplan.whole_run_passes). A statement of a test function (`allocator =
get_mem_allocator_instance()`) calls a function imported from another module of the run (`from pkg.alloc import get_mem_allocator_instance`),
whose body, read as an NPU host runs it, only passes `if`s whose conditions are certainly false
there (`if current_platform.is_cuda_alike(): ... return ...`, testscopes.false_on_npu) and ends
in a `raise`. The test fails at that call on an NPU host, so the report-only findings after it in
the same test (a `torch.cuda.CUDAGraph` capture) are never reached: `review` lowers them to
information with UNREACHED, naming the call and the raise, and saying that the test needs an NPU
skip rather than a port of those lines (not a named scope: the test does run there, and fails).
A merged finding is lowered only when every place of it is so reached. A callee with any other
statement, an `if` an NPU host may enter, a call inside a branch of the test, and the lines before
the call keep the findings.

Round 30 (audit EC#39, vLLM's `tests/kernels/moe/test_moe_permute_unpermute.py`): every test asks
first `if not moe_permute_unpermute_supported(): pytest.skip(...)`, and that probe is `return
torch.ops._moe_C.moe_permute_unpermute_supported()`: an op of a compiled extension's namespace
(`_moe_C`, spelled `_<name>_C` like PyTorch's `_C`) that the project builds from its CUDA sources,
not built on an NPU host, so the call raises there (`missing_op`, `MISSING_OP`), before its
`torch.cuda.CUDAGraph` capture. So a callee that, read the same way, ends in `return` of such an
op's call also always raises; and the call may be the condition of a top-level `if` of the test
(`if not probe(): pytest.skip(...)`): the lines after the condition are not reached. Kept: a probe
of another namespace (`_C` itself, which an NPU plugin may register, `_C_ascend`, `aten`), a probe
that returns anything else, and a condition that only contains the call inside a larger expression.
"""

from __future__ import annotations

import ast
import dataclasses
import re
from typing import Optional

from . import astcache
from .findings import Finding

UNREACHED = "not reached on an NPU host"
_TEST_MODULE = re.compile(r"(^|/)(test_[^/]*|[^/]*_test)\.py$")


# ----------------------------------------------------------------------------- tests that fail first
MISSING_OP = "an op of the compiled extension namespace `torch.ops.{ns}`, not built there"
_EXTENSION_NAMESPACE = re.compile(r"^_\w+_C$")


def missing_op(stmt: ast.AST) -> Optional[str]:
    """The namespace of `return torch.ops._moe_C.op(...)`: a compiled extension's op (module doc)."""
    value = stmt.value if isinstance(stmt, ast.Return) else None
    if not isinstance(value, ast.Call):
        return None
    name = astcache.dotted(value.func) or ""
    parts = name.split(".")
    if len(parts) == 4 and parts[:2] == ["torch", "ops"] and _EXTENSION_NAMESPACE.match(parts[2]) \
            and not re.search(r"(?i)npu|ascend", parts[2]):
        return parts[2]
    return None


def always_raises(function: ast.AST) -> Optional[int]:
    """The line of the `raise` a module-level function always reaches on an NPU host (module doc),
    or of its `return` of a compiled extension's op (`missing_op`)."""
    from .testscopes import false_on_npu

    body = function.body
    if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
        body = body[1:]
    for stmt in body:
        if isinstance(stmt, ast.If) and not stmt.orelse and false_on_npu(ast.unparse(stmt.test)):
            continue
        if stmt is body[-1] and missing_op(stmt) is not None:
            return stmt.lineno
        return stmt.lineno if isinstance(stmt, ast.Raise) and stmt is body[-1] and stmt.exc is not None else None
    return None


def _imported_functions(tree: ast.Module) -> dict:
    """{local name: (module, dots, name)} of the file's `from X import f` statements."""
    out = {}
    for node in astcache.nodes(tree, (ast.ImportFrom,)):
        for alias in node.names:
            out[alias.asname or alias.name] = (node.module or "", node.level, alias.name)
    return out


def _raising_calls(test: ast.AST, imported: dict, resolve) -> list:
    """(statement end line, call text, where it raises) of the test's top-level statements that
    call an imported function always raising on an NPU host."""
    out = []
    for stmt in test.body:
        value = stmt.value if isinstance(stmt, (ast.Expr, ast.Assign, ast.AnnAssign)) else None
        end = stmt.end_lineno or stmt.lineno
        if isinstance(stmt, ast.If):  # `if not probe(): pytest.skip(...)`: the condition raises (round 30)
            value = stmt.test.operand if isinstance(stmt.test, ast.UnaryOp) and isinstance(stmt.test.op, ast.Not) \
                else stmt.test
            end = stmt.test.end_lineno or stmt.lineno
        if not (isinstance(value, ast.Call) and isinstance(value.func, ast.Name) and value.func.id in imported):
            continue
        where = resolve(imported[value.func.id])
        if where is not None:
            out.append((end, value.func.id, where))
    return out


def review(results: list, paths: dict) -> list:
    """Findings of a test after a call that always raises on an NPU host (module doc): information."""
    from .firstfail22 import finding_lines
    from .modpaths import RunModules, RunTexts, resolve_relative

    def wanted(f: Finding) -> bool:
        return not f.fixable and f.cell is None and f.severity != "info"

    candidates = [i for i, r in enumerate(results) if _TEST_MODULE.search(r.relpath) and any(map(wanted, r.findings))]
    if not candidates:
        return results
    text_of = RunTexts(results, paths)
    modules = RunModules(results, text_of)
    stems = {r.relpath[:-3]: i for i, r in enumerate(results) if r.relpath.endswith(".py")}
    raising: dict = {}
    out = list(results)
    for i in candidates:
        data = text_of(i)
        if not data or b"import" not in data:
            continue
        tree = modules.tree(i)
        if tree is None:
            continue
        imported = _imported_functions(tree)

        def resolve(origin, importer=results[i].relpath):
            module, dots, name = origin
            if dots:
                stem = resolve_relative(importer, dots, module)
                index = stems.get(stem, stems.get(stem + "/__init__"))
            else:
                index = modules.by_name.get(module)
            if index is None or index == i:
                return None
            key = (index, name)
            if key not in raising:
                raising[key] = None
                other = modules.tree(index)
                function = next((n for n in (other.body if other is not None else [])
                                 if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n.name == name), None)
                line = always_raises(function) if function is not None else None
                if line is not None:
                    raising[key] = f"{results[index].relpath}:{line}"
                    namespace = missing_op(function.body[-1])
                    if namespace is not None:
                        raising[key] += ", " + MISSING_OP.format(ns=namespace)
            return raising[key]

        spans = []  # (first line after the call, last line of the test, why)
        for test in astcache.nodes(tree, (ast.FunctionDef, ast.AsyncFunctionDef)):
            if not test.name.startswith("test"):
                continue
            for end, name, where in _raising_calls(test, imported, resolve)[:1]:
                spans.append((end + 1, test.end_lineno or end, f"`{name}()` at line {end} raises there first ({where})"))
        if not spans:
            continue
        findings = []
        for f in out[i].findings:
            whys = [next((s[2] for s in spans if s[0] <= line <= s[1]), None) for line in finding_lines(f)]
            if wanted(f) and all(whys):
                f = dataclasses.replace(f, severity="info", message=(
                    f"{f.message} ({UNREACHED}: {whys[0]}; the test fails at that call there, so it needs an NPU "
                    "skip rather than a port of this line)"))
            findings.append(f)
        out[i] = dataclasses.replace(out[i], findings=findings)
    return out
