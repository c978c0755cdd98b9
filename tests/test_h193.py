"""Round-33 audit rows HB#7 .. HC#20 (issue #16, helper h193): same-file shapes, repeats and labels.
Each false or repeated case beside the nearest true case (same shape, reached on an NPU host) that
stays reported."""

from __future__ import annotations

from .precision_helpers import migrate_json, write_project

# ----------------------------------------------------------------------------- HB#7 (tritonfirst34.py)
_KERNELS = """\
import torch
import triton
import triton.language as tl


@triton.jit
def _fill_kernel(out_ptr, n: tl.constexpr):
    tl.store(out_ptr + tl.arange(0, n), 0)


def fill(out):
    _fill_kernel[(1,)](out, out.numel())
    return out
"""

_PERMUTE = """\
import torch
import triton
import triton.language as tl

from .kernels import fill


@triton.jit
def _permute_kernel(x_ptr, n: tl.constexpr):
    tl.store(x_ptr + tl.arange(0, n), 1)


def permute(x):
    _permute_kernel[(1,)](x, x.numel())
    return fill(x)
"""

_SKIPPED_TEST = """\
import pytest
import torch

from kit.utils import is_sm_at_least_100

if not (torch.cuda.is_available() and is_sm_at_least_100()):
    pytest.skip("needs SM100", allow_module_level=True)

from kit.ep.kernels import fill


def test_fill():
    assert fill(torch.zeros(4, device="cuda")).sum() == 0
"""

_UTILS = """\
import torch


def is_sm_at_least_100():
    return torch.cuda.is_available() and torch.cuda.get_device_capability() >= (10, 0)
"""

# the importer loads the module before its own `import triton`: the module fails first
_PERMUTE_FIRST = _PERMUTE.replace("import triton\nimport triton.language as tl\n\nfrom .kernels import fill\n",
                                  "from .kernels import fill\nimport triton\nimport triton.language as tl\n")

# a second library importer with no Triton import of its own
_PLAIN_USER = """\
import torch

from kit.ep.kernels import fill


def zeros(n):
    return fill(torch.empty(n))
"""


def _open(report: dict, path: str, code: str) -> list[dict]:
    return [f for f in report["findings"] if f["path"] == path and f["code"] == code and not f["fixable"]]


def _project(tmp_path, permute: str, extra: dict | None = None) -> dict:
    files = {"kit/__init__.py": "", "kit/utils.py": _UTILS, "kit/ep/__init__.py": "",
             "kit/ep/kernels.py": _KERNELS, "kit/ep/permute.py": permute,
             "tests/test_kernels.py": _SKIPPED_TEST, **(extra or {})}
    return migrate_json(write_project(tmp_path, files))


def test_triton_module_loaded_only_after_its_importers_import_folds(tmp_path):
    """HB#7: kernels.py is imported by permute.py right after permute.py's own unguarded `import
    triton` (and by a test module skipped at module level on an NPU host): its NPU910 error folds
    into permute.py's, which names it and its lines."""
    report = _project(tmp_path, _PERMUTE)
    assert not _open(report, "kit/ep/kernels.py", "NPU910")
    carrier = _open(report, "kit/ep/permute.py", "NPU910")
    assert len(carrier) == 1 and carrier[0]["severity"] == "error"
    assert "also covers `kit/ep/kernels.py`" in carrier[0]["message"]
    assert "lines 2, 3" in carrier[0]["message"]


def test_triton_module_imported_before_the_importers_own_import_stays(tmp_path):
    """Nearest true case: the importer loads the module before its own `import triton` (the module
    is the first to fail), or another library module imports it without Triton: kept."""
    report = _project(tmp_path, _PERMUTE_FIRST)
    kept = _open(report, "kit/ep/kernels.py", "NPU910")
    assert kept and kept[0]["severity"] == "error"
    report = _project(tmp_path / "second", _PERMUTE, {"kit/zeros.py": _PLAIN_USER})
    kept = _open(report, "kit/ep/kernels.py", "NPU910")
    assert kept and kept[0]["severity"] == "error"
    assert "also covers" not in _open(report, "kit/ep/permute.py", "NPU910")[0]["message"]


# ----------------------------------------------------------------------------- HB#16 (fp64tests34.py)
_SYNC_TESTS = """\
import torch


def _h2d_converting():
    torch.zeros(4, dtype=torch.float64).to("cuda", non_blocking=True)


def _d2h_converting():
    torch.zeros(4).copy_(torch.zeros(4, dtype=torch.float64, device="cuda"), non_blocking=True)


def test_async_transfers_pass():
    for fn in (_h2d_converting, _d2h_converting):
        fn()
"""

