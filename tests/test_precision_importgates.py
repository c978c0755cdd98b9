"""Cross-file reachability (issue #16, round 9): a module every in-project importer reaches only
behind a CUDA/ROCm-only gate, from another platform's module, or from its own tests is never
imported on an NPU host (npu_migrate/importgates.py); an import its importer's own unguarded
Triton import already reports is redundant (tritonguards.review_importers)."""

from __future__ import annotations

from .precision_helpers import migrate_json, moot_lines
from .precision_helpers import write_project as _write

from npu_migrate.importgates import PHRASE, USED
from npu_migrate.tritonguards import RESTATED, TRITON_GATED_IMPORTERS

_TRITON_KERNEL = """\
import torch
import triton
import triton.language as tl


@triton.jit
def _kernel(x_ptr, n):
    pid = tl.program_id(0)


def run(x: torch.Tensor):
    _kernel[(1,)](x, x.numel())
    return x
"""

_PREDICATE = """\
import torch


def is_cuda():
    return torch.cuda.is_available() and torch.version.cuda


def use_fast_path():
    return torch.cuda.is_available()
"""


def write_project(tmp_path, files: dict[str, str]):
    """The project, each file ending with a comment naming it (byte-identical copies are folded
    into one finding: every kernel module here must be its own)."""
    return _write(tmp_path, {rel: f"{text}\n# {rel}\n" for rel, text in files.items()})


def _findings(report: dict, path: str, code: str | None = None) -> list[dict]:
    return [f for f in report["findings"] if f["path"] == path and not f["fixable"]
            and (code is None or f["code"] == code)]


def test_flag_bound_to_the_projects_cuda_predicate(tmp_path):
    """`_is_cuda = is_cuda()` (a project function returning `... and torch.version.cuda`), then the
    import under `if _is_cuda:`: the JIT kernel module is never imported on an NPU host; the module's
    own test importing it unconditionally is no runtime importer. A module imported under a flag the
    NPU host may set (`use_fast_path()`: torch.cuda.is_available() is true there) stays reported."""
    root = write_project(tmp_path, {
        "pkg/__init__.py": "",
        "pkg/utils.py": _PREDICATE,
        "pkg/jit_kernel/__init__.py": "",
        "pkg/jit_kernel/rope.py": _TRITON_KERNEL,
        "pkg/jit_kernel/fast.py": _TRITON_KERNEL,
        "pkg/jit_kernel/tests/test_rope.py": "from pkg.jit_kernel.rope import run\n\n\ndef test_rope():\n    run(None)\n",
        "pkg/layers/__init__.py": "",
        "pkg/layers/rotary.py": (
            "from pkg.utils import is_cuda, use_fast_path\n\n"
            "_is_cuda = is_cuda()\n_fast = use_fast_path()\n\n"
            "if _is_cuda:\n    from pkg.jit_kernel.rope import run\nelse:\n    run = None\n\n"
            "if _fast:\n    from pkg.jit_kernel.fast import run as fast_run\n"),
    })
    report = migrate_json(root)
    assert not _findings(report, "pkg/jit_kernel/rope.py", "NPU910")
    reasons = moot_lines(report["skipped"], "NPU910", "pkg/jit_kernel/rope.py")
    assert reasons and PHRASE in next(iter(reasons.values()))
    assert "pkg/layers/rotary.py:7 under `_is_cuda`" in next(iter(reasons.values()))
    kept = _findings(report, "pkg/jit_kernel/fast.py", "NPU910")
    assert kept and kept[0]["severity"] == "error"


def test_importer_named_for_rocm_two_hops(tmp_path):
    """ops/prefix.py is imported by ops/paged.py, imported only by backends/rocm_attn.py (ROCm
    source, left alone) and tests: both are never imported on an NPU host. ops/shared.py, imported
    by the ROCm backend and unconditionally by the CUDA one, stays; so does a module no file imports."""
    root = write_project(tmp_path, {
        "pkg/__init__.py": "",
        "pkg/ops/__init__.py": "",
        "pkg/ops/prefix.py": _TRITON_KERNEL,
        "pkg/ops/paged.py": "from .prefix import run\n" + _TRITON_KERNEL,
        "pkg/ops/shared.py": _TRITON_KERNEL,
        "pkg/ops/lonely.py": _TRITON_KERNEL,
        "pkg/backends/__init__.py": "",
        "pkg/backends/rocm_attn.py": (
            "import torch\nfrom pkg.ops.paged import run\nfrom pkg.ops.shared import run as shared\n\n\n"
            "def forward(x):\n    return run(x.cuda())\n"),
        "pkg/backends/flash_attn.py": "from pkg.ops.shared import run\n",
        "tests/test_prefix.py": "from pkg.ops.paged import run\nfrom pkg.ops.prefix import run as r2\n",
    })
    report = migrate_json(root)
    for path in ("pkg/ops/prefix.py", "pkg/ops/paged.py"):
        assert not _findings(report, path, "NPU910"), path
        assert moot_lines(report["skipped"], "NPU910", path), path
    paged = next(iter(moot_lines(report["skipped"], "NPU910", "pkg/ops/paged.py").values()))
    assert "pkg/backends/rocm_attn.py:2" in paged and "ROCm" in paged
    prefix = next(iter(moot_lines(report["skipped"], "NPU910", "pkg/ops/prefix.py").values()))
    assert "pkg/ops/paged.py:1" in prefix
    for path in ("pkg/ops/shared.py", "pkg/ops/lonely.py"):
        kept = _findings(report, path, "NPU910")
        assert kept and kept[0]["severity"] == "error", path


