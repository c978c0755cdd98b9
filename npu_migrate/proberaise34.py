"""Code after a function's own `if not <probe of a CUDA-only package>: raise` (issue #16, round 34
audit IA#10; helper h203).

vLLM's `model_executor/layers/sparse_attn_indexer.py`:

    def _assert_cutedsl_dcp_merge_supported(logits, topk_indices, k):
        if not has_cutedsl():                  # (utils/import_utils.py: `return _has_module("cutlass")`)
            raise RuntimeError("DCP sparse-indexer merge requires CuteDSL; ...")
        if logits.device.type != "cuda":       # NPU108 warning: "widen the check to the NPU"
            raise RuntimeError("... requires CUDA tensors.")

CuTeDSL (`cutlass`) is a CUDA-only compiled package (sweep.toml `module_codes` NPU911,
importfolders.packages), missing on an NPU host: the probe answers False there, the function
raises at its first check, and nothing after it in that block runs; advice to widen the second
check to the NPU is wrong. raisecalls33.py credits such a raising helper for the imports after a
CALL of it (NPU911, info under P1); here the findings lie in the same block as the check itself.

`review` (whole run, from runplan.whole_run_passes right after supportexits31.py): in a block of a
function (its body, or a branch, loop or `try` body inside it), a statement `if not <X>:` with no
`else` whose last statement raises, where importers19's resolver reads X as a probe of a package
(`find_spec("cutlass")`, `_has_module("cutlass")`, a helper of the run returning one, imported by
name) that is, or lies inside, a CUDA-only package of that list: the report-only findings of the
statements after it in the same block become named scopes (flags16.BRANCH, moot.py: "not run on
an NPU host"), naming the check, its line and the package. NPU911 findings are left to
importers19.py and raisecalls33.py (an import of the package itself is their shape).

Kept (the nearest true cases): a probe of a package an NPU host may have (`einops`, `triton`), a
check that warns or returns instead of raising, one with an `else:`, a compound test (`not
has_cutedsl() and strict`), the lines before the check, and checks at module level.
"""

from __future__ import annotations

import ast
from typing import Optional

_FUNCTIONS = (ast.FunctionDef, ast.AsyncFunctionDef)


def _function_blocks(tree: ast.Module):
    """Every statement list inside a function of the module (its body and the blocks within)."""
    stack: list = []
    for node in ast.walk(tree):
        if isinstance(node, _FUNCTIONS):
            stack.append(node.body)
    seen: set = set()
    while stack:
        body = stack.pop()
        if id(body) in seen:
            continue
        seen.add(id(body))
        yield body
        for stmt in body:
            if isinstance(stmt, _FUNCTIONS + (ast.ClassDef,)):
                continue  # (a nested function is walked as its own)
            for field in ("body", "orelse", "finalbody"):
                inner = getattr(stmt, field, None)
                if isinstance(inner, list) and inner and isinstance(inner[0], ast.stmt):
                    stack.append(inner)
            for handler in getattr(stmt, "handlers", ()) or ():
                stack.append(handler.body)


def _cuda_only(probed: str, packages: tuple) -> bool:
    return any(probed == p or probed.startswith(p + ".") for p in packages)


def _spans(resolver, i: int, tree: ast.Module, packages: tuple) -> list:
    """(first line, last line, reason) of the code after each raising probe check of file i."""
    from .flags16 import BRANCH
    from .tritonguards import source_text

    out = []
    for body in _function_blocks(tree):
        for index, stmt in enumerate(body[:-1]):
            if not (isinstance(stmt, ast.If) and not stmt.orelse and stmt.body
                    and isinstance(stmt.body[-1], ast.Raise) and stmt.body[-1].exc is not None
                    and isinstance(stmt.test, ast.UnaryOp) and isinstance(stmt.test.op, ast.Not)):
                continue
            probed = resolver.probe(stmt.test.operand, i)
            if probed is None or not _cuda_only(probed[0], packages):
                continue
            last = max(getattr(s, "end_lineno", None) or s.lineno for s in body)
            test = " ".join(source_text(stmt.test).split())
            out.append((body[index + 1].lineno, last,
                        f"{BRANCH}: after `if {test}: raise` (line {stmt.lineno}), which raises first there: "
                        f"`{probed[0]}` is a CUDA-only package, missing on an NPU host"))
            break  # (nothing after the raise in this block runs)
    return out


def review(results: list, paths: Optional[dict] = None) -> list:
    """The results, with the report-only places after such a check lowered to named scopes (module doc)."""
    from .flagcalls19 import lower_result
    from .importers19 import Resolver
    from .importfolders import packages as cuda_only_packages
    from .modpaths import RunTexts, open_python
    from .moot import is_open, to_scopes

    def wanted(finding) -> bool:
        return is_open(finding) and finding.code != "NPU911"

    candidates = open_python(results, wanted)
    if not candidates:
        return results
    text_of = RunTexts(results, paths or {})
    candidates = [i for i in candidates if b"raise" in (text_of(i) or b"") and b"if not " in (text_of(i) or b"")]
    if not candidates:
        return results
    python = [k for k, r in enumerate(results) if r.relpath.endswith(".py")]
    resolver = Resolver(results, python, text_of)
    packages = cuda_only_packages()
    out, changed = list(results), []
    for i in candidates:
        tree = resolver.tree(i)
        if tree is None:
            continue
        try:
            spans = _spans(resolver, i, tree, packages)
        except RecursionError:
            continue
        if not spans:
            continue

        def reason_of(line: int, spans=spans) -> Optional[str]:
            return next((s[2] for s in spans if s[0] <= line <= s[1]), None)

        lowered = lower_result(out[i], wanted, reason_of)
        if lowered is not out[i]:
            out[i] = lowered
            changed.append(i)
    for i, result in zip(changed, to_scopes([out[i] for i in changed])):
        out[i] = result
    return out
