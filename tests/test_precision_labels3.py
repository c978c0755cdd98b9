"""Issue #16: "cuda" labels and CUDA strings reported as NPU990 that are not device uses
(npu_migrate/labelflow.py, reach.py's explicit errors, testscopes.py's skipping setUp).

Each test reproduces a shape the round-7 audits judged false or redundant, with a small fixture of
our own, and checks that a true case next to it is still reported.
"""

from __future__ import annotations

from npu_migrate import catalogue
from npu_migrate.model import Options
from npu_migrate.run import migrate_file

OPTIONS = Options(enabled=catalogue.enabled_codes())


def _findings(source: str, code: str = "NPU990", path: str = "pkg/mod.py"):
    result = migrate_file(source.encode(), path, OPTIONS)
    return [f for f in result.findings if f.code == code and not f.fixable]


def _all(source: str, path: str = "pkg/mod.py"):
    return [f for f in migrate_file(source.encode(), path, OPTIONS).findings if not f.fixable]


def _lines(found, severity: str | None = None) -> set[int]:
    """Every line a finding (of that severity) names: its own and those merged into it."""
    out = set()
    for f in found:
        if severity is None or f.severity == severity:
            out.add(f.line)
            out.update(line for line, _column, _source in f.also)
    return out


def _reported(found) -> set[int]:
    """Lines of warnings and errors."""
    return _lines(found, "warning") | _lines(found, "error")


# ----------------------------------------------------------------------------- a kernel variant's constant
def test_a_kind_constant_names_a_kernel_variant():
    source = '''\
import torch


class QuantLinear(torch.nn.Module):
    QUANT_TYPE = "cuda"
    DEVICE_TYPE = "cuda"

    def pick(self, other):
        if other.QUANT_TYPE == "cuda":
            return 1
        return torch.zeros(2, device=self.DEVICE_TYPE)
'''
    found = _findings(source)
    lines = _lines(found)
    assert not lines & {5, 9}
    # a variant's constant handed to a device sink holds a device: stays reported
    used = _findings('''\
import torch

DEFAULT_BACKEND = "cuda"


def make():
    return torch.zeros(2, device=DEFAULT_BACKEND)
''')
    assert 3 in _reported(used)
    # a constant named for a device is a device: rewritten
    result = migrate_file(source.encode(), "pkg/mod.py", OPTIONS)
    assert any(f.line == 6 and f.fixable for f in result.findings)


# ----------------------------------------------------------------------------- an option's value
def test_cuda_compared_with_a_policy_name_is_an_option_value():
    source = '''\
import torch


class PolicyFactory:
    @staticmethod
    def create(policy_name: str, x):
        if policy_name == "cuda":
            return 1
        if x.device.type == "cuda":
            return 2
        return 0


def pick(device_name):
    return device_name == "cuda"
'''
    found = _findings(source)
    assert 7 not in _lines(found)
    # a device's type compared stays a finding (rewritten, NPU104)
    everything = _lines(migrate_file(source.encode(), "pkg/mod.py", OPTIONS).findings)
    assert 9 in everything
    assert 15 in everything


def test_a_category_key_of_the_projects_statistics_is_information():
    source = '''\
import torch


class Policy:
    def evict(self):
        budget = self.mem_stats_collector.next_period_non_model_data_usage("cuda")
        moved = self.mover.place("cuda")
        return budget, moved
'''
    found = _findings(source)
    info = [f for f in found if f.line == 6]
    assert info and info[0].severity == "info" and "category key" in info[0].message
    # a string handed to another method of the project may be a device: stays reported
    assert 7 in _reported(found)


# ----------------------------------------------------------------------------- a version shown
def test_cuda_version_read_only_for_display_is_information():
    source = '''\
import torch

HIP = False


def print_runtime():
    runtime = torch.version.hip if HIP else torch.version.cuda
    print(f"runtime version: {runtime}")


def show():
    print("cuda", torch.version.cuda)


def build_flags():
    major = torch.version.cuda.split(".")[0]
    version = torch.version.cuda
    return ["-DCUDA=" + version, major]
'''
    found = _findings(source)
    info = _lines([f for f in found if f.severity == "info" and "for display" in f.message])
    assert {7, 12} <= info
    # a version used to build flags stays reported
    assert {16, 17} <= _reported(found)


