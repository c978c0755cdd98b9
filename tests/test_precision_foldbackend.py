"""Issue #16, round-12 audits: findings redundant with a failing CUDA-only import already reported
in the same file (npu_migrate/foldbackend.py): FP8 reached only after a function's unconditional
flashinfer import, or only passed into a call that runs one, joins that import's finding; the same
flash-attn import twice in one class is one finding, the probe's occurrence joining the real one."""

from __future__ import annotations

from pathlib import Path

from .precision_helpers import migrate_json, write_project

MOE = """\
import torch


def align_weights(layer):
    from flashinfer import shuffle_matrix_a

    w = shuffle_matrix_a(layer.w13)
    layer.w13 = w.to(torch.float8_e4m3fn)


def own_quant(x):
    return x.to(torch.float8_e4m3fn)


def guarded(x):
    if x.is_big:
        from flashinfer import other_op
        return other_op(x)
    return x.to(torch.float8_e4m3fn)
"""


def _report_only(report: dict, path: str) -> list[dict]:
    return [f for f in report["findings"] if not f["fixable"] and f["path"] == path]


def _lines(finding: dict) -> set[int]:
    return {finding["line"], *(a[0] for a in finding.get("also", []))}


def test_fp8_after_a_failing_function_import_joins_it_and_own_fp8_stays(tmp_path: Path) -> None:
    report = migrate_json(write_project(tmp_path, {"pkg/moe.py": MOE}))
    found = _report_only(report, "pkg/moe.py")
    imports = [f for f in found if f["code"] == "NPU911"]
    assert imports and 8 in set().union(*(_lines(f) for f in imports))  # (the FP8 view, listed there)
    assert any("only passed into, this CUDA-only package's import" in f["message"] for f in imports)
    fp8 = [f for f in found if f["code"] == "NPU913"]
    fp8_lines = set().union(*(_lines(f) for f in fp8)) if fp8 else set()
    assert 8 not in fp8_lines
    # the file's own FP8 compute, and FP8 behind a conditional import, stay findings of their own
    assert {12, 19} <= fp8_lines
    assert all(f["severity"] == "error" for f in fp8)


STATE = """\
import torch


class _State:
    def __init__(self, device, kv_dtype):
        from flashinfer.mla import Wrapper

        self.wrapper = Wrapper(device, kv_dtype)


class Builder:
    def __init__(self, device, spec):
        kv_dtype = torch.float8_e4m3fn if spec.dtype == torch.uint8 else spec.dtype
        self.state = _State(device, kv_dtype)

    def scales(self, device):
        scale = torch.zeros(4, dtype=torch.float8_e4m3fn, device=device)
        self.keep = scale
        return _State(device, scale)
"""


def test_fp8_only_passed_to_a_failing_class_joins_its_import(tmp_path: Path) -> None:
    report = migrate_json(write_project(tmp_path, {"pkg/state.py": STATE}))
    found = _report_only(report, "pkg/state.py")
    imports = [f for f in found if f["code"] == "NPU911"]
    assert len(imports) == 1 and 13 in _lines(imports[0])
    fp8 = [f for f in found if f["code"] == "NPU913"]
    # line 17: the value is also stored on the object, not only passed to the failing class
    assert fp8 and 13 not in set().union(*(_lines(f) for f in fp8)) and 17 in set().union(*(_lines(f) for f in fp8))


LOADER = """\
import torch


class DaoExtension:
    def is_available(self) -> bool:
        try:
            import torch

            from flash_attn import flash_attn_func  # noqa
            from flash_attn.bert_padding import index_first_axis, pad_input  # noqa
            ok = torch.cuda.is_available()
        except:
            ok = False
        return ok

    def load(self):
        from flash_attn import flash_attn_func
        from flash_attn.bert_padding import index_first_axis, pad_input
        return flash_attn_func, index_first_axis, pad_input


class Other:
    def load(self):
        from flash_attn.bert_padding import unpad_input
        return unpad_input
"""


def test_same_import_twice_in_a_class_is_one_finding_at_the_real_one(tmp_path: Path) -> None:
    report = migrate_json(write_project(tmp_path, {"pkg/loader.py": LOADER}))
    found = [f for f in _report_only(report, "pkg/loader.py") if f["code"] == "NPU502"]
    anchors = sorted(f["line"] for f in found)
    # one finding for the class, anchored at load()'s import, the probe's place listed in it
    assert 10 not in anchors and 18 in anchors
    kept = next(f for f in found if f["line"] == 18)
    assert 10 in _lines(kept) and "a probe's import" in kept["message"]
    # the other class's import stays a finding of its own
    assert 24 in anchors


TRITON_TEST = """\
import pytest
import torch

try:
    import triton
    import triton.language as tl

    HAVE_TRITON = True
except ImportError:
    HAVE_TRITON = False

pytestmark = pytest.mark.skipif(not (torch.cuda.is_available() and HAVE_TRITON), reason="needs Triton")

if HAVE_TRITON:

    @triton.jit
    def _double(x_ptr, n, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        tl.store(x_ptr + offs, tl.load(x_ptr + offs) * 2, mask=offs < n)


def test_double():
    x = torch.ones(8, device="cuda")
    _double[(1,)](x, 8, BLOCK=8)
"""

TRITON_UNSKIPPED = TRITON_TEST.replace("pytestmark = ", "marks = ")


def test_triton_test_module_skipped_without_triton_is_info_to_verify(tmp_path: Path) -> None:
    report = migrate_json(write_project(tmp_path, {"tests/test_kernel.py": TRITON_TEST,
                                                   "tests/test_other.py": TRITON_UNSKIPPED}))
    skipped = [f for f in _report_only(report, "tests/test_kernel.py") if f["code"] == "NPU910"]
    assert skipped and all(f["severity"] == "info" and "verify them there" in f["message"] for f in skipped)
    # without the module's skip mark, the kernels stay an error
    kept = [f for f in _report_only(report, "tests/test_other.py") if f["code"] == "NPU910"]
    assert kept and any(f["severity"] == "error" for f in kept)


SPARSE = """\
import torch

KERNELS_OK = True
try:
    import spas_sage_attn._fused as fused
except ImportError:
    KERNELS_OK = False


class SparseImpl:
    def __init__(self, heads):
        assert KERNELS_OK, "install spas_sage_attn"
        self.heads = heads

    def forward(self, v):
        v_fp8 = torch.empty(v.shape, dtype=torch.float8_e4m3fn, device=v.device)
        fused.scale_fuse_quant_cuda(v, v_fp8)
        return v_fp8


class DenseImpl:
    def forward(self, v):
        return v.to(torch.float8_e4m3fn)
"""


def test_fp8_in_a_class_that_asserts_its_cuda_only_package_is_a_skipped_scope(tmp_path: Path) -> None:
    report = migrate_json(write_project(tmp_path, {"pkg/sparse.py": SPARSE}))
    found = _report_only(report, "pkg/sparse.py")
    lines = set().union(*(_lines(f) for f in found if f["code"] == "NPU913"))
    assert 16 not in lines and 23 in lines  # (the other class computes in FP8 itself: still reported)
    scopes = [s for s in report["skipped"] if isinstance(s, dict) and s.get("start_line") == 16]
    assert scopes and "constructor requires a CUDA-only package" in scopes[0]["reason"]
    assert "spas_sage_attn" in scopes[0]["reason"]
