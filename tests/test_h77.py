"""FP8 and bitsandbytes findings that repeat another finding's work (npu_migrate/fp8folds19.py,
issue #16, round-19 audit BB#12, BA#9, BA#4, BB#38): each folded shape beside the nearest shape
that stays reported."""

from __future__ import annotations

from .precision_helpers import migrate_json, write_project

TRITON_WRAPPER = '''\
import torch
import triton
import triton.language as tl


@triton.jit
def quant_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=offs < n), mask=offs < n)


def quantize(x):
    out = torch.empty_like(x, dtype=torch.float8_e4m3fn)
    y = x.float()
    x8 = y.to(torch.float8_e4m3fn).contiguous()
    quant_kernel[(x.numel() // 128,)](x8, out, x.numel(), BLOCK=128, stride=x8.stride(0))
    return out
'''

TRITON_WITH_COMPUTE = '''\
import torch
import triton
import triton.language as tl


@triton.jit
def quant_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=offs < n), mask=offs < n)


def quantize(x, w):
    out = torch.empty_like(x, dtype=torch.float8_e4m3fn)
    quant_kernel[(x.numel() // 128,)](x, out, x.numel(), BLOCK=128)
    return torch._scaled_mm(out, w.to(torch.float8_e4m3fn), scale_a=None, scale_b=None)


def cast_only(x):
    return x.to(torch.float8_e4m3fn)


HANDLERS = {"fp8": print}


def dispatch(x):
    out = torch.empty_like(x, dtype=torch.float8_e4m3fn)
    quant_kernel[(1,)](x, out, x.numel(), BLOCK=128)
    HANDLERS["fp8"](out)
    return out
'''


def _findings(report: dict, path: str, code: str | None = None) -> list[dict]:
    return [f for f in report["findings"] if f["path"] == path and not f["fixable"]
            and (code is None or f["code"] == code)]


def test_fp8_buffers_feeding_the_modules_triton_kernel_fold_into_its_npu910(tmp_path):
    report = migrate_json(write_project(tmp_path, {"pkg/quant.py": TRITON_WRAPPER}))
    assert not _findings(report, "pkg/quant.py", "NPU913")
    (triton,) = [f for f in _findings(report, "pkg/quant.py", "NPU910") if f["severity"] == "error"]
    assert "only feeds this module's Triton kernels" in triton["message"]
    assert {13, 15} <= {line for line, _c, _s in triton["also"]}


def test_fp8_compute_beside_a_launch_and_outside_wrappers_stays_npu913(tmp_path):
    report = migrate_json(write_project(tmp_path, {"pkg/quant.py": TRITON_WITH_COMPUTE}))
    fp8 = _findings(report, "pkg/quant.py", "NPU913")
    lines = {line for f in fp8 for line in (f["line"], *(a[0] for a in f.get("also", [])))}
    # (the buffer is also passed to torch._scaled_mm, the weight cast feeds no kernel, the helper
    # launches none, a buffer also handed to a table's callable)
    assert {13, 15, 19, 26} <= lines
    assert all("only feeds" not in f["message"] for f in _findings(report, "pkg/quant.py", "NPU910"))


HELPER_UTILS = '''\
import torch


FP8_TYPES = {torch.float8_e4m3fn, torch.float8_e5m2}


def to_fp8_saturated(x, float8_dtype):
    if float8_dtype in FP8_TYPES:
        max_value = torch.finfo(float8_dtype).max
        x = x.clamp(min=-max_value, max=max_value)
        return x.to(float8_dtype)
    raise ValueError(float8_dtype)
'''

HELPER_TENSOR = '''\
import torch

from pkg.utils import to_fp8_saturated


class _ToFloat8(torch.autograd.Function):
    @staticmethod
    def forward(ctx, tensor, scale, float8_dtype):
        return to_fp8_saturated(tensor * scale, float8_dtype)


def scale_to_float8(tensor, scale, float8_dtype):
    return _ToFloat8.apply(tensor, scale, float8_dtype)
'''

HELPER_SCALING = '''\
from pkg.tensor import scale_to_float8


def tensor_to_float8_dynamic(tensor, float8_dtype):
    scale = tensor.abs().max()
    return scale_to_float8(tensor, scale, float8_dtype)
'''

HELPER_CALLER = '''\
import torch

from pkg.scaling import tensor_to_float8_dynamic


def prepare(module, x, float8_dtype=torch.float8_e4m3fn):
    return tensor_to_float8_dynamic(x, float8_dtype)
'''

OUTSIDE_CALLER = '''\
import torch

from otherlib.float8 import tensor_to_float8_dynamic


def prepare(module, x, float8_dtype=torch.float8_e4m3fn):
    return tensor_to_float8_dynamic(x, float8_dtype)
'''


