"""Issue #16, round-8 audits: CUDA-only code behind the code's own switch-off where CUDA is missing
(npu_migrate/disabled.py, versionprobes.py): a library bound in a `try` whose `except` disables
the communicator, a `torch.cuda.nccl.version()` probe with a fallback, the `else` of a flag true
on an NPU host, a CUDA test inside a condition false there. Each false shape becomes a named
scope; the nearby true case stays a finding."""

from __future__ import annotations

from pathlib import Path

from .precision_helpers import migrate_json, write_project

COMMUNICATOR = """\
import ctypes

import torch


class NCCLLibrary:
    def __init__(self, path):
        self.lib = ctypes.CDLL(path)


class Communicator:
    def __init__(self, path, world_size):
        self.world_size = world_size
        if world_size == 1:
            self.disabled = True
            return
        try:
            self.nccl = NCCLLibrary(path)
        except Exception:
            # the library is missing: fall back to torch.distributed
            self.disabled = True
            return
        self.disabled = False
        self.version = self.nccl.ncclGetVersion()

    def all_reduce(self, tensor):
        if self.disabled:
            return None
        self.nccl.ncclAllReduce(tensor.data_ptr(), tensor.numel())
        return tensor

    def unguarded(self, tensor):
        self.nccl.ncclSend(tensor.data_ptr(), tensor.numel())


def send(comm, tensor):
    comm.unguarded(tensor)
"""


def _kept(report: dict, path: str) -> list[tuple[int, str]]:
    out = []
    for f in report["findings"]:
        if f["path"] == path and not f["fixable"] and f["severity"] != "info":
            out += [(f["line"], f["code"])]
            out += [(line, f["code"]) for line in _also(f["message"])]
    return out


def _also(message: str) -> list[int]:
    at = message.find("(also at line")
    if at < 0:
        return []
    part = message[at:].split(")", 1)[0]
    return [int(tok.strip(",")) for tok in part.replace("and", " ").split() if tok.strip(",").isdigit()]


def _scopes(report: dict, path: str) -> list[tuple[int, int, str]]:
    return [(s["start_line"], s["end_line"], s["reason"]) for s in report["skipped"]
            if "start_line" in s and s["path"] == path]


def test_library_disabled_in_except_is_a_scope_and_an_unguarded_use_stays(tmp_path: Path) -> None:
    report = migrate_json(write_project(tmp_path, {"comm.py": COMMUNICATOR}))
    kept = _kept(report, "comm.py")
    scopes = _scopes(report, "comm.py")
    named = [s for s in scopes if "disables the feature" in s[2]]
    assert named, scopes
    covered = {line for first, last, _ in named for line in range(first, last + 1)}
    # the binding (l.18), the use after the returning handler (l.24), the flag-guarded use (l.29)
    assert {18, 24, 29} <= covered | {line for line, _ in kept} and not {18, 24, 29} & {line for line, _ in kept}
    assert all(r.startswith("runs as written on an NPU host (") for _, _, r in named)
    # a use no flag test guards, which a caller reaches without a test, stays a finding (a method
    # nothing calls would be info naming that: disabledcallers27.py, wave 27's policy P3)
    assert 33 in {line for line, _ in kept}, report["findings"]


PROBE = """\
import torch


def nccl_version():
    try:
        return tuple(torch.cuda.nccl.version())
    except Exception:
        return None


def nccl_version_required():
    return tuple(torch.cuda.nccl.version())
"""


def test_nccl_version_probe_with_fallback_is_a_scope_and_an_unguarded_one_stays(tmp_path: Path) -> None:
    report = migrate_json(write_project(tmp_path, {"probe.py": PROBE}))
    kept = _kept(report, "probe.py")
    scopes = _scopes(report, "probe.py")
    assert any(first <= 6 <= last and "torch.cuda.nccl.version()` raises on an NPU host" in r
               for first, last, r in scopes), scopes
    assert 6 not in {line for line, _ in kept}
    assert 12 in {line for line, _ in kept}, report["findings"]


CONTEXT = """\
import contextlib

import torch

from .platforms import current_platform


class SymmContext:
    def __init__(self, comm, disabled=False):
        self.disabled = disabled or comm.world_size == 1 or not current_platform.is_cuda()
        if self.disabled:
            self.device = None
        else:
            self.capturing = torch.cuda.is_current_stream_capturing()


class Other:
    def __init__(self, comm, disabled=False):
        self.off = disabled or comm.world_size == 1
        if self.off:
            self.device = None
        else:
            self.capturing = torch.cuda.is_current_stream_capturing()
"""


def test_else_of_a_flag_true_on_npu_is_a_scope_and_an_unknown_flag_stays(tmp_path: Path) -> None:
    report = migrate_json(write_project(tmp_path, {"ctx.py": CONTEXT}))
    kept = _kept(report, "ctx.py")
    scopes = _scopes(report, "ctx.py")
    assert any(first <= 14 <= last and "in a branch an NPU host does not take" in r and "self.disabled" in r
               for first, last, r in scopes), scopes
    assert 14 not in {line for line, _ in kept}
    assert 23 in {line for line, _ in kept}, report["findings"]


PACKING = """\
import torch


def is_sm_at_least_90():
    return torch.cuda.is_available() and torch.cuda.get_device_capability() >= (9, 0)


def _is_device(kind, device):
    return torch.device(device).type == kind


def pack(tensor):
    if _is_device("cuda", tensor.device) and is_sm_at_least_90():
        return tensor.contiguous()
    return tensor


def place(tensor):
    if _is_device("cuda", tensor.device):
        return tensor.contiguous()
    return tensor
"""


