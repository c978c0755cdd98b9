"""CUDA sources and build files whose findings repeat others (issue #16, round 17).

Three shapes, read across files (whole-run pass, runplan.whole_run_passes, after buildgated):

* **A helper `.cu` another reported `.cu` calls.** A `.cu` whose NPU912 finding is open, that
  registers no op (no TORCH_LIBRARY, m.def, m.impl or PYBIND11_MODULE) and names no `Tensor` (so
  it implements no op a binding file registers: no Python caller reaches it directly), holds
  `__global__` kernels (a host-only `.cu` such as vLLM's cuda_utils_kernels.cu may implement an op
  with integer arguments that torch_bindings.cpp registers) and defines host functions that another `.cu` of the run with its own NPU912
  finding calls (vLLM's nvfp4_ds_mla_cache_kernels.cu: two `launch_*` helpers called from
  cache_kernels.cu). Its kernels are ported with that caller's ops: its finding folds into the
  caller's, which names it ("also `x.cu`, whose `launch_a` it calls"). A `.cu` that registers ops,
  or whose functions no reported source calls, keeps its own finding.
* **A setup.py's CUDAExtension lines its sources' findings report.** The NPU911 finding of a
  setup.py naming `CUDAExtension`, where every `CUDAExtension(...)` call of the file lists a CUDA
  source with an NPU912 finding of the run (its own, or named in its folder's), and another finding
  of the same setup.py reports its CUDA requirement (`torch.version.cuda`, `CUDA_HOME`,
  `cuda.is_available`): the declarations repeat those findings. The NPU911 finding folds into the
  setup.py's CUDA-requirement finding, which names its lines. An extension whose sources have no
  finding keeps the NPU911 finding.
* **A host-only `.cu` buildgated lowered.** buildgated's wording ("the ops it registers have no
  NPU kernel") is wrong for a `.cu` with no `__global__`/`__device__` function, no `<<<`, no
  CUTLASS, no included `.cuh`, no registration and no `Tensor`, every function of which outside an
  anonymous namespace another reported `.cu` calls (xformers' pt_stable_utils.cu, a
  cudaGetDeviceProperties cache): it gets builders.NO_KERNEL's "no kernel in the file" wording and
  names its callers. A host-only file with a function no reported `.cu` calls (vLLM's
  cuda_utils_kernels.cu: `get_max_shared_memory_per_block_device_attribute` is an op
  torch_bindings.cpp registers) keeps the wording.
* **CUDA build variables of a Dockerfile that runs `nvcc`.** A Dockerfile with no CUDA base-image
  finding (`FROM ${BASE_IMAGE}`, another project image: redundant.fold_into_base_image has nothing
  to fold into) whose steps run `nvcc` (vLLM's docker/Dockerfile.efa builds DeepEP so): its NPU703
  CUDA build variables (`TORCH_CUDA_ARCH_LIST`, `CUDA_HOME`, `NCCL_ROOT`) are inputs of a build
  that needs the CUDA toolkit: info naming the step, a skipped scope. NCCL runtime settings
  (`NCCL_NET_PLUGIN`) and a Dockerfile without `nvcc` keep their findings.

Cheap first: nothing is read without an NPU912 finding on a `.cu`; `.cu` files are byte-tested
(a registration, a host function's name); one setup.py with an NPU911 `CUDAExtension` finding is
parsed.
"""

from __future__ import annotations

import ast
import posixpath
import re
from dataclasses import replace
from typing import Optional

_HOST_FUNCTION = re.compile(
    rb"^[ \t]*(?:template[ \t]*<[^>\n]*>[ \t\n]*)?(?:inline[ \t]+)?[\w:]+(?:[ \t]+|[ \t]*[*&]+[ \t]*)"
    rb"(\w+)[ \t]*\(([^;{}]*)\)[ \t\n]*\{", re.MULTILINE)
_CUDA_SOURCE = re.compile(r"^[\w./\-]+\.cu$")
_RANK = {"info": 0, "warning": 1, "error": 2}
_REQUIREMENT = re.compile(r"torch\.version\.cuda|CUDA_HOME|cuda\.is_available|CUDA_VERSION")
_KEYWORDS = {"if", "for", "while", "switch", "return", "sizeof", "main", "constexpr", "const", "static",
             "inline", "operator", "template", "typename", "auto", "min", "max", "else", "do", "case"}