def test_cuda_variant_beside_npu_one_and_tests_only(tmp_path):
    """A Triton GEMM imported only by `cuda_fused_moe.py`, beside `npu_fused_moe.py`: never imported on
    an NPU host. A module only tests import is left as it is (no runtime importer to prove anything)."""
    root = write_project(tmp_path, {
        "pkg/__init__.py": "",
        "pkg/mlp/__init__.py": "",
        "pkg/mlp/triton_gemm.py": _TRITON_KERNEL,
        "pkg/mlp/tested_only.py": _TRITON_KERNEL,
        "pkg/mlp/cuda_fused_moe.py": "from .triton_gemm import run\n\n\nclass CudaMoE:\n    device = 'cuda'\n",
        "pkg/mlp/npu_fused_moe.py": "import torch_npu\n\n\nclass NpuMoE:\n    device = 'npu'\n",
        "tests/test_tested_only.py": "from pkg.mlp.tested_only import run\n",
    })
    report = migrate_json(root)
    assert not _findings(report, "pkg/mlp/triton_gemm.py", "NPU910")
    why = next(iter(moot_lines(report["skipped"], "NPU910", "pkg/mlp/triton_gemm.py").values()))
    assert "cuda_fused_moe.py:1" in why and "npu_fused_moe.py" in why
    kept = _findings(report, "pkg/mlp/tested_only.py", "NPU910")
    assert kept and kept[0]["severity"] == "error"


def test_cuda_variant_imported_beside_the_npu_one_proves_nothing(tmp_path):
    """A registry that imports both variants unconditionally loads the CUDA one on an NPU host too:
    what it imports stays reported."""
    root = write_project(tmp_path, {
        "pkg/__init__.py": "",
        "pkg/mlp/__init__.py": "",
        "pkg/mlp/triton_gemm.py": _TRITON_KERNEL,
        "pkg/mlp/cuda_fused_moe.py": "from .triton_gemm import run\n\n\nclass CudaMoE:\n    device = 'cuda'\n",
        "pkg/mlp/npu_fused_moe.py": "import torch_npu\n\n\nclass NpuMoE:\n    device = 'npu'\n",
        "pkg/registry.py": "from pkg.mlp.cuda_fused_moe import CudaMoE\nfrom pkg.mlp.npu_fused_moe import NpuMoE\n",
    })
    report = migrate_json(root)
    kept = _findings(report, "pkg/mlp/triton_gemm.py", "NPU910")
    assert kept and kept[0]["severity"] == "error"


def test_gated_on_a_platform_check_not_lowered_when_imported_elsewhere(tmp_path):
    """`if current_platform.is_rocm():` imports the kernel module, but another module imports it
    unconditionally: it stays reported."""
    root = write_project(tmp_path, {
        "pkg/__init__.py": "",
        "pkg/kern.py": _TRITON_KERNEL,
        "pkg/a.py": "from pkg.platforms import current_platform\n\nif current_platform.is_rocm():\n"
                    "    from pkg.kern import run\n",
        "pkg/b.py": "from pkg.kern import run\n",
        "pkg/platforms.py": "current_platform = None\n",
    })
    report = migrate_json(root)
    kept = _findings(report, "pkg/kern.py", "NPU910")
    assert kept and kept[0]["severity"] == "error"


