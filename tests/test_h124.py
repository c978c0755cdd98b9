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


# ----------------------------------------------------------------------------- testlabels27.py
def _scoped(report, path, line):
    return [s for s in report["skipped"] if s["path"] == path and s.get("start_line") == line]


def _kept(report, path, line, code):
    return [f for f in report["findings"] if f["path"] == path and f["line"] == line and f["code"] == code]


_ALLOC = """\
import torch


def expandable_enabled():
    try:
        return bool(torch.cuda.memory._snapshot().get("allocator_settings"))
    except Exception:
        return None
"""

_ALLOC_TEST = """\
from pkg import alloc


def test_unreadable(monkeypatch):
    class _Stub:
        @staticmethod
        def _snapshot():
            raise RuntimeError("no allocator")

    monkeypatch.setattr(alloc.torch.cuda, "memory", _Stub)
    assert alloc.expandable_enabled() is None


def test_sync():
    alloc.torch.cuda.synchronize()
"""


def test_bv29_a_patch_target_through_a_modules_torch_is_a_scope_and_a_call_stays(tmp_path):
    report = migrate_json(write_project(tmp_path, {"pkg/__init__.py": "", "pkg/alloc.py": _ALLOC,
                                                   "tests/test_alloc.py": _ALLOC_TEST}))
    scope = _scoped(report, "tests/test_alloc.py", 10)
    assert scope and "a patch target" in scope[0]["reason"], report["skipped"]
    assert not _kept(report, "tests/test_alloc.py", 10, "NPU990")
    # (the nearest true case: a call through the same chain keeps its finding)
    assert [f for f in report["findings"] if f["path"] == "tests/test_alloc.py" and f["line"] == 15], report["findings"]


_ENV_REPORT = """\
import os
import sys


def get_platform():
    return "win32" if sys.platform.startswith("win32") else sys.platform


def cudnn_location():
    if get_platform() == "win32":
        return os.environ.get("CUDA_PATH", "%CUDA_PATH%")
    elif get_platform() == "darwin":
        return os.environ.get("CUDA_PATH", "/usr/local/cuda")
    return os.environ.get("CUDA_PATH", "/usr/local/cuda")
"""


def test_bv22_an_env_read_in_a_windows_or_macos_branch_is_a_scope_and_the_linux_path_stays(tmp_path):
    report = migrate_json(write_project(tmp_path, {"pkg/__init__.py": "", "pkg/envreport.py": _ENV_REPORT}))
    for line in (11, 13):
        scope = _scoped(report, "pkg/envreport.py", line)
        assert scope and "in a branch an NPU host does not take" in scope[0]["reason"], (line, report["skipped"])
    kept = [f for f in report["findings"] if f["path"] == "pkg/envreport.py" and "CUDA_PATH" in f["message"]]
    assert kept and kept[0]["line"] == 14 and "also" not in kept[0]["message"], kept


def test_os_test_reads_only_operating_system_names():
    import ast

    from npu_migrate.testlabels27 import _os_test

    assert _os_test(ast.parse('sys.platform == "win32"').body[0].value)
    assert _os_test(ast.parse('os.name == "nt"').body[0].value)
    assert _os_test(ast.parse('sys.platform.startswith("win")').body[0].value)
    assert not _os_test(ast.parse('get_platform() == "cuda"').body[0].value)
    assert not _os_test(ast.parse('sys.platform == "linux"').body[0].value)
    assert not _os_test(ast.parse('backend == "win32"').body[0].value)


_UV_SCRIPT = """\
#!/usr/bin/env -S uv run
# /// script
# requires-python = ">=3.11"
# dependencies = [
#   "msgspec>=0.19,<1",
#   "numpy>=2,<3",
# ]
# ///
import json

import msgspec
import numpy as np


class Ready(msgspec.Struct):
    weight_transfer_backend: str
    shape: list


def fixture():
    return Ready(
        weight_transfer_backend="nccl",
        shape=np.arange(2).tolist(),
    )


print(json.dumps(msgspec.to_builtins(fixture())))
"""


def test_bv9_a_string_in_a_standalone_uv_script_without_torch_is_a_label(tmp_path):
    report = migrate_json(write_project(tmp_path, {"tools_py/make_fixtures.py": _UV_SCRIPT}))
    scope = _scoped(report, "tools_py/make_fixtures.py", 22)
    assert scope and "standalone `uv run` script" in scope[0]["reason"], (report["findings"], report["skipped"])


