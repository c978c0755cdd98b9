"""Branches an NPU host never takes that only the run's other files or the whole module show
(issue #16, round-15 audits AO#3 and AP#24). Whole run, from runplan.whole_run_passes.

* **Another platform's member of the project's own enum.** accelerate's `DistributedType` has
  `MULTI_GPU` and a separate `MULTI_NPU`, and the project selects `MULTI_NPU` on an NPU host. A
  block under `if state.distributed_type == DistributedType.MULTI_GPU:` (or `in (...)` of such
  members only, or an `and` holding that test) in a file that imports the enum by name never runs
  there. Counted only where a class of the run named so defines both members, no other class of
  the run has that name, and some file of the run names `Enum.MULTI_NPU` outside the definition:
  a project whose enum has no NPU member keeps its findings.
* **A module flag bound once to a constant false.** `USE_XFORMERS_OPS = False` at module level,
  with no other binding of the name in the file (no `global` rebinding, no parameter, no loop or
  import binding it, no `globals()`), and no file of the run that assigns `module.USE_XFORMERS_OPS`
  or names it in a string (`monkeypatch.setattr(mod, "USE_XFORMERS_OPS", True)`): the body of `if
  USE_XFORMERS_OPS:` (and the `else` of `if not USE_XFORMERS_OPS:`) runs on no host. A flag read
  from the environment or a probe is not a constant and stays.

The findings inside (report-only, not already moot) become info with "in a branch an NPU host
does not take" and the reason: a named skipped scope (moot.PHRASES). Cheap byte tests select the
files before any parse.
"""

from __future__ import annotations

import ast
import dataclasses
import re
from typing import Optional

from . import astcache

_ENUM_MEMBER = re.compile(rb"^[ \t]+\w*NPU\w*[ \t]*=", re.MULTILINE)
_FALSE_FLAG = re.compile(rb"^([A-Za-z_][A-Za-z0-9_]*)[ \t]*=[ \t]*(?:False|None|0)[ \t]*(?:#[^\n]*)?$", re.MULTILINE)
_GPU_WORD = re.compile(r"GPU|CUDA")
_ENUM_CLASS = re.compile(rb"^class[ \t]+\w+[ \t]*\([^)]*Enum", re.MULTILINE)


def _platform_enums(results: list, text_of) -> dict[str, dict[str, str]]:
    """{class name: {CUDA member: its NPU member}} of the run's enum classes that have both, for
    names only one class of the run defines."""
    found: dict[str, dict[str, str]] = {}
    defined: dict[str, int] = {}
    for i, result in enumerate(results):
        if not result.relpath.endswith(".py"):
            continue
        data = text_of(i)
        if not data or not _ENUM_MEMBER.search(data) or not _ENUM_CLASS.search(data):
            continue
        tree = astcache.parse(data)
        if tree is None:
            continue
        for node in tree.body:
            if not isinstance(node, ast.ClassDef) or not any("Enum" in astcache.dotted(b) for b in node.bases):
                continue
            members = {t.id for s in node.body if isinstance(s, ast.Assign) for t in s.targets
                       if isinstance(t, ast.Name)}
            pairs = {m: _GPU_WORD.sub("NPU", m) for m in members if _GPU_WORD.search(m)}
            pairs = {m: n for m, n in pairs.items() if n in members}
            defined[node.name] = defined.get(node.name, 0) + 1
            if pairs:
                found[node.name] = pairs
    return {name: pairs for name, pairs in found.items() if defined.get(name) == 1}


def _selected(results: list, text_of, enums: dict) -> dict:
    """The enums whose NPU member some file of the run names as `Enum.MEMBER` outside the class."""
    out = {}
    for name, pairs in enums.items():
        wanted = re.compile(rb"\b" + name.encode() + rb"\.(?:" + b"|".join(
            re.escape(n.encode()) for n in set(pairs.values())) + rb")\b")
        if any(r.relpath.endswith(".py") and wanted.search(text_of(i) or b"") for i, r in enumerate(results)):
            out[name] = pairs
    return out


