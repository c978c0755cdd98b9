"""Round 17 (issue #16): FP8 (NPU913) that is no FP8 compute on an NPU device, and modules an NPU
host stops before at import (fp8cpu16.py)."""

from .precision_helpers import migrate_json, moot_lines, write_project


def _open(report, path):
    return sorted((f["line"], f["code"], f["severity"]) for f in report["findings"]
                  if not f["fixable"] and f["path"] == path)


def _fp8(report, path):
    return [f for f in report["findings"] if f["path"] == path and f["code"] == "NPU913"]


_GETTER = '''import torch


class Platform:
    @classmethod
    def fp8_dtype(cls) -> torch.dtype:
        """The preferred FP8 type."""
        return torch.float8_e4m3fn
'''

_GETTER_COMPUTES = '''import torch


class Platform:
    @classmethod
    def fp8_weight(cls, w):
        scale = w.abs().max()
        return (w / scale).to(torch.float8_e4m3fn)
'''


def test_a_method_that_only_returns_an_fp8_dtype_is_no_compute(tmp_path):
    """AU#7: `Platform.fp8_dtype()` only hands a dtype object back; a method that casts keeps its error."""
    root = write_project(tmp_path, {"pkg/platform.py": _GETTER, "pkg/weights.py": _GETTER_COMPUTES})
    report = migrate_json(root)
    assert not [f for f in _fp8(report, "pkg/platform.py") if f["severity"] != "info"], _fp8(report, "pkg/platform.py")
    assert [f["severity"] for f in _fp8(report, "pkg/weights.py")] == ["error"]


_CPU_TEST = '''import pytest
import torch


def _make(monkeypatch, *, device="cpu"):
    with torch.device(device):
        layer = torch.nn.Linear(2, 2)
    scales = ((torch.arange(8).reshape(4, 2) + 1) / 4).to(torch.float8_e4m3fn)
    return layer, scales


def test_loads_fp8_shards() -> None:
    shard = torch.arange(8, dtype=torch.float32).reshape(4, 2).to(torch.float8_e4m3fn)
    weight = torch.tensor([[1.0, 2.0], [4.0, 8.0]])
    assert weight.to(torch.float8_e4m3fn).dtype == shard.dtype


@pytest.mark.skipif(not torch.cuda.is_available(), reason="CUDA is required")
def test_cuda_lookup():
    ids = torch.tensor([3, 4], device="cuda")
    assert ids.to(torch.float8_e4m3fn).dtype == torch.float8_e4m3fn
'''

_DEVICE_TEST = '''import torch


def test_cast_on_device():
    x = torch.randn(4, 4, device="cuda")
    assert x.to(torch.float8_e4m3fn).dtype == torch.float8_e4m3fn


def test_cast_in_device_block():
    with torch.device("cuda"):
        y = torch.randn(4).to(torch.float8_e4m3fn)
    assert y.dtype == torch.float8_e4m3fn
'''


def test_fresh_cpu_tensors_cast_to_fp8_in_a_test_file_are_no_compute(tmp_path):
    """AT#13: `torch.arange(...)`/`torch.tensor(...)` with no device, cast to FP8, are CPU data; the
    file's cast of a `device="cuda"` tensor is still reported (anchored there)."""
    root = write_project(tmp_path, {"tests/test_ple.py": _CPU_TEST, "tests/test_device.py": _DEVICE_TEST})
    report = migrate_json(root)
    kept = [f for f in _fp8(report, "tests/test_ple.py") if f["severity"] != "info"]
    assert len(kept) == 1 and kept[0]["line"] == 21 and not kept[0].get("also"), kept
    device = [f for f in _fp8(report, "tests/test_device.py") if f["severity"] != "info"]
    assert device and {device[0]["line"], *(p[0] for p in device[0].get("also", []))} == {6, 11}, device


_SUPPORT = '''import torch


class FP8QDQLinear(torch.nn.Module):
    def __init__(self, n):
        super().__init__()
        self.weight = torch.randn((n, n)).to(torch.float8_e4m3fn)

    def forward(self, x):
        return torch.ops.pkg.dequantize(self.weight, torch.tensor([2.0]), torch.float8_e4m3fn)
'''


def test_a_test_support_module_that_names_no_device_is_cpu_data(tmp_path):
    """AV#3: a fake-quant helper module under `testing/` that names no device; the same module
    outside `testing/`, or one that names `"cuda"`, keeps its error."""
    cuda = _SUPPORT.replace("torch.randn((n, n))", 'torch.randn((n, n), device="cuda")')
    root = write_project(tmp_path, {"pkg/testing/utils.py": _SUPPORT, "pkg/testing/cuda_utils.py": cuda,
                                    "pkg/layers.py": _SUPPORT})
    report = migrate_json(root)
    assert not [f for f in _fp8(report, "pkg/testing/utils.py") if f["severity"] != "info"]
    assert [f["severity"] for f in _fp8(report, "pkg/testing/cuda_utils.py")] == ["error"]
    assert [f["severity"] for f in _fp8(report, "pkg/layers.py")] == ["error"]


