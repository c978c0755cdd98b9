"""What every rule family is: a class with a user-facing docstring, its codes, its examples, and
hooks the dispatcher calls during the one traversal of a file.

A family reads top to bottom as its own documentation:

    class Distributed(Family):
        \"\"\"(for users) What the family rewrites, what it reports, and why.\"\"\"

        CODES = ("NPU301", "NPU302", "NPU303", "NPU304")
        EXAMPLES = (
            Example('dist.init_process_group("nccl")\\n', 'dist.init_process_group(npu_compat.dist_backend())\\n', ...),
            Example('print("nccl")\\n'),  # left alone: no finding of the family's codes
        )

        def leave_Comparison(self, original, updated): ...

Hooks (all optional; the dispatcher finds them by name once per class):
- `visit_<Node>(node)`: observe a node on the way down. Returning False stops the traversal below
  it (the node is still left); the first family to return False wins, later ones are not asked.
- `leave_<Node>(original, updated)`: return None when the node is not the family's business (the
  next family is asked), else the node to put in the tree: the replacement, or `updated` itself
  when the family handled the node without rewriting it (reported it, or its rule is disabled or
  suppressed: no other family may then act on it). Decide on `original`, build from `updated`.
- `reference(original, updated, qualname)`: a Name or Attribute chain that resolves, through the
  file's imports, to `qualname` (`torch.cuda.synchronize`): same return convention as `leave_`.
- `finish()`: at the end of the module, after the traversal.
Families never import each other: what they share (import resolution, "is this provably a
device", string roles, findings and claims) is the `Context` in `context.py`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional


@dataclass(frozen=True)
class Example:
    """A snippet of a user's file and what npu-migrate makes of it.

    `before`: the whole file (an `import torch` line included where the snippet needs it).
    `after`: the whole migrated file, shim import included; None when the file must come back
    byte-identical. `codes`: the findings the snippet must produce, in line order (rewrites and
    reports alike); empty means none of the family's codes may be reported. `note`: what the
    example shows, in one line (the docs' heading for it).
    Each example is a test (tests/test_family_examples.py) and a block of the rules reference.
    """

    before: str
    after: Optional[str] = None
    codes: tuple[str, ...] = ()
    note: str = ""

    @property
    def rewrites(self) -> bool:
        return self.after is not None


class Family:
    """Base of the rule families (see the module docstring for the hooks)."""

    NAME: str = ""  # short name, as in the docs: "distributed"
    TITLE: str = ""  # one line: "Distributed backends (NCCL -> HCCL)"
    CODES: tuple[str, ...] = ()
    EXAMPLES: tuple[Example, ...] = ()

    def __init__(self, ctx) -> None:
        self.ctx = ctx  # the file's Context: shared resolution, findings, the shim's name
