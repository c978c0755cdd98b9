"""Issue #16, round-11 audits (AB#8, AB#16, AB#37, AC#27, AC#28): CUDA names used only as types,
aliases or compile-time helpers were reported as if they failed at run time (npu_migrate/typerefs.py).
Each test checks that the false or redundant finding is gone (a named scope, or folded) and that a
nearby true one stays."""

from __future__ import annotations

from pathlib import Path

import pytest

from npu_migrate import typerefs

from .precision_helpers import migrate_json, write_project

NO_WORK = "no port work on an NPU host ("


def _open(report: dict, path: str) -> list[dict]:
    return [f for f in report["findings"] if not f["fixable"] and f["path"] == path]


def _scopes(report: dict, path: str) -> list[dict]:
    return [s for s in report["skipped"] if s["path"] == path and "start_line" in s]


def test_every_build_table_matches_torch() -> None:
    """The `[every_build]` classes exist in the CPU build of torch, also through their modules."""
    torch = pytest.importorskip("torch")
    import importlib

    names = typerefs.every_build()
    assert {"Stream", "ExternalStream", "OutOfMemoryError", "streams.Stream", "memory.CUDAPluggableAllocator"} <= names
    for name in names:
        module, _, attr = f"cuda.{name}".rpartition(".")
        assert hasattr(importlib.import_module(f"torch.{module}"), attr), name
    assert torch.cuda.OutOfMemoryError is torch.OutOfMemoryError


STREAM_ANNOTATION = """\
from typing import Optional

import torch


class CachedParams:
    def __init__(self, stream: Optional[torch.cuda.streams.Stream] = None):
        self.stream = stream

    def wrap(self, ptr):
        return torch.cuda.streams.ExternalStream(ptr)
"""


def test_evaluated_annotation_of_a_class_every_build_has(tmp_path: Path) -> None:
    """AB#8: `Optional[torch.cuda.streams.Stream]` as a parameter annotation (evaluated, no
    `from __future__ import annotations`) is a named scope; constructing an ExternalStream stays."""
    report = migrate_json(write_project(tmp_path, {"mgr.py": STREAM_ANNOTATION}))
    findings = _open(report, "mgr.py")
    assert not [f for f in findings if f["line"] == 7]
    assert [f for f in findings if f["line"] == 11 and f["code"] == "NPU202" and f["severity"] == "error"]
    scope = [s for s in _scopes(report, "mgr.py") if s["start_line"] == 7]
    assert scope and scope[0]["reason"].startswith(NO_WORK) and typerefs.TYPE_ONLY in scope[0]["reason"]


IMPORT_FOR_ANNOTATION = """\
from __future__ import annotations

import torch
from torch.cuda.streams import ExternalStream


def stream_pair() -> tuple[ExternalStream, ExternalStream]:
    return torch.cuda.current_stream(), torch.cuda.current_stream()
"""

IMPORT_CONSTRUCTED = """\
import torch
from torch.cuda.streams import ExternalStream


def wrap(ptr):
    return ExternalStream(ptr)
"""


def test_import_used_only_in_annotations(tmp_path: Path) -> None:
    """AC#28: an ExternalStream import whose one use is a return annotation is a named scope; the
    same import in a file that constructs one is not lowered (folded into the construction)."""
    report = migrate_json(write_project(tmp_path, {"mixin.py": IMPORT_FOR_ANNOTATION,
                                                   "wrap.py": IMPORT_CONSTRUCTED}))
    assert not _open(report, "mixin.py")
    scope = [s for s in _scopes(report, "mixin.py") if s["start_line"] == 4]
    assert scope and typerefs.TYPE_ONLY in scope[0]["reason"]
    kept = _open(report, "wrap.py")
    assert [(f["line"], f["code"], f["severity"]) for f in kept] == [(6, "NPU202", "error")]
    assert "also at line 2" in kept[0]["message"]  # (the import folded into the use, not dropped)


ALLOCATOR = """\
import torch
from torch.cuda.memory import CUDAPluggableAllocator


def make_allocator(path):
    return CUDAPluggableAllocator(path, "alloc", "free")
"""

ALLOCATOR_AND_OTHER = """\
import torch
from torch.cuda.memory import CUDAPluggableAllocator


def make_allocator(path):
    if hasattr(torch.cuda.memory, "CUDAPluggableAllocator"):
        return CUDAPluggableAllocator(path, "alloc", "free")
    return torch.cuda.memory.CUDAPluggableAllocator(path, "alloc", "free")
"""


