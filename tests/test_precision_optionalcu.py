"""Issue #16, round-14 audit (AL#6, AL#17): the `.cu` sources of an extension the project only
builds or imports inside a `try` that catches the failure and does not raise
(npu_migrate/optionalcu.py). On an NPU host the build or import fails and the project runs without
the kernels, so their NPU912 is info naming the fallback, not an error. An extension imported
plainly, or a handler that raises, keeps the error."""

from __future__ import annotations

from .precision_helpers import migrate_json, write_project

KERNEL = """\
#include <torch/extension.h>
__global__ void blockdiag_kernel(float* out, const float* in, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = in[i];
}
"""

JIT_LAYER = """\
import os
import warnings

import torch

_EXT = None


def get_ext():
    global _EXT
    if _EXT is not None:
        return _EXT
    from torch.utils.cpp_extension import load

    here = os.path.dirname(__file__)
    try:
        _EXT = load(name="blockdiag", sources=[f"{here}/kern/blockdiag.cpp", f"{here}/kern/blockdiag_kernel.cu"])
    except Exception as exc:
        warnings.warn(f"could not build the extension: {exc}")
        _EXT = None
    return _EXT


def block_diag(blocks):
    ext = get_ext()
    if ext is None:
        return torch.block_diag(*blocks)
    return ext.forward(blocks)
"""

JIT_RAISES = JIT_LAYER.replace("        _EXT = None\n    return _EXT",
                               "        raise RuntimeError('the extension is required') from exc\n    return _EXT")

SETUP = """\
from setuptools import setup
from torch.utils.cpp_extension import BuildExtension, CUDAExtension

setup(
    name="quantpack",
    package_data={"quantpack": ["kern/dequant_kernel.cu"]},
    ext_modules=[
        CUDAExtension("quantpack_cuda", ["kern/dequant.cpp", "kern/dequant_kernel.cu"]),
        CUDAExtension("quantpack_fast", ["kern/fast.cpp", "kern/fast_kernel.cu"]),
    ],
    cmdclass={"build_ext": BuildExtension},
)
"""

QLINEAR = """\
import torch

try:
    import quantpack_cuda
except ImportError:
    quantpack_cuda = None


def dequant(w, scale):
    if quantpack_cuda is not None:
        return quantpack_cuda.dequant(w, scale)
    return w.float() * scale
"""

FAST = """\
import quantpack_fast


def fast(w):
    return quantpack_fast.run(w)
"""


def _kernel(name: str) -> str:
    """A distinct kernel per file (identical `.cu` files are one finding: textfiles.group_cuda_headers)."""
    return KERNEL.replace("blockdiag_kernel", name)


def _nup912(report: dict) -> dict[str, dict]:
    return {f["path"]: f for f in report["findings"] if f["code"] == "NPU912" and not f["fixable"]}


def test_jit_build_caught_in_place_is_info(tmp_path):
    root = write_project(tmp_path, {
        "pkg/layer.py": JIT_LAYER,
        "pkg/kern/blockdiag_kernel.cu": _kernel("a"),
        "other/layer.py": JIT_RAISES.replace("blockdiag", "strict"),
        "other/kern/strict_kernel.cu": _kernel("b"),
    })
    found = _nup912(migrate_json(root))
    caught = found["pkg/kern/blockdiag_kernel.cu"]
    assert caught["severity"] == "info"
    assert "pkg/layer.py:" in caught["message"] and "does not raise" in caught["message"]
    # a handler that raises: the project needs the kernels, the error stays
    assert found["other/kern/strict_kernel.cu"]["severity"] == "error"


def test_setup_extension_every_importer_probes_is_info(tmp_path):
    root = write_project(tmp_path, {
        "setup.py": SETUP,
        "kern/dequant_kernel.cu": _kernel("c"),
        "kern/fast_kernel.cu": _kernel("d"),
        "quantpack/qlinear.py": QLINEAR,
        "quantpack/fast.py": FAST,
        "tests/test_dequant.py": "import quantpack_cuda\n\n\ndef test_it():\n    assert quantpack_cuda\n",
    })
    found = _nup912(migrate_json(root))
    probed = found["kern/dequant_kernel.cu"]
    assert probed["severity"] == "info"
    assert "quantpack/qlinear.py:4" in probed["message"]
    # imported plainly by library code: the kernels are required, the error stays
    assert found["kern/fast_kernel.cu"]["severity"] == "error"


def test_extension_nothing_imports_keeps_its_error(tmp_path):
    root = write_project(tmp_path, {
        "setup.py": SETUP,
        "kern/dequant_kernel.cu": _kernel("c"),
        "kern/fast_kernel.cu": _kernel("d"),
    })
    found = _nup912(migrate_json(root))
    assert found["kern/dequant_kernel.cu"]["severity"] == "error"
    assert found["kern/fast_kernel.cu"]["severity"] == "error"
