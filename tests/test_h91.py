"""FP8 shapes read as FP8 compute (npu_migrate/fp8shapes21.py, issue #16, round-21 audits BG#39,
BG#20, BF#24, BH#36): each false or redundant shape beside the nearest shape that stays reported.
One dry run of one project serves every test."""

from __future__ import annotations

import pytest

from npu_migrate import fp8shapes21
from npu_migrate.findings import renamed

from .precision_helpers import findings_at, migrate_json, scopes_at, write_project

UTILS = '''\
import torch


def is_rocm_gpu():
    return torch.version.hip is not None


def is_big_gfx():
    if not is_rocm_gpu():
        return False
    return "gfx95" in torch.cuda.get_device_properties(0).gcnArchName
'''


ROWWISE = '''\
from typing import Tuple

import torch
from torch.utils._triton import has_triton

if has_triton():
    import triton
    import triton.language as tl

    OUT_TYPES = {
        torch.float8_e4m3fn: tl.float8e4nv,
        torch.bfloat16: tl.bfloat16,
    }

    @torch.library.custom_op("mylib::rowwise_cast", mutates_args={})
    def rowwise_cast(
        x: torch.Tensor,
        out_dtype: torch.dtype = torch.float8_e4m3fn,
    ) -> Tuple[torch.Tensor, torch.Tensor]:
        out = torch.empty_like(x, dtype=out_dtype)
        scales = torch.empty(x.shape[0], device=x.device, dtype=torch.float32)
        _rowwise_kernel[(x.shape[0],)](x, out, scales, x.shape[1], OUT_TYPES[out_dtype])
        return out, scales

    @triton.jit
    def _rowwise_kernel(x_ptr, out_ptr, s_ptr, n, OUT: tl.constexpr):
        i = tl.program_id(0)
        v = tl.load(x_ptr + i * n + tl.arange(0, 128))
        tl.store(out_ptr + i * n + tl.arange(0, 128), v.to(OUT))

    def rowwise_cast_reference(x):
        from pkg.quant.primitives import quantize_affine_float8

        return quantize_affine_float8(x, x.abs().max() / 448.0, torch.float8_e4m3fn)

else:

    def rowwise_cast(x, out_dtype=torch.float8_e4m3fn):
        raise NotImplementedError("rowwise_cast needs triton")
'''


ROWWISE_MM = '''\
from typing import Tuple

import torch
from torch.utils._triton import has_triton

if has_triton():
    import triton
    import triton.language as tl

    @torch.library.custom_op("mylib::rowwise_mm", mutates_args={})
    def rowwise_mm(
        a: torch.Tensor,
        b: torch.Tensor,
        out_dtype: torch.dtype = torch.float8_e4m3fn,
    ) -> torch.Tensor:
        scales = torch.empty(a.shape[0], device=a.device, dtype=torch.float32)
        _scale_kernel[(a.shape[0],)](a, scales, a.shape[1])
        a8 = a.to(out_dtype)
        return torch._scaled_mm(a8, b, scales, scales, out_dtype=torch.bfloat16)

    @triton.jit
    def _scale_kernel(x_ptr, s_ptr, n):
        i = tl.program_id(0)
        v = tl.load(x_ptr + i * n + tl.arange(0, 128))
        tl.store(s_ptr + i, tl.max(v, 0))

else:

    def rowwise_mm(a, b, out_dtype=torch.float8_e4m3fn):
        raise NotImplementedError("rowwise_mm needs triton")
'''


BLOCKWISE = '''\
from dataclasses import dataclass
from typing import Callable, Optional

import torch


@dataclass(frozen=True)
class _Impls:
    available: bool
    act_quant: Optional[Callable]


_impls: Optional[_Impls] = None


def _get_impls() -> _Impls:
    global _impls
    if _impls is None:
        _impls = _build_impls()
    return _impls


def _build_impls() -> _Impls:
    from torch.utils._triton import has_triton

    if not has_triton():
        return _Impls(False, None)

    import triton
    import triton.language as tl

    @triton.jit
    def act_quant_kernel(x_ptr, y_ptr, s_ptr, BLOCK_SIZE: tl.constexpr):
        pid = tl.program_id(axis=0)
        offs = pid * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
        x = tl.load(x_ptr + offs).to(tl.float32)
        s = tl.max(tl.abs(x)) / 448.0
        tl.store(y_ptr + offs, (x / s).to(y_ptr.dtype.element_ty))
        tl.store(s_ptr + pid, s)

    return _Impls(True, act_quant_kernel)


def blockwise_act_quant(x: torch.Tensor, block_size: int = 128, dtype: torch.dtype = torch.float8_e4m3fn):
    impls = _get_impls()
    if not impls.available:
        raise AssertionError("unsupported without triton")
    import triton

    y = torch.empty_like(x, dtype=dtype)
    s = x.new_empty(x.numel() // block_size, dtype=torch.float32)
    grid = lambda meta: (triton.cdiv(x.numel(), meta["BLOCK_SIZE"]),)
    impls.act_quant[grid](x, y, s, BLOCK_SIZE=block_size)
    return y, s
'''


