"""Round 33's gates in the caller (helper h185, issue #16; keptchecks34.py): each false shape
paired with the nearest true case that must stay reported as before."""

from __future__ import annotations

from .precision_helpers import migrate_json, write_project

TRITON_UTILS = '''try:
    import triton
    import triton.language as tl
    HAS_TRITON = True
except ImportError:
    HAS_TRITON = False
    triton = None
    tl = None
'''
# (a Triton kernel and its launcher, another module's only callee)
NORM = '''import torch

from proj.triton_utils import tl, triton


@triton.jit
def _norm_concat(e_ptr, h_ptr, out_ptr, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    col = tl.arange(0, BLOCK)
    tl.store(out_ptr + row * BLOCK + col, tl.load(e_ptr + row * BLOCK + col))


def norm_concat(e, h):
    out = torch.empty_like(e)
    _norm_concat[(e.shape[0],)](e, h, out, BLOCK=e.shape[-1])
    return out
'''
# ------------------------------------------------------------------ HC#12: a kept `x.is_cuda` and-test
MTP_KEPT = '''import torch
from torch import nn

from proj.ops.norm import norm_concat


class MTPLayer(nn.Module):
    def forward(self, hidden, embeds):
        if (
            embeds.is_cuda
            and hidden.device == embeds.device
            and embeds.shape == hidden.shape
            and embeds.stride(-1) == hidden.stride(-1) == 1
        ):
            out = norm_concat(embeds, hidden)
        else:
            out = torch.cat([embeds, hidden], dim=-1)
        return out
'''
# (nearest true case: the layer tests a user flag, not the device; an NPU host may launch the kernel)
MTP_FLAG = MTP_KEPT.replace("embeds.is_cuda\n", "self.fused\n")
# ------------------------------------------------------------------ HA#37: `if not x.is_cuda: return` first
ROUTING = '''from proj.triton_utils import tl, triton


@triton.jit
def _route_kernel(x_ptr, out_ptr, N: tl.constexpr):
    i = tl.program_id(0)
    tl.store(out_ptr + i, tl.load(x_ptr + i))


def fused_routing(logits, top_k):
    out = logits.new_empty(logits.shape)
    _route_kernel[(logits.shape[0],)](logits, out, N=logits.shape[-1])
    return out.topk(top_k)
'''
MOE_KEPT = '''import torch
from torch import nn

from proj.ops.routing import fused_routing


class MoE(nn.Module):
    def _native(self, logits):
        return torch.softmax(logits, dim=-1).topk(self.top_k)

    def route(self, hidden, logits):
        if not logits.is_cuda:
            return self._native(logits)
        return fused_routing(logits, self.top_k)
'''
# (nearest true case: the early return tests the dtype; an NPU host reaches the kernel)
MOE_DTYPE = MOE_KEPT.replace("not logits.is_cuda", "logits.dtype == torch.float64")
# (nearest true case: the kept check only warns, and the kernel runs after it on an NPU host too)
MOE_WARN = MOE_KEPT.replace("return self._native(logits)", "print('routing off CUDA')")


def _project(tmp_path, files: dict) -> dict:
    base = {"proj/__init__.py": "", "proj/triton_utils.py": TRITON_UTILS, "proj/ops/__init__.py": "",
            "proj/layers/__init__.py": ""}
    return migrate_json(write_project(tmp_path, {**base, **files}))


def _kernel(report: dict, path: str, line: int) -> dict:
    found = [f for f in report["findings"] if f["path"] == path and f["code"] == "NPU910" and f["line"] == line]
    assert len(found) == 1, [(f["path"], f["line"], f["code"], f["severity"]) for f in report["findings"]]
    return found[0]


def _scopes(report: dict, path: str) -> list:
    return [s for s in report["skipped"] if s["path"] == path]


def test_kernel_launched_only_under_a_kept_is_cuda_test_is_a_named_scope(tmp_path):
    """HC#12: the only launch of the kernel lies under `embeds.is_cuda and ...`, which the run keeps
    meaning CUDA (NPU110): False for every tensor of an NPU host, so the `else` (torch.cat) runs."""
    report = _project(tmp_path, {"proj/ops/norm.py": NORM, "proj/layers/mtp.py": MTP_KEPT})
    assert not [f for f in report["findings"] if f["path"] == "proj/ops/norm.py" and f["code"] == "NPU910"]
    scope = [s for s in _scopes(report, "proj/ops/norm.py") if s["start_line"] == 6]
    assert len(scope) == 1, report["skipped"]
    assert scope[0]["reason"].startswith("not run on an NPU host (NPU910)")
    assert "`embeds.is_cuda` is kept meaning CUDA at line 10 (NPU110)" in scope[0]["reason"]
    # (the kept check itself keeps its own verdict: keptgates.py's named scope)
    assert any(s["start_line"] == 10 and "(NPU110)" in s["reason"] for s in _scopes(report, "proj/layers/mtp.py"))


