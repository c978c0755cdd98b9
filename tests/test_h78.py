"""Issue #16, round-19 audit (BB#18, AZ#11, BA#25): extensions and CUDA-only imports reported once
where the port is one piece of work (npu_migrate/extfolds19.py). Each fold is paired with the
nearest case that keeps its findings."""

from __future__ import annotations

from .precision_helpers import migrate_json, write_project

KERNEL = """\
#include <torch/extension.h>
__global__ void k_{name}(float* out, const float* in, int n) {{
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = in[i];
}}
"""


def _open(report: dict, code: str) -> dict[str, list[dict]]:
    found: dict[str, list[dict]] = {}
    for f in report["findings"]:
        if f["code"] == code and not f["fixable"]:
            found.setdefault(f["path"], []).append(f)
    return found


# ----------------------------------------------------------------------------- BB#18: extensions imported in one try

SETUP = """\
from setuptools import setup
from torch.utils.cpp_extension import BuildExtension, CUDAExtension

setup(
    name="qpack",
    ext_modules=[
        CUDAExtension("qpack_cuda_64", ["ext/cuda_64/qpack_64.cpp", "ext/cuda_64/qpack_kernel_64.cu"]),
        CUDAExtension("qpack_cuda_256", ["ext/cuda_256/qpack_256.cpp", "ext/cuda_256/qpack_kernel_256.cu"]),
    ],
    cmdclass={"build_ext": BuildExtension},
)
"""

TOGETHER = """\
import torch

try:
    import qpack_cuda_64
    import qpack_cuda_256

    _available = True
except ImportError:
    qpack_cuda_64 = None
    qpack_cuda_256 = None
    _available = False


def matmul(x, w, bits64=True):
    if _available:
        return (qpack_cuda_64 if bits64 else qpack_cuda_256).matmul(x, w)
    return x @ w
"""

APART = """\
import torch

try:
    import qpack_cuda_64
except ImportError:
    qpack_cuda_64 = None

try:
    import qpack_cuda_256
except ImportError:
    qpack_cuda_256 = None


def matmul(x, w, bits64=True):
    ext = qpack_cuda_64 if bits64 else qpack_cuda_256
    if ext is not None:
        return ext.matmul(x, w)
    return x @ w
"""


def _qpack(tmp_path, qlinear: str):
    return write_project(tmp_path, {
        "setup.py": SETUP,
        "ext/cuda_64/qpack_64.cpp": "#include <torch/extension.h>\n",
        "ext/cuda_64/qpack_kernel_64.cu": KERNEL.format(name="a"),
        "ext/cuda_256/qpack_256.cpp": "#include <torch/extension.h>\n",
        "ext/cuda_256/qpack_kernel_256.cu": KERNEL.format(name="b"),
        "qpack/__init__.py": "",
        "qpack/qlinear.py": qlinear,
    })


def test_extensions_imported_in_one_try_are_one_finding(tmp_path):
    found = _open(migrate_json(_qpack(tmp_path, TOGETHER)), "NPU912")
    assert set(found) == {"ext/cuda_64/qpack_kernel_64.cu"}
    (kept,) = found["ext/cuda_64/qpack_kernel_64.cu"]
    assert kept["severity"] == "info"
    assert "`ext/cuda_256/qpack_kernel_256.cu` (the extension `qpack_cuda_256`, line 5)" in kept["message"]
    assert "imported in the same `try` (line 3)" in kept["message"]


def test_extensions_imported_in_separate_trys_keep_their_findings(tmp_path):
    found = _open(migrate_json(_qpack(tmp_path, APART)), "NPU912")
    assert set(found) == {"ext/cuda_64/qpack_kernel_64.cu", "ext/cuda_256/qpack_kernel_256.cu"}
    assert all("same `try`" not in f["message"] for fs in found.values() for f in fs)


# ----------------------------------------------------------------------------- AZ#11: sources an extension class lists

