"""Wave-21 helper h92: wording, severity and single cases left from rounds 20-21 (issue #16)."""

from __future__ import annotations

from tests.precision_helpers import findings_at, migrate_json, write_project


def test_sdp_kernel_that_only_switches_fast_kernels_off_is_info(tmp_path):
    """Round 21 BG#33: `sdp_kernel(enable_flash=False, enable_mem_efficient=False, enable_math=True)`
    keeps the math backend; an NPU host ignores the switch: info saying so (still reported: math
    may have been chosen for double backward, test_precision_resolved keeps it a finding). Turning
    math off (only a fast kernel may run) stays a warning."""
    root = write_project(tmp_path, {"gen.py": (
        "import torch\n"
        "import torch.nn.functional as F\n"
        "\n"
        "\n"
        "def step(q, k, v):\n"
        "    with torch.backends.cuda.sdp_kernel(\n"
        "        enable_flash=False, enable_mem_efficient=False, enable_math=True\n"
        "    ):\n"
        "        return F.scaled_dot_product_attention(q, k, v)\n"
        "\n"
        "\n"
        "def fast(q, k, v):\n"
        "    with torch.backends.cuda.sdp_kernel(enable_flash=True, enable_math=False):\n"
        "        return F.scaled_dot_product_attention(q, k, v)\n"
    )})
    report = migrate_json(root)
    found = findings_at(report, "gen.py", "NPU405")
    assert found[6]["severity"] == "info"
    assert "only switches CUDA fast kernels off and keeps the math backend on" in found[6]["message"]
    assert found[13]["severity"] == "warning"


_GPTQ_LIKE = (
    "import torch\n"
    "\n"
    "\n"
    "class Base:\n"
    "    @classmethod\n"
    "    def from_pretrained(cls, path):\n"
    "        \"\"\"load an unquantized model to cpu\"\"\"\n"
    "        if not torch.cuda.is_available():\n"
    "            raise EnvironmentError(\"quantization requires CUDA available.\")\n"
    "        return cls(torch.load(path, map_location=\"cpu\"))\n"
    "\n"
    "    @classmethod\n"
    "    def from_quantized(cls, path):\n"
    "        if not EXT_AVAILABLE:\n"
    "            print(\"kernels missing: CUDA and nvcc are not installed\")\n"
    "        return cls(path)\n"
    "\n"
)
# the nearest true case: the method holding the check calls the class's compiling method
_BUILDS = (
    "import torch\n"
    "\n"
    "\n"
    "class Builder:\n"
    "    def build(self):\n"
    "        if not torch.cuda.is_available():\n"
    "            raise RuntimeError(\"building the kernels needs CUDA\")\n"
    "        return self._compile()\n"
    "\n"
    "    def _compile(self):\n"
    "        return load(name=\"k\", sources=[\"k.cu\"])\n"
)


def test_raise_guard_in_a_method_without_extension_of_its_own_asks_to_widen(tmp_path):
    """Round 21 BF#29: `if not torch.cuda.is_available(): raise` in a method whose own body (and
    what it calls of the class) builds or loads no CUDA extension: the class-level evidence of a
    sibling method does not make it CUDA-only code; the warning asks to widen. A method that
    calls the class's compiling method keeps the message."""
    report = migrate_json(write_project(tmp_path, {"base.py": _GPTQ_LIKE, "builder.py": _BUILDS}))
    found = findings_at(report, "base.py", "NPU110")
    assert found[8]["severity"] == "warning"
    assert found[8]["message"].startswith("Device check turns an NPU host away")
    assert "`from_pretrained`, which uses no CUDA extension itself" in found[8]["message"]
    assert "widen the check to the NPU" in found[8]["message"]
    assert "also at" not in found[8]["message"]
    kept = findings_at(report, "builder.py", "NPU110")[6]
    assert kept["message"].startswith("Device check guards CUDA-only code (the class `Builder` builds")


_KERNEL = (
    "try:\n"
    "    import triton\n"
    "    import triton.language as tl\n"
    "\n"
    "    HAS_TRITON = True\n"
    "except ImportError:\n"
    "    HAS_TRITON = False\n"
    "\n"
    "if HAS_TRITON:\n"
    "\n"
    "    @triton.jit\n"
    "    def _kernel(X, N: tl.constexpr):\n"
    "        pass\n"
    "\n"
    "    def {name}(x):\n"
    "        _kernel[(1,)](x, 4)\n"
    "        return x\n"
)
_KERNELS_INIT = (
    "try:\n"
    "    import triton\n"
    "\n"
    "    HAS_TRITON = True\n"
    "except ImportError:\n"
    "    HAS_TRITON = False\n"
    "\n"
    "if HAS_TRITON:\n"
    "    from .rmsnorm import rmsnorm\n"
    "    from .softmax import softmax\n"
)


