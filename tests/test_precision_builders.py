"""Issue #16, round-9 audits: CUDA op builders and extensions that the project's own NPU route keeps
off an NPU host (npu_migrate/builders.py). (a) an accelerator that takes its builders from an
NPU builder folder: the CUDA builders of the parent folder, twin or not, and the `.cu`/`.cuh`
files only they list; (b) a CUDA extension class whose `is_available()` is
`torch.cuda.is_available()` beside an NPU extension of the same family in a loader; (c) a `.cu`
file without a kernel. Each false shape becomes a named scope (or info); the nearby true case
stays a finding."""

from __future__ import annotations

from pathlib import Path

from .precision_helpers import migrate_json, moot_lines, write_project

BASE = """\
import os


class OpBuilder:
    def sources(self):
        return []


class CUDAOpBuilder(OpBuilder):
    def nvcc_args(self):
        return ["-O3"]
"""

FUSED = """\
import os

from .builder import CUDAOpBuilder


class FusedBuilder(CUDAOpBuilder):
    def sources(self):
        return ["csrc/fused/fused_kernel.cu"]

    def include_paths(self):
        import torch
        return [os.path.join(torch.utils.cpp_extension.CUDA_HOME, "include")]
"""

# no NPU twin: the accelerator returns its not-implemented builder
LAYERS = """\
import os

from .builder import CUDAOpBuilder


class LayersBuilder(CUDAOpBuilder):
    def sources(self):
        return ["csrc/layers/layer_kernels.cu", "csrc/layers/softmax_kernels.cu", "kernels/linear/linear_cuda.cu"]

    def extra_ldflags(self):
        import torch.utils.cpp_extension
        CUDA_HOME = torch.utils.cpp_extension.CUDA_HOME
        return [f"-L{CUDA_HOME}"]
"""

# imported directly by the package, not through the accelerator: it may run on an NPU host
DIRECT = """\
import os

from .builder import CUDAOpBuilder


class DirectBuilder(CUDAOpBuilder):
    def sources(self):
        return ["csrc/direct/direct_kernel.cu"]

    def include_paths(self):
        import torch
        return [os.path.join(torch.utils.cpp_extension.CUDA_HOME, "include")]
"""

NPU_BASE = """\
from ..builder import OpBuilder


class NPUOpBuilder(OpBuilder):
    def sources(self):
        return []
"""

NPU_FUSED = """\
from .builder import NPUOpBuilder


class FusedBuilder(NPUOpBuilder):
    def load(self):
        return None
"""

NPU_NO_IMPL = """\
from .builder import NPUOpBuilder


class NotImplementedBuilder(NPUOpBuilder):
    def load(self):
        raise ValueError("not implemented on NPU")
"""

ACCELERATOR = """\
import importlib


class NPU_Accelerator:
    def op_builder_dir(self):
        return "mypkg.ops.op_builder.npu"

    def get_op_builder(self, name):
        module = importlib.import_module(self.op_builder_dir())
        return getattr(module, name, getattr(module, "NotImplementedBuilder"))
"""

USER = """\
from mypkg.ops.op_builder.direct import DirectBuilder


def load():
    return DirectBuilder().load()
"""

KERNEL = """\
__global__ void scale(float *x, float a, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) x[i] *= a;
}
"""


def _kernel(name: str) -> str:
    """A kernel of its own (byte-identical `.cu` files are reported once)."""
    return KERNEL.replace("scale", name)

HEADER = """\
template <typename T>
__device__ T twice(T x) { return x + x; }
"""


def _project(tmp_path: Path, accelerator: bool = True) -> Path:
    files = {
        "mypkg/ops/op_builder/__init__.py": "",
        "mypkg/ops/op_builder/builder.py": BASE,
        "mypkg/ops/op_builder/fused.py": FUSED,
        "mypkg/ops/op_builder/layers.py": LAYERS,
        "mypkg/ops/op_builder/direct.py": DIRECT,
        "mypkg/ops/op_builder/npu/__init__.py": "from .fused import FusedBuilder\nfrom .no_impl import NotImplementedBuilder\n",
        "mypkg/ops/op_builder/npu/builder.py": NPU_BASE,
        "mypkg/ops/op_builder/npu/fused.py": NPU_FUSED,
        "mypkg/ops/op_builder/npu/no_impl.py": NPU_NO_IMPL,
        "mypkg/ops/direct_user.py": USER,
        "csrc/fused/fused_kernel.cu": _kernel("fused_kernel"),
        "csrc/layers/layer_kernels.cu": _kernel("layer_kernels"),
        "csrc/layers/softmax_kernels.cu": _kernel("softmax_kernels"),
        "csrc/direct/direct_kernel.cu": _kernel("direct_kernel"),
        "mypkg/kernels/linear/linear_cuda.cu": _kernel("linear_cuda"),
        "mypkg/kernels/linear/include/matmul.cuh": HEADER,
        "mypkg/kernels/linear/include/reduce.cuh": HEADER,
        "csrc/other/standalone.cu": _kernel("standalone"),
    }
    if accelerator:
        files["mypkg/accelerator/npu_accelerator.py"] = ACCELERATOR
    return write_project(tmp_path, files)


