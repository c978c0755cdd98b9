"""Issue #16: findings in other vendors' platform code, in CUDA variant folders beside an NPU
variant, and one config device value repeated over a project's configs (npu_migrate/platforms.py).

Shapes found by manual audits of real packages, each reproduced with a small fixture of our own:
- a module under a folder named for another platform (`op_builder/hpu/`, `models/m/xpu/`) or
  named for one (`mps_accelerator.py`), a module that imports a vendor-only package at module
  level, or whose docstring says it is "for AMD GPUs": its report-only findings become named
  skipped scopes ("another platform's code"); words inside names (`command`, `ship`) are not one;
- `docker/docker-cuda/` beside `docker/docker-npu/`: the CUDA variant's findings become skipped
  scopes; a `docker-cuda/` with no NPU sibling keeps its findings;
- `device: cuda` in every recipe config: one NPU706 finding naming the others, info when the
  project reads the key through a device resolver of its own that knows "npu".
Each test also checks that the nearby true case is still reported as before.
"""

from __future__ import annotations

from pathlib import Path

from npu_migrate.platforms import content_platform, path_platform

from .precision_helpers import migrate_json, moot_lines, with_as_written, write_project


def _findings(report: dict, code: str, path: str | None = None) -> list[dict]:
    return [f for f in report["findings"] if f["code"] == code and (path is None or f["path"] == path)]


FP8_KERNEL = """\
import torch


def quantize(x):
    return x.to(torch.float8_e4m3fn)
"""

TRITON_KERNEL = """\
import triton
import triton.language as tl


@triton.jit
def add_kernel(x_ptr, n):
    pid = tl.program_id(0)
"""


# ------------------------------------------------------------------------------------------------
# 1. Another vendor's platform code


def test_folder_named_for_another_platform_is_a_skipped_scope(tmp_path: Path) -> None:
    root = write_project(tmp_path, {
        "pkg/__init__.py": "",
        "pkg/op_builder/hpu/fp_quantizer.py": FP8_KERNEL,
        "pkg/models/m/xpu/model.py": TRITON_KERNEL,
        # the true cases beside them: the same code in the project's own folders (not byte-identical:
        # identical copies are reported once, on the first path)
        "pkg/op_builder/fp_quantizer.py": "# ours\n" + FP8_KERNEL,
        "pkg/models/m/model.py": "# ours\n" + TRITON_KERNEL,
    })
    report = migrate_json(root)
    assert not _findings(report, "NPU913", "pkg/op_builder/hpu/fp_quantizer.py")
    assert not _findings(report, "NPU910", "pkg/models/m/xpu/model.py")
    hpu = moot_lines(report["skipped"], "NPU913", "pkg/op_builder/hpu/fp_quantizer.py")
    assert hpu and "another platform's code (HPU): in a folder named `hpu`" in next(iter(hpu.values()))
    xpu = moot_lines(report["skipped"], "NPU910", "pkg/models/m/xpu/model.py")
    assert xpu and "another platform's code (XPU)" in next(iter(xpu.values()))
    # still reported where an NPU host runs them
    assert [f["severity"] for f in _findings(report, "NPU913", "pkg/op_builder/fp_quantizer.py")] == ["error"]
    assert _findings(report, "NPU910", "pkg/models/m/model.py")


def test_finding_for_an_identical_copy_outside_the_platform_folder_stays(tmp_path: Path) -> None:
    # byte-identical copies are reported once, on the first path (here the HPU one), naming the
    # copy: the copy outside the HPU folder runs on an NPU host, so the finding stays
    root = write_project(tmp_path, {"a/hpu/quant.py": FP8_KERNEL, "b/quant.py": FP8_KERNEL})
    report = migrate_json(root)
    [finding] = _findings(report, "NPU913")
    assert finding["path"] == "a/hpu/quant.py" and finding["severity"] == "error"
    assert "`b/quant.py`" in finding["message"]


