"""Labels, references and probes, not device uses: more shapes the leftover sweep (NPU990) met on
real projects that only name CUDA (issue #16, round-9 audits).

- an attribute REFERENCE to a method of torch's Tensor named for CUDA, not a call
  (`_torch_cuda = torch.Tensor.cuda` saved to wrap it, `@implements_torch_function(torch.Tensor.cuda)`
  registering a handler of `.cuda()` calls, `torch.Tensor.cuda = wrapper`): the attribute exists in
  every torch build, the NPU one included; the `.cuda()` calls themselves are rewritten or reported
  where they are (a call `torch.Tensor.cuda(x)` stays reported);
- `torch.version.cuda` used after a test of None in the same `or` / `and`
  (`torch.version.cuda is None or not torch.version.cuda.startswith("12.9")`, `torch.version.cuda is
  not None and ...`, `torch.version.cuda and ...`): None on an NPU build of torch short-circuits the
  test before the use, a clean version probe (`torch.version.cuda.split(".")` alone stays reported);
- "cuda" handed to a function of the same file whose name is about versions and that reads the
  attribute so named with a default (`_get_torch_version_attr("cuda")` doing `getattr(module, attr,
  None)`): an attribute's name, as `getattr(obj, "cuda", None)` itself is (labels.py);
- the default of a field annotated `Literal[...]` that lists it among options that are neither
  devices nor backends (`backend: Literal["transfer_engine", "nccl"] = "nccl"`): a choice's label,
  as `choices=[...]` is (labels.py); information, since the option may still pick an NCCL transport
  of the project's; a device field (`device: Literal["cuda", "cpu"] = "cuda"`) stays a warning;
- the `device_types="cuda"` of a custom op (`@torch.library.custom_op("ns::op", device_types=["cuda"])`)
  that the file calls (`torch.ops.ns.op(...)`) only after asserting an availability probe
  (`assert _has_cusparseLt()`, `if not is_available(): raise`): a CUDA-only library's op, reached on
  no host where the probe is False; information, with the probe named (an op called without such
  a probe, or from another file, keeps its warning: NPU tensors would find no kernel);
- a storage's location tag inside a `torch.load` map_location callback (`def _map(storage,
  location): if location.startswith("cuda") and not cuda_available: return storage.cpu()`): the tag
  a checkpoint was saved with, not a device the code picks.

The sweep calls `mark` for each node it enters (Sweep.on_visit, after labels.mark and
labelflow.mark); what is found goes into the sweep's gates (not reported) or its `label_info`
(information, with the reason).
"""

from __future__ import annotations

import ast
import re
from typing import Any, Optional

import libcst as cst

from . import astcache
from .families.context import dotted_name, literal_value

Sweep = Any  # sweep.Sweep

# torch.Tensor's own members named for CUDA: present in every build of torch
_TENSOR_MEMBERS = frozenset({"torch.Tensor.cuda", "torch.Tensor.is_cuda"})
# a Literal's other options that make the field a device or backend choice after all
_DEVICE_OPTIONS = frozenset({"cpu", "cuda", "npu", "xpu", "mps", "hpu", "meta", "xla", "gpu", "auto", "tpu",
                             "hip", "rocm", "musa", "mlu", "gloo", "mpi", "hccl", "nccl", "ucc", "xccl"})
_DEVICE_WORD = re.compile(r"(?i)dev|accel|dist|process_group|placement")


def _string(node: cst.CSTNode) -> Optional[str]:
    if isinstance(node, cst.SimpleString):
        value = literal_value(node.value)
        return value if isinstance(value, str) else None
    return None


def mark(sweep: Sweep, node: cst.CSTNode) -> None:
    kind = type(node)
    if kind is cst.Call:
        _called(sweep, node)
        _version_getter(sweep, node)
        _probed_op(sweep, node)
    elif kind is cst.Attribute:
        _tensor_member_reference(sweep, node)
    elif kind is cst.BooleanOperation:
        _checked_version(sweep, node)
    elif kind is cst.AnnAssign:
        _literal_choice(sweep, node)
    elif kind in (cst.FunctionDef, cst.Lambda):
        _map_location(sweep, node)


# ----------------------------------------------------------------------------- torch.Tensor.cuda referenced
def _calls(sweep: Sweep) -> set:
    called = getattr(sweep, "_labels5_called", None)
    if called is None:
        called = sweep._labels5_called = set()
    return called


def _called(sweep: Sweep, node: cst.Call) -> None:
    """Remember the callee of each call: the sweep enters a call before its callee."""
    _calls(sweep).add(id(node.func))


def _tensor_member_reference(sweep: Sweep, node: cst.Attribute) -> None:
    if node.attr.value not in ("cuda", "is_cuda") or id(node) in _calls(sweep):
        return
    if (sweep.m.qualname(node) or "") in _TENSOR_MEMBERS:
        sweep.gates.add(id(node))