def _findings(report: dict, path: str, code: str | None = None) -> list[dict]:
    return [f for f in report["findings"] if f["path"] == path and not f["fixable"] and (code is None or f["code"] == code)]


def test_builders_of_an_accelerator_selected_folder_are_scopes_twin_or_not(tmp_path: Path) -> None:
    report = migrate_json(_project(tmp_path))
    skipped = report["skipped"]
    # the CUDA builder with an NPU twin: its CUDA_HOME use is a named scope
    assert not _findings(report, "mypkg/ops/op_builder/fused.py", "NPU911"), report["findings"]
    fused = moot_lines(skipped, "NPU911", "mypkg/ops/op_builder/fused.py")
    assert 12 in fused and "`FusedBuilder` (mypkg/ops/op_builder/npu/fused.py) derives from `NPUOpBuilder`" in fused[12]
    # the CUDA builder without one: the accelerator returns its not-implemented builder
    assert not _findings(report, "mypkg/ops/op_builder/layers.py", "NPU911"), report["findings"]
    layers = moot_lines(skipped, "NPU911", "mypkg/ops/op_builder/layers.py")
    assert any("has no `LayersBuilder`" in r and "`NotImplementedBuilder`" in r for r in layers.values()), skipped
    # the twin's sources: named scopes, not one error per file
    assert not _findings(report, "csrc/fused/fused_kernel.cu", "NPU912"), report["findings"]
    assert 1 in moot_lines(skipped, "NPU912", "csrc/fused/fused_kernel.cu"), skipped
    # the sources of the builder without a twin (headers of a source's folder too): an op the
    # project leaves out on NPU, one info finding per op on its first .cu file, naming the others,
    # which are scopes pointing at it
    layer = _findings(report, "csrc/layers/layer_kernels.cu", "NPU912")
    assert [f["severity"] for f in layer] == ["info"], report["findings"]
    assert "an op not built for NPU" in layer[0]["message"] and "leaves this op out on NPU" in layer[0]["message"] and "has no `LayersBuilder`" in layer[0]["message"]
    for path in ("csrc/layers/softmax_kernels.cu", "mypkg/kernels/linear/linear_cuda.cu",
                 "mypkg/kernels/linear/include/matmul.cuh"):  # (reduce.cuh: byte-identical, reported once)
        assert path in layer[0]["message"], (path, layer[0]["message"])
        assert not _findings(report, path, "NPU912"), (path, report["findings"])
        assert "reported once, at csrc/layers/layer_kernels.cu" in moot_lines(skipped, "NPU912", path)[1], (path, skipped)
    # true cases stay: a builder the package imports directly, its source, and a .cu no builder lists
    assert _findings(report, "mypkg/ops/op_builder/direct.py", "NPU911"), report["findings"]
    assert [f["severity"] for f in _findings(report, "csrc/direct/direct_kernel.cu", "NPU912")] == ["error"]
    assert [f["severity"] for f in _findings(report, "csrc/other/standalone.cu", "NPU912")] == ["error"]


def test_builders_stay_without_an_accelerator_naming_the_npu_folder(tmp_path: Path) -> None:
    report = migrate_json(_project(tmp_path, accelerator=False))
    assert _findings(report, "mypkg/ops/op_builder/layers.py", "NPU911"), report["findings"]
    assert [f["severity"] for f in _findings(report, "csrc/layers/layer_kernels.cu", "NPU912")] == ["error"]


def test_a_source_listed_outside_the_builders_stays(tmp_path: Path) -> None:
    root = _project(tmp_path)
    (root / "setup.py").write_text('SOURCES = ["csrc/layers/layer_kernels.cu"]\n')
    report = migrate_json(root)
    assert [f["severity"] for f in _findings(report, "csrc/layers/layer_kernels.cu", "NPU912")] == ["error"]
    # the op's other sources: one info finding, now on the first of them
    assert [f["severity"] for f in _findings(report, "csrc/layers/softmax_kernels.cu", "NPU912")] == ["info"], report["findings"]


