"""Precision wave 30, helper h143 (issue #16): support checks of selectable classes, test probes,
same-file fallbacks and labels (round-30 audit rows EA#25, EC#19, EB#38, ...). Each false case is
paired with its nearest true case, which stays reported."""

from __future__ import annotations

from .precision_helpers import migrate_json, write_project

from npu_migrate import finfo30, mocked29, optpkgexit29, raisefirst23, scriptfolds30, siblingnames30


def _hits(report: dict, path: str, code: str) -> list[dict]:
    return [f for f in report["findings"] if f["path"] == path and f["code"] == code]


# ------------------------------------------------------------- EA#25: a mock's expected call arguments
PROFILER_TEST = '''from unittest.mock import MagicMock, patch

import torch


def test_profiler_activities_are_parsed():
    with patch("pkg.wrapper.torch.profiler.profile", side_effect=[MagicMock()]) as profile:
        start()
    assert profile.call_args.kwargs["activities"] == [
        torch.profiler.ProfilerActivity.CUDA
    ]
    profile.assert_called_once_with(activities=[torch.profiler.ProfilerActivity.CUDA])


def test_real_profiler_records_cuda():
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        step()
    assert prof is not None
'''


def test_value_compared_with_a_mocks_recorded_call_is_moot_and_a_real_profiler_request_stays(tmp_path):
    root = write_project(tmp_path, {"tests/test_profiler.py": PROFILER_TEST})
    report = migrate_json(root)
    assert [(f["line"], f["severity"]) for f in _hits(report, "tests/test_profiler.py", "NPU935")] \
        == [(16, "warning")]  # the real profiler is asked for CUDA activity: kept
    moot = {s["start_line"]: s["reason"] for s in report["skipped"]
            if s.get("path") == "tests/test_profiler.py" and "(NPU935)" in s["reason"]}
    assert set(moot) == {10, 12} and all(mocked29.MOCK_VALUE in why for why in moot.values())


# ------------------------------------------------------------- EB#38: a script's read of the caller's devices
DETECTING_SCRIPT = '''#!/bin/bash
SMI_BIN=$(which nvidia-smi || which rocm-smi || echo "")
if [[ "$SMI_BIN" == *"rocm"* ]]; then
  GPU_DEVICE_VAR="HIP_VISIBLE_DEVICES"
else
  GPU_DEVICE_VAR="CUDA_VISIBLE_DEVICES"
fi
echo "using ${GPU_DEVICE_VAR}"

# Accept either CUDA_VISIBLE_DEVICES or HIP_VISIBLE_DEVICES
VISIBLE_DEVICES="${CUDA_VISIBLE_DEVICES:-${HIP_VISIBLE_DEVICES:-}}"
echo "$VISIBLE_DEVICES"
'''

READING_SCRIPT = '''#!/bin/bash
VISIBLE_DEVICES="${CUDA_VISIBLE_DEVICES:-0}"
python serve.py --devices "$VISIBLE_DEVICES"
'''


def test_read_of_the_callers_devices_folds_into_the_scripts_own_report_and_a_lone_read_stays(tmp_path):
    root = write_project(tmp_path, {"detect.sh": DETECTING_SCRIPT, "read.sh": READING_SCRIPT})
    report = migrate_json(root)
    detect = _hits(report, "detect.sh", "NPU701")
    assert len(detect) == 1 and detect[0]["line"] == 6 and detect[0]["severity"] == "warning"
    assert [a[0] for a in detect[0]["also"]] == [11] and "(also at line 11)" in detect[0]["message"]
    read = _hits(report, "read.sh", "NPU701")  # the script's only report of the variable: kept
    assert [(f["line"], f["severity"]) for f in read] == [(2, "warning")]
    assert scriptfolds30.READ_FROM_CALLER in read[0]["message"]


# ------------------------------------------------------------- EC#19: a sibling module's `..._cuda` helper
SIBLING_UTILS = '''import pytest
import torch

skip_if_not_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")


def tolerance():
    return 1e-3
'''

