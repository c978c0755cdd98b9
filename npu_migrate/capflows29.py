"""Lazy imports behind a compute-capability test the line reader of wholeprogram.py misses (issue
#16, round-29 audit DA#29, DB#36).

wholeprogram._never_imported finds a module never loaded on an NPU host when every import site of
it lies in a block false there. It reads those blocks from one-line `if` headers holding a word of
its `_DECIDABLE` list (`is_cuda`, `has_`, `hip`, ...), so two gates vLLM's model-private kernels
sit behind were never read:

    # models/beam/nvidia/attention_ops.py: the only importer of attention_ops_cutedsl.py
    if (
        attn_output.dtype == gate.dtype == torch.bfloat16
        and current_platform.is_device_capability_family(100)
    ):
        from .attention_ops_cutedsl import run          # cutlass, cuda.bindings: NPU911

    # models/minimax_m3/common/indexer.py
    is_sm100 = current_platform.is_cuda() and current_platform.is_device_capability_family(100)
    use_msa = is_sm100 and topk % 64 == 0
    if use_msa:
        from ..nvidia.indexer_msa import MSAIndexer      # loads nvidia/ops: cutlass at module level

On an NPU host vllm-ascend's `NPUPlatform.get_device_capability()` returns None, so every SM test
(`is_device_capability(N)`, `is_device_capability_family(N)`, `has_device_capability(N)`) is
false there (testscopes' answers, rules/scopes.toml [platform] false_methods), an `and` holding one
is false, and a local bound once to such a value is false where it is read (reach.py). The import
is never run there, and a module only such imports load is never loaded.

`spans(results, python, texts)` gives, for each file of the run that names a capability test and
holds an indented import, the blocks testscopes.untaken_branches finds an NPU host never runs
(multi-line headers and local flags included, read at the import lines only) whose condition, or a
local it reads, names a capability test; wholeprogram.review adds them to the spans it already
reads from dispatch.py and keptimports.py. The findings become the usual named scope ("imported
only where an NPU host does not go: ... under `...`", moot.py).

Kept (the nearest true cases): an import under a test the reader cannot decide (`if x.dtype ==
torch.bfloat16:`), under a capability test true there (`if not is_device_capability_family(100):`,
an `or` with `current_platform.is_npu()`), and a module imported anywhere outside such a block.
Nothing here changes what is rewritten.
"""

from __future__ import annotations

import ast
import re
from typing import Optional

# (a capability test names one of these: is_device_capability(_family), has_device_capability,
# get_device_capability, supports_compute_capability)
_CAPABILITY = re.compile(rb"device_capability|compute_capability")
_INDENTED_IMPORT = re.compile(rb"^[ \t]+(?:from[ \t]+[\w.]+[ \t]+import|import)[ \t]", re.MULTILINE)


def _import_lines(data: bytes) -> set[int]:
    """The lines of the file's indented import statements (a lazy import)."""
    out, line, at = set(), 1, 0
    for match in _INDENTED_IMPORT.finditer(data):
        line += data.count(b"\n", at, match.start())
        at = match.start()
        out.add(line)
    return out


def _names_capability(condition: str, tree: Optional[ast.Module], first: int) -> bool:
    """The block's condition names a capability test, or a name it reads is bound, above the block,
    to a value that does (`use_msa = (is_sm100 and ...)`, `is_sm100 = ... is_device_capability_family(100)`:
    followed a few names deep)."""
    if _CAPABILITY.search(condition.encode()):
        return True
    if tree is None:
        return False
    bound: dict[str, list[ast.AST]] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and node.lineno < first:
            for target in node.targets:
                if isinstance(target, ast.Name):
                    bound.setdefault(target.id, []).append(node.value)
    names = [n for n in re.findall(r"[A-Za-z_]\w*", condition) if n in bound]
    seen: set[str] = set()
    while names and len(seen) < 16:
        name = names.pop()
        if name in seen:
            continue
        seen.add(name)
        for value in bound[name]:
            if _CAPABILITY.search(ast.unparse(value).encode()):
                return True
            names.extend(n.id for n in ast.walk(value) if isinstance(n, ast.Name) and n.id in bound)
    return False


def spans(results, python: list[int], texts: dict) -> dict[int, list[tuple[int, int, str]]]:
    """{file index: [(first line, last line, why)]}: the blocks, holding a lazy import, that a
    capability test keeps an NPU host out of (see the module docstring)."""
    from .testscopes import untaken_branches

    out: dict[int, list[tuple[int, int, str]]] = {}
    for i in python:
        data: Optional[bytes] = texts.get(i)
        if not data or not _CAPABILITY.search(data):
            continue
        lines = _import_lines(data)
        if not lines:
            continue
        text = data.decode("utf-8", "replace")
        try:
            found = untaken_branches(text, results[i].relpath, interest=lines)
        except (RecursionError, SyntaxError, ValueError):
            continue
        tree = None
        for first, last, condition, type_checking in found:
            if type_checking or not any(first <= n <= last for n in lines):
                continue
            if tree is None and not _CAPABILITY.search(condition.encode()):
                tree = _parse(text)
            if _names_capability(condition, tree, first):
                out.setdefault(i, []).append((first, last, f"`{' '.join(condition.split())[:70]}`"))
    return out


def _parse(text: str) -> Optional[ast.Module]:
    try:
        return ast.parse(text)
    except (SyntaxError, ValueError, RecursionError):
        return None