BASE = """\
import os


class _CudaExtension:
    def __init__(self, name):
        self.name = name

    def csrc_abs_path(self, path):
        return os.path.join(os.path.dirname(__file__), "csrc", path)

    def load(self):
        from torch.utils.cpp_extension import load

        return load(name=self.name, sources=self.sources_files())
"""

OPTIM = """\
from ..base import _CudaExtension


class FusedOptimCudaExtension(_CudaExtension):
    def __init__(self):
        super().__init__(name="fused_optim_cuda")

    def sources_files(self):
        return [
            self.csrc_abs_path(fname)
            for fname in [
                "kernel/cuda/sgd_kernel.cu",
                "kernel/cuda/adam_kernel.cu",
                "kernel/cuda/lamb_kernel.cu",
            ]
        ]
"""

SOFTMAX = """\
from ..base import _CudaExtension


class SoftmaxCudaExtension(_CudaExtension):
    def __init__(self):
        super().__init__(name="softmax_cuda")

    def sources_files(self):
        return [self.csrc_abs_path("kernel/cuda/softmax_kernel.cu")]


class MaskedSoftmaxCudaExtension(_CudaExtension):
    def __init__(self):
        super().__init__(name="masked_softmax_cuda")

    def sources_files(self):
        return [self.csrc_abs_path(f) for f in ["kernel/cuda/masked_kernel.cu", "kernel/cuda/adam_kernel.cu"]]
"""


def test_sources_an_extension_class_lists_are_one_finding(tmp_path):
    files = {"exts/__init__.py": "", "exts/base.py": BASE, "exts/optim/__init__.py": "",
             "exts/optim/fused_optim.py": OPTIM}
    for name in ("sgd", "adam", "lamb"):
        files[f"exts/csrc/kernel/cuda/{name}_kernel.cu"] = KERNEL.format(name=name)
    found = _open(migrate_json(write_project(tmp_path, files)), "NPU912")
    assert set(found) == {"exts/csrc/kernel/cuda/sgd_kernel.cu"}
    (kept,) = found["exts/csrc/kernel/cuda/sgd_kernel.cu"]
    assert kept["severity"] == "error"
    assert "3 CUDA sources of the extension `fused_optim_cuda`" in kept["message"]
    assert "`FusedOptimCudaExtension.sources_files`" in kept["message"]
    assert "`exts/csrc/kernel/cuda/adam_kernel.cu`, `exts/csrc/kernel/cuda/lamb_kernel.cu`" in kept["message"]


def test_sources_of_different_extensions_keep_their_findings(tmp_path):
    files = {"exts/__init__.py": "", "exts/base.py": BASE, "exts/optim/__init__.py": "",
             "exts/optim/fused_optim.py": OPTIM, "exts/softmax/__init__.py": "",
             "exts/softmax/softmax.py": SOFTMAX}
    for name in ("sgd", "adam", "lamb", "softmax", "masked"):
        files[f"exts/csrc/kernel/cuda/{name}_kernel.cu"] = KERNEL.format(name=name)
    found = _open(migrate_json(write_project(tmp_path, files)), "NPU912")
    # sgd and lamb fold (one extension); adam is listed by two extensions, softmax's extension lists
    # one source, masked's other source is adam's: each keeps its own finding
    assert set(found) == {"exts/csrc/kernel/cuda/sgd_kernel.cu", "exts/csrc/kernel/cuda/adam_kernel.cu",
                          "exts/csrc/kernel/cuda/softmax_kernel.cu", "exts/csrc/kernel/cuda/masked_kernel.cu"}
    assert "also `exts/csrc/kernel/cuda/lamb_kernel.cu`" in found["exts/csrc/kernel/cuda/sgd_kernel.cu"][0]["message"]
    assert "reported once" not in found["exts/csrc/kernel/cuda/masked_kernel.cu"][0]["message"]


# ----------------------------------------------------------------------------- BA#25: sibling scripts, one cause

