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
