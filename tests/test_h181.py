"""Audit round 33 rows of vLLM code vllm-ascend replaces by rebinding module globals (helper h181,
issue #16): `[[functions]]` facts of rules/vllm_ascend.toml, applied by ascendfacts30.py. Each false
shape is paired with the nearest true case (same shape, reached on an NPU host) that stays reported
at its severity."""

from __future__ import annotations

from .precision_helpers import migrate_json, write_project
from .precision_helpers import VLLM_PLATFORM_INTERFACE as INTERFACE


def _findings(report: dict, path: str, code: str) -> list:
    return [f for f in report["findings"] if f["path"] == path and f["code"] == code and not f["fixable"]]


# ---------------------------------------------------------------- HA#16: the grammar-bitmask kernel

STRUCTURED_PATH = "vllm/v1/worker/gpu/structured_outputs.py"
STRUCTURED = '''import torch

from vllm.triton_utils import tl, triton


class StructuredOutputsWorker:
    def apply_grammar_bitmask(self, logits, bitmask):
        grid = (bitmask.shape[0],)
        _apply_grammar_bitmask_kernel[grid](logits, bitmask, logits.shape[-1], BLOCK_SIZE=8192)


@triton.jit
def _apply_grammar_bitmask_kernel(logits_ptr, bitmask_ptr, n, BLOCK_SIZE: tl.constexpr):
    offs = tl.arange(0, BLOCK_SIZE)
    tl.store(logits_ptr + offs, tl.load(bitmask_ptr + offs), mask=offs < n)
'''
RUNNER = '''from vllm.v1.worker.gpu.structured_outputs import StructuredOutputsWorker


def make():
    return StructuredOutputsWorker()
'''
# (a warmup that from-imports the kernel and launches it itself: the plugin does not rebind its global)
WARMUP = '''from vllm.v1.worker.gpu.structured_outputs import _apply_grammar_bitmask_kernel


def warm(logits, bitmask):
    _apply_grammar_bitmask_kernel[(1,)](logits, bitmask, 8, BLOCK_SIZE=8192)
'''


def _structured_project(extra: dict | None = None) -> dict:
    files = {"vllm/platforms/interface.py": INTERFACE, STRUCTURED_PATH: STRUCTURED,
             "vllm/v1/worker/gpu/model_runner.py": RUNNER}
    files.update(extra or {})
    return files


def test_grammar_bitmask_kernel_launched_through_the_rebound_global_is_info(tmp_path):
    """HA#16: StructuredOutputsWorker launches `_apply_grammar_bitmask_kernel` through its module
    global, which vllm-ascend's V2 patch rebinds to its own kernel: vLLM's kernel never runs on an
    Ascend host, so its NPU910 finding becomes info naming the patch."""
    report = migrate_json(write_project(tmp_path, _structured_project()))
    kernels = _findings(report, STRUCTURED_PATH, "NPU910")
    assert [f["severity"] for f in kernels] == ["info"]
    assert "patch_v2/patch_triton.py" in kernels[0]["message"]
    assert "_apply_grammar_bitmask_kernel" in kernels[0]["message"]


def test_grammar_bitmask_kernel_an_unpatched_importer_launches_stays_an_error(tmp_path):
    """Nearest true case: another module from-imports the kernel and launches it (its global is not
    rebound), so vLLM's kernel runs on an Ascend host: the finding stays an error."""
    report = migrate_json(write_project(tmp_path, _structured_project(
        {"vllm/v1/worker/gpu/warmup.py": WARMUP})))
    kernels = _findings(report, STRUCTURED_PATH, "NPU910")
    assert [f["severity"] for f in kernels] == ["error"]
    assert "vllm-ascend" not in kernels[0]["message"]
