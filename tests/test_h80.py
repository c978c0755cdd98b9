"""Code reached only through a project's CUDA/ROCm platform class (issue #16, round 20: BC#7, BD#7,
AZ#1): info naming the class and the registry line (npu_migrate/platforms20.py). Each shape is
paired with the nearest case that stays reported."""

from __future__ import annotations

from .precision_helpers import migrate_json, write_project

# shape 1: a dict of plugin functions, each probing one device and returning a class path
REGISTRY = '''\
import os


def cuda_plugin():
    is_cuda = False
    try:
        import pynvml

        pynvml.nvmlInit()
        is_cuda = pynvml.nvmlDeviceGetCount() > 0
    except Exception:
        pass
    return "proj.platforms.cuda.CudaPlatform" if is_cuda else None


def cpu_plugin():
    return "proj.platforms.cpu.CpuPlatform" if os.environ.get("PROJ_CPU") else None


plugins = {"cuda": cuda_plugin, "cpu": cpu_plugin}
'''

CUDA_PLATFORM = '''\
import torch


def _device_count():
    return torch.cuda._device_count_nvml()


class CudaPlatform:
    device_type = "cuda"

    @classmethod
    def device_count(cls):
        return _device_count()

    @classmethod
    def get_wrapper_cls(cls):
        return "proj.lora.wrapper_gpu.WrapperGPU"
'''

CPU_PLATFORM = '''\
class CpuPlatform:
    @classmethod
    def get_wrapper_cls(cls):
        return "proj.lora.wrapper_cpu.WrapperCPU"
'''

WRAPPER_GPU = '''\
import torch


class WrapperGPU:
    def sync(self):
        torch.cuda._sleep(10)
'''

WRAPPER_CPU = '''\
class WrapperCPU:
    pass
'''

RUNNER = '''\
from proj.lora.wrapper_gpu import WrapperGPU


def build():
    return WrapperGPU()
'''


def _files(**extra):
    files = {
        "proj/__init__.py": "",
        "proj/platforms/__init__.py": REGISTRY,
        "proj/platforms/cuda.py": CUDA_PLATFORM,
        "proj/platforms/cpu.py": CPU_PLATFORM,
        "proj/lora/__init__.py": "",
        "proj/lora/wrapper_gpu.py": WRAPPER_GPU,
        "proj/lora/wrapper_cpu.py": WRAPPER_CPU,
    }
    files.update(extra)
    return files


def _open(report: dict, path: str) -> dict[int, dict]:
    """The report-only findings of `path`, and (as info) the named scopes that platforms20's infos
    became since round 23 (platformlayer23.PLATFORM_ONLY)."""
    from npu_migrate.platformlayer23 import PLATFORM_ONLY

    out = {f["line"]: f for f in report["findings"] if f["path"] == path and not f["fixable"]}
    for scope in report["skipped"]:
        if scope.get("path") == path and "start_line" in scope and PLATFORM_ONLY in scope["reason"]:
            out.setdefault(scope["start_line"], {"severity": "info", "message": scope["reason"]})
    return out


def test_cuda_platform_module_and_what_only_it_names_are_info(tmp_path):
    """vLLM's platforms/cuda.py (BC#7) and punica_gpu.py (AZ#1): the registry's CUDA plugin returns
    "proj.platforms.cuda.CudaPlatform" only after an NVML probe; the module is named nowhere else,
    and the wrapper module only by that class's method: both become info naming the class and the
    registry line."""
    report = migrate_json(write_project(tmp_path, _files()))
    platform = _open(report, "proj/platforms/cuda.py")
    assert platform and all(f["severity"] == "info" for f in platform.values()), platform
    message = platform[5]["message"]
    assert "reached only through the CUDA platform class" in message, message
    assert "`CudaPlatform` (proj/platforms/cuda.py)" in message and "proj/platforms/__init__.py:13" in message
    wrapper = _open(report, "proj/lora/wrapper_gpu.py")
    assert wrapper and all(f["severity"] == "info" for f in wrapper.values()), wrapper
    assert "first at proj/platforms/cuda.py:17" in wrapper[6]["message"], wrapper[6]["message"]
    # named scopes since round 23 (BM#8, platformlayer23.py), not findings: an NPU host selects its own
    # platform class, which implements its own answer
    assert not [f for f in report["findings"] if not f["fixable"] and f["path"] in (
        "proj/platforms/cuda.py", "proj/lora/wrapper_gpu.py")], report["findings"]


def test_a_module_also_imported_by_code_that_runs_on_npu_keeps_its_findings(tmp_path):
    """The nearest true case: the same wrapper imported by a runner module (not platform code) is
    loaded on an NPU host, so its finding stays an error; the platform module's own stay info."""
    report = migrate_json(write_project(tmp_path, _files(**{"proj/runner.py": RUNNER})))
    wrapper = _open(report, "proj/lora/wrapper_gpu.py")
    assert wrapper[6]["severity"] != "info", wrapper
    assert all(f["severity"] == "info" for f in _open(report, "proj/platforms/cuda.py").values())


