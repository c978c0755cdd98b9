"""Per-file findings that repeat one port item of an op family or a vendored package (issue #16, round 19).

Two shapes, read across files (whole-run passes, runplan.whole_run_passes):

* **The CUDA sources of one op family that a CUDA-gated build compiles** (`fold_gated_sources`,
  after srcfolds17). buildgated lowers the NPU912 error of every `.cu`/`.cuh` a setup.py or
  CMakeLists.txt builds only on a CUDA host to info ("not compiled on an NPU host (...)"), one per
  file: vLLM's `csrc/quantization/fp4/` gave ten, `w8a8/cutlass/c3x/` eight (the `_sm90`,
  `_sm100`, `_sm120` variants of one GEMM and its CUTLASS dispatch headers). The port item is the
  op family, not the file. Two groups fold into their first file's finding (by path), which names
  every other file, the count, and what each other file's own message added (the headers beside
  it, the helpers folded into it):
  - a **leaf folder** (no CUDA source of the run in a folder below it) holding two or more such
    findings, where every NPU912 finding of the folder is a build-gated info one with the same gate
    and consequence text (the same build): a folder with an NPU912 error, or with a source lowered
    for another reason, is left as it is (an error is never folded into an info); a finding that
    becomes a named scope later (moot.py: a "no port work" `.cu`) is no other build's;
  - in any folder, two or more such files whose names differ only by a GPU architecture token
    (`scaled_mm_c3x_sm90.cu`, `scaled_mm_c3x_sm100.cu`: `_sm\\d+`), with the same gate text: the
    variants of one kernel for each architecture.
  "The same build" compares the gate parenthetical only (the build file, its line and condition,
  and what it means): a note another pass appended to a member (srcfolds17's helper it calls)
  does not make it another build, and travels with the member's name.
  Never across folders, and never a source that a Python file names beside `cpp_extension` (a JIT
  build, which an NPU host runs: buildgated keeps its error), nor a source whose name names another
  platform (platforms.path_platform: it becomes that platform's scope later). A non-leaf folder's other sources
  (vLLM's `csrc/` top level: a different op in each file) keep one finding each.

* **A CUDA-only package's submodules that its `__init__` imports** (`fold_package_submodules`,
  after importfolders). A package whose `__init__.py` reports an open NPU911 error on a module-level
  import of a CUDA-only package (sweep.toml `module_codes`, as importfolders reads them: `cutlass`,
  `cuda.bindings`) fails to import on an NPU host, once. A submodule that the `__init__` imports at
  module level, unguarded (a top-level `from .m import`, `from . import m`, or the absolute
  `pkg.path.m`), directly or through other such submodules, is loaded by that same import: its own
  NPU911 error on the same CUDA-only package (SGLang's vendored CuTe flash-attention: `interface.py`,
  `cute_dsl_utils.py`, `block_sparsity.py`, whose findings also hold lines importfolders cannot
  fold) repeats the package's. It folds into the `__init__`'s finding, which names each folded
  module with its lines. Importing the submodule from elsewhere (`from pkg.cute.interface import
  f`) does not change that: Python runs the package's `__init__` first, which fails the same way,
  and porting the package (its `__init__` and what it loads) is the porter's one task. What does
  change it is a load that bypasses the `__init__`: a submodule with an `if __name__ ==
  "__main__":` block (run as a script by its path), or one another Python file of the run names as
  `m.py` beside `spec_from_file_location`, `run_path` or `sys.path` (loaded by path): those keep
  their own finding. A submodule the `__init__` does not load, whose finding names no import of a
  package the `__init__`'s finding reports, or whose finding holds another import line (a lazy
  import in a function, an import of a package the sweep does not call CUDA-only: a failure of its
  own, left after the package is ported) keeps its own too.

Cheap first: nothing is read without a build-gated NPU912 info in a folder with another, or an
open NPU911 error on an `__init__.py`; only those `__init__.py` files and the submodules they load
are parsed (the top-level statements), and other Python files are byte-tested for a path load.
"""

from __future__ import annotations

import ast
import posixpath
import re
from dataclasses import replace

GATE_MARK = "(not compiled on an NPU host ("
MAX_NAMED = 40
_ARCH = re.compile(r"_sm\d+[a-z]?(?=[_.])", re.IGNORECASE)
_BASE = "CUDA C++ source file: its kernels do not run on an NPU"


