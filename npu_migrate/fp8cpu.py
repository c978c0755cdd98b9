"""FP8 (NPU913) in CPU-only code and in functions an NPU host cannot run (issue #16, round 13).

The round-13 audits read four NPU913 errors as false (AI#33, AJ#23, AI#16, AI#30):

* **A CPU-only module.** `quantized_concat_linear_fusion_cpu.py`, a oneDNN inductor pass: a file
  whose name ends `_cpu.py` and that names no other device (no device string such as "cuda", no
  `torch.cuda`, no `.cuda()`/`.npu()`, no `is_cuda`, no default device) re-quantises CPU weights;
  the CPU of an NPU host runs it as any other (`cpu_reason`, asked by fp8data.FileData.reason).
* **A function that asserts the CPU.** `Float8OpaqueTensor.from_hp` asserts
  `hp_tensor.device.type == "cpu"` before it quantises, and names no other device: its FP8
  tensors are CPU tensors (same question).
* **A function an NPU host cannot run.** `cutlass_fused_experts_fp8` calls `prepare_moe_input`
  unconditionally, a name the module binds only by an import under `if _is_cuda:` (a gate the
  project's own predicate answers False on an NPU host: importgates.false_predicates); a helper
  such as `marlin_quant_fp8_torch` likewise always calls `gptq_marlin_repack`: on an NPU host the
  call raises NameError, the function never completes, and its FP8 places are no port item of
  their own (the gated import is reported, or lowered, where it is). Info, with the reason
  (`review_gated`, a whole-run pass: the project's predicates are read across files), a named
  skipped scope (moot.py).

Kept as errors: FP8 on a device (any other device named in the file or function), a call under a
condition, a function that may return before the gated call, a name bound elsewhere too.
"""

from __future__ import annotations

import ast
import dataclasses
import re
from typing import Callable, Optional

from . import astcache

# another device than the CPU, anywhere in the text read
_OTHER_DEVICE = re.compile(r"""["'](?:cuda|npu|xpu|hpu|mps|gpu|xla|musa)(?::\d+)?["']|\btorch\.cuda\b|\.(?:cuda|npu|xpu)\("""
                           r"""|\bis_cuda\b|set_default_device|\bcurrent_platform\b""")
# the only device words a CPU-only module may hold: a test or a keyword naming the CPU (any other
# `device`, a parameter or an attribute, may bring another device from outside)
_CPU_TESTS = re.compile(r"""\.device\.type\s*==\s*["']cpu["']|\bdevice\s*=\s*["']cpu["']""")
_CPU_MODULE = re.compile(r"(^|/)[^/]*_cpu\.py$")
_FUNCTIONS = (ast.FunctionDef, ast.AsyncFunctionDef)
# why a function an NPU host cannot run is no port item (moot.PHRASES)
CANNOT_RUN = "in a function an NPU host cannot run"
_CODES = frozenset({"NPU913"})


# ----------------------------------------------------------------------------- CPU-only code
def cpu_reason(relpath: str, text: str, node: ast.AST, parent: Callable[[ast.AST], Optional[ast.AST]],
               prefix: str) -> Optional[str]:
    """Why the FP8 place `node` computes on the CPU only (a reason starting with `prefix`,
    fp8data's "not FP8 compute: FP8 data on the CPU"), or None. `parent` gives a node's parent."""
    if _CPU_MODULE.search(relpath) and not _OTHER_DEVICE.search(text) and "device" not in _CPU_TESTS.sub("", text):
        name = relpath.rsplit("/", 1)[-1]
        return f"{prefix}: `{name}` is a CPU-only module (named `_cpu`, it names no other device)"
    main = _main_block(node, parent)
    if main is not None and not _OTHER_DEVICE.search(text) and "device" not in _CPU_TESTS.sub("", text):
        return f"{prefix}: the script's `__main__` block (line {main}) in a file that names no device"
    lines = text.split("\n")
    current = node
    while current is not None:
        holder = parent(current)
        if isinstance(holder, _FUNCTIONS):
            asserted = _asserted_cpu(holder, node.lineno)
            if asserted is not None:
                source = "\n".join(lines[holder.lineno - 1:holder.end_lineno or holder.lineno])
                if not _OTHER_DEVICE.search(source):
                    return (f"{prefix}: `{holder.name}` asserts `{asserted}` before it and names "
                            "no other device")
        current = holder
    return None


def _main_block(node: ast.AST, parent: Callable[[ast.AST], Optional[ast.AST]]) -> Optional[int]:
    """The line of the module-level `if __name__ == "__main__":` that holds `node`, or None."""
    current = node
    while current is not None:
        holder = parent(current)
        if isinstance(holder, ast.Module):
            test = getattr(current, "test", None)
            if (isinstance(current, ast.If) and isinstance(test, ast.Compare) and isinstance(test.left, ast.Name)
                    and test.left.id == "__name__" and any(isinstance(c, ast.Constant) and c.value == "__main__"
                                                           for c in test.comparators)):
                return current.lineno
            return None
        current = holder
    return None