def test_without_a_registry_or_a_device_probe_nothing_changes(tmp_path):
    """A lone function returning the class path (no registry of devices), or a registry whose
    entry has no device probe (an environment flag): the platform module keeps its errors."""
    lone = REGISTRY.replace('plugins = {"cuda": cuda_plugin, "cpu": cpu_plugin}\n', "")
    report = migrate_json(write_project(tmp_path, _files(**{"proj/platforms/__init__.py": lone})))
    assert _open(report, "proj/platforms/cuda.py")[5]["severity"] != "info"
    no_probe = REGISTRY.replace("pynvml.nvmlDeviceGetCount() > 0", 'os.environ.get("PROJ_GPU") == "1"') \
        .replace("import pynvml\n\n        pynvml.nvmlInit()\n", "pass\n")
    report = migrate_json(write_project(tmp_path / "b", _files(**{"proj/platforms/__init__.py": no_probe})))
    assert _open(report, "proj/platforms/cuda.py")[5]["severity"] != "info"


# shape 2 (written for this pass): one resolver, an `if` chain of probes, a class path per device
RESOLVER = '''\
import torch


def resolve_backend_cls():
    if getattr(torch.version, "hip", None):
        return "proj.hw.rocm_backend.RocmBackend"
    if torch.cuda.is_available():
        return "proj.hw.fast.CudaBackend"
    if hasattr(torch, "npu") and torch.npu.is_available():
        return "proj.hw.other.NpuBackend"
    return "proj.hw.base.Backend"
'''

CUDA_BACKEND = '''\
import torch

from proj.hw.base import Backend


class CudaBackend(Backend):
    def attention_cls(self):
        from proj.hw.kernels import fused_attention

        return fused_attention

    def stream(self):
        return torch.cuda.ExternalStream(0)
'''

NPU_BACKEND = '''\
from proj.hw.base import Backend


class NpuBackend(Backend):
    pass
'''

BASE = '''\
import torch


class Backend:
    def sync(self):
        torch.cuda._sleep(1)
'''

KERNELS = '''\
import torch


def fused_attention(q):
    return torch.cuda._sleep(int(q))
'''


def _resolver_files(**extra):
    files = {
        "proj/__init__.py": "",
        "proj/hw/__init__.py": RESOLVER,
        "proj/hw/fast.py": CUDA_BACKEND,
        "proj/hw/other.py": NPU_BACKEND,
        "proj/hw/rocm_backend.py": "class RocmBackend:\n    pass\n",
        "proj/hw/base.py": BASE,
        "proj/hw/kernels.py": KERNELS,
    }
    files.update(extra)
    return files


def test_if_chain_resolver_cuda_class_and_its_lazy_import_are_info(tmp_path):
    """Shape 2: the CUDA class (chosen under `torch.cuda.is_available()`) and the kernels module
    only its method imports lazily are info; the base class, which the NPU class and the
    unconditional fallback also use, keeps its finding."""
    report = migrate_json(write_project(tmp_path, _resolver_files()))
    backend = _open(report, "proj/hw/fast.py")
    assert backend and all(f["severity"] == "info" for f in backend.values()), backend
    assert "proj/hw/__init__.py:8" in backend[13]["message"]
    kernels = _open(report, "proj/hw/kernels.py")
    assert kernels[5]["severity"] == "info" and "first at proj/hw/fast.py:8" in kernels[5]["message"]
    assert _open(report, "proj/hw/base.py")[6]["severity"] != "info"


def test_if_chain_resolver_kernels_also_imported_from_the_npu_class_stay(tmp_path):
    """The nearest true case: the NPU backend imports the same kernels module, so an NPU host
    loads it: its finding stays."""
    npu = NPU_BACKEND.replace("from proj.hw.base import Backend\n",
                              "from proj.hw.base import Backend\nfrom proj.hw.kernels import fused_attention\n")
    report = migrate_json(write_project(tmp_path, _resolver_files(**{"proj/hw/other.py": npu})))
    assert _open(report, "proj/hw/kernels.py")[5]["severity"] != "info"
    assert _open(report, "proj/hw/fast.py")[13]["severity"] == "info"


PLUGIN_XPU = '''

def xpu_plugin():
    import torch

    return "proj.platforms.xpu.XpuPlatform" if torch.xpu.is_available() else None


def npu_plugin():
    import torch

    return "proj.platforms.ascend.AscendPlatform" if torch.npu.is_available() else None


plugins.update(xpu=xpu_plugin, npu=npu_plugin)
'''

NAMES_WRAPPER = '''\
class {name}:
    @classmethod
    def get_wrapper_cls(cls):
        return "proj.lora.wrapper_gpu.WrapperGPU"
'''