_REGISTRATION = re.compile(rb"\bTORCH_LIBRARY\w*|\bPYBIND11_MODULE\b|\bm\s*\.\s*(?:def|impl)\s*\(|\bSTABLE_TORCH_LIBRARY\w*")


def registers_ops(data: bytes) -> bool:
    """Whether a C++/CUDA source registers an op with PyTorch or Python (TORCH_LIBRARY, m.def,
    m.impl, PYBIND11_MODULE)."""
    return bool(_REGISTRATION.search(data))


_DEVICE_CODE = re.compile(rb"__global__|__device__|<<<|\bcutlass|\bcute::|\basm\b|\bthreadIdx\b|\bTensor\b"
                          rb"|^[ \t]*#[ \t]*include[ \t]*\"[^\"]+\.cuh\"", re.MULTILINE)


def host_only(data: bytes) -> bool:
    """A `.cu` of host code only: no `__global__` or `__device__` function, no `<<<` launch, no
    CUTLASS, no included `.cuh`, no op registration and no `Tensor` (not an op's implementation
    that a binding file registers)."""
    return not _DEVICE_CODE.search(data) and not registers_ops(data)


def _open(finding) -> bool:
    from .moot import is_moot

    return finding.code == "NPU912" and not finding.fixable and finding.cell is None and not is_moot(finding)


def review(results: list, paths: dict) -> list:
    """The four reviews of the module docstring, over a run's results (a new list)."""
    out = fold_setup_extensions(name_host_helpers(fold_helper_sources(results, paths), paths), paths)
    return nvcc_dockerfiles(out, paths)


# ----------------------------------------------------------------------------- Dockerfiles that run nvcc

NVCC_PHRASE = "in a Dockerfile that runs `nvcc`"  # (moot.PHRASES carries it)
_NVCC = re.compile(rb"\bnvcc\b")


def _dockerfile(relpath: str) -> bool:
    name = posixpath.basename(relpath).lower()
    return name.startswith(("dockerfile", "containerfile")) or name.endswith(".dockerfile")


def nvcc_line(data: bytes) -> Optional[int]:
    """The first line (1-based) of a Dockerfile that runs `nvcc` outside a comment, or None."""
    for number, line in enumerate(data.splitlines(), 1):
        if not line.lstrip().startswith(b"#") and _NVCC.search(line):
            return number
    return None


def nvcc_dockerfiles(results: list, paths: dict) -> list:
    """Module's doc, fourth shape: CUDA build variables (NPU703) of a Dockerfile without a CUDA
    base-image finding (NPU707: redundant.fold_into_base_image folds them there) whose steps run
    `nvcc`: info naming that step, a skipped scope (moot.py)."""
    from .modpaths import RunTexts
    from .moot import is_moot
    from .redundant import IMAGE_VARIABLE

    def build_variable(f) -> bool:
        return (f.code == "NPU703" and not f.fixable and not is_moot(f)
                and bool(IMAGE_VARIABLE.search((f.source or "").split("=", 1)[0])))

    files = [i for i, r in enumerate(results) if _dockerfile(r.relpath) and any(map(build_variable, r.findings))
             and not any(f.code == "NPU707" for f in r.findings)]
    if not files:
        return results
    texts = RunTexts(results, paths)
    out = list(results)
    for k in files:
        line = nvcc_line(texts(k) or b"")
        if line is None:
            continue
        why = (f"{NVCC_PHRASE} (line {line}): a CUDA build input of an image that builds only where the CUDA "
               f"toolkit is installed, never for an NPU host")
        out[k] = replace(out[k], findings=[
            replace(f, severity="info", message=f"{f.message} ({why})") if build_variable(f) else f
            for f in out[k].findings])
    return out


# ----------------------------------------------------------------------------- host-only .cu helpers

HOST_ONLY = ("no kernel in the file: no `__global__` or `__device__` function, no `<<<` launch and no op "
             "registration, only host code that the reported {callers} call{s}")


