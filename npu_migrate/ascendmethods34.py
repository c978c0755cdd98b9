"""vLLM methods vllm-ascend replaces by assigning its own function to the class attribute: what only
they reach becomes a review-level note (issue #16, audit round 33 HA#9). Whole run, from
runplan.whole_run_passes, right after ascendmodels32.py (the same kind of fact).

vllm-ascend's worker patches assign their own functions to some of vLLM's methods before the model
is built (`MiniMaxM2Attention.forward = _patch_forward` in vllm_ascend/patch/worker/
patch_minimax_m2.py): on an Ascend host the body of vLLM's method never runs. The `[[methods]]`
entries of rules/vllm_ascend.toml hold these facts: the methods replaced (`replaced`: a module and
its `Class.method` names), the modules whose code the fact may close (`modules`), and the vllm-ascend
file and version it was read from.

The walk is a finer cut of ascendfacts30's package walk: in `modules`, a top-level function or class
and each method of a class are units. A unit is reached when library code outside `modules` (tests
and benchmarks aside, the bodies of the replaced methods aside) names it: a top-level unit by a name,
an attribute or a dotted string; a method by an attribute or a string of its name (any object's: the
type is not known), except `self.m` inside a class that defines `m` itself or inherits it from a class of its module,
and that no class of `modules` derives from (the Conformer's own `self.forward_qkv`). Inside `modules` what their
module-level code, their decorators and a reached unit name is reached the same way; a reached class
reaches its dunder methods and `forward`; a custom op's spelling (`torch.ops.vllm.<op>`, registered by
a module-level `direct_register_custom_op(op_name=..., op_func=f)`) reaches `f`. An open finding
whose every line lies in units not reached becomes info naming the fact and its source (an external
fact that can change with the plugin's version: never a scope, never dropped); a merged finding only
some of whose places lie there is split, those places info, the others kept. Applied only when the
project is vLLM itself (ascendfacts30.vllm_root).

HA#9: the MiniMax QK-norm Triton kernels of rms_norm_tp.py run only inside the custom op
`minimax_qk_norm_fusion`, which only `MiniMaxText01RMSNormTP.forward_qkv` calls, which only
`MiniMaxM2Attention.forward` calls: the method the plugin replaces with its own fused NPU op.
"""

from __future__ import annotations

import ast
import re
from typing import Optional

from . import ascendfacts30

_METHODS = (ast.FunctionDef, ast.AsyncFunctionDef)


def _span(node) -> tuple:
    first = min([node.lineno, *(d.lineno for d in getattr(node, "decorator_list", ()))])
    return first, node.end_lineno or node.lineno


def _skipped_ids(tree, methods: frozenset) -> set:
    """ids of every node inside the replaced methods (`Class.method`) of a module."""
    out: set = set()
    for cls in tree.body:
        if isinstance(cls, ast.ClassDef):
            for stmt in cls.body:
                if isinstance(stmt, _METHODS) and f"{cls.name}.{stmt.name}" in methods:
                    out.update(id(n) for n in ast.walk(stmt))
    return out


def _own_self_reads(tree, bases_of_members: set) -> set:
    """ids of `self.m` Attributes inside a class that defines `m` itself, or inherits it from a class
    of the same module, and that no member class derives from (the read resolves to that method)."""
    classes = {n.name: n for n in ast.walk(tree) if isinstance(n, ast.ClassDef)}

    def has(name: str, method: str, seen=()) -> bool:
        cls = classes.get(name)
        if cls is None or name in seen:
            return False
        if any(isinstance(s, _METHODS) and s.name == method for s in cls.body):
            return True
        return any(isinstance(b, ast.Name) and has(b.id, method, (*seen, name)) for b in cls.bases)

    out: set = set()
    for cls in classes.values():
        if cls.name in bases_of_members:
            continue
        for node in ast.walk(cls):
            if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "self"
                    and has(cls.name, node.attr)):
                out.add(id(node))
    return out


class _Units:
    """The units of `modules`: top-level functions and classes, and each class's methods."""

    def __init__(self, trees: dict) -> None:
        self.trees = trees
        self.nodes: dict = {}  # key ("f", "Class", "Class.m") -> [(index, node)]
        self.methods: dict = {}  # method name -> keys
        self.ops: dict = {}  # custom-op spelling -> unit key
        self.registering: set = set()
        self.bases: set = set()
        for i, tree in trees.items():
            for node in tree.body:
                if isinstance(node, _METHODS):
                    self.nodes.setdefault(node.name, []).append((i, node))
                elif isinstance(node, ast.ClassDef):
                    self.nodes.setdefault(node.name, []).append((i, node))
                    self.bases.update(b.id if isinstance(b, ast.Name) else b.attr for b in node.bases
                                      if isinstance(b, (ast.Name, ast.Attribute)))
                    for stmt in node.body:
                        if isinstance(stmt, _METHODS):
                            key = f"{node.name}.{stmt.name}"
                            self.nodes.setdefault(key, []).append((i, stmt))
                            self.methods.setdefault(stmt.name, set()).add(key)
        tops = frozenset(k for k in self.nodes if "." not in k)
        for tree in trees.values():
            for spelling, name, ids in ascendfacts30.registrations(tree, tops):
                self.ops[spelling] = name
                self.registering |= ids
        for key in tops:
            if any(ascendfacts30.is_custom_op(n) for _i, n in self.nodes[key]):
                self.ops.setdefault(key, key)
        self.tops = tops
        words = sorted({*tops, *self.methods, *self.ops})
        self.spelled = re.compile(rb"\b(?:" + b"|".join(re.escape(w.encode()) for w in words) + rb")\b") if words else None

    def named(self, nodes, skip: set = frozenset()) -> set:
        """The unit keys `nodes` name."""
        out: set = set()
        for top in nodes:
            for node in ast.walk(top):
                if id(node) in skip:
                    continue
                if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load):
                    words = [node.id]
                elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Load):
                    words = [node.attr]
                elif isinstance(node, ast.Constant) and isinstance(node.value, str) and len(node.value) < 300:
                    words = [node.value.rpartition(".")[2]]
                else:
                    continue
                for word in words:
                    if word in self.tops:
                        out.add(word)
                    if not isinstance(node, ast.Name):
                        out |= self.methods.get(word, set())
                        if word in self.ops:
                            out.add(self.ops[word])
        return out

    def body(self, key: str) -> list:
        """What running (or building) the unit runs: a class's bases, decorators and non-method
        statements; a function's whole node."""
        out = []
        for _i, node in self.nodes.get(key, ()):
            if isinstance(node, ast.ClassDef):
                out += [*node.bases, *node.keywords, *node.decorator_list,
                        *(s for s in node.body if not isinstance(s, _METHODS))]
            else:
                out.append(node)
        return out


