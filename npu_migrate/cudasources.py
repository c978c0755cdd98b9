"""CUDA sources and build helpers that are not the CUDA port (issue #16, round-12 audits).

Shapes the reviewers read as false, each proven from the text of the files, not from a name:

(a) A ROCm-only `.cu`/`.cuh` (AF#2, AG#9: vLLM's `csrc/attention/octave_*.cu`): everything
    outside includes, `#pragma`s and comments sits inside a preprocessor group on a ROCm macro
    (`#if defined(USE_ROCM)`, `#ifdef USE_ROCM`, `__HIP_PLATFORM_AMD__`, `__HIPCC__`), and the
    group's `#else` branch, if any, is a stub: function bodies that only raise
    (`TORCH_CHECK(false, ...)`, `throw`, `#error`). A CUDA build compiles nothing of it (it keeps
    the `.cu` suffix for hipify), so an NPU port has nothing to do there: its NPU912 finding
    becomes a named skipped scope (`ROCm-only source, never built for CUDA`, moot.PHRASES).
(b) A `.cu` with no device code that registers CPU implementations (AE#16: xformers'
    `sparse24/meta_utils.cu`, `TORCH_LIBRARY_IMPL(xformers, CPU, m)`): no `__global__` or
    `__device__` function, no `<<<` launch, no CUDA runtime or driver call, no cooperative launch,
    no CUB/Thrust/CuTe and no CUTLASS kernel template (`cutlass::gemm::device::...`, a
    `CUTLASS_DEVICE` function): host C++ that may use CUTLASS's host types (layouts, `TensorRef`,
    coordinates); a file without such a registration may be a host-side dispatcher of kernels in
    other translation units (vLLM's `scaled_mm_entry.cu`) and keeps its error (kernel-less files
    without CUTLASS are builders.py's). Its quoted includes bring no kernel either
    (a header that defines a `__global__` function or launches one, or one not found, keeps the
    finding). It is host code compiled only in the CUDA build: NPU912 is info, not error.
(c) A toolchain helper (AE#29: colossalai's `get_cuda_version_in_pytorch`): a module-level
    function reading `torch.version.cuda` (NPU990) that raises an explicit error when it is None
    (a `try` whose `except` raises, or an `if ... is None: raise`), and whose every caller in the
    project is, through helpers of the same kind, a method of a CUDA extension or op-builder class
    (a class named `*Cuda*Extension*`/`*CUDA*Builder*`, or a method named `assert_compatible`):
    such classes only run to build or load a CUDA extension, which an NPU host never selects. Its
    finding becomes a named skipped scope.

(d) The `.cu` files of one extension (AF noise note: auto-gptq's `exllama_kernels`, four `.cu`
    files in one `CUDAExtension(...)` of setup.py): a `setup.py` that lists two or more `.cu` files
    of the run in one `CUDAExtension(name, [...])` literal is one port, so their NPU912 errors are
    one finding, on the first file (path order), whose message counts and names the others and
    the extension; the others' NPU912 findings go (as `.cuh` headers are folded per folder,
    textfiles.group_cuda_headers). Files another extension also lists keep their own.

(e) The setup.py CUDA_HOME probe whose build falls back to a `CppExtension` (AG#30; optionalext.py
    proves the shape and says so in an info finding), in a run that holds `.cu` files (the CUDA
    sources, reported on their own, are the port work): a named "runs as written" scope
    (moot.AS_WRITTEN). Without `.cu` files in the run the info finding stays.

Whole-run, text first: a `.cu` is only read when it carries an open NPU912 finding, a Python file
is parsed only when its bytes name the helper (byte pre-test). Called once, from
runplan.whole_run_passes, before moot.to_scopes.
"""

from __future__ import annotations

import ast
import os
import re
from dataclasses import replace

# moot.PHRASES carries these two (a finding whose message has one becomes a named skipped scope)
ROCM_ONLY = "ROCm-only source, never built for CUDA"
TOOLCHAIN = "a CUDA toolchain helper called only by CUDA extension classes"
HOST_ONLY = "host code compiled only in the CUDA build"
# moot.AS_WRITTEN carries this one
SETUP_FALLBACK = "setup.py builds its `CppExtension` on an NPU host"