def test_bv9_pair_a_uv_script_that_declares_torch_or_imports_the_project_keeps_the_string(tmp_path):
    with_torch = _UV_SCRIPT.replace('#   "numpy>=2,<3",\n', '#   "numpy>=2,<3",\n#   "torch>=2.5",\n')
    with_project = _UV_SCRIPT.replace("import msgspec\n", "import msgspec\nimport pkg.engine\n")
    report = migrate_json(write_project(tmp_path, {"a/make.py": with_torch, "b/make.py": with_project,
                                                   "pkg/__init__.py": "", "pkg/engine.py": "X = 1\n"}))
    for path, line in (("a/make.py", 23), ("b/make.py", 23)):
        assert not _scoped(report, path, line), (path, report["skipped"])
        assert _kept(report, path, line, "NPU990"), (path, report["findings"])


_SENTINEL_TEST = """\
import os
from unittest.mock import patch

from pkg.envcopy import copied_names


def test_env_propagates():
    sentinel_vars = {"NCCL_DEBUG": "INFO", "HF_TOKEN": "x"}
    for k, v in sentinel_vars.items():
        os.environ[k] = v
    seen = copied_names()
    for name, expected in sentinel_vars.items():
        assert seen[name] == expected


@patch.dict(os.environ, {"NCCL_DEBUG": "INFO"}, clear=False)
def test_nccl_prefix():
    assert "NCCL_DEBUG" in copied_names()


def test_allreduce_tuned():
    env = {"NCCL_DEBUG": "INFO"}
    os.environ.update(env)
    assert copied_names()
"""


def test_bu8_an_nccl_sentinel_a_test_asserts_is_a_label_and_a_plain_setting_stays(tmp_path):
    report = migrate_json(write_project(tmp_path, {
        "pkg/__init__.py": "", "pkg/envcopy.py": "import os\n\n\ndef copied_names():\n    return dict(os.environ)\n",
        "tests/test_env.py": _SENTINEL_TEST}))
    for line in (8, 16, 18):
        scope = _scoped(report, "tests/test_env.py", line)
        assert scope and "an NCCL name listed as a label" in scope[0]["reason"], (line, report["skipped"])
    kept = [f for f in report["findings"] if f["path"] == "tests/test_env.py" and f["code"] == "NPU602"]
    assert kept and kept[0]["line"] == 22 and "also" not in kept[0]["message"], kept


_SPEC_TEST = """\
import torch

from pkg.spec import CacheSpec, pick_block


def test_selects_pages():
    spec = CacheSpec(block_size=64, dtype=torch.float8_e4m3fn)
    assert pick_block([spec]) == 64


def test_allocates_pages():
    spec = CacheSpec(block_size=64, dtype=torch.float8_e4m3fn)
    cache = torch.empty(4, spec.block_size, dtype=spec.dtype, device="cuda")
    assert cache.numel()
"""

_SPEC = """\
from dataclasses import dataclass

import torch


@dataclass
class CacheSpec:
    block_size: int
    dtype: torch.dtype


def pick_block(specs):
    return min(s.block_size for s in specs)
"""


def test_bu40_an_fp8_spec_field_in_a_test_without_tensors_is_metadata_and_an_allocation_stays(tmp_path):
    report = migrate_json(write_project(tmp_path, {"pkg/__init__.py": "", "pkg/spec.py": _SPEC,
                                                   "tests/test_spec.py": _SPEC_TEST}))
    scope = _scoped(report, "tests/test_spec.py", 7)
    assert scope and "not FP8 compute: " in scope[0]["reason"] and "`CacheSpec(...)`" in scope[0]["reason"], \
        report["skipped"]
    kept = [f for f in report["findings"] if f["path"] == "tests/test_spec.py" and f["code"] == "NPU913"]
    assert kept and kept[0]["line"] == 12, kept


_RUNTIME = """\
import os
import subprocess


def launch_child(cmd):
    env = os.environ.copy()
    env.setdefault("NCCL_IB_DISABLE", "1")
    return subprocess.Popen(cmd, env=env)
"""

_RUNTIME_TEST = """\
from pkg import runtime


def test_child_defaults(monkeypatch):
    monkeypatch.delenv("NCCL_IB_DISABLE", raising=False)
    monkeypatch.setattr(runtime.subprocess, "Popen", lambda cmd, env: env)
    assert runtime.launch_child(["x"])["NCCL_IB_DISABLE"] == "1"


def test_own_setting(monkeypatch):
    monkeypatch.setenv("NCCL_SOCKET_IFNAME", "eth0")
"""


def test_bu24_a_tests_nccl_note_the_library_reports_is_folded_and_another_variable_stays(tmp_path):
    report = migrate_json(write_project(tmp_path, {"pkg/__init__.py": "", "pkg/runtime.py": _RUNTIME,
                                                   "tests/test_runtime.py": _RUNTIME_TEST}))
    library = _kept(report, "pkg/runtime.py", 7, "NPU602")
    assert library and "tests/test_runtime.py:5 and 1 more line" in library[0]["message"], report["findings"]
    mine = [f for f in report["findings"] if f["path"] == "tests/test_runtime.py" and f["code"] == "NPU602"]
    assert len(mine) == 1 and "NCCL_SOCKET_IFNAME" in mine[0]["message"], mine


