"""Issue #16, precision: rewrites that would widen a CUDA-only gate (DESIGN.md invariants 1, 4).

A device check, availability check, device list or device default one step away from CUDA-only
code keeps meaning CUDA and is reported (NPU110) instead of rewritten (npu_migrate/rewrite_gates.py).
Each test writes a small fixture of its own, asserts that the widening rewrite is gone (NPU110
with its reason) and that a nearby plain case is still rewritten.
"""

from __future__ import annotations

from npu_migrate import catalogue
from npu_migrate.engine import migrate_source
from npu_migrate.model import Options

ENABLED = catalogue.enabled_codes()


def _run(text: str, relpath: str = "pkg/mod.py"):
    result = migrate_source(text.encode(), relpath, Options(enabled=ENABLED))
    return result.findings, (result.new or result.original).decode()


def _codes(findings, line: int) -> dict[str, str]:
    return {f.code: f.message for f in findings if f.line == line}


# ----------------------------------------------------------------------------- 1. Triton predicates
TRITON_PREDICATE = '''\
import torch
from transformers.utils import is_triton_available

_TRITON_AVAILABLE = is_triton_available()


def _use_triton(device: torch.device) -> bool:
    return _TRITON_AVAILABLE and device.type in ("cuda", "xpu")


def _use_cuda_kernel(device: torch.device) -> bool:
    return device.type in ("cuda", "xpu")


def on_gpu(device: torch.device) -> bool:
    return device.type in ("cuda", "xpu")
'''


def test_device_list_choosing_a_triton_path_does_not_gain_npu():
    findings, new = _run(TRITON_PREDICATE)
    assert 'return _TRITON_AVAILABLE and device.type in ("cuda", "xpu")' in new
    assert "NPU105" not in _codes(findings, 8) and "Triton path" in _codes(findings, 8)["NPU110"]
    assert "NPU105" not in _codes(findings, 12) and "NPU110" in _codes(findings, 12)
    # a device list that chooses nothing CUDA-only still gains "npu"
    assert "NPU105" in _codes(findings, 16)
    assert 'return device.type in ("cuda", "npu", "xpu")' in new


# ----------------------------------------------------------------------------- 2. "cuda" labels of tests
PARAMETRIZED = '''\
import pytest
import torch


@pytest.fixture(params=["cpu", "cuda"])
def device(request):
    device = request.param
    if device == "cuda" and not torch.cuda.is_available():
        pytest.skip("requires CUDA")
    return device


@pytest.mark.parametrize("device", ["cpu", "cuda"])
def test_sum(device):
    if device == "cuda" and not torch.cuda.is_available():
        pytest.skip("requires CUDA")
    assert torch.ones(2, device=device).sum() == 2


def test_plain():
    if not torch.cuda.is_available():
        pytest.skip("needs an accelerator")
    assert torch.ones(2, device="cuda").sum() == 2
'''


def test_availability_check_of_a_test_parametrized_with_cuda_stays():
    findings, new = _run(PARAMETRIZED, "tests/test_mod.py")
    for line in (8, 15):
        codes = _codes(findings, line)
        assert "NPU201" not in codes and 'parametrized with the label "cuda"' in codes["NPU110"]
    assert new.count('if device == "cuda" and not torch.cuda.is_available():') == 2
    # a test that is not parametrized with the label is still migrated
    assert "NPU201" in _codes(findings, 21) and "NPU102" in _codes(findings, 23)
    assert "if not npu_compat.is_available():" in new


# ----------------------------------------------------------------------------- 3. CUDA extensions
EXTENSION = '''\
import os

import torch


class _CudaExtension:
    def is_available(self) -> bool:
        try:
            return torch.cuda.is_available() or bool(os.environ.get("FORCE_CUDA", 0))
        except Exception:
            return False

    def assert_compatible(self) -> None:
        from torch.utils.cpp_extension import CUDA_HOME

        if not CUDA_HOME:
            raise AssertionError("CUDA_HOME is not found")


def sources():
    if torch.cuda.is_available():
        return ["kernel.cu", "binding.cpp"]
    return ["binding.cpp"]


class Runner:
    def available(self) -> bool:
        return torch.cuda.is_available()
'''


