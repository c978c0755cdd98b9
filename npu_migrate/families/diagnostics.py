"""CUDA-only constructs found during the rewrite (NPU9xx): reported, never rewritten."""

from __future__ import annotations

import functools

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
_TRAINING_METHODS = frozenset({"backward", "step"})  # loss.backward(), optimizer.step()
_TRAINING_CALLS = frozenset({"torch.autograd.backward", "torch.autograd.grad"})
_COMPILE_MODES = ("reduce-overhead", "max-autotune")  # modes that capture CUDA graphs


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
    (NPU931, such as `warp_size`), and a CUDA graph that captures a training step (NPU932). The
    leftover sweep (`sweep.py`) reports the rest: imports of CUDA-only packages, Triton kernels,
    compiled extensions, and any CUDA reference no rule decided on.
    """

    NAME = "diagnostics"
    TITLE = "CUDA-only constructs"
    CODES = ("NPU901", "NPU903", "NPU930", "NPU931", "NPU932")
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
            note='`nn.DataParallel` is not supported on NPU',
            before="""\
import torch

model = torch.nn.DataParallel(model, device_ids=[0, 1])
""",
            codes=('NPU901',),
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
            self.ctx.report(self.report_qualnames[qual], original)
            return updated
        if id(original) in self._training_captures:
            self.ctx.report("NPU932", original)
            return updated
        return None

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
        if self.ctx.qualname(original.func) != "torch.compile":
            return None
        for arg in original.args:
            if arg.keyword is not None and arg.keyword.value == "mode":
                mode = string_value(arg.value)
                if mode in _COMPILE_MODES:
                    self.ctx.report("NPU903", arg.value, name=mode)
        return updated

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
        self.ctx.note("NPU930", call, what=f"`{text if len(text) <= 80 else text[:77] + '...'}`")

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
