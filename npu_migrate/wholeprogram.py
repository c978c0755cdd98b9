"""Facts only the whole project shows: code an NPU host never reaches, found across files.

The engine sees one file at a time. Two things it cannot see there make many of its report-only
findings moot on an NPU host, although each is true of the file it is in:

* **Modules imported only on another platform.** `awq_triton.py` holds Triton kernels (NPU910),
  but every module that imports it does so under `elif _is_hip:`; bitsandbytes imports its XPU
  backend only when `torch.xpu.is_available()`. A module all of whose in-tree import sites lie in
  branches an NPU host never takes (`testscopes.untaken_branches`: the same conditions, evaluated as
  that host sees them), or in modules that are themselves never imported there, is never loaded
  on an NPU host.
* **CUDA sources an NPU build replaces.** DeepSpeed's `op_builder/transformer_inference.py`
  lists `csrc/transformer/inference/csrc/transform.cu` among the sources of `InferenceBuilder`,
  and `op_builder/npu/inference.py` defines an `InferenceBuilder` of its own, built from torch_npu
  calls: on an NPU host that `.cu` is never compiled (NPU912 becomes info).
* **Methods an NPU subclass overrides.** `class NPUGraphRunner(CudaGraphRunner)` redefines
  `_init_profile_context_and_memory_record`: the CUDA-only calls of the parent's method do not run
  on an NPU host, where the project builds the NPU class.

Nothing is dropped: the findings in such code stay in the output at `info`, with the reason and
the place that proves it (invariant 2: nothing silently missed). Only what is certain from the
files of the run counts: a module no file of the run imports is left alone (it may be a script or
a public module users import), as is one whose name also appears in a string (a dynamic import
by name), and one imported anywhere outside such a branch. A run over a few files (a pre-commit
`check` of the changed files) sees fewer importers, so it lowers less: never more.

Runs over the results of the whole run, after the per-file engine and its cache (runplan.run_engine),
like the grouping of CUDA headers; `results` is not changed, a new list is returned.
"""

from __future__ import annotations

import dataclasses
import os
import re
from collections import defaultdict
from typing import Callable, Optional

from .findings import Finding
from .model import FileResult
from .modpaths import ImportIndex, resolve_relative as _resolve_relative, result_bytes

# `import a.b.c` / `import a.b as c, d` / `from a.b import c` / `from .b import (c, d)` at the
# start of a line (indented or not); the names after `import` up to the end of the statement.
_IMPORT = re.compile(
    rb"^[ \t]*(?:from[ \t]+(?P<from>\.*[\w.]*)[ \t]+import[ \t]+(?P<names>\([^)]*\)|[^\n#;]*)"
    rb"|import[ \t]+(?P<mods>[^\n#;]+))",
    re.MULTILINE,
)
_CLASS = re.compile(rb"^[ \t]*class[ \t]+(?P<name>\w+)[ \t]*\((?P<bases>[^)]*)\)[ \t]*:", re.MULTILINE)
_NPU_CLASS = re.compile(r"npu|ascend", re.IGNORECASE)

_TYPING = "`TYPE_CHECKING`"
_MAX_ROUNDS = 8  # modules imported only by modules imported only ... (a chain is rarely longer)
# Words without which no condition of a file can be false on an NPU host (a superset of what
# testscopes.false_on_npu decides, as fast substring tests: the exact verdict comes after; a
# regex alternation over every file of a large tree costs seconds).
_DECIDABLE = (b"_available", b"has_", b"hip", b"HIP", b"rocm", b"ROCM", b"xpu", b"mps", b"version.cuda", b"is_cuda",
              b"gfx", b"hopper", b"blackwell", b"sm_", b"sm8", b"sm9", b"sm1", b"_installed", b"find_spec",
              b"MI3", b"mi3")  # (the common words first: `any` stops at the first)
_DECIDABLE_WORD = re.compile(b"|".join(re.escape(w) for w in (*_DECIDABLE, b"TYPE_CHECKING")))  # (in one condition)
# an `if`/`elif` header on one line: (indentation, condition)
_IF_LINE = re.compile(rb"^([ \t]*)(?:el)?if[ \t]+(.+?):[ \t]*(?:#[^\n]*)?$", re.MULTILINE)


