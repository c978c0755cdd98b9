"""True findings whose severity or wording misled the porter (issue #16, round-20 audits).

Reviewers judged these findings TRUE but said their level or message understated what happens on
an NPU host. Per file (run.py, after labels9, before the per-file merge), on the finding's own
construct:

- **A custom op registered for CUDA only**: the `"cuda"` of `device_types` in
  `@torch.library.custom_op("ns::op", device_types="cuda")` (or `["cuda"]`), reported by the sweep
  as a bare `string "cuda"` (NPU990, warning). With `device_types` set, the op gets a kernel for
  CUDA only: a call with NPU tensors finds no kernel for the NPU's dispatch key (PrivateUse1) and
  raises, even where the body is plain torch. Registered unconditionally at import (no enclosing
  `if` or `try`), it becomes an error whose message says so and what to do (add "npu" where the
  body runs on an NPU, else register an NPU kernel). Registered only under an `if` (`if
  _C_ext is not None:`: an NPU host may never define it), it keeps its warning with the same
  explanation and the condition named. An op the file also gives another kernel
  (`fn.register_kernel(...)`, `torch.library.register_kernel("ns::op", ...)`), or one labels5 /
  labels6 already lowered to info (called only after a probe, in a CUDA-only block), is left as is.
- **A device default of "cuda"**: `device = device or "cuda"` (the right operand of an `or`
  assigned to a name or attribute whose name says device, with a device left operand), a warning
  `string "cuda"`. Where the caller passes no device, an NPU host gets "cuda" and every `.to()` /
  `torch.device(...)` of it fails: an error that says to default to the NPU (the shim's device)
  and let the device checks downstream accept it. Left as it was when the function assigns the
  name again after it (`if device == "cuda" and not available: device = "cpu"`).
- **A device check that skips a private CUDA API torch_npu has** (NPU110, `uses
  torch.cuda.memory._record_memory_history, which npu-migrate leaves as written`): the message
  names the NPU counterpart that rules/cuda_api.toml's [report] entry gives (torch_npu 2.7.1
  defines `torch.npu.memory._record_memory_history`, `_snapshot`, `_dump_snapshot` in
  torch_npu/npu/memory.py), says "code written for CUDA" rather than "CUDA-only code", and says
  to widen the check and call it there; the level is kept
  (a warning: the feature silently records nothing on an NPU host).

- **An import of vLLM's NCCL machinery** (NPU916, info: "vLLM runs on Ascend through the
  vllm-ascend plugin", merged with the file's harmless `vllm.utils` imports): an import whose module
  or names say NCCL (`from vllm.distributed.weight_transfer.nccl_common import trainer_init`,
  `packed_nccl_broadcast_producer`, `NCCLWeightTransferEngine`) brings in vLLM's NCCL communicator
  (PyNcclCommunicator loads libnccl), which an NPU host lacks: a trainer that joins the weight
  transfer from this process needs an HCCL path there. A warning (review: vllm-ascend may provide
  the counterpart) at the file's first such import, standing for the file's other vLLM imports
  (their places in its "also at"), which said no more than "review".

Nothing is dropped or added: each finding keeps its place, code and source.
"""

from __future__ import annotations

import ast
import re
from dataclasses import replace
from typing import Optional

from . import astcache, catalogue
from .findings import NCCL_TRANSFER, Finding
from .folding import absorb

STRING = "CUDA-only reference left unchanged: string"
CUDA_ONLY_OP = ("the `device_types` of a custom op (`torch.library.custom_op`): the op gets a kernel for CUDA only, so a call "
                "with NPU tensors raises (no kernel for the NPU's dispatch key, PrivateUse1); add \"npu\" "
                "to `device_types` where its body runs on an NPU, else register an NPU kernel "
                "(`<op>.register_kernel(\"npu\")`)")
CONDITIONAL_OP = "; registered only when `{test}` (line {line}) holds"
DEVICE_DEFAULT = ("the default device where none is passed (`{text}`): an NPU host then puts tensors and "
                  "modules on \"cuda\", which fails: default to the NPU there (the shim's device) and let "
                  "the device checks that read it accept the NPU")
