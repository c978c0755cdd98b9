"""Wave 27's FP8 flows and folds (helper h126, issue #16): each false or redundant shape paired with
the nearest true case that must stay reported."""

from __future__ import annotations

from .precision_helpers import migrate_json, write_project

KERNELS = '''import torch
import triton
import triton.language as tl


@triton.jit
def _topk_kernel(k_ptr, out_ptr, n):
    i = tl.program_id(0)
    k = tl.load(k_ptr + i)
    if k.dtype.is_fp8():
        k = k.to(tl.float32)
    tl.store(out_ptr + i, k)


def index_topk(k_cache, out):
    _topk_kernel[(out.numel(),)](k_cache, out, out.numel())
    return out
'''

CACHE = '''import torch

from pkg.ops.kernels import index_topk


class IndexerCache(torch.nn.Module):
    def __init__(self, head_dim, indexer_kv_dtype="bf16"):
        super().__init__()
        if indexer_kv_dtype in ("fp8", "fp8_e4m3"):
            cache_dtype = torch.float8_e4m3fn
        elif indexer_kv_dtype == "bf16":
            cache_dtype = torch.bfloat16
        else:
            raise NotImplementedError(indexer_kv_dtype)
        self.dtype = cache_dtype
        self.head_dim = head_dim


class Indexer(torch.nn.Module):
    def forward(self, k_cache, out):
        return index_topk(k_cache, out)
'''


def _fp8(report, path):
    return [f for f in report["findings"] if f["code"] == "NPU913" and f["path"] == path]


def _kernel_note(report):
    return next(f for f in report["findings"] if f["code"] == "NPU910" and f["path"] == "pkg/ops/kernels.py")


def test_opt_in_fp8_dtype_folds_into_the_imported_kernels(tmp_path):
    root = write_project(tmp_path, {"pkg/__init__.py": "", "pkg/ops/__init__.py": "", "pkg/ops/kernels.py": KERNELS,
                                    "pkg/cache.py": CACHE})
    report = migrate_json(root)
    assert _fp8(report, "pkg/cache.py") == []
    note = _kernel_note(report)
    assert note["severity"] == "error"
    assert "`torch.float8_e4m3fn` in `../cache.py` (line 10)" in note["message"]
    assert "picked only when `indexer_kv_dtype` names an FP8 format" in note["message"]


def test_kv_cache_view_dtype_in_a_substring_test_folds(tmp_path):
    impl = '''import torch

from pkg.ops.kernels import index_topk


class Impl:
    def __init__(self, kv_cache_dtype):
        if "e5m2" in kv_cache_dtype:
            self.fp8_dtype = torch.float8_e5m2
        else:
            self.fp8_dtype = torch.bfloat16

    def forward(self, kv_cache, out):
        return index_topk(kv_cache.view(self.fp8_dtype), out)
'''
    sub = """from pkg.impl import Impl


class SubImpl(Impl):
    def forward(self, kv_cache, out):
        return kv_cache.view(self.fp8_dtype)
"""
    root = write_project(tmp_path, {"pkg/__init__.py": "", "pkg/ops/__init__.py": "", "pkg/ops/kernels.py": KERNELS,
                                    "pkg/impl.py": impl, "pkg/sub.py": sub})
    report = migrate_json(root)
    assert _fp8(report, "pkg/impl.py") == []
    assert "`torch.float8_e5m2` in `../impl.py` (line 9), picked only when `kv_cache_dtype`" in _kernel_note(report)["message"]


def test_fp8_in_the_else_branch_is_the_default_and_stays(tmp_path):
    cache = CACHE.replace('if indexer_kv_dtype in ("fp8", "fp8_e4m3"):\n            cache_dtype = torch.float8_e4m3fn\n'
                          '        elif indexer_kv_dtype == "bf16":\n            cache_dtype = torch.bfloat16\n'
                          '        else:\n            raise NotImplementedError(indexer_kv_dtype)\n',
                          'if indexer_kv_dtype == "bf16":\n            cache_dtype = torch.bfloat16\n'
                          '        else:\n            cache_dtype = torch.float8_e4m3fn\n')
    assert cache != CACHE
    root = write_project(tmp_path, {"pkg/__init__.py": "", "pkg/ops/__init__.py": "", "pkg/ops/kernels.py": KERNELS,
                                    "pkg/cache.py": cache})
    report = migrate_json(root)
    assert [f["severity"] for f in _fp8(report, "pkg/cache.py")] == ["error"]
    assert "cache.py" not in _kernel_note(report)["message"]


