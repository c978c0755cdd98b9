"""Round 33's rows a reviewer dismissed from the finding's own file (audit HA, HB, HC; helper h184,
issue #16): each false shape paired with the nearest true case that must stay reported."""

from __future__ import annotations

from .precision_helpers import migrate_json, write_project


def _places(report: dict, path: str, code: str) -> dict[int, dict]:
    """{line: finding} of every place of the report-only findings of `code` in `path`."""
    places = {}
    for f in report["findings"]:
        if f["path"] == path and f["code"] == code and not f["fixable"]:
            places[f["line"]] = f
            for line, _column, _source in f.get("also") or ():
                places.setdefault(line, f)
    return places


def _scopes(report: dict, path: str, code: str) -> dict[int, str]:
    """{line: reason} of the named skipped scopes of `code` in `path`."""
    return {line: s["reason"] for s in report["skipped"] if s.get("path") == path and "start_line" in s
            and f"({code})" in s["reason"] for line in range(s["start_line"], s["end_line"] + 1)}


# ----------------------------------------------------------------------------- HA#13: empty kernels a test inspects
LAUNCHER_TEST = '''import torch

from vllm.triton_utils import tl, triton
from vllm.warmup import key_deriver, warmup_inputs


@triton.jit
def _binder_kernel(x, value, BLOCK: tl.constexpr):
    pass


@triton.jit
def _pointer_kernel(x_ptr, value, BLOCK: tl.constexpr):
    """Only its argument names are read."""


@triton.jit
def _real_kernel(x_ptr, BLOCK: tl.constexpr):
    offsets = tl.arange(0, BLOCK)
    tl.store(x_ptr + offsets, tl.load(x_ptr + offsets) + 1)


@triton.jit
def _launched_empty_kernel(x_ptr, BLOCK: tl.constexpr):
    pass


def test_inputs():
    assert warmup_inputs(_pointer_kernel, x_ptr=torch.float32)
    assert key_deriver(_binder_kernel)({"x": 1})
    assert _binder_kernel.arg_names == ["x", "value", "BLOCK"]


def test_launch():
    x = torch.zeros(4, device="cuda")
    _real_kernel[(1,)](x, BLOCK=4)
    _launched_empty_kernel[(1,)](x, BLOCK=4)
'''


def test_empty_module_level_kernels_a_test_only_inspects(tmp_path):
    """HA#13: module-level `@triton.jit` kernels of a test file whose bodies are `pass` (or a
    docstring), handed only to helpers that read their names and keys, are never launched by the
    file: nothing to port, a named scope. The nearest true cases keep their error: a kernel with a
    body the test launches, and an empty kernel the test launches."""
    report = migrate_json(write_project(tmp_path, {"tests/test_launcher.py": LAUNCHER_TEST}))
    path = "tests/test_launcher.py"
    found = _places(report, path, "NPU910")
    scopes = _scopes(report, path, "NPU910")
    assert 7 not in found and 12 not in found
    assert "never launches" in scopes[7] and "never launches" in scopes[12]
    assert found[17]["severity"] == "error" and found[23]["severity"] == "error"


def test_empty_kernel_in_library_code_stays(tmp_path):
    """HA#13's nearest true case outside tests: the same empty kernel in library code (another
    module may import and launch it) keeps its error."""
    lib = LAUNCHER_TEST.split("\n\n\ndef test_")[0]
    report = migrate_json(write_project(tmp_path, {"pkg/kernels.py": lib}))
    found = _places(report, "pkg/kernels.py", "NPU910")
    assert found[7]["severity"] == "error"
