"""Round 28's same-file and same-test guards (audit CA, CB, CC; helper h134, issue #16): each false
shape paired with the nearest true case that must stay reported."""

from __future__ import annotations

from .precision_helpers import migrate_json, write_project
from .precision_helpers import finding_places as _places
from .precision_helpers import scope_reasons as _scopes


# ----------------------------------------------------------------------------- CC#17, CA#4: skips in the test
SKIPS = '''import pytest
import torch

FLAKY = torch.__version__.startswith("9")


def _run(worker):
    return worker(4)


def cupy_worker(n):
    import cupy as cp

    return cp.ones(n)


def numpy_worker(n):
    import cupy as cp

    return cp.zeros(n)


def test_fp8_accuracy():
    pytest.skip("TODO: fix the accuracy issue")
    x = torch.randn(4, device="cuda")
    y = x.to(torch.float8_e4m3fn)
    assert y.shape == x.shape


def test_fp8_flaky():
    if FLAKY:
        pytest.skip("flaky")
    x = torch.randn(4, device="cuda")
    y = x.to(torch.float8_e5m2)
    assert y.shape == x.shape


def test_cupy_peer():
    pytest.importorskip("cupy")
    _run(cupy_worker)


def test_numpy_peer():
    pytest.importorskip("numpy")
    _run(numpy_worker)
'''


def test_unconditional_skip_and_importorskip_of_a_cuda_only_package(tmp_path):
    """CC#17: a test whose body starts with an unconditional `pytest.skip("TODO ...")` runs on no
    host: its FP8 cast is a named scope; a skip under an `if` an NPU host may not take keeps its
    FP8 error. CA#4: a helper handed on only by a test that first calls
    `pytest.importorskip("cupy")` (no NPU build) never runs there: a named scope; the same helper
    shape handed on after `pytest.importorskip("numpy")` keeps its error."""
    report = migrate_json(write_project(tmp_path, {"tests/test_skips.py": SKIPS}))
    path = "tests/test_skips.py"
    fp8, cupy = _places(report, path, "NPU913"), _places(report, path, "NPU911")
    assert 26 not in fp8 and 'pytest.skip("TODO: fix the accuracy issue")' in _scopes(report, path, "NPU913")[26]
    assert fp8[34]["severity"] == "error"
    assert 12 not in cupy and 'pytest.importorskip("cupy")' in _scopes(report, path, "NPU911")[12]
    assert cupy[18]["severity"] == "error"


# ----------------------------------------------------------------------------- CB#19: a script for ROCm
SCRIPT = '''import argparse

import torch

from vllm.platforms import current_platform


@torch.inference_mode()
def main(profile):
    def run_benchmark():
        if profile:
            torch.cuda.cudart().cudaProfilerStart()
        x = torch.randn(4, device="cuda")
        return x.sum()

    return run_benchmark()


if __name__ == "__main__":
    print("benchmarks the paged attention kernel")
    if not current_platform.{check}():
        raise RuntimeError("This benchmark requires the platform.")
    parser = argparse.ArgumentParser()
    parser.add_argument("--profile", action="store_true")
    args = parser.parse_args()
    main(args.profile)
'''


def test_script_raising_unless_another_vendors_platform(tmp_path):
    """CB#19: a benchmark script whose `__main__` block raises `if not current_platform.is_rocm()`
    before calling `main` (decorated `@torch.inference_mode()`) is ROCm's: the `cudart()` in
    `main` is a named scope; the same script raising unless CUDA (`is_cuda()`, a refusal the port
    must lift) keeps its error."""
    report = migrate_json(write_project(tmp_path, {
        "benchmarks/bench_paged.py": SCRIPT.replace("{check}", "is_rocm"),
        "benchmarks/bench_other.py": SCRIPT.replace("{check}", "is_cuda")}))
    assert 12 not in _places(report, "benchmarks/bench_paged.py", "NPU202")
    reason = _scopes(report, "benchmarks/bench_paged.py", "NPU202")[12]
    assert "after a raise unless another vendor's platform: `not current_platform.is_rocm()`" in reason
    # (policy P1, h166: the `cudart()` sits under `if profile:`, `main`'s parameter read in its
    # closure and set only by the store_true `--profile`: an opt-in, info; still reported, no scope)
    other = _places(report, "benchmarks/bench_other.py", "NPU202")[12]
    assert other["severity"] == "info" and "`--profile` is chosen" in other["message"]
    assert "another vendor" not in other["message"]