def meta_reason(node: ast.AST, parent: Callable[[ast.AST], Optional[ast.AST]], prefix: str) -> Optional[str]:
    """Why an FP8 place in a meta (shape-only) registration computes nothing (`meta_registration`)."""
    current = node
    while current is not None:
        holder = parent(current)
        if isinstance(holder, _FUNCTIONS):
            decorator = meta_registration(holder)
            if decorator is None:
                return None
            return (f"{prefix}a meta (shape-only) registration, `{holder.name}` (`@{decorator}`): "
                    "it makes no FP8 data on any device")
        current = holder
    return None


def meta_registration(function: ast.AST) -> Optional[str]:
    """The decorator that registers `function` as a meta/fake (shape-only) implementation
    (`@_register_meta_op(...)`, `@register_fake(...)`, `@impl_abstract(...)`): torch calls it with
    meta tensors to learn shapes and dtypes, so it computes nothing. None otherwise."""
    for decorator in getattr(function, "decorator_list", ()):
        target = decorator.func if isinstance(decorator, ast.Call) else decorator
        dotted = astcache.dotted(target) or ""
        if is_meta_decorator(dotted):
            return dotted
    return None


def is_meta_decorator(dotted: str) -> bool:
    """A decorator name that registers a meta/fake implementation (`_register_meta_op`,
    `register_fake`, `impl_abstract`, `torch.library.register_meta`)."""
    name = dotted.rsplit(".", 1)[-1].lower()
    return "meta" in name.split("_") or name in _FAKE_REGISTRATIONS


_FAKE_REGISTRATIONS = frozenset({"register_fake", "impl_abstract", "register_meta", "register_fake_class"})


def _asserted_cpu(function: ast.AST, line: int) -> Optional[str]:
    """`x.device.type == "cpu"` asserted by a statement of the function's own body that ends
    before `line` (the whole test, or an operand of its top-level `and`)."""
    for stmt in function.body:
        if stmt.lineno >= line:
            break
        if not isinstance(stmt, ast.Assert) or (stmt.end_lineno or stmt.lineno) >= line:
            continue
        test = stmt.test
        operands = test.values if isinstance(test, ast.BoolOp) and isinstance(test.op, ast.And) else [test]
        for operand in operands:
            if isinstance(operand, ast.Compare) and len(operand.ops) == 1 and isinstance(operand.ops[0], ast.Eq):
                sides = [operand.left, operand.comparators[0]]
                if any(isinstance(s, ast.Constant) and s.value == "cpu" for s in sides) and any(
                        isinstance(s, ast.Attribute) and s.attr == "type" and isinstance(s.value, ast.Attribute)
                        and s.value.attr == "device" for s in sides):
                    return ast.unparse(operand)
    return None


# ----------------------------------------------------------------------------- functions an NPU host cannot run
_GATED_IMPORT = re.compile(rb"\nif [^\n]*:[ \t]*\n[ \t]+(?:from|import) ")


def review_gated(results: list, paths: dict) -> list:
    """NPU913 errors whose every place lies in a function that unconditionally calls a name the
    module binds only by an import under an `if` an NPU host never takes: info, with the reason."""
    from .modpaths import RunTexts, result_bytes

    def open_error(f) -> bool:
        return f.code in _CODES and not f.fixable and f.cell is None and f.severity != "info"

    candidates = [i for i, r in enumerate(results) if r.relpath.endswith(".py") and any(map(open_error, r.findings))]
    if not candidates:
        return results
    out = list(results)
    predicates: Optional[frozenset] = None
    calls: Optional[re.Pattern] = None
    for i in candidates:
        result = results[i]
        data = result_bytes(result, paths)
        if not data or not _GATED_IMPORT.search(data):
            continue  # (cheap before the parse: a module-level `if` holding an import)
        source = data.split(b"\n")
        if not all(0 < line <= len(source) and source[line - 1][:1] in (b" ", b"\t")
                   for f in result.findings if open_error(f) for line in [f.line, *(p[0] for p in f.also)]):
            continue  # (a place at module level lies in no function)
        if predicates is None:
            from .importgates import false_predicates

            python = [j for j, r in enumerate(results) if r.relpath.endswith(".py")]
            predicates = false_predicates(python, RunTexts(results, paths))
            calls = re.compile(rb"\b(?:" + b"|".join(re.escape(p.encode()) for p in sorted(predicates)) + rb")\(\)") \
                if predicates else None
        if calls is None or not calls.search(data):
            continue  # (no gate of the project's own predicates in the file)
        tree = astcache.parse(data)
        if tree is None:
            continue
        gated = gated_names(tree, predicates)
        if not gated:
            continue
        findings, changed = [], False
        for finding in result.findings:
            if open_error(finding):
                why = [_cannot_run(tree, line, gated) for line in [finding.line, *(p[0] for p in finding.also)]]
                if all(why):
                    finding = dataclasses.replace(finding, severity="info",
                                                  message=f"{finding.message} ({'; '.join(dict.fromkeys(why))})")
                    changed = True
            findings.append(finding)
        if changed:
            out[i] = dataclasses.replace(result, findings=findings)
    return out