# the second helper is also the whole float64 work of another test: that test's only finding
_SHARED_HELPER = _SYNC_TESTS + """

def test_d2h_alone():
    _d2h_converting()
"""


def test_second_fp64_of_one_test_folds_into_the_first(tmp_path):
    """HB#16: two helpers, each with float64 on the device, run only by one test: one NPU930
    finding for the test, listing the other line."""
    report = migrate_json(write_project(tmp_path, {"tests/test_sync.py": _SYNC_TESTS}))
    found = _open(report, "tests/test_sync.py", "NPU930")
    assert len(found) == 1 and found[0]["severity"] == "warning"
    assert found[0]["line"] == 5 and "(also at line 9)" in found[0]["message"]
    assert "in the same test `test_async_transfers_pass`" in found[0]["message"]


def test_fp64_of_a_helper_two_tests_run_stays(tmp_path):
    """Nearest true case: the second helper is run by another test too (there it is that test's
    only float64): both findings stay."""
    report = migrate_json(write_project(tmp_path, {"tests/test_sync.py": _SHARED_HELPER}))
    found = _open(report, "tests/test_sync.py", "NPU930")
    assert sorted(f["line"] for f in found) == [5, 9]
    assert all(f["severity"] == "warning" for f in found)


# ----------------------------------------------------------------------------- HC#20 (pinned33.py)
_PINNED_PARAMS = """\
from unittest.mock import patch

import pytest

from kit.platforms import current_platform
from kit.profiler import validate


@pytest.mark.parametrize(("device_type", "activities"), [("cuda", ["XPU"]), ("cpu", ["CUDA"])])
def test_rejects_unsupported_activities(device_type, activities):
    with patch.object(current_platform, "device_type", device_type):
        with pytest.raises(ValueError):
            validate(activities)


@pytest.mark.parametrize("device_type", ["cpu", "xpu"])
def test_rejects_on_other_devices(device_type):
    with patch.object(current_platform, "device_type", device_type):
        with pytest.raises(ValueError):
            validate(["CPU"], device="cuda:1")
"""

_PLATFORM = """\
class _Platform:
    device_type = "cuda"


current_platform = _Platform()
"""

_PROFILER = """\
from kit.platforms import current_platform


def validate(activities, device=None):
    if current_platform.device_type not in ("cuda", "xpu"):
        raise ValueError("unsupported")
    return activities, device
"""


def test_parametrized_cuda_pin_is_a_pinned_scope(tmp_path):
    """HC#20: `patch.object(current_platform, "device_type", device_type)` with a parametrize table
    setting `device_type` to "cuda" pins the platform as a literal pin does: the table's "cuda" is a
    mock value (a named pinned scope). Nearest true case: a test whose table pins only "cpu"/"xpu"
    keeps its own CUDA string reported."""
    report = migrate_json(write_project(tmp_path, {"kit/__init__.py": "", "kit/platforms.py": _PLATFORM,
                                                   "kit/profiler.py": _PROFILER,
                                                   "tests/test_profiler.py": _PINNED_PARAMS}))
    places = set()
    for f in _open(report, "tests/test_profiler.py", "NPU990") + _open(report, "tests/test_profiler.py", "NPU102"):
        if f["severity"] != "info":
            places |= {f["line"], *(a[0] for a in f.get("also") or ())}
    assert 9 not in places  # ("cuda" in the pinned table: left as written, named)
    scoped = [s for s in report["skipped"] if s["path"] == "tests/test_profiler.py"
              and "pins the platform's device type to CUDA" in s["reason"]]
    assert any(s["start_line"] <= 9 <= s["end_line"] for s in scoped)
    assert not any(s["start_line"] <= 20 <= s["end_line"] for s in scoped)
    assert 20 in places or any(f["line"] == 20 and f["fixable"] for f in report["findings"]
                               if f["path"] == "tests/test_profiler.py")


# ----------------------------------------------------------------------------- HB#28 (labelfallback34.py)
_ATTENTION = """\
from torch import nn

from kit.flash import is_fa_version_supported

_fa3_available = is_fa_version_supported(3)
_fa2_available = is_fa_version_supported(2)


class Eager(nn.Module):
    pass


class FlashAttention3(nn.Module):
    pass


CLASSES = {
    "eager": Eager,
    "flash_attention_3": FlashAttention3,
}


def resolve(attn_implementation):
    if attn_implementation == "flash_attention_3" and not _fa3_available:
        attn_implementation = "flash_attention_2"
    if attn_implementation == "flash_attention_2" and not _fa2_available:
        attn_implementation = "eager"
    return attn_implementation


def build(attn_implementation, config):
    attn_implementation = resolve(attn_implementation)
    if attn_implementation not in CLASSES:
        raise ValueError(sorted(CLASSES))
    return CLASSES[attn_implementation](config)
"""