def test_helper_whose_importers_report_the_same_triton_import(tmp_path):
    """`triton/vararg.py` imports triton unguarded; its importers are `_triton/kernels.py` (which
    reports its own unguarded Triton import) and a function that imports it beside that module:
    redundant, a named scope naming the importer's finding. A helper a plain function imports stays, and so
    does a module with kernels of its own that only the reported module imports."""
    root = write_project(tmp_path, {
        "pkg/__init__.py": "",
        "pkg/triton/__init__.py": "",
        "pkg/triton/vararg.py": "import triton\n\n\ndef unroll(fn):\n    return triton.jit(fn)\n",
        "pkg/triton/helper.py": "import triton\n\n\ndef unroll(fn):\n    return triton.jit(fn)\n",
        "pkg/_triton/__init__.py": "",
        "pkg/_triton/kernels.py": "from pkg.triton.vararg import unroll\nfrom pkg.triton.kern import run\n" + _TRITON_KERNEL,
        "pkg/triton/kern.py": _TRITON_KERNEL,
        "pkg/splitk.py": (
            "import torch\n\n\ndef merge(x):\n    from pkg.triton.vararg import unroll\n"
            "    from pkg._triton.kernels import run\n    return run(x)\n\n\n"
            "def other(x):\n    from pkg.triton.helper import unroll\n    return unroll(x)\n"),
    })
    report = migrate_json(root)
    # (round 10: redundant by its own reason, so a named scope, not an info finding)
    assert not _findings(report, "pkg/triton/vararg.py", "NPU910")
    vararg = [s for s in report["skipped"] if s.get("path") == "pkg/triton/vararg.py"
              and s["reason"].startswith("not run on an NPU host (NPU910): ")]
    assert vararg and RESTATED in vararg[0]["reason"] and "pkg/_triton/kernels.py" in vararg[0]["reason"]
    helper = _findings(report, "pkg/triton/helper.py", "NPU910")
    assert helper and helper[0]["severity"] == "error"
    kern = _findings(report, "pkg/triton/kern.py", "NPU910")  # (kernels of its own: not a helper)
    assert kern and kern[0]["severity"] == "error"
    kernels = _findings(report, "pkg/_triton/kernels.py", "NPU910")
    assert kernels and kernels[0]["severity"] == "error"


def test_has_triton_importer_with_the_modules_own_test(tmp_path):
    """A kernel module imported by its package only under `if HAS_TRITON:` and directly by its own
    test: the test is no runtime importer, so it is info ("verify on Triton-Ascend"), like its
    siblings; one imported unconditionally by the model too stays an error."""
    root = write_project(tmp_path, {
        "pkg/__init__.py": "",
        "pkg/kernel/__init__.py": "",
        "pkg/kernel/triton/__init__.py": (
            "try:\n    import triton\n\n    HAS_TRITON = True\nexcept ImportError:\n    HAS_TRITON = False\n\n"
            "if HAS_TRITON:\n    from .rope import run\n    from .norm import run as norm\n"),
        "pkg/kernel/triton/rope.py": _TRITON_KERNEL,
        "pkg/kernel/triton/norm.py": _TRITON_KERNEL,
        "pkg/model.py": "from pkg.kernel.triton.norm import run\n",
        "tests/test_kernels/test_rope.py": "from pkg.kernel.triton.rope import run\n",
    })
    report = migrate_json(root)
    rope = _findings(report, "pkg/kernel/triton/rope.py", "NPU910")
    assert rope and all(f["severity"] == "info" for f in rope)
    assert any(TRITON_GATED_IMPORTERS in f["message"] for f in rope)
    norm = _findings(report, "pkg/kernel/triton/norm.py", "NPU910")
    assert norm and norm[0]["severity"] == "error"


def test_names_used_only_behind_a_platform_gate(tmp_path):
    """`from pkg.relu2 import relu2_quant` at module level, used only under `if
    current_platform.is_cuda() and current_platform.has_device_capability(90):`: loading the module
    only defines its kernel (Triton through the project's own wrapper), which an NPU host never
    runs. The same import used outside the gate too stays reported."""
    kernel = ("import torch\n\nfrom pkg.triton_utils import tl, triton\n\n\n@triton.jit\ndef _kernel(x_ptr, n):\n"
              "    pid = tl.program_id(0)\n\n\ndef relu2_quant(x):\n    _kernel[(1,)](x, x.numel())\n    return x\n")
    root = write_project(tmp_path, {
        "pkg/__init__.py": "",
        "pkg/triton_utils.py": "try:\n    import triton\n    import triton.language as tl\nexcept ImportError:\n"
                               "    triton = tl = None\n",
        "pkg/platforms.py": "current_platform = None\n",
        "pkg/relu2.py": kernel,
        "pkg/silu.py": kernel.replace("relu2", "silu"),
        "pkg/fused.py": (
            "from pkg.platforms import current_platform\nfrom pkg.relu2 import relu2_quant\n"
            "from pkg.silu import silu_quant\n\nTABLE = {}\n\n"
            "if current_platform.is_cuda() and current_platform.has_device_capability(90):\n"
            "    TABLE['relu2'] = relu2_quant\n    TABLE['silu'] = silu_quant\n\n\n"
            "def fallback(x):\n    return silu_quant(x)\n"),
    })
    report = migrate_json(root)
    assert not [f for f in _findings(report, "pkg/relu2.py") if f["severity"] != "info"]
    why = next(iter(moot_lines(report["skipped"], None, "pkg/relu2.py").values()))
    assert USED in why and "pkg/fused.py:2" in why
    kept = [f for f in _findings(report, "pkg/silu.py") if f["severity"] == "error"]
    assert kept
