"""Issue #16, precision: platform and capability predicates an NPU host answers False.

- A selection check (`is_supported`, `_supports_current_device`) whose `if`s an NPU host never
  takes (`if current_platform.is_xpu(): return True, None`) fall through to `return False,
  reason`, or that is one conjunction false there (`return p.is_cuda() and ...`), keeps the
  class's instance methods off that host; a subclass of the same file that does not define the
  check again inherits it (npu_migrate/capability.py).

Each test also keeps a nearby true case reported. Fixtures are written for these tests.
"""

from __future__ import annotations

from pathlib import Path

from .precision_helpers import migrate_json, moot_lines, write_project


def _run(tmp_path: Path, files: dict, path: str, code: str) -> tuple[dict[int, str], dict[int, str], dict]:
    """({line: severity} of `code`'s findings, {line: reason} of its named scopes) of `path`."""
    report = migrate_json(write_project(tmp_path, files))
    found = {}
    for f in report["findings"]:
        if f["path"] == path and f["code"] == code:
            found[f["line"]] = f["severity"]
            for line, _column, _source in f.get("also", ()):
                found[line] = f["severity"]
    return found, moot_lines(report["skipped"], code, path), report


def _line(text: str, needle: str, nth: int = 0) -> int:
    return [i for i, line in enumerate(text.splitlines(), 1) if needle in line][nth]


FALL_THROUGH = '''\
import torch

from vendor.platforms import current_platform


class ScaledMmKernel:
    @classmethod
    def is_supported(cls, compute_capability=None):
        if current_platform.is_xpu():
            return True, None
        if current_platform.is_cuda() and current_platform.has_device_capability(90):
            return True, None
        return False, "requires XPU or CUDA sm_90"

    def apply(self, a, b, scale):
        return torch._scaled_mm(a, b, scale_a=scale, scale_b=scale)


class AnyDeviceKernel:
    @classmethod
    def is_supported(cls, compute_capability=None):
        if current_platform.is_xpu():
            return True, None
        return True, None

    def apply(self, a, b, scale):
        return torch._scaled_mm(a, b, scale_a=scale, scale_b=scale)
'''


def test_is_supported_falling_through_untaken_platform_ifs_to_false_is_a_scope(tmp_path):
    found, moot, _ = _run(tmp_path, {"pkg/mod.py": FALL_THROUGH}, "pkg/mod.py", "NPU913")
    gated = _line(FALL_THROUGH, "torch._scaled_mm", 0)
    kept = _line(FALL_THROUGH, "torch._scaled_mm", 1)
    assert gated in moot and gated not in found
    assert "ScaledMmKernel.is_supported` answers False on an NPU host" in moot[gated]
    # the class whose check answers True keeps its error
    assert found.get(kept) == "error" and kept not in moot


INHERITED = '''\
import torch

from vendor.platforms import current_platform


class ExpertsBase:
    @staticmethod
    def _supports_current_device() -> bool:
        """Blackwell only."""
        p = current_platform
        return (
            p.is_cuda()
            and p.is_device_capability_family(100)
        )


class ExpertsModular(ExpertsBase):
    def apply(self, x):
        import flash_kernels_cuda
        return flash_kernels_cuda.run(x)


class ExpertsOwnCheck(ExpertsBase):
    @staticmethod
    def _supports_current_device() -> bool:
        return True

    def apply(self, x):
        import flash_kernels_cuda
        return flash_kernels_cuda.run(x)
'''


def test_subclass_inherits_a_conjunction_check_false_on_npu(tmp_path):
    report = migrate_json(write_project(tmp_path, {"pkg/mod.py": INHERITED}))
    gated = _line(INHERITED, "import flash_kernels_cuda", 0)
    kept = _line(INHERITED, "import flash_kernels_cuda", 1)
    moot = moot_lines(report["skipped"], None, "pkg/mod.py")
    lines = {}
    for f in report["findings"]:
        if f["path"] == "pkg/mod.py" and not f["fixable"]:
            lines[f["line"]] = f["severity"]
            for line, _c, _s in f.get("also", ()):
                lines[line] = f["severity"]
    assert gated in moot and gated not in lines, (moot, lines)
    assert "ExpertsModular` inherits `ExpertsBase._supports_current_device`" in moot[gated]
    # the subclass that answers its own check keeps its finding
    assert kept in lines and lines[kept] != "info" and kept not in moot


SHORT_CIRCUIT = '''\
import torch
from packaging import version


def pick(data):
    if data.device.type == "cpu" or (
        (data.device.type == "cuda" and torch.version.cuda)
        and version.parse(torch.version.cuda).release >= (12, 1)
    ):
        return "tinygemm"
    return "generic"


def runtime():
    return version.parse(torch.version.cuda).release
'''


