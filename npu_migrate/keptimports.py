"""Modules imported only behind a device check kept meaning CUDA (issue #16, round 9).

bitsandbytes' `__init__.py` imports its CUDA backend only `if torch.cuda.is_available():`. The run
keeps that check meaning CUDA (NPU110, lowered by keptgates.py: "a device check kept meaning CUDA
whose fallback an NPU host runs"): on an NPU host it is False, as on any machine without CUDA, so
the `if` body never runs there and the backend module (`backends/cuda/ops.py`, with its
`register_kernel(..., "cuda")` dispatch keys) is never imported. The round-9 reviewers read the
findings of such a module as false.

`spans` gives, per file, the `if` blocks whose test is such a kept check, in the form of
dispatch.gates (first line, last line, why), for wholeprogram._never_imported: a module every
import site of which lies in one of them (or in other code an NPU host never reaches) gets its
findings lowered to info with the reason ("imported only where an NPU host does not go", a
moot phrase: a named skipped scope). Only a positive test counts (`if torch.cuda.is_available():`,
`if A and torch.cuda.is_available():`): a `not` or an `or` in the condition may make the block
run on an NPU host, and then nothing is done. No libcst (wholeprogram runs in a warm check).
"""

from __future__ import annotations

import re

from .keptgates import FALLBACK

_HEADER = re.compile(r"^([ \t]*)(?:el)?if[ \t]+(.+?):[ \t]*(?:#.*)?$")
_NEGATES = re.compile(r"\bnot\b|\bor\b|==\s*False|is\s+False")


def _block(lines: list[str], header: int, indent: int) -> int:
    """The last line of the block under the header at 1-based line `header` (by indentation)."""
    last = header
    for k in range(header, len(lines)):  # (lines[header] is the line after the header)
        text = lines[k]
        stripped = text.strip()
        if not stripped or stripped.startswith("#"):
            continue
        if len(text) - len(text.lstrip(" \t")) <= indent:
            break
        last = k + 1
    return last


def spans(results, python, texts) -> dict[int, list[tuple[int, int, str]]]:
    found: dict[int, list[tuple[int, int, str]]] = {}
    for i in python:
        kept = [f for f in results[i].findings if f.code == "NPU110" and FALLBACK in f.message]
        if not kept:
            continue
        data = texts.get(i)
        if not data:
            continue
        lines = data.decode("utf-8", "replace").splitlines()
        for finding in kept:
            for line, _column, source in ((finding.line, finding.column, finding.source), *finding.also):
                if not 0 < line <= len(lines):
                    continue
                match = _HEADER.match(lines[line - 1])
                if match is None or _NEGATES.search(match.group(2)):
                    continue
                condition = " ".join(match.group(2).split())
                if source and " ".join(source.split()) not in condition:
                    continue
                last = _block(lines, line, len(match.group(1)))
                if last > line:
                    why = f"`{condition[:70]}`, a device check kept meaning CUDA (False on an NPU host)"
                    found.setdefault(i, []).append((line + 1, last, why))
    return found
