"""Names that are labels, not settings or devices; HCCL counterparts of NCCL settings (issue #16,
round-17 audits).

- an NCCL_* string that is an entry of a collection whose name says it lists backends or names to
  leave out (`all_potential_ar_backends = ["NCCL_SYMM_MEM", ...]`, `backends.append("NCCL_SYMM_MEM")`,
  `EXCLUDE_ENVS = {"JOB": ["NCCL_IB_HCA"]}`): a label, not an environment key, `getenv` argument or
  assignment target, so nothing is tuned there (AT#7, AV#8). The NPU602 finding (information) is
  lowered with NAME_LABEL, a moot.NO_WORK phrase (a named scope). An NCCL variable written into
  `os.environ` keeps its finding.
- an NCCL variable with a documented HCCL counterpart of the same meaning (rules/env.toml
  `[hccl_counterpart]`: NCCL_SOCKET_IFNAME -> HCCL_SOCKET_IFNAME, ...): its NPU602 message names
  the counterpart instead of saying there is none (AU#20), and what differs in its values
  (`[hccl_counterpart_values]`: HCCL_RDMA_TIMEOUT accepts 5-20 on Atlas A2/A3, ...). Still
  information: the value is carried over by hand.
- a "cuda" string in a collection of Tensor method names that includes "to" (`name in
  {"contiguous", "cuda", "half", "data", "to"}` in a lazy tensor's `__getattr__`): a method name,
  not a device; the migration turns `.cuda()` calls into `.to(...)`, which the set lists (AT#22).
  Information with METHOD_NAMES (moot.NO_WORK). A device list (`{"cpu", "cuda"}`) keeps its finding.

`review` runs per file before the per-file merge (run.migrate_file), after ncclonly.review;
`mark` is called by the sweep for each node it enters, as labels8.mark is.
"""

from __future__ import annotations

import ast
import dataclasses
import functools
import re
from typing import Any

from . import astcache, catalogue
from .findings import Finding

Sweep = Any  # sweep.Sweep

# (moot.NO_WORK) an NCCL name listed as a label (a backend, a name to leave out), not set anywhere here
NAME_LABEL = "an NCCL name listed as a label, not a setting: "
# (moot.NO_WORK) "cuda" as a Tensor method name beside "to" in a set of attribute names
METHOD_NAMES = "a Tensor method name among others (`to`, ...), not a device"

_LABEL_LIST = re.compile(r"(?i)backend|exclude|excluded|ignore|skip|deny|block|blacklist|unset|drop")
_NCCL = re.compile(r"^(TORCH_)?NCCL_[A-Z0-9_]+$")
_IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_DEVICES = frozenset({"cpu", "npu", "xpu", "mps", "hpu", "meta", "xla", "gpu", "auto", "tpu", "hip", "rocm",
                      "musa", "mlu", "ipu", "privateuseone"})


@functools.lru_cache(maxsize=1)
def counterparts() -> dict[str, str]:
    """rules/env.toml `[hccl_counterpart]`: NCCL variable -> the HCCL variable of the same meaning."""
    return dict(catalogue.env_table().get("hccl_counterpart", {}))


# ------------------------------------------------------------------ NPU602: labels and counterparts
def _target_name(node: ast.AST) -> str:
    return astcache.dotted(node) or ""


def _label_holder(node: ast.Constant, parents: dict) -> str:
    """The name of the backend / exclusion collection the string is an entry of, or ""."""
    parent = parents.get(id(node))
    if isinstance(parent, ast.Call) and isinstance(parent.func, ast.Attribute) \
            and parent.func.attr in ("append", "add", "insert") and node in parent.args:
        name = _target_name(parent.func.value)
        return name if _LABEL_LIST.search(name.rpartition(".")[2]) else ""
    if not isinstance(parent, (ast.List, ast.Tuple, ast.Set)):
        return ""
    holder = parents.get(id(parent))
    while isinstance(holder, (ast.List, ast.Tuple, ast.Set, ast.Dict)):  # (nested: a dict's value)
        if isinstance(holder, ast.Dict) and any(key is parent for key in holder.keys):
            return ""
        parent, holder = holder, parents.get(id(holder))
    targets = []
    if isinstance(holder, ast.Assign):
        targets = holder.targets
    elif isinstance(holder, ast.AnnAssign) and holder.value is parent:
        targets = [holder.target]
    names = [_target_name(t) for t in targets]
    return next((n for n in names if n and _LABEL_LIST.search(n.rpartition(".")[2])), "")


