"""Issue #16, precision on real projects: Triton and FP8 findings (NPU910, NPU913).

Shapes found false or redundant by the audit of the ecosystem check, each reproduced with a small
fixture next to a true case that must still be reported (npu_migrate/kernels.py, sweep.py):
- a module that imports triton for its host helpers only (`triton.cdiv`, `triton.next_power_of_2`,
  `triton.__version__`, `tl.float32`, `triton.testing.do_bench`) and defines no kernel: no finding,
  a skipped scope that names the helpers (Triton-Ascend provides them); a module with a
  `@triton.jit` kernel, or one that queries Triton's driver, stays an error;
- `triton.testing.do_bench_cudagraph`: the finding anchors on it and names it (an error);
- FP8 dtypes only named (a config class's dtype defaults, a table keyed by an enum's numbers, a
  byte view while loading weights, a module-level descriptor `qfloat(torch.float8_e4m3fn)`): a
  named "no port work" scope (moot.NO_WORK), not a finding;
- a file that casts through a helper (`hp_tensor_to_float8_dynamic(...)`) computes in FP8: error,
  anchored on the call; a cast `.to(torch.float8_e4m3fn)` stays an error;
- the file's FP8 finding anchors on its scaled matmul (`torch._scaled_grouped_mm`), the earlier
  quantisation listed in `also`.
"""

from __future__ import annotations

from pathlib import Path

from .precision_helpers import migrate_json, write_project


def _migrate(tmp_path: Path, files: dict[str, str]) -> list[dict]:
    report = migrate_json(write_project(tmp_path, files, dedent=True))
    _LAST_SKIPPED[:] = report["skipped"]
    return report["findings"]


_LAST_SKIPPED: list[dict] = []  # the `skipped` list of the last _migrate run


def _scopes(path: str) -> list[dict]:
    """The last run's skipped scopes in `path`."""
    return [s for s in _LAST_SKIPPED if s["path"] == path and "start_line" in s]


def _one(findings: list[dict], path: str, code: str) -> dict:
    found = [f for f in findings if f["path"] == path and f["code"] == code]
    assert len(found) == 1, found
    return found[0]


def _none(findings: list[dict], path: str, code: str) -> None:
    assert not [f for f in findings if f["path"] == path and f["code"] == code]


def _names_only(findings: list[dict], path: str) -> dict:
    """A file that only names FP8 dtypes: no NPU913 finding, a named "no port work" scope
    (moot.NO_WORK); the scope."""
    _none(findings, path, "NPU913")
    found = [s for s in _scopes(path) if s["reason"].startswith("no port work on an NPU host (NPU913): names FP8 dtypes only")]
    assert len(found) == 1, _scopes(path)
    return found[0]


# ---------------------------------------------------------------------------- Triton (NPU910)

HOST_HELPERS = '''\
import torch
import triton
import triton.language as tl


def chunk_count(lens, size):
    return triton.cdiv(lens, size)


def block_and_type(n):
    return triton.next_power_of_2(n), tl.float32


OLD_TRITON = triton.__version__ < "3.0"
'''

KERNEL = '''\
import torch
import triton
import triton.language as tl


@triton.jit
def copy_kernel(src, dst, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(dst + offs, tl.load(src + offs, mask=offs < n), mask=offs < n)


def copy(src, dst):
    copy_kernel[(triton.cdiv(src.numel(), 128),)](src, dst, src.numel(), BLOCK=128)
'''

DRIVER_QUERY = '''\
import triton


def cores():
    return triton.runtime.driver.active.utils.get_device_properties(0)["multiprocessor_count"]
'''


def test_triton_host_helpers_only_is_info_a_kernel_stays_an_error(tmp_path):
    findings = _migrate(tmp_path, {"pkg/index.py": HOST_HELPERS, "pkg/kernel.py": KERNEL,
                                   "pkg/driver.py": DRIVER_QUERY})
    _none(findings, "pkg/index.py", "NPU910")  # left as written, named as a skipped scope:
    (scope,) = _scopes("pkg/index.py")
    assert (scope["start_line"], scope["end_line"]) == (2, 3)
    assert scope["reason"].startswith("runs on an NPU host as written (NPU910): uses only Triton's host helpers")
    assert "`triton.cdiv`" in scope["reason"] and "`triton.next_power_of_2`" in scope["reason"]
    kernel = _one(findings, "pkg/kernel.py", "NPU910")
    assert kernel["severity"] == "error"
    assert any(a[0] == 6 for a in kernel["also"])  # the `@triton.jit` kernel
    # a driver query is not a host helper Triton-Ascend answers the same way
    assert _one(findings, "pkg/driver.py", "NPU910")["severity"] == "error"