def test_another_accelerators_platform_naming_the_module_keeps_it_unrun_an_npu_one_does_not(tmp_path):
    """vLLM's XPU platform also returns the GPU punica wrapper: an XPU probe (`torch.xpu`) is no NPU
    host either, so the wrapper stays info; a platform selected by `torch.npu.is_available()`
    that names it runs on an NPU host, and the wrapper's finding stays."""
    registry = REGISTRY.replace('plugins = {"cuda": cuda_plugin, "cpu": cpu_plugin}\n', "") + PLUGIN_XPU.replace(
        "plugins.update(xpu=xpu_plugin, npu=npu_plugin)", 'plugins = {"cuda": cuda_plugin, "cpu": cpu_plugin, "xpu": xpu_plugin}')
    extra = {"proj/platforms/__init__.py": registry, "proj/platforms/xpu.py": NAMES_WRAPPER.format(name="XpuPlatform")}
    report = migrate_json(write_project(tmp_path, _files(**extra)))
    assert _open(report, "proj/lora/wrapper_gpu.py")[6]["severity"] == "info"
    extra["proj/platforms/__init__.py"] = registry.replace('"xpu": xpu_plugin}', '"xpu": xpu_plugin, "npu": npu_plugin}')
    extra["proj/platforms/ascend.py"] = NAMES_WRAPPER.format(name="AscendPlatform")
    report = migrate_json(write_project(tmp_path / "b", _files(**extra)))
    assert _open(report, "proj/lora/wrapper_gpu.py")[6]["severity"] != "info"


ALIASED_PLATFORM = '''\
import torch


class CudaPlatformBase:
    @classmethod
    def get_wrapper_cls(cls):
        return "proj.lora.wrapper_gpu.WrapperGPU"


class NvmlCudaPlatform(CudaPlatformBase):
    @classmethod
    def device_count(cls):
        return torch.cuda._device_count_nvml()


class PlainCudaPlatform(CudaPlatformBase):
    pass


nvml_available = True
CudaPlatform = NvmlCudaPlatform if nvml_available else PlainCudaPlatform
'''


def test_an_aliased_platform_class_and_its_module_base(tmp_path):
    """SGLang's multimodal platforms/cuda.py: the registry names an alias that picks between two
    classes sharing a base in the module. The module is named only by the registry, so it is never
    loaded and what its base names is not either; a library module that imports the base keeps it
    loaded: the alias classes stay info, the wrapper the base names stays an error."""
    report = migrate_json(write_project(tmp_path, _files(**{"proj/platforms/cuda.py": ALIASED_PLATFORM})))
    assert _open(report, "proj/platforms/cuda.py")[13]["severity"] == "info"
    assert _open(report, "proj/lora/wrapper_gpu.py")[6]["severity"] == "info"
    runner = "from proj.platforms.cuda import CudaPlatformBase\n\nBASE = CudaPlatformBase\n"
    report = migrate_json(write_project(tmp_path / "b", _files(**{"proj/platforms/cuda.py": ALIASED_PLATFORM,
                                                                  "proj/runner.py": runner})))
    assert _open(report, "proj/platforms/cuda.py")[13]["severity"] == "info"
    assert _open(report, "proj/lora/wrapper_gpu.py")[6]["severity"] != "info"


def test_a_package_only_the_platform_class_imports_is_not_loaded_either(tmp_path):
    """vLLM's punica_gpu imports `vllm.lora.ops.triton_ops` (a package whose __init__ imports its
    kernels, which import each other by absolute name): the package's own modules are no sites of
    its __init__, so a package only the CUDA class imports is not loaded; an import of one of its
    modules from code that runs on an NPU host loads the package, and its findings stay."""
    kernels = {
        "proj/kern/__init__.py": "from proj.kern.ops import busy\n",
        "proj/kern/ops.py": "import torch\n\nfrom proj.kern.util import N\n\n\ndef busy():\n    torch.cuda._sleep(N)\n",
        "proj/kern/util.py": "N = 10\n",
        "proj/lora/wrapper_gpu.py": "from proj.kern import busy\n\n\nclass WrapperGPU:\n    pass\n",
    }
    report = migrate_json(write_project(tmp_path, _files(**kernels)))
    assert _open(report, "proj/kern/ops.py")[7]["severity"] == "info", report["findings"]
    kernels["proj/runner.py"] = "from proj.kern.util import N\n"
    report = migrate_json(write_project(tmp_path / "b", _files(**kernels)))
    assert _open(report, "proj/kern/ops.py")[7]["severity"] != "info"


def test_a_torch_cuda_probe_the_migration_rewrites_selects_no_cuda_class(tmp_path):
    """The nearest true case of shape 2: a resolver without an NPU branch, whose
    `torch.cuda.is_available()` the migration rewrites to ask for the NPU: in the migrated copy the
    CUDA class is the one an NPU host selects, so its findings stay. (An NVML probe is never rewritten.)"""
    resolver = RESOLVER.replace('''    if hasattr(torch, "npu") and torch.npu.is_available():
        return "proj.hw.other.NpuBackend"
''', "")
    report = migrate_json(write_project(tmp_path, _resolver_files(**{"proj/hw/__init__.py": resolver})))
    assert any(f["fixable"] and f["path"] == "proj/hw/__init__.py" for f in report["findings"]), report["findings"]
    assert _open(report, "proj/hw/fast.py")[13]["severity"] != "info"
    assert _open(report, "proj/hw/kernels.py")[5]["severity"] != "info"
