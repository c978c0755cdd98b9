"""Code an NPU host never reaches because something before it fails first (audit round 32 GC#40,
GC#24, GC#26; helper h175, issue #16; npu_migrate/firstfail33.py): each false shape paired with the
nearest true case, which stays reported at its severity."""

from __future__ import annotations

from .precision_helpers import findings_at, migrate_json, moot_lines, write_project

# ----------------------------------------------------------------------------- GC#40
KERNEL = '''import torch
import triton
import triton.language as tl


@triton.jit
def _update_kernel(x_ptr, n: tl.constexpr):
    tl.store(x_ptr + tl.arange(0, n), 0)


def state_update(x):
    assert x.dim() == 1
    grid = (1,)
    _update_kernel[grid](x, x.numel())
    return x
'''
BENCH = '''import torch

from pkg.ops.ssm import state_update


def bench_config(x, num_iters: int = 10, num_warmup: int = 5):
    def _call_kernel():
        state_update(x)

    try:
        for _ in range(num_warmup):
            _call_kernel()
        torch.accelerator.synchronize()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            _call_kernel()
        graph.replay()
        return num_iters
    except Exception as e:
        print(f"config raised {e}")
        return None


def main():
    for n in (16, 32):
        x = torch.zeros(n)
        print(bench_config(x, num_iters=20))


if __name__ == "__main__":
    main()
'''
BENCH_PATH = "benchmarks/bench_state_update.py"


def _graph_line(text: str) -> int:
    return next(n for n, line in enumerate(text.splitlines(), 1) if "CUDAGraph()" in line)


def _bench_report(tmp_path, bench: str = BENCH, kernel: str = KERNEL) -> dict:
    files = {"pkg/__init__.py": "", "pkg/ops/__init__.py": "", "pkg/ops/ssm.py": kernel, BENCH_PATH: bench}
    return migrate_json(write_project(tmp_path, files))


def test_graph_capture_after_a_warmup_launching_a_reported_kernel_is_a_named_scope(tmp_path):
    """GC#40: the eager warm-up in the same `try` launches a Triton kernel its module reports as an
    NPU910 error; the graph capture after it is never reached on an NPU host (the `except` returns)."""
    report = _bench_report(tmp_path)
    line = _graph_line(BENCH)
    assert line not in findings_at(report, BENCH_PATH, "NPU202"), findings_at(report, BENCH_PATH, "NPU202")
    why = moot_lines(report["skipped"], "NPU202", BENCH_PATH)[line]
    assert "after a call that fails first on an NPU host" in why and "_update_kernel" in why, why
    # (the earlier failure stays reported: the kernel module's NPU910 error)
    assert any(f["severity"] == "error" for f in findings_at(report, "pkg/ops/ssm.py", "NPU910").values())


def test_warmup_count_a_caller_passes_keeps_the_capture(tmp_path):
    """Nearest true case: a caller passes `num_warmup=0`, so the capture may be the first launch:
    the NPU202 stays an error."""
    bench = BENCH.replace("bench_config(x, num_iters=20)", "bench_config(x, num_iters=20, num_warmup=0)")
    report = _bench_report(tmp_path, bench)
    assert findings_at(report, BENCH_PATH, "NPU202")[_graph_line(bench)]["severity"] == "error"


def test_warmup_count_of_a_function_handed_on_keeps_the_capture(tmp_path):
    """Nearest true case: the benchmark function is handed on by name (`run = bench_config`), so a
    call may pass any warm-up count, 0 included: the NPU202 stays an error."""
    bench = BENCH.replace("print(bench_config(x, num_iters=20))", "run = bench_config\n        print(run(x, 20, 0))")
    report = _bench_report(tmp_path, bench)
    assert findings_at(report, BENCH_PATH, "NPU202")[_graph_line(bench)]["severity"] == "error"


