"""Round 29's same-file guards, dead code, test-only helpers, labels and repeats (audit DA, DB, DC;
helper h140, issue #16): each false shape paired with the nearest true case that must stay reported."""

from __future__ import annotations

from .precision_helpers import migrate_json, write_project
from .precision_helpers import finding_places as _places
from .precision_helpers import scope_reasons as _scopes


# ----------------------------------------------------------------------------- DA#36: a debug mode off the platform
SYNC_DEBUG = '''from contextlib import contextmanager

import torch

import vllm.envs as envs
from vllm.platforms import current_platform

_SYNC_CHECK_MODE = envs.VLLM_GPU_SYNC_CHECK if current_platform.is_cuda_alike() else None
_PROFILE_MODE = envs.VLLM_GPU_PROFILE if current_platform.is_cuda_alike() else envs.VLLM_NPU_PROFILE


@contextmanager
def _checked_region(mode):
    saved = torch.cuda.get_sync_debug_mode()
    torch.cuda.set_sync_debug_mode(mode)
    try:
        yield
    finally:
        torch.cuda.set_sync_debug_mode(saved)


@contextmanager
def _profiled_region(mode):
    torch.cuda.set_sync_debug_mode(mode)
    yield


def checked(fn):
    def inner(*args, **kwargs):
        if (mode := _SYNC_CHECK_MODE) is None:
            return fn(*args, **kwargs)
        with _checked_region(mode):
            return fn(*args, **kwargs)

    return inner


def profiled(fn):
    def inner(*args, **kwargs):
        if (mode := _PROFILE_MODE) is None:
            return fn(*args, **kwargs)
        with _profiled_region(mode):
            return fn(*args, **kwargs)

    return inner
'''


def test_context_manager_reached_only_after_an_exit_on_a_mode_none_off_the_platform(tmp_path):
    """DA#36: `_SYNC_CHECK_MODE = envs.X if current_platform.is_cuda_alike() else None` is None on an
    NPU host, so `if (mode := _SYNC_CHECK_MODE) is None: return ...` exits before the only use of
    the `@contextmanager` helper that brackets the sync-debug API: a named scope. The same shape
    whose mode takes another setting on an NPU host (`else envs.VLLM_NPU_PROFILE`) keeps its error."""
    report = migrate_json(write_project(tmp_path, {"vllm/utils/sync_debug.py": SYNC_DEBUG}))
    path = "vllm/utils/sync_debug.py"
    found = _places(report, path, "NPU202")
    assert 15 not in found and 16 not in found
    assert "`_checked_region` is reached only from code an NPU host does not run" in _scopes(report, path, "NPU202")[15]
    assert found[24]["severity"] == "error"


# ----------------------------------------------------------------------------- DA#38: a dtype constant of a rejected kernel
SELECTOR = '''from .torch_mm import TorchMMKernel
from .plain_mm import PlainMMKernel

_CANDIDATES = [TorchMMKernel, PlainMMKernel]


def choose(config):
    for kernel in _CANDIDATES:
        ok, why = kernel.is_supported()
        if ok:
            return kernel
    raise ValueError("no kernel")
'''

TORCH_MM = '''import torch

from pkg.platforms import current_platform

_E8M0 = torch.float8_e8m0fnu


class TorchMMKernel:
    @classmethod
    def is_supported(cls):
        if current_platform.is_cuda() and current_platform.has_device_capability(90):
            return True, None
        return False, "requires CUDA sm_90"

    def process(self, layer):
        layer.scale = layer.scale.view(_E8M0)
'''

PLAIN_MM = '''import torch

_E4M3 = torch.float8_e4m3fn


class PlainMMKernel:
    @classmethod
    def is_supported(cls):
        return True, None

    def process(self, layer):
        layer.weight = layer.weight.to(_E4M3)
'''


