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