def test_availability_of_a_cuda_extension_stays_cuda():
    findings, new = _run(EXTENSION)
    assert "NPU201" not in _codes(findings, 9) and "builds or loads CUDA extensions" in _codes(findings, 9)["NPU110"]
    assert "NPU201" not in _codes(findings, 21) and "NPU110" in _codes(findings, 21)
    assert "return torch.cuda.is_available() or bool(" in new
    # a class that builds nothing still asks for the accelerator
    assert "NPU201" in _codes(findings, 28)
    assert "return npu_compat.is_available()" in new


# ----------------------------------------------------------------------------- 4. guards that add "cuda"
LABEL_GUARDS = '''\
import torch

devices = ["cpu"]
if torch.cuda.is_available():
    devices += ["cuda"]

_devices = ["cpu"]
_devices += ["cuda"] if torch.cuda.is_available() else []

names = []
if torch.cuda.is_available():
    names.append("cuda")

if torch.cuda.is_available():
    device = "cuda"
else:
    device = "cpu"
'''


def test_guard_adding_a_kept_cuda_label_stays():
    findings, new = _run(LABEL_GUARDS)
    for line in (4, 8, 11):
        codes = _codes(findings, line)
        assert "NPU201" not in codes and 'adding the label "cuda"' in codes["NPU110"], line
    assert new.count("torch.cuda.is_available()") == 3
    # a guard whose "cuda" is rewritten too is migrated as a whole
    assert "NPU201" in _codes(findings, 14) and "NPU102" in _codes(findings, 15)
    assert "if npu_compat.is_available():\n    device = npu_compat.device_type()" in new


# ----------------------------------------------------------------------------- 5. raise unless CUDA
RAISING_CLASS = '''\
from typing import Optional

import torch


class Linear8bit(torch.nn.Linear):
    def __init__(self, *args, device=None, **kwargs):
        super().__init__(*args, device=device, **kwargs)
        if torch.tensor(0, device=device).device.type == "cuda":
            self.quantize_()

    def quantize_(self, weight=None, device=None):
        if weight is None:
            weight = self.weight.data
        self.weight = self.quantize(weight, device)

    @staticmethod
    def quantize(weight, device: Optional[torch.device]):
        device = device or torch.device("cuda")
        if device.type != "cuda":
            raise RuntimeError(f"Unexpected device type: {device.type}")
        import bitsandbytes as bnb

        return bnb.functional.quantize_4bit(weight.to(device))


def place(weight, device=None):
    device = device or torch.device("cuda")
    if device.type == "cuda":
        weight = weight.pin_memory()
    return weight.to(device)
'''


def test_defaults_and_callers_of_a_method_that_raises_unless_cuda_stay():
    findings, new = _run(RAISING_CLASS)
    assert "NPU110" in _codes(findings, 20)  # the check itself (bitsandbytes after it)
    assert "NPU102" not in _codes(findings, 19) and "`quantize` raises unless" in _codes(findings, 19)["NPU110"]
    assert "NPU104" not in _codes(findings, 9) and "it guards `quantize_()`" in _codes(findings, 9)["NPU110"]
    assert 'device = device or torch.device("cuda")\n        if device.type != "cuda":' in new
    assert 'if torch.tensor(0, device=device).device.type == "cuda":' in new
    # a function without such a check is migrated
    assert "NPU102" in _codes(findings, 28) and "NPU104" in _codes(findings, 29)
    assert "device = device or npu_compat.device()\n    if npu_compat.is_accelerator_type(device.type):" in new


# ----------------------------------------------------------------------------- 6. checks in front of kernels
KERNEL_CHECKS = '''\
import torch
import triton
import triton.language as tl


@triton.jit
def _kernel(x_ptr):
    pass


def assert_supported(rows: torch.Tensor) -> None:
    if rows.device.type != "cuda":
        raise RuntimeError("the fused restore runs CUDA kernels; leave it unset to run here")
    if rows.dim() != 2:
        raise RuntimeError("rows must be 2-D")


def quantize(x):
    assert x.is_cuda, "Input tensor must be CUDA"
    return _kernel[(1,)](x)
'''

