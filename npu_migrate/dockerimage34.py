"""A CUDA image's own build arguments naming `cuda`, folded into its base-image finding (issue #16,
round-33 audit HB#23). Per file, from run.migrate_file right after redundant.fold_into_base_image.

vLLM's `docker/Dockerfile`:

    ARG FINAL_BASE_IMAGE=nvidia/cuda:${CUDA_VERSION}-base-ubuntu${UBUNTU_VERSION}   # NPU707 (line 47)
    ...
    ARG vllm_target_device="cuda"                                                    # NPU706 (line 438)
    ENV VLLM_TARGET_DEVICE=${vllm_target_device}

The argument selects what the CUDA image builds (vLLM's setup.py knows cuda/rocm/xpu/cpu/tpu/empty;
an Ascend build is another image, `empty` plus vllm-ascend's), so "the NPU device is `npu`" is no fix
for it: it is a part of the CUDA image's port, which the NPU707 finding asks for as a whole. An
NPU706's places on an `ARG` or `ENV` instruction of a Dockerfile whose NPU707 finding stands are
folded into that finding (a merged NPU706 is split; its other places stay one finding) (folding.absorb: its lines listed, "with `cuda` as the device
its `ARG`/`ENV` lines build for").

Kept (the nearest true cases): the same `ARG` in a Dockerfile without a CUDA base image (an image
an NPU host may build), and a `cuda` device on a `RUN` or `CMD` line (a command the image runs).
"""

from __future__ import annotations

from .findings import Finding, merge_per_file, split_merged
from .folding import absorb, may_absorb, ours

_IMAGE = "NPU707"
_DEVICE = "NPU706"
_INSTRUCTIONS = ("ARG", "ENV")


def _instruction(lines: list[str], line: int) -> str:
    """The instruction word of the Dockerfile instruction holding 1-based `line` (continuations
    followed back over lines ending in a backslash)."""
    index = line - 1
    while 0 < index <= len(lines) and lines[index - 1].rstrip().endswith("\\"):
        index -= 1
    text = lines[index].strip() if 0 <= index < len(lines) else ""
    return text.split(None, 1)[0].upper() if text else ""


def fold_build_args(findings: list[Finding], text: str) -> list[Finding]:
    """The NPU706 findings on `ARG`/`ENV` lines of a Dockerfile with a CUDA base image (NPU707),
    folded into that image's finding (see the module's doc)."""
    image = next((f for f in sorted(findings) if f.code == _IMAGE and ours(f)), None)
    if image is None or not any(f.code == _DEVICE for f in findings):
        return findings
    lines = text.splitlines()
    parts, rest, changed = [], [], False
    for finding in findings:
        if finding.code != _DEVICE or not ours(finding) or not may_absorb(image, finding):
            rest.append(finding)
            continue
        # (a merged finding is split: its `RUN` places stay one finding of their own)
        pieces = split_merged(finding)
        args = [p for p in pieces if _instruction(lines, p.line) in _INSTRUCTIONS]
        others = [p for p in pieces if p not in args]
        if not args:
            rest.append(finding)
            continue
        changed = True
        parts.extend(args)
        rest.extend(merge_per_file(others) if others else [])
    if not changed:
        return findings
    kept = absorb(image, parts, name_them="as the device its `ARG`/`ENV` lines build for")
    return sorted(kept if f is image else f for f in rest)
