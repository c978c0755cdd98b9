"""An FP8 dtype picked only when a string setting names an FP8 format, in a module whose FP8 tensors
are read by another module's Triton kernels (issue #16, rounds 22-26 BF#6, BU#14, BU#28). Whole run,
from runplan.whole_run_passes (after fp8storage26.py).

fp8folds19 and fp8storage26 follow an FP8 value into kernel launches inside one module or one class.
The reviewers found the same storage dtype handed on through the framework instead (a cache object's
`self.dtype` that the KV-cache manager reads to allocate, an attribute a subclass in another file
reads), each time a redundant "FP8 compute" error beside the NPU910 of the kernels that read it:

    from .ops.index_kernels import index_topk              # a Triton kernel module of the run
    ...
    if indexer_kv_dtype in ("fp8", "fp8_e4m3"):            # an opt-in setting (default "bf16")
        cache_dtype = torch.float8_e4m3fn                  # FP8 place
    elif indexer_kv_dtype == "bf16":
        cache_dtype = torch.bfloat16

    if "e5m2" in kv_cache_dtype:
        self.kv_cache_fp8_dtype = torch.float8_e5m2        # viewed for the imported kernels

The FP8 branch runs only when the user names an FP8 format for the setting (policy P1: opt-in code
is reported, never as its own error), and then the tensors of that dtype are read by the kernels the
module imports, which an NPU host cannot run until they are ported (their NPU910 asks for that);
porting them decides the storage dtype too. So the FP8 place folds into that NPU910, whose message
names it ("also `torch.float8_e4m3fn` in `../indexer.py` (line 119): an FP8 dtype picked only when
`indexer_kv_dtype` names an FP8 format (opt-in) ...").

Decided on the exact construct (anything else keeps the finding):
- the place is `torch.float8_*` inside the body of an `if` (or a branch of a conditional
  expression) whose test compares a setting, a name or an attribute other than `.dtype`, with
  string literals that all name an FP8 format (`s == "fp8"`, `s in ("fp8", "fp8_e4m3")`,
  `"e5m2" in s`, `s.startswith("fp8")`); an `else` branch is not opt-in and keeps the finding;
- the module imports (at the top or in a function) names it uses from a non-test module of the run
  that holds an open NPU910 at the FP8 finding's severity or above and whose text handles FP8
  (`float8`, `fp8`); of several, the one whose path shares the longest prefix with the module, then
  the first imported;
- the module is not a test (a test's FP8 is its own).
"""

from __future__ import annotations

import ast
import dataclasses
import os
import posixpath
import re
from typing import Optional

from . import astcache

_FP8_WORD = re.compile(r"fp8|float8|e4m3|e5m2", re.IGNORECASE)
_FP8_TEXT = re.compile(rb"float8|fp8")


def _open(finding, code: str) -> bool:
    from .folding import ours
    from .moot import is_moot

    return finding.code == code and ours(finding) and finding.severity != "info" and not is_moot(finding)


def _fp8_literals(node: ast.AST) -> bool:
    """A string constant, or a tuple/list/set of them, every one naming an FP8 format."""
    items = node.elts if isinstance(node, (ast.Tuple, ast.List, ast.Set)) else [node]
    return bool(items) and all(isinstance(x, ast.Constant) and isinstance(x.value, str) and _FP8_WORD.search(x.value)
                               for x in items)


def _setting(node: ast.AST) -> bool:
    """A setting's value: a name or an attribute chain, not a tensor's `.dtype`."""
    if isinstance(node, ast.Attribute):
        return node.attr != "dtype" and astcache.dotted(node, strict=True) is not None
    return isinstance(node, ast.Name)


def opt_in_setting(test: ast.AST) -> Optional[str]:
    """The setting `test` compares with FP8 format names only (its source), else None."""
    if isinstance(test, ast.Compare) and len(test.ops) == 1:
        left, op, right = test.left, test.ops[0], test.comparators[0]
        if isinstance(op, (ast.Eq, ast.In)) and _setting(left) and _fp8_literals(right):
            return ast.unparse(left)
        if isinstance(op, ast.Eq) and _setting(right) and _fp8_literals(left):
            return ast.unparse(right)
        if isinstance(op, ast.In) and _setting(right) and isinstance(left, ast.Constant) and _fp8_literals(left):
            return ast.unparse(right)
        return None
    if isinstance(test, ast.Call) and isinstance(test.func, ast.Attribute) and test.func.attr == "startswith" \
            and _setting(test.func.value) and len(test.args) == 1 and _fp8_literals(test.args[0]):
        return ast.unparse(test.func.value)
    return None


def _place_node(tree: ast.Module, line: int, column: int) -> Optional[ast.AST]:
    for node in astcache.walk(tree):
        if isinstance(node, ast.Attribute) and node.lineno == line and node.col_offset == column - 1 \
                and (astcache.dotted(node, strict=False) or "").startswith("torch.float8"):
            return node
    return None


