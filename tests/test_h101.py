"""Single shapes in tests, cuDNN flags, NCCL checks and device positions (issue #16, round 23,
helper h101: npu_migrate/singles23.py, rules/device.toml). Each shape is paired with the nearest case
that stays reported."""

from __future__ import annotations

from .precision_helpers import migrate_json, moot_lines, write_project

ELSE_SKIP = '''\
import pytest
import torch

from pkg.platforms import current_platform
from pkg.utils import has_fast_ep

if current_platform.is_cuda() and has_fast_ep():
    from pkg.fast_ep import globalize
else:
    pytest.skip("Requires CUDA and fast EP", allow_module_level=True)


def test_capture():
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        globalize()
    graph.replay()
'''

# the nearest true case: a condition an NPU host may pass (no CUDA-only predicate in it)
ELSE_SKIP_UNKNOWN = ELSE_SKIP.replace("current_platform.is_cuda() and has_fast_ep()", "has_fast_ep()")
# an `or` with an unknown side may be true on an NPU host too
ELSE_SKIP_OR = ELSE_SKIP.replace("current_platform.is_cuda() and has_fast_ep()",
                                 "current_platform.is_cuda() or has_fast_ep()")
# the same shape inside a test function: not a module skip
ELSE_SKIP_IN_FUNCTION = '''\
import pytest
import torch

from pkg.platforms import current_platform


def test_capture():
    if current_platform.is_cuda():
        pass
    else:
        pytest.skip("Requires CUDA", allow_module_level=True)
    graph = torch.cuda.CUDAGraph()
    graph.replay()
'''


def _report(tmp_path, files):
    return migrate_json(write_project(tmp_path, files))


def _open(report, path, code):
    return [f for f in report["findings"] if f["path"] == path and f["code"] == code and not f["fixable"]]


def test_module_skipped_in_else_of_cuda_only_condition(tmp_path):
    report = _report(tmp_path, {"pkg/__init__.py": "", "tests/test_ep.py": ELSE_SKIP})
    assert not [f for f in _open(report, "tests/test_ep.py", "NPU202") if f["severity"] != "info"]
    scopes = moot_lines(report["skipped"], "NPU202", "tests/test_ep.py")
    assert 14 in scopes and "not (current_platform.is_cuda() and has_fast_ep())" in scopes[14]


def test_module_else_skip_an_npu_host_may_pass_stays(tmp_path):
    for text in (ELSE_SKIP_UNKNOWN, ELSE_SKIP_OR):
        report = _report(tmp_path, {"pkg/__init__.py": "", "tests/test_ep.py": text})
        kept = _open(report, "tests/test_ep.py", "NPU202")
        assert kept and kept[0]["severity"] == "error"
        assert not moot_lines(report["skipped"], "NPU202", "tests/test_ep.py")


def test_else_skip_inside_a_function_stays(tmp_path):
    report = _report(tmp_path, {"pkg/__init__.py": "", "tests/test_ep.py": ELSE_SKIP_IN_FUNCTION})
    kept = _open(report, "tests/test_ep.py", "NPU202")
    assert kept and kept[0]["severity"] == "error"


CUDNN_NO_OP = '''\
import torch
from torch.testing import assert_close

from pkg.attention import attend


def test_attention():
    torch.backends.cudnn.deterministic = True
    q = torch.randn(2, 4, 8, device="cuda")
    assert_close(attend(q, q, q), torch.softmax(q @ q.transpose(-1, -2), -1) @ q)
'''

CUDNN_CONV = '''\
import torch


def test_conv():
    torch.backends.cudnn.deterministic = True
    conv = torch.nn.Conv2d(3, 8, 3).cuda()
    x = torch.randn(1, 3, 8, 8, device="cuda")
    assert torch.equal(conv(x), conv(x))
'''

CUDNN_MODEL = CUDNN_NO_OP.replace("from pkg.attention import attend", "from pkg.models import build_model as attend")


def _no_effect(report, path):
    return [s for s in report["skipped"] if s["path"] == path and "a cuDNN flag in a test that runs no cuDNN op"
            in s["reason"]]


def test_cudnn_deterministic_in_a_test_with_no_cudnn_op_is_a_named_scope(tmp_path):
    report = _report(tmp_path, {"pkg/__init__.py": "", "tests/test_attn.py": CUDNN_NO_OP})
    assert not _open(report, "tests/test_attn.py", "NPU404")
    assert _no_effect(report, "tests/test_attn.py")


def test_cudnn_deterministic_with_convolutions_a_model_or_in_a_library_stays(tmp_path):
    for path, text in (("tests/test_conv.py", CUDNN_CONV), ("tests/test_attn.py", CUDNN_MODEL),
                       ("pkg/seeding.py", CUDNN_NO_OP)):
        report = _report(tmp_path / path.replace("/", "_"), {"pkg/__init__.py": "", path: text})
        kept = _open(report, path, "NPU404")
        assert kept and "use_deterministic_algorithms" in kept[0]["message"], path
        assert not _no_effect(report, path)


