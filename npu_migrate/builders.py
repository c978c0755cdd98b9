"""CUDA op builders and extension classes that a project's own NPU route keeps off an NPU host.

Three shapes the precision audits (issue #16) read as false or redundant, each proven from the
project's code, not from its name:

(a) An accelerator-selected builder folder. A folder of op builders (`op_builder/`) with a
    sub-folder named for the NPU (`op_builder/npu/`) whose builder classes derive from an NPU base
    class of that folder (`NPUOpBuilder`), and an NPU-named module outside it (the project's NPU
    accelerator) that names that sub-folder as a module (`"deepspeed.ops.op_builder.npu"`): on an
    NPU host the accelerator resolves every builder from the NPU folder, by class name, and returns
    its not-implemented builder (or nothing) for a name the folder lacks. So the CUDA builder
    classes of the parent folder (the subclasses of its CUDA base, `CUDAOpBuilder`) never run there,
    twin or not (a builder with no NPU twin is a feature the project leaves out on NPU). The
    findings in their methods become named scopes (moot.PHRASES), and so does the NPU912 finding of
    each `.cu`/`.cuh` file that only such builders list (a header: in the folder of, or below, a
    `.cu` file they list), with one exception: the sources of a builder without an NPU twin (an op
    missing on an NPU host by the project's choice) keep one info finding per op, on its first
    `.cu` file, naming the others. A CUDA builder that a module outside the folder imports directly, or that
    an NPU builder derives from, keeps its findings, as does a source another file lists.
(b) Extension class families. A CUDA extension class whose `is_available()` returns
    `torch.cuda.is_available()` (kept as written: False on an NPU host), in a project whose kernel
    loader module also names an NPU extension class of the same family (a common base class): the
    loader picks the extension whose `is_available()` holds, so the CUDA extension's other methods
    (CUDA_HOME, nvcc) never run on an NPU host. Their findings become named scopes.
(c) A `.cu` file without a kernel: no `__global__`/`__device__` function, no `<<<` launch, no
    CUDA runtime or library call and no quoted include that may bring kernels in (a `.cuh` header,
    a header defining a kernel or using CUTLASS, a header not found): `nvcc_info.cu`, returning the
    `__CUDACC_VER_*__` macros for build information. Nothing in it runs on the GPU; its NPU912
    error becomes info, with the reason (a host-side dispatcher of templated kernels stays).

Whole-program, text only (no file is parsed unless a shape's folder or class is present): called
once, from runplan.py, after disabled.review_builders.
"""

from __future__ import annotations

import ast
import functools
import posixpath
import re
from dataclasses import replace

from . import astcache
from .findings import Finding

# moot.PHRASES carries these (a finding whose message has one becomes a named skipped scope)
BUILDER_PHRASE = "in a CUDA op builder the project does not build for NPU"
SOURCE_PHRASE = "built only by CUDA op builders the project's NPU accelerator does not use"
EXTENSION_PHRASE = "in a CUDA extension class an NPU host does not select"
NO_KERNEL = "no kernel in the file"

_NPU_WORD = re.compile(r"NPU|Npu|(?<![A-Za-z])npu|Ascend|(?<![A-Za-z])ascend")  # (not `Input`)
_CLASS_LINE = re.compile(rb"^[ \t]*class[ \t]+(\w+)[ \t]*(?:\(([^)]*)\))?[ \t]*:", re.MULTILINE)
_CUDA_LITERAL = re.compile(rb"""["']([\w./-]+\.cuh?)["']""", re.IGNORECASE)
_SOURCE = re.compile(r"[\w./-]+\.cuh?", re.IGNORECASE)
_NOT_IMPLEMENTED = re.compile(r"NotImplemented|NoImpl", re.IGNORECASE)


def _lowerable(finding: Finding) -> bool:
    from .moot import is_moot

    return not finding.fixable and finding.cell is None and not is_moot(finding)


def _bases(text: str) -> list[str]:
    return [b.strip().rpartition(".")[2] for b in text.split(",") if re.fullmatch(r"[\w.]+", b.strip())]


