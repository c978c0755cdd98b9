"""Precision wave 31, helper h154 (issue #16): gates and harmless uses a reviewer sees in the
finding's own file (round-31 audit rows FB#24, FA#28, ...). Each false case is paired with its
nearest true case, which stays reported."""

from __future__ import annotations

from .precision_helpers import migrate_json, write_project


def _hits(report: dict, path: str, code: str) -> list[dict]:
    return [f for f in report["findings"] if f["path"] == path and f["code"] == code]


def _moot(report: dict, path: str) -> dict[int, str]:
    return {s["start_line"]: s["reason"] for s in report["skipped"] if s.get("path") == path}


# ------------------------------------------------------------- FB#24: a capability bound to a name, then a raise
BOUND_CAPABILITY = '''import torch


def capture(fn):
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fn()
    return graph


def main():
    world_size = 2
    capability = torch.cuda.get_device_capability(torch.device("cuda", 0))
    if world_size not in (2, 4, 8) or capability not in ((10, 0), (10, 3)):
        raise RuntimeError("This benchmark targets SM100/SM103")
    capture(lambda: None)


if __name__ == "__main__":
    main()
'''

# nearest true case: the same raise fires only on capable hardware, so an NPU host goes on to capture
RAISE_ON_CAPABLE = BOUND_CAPABILITY.replace("capability not in ((10, 0), (10, 3))", "capability in ((10, 0), (10, 3))")
# and a name bound twice is no longer the capability's alone
REBOUND = BOUND_CAPABILITY.replace("    if world_size", "    capability = (10, 0) if world_size > 4 else capability\n    if world_size")


def test_raise_on_a_capability_bound_to_a_name_keeps_the_capture_off_the_npu_and_a_raise_on_capable_hardware_stays(tmp_path):
    root = write_project(tmp_path, {"benchmarks/bench_gated.py": BOUND_CAPABILITY,
                                    "benchmarks/bench_capable.py": RAISE_ON_CAPABLE,
                                    "benchmarks/bench_rebound.py": REBOUND})
    report = migrate_json(root)
    assert not _hits(report, "benchmarks/bench_gated.py", "NPU202")
    moot = _moot(report, "benchmarks/bench_gated.py")
    assert 5 in moot and "`capability` bound to `get_device_capability()`" in moot[5]
    assert [(f["line"], f["severity"]) for f in _hits(report, "benchmarks/bench_capable.py", "NPU202")] \
        == [(5, "error")]
    assert [(f["line"], f["severity"]) for f in _hits(report, "benchmarks/bench_rebound.py", "NPU202")] \
        == [(5, "error")]


# ------------------------------------------------------------- FA#28: a skip on a flag only a failed import clears
FLAG_SKIPPED = '''from unittest.mock import Mock

import pytest

try:
    import flashinfer.mamba  # noqa: F401

    HAS_FLASHINFER = True
except ImportError:
    HAS_FLASHINFER = False


@pytest.mark.skipif(not HAS_FLASHINFER, reason="flashinfer not installed")
def test_forwards_algorithm(monkeypatch):
    import flashinfer.mamba

    kernel = Mock()
    monkeypatch.setattr(flashinfer.mamba, "selective_state_update", kernel)
    assert kernel is not None
'''

# nearest true cases: the same skip, the flag also set from the environment (an NPU host may set it)
FLAG_ALSO_SET = FLAG_SKIPPED.replace("\n\n@pytest.mark", '\nHAS_FLASHINFER = HAS_FLASHINFER or bool(__import__("os").environ.get("FI"))\n\n\n@pytest.mark')
# and a skip where the package IS present: the test runs where it is missing, as on an NPU host
FLAG_INVERTED = FLAG_SKIPPED.replace("skipif(not HAS_FLASHINFER", "skipif(HAS_FLASHINFER")


