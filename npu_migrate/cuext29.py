"""A `.cu` source only CUDA extension classes build: an NPU host never builds it (issue #16, round-29
audit DC#30). Whole run, from runplan.whole_run_passes, right after extreach23.py.

ColossalAI builds its kernels through extension classes. The sources of one live in a sources method
(extfolds19's reading: `sources_files`) of a class deriving from `_CudaExtension`:

    # extensions/cuda_extension.py
    class _CudaExtension(_CppExtension):
        def is_available(self) -> bool:
            return torch.cuda.is_available() or bool(os.environ.get("FORCE_CUDA", 0))

    # extensions/pybind/softmax/scaled_upper_triangle_masked_softmax_cuda.py
    class ScaledUpperTriangleMaskedSoftmaxCudaExtension(_CudaExtension):
        def sources_files(self):
            return [self.csrc_abs_path("kernel/cuda/scaled_upper_triang_masked_softmax_kernel.cu"), ...]

    # setup.py: ahead of time only with BUILD_EXT=1, and only `if ext.is_available()`
    # kernel/kernel_loader.py: just in time, the first extension of a loader whose is_available() holds

Both builds ask the class's `is_available()`, false on an NPU host (no CUDA; FORCE_CUDA is a build
node's opt-in), and the project builds its NPU ops with its own extension classes (settled.py's
reading of a class named for CUDA: rules/scopes.toml [settled] cuda_class). The `.cu` file's NPU912
error asks for no port work of its own: the op it implements is what to port, where a loader of it is
used there. Under the same reading as DeepSpeed's op builders (builders.py: "an op not built for
NPU", info) and buildgated.py (a `.cu` a CUDA-gated build compiles: info), the error becomes info
naming the classes.

The decision: an open NPU912 error on a `.cu` (its byte-identical copies folded in) whose path tail
is named by at least one sources method (extreach23.extension_classes), where every such class
derives, through the run's class lines, from a class whose name matches [settled] cuda_class
(`_CudaExtension`), and no Python file of the run names the file otherwise (a string holding its
name outside those classes: a setup.py's own `CUDAExtension(sources=[...])`, a JIT `load()` call).
Kept (the nearest true cases): a `.cu` a class not named for CUDA builds (`_CppExtension`, a
`TritonExtension`), a `.cu` a setup.py or a `load()` names directly, a class whose base chain the run
does not show.
"""

from __future__ import annotations

import ast
import dataclasses
import re
from typing import Optional

NEVER_BUILT = "built only by CUDA extension classes an NPU host never builds"
_DEPTH = 6


def _bases(tree: ast.Module, out: dict) -> None:
    """{class name: [base names]} of the module-level classes of one file (last part of a dotted base)."""
    for cls in tree.body:
        if isinstance(cls, ast.ClassDef):
            names = []
            for base in cls.bases:
                node = base.value if isinstance(base, ast.Subscript) else base
                names.append(node.attr if isinstance(node, ast.Attribute) else node.id if isinstance(node, ast.Name) else "")
            out.setdefault(cls.name, []).append(names)


def _cuda_derived(name: str, bases: dict, pattern: re.Pattern, depth: int = 0) -> Optional[str]:
    """The CUDA-named class `name` derives from (itself included), through every definition of each
    class name in the run; None where a chain ends elsewhere or is unknown."""
    if pattern.match(name):
        return name
    if depth > _DEPTH or name not in bases:
        return None
    found = None
    for names in bases[name]:
        hits = [_cuda_derived(b, bases, pattern, depth + 1) for b in names if b and b not in ("object", "ABC")]
        hit = next((h for h in hits if h), None)
        if hit is None:
            return None
        found = found or hit
    return found


def review(results: list, paths: Optional[dict] = None) -> list:
    """The results, with the NPU912 errors of the module docstring's shape lowered to info."""
    from .extreach23 import extension_classes, open_error
    from .settled import cuda_class

    targets = [(i, k) for i, r in enumerate(results) for k, f in enumerate(r.findings)
               if r.relpath.lower().endswith(".cu") and open_error(f)]
    if not targets:
        return results
    from . import astcache
    from .modpaths import RunTexts

    text_of = RunTexts(results, paths or {})
    pattern = cuda_class()
    python = [j for j, r in enumerate(results) if r.relpath.endswith(".py") and b".cu" in (text_of(j) or b"")]
    trees: dict = {}

    def tree(j: int):
        if j not in trees:
            trees[j] = astcache.parse(text_of(j) or b"")
        return trees[j]

    bases: Optional[dict] = None
    out = list(results)
    for i, k in targets:
        finding, relpath = results[i].findings[k], results[i].relpath
        base = relpath.rsplit("/", 1)[-1]
        found, named_otherwise = [], False
        for j in python:
            if base.encode() not in (text_of(j) or b""):
                continue
            parsed = tree(j)
            if parsed is None:
                named_otherwise = True
                break
            classes = extension_classes(parsed, relpath)
            inside = {id(n) for cls in classes for n in ast.walk(cls)}
            if any(isinstance(n, ast.Constant) and isinstance(n.value, str) and base in n.value and id(n) not in inside
                   for n in astcache.walk(parsed)):
                named_otherwise = True  # (a setup.py's own list, a JIT load: kept)
                break
            found.extend((j, cls) for cls in classes)
        if named_otherwise or not found:
            continue
        if bases is None:
            bases = {}
            for j, r in enumerate(results):
                data = text_of(j) or b"" if r.relpath.endswith(".py") else b""
                if b"class " in data and b"Extension" in data and (parsed := tree(j)) is not None:
                    _bases(parsed, bases)
        roots = [_cuda_derived(cls.name, bases, pattern) for _j, cls in found]
        if not all(roots):
            continue
        classes = ", ".join(dict.fromkeys(f"`{cls.name}` ({results[j].relpath}:{cls.lineno})" for j, cls in found))
        message = (f"{finding.message} ({NEVER_BUILT}: {classes}, derived from "
                   f"{', '.join(f'`{r}`' for r in dict.fromkeys(roots))}, whose builds ask `is_available()`, false "
                   f"without CUDA; the project builds its NPU ops with its own extension classes: port the op, "
                   f"not this file, where it is used there)")
        findings = list(out[i].findings)
        findings[k] = dataclasses.replace(finding, severity="info", message=message)
        out[i] = dataclasses.replace(out[i], findings=findings)
    return out
