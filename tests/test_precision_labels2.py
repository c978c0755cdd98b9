"""Issue #16: report-only findings on labels, not devices (npu_migrate/labels.py, NPU107).

Each test reproduces a shape the audits of real projects judged false or redundant, with a small
fixture of our own, and checks that a true case next to it is still reported:
- NPU990 on strings that name something: keys of dicts that are not the environment, attribute
  names given to getattr/hasattr, Enum members' values, parametrize argument names and pytest
  markers' arguments, `choices=` of an option, option and flag names, CUDA path variables among
  other search-path candidates, a capability guard's "cuda" (information);
- NPU990 on a method of a third-party object named like a CUDA API, and on the project's own
  modules named like one;
- NPU107 on a `def cuda` in a file with no `.cuda()` call, and never at error; the device of a
  class's own `cuda()` method is information.
"""

from __future__ import annotations

from npu_migrate import catalogue
from npu_migrate.model import Options
from npu_migrate.run import migrate_file

OPTIONS = Options(enabled=catalogue.enabled_codes())


def _findings(source: str, code: str, path: str = "pkg/mod.py", options: Options = OPTIONS):
    result = migrate_file(source.encode(), path, options)
    return [f for f in result.findings if f.code == code and not f.fixable]


def _lines(found, severity: str | None = None) -> set[int]:
    """Every line a finding (of that severity) names: its own and those merged into it."""
    out = set()
    for f in found:
        if severity is None or f.severity == severity:
            out.add(f.line)
            out.update(line for line, _column, _source in f.also)
    return out


# ----------------------------------------------------------------------------- dict keys
def test_keys_of_dicts_that_are_not_the_environment_are_labels():
    source = '''\
import os

import torch


class BuildInfo:
    def __init__(self, metadata, env_info, home):
        self.cuda_version = metadata["version"]["cuda"]
        env_info["CUDA_HOME"] = home
        self.used = self.total_mem["cuda"]
        self.home = os.environ["CUDA_HOME"]
        self.env_dict["CUDA_PATH"] = home
'''
    lines = _lines(_findings(source, "NPU990"), "warning")
    assert not lines & {8, 9, 10}
    # the environment's keys stay reported
    assert {11, 12} <= lines


# ----------------------------------------------------------------------------- getattr
def test_attribute_names_given_to_getattr_are_labels():
    source = '''\
import torch


def load(module):
    impl = getattr(module, "CUDA_IMPL", True)
    if hasattr(module, "nccl"):
        impl = False
    cuda = getattr(torch, "cuda")
    return impl, cuda
'''
    lines = _lines(_findings(source, "NPU990"))
    assert not lines & {5, 6}
    assert 8 in lines  # `getattr(torch, "cuda")` gets the CUDA module itself


# ----------------------------------------------------------------------------- Enum members
def test_an_enum_members_value_is_an_option_not_a_backend():
    source = '''\
import argparse
import enum


class LoaderBackend(str, enum.Enum):
    NCCL = "nccl"
    FILES = "files"


def options():
    parser = argparse.ArgumentParser()
    parser.add_argument("--backend", type=str, default="nccl")
    return parser
'''
    lines = _lines(_findings(source, "NPU990"), "warning")
    assert 6 not in lines
    assert 12 in lines  # a backend default still runs


# ----------------------------------------------------------------------------- test decorators
def test_parametrize_names_and_marker_arguments_are_labels():
    source = '''\
import pytest


@pytest.mark.runs_on(["cuda"])
@pytest.mark.parametrize("enable_flash_attention", [True, False])
@parameterize("use_flash_attention", [True])
@pytest.mark.parametrize("device", ["cuda"])
def test_shard(enable_flash_attention, use_flash_attention, device):
    pass
'''
    lines = _lines(_findings(source, "NPU990"))
    assert not lines & {4, 5, 6}
    assert 7 in lines  # a parameter's value is a device


# ----------------------------------------------------------------------------- options
def test_choices_and_option_names_are_labels_the_default_is_not():
    source = '''\
import argparse


def options(parser: argparse.ArgumentParser, config: dict):
    parser.add_argument("--profile-activities", choices=["CPU", "GPU", "CUDA_PROFILER"])
    parser.add_argument("--nccl-port", type=int)
    parser.add_argument("--enable-nccl-nvls", action="store_true")
    config["enable_flash_attention"] = True
    parser.add_argument("--dist-backend", default="nccl")
    return dict(attn_implementation="flash_attention_3")


def start(activities, os):
    if "CUDA_PROFILER" in activities:
        return None
    return "CUDA_HOME" in os.environ
'''
    lines = _lines(_findings(source, "NPU990"), "warning")
    assert not lines & {5, 6, 7, 8, 14}
    assert {9, 10, 16} <= lines


# ----------------------------------------------------------------------------- search paths
def test_cuda_path_variables_among_search_path_candidates_are_not_reported():
    source = '''\
def include_dirs(env_paths):
    prefixes = env_paths("CUTLASS_ROOT", "CONDA_PREFIX", "CUDA_HOME", "CUDA_PATH")
    roots = ["ROCM_PATH", "CUDA_HOME"]
    toolkit = env_paths("CUDA_HOME", "CUDA_PATH")
    return prefixes, roots, toolkit
'''
    lines = _lines(_findings(source, "NPU990"))
    assert not lines & {2, 3}
    assert 4 in lines  # only CUDA's own variables: the CUDA toolkit is looked for