# Findings whose message names other files (folded headers, byte-identical copies, an op's other
# sources) are left alone: a named scope would hide those names.
_FOLDED = ("with the CUDA header", "CUDA headers in", "byte-identical", "reported once", "its other sources")


def _open(finding, code: str, folded: bool = False) -> bool:
    """An open report-only finding of `code`; unless `folded`, one that names no other file."""
    from .moot import is_moot

    return (finding.code == code and not finding.fixable and finding.cell is None and not is_moot(finding)
            and (folded or not any(word in finding.message for word in _FOLDED)))


def _lower(finding, why: str):
    return replace(finding, severity="info", message=f"{finding.message} ({why})")


def review(results: list, paths: dict | None = None) -> list:
    """The reviews of the module docstring, over a run's results (a new list)."""
    from .modpaths import result_bytes

    paths = paths or {}
    out = list(results)
    for i, result in enumerate(results):
        lower = result.relpath.lower()
        if not lower.endswith((".cu", ".cuh")) or not any(_open(f, "NPU912") for f in result.findings):
            continue
        data = result_bytes(result, paths)
        if not data:
            continue
        why = rocm_only(data)
        if why is None and lower.endswith(".cu") and any(f.severity == "error" for f in result.findings
                                                         if _open(f, "NPU912")):
            host = host_only(data, paths.get(result.relpath), results, paths, result.relpath)
            if host is not None:
                out[i] = replace(result, findings=[_lower(f, host) if _open(f, "NPU912") and f.severity == "error"
                                                   else f for f in result.findings])
            continue
        if why is not None:
            out[i] = replace(result, findings=[_lower(f, why) if _open(f, "NPU912") else f for f in result.findings])
    from .othersources import review as review_other_sources  # (test-only ops, gated JIT sources)

    return review_other_sources(fold_extension_sources(_toolchain_helpers(_setup_fallbacks(out), paths), paths), paths)


def _setup_fallbacks(results: list) -> list:
    """setup.py's CUDA_HOME probe with a CppExtension build (optionalext.SETUP_PROBE, an info
    finding), in a run whose `.cu` files carry NPU912 findings: the CUDA sources are the port work, reported on
    their own; setup.py's NPU build runs as written (a named scope). Without `.cu` files in the
    run, the setup.py finding is the only word on the CUDA build and stays."""
    from .optionalext import SETUP_PROBE

    probe = SETUP_PROBE.split("{gate}", 1)[0]
    sources = sum(1 for r in results if r.relpath.lower().endswith(".cu") and any(f.code == "NPU912" for f in r.findings))
    if not sources:
        return results
    out = list(results)
    for i, result in enumerate(results):
        if os.path.basename(result.relpath) != "setup.py":
            continue
        if any(f.code == "NPU911" and f.severity == "info" and probe in f.message for f in result.findings):
            why = (f"{SETUP_FALLBACK}: it picks the CUDA build only where `CUDA_HOME` is found, and the "
                   f"{sources} `.cu` file{'s' if sources > 1 else ''} of the run {'are' if sources > 1 else 'is'} reported "
                   f"on {'their' if sources > 1 else 'its'} own (NPU912)")
            out[i] = replace(result, findings=[
                replace(f, message=f"{f.message} ({why})")
                if f.code == "NPU911" and f.severity == "info" and probe in f.message and not f.fixable else f
                for f in result.findings])
    return out


# ----------------------------------------------------------------------------- (a) ROCm-only sources

_BLOCK_COMMENT = re.compile(rb"/\*.*?\*/", re.DOTALL)
_LINE_COMMENT = re.compile(rb"//[^\n]*")
_DIRECTIVE = re.compile(rb"^[ \t]*#[ \t]*(\w+)(.*)$")
_ROCM_MACRO = re.compile(rb"\b(?:USE_ROCM|__HIP_PLATFORM_AMD__|__HIP_PLATFORM_HCC__|__HIPCC__)\b")
_ROCM_IF = re.compile(rb"^\s*(?:defined\s*\(\s*(\w+)\s*\)|defined\s+(\w+)|(\w+))\s*$")
_RAISE = re.compile(rb"\s*(?:(?:STD_)?TORCH_CHECK(?:_NOT_IMPLEMENTED)?\s*\(\s*false\b[^;]*;|AT_ERROR\s*\([^;]*;"
                    rb"|throw\b[^;]*;|assert\s*\(\s*(?:false|0)\b[^;]*;|(?:std::)?abort\s*\(\s*\)\s*;)")


