"""Callees whose every caller lies in backends, schemes or methods an NPU host never selects
(issue #16, round 22: BK#19, BI#16, BJ#15). Whole run, from runplan.whole_run_passes, last.

The run already decides, one construct at a time, code an NPU host never runs that
callgates21.py's reading of a gate does not see:

* dispatch.gates: the factory of a backend registered under a name an NPU host never selects
  (`@register_attention_backend("trtllm_mla")`, the project forcing `attention_backend = "ascend"`
  there), the methods a dict keyed by those names reaches, and the branches of the project's own
  NPU flag (`if not _is_npu:` choosing a CUDA scheme class);
* a module wholeprogram.py found imported only where an NPU host does not go (every finding of
  it carries that reason, then its skipped scope does);
* the CUDA method (`forward_cuda`) of a platform-dispatched op that also has `forward_npu` /
  `forward_oot` / `forward_native` (dispatchops.cuda_dispatch_reason);
* the class argument of an `isinstance` / `issubclass` test, which runs none of the class's code
  (SGLang's speculative worker tests `isinstance(backend, TRTLLMMLAMultiStepDraftBackend)`); at
  least one other reference (a construction or call in such code, in another module) is needed:
  a class only type tests name is built by its users or a registry.

That verdict stops at the construct: a helper of a shared module (`attention/utils.py`'s
`mla_quantize_and_rope_for_fp8`, importing `flashinfer.rope` lazily) whose only callers sit in
those backends kept its error. Here it is carried to the callees: callgates21's walk over every
reference of the run to the module-level function or class holding a report-only finding (a
few steps of callers deep; annotations and `__all__` no references) counts a reference as never
run when callgates21 does, or when it lies in one of the constructs above:

    # layers/utils.py
    def quantize_and_rope(q, k):
        import flashinfer.rope                     # NPU911: a named scope now
        ...

    # layers/trt_backend.py (imported only by a registry factory for "trt")
    class TrtBackend:
        def forward(self, q, k):
            return quantize_and_rope(q, k)

    # layers/registry.py
    @register_attention_backend("trt")
    def create_trt(runner):
        from .trt_backend import TrtBackend
        return TrtBackend(runner)

    # hardware/npu/utils.py
    def set_default_server_args(args):
        args.attention_backend = "ascend"

What stays reported (callgates21's rules): a reference in code an NPU host may run (the one
caller of a default backend, a module-level use, a value handed on, a name in a string, a file
that does not parse), a gate whose value is unknown there, and a public library function whose
only callers are skipped tests. At least one reference lies in another module.

The gates are read with flagcalls19's Run (a function or flag first met past its depth limit,
as a walk several callers deep meets the project's `is_cuda()`, is worked out again when the
shallower read of `self.enable_cg = _is_cuda and env` asks for it).

Info findings are read too (not fixable, not already moot): one about a class every construction
of which lies under a gate false there (`self.enable_cg = _is_cuda and env`, then
`if self.enable_cg: Runner(self)`, BJ#15) is about code that never runs there, not guidance.

The finding becomes info with the reason (flags16.BRANCH, a moot phrase) naming the unit and its
callers, then a named skipped scope (moot.to_scopes).
"""

from __future__ import annotations

import ast
from typing import Optional

from .callgates21 import Gates

# (wholeprogram.py: the reason it gives every finding of a module it finds imported only from code
# an NPU host never runs; a module verdict, not a line's)
_NEVER_IMPORTED = "imported only where an NPU host does not go: "
_FUNCTIONS = (ast.FunctionDef, ast.AsyncFunctionDef)
_TYPE_TEST = "a type test, which builds nothing"


class _Callees(Gates):
    """callgates21's reading of references, with the run's verdicts of this module's docstring."""

    def __init__(self, run, spans: dict, modules: dict) -> None:
        super().__init__(run)
        self.spans, self.modules = spans, modules

    def dead(self, j: int, tree: ast.Module, parents: dict, node: ast.AST) -> Optional[str]:
        why = super().dead(j, tree, parents, node)
        if why is not None:
            return why
        if _type_test(parents, node):
            return _TYPE_TEST
        if j in self.modules:
            return f"in a module {self.modules[j]}"
        line = node.lineno
        span = next((s for s in self.spans.get(j, ()) if s[0] <= line <= s[1]), None)
        if span is not None:
            return f"in {' '.join(span[2].split())[:160]}"
        chain, current = [], parents.get(id(node))
        while current is not None and not isinstance(current, ast.Module):
            if isinstance(current, (*_FUNCTIONS, ast.ClassDef)):
                chain.insert(0, current)
            current = parents.get(id(current))
        if len(chain) >= 2:
            from .dispatchops import cuda_dispatch_reason

            return cuda_dispatch_reason(tree, chain)
        return None


