"""Triton modules behind a module-level availability test, and strings that name no device
(issue #16, round-15 audits AN#8, AN#9, AN#27, AN#33, AO#33, AP#36). Per file, after tritonguards.review (run.py).

- **A Triton import hub behind `if TYPE_CHECKING or HAS_TRITON:`** (NPU910, samefile.PROBE_ONLY, a
  named scope): the module defines no kernel, imports `triton` only in the body of a module-level
  `if` on a Triton-availability test, and its `else:` binds placeholders. An NPU host without Triton
  takes the `else`; with Triton-Ascend installed the import succeeds there. The kernels that use
  the names are judged in their own files.
- **Triton kernels behind a module-level availability test with an `else:`** (NPU910, info, not a
  named scope): every place of the finding lies in the body of `if has_triton():` (or
  `if torch_version_at_least(...) and has_triton():`) whose `else:` binds the module's names
  (stubs or placeholders). The module imports cleanly where Triton is missing; with Triton-Ascend
  installed the kernels run on the NPU host: verify them there (`GATED_KERNELS`). A file with
  inline assembly (`inline_asm_elementwise`, PTX) keeps its error: no Triton-Ascend runs it
  (unless all of it sits in another block an NPU host never runs, ptxreach19.py).
- **ROCm-only Triton kernels** (NPU910, `ROCM_TRITON`, moot.PHRASES, AN#8): every
  `tl.inline_asm_elementwise` of the module is AMD GPU ISA (`v_and_or_b32 ...`), and a function of the
  module starts with `if not current_platform.is_rocm(): return False` (the kernel class's
  `can_implement`): no NVIDIA or NPU device runs them. PTX assembly, or no ROCm selector, keeps the error.
- **The "cuda" dispatch key of a custom op called only after a probe an NPU host fails** (NPU990,
  `PROBED_FALSE`, moot.PHRASES, AN#27): labels5.PROBED_OP found every call of the op after `assert
  _has_x()`; here the probe is evaluated in the file with `torch.backends.cusparselt.is_available()`
  (or cuDNN's) False, as on an NPU host: through module-level names and argument-less functions of
  the file, constant comparisons, `if not ...: return` (`_has_cusparseLt()` -> `_cusplt_version >=
  (0, 5, 0)` -> `(0, 0, 0)`). Anything it cannot evaluate leaves the info as it is.
- **A "cuda"/"nccl" string that names no device** (NPU990, dropped): a prefix matched against a name
  (`events.name.str.startswith("nccl")`, `kernel_name.startswith("cuda")`) in trace analysis; the
  name of the attribute whose own `__name__` it is compared with (`getattr(mod._flash_attention_forward,
  "__name__", "") == "_flash_attention_forward"`: monkey-patching checks the attribute still holds
  the original). A string passed as a device (`torch.device("cuda")`, `.to("cuda")`), an op's name
  compared with a CUDA op (`func.overloadpacket.__name__ == "_scaled_dot_product_flash_attention"`,
  AO#40: the NPU dispatches another op) or given to `getattr` stay.
"""

from __future__ import annotations

import ast
import dataclasses
import re
from typing import Optional

from . import astcache, ptxreach19, tritonascend26
from .findings import Finding

GATED_KERNELS = ("guarded by the module-level Triton-availability test `{test}` (line {line}), whose `else:` "
                 "(line {other}) binds the module's names where Triton is missing: an NPU host without "
                 "Triton never runs these kernels (the feature is unavailable there); with Triton-Ascend "
                 "installed (a module named `triton`), whether the test holds there depends on what it "
                 "probes (" + tritonascend26.HAS_TRITON_ON_NPU + "): where it holds, these kernels run on "
                 "the NPU host: verify them there")
PTX_KEPT = ("guarded by the module-level Triton-availability test `{test}` (line {line}), whose `else:` "
            "(line {other}) binds the module's names where Triton is missing, so an NPU host without Triton "
            "imports the module and the feature is unavailable there; kept an error because the kernels use "
            "inline assembly (`tl.inline_asm_elementwise`, line {asm}), which no Triton-Ascend runs: where "
            "Triton-Ascend is installed and the test holds, these kernels fail on the NPU host")
HUB = ("the import sits under `{test}` (line {line}) with placeholders in its `else:` (line {other}); with "
       "Triton-Ascend installed the import succeeds on an NPU host")