def test_module_dtype_constant_read_only_by_a_kernel_class_its_own_check_rejects(tmp_path):
    """DA#38: `_E8M0 = torch.float8_e8m0fnu` at module level, read only inside a kernel class whose
    `is_supported` answers no on an NPU host (a selector asks it first): the class's code never
    runs there, and the constant follows it as a named scope. The nearest true case, the same
    constant read by a kernel class that is supported everywhere, keeps its error; so does the
    rejected class's constant where another module imports it."""
    files = {"pkg/__init__.py": "", "pkg/platforms/__init__.py": "current_platform = None\n",
             "pkg/kernels/__init__.py": SELECTOR, "pkg/kernels/torch_mm.py": TORCH_MM,
             "pkg/kernels/plain_mm.py": PLAIN_MM}
    report = migrate_json(write_project(tmp_path, files))
    assert 5 not in _places(report, "pkg/kernels/torch_mm.py", "NPU913")
    assert "`_E8M0` is read only in `TorchMMKernel`" in _scopes(report, "pkg/kernels/torch_mm.py", "NPU913")[5]
    assert _places(report, "pkg/kernels/plain_mm.py", "NPU913")[3]["severity"] == "error"

    files["pkg/kernels/scales.py"] = "from .torch_mm import _E8M0\n\nSCALE_DTYPE = _E8M0\n"
    report = migrate_json(write_project(tmp_path / "imported", files))
    assert _places(report, "pkg/kernels/torch_mm.py", "NPU913")[5]["severity"] == "error"


# ----------------------------------------------------------------------------- DB#14: a CI image argument
DOCKERFILE = '''ARG CUDA_VERSION=12.8.1
ARG FINAL_BASE_IMAGE=nvidia/cuda:${CUDA_VERSION}-base-ubuntu22.04
FROM ${FINAL_BASE_IMAGE} AS final
RUN pip install vllm
'''

PIPELINE = '''steps:
  - label: "Build release image"
    commands:
      - |
        docker buildx build \\
          --build-arg FINAL_BASE_IMAGE=nvidia/cuda:13.4.1-base-ubuntu24.04 \\
          --build-arg NCCL_VERSION=2.32.3 \\
          -f docker/Dockerfile .
'''

SMOKE = '''steps:
  - label: "Smoke test"
    commands:
      - |
        docker run --rm \\
          --build-arg FINAL_BASE_IMAGE=x \\
          nvidia/cuda:13.4.1-base-ubuntu24.04 nvidia-smi
'''

NIGHTLY = '''#!/bin/bash
set -e
NIGHTLY_FINAL_BASE_IMAGE="nvidia/cuda:13.0.1-base-ubuntu24.04"
docker buildx build --file docker/Dockerfile \\
  --build-arg FINAL_BASE_IMAGE="${NIGHTLY_FINAL_BASE_IMAGE}" \\
  --progress plain .
OTHER_IMAGE="nvidia/cuda:13.0.1-devel-ubuntu24.04"
docker buildx build --file docker/Dockerfile.other \\
  --build-arg BASE_IMAGE="${OTHER_IMAGE}" .
'''


def test_ci_build_argument_setting_the_dockerfiles_own_reported_image_is_folded_into_it(tmp_path):
    """DB#14: a release pipeline passes `--build-arg FINAL_BASE_IMAGE=nvidia/cuda:...` to the run's
    docker/Dockerfile, whose `ARG FINAL_BASE_IMAGE=nvidia/cuda:...` is reported there (NPU707): one
    root cause, folded into the Dockerfile's finding, which names the CI file and lines; the same
    through a shell variable. Kept: `docker run nvidia/cuda:...` (no Dockerfile), and an argument
    for a Dockerfile outside the run."""
    files = {"docker/Dockerfile": DOCKERFILE, ".buildkite/release-pipeline.yaml": PIPELINE,
             ".buildkite/nightly.sh": NIGHTLY, ".buildkite/smoke.yaml": SMOKE}
    report = migrate_json(write_project(tmp_path, files))
    assert not _places(report, ".buildkite/release-pipeline.yaml", "NPU707")
    assert _places(report, ".buildkite/smoke.yaml", "NPU707")[7]["severity"] == "error"
    nightly = _places(report, ".buildkite/nightly.sh", "NPU707")
    assert 3 not in nightly and nightly[7]["severity"] == "error"
    host = _places(report, "docker/Dockerfile", "NPU707")[2]
    assert host["severity"] == "error"
    assert "`.buildkite/release-pipeline.yaml` lines 6, 7" in host["message"]
    assert "`.buildkite/nightly.sh` line 3" in host["message"]


# ----------------------------------------------------------------------------- DA#12: a build probe
BUILD_PROBES = '''import torch


def cuda_is_initialized() -> bool:
    if not torch.cuda._is_compiled():
        return False
    return torch.cuda.is_initialized()


def in_bad_fork() -> bool:
    return torch.cuda._is_in_bad_fork()


def init_cuda():
    torch.cuda._lazy_init()
'''


