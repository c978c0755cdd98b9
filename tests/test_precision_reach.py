"""Issue #16, precision: same-file guards that keep CUDA-only code off an NPU host (reach.py).

Each test writes a small fixture of its own and asserts that the finding behind the guard becomes
a named skipped scope (moot.py: "in a branch an NPU host does not take"), and that a nearby case
an NPU host does run is still reported at its severity.
"""

from __future__ import annotations

from pathlib import Path

from .precision_helpers import migrate_json, moot_lines, write_project

GRAPH = '''\
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            fn()
'''


def _run(tmp_path: Path, files: dict[str, str]) -> tuple[list[dict], list[dict]]:
    report = migrate_json(write_project(tmp_path, files))
    return report["findings"], report["skipped"]


def _reported(findings: list[dict], path: str, code: str) -> dict[int, str]:
    """{line: severity} of the findings of `code` in `path`, the places merged into them included."""
    out = {}
    for f in findings:
        if f["path"] == path and f["code"] == code:
            out[f["line"]] = f["severity"]
            for line, _column, _source in f.get("also", ()):
                out[line] = f["severity"]
    return out


def test_flag_false_at_every_call_makes_its_branch_untaken(tmp_path):
    # (vLLM's tests/kernels/moe shape: the callers compute the flag with `is_cuda_alike()`)
    text = '''\
import torch
from vllm.platforms import current_platform


def run_case(fn, a, use_cudagraph: bool = False):
    out = fn(a)
    if use_cudagraph:
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            out = fn(a)
    return out


def test_case(n):
    use_cudagraph = n >= 1024 and current_platform.is_cuda_alike()
    run_case(torch.relu, torch.ones(n), use_cudagraph=use_cudagraph)
    run_case(torch.relu, torch.ones(n))


def run_other(fn, a, capture=False):
    if capture:
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            fn(a)


def test_other(n):
    run_other(torch.relu, torch.ones(n), capture=n > 4)
'''
    findings, skipped = _run(tmp_path, {"tests/test_moe.py": text})
    moot = moot_lines(skipped, "NPU202", "tests/test_moe.py")
    assert 8 in moot and "use_cudagraph" in moot[8] and "in a branch an NPU host does not take" in moot[8]
    # the flag some call passes true (n > 4 is unknown on any host): still an error
    assert _reported(findings, "tests/test_moe.py", "NPU202").get(22) == "error"


def test_flag_passed_true_somewhere_keeps_the_finding(tmp_path):
    text = '''\
import torch
from vllm.platforms import current_platform


def _run(fn, use_graph=False):
    if use_graph:
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            fn()


def serve(fn):
    _run(fn, use_graph=current_platform.is_cuda())
    _run(fn, use_graph=True)
'''
    findings, skipped = _run(tmp_path, {"pkg/serve.py": text})
    assert not moot_lines(skipped, "NPU202", "pkg/serve.py")
    assert _reported(findings, "pkg/serve.py", "NPU202").get(7) == "error"
    # a flag false at every call but rebound in the function is not followed
    rebound = text.replace("    if use_graph:\n", "    use_graph = use_graph or fn.force\n    if use_graph:\n").replace(
        "    _run(fn, use_graph=True)\n", "")
    findings, skipped = _run(tmp_path / "rebound", {"pkg/serve.py": rebound})
    assert not moot_lines(skipped, "NPU202", "pkg/serve.py")
    assert _reported(findings, "pkg/serve.py", "NPU202").get(8) == "error"