# (moot.PHRASES: code an NPU host never runs)
ROCM_TRITON = "ROCm-only Triton kernels"
ROCM_REASON = ("ROCm-only Triton kernels: their inline assembly is AMD GPU ISA (`{asm}`, line {line}), which "
               "runs on no NVIDIA or NPU device, and the module's selector `{selector}` (line {at}) returns "
               "False unless the platform is ROCm")
# one AMD GCN/RDNA/CDNA instruction (`v_and_or_b32 $0, $1, $2, 0x64006400`, `s_waitcnt`, `ds_read_b32`)
_AMD_INSTRUCTION = re.compile(r"(?:v|s|ds|buffer|global|flat|scratch)_[a-z0-9_]+\b")
_ROCM_TEST = re.compile(r"(?:^|\.)_*is_(?:rocm|hip)$")
# (moot.PHRASES)
PROBED_FALSE = ("the dispatch key of a custom op called only after a probe false on an NPU host: `{probe}` "
                "evaluates to False where `{library}` is False, as on an NPU host (torch_npu builds no {name})")
# availability probes of CUDA libraries no NPU build of torch has: False on an NPU host
_FALSE_PROBES = {"torch.backends.cusparselt.is_available": "cuSPARSELt",
                 "torch.backends.cudnn.is_available": "cuDNN"}
_PROBE_IN_MESSAGE = re.compile(r"the dispatch key of custom op `[^`]*`, which this file calls only after the "
                               r"availability probe `(\w+)\(\)`")
_UNKNOWN = object()
_NAME_ATTRIBUTES = frozenset(("name", "__name__", "__qualname__"))
_DEVICE_WORDS = ("device", "backend", "platform", "accelerator", "dist")


def _places(finding: Finding) -> list[tuple[int, int]]:
    return [(finding.line, finding.column), *((line, column) for line, column, _source in finding.also)]


def review(findings: list[Finding], text: str) -> list[Finding]:
    """The file's NPU910 behind a module-level Triton-availability `if` with an `else:`, and its
    NPU990 strings that name an attribute or a kernel (see the module's doc)."""
    wanted = [f for f in findings if f.cell is None and not f.fixable
              and ((f.severity != "info" and (f.code == "NPU910" or (f.code == "NPU990" and "string" in f.message)))
                   or (f.code == "NPU990" and "which this file calls only after the availability probe" in f.message))]
    if not wanted or not _may_apply(wanted, text):
        return findings
    tree = astcache.parse(text.encode("utf-8", "surrogatepass"))
    if tree is None:
        return findings
    try:
        findings = _gated_triton(_rocm_only(findings, tree, text), tree, text)
        return _probed_false(_name_strings(findings, tree), tree, text)
    except RecursionError:
        return findings


_MODULE_ELSE = re.compile(r"^else[ \t]*:", re.MULTILINE)


def _may_apply(wanted: list[Finding], text: str) -> bool:
    """The text tests the four parts make before they read the tree (this runs per file after the
    engine, for every file with an open NPU910 or NPU990: most need no second parse)."""
    triton = any(f.code == "NPU910" for f in wanted)
    strings = any(f.code == "NPU990" for f in wanted)
    return bool((triton and _MODULE_ELSE.search(text))  # (_gated_triton: a module-level `if` with an `else:`)
                or (triton and "inline_asm" in text and ("rocm" in text or "hip" in text))  # (_rocm_only)
                or (strings and ("startswith" in text or "endswith" in text or "__name__" in text))  # (_name_strings)
                or (strings and any(probe.rsplit(".", 1)[0] in text for probe in _FALSE_PROBES)))  # (_probed_false)


# ----------------------------------------------------------------------------- Triton behind a module-level `if`
def _guards(tree: ast.Module) -> list[ast.If]:
    from .tritonguards import tests_triton

    return [s for s in tree.body if isinstance(s, ast.If) and s.orelse and tests_triton(s.test)]


def _in_body(statement: ast.If, line: int) -> bool:
    first, last = statement.body[0], statement.body[-1]
    start = min([first.lineno, *(d.lineno for d in getattr(first, "decorator_list", ()))])
    return start <= line <= (last.end_lineno or last.lineno)


