"""Lazy imports behind a compute-capability test the line reader of wholeprogram.py misses (issue
#16, round-29 audit DA#29, DB#36, DA#21).

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
    from .capchains30 import exit_spans
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
            parsed = _parse(text)  # (the rest of a function after a capability exit further down: capchains30.py)
            found = found + [(a, b, c, False) for a, b, c in (exit_spans(parsed, text, lines) if parsed else ())]
        except (RecursionError, SyntaxError, ValueError):
            continue
        tree, tests = None, {}
        for first, last, condition, type_checking in found:
            if type_checking or not any(first <= n <= last for n in lines):
                continue
            if tree is None and not _CAPABILITY.search(condition.encode()):
                tree = _parse(text)
                tests = _tests_by_block(tree)
            # (the condition as shown may be cut short: the `if`'s own test, where the block is one)
            read = tests.get(first, condition)
            if _names_capability(read, tree, first):
                out.setdefault(i, []).append((first, last, f"`{' '.join(condition.split())[:70]}`"))
    return out


def _tests_by_block(tree: Optional[ast.Module]) -> dict[int, str]:
    """{first line of an `if`'s body: the source of its test} (also its `else`'s first line)."""
    out: dict[int, str] = {}
    if tree is None:
        return out
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and node.body:
            test = ast.unparse(node.test)
            out.setdefault(_first_line(node.body[0]), test)
            if node.orelse:
                out.setdefault(_first_line(node.orelse[0]), test)
    return out


def _first_line(stmt: ast.stmt) -> int:
    return min([stmt.lineno, *(d.lineno for d in getattr(stmt, "decorator_list", ()))])


def _parse(text: str) -> Optional[ast.Module]:
    try:
        return ast.parse(text)
    except (SyntaxError, ValueError, RecursionError):
        return None


# ------------------------------------------------------------------ a name held as a string elsewhere

def may_look_up(text: Optional[bytes], relpath: str, same: bool = False) -> bool:
    """Whether a file whose code holds a string equal to the name of a function of module `relpath`
    may look that function up by it (for callgates21.py, round 29 DA#21): a lookup by name needs
    the module object (`getattr(mod, "name")`, `import_module("pkg.mod")`, `sys.modules[...]`), so
    only the module itself, or a file whose text names the module (its file's stem; a package's
    `__init__`: the package's folder), can. vLLM's `if code_name == "_compile"` in
    compilation/wrapper.py (a frame's code name) and a test's `_FakeLayer("gate_up")` never reach
    Flint's `moe_gemv._compile` or `moe_gemv.gate_up`."""
    if same or text is None:
        return True
    parts = relpath.replace("\\", "/").split("/")
    stem = parts[-1].rpartition(".")[0]
    if stem == "__init__":
        if len(parts) < 2:
            return True
        stem = parts[-2]
    return stem.encode() in text


def names_other_module(string: bytes, relpath: str) -> bool:
    """Whether a quoted dotted name or path holding a module's last name (wholeprogram's "named in a
    string" test) names another module of that name: at each place the name is a whole part, the
    parts before it disagree with the module's own folders (compared from the end, as far as both
    go). vLLM's `"vllm.models.kimi_k3.nvidia.ops.attn_res"` and `"aiter.ops.triton"` do not name
    `vllm/models/minimax_m3/nvidia/ops/` (round 29 DB#36, a package only a capability-gated
    lazy import loads); `"nvidia.ops"`, `"ops.index_decode_score"`, `"src/vllm/models/minimax_m3/
    nvidia/ops"` may, as does a string where the name is no whole part (`"foo-ops"`)."""
    module = relpath[:-3].split("/") if relpath.endswith(".py") else relpath.split("/")
    if module and module[-1] == "__init__":
        module = module[:-1]
    if not module:
        return False
    word, owners = module[-1], module[:-1]
    parts = re.split(r"[./]", string.strip(b"\"'").decode("utf-8", "replace"))
    places = [k for k, part in enumerate(parts) if part == word]
    if not places:
        return False
    for k in places:
        before = [p for p in parts[:k] if p]
        m = min(len(before), len(owners))
        if before[len(before) - m:] == owners[len(owners) - m:]:
            return False
    return True
