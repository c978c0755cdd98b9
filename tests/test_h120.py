"""Round 26's redundant findings and folds (helper h120, issue #16): each false or redundant shape
paired with the nearest true case that must stay reported or rewritten."""

from __future__ import annotations

from .precision_helpers import migrate_json, write_project

LIB = '''import torch


class Store:
    def load(self, key, device):
        return torch.empty(2, device=torch.device(device))
'''

CPU_FAKE = '''from unittest.mock import patch

import torch

from mylib import Store


def test_cpu_fake():
    store = Store()
    allocate = torch.empty
    seen = []

    def allocate_on_cpu(*args, **kwargs):
        is_target = kwargs.get("device") == torch.device("cuda")
        kwargs.update(device="cpu")
        tensor = allocate(*args, **kwargs)
        if is_target:
            seen.append(tensor)
        return tensor

    with patch.object(torch, "empty", side_effect=allocate_on_cpu):
        store.load("key", "cuda")
    assert seen


def test_real_device():
    store = Store()
    out = store.load("key", "cuda")
    assert out.device == torch.device("cuda")


def test_spy():
    store = Store()
    calls = []

    def spy(*args, **kwargs):
        calls.append(kwargs.get("device") == torch.device("cuda"))
        return torch.zeros(*args, **kwargs)

    with patch.object(torch, "empty", side_effect=spy):
        store.load("key", "cuda")
    assert all(calls)
'''


def _findings(report, path):
    return {(f["line"], f["code"]): f for f in report["findings"] if f["path"] == path}


def test_cpu_fake_keeps_both_halves_of_the_device_alike(tmp_path):
    """BU#9: the comparison in a CPU fake of `torch.empty` and the "cuda" handed to the code under
    the fake are one label: both left as written (a named scope that says why), so the migrated test
    runs where the original did. A spy that allocates on the device it is given, and a test without
    a fake, keep their rewrites and their warning."""
    root = write_project(tmp_path, {"mylib.py": LIB, "tests/test_fake.py": CPU_FAKE})
    report = migrate_json(root)
    found = _findings(report, "tests/test_fake.py")
    assert (14, "NPU102") not in found  # the fake's comparison: kept
    assert (29, "NPU102") in found and found[(29, "NPU102")]["fixable"]  # a real device check: rewritten
    assert (37, "NPU102") in found  # the spy's comparison: rewritten
    warning = found[(28, "NPU990")]  # a "cuda" under no fake, and one under the spy (line 41): warned
    assert warning["severity"] == "warning" and "line 41" in warning["message"]
    assert all(line != 22 for line, _code in found)  # the fake's "cuda" argument: not a warning
    scopes = [s for s in report["skipped"] if s.get("path") == "tests/test_fake.py" and "start_line" in s]
    assert any(s["start_line"] <= 14 and 22 <= s["end_line"] and "CPU fake of torch" in s["reason"]
               and "runs as written on an NPU host" in s["reason"] for s in scopes), scopes


NCCL_BLOCK = '''import os


def pin_env(values):
    for key, value in values.items():
        os.environ.setdefault(key, value)


def override(use_alt):
    os.environ["CUBLAS_WORKSPACE_CONFIG"] = ":4096:8"
    if use_alt:
        os.environ["OTHER_FLAG"] = "0"
    else:
        # NCCL determinism settings
        os.environ["NCCL_LAUNCH_MODE"] = "GROUP"
        pin_env(
            {
                "NCCL_PROTO": "Simple",
                "NCCL_ALGO": "ring",
                "NCCL_MIN_NCHANNELS": "1",
            }
        )


def tune(fast):
    if fast:
        os.environ["NCCL_BUFFSIZE"] = "4194304"
    else:
        pin_env({"NCCL_PROTO": "Simple", "NCCL_ALGO": "tree"})
'''