def test_kernel_launched_under_a_user_flag_stays_an_error(tmp_path):
    """Nearest true case: the same layer gated on its own flag, not on the device: an NPU host
    may launch the kernel."""
    report = _project(tmp_path, {"proj/ops/norm.py": NORM, "proj/layers/mtp.py": MTP_FLAG})
    assert _kernel(report, "proj/ops/norm.py", 6)["severity"] == "error"


def test_kernel_after_a_kept_not_is_cuda_return_is_a_named_scope(tmp_path):
    """HA#37: `if not logits.is_cuda: return self._native(logits)` (kept meaning CUDA) comes first;
    the kernel's only launch after it never runs on an NPU host."""
    report = _project(tmp_path, {"proj/ops/routing.py": ROUTING, "proj/layers/moe.py": MOE_KEPT})
    assert not [f for f in report["findings"] if f["path"] == "proj/ops/routing.py" and f["code"] == "NPU910"]
    scope = [s for s in _scopes(report, "proj/ops/routing.py") if s["start_line"] == 4]
    assert len(scope) == 1, report["skipped"]
    assert "after `if not logits.is_cuda: return`, true there" in scope[0]["reason"]


def test_kernel_after_another_early_return_stays_an_error(tmp_path):
    """Nearest true case: the early return tests the dtype; an NPU host reaches the launch."""
    report = _project(tmp_path, {"proj/ops/routing.py": ROUTING, "proj/layers/moe.py": MOE_DTYPE})
    assert _kernel(report, "proj/ops/routing.py", 4)["severity"] == "error"


def test_kernel_after_a_kept_check_that_only_warns_stays_an_error(tmp_path):
    """Nearest true case: the kept check's branch only prints and falls through to the launch,
    which an NPU host then runs."""
    report = _project(tmp_path, {"proj/ops/routing.py": ROUTING, "proj/layers/moe.py": MOE_WARN})
    assert _kernel(report, "proj/ops/routing.py", 4)["severity"] == "error"


# ------------------------------------------------------------------ HC#13: imported only in a gated class
FMA = '''import cutlass
import cutlass.cute as cute


class DownFma:
    def __call__(self, x):
        return cute.compile(x)
'''
DOWN = '''class DownGemm:
    def __init__(self, rank):
        self.rank = rank

    def compile(self):
        from proj.ops.cute.down_fma import DownFma

        return DownFma()


def down_gemm(x, rank):
    return DownGemm(rank).compile()(x)
'''
HYPER = '''from torch import nn

from proj.ops.cute.down import down_gemm
from proj.platforms import current_platform


class HyperConnection(nn.Module):
    def __init__(self, rank):
        super().__init__()
        self.rank = rank
        self._use_down = current_platform.has_device_capability(90)

    def forward(self, x):
        if self._use_down:
            return down_gemm(x, self.rank)
        return x
'''
PLATFORMS = '''class _Platform:
    def has_device_capability(self, cap):
        return False


current_platform = _Platform()
'''
# (nearest true case: the layer calls the fused path under its own option, not a capability)
HYPER_OPTION = HYPER.replace("current_platform.has_device_capability(90)", "rank > 1")


def _cute_project(tmp_path, hyper: str) -> dict:
    return _project(tmp_path, {"proj/platforms.py": PLATFORMS, "proj/ops/cute/__init__.py": "",
                               "proj/ops/cute/down_fma.py": FMA, "proj/ops/cute/down.py": DOWN,
                               "proj/layers/hyper.py": hyper})


def test_module_imported_only_in_a_class_behind_a_capability_flag_is_a_named_scope(tmp_path):
    """HC#13: the CuTe-DSL module is imported only inside `DownGemm.compile`, and `DownGemm` is
    used only by `down_gemm`, which the layer calls only under `self._use_down`, set once from
    `has_device_capability(90)` (False on an NPU host): the module is never loaded there."""
    report = _cute_project(tmp_path, HYPER)
    assert not [f for f in report["findings"] if f["path"] == "proj/ops/cute/down_fma.py" and f["code"] == "NPU911"]
    scope = [s for s in _scopes(report, "proj/ops/cute/down_fma.py") if s["start_line"] == 1]
    assert len(scope) == 1, report["skipped"]
    assert "imported only in code an NPU host does not run: proj/ops/cute/down.py:6 in `DownGemm`" in scope[0]["reason"]


def test_module_imported_in_a_class_behind_a_user_option_stays_an_error(tmp_path):
    """Nearest true case: the same chain behind a user option: an NPU host may import the module,
    and fails there."""
    report = _cute_project(tmp_path, HYPER_OPTION)
    found = [f for f in report["findings"] if f["path"] == "proj/ops/cute/down_fma.py" and f["code"] == "NPU911"]
    assert len(found) == 1 and found[0]["severity"] == "error", report["findings"]