def test_opt_in_fp8_without_an_imported_kernel_module_stays(tmp_path):
    cache = CACHE.replace("from pkg.ops.kernels import index_topk\n", "").replace(
        "return index_topk(k_cache, out)", "return torch.matmul(k_cache.float(), out)")
    root = write_project(tmp_path, {"pkg/__init__.py": "", "pkg/ops/__init__.py": "", "pkg/ops/kernels.py": KERNELS,
                                    "pkg/cache.py": cache})
    report = migrate_json(root)
    assert [f["severity"] for f in _fp8(report, "pkg/cache.py")] == ["error"]


def test_a_tensor_dtype_test_is_not_a_setting(tmp_path):
    cache = CACHE.replace('if indexer_kv_dtype in ("fp8", "fp8_e4m3"):', 'if head_dim.dtype == "fp8":')
    root = write_project(tmp_path, {"pkg/__init__.py": "", "pkg/ops/__init__.py": "", "pkg/ops/kernels.py": KERNELS,
                                    "pkg/cache.py": cache})
    report = migrate_json(root)
    assert [f["severity"] for f in _fp8(report, "pkg/cache.py")] == ["error"]


TABLE = '''import torch
import triton
import triton.language as tl


@triton.jit
def _lookup_kernel(w_ptr, ids_ptr, out_ptr):
    i = tl.program_id(0)
    tl.store(out_ptr + i, tl.load(w_ptr + tl.load(ids_ptr + i)).to(tl.float32))


class FP8Table(torch.nn.Module):
    def __init__(self, rows, dim):
        super().__init__()
        self.weight = torch.nn.Parameter(self._allocate(rows, dim), requires_grad=False)

    def _allocate(self, rows, dim):
        return torch.empty(rows, dim, dtype=torch.float8_e4m3fn)

    def forward(self, ids, out):
        _lookup_kernel[(ids.numel(),)](self.weight, ids, out)
        return out
'''

TABLE_TEST = '''import torch

from pkg.table import FP8Table


def test_table_shape():
    layer = FP8Table(4, 8)
    assert layer.weight.shape == (4, 8)
    layer.weight.copy_(torch.randn(4, 8).to(layer.weight.dtype))
'''


def test_fp8_storage_read_only_by_a_test_elsewhere_still_folds(tmp_path):
    root = write_project(tmp_path, {"pkg/__init__.py": "", "pkg/table.py": TABLE, "tests/test_table.py": TABLE_TEST})
    report = migrate_json(root)
    assert _fp8(report, "pkg/table.py") == []
    note = next(f for f in report["findings"] if f["code"] == "NPU910" and f["path"] == "pkg/table.py")
    assert "an FP8 storage that only feeds these Triton kernels" in note["message"]


def test_fp8_storage_read_by_library_code_elsewhere_stays(tmp_path):
    user = TABLE_TEST.replace("def test_table_shape():", "def scaled_rows():").replace(
        "    assert layer.weight.shape == (4, 8)\n", "    return layer.weight.float() * 2\n")
    root = write_project(tmp_path, {"pkg/__init__.py": "", "pkg/table.py": TABLE, "pkg/user.py": user})
    report = migrate_json(root)
    assert [f["severity"] for f in _fp8(report, "pkg/table.py")] == ["error"]


HEADER = """\
#pragma once
#include "ext/{other}.cuh"

__device__ inline float {name}_twice(float x) {{ return 2.0f * x; }}
"""


def _header_project(tmp_path, extra: dict | None = None):
    from .test_h111 import CMAKE, KERNEL, SETUP, SOURCES

    files = {"setup.py": SETUP, "CMakeLists.txt": CMAKE}
    for name in SOURCES:
        files[f"csrc/{name}.cu"] = KERNEL.format(name=name.replace("/", "_"))
    files["csrc/alpha.cu"] = '#include "ext/a.cuh"\n' + files["csrc/alpha.cu"]
    files["csrc/ext/a.cuh"] = HEADER.format(name="a", other="b")
    files["csrc/ext/b.cuh"] = HEADER.format(name="b", other="c").replace('#include "ext/c.cuh"\n', "")
    files.update(extra or {})
    return write_project(tmp_path, files)