def test_adjacent_nccl_settings_of_one_branch_are_one_finding(tmp_path):
    """BV#7: `os.environ["NCCL_LAUNCH_MODE"] = ...` directly before the branch's dict of NCCL
    determinism variables folds into the dict's finding, which names it and keeps the advice. A
    tuning variable set in the other branch of an `if` (another decision) stays its own finding."""
    report = migrate_json(write_project(tmp_path, {"det.py": NCCL_BLOCK}))
    found = {f["line"]: f for f in report["findings"] if f["code"] == "NPU602"}
    assert 15 not in found
    assert "`NCCL_LAUNCH_MODE` in the adjacent statement" in found[18]["message"]
    assert "HCCL_DETERMINISTIC" in found[18]["message"] and "15" in found[18]["message"]
    assert 27 in found and "NCCL_BUFFSIZE" in found[27]["message"]


KERNEL_ALIAS = '''import triton
import triton.language as tl

libdevice = tl.extra.cuda.libdevice


@triton.jit
def _maximum(x, y):
    return tl.maximum(x, y)


@triton.jit
def _exp_kernel(ptr, n):
    x = tl.load(ptr + tl.arange(0, 16))
    tl.store(ptr + tl.arange(0, 16), libdevice.exp(x))
'''

HOST_ALIAS = '''import triton
import triton.language as tl

fast_math = tl.extra.cuda.libdevice


@triton.jit
def _exp_kernel(ptr, n):
    x = tl.load(ptr + tl.arange(0, 16))
    tl.store(ptr + tl.arange(0, 16), fast_math.exp(x))


def has_fast_math():
    return hasattr(fast_math, "exp")
'''


def test_libdevice_alias_only_kernels_read_folds_into_their_finding(tmp_path):
    """BV#33: `libdevice = tl.extra.cuda.libdevice` read only inside the file's `@triton.jit`
    kernels is part of the kernels to port: it folds into their NPU910 finding, which names it and
    says the alias is read at import. Read by host code too, it stays a warning of its own."""
    report = migrate_json(write_project(tmp_path, {"kern.py": KERNEL_ALIAS, "mixed.py": HOST_ALIAS}))
    kern = _findings(report, "kern.py")
    assert (4, "NPU990") not in kern
    kernel = next(f for (line, code), f in kern.items() if code == "NPU910" and "tl.extra.cuda.libdevice" in f["message"])
    assert "read when the module is imported" in kernel["message"]
    mixed = _findings(report, "mixed.py")
    assert mixed[(4, "NPU990")]["severity"] == "warning"


KERNELS_MODULE = '''import torch
import triton
import triton.language as tl


@triton.jit
def _decode_kernel(q_ptr, kv_ptr, out_ptr, N: tl.constexpr):
    offs = tl.arange(0, N)
    q = tl.load(q_ptr + offs)
    kv = tl.load(kv_ptr + offs).to(tl.float32)
    tl.store(out_ptr + offs, q * kv)


def sparse_decode(q, kv_cache, out):
    _decode_kernel[(1,)](q, kv_cache, out, N=16)
    return out
'''

CACHE_DTYPE = '''import torch

from pkg.ops.attn_kernels import sparse_decode


class SparseBackend:
    def __init__(self, kv_cache_dtype: str = "auto"):
        self.use_fp8_kv = kv_cache_dtype.startswith("fp8")
        if "e5m2" in kv_cache_dtype:
            self.kv_cache_fp8_dtype = torch.float8_e5m2
        else:
            self.kv_cache_fp8_dtype = torch.bfloat16

    def forward(self, q, kv_cache, out):
        kv_cache = kv_cache.view(self.kv_cache_fp8_dtype) if self.use_fp8_kv else kv_cache
        sparse_decode(q, kv_cache, out)
        return out


class DenseBackend:
    def __init__(self, kv_cache_dtype: str = "auto"):
        self.use_fp8_kv = kv_cache_dtype.startswith("fp8")
        if "e5m2" in kv_cache_dtype:
            self.kv_cache_fp8_dtype = torch.float8_e5m2
        else:
            self.kv_cache_fp8_dtype = torch.bfloat16

    def forward(self, q, kv_cache, out):
        kv_cache = kv_cache.view(self.kv_cache_fp8_dtype) if self.use_fp8_kv else kv_cache
        sparse_decode(q, kv_cache, out)
        return torch.matmul(q, kv_cache)
'''

