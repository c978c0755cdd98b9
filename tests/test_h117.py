"""Precision wave 26, helper h117 (issue #16): vLLM's other files and tests.

Top-level benchmarks/examples/scripts/tools files are no sites that keep platform-only code
reached (npu_migrate/shipped26.py; round 19 AZ#1: a LoRA Triton-kernel package that only the CUDA
platform's `get_punica_wrapper()` class path reaches, imported also by two benchmark scripts;
round 20 BG#3: a vendor MLA backend the CUDA platform's priority list selects, which a benchmark
runner also names). Each shape is paired with the nearest case that stays reported."""

from __future__ import annotations

from npu_migrate.shipped26 import unshipped

from .precision_helpers import migrate_json, write_project
from .test_h80 import CPU_PLATFORM, CUDA_PLATFORM, REGISTRY, WRAPPER_CPU

WRAPPER_GPU = '''\
from proj.lora.ops import lora_expand


class WrapperGPU:
    def expand(self, x):
        return lora_expand(x)
'''

KERNELS_INIT = '''\
from proj.lora.ops.expand_op import lora_expand

__all__ = ["lora_expand"]
'''

EXPAND_OP = '''\
import triton
import triton.language as tl


@triton.jit
def _expand_kernel(x_ptr, n):
    pid = tl.program_id(0)
    tl.store(x_ptr + pid, tl.load(x_ptr + pid) * 2)


def lora_expand(x):
    _expand_kernel[(x.numel(),)](x, x.numel())
    return x
'''

BENCH = '''\
import torch

from proj.lora.ops import lora_expand


def main():
    x = torch.ones(16, device="cuda")
    lora_expand(x)
    torch.cuda.synchronize()


if __name__ == "__main__":
    main()
'''

RUNNER = '''\
from proj.lora.ops.expand_op import lora_expand


def run(x):
    return lora_expand(x)
'''

KERNEL = "proj/lora/ops/expand_op.py"


def _files(**extra):
    files = {
        "proj/__init__.py": "",
        "proj/platforms/__init__.py": REGISTRY,
        "proj/platforms/cuda.py": CUDA_PLATFORM,
        "proj/platforms/cpu.py": CPU_PLATFORM,
        "proj/lora/__init__.py": "",
        "proj/lora/wrapper_gpu.py": WRAPPER_GPU,
        "proj/lora/wrapper_cpu.py": WRAPPER_CPU,
        "proj/lora/ops/__init__.py": KERNELS_INIT,
        KERNEL: EXPAND_OP,
        "benchmarks/kernels/bench_expand.py": BENCH,
    }
    files.update(extra)
    return files


def _kernel_errors(report: dict, path: str = KERNEL) -> list[dict]:
    return [f for f in report["findings"] if f["path"] == path and f["code"] == "NPU910"
            and f["severity"] != "info"]


def _platform_scopes(report: dict, path: str = KERNEL) -> list[dict]:
    from npu_migrate.platformlayer23 import PLATFORM_ONLY

    return [s for s in report["skipped"] if s.get("path") == path and "start_line" in s
            and PLATFORM_ONLY in s["reason"]]


def test_a_benchmark_importing_platform_only_kernels_keeps_them_unreached(tmp_path):
    """AZ#1: the kernel package is imported by the wrapper that only the CUDA platform class names
    by a dotted class path, and by a top-level benchmarks/ script, which no installed package
    holds: the kernels become the platform layer's named scope, naming the class, the registry
    line and the library site that reaches them; the benchmark's own findings stay."""
    report = migrate_json(write_project(tmp_path, _files()))
    assert not _kernel_errors(report), report["findings"]
    scopes = _platform_scopes(report)
    assert scopes, report["skipped"]
    reason = scopes[0]["reason"]
    assert "not run on an NPU host (NPU910)" in reason and "`CudaPlatform` (proj/platforms/cuda.py)" in reason, reason
    assert "proj/platforms/__init__.py:13" in reason and "benchmarks/" not in reason, reason
    bench = [f for f in report["findings"] if f["path"] == "benchmarks/kernels/bench_expand.py"]
    assert bench, report["findings"]


def test_a_shipped_module_importing_the_kernels_keeps_them_reported(tmp_path):
    """The nearest true case: a library module of the package (not platform code) imports the same
    kernels, so an NPU host loads them: the error stays, benchmarks or not."""
    report = migrate_json(write_project(tmp_path, _files(**{"proj/runner.py": RUNNER})))
    assert _kernel_errors(report), report["findings"]
    assert not _platform_scopes(report), report["skipped"]