def test_early_exit_and_the_helpers_only_it_reaches(tmp_path):
    # (a benchmark's main() leaves when the CUDA build's custom op is missing, before any capture)
    text = '''\
import sys
import torch


def _bench_graph(fn):
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fn()
    graph.replay()


def _bench(fn):
    fn()


def main():
    graph = "--graph" in sys.argv
    if not hasattr(torch.ops._C, "fused_kda_decode"):
        raise SystemExit("built without the kernel")
    bench = _bench_graph if graph else _bench
    bench(torch.ops._C.fused_kda_decode)
    stream = torch.cuda.Stream()


if __name__ == "__main__":
    main()
'''
    findings, skipped = _run(tmp_path, {"benchmarks/bench_kda.py": text})
    moot = moot_lines(skipped, "NPU202", "benchmarks/bench_kda.py")
    assert 6 in moot and "`_bench_graph` is reached only from code an NPU host does not run" in moot[6]
    assert not _reported(findings, "benchmarks/bench_kda.py", "NPU202")
    # without the exit, the same capture is reported
    plain = text.replace('    if not hasattr(torch.ops._C, "fused_kda_decode"):\n'
                         '        raise SystemExit("built without the kernel")\n', "")
    findings, skipped = _run(tmp_path / "plain", {"benchmarks/bench_kda.py": plain})
    assert _reported(findings, "benchmarks/bench_kda.py", "NPU202").get(6) == "error"


def test_a_failing_raise_is_not_a_quiet_exit(tmp_path):
    # `raise RuntimeError` fails on the NPU host: what follows stays reported
    text = '''\
import torch
from vllm.platforms import current_platform


def capture(fn):
    if not current_platform.is_cuda():
        raise RuntimeError("CUDA only")
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fn()
'''
    findings, skipped = _run(tmp_path, {"pkg/graphs.py": text})
    assert not moot_lines(skipped, "NPU202", "pkg/graphs.py")
    assert _reported(findings, "pkg/graphs.py", "NPU202").get(8) == "error"


def test_custom_op_skip_marks_the_module(tmp_path):
    text = '''\
import pytest
import torch


def _op_available() -> bool:
    return hasattr(torch.ops._C, "fused_qknorm_rope")


pytestmark = pytest.mark.skipif(not _op_available(), reason="op not built")


def test_graph():
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        torch.ops._C.fused_qknorm_rope()
'''
    findings, skipped = _run(tmp_path, {"tests/test_qknorm.py": text})
    assert not _reported(findings, "tests/test_qknorm.py", "NPU202")
    # a module whose skip asks for an op under another namespace still runs on the NPU
    other = text.replace("torch.ops._C,", "torch.ops._C_ascend,")
    findings, _skipped = _run(tmp_path / "other", {"tests/test_qknorm.py": other})
    assert _reported(findings, "tests/test_qknorm.py", "NPU202")


def test_platform_predicates_and_windows_branches(tmp_path):
    text = '''\
import os
import sys
import torch
from vllm.platforms import current_platform


class Runner:
    @classmethod
    def is_supported(cls):
        return current_platform.has_device_capability(90)

    def capture(self, fn):
        if self.is_supported():
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                fn()
        if os.name == "nt" or sys.platform.startswith("win"):
            stream = torch.cuda.Stream()
        if sys.platform == "linux":
            pass
        else:
            graph = torch.cuda.CUDAGraph()
        return fn

    def always(self, fn):
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            fn()
        return graph
'''
    findings, skipped = _run(tmp_path, {"pkg/serve.py": text})
    moot = moot_lines(skipped, "NPU202", "pkg/serve.py")
    assert 14 in moot and "self.is_supported()" in moot[14]
    assert 22 in moot  # (merged into the finding above: one scope from line 14 to 22)
    # the capture every host runs stays an error
    assert _reported(findings, "pkg/serve.py", "NPU202").get(26) == "error"


def test_autouse_fixture_skip_covers_the_tests(tmp_path):
    text = '''\
import pytest
import torch
from vllm.platforms import current_platform


@pytest.fixture(autouse=True, scope="module")
def _cuda_only():
    if not current_platform.is_cuda():
        pytest.skip("CUDA only")


def test_capture():
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        torch.relu(torch.ones(2))
'''
    findings, skipped = _run(tmp_path, {"tests/test_cap.py": text})
    assert not _reported(findings, "tests/test_cap.py", "NPU202")
    assert "autouse fixture" in moot_lines(skipped, "NPU202", "tests/test_cap.py")[13]
    # a fixture that is not autouse skips nothing by itself
    plain = text.replace("autouse=True, ", "")
    findings, _skipped = _run(tmp_path / "plain", {"tests/test_cap.py": plain})
    assert _reported(findings, "tests/test_cap.py", "NPU202").get(13) == "error"