SIBLING_TEST = '''from utils import (
    skip_if_not_cuda,
    tolerance,
)


@skip_if_not_cuda
def test_runs():
    assert tolerance() > 0
'''

EXTENSION_TEST = '''from kernels import selective_scan_cuda


def test_scan():
    assert selective_scan_cuda.fwd is not None
'''

REEXPORTING_UTILS = '''from scan_ext import selective_scan_cuda
'''

REEXPORT_TEST = '''from helpers import selective_scan_cuda


def test_scan():
    assert selective_scan_cuda.fwd is not None
'''


def test_sibling_python_helper_is_no_extension_and_a_compiled_one_stays(tmp_path):
    root = write_project(tmp_path, {
        "tests/det/utils.py": SIBLING_UTILS, "tests/det/test_det.py": SIBLING_TEST,
        "tests/ext/test_ext.py": EXTENSION_TEST,  # (no kernels.py beside it: a compiled module)
        "tests/re/helpers.py": REEXPORTING_UTILS, "tests/re/test_re.py": REEXPORT_TEST,
    })
    report = migrate_json(root)
    assert not _hits(report, "tests/det/test_det.py", "NPU911")
    scopes = [s for s in report["skipped"] if s.get("path") == "tests/det/test_det.py"]
    assert [(s["start_line"], siblingnames30.SIBLING_NAME in s["reason"]) for s in scopes] == [(1, True)]
    for path in ("tests/ext/test_ext.py", "tests/re/test_re.py"):
        kept = _hits(report, path, "NPU911")
        assert [(f["line"], f["severity"]) for f in kept] == [(1, "error")], path


# ------------------------------------------------------------- EC#27: `f = f_triton if HAS_TRITON else f_torch`
SELECTED_MODULE = '''import torch

from pkg.triton_utils import HAS_TRITON, tl, triton


@triton.jit
def _meta_kernel(x_ptr, n: tl.constexpr):
    pass


def _launch(x):
    _meta_kernel[(1,)](x, x.numel())


def build_meta_triton(x):
    _launch(x)
    return x


def _build_meta_torch(x):
    return x.clone()


build_meta = build_meta_triton if HAS_TRITON else _build_meta_torch
'''

TRITON_UTILS = '''try:
    import triton
    import triton.language as tl
    HAS_TRITON = True
except ImportError:
    triton = tl = None
    HAS_TRITON = False
'''

LIBRARY_USER = '''from pkg.meta import build_meta


def step(x):
    return build_meta(x)
'''

DIRECT_LIBRARY_USER = '''from pkg.meta import build_meta_triton


def step(x):
    return build_meta_triton(x)
'''

META_TEST = '''import torch

from pkg import meta


def test_triton_side_matches_torch():
    x = torch.ones(4, device="cuda")
    assert torch.equal(meta.build_meta_triton(x), meta._build_meta_torch(x))
'''


def test_kernel_only_a_triton_availability_selection_reaches_is_info_and_a_direct_library_call_keeps_it(tmp_path):
    base = {"pkg/__init__.py": "", "pkg/triton_utils.py": TRITON_UTILS, "pkg/meta.py": SELECTED_MODULE,
            "pkg/user.py": LIBRARY_USER, "tests/test_meta.py": META_TEST}
    report = migrate_json(write_project(tmp_path / "selected", base))
    selected = [f for f in _hits(report, "pkg/meta.py", "NPU910") if f["line"] == 6]
    assert [f["severity"] for f in selected] == ["info"]
    message = selected[0]["message"]
    assert "opt-in: the kernel runs only through `build_meta_triton`" in message
    assert "`_build_meta_torch`" in message and "(line 24)" in message
    assert "tests/benchmarks call `build_meta_triton` directly" in message and "`tests/test_meta.py`" in message
    # the nearest true cases: the Triton side also called by library code, the kernel launched
    # outside the Triton side too
    direct = migrate_json(write_project(tmp_path / "direct", {**base, "pkg/user2.py": DIRECT_LIBRARY_USER}))
    warm = SELECTED_MODULE + "\n\ndef warm_up(x):\n    _meta_kernel[(1,)](x, 1)\n"
    launched = migrate_json(write_project(tmp_path / "launched", {**base, "pkg/meta.py": warm}))
    for report in (direct, launched):
        kept = [f for f in _hits(report, "pkg/meta.py", "NPU910") if f["line"] == 6]
        assert [f["severity"] for f in kept] == ["error"], kept