def test_import_folded_into_its_reported_use(tmp_path: Path) -> None:
    """AB#16: one finding (the use's NPU202, the import's line listed) instead of two; where a use
    has no finding of its own (behind a `hasattr` probe), the import keeps its finding."""
    report = migrate_json(write_project(tmp_path, {"alloc.py": ALLOCATOR, "alias.py": ALLOCATOR_AND_OTHER}))
    findings = _open(report, "alloc.py")
    assert [(f["line"], f["code"], f["severity"]) for f in findings] == [(6, "NPU202", "error")]
    assert "also at line 2" in findings[0]["message"] and [2, 1] == findings[0]["also"][0][:2]
    other = _open(report, "alias.py")
    assert any(f["line"] == 2 and f["code"] == "NPU990" for f in other)
    assert any(f["line"] == 8 and f["code"] == "NPU202" for f in other)


OOM = """\
import torch


def oom_types():
    types = [torch.cuda.OutOfMemoryError]
    if hasattr(torch, "OutOfMemoryError"):
        types.append(torch.OutOfMemoryError)
    return tuple(types)


def load(model, batch):
    try:
        return model(batch)
    except (torch.cuda.OutOfMemoryError, torch.OutOfMemoryError):
        return None
"""

OOM_ALONE = """\
import torch


def load(model, batch):
    try:
        return model(batch)
    except torch.cuda.OutOfMemoryError:
        return None
"""


def test_out_of_memory_error(tmp_path: Path) -> None:
    """AB#37: beside `torch.OutOfMemoryError` (a list the handler reads, one except tuple) the CUDA
    name is a named scope; alone, the finding says what torch_npu 2.7.1 (RuntimeError) and 2.14
    (torch.OutOfMemoryError) raise, as a warning."""
    report = migrate_json(write_project(tmp_path, {"oom.py": OOM, "alone.py": OOM_ALONE}))
    assert not _open(report, "oom.py")
    scopes = [(s["start_line"], s["end_line"]) for s in _scopes(report, "oom.py") if typerefs.OOM_CAUGHT in s["reason"]]
    assert all(any(a <= line <= b for a, b in scopes) for line in (5, 14))
    alone = _open(report, "alone.py")
    assert [(f["line"], f["code"], f["severity"]) for f in alone] == [(7, "NPU202", "warning")]
    message = alone[0]["message"]
    assert "2.7.1 to 2.10 raise a plain RuntimeError" in message and "2.14 raises torch.OutOfMemoryError" in message
    assert "never fires" not in message


WRAPPER = """\
def get_build_config():
    from torch.utils.cpp_extension import CUDA_HOME
    return CUDA_HOME


def get_extension():
    from torch.utils.cpp_extension import BuildExtension, CppExtension, CUDAExtension
    return BuildExtension, CppExtension, CUDAExtension
"""

NVCC = """\
import subprocess


def nvcc_version():
    from torch.utils.cpp_extension import CUDA_HOME
    return subprocess.check_output([CUDA_HOME + "/bin/nvcc", "-V"])
"""

BUILDS = """\
from torch.utils.cpp_extension import CUDAExtension


def extension():
    return CUDAExtension


ext = extension()("ops", ["ops.cu"])
"""


def test_cpp_extension_names_only_passed_on(tmp_path: Path) -> None:
    """AC#27: `CUDA_HOME`/`CUDAExtension` imported and returned (an environment helper) are a named
    scope; a file that reads CUDA_HOME's value, or one that builds a CUDA extension, keeps NPU911."""
    report = migrate_json(write_project(tmp_path, {"wrapper.py": WRAPPER, "nvcc.py": NVCC, "builds.py": BUILDS}))
    assert not _open(report, "wrapper.py")
    assert any(typerefs.PASSED_ON in s["reason"] for s in _scopes(report, "wrapper.py"))
    assert [f["code"] for f in _open(report, "nvcc.py")] == ["NPU911"]
    assert _open(report, "nvcc.py")[0]["severity"] == "error"
    assert "NPU911" in [f["code"] for f in _open(report, "builds.py")]


ALLOCATOR_GATED = """\
import torch
from torch.cuda.memory import CUDAPluggableAllocator

from .platforms import current_platform


def make_allocator(path):
    if not current_platform.is_cuda():
        return None
    return CUDAPluggableAllocator(path, "alloc", "free")
"""


def test_import_whose_only_use_an_npu_host_never_runs(tmp_path: Path) -> None:
    """AB#16 (vLLM's copy): the use is after an exit on `not current_platform.is_cuda()` (a named
    scope); the import of a class every build has runs there and succeeds: a named scope too. The
    same import with a use an NPU host runs is folded into that use's error (above)."""
    report = migrate_json(write_project(tmp_path, {"gated.py": ALLOCATOR_GATED, "alloc.py": ALLOCATOR}))
    assert not _open(report, "gated.py")
    scope = [s for s in _scopes(report, "gated.py") if s["start_line"] == 2]
    assert scope and scope[0]["reason"].startswith(NO_WORK) and typerefs.UNUSED_THERE in scope[0]["reason"]
    assert [(f["line"], f["severity"]) for f in _open(report, "alloc.py")] == [(6, "error")]