NCCL_CHECK = '''\
import torch

from pkg.weight_transfer import NcclEngine


def init_transfer(device):
    device = torch.device(device)
    if device.type != "cuda":
        raise NotImplementedError(
            f"Weight synchronization runs on the NCCL weight-transfer engine, which needs a CUDA device, got {device}."
        )
    return NcclEngine(device)
'''

CUDA_CHECK = NCCL_CHECK.replace("runs on the NCCL weight-transfer engine, which ", "")


def test_cuda_check_whose_raise_names_nccl_is_a_named_scope(tmp_path):
    report = _report(tmp_path, {"pkg/__init__.py": "", "pkg/sync.py": NCCL_CHECK})
    assert not [f for f in _open(report, "pkg/sync.py", "NPU108") if f["severity"] != "info"]
    assert [s for s in report["skipped"] if s["path"] == "pkg/sync.py"
            and "a CUDA check that turns the NPU away from NCCL-only code" in s["reason"]]


def test_cuda_check_whose_raise_names_only_cuda_stays_a_warning(tmp_path):
    report = _report(tmp_path, {"pkg/__init__.py": "", "pkg/sync.py": CUDA_CHECK})
    kept = _open(report, "pkg/sync.py", "NPU108")
    assert kept and kept[0]["severity"] == "warning"


MESH = '''\
import torch
import torch.distributed as dist


def mesh(shape):
    from torch.distributed.device_mesh import init_device_mesh

    return init_device_mesh("cuda", shape)


def tp_mesh(size):
    return dist.init_device_mesh("cuda", (size,))


def labelled():
    return {"backend": "cuda"}
'''


def test_init_device_mesh_device_type_is_rewritten(tmp_path):
    report = _report(tmp_path, {"pkg/__init__.py": "", "pkg/mesh.py": MESH})
    rewritten = {f["line"] for f in report["findings"] if f["path"] == "pkg/mesh.py" and f["code"] == "NPU102"}
    assert {8, 12} <= rewritten
    assert not [f for f in _open(report, "pkg/mesh.py", "NPU990") if f["line"] in (8, 12)]


PREFIX = '''\
import torch


class Worker:
    def __init__(self, device, rank):
        if device[:4] == "cuda":
            device = f"cuda:{rank}"
        self.device = device
        self.label = rank
        if self.label[:4] == "cuda":
            self.label = None
'''


def test_prefix_slice_of_a_device_is_widened(tmp_path):
    root = write_project(tmp_path, {"pkg/__init__.py": "", "pkg/worker.py": PREFIX})
    report = migrate_json(root)
    codes = {(f["line"], f["code"]) for f in report["findings"] if f["path"] == "pkg/worker.py"}
    assert (6, "NPU104") in codes and (7, "NPU103") in codes
    assert not [f for f in _open(report, "pkg/worker.py", "NPU990") if f["line"] == 6]
    # the nearest true case: a slice of a value not named like a device is no device check
    assert (10, "NPU104") not in codes


def test_prefix_slice_rewrite_means_cuda_or_the_accelerator_and_reruns_change_nothing(tmp_path):
    import json

    from click.testing import CliRunner

    from npu_migrate import shim
    from npu_migrate.cli import main

    root = write_project(tmp_path, {"pkg/__init__.py": "", "pkg/worker.py": PREFIX})
    for _ in range(2):
        result = CliRunner().invoke(main, ["migrate", str(root), "--no-cache", "--isolated", "--allow-dirty",
                                           "-j", "1", "--output-format", "json"], catch_exceptions=False)
        assert result.exit_code in (0, 1), result.output
        report = json.loads(result.stdout)
        assert not report["errors"], report["errors"]
        assert 'if npu_compat.is_accelerator_type(device.split(":")[0]):' in (root / "pkg/worker.py").read_text()
    assert not [f for f in report["findings"] if f["path"] == "pkg/worker.py" and f["line"] == 6]
    assert [shim.is_accelerator_type(d.split(":")[0]) for d in ("cuda:1", "cuda", "cpu")] == [True, True, False]


ARGPARSE = '''\
import argparse

import torch


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--device", default="cuda:0", help="Device")
    parser.add_argument("--log-device", default="cuda", help="only printed")
    args = parser.parse_args()
    x = torch.zeros(4, device=args.device)
    print(args.log_device, x)
'''

ARGPARSE_PRINTED = ARGPARSE.replace("device=args.device", "device=None").replace(
    "print(args.log_device, x)", "print(args.device, args.log_device, x)")


