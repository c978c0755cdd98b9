"""Round-25 precision wave, helper h109 (issue #16): capability-gated factories (validated.py reads
a scheme's minimum capability past a comment line, BR#22/#24), and a capability check that itself
fails on an NPU host because the project's own query answers None there (capnone25.py, BR#22)."""

from __future__ import annotations

from tests.precision_helpers import findings_at, migrate_json, scopes_at, write_project

# the project's platform layer: already NPU-aware (the run leaves it as written), its capability
# query asks only for other accelerators and answers (None, None) on an NPU host
_COMMON = """\
import torch


def is_musa():
    return hasattr(torch, "musa") and torch.musa.is_available()


def get_device_capability(device_id=0):
    major, minor = None, None
    if (hasattr(torch, "cuda") and torch.cuda.is_available()) or is_musa():
        major, minor = torch.cuda.get_device_capability(device_id)
    if hasattr(torch, "xpu") and torch.xpu.is_available():
        major, minor = None, None
    return major, minor


def device_name():
    if hasattr(torch, "npu") and torch.npu.is_available():
        return torch.npu.get_device_name()
    return "cpu"
"""

# the same query in a file the run migrates: its CUDA probe becomes the shim's, true on an NPU host
_COMMON_MIGRATED = """\
import torch


def get_device_capability(device_id=0):
    major, minor = None, None
    if torch.cuda.is_available():
        major, minor = torch.cuda.get_device_capability(device_id)
    return major, minor
"""

# the FP8 scheme needs Ada (a comment between `def` and `return`)
_SCHEMES = """\
import torch


class W8A8Fp8:
    @classmethod
    def get_min_capability(cls):
        # ada and up
        return 89

    def create_weights(self, layer, n, k):
        layer.weight = torch.nn.Parameter(torch.empty(n, k, dtype=torch.float8_e4m3fn))
"""

# the fallback: FP8 weights dequantized on the fly, built wherever the check fails
_FALLBACK = """\
import torch


class W8A16Fp8:
    @classmethod
    def get_min_capability(cls):
        # turing and up
        return 75

    def create_weights(self, layer, n, k):
        layer.weight = torch.nn.Parameter(torch.empty(n, k, dtype=torch.float8_e4m3fn))
"""

# the selector: the FP8 scheme only where the check passes, the fallback otherwise
_CONFIG = """\
from pkg.schemes.w8a8 import W8A8Fp8
from pkg.schemes.w8a16 import W8A16Fp8
from pkg.utils import get_device_capability


class Config:
    def _check_scheme_supported(self, min_capability, error=True):
        capability_tuple = get_device_capability()
        if capability_tuple is not None:
            assert 0 <= capability_tuple[1] < 10
            capability = capability_tuple[0] * 10 + capability_tuple[1]
            supported = capability >= min_capability
            if error and not supported:
                raise RuntimeError("not supported")
            return supported
        else:
            return False

    def get_scheme(self, cfg):
        if cfg.get("fp8"):
            supported = self._check_scheme_supported(W8A8Fp8.get_min_capability(), error=False)
            if supported:
                return W8A8Fp8()
            return W8A16Fp8()
        raise NotImplementedError("no scheme")
"""

# callers of the query that test for None first, or only print it: no failure
_SAFE = """\
from pkg.utils import get_device_capability


def bf16_supported():
    major, minor = get_device_capability()
    if major is None:
        return False
    return major >= 8


def describe():
    capability = get_device_capability()
    print(capability)


def capability_number():
    capability = get_device_capability()
    return -1 if all(c is None for c in capability) else capability[0] * 10 + capability[1]
"""


def _project(tmp_path, common=_COMMON):
    return migrate_json(write_project(tmp_path, {
        "pkg/__init__.py": "",
        "pkg/utils/__init__.py": "from .common import *  # noqa: F401,F403\n",
        "pkg/utils/common.py": common,
        "pkg/schemes/__init__.py": "",
        "pkg/schemes/w8a8.py": _SCHEMES,
        "pkg/schemes/w8a16.py": _FALLBACK,
        "pkg/config.py": _CONFIG,
        "pkg/safe.py": _SAFE,
    }))


def test_scheme_built_only_under_its_capability_check_is_a_named_scope_past_a_comment(tmp_path):
    report = _project(tmp_path)
    scopes = scopes_at(report, "pkg/schemes/w8a8.py", "NPU913")
    assert 11 in scopes, report["skipped"]
    assert "minimum capability 89 (pkg/config.py:21)" in scopes[11]
    # (the project's query answers None there: the reason does not claim the shim's (0, 0))
    assert "the project's `get_device_capability()`" in scopes[11]
    # the fallback, built when the check fails, stays reported
    assert 11 in findings_at(report, "pkg/schemes/w8a16.py", "NPU913")


def test_capability_check_on_the_projects_none_query_is_reported_where_it_fails(tmp_path):
    report = _project(tmp_path)
    found = findings_at(report, "pkg/config.py", "NPU931")
    assert list(found) == [10], report["findings"]
    assert found[10]["severity"] == "error"
    assert "`0 <= capability_tuple[1] < 10` raises TypeError" in found[10]["message"]
    assert "pkg/utils/common.py:8" in found[10]["message"]
    # callers that test for None first, or only pass it on, are no failure
    assert not findings_at(report, "pkg/safe.py", "NPU931")


def test_query_whose_cuda_probe_the_run_rewrites_is_no_none_query(tmp_path):
    # the shim's availability check is true on an NPU host: the query answers the shim's capability
    report = _project(tmp_path, common=_COMMON_MIGRATED)
    assert not findings_at(report, "pkg/config.py", "NPU931")
    assert not any(f["code"] == "NPU931" for f in report["findings"])


