"""Round-13 audit (issue #16): FP8 (NPU913) in CPU-only code and in functions an NPU host cannot
run (npu_migrate/fp8cpu.py). Each test writes a small project of its own, checks that the false
error is gone (a named skipped scope, with its reason) and that a nearby true case stays an error."""

from __future__ import annotations

from .precision_helpers import migrate_json, write_project


def _errors(report: dict, path: str) -> list[dict]:
    return [f for f in report["findings"] if f["code"] == "NPU913" and f["path"] == path and f["severity"] != "info"]


def _scopes(report: dict, path: str) -> list[str]:
    return [s["reason"] for s in report["skipped"] if s.get("path") == path and "(NPU913)" in s["reason"]]


_CPU_PASS = '''
import torch


def _fuse_weights_cpu(weights, scale):
    packed = torch.cat(weights) / scale
    packed = packed.to(torch.float8_e4m3fn)
    return torch.ops.onednn.qlinear_prepack(packed, None)
'''


def test_cpu_only_module_is_no_fp8_device_compute(tmp_path):
    """AI#33: a oneDNN pass in a `*_cpu.py` file naming no other device re-quantises CPU
    weights; the same pass in a file that also names "cuda" keeps its error."""
    root = write_project(tmp_path, {
        "pkg/fusion_cpu.py": _CPU_PASS,
        "pkg/fusion_any.py": _CPU_PASS + '\n\ndef target():\n    return "cuda"\n',
        "pkg/fusion_mixed_cpu.py": _CPU_PASS + '\n\ndef move(x):\n    return x.to("cuda")\n',
        "pkg/offload_cpu.py": _CPU_PASS + '\n\ndef load(x, device):\n    return x.to(device)\n',
    })
    report = migrate_json(root)
    assert not _errors(report, "pkg/fusion_cpu.py")
    assert any("`fusion_cpu.py` is a CPU-only module" in r or "names FP8 dtypes only" in r
               for r in _scopes(report, "pkg/fusion_cpu.py"))
    assert _errors(report, "pkg/fusion_any.py")  # (no `_cpu` in its name)
    assert _errors(report, "pkg/fusion_mixed_cpu.py")  # (it names another device)
    assert _errors(report, "pkg/offload_cpu.py")  # (a device from outside)


_OPAQUE = '''
import torch


class PackedFloat8:
    """FP8 weights packed for the CPU."""

    @classmethod
    def from_hp(cls, weight, scale):
        assert weight.ndim == 2 and weight.device.type == "cpu", "CPU only"
        data = (weight / scale).to(torch.float8_e4m3fn)
        return torch.ops.mylib.float8_prepack_cpu(data, scale)
'''


def test_function_asserting_the_cpu_is_no_fp8_device_compute(tmp_path):
    """AJ#23: a constructor that asserts `weight.device.type == "cpu"` before it casts to FP8;
    without the assertion, or casting before it, the cast stays an error."""
    root = write_project(tmp_path, {
        "pkg/opaque.py": _OPAQUE,
        "pkg/unchecked.py": _OPAQUE.replace('        assert weight.ndim == 2 and weight.device.type == "cpu", "CPU only"\n', ""),
        "pkg/late.py": _OPAQUE.replace(
            '        assert weight.ndim == 2 and weight.device.type == "cpu", "CPU only"\n'
            '        data = (weight / scale).to(torch.float8_e4m3fn)\n',
            '        data = (weight / scale).to(torch.float8_e4m3fn)\n'
            '        assert weight.device.type == "cpu"\n'),
    })
    report = migrate_json(root)
    assert not _errors(report, "pkg/opaque.py")
    assert any("asserts `weight.device.type == 'cpu'`" in r for r in _scopes(report, "pkg/opaque.py"))
    assert _errors(report, "pkg/unchecked.py")
    assert _errors(report, "pkg/late.py")


