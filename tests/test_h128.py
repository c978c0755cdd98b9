"""Round 27's second sample (audit BW, helper h128, issue #16): each false or redundant shape
paired with the nearest true case that must stay reported or rewritten."""

from __future__ import annotations

from .precision_helpers import findings_at, migrate_json, write_project
from .precision_helpers import finding_places as _places

# ----------------------------------------------------------------------------- BW#15: early exits
REGION = '''import torch


class SharedRegion:
    def __init__(self, tensor):
        self.tensor = tensor
        self._is_pinned = False

    def pin(self):
        if self._is_pinned or not torch.cuda.is_available():
            return
        cudart = torch.cuda.cudart()
        cudart.cudaHostRegister(self.tensor.data_ptr(), self.tensor.numel(), 0)
        self._is_pinned = True

    def profile(self):
        if torch.cuda.is_available():
            torch.cuda.cudart().cudaProfilerStart()

    def reset(self):
        torch.cuda.cudart().cudaDeviceReset()

    def unpin(self):
        if self._is_pinned:
            torch.cuda.cudart().cudaHostUnregister(self.tensor.data_ptr())
            self._is_pinned = False


class Registered:
    def __init__(self, ptr):
        self.ptr = ptr
        self._registered = False

    def register(self):
        if not torch.cuda.is_available():
            return
        torch.cuda.cudart().cudaHostRegister(self.ptr, 0, 0)
        self._registered = True

    def adopt(self):
        self._registered = True

    def close(self):
        if self._registered:
            torch.cuda.cudart().cudaHostUnregister(self.ptr)


def to_device(t):
    if not torch.cuda.is_available():
        return t
    return t.to("cuda")


def synchronize(t):
    if t is None or not torch.cuda.is_available():
        return
    torch.cuda.synchronize()
'''


def _rewritten(report: dict, path: str, code: str) -> set[int]:
    return {f["line"] for f in report["findings"] if f["path"] == path and f["code"] == code and f["fixable"]}


def _scope_lines(report: dict, path: str, code: str) -> set[int]:
    return {line for s in report["skipped"] if s.get("path") == path and "start_line" in s
            and f"({code})" in s["reason"] for line in range(s["start_line"], s["end_line"] + 1)}


def test_early_exit_before_cuda_runtime_calls_is_kept(tmp_path):
    """BW#15: `if ... or not torch.cuda.is_available(): return` before `torch.cuda.cudart()` is
    left as written (widened, an NPU host would go on to the CUDA runtime call), and the call
    after it folds into the kept check; the nearest true cases still widen."""
    report = migrate_json(write_project(tmp_path, {"region.py": REGION}))
    rewritten = _rewritten(report, "region.py", "NPU201")
    assert not {10, 17, 35} & rewritten  # kept meaning CUDA
    assert {49, 55, 57} <= rewritten  # ordinary device code after the exit: widened
    kept = _scope_lines(report, "region.py", "NPU110") | set(findings_at(report, "region.py", "NPU110"))
    assert {10, 17, 35} <= kept and not {49, 55} & kept
    cudart = _places(report, "region.py", "NPU202")
    assert not {12, 18, 37} & set(cudart)  # behind the kept checks: folded
    assert 25 not in cudart  # `if self._is_pinned:`, set true only behind the kept check: folded
    assert cudart[21]["severity"] == "error"  # unguarded: still reported
    assert cudart[45]["severity"] == "error"  # its flag is also set true by unguarded code


# ----------------------------------------------------------------------------- BW#13: probed imports
PROBED = '''import importlib.util

import torch


def _has_module(name):
    return importlib.util.find_spec(name) is not None


def has_fastcomm():
    return _has_module("fastcomm")


def check_fastcomm():
    """CUDA multicast support."""
    if not has_fastcomm():
        raise RuntimeError("fastcomm not available: install it")
    from fastcomm._C import multicast_supported

    return multicast_supported()


def check_other():
    """CUDA multicast support."""
    if not has_fastcomm():
        raise RuntimeError("fastcomm not available: install it")
    from othercomm._C import nvlink_supported

    return nvlink_supported()


def check_unprobed():
    """CUDA topology."""
    from fastcomm._C import topology

    return topology()
'''


def test_lazy_import_after_its_own_probe_raises_is_opt_in(tmp_path):
    """BW#13: `if not has_X(): raise` right before `from X._C import f` is reached only once the
    user installs X (P1: info naming the probe); another package's import after the probe, and
    the same import without it, stay errors."""
    report = migrate_json(write_project(tmp_path, {"probe.py": PROBED}))
    places = _places(report, "probe.py", "NPU911")
    assert places[18]["severity"] == "info", places
    assert "only when the optional package `fastcomm` is installed" in places[18]["message"]
    assert "`has_fastcomm()` raises first" in places[18]["message"]
    assert places[27]["severity"] == "error"  # another package after the probe
    assert places[34]["severity"] == "error"  # no probe


