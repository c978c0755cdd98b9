"""Sites of a module that no NPU host runs, for platforms20.py's walk (issue #16, round-28 audit
CC#21; vLLM's `flex_attention.py`).

platforms20.py finds a module reached only through a CUDA/ROCm/XPU platform class when every
library site that imports it or names it (a string path, an enum registry's member) lies in that
class's code or in a module already found so. vLLM's FlexAttention backend module was kept: its
`torch.compile(create_block_mask, mode="reduce-overhead")` at import time stayed a warning though
only three kinds of site name it, none of which loads it on an NPU host:

    # vllm/platforms/cuda.py (the CUDA platform class: dead there already)
    backends.append(AttentionBackendEnum.FLEX_ATTENTION)

    # vllm/v1/spec_decode/llm_base_proposer.py
    if current_platform.is_rocm():
        ...
        from vllm.v1.attention.backends.flex_attention import FlexAttentionMetadata   # a site

    # vllm/model_executor/models/config.py
    elif attn_config.backend == AttentionBackendEnum.FLEX_ATTENTION:      # the member compared
        ...

What this module adds to the walk (platforms20 asks it for a site the platform code does not
hold; neither makes a module dead alone: at least one site must still lie in the platform code):

* `UntakenSites.at(j, line)`: the site lies in a block an NPU host never runs by the file's own
  test (testscopes.untaken_branches: `if current_platform.is_rocm():`, `if _is_hip:`, the `else`
  of a test true there, an early return): why, or None.
* `compared_only(tree, line, enum, member)`: every reference `Enum.MEMBER` on that line is a
  comparand of `==`, `!=`, `is`, `is not`, `in` or `not in` (a test of which backend the user or
  the platform chose): it loads nothing. A member assigned, returned, appended, passed or iterated
  is a selection and keeps the module reached.

Kept (the nearest true cases): a site under a test the tool cannot decide, or true on an NPU host
(`if current_platform.is_cuda_alike() or current_platform.is_npu():`); a member handed to a call
(`get_class(AttentionBackendEnum.FLEX_ATTENTION)`), listed or returned outside the platform class.
"""

from __future__ import annotations

import ast
from typing import Optional

_COMPARE_OPS = (ast.Eq, ast.NotEq, ast.Is, ast.IsNot, ast.In, ast.NotIn)


class UntakenSites:
    """The blocks of each file an NPU host never runs, read once per file."""

    def __init__(self, results, text_of) -> None:
        self.results, self.text_of = results, text_of
        self._spans: dict[int, list] = {}

    def at(self, j: int, line: int) -> Optional[str]:
        """Why the file's line lies in a block an NPU host never runs, or None."""
        spans = self._spans.get(j)
        if spans is None:
            from .testscopes import untaken_branches

            data = self.text_of(j) or b""
            text = data.decode("utf-8", "replace")
            try:
                spans = untaken_branches(text, self.results[j].relpath, interest=None) if data else []
            except (RecursionError, SyntaxError, ValueError):
                spans = []
            self._spans[j] = spans
        for first, last, condition, _type_checking in spans:
            if first <= line <= last:
                return f"in a branch an NPU host does not take: `{' '.join(condition.split())[:120]}`"
        return None


def compared_only(tree: Optional[ast.Module], line: int, enum: str, member: str) -> bool:
    """Every `<enum or an alias>.<member>` on `line` of `tree` is a comparand of a comparison (at
    least one): the member is tested, not selected."""
    if tree is None:
        return False
    from . import astcache

    parents = astcache.parents(tree)
    seen = False
    for node in astcache.nodes(tree, ast.Attribute):
        if node.lineno != line or node.attr != member:
            continue
        if not isinstance(node.value, (ast.Name, ast.Attribute)):
            continue
        head = astcache.dotted(node.value) or ""
        if head.rpartition(".")[2] != enum and not head.endswith(enum):
            continue
        parent = parents.get(id(node))
        if not (isinstance(parent, ast.Compare) and all(isinstance(op, _COMPARE_OPS) for op in parent.ops)):
            return False
        seen = True
    return seen
