"""Tests, benchmarks and tools whose subject is CUDA-only (issue #16, precision wave 21, round-21
audits BH#2, BG#6, BF#12). Porting what is reported there achieves nothing on an NPU host: the test
never runs there, the value never reaches a device, the script is NVIDIA build tooling.

* **A capability's major number compared** (`known_value`, for testscopes' truth of a condition):
  `torch.cuda.get_device_capability()[0] < 9` is true on an NPU host, `>= 9` false: the migration
  rewrites the query to the shim's, which answers (0, 0) there (rules/scopes.toml [npugates]
  `zero_capability_calls`, the same table npugates.py reads for `major, _ = ...`). So an autouse
  module fixture `if torch.cuda.get_device_capability()[0] < 9: pytest.skip(...)` skips every test of
  the module there (reach.py's skipping fixture), and the CUDA graphs it captures never run. A
  platform object's query (`current_platform.get_device_capability()`, None there) is not one: its
  `[0]` raises, which is no skip; a minor number (`[1]`) and a bound of 0 decide nothing.
"""

from __future__ import annotations

import ast

from . import astcache, catalogue

_dotted = astcache.dotted


def _zero_capability_calls() -> frozenset:
    return frozenset(catalogue.read_table("scopes.toml").get("npugates", {}).get("zero_capability_calls", ()))


def _major_of_query(node: ast.AST) -> bool:
    """`torch.cuda.get_device_capability(...)[0]`: the shim's major number, 0 on an NPU host."""
    return (isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Constant)
            and node.slice.value == 0 and not isinstance(node.slice.value, bool)
            and isinstance(node.value, ast.Call)
            and _dotted(node.value.func) in _zero_capability_calls())


def known_value(node: ast.AST):
    """True or False where `node` compares the shim's major capability number (0 on an NPU host)
    with a positive integer literal (`[0] < 9` true, `[0] >= 9` false), else None."""
    if not (isinstance(node, ast.Compare) and len(node.ops) == 1):
        return None
    left, op, right = node.left, node.ops[0], node.comparators[0]
    if _major_of_query(right) and not _major_of_query(left):  # (`9 > cap()[0]`)
        flipped = {ast.Lt: ast.Gt, ast.Gt: ast.Lt, ast.LtE: ast.GtE, ast.GtE: ast.LtE}
        left, right = right, left
        op = flipped.get(type(op), type(op))()
    if not _major_of_query(left):
        return None
    if not (isinstance(right, ast.Constant) and isinstance(right.value, int)
            and not isinstance(right.value, bool) and right.value > 0):
        return None
    if isinstance(op, (ast.Lt, ast.LtE, ast.NotEq)):
        return True
    if isinstance(op, (ast.Gt, ast.GtE, ast.Eq)):
        return False
    return None