def test_warmup_of_a_portable_function_keeps_the_capture(tmp_path):
    """Nearest true case: the warmed-up function launches no Triton kernel (plain torch): the warm-up
    passes on an NPU host and the capture is reached: the NPU202 stays an error."""
    kernel = KERNEL.replace("    _update_kernel[grid](x, x.numel())\n", "    x.add_(1)\n")
    report = _bench_report(tmp_path, kernel=kernel)
    assert findings_at(report, BENCH_PATH, "NPU202")[_graph_line(BENCH)]["severity"] == "error"


def test_capture_after_a_try_whose_handler_goes_on_stays(tmp_path):
    """Nearest true case: the warm-up fails inside a `try` whose `except` only prints, and the capture
    follows the `try`: it is reached on an NPU host and stays an error."""
    bench = BENCH.replace('''        torch.accelerator.synchronize()
        graph = torch.cuda.CUDAGraph()''', '''        torch.accelerator.synchronize()
    except Exception as e:
        print(e)
    try:
        graph = torch.cuda.CUDAGraph()''')
    report = _bench_report(tmp_path, bench)
    assert findings_at(report, BENCH_PATH, "NPU202")[_graph_line(bench)]["severity"] == "error"


# ----------------------------------------------------------------------------- GC#24
UTILS = '''import torch


def is_cuda():
    return torch.cuda.is_available() and torch.version.cuda
'''
CUTLASS = '''import torch

from pkg.utils import is_cuda

_is_cuda = is_cuda()
if _is_cuda:
    from sgl_kernel import prepare_moe_input


def cutlass_experts(a):
    prepare_moe_input(a)
    return a
'''
SCRIPT = '''import torch
import triton
import triton.testing

from pkg.moe.cutlass_moe import cutlass_experts


def run_test(n):
    x = torch.randn(n)
    cutlass_lambda = lambda: cutlass_experts(x)
    for _ in range(10):
        _ = cutlass_lambda()
    ms = triton.testing.do_bench_cudagraph(cutlass_lambda, rep=100)
    print(ms)


if __name__ == "__main__":
    run_test(4)
'''
SCRIPT_PATH = "pkg/test/test_cutlass_moe.py"


def _script_report(tmp_path, script: str = SCRIPT, cutlass: str = CUTLASS) -> dict:
    files = {"pkg/__init__.py": "", "pkg/utils.py": UTILS, "pkg/moe/__init__.py": "",
             "pkg/moe/cutlass_moe.py": cutlass, "pkg/test/__init__.py": "", SCRIPT_PATH: script}
    return migrate_json(write_project(tmp_path, files))


def _bench_line(text: str) -> int:
    return next(n for n, line in enumerate(text.splitlines(), 1) if "do_bench_cudagraph(" in line)


def _triton_places(report: dict) -> dict:
    """{line: severity} of every place of the script's NPU910 findings."""
    out = {}
    for f in findings_at(report, SCRIPT_PATH, "NPU910").values():
        for line in [f["line"], *(a[0] for a in f.get("also", ()))]:
            out[line] = f["severity"]
    return out


def test_timing_after_a_warmup_of_a_cuda_gated_function_is_a_named_scope(tmp_path):
    """GC#24: the warm-up calls a function that always calls a name imported only under
    `if _is_cuda:` (that import named there); `do_bench_cudagraph` after it is never reached."""
    report = _script_report(tmp_path)
    line = _bench_line(SCRIPT)
    assert line not in _triton_places(report), _triton_places(report)
    why = moot_lines(report["skipped"], "NPU910", SCRIPT_PATH)[line]
    assert "after a call that fails first on an NPU host" in why and "prepare_moe_input" in why, why


def test_triton_imports_read_only_after_the_failing_warmup_run_as_written(tmp_path):
    """GC#24 (`import triton` at lines 4-5): Triton-Ascend imports them, and their only read is the
    timing the failing warm-up never reaches: named "runs as written", not an error."""
    report = _script_report(tmp_path)
    places = _triton_places(report)
    assert 2 not in places and 3 not in places, places
    reasons = [s["reason"] for s in report["skipped"] if s.get("path") == SCRIPT_PATH and s.get("start_line") in (2, 3)]
    assert len(reasons) == 2 and all("a Triton import read only after a call that fails first" in r for r in reasons)


