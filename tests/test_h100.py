"""Precision wave 23, helper h100 (issue #16): findings of tests and benchmarks that only exercise a
project CUDA JIT kernel fold into that kernel's NPU912 (npu_migrate/jitfolds23.py; round-23 audits
BM#23, BM#29). Each false case is paired with the nearest true case that stays reported."""

from __future__ import annotations

from tests.precision_helpers import migrate_json, write_project
from tests.test_h94 import PLATFORM  # (the same is_npu/is_cuda utilities: one fixture)

JIT_UTILS = '''\
def load_jit(name, *args, cuda_files=(), cuda_wrappers=()):
    from tvm_ffi.cpp import load_inline

    return load_inline(name, cuda_sources=[open(f).read() for f in cuda_files])
'''

JIT_QUANT = '''\
from proj.kern.utils import load_jit


def _quant_module(dtype):
    return load_jit("quant_fp8", dtype, cuda_files=["gemm/quant_fp8.cuh"], cuda_wrappers=[("quant", "run")])


def quant_fp8(x, out, scale, is_static=False):
    _quant_module(x.dtype).quant(x.view(-1), out.view(-1), scale)
'''

JIT_NORM = '''\
from proj.kern.utils import load_jit


def _norm_module(hidden):
    return load_jit("rmsnorm", hidden, cuda_files=["norm/rmsnorm.cuh"], cuda_wrappers=[("rmsnorm", "run")])


def rmsnorm(x, w, output=None):
    _norm_module(x.shape[-1]).rmsnorm(x, w, output)
'''

KERNEL = "__global__ void {name}_kernel(float* x) {{ x[threadIdx.x] = 1.0f; }}\n"

BENCH = '''\
import torch

from proj.kern.quant import quant_fp8

try:
    from proj.platform import is_hip

    _is_hip = is_hip()
except ImportError:
    _is_hip = False

fp8_type_ = torch.float8_e4m3fnuz if _is_hip else torch.float8_e4m3fn


def sglang_quant(x, scale=None):
    fp8_type_: torch.dtype = torch.float8_e4m3fn
    output = torch.empty_like(x, device=x.device, dtype=fp8_type_)
    if scale is None:
        scale = torch.zeros(1, device=x.device, dtype=torch.float32)
    quant_fp8(x, output, scale){extra}
    return output, scale


def run(n):
    x = torch.randn(n, 4096, dtype=torch.float16)
    out, scale = sglang_quant(x)
    return out.to(torch.float32)
'''

NORM_TEST = '''\
import pytest
import torch


def jit_rmsnorm(x, w):
    from proj.kern.{module} import rmsnorm

    rmsnorm(x, w, output=x)


def reference_rmsnorm(x, w):
    from flashinfer.norm import rmsnorm

    rmsnorm(x, w, out=x)


@pytest.mark.parametrize("n", [8, 16])
def test_rmsnorm(n):
    x = torch.randn(n, n)
    w = torch.randn(n)
    a, b = x.clone(), x.clone()
    jit_rmsnorm(a, w)
    reference_rmsnorm(b, w)
    torch.testing.assert_close(a, b)
'''

PORTABLE_NORM = '''\
import torch


def rmsnorm(x, w, output=None):
    output.copy_(x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * w)
'''


LAYERS = '''\
from proj.kern.norm import rmsnorm
from proj.kern.quant import quant_fp8


def norm_then_quant(x, w, out, scale):
    rmsnorm(x, w, output=x)
    quant_fp8(x, out, scale)
'''


def _project(tmp_path, bench_extra="", quant=JIT_QUANT, files=None):
    return migrate_json(write_project(tmp_path, {
        "proj/__init__.py": "",
        "proj/layers.py": LAYERS,
        "proj/kern/__init__.py": "",
        "proj/kern/utils.py": JIT_UTILS,
        "proj/kern/quant.py": quant,
        "proj/kern/norm.py": JIT_NORM,
        "proj/kern/ref.py": PORTABLE_NORM,
        "proj/kern/csrc/gemm/quant_fp8.cuh": KERNEL.format(name="quant"),
        "proj/kern/csrc/norm/rmsnorm.cuh": KERNEL.format(name="rmsnorm"),
        "proj/kern/benchmark/bench_quant_fp8.py": BENCH.format(extra=bench_extra),
        "proj/kern/tests/test_norm.py": NORM_TEST.format(module="norm"),
        "proj/kern/tests/test_ref.py": NORM_TEST.format(module="ref"),
        **(files or {}),
    }))


def _findings(report, path, code=None):
    return [f for f in report["findings"] if f["path"] == path and (code is None or f["code"] == code)
            and not f["fixable"]]


def _kernel_finding(report, path):
    found = _findings(report, path, "NPU912")
    assert len(found) == 1, found
    return found[0]


