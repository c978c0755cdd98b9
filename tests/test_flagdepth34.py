"""flagcalls19's Run: a value the walk left unknown because it met the depth limit is no fact
about the function or flag, and a later, shallower question works it out (issue #16: callees22
worked around the memo only for itself; every user of the Run now gets the known value)."""

from __future__ import annotations

import ast
from types import SimpleNamespace

from npu_migrate.flagcalls19 import Run
from npu_migrate.flagtruth import UNKNOWN

# f1 -> f2 -> f3 -> f4 -> f5, which returns False (each call takes two steps of the walk's depth:
# the call, then its body; the limit is 6)
CHAIN = "\n\n".join([f"def f{k}():\n    return f{k + 1}()" for k in range(1, 5)]
                    + ["def f5():\n    return False", "FLAG = f4()"]) + "\n"


def _run(text: str):
    results = [SimpleNamespace(relpath="pkg/chain.py")]
    data = text.encode()
    run = Run(results, lambda i: data)
    defs = {n.name: n for n in run.tree(0).body if isinstance(n, ast.FunctionDef)}
    flag = next(n for n in run.tree(0).body if isinstance(n, ast.Assign))
    return run, defs, flag


def test_a_function_first_met_past_the_depth_limit_is_worked_out_when_asked_shallower():
    run, defs, _flag = _run(CHAIN)
    # from f1 the walk is cut before it reaches f9: unknown there
    assert run.call(0, defs["f1"], 0) is UNKNOWN
    assert (0, "f4") in run.cut_at  # f4 was first met at the limit and left unknown
    # asked directly, f4 and the f3 that calls it are known
    assert run.call(0, defs["f4"], 0) is False
    assert run.call(0, defs["f3"], 0) is False
    assert run.call(0, defs["f1"], 0) is UNKNOWN  # (from f1, f5's body is still out of reach)


def test_a_flag_first_met_past_the_depth_limit_is_worked_out_when_asked_shallower():
    run, defs, flag = _run(CHAIN)
    assert run.flag(0, flag, 3) is UNKNOWN  # asked deep: cut on the way to f5
    assert run.flag(0, flag, 0) is False    # asked from the top: f4 -> f5 is within reach


def test_a_value_unknown_for_its_own_reasons_stays_unknown_and_memoized():
    text = CHAIN.replace("    return False", "    import os\n    return os.environ.get('X') == '1'")
    run, defs, _flag = _run(text)
    assert run.call(0, defs["f5"], 0) is UNKNOWN
    assert (0, "f5") in run.calls and (0, "f5") not in run.cut_at  # no depth cut: a fact
    assert run.call(0, defs["f3"], 0) is UNKNOWN and (0, "f3") not in run.cut_at