def test_module_named_for_another_platform(tmp_path: Path) -> None:
    accelerator = """\
import torch


class Accelerator:
    def supported_dtypes(self):
        return [torch.float16, torch.float8_e4m3fn]
"""
    root = write_project(tmp_path, {
        "accelerator/mps_accelerator.py": accelerator,
        "accelerator/xpu_accelerator.py": "# xpu\n" + accelerator,
        # `command` and `ship` hold `amd` and `hip` inside a word: not another platform's code
        "tools/command_ship.py": "# ours\n" + FP8_KERNEL,
    })
    report = migrate_json(root)
    for name in ("mps_accelerator.py", "xpu_accelerator.py"):
        path = f"accelerator/{name}"
        assert not [f for f in report["findings"] if f["path"] == path and not f["fixable"]]
        assert any(f"a module named `{name}`" in reason for reason in moot_lines(report["skipped"], path=path).values())
    assert [f["severity"] for f in _findings(report, "NPU913", "tools/command_ship.py")] == ["error"]


def test_rewrites_in_another_platforms_module_stay(tmp_path: Path) -> None:
    root = write_project(tmp_path, {
        "platforms/musa.py": "import torch\n\n\ndef name():\n    return torch.cuda.get_device_name(0)\n",
    })
    report = migrate_json(root)
    assert report["changed_files"] == ["platforms/musa.py"]
    assert [f["fixable"] for f in report["findings"] if f["path"] == "platforms/musa.py"] == [True]


def test_vendor_import_or_docstring_marks_another_platforms_module(tmp_path: Path) -> None:
    root = write_project(tmp_path, {
        "kernels/fastquant.py": "import torch\nimport habana_frameworks.torch.core as htcore\n\n" + FP8_KERNEL,
        "kernels/fused_decode.py": '"""Microbenchmark for a fused decode kernel on ROCm.\n\nMore."""\n' + FP8_KERNEL,
        # a guarded probe does not make a module another platform's; nor does a docstring naming two
        "kernels/probe.py": "try:\n    import habana_frameworks\nexcept ImportError:\n    pass\n" + FP8_KERNEL,
        "kernels/both.py": '"""FP8 kernels for CUDA and ROCm."""\n' + FP8_KERNEL,
    })
    report = migrate_json(root)
    assert not _findings(report, "NPU913", "kernels/fastquant.py")
    assert not _findings(report, "NPU913", "kernels/fused_decode.py")
    assert "imports `habana_frameworks` at module level" in " ".join(
        moot_lines(report["skipped"], "NPU913", "kernels/fastquant.py").values())
    reasons = moot_lines(report["skipped"], "NPU913", "kernels/fused_decode.py")
    assert "(ROCm): its docstring says" in " ".join(reasons.values())
    assert [f["severity"] for f in _findings(report, "NPU913", "kernels/probe.py")] == ["error"]
    assert [f["severity"] for f in _findings(report, "NPU913", "kernels/both.py")] == ["error"]


def test_platform_words_match_whole_parts_only() -> None:
    assert path_platform("deepspeed/ops/op_builder/hpu/fp_quantizer.py").startswith("(HPU)")
    assert path_platform("torchao/kernels/mxfp8/flydsl_quantize_2d.py").startswith("(ROCm)")
    assert path_platform("pkg/intel/quant.py").startswith("(Intel)")
    for path in ("pkg/command/x.py", "pkg/ship/relationship.py", "pkg/cuda_mps.py", "pkg/xpu_or_npu.py",
                 "pkg/npu/xpu_compat.py", "pkg/campus/amdahl.py", "pkg/mpsc_queue.py"):
        assert path_platform(path) is None, path
    assert content_platform(b"import torch\nfrom intel_extension_for_pytorch import optimize\n").startswith("(XPU)")
    assert content_platform(b'"""Kernels for AMD GPUs."""\n').startswith("(AMD GPUs)")
    assert content_platform(b'"""Kernels that also run on AMD GPUs and NVIDIA GPUs."""\n') is None
    assert content_platform(b'"""Quantization."""\nif ok:\n    import flydsl\n') is None


# ------------------------------------------------------------------------------------------------
# 2. CUDA variant folders beside an NPU variant

DOCKERFILE_CUDA = "FROM nvcr.io/nvidia/pytorch:25.06-py3\nRUN pip install flash-attn\n"
DOCKERFILE_NPU = "FROM ascendai/cann:8.0-py3\nRUN pip install torch-npu\n"


