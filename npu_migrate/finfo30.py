"""An FP8 error left holding only `torch.finfo(<FP8 dtype>)` reads once the compute places merged
with it were lowered (issue #16, round-30 audit EB#20). Whole run, from runplan.whole_run_passes
(after supportgates27.py and the passes that split merged findings after it).

The sweep reads `torch.finfo(torch.float8_e4m3fn).max` as naming a dtype (fp8data.py), and a file
that computes in FP8 elsewhere keeps one error anchored at the compute, listing the named places
too. vLLM's `fused_moe/experts/cutlass_moe.py`:

    FLOAT8_E4M3_MAX = torch.finfo(torch.float8_e4m3fn).max     # line 493: a place of the error at 249
    ...
    ops.scaled_fp8_quant(act_out, a2_scale, ...)              # line 249: in `run_cutlass_moe_fp8`

supportgates27.py lowers the places of `run_cutlass_moe_fp8` (only rejected experts classes reach
it), and the piece left is an error for the module-level `torch.finfo` read alone: the dtype's range
is metadata every torch build answers, on an NPU host too, and no tensor is made.

`review`: an open NPU913 finding of a .py file whose every place lies on a line reading
`torch.finfo(torch.float8_...)` (the place's column inside that call) is lowered with
fp8data.NOT_COMPUTE + `FINFO` (a moot.NO_WORK phrase: a named scope). Kept (the nearest true case):
a finding with any other place (a cast, a tensor made in FP8) stays whole, at its severity.
"""

from __future__ import annotations

import re

from .fp8data import NOT_COMPUTE

FINFO = NOT_COMPUTE + "`torch.finfo` of an FP8 dtype reads its range, metadata every torch build answers"
_FINFO = re.compile(r"\bfinfo\(\s*(?:torch\.)?float8_\w+\s*\)")


def _finfo_place(lines: list[str], line: int, column: int) -> bool:
    if not 0 < line <= len(lines):
        return False
    return any(m.start() <= column - 1 <= m.end() for m in _FINFO.finditer(lines[line - 1]))


def review(results: list, paths: dict) -> list:
    """The results, with each finding of the docstring's shape lowered."""
    import dataclasses

    from .modpaths import RunTexts
    from .moot import is_open, to_scopes

    def wanted(f) -> bool:
        return f.code == "NPU913" and is_open(f) and f.severity in ("error", "warning")

    text_of = RunTexts(results, paths)
    out = list(results)
    changed = []
    for i, result in enumerate(results):
        if not result.relpath.endswith(".py") or not any(map(wanted, result.findings)):
            continue
        data = text_of(i) or b""
        if b"finfo" not in data:
            continue
        lines = data.decode("utf-8", "replace").split("\n")
        findings, lowered = [], False
        for f in result.findings:
            places = [(f.line, f.column), *((line, column) for line, column, _s in f.also)]
            if wanted(f) and all(_finfo_place(lines, line, column) for line, column in places):
                f = dataclasses.replace(f, severity="info", message=f"{f.message} ({FINFO})")
                lowered = True
            findings.append(f)
        if lowered:
            out[i] = dataclasses.replace(result, findings=findings)
            changed.append(i)
    for i, result in zip(changed, to_scopes([out[i] for i in changed])):
        out[i] = result
    return out
