"""Round-32 audit rows a reviewer dismissed from the finding's own file (issue #16, helper h166).
Each false case is paired with the nearest true case that stays reported."""

from __future__ import annotations

from tests.precision_helpers import findings_at, migrate_json, moot_lines, write_project

# ----------------------------------------------------------------------------- GC#8: `pytestmark` in a `try`
TRY_MARK = '''\
import torch

from proj.platforms import current_platform
from proj.triton_utils import triton

try:
    import pytest

    pytestmark = pytest.mark.skipif(
        {condition},
        reason="needs CUDA Triton",
    )
    _parametrize = pytest.mark.parametrize
except ModuleNotFoundError:
    pytest = None


@triton.jit
def _copy_kernel(src_ptr, dst_ptr, n):
    pass


def test_copy():
    x = torch.zeros(8)
    _copy_kernel[(1,)](x, x, 8)
'''

PLATFORM = '''\
class Platform:
    def is_cuda_alike(self):
        return False

    def is_xpu(self):
        return False

    def is_rocm(self):
        return False


current_platform = Platform()
'''

TRITON_UTILS = "import triton\n"


def _run(tmp_path, files):
    return migrate_json(write_project(tmp_path, {
        "proj/__init__.py": "",
        "proj/platforms.py": PLATFORM,
        "proj/triton_utils.py": TRITON_UTILS,
        **files,
    }))


def test_pytestmark_in_a_try_guarding_pytest_skips_the_module(tmp_path):
    report = _run(tmp_path, {"tests/test_copy.py": TRY_MARK.format(
        condition="not (current_platform.is_cuda_alike() or current_platform.is_xpu())")})
    assert 18 not in findings_at(report, "tests/test_copy.py", "NPU910")
    assert 18 in moot_lines(report["skipped"], "NPU910", "tests/test_copy.py")


def test_pytestmark_in_a_try_that_an_npu_host_passes_stays_reported(tmp_path):
    # nearest true case: the same `try`, a skip condition false on an NPU host (ROCm only)
    report = _run(tmp_path, {"tests/test_copy.py": TRY_MARK.format(condition="current_platform.is_rocm()")})
    assert findings_at(report, "tests/test_copy.py", "NPU910")[18]["severity"] == "error"


def test_pytestmark_after_another_import_in_the_try_stays_reported(tmp_path):
    # nearest true case: the `try` also imports a package an NPU host lacks before the mark:
    # there the import fails, the mark is never set and the tests run
    text = TRY_MARK.format(condition="not current_platform.is_cuda_alike()").replace(
        "    import pytest\n", "    import pytest\n    import flashinfer  # noqa: F401\n")
    report = _run(tmp_path, {"tests/test_copy.py": text})
    assert findings_at(report, "tests/test_copy.py", "NPU910")[19]["severity"] == "error"


# ----------------------------------------------------------------------------- GC#12: `if pytest and (...)`
MODULE_SKIP = '''\
import pytest
import torch

from proj.platforms import current_platform
from proj.probes import has_flashinfer_trtllm_fused_moe

if {guard}(
    not has_flashinfer_trtllm_fused_moe()
    or not current_platform.is_cuda_alike()
):
    pytest.skip("Requires flashinfer TRTLLM fused MoE", allow_module_level=True)


def test_moe():
    from flashinfer import nvfp4_quantize

    nvfp4_quantize(torch.zeros(8))
'''

PROBES = '''\
import importlib.util


def has_flashinfer_trtllm_fused_moe():
    return importlib.util.find_spec("flashinfer") is not None
'''


def test_module_skip_that_also_asks_for_pytest_skips_the_module(tmp_path):
    report = _run(tmp_path, {"proj/probes.py": PROBES,
                             "tests/test_moe.py": MODULE_SKIP.format(guard="pytest and ")})
    assert 15 not in findings_at(report, "tests/test_moe.py", "NPU911")
    assert 15 in moot_lines(report["skipped"], "NPU911", "tests/test_moe.py")


def test_module_skip_on_a_name_bound_twice_stays_reported(tmp_path):
    # nearest true case: the name is a module only when the import succeeds (`pytest = None`
    # elsewhere): its truth is unknown, the skip may not fire, the import stays reported
    text = MODULE_SKIP.format(guard="pytest and ").replace(
        "import pytest\n", "try:\n    import pytest\nexcept ImportError:\n    pytest = None\n", 1)
    report = _run(tmp_path, {"proj/probes.py": PROBES, "tests/test_moe.py": text})
    assert findings_at(report, "tests/test_moe.py", "NPU911")[18]["severity"] == "error"


def test_module_skip_with_a_condition_an_npu_host_passes_stays_reported(tmp_path):
    # nearest true case: `pytest and is_rocm()`: false on an NPU host, the module runs there
    text = MODULE_SKIP.format(guard="pytest and ").replace(
        "not has_flashinfer_trtllm_fused_moe()\n    or not current_platform.is_cuda_alike()",
        "current_platform.is_rocm()\n    and True")
    report = _run(tmp_path, {"proj/probes.py": PROBES, "tests/test_moe.py": text})
    assert findings_at(report, "tests/test_moe.py", "NPU911")[15]["severity"] == "error"
