"""The torch.cuda API (NPU2xx): calls with an NPU counterpart go through the shim."""

from __future__ import annotations

import functools

import libcst as cst

from .. import catalogue
from ..visitors import CachedTransformerDispatch
from .base import Example, Family
from .context import dotted_name, string_value, walk_calls


def _int_value(node) -> int | None:
    """The value of an integer literal (`8`, `0`), else None."""
    if isinstance(node, cst.Integer):
        try:
            return int(node.value, 0)
        except ValueError:
            return None
    return None


@functools.lru_cache(maxsize=None)
def _tables():
    api = catalogue.cuda_api()
    return (
        frozenset(api["shared"]["names"]),
        dict(api.get("renamed", {})),
        frozenset(api["capability"]["names"]),
        frozenset(api["typed_tensors"]["names"]),
        dict(api["report"]),
        frozenset(api["nvtx"]["names"]),
        dict(api.get("report_codes", {})),
    )



@functools.lru_cache(maxsize=None)
def _portable() -> tuple[str, ...]:
    """Names under torch.cuda that run on any host (rules/sweep.toml `portable`)."""
    return tuple(p for p in catalogue.read_table("sweep.toml").get("portable", ()) if p.startswith("torch.cuda."))

class CudaApi(Family):
    """`torch.cuda.*` calls, on the accelerator of the machine.

    A `torch.cuda` function that torch_npu also has (`synchronize`, `device_count`, `set_device`,
    `memory_allocated`, `manual_seed`, streams and events, ...) becomes the shim's function of the
    same name, `npu_compat.synchronize()` (NPU201), which calls `torch.npu` on Ascend and
    `torch.cuda` elsewhere; the names torch_npu spells differently are mapped (rules/cuda_api.toml).
    Capability queries (`get_device_capability`, `get_device_properties`) go to shim versions that
    give an NPU's answer (NPU203); typed tensor constructors (`torch.cuda.FloatTensor`) too (NPU204);
    `torch.cuda` used as a module object becomes `npu_compat.device_module()` (NPU205); NVTX ranges
    go to `npu_compat.nvtx` (NPU207). An import of `torch.cuda` whose every use was rewritten is
    removed (NPU206). The rest of `torch.cuda` is reported (NPU202, or a code of its own such as
    NPU933 for the jiterator), with the reason in the message: it has no faithful NPU counterpart.

    Names are resolved through the file's imports: `from torch import cuda` then
    `cuda.synchronize()` is the same call. This family is asked last about `torch.cuda` names, so
    the families that own parts of it (autocast, CUDA graphs) decide first.
    """

    NAME = "cuda_api"
    TITLE = "The torch.cuda API"
    CODES = ("NPU201", "NPU202", "NPU203", "NPU204", "NPU205", "NPU206", "NPU207", "NPU933")
    # NPU110 (a `torch.cuda.is_available()` gate in front of CUDA-only code) is the device family's code.
    EXAMPLES = (
        Example(
            note='functions torch.npu offers with the same meaning',
            before="""\
import torch

if torch.cuda.is_available():
    torch.cuda.manual_seed_all(0)
print(f"{torch.cuda.device_count()} devices")
""",
            after="""\
import npu_compat

if npu_compat.is_available():
    npu_compat.manual_seed_all(0)
print(f"{npu_compat.device_count()} devices")
""",
            codes=('NPU201', 'NPU201', 'NPU201'),
        ),
        Example(
            note='events, synchronisation, memory statistics',
            before="""\
import torch

start = torch.cuda.Event(enable_timing=True)
start.record()
torch.cuda.synchronize()
peak = torch.cuda.max_memory_allocated() / 2**30
""",
            after="""\
import npu_compat

start = npu_compat.Event(enable_timing=True)
start.record()
npu_compat.synchronize()
peak = npu_compat.max_memory_allocated() / 2**30
""",
            codes=('NPU201', 'NPU201', 'NPU201'),
        ),
        Example(
            note='`torch.cuda.memory.X` is `torch.cuda.X`; memory pools exist on the NPU too',
            before="""\
import torch

pool = torch.cuda.MemPool()
with torch.cuda.use_mem_pool(pool):
    snapshot = torch.cuda.memory.memory_snapshot()
""",
            after="""\
import npu_compat

pool = npu_compat.MemPool()
with npu_compat.use_mem_pool(pool):
    snapshot = npu_compat.memory_snapshot()
""",
            codes=('NPU201', 'NPU201', 'NPU201'),
        ),
        Example(
            note='a private allocator API: reported with the torch.npu name to call on the NPU path',
            before="""\
import torch

torch.cuda.memory._record_memory_history(max_entries=100000)
""",
            codes=('NPU202',),
        ),
        Example(
            note='no faithful NPU equivalent: reported with what to do instead',
            before="""\
import torch

try:
    loss = model(batch)
except torch.cuda.OutOfMemoryError:
    torch.cuda.empty_cache()
""",
            after="""\
import torch

import npu_compat

try:
    loss = model(batch)
except torch.cuda.OutOfMemoryError:
    npu_compat.empty_cache()
""",
            codes=('NPU202', 'NPU201'),
        ),
        Example(
            note="capability queries go to the shim's safe versions; legacy typed tensors",
            before="""\
import torch

major, _ = torch.cuda.get_device_capability()
dtype = torch.bfloat16 if major >= 8 else torch.float16
ids = torch.cuda.LongTensor([1, 2, 3])
""",
            after="""\
import torch

import npu_compat

major, _ = npu_compat.get_device_capability()
dtype = torch.bfloat16 if major >= 8 else torch.float16
ids = npu_compat.LongTensor([1, 2, 3])
""",
            codes=('NPU203', 'NPU204'),
        ),
        Example(
            note='an Ampere test that chooses bfloat16 asks the NPU whether it has bfloat16',
            before="""\
import torch

use_bf16 = torch.cuda.get_device_capability() >= (8, 0)
if torch.cuda.get_device_capability(0)[0] >= 8:
    torch.set_default_dtype(torch.bfloat16)
""",
            after="""\
import torch

import npu_compat

use_bf16 = npu_compat.is_bf16_capable()
if npu_compat.is_bf16_capable(0):
    torch.set_default_dtype(torch.bfloat16)
""",
            codes=('NPU203', 'NPU203'),
        ),
        Example(
            note='`torch.cuda` used as a value',
            before="""\
import torch


def accelerator_module(device_type):
    return getattr(torch, device_type, torch.cuda)
""",
            after="""\
import torch

import npu_compat


def accelerator_module(device_type):
    return getattr(torch, device_type, npu_compat.device_module())
""",
            codes=('NPU205',),
        ),
        Example(
            note='imports from `torch.cuda` go once every use is rewritten',
            before="""\
from torch.cuda import empty_cache, synchronize

synchronize()
empty_cache()
""",
            after="""\
import npu_compat

npu_compat.synchronize()
npu_compat.empty_cache()
""",
            codes=('NPU206', 'NPU201', 'NPU201'),
        ),
        Example(
            note='NVTX ranges become mstx ranges on the NPU',
            before="""\
import torch

torch.cuda.nvtx.range_push("forward")
loss = model(batch)
torch.cuda.nvtx.range_pop()
""",
            after="""\
import npu_compat

npu_compat.nvtx.range_push("forward")
loss = model(batch)
npu_compat.nvtx.range_pop()
""",
            codes=('NPU207', 'NPU207'),
        ),
        Example(
            note='the jiterator compiles CUDA C++ at run time: no NPU route',
            before="""\
import torch

double = torch.cuda.jiterator._create_jit_fn("template <typename T> T f(T x) { return 2 * x; }")
""",
            codes=('NPU933',),
        ),
        Example(
            note='already NPU code',
            before="""\
import torch

torch.npu.synchronize()
torch.npu.empty_cache()
""",
        ),
        Example(
            note="another library's `cuda` module",
            before="""\
from numba import cuda

cuda.synchronize()
""",
        ),
        Example(
            note="a parameter named `cuda` is the user's own",
            before="""\
import torch


def train(model, loader, cuda=True):
    for batch in loader:
        model(batch)
""",
        ),
    )

    def __init__(self, ctx) -> None:
        super().__init__(ctx)
        (self.api_shared, self.api_renamed, self.api_capability, self.api_typed, self.api_report,
         self.api_nvtx, self.api_report_codes) = _tables()
        self._cuda_imports: list[tuple] = []  # (original, updated) imports that bind torch.cuda names

    def reference(self, original, updated, qual: str):
        if not (qual == "torch.cuda" or qual.startswith("torch.cuda.")):
            return None
        ctx = self.ctx
        if qual == "torch.cuda":
            new = ctx.shim_call("device_module").with_changes(lpar=updated.lpar, rpar=updated.rpar)
            return ctx.rewrite("NPU205", original, new) or updated
        if any(qual == p or qual.startswith(p + ".") for p in _portable()) or self._probes_portable(original, qual):
            ctx.claim(original)  # `torch.cuda._memory_viz.trace_plot`: pure Python, no device
            return updated
        rest = qual[len("torch.cuda."):]
        parts = rest.split(".")
        if self._memory_alias(parts):
            # torch.cuda re-exports its memory module, as torch.npu does: the same name
            parts = parts[1:]
            if parts[0] in self.api_shared:
                rest = ".".join(parts)
        first = parts[0]
        if len(parts) == 2 and parts[0] == "nvtx" and parts[1] in self.api_nvtx:
            new = cst.Attribute(value=ctx.shim_attr("nvtx"), attr=cst.Name(parts[1]))
            new = new.with_changes(lpar=updated.lpar, rpar=updated.rpar)
            return ctx.rewrite("NPU207", original, new, name=parts[1]) or updated
        if self._checked_by_hasattr(parts[-1]):
            ctx.claim(original)  # `if hasattr(torch.cuda, "name"): torch.cuda.name()`: already guarded
            return updated
        # longest listed prefix wins in the report tables; a code of its own before NPU202
        for n in range(len(parts), 0, -1):
            key = ".".join(parts[:n])
            if key in self.api_report_codes:
                ctx.report(self.api_report_codes[key], original, name=rest, what=f"`torch.cuda.{rest}`")
                return updated
            if key in self.api_report:
                ctx.report("NPU202", original, name=rest, note=self.api_report[key])
                return updated
        if len(parts) > 1:
            ctx.report("NPU202", original, name=rest, note="no faithful NPU rewrite")
            return updated
        if rest == "is_available" and self._gates_cuda_only_code(original):
            return updated
        if rest == "get_device_capability" and self._bf16_check_of_call(self.ctx.parent(), original):
            return updated  # the whole comparison is rewritten by leave_Comparison
        target = None
        if first in self.api_shared:
            code, target = "NPU201", first
        elif first in self.api_renamed:
            code, target = "NPU201", self.api_renamed[first]
        elif first in self.api_capability:
            code, target = "NPU203", first
        elif first in self.api_typed:
            code, target = "NPU204", first
        if target is None:
            ctx.report("NPU202", original, name=rest, note="it is not in torch_npu's torch.cuda support list")
            return updated
        new = ctx.shim_attr(target).with_changes(lpar=updated.lpar, rpar=updated.rpar)
        return ctx.rewrite(code, original, new, name=first) or updated

    def _gates_cuda_only_code(self, original) -> bool:
        """`if torch.cuda.is_available(): ... torch.version.cuda.split(".")` (or an `and` chain, an
        `assert`, an early return, a `skipif` decorator) guards CUDA-only code: widened to the
        accelerator it would send an NPU host into code that fails there (None versions, no nvcc,
        CUDA-only packages), so it keeps meaning CUDA and is reported (NPU110)."""
        why = self.ctx.cuda_only_gate(original, kind="available")
        if why is None:
            return False
        self.ctx.report("NPU110", original, why=why)
        return True

    def _probes_portable(self, original: cst.CSTNode, qual: str) -> bool:
        """`hasattr(torch.cuda._memory_viz, "trace_plot")`: asks a module every torch build has
        for a portable name (the answer is the same on an NPU host)."""
        arg, call = self.ctx.parent(), self.ctx.parent(2)
        if not (isinstance(arg, cst.Arg) and arg.value is original and isinstance(call, cst.Call)
                and isinstance(call.func, cst.Name) and call.func.value == "hasattr"
                and len(call.args) == 2 and call.args[0] is arg):
            return False
        member = string_value(call.args[1].value)
        return member is not None and f"{qual}.{member}" in _portable()

    def _checked_by_hasattr(self, name: str) -> bool:
        """Whether an enclosing `if` (or conditional expression, or `and` chain) asks
        `hasattr(..., "name")` first: the call runs only where the module has it, which after
        migration is the NPU's device module."""
        for node in reversed(self.ctx.parents[:-1]):
            tests = []
            if isinstance(node, (cst.If, cst.IfExp, cst.While)):
                tests.append(node.test)
            elif isinstance(node, cst.BooleanOperation):
                tests.append(node.left)
            for test in tests:
                for call in walk_calls(test):
                    if (isinstance(call.func, cst.Name) and call.func.value in ("hasattr", "getattr")
                            and len(call.args) >= 2 and string_value(call.args[1].value) == name):
                        return True
        return False

    def _memory_alias(self, parts: list[str]) -> bool:
        """`torch.cuda.memory.<name>` stands for `torch.cuda.<name>`: a name torch.cuda re-exports
        from its memory module that the tables know (shared, or reported with a note), unless the
        `memory.` spelling has an entry of its own."""
        if len(parts) < 2 or parts[0] != "memory":
            return False
        if any(".".join(parts[:n]) in self.api_report or ".".join(parts[:n]) in self.api_report_codes
               for n in range(2, len(parts) + 1)):
            return False
        return parts[1] in self.api_shared or parts[1] in self.api_report

    # ------------------------------------------------------------------ capability >= (8, 0) (NPU203)
    def _bf16_check_of_call(self, call, func) -> bool:
        """`call` is `func(...)` and the operand of `>= (8, 0)` (or `[0] >= 8`) being left next."""
        if not (isinstance(call, cst.Call) and call.func is func):
            return False
        parent, depth = self.ctx.parent(2), 3
        if isinstance(parent, cst.Subscript):
            if parent.value is not call:
                return False
            parent = self.ctx.parent(depth)
        return isinstance(parent, cst.Comparison) and self._bf16_check(parent) is not None

    def _bf16_check(self, comparison: cst.Comparison) -> cst.Call | None:
        """The `get_device_capability(...)` call of `cap(...) >= (8, 0)` or `cap(...)[0] >= 8`, else None."""
        if len(comparison.comparisons) != 1:
            return None
        target = comparison.comparisons[0]
        if not isinstance(target.operator, cst.GreaterThanEqual):
            return None
        left, right = comparison.left, target.comparator
        if isinstance(left, cst.Subscript):
            index = left.slice[0].slice if len(left.slice) == 1 else None
            if not (isinstance(index, cst.Index) and _int_value(index.value) == 0 and _int_value(right) == 8):
                return None
            left = left.value
        elif not (isinstance(right, cst.Tuple) and [_int_value(e.value) for e in right.elements] == [8, 0]):
            return None
        if isinstance(left, cst.Call) and self.ctx.qualname(left.func) == "torch.cuda.get_device_capability":
            return left
        return None

    def leave_Comparison(self, original: cst.Comparison, updated: cst.Comparison):
        """`torch.cuda.get_device_capability() >= (8, 0)` chooses bfloat16: on an NPU it means
        `is_bf16_supported()`, since the NPU's capability is (0, 0)."""
        if self._bf16_check(original) is None:
            return None
        call = updated.left.value if isinstance(updated.left, cst.Subscript) else updated.left
        new = self.ctx.shim_call("is_bf16_capable").with_changes(
            args=call.args, lpar=updated.lpar, rpar=updated.rpar)
        return self.ctx.rewrite("NPU203", original, new, name="get_device_capability") or updated

    # ------------------------------------------------------------------ imports of torch.cuda (NPU206)
    def leave_Import(self, original: cst.Import, updated: cst.Import):
        if any(n == "torch.cuda" or n.startswith("torch.cuda.") for n in (dotted_name(a.name) or "" for a in original.names)):
            self._cuda_imports.append((original, updated))
        return None

    def leave_ImportFrom(self, original: cst.ImportFrom, updated: cst.ImportFrom):
        module = dotted_name(original.module) if original.module else None
        if module and not original.relative:
            binds_cuda = module.startswith("torch.cuda") or (
                module == "torch"
                and not isinstance(original.names, cst.ImportStar)
                and any(dotted_name(a.name) == "cuda" for a in original.names)
            )
            if binds_cuda:
                self._cuda_imports.append((original, updated))
        return None

    def _removable_imports(self) -> list[cst.CSTNode]:
        """Updated import nodes whose torch.cuda names have no unrewritten use left (NPU206)."""
        ctx = self.ctx
        if "NPU206" not in ctx.enabled:
            return []
        out = []
        for original, updated in self._cuda_imports:
            locals_ = []
            if isinstance(original, cst.Import):
                for alias in original.names:
                    if alias.asname is not None and isinstance(alias.asname.name, cst.Name):
                        locals_.append(alias.asname.name.value)
                    elif (dotted_name(alias.name) or "").startswith("torch.cuda"):
                        # `import torch.cuda` (used as `torch.cuda...`, which `import torch` also
                        # gives): dropped unless the file uses torch.cuda and no use was rewritten,
                        # where the rules left the file's CUDA code alone (a platform-aware class)
                        seen, rewritten = ctx.cuda_import_uses.get("torch", [0, 0])
                        if seen and not rewritten:
                            locals_.append("torch")
            elif not isinstance(original.names, cst.ImportStar):
                for alias in original.names:
                    name = dotted_name(alias.name) or ""
                    if alias.asname is not None and isinstance(alias.asname.name, cst.Name):
                        name = alias.asname.name.value
                    module = dotted_name(original.module) or ""
                    if module == "torch" and (dotted_name(alias.name) != "cuda"):
                        continue  # `from torch import cuda, nn`: only cuda is ours
                    locals_.append(name)
            uses = [ctx.cuda_import_uses.get(n, [0, 0]) for n in locals_]
            # every use rewritten, and at least one (an import nobody uses is not ours to drop)
            if all(u[0] == u[1] for u in uses) and (not uses or any(u[1] for u in uses)):
                ctx.claim(original)
                ctx.add("NPU206", original, True)
                out.append(updated)
            elif locals_ == ["torch"]:
                # a bare `import torch.cuda` kept for uses the rules left alone: the import works on
                # an NPU host; those uses are what the sweep reports
                ctx.claim(original)
        return out

    def finish(self, new_module: cst.Module) -> cst.Module:
        removable = self._removable_imports()
        if not removable:
            return new_module
        return new_module.visit(ImportPruner(removable, self.ctx.plain_torch_import))