def test_package_attribute_named_like_its_submodule_is_no_unguarded_import_of_it(tmp_path):
    """Round 21 BF#4: `from pkg.kernels import rmsnorm` imports the package's attribute (bound
    under `if HAS_TRITON:` from the same-named submodule), not the submodule: the module that
    guards Triton itself gets the sibling modules' info. The nearest true case: `from
    pkg.kernels.softmax import softmax` imports the submodule itself, unguarded, and the name
    is bound there only under `if HAS_TRITON:`: an error."""
    root = write_project(tmp_path, {
        "pkg/__init__.py": "",
        "pkg/kernels/__init__.py": _KERNELS_INIT,
        "pkg/kernels/rmsnorm.py": _KERNEL.replace("{name}", "rmsnorm"),
        "pkg/kernels/softmax.py": _KERNEL.replace("{name}", "softmax"),
        "pkg/model.py": "from pkg.kernels import rmsnorm\n\n\ndef norm(x):\n    return rmsnorm(x)\n",
        "pkg/other.py": "from pkg.kernels.softmax import softmax\n\n\ndef act(x):\n    return softmax(x)\n",
    })
    report = migrate_json(root)
    rms = findings_at(report, "pkg/kernels/rmsnorm.py", "NPU910")[2]
    assert rms["severity"] == "info" and "every use of it under `if HAS_TRITON:`" in rms["message"]
    assert findings_at(report, "pkg/kernels/softmax.py", "NPU910")[2]["severity"] == "error"


def test_host_only_cu_helper_folds_into_its_caller_of_the_same_gated_build(tmp_path):
    """Round 21 BG#18: a `.cu` with no kernel and no registration, whose functions a reported
    `.cu` of the same CUDA-gated build calls, folds into that caller's finding, which names it.
    The nearest true case: a host-only `.cu` whose function no reported source calls (it may be
    an op a binding file registers) keeps its own finding."""
    from tests.test_precision_round17c import GATED_SETUP, HOST_HELPER, HOST_OP, USER

    root = write_project(tmp_path, {
        "setup.py": GATED_SETUP,
        "csrc/props.h": "#pragma once\ncudaDeviceProp* proj_device_props(int device);\n",
        "csrc/props.cu": HOST_HELPER,
        "csrc/scale.cu": USER,
        "csrc/attr.cu": HOST_OP,
    })
    report = migrate_json(root)
    assert not findings_at(report, "csrc/props.cu", "NPU912")
    caller = findings_at(report, "csrc/scale.cu", "NPU912")[1]
    assert "(also `props.cu`, host code with no kernel that it calls, compiled by the same build)" in caller["message"]
    assert findings_at(report, "csrc/attr.cu", "NPU912")[1]["severity"] == "info"


_EXT_SETUP = (
    "from setuptools import setup\n"
    "from torch.utils.cpp_extension import BuildExtension, CUDAExtension\n"
    "\n"
    "setup(\n"
    "    name=\"pkg\",\n"
    "    ext_modules=[CUDAExtension(\"fastk\", [\"kern/buffers.cu\", \"kern/matmul.cu\"])],\n"
    "    cmdclass={\"build_ext\": BuildExtension},\n"
    ")\n"
)
_GUARDED_LAYER = (
    "import torch.nn as nn\n"
    "\n"
    "try:\n"
    "    from fastk import q_matmul_cuda\n"
    "except ImportError as e:\n"
    "    _error = e\n"
    "\n"
    "    def q_matmul_cuda(*args, **kwargs):\n"
    "        raise ValueError(f\"the fastk extension could not be imported: {_error}\")\n"
    "\n"
    "\n"
    "class FastLinear(nn.Module):\n"
    "    def forward(self, x):\n"
    "        return q_matmul_cuda(x)\n"
)
_HELPER = (
    "from ..layers.{module} import {cls}\n"
    "\n"
    "\n"
    "def set_max_length(model, length):\n"
    "    from fastk import prepare_buffers_cuda\n"
    "\n"
    "    if not any(isinstance(m, {cls}) for m in model.modules()):\n"
    "        raise ValueError(\"only models with these layers need this\")\n"
    "    prepare_buffers_cuda(length)\n"
)


