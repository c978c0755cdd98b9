"""Round-14 audits (issue #16): code after a skip or a raise that fires unless an NVIDIA
capability is present (npu_migrate/capgates.py, capskips.py). The shim's
`get_device_capability()` answers (0, 0) on an NPU host, and `is_device_capability(89)`,
`is_sm_at_least_90()` are false there: what follows such an exit never runs there. Each test
writes a small project of its own, checks that the false finding became a named skipped scope
with its reason, and that a nearby true case keeps its severity."""

from __future__ import annotations

from .precision_helpers import migrate_json, moot_lines, write_project

_CAPTURE_TESTS = '''
import pytest
import torch


def _require_capability(capability):
    if not torch.cuda.is_available() or torch.cuda.get_device_capability() != capability:
        pytest.skip(f"needs SM{capability[0]}{capability[1]}")
    if not hasattr(torch.ops._C, "skinny_gemm"):
        pytest.skip("not built")


def _require_sm100():
    _require_capability((10, 0))


def test_sm90_capture():
    _require_capability((9, 0))
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        pass


def test_sm100_capture():
    x = torch.ones(2, device="cuda")
    _require_sm100()
    graph = torch.cuda.CUDAGraph()
'''

_PLAIN_TEST = '''

def test_capture_everywhere():
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        pass
'''


def _line(text: str, needle: str) -> int:
    return next(i for i, line in enumerate(text.splitlines(), 1) if needle in line)


def _reported(report: dict, path: str, code: str) -> list[dict]:
    return [f for f in report["findings"] if f["path"] == path and f["code"] == code
            and not f["fixable"] and f["severity"] != "info"]


def test_tests_after_a_capability_helper_skip_are_scopes(tmp_path):
    """AK#1: every capture sits in a test that first calls a helper of the file that skips unless
    `get_device_capability()` is (9, 0) / (10, 0) (one helper calling the other too): a named
    scope "after a capability skip". The same file with a test that captures without the helper
    keeps its error."""
    root = write_project(tmp_path, {"tests/test_gated.py": _CAPTURE_TESTS,
                                    "tests/test_mixed.py": _CAPTURE_TESTS + _PLAIN_TEST})
    report = migrate_json(root)
    assert not _reported(report, "tests/test_gated.py", "NPU202")
    scopes = moot_lines(report["skipped"], "NPU202", "tests/test_gated.py")
    assert _line(_CAPTURE_TESTS, "graph = torch.cuda.CUDAGraph()") in scopes
    reason = scopes[_line(_CAPTURE_TESTS, "graph = torch.cuda.CUDAGraph()")]
    assert "after a capability skip: `_require_capability((9, 0))` never returns on an NPU host" in reason
    # nearby true case: a test that captures without the skip keeps the error
    mixed = _reported(report, "tests/test_mixed.py", "NPU202")
    assert mixed and mixed[0]["severity"] == "error"


def test_code_before_the_helper_call_and_undecided_arguments_stay(tmp_path):
    """Code before the helper's call runs on an NPU host; a helper called with a value the file
    does not spell out (a parameter) decides nothing."""
    text = '''
import pytest
import torch


def _require_capability(capability):
    if torch.cuda.get_device_capability() != capability:
        pytest.skip("wrong device")


def test_before():
    graph = torch.cuda.CUDAGraph()
    _require_capability((9, 0))


@pytest.mark.parametrize("capability", [(9, 0), (10, 0)])
def test_parametrized(capability):
    _require_capability(capability)
    graph = torch.cuda.CUDAGraph()
'''
    root = write_project(tmp_path, {"tests/test_order.py": text})
    report = migrate_json(root)
    found = _reported(report, "tests/test_order.py", "NPU202")
    places = {found[0]["line"], *(p[0] for p in found[0].get("also") or ())} if found else set()
    assert _line(text, "graph = torch.cuda.CUDAGraph()") in places
    assert len(places) == 2


_MARLIN = '''
import torch

from vllm.platforms import current_platform


def marlin_input_dtype(kind: str):
    if kind == "int8":
        return torch.int8
    elif kind == "fp8":
        if not current_platform.is_device_capability(89) and not current_platform.is_device_capability_family(120):
            raise ValueError("W4A8-FP8 only supports SM89 or SM12x")
        return torch.float8_e4m3fn
    return None
'''

_FAST_PATH = '''
import torch

from vllm.platforms import current_platform


def scales(s: torch.Tensor) -> torch.Tensor:
    if current_platform.has_device_capability(89):
        s = s * 2
    return s.to(torch.float8_e4m3fn)


def checked(s: torch.Tensor) -> torch.Tensor:
    if s.dim() != 2:
        raise ValueError("2-D scales only")
    return s.to(torch.float8_e4m3fn)
'''


