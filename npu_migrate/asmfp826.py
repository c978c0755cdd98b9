"""FP8 computed only in the functions that launch Triton kernels no Triton-Ascend runs (issue #16,
precision wave 26, round-23 audit BL#16). Whole run (runplan.whole_run_passes, after
tritonguards23.fold_into_fp8_errors, so that tritonmods20.fold_device_helpers has named the
kernels' device helpers).

fp8folds19 folds an FP8 buffer or cast that is passed only into a kernel launch of its function.
An on-device collective written in Triton does more FP8 work around its kernel: it quantizes with
a torch helper (`to_mx(x, elem_dtype=torch.float8_e4m3fn)`), keeps the FP8 in a symmetric-memory
buffer (`symm_mem.empty(..., dtype=torch.float8_e4m3fn)`) and dequantizes before it returns, in a
method that launches the kernel through a function of the same file:

    class OnDeviceAllToAll(torch.autograd.Function):
        def forward(ctx, x, ...):
            scales, data = to_mx(x, elem_dtype=torch.float8_e4m3fn)      # NPU913
            ...
            out = _all_to_all(data, ...)          # -> _all_to_all_kernel[grid](...)
            return to_dtype(out, ...)

    @triton.jit
    def _all_to_all_kernel(...):
        sync_threads()                            # tl.inline_asm_elementwise("bar.sync 0;")

When the launched kernel holds inline assembly (`inline_asm_elementwise`/`asm`) itself or calls a
`@triton.jit` function that does (of its own file, or imported from a run module, a few calls
deep), no Triton-Ascend runs it: the function cannot run on an NPU host as written, whatever its
FP8 does, and the porter replaces it with the kernel (for example with a bf16
`all_to_all_single`). The FP8 places of such functions fold into the file's open NPU910 error
(the unguarded Triton import that asks for the module to be ported), whose message names them
(`ASM_KERNELS`).

Exact: each place must lie in a function (the innermost) that launches such a kernel of the file
(`kernel[grid](...)`) itself or through a call by name of a top-level function of the file that
does. FP8 in a function that launches nothing (a sibling path through NCCL's `all_to_all_single`),
a function launching only kernels without inline assembly (Triton-Ascend may run them, and then the
FP8 runs on the NPU), or a file whose NPU910 is not an open error keeps its NPU913.
"""

from __future__ import annotations

import ast
import dataclasses
import re
from typing import Optional

from . import astcache

# (folding.absorb's name_them: "(with `...` <this>)")
ASM_KERNELS = ("computed only in functions that launch this module's Triton kernels, whose inline assembly "
               "runs under no Triton-Ascend: ported with them")
_FUNCTIONS = (ast.FunctionDef, ast.AsyncFunctionDef)
_TRITON_DECORATORS = frozenset({"jit", "autotune", "heuristics"})
_ASM_CALL = re.compile(r"(^|\.)(inline_asm_elementwise|inline_asm|asm)$")
_MAX_DEPTH = 4
_ALSO_ANYWHERE = re.compile(r" \(also at (?:lines? )?[^()]*\)")


def _open(finding, code: str) -> bool:
    from .folding import ours
    from .moot import is_moot

    return finding.code == code and ours(finding) and finding.severity == "error" and not is_moot(finding)


def _name(node: ast.AST) -> str:
    return astcache.dotted(node, strict=False) or ""


def _jit_functions(tree: ast.Module) -> dict[str, ast.FunctionDef]:
    """The module's top-level `@triton.jit` (`@jit`, `@triton.autotune(...)`) functions by name."""
    out = {}
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and any(
                _name(d.func if isinstance(d, ast.Call) else d).rsplit(".", 1)[-1] in _TRITON_DECORATORS
                for d in node.decorator_list):
            out[node.name] = node
    return out


def _calls(node: ast.AST) -> list[str]:
    return [_name(n.func) for n in ast.walk(node) if isinstance(n, ast.Call)]


