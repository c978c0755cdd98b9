"""An FP8 parameter default moved to the calls is read by the untaken-branch review again (issue
#16, round 34 ID#31, with rocmops34.py). Per file, from run.py right after fold_redundant.

secondary.move_fp8_defaults_to_calls reports `def quant(x, dtype=torch.float8_e4m3fn)`, whose every
call in the file passes its own dtype, at those calls; that move comes after
testscopes.review_untaken_branches, so vLLM's one call under `elif
self.is_aiter_triton_fp8_bmm_enabled:` (False on an NPU host: rocmops34.py) kept its error. Only
the moved findings are reviewed again; every other finding is left as it is.
"""

from __future__ import annotations


def review_moved_defaults(findings: list, text: str, relpath: str) -> list:
    """secondary.move_fp8_defaults_to_calls moves an FP8 parameter default to the calls that pass
    their own dtype, after testscopes.review_untaken_branches has run: a call in a branch an NPU
    host does not take (`elif self.is_aiter_triton_fp8_bmm_enabled:`, ID#31) kept its error. The
    moved findings (their message names the overridden default) are read by that review again;
    every other finding is left as it is."""
    from .secondary import OVERRIDDEN_DEFAULT
    from .testscopes import review_untaken_branches

    marker = OVERRIDDEN_DEFAULT.split("{", 1)[0]
    moved = [f for f in findings if marker in f.message and f.severity == "error" and not f.fixable]
    if not moved:
        return findings
    reviewed, _typing = review_untaken_branches(moved, text, relpath)
    if reviewed == moved:
        return findings
    return sorted([f for f in findings if not any(f is m for m in moved)] + list(reviewed))