def _decidable(data: bytes) -> bool:
    return any(word in data for word in _DECIDABLE)


def _names_the_npu(data: bytes) -> bool:
    """NPU, Npu, Ascend, or npu not after a letter ("input" is not one): substring tests."""
    if b"NPU" in data or b"Npu" in data or b"scend" in data or b"SCEND" in data:
        return True
    at = data.find(b"npu")
    while at != -1:
        if at == 0 or not data[at - 1:at].isalpha():
            return True
        at = data.find(b"npu", at + 3)
    return False


@dataclasses.dataclass(frozen=True)
class _Site:
    importer: str  # relpath of the importing file
    line: int


def _last_name(relpath: str) -> str:
    """The last part of the module name of a .py file (its package's name for an __init__.py)."""
    stem = os.path.basename(relpath[:-3])
    if stem == "__init__":
        stem = os.path.basename(os.path.dirname(relpath)) or stem
    return stem


def _imports(relpath: str, data: bytes) -> list[tuple[str, int, bool]]:
    """(dotted module or relpath stem, line, relative?) of every import statement of a file,
    `from a import b` giving both `a` and `a.b` (b may be a module)."""
    out = []
    line, at = 1, 0
    for match in _IMPORT.finditer(data):
        line += data.count(b"\n", at, match.start())
        at = match.start()
        if match.group("mods") is not None:
            for part in match.group("mods").decode("utf-8", "replace").split(","):
                name = part.strip().split(" as ")[0].strip()
                if re.fullmatch(r"[\w.]+", name):  # `import a.b.c` runs a/__init__ and a/b/__init__ too
                    pieces = name.split(".")
                    out.extend((".".join(pieces[:k]), line, False) for k in range(1, len(pieces) + 1))
            continue
        source = match.group("from").decode("utf-8", "replace")
        names = [n.strip().split(" as ")[0].strip()
                 for n in match.group("names").decode("utf-8", "replace").strip("()").split(",")]
        names = [n for n in names if re.fullmatch(r"\w+", n)]
        dots = len(source) - len(source.lstrip("."))
        if dots:
            base = _resolve_relative(relpath, dots, source[dots:])
            out.append((base, line, True))
            out.extend((f"{base}/{n}" if base else n, line, True) for n in names)
        else:
            pieces = source.split(".")
            out.extend((".".join(pieces[:k]), line, False) for k in range(1, len(pieces) + 1))
            out.extend((f"{source}.{n}", line, False) for n in names)
    return out


def file_facts(relpath: str, data: bytes) -> dict:
    """What the whole-program pass needs of one .py file, from its text alone: its imports
    ([name, line, relative]), its if-blocks an NPU host never enters ([first, last, condition]),
    its class names, its NPU-named classes with their bases ([name, [bases]]) and its `.cu`
    string literals with the class they are in ([literal, class]) and its module-level names bound
    to CUDA-only code ([name, what]: crossgates22.py). Computed where the file is
    migrated (in the worker) and kept in its cache entry, so a warm run reads no file for it."""
    imports = [[n, line, rel] for n, line, rel in _imports(relpath, data)] if b"import" in data else []
    blocks = [[a, b, c] for a, b, c in _false_blocks(data)] if _decidable(data) else []
    classes, npu_classes, cu = [], [], []
    if b"class" in data:
        classes = sorted({m.group(1).decode("utf-8", "replace") for m in _ANY_CLASS.finditer(data)})
        if _names_the_npu(data):
            for match in _CLASS.finditer(data):
                name = match.group("name").decode("utf-8", "replace")
                if _NPU_CLASS.search(name):
                    bases = [b.strip().rpartition(".")[2] for b in match.group("bases").decode("utf-8", "replace").split(",")]
                    npu_classes.append([name, [b for b in bases if re.fullmatch(r"\w+", b) and not _NPU_CLASS.search(b)]])
        if b".cu" in data and not _npu_path(relpath):
            starts = [(m.start(), m.group(1).decode("utf-8", "replace")) for m in _ANY_CLASS.finditer(data)]
            for literal in _CUDA_LITERAL.finditer(data):
                owner = next((name for start, name in reversed(starts) if start < literal.start()), None)
                if owner is not None:
                    cu.append([literal.group(1).decode("utf-8", "replace").lstrip("./"), owner])
    from .crossgates22 import module_bindings  # (its Triton kernels and their launchers)

    return {"imports": imports, "blocks": blocks, "classes": classes, "npu_classes": npu_classes, "cu": cu,
            "bound": module_bindings(data)}


