"""A `Literal` option's "nccl" default that the run only compares and passes on (issue #16, precision
wave 26, helper h114, round-21 audit BN#23).

labels5.py lowers NPU990 on the default of a choice typed `Literal["transfer_engine", "nccl"]` to
info ("an option's label among others that are no backends ... review only if that option selects
an NCCL transport"). The review that note asks for can be done by the run itself: where the field
is read (an attribute `.field` of any Python file of the run), each read is

* one side of a comparison (`==`, `!=`, `in`, `not in`, `is`) whose other side is a string
  constant or a dotted name (an enum member `Backend.NCCL`): the label selects a mode there, and a
  comparison with "nccl" is itself rewritten (NPU302) or reported where it is;
* handed on under its own name (`LoadConfig(field=args.field)`), whose reads the same scan covers;
* the `default=` of an `add_argument(...)` call (the command line's copy of the option).

Then the string never reaches a process group, a device or any other call as a value: it is a mode
name, and whatever that mode does on an NPU host is reported where it does it (its group's backend,
its comparisons). Such a finding becomes a named scope ("a label the code resolves, not a device:
..." naming the field and its reads). What stays: a read handed to any other call or keyword
(`init_process_group(backend=args.field)`), returned, assigned to another name, subscripted or
formatted; a field no file reads (labels6.py's "nothing reads" is its own rule); a `getattr` by
string (not followed: kept).
"""

from __future__ import annotations

import ast
import dataclasses
import re
from typing import Optional

from . import astcache

RESOLVED = "a label the code resolves, not a device: "  # (moot.NO_WORK)
_CHOICE = re.compile(r"\(the default of a choice typed `Literal\[")
_COMPARE_OPS = (ast.Eq, ast.NotEq, ast.In, ast.NotIn, ast.Is, ast.IsNot)


def _field(tree: ast.Module, line: int) -> Optional[str]:
    for node in astcache.walk(tree):
        if isinstance(node, ast.AnnAssign) and node.lineno <= line <= (node.end_lineno or node.lineno) \
                and isinstance(node.target, ast.Name):
            return node.target.id
    return None


def _plain(node: ast.AST) -> bool:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return True
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        return all(_plain(e) for e in node.elts)
    return astcache.dotted(node, strict=False) is not None and isinstance(node, ast.Attribute)


def _read_ok(node: ast.Attribute, parents: dict, field: str) -> bool:
    parent = parents.get(id(node))
    if isinstance(parent, ast.Compare):
        sides = [parent.left, *parent.comparators]
        return (all(isinstance(op, _COMPARE_OPS) for op in parent.ops)
                and all(s is node or _plain(s) for s in sides))
    if isinstance(parent, ast.keyword):
        if parent.arg == field:
            return True
        call = parents.get(id(parent))
        return (parent.arg == "default" and isinstance(call, ast.Call)
                and (astcache.dotted(call.func, strict=False) or "").rsplit(".", 1)[-1] == "add_argument")
    return False


def _reads(results: list, text_of, field: str) -> Optional[list]:
    """The places every read of `.field` in the run, or None where one read is not a label's."""
    from .modpaths import parsed

    places: list = []
    python = [j for j, result in enumerate(results) if result.relpath.endswith(".py")]
    for j, tree in parsed(python, text_of, field.encode()):
        if tree is None:
            return None
        result = results[j]
        parents = astcache.parents(tree)
        for node in astcache.walk(tree):
            if isinstance(node, ast.Constant) and node.value == field:
                return None  # (`getattr(args, "field")`: not followed)
            if not (isinstance(node, ast.Attribute) and node.attr == field and isinstance(node.ctx, ast.Load)):
                continue
            if not _read_ok(node, parents, field):
                return None
            places.append(f"{result.relpath}:{node.lineno}")
    return places


def review(results: list, paths: Optional[dict] = None) -> list:
    """The results, with the Literal-choice "nccl" infos of the module docstring's shape named as
    labels the code resolves (a named scope through moot.to_scopes)."""
    from .modpaths import RunTexts

    text_of = None
    out = list(results)
    for i, result in enumerate(results):
        if not result.relpath.endswith(".py"):
            continue
        wanted = [k for k, f in enumerate(result.findings)
                  if f.code == "NPU990" and f.severity == "info" and not f.fixable and f.cell is None
                  and not f.also and f.source in ('"nccl"', "'nccl'") and _CHOICE.search(f.message)]
        if not wanted:
            continue
        text_of = text_of or RunTexts(results, paths or {})
        data = text_of(i)
        tree = astcache.parse(data) if data else None
        if tree is None:
            continue
        findings = list(out[i].findings)
        for k in wanted:
            finding = findings[k]
            field = _field(tree, finding.line)
            places = _reads(results, text_of, field) if field else None
            if not places:
                continue
            shown = ", ".join(places[:4]) + (f" and {len(places) - 4} more" if len(places) > 4 else "")
            findings[k] = dataclasses.replace(finding, message=(
                f"{finding.message} ({RESOLVED}the option `{field}` is only compared with other labels and "
                f"handed on under its own name ({shown}): the string reaches no process group, and what its "
                "mode does on an NPU host is reported where it does it)"))
        out[i] = dataclasses.replace(out[i], findings=findings)
    return out