def exported(data: bytes) -> bytes:
    """A C++ source without its anonymous-namespace blocks (`namespace {...}`): what other files
    may call."""
    out, pos = [], 0
    for match in re.finditer(rb"\bnamespace[ \t\n]*\{", data):
        if match.start() < pos:
            continue
        depth, i = 1, match.end()
        while i < len(data) and depth:
            depth += {ord("{"): 1, ord("}"): -1}.get(data[i], 0)
            i += 1
        out.append(data[pos:match.start()])
        pos = i
    out.append(data[pos:])
    return b"".join(out)


def _callers(names: list[str], k: int, cu: list[int], texts) -> dict[str, list[int]]:
    """{name: [indexes of the other reported `.cu` files that call it]}."""
    needles = {n: re.compile(rb"(?<![\w.])(?:\w+::)*" + re.escape(n.encode()) + rb"\s*(?:<[^;{}()]*>\s*)?\(")
               for n in names}
    found: dict[str, list[int]] = {}
    for i in cu:
        if i == k:
            continue
        other = texts(i) or b""
        defined = None
        for n, rx in needles.items():
            if n.encode() in other and rx.search(other):
                defined = host_functions(other) if defined is None else defined
                if n not in defined:
                    found.setdefault(n, []).append(i)
    return found


def name_host_helpers(results: list, paths: dict) -> list:
    """The NPU912 info of a `.cu` a CUDA-gated build compiles (buildgated's wording: "the ops it
    registers ...") where the file is host code only (module's doc, third shape): every function it
    exports is called by another reported `.cu`, so it registers no op and has no kernel; it gets
    the "no kernel in the file" wording of builders.NO_KERNEL, naming its callers."""
    from .buildgated import REGISTERS
    from .modpaths import RunTexts

    hosts = [i for i, r in enumerate(results) if r.relpath.lower().endswith(".cu") and any(
        f.code == "NPU912" and not f.fixable and f.severity == "info" and REGISTERS in f.message for f in r.findings)]
    if not hosts:
        return results
    texts = RunTexts(results, paths)
    cu = [i for i, r in enumerate(results) if r.relpath.lower().endswith(".cu")
          and any(f.code == "NPU912" and not f.fixable for f in r.findings)]
    out = list(results)
    for k in hosts:
        data = texts(k) or b""
        if not data or not host_only(data):
            continue
        names = host_functions(exported(data))
        if not names:
            continue
        callers = _callers(names, k, cu, texts)
        if set(callers) != set(names):
            continue  # (a function no reported source calls may be an op a binding file registers)
        rels = sorted({results[i].relpath for found in callers.values() for i in found})
        shown = ", ".join(f"`{r}`" for r in rels[:3]) + (f" and {len(rels) - 3} more" if len(rels) > 3 else "")
        wording = HOST_ONLY.format(callers=f"source{'s' if len(rels) > 1 else ''} {shown}",
                                   s="" if len(rels) > 1 else "s")
        out[k] = replace(out[k], findings=[
            replace(f, message=f.message.replace(REGISTERS, wording))
            if f.code == "NPU912" and not f.fixable and REGISTERS in f.message else f for f in out[k].findings])
    return out


# ----------------------------------------------------------------------------- helper .cu files

def host_functions(data: bytes) -> list[str]:
    """Names of the non-static host functions a CUDA source defines (no `__global__`,
    `__device__` or `static` on the definition's line)."""
    names = []
    for match in _HOST_FUNCTION.finditer(data):
        line = data[data.rfind(b"\n", 0, match.start()) + 1:match.end()]
        if re.search(rb"__global__|__device__|__host__|\bstatic\b", line):
            continue
        name = match.group(1).decode("ascii", "replace")
        if name not in _KEYWORDS and name not in names:
            names.append(name)
    return names


