"""Round-10 audits (issue #16): labels and text files that only name CUDA (labels6)."""

from __future__ import annotations

from tests.precision_helpers import migrate_json, write_project


def _findings(report: dict, path: str, code: str) -> list[dict]:
    return [f for f in report["findings"] if f["path"] == path and f["code"] == code and not f["fixable"]]


def _scopes(report: dict, path: str) -> list[str]:
    return [s["reason"] for s in report["skipped"] if s.get("path") == path]


HARNESS = '''\
import torch
from myproj.triton_utils import triton


@triton.testing.perf_report(
    triton.testing.Benchmark(x_names=["n"], x_vals=[1, 2], line_arg="provider",
                             line_vals=["a"], line_names=["A"], plot_name="p", args={}))
def benchmark(n, provider):
    x = torch.ones(n, device="cuda")
    return triton.testing.do_bench(lambda: x + 1)
'''

KERNEL = '''\
import triton
import triton.language as tl


@triton.jit
def add(x_ptr, n: tl.constexpr):
    pass


@triton.testing.perf_report(
    triton.testing.Benchmark(x_names=["n"], x_vals=[1, 2], line_arg="provider",
                             line_vals=["a"], line_names=["A"], plot_name="p", args={}))
def benchmark(n, provider):
    return triton.testing.do_bench(lambda: add[(1,)](None, n))
'''


def test_triton_testing_harness_only_is_a_scope_kernel_stays(tmp_path):
    root = write_project(tmp_path, {"bench.py": HARNESS, "kernel_bench.py": KERNEL,
                                    "myproj/__init__.py": "", "myproj/triton_utils.py": "import triton\n"})
    report = migrate_json(root)
    assert not _findings(report, "bench.py", "NPU910")
    assert any("NPU910" in r and "triton.testing.perf_report" in r for r in _scopes(report, "bench.py"))
    kept = _findings(report, "kernel_bench.py", "NPU910")
    assert kept and kept[0]["severity"] != "info"


PIPELINE = '''\
steps:
- label: "Fusion (B200)"
  device: b200-k8s
  commands:
    - nvidia-smi
    - pytest -v tests/a.py
- label: "Plain step"
  commands:
    - nvidia-smi
    - pytest -v tests/b.py
- label: "Kernels (H100)"
  agents:
    queue: h100
  commands:
    - nvidia-smi
- label: "Granite (L4)"
  device: l4
  commands:
    - nvidia-smi
'''


def test_ci_step_pinned_to_nvidia_hardware_is_a_scope_unpinned_stays(tmp_path):
    root = write_project(tmp_path, {".buildkite/pipeline.yaml": PIPELINE})
    report = migrate_json(root)
    kept = _findings(report, ".buildkite/pipeline.yaml", "NPU704")
    lines = {kept[0]["line"], *(a[0] for a in kept[0].get("also", []))} if kept else set()
    assert lines == {9}, kept  # the step with no hardware pin keeps its error
    assert kept[0]["severity"] == "error"
    reasons = _scopes(report, ".buildkite/pipeline.yaml")
    assert any("`device: b200-k8s`" in r for r in reasons), reasons
    assert any("`queue: h100`" in r for r in reasons), reasons
    assert any("`device: l4`" in r for r in reasons), reasons


RECIPE = '''\
meta:
  title: "Model"
  hardware:
    h200: verified
    b200: verified
    mi355x: verified
variants:
  cluster:
    env:
      NCCL_NVLS_ENABLE: "1"
      CUDA_VISIBLE_DEVICES: "0,1"
'''

RECIPE_NPU = RECIPE.replace("    mi355x: verified\n", "    mi355x: verified\n    ascend_910c: verified\n")


def test_recipe_for_other_hardware_scopes_nccl_switches_npu_recipe_keeps_them(tmp_path):
    root = write_project(tmp_path, {"recipes/a.yaml": RECIPE, "recipes/b.yaml": RECIPE_NPU})
    report = migrate_json(root)
    assert not _findings(report, "recipes/a.yaml", "NPU703")
    assert any("a recipe for other hardware" in r for r in _scopes(report, "recipes/a.yaml"))
    assert _findings(report, "recipes/a.yaml", "NPU701")  # a warning of the recipe stays
    assert _findings(report, "recipes/b.yaml", "NPU703")  # a recipe that lists the NPU keeps it


BACKEND = '''\
import torch
from sgl_kernel import merge_state


def run(x):
    return merge_state(x)
'''

BACKEND_TEST = '''\
import unittest

import torch

from proj.backend import run


class TestBackend(unittest.TestCase):
    def test_device(self):
        out = run(torch.ones(2))
        self.assertEqual(out.device.type, "cuda")
'''

PLAIN_TEST = BACKEND_TEST.replace("from proj.backend import run", "from proj.plain import run")