# the table is also looked up without the resolver: "flash_attention_3" selects FA3 as written
_DIRECT = _ATTENTION + """

def build_unchecked(attn_implementation, config):
    return CLASSES[attn_implementation](config)
"""

_FLASH = """\
def is_fa_version_supported(version):
    return False
"""


def test_label_the_file_falls_back_from_is_read_as_written(tmp_path):
    """HB#28: "flash_attention_3" is a key of the file's class table and the label its resolver
    maps to FA2/eager where `_fa3_available` is false; the table is looked up only after the
    resolver: a named "runs as written" scope."""
    report = migrate_json(write_project(tmp_path, {"kit/__init__.py": "", "kit/flash.py": _FLASH,
                                                   "kit/attention.py": _ATTENTION}))
    assert not [f for f in _open(report, "kit/attention.py", "NPU990") if f["severity"] != "info"]
    assert any("falls back from where the implementation is missing" in s["reason"]
               and s["start_line"] <= 19 <= s["end_line"] for s in report["skipped"] if s["path"] == "kit/attention.py")


def test_label_of_a_table_looked_up_without_the_fallback_stays(tmp_path):
    """Nearest true case: another function subscripts the table with the caller's label as
    given, so "flash_attention_3" selects the FA3 class on an NPU host: kept."""
    report = migrate_json(write_project(tmp_path, {"kit/__init__.py": "", "kit/flash.py": _FLASH,
                                                   "kit/attention.py": _DIRECT}))
    kept = [f for f in _open(report, "kit/attention.py", "NPU990") if f["severity"] == "warning"]
    assert kept and kept[0]["line"] == 19


# ----------------------------------------------------------------------------- HC#1 (removedmembers34.py)
_BACKEND_TESTS = """\
import pytest
import torch

BACKENDS_TO_TEST = ["FLASH_ATTN", "FLASHINFER", "TRITON_ATTN"]

try:
    import {package}  # noqa: F401
except ImportError:
    BACKENDS_TO_TEST.remove("FLASHINFER")


@pytest.mark.skipif("FLASHINFER" not in BACKENDS_TO_TEST, reason="FlashInfer is not available.")
def test_fp8_scale():
    q = torch.ones(4, device="cuda").to(torch.float8_e4m3fn)
    assert q.float().sum() == 4
"""


def test_skip_on_a_member_the_file_drops_without_flashinfer_is_a_scope(tmp_path):
    """HC#1: the file removes "FLASHINFER" from its backend list where `import flashinfer` fails
    (an NPU host): `skipif("FLASHINFER" not in BACKENDS_TO_TEST)` skips the test there, so its FP8
    is a named "not run" scope."""
    text = _BACKEND_TESTS.replace("{package}", "flashinfer")
    report = migrate_json(write_project(tmp_path, {"tests/test_backends.py": text}))
    assert not [f for f in _open(report, "tests/test_backends.py", "NPU913") if f["severity"] != "info"]
    assert any(s["start_line"] <= 14 <= s["end_line"] and "not in BACKENDS_TO_TEST" in s["reason"]
               for s in report["skipped"] if s["path"] == "tests/test_backends.py")


def test_skip_on_a_member_dropped_without_a_package_npu_hosts_may_have_stays(tmp_path):
    """Nearest true case: the member is dropped where `triton` is missing, which an NPU host may
    have (triton-ascend): the test may run there, its FP8 stays an error."""
    text = _BACKEND_TESTS.replace("{package}", "triton")
    report = migrate_json(write_project(tmp_path, {"tests/test_backends.py": text}))
    kept = _open(report, "tests/test_backends.py", "NPU913")
    assert kept and kept[0]["severity"] == "error" and kept[0]["line"] == 14


# ----------------------------------------------------------------------------- HC#11 (buildargs34.py)
_DOCKERFILE = """\
ARG CUDA_VERSION=12.8.1
ARG UBUNTU_VERSION=22.04
FROM nvidia/cuda:${CUDA_VERSION}-devel-ubuntu${UBUNTU_VERSION} AS build
ENV TORCH_CUDA_ARCH_LIST="8.0 9.0"
RUN pip install --index-url https://download.pytorch.org/whl/cu$(echo $CUDA_VERSION | cut -d. -f1,2 | tr -d '.') torch
"""

