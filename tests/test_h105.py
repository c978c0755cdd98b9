"""Labels and folds of round 24 (issue #16, audits BP#9, BP#10, BP#37, BO#2, BQ#3):
npu_migrate/labels24.py. Each false case beside the nearest true one that must stay reported."""

from __future__ import annotations

from tests.precision_helpers import findings_at, migrate_json, scopes_at, write_project

# ------------------------------------------------------------------ BP#9: a platform table a hook extends

_TABLE = """\
from pkg.platforms import current_platform

# {platform: supported buffer types}
SUPPORTED_DEVICE = {
    "cuda": (
        "cuda",
        "cpu",
    ),
    "xpu": ("cpu", "xpu"),
    "cpu": ("cpu",),
}
SUPPORTED_DEVICE.update(current_platform.get_supported_devices())


def buffer_types(name):
    return SUPPORTED_DEVICE[name]
"""

_TABLE_NO_HOOK = """\
import torch

PER_DEVICE = {
    "cuda": (
        "cuda",
        "cpu",
    ),
    "cpu": ("cpu",),
}


def buffer_types(t: torch.Tensor):
    return PER_DEVICE[t.device.type]
"""


def test_platform_table_extended_by_a_platform_hook_is_a_label(tmp_path):
    root = write_project(tmp_path, {"pkg/transfer.py": _TABLE, "pkg/other.py": _TABLE_NO_HOOK})
    report = migrate_json(root)
    assert not findings_at(report, "pkg/transfer.py", "NPU990")
    scopes = scopes_at(report, "pkg/transfer.py", "NPU990")
    assert any("platform-keyed table `SUPPORTED_DEVICE`" in r and "line 12" in r for r in scopes.values()), scopes
    # (the nearest true case: a table with no hook, looked up by a tensor's device type)
    assert findings_at(report, "pkg/other.py", "NPU990")


# ------------------------------------------------------------------ BP#10: simulated platforms

_SIMULATED = """\
import pytest

from pkg.platforms import current_platform


@pytest.mark.parametrize(
    "arch, platform, supported",
    [
        ("A", "cuda", True),
        ("A", "rocm", True),
        ("B", "cuda", False),
        ("A", "cpu", False),
    ],
)
def test_support(monkeypatch, arch, platform, supported):
    monkeypatch.setattr(current_platform, "is_cuda", lambda: platform == "cuda")
    monkeypatch.setattr(current_platform, "is_cuda_alike", lambda: platform in ("cuda", "rocm"))
    assert (arch, supported) is not None


@pytest.mark.parametrize(
    "arch, platform",
    [
        ("A", "cuda"),
        ("B", "cpu"),
    ],
)
def test_allocates(monkeypatch, arch, platform):
    monkeypatch.setattr(current_platform, "is_cuda", lambda: platform == "cuda")
    x = make_tensor(arch, platform)
    assert x is not None


def make_tensor(arch, device):
    import torch

    return torch.zeros(2, device=device)
"""


def test_parametrized_platform_names_fed_to_a_patched_predicate_are_labels(tmp_path):
    root = write_project(tmp_path, {"tests/test_support.py": _SIMULATED})
    report = migrate_json(root)
    kept = findings_at(report, "tests/test_support.py", "NPU990")
    lines = {line for f in kept.values() for line in [f["line"]]} | {
        int(x) for f in kept.values() for x in f["message"].split("also at line")[-1].strip(" s)").split(", ")
        if "also at line" in f["message"] and x.strip().isdigit()}
    # (test_support's cases and its patched comparisons: labels)
    assert not lines & {9, 11, 16, 17}, kept
    # (test_allocates passes the name on as a device: its case stays reported)
    assert 24 in lines, kept
    scopes = scopes_at(report, "tests/test_support.py", "NPU990")
    assert any("parametrized case `platform`" in r for r in scopes.values()), scopes


# ------------------------------------------------------------------ BP#37: an op registered only with a CUDA-only package

_OPS = """\
import importlib.util

import torch


def _incompatible():
    return None


_C_ext = None
if importlib.util.find_spec("flash_attn_3") and importlib.util.find_spec("flash_attn_3._C"):
    import flash_attn_3._C  # noqa: F401

    reason = _incompatible()
    if reason is None:
        _C_ext = torch.ops.flash_attn_3
if _C_ext is not None:

    @torch.library.custom_op(
        "pkg::fwd", mutates_args=(), device_types=["cuda"]
    )
    def fwd(q: torch.Tensor) -> torch.Tensor:
        return _C_ext.fwd(q)


@torch.library.custom_op("pkg::scale", mutates_args=(), device_types=["cuda"])
def scale(x: torch.Tensor) -> torch.Tensor:
    return x * 2
"""

_OPS_OWN = """\
import torch

_impl = None
try:
    from pkg import _native as _impl
except ImportError:
    pass

if _impl is not None:

    @torch.library.custom_op("pkg::g", mutates_args=(), device_types=["cuda"])
    def g(q: torch.Tensor) -> torch.Tensor:
        return _impl.g(q)
"""