def _reached(results, text_of, members: list, outside: list, replaced: dict) -> Optional[tuple]:
    """(units, reached keys); None where a member does not parse."""
    from . import astcache

    trees = {}
    for i in members:
        data = text_of(i)
        tree = astcache.parse(data) if data else (ast.Module(body=[], type_ignores=[]) if data == b"" else None)
        if tree is None:
            return None
        trees[i] = tree
    units = _Units(trees)
    if units.spelled is None:
        return units, set()
    reached: set = set()
    for j in outside:
        data = text_of(j)
        if not data or not units.spelled.search(data):
            continue
        tree = astcache.parse(data)
        if tree is None:  # (a file that does not parse: every unit it spells is reached)
            for word in {m.decode() for m in units.spelled.findall(data)}:
                reached |= ({word} & units.tops) | units.methods.get(word, set())
                if word in units.ops:
                    reached.add(units.ops[word])
            continue
        skip = _skipped_ids(tree, replaced.get(j, frozenset())) | _own_self_reads(tree, units.bases)
        reached |= units.named([tree], skip)
    for tree in trees.values():
        tops = [s for s in tree.body if not isinstance(s, (_METHODS, ast.ClassDef, ast.Import, ast.ImportFrom))]
        decorators = [d for s in tree.body if isinstance(s, (_METHODS, ast.ClassDef)) for d in s.decorator_list]
        reached |= units.named(tops, units.registering) | units.named(decorators)
    todo = list(reached)
    while todo:
        key = todo.pop()
        found = units.named(units.body(key))
        if "." not in key:  # (a class built or read: its dunders and `forward` run implicitly)
            found |= {k for k in units.nodes if k.startswith(key + ".") and (
                k.rpartition(".")[2] == "forward" or k.rpartition(".")[2].startswith("__"))}
        for new in found - reached:
            reached.add(new)
            todo.append(new)
    return units, reached


def _unreached_spans(units: _Units, reached: set) -> dict:
    """{member index: [(first, last, key)]}: methods first (a class's span holds them)."""
    out: dict = {}
    for key, places in sorted(units.nodes.items(), key=lambda kv: "." not in kv[0]):
        for i, node in places:
            if key in reached:
                continue
            if isinstance(node, ast.ClassDef):
                # (the class's own lines: its header and non-method statements)
                first = _span(node)[0]
                out.setdefault(i, []).append((first, node.lineno, key))
                out[i].extend((*_span(s), key) for s in node.body if not isinstance(s, _METHODS))
            else:
                out.setdefault(i, []).append((*_span(node), key))
    return out


def review(results: list, paths: dict) -> list:
    """Open findings of vLLM's code only methods vllm-ascend replaces reach: info naming the fact."""
    from .modpaths import RunTexts
    from .moot import is_open

    entries = ascendfacts30.facts().get("methods", ())
    if not entries:
        return results
    text_of = RunTexts(results, paths or {})
    prefix = ascendfacts30.vllm_root(results, text_of)
    if prefix is None:
        return results
    library = [i for i, r in enumerate(results) if r.relpath.endswith(".py")
               and not ascendfacts30.TEST_PART.search(r.relpath[len(prefix):])]
    for entry in entries:
        members = [i for i in library if ascendfacts30.in_paths(results[i].relpath, prefix, entry["modules"])]
        if not any(is_open(f) for i in members for f in results[i].findings):
            continue
        replaced: dict = {}
        for r in entry["replaced"]:
            for j in library:
                if results[j].relpath == prefix + r["module"]:
                    replaced[j] = frozenset(r["names"])
        got = _reached(results, text_of, members, [j for j in library if j not in members], replaced)
        if got is None:
            continue
        units, reached = got
        names = ", ".join(f"`{n}`" for r in entry["replaced"] for n in r["names"])

        def note(key, names=names, entry=entry):
            return ascendfacts30.note_for(f"this code is reached only through the methods the plugin replaces, {names} "
                                          f"(`{key}` is named only by them)", entry)

        results, _count = ascendfacts30.lowered(results, _unreached_spans(units, reached), note, split=True)
    return results