def test_a_call_of_a_project_fp8_helper_folds_into_the_helpers_reported_cast(tmp_path):
    report = migrate_json(write_project(tmp_path, {
        "pkg/__init__.py": "", "pkg/utils.py": HELPER_UTILS, "pkg/tensor.py": HELPER_TENSOR,
        "pkg/scaling.py": HELPER_SCALING, "pkg/parallel.py": HELPER_CALLER}))
    assert not [f for f in _findings(report, "pkg/parallel.py", "NPU913") if f["severity"] != "info"]
    (cast,) = _findings(report, "pkg/utils.py", "NPU913")
    assert cast["severity"] == "error"
    assert "`tensor_to_float8_dynamic(...)` in `parallel.py` (lines 6, 7)" in cast["message"]


def test_a_call_of_a_helper_from_outside_the_run_stays_reported(tmp_path):
    report = migrate_json(write_project(tmp_path, {
        "pkg/__init__.py": "", "pkg/utils.py": HELPER_UTILS, "pkg/parallel.py": OUTSIDE_CALLER}))
    (call,) = [f for f in _findings(report, "pkg/parallel.py", "NPU913") if f["severity"] == "error"]
    assert "(a cast to FP8)" in call["message"]
    (cast,) = _findings(report, "pkg/utils.py", "NPU913")
    assert "parallel.py" not in cast["message"]


BNB_PLUGIN = '''\
import torch


def load_bnb():
    import bitsandbytes as bnb

    class Linear8bit(bnb.nn.Linear8bitLt):
        def __init__(self, *args, device=None, **kwargs):
            super().__init__(*args, device=device, **kwargs)
            if torch.tensor(0, device=device).device.type == "cuda":
                self.quantize_()

        def quantize_(self):
            self.weight = self.quantize(self.weight, self.weight.data, None)

        @staticmethod
        def quantize(params, weight, device):
            device = device or torch.device("cuda")
            if device.type != "cuda":
                raise RuntimeError(f"Unexpected device type: {device.type}")
            return bnb.functional.int8_vectorwise_quant(weight.to(device))

    return Linear8bit
'''

BNB_PLAIN = '''\
import torch


def build(features):
    import bitsandbytes as bnb

    return bnb.nn.Linear8bitLt(features, features)
'''


def test_bnb_import_beside_a_wrapper_raising_unless_cuda_folds_into_that_finding(tmp_path):
    report = migrate_json(write_project(tmp_path, {"pkg/bnb_plugin.py": BNB_PLUGIN}))
    assert not _findings(report, "pkg/bnb_plugin.py", "NPU914")
    (raising,) = [f for f in _findings(report, "pkg/bnb_plugin.py") if "raises unless the device is CUDA" in f["message"]]
    assert "build only on CUDA" in raising["message"]
    assert 5 in {line for line, _c, _s in raising["also"]}


def test_bnb_import_without_a_raising_wrapper_stays_npu914(tmp_path):
    report = migrate_json(write_project(tmp_path, {"pkg/bnb_layers.py": BNB_PLAIN}))
    (bnb,) = _findings(report, "pkg/bnb_layers.py", "NPU914")
    assert "slower than on CUDA" in bnb["message"]


def test_a_helper_call_finding_holding_folded_fp8_work_of_its_own_stays(tmp_path):
    """A cast-helper anchor another pass folded the file's own FP8 uses into keeps them (unit level:
    no shipped pass builds that shape from source alone)."""
    import dataclasses

    from npu_migrate.findings import Finding
    from npu_migrate.fp8folds19 import fold_helper_calls

    @dataclasses.dataclass
    class Result:
        relpath: str
        findings: list

    texts = {"pkg/utils.py": HELPER_UTILS.encode(), "pkg/parallel.py": OUTSIDE_CALLER.replace(
        "otherlib.float8", "pkg.utils").replace("tensor_to_float8_dynamic", "to_fp8_saturated").encode()}
    cast = Finding("pkg/utils.py", 11, 21, "NPU913", "FP8 compute: `x.to(float8_dtype)`", False, "x.to(float8_dtype)",
                   severity="error")
    message = "FP8 compute: `to_fp8_saturated(x, float8_dtype)` (a cast to FP8)"
    plain = Finding("pkg/parallel.py", 7, 12, "NPU913", message, False, "to_fp8_saturated(x, float8_dtype)",
                    severity="error")
    results = [Result("pkg/utils.py", [cast]), Result("pkg/parallel.py", [plain])]
    paths = list(texts)
    folded = fold_helper_calls(results, lambda i: texts[paths[i]])
    assert not folded[1].findings and "parallel.py" in folded[0].findings[0].message
    own = dataclasses.replace(plain, message=message + " (with `bmm_fp8(a, b)` in code that computes ...)")
    kept = fold_helper_calls([Result("pkg/utils.py", [cast]), Result("pkg/parallel.py", [own])],
                             lambda i: texts[paths[i]])
    assert kept[1].findings == [own] and kept[0].findings == [cast]