# ----------------------------------------------------------------------------- an environment read with a fallback
def test_a_cuda_variable_read_with_an_empty_fallback_is_information():
    source = '''\
import os


def cuda_release(nvcc):
    if not nvcc:
        return os.environ.get("CUDA_VERSION", "")
    return os.environ["CUDA_VERSION"]


def toolkit():
    return os.environ.get("CUDA_HOME", "/usr/local/cuda")
'''
    found = _findings(source)
    info = [f for f in found if f.line == 6]
    assert info and info[0].severity == "info" and "empty fallback" in info[0].message
    # a read without a fallback, and a toolkit path with one, stay reported
    assert {7, 11} <= _reported(found)
    # a runtime switch read with one keeps its own reason
    switch = _findings('''\
import os

LOADING = os.environ.get("CUDA_MODULE_LOADING", "")
''')
    assert switch and all("runtime switch" in f.message for f in switch)


# ----------------------------------------------------------------------------- a table behind a kept label
def test_a_per_device_table_behind_a_kept_label_is_folded_into_the_check():
    source = '''\
import torch


def _kernel_available():
    return True


devices = ["cpu"]
if torch.cuda.is_available() and _kernel_available():
    devices.append("cuda")

device_to_configs = {
    "cuda": [1, 2],
    "cpu": [3],
}


def test_configs():
    for device in devices:
        for config in device_to_configs[device]:
            torch.zeros(config, device=device)
'''
    found = _all(source, "tests/test_awq.py")
    leftovers = [f for f in found if f.code == "NPU990" and f.severity != "info"]
    assert 13 not in _lines(leftovers)
    check = [f for f in found if f.code == "NPU110"]
    assert check and check[0].severity == "info" and 13 in _lines(check)


def test_a_per_device_table_without_a_kept_label_keeps_its_hint():
    source = '''\
import torch

device_to_configs = {
    "cuda": [1, 2],
    "cpu": [3],
}


def run(x):
    return device_to_configs[x.device.type]
'''
    found = _findings(source)
    hinted = [f for f in found if f.line == 4]
    assert hinted and hinted[0].severity == "warning" and "per-device values" in hinted[0].message


# ----------------------------------------------------------------------------- a device named in a message
def test_devices_named_in_a_list_that_ends_in_an_error_message_are_prose():
    source = '''\
import torch
from vllm.platforms import current_platform


class QuantConfig:
    def validate(self) -> None:
        if not current_platform.is_cuda():
            raise ValueError("Only supported on NVIDIA CUDA GPUs")
        unsupported = []
        for i in range(torch.cuda.device_count()):
            major, minor = torch.cuda.get_device_capability(i)
            if major == 9:
                unsupported.append(f"cuda:{i} (SM{major}{minor}, Hopper)")
            elif major not in (8, 12):
                unsupported.append(f"cuda:{i} (SM{major}{minor})")
        if unsupported:
            raise ValueError(f"Unsupported devices: {', '.join(unsupported)}")

    def devices(self):
        found = []
        for i in range(torch.cuda.device_count()):
            found.append(f"cuda:{i}")
        print(f"devices: {found}")
        return [torch.device(d) for d in found]
'''
    found = _findings(source)
    assert not _lines(found) & {13, 15}
    # a list of devices that is also used as devices stays reported
    assert 22 in _reported(found)


# ----------------------------------------------------------------------------- a setUp that skips on an NPU host
def test_a_class_whose_setup_skips_below_a_capability_does_not_run_on_an_npu_host():
    source = '''\
import unittest

import torch


@unittest.skipIf(not torch.cuda.is_available(), "Test requires CUDA")
class TestMLABackend(unittest.TestCase):
    def setUp(self):
        if torch.cuda.is_available():
            compute_capability = torch.cuda.get_device_capability()
            if compute_capability[0] < 9:
                self.skipTest("requires Hopper")
        self.device = "cuda"

    def test_output(self):
        out = torch.zeros(2, device=self.device)
        self.assertEqual(out.device.type, "cuda")


class TestOther(unittest.TestCase):
    def setUp(self):
        if torch.cuda.get_device_capability()[0] < 0:
            self.skipTest("never")

    def test_output(self):
        out = torch.zeros(2, device="cuda")
        self.assertEqual(out.device.type, "cuda")
'''
    found = _findings(source, path="tests/test_mla.py")
    skipped = [f for f in found if f.line == 17]
    assert skipped and skipped[0].severity == "info" and "in a test that does not run on an NPU host" in skipped[0].message
    # a setUp whose skip an NPU host does not take keeps its class's findings
    assert 27 in _reported(found)