# ---------------------------------------------------------------- probedext25: extensions selected by a probe
_SETUP = """\
from setuptools import setup
from torch.utils.cpp_extension import BuildExtension, CUDAExtension

setup(
    name="pkg",
    ext_modules=[
        CUDAExtension("fast_kernels", ["csrc/fast/gemm.cu", "csrc/fast/buffers.cu"]),
        CUDAExtension("marlin_kernels", ["csrc/marlin/gemm.cu", "csrc/marlin/repack.cu"]),
    ],
    cmdclass={"build_ext": BuildExtension},
)
"""

def _kernel(name: str) -> str:
    return f"__global__ void {name}(float* x) {{ x[threadIdx.x] *= 2.0f; }}\n"

# the probe of each extension, and the selector: the fast layer only where its probe holds, the
# Marlin layer wherever a user asks for it
_IMPORT_UTILS = """\
try:
    import fast_kernels  # noqa: F401

    FAST_KERNELS_AVAILABLE = True
except Exception:
    FAST_KERNELS_AVAILABLE = False

try:
    import marlin_kernels  # noqa: F401

    MARLIN_AVAILABLE = True
except Exception:
    MARLIN_AVAILABLE = False


def select_linear(bits, disable_fast=False, disable_marlin=True):
    if bits == 4 and not disable_marlin:
        from ..qlinear.qlinear_marlin import QuantLinear
    elif bits == 4 and not disable_fast and FAST_KERNELS_AVAILABLE:
        from ..qlinear.qlinear_fast import QuantLinear
    else:
        from ..qlinear.qlinear_plain import QuantLinear
    return QuantLinear
"""


def _layer(extension: str) -> str:
    return f"""\
import torch.nn as nn

try:
    from {extension} import q4_matmul
except ImportError as e:
    error = e

    def error_raiser(*args, **kwargs):
        raise ValueError(f"could not import {extension}: {{error}}")

    q4_matmul = error_raiser


class QuantLinear(nn.Module):
    def forward(self, x):
        return q4_matmul(x, self.qweight)
"""


_PLAIN = """\
import torch.nn as nn


class QuantLinear(nn.Module):
    def forward(self, x):
        return x @ self.weight
"""

# a helper for the fast layers: type tests at module level, the extension imported lazily
_FAST_UTILS = """\
from ..qlinear.qlinear_fast import QuantLinear as FastQuantLinear


def set_max_input_length(model, length):
    from fast_kernels import prepare_buffers

    if not any(isinstance(m, FastQuantLinear) for m in model.modules()):
        raise ValueError("the model has no fast layers")
    prepare_buffers(length)
"""


def _extension_project(tmp_path, fast_utils=_FAST_UTILS):
    return migrate_json(write_project(tmp_path, {
        "setup.py": _SETUP,
        "csrc/fast/gemm.cu": _kernel("fast_gemm"),
        "csrc/fast/buffers.cu": _kernel("fast_buffers"),
        "csrc/marlin/gemm.cu": _kernel("marlin_gemm"),
        "csrc/marlin/repack.cu": _kernel("marlin_repack"),
        "pkg/__init__.py": "",
        "pkg/utils/__init__.py": "",
        "pkg/utils/import_utils.py": _IMPORT_UTILS,
        "pkg/utils/fast_utils.py": fast_utils,
        "pkg/qlinear/__init__.py": "",
        "pkg/qlinear/qlinear_fast.py": _layer("fast_kernels"),
        "pkg/qlinear/qlinear_marlin.py": _layer("marlin_kernels"),
        "pkg/qlinear/qlinear_plain.py": _PLAIN,
    }))


def _cu_finding(report, folder):
    found = [f for f in report["findings"] if f["code"] == "NPU912" and f["path"].startswith(f"csrc/{folder}/")]
    assert len(found) == 1, report["findings"]
    return found[0]


def test_extension_selected_only_under_its_own_import_probe_is_an_optional_fast_path(tmp_path):
    report = _extension_project(tmp_path)
    fast = _cu_finding(report, "fast")
    assert fast["severity"] == "info", fast["message"]
    assert "its import probe `FAST_KERNELS_AVAILABLE` (pkg/utils/import_utils.py:1)" in fast["message"]
    assert "pkg/utils/import_utils.py:20" in fast["message"]
    assert "port the kernels for speed" in fast["message"]
    assert "lazy imports inside functions, for those layers: pkg/utils/fast_utils.py:5" in fast["message"]
    # the Marlin layer is taken wherever a user asks for it, probe or not: its kernels stay an error
    assert _cu_finding(report, "marlin")["severity"] == "error"


def test_extension_whose_layer_a_module_builds_unconditionally_stays_an_error(tmp_path):
    builds = _FAST_UTILS + "\n\ndef make_layer():\n    return FastQuantLinear()\n"
    report = _extension_project(tmp_path, fast_utils=builds)
    assert _cu_finding(report, "fast")["severity"] == "error"


def test_package_defining_its_own_query_of_that_name_is_not_the_none_query(tmp_path):
    # `from pkg.utils import get_device_capability` binds the package's own function, not common's
    own = "from .common import is_musa  # noqa: F401\n\n\ndef get_device_capability():\n    return (0, 0)\n"
    root = write_project(tmp_path, {
        "pkg/__init__.py": "",
        "pkg/utils/__init__.py": own,
        "pkg/utils/common.py": _COMMON,
        "pkg/schemes/__init__.py": "",
        "pkg/schemes/w8a8.py": _SCHEMES,
        "pkg/schemes/w8a16.py": _FALLBACK,
        "pkg/config.py": _CONFIG,
    })
    assert not findings_at(migrate_json(root), "pkg/config.py", "NPU931")
