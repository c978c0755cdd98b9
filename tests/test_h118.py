"""Precision wave 26, helper h118 (issue #16): the has_triton() note names Triton-Ascend as the
opt-in (BR#37, BR#21, tritonascend26.py), and FP8 only in functions launching Triton kernels with
inline assembly folds into the module's NPU910 (BL#16, asmfp826.py)."""

from __future__ import annotations

from .precision_helpers import migrate_json, write_project

from npu_migrate import fp8shapes21, guards15, tritonascend26, tritonguards


# ----------------------------------------------------------------------------- has_triton() wording
def test_has_triton_notes_name_triton_ascend_as_the_opt_in():
    # torch_npu 2.7.1: transfer_to_npu's _patch_has_triton returns False, _inductor/utils.py's
    # patch_has_triton counts "npu" once a `triton` package imports
    phrase = tritonascend26.HAS_TRITON_ON_NPU
    assert "Triton-Ascend is the opt-in" in phrase and "counts the NPU" in phrase
    assert "{" not in phrase and " (" not in phrase  # (no parenthetical: the notes sit in one)
    for note in (guards15.GATED_KERNELS, fp8shapes21.BUILDER, tritonguards.TRITON_GATED_IMPORTERS):
        assert phrase in note
    assert "transfer_to_npu forces it False" in guards15.GATED_KERNELS


BUILDER_MODULE = '''import torch
from torch.utils._triton import has_triton


def _build():
    if not has_triton():
        return None
    import triton
    import triton.language as tl

    @triton.jit
    def _add_kernel(x_ptr, n: tl.constexpr):
        pass

    return _add_kernel
'''

UNGUARDED_MODULE = '''import torch
import triton
import triton.language as tl


@triton.jit
def _add_kernel(x_ptr, n: tl.constexpr):
    pass


def add(x):
    _add_kernel[(1,)](x, x.numel())
    return x
'''


def test_builder_note_is_info_with_the_opt_in_and_an_unguarded_import_stays_an_error(tmp_path):
    root = write_project(tmp_path, {"pkg/__init__.py": "", "pkg/bsr.py": BUILDER_MODULE,
                                    "pkg/plain.py": UNGUARDED_MODULE})
    report = migrate_json(root)
    found = {f["path"]: f for f in report["findings"] if f["code"] == "NPU910" and not f["fixable"]}
    builder = found["pkg/bsr.py"]
    assert builder["severity"] == "info" and "Triton-Ascend is the opt-in" in builder["message"]
    # (the nearest true case: the same kernel imported unguarded stays an error, no opt-in note)
    assert found["pkg/plain.py"]["severity"] == "error"
    assert "Triton-Ascend is the opt-in" not in found["pkg/plain.py"]["message"]


# ----------------------------------------------------------------------------- FP8 around an asm kernel
HELPERS = '''import triton
import triton.language as tl


@triton.jit
def sync_threads():
    tl.inline_asm_elementwise("bar.sync 0;", "=r", [], dtype=tl.int32, is_pure=False, pack=1)


@triton.jit
def barrier(ptrs):
    sync_threads()


@triton.jit
def plain_helper(x):
    return x + 1
'''

COMMS = '''import torch
import torch.distributed._symmetric_memory as symm_mem
import triton
import triton.language as tl
from torch.distributed._functional_collectives import all_to_all_single

from pkg.helpers import {helper}
from pkg.mx import to_dtype, to_mx


class OnDeviceAllToAll(torch.autograd.Function):
    buf = None

    @staticmethod
    def forward(ctx, x, rows):
        scales, data = to_mx(x, elem_dtype=torch.float8_e4m3fn, block_size=32)
        if OnDeviceAllToAll.buf is None:
            OnDeviceAllToAll.buf = symm_mem.empty(rows, x.shape[1], dtype=torch.float8_e4m3fn, device=x.device)
        out = _all_to_all(data, OnDeviceAllToAll.buf)
        return to_dtype(out, scales, torch.bfloat16)


def _all_to_all(data, buf):
    _exchange_kernel[(4, 1, 1)](data, buf, data.numel())
    return buf


@triton.jit
def _exchange_kernel(src, dst, n: tl.constexpr):
    {helper}(src)


class NcclAllToAll(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        scales, data = to_mx(x, elem_dtype=torch.float8_e4m3fn, block_size=32)
        out = all_to_all_single(data, None, None, None)
        return to_dtype(out, scales, torch.bfloat16)
'''

MX = '''import torch


def to_mx(x, elem_dtype, block_size):
    return x.abs().amax(), x


def to_dtype(data, scales, dtype):
    return data.to(dtype) * scales
'''


def _comms(tmp_path, helper: str) -> dict:
    files = {"pkg/__init__.py": "", "pkg/helpers.py": HELPERS, "pkg/mx.py": MX,
             "pkg/comms.py": COMMS.replace("{helper}", helper)}
    return migrate_json(write_project(tmp_path, files))