def _strip_comments(data: bytes) -> bytes:
    """The text without comments; a block comment keeps its newlines (line numbers stay)."""
    data = _BLOCK_COMMENT.sub(lambda m: b"\n" * m.group(0).count(b"\n"), data)
    return _LINE_COMMENT.sub(b"", data)


def _rocm_condition(directive: bytes, rest: bytes) -> bool:
    """`#ifdef USE_ROCM`, `#if defined(USE_ROCM)` (or `||` of such ROCm macros)."""
    if directive == b"ifdef":
        return bool(_ROCM_MACRO.fullmatch(rest.strip()))
    if directive != b"if":
        return False
    parts = [p for p in re.split(rb"\|\|", rest)]
    for part in parts:
        part = part.strip()
        while part.startswith(b"(") and part.endswith(b")"):
            part = part[1:-1].strip()
        match = _ROCM_IF.match(part)
        name = match and (match.group(1) or match.group(2) or match.group(3))
        if not name or not _ROCM_MACRO.fullmatch(name):
            return False
    return bool(parts)


def _stub(text: bytes) -> bool:
    """An `#else` branch that only raises: declarations and function bodies whose statements all
    raise (`TORCH_CHECK(false, ...)`, `throw`), or an `#error`; nothing that launches or defines a
    kernel."""
    if re.search(rb"__global__|__device__|<<<", text):
        return False
    bodies, depth, start = [], 0, 0
    for index, byte in enumerate(text):
        if byte == ord("{"):
            if depth == 0:
                start = index + 1
            depth += 1
        elif byte == ord("}"):
            depth -= 1
            if depth < 0:
                return False
            if depth == 0:
                bodies.append(text[start:index])
    if depth:
        return False
    lines = [line for line in text.splitlines() if line.strip()]
    if not bodies:
        return bool(lines) and all(re.match(rb"\s*#\s*error\b", line) for line in lines)
    return all(re.fullmatch(rb"(?:" + _RAISE.pattern + rb")+\s*", body) for body in bodies)


def rocm_only(data: bytes) -> str | None:
    """The reason a `.cu`/`.cuh` is ROCm-only (module's doc, a), or None."""
    if not _ROCM_MACRO.search(data):
        return None
    lines = _strip_comments(data).splitlines()
    depth, groups, in_rocm, else_text, had_else = 0, 0, False, [], False
    for line in lines:
        match = _DIRECTIVE.match(line)
        if match:
            directive, rest = match.group(1), match.group(2)
            if directive in (b"if", b"ifdef", b"ifndef"):
                if depth == 0:
                    if not _rocm_condition(directive, rest):
                        return None
                    groups += 1
                    in_rocm, else_text = True, []
                depth += 1
                continue
            if directive == b"endif":
                depth -= 1
                if depth < 0:
                    return None
                if depth == 0:
                    if not in_rocm and not _stub(b"\n".join(else_text)):
                        return None
                    in_rocm = False
                continue
            if directive in (b"else", b"elif", b"elifdef", b"elifndef") and depth == 1:
                if directive != b"else":
                    return None
                in_rocm, had_else = False, True
                continue
            if depth == 0 and directive not in (b"include", b"pragma"):
                return None
            if depth == 1 and not in_rocm:
                else_text.append(line)
            continue
        if depth == 0:
            if line.strip():
                return None
        elif depth >= 1 and not in_rocm:
            else_text.append(line)
    if depth or not groups:
        return None
    stub = "; its `#else` branch only raises" if had_else else ""
    return (f"{ROCM_ONLY}: its code outside includes and comments is all inside `#if` groups on a ROCm "
            f"macro (`USE_ROCM`, `__HIP_PLATFORM_AMD__`, `__HIPCC__`){stub}; a CUDA build compiles none of it")


# ----------------------------------------------------------------------------- (b) host code only