BASE_EXTENSION = """\
class _Extension:
    def is_available(self):
        return False

    def load(self):
        return None
"""

CUDA_EXTENSION = """\
import os

from .base_extension import _Extension


class _CudaExtension(_Extension):
    def is_available(self):
        try:
            import torch
            available = torch.cuda.is_available() or bool(os.environ.get("FORCE_CUDA", 0))
        except ImportError:
            available = False
        return available

    def include_dirs(self):
        from torch.utils.cpp_extension import CUDA_HOME

        return [os.path.join(CUDA_HOME, "include")]


class _OtherExtension(_Extension):
    def include_dirs(self):
        from torch.utils.cpp_extension import CUDA_HOME

        return [os.path.join(CUDA_HOME, "include")]
"""

NPU_EXTENSION = """\
from .base_extension import _Extension


class AttentionNpuExtension(_Extension):
    def is_available(self):
        try:
            import torch_npu  # noqa: F401
            return True
        except ImportError:
            return False
"""

LAYERNORM = """\
from .cuda_extension import _CudaExtension


class LayerNormCudaExtension(_CudaExtension):
    def sources(self):
        return []
"""

LOADER = """\
from .extensions.layernorm import LayerNormCudaExtension
from .extensions.npu_attention import AttentionNpuExtension


class KernelLoader:
    REGISTRY = [LayerNormCudaExtension, AttentionNpuExtension]

    def load(self):
        for ext in self.REGISTRY:
            if ext().is_available():
                return ext().load()
"""


def test_cuda_extension_beside_npu_extensions_in_a_loader_is_a_scope(tmp_path: Path) -> None:
    files = {"kernel/__init__.py": "", "kernel/extensions/__init__.py": "",
             "kernel/extensions/base_extension.py": BASE_EXTENSION,
             "kernel/extensions/cuda_extension.py": CUDA_EXTENSION,
             "kernel/extensions/npu_attention.py": NPU_EXTENSION,
             "kernel/extensions/layernorm.py": LAYERNORM,
             "kernel/kernel_loader.py": LOADER}
    report = migrate_json(write_project(tmp_path, files))
    path = "kernel/extensions/cuda_extension.py"
    scopes = moot_lines(report["skipped"], "NPU911", path)
    lines = CUDA_EXTENSION.splitlines()
    ours, other = (i + 1 for i, line in enumerate(lines) if "import CUDA_HOME" in line)
    assert ours in scopes and "`_CudaExtension.is_available()` is `torch.cuda.is_available()`" in scopes[ours], report["skipped"]
    assert "`AttentionNpuExtension`" in scopes[ours]
    # the class whose availability is not the CUDA check keeps its finding
    kept = [f["line"] for f in _findings(report, path, "NPU911")]
    kept += [line for f in _findings(report, path, "NPU911") for line in _also(f["message"])]
    assert other in kept and ours not in kept, report["findings"]
    # without the NPU sibling, the CUDA extension's finding stays
    del files["kernel/extensions/npu_attention.py"]
    files["kernel/kernel_loader.py"] = LOADER.replace("from .extensions.npu_attention import AttentionNpuExtension\n", "") \
        .replace(", AttentionNpuExtension", "")
    alone = migrate_json(write_project(tmp_path / "alone", files))
    lines = [f["line"] for f in _findings(alone, path, "NPU911")]
    assert ours in lines + [n for f in _findings(alone, path, "NPU911") for n in _also(f["message"])], alone["findings"]


def _also(message: str) -> list[int]:
    import re

    match = re.search(r"\(also at lines? ([\d, ]+)\)", message)
    return [int(n) for n in match.group(1).split(",")] if match else []


VERSION_ONLY = """\
#include <tuple>

namespace {
std::tuple<int, int> build_version() {
  return std::make_tuple(__CUDACC_VER_MAJOR__, __CUDACC_VER_MINOR__);
}
}  // namespace
"""

RUNTIME_ONLY = """\
#include <vector>

int device_count() {
  int n = 0;
  cudaGetDeviceCount(&n);
  return n;
}
"""


