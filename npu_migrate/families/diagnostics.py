"""CUDA-only constructs found during the rewrite (NPU9xx): reported, never rewritten."""

from __future__ import annotations

import functools
import re
from dataclasses import replace

import libcst as cst

from .. import catalogue
from .base import Example, Family
from .context import (
    GRAPH_CAPTURES,
    call_chain,
    dotted_name,
    normalise_source,
    string_value,
    walk_calls,
)

_FLOAT64 = frozenset({"torch.float64", "torch.double"})
_CUDA_DOUBLE = "torch.cuda.DoubleTensor"
# the float64 of a chain whose transfer converts it (moot.NO_WORK's "the source of a dtype conversion only")
CAST_IN_TRANSFER = "the source of a dtype conversion only"
_TORCH_DTYPES = frozenset(f"torch.{name}" for name in (
    "float32", "float", "float16", "half", "bfloat16", "int8", "uint8", "int16", "short", "int32", "int",
    "int64", "long", "bool", "complex64"))
_TRAINING_METHODS = frozenset({"backward", "step"})  # loss.backward(), optimizer.step()
_TRAINING_CALLS = frozenset({"torch.autograd.backward", "torch.autograd.grad"})
_COMPILE_MODES = ("reduce-overhead", "max-autotune")  # modes that capture CUDA graphs
# JIT builds of torch.utils.cpp_extension: CUDA-only only when given CUDA sources
_JIT_BUILDS = frozenset({"torch.utils.cpp_extension.load", "torch.utils.cpp_extension.load_inline"})
_CUDA_SOURCE = re.compile(r"\.(cu|cuh)$", re.IGNORECASE)


@functools.lru_cache(maxsize=None)
def _tables():
    api = catalogue.cuda_api()
    properties = api["device_properties"]
    return (
        dict(api["report_qualnames"]),
        frozenset(properties["getters"]),
        frozenset(properties["npu_fields"]) | frozenset(properties["shim_fields"]),
    )


