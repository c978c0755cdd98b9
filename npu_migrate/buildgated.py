"""CUDA sources that the project's own build compiles only on a CUDA host (issue #16, round 16).

NPU912 says "this `.cu` file's kernels do not run on an NPU". Two shapes where that is not a
failure on an NPU host, read across files (whole-run pass, runplan.whole_run_passes):

* **A build gated on CUDA.** The nearest setup.py above the source adds CUDA sources (a string
  naming a `.cu` file or a `*.cu` glob, and every variable built from one) and names
  `CUDAExtension` only inside branches an NPU host never takes: the test of the `if` is false there
  (`torch.cuda.is_available()`, `torch.version.cuda`, `CUDA_HOME` read as None, a `_is_cuda()`-style
  helper, a `FORCE_CUDA`-style variable at its default), or the source sits in the `else` of a test
  that is true there. xformers adds its `*.cu` glob only so. Or the CMakeLists.txt beside that
  setup.py returns before its first `.cu` source unless a target variable is "cuda" (`if (NOT
  VLLM_TARGET_DEVICE STREQUAL "cuda" ...) ... return()`), and the setup.py picks that target from
  `torch.version.cuda`, which is None on an NPU host (vLLM). The NPU912 error becomes **info**
  (not a named scope: reviewers read the ops those kernels register as port work): the kernels
  are never compiled on an NPU host, and the ops they register have no NPU kernel there, so their
  Python callers are what to review. A source that a Python file other than that setup.py names
  next to `cpp_extension` (a JIT load) keeps its error, and so does every source of a setup.py
  that names `CUDAExtension` or a CUDA source in any branch an NPU host may take.
* **A kernel-less header its includers report.** A `.cuh` folder (group_cuda_headers reports a
  folder's headers once) whose headers hold no `__global__` kernel and are each included (`#include`)
  by a run file outside that folder, every such includer carrying its own NPU912 finding (or folded
  into its folder's finding): the header adds nothing the includers' findings do not say. The
  folder's finding goes, and the first includer's NPU912 finding names the headers it includes.

Cheap first: nothing runs without an open NPU912 error on a `.cu`/`.cuh`; one setup.py per build
folder is parsed (and its CMakeLists.txt read through reviewcache.read_outside), once per run;
Python files are only byte-tested for the sources' names; `.cu`/`.cuh` files are read only where
a kernel-less header folder is in the run.
"""

from __future__ import annotations

import ast
import os
import posixpath
import re
from dataclasses import replace
from typing import Optional

REGISTERS = "the ops it registers have no NPU kernel: review their Python callers"
GATED = "not compiled on an NPU host ({where} builds CUDA sources only when {when}); " + REGISTERS

_CUDA_SOURCE = re.compile(r"^[\w*./\\${}\-]*[\w*}]\.cu$")
_IS_CUDA_HELPER = re.compile(r"^_?(?:is_)?cuda(?:_\w+)?$|^_?is_cuda\w*$", re.IGNORECASE)
_NONE_ATOMS = {"torch.version.cuda", "CUDA_HOME", "torch.utils.cpp_extension.CUDA_HOME", "cpp_extension.CUDA_HOME"}
_ENV_READS = {"os.getenv", "os.environ.get", "getenv", "environ.get"}


def _open_error(finding) -> bool:
    from .moot import is_moot

    return (finding.code == "NPU912" and finding.severity == "error" and not finding.fixable
            and finding.cell is None and not is_moot(finding))


def _dotted(node) -> str:
    from . import astcache

    return astcache.dotted(node) or ""


# ----------------------------------------------------------------------------- a condition on an NPU host

def npu_value(node: ast.AST):
    """What a build condition is on an NPU host: True, False, or None (cannot tell). CUDA reads
    are absent there (`torch.cuda.is_available()` False, `torch.version.cuda` and `CUDA_HOME` None,
    a `_is_cuda()` helper False) and a `FORCE_CUDA`-style variable is at its default."""
    if isinstance(node, ast.BoolOp):
        values = [npu_value(v) for v in node.values]
        if isinstance(node.op, ast.And):
            return False if False in values else (True if all(v is True for v in values) else None)
        return True if True in values else (False if all(v is False for v in values) else None)
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
        value = npu_value(node.operand)
        return None if value is None else not value
    if _dotted(node) in _NONE_ATOMS:
        return False
    if isinstance(node, ast.Call):
        name = _dotted(node.func)
        if name.endswith("cuda.is_available") or (not node.args and _IS_CUDA_HELPER.match(name.rsplit(".", 1)[-1])):
            return False
    if isinstance(node, ast.Compare) and len(node.ops) == 1:
        left, op, right = node.left, node.ops[0], node.comparators[0]
        if isinstance(op, (ast.Is, ast.IsNot)) and isinstance(right, ast.Constant) and right.value is None \
                and _dotted(left) in _NONE_ATOMS:
            return isinstance(op, ast.Is)
        default = _env_default(left)
        if default is not None and isinstance(right, ast.Constant) and isinstance(op, (ast.Eq, ast.NotEq)):
            return (default == right.value) == isinstance(op, ast.Eq)
    if isinstance(node, ast.expr):
        from .testscopes import false_on_npu

        try:
            if false_on_npu(ast.unparse(node)):
                return False
        except (ValueError, RecursionError):
            return None
    return None