def _false_blocks(data: bytes) -> list[tuple[int, int, str]]:
    """(first line, last line, condition) of the `if`/`elif` blocks whose one-line condition is
    false on an NPU host: found from the header lines that name such a condition, their extent by
    indentation (no parse of the file; only the conditions are)."""
    from .testscopes import false_on_npu

    found, verdicts = [], {}
    lines, line, at = None, 1, 0
    for match in _IF_LINE.finditer(data):
        condition = match.group(2)
        if not _DECIDABLE_WORD.search(condition):
            continue
        text = condition.decode("utf-8", "replace")
        if text not in verdicts:
            verdicts[text] = false_on_npu(text)
        line += data.count(b"\n", at, match.start())
        at = match.start()
        if not verdicts[text]:
            continue
        if lines is None:
            lines = data.splitlines()
        indent, last = len(match.group(1)), line
        for k in range(line, len(lines)):  # (lines[line] is the line after the header)
            body = lines[k]
            stripped = body.strip()
            if not stripped or stripped.startswith(b"#"):
                continue
            if len(body) - len(body.lstrip(b" \t")) <= indent:
                break
            last = k + 1
        if last > line:
            found.append((line + 1, last, text))
    return found


def _lowerable(finding: Finding) -> bool:
    from .moot import is_moot

    return not finding.fixable and finding.cell is None and not is_moot(finding)


def _lower(result: FileResult, why: Callable[[Finding], Optional[str]]) -> FileResult:
    changed, findings = False, []
    for finding in result.findings:
        reason = why(finding) if _lowerable(finding) else None
        if reason:
            finding = dataclasses.replace(finding, severity="info", message=f"{finding.message} ({reason})")
            changed = True
        findings.append(finding)
    return dataclasses.replace(result, findings=findings) if changed else result