BENCH_CUDAGRAPH = '''\
import torch
import triton.testing


def bench(fn):
    return triton.testing.do_bench_cudagraph(fn)
'''

BENCH = '''\
import torch
from triton.testing import do_bench


def bench(fn):
    return do_bench(fn)
'''


def test_do_bench_cudagraph_is_named_do_bench_is_not_an_error(tmp_path):
    findings = _migrate(tmp_path, {"bench/graphs.py": BENCH_CUDAGRAPH, "bench/plain.py": BENCH})
    graphs = _one(findings, "bench/graphs.py", "NPU910")
    assert graphs["severity"] == "error" and graphs["line"] == 6
    assert "do_bench_cudagraph" in graphs["message"]
    assert [a[0] for a in graphs["also"]] == [2]
    _none(findings, "bench/plain.py", "NPU910")
    assert "`triton.testing.do_bench`" in _scopes("bench/plain.py")[0]["reason"]


# ---------------------------------------------------------------------------- FP8 (NPU913)

CONFIG = '''\
from dataclasses import dataclass

import torch


@dataclass
class TypeConfig:
    e4m3_dtype = torch.float8_e4m3fn
    e5m2_dtype: torch.dtype = torch.float8_e5m2


SCALAR_TYPES = {24: torch.float8_e4m3fn, 23: torch.float8_e5m2}
'''

CAST = '''\
import torch


def quantize(x, scale):
    return (x / scale).to(torch.float8_e4m3fn)
'''


MODULE_ATTRIBUTE = '''\
import torch


class Fp8Linear(torch.nn.Module):
    fp8_dtype = torch.float8_e4m3fn

    def forward(self, x):
        return x.to(self.fp8_dtype)
'''


def test_fp8_config_defaults_are_info_a_cast_stays_an_error(tmp_path):
    findings = _migrate(tmp_path, {"pkg/config.py": CONFIG, "pkg/cast.py": CAST, "pkg/linear.py": MODULE_ATTRIBUTE})
    _names_only(findings, "pkg/config.py")  # (a named "no port work" scope, not a finding)
    assert _one(findings, "pkg/cast.py", "NPU913")["severity"] == "error"
    # a module's class attribute (not a config class's default) is what it casts to: still an error
    assert _one(findings, "pkg/linear.py", "NPU913")["severity"] == "error"


LOADER = '''\
import torch


def unpack(packed):
    return packed.to(torch.uint8).view(torch.float8_e4m3fn)
'''

QTYPES = '''\
import torch


def qfloat(dtype):
    return dtype, torch.finfo(dtype).max


qfloat8_e4m3fn = qfloat(torch.float8_e4m3fn)
'''


def test_fp8_byte_view_and_descriptor_are_info(tmp_path):
    findings = _migrate(tmp_path, {"pkg/loader.py": LOADER, "pkg/qtype.py": QTYPES, "pkg/cast.py": CAST})
    _names_only(findings, "pkg/loader.py")
    _names_only(findings, "pkg/qtype.py")
    assert _one(findings, "pkg/cast.py", "NPU913")["severity"] == "error"


TENSOR_PARALLEL = '''\
import torch

from pkg.utils import hp_tensor_to_float8_dynamic


class PrepareInput:
    def __init__(self, float8_dtype=torch.float8_e4m3fn):
        self.float8_dtype = float8_dtype

    def prepare(self, x, config):
        return hp_tensor_to_float8_dynamic(x, self.float8_dtype, config)
'''

DEFAULT_ONLY = '''\
import torch


class Options:
    def __init__(self, float8_dtype=torch.float8_e4m3fn):
        self.float8_dtype = float8_dtype
'''