def test_lazy_extension_import_in_a_helper_for_its_guarded_layer_folds_into_the_extension(tmp_path):
    """Round 21 BG#15: a lazy `from ext import ...` in a helper valid only for layers whose module
    imports the same extension in a `try` folds into the extension's NPU912 finding, which names
    it. The nearest true case: the same helper for a layer whose module imports the extension
    unguarded keeps its finding."""
    root = write_project(tmp_path, {
        "setup.py": _EXT_SETUP,
        "kern/buffers.cu": "#include <torch/extension.h>\n__global__ void k(float* x) { x[0] = 0; }\n"
                           "void prepare_buffers_cuda(torch::Tensor t) { k<<<1, 1>>>(t.data_ptr<float>()); }\n",
        "kern/matmul.cu": "__global__ void mm(float* x) { x[0] *= 2; }\n",
        "pkg/__init__.py": "",
        "pkg/layers/__init__.py": "",
        "pkg/utils/__init__.py": "",
        "pkg/layers/fast_linear.py": _GUARDED_LAYER,
        "pkg/layers/plain.py": _GUARDED_LAYER.replace("try:\n    from fastk import q_matmul_cuda\nexcept", "from fastk import q_matmul_cuda\ntry:\n    pass\nexcept").replace("FastLinear", "PlainFast"),
        "pkg/utils/buffers.py": _HELPER.format(module="fast_linear", cls="FastLinear"),
        "pkg/utils/plain_buffers.py": _HELPER.format(module="plain", cls="PlainFast"),
    })
    report = migrate_json(root)
    assert not findings_at(report, "pkg/utils/buffers.py", "NPU911")
    source = findings_at(report, "kern/buffers.cu", "NPU912")[1]
    assert ("also its lazy import at `pkg/utils/buffers.py:5` in `set_max_length`, a helper valid only for "
            "`FastLinear` layers, whose module `pkg/layers/fast_linear.py` imports `fastk` in a `try`") in source["message"]
    assert findings_at(report, "pkg/utils/plain_buffers.py", "NPU911")[5]["severity"] == "error"


_PROFILE = (
    "import torch\n"
    "\n"
    "\n"
    "def start_profile(activities, log=print):\n"
    "    if \"CUDA_PROFILER\" in activities:\n"
    "        try:\n"
    "            torch.cuda.cudart().cudaProfilerStart()\n"
    "        except Exception as e:\n"
    "            log(f\"Failed to start CUDA profiler: {e}\")\n"
    "        return None\n"
    "    return torch.profiler.profile()\n"
    "\n"
    "\n"
    "def capture(log=print):\n"
    "    try:\n"
    "        torch.cuda.cudart().cudaProfilerStart()\n"
    "    except Exception as e:\n"
    "        log(f\"Failed to start CUDA profiler: {e}\")\n"
)


def test_cuda_profiler_mode_selected_by_the_tool_name_in_a_reporting_try_is_info(tmp_path):
    """Round 21 BG#37: `torch.cuda.cudart()` under `if "CUDA_PROFILER" in activities:`, in a `try`
    whose `except Exception` prints the failure: an opt-in NVIDIA profiler mode, info naming the
    test. The nearest true case: the same caught call with no option selecting it stays a warning."""
    report = migrate_json(write_project(tmp_path, {"bench.py": _PROFILE}))
    found = findings_at(report, "bench.py", "NPU202")
    assert found[7]["severity"] == "info"
    assert "run only when `\"CUDA_PROFILER\" in activities` selects it by name" in found[7]["message"]
    assert found[16]["severity"] == "warning"


