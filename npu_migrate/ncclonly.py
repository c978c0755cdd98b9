"""Writes of NCCL-only settings HCCL has no counterpart for (issue #16, round-15 audit AN#1).

`if "NCCL_CUMEM_ENABLE" not in os.environ: os.environ["NCCL_CUMEM_ENABLE"] = "0"` (SGLang's engine):
the variable switches an NCCL feature that exists only on NVIDIA hardware (the cuMem allocator,
NVLink SHARP, NVLink/GPUDirect transports, CUDA cluster launch). HCCL never reads it and has no
setting to carry it to, so setting it on an NPU host is inert and asks for no port work. An NPU602
finding (information) whose name matches rules/env.toml `[nccl_only] pattern` and whose string is
written into an environment (the key of `os.environ[...] = ...`, `env[...] = ...`, of
`.setdefault(...)`/`putenv(...)`, of a dict passed to `.update(...)`) or only tested for presence in
one before such a write (`"X" not in os.environ`) is lowered with NCCL_ONLY, a moot.NO_WORK phrase
(a named scope "no port work on an NPU host"). A read of the value (`os.environ.get("NCCL_X")`
deciding what the code does) keeps its finding, and so does every NCCL variable with an HCCL
counterpart (NCCL_SOCKET_IFNAME, NCCL_BUFFSIZE, NCCL_ALGO, NCCL_IB_*, NCCL_DEBUG, TORCH_NCCL_*):
those are settings to carry over by hand.

Per file, before the per-file merge (run.migrate_file); a byte pre-test before the parse.
"""

from __future__ import annotations

import ast
import dataclasses
import functools
import re

from . import astcache, catalogue
from .findings import Finding

NCCL_ONLY = "an NCCL-only setting HCCL never reads and has no counterpart for: nothing to port"

_WRITERS = frozenset({"setdefault", "putenv", "update"})


@functools.lru_cache(maxsize=1)
def nccl_only() -> re.Pattern:
    """rules/env.toml `[nccl_only] pattern`: NCCL variables of NVIDIA-only features."""
    return re.compile(catalogue.env_table().get("nccl_only", {}).get("pattern", r"(?!)"))


def _environment(node: ast.AST) -> bool:
    """`os.environ`, `environ`, or a name/attribute that says env (`env`, `self.env`, `child_env`)."""
    name = astcache.dotted(node)
    last = name.rpartition(".")[2].lower()
    return bool(name) and (last == "environ" or "env" in last)


def _written(tree: ast.Module, node: ast.Constant, parents: dict) -> bool:
    """Whether the string is the key of a write into an environment, or a presence test of one."""
    parent = parents.get(id(node))
    if isinstance(parent, ast.Subscript) and parent.slice is node and isinstance(parent.ctx, ast.Store):
        return _environment(parent.value)
    if isinstance(parent, ast.Compare) and parent.left is node and len(parent.ops) == 1 \
            and isinstance(parent.ops[0], (ast.In, ast.NotIn)):
        return _environment(parent.comparators[0])
    if isinstance(parent, ast.Call) and parent.args and parent.args[0] is node \
            and isinstance(parent.func, ast.Attribute) and parent.func.attr in ("setdefault", "putenv"):
        return parent.func.attr == "putenv" or _environment(parent.func.value)
    if isinstance(parent, ast.Dict) and any(key is node for key in parent.keys):
        holder = parents.get(id(parent))
        return isinstance(holder, ast.Call) and isinstance(holder.func, ast.Attribute) \
            and holder.func.attr == "update" and _environment(holder.func.value)
    return False


def review(findings: list[Finding], text: str) -> list[Finding]:
    """The NPU602 findings on writes of NCCL-only settings lowered with NCCL_ONLY (module doc)."""
    pattern = nccl_only()
    hits = [f for f in findings if f.code == "NPU602" and not f.fixable and f.cell is None
            and f.severity == "info" and NCCL_ONLY not in f.message
            and pattern.match(f.source.strip("\"'rbuf"))]
    if not hits:
        return findings
    tree = astcache.parse(text.encode("utf-8", "surrogatepass"))
    if tree is None:
        return findings
    parents, at = astcache.parents(tree), astcache.strings_at(tree)
    lowered = set()
    for finding in hits:
        node = at.get((finding.line, finding.column))
        if node is not None and pattern.match(node.value) and _written(tree, node, parents):
            lowered.add(id(finding))
    if not lowered:
        return findings
    return [dataclasses.replace(f, message=f"{f.message} ({NCCL_ONLY}: `{f.source.strip(chr(34) + chr(39))}`)")
            if id(f) in lowered else f for f in findings]