def _cuda(relpath: str) -> bool:
    return relpath.lower().endswith((".cu", ".cuh"))


def _report_only(finding) -> bool:
    return finding.code == "NPU912" and not finding.fixable and finding.cell is None


def _gate_span(message: str) -> tuple[int, int] | None:
    """(start, end) of the "(not compiled on an NPU host (... only when ..., ... NPU host); ...)"
    parenthetical of a message. Read by its wording, not by counting parentheses: the build
    condition it quotes may be cut short inside a call (`os.getenv("FORCE_CUDA...`)."""
    at = message.find(GATE_MARK)
    if at < 0:
        return None
    when = message.find(" only when ", at)
    inner = message.find("NPU host)", when) if when >= 0 else -1
    if inner < 0:
        return None
    close = message.find(")", inner + len("NPU host)"))
    return (at, close + 1) if close >= 0 else None


def _gated(finding) -> str | None:
    """The gate parenthetical (the build and what it means) of a build-gated NPU912 info finding,
    or None."""
    if not (_report_only(finding) and finding.severity == "info"):
        return None
    span = _gate_span(finding.message)
    return finding.message[span[0]:span[1]] if span else None


def _groups(text: str) -> list[str]:
    """The top-level parenthesized groups of `text`, without their parentheses."""
    out, depth, start = [], 0, 0
    for k, char in enumerate(text):
        if char == "(":
            depth += 1
            if depth == 1:
                start = k + 1
        elif char == ")" and depth:
            depth -= 1
            if depth == 0:
                out.append(text[start:k].strip())
    return [g for g in out if g]


def _extra(message: str) -> str:
    """What a source's NPU912 message adds to the base wording and the gate (the headers beside it,
    the helpers folded into it)."""
    span = _gate_span(message)
    rest = message[:span[0]] + " " + message[span[1]:] if span else message
    rest = rest.removeprefix(_BASE)
    return "; ".join(_groups(rest))


# (public names for cmakefolds25.py, which folds the same notes per CMake target)
gated = _gated
extra_of = _extra


# ----------------------------------------------------------------------------- gated sources of one op family

def fold_gated_sources(results: list, paths: dict) -> list:
    """Module's doc, first shape: the build-gated NPU912 infos of a leaf folder, and of a kernel's
    architecture variants, folded into the first file's finding."""
    from .platforms import path_platform

    # (another platform's source by its name becomes that platform's scope later: platforms.py)
    gated = [i for i, r in enumerate(results) if _cuda(r.relpath)
             and sum(_gated(f) is not None for f in r.findings) == 1 and path_platform(r.relpath) is None]
    if len(gated) < 2:
        return results
    by_folder: dict[str, list[int]] = {}
    for i in gated:
        by_folder.setdefault(posixpath.dirname(results[i].relpath), []).append(i)
    if all(len(v) < 2 for v in by_folder.values()):
        return results
    cuda_folders = {posixpath.dirname(r.relpath) for r in results if _cuda(r.relpath)}
    groups: list[tuple[list[int], str]] = []
    for folder, members in by_folder.items():
        if len(members) < 2:
            continue
        leaf = not any(other.startswith(folder + "/") if folder else other for other in cuda_folders)
        if leaf and _whole_folder(folder, members, results):
            groups.append((sorted(members, key=lambda i: results[i].relpath), "folder"))
            continue
        variants: dict[tuple[str, str], list[int]] = {}
        for i in members:
            name = posixpath.basename(results[i].relpath)
            stem = _ARCH.sub("", name)
            if stem != name:
                variants.setdefault((stem, _gate_of(results[i])), []).append(i)
        groups += [(sorted(v, key=lambda i: results[i].relpath), "variants") for v in variants.values() if len(v) > 1]
    if not groups:
        return results
    jit = _jit_named(results, paths, {posixpath.basename(results[i].relpath) for g, _k in groups for i in g})
    out = list(results)
    for members, kind in groups:
        kept = [i for i in members if posixpath.basename(results[i].relpath) not in jit]
        if len(kept) < 2 or (kind == "folder" and len(kept) < len(members)):
            continue  # (a JIT-built source: the folder is not one gated build)
        members = kept
        first, rest = members[0], members[1:]
        folder = posixpath.dirname(results[first].relpath)
        named = []
        for i in rest[:MAX_NAMED]:
            finding = next(f for f in out[i].findings if _gated(f) is not None)
            extra = _extra(finding.message)
            name = f"`{posixpath.basename(results[i].relpath)}`"
            named.append(f"{name} ({extra})" if extra else name)
        more = f" and {len(rest) - MAX_NAMED} more" if len(rest) > MAX_NAMED else ""
        plural = "s" if len(rest) > 1 else ""
        if kind == "folder":
            what = f"the other {len(rest)} CUDA sources of `{folder}/`" if plural else f"the other CUDA source of `{folder}/`"
        else:
            what = f"{len(rest)} other GPU-architecture variant{plural} of this kernel in `{folder}/`"
        note = (f"(also {what}, which the same CUDA-gated build compiles, reported once here: "
                f"{', '.join(named)}{more})")
        index = next(k for k, f in enumerate(out[first].findings) if _gated(f) is not None)
        findings = list(out[first].findings)
        findings[index] = replace(findings[index], message=f"{findings[index].message} {note}")
        out[first] = replace(out[first], findings=findings)
        for i in rest:
            out[i] = replace(out[i], findings=[f for f in out[i].findings if _gated(f) is None])
    return out


