"""Round-13/14 audits (issue #16): gates read from another file or that decide nothing on an NPU
host (npu_migrate/gates15.py, callersonly.py). Each test writes a small project of its own, checks
that the false finding is gone (not reported, or a named skipped scope with its reason) and that a
nearby true case stays reported."""

from __future__ import annotations

from .precision_helpers import findings_at as _findings
from .precision_helpers import migrate_json, write_project
from .precision_helpers import scopes_at as _scopes

_REASONS = '''\
import torch


class Op:
    @classmethod
    def not_supported_reasons(cls, d):
        reasons = []
        device_type = d.device.type
        if d.dtype is torch.bfloat16 and (not device_type.startswith("cuda") or d.old):
            reasons.append("bf16 is only supported on A100+ GPUs")
        return reasons


def pick(d):
    if not d.device.type.startswith("cuda"):
        return "cpu"
    return d.device
'''


def test_cuda_test_that_only_records_a_reason_is_not_reported(tmp_path):
    """AL#18: a "cuda" test whose body only appends a reason to the list of why a CUDA op does not
    apply decides nothing on an NPU host: not reported; a "cuda" test that picks the device to
    run on stays reported."""
    report = migrate_json(write_project(tmp_path, {"pkg/ops.py": _REASONS}))
    found = _findings(report, "pkg/ops.py", "NPU990")
    assert 9 not in found
    assert 15 in found and found[15]["severity"] != "info"


_LAUNCH = '''\
import torch


def _launch_config(device, numel):
    props = torch.cuda.get_device_properties(device)
    blocks = props.multi_processor_count * props.max_threads_per_multi_processor // 1024
    return min(numel, blocks)


def _plain_config(device):
    props = torch.cuda.get_device_properties(device)
    return props.warp_size


def reorder_for_cutlass(x):
    grid = _launch_config(x.device, x.numel())
    return x, grid


def plain_grid(x):
    return _plain_config(x.device)
'''

_CUTLASS_MOE = '''\
import torch
from sgl_kernel import silu_and_mul

from pkg.kernels import reorder_for_cutlass


def cutlass_moe(x):
    y, grid = reorder_for_cutlass(x)
    return silu_and_mul(y)
'''

_USER = '''\
from pkg.kernels import plain_grid


def run(x):
    return plain_grid(x)
'''


def test_device_property_helper_called_only_from_a_module_that_fails_to_import(tmp_path):
    """AL#33: a launch-config helper reading a CUDA device property, reached only through a
    helper that a module importing a compiled package with no NPU build (`sgl_kernel`, unguarded)
    calls: a named scope naming the callers, because that failing import is itself reported
    (NPU911; callersonly asks for it, so that no module is left without a finding). A helper with
    one plain caller stays reported, with a message that says the field is missing or empty
    (torch_npu binds it, it may be 0)."""
    report = migrate_json(write_project(tmp_path, {"pkg/__init__.py": "", "pkg/kernels.py": _LAUNCH,
                                                   "pkg/cutlass_moe.py": _CUTLASS_MOE, "pkg/user.py": _USER}))
    failing = _findings(report, "pkg/cutlass_moe.py", "NPU911")
    assert 2 in failing and failing[2]["severity"] == "error" and "sgl_kernel" in failing[2]["message"]
    found = _findings(report, "pkg/kernels.py", "NPU931")
    assert 6 not in found
    reason = _scopes(report, "pkg/kernels.py", "NPU931")[6]
    assert "called only from code an NPU host does not run" in reason and "sgl_kernel" in reason
    assert 12 in found and found[12]["severity"] == "error"
    assert "missing or empty on NPU" in found[12]["message"] and "does not exist" not in found[12]["message"]


_ABSTRACT = '''\
import abc
from abc import ABC


class DeepSpeedAccelerator(ABC):
    def prefer_triton_grouped_mm(self):
        return False

    def prefer_fast_kernel(self):
        return False

    @abc.abstractmethod
    def device_name(self, index=None):
        ...
'''

_NPU_ACCEL = '''\
from .abstract_accelerator import DeepSpeedAccelerator


class NPU_Accelerator(DeepSpeedAccelerator):
    def device_name(self, index=None):
        return "npu"

    def prefer_fast_kernel(self):
        return True
'''

_KERNEL = '''\
import torch

try:
    import triton
    import triton.language as tl
    HAS_TRITON = True
except ImportError:
    HAS_TRITON = False

if HAS_TRITON:

    @triton.jit
    def _{name}_kernel(x_ptr, n, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        tl.store(x_ptr + offs, tl.load(x_ptr + offs, mask=offs < n) * 2, mask=offs < n)


def {name}(x):
    _{name}_kernel[(triton.cdiv(x.numel(), 128),)](x, x.numel(), BLOCK=128)
    return x
'''

