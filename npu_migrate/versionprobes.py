"""CUDA version reads inside a `try` whose `except` falls back (issue #16, after fallbacks.py).

`try: major = torch.version.cuda.split(".")[0] ... except: cuda_version = None`: on an NPU host
(or a CPU build of torch) `torch.version.cuda` is None, so `.split` raises AttributeError, the
handler catches it and binds its fallback. The code's own answer to a build without CUDA runs
there as written: the CUDA version references in the `try` body are info with the reason
`VERSION_FALLBACK`, which moot.py names a scope that runs as written (not a finding).

Only a handler that catches what the read raises there (a bare `except`, `Exception`,
`BaseException`, `AttributeError`, `TypeError`) and goes on without raising, exiting or skipping
(fallbacks.falls_back: binds a name, returns, sets a flag) counts; a handler that raises
(`except AttributeError: raise RuntimeError("CUDA required")`) or only passes keeps the findings.
Only findings whose source reads the CUDA version (`torch.version.cuda`, `CUDA_HOME`... not a
`torch.cuda` call, which an NPU host may run without raising) are lowered, and each keeps its code
and lines: nothing is dropped here.
"""

from __future__ import annotations

import ast
import re
from dataclasses import replace

from .astcache import dotted as _dotted
from .astcache import walk_statements
from .fallbacks import falls_back
from .findings import Finding
from .probes import parse_text

VERSION_FALLBACK = ("a CUDA version read in a `try` whose `except` binds a fallback: "
                    "`torch.version.cuda` is None on an NPU host, so the fallback runs there")

# what reading an attribute of None raises there, and the handlers that catch it
_CAUGHT = frozenset({"Exception", "BaseException", "AttributeError", "TypeError"})
# the source of a finding that reads the CUDA version of the torch build
_VERSION_READ = re.compile(r"\bversion\.cuda\b")


def _catches_none_read(handler: ast.ExceptHandler) -> bool:
    if handler.type is None:
        return True
    kinds = handler.type.elts if isinstance(handler.type, ast.Tuple) else [handler.type]
    return any(_dotted(k).rpartition(".")[2] in _CAUGHT for k in kinds)


def _is_version(node: ast.AST) -> bool:
    return isinstance(node, ast.Attribute) and node.attr == "cuda" \
        and (_dotted(node.value) or "").rpartition(".")[2] == "version"


def _reads_version(stmt: ast.stmt) -> bool:
    """Whether `stmt` uses the CUDA version so that None raises: an attribute or an item of it
    (`torch.version.cuda.split(".")`, `torch.version.cuda[0]`), an argument of a call that parses
    it (`int(...)`, `Version(...)`), an ordering comparison (`torch.version.cuda >= "11.8"`). A bare
    read (`v = torch.version.cuda`) raises nothing: its None goes on past the `try`."""
    for node in ast.walk(stmt):
        if isinstance(node, (ast.Attribute, ast.Subscript)) and _is_version(node.value):
            return True
        if isinstance(node, ast.Call) and any(map(_is_version, node.args)):
            return True
        if isinstance(node, ast.Compare) and any(isinstance(op, (ast.Lt, ast.LtE, ast.Gt, ast.GtE)) for op in node.ops) \
                and any(map(_is_version, [node.left, *node.comparators])):
            return True
    return False


def fallback_bodies(tree: ast.Module) -> list[range]:
    """The lines of each `try` body that reads the CUDA version and whose handlers that catch the
    AttributeError of a None version all fall back."""
    out = []
    for stmt in walk_statements(tree):
        if not isinstance(stmt, ast.Try) or not stmt.body:
            continue
        handlers = [h for h in stmt.handlers if _catches_none_read(h)]
        if not handlers or not any(map(_reads_version, stmt.body)):
            continue
        if all(falls_back(h) for h in handlers):
            out.append(range(stmt.body[0].lineno, max(s.end_lineno or s.lineno for s in stmt.body) + 1))
    return out


def review_version_fallbacks(findings: list[Finding], text: str) -> list[Finding]:
    """Report-only findings that read the CUDA version inside a `try` with a fallback, lowered to
    info with the reason (see the module's doc)."""
    if "version.cuda" not in text or "try" not in text:
        return findings
    candidates = [f for f in findings if not f.fixable and f.cell is None and f.severity != "info"
                  and _VERSION_READ.search(f.source or "")]
    if not candidates:
        return findings
    tree = parse_text(text)
    if tree is None:
        return findings
    bodies = fallback_bodies(tree)
    if not bodies:
        return findings
    hits = {id(f) for f in candidates if any(f.line in body for body in bodies)}
    return [replace(f, severity="info", message=f"{f.message} ({VERSION_FALLBACK})") if id(f) in hits else f
            for f in findings]
