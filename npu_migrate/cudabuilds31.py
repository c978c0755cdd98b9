"""A maintainers' script that builds a CUDA-only package and stops where CUDA is absent (issue #16,
audit round 31 FA#17; helper h155). Per file, from textfiles.scan_text_file for shell scripts,
after labels8.review_exit_probe.

vLLM's `tools/flashinfer-build.sh` builds FlashInfer's AOT wheels:

    if [[ -z "${CUDA_VERSION}" ]]; then
        echo "CUDA_VERSION must be specified" >&2
        exit 1
    fi
    ...
    export TORCH_CUDA_ARCH_LIST="${FI_TORCH_CUDA_ARCH_LIST}"
    python3 -m flashinfer.aot

Its NPU703 notes (`CUDA_VERSION`, `TORCH_CUDA_ARCH_LIST`) ask an NPU user to review variables of a
build an NPU host never makes: the script builds a package rules/sweep.toml lists as never
installing on an NPU host (`[availability] never_on_npu`: FlashInfer has no NPU build; where the
project imports it, that import is reported, NPU911), and the script itself stops at its top level,
before any of that work, where the CUDA variable is unset, as on an NPU host. Such findings (every
place at or after the probe) become a named scope (BUILD_SCRIPT, moot.PHRASES), nothing dropped.

The shape, all of it required: a top-level probe `if [ -z "$CUDA_VAR" ]; then ... exit N; fi` (or
`[ -z "$CUDA_VAR" ] && exit N`) with no function defined before it (labels8's probe grammar, any
exit status), and a command after the probe that builds or installs a never-on-NPU package: `python
-m <package>` (a module of it), a `git clone` of a repository named after it, or `pip install` /
`uv pip install` / `uv build` of it (by name, or `.` inside a `pushd`/`cd` into a folder named after
it). Kept (nearest true cases): the same probe in a script that builds the project itself or any
package an NPU host can install (an NPU user ports that build), and a build of a CUDA-only package
without the probe (the script runs on an NPU host and fails somewhere inside: its lines stay as
reported).
"""

from __future__ import annotations

import functools
import re

from . import catalogue
from .labels8 import CUDA_UNSET_TEST as _TEST
from .labels8 import SAY_LINES as _SAY
from .labels8 import lower_from, top_level_stop

# (moot.PHRASES) the script builds a package with no NPU build and stops first where CUDA is absent
BUILD_SCRIPT = "in a script that builds a CUDA-only package and stops where the CUDA variable is unset"

_STOPS = (
    re.compile(r"^if[ \t]+" + _TEST + r"[ \t]*(?:;[ \t]*|\n[ \t]*)then[ \t]*(?:\n|;)?" + _SAY
               + r"[ \t]*exit(?:[ \t]+\d+)?[ \t]*(?:;|\n)[ \t\n]*fi\b", re.M),
    re.compile(r"^" + _TEST + r"[ \t]*&&[ \t]*(?:\{[^}\n]*?)?exit(?:[ \t]+\d+)?(?![\w-])", re.M),
)


@functools.lru_cache(maxsize=None)
def _never_on_npu() -> tuple:
    return tuple(catalogue.read_table("sweep.toml").get("availability", {}).get("never_on_npu", ()))


def _built(code: str) -> str | None:
    """The never-on-NPU package a command of `code` builds or installs, or None."""
    for package in _never_on_npu():
        name = re.escape(package)
        spelled = name.replace("_", "[-_]")
        patterns = (
            r"\bpython[\d.]*[ \t]+-m[ \t]+" + name + r"(?:\.\w+)*\b",
            r"\bgit[ \t]+clone\b[^\n]*?[/\s\"']" + spelled + r"(?:\.git)?[\"']?(?:[ \t]|$)",
            r"\b(?:pip[\d.]*|uv[ \t]+pip)[ \t]+install\b[^\n]*?[ \t]" + spelled + r"(?:[=<>~!\[ \t]|$)",
        )
        if any(re.search(p, code, re.M) for p in patterns):
            return package
        # (`pushd flashinfer` ... `uv build .` / `pip install .`: the package's own checkout)
        into = re.search(r"^[ \t]*(?:pushd|cd)[ \t]+[\"']?" + spelled + r"[\"']?[ \t]*$", code, re.M)
        if into and re.search(r"\b(?:pip[\d.]*[ \t]+install|uv[ \t]+pip[ \t]+install|uv[ \t]+build|"
                              r"python[\d.]*[ \t]+setup\.py)\b[^\n]*[ \t]\.(?:[ \t]|$)", code[into.end():], re.M):
            return package
    return None


def review(findings: list, code: str) -> list:
    """A shell file's findings at or after a top-level stop on an unset CUDA variable, in a script
    that builds a never-on-NPU package: information naming both (BUILD_SCRIPT). `code`: the text
    with comments blanked."""
    if not findings or "exit" not in code or "-z" not in code:
        return findings
    stop = top_level_stop(code, _STOPS)
    if stop is None:
        return findings
    match, start, end = stop
    package = _built(code[match.end():])
    if package is None:
        return findings
    return lower_from(findings, start,
                      f"{BUILD_SCRIPT}: it builds `{package}`, which has no NPU build, and lines {start}-{end} "
                      f"stop it where `{match.group('var')}` is unset, as on an NPU host; where the project "
                      "imports the package, that import is reported", also=lambda finding: finding.cell is None)