def _gate_of(result) -> str:
    return next(g for g in map(_gated, result.findings) if g is not None)


def _named(finding) -> bool:
    from .moot import named

    return named(finding)


def _whole_folder(folder: str, members: list[int], results: list) -> bool:
    """Every NPU912 finding of the folder's CUDA sources is a build-gated info with one gate text."""
    gates = set()
    for r in results:
        if not _cuda(r.relpath) or posixpath.dirname(r.relpath) != folder:
            continue
        for f in r.findings:
            if _report_only(f) and not _named(f):  # (a "no port work" finding becomes a named scope)
                gate = _gated(f)
                if gate is None:
                    return False
                gates.add(gate)
    return len(gates) == 1


def _jit_named(results: list, paths: dict, names: set) -> set:
    """The source names a Python file of the run names beside `cpp_extension` (a JIT build)."""
    from .modpaths import RunTexts

    texts = RunTexts(results, paths)
    needles = {n: n.encode() for n in names}
    named: set = set()
    for i, r in enumerate(results):
        if not r.relpath.endswith(".py") or posixpath.basename(r.relpath) == "setup.py":
            continue
        data = texts(i) or b""
        if b"cpp_extension" in data and b".cu" in data:
            named |= {n for n, b in needles.items() if b in data}
    return named


# ----------------------------------------------------------------------------- a CUDA-only package's submodules

def _open_import(finding) -> bool:
    from .moot import is_moot

    return (finding.code == "NPU911" and finding.severity == "error" and not finding.fixable
            and finding.cell is None and not is_moot(finding))


def _import_packages(finding, lines: list[str], packages: tuple) -> set:
    """The CUDA-only packages that the module-level import lines of a finding name."""
    from .importfolders import imported as _imported

    found: set = set()
    for line in (finding.line, *(a[0] for a in finding.also)):
        got = _imported(lines[line - 1] if 0 < line <= len(lines) else "", packages)
        if got:
            found |= got
    return found


def _imports_at_top(finding, lines: list[str], packages: tuple) -> bool:
    """Every import line of a finding is a module-level import of CUDA-only packages (a lazy
    import in a function, or of another kind of package, is a failure of its own)."""
    from .importfolders import imported as _imported

    for line in (finding.line, *(a[0] for a in finding.also)):
        text = lines[line - 1] if 0 < line <= len(lines) else ""
        stripped = text.strip()
        if (stripped.startswith("import ") or (stripped.startswith("from ") and " import" in stripped)) \
                and not _imported(text, packages):
            return False
    return True


def _loaded_members(tree: ast.Module, folder: str, members: set) -> set:
    """The submodules (file stems in `folder`) that a module's top-level imports load."""
    dotted = folder.replace("/", ".")
    loaded: set = set()
    for node in tree.body:
        if isinstance(node, ast.ImportFrom):
            if node.level == 1:
                if node.module:
                    head = node.module.split(".")[0]
                    loaded |= {head} & members
                else:
                    loaded |= {a.name for a in node.names} & members
            elif node.level == 0 and node.module:
                module = node.module
                parent, _dot, last = module.rpartition(".")
                if parent and (dotted == parent or dotted.endswith("." + parent)) and last in members:
                    loaded.add(last)
                elif dotted == module or dotted.endswith("." + module):
                    loaded |= {a.name for a in node.names} & members
        elif isinstance(node, ast.Import):
            for alias in node.names:
                parent, _dot, last = alias.name.rpartition(".")
                if parent and (dotted == parent or dotted.endswith("." + parent)) and last in members:
                    loaded.add(last)
    return loaded