def test_skip_on_a_flag_only_a_failed_import_clears_keeps_the_test_off_the_npu_and_a_flag_set_elsewhere_stays(tmp_path):
    root = write_project(tmp_path, {"tests/test_skipped.py": FLAG_SKIPPED, "tests/test_also_set.py": FLAG_ALSO_SET,
                                    "tests/test_inverted.py": FLAG_INVERTED})
    report = migrate_json(root)
    assert not [f for f in _hits(report, "tests/test_skipped.py", "NPU911") if f["severity"] != "info"]
    # (the lazy import joins the probe's named scope: both run as written, the test is skipped there)
    assert any(s["start_line"] <= 15 <= s["end_line"] for s in report["skipped"] if s["path"] == "tests/test_skipped.py")
    for path in ("tests/test_also_set.py", "tests/test_inverted.py"):
        lazy = [f for f in _hits(report, path, "NPU911") if f["severity"] == "error"]
        assert lazy and any(f["line"] > 14 or any(a[0] > 14 for a in f.get("also", ())) for f in lazy), path


def test_probe_flags_need_a_package_with_no_npu_build_and_a_false_fallback():
    import ast

    from npu_migrate.probeflags31 import false_flags

    def flags(source: str) -> frozenset:
        return false_flags(ast.parse(source))

    assert flags("try:\n    import flashinfer\n    HAS = True\nexcept ImportError:\n    HAS = False\n") == {"HAS"}
    assert flags("try:\n    from flash_attn import f\n    OK = f is not None\nexcept (ImportError, AttributeError):\n"
                 "    OK = None\n") == {"OK"}
    # Triton is installed on an NPU host (triton-ascend): its flag stays undecided
    assert not flags("try:\n    import triton\n    HAS = True\nexcept ImportError:\n    HAS = False\n")
    # the flag bound before the import, a true fallback, a handler that does not catch ImportError
    assert not flags("try:\n    HAS = True\n    import flashinfer\nexcept ImportError:\n    HAS = False\n")
    assert not flags("try:\n    import flashinfer\n    HAS = True\nexcept ImportError:\n    HAS = True\n")
    assert not flags("try:\n    import flashinfer\n    HAS = True\nexcept ValueError:\n    HAS = False\n")
    # set again by a function's `global`
    assert not flags("try:\n    import flashinfer\n    HAS = True\nexcept ImportError:\n    HAS = False\n"
                     "def enable():\n    global HAS\n    HAS = True\n")


# ------------------------------------------------------------- FA#12: an attribute a test sets to a mock
MOCKED_LIBRARY = '''from unittest.mock import Mock

from pkg.comm import Communicator, NCCLLibrary


def test_suspend_reaches_the_library_once():
    comm = object.__new__(Communicator)
    comm.nccl = Mock()
    comm.suspend()
    comm.suspend()
    assert comm.nccl.ncclCommSuspend.call_count == 1


def test_real_library_initialises():
    comm = object.__new__(Communicator)
    comm.nccl = NCCLLibrary("libnccl.so.2")
    comm.nccl.ncclCommInitRank(2, None, 0)


def test_mock_replaced_by_the_real_library():
    comm = object.__new__(Communicator)
    comm.nccl = Mock()
    comm.nccl = NCCLLibrary("libnccl.so.2")
    comm.nccl.ncclCommInitRank(2, None, 0)
'''


def test_attribute_a_test_sets_to_a_mock_is_moot_and_the_real_library_stays(tmp_path):
    from npu_migrate import mocked29

    root = write_project(tmp_path, {"tests/test_comm.py": MOCKED_LIBRARY})
    report = migrate_json(root)
    kept = [f for f in _hits(report, "tests/test_comm.py", "NPU990") if f["severity"] != "info"]
    places = sorted({f["line"] for f in kept} | {a[0] for f in kept for a in f.get("also", ())})
    assert places == [16, 17, 22, 23, 24]  # the real library (and the mock replaced by it): kept
    moot = _moot(report, "tests/test_comm.py")
    assert 8 in moot and mocked29.MOCK_ATTRIBUTE in moot[8]


# ------------------------------------------------------------- FB#13: CPU tensors cast to FP8 in a comprehension
CPU_SHARDS = '''import torch
from safetensors.torch import save_file


def test_shards_round_trip(tmp_path):
    weights = {
        f"embedding.shard_{i}.weight": torch.arange(i * 8, (i + 1) * 8)
        .reshape(4, 2)
        .to(torch.float8_e4m3fn)
        for i in range(2)
    }
    save_file(weights, str(tmp_path / "model.safetensors"))
'''

# nearest true case: the same shards made on the GPU
GPU_SHARDS = CPU_SHARDS.replace("torch.arange(i * 8, (i + 1) * 8)", 'torch.arange(i * 8, (i + 1) * 8, device="cuda")')


