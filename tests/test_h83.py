"""Labels, fake set-ups and test-only shapes read as CUDA code (npu_migrate/labels20.py, issue #16,
round-20 audits BC#2, BC#3, BC#9, BC#36, BD#4, BD#10, BE#3, BE#23): each false or redundant shape beside
the nearest shape that stays reported. One dry run of one project serves every test."""

from __future__ import annotations

import pytest

from npu_migrate import labels20
from npu_migrate.findings import Finding

from .precision_helpers import findings_at, migrate_json, scopes_at, write_project

COMM = '''\
import torch
from pkg.wrapper import NCCLLibrary


class Communicator:
    def __init__(self, world_size, library_path=None):
        self.world_size = world_size
        if world_size == 1:
            self.disabled = True
            return
        try:
            self.nccl = NCCLLibrary(library_path)
        except Exception:
            self.disabled = True
            return
        self.disabled = False
        self.version = self.nccl.get_version()

    @classmethod
    def from_id(cls, uid, library_path=None):
        self = cls.__new__(cls)
        try:
            self.nccl = NCCLLibrary(library_path)
        except Exception as e:
            raise RuntimeError("failed to load the NCCL library") from e
        self.disabled = False
        self.comm = self.nccl.init_rank(uid)
        return self

    def all_reduce(self, tensor):
        if self.disabled:
            return None
        self.nccl.all_reduce(tensor, self.comm)
        return tensor
'''

OPS = '''\
import torch
from torch.library import register_fake


def scaled_matmul(a, b, sa, sb):
    return torch.ops.mylib.scaled_matmul(a, b, sa, sb)


def scaled_matmul_fake(a, b, sa, sb):
    return torch._scaled_mm(a, b, sa, sb, out_dtype=torch.bfloat16)


def scaled_matmul_real(a, b, sa, sb):
    return torch._scaled_mm(a, b, sa, sb, out_dtype=torch.bfloat16)


def register(direct_register_custom_op):
    direct_register_custom_op(op_name="scaled_matmul", op_func=scaled_matmul_real,
                              fake_impl=scaled_matmul_fake)


@register_fake("mylib::other_mm")
def _other_fake(a, b, sa, sb):
    return torch._scaled_mm(a, b, sa, sb)
'''

PROFILING = '''\
from typing import Union

import torch

_PROFILER = Union[torch.profiler.profile, torch.autograd.profiler.emit_nvtx]


class Profiler:
    def __init__(self, emit_nvtx=False):
        self._emit_nvtx = emit_nvtx
        self.parent = None

    def start(self):
        if self._emit_nvtx:
            if self.parent is None:
                self.parent = torch.cuda.profiler.profile()
            self.profiler = self._create(torch.autograd.profiler.emit_nvtx)
        else:
            self.profiler = torch.profiler.profile()


def get_profile_context(enable, warmup, active, nsys=False):
    class NsysProfiler:
        def __init__(self, warmup, active):
            self.step_number = 0
            self.warmup = warmup
            self.active = active

        def step(self):
            if self.step_number == self.warmup:
                torch.cuda.cudart().cudaProfilerStart()
            elif self.step_number == self.warmup + self.active:
                torch.cuda.cudart().cudaProfilerStop()
            self.step_number += 1

    if enable and nsys:
        return NsysProfiler(warmup, active)
    return None


def capture_range():
    torch.cuda.cudart().cudaProfilerStart()


def record(fn):
    with torch.autograd.profiler.emit_nvtx():
        return fn()
'''

WRAPPER = '''\
import ctypes


class NCCLLibrary:
    def __init__(self, path=None):
        self.lib = ctypes.CDLL(path or "libnccl.so.2")
'''

SETTINGS = '''\
import os
environment_variables = {"DECODE_KERNEL": lambda: os.environ.get("DECODE_KERNEL", "cuda")}
'''

