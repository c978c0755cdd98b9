"""Gates evaluated with NPU-host semantics (issue #16, round-12 audits; npu_migrate/npugates.py).

Each test writes a small project of its own, migrates it as a user does, and checks both sides:
the construct behind a gate an NPU host fails is no longer a finding (a named skipped scope, or
info with the reason), and a nearby construct an NPU host does reach is still reported."""

from __future__ import annotations

from .precision_helpers import migrate_json, moot_lines, write_project


def _reported(report: dict, path: str, code: str) -> dict[int, str]:
    """{line: severity} of the report-only findings of `code` in `path`."""
    return {f["line"]: f["severity"] for f in report["findings"]
            if f["path"] == path and f["code"] == code and not f["fixable"]}


def test_capability_backend_helper_returning_none_gates_the_lazy_import(tmp_path):
    # AE#3: the lazy flashinfer import runs only when a helper returns "cute-dsl", which needs
    # device capability (10, 0) or (10, 3); otherwise torch.mm. A helper an NPU host may answer
    # truthy keeps its import reported.
    root = write_project(tmp_path, {"pkg/gemm.py": '''\
import torch
from vllm.platforms import current_platform


def _backend():
    """The FlashInfer backend, or None."""
    if current_platform.is_device_capability((10, 0)) or current_platform.is_device_capability((10, 3)):
        return "cute-dsl"
    return None


def _other_backend():
    if current_platform.is_device_capability((10, 0)):
        return "cute-dsl"
    return "cublas"


def run(x, w, n):
    if n <= 16 and (backend := _backend()):
        from flashinfer.gemm import mm_bf16

        return mm_bf16(x, w, backend=backend)
    return torch.mm(x, w)


def autotune(shapes):
    backend = _backend()
    if backend is not None:
        from flashinfer.gemm import mm_bf16

        for shape in shapes:
            mm_bf16(shape, shape, backend=backend)


def run_other(x, w):
    if backend := _other_backend():
        from flash_attn.ops import rms_norm

        return rms_norm(x, w, backend=backend)
    return x
'''})
    report = migrate_json(root)
    assert 20 in moot_lines(report["skipped"], "NPU911", "pkg/gemm.py")
    assert 20 not in _reported(report, "pkg/gemm.py", "NPU911")
    assert 28 not in _reported(report, "pkg/gemm.py", "NPU911")
    # (a helper whose answer is truthy on an NPU host gates nothing)
    assert any(f["path"] == "pkg/gemm.py" and f["line"] == 37 and f["severity"] == "error"
               for f in report["findings"])


def test_cuda_only_backend_name_comparison_gates_fp8(tmp_path):
    # AE#6: an FP8 buffer allocated only under `get_name() == "FLASHINFER"`; an NPU host never
    # selects FlashInfer. A comparison with another backend's name decides nothing.
    root = write_project(tmp_path, {"pkg/ops.py": '''\
import torch


def fused(layer, qkv):
    q_fp8 = None
    if layer.attn_backend.get_name() == "FLASHINFER" and qkv is not None:
        q_fp8 = torch.empty((4, 4), dtype=torch.float8_e4m3fn, device=qkv.device)
    return q_fp8


def other(layer, qkv):
    if layer.attn_backend.get_name() == "ASCEND":
        return torch.empty((4, 4), dtype=torch.float8_e4m3fn, device=qkv.device)
    return None
'''})
    report = migrate_json(root)
    moot = moot_lines(report["skipped"], "NPU913", "pkg/ops.py")
    assert 7 in moot and "FLASHINFER" in moot[7]
    reported = _reported(report, "pkg/ops.py", "NPU913")
    assert 7 not in reported
    assert reported.get(13) == "error"