def _gated_triton(findings: list[Finding], tree: ast.Module, text: str) -> list[Finding]:
    targets = [f for f in findings if f.code == "NPU910" and f.cell is None and not f.fixable
               and f.severity != "info"]
    if not targets:
        return findings
    guards = _guards(tree)
    if not guards:
        return findings
    from .samefile import PROBE_ONLY
    from .tritonguards import KERNEL_DECORATOR, UNGUARDED

    kernels = any(isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and any(
        KERNEL_DECORATOR.search(astcache.dotted(d.func if isinstance(d, ast.Call) else d) or "")
        for d in n.decorator_list) for n in astcache.walk(tree))
    out = []
    for finding in findings:
        guard = None
        if finding in targets and UNGUARDED not in finding.message:
            guard = next((g for g in guards if all(_in_body(g, line) for line, _c in _places(finding))), None)
        if guard is None:
            out.append(finding)
            continue
        test = " ".join(ast.get_source_segment(text, guard.test).split()) if ast.get_source_segment(
            text, guard.test) else "..."
        facts = {"test": test, "line": guard.lineno, "other": guard.orelse[0].lineno}
        if not kernels:
            message = f"{finding.message} ({PROBE_ONLY}; {HUB.format(**facts)})"
        elif "inline_asm" in text and ptxreach19.keeps_error(tree, text, guard):  # (assembly an NPU host may run)
            asm = ptxreach19.asm_lines(tree)
            asm = [n for n in asm if _in_body(guard, n)] or asm  # (the kernels' own assembly first)
            out.append(dataclasses.replace(finding, message=f"{finding.message} ({PTX_KEPT.format(**facts, asm=asm[0])})")
                       if asm else finding)
            continue
        else:
            message = f"{finding.message} ({GATED_KERNELS.format(**facts)})"
        out.append(dataclasses.replace(finding, severity="info", message=message))
    return out


# ----------------------------------------------------------------------------- ROCm-only Triton kernels
def _amd_assembly(tree: ast.Module) -> Optional[tuple[str, int]]:
    """(the first asm string, its line) when the module has `tl.inline_asm_elementwise(...)` calls and
    every one's assembly is made of AMD GPU instructions only; else None."""
    found = None
    for node in astcache.walk(tree):
        if not (isinstance(node, ast.Call) and (astcache.dotted(node.func) or "").endswith("inline_asm_elementwise")):
            continue
        asm = next((k.value for k in node.keywords if k.arg == "asm"), node.args[0] if node.args else None)
        if not (isinstance(asm, ast.Constant) and isinstance(asm.value, str)):
            return None
        lines = [part.strip() for part in re.split(r"[;\n]", asm.value) if part.strip()]
        if not lines or not all(_AMD_INSTRUCTION.match(part) for part in lines):
            return None
        found = found or (" ".join(asm.value.split()), node.lineno)
    return found


def _rocm_selector(tree: ast.Module) -> Optional[tuple[str, int]]:
    """(the function, the line) of a module function whose first statement is `if not
    current_platform.is_rocm(): return False[, reason]` (or `_is_hip`, `is_hip()`); a class's
    `can_implement`/`is_supported` first."""
    found = []
    for node in astcache.walk(tree):
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) or not node.body:
            continue
        first = node.body[0]
        if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):  # (a docstring)
            first = node.body[1] if len(node.body) > 1 else None
        if not (isinstance(first, ast.If) and isinstance(first.test, ast.UnaryOp)
                and isinstance(first.test.op, ast.Not) and first.body and isinstance(first.body[0], ast.Return)):
            continue
        probe = first.test.operand
        name = astcache.dotted(probe.func if isinstance(probe, ast.Call) else probe) or ""
        value = first.body[0].value
        value = value.elts[0] if isinstance(value, ast.Tuple) and value.elts else value
        if _ROCM_TEST.search(name) and isinstance(value, ast.Constant) and value.value is False:
            found.append((node.name, first.lineno))
    found.sort(key=lambda item: not re.search(r"implement|supported", item[0]))
    return found[0] if found else None


