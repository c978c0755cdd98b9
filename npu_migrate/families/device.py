"""Device placement (NPU1xx): `.cuda()`, "cuda" device strings, `torch.device`, device checks."""

from __future__ import annotations

import ast
import re
from dataclasses import replace

import libcst as cst

from .. import cpufakes26
from .base import Example, Family
from .context import (
    asks_platform_layer,
    cuda_fstring_expr,
    cuda_literal,
    dotted_name,
    is_device_name,
    keyword_arg,
    last_identifier,
    string_value,
)


# A CUDA-only feature gate whose only evidence is the code's own words (rules/device.toml
# `cuda_only_feature_pattern`'s "requires CUDA", "CUDA-only", "only on CUDA"), no feature named.
_ONLY_SAYS_CUDA = re.compile(r"(?i)requires?\s+(a\s+)?cuda|needs?\s+(a\s+)?cuda|cuda[- ]only|only\s+(on|with|for)\s+cuda")
SAYS_CUDA_ONLY = ('Comparison with "cuda" kept because the code says it needs CUDA ({words}), but it names no '
                  'CUDA-only feature; left unchanged: on an NPU host this check turns the code away. Review '
                  'what it guards: if that uses only what torch_npu also has (streams, events, collectives, '
                  'the accelerator API), widen the check to the NPU')


def _device_type_part(prefix: cst.Subscript) -> cst.BaseExpression:
    """`device[:4]` -> `device.split(":")[0]`: the device type, which `is_accelerator_type` tests
    ("cuda" or the shim's accelerator, "npu" being three characters long)."""
    split = cst.Call(func=cst.Attribute(value=prefix.value, attr=cst.Name("split")),
                     args=[cst.Arg(cst.SimpleString('":"'))])
    return cst.Subscript(value=split, slice=[cst.SubscriptElement(cst.Index(cst.Integer("0")))])


