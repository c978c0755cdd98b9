"""The project's own NPU platform layer decides the route (issue #16, round-23 audit BM#8, BL#28,
BL#40, BL#32). Whole run, from runplan.whole_run_passes; two passes, each a message that moot.to_scopes
names as a skipped scope. No new analysis: each reads the proof an earlier pass wrote into the
finding, and decides on that construct only.

* **Code only another accelerator's platform class runs** (BM#8; `review_platform_code`, right after
  platforms20.py). platforms20 lowers to info what only a CUDA/ROCm/XPU platform class reaches (the
  class body of `CudaPlatform`, its module when nothing else loads it, the modules its methods name
  by string), naming the class and the registry line that selects it only after a probe of that
  accelerator; round 20 kept them as info for the porter of the NPU platform plugin. Round 23's
  reviewers read every one as noise: the NPU host selects its own platform class (the project's or a
  plugin's) and implements its own answer there, so the porter has nothing to do in this code. Such
  an info (platforms20's clause, not fixable, no notebook cell) becomes a named scope, `not run on
  an NPU host (NPU931): code only another accelerator's platform class runs: reached only through
  the CUDA platform class: ...`. What platforms20 keeps reported (a module also imported from code
  an NPU host runs, a registry without a device probe, a selector it cannot read) is untouched here.

* **A class only that code names** (BL#28, same pass, with platforms20's `platform_reach`).
  platforms20 decides whole modules: a backend module that a pipeline stage also imports (for a
  cache class) is loaded on an NPU host, so SGLang's `SparseVideoGen2AttentionBackend`, named only
  by the CUDA platform's attention selector (a lazy import and its dotted path), kept its
  implementation's MAGMA switch as an error. Here a module-level class holding an open finding
  outside that code is never run there when every reference of the run to it (a name read, an
  attribute, a `from m import C`, the string `"C"` or `"pkg.m.C"`; annotations and its own body
  aside) lies in that code, or in another class of its module so reached (a few steps: the backend's
  `get_impl_cls` returning the implementation class). Its findings become the same named scope,
  naming the places and the platform class. Kept: a class with no reference, one with a decorator or
  a metaclass, or whose base registers or lists its subclasses (`__init_subclass__`, a metaclass,
  `Base.__subclasses__()`), a reference in code an NPU host may run (the NPU platform's own selector
  returning the class's path, a module-level table, a subclass elsewhere), a file that does not
  parse. Only modules holding a class whose name platform code reads are walked.

* **A CUDA name the project's own NPU start-up remaps** (BL#40; `review_startup`, last: a pass that
  finds the code never runs on an NPU host, callees22.py, names it first with that reason).
  patcher19 lowers to info a `torch.cuda` name (NPU202) or a profiler CUDA activity (NPU935) that
  torch_npu's `transfer_to_npu` maps to the NPU, in the modules a process that loads the patcher
  runs (proven by loaderproof20), naming the load's place. Where that place lies in the project's
  own NPU layer (a path part naming the NPU: `hardware_backend/npu/utils.py`, `hw/npu_utils.py`,
  `ascend/`), the patcher is the project's NPU start-up, reached from its platform/hardware layer
  under its NPU flag, and the code runs as written there: a named scope `runs as written on an NPU
  host (NPU202): a CUDA name the project's own NPU start-up remaps: ...`. A graph capture
  (`torch.cuda.CUDAGraph`, mapped to NPUGraph, documented for inference only) is left to
  singles22.py's inference captures. A load anywhere else (a compatibility module, a test runner
  helper) keeps patcher19's info: the porter must know the code relies on a patcher the project
  loads incidentally.

* **A setting without effect on NPU under a parameter no call sets** (BL#32; `review_startup`). A
  `torch.backends.cudnn` flag (NPU404, "has no effect on NPU", info) inside `if flag:` where
  flagargs21 found that every call of the run passes the parameter False or leaves its default
  (`seed_all(seed, cuda_deterministic=False)`): the flag asks for no work on an NPU host whoever
  sets the parameter, and the project's own calls never enter the block, so its determinism hint is
  moot: a named scope `no effect on an NPU host (NPU404): ...`. A finding that fails on NPU under
  such a parameter (a CUDA-only import, FP8 compute) keeps flagargs21's info: a caller outside the
  project may set it."""

from __future__ import annotations

