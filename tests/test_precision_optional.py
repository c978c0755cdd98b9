"""Issue #16, precision on real projects: labels, conditions false on an NPU host, guarded
optional imports.

Shapes found false or redundant by the audit of the ecosystem check, each reproduced with a small
fixture next to a true case that must still be reported:
- capability declarations (`SUPPORTED_DEVICES = {"cuda"}` in an op's class), lookups by label in a
  table keyed by platform (`DEVICE_BACKENDS["cuda"]` next to a "rocm" key), an op's name passed to
  a report function (`_report_implicit_sync("cuda", ...)`), and the name of a CPU op
  (`"_scaled_dot_product_flash_attention_for_cpu"`) are not devices: no NPU990;
- NPU110 on a condition an NPU host never takes for another reason (`elif torch.version.hip and
  ... torch.cuda.is_available()`): not reported; in front of a Triton kernel the file reports
  (NPU910): folded into it;
- an optional import under an availability test read only by `isinstance` checks: info;
- code after an early return an NPU host always takes (`if not has_flashinfer(): return False`):
  info;
- tests decorated `@require_cuda_or_xpu` (skipped on an NPU host): info.
"""

from __future__ import annotations

from pathlib import Path

from .precision_helpers import migrate_json, moot_lines, write_project


def _migrate(tmp_path: Path, files: dict[str, str]) -> list[dict]:
    report = migrate_json(write_project(tmp_path, files))
    _LAST_SKIPPED[:] = report["skipped"]
    return report["findings"]


_LAST_SKIPPED: list[dict] = []  # the `skipped` list of the last _migrate run


def _moot(path: str) -> dict[int, str]:
    """{line: reason} of the last run's findings about code an NPU host never runs in `path`."""
    return moot_lines(_LAST_SKIPPED, None, path)


def _at(findings: list[dict], path: str, line: int, code: str | None = None) -> list[dict]:
    """The findings at a line, or listed in another finding's `also` of that line."""
    return [f for f in findings if f["path"] == path and (code is None or f["code"] == code)
            and (f["line"] == line or any(a[0] == line for a in f.get("also") or ()))]


# ---------------------------------------------------------------------------- labels (NPU990)

OPS = '''\
import torch


class FlashOp:
    SUPPORTED_DEVICES = {"cuda"}
    SUPPORTED_DTYPES = {torch.half}


class TypedOp:
    SUPPORTED_DEVICES: set = {"cuda", "rocm"}


class Other:
    default_device = "cuda"
'''


def test_capability_declaration_is_not_a_device(tmp_path):
    findings = _migrate(tmp_path, {"ops.py": OPS})
    assert not _at(findings, "ops.py", 5), _at(findings, "ops.py", 5)
    assert not _at(findings, "ops.py", 10), _at(findings, "ops.py", 10)
    # a class attribute that is not a capability declaration still names a device
    assert _at(findings, "ops.py", 14, "NPU990") or _at(findings, "ops.py", 14), findings


TABLE = '''\
BACKENDS = {
    "cuda": ["FLASH_ATTN"],
    "rocm": ["TRITON_ATTN"],
}
OTHER = {"cpu": 1}

skip_if_not_cuda = not BACKENDS["cuda"]
DEFAULT = OTHER["cuda"]
'''


def test_lookup_in_a_table_keyed_by_platform(tmp_path):
    findings = _migrate(tmp_path, {"utils.py": TABLE})
    assert not _at(findings, "utils.py", 7), _at(findings, "utils.py", 7)
    # the same lookup in a table that is not keyed by platform labels is still reported
    assert _at(findings, "utils.py", 8, "NPU990"), findings


REPORTS = '''\
import torch


def _report_implicit_sync(op, kind, reason):
    print(op, kind, reason)


def check(x):
    _report_implicit_sync("cuda", "H2D", "pinned")
    _compute("cuda")
'''


def test_op_name_passed_to_a_report_function_is_prose(tmp_path):
    findings = _migrate(tmp_path, {"debug.py": REPORTS})
    assert not _at(findings, "debug.py", 9), _at(findings, "debug.py", 9)
    assert _at(findings, "debug.py", 10), findings