def _rocm_only(findings: list[Finding], tree: ast.Module, text: str) -> list[Finding]:
    """The NPU910 of a module whose Triton kernels carry AMD inline assembly and whose selector
    returns False off ROCm: code an NPU host never runs (moot.PHRASES)."""
    if "inline_asm" not in text or not ("rocm" in text or "hip" in text):
        return findings
    targets = [f for f in findings if f.code == "NPU910" and f.cell is None and not f.fixable
               and f.severity != "info"]
    if not targets:
        return findings
    asm, selector = _amd_assembly(tree), _rocm_selector(tree)
    if asm is None or selector is None:
        return findings
    reason = ROCM_REASON.format(asm=asm[0], line=asm[1], selector=selector[0], at=selector[1])
    return [dataclasses.replace(f, severity="info", message=f"{f.message} ({reason})") if f in targets else f
            for f in findings]


# ----------------------------------------------------------------------------- strings that name no device
def _chain(node: ast.AST) -> list[str]:
    parts = []
    while isinstance(node, (ast.Attribute, ast.Call, ast.Subscript)):
        if isinstance(node, ast.Attribute):
            parts.append(node.attr)
        node = node.func if isinstance(node, ast.Call) else node.value
    if isinstance(node, ast.Name):
        parts.append(node.id)
    return parts


def _names_a_name(node: ast.AST) -> bool:
    """`x.name`, `df.name.str`, `kernel_name`, `f.__name__`: never a chain that mentions a device,
    backend, platform or accelerator (`current_platform.device_name`, `accelerator.name`: they may
    hold a device type)."""
    chain = [p.lower() for p in _chain(node)]
    if any(word in p for p in chain for word in _DEVICE_WORDS):
        return False
    return any(p in _NAME_ATTRIBUTES or p.endswith("_name") for p in chain)


def _own_name(node: ast.AST, value: str) -> bool:
    """`getattr(module.f, "__name__", "")` or `module.f.__name__`, compared with "f": whether the
    attribute still holds the original function (a monkey-patching check). An op's `__name__`
    compared with another name (`func.overloadpacket.__name__ == "_flash_op"`) is not this."""
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "getattr" \
            and len(node.args) >= 2 and isinstance(node.args[1], ast.Constant) and node.args[1].value == "__name__":
        owner = node.args[0]
    elif isinstance(node, ast.Attribute) and node.attr == "__name__":
        owner = node.value
    else:
        return False
    return isinstance(owner, ast.Attribute) and owner.attr == value


def _label(node: ast.Constant, parent: dict[int, ast.AST]) -> bool:
    up = parent.get(id(node))
    if isinstance(up, ast.Call):
        func = up.func
        if isinstance(func, ast.Attribute) and func.attr in ("startswith", "endswith") and node in up.args:
            return _names_a_name(func.value)
        return False
    if isinstance(up, ast.Compare) and all(isinstance(op, (ast.Eq, ast.NotEq)) for op in up.ops):
        others = [o for o in (up.left, *up.comparators) if o is not node]
        return len(others) == 1 and _own_name(others[0], node.value)
    return False


def _name_strings(findings: list[Finding], tree: ast.Module) -> list[Finding]:
    targets = [f for f in findings if f.code == "NPU990" and f.cell is None and not f.fixable
               and f.severity != "info" and f.message.startswith("CUDA-only reference left unchanged: string")]
    if not targets:
        return findings
    from .tritonguards import parents

    strings: dict[tuple[int, int], ast.Constant] = {}
    for node in astcache.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            strings[(node.lineno, node.col_offset + 1)] = node
    parent: Optional[dict[int, ast.AST]] = None
    out = []
    for finding in findings:
        if finding in targets:
            nodes = [strings.get(place) for place in _places(finding)]
            if all(n is not None for n in nodes):
                parent = parent if parent is not None else parents(tree)
                if all(_label(n, parent) for n in nodes):
                    continue
        out.append(finding)
    return out