def test_cuda_string_in_test_module_whose_import_fails_is_folded_plain_test_stays(tmp_path):
    root = write_project(tmp_path, {
        "proj/__init__.py": "", "proj/backend.py": BACKEND, "proj/plain.py": "def run(x):\n    return x\n",
        "tests/test_backend.py": BACKEND_TEST, "tests/test_plain.py": PLAIN_TEST,
        "pyproject.toml": "[project]\nname = 'proj'\n",
    })
    report = migrate_json(root)  # (sgl_kernel: scopes.toml's compiled_without_npu_build)
    assert not _findings(report, "tests/test_backend.py", "NPU990")
    assert any("whose import fails on an NPU host" in r and "sgl_kernel" in r
               for r in _scopes(report, "tests/test_backend.py"))
    kept = _findings(report, "tests/test_plain.py", "NPU990")
    assert kept and kept[0]["severity"] == "warning"


LABELS = '''\
import pytest
import torch

COPYING_DIRECTION = [("cuda", "cpu"), ("cuda", "cuda"), ("cpu", "cuda")]
RESHAPE_IMPLEMENTATIONS = ["cuda", "triton"]
DEVICES = ["cuda:0"]


@pytest.mark.parametrize("implementation", RESHAPE_IMPLEMENTATIONS)
@pytest.mark.parametrize("device", DEVICES)
def test_reshape(implementation, device):
    torch.set_default_device(device)
    assert implementation in ["cuda", "triton"]
    if implementation == "triton":
        pytest.skip("layout")
    if implementation != "cuda":
        pytest.skip("scaling")


@pytest.mark.parametrize("direction", COPYING_DIRECTION)
@pytest.mark.parametrize("device", DEVICES)
def test_swap(direction, device):
    if "cpu" in direction:
        pytest.skip()
    src_device = device if direction[0] == "cuda" else "cpu"
    torch.ones(2, device=src_device)
'''

DEVICE_LISTS = '''\
import pytest
import torch

PAIRS = [("cuda", "cpu"), ("cpu", "cuda")]
TARGETS = ["cuda", "cpu"]


@pytest.mark.parametrize("pair", PAIRS)
def test_pair(pair):
    torch.ones(2, device=pair[0]).to(pair[1])


@pytest.mark.parametrize("target", TARGETS)
def test_target(target):
    torch.ones(2, device=target)
'''


def test_implementation_and_direction_labels_device_lists_stay(tmp_path):
    root = write_project(tmp_path, {"tests/test_cache.py": LABELS, "tests/test_devices.py": DEVICE_LISTS})
    report = migrate_json(root)
    left = _findings(report, "tests/test_cache.py", "NPU990")
    assert [f["source"] for f in left] == ['"cuda:0"'], left  # the real device stays
    kept = _findings(report, "tests/test_devices.py", "NPU990")
    lines = {kept[0]["line"], *(a[0] for a in kept[0].get("also", []))} if kept else set()
    assert {4, 5} <= lines, kept  # tuples used as devices, a device list: still reported


FIXTURE = '''\
import pytest
import torch


@pytest.fixture(params=["cpu", "cuda"])
def mapping(request):
    device = request.param
    if device == "cuda" and not torch.cuda.is_available():
        pytest.skip("requires CUDA")
    return torch.arange(4, device=device)


@pytest.fixture(params=["cpu", "cuda"])
def plain(request):
    return torch.arange(4, device=request.param)
'''


def test_fixture_skipping_its_cuda_parameter_is_moot_unskipped_fixture_stays(tmp_path):
    root = write_project(tmp_path, {"tests/test_mapping.py": FIXTURE})
    report = migrate_json(root)
    left = _findings(report, "tests/test_mapping.py", "NPU990")
    lines = {f["line"] for f in left} | {a[0] for f in left for a in f.get("also", [])}
    assert 5 not in lines and 13 in lines, left
    assert all(f["severity"] == "warning" for f in left)
    assert any("skips its \"cuda\" parameter" in r and "`mapping`" in r for r in _scopes(report, "tests/test_mapping.py"))


FLASH = '''\
import importlib.util

import torch

FLASH_VERSION = "0.0.0"
_TRY_PT_FLASH = torch.version.hip is None and torch.backends.cuda.is_flash_attention_available()

if importlib.util.find_spec("flash_attn"):
    import flash_attn

    FLASH_VERSION = flash_attn.__version__
elif _TRY_PT_FLASH:
    FLASH_VERSION = "pt"


if FLASH_VERSION != "0.0.0":

    @torch.library.custom_op("mylib::flash_fwd", mutates_args=(), device_types=["cuda"])
    def _flash_fwd(q: torch.Tensor) -> torch.Tensor:
        return q
'''

# the version is set on a path an NPU host may take (a portable package): the op stays reported
OPEN = FLASH.replace('find_spec("flash_attn")', 'find_spec("my_portable_attn")').replace(
    "import flash_attn\n", "import my_portable_attn as flash_attn\n")