def test_argparse_device_default_that_reaches_a_device_position_is_converted(tmp_path):
    report = _report(tmp_path, {"pkg/__init__.py": "", "pkg/bench.py": ARGPARSE})
    codes = {(f["line"], f["code"]) for f in report["findings"] if f["path"] == "pkg/bench.py"}
    assert (8, "NPU603") in codes and (8, "NPU990") not in codes, codes
    # the nearest true case: an option whose value the file only prints keeps the warning
    assert (9, "NPU990") in codes and (9, "NPU603") not in codes, codes


def test_argparse_device_default_only_printed_stays(tmp_path):
    report = _report(tmp_path, {"pkg/__init__.py": "", "pkg/bench.py": ARGPARSE_PRINTED})
    codes = {(f["line"], f["code"]) for f in report["findings"] if f["path"] == "pkg/bench.py"}
    assert (8, "NPU990") in codes and (8, "NPU603") not in codes, codes


def test_argparse_device_default_rewrite_text(tmp_path):
    import json

    from click.testing import CliRunner

    from npu_migrate.cli import main

    root = write_project(tmp_path, {"pkg/__init__.py": "", "pkg/bench.py": ARGPARSE})
    for _ in range(2):
        result = CliRunner().invoke(main, ["migrate", str(root), "--no-cache", "--isolated", "--allow-dirty",
                                           "-j", "1", "--output-format", "json"], catch_exceptions=False)
        assert not json.loads(result.stdout)["errors"]
        text = (root / "pkg/bench.py").read_text()
        assert 'parser.add_argument("--device", default="cuda:0", help="Device", type=npu_compat.device_arg)' in text
    second = [f for f in json.loads(result.stdout)["findings"] if f["path"] == "pkg/bench.py"]
    assert not [f for f in second if f["fixable"] or f["line"] == 8], second


PROFILE = '''\
import contextlib

import torch

from pkg.analyzer import Trace


@contextlib.contextmanager
def assert_flops(expected):
    try:
        with torch.profiler.profile(
            with_flops=True,
            activities=[torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA],
        ) as p:
            yield
    finally:
        results = Trace.from_profile(p.events())
        total = sum(results.flops_per_op.values())
        assert total >= expected


def timed():
    with torch.profiler.profile(
        with_flops=True,
        activities=[torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA],
    ) as p:
        torch.ones(4).sum()
    print(p.key_averages().table(sort_by="cuda_time_total"))
'''


def test_cuda_activity_of_a_flops_only_profile_is_a_named_scope(tmp_path):
    report = _report(tmp_path, {"pkg/__init__.py": "", "tests/test_flops.py": PROFILE})
    kept = {f["line"] for f in _open(report, "tests/test_flops.py", "NPU935") if f["severity"] != "info"}
    # the nearest true case: a profile whose device times are read keeps the finding
    assert 13 not in kept and 25 in kept, kept
    assert [s for s in report["skipped"] if s["path"] == "tests/test_flops.py" and s.get("start_line") == 13
            and "a profile that only counts FLOPs" in s["reason"]]


ALLOCATOR = '''\
from pkg.platforms import current_platform


def get_allocator():
    """The sleep-mode allocator of the platform."""
    if current_platform.is_cuda_alike():
        from pkg.cumem import CuMemAllocator

        return CuMemAllocator.get_instance()
    if current_platform.is_xpu():
        return None
    raise RuntimeError("Sleep mode allocator is not available on this platform")


def get_pool(name):
    if name:
        return name
    raise RuntimeError("no pool")
'''

CUMEM_TEST = '''\
import torch

from pkg.allocator import get_allocator


def test_capture():
    allocator = get_allocator()
    with allocator.use_memory_pool("x"):
        graph = torch.cuda.CUDAGraph()
    graph.replay()
'''

# the nearest true cases: the capture before the call, and one after a call an NPU host may pass
BEFORE_TEST = CUMEM_TEST.replace("""    allocator = get_allocator()
    with allocator.use_memory_pool("x"):
        graph = torch.cuda.CUDAGraph()""", """    graph = torch.cuda.CUDAGraph()
    allocator = get_allocator()""")
POOL_TEST = CUMEM_TEST.replace("get_allocator", "get_pool")


def test_findings_after_a_call_that_always_raises_on_npu_are_information(tmp_path):
    report = _report(tmp_path, {"pkg/__init__.py": "", "pkg/allocator.py": ALLOCATOR,
                                "tests/test_cumem.py": CUMEM_TEST, "tests/test_before.py": BEFORE_TEST,
                                "tests/test_pool.py": POOL_TEST})
    (after,) = _open(report, "tests/test_cumem.py", "NPU202")
    assert after["severity"] == "info" and "`get_allocator()` at line 7 raises there first" in after["message"], after
    for path in ("tests/test_before.py", "tests/test_pool.py"):
        (kept,) = _open(report, path, "NPU202")
        assert kept["severity"] == "error", kept
