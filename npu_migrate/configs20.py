"""Scripts and configs written for another vendor's hardware (issue #16, round 20).

textfiles.py reports NCCL/CUDA variables, `nvidia-smi` and the like wherever a script or config
names them; run.rocm_reason leaves alone files in a folder named `rocm`/`hip`/`amd` (or ending in
`-rocm`) and files named for ROCm. Round-20 audits found two more shapes that an NPU host never
reads. This module holds the first:

* **An AMD/ROCm CI or launch script** (`vendor_script_reason`, shell scripts and Dockerfiles; audit
  BC#1: a cluster script under `.buildkite/amd-disagg/` that sets RCCL's `NCCL_*` variables for
  Pensando NICs). The script is recognised by its name (a folder or file name with a word `amd`,
  `rocm` or `hip` between `-`/`_`/`.`: `amd-disagg/`, `run_amd.sh`) or by its code (comments
  aside): a call of `rocm-smi`/`amd-smi`/`rocminfo`/`hipcc`/`hipify`, a ROCm variable
  (`HIP_VISIBLE_DEVICES`, `ROCR_VISIBLE_DEVICES`, `HSA_*`, `RCCL_*`, `MIOPEN_*`, `PYTORCH_ROCM_ARCH`),
  an AMD GPU architecture (`gfx950`), `/opt/rocm` or a `rocm/...` container image. Its `NCCL_*`
  variables are RCCL's. A script that also names NVIDIA-only tooling in code (`nvidia-smi`, `nvcc`,
  `nvidia/cuda` images, `--gpus`, `CUDA_HOME`, `/usr/local/cuda`, `NVIDIA_VISIBLE_DEVICES`,
  `nvidia.com/gpu`) serves both vendors and keeps its findings; so does a script with a ROCm word
  only in a comment. The whole file is a named skipped scope, as a ROCm folder's files are; a
  file with no finding is left as scanned. Called from textfiles.scan_text_file.

The second, a YAML deployment profile pinned to other hardware (audit BE#5, a recipe preset with `hardware:
gb200` and an `env:` of NCCL switches) is the same kind of scope; it needs the YAML structure, so
its rule is yamlscopes.pinned_profiles.
"""

from __future__ import annotations

import re
from typing import Optional

# ------------------------------------------------------------------------------------------------
# AMD/ROCm scripts

_NAME_WORD = re.compile(r"(?i)(^|[-_.])(amd|rocm|hip)([-_.]|$)")
_ROCM_CODE = re.compile(
    r"\b(rocm-smi|amd-smi|rocminfo|hipcc|hipify(-perl|-clang)?|HIP_VISIBLE_DEVICES|ROCR_VISIBLE_DEVICES"
    r"|HSA_[A-Z0-9_]+|RCCL_[A-Z0-9_]+|MIOPEN_[A-Z0-9_]+|PYTORCH_ROCM_ARCH|gfx\d{3,4}[a-z]?)\b"
    r"|/opt/rocm\b|(^|[\s\"'=])rocm/[\w.-]+")
_NVIDIA_CODE = re.compile(
    r"nvidia-smi|\bnvcc\b|nvidia/cuda|nvcr\.io/nvidia|nvidia\.com/gpu|\bNVIDIA_VISIBLE_DEVICES\b"
    r"|--gpus\b|--runtime[= ]nvidia|\bCUDA_HOME\b|/usr/local/cuda")
_SCRIPT_KINDS = ("shell", "dockerfile")


def vendor_script_reason(relpath: str, kind: str, code: str) -> Optional[str]:
    """Why a shell script or Dockerfile written for AMD GPUs is left alone, or None. `code` is the
    file with its comments blanked (textfiles' lexer)."""
    if kind not in _SCRIPT_KINDS:
        return None
    if _NVIDIA_CODE.search(code):
        return None
    parts = relpath.replace("\\", "/").split("/")
    name = parts[-1]
    stem = name.rsplit(".", 1)[0] if "." in name[1:] and kind == "shell" else name
    named = next((p for p in parts[:-1] if _NAME_WORD.search(p)), None) or (stem if _NAME_WORD.search(stem) else None)
    if named is not None:
        return f"an AMD/ROCm script (named for AMD/ROCm: `{named}`; no NVIDIA-only tooling in its code)"
    match = _ROCM_CODE.search(code)
    if match is not None:
        line = code.count("\n", 0, match.start()) + 1
        return (f"an AMD/ROCm script (it uses `{match.group(0).strip(chr(34) + chr(39) + '= ')}` at line {line}; "
                f"no NVIDIA-only tooling in its code)")
    return None