def _with_counterpart(finding: Finding) -> Finding:
    name = finding.source.strip("\"'rbuf")
    match = re.search(r"`((?:TORCH_)?NCCL_[A-Z0-9_]+)`", finding.message)
    name = match.group(1) if match else name
    hccl = counterparts().get(name)
    old = "has no one-to-one HCCL counterpart; left unchanged"
    if not hccl or old not in finding.message:
        return finding
    values = dict(catalogue.env_table().get("hccl_counterpart_values", {})).get(name)
    new = (f"has the HCCL counterpart `{hccl}` (CANN), which an NPU host reads instead; left unchanged: "
           f"set `{hccl}` by hand for NPU runs" + (f"; values: {values}" if values else ""))
    return dataclasses.replace(finding, message=finding.message.replace(old, new, 1))


def review(findings: list[Finding], text: str) -> list[Finding]:
    """NPU602 findings on NCCL names listed as labels lowered with NAME_LABEL; NCCL variables with an
    HCCL counterpart named in the message (module doc)."""
    if not any(f.code == "NPU602" for f in findings):
        return findings
    findings = [_with_counterpart(f) if f.code == "NPU602" else f for f in findings]
    hits = [f for f in findings if f.code == "NPU602" and not f.fixable and f.cell is None
            and f.severity == "info" and NAME_LABEL not in f.message and _NCCL.match(f.source.strip("\"'rbuf"))]
    if not hits or not _LABEL_LIST.search(text):
        return findings
    tree = astcache.parse(text.encode("utf-8", "surrogatepass"))
    if tree is None:
        return findings
    parents, at = astcache.parents(tree), astcache.strings_at(tree)
    lowered: dict[int, str] = {}
    for finding in hits:
        places = [(finding.line, finding.column), *((a[0], a[1]) for a in (finding.also or ()))]
        holders = []
        for place in places:
            node = at.get(tuple(place))
            holders.append(_label_holder(node, parents) if node is not None and _NCCL.match(node.value) else "")
        if holders and all(holders):
            lowered[id(finding)] = holders[0]
    if not lowered:
        return findings
    return [dataclasses.replace(f, message=f"{f.message} ({NAME_LABEL}an entry of `{lowered[id(f)]}`)")
            if id(f) in lowered else f for f in findings]


# ------------------------------------------------------------------ "cuda" among Tensor method names
def mark(sweep: Sweep, node) -> None:
    """Called by the sweep for each node it enters: the "cuda" entry of a set/list/tuple of method
    names that includes "to" becomes information (sweep.label_info)."""
    kind = type(node).__name__
    if kind not in ("Set", "List", "Tuple"):
        return
    strings = []
    for element in node.elements:
        value = element.value
        if type(value).__name__ != "SimpleString":
            return
        raw = value.value
        text = raw[1:-1] if raw[:1] in "\"'" and raw[-1:] == raw[:1] and len(raw) >= 2 else None
        if text is None or not _IDENTIFIER.match(text):
            return
        strings.append((text, value))
    names = {text for text, _ in strings}
    others = names - _DEVICES - {"cuda"}
    if "cuda" not in names or "to" not in others or len(others) < 2 or names & {"npu", "xpu", "mps", "hpu"}:
        return
    for text, value in strings:
        if text == "cuda":
            sweep.label_info.setdefault(id(value), METHOD_NAMES)


# ------------------------------------------------------------------ NPU304: an accelerator attribute set to "hccl"
_BACKEND_ATTRIBUTE = re.compile(r"(?i)backend")


def hccl_attribute(run: Any, attribute: str) -> str:
    """Where the project sets its accelerators' backend attribute `attribute` to "hccl" (ColossalAI's
    `super().__init__(name="npu", communication_backend="hccl")`, `self._backend = "hccl"`), as
    "path:line", or "" (also "" unless another place sets it to "nccl": one attribute of a family
    of accelerator classes). A backend read from that attribute (`get_accelerator().communication_backend`)
    is HCCL on an NPU host (AV#29). resolved._backend_value asks; a byte test before any regex pass,
    the answer kept on the run."""
    if not _BACKEND_ATTRIBUTE.search(attribute):
        return ""
    cache = run.__dict__.setdefault("_labels9_hccl", {})
    if attribute in cache:
        return cache[attribute]
    name = re.escape(attribute.lstrip("_").encode())
    setter = rb"(?:\b|self\._?)" + name + rb"\s*(?::\s*str\s*)?=\s*[\"']"
    hccl, nccl = re.compile(setter + rb"hccl[\"']"), re.compile(setter + rb"nccl[\"']")
    found, other = "", False
    for result in run.results:
        if not result.relpath.endswith(".py"):
            continue
        data = run.data(result.relpath) or b""
        if b"ccl" not in data or attribute.lstrip("_").encode() not in data:
            continue
        match = hccl.search(data) if not found else None
        if match:
            line = data.count(b"\n", 0, match.start()) + 1
            found = f"{result.relpath}:{line}"
        other = other or bool(nccl.search(data))
        if found and other:
            break
    cache[attribute] = found if other else ""
    return cache[attribute]


