"""Code after a lazy import of a ROCm-only package in the same block (issue #16, round-29 audit
CA#17, h164). Per file, from run.migrate_file (after mainroute29.py).

vLLM's `fused_moe/oracle/mxfp4.py` converts its weights per backend; the ROCm AITER branch reads

    elif mxfp4_backend == Mxfp4MoeBackend.AITER_MXFP4_BF16 and not is_gfx1250:
        ...
        if activation == MoEActivation.SITU:
            from aiter.utility.fp4_utils import e8m0_shuffle
            from vllm._aiter_ops import rocm_aiter_ops

            fp4_dtype = torch.float4_e2m1fn_x2
            e8m0_dtype = torch.float8_e8m0fnu                 # NPU913, line 1796

Whatever selects the branch (the file picks the backend only under `current_platform.is_rocm()`, or
a user names it), an NPU host cannot pass the `from aiter... import` statement: AITER is AMD's
ROCm-only kernel library (`ROCM_ONLY`), not installed there, and the import raises ImportError.
So the places after it in the same block, and in the blocks nested in the rest of that block, are
never run there: their open findings become info with backend16's phrase "in a branch an NPU host
cannot run" (fp8cpu's "in a function an NPU host cannot run" where the block is the function's own
body; moot.py phrases: a named skipped scope), naming the import and its line.

Kept as they were (the nearest true cases): the places before the import, the places after the
block that holds it (a `try` whose handler catches the ImportError goes on after the `try`), an
import at module level (the module's importers decide), and an import of any other package (one
an NPU host may have).
"""

from __future__ import annotations

import ast
from typing import Optional

from . import astcache
from .findings import Finding, lower_pieces, merge_per_file

# top-level packages that exist only for AMD GPUs (ROCm/HIP builds): never importable on an NPU host
ROCM_ONLY = frozenset({"aiter"})
CANNOT_RUN = "in a branch an NPU host cannot run"  # (moot.PHRASES; backend16.CANNOT_RUN)
CANNOT_RUN_FUNCTION = "in a function an NPU host cannot run"  # (moot.PHRASES; fp8cpu.CANNOT_RUN: the function's own body)
AFTER_IMPORT = ("{phrase}: it first imports `{module}` (line {line}), from AMD's ROCm-only `{package}` "
                "package, which an NPU host does not have, so the import raises there")
_OPEN = ("error", "warning")


def _rocm_import(stmt: ast.stmt) -> Optional[tuple[str, str]]:
    """(the module, its top-level package) a statement imports from a ROCm-only package, or None."""
    if isinstance(stmt, ast.Import):
        names = [a.name for a in stmt.names]
    elif isinstance(stmt, ast.ImportFrom) and not stmt.level and stmt.module:
        names = [stmt.module]
    else:
        return None
    for name in names:
        if name.split(".")[0] in ROCM_ONLY:
            return name, name.split(".")[0]
    return None


def _blocks(function: ast.AST):
    """Every statement list inside a function (its body, the bodies of its compound statements)."""
    for node in astcache.walk(function):
        for field in ("body", "orelse", "finalbody"):
            stmts = getattr(node, field, None)
            if isinstance(stmts, list) and stmts and isinstance(stmts[0], ast.stmt):
                yield stmts


def _spans(tree: ast.Module) -> list[tuple[int, int, str]]:
    """(first, last line, reason) of the statements after each ROCm-only import in a function's block."""
    out = []
    for function in astcache.walk(tree):
        if not isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        for stmts in _blocks(function):
            for k, stmt in enumerate(stmts[:-1]):
                found = _rocm_import(stmt)
                if found is None:
                    continue
                rest = stmts[k + 1:]
                phrase = CANNOT_RUN_FUNCTION if stmts is function.body else CANNOT_RUN
                why = AFTER_IMPORT.format(phrase=phrase, module=found[0], package=found[1], line=stmt.lineno)
                out.append((rest[0].lineno, rest[-1].end_lineno or rest[-1].lineno, why))
                break
    return out


def review(findings: list[Finding], text: str, relpath: str = "") -> list[Finding]:
    """The file's open findings after a ROCm-only lazy import in the same block, as info (see the
    module's doc). A file of that package itself (`aiter/...`) imports it where it runs: left alone."""
    if not any(f.severity in _OPEN and not f.fixable for f in findings) or "aiter" not in text:
        return findings
    if any(part in ROCM_ONLY for part in relpath.split("/")[:2]):
        return findings
    tree = astcache.parse(text.encode("utf-8", "surrogatepass"))
    if tree is None:
        return findings
    spans = _spans(tree)
    if not spans:
        return findings

    def reason_of(line: int) -> Optional[str]:
        # (the innermost span: a nested block's import names its own line)
        found = [(b - a, why) for a, b, why in spans if a <= line <= b]
        return min(found)[1] if found else None

    out: list[Finding] = []
    changed = False
    for finding in findings:
        pieces = lower_pieces(finding, reason_of) if finding.severity in _OPEN and not finding.fixable else None
        if pieces is None:
            out.append(finding)
            continue
        lowered = [p for p in pieces if p.severity == "info" and (CANNOT_RUN in p.message or CANNOT_RUN_FUNCTION in p.message)]
        out.extend(merge_per_file(lowered) + [p for p in pieces if p not in lowered])
        changed = True
    return sorted(out) if changed else findings