def _classes(data: bytes) -> dict[str, list[str]]:
    """{class: [base names]} of a module's class lines (text only)."""
    out = {}
    for match in _CLASS_LINE.finditer(data):
        out[match.group(1).decode("utf-8", "replace")] = _bases((match.group(2) or b"").decode("utf-8", "replace"))
    return out


def _lower(finding: Finding, why: str) -> Finding:
    return replace(finding, severity="info", message=f"{finding.message} ({why})")


def review(results: list, paths: dict | None = None) -> list:
    """The three reviews of the module docstring, over a run's results."""
    from .modpaths import result_bytes

    paths = paths or {}
    cache: dict[int, bytes] = {}

    def text(i: int) -> bytes:
        if i not in cache:
            cache[i] = result_bytes(results[i], paths) or b""
        return cache[i]

    out = list(results)
    if any(f.code == "NPU912" and f.severity == "error" and _lowerable(f) for r in results
           if r.relpath.lower().endswith(".cu") for f in r.findings):
        out = _no_kernel(out, text, paths)
    out = _builder_folders(out, text)
    out = _extension_families(out, text)
    return out


# ----------------------------------------------------------------------------- (c) a .cu file without a kernel

_KERNEL = re.compile(rb"__global__|__device__|<<<|\bcuda[A-Z]\w*\s*\(|\bcu[A-Z]\w*\s*\(|\bcu(?:blas|dnn|sparse|fft|rand|solver)\w*"
                     rb"|\bnv[A-Z]\w*\s*\(|\b(?:at::)?cuda::|\bCUDA_\w+|\bC10_CUDA\w*|\bAT_CUDA\w*|\basm\b|\bcutlass\b|\bcute\b"
                     rb"|__shfl|__syncthreads|\bthreadIdx\b|\bblockIdx\b|#include\s*[<\"](?:cuda|cub|thrust|cutlass|cute|mma|c10/cuda|ATen/cuda)")
_COMMENTS = re.compile(rb"//[^\n]*|/\*.*?\*/", re.DOTALL)


_QUOTED_INCLUDE = re.compile(rb'^[ \t]*#[ \t]*include[ \t]*"([^"]+)"', re.MULTILINE)
_HEADER_KERNEL = re.compile(rb"__global__|<<<|cutlass|\bcute::", re.IGNORECASE)  # (`cutlass_scaled_mm` too)


def _includes_kernels(data: bytes, path: str | None) -> bool:
    """A quoted include that may bring kernels in: a `.cuh` header, a header that defines a kernel
    or uses CUTLASS, or one not found beside the file or in a folder above it (unknown)."""
    import os

    from .reviewcache import read_outside

    for match in _QUOTED_INCLUDE.finditer(data):
        name = match.group(1).decode("utf-8", "replace")
        if name.lower().endswith(".cuh"):
            return True
        if path is None:
            return True
        folder, found, body = os.path.dirname(path), False, None
        while folder and not found:
            # (through the whole-run cache, which checks these reads again before a reuse)
            found, body = read_outside(os.path.join(folder, name))
            parent = os.path.dirname(folder)
            folder = None if parent == folder else parent
        if not found or body is None or _HEADER_KERNEL.search(body):
            return True
    return False


def _no_kernel(results: list, text, paths: dict) -> list:
    out = list(results)
    for i, result in enumerate(results):
        if not result.relpath.lower().endswith(".cu"):
            continue
        if not any(f.code == "NPU912" and f.severity == "error" and _lowerable(f) for f in result.findings):
            continue
        data = text(i)
        if not data or _KERNEL.search(_COMMENTS.sub(b"", data)) or _includes_kernels(data, paths.get(result.relpath)):
            continue
        macros = sorted({m.decode() for m in re.findall(rb"__CUDACC\w*__", data)})
        what = f"only the compiler's macros {', '.join(f'`{m}`' for m in macros)}" if macros else "host code only"
        why = (f"{NO_KERNEL}: no `__global__` or `__device__` function, no `<<<` launch and no CUDA "
               f"runtime call, {what}; nothing in it runs on the GPU, and an NPU build leaves it out")
        out[i] = replace(result, findings=[_lower(f, why) if f.code == "NPU912" and f.severity == "error"
                                           and _lowerable(f) else f for f in result.findings])
    return out