_DEVICE = re.compile(
    rb"__global__|__device__|<<<|\bcuda[A-Z]\w*\s*\(|\bcu[A-Z]\w*\s*\(|\bcudaLaunch|cooperative_groups|\bcg::"
    rb"|\bcu(?:blas|dnn|sparse|fft|rand|solver)\w*|\bnv[A-Z]\w*\s*\(|\bcub::|\bthrust::|\bcute::"
    rb"|CUTLASS_(?:DEVICE|GLOBAL)|cutlass::(?:\w+::)*(?:device|kernel|threadblock|warp|arch|epilogue|thread)::"
    rb"|\bGemmUniversal|\bDefaultGemm|__shfl|__syncthreads|\bthreadIdx\b|\bblockIdx\b|\bblockDim\b|\basm\b"
    rb"|getCurrentCUDAStream|\bat::cuda::|\bc10::cuda::|\bcuda::|CUDAGuard|CUDAStream|\bC10_CUDA\w*|\bAT_CUDA\w*"
    rb"|\bCUDA_KERNEL\w*"
    rb"|TORCH_LIBRARY_IMPL\s*\(\s*\w+\s*,\s*(?:CUDA|HIP)\b"
    rb"|#\s*include\s*[<\"](?:cub/|thrust/|cute/|cooperative_groups|cuda_runtime|cuda_fp8|mma|ATen/cuda|c10/cuda"
    rb"|cutlass/(?:gemm/(?:device|kernel|threadblock|warp|collective)|arch|epilogue|conv|pipeline))")
_QUOTED_INCLUDE = re.compile(rb'^[ \t]*#[ \t]*include[ \t]*"([^"]+)"', re.MULTILINE)
_HEADER_KERNEL = re.compile(rb"__global__|<<<|cudaLaunch")
_CPU_IMPL = re.compile(rb"TORCH_LIBRARY_IMPL\s*\(\s*\w+\s*,\s*CPU\b")


def _header_bytes(name: str, path: str | None, relpath_dir: str, results: list, paths: dict) -> bytes | None:
    """A quoted include's bytes: a file of the run beside the source (or in a folder above), else
    read through the whole-run cache; None when not found."""
    from .modpaths import result_bytes
    from .reviewcache import read_outside

    folder = relpath_dir
    by_rel = None
    while True:
        candidate = os.path.normpath(os.path.join(folder, name)).replace("\\", "/")
        if by_rel is None:
            by_rel = {r.relpath: r for r in results if r.relpath.lower().endswith((".h", ".hpp", ".cuh", ".inl"))}
        if candidate in by_rel:
            return result_bytes(by_rel[candidate], paths) or b""
        if not folder:
            break
        folder = os.path.dirname(folder)
    if path is None:
        return None
    folder = os.path.dirname(path)
    while folder:
        found, body = read_outside(os.path.join(folder, name))
        if found:
            return body
        parent = os.path.dirname(folder)
        folder = None if parent == folder else parent
    return None


def host_only(data: bytes, path: str | None, results: list, paths: dict, relpath: str = "") -> str | None:
    """The reason a `.cu` holds host code only (module's doc, b), or None."""
    code = _strip_comments(data)
    # (a host-side dispatcher calls kernels of other translation units: only a file that registers
    # CPU implementations, and no CUDA ones, is known to hold host code for the host)
    if _DEVICE.search(code) or not _CPU_IMPL.search(code):
        return None
    for match in _QUOTED_INCLUDE.finditer(code):
        name = match.group(1).decode("utf-8", "replace")
        if name.lower().endswith(".cuh"):
            return None
        body = _header_bytes(name, path, os.path.dirname(relpath), results, paths)
        if body is None or _HEADER_KERNEL.search(_strip_comments(body)):
            return None
    cpu = "; it registers CPU implementations"
    cutlass = " (CUTLASS host types only)" if b"cutlass" in code else ""
    return (f"{HOST_ONLY}: no `__global__` or `__device__` function, no `<<<` launch, no CUDA runtime call "
            f"and no CUTLASS kernel{cutlass}{cpu}; nothing in it runs on the GPU")


# ----------------------------------------------------------------------------- (c) toolchain helpers

