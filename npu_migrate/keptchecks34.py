"""Tensor device checks the run keeps meaning CUDA, read as False by the caller walk (issue #16,
round 33: HC#12, HA#37; helper h185). For callgates21.Gates.truth, and so every pass that walks a
unit's references with it (kernelgates26, callees22, ...).

    # layers/mtp.py                                  # ops/norm.py
    if embeds.is_cuda and embeds.shape == h.shape:    @triton.jit
        out = norm_concat(embeds, h)                  def _norm_concat(...): ...   # NPU910
    else:                                             def norm_concat(e, h):
        out = torch.cat([embeds, h], dim=-1)              _norm_concat[grid](...)

    # layers/moe.py
    if not logits.is_cuda:
        return self._native(logits)
    return fused_routing(logits, self.top_k)          # the only launch of another kernel

The engine keeps such a check meaning CUDA, since widened it would send NPU tensors into the
kernel (crossgates22.py; NPU110 "Device check guards CUDA-only code; left unchanged"). On an NPU
host the migrated check is then False for every tensor (none is a CUDA tensor there), so the
kernel's launch behind it never runs. callgates21 read `x.is_cuda` as unknown (the engine widens
most of them to `npu_compat.on_accelerator(x)`, true there). Here `name.is_cuda` (a local or
parameter, the attribute read, not called) is False where the run's NPU110 of that file sits on
that line with that source: the check stays as written in the migrated copy. A check the engine
widened (NPU106, no NPU110 there), `self.x.is_cuda`, `x.is_cuda()`, `x.device.type == "cuda"`:
unknown, as before. The NPU110 itself keeps its own verdict (keptgates.py). One scan of a file's
findings, memoized on the run.
"""

from __future__ import annotations

import ast

_ATTR = "is_cuda"
_CODE = "NPU110"


def _kept(run, j: int) -> frozenset:
    """{(line, source)} of the NPU110 findings of module j (the kept `x.is_cuda` reads), once per module."""
    memo = getattr(run, "kept_checks34", None)
    if memo is None:
        memo = {}
        setattr(run, "kept_checks34", memo)
    if j not in memo:
        findings = run.results[j].findings if 0 <= j < len(run.results) else ()
        memo[j] = frozenset((f.line, " ".join(f.source.split())) for f in findings
                            if f.code == _CODE and not f.fixable and f.cell is None and _ATTR in f.source)
        memo[j] |= _scoped(run, j)
    return memo[j]


def _scoped(run, j: int) -> frozenset:
    """{(line, None)} of the NPU110 places moot.to_scopes already made named scopes ("runs as
    written on an NPU host (NPU110)": the check kept, its fallback run there; IB#21), so the passes
    after it (testcallers27's walk) read the same kept check; a line the engine also widens an
    `is_cuda` on (a fixable NPU106 there) is left out: which of its reads was kept is not known."""
    if not 0 <= j < len(run.results):
        return frozenset()
    result = run.results[j]
    widened = {f.line for f in result.findings if f.code == "NPU106" and f.fixable}
    lines = set()
    for scope in getattr(result, "skipped_scopes", ()) or ():
        if len(scope) >= 3 and isinstance(scope[2], str) and f"({_CODE}):" in scope[2]:
            lines.update({scope[0], scope[1]})
    return frozenset((line, None) for line in lines - widened)


def _is_kept(kept: frozenset, line: int, key: str) -> bool:
    return (line, key) in kept or (line, None) in kept


def kept_values(run, j: int, exprs) -> dict:
    """{"x.is_cuda": note} for each `x.is_cuda` of the expressions that module j's NPU110 keeps
    meaning CUDA at its line: False on an NPU host."""
    out: dict = {}
    for expr in exprs:
        for node in ast.walk(expr):
            if not (isinstance(node, ast.Attribute) and node.attr == _ATTR and isinstance(node.value, ast.Name)
                    and isinstance(node.ctx, ast.Load)):
                continue
            key = f"{node.value.id}.{_ATTR}"
            kept = _kept(run, j)
            if key in out or not kept:
                continue
            if _is_kept(kept, node.lineno, key):
                out[key] = (f"`{key}` is kept meaning CUDA at line {node.lineno} (NPU110): "
                            "False for every tensor of an NPU host")
    return out


def decides(run, j: int, test: ast.AST) -> bool:
    """The test is False on an NPU host whatever its other parts: a kept `x.is_cuda` of module j, or
    an `and` one of whose operands is (HC#12: `embeds.is_cuda and embeds.stride(-1) == 1 and ...`,
    whose method calls on a parameter callgates21 otherwise reads as a caller's choice)."""
    parts = test.values if isinstance(test, ast.BoolOp) and isinstance(test.op, ast.And) else [test]
    return any(isinstance(p, ast.Attribute) and p.attr == _ATTR and isinstance(p.value, ast.Name)
               and _is_kept(_kept(run, j), p.lineno, f"{p.value.id}.{_ATTR}") for p in parts)