# ------------------------------------------------------------- EA#33: a fake platform a test patches in
FAKE_PLATFORM_TEST = '''import types

import torch

import pkg.fp8_utils as fp8_utils


def test_layout_with_a_fake_platform(monkeypatch):
    monkeypatch.setattr(
        fp8_utils,
        "current_platform",
        types.SimpleNamespace(is_rocm=lambda: False, fp8_dtype=lambda: torch.float8_e4m3fn),
    )
    assert fp8_utils.layout() is not None


def test_cast_on_the_device():
    config = types.SimpleNamespace(fp8_dtype=lambda: torch.float8_e4m3fn)
    x = torch.ones(4, device="cuda").to(config.fp8_dtype())
    assert x.numel() == 4
'''


def test_value_of_a_fake_object_patched_in_is_moot_and_the_same_namespace_feeding_a_cast_stays(tmp_path):
    root = write_project(tmp_path, {"tests/test_fake.py": FAKE_PLATFORM_TEST})
    report = migrate_json(root)
    places = [(f["line"], f["severity"]) for f in _hits(report, "tests/test_fake.py", "NPU913")]
    places += [(a[0], f["severity"]) for f in _hits(report, "tests/test_fake.py", "NPU913") for a in f.get("also") or []]
    assert (18, "error") in places and not any(line == 12 for line, _s in places)
    moot = {s["start_line"]: s["reason"] for s in report["skipped"]
            if s.get("path") == "tests/test_fake.py" and "(NPU913)" in s["reason"]}
    assert list(moot) == [12] and mocked29.MOCK_VALUE in moot[12]


# ------------------------------------------------------------- EC#39: a test's probe of a CUDA extension's op
PROBE_MODULE = '''import torch


def permute_supported():
    return torch.ops._moe_C.permute_supported()


def core_supported():
    return torch.ops._C.core_supported()
'''

PROBING_TEST = '''import pytest
import torch

from pkg.ops import {probe}


def test_permute_under_graph():
    if not {probe}():
        pytest.skip("not supported on this platform")
    graph = torch.cuda.CUDAGraph()
    assert graph is not None
'''


def test_lines_after_a_probe_of_a_cuda_extension_op_are_unreached_and_a_probe_of_torch_ops_c_keeps_them(tmp_path):
    root = write_project(tmp_path, {"pkg/__init__.py": "", "pkg/ops.py": PROBE_MODULE,
                                    "tests/test_probe.py": PROBING_TEST.format(probe="permute_supported"),
                                    "tests/test_core.py": PROBING_TEST.format(probe="core_supported")})
    report = migrate_json(root)
    [unreached] = _hits(report, "tests/test_probe.py", "NPU202")
    assert unreached["line"] == 10 and unreached["severity"] == "info"
    assert raisefirst23.UNREACHED in unreached["message"] and "`torch.ops._moe_C`" in unreached["message"]
    # `torch.ops._C` may be registered by an NPU plugin: no verdict, the capture stays reported
    assert [(f["line"], f["severity"]) for f in _hits(report, "tests/test_core.py", "NPU202")] == [(10, "error")]


# ------------------------------------------------------------- EB#23: experts only tests call on an instance
MOE_PLATFORMS = '''class Platform:
    _enum = "cuda"

    def is_cuda(self):
        return self._enum == "cuda"


current_platform = Platform()
'''