import ast
import dataclasses
import re
from typing import Optional

from .flagargs21 import UNSET
from .patcher19 import PATCHER_PHRASE
from .platforms20 import REACHED_ONLY

# moot.py's phrases (PHRASES, AS_WRITTEN, NO_EFFECT): each opens the parenthesised reason
PLATFORM_ONLY = "code only another accelerator's platform class runs"
STARTUP = "a CUDA name the project's own NPU start-up remaps"
UNSET_NO_EFFECT = "a setting without effect on NPU, in a block no call of the run enters"

_REACHED = re.compile(r"\(" + re.escape(REACHED_ONLY).replace(r"\{kind\}", r"\w+") + ": ")
_LOAD_AT = re.compile(r"transfer_to_npu (?:on the NPU )?at ([^\s():]+\.py):\d+")
# a path part of the project's NPU layer: `npu/`, `ascend/`, `npu_utils.py`, `platforms/npu.py`
_NPU_PART = re.compile(r"(?i)(?:^|[/_.])(?:npu|ascend)(?:[/_.]|$)")
_TEST_PART = re.compile(r"(^|/)(tests?|testing)/|(^|/)test_[^/]*$|_test\.py$|(^|/)conftest\.py$")
_NO_EFFECT = "has no effect on NPU"
# (a graph capture: the patcher maps it to NPUGraph, documented for inference only; singles22.py
# names the inference captures, the others keep patcher19's info)
_GRAPH = "NPUGraph"
_FUNCTIONS = (ast.FunctionDef, ast.AsyncFunctionDef)
_DEPTH = 3


def _open_info(finding) -> bool:
    return not finding.fixable and finding.cell is None and finding.severity == "info"


def _rewritten(results, indices, change) -> list:
    """The results with `change(finding)` (a new message, or None) applied to the files `indices`."""
    out = list(results)
    for i in indices:
        findings, changed = [], False
        for finding in results[i].findings:
            message = change(finding) if _open_info(finding) else None
            if message is not None:
                finding = dataclasses.replace(finding, message=message)
                changed = True
            findings.append(finding)
        if changed:
            out[i] = dataclasses.replace(results[i], findings=findings)
    return out


def _platform_message(finding):
    if "(" + PLATFORM_ONLY in finding.message:
        return None
    match = _REACHED.search(finding.message)
    if match is None:
        return None
    return f"{finding.message[:match.start()]}({PLATFORM_ONLY}: {finding.message[match.start() + 1:]}"


def _annotation_ids(tree: ast.Module) -> set:
    """ids of the nodes inside annotations (no references)."""
    out: set = set()
    for node in ast.walk(tree):
        parts = []
        if isinstance(node, ast.arg) and node.annotation is not None:
            parts.append(node.annotation)
        elif isinstance(node, _FUNCTIONS) and node.returns is not None:
            parts.append(node.returns)
        elif isinstance(node, ast.AnnAssign):
            parts.append(node.annotation)
        for part in parts:
            out.update(id(n) for n in ast.walk(part))
    return out