def test_fp8_only_around_an_inline_asm_kernel_folds_into_the_modules_triton_error(tmp_path):
    # BL#16: to_mx(FP8) and a symm_mem FP8 buffer in a method launching, through a function of the
    # file, a kernel whose imported device helper holds inline assembly (two calls deep)
    report = _comms(tmp_path, "barrier")
    triton_error = next(f for f in report["findings"] if f["path"] == "pkg/comms.py" and f["code"] == "NPU910"
                        and not f["fixable"])
    assert triton_error["severity"] == "error"
    # (fp8storage26 runs first and names the FP8 buffer at line 16 as storage only these kernels
    # read; asmfp826 moves the to_mx line 18 in: the message shows `torch.float8_e4m3fn` once, so
    # no second "(with ...)" is added, and the assembly is named by the device-function fold)
    message = triton_error["message"]
    assert "`torch.float8_e4m3fn` (line 16): an FP8 storage that only feeds these Triton kernels" in message
    assert message.count("(also at") == 1 and "18" in message.rsplit("(also at", 1)[1]
    assert "inline assembly" in message and "runs under no Triton-Ascend" in message
    fp8 = [f for f in report["findings"] if f["path"] == "pkg/comms.py" and f["code"] == "NPU913"]
    # (the nearest true case: the sibling path through NCCL's all_to_all_single keeps its FP8 error)
    assert [f["line"] for f in fp8] == [36] and fp8[0]["severity"] == "error"
    assert "also at" not in fp8[0]["message"]


def test_fp8_around_a_kernel_without_inline_assembly_stays(tmp_path):
    # the kernel's helper is plain Triton: Triton-Ascend may run it, and the FP8 then runs on the NPU
    report = _comms(tmp_path, "plain_helper")
    triton_error = next(f for f in report["findings"] if f["path"] == "pkg/comms.py" and f["code"] == "NPU910"
                        and not f["fixable"])
    assert "runs under no Triton-Ascend: ported with them" not in triton_error["message"]
    fp8 = [f for f in report["findings"] if f["path"] == "pkg/comms.py" and f["code"] == "NPU913"]
    lines = {f["line"] for f in fp8} | {int(x) for f in fp8 for x in
                                         __import__("re").findall(r"\d+", f["message"].rsplit("(also at", 1)[-1])
                                         if "(also at" in f["message"]}
    # the FP8 computed by to_mx (line 18) stays reported: Triton-Ascend may run a plain kernel
    assert 18 in lines
    # the FP8 buffer (line 16) only these kernels read is named by their NPU910 (fp8storage26)
    assert 16 in lines or "(line 16): an FP8 storage that only feeds these Triton kernels" in triton_error["message"]


# ----------------------------------------------------------------------------- a backend every caller picks
DIST_UTILS = '''import torch


def init_dist_connection(env, torch_distributed_backend, **kwargs):
    torch.distributed.init_process_group(torch_distributed_backend, rank=env.rank, **kwargs)


def backend_for_device(device):
    device_backend_map = torch.distributed.Backend.default_device_backend_map
    if device.type in device_backend_map:
        return device_backend_map[device.type]
    return "gloo"
'''

STRATEGY = '''from typing import Optional

from pkg.dist_utils import backend_for_device, init_dist_connection


class Strategy:
    def __init__(self, env, process_group_backend: Optional[str] = None):
        self.env = env
        self._process_group_backend: Optional[str] = process_group_backend

    def setup_distributed(self):
        self._process_group_backend = self._get_process_group_backend()
        init_dist_connection(self.env, self._process_group_backend)

    def _get_process_group_backend(self):
        return self._process_group_backend or backend_for_device(self.root_device)
'''

OTHER_CALLER = '''from pkg.dist_utils import init_dist_connection


class Launcher:
    def __init__(self, env, backend):
        self.env = env
        self.backend = backend

    def launch(self):
        init_dist_connection(self.env, self.backend)
'''


def _backend_report(tmp_path, files: dict) -> dict:
    return migrate_json(write_project(tmp_path, {"pkg/__init__.py": "", "pkg/dist_utils.py": DIST_UTILS, **files}))


def test_backend_parameter_every_caller_picks_for_the_device_is_a_named_scope(tmp_path):
    # BT#34: init_process_group(param) in a helper; every caller passes self._process_group_backend,
    # the user's setting or else the device-to-backend map's pick (torch_npu registers npu: hccl)
    report = _backend_report(tmp_path, {"pkg/strategy.py": STRATEGY})
    assert not [f for f in report["findings"] if f["code"] == "NPU304"]
    reasons = [s["reason"] for s in report["skipped"] if s["path"] == "pkg/dist_utils.py"]
    assert any("a backend the code resolves to HCCL on an NPU host" in r and "pkg/strategy.py:13" in r
               and "`backend_for_device` (pkg/dist_utils.py:8)" in r for r in reasons)


def test_backend_parameter_with_a_caller_passing_an_unresolved_value_stays(tmp_path):
    # the nearest true case: another caller passes a constructor argument with no None default
    report = _backend_report(tmp_path, {"pkg/strategy.py": STRATEGY, "pkg/launcher.py": OTHER_CALLER})
    kept = [f for f in report["findings"] if f["code"] == "NPU304" and f["path"] == "pkg/dist_utils.py"]
    assert len(kept) == 1 and kept[0]["severity"] == "warning"