# ----------------------------------------------------------------------------- torch.version.cuda checked first
def _version(node: cst.CSTNode) -> bool:
    return isinstance(node, cst.Attribute) and (dotted_name(node) or "").endswith("version.cuda")


def _operands(node: cst.BaseExpression, operator: type) -> list:
    """The operands of a chain of one boolean operator (`a or b or c`), left to right."""
    if isinstance(node, cst.BooleanOperation) and isinstance(node.operator, operator) and not node.lpar:
        return [*_operands(node.left, operator), *_operands(node.right, operator)]
    return [node]


def _none_test(test: cst.BaseExpression, operator: type) -> Optional[str]:
    """The version attribute that `test` rules out being None before the next operand: `X is None`
    or `not X` in an `or`; `X is not None` or `X` in an `and`. Its dotted name, or None."""
    if operator is cst.Or and isinstance(test, cst.UnaryOperation) and isinstance(test.operator, cst.Not) \
            and _version(test.expression):
        return dotted_name(test.expression)
    if operator is cst.And and _version(test):
        return dotted_name(test)
    if isinstance(test, cst.Comparison) and len(test.comparisons) == 1:
        wanted = cst.Is if operator is cst.Or else cst.IsNot
        other = test.comparisons[0].comparator
        if isinstance(test.comparisons[0].operator, wanted) and isinstance(other, cst.Name) \
                and other.value == "None" and _version(test.left):
            return dotted_name(test.left)
    return None


def _checked_version(sweep: Sweep, node: cst.BooleanOperation) -> None:
    operator = type(node.operator)
    operands = _operands(node, operator)
    checked: set[str] = set()
    for operand in operands:
        if checked:
            _gate_uses(sweep, operand, checked)
        name = _none_test(operand, operator)
        if name is not None:
            checked.add(name)


def _gate_uses(sweep: Sweep, node: cst.CSTNode, names: set) -> None:
    stack = [node]
    while stack:
        current = stack.pop()
        if isinstance(current, cst.Attribute):
            name = dotted_name(current) or ""
            if any(name == n or name.startswith(n + ".") for n in names):
                sweep.gates.add(id(current))
                continue
        stack.extend(current.children)


# ----------------------------------------------------------------------------- a version attribute's name
def _version_getters(sweep: Sweep) -> dict:
    """{function name: index of the parameter it passes as the name to `getattr(obj, name, default)`}
    for the file's functions named for versions (`_get_torch_version_attr(attr)`), once per file."""
    found = getattr(sweep, "_labels5_getters", None)
    if found is not None:
        return found
    found = {}
    tree = sweep.m._ast()
    for function in astcache.walk(tree) if tree is not None else ():
        if not isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef)) or "version" not in function.name.lower():
            continue
        params = [a.arg for a in function.args.args]
        for inner in ast.walk(function):
            if isinstance(inner, ast.Call) and isinstance(inner.func, ast.Name) and inner.func.id == "getattr" \
                    and len(inner.args) == 3 and isinstance(inner.args[1], ast.Name) and inner.args[1].id in params:
                found[function.name] = params.index(inner.args[1].id)
    sweep._labels5_getters = found
    return found


def _version_getter(sweep: Sweep, node: cst.Call) -> None:
    if not isinstance(node.func, cst.Name):
        return
    index = _version_getters(sweep).get(node.func.value)
    positional = [a for a in node.args if a.keyword is None and not a.star]
    if index is not None and index < len(positional) and _string(positional[index].value) is not None:
        sweep.gates.add(id(positional[index].value))


# ----------------------------------------------------------------------------- a Literal choice's default
LITERAL_CHOICE = ("the default of a choice typed `Literal[{options}]`, an option's label among others that are no "
                  "backends, not a process-group backend: review only if that option selects an NCCL transport")


def _literal_options(annotation: cst.CSTNode) -> set:
    options: set = set()
    stack = [annotation]
    while stack:
        current = stack.pop()
        if isinstance(current, cst.Subscript) and (dotted_name(current.value) or "").rsplit(".", 1)[-1] == "Literal":
            for element in current.slice:
                if isinstance(element.slice, cst.Index) and _string(element.slice.value) is not None:
                    options.add(_string(element.slice.value))
        stack.extend(current.children)
    return options


def _literal_choice(sweep: Sweep, node: cst.AnnAssign) -> None:
    value = _string(node.value) if node.value is not None else None
    target = dotted_name(node.target) or ""
    if value is None or _DEVICE_WORD.search(target.rsplit(".", 1)[-1]):
        return
    options = _literal_options(node.annotation.annotation)
    others = options - {value}
    if value in options and others and not any(o in _DEVICE_OPTIONS or sweep.strings.fullmatch(o) for o in others):
        # information, not gated: the option may still select an NCCL transport of the project's
        sweep.label_info.setdefault(id(node.value), LITERAL_CHOICE.format(
            options=", ".join(f'"{o}"' for o in sorted(options))))


