"""A CUDA base image a CI command passes to a Dockerfile of the run that reports it already (issue
#16, round-29 audit DB#14, REDUNDANT). Whole run, from runplan.whole_run_passes (after gates16.py,
whose build-argument fold this one builds on).

vLLM's release pipeline builds its CUDA images from the repository's own Dockerfile:

    # .buildkite/release-pipeline.yaml
    DOCKER_BUILDKIT=1 docker buildx build --load \\
      --build-arg FINAL_BASE_IMAGE=nvidia/cuda:13.4.1-base-ubuntu24.04 \\    # NPU707
      --build-arg NCCL_VERSION=2.32.3 \\                                      # (gates16: folded in)
      -f docker/Dockerfile .

    # docker/Dockerfile
    ARG FINAL_BASE_IMAGE=nvidia/cuda:${CUDA_VERSION}-base-ubuntu${UBUNTU_VERSION}   # NPU707

The build argument only sets the Dockerfile's own `ARG FINAL_BASE_IMAGE`, whose CUDA image the run
reports there (NPU707, with that Dockerfile's other CUDA lines): one root cause, ported once in
the Dockerfile (or replaced by an Ascend image build). A script that binds the image to a shell
variable first (`NIGHTLY_FINAL_BASE_IMAGE="nvidia/cuda:..."`, then `--build-arg
FINAL_BASE_IMAGE="${NIGHTLY_FINAL_BASE_IMAGE}"`) is read the same way.

`review` folds such a finding into the Dockerfile's: the CI file's NPU707 finding is removed and the
Dockerfile finding's message names it (file and lines, the build arguments gates16 had folded into
it too), as cmakefolds25.py names the sources it folds. Nothing is dropped. It applies where every
place of the CI finding is either such an image (a `--build-arg NAME=<image>` line, or the
assignment of a variable such a line reads) or a `--build-arg` line of the same command, the
command names its Dockerfile (`-f PATH`, `--file PATH`, `--file=PATH`) and that file of the run
holds an open NPU707 error or warning with a place on its `ARG NAME` line, at the CI finding's
severity or a higher one.

Kept (the nearest true cases): an image a command runs or builds from without a Dockerfile of the
run (`docker run nvidia/cuda:...`, `-f` naming a file outside the run), a build argument the
Dockerfile does not declare as an ARG holding its own reported image, and a Dockerfile whose image
is not reported (then the CI line is the only report of it).
"""

from __future__ import annotations

import dataclasses
import posixpath
import re
from typing import Optional

_RANK = {"error": 2, "warning": 1, "info": 0}
_ARG = re.compile(r"--build-arg[=\s]+[\"']?(\w+)=")
_FILE = re.compile(r"(?:^|\s)(?:-f|--file)(?:\s+|=)[\"']?([^\s\"'\\]+)")
_ASSIGN = re.compile(r"^\s*(?:export\s+)?(\w+)=")


def _command(lines: list[str], line: int) -> tuple[int, int]:
    from .gates16 import command_span  # (the span of a backslash-continued command)

    return command_span(lines, line)


def _open(finding) -> bool:
    from .moot import is_open

    return finding.code == "NPU707" and not finding.fixable and finding.cell is None and is_open(finding) \
        and finding.severity in ("error", "warning")


def _places(finding) -> list[int]:
    return [finding.line, *(line for line, _c, _s in finding.also)]


def _dockerfile(lines: list[str], first: int, last: int) -> Optional[str]:
    for n in range(first, last + 1):
        match = _FILE.search(lines[n - 1])
        if match:
            return posixpath.normpath(match.group(1))
    return None


def _image_args(lines: list[str], line: int) -> list[tuple[str, int]]:
    """(build-argument name, the line of its command) that the place at `line` sets: its own
    `--build-arg NAME=...`, or for `VAR=...` each `--build-arg NAME=...$VAR...` of the file."""
    text = lines[line - 1]
    match = _ARG.search(text)
    if match:
        return [(match.group(1), line)]
    match = _ASSIGN.match(text)
    if not match:
        return []
    var = re.compile(r"\$\{?" + re.escape(match.group(1)) + r"\b")
    return [(m.group(1), n) for n, other in enumerate(lines, 1) if n != line and var.search(other)
            for m in [_ARG.search(other)] if m]


