"""Tests whose subject is a CUDA-only compiled op (issue #16, round 8: vLLM's
`tests/kernels/quantization/test_hadacore.py`, an fp64 reference beside `ops.hadacore_transform`).

A test function that calls an op of the project's own compiled `_C` extension, directly
(`torch.ops._C.hadacore_transform(x)`) or through the project's wrapper module (`from vllm import
_custom_ops as ops`, then `ops.hadacore_transform(x)` where `_custom_ops.hadacore_transform` calls
`torch.ops._C.hadacore_transform`), in a project whose CUDA sources are reported (NPU912: the `_C`
extension is built from them) and whose wrapper module registers nothing for an NPU
(`PrivateUse1`), exists to check that op. On an NPU host it fails at that call until the op has an
NPU kernel; the port item is the op, reported where it is built. A warning (runs but differs) about
the test's other constructs, such as the reference it compares with (`torch.float64` on the
accelerator, NPU930), is beside the point until then: `lower_in_op_tests` lowers it to information
with the op and the reason (it stays listed for review with the op's port). Errors stay as they are
(an FP8 reference still fails after the op is ported), and so does every finding on the op call's
own line.

Whole-program (it reads the wrapper module), after fp8tests.fold_into_failing_imports and before
moot.to_scopes; `results` is not changed.
"""

from __future__ import annotations

import ast
import dataclasses
import re
from typing import Optional

from . import astcache
from .fp8tests import TEST_FILE
from .modpaths import module_names, result_bytes

_dotted = astcache.dotted
_FUNCTIONS = (ast.FunctionDef, ast.AsyncFunctionDef)
_WRAPPER = "_custom_ops"  # the module that wraps the compiled ops (vLLM's `vllm/_custom_ops.py`)
_OPS = "torch.ops._"  # (a byte pre-test: every compiled_op name starts so)
REASON = ("in a test of the CUDA-only compiled op `{op}` (`torch.ops.{target}`, built from the project's "
          "CUDA sources, NPU912): the test fails at that call on an NPU host until the op has an NPU kernel; "
          "review this with the op's port")


# the namespaces of a project's compiled extensions: `_C`, `_C_cache_ops`, `_moe_C` (not ROCm's own)
_NAMESPACE = re.compile(r"_C|_C_\w+|_\w+_C")


def compiled_op(name: str) -> Optional[str]:
    """`_C.x` for `torch.ops._C.x` (`_C_cache_ops.y` for `torch.ops._C_cache_ops.y`): the op of one
    of the project's compiled-extension namespaces; None for any other name."""
    parts = name.split(".")
    if (len(parts) == 4 and parts[0] == "torch" and parts[1] == "ops" and _NAMESPACE.fullmatch(parts[2])
            and "rocm" not in parts[2].lower() and "hip" not in parts[2].lower()):
        return f"{parts[2]}.{parts[3]}"
    return None


def _candidate(finding) -> bool:
    from .moot import is_moot

    return not finding.fixable and finding.severity == "warning" and finding.cell is None and not is_moot(finding)


def _wrapped_ops(tree: ast.Module) -> dict[str, str]:
    """The wrapper module's top-level functions that call a compiled op (`torch.ops._C.x`,
    `torch.ops._C_cache_ops.y`): name -> op (`_C.x`)."""
    out = {}
    for node in tree.body:
        if isinstance(node, _FUNCTIONS):
            for inner in ast.walk(node):
                if isinstance(inner, ast.Call):
                    target = compiled_op(_dotted(inner.func, strict=True) or "")
                    if target:
                        out[node.name] = target
                        break
    return out


def _aliases(tree: ast.Module) -> dict[str, str]:
    """Names bound to a `_custom_ops` module at module level: alias -> dotted module."""
    out = {}
    for node in tree.body:
        if isinstance(node, ast.ImportFrom) and node.module and not node.level:
            for alias in node.names:
                if alias.name == _WRAPPER:
                    out[alias.asname or alias.name] = f"{node.module}.{_WRAPPER}"
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.rsplit(".", 1)[-1] == _WRAPPER and alias.asname:
                    out[alias.asname] = alias.name
    return out


