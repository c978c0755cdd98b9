"""Code reached only through a project's CUDA or ROCm (or XPU, ...) platform class (issue #16, round 20).

Projects that run on several accelerators (vLLM, SGLang's multimodal runtime, ...) pick one
platform class per host at run time from a registry, and NPU support comes as a plugin that
registers its own platform class (vllm-ascend). Round-20 audits (BC#7, AZ#1, BD#21) found
findings in code that only the CUDA platform class reaches: its module, and the modules its
methods name by string path (`get_punica_wrapper()` returning
"pkg.lora.punica_wrapper.punica_gpu.PunicaWrapperGPU"). On an NPU host that class is never the
current platform, so that code does not run there; a porter writes the NPU platform plugin
instead, and may want to read it, so the findings stay, lowered to info naming the class and the
registry line (not a named scope; since round 23, BM#8, platformlayer23.py names that info as a
skipped scope right after this pass).

* **The registry, by structure.** A function returns a dotted path naming a class of the run
  (`"pkg.platforms.cuda.CudaPlatform"`, or `X if is_cuda else None`) under a test that is a device
  probe: the return's own `if`/conditional tests, or, where those only read a local flag, the
  probes of the whole function (NVML's `nvmlInit`/`nvmlDeviceGetCount`, `amdsmi`,
  `torch.version.hip`, `torch.version.cuda`, `torch.cuda.is_available()`; likewise
  `torch.xpu.is_available()`, MPS and MUSA probes, accelerators an NPU host is not either). The
  probe tests one of them only and never names the NPU (`torch.npu`, `is_npu_available`,
  Ascend): strings such as log messages are not read. A `torch.cuda` probe in a function the
  migration rewrote is not taken (`torch.cuda.is_available()` may ask for the NPU in the copy). It is a registry when the function returns two or more class paths (an
  `if` chain of probes), or when it is one of two or more such functions listed in one
  module-level dict, list or tuple (vLLM's `builtin_platform_plugins`). An unconditional return
  (the CPU fallback) is no CUDA class.
* **What is never run.** The class body of each such class (its methods, the lazy imports and
  string paths in them), and its whole module when no library module outside this closure imports
  or names it. A module is reached only through such code when every library site that imports
  it or names it in a string (tests aside; at least one site) lies in that code, in a module
  already found never loaded, or in an `if TYPE_CHECKING:` block, a few rounds deep (a package's
  `__init__.py` counts every import of a module below it as a site); a module also imported or named
  from code that runs on an NPU host keeps its findings (vLLM's `cuda_graph.py`, imported by the
  model runner).
* **The change.** The error and warning findings (not fixable, not already info) of that code
  become info with a clause that names the platform class, its module, the registry line and,
  for a module reached from it, the site that reaches it. Whole-run; called last from
  runplan.whole_run_passes, after the folds, so that a finding folded elsewhere keeps its place.
"""

from __future__ import annotations

import ast
import dataclasses
import re
from typing import Optional

from . import astcache

_TEST_FILE = re.compile(r"(^|/)(tests?/|test_[^/]*\.py$|[^/]*_test\.py$|conftest\.py$)")
_CLASS_PATH = re.compile(r"^[A-Za-z_]\w*(?:\.\w+)+\.[A-Z]\w*$")
_PROBE_CUDA = re.compile(r"nvml|torch\.cuda\.is_available|torch\.version\.cuda\b")
# the probes the migration may rewrite to ask for the NPU (`torch.cuda.is_available()`)
_REWRITABLE = re.compile(r"torch\.cuda\.")
_PROBE_ROCM = re.compile(r"amdsmi|rocm_smi|torch\.version\.hip\b|\bis_hip\b")
# other accelerators an NPU host is not either: their platform classes are never current there
_PROBES = (("ROCm", _PROBE_ROCM), ("CUDA", _PROBE_CUDA),
           ("XPU", re.compile(r"torch\.xpu\.is_available|is_xccl_available")),
           ("MPS", re.compile(r"backends\.mps\.is_available")),
           ("MUSA", re.compile(r"torch\.musa\.is_available|pymtml")))
_PROBE_NPU = re.compile(r"(?i)(?<![a-z])npu|ascend|\bcann\b")
_FUNCTIONS = (ast.FunctionDef, ast.AsyncFunctionDef)
_ROUNDS = 6
REACHED_ONLY = "reached only through the {kind} platform class"
_COMPARED = "compared, not selected"
_THROUGH = "; this module is loaded or named only from there, first at "