ATTENTION_OPS = '''\
NAMES = (
    "_scaled_dot_product_flash_attention",
    "_scaled_dot_product_efficient_attention",
    "_scaled_dot_product_flash_attention_for_cpu",
)
'''


def test_cpu_op_name_is_not_flash_attention(tmp_path):
    findings = _migrate(tmp_path, {"ckpt.py": ATTENTION_OPS})
    assert not _at(findings, "ckpt.py", 4), _at(findings, "ckpt.py", 4)
    assert _at(findings, "ckpt.py", 2, "NPU990"), findings


# ---------------------------------------------------------------------------- NPU110 false on NPU

SETUP = '''\
import os
import subprocess

import torch


def build():
    if torch.version.cuda and torch.cuda.is_available():
        subprocess.run(["nvcc", "--version"])
    elif (
        torch.version.hip
        and os.getenv("CK", "1") == "1"
        and torch.cuda.is_available()
    ):
        subprocess.run(["nvcc", "--version"])
    if os.getenv("BUILD") == "1" and torch.cuda.is_available():
        nvcc = subprocess.run(["nvcc", "--version"])
    return nvcc
'''


def test_check_in_a_condition_false_on_npu_is_not_reported(tmp_path):
    findings = _migrate(tmp_path, {"setup.py": SETUP})
    assert not _at(findings, "setup.py", 13, "NPU110"), findings
    # the same check in a condition an NPU host may take is still reported (its branch binds what
    # the code after it reads: not a fallback, npu_migrate/keptgates.py)
    assert _at(findings, "setup.py", 16, "NPU110"), findings


KERNEL = '''\
import torch
import triton
import triton.language as tl


@triton.jit
def _add_kernel(x_ptr, n):
    tl.store(x_ptr, tl.load(x_ptr))


def add(x: torch.Tensor):
    if not x.is_cuda:
        raise ValueError("x must be a CUDA tensor")
    _add_kernel[(1,)](x, x.numel())
'''


def test_check_in_front_of_a_reported_triton_kernel_folds_into_it(tmp_path):
    findings = _migrate(tmp_path, {"kernels.py": KERNEL})
    assert not [f for f in findings if f["code"] == "NPU110" and f["path"] == "kernels.py"], findings
    # the kernel is still reported, its check listed with it
    triton = [f for f in findings if f["code"] == "NPU910" and f["path"] == "kernels.py"]
    assert triton and any(12 in (a[0] for a in f.get("also") or ()) for f in triton), triton


# ---------------------------------------------------------------------------- optional imports (NPU914)

TUNER = '''\
import torch

from .utils import is_bnb_available


def create_module(target):
    if is_bnb_available():
        import bitsandbytes as bnb
    if isinstance(target, bnb.nn.Linear8bitLt):
        return "8bit"
    return "plain"


def quantize(layer):
    if is_bnb_available():
        import bitsandbytes as bnb
    return bnb.nn.Linear8bitLt(layer.in_features, layer.out_features)


def optimizer_kind(optimizer):
    if is_bnb_available(min_version="0.38.0"):
        from bitsandbytes.optim import Lion, Lion32bit

        if isinstance(optimizer, (Lion, Lion32bit)):
            return "lion"
    return "other"
'''


def test_optional_import_used_for_type_checks_is_a_skipped_scope(tmp_path):
    # (a probe that may answer True on an NPU host: a stub returning False would be read as a flag
    # false there, and the import as one an NPU host never runs: flagreads20.py)
    utils = 'import importlib.util\n\n\ndef is_bnb_available():\n    return importlib.util.find_spec("bitsandbytes") is not None\n'
    findings = _migrate(tmp_path, {"pkg/tuner.py": TUNER, "pkg/utils.py": utils, "pkg/__init__.py": ""})
    for line in (8, 22):
        # nothing of the package runs on an NPU host: a named skipped scope (moot.py), no finding
        found = [f for f in _at(findings, "pkg/tuner.py", line, "NPU914") if f["line"] == line]
        assert not found, (line, findings)
        assert "type checks" in _moot("pkg/tuner.py")[line], _LAST_SKIPPED
    # constructing a bitsandbytes class runs on its pure-torch default kernels there (no 8-bit
    # optimizer in the file): still reported, a warning (optionalguards.review_bitsandbytes)
    kept = [f for f in _at(findings, "pkg/tuner.py", 16, "NPU914") if f["severity"] == "warning"]
    assert kept, findings


