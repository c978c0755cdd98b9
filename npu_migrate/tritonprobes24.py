"""A Triton helper module whose TMA descriptor is only an alias probed with `hasattr` (issue #16,
precision wave 24, round-24 audit BQ#35).

platforms.triton_on_npu classes a project's Triton kernels as running on its own NPU backend
(Triton-Ascend) and keeps the NPU910 error of a file that holds what Triton-Ascend does not
compile (platforms._NOT_PORTABLE: inline PTX, TMA descriptors, ...). dominators22.probed_descriptors
lets through a `TensorDescriptor` imported in a probing `try`. A helper module of the same kernels
(`fla/op.py`) holds the marker in another probing shape:

    if hasattr(triton.language, "_experimental_make_tensor_descriptor"):
        make_tensor_descriptor = triton.language._experimental_make_tensor_descriptor
    elif hasattr(triton.language, "make_tensor_descriptor"):
        make_tensor_descriptor = triton.language.make_tensor_descriptor
    else:
        @triton.jit
        def make_tensor_descriptor(...):  # a stub: TMA unavailable
            return None

Every place of the marker is a module-level `if`/`elif` chain testing `hasattr(<triton.language or
tl>, "<marker name>")`: its test, an alias bound from the probed attribute in its branch, or the
stub its last `else:` defines. The module binds the name either way and uses no descriptor itself;
its importers (classed as running on Triton-Ascend) decide. `probed_aliases` gives the note that
platforms.triton_on_npu adds to the classification, so the helper gets the same one as its importers
instead of the error "CUDA Triton kernels do not run on NPU". A marker used anywhere else (a call of
the descriptor, a probe without a fallback, any other non-portable marker) keeps the error.
"""

from __future__ import annotations

import ast
from typing import Optional

from . import astcache

_DESCRIPTORS = (b"make_tensor_descriptor", b"_experimental_descriptor")
_TRITON_LANGUAGE = ("triton.language", "tl")


def _probe(test: ast.AST) -> Optional[str]:
    """`hasattr(triton.language, "name")`: the probed name, else None."""
    if (isinstance(test, ast.Call) and isinstance(test.func, ast.Name) and test.func.id == "hasattr"
            and len(test.args) == 2 and astcache.dotted(test.args[0]) in _TRITON_LANGUAGE
            and isinstance(test.args[1], ast.Constant) and isinstance(test.args[1].value, str)):
        return test.args[1].value
    return None


def _chain(stmt: ast.If) -> tuple[list[ast.If], list[ast.stmt]]:
    """The `if`/`elif` links of a chain and its final `else:` body."""
    links = [stmt]
    while len(links[-1].orelse) == 1 and isinstance(links[-1].orelse[0], ast.If):
        links.append(links[-1].orelse[0])
    return links, links[-1].orelse


def _allowed_chain(stmt: ast.If, marker: str) -> Optional[list[ast.AST]]:
    """The nodes of a probing chain where `marker` may appear, else None."""
    links, last = _chain(stmt)
    probed = [_probe(link.test) for link in links]
    if any(p is None for p in probed) or not last:
        return None
    allowed: list[ast.AST] = [link.test for link in links]
    bound = set()
    for link, name in zip(links, probed):
        for s in link.body:
            if not (isinstance(s, ast.Assign) and len(s.targets) == 1 and isinstance(s.targets[0], ast.Name)
                    and isinstance(s.value, ast.Attribute) and s.value.attr == name
                    and astcache.dotted(s.value.value) in _TRITON_LANGUAGE):
                return None
            bound.add(s.targets[0].id)
            allowed.append(s)
    for s in last:
        if isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant):
            continue  # (a docstring-like note)
        if not (isinstance(s, (ast.FunctionDef, ast.Assign)) and marker in ast.unparse(s)):
            return None
        names = {s.name} if isinstance(s, ast.FunctionDef) else {t.id for t in s.targets if isinstance(t, ast.Name)}
        if not names <= bound:
            return None
        allowed.append(s)
    return allowed if bound else None


def probed_aliases(data: bytes, markers: tuple) -> Optional[str]:
    """The note of the module doc where every non-portable marker of `markers` the file holds is a
    TMA descriptor name placed only in `hasattr` probing chains with a fallback; else None."""
    held = [m for m in markers if m in data]
    if not held or any(m not in _DESCRIPTORS for m in held):
        return None
    tree = astcache.parse(data)
    if tree is None:
        return None
    allowed: list[ast.AST] = []
    chains = 0
    for stmt in tree.body:
        if isinstance(stmt, ast.If) and _probe(stmt.test) is not None:
            nodes = _allowed_chain(stmt, held[0].decode())
            if nodes is None:
                return None
            allowed += nodes
            chains += 1
    if not chains:
        return None
    spans = [(n.lineno, n.end_lineno or n.lineno) for n in allowed]
    lines = data.decode("utf-8", "replace").splitlines()
    for number, line in enumerate(lines, 1):
        if any(m.decode() in line for m in held) and not any(a <= number <= b for a, b in spans):
            if line.lstrip().startswith("#"):
                continue
            return None
    first = next(n for n in tree.body if isinstance(n, ast.If) and _probe(n.test) is not None)
    return (f"its TMA descriptor name is only bound behind `hasattr(triton.language, ...)` probes (line "
            f"{first.lineno}) whose `else:` binds a fallback, and the module uses no descriptor itself: it "
            "imports on Triton-Ascend either way, its importers decide")
