"""Issue #16, round-15 audits: Triton behind a module-level availability test, strings naming no device.

- a Triton import hub whose imports sit under `if TYPE_CHECKING or HAS_TRITON:` with placeholders in
  the `else:` and no kernel of its own (AN#9) is a named scope (samefile.PROBE_ONLY); the same
  imports unguarded stay an error;
- Triton kernels whose whole module body is under `if version_ok() and has_triton():` with raising
  stubs in the `else:` (AN#33) are info naming the guard and Triton-Ascend; the same kernels without
  the `else:` (or unguarded) stay an error, and so does a gated module with inline assembly;
- "nccl" as a prefix matched against a kernel-name column (AO#33) and "_flash_attention_forward" as
  the name of the attribute whose own `__name__` it is compared with (AP#36) are no finding; a
  process group's "nccl" backend, and an op's `__name__` compared with a CUDA op, stay reported.
- Triton kernels whose inline assembly is AMD GPU ISA, in a module whose selector returns False off
  ROCm (AN#8), are a named scope; PTX assembly, or no ROCm selector, stays an error.
- the "cuda" dispatch key of a custom op called only after a probe that evaluates to False where
  `torch.backends.cusparselt.is_available()` is False (AN#27) is a named scope; a probe that reads
  something else stays an info finding.
Each fixture is our own.
"""

from __future__ import annotations

from .precision_helpers import migrate_json, moot_lines, with_as_written, write_project

HUB = """\
from typing import TYPE_CHECKING

from mypkg.probe import HAS_TRITON, Placeholder

if TYPE_CHECKING or HAS_TRITON:
    import triton
    import triton.language as tl
else:
    triton = Placeholder()
    tl = Placeholder()
"""

HUB_UNGUARDED = """\
import triton
import triton.language as tl
"""

PROBE = """\
import importlib.util

HAS_TRITON = importlib.util.find_spec("triton") is not None


class Placeholder:
    pass
"""

GATED_KERNELS = """\
import torch
from torch.utils._triton import has_triton

from mypkg.version import version_ok

if version_ok() and has_triton():
    import triton
    import triton.language as tl

    @triton.jit
    def _scale_kernel(x_ptr, n, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        tl.store(x_ptr + offs, tl.load(x_ptr + offs, mask=offs < n) * 2, mask=offs < n)

    def scale(x):
        _scale_kernel[(1,)](x, x.numel(), BLOCK=1024)
        return x

else:

    def scale(x):
        raise NotImplementedError("scale needs triton")
"""

INLINE_ASM = GATED_KERNELS.replace(
    "tl.load(x_ptr + offs, mask=offs < n) * 2",
    'tl.inline_asm_elementwise("cvt.rn.f16.f32 $0, $1;", "=r,r", [tl.load(x_ptr + offs)], dtype=tl.int32,'
    " is_pure=True, pack=1)")

NO_ELSE = GATED_KERNELS.split("else:")[0]


def _triton(report: dict, path: str) -> list[dict]:
    return [f for f in report["findings"] if f["code"] == "NPU910" and f["path"] == path]


def test_triton_hub_behind_type_checking_or_flag_is_a_named_scope(tmp_path):
    root = write_project(tmp_path, {"mypkg/__init__.py": "", "mypkg/probe.py": PROBE,
                                    "mypkg/triton_utils.py": HUB, "mypkg/raw_utils.py": HUB_UNGUARDED})
    report = migrate_json(root)
    assert not _triton(report, "mypkg/triton_utils.py")
    scopes = [f for f in with_as_written(report) if f["path"] == "mypkg/triton_utils.py" and f["code"] == "NPU910"]
    assert scopes and all(f.get("scope") for f in scopes)
    assert "Triton-Ascend" in scopes[0]["message"] and "TYPE_CHECKING or HAS_TRITON" in scopes[0]["message"]
    raw = _triton(report, "mypkg/raw_utils.py")
    assert raw and all(f["severity"] == "error" for f in raw)


def test_kernels_behind_has_triton_with_stubs_are_info(tmp_path):
    root = write_project(tmp_path, {"mypkg/__init__.py": "", "mypkg/version.py": "def version_ok():\n    return True\n",
                                    "mypkg/gated.py": GATED_KERNELS, "mypkg/noelse.py": NO_ELSE,
                                    "mypkg/asm.py": INLINE_ASM})
    report = migrate_json(root)
    gated = _triton(report, "mypkg/gated.py")
    assert gated and all(f["severity"] == "info" for f in gated)
    assert all("has_triton()" in f["message"] and "Triton-Ascend" in f["message"] for f in gated)
    for path in ("mypkg/noelse.py", "mypkg/asm.py"):
        kept = _triton(report, path)
        assert kept and any(f["severity"] == "error" for f in kept), path


TRACE = """\
import pandas as pd


def split(events: pd.DataFrame):
    comm = events[events.name.str.startswith("nccl")]
    comp = events[~(events.name.str.startswith("nccl"))]
    return comm, comp


def is_comm(kernel_name: str) -> bool:
    return kernel_name.startswith("nccl")


def init(dist):
    dist.init_process_group(backend="nccl")
"""

