"""A class that requires a CUDA-only kernel library, and the FP8 code it holds (issue #16, round-23
audit BL#23, BL#34). Per file, from run.py after dominators22.py.

    try:
        from cudalib.quantize import int4_row_quantize, quantize_fp8_row   # (a named scope: the
    except Exception:                                                      #  fallback runs)
        int4_row_quantize = quantize_fp8_row = None

    class Int4Weight(TensorSubclass):
        @classmethod
        def from_hp(cls, w, activation_dtype):
            if int4_row_quantize is None:
                raise ImportError("Requires cudalib")     # NPU911: the gate, reported once
            supported = {torch.bfloat16, torch.float8_e4m3fn}   # NPU913, folded into it
            ...

    def linear(x, weight):
        if weight.activation_dtype == torch.float8_e4m3fn:
            xq, scale = quantize_fp8_row(x)                      # NPU913, folded into it
            return torch.ops.cudalib.f8i4bf16_rowwise(xq, weight.qdata, scale)
        return torch.ops.cudalib.bf16i4bf16_rowwise(x, weight.qdata)

The kernel library has no NPU build (rules/sweep.toml `[availability] never_on_npu`: `mslk`, whose
PyPI builds are mslk-cuda and mslk-rocm only; not `fbgemm_gpu`, which has a CPU build and an Ascend
companion, fbgemm-ascend, for its embedding and sparse ops), so
the guarded import falls back to None on an NPU host and the code's own check raises ImportError
there: the class cannot be built, and nothing past the check runs. Before, the FP8 lines were
reported as errors of their own (a cast to FP8 with no NPU kernel), while the real porting work,
the library itself, was reported nowhere (its import is a guarded one whose fallback runs).

A **gate** is `if <name> is None:` (or `if not <name>:`) whose body raises, at the top level of a
function's body, where `<name>` is bound at module level by an import from such a package and to
None in the import's fallback (an `except` handler, or the other branch of an `if`). An NPU913
finding every line of which lies

* in the gate's function after the gate, or
* in a block (a statement list) that, after that line and unconditionally (not under a nested
  `if`, loop, `try`, `def` or `lambda`), calls an op of the same package (`torch.ops.cudalib.x`):
  the FP8 value feeds that op, which fails on an NPU host whatever the FP8 step does,

is folded into one NPU911 error at the gate (the file's first), which names the package, the
check, the library's ops the file calls, and each folded line. An NPU913 line elsewhere (an FP8
block that calls no such op, code before the gate) keeps the finding as it is; so does a file
without a gate, or a gate on a package an NPU host may have.
"""

from __future__ import annotations

import ast
import re
from typing import Optional

from . import astcache
from .findings import Finding

CODES = ("NPU913",)
GATE = ("C++/CUDA extension or CUDA-only compiled package: `{package}` is required here, and it has no NPU build: "
        "its guarded import falls back to None on an NPU host, where `{check}` (line {line}, in `{function}`) "
        "raises ImportError{ops}; port what the file does with it{covers}")
COVERS = ("; also covers the FP8 code that runs only with it (NPU913, {lines}: past that check, or feeding one "
          "of its ops)")
_COVERED = re.compile(r"also covers the FP8 code that runs only with it \(NPU913, lines? ([\d, ]+):")
_SCOPES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)


def _package(module: str, packages: frozenset) -> Optional[str]:
    return next((p for p in sorted(packages) if module == p or module.startswith(p + ".")), None)


def _gated_names(tree: ast.Module, packages: frozenset) -> dict[str, str]:
    """{name: package} of the module-level names bound by an import from a package without an NPU
    build inside a `try` or an `if`, and to None in the other path."""
    imported: dict[str, str] = {}
    nones: set = set()
    stack = [s for s in tree.body if isinstance(s, (ast.Try, ast.If))]
    while stack:
        node = stack.pop()
        blocks = [node.body, node.orelse, getattr(node, "finalbody", [])]
        blocks += [h.body for h in getattr(node, "handlers", [])]
        for block in blocks:
            for s in block:
                if isinstance(s, ast.ImportFrom) and s.level == 0 and s.module:
                    package = _package(s.module, packages)
                    if package:
                        for alias in s.names:
                            imported[alias.asname or alias.name] = package
                elif isinstance(s, ast.Assign) and isinstance(s.value, ast.Constant) and s.value.value is None:
                    for target in s.targets:
                        nones.update(t.id for t in ast.walk(target) if isinstance(t, ast.Name))
                elif isinstance(s, (ast.Try, ast.If)):
                    stack.append(s)
    return {name: package for name, package in imported.items() if name in nones}


def _tested_name(test: ast.AST) -> Optional[str]:
    """`x` of `x is None` or `not x`."""
    if isinstance(test, ast.Compare) and len(test.ops) == 1 and isinstance(test.ops[0], ast.Is) \
            and isinstance(test.left, ast.Name) and isinstance(test.comparators[0], ast.Constant) \
            and test.comparators[0].value is None:
        return test.left.id
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not) and isinstance(test.operand, ast.Name):
        return test.operand.id
    return None