# ----------------------------------------------------------------------------- (a) accelerator-selected builder folders

def _npu_folders(results, text) -> list[tuple[str, str, str, dict, dict]]:
    """(parent folder, NPU folder, NPU base class, {NPU class: file}, {index: classes}) of each
    builder folder with an NPU sub-folder of builder classes deriving from an NPU base of its own."""
    folders: dict[str, list[int]] = {}
    for i, result in enumerate(results):
        rel = result.relpath
        if not rel.endswith(".py"):
            continue
        folder = posixpath.dirname(rel)
        name = posixpath.basename(folder).lower()
        if name in ("npu", "ascend") and posixpath.dirname(folder):
            folders.setdefault(folder, []).append(i)
    found = []
    for folder, members in sorted(folders.items()):
        parent = posixpath.dirname(folder)
        siblings = [i for i, r in enumerate(results) if r.relpath.endswith(".py") and posixpath.dirname(r.relpath) == parent]
        if not siblings:
            continue
        classes = {}
        for i in members:
            for name, bases in _classes(text(i)).items():
                classes.setdefault(name, (bases, i))
        bases_used = [b for bases, _i in classes.values() for b in bases]
        npu_base = next((name for name in classes if _NPU_WORD.search(name) and bases_used.count(name) >= 2), None)
        if npu_base is None:
            continue
        npu_classes = {name: results[i].relpath for name, (bases, i) in classes.items() if npu_base in bases}
        found.append((parent, folder, npu_base, npu_classes, siblings))
    return found


def _accelerator(results, text, parent: str, folder: str) -> str | None:
    """The NPU-named module outside the folders that names the NPU folder as a module."""
    dotted = re.compile(rb"\b" + re.escape(posixpath.basename(parent).encode()) + rb"\." +
                        re.escape(posixpath.basename(folder).encode()) + rb"\b")
    for i, result in enumerate(results):
        rel = result.relpath
        if (rel.endswith(".py") and _NPU_WORD.search(posixpath.basename(rel)) and not rel.startswith(parent + "/")
                and dotted.search(text(i))):
            return rel
    return None


def _cuda_builders(results, text, siblings) -> dict[str, tuple[int, list[str]]]:
    """{class: (file, bases)} of the CUDA builder classes of the parent folder: a CUDA-named class
    other classes there derive from, and its subclasses there."""
    classes: dict[str, tuple[int, list[str]]] = {}
    for i in siblings:
        for name, bases in _classes(text(i)).items():
            classes.setdefault(name, (i, bases))
    roots = {name for name in classes if re.search(r"cuda", name, re.IGNORECASE)
             and any(name in bases for _i, bases in classes.values())}
    members = set(roots)
    changed = True
    while changed:
        changed = False
        for name, (_i, bases) in classes.items():
            if name not in members and any(b in members for b in bases):
                members.add(name)
                changed = True
    return {name: classes[name] for name in members}


def _named_in_code(pattern: re.Pattern, data: bytes) -> bool:
    """`pattern` occurs in `data` outside a `#` comment."""
    for match in pattern.finditer(data):
        start = data.rfind(b"\n", 0, match.start()) + 1
        if b"#" not in data[start:match.start()]:
            return True
    return False


def _class_spans(tree: ast.Module, names) -> dict[str, list[tuple[int, int, str]]]:
    """{class: [(first, last, method)]} of the methods of the named top-level classes."""
    spans: dict[str, list] = {}
    for cls in (n for n in tree.body if isinstance(n, ast.ClassDef) and n.name in names):
        for method in (m for m in cls.body if isinstance(m, (ast.FunctionDef, ast.AsyncFunctionDef))):
            first = min([method.lineno, *(d.lineno for d in method.decorator_list)])
            spans.setdefault(cls.name, []).append((first, method.end_lineno or method.lineno, method.name))
    return spans


