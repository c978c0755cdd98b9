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