def _imported(tree: ast.Module, name: str) -> bool:
    """`name` is imported by name into the module (`from x import name`) or defined there."""
    for node in tree.body:
        if isinstance(node, ast.ImportFrom) and any(a.name == name and (a.asname in (None, name)) for a in node.names):
            return True
        if isinstance(node, ast.ClassDef) and node.name == name:
            return True
    return False


def _enum_test(test: ast.AST, members: dict[str, frozenset]) -> bool:
    """`x == Enum.MULTI_GPU` (either side), `x in (Enum.MULTI_GPU, ...)` of CUDA members only, or an
    `and` one of whose operands is such a test: false on an NPU host."""
    if isinstance(test, ast.BoolOp) and isinstance(test.op, ast.And):
        return any(_enum_test(v, members) for v in test.values)
    if not (isinstance(test, ast.Compare) and len(test.ops) == 1):
        return False

    def cuda_member(node: ast.AST) -> bool:
        return (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)
                and node.attr in members.get(node.value.id, ()))

    op, right = test.ops[0], test.comparators[0]
    if isinstance(op, (ast.Eq, ast.Is)):
        return cuda_member(test.left) or cuda_member(right)
    if isinstance(op, ast.In) and isinstance(right, (ast.Tuple, ast.List, ast.Set)) and right.elts:
        return all(cuda_member(e) for e in right.elts)
    return False


def _flag_names(tree: ast.Module, data: bytes) -> dict[str, int]:
    """{name: line} of module flags bound once, at module level, to False/None/0 (the docstring)."""
    if b"globals()" in data:
        return {}
    candidates = {m.group(1).decode() for m in _FALSE_FLAG.finditer(data)}
    if not candidates:
        return {}
    bound: dict[str, list[int]] = {n: [] for n in candidates}
    for node in astcache.walk(tree):
        if isinstance(node, ast.Name) and node.id in bound and not isinstance(node.ctx, ast.Load):
            bound[node.id].append(node.lineno)
        elif isinstance(node, ast.Global):
            for n in node.names:
                bound.get(n, []).extend([0, 0])
        elif isinstance(node, ast.arg) and node.arg in bound:
            bound[node.arg].extend([0, 0])
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            for alias in node.names:
                name = alias.asname or alias.name.split(".")[0]
                if name in bound:
                    bound[name].extend([0, 0])
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and node.name in bound:
            bound[node.name].extend([0, 0])
    out = {}
    for stmt in tree.body:
        if (isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name)
                and isinstance(stmt.value, ast.Constant) and stmt.value.value in (False, None, 0)
                and not isinstance(stmt.value.value, str) and bound.get(stmt.targets[0].id) == [stmt.lineno]):
            out[stmt.targets[0].id] = stmt.lineno
    return out


def _writers(results: list, text_of, names: set[str]) -> dict[str, set[int]]:
    """{flag: the files of the run that assign it as an attribute or name it in a string}: one
    byte pass over the run's Python files for all the flags at once."""
    alternatives = b"|".join(re.escape(n.encode()) for n in sorted(names))
    pattern = re.compile(rb"\.(" + alternatives + rb")[ \t]*=(?!=)|[\"'](" + alternatives + rb")[\"']")
    out: dict[str, set[int]] = {}
    for i, result in enumerate(results):
        if not result.relpath.endswith(".py"):
            continue
        for match in pattern.finditer(text_of(i) or b""):
            out.setdefault((match.group(1) or match.group(2)).decode(), set()).add(i)
    return out


def _flag_test(test: ast.AST, flags: dict[str, int]) -> Optional[str]:
    """The flag whose truth the test needs (`if FLAG:`, `if FLAG and ...:`), or None."""
    if isinstance(test, ast.Name) and test.id in flags:
        return test.id
    if isinstance(test, ast.BoolOp) and isinstance(test.op, ast.And):
        return next((f for f in (_flag_test(v, flags) for v in test.values) if f), None)
    return None