def _literal_owners(tree: ast.Module, names) -> list[tuple[str, str | None]]:
    """(source literal, owning CUDA builder class or None) of a module's `.cu`/`.cuh` literals."""
    out = []
    owned = set()
    for cls in (n for n in tree.body if isinstance(n, ast.ClassDef) and n.name in names):
        for node in ast.walk(cls):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and _SOURCE.fullmatch(node.value):
                out.append((node.value.lstrip("./"), cls.name))
                owned.add(id(node))
    for node in astcache.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in owned \
                and _SOURCE.fullmatch(node.value):
            out.append((node.value.lstrip("./"), None))
    return out


def _matches(relpath: str, literal: str) -> bool:
    return relpath == literal or relpath.endswith("/" + literal)


def _why(name: str, route: tuple) -> str:
    """Why the CUDA builder `name` never runs on an NPU host: the accelerator's NPU folder has its
    twin, or lacks it (the accelerator returns its not-implemented builder)."""
    parent, folder, accelerator, npu_base, npu_classes, not_implemented = route
    if name in npu_classes:
        return (f"`{name}` of {parent}/; on an NPU host {accelerator} takes the builders from {folder}/, "
                f"whose `{name}` ({npu_classes[name]}) derives from `{npu_base}`")
    returns = f"its `{not_implemented}`" if not_implemented else "no builder"
    return (f"`{name}` of {parent}/; on an NPU host {accelerator} takes the builders from {folder}/, "
            f"which has no `{name}`: it returns {returns}, the project leaves this op out on NPU")


def _builder_folders(results: list, text) -> list:
    from .probes import parse_text

    if not any(r.relpath.endswith(".py") and posixpath.basename(posixpath.dirname(r.relpath)).lower() in ("npu", "ascend")
               for r in results):
        return results
    out = list(results)
    owners: dict[str, list[tuple[str, str]]] = {}  # literal -> [(builder, why)]; builder None: listed elsewhere
    claimed: set[str] = set()
    all_folders = []
    for parent, folder, npu_base, npu_classes, siblings in _npu_folders(results, text):
        accelerator = _accelerator(results, text, parent, folder)
        if accelerator is None:
            continue
        builders = _cuda_builders(results, text, siblings)
        if not builders:
            continue
        # a CUDA builder an NPU builder derives from, or that a module outside the folder imports
        # (not through the folder's package), may run on an NPU host
        npu_bases = {b for i, r in enumerate(results) if r.relpath.startswith(folder + "/") and r.relpath.endswith(".py")
                     for bases in _classes(text(i)).values() for b in bases}
        outside = [i for i, r in enumerate(results) if r.relpath.endswith(".py") and not r.relpath.startswith(parent + "/")]
        base = posixpath.basename(parent)
        for name, (i, _bases) in list(builders.items()):
            module = posixpath.splitext(posixpath.basename(results[i].relpath))[0]
            direct = re.compile(rb"\b" + re.escape(base.encode()) + rb"\." + re.escape(module.encode()) + rb"\b")
            if name in npu_bases or any(_named_in_code(direct, text(j)) for j in outside):
                del builders[name]
        not_implemented = next((n for n in npu_classes if _NOT_IMPLEMENTED.search(n)), None)
        all_folders.append((parent, folder, builders))

        why_of = functools.partial(_why, route=(parent, folder, accelerator, npu_base, npu_classes, not_implemented))

        by_file: dict[int, list[str]] = {}
        for name, (i, _bases) in builders.items():
            by_file.setdefault(i, []).append(name)
        for i, names in by_file.items():
            tree = parse_text(text(i).decode("utf-8", "replace"))
            if tree is None:
                continue
            claimed.add(results[i].relpath)  # (its other literals are recorded here, owner None)
            for literal, owner in _literal_owners(tree, names):
                owners.setdefault(literal, []).append((owner, why_of(owner) if owner else "", owner in npu_classes))
            spans = _class_spans(tree, names)
            if any(_lowerable(f) and f.severity != "info" for f in out[i].findings):
                out[i] = _lower_in(out[i], spans, why_of)
    if not all_folders:
        return results
    # a literal any other Python file names (setup.py, another builder) keeps its source reported
    for i, result in enumerate(results):
        if not result.relpath.endswith(".py") or result.relpath in claimed:
            continue
        data = text(i)
        if b".cu" not in data:
            continue
        for match in _CUDA_LITERAL.finditer(data):
            owners.setdefault(match.group(1).decode("utf-8", "replace").lstrip("./"), []).append((None, "", True))
    listed = [(literal, entries) for literal, entries in owners.items()]
    left_out: dict[str, list[tuple[int, str]]] = {}  # builder without an NPU twin -> [(file, why)]
    for i, result in enumerate(out):
        rel = result.relpath
        if not rel.lower().endswith((".cu", ".cuh")):
            continue
        if not any(f.code == "NPU912" and _lowerable(f) for f in result.findings):
            continue
        if rel.lower().endswith(".cuh"):
            folder_of = posixpath.dirname(rel)
            hits = [(literal, entries) for literal, entries in listed if literal.lower().endswith(".cu")
                    and _under(folder_of, [r.relpath for r in results if _matches(r.relpath, literal)])]
        else:
            hits = [(literal, entries) for literal, entries in listed if _matches(rel, literal)]
        if not hits or any(owner is None for _literal, entries in hits for owner, _why, _twin in entries):
            continue
        absent = next((owner for _literal, entries in hits for owner, _why, twin in entries if not twin), None)
        whys = list({owner: why for _literal, entries in reversed(hits) for owner, why, _twin in reversed(entries)}.values())[::-1]
        if absent is not None:
            left_out.setdefault(absent, []).append((i, "; ".join(whys)))
            continue
        why = f"{SOURCE_PHRASE}: " + "; ".join(whys)
        out[i] = _lower_source(out[i], why)
    return _left_out_ops(out, left_out)