def _env_default(node: ast.AST) -> Optional[str]:
    """The default of `os.getenv("FORCE_CUDA", "0")`-style reads of a CUDA build variable."""
    if not (isinstance(node, ast.Call) and _dotted(node.func) in _ENV_READS and len(node.args) == 2):
        return None
    name, default = node.args
    if (isinstance(name, ast.Constant) and isinstance(name.value, str) and "CUDA" in name.value.upper()
            and isinstance(default, ast.Constant) and isinstance(default.value, str)):
        return default.value
    return None


# ----------------------------------------------------------------------------- setup.py

def setup_gate(text: str) -> Optional[tuple[int, str]]:
    """(line, condition) of the first branch the setup.py source `text` adds CUDA sources in, when
    it adds them and names `CUDAExtension` only in branches an NPU host never takes; else None."""
    from . import astcache

    if ".cu" not in text and "CUDAExtension" not in text:
        return None
    tree = astcache.parse(text.encode())
    if tree is None:
        return None
    parent = astcache.parents(tree)
    variables: set[str] = set()
    assigns = [n for n in ast.walk(tree) if isinstance(n, ast.Assign) and len(n.targets) == 1
               and isinstance(n.targets[0], ast.Name)]
    for _ in range(3):  # (variables built from CUDA sources, to a fixed point in a few rounds)
        for node in assigns:
            if any(_is_cuda_ref(n, variables) for n in ast.walk(node.value)):
                variables.add(node.targets[0].id)
    gates = []
    for node in ast.walk(tree):
        if not _is_cuda_ref(node, variables, extension=True):
            continue
        if isinstance(parent.get(id(node)), (ast.Import, ast.ImportFrom, ast.alias)):
            continue
        if _in_cuda_assign(node, parent, variables):
            continue  # (a variable built from CUDA sources: its uses are checked)
        gate = _untaken_branch(node, parent)
        if gate is None:
            return None
        gates.append(gate)
    if not gates:
        return None
    first = min(gates, key=lambda g: g.lineno)
    condition = " ".join((ast.get_source_segment(text, first.test) or ast.unparse(first.test)).split())
    condition = condition.replace("( ", "(").replace(" )", ")")
    if len(condition) > 120:
        condition = condition[:117] + "..."
    return first.lineno, condition


def _is_cuda_ref(node: ast.AST, variables: set, extension: bool = False) -> bool:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return bool(_CUDA_SOURCE.match(node.value.strip()))
    if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load):
        return node.id in variables or (extension and node.id == "CUDAExtension")
    if extension and isinstance(node, ast.Attribute) and node.attr == "CUDAExtension":
        return True
    return False


def _in_cuda_assign(node: ast.AST, parent: dict, variables: set) -> bool:
    current = parent.get(id(node))
    while current is not None and not isinstance(current, ast.stmt):
        current = parent.get(id(current))
    return (isinstance(current, ast.Assign) and len(current.targets) == 1
            and isinstance(current.targets[0], ast.Name) and current.targets[0].id in variables
            and not any(isinstance(n, ast.Call) and _dotted(n.func).rsplit(".", 1)[-1] == "CUDAExtension"
                        for n in ast.walk(current.value)))


def _untaken_branch(node: ast.AST, parent: dict) -> Optional[ast.If]:
    """The `if` whose branch holding `node` an NPU host never takes, or None."""
    child, current = node, parent.get(id(node))
    while current is not None and not isinstance(current, ast.Module):
        if isinstance(current, (ast.If, ast.IfExp)):
            in_body = child in current.body if isinstance(current.body, list) else child is current.body
            in_else = child in current.orelse if isinstance(current.orelse, list) else child is current.orelse
            value = npu_value(current.test) if (in_body or in_else) else None
            if (in_body and value is False) or (in_else and value is True):
                return current
        child, current = current, parent.get(id(current))
    return None