def _blocks(tree: ast.Module, lines: list[str], enums: dict, flags: dict[str, int]) -> list[tuple[int, int, str]]:
    """(first line, last line, reason) of the blocks an NPU host never runs."""
    from .testscopes import if_statements, source_segment

    out = []
    for node in if_statements(tree):
        if not node.body:
            continue
        body = (min([node.body[0].lineno, *(d.lineno for d in getattr(node.body[0], "decorator_list", ()))]),
                node.body[-1].end_lineno or node.body[-1].lineno)
        if enums and _enum_test(node.test, enums):
            names = sorted({n.value.id for n in ast.walk(node.test) if isinstance(n, ast.Attribute)
                            and isinstance(n.value, ast.Name) and n.value.id in enums})
            out.append((*body, f"`{source_segment(lines, node.test)}`: `{names[0]}` has a separate NPU member, "
                               f"which the project selects on an NPU host"))
            continue
        flag = _flag_test(node.test, flags)
        if flag is not None:
            out.append((*body, f"`{source_segment(lines, node.test)}`: `{flag}` is a constant false, bound once "
                               f"at line {flags[flag]} and never rebound"))
            continue
        if (node.orelse and isinstance(node.test, ast.UnaryOp) and isinstance(node.test.op, ast.Not)
                and isinstance(node.test.operand, ast.Name) and node.test.operand.id in flags):
            flag = node.test.operand.id
            out.append((node.orelse[0].lineno, node.orelse[-1].end_lineno or node.orelse[-1].lineno,
                        f"`not ({source_segment(lines, node.test)})`: `{flag}` is a constant false, bound once "
                        f"at line {flags[flag]} and never rebound"))
    return out


def review(results: list, paths: dict) -> list:
    """The results, with the report-only findings in the blocks of this module's docstring lowered
    to info (a named skipped scope)."""
    from .findings import lower_pieces
    from .modpaths import RunTexts
    from .moot import is_moot

    def open_findings(result) -> bool:
        return any(not f.fixable and f.cell is None and not is_moot(f) for f in result.findings)

    candidates = [i for i, r in enumerate(results) if r.relpath.endswith(".py") and open_findings(r)]
    if not candidates:
        return results
    text_of = RunTexts(results, paths)
    enums: Optional[dict] = None
    work = []
    for i in candidates:
        data = text_of(i)
        if not data or b"if " not in data:
            continue
        # (cheap byte tests first: a flag bound to a constant false that an `if` reads, an enum's member)
        named = {m.group(1) for m in _FALSE_FLAG.finditer(data)}
        has_flag = any(re.search(rb"\b(?:if|and)[ \t]+(?:not[ \t]+)?" + re.escape(n) + rb"\b", data) for n in named)
        if not has_flag and not re.search(rb"GPU|CUDA", data):
            continue
        if enums is None and re.search(rb"\.\w*(?:GPU|CUDA)", data):
            enums = _selected(results, text_of, _platform_enums(results, text_of))
        mentioned = {name for name in enums or () if re.search(rb"\b" + name.encode() + rb"\.\w*(?:GPU|CUDA)", data)}
        if not has_flag and not mentioned:
            continue
        tree = astcache.parse(data)
        if tree is None:
            continue
        members = {name: frozenset(enums[name]) for name in mentioned if _imported(tree, name)}
        flags = _flag_names(tree, data) if has_flag else {}
        if members or flags:
            work.append((i, data, tree, members, flags))
    writers = _writers(results, text_of, {n for item in work for n in item[4]}) if any(item[4] for item in work) else {}
    out = list(results)
    for i, data, tree, members, flags in work:
        flags = {n: line for n, line in flags.items() if not (writers.get(n, set()) - {i})}
        if not members and not flags:
            continue
        lines = data.decode("utf-8", "replace").splitlines(keepends=True)
        blocks = _blocks(tree, lines, members, flags)
        if not blocks:
            continue

        def reason_of(line: int, blocks=blocks) -> Optional[str]:
            block = next((b for b in blocks if b[0] <= line <= b[1]), None)
            return None if block is None else f"in a branch an NPU host does not take: {block[2]}"

        changed, findings = False, []
        for finding in results[i].findings:
            pieces = None
            if not finding.fixable and finding.cell is None and not is_moot(finding):
                pieces = lower_pieces(finding, reason_of)  # (each place of a merged finding on its own)
            changed = changed or pieces is not None
            findings.extend([finding] if pieces is None else pieces)
        if changed:
            out[i] = dataclasses.replace(results[i], findings=sorted(findings))
    return out