def test_fp8_output_buffer_of_a_jit_kernel_in_a_benchmark_folds_into_its_source(tmp_path):
    report = _project(tmp_path)
    assert _findings(report, "proj/kern/benchmark/bench_quant_fp8.py", "NPU913") == []
    target = _kernel_finding(report, "proj/kern/csrc/gemm/quant_fp8.cuh")
    assert target["severity"] == "error"
    assert "`proj/kern/benchmark/bench_quant_fp8.py` (lines 12, 16)" in target["message"]
    assert "CUDA JIT kernel `quant_fp8` compiled from this source" in target["message"]


def test_fp8_output_also_used_by_fp8_compute_beside_the_kernel_stays(tmp_path):
    report = _project(tmp_path, bench_extra="\n    torch._scaled_mm(output, output.t())")
    found = _findings(report, "proj/kern/benchmark/bench_quant_fp8.py", "NPU913")
    assert found and all(f["severity"] == "error" for f in found)
    assert "bench_quant_fp8" not in _kernel_finding(report, "proj/kern/csrc/gemm/quant_fp8.cuh")["message"]


def test_fp8_for_a_jit_kernel_with_an_npu_path_stays(tmp_path):
    quant = JIT_QUANT.replace("def quant_fp8(x, out, scale, is_static=False):\n",
                              "def quant_fp8(x, out, scale, is_static=False):\n    if x.device.type == \"npu\":\n"
                              "        return torch_npu.npu_quantize(x, scale)\n")
    report = _project(tmp_path, quant=quant)
    found = _findings(report, "proj/kern/benchmark/bench_quant_fp8.py", "NPU913")
    assert found and all(f["severity"] == "error" for f in found)


def test_module_level_fp8_constant_read_elsewhere_keeps_the_finding(tmp_path):
    # (`run` reads the module constant: FP8 work of the benchmark's own, not the kernel's buffer)
    bench = BENCH.format(extra="").replace("return out.to(torch.float32)", "return out.to(fp8_type_)")
    report = _project(tmp_path, files={"proj/kern/benchmark/bench_quant_fp8.py": bench})
    found = _findings(report, "proj/kern/benchmark/bench_quant_fp8.py", "NPU913")
    assert found and all(f["severity"] == "error" for f in found)
    assert "bench_quant_fp8" not in _kernel_finding(report, "proj/kern/csrc/gemm/quant_fp8.cuh")["message"]


def test_reference_import_in_a_jit_kernel_test_folds_into_the_kernel_source(tmp_path):
    report = _project(tmp_path)
    assert _findings(report, "proj/kern/tests/test_norm.py", "NPU911") == []
    target = _kernel_finding(report, "proj/kern/csrc/norm/rmsnorm.cuh")
    assert "(NPU911) in `proj/kern/tests/test_norm.py` (line 12)" in target["message"]
    assert "CUDA JIT kernel `rmsnorm` compiled from this source" in target["message"]
    # the same reference in a test of portable code stays an error
    (kept,) = _findings(report, "proj/kern/tests/test_ref.py", "NPU911")
    assert kept["severity"] == "error"


# ------------------------------------------------- BM#16: JIT sources whose loader's every library use is gated

NPU_INIT = """\
from proj.srt.utils import is_npu

_is_npu = is_npu()
if _is_npu:
    import torch_npu  # noqa: F401
    from torch_npu.contrib import transfer_to_npu  # noqa: F401
"""

HICACHE = '''\
from proj.jit_kernel.utils import load_jit


def _module(size):
    return load_jit("hicache", size, cuda_files=["hicache.cuh"], cuda_wrappers=[("transfer", "run")])


def can_use_hicache(size):
    return size % 8 == 0


def transfer_one_layer(src, dst, size):
    _module(size).transfer(src, dst)
'''

ADD_CONSTANT = '''\
from proj.jit_kernel.utils import load_jit


def _module(c):
    return load_jit("add_constant", c, cuda_files=["add_constant.cuh"], cuda_wrappers=[("add", "run")])


def add_constant(x, c):
    _module(c).add(x)
'''

ADD_CONSTANT_TEST = '''\
import torch

from proj.jit_kernel.add_constant import add_constant


def test_add_constant():
    x = torch.zeros(8)
    add_constant(x, 1)
    assert x.sum() == 8
'''

HOST_POOL = '''\
from proj.jit_kernel.hicache import can_use_hicache, transfer_one_layer
from proj.srt.utils import is_cuda

_is_cuda = is_cuda()


class HostPool:
    def __init__(self, size):
        self.size = size
        self.can_use_jit = _is_cuda and can_use_hicache(size)

    def load(self, src, dst):
        if self.can_use_jit:
            transfer_one_layer(src, dst, self.size)
        else:
            dst.copy_(src)
'''


