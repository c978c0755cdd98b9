"""Conditional expressions and `:=` in the three-valued reading of a condition on an NPU host (round 29).

testscopes.py evaluates a condition as an NPU host sees it (true, false, unknown; None where a
value is None there). Round-29 audit DA#36 (vLLM's `gpu_sync_debug.py`): a module constant
`_SYNC_CHECK_MODE = envs.VLLM_GPU_SYNC_CHECK if current_platform.is_cuda_alike() else None`,
then `if _SYNC_CHECK_MODE is None: return` and `if (mode := _SYNC_CHECK_MODE) is None: return
fn(...)` in front of the only uses of the CUDA sync-debug API. The test of the conditional
expression is false on an NPU host, so its value is the `else` part there (None), and `(mode :=
X)` is the value of X: reach.py then reads the name as None on an NPU host and the returns as
early exits, as it does for a name bound to `current_platform.get_device_capability()`.

`value(node, value_of, truth_of, unknown)`: `A if C else B` is the value of A where C is true on
an NPU host, of B where it is false, unknown otherwise; `(n := E)` is the value of E. The
evaluators are testscopes' own, handed in (this module does not import testscopes back).
Nothing is decided where the test is unknown: a conditional on a user's setting stays unknown.
"""

from __future__ import annotations

import ast


def value(node: ast.AST, value_of, truth_of, unknown):
    """The value of a conditional expression or an assignment expression on an NPU host."""
    if isinstance(node, ast.NamedExpr):
        return value_of(node.value)
    if isinstance(node, ast.IfExp):
        test = truth_of(node.test)
        if test is True:
            return value_of(node.body)
        if test is False:
            return value_of(node.orelse)
    return unknown