PLAIN_CHECKS = '''\
import torch


def check(rows: torch.Tensor) -> None:
    if rows.device.type != "cuda":
        raise RuntimeError("rows must be on the accelerator")
    return rows * 2


def scale(x):
    assert x.is_cuda, "Input tensor must be CUDA"
    return x * 2
'''


def test_checks_that_fail_unless_cuda_in_a_kernel_module_stay():
    findings, new = _run(KERNEL_CHECKS)
    assert "NPU104" not in _codes(findings, 12) and "fails unless the device is CUDA" in _codes(findings, 12)["NPU110"]
    assert "NPU106" not in _codes(findings, 19) and "NPU110" in _codes(findings, 19)
    assert 'if rows.device.type != "cuda":' in new and "assert x.is_cuda," in new
    # the same checks in a module without CUDA kernels still mean the accelerator
    findings, new = _run(PLAIN_CHECKS)
    assert "NPU104" in _codes(findings, 5) and "NPU106" in _codes(findings, 11)
    assert "assert npu_compat.on_accelerator(x)" in new


BACKENDS = '''\
import torch

if torch.cuda.is_available():
    from .backends.cuda import ops as cuda_ops

if torch.cuda.is_available():
    from .backends.default import ops as default_ops
'''


def test_availability_check_importing_the_projects_cuda_backend_stays():
    findings, new = _run(BACKENDS, "pkg/__init__.py")
    assert "NPU201" not in _codes(findings, 3) and "imports `.backends.cuda.ops`" in _codes(findings, 3)["NPU110"]
    assert "NPU201" in _codes(findings, 6)
    assert new.count("torch.cuda.is_available()") == 1


PARAMETRIZE_VALUES = '''\
import pytest
import torch


@pytest.mark.parametrize(
    "device_bs",
    [("cpu", 512)] + ([("cuda", 4096), ("cuda", 1)] if torch.cuda.is_available() else []),
)
def test_overhead(device_bs):
    assert device_bs


@pytest.mark.parametrize("n", [1, 2] if torch.cuda.is_available() else [1])
def test_sizes(n):
    assert n
'''


def test_parametrize_values_with_cuda_labels_keep_their_availability_check():
    findings, new = _run(PARAMETRIZE_VALUES, "tests/test_mod.py")
    assert "NPU201" not in _codes(findings, 7) and 'adding the label "cuda"' in _codes(findings, 7)["NPU110"]
    assert '[("cuda", 4096), ("cuda", 1)] if torch.cuda.is_available() else []' in new
    assert "NPU201" in _codes(findings, 13)


def test_kept_skip_of_a_cuda_labelled_test_is_information(tmp_path):
    from .precision_helpers import migrate_json, moot_lines, write_project

    report = migrate_json(write_project(tmp_path, {"tests/test_mod.py": PARAMETRIZED}))
    findings = [f for f in report["findings"] if f["path"] == "tests/test_mod.py"]
    # the skips left meaning CUDA only keep skipping the CUDA case on an NPU host: information
    # (a named skipped scope: the test never runs on an NPU host, moot.py)
    assert not [f for f in findings if f["line"] == 8 and f["code"] == "NPU110"]
    # (one scope for the statement: the NPU110 of the kept check and the NPU108 of its "cuda" label)
    assert "keeps being skipped on an NPU host" in moot_lines(report["skipped"], None, "tests/test_mod.py")[8]
    assert not [f for f in findings if f["code"] == "NPU110" and f["severity"] != "info"]
    # the plain test is still migrated
    assert [f for f in findings if f["line"] == 21 and f["code"] == "NPU201" and f["fixable"]]