def fold_helper_sources(results: list, paths: dict) -> list:
    """Module's doc, first shape."""
    from .modpaths import RunTexts

    cu = [i for i, r in enumerate(results) if r.relpath.lower().endswith(".cu") and any(map(_open, r.findings))]
    if len(cu) < 2:
        return results
    texts = RunTexts(results, paths)
    out = list(results)
    folded: set[int] = set()
    for k in cu:
        data = texts(k) or b""
        if not data or b"__global__" not in data or registers_ops(data) or re.search(rb"\bTensor\b", data):
            continue  # (a file naming `Tensor`, or of host code only, may implement an op a binding file registers)
        names = host_functions(data)
        if not names:
            continue
        callers: dict[int, list[str]] = {}
        for name, found in _callers(names, k, [i for i in cu if i not in folded], texts).items():
            for i in found:
                callers.setdefault(i, []).append(name)
        if not callers:
            continue
        first = min(callers)
        base = posixpath.relpath(results[k].relpath, posixpath.dirname(results[first].relpath) or ".")
        calls = ", ".join(f"`{n}`" for n in callers[first])
        note = f"also `{base}`, whose {calls} it calls; that file registers no op"
        target = next((f for f in out[first].findings if _open(f)), None)
        helper = next(f for f in out[k].findings if _open(f))
        if target is None or _RANK.get(target.severity, 0) < _RANK.get(helper.severity, 0):
            continue  # (an error does not fold into an info)
        out[first] = replace(out[first], findings=[
            replace(f, message=f"{f.message} ({note})") if f is target else f for f in out[first].findings])
        out[k] = replace(out[k], findings=[f for f in out[k].findings if not _open(f)])
        folded.add(k)
    return out


# ----------------------------------------------------------------------------- setup.py CUDAExtension lines

def extension_sources(text: str) -> Optional[list[tuple[int, list[str]]]]:
    """(line, CUDA source strings) of each `CUDAExtension(...)` call of a setup.py source; None
    when it does not parse."""
    from . import astcache

    tree = astcache.parse(text.encode())
    if tree is None:
        return None
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
            if name == "CUDAExtension":
                sources = [n.value.strip() for n in ast.walk(node) if isinstance(n, ast.Constant)
                           and isinstance(n.value, str) and _CUDA_SOURCE.match(n.value.strip())]
                found.append((node.lineno, sources))
    return found


def _reported_sources(results: list) -> set:
    """Relpaths of the CUDA sources an NPU912 finding reports: their own, or their folder's
    ("also `a/b.cu`" or "also `b.cu`")."""
    reported = set()
    for r in results:
        if not r.relpath.lower().endswith((".cu", ".cuh")):
            continue
        ours = [f for f in r.findings if f.code == "NPU912" and not f.fixable]
        if not ours:
            continue
        reported.add(r.relpath)
        folder = posixpath.dirname(r.relpath)
        for f in ours:
            for name in re.findall(r"`([^`]+\.cuh?)`", f.message):
                reported.add(name)
                reported.add(posixpath.join(folder, name))
    return reported


def fold_setup_extensions(results: list, paths: dict) -> list:
    """Module's doc, second shape."""
    from .modpaths import RunTexts

    setups = [i for i, r in enumerate(results) if posixpath.basename(r.relpath) == "setup.py"
              and any(f.code == "NPU911" and not f.fixable and "CUDAExtension" in (f.source or "") for f in r.findings)]
    if not setups:
        return results
    texts = RunTexts(results, paths)
    reported = _reported_sources(results)
    out = list(results)
    for k in setups:
        data = texts(k)
        if not data:
            continue
        extensions = extension_sources(data.decode("utf-8", "replace"))
        if not extensions:
            continue
        folder = posixpath.dirname(results[k].relpath)
        if not all(any(posixpath.normpath(posixpath.join(folder, s)) in reported for s in sources)
                   for _line, sources in extensions):
            continue
        findings = out[k].findings
        declared = [f for f in findings if f.code == "NPU911" and not f.fixable and "CUDAExtension" in (f.source or "")]
        requirement = next((f for f in sorted(findings, key=lambda f: (f.line, f.column))
                            if f not in declared and not f.fixable and f.severity in ("error", "warning")
                            and _REQUIREMENT.search(f"{f.source or ''} {f.message}")), None)
        if requirement is None:
            continue
        lines = sorted({line for line, _s in extensions})
        note = (f"also the `CUDAExtension` declarations at line{'s' if len(lines) > 1 else ''} "
                f"{', '.join(map(str, lines))}: each extension's CUDA sources carry their own finding")
        out[k] = replace(out[k], findings=[
            replace(f, message=f"{f.message} ({note})") if f is requirement else f
            for f in findings if not any(f is d for d in declared)])
    return out
