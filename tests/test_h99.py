"""Precision wave 23, helper h99 (issue #16): CUDA-only packages the tables did not know, and
guarded optional imports. Each false case beside the nearest true one that stays reported."""

from __future__ import annotations

from .precision_helpers import migrate_json, write_project


def _report_only(report: dict, path: str) -> list[dict]:
    return [f for f in report["findings"] if f["path"] == path and not f["fixable"]]


# ------------------------------------------------------------------------------------------------
# localcover23.py (round-23 BM#10): a helper loaded only by functions after their own imports of
# the same CUDA-only package folds into the importer's finding

COMPAT = """\
import torch.distributed as dist
from flashinfer.comm.mnnvl import CommBackend


class Communicator(CommBackend):
    def __init__(self, group):
        self.group = group

    def rank(self):
        return dist.get_rank(self.group)
"""

MANAGER = """\
import torch


class Manager:
    def __init__(self, group):
        self.group = group
        self.initialized = False

    def initialize(self, world_size):
        from flashinfer.comm import Mapping

        if self.initialized:
            return
        self.mapping = Mapping(world_size)
        from kit.comm.compat import Communicator

        self.comm = Communicator(self.group)
        self.initialized = True

    def cleanup(self):
        self.initialized = False

    def restore(self):
        if self.initialized:
            from kit.comm.compat import Communicator

            self.comm = Communicator(self.group)
"""


def _comm_project(tmp_path, manager: str, extra: dict | None = None):
    return write_project(tmp_path, {"kit/__init__.py": "", "kit/comm/__init__.py": "",
                                    "kit/comm/compat.py": COMPAT, "kit/comm/manager.py": manager, **(extra or {})})


def test_helper_loaded_only_after_the_functions_own_import_folds_into_it(tmp_path):
    report = migrate_json(_comm_project(tmp_path, MANAGER))
    assert not _report_only(report, "kit/comm/compat.py")
    (carrier,) = _report_only(report, "kit/comm/manager.py")
    assert carrier["code"] == "NPU911" and carrier["severity"] == "error" and carrier["line"] == 10
    assert "also covers `kit/comm/compat.py`" in carrier["message"] and "`flashinfer`" in carrier["message"]


def test_flag_also_set_true_without_the_import_keeps_the_helpers_error(tmp_path):
    manager = MANAGER.replace("    def cleanup(self):\n        self.initialized = False",
                              "    def cleanup(self):\n        self.initialized = True")
    report = migrate_json(_comm_project(tmp_path, manager))
    (kept,) = _report_only(report, "kit/comm/compat.py")
    assert kept["code"] == "NPU911" and kept["severity"] == "error"


def test_site_under_no_flag_keeps_the_helpers_error(tmp_path):
    manager = MANAGER.replace("        if self.initialized:\n            from kit.comm.compat",
                              "        if self.group is not None:\n            from kit.comm.compat")
    report = migrate_json(_comm_project(tmp_path, manager))
    assert [f["code"] for f in _report_only(report, "kit/comm/compat.py")] == ["NPU911"]


def test_flag_another_file_sets_keeps_the_helpers_error(tmp_path):
    other = "from kit.comm.manager import Manager\n\n\ndef resume(group):\n    m = Manager(group)\n    m.initialized = True\n    m.restore()\n"
    report = migrate_json(_comm_project(tmp_path, MANAGER, {"kit/resume.py": other}))
    assert [f["code"] for f in _report_only(report, "kit/comm/compat.py")] == ["NPU911"]


def test_import_after_the_site_covers_nothing(tmp_path):
    manager = MANAGER.replace("        from flashinfer.comm import Mapping\n\n", "").replace(
        "        self.mapping = Mapping(world_size)\n",
        "        self.mapping = None\n").replace(
        "        self.initialized = True\n", "        self.initialized = True\n        from flashinfer.comm import Mapping\n")
    report = migrate_json(_comm_project(tmp_path, manager))
    assert [f["code"] for f in _report_only(report, "kit/comm/compat.py")] == ["NPU911"]


# ------------------------------------------------------------------------------------------------
# libgates23.py (round-23 BL#23, BL#34): FP8 past a CUDA-only kernel library's ImportError gate, or
# feeding its ops, folds into one NPU911 error at the gate; probes15: `assert _deep_gemm_available`

INT4 = """\
import torch

try:
    from mslk.quantize.shuffle import int4_row_quantize, pack_int4
except Exception:
    int4_row_quantize = None
    pack_int4 = None

try:
    from mslk.quantize.triton.fp8_quantize import quantize_fp8_row
except Exception:
    quantize_fp8_row = None


class Int4Weight(torch.Tensor):
    @classmethod
    def from_hp(cls, w, group_size, activation_dtype=torch.bfloat16):
        if int4_row_quantize is None:
            raise ImportError("Requires mslk >= 1.0.0")
        supported = {torch.bfloat16, torch.float8_e4m3fn}
        assert activation_dtype in supported
        wq, scale = int4_row_quantize(w, group_size)
        return cls(pack_int4(wq), scale, activation_dtype)


def int4_linear(x, weight):
    if weight.activation_dtype == torch.float8_e4m3fn:
        xq, x_scale = quantize_fp8_row(x)
        return torch.ops.mslk.f8i4bf16_rowwise(xq, weight.qdata, x_scale, weight.scale)
    return torch.ops.mslk.bf16i4bf16_rowwise(x, weight.qdata, weight.scale)
"""


