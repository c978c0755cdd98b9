"""NCCL tuning variables set only when an NCCL communicator is chosen by name (issue #16, round 21:
BG#10).

`if is_data_parallel and is_mega_moe and is_nccl_based_communicator: os.environ["NCCL_MAX_CTAS"] =
"8"`, where `is_nccl_based_communicator = config.communicator in ("torch_nccl", "pynccl")`: the
variable tunes the NCCL library, and the code sets it only when the project's own option names an
NCCL communicator. On an NPU host the communicator is HCCL's (the project's NPU branch or plugin
picks another name), so the branch does not run there, and were it run the variable would still
be inert: HCCL never reads it. An NPU602 finding (information) is lowered with NCCL_BRANCH, a
moot.NO_WORK phrase (a named scope "no port work on an NPU host"), when:

* the variable has no HCCL counterpart (rules/env.toml `[hccl_counterpart]`: those are settings
  to carry over by hand, and stay reported);
* the finding lies in the body (not the `else:`) of an `if` whose test, or one operand of its
  top-level `and`, is a comparison `x in ("torch_nccl", "pynccl")` / `x == "pynccl"` (a local
  name bound once in the function to such a comparison counts as that comparison) whose strings
  all name NCCL and none is the plain backend "nccl", which the migration rewrites to accept the
  NPU's backend too (NPU302), so such a branch may run on an NPU host and keeps its finding;
* no finding the migration rewrote lies in that test.

Per file, after ncclonly.py (run.migrate_file); a byte pre-test before the parse.
"""

from __future__ import annotations

import ast
import dataclasses
import re
from typing import Optional

from . import astcache
from .findings import Finding

NCCL_BRANCH = "an NCCL tuning variable set only when an NCCL communicator is chosen by name"

_FUNCTIONS = (ast.FunctionDef, ast.AsyncFunctionDef)


def _nccl_choice(test: ast.AST) -> bool:
    """`x in ("torch_nccl", "pynccl")` or `x == "pynccl"`: every string names NCCL, none is "nccl"."""
    if not (isinstance(test, ast.Compare) and len(test.ops) == 1
            and isinstance(test.ops[0], (ast.In, ast.Eq))):
        return False
    right = test.comparators[0]
    values = right.elts if isinstance(right, (ast.Tuple, ast.List, ast.Set)) else [right]
    strings = [v.value for v in values if isinstance(v, ast.Constant) and isinstance(v.value, str)]
    return (bool(strings) and len(strings) == len(values)
            and all("nccl" in s.lower() and s.lower() != "nccl" and "hccl" not in s.lower() for s in strings))


def _bound_choices(function: Optional[ast.AST]) -> set[str]:
    """The local names bound once in the function, to such a comparison."""
    if function is None:
        return set()
    bound: dict[str, list] = {}
    for node in ast.walk(function):
        if isinstance(node, ast.Assign):
            for target in node.targets:
                if isinstance(target, ast.Name):
                    bound.setdefault(target.id, []).append(node.value)
        elif isinstance(node, (ast.AugAssign, ast.AnnAssign)) and isinstance(node.target, ast.Name):
            bound.setdefault(node.target.id, []).append(node.value)
    return {name for name, values in bound.items() if len(values) == 1 and _nccl_choice(values[0])}


def _chooses_nccl(test: ast.AST, names: set[str]) -> bool:
    operands = test.values if isinstance(test, ast.BoolOp) and isinstance(test.op, ast.And) else [test]
    return any(_nccl_choice(o) or (isinstance(o, ast.Name) and o.id in names) for o in operands)


def review(findings: list[Finding], text: str) -> list[Finding]:
    """NPU602 findings on NCCL variables without an HCCL counterpart, inside a branch taken only when
    an NCCL communicator is chosen by name, lowered with NCCL_BRANCH (module doc)."""
    from .labels9 import counterparts

    hits = [f for f in findings if f.code == "NPU602" and not f.fixable and f.cell is None
            and f.severity == "info" and NCCL_BRANCH not in f.message
            and "has no one-to-one HCCL counterpart" in f.message]
    if not hits or "nccl" not in text.replace("NCCL_", ""):
        return findings
    tree = astcache.parse(text.encode("utf-8", "surrogatepass"))
    if tree is None:
        return findings
    parents = astcache.parents(tree)
    rewritten = {f.line for f in findings if f.fixable}
    branches = []  # (first line, last line of the body)
    for node in astcache.walk(tree):
        if not (isinstance(node, ast.If) and node.body):
            continue
        function = parents.get(id(node))
        while function is not None and not isinstance(function, _FUNCTIONS):
            function = parents.get(id(function))
        if not _chooses_nccl(node.test, _bound_choices(function)):
            continue
        if any(node.test.lineno <= line <= (node.test.end_lineno or node.test.lineno) for line in rewritten):
            continue
        branches.append((node.body[0].lineno, node.body[-1].end_lineno or node.body[-1].lineno))
    if not branches:
        return findings
    table = counterparts()
    out = []
    for finding in findings:
        match = re.search(r"`((?:TORCH_)?NCCL_[A-Z0-9_]+)`", finding.message)
        name = match.group(1) if match else finding.source.strip("\"'rbuf")
        if (any(finding is h for h in hits) and name not in table
                and any(start <= finding.line <= end for start, end in branches)):
            finding = dataclasses.replace(finding, message=f"{finding.message} ({NCCL_BRANCH}: `{name}`; "
                                          "HCCL never reads it and an NPU host chooses HCCL's: nothing to port)")
        out.append(finding)
    return out