_LEFT_AS_WRITTEN = re.compile(r"uses `torch\.cuda\.([\w.]+)`, which npu-migrate leaves as written")
_CUDA_ONLY_HEAD = "Device check guards CUDA-only code ("
_WRITTEN_FOR_CUDA_HEAD = "Device check guards code written for CUDA ("
_NPU_NAME = re.compile(r"\btorch\.npu\.[\w.]+")
NPU_COUNTERPART = ("; torch_npu has `{npu}`: widen the check to the NPU and call it there, or the NPU host "
                   "silently goes without it")
_DEVICE_WORD = re.compile(r"(?i)device")
_NCCL = re.compile(r"(?i)nccl")
# (NCCL_TRANSFER lives in findings.py: findings.split_merged keeps it off a split-off place that names no NCCL)


def _custom_op_call(node: ast.AST, parent: dict) -> Optional[tuple[ast.Call, ast.AST]]:
    """(the `custom_op(...)` call, its decorated definition or the call) when `node` is a string of
    its `device_types` keyword."""
    up = parent.get(id(node))
    if isinstance(up, (ast.List, ast.Tuple, ast.Set)):
        up = parent.get(id(up))
    if not (isinstance(up, ast.keyword) and up.arg == "device_types"):
        return None
    call = parent.get(id(up))
    if not isinstance(call, ast.Call) or not (astcache.dotted(call.func) or "").split(".")[-1] == "custom_op":
        return None
    owner = parent.get(id(call))
    return call, owner if isinstance(owner, (ast.FunctionDef, ast.AsyncFunctionDef)) else call


def _enclosing_if(node: ast.AST, parent: dict) -> Optional[ast.AST]:
    """The innermost `if` or `try` the registration runs in (None: at import, unconditionally;
    a function's body counts as conditional too: it registers when called)."""
    current = parent.get(id(node))
    while current is not None and not isinstance(current, ast.Module):
        if isinstance(current, (ast.If, ast.Try, ast.FunctionDef, ast.AsyncFunctionDef)):  # (a class body runs)
            return current
        current = parent.get(id(current))
    return None


def _other_kernel(text: str, op: str, name: str) -> bool:
    return bool(re.search(rf"\b{re.escape(name)}\.register_kernel\(", text)) or (
        bool(op) and re.search(rf"register_kernel\(\s*[\"']{re.escape(op)}[\"']", text) is not None)


def _custom_op(finding: Finding, node: ast.AST, parent: dict, text: str) -> Optional[Finding]:
    found = _custom_op_call(node, parent)
    if found is None:
        return None
    call, owner = found
    op = call.args[0].value if call.args and isinstance(call.args[0], ast.Constant) and \
        isinstance(call.args[0].value, str) else ""
    name = owner.name if isinstance(owner, (ast.FunctionDef, ast.AsyncFunctionDef)) else "op"
    if _other_kernel(text, op, name):
        return None
    why = CUDA_ONLY_OP  # (no op name: the file's ops, one fix each, stay one finding with its places)
    block = _enclosing_if(owner, parent)
    if block is None:
        return replace(finding, severity="error", message=_add(finding.message, why))
    if isinstance(block, ast.If):
        why += CONDITIONAL_OP.format(test=" ".join(ast.unparse(block.test).split())[:80], line=block.lineno)
    return replace(finding, message=_add(finding.message, why))


def _device_default(finding: Finding, node: ast.AST, parent: dict) -> Optional[Finding]:
    """`device = device or "cuda"`: the string is the last operand of an `or` assigned to a device."""
    boolop = parent.get(id(node))
    if not (isinstance(boolop, ast.BoolOp) and isinstance(boolop.op, ast.Or) and boolop.values[-1] is node):
        return None
    left = astcache.dotted(boolop.values[0]) or ""
    assign = parent.get(id(boolop))
    if not (isinstance(assign, (ast.Assign, ast.AnnAssign)) and _DEVICE_WORD.search(left)):
        return None
    targets = assign.targets if isinstance(assign, ast.Assign) else [assign.target]
    names = {astcache.dotted(t) for t in targets} - {None}
    if not names or not all(_DEVICE_WORD.search(n.split(".")[-1]) for n in names):
        return None
    scope = parent.get(id(assign))
    while scope is not None and not isinstance(scope, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Module)):
        scope = parent.get(id(scope))
    for other in ast.walk(scope) if scope is not None else ():
        if isinstance(other, (ast.Assign, ast.AnnAssign, ast.AugAssign)) and other is not assign \
                and getattr(other, "lineno", 0) > assign.lineno:
            later = other.targets if isinstance(other, ast.Assign) else [other.target]
            if names & {astcache.dotted(t) for t in later}:
                return None  # (reassigned after: a check may move it off "cuda")
    text = " ".join(ast.unparse(assign).split())
    return replace(finding, severity="error", message=_add(finding.message, DEVICE_DEFAULT.format(text=text[:80])))


