"""The gates in front of a reference within its function: the walk optinprops28.py, optconfig29.py
and optchoice29.py each wrote for themselves (issue #16, policy P1; round 30, h144), one public
helper now (optchoice29 uses it with `if_exp`).

    def build(self):
        if not (cfg.use_x and self.ok):        # an early exit before the reference:
            return None                        #   `taken(test)` answers for it
        if cfg.mode == "fast":                 # an enclosing `if`: `off(test)` answers for it
            mgr = Manager() if flag else None  # `a if test else b` (with if_exp): `off(test)` too

`gate_of(node, parents, off, taken, if_exp=False)` climbs from `node` to its function: each `if`
holding the climb in its body (not its `else:`) is asked `off(test)`, and with `if_exp` each
conditional expression holding it in its true branch; at the function, each statement of its body
before the one holding `node` that is an early exit (an `if` with no `else:` whose body ends in a
`return` or `raise`) is asked `taken(test)`. The first answer that is not None is returned; the
climb stops at the function (its callers are the walk's business: callgates21.py) or the module.
The readers decide what a test means (a property false by default, a config field at its
default, an opt-in field): this module only finds the tests.
"""

from __future__ import annotations

import ast
from typing import Callable, Optional

_DEFS = (ast.FunctionDef, ast.AsyncFunctionDef)


def early_exit(stmt: ast.AST) -> bool:
    """`if <test>: ...; return/raise` with no `else:` (what follows runs only when test is false)."""
    return isinstance(stmt, ast.If) and not stmt.orelse and bool(stmt.body) \
        and isinstance(stmt.body[-1], (ast.Return, ast.Raise))


def gate_of(node: ast.AST, parents: dict, off: Callable[[ast.AST], Optional[str]],
            taken: Callable[[ast.AST], Optional[str]], if_exp: bool = False) -> Optional[str]:
    """The first answer of `off` (an enclosing `if`'s test, a conditional expression's with
    `if_exp`) or `taken` (an earlier early exit's test of the function) for `node`; None."""
    child, current = node, parents.get(id(node))
    while current is not None and not isinstance(current, ast.Module):
        if isinstance(current, ast.If) and any(child is stmt for stmt in current.body):
            said = off(current.test)
            if said is not None:
                return said
        if if_exp and isinstance(current, ast.IfExp) and child is current.body:
            said = off(current.test)
            if said is not None:
                return said
        if isinstance(current, _DEFS):
            for stmt in current.body:
                if stmt is child:
                    break
                if early_exit(stmt):
                    said = taken(stmt.test)
                    if said is not None:
                        return said
            return None
        child, current = current, parents.get(id(current))
    return None