MOE_EXPERTS = '''import torch

from proj.platforms import current_platform


def has_fastpkg():
    return False


class ExpertsBase:
    @classmethod
    def is_supported_config(cls, config):
        if not cls._supports_current_device():
            return False, "device"
        return True, None


class FastExpertsBase(ExpertsBase):
    @staticmethod
    def _supports_current_device() -> bool:
        platform = current_platform
        return has_fastpkg() and platform.is_cuda()

    def get_metas(self, m):
        return torch.ones(m, device="cuda").to(torch.float8_e4m3fn)


class FastIndexedExperts(FastExpertsBase):
    pass
'''

MOE_ORACLE = '''def backend_to_kernel_cls(backend):
    if backend == "fast":
        from proj.experts import FastIndexedExperts

        return [FastIndexedExperts]
    raise ValueError(backend)


def select(backend, config):
    for cls in backend_to_kernel_cls(backend):
        ok, why = cls.is_supported_config(config)
        if not ok:
            raise ValueError(why)
        return cls
'''

MOE_TEST = '''import proj.experts as fast
from proj.experts import FastIndexedExperts


def test_metas():
    experts = FastIndexedExperts()
    assert experts.get_metas(4).numel() == 4


def test_base_helper():
    assert fast.FastExpertsBase.get_metas(None, 4).numel() == 4
'''

MOE_LIBRARY_USER = '''from proj.experts import FastIndexedExperts


def warm_up():
    return FastIndexedExperts().get_metas(1)
'''


def test_experts_a_test_calls_on_an_instance_are_p2_info_and_a_library_call_keeps_them(tmp_path):
    files = {"proj/__init__.py": "", "proj/platforms.py": MOE_PLATFORMS, "proj/experts.py": MOE_EXPERTS,
             "proj/oracle.py": MOE_ORACLE, "tests/test_experts.py": MOE_TEST}
    report = migrate_json(write_project(tmp_path / "tests_only", files))
    [fp8] = [f for f in _hits(report, "proj/experts.py", "NPU913")]
    assert fp8["severity"] == "info" and "reached on an NPU host only from tests/benchmarks" in fp8["message"]
    assert "`FastExpertsBase._supports_current_device()` answers no on an NPU host" in fp8["message"]
    # the nearest true case: a library function builds the experts by name, past the selector
    kept = migrate_json(write_project(tmp_path / "library", {**files, "proj/warm.py": MOE_LIBRARY_USER}))
    assert [f["severity"] for f in _hits(kept, "proj/experts.py", "NPU913")] == ["error"]


# ------------------------------------------------------------- EB#20: a base check in another module, a test's None sentinel
GROUP_UTILS = '''from proj.platforms import current_platform


def group_gemm_supported() -> bool:
    if not current_platform.is_cuda():
        return False
    return current_platform.get_device_capability() >= 90
'''

GROUP_EXPERTS = '''import torch

from proj import ops
from proj.utils import group_gemm_supported


def run_group_gemm_fp8(x, scale):
    return ops.scaled_fp8_quant(x, scale)


class ExpertsBase:
    @classmethod
    def is_supported_config(cls, config):
        if not cls._supports_current_device():
            return False, "device"
        return True, None


class GroupExpertsFp8Base(ExpertsBase):
    @staticmethod
    def _supports_current_device() -> bool:
        return group_gemm_supported()

    def apply(self, x):
        return run_group_gemm_fp8(x, None)


class GroupExpertsFp8(GroupExpertsFp8Base):
    pass


class BatchedGroupExpertsFp8(GroupExpertsFp8Base):
    pass


FLOAT8_E4M3_MAX = torch.finfo(torch.float8_e4m3fn).max
'''