def review(results: list[FileResult], paths: Optional[dict[str, str]] = None) -> list[FileResult]:
    """Lower to info the report-only findings of modules an NPU host never imports, and of
    methods an NPU subclass overrides (see the module docstring)."""
    paths = paths or {}
    python = [i for i, r in enumerate(results) if r.relpath.endswith(".py")]
    targets = [i for i in python if any(_lowerable(f) for f in results[i].findings)]
    if not targets and not any(f.code == "NPU912" for r in results for f in r.findings):
        return results
    texts = {i: result_bytes(results[i], paths) for i in python}
    out = list(results)
    facts: dict[int, dict] = {}

    def facts_of(i: int) -> dict:
        if i not in facts:
            facts[i] = results[i].facts if results[i].facts is not None else file_facts(results[i].relpath, texts.get(i) or b"")
        return facts[i]

    from .dispatch import gates, lower_within

    dispatch = gates(results, python, texts, facts_of) if targets else {}
    from .keptimports import spans as kept_gate_spans  # (imports behind a device check kept meaning CUDA)

    extra = {i: [*dispatch.get(i, ()), *kept] for i, kept in kept_gate_spans(results, python, texts).items()}
    from .capflows29 import spans as capability_spans  # (lazy imports behind a capability test: capflows29.py)

    for i, found in capability_spans(results, python, texts).items():
        extra[i] = [*extra.get(i, dispatch.get(i, ())), *found]
    never_entered = {**dispatch, **extra}
    unreachable = _never_imported(results, python, targets, texts, facts_of, never_entered)
    from . import importgates  # (flags bound to the project's CUDA predicate, platform importers, tests)

    unreachable.update(importgates.unreachable(results, python, targets, texts, facts_of, never_entered, unreachable))
    for i, spans in dispatch.items():  # (the branches' own findings)
        if i not in unreachable:
            out[i] = lower_within(out[i], spans, _lower)
    for i, why in unreachable.items():
        out[i] = _lower(out[i], lambda _f, why=why: why)
    from .gatedcalls import predicate_branches, public_helpers  # (the project's own CUDA predicates)

    found_spans = predicate_branches(results, python, targets, texts, unreachable)
    for i, spans in public_helpers(results, python, targets, texts, unreachable).items():
        found_spans.setdefault(i, []).extend(spans)
    for i, spans in found_spans.items():
        def inside(finding: Finding, spans=spans) -> Optional[str]:
            lines = [finding.line, *(line for line, _column, _source in finding.also)]
            found = [next((sp for sp in spans if sp[0] <= n <= sp[1]), None) for n in lines]
            return None if any(sp is None for sp in found) else found[0][2]
        out[i] = _lower(out[i], inside)
    for i, why in _sources_built_for_npu(results, python, facts_of).items():
        out[i] = _lower(out[i], lambda f, why=why: why if f.code == "NPU912" else None)
    overridden = _overridden_methods(results, python, [i for i in targets if i not in unreachable], texts, facts_of)
    for i, spans in overridden.items():
        def why(finding: Finding, spans=spans) -> Optional[str]:
            # every place of a merged finding must lie in an overridden method (one finding may
            # stand for the same private API in two of them), or it stays
            lines = [finding.line, *(line for line, _column, _source in finding.also)]
            found = [next((sp for sp in spans if sp[0] <= n <= sp[1]), None) for n in lines]
            if any(sp is None for sp in found):
                return None
            named = list(dict.fromkeys(sp[2] for sp in found))
            return named[0] if len(named) == 1 else f"{named[0]}; and {'; '.join(named[1:])}"
        out[i] = _lower(out[i], why)
    from . import optin  # (lazy CUDA-only imports of opt-in backends the project answers itself)

    for i in targets:
        if any(optin.candidates(f) for f in out[i].findings):
            text = (texts.get(i) or b"").decode("utf-8", "replace")
            findings = optin.review(out[i].findings, text, optin.names_elsewhere(texts, i))
            if findings != out[i].findings:
                out[i] = dataclasses.replace(out[i], findings=findings)
        if any(optin.kernel_candidates(f) for f in out[i].findings):  # (kernels behind a raising device check)
            out[i] = optin.review_kernels(out[i], texts.get(i) or b"", texts, i)
    from .secondary import review_backend_params_across  # (a backend parameter its callers elsewhere pass)

    return review_backend_params_across(out, python, texts)


# ------------------------------------------------------------------ modules never imported on NPU

def _never_imported(results, python, targets, texts, facts_of, extra=None) -> dict[int, str]:
    # extra: {file: [(first, last, why)]}, more spans an NPU host never enters (dispatch.gates)
    extra = extra or {}
    index = ImportIndex(results, python)
    imports_of: dict[int, list[tuple[int, int]]] = {}  # importer -> [(imported file, line)]

    def imports(i: int) -> list[tuple[int, int]]:
        """The files of the run that file i imports, with the line of each import."""
        if i not in imports_of:
            imports_of[i] = index.files(facts_of(i)["imports"], i)
        return imports_of[i]

    sites_of: dict[int, list[tuple[int, int]]] = {}  # imported file -> [(importer, line)]

    def sites(j: int) -> list[tuple[int, int]]:
        """Every import site of file j in the run (the index of all imports is built on the
        first call: only runs with a candidate pay for it)."""
        if not sites_of:
            for i in python:
                for k, line in imports(i):
                    sites_of.setdefault(k, []).append((i, line))
            sites_of.setdefault(-1, [])  # (built)
        return sites_of.get(j, [])

    def blocks(i: int) -> list:
        return facts_of(i)["blocks"]

    def gated(importer: int, line: int) -> Optional[str]:
        """The condition of an enclosing `if`/`elif` that is false on an NPU host, or None."""
        for first, last, condition in blocks(importer):
            if first <= line <= last:
                return f"`{' '.join(condition.split())[:70]}`"
        for first, last, why in extra.get(importer, ()):
            if first <= line <= last:
                return why
        return None

    strings: dict[int, bool] = {}

    def named_in_a_string(i: int) -> bool:
        if i not in strings:
            word = _last_name(results[i].relpath).encode()
            quoted = re.compile(rb"[\"'][\w./:-]*\b" + re.escape(word) + rb"\b[\w./:-]*[\"']")
            strings[i] = any(word in data and _names_module(quoted, word, data, results[i].relpath)
                             for j, data in texts.items() if j != i and data)
        return strings[i]

    # Start from the import sites an NPU host never reaches: indented imports under an if/elif
    # whose condition is false there, in the files that name such a condition at all.
    candidates: set[int] = set()
    for i in python:
        # (not from `if TYPE_CHECKING:` alone: such a module is imported at run time elsewhere)
        if not extra.get(i) and not any(condition != "TYPE_CHECKING" for _f, _l, condition in blocks(i)):
            continue
        for j, line in imports(i):
            if j not in candidates and gated(i, line) not in (None, _TYPING):
                candidates.add(j)
    found: dict[int, str] = {}
    for _round in range(_MAX_ROUNDS):
        grew = False
        for i in sorted(candidates - set(found)):
            where = sites(i)
            if not where:
                continue
            reasons = []
            for importer, line in where:
                condition = gated(importer, line)
                if condition is None and importer in found:
                    condition = "a module an NPU host never imports"
                if condition is None:
                    break
                reasons.append(f"{results[importer].relpath}:{line} under {condition}")
            else:
                if named_in_a_string(i):
                    continue
                shown = "; ".join(reasons[:2]) + (f"; and {len(reasons) - 2} more" if len(reasons) > 2 else "")
                found[i] = f"imported only where an NPU host does not go: {shown}"
                grew = True
                # what only it imports may be unreachable too (bitsandbytes' Triton kernels,
                # imported only by its XPU backend)
                candidates.update(j for j, _line in imports(i))
        if not grew:
            break
    return {i: why for i, why in found.items() if i in set(targets)}