def test_fp8_cast_through_a_helper_is_an_error_anchored_on_the_call(tmp_path):
    findings = _migrate(tmp_path, {"pkg/tp.py": TENSOR_PARALLEL, "pkg/options.py": DEFAULT_ONLY})
    tp = _one(findings, "pkg/tp.py", "NPU913")
    assert tp["severity"] == "error" and tp["line"] == 11
    assert "hp_tensor_to_float8_dynamic" in tp["message"] and "names FP8 dtypes only" not in tp["message"]
    assert [a[0] for a in tp["also"]] == [7]
    _names_only(findings, "pkg/options.py")


GROUPED = '''\
import torch


def quantize(x, block):
    return to_mx(x, elem_dtype=torch.float8_e4m3fn, block_size=block)


def grouped(a, b, sa, sb, offs):
    return torch._scaled_grouped_mm(a, b, sa, sb, offs=offs)
'''


def test_fp8_anchors_on_the_scaled_matmul(tmp_path):
    findings = _migrate(tmp_path, {"pkg/mm.py": GROUPED, "pkg/cast.py": CAST})
    mm = _one(findings, "pkg/mm.py", "NPU913")
    assert mm["severity"] == "error" and mm["line"] == 9 and "_scaled_grouped_mm" in mm["message"]
    assert [a[0] for a in mm["also"]] == [5]
    cast = _one(findings, "pkg/cast.py", "NPU913")
    assert cast["line"] == 5 and cast["severity"] == "error"


WARMUP_TEST = '''\
import torch
from unittest import mock


def test_warmup():
    weight = torch.empty((256, 128), dtype=torch.float8_e4m3fn)
    with mock.patch("pkg.kernels.fp8_gemm") as gemm:
        run(weight)
    assert gemm.called
'''

GEMM_TEST = '''\
import torch


def test_gemm():
    weight = torch.empty((256, 128), dtype=torch.float8_e4m3fn, device="cuda")
    assert weight.shape
'''


def test_fp8_cpu_tensor_in_a_test_is_info_on_the_device_stays_an_error(tmp_path):
    findings = _migrate(tmp_path, {"tests/test_warmup.py": WARMUP_TEST, "tests/test_gemm.py": GEMM_TEST})
    _names_only(findings, "tests/test_warmup.py")
    assert _one(findings, "tests/test_gemm.py", "NPU913")["severity"] == "error"


VIEW_FOR_EXTENSION = '''\
import torch


def run(x, scales):
    from flashinfer import fp4_moe

    sf = scales.view(torch.float8_e4m3fn)
    return fp4_moe(x, sf)


def other(w):
    return w.view(torch.float8_e4m3fn)
'''


def test_fp8_view_in_a_function_with_a_compiled_extension_is_folded_into_it(tmp_path):
    findings = _migrate(tmp_path, {"pkg/moe.py": VIEW_FOR_EXTENSION})
    assert _one(findings, "pkg/moe.py", "NPU911")["line"] == 5
    # the view in a function with no extension stays listed: a "no port work" scope (names only)
    assert _names_only(findings, "pkg/moe.py")["start_line"] == 12
    (scope,) = [s for s in _scopes("pkg/moe.py") if "NPU913" in s["reason"] and "NPU911" in s["reason"]]
    assert scope["start_line"] == 7 and "NPU911 at line 5" in scope["reason"]


OWN_HELPER = '''\
import torch

from pkg.oracle import make_fp8_moe_quant_config


def _dequantize_fp8_entry(raw):
    return raw.view(torch.float8_e4m3fn)


def reference(cache):
    config = make_fp8_moe_quant_config(scale=1.0)
    return _dequantize_fp8_entry(cache), config
'''

BRANCH = '''\
import torch


def scales(raw):
    if torch.version.hip:
        return raw.view(torch.float8_e4m3fnuz)
    return raw
'''


def test_fp8_own_helpers_config_factories_and_untaken_branches_do_not_make_errors(tmp_path):
    findings = _migrate(tmp_path, {"pkg/ref.py": OWN_HELPER, "pkg/branch.py": BRANCH, "pkg/tp.py": TENSOR_PARALLEL})
    # the helper's body is a byte view, read by the sweep; a config's factory casts nothing
    _names_only(findings, "pkg/ref.py")
    # a name listed in a branch an NPU host never takes is named as a skipped scope, not listed
    _none(findings, "pkg/branch.py", "NPU913")
    assert any("NPU913" in s["reason"] for s in _scopes("pkg/branch.py"))
    assert _one(findings, "pkg/tp.py", "NPU913")["severity"] == "error"  # an imported cast helper