@dataclasses.dataclass(frozen=True)
class PlatformClass:
    """A class the registry selects only after a probe of another accelerator (CUDA, ROCm, XPU, ...)."""
    module: int          # result index of its module
    name: str
    start: int
    end: int
    kind: str            # "CUDA", "ROCm", "XPU", ...
    registry: str        # "relpath:line" of the return that names it

    def why(self, relpath: str) -> str:
        return (f"`{self.name}` ({relpath}), the {self.kind} platform class that the platform "
                f"registry at {self.registry} selects only after a {self.kind} device probe")


def _code_words(node: ast.AST) -> str:
    """The names a piece of code reads (imports, dotted attributes, names), strings left out."""
    words = []
    for sub in ast.walk(node):
        if isinstance(sub, ast.Import):
            words.extend(a.name for a in sub.names)
        elif isinstance(sub, ast.ImportFrom) and sub.module:
            words.append(sub.module)
        elif isinstance(sub, (ast.Attribute, ast.Name)):
            name = astcache.dotted(sub)
            if name:
                words.append(name)
    return " ".join(words)


def _kind(words: str, rewritten: bool = False) -> Optional[str]:
    """The accelerator a probe tests ("CUDA", "ROCm", "XPU", ...): one only (ROCm's tests often
    read `torch.cuda` too), never one that names the NPU. `rewritten`: the migration rewrote code
    of the function, so a `torch.cuda` probe may ask for the NPU in the migrated copy: not taken."""
    if _PROBE_NPU.search(words):
        return None
    if rewritten:
        words = " ".join(w for w in words.split() if not _REWRITABLE.match(w))
    found = [kind for kind, probe in _PROBES if probe.search(words)]
    if found[:2] == ["ROCm", "CUDA"]:
        found = found[:1] + found[2:]
    return found[0] if len(found) == 1 else None


def _own_nodes(function: ast.AST):
    """The nodes of a function, nested functions and classes left out."""
    stack = list(ast.iter_child_nodes(function))
    while stack:
        node = stack.pop()
        yield node
        if not isinstance(node, (*_FUNCTIONS, ast.Lambda, ast.ClassDef)):
            stack.extend(ast.iter_child_nodes(node))


def _returned_paths(function: ast.AST, parent: dict):
    """[(dotted class path, line, [positive tests])] of the function's returns."""
    out = []
    for node in _own_nodes(function):
        if not isinstance(node, ast.Return) or node.value is None:
            continue
        values = [(node.value, [])]
        if isinstance(node.value, ast.IfExp):
            values = [(node.value.body, [node.value.test]), (node.value.orelse, [])]
        for value, tests in values:
            if not (isinstance(value, ast.Constant) and isinstance(value.value, str)
                    and _CLASS_PATH.match(value.value)):
                continue
            tests = list(tests)
            child, current = node, parent.get(id(node))
            while current is not None and current is not function:
                if isinstance(current, ast.If) and any(child is s for s in current.body):
                    tests.append(current.test)
                child, current = current, parent.get(id(current))
            out.append((value.value, value.lineno, tests))
    return out


def find_registries(results, modules, candidates) -> list[tuple[str, str, str]]:
    """[(class path, kind, "relpath:line")] of the registry returns selected after such a probe."""
    found = []
    for i in candidates:
        tree = modules.tree(i)
        if tree is None:
            continue
        parent = astcache.parents(tree)
        returning: dict[str, list] = {}
        functions = [n for n in astcache.walk(tree) if isinstance(n, _FUNCTIONS)]
        for function in functions:
            paths = _returned_paths(function, parent)
            if paths:
                returning.setdefault(function.name, []).append((function, paths))
        listed = set()
        for node in tree.body:
            value = node.value if isinstance(node, (ast.Assign, ast.AnnAssign)) else None
            elements = (value.values if isinstance(value, ast.Dict) else value.elts
                        if isinstance(value, (ast.List, ast.Tuple, ast.Set)) else [])
            names = {e.id for e in elements if isinstance(e, ast.Name) and e.id in returning}
            if len(names) >= 2:
                listed |= names
        fixed = {line for f in results[i].findings if f.fixable for line in (f.line, *(a[0] for a in f.also))}
        for name, entries in returning.items():
            for function, paths in entries:
                rewritten = any(function.lineno <= line <= (function.end_lineno or 0) for line in fixed)
                if len({p for p, _l, _t in paths}) < 2 and name not in listed:
                    continue
                for path, line, tests in paths:
                    if not tests:
                        continue
                    words = " ".join(_code_words(t) for t in tests)
                    kind = _kind(words, rewritten)
                    if kind is None and not _PROBE_NPU.search(words) and not any(p.search(words) for _k, p in _PROBES):
                        kind = _kind(_code_words(function), rewritten)  # (a local flag the probes set)
                    if kind is not None:
                        found.append((path, kind, f"{results[i].relpath}:{line}"))
    return found