_VERSION_READ = re.compile(r"`torch\.version\.cuda")
_CUDA_CLASS = re.compile(r"cuda\w*(?:extension|builder)|(?:extension|builder)\w*cuda", re.IGNORECASE)
CUDA_METHODS = frozenset({"assert_compatible"})


def _raises_on_none(func: ast.FunctionDef) -> bool:
    """The function turns a missing CUDA version into an explicit error: a `try` around the read
    whose handlers all raise, or an `if ... is None` / `if not ...` that raises."""
    for node in ast.walk(func):
        if (isinstance(node, ast.Try) and node.handlers
                and all(any(isinstance(s, ast.Raise) for s in h.body) for h in node.handlers)
                and any(isinstance(n, ast.Attribute) and n.attr == "cuda"
                        for n in ast.walk(ast.Module(node.body, [])))):
            return True
        if isinstance(node, ast.If) and any(isinstance(s, ast.Raise) for s in node.body):
            test = node.test
            if (isinstance(test, ast.Compare) and any(isinstance(op, ast.Is) for op in test.ops)
                    or isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not)):
                return True
    return False


def _enclosing(tree: ast.Module, line: int):
    """(class name or None, function) of the innermost top-level function or method holding `line`."""
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.lineno <= line <= (node.end_lineno or 0):
            return None, node
        if isinstance(node, ast.ClassDef) and node.lineno <= line <= (node.end_lineno or 0):
            for item in node.body:
                if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)) and item.lineno <= line <= (item.end_lineno or 0):
                    return node.name, item
            return node.name, None
    return None, None


def _toolchain_helpers(results: list, paths: dict) -> list:
    from .modpaths import result_bytes
    from .probes import parse_text

    candidates = [i for i, r in enumerate(results) if r.relpath.endswith(".py") and any(
        _open(f, "NPU990", True) and f.severity != "info" and _VERSION_READ.search(f.message) for f in r.findings)]
    if not candidates:
        return results
    trees: dict[int, ast.Module | None] = {}
    texts: dict[int, bytes] = {}

    def text(i: int) -> bytes:
        if i not in texts:
            texts[i] = result_bytes(results[i], paths) or b""
        return texts[i]

    def tree(i: int):
        if i not in trees:
            trees[i] = parse_text(text(i).decode("utf-8", "replace"))
        return trees[i]

    python = [i for i, r in enumerate(results) if r.relpath.endswith(".py")]

    def callers_ok(name: str, seen: set) -> list[str] | None:
        """The CUDA-extension methods every call of `name` ends in, through module-level helpers
        that are only called so too; None when a call is elsewhere (or there is none)."""
        if name in seen or len(seen) > 8:
            return None
        seen = seen | {name}
        word = re.compile(rb"\b" + re.escape(name.encode()) + rb"\b")
        ends: list[str] = []
        for j in python:
            if not word.search(text(j)):  # (byte pre-test: only files naming the helper are parsed)
                continue
            module = tree(j)
            if module is None:
                return None
            for node in ast.walk(module):
                if isinstance(node, ast.Name) and node.id == name or isinstance(node, ast.Attribute) and node.attr == name:
                    if isinstance(node, ast.Name) and not isinstance(node.ctx, ast.Load):
                        continue
                    cls, func = _enclosing(module, node.lineno)
                    if func is None:
                        if _in_import(module, node.lineno) or _defines(module, node.lineno, name):
                            continue
                        return None
                    if func.name == name and cls is None:
                        continue  # (its own definition)
                    if cls is not None:
                        if _CUDA_CLASS.search(cls) or func.name in CUDA_METHODS:
                            ends.append(f"`{cls}.{func.name}`")
                            continue
                        return None
                    deeper = callers_ok(func.name, seen)
                    if deeper is None:
                        return None
                    ends.extend(deeper)
        return ends or None

    out = list(results)
    for i in candidates:
        module = tree(i)
        if module is None:
            continue
        findings, changed = [], False
        for f in out[i].findings:
            if _open(f, "NPU990", True) and f.severity != "info" and _VERSION_READ.search(f.message):
                cls, func = _enclosing(module, f.line)
                lines = [f.line, *(line for line, _column, _source in f.also)]
                if (cls is None and func is not None and _raises_on_none(func)
                        and all(func.lineno <= line <= (func.end_lineno or 0) for line in lines)):
                    ends = callers_ok(func.name, set())
                    if ends:
                        shown = ", ".join(sorted(set(ends))[:4])
                        f = _lower(f, f"{TOOLCHAIN}: `{func.name}` raises its own error when the version is "
                                      f"missing, and is only reached from {shown}, which build or load CUDA "
                                      "extensions an NPU host never selects")
                        changed = True
            findings.append(f)
        if changed:
            out[i] = replace(out[i], findings=findings)
    return out