def _add(message: str, why: str) -> str:
    """`why` in parentheses after the construct, before an "(also at ...)" list."""
    match = re.search(r" \(also at [^()]*\)$", message)
    if match:
        return f"{message[:match.start()]} ({why}){message[match.start():]}"
    return f"{message} ({why})"


def _npu_counterpart(finding: Finding) -> Finding:
    match = _LEFT_AS_WRITTEN.search(finding.message)
    if match is None:
        return finding
    entry = catalogue.cuda_api().get("report", {}).get(match.group(1), "")
    npu = _NPU_NAME.search(entry if isinstance(entry, str) else "")
    if npu is None:
        return finding
    name = npu.group(0).rstrip(".")
    message = finding.message[:match.end()] + NPU_COUNTERPART.format(npu=name) + finding.message[match.end():]
    # (not "CUDA-only code": torch_npu has it, round-20 BE#33)
    return replace(finding, message=message.replace(_CUDA_ONLY_HEAD, _WRITTEN_FOR_CUDA_HEAD, 1))


def review(findings: list[Finding], text: str) -> list[Finding]:
    """The findings, with the shapes above given their level and an accurate message."""
    out = list(findings)
    strings = [i for i, f in enumerate(out) if f.code == "NPU990" and not f.fixable and f.cell is None
               and f.severity == "warning" and f.message.startswith(STRING) and not f.also]
    if strings and ("custom_op" in text or " or " in text):
        tree = astcache.parse(text.encode("utf-8"))
        if tree is not None:
            at = astcache.strings_at(tree)
            parent = astcache.parents(tree)
            for i in strings:
                node = at.get((out[i].line, out[i].column))
                if node is None or node.value != "cuda" or "(" in out[i].message[len(STRING):]:
                    continue
                changed = _custom_op(out[i], node, parent, text) or _device_default(out[i], node, parent)
                if changed is not None:
                    out[i] = changed
    out = [_npu_counterpart(f) if f.code == "NPU110" and not f.fixable else f for f in out]
    return _asserted_cuda(_nccl_imports(out), text)


ASSERTED = ("asserted: `torch.version.cuda` is None on an NPU host, so the `assert` fails there "
            "(line {line}); assert the NPU build too, or drop the check on the NPU path")


def _requires(test: ast.AST, name: str) -> bool:
    """`test` is false wherever `name` is None: `name`, `name is not None`, or a conjunct of an `and`."""
    if isinstance(test, ast.BoolOp) and isinstance(test.op, ast.And):
        return any(_requires(v, name) for v in test.values)
    if isinstance(test, ast.Compare) and len(test.ops) == 1 and isinstance(test.ops[0], ast.IsNot) \
            and isinstance(test.comparators[0], ast.Constant) and test.comparators[0].value is None:
        test = test.left
    return astcache.dotted(test) == name


