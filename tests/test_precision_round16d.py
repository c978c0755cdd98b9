"""Round-15 audits (issue #16, AO#40, AN#12, AP#4): a lazy Liger import reached only when the
project's accelerator says it supports Triton (its NPU accelerator answers False), a lazy
bitsandbytes import used only for functions its NPU backend has, and a `--build-arg` of a CUDA
image build already reported (npu_migrate/gates16.py). Each test writes a small project of its
own, checks that the false finding is gone (a named skipped scope with its reason, or folded into
the command's finding) and that a nearby true case stays reported."""

from __future__ import annotations

from .precision_helpers import findings_at, migrate_json, scopes_at, write_project

_ACCELERATORS = {
    "toyacc/accelerator/__init__.py": "from .real_accelerator import get_accelerator\n",
    "toyacc/accelerator/real_accelerator.py": '''\
def get_accelerator():
    from .npu_accelerator import NPU_Accelerator

    return NPU_Accelerator()
''',
}


def _npu_accelerator(answer: str) -> str:
    return f'''\
class NPU_Accelerator:
    def device_name(self):
        return "npu"

    def is_triton_supported(self):
        return {answer}
'''


_GATED = '''\
import torch

from toyacc.accelerator import get_accelerator


def _load_fused_ce():
    try:
        from liger_kernel.ops.cross_entropy import LigerCrossEntropyFunction
    except ImportError as error:
        raise ImportError("install liger-kernel or pick backend='torch'") from error
    return LigerCrossEntropyFunction


def _fused_ce(logits, target):
    return _load_fused_ce().apply(logits, target)


def _fused_can_run(logits, group):
    if group is None:
        return False
    return get_accelerator().is_triton_supported() and logits.dtype in (torch.float16, torch.bfloat16)


def cross_entropy(logits, target, group=None, backend="torch"):
    use_fused = backend == "liger" and _fused_can_run(logits, group)
    if use_fused:
        return _fused_ce(logits, target)
    return torch.nn.functional.cross_entropy(logits, target)
'''

_UNGATED = '''\
import torch


def _load_fused_ce():
    from liger_kernel.ops.cross_entropy import LigerCrossEntropyFunction

    return LigerCrossEntropyFunction


def cross_entropy(logits, target):
    return _load_fused_ce().apply(logits, target)
'''


def test_liger_import_behind_accelerator_triton_probe_false_on_npu(tmp_path):
    files = {**_ACCELERATORS, "toyacc/accelerator/npu_accelerator.py": _npu_accelerator("False"),
             "toyacc/sequence/loss.py": _GATED, "toyacc/sequence/plain_loss.py": _UNGATED}
    report = migrate_json(write_project(tmp_path, files))
    # the gated lazy import: never reached on an NPU host, a named scope with the reason
    assert 8 not in findings_at(report, "toyacc/sequence/loss.py", "NPU918")
    scopes = scopes_at(report, "toyacc/sequence/loss.py", "NPU918")
    assert 8 in scopes and "is_triton_supported()" in scopes[8] and "npu_accelerator.py:6" in scopes[8]
    # the same import without a gate stays a finding
    assert 5 in findings_at(report, "toyacc/sequence/plain_loss.py", "NPU918")


def test_liger_import_behind_probe_true_on_npu_stays(tmp_path):
    # Triton-Ascend: the project's NPU accelerator says True, so the kernel runs there
    files = {**_ACCELERATORS, "toyacc/accelerator/npu_accelerator.py": _npu_accelerator("True"),
             "toyacc/sequence/loss.py": _GATED}
    report = migrate_json(write_project(tmp_path, files))
    assert 8 in findings_at(report, "toyacc/sequence/loss.py", "NPU918")
    assert 8 not in scopes_at(report, "toyacc/sequence/loss.py", "NPU918")


_BNB = '''\
import torch


def dequantize_weight(weight, state=None):
    import bitsandbytes as bnb

    if weight.__class__.__name__ == "Params4bit":
        return bnb.functional.dequantize_4bit(weight.data, weight.quant_state)
    if hasattr(bnb.functional, "int8_vectorwise_dequant"):
        return bnb.functional.int8_vectorwise_dequant(weight.data, state.SCB)
    return weight.data * state.SCB.view(-1, 1) / 127
'''

_BNB_LAYER = '''\
import torch


def quantize_layer(layer):
    import bitsandbytes as bnb

    weight = bnb.functional.dequantize_4bit(layer.weight.data, layer.weight.quant_state)
    return bnb.nn.Int8Params(weight, requires_grad=False)
'''

_BNB_OPTIMIZER = '''\
def make_optimizer(params):
    import bitsandbytes as bnb

    return bnb.optim.AdamW8bit(params, lr=1e-4)
'''


def test_bnb_import_only_for_npu_backend_functions(tmp_path):
    files = {"toybnb/dequant.py": _BNB, "toybnb/layer.py": _BNB_LAYER, "toybnb/optim.py": _BNB_OPTIMIZER}
    report = migrate_json(write_project(tmp_path, files))
    # dequantize_4bit / int8_vectorwise_dequant: run as written on an NPU host, a named scope
    assert 5 not in findings_at(report, "toybnb/dequant.py", "NPU914")
    scopes = scopes_at(report, "toybnb/dequant.py", "NPU914")
    assert 5 in scopes and "`dequantize_4bit`, `int8_vectorwise_dequant`" in scopes[5]
    # a layer class beside the function: stays a warning; an 8-bit optimizer: stays an error
    assert findings_at(report, "toybnb/layer.py", "NPU914")[5]["severity"] == "warning"
    assert findings_at(report, "toybnb/optim.py", "NPU914")[2]["severity"] == "error"