BLOCKWISE_KEPT = '''\
from typing import Callable, Optional

import torch

_kernel: Optional[Callable] = None


def _build_kernel():
    from torch.utils._triton import has_triton

    if not has_triton():
        return None

    import triton
    import triton.language as tl

    @triton.jit
    def quant_kernel(x_ptr, y_ptr, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        tl.store(y_ptr + offs, tl.load(x_ptr + offs).to(y_ptr.dtype.element_ty))

    return quant_kernel


def _record(t):
    return t.float().abs().max()


def quant(x: torch.Tensor, dtype: torch.dtype = torch.float8_e4m3fn):
    kernel = _build_kernel()
    if kernel is None:
        raise AssertionError("unsupported without triton")
    y = torch.empty_like(x, dtype=dtype)
    kernel[(x.numel() // 128,)](x, y, BLOCK=128)
    _record(y)
    return y
'''


PLAIN = '''\
import torch


def _build():
    import triton
    import triton.language as tl

    @triton.jit
    def cast_kernel(x_ptr, y_ptr, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        tl.store(y_ptr + offs, tl.load(x_ptr + offs).to(y_ptr.dtype.element_ty))

    return cast_kernel


def cast_rows(x: torch.Tensor, dtype: torch.dtype = torch.float8_e4m3fn):
    kernel = _build()
    y = torch.empty_like(x, dtype=dtype)
    kernel[(x.numel() // 128,)](x, y, BLOCK=128)
    return y
'''


IMPORTING = '''\
import importlib.util

HAS_TRITON = importlib.util.find_spec("triton") is not None
'''


PATCHER = '''\
from pkg.importing import HAS_TRITON


def install():
    if not HAS_TRITON:
        return None
    from triton.runtime.errors import OutOfResources, PTXASError

    return (OutOfResources, PTXASError)
'''


PRIMITIVES = '''\
import torch


def quantize_affine_float8(x, scale, dtype):
    return (x / scale).to(dtype)
'''


SPARSE = '''\
import torch

from pkg.quant.primitives import quantize_affine_float8
from pkg.utils import is_big_gfx, is_rocm_gpu


class SparseFp8Tensor(torch.Tensor):
    @classmethod
    def from_hp(
        cls,
        hp_tensor: torch.Tensor,
        float8_dtype: torch.dtype = torch.float8_e4m3fn,
        alg_id: int = 0,
    ):
        assert is_rocm_gpu(), "this packing format runs only on ROCm"
        assert is_big_gfx(), "needs a gfx95 GPU"
        scale = hp_tensor.abs().max() / 448.0
        data = quantize_affine_float8(hp_tensor, scale, float8_dtype)
        return torch._cslt_compress(data)


class DenseFp8Tensor(torch.Tensor):
    @classmethod
    def from_hp(
        cls,
        hp_tensor: torch.Tensor,
        float8_dtype: torch.dtype = torch.float8_e4m3fn,
    ):
        assert hp_tensor.ndim == 2, "2-D only"
        scale = hp_tensor.abs().max() / 448.0
        return quantize_affine_float8(hp_tensor, scale, float8_dtype)
'''


INT4_TENSOR = '''\
import torch


def quantize_rows_fp8(x):
    scale = x.abs().amax(dim=-1, keepdim=True) / 448.0
    return (x / scale).to(torch.float8_e4m3fn), scale


class Int4Tensor(torch.Tensor):
    @classmethod
    def from_hp(cls, w, block_size, activation_dtype=torch.bfloat16):
        if activation_dtype == torch.float8_e4m3fn:
            w8, s = quantize_rows_fp8(w)
            return w8, s
        return w, None
'''


