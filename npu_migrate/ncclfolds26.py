"""NCCL settings in adjacent statements of one branch: one finding (issue #16, round 26 BV#7).

redundant.fold_nccl_settings folds NCCL variables set a few lines apart in one function, but keeps a
determinism setting (NCCL_ALGO, NCCL_PROTO: HCCL_DETERMINISTIC on an NPU host) apart from a tuning
one: two decisions where they are written apart. Written as one block, they are one decision:

    else:
        # NCCL determinism settings ...
        os.environ["NCCL_LAUNCH_MODE"] = "GROUP"
        pin_nccl_env({"NCCL_PROTO": "Simple", "NCCL_ALGO": "ring,tree", ...})

The second statement's finding already names the other variables and gives the advice; the first
one's note ("NCCL_LAUNCH_MODE has no one-to-one HCCL counterpart") adds nothing, as the round-26
reviewer read it. So an NPU602 finding whose statement directly precedes or follows (the next
statement of the same body: one branch, one function, nothing between them) a statement holding
another NPU602 finding moves into it: the one that carries the determinism advice when one does,
else the first. The finding that stays names the variables that moved ("with `NCCL_LAUNCH_MODE`
in the adjacent statement").

Not folded (the nearest true cases): settings in two branches of one `if` (two decisions, made on
different paths), statements with another statement between them (left to fold_nccl_settings'
rule), and an NCCL-only setting lowered by ncclonly.py (no port work: it joins no setting to port,
as in fold_nccl_settings).

redundant.review calls `fold_adjacent` after fold_nccl_settings (with its DETERMINISM pattern).
"""

from __future__ import annotations

import ast

from .findings import Finding
from .folding import Fold, ours, places_of
from .ncclonly import NCCL_ONLY

WHERE = "in the adjacent statement"
CODE = "NPU602"


def _statement_index(tree: ast.Module) -> dict[int, tuple[int, int, int]]:
    """{line: (id of the body list, index in it, last line)} of the innermost simple statements."""
    out: dict[int, tuple[int, int, int]] = {}
    for node in ast.walk(tree):
        for field in ("body", "orelse", "finalbody"):
            body = getattr(node, field, None)
            if not isinstance(body, list):
                continue
            for index, stmt in enumerate(body):
                if not isinstance(stmt, ast.stmt) or hasattr(stmt, "body"):
                    continue  # (a compound statement: its own bodies hold the settings)
                for line in range(stmt.lineno, (stmt.end_lineno or stmt.lineno) + 1):
                    out[line] = (id(body), index, stmt.lineno)
    return out


def fold_adjacent(findings: list[Finding], tree: ast.Module, advises) -> list[Finding]:
    """`advises(message)`: whether a finding carries the determinism advice (redundant.DETERMINISM)."""
    ours_602 = sorted(f for f in findings if f.code == CODE and ours(f) and NCCL_ONLY not in f.message)
    if len(ours_602) < 2:
        return findings
    index = _statement_index(tree)
    runs: list[list[Finding]] = []  # findings of consecutive statements of one body, in order
    previous = None
    for finding in ours_602:
        where = index.get(finding.line)
        if where is None:
            previous = None
            continue
        if previous is not None and runs and previous[0] == where[0] and where[1] - previous[1] in (0, 1):
            runs[-1].append(finding)
        else:
            runs.append([finding])
        previous = where
    fold = Fold(findings)
    for run in runs:
        if len(run) < 2:
            continue
        anchor = next((f for f in run if advises(f.message)), run[0])
        for finding in run:
            if fold.movable(finding, anchor):
                fold.move(finding, places_of(finding), anchor)
    return fold.result(name_them=WHERE)