def test_a_tools_folder_inside_the_package_ships(tmp_path):
    """Only the repository's top-level folders are left out of a build: `proj/tools/` is part of
    the installed package, so its import keeps the kernels reported."""
    files = _files(**{"proj/tools/__init__.py": "", "proj/tools/bench_expand.py": BENCH})
    report = migrate_json(write_project(tmp_path, files))
    assert _kernel_errors(report), report["findings"]


def test_kernels_only_a_benchmark_imports_and_no_platform_reaches_stay(tmp_path):
    """No platform class reaches the kernels (the wrapper is imported by shipped code too): the
    benchmark sites being set aside changes nothing there."""
    files = _files(**{"proj/runner.py": "from proj.lora.wrapper_gpu import WrapperGPU\n"})
    report = migrate_json(write_project(tmp_path, files))
    assert _kernel_errors(report), report["findings"]


def test_unshipped_folders():
    assert unshipped("benchmarks/kernels/bench.py") and unshipped("examples/run.py")
    assert unshipped("scripts/x.py") and unshipped("tools/y.py")
    assert not unshipped("proj/tools/y.py") and not unshipped("benchmarks.py")
    assert not unshipped("proj/benchmarks/b.py")


# ---------------------------------------------------------------- kernelgates26.py (BE#1)
PLATFORM = '''\
import torch


class Platform:
    def is_cuda(self):
        return torch.version.cuda is not None


current_platform = Platform()
'''

TRITON_UTILS = '''\
import importlib.util

HAS_TRITON = importlib.util.find_spec("triton") is not None

if HAS_TRITON:
    import triton
    import triton.language as tl
else:
    from proj.triton_placeholder import tl, triton  # noqa: F401
'''

PLACEHOLDER = '''\
class _Placeholder:
    def jit(self, fn=None, **kw):
        return fn if fn is not None else (lambda f: f)


triton = _Placeholder()
tl = _Placeholder()
'''

FUSED = '''\
import torch

from proj.platform import current_platform
from proj.triton_utils import tl, triton


@triton.jit
def scale_offset(row, GROUPS: tl.constexpr):
    return row * GROUPS


@triton.jit
def _norm_quant_kernel(x_ptr, out_ptr, n):
    pid = tl.program_id(0)
    tl.store(out_ptr + scale_offset(pid, 4), tl.load(x_ptr + pid))


def fused_norm_quant(x):
    out = torch.empty(x.shape, dtype=torch.float8_e4m3fn, device=x.device)
    _norm_quant_kernel[(x.numel(),)](x, out, x.numel())
    return out


def can_fuse(linears):
    if not current_platform.is_cuda():
        return False
    return all(getattr(l, "mxfp8", False) for l in linears)


def can_fuse_any(linears):
    return all(getattr(l, "mxfp8", False) for l in linears)
'''

ATTENTION = '''\
from functools import cached_property

import torch


class Attention(torch.nn.Module):
    def __init__(self, rank):
        super().__init__()
        self.rank = rank
        self.wq = torch.nn.Linear(rank, rank)

    @cached_property
    def _can_fuse(self) -> bool:
        from proj.ops.fused import CHECK

        linears = [self.wq]
        return CHECK(linears)

    def forward(self, x):
        if self.rank % 32 == 0 and self._can_fuse:
            from proj.ops.fused import fused_norm_quant

            return fused_norm_quant(x)
        return x
'''

ENGRAM = '''\
import torch

from proj.ops.fused import scale_offset
from proj.triton_utils import tl, triton


@triton.jit
def _hash_kernel(x_ptr, n):
    pid = tl.program_id(0)
    tl.store(x_ptr + scale_offset(pid, 2), pid)


def hash_tokens(x):
    _hash_kernel[(x.numel(),)](x, x.numel())
    return x
'''

FUSED_PATH = "proj/ops/fused.py"


def _gated_files(check="can_fuse", **extra):
    files = {
        "proj/__init__.py": "",
        "proj/ops/__init__.py": "",
        "proj/platform.py": PLATFORM,
        "proj/triton_utils.py": TRITON_UTILS,
        "proj/triton_placeholder.py": PLACEHOLDER,
        FUSED_PATH: FUSED,
        "proj/attention.py": ATTENTION.replace("CHECK", check),
    }
    files.update(extra)
    return files