# ----------------------------------------------------------------------------- CB#8, CC#11: optional packages
PROBES = '''import importlib.util

import torch


def _has_module(name):
    return importlib.util.find_spec(name) is not None


def has_fancy():
    return _has_module("fancy")


def _fancy_v2_reason():
    if not _has_module("fancyep"):
        return "fancyep is not installed"
    return None


def has_fancy_v2():
    try:
        reason = _fancy_v2_reason()
    except Exception:
        return False
    return reason is None


def has_fast_links():
    return torch.accelerator.device_count() > 4
'''

MODULE_SKIP = '''import pytest
import torch

from proj.utils import {probe}

if not {probe}():
    pytest.skip("not installed", allow_module_level=True)


def reference(x):
    return (x * 2).to(torch.float8_e4m3fn)


def test_kernel():
    x = torch.randn(4, device="cuda")
    assert reference(x).shape == x.shape
'''

MARKS = '''import pytest
import torch

from proj.utils import has_fancy_v2, has_fast_links

requires_v2 = pytest.mark.skipif(not has_fancy_v2(), reason="needs fancyep v2")


def _run(worker):
    return worker(4)


def v2_impl(n):
    return torch.randn(n, device="cuda").to(torch.float8_e4m3fn)


def shared_impl(n):
    return torch.randn(n, device="cuda").to(torch.float8_e5m2)


@requires_v2
def test_v2():
    _run(v2_impl)
    _run(shared_impl)


def test_shared():
    _run(shared_impl)


@pytest.mark.skipif(not has_fast_links(), reason="needs fast links")
def test_links():
    x = torch.randn(4, device="cuda")
    assert x.to(torch.float8_e4m3fn).shape == x.shape
'''


def test_tests_skipped_unless_an_optional_package_probe_holds(tmp_path):
    """CB#8: a test module that skips at import `if not has_fancy()`, the probe (in another module
    of the run) looking the package up, is reached on an NPU host only once a user installs it: its
    FP8 reference is info naming the package and the probe (P1), not a scope. CC#11: a test marked
    through a module-level `requires_v2 = skipif(not has_fancy_v2())`, whose probe looks the
    package up two calls deep, and the helper only it hands on: info likewise. Kept errors (the
    nearest true cases): the same module skip on a feature probe that looks no package up
    (`has_fast_links()`), a test carrying that probe's mark, and a helper an unmarked test also
    hands on."""
    report = migrate_json(write_project(tmp_path, {
        "proj/__init__.py": "",
        "proj/utils.py": PROBES,
        "tests/test_fancy.py": MODULE_SKIP.replace("{probe}", "has_fancy"),
        "tests/test_links.py": MODULE_SKIP.replace("{probe}", "has_fast_links"),
        "tests/test_marks.py": MARKS}))
    fancy = _places(report, "tests/test_fancy.py", "NPU913")[11]
    assert fancy["severity"] == "info", fancy
    assert "only when the optional package `fancy` is installed: `not has_fancy()` skips the module" in fancy["message"]
    assert "proj/utils.py:10" in fancy["message"]
    assert _places(report, "tests/test_links.py", "NPU913")[11]["severity"] == "error"
    marks = _places(report, "tests/test_marks.py", "NPU913")
    assert marks[14]["severity"] == "info" and "optional package `fancyep`" in marks[14]["message"]
    assert "`not has_fancy_v2()` skips `test_v2`" in marks[14]["message"]
    assert marks[18]["severity"] == "error"  # also handed on by an unmarked test
    assert marks[34]["severity"] == "error"  # a feature probe's mark


# ----------------------------------------------------------------------------- CA#19: a branch only "cuda" takes
SYNC = '''import pytest
import torch


def build(device):
    return torch.zeros(4, device=device)


@pytest.mark.parametrize("device", ["cpu", "cuda"])
@pytest.mark.parametrize("full", [False, True])
def test_no_sync(device, full):
    if device == "cuda" and not torch.cuda.is_available():
        pytest.skip("CUDA required")
    device = torch.device(device)
    mode = torch.cuda.get_sync_debug_mode() if device.type == "cuda" else None
    if mode is not None:
        torch.cuda.set_sync_debug_mode("error")
    try:
        out = build(device)
    finally:
        if mode is not None:
            torch.cuda.set_sync_debug_mode(mode)
    assert out.shape == (4,)


@pytest.mark.parametrize("device", ["cpu", "cuda"])
def test_sync_unskipped(device):
    device = torch.device(device)
    mode = torch.cuda.get_sync_debug_mode() if device.type == "cuda" else None
    if mode is not None:
        torch.cuda.set_sync_debug_mode("error")
    out = build(device)
    if mode is not None:
        torch.cuda.set_sync_debug_mode(mode)
    assert out.shape == (4,)
'''