def review(results: list, paths: dict) -> list:
    """The results, with each CI finding of the docstring's shape folded into its Dockerfile's."""
    from .modpaths import result_bytes

    ci = [i for i, r in enumerate(results) if not r.relpath.endswith(".py")
          and any(_open(f) for f in r.findings)]
    if len(ci) < 2:
        return results
    index = {r.relpath: i for i, r in enumerate(results)}
    texts: dict[int, list[str]] = {}

    def lines_of(i: int) -> list[str]:
        if i not in texts:
            data = result_bytes(results[i], paths) or b""
            texts[i] = data.decode("utf-8", "replace").splitlines()
        return texts[i]

    out = list(results)
    for i in ci:
        if b"--build-arg" not in (result_bytes(results[i], paths) or b""):
            continue
        lines = lines_of(i)
        folded = []
        for finding in results[i].findings:
            if not _open(finding):
                continue
            host = _host(results, index, lines_of, lines, finding, i)
            if host is not None:
                folded.append((finding, host))
        fold_into_hosts(out, i, folded, lambda finding, shown: (
            f"(set to a CUDA image by a CI build argument too, reported once here: "
            f"`{results[i].relpath}` {shown}, `{finding.source}`)"))
    return out


def fold_into_hosts(out: list, i: int, folded: list, note) -> None:
    """Fold each (finding of file i, (j, k)) of `folded` into finding k of file j of `out` (in place):
    the host's message gets `note(finding, "line 3" / "lines 3, 7")`, the folded finding leaves
    file i (public: helmvalues32.py folds a chart's values into its template the same way)."""
    for finding, (j, k) in folded:
        host = out[j].findings[k]
        lines_shown = sorted(set(_places(finding)))
        shown = ("line " if len(lines_shown) == 1 else "lines ") + ", ".join(map(str, lines_shown))
        findings = list(out[j].findings)
        findings[k] = dataclasses.replace(host, message=f"{host.message} {note(finding, shown)}")
        out[j] = dataclasses.replace(out[j], findings=findings)
    if folded:
        gone = {id(f) for f, _h in folded}
        out[i] = dataclasses.replace(out[i], findings=[f for f in out[i].findings if id(f) not in gone])


def _host(results, index, lines_of, lines, finding, i) -> Optional[tuple[int, int]]:
    """(result, finding index) of the Dockerfile finding that covers `finding`, or None."""
    target = None
    spans, others = [], []
    places = {finding.line: finding.source, **{line: source for line, _c, source in finding.also}}
    for line, source in sorted(places.items()):
        if not 0 < line <= len(lines):
            return None
        # (an image names a repository, `nvidia/cuda:...`; `NCCL_VERSION=2.32.3` is gates16's fold)
        args = _image_args(lines, line) if "/" in (source or "") else []
        if not args:
            if _ARG.search(lines[line - 1]) is None:
                return None  # (neither an image argument nor a build argument of the command)
            others.append(line)
        for name, at in args:
            first, last = _command(lines, at)
            path = _dockerfile(lines, first, last)
            if path is None or target not in (None, (path, name)):
                return None
            target = (path, name)
            spans.append((first, last))
    if any(not any(first <= line <= last for first, last in spans) for line in others):
        return None  # (a build argument of another command)
    if target is None:
        return None
    j = index.get(target[0])
    if j is None or j == i:
        return None
    declared = re.compile(r"^\s*ARG\s+" + re.escape(target[1]) + r"\b")
    docker = lines_of(j)
    for k, host in enumerate(results[j].findings):
        if _open(host) and _RANK[host.severity] >= _RANK[finding.severity] and any(
                0 < n <= len(docker) and declared.match(docker[n - 1]) for n in _places(host)):
            return j, k
    return None


# public for buildargs34.py (a CI build argument's variable note folded the same way)
BUILD_ARG = _ARG
dockerfile_of = _dockerfile
command_of = _command
open_image_finding = _open
places_of = _places