def test_module_skipped_unless_the_platform_is_cpu(tmp_path):
    # AG#6: `pytestmark = skipif(not current_platform.is_cpu())` skips the module on an NPU host
    # (the platform is the NPU's there); a module skipped only on the CPU runs there.
    body = '''\
import pytest
import torch
from vllm.platforms import current_platform

pytestmark = pytest.mark.skipif({cond}, reason="CPU kernels only")


def test_ref():
    x = torch.randn(4, device="cuda").to(torch.float8_e4m3fn)
    assert x is not None
'''
    root = write_project(tmp_path, {"tests/test_cpu_kernels.py": body.format(cond="not current_platform.is_cpu()"),
                                    "tests/test_gpu_kernels.py": body.format(cond="current_platform.is_cpu()")})
    report = migrate_json(root)
    assert 9 in moot_lines(report["skipped"], "NPU913", "tests/test_cpu_kernels.py")
    assert 9 not in _reported(report, "tests/test_cpu_kernels.py", "NPU913")
    assert _reported(report, "tests/test_gpu_kernels.py", "NPU913").get(9) == "error"


def test_private_method_called_only_after_a_capability_exit(tmp_path):
    # AG#7: `_tune()` runs only when `_should_tune()` is true, which needs the capability's major
    # >= 9 (the shim answers (0, 0)); a method also called from a path an NPU host takes stays.
    root = write_project(tmp_path, {"pkg/runner.py": '''\
import torch


class Runner:
    def warmup(self):
        if self._should_tune():
            self._tune()
        self._load()

    def _should_tune(self) -> bool:
        if self.args.disable:
            return False
        if self.args.backend not in ["flashinfer_trtllm"]:
            return False
        major, _ = torch.cuda.get_device_capability()
        if major < 9:
            return False
        if self.spec:
            return not self.draft
        return True

    def _tune(self):
        from flashinfer.autotuner import autotune

        with autotune():
            pass

    def _load(self):
        from flashinfer.jit import load

        return load()
'''})
    report = migrate_json(root)
    moot = moot_lines(report["skipped"], "NPU911", "pkg/runner.py")
    assert 23 in moot and "_tune" in moot[23]
    reported = _reported(report, "pkg/runner.py", "NPU911")
    assert 23 not in reported
    assert reported.get(29) == "error" or any(
        f["path"] == "pkg/runner.py" and f["code"] == "NPU911" and f["severity"] == "error"
        and any(p[0] == 29 for p in f.get("also", ())) for f in report["findings"])


def test_transitively_guarded_triton_import(tmp_path):
    # AG#5: autotuner.py is imported only by intmm_triton.py, itself imported only inside
    # try/except ImportError: guarded through it (info). A module a plain importer loads stays an
    # error.
    root = write_project(tmp_path, {
        "pkg/__init__.py": "",
        "pkg/kernel/__init__.py": "",
        "pkg/kernel/intmm.py": '''\
import torch

try:
    from pkg.kernel import intmm_triton
except ImportError:
    intmm_triton = None


def int_mm(a, b):
    return torch._int_mm(a, b)
''',
        "pkg/kernel/intmm_triton.py": '''\
import torch
import triton
import triton.language as tl

from pkg.kernel.autotuner import best_config


@triton.jit
def _kernel(a_ptr, BLOCK: tl.constexpr):
    pass
''',
        "pkg/kernel/autotuner.py": '''\
import os

import triton


def best_config(a):
    try:
        return 16 if os.environ.get("AUTOTUNE", "0") == "1" else 8
    except triton.runtime.OutOfResources:
        return 8
''',
        "pkg/other/__init__.py": "",
        "pkg/other/user.py": '''\
from pkg.other.tuner import pick
''',
        "pkg/other/tuner.py": '''\
import triton


def pick(a):
    try:
        return 8
    except triton.runtime.OutOfResources:
        return 4
''',
    })
    report = migrate_json(root)
    found = {(f["path"], f["line"]): f for f in report["findings"] if f["code"] == "NPU910"}
    # (round 14, redundant14.review_triton_helpers: the kernel-less helper, imported only after its
    # importer's own Triton import, which is reported as info naming the `try`, is a named scope)
    assert ("pkg/kernel/autotuner.py", 3) not in found
    assert "itself imported only" not in str(found)
    (scope,) = [s for s in report["skipped"] if s.get("path") == "pkg/kernel/autotuner.py"]
    assert "a Triton helper without kernels" in scope["reason"] and "pkg/kernel/intmm_triton.py:5" in scope["reason"]
    importer = found[("pkg/kernel/intmm_triton.py", 2)]
    assert importer["severity"] == "info" and "pkg/kernel/intmm.py:4" in importer["message"]
    assert found[("pkg/other/tuner.py", 1)]["severity"] == "error"