def _asserted_cuda(findings: list[Finding], text: str) -> list[Finding]:
    """NPU990 on `torch.version.cuda` as (a conjunct of) an `assert`'s test, the assert not inside a
    `try`: an error, not a warning, with why (round-21 audit BF#19: xformers' `assert
    torch.version.cuda` on the main path of a selector is a hard AssertionError on an NPU host)."""
    wanted = [i for i, f in enumerate(findings) if f.code == "NPU990" and not f.fixable and f.cell is None
              and f.severity == "warning" and (f.source or "") == "torch.version.cuda"]
    if not wanted or "assert" not in text:
        return findings
    tree = astcache.parse(text.encode("utf-8"))
    if tree is None:
        return findings
    parent = astcache.parents(tree)
    asserts = {n.lineno: n for n in ast.walk(tree) if isinstance(n, ast.Assert)
               and _requires(n.test, "torch.version.cuda")}
    out = list(findings)
    for i in wanted:
        node = asserts.get(out[i].line)
        if node is None:
            continue
        up, guarded = parent.get(id(node)), False
        while up is not None and not guarded:
            guarded = isinstance(up, ast.Try)
            up = parent.get(id(up))
        if not guarded:
            out[i] = replace(out[i], severity="error", message=_add(out[i].message, ASSERTED.format(line=node.lineno)))
    return out


def _nccl_imports(findings: list[Finding]) -> list[Finding]:
    """The file's vLLM imports (NPU916 info) as one warning headed by its first NCCL import."""
    vllm = [f for f in findings if f.code == "NPU916" and not f.fixable and f.severity == "info"
            and not f.also and f.cell is None]
    nccl = [f for f in vllm if f.source.startswith(("from ", "import ")) and _NCCL.search(f.source)]
    if not nccl:
        return findings
    target = replace(nccl[0], severity="warning", message=f"{nccl[0].message} ({NCCL_TRANSFER})")
    others = [f for f in vllm if f is not nccl[0]]
    merged = absorb(target, others) if others else target
    gone = {id(f) for f in vllm}
    return sorted([*(f for f in findings if id(f) not in gone), merged])


# ----------------------------------------------------------------------------- round 28 (CB#36)
OP_BODY = "inside this CUDA-only custom op's body, which an NPU host never runs until the op is registered for it"


def fold_op_bodies(findings: list[Finding], text: str) -> list[Finding]:
    """An FP8 place (NPU913) in the body of a function registered `@torch.library.custom_op(...,
    device_types="cuda")` (or `["cuda"]`) whose "cuda" holds an open CUDA_ONLY_OP note: the op has no
    NPU kernel, so a call with NPU tensors raises at dispatch and its body never runs on an NPU
    host (xformers' `_fused_allgather_and_linear_custom_op` and its `torch._scaled_mm`, round-28
    audit CB#36). Registering the op for the NPU is the work that note asks, and its body, FP8
    included, is ported with it: the place folds into that note, which names it. An op registered
    for another device too, a note already lowered, a place outside the decorated function: kept."""
    from .folding import Fold, ours, places_of

    targets = [f for f in findings if ours(f) and f.code == "NPU990" and CUDA_ONLY_OP in f.message
               and f.severity != "info"]
    if not targets or not any(ours(f) and f.code == "NPU913" and f.severity != "info" for f in findings):
        return findings
    tree = astcache.parse(text.encode("utf-8", "surrogatepass"))
    if tree is None:
        return findings
    ops = []  # (first body line, last line, the "cuda" constant's line)
    for node in astcache.walk(tree):
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        for deco in node.decorator_list:
            if not (isinstance(deco, ast.Call) and (astcache.dotted(deco.func) or "").endswith("custom_op")):
                continue
            value = next((k.value for k in deco.keywords if k.arg == "device_types"), None)
            items = value.elts if isinstance(value, (ast.List, ast.Tuple)) else [value]
            if value is not None and len(items) == 1 and isinstance(items[0], ast.Constant) \
                    and items[0].value == "cuda":
                ops.append((node.body[0].lineno, node.end_lineno or node.lineno, items[0].lineno))
    if not ops:
        return findings
    fold = Fold(findings)
    for target in targets:
        fold.targets.add(id(target))
    for finding in findings:
        if not (ours(finding) and finding.code == "NPU913" and finding.severity != "info"):
            continue
        for place in places_of(finding):
            op = next((o for o in ops if o[0] <= place[0] <= o[1]), None)
            target = next((t for t in targets if op is not None
                           and any(line == op[2] for line, _c, _s in places_of(t))), None)
            if target is not None and fold.movable(finding, target):
                fold.move(finding, [place], target)
    folded = fold.result(name_them=OP_BODY)
    return sorted(folded) if folded is not findings else findings
