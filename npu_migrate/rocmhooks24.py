"""A backend whose own class selects it automatically only on another vendor's GPU (issue #16,
round-24 audit BO#24). Per file, from run.py (after libgates23.py).

SGLang's Petit NVFP4 quantization is a ROCm backend: its config class is found automatically
through a selection hook that asks a predicate of the class, and that predicate is false on an NPU
host:

    class PetitNvFp4Config(QuantizationConfig):
        @classmethod
        def override_quantization_method(cls, hf_quant_cfg, user_quant):
            can_convert = cls.is_petit_nvfp4_compatible(hf_quant_cfg)
            if can_convert:
                return cls.get_name()
            return None

        @classmethod
        def is_petit_nvfp4_compatible(cls, quant_config):
            return _is_hip and quant_config.get("quant_method", "") == "modelopt"

        def get_quant_method(self, layer, prefix):
            return PetitNvFp4LinearMethod(self)      # FP8 weight scales there (NPU913)

On an NPU host the hook never picks the class; only a user naming the backend explicitly does
(and then it needs that vendor's kernels). The findings of the class, and of the classes of the
file only it names (the linear method it returns), go to info saying so, naming the predicate, its
line and the hook: they are true of the code, and ask for review, not for porting work.

Read: a predicate method of the class whose every `return` is false on an NPU host because it
asks for another vendor's GPU (testscopes.npu_truth false on an operand naming ROCm, XPU, HPU
or MPS: `_is_hip and ...`, `current_platform.is_rocm() and ...`; a condition also naming CUDA, as in
`(_is_cuda or _is_hip) and ...`, is left alone: that backend is CUDA code a port may need), and a
classmethod or staticmethod of the same class (the hook) whose every return of something other
than None or False lies under an `if` testing a call of that predicate (or a local bound once to
one). A predicate an NPU host may pass (`(_is_hip or _is_npu) and ...`) or that names CUDA, a hook
that also returns the backend another way, a class another class of the file names: kept as they were.
"""

from __future__ import annotations

import ast
import dataclasses
import re
from typing import Optional

from . import astcache
from .findings import Finding

PHRASE = "in a backend its own class selects automatically only where"
_OTHER_VENDOR = re.compile(r"(?i)hip|rocm|amd|aiter|gfx\d|xpu|hpu|habana|mps")
_CUDA_WORD = re.compile(r"(?i)cuda|nvidia|\bsm_?\d|blackwell|hopper")
CODES = ("NPU913", "NPU911", "NPU910", "NPU990", "NPU110", "NPU108")


def _methods(cls: ast.ClassDef) -> list:
    return [m for m in cls.body if isinstance(m, (ast.FunctionDef, ast.AsyncFunctionDef))]


def _decorated(function: ast.AST, names: tuple) -> bool:
    return any(isinstance(d, ast.Name) and d.id in names for d in function.decorator_list)


def _returns(function: ast.AST) -> list:
    out, stack = [], list(function.body)
    while stack:
        node = stack.pop()
        if isinstance(node, ast.Return):
            out.append(node)
        elif not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)):
            stack.extend(n for n in ast.iter_child_nodes(node) if isinstance(n, ast.stmt))
    return out


def _other_vendor_only(node: Optional[ast.AST]) -> bool:
    """False on an NPU host because it asks for another vendor's GPU (`_is_hip and ...`,
    `current_platform.is_rocm() and ...`, a bare `False`): a condition that also names CUDA
    (`(_is_cuda or _is_hip) and ...`) is left alone, its backend is CUDA code a port may need."""
    from .testscopes import npu_truth

    if node is None:
        return False
    if isinstance(node, ast.Constant):
        return node.value is False
    if _CUDA_WORD.search(ast.unparse(node)):
        return False
    operands = node.values if isinstance(node, ast.BoolOp) and isinstance(node.op, ast.And) else [node]
    return any(npu_truth(v) is False and _OTHER_VENDOR.search(ast.unparse(v)) for v in operands)


def _predicates(cls: ast.ClassDef) -> dict:
    """{name: (function, the first return's value)} of the class's methods every `return` of which
    is false on an NPU host."""
    out = {}
    for method in _methods(cls):
        returns = _returns(method)
        if returns and all(_other_vendor_only(r.value) for r in returns) and not all(
                isinstance(r.value, ast.Constant) for r in returns):
            out[method.name] = (method, returns[0].value)
    return out