# ----------------------------------------------------------------------------- capability guard
def test_a_capability_guard_is_information():
    source = '''\
from torch.distributed.device_mesh import init_device_mesh


class Args:
    def check(self):
        if not self.device.startswith("cuda"):
            raise ValueError("This decoding only supports CUDA devices.")
        if not self.backend.startswith("nccl"):
            raise ValueError("NCCL only")

    def mesh(self, shape):
        return make_mesh("cuda", shape)  # (an unknown callee: init_device_mesh's is rewritten, round 23 BL#18)
'''
    found = _findings(source, "NPU990")
    assert _lines(found, "info") >= {6, 8}
    assert all("capability guard" in f.message for f in found if f.severity == "info")
    assert _lines(found, "warning") == {12}


# ----------------------------------------------------------------------------- attributes
def test_a_third_party_method_named_like_a_cuda_api_is_a_name():
    source = '''\
import torch_memory_saver

_saver = torch_memory_saver.torch_memory_saver


def capture(comm, **kwargs):
    with _saver.cuda_graph(**kwargs):
        pass
    return comm.nccl.ncclGetVersion()
'''
    lines = _lines(_findings(source, "NPU990"))
    assert 7 not in lines
    assert 9 in lines  # a library object reached through `.nccl`


def test_the_projects_own_module_named_like_a_cuda_api_is_a_name():
    source = '''\
import deepspeed
import torch


def compile_engine():
    deepspeed.utils.nvtx.enable_nvtx = False
    torch.cuda.nvtx.range_push("compile")
'''
    own = Options(enabled=catalogue.enabled_codes(), first_party=frozenset({"deepspeed"}))
    assert 6 not in _lines(_findings(source, "NPU990", options=own))
    # not the project's own: still reported
    assert 6 in _lines(_findings(source, "NPU990"))


# ----------------------------------------------------------------------------- NPU107
LAZY = '''\
import torch


class LazyTensor:
    def cuda(self, device=None, non_blocking=False):
        device = torch.device(device or "cuda")
        return self.to(device=device, non_blocking=non_blocking)
'''


def test_a_cuda_method_with_no_call_in_its_file_is_not_reported():
    assert _findings(LAZY, "NPU107") == []
    # its device is the method's own: information
    found = _findings(LAZY, "NPU990")
    assert [(f.line, f.severity) for f in found] == [(6, "info")]
    # a `.cuda()` call left unchanged because of the method: reported, as a warning
    found = _findings(LAZY + "\n\ndef move(t):\n    return t.cuda()\n", "NPU107")
    assert _lines(found) == {5, 11} and {f.severity for f in found} == {"warning"}
    # a "cuda" outside the method is swept as usual
    found = _findings(LAZY + "\n\ndef mesh(shape):\n    return init_device_mesh(\"cuda\", shape)\n", "NPU990")
    assert _lines(found, "warning") == {11}


# ----------------------------------------------------------------------------- capability lists
def test_a_declared_list_of_supported_devices_is_a_label():
    source = '''\
_supported_devices = [
    "cpu",
    "cuda",
]


class Plugin:
    def supported_devices(self):
        return ["cuda"]


def mesh(shape):
    return init_device_mesh("cuda", shape)
'''
    lines = _lines(_findings(source, "NPU990"))
    assert not lines & {3, 9}
    assert 13 in lines


# ----------------------------------------------------------------------------- op names, platform labels
def test_platform_label_choices_are_labels():
    source = '''\
import torch

RANDOM_OPS = ("_scaled_dot_product_efficient_attention", "_efficient_attention_forward")


def library_name(is_hip):
    prefix = "rocm" if is_hip else "cuda"
    return prefix, dict(attn_implementation="flash_attention_3")


def device(is_cpu):
    return torch.device("cpu" if is_cpu else "cuda")
'''
    lines = _lines(_findings(source, "NPU990"))
    assert not lines & {3, 7}
    assert 8 in lines


# ----------------------------------------------------------------------------- records, tests' mocks
def test_record_fields_and_mocked_methods_are_names():
    source = '''\
import torch


def meta(args):
    return {"torch": torch.__version__, "cuda": torch.version.cuda, "warmup_ms": args.warmup}


TABLE = {"cpu": 1, "cuda": 2}


def test_fake(monkeypatch, fi, comm):
    monkeypatch.setattr(fi.torch.version, "cuda", "12.8")
    assert comm.nccl.ncclCommSuspend.call_count == 1
    comm.nccl.ncclCommSuspend()
'''
    found = _findings(source, "NPU990")
    strings = _lines([f for f in found if "string" in f.message])
    assert not strings & {5, 12}
    assert 8 in strings  # a table of per-device values, with no "npu" entry
    names = _lines([f for f in found if "ncclCommSuspend" in f.message])
    assert 13 not in names and 14 in names  # a mock's counter, then a real call


def test_an_attribute_of_a_mocks_is_cuda_is_not_rewritten():
    """`platform.is_cuda.return_value = False` sets a mock's child: rewritten to
    `npu_compat.on_accelerator(platform).return_value` it would break the test; a real
    `x.is_cuda` read beside it is still rewritten (NPU106)."""
    source = '''\
import torch


def test_fake(mock_platform, x):
    mock_platform.is_cuda.return_value = False
    return x.is_cuda
'''
    result = migrate_file(source.encode(), "tests/test_fake.py", OPTIONS)
    new = result.new.decode()
    assert "mock_platform.is_cuda.return_value = False" in new
    assert "on_accelerator(x)" in new
    assert [f.line for f in result.findings if f.code == "NPU106"] == [6]