def test_cast_helper_after_a_cpu_assertion_is_no_fp8_device_compute(tmp_path):
    """AJ#23 as written: the cast goes through a quantisation helper (`_quantize_affine_float8`),
    which kernels.py reads as FP8 compute; after the CPU assertion it is CPU data, without it an
    error."""
    helper = _OPAQUE.replace("import torch\n", "import torch\n\nfrom pkg.quant import _quantize_affine_float8\n", 1)
    helper = helper.replace("        data = (weight / scale).to(torch.float8_e4m3fn)\n",
                            "        data = _quantize_affine_float8(weight, scale, torch.float8_e4m3fn)\n")
    root = write_project(tmp_path, {
        "pkg/__init__.py": "",
        "pkg/opaque.py": helper,
        "pkg/unchecked.py": helper.replace('        assert weight.ndim == 2 and weight.device.type == "cpu", "CPU only"\n', ""),
    })
    report = migrate_json(root)
    assert not _errors(report, "pkg/opaque.py")
    assert _errors(report, "pkg/unchecked.py")


_PREDICATES = '''
import torch


def is_cuda():
    return torch.cuda.is_available() and torch.version.cuda
'''

_GATED = '''
import torch

from proj.utils import is_cuda

_is_cuda = is_cuda()
if _is_cuda:
    from cuda_kernels import prepare_input, grouped_mm


def fused_experts_fp8(a, w, device):
    offsets = torch.empty((8,), dtype=torch.int32, device=device)
    prepare_input(a, offsets)
    a_q = torch.empty_like(a, dtype=torch.float8_e4m3fn)
    return grouped_mm(a_q, w, offsets)


def quant_fp8_reference(weight):
    fp8 = weight.to(torch.float8_e4m3fn)
    return grouped_mm(fp8, weight, None)
'''


def test_function_always_calling_a_cuda_gated_import_cannot_run(tmp_path):
    """AI#16, AI#30: FP8 places in functions that always call a name imported only under
    `if _is_cuda:` (the project's `is_cuda()`, false on an NPU host) become named skipped scopes;
    a call under a condition, or a name the module also binds elsewhere, keeps the error."""
    conditional = _GATED.replace("    prepare_input(a, offsets)\n", "    if a.is_cuda:\n        prepare_input(a, offsets)\n")
    conditional = conditional.replace("    return grouped_mm(a_q, w, offsets)\n", "    return a_q\n")
    conditional = conditional.replace("    return grouped_mm(fp8, weight, None)\n", "    return fp8\n")
    fallback = _GATED.replace("    from cuda_kernels import prepare_input, grouped_mm\n",
                              "    from cuda_kernels import prepare_input, grouped_mm\n"
                              "else:\n    from proj.fallback import prepare_input, grouped_mm\n")
    root = write_project(tmp_path, {
        "proj/__init__.py": "",
        "proj/utils.py": _PREDICATES,
        "proj/moe.py": _GATED,
        "proj/moe_conditional.py": conditional,
        "proj/moe_fallback.py": fallback,
    })
    report = migrate_json(root)
    assert not _errors(report, "proj/moe.py")
    reasons = _scopes(report, "proj/moe.py")
    assert any("in a function an NPU host cannot run: `fused_experts_fp8` always calls `prepare_input`" in r
               for r in reasons), reasons
    assert _errors(report, "proj/moe_conditional.py")
    assert _errors(report, "proj/moe_fallback.py")


def test_early_return_before_the_gated_call_keeps_the_error(tmp_path):
    """A function that may return before it calls the gated name can complete on an NPU host."""
    early = _GATED.replace("    offsets = torch.empty((8,), dtype=torch.int32, device=device)\n",
                           "    if not _is_cuda:\n        return a.to(torch.float8_e4m3fn)\n"
                           "    offsets = torch.empty((8,), dtype=torch.int32, device=device)\n")
    early = early.replace("def quant_fp8_reference(weight):\n    fp8 = weight.to(torch.float8_e4m3fn)\n"
                          "    return grouped_mm(fp8, weight, None)\n", "")
    root = write_project(tmp_path, {
        "proj/__init__.py": "",
        "proj/utils.py": _PREDICATES,
        "proj/moe.py": early,
    })
    report = migrate_json(root)
    assert _errors(report, "proj/moe.py")