def test_custom_op_registered_only_with_a_cuda_only_package_is_a_scope(tmp_path):
    root = write_project(tmp_path, {"pkg/ops.py": _OPS, "pkg/own.py": _OPS_OWN})
    report = migrate_json(root)
    kept = findings_at(report, "pkg/ops.py", "NPU990")
    assert 19 not in kept
    scopes = scopes_at(report, "pkg/ops.py", "NPU990")
    assert any("a custom op registered only where a CUDA-only package loads" in r and "`flash_attn_3`" in r
               for r in scopes.values()), scopes
    # (the nearest true case: an op of plain torch, registered for CUDA only)
    assert 26 in kept
    # (an extension of the project's own, which may have an NPU build: kept)
    assert findings_at(report, "pkg/own.py", "NPU990")


# ------------------------------------------------------------------ BO#2: FP8 in a CPU-marked test module

_CPU_TEST = """\
import pytest
import torch

pytestmark = pytest.mark.cpu_test

FP8_DTYPE = torch.float8_e4m3fn


def quantize(x):
    return x.to(FP8_DTYPE)


def test_roundtrip():
    x = torch.randn(4, 4)
    y = quantize(x).to(torch.float32)
    assert torch.allclose(x, y, atol=0.5)
"""

_GPU_TEST = _CPU_TEST.replace("pytestmark = pytest.mark.cpu_test", "pytestmark = pytest.mark.slow_test")
_CPU_MARKED_ON_DEVICE = _CPU_TEST.replace("torch.randn(4, 4)", "torch.randn(4, 4, device=\"cuda\")")


def test_fp8_in_a_cpu_marked_test_module_naming_no_device_is_a_scope(tmp_path):
    root = write_project(tmp_path, {"tests/test_fp8_quant.py": _CPU_TEST, "tests/test_fp8_other.py": _GPU_TEST,
                                    "tests/test_fp8_dev.py": _CPU_MARKED_ON_DEVICE})
    report = migrate_json(root)
    assert not findings_at(report, "tests/test_fp8_quant.py", "NPU913")
    scopes = [r for s in report["skipped"] if s.get("path") == "tests/test_fp8_quant.py"
              for r in [s.get("reason", "")] if "(NPU913)" in r]
    assert any("marked `pytest.mark.cpu_test`" in r for r in scopes), scopes
    # (no CPU marker, or a device named: kept)
    assert findings_at(report, "tests/test_fp8_other.py", "NPU913")
    assert findings_at(report, "tests/test_fp8_dev.py", "NPU913")


# ------------------------------------------------------------------ BQ#3: a profile around a CUDA-only library

_BENCH = """\
import torch
from torch.profiler import ProfilerActivity, profile


def bench_kernel(attn, q):
    from flashinfer.testing import bench_gpu_time as bench_fn

    return bench_fn(lambda: attn.run(q))


def profile_it(attn, q):
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        attn._forward_flashinfer(q.clone())
        torch.accelerator.synchronize()
    return prof


def profile_torch(q):
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        torch.matmul(q, q)
    return prof
"""


def test_profiler_around_a_reported_cuda_only_library_folds_into_it(tmp_path):
    root = write_project(tmp_path, {"benchmarks/bench_attn.py": _BENCH,
                                    "benchmarks/bench_torch.py": _BENCH.replace("attn._forward_flashinfer",
                                                                                "attn.forward")})
    report = migrate_json(root)
    profiles = findings_at(report, "benchmarks/bench_attn.py", "NPU935")
    library = findings_at(report, "benchmarks/bench_attn.py", "NPU911")
    assert 12 not in profiles and 6 in library
    assert "profiler's CUDA activity `ProfilerActivity.CUDA` (NPU935, line 12)" in library[6]["message"]
    # (the nearest true case: a profile of plain torch stays)
    assert 19 in profiles
    # (a profiled body that is not the library's: kept)
    assert 12 in findings_at(report, "benchmarks/bench_torch.py", "NPU935")


# ------------------------------------------------------------------ BP#39: the generic vLLM note once per run

_VLLM_ENGINE = """\
from vllm import LLM, SamplingParams


def generate(model, prompts):
    llm = LLM(model=model)
    return llm.generate(prompts, SamplingParams(temperature=0.0))
"""

_VLLM_TRAINER = """\
from vllm import LLM


def build(model):
    return LLM(model=model, enforce_eager=True)
"""


def test_generic_vllm_note_is_given_once_per_run(tmp_path):
    root = write_project(tmp_path, {"pkg/engine.py": _VLLM_ENGINE, "pkg/trainer.py": _VLLM_TRAINER,
                                    "scripts/infer.py": _VLLM_ENGINE.replace("0.0", "0.5")})
    report = migrate_json(root)
    notes = [f for f in report["findings"] if f["code"] == "NPU916" and not f["fixable"]]
    assert [f["path"] for f in notes] == ["pkg/engine.py"], notes
    assert "also holds for 2 more import sites, given here once: pkg/trainer.py:1, scripts/infer.py:1" \
        in notes[0]["message"]
    folded = [s["reason"] for s in report["skipped"] if "(NPU916)" in s.get("reason", "")]
    assert len(folded) == 2 and all("the vLLM note given once for the run at pkg/engine.py:1" in r
                                    for r in folded), folded


