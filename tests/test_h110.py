"""Round-25 precision wave, helper h110 (issue #16): same-file guards and small shapes
(smallshapes25.py: BS#5, BS#6, BS#16, BS#23, BT#2). Each test pairs the false case with the nearest
true case, which must stay reported."""

from __future__ import annotations

from tests.precision_helpers import findings_at, migrate_json, moot_lines, write_project

# BS#5: a function-local `import torch.cuda.X as alias` whose alias is read only where its use is reported
_PROFILER = """\
class Wrapper:
    def __init__(self, config):
        self.config = config
        import torch.cuda.profiler as gpu_prof

        self._prof = gpu_prof

    def start(self):
        self._prof.start()


class Unread:
    def __init__(self):
        import torch.cuda.profiler as gpu_prof  # (never read: nothing to fold into)

        self.ready = True
"""


def test_local_import_folded_into_its_reported_use(tmp_path):
    report = migrate_json(write_project(tmp_path, {"pkg/prof.py": _PROFILER}))
    errors = findings_at(report, "pkg/prof.py", "NPU202")
    assert list(errors) == [6], errors
    assert "also at line 4" in errors[6]["message"], errors[6]["message"]
    # (the unread import has no use to stand for it: its own finding stays)
    leftovers = findings_at(report, "pkg/prof.py", "NPU990")
    assert list(leftovers) == [14], leftovers
    assert leftovers[14]["severity"] == "warning"


# BS#6: FP8 dtypes of parametrized cases the test hands only to torch.finfo / torch.iinfo
_LIMITS = """\
import pytest
import torch


@pytest.mark.parametrize(
    "case",
    (
        (torch.int8, "int8"),
        (torch.float8_e5m2, "e5m2"),
        (torch.float8_e4m3fn, "e4m3"),
    ),
)
def test_limits(case):
    print(case)
    if len(case) == 2:
        torch_type, name = case
        if torch_type.is_floating_point:
            low = torch.finfo(torch_type).min
        else:
            low = torch.iinfo(torch_type).min
        assert low < 0, name


@pytest.mark.parametrize("dtype", [torch.float8_e4m3fn])
def test_cast(dtype):
    x = torch.randn(4, 4, device="cuda")
    y = x.to(dtype)
    assert torch.finfo(dtype).max > 0
    assert y.shape == x.shape
"""


def test_fp8_dtype_only_read_for_its_limits(tmp_path):
    report = migrate_json(write_project(tmp_path, {"pkg/tests/test_limits.py": _LIMITS}))
    errors = findings_at(report, "pkg/tests/test_limits.py", "NPU913")
    # (the test that casts a tensor to the dtype stays an error)
    assert list(errors) == [24], errors
    assert "also at" not in errors[24]["message"]
    scopes = {s["start_line"]: s["reason"] for s in report["skipped"]
              if s.get("path") == "pkg/tests/test_limits.py" and "start_line" in s}
    for line in (9, 10):
        assert scopes[line].startswith("no port work on an NPU host (NPU913): not FP8 compute: "), scopes
        assert "`torch.finfo`" in scopes[line]


# BS#16: a test body after `if device != "cuda": pytest.skip(...)` whose cases get "cuda" only
# from a device list behind a CUDA check kept as written
_STREAMS = """\
import itertools

import pytest
import torch

from pkg.devices import EXTRA_DEVICES

_devices = ["cpu"]
_devices += ["cuda"] if torch.cuda.is_available() else []


def _make_cases(sizes):
    return [(device, size) for device, size in itertools.product(_devices, sizes)]


parametrize_device_size = pytest.mark.parametrize("device_size", _make_cases([16, 32]))


@parametrize_device_size
def test_streams(device_size):
    device, size = device_size
    if device != "cuda":
        pytest.skip("Not CUDA")
    torch.cuda._sleep(1000)
    assert size > 0


@pytest.mark.parametrize("device", ["cpu", "cuda"])
def test_streams_listed(device):
    if device != "cuda":
        pytest.skip("Not CUDA")
    torch.cuda._sleep(1000)


@pytest.mark.parametrize("device", _devices + EXTRA_DEVICES)
def test_streams_imported(device):
    if device != "cuda":
        pytest.skip("Not CUDA")
    torch.cuda._sleep(1000)
"""


