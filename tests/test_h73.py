"""Round 19 (issue #16): per-file findings that repeat one port item of an op family or a vendored
package (npu_migrate/folds19.py). Each test: the redundant findings fold into one that names them,
and the nearest true cases keep their own findings."""

from __future__ import annotations

from .precision_helpers import migrate_json, write_project

GATED_SETUP = """\
import glob
import torch
from setuptools import setup
from torch.utils.cpp_extension import CUDAExtension

ext_modules = []
if torch.cuda.is_available():
    sources = glob.glob("csrc/**/*.cu", recursive=True)
    ext_modules.append(CUDAExtension("proj._C", sources))
setup(name="proj", ext_modules=ext_modules)
"""


def _op(name: str) -> str:
    """A `.cu` with a kernel and an op it registers (no helper another source calls)."""
    return (
        "#include <torch/extension.h>\n"
        f"__global__ void {name}_kernel(float* x, int n) {{ x[threadIdx.x] *= 2.0f; }}\n"
        f"torch::Tensor {name}(torch::Tensor x) {{\n"
        f"  {name}_kernel<<<1, x.numel()>>>(x.data_ptr<float>(), x.numel());\n"
        "  return x;\n"
        "}\n"
        f"TORCH_LIBRARY_FRAGMENT(proj, m) {{ m.def(\"{name}\", &{name}); }}\n"
    )


def _npu912(report: dict) -> dict:
    return {f["path"]: f for f in report["findings"] if f["code"] == "NPU912" and not f["fixable"]}


def test_gated_sources_of_a_leaf_folder_and_arch_variants_fold_into_one(tmp_path):
    root = write_project(tmp_path, {
        "setup.py": GATED_SETUP,
        # a leaf folder of one op family: one finding
        "csrc/fp4/fp4_gemm.cu": _op("fp4_gemm"),
        "csrc/fp4/fp4_moe.cu": _op("fp4_moe"),
        "csrc/fp4/fp4_quant.cu": _op("fp4_quant"),
        # a folder with folders below it: a different op in each file, one finding each, but the
        # architecture variants of one kernel fold
        "csrc/layernorm.cu": _op("layernorm"),
        "csrc/rotary.cu": _op("rotary"),
        "csrc/scaled_mm_sm90.cu": _op("scaled_mm_sm90"),
        "csrc/scaled_mm_sm100.cu": _op("scaled_mm_sm100"),
    })
    found = _npu912(migrate_json(root))
    assert sorted(found) == ["csrc/fp4/fp4_gemm.cu", "csrc/layernorm.cu", "csrc/rotary.cu",
                             "csrc/scaled_mm_sm100.cu"], sorted(found)
    assert all(f["severity"] == "info" for f in found.values())
    folder = found["csrc/fp4/fp4_gemm.cu"]["message"]
    assert "the other 2 CUDA sources of `csrc/fp4/`" in folder and "`fp4_moe.cu`, `fp4_quant.cu`" in folder
    variants = found["csrc/scaled_mm_sm100.cu"]["message"]
    assert "1 other GPU-architecture variant of this kernel in `csrc/`" in variants
    assert "`scaled_mm_sm90.cu`" in variants
    assert "also" not in found["csrc/layernorm.cu"]["message"]


def test_a_folder_with_a_jit_built_source_keeps_a_finding_per_file(tmp_path):
    """A source a Python file builds with `cpp_extension.load` at run time keeps its finding, and the
    folder's gated sources are not folded into it or into each other."""
    root = write_project(tmp_path, {
        "setup.py": GATED_SETUP,
        "csrc/attn/attn_fwd.cu": _op("attn_fwd"),
        "csrc/attn/attn_bwd.cu": _op("attn_bwd"),
        "csrc/attn/attn_jit.cu": _op("attn_jit"),
        "proj/jit.py": ("from torch.utils import cpp_extension\n\n\ndef build():\n"
                        "    return cpp_extension.load('attn', ['csrc/attn/attn_jit.cu'])\n"),
    })
    found = _npu912(migrate_json(root))
    assert sorted(found) == ["csrc/attn/attn_bwd.cu", "csrc/attn/attn_fwd.cu", "csrc/attn/attn_jit.cu"]
    # (no file of the run imports the loader: public API nothing in the package reaches, so info
    # naming that, wave 27's policy P3, jitcallers27.py; until then an error)
    assert found["csrc/attn/attn_jit.cu"]["severity"] == "info"
    assert "no file of the run imports `proj/jit.py`" in found["csrc/attn/attn_jit.cu"]["message"]
    assert "also" not in found["csrc/attn/attn_bwd.cu"]["message"]