# ----------------------------------------------------------------------------- a map_location callback
def _map_location(sweep: Sweep, node) -> None:
    """`def _map(storage, location)`: torch.load's map_location callback, whose second parameter
    is the tag the storage was saved with ("cuda:0"); "cuda" tested against it is that tag."""
    params = [p.name.value for p in node.params.params]
    if len(params) < 2 or "storage" not in params[0].lower() or not re.fullmatch(r"(?i)loc(ation)?", params[1]):
        return
    location = params[1]
    stack = [node.body]
    while stack:
        current = stack.pop()
        if isinstance(current, cst.Call) and isinstance(current.func, cst.Attribute) \
                and current.func.attr.value == "startswith" and isinstance(current.func.value, cst.Name) \
                and current.func.value.value == location and current.args:
            sweep.gates.update(id(s) for s in [current.args[0].value] if _string(s) is not None)
        elif isinstance(current, cst.Comparison) and len(current.comparisons) == 1 \
                and isinstance(current.comparisons[0].operator, (cst.Equal, cst.NotEqual)):
            sides = (current.left, current.comparisons[0].comparator)
            if any(isinstance(s, cst.Name) and s.value == location for s in sides):
                sweep.gates.update(id(s) for s in sides if _string(s) is not None)
        if not isinstance(current, (cst.FunctionDef, cst.ClassDef)) or current is node:
            stack.extend(current.children)


# ----------------------------------------------------------------------------- a probed CUDA-only custom op
_REGISTRATIONS = frozenset({"torch.library.custom_op", "torch.library.register_kernel", "torch.library.triton_op"})
_PROBE = re.compile(r"(?i)^_*has_\w+$|available|supported")  # (`_has_cusparseLt()`, `is_available()`)
PROBED_OP = ("the dispatch key of custom op `{op}`, which this file calls only after the availability probe "
             "`{probe}` (line {line}): review only if that probe can be true on an NPU host")


def _probe_call(test: ast.AST) -> Optional[str]:
    """`_has_cusparseLt()`, `lib.is_available()`: a probe of the environment, asked with no
    argument (not `x.is_contiguous()`, a check of a tensor)."""
    if isinstance(test, ast.Call) and not test.args and not test.keywords:
        func = test.func
        name = func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else ""
        if _PROBE.search(name):
            return ast.unparse(test)
    return None


def _probed_before(function: ast.AST, line: int) -> Optional[tuple[str, int]]:
    """The availability probe asserted (`assert _has_x()`) or raised on (`if not _has_x(): raise`)
    at the top level of `function`'s body before `line`: (its text, its line), or None."""
    for stmt in getattr(function, "body", ()):
        if stmt.lineno >= line:
            break
        if isinstance(stmt, ast.Assert) and _probe_call(stmt.test):
            return _probe_call(stmt.test), stmt.lineno
        if isinstance(stmt, ast.If) and isinstance(stmt.test, ast.UnaryOp) and isinstance(stmt.test.op, ast.Not) \
                and _probe_call(stmt.test.operand) and stmt.body and isinstance(stmt.body[-1], ast.Raise):
            return _probe_call(stmt.test.operand), stmt.lineno
    return None


def _op_probe(sweep: Sweep, op: str) -> Optional[tuple[str, int]]:
    """The probe in front of every call of `torch.ops.<ns>.<name>` in this file (at least one)."""
    namespace, _, name = op.partition("::")
    tree = sweep.m._ast()
    if tree is None or not name:
        return None
    functions = [n for n in astcache.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]
    probes = []
    for call in astcache.walk(tree):
        if isinstance(call, ast.Call) and ast.unparse(call.func) in (f"torch.ops.{namespace}.{name}",
                                                                      f"torch.ops.{namespace}.{name}.default"):
            holding = [f for f in functions if f.lineno <= call.lineno <= (f.end_lineno or f.lineno)]
            inner = max(holding, key=lambda f: f.lineno) if holding else None
            probe = _probed_before(inner, call.lineno) if inner is not None else None
            if probe is None:
                return None
            probes.append(probe)
    return probes[0] if probes else None


def _probed_op(sweep: Sweep, node: cst.Call) -> None:
    if sweep.m.qualname(node.func) not in _REGISTRATIONS or not node.args:
        return
    op = _string(node.args[0].value)
    keys = [a.value for a in node.args if a.keyword is not None and a.keyword.value == "device_types"]
    if sweep.m.qualname(node.func) == "torch.library.register_kernel":
        keys += [a.value for a in node.args[1:2] if a.keyword is None]
    strings = [s for key in keys for s in ([key] if isinstance(key, cst.SimpleString) else
                                           [e.value for e in getattr(key, "elements", ())])
               if _string(s) == "cuda"]
    if op is None or not strings:
        return
    probe = _op_probe(sweep, op)
    if probe is not None:
        for string in strings:
            sweep.label_info.setdefault(id(string), PROBED_OP.format(op=op, probe=probe[0], line=probe[1]))