BENCH = """\
import torch
from sgl_kernel import {name}_op as aot_op


def reference(x):
    from flashinfer import rmsnorm

    return rmsnorm(x, torch.ones(x.shape[-1]))


def bench(x):
    return aot_op(x), reference(x)


if __name__ == "__main__":
    bench(torch.randn(8, 16))
"""

LIBRARY = """\
import torch
from sgl_kernel import {name}_op as aot_op


def reference(x):
    from flashinfer import rmsnorm

    return rmsnorm(x, torch.ones(x.shape[-1]))


def run(x):
    return aot_op(x), reference(x)
"""


def test_sibling_scripts_failing_on_one_import_are_one_finding(tmp_path):
    files = {f"bench/bench_{n}.py": BENCH.format(name=n) for n in ("alpha", "beta", "gamma")}
    report = migrate_json(write_project(tmp_path, files))
    found = _open(report, "NPU911")
    assert set(found) == {"bench/bench_alpha.py"}
    (kept,) = found["bench/bench_alpha.py"]
    assert kept["severity"] == "error" and kept["line"] == 2
    assert "the other modules of this folder that import" in kept["message"]
    assert "`bench_beta.py` (with 1 more line reached only after that import)" in kept["message"]
    assert "`bench_gamma.py`" in kept["message"]


def test_library_modules_with_other_lines_keep_their_findings(tmp_path):
    files = {f"ops/{n}.py": LIBRARY.format(name=n) for n in ("alpha", "beta")}
    found = _open(migrate_json(write_project(tmp_path, files)), "NPU911")
    assert set(found) == {"ops/alpha.py", "ops/beta.py"}
    assert all("the other modules of this folder" not in f["message"] for fs in found.values() for f in fs)


def test_scripts_in_different_folders_keep_their_findings(tmp_path):
    files = {"bench/a/bench_alpha.py": BENCH.format(name="alpha"), "bench/b/bench_beta.py": BENCH.format(name="beta")}
    found = _open(migrate_json(write_project(tmp_path, files)), "NPU911")
    assert set(found) == {"bench/a/bench_alpha.py", "bench/b/bench_beta.py"}


# ----------------------------------------------------------------------------- BB#6: a lazy import another file reports

DISPATCH = """\
def init_backend(cfg, use_replay=False):
    kernel = None
    if use_replay and cfg.backend == "flashinfer":
        try:
            from flashinfer.mamba.checkpointing_ssu import checkpointing_ssu
        except ImportError as e:
            raise ImportError("the replay backend requires a compatible flashinfer") from e
        kernel = checkpointing_ssu
    return kernel
"""

BUILDER = """\
class Builder:
    def __init__(self, cfg):
        self.use_fi = cfg.use_replay and cfg.backend == "flashinfer"
        self.scratch = None
        if self.use_fi:
            from flashinfer.mamba.{module} import allocate_scratch

            self.scratch = allocate_scratch(4)
"""


def test_lazy_import_of_a_submodule_another_file_reports_is_folded(tmp_path):
    root = write_project(tmp_path, {"pkg/__init__.py": "", "pkg/ops/dispatch.py": DISPATCH,
                                    "pkg/attn/builder.py": BUILDER.format(module="checkpointing_ssu")})
    found = _open(migrate_json(root), "NPU911")
    assert set(found) == {"pkg/ops/dispatch.py"}
    (kept,) = found["pkg/ops/dispatch.py"]
    assert kept["severity"] == "error"
    assert ("also imported lazily, in a branch, at `pkg/attn/builder.py:6` (`flashinfer.mamba.checkpointing_ssu`)"
            in kept["message"])


def test_lazy_import_of_another_submodule_keeps_its_finding(tmp_path):
    root = write_project(tmp_path, {"pkg/__init__.py": "", "pkg/ops/dispatch.py": DISPATCH,
                                    "pkg/attn/builder.py": BUILDER.format(module="scratch_alloc")})
    found = _open(migrate_json(root), "NPU911")
    assert set(found) == {"pkg/ops/dispatch.py", "pkg/attn/builder.py"}
    assert "also imported lazily" not in found["pkg/ops/dispatch.py"][0]["message"]