class Diagnostics(Family):
    """Code that runs on CUDA but would fail or differ on an Ascend NPU: reported for review.

    These constructs have no faithful rewrite, so the tool reports them and changes nothing:
    `torch.nn.DataParallel` (NPU901: use DistributedDataParallel), `torch.compile` with a mode that
    captures CUDA graphs (NPU903), float64 data put on the accelerator (NPU930: Ascend computes
    float64 slowly or not at all), a field of `get_device_properties()` that NPU properties lack
    (NPU931, such as `warp_size`), a CUDA graph that captures a training step (NPU932), and a
    `torch.utils.cpp_extension.load(...)` / `load_inline(...)` JIT build given CUDA sources (NPU911;
    a C++-only build works on an NPU host and is not reported).

    The leftover sweep (`sweep.py`) reports the packages of the CUDA ecosystem when they are
    imported or used: apex (NPU902), Triton kernels and Triton-based libraries (NPU910), compiled
    CUDA extensions (NPU911), FP8 (NPU913), bitsandbytes (NPU914), xformers (NPU915), vLLM (NPU916,
    info: it runs on Ascend with vllm-ascend), DeepSpeed ops (NPU917), Liger-Kernel (NPU918, info: its
    kernels run on Ascend with Triton-Ascend), and an unguarded module-level
    import of a package with no NPU build (NPU934). Each of these comes **once per file**: the first
    place, with the lines of the others listed in its message (NPU934 once per file and package),
    since ten `import triton...` lines say no more than one. The guidance of each names the Ascend
    counterpart where one exists (Triton-Ascend, Ascend's apex, torch_npu's fused attention,
    bitsandbytes' NPU backend, DeepSpeed's NPU accelerator). Not reported: imports of
    `torch.utils.cpp_extension` (BuildExtension and CppExtension work on Ascend, and torch_npu
    builds its operators with them), and `attn_implementation="flash_attention_2"`, which
    transformers runs on Ascend through torch_npu's fused attention.
    """

    NAME = "diagnostics"
    TITLE = "CUDA-only constructs"
    CODES = ("NPU901", "NPU902", "NPU903", "NPU910", "NPU911", "NPU913", "NPU914", "NPU915", "NPU916",
             "NPU917", "NPU918", "NPU930", "NPU931", "NPU932", "NPU934")
    EXAMPLES = (
        Example(
            note='torch.compile modes that capture CUDA graphs',
            before="""\
import torch

model = torch.compile(model, mode="reduce-overhead")
""",
            codes=('NPU903',),
        ),
        Example(
            note='float64 tensors provably on the accelerator',
            before="""\
import torch

rotation = torch.eye(3, dtype=torch.float64, device="cuda")
points = points.cuda().double()
""",
            after="""\
import torch

import npu_compat

rotation = torch.eye(3, dtype=torch.float64, device=npu_compat.device_type())
points = points.to(npu_compat.device()).double()
""",
            codes=('NPU930', 'NPU102', 'NPU101', 'NPU930'),
        ),
        Example(
            note='device properties NPUs do not have (`multi_processor_count` is provided by the shim)',
            before="""\
import torch

props = torch.cuda.get_device_properties(0)
grid = (props.multi_processor_count * 4,)
warp = props.warp_size
""",
            after="""\
import npu_compat

props = npu_compat.get_device_properties(0)
grid = (props.multi_processor_count * 4,)
warp = props.warp_size
""",
            codes=('NPU203', 'NPU931'),
        ),
        Example(
            note='a CUDA graph capture of a training step',
            before="""\
import torch

graph = torch.cuda.CUDAGraph()
with torch.cuda.graph(graph):
    loss = model(static_x).sum()
    loss.backward()
    optimizer.step()
""",
            codes=('NPU202', 'NPU932'),
        ),
        Example(
            note='`nn.DataParallel` is not supported on NPU (a type check is not a use)',
            before="""\
import torch

model = torch.nn.DataParallel(model, device_ids=[0, 1])
if isinstance(model, torch.nn.DataParallel):
    model = model.module
""",
            codes=('NPU901',),
        ),
        Example(
            note='Triton imported three ways and a kernel: one NPU910 for the file, the other lines '
                 'listed in its message, which also says the import is unguarded (no separate NPU934)',
            before="""\
import torch
import triton
import triton.language as tl
from triton import cdiv


@triton.jit
def add_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
""",
            codes=('NPU910',),
        ),
        Example(
            note=('a guarded Triton import whose fallback an NPU host runs: NPU910 once, named as a scope that '
                  'runs as written, and no NPU934 (the module still imports on NPU)'),
            before="""\
try:
    import triton
    import triton.language as tl
except ImportError:
    triton = None
""",
            codes=('NPU910',),
        ),
        Example(
            note='vLLM imports: one NPU916 for the file, at info severity (vLLM runs on Ascend with '
                 'vllm-ascend)',
            before="""\
from vllm import LLM, SamplingParams
from vllm.lora.request import LoRARequest
import vllm
""",
            codes=('NPU916',),
        ),
        Example(
            note='Liger-Kernel imports: one NPU918 for the file, at info severity (its kernels run on '
                 'Ascend with Triton-Ascend)',
            before="""\
from liger_kernel.transformers import apply_liger_kernel_to_llama
from liger_kernel.ops.rms_norm import LigerRMSNormFunction
""",
            codes=('NPU918',),
        ),
        Example(
            note='apex: once per file; its guidance names Ascend\'s apex and torch_npu fused optimizers',
            before="""\
from apex import amp
from apex.optimizers import FusedAdam
""",
            codes=('NPU902',),
        ),
        Example(
            note='an unguarded CUDA-only package without an ecosystem code of its own: NPU934 says '
                 'to guard it (the leftover NPU990 on the same import folds into it: one statement, one finding)',
            before="""\
import nvidia.dali.fn as fn
""",
            codes=('NPU934',),
        ),
        Example(
            note='bitsandbytes behind a guard with a fallback: NPU914, named as a scope that runs as written',
            before="""\
try:
    import bitsandbytes as bnb
except ImportError:
    bnb = None
""",
            codes=('NPU914',),
        ),
        Example(
            note='xformers imported where it is used',
            before="""\
def attention(q, k, v):
    from xformers.ops import memory_efficient_attention
    return memory_efficient_attention(q, k, v)
""",
            codes=('NPU915',),
        ),
        Example(
            note='DeepSpeed ops: they build through the accelerator, so a warning to check the NPU builder',
            before="""\
from deepspeed.ops.transformer import DeepSpeedTransformerLayer
""",
            codes=('NPU917',),
        ),
        Example(
            note="DeepSpeed's optimizers that its NPU op builder builds (FusedAdam, the CPU optimizers): "
                 "nothing to check",
            before="""\
from deepspeed.ops.adam import DeepSpeedCPUAdam, FusedAdam
""",
            codes=(),
        ),
        Example(
            note='FP8 dtypes used twice: one NPU913 for the file',
            before="""\
import torch

weight = weight.to(torch.float8_e4m3fn)
scale_dtype = torch.float8_e4m3fn
""",
            codes=('NPU913',),
        ),
        Example(
            note='a JIT extension build given a `.cu` source',
            before="""\
from torch.utils.cpp_extension import load

ops = load(name="fused_ops", sources=["csrc/fused.cpp", "csrc/fused_kernel.cu"])
""",
            codes=('NPU911',),
        ),
        Example(
            note='`torch.utils.cpp_extension` without CUDA: a C++-only JIT build and the setuptools '
                 'helpers work on an NPU host',
            before="""\
from torch.utils.cpp_extension import BuildExtension, CppExtension, load

ops = load(name="cpu_ops", sources=["csrc/ops.cpp"])
""",
        ),
        Example(
            note='`attn_implementation="flash_attention_2"`: transformers runs it on Ascend',
            before="""\
from transformers import AutoModelForCausalLM

model = AutoModelForCausalLM.from_pretrained(path, attn_implementation="flash_attention_2")
""",
        ),
        Example(
            note='a compile mode without CUDA graphs',
            before="""\
import torch

model = torch.compile(model, mode="max-autotune-no-cudagraphs")
""",
        ),
        Example(
            note='float64 on the CPU',
            before="""\
import torch

acc = torch.zeros(3, dtype=torch.float64)
result = x.to(torch.float64).cpu()
""",
        ),
        Example(
            note='a CUDA graph capture for inference (NPU202 from the torch.cuda API rules, not NPU932)',
            before="""\
import torch

graph = torch.cuda.CUDAGraph()
with torch.cuda.graph(graph):
    static_out = model(static_x)
""",
        ),
    )

    def __init__(self, ctx) -> None:
        super().__init__(ctx)
        self.report_qualnames, self.properties_getters, self.properties_fields = _tables()
        # name -> bound to get_device_properties(...)? [module level and dotted names, each function]
        self._properties_vars: list[dict[str, bool]] = [{}]
        self._training_captures: set[int] = set()  # `torch.cuda.graph` in a `with` that trains
        self._float64_seen: set[int] = set()  # calls of a chain already reported as NPU930

    # ------------------------------------------------------------------ DataParallel, graphs (901/932)
    def reference(self, original, updated, qual: str):
        if qual in self.report_qualnames:
            if self.report_qualnames[qual] == "NPU901" and self._type_check_only():
                # `isinstance(m, DataParallel)`, `-> DataParallel`: names the class without making
                # one; only a construction (or a subclass) runs DataParallel
                self.ctx.claim(original)
            elif self.report_qualnames[qual] == "NPU901" and self._registered_only():
                ctx, count = self.ctx, len(self.ctx.findings)
                ctx.report("NPU901", original)
                if len(ctx.findings) > count and ctx.findings[-1].code == "NPU901":
                    found = ctx.findings[-1]
                    ctx.findings[-1] = replace(found, severity="info", message=found.message + (
                        " (a registration, not a use: registered here, not built; "
                        "a configuration that selects it by name builds it)"))
            else:
                self.ctx.report(self.report_qualnames[qual], original)
            return updated
        if id(original) in self._training_captures:
            self.ctx.report("NPU932", original)
            return updated
        return None

    def _type_check_only(self) -> bool:
        """Whether the name being left is an annotation, an `isinstance` / `issubclass` class
        argument (alone or in a tuple) or compared with `type(x)`, not a call, a base class or a
        value passed on."""
        ctx = self.ctx
        node = ctx.parents[-1]
        depth = 1
        parent = ctx.parent(depth)
        while isinstance(parent, (cst.Element, cst.Tuple, cst.Subscript, cst.SubscriptElement, cst.Index,
                                  cst.BinaryOperation)):
            node, depth = parent, depth + 1
            parent = ctx.parent(depth)
        if isinstance(parent, cst.Annotation):
            return True
        if isinstance(parent, cst.ComparisonTarget) and isinstance(
                parent.operator, (cst.Is, cst.IsNot, cst.Equal, cst.NotEqual, cst.In, cst.NotIn)):
            # `type(m) is DataParallel`, `type(m) in (DataParallel, DDP)`
            comparison = ctx.parent(depth + 1)
            left = getattr(comparison, "left", None)
            return (isinstance(left, cst.Call) and isinstance(left.func, cst.Name) and left.func.value == "type"
                    and len(comparison.comparisons) == 1)
        if isinstance(parent, cst.Arg) and parent.keyword is None:
            call = ctx.parent(depth + 1)
            return (isinstance(call, cst.Call) and isinstance(call.func, cst.Name)
                    and call.func.value in ("isinstance", "issubclass")
                    and len(call.args) == 2 and call.args[1] is parent)
        if (isinstance(parent, cst.Assign) and isinstance(node, cst.Tuple) and len(parent.targets) == 1
                and isinstance(parent.targets[0].target, cst.Name)):
            # `options = (DistributedDataParallel, DataParallel)` read only by `isinstance(m, options)`
            return _only_type_checked(ctx.file_text(), parent.targets[0].target.value)
        return False

    def _registered_only(self) -> bool:
        """Whether the name being left is an argument of a registration call (`MODEL_WRAPPERS.
        register_module(module=DataParallel)`): the class goes into a registry, not built here."""
        ctx = self.ctx
        parent = ctx.parent(1)
        call = ctx.parent(2)
        if not (isinstance(parent, cst.Arg) and parent.value is ctx.parents[-1] and isinstance(call, cst.Call)):
            return False
        func = call.func
        name = func.attr.value if isinstance(func, cst.Attribute) else func.value if isinstance(func, cst.Name) else ""
        return "register" in name.lower()

    def visit_With(self, node: cst.With) -> None:
        """`with torch.cuda.graph(g):` around backward or an optimizer step captures training."""
        for item in node.items:
            call = item.item
            if isinstance(call, cst.Call) and self.ctx.qualname(call.func) in GRAPH_CAPTURES:
                if self._runs_training_step(node.body):
                    self._training_captures.add(id(call.func))

    def _runs_training_step(self, body: cst.CSTNode) -> bool:
        for call in walk_calls(body):
            func = call.func
            if isinstance(func, cst.Attribute) and func.attr.value in _TRAINING_METHODS:
                return True
            if self.ctx.qualname(func) in _TRAINING_CALLS:
                return True
        return False

    # ------------------------------------------------------------------ torch.compile (NPU903)
    def leave_Call(self, original: cst.Call, updated: cst.Call):
        qual = self.ctx.qualname(original.func)
        if qual in _JIT_BUILDS:
            return self._jit_build(original, updated, qual)
        if qual != "torch.compile":
            return None
        for arg in original.args:
            if arg.keyword is not None and arg.keyword.value == "mode":
                mode = string_value(arg.value)
                if mode in _COMPILE_MODES:
                    self.ctx.report("NPU903", arg.value, name=mode)
        return updated

    # ------------------------------------------------------------------ JIT extension builds (NPU911)
    def _jit_build(self, original: cst.Call, updated: cst.Call, qual: str):
        """`load(name, sources=[...])` / `load_inline(name, cpp_sources, cuda_sources)`: CUDA-only
        when it is given CUDA sources (a `.cu`/`.cuh` path, `cuda_sources`, `with_cuda=True`).

        A C++-only build runs on an NPU host as on any other (torch_npu's own operators build the
        same way), so it is cleared: the leftover sweep does not report the call either. Sources
        held in a variable are not read; the `.cu` files themselves are reported (NPU912).
        """
        name = qual.rsplit(".", 1)[1]
        if self._builds_cuda(original, name):
            self.ctx.report("NPU911", original.func, what=f"`{name}(...)` JIT build with CUDA sources")
        else:
            self.ctx.claim(original.func)  # a C++ build: not a leftover
        return updated

    def _builds_cuda(self, call: cst.Call, name: str) -> bool:
        for position, arg in enumerate(call.args):
            keyword = arg.keyword.value if arg.keyword is not None else None
            if keyword == "with_cuda":
                if isinstance(arg.value, cst.Name) and arg.value.value == "True":
                    return True
                continue
            if keyword == "cuda_sources" or (keyword is None and name == "load_inline" and position == 2):
                if not (isinstance(arg.value, cst.Name) and arg.value.value == "None"):
                    return True
                continue
            for node in _strings_in(arg.value):
                value = string_value(node)
                if isinstance(value, str) and _CUDA_SOURCE.search(value.strip()):
                    return True
        return False

    # ------------------------------------------------------------------ device properties (NPU931)
    def visit_FunctionDef(self, node: cst.FunctionDef) -> None:
        self._properties_vars.append({})
        for param in (*node.params.params, *node.params.kwonly_params, *node.params.posonly_params):
            self._properties_vars[-1][param.name.value] = False

    def depart_FunctionDef(self, node: cst.FunctionDef) -> None:
        self._properties_vars.pop()

    def visit_Assign(self, node: cst.Assign) -> None:
        for target in node.targets:
            self._track_properties(target.target, node.value)

    def visit_AnnAssign(self, node: cst.AnnAssign) -> None:
        if node.value is not None:
            self._track_properties(node.target, node.value)

    def _track_properties(self, target: cst.CSTNode, value: cst.CSTNode) -> None:
        """`props = torch.cuda.get_device_properties(i)`: remember `props` for NPU931."""
        name = dotted_name(target)
        if name is None:
            return
        # plain names live in their function; `self.props` is read from other methods too
        scope = self._properties_vars[0] if "." in name else self._properties_vars[-1]
        bound = isinstance(value, cst.Call) and self.ctx.qualname(value.func) in self.properties_getters
        scope[name] = bound
        if bound:
            self.ctx.make_hot(name.rsplit(".", 1)[-1])

    def depart_Attribute(self, node: cst.Attribute) -> None:
        """`get_device_properties(i).warp_size` / `props.warp_size`: a field NPU properties lack."""
        field = node.attr.value
        if field in self.properties_fields or field.startswith("__"):
            return
        value = node.value
        if isinstance(value, cst.Call):
            missing = self.ctx.qualname(value.func) in self.properties_getters
        else:
            name = dotted_name(value)
            if name is None:
                return
            local = self._properties_vars[-1]  # a parameter or local of that name hides a module-level one
            missing = local[name] if name in local else self._properties_vars[0].get(name, False)
        if missing:
            self.ctx.note("NPU931", node, name=field)

    # ------------------------------------------------------------------ float64 (NPU930)
    def depart_Call(self, call: cst.Call) -> None:
        """NPU930: a call chain that provably puts float64 data on the accelerator.

        Provably: a literal "cuda" device or `.cuda()` in the same chain as a float64 dtype or
        `.double()` (`x.cuda().double()`, `torch.zeros(n, dtype=torch.float64, device="cuda")`). A
        device held in a variable is not provably the accelerator and stays quiet.
        """
        chain = call_chain(call)
        if any(id(c) in self._float64_seen for c in chain):
            return  # an inner part of this chain was reported already
        if not any(self._makes_float64(c) for c in chain):
            return
        if not any(self._puts_on_accelerator(c) for c in chain):
            return
        self._float64_seen.update(id(c) for c in chain)
        text = normalise_source(self.ctx.source_map.original_text_of(call))
        ctx, count = self.ctx, len(self.ctx.findings)
        ctx.note("NPU930", call, what=f"`{text if len(text) <= 80 else text[:77] + '...'}`")
        if len(ctx.findings) > count and ctx.findings[-1].code == "NPU930":
            from ..labels7 import conversion_source  # (float64 made only to be cast: round 14, AM#3)

            found = ctx.findings[-1]
            reason = conversion_source(ctx._ast(), found.line, found.column) or self._cast_in_transfer(chain)
            if reason is not None:
                ctx.findings[-1] = replace(found, severity="info", message=f"{found.message} ({reason})")

    def _cast_in_transfer(self, chain: list[cst.Call]) -> str | None:
        """The reason when the float64 of `chain` is made off the accelerator and the call that puts
        it there converts it to another torch dtype, with no float64 made there or after:
        `torch.zeros(4, dtype=torch.float64).pin_memory().to("cuda", dtype=torch.float32)` (round 34,
        IC#16): the accelerator gets float32, only the copy and cast touch the float64."""
        calls = [*reversed(chain), *self._chain_above()]  # innermost first, with the calls made of this one
        at = next((i for i, c in enumerate(calls) if self._puts_on_accelerator(c)), None)
        if at is None or any(self._makes_float64(c) for c in calls[at:]):
            return None
        transfer = calls[at]
        method = transfer.func.attr.value if isinstance(transfer.func, cst.Attribute) else None
        if method != "to":
            return None
        dtypes = [a.value for i, a in enumerate(transfer.args) if (a.keyword is not None and a.keyword.value == "dtype")
                  or (a.keyword is None and i == 1)]
        shown = self.ctx.qualname(dtypes[0]) if len(dtypes) == 1 else None
        if not shown or not shown.startswith("torch.") or shown in _FLOAT64 or shown not in _TORCH_DTYPES:
            return None
        return (f"{CAST_IN_TRANSFER}: made off the accelerator and converted to `{shown}` in the transfer; "
                "nothing computes in float64")

    def _chain_above(self) -> list[cst.Call]:
        """The calls of the chain that the call being left is the start of (`.double()` in
        `x.to(...).double()`), innermost first: depart_Call meets the inner call first."""
        out, node, depth = [], self.ctx.parents[-1], 1
        while (parent := self.ctx.parent(depth)) is not None:
            if isinstance(parent, (cst.Attribute, cst.Subscript)) and parent.value is node:
                pass
            elif isinstance(parent, cst.Call) and parent.func is node:
                out.append(parent)
            else:
                break
            node, depth = parent, depth + 1
        return out

    def _double_tensor_type(self, call: cst.Call) -> bool:
        """`torch.cuda.DoubleTensor(...)`, `x.type(torch.cuda.DoubleTensor)`: float64 on the device."""
        if self.ctx.qualname(call.func) == _CUDA_DOUBLE:
            return True
        return any(a.keyword is None and self.ctx.qualname(a.value) == _CUDA_DOUBLE for a in call.args)

    def _makes_float64(self, call: cst.Call) -> bool:
        func = call.func
        method = func.attr.value if isinstance(func, cst.Attribute) else None
        if method == "double" and not call.args:
            return True
        if self._double_tensor_type(call):
            return True
        for arg in call.args:
            keyword = arg.keyword.value if arg.keyword is not None else None
            if keyword == "dtype" or (keyword is None and method in ("to", "type")):
                if self.ctx.qualname(arg.value) in _FLOAT64:
                    return True
        return False

    def _puts_on_accelerator(self, call: cst.Call) -> bool:
        func = call.func
        if isinstance(func, cst.Attribute) and func.attr.value == "cuda" and self.ctx.qualname(func) is None:
            return True
        if self._double_tensor_type(call):
            return True
        method = func.attr.value if isinstance(func, cst.Attribute) else None
        for position, arg in enumerate(call.args):
            keyword = arg.keyword.value if arg.keyword is not None else None
            if keyword == "device" or (keyword is None and position == 0 and method == "to"):
                if self.ctx.is_cuda_device(arg.value):
                    return True
        return False



def _only_type_checked(text: str, name: str) -> bool:
    """Whether every other use of `name` in the file's text is the class argument of
    `isinstance` / `issubclass` (a tuple of wrapper classes kept to unwrap a model, never called).
    Read from the text: the traversal may see only the file's hot statements."""
    uses = len(re.findall(rf"(?<![\w.]){re.escape(name)}\b", text))
    checks = len(re.findall(rf"\b(?:isinstance|issubclass)\([^()]*,\s*{re.escape(name)}\s*\)", text))
    grown = len(re.findall(rf"(?<![\w.]){re.escape(name)}\s*\+=\s*\(", text))  # `options += (FSDP,)`
    return checks > 0 and uses == checks + grown + 1

def _strings_in(node: cst.CSTNode) -> list[cst.SimpleString]:
    """The string literals anywhere in `node` (a list of sources, a glob pattern, a join)."""
    found: list[cst.SimpleString] = []

    class _Strings(cst.CSTVisitor):
        def visit_SimpleString(self, string: cst.SimpleString) -> None:
            found.append(string)

    node.visit(_Strings())
    return found