# ---------------------------------------------------------------------------- early returns

EARLY_RETURN = '''\
import torch


def has_flashinfer():
    return False


def supports_mla():
    """Whether FlashInfer's MLA is there."""
    if not has_flashinfer():
        return False
    try:
        from flashinfer.mla import Wrapper
    except ImportError:
        return False
    return Wrapper.run(torch.zeros(1)) is not None


def supports_mla_unguarded():
    try:
        from flashinfer.mla import Wrapper
    except ImportError:
        raise RuntimeError("FlashInfer is required")
    return Wrapper.run(torch.zeros(1)) is not None


DEVICE = torch.device("cuda")
'''


def test_code_after_an_early_return_taken_on_npu_is_info(tmp_path):
    findings = _migrate(tmp_path, {"fi.py": EARLY_RETURN})
    assert not [f for f in findings if f["path"] == "fi.py" and f["line"] == 13], findings
    assert "has_flashinfer()" in _moot("fi.py")[13], _LAST_SKIPPED
    # the same import without the early return (and without a fallback) is still an error
    assert [f for f in _at(findings, "fi.py", 21) if f["severity"] == "error"], findings


# ---------------------------------------------------------------------------- tests skipped off CUDA

QUANT_TEST = '''\
import unittest

from accelerate.test_utils import require_bnb, require_cuda_or_xpu, require_non_cpu


@require_cuda_or_xpu
@require_bnb
class Int8Test(unittest.TestCase):
    def test_memory(self):
        from bitsandbytes.nn import Int8Params

        self.assertTrue(Int8Params)


@require_non_cpu
class AnyAcceleratorTest(unittest.TestCase):
    def test_memory(self):
        from bitsandbytes.nn import Int8Params

        self.assertTrue(Int8Params)
'''


def test_test_class_decorated_to_skip_off_cuda_is_info(tmp_path):
    findings = _migrate(tmp_path, {"tests/test_quant.py": QUANT_TEST})
    assert not [f for f in findings if f["path"] == "tests/test_quant.py" and f["line"] == 10], findings
    assert "require_cuda_or_xpu" in _moot("tests/test_quant.py")[10], _LAST_SKIPPED
    # a test that runs on any accelerator (the NPU included) stays reported: information in a test
    # file (round 9: Int8Params runs on bitsandbytes' pure-torch default kernels there, and a test
    # asks for no port work; optionalguards.review_bitsandbytes), a warning in library code
    assert [f for f in _at(findings, "tests/test_quant.py", 18)
            if f["severity"] == "info" and "in a test file" in f["message"]], findings


DISPATCH = '''\
import torch
from torch.utils._python_dispatch import TorchDispatchMode


class Profile(TorchDispatchMode):
    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        random = torch.Tag.nondeterministic_seeded in func.tags
        if func.overloadpacket.__name__ == "_scaled_dot_product_flash_attention":
            random = (kwargs or {}).get("dropout_p", 0) != 0
        return func(*args, **(kwargs or {})), random


KERNEL = "_scaled_dot_product_flash_attention"
'''


def test_string_compared_with_a_dispatched_ops_name_is_an_op_name(tmp_path):
    """xformers' checkpoint profiler compares `func.overloadpacket.__name__` with an aten op's
    name (round 19 BB#13 judged it false, round 15 true: on an NPU host the op has another name
    and the code takes the op's own tag): information saying so; the same name bound for no such
    comparison stays a warning."""
    findings = _migrate(tmp_path, {"ckpt.py": DISPATCH})
    compared = _at(findings, "ckpt.py", 8)
    assert [f["severity"] for f in compared] == ["info"], compared
    assert "another op" in compared[0]["message"], compared
    assert [f["severity"] for f in _at(findings, "ckpt.py", 13, "NPU990")] == ["warning"], findings
