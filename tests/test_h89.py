"""Classes and backends selected by name, enum or platform in another module (issue #16, round 21,
helper h89). Each shape is paired with the nearest case that stays reported."""

from __future__ import annotations

from .precision_helpers import migrate_json, write_project
from .test_h80 import REGISTRY, _open  # (one copy of the report reader)

# ---- BG#3: a backend enum whose member only the CUDA platform's priority list names (platforms21.py)

PLATFORMS = REGISTRY  # (the plugin registry of test_h80: a dict of probing functions)

BACKEND_ENUM = '''\
from enum import Enum


class KernelBackendEnum(Enum):
    FAST_MLA = (
        "proj.backends.fast_mla.FastMLABackend"
    )
    PLAIN = "proj.backends.plain.PlainBackend"

    def path(self):
        return self.value
'''

CUDA_PLATFORM = '''\
from proj.backends.registry import KernelBackendEnum


def _priorities(capability):
    if capability >= 9:
        return [KernelBackendEnum.FAST_MLA, KernelBackendEnum.PLAIN]
    return [KernelBackendEnum.PLAIN]


class CudaPlatform:
    device_type = "cuda"

    @classmethod
    def backend(cls, capability):
        return _priorities(capability)[0]
'''

CPU_PLATFORM = '''\
from proj.backends.registry import KernelBackendEnum


class CpuPlatform:
    @classmethod
    def backend(cls, capability):
        return KernelBackendEnum.PLAIN
'''

FAST_MLA = '''\
import torch


class FastMLABackend:
    def warmup(self):
        for dtype in (torch.bfloat16, torch.float8_e4m3fn):
            torch.empty(4, dtype=dtype)
'''

PLAIN = '''\
class PlainBackend:
    pass
'''


def _enum_files(**extra):
    files = {
        "proj/__init__.py": "",
        "proj/platforms/__init__.py": PLATFORMS,
        "proj/platforms/cuda.py": CUDA_PLATFORM,
        "proj/platforms/cpu.py": CPU_PLATFORM,
        "proj/backends/__init__.py": "",
        "proj/backends/registry.py": BACKEND_ENUM,
        "proj/backends/fast_mla.py": FAST_MLA,
        "proj/backends/plain.py": PLAIN,
    }
    files.update(extra)
    return files


def test_a_backend_only_the_cuda_priority_list_names_is_info(tmp_path):
    """vLLM's TokenspeedMLABackend (BG#3): the enum entry names the module in a string, but the
    member `KernelBackendEnum.FAST_MLA` is listed only by the CUDA platform module's priority list:
    the backend's FP8 warm-up becomes info naming the list line and the enum entry."""
    report = migrate_json(write_project(tmp_path, _enum_files()))
    fast = _open(report, "proj/backends/fast_mla.py")
    assert fast and all(f["severity"] == "info" for f in fast.values()), fast
    message = next(iter(fast.values()))["message"]
    assert "reached only through the CUDA platform class" in message, message
    assert "proj/platforms/cuda.py:6" in message and "`KernelBackendEnum.FAST_MLA` of proj/backends/registry.py:5" in message


def test_a_backend_another_platform_also_lists_stays_reported(tmp_path):
    """The nearest true case: the CPU platform (not a CUDA-only class) also picks FAST_MLA, so an
    NPU host may reach it: the finding keeps its severity."""
    cpu = CPU_PLATFORM.replace("KernelBackendEnum.PLAIN\n", "KernelBackendEnum.FAST_MLA\n")
    report = migrate_json(write_project(tmp_path, _enum_files(**{"proj/platforms/cpu.py": cpu})))
    fast = _open(report, "proj/backends/fast_mla.py")
    assert fast and all(f["severity"] != "info" for f in fast.values()), fast


def test_a_backend_a_runner_names_through_an_alias_or_by_name_stays_reported(tmp_path):
    """A runner module that picks the member by an alias or `Enum["NAME"]` runs on an NPU host."""
    for runner in ("from proj.backends.registry import KernelBackendEnum as KB\n\nDEFAULT = KB.FAST_MLA\n",
                   "from proj.backends.registry import KernelBackendEnum\n\n"
                   "DEFAULT = KernelBackendEnum[\"FAST_MLA\"]\n"):
        root = tmp_path / str(len(runner))
        report = migrate_json(write_project(root, _enum_files(**{"proj/runner.py": runner})))
        fast = _open(report, "proj/backends/fast_mla.py")
        assert fast and all(f["severity"] != "info" for f in fast.values()), (runner, fast)


# ---- BG#10: an NCCL tuning variable set only when an NCCL communicator is chosen by name (ncclbranch21.py)

EPLB = '''\
import os


def override_envs(config, moe_backend=None):
    is_parallel = config.data_parallel_size > 1
    is_mega = moe_backend == "fast_mega_moe"
    is_nccl_comm = config.communicator in (
        "torch_nccl",
        "pynccl",
    )
    if is_parallel and is_mega and is_nccl_comm:
        current = os.getenv("NCCL_MAX_CTAS")
        if current and current.isdigit():
            return
        os.environ["NCCL_MAX_CTAS"] = "8"
'''


def test_an_nccl_variable_set_only_for_an_nccl_communicator_is_a_named_scope(tmp_path):
    """vLLM's EPLB override (BG#10): NCCL_MAX_CTAS is read and set only when the communicator option
    names NCCL ("torch_nccl"/"pynccl"): no port work, a named scope."""
    report = migrate_json(write_project(tmp_path, {"proj/__init__.py": "", "proj/eplb.py": EPLB}))
    assert not [f for f in report["findings"] if f["path"] == "proj/eplb.py" and f["code"] == "NPU602"], report["findings"]
    reasons = [s["reason"] for s in report["skipped"] if s["path"] == "proj/eplb.py"]
    assert any("chosen by name" in r for r in reasons), reasons


def test_an_nccl_variable_outside_such_a_branch_or_with_an_hccl_counterpart_stays(tmp_path):
    """The nearest true cases: the same write under the plain "nccl" backend test (rewritten to accept
    HCCL, so it runs on an NPU host), in the `else:`, or a variable HCCL has a counterpart for."""
    variants = {
        "plain": EPLB.replace('''config.communicator in (
        "torch_nccl",
        "pynccl",
    )''', 'config.backend == "nccl"'),
        "else": EPLB.replace("        current = os", "        pass\n    else:\n        current = os"),
        "counterpart": EPLB.replace("NCCL_MAX_CTAS", "NCCL_SOCKET_IFNAME"),
    }
    for name, source in variants.items():
        report = migrate_json(write_project(tmp_path / name, {"proj/__init__.py": "", "proj/eplb.py": source}))
        kept = [f for f in report["findings"] if f["path"] == "proj/eplb.py" and f["code"] == "NPU602"]
        assert kept, (name, report["skipped"])


def test_a_backend_enum_a_runner_iterates_keeps_every_member_reported(tmp_path):
    """An iteration over the whole enum in code that runs on an NPU host (`for b in Enum`: pick the
    first available) may select any member: the backend stays reported."""
    runner = ("from proj.backends.registry import KernelBackendEnum\n\n\n"
              "def first():\n    for backend in KernelBackendEnum:\n        return backend\n")
    report = migrate_json(write_project(tmp_path, _enum_files(**{"proj/runner.py": runner})))
    fast = _open(report, "proj/backends/fast_mla.py")
    assert fast and all(f["severity"] != "info" for f in fast.values()), fast
