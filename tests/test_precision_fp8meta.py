"""Issue #16, round-14 audit (AL#25, AL#26): FP8 dtypes that compute nothing on a device
(npu_migrate/fp8cpu.py). A script's `__main__` block in a file that names no device casts on the
CPU; a meta/fake registration (`@_register_meta_op`, `@register_fake`) makes shapes, no data.
Neither is an FP8 error; a file with a real FP8 cast keeps its finding, anchored at that cast."""

from __future__ import annotations

from .precision_helpers import migrate_json, write_project

SPEC_SCRIPT = """\
import torch


def describe(dtype):
    info = torch.finfo(dtype)
    x = torch.tensor([1.0, 2.0]).to(dtype)
    print(dtype, info.max, x.float())


if __name__ == "__main__":
    for dtype in (torch.float16, torch.float8_e4m3fn, torch.float8_e5m2):
        describe(dtype)
"""

QUANT = """\
import torch

lib = torch.library.Library("mylib", "DEF")


def _register_meta_op(lib, name):
    def wrap(fn):
        lib.impl(name, fn, "Meta")
        return fn
    return wrap


def quantize_fp8(x, scale, float8_dtype=torch.float8_e4m3fn):
    return (x / scale).clamp(-448, 448).to(float8_dtype)


@_register_meta_op(lib, "quantize_fp8")
def _quantize_fp8_meta(x, scale, float8_dtype: torch.dtype = torch.float8_e4m3fn):
    return torch.empty_like(x, dtype=float8_dtype)
"""

META_ONLY = """\
import torch
from torch.library import register_fake


@register_fake("mylib::cast_fp8")
def _cast_fp8_fake(x, out_dtype: torch.dtype = torch.float8_e4m3fn):
    return torch.empty_like(x, dtype=out_dtype)
"""


def _errors(report: dict, path: str) -> list[dict]:
    return [f for f in report["findings"] if f["path"] == path and f["code"] == "NPU913"
            and not f["fixable"] and f["severity"] != "info"]


def test_main_block_without_a_device_is_no_fp8_error(tmp_path):
    root = write_project(tmp_path, {
        "tools/spec.py": SPEC_SCRIPT,
        "tools/spec_gpu.py": SPEC_SCRIPT.replace("torch.tensor([1.0, 2.0])", "torch.tensor([1.0, 2.0], device='cuda')"),
    })
    report = migrate_json(root)
    assert _errors(report, "tools/spec.py") == []
    # the same script on a device: the FP8 cast is device compute, reported
    assert _errors(report, "tools/spec_gpu.py")


def test_meta_registration_is_not_the_fp8_anchor(tmp_path):
    root = write_project(tmp_path, {"lib/quant.py": QUANT, "lib/fake.py": META_ONLY})
    report = migrate_json(root)
    (finding,) = _errors(report, "lib/quant.py")
    places = {finding["line"], *(a[0] for a in finding.get("also") or [])}
    assert places == {13}, finding  # the default the real cast uses, not the meta function's dtype default or empty_like
    assert _errors(report, "lib/fake.py") == []