def test_cuda_build_probe_every_torch_build_answers_runs_as_written(tmp_path):
    """DA#12: `torch.cuda._is_compiled()` (and `_is_in_bad_fork()`) exist in every torch build and
    answer False without CUDA, as on an NPU host: the code takes its CUDA-less path there, a named
    scope "runs as written". The nearest true case, `torch.cuda._lazy_init()` (the CUDA runtime),
    keeps its error. The table's names are checked against the installed (CPU) torch."""
    import torch

    from npu_migrate.buildprobes29 import probes

    for name in probes():
        assert getattr(torch.cuda, name.rsplit(".", 1)[1])() is False
    report = migrate_json(write_project(tmp_path, {"utils.py": BUILD_PROBES}))
    found, scopes = _places(report, "utils.py", "NPU202"), _scopes(report, "utils.py", "NPU202")
    assert 5 not in found and "a CUDA build probe every torch build answers" in scopes[5]
    assert 11 not in found and 11 in scopes
    assert found[15]["severity"] == "error"


# ----------------------------------------------------------------------------- DA#24: a kernel never launched
DISPATCHER_TEST = '''import sys
import types

import pytest
import torch

from vllm.triton_utils import tl, triton
from vllm.triton_utils.dispatcher import register_kernels


def test_override_end_to_end():
    if not triton.__class__.__module__.startswith("triton"):
        pytest.skip("Triton is not installed")

    @triton.jit
    def _add_one_kernel(x_ptr, out_ptr, BLOCK: tl.constexpr):
        offsets = tl.arange(0, BLOCK)
        tl.store(out_ptr + offsets, tl.load(x_ptr + offsets) + 1)

    module = types.ModuleType("vllm.tests.real_jit_kernel_home")
    module._add_one_kernel = _add_one_kernel
    sys.modules[module.__name__] = module
    register_kernels({"vllm.tests.real_jit_kernel_home._add_one_kernel": lambda *a: "cpu"})
    assert module._add_one_kernel.arg_names == ("x_ptr", "out_ptr", "BLOCK")


def test_kernel_launched():
    @triton.jit
    def _add_two_kernel(x_ptr, out_ptr, BLOCK: tl.constexpr):
        offsets = tl.arange(0, BLOCK)
        tl.store(out_ptr + offsets, tl.load(x_ptr + offsets) + 2)

    x = torch.zeros(4, device="cuda")
    out = torch.empty_like(x)
    _add_two_kernel[(1,)](x, out, BLOCK=4)
'''


def test_triton_kernel_a_test_defines_and_never_launches(tmp_path):
    """DA#24: a `@triton.jit` kernel defined inside a test that only stores it into a module and
    reads its `arg_names` is never launched: decorating runs nothing, a named scope (no port work).
    The nearest true case, the same kernel shape launched by the test (`k[(1,)](...)`), keeps its
    error."""
    report = migrate_json(write_project(tmp_path, {"tests/test_dispatcher.py": DISPATCHER_TEST}))
    path = "tests/test_dispatcher.py"
    found = _places(report, path, "NPU910")
    assert 15 not in found and "never launches" in _scopes(report, path, "NPU910")[15]
    assert found[28]["severity"] == "error"


# ----------------------------------------------------------------------------- DA#6: a mock's return value
MOCKED = '''from types import SimpleNamespace
from unittest.mock import patch

import torch

from vllm.utils.mem_utils import MemorySnapshot


def test_snapshot_integrated():
    with patch("torch.accelerator") as mock_accelerator:
        mock_accelerator.memory_reserved.return_value = 0
        mock_accelerator.current_device = lambda: "cuda:0"
        snapshot = MemorySnapshot(device=torch.device("cpu"))
        assert snapshot.free_memory == 0


@patch("vllm.utils.quant_utils.current_platform")
def test_fp8_platform(mock_platform):
    mock_platform.fp8_dtype.return_value = torch.float8_e4m3fn
    assert mock_platform.fp8_dtype() is torch.float8_e4m3fn


def test_snapshot_fake():
    fake = SimpleNamespace()
    fake.current_device = lambda: "cuda:0"
    snapshot = MemorySnapshot(device=torch.device("cpu"), accelerator=fake)
    assert snapshot.free_memory == 0


def test_fp8_cast():
    x = torch.ones(4)
    y = x.to(torch.float8_e4m3fn)
    assert y.shape == x.shape
'''