def test_branch_only_the_skipped_cuda_case_takes(tmp_path):
    """CA#19: in a test parametrized over ["cpu", "cuda"] whose first statement skips the "cuda"
    case where `torch.cuda.is_available()` (kept as written) is False, `get_sync_debug_mode() if
    device.type == "cuda" else None` (after `device = torch.device(device)`) and the `if mode is
    not None:` set/restore are reached only by the skipped case: a named scope; the same test
    without the skip keeps its error."""
    report = migrate_json(write_project(tmp_path, {"tests/test_sync.py": SYNC}))
    api = _places(report, "tests/test_sync.py", "NPU202")
    assert not {15, 17, 22} & set(api)
    assert "only the 'cuda' case of `device` takes" in _scopes(report, "tests/test_sync.py", "NPU202")[15]
    assert api[29]["severity"] == "error"


# ----------------------------------------------------------------------------- CA#21: a flag bound just before
ELIGIBLE = '''import torch

from vllm.platforms import current_platform


def multicast_ready(group_size):
    eligible = current_platform.is_cuda() and group_size > 1
    if eligible:
        try:
            from flashinfer.comm.mnnvl import is_multicast_supported

            eligible = is_multicast_supported(torch.accelerator.current_device_index())
        except ImportError:
            eligible = False
    return eligible


def nvlink_ready(group_size):
    eligible = group_size > 1
    if eligible:
        try:
            from flashinfer.comm.mnnvl import is_mnnvl_fabric_supported

            eligible = is_mnnvl_fabric_supported(torch.accelerator.current_device_index())
        except ImportError as error:
            raise RuntimeError("needs FlashInfer MNNVL") from error
    return eligible
'''


def test_if_on_a_flag_the_statement_before_binds_false(tmp_path):
    """CA#21: `eligible = current_platform.is_cuda() and ...` right before `if eligible:` is False
    on an NPU host, whatever the block binds later: the flashinfer import inside is a named scope
    (it was one finding with another import, so no scope of its own before); the same shape on a
    flag an NPU host may pass (`group_size > 1`), whose import failure raises, keeps its error."""
    report = migrate_json(write_project(tmp_path, {"comm.py": ELIGIBLE}))
    places = _places(report, "comm.py", "NPU911")
    assert 10 not in places and "`eligible`" in _scopes(report, "comm.py", "NPU911")[10]
    assert places[22]["severity"] == "error"


# ----------------------------------------------------------------------------- CC#8: a caught construction
LAMPORT = '''import logging

import torch

logger = logging.getLogger(__name__)


class FusedCollective:
    def __init__(self, size):
        self.size = size
        try:
            from flashinfer.comm.mnnvl import McastGPUBuffer
        except ImportError as error:
            raise RuntimeError("needs FlashInfer MNNVL") from error
        self.buffer = McastGPUBuffer(size)


_STATE: FusedCollective | None = None
_FAILED = False


def initialize(size):
    global _STATE, _FAILED
    try:
        _STATE = FusedCollective(size)
    except Exception:
        _FAILED = True
        logger.exception("fused collective unavailable; use the NCCL fallback")


def get_state() -> FusedCollective | None:
    return _STATE
'''

PLAIN = LAMPORT.replace("FusedCollective", "PlainCollective").replace("""    try:
        _STATE = PlainCollective(size)
    except Exception:
        _FAILED = True
        logger.exception("fused collective unavailable; use the NCCL fallback")
""", """    _STATE = PlainCollective(size)
""")


def test_import_in_init_every_construction_catches(tmp_path):
    """CC#8: a flashinfer import in a class's `__init__` whose `except ImportError` raises again,
    the class built only inside `try`/`except Exception` that switches the feature off and logs the
    NCCL fallback (annotations aside): a warning (the precedent of the function form, round 14
    AK#26), not an error; a class built outside such a `try` keeps its error."""
    assert PLAIN != LAMPORT
    report = migrate_json(write_project(tmp_path, {"collective.py": LAMPORT, "plain.py": PLAIN}))
    places = _places(report, "collective.py", "NPU911")
    assert places[12]["severity"] == "info", places[12]  # (a warning until round 29: policy P1, h140)
    assert "every construction of `FusedCollective` in the run sits inside" in places[12]["message"]
    assert _places(report, "plain.py", "NPU911")[12]["severity"] == "error"
