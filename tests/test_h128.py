"""Round 27's second sample (audit BW, helper h128, issue #16): each false or redundant shape
paired with the nearest true case that must stay reported or rewritten."""

from __future__ import annotations

from .precision_helpers import findings_at, migrate_json, write_project

# ----------------------------------------------------------------------------- BW#15: early exits
REGION = '''import torch


class SharedRegion:
    def __init__(self, tensor):
        self.tensor = tensor
        self._is_pinned = False

    def pin(self):
        if self._is_pinned or not torch.cuda.is_available():
            return
        cudart = torch.cuda.cudart()
        cudart.cudaHostRegister(self.tensor.data_ptr(), self.tensor.numel(), 0)
        self._is_pinned = True

    def profile(self):
        if torch.cuda.is_available():
            torch.cuda.cudart().cudaProfilerStart()

    def reset(self):
        torch.cuda.cudart().cudaDeviceReset()


def to_device(t):
    if not torch.cuda.is_available():
        return t
    return t.to("cuda")


def synchronize(t):
    if t is None or not torch.cuda.is_available():
        return
    torch.cuda.synchronize()
'''


def _rewritten(report: dict, path: str, code: str) -> set[int]:
    return {f["line"] for f in report["findings"] if f["path"] == path and f["code"] == code and f["fixable"]}


def _scope_lines(report: dict, path: str, code: str) -> set[int]:
    return {line for s in report["skipped"] if s.get("path") == path and "start_line" in s
            and f"({code})" in s["reason"] for line in range(s["start_line"], s["end_line"] + 1)}


def test_early_exit_before_cuda_runtime_calls_is_kept(tmp_path):
    """BW#15: `if ... or not torch.cuda.is_available(): return` before `torch.cuda.cudart()` is
    left as written (widened, an NPU host would go on to the CUDA runtime call), and the call
    after it folds into the kept check; the nearest true cases still widen."""
    report = migrate_json(write_project(tmp_path, {"region.py": REGION}))
    rewritten = _rewritten(report, "region.py", "NPU201")
    assert 10 not in rewritten and 17 not in rewritten  # kept meaning CUDA
    assert {25, 31, 33} <= rewritten  # ordinary device code after the exit: widened
    kept = _scope_lines(report, "region.py", "NPU110") | set(findings_at(report, "region.py", "NPU110"))
    assert {10, 17} <= kept and not {25, 31} & kept
    cudart = findings_at(report, "region.py", "NPU202")
    assert 12 not in cudart and 18 not in cudart  # behind the kept checks: folded
    assert cudart[21]["severity"] == "error"  # unguarded: still reported