def test_operands_after_an_and_operand_none_on_npu_are_never_evaluated(tmp_path):
    report = migrate_json(write_project(tmp_path, {"pkg/mod.py": SHORT_CIRCUIT}))
    skipped = _line(SHORT_CIRCUIT, "and version.parse(torch.version.cuda)")
    kept = _line(SHORT_CIRCUIT, "return version.parse(torch.version.cuda)")
    moot = moot_lines(report["skipped"], None, "pkg/mod.py")
    lines = {}
    for f in report["findings"]:
        if f["path"] == "pkg/mod.py" and not f["fixable"] and f["code"] == "NPU990":
            lines[f["line"]] = f["severity"]
    assert skipped in moot and skipped not in lines, (moot, lines)
    assert "the rest of its `and` is never evaluated" in moot[skipped]
    # an unguarded read keeps its warning
    assert lines.get(kept) in ("warning", "error") and kept not in moot


NPU_ACCELERATOR = '''\
class NPU_Accelerator:
    def is_triton_supported(self):
        return False
'''

KERNELS = '''\
import triton
import triton.language as tl


@triton.jit
def _scale_kernel(x_ptr, n, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    tl.store(x_ptr + pid, tl.load(x_ptr + pid) * 2)
'''

USE_ACCELERATOR = '''\
from accelerator import get_accelerator
from pkg.utils import is_triton_available_for_the_kernels

if get_accelerator().is_triton_supported() and is_triton_available_for_the_kernels():
    from pkg.fp8_triton import _scale_kernel
else:
    _scale_kernel = None
'''

USE_HAS_TRITON = '''\
from pkg.utils import HAS_TRITON

if HAS_TRITON:
    from pkg.other_triton import _scale_kernel
else:
    _scale_kernel = None
'''


def test_triton_supported_false_in_the_npu_accelerator_makes_the_module_a_scope(tmp_path):
    report = migrate_json(write_project(tmp_path, {
        "accelerator/__init__.py": "def get_accelerator():\n    return None\n",
        "accelerator/npu_accelerator.py": NPU_ACCELERATOR,
        "pkg/__init__.py": "", "pkg/utils.py": "HAS_TRITON = True\n\n\ndef is_triton_available_for_the_kernels():\n    return HAS_TRITON\n",
        "pkg/fp8_triton.py": KERNELS, "pkg/other_triton.py": KERNELS.replace("* 2", "* 3"),
        "pkg/use.py": USE_ACCELERATOR, "pkg/use2.py": USE_HAS_TRITON}))
    gated = moot_lines(report["skipped"], "NPU910", "pkg/fp8_triton.py")
    assert 1 in gated and "NPU accelerator answers False" in gated[1], report["skipped"]
    assert "accelerator/npu_accelerator.py:3" in gated[1]
    assert not [f for f in report["findings"] if f["path"] == "pkg/fp8_triton.py" and f["code"] == "NPU910"]
    # behind `HAS_TRITON` (Triton-Ascend may install triton): still the info that asks to verify
    other = [f for f in report["findings"] if f["path"] == "pkg/other_triton.py" and f["code"] == "NPU910"]
    assert other and "verify them" in other[0]["message"], (other, [s for s in report["skipped"] if "other" in s.get("path", "")])


PROJECT_PREDICATE = '''\
import torch


def is_cuda():
    return torch.cuda.is_available() and torch.version.cuda
'''

PREDICATE_USER = '''\
import torch

from pkg.platform import is_cuda

_is_cuda = is_cuda()


def used_memory():
    if is_cuda():
        return torch.cuda.device_memory_used()
    return 0


def used_memory_flag():
    if _is_cuda:
        return torch.cuda.device_memory_used()
    return 0
'''

UNGUARDED_USER = '''\
import torch

from pkg.platform import is_cuda


def used_memory_anyway():
    return torch.cuda.device_memory_used()
'''


def test_a_branch_behind_the_projects_own_cuda_predicate_is_a_scope(tmp_path):
    report = migrate_json(write_project(tmp_path, {
        "pkg/__init__.py": "", "pkg/platform.py": PROJECT_PREDICATE, "pkg/user.py": PREDICATE_USER,
        "pkg/other.py": UNGUARDED_USER}))
    called = _line(PREDICATE_USER, "torch.cuda.device_memory_used()", 0)
    flagged = _line(PREDICATE_USER, "torch.cuda.device_memory_used()", 1)
    kept = _line(UNGUARDED_USER, "torch.cuda.device_memory_used()")
    moot = moot_lines(report["skipped"], None, "pkg/user.py")
    assert called in moot and flagged in moot, report["skipped"]
    assert "the project's `is_cuda()` is false or None there" in moot[called]
    assert not [f for f in report["findings"] if f["path"] == "pkg/user.py" and f["code"] == "NPU202"]
    # the unguarded call keeps its error
    other = [f for f in report["findings"] if f["path"] == "pkg/other.py" and f["code"] == "NPU202"]
    assert [(f["line"], f["severity"]) for f in other] == [(kept, "error")]