def _class_spans(tree: ast.Module, name: str) -> list[tuple[int, int]]:
    """The line spans of the class a registry names: its `class` statement, or the classes a
    module-level alias picks among (`CudaPlatform = NvmlCudaPlatform if nvml else NonNvmlCudaPlatform`).
    Their base class is not taken: the module's other importers may use it; its methods are
    covered when the whole module is found never loaded."""
    classes = {n.name: n for n in tree.body if isinstance(n, ast.ClassDef)}
    chosen = [classes[name]] if name in classes else []
    if not chosen:
        for node in tree.body:
            if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == name for t in node.targets):
                value = node.value
                options = [value.body, value.orelse] if isinstance(value, ast.IfExp) else [value]
                if all(isinstance(o, ast.Name) and o.id in classes for o in options):
                    chosen = [classes[o.id] for o in options]
    return [(c.lineno, c.end_lineno or c.lineno) for c in chosen]


def _type_checking(tree: ast.Module, line: int) -> bool:
    """Whether `line` lies in the body of a module-level `if TYPE_CHECKING:`."""
    for node in tree.body:
        if isinstance(node, ast.If) and (astcache.dotted(node.test) or "").endswith("TYPE_CHECKING"):
            if node.body and node.body[0].lineno <= line <= (node.body[-1].end_lineno or line):
                return True
    return False


class _Reach:
    """Dead code found so far: class spans and modules, each with why."""

    def __init__(self, results, modules, text_of, python) -> None:
        self.results, self.modules, self.text_of, self.python = results, modules, text_of, python
        self.spans: dict[int, list[tuple[int, int, str]]] = {}
        self.dead: dict[int, str] = {}
        self.registry_lines: dict[str, set[int]] = {}

    def why_at(self, j: int, line: int) -> Optional[str]:
        if j in self.dead:
            return self.dead[j]
        for start, end, why in self.spans.get(j, ()):
            if start <= line <= end:
                return why
        return None


def _string_sites(results, text_of, library, name: str) -> list[tuple[int, int]]:
    quoted = re.compile(rb"[\"']" + re.escape(name.encode()) + rb"(?:\.\w+)?[\"']")
    out = []
    key = name.encode()
    for j in library:
        data = text_of(j)
        if not data or key not in data:
            continue
        for match in quoted.finditer(data):
            out.append((j, data.count(b"\n", 0, match.start()) + 1))
    return out


def review(results: list, paths: Optional[dict[str, str]] = None) -> list:
    """Findings in code reached only through a CUDA/ROCm/XPU platform class: info, naming it."""
    reach = platform_reach(results, paths)
    return results if reach is None else _lowered(results, reach)