_MAIN = re.compile(rb"^if\s+__name__\s*==\s*[\"']__main__[\"']", re.MULTILINE)
_PATH_LOAD = (b"spec_from_file_location", b"run_path", b"sys.path")


def fold_package_submodules(results: list, paths: dict) -> list:
    """Module's doc, second shape: a submodule's NPU911 error on the CUDA-only package its
    package's `__init__` fails on, folded into the `__init__`'s finding."""
    inits = [i for i, r in enumerate(results) if posixpath.basename(r.relpath) == "__init__.py"
             and any(map(_open_import, r.findings))]
    if not inits:
        return results
    from . import astcache
    from .importfolders import packages as _packages
    from .modpaths import RunTexts

    packages = _packages()
    texts = RunTexts(results, paths)
    out = list(results)
    path_loaders: list[bytes] | None = None
    for init in inits:
        folder = posixpath.dirname(results[init].relpath)
        data = texts(init)
        if data is None:
            continue
        lines = data.decode("utf-8", "replace").splitlines()
        carrier = next(((k, _import_packages(f, lines, packages)) for k, f in enumerate(out[init].findings)
                        if _open_import(f) and _import_packages(f, lines, packages)), None)
        if carrier is None:
            continue
        k_init, fails_on = carrier
        members = {posixpath.basename(r.relpath)[:-3]: i for i, r in enumerate(results)
                   if r.relpath.endswith(".py") and posixpath.dirname(r.relpath) == folder
                   and posixpath.basename(r.relpath) != "__init__.py"}
        # the submodules the package's import loads, through unguarded top-level imports
        seen: set = set()
        queue = [init]
        while queue:
            tree = astcache.parse(texts(queue.pop()) or b"")
            if tree is None:
                continue
            for name in _loaded_members(tree, folder, set(members)) - seen:
                seen.add(name)
                queue.append(members[name])
        folded = []
        for name in sorted(seen):
            i = members[name]
            sub = texts(i) or b""
            if _MAIN.search(sub):
                continue  # (a script: run by its path, it skips the package's __init__)
            if path_loaders is None:
                path_loaders = [texts(j) or b"" for j, r in enumerate(results) if r.relpath.endswith(".py")
                                and j not in (init,) and any(m in (texts(j) or b"") for m in _PATH_LOAD)]
            needle = f"{name}.py".encode()
            if any(needle in other for other in path_loaders if other is not sub):
                continue  # (loaded by its path somewhere: the __init__ does not run first)
            sub_lines = sub.decode("utf-8", "replace").splitlines()
            kept = []
            for f in out[i].findings:
                if _open_import(f) and _import_packages(f, sub_lines, packages) & fails_on \
                        and _imports_at_top(f, sub_lines, packages):
                    folded.append((name, f))
                else:
                    kept.append(f)
            out[i] = replace(out[i], findings=kept)
        if not folded:
            continue
        named = []
        for name, f in folded:
            line_numbers = list(dict.fromkeys([f.line, *(a[0] for a in f.also)]))
            shown = ", ".join(map(str, line_numbers[:8])) + (f" and {len(line_numbers) - 8} more" if len(line_numbers) > 8 else "")
            what = f.message.split(":", 1)[-1].split(";", 1)[0].split(" (", 1)[0].strip()
            named.append(f"`{name}.py` ({what}, line{'s' if len(line_numbers) > 1 else ''} {shown})")
        packs = ", ".join(f"`{p}`" for p in sorted(fails_on))
        note = (f"(the package's submodules that this `__init__` loads unguarded at import, and that fail on "
                f"{packs} with it, ported together: {'; '.join(named)})")
        findings = list(out[init].findings)
        findings[k_init] = replace(findings[k_init], message=f"{findings[k_init].message} {note}")
        out[init] = replace(out[init], findings=findings)
    return out