def test_code_after_a_capability_raise_is_a_scope(tmp_path):
    """AK#8: the FP8 return after `raise ValueError` unless SM89/SM12x never runs on an NPU host.
    A capability check that only picks a faster path, and a raise on another condition, keep the
    FP8 after them reported."""
    root = write_project(tmp_path, {"pkg/marlin.py": _MARLIN, "pkg/fast.py": _FAST_PATH})
    report = migrate_json(root)
    assert not _reported(report, "pkg/marlin.py", "NPU913")
    scopes = moot_lines(report["skipped"], "NPU913", "pkg/marlin.py")
    reason = scopes[_line(_MARLIN, "return torch.float8_e4m3fn")]
    assert "after a capability raise: `not current_platform.is_device_capability(89)" in reason
    kept = _reported(report, "pkg/fast.py", "NPU913")
    places = {kept[0]["line"], *(p[0] for p in kept[0].get("also") or ())} if kept else set()
    assert places == {_line(_FAST_PATH, "return s.to(torch.float8_e4m3fn)"),
                      _line(_FAST_PATH, "return s.to(torch.float8_e4m3fn)") + 6}


_DIST_UTILS = '''
import torch

from torchao.utils import is_sm_at_least_90


def get_skip_reason(*, min_devices: int):
    """Shared module-level gating."""
    if not torch.cuda.is_available():
        return "CUDA not available"
    if torch.cuda.device_count() < min_devices:
        return f"Need at least {min_devices} CUDA devices"
    if not is_sm_at_least_90():
        return "requires SM90+"
    return None


def get_device_reason(*, min_devices: int):
    if not torch.cuda.is_available():
        return "CUDA not available"
    if torch.cuda.device_count() < min_devices:
        return f"Need at least {min_devices} CUDA devices"
    return None
'''

_MODULE_TEST = '''
import pytest
import torch

from _dist_utils import {helper}

if skip_reason := {helper}(min_devices=4):
    pytest.skip(skip_reason, allow_module_level=True)


def test_mesh():
    # (an unknown callee: init_device_mesh's "cuda" is rewritten since round 23, BL#18)
    mesh = make_mesh("cuda", (2, 2))
'''


def test_module_skip_through_a_helper_requiring_sm90(tmp_path):
    """AM#12: a test module skips at import when a helper of the module beside it returns a
    reason, and on an NPU host it always does (`if not is_sm_at_least_90(): return "..."`): the
    module's findings after the skip are a named scope. A helper that checks only the device count
    decides nothing: that module keeps its warning."""
    root = write_project(tmp_path, {
        "test/fp8/_dist_utils.py": _DIST_UTILS,
        "test/fp8/test_tp.py": _MODULE_TEST.format(helper="get_skip_reason"),
        "test/fp8/test_dp.py": _MODULE_TEST.format(helper="get_device_reason"),
    })
    report = migrate_json(root)
    assert not _reported(report, "test/fp8/test_tp.py", "NPU990")
    line = _line(_MODULE_TEST, 'make_mesh("cuda"')
    reason = moot_lines(report["skipped"], "NPU990", "test/fp8/test_tp.py")[line]
    assert "`get_skip_reason` in `test/fp8/_dist_utils.py` returns a skip reason" in reason
    kept = _reported(report, "test/fp8/test_dp.py", "NPU990")
    assert [f["line"] for f in kept] == [line]


def test_helper_reading_the_capability_into_names(tmp_path):
    """`major, minor = torch.cuda.get_device_capability()` in the helper: (0, 0) on an NPU host,
    so `if (major, minor) != (9, 0) and major != 10: pytest.skip(...)` skips there. A helper whose
    skip tests another value of the call (`if mode != "fast"`) is no capability skip."""
    text = '''
import pytest
import torch


def _require_hopper_or_blackwell():
    major, minor = torch.cuda.get_device_capability()
    if (major, minor) != (9, 0) and major != 10:
        pytest.skip("needs SM90 or SM10x")


def _require_mode(mode):
    if mode != "fast":
        pytest.skip("slow mode")


def test_capture():
    _require_hopper_or_blackwell()
    graph = torch.cuda.CUDAGraph()


def test_mode():
    _require_mode("slow")
    graph = torch.cuda.CUDAGraph()
'''
    root = write_project(tmp_path, {"tests/test_names.py": text})
    report = migrate_json(root)
    lines = [i for i, line in enumerate(text.splitlines(), 1) if "graph = torch.cuda.CUDAGraph()" in line]
    scopes = moot_lines(report["skipped"], "NPU202", "tests/test_names.py")
    assert lines[0] in scopes and "`_require_hopper_or_blackwell` skips on" in scopes[lines[0]]
    kept = _reported(report, "tests/test_names.py", "NPU202")
    assert [f["line"] for f in kept] == [lines[1]]
