"""Findings in code an NPU host never runs become named skipped scopes, not findings.

The run lowers to info what it can show an NPU host never executes: a test skipped off CUDA (and
the helpers only such tests call), a branch whose condition is false there, a compiled object a
test never calls, a skip decorator left as written, a module only other platforms' branches
import, a method an NPU subclass overrides, a `.cu` file the NPU build does without, a
documentation example in a YAML block. Each is true of the code and moot for the port: the
reviewers of the precision audits (issue #16) read them as noise, one after another.

So, as the last step of a run, such a finding leaves the findings and is named as a skipped scope
instead: its file, line range (the finding's lines and the places merged into it) and a reason
that keeps the code and the why (`not run on an NPU host (NPU913): in a branch an NPU host does
not take: `_is_hip``). Nothing is silent: the JSON `skipped` list and `--show-skipped` name every
one, and the text summary counts them. A CUDA runtime switch (`CUDA_DEVICE_MAX_CONNECTIONS`) is
named the same way, as `no effect on an NPU host (NPU990): ...`: the host runs it and ignores it, and
it asks for no work (NO_EFFECT). What an NPU host may run stays a finding at its severity,
and so do the NPU991 findings inside platform-aware scopes (the issue asks for those at info).
"""

from __future__ import annotations

import dataclasses

from .findings import Finding
from .model import FileResult

# The reasons the lowering steps append to a message (testscopes.py, wholeprogram.py,
# yamlscopes.py): a finding carrying one is about code an NPU host never runs.
PHRASES = (
    "in a test that does not run on an NPU host",
    "in a helper ",
    "in a branch an NPU host does not take",
    "in a test that never calls the compiled object",
    "the test keeps being skipped on an NPU host",
    "imported only where an NPU host does not go",
    "overridden for NPU by",
    "the project builds `",
    "documentation example in the Markdown",
    # guarded optional imports (probes.py, fallbacks.py): the import fails on an NPU host
    "optional import used for type checks",
    "guarded import read only by type checks and registrations",
    "in a test skipped where the package is missing",
)

# Reasons of findings about code an NPU host runs without effect: a setting it ignores, which asks
# for no work (a CUDA host still reads it). Named scopes too, with their own prefix.
NO_EFFECT = (
    "a CUDA runtime switch with no effect on an NPU host",
)


def _reason(message: str) -> str | None:
    """The parenthesised reason of a moot finding's message, without the parentheses, or None."""
    for phrase in (*PHRASES, *NO_EFFECT):
        at = message.find(phrase)
        if at <= 0 or message[at - 1] != "(":
            continue
        depth, end = 0, len(message)
        for i in range(at - 1, len(message)):
            if message[i] == "(":
                depth += 1
            elif message[i] == ")":
                depth -= 1
                if depth == 0:
                    end = i
                    break
        return message[at:end]
    return None


def is_moot(finding: Finding) -> bool:
    return not finding.fixable and finding.severity == "info" and _reason(finding.message) is not None


def to_scopes(results: list[FileResult]) -> list[FileResult]:
    """Move the findings about code an NPU host never runs into their files' skipped scopes."""
    out = []
    for result in results:
        kept, scopes = [], []
        for finding in result.findings:
            reason = _reason(finding.message) if is_moot(finding) and finding.cell is None else None
            if reason is None:
                kept.append(finding)
                continue
            lines = [finding.line, *(line for line, _column, _source in finding.also)]
            what = "no effect on an NPU host" if reason.startswith(NO_EFFECT) else "not run on an NPU host"
            scope = (min(lines), max(lines), f"{what} ({finding.code}): {reason}")
            if scope not in scopes:
                scopes.append(scope)
        if scopes:
            result = dataclasses.replace(result, findings=kept,
                                         skipped_scopes=sorted([*result.skipped_scopes, *scopes]))
        out.append(result)
    return out
