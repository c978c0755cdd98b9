"""Issue #16, precision: classes an NPU host never builds (npu_migrate/capability.py).

A class whose `__init__` raises unless a Blackwell/Hopper predicate holds, or whose selection
classmethod (`is_supported`) answers False on such a predicate, never has an instance on an NPU
host: the findings in its instance methods become named skipped scopes ("in a branch an NPU host
does not take", naming the gate). A class without such a gate, and the class's own classmethods,
keep their findings. Fixtures are written for these tests.
"""

from __future__ import annotations

from pathlib import Path

from .precision_helpers import migrate_json, moot_lines, write_project


def _run(tmp_path: Path, text: str, path: str = "pkg/mod.py",
         others: dict | None = None, code: str = "NPU913") -> tuple[dict[int, str], dict[int, str]]:
    """({line: severity} of `code`'s findings, {line: reason} of its named scopes) of `path`."""
    report = migrate_json(write_project(tmp_path, {"pkg/mod.py": text, **(others or {})}))
    found = {}
    for f in report["findings"]:
        if f["path"] == path and f["code"] == code:
            found[f["line"]] = f["severity"]
            for line, _column, _source in f.get("also", ()):
                found[line] = f["severity"]
    return found, moot_lines(report["skipped"], code, path)


def _line(text: str, needle: str, nth: int = 0) -> int:
    lines = [i for i, line in enumerate(text.splitlines(), 1) if needle in line]
    return lines[nth]


RAISING_INIT = '''\
import torch

from .common import is_blackwell_supported


class Nvfp4MoE:
    def __init__(self):
        if not is_blackwell_supported():
            raise ValueError("Current platform does not support NVFP4")
        self.group_size = 16

    def create_weights(self, n):
        return torch.empty(n, dtype=torch.float8_e4m3fn)


class PlainFp8:
    def __init__(self):
        self.group_size = 16

    def create_weights(self, n):
        return torch.zeros(n, dtype=torch.float8_e4m3fn)
'''


def test_init_raising_off_blackwell_makes_the_methods_a_named_scope(tmp_path):
    found, moot = _run(tmp_path, RAISING_INIT)
    gated = _line(RAISING_INIT, "torch.empty(n, dtype=torch.float8_e4m3fn)")
    plain = _line(RAISING_INIT, "torch.zeros(n, dtype=torch.float8_e4m3fn)")
    assert gated in moot and gated not in found
    assert "Nvfp4MoE.__init__` raises on an NPU host" in moot[gated]
    assert "is_blackwell_supported()" in moot[gated]
    # the class without the gate keeps its error
    assert found.get(plain) == "error"


def test_init_raising_on_an_unknown_condition_keeps_the_finding(tmp_path):
    text = RAISING_INIT.replace("if not is_blackwell_supported():", "if not self_check():")
    found, moot = _run(tmp_path, text)
    gated = _line(text, "torch.empty(n, dtype=torch.float8_e4m3fn)")
    assert found.get(gated) == "error" and gated not in moot


SELECTED = '''\
import torch

from vllm.platforms import current_platform


class TorchNvFp4Kernel:
    @classmethod
    def is_supported(cls, compute_capability=None):
        if not current_platform.is_device_capability_family(100):
            return False, "requires sm_10x (Blackwell)"
        return True, None

    def apply_weights(self, x, w, sa, sb):
        return torch._scaled_mm(x, w, scale_a=sa, scale_b=sb)

'''


ANY_KERNEL = '''\
import torch


class AnyKernel:
    @classmethod
    def is_supported(cls, compute_capability=None):
        return True, None

    def apply_weights(self, x, w, sa, sb):
        return torch._scaled_mm(x, w, scale_a=sb, scale_b=sa)
'''


