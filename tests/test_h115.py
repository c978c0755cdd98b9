"""Round-26 precision wave, helper h115: vLLM-style `models/<model>/nvidia/` folders (issue #16).

Each false shape is paired with the nearest true one, which stays reported."""

from __future__ import annotations

from tests.precision_helpers import migrate_json, moot_lines, write_project

_PLATFORMS = """\
class _Platform:
    def is_cuda(self):
        return True

    def is_rocm(self):
        return False


current_platform = _Platform()
"""

_TRITON_UTILS = """\
try:
    import triton
    import triton.language as tl
    HAS_TRITON = True
except ImportError:
    triton = None
    tl = None
    HAS_TRITON = False
"""


def _ihc_project(tmp_path, predicate: str, init: str = ""):
    """BF#9's shape: kernels next to a `*_supported(x)` predicate, the dispatch in another module."""
    kernels = f'''\
import torch

from pkg.platforms import current_platform
from pkg.triton_utils import HAS_TRITON, tl, triton


def ihc_supported(x):
    return {predicate}


@triton.jit
def _stage1(x_ptr, n: tl.constexpr):
    i = tl.program_id(0)
    tl.store(x_ptr + i, tl.load(x_ptr + i) * 2)


@triton.jit
def _stage2(x_ptr, n: tl.constexpr):
    i = tl.program_id(0)
    tl.store(x_ptr + i, tl.load(x_ptr + i) + 1)


def ihc_pre(x):
    _stage1[(x.numel(),)](x, x.numel())
    _stage2[(x.numel(),)](x, x.numel())
    return x
'''
    layer = """\
import torch

from pkg.model.nvidia.kernels import ihc_pre, ihc_supported


class PreLayer(torch.nn.Module):
    def forward(self, x):
        if ihc_supported(x):
            return ihc_pre(x)
        return x * 2 + 1
"""
    return write_project(tmp_path, {
        "pkg/__init__.py": "",
        "pkg/platforms.py": _PLATFORMS,
        "pkg/triton_utils.py": _TRITON_UTILS,
        "pkg/model/__init__.py": init,
        "pkg/model/nvidia/__init__.py": "",
        "pkg/model/nvidia/kernels.py": kernels,
        "pkg/model/nvidia/hc.py": layer,
    })


_KERNELS = "pkg/model/nvidia/kernels.py"
# (round 25 BT#1: the package loads `nvidia/` on every platform but ROCm, an NPU host included)
_NVIDIA_BUT_ROCM = """\
from pkg.platforms import current_platform

if not current_platform.is_rocm():
    from .nvidia.hc import PreLayer
"""


def _kernel_errors(report):
    return [f for f in report["findings"] if f["path"] == _KERNELS and f["code"] == "NPU910" and f["severity"] != "info"]


def test_bf9_kernels_launched_only_under_a_cuda_predicate_are_named_scopes(tmp_path):
    pred = "HAS_TRITON and current_platform.is_cuda() and x.is_cuda and x.dtype == torch.bfloat16"
    report = migrate_json(_ihc_project(tmp_path, pred, _NVIDIA_BUT_ROCM))
    assert not _kernel_errors(report), _kernel_errors(report)
    scopes = moot_lines(report["skipped"], "NPU910", _KERNELS)
    assert 11 in scopes and 17 in scopes, scopes
    assert "`_stage1`" in scopes[11] and "pkg/model/nvidia/hc.py:9" in scopes[11], scopes[11]


def test_bf9_pair_kernels_under_an_is_cuda_tensor_test_stay_errors(tmp_path):
    # (`x.is_cuda` is rewritten to the shim's accelerator test: true on an NPU host)
    report = migrate_json(_ihc_project(tmp_path, "HAS_TRITON and x.is_cuda", _NVIDIA_BUT_ROCM))
    errors = _kernel_errors(report)
    assert errors and errors[0]["line"] == 11, report["findings"]


def test_bt1_pair_kernels_launched_unconditionally_stay_errors(tmp_path):
    root = _ihc_project(tmp_path, "HAS_TRITON and current_platform.is_cuda()", _NVIDIA_BUT_ROCM)
    (root / "pkg/model/nvidia/hc.py").write_text(
        (root / "pkg/model/nvidia/hc.py").read_text().replace("        if ihc_supported(x):\n            return ihc_pre(x)\n",
                                                              "        return ihc_pre(x)\n"))
    report = migrate_json(root)
    assert _kernel_errors(report), report["findings"]


def test_bf9_pair_kernel_also_handed_on_as_a_value_stays_an_error(tmp_path):
    pred = "HAS_TRITON and current_platform.is_cuda()"
    root = _ihc_project(tmp_path, pred, _NVIDIA_BUT_ROCM)
    kernels = root / _KERNELS
    kernels.write_text(kernels.read_text() + "\n\nKERNELS = {'stage1': _stage1}\n")
    report = migrate_json(root)
    errors = _kernel_errors(report)
    assert errors and errors[0]["line"] == 11, report["findings"]
    assert 17 in moot_lines(report["skipped"], "NPU910", _KERNELS)  # (`_stage2`: still launched only under the gate)


def test_kernelgates26_reads_stacked_triton_decorators():
    from npu_migrate import astcache
    from npu_migrate.kernelgates26 import triton_decorated

    tree = astcache.parse(b"import triton\n\n@triton.autotune(configs=[],\n    key=['n'])\n@triton.jit\ndef k(x):\n    pass\n\n@other\ndef f():\n    pass\n")
    lines = triton_decorated(tree)
    assert lines[3].name == "k" and lines[4].name == "k" and lines[5].name == "k"
    assert 6 not in lines and 9 not in lines