def _gated_project(tmp_path, host_pool=HOST_POOL, files=None):
    return migrate_json(write_project(tmp_path, {
        "proj/__init__.py": "",
        "proj/srt/__init__.py": "",
        "proj/srt/utils.py": PLATFORM,
        "proj/srt/npu_init.py": NPU_INIT,
        "proj/srt/host_pool.py": host_pool,
        "proj/jit_kernel/__init__.py": "",
        "proj/jit_kernel/utils.py": JIT_UTILS,
        "proj/jit_kernel/hicache.py": HICACHE,
        "proj/jit_kernel/add_constant.py": ADD_CONSTANT,
        "proj/jit_kernel/csrc/hicache.cuh": KERNEL.format(name="hicache"),
        "proj/jit_kernel/csrc/add_constant.cuh": KERNEL.format(name="add_constant"),
        "proj/jit_kernel/tests/test_add_constant.py": ADD_CONSTANT_TEST,
        **(files or {}),
    }))


def _scope_reasons(report, code="NPU912"):
    return [s["reason"] for s in report["skipped"] if f"({code})" in s.get("reason", "")]


def test_jit_headers_whose_loaders_run_only_under_a_cuda_gate_are_a_scope(tmp_path):
    # (the demo kernel's loader imported by a library module under the same gate)
    gated_demo = HOST_POOL.replace("from proj.srt.utils import is_cuda\n",
                                   "from proj.srt.utils import is_cuda\n"
                                   "from proj.jit_kernel.add_constant import add_constant\n") + \
        "\n\ndef warm(x):\n    if _is_cuda:\n        add_constant(x, 0)\n"
    report = _gated_project(tmp_path, gated_demo)
    assert [f for f in report["findings"] if f["code"] == "NPU912"] == []
    (reason,) = [r for r in _scope_reasons(report) if "JIT loaders whose every library use" in r]
    assert "proj/srt/host_pool.py:11 (after `_is_cuda and`, False there)" in reason
    assert "proj/srt/host_pool.py:15" in reason and "self.can_use_jit" in reason
    assert "proj/srt/host_pool.py:22 (`_is_cuda` is False there" in reason


def test_jit_header_whose_loader_no_library_module_imports_is_info_naming_its_tests(tmp_path):
    # the demo kernel only its test compiles: a user may call the loader on an NPU host, so the
    # finding stays (no scope), but as info naming who imports it (wave 27's policies P2/P3,
    # jitcallers27.py; until then an error)
    report = _gated_project(tmp_path)
    (found,) = [f for f in report["findings"] if f["code"] == "NPU912"]
    assert found["severity"] == "info"
    assert "only from tests/benchmarks (proj/jit_kernel/tests/test_add_constant.py:3)" in found["message"]
    assert not [r for r in _scope_reasons(report) if "JIT loaders" in r]


def test_jit_header_whose_loader_library_code_calls_ungated_stays(tmp_path):
    # the nearest true case: the pool asks only the kernel's own check, an NPU host runs the call
    report = _gated_project(tmp_path, HOST_POOL.replace("_is_cuda and can_use_hicache", "can_use_hicache"))
    found = [f for f in report["findings"] if f["code"] == "NPU912"]
    assert found and all(f["severity"] == "error" for f in found)


def test_jit_header_whose_loader_a_library_module_calls_stays(tmp_path):
    user = "from proj.jit_kernel.add_constant import add_constant\n\n\ndef bump(x):\n    add_constant(x, 1)\n"
    report = _gated_project(tmp_path, files={"proj/srt/bump.py": user})
    found = [f for f in report["findings"] if f["code"] == "NPU912"]
    assert found and all(f["severity"] == "error" for f in found)


# ------------------------------------------------- BM#32: an extension only unused autograd Functions load

CUDA_EXTENSION = '''\
class _CudaExtension:
    def __init__(self, name):
        self.name = name

    def csrc_abs_path(self, path):
        return "csrc/" + path

    def is_available(self):
        import torch

        return torch.cuda.is_available()
'''

MOE_EXTENSION = '''\
from .cuda_extension import _CudaExtension


class MoeCudaExtension(_CudaExtension):
    def __init__(self):
        super().__init__(name="moe_cuda")

    def sources_files(self):
        return [self.csrc_abs_path(f) for f in ["kernel/cuda/moe_kernel.cu"]]
'''

EXTENSIONS_INIT = '''\
from .moe_cuda import MoeCudaExtension

ALL_EXTENSIONS = [MoeCudaExtension]

__all__ = ["MoeCudaExtension"]
'''

SETUP = '''\
import os

from setuptools import setup

ext_modules = []
if os.environ.get("BUILD_EXT") == "1":
    from proj.kernel.extensions import ALL_EXTENSIONS

    for ext_cls in ALL_EXTENSIONS:
        ext = ext_cls()
        if ext.is_available():
            ext_modules.append(ext.build_aot())

setup(name="proj", ext_modules=ext_modules)
'''