GROUP_ORACLE = MOE_ORACLE.replace('"fast"', '"group"').replace(
    "import FastIndexedExperts", "import BatchedGroupExpertsFp8, GroupExpertsFp8").replace(
    "[FastIndexedExperts]", "[GroupExpertsFp8, BatchedGroupExpertsFp8]")

GROUP_OPS = '''import torch


def scaled_fp8_quant(x, scale):
    return torch.ops._C.scaled_fp8_quant(x, scale)
'''

GROUP_TEST_TOOLS = '''from proj.utils import group_gemm_supported

EXPERTS = []

if group_gemm_supported():
    from proj.experts import GroupExpertsFp8

    EXPERTS.append(GroupExpertsFp8)
else:
    GroupExpertsFp8 = None
'''

GROUP_LIBRARY_USER = '''from proj.experts import GroupExpertsFp8


def warm_up(x):
    return GroupExpertsFp8().apply(x)
'''


def test_experts_a_test_tool_sets_to_none_are_rejected_and_the_left_finfo_is_metadata(tmp_path):
    files = {"proj/__init__.py": "", "proj/platforms.py": MOE_PLATFORMS, "proj/utils.py": GROUP_UTILS,
             "proj/experts.py": GROUP_EXPERTS, "proj/oracle.py": GROUP_ORACLE, "proj/ops.py": GROUP_OPS,
             "tests/tools/mk_objects.py": GROUP_TEST_TOOLS}
    report = migrate_json(write_project(tmp_path / "rejected", files))
    assert not [f for f in _hits(report, "proj/experts.py", "NPU913") if f["severity"] != "info"]
    scopes = {s["start_line"]: s["reason"] for s in report["skipped"]
              if s.get("path") == "proj/experts.py" and "(NPU913)" in s["reason"]}
    assert "`GroupExpertsFp8Base._supports_current_device()` answers no on an NPU host" in scopes[8]
    assert finfo30.FINFO in scopes[36]
    # the nearest true case: library code builds the experts by name: the cast stays an error, and
    # the `torch.finfo` read stays one of its places
    kept = migrate_json(write_project(tmp_path / "library", {**files, "proj/warm.py": GROUP_LIBRARY_USER}))
    [error] = _hits(kept, "proj/experts.py", "NPU913")
    assert error["severity"] == "error" and error["line"] == 8 and [a[0] for a in error["also"]] == [36]


# ------------------------------------------------------------- EC#26: a dtype table under `if has_pkg():`
IMPORT_UTILS = '''import importlib.util


def _has_module(name):
    return importlib.util.find_spec(name) is not None


def has_fastpkg() -> bool:
    return _has_module("fastpkg")


def use_fp8_tables() -> bool:
    return True
'''

SCHEMA = '''import torch

from proj.import_utils import {probe}


if {probe}():
    from fastpkg import dtypes as fast_dtypes

    TO_TORCH: dict[fast_dtypes.DataType, torch.dtype] = {{
        fast_dtypes.float8e5m2: torch.float8_e5m2,
        fast_dtypes.int8: torch.int8,
    }}
'''


def test_dtype_table_under_an_optional_package_probe_is_opt_in_and_under_another_test_stays(tmp_path):
    base = {"proj/__init__.py": "", "proj/import_utils.py": IMPORT_UTILS}
    report = migrate_json(write_project(tmp_path / "probed", {**base, "proj/schema.py": SCHEMA.format(probe="has_fastpkg")}))
    [table] = _hits(report, "proj/schema.py", "NPU913")
    assert table["line"] == 10 and table["severity"] == "info"
    assert optpkgexit29.BLOCK_OPT_IN.split("`{package}`")[0] in table["message"] and "`fastpkg`" in table["message"]
    # the nearest true case: the same table under a test that probes no package
    kept = migrate_json(write_project(tmp_path / "setting", {**base, "proj/schema.py": SCHEMA.format(probe="use_fp8_tables")}))
    assert [(f["line"], f["severity"]) for f in _hits(kept, "proj/schema.py", "NPU913")] == [(10, "error")]