REQUIREMENT_SKIPS = '''\
import pytest
import torch
from packaging import version


def test_pack(device):
    if device.type == "cuda":
        if torch.version.hip:
            pytest.skip(reason="not on ROCm")
        if version.parse(torch.version.cuda).release < (12, 1):
            pytest.skip(reason="CUDA runtime must be at least 12.1")
        if torch.cuda.get_device_capability()[0] < 8:
            pytest.skip(reason="sm80 needed")
    t = torch.ones(4).to(device)
    assert t.sum() == 4


def test_other(device):
    if device.type == "cuda":
        if version.parse(torch.version.cuda).release < (12, 1):
            pytest.skip(reason="CUDA runtime must be at least 12.1")
        if not_ready():
            pytest.skip(reason="project condition")
    t = torch.ones(4).to(device)
    assert t.sum() == 4
'''


def test_a_cuda_branch_that_only_skips_on_cuda_build_requirements_runs_as_written(tmp_path):
    report = migrate_json(write_project(tmp_path, {"tests/test_pack.py": REQUIREMENT_SKIPS}))
    gated = _line(REQUIREMENT_SKIPS, 'if device.type == "cuda":', 0)
    kept = _line(REQUIREMENT_SKIPS, 'if device.type == "cuda":', 1)
    findings = {f["line"]: f for f in report["findings"] if f["path"] == "tests/test_pack.py" and f["code"] == "NPU110"}
    scopes = [s for s in report["skipped"] if s.get("path") == "tests/test_pack.py"
              and s.get("start_line", 0) <= gated <= s.get("end_line", 0) and "NPU110" in s["reason"]]
    assert gated not in findings and scopes, (findings, report["skipped"])
    assert "CUDA build requirements" in scopes[0]["reason"]
    # a branch that also skips on the project's own condition keeps its warning
    assert kept in findings and findings[kept]["severity"] == "warning", findings


WARMUP = '''\
"""Warm up the CUDA kernels."""
import torch

from vendor.platforms import current_platform


def warmup(runner, enabled):
    if enabled is False:
        return
    elif current_platform.has_device_capability(90):
        autotune(runner)


def autotune(runner):
    from flashinfer.autotuner import AutoTuner
    return AutoTuner(runner)
'''


def test_a_public_helper_called_only_under_a_false_capability_test_is_a_scope(tmp_path):
    report = migrate_json(write_project(tmp_path, {
        "pkg/__init__.py": "", "pkg/warmup.py": WARMUP, "pkg/warmup2.py": WARMUP.replace("autotune", "tune"),
        "pkg/other.py": "from pkg.warmup2 import tune\n\n\ndef go(r):\n    return tune(r)\n",
        "tests/test_warmup.py": "from pkg.warmup import autotune\n\n\ndef test_it():\n    autotune(None)\n"}))
    gated = _line(WARMUP, "from flashinfer.autotuner import AutoTuner", 0)
    moot = moot_lines(report["skipped"], None, "pkg/warmup.py")
    assert gated in moot and "`autotune` is called only under" in moot[gated], report["skipped"]
    # the same helper that another runtime module calls keeps its error
    found = [f for f in report["findings"] if f["path"] == "pkg/warmup2.py" and f["code"] == "NPU911"]
    assert [(f["line"], f["severity"]) for f in found] == [(gated, "error")], found


FP8_UTILS = '''\
import torch


def quantize_fp8(w):
    return (w / w.abs().amax()).to(torch.float8_e4m3fn)
'''

ROCM_ONLY_MOE = '''\
import torch

from pkg.platform import is_hip
from pkg.fp8_utils import quantize_fp8

_is_hip = is_hip()


class RocmOnlyMoEMethod:
    def __init__(self, config):
        self.config = config
        if not _is_hip:
            raise NotImplementedError("only supported on AMD GPUs")

    def process_weights(self, layer):
        layer.weight = quantize_fp8(layer.weight)
'''


def test_a_helper_module_only_a_class_that_raises_off_rocm_uses_is_a_scope(tmp_path):
    plain = ROCM_ONLY_MOE.replace("pkg.fp8_utils", "pkg.fp8_utils2").replace(
        "        if not _is_hip:\n            raise NotImplementedError(\"only supported on AMD GPUs\")\n", "")
    report = migrate_json(write_project(tmp_path, {
        "pkg/__init__.py": "",
        "pkg/platform.py": "import torch\n\n\ndef is_hip():\n    return torch.version.hip is not None\n",
        "pkg/fp8_utils.py": FP8_UTILS, "pkg/fp8_utils2.py": FP8_UTILS.replace("amax()", "amax(dim=0)"),
        "pkg/moe.py": ROCM_ONLY_MOE, "pkg/moe2.py": plain}))
    line = _line(FP8_UTILS, "torch.float8_e4m3fn")
    moot = moot_lines(report["skipped"], None, "pkg/fp8_utils.py")
    assert line in moot and "RocmOnlyMoEMethod.__init__` raises on an NPU host" in moot[line], report["skipped"]
    # the same helper used by a class without the gate keeps its error
    kept = [f for f in report["findings"] if f["path"] == "pkg/fp8_utils2.py" and f["code"] == "NPU913"]
    assert [(f["line"], f["severity"]) for f in kept] == [(line, "error")], kept