API = '''\
import torch

from pkg.quant.int4_tensor import Int4Tensor


def int4_transform(module):
    new_weight = Int4Tensor.from_hp(
        module.weight,
        [1, 128],
        activation_dtype=torch.float8_e4m3fn,
    )
    module.weight = torch.nn.Parameter(new_weight, requires_grad=False)
    return module
'''


API_MM = '''\
import torch

from pkg.quant.int4_tensor import Int4Tensor


def int4_linear(module, x):
    w = Int4Tensor.from_hp(module.weight, [1, 128], activation_dtype=torch.float8_e4m3fn)
    return torch._scaled_mm(x, w[0], w[1], w[1], out_dtype=torch.bfloat16)
'''


API_LOCAL = '''\
import torch


def local_transform(module, cast):
    new_weight = cast(
        module.weight,
        activation_dtype=torch.float8_e4m3fn,
    )
    module.weight = torch.nn.Parameter(new_weight, requires_grad=False)
    return module
'''


PLAIN_TENSOR = '''\
import torch


class PlainTensor(torch.Tensor):
    @classmethod
    def from_hp(cls, w, activation_dtype=None):
        return w.to(torch.bfloat16)
'''


API_PLAIN = '''\
import torch

from pkg.quant.plain_tensor import PlainTensor


def plain_transform(module):
    module.weight = torch.nn.Parameter(
        PlainTensor.from_hp(module.weight, activation_dtype=torch.float8_e4m3fn), requires_grad=False)
    return module
'''


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    files = {"pkg/__init__.py": "", "pkg/kernels/__init__.py": "", "pkg/quant/__init__.py": "",
             "pkg/utils.py": UTILS, "pkg/kernels/rowwise.py": ROWWISE, "pkg/kernels/rowwise_mm.py": ROWWISE_MM,
             "pkg/kernels/blockwise.py": BLOCKWISE, "pkg/kernels/blockwise_kept.py": BLOCKWISE_KEPT,
             "pkg/kernels/plain.py": PLAIN, "pkg/kernels/patcher.py": PATCHER,
             "pkg/importing.py": IMPORTING, "pkg/quant/primitives.py": PRIMITIVES, "pkg/quant/sparse.py": SPARSE,
             "pkg/quant/int4_tensor.py": INT4_TENSOR, "pkg/quant/api.py": API, "pkg/quant/api_mm.py": API_MM,
             "pkg/quant/api_local.py": API_LOCAL, "pkg/quant/plain_tensor.py": PLAIN_TENSOR,
             "pkg/quant/api_plain.py": API_PLAIN}
    return migrate_json(write_project(tmp_path_factory.mktemp("h91"), files))


# ------------------------------------------------------------------ BG#39: FP8 in a Triton-availability block
def test_fp8_defaults_inside_a_triton_availability_block_fold_into_the_triton_info(report):
    # (the block's torch reference, which launches no kernel and casts with a helper, stays FP8 compute)
    fp8 = findings_at(report, "pkg/kernels/rowwise.py", "NPU913")
    assert list(fp8) == [34] and fp8[34]["severity"] == "error"
    triton = findings_at(report, "pkg/kernels/rowwise.py", "NPU910")
    assert list(triton) == [7]
    finding = triton[7]
    assert finding["severity"] == "info"
    assert fp8shapes21.TRITON_BLOCK in finding["message"]
    assert "`torch.float8_e4m3fn`" in finding["message"] and "18" in finding["message"].rsplit("also at", 1)[1]


def test_a_scaled_matmul_inside_the_block_stays_fp8_compute(report):
    fp8 = findings_at(report, "pkg/kernels/rowwise_mm.py", "NPU913")
    assert list(fp8) == [19]
    assert fp8[19]["severity"] == "error" and "`torch._scaled_mm`" in fp8[19]["message"]
    assert "line 14" in fp8[19]["message"]  # (the default that function casts with stays with it)
    assert fp8shapes21.TRITON_BLOCK not in findings_at(report, "pkg/kernels/rowwise_mm.py", "NPU910")[7]["message"]


