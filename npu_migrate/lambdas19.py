"""An immediately called lambda read as its body (issue #16, round 19, audit BB#4).

A pytest skip condition written as a lambda applied at once to a platform query,
`@pytest.mark.skipif((lambda x: x is None or not ops.cutlass_group_gemm_supported(x.to_int()))(
current_platform.get_device_capability()), reason=...)`, was unknown to testscopes' truth (a call
of a lambda), so the test's CUDA-only body (a `torch.cuda.CUDAGraph()` capture) stayed reported.
The platform's capability is None on an NPU host (rules/scopes.toml [reach] none_calls), so `x is
None` is true there and the test is skipped.

`bind(call)`: the lambda's body with each parameter replaced by the call's argument (a copy), for
testscopes._value to evaluate; None when the call is not that simple shape (keywords, `*args`,
defaults, a count mismatch, a nested lambda that could shadow a name). The argument is evaluated
once per use in the body: the platform queries it is written over have no side effects that a
truth value depends on. Nothing that is unknown becomes known here: the body is read with the
same rules, so `(lambda x: x is not None and f(x))(capability())` stays false or unknown as its
parts are.
"""

from __future__ import annotations

import ast
import copy

from .capgates import Substitute  # (names replaced by expressions: the same transformer)


def bind(call: ast.Call) -> ast.AST | None:
    """The body of `(lambda a, b: body)(x, y)` with a, b replaced by x, y; None otherwise."""
    function = call.func
    if not isinstance(function, ast.Lambda) or call.keywords:
        return None
    args = function.args
    if args.vararg or args.kwarg or args.kwonlyargs or args.posonlyargs or args.defaults \
            or len(args.args) != len(call.args) or any(isinstance(a, ast.Starred) for a in call.args):
        return None
    if any(isinstance(n, (ast.Lambda, ast.NamedExpr)) for n in ast.walk(function.body)):
        return None
    values = {a.arg: v for a, v in zip(args.args, call.args)}
    return Substitute(values).visit(copy.deepcopy(function.body))