_BY_NAME = (b"import_module(", b"__import__(", b"load_source(", b"spec_from_")  # (not find_spec: it loads nothing)


def _names_module(quoted: re.Pattern, word: bytes, data: bytes, relpath: str = "") -> bool:
    """A string of `data` may name the module (a dynamic import by name): one that holds a path or
    a dotted name with the word (`"pkg.nsa.triton_kernel"`), or the bare word (`"triton_kernel"`)
    in a file that imports by name at all. A bare word elsewhere is a value (sglang's MoE runner
    backend `"triton_kernel"`), not a module's name."""
    from .capflows29 import names_other_module  # (`"pkg.kimi.nvidia.ops.x"` is not minimax's `nvidia/ops`)

    from .namesakes30 import names_no_module  # (`"-rms_norm"`, a bare word only literals could load)

    bare = b'"' + word + b'"', b"'" + word + b"'"
    for match in quoted.finditer(data):
        if relpath and names_other_module(match.group(0), relpath):
            continue
        if names_no_module(match.group(0), word, data):
            continue
        if match.group(0) not in bare or any(call in data for call in _BY_NAME):
            return True
    return False


# ------------------------------------------------------------------ methods an NPU subclass overrides

def _overridden_methods(results, python, targets, texts, facts_of) -> dict[int, list[tuple[int, int, str]]]:
    import ast

    from . import astcache

    # NPU classes of the run and their bases (by name): class NPUGraphRunner(CudaGraphRunner)
    npu_classes: dict[str, list[tuple[int, str]]] = defaultdict(list)  # base name -> [(file, class)]
    for i in python:
        for name, bases in facts_of(i)["npu_classes"]:
            for base in bases:
                npu_classes[base].append((i, name))
    if not npu_classes:
        return {}
    methods_of: dict[tuple[int, str], Optional[dict[str, int]]] = {}

    def methods(i: int, class_name: str) -> dict[str, int]:
        """The methods `class_name` of file i redefines without calling the parent's
        (`super().name(...)` or `Base.name(self, ...)` runs the parent's code on NPU too)."""
        key = (i, class_name)
        if key not in methods_of:
            tree = astcache.parse(texts.get(i) or b"")
            found: dict[str, int] = {}
            for node in _class_defs(tree):
                if node.name == class_name:
                    for stmt in node.body:
                        if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)) and not _calls_parent(stmt):
                            found[stmt.name] = stmt.lineno
            methods_of[key] = found
        return methods_of[key] or {}

    out: dict[int, list[tuple[int, int, str]]] = {}
    for i in targets:
        data = texts.get(i)
        if not data or npu_classes.keys().isdisjoint(facts_of(i)["classes"]):
            continue
        tree = astcache.parse(data)
        if tree is None:
            continue
        spans = []
        for node in _class_defs(tree):
            if node.name not in npu_classes:
                continue
            for stmt in node.body:
                # (dunder methods count too, `__call__` of a piecewise CUDA-graph backend (round 17
                # AV#30), but not the constructors: an NPU class's own `__init__` still builds the
                # parent's state by other means often enough)
                if not isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)) or stmt.name in _CONSTRUCTORS:
                    continue
                for j, subclass in npu_classes[node.name]:
                    if stmt.name in methods(j, subclass):
                        first = stmt.decorator_list[0].lineno if stmt.decorator_list else stmt.lineno
                        spans.append((first, stmt.end_lineno or stmt.lineno,
                                      f"overridden for NPU by `{subclass}.{stmt.name}` in "
                                      f"{results[j].relpath}:{methods(j, subclass)[stmt.name]}"))
                        break
        if spans:
            out[i] = spans
    return out