# ------------------------------------------------------------------ BG#20: a builder's availability guard
def test_kernels_behind_a_builders_availability_guard_are_info_with_the_fp8_they_are_fed(report):
    assert findings_at(report, "pkg/kernels/blockwise.py", "NPU913") == {}
    triton = findings_at(report, "pkg/kernels/blockwise.py", "NPU910")
    assert list(triton) == [32]
    message = triton[32]["message"]
    assert triton[32]["severity"] == "info"
    assert "at the top of `_build_impls` (line 26: `if not has_triton(): return _Impls(False, None)`)" in message
    assert "that only feeds this module's Triton kernels" in message
    assert "also at lines 29, 30, 44, 48" in message


def test_fp8_also_handed_to_another_call_stays_beside_the_guarded_kernels(report):
    triton = findings_at(report, "pkg/kernels/blockwise_kept.py", "NPU910")
    assert [f["severity"] for f in triton.values()] == ["info"]
    fp8 = findings_at(report, "pkg/kernels/blockwise_kept.py", "NPU913")
    assert list(fp8) == [29] and fp8[29]["severity"] == "error"


def test_a_builder_without_an_availability_guard_keeps_its_errors(report):
    triton = findings_at(report, "pkg/kernels/plain.py", "NPU910")
    assert [f["severity"] for f in triton.values()] == ["error"]
    assert [f["severity"] for f in findings_at(report, "pkg/kernels/plain.py", "NPU913").values()] == ["error"]


def test_a_guarded_function_that_builds_no_kernel_keeps_its_error(report):
    # (it imports Triton internals, `PTXASError`, that Triton-Ascend need not have: no kernels to verify)
    triton = findings_at(report, "pkg/kernels/patcher.py", "NPU910")
    assert [f["severity"] for f in triton.values()] == ["error"]
    assert all("at the top of" not in f["message"] for f in triton.values())


# ------------------------------------------------------------------ BF#24: a default of a function left at once
def test_fp8_default_of_a_function_left_after_a_false_assert_is_a_named_scope(report):
    scopes = scopes_at(report, "pkg/quant/sparse.py", "NPU913")
    assert 12 in scopes and 18 in scopes
    assert "after `assert is_rocm_gpu()`, which leaves the function there" in scopes[12]
    fp8 = findings_at(report, "pkg/quant/sparse.py", "NPU913")
    assert list(fp8) == [27]  # (the same default in a function an NPU host runs stays)
    assert fp8[27]["severity"] == "error"
    assert "(a cast to FP8)" not in fp8[27]["message"]


def test_renamed_drops_a_cast_helpers_label_once_a_dtype_is_named():
    message = "FP8 compute: `quantize_affine_float8(...)` (a cast to FP8) (also at line 27)"
    assert renamed(message, "quantize_affine_float8(x, s, d)", "torch.float8_e4m3fn") == \
        "FP8 compute: `torch.float8_e4m3fn` (also at line 27)"
    # (another call named instead keeps the label: it is a cast as well)
    assert renamed(message, "quantize_affine_float8(x, s, d)", "other_quant_fp8(x)") == \
        "FP8 compute: `other_quant_fp8(...)` (a cast to FP8) (also at line 27)"


# ------------------------------------------------------------------ BH#36: a selector given to another module
def test_fp8_selector_given_to_another_modules_fp8_code_names_a_dtype_only(report):
    assert findings_at(report, "pkg/quant/api.py", "NPU913") == {}
    scope = scopes_at(report, "pkg/quant/api.py", "NPU913")[10]
    assert scope.startswith("no port work on an NPU host (NPU913): names FP8 dtypes only: "
                            "`activation_dtype=torch.float8_e4m3fn` selects the FP8 path of `Int4Tensor.from_hp` "
                            "(pkg/quant/int4_tensor.py:6), whose FP8 compute is reported there")
    assert [f["severity"] for f in findings_at(report, "pkg/quant/int4_tensor.py", "NPU913").values()] == ["error"]


@pytest.mark.parametrize("path, line", [
    ("pkg/quant/api_mm.py", 8),  # (a scaled matmul of its own)
    ("pkg/quant/api_local.py", 7),  # (a callee that is a parameter)
    ("pkg/quant/api_plain.py", 8),  # (a callee whose code computes nothing in FP8)
])
def test_fp8_selectors_that_stay_fp8_compute(report, path, line):
    fp8 = findings_at(report, path, "NPU913")
    assert list(fp8) == [line] and fp8[line]["severity"] == "error"