def test_ungated_sources_keep_their_errors(tmp_path):
    """No setup.py gating the build: every source's error stays (never folded, never lowered)."""
    root = write_project(tmp_path, {
        "csrc/fp4/fp4_gemm.cu": _op("fp4_gemm"),
        "csrc/fp4/fp4_moe.cu": _op("fp4_moe"),
    })
    found = _npu912(migrate_json(root))
    assert sorted(found) == ["csrc/fp4/fp4_gemm.cu", "csrc/fp4/fp4_moe.cu"]
    assert {f["severity"] for f in found.values()} == {"error"}


INIT = "import cutlass.cute as cute\n\nfrom .interface import run\n\n__all__ = ['run']\n"
INTERFACE = """\
import torch
import cutlass
import cutlass.cute as cute

from .helpers import check


def run(x):
    if not x.is_cuda:
        raise ValueError("CUDA only")
    return cute.compile(check(x))
"""
HELPERS = """\
import cutlass.cute as cute
import torch


def check(t):
    if not t.is_cuda:
        raise ValueError("CUDA only")
    return cute.Tensor(t)
"""
# loaded by the package too, but its finding holds a lazy import of another package: a failure of its own
LAZY = """\
import cutlass.cute as cute


def norm(x):
    if not x.is_cuda:
        raise ValueError("CUDA only")
    from flashinfer import rmsnorm
    return rmsnorm(cute.Tensor(x))
"""
# loaded by the package, but a script as well: run by its path, the package's __init__ never runs
SCRIPT = """\
import cutlass.cute as cute
import torch


def bench(x):
    if not x.is_cuda:
        raise ValueError("CUDA only")
    return cute.compile(x)


if __name__ == "__main__":
    bench(torch.ones(4))
"""
# not loaded by the package's __init__
UNLOADED = """\
import cutlass.cute as cute


def other(x):
    if not x.is_cuda:
        raise ValueError("CUDA only")
    from flashinfer import rmsnorm
    return rmsnorm(x)
"""


def _npu911(report: dict) -> dict:
    return {f["path"]: f for f in report["findings"] if f["code"] == "NPU911" and not f["fixable"]}


def test_submodules_a_failing_package_init_loads_fold_into_its_finding(tmp_path):
    root = write_project(tmp_path, {
        "pkg/cute/__init__.py": INIT.replace("from .interface import run",
                                             "from .interface import run\nfrom . import lazy, bench"),
        "pkg/cute/interface.py": INTERFACE,
        "pkg/cute/helpers.py": HELPERS,  # (loaded through interface.py)
        "pkg/cute/lazy.py": LAZY,
        "pkg/cute/bench.py": SCRIPT,
        "pkg/cute/other.py": UNLOADED,
        "pkg/user.py": "from pkg.cute.interface import run\n\n\ndef go(x):\n    return run(x)\n",
    })
    found = _npu911(migrate_json(root))
    assert sorted(found) == ["pkg/cute/__init__.py", "pkg/cute/bench.py", "pkg/cute/lazy.py",
                             "pkg/cute/other.py"], sorted(found)
    init = found["pkg/cute/__init__.py"]
    assert init["severity"] == "error"
    assert "submodules that this `__init__` loads unguarded at import" in init["message"]
    assert "`helpers.py` (import of `cutlass.cute`" in init["message"]
    assert "`interface.py` (import of `cutlass`, lines 2, 3, " in init["message"]
    assert all(f["severity"] == "error" for f in found.values())