def _npu912(report):
    return {f["path"]: f for f in report["findings"] if f["code"] == "NPU912"}


def test_header_folder_only_one_targets_sources_include_folds_into_its_note(tmp_path):
    found = _npu912(migrate_json(_header_project(tmp_path)))
    assert not any(p.startswith("csrc/ext/") for p in found)
    kept = found["csrc/alpha.cu"]
    assert "the CMake target `_pkg_C`" in kept["message"]
    assert ("also the CUDA headers of `csrc/ext/` (a.cuh, b.cuh), included only through this target's sources: "
            "`csrc/alpha.cu`") in kept["message"]


def test_header_folder_a_cpu_source_also_includes_keeps_its_note(tmp_path):
    cpu = {"csrc/cpu/ops.cpp": '#include "../ext/b.cuh"\nint cpu_op() { return 0; }\n'}
    found = _npu912(migrate_json(_header_project(tmp_path, cpu)))
    notes = [p for p in found if p.startswith("csrc/ext/")]
    assert notes and found[notes[0]]["severity"] == "info"
    assert "csrc/ext/" not in found["csrc/alpha.cu"]["message"]


def test_header_folder_included_by_two_targets_keeps_its_note(tmp_path):
    from .test_h111 import KERNEL

    moe = {"csrc/moe_a.cu": '#include "ext/b.cuh"\n' + KERNEL.format(name="moe_a")}
    found = _npu912(migrate_json(_header_project(tmp_path, moe)))
    assert any(p.startswith("csrc/ext/") for p in found)


HELPERS = '''import torch


def to_fp8_per_group(x, offs, target_dtype: torch.dtype = torch.float8_e4m3fn):
    scale = x.abs().amax() / torch.finfo(target_dtype).max
    return (x / scale).to(target_dtype), scale
'''

SKIPPED_TEST = '''import pytest
import torch

from pkg.helpers import to_fp8_per_group

if torch.version.cuda is None:
    pytest.skip("CUDA kernels", allow_module_level=True)


def test_reference():
    out, scale = to_fp8_per_group(torch.ones(4), None)
    assert out.shape == (4,)
'''


def _helper_fp8(report):
    return [f for f in report["findings"] if f["code"] == "NPU913" and f["path"] == "pkg/helpers.py"]


def test_public_helper_only_skipped_tests_call_is_info_naming_them(tmp_path):
    root = write_project(tmp_path, {"pkg/__init__.py": "", "pkg/helpers.py": HELPERS,
                                    "tests/test_helpers.py": SKIPPED_TEST})
    found = _helper_fp8(migrate_json(root))
    assert found and all(f["severity"] == "info" for f in found)
    assert "in `to_fp8_per_group`, a public function of the library: nothing in the package calls it" in found[0]["message"]
    assert "tests/test_helpers.py:11" in found[0]["message"]


def test_public_helper_library_code_calls_stays_an_error(tmp_path):
    user = "import torch\n\nfrom pkg.helpers import to_fp8_per_group\n\n\ndef quantize(x):\n    return to_fp8_per_group(x, None)\n"
    root = write_project(tmp_path, {"pkg/__init__.py": "", "pkg/helpers.py": HELPERS, "pkg/user.py": user,
                                    "tests/test_helpers.py": SKIPPED_TEST})
    found = _helper_fp8(migrate_json(root))
    assert found and any(f["severity"] == "error" for f in found)


def test_public_helper_a_test_run_there_calls_is_not_decided_here(tmp_path):
    live = SKIPPED_TEST.replace('if torch.version.cuda is None:\n    pytest.skip("CUDA kernels", allow_module_level=True)\n', "")
    root = write_project(tmp_path, {"pkg/__init__.py": "", "pkg/helpers.py": HELPERS, "tests/test_helpers.py": live})
    found = _helper_fp8(migrate_json(root))
    assert not any("a public function of the library" in f["message"] for f in found)
