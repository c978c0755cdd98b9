"""Findings people can trust (issue 16, second audit round): the shapes the ecosystem check's
manual samples found false or redundant, each with what must still be reported.

- one finding per file for a leftover repeated in it (NPU990, NPU202, ...), and a CUDA graph
  capture reported once with the CUDAGraph it records into; a baseline and --diff-base still see a
  new occurrence in a file that already has one;
- a vendored library's CUDA sources and a vendored project's examples are skipped, named;
- report-only findings inside a test that is skipped off CUDA are information;
- a list or tuple naming both "cuda" and "npu" is platform-aware; a comparison with the project's
  own platform layer (`get_accelerator().device_name() == "cuda"`) is a deliberate CUDA check.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from click.testing import CliRunner

from npu_migrate import cache, catalogue
from npu_migrate.cli import main
from npu_migrate.findings import Finding, merge_per_file, split_merged
from npu_migrate.testscopes import cuda_only_test_scopes


def _check(root: Path, *extra: str) -> dict:
    result = CliRunner().invoke(main, ["check", str(root), "--isolated", "--output-format", "json", *extra])
    assert result.exit_code in (0, 1), result.output
    start = result.stdout.index("{")
    return json.loads(result.stdout[start:])


def _findings(report: dict, code: str | None = None) -> list[dict]:
    items = report.get("findings", report.get("items", []))
    return [f for f in items if code is None or f["code"] == code]


def _moot(report: dict, code: str) -> dict[int, str]:
    """{line: reason} of the places a finding of `code` about code an NPU host never runs stood
    for: such findings are named skipped scopes (moot.py), not findings."""
    out = {}
    for scope in report.get("skipped", []):
        if "start_line" in scope and scope["reason"].startswith(f"not run on an NPU host ({code}): "):
            for line in range(scope["start_line"], scope["end_line"] + 1):
                out[line] = scope["reason"]
    return out


def _write(root: Path, name: str, text: str) -> Path:
    path = root / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


# ----------------------------------------------------------------------------- one per file
LEFTOVERS = '''\
import torch


def a(x):
    return x == "cuda"


def b(y):
    return y == "cuda"
'''


def test_a_repeated_leftover_is_one_finding_listing_its_lines(tmp_path):
    _write(tmp_path, "m.py", LEFTOVERS)
    found = _findings(_check(tmp_path), "NPU990")
    assert len(found) == 1
    assert found[0]["line"] == 5 and "(also at line 9)" in found[0]["message"]


def test_a_different_leftover_in_the_same_file_is_its_own_finding(tmp_path):
    _write(tmp_path, "m.py", LEFTOVERS + '\n\ndef c(z):\n    return z == "nccl"\n')
    messages = sorted(f["message"] for f in _findings(_check(tmp_path), "NPU990"))
    assert len(messages) == 2 and '"nccl"' in messages[1]


GRAPH = '''\
import torch


def capture(model, x):
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        model(x)
    return g
'''


def test_a_graph_capture_is_one_finding_with_its_cudagraph(tmp_path):
    _write(tmp_path, "g.py", GRAPH)
    found = _findings(_check(tmp_path), "NPU202")
    assert len(found) == 1, found
    assert found[0]["line"] == 5 and "(also at line 6)" in found[0]["message"]


NCCL_WRAPPER = '''\
class Comm:
    def all_reduce(self, buf):
        self.nccl.ncclAllReduce(buf)

    def broadcast(self, buf):
        self.nccl.ncclBroadcast(buf)

    def version(self):
        return self.nccl.ncclGetVersion()
'''


def test_an_nccl_library_wrapper_is_one_finding(tmp_path):
    _write(tmp_path, "pynccl.py", NCCL_WRAPPER)
    found = _findings(_check(tmp_path), "NPU990")
    assert len(found) == 1, found
    assert "(also at lines 6, 9)" in found[0]["message"]


def test_merged_findings_keep_their_places_through_the_cache():
    merged = merge_per_file([
        Finding("m.py", 5, 12, "NPU990", 'CUDA-only reference left unchanged: string "cuda"', False, '"cuda"'),
        Finding("m.py", 9, 12, "NPU990", 'CUDA-only reference left unchanged: string "cuda"', False, "'cuda'"),
    ])
    assert len(merged) == 1 and merged[0].also == ((9, 12, "'cuda'"),)
    parts = split_merged(merged[0])
    assert [(f.line, f.source, f.message) for f in parts] == [
        (5, '"cuda"', 'CUDA-only reference left unchanged: string "cuda"'),
        (9, "'cuda'", 'CUDA-only reference left unchanged: string "cuda"')]
    data = json.loads(json.dumps(merged[0].as_dict()))
    assert cache._finding_from_json(data, "m.py") == merged[0]
    assert "also" not in Finding("m.py", 1, 1, "NPU990", "x", False).as_dict()


def test_a_baseline_still_sees_a_new_occurrence_in_a_file_that_has_one(tmp_path):
    _write(tmp_path, "m.py", LEFTOVERS)
    baseline = tmp_path / "baseline.json"
    result = CliRunner().invoke(main, ["check", str(tmp_path), "--isolated", "--write-baseline", str(baseline)])
    assert result.exit_code == 0, result.output
    entries = json.loads(baseline.read_text())["entries"]
    assert sum(e["count"] for e in entries if e["code"] == "NPU990") == 2  # both places, not one merged finding
    assert _findings(_check(tmp_path, "--baseline", str(baseline)), "NPU990") == []
    _write(tmp_path, "m.py", LEFTOVERS + '\n\ndef c(z):\n    return z == "cuda"\n')
    found = _findings(_check(tmp_path, "--baseline", str(baseline)), "NPU990")
    assert [(f["line"], f["message"]) for f in found] == [
        (13, 'CUDA-only reference left unchanged: string "cuda"')]  # the new place, on its own


def test_diff_base_sees_a_new_occurrence_merged_into_an_old_line(tmp_path):
    def git(*args):
        subprocess.run(["git", *args], cwd=tmp_path, check=True, capture_output=True)

    git("init", "-q")
    git("config", "user.email", "t@example.com")
    git("config", "user.name", "t")
    _write(tmp_path, "m.py", LEFTOVERS)
    git("add", ".")
    git("commit", "-qm", "base")
    assert _findings(_check(tmp_path, "--diff-base", "HEAD"), "NPU990") == []
    _write(tmp_path, "m.py", LEFTOVERS + '\n\ndef c(z):\n    return z == "cuda"\n')
    found = _findings(_check(tmp_path, "--diff-base", "HEAD"), "NPU990")
    assert [f["line"] for f in found] == [13]  # the new place, not the file's merged finding


# ----------------------------------------------------------------------------- vendored code
def test_vendored_cuda_sources_and_examples_are_skipped_and_named(tmp_path):
    _write(tmp_path, "third_party/cutlass/examples/gemm/gemm.cu", "__global__ void k() {}\n")
    _write(tmp_path, "third_party/cutlass/examples/python/run.py", "import torch\nx = torch.zeros(2).cuda()\n")
    _write(tmp_path, "csrc/ops.cu", "__global__ void k() {}\n")
    _write(tmp_path, "pkg/third_party/fla/ops.py", "import torch\ntorch.cuda.profiler.start()\n")
    report = _check(tmp_path)
    paths = {f["path"] for f in _findings(report)}
    assert any(p.endswith("csrc/ops.cu") for p in paths)
    assert any(p.endswith("pkg/third_party/fla/ops.py") for p in paths)  # vendored and imported: it runs
    assert not any("third_party/cutlass" in p for p in paths)
    result = CliRunner().invoke(main, [str(tmp_path), "--dry-run", "--isolated", "--output-format", "json"])
    skipped = {s["path"]: s["reason"] for s in json.loads(result.stdout[result.stdout.index("{"):])["skipped"]}
    assert "vendored CUDA source" in skipped["third_party/cutlass/examples/gemm/gemm.cu"]
    assert "vendored project" in skipped["third_party/cutlass/examples/python/run.py"]


# ----------------------------------------------------------------------------- tests skipped off CUDA
SKIPPED_TESTS = '''\
import pytest
import torch
import unittest
from vllm.platforms import current_platform


@pytest.mark.skipif(not current_platform.is_cuda(), reason="CUDA only")
def test_cuda_only():
    torch.cuda.profiler.start()


@pytest.mark.skipif(current_platform.is_rocm(), reason="not on ROCm")
def test_runs_on_npu():
    torch.cuda.profiler.start()


@unittest.skipUnless(torch.version.hip, "ROCm only")
def test_rocm_only():
    torch.cuda.profiler.start()


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU")
def test_any_gpu():
    torch.cuda.profiler.start()


def test_body_skip():
    if not (current_platform.is_cuda() or current_platform.is_rocm()):
        pytest.skip("GPU only")
    torch.cuda.profiler.start()


@requires_gfx950
def test_gfx950():
    torch.cuda.profiler.start()
'''


def test_scopes_of_tests_skipped_off_cuda():
    scopes = cuda_only_test_scopes(SKIPPED_TESTS)
    assert [(s[0], s[2]) for s in scopes] == [
        (7, "not current_platform.is_cuda()"),
        (17, "torch.version.hip"),
        (28, "not (current_platform.is_cuda() or current_platform.is_rocm())"),
        (33, "requires_gfx950"),
    ]


def test_findings_in_tests_skipped_off_cuda_are_information(tmp_path):
    """... now named as skipped scopes (moot.py): an NPU host never runs them."""
    _write(tmp_path, "tests/test_kernels.py", SKIPPED_TESTS)
    report = _check(tmp_path)
    found = _findings(report, "NPU202")
    by_severity = {}
    for f in found:
        for line in [f["line"], *(place[0] for place in f.get("also", []))]:
            by_severity[line] = f["severity"]
    moot = _moot(report, "NPU202")
    for line in (9, 19, 30, 35):
        assert line in moot and line not in by_severity, line
    assert by_severity[14] == "error"  # skipped on ROCm only: it runs on the NPU
    assert by_severity[24] == "error"  # torch.cuda.is_available() is rewritten: it runs on the NPU
    assert "in a test that does not run on an NPU host" in moot[9]


def test_findings_in_an_always_skipped_test_are_information(tmp_path):
    text = ('import pytest\nimport torch\n\n\n@pytest.mark.skipif(True, reason="unstable in CI")\n'
            'def test_a():\n    torch.cuda.profiler.start()\n\n\n@pytest.mark.skip(reason="later")\n'
            'def test_b():\n    torch.cuda.profiler.stop()\n\n\ndef test_c():\n    torch.cuda.profiler.start()\n')
    _write(tmp_path, "tests/test_x.py", text)
    report = _check(tmp_path)
    found = _findings(report, "NPU202")
    assert [(f["line"], f["severity"]) for f in found] == [(16, "error")]
    moot = _moot(report, "NPU202")
    assert 7 in moot and 12 in moot  # test_b's merged into test_a's: one scope, lines 7-12


def test_a_module_skipped_off_cuda_lowers_every_finding(tmp_path):
    text = ('import pytest\nimport torch\nfrom vllm.platforms import current_platform\n\n'
            'pytestmark = pytest.mark.skipif(not current_platform.is_cuda(), reason="CUDA")\n\n\n'
            'def test_a():\n    torch.cuda.profiler.start()\n')
    _write(tmp_path, "tests/test_mod.py", text)
    report = _check(tmp_path)
    assert _findings(report, "NPU202") == []
    assert "current_platform.is_cuda()" in _moot(report, "NPU202")[9]


# ----------------------------------------------------------------------------- platform layers
def test_a_list_of_cuda_and_npu_is_platform_aware(tmp_path):
    _write(tmp_path, "plugin.py", 'def supported_devices():\n    return ["cuda", "npu"]\n')
    report = _check(tmp_path)
    assert _findings(report, "NPU990") == []
    assert _findings(report, "NPU991") == []  # named with its scope instead
    assert any("CUDA references left as written: lines 2" in e["reason"]
               for e in report["skipped"] if e["path"] == "plugin.py")


def test_a_comparison_with_the_projects_platform_layer_is_left_alone(tmp_path):
    text = ('from deepspeed.accelerator import get_accelerator\n\n\n'
            'def deepcompile_supported():\n    return get_accelerator().device_name() == "cuda"\n\n\n'
            'def uses_cuda(current_platform):\n    return current_platform.device_type == "cuda"\n\n\n'
            'def plain(device):\n    return device.type == "cuda"\n')
    _write(tmp_path, "m.py", text)
    report = _check(tmp_path)
    assert _findings(report, "NPU990") == []
    rewritten = _findings(report, "NPU104")
    assert [f["line"] for f in rewritten] == [13]  # only the tensor's device is rewritten


def test_the_catalogue_groups_are_valid_patterns():
    import re

    for rule in catalogue.rules().values():
        if rule.merge_group:
            assert rule.per_file == "message", rule.code
            re.compile(rule.merge_group)


def test_triton_as_a_benchmark_harness_only_is_information(tmp_path):
    harness = ("import torch\nimport triton\n\n\n@triton.testing.perf_report([])\ndef bench(n):\n"
               "    return triton.testing.do_bench(lambda: torch.ops.mylib.op(n))\n")
    kernel = "import triton\nimport triton.language as tl\n\n\n@triton.jit\ndef k(x):\n    tl.store(x, 1)\n"
    _write(tmp_path, "bench_op.py", harness)
    _write(tmp_path, "kernels.py", kernel)
    report = _check(tmp_path)
    severities = {f["path"].rsplit("/", 1)[-1]: f["severity"] for f in _findings(report, "NPU910")}
    # the harness (`perf_report`, `do_bench`) runs as written on Triton-Ascend: a named scope (kernels.py)
    assert severities == {"kernels.py": "error"}
    assert any(s["path"].endswith("bench_op.py") and "NPU910" in s["reason"] for s in report["skipped"])


# ----------------------------------------------------------------------------- branches an NPU host never takes
BRANCHES = '''\
from typing import TYPE_CHECKING

import torch
from vllm.platforms import current_platform

if TYPE_CHECKING:
    from flashinfer.fused_moe import QuantFormat

_is_hip = current_platform.is_rocm()
if _is_hip:
    ARCH = torch.cuda.get_device_properties(0).gcnArchName

if not current_platform.is_cuda():
    pass
else:
    torch.cuda.profiler.start()

if torch.cuda.is_available():
    torch.cuda.profiler.stop()
'''


def test_type_checking_blocks_are_named_and_untaken_branches_are_information(tmp_path):
    _write(tmp_path, "m.py", BRANCHES)
    result = CliRunner().invoke(main, [str(tmp_path), "--dry-run", "--isolated", "--output-format", "json"])
    report = json.loads(result.stdout[result.stdout.index("{"):])
    reported = [f for f in report["findings"] if not f["fixable"]]
    assert not any(f["line"] == 7 for f in reported)  # the type-only import: no finding ...
    assert {"path": "m.py", "start_line": 7, "end_line": 7,
            "reason": "only for type checkers (`if TYPE_CHECKING:`)"} in report["skipped"]  # ... but named
    by_line = {f["line"]: f for f in reported if f["code"] in ("NPU931", "NPU202")}
    assert 11 not in by_line and 16 not in by_line  # never run on an NPU host: named scopes instead
    moot = {**_moot(report, "NPU931"), **_moot(report, "NPU202")}
    assert "`_is_hip`" in moot[11]
    assert 16 in moot  # the else of a test that holds off CUDA
    assert by_line[19]["severity"] == "error"  # torch.cuda.is_available() is rewritten: this runs on NPU


def test_a_type_checking_block_without_findings_is_not_named(tmp_path):
    text = ("from typing import TYPE_CHECKING\n\nimport torch\n\nif TYPE_CHECKING:\n    from os import PathLike\n\n"
            "torch.cuda.profiler.start()\n")
    _write(tmp_path, "m.py", text)
    result = CliRunner().invoke(main, [str(tmp_path), "--dry-run", "--isolated", "--output-format", "json"])
    report = json.loads(result.stdout[result.stdout.index("{"):])
    assert [f["line"] for f in report["findings"] if f["code"] == "NPU202"] == [8]
    assert not any("start_line" in s for s in report["skipped"])


def test_the_device_argument_of_a_rewritten_capability_query_is_not_a_leftover(tmp_path):
    _write(tmp_path, "m.py", 'import torch\n\ncap = torch.cuda.get_device_capability("cuda")\n')
    report = _check(tmp_path)
    assert _findings(report, "NPU990") == [] and len(_findings(report, "NPU203")) == 1


def test_a_backend_chosen_by_the_platform_layer_or_the_device_is_seen(tmp_path):
    text = ('import torch.distributed as dist\nfrom deepspeed.accelerator import get_accelerator\n\n\n'
            'def init(device_type, cfg):\n'
            '    dist.init_process_group(backend=get_accelerator().communication_backend_name())\n'
            '    dist.init_process_group(backend=backend_for(device_type))\n'
            '    dist.init_process_group(backend=cfg.backend)\n')
    _write(tmp_path, "m.py", text)
    assert [f["line"] for f in _findings(_check(tmp_path), "NPU304")] == [8]


def test_memory_snapshot_calls_are_one_finding(tmp_path):
    text = ('import torch\n\n\ndef snap(path):\n    torch.cuda.memory._record_memory_history()\n'
            '    torch.cuda.memory._dump_snapshot(path)\n    g = torch.cuda.CUDAGraph()\n')
    _write(tmp_path, "m.py", text)
    found = _findings(_check(tmp_path), "NPU202")
    assert [(f["line"], "also at line 6" in f["message"]) for f in found] == [(5, True), (7, False)]


def test_deepspeed_optimizers_with_an_npu_builder_are_not_reported(tmp_path):
    text = ("from deepspeed.ops.lamb import FusedLamb\nfrom deepspeed.ops.lion import FusedLion\n"
            "from deepspeed.ops.transformer import DeepSpeedTransformerLayer\n")
    _write(tmp_path, "m.py", text)
    assert [f["line"] for f in _findings(_check(tmp_path), "NPU917")] == [3]


def test_rocm_only_and_assistant_files_are_skipped_named_and_left_byte_identical(tmp_path):
    cuda = "import torch\nx = torch.zeros(2).cuda()\ntorch.cuda.profiler.start()\n"
    for rel in ("pkg/platforms/rocm.py", "docker/docker-rocm/setup.py", ".agents/skills/bench.py", "pkg/main.py"):
        _write(tmp_path, rel, cuda)
    _write(tmp_path, "pkg/rocm_like/ops.py", cuda + "# not ROCm: only named like it\n")
    before = {p: p.read_bytes() for p in tmp_path.rglob("*.py")}
    subprocess.run(["git", "init", "-q"], cwd=tmp_path, check=True)
    result = CliRunner().invoke(main, [str(tmp_path), "--isolated", "--allow-dirty", "--output-format", "json"])
    report = json.loads(result.stdout[result.stdout.index("{"):])
    skipped = {s["path"]: s["reason"] for s in report["skipped"] if "start_line" not in s}
    assert skipped["pkg/platforms/rocm.py"] == "ROCm/HIP source (named for ROCm)"
    assert skipped["docker/docker-rocm/setup.py"] == "ROCm/HIP source (in a rocm, hip or amd folder)"
    assert skipped[".agents/skills/bench.py"] == "a coding assistant's or editor's folder (.agents)"
    for rel in ("pkg/platforms/rocm.py", "docker/docker-rocm/setup.py", ".agents/skills/bench.py"):
        assert (tmp_path / rel).read_bytes() == before[tmp_path / rel]  # not written
    assert (tmp_path / "pkg/main.py").read_bytes() != before[tmp_path / "pkg/main.py"]
    assert (tmp_path / "pkg/rocm_like/ops.py").read_bytes() != before[tmp_path / "pkg/rocm_like/ops.py"]