def test_single_vllm_note_stays(tmp_path):
    root = write_project(tmp_path, {"pkg/engine.py": _VLLM_ENGINE})
    report = migrate_json(root)
    notes = [f for f in report["findings"] if f["code"] == "NPU916" and not f["fixable"]]
    assert len(notes) == 1 and "given here once" not in notes[0]["message"]


# ------------------------------------------------------------------ BP#24: a test beside its Triton kernel module

_KERNEL = """\
import torch
import triton
import triton.language as tl


@triton.jit
def _scale_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask), mask=mask)


def to_fp8(x, dtype):
    out = torch.empty_like(x, dtype=dtype)
    _scale_kernel[(1,)](x, out, x.numel(), BLOCK=1024)
    return out
"""

_KERNEL_TEST = """\
import torch

from pkg.kernels.quant import to_fp8
from pkg.reference import reference_fp8


def test_to_fp8():
    assert torch.cuda.is_available()
    x = torch.randn(16, device="cuda")
    y = to_fp8(
        x,
        torch.float8_e4m3fn,
    )
    ref = reference_fp8(x, torch.float8_e4m3fn)
    assert torch.equal(y.float(), ref.float())
"""

_OWN_CAST_TEST = _KERNEL_TEST.replace("ref = reference_fp8(x, torch.float8_e4m3fn)",
                                      "ref = x.to(torch.float8_e4m3fn)")


def test_fp8_test_beside_its_triton_kernel_module_folds_into_it(tmp_path):
    root = write_project(tmp_path, {"pkg/__init__.py": "", "pkg/kernels/__init__.py": "",
                                    "pkg/kernels/quant.py": _KERNEL, "pkg/kernels/quant_test.py": _KERNEL_TEST,
                                    "pkg/kernels/test_quant.py": _OWN_CAST_TEST,
                                    "pkg/reference.py": "def reference_fp8(x, dtype):\n    return x\n"})
    report = migrate_json(root)
    assert not findings_at(report, "pkg/kernels/quant_test.py", "NPU913")
    kernel = [f for f in findings_at(report, "pkg/kernels/quant.py", "NPU910").values() if f["severity"] == "error"]
    assert kernel and "`torch.float8_e4m3fn` (NPU913) in `pkg/kernels/quant_test.py` (lines 12, 14)" \
        in kernel[0]["message"], kernel
    # (the nearest true case: a test that casts to FP8 itself keeps its finding)
    assert findings_at(report, "pkg/kernels/test_quant.py", "NPU913")


# ------------------------------------------------------------------ BQ#35: a Triton helper's probed descriptor alias

_ASCEND_BACKEND = """\
import torch
import triton


def run(x):
    return triton.cdiv(x.numel(), 128)
"""

_OP = """\
import triton
import triton.language as tl


@triton.jit
def safe_exp(x):
    return tl.exp(tl.where(x <= 0, x, float("-inf")))


if hasattr(triton.language, "_experimental_make_tensor_descriptor"):
    make_tensor_descriptor = triton.language._experimental_make_tensor_descriptor
elif hasattr(triton.language, "make_tensor_descriptor"):
    make_tensor_descriptor = triton.language.make_tensor_descriptor
else:
    \"\"\"Fallback where TMA is not supported.\"\"\"

    @triton.jit
    def make_tensor_descriptor(base, shape, strides, block_shape):
        return None
"""

_TMA = """\
import triton
import triton.language as tl


@triton.jit
def copy_kernel(x_ptr, n, BLOCK: tl.constexpr):
    desc = tl.make_tensor_descriptor(x_ptr, [n], [1], [BLOCK])
    desc.store([0], desc.load([0]))
"""

_CHUNK = """\
import triton
import triton.language as tl

from pkg.fla.op import safe_exp


@triton.jit
def chunk_kernel(x_ptr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    tl.store(x_ptr + offs, safe_exp(tl.load(x_ptr + offs)))
"""


def test_triton_helper_with_a_probed_descriptor_alias_gets_the_projects_classification(tmp_path):
    root = write_project(tmp_path, {"pkg/npu/ascend_backend.py": _ASCEND_BACKEND, "pkg/fla/op.py": _OP,
                                    "pkg/fla/chunk.py": _CHUNK, "pkg/fla/tma.py": _TMA})
    report = migrate_json(root)
    assert not [f for f in findings_at(report, "pkg/fla/op.py", "NPU910").values() if f["severity"] != "info"]
    scopes = scopes_at(report, "pkg/fla/op.py", "NPU910")
    assert any("the project runs Triton on its own NPU backend" in r and "`hasattr(triton.language, ...)`" in r
               for r in scopes.values()), scopes
    assert scopes_at(report, "pkg/fla/chunk.py", "NPU910")
    # (the nearest true case: a kernel that builds a TMA descriptor keeps its error)
    assert [f for f in findings_at(report, "pkg/fla/tma.py", "NPU910").values() if f["severity"] == "error"]
