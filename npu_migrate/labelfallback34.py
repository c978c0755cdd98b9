"""An implementation label the file itself falls back from when the implementation is missing
(issue #16, round-33 audit HB#28; helper h193). Whole run (runplan.whole_run_passes, right after
fp64tests34.py), one file at a time, the run's other files read only for the table's name.

    _flash_attn3_available = is_fa_version_supported(3)
    CLASSES = {"eager": Eager, "flash_attention_3": FlashAttention3}      # NPU990 "flash_attention_3"

    def resolve(attn_implementation):
        if attn_implementation == "flash_attention_3" and not _flash_attn3_available:   # NPU990 too
            attn_implementation = "flash_attention_2"                     # (and on to eager)
        return attn_implementation

    def build(attn_implementation, config):
        attn_implementation = resolve(attn_implementation)
        return CLASSES[attn_implementation](config)

The string names an implementation in the file's own table; the file selects it only through its
own resolver, which maps it to another label where the module-level availability flag of that
implementation is false. Where the implementation is missing (an NPU host) the fallback runs;
where it is present it runs. Either way the label is read as written: NPU990 becomes info with
LABEL_FALLBACK (moot.AS_WRITTEN, a named scope), naming the resolver and the flag.

Exact. Every place of the finding is the string S as either a key of a module-level dict literal
`T = {...}` or the right side of `NAME == S` that is the first conjunct of an `if NAME == S and
not FLAG:` whose body rebinds NAME to another string (the fallback; at least one such place),
FLAG a module-level name bound once to a call and named as an availability flag (`available`,
`supported`, `has_`). Each table T is read in the file only by `in`/`not in` tests, as a call's
argument (`sorted(T)`), or subscripted by a name the same function first rebinds to the result of
a call of the resolver (the function holding the fallback); no other file of the run names T.
Kept: a table subscripted without the resolver, a table another file names, a fallback on
something other than an availability flag, a string used elsewhere in the file (another call, a
default), and the strings "cuda"/"nccl".
"""

from __future__ import annotations

import ast
import dataclasses
import re
from typing import Optional

from . import astcache

LABEL_FALLBACK = "an implementation label the file falls back from where the implementation is missing"
_FLAG = re.compile(r"avail|supported|(^|_)has_", re.IGNORECASE)
_FUNCTIONS = (ast.FunctionDef, ast.AsyncFunctionDef)


def _candidate(finding) -> bool:
    from .moot import is_moot, named

    return (finding.code == "NPU990" and not finding.fixable and finding.cell is None and finding.severity != "info"
            and len(finding.source) > 2 and finding.source[0] == finding.source[-1] and finding.source[0] in "\"'"
            and finding.source[1:-1] not in ("cuda", "nccl") and not is_moot(finding) and not named(finding))


def _module_flags(tree: ast.Module) -> set[str]:
    """Module-level names bound once, to a call, named as availability flags."""
    counts: dict[str, int] = {}
    calls: set[str] = set()
    for stmt in tree.body:
        targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target] if isinstance(
            stmt, (ast.AnnAssign, ast.AugAssign)) else []
        for target in targets:
            for node in ast.walk(target):
                if isinstance(node, ast.Name):
                    counts[node.id] = counts.get(node.id, 0) + 1
                    if isinstance(stmt, ast.Assign) and isinstance(stmt.value, ast.Call) and target is node:
                        calls.add(node.id)
    return {n for n in calls if counts[n] == 1 and _FLAG.search(n)}


def _tables(tree: ast.Module) -> dict[int, str]:
    """{id of a key constant: table name} of module-level `T = {...}` dict literals."""
    out: dict[int, str] = {}
    for stmt in tree.body:
        target = stmt.targets[0] if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 else \
            stmt.target if isinstance(stmt, ast.AnnAssign) else None
        if isinstance(target, ast.Name) and isinstance(stmt.value, ast.Dict):
            out.update({id(k): target.id for k in stmt.value.keys if k is not None})
    return out


def _fallback(node: ast.Constant, parents: dict, flags: set) -> Optional[tuple[ast.AST, str, str]]:
    """(the function holding it, the compared name, the flag) when `node` is S of `if NAME == S
    and not FLAG:` whose body rebinds NAME to another string."""
    compare = parents.get(id(node))
    if not (isinstance(compare, ast.Compare) and len(compare.ops) == 1 and isinstance(compare.ops[0], ast.Eq)
            and compare.comparators[0] is node and isinstance(compare.left, ast.Name)):
        return None
    test = parents.get(id(compare))
    if not (isinstance(test, ast.BoolOp) and isinstance(test.op, ast.And) and len(test.values) == 2
            and test.values[0] is compare and isinstance(test.values[1], ast.UnaryOp)
            and isinstance(test.values[1].op, ast.Not) and isinstance(test.values[1].operand, ast.Name)
            and test.values[1].operand.id in flags):
        return None
    branch = parents.get(id(test))
    if not (isinstance(branch, ast.If) and branch.test is test):
        return None
    name = compare.left.id
    if not any(isinstance(s, ast.Assign) and len(s.targets) == 1 and isinstance(s.targets[0], ast.Name)
               and s.targets[0].id == name and isinstance(s.value, ast.Constant) and isinstance(s.value.value, str)
               and s.value.value != node.value for s in branch.body):
        return None
    function = parents.get(id(branch))
    while function is not None and not isinstance(function, _FUNCTIONS):
        function = parents.get(id(function))
    return (function, name, test.values[1].operand.id) if function is not None else None


