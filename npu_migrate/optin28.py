"""Code reached only when a config option read with a False default turns it on (issue #16, policy
P1, round-28 audit CA#40 and CC#29). Per file, after probegates27.py (run.py).

A recipe class reads an opt-in setting of its config once, with a False default, into an attribute,
and tests that attribute in front of the code it enables:

    self.profiler_profile_memory = profiler_cfg.get("profile_memory", False)     # line 394
    ...
    if (self._is_rank_zero and self.profiler_profile_memory
            and self._device.type == "cuda"):                                    # the NPU110
        torch.cuda.memory._record_memory_history()
    ...
    if self._is_rank_zero and self.profiler_profile_memory and idx == stop:
        torch.cuda.memory._record_memory_history(enabled=None)                   # the NPU202

Both blocks run only when the user sets `profile_memory` in the config: an explicit choice. Under
policy P1 each place is info, never an error and never dropped, naming the option and the line
that reads it: "reached on an NPU host only when the config option `profile_memory` is turned on".

The decision, per place of a report-only error or warning (findings.lower_pieces): an enclosing
`if` of its method (its body, or an operand of its `and` test after the attribute's operand) whose
test is `self.X` or an `and` with `self.X` as an operand, where every binding of `X` in the file is
`self.X = <cfg>.get("<key>", False)` (at least one) or `self.X = False`/`None` in that class, and
nothing else in the file stores an attribute of that name. Kept (the nearest true cases): the same
`if` without the attribute's operand, a default that is not False (`.get("key", True)`), an
attribute also bound to another value or stored from outside the class, an `or` test, the `else:`
branch, and an operand before the attribute's in the `and` (evaluated whatever the option).
"""

from __future__ import annotations

import ast
from dataclasses import replace
from typing import Optional

from . import astcache
from .findings import Finding, merge_per_file, split_merged

CHOSEN = ("reached on an NPU host only when the config option `{key}` is turned on: `self.{attr}` is "
          "bound only to `{read}` (line {line}), False by default; an opt-in, to port if it is used there")
_FUNCTIONS = (ast.FunctionDef, ast.AsyncFunctionDef)


def _open(finding: Finding) -> bool:
    return not finding.fixable and finding.cell is None and finding.severity != "info"


def review(findings: list[Finding], text: str) -> list[Finding]:
    """The places of the module doc's shape lowered to info naming the option."""
    if ".get(" not in text or "self." not in text or not any(_open(f) for f in findings):
        return findings
    tree = astcache.parse(text.encode("utf-8", "surrogatepass"))
    if tree is None:
        return findings
    try:
        module = _Module(tree)
        if not module.options:
            return findings
        out: list[Finding] = []
        changed = False
        for finding in findings:
            lowered = _lower(finding, module.reason_at) if _open(finding) else None
            if lowered is None:
                out.append(finding)
            else:
                out.extend(lowered)
                changed = True
        return sorted(out) if changed else findings
    except RecursionError:
        return findings


def _lower(finding: Finding, reason_at) -> Optional[list[Finding]]:
    """The places of the finding with a reason as one info finding naming each reason once (the
    finding stays one finding, as it was reported); the other places stay merged at their
    severity. None when no place has a reason."""
    pieces = split_merged(finding)
    reasons = {p.line: reason_at(p.line) for p in pieces}
    lowered = [p for p in pieces if reasons[p.line] is not None]
    if not lowered:
        return None
    kept = [p for p in pieces if reasons[p.line] is None]
    if not kept:  # (the whole finding: its own message and places, lowered)
        why = "; ".join(dict.fromkeys(reasons[p.line] for p in lowered))
        return [replace(finding, severity="info", message=f"{finding.message} ({why})")]
    first, rest = lowered[0], lowered[1:]
    why = "; ".join(dict.fromkeys(reasons[p.line] for p in lowered))
    lines = [str(p.line) for p in rest]
    also = "" if not lines else (f" (also at line {lines[0]})" if len(lines) == 1
                                 else f" (also at lines {', '.join(lines)})")
    note = replace(first, severity="info", also=tuple((p.line, p.column, p.source) for p in rest),
                   message=f"{first.message} ({why}){also}")
    return [note, *merge_per_file(kept)]