def test_lazy_import_in_a_test_helper_nothing_calls(tmp_path):
    # AF#3: `flashinfer_norm()` in a test module: nothing calls it, no file names it. A helper a
    # test calls, and a public library function nothing in the project calls (a user may), keep
    # their findings.
    helper = '''\
import torch


def flashinfer_norm(x, w):
    from flashinfer.norm import rmsnorm

    return rmsnorm(x, w)
'''
    root = write_project(tmp_path, {
        "pkg/tests/test_norm.py": helper + '''

def test_norm():
    x = torch.randn(4, 8, device="cuda")
    assert x.sum() is not None
''',
        "pkg/tests/test_fused.py": helper.replace("flashinfer_norm", "flashinfer_fused") + '''

def test_fused():
    x = torch.randn(4, 8, device="cuda")
    assert flashinfer_fused(x, x) is not None
''',
        # (a benchmark's own function of the same name is no use of the test's helper)
        "pkg/bench/bench_norm.py": helper + "\nflashinfer_norm(torch.ones(2), torch.ones(2))\n",
        "pkg/norms.py": helper.replace("flashinfer_norm", "flashinfer_rms") + '''

def to_device(x):
    return x.cuda()
''',
    })
    report = migrate_json(root)
    moot = moot_lines(report["skipped"], "NPU911", "pkg/tests/test_norm.py")
    assert 5 in moot and "nothing references" in moot[5]
    assert 5 not in _reported(report, "pkg/tests/test_norm.py", "NPU911")
    assert _reported(report, "pkg/tests/test_fused.py", "NPU911").get(5) == "error"
    assert _reported(report, "pkg/norms.py", "NPU911").get(5) == "error"


def test_kernel_of_an_op_implementation_registered_as_unsupported(tmp_path):
    # AE#11: a Triton kernel launched only by an op implementation registered with
    # `supported=HAS_TRITON and current_platform.is_cuda()`: another implementation runs on an NPU
    # host. One registered with `supported=HAS_TRITON` (Triton-Ascend may make it true) stays.
    head = '''\
import torch
from torch.library import triton_op, wrap_triton

from vllm import ir
from vllm.platforms import current_platform
from vllm.triton_utils import HAS_TRITON, tl, triton


@triton.jit
def _act_kernel(x_ptr, BLOCK: tl.constexpr):
    pass


@triton_op("vllm::act_triton", mutates_args=())
def _act_triton_op(x: torch.Tensor) -> torch.Tensor:
    out = torch.empty_like(x)
    wrap_triton(_act_kernel)[(1,)](x, BLOCK=16)
    return out


@ir.ops.act.register_impl("triton", supported={supported})
def act_triton(x):
    return _act_triton_op(x)
'''
    root = write_project(tmp_path, {
        "pkg/act.py": head.format(supported="HAS_TRITON and current_platform.is_cuda()"),
        "pkg/other.py": head.format(supported="HAS_TRITON"),
    })
    report = migrate_json(root)
    moot = moot_lines(report["skipped"], "NPU910", "pkg/act.py")
    assert 9 in moot and "supported=HAS_TRITON and current_platform.is_cuda()" in moot[9]
    assert 9 not in _reported(report, "pkg/act.py", "NPU910")
    assert _reported(report, "pkg/other.py", "NPU910").get(9) == "error"
