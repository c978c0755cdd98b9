"""Round 17 (issue #16): a CUDA-only import under a platform flag an NPU host answers False whose
other places were FP8 uses folded into it (flags16.unfold_fp8, audit AT#36, AT#32), and FP8 in the
wrapper of a CuTe-DSL kernel whose `cutlass` import is already reported (flags16.fold_cute_fp8,
audit AV#18)."""

from .precision_helpers import migrate_json, moot_lines, write_project

_PLATFORM = """\
import torch


def is_cuda():
    return torch.cuda.is_available() and torch.version.cuda
"""

_MODEL = """\
import torch
from torch import nn

from pkg.platform import is_cuda

_is_cuda = is_cuda()
_is_other = False

if {condition}:
    from sgl_kernel import bmm_fp8
elif _is_other:
    pass


def input_to_float8(x, dtype=torch.float8_e4m3fn):
    scale = x.abs().max()
    return (x / scale).to(dtype), scale


class Attention(nn.Module):
    def forward(self, q, w_kc, w_scale):
        if w_kc.dtype == torch.float8_e4m3fn:
            q_val, q_scale = input_to_float8(
                q.transpose(0, 1), torch.float8_e4m3fn
            )
            return bmm_fp8(q_val, w_kc, q_scale, w_scale, torch.bfloat16)
        return torch.bmm(q, w_kc)

    def project(self, x, w_vc, scale):
        if w_vc.dtype == torch.float8_e4m3fn:
            x_val = torch.ops.fp8_kernels.quantize(
                x, torch.float8_e4m3fn
            )
            return bmm_fp8(x_val, w_vc, scale, scale, torch.bfloat16)
        return torch.bmm(x, w_vc)
"""


def _open(report, path):
    return {(f["line"], f["code"], f["severity"]): f for f in report["findings"]
            if not f["fixable"] and f["path"] == path}


def _lines(finding):
    return {finding["line"], *(line for line, _c, _s in finding.get("also") or ())}


def test_an_import_under_a_false_flag_is_a_scope_and_its_fp8_uses_are_reported_once(tmp_path):
    """`if _is_cuda: from sgl_kernel import bmm_fp8` (`_is_cuda = is_cuda()`, the project's
    predicate false on an NPU host): the import is a named scope, no longer an NPU911 kept whole for
    the FP8 uses folded into it. The FP8 use inside the `input_to_float8(...)` call stays only in
    that call's NPU913; the one no other finding lists (line 32) comes back in the file's NPU913,
    never dropped."""
    root = write_project(tmp_path, {"pkg/__init__.py": "", "pkg/platform.py": _PLATFORM,
                                    "pkg/model.py": _MODEL.format(condition="_is_cuda")})
    report = migrate_json(root)
    found = _open(report, "pkg/model.py")
    assert not [k for k in found if k[1] == "NPU911"], found
    assert 10 in moot_lines(report["skipped"], "NPU911", "pkg/model.py")
    fp8 = found[(23, "NPU913", "error")]
    assert _lines(fp8) == {23, 32}, fp8
    assert "whose import an NPU host skips" in fp8["message"]


def test_an_import_under_a_flag_true_on_npu_stays_whole(tmp_path):
    """The same import under `not _is_cuda` (true on an NPU host: it runs there and fails) stays an
    NPU911 error."""
    root = write_project(tmp_path, {"pkg/__init__.py": "", "pkg/platform.py": _PLATFORM,
                                    "pkg/model.py": _MODEL.format(condition="not _is_cuda")})
    report = migrate_json(root)
    found = _open(report, "pkg/model.py")
    assert (10, "NPU911", "error") in found, found
    assert 10 not in moot_lines(report["skipped"], "NPU911", "pkg/model.py")


def test_fp8_uses_no_other_finding_lists_become_their_own_fp8_finding(tmp_path):
    """Without the FP8 helper (no other finding in the file), the FP8 uses folded into the import
    come back as one NPU913 error of their own, naming why they were with the import."""
    model = _MODEL.format(condition="_is_cuda").replace(
        "input_to_float8(\n                q.transpose(0, 1), torch.float8_e4m3fn\n            )",
        "torch.ops.fp8_kernels.quantize(\n                q, torch.float8_e4m3fn\n            )").replace(
        "def input_to_float8(x, dtype=torch.float8_e4m3fn):", "def input_to_float8(x, dtype=torch.bfloat16):")
    root = write_project(tmp_path, {"pkg/__init__.py": "", "pkg/platform.py": _PLATFORM, "pkg/model.py": model})
    report = migrate_json(root)
    found = _open(report, "pkg/model.py")
    assert not [k for k in found if k[1] == "NPU911"], found
    fp8 = [f for k, f in found.items() if k[1] == "NPU913"]
    assert len(fp8) == 1 and fp8[0]["severity"] == "error", found
    assert _lines(fp8[0]) == {24, 32}, fp8
    assert "`sgl_kernel`'s ops" in fp8[0]["message"]


_CUTE_MODULE = """\
import functools

import torch


@functools.lru_cache
def _compile_quantize(dtype_name, tile):
    import cutlass
    import cutlass.cute as cute

    @cute.kernel
    def kernel(src, dst):
        cute.copy(src, dst)

    return cute.compile(kernel, tile)


def quantize_cute(x, tile=128):
    out = torch.empty(x.shape, device=x.device, dtype=torch.float8_e4m3fn)
    compiled = _compile_quantize(str(x.dtype), tile)
    compiled(x, out)
    return out


def quantize_reference(x):
    scale = x.abs().amax()
    return (x / scale).to(torch.float8_e4m3fn), scale
"""


def test_fp8_in_a_cute_kernel_wrapper_folds_into_the_cutlass_import(tmp_path):
    """The FP8 output buffer of a function that launches the module's CuTe kernel (it calls
    `_compile_quantize`, which uses `cute.`) is part of the kernel's port, reported by the NPU911 of
    the `cutlass` import; the pure-torch reference's FP8 (no CuTe use) stays its own NPU913."""
    root = write_project(tmp_path, {"lib/__init__.py": "", "lib/cute_quant.py": _CUTE_MODULE})
    report = migrate_json(root)
    found = _open(report, "lib/cute_quant.py")
    cutlass = found[(8, "NPU911", "error")]
    assert 19 in _lines(cutlass) and "CuTe-DSL kernels" in cutlass["message"], cutlass
    fp8 = [f for k, f in found.items() if k[1] == "NPU913"]
    assert len(fp8) == 1 and _lines(fp8[0]) == {27} and fp8[0]["severity"] == "error", found