PATCH = """\
import sys


def patch(new_forward):
    for name, module in list(sys.modules.items()):
        if getattr(module._flash_attention_forward, "__name__", "") == "_flash_attention_forward":
            module._flash_attention_forward = new_forward


def is_random(func, kwargs):
    if func.overloadpacket.__name__ == "_scaled_dot_product_flash_attention":
        return kwargs.get("dropout_p", 0) != 0
    return True
"""


def _strings(report: dict, path: str) -> dict[int, str]:
    out = {}
    for f in report["findings"]:
        if f["code"] == "NPU990" and f["path"] == path:
            for line in [f["line"], *(a[0] for a in f.get("also", []))]:
                out[line] = f["source"]
    return out


def test_nccl_prefix_of_a_kernel_name_is_no_finding(tmp_path):
    root = write_project(tmp_path, {"trace.py": TRACE})
    report = migrate_json(root)
    lines = {f["line"] for f in report["findings"] if f["path"] == "trace.py"}
    assert not {5, 6, 11} & set(_strings(report, "trace.py"))
    assert 15 in lines  # the process group's backend stays reported


def test_attribute_name_strings_are_no_finding(tmp_path):
    root = write_project(tmp_path, {"patch.py": PATCH})
    report = migrate_json(root)
    strings = _strings(report, "patch.py")
    assert 6 not in strings
    assert 11 in strings  # an op's name compared with the CUDA flash-attention op stays reported


RDNA = """\
import torch

from mypkg.platforms import current_platform
from mypkg.triton_utils import tl, triton


@triton.jit
def _pair_to_half2(x):
    mask = tl.full(x.shape, 0x000F000F, tl.int32)
    return tl.inline_asm_elementwise(
        asm="v_and_or_b32 $0, $1, $2, 0x64006400",
        constraints="=v,v,v",
        args=[x, mask],
        dtype=tl.uint32,
        is_pure=True,
        pack=1,
    )


class HybridKernel:
    @classmethod
    def can_implement(cls, config):
        if not current_platform.is_rocm():
            return False, "only targets ROCm"
        return True, None
"""


def test_triton_kernels_with_amd_assembly_selected_only_on_rocm_are_a_named_scope(tmp_path):
    ptx = RDNA.replace("v_and_or_b32 $0, $1, $2, 0x64006400", "lop3.b32 $0, $1, $2, 0x64006400, 0xea;")
    no_selector = RDNA.replace("if not current_platform.is_rocm():", "if config is None:")
    root = write_project(tmp_path, {"mypkg/__init__.py": "", "mypkg/platforms.py": "current_platform = None\n",
                                    "mypkg/triton_utils.py": "import triton\nimport triton.language as tl\n",
                                    "mypkg/rdna.py": RDNA, "mypkg/ptx.py": ptx, "mypkg/other.py": no_selector})
    report = migrate_json(root)
    assert not _triton(report, "mypkg/rdna.py")
    scopes = moot_lines(report["skipped"], "NPU910", "mypkg/rdna.py")
    assert 7 in scopes and "AMD GPU ISA" in scopes[7]
    for path in ("mypkg/ptx.py", "mypkg/other.py"):
        kept = _triton(report, path)
        assert kept and any(f["severity"] == "error" for f in kept), path


SPARSE_OP = """\
import torch


def _lib_version():
    if not torch.backends.cusparselt.is_available():
        return (0, 0, 0)
    version = torch.backends.cusparselt.version()
    return (version // 10000, (version // 100) % 100, version % 100)


_lib_ver = _lib_version()


def _has_sparselt() -> bool:
    available = _lib_ver >= (0, 5, 0)
    if not available:
        return False
    return PROBE_TAIL


@torch.library.custom_op("mypkg::_splt_mm", mutates_args=(), device_types=["cuda"])
def _splt_mm(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return torch._cslt_sparse_mm(a, b)


def sparse_mm(a, b):
    assert _has_sparselt()
    return torch.ops.mypkg._splt_mm(a, b)
"""


def test_custom_op_dispatch_key_behind_a_probe_false_on_npu_is_a_named_scope(tmp_path):
    root = write_project(tmp_path, {
        "sparse.py": SPARSE_OP.replace("PROBE_TAIL", "torch.cuda.get_device_capability() >= (8, 0)"),
        # the probe's first test reads the environment, not the library: it stays an info finding
        "other.py": SPARSE_OP.replace("available = _lib_ver >= (0, 5, 0)", "available = _env_flag()")
                             .replace("PROBE_TAIL", "True")})
    report = migrate_json(root)
    assert not [f for f in report["findings"] if f["path"] == "sparse.py" and f["code"] == "NPU990"]
    scopes = moot_lines(report["skipped"], "NPU990", "sparse.py")
    assert 21 in scopes and "cuSPARSELt" in scopes[21]
    kept = [f for f in report["findings"] if f["path"] == "other.py" and f["code"] == "NPU990"]
    assert kept and "availability probe `_has_sparselt()`" in kept[0]["message"]
