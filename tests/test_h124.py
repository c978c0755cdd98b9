"""Precision wave 27, helper h124: tests, benchmarks, labels and scripts, and the owner's policy P2
(tests and benchmarks do not make library code reached) (issue #16).

Each false shape is paired with the nearest true one, which stays reported."""

from __future__ import annotations

from tests.precision_helpers import migrate_json, write_project

_PLATFORMS = """\
class _Platform:
    def is_cuda(self):
        return True


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

_KERNELS = """\
import torch

from pkg.platforms import current_platform
from pkg.triton_utils import HAS_TRITON, tl, triton


def fused_supported(x):
    return HAS_TRITON and current_platform.is_cuda()


@triton.jit
def _scale_kernel(x_ptr, n: tl.constexpr):
    i = tl.program_id(0)
    tl.store(x_ptr + i, tl.load(x_ptr + i) * 2)


def fused_scale(x):
    _scale_kernel[(x.numel(),)](x, x.numel())
    return x


def rope_fast(x):
    from flashinfer.rope import apply_rope_inplace
    apply_rope_inplace(x)
    return x
"""

_LAYER = """\
import torch

from pkg.ops.kernels import fused_scale, fused_supported, rope_fast


class Scale(torch.nn.Module):
    def forward(self, x):
        if fused_supported(x):
            x = fused_scale(x)
            return rope_fast(x)
        return x * 2
"""

_BENCH = """\
import torch

from pkg.ops.kernels import fused_scale, rope_fast


def main():
    x = torch.ones(8)
    fused_scale(x)
    rope_fast(x)


if __name__ == "__main__":
    main()
"""

_TEST = """\
import torch

from pkg.ops.kernels import fused_scale, rope_fast


def test_fused_scale():
    x = torch.ones(8)
    assert fused_scale(x).sum() == 16
    rope_fast(x)
"""


def _project(tmp_path, extra=None):
    files = {
        "pkg/__init__.py": "",
        "pkg/platforms.py": _PLATFORMS,
        "pkg/triton_utils.py": _TRITON_UTILS,
        "pkg/ops/__init__.py": "",
        "pkg/ops/kernels.py": _KERNELS,
        "pkg/layers/__init__.py": "",
        "pkg/layers/scale.py": _LAYER,
        "benchmarks/kernels/bench_scale.py": _BENCH,
        "tests/ops/test_scale.py": _TEST,
    }
    files.update(extra or {})
    return write_project(tmp_path, files)


def _at(report, path, code):
    return [f for f in report["findings"] if f["path"] == path and f["code"] == code]


def test_p2_kernel_and_lazy_import_reached_only_from_a_benchmark_and_a_test_are_info(tmp_path):
    report = migrate_json(_project(tmp_path))
    kernel = _at(report, "pkg/ops/kernels.py", "NPU910")
    assert kernel and all(f["severity"] == "info" for f in kernel), kernel
    message = next(f["message"] for f in kernel if f["line"] == 11)
    assert "reached on an NPU host only from tests/benchmarks" in message, message
    assert "benchmarks/kernels/bench_scale.py:8" in message and "tests/ops/test_scale.py:8" in message, message
    assert "pkg/layers/scale.py:9" in message, message  # (the library's dead reference is named)
    lazy = _at(report, "pkg/ops/kernels.py", "NPU911")
    assert lazy and all(f["severity"] == "info" for f in lazy), lazy
    assert "tests/ops/test_scale.py:9" in lazy[0]["message"], lazy
    # (the test and the benchmark keep their own findings: this pass never touches them)
    assert not [s for s in report["skipped"] if "reached on an NPU host only from tests" in str(s)]


def test_p2_pair_a_library_caller_that_runs_there_keeps_the_errors(tmp_path):
    ungated = """\
from pkg.ops.kernels import fused_scale, rope_fast


def warmup(x):
    fused_scale(x)
    return rope_fast(x)
"""
    report = migrate_json(_project(tmp_path, {"pkg/layers/warmup.py": ungated}))
    kernel = _at(report, "pkg/ops/kernels.py", "NPU910")
    assert any(f["severity"] == "error" and f["line"] == 11 for f in kernel), kernel
    lazy = _at(report, "pkg/ops/kernels.py", "NPU911")
    assert any(f["severity"] == "error" for f in lazy), lazy
    assert not any("only from tests/benchmarks" in f["message"] for f in report["findings"])


def test_p2_pair_an_example_is_no_test_or_benchmark(tmp_path):
    example = _BENCH.replace("def main", "def run_example")
    report = migrate_json(_project(tmp_path, {"examples/scale_example.py": example}))
    kernel = _at(report, "pkg/ops/kernels.py", "NPU910")
    assert any(f["severity"] == "error" for f in kernel), kernel


def test_test_side():
    from npu_migrate.testcallers27 import test_side

    assert test_side("benchmarks/kernels/bench_x.py") and test_side("tests/a/test_x.py")
    assert test_side("pkg/bench_utils.py") and test_side("conftest.py")
    assert not test_side("pkg/ops/kernels.py") and not test_side("examples/run.py")