# ------------------------------------------------------------------ NPU202: a patch target; NPU918: NPU declared
# (moot.AS_WRITTEN) `monkeypatch.setattr(torch.cuda.memory, "name", fake)`: written, never called
PATCH_TARGET = "a torch.cuda module a test only patches (a patch target, not a call): every torch build has it"
# (moot.NO_WORK) the class lists the NPU among the devices it supports (`_device = [DeviceType.CUDA, DeviceType.NPU]`)
NPU_DECLARED = "in a class that already lists the NPU among its devices: "
_PATCHERS = frozenset({"setattr", "delattr", "object"})
_PATCH_MODULES = frozenset({"torch.cuda", "torch.cuda.memory", "torch.cuda.random", "torch.cuda.graphs",
                            "torch.cuda.streams", "torch.cuda.amp", "torch.cuda.nccl"})
_DEVICE_LIST = re.compile(r"(?i)device|platform|backend")


def _patch_target(node: ast.AST, parents: dict) -> bool:
    parent = parents.get(id(node))
    if not (isinstance(parent, ast.Call) and parent.args and parent.args[0] is node
            and isinstance(parent.func, ast.Attribute) and parent.func.attr in _PATCHERS):
        return False
    receiver = astcache.dotted(parent.func.value) or ""
    last = receiver.rpartition(".")[2]
    return last in ("monkeypatch", "patch", "mocker") or receiver.endswith("mock.patch")


def _declared_npu(tree: ast.Module, line: int) -> str:
    """`Class._device` when the class around `line` assigns a device list naming the NPU."""
    for node in astcache.walk(tree):
        if not (isinstance(node, ast.ClassDef) and node.lineno <= line <= (node.end_lineno or 0)):
            continue
        for statement in node.body:
            if not isinstance(statement, (ast.Assign, ast.AnnAssign)) or statement.value is None:
                continue
            targets = statement.targets if isinstance(statement, ast.Assign) else [statement.target]
            names = [t.id for t in targets if isinstance(t, ast.Name) and _DEVICE_LIST.search(t.id)]
            if not names or not isinstance(statement.value, (ast.List, ast.Tuple, ast.Set)):
                continue
            for element in statement.value.elts:
                text = ast.unparse(element)
                if text.rpartition(".")[2].upper() == "NPU" or text.strip("\"'").lower() == "npu":
                    return f"`{node.name}.{names[0]}` (line {statement.lineno}) lists `{text}`"
    return ""


def review_targets(findings: list[Finding], text: str) -> list[Finding]:
    """NPU202 on torch.cuda modules only patched by tests (PATCH_TARGET): information, a named
    scope. Before the per-file merge (the lowered message joins no kept one)."""
    patch = [f for f in findings if f.code == "NPU202" and not f.fixable and f.cell is None
             and f.source.strip() in _PATCH_MODULES and PATCH_TARGET not in f.message]
    if not patch or "patch" not in text:
        return findings
    tree = astcache.parse(text.encode("utf-8", "surrogatepass"))
    if tree is None:
        return findings
    changed: dict[int, Finding] = {}
    if patch:
        parents = astcache.parents(tree)
        at: dict = {}
        for node in astcache.nodes(tree, ast.Attribute):
            at.setdefault((node.lineno, node.col_offset + 1), node)
        for finding in patch:
            places = [(finding.line, finding.column), *((a[0], a[1]) for a in (finding.also or ()))]
            if all(at.get(tuple(p)) is not None and _patch_target(at[tuple(p)], parents) for p in places):
                changed[id(finding)] = dataclasses.replace(
                    finding, severity="info", message=f"{finding.message} ({PATCH_TARGET})")
    return [changed.get(id(f), f) for f in findings] if changed else findings


def review_declared(findings: list[Finding], source: bytes) -> list[Finding]:
    """NPU918 places in a class that already lists the NPU among its devices (NPU_DECLARED):
    information, a named scope; the other places stay one finding. After the per-file merge
    (NPU918 is merged per code): the merged finding is split and its places lowered one by one."""
    declared = [f for f in findings if f.code == "NPU918" and not f.fixable and f.cell is None
                and NPU_DECLARED not in f.message]
    if not declared or not re.search(rb"\bNPU\b|[\"']npu[\"']", source):
        return findings
    tree = astcache.parse(source)
    if tree is None:
        return findings
    from .findings import lower_pieces

    out = []
    for finding in findings:
        pieces = None
        if any(finding is f for f in declared):
            pieces = lower_pieces(finding, lambda line: (NPU_DECLARED + why) if (why := _declared_npu(tree, line)) else None)
        out.extend(pieces if pieces is not None else [finding])
    return out
patch_target = _patch_target  # (testlabels27.py)
