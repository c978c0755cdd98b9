"""Distributed backends (NPU3xx): "nccl" -> HCCL through the shim, checks of the backend."""

from __future__ import annotations

import functools
import re
from typing import Optional

import libcst as cst
from libcst.helpers import get_full_name_for_node

from .. import catalogue
from .base import Example, Family
from .context import (
    asks_platform_layer,
    is_device_name,
    is_named,
    last_identifier,
    string_value,
    walk_of,
)

_BACKEND_SPEC_RE = re.compile(r"^\w+:\w+(,\w+:\w+)*$")


def is_nccl_spec(value: str) -> bool:
    """"nccl", or a mixed spec such as "cuda:nccl,cpu:gloo"."""
    return value == "nccl" or (_BACKEND_SPEC_RE.match(value) is not None and ":nccl" in value)


@functools.lru_cache(maxsize=None)
def _tables():
    dist = catalogue.distributed_table()
    return (
        frozenset(dist["backend_keywords"]),
        frozenset(dist["backend_first_arg_calls"]),
        frozenset(dist["backend_name_words"]),
        frozenset(dist["other_backends"]),
        frozenset(dist["backend_getters"]),
        dist["enum"],
    )


class Distributed(Family):
    """Points process groups at the accelerator's collective library: NCCL on CUDA, HCCL on Ascend.

    A "nccl" string that is provably a backend (the `backend=` of `init_process_group`, its first
    argument, a variable or parameter named like a backend, the "nccl" branch of
    `"nccl" if ... else "gloo"`) becomes `npu_compat.dist_backend()`, and a mixed spec such as
    "cuda:nccl,cpu:gloo" goes through the same call. `torch.distributed.Backend.NCCL` becomes
    `npu_compat.dist_backend()` too (NPU303). A check of the backend (`backend == "nccl"`,
    `dist.get_backend() != "nccl"`) becomes `npu_compat.is_accelerator_backend(...)` (NPU302), so
    the branch for the accelerator's backend is taken on either machine. A backend the tool cannot
    see (`init_process_group(backend=cfg.backend)`) is reported (NPU304): set it to "hccl" on
    Ascend, or to `npu_compat.dist_backend()`. Any other "nccl" text is not rewritten; the
    leftover sweep lists it for review (NPU990). Code that already handles HCCL next to NCCL (a
    dict, a branch chain) or whose comment says why HCCL is excluded is left as written (NPU991,
    information only).
    """

    NAME = "distributed"
    TITLE = "Distributed backends"
    CODES = ("NPU301", "NPU302", "NPU303", "NPU304")
    EXAMPLES = (
        Example(
            note='"nccl" as the backend argument',
            before="""\
import torch.distributed as dist


def setup(rank, world_size):
    dist.init_process_group("nccl", rank=rank, world_size=world_size)
""",
            after="""\
import torch.distributed as dist

import npu_compat


def setup(rank, world_size):
    dist.init_process_group(npu_compat.dist_backend(), rank=rank, world_size=world_size)
""",
            codes=('NPU301',),
        ),
        Example(
            note='"nccl" given to a framework\'s `dist_backend=` keyword (DeepSpeed\'s `init_distributed`)',
            before="""\
import deepspeed

deepspeed.init_distributed(dist_backend="nccl")
""",
            after="""\
import deepspeed

import npu_compat

deepspeed.init_distributed(dist_backend=npu_compat.dist_backend())
""",
            codes=('NPU301',),
        ),
        Example(
            note='a backend variable with a "gloo" fallback',
            before="""\
import torch
import torch.distributed as dist

backend = "nccl" if torch.cuda.is_available() else "gloo"
dist.init_process_group(backend=backend)
""",
            after="""\
import torch.distributed as dist

import npu_compat

backend = npu_compat.dist_backend() if npu_compat.is_available() else "gloo"
dist.init_process_group(backend=backend)
""",
            codes=('NPU301', 'NPU201'),
        ),
        Example(
            note='mixed backend specs and `new_group`',
            before="""\
import torch.distributed as dist

dist.init_process_group("cpu:gloo,cuda:nccl")
group = dist.new_group(ranks=[0, 1], backend="nccl")
""",
            after="""\
import torch.distributed as dist

import npu_compat

dist.init_process_group(npu_compat.dist_backend("cpu:gloo,cuda:nccl"))
group = dist.new_group(ranks=[0, 1], backend=npu_compat.dist_backend())
""",
            codes=('NPU301', 'NPU301'),
        ),
        Example(
            note="backend comparisons accept the NPU's backend too",
            before="""\
import torch.distributed as dist


def all_reduce(t):
    if dist.get_backend() != "nccl":
        t = t.cpu()
    dist.all_reduce(t)
    return t
""",
            after="""\
import torch.distributed as dist

import npu_compat


def all_reduce(t):
    if not npu_compat.is_accelerator_backend(dist.get_backend()):
        t = t.cpu()
    dist.all_reduce(t)
    return t
""",
            codes=('NPU302',),
        ),
        Example(
            note='`dist.Backend.NCCL`',
            before="""\
import torch.distributed as dist


def uses_nccl():
    return dist.get_backend() == dist.Backend.NCCL
""",
            after="""\
import torch.distributed as dist

import npu_compat


def uses_nccl():
    return dist.get_backend() == npu_compat.dist_backend()
""",
            codes=('NPU303',),
        ),
        Example(
            note='a backend read from the command line or a config: reported',
            before="""\
import torch.distributed as dist


def setup(args):
    dist.init_process_group(backend=args.dist_backend)
""",
            codes=('NPU304',),
        ),
        Example(
            note='a check whose comment says why HCCL is excluded, and a backend dict that has HCCL: left as written',
            before="""\
class Hooks:
    def supports_coalescing(self, backend):
        # HCCL reorders coalesced all-gathers: only NCCL takes the fast path here
        return backend == "nccl"


BACKENDS = {"cuda": "nccl", "npu": "hccl", "cpu": "gloo"}
""",
            codes=('NPU991', 'NPU991'),
        ),
        Example(
            note='a check beside a "no CUDA here" test: left as written (widened, it would turn an NPU host\'s hccl into gloo)',
            before="""\
def pick_backend(platform, backend):
    if backend == "nccl" and not platform.is_cuda_alike():
        backend = "gloo"  # MPS, CPU
    return backend
""",
        ),
        Example(
            note='beside `not torch.cuda.is_available()`, which becomes the shim\'s accelerator test: widened with it',
            before="""\
import sys

import torch


def skip_without_gpu(backend):
    if backend == "nccl" and not torch.cuda.is_available():
        sys.exit(0)
""",
            after="""\
import sys

import npu_compat


def skip_without_gpu(backend):
    if npu_compat.is_accelerator_backend(backend) and not npu_compat.is_available():
        sys.exit(0)
""",
            codes=('NPU302', 'NPU201'),
        ),
        Example(
            note='"hccl" is never touched (it is also Habana\'s backend)',
            before="""\
import torch.distributed as dist

dist.init_process_group(backend="hccl")
""",
        ),
        Example(
            note='other backends, and backends only printed',
            before="""\
import torch.distributed as dist

dist.init_process_group("gloo")
print(f"backend: {dist.get_backend()}")
""",
        ),
        Example(
            note='"nccl" in a log message is not a backend (the leftover sweep may still list it as NPU990)',
            before="""\
import logging

logger = logging.getLogger(__name__)
logger.info("all-reduce over nccl took %.1f ms", 3.2)
""",
        ),
    )

    def __init__(self, ctx) -> None:
        super().__init__(ctx)
        (self.backend_keywords, self.backend_first_arg_calls, self.backend_words, self.other_backends,
         self.backend_getters, self.backend_enum) = _tables()
        self.backend_variables: set[str] = set()  # names assigned a backend literal we rewrote

    # ------------------------------------------------------------------ what an earlier run wrote
    def visit_Call(self, node: cst.Call) -> Optional[bool]:
        """`npu_compat.dist_backend("cuda:nccl")`: ours; the variable it is assigned to holds a backend."""
        if self.ctx.is_own_literal_call(node) and node.func.attr.value == "dist_backend":
            self.ctx.claim(node)
            self._note_backend_variable()
            return False
        return None

    def _note_backend_variable(self) -> None:
        """`backend = npu_compat.dist_backend() if ... else "gloo"` (an earlier run's output): the
        variable holds a backend npu-migrate wrote, as `backend = "nccl" ...` did before."""
        ctx = self.ctx
        depth, child = 1, ctx.parents[-1]
        parent = ctx.parent(depth)
        while isinstance(parent, cst.IfExp) and (parent.body is child or parent.orelse is child):
            child, depth = parent, depth + 1
            parent = ctx.parent(depth)
        if isinstance(parent, (cst.Assign, cst.AnnAssign)) and parent.value is child:
            targets = [t.target for t in parent.targets] if isinstance(parent, cst.Assign) else [parent.target]
            self.backend_variables.update(t.value for t in targets if isinstance(t, cst.Name))

    # ------------------------------------------------------------------ "nccl" (NPU301)
    def leave_SimpleString(self, original: cst.SimpleString, updated: cst.SimpleString):
        value = string_value(original)
        if value is None or not is_nccl_spec(value) or not self._is_backend(original):
            return None
        new = self.ctx.shim_call("dist_backend", [] if value == "nccl" else [updated])
        new = new.with_changes(lpar=updated.lpar, rpar=updated.rpar)
        return self.ctx.rewrite("NPU301", original, new) or updated

    def _is_backend(self, node: cst.CSTNode) -> bool:
        """Whether the string literal at `node` (being left) is provably a backend."""
        ctx = self.ctx
        depth, child = 1, node
        parent = ctx.parent(depth)
        fallback = False
        while isinstance(parent, cst.IfExp) and (parent.body is child or parent.orelse is child):
            other = parent.orelse if parent.body is child else parent.body
            fallback = fallback or string_value(other) in self.other_backends
            child, depth = parent, depth + 1
            parent = ctx.parent(depth)
        if fallback:  # "nccl" if ... else "gloo": a backend wherever it goes
            if isinstance(parent, cst.Assign) and parent.value is child:
                self.backend_variables.update(
                    t.target.value for t in parent.targets if isinstance(t.target, cst.Name)
                )
            return True
        if isinstance(parent, cst.Arg) and parent.value is child:
            call = ctx.parent(depth + 1)
            if not isinstance(call, cst.Call):
                return False
            if parent.keyword is not None:
                return parent.keyword.value in self.backend_keywords
            first = call.args and call.args[0] is parent and not parent.star
            return bool(first) and ctx.qualname(call.func) in self.backend_first_arg_calls
        if isinstance(parent, (cst.Assign, cst.AnnAssign)) and parent.value is child:
            targets = parent.targets if isinstance(parent, cst.Assign) else [parent]
            if isinstance(parent, cst.AnnAssign) and self._names_other_values(parent.annotation):
                return False  # `backend: Literal["nccl", "ipc", ...] = "nccl"`: a registry's names
            if any(is_named(t.target, self.backend_words) for t in targets):
                for t in targets:
                    if isinstance(t.target, cst.Name):
                        self.backend_variables.add(t.target.value)
                return True
            return False
        words = self.backend_words
        if isinstance(parent, cst.Param) and parent.default is child:
            return is_named(parent.name, words) and not (
                parent.annotation is not None and self._names_other_values(parent.annotation))
        if isinstance(parent, cst.DictElement) and parent.value is child:
            key = string_value(parent.key)
            return key is not None and is_device_name(key, words)
        if isinstance(parent, cst.Return) and parent.value is child:
            return bool(ctx.functions) and is_device_name(ctx.functions[-1], words)
        return False

    def _names_other_values(self, annotation: cst.Annotation) -> bool:
        """The annotation lists a string that is no process-group backend (`Literal["nccl",
        "ipc", "sparse_nccl"]`): the value names an entry of the project's own registry (vLLM's
        weight-transfer engines), which an NPU backend name would not find."""
        for node in walk_of(annotation, cst.SimpleString):
            value = string_value(node)
            if value is not None and value != "hccl" and value not in self.other_backends and not is_nccl_spec(value):
                return True
        return False

    # ------------------------------------------------------------------ backend == "nccl" (NPU302)
    def _backend_like_operand(self, node: cst.CSTNode) -> bool:
        if isinstance(node, cst.Call):
            qual = self.ctx.qualname(node.func) or ""
            return qual in self.backend_getters or last_identifier(node.func) == "get_backend"
        return is_named(node, self.backend_words)

    def leave_Comparison(self, original: cst.Comparison, updated: cst.Comparison):
        if len(original.comparisons) != 1:
            return None
        op = original.comparisons[0].operator
        left_o, right_o = original.left, original.comparisons[0].comparator
        if not isinstance(op, (cst.Equal, cst.NotEqual)) or "nccl" not in (string_value(left_o), string_value(right_o)):
            return None
        left_u, right_u = updated.left, updated.comparisons[0].comparator
        operand = right_u if string_value(left_o) == "nccl" else left_u
        other = right_o if string_value(left_o) == "nccl" else left_o
        if not self._backend_like_operand(other):
            return updated
        if self._beside_a_non_cuda_test():
            # `if backend == "nccl" and not platform.is_cuda_alike(): backend = "gloo"`: the branch
            # is the code's path for hosts without CUDA, an NPU host among them; widened, it would
            # send the NPU's own hccl to gloo there. As written, hccl is left alone.
            return updated
        new: cst.BaseExpression = self.ctx.shim_call("is_accelerator_backend", [operand])
        if isinstance(op, cst.NotEqual):
            new = cst.UnaryOperation(operator=cst.Not(), expression=new)
        new = new.with_changes(lpar=updated.lpar, rpar=updated.rpar)
        return self.ctx.rewrite("NPU302", original, new) or updated

    def _beside_a_non_cuda_test(self) -> bool:
        """The comparison being left is an operand of an `and` chain with a negated CUDA platform
        test of the project's own (`not current_platform.is_cuda_alike()`, `not is_cuda()`,
        `not _is_cuda`): true on every host without CUDA, an NPU host included."""
        operands, depth = [], 1
        node = self.ctx.parents[-1] if self.ctx.parents else None
        parent = self.ctx.parent(depth)
        while isinstance(parent, cst.BooleanOperation) and isinstance(parent.operator, cst.And):
            operands.append(parent.right if parent.left is node else parent.left)
            node, depth = parent, depth + 1
            parent = self.ctx.parent(depth)
        for operand in operands:
            if not (isinstance(operand, cst.UnaryOperation) and isinstance(operand.operator, cst.Not)):
                continue
            # only tests the migration leaves meaning CUDA, so that a second run decides the same:
            # the project's own predicates (`is_cuda()`, `platform.is_cuda_alike()`) and flags
            # (`_is_cuda`); not `torch.cuda.is_available()` nor a tensor's `.is_cuda`, which become
            # the shim's "an accelerator" tests, beside which the widened check means the same
            inner = operand.expression
            if isinstance(inner, cst.Call) and not inner.args and not (self.ctx.qualname(inner.func) or "").startswith("torch."):
                name = last_identifier(inner.func) or ""
            elif isinstance(inner, cst.Name):
                name = inner.value
            else:
                continue
            if re.fullmatch(catalogue.distributed_table()["cuda_predicate_names"], name):
                return True
        return False

    # ------------------------------------------------------------------ Backend.NCCL (NPU303)
    def reference(self, original, updated, qual: str):
        if qual != self.backend_enum:
            return None
        new = self.ctx.shim_call("dist_backend").with_changes(lpar=updated.lpar, rpar=updated.rpar)
        return self.ctx.rewrite("NPU303", original, new) or updated

    # ------------------------------------------------------------------ unseen backends (NPU304)
    def leave_Call(self, original: cst.Call, updated: cst.Call):
        """init_process_group(backend=cfg.backend): a backend npu-migrate cannot see."""
        ctx = self.ctx
        if ctx.qualname(original.func) not in self.backend_first_arg_calls:
            return None
        for i, arg in enumerate(original.args):
            is_backend = (arg.keyword is not None and arg.keyword.value in self.backend_keywords) or (
                i == 0 and arg.keyword is None and not arg.star
                and ctx.qualname(original.func) != "torch.distributed.new_group"
            )
            if not is_backend:
                continue
            value = arg.value
            if isinstance(value, (cst.SimpleString, cst.FormattedString, cst.ConcatenatedString)):
                continue  # literals: NPU301 or, if no backend at all, left alone
            if isinstance(value, cst.Name) and value.value in self.backend_variables:
                continue
            if isinstance(value, (cst.Name, cst.Attribute)) and self._device_picks(value):
                continue
            if _literal_choice(value):
                continue  # `"gloo" if cfg.device == "cpu" else "nccl"`: each literal seen (NPU301)
            if isinstance(value, cst.Call) and ctx.is_own_literal_call(value):
                continue
            if isinstance(value, (cst.IfExp, cst.Call)) and id(value) in ctx.claimed:
                continue
            if asks_platform_layer(value) or _names_the_device(value):
                # `get_accelerator().communication_backend_name()`, `backend_for(device_type)`:
                # the project's platform layer or the device picks the backend, HCCL on an NPU host
                continue
            ctx.report("NPU304", value)
        return None


    def _device_picks(self, value: cst.Name | cst.Attribute) -> bool:
        """`self.backend = get_distributed_backend(device_type)` before `init_process_group(
        self.backend)`: the variable holds what the device or the platform layer picks, HCCL on
        an NPU host. Looked up in the enclosing function (the class, for `self.x`) when the call
        is about to be reported: the assignment may sit in a statement the traversal skipped as
        cold (no CUDA word in it)."""
        name = get_full_name_for_node(value)
        if not name:
            return False
        want = cst.ClassDef if name.startswith("self.") else cst.FunctionDef
        scope = next((p for p in reversed(self.ctx.parents) if isinstance(p, want)), None)
        if scope is None:
            return False
        finder = _AssignedFrom(name)
        scope.visit(finder)
        return finder.found