def test_cuda_variant_folder_beside_an_npu_variant(tmp_path: Path) -> None:
    root = write_project(tmp_path, {
        "docker/docker-cuda/Dockerfile": DOCKERFILE_CUDA,
        "docker/docker-npu/Dockerfile": DOCKERFILE_NPU,
        # no NPU sibling: still the image an NPU user would build
        "deploy/docker-cuda/Dockerfile": "# ours\n" + DOCKERFILE_CUDA,
    })
    report = migrate_json(root)
    assert not [f for f in report["findings"] if f["path"] == "docker/docker-cuda/Dockerfile"]
    reasons = moot_lines(report["skipped"], "NPU707", "docker/docker-cuda/Dockerfile")
    assert reasons and "the CUDA variant beside `docker/docker-npu/`" in reasons[1]
    # the flash-attn install (NPU708, line 2) folds into the base image's finding (redundant.py):
    # the scope covers both lines
    assert [(e["start_line"], e["end_line"]) for e in report["skipped"]
            if e["path"] == "docker/docker-cuda/Dockerfile"] == [(1, 2)]
    kept = _findings(report, "NPU707", "deploy/docker-cuda/Dockerfile")
    assert [f["severity"] for f in kept] == ["error"]
    assert [line for line, _column, _source in kept[0]["also"]] == [3]  # the NPU708 install


# ------------------------------------------------------------------------------------------------
# 3. One device value in every config

RECIPE = "model:\n  name: tiny-{n}\ndevice: cuda\ndtype: bf16\n"

RESOLVER = """\
import torch


def get_device(device=None):
    if device is None:
        device = "npu" if hasattr(torch, "npu") else "cuda"
    device = torch.device(device)
    if device.type in ["cuda", "npu"] and device.index is None:
        device = torch.device(device.type, 0)
    return device
"""

TRAIN = """\
from pkg.utils import get_device


def setup(cfg):
    return get_device(device=cfg.device)
"""


def test_config_device_folds_into_one_finding(tmp_path: Path) -> None:
    files = {f"recipes/configs/model_{n}.yaml": RECIPE.format(n=n) for n in range(5)}
    files["recipes/configs/model_4.yaml"] += "eval:\n  device: cuda\n"  # twice in one file: still one group
    files["recipes/configs/other.yaml"] = "device: cuda:1\n"  # another value: a finding of its own
    root = write_project(tmp_path, files)
    report = migrate_json(root)
    same = [f for f in _findings(report, "NPU706") if "`cuda`" in f["message"]]
    assert len(same) == 1, same
    assert same[0]["path"] == "recipes/configs/model_0.yaml" and same[0]["severity"] == "error"
    assert "5 config files set it, reported once for the project" in same[0]["message"]
    assert "recipes/configs/model_4.yaml:3" in same[0]["message"]
    other = [f for f in _findings(report, "NPU706") if "`cuda:1`" in f["message"]]
    assert [f["path"] for f in other] == ["recipes/configs/other.yaml"]


def test_config_device_read_through_a_resolver_that_knows_npu_is_info(tmp_path: Path) -> None:
    files = {f"recipes/configs/model_{n}.yaml": RECIPE.format(n=n) for n in range(3)}
    files.update({"pkg/__init__.py": "", "pkg/utils.py": RESOLVER, "recipes/train.py": TRAIN})
    report = migrate_json(write_project(tmp_path, files))
    [finding] = _findings(report, "NPU706")
    assert finding["severity"] == "info"
    assert "device resolver `get_device` (pkg/utils.py:4), which knows \"npu\"" in finding["message"]
    assert "`get_device(device=cfg.device)` in recipes/train.py:5" in finding["message"]


def test_config_device_without_npu_aware_resolver_stays_an_error(tmp_path: Path) -> None:
    files = {f"recipes/configs/model_{n}.yaml": RECIPE.format(n=n) for n in range(2)}
    # a resolver that knows only CUDA: "cuda" fails on an NPU host as written
    files.update({"pkg/__init__.py": "",
                  "pkg/utils.py": ("import torch\n\n\ndef get_device(device):\n"
                                   "    return torch.device(device or 'cuda')\n\n\ndef other():\n    return 'npu'\n"),
                  "recipes/train.py": TRAIN})
    report = migrate_json(write_project(tmp_path, files))
    [finding] = _findings(report, "NPU706")
    assert finding["severity"] == "error" and "device resolver" not in finding["message"]


WORKFLOW_CUDA = """\
jobs:
  tests:
    runs-on: ubuntu-latest
    steps:
      - run: nvidia-smi
"""