def test_triton_import_also_read_before_the_warmup_stays(tmp_path):
    """Nearest true case: another function of the script times with `do_bench_cudagraph` without a
    failing warm-up: the import is read where an NPU host goes and stays with that finding."""
    script = SCRIPT.replace('if __name__ == "__main__":', "def time_plain(fn):\n"
                            "    return triton.testing.do_bench_cudagraph(fn, rep=100)\n\n\n"
                            'if __name__ == "__main__":')
    report = _script_report(tmp_path, script)
    places = _triton_places(report)
    assert places.get(2) == "error" and places.get(3) == "error", places


def test_timing_after_a_warmup_that_may_pass_stays(tmp_path):
    """Nearest true case: the function calls the gated name only under an `if`, so the warm-up may
    pass on an NPU host: `do_bench_cudagraph` is reached and stays an error."""
    cutlass = CUTLASS.replace("    prepare_moe_input(a)\n", "    if a.is_cuda:\n        prepare_moe_input(a)\n")
    report = _script_report(tmp_path, cutlass=cutlass)
    assert _triton_places(report).get(_bench_line(SCRIPT)) == "error", _triton_places(report)


def test_timing_before_the_warmup_stays(tmp_path):
    """Nearest true case: the timing comes before the warm-up: it is the first failure, kept."""
    script = SCRIPT.replace('''    for _ in range(10):
        _ = cutlass_lambda()
    ms = triton.testing.do_bench_cudagraph(cutlass_lambda, rep=100)''', '''    ms = triton.testing.do_bench_cudagraph(cutlass_lambda, rep=100)
    for _ in range(10):
        _ = cutlass_lambda()''')
    report = _script_report(tmp_path, script)
    assert _triton_places(report).get(_bench_line(script)) == "error", _triton_places(report)


# ----------------------------------------------------------------------------- GC#26
RAY_INIT = '''import ray.util.collective as collective

from colo.inference.async_manager import start_dynamic_batching


def setup(world_size, rank):
    collective.init_collective_group(world_size, rank, "nccl", "default")
    return start_dynamic_batching(rank)
'''
RAY_PATH = "colo/legacy/ray_dist_init.py"


def _colo_report(tmp_path, extra: dict | None = None, ray_init: str = RAY_INIT) -> dict:
    files = {"pyproject.toml": '[project]\nname = "colo"\n', "colo/__init__.py": "", "colo/inference/__init__.py": "", "colo/inference/engine.py": "X = 1\n",
             "colo/legacy/__init__.py": "", RAY_PATH: ray_init, **(extra or {})}
    return migrate_json(write_project(tmp_path, files))


def _nccl_line(text: str) -> int:
    return next(n for n, line in enumerate(text.splitlines(), 1) if '"nccl"' in line)


def test_module_importing_a_missing_module_of_its_package_is_a_named_scope(tmp_path):
    """GC#26: `colo.inference.async_manager` is not a module of the package, so the module cannot be
    imported on any host: its "nccl" is never reached (a named scope naming the import)."""
    report = _colo_report(tmp_path)
    line = _nccl_line(RAY_INIT)
    assert not [f for f in report["findings"] if f["path"] == RAY_PATH and not f["fixable"] and f["line"] == line]
    scopes = {s["start_line"]: s["reason"] for s in report["skipped"] if s.get("path") == RAY_PATH and "start_line" in s}
    why = next(r for first, r in scopes.items() if first <= line)
    assert "in a module that cannot be imported on any host" in why and "async_manager" in why, why


def test_module_importing_an_existing_module_keeps_its_finding(tmp_path):
    """Nearest true case: the same import of a module the package has (`colo.inference.engine`):
    the "nccl" is reached and stays reported."""
    ray_init = RAY_INIT.replace("colo.inference.async_manager import start_dynamic_batching",
                                "colo.inference.engine import X as start_dynamic_batching")
    report = _colo_report(tmp_path, ray_init=ray_init)
    line = _nccl_line(ray_init)
    assert [f for f in report["findings"] if f["path"] == RAY_PATH and not f["fixable"] and f["line"] == line
            and f["severity"] != "info"], [f for f in report["findings"] if f["path"] == RAY_PATH]