def _open_at(report: dict, path: str, code: str) -> dict[int, dict]:
    return {f["line"]: f for f in report["findings"] if f["path"] == path and f["code"] == code
            and not f["fixable"] and f["severity"] != "info"}


def _branch_scopes(report: dict, path: str, code: str) -> dict[int, str]:
    prefix = f"not run on an NPU host ({code}): in a branch an NPU host does not take"
    return {s["start_line"]: s["reason"] for s in report["skipped"]
            if s.get("path") == path and "start_line" in s and s["reason"].startswith(prefix)}


def test_kernels_launched_only_under_a_property_false_there_are_a_named_scope(tmp_path):
    """BE#1: the kernel's only launcher is called only under `self._can_fuse`, a cached_property
    returning a function that returns False first thing off CUDA: the kernel (its decorator line)
    and the launcher's FP8 line are named scopes naming the gate and the property."""
    report = migrate_json(write_project(tmp_path, _gated_files()))
    assert not _open_at(report, FUSED_PATH, "NPU910"), report["findings"]
    assert not _open_at(report, FUSED_PATH, "NPU913"), report["findings"]
    kernels = _branch_scopes(report, FUSED_PATH, "NPU910")
    assert 7 in kernels and 12 in kernels, report["skipped"]
    reason = kernels[12]
    assert "the Triton kernel `_norm_quant_kernel`" in reason and "proj/attention.py:23" in reason, reason
    assert "returned by the property at proj/attention.py:13 (`return can_fuse(linears)`)" in reason, reason
    assert 19 in _branch_scopes(report, FUSED_PATH, "NPU913"), report["skipped"]


def test_a_property_the_interpreter_cannot_read_false_keeps_the_kernels(tmp_path):
    """The nearest true case: the property returns a check with no platform test, which may be
    True on an NPU host: the kernel stays reported (with the FP8 that feeds it), nothing is a scope."""
    report = migrate_json(write_project(tmp_path, _gated_files(check="can_fuse_any")))
    assert _open_at(report, FUSED_PATH, "NPU910"), report["findings"]
    assert not _branch_scopes(report, FUSED_PATH, "NPU910") and not _branch_scopes(report, FUSED_PATH, "NPU913")


def test_a_property_with_a_setter_or_an_override_is_not_read(tmp_path):
    """`self._can_fuse = ...` assigned anywhere, or a second `def _can_fuse(` in the run (an
    override): the gate is unknown, the kernel stays."""
    setter = {"proj/other.py": "def tune(layer):\n    layer._can_fuse = True\n"}
    override = {"proj/sub.py": ("from proj.attention import Attention\n\n\nclass Sub(Attention):\n"
                                "    @property\n    def _can_fuse(self):\n        return True\n")}
    for extra in (setter, override):
        report = migrate_json(write_project(tmp_path / str(len(extra) + len(next(iter(extra)))), _gated_files(**extra)))
        assert _open_at(report, FUSED_PATH, "NPU910"), report["findings"]
        assert not _branch_scopes(report, FUSED_PATH, "NPU910"), report["skipped"]


def test_a_device_function_another_files_kernels_call_is_folded_into_their_finding(tmp_path):
    """BE#1's `mxfp8_scale_offset`: a device function of the gated file that another module's
    kernel (launched where it may run) also calls: its place is folded into that module's NPU910,
    which names it; the gated kernel stays a named scope."""
    report = migrate_json(write_project(tmp_path, _gated_files(**{"proj/engram.py": ENGRAM})))
    assert not _open_at(report, FUSED_PATH, "NPU910"), report["findings"]
    engram = _open_at(report, "proj/engram.py", "NPU910")
    assert engram, report["findings"]
    message = next(iter(engram.values()))["message"]
    assert "also the Triton device function `scale_offset` of proj/ops/fused.py (its NPU910 at line 7)" in message, message
    assert 12 in _branch_scopes(report, FUSED_PATH, "NPU910")


def test_a_device_function_also_used_outside_kernels_stays(tmp_path):
    """The nearest true case: the other module also hands the device function on outside its
    kernels (a value, not a call in a kernel): its place stays reported in its own file."""
    engram = ENGRAM + "\n\nHELPERS = [scale_offset]\n"
    report = migrate_json(write_project(tmp_path, _gated_files(**{"proj/engram.py": engram})))
    assert 7 in _open_at(report, FUSED_PATH, "NPU910"), report["findings"]
    message = next(iter(_open_at(report, "proj/engram.py", "NPU910").values()))["message"]
    assert "scale_offset" not in message, message