class _AssignedFrom(cst.CSTVisitor):
    """Whether `name` is assigned a call that names the device or asks the platform layer."""

    def __init__(self, name: str) -> None:
        self.name, self.found = name, False

    def visit_Assign(self, node: cst.Assign) -> Optional[bool]:
        value = node.value
        if isinstance(value, cst.Call) and (asks_platform_layer(value) or _names_the_device(value)):
            self.found = self.found or any(get_full_name_for_node(t.target) == self.name for t in node.targets)
        return None


def _literal_choice(value: cst.CSTNode) -> bool:
    """A conditional expression whose every branch is a string literal."""
    if isinstance(value, cst.IfExp):
        return _literal_choice(value.body) and _literal_choice(value.orelse)
    return isinstance(value, (cst.SimpleString, cst.ConcatenatedString))


def _names_the_device(value: cst.CSTNode) -> bool:
    """A call that is given the device (`get_distributed_backend(device_type)`, `backend_for(
    self.device)`): the backend follows the device it is asked for."""
    if not isinstance(value, cst.Call):
        return False
    for arg in value.args:
        name = last_identifier(arg.value) if isinstance(arg.value, (cst.Name, cst.Attribute)) else None
        if name is not None and re.search(r"device(_type|_name)?$|accelerator", name):
            return True
    return False

