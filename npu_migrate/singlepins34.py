"""`CUDA_VISIBLE_DEVICES=0` in front of single-device Python runs, one after another (issue #16,
round-33 audit HC#18; helper h193). Whole run (runplan.whole_run_passes, before moot.to_scopes),
the script's own lines and the Python files it runs.

    # examples/disaggregated/kv_load_failure_recovery_offline/run.sh
    VLLM_ENABLE_V1_MULTIPROCESSING=0 CUDA_VISIBLE_DEVICES=0 python3 prefill_example.py   # NPU701
    VLLM_ENABLE_V1_MULTIPROCESSING=0 CUDA_VISIBLE_DEVICES=0 python3 decode_example.py
    VLLM_ENABLE_V1_MULTIPROCESSING=0 CUDA_VISIBLE_DEVICES=0 python3 decode_example.py --simulate-failure

The pin selects device 0 for a process that uses one device. An NPU host ignores the variable, and
the process then uses device 0, its default: the same device, the same behaviour. The finding
becomes info with SINGLE_DEVICE_PIN (moot.NO_EFFECT, a named scope).

Exact: an NPU701 finding of a shell script (`.sh`) whose every place, and every line of the script
naming CUDA_VISIBLE_DEVICES, is one command line of its own: environment assignments, the pin with
the value `0`, then `python`/`python3` running a `.py` file of the run (beside the script, or by
its path from the run's root, or as `"$SCRIPT_DIR/x.py"` where the script sets that variable to its own
folder, `$(dirname "$(readlink -f "$0")")` and the like: round-34 IA#11, helper h204) with plain arguments, not backgrounded (`&`), piped, continued or
chained; and no such Python file names a way to use more devices (`tensor_parallel_size`,
`pipeline_parallel_size`, `data_parallel_size`, `world_size`, `device_count`, `cuda:1`,
`torchrun`, `torch.multiprocessing`, `mp.spawn`, `init_process_group`, `.to(` another index), nor
do its arguments (`-tp`, `--tensor-parallel-size`, ...). Kept (the nearest true cases): another
value (`=1`, `=0,1`), a backgrounded server (`... &`: the pins separate processes that run at
once), a run of a file the run does not hold, or of one that may use several devices.
"""

from __future__ import annotations

import dataclasses
import posixpath
import re
from typing import Optional

SINGLE_DEVICE_PIN = "a pin to device 0 of single-device runs, the device an NPU host uses by default"
_LINE = re.compile(r"^\s*(?:[A-Za-z_]\w*=[\w.:/-]*\s+)*CUDA_VISIBLE_DEVICES=0\s+(?:[A-Za-z_]\w*=[\w.:/-]*\s+)*"
                   r"python3?\s+(\"?(?:\$\{?[A-Za-z_]\w*\}?/)?[\w./-]+\.py\"?)((?:\s+[\w.=/-]+)*)\s*$")
# the script's own folder, assigned in the script (round-34 IA#11): SCRIPT_DIR=$(dirname "$(readlink -f "$0")"),
# $(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd), ...: "$SCRIPT_DIR/x.py" is x.py beside the script
_SELF = r"""["']?(?:\$\((?:readlink\s+-f|realpath)\s+["']?\$0["']?\)|\$0|\$\{BASH_SOURCE(?:\[0\])?\}|\$BASH_SOURCE)["']?"""
_DIRNAME = r"\$\(dirname\s+" + _SELF + r"\)"
_HERE = re.compile(r"""^\s*(?:export\s+)?([A-Za-z_]\w*)=["']?(?:""" + _DIRNAME + r"""|\$\(cd\s+["']?""" + _DIRNAME
                   + r"""["']?\s*&&\s*pwd(?:\s+-P)?\s*\))["']?\s*$""", re.MULTILINE)
_VAR = re.compile(r"^\$\{?([A-Za-z_]\w*)\}?/(.*)$")
_MANY = re.compile(rb"tensor_parallel_size|pipeline_parallel_size|data_parallel_size|world_size|device_count"
                   rb"|cuda:[1-9]|torchrun|torch\.multiprocessing|mp\.spawn|init_process_group|nproc", re.IGNORECASE)
_MANY_ARGS = re.compile(r"(^|\s)(-tp|-pp|-dp)\b|parallel|world|nproc", re.IGNORECASE)


def _open(finding) -> bool:
    from .moot import is_open

    return finding.code == "NPU701" and is_open(finding)


def _runs(lines: list[str], line: int, folder: str, index: dict, here: frozenset = frozenset()) -> Optional[str]:
    """The run file the pinned command at `line` runs, or None when the line is not the shape.
    `here`: the script's variables that hold its own folder."""
    if not 0 < line <= len(lines):
        return None
    match = _LINE.match(lines[line - 1])
    if match is None or _MANY_ARGS.search(match.group(2) or ""):
        return None
    path = match.group(1)
    if path.startswith('"') != path.endswith('"'):
        return None
    path = path.strip('"')
    if path.startswith("$"):
        var = _VAR.match(path)
        if var is None or var.group(1) not in here:
            return None  # (a folder the script does not name as its own)
        return _beside(folder, var.group(2), index)
    for candidate in (posixpath.normpath(posixpath.join(folder, path)), posixpath.normpath(path)):
        if candidate in index:
            return candidate
    return None


def _beside(folder: str, path: str, index: dict) -> Optional[str]:
    """`path` (relative to the script's own folder) when the run holds it."""
    candidate = posixpath.normpath(posixpath.join(folder, path))
    return candidate if candidate in index else None


def review(results: list, paths: dict) -> list:
    """The results, with the NPU701 notes of the module doc's shape lowered."""
    from .modpaths import result_bytes

    scripts = [i for i, r in enumerate(results) if r.relpath.endswith(".sh") and any(_open(f) for f in r.findings)]
    if not scripts:
        return results
    index = {r.relpath: i for i, r in enumerate(results)}
    out = list(results)
    for i in scripts:
        data = result_bytes(results[i], paths) or b""
        lines = data.decode("utf-8", "replace").splitlines()
        folder = posixpath.dirname(results[i].relpath)
        pinned = [n for n, text in enumerate(lines, 1) if "CUDA_VISIBLE_DEVICES" in text]
        here = frozenset(_HERE.findall("\n".join(lines)))
        runs = {n: _runs(lines, n, folder, index, here) for n in pinned}
        if not pinned or any(v is None for v in runs.values()):
            continue
        files = sorted(set(runs.values()))
        texts = [result_bytes(results[index[f]], paths) for f in files]
        if any(not text or _MANY.search(text) for text in texts):
            continue  # (a file not read, or one that may use several devices)
        findings = []
        for f in results[i].findings:
            places = [f.line, *(a[0] for a in f.also)]
            if _open(f) and all(p in runs for p in places):
                shown = ", ".join(f"`{name}`" for name in files)
                f = dataclasses.replace(f, severity="info", message=(
                    f"{f.message} ({SINGLE_DEVICE_PIN}: each pinned command runs {shown} in the foreground, "
                    "which uses one device; an NPU host ignores the variable and uses device 0)"))
            findings.append(f)
        out[i] = dataclasses.replace(results[i], findings=findings)
    return out