_CONSTRUCTORS = frozenset({"__init__", "__new__", "__post_init__", "__init_subclass__", "__class_getitem__"})


def _calls_parent(method) -> bool:
    """The method calls the method of the same name on `super()` or on a class (`Base.name(self)`)."""
    import ast

    for node in ast.walk(method):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == method.name:
            receiver = node.func.value
            if isinstance(receiver, ast.Call) and isinstance(receiver.func, ast.Name) and receiver.func.id == "super":
                return True
            if isinstance(receiver, ast.Name) and receiver.id[:1].isupper():
                return True
    return False


# ------------------------------------------------------------------ CUDA sources an NPU builder replaces

_CUDA_SOURCE = re.compile(r"[\w./-]+\.cuh?$", re.IGNORECASE)


def _npu_path(relpath: str) -> bool:
    lowered = relpath.lower()
    return ("npu" in lowered or "ascend" in lowered) and any(_NPU_CLASS.search(part) for part in relpath.split("/"))


_CUDA_LITERAL = re.compile(rb"""["']([\w./-]+\.cuh?)["']""", re.IGNORECASE)
_ANY_CLASS = re.compile(rb"^[ \t]*class[ \t]+(\w+)", re.MULTILINE)


def _sources_built_for_npu(results, python, facts_of) -> dict[int, str]:
    """NPU912 files that a build class lists as its sources, where the project defines a class of
    the same name for NPU (in a folder or module named for the NPU): {index: reason}. Text only:
    a `.cu` string literal belongs to the last `class` line above it."""
    cuda = {i: r.relpath for i, r in enumerate(results)
            if any(f.code == "NPU912" and _lowerable(f) for f in r.findings)}
    if not cuda:
        return {}
    listed: dict[str, list[tuple[str, int]]] = defaultdict(list)  # source literal -> [(class, file)]
    npu_builders: dict[str, int] = {}  # class name -> file, for classes of NPU modules
    for i in python:
        if _npu_path(results[i].relpath):
            for name in facts_of(i)["classes"]:
                npu_builders.setdefault(name, i)
    if not npu_builders:
        return {}
    for i in python:
        for literal, owner in facts_of(i)["cu"]:
            listed[literal].append((owner, i))
    if not listed or not npu_builders:
        return {}
    out = {}
    for i, relpath in cuda.items():
        for literal, owners in listed.items():
            if not (relpath == literal or relpath.endswith("/" + literal) or literal.endswith("/" + relpath)):
                continue
            owner = next(((name, j) for name, j in owners if name in npu_builders), None)
            if owner is not None:
                name, j = owner
                out[i] = (f"the project builds `{name}` for NPU without it: `{name}` in "
                          f"{results[npu_builders[name]].relpath}, where {results[j].relpath} lists this file")
                break
    return out



def _class_defs(tree):
    """The class statements of a module, nested ones included, without walking expressions."""
    import ast

    stack = [tree] if tree is not None else []
    while stack:
        node = stack.pop()
        if isinstance(node, ast.ClassDef):
            yield node
        for field in ("body", "orelse", "finalbody", "handlers"):
            block = getattr(node, field, None)
            if isinstance(block, list):
                stack.extend(child for child in block if isinstance(child, (ast.stmt, ast.excepthandler)))
