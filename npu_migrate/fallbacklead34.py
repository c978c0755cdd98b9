"""A merged per-file finding stands on an import that can fail, not on one a fallback `try` guards
(issue #16, round-33 audit HA#8). Per file, from run.migrate_file: the `secondary` predicate of
findings.merge_per_file.

vLLM's `model_executor/layers/quantization/utils/flashinfer_utils.py`:

    def has_flashinfer_situ_activation() -> bool:
        try:
            from flashinfer.fused_moe.core import ActivationType      # line 25
        except ImportError:
            return False
        return hasattr(ActivationType, "Situ")

    def activation_to_flashinfer_type(activation):
        from flashinfer.fused_moe.core import ActivationType          # line 32: fails where flashinfer is missing

fallbacks.review_fallbacks leaves the guarded import (line 25) at its severity when a finding of the
same per-file code stays elsewhere in the file, so that the merge lists it under that finding (one
package, one finding). The merge then kept the first place in file order, the guarded one, as the
finding's own line: its message ("import from `flashinfer.fused_moe.core`", an error) pointed at the
one import that cannot fail. Here an import directly in the body of a function's `try` whose every
handler catches ImportError and ends in `return` is secondary, as a type annotation is
(testscopes.in_annotation): where the import fails the function returns, so none of its names is
read; the merged finding stands on the first place that is not secondary, and lists the guarded
line among its others. Nothing changes where every place is guarded (the finding is then lowered
whole by fallbacks.py) or where there is one place.

Kept leading (the nearest true cases): a module-level `try` whose handler binds the names to None
(`except ImportError: fused_norm = None`: a caller may call the None, probes16.py decides), a
handler that passes or raises, an import after the `try`.
"""

from __future__ import annotations

import ast

from . import astcache


def _returning_imports(tree: ast.Module) -> set[int]:
    """The lines of the imports in the body of a function's `try` whose every handler catches
    ImportError and ends in `return` (`except ImportError: return False`)."""
    from .probes import catches_import_error

    lines: set[int] = set()
    for function in astcache.walk(tree):
        if not isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        for node in ast.walk(function):
            if isinstance(node, ast.Try) and node.handlers and all(
                    catches_import_error(h) and h.body and isinstance(h.body[-1], ast.Return) for h in node.handlers):
                lines |= {s.lineno for s in node.body if isinstance(s, (ast.Import, ast.ImportFrom))}
    return lines


def secondary(text: str, base=None):
    """A predicate for findings.merge_per_file: `base` (another predicate), or a report-only finding
    on an import of such a `try` (see the module's doc)."""
    tree = astcache.parse(text.encode("utf-8", "surrogatepass")) if "try" in text and "ImportError" in text else None
    guarded = _returning_imports(tree) if tree is not None else set()
    if not guarded:
        return base

    def predicate(finding) -> bool:
        if base is not None and base(finding):
            return True
        return not finding.fixable and finding.cell is None and finding.line in guarded

    return predicate