def test_without_a_failing_init_submodules_keep_their_findings(tmp_path):
    """An `__init__` that does not import the CUDA-only package itself (it only re-exports): the
    package's submodules fail each on their own, and keep their findings."""
    root = write_project(tmp_path, {
        "pkg/cute/__init__.py": "from .interface import run\n",
        "pkg/cute/interface.py": INTERFACE,
        "pkg/cute/helpers.py": HELPERS,
    })
    found = _npu911(migrate_json(root))
    assert "pkg/cute/__init__.py" not in found
    assert "submodules" not in " ".join(f["message"] for f in found.values())
    assert len(found) >= 1


def test_a_folded_member_keeps_what_its_own_message_added(tmp_path):
    """A helper `.cu` srcfolds17 folded into one member of the folder: the folder's finding still
    names it (the member's note travels with the member's name), and the members fold though their
    messages differ after the gate."""
    helper = ("__global__ void pack_kernel(int* x) { x[threadIdx.x] = 0; }\n"
              "void launch_pack(int* x, int n) { pack_kernel<<<1, n>>>(x); }\n")
    user = _op("w4_grouped").replace("  return x;\n", "  launch_pack(nullptr, 1);\n  return x;\n")
    root = write_project(tmp_path, {
        "setup.py": GATED_SETUP,
        "csrc/w4/w4_grouped.cu": user,
        "csrc/w4/w4_a_mm.cu": _op("w4_a_mm"),
        "csrc/w4/w4_pack.cu": helper,
    })
    found = _npu912(migrate_json(root))
    assert sorted(found) == ["csrc/w4/w4_a_mm.cu"], sorted(found)
    message = found["csrc/w4/w4_a_mm.cu"]["message"]
    assert "the other CUDA source of `csrc/w4/`" in message
    assert "`w4_grouped.cu` (also `w4_pack.cu`, whose `launch_pack` it calls" in message, message


CUT_SETUP = GATED_SETUP.replace(
    "if torch.cuda.is_available():",
    "if (torch.cuda.is_available() and (CUDA_HOME is not None) and (torch.version.cuda is not None)) "
    "or os.getenv(\"FORCE_CUDA\", \"0\") == \"1\" or os.getenv(\"FORCE_CUDA_BUILD_FOR_EVERY_ARCH\", \"0\") == \"1\":",
).replace("import glob\n", "import glob\nimport os\nfrom torch.utils.cpp_extension import CUDA_HOME\n")


def test_a_gate_whose_quoted_condition_is_cut_inside_a_call_still_folds(tmp_path):
    """buildgated quotes a long build condition cut at 120 characters, here inside `os.getenv(`:
    the gate is read by its wording, not by balancing parentheses."""
    root = write_project(tmp_path, {
        "setup.py": CUT_SETUP,
        "csrc/sparse/sparse_apply.cu": _op("sparse_apply"),
        "csrc/sparse/sparse_pack.cu": _op("sparse_pack"),
    })
    found = _npu912(migrate_json(root))
    assert sorted(found) == ["csrc/sparse/sparse_apply.cu"], sorted(found)
    message = found["csrc/sparse/sparse_apply.cu"]["message"]
    assert "...`" in message and "the other CUDA source of `csrc/sparse/`" in message


CPU_ONLY = """\
#include <torch/library.h>

at::Tensor sparse_reorder(at::Tensor meta) {
  return meta.clone();
}

TORCH_LIBRARY_IMPL(proj, CPU, m) {
  m.impl("sparse_reorder", &sparse_reorder);
}
"""


def test_a_no_port_work_source_of_the_folder_does_not_stop_the_fold(tmp_path):
    """A `.cu` of host code registering CPU implementations becomes a named "no port work" scope
    (after this pass): it is not another build's finding, and the folder's gated sources fold."""
    root = write_project(tmp_path, {
        "setup.py": CUT_SETUP,
        "csrc/sparse/sparse_apply.cu": _op("sparse_apply"),
        "csrc/sparse/sparse_pack.cu": _op("sparse_pack"),
        "csrc/sparse/sparse_meta.cu": CPU_ONLY,
    })
    report = migrate_json(root)
    found = _npu912(report)
    assert sorted(found) == ["csrc/sparse/sparse_apply.cu"], sorted(found)
    assert "`sparse_meta.cu`" not in found["csrc/sparse/sparse_apply.cu"]["message"]
    assert any(s["path"] == "csrc/sparse/sparse_meta.cu" for s in report["skipped"])
