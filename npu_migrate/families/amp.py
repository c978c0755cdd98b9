"""Mixed precision and precision flags (NPU4xx): torch.cuda.amp, GradScaler, TF32 and SDPA switches."""

from __future__ import annotations

import functools
import re
from dataclasses import replace
from typing import Optional

import libcst as cst

from .. import catalogue
from .base import Example, Family
from .context import string_value

_GRAD_SCALERS = ("torch.amp.GradScaler", "torch.amp.grad_scaler.GradScaler")
# cuDNN autotuning hints: no effect on results, nothing to port (not reported when set)
# `torch.backends.cuda.preferred_*_library`: which CUDA linear-algebra library torch calls
_LIBRARY_CHOICES = frozenset({"preferred_linalg_library", "preferred_blas_library"})
# library choices whose setter raises on a torch built without them (ATen setLinalgPreferredBackend,
# setBlasPreferredBackend TORCH_CHECK hasMAGMA() / hasCuSOLVER() / hasCuBLASLt())
_CHECKED_LIBRARIES = {"magma": "MAGMA", "cusolver": "cuSOLVER", "cublaslt": "cuBLASLt"}
_PERFORMANCE_HINTS = frozenset({"cudnn.benchmark", "cudnn.benchmark_limit"})
# `sdp_kernel` keywords of the CUDA fast kernels; switching only these off keeps the math backend
_FAST_BACKENDS = frozenset({"enable_flash", "enable_mem_efficient", "enable_cudnn"})
# what a math-only `sdp_kernel` is said to do (an info, round 21 BG#33)
SWITCHED_OFF_ONLY = "it only switches CUDA fast kernels off"
# the file asks torch itself for determinism, which torch_npu honours
_TORCH_DETERMINISM = re.compile(r"(?<![\w.])(?:torch\.)?(?:use_deterministic_algorithms|set_deterministic_debug_mode)\s*\(")


@functools.lru_cache(maxsize=None)
def _tables():
    api = catalogue.cuda_api()
    return frozenset(api["amp"]["names"]), dict(api["tf32"]), frozenset(api["sdpa_switches"]["names"])