def test_skip_unless_cuda_with_probed_cases(tmp_path):
    files = {"pkg/tests/test_streams.py": _STREAMS, "pkg/devices.py": 'EXTRA_DEVICES = ["cuda:1"]\n'}
    report = migrate_json(write_project(tmp_path, files))
    path = "pkg/tests/test_streams.py"
    reasons = moot_lines(report["skipped"], "NPU202", path)
    assert 24 in reasons and "`_devices`" in reasons[24] and "line 9" in reasons[24], reasons
    # (a "cuda" case the file lists itself passes the skip on an NPU host once migrated, and so may
    # a case from a list another module defines: kept)
    errors = findings_at(report, path, "NPU202")
    assert list(errors) == [32], errors
    assert "also at line 39" in errors[32]["message"], errors[32]["message"]
    assert errors[32]["severity"] == "error"


# BS#23: a helper called only after complementary exits (`if flag: return` / `if not flag: raise`)
_QUANT = """\
import torch

from pkg.probe import kernels_available


def _reference(x):
    return x.to(torch.float8_e4m3fn)


def _reference_live(x):
    return x.to(torch.float8_e5m2)


def quantize(x, fast):
    if kernels_available:
        return x * 2
    if not kernels_available:
        if fast:
            raise NotImplementedError("fast path needs the kernels")
        else:
            raise NotImplementedError("the kernels are missing")
    return _reference(x)


def quantize_live(x):
    if kernels_available:
        return x * 2
    return _reference_live(x)
"""

_PROBE = """\
import importlib.util

kernels_available = importlib.util.find_spec("fastkern") is not None
"""


def test_helper_after_complementary_exits(tmp_path):
    report = migrate_json(write_project(tmp_path, {"pkg/quant.py": _QUANT, "pkg/probe.py": _PROBE}))
    reasons = moot_lines(report["skipped"], "NPU913", "pkg/quant.py")
    assert 7 in reasons and "`_reference` is called only at line 22" in reasons[7], reasons
    assert "`if kernels_available:` returns (line 15)" in reasons[7]
    assert "`if not kernels_available:` raises (line 17)" in reasons[7]
    # (a helper reached after one exit only runs where the kernels are missing, as on an NPU host)
    errors = findings_at(report, "pkg/quant.py", "NPU913")
    assert list(errors) == [11], errors


# BT#2: "nccl" as the label field of the file's own dataclass
_BENCH = """\
import dataclasses

import torch.distributed as dist


@dataclasses.dataclass
class Variant:
    name: str
    runs: list


@dataclasses.dataclass
class Setup:
    backend: str
    size: int


def make(runs):
    variants = [Variant("nccl", runs), Variant("custom", runs)]
    setups = [Setup("nccl", 4)]
    for v in variants:
        print(v.name)
    for s in setups:
        dist.init_process_group(s.backend)
    return variants
"""


def test_dataclass_label_field(tmp_path):
    report = migrate_json(write_project(tmp_path, {"pkg/bench_reduce.py": _BENCH}))
    path = "pkg/bench_reduce.py"
    scopes = {s["start_line"]: s["reason"] for s in report["skipped"] if s.get("path") == path and "start_line" in s}
    assert scopes.get(19, "").startswith("no port work on an NPU host (NPU990): a label the code resolves"), scopes
    assert "`name` field of `Variant`" in scopes[19]
    # (a backend field handed to init_process_group keeps its finding)
    leftovers = findings_at(report, path, "NPU990")
    assert list(leftovers) == [20], leftovers