def _fp8_project(tmp_path, text: str):
    return write_project(tmp_path, {"kit/__init__.py": "", "kit/int4.py": text})


def test_fp8_past_the_library_gate_folds_into_one_error_at_the_gate(tmp_path):
    report = migrate_json(_fp8_project(tmp_path, INT4))
    found = _report_only(report, "kit/int4.py")
    assert [f["code"] for f in found] == ["NPU911"], found
    gate = found[0]
    assert gate["line"] == 18 and gate["severity"] == "error"
    assert "`mslk` is required here" in gate["message"] and "Int4Weight.from_hp" in gate["message"]
    assert "lines 20, 28" in gate["message"] and "torch.ops.mslk.f8i4bf16_rowwise" in gate["message"]


def test_fp8_feeding_no_library_op_stays_reported(tmp_path):
    text = INT4.replace("        return torch.ops.mslk.f8i4bf16_rowwise(xq, weight.qdata, x_scale, weight.scale)",
                        "        return torch._scaled_mm(xq, weight.qdata, x_scale, weight.scale)")
    report = migrate_json(_fp8_project(tmp_path, text))
    fp8 = [f for f in _report_only(report, "kit/int4.py") if f["code"] == "NPU913"]
    assert [f["line"] for f in fp8] == [29]  # (the FP8 GEMM that feeds no library op: kept)


def test_fp8_before_the_gate_stays_reported(tmp_path):
    text = INT4.replace(
        "        if int4_row_quantize is None:\n            raise ImportError(\"Requires mslk >= 1.0.0\")\n"
        "        supported = {torch.bfloat16, torch.float8_e4m3fn}\n",
        "        supported = {torch.bfloat16, torch.float8_e4m3fn}\n"
        "        if int4_row_quantize is None:\n            raise ImportError(\"Requires mslk >= 1.0.0\")\n")
    report = migrate_json(_fp8_project(tmp_path, text))
    codes = [f["code"] for f in _report_only(report, "kit/int4.py")]
    assert "NPU913" in codes


def test_gate_of_a_package_an_npu_host_may_have_folds_nothing(tmp_path):
    text = INT4.replace("from mslk.quantize.shuffle", "from mylib.quantize.shuffle")
    text = text.replace("from mslk.quantize.triton.fp8_quantize", "from mylib.fp8_quantize")
    text = text.replace("torch.ops.mslk.", "torch.ops.mylib.")
    report = migrate_json(_fp8_project(tmp_path, text))
    found = _report_only(report, "kit/int4.py")
    assert "NPU913" in [f["code"] for f in found] and not any("is required here" in f["message"] for f in found)


KERNELS = """\
import importlib.util

import torch

_deep_gemm_available = importlib.util.find_spec("deep_gemm") is not None


def fp8_gemm(a, b):
    assert _deep_gemm_available, "deep_gemm is required for this FP8 GEMM"
    from deep_gemm import fp8_gemm_nt

    return fp8_gemm_nt(a, b)


def fp8_gemm_unchecked(a, b):
    from deep_gemm import fp8_gemm_nt

    return fp8_gemm_nt(a, b)
"""


def test_library_import_after_an_assert_of_its_availability_is_a_named_scope(tmp_path):
    report = migrate_json(write_project(tmp_path, {"kit/__init__.py": "", "kit/kernels.py": KERNELS}))
    kept = _report_only(report, "kit/kernels.py")
    assert [(f["line"], f["code"], f["severity"]) for f in kept] == [(16, "NPU911", "error")]
    scopes = {s["start_line"]: s["reason"] for s in report["skipped"] if s.get("path") == "kit/kernels.py"}
    assert "`assert _deep_gemm_available`" in scopes[10] and "`deep_gemm` has no NPU build" in scopes[10]


def test_fp8_dtype_handed_to_the_gated_constructor_names_only_a_dtype(tmp_path):
    caller = ("import torch\n\nfrom kit.int4 import Int4Weight\n\n\n"
              "def quantize(module):\n"
              "    return Int4Weight.from_hp(module.weight, 128, activation_dtype=torch.float8_e4m3fn)\n")
    report = migrate_json(write_project(tmp_path, {"kit/__init__.py": "", "kit/int4.py": INT4, "kit/api.py": caller}))
    assert not _report_only(report, "kit/api.py")
    scopes = {s["start_line"]: s["reason"] for s in report["skipped"] if s.get("path") == "kit/api.py"}
    assert "selects the FP8 path of `Int4Weight.from_hp` (kit/int4.py:20)" in scopes[7]