KERNEL_LOADER = '''\
from .extensions import MoeCudaExtension


class KernelLoader:
    REGISTRY = []

    def load(self):
        for ext in self.REGISTRY:
            if ext().is_available():
                return ext().load()
        raise RuntimeError("no kernel")


class MoeLoader(KernelLoader):
    REGISTRY = [MoeCudaExtension]
'''

OPERATION = '''\
import torch

MOE_KERNEL = None


def load_moe():
    global MOE_KERNEL
    from proj.kernel.kernel_loader import MoeLoader

    MOE_KERNEL = MoeLoader().load()


class AllGather(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return x


class MoeDispatch(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        if MOE_KERNEL is None:
            load_moe()
        return MOE_KERNEL.dispatch_forward(x)
'''

LAYER = '''\
from proj.moe._operation import AllGather


def gather(x):
    return AllGather.apply(x)
'''


def _extension_project(tmp_path, layer=LAYER):
    return migrate_json(write_project(tmp_path, {
        "setup.py": SETUP,
        "proj/__init__.py": "",
        "proj/kernel/__init__.py": "",
        "proj/kernel/extensions/__init__.py": EXTENSIONS_INIT,
        "proj/kernel/extensions/cuda_extension.py": CUDA_EXTENSION,
        "proj/kernel/extensions/moe_cuda.py": MOE_EXTENSION,
        "proj/kernel/extensions/csrc/kernel/cuda/moe_kernel.cu": KERNEL.format(name="moe"),
        "proj/kernel/kernel_loader.py": KERNEL_LOADER,
        "proj/moe/__init__.py": "",
        "proj/moe/_operation.py": OPERATION,
        "proj/moe/layer.py": layer,
    }))


def test_cu_of_an_extension_only_an_unused_autograd_function_loads_is_a_scope(tmp_path):
    report = _extension_project(tmp_path)
    assert [f for f in report["findings"] if f["code"] == "NPU912"] == []
    (reason,) = [r for r in _scope_reasons(report) if "never loads" in r]
    assert "`MoeCudaExtension` (proj/kernel/extensions/moe_cuda.py:4)" in reason
    assert "`MoeDispatch` (proj/moe/_operation.py:19)" in reason


def test_cu_of_an_extension_an_applied_autograd_function_loads_stays(tmp_path):
    # the nearest true case: a layer applies the Function, so the kernel is loaded
    layer = LAYER.replace("import AllGather", "import AllGather, MoeDispatch") + \
        "\n\ndef dispatch(x):\n    return MoeDispatch.apply(x)\n"
    report = _extension_project(tmp_path, layer)
    (found,) = [f for f in report["findings"] if f["code"] == "NPU912"]
    assert found["severity"] == "error"


def test_cu_of_an_extension_whose_loader_helper_is_public_and_unused_stays(tmp_path):
    # the chain ends in an ordinary public function nothing in the run calls: the library's API
    operation = OPERATION.replace("        if MOE_KERNEL is None:\n            load_moe()\n", "")
    files_report = migrate_json(write_project(tmp_path, {
        "setup.py": SETUP, "proj/__init__.py": "", "proj/kernel/__init__.py": "",
        "proj/kernel/extensions/__init__.py": EXTENSIONS_INIT,
        "proj/kernel/extensions/cuda_extension.py": CUDA_EXTENSION,
        "proj/kernel/extensions/moe_cuda.py": MOE_EXTENSION,
        "proj/kernel/extensions/csrc/kernel/cuda/moe_kernel.cu": KERNEL.format(name="moe"),
        "proj/kernel/kernel_loader.py": KERNEL_LOADER, "proj/moe/__init__.py": "",
        "proj/moe/_operation.py": operation, "proj/moe/layer.py": LAYER,
    }))
    (found,) = [f for f in files_report["findings"] if f["code"] == "NPU912"]
    assert found["severity"] == "error"


def test_cuda_source_a_setup_script_builds_is_no_jit_loader(tmp_path):
    # a build's `CUDAExtension(sources=[...])` in setup.py, imported by nothing: not a JIT loader
    setup = ('from setuptools import setup\nfrom torch.utils.cpp_extension import CUDAExtension\n\n'
             'setup(name="proj", ext_modules=[CUDAExtension("proj._C", sources=["proj/csrc/fused.cu"])])\n')
    report = migrate_json(write_project(tmp_path, {
        "setup.py": setup, "proj/__init__.py": "", "proj/csrc/fused.cu": KERNEL.format(name="fused"),
    }))
    (found,) = [f for f in report["findings"] if f["code"] == "NPU912"]
    assert found["severity"] == "error" and "JIT loaders" not in found["message"]