TEST_THINGS = '''\
import sys
from contextlib import contextmanager
from types import ModuleType
from unittest import mock

import torch

from pkg.settings import environment_variables


def _fake_modules():
    fake = ModuleType("cutlass")
    cute = ModuleType("cutlass.cute")
    fake.cute = cute
    return {"cutlass": fake, "cutlass.cute": cute}


@contextmanager
def _patch_modules():
    with mock.patch.dict(sys.modules, {**_fake_modules()}):
        yield


def test_hook_with_fake_cute():
    with _patch_modules():
        import cutlass.cute as cute
        assert cute is not None


def test_real_cute():
    import cutlass.cute as cute
    assert cute.compile is not None


def test_decode_kernel_env(monkeypatch):
    env_func = environment_variables["DECODE_KERNEL"]
    assert env_func() == "cuda"
    for value in ("cuda", "triton"):
        monkeypatch.setenv("DECODE_KERNEL", value)
        assert env_func() == value


def test_device_default():
    assert environment_variables["DEVICE"]() == "cuda"


def test_cpu_gather(monkeypatch):
    monkeypatch.setattr(torch.Tensor, "cuda", lambda self: self)
    assert torch.ones(2).cuda().sum() == 2


def test_pack_fp8():
    cache = torch.zeros(4, 16, dtype=torch.uint8, device="cuda")
    vals = torch.randn(16, device="cuda").to(torch.float8_e4m3fn)
    cache[0] = vals.view(torch.uint8)
    other = torch.randn(16, device="cuda").to(torch.float8_e4m3fn)
    out = torch._scaled_mm(other, other.t(), torch.ones(()), torch.ones(()))
    return cache, out


def test_backend_output_device(run):
    for backend in ("cuda", "triton"):
        assert run(backend).device.type == "cuda"
'''

TEST_PACK = '''\
import torch


def test_pack_fp8_bytes():
    cache = torch.zeros(4, 16, dtype=torch.uint8, device="cuda")
    for i in range(4):
        vals = torch.randn(16, device="cuda").to(torch.float8_e4m3fn)
        cache[i] = vals.view(torch.uint8)
    cache[0, :8] = torch.randn(8, device="cuda").to(torch.float8_e4m3fn).view(torch.uint8)
    return cache


def test_pack_with_reference():
    cache = torch.zeros(16, dtype=torch.uint8, device="cuda")
    vals = torch.randn(16, device="cuda").to(torch.float8_e4m3fn)
    cache[:] = vals.view(torch.uint8)
    expected = vals.float() * 2.0
    return cache, expected


def test_pack_sliced_reference():
    vals = torch.randn(4, 16, device="cuda").to(torch.float8_e4m3fn)
    expected = vals[:, 0:8].float()
    return vals.view(torch.uint8), expected


def test_fp8_arithmetic():
    vals = torch.randn(16, device="cuda").to(torch.float8_e5m2)
    return vals.view(torch.uint8), vals * 2
'''


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    root = write_project(tmp_path_factory.mktemp("h83"), {
        "pkg/__init__.py": "", "pkg/comm.py": COMM, "pkg/ops.py": OPS, "pkg/profiling.py": PROFILING,
        "pkg/wrapper.py": WRAPPER, "pkg/settings.py": SETTINGS, "tests/test_things.py": TEST_THINGS,
        "tests/test_pack.py": TEST_PACK})
    return migrate_json(root)


def test_library_bound_twice_uses_become_a_scope_the_raising_binding_stays(report):
    # BC#2: `self.nccl` loaded in a disabling `try` and again in one whose `except` raises
    scopes = scopes_at(report, "pkg/comm.py", "NPU990")
    assert 12 in scopes and "disables the feature" in scopes[12]
    kept = findings_at(report, "pkg/comm.py", "NPU990")
    assert set(kept) == {23}
    assert kept[23]["severity"] == "warning" and "this path fails on an NPU host" in kept[23]["message"]


def test_fp8_in_a_fake_implementation_is_a_scope_the_real_one_stays(report):
    # BC#3: `torch._scaled_mm` in the function passed as `fake_impl=`
    scopes = scopes_at(report, "pkg/ops.py", "NPU913")
    assert 10 in scopes and "`scaled_matmul_fake` is passed as `fake_impl=`" in scopes[10]
    kept = findings_at(report, "pkg/ops.py", "NPU913")
    assert kept[14]["severity"] == "error" and "also" not in kept[14]


def test_profiler_mode_folds_and_type_alias_is_a_scope(report):
    # BC#36: emit_nvtx in the branch of `torch.cuda.profiler.profile()`, and in a `Union[...]` alias
    scopes = scopes_at(report, "pkg/profiling.py", "NPU990")
    assert 5 in scopes and "type alias" in scopes[5]
    errors = findings_at(report, "pkg/profiling.py", "NPU202")
    # (policy P1, round 30 EA#27, h145: the branch runs only under `Profiler(emit_nvtx=False)`'s opt-in,
    # so the folded finding is info naming the choice; the fold itself is unchanged)
    assert errors[16]["severity"] == "info" and "`self._emit_nvtx` is chosen" in errors[16]["message"]
    assert "`torch.autograd.profiler.emit_nvtx` in the same `if` branch" in errors[16]["message"]
    assert any(p[0] == 17 for p in errors[16]["also"])
    # (outside that branch, emit_nvtx stays a finding of its own)
    assert findings_at(report, "pkg/profiling.py", "NPU990")[46]["severity"] == "warning"