_PIPELINE = '''\
steps:
  - label: "Build release image"
    commands:
      - |
        docker buildx build --load \\
          --build-arg CUDA_VERSION=13.0 \\
          --build-arg FINAL_BASE_IMAGE=nvidia/cuda:13.0.1-base-ubuntu24.04 \\
          --build-arg NCCL_VERSION=2.27.3 \\
          -f docker/Dockerfile .
  - label: "Build a plain image"
    commands:
      - |
        docker buildx build --load \\
          --build-arg NCCL_VERSION=2.27.3 \\
          -f docker/Dockerfile.plain .
'''


def _pipeline_report(tmp_path, text):
    return migrate_json(write_project(tmp_path, {".buildkite/release.yaml": text, "app.py": "import torch\n"}))


def test_build_arg_of_a_reported_cuda_image_build_is_folded(tmp_path):
    # one command: its NCCL build argument joins the image's finding
    text = _PIPELINE.split('  - label: "Build a plain image"')[0]
    report = _pipeline_report(tmp_path, text)
    path = ".buildkite/release.yaml"
    image = findings_at(report, path, "NPU707")
    assert 7 in image
    nccl = [f for f in findings_at(report, path, "NPU703").values() if "NCCL_VERSION" in f["message"]]
    assert not nccl
    assert [8, 13, "NCCL_VERSION=2.27.3"] in image[7]["also"] or any(a[0] == 8 for a in image[7]["also"])


def test_lone_build_arg_stays(tmp_path):
    # a second command with only the NCCL argument: the finding (merged per file) stays
    report = _pipeline_report(tmp_path, _PIPELINE)
    path = ".buildkite/release.yaml"
    nccl = [f for f in findings_at(report, path, "NPU703").values() if "NCCL_VERSION" in f["message"]]
    assert nccl and {8, 14} <= {nccl[0]["line"], *(a[0] for a in nccl[0].get("also", []))}


_TOYX_INIT = '''\
import os

import torch


def _is_triton_available():
    if os.environ.get("TOYX_ENABLE_TRITON", "0") == "1":
        return True
    if not torch.cuda.is_available():
        return False
    try:
        import triton  # noqa

        return True
    except ImportError:
        return False


def _has_triton():
    try:
        import triton  # noqa

        return True
    except ImportError:
        return False
'''

_TILED = '''\
import os

import torch

from .. import _has_triton, _is_triton_available


def _should_use_triton(device):
    if not int(os.getenv("TOYX_TILED_TRITON", "1")):
        return False
    if not _is_triton_available():
        return False
    return True


def _can_use_triton_add(device):
    if not _has_triton():
        return False
    return True


def matmul(a, b):
    if a.dim() == 2 and _should_use_triton(a.device):
        from ._triton.tiled_kernels import launch

        return launch(a, b)
    return a @ b


def add(a, b):
    if a.dim() == 2 and _can_use_triton_add(a.device):
        from ._triton.add_kernels import launch_add

        return launch_add(a, b)
    return a + b
'''

_KERNELS = '''\
import torch
import triton
import triton.language as tl


@triton.jit
def _{name}_kernel(a_ptr, b_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, tl.load(a_ptr + offs, mask=mask) + tl.load(b_ptr + offs, mask=mask), mask=mask)


def {launch}(a, b):
    out = torch.empty_like(a)
    _{name}_kernel[(1,)](a, b, out, a.numel(), BLOCK=1024)
    return out
'''


def test_triton_kernels_behind_a_gate_that_needs_cuda(tmp_path):
    files = {"toyx/__init__.py": _TOYX_INIT, "toyx/ops/__init__.py": "", "toyx/ops/tiled.py": _TILED,
             "toyx/ops/_triton/__init__.py": "",
             "toyx/ops/_triton/tiled_kernels.py": _KERNELS.format(name="tiled", launch="launch"),
             "toyx/ops/_triton/add_kernels.py": _KERNELS.format(name="add", launch="launch_add")}
    report = migrate_json(write_project(tmp_path, files))
    # `_should_use_triton` needs `_is_triton_available()`, False where torch.cuda.is_available() is
    assert 2 not in findings_at(report, "toyx/ops/_triton/tiled_kernels.py", "NPU910")
    scopes = scopes_at(report, "toyx/ops/_triton/tiled_kernels.py", "NPU910")
    assert 2 in scopes and "toyx/__init__.py:9" in scopes[2] and "TOYX_ENABLE_TRITON" in scopes[2]
    # a gate that only probes Triton's import: Triton-Ascend makes it true, the finding stays
    kept = findings_at(report, "toyx/ops/_triton/add_kernels.py", "NPU910")
    assert kept[2]["severity"] == "info" and "Triton-Ascend installed" in kept[2]["message"]
    assert 2 not in scopes_at(report, "toyx/ops/_triton/add_kernels.py", "NPU910")