def platform_reach(results: list, paths: Optional[dict[str, str]] = None) -> Optional[_Reach]:
    """The code reached only through a CUDA/ROCm/XPU platform class (`why_at(file index, line)`:
    why, or None), or None where the run has no such class. Public for platformlayer23.py."""
    from .modpaths import ImportIndex, RunModules, RunTexts, module_names
    from .platformgates28 import UntakenSites, compared_only
    from .platforms21 import EnumEntries
    from .shipped26 import unshipped
    from .tritonguards import run_imports

    python = [i for i, r in enumerate(results) if r.relpath.endswith(".py")]
    if not python:
        return None
    paths = paths or {}
    text_of = RunTexts(results, paths)
    probes = (b"nvml", b"amdsmi", b"torch.version.hip", b"torch.version.cuda", b"cuda.is_available", b"rocm_smi")
    candidates = [i for i in python if not _TEST_FILE.search(results[i].relpath)
                  and (lambda data: bool(data) and any(p in data for p in probes))(text_of(i))]
    if not candidates:
        return None
    modules = RunModules(results, text_of)
    registries = find_registries(results, modules, candidates)
    if not registries:
        return None
    reach = _Reach(results, modules, text_of, python)
    seeds: dict[int, list] = {}
    registry_sites: set[tuple[str, int]] = set()
    for path, kind, where in registries:
        module, _dot, name = path.rpartition(".")
        i = modules.by_name.get(module)
        tree = modules.tree(i) if i is not None else None
        spans = _class_spans(tree, name) if tree is not None else []
        if not spans or _TEST_FILE.search(results[i].relpath):
            continue
        platform = PlatformClass(i, name, spans[0][0], spans[0][1], kind, where)
        seeds.setdefault(i, []).append(platform)
        reach.spans.setdefault(i, []).extend((start, end, platform.why(results[i].relpath)) for start, end in spans)
        relpath, _c, line = where.rpartition(":")
        registry_sites.add((relpath, int(line)))
    if not seeds:
        return None
    imports, _text = run_imports(results, python, paths)
    index = ImportIndex(results, python)
    # (a top-level benchmarks/examples/scripts/tools file is no site either: shipped26.py)
    library = [j for j in python if not _TEST_FILE.search(results[j].relpath) and not unshipped(results[j].relpath)]
    entries = EnumEntries(results, modules, text_of, library)  # (platforms21.py: backend enums)
    untaken = UntakenSites(results, text_of)

    def loads_nothing(s: int, ln: int, enum: str, member: str) -> Optional[str]:
        # (a member's reference an NPU host never runs, or one that only compares the member:
        # platformgates28.py; another reference must lie in the platform code)
        return untaken.at(s, ln) or (_COMPARED if compared_only(modules.tree(s), ln, enum, member) else None)

    importers: dict[int, list[tuple[int, int]]] = {}
    for j in library:
        for target, line in index.files(imports[j], j):
            importers.setdefault(target, []).append((j, line))

    def referenced_from_dead() -> set[int]:
        out = set(seeds)
        for j in list(reach.dead) + list(reach.spans):
            out |= entries.named_from(j, reach.why_at)
            for target, line in index.files(imports[j], j):
                if reach.why_at(j, line) is not None:
                    out.add(target)
            data = text_of(j) or b""
            for match in re.finditer(rb"[\"']([A-Za-z_]\w*(?:\.\w+)+)[\"']", data):
                line = data.count(b"\n", 0, match.start()) + 1
                if reach.why_at(j, line) is None:
                    continue
                dotted = match.group(1).decode()
                for name in (dotted, dotted.rpartition(".")[0]):
                    if name in modules.by_name:
                        out.add(modules.by_name[name])
        return out

    for _round in range(_ROUNDS):
        grown = False
        for x in sorted(referenced_from_dead()):
            relpath = results[x].relpath
            if x in reach.dead or _TEST_FILE.search(relpath):
                continue
            names = module_names(relpath)
            # (for a package's __init__.py, its own modules' imports run after it: not sites)
            inside = relpath[: -len("__init__.py")] if relpath.endswith("/__init__.py") else None
            sites = [s for s in importers.get(x, []) if s[0] != x
                     and not (inside and results[s[0]].relpath.startswith(inside))]
            sites += [s for s in _string_sites(results, text_of, library, names[0]) if s[0] != x]
            if not sites:
                continue
            whys = []
            for j, line in sites:
                if (results[j].relpath, line) in registry_sites:
                    whys.append(None)
                    continue
                why = reach.why_at(j, line)
                member = entries.dead_site(j, line, reach.why_at, loads_nothing) if why is None else None
                if member is not None:
                    if not member[0]:
                        break
                    whys.append(member[1])
                    continue
                if why is None:
                    tree = modules.tree(j)
                    if tree is not None and _type_checking(tree, line):
                        continue
                    if untaken.at(j, line) is not None:
                        whys.append(None)  # (a site under a test false on an NPU host: platformgates28.py)
                        continue
                    break
                whys.append((why, f"{results[j].relpath}:{line}"))
            else:
                reached = [w for w in whys if w is not None]
                if x in seeds and not reached:
                    platform = seeds[x][0]
                    reach.dead[x] = platform.why(relpath)
                elif reached:
                    why, site = reached[0]
                    root = why.split(_THROUGH)[0]
                    reach.dead[x] = f"{root}{_THROUGH}{site}"
                else:
                    continue
                grown = True
        if not grown:
            break
    return reach


def _lowered(results, reach: _Reach) -> list:
    out = list(results)
    for i in set(reach.dead) | set(reach.spans):
        findings, changed = [], False
        for finding in results[i].findings:
            why = reach.why_at(i, finding.line)
            if (why is not None and not finding.fixable and finding.cell is None
                    and finding.severity != "info"):
                kind = re.search(r"the (\w+) platform class", why).group(1)
                finding = dataclasses.replace(
                    finding, severity="info",
                    message=f"{finding.message} ({REACHED_ONLY.format(kind=kind)}: {why}; an NPU host "
                            "selects its own platform class (the project's or a plugin's) in its place, so "
                            "this code does not run there: port it only into that class)")
                changed = True
            findings.append(finding)
        if changed:
            out[i] = dataclasses.replace(results[i], findings=findings)
    return out


# (public for platformlayer23.py: the findings of `platform_reach`'s code lowered to info)
lowered = _lowered