def test_cpu_tensors_cast_to_fp8_in_a_range_comprehension_are_data_and_device_tensors_stay(tmp_path):
    root = write_project(tmp_path, {"tests/test_cpu_shards.py": CPU_SHARDS, "tests/test_gpu_shards.py": GPU_SHARDS})
    report = migrate_json(root)
    assert not _hits(report, "tests/test_cpu_shards.py", "NPU913")
    moot = _moot(report, "tests/test_cpu_shards.py")
    assert any("FP8 data on the CPU" in why for why in moot.values()), moot
    assert [(f["line"], f["severity"]) for f in _hits(report, "tests/test_gpu_shards.py", "NPU913")] == [(9, "error")]


# ------------------------------------------------------------- FC#21, FA#22: exits on another module's support check
SUPPORT_PLATFORM = '''class Platform:
    def is_cuda(self) -> bool:
        return False


current_platform = Platform()
'''

SUPPORT_KERNELS = '''from pkg.platforms import current_platform


class BaseKernel:
    @classmethod
    def is_supported(cls, compute_capability=None):
        del compute_capability
        if not current_platform.is_cuda():
            return False, "only CUDA"
        return True, None


class Fp4Kernel(BaseKernel):
    def apply(self, x):
        return x


def choose(candidates):
    for kernel in candidates:
        ok, why = kernel.is_supported()
        if ok:
            return kernel
    return None


def is_mega_supported():
    available, reason = _probe()
    if not available:
        return False, reason
    if not current_platform.is_cuda():
        return False, "needs CUDA"
    return True, None


def _probe():
    return True, None
'''

SUPPORT_TEST = '''import pytest
import torch

from pkg.kernels import Fp4Kernel


def test_fp4_graph_replay():
    supported, reason = Fp4Kernel.is_supported()
    if not supported:
        pytest.skip(reason)
    scales = torch.ones(4, device="cuda").to(torch.float8_e4m3fn)
    assert scales is not None


def test_fp4_warns_only():
    supported, reason = Fp4Kernel.is_supported()
    if not supported:
        print(reason)
    scales = torch.ones(4, device="cuda").to(torch.float8_e4m3fn)
    assert scales is not None
'''

SUPPORT_BENCH = '''import torch

from pkg.kernels import is_mega_supported


def time_graph(fn):
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        fn()
    return g


def bench(n):
    return time_graph(lambda: n)


def main():
    ok, reason = is_mega_supported()
    if not ok:
        raise SystemExit(reason)
    bench(4)


if __name__ == "__main__":
    main()
'''

# nearest true case: the tuple kept whole, `if not ok:` never exits (a tuple is true)
SUPPORT_BENCH_WHOLE = SUPPORT_BENCH.replace("    ok, reason = is_mega_supported()", "    ok = reason = is_mega_supported()")


def test_exit_on_another_modules_support_check_keeps_the_rest_off_the_npu_and_a_warning_or_a_whole_tuple_stays(tmp_path):
    from npu_migrate.flags16 import BRANCH

    root = write_project(tmp_path, {"pkg/__init__.py": "", "pkg/platforms.py": SUPPORT_PLATFORM,
                                    "pkg/kernels.py": SUPPORT_KERNELS, "tests/test_fp4.py": SUPPORT_TEST,
                                    "benchmarks/bench_mega.py": SUPPORT_BENCH,
                                    "benchmarks/bench_whole.py": SUPPORT_BENCH_WHOLE})
    report = migrate_json(root)
    assert [(f["line"], f["severity"]) for f in _hits(report, "tests/test_fp4.py", "NPU913")] == [(19, "error")]
    moot = _moot(report, "tests/test_fp4.py")
    assert 11 in moot and BRANCH in moot[11] and "`BaseKernel.is_supported()` answers no on an NPU host" in moot[11]
    assert not _hits(report, "benchmarks/bench_mega.py", "NPU202")
    moot = _moot(report, "benchmarks/bench_mega.py")
    assert 7 in moot and "`time_graph` is reached only from code an NPU host does not run" in moot[7] \
        and "`is_mega_supported()` (pkg/kernels.py:26) answers no on an NPU host" in moot[7]
    assert [(f["line"], f["severity"]) for f in _hits(report, "benchmarks/bench_whole.py", "NPU202")] == [(7, "error")]