class Device(Family):
    """Moves tensors and modules to the accelerator of the machine instead of to CUDA.

    `x.cuda(i)` becomes `x.to(npu_compat.device(i))`; a "cuda" string becomes
    `npu_compat.device_type()` (or `device_str(i)`, `device(i)`) wherever it is provably a device:
    the argument of `torch.device`, a `device=` keyword, a variable, parameter, dict key or function
    named like a device, a branch of `... if torch.cuda.is_available() else "cpu"`. A string that
    is not provably a device (`print("cuda")`, a log label, a config key) is not rewritten; the
    leftover sweep lists it for review (NPU990). On a CUDA
    machine the shim answers "cuda", so the program behaves as before; on an Ascend host it answers
    "npu".

    Checks of the device type (`x.device.type == "cuda"`, `"cuda" in device_types`) become
    `npu_compat.is_accelerator_type(...)`, and `x.is_cuda` becomes `npu_compat.on_accelerator(x)`:
    code that meant "on the accelerator" keeps meaning it. A check that guards a CUDA-only feature
    (Triton, FP8, CUDA graphs, FlashAttention 3, ...) is reported instead (NPU108), and so is a
    check whose guarded branch runs CUDA-only code (NPU110: a CUDA-only package or a Triton kernel
    imported or called there, Apex, `torch._C._cuda*`, CUDA IPC): widening it would send NPU
    tensors into code that cannot run there, where the original sent them to the other branch.

    Code that already chooses between CUDA and the NPU is left as its authors wrote it: a branch
    chain with an `"npu"` arm, a conditional expression, boolean chain or dict holding `"npu"`,
    `"hccl"` or `ASCEND_RT_VISIBLE_DEVICES` next to the CUDA value, a platform class with an NPU
    sibling class (the same member set to "cuda" in one and "npu" in the other), or a comparison
    whose comment says why the NPU is excluded. No rule rewrites inside such a scope; the CUDA
    references there are named, for information, in the scope's skipped entry (NPU991), and `--show-skipped` lists the scopes. Device choices of argparse and click
    options gain "npu" (NPU105). A file that defines its own `cuda()` method keeps its `.cuda()`
    calls (NPU107), and a framework's own accelerator keyword (`accelerator="cuda"`) is reported
    (NPU109): the framework decides what it means.
    """

    NAME = "device"
    TITLE = "Device placement"
    _cuda_defs = None  # per file (a family is made per file): see _cuda_methods
    _own_is_cuda = None  # per file: see _stores_is_cuda
    CODES = ("NPU101", "NPU102", "NPU103", "NPU104", "NPU105", "NPU106", "NPU107", "NPU108", "NPU109",
             "NPU110", "NPU990", "NPU991")
    EXAMPLES = (
        Example(
            note='`.cuda(i)` keeps its index, `non_blocking` its keyword; `.cuda(*args)` is only reported',
            before="""\
import torch


def prepare(model, batch, local_rank):
    model = model.cuda(local_rank)
    return model, batch.cuda(non_blocking=True)


def to_gpu(t, *args, **kwargs):
    return t.cuda(*args, **kwargs)
""",
            after="""\
import torch

import npu_compat


def prepare(model, batch, local_rank):
    model = model.to(npu_compat.device(local_rank))
    return model, batch.to(npu_compat.device(), non_blocking=True)


def to_gpu(t, *args, **kwargs):
    return t.cuda(*args, **kwargs)
""",
            codes=('NPU101', 'NPU101', 'NPU990'),
        ),
        Example(
            note='device strings in device positions: an IfExp fallback, `device=`, `map_location=`',
            before="""\
import torch

device = "cuda" if torch.cuda.is_available() else "cpu"
x = torch.randn(8, 16, device=device)
state = torch.load("model.pt", map_location="cuda:0")
""",
            after="""\
import torch

import npu_compat

device = npu_compat.device_type() if npu_compat.is_available() else "cpu"
x = torch.randn(8, 16, device=device)
state = torch.load("model.pt", map_location=npu_compat.device_str(0))
""",
            codes=('NPU102', 'NPU201', 'NPU102'),
        ),
        Example(
            note='"cuda" given to a `default_device=` keyword (a lazy-init context\'s target device)',
            before="""\
from colossalai.lazy import LazyInitContext

ctx = LazyInitContext(default_device="cuda")
""",
            after="""\
from colossalai.lazy import LazyInitContext

import npu_compat

ctx = LazyInitContext(default_device=npu_compat.device_type())
""",
            codes=('NPU102',),
        ),
        Example(
            note='an f-string that is exactly `cuda:{expr}`',
            before="""\
import torch


def setup(local_rank):
    device = torch.device(f"cuda:{local_rank}")
    return torch.zeros(2, device=device)
""",
            after="""\
import torch

import npu_compat


def setup(local_rank):
    device = npu_compat.device(local_rank)
    return torch.zeros(2, device=device)
""",
            codes=('NPU103',),
        ),
        Example(
            note='comparisons whose other side is provably a device; `.is_cuda`',
            before="""\
import torch


def move(batch, device):
    if device.type == "cuda" and not batch.is_cuda:
        batch = batch.pin_memory()
    return batch.to(device, non_blocking=True)
""",
            after="""\
import torch

import npu_compat


def move(batch, device):
    if npu_compat.is_accelerator_type(device.type) and not npu_compat.on_accelerator(batch):
        batch = batch.pin_memory()
    return batch.to(device, non_blocking=True)
""",
            codes=('NPU104', 'NPU106'),
        ),
        Example(
            note='a list of device types gains "npu" (every value accepted before still is)',
            before="""\
import torch


def autocast_dtype(device_type):
    assert device_type in ["cuda", "mps", "cpu"], device_type
    return torch.bfloat16 if device_type == "cuda" else torch.float32
""",
            after="""\
import torch

import npu_compat


def autocast_dtype(device_type):
    assert device_type in ["cuda", "npu", "mps", "cpu"], device_type
    return torch.bfloat16 if npu_compat.is_accelerator_type(device_type) else torch.float32
""",
            codes=('NPU105', 'NPU104'),
        ),
        Example(
            note='a class with its own `cuda()` method: its `.cuda()` calls are reported (once for the file, '
                 'the other lines listed), not rewritten',
            before="""\
import torch


class QuantLinear(torch.nn.Linear):
    def cuda(self, device=None):
        self.scale = self.scale.cuda(device)
        return super().cuda(device)


def place(layer):
    return layer.cuda()
""",
            codes=('NPU107',),
        ),
        Example(
            note='a comparison that guards a CUDA-only feature (FP8 here) keeps meaning CUDA',
            before="""\
import torch


def fp8_dtype(device):
    if device.type == "cuda":
        return torch.float8_e4m3fn
    return torch.bfloat16
""",
            codes=('NPU108', 'NPU913'),
        ),
        Example(
            note="a framework's accelerator option: its NPU name is the framework's business",
            before="""\
from lightning import Trainer

trainer = Trainer(accelerator="cuda", devices=2)
""",
            codes=('NPU109',),
        ),
        Example(
            note='strings that are not devices: log messages, paths',
            before="""\
import logging

import torch

logger = logging.getLogger(__name__)
logger.info("cuda is not available, falling back to cpu")
torch.save(model.state_dict(), "runs/cuda/last.pt")
""",
        ),
        Example(
            note='an f-string that is already device-agnostic',
            before="""\
import torch


def device_for(args, rank):
    return torch.device(f"{args.device_type}:{rank}")
""",
        ),
        Example(
            note='a branch chain that already has an NPU arm is left as written (NPU991: information)',
            before="""\
import torch

MULTI_GPU = "multi-gpu"
MULTI_NPU = "multi-npu"


def distributed_type(torch_device):
    if torch_device == "cuda":
        return MULTI_GPU, torch.cuda.device_count()
    elif torch_device == "npu":
        return MULTI_NPU, 8
    return "no", 1
""",
            codes=('NPU991',),
        ),
        Example(
            note='a conditional expression that already chooses the NPU is left as written',
            before="""\
import torch


def pick(use_npu):
    device = "npu" if use_npu else "cuda"
    return torch.zeros(2, device=device)
""",
            codes=('NPU991',),
        ),
        Example(
            note='a platform class beside its NPU sibling is left as written',
            before="""\
import torch


class CudaPlatform:
    device_type = "cuda"
    dist_backend = "nccl"

    def empty_cache(self):
        torch.cuda.empty_cache()


class NpuPlatform:
    device_type = "npu"
    dist_backend = "hccl"
""",
            codes=('NPU991',),
        ),
        Example(
            note='a device check in front of CUDA-only code (a Triton kernel, `torch._C._cuda*`) is reported, once per file (the other checks listed)',
            before="""\
import torch


def rms_norm(x, weight, eps=1e-6):
    if x.is_cuda:
        from .triton_kernels import rms_norm_fwd

        return rms_norm_fwd(x, weight, eps)
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * weight


def device_count(device):
    if device.type == "cuda":
        return torch._C._cuda_getDeviceCount()
    return 0
""",
            codes=('NPU110',),
        ),
        Example(
            note='a device check in front of plain torch code still means the accelerator',
            before="""\
import torch


def scale(x, device):
    if x.is_cuda and device.type == "cuda":
        return x * torch.finfo(x.dtype).eps
    return x
""",
            after="""\
import torch

import npu_compat


def scale(x, device):
    if npu_compat.on_accelerator(x) and npu_compat.is_accelerator_type(device.type):
        return x * torch.finfo(x.dtype).eps
    return x
""",
            codes=('NPU106', 'NPU104'),
        ),
        Example(
            note="numba's `cuda` module is not torch's",
            before="""\
from numba import cuda


@cuda.jit
def add_one(x):
    x[cuda.grid(1)] += 1
""",
        ),
        Example(
            note="a platform object's own `is_cuda()` method is not torch's `Tensor.is_cuda` property",
            before="""\
from myproject.platforms import current_platform

if current_platform.is_cuda():
    BLOCK = 128
""",
        ),
    )

    # ------------------------------------------------------------------ .cuda() and torch.device
    def leave_Call(self, original: cst.Call, updated: cst.Call):
        func = original.func
        ctx = self.ctx
        if isinstance(func, cst.Attribute) and func.attr.value == "cuda" and ctx.qualname(func) is None:
            return self._cuda_method(original, updated)
        if ctx.qualname(func) == "torch.device":
            return self._torch_device(original, updated)
        return None

    def _cuda_method(self, original: cst.Call, updated: cst.Call):
        """`x.cuda()`, `x.cuda(i)`, `x.cuda(device=i, non_blocking=True)` -> `x.to(npu_compat.device(...), ...)`."""
        ctx = self.ctx
        if ctx.defines_cuda_method:
            self._custom_cuda(original, ctx.position(original)[0])
            return updated
        index = None
        keep: list[cst.Arg] = []
        for position, (arg_o, arg_u) in enumerate(zip(original.args, updated.args)):
            keyword = arg_o.keyword.value if arg_o.keyword is not None else None
            if arg_o.star:
                count = len(ctx.findings)
                ctx.report("NPU990", original, what="`.cuda(*args)` cannot be mapped to `.to()`")
                self._in_cuda_handler(original, count)
                return updated
            if keyword is None and position == 0:
                index = arg_u.value
            elif keyword is None and position == 1:
                keep.append(keyword_arg("non_blocking", arg_u.value))
            elif keyword == "device":
                index = arg_u.value
            elif keyword is not None:
                keep.append(arg_u.with_changes(comma=cst.MaybeSentinel.DEFAULT))
            else:
                ctx.report("NPU990", original, what="`.cuda()` with unexpected arguments")
                return updated
        device = ctx.shim_call("device", [] if index is None else [index])
        args = [cst.Arg(device)] + keep
        assert isinstance(updated.func, cst.Attribute)
        new = updated.with_changes(func=updated.func.with_changes(attr=cst.Name("to")), args=args)
        return ctx.rewrite("NPU101", original, new) or updated

    def _torch_device(self, original: cst.Call, updated: cst.Call):
        """`torch.device("cuda", i)`, `torch.device(f"cuda:{i}")` -> `npu_compat.device(i)`."""
        ctx = self.ctx
        args_o = original.args
        positional = [a for a in args_o if a.keyword is None and not a.star]
        keywords = {a.keyword.value: i for i, a in enumerate(args_o) if a.keyword is not None}
        if len(positional) != len(args_o) - len(keywords) or set(keywords) - {"type", "index"}:
            return updated
        # the device-type argument and the optional index argument, as (original, updated) positions
        type_pos = keywords.get("type", 0 if positional else None)
        index_pos = keywords.get("index", 1 if len(positional) > 1 else None)
        if type_pos is None or type_pos >= len(args_o):
            return updated
        type_o = args_o[type_pos].value
        index_expr = updated.args[index_pos].value if index_pos is not None else None
        literal = cuda_literal(type_o)
        fexpr = cuda_fstring_expr(type_o)
        if literal is not None:
            if literal[1] is not None:
                if index_expr is not None:
                    return updated  # torch.device("cuda:0", 1) is an error already; leave it
                index_expr = cst.Integer(str(literal[1]))
            code = "NPU102"
        elif fexpr is not None and index_expr is None:
            index_expr = cuda_fstring_expr(updated.args[type_pos].value)
            code = "NPU103"
        else:
            return updated
        if self._guards_cuda_only_code(original, "value"):
            ctx.claim(type_o)
            return updated
        if cpufakes26.kept_comparison(ctx, original):
            return updated  # compared in a test's CPU fake of torch, as the "cuda" handed to it (cpufakes26.py)
        new = ctx.shim_call("device", [] if index_expr is None else [index_expr])
        new = new.with_changes(lpar=updated.lpar, rpar=updated.rpar)
        ctx.claim(type_o)
        return ctx.rewrite(code, original, new) or updated

    def visit_FunctionDef(self, node: cst.FunctionDef) -> None:
        if node.name.value == "cuda" and self.ctx.defines_cuda_method:
            self._custom_cuda(node.name, self.ctx.position(node.name)[0])

    def _cuda_methods(self) -> tuple[list[tuple[int, int, bool]], list[int]]:
        """(first line, last line, whether the class also defines `npu()`) of each `def cuda`
        method of a class in the file, and the lines of the file's `.cuda(...)` calls (the whole
        file's ast: a statement without trigger words is not in the hot slices)."""
        if self._cuda_defs is None:
            defs, calls = [], []
            tree = self.ctx._ast()
            for node in ast.walk(tree) if tree is not None else ():
                if isinstance(node, ast.ClassDef):
                    methods = {m.name: m for m in node.body if isinstance(m, (ast.FunctionDef, ast.AsyncFunctionDef))}
                    if "cuda" in methods:
                        method = methods["cuda"]
                        defs.append((method.lineno, method.end_lineno or method.lineno, "npu" in methods))
                elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "cuda":
                    calls.append(node.lineno)
            self._cuda_defs = (defs, calls)
        return self._cuda_defs

    def _in_cuda_handler(self, original: cst.Call, count: int) -> None:
        """The `.cuda(*args)` just reported, inside a handler of `Tensor.cuda` itself (a tensor
        subclass forwarding a caller's `.cuda()` to its inner tensors): information (labels7.py)."""
        from ..labels7 import cuda_handler

        ctx = self.ctx
        if len(ctx.findings) <= count or ctx.findings[-1].code != "NPU990":
            return
        reason = cuda_handler(ctx._ast(), ctx.position(original)[0])
        if reason is not None:
            found = ctx.findings[-1]
            ctx.findings[-1] = replace(found, severity="info", message=f"{found.message} ({reason})")

    def _custom_cuda(self, node: cst.CSTNode, line: int) -> None:
        """NPU107 for a `def cuda` or a `.cuda()` call in a file that defines one, when the file has
        `.cuda()` calls (left unchanged because of the method). A class that also defines `npu()`
        serves the NPU itself: its `def cuda` and the calls inside it (delegation to its members'
        `cuda()`) are left alone, not reported. When the only `.cuda()` calls are inside the
        classes' own `def cuda`, nothing else may reach the method: no port work (a named scope)."""
        ctx = self.ctx
        defs, calls = self._cuda_methods()
        inside = next((d for d in defs if d[0] <= line <= d[1]), None)
        if inside is not None and inside[2]:
            ctx.claim(node)  # (not a leftover for the sweep either)
            return
        if isinstance(node, cst.Name) and not calls:
            # a `def cuda` with no `.cuda()` call in the file: no call was left unchanged because
            # of it (other files' `.cuda()` calls are rewritten to `.to(...)`); its body is swept
            ctx.claim(node)
            return
        delegating = bool(defs) and bool(calls) and all(any(d[0] <= c <= d[1] for d in defs) for c in calls)
        count = len(ctx.findings)
        ctx.report("NPU107", node)
        if delegating and len(ctx.findings) > count and ctx.findings[-1].code == "NPU107":
            found = ctx.findings[-1]
            ctx.findings[-1] = replace(found, severity="info", message=found.message + (
                " (the class's own `cuda()` delegating to its members, the only `.cuda()` calls of the file:"
                " nothing to port)"))  # (moot.NO_WORK: a named scope, not a finding; round 15, AN#15, AP#26)

    # ------------------------------------------------------------------ x.is_cuda
    def leave_Attribute(self, original: cst.Attribute, updated: cst.Attribute):
        if original.attr.value == "is_cuda" and isinstance(self.ctx.parent(), cst.AssignTarget):
            if self._stores_is_cuda(original, read=True):
                self.ctx.claim(original)  # (the code's own attribute, stored and read: _stores_is_cuda)
            return None
        if original.attr.value == "is_cuda":
            parent = self.ctx.parent()
            if isinstance(parent, cst.Call) and parent.func is original:
                # `current_platform.is_cuda()`: a method of the project's own platform object, not
                # torch's `Tensor.is_cuda` property (which is not callable); its body is migrated
                # or reported where it is defined
                self.ctx.claim(original)
                return updated
            if isinstance(parent, cst.Attribute) and parent.value is original:
                # `mock_tensor.is_cuda.return_value = False`: an attribute of `is_cuda` (a mock's
                # child), not torch's bool property; the call would break the test
                self.ctx.claim(original)
                return updated
            if self._stores_is_cuda(original):
                self.ctx.claim(original)
                return updated
            if self._guards_cuda_only_code(original):
                return updated
            new = self.ctx.shim_call("on_accelerator", [updated.value])
            new = new.with_changes(lpar=updated.lpar, rpar=updated.rpar)
            return self.ctx.rewrite("NPU106", original, new) or updated
        return None

    def _stores_is_cuda(self, original: cst.Attribute, read: bool = False) -> bool:
        """`R.is_cuda` where the file itself stores `R.is_cuda = ...` (round 34 IA#26: vLLM's
        `examples/features/logits_processor/custom_req_init.py`, `self.is_cuda = device.type ==
        "cuda"` in `__init__`, read as `not self.is_cuda` later), or `self.is_cuda` inside a class
        whose body defines an `is_cuda` member: the code's own attribute, not torch's read-only
        `Tensor.is_cuda` property (which cannot be assigned). It holds whatever the code stored (the
        stored comparison is itself rewritten, NPU104); `npu_compat.on_accelerator(self)` would read
        an `is_npu` the object does not have (AttributeError on an NPU host). Left as written and
        claimed: nothing to port, nothing to report. `read`: the store `R.is_cuda = ...` itself, claimed
        when the file also reads `R.is_cuda` (a mock's `t.is_cuda = True` handed to other code is not)."""
        if self._own_is_cuda is None:
            tree = self.ctx._ast()
            stored, classes, loaded = set(), [], set()
            for node in ast.walk(tree) if tree is not None else ():
                if isinstance(node, ast.Attribute) and node.attr == "is_cuda" and isinstance(node.ctx, ast.Load):
                    loaded.add(ast.unparse(node.value))
                targets = []
                if isinstance(node, ast.Assign):
                    targets = node.targets
                elif isinstance(node, (ast.AnnAssign, ast.AugAssign)):
                    targets = [node.target]
                for target in targets:
                    for t in ast.walk(target):
                        if isinstance(t, ast.Attribute) and t.attr == "is_cuda":
                            stored.add(ast.unparse(t.value))
                if isinstance(node, ast.ClassDef) and any(
                        (isinstance(m, (ast.FunctionDef, ast.AsyncFunctionDef)) and m.name == "is_cuda")
                        or (isinstance(m, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "is_cuda"
                                                              for t in m.targets))
                        or (isinstance(m, ast.AnnAssign) and isinstance(m.target, ast.Name)
                            and m.target.id == "is_cuda")
                        for m in node.body):
                    classes.append((node.lineno, node.end_lineno or node.lineno))
            self._own_is_cuda = (stored, classes, loaded)
        stored, classes, loaded = self._own_is_cuda
        if not stored and not classes:
            return False
        try:
            receiver = ast.unparse(ast.parse(self.ctx.source_map.original_text_of(original.value).strip(),
                                             mode="eval"))
        except (SyntaxError, ValueError):
            return False
        if read:
            return receiver in loaded
        if receiver in stored:
            return True
        line = self.ctx.position(original)[0]
        return receiver == "self" and any(a <= line <= b for a, b in classes)

    # ------------------------------------------------------------------ "cuda" and f"cuda:{i}"
    def leave_SimpleString(self, original: cst.SimpleString, updated: cst.SimpleString):
        literal = cuda_literal(original)
        if literal is None:
            return None
        ctx = self.ctx
        role = ctx.string_role(original)
        if role == "report":
            ctx.report("NPU109", original)
            return updated
        if role != "device":
            return updated
        if self._guards_cuda_only_code(original, "value"):
            return updated
        index = literal[1]
        if index is None:
            new = ctx.shim_call("device_type")
        else:
            new = ctx.shim_call("device_str", [cst.Integer(str(index))])
        new = new.with_changes(lpar=updated.lpar, rpar=updated.rpar)
        return ctx.rewrite("NPU102", original, new) or updated

    def leave_FormattedString(self, original: cst.FormattedString, updated: cst.FormattedString):
        if cuda_fstring_expr(original) is None:
            return None
        ctx = self.ctx
        role = ctx.string_role(original)
        if role != "device":
            if role == "report":
                ctx.report("NPU109", original)
            return updated
        if self._guards_cuda_only_code(original, "value"):
            return updated
        new = ctx.shim_call("device_str", [cuda_fstring_expr(updated)])
        new = new.with_changes(lpar=updated.lpar, rpar=updated.rpar)
        return ctx.rewrite("NPU103", original, new) or updated

    # ------------------------------------------------------------------ device-type checks
    def _kept_as_cuda_gate(self, original: cst.CSTNode) -> bool:
        """The check guards CUDA-only code (NPU110) or a CUDA-only feature (NPU108): reported, and
        left meaning CUDA rather than widened to the NPU."""
        if self._guards_cuda_only_code(original, "gate"):
            return True
        words = self.ctx.cuda_only_feature_words()
        if words:
            before = len(self.ctx.findings)
            self.ctx.report("NPU108", original)
            if all(_ONLY_SAYS_CUDA.fullmatch(w) for w in words) and len(self.ctx.findings) > before:
                # (no feature named, only the code's own words: "requires CUDA tensors", round-21
                # audit BF#18, where the guarded code used only the accelerator API)
                said = self.ctx.findings[-1]
                self.ctx.findings[-1] = replace(said, severity="warning", message=SAYS_CUDA_ONLY.format(
                    words="; ".join(dict.fromkeys(f'"{w}"' for w in words))))
            return True
        return self._guards_cuda_only_code(original, "widened")

    def _guards_cuda_only_code(self, original: cst.CSTNode, kind: str = "check") -> bool:
        """NPU110: the check is the test of an `if` (or conditional expression) whose guarded
        branch runs CUDA-only code; widened, it would send NPU tensors there. `kind` "list": a
        device list in a predicate choosing a Triton path; "value": a device default of a
        function that raises unless the device is CUDA (rewrite_gates)."""
        why = self.ctx.cuda_only_gate(original, kind)
        if why is None:
            return False
        self.ctx.report("NPU110", original, why=why)
        return True

    def _device_like_operand(self, node: cst.CSTNode) -> bool:
        if asks_platform_layer(node):
            return False  # the project's platform layer answers "npu" there: a deliberate CUDA check
        if isinstance(node, (cst.Name, cst.Attribute)):
            ident = last_identifier(node)
            if ident == "type" and isinstance(node, cst.Attribute):
                return True
            return ident is not None and is_device_name(ident, self.ctx.device_words)
        if isinstance(node, cst.Call) and isinstance(node.func, cst.Name) and node.func.value == "str":
            return len(node.args) == 1 and self._device_like_operand(node.args[0].value)
        return False

    def _prefix_of_device(self, node: cst.CSTNode) -> bool:
        """`device[:4]`: the first four characters of a device string (a slice `[:4]` of an
        operand named like a device)."""
        if not (isinstance(node, cst.Subscript) and len(node.slice) == 1):
            return False
        index = node.slice[0].slice
        return (isinstance(index, cst.Slice) and index.lower is None and index.step is None
                and isinstance(index.upper, cst.Integer) and index.upper.value == "4"
                and self._device_like_operand(node.value))

    def leave_Comparison(self, original: cst.Comparison, updated: cst.Comparison):
        if len(original.comparisons) != 1:
            return None
        ctx = self.ctx
        op = original.comparisons[0].operator
        left_o, right_o = original.left, original.comparisons[0].comparator
        left_u, right_u = updated.left, updated.comparisons[0].comparator
        if isinstance(op, (cst.Equal, cst.NotEqual)):
            if string_value(right_o) == "cuda" and self._device_like_operand(left_o):
                operand = left_u
            elif string_value(left_o) == "cuda" and self._device_like_operand(right_o):
                operand = right_u
            elif string_value(right_o) == "cuda" and self._prefix_of_device(left_o):
                # `device[:4] == "cuda"` (round 23 BL#37): the type before any ":index"
                operand = _device_type_part(left_u)
            else:
                return None
            if self._kept_as_cuda_gate(original):
                return updated
            new: cst.BaseExpression = ctx.shim_call("is_accelerator_type", [operand])
            if isinstance(op, cst.NotEqual):
                new = cst.UnaryOperation(operator=cst.Not(), expression=new)
            new = new.with_changes(lpar=updated.lpar, rpar=updated.rpar)
            return ctx.rewrite("NPU104", original, new) or updated
        if isinstance(op, (cst.In, cst.NotIn)) and string_value(left_o) == "cuda":
            if not self._device_like_operand(right_o):
                return None
            if self._kept_as_cuda_gate(original):
                return updated
            new = updated.with_changes(
                left=ctx.shim_call("device_type").with_changes(lpar=left_u.lpar, rpar=left_u.rpar)
            )
            return ctx.rewrite("NPU104", original, new) or updated
        return None

    # ------------------------------------------------------------------ device choices (NPU105)
    def _device_list_context(self) -> bool:
        ctx = self.ctx
        node = ctx.parents[-1]
        parent = ctx.parent()
        if isinstance(parent, cst.ComparisonTarget) and parent.comparator is node:
            return isinstance(parent.operator, (cst.In, cst.NotIn))
        if isinstance(parent, cst.Arg) and parent.value is node:
            if parent.keyword is not None and parent.keyword.value == "choices":
                return True
            call = ctx.parent(2)
            if isinstance(call, cst.Call) and parent.keyword is None:
                name = dotted_name(call.func) or ""
                return name.split(".")[-1] == "Choice"
        return False

    def _add_npu(self, original, updated):
        ctx = self.ctx
        values = [string_value(e.value) if isinstance(e, cst.Element) else None for e in original.elements]
        if len(values) < 2 or any(v is None for v in values):
            return None
        if "cuda" not in values or not all(v in ctx.device_types for v in values):
            return None
        if not self._device_list_context():
            return None
        if "npu" not in values and self._guards_cuda_only_code(original, "list"):
            for element in original.elements:
                ctx.claim(element.value)
            return updated
        if "npu" in values:  # already lists the NPU: nothing to do, nothing to report
            for element in original.elements:
                ctx.claim(element.value)
            return updated
        i = values.index("cuda")
        cuda_el = updated.elements[i]
        quote = cuda_el.value.quote if isinstance(cuda_el.value, cst.SimpleString) else '"'
        new_el = cst.Element(value=cst.SimpleString(f"{quote}npu{quote}"), comma=cuda_el.comma)
        if isinstance(cuda_el.comma, cst.MaybeSentinel):
            cuda_el = cuda_el.with_changes(comma=cst.Comma(whitespace_after=cst.SimpleWhitespace(" ")))
        elements = list(updated.elements)
        elements[i:i + 1] = [cuda_el, new_el]
        new = updated.with_changes(elements=elements)
        for element in original.elements:
            ctx.claim(element.value)
        return ctx.rewrite("NPU105", original, new) or updated

    leave_List = leave_Tuple = leave_Set = _add_npu