def _resolved_first(function: ast.AST, key: ast.AST, at: int, resolver: str) -> bool:
    """`key` is a name `function` rebinds, before line `at`, from a call of `resolver` (a top-level
    statement of its body), and binds nowhere else."""
    if not isinstance(key, ast.Name):
        return False
    binds = [s for s in ast.walk(function) if isinstance(s, (ast.Assign, ast.AnnAssign, ast.AugAssign, ast.For))
             and any(isinstance(n, ast.Name) and n.id == key.id and isinstance(n.ctx, ast.Store)
                     for t in (s.targets if isinstance(s, ast.Assign) else [s.target]) for n in ast.walk(t))]
    return len(binds) == 1 and binds[0] in function.body and binds[0].lineno < at \
        and isinstance(binds[0], ast.Assign) and isinstance(binds[0].value, ast.Call) \
        and isinstance(binds[0].value.func, ast.Name) and binds[0].value.func.id == resolver


def _table_read_safely(tree: ast.Module, parents: dict, table: str, resolver: str) -> bool:
    for node in astcache.walk(tree):
        if not (isinstance(node, ast.Name) and node.id == table and isinstance(node.ctx, ast.Load)):
            continue
        up = parents.get(id(node))
        if isinstance(up, ast.Compare) and node in up.comparators and all(isinstance(o, (ast.In, ast.NotIn)) for o in up.ops):
            continue
        if isinstance(up, ast.Call) and node in up.args:
            continue
        if isinstance(up, ast.Subscript) and up.value is node:
            function = up
            while function is not None and not isinstance(function, _FUNCTIONS):
                function = parents.get(id(function))
            if function is not None and _resolved_first(function, up.slice, up.lineno, resolver):
                continue
        return False
    return True


def _review_file(result, text: bytes, others) -> Optional[list]:
    hits = [f for f in result.findings if _candidate(f)]
    if not hits:
        return None
    tree = astcache.parse(text)
    if tree is None:
        return None
    parents = astcache.parents(tree)
    flags = _module_flags(tree)
    if not flags:
        return None
    tables = _tables(tree)
    constants: dict[tuple[int, int], ast.Constant] = {}
    for node in astcache.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            constants[(node.lineno, node.col_offset + 1)] = node
    changed = {}
    for finding in hits:
        value = finding.source[1:-1]
        places = [(finding.line, finding.column), *((a[0], a[1]) for a in finding.also)]
        nodes = [constants.get(p) for p in places]
        if any(n is None or n.value != value for n in nodes):
            continue
        fallbacks = [_fallback(n, parents, flags) for n in nodes]
        found = [f for f in fallbacks if f is not None]
        if not found or len({(id(f[0]), f[2]) for f in found}) != 1:
            continue
        function, _name, flag = found[0]
        keyed = {tables[id(n)] for n, f in zip(nodes, fallbacks) if f is None and id(n) in tables}
        if any(f is None and id(n) not in tables for n, f in zip(nodes, fallbacks)):
            continue
        if any(not _table_read_safely(tree, parents, t, function.name) for t in keyed):
            continue
        if keyed and any(re.search(rb"\b" + re.escape(t.encode()) + rb"\b", o) for o in others() for t in keyed):
            continue
        changed[id(finding)] = dataclasses.replace(finding, severity="info", message=(
            f"{finding.message} ({LABEL_FALLBACK}: `{function.name}()` maps it to another implementation where "
            f"`{flag}` is false, as on an NPU host, and the file selects it only through `{function.name}()`; "
            "read as written)"))
    if not changed:
        return None
    return [changed.get(id(f), f) for f in result.findings]


def review(results: list, paths: Optional[dict] = None) -> list:
    """Module's doc."""
    from .modpaths import result_bytes

    if not any(_candidate(f) for r in results if r.relpath.endswith(".py") for f in r.findings):
        return results
    cache: dict = {}

    def others_of(index: int):
        def read() -> list[bytes]:
            if "all" not in cache:
                cache["all"] = [(i, result_bytes(r, paths or {}) or b"") for i, r in enumerate(results)
                                if r.relpath.endswith(".py")]
            return [data for i, data in cache["all"] if i != index]
        return read

    out = list(results)
    for index, result in enumerate(results):
        if not result.relpath.endswith(".py") or not any(_candidate(f) for f in result.findings):
            continue
        data = result_bytes(result, paths or {})
        if not data:
            continue
        findings = _review_file(result, data, others_of(index))
        if findings is not None:
            out[index] = dataclasses.replace(result, findings=findings)
    return out