def _in_import(module: ast.Module, line: int) -> bool:
    return any(isinstance(n, (ast.Import, ast.ImportFrom)) and n.lineno <= line <= (n.end_lineno or n.lineno)
               for n in ast.walk(module))


def _defines(module: ast.Module, line: int, name: str) -> bool:
    """`__all__ = [..., "name"]`-like lines and the like are strings, not names: only a def counts."""
    return any(isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n.name == name and n.lineno == line
               for n in module.body)


# ----------------------------------------------------------------------------- (d) one extension, one finding

def _extension_lists(tree: ast.Module) -> list[tuple[str, int, list[str]]]:
    """(extension name, line, [source literals]) of each `CUDAExtension("name", [...])` call."""
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""
        if name != "CUDAExtension":
            continue
        args = list(node.args)
        label = args[0].value if args and isinstance(args[0], ast.Constant) and isinstance(args[0].value, str) else None
        sources = args[1] if len(args) > 1 else next((k.value for k in node.keywords if k.arg == "sources"), None)
        if label is None:
            label = next((k.value.value for k in node.keywords if k.arg == "name" and isinstance(k.value, ast.Constant)
                          and isinstance(k.value.value, str)), None)
        if label is None or not isinstance(sources, (ast.List, ast.Tuple)):
            continue
        if not all(isinstance(e, ast.Constant) and isinstance(e.value, str) for e in sources.elts):
            continue
        found.append((label, node.lineno, [e.value for e in sources.elts]))
    return found


def fold_extension_sources(results: list, paths: dict) -> list:
    """NPU912 once per `CUDAExtension` of a setup.py that lists several `.cu` files (module's doc, d)."""
    from .modpaths import result_bytes
    from .probes import parse_text

    errors = {r.relpath: i for i, r in enumerate(results) if r.relpath.lower().endswith(".cu")
              and any(_open(f, "NPU912") and f.severity == "error" for f in r.findings)}
    if len(errors) < 2:
        return results
    groups: list[tuple[str, str, int, list[int]]] = []
    for result in results:
        if os.path.basename(result.relpath) != "setup.py":
            continue
        data = result_bytes(result, paths) or b""
        if b"CUDAExtension" not in data or b".cu" not in data:  # (byte pre-test before a parse)
            continue
        tree = parse_text(data.decode("utf-8", "replace"))
        if tree is None:
            continue
        home = os.path.dirname(result.relpath)
        for label, line, sources in _extension_lists(tree):
            members = []
            for source in sources:
                rel = os.path.normpath(os.path.join(home, source)).replace("\\", "/")
                if rel in errors and errors[rel] not in members:
                    members.append(errors[rel])
            if len(members) >= 2:
                groups.append((label, result.relpath, line, members))
    listed: dict[int, int] = {}
    for _label, _setup, _line, members in groups:
        for i in members:
            listed[i] = listed.get(i, 0) + 1
    out = list(results)
    for label, setup, line, members in groups:
        members = sorted((i for i in members if listed[i] == 1), key=lambda i: results[i].relpath)
        if len(members) < 2:
            continue
        first, rest = members[0], members[1:]
        names = [results[i].relpath for i in rest]
        note = (f"{len(members)} CUDA sources of the extension `{label}` ({setup} line {line}), reported once "
                f"for the extension; also {', '.join(f'`{n}`' for n in names)}")
        out[first] = replace(out[first], findings=[
            replace(f, message=f"{f.message} ({note})") if _open(f, "NPU912") and f.severity == "error" else f
            for f in out[first].findings])
        for i in rest:
            out[i] = replace(out[i], findings=[f for f in out[i].findings
                                               if not (_open(f, "NPU912") and f.severity == "error")])
    return out