_BENCH = '''import torch

from pkg.platforms import current_platform

assert current_platform.is_cuda(), (
    "Only support benchmarking on CUDA device."
)


def run(x):
    return x.to(torch.float8_e4m3fn) @ x.to(torch.float8_e4m3fn)
'''

_BENCH_EXIT = '''import sys

import torch

from pkg.platforms import current_platform

if not current_platform.is_cuda():
    sys.exit("CUDA only")


def run(x):
    return x.to(torch.float8_e4m3fn) @ x.to(torch.float8_e4m3fn)
'''

_PLATFORMS = '''class _P:
    def is_cuda(self):
        return True


current_platform = _P()
'''


def test_findings_after_a_module_level_cuda_assert_are_a_named_scope(tmp_path):
    """AU#10: `assert current_platform.is_cuda(), "..."` at module level (or `if not ...: sys.exit`):
    an NPU host stops at import, the FP8 after it is a named scope; the same module without the
    assert, or with an assert an NPU host passes, keeps its error."""
    files = {"pkg/__init__.py": "", "pkg/platforms.py": _PLATFORMS, "benchmarks/bench_fp8.py": _BENCH,
             "benchmarks/bench_exit.py": _BENCH_EXIT,
             "benchmarks/bench_plain.py": _BENCH.replace("assert current_platform.is_cuda(), (", "MESSAGE = ("),
             "benchmarks/bench_any.py": _BENCH.replace("current_platform.is_cuda()", "torch.cuda.is_available()")}
    report = migrate_json(write_project(tmp_path, files))
    for path in ("benchmarks/bench_fp8.py", "benchmarks/bench_exit.py"):
        assert not [f for f in _fp8(report, path) if f["severity"] != "info"], _fp8(report, path)
        assert 11 in moot_lines(report["skipped"], "NPU913", path) or 12 in moot_lines(
            report["skipped"], "NPU913", path), report["skipped"]
    assert "after a module-level check an NPU host fails at import: line 5" in str(
        moot_lines(report["skipped"], "NPU913", "benchmarks/bench_fp8.py"))
    for path in ("benchmarks/bench_plain.py", "benchmarks/bench_any.py"):
        assert [f["severity"] for f in _fp8(report, path)] == ["error"], _fp8(report, path)


_MARKERS = '''import pytest
import torch

from pkg.platforms import current_platform

requires_mx = pytest.mark.skipif(
    not (current_platform.is_rocm() and current_platform.supports_mx()),
    reason="requires a ROCm device with native MX support",
)
requires_gpu = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU")
'''

_MX_TEST = '''import pytest
import torch
from utils import requires_gpu, requires_mx


def _fp8_weights(n):
    return torch.randn(n, n, device="cuda").to(torch.float8_e4m3fn)


@requires_mx
def test_mx_linear():
    assert _fp8_weights(4).dtype == torch.float8_e4m3fn
'''


def test_tests_behind_an_imported_skip_marker_an_npu_host_takes_are_a_named_scope(tmp_path):
    """AT#5: `@requires_mx`, bound in the directly imported utils.py as a `skipif` true on an NPU
    host (`not (is_rocm() and ...)`): the helper only those tests call is a named scope. A marker an
    NPU host may pass (`not torch.cuda.is_available()`), or an unmarked test, keeps the error."""
    kept_marker = _MX_TEST.replace("@requires_mx", "@requires_gpu")
    unmarked = _MX_TEST + "\n\ndef test_plain():\n    assert _fp8_weights(2).dtype\n"
    files = {"pkg/__init__.py": "", "pkg/platforms.py": _PLATFORMS, "tests/mx/utils.py": _MARKERS,
             "tests/mx/test_mx.py": _MX_TEST, "tests/mx/test_gpu.py": kept_marker, "tests/mx/test_plain.py": unmarked}
    report = migrate_json(write_project(tmp_path, files))
    assert not [f for f in _fp8(report, "tests/mx/test_mx.py") if f["severity"] != "info"]
    assert "in a helper only tests an NPU host skips call: `_fp8_weights`" in str(
        moot_lines(report["skipped"], "NPU913", "tests/mx/test_mx.py")), report["skipped"]
    for path in ("tests/mx/test_gpu.py", "tests/mx/test_plain.py"):
        assert [f["severity"] for f in _fp8(report, path)] == ["error"], _fp8(report, path)