TABLE = '''import torch
import triton
import triton.language as tl
from torch import nn


@triton.jit
def _lookup_kernel(w_ptr, ids_ptr, out_ptr, N: tl.constexpr):
    offs = tl.arange(0, N)
    ids = tl.load(ids_ptr + offs)
    tl.store(out_ptr + offs, tl.load(w_ptr + ids).to(tl.float32))


def set_attrs(tensor, attrs):
    for key, value in attrs.items():
        setattr(tensor, key, value)


class Table(nn.Module):
    def __init__(self, rows, dim, offload=False):
        super().__init__()
        self.rows, self.dim, self.offload = rows, dim, offload
        weight = self._allocate()
        self.weight = nn.Parameter(weight, requires_grad=False)
        set_attrs(self.weight, {"loader": None})

    def _allocate(self):
        if self.offload:
            return torch.empty(self.rows, self.dim, dtype=torch.float8_e4m3fn, device="cpu", pin_memory=True)
        return torch.empty(self.rows, self.dim, dtype=torch.float8_e4m3fn)

    def _storage(self):
        return self.weight.data

    def lookup(self, ids, out):
        weight = self._storage()
        _lookup_kernel[(1,)](weight, ids, out, N=16)
        return out


class ScaledTable(nn.Module):
    def __init__(self, rows, dim):
        super().__init__()
        self.weight = nn.Parameter(torch.empty(rows, dim, dtype=torch.float8_e4m3fn), requires_grad=False)

    def lookup(self, ids, out):
        _lookup_kernel[(1,)](self.weight, ids, out, N=16)
        return out

    def project(self, x, scale):
        return torch._scaled_mm(x, self.weight.t(), scale_a=scale, scale_b=scale)
'''


def _fp8_project(tmp_path):
    return write_project(tmp_path, {"pkg/__init__.py": "", "pkg/ops/__init__.py": "",
                                    "pkg/ops/attn_kernels.py": KERNELS_MODULE, "pkg/attention.py": CACHE_DTYPE,
                                    "pkg/table.py": TABLE})


def _lines(report, path, code):
    out = set()
    for f in report["findings"]:
        if f["path"] == path and f["code"] == code and not f["fixable"]:
            out.add(f["line"])
            out.update(int(n) for n in __import__("re").findall(r"\b(\d+)\b", f["message"].split("(also at ")[-1])
                       if "(also at " in f["message"])
    return out


def test_fp8_storage_through_attributes_and_helpers_folds_into_the_kernels(tmp_path):
    """BU#22: an FP8 table allocated by a helper method, stored as `self.weight`, read back through
    `_storage()` and consumed only by the module's kernel launch (and an attribute-setting helper)
    folds into the kernels' NPU910, which names it. A class that also feeds the FP8 weight to
    `torch._scaled_mm` keeps its FP8 finding."""
    report = migrate_json(_fp8_project(tmp_path))
    fp8 = _lines(report, "pkg/table.py", "NPU913")
    assert not fp8 & {29, 30}, fp8
    assert 44 in fp8 and 51 in fp8
    kernel = next(f for f in report["findings"] if f["path"] == "pkg/table.py" and f["code"] == "NPU910")
    assert "`torch.float8_e4m3fn` (lines 29, 30): an FP8 storage that only feeds these Triton kernels" in kernel["message"]


def test_user_chosen_fp8_cache_dtype_feeding_another_modules_kernels_folds(tmp_path):
    """BU#28's shape: a KV-cache FP8 dtype kept on `self`, viewed in `forward` and passed only to
    another module's Triton wrapper, folds into that module's NPU910, which names the file and line.
    The same dtype also fed to `torch.matmul` stays an FP8 finding."""
    report = migrate_json(_fp8_project(tmp_path))
    fp8 = _lines(report, "pkg/attention.py", "NPU913")
    assert 10 not in fp8 and 24 in fp8
    kernel = next(f for f in report["findings"] if f["path"] == "pkg/ops/attn_kernels.py" and f["code"] == "NPU910")
    assert "`torch.float8_e5m2` in `../attention.py` (line 10)" in kernel["message"]