def test_is_supported_false_off_blackwell_makes_the_methods_a_named_scope(tmp_path):
    found, moot = _run(tmp_path, SELECTED)
    gated = _line(SELECTED, "scale_a=sa, scale_b=sb")
    assert gated in moot and gated not in found
    assert "TorchNvFp4Kernel.is_supported` answers False" in moot[gated]
    assert "is_device_capability_family(100)" in moot[gated]
    # a class that is always supported keeps its error
    found, moot = _run(tmp_path / "any", ANY_KERNEL, "pkg/any.py", {"pkg/any.py": ANY_KERNEL})
    plain = _line(ANY_KERNEL, "scale_a=sb, scale_b=sa")
    assert found.get(plain) == "error" and plain not in moot


def test_a_classmethod_of_a_gated_class_keeps_its_finding(tmp_path):
    # (a classmethod runs without an instance; the finding that stands for both places stays)
    # (a classmethod that only returns the dtype makes no tensor: fp8cpu16.getter_reason; this one casts)
    text = SELECTED.replace("    def apply_weights", "    @classmethod\n    def to_fp8(cls, x):\n"
                            "        return x.to(torch.float8_e4m3fn)\n\n    def apply_weights")
    found, moot = _run(tmp_path, text)
    assert found.get(_line(text, "return x.to(torch.float8_e4m3fn)")) == "error"


def test_a_gated_class_with_a_subclass_in_the_file_keeps_its_findings(tmp_path):
    text = SELECTED + '''

class TunedKernel(TorchNvFp4Kernel):
    @classmethod
    def is_supported(cls, compute_capability=None):
        return True, None
'''
    found, moot = _run(tmp_path, text)
    gated = _line(text, "scale_a=sa, scale_b=sb")
    assert found.get(gated) == "error" and gated not in moot


def test_a_check_the_class_calls_itself_is_not_a_selection_gate(tmp_path):
    # (`if self.is_supported():` inside the class: the class is built anyway, the other methods run)
    text = SELECTED.replace("    def apply_weights(self, x, w, sa, sb):\n",
                            "    def apply_weights(self, x, w, sa, sb):\n"
                            "        if not self.is_supported()[0]:\n            return x @ w\n")
    found, moot = _run(tmp_path, text)
    assert found.get(_line(text, "scale_a=sa, scale_b=sb")) == "error"


FLAGGED = '''\
import torch

from .utils import is_sm100_supported


class Mxfp4MoE:
    def __init__(self, backend):
        self.use_trtllm = is_sm100_supported() and backend == "trtllm"
        self.use_triton = backend == "triton"

    def apply(self, x, scale):
        if self.use_trtllm:
            from flashinfer import trtllm_moe

            x = trtllm_moe(x)
        if self.use_triton:
            from flashinfer import triton_moe

            x = triton_moe(x)
        return x
'''


def test_a_flag_assigned_only_from_a_blackwell_check_makes_its_branch_a_named_scope(tmp_path):
    found, moot = _run(tmp_path, FLAGGED, code="NPU911")
    gated = _line(FLAGGED, "import trtllm_moe")
    assert gated in moot and gated not in found
    assert "self.use_trtllm" in moot[gated] and "is_sm100_supported()" in moot[gated]
    # a flag the NPU host may set keeps its finding
    assert found.get(_line(FLAGGED, "import triton_moe")) == "error"


def test_a_flag_also_assigned_elsewhere_keeps_its_branch(tmp_path):
    text = FLAGGED + '''

def enable(method):
    method.use_trtllm = True
'''
    found, moot = _run(tmp_path, text, code="NPU911")
    gated = _line(text, "import trtllm_moe")
    assert gated not in moot and found.get(gated) == "error"


def test_a_flag_only_ever_a_constant_is_no_npu_fact(tmp_path):
    # (`self._capturing = False` in `__init__` only: the code may set it from outside; not an NPU fact)
    text = FLAGGED.replace('self.use_trtllm = is_sm100_supported() and backend == "trtllm"',
                           "self.use_trtllm = False")
    found, moot = _run(tmp_path, text, code="NPU911")
    gated = _line(text, "import trtllm_moe")
    assert gated not in moot and found.get(gated) == "error"