def _lower_source(result, why: str):
    return replace(result, findings=[_lower(f, why) if f.code == "NPU912" and _lowerable(f) else f
                                     for f in result.findings])


def _left_out_ops(out: list, left_out: dict) -> list:
    """The sources of a CUDA builder the NPU folder has no twin of: the op is missing on an NPU host
    by the project's choice. That is worth one look per op, not one error per file (round 9: one
    reviewer read these as true, "the transformer op is unavailable on NPU", two as false, "never
    compiled for NPU"): one info finding on the op's first `.cu` file naming the others, which
    become named scopes that point at it."""
    for name, files in left_out.items():
        files = sorted(files, key=lambda item: (not out[item[0]].relpath.lower().endswith(".cu"), out[item[0]].relpath))
        first, why = files[0]
        others = [out[i].relpath for i, _why in files[1:]]
        listed = f"; its other sources: {', '.join(others)}" if others else ""
        note = (f"an op not built for NPU: {why}; port it (a `{name}` in the NPU builder folder) "
                f"only if you need the op there{listed}")
        out[first] = replace(out[first], findings=[_lower(f, note) if f.code == "NPU912" and _lowerable(f) else f
                                                   for f in out[first].findings])
        for i, _why in files[1:]:
            out[i] = _lower_source(out[i], f"{SOURCE_PHRASE}: {_why}; reported once, at {out[first].relpath}")
    return out


def _under(folder: str, sources: list[str]) -> bool:
    """A header in `folder` is in the folder of a listed `.cu` source (its path in the run), or
    below it; a source folder of one part (`csrc/`) is too wide to say so."""
    for source in sources:
        home = posixpath.dirname(source)
        if home.count("/") >= 1 and (folder == home or folder.startswith(home + "/")):
            return True
    return False