_OPS = (
    "import torch\n"
    "\n"
    "lib = torch.library.Library(\"myops\", \"DEF\")\n"
    "lib.define(\"scale(Tensor x, float s) -> Tensor\")\n"
    "lib.define(\"shift(Tensor x, float s) -> Tensor\")\n"
    "lib.define(\"clip(Tensor x) -> Tensor\")\n"
    "\n"
    "\n"
    "@torch.library.impl(lib, \"scale\", \"CUDA\")\n"
    "def scale_cuda(x, s):\n"
    "    return x * s\n"
    "\n"
    "\n"
    "@torch.library.impl(lib, \"shift\", \"CUDA\")\n"
    "def shift_cuda(x, s):\n"
    "    return x + s\n"
    "\n"
    "\n"
    "@torch.library.impl(lib, \"shift\", \"CompositeExplicitAutograd\")\n"
    "def shift_any(x, s):\n"
    "    return x + s\n"
    "\n"
    "\n"
    "if HAS_EXT:\n"
    "    lib.impl(\"clip\", lambda x: x.clamp(0, 1), \"CUDA\")\n"
    "\n"
    "\n"
    "@torch.library.impl(\"otherns::gemm\", [\"CUDA\"])\n"
    "def gemm_cuda(a, b):\n"
    "    return a @ b\n"
)


def test_op_registered_for_the_cuda_dispatch_key_only_is_reported(tmp_path):
    """Left-over of round 21: `@torch.library.impl(lib, "scale", "CUDA")` of an op the file defines
    and registers for CUDA only: an error (a call with NPU tensors finds no kernel); under an `if`,
    a warning naming it. The nearest true non-findings: an op with a CompositeExplicitAutograd kernel
    too, an op the file does not define (its other kernels may be registered elsewhere), and the
    same registrations in the project's CUDA backend module (`backends/cuda/`)."""
    report = migrate_json(write_project(tmp_path, {"ops.py": _OPS, "backends/cuda/ops.py": _OPS}))
    found = findings_at(report, "ops.py", "NPU990")
    assert found[9]["severity"] == "error"
    assert "for the op `scale`, which the file defines and registers for CUDA only" in found[9]["message"]
    assert found[25]["severity"] == "warning" and "registered only when `HAS_EXT` holds (line 24)" in found[25]["message"]
    assert 14 not in found and 19 not in found and 28 not in found
    assert not findings_at(report, "backends/cuda/ops.py", "NPU990")  # (the project's CUDA backend module)


_LOADER = (
    "class KernelLoader:\n"
    "    REGISTRY = []\n"
    "\n"
    "    def load(self):\n"
    "        exts = [cls() for cls in self.__class__.REGISTRY if cls().is_available()]\n"
    "        assert len(exts) != 0, f\"No usable kernel found for {self.__class__.__name__}\"\n"
    "        return exts[0].load()\n"
    "\n"
    "\n"
    "class InferenceOpsLoader(KernelLoader):\n"
    "    REGISTRY = [InferenceOpsCudaExtension]\n"
    "\n"
    "\n"
    "class LayerNormLoader(KernelLoader):\n"
    "    REGISTRY = [LayerNormCudaExtension, LayerNormCpuExtension]\n"
)


def test_module_level_load_of_a_cuda_only_kernel_loader_is_reported(tmp_path):
    """Left-over of round 21 (ColossalAI's nopadding_llama.py): `ops = InferenceOpsLoader().load()`
    at module level, the loader's registry CUDA-only and its `load` asserting: an NPU911 error at
    the call (the module fails at import on an NPU host). Left alone: the same call in a `try`, a
    loader with a CPU extension, and a test module."""
    model = ("import torch\n"
             "from pkg.kernel_loader import InferenceOpsLoader, LayerNormLoader\n"
             "\n"
             "inference_ops = InferenceOpsLoader().load()\n"
             "norm_ops = LayerNormLoader().load()\n"
             "try:\n"
             "    other_ops = InferenceOpsLoader().load()\n"
             "except AssertionError:\n"
             "    other_ops = None\n"
             "\n"
             "\n"
             "def forward(x):\n"
             "    return inference_ops.rms(x)\n")
    report = migrate_json(write_project(tmp_path, {
        "pkg/__init__.py": "",
        "pkg/kernel_loader.py": _LOADER,
        "pkg/model.py": model,
        "tests/test_model.py": model,
    }))
    found = findings_at(report, "pkg/model.py", "NPU911")
    assert found[4]["severity"] == "error"
    assert found[4]["message"].startswith(
        "C++/CUDA extension or CUDA-only compiled package: `InferenceOpsLoader().load()` at module level, whose "
        "registry lists only CUDA extensions (`InferenceOpsCudaExtension`; pkg/kernel_loader.py:10)")
    assert "on an NPU host this module fails at import" in found[4]["message"]
    assert 5 not in found and 7 not in found
    assert not findings_at(report, "tests/test_model.py", "NPU911")