def test_cuda_test_in_a_false_condition_is_a_scope_and_a_deciding_one_stays(tmp_path: Path) -> None:
    report = migrate_json(write_project(tmp_path, {"pack.py": PACKING}))
    before = migrate_json(write_project(tmp_path / "b", {"pack.py": PACKING.replace(
        "_is_device(\"cuda\", tensor.device) and is_sm_at_least_90()", "_is_device(\"cuda\", tensor.device)")}))
    kept = _kept(report, "pack.py")
    scopes = _scopes(report, "pack.py")
    print(report["findings"], scopes)
    assert any(first <= 13 <= last and "condition false on an NPU host" in r for first, last, r in scopes), scopes
    assert 13 not in {line for line, _ in kept}
    # the same test deciding alone keeps its finding
    assert 19 in {line for line, _ in kept} and 13 in {line for line, _ in _kept(before, "pack.py")}


BUILDER = """\
import torch


def assert_no_mismatch(name):
    return ".".join(torch.version.cuda.split(".")[:2])


class OpBuilder:
    def __init__(self, name):
        self.name = name

    def validate(self):
        return ".".join(torch.version.cuda.split(".")[:2])


class CUDAOpBuilder(OpBuilder):
    def builder(self):
        assert_no_mismatch(self.name)
        return torch.version.cuda.split(".")
"""

NPU_BUILDER = """\
from ..builder import OpBuilder


class NPUOpBuilder(OpBuilder):
    def builder(self):
        return None
"""


def test_cuda_op_builder_beside_an_npu_builder_is_a_scope_and_the_base_stays(tmp_path: Path) -> None:
    report = migrate_json(write_project(tmp_path, {"op_builder/builder.py": BUILDER,
                                                   "op_builder/npu/builder.py": NPU_BUILDER,
                                                   "op_builder/__init__.py": "", "op_builder/npu/__init__.py": ""}))
    kept = _kept(report, "op_builder/builder.py")
    scopes = _scopes(report, "op_builder/builder.py")
    named = {line for first, last, r in scopes if "CUDA op builder" in r for line in range(first, last + 1)}
    assert {5, 19} <= named, scopes
    assert not {5, 19} & {line for line, _ in kept}
    # the base class's method runs on an NPU host: it stays
    assert 13 in {line for line, _ in kept}, report["findings"]
    # without the NPU builder, the CUDA one stays
    alone = migrate_json(write_project(tmp_path / "alone", {"op_builder/builder.py": BUILDER}))
    assert {5, 13, 19} <= {line for line, _ in _kept(alone, "op_builder/builder.py")}, alone["findings"]


AUTOCAST = """\
import torch


def forward(x, weight, scale):
    if torch.is_autocast_enabled("cuda"):
        x = x.to(torch.get_autocast_dtype("cuda"))
    if scale > 0 and torch.is_autocast_enabled("cuda") and torch.version.cuda is not None:
        x = x * scale
    return x @ weight
"""


def test_a_cuda_test_that_decides_the_condition_stays(tmp_path: Path) -> None:
    report = migrate_json(write_project(tmp_path, {"fwd.py": AUTOCAST}))
    scopes = _scopes(report, "fwd.py")
    # line 5: the CUDA test is the whole condition: its answer on an NPU host is the question
    assert not any(first <= 5 <= last and "condition false on an NPU host" in r for first, last, r in scopes), scopes
    assert 5 in {line for line, _ in _kept(report, "fwd.py")}, report["findings"]
    # line 7: `torch.version.cuda is not None` is false there whatever the autocast test answers
    assert any(first <= 7 <= last and "condition false on an NPU host" in r for first, last, r in scopes), scopes


STREAMS = """\
import torch


class Overlap:
    def __init__(self):
        try:
            self.stream = torch.cuda.Stream()
        except Exception:
            self.disabled = True
            return
        self.disabled = False

    def run(self, fn):
        if self.disabled:
            return fn()
        with torch.cuda.stream(self.stream):
            torch.cuda.nvtx.range_push("overlap")
            return fn()
"""


def test_a_torch_cuda_object_in_the_try_is_no_library_the_npu_lacks(tmp_path: Path) -> None:
    # torch.cuda.Stream() is rewritten to torch.npu and loads there: the feature stays on
    report = migrate_json(write_project(tmp_path, {"overlap.py": STREAMS}))
    assert not any("disables the feature" in r for _, _, r in _scopes(report, "overlap.py"))


ORDER = """\
import torch

from .platforms import current_platform


def capture(x):
    if current_platform.is_cuda() and torch.cuda.is_current_stream_capturing():
        return x
    if torch.cuda.is_current_stream_capturing() and current_platform.is_cuda():
        return x
    return x + 1
"""


def test_a_false_part_must_short_circuit_a_cuda_call(tmp_path: Path) -> None:
    report = migrate_json(write_project(tmp_path, {"cap.py": ORDER}))
    scopes = _scopes(report, "cap.py")
    assert any(first <= 7 <= last and "condition false on an NPU host" in r for first, last, r in scopes), scopes
    # line 9: the CUDA call runs before the false part: it stays
    assert 9 in {line for line, _ in _kept(report, "cap.py")}, report["findings"]