class Amp(Family):
    """Autocast, gradient scaling and the matmul precision flags, for the accelerator in use.

    `torch.cuda.amp.autocast` and `torch.cuda.amp.GradScaler` become the shim's `npu_compat.autocast`
    and `npu_compat.GradScaler` (NPU401), which use `torch.npu.amp` on Ascend and `torch.cuda.amp`
    on CUDA. `torch.amp.GradScaler("cuda", ...)` becomes `npu_compat.grad_scaler(...)` (NPU402),
    which passes the arguments by keyword: torch_npu's GradScaler takes `dynamic` where CUDA's takes
    `enabled`. The TF32 switches (`torch.backends.cuda.matmul.allow_tf32`,
    `torch.backends.cudnn.allow_tf32`) become `npu_compat.tf32.*` (NPU403), which set Ascend's HF32
    flags. Other cuDNN and CUDA backend flags are reported (NPU404): they do nothing on NPU; the
    `cudnn.benchmark` autotuning hint is not, and `cudnn.deterministic = True` is information (nothing
    where the file calls `torch.use_deterministic_algorithms` / `set_deterministic_debug_mode`). The
    scaled-dot-product-attention kernel switches (`enable_flash_sdp`, ...) are reported (NPU405):
    torch_npu chooses its fused attention kernel itself; switching a backend off (`enable_*_sdp(False)`)
    is not.
    """

    NAME = "amp"
    TITLE = "Mixed precision and precision flags"
    CODES = ("NPU401", "NPU402", "NPU403", "NPU404", "NPU405")
    EXAMPLES = (
        Example(
            note='`torch.cuda.amp` autocast and GradScaler',
            before="""\
import torch

scaler = torch.cuda.amp.GradScaler()
with torch.cuda.amp.autocast(dtype=torch.float16):
    loss = model(batch)
scaler.scale(loss).backward()
""",
            after="""\
import torch

import npu_compat

scaler = npu_compat.GradScaler()
with npu_compat.autocast(dtype=torch.float16):
    loss = model(batch)
scaler.scale(loss).backward()
""",
            codes=('NPU401', 'NPU401'),
        ),
        Example(
            note='`custom_fwd` / `custom_bwd`, imported from `torch.cuda.amp`',
            before="""\
import torch
from torch.cuda.amp import custom_fwd


class Double(torch.autograd.Function):
    @staticmethod
    @custom_fwd
    def forward(ctx, x):
        return x * 2
""",
            after="""\
import torch

import npu_compat


class Double(torch.autograd.Function):
    @staticmethod
    @npu_compat.custom_fwd
    def forward(ctx, x):
        return x * 2
""",
            codes=('NPU206', 'NPU401'),
        ),
        Example(
            note='`torch.amp.GradScaler()` scales for "cuda" unless told otherwise',
            before="""\
import torch

scaler = torch.amp.GradScaler(enabled=args.fp16)
with torch.autocast("cuda", dtype=torch.float16, enabled=args.fp16):
    loss = model(batch)
""",
            after="""\
import torch

import npu_compat

scaler = npu_compat.grad_scaler(enabled=args.fp16)
with torch.autocast(npu_compat.device_type(), dtype=torch.float16, enabled=args.fp16):
    loss = model(batch)
""",
            codes=('NPU402', 'NPU102'),
        ),
        Example(
            note='TF32 flags become TF32/HF32 flags; cuDNN switches are reported, not the `benchmark` hint',
            before="""\
import torch

torch.backends.cuda.matmul.allow_tf32 = True
torch.backends.cudnn.allow_tf32 = True
torch.backends.cudnn.benchmark = True
torch.backends.cudnn.enabled = False
""",
            after="""\
import torch

import npu_compat

npu_compat.tf32.matmul = True
npu_compat.tf32.conv = True
torch.backends.cudnn.benchmark = True
torch.backends.cudnn.enabled = False
""",
            codes=('NPU403', 'NPU403', 'NPU404'),
        ),
        Example(
            note='SDPA backend switches do nothing on NPU',
            before="""\
import torch
import torch.nn.functional as F

with torch.backends.cuda.sdp_kernel(enable_flash=True, enable_math=False):
    out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
""",
            codes=('NPU405',),
        ),
        Example(
            note='switching a CUDA-only SDPA backend off is harmless on NPU',
            before="""\
import torch

torch.backends.cuda.enable_cudnn_sdp(False)
""",
        ),
        Example(
            note='autocast on the CPU',
            before="""\
import torch

with torch.autocast("cpu", dtype=torch.bfloat16):
    loss = model(batch)
""",
        ),
        Example(
            note='precision settings that are not CUDA-specific',
            before="""\
import torch

torch.set_float32_matmul_precision("high")
scaler = torch.amp.GradScaler("cpu")
""",
        ),
    )

    def __init__(self, ctx) -> None:
        super().__init__(ctx)
        self.api_amp, self.api_tf32, self.api_sdpa = _tables()

    def reference(self, original, updated, qual: str):
        ctx = self.ctx
        if qual.startswith("torch.cuda.amp."):
            name = qual[len("torch.cuda.amp."):]
            if name not in self.api_amp:
                return None
            new = ctx.shim_attr(name).with_changes(lpar=updated.lpar, rpar=updated.rpar)
            return ctx.rewrite("NPU401", original, new, name=name) or updated
        if not qual.startswith(("torch.backends.cuda", "torch.backends.cudnn")):
            return None
        rest = qual[len("torch.backends."):]
        if rest in self.api_tf32:
            target = self.api_tf32[rest]
            new = cst.Attribute(value=ctx.shim_attr("tf32"), attr=cst.Name(target))
            new = new.with_changes(lpar=updated.lpar, rpar=updated.rpar)
            return ctx.rewrite("NPU403", original, new, name=target) or updated
        parts = rest.split(".")
        if parts[0] == "cuda" and len(parts) > 1 and parts[1] in self.api_sdpa:
            if self._switches_off(original) or self._library_reset(original):
                # `enable_cudnn_sdp(False)`: turns a CUDA-only kernel off (often to avoid a crash);
                # on an NPU host the switch is a stub and nothing depended on that kernel.
                # `preferred_linalg_library(backend="default")`: resets the choice, nothing changes
                ctx.claim(original)
            else:
                count = len(ctx.findings)
                ctx.report("NPU405", original, name=f"torch.backends.{rest}")
                if len(ctx.findings) > count and ctx.findings[-1].code == "NPU405":
                    found = ctx.findings[-1]
                    if parts[1] in _LIBRARY_CHOICES:
                        # a CUDA linear-algebra library choice, not an SDPA backend switch: say so
                        raising = self._library_raises(original)
                        ctx.findings[-1] = replace(found, severity="error", message=(
                            f"`torch.backends.{rest}`: a choice of CUDA linear-algebra library ({raising}) "
                            f"that torch checks it was built with: it raises on an NPU host (torch without "
                            f"CUDA), it is not ignored; keep the call off the NPU path; left unchanged")) \
                            if raising else replace(found, message=(
                            f"`torch.backends.{rest}`: a choice of CUDA linear-algebra library (cuSOLVER, "
                            f"MAGMA, cuBLAS, cuBLASLt); the NPU has its own and ignores it; left unchanged"))
                    elif self._only_enables(original):
                        # `sdp_kernel(enable_flash=True, enable_mem_efficient=True)`: every backend
                        # is enabled by default (math included), so nothing is restricted
                        ctx.findings[-1] = replace(found, severity="info", message=(
                            f"{found.message} (it only enables backends, all enabled by default: "
                            f"nothing is restricted, nothing differs on an NPU host)"))
                    elif self._keeps_math(original):
                        # `sdp_kernel(enable_flash=False, enable_mem_efficient=False, enable_math=True)`:
                        # only CUDA fast kernels switched off, the math backend kept (round 21, BG#33):
                        # like `enable_flash_sdp(False)`, nothing on an NPU host depends on it, save
                        # where math was chosen for double backward: info, still reported
                        ctx.findings[-1] = replace(found, severity="info", message=(
                            f"{found.message} ({SWITCHED_OFF_ONLY} and keeps the math backend on: an NPU "
                            f"host ignores the switch and runs its own kernel, which is what the code gets "
                            f"there; review it only where the math path was chosen for what fused kernels "
                            f"lack, such as double backward)"))
        elif parts[0] in ("cuda", "cudnn"):
            if rest in _PERFORMANCE_HINTS and self._sets_a_flag(original, parts[-1]):
                # `cudnn.benchmark = ...`: an autotuning hint; the NPU has nothing to tune there and
                # the results do not depend on it
                ctx.claim(original)
            elif rest == "cudnn.deterministic" and self._sets_a_flag(original, parts[-1]):
                self._deterministic(original, rest)
            elif self._sets_a_flag(original, parts[-1]):
                ctx.report("NPU404", original, name=f"torch.backends.{rest}")
            else:
                # a read (`cudnn.benchmark` saved to restore later, `cudnn.version()`,
                # `is_flash_attention_available()`): None or False on an NPU host, as on a CPU
                # build, so the code takes its non-CUDA path; nothing is ignored there
                ctx.claim(original)
        return updated

    def _deterministic(self, original: cst.CSTNode, rest: str) -> None:
        """`cudnn.deterministic = True`: information (the NPU needs its own settings), nothing when
        the file also asks torch itself for determinism or `= False` (the NPU default anyway)."""
        ctx = self.ctx
        assign = ctx.parent(2)
        value = getattr(assign, "value", None) if isinstance(ctx.parent(), cst.AssignTarget) else None
        if (isinstance(value, cst.Name) and value.value == "False") or _TORCH_DETERMINISM.search(ctx.file_text()):
            ctx.claim(original)
            return
        count = len(ctx.findings)
        ctx.report("NPU404", original, name=f"torch.backends.{rest}")
        if len(ctx.findings) > count and ctx.findings[-1].code == "NPU404":
            found = ctx.findings[-1]
            ctx.findings[-1] = replace(found, severity="info", message=found.message + (
                " (information: for deterministic NPU runs also call `torch.use_deterministic_algorithms(True)`"
                " and set HCCL_DETERMINISTIC=true)"))

    def _switches_off(self, original: cst.CSTNode) -> bool:
        """`torch.backends.cuda.enable_*_sdp(False)`: a CUDA SDPA backend switched off."""
        call = self.ctx.parent()
        if not (isinstance(call, cst.Call) and call.func is original and isinstance(original, cst.Attribute)):
            return False
        if not re.fullmatch(r"enable_\w+_sdp", original.attr.value) or len(call.args) != 1:
            return False
        arg = call.args[0]
        return (arg.keyword is None or arg.keyword.value == "enabled") and not arg.star and (
            isinstance(arg.value, cst.Name) and arg.value.value == "False")

    def _call_of(self, original: cst.CSTNode) -> cst.Call | None:
        call = self.ctx.parent()
        if isinstance(call, cst.Call) and call.func is original and isinstance(original, cst.Attribute):
            return call
        return None

    def _library_reset(self, original: cst.CSTNode) -> bool:
        """`preferred_linalg_library(backend="default")` (or "default" positionally): resets the
        library choice to torch's default."""
        call = self._call_of(original)
        return call is not None and original.attr.value in _LIBRARY_CHOICES and len(call.args) == 1 \
            and not call.args[0].star and string_value(call.args[0].value) == "default"

    def _library_raises(self, original: cst.CSTNode) -> Optional[str]:
        """`preferred_linalg_library("magma")`: the library a literal choice names when ATen's
        setter TORCH_CHECKs that torch was built with it (MAGMA, cuSOLVER, cuBLASLt: `hasMAGMA()`
        and the like), which a torch without CUDA (torch_npu's) fails: it raises there, it is not
        ignored (round-10 audit). "default" and "cublas" are accepted everywhere."""
        call = self._call_of(original)
        if call is None or not call.args or call.args[0].star:
            return None
        value = string_value(call.args[0].value)
        return _CHECKED_LIBRARIES.get(value.lower()) if isinstance(value, str) else None

    def _keeps_math(self, original: cst.CSTNode) -> bool:
        """`sdp_kernel(enable_flash=False, enable_mem_efficient=False, enable_math=True)`: literal
        keywords only, every backend turned off a CUDA fast kernel (flash, mem-efficient, cuDNN),
        at least one turned off, and the math backend on (True or left out, on by default). A
        switch that turns math off (only a fast kernel may run) stays a warning."""
        call = self._call_of(original)
        if call is None or original.attr.value != "sdp_kernel" or not call.args:
            return False
        off = False
        for arg in call.args:
            if arg.star or arg.keyword is None or not isinstance(arg.value, cst.Name) \
                    or arg.value.value not in ("True", "False"):
                return False
            if arg.value.value == "False":
                if arg.keyword.value not in _FAST_BACKENDS:
                    return False
                off = True
        return off

    def _only_enables(self, original: cst.CSTNode) -> bool:
        """`sdp_kernel(enable_flash=True, enable_mem_efficient=True)`, `enable_flash_sdp(True)`:
        every argument enables a backend (all are enabled by default, the math one included), so
        nothing is restricted; a backend turned off (`enable_math=False`) stays a warning."""
        call = self._call_of(original)
        if call is None or (original.attr.value != "sdp_kernel" and not re.fullmatch(r"enable_\w+_sdp", original.attr.value)):
            return False
        return bool(call.args) and all(not a.star and isinstance(a.value, cst.Name) and a.value.value == "True"
                                       for a in call.args)

    _SETTERS = re.compile(r"(flags|set_\w+|enable_\w+|allow_\w+|preferred_\w+)$")

    def _sets_a_flag(self, original: cst.CSTNode, last: str) -> bool:
        """Whether `torch.backends.cudnn.x` is assigned (a flag set) or called as a setter."""
        ctx = self.ctx
        node, parent = original, ctx.parent()
        if isinstance(parent, cst.AssignTarget) or (
                isinstance(parent, (cst.AugAssign, cst.AnnAssign)) and parent.target is node):
            return True
        if isinstance(parent, cst.Call) and parent.func is node:
            return bool(self._SETTERS.match(last))
        return False

    def leave_Call(self, original: cst.Call, updated: cst.Call):
        """torch.amp.GradScaler() / ("cuda", ...) / (device="cuda", ...) -> npu_compat.grad_scaler(...)."""
        if self.ctx.qualname(original.func) not in _GRAD_SCALERS:
            return None
        args = list(updated.args)
        first = original.args[0] if original.args else None
        if first is not None and first.keyword is None and not first.star:
            if string_value(first.value) != "cuda":
                return updated
            args = args[1:]
        else:
            for i, arg in enumerate(original.args):
                if arg.keyword is not None and arg.keyword.value == "device":
                    if string_value(arg.value) != "cuda":
                        return updated
                    del args[i]
                    break
                if arg.star:
                    return updated
        if args:
            args[-1] = args[-1].with_changes(comma=cst.MaybeSentinel.DEFAULT)
        new = updated.with_changes(func=self.ctx.shim_attr("grad_scaler"), args=args)
        for arg in original.args:
            self.ctx.claim(arg.value)
        return self.ctx.rewrite("NPU402", original, new) or updated