def test_a_cu_file_without_a_kernel_is_info(tmp_path: Path) -> None:
    report = migrate_json(write_project(tmp_path, {"csrc/nvcc_version.cu": VERSION_ONLY,
                                                   "csrc/device_info.cu": RUNTIME_ONLY,
                                                   "csrc/kernel.cu": KERNEL}))
    # (nothing to port since round 18: a named "no port work" scope, no finding)
    assert _findings(report, "csrc/nvcc_version.cu", "NPU912") == [], report["findings"]
    version = [s for s in report["skipped"] if s["path"] == "csrc/nvcc_version.cu" and "(NPU912)" in s["reason"]]
    assert version and version[0]["reason"].startswith("no port work on an NPU host"), report["skipped"]
    assert "no kernel in the file" in version[0]["reason"] and "`__CUDACC_VER_MAJOR__`" in version[0]["reason"]
    # a CUDA runtime call, or a kernel: the error stays
    assert [f["severity"] for f in _findings(report, "csrc/device_info.cu", "NPU912")] == ["error"]
    assert [f["severity"] for f in _findings(report, "csrc/kernel.cu", "NPU912")] == ["error"]


FLASH_EXTENSION = """\
from .base_extension import _Extension


class FlashCudaExtension(_Extension):
    def is_available(self):
        try:
            import torch
            from flash_attn import flash_attn_func  # noqa: F401

            available = torch.cuda.is_available()
        except ImportError:
            available = False
        return available

    def load(self):
        from flash_attn.bert_padding import pad_input

        return pad_input
"""


def test_a_rewritten_availability_check_keeps_the_extension_reported(tmp_path: Path) -> None:
    """An `is_available()` the migration rewrites (`npu_compat.is_available()`, with flash-attn
    mapped to the shim) is true on an NPU host: the extension may be selected there, so its
    findings stay."""
    files = {"kernel/__init__.py": "", "kernel/extensions/__init__.py": "",
             "kernel/extensions/base_extension.py": BASE_EXTENSION,
             "kernel/extensions/flash_cuda.py": FLASH_EXTENSION,
             "kernel/extensions/npu_attention.py": NPU_EXTENSION,
             "kernel/kernel_loader.py": LOADER.replace("from .extensions.layernorm import LayerNormCudaExtension",
                                                       "from .extensions.flash_cuda import FlashCudaExtension")
             .replace("LayerNormCudaExtension,", "FlashCudaExtension,")}
    report = migrate_json(write_project(tmp_path, files))
    path = "kernel/extensions/flash_cuda.py"
    assert any(f["path"] == path and f["fixable"] and f["code"] == "NPU201" for f in report["findings"]), report["findings"]
    assert not moot_lines(report["skipped"], None, path), report["skipped"]
    assert _findings(report, path, "NPU502"), report["findings"]


def test_a_cu_file_including_a_kernel_header_stays_an_error(tmp_path: Path) -> None:
    dispatcher = '#include "gemm_launcher.cuh"\n\nvoid run_gemm(int m) { launch_gemm(m); }\n'
    report = migrate_json(write_project(tmp_path, {
        "csrc/gemm/gemm_entry.cu": dispatcher,
        "csrc/gemm/gemm_launcher.cuh": "template <int M> __global__ void gemm() {}\nvoid launch_gemm(int m);\n",
        "csrc/mm/mm_entry.cu": '#include "mm_kernels.hpp"\n\nvoid mm(int m) { cutlass_mm_sm90(m); }\n',
        "csrc/mm/mm_kernels.hpp": "void cutlass_mm_sm90(int m);\n",
        "csrc/nvcc_version.cu": VERSION_ONLY}))
    assert [f["severity"] for f in _findings(report, "csrc/gemm/gemm_entry.cu", "NPU912")] == ["error"], report["findings"]
    # a host dispatcher of CUTLASS kernels declared in a `.hpp` header stays too
    assert [f["severity"] for f in _findings(report, "csrc/mm/mm_entry.cu", "NPU912")] == ["error"], report["findings"]
    assert _findings(report, "csrc/nvcc_version.cu", "NPU912") == []  # (a named "no port work" scope)


def test_a_source_a_kept_builder_also_lists_stays(tmp_path: Path) -> None:
    """A source that the directly imported builder lists too may be built on an NPU host."""
    root = _project(tmp_path)
    direct = root / "mypkg/ops/op_builder/direct.py"
    direct.write_text(DIRECT.replace('"csrc/direct/direct_kernel.cu"', '"csrc/direct/direct_kernel.cu", "csrc/layers/layer_kernels.cu"'))
    report = migrate_json(root)
    assert [f["severity"] for f in _findings(report, "csrc/layers/layer_kernels.cu", "NPU912")] == ["error"], report["findings"]
    assert [f["severity"] for f in _findings(report, "csrc/layers/softmax_kernels.cu", "NPU912")] == ["info"], report["findings"]