# ----------------------------------------------------------------------------- a custom op behind a false probe
class _Evaluator:
    """Evaluates argument-less functions and module-level names of one file, with the CUDA-library
    probes of `_FALSE_PROBES` False; `_UNKNOWN` for anything else."""

    def __init__(self, tree: ast.Module) -> None:
        self.functions = {n.name: n for n in tree.body if isinstance(n, ast.FunctionDef)}
        self.names: dict[str, ast.AST] = {}
        for node in tree.body:
            if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
                name = node.targets[0].id
                self.names[name] = _UNKNOWN if name in self.names else node.value  # (bound twice: unknown)
        self.used: set[str] = set()

    def value(self, node: ast.AST, local: dict, depth: int):
        if depth > 6:
            return _UNKNOWN
        if isinstance(node, ast.Constant):
            return node.value
        if isinstance(node, ast.Tuple):
            items = [self.value(e, local, depth) for e in node.elts]
            return _UNKNOWN if any(i is _UNKNOWN for i in items) else tuple(items)
        if isinstance(node, ast.Name):
            if node.id in local:
                return local[node.id]
            bound = self.names.get(node.id)
            return _UNKNOWN if bound is None or bound is _UNKNOWN else self.value(bound, {}, depth + 1)
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
            inner = self.value(node.operand, local, depth)
            return _UNKNOWN if inner is _UNKNOWN else not inner
        if isinstance(node, ast.Compare) and len(node.ops) == 1:
            left, right = self.value(node.left, local, depth), self.value(node.comparators[0], local, depth)
            ops = {ast.GtE: lambda a, b: a >= b, ast.Gt: lambda a, b: a > b, ast.LtE: lambda a, b: a <= b,
                   ast.Lt: lambda a, b: a < b, ast.Eq: lambda a, b: a == b, ast.NotEq: lambda a, b: a != b}
            op = ops.get(type(node.ops[0]))
            if op is None or left is _UNKNOWN or right is _UNKNOWN:
                return _UNKNOWN
            try:
                return op(left, right)
            except TypeError:
                return _UNKNOWN
        if isinstance(node, ast.Call) and not node.args and not node.keywords:
            dotted = astcache.dotted(node.func) or ""
            if dotted in _FALSE_PROBES:
                self.used.add(dotted)
                return False
            if isinstance(node.func, ast.Name) and node.func.id in self.functions:
                return self.call(self.functions[node.func.id], depth + 1)
        return _UNKNOWN

    def call(self, function: ast.FunctionDef, depth: int):
        if depth > 6 or function.args.args or function.args.posonlyargs or function.decorator_list:
            return _UNKNOWN
        local: dict = {}
        for statement in function.body:
            if isinstance(statement, ast.Expr) and isinstance(statement.value, ast.Constant):
                continue  # (a docstring)
            if isinstance(statement, ast.Assign) and len(statement.targets) == 1 \
                    and isinstance(statement.targets[0], ast.Name):
                local[statement.targets[0].id] = self.value(statement.value, local, depth)
                continue
            if isinstance(statement, ast.AnnAssign) and isinstance(statement.target, ast.Name) \
                    and statement.value is not None:
                local[statement.target.id] = self.value(statement.value, local, depth)
                continue
            if isinstance(statement, ast.If):
                test = self.value(statement.test, local, depth)
                if test is _UNKNOWN:
                    return _UNKNOWN
                branch = statement.body if test else statement.orelse
                if not branch:
                    continue
                if len(branch) == 1 and isinstance(branch[0], ast.Return):
                    return None if branch[0].value is None else self.value(branch[0].value, local, depth)
                return _UNKNOWN
            if isinstance(statement, ast.Return):
                return None if statement.value is None else self.value(statement.value, local, depth)
            return _UNKNOWN
        return None


def _probed_false(findings: list[Finding], tree: ast.Module, text: str) -> list[Finding]:
    """The info NPU990 of labels5.PROBED_OP whose probe evaluates to False on an NPU host."""
    if not any(probe.rsplit(".", 1)[0] in text for probe in _FALSE_PROBES):
        return findings
    out = []
    evaluator: Optional[_Evaluator] = None
    for finding in findings:
        match = _PROBE_IN_MESSAGE.search(finding.message) if finding.code == "NPU990" else None
        if match is not None:
            evaluator = evaluator or _Evaluator(tree)
            function = evaluator.functions.get(match.group(1))
            evaluator.used.clear()
            if function is not None and evaluator.call(function, 0) is False and evaluator.used:
                library = sorted(evaluator.used)[0]
                reason = PROBED_FALSE.format(probe=f"{match.group(1)}()", library=f"{library}()",
                                             name=_FALSE_PROBES[library])
                finding = dataclasses.replace(finding, severity="info",
                                              message=f"{finding.message} ({reason})")
        out.append(finding)
    return out
