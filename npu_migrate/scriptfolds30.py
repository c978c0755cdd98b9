"""A script's read of `CUDA_VISIBLE_DEVICES` from the caller's environment, where the same script
reports the variable already (issue #16, round-30 audit EB#38, REDUNDANT). Per file, from
run.migrate_file, for scripts and configs (after redundant.fold_adjacent_lines).

vLLM's `tests/v1/kv_connector/nixl_integration/spec_decode_acceptance_test.sh`:

    if [[ "$SMI_BIN" == *"rocm"* ]]; then
      GPU_DEVICE_VAR="HIP_VISIBLE_DEVICES"
    else
      GPU_DEVICE_VAR="CUDA_VISIBLE_DEVICES"                   # NPU701 (line 80)
    fi
    ...
    VISIBLE_DEVICES="${CUDA_VISIBLE_DEVICES:-${HIP_VISIBLE_DEVICES:-}}"   # NPU701 (line 178)

The reference reads the variable the user (or the caller) sets: on an NPU host the port is the
Ascend branch the script adds where it chooses its device variable, and the read follows that one
decision. The two findings differ only in their reason ("not rewritten: not a plain assignment or
export", "read from the caller's environment"), so findings.merge_per_file kept both.

`fold_repeated_reads`: a report-only NPU701 finding whose every place is such a read (its message
says "read from the caller's environment") folds into another report-only NPU701 finding of the
same file and variable, of the same severity or a higher one: its lines join that finding's
("also at line 178"). Nothing is dropped.

Kept (the nearest true case): a script whose only report of the variable is the read (a finding of
its own, as before), and a read beside a rewrite of the variable (a fixable finding is a change,
never a host for report-only places).
"""

from __future__ import annotations

from .findings import Finding
from .folding import Fold, named, ours, places_of

READ_FROM_CALLER = "read from the caller's environment"  # (textfiles._why_not_rewritten, role "reference")
_CODE = "NPU701"


def fold_repeated_reads(findings: list[Finding]) -> list[Finding]:
    """`findings` (one script's), with each read of the docstring's shape folded into its host."""
    mine = [f for f in findings if f.code == _CODE and ours(f)]
    reads = [f for f in mine if READ_FROM_CALLER in f.message]
    hosts = [f for f in mine if READ_FROM_CALLER not in f.message]
    if not reads or not hosts:
        return findings
    fold = Fold(findings)
    for read in reads:
        host = next((h for h in sorted(hosts) if named(h) == named(read) and fold.movable(read, h)), None)
        if host is not None:
            fold.move(read, places_of(read), host)
    return fold.result()