_OPS_INIT = '''\
from .gemm_triton import grouped_gemm
from .fast_triton import fast_op

__all__ = ["grouped_gemm", "fast_op"]
'''

_EXPERTS = '''\
import torch
from torch import nn

from pkg.accelerator import get_accelerator
from pkg.ops.fast_triton import fast_op


def _run_triton_grouped(x):
    from pkg.ops.gemm_triton import grouped_gemm
    return grouped_gemm(x)


class Experts(nn.Module):
    def __init__(self, use_grouped_mm=True):
        super().__init__()
        self.use_triton = False
        if use_grouped_mm:
            self.use_triton = get_accelerator().prefer_triton_grouped_mm()
        self.use_fast = get_accelerator().prefer_fast_kernel()

    def forward(self, x):
        if self.use_triton:
            return _run_triton_grouped(x)
        if self.use_fast:
            return fast_op(x)
        return x * 2
'''


def test_triton_kernels_run_only_under_an_accelerator_method_false_on_npu(tmp_path):
    """AH#29: a Triton module whose kernels run only from a helper called under a flag set from
    an accelerator method that the NPU accelerator inherits as `return False`: a named scope
    saying so; a module launched under a method the NPU accelerator overrides (True) stays
    reported."""
    files = {
        "pkg/__init__.py": "",
        "pkg/accelerator/__init__.py": "def get_accelerator():\n    from .npu_accelerator import NPU_Accelerator\n    return NPU_Accelerator()\n",
        "pkg/accelerator/abstract_accelerator.py": _ABSTRACT,
        "pkg/accelerator/npu_accelerator.py": _NPU_ACCEL,
        "pkg/ops/__init__.py": _OPS_INIT,
        "pkg/ops/gemm_triton.py": _KERNEL.format(name="grouped_gemm"),
        "pkg/ops/fast_triton.py": _KERNEL.format(name="fast_op"),
        "pkg/moe/__init__.py": "",
        "pkg/moe/experts.py": _EXPERTS,
    }
    report = migrate_json(write_project(tmp_path, files))
    assert not _findings(report, "pkg/ops/gemm_triton.py", "NPU910")
    reason = next(iter(_scopes(report, "pkg/ops/gemm_triton.py", "NPU910").values()))
    assert "launched only under an accelerator method the NPU accelerator answers False" in reason
    assert "prefer_triton_grouped_mm" in reason and "NPU_Accelerator" in reason
    fast = _findings(report, "pkg/ops/fast_triton.py", "NPU910")
    assert fast and all(f["severity"] == "error" for f in fast.values())


_GUARDED_MOE = '''\
import torch

try:
    from sgl_kernel import silu_and_mul
except ImportError:
    silu_and_mul = None

from pkg.kernels import reorder_for_cutlass


def cutlass_moe(x):
    y, grid = reorder_for_cutlass(x)
    return y if silu_and_mul is None else silu_and_mul(y)
'''


def test_device_property_helper_whose_caller_imports_the_package_guarded_stays_reported(tmp_path):
    """AL#33 (the true case beside it): the caller's module imports `sgl_kernel` in a `try` with a
    fallback, so it imports on an NPU host and runs the helper: the finding stays."""
    report = migrate_json(write_project(tmp_path, {"pkg/__init__.py": "", "pkg/kernels.py": _LAUNCH,
                                                   "pkg/cutlass_moe.py": _GUARDED_MOE, "pkg/user.py": _USER}))
    found = _findings(report, "pkg/kernels.py", "NPU931")
    assert 6 in found and found[6]["severity"] == "error"


def test_accelerator_flag_set_elsewhere_keeps_the_kernel_finding(tmp_path):
    """AH#29 (the true case beside it): another module turns the flag on by hand, so the kernels
    may run on an NPU host: the finding stays."""
    files = {
        "pkg/__init__.py": "",
        "pkg/accelerator/__init__.py": "def get_accelerator():\n    from .npu_accelerator import NPU_Accelerator\n    return NPU_Accelerator()\n",
        "pkg/accelerator/abstract_accelerator.py": _ABSTRACT,
        "pkg/accelerator/npu_accelerator.py": _NPU_ACCEL,
        "pkg/ops/__init__.py": _OPS_INIT,
        "pkg/ops/gemm_triton.py": _KERNEL.format(name="grouped_gemm"),
        "pkg/ops/fast_triton.py": _KERNEL.format(name="fast_op"),
        "pkg/moe/__init__.py": "",
        "pkg/moe/experts.py": _EXPERTS,
        "pkg/moe/force.py": "def force(experts):\n    experts.use_triton = True\n    return experts\n",
    }
    report = migrate_json(write_project(tmp_path, files))
    found = _findings(report, "pkg/ops/gemm_triton.py", "NPU910")
    assert found and all(f["severity"] == "error" for f in found.values())