_PROFILERS = """\
from typing import Literal

import torch


class CudaRangeProfiler:
    def __init__(self):
        import torch.cuda.profiler as cuda_profiler

        self._profiler = cuda_profiler

    def start(self):
        self._profiler.start()


class TorchProfiler:
    def start(self):
        return torch.profiler.profile()


def create_profiler(profiler_type: Literal["torch", "cuda"] = "torch"):
    if profiler_type == "torch":
        return TorchProfiler()
    if profiler_type == "cuda":
        return CudaRangeProfiler()
    raise ValueError(profiler_type)
"""


def test_bu30_a_class_built_only_under_an_options_cuda_value_is_info(tmp_path):
    report = migrate_json(write_project(tmp_path, {"pkg/__init__.py": "", "pkg/profilers.py": _PROFILERS}))
    found = _at(report, "pkg/profilers.py", "NPU202")
    assert found and all(f["severity"] == "info" for f in found), found
    assert "reached on an NPU host only when `profiler_type == 'cuda'` is chosen (pkg/profilers.py:25)" \
        in found[0]["message"], found


def test_bu30_pair_a_class_also_built_without_the_option_stays_an_error(tmp_path):
    always = "\n\ndef warm_profiler():\n    return CudaRangeProfiler()\n"
    report = migrate_json(write_project(tmp_path, {"pkg/__init__.py": "", "pkg/profilers.py": _PROFILERS + always}))
    found = _at(report, "pkg/profilers.py", "NPU202")
    assert any(f["severity"] == "error" for f in found), found


_CI_BUILD = """\
#!/bin/bash
set -eux
python_executable=python$1
cuda_home=/usr/local/cuda-$2
PATH=${cuda_home}/bin:$PATH
$python_executable -m pip install -r requirements/cuda.txt
export TORCH_CUDA_ARCH_LIST="8.0 9.0"
$python_executable setup.py bdist_wheel --dist-dir=dist
"""


def test_bv23_an_arch_variable_in_a_ci_cuda_wheel_build_script_is_nvidia_build_tooling(tmp_path):
    report = migrate_json(write_project(tmp_path, {".github/workflows/scripts/build.sh": _CI_BUILD}))
    scope = _scoped(report, ".github/workflows/scripts/build.sh", 7)
    assert scope and "in NVIDIA build tooling: " in scope[0]["reason"] and "`/usr/local/cuda-$2`, line 4" \
        in scope[0]["reason"], (report["findings"], report["skipped"])


def test_bv23_pair_a_script_naming_the_npu_or_without_a_toolkit_mark_keeps_its_note(tmp_path):
    npu = _CI_BUILD.replace("set -eux\n", "set -eux\n# also builds the Ascend NPU wheel\n")
    bare = _CI_BUILD.replace("cuda_home=/usr/local/cuda-$2\n", "cuda_home=$CUDA_ROOT\n")
    report = migrate_json(write_project(tmp_path, {".github/scripts/npu.sh": npu, ".github/scripts/bare.sh": bare,
                                                   "pkg/build.sh": _CI_BUILD}))
    for path in (".github/scripts/npu.sh", ".github/scripts/bare.sh", "pkg/build.sh"):
        kept = [f for f in report["findings"] if f["path"] == path and f["code"] == "NPU703"]
        assert kept, (path, report["findings"], report["skipped"])


_ENTRY = """\
def launch_fast(x):
    from flashinfer.rope import apply_rope_inplace
    return apply_rope_inplace(x)
"""

_PRIVATE = """\
def _launch_private(x):
    from flashinfer.rope import apply_rope_inplace
    return apply_rope_inplace(x)
"""

_ENTRY_TEST = """\
from pkg.entry import launch_fast
from pkg.private import _launch_private


def test_entry():
    launch_fast(1)
    _launch_private(1)
"""


def test_p2_a_private_helper_only_a_test_calls_is_info_and_a_public_entry_point_stays(tmp_path):
    report = migrate_json(write_project(tmp_path, {"pkg/__init__.py": "", "pkg/entry.py": _ENTRY,
                                                   "pkg/private.py": _PRIVATE, "tests/test_entry.py": _ENTRY_TEST}))
    private = _at(report, "pkg/private.py", "NPU911")
    assert private and private[0]["severity"] == "info" and "tests/test_entry.py:7" in private[0]["message"], private
    public = _at(report, "pkg/entry.py", "NPU911")
    assert public and public[0]["severity"] == "error", public  # (its users call it: no library reference says otherwise)