# ----------------------------------------------------------------------------- CMakeLists.txt

_CMAKE_NOT_CUDA = re.compile(r'\bif\s*\(\s*NOT\s+\$?\{?(\w+)\}?\s+STREQUAL\s+"cuda"', re.IGNORECASE)
_CMAKE_SOURCE = re.compile(r'[\w/${}\-]+\.cu\b')
_CMAKE_RETURN = re.compile(r'\breturn\s*\(\s*\)')


def cmake_gate(cmake: str, setup: str) -> Optional[tuple[int, str]]:
    """(line, target variable) of a CMakeLists.txt `if (NOT VAR STREQUAL "cuda" ...)` whose block
    returns before the file's first `.cu` source, where the setup.py text `setup` sets VAR from
    `torch.version.cuda`; else None."""
    text = re.sub(r"#[^\n]*", "", cmake)
    first = _CMAKE_SOURCE.search(text)
    if first is None:
        return None
    for match in _CMAKE_NOT_CUDA.finditer(text, 0, first.start()):
        var = match.group(1)
        if _CMAKE_RETURN.search(text, match.end(), first.start()) and var in setup and "torch.version.cuda" in setup:
            return text.count("\n", 0, match.start()) + 1, var
    return None


# ----------------------------------------------------------------------------- the pass

def review(results: list, paths: dict) -> list:
    """Both reviews of the module docstring, over a run's results (a new list)."""
    return fold_kernelless_headers(review_gated(results, paths), paths)


def review_gated(results: list, paths: dict) -> list:
    """NPU912 errors of CUDA sources a CUDA-gated build compiles (module's doc, first shape): info."""
    from .modpaths import RunTexts

    sources = [i for i, r in enumerate(results)
               if r.relpath.lower().endswith((".cu", ".cuh")) and any(map(_open_error, r.findings))]
    if not sources:
        return results
    setups = {posixpath.dirname(r.relpath): i for i, r in enumerate(results)
              if posixpath.basename(r.relpath) == "setup.py"}
    if not setups:
        return results
    texts = RunTexts(results, paths)
    gates: dict[str, Optional[str]] = {}
    out = list(results)
    lowered: dict[int, str] = {}
    for k in sources:
        folder = _build_folder(results[k].relpath, setups)
        if folder is None:
            continue
        if folder not in gates:
            gates[folder] = _gate(folder, setups[folder], results, paths, texts)
        if gates[folder] is not None:
            lowered[k] = gates[folder]
    if not lowered:
        return results
    jit = _jit_named({posixpath.basename(results[k].relpath) for k in lowered}, results, texts, setups)
    for k, why in lowered.items():
        if posixpath.basename(results[k].relpath) in jit:
            continue
        out[k] = replace(out[k], findings=[
            replace(f, severity="info", message=f"{f.message} ({why})") if _open_error(f) else f
            for f in out[k].findings])
    return out


def _build_folder(relpath: str, setups: dict) -> Optional[str]:
    folder = posixpath.dirname(relpath)
    while True:
        if folder in setups:
            return folder
        if not folder:
            return None
        folder = posixpath.dirname(folder)


def _gate(folder: str, index: int, results: list, paths: dict, texts) -> Optional[str]:
    data = texts(index)
    if data is None:
        return None
    text = data.decode("utf-8", "replace")
    setup_rel = results[index].relpath
    found = setup_gate(text)
    if found is not None:
        line, condition = found
        return GATED.format(where=f"{setup_rel}:{line}", when=f"`{condition}`, false on an NPU host")
    if "torch.version.cuda" not in text:
        return None
    from .reviewcache import read_outside

    path = paths.get(setup_rel)
    if path is None:
        return None
    cmake_rel = posixpath.join(folder, "CMakeLists.txt")
    _found, cmake = read_outside(os.path.join(os.path.dirname(path), "CMakeLists.txt"))
    if cmake is None:
        return None
    gate = cmake_gate(cmake.decode("utf-8", "replace"), text)
    if gate is None:
        return None
    line, var = gate
    return GATED.format(where=f"{cmake_rel}:{line}",
                        when=f'`{var}` is "cuda", which {setup_rel} picks only where `torch.version.cuda` is set, '
                             f'never on an NPU host')


def _jit_named(names: set, results: list, texts, setups: dict) -> set:
    """The source file names a Python file other than a build's setup.py names beside
    `cpp_extension` (a JIT build of the source): those keep their error."""
    setup_files = {results[i].relpath for i in setups.values()}
    needles = {n: n.encode() for n in names}
    named: set = set()
    for i, r in enumerate(results):
        if not r.relpath.endswith(".py") or r.relpath in setup_files:
            continue
        data = texts(i) or b""
        if b"cpp_extension" not in data or b".cu" not in data:
            continue
        named |= {n for n, b in needles.items() if b in data}
    return named