def test_module_of_an_unpackaged_folder_keeps_its_finding(tmp_path):
    """Nearest true case: the same tree without a packaging file may be a partial copy of its
    package (the missing module may exist where the package is installed): kept."""
    tree = {"colo/__init__.py": "", "colo/inference/__init__.py": "", "colo/legacy/__init__.py": "", RAY_PATH: RAY_INIT}
    report = migrate_json(write_project(tmp_path, tree))
    line = _nccl_line(RAY_INIT)
    assert [f for f in report["findings"] if f["path"] == RAY_PATH and not f["fixable"] and f["line"] == line
            and f["severity"] != "info"]


def test_module_the_build_makes_keeps_its_finding(tmp_path):
    """Nearest true case: the missing name is one the project's build makes (setup.py names it, as a
    compiled extension `_C` or a generated file): it may exist on the user's host, kept."""
    report = _colo_report(tmp_path, {"setup.py": 'ext = "colo.inference.async_manager"\n'})
    line = _nccl_line(RAY_INIT)
    assert [f for f in report["findings"] if f["path"] == RAY_PATH and not f["fixable"] and f["line"] == line
            and f["severity"] != "info"]


# ----------------------------------------------------------------------------- GC#38
QUANT_UTILS = '''import torch


def native_group_quant_fp8(x, group_size, dtype=torch.float8_e4m3fn):
    finfo = torch.finfo(dtype)
    return (x / finfo.max).to(dtype)


def native_matmul(a, b):
    return a @ b
'''
SKIPPED_TEST = '''import pytest
import torch

from tests.kernels.quant_utils import native_group_quant_fp8
from vllm.platforms import current_platform

capability = current_platform.get_device_capability()
if capability is None or capability < (9, 0):
    pytest.skip("FP8 Triton requires CUDA 9.0 or higher", allow_module_level=True)


def test_quant():
    x = torch.randn(4, 128)
    y = native_group_quant_fp8(x, 128)
    assert y.shape == x.shape
'''
UTILS_PATH = "tests/kernels/quant_utils.py"


def _helper_report(tmp_path, extra: dict | None = None) -> dict:
    files = {"vllm/__init__.py": "", "vllm/platforms/__init__.py": "current_platform = None\n",
             UTILS_PATH: QUANT_UTILS, "tests/kernels/test_block_fp8.py": SKIPPED_TEST, **(extra or {})}
    return migrate_json(write_project(tmp_path, files))


def test_helper_only_a_module_skipped_off_the_npu_uses_is_a_named_scope(tmp_path):
    """GC#38: the FP8 default of a test helper whose only user skips itself at module level on
    `get_device_capability()` (None on the NPU platform): never run there, a named scope."""
    report = _helper_report(tmp_path)
    assert 4 not in findings_at(report, UTILS_PATH, "NPU913"), findings_at(report, UTILS_PATH, "NPU913")
    why = moot_lines(report["skipped"], "NPU913", UTILS_PATH)[4]
    assert "in a helper only test modules skipped on an NPU host use" in why and "test_block_fp8.py" in why, why


def test_helper_another_test_runs_stays(tmp_path):
    """Nearest true case: a second test module without the skip calls the helper: it runs on an NPU
    host, and its FP8 cast stays reported."""
    other = SKIPPED_TEST.replace('''capability = current_platform.get_device_capability()
if capability is None or capability < (9, 0):
    pytest.skip("FP8 Triton requires CUDA 9.0 or higher", allow_module_level=True)
''', "")
    report = _helper_report(tmp_path, {"tests/kernels/test_plain_fp8.py": other})
    found = [f for f in report["findings"] if f["path"] == UTILS_PATH and f["code"] == "NPU913" and not f["fixable"]]
    assert found and found[0]["severity"] == "error", found