class _Classes:
    """Classes of modules an NPU host loads whose every reference lies in platform code."""

    def __init__(self, results, text_of, reach) -> None:
        self.results, self.text_of, self.reach = results, text_of, reach
        self.trees: dict = {}
        self.memo: dict = {}
        self.hooked: Optional[set] = None

    def tree(self, j: int):
        if j not in self.trees:
            from . import astcache

            data = self.text_of(j)
            self.trees[j] = astcache.parse(data) if data else None
        return self.trees[j]

    def dead_names(self) -> set:
        """The names (and last parts of dotted strings) that platform code reads or imports."""
        out: set = set()
        for j in set(self.reach.dead) | set(self.reach.spans):
            tree = self.tree(j)
            for node in ast.walk(tree) if tree is not None else ():
                if isinstance(node, ast.Name):
                    name = node.id
                elif isinstance(node, ast.Attribute):
                    name = node.attr
                elif isinstance(node, ast.Constant) and isinstance(node.value, str) and len(node.value) < 300:
                    name = node.value.rpartition(".")[2]
                elif isinstance(node, ast.ImportFrom):
                    if self.reach.why_at(j, node.lineno) is not None:
                        out.update(a.name for a in node.names)
                    continue
                else:
                    continue
                if self.reach.why_at(j, node.lineno) is not None:
                    out.add(name)
        return out

    def _hooked_bases(self) -> set:
        """Names of the run's classes that register or list their subclasses (`__init_subclass__`, a
        metaclass, `Base.__subclasses__()`)."""
        if self.hooked is None:
            self.hooked = set()
            for j, result in enumerate(self.results):
                data = self.text_of(j) if result.relpath.endswith(".py") else None
                if not data or (b"__init_subclass__" not in data and b"metaclass" not in data
                                and b"__subclasses__" not in data):
                    continue
                tree = self.tree(j)
                for node in ast.walk(tree) if tree is not None else ():
                    if isinstance(node, ast.Attribute) and node.attr == "__subclasses__":
                        base = node.value
                        self.hooked.add(base.attr if isinstance(base, ast.Attribute) else getattr(base, "id", ""))
                    if isinstance(node, ast.ClassDef) and (any(k.arg == "metaclass" for k in node.keywords) or any(
                            isinstance(s, _FUNCTIONS) and s.name == "__init_subclass__" for s in node.body)):
                        self.hooked.add(node.name)
        return self.hooked

    def sites(self, i: int, cls: ast.ClassDef, depth: int = 0, seen: frozenset = frozenset()):
        """[("path:line", why)] of every reference of the run to class `cls` of module i, each in
        platform code (or in another class of module i so reached); None where one may run on an
        NPU host, or the class may be reached another way."""
        key = (i, cls.name)
        if key in seen:
            return []
        if key in self.memo:
            return self.memo[key]
        found = None if depth > _DEPTH else self._sites(i, cls, depth, seen | {key})
        self.memo[key] = found
        return found

    def _sites(self, i: int, cls: ast.ClassDef, depth: int, seen: frozenset):
        from .modpaths import module_names

        if cls.decorator_list or cls.keywords:
            return None  # (a registering decorator, a metaclass: reached by a registry)
        bases = {b.attr if isinstance(b, ast.Attribute) else getattr(b, "id", "") for b in cls.bases}
        if bases & self._hooked_bases():
            return None
        name, word = cls.name, cls.name.encode()
        paths = {f"{m}.{name}" for m in module_names(self.results[i].relpath)}
        found: list = []
        for j, result in enumerate(self.results):
            data = self.text_of(j) if result.relpath.endswith(".py") else None
            if not data or word not in data:
                continue
            tree = self.tree(j)
            if tree is None:
                return None
            if j != i and any(isinstance(s, ast.ClassDef) and s.name == name for s in tree.body):
                continue  # (its own by that name)
            skip = _annotation_ids(tree)
            own = range(cls.lineno, (cls.end_lineno or cls.lineno) + 1) if j == i else range(0)
            for node in ast.walk(tree):
                if id(node) in skip:
                    continue
                if isinstance(node, ast.Name) and node.id == name or isinstance(node, ast.Attribute) and node.attr == name:
                    if not isinstance(node.ctx, ast.Load):
                        return None
                elif isinstance(node, ast.ImportFrom) and any(a.name == name for a in node.names):
                    pass
                elif isinstance(node, ast.Constant) and isinstance(node.value, str) and (
                        node.value == name or node.value in paths):
                    pass
                else:
                    continue
                line = node.lineno
                if line in own:
                    continue  # (its own methods)
                why = self.reach.why_at(j, line)
                if why is not None:
                    found.append((f"{result.relpath}:{line}", why))
                    continue
                outer = next((s for s in tree.body if isinstance(s, ast.ClassDef)
                              and s.lineno <= line <= (s.end_lineno or s.lineno)), None) if j == i else None
                inner = self.sites(i, outer, depth + 1, seen) if outer is not None else None
                if not inner:
                    return None
                found.extend(inner)
        return found or None