def _chosen_by(node: ast.AST, parents: dict) -> Optional[str]:
    """The opt-in setting whose FP8 test guards `node` inside its function (or module), else None."""
    while True:
        parent = parents.get(id(node))
        if parent is None or isinstance(parent, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)):
            return None
        if isinstance(parent, ast.IfExp) and node is not parent.test:
            setting = opt_in_setting(parent.test)
            if node is parent.body and setting:
                return setting
        if isinstance(parent, ast.If) and node is not parent.test:
            if node in parent.orelse and not (len(parent.orelse) == 1 and isinstance(node, ast.If)):
                return None  # (an `else`: what runs when the user did not choose FP8)
            setting = opt_in_setting(parent.test)
            if setting and node in parent.body:
                return setting
        node = parent


def _used_names(tree: ast.Module) -> set:
    return {n.id for n in astcache.walk(tree) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}


def _kernel_module(run, results, i: int, rank: int, text_of) -> Optional[int]:
    """The run module of reported Triton kernels handling FP8 that module `i` imports and uses."""
    from .folding import RANK
    from .importgates import is_test

    tree = run.tree(i)
    used = _used_names(tree)
    here = results[i].relpath
    found = []
    for node in astcache.walk(tree):
        if not isinstance(node, ast.ImportFrom) or not any((a.asname or a.name) in used for a in node.names):
            continue
        k = run.module_of(i, node)
        if k is None or k == i or k in found or is_test(results[k].relpath):
            continue
        if not any(_open(f, "NPU910") and RANK[f.severity] >= rank for f in results[k].findings):
            continue
        data = text_of(k)
        if data and _FP8_TEXT.search(data):
            found.append(k)
    if not found:
        return None
    return max(found, key=lambda k: (len(os.path.commonprefix([here, results[k].relpath]).rsplit("/", 1)[0]),
                                     -found.index(k)))


def review(results: list, paths: dict) -> list:
    """Module's doc."""
    from .folding import RANK, drop_taken, places_of
    from .fp8folds19 import RunDefinitions
    from .importgates import is_test
    from .modpaths import RunTexts

    candidates = [(i, f) for i, r in enumerate(results) if r.relpath.endswith(".py") and not is_test(r.relpath)
                  for f in r.findings if _open(f, "NPU913") and "(with `" not in f.message]
    if not candidates or not any(_open(f, "NPU910") for r in results for f in r.findings):
        return results
    text_of = RunTexts(results, paths)
    run = RunDefinitions(results, text_of)
    moves: dict[int, list] = {}  # kernel module -> [(file, finding, places, setting)]
    kernels_of: dict[tuple[int, int], Optional[int]] = {}
    for i, finding in candidates:
        data = text_of(i)
        if not data or b"float8" not in data:
            continue
        tree = run.tree(i)
        if tree is None:
            continue
        parents = {}
        for node in astcache.walk(tree):
            for child in ast.iter_child_nodes(node):
                parents[id(child)] = node
        by_setting: dict[str, list] = {}
        for place in places_of(finding):
            node = _place_node(tree, place[0], place[1])
            setting = _chosen_by(node, parents) if node is not None else None
            if setting:
                by_setting.setdefault(setting, []).append(place)
        if not by_setting:
            continue
        key = (i, RANK[finding.severity])
        if key not in kernels_of:
            kernels_of[key] = _kernel_module(run, results, i, RANK[finding.severity], text_of)
        k = kernels_of[key]
        if k is None:
            continue
        for setting, places in by_setting.items():
            moves.setdefault(k, []).append((i, finding, places, setting))
    if not moves:
        return results
    out = list(results)
    taken: dict[int, dict[int, list]] = {}
    for k, moved in moves.items():
        target = next((f for f in out[k].findings if _open(f, "NPU910")
                       and RANK[f.severity] >= max(RANK[m[1].severity] for m in moved)), None)
        if target is None:
            continue
        notes = []
        for i, finding, places, setting in moved:
            lines = sorted({p[0] for p in places})
            shown = ", ".join(map(str, lines))
            what = places[0][2] or "FP8 dtype"
            at = posixpath.relpath(results[i].relpath, posixpath.dirname(results[k].relpath) or ".")
            notes.append(f"`{what}` in `{at}` (line{'s' if len(lines) > 1 else ''} {shown}), picked only when "
                         f"`{setting}` names an FP8 format")
            taken.setdefault(i, {}).setdefault(id(finding), []).extend(places)
        more = f" and {len(notes) - 3} more" if len(notes) > 3 else ""
        note = (f"also {'; '.join(notes[:3])}{more}: an opt-in FP8 dtype (reached on an NPU host only when that "
                "setting is chosen) for tensors these Triton kernels read (ported with them)")
        out[k] = dataclasses.replace(out[k], findings=sorted(
            dataclasses.replace(f, message=f"{f.message} ({note})") if f is target else f for f in out[k].findings))
    drop_taken(out, taken)
    return out
