"""CUDA checks whose early exit guards CUDA runtime calls: kept meaning CUDA, not widened.

Issue 16 section 1 (invariant 4): a gate whose guarded code is CUDA-only is reported and left as
written; widened to the accelerator it would open a path that fails on an NPU host. Round 27's
audit BW#15 found the tool opening such a path itself:

    if self._is_pinned or not torch.cuda.is_available():
        return
    cudart = torch.cuda.cudart()
    cudart.cudaHostRegister(ptr, size, 0)

was rewritten to `npu_compat.is_available()`, true on an NPU host, so the migrated code went on
to `torch.cuda.cudart()`, which raises there, where the original returned. The early-exit form
itself was already a gate (platform.py `_gate`: a test that holds off CUDA and whose body
returns, raises, continues or breaks guards the statements after it in the same block); what it
missed was the guarded code: CUDA-only code meant CUDA-only packages, Triton kernels, toolchain
facts and private `torch.cuda._*` APIs, not the public `torch.cuda` names that fail on every
host without CUDA. This module supplies them:

- `fails_off_cuda(node)`: `torch.cuda.<name>` (or a deeper attribute of it) whose name is in
  rules/cuda_api.toml `[fails_off_cuda]` (`cudart`, `comm`, `nccl`, `jiterator`, `memory_usage`):
  called by platform.py's `_cuda_only_code` for every gate form (`if torch.cuda.is_available():
  torch.cuda.cudart()...` as well as the early exit), so the check is reported (NPU110) and kept.
  The nearest true case stays rewritten: an early return followed by ordinary device code
  (`if not torch.cuda.is_available(): return t` then `t.to("cuda")`) still widens.
- `exit_spans(tree, line, column)`: the statements after an `if` whose test holds wherever the
  check at (line, column) does not (`not check`, `a or not check`) and whose body exits; called
  by redundant.py's `_guarded_spans`, so a finding on the code after the kept early exit (the
  `torch.cuda.cudart` NPU202) folds into the check's finding, as one inside an `if check:` body
  does.
- `flag_spans(tree, spans)`: the bodies of `if self.<flag>:` (no `else`) anywhere in the file
  where every assignment of a true value to `self.<flag>` lies in those guarded spans and every
  other assignment is `False`/`None` (`self._is_pinned = True` only after `cudaHostRegister`
  succeeded): such a body runs only after the guarded code ran, so a `cleanup` that unregisters
  only when pinned folds into the kept check too. A flag also set true elsewhere (unguarded), or
  set from a value: the body keeps its findings.
"""

from __future__ import annotations

import ast
import functools
from typing import Optional

from . import catalogue

_EXITS = (ast.Return, ast.Raise, ast.Continue, ast.Break)


@functools.lru_cache(maxsize=None)
def _names() -> frozenset:
    return frozenset(catalogue.cuda_api().get("fails_off_cuda", {}).get("names", ()))


def fails_off_cuda(node: ast.Attribute) -> Optional[str]:
    """What `node` calls that fails on a host without CUDA (`torch.cuda.cudart`), or None."""
    if node.attr not in _names():
        return None
    value = node.value
    if isinstance(value, ast.Attribute) and value.attr == "cuda" and isinstance(value.value, ast.Name) \
            and value.value.id == "torch":
        return f"uses `torch.cuda.{node.attr}`, which fails on a host without CUDA"
    return None


def _within(node: ast.AST, line: int, column: int) -> bool:
    start = (node.lineno, node.col_offset + 1)
    end = (node.end_lineno or node.lineno, (node.end_col_offset or 0) + 1)
    return start <= (line, column) < end


def _holds_without(test: ast.AST, line: int, column: int) -> bool:
    """Whether `test` is true wherever the check at (line, column) is false: `not check`,
    `check != "cuda"`-style negations, or an `or` with such an operand."""
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        inner = test.operand
        return isinstance(inner, (ast.Call, ast.Attribute, ast.Name)) and _within(inner, line, column)
    if isinstance(test, ast.Compare) and len(test.ops) == 1 and _within(test, line, column):
        return isinstance(test.ops[0], (ast.NotEq, ast.IsNot, ast.NotIn))
    if isinstance(test, ast.BoolOp) and isinstance(test.op, ast.Or):
        return any(_holds_without(value, line, column) for value in test.values)
    return False


def exit_spans(tree: ast.Module, line: int, column: int) -> list[tuple[int, int]]:
    """Line spans of the statements after an early exit that the CUDA check at (line, column)
    guards (module doc)."""
    spans = []
    stack: list = [tree]
    while stack:
        current = stack.pop()
        for field in ("body", "orelse", "finalbody", "handlers", "cases"):
            block = getattr(current, field, None)
            if not isinstance(block, list):
                continue
            stack.extend(child for child in block if isinstance(child, (ast.stmt, ast.excepthandler,
                                                                         ast.match_case)))
            for index, inner in enumerate(block[:-1]):
                if (isinstance(inner, ast.If) and not inner.orelse and inner.body
                        and isinstance(inner.body[-1], _EXITS) and _within(inner.test, line, column)
                        and _holds_without(inner.test, line, column)):
                    after = block[index + 1:]
                    spans.append((after[0].lineno, after[-1].end_lineno or after[-1].lineno))
    return spans


def _flag(test: ast.AST) -> Optional[str]:
    """`flag` of `if self.flag:`."""
    if isinstance(test, ast.Attribute) and isinstance(test.value, ast.Name) and test.value.id == "self":
        return test.attr
    return None


def flag_spans(tree: ast.Module, spans: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """Line spans of `if self.<flag>:` bodies that run only after code in `spans` ran (module doc)."""
    if not spans:
        return []
    within = lambda line: any(a <= line <= b for a, b in spans)  # noqa: E731
    bodies: dict[str, list[tuple[int, int]]] = {}
    truthy: dict[str, list[int]] = {}
    unknown: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and not node.orelse and (flag := _flag(node.test)) is not None:
            bodies.setdefault(flag, []).append((node.body[0].lineno, node.body[-1].end_lineno or node.body[-1].lineno))
        elif isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for target in targets:
                flag = _flag(target)
                if flag is None:
                    continue
                value = node.value
                if isinstance(node, ast.AugAssign) or not isinstance(value, ast.Constant):
                    unknown.add(flag)
                elif value.value:
                    truthy.setdefault(flag, []).append(node.lineno)
    out = []
    for flag, blocks in bodies.items():
        lines = truthy.get(flag)
        if lines and flag not in unknown and all(within(line) for line in lines):
            out.extend(block for block in blocks if not within(block[0]))
    return out
