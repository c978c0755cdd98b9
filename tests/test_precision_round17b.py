"""Round-17 audit (issue #16), labels9.py: names that are labels, not settings or devices (AT#7,
AV#8, AT#22), and NCCL variables whose HCCL counterpart exists (AU#20)."""

from __future__ import annotations

from .precision_helpers import findings_at, migrate_json, scopes_at, write_project

COMMUNICATOR = '''\
import os


class Communicator:
    def backends(self, symm_ok):
        all_potential_ar_backends = [
            "FLASHINFER",
            "NCCL_SYMM_MEM",
            "CUSTOM",
        ]
        enabled_ar_backends: list[str] = []
        if symm_ok:
            enabled_ar_backends.append("NCCL_SYMM_MEM")
        return all_potential_ar_backends, enabled_ar_backends


def tune():
    os.environ["NCCL_MIN_NCHANNELS"] = "4"
'''

RUNNER = '''\
import os

EXCLUDE_ENVS = {"CLUSTER_JOB_NAME": ["NCCL_IB_HCA", "UCX_NET_DEVICES"]}


def export(env):
    for key, names in EXCLUDE_ENVS.items():
        if key in env:
            for name in names:
                env.pop(name, None)
    env["NCCL_IB_GID_INDEX"] = "3"
    return env
'''

SOCKET = '''\
import os


def patch_env(name):
    os.environ["NCCL_SOCKET_IFNAME"] = name


def nvls():
    os.environ["NCCL_NET_PLUGIN"] = "none"
'''

LAZY = '''\
import torch


class LazyTensor:
    def __init__(self, loader):
        self._loader = loader

    def __getattr__(self, name):
        if name in {"contiguous", "cuda", "half", "data", "to"}:
            return getattr(self._loader(), name)
        raise AttributeError(name)


def place(t, device):
    if device in {"cpu", "cuda"}:
        return t
    return t.to(device)


def pick():
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def label():
    return "cuda"
'''


def _all(report, path, code):
    out = dict(findings_at(report, path, code))
    out.update({line: {"message": reason} for line, reason in scopes_at(report, path, code).items()})
    return out


def test_nccl_backend_label_is_no_setting_but_environ_write_is(tmp_path):
    report = migrate_json(write_project(tmp_path, {"pkg/comm.py": COMMUNICATOR}))
    findings = findings_at(report, "pkg/comm.py", "NPU602")
    assert 8 not in findings and 14 not in findings, findings  # (a backend label, AT#7)
    assert 8 in scopes_at(report, "pkg/comm.py", "NPU602")
    assert 18 in findings, findings  # os.environ["NCCL_MIN_NCHANNELS"]: a setting, kept


def test_nccl_name_in_exclusion_list_is_a_label(tmp_path):
    report = migrate_json(write_project(tmp_path, {"pkg/runner.py": RUNNER}))
    findings = findings_at(report, "pkg/runner.py", "NPU602")
    assert 3 not in findings, findings  # (EXCLUDE_ENVS: names not to export, AV#8)
    assert 3 in scopes_at(report, "pkg/runner.py", "NPU602")
    assert 11 in findings, findings  # env["NCCL_IB_GID_INDEX"] = ...: a setting, kept


def test_nccl_socket_ifname_names_its_hccl_counterpart(tmp_path):
    report = migrate_json(write_project(tmp_path, {"pkg/socket.py": SOCKET}))
    findings = findings_at(report, "pkg/socket.py", "NPU602")
    assert "HCCL_SOCKET_IFNAME" in findings[5]["message"], findings  # (AU#20)
    assert "no one-to-one" not in findings[5]["message"]
    assert findings[5]["severity"] == "info"
    assert "no one-to-one HCCL counterpart" in findings[9]["message"], findings  # (no counterpart: unchanged)


def test_cuda_among_tensor_method_names_is_a_label(tmp_path):
    report = migrate_json(write_project(tmp_path, {"pkg/lazy.py": LAZY}))
    findings = findings_at(report, "pkg/lazy.py", "NPU990")
    assert 9 not in findings, findings  # (a method name beside "to", AT#22)
    assert 9 in scopes_at(report, "pkg/lazy.py", "NPU990")
    # a device set keeps its finding (or rewrite), and so do the other "cuda" strings
    others = {f["line"] for f in report["findings"] if f["path"] == "pkg/lazy.py"}
    assert {15, 25} <= others, report["findings"]


BASE_ACCELERATOR = '''\
class BaseAccelerator:
    def __init__(self, name: str, communication_backend: str) -> None:
        self._name = name
        self._communication_backend = communication_backend

    @property
    def communication_backend(self) -> str:
        return self._communication_backend
'''