def _type_test(parents: dict, node: ast.AST) -> bool:
    """The class argument of `isinstance(x, C)` / `issubclass(x, (C, D))`: it runs none of C's code."""
    holder = parents.get(id(node))
    if isinstance(holder, ast.Tuple):
        holder = parents.get(id(holder))
        if isinstance(holder, ast.Call) and holder.args[1:2] and not any(
                isinstance(n, ast.Tuple) and node in n.elts for n in holder.args[1:2]):
            return False
    elif isinstance(holder, ast.Call) and holder.args[1:2] != [node]:
        return False
    return (isinstance(holder, ast.Call) and isinstance(holder.func, ast.Name)
            and holder.func.id in ("isinstance", "issubclass") and len(holder.args) == 2)


def _never_imported(results) -> dict[int, str]:
    """{file index: why} of the modules wholeprogram.py found imported only where an NPU host does
    not go (the reason in a finding of the file, or in its skipped scope)."""
    out: dict[int, str] = {}
    for i, result in enumerate(results):
        if not result.relpath.endswith(".py"):
            continue
        reasons = [f.message for f in result.findings] + [s[2] for s in result.skipped_scopes]
        for reason in reasons:
            at = reason.find(_NEVER_IMPORTED)
            if at >= 0:
                shown = " ".join(reason[at:].split(";")[0].split()).removesuffix(")")
                out[i] = shown if len(shown) <= 300 else shown[:297] + "..."
                break
    return out


def review(results: list, paths: dict) -> list:
    """The results, with the report-only findings of this module's docstring lowered to named
    scopes."""
    from .flags16 import BRANCH
    from .importgates import is_test
    from .modpaths import RunTexts
    from .moot import is_moot, to_scopes

    def open_finding(f) -> bool:
        return not f.fixable and f.cell is None and not is_moot(f)

    candidates = [i for i, r in enumerate(results)
                  if r.relpath.endswith(".py") and any(open_finding(f) for f in r.findings)]
    if not candidates:
        return results
    text_of = RunTexts(results, paths)
    python = [i for i, r in enumerate(results) if r.relpath.endswith(".py")]
    from .dispatch import gates as dispatch_gates

    spans = dispatch_gates(results, python, text_of)
    modules = _never_imported(results)

    def reason(callees, i: int, unit) -> Optional[str]:
        found = callees.sites(i, unit)
        # (a type test builds nothing, and proves nothing either: a unit only type tests name is
        # built elsewhere, by a user or a registry, round-22 lightning's `DataParallelStrategy`)
        if not found or not any(j != i and _TYPE_TEST not in s for j, s in found):
            return None
        # (the library's callers first, type tests last)
        found = sorted(found, key=lambda item: (_TYPE_TEST in item[1], is_test(item[1].split(":", 1)[0])))
        shown = "; ".join(s for _j, s in found[:2]) + (f"; and {len(found) - 2} more" if len(found) > 2 else "")
        return f"{BRANCH}: `{unit.name}` is reached only from code an NPU host never runs or selects: {shown}"

    def start():
        from .flagcalls19 import Run

        run = Run(results, text_of)
        return run, _Callees(run, spans, modules)

    from .callgates21 import lower_units

    out = lower_units(results, text_of, candidates, open_finding, start, reason)
    changed_files = [i for i in range(len(out)) if out[i] is not results[i]]
    if not changed_files:
        return out
    scoped = to_scopes([out[i] for i in changed_files])
    for i, result in zip(changed_files, scoped):
        out[i] = result
    return out


# (public for customops26.py: the same verdicts, read for a function registered as a torch op)
Callees = _Callees
never_imported = _never_imported
# (public for testcallers27.py: a type test builds nothing, so it keeps no class reached)
type_test = _type_test
TYPE_TEST = _TYPE_TEST