def test_host_checks_are_decided_as_a_linux_host_answers():
    from npu_migrate.testscopes import false_on_npu

    for untaken in ('os.name == "nt"', 'sys.platform == "win32"', 'sys.platform.startswith("darwin")',
                    'platform.system() == "Windows"', 'sys.platform in ("win32", "cygwin")',
                    'hasattr(torch.ops._C, "fused_op")'):
        assert false_on_npu(untaken), untaken
    for taken_or_unknown in ('os.name == "posix"', 'sys.platform.startswith("linux")', 'sys.platform != "win32"',
                             'sys.platform == "freebsd"', 'hasattr(torch.ops._C_ascend, "op")',
                             'hasattr(torch.ops._C, name)'):
        assert not false_on_npu(taken_or_unknown), taken_or_unknown


def test_module_skip_on_a_capability_read_once(tmp_path):
    # vLLM's platform object has no capability on an NPU host (None): the module skips there
    text = '''\
import pytest
import torch
from vllm.platforms import current_platform

device_capability = current_platform.get_device_capability()
if device_capability is None or device_capability < (9, 0):
    pytest.skip("needs SM90", allow_module_level=True)


def test_graph():
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        torch.relu(torch.ones(2))
'''
    findings, skipped = _run(tmp_path, {"tests/test_fp8.py": text})
    assert not _reported(findings, "tests/test_fp8.py", "NPU202")
    assert 11 in moot_lines(skipped, "NPU202", "tests/test_fp8.py")
    # a skip that asks only for an old capability (`< (9, 0)`, unknown with None) still runs the test
    other = text.replace("device_capability is None or ", "")
    findings, _skipped = _run(tmp_path / "other", {"tests/test_fp8.py": other})
    assert _reported(findings, "tests/test_fp8.py", "NPU202").get(11) == "error"


def test_flag_through_functools_partial(tmp_path):
    text = '''\
import functools
import torch
from vllm.platforms import current_platform


def run_case(fn, a, use_cudagraph=False):
    if use_cudagraph:
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            fn(a)


def test_case(n):
    use_cudagraph = current_platform.is_cuda()
    runner = functools.partial(run_case, a=torch.ones(n))
    runner(torch.relu, use_cudagraph=use_cudagraph)


def run_other(fn, a, capture=False):
    if capture:
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            fn(a)


def test_other(n):
    runner = functools.partial(run_other, a=torch.ones(n))
    runner(torch.relu, capture=True)
'''
    findings, skipped = _run(tmp_path, {"tests/test_partial.py": text})
    assert 8 in moot_lines(skipped, "NPU202", "tests/test_partial.py")
    assert _reported(findings, "tests/test_partial.py", "NPU202").get(21) == "error"


def test_info_findings_in_a_test_skipped_off_cuda_are_named_scopes(tmp_path):
    """An NCCL tuning variable (NPU602, info) set inside a test skipped off CUDA is as moot as an
    error there: a named scope, not an info finding; the same variable in a test that runs on an
    NPU host stays a finding."""
    from .precision_helpers import migrate_json, moot_lines, write_project

    text = '''\
import pytest
from vllm.platforms import current_platform


@pytest.mark.skipif(not current_platform.is_cuda(), reason="CUDA only")
def test_symm_mem(monkeypatch):
    monkeypatch.setenv("NCCL_NVLS_ENABLE", "1")


def test_everywhere(monkeypatch):
    monkeypatch.setenv("NCCL_NVLS_ENABLE", "1")
'''
    report = migrate_json(write_project(tmp_path, {"tests/test_env.py": text}))
    kept = [f for f in report["findings"] if f["code"] == "NPU602"]
    assert [f["line"] for f in kept] == [11] and not kept[0].get("also")
    assert "current_platform.is_cuda()" in moot_lines(report["skipped"], "NPU602", "tests/test_env.py")[7]