# ----------------------------------------------------------------------------- kernel-less headers

_INCLUDE = re.compile(rb'^[ \t]*#[ \t]*include[ \t]*[<"]([^>"]+)[>"]', re.MULTILINE)
_KERNEL = re.compile(rb"__global__")


def fold_kernelless_headers(results: list, paths: dict) -> list:
    """The NPU912 finding of a folder of kernel-less `.cuh` headers whose includers report their
    own (module's doc, second shape): folded into the first includer's finding."""
    from .modpaths import RunTexts

    hosts = [i for i, r in enumerate(results) if r.relpath.lower().endswith(".cuh")
             and any(map(_open_error, r.findings))]  # (a header folder already info or a scope stays so)
    if not hosts:
        return results
    texts = RunTexts(results, paths)
    cuda = [i for i, r in enumerate(results) if r.relpath.lower().endswith((".cu", ".cuh"))]
    by_folder: dict[str, list[int]] = {}
    for i in cuda:
        if results[i].relpath.lower().endswith(".cuh"):
            by_folder.setdefault(posixpath.dirname(results[i].relpath), []).append(i)
    out = list(results)
    for host in hosts:
        folder = posixpath.dirname(results[host].relpath)
        headers = by_folder.get(folder, [])
        if any(_KERNEL.search(texts(i) or b"__global__") for i in headers):
            continue
        header_rels = {results[i].relpath for i in headers}
        includers: dict[str, list[int]] = {}
        for i in cuda:
            if results[i].relpath in header_rels:
                continue
            data = texts(i) or b""
            if b"#" not in data:
                continue
            for included in _INCLUDE.findall(data):
                name = included.decode("utf-8", "replace").replace("\\", "/")
                for rel in header_rels:
                    if ("/" + rel).endswith("/" + name.lstrip("./")):
                        includers.setdefault(rel, []).append(i)
        if set(includers) != header_rels:
            continue  # (a header nothing in the run includes keeps the folder's finding)
        every = sorted({i for found in includers.values() for i in found})
        folded = _folded_names(out)
        if not all(_reported(out[i], folded) for i in every):
            continue
        # (the note goes to a source with kernels of its own: a kernel-less includer's finding may go next)
        carriers = [c for c in dict.fromkeys(_carrier(out, i) for i in every) if c is not None]
        first = next((i for i in carriers if _KERNEL.search(texts(i) or b"")), carriers[0] if carriers else None)
        if first is None:
            continue
        names = ", ".join(sorted(posixpath.relpath(rel, folder) for rel in header_rels))
        note = (f"also the kernel-less CUDA headers of `{folder}/`, included by {len(every)} reported "
                f"source{'s' if len(every) > 1 else ''}: {names}")
        out[first] = replace(out[first], findings=[
            replace(f, message=f"{f.message} ({note})") if f.code == "NPU912" and not f.fixable else f
            for f in out[first].findings])
        out[host] = replace(out[host], findings=[f for f in out[host].findings if not _open_error(f)])
    return out


def _folded_names(results: list) -> set:
    """(folder, file name) of the CUDA sources an NPU912 finding of their folder names."""
    names = set()
    for r in results:
        if not r.relpath.lower().endswith((".cu", ".cuh")):
            continue
        folder = posixpath.dirname(r.relpath)
        for f in r.findings:
            if f.code == "NPU912" and not f.fixable and "also " in f.message:
                names |= {(folder, w.strip("`,;()")) for w in f.message.split("also ", 1)[1].split()}
    return names


def _carrier(results: list, i: int) -> Optional[int]:
    """The result whose NPU912 finding reports the CUDA source `i`: its own, or its folder's."""
    if any(f.code == "NPU912" and not f.fixable for f in results[i].findings):
        return i
    folder, base = posixpath.split(results[i].relpath)
    for k, r in enumerate(results):
        if posixpath.dirname(r.relpath) == folder and any(
                f.code == "NPU912" and not f.fixable and "also " in f.message
                and base in f.message.split("also ", 1)[1].replace(",", " ").replace(")", " ").split() for f in r.findings):
            return k
    return None


def _reported(result, folded: set) -> bool:
    """Whether a CUDA source carries an NPU912 finding, or is named in its folder's one."""
    if any(f.code == "NPU912" and not f.fixable for f in result.findings):
        return True
    return (posixpath.dirname(result.relpath), posixpath.basename(result.relpath)) in folded