class _Module:
    def __init__(self, tree: ast.Module) -> None:
        self.tree = tree
        self.parent = astcache.parents(tree)
        # (class node id, attribute) -> {"key", "attr", "read", "line"}
        self.options: dict[tuple[int, str], dict] = {}
        stored: dict[str, list[tuple[Optional[ast.ClassDef], ast.AST, Optional[ast.AST]]]] = {}
        for node in astcache.walk(tree):
            targets: list[ast.AST] = []
            value: Optional[ast.AST] = None
            if isinstance(node, ast.Assign):
                targets, value = list(node.targets), node.value
            elif isinstance(node, (ast.AnnAssign, ast.AugAssign)):
                targets, value = [node.target], (node.value if isinstance(node, ast.AnnAssign) else None)
            for target in targets:
                for sub in ast.walk(target):
                    if isinstance(sub, ast.Attribute) and isinstance(sub.ctx, ast.Store):
                        plain = len(targets) == 1 and target is sub and not isinstance(node, ast.AugAssign)
                        stored.setdefault(sub.attr, []).append(
                            (self._class_of(sub), sub, value if plain else None))
        for attr, stores in stored.items():
            classes = {id(c) for c, _t, _v in stores}
            if len(classes) != 1 or stores[0][0] is None:
                continue
            read = None
            for _cls, target, value in stores:
                if not (isinstance(target.value, ast.Name) and target.value.id == "self"):
                    read = None
                    break
                if isinstance(value, ast.Constant) and value.value in (False, None):
                    continue
                key = _false_get(value)
                if key is None:
                    read = None
                    break
                read = read or {"key": key, "attr": attr, "read": ast.unparse(value), "line": value.lineno}
            else:
                if read is not None:
                    self.options[(id(stores[0][0]), attr)] = read

    def _class_of(self, node: ast.AST) -> Optional[ast.ClassDef]:
        up = self.parent.get(id(node))
        while up is not None and not isinstance(up, ast.ClassDef):
            up = self.parent.get(id(up))
        return up

    def _nodes_at(self, line: int) -> list[ast.AST]:
        return [node for node in astcache.walk(self.tree)
                if isinstance(node, (ast.stmt, ast.expr)) and node.lineno <= line <= (node.end_lineno or node.lineno)]

    def reason_at(self, line: int) -> Optional[str]:
        nodes = self._nodes_at(line)
        if not nodes:
            return None
        # the innermost node at the line: the one with no other candidate inside it
        inner = min(nodes, key=lambda n: ((n.end_lineno or n.lineno) - n.lineno, -n.lineno, -(n.col_offset or 0)))
        child, up = inner, self.parent.get(id(inner))
        while up is not None and not isinstance(up, (ast.ClassDef, ast.Module)):
            if isinstance(up, ast.If):
                found = self._guarded(up, child, inner)
                if found is not None:
                    return CHOSEN.format(**found)
            child, up = up, self.parent.get(id(up))
        return None

    def _guarded(self, test_if: ast.If, child: ast.AST, inner: ast.AST) -> Optional[dict]:
        """The option an `if` holding `child` in its body, or in its test after the option, needs."""
        in_body = any(child is s for s in test_if.body)
        in_test = child is test_if.test
        if not (in_body or in_test):
            return None
        test = test_if.test
        operands = test.values if isinstance(test, ast.BoolOp) and isinstance(test.op, ast.And) else [test]
        cls = self._class_of(test_if)
        if cls is None:
            return None
        for index, operand in enumerate(operands):
            if not (isinstance(operand, ast.Attribute) and isinstance(operand.value, ast.Name)
                    and operand.value.id == "self"):
                continue
            found = self.options.get((id(cls), operand.attr))
            if found is None:
                continue
            if in_body:
                return found
            # in the test: only an operand after the option's is evaluated only when it is on
            if in_test and isinstance(test, ast.BoolOp) and any(
                    _holds(later, inner) for later in operands[index + 1:]):
                return found
        return None


def _holds(outer: ast.AST, inner: ast.AST) -> bool:
    return any(sub is inner for sub in ast.walk(outer))


def _false_get(value: Optional[ast.AST]) -> Optional[str]:
    """The key of `<x>.get("key", False)`; None for anything else."""
    if not (isinstance(value, ast.Call) and isinstance(value.func, ast.Attribute) and value.func.attr == "get"
            and len(value.args) == 2 and not value.keywords):
        return None
    key, default = value.args
    if isinstance(key, ast.Constant) and isinstance(key.value, str) and isinstance(default, ast.Constant) \
            and default.value is False:
        return key.value
    return None