def test_kept_label_guards_are_information_and_kernel_module_checks_fold_into_the_kernel():
    """As the run reports them (run.migrate_file, after the per-file folds): a kept guard adding
    "cuda" to a list of devices to test is information (on an NPU host the other entries run, as
    on any machine without CUDA), and a check that fails unless CUDA in a Triton module is one
    of the places of the module's Triton finding, not a warning of its own."""
    from npu_migrate.run import migrate_file

    labels = migrate_file(LABEL_GUARDS.encode(), "tests/test_mod.py", Options(enabled=ENABLED)).findings
    kept = [f for f in labels if f.code == "NPU110"]
    assert kept and {f.severity for f in kept} == {"info"}
    assert all("add an NPU entry" in f.message for f in kept)
    kernel = migrate_file(KERNEL_CHECKS.encode(), "pkg/mod.py", Options(enabled=ENABLED)).findings
    assert not [f for f in kernel if f.code == "NPU110"]
    triton = [f for f in kernel if f.code == "NPU910"]
    assert triton and triton[0].severity == "error"
    assert {12, 19} <= {line for line, _column, _source in triton[0].also}
    # in a module without kernels the checks are still rewritten (nothing to fold into)
    plain = migrate_file(PLAIN_CHECKS.encode(), "pkg/plain.py", Options(enabled=ENABLED)).findings
    assert {"NPU104", "NPU106"} <= {f.code for f in plain}


KEPT_IN_A_NAME = '''\
import torch

try:
    import triton
    _TRITON_AVAILABLE = True
except ImportError:
    _TRITON_AVAILABLE = False


def triton_backend_available() -> bool:
    return _TRITON_AVAILABLE


def resolve(backend: str, logits: torch.Tensor) -> str:
    on_cuda = logits.device.type == "cuda"
    if backend == "auto":
        return "triton" if on_cuda and triton_backend_available() else "torch"
    return backend


def place(x: torch.Tensor) -> bool:
    on_cuda = x.device.type == "cuda"
    return on_cuda and x.numel() > 0
'''


def test_a_check_kept_in_a_name_that_chooses_triton_stays():
    """DeepSpeed's chunked cross-entropy: `on_cuda = logits.device.type == "cuda"`, then
    `"triton" if on_cuda and triton_backend_available() else "torch"`. Widened, an NPU host with
    Triton-Ascend took the CUDA Triton kernels where the original took plain torch."""
    findings, new = _run(KEPT_IN_A_NAME)
    assert "NPU104" not in _codes(findings, 15) and "kept in `on_cuda`" in _codes(findings, 15)["NPU110"]
    assert 'on_cuda = logits.device.type == "cuda"' in new
    # the same name used for anything else still means the accelerator
    assert "NPU104" in _codes(findings, 22)


PRIVATE_CUDA_API = '''\
import torch


class Recipe:
    def setup(self, cfg):
        if self._device.type == "cuda" and cfg.profile_memory:
            torch.cuda.memory._record_memory_history(max_entries=100000)
        if self._device.type == "cuda":
            torch.cuda.empty_cache()
'''


def test_a_check_in_front_of_a_private_cuda_api_the_tool_leaves_stays():
    """torchtune's recipes: `if self._device.type == "cuda" ...: torch.cuda.memory.
    _record_memory_history(...)`. Widened, an NPU host called the CUDA allocator API the tool
    leaves as written (NPU202); kept, the branch is CUDA's and its finding folds into the check.
    The check in front of a call the shim forwards (`empty_cache`) is still widened."""
    from npu_migrate.run import migrate_file

    result = migrate_file(PRIVATE_CUDA_API.encode(), "recipes/r.py", Options(enabled=ENABLED))
    new = result.new.decode()
    assert 'if self._device.type == "cuda" and cfg.profile_memory:' in new
    kept = [f for f in result.findings if f.code == "NPU110"]
    assert kept and kept[0].line == 6 and "_record_memory_history" in kept[0].message
    assert 7 in {line for line, _column, _source in kept[0].also}  # the NPU202, folded into it
    assert not [f for f in result.findings if f.code == "NPU202"]
    assert "npu_compat.is_accelerator_type(self._device.type)" in new and "npu_compat.empty_cache()" in new
