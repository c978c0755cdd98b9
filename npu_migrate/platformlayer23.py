"""The project's own NPU platform layer decides the route (issue #16, round-23 audit BM#8, BL#40,
BL#32). Whole run, from runplan.whole_run_passes; two passes, each a message that moot.to_scopes
then names as a skipped scope. No new analysis: each reads the proof an earlier pass wrote into the
finding, and decides on that construct only.

* **Code only another accelerator's platform class runs** (BM#8; `review_platform_code`, right
  after platforms20.py). platforms20 lowers to info what only a CUDA/ROCm/XPU platform class
  reaches (the class body of `CudaPlatform`, its module when nothing else loads it, the modules its
  methods name by string), naming the class and the registry line that selects it only after a
  probe of that accelerator; round 20 kept them as info for the porter of the NPU platform plugin.
  Round 23's reviewers read every one as noise: the NPU host selects its own platform class (the
  project's or a plugin's) and implements its own answer there, so the porter has nothing to do
  in this code. Such an info (platforms20's clause, not fixable, no notebook cell) becomes a named
  scope, `not run on an NPU host (NPU931): code only another accelerator's platform class runs:
  reached only through the CUDA platform class: ...`. What platforms20 keeps reported (a module also
  imported from code an NPU host runs, a registry without a device probe, a selector it cannot
  read) is untouched here.

* **A CUDA name the project's own NPU start-up remaps** (BL#40; `review_startup`, before the first
  moot.to_scopes). patcher19 lowers to info a `torch.cuda` name (NPU202) or a profiler CUDA
  activity (NPU935) that torch_npu's `transfer_to_npu` maps to the NPU, in the modules a process
  that loads the patcher runs (proven by loaderproof20), naming the load's place. Where that place
  lies in the project's own NPU layer (a path part naming the NPU: `hardware_backend/npu/utils.py`,
  `hw/npu_utils.py`, `ascend/`), the patcher is the project's NPU start-up, reached from its
  platform/hardware layer under its NPU flag, and the code runs as written there: a named scope
  `runs as written on an NPU host (NPU202): a CUDA name the project's own NPU start-up remaps: ...`.
  A load anywhere else (a compatibility module, a test runner helper) keeps patcher19's info: the
  porter must know the code relies on a patcher the project loads incidentally.

* **A setting without effect on NPU under a parameter no call sets** (BL#32; `review_startup`).
  A `torch.backends.cudnn` flag (NPU404, "has no effect on NPU", info) inside `if flag:` where
  flagargs21 found that every call of the run passes the parameter False or leaves its default
  (`seed_all(seed, cuda_deterministic=False)`): the flag asks for no work on an NPU host whoever
  sets the parameter, and the project's own calls never enter the block, so its determinism hint
  is moot: a named scope `no effect on an NPU host (NPU404): ...`. A finding that fails on NPU
  under such a parameter (a CUDA-only import, FP8 compute) keeps flagargs21's info: a caller
  outside the project may set it.
"""

from __future__ import annotations

import dataclasses
import re

from .flagargs21 import UNSET
from .patcher19 import PATCHER_PHRASE
from .platforms20 import REACHED_ONLY

# moot.py's phrases (PHRASES, AS_WRITTEN, NO_EFFECT): each opens the parenthesised reason
PLATFORM_ONLY = "code only another accelerator's platform class runs"
STARTUP = "a CUDA name the project's own NPU start-up remaps"
UNSET_NO_EFFECT = "a setting without effect on NPU, in a block no call of the run enters"

_REACHED = re.compile(r"\(" + re.escape(REACHED_ONLY).replace(r"\{kind\}", r"\w+") + ": ")
_LOAD_AT = re.compile(r"transfer_to_npu (?:on the NPU )?at ([^\s():]+\.py):\d+")
# a path part of the project's NPU layer: `npu/`, `ascend/`, `npu_utils.py`, `platforms/npu.py`
_NPU_PART = re.compile(r"(?i)(?:^|[/_.])(?:npu|ascend)(?:[/_.]|$)")
_TEST_PART = re.compile(r"(^|/)(tests?|testing)/|(^|/)test_[^/]*$|_test\.py$|(^|/)conftest\.py$")
_NO_EFFECT = "has no effect on NPU"


def _open_info(finding) -> bool:
    return not finding.fixable and finding.cell is None and finding.severity == "info"


def _rewritten(results, indices, change) -> list:
    """The results with `change(finding)` (a new message, or None) applied to the files `indices`."""
    out = list(results)
    for i in indices:
        findings, changed = [], False
        for finding in results[i].findings:
            message = change(finding) if _open_info(finding) else None
            if message is not None:
                finding = dataclasses.replace(finding, message=message)
                changed = True
            findings.append(finding)
        if changed:
            out[i] = dataclasses.replace(results[i], findings=findings)
    return out


def _platform_message(finding):
    if "(" + PLATFORM_ONLY in finding.message:
        return None
    match = _REACHED.search(finding.message)
    if match is None:
        return None
    return f"{finding.message[:match.start()]}({PLATFORM_ONLY}: {finding.message[match.start() + 1:]}"


def review_platform_code(results: list) -> list:
    """platforms20's infos about code only a CUDA/ROCm/XPU platform class runs: named scopes."""
    from .moot import to_scopes

    indices = [i for i, r in enumerate(results)
               if any(_open_info(f) and _platform_message(f) is not None for f in r.findings)]
    if not indices:
        return results
    out = _rewritten(results, indices, _platform_message)
    for i, result in zip(indices, to_scopes([out[i] for i in indices])):
        out[i] = result
    return out


def npu_layer(relpath: str) -> bool:
    """A module of the project's own NPU layer (a path part names the NPU), not a test."""
    return bool(_NPU_PART.search(relpath)) and not _TEST_PART.search(relpath)


def _startup_message(relpaths):
    def change(finding):
        head = f"({PATCHER_PHRASE}: "
        at = finding.message.find(head)
        if at >= 0 and "(" + STARTUP not in finding.message:
            load = _LOAD_AT.search(finding.message, at)
            if load is not None and load.group(1) in relpaths and npu_layer(load.group(1)):
                return f"{finding.message[:at]}({STARTUP}: {finding.message[at + 1:]}"
            return None
        unset = finding.message.find("(" + UNSET + ": ")
        if unset > 0 and _NO_EFFECT in finding.message[:unset] and "(" + UNSET_NO_EFFECT not in finding.message:
            return f"{finding.message[:unset]}({UNSET_NO_EFFECT}: {finding.message[unset + 1:]}"
        return None
    return change


def review_startup(results: list) -> list:
    """patcher19's infos whose load is the project's own NPU start-up, and flagargs21's infos about
    a setting without effect on NPU: the messages that moot.to_scopes names as skipped scopes."""
    indices = [i for i, r in enumerate(results) if any(
        _open_info(f) and (PATCHER_PHRASE in f.message or UNSET in f.message) for f in r.findings)]
    if not indices:
        return results
    relpaths = {r.relpath for r in results}
    return _rewritten(results, indices, _startup_message(relpaths))