def _gates(tree: ast.Module, names: dict[str, str]) -> list[tuple[ast.AST, ast.If, str]]:
    """(function, the `if`, package) of each gate, in file order."""
    out = []
    for node in astcache.walk(tree):
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        for s in node.body:
            if isinstance(s, ast.If) and s.body and isinstance(s.body[-1], ast.Raise) and not s.orelse:
                name = _tested_name(s.test)
                if name in names:
                    out.append((node, s, names[name]))
    return sorted(out, key=lambda g: g[1].lineno)


def _op_calls(node: ast.AST, package: str) -> list[tuple[int, str]]:
    """(line, `torch.ops.<package>.x`) of the op calls in `node` outside nested scopes and blocks."""
    out = []
    stack = [node]
    while stack:
        current = stack.pop()
        if current is not node and isinstance(current, (*_SCOPES, ast.If, ast.For, ast.AsyncFor, ast.While,
                                                        ast.Try, ast.With, ast.AsyncWith, ast.IfExp)):
            continue
        if isinstance(current, ast.Call):
            name = astcache.dotted(current.func, strict=True) or ""
            if name.startswith(f"torch.ops.{package}."):
                out.append((current.lineno, name))
        stack.extend(ast.iter_child_nodes(current))
    return out


def _blocks(tree: ast.Module):
    """Every statement list of the file."""
    for node in astcache.walk(tree):
        for field in ("body", "orelse", "finalbody"):
            block = getattr(node, field, None)
            if isinstance(block, list) and block and isinstance(block[0], ast.stmt):
                yield block
        for handler in getattr(node, "handlers", ()) or ():
            yield handler.body


def _feeds_op(blocks: list, line: int, package: str) -> bool:
    """Line `line` lies in a statement of a block whose later statements call an op of `package`
    unconditionally."""
    for block in blocks:
        for k, s in enumerate(block):
            if s.lineno <= line <= (s.end_lineno or s.lineno):
                if isinstance(s, (ast.If, ast.For, ast.While, ast.Try, ast.With, *_SCOPES)):
                    break  # (a compound statement: its own blocks answer)
                if any(_op_calls(later, package) for later in block[k + 1:]) or any(
                        op_line > line for op_line, _ in _op_calls(s, package)):
                    return True
    return False


def folded_fp8_lines(finding: Finding) -> list[int]:
    """The NPU913 lines a gate's NPU911 stands for ([] for any other finding): fp8shapes21's
    selectors read them as FP8 compute reported in that file."""
    if finding.code != "NPU911" or finding.fixable:
        return []
    found = _COVERED.search(finding.message)
    return [int(n) for n in found.group(1).replace(" ", "").split(",") if n] if found else []


def _lines(finding: Finding) -> list[int]:
    return list(dict.fromkeys([finding.line, *(a[0] for a in finding.also)]))


def review(findings: list[Finding], text: str) -> list[Finding]:
    """The module's doc: NPU913 past a kernel library's ImportError gate, or feeding its ops,
    folded into one NPU911 error at the gate."""
    from .probes15 import never_on_npu

    candidates = [f for f in findings if f.code in CODES and not f.fixable and f.cell is None]
    if not candidates:
        return findings
    packages = never_on_npu()
    if not any(p in text for p in packages):
        return findings
    tree = astcache.parse(text.encode("utf-8", "surrogateescape"))
    if tree is None:
        return findings
    names = _gated_names(tree, packages)
    gates = _gates(tree, names) if names else []
    if not gates:
        return findings
    function, gate, package = gates[0]
    blocks = list(_blocks(tree))
    after = range((gate.end_lineno or gate.lineno) + 1, (function.end_lineno or function.lineno) + 1)
    folded, lines = [], []
    for finding in candidates:
        own = _lines(finding)
        if all(line in after or _feeds_op(blocks, line, package) for line in own):
            folded.append(finding)
            lines.extend(own)
    if not folded:
        return findings
    ops = sorted({name for op_line, name in _op_calls_all(tree, package)})
    shown_ops = (f"; the file calls its ops ({', '.join(f'`{o}`' for o in ops[:3])}"
                 f"{', ...' if len(ops) > 3 else ''}), which an NPU host lacks as well") if ops else ""
    lines = sorted(set(lines))
    shown = ", ".join(map(str, lines))
    check = f"if {ast.unparse(gate.test)}: raise"
    message = GATE.format(package=package, check=check, line=gate.lineno, function=_qualified(tree, function),
                          ops=shown_ops, covers=COVERS.format(lines=f"line{'s' if len(lines) > 1 else ''} {shown}"))
    carrier = Finding(path=folded[0].path, line=gate.lineno, column=gate.col_offset + 1, code="NPU911",
                      message=message, fixable=False, source=check, severity="error")
    out = []
    for f in findings:
        if f is folded[0]:
            out.append(carrier)
        if not any(f is g for g in folded):
            out.append(f)
    return out


def _op_calls_all(tree: ast.Module, package: str) -> list[tuple[int, str]]:
    out = []
    for node in astcache.walk(tree):
        if isinstance(node, ast.Call):
            name = astcache.dotted(node.func, strict=True) or ""
            if name.startswith(f"torch.ops.{package}."):
                out.append((node.lineno, name))
    return out


def _qualified(tree: ast.Module, function: ast.AST) -> str:
    parent = astcache.parents(tree).get(id(function))
    return f"{parent.name}.{function.name}" if isinstance(parent, ast.ClassDef) else function.name


tested_name = _tested_name  # (probegates27.py)