def test_value_a_tests_mock_returns_in_place_of_the_real_query(tmp_path):
    """DA#6: `mock_accelerator.current_device = lambda: "cuda:0"` on a `patch("torch.accelerator")`
    mock, and `mock_platform.fp8_dtype.return_value = torch.float8_e4m3fn` on a `@patch`ed platform:
    values a mock hands the code under test, the same on every host: named scopes (no port work).
    The nearest true case, the same lambda on a plain object that is no mock, keeps its warning."""
    report = migrate_json(write_project(tmp_path, {"tests/test_mem.py": MOCKED}))
    path = "tests/test_mem.py"
    leftover, scopes = _places(report, path, "NPU990"), _scopes(report, path, "NPU990")
    assert 12 not in leftover and "a test's mock returns" in scopes[12]
    assert 19 not in _places(report, path, "NPU913") and 19 in _scopes(report, path, "NPU913")
    assert leftover[25]["severity"] == "warning"


# ----------------------------------------------------------------------------- DC#33: an env opt-in skip
ENVS = '''import os

environment_variables = {
    "VLLM_USE_SPLIT_GROUP": lambda: bool(int(os.getenv("VLLM_USE_SPLIT_GROUP", "0"))),
    "VLLM_USE_FAST_PATH": lambda: bool(int(os.getenv("VLLM_USE_FAST_PATH", "1"))),
}


def __getattr__(name):
    return environment_variables[name]()
'''

SPLIT_TEST = '''import pytest
import torch

import vllm.envs as envs

pytestmark = pytest.mark.skipif(
    not envs.{switch},
    reason="the split_group path is opt-in",
)


def test_split_group():
    assert torch.cuda.get_sync_debug_mode() == 0
'''


def test_test_module_skipped_unless_an_env_switch_off_by_default_is_set(tmp_path):
    """DC#33: a test module whose `pytestmark` skips it unless `envs.VLLM_USE_SPLIT_GROUP` is set,
    a switch the project's envs.py reads as off by default: it runs on an NPU host only when the
    user sets the variable (P1): its NPU202 finding is info naming the variable and its default.
    The nearest true case, the same skip on a switch on by default, keeps its finding."""
    files = {"vllm/__init__.py": "", "vllm/envs.py": ENVS,
             "tests/test_split.py": SPLIT_TEST.replace("{switch}", "VLLM_USE_SPLIT_GROUP"),
             "tests/test_fast.py": SPLIT_TEST.replace("{switch}", "VLLM_USE_FAST_PATH")}
    report = migrate_json(write_project(tmp_path, files))
    split = [f for f in report["findings"] if f["path"] == "tests/test_split.py" and not f["fixable"]]
    fast = [f for f in report["findings"] if f["path"] == "tests/test_fast.py" and not f["fixable"]]
    assert split and all(f["severity"] == "info" for f in split)
    assert all("only when the environment variable `VLLM_USE_SPLIT_GROUP` is set" in f["message"] for f in split)
    assert fast and {f["code"] for f in fast} == {f["code"] for f in split}
    assert all(f["severity"] != "info" for f in fast)


# ----------------------------------------------------------------------------- DC#12: a test module run as a script
SCRIPTED_TEST = '''import argparse

import pytest
import torch

from vllm.platforms import current_platform


def _check_replays(x):
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        y = x * 2
    graph.replay()
    return y


def run(n):
    return _check_replays(torch.ones(n, device="cuda"))


def _check_sync():
    return torch.cuda.get_sync_debug_mode()


@pytest.mark.skipif(not current_platform.is_device_capability_family(100), reason="needs SM100")
def test_numerics():
    run(4)


def test_sync_mode():
    assert _check_sync() == 0


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--n", type=int, default=4)
    run(parser.parse_args().n)
    _check_sync()
'''


def test_helpers_only_skipped_tests_and_the_script_block_reach(tmp_path):
    """DC#12: `run` (and `_check_replays`, which it calls) are reached from a test skipped off
    SM100 and from the module's `if __name__ == "__main__":` block: under pytest the test is
    skipped on an NPU host, and the helpers run there only when a user runs the test module as a
    script: info naming the block and the skip (P1). The nearest true case, `_check_sync`, which
    a test that runs on an NPU host also calls, keeps its error."""
    report = migrate_json(write_project(tmp_path, {"tests/test_numerics.py": SCRIPTED_TEST}))
    found = _places(report, "tests/test_numerics.py", "NPU202")
    assert found[10]["severity"] == "info" and "run as a script" in found[10]["message"]
    assert "is_device_capability_family(100)" in found[10]["message"]
    assert found[22]["severity"] == "error"