class _Asm:
    """Which Triton functions hold inline assembly, here or in the run modules they are imported from."""

    def __init__(self, modules) -> None:
        self.modules = modules
        self.memo: dict = {}

    def imports(self, tree: ast.Module) -> dict[str, tuple[str, str]]:
        return {a.asname or a.name: (n.module, a.name) for n in tree.body if isinstance(n, ast.ImportFrom)
                and n.module and not n.level for a in n.names}

    def holds(self, tree: ast.Module, function: ast.FunctionDef, depth: int = 0) -> bool:
        key = (id(tree), function.name)
        if key in self.memo:
            return self.memo[key]
        self.memo[key] = False  # (a cycle holds none)
        jits, imported = _jit_functions(tree), self.imports(tree)
        found = False
        for called in _calls(function):
            if _ASM_CALL.search(called):
                found = True
            elif depth < _MAX_DEPTH and called in jits and jits[called] is not function:
                found = self.holds(tree, jits[called], depth + 1)
            elif depth < _MAX_DEPTH and called in imported:
                module, name = imported[called]
                index = self.modules.by_name.get(module)
                other = self.modules.tree(index) if index is not None else None
                target = _jit_functions(other).get(name) if other is not None else None
                found = target is not None and self.holds(other, target, depth + 1)
            if found:
                break
        self.memo[key] = found
        return found


def _launches(node: ast.AST, kernels: set[str]) -> set[str]:
    """The kernels of `kernels` launched in `node` (`kernel[grid](...)`)."""
    return {n.func.value.id for n in ast.walk(node) if isinstance(n, ast.Call) and isinstance(n.func, ast.Subscript)
            and isinstance(n.func.value, ast.Name) and n.func.value.id in kernels}


def _asm_launcher(function: ast.AST, tree: ast.Module, asm_kernels: set[str], kernels: set[str]) -> Optional[str]:
    """The asm kernel `function` launches, itself or through a top-level function of the file it
    calls by name, when it launches only such kernels; else None."""
    tops = {n.name: n for n in tree.body if isinstance(n, _FUNCTIONS)}
    launched = set(_launches(function, kernels))
    for called in _calls(function):
        if called in tops and tops[called] is not function and called not in kernels:
            launched |= _launches(tops[called], kernels)
    if launched and launched <= asm_kernels:
        return sorted(launched)[0]
    return None


def fold(results: list, paths: dict) -> list:
    """Module's doc (a new list)."""
    from .folding import Fold, places_of
    from .modpaths import RunModules, RunTexts

    text_of = RunTexts(results, paths)
    modules = None
    out = list(results)
    for i, result in enumerate(results):
        if not result.relpath.endswith(".py") or not any(_open(f, "NPU913") for f in result.findings):
            continue
        targets = [f for f in result.findings if _open(f, "NPU910")]
        data = text_of(i) if targets else None
        if not data or b"float8" not in data or b"jit" not in data:
            continue
        if modules is None:
            modules = RunModules(results, text_of)
        tree = modules.tree(i)
        if tree is None:
            continue
        jits = _jit_functions(tree)
        asm = _Asm(modules)
        kernels = {name for name, node in jits.items() if _launches(tree, {name})}
        asm_kernels = {name for name in kernels if asm.holds(tree, jits[name])}
        if not asm_kernels:
            continue
        functions = [n for n in astcache.walk(tree) if isinstance(n, _FUNCTIONS) and n.name not in jits]
        target = next((f for f in targets if "import" in (f.source or "")), targets[0])
        moves = []
        for finding in result.findings:
            if not _open(finding, "NPU913") or finding is target:
                continue
            moved = []
            for place in places_of(finding):
                holding = [n for n in functions if n.lineno <= place[0] <= (n.end_lineno or n.lineno)]
                if holding and _asm_launcher(min(holding, key=lambda n: (n.end_lineno or n.lineno) - n.lineno),
                                             tree, asm_kernels, kernels):
                    moved.append(place)
            if moved:
                moves.append((finding, moved))
        if not moves:
            continue
        # (another fold may have put text after the target's "(also at ...)": absorb lists its
        # places again at the end, so the earlier list goes)
        tidy = dataclasses.replace(target, message=_ALSO_ANYWHERE.sub("", target.message))
        findings = [tidy if f is target else f for f in result.findings]
        folding = Fold(findings)
        folding.targets.add(id(tidy))
        for finding, moved in moves:
            if folding.movable(finding, tidy):
                folding.move(finding, moved, tidy)
        if folding.moved:
            out[i] = dataclasses.replace(result, findings=sorted(folding.result(name_them=ASM_KERNELS)))
    return out