def test_nsight_capture_range_behind_its_switch_is_info(report, tmp_path):
    # BE#23: `torch.cuda.cudart().cudaProfilerStart()` in a class built only `if ... nsys:`
    # The switch here is a parameter (`nsys=False`): whether a call sets it is the whole run's
    # question (optparams20.py, tests/test_h86.py), so labels20 leaves it; the file's capture range
    # outside the switch (line 42) then shares one finding with it, which stays an error.
    errors = findings_at(report, "pkg/profiling.py", "NPU202")
    assert errors[31]["severity"] == "error" and "(also at lines 33, 42)" in errors[31]["message"], errors
    root = write_project(tmp_path, {"pkg/runner.py": NSYS_ATTRIBUTE})
    found = findings_at(migrate_json(root), "pkg/runner.py", "NPU202")
    assert found[11]["severity"] == "info" and "used only when `nsys` is set" in found[11]["message"], found
    assert found[17]["severity"] == "error"  # (a capture range outside the switch)


NSYS_ATTRIBUTE = '''\
import torch


class Runner:
    def __init__(self, args):
        self.nsys = args.nsys

    def profiler(self):
        class NsysRange:
            def start(self):
                torch.cuda.cudart().cudaProfilerStart()
        if self.nsys:
            return NsysRange()


def capture_range():
    torch.cuda.cudart().cudaProfilerStart()
'''


def test_import_under_fake_sys_modules_is_a_scope_the_real_import_stays(report):
    # BD#4: `import cutlass.cute` inside `with _patch_modules():` that patches sys.modules
    scopes = scopes_at(report, "tests/test_things.py", "NPU911")
    assert 26 in scopes and "`_patch_modules()`, which patches `sys.modules`" in scopes[26]
    assert findings_at(report, "tests/test_things.py", "NPU911")[31]["severity"] == "error"


def test_cuda_as_a_setting_choice_is_a_scope_a_device_default_stays(report):
    # BC#9: `assert env_func() == "cuda"` beside `for value in ("cuda", "triton")`
    scopes = scopes_at(report, "tests/test_things.py", "NPU990")
    assert 37 in scopes and 'beside "triton"' in scopes[37]
    kept = findings_at(report, "tests/test_things.py", "NPU990")
    assert kept[44]["severity"] == "warning" and 37 not in kept


def test_device_compared_beside_a_choice_list_stays():
    # (the review alone: a device compared in a test that lists "cuda" beside "triton" is a device)
    text = ('def test_backends(run):\n'
            '    for backend in ("cuda", "triton"):\n'
            '        assert get_device(run(backend)) == "cuda"\n'
            '        assert run.kernel_impl() == "cuda"\n')
    device = Finding("t/test_x.py", 3, 44, "NPU990", 'CUDA-only reference left unchanged: string "cuda"',
                     False, source='"cuda"')
    label = Finding("t/test_x.py", 4, 37, "NPU990", 'CUDA-only reference left unchanged: string "cuda"',
                    False, source='"cuda"')
    out = labels20.review([device, label], text, "t/test_x.py")
    assert out[0] == device
    assert out[1].severity == "info" and labels20.CHOICE_VALUE in out[1].message
    # (a test case picked out of a parametrize list: testprobes.py's, not a setting's value)
    cases = ('@pytest.mark.parametrize("case", ["cuda", "requires_grad"])\n'
             'def test_cases(case):\n'
             '    if case == "cuda":\n'
             '        pass\n')
    case = Finding("t/test_x.py", 3, 16, "NPU990", 'CUDA-only reference left unchanged: string "cuda"',
                   False, source='"cuda"')
    assert labels20.review([case], cases, "t/test_x.py") == [case]


def test_patched_tensor_method_name_is_info(report):
    # BE#3: `monkeypatch.setattr(torch.Tensor, "cuda", ...)`
    kept = findings_at(report, "tests/test_things.py", "NPU990")
    assert kept[48]["severity"] == "info" and "the name of a torch method a test patches" in kept[48]["message"]


def test_fp8_cast_only_packed_into_bytes_is_info_fp8_arithmetic_stays(report):
    # BD#10: `.to(torch.float8_e4m3fn)` then only `.view(torch.uint8)` (and `.float()` for a reference)
    packed = findings_at(report, "tests/test_pack.py", "NPU913")
    assert packed[7]["severity"] == "info" and "FP8 bytes packed into a byte buffer" in packed[7]["message"]
    assert {p[0] for p in packed[7].get("also", [])} == {9, 15, 22}
    assert packed[28]["severity"] == "error"
    # (a file that also computes in FP8 keeps its error, anchored at the compute)
    mixed = findings_at(report, "tests/test_things.py", "NPU913")
    assert mixed[57]["severity"] == "error"