def _lower_in(result, spans: dict, why_of, phrase: str = BUILDER_PHRASE) -> object:
    """Lower the places of findings that lie in a method of the classes in `spans`."""
    from .findings import lower_pieces

    flat = [(a, b, f"`{cls}.{m}`", cls) for cls, items in spans.items() for a, b, m in items]

    def reason(line: int):
        span = next((s for s in flat if s[0] <= line <= s[1]), None)
        return None if span is None else f"{phrase}: {span[2]}, {why_of(span[3])}"

    findings, changed = [], False
    for finding in result.findings:
        lowered = lower_pieces(finding, reason) if _lowerable(finding) and finding.severity != "info" else None
        changed |= lowered is not None
        findings += [finding] if lowered is None else lowered
    return replace(result, findings=sorted(findings)) if changed else result


# ----------------------------------------------------------------------------- (b) extension class families

_AVAILABLE = re.compile(rb"def[ \t]+is_available[ \t]*\(")
_CUDA_AVAILABLE = re.compile(r"\btorch\.cuda\.is_available\s*\(\s*\)")


def _extension_families(results: list, text) -> list:
    from .probes import parse_text

    holders = [i for i, r in enumerate(results) if r.relpath.endswith(".py")
               and any(_lowerable(f) and f.severity != "info" for f in r.findings)]
    candidates = [i for i in holders if _AVAILABLE.search(text(i)) and b"torch.cuda.is_available" in text(i)]
    if not candidates:
        return results
    python = [i for i, r in enumerate(results) if r.relpath.endswith(".py")]
    classes: dict[str, list[str]] = {}
    for i in python:
        data = text(i)
        if b"class" in data:
            for name, bases in _classes(data).items():
                classes.setdefault(name, bases)

    def ancestors(name: str) -> set[str]:
        seen, stack = set(), [name]
        while stack:
            for base in classes.get(stack.pop(), []):
                if base not in seen:
                    seen.add(base)
                    stack.append(base)
        return seen

    out = list(results)
    for i in candidates:
        tree = parse_text(text(i).decode("utf-8", "replace"))
        if tree is None:
            continue
        lines = text(i).decode("utf-8", "replace").splitlines()
        for cls in (n for n in tree.body if isinstance(n, ast.ClassDef)):
            if not re.search(r"cuda", cls.name, re.IGNORECASE):
                continue
            available = next((m for m in cls.body if isinstance(m, ast.FunctionDef) and m.name == "is_available"), None)
            if available is None or not _CUDA_AVAILABLE.search("\n".join(lines[available.lineno - 1:available.end_lineno])):
                continue
            returns = [n for n in ast.walk(available) if isinstance(n, ast.Return) and n.value is not None]
            if not returns:
                continue
            # kept as written: a rewrite there (`npu_compat.is_available()`) makes it True on an NPU host
            if any(f.fixable and available.lineno <= f.line <= (available.end_lineno or available.lineno)
                   for f in results[i].findings):
                continue
            family = ancestors(cls.name)
            subclasses = {n for n in classes if cls.name in ancestors(n)}
            siblings = {n for n in classes if _NPU_WORD.search(n) and n not in subclasses and ancestors(n) & family}
            if not siblings:
                continue
            # a loader module naming an NPU sibling and this class or one of its subclasses
            loader, sibling = None, None
            for j in python:
                if j == i:
                    continue
                data = text(j)
                hit = next((s for s in sorted(siblings) if re.search(rb"\b" + re.escape(s.encode()) + rb"\b", data)), None)
                if hit and any(re.search(rb"\b" + re.escape(c.encode()) + rb"\b", data) for c in {cls.name, *subclasses}) \
                        and b".is_available()" in data:
                    loader, sibling = results[j].relpath, hit
                    break
            if loader is None:
                continue
            spans = {cls.name: [(a, b, m) for a, b, m in _class_spans(tree, {cls.name}).get(cls.name, []) if m != "is_available"]}

            def why_of(_name: str, cls=cls, loader=loader, sibling=sibling) -> str:
                return (f"`{cls.name}.is_available()` is `torch.cuda.is_available()`, False on an NPU host, where "
                        f"the loader of {loader} selects the NPU extensions of the family (`{sibling}`)")

            out[i] = _lower_in(out[i], spans, why_of, EXTENSION_PHRASE)
    return out