_CI_BUILD = """\
#!/bin/bash
set -euo pipefail
NIGHTLY_CUDA_VERSION="13.0.2"
docker buildx build --file docker/Dockerfile \\
  --build-arg max_jobs=16 \\
  --build-arg CUDA_VERSION="${NIGHTLY_CUDA_VERSION}" \\
  --tag "$IMAGE_TAG" \\
  --push .
"""

# the script itself uses the variable too: its own CUDA wheel index, beside the build argument
_CI_BUILD_AND_USE = _CI_BUILD + """\
export CUDA_VERSION="${NIGHTLY_CUDA_VERSION}"
pip install --index-url "https://download.pytorch.org/whl/cu${CUDA_VERSION//./}" torch
"""


def test_ci_build_argument_of_a_reported_dockerfile_arg_folds(tmp_path):
    """HC#11: `--build-arg CUDA_VERSION=...` of a `docker buildx build --file docker/Dockerfile`
    only sets that Dockerfile's `ARG CUDA_VERSION`, a place of its reported CUDA image: the NPU703
    note folds into the Dockerfile's NPU707, which names the script and line."""
    report = migrate_json(write_project(tmp_path, {"docker/Dockerfile": _DOCKERFILE,
                                                   ".buildkite/build_nightly.sh": _CI_BUILD}))
    assert not _open(report, ".buildkite/build_nightly.sh", "NPU703")
    host = _open(report, "docker/Dockerfile", "NPU707")
    assert host and "`.buildkite/build_nightly.sh` line 6" in host[0]["message"]


def test_ci_variable_the_script_uses_itself_stays(tmp_path):
    """Nearest true case: the script also exports the variable and installs from a CUDA wheel
    index with it: its note stays."""
    report = migrate_json(write_project(tmp_path, {"docker/Dockerfile": _DOCKERFILE,
                                                   ".buildkite/build_nightly.sh": _CI_BUILD_AND_USE}))
    kept = _open(report, ".buildkite/build_nightly.sh", "NPU703")
    assert kept
    assert "build_nightly.sh` line" not in _open(report, "docker/Dockerfile", "NPU707")[0]["message"]


# ----------------------------------------------------------------------------- HC#18 (singlepins34.py)
_RUN_SH = """\
#!/bin/bash
rm -rf local_storage
VLLM_ENABLE_V1_MULTIPROCESSING=0 CUDA_VISIBLE_DEVICES=0 python3 prefill_example.py
VLLM_ENABLE_V1_MULTIPROCESSING=0 CUDA_VISIBLE_DEVICES=0 python3 decode_example.py --simulate-failure
cmp -s prefill_output.txt decode_output.txt
"""

_EXAMPLE = """\
import torch


def main():
    x = torch.ones(4, device="cuda")
    print(x.sum())


if __name__ == "__main__":
    main()
"""

# the same pins, but the two runs are servers started at once on device 0 and device 1
_SERVERS_SH = _RUN_SH.replace("python3 prefill_example.py", "python3 prefill_example.py &").replace(
    "CUDA_VISIBLE_DEVICES=0 python3 decode_example.py", "CUDA_VISIBLE_DEVICES=1 python3 decode_example.py")


def test_device_zero_pins_of_single_device_runs_have_no_effect(tmp_path):
    """HC#18: each pinned command runs a one-device example of the run in the foreground with
    `CUDA_VISIBLE_DEVICES=0`: an NPU host ignores it and uses device 0 anyway (a named scope)."""
    files = {"examples/offline/run.sh": _RUN_SH, "examples/offline/prefill_example.py": _EXAMPLE,
             "examples/offline/decode_example.py": _EXAMPLE}
    report = migrate_json(write_project(tmp_path, files))
    assert not [f for f in _open(report, "examples/offline/run.sh", "NPU701") if f["severity"] != "info"]
    assert any("a pin to device 0 of single-device runs" in s["reason"]
               for s in report["skipped"] if s["path"] == "examples/offline/run.sh")


def test_pins_separating_processes_stay(tmp_path):
    """Nearest true case: a backgrounded run on device 0 and another on device 1 run at once, the
    pins separate them: kept as a warning."""
    files = {"examples/offline/run.sh": _SERVERS_SH, "examples/offline/prefill_example.py": _EXAMPLE,
             "examples/offline/decode_example.py": _EXAMPLE}
    report = migrate_json(write_project(tmp_path, files))
    kept = _open(report, "examples/offline/run.sh", "NPU701")
    assert kept and kept[0]["severity"] == "warning"