def _asks(node: ast.AST, predicates: dict, receivers: set) -> Optional[str]:
    """The predicate a call asks (`cls.is_compatible(...)`), or None."""
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in predicates \
            and isinstance(node.func.value, ast.Name) and node.func.value.id in receivers:
        return node.func.attr
    return None


def _hook(method: ast.AST, predicates: dict, receivers: set) -> Optional[str]:
    """The predicate a selection hook's every real answer depends on, or None."""
    bound = {}
    for node in ast.walk(method):
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            bound.setdefault(node.targets[0].id, []).append(_asks(node.value, predicates, receivers))
    gates: dict[int, str] = {}  # id(if) -> predicate
    for node in ast.walk(method):
        if isinstance(node, ast.If):
            asked = _asks(node.test, predicates, receivers)
            if asked is None and isinstance(node.test, ast.Name) and len(bound.get(node.test.id, [])) == 1:
                asked = bound[node.test.id][0]
            if asked is not None:
                gates[id(node)] = asked
    parents = {id(c): p for p in ast.walk(method) for c in ast.iter_child_nodes(p)}
    asked_by = set()
    for ret in _returns(method):
        value = ret.value
        if value is None or (isinstance(value, ast.Constant) and value.value in (None, False)):
            continue
        parent, gate = parents.get(id(ret)), None
        while parent is not None and parent is not method:
            if id(parent) in gates and ret in [n for s in parent.body for n in ast.walk(s)]:
                gate = gates[id(parent)]
                break
            parent = parents.get(id(parent))
        if gate is None:
            return None
        asked_by.add(gate)
    return sorted(asked_by)[0] if len(asked_by) == 1 else None


def _segment(text: str, node: ast.AST) -> str:
    shown = " ".join((ast.get_source_segment(text, node) or "").split())
    return shown if len(shown) <= 70 else shown[:67] + "..."


def _selected(tree: ast.Module, text: str) -> list:
    """(first line, last line, reason) of each class selected automatically only where its
    predicate holds, and of the classes only it names."""
    classes = [n for n in tree.body if isinstance(n, ast.ClassDef)]
    out = []
    for cls in classes:
        predicates = _predicates(cls)
        if not predicates:
            continue
        for method in _methods(cls):
            if method.name in predicates or not _decorated(method, ("classmethod", "staticmethod")):
                continue
            asked = _hook(method, predicates, {"cls", cls.name})
            if asked is None:
                continue
            _function, value = predicates[asked]
            reason = (f"{PHRASE} `{_segment(text, value)}` holds (`{asked}`, line {value.lineno}, asked by "
                      f"`{method.name}`): an NPU host runs it only when a user names it explicitly")
            out.append((cls.lineno, cls.end_lineno or cls.lineno, reason))
            named = {n.id for n in ast.walk(cls) if isinstance(n, ast.Name)}
            for other in classes:
                if other is cls or other.name not in named:
                    continue
                elsewhere = [n for c in classes if c is not cls for n in ast.walk(c)
                             if isinstance(n, ast.Name) and n.id == other.name]
                outside = [n for s in tree.body if not isinstance(s, ast.ClassDef) for n in ast.walk(s)
                           if isinstance(n, ast.Name) and n.id == other.name]
                if not elsewhere and not outside:
                    out.append((other.lineno, other.end_lineno or other.lineno,
                                f"{reason}; `{other.name}` is named only by `{cls.name}`"))
            break
    return out


def review(findings: list[Finding], text: str) -> list[Finding]:
    """The module's doc: report-only findings in such classes, info naming the predicate."""
    candidates = [f for f in findings if f.code in CODES and not f.fixable and f.cell is None
                  and f.severity != "info"]
    if not candidates or "classmethod" not in text and "staticmethod" not in text:
        return findings
    tree = astcache.parse(text.encode("utf-8", "surrogateescape"))
    if tree is None:
        return findings
    spans = _selected(tree, text)
    if not spans:
        return findings
    wanted = {id(f) for f in candidates}
    out = []
    for finding in findings:
        places = [finding.line, *(line for line, _column, _source in finding.also)]
        reason = next((r for first, last, r in spans if all(first <= p <= last for p in places)), None)
        if id(finding) in wanted and reason is not None:
            finding = dataclasses.replace(finding, severity="info", message=f"{finding.message} ({reason})")
        out.append(finding)
    return out