def test_cuda_variant_file_beside_an_npu_variant(tmp_path: Path) -> None:
    root = write_project(tmp_path, {
        ".github/workflows/tests_cuda.yml": WORKFLOW_CUDA,
        ".github/workflows/tests_npu.yml": "jobs:\n  tests:\n    runs-on: linux-aarch64-a2\n",
        # no NPU sibling: still reported
        ".github/workflows/nightly_cuda.yml": "# nightly\n" + WORKFLOW_CUDA,
        # a Python module beside an NPU one may be imported on an NPU host: not a variant
        "pkg/cuda_utils.py": "# ours\n" + FP8_KERNEL,
        "pkg/npu_utils.py": "import torch\n",
    })
    report = migrate_json(root)
    assert not [f for f in report["findings"] if f["path"] == ".github/workflows/tests_cuda.yml"]
    reasons = moot_lines(report["skipped"], path=".github/workflows/tests_cuda.yml")
    assert reasons and "the CUDA variant beside `.github/workflows/tests_npu.yml`" in " ".join(reasons.values())
    assert [f["code"] for f in report["findings"] if f["path"] == ".github/workflows/nightly_cuda.yml"]
    assert [f["severity"] for f in _findings(report, "NPU913", "pkg/cuda_utils.py")] == ["error"]


# ------------------------------------------------------------------------------------------------
# 4. A project that runs Triton on its own NPU backend

TRITON_KERNEL = """\
import torch
import triton
import triton.language as tl


@triton.jit
def _copy(src, dst, n, BLOCK: tl.constexpr):
    i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(dst + i, tl.load(src + i, mask=i < n), mask=i < n)


def copy(x):
    y = torch.empty_like(x)
    _copy[(triton.cdiv(x.numel(), 128),)](x, y, x.numel(), BLOCK=128)
    return y
"""

PTX_KERNEL = TRITON_KERNEL.replace(
    "    tl.store(dst + i, tl.load(src + i, mask=i < n), mask=i < n)",
    '    v = tl.inline_asm_elementwise("mov.b32 $0, $1;", "=r,r", [tl.load(src + i)], dtype=tl.int32,'
    ' is_pure=True, pack=1)\n    tl.store(dst + i, v)')

NPU_BACKEND = """\
import torch_npu
from kernels_npu.attention import attention_sinks_triton


def forward(q, k, v):
    return attention_sinks_triton(q, k, v)
"""


def test_triton_kernels_of_a_project_that_runs_triton_on_its_npu_backend_are_info(tmp_path: Path) -> None:
    root = write_project(tmp_path, {
        "pkg/ops/copy.py": TRITON_KERNEL,
        "pkg/ops/ptx.py": PTX_KERNEL,
        "pkg/backend/npu/attention.py": NPU_BACKEND,
    })
    report = migrate_json(root)
    # the project already runs these kernels on its NPU: a named scope that runs as written there
    assert not _findings(report, "NPU910", "pkg/ops/copy.py")
    kept = [f for f in with_as_written(report) if f["code"] == "NPU910" and f["path"] == "pkg/ops/copy.py"]
    assert [(f["severity"], f.get("scope")) for f in kept] == [("info", True)]
    assert "the project runs Triton on its own NPU backend (`pkg/backend/npu/attention.py`)" in kept[0]["message"]
    assert "fails to import" not in kept[0]["message"]
    # inline PTX: Triton-Ascend does not compile it, the error stays
    assert [f["severity"] for f in _findings(report, "NPU910", "pkg/ops/ptx.py")] == ["error"]


def test_without_an_npu_backend_using_triton_the_kernels_stay_errors(tmp_path: Path) -> None:
    root = write_project(tmp_path, {
        "pkg/ops/copy.py": TRITON_KERNEL,
        "pkg/backend/npu/attention.py": NPU_BACKEND.replace("triton", "fused"),
    })
    report = migrate_json(root)
    assert [f["severity"] for f in _findings(report, "NPU910", "pkg/ops/copy.py")] == ["error"]


def test_an_npu_backend_that_only_names_triton_does_not_run_it(tmp_path: Path) -> None:
    """DeepSpeed's NPU accelerator says `def is_triton_supported(self): return False`: a mention,
    not a use; the Triton kernels elsewhere stay errors."""
    backend = "class NPU_Accelerator:\n    def is_triton_supported(self):\n        return False\n"
    root = write_project(tmp_path, {"pkg/ops/copy.py": TRITON_KERNEL, "pkg/accelerator/npu_accelerator.py": backend})
    report = migrate_json(root)
    assert [f["severity"] for f in _findings(report, "NPU910", "pkg/ops/copy.py")] == ["error"]