# Nodes on the way from a module to its import statements (the statement lines included).
_HOLDS_STATEMENTS = (
    cst.Module, cst.SimpleStatementLine, cst.BaseCompoundStatement, cst.BaseSuite, cst.Else,
    cst.ExceptHandler, cst.ExceptStarHandler, cst.Finally, cst.MatchCase,
)


class ImportPruner(CachedTransformerDispatch, cst.CSTTransformer):
    """Second, rare pass: drop torch.cuda imports whose every use was rewritten (NPU206)."""

    def __init__(self, targets: list[cst.CSTNode], torch_imported: bool) -> None:
        super().__init__()
        self.targets = {id(t) for t in targets}
        self.torch_imported = torch_imported

    def on_visit(self, node: cst.CSTNode) -> bool:
        # Imports sit in statement lines, statement lines in blocks: nothing below an expression
        # (or a decorator, parameters, ...) can hold one, so those subtrees are not rebuilt.
        if not isinstance(node, _HOLDS_STATEMENTS):
            return False
        return super().on_visit(node)

    def leave_Import(self, original_node, updated_node):
        if id(original_node) not in self.targets:
            return updated_node
        names = [dotted_name(a.name) for a in original_node.names]
        kept = []
        for alias, name in zip(original_node.names, names):
            if name and name.startswith("torch.cuda"):
                if alias.asname is None and not self.torch_imported:
                    kept.append(alias.with_changes(name=cst.Name("torch")))
                continue
            kept.append(alias)
        if not kept:
            return cst.RemoveFromParent()
        kept[-1] = kept[-1].with_changes(comma=cst.MaybeSentinel.DEFAULT)
        return updated_node.with_changes(names=kept)

    def leave_ImportFrom(self, original_node, updated_node):
        if id(original_node) not in self.targets:
            return updated_node
        module = dotted_name(original_node.module) or ""
        if module == "torch":
            kept = [a for a in updated_node.names if dotted_name(a.name) != "cuda"]
        else:
            kept = []
        if not kept:
            return cst.RemoveFromParent()
        kept[-1] = kept[-1].with_changes(comma=cst.MaybeSentinel.DEFAULT)
        return updated_node.with_changes(names=kept)