# ----------------------------------------------------------------------------- BW#21: converters
CONVERTER = '''import argparse

import torch


def to_quant_dtype(s: str) -> torch.dtype:
    if s == "torch.float8_e4m3fn":
        return torch.float8_e4m3fn
    raise ValueError(f"Unsupported quant type {s}")


def default_dtype(s: str) -> torch.dtype:
    if s == "auto":
        return torch.float8_e4m3fn
    return torch.bfloat16


def make_parser():
    parser = argparse.ArgumentParser()
    parser.add_argument("--quant-dtype", type=to_quant_dtype, default=None)
    return parser


def quantize(x):
    return x.to(torch.float8_e5m2)
'''


def test_fp8_dtype_returned_for_its_option_string_is_opt_in(tmp_path):
    """BW#21: `if s == "torch.float8_e4m3fn": return torch.float8_e4m3fn` in a converter is a label
    for the option (info: reached only when it is chosen); the dtype returned for a string that
    names no FP8 format, and a cast, stay FP8 compute errors."""
    report = migrate_json(write_project(tmp_path, {"cli.py": CONVERTER}))
    places = _places(report, "cli.py", "NPU913")
    assert places[8]["severity"] == "info" and "only when the option 'torch.float8_e4m3fn' is chosen" in places[8]["message"]
    assert places[14]["severity"] == "error"
    assert places[25]["severity"] == "error"


# ----------------------------------------------------------------------------- BW#7: probe gates
PROBE_GATE = '''from importlib.util import find_spec

import torch

flashinfer_comm = None
if find_spec("flashinfer"):
    import flashinfer.comm as flashinfer_comm

triton_ops = None
if find_spec("triton"):
    import triton as triton_ops


class QuantPattern:
    def __init__(self, eps):
        self.eps = eps
        self.quant_dtype = torch.float8_e4m3fn


class OtherQuantPattern:
    def __init__(self, eps):
        self.quant_dtype = torch.float8_e5m2


class TritonQuantPattern:
    def __init__(self, eps):
        self.quant_dtype = torch.float8_e4m3fn


class FusionPass:
    def __init__(self, patterns):
        scale = torch.ones(1, dtype=torch.float8_e4m3fn)
        self.scale = scale
        if flashinfer_comm is None:
            print("flashinfer not installed, skipping the pass")
            return
        self.register_patterns(patterns)

    def register_patterns(self, patterns):
        patterns.append(QuantPattern(1e-5))
        patterns.append(OtherQuantPattern(1e-5))


class TritonPass:
    def __init__(self, patterns):
        if triton_ops is None:
            return
        patterns.append(TritonQuantPattern(1e-6))


DEFAULT_PATTERNS = [OtherQuantPattern]
'''


def test_fp8_built_only_past_a_probe_of_a_package_without_npu_build_is_info(tmp_path):
    """BW#7: FP8 in a class the file builds only past `if flashinfer_comm is None: return`, where
    the name stays None unless `find_spec("flashinfer")` finds it, is info (P3: another module may
    build the class); a class the file also lists elsewhere, a probe of a package an NPU host may
    have (triton), and FP8 before the gate stay errors."""
    report = migrate_json(write_project(tmp_path, {"fusion.py": PROBE_GATE}))
    places = _places(report, "fusion.py", "NPU913")
    assert places[17]["severity"] == "info", places
    assert "past `if flashinfer_comm is None: return`" in places[17]["message"]
    assert "in `QuantPattern`" in places[17]["message"]
    assert 'find_spec("flashinfer")' in places[17]["message"]
    assert places[22]["severity"] == "error"  # also listed at module level
    assert places[27]["severity"] == "error"  # triton installs on an NPU host
    assert places[32]["severity"] == "error"  # before the gate


KV_DTYPES = '''import torch


def fp8_dtype_for_kv_cache(kv_cache_dtype: str) -> torch.dtype:
    if kv_cache_dtype in ("fp8", "fp8_e4m3"):
        return torch.float8_e4m3fn
    elif kv_cache_dtype == "fp8_e5m2":
        return torch.float8_e5m2
    raise ValueError(kv_cache_dtype)


def cache_dtype(kv_cache_dtype: str) -> torch.dtype:
    if kv_cache_dtype in ("auto", "fp8"):
        return torch.float8_e4m3fn
    return torch.bfloat16
'''


def test_fp8_dtype_table_of_one_function_is_one_info(tmp_path):
    """BW#21's shape with `in ("fp8", "fp8_e4m3")`: the places of one converter stay one finding,
    info, naming every option; a tuple that also holds a non-FP8 string ("auto") keeps the error."""
    report = migrate_json(write_project(tmp_path, {"kv.py": KV_DTYPES}))
    places = _places(report, "kv.py", "NPU913")
    assert places[6] is places[8] and places[6]["severity"] == "info", places
    assert "'fp8' or 'fp8_e4m3'" in places[6]["message"] and "'fp8_e5m2'" in places[6]["message"]
    assert places[14]["severity"] == "error"