def test_custom_op_in_a_block_only_cuda_enters_is_moot_portable_block_stays(tmp_path):
    root = write_project(tmp_path, {"proj/flash.py": FLASH, "proj/open_flash.py": OPEN})
    report = migrate_json(root)
    assert not _findings(report, "proj/flash.py", "NPU990")
    assert any("FLASH_VERSION" in r and "flash_attn" in r for r in _scopes(report, "proj/flash.py"))
    kept = _findings(report, "proj/open_flash.py", "NPU990")
    assert kept and kept[0]["severity"] == "warning", kept


ENVS = '''\
import os
from typing import TYPE_CHECKING, Any, Callable

if TYPE_CHECKING:
    MYPROJ_TARGET_DEVICE: str = "cuda"
    MYPROJ_RUN_DEVICE: str = "cuda"


def _lazy_str(name, default=None):
    return lambda: os.getenv(name, default)


environment_variables: dict[str, Callable[[], Any]] = {
    # target device chosen at install time: cuda (default), rocm, cpu
    "MYPROJ_TARGET_DEVICE": _lazy_str("MYPROJ_TARGET_DEVICE", "cuda"),
    "MYPROJ_RUN_DEVICE": _lazy_str("MYPROJ_RUN_DEVICE", "cuda"),
}


def __getattr__(name):
    return environment_variables[name]()
'''

USER = '''\
import torch

from proj import envs


def tensor():
    return torch.ones(2, device=envs.MYPROJ_RUN_DEVICE)
'''


def test_default_of_a_setting_read_nowhere_is_moot_a_read_setting_stays(tmp_path):
    read = ENVS.replace('    "MYPROJ_TARGET_DEVICE": _lazy_str("MYPROJ_TARGET_DEVICE", "cuda"),\n', "")
    unread = ENVS.replace('    "MYPROJ_RUN_DEVICE": _lazy_str("MYPROJ_RUN_DEVICE", "cuda"),\n', "").replace(
        "    MYPROJ_RUN_DEVICE: str = \"cuda\"\n", "").replace("MYPROJ_TARGET_DEVICE", "MYPROJ_BUILD_DEVICE")
    root = write_project(tmp_path, {"proj/__init__.py": "", "proj/envs.py": read, "proj/envs_install.py": unread,
                                    "proj/user.py": USER})
    report = migrate_json(root)
    assert not _findings(report, "proj/envs_install.py", "NPU990")
    assert any("MYPROJ_BUILD_DEVICE" in r and "nothing reads" in r for r in _scopes(report, "proj/envs_install.py"))
    kept = _findings(report, "proj/envs.py", "NPU990")
    assert kept and kept[0]["severity"] == "warning", kept


RECIPE_NPU_ENV = '''\
model:
  title: "Model"
hardware_overrides:
  blackwell:
    extra_args: ["--fast"]
  npu:
    extra_env:
      HCCL_BUFFSIZE: "1024"
      ASCEND_RT_VISIBLE_DEVICES: "0,1,2,3"
strategy_overrides:
  cluster:
    env:
      NCCL_CUMEM_ENABLE: "1"
      NCCL_NVLS_ENABLE: "1"
'''

RECIPE_NPU_ENV_MIXED = RECIPE_NPU_ENV.replace('      NCCL_NVLS_ENABLE: "1"\n',
                                              '      NCCL_NVLS_ENABLE: "1"\n      CUDA_VERSION: "12.8"\n')
RECIPE_NPU_LISTED = RECIPE_NPU_ENV.replace("  npu:\n    extra_env:\n", "  npu:\n    extra_args: [\"--x\"]\n    notes:\n")


def test_nccl_switches_in_a_file_with_its_own_npu_environment_are_scopes(tmp_path):
    root = write_project(tmp_path, {"recipes/a.yaml": RECIPE_NPU_ENV, "recipes/b.yaml": RECIPE_NPU_ENV_MIXED,
                                    "recipes/c.yaml": RECIPE_NPU_LISTED})
    report = migrate_json(root)
    assert not _findings(report, "recipes/a.yaml", "NPU703")
    assert any("its own NPU environment (`hardware_overrides.npu`" in r for r in _scopes(report, "recipes/a.yaml"))
    # a variable that is not NCCL's beside them: the finding stays (CUDA_VERSION may need a counterpart)
    assert _findings(report, "recipes/b.yaml", "NPU703")
    # an NPU entry without environment settings: the NCCL switches stay to review
    assert _findings(report, "recipes/c.yaml", "NPU703")


def test_nccl_switch_inside_the_npu_entry_itself_stays(tmp_path):
    text = RECIPE_NPU_ENV.replace('      ASCEND_RT_VISIBLE_DEVICES: "0,1,2,3"\n',
                                  '      ASCEND_RT_VISIBLE_DEVICES: "0,1,2,3"\n      NCCL_DEBUG: INFO\n')
    report = migrate_json(write_project(tmp_path, {"recipes/a.yaml": text}))
    lines = [f["line"] for f in _findings(report, "recipes/a.yaml", "NPU703")]
    assert lines == [text.splitlines().index("      NCCL_DEBUG: INFO") + 1]  # set for the NPU: it does nothing there
