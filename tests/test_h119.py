"""Round-26 audit, helper h119 (issue #16): tests, benchmarks and labels.

* BU#11 (testgates26.review_flag_skips): `@pytest.mark.skipif(not FLAG)` with FLAG imported from a
  library module where a function true only on CUDA/ROCm computes it: the test is a named scope; a
  flag that is only a package probe, or a test without the marker, keeps its finding.
* BU#27 (rules/scopes.toml): `requires_moonep = pytest.mark.skipif(not has_moonep())` stored in a
  variable: MoonEP has no NPU build, so the marked tests and the helper only they call are scopes.
* BV#2 (testscopes._helper_scopes): a class whose own method names it as a forward reference
  (`-> "Tensors8Bit"`) is still a helper only skipped tests use.
* BV#14 (testgates26._skipped_constants): a module-level device list read only by a skipped test's
  parametrize; one a running test reads keeps the finding.
* BV#39 (testgates26._accelerator_first): the CUDA allocator call after an accelerator-generic setter
  that returns first; the same call with no such setter keeps the error.
"""

from __future__ import annotations

from .precision_helpers import migrate_json, moot_lines, write_project

_PLATFORM = '''\
class _Platform:
    def is_cuda(self):
        return False

    def is_rocm(self):
        return False


current_platform = _Platform()
'''

_UTILS = '''\
import importlib.util


def has_tilelang():
    return importlib.util.find_spec("tilelang") is not None


def has_moonep():
    return importlib.util.find_spec("moonep") is not None
'''

_LAYER = '''\
from pkg.platforms import current_platform
from pkg.utils import has_tilelang


def _has_tilelang_mhc() -> bool:
    if not has_tilelang():
        return False
    if current_platform.is_cuda():
        return True
    if current_platform.is_rocm():
        return True
    return False


HAS_TILELANG_MHC = _has_tilelang_mhc()
HAS_TILELANG = has_tilelang()
'''

_FLAG_TEST = '''\
import pytest
import torch

from pkg.layers.mhc import HAS_TILELANG, HAS_TILELANG_MHC


def _capture(fn):
    graph = torch.cuda.CUDAGraph()
    return graph


@pytest.mark.skipif(not HAS_TILELANG_MHC, reason="TileLang MHC support required")
def test_mhc_delayed():
    graph = torch.cuda.CUDAGraph()
    _capture(None)


@pytest.mark.skipif(not HAS_TILELANG, reason="TileLang required")
def test_mhc_probe_only():
    graph = torch.cuda.CUDAGraph()


def test_mhc_plain():
    graph = torch.cuda.CUDAGraph()
'''


def _errors(report: dict, path: str, code: str) -> dict[int, dict]:
    return {f["line"]: f for f in report["findings"]
            if f["path"] == path and f["code"] == code and not f["fixable"] and f["severity"] != "info"}


def test_skipif_on_imported_cuda_only_flag_is_a_scope(tmp_path):
    root = write_project(tmp_path, {
        "pkg/__init__.py": "", "pkg/layers/__init__.py": "", "pkg/platforms.py": _PLATFORM,
        "pkg/utils.py": _UTILS, "pkg/layers/mhc.py": _LAYER, "tests/test_mhc.py": _FLAG_TEST,
    })
    report = migrate_json(root)
    path = "tests/test_mhc.py"
    errors = _errors(report, path, "NPU202")
    moot = moot_lines(report["skipped"], "NPU202", path)
    assert 14 in moot and "HAS_TILELANG_MHC" in moot[14] and "pkg/layers/mhc.py" in moot[14]
    assert 8 in moot and "in a helper" in moot[8]  # (only the skipped test calls it)
    assert 14 not in errors and 8 not in errors
    # a package probe alone (unknown there), and a test with no marker: kept
    assert 20 in errors and "24" in errors[20]["message"]


_MOONEP_TEST = '''\
import pytest
import torch

from pkg.utils import has_moonep

requires_moonep = pytest.mark.skipif(not has_moonep(), reason="Requires MoonEP")


def make_prepare_finalize():
    graph = torch.cuda.CUDAGraph()
    return graph


def make_other():
    graph = torch.cuda.CUDAGraph()
    return graph


@requires_moonep
def test_moonep_moe():
    make_prepare_finalize()


def test_runs_everywhere():
    make_other()
'''


def test_marker_in_a_variable_on_a_probe_of_a_cuda_only_package(tmp_path):
    root = write_project(tmp_path, {"pkg/__init__.py": "", "pkg/utils.py": _UTILS,
                                    "tests/test_moonep.py": _MOONEP_TEST})
    report = migrate_json(root)
    path = "tests/test_moonep.py"
    errors = _errors(report, path, "NPU202")
    moot = moot_lines(report["skipped"], "NPU202", path)
    assert 10 in moot and "has_moonep" in moot[10]
    assert 10 not in errors
    assert 15 in errors  # (a helper a running test calls)


_TENSORS_TEST = '''\
import dataclasses

import pytest
import torch

from pkg.platforms import current_platform


@dataclasses.dataclass
class Tensors:
    a: torch.Tensor


@dataclasses.dataclass
class Tensors8Bit(Tensors):
    q: torch.Tensor

    @staticmethod
    def make(m) -> "Tensors8Bit":
        a = torch.randn(m)
        return Tensors8Bit(a=a, q=a.to(torch.float8_e4m3fn))


@dataclasses.dataclass
class TensorsKept:
    q: torch.Tensor

    @staticmethod
    def make(m) -> "TensorsKept":
        return TensorsKept(q=torch.randn(m).to(torch.float8_e4m3fn))


def run_8_bit(t: Tensors8Bit):
    return t.q


@pytest.mark.skipif(not current_platform.is_cuda(), reason="CUDA only")
def test_8_bit():
    run_8_bit(Tensors8Bit.make(4))


def test_kept():
    TensorsKept.make(4)
'''


