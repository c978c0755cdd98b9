"""A CUDA variable a CI command only passes to a Dockerfile of the run that reports it already
(issue #16, round-33 audit HC#11; helper h193). Whole run, from runplan.whole_run_passes (right after
dockerargs29.py, whose image fold this one follows).

    # .buildkite/image_build/image_build_torch_nightly.sh
    docker buildx build --file docker/Dockerfile \\
      --build-arg CUDA_VERSION="${NIGHTLY_CUDA_VERSION}" \\          # NPU703 info
      --build-arg FINAL_BASE_IMAGE="${NIGHTLY_FINAL_BASE_IMAGE}" \\  # (dockerargs29: folded)
      --push --target test .

    # docker/Dockerfile
    ARG CUDA_VERSION=13.0.3                                          # a place of the NPU707 error
    ARG FINAL_BASE_IMAGE=nvidia/cuda:${CUDA_VERSION}-base-ubuntu${UBUNTU_VERSION}

The build argument only sets the Dockerfile's own `ARG CUDA_VERSION`, which the run reports there
as a place of that Dockerfile's CUDA image finding (NPU707, which lists the variable): the CI
script builds vLLM's CUDA image, and its variable is ported, if at all, with that image (one root
cause). The CI finding folds into the Dockerfile's (dockerargs29.fold_into_hosts: the host's
message names the file and its lines); nothing is dropped.

Exact: an NPU703 finding of a file that is not Python, every place of it a `--build-arg NAME=...`
line for the variable the finding names, in one command naming its Dockerfile (`-f`, `--file`)
that is a file of the run holding an open NPU707 error or warning with a place on its `ARG NAME`
line. Kept (the nearest true cases): the variable exported or used by the script itself (`export
CUDA_VERSION=...`, a `pip install ...cu${CUDA_VERSION}`), a build argument of a command whose
Dockerfile is outside the run or does not declare the ARG among its reported places.
"""

from __future__ import annotations

import re
from typing import Optional

from . import dockerargs29

CODE = "NPU703"
_NAMED = re.compile(r"`(\w+)`")


def _open(finding) -> bool:
    from .moot import is_moot, named

    return finding.code == CODE and not finding.fixable and finding.cell is None \
        and not is_moot(finding) and not named(finding)


def _host(results, index, lines_of, lines: list[str], finding, i: int) -> Optional[tuple[int, int]]:
    named = _NAMED.search(finding.message)
    if named is None:
        return None
    name = named.group(1)
    target = None
    for line in dockerargs29.places_of(finding):
        if not 0 < line <= len(lines):
            return None
        match = dockerargs29.BUILD_ARG.search(lines[line - 1])
        if match is None or match.group(1) != name:
            return None
        first, last = dockerargs29.command_of(lines, line)
        path = dockerargs29.dockerfile_of(lines, first, last)
        if path is None or target not in (None, path):
            return None
        target = path
    j = index.get(target) if target else None
    if j is None or j == i:
        return None
    declared = re.compile(r"^\s*ARG\s+" + re.escape(name) + r"\b")
    docker = lines_of(j)
    for k, host in enumerate(results[j].findings):
        if dockerargs29.open_image_finding(host) and any(
                0 < n <= len(docker) and declared.match(docker[n - 1]) for n in dockerargs29.places_of(host)):
            return j, k
    return None


def review(results: list, paths: dict) -> list:
    """The results, with each CI variable note of the docstring's shape folded into its Dockerfile's."""
    from .modpaths import result_bytes

    ci = [i for i, r in enumerate(results) if not r.relpath.endswith(".py") and any(_open(f) for f in r.findings)]
    if not ci:
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
            if _open(finding):
                host = _host(results, index, lines_of, lines, finding, i)
                if host is not None:
                    folded.append((finding, host))
        dockerargs29.fold_into_hosts(out, i, folded, lambda finding, shown: (
            f"(its `{_NAMED.search(finding.message).group(1)}` also set by a CI build argument, reported once here: "
            f"`{results[i].relpath}` {shown})"))
    return out