def _class_reasons(results, text_of, reach) -> dict:
    """{file index: [(first line, last line, reason)]}: the classes of modules an NPU host loads
    whose every reference lies in platform code, with their open findings."""
    from .moot import is_moot

    out: dict = {}
    classes = _Classes(results, text_of, reach)
    named = classes.dead_names()
    for i, result in enumerate(results):
        if not result.relpath.endswith(".py") or _TEST_PART.search(result.relpath):
            continue
        lines = [f.line for f in result.findings
                 if not f.fixable and f.cell is None and not is_moot(f) and reach.why_at(i, f.line) is None]
        if not lines:
            continue
        tree = classes.tree(i)
        if tree is None or not any(isinstance(s, ast.ClassDef) and s.name in named for s in tree.body):
            continue  # (no class of the module is named from platform code: nothing reaches it that way)
        for node in tree.body:
            if not (isinstance(node, ast.ClassDef) and any(node.lineno < n <= (node.end_lineno or 0) for n in lines)):
                continue
            found = classes.sites(i, node)
            if found:
                places = sorted({site for site, _why in found})
                shown = ", ".join(places[:3]) + (f" and {len(places) - 3} more" if len(places) > 3 else "")
                out.setdefault(i, []).append((node.lineno, node.end_lineno or node.lineno, (
                    f"{PLATFORM_ONLY}: `{node.name}` is reached only from {shown}, code reached only "
                    f"through {found[0][1]}")))
    return out


def _lowered_classes(results, spans: dict) -> list:
    from .moot import is_moot

    out = list(results)
    for i, found in spans.items():
        findings, changed = [], False
        for finding in results[i].findings:
            span = next((s for s in found if s[0] < finding.line <= s[1]), None)
            if (span is not None and not finding.fixable and finding.cell is None and not is_moot(finding)
                    and all(span[0] < line <= span[1] for line, _c, _s in finding.also)):
                finding = dataclasses.replace(finding, severity="info", message=f"{finding.message} ({span[2]})")
                changed = True
            findings.append(finding)
        if changed:
            out[i] = dataclasses.replace(results[i], findings=findings)
    return out


def review_platform_code(results: list, paths: dict) -> list:
    """platforms20's pass, then its infos about code only a CUDA/ROCm/XPU platform class runs, and
    the classes only that code names: named scopes."""
    from .modpaths import RunTexts
    from .moot import to_scopes
    from .platforms20 import lowered, platform_reach

    reach = platform_reach(results, paths)
    if reach is None:
        return results
    results = lowered(results, reach)
    out = _lowered_classes(results, _class_reasons(results, RunTexts(results, paths or {}), reach))
    out = _rewritten(out, [i for i, r in enumerate(out) if any(
        _open_info(f) and _platform_message(f) is not None for f in r.findings)], _platform_message)
    indices = [i for i, r in enumerate(out)
               if any(_open_info(f) and "(" + PLATFORM_ONLY in f.message for f in r.findings)]
    if not indices:
        return out
    for i, result in zip(indices, to_scopes([out[i] for i in indices])):
        out[i] = result
    return out


def npu_layer(relpath: str) -> bool:
    """A module of the project's own NPU layer (a path part names the NPU), not a test."""
    return bool(_NPU_PART.search(relpath)) and not _TEST_PART.search(relpath)


def _startup_message(relpaths):
    def change(finding):
        head = f"({PATCHER_PHRASE}: "
        at = finding.message.find(head)
        if at >= 0 and "(" + STARTUP not in finding.message and _GRAPH not in finding.message[:at]:
            load = _LOAD_AT.search(finding.message, at)
            if load is not None and load.group(1) in relpaths and npu_layer(load.group(1)):
                return f"{finding.message[:at]}({STARTUP}: {finding.message[at + 1:]}"
            return None
        unset = finding.message.find("(" + UNSET + ": ")
        if unset > 0 and _NO_EFFECT in finding.message[:unset] and "(" + UNSET_NO_EFFECT not in finding.message:
            return f"{finding.message[:unset]}({UNSET_NO_EFFECT}: {finding.message[unset + 1:]}"
        return None
    return change


def review_startup(results: list) -> list:
    """patcher19's infos whose load is the project's own NPU start-up, and flagargs21's infos about
    a setting without effect on NPU: the messages that moot.to_scopes names as skipped scopes."""
    indices = [i for i, r in enumerate(results) if any(
        _open_info(f) and (PATCHER_PHRASE in f.message or UNSET in f.message) for f in r.findings)]
    if not indices:
        return results
    from .moot import to_scopes

    relpaths = {r.relpath for r in results}
    out = _rewritten(results, indices, _startup_message(relpaths))
    changed = [i for i in indices if out[i] is not results[i]]
    for i, result in zip(changed, to_scopes([out[i] for i in changed])):
        out[i] = result
    return out