def test_class_named_by_its_own_forward_reference_is_a_helper(tmp_path):
    root = write_project(tmp_path, {"pkg/__init__.py": "", "pkg/platforms.py": _PLATFORM,
                                    "tests/test_tensors.py": _TENSORS_TEST})
    report = migrate_json(root)
    path = "tests/test_tensors.py"
    errors = _errors(report, path, "NPU913")
    moot = moot_lines(report["skipped"], "NPU913", path)
    assert 21 in moot and 21 not in errors
    assert 30 in errors  # (a running test builds it)


_DEVICES_TEST = '''\
import pytest
import torch

from pkg.platforms import current_platform

CUDA_DEVICES = ["cuda:0"]
OTHER_DEVICES = ["cuda:0"]


@pytest.mark.skipif(not current_platform.is_cuda(), reason="CUDA only")
@pytest.mark.parametrize("device", CUDA_DEVICES)
def test_kernel(device):
    torch.set_default_device(device)


@pytest.mark.parametrize("device", OTHER_DEVICES)
def test_runs(device):
    torch.set_default_device(device)
'''


def test_device_list_read_only_by_a_skipped_test(tmp_path):
    root = write_project(tmp_path, {"pkg/__init__.py": "", "pkg/platforms.py": _PLATFORM,
                                    "tests/test_devices.py": _DEVICES_TEST})
    report = migrate_json(root)
    path = "tests/test_devices.py"
    kept = {f["line"] for f in report["findings"] if f["path"] == path and f["code"] == "NPU990"
            and not f["fixable"] and f["severity"] != "info"}
    moot = moot_lines(report["skipped"], "NPU990", path)
    assert 6 in moot and "CUDA_DEVICES" in moot[6] and 6 not in kept
    assert 7 not in moot  # (a running test reads it: whatever else says of it, not this shape)


_ALLOC = '''\
import torch


def set_alloc_conf(conf: str) -> None:
    setter = getattr(torch._C, "_accelerator_setAllocatorSettings", None)
    if setter is not None:
        setter(conf)
        return
    torch.cuda.memory._set_allocator_settings(conf)


def set_alloc_conf_directly(conf: str) -> None:
    torch.cuda.memory._set_allocator_settings(conf)


def set_alloc_conf_logged(conf: str) -> None:
    setter = getattr(torch._C, "_accelerator_setAllocatorSettings", None)
    if setter is not None:
        print("accelerator setter present")
    torch.cuda.memory._set_allocator_settings(conf)
'''


def test_cuda_allocator_fallback_after_the_accelerator_setter(tmp_path):
    root = write_project(tmp_path, {"pkg/__init__.py": "", "pkg/alloc.py": _ALLOC})
    report = migrate_json(root)
    path = "pkg/alloc.py"
    errors = _errors(report, path, "NPU202")
    moot = moot_lines(report["skipped"], "NPU202", path)
    assert 9 in moot and "_accelerator_setAllocatorSettings" in moot[9] and 9 not in errors
    assert 13 in errors and "20" in errors[13]["message"]


_LABELS = '''\
import torch

DEFAULT_PIP_PATTERNS = {
    "torch",
    "numpy",
    "nccl",
}

BACKENDS = ["gloo", "nccl"]


def fake_toolkit(tmp_path):
    nvcc = tmp_path / "cuda" / "bin" / "nvcc"
    return nvcc


def pick(rank):
    return torch.device("cuda", rank), BACKENDS[rank]
'''


def test_path_component_and_package_pattern_are_labels(tmp_path):
    root = write_project(tmp_path, {"pkg/__init__.py": "", "pkg/env.py": _LABELS})
    report = migrate_json(root)
    path = "pkg/env.py"
    kept = {f["line"] for f in report["findings"] if f["path"] == path and not f["fixable"]
            and f["code"] in ("NPU990", "NPU304", "NPU302") and f["severity"] != "info"}
    named = {s["start_line"]: s["reason"] for s in report["skipped"]
             if s.get("path") == path and "start_line" in s}
    assert 6 in named and "package-name pattern" in named[6] and 6 not in kept
    assert 13 in named and "path component" in named[13] and 13 not in kept
    assert 9 not in named or "package-name pattern" not in named[9]  # (another name: not a pattern set)


_PATCHED_TEST = '''\
import pytest
import torch

from pkg.layers import mhc
from pkg.layers.mhc import HAS_TILELANG_MHC


@pytest.mark.skipif(not HAS_TILELANG_MHC, reason="TileLang MHC support required")
def test_mhc_delayed():
    graph = torch.cuda.CUDAGraph()


def test_fallback(monkeypatch):
    monkeypatch.setattr(mhc, "HAS_TILELANG_MHC", False)
'''


def test_flag_patched_only_to_false_still_decides_the_skip(tmp_path):
    files = {"pkg/__init__.py": "", "pkg/layers/__init__.py": "", "pkg/platforms.py": _PLATFORM,
             "pkg/utils.py": _UTILS, "pkg/layers/mhc.py": _LAYER, "tests/test_mhc.py": _PATCHED_TEST}
    report = migrate_json(write_project(tmp_path / "a", files))
    assert 10 in moot_lines(report["skipped"], "NPU202", "tests/test_mhc.py")
    # patched to True somewhere: the flag may be on, the test kept
    files["tests/test_mhc.py"] = _PATCHED_TEST.replace('"HAS_TILELANG_MHC", False', '"HAS_TILELANG_MHC", True')
    report = migrate_json(write_project(tmp_path / "b", files))
    assert 10 in _errors(report, "tests/test_mhc.py", "NPU202")