CUDA_ACCELERATOR = '''\
from pkg.accelerator.base import BaseAccelerator


class CudaAccelerator(BaseAccelerator):
    def __init__(self):
        super().__init__(name="cuda", communication_backend="nccl")
'''

NPU_ACCELERATOR = '''\
import torch_npu  # noqa: F401

from pkg.accelerator.base import BaseAccelerator


class NpuAccelerator(BaseAccelerator):
    def __init__(self):
        super().__init__(name="npu", communication_backend="hccl")
'''

LAUNCH = '''\
import torch.distributed as dist

from pkg.accelerator import get_accelerator


def launch(rank, world_size, options, backend: str = "nccl"):
    cur_accelerator = get_accelerator()
    backend = cur_accelerator.communication_backend
    dist.init_process_group(rank=rank, world_size=world_size, backend=backend)


def launch_option(rank, world_size, options):
    backend = options.backend
    dist.init_process_group(rank=rank, world_size=world_size, backend=backend)


def launch_from(options, backend: str = "nccl"):
    launch(0, 1, options, backend=backend)
'''

ACCELERATOR_INIT = '''\
def get_accelerator():
    from pkg.accelerator.cuda import CudaAccelerator

    return CudaAccelerator()
'''


def test_backend_from_accelerator_that_sets_hccl_is_resolved(tmp_path):
    files = {"pkg/__init__.py": "", "pkg/accelerator/__init__.py": ACCELERATOR_INIT,
             "pkg/accelerator/base.py": BASE_ACCELERATOR, "pkg/accelerator/cuda.py": CUDA_ACCELERATOR,
             "pkg/accelerator/npu.py": NPU_ACCELERATOR, "pkg/launch.py": LAUNCH}
    report = migrate_json(write_project(tmp_path, files))
    findings = findings_at(report, "pkg/launch.py", "NPU304")
    assert 9 not in findings, findings  # (AV#29: the NPU accelerator sets "hccl")
    assert "pkg/accelerator/npu.py:8" in scopes_at(report, "pkg/launch.py", "NPU304")[9]
    assert 14 in findings, findings  # (a backend from an option: still unseen)
    # without an NPU accelerator, the accelerator's backend stays unseen
    del files["pkg/accelerator/npu.py"]
    report = migrate_json(write_project(tmp_path / "cuda_only", files))
    assert 9 in findings_at(report, "pkg/launch.py", "NPU304")


PATCHING_TEST = '''\
from unittest.mock import patch

import torch


def test_async_allocator(monkeypatch):
    monkeypatch.setattr(
        torch.cuda.memory, "get_allocator_backend", lambda: "cudaMallocAsync"
    )
    with patch.object(torch.cuda.memory, "_snapshot") as snapshot:
        pass
    snapshot.assert_not_called()


def test_calls_it():
    assert torch.cuda.memory.get_allocator_backend() == "native"
'''


def test_torch_cuda_memory_patch_target_is_no_call(tmp_path):
    report = migrate_json(write_project(tmp_path, {"tests/test_alloc.py": PATCHING_TEST}))
    findings = findings_at(report, "tests/test_alloc.py", "NPU202")
    assert 8 not in findings and 10 not in findings, findings  # (AU#6: patch targets)
    assert 16 in findings and findings[16]["severity"] == "error", findings  # a real call keeps its error


LIGER_DECLARED = '''\
import enum


class DeviceType(enum.Enum):
    CUDA = "cuda"
    NPU = "npu"


class LigerKernel:
    _device = [DeviceType.CUDA, DeviceType.NPU]

    @classmethod
    def check_deps(cls) -> bool:
        try:
            import liger_kernel  # noqa: F401

            return True
        except ImportError:
            return False


class CudaOnlyLiger:
    _device = [DeviceType.CUDA]

    @classmethod
    def check_deps(cls) -> bool:
        try:
            import liger_kernel  # noqa: F401

            return True
        except ImportError:
            return False
'''


def test_liger_in_a_class_that_lists_the_npu_is_no_finding(tmp_path):
    report = migrate_json(write_project(tmp_path, {"pkg/liger.py": LIGER_DECLARED}))
    found = [f for f in report["findings"] if f["path"] == "pkg/liger.py" and f["code"] == "NPU918"]
    scopes = scopes_at(report, "pkg/liger.py", "NPU918")
    assert 15 in scopes and "DeviceType.NPU" in scopes[15], (found, scopes)  # (AV#40)
    lines = {f["line"] for f in found} | {a[0] for f in found for a in f.get("also", [])}
    assert 28 in lines, found  # the CUDA-only class keeps its finding
