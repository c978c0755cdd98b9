"""Issue #16: report-only findings on names that are labels, not CUDA-only constructs.

Each test reproduces a shape the audits of real projects judged false or redundant, with a small
fixture of our own, and checks that a true case next to it is still reported:
- NPU913 on FP8 dtypes that are only named (allow-lists, dtype maps' keys, default values,
  descriptor constants): information at most; a file that computes in FP8 anchors its error on
  the first real use;
- NPU990 on strings that are labels (platform tables, accelerator names, NIC maps keyed by
  device string, CUDA runtime switches);
- NPU107 on a class whose own `cuda()` is the only caller of `.cuda()`;
- NPU602 on NCCL variables that are removed from an environment, not set.
"""

from __future__ import annotations

from npu_migrate import catalogue
from npu_migrate.model import Options
from npu_migrate.run import migrate_file

OPTIONS = Options(enabled=catalogue.enabled_codes())


def _findings(source: str, code: str, path: str = "pkg/mod.py"):
    result = migrate_file(source.encode(), path, OPTIONS)
    return [f for f in result.findings if f.code == code and not f.fixable]


# ----------------------------------------------------------------------------- NPU913: FP8
FP8_NAMED_ONLY = '''\
import functools

import torch

F8_TO_TL = {
    torch.float8_e4m3fn: "f8e4",
    torch.float8_e5m2: "f8e5",
}


@functools.lru_cache()
def scale_dtypes():
    if hasattr(torch, "float8_e8m0fnu"):
        return (torch.uint8, torch.float8_e8m0fnu)
    return (torch.uint8,)


def check_scale(scale):
    if scale.dtype not in scale_dtypes():
        raise ValueError("bad scale")
    return scale.dtype == torch.float8_e8m0fnu


def quantize(x, out_dtype: torch.dtype = torch.float8_e4m3fn):
    return x.to(out_dtype)
'''


def test_fp8_dtypes_only_named_are_information_not_an_error():
    found = _findings(FP8_NAMED_ONLY, "NPU913")
    assert len(found) == 1
    assert found[0].severity == "info" and "no FP8 compute" in found[0].message


FP8_DESCRIPTOR_AND_CAST = '''\
import torch


class ScaleDesc:
    def __init__(self, dtype, static):
        self.dtype, self.static = dtype, static


E8M0_BLOCK = ScaleDesc(torch.float8_e8m0fnu, True)
MAX = torch.finfo(torch.float8_e4m3fn).max


def to_e4m3fnuz(weight):
    return weight.view(torch.float8_e4m3fnuz)


def quantize(x):
    return (x / MAX).to(torch.float8_e4m3fn)


def gemm(a, b, sa, sb):
    return torch._scaled_mm(a, b, scale_a=sa, scale_b=sb)
'''


def test_fp8_error_anchors_on_the_first_real_cast_not_a_descriptor_or_rocm_helper():
    found = _findings(FP8_DESCRIPTOR_AND_CAST, "NPU913")
    assert len(found) == 1 and found[0].severity == "error"
    assert found[0].line == 18  # `.to(torch.float8_e4m3fn)`, not ScaleDesc (9) nor the fnuz view (14)
    assert [place[0] for place in found[0].also] == [22]  # torch._scaled_mm


def test_fp8_tensor_factory_and_parametrized_dtypes_stay_errors():
    source = (
        "import pytest\nimport torch\n\n\n"
        "@pytest.mark.parametrize('dtype', [torch.float8_e4m3fn, torch.float8_e5m2])\n"
        "def test_cast(dtype):\n    assert torch.ones(2).to(dtype).dtype == dtype\n\n\n"
        "def make(n):\n    return torch.empty(n, dtype=torch.float8_e5m2)\n"
    )
    found = _findings(source, "NPU913", "pkg/other.py")
    assert len(found) == 1 and found[0].severity == "error" and found[0].line == 5


def test_only_rocm_fp8_compute_is_still_an_error():
    source = "import torch\n\n\ndef f(w):\n    return w.view(torch.float8_e4m3fnuz)\n"
    found = _findings(source, "NPU913")
    assert len(found) == 1 and found[0].severity == "error"