def _tests(tree: ast.Module):
    for node in tree.body:
        if isinstance(node, _FUNCTIONS) and node.name.startswith("test"):
            yield node
        elif isinstance(node, ast.ClassDef) and node.name.startswith("Test"):
            for inner in node.body:
                if isinstance(inner, _FUNCTIONS) and inner.name.startswith("test"):
                    yield inner


def wrapper_lookup(results: list, paths: dict):
    """A function from a dotted module name to the ops of the run's wrapper module of that name
    (`_custom_ops.py`: {function: op}, `_wrapped_ops`; {} for any other module), each parsed once
    (lower_in_op_tests here, cudaonly21's op benchmarks)."""
    by_dotted: dict[str, int] = {}
    for i, result in enumerate(results):
        if result.relpath.endswith(f"/{_WRAPPER}.py"):
            for name in module_names(result.relpath):
                by_dotted.setdefault(name, i)
    wrappers: dict[int, dict] = {}

    def wrapped(module: str) -> dict:
        i = by_dotted.get(module)
        if i is None:
            return {}
        if i not in wrappers:
            data = result_bytes(results[i], paths) or b""
            tree = astcache.parse(data) if b"PrivateUse1" not in data else None
            wrappers[i] = _wrapped_ops(tree) if tree is not None else {}
        return wrappers[i]

    return wrapped


def lower_in_op_tests(results: list, paths: Optional[dict] = None) -> list:
    """Warnings inside test functions that call a CUDA-only compiled op lowered to information
    with that op (see the module's doc)."""
    targets = [i for i, r in enumerate(results) if r.relpath.endswith(".py") and TEST_FILE.search(r.relpath)
               and any(_candidate(f) for f in r.findings)]
    if not targets or not any(f.code == "NPU912" for r in results for f in r.findings):
        return results
    paths = paths or {}
    wrapped = wrapper_lookup(results, paths)
    out = list(results)
    for i in targets:
        data = result_bytes(results[i], paths)
        if not data or (_OPS.encode() not in data and _WRAPPER.encode() not in data):
            continue
        tree = astcache.parse(data[3:] if data.startswith(b"\xef\xbb\xbf") else data)
        if tree is None:
            continue
        aliases = {alias: wrapped(module) for alias, module in _aliases(tree).items()}
        spans = []  # (first line, last line, op, target, the op calls' lines)
        for test in _tests(tree):
            calls = []
            for node in ast.walk(test):
                if not isinstance(node, ast.Call):
                    continue
                name = _dotted(node.func, strict=True) or ""
                if compiled_op(name):
                    calls.append((node.lineno, name, compiled_op(name)))
                elif name.count(".") == 1 and name.split(".")[1] in aliases.get(name.split(".")[0], {}):
                    calls.append((node.lineno, name, aliases[name.split(".")[0]][name.split(".")[1]]))
            if calls:
                first = min(calls)
                spans.append((test.lineno, test.end_lineno or test.lineno, first[1], first[2],
                              {line for line, _n, _t in calls}))
        if not spans:
            continue

        def lowered(finding):
            for start, end, op, target, lines in spans:
                inside = all(start <= line <= end and line not in lines
                             for line in (finding.line, *(also[0] for also in finding.also)))
                if inside and _candidate(finding):
                    return dataclasses.replace(finding, severity="info", message=(
                        f"{finding.message} ({REASON.format(op=op, target=target)})"))
            return finding

        out[i] = dataclasses.replace(results[i], findings=[lowered(f) for f in results[i].findings])
    return out


# Public names for cudaonly21.py, which reads benchmarks of the same ops: the wrapper module's
# name, the ops' prefix, the ops a wrapper module wraps and a file's aliases of it.
WRAPPER, OPS = _WRAPPER, _OPS
wrapped_ops, wrapper_aliases = _wrapped_ops, _aliases