def gated_names(tree: ast.Module, predicates: frozenset) -> dict[str, str]:
    """{name: condition} of the names the module binds only by imports in the body of a
    module-level `if` that is false on an NPU host (and nowhere else at module level)."""
    from .importgates import gate_spans, module_bindings

    spans = gate_spans(tree, module_bindings(tree), predicates)
    if not spans:
        return {}
    starts = {first: test for first, _last, test in spans}
    inside: dict[str, str] = {}
    elsewhere: set[str] = set()
    for stmt in tree.body:
        test = starts.get(stmt.body[0].lineno) if isinstance(stmt, ast.If) and stmt.body else None
        gated_body = {id(s) for s in stmt.body} if test is not None else set()
        for top in (stmt.body + stmt.orelse if test is not None else [stmt]):
            for node in _own_nodes(top, keep_defs=True):
                names = _bound(node)
                if id(top) in gated_body and isinstance(node, (ast.Import, ast.ImportFrom)):
                    inside.update((n, test) for n in names)
                else:
                    elsewhere.update(names)
    # (`global name` in a function: it may rebind the name at run time)
    elsewhere.update(name for node in astcache.walk(tree) if isinstance(node, ast.Global) for name in node.names)
    return {n: c for n, c in inside.items() if n not in elsewhere}


def _bound(node: ast.AST) -> list[str]:
    if isinstance(node, (ast.Import, ast.ImportFrom)):
        return [(a.asname or a.name).split(".", 1)[0] for a in node.names if a.name != "*"]
    if isinstance(node, (*_FUNCTIONS, ast.ClassDef)):
        return [node.name]
    if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
        return [node.id]
    return []


# nodes a call may sit in and still run whenever its statement does
_PLAIN = (ast.Expr, ast.Assign, ast.AnnAssign, ast.AugAssign, ast.Return, ast.Call, ast.Attribute, ast.Subscript,
          ast.Tuple, ast.List, ast.keyword, ast.Starred, ast.BinOp, ast.UnaryOp, ast.Name, ast.Constant, ast.Slice)


def _cannot_run(tree: ast.Module, line: int, gated: dict[str, str]) -> Optional[str]:
    """The reason when `line` lies in a module-level function (or a method of a module-level
    class) whose own body calls a gated name unconditionally, with no `return` before that call."""
    function = None
    for stmt in tree.body:
        members = [stmt] if isinstance(stmt, _FUNCTIONS) else \
            [s for s in stmt.body if isinstance(s, _FUNCTIONS)] if isinstance(stmt, ast.ClassDef) else []
        for member in members:
            if member.lineno <= line <= (member.end_lineno or member.lineno):
                function = member
    if function is None:
        return None
    if any(isinstance(n, (ast.Yield, ast.YieldFrom)) for n in _own_nodes(function)):
        return None  # (a generator runs only as it is iterated, and may yield before the call)
    local = {a.arg for a in ast.walk(function.args) if isinstance(a, ast.arg)}
    local |= {n.id for n in ast.walk(function) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}
    local |= {name for n in ast.walk(function) if isinstance(n, (ast.Import, ast.ImportFrom)) for name in _bound(n)}
    for stmt in function.body:
        if not isinstance(stmt, _PLAIN):
            if any(isinstance(n, (ast.Return, ast.Yield, ast.YieldFrom)) for n in _own_nodes(stmt)):
                return None  # (it may return, or yield, before the call)
            continue
        for call in _plain_calls(stmt):
            name = call.func.id
            if name in gated and name not in local:
                return (f"{CANNOT_RUN}: `{function.name}` always calls `{name}`, imported only under "
                        f"`if {gated[name]}:`, which an NPU host does not take")
        if isinstance(stmt, ast.Return):
            return None
    return None


def cannot_run(tree: ast.Module, line: int, gated: dict[str, str]) -> Optional[str]:
    """Public for backend16.py: see _cannot_run."""
    return _cannot_run(tree, line, gated)


def plain_calls(stmt: ast.AST):
    """Public for backend16.py: see _plain_calls."""
    return _plain_calls(stmt)


def _own_nodes(stmt: ast.AST, keep_defs: bool = False):
    """The nodes of a statement, the bodies of nested functions and classes left out (with
    `keep_defs`, their `def`/`class` statements themselves are kept: they bind a name)."""
    stack = [stmt]
    while stack:
        node = stack.pop()
        yield node
        if keep_defs and isinstance(node, (*_FUNCTIONS, ast.ClassDef)):
            continue  # (a module-level `def`: it binds its name, its body binds nothing here)
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (*_FUNCTIONS, ast.ClassDef, ast.Lambda)):
                if keep_defs and not isinstance(child, ast.Lambda):
                    yield child
                continue
            stack.append(child)


def _plain_calls(stmt: ast.AST):
    """Calls of a plain name reached whenever the statement runs (through no condition,
    short-circuit, lambda or comprehension), in evaluation order roughly."""
    stack = [stmt]
    while stack:
        node = stack.pop()
        if not isinstance(node, _PLAIN) and not isinstance(node, (ast.expr_context, ast.operator, ast.unaryop)):
            continue
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
            yield node
        stack.extend(reversed(list(ast.iter_child_nodes(node))))
