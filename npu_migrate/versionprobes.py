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
`torch.cuda` call, which an NPU host may run without raising) are lowered, and the probe
`torch.cuda.nccl.version()` (issue #16, round 8), which raises AttributeError on a torch without
NCCL (torch_npu runs on torch's CPU build) where `except Exception` returns a fallback, and each keeps its code
and lines: nothing is dropped here.

The same holds for the CUDA toolkit's path (review_toolkit_path): `torch.utils.cpp_extension.
CUDA_HOME` is None where no CUDA toolkit is installed, an NPU host among them. In a file that
builds no extension (no `CUDAExtension`, `BuildExtension`, `load(...)`/`load_inline`) and reads
it only where None is handled (in a test, under `if CUDA_HOME is not None:`/`if CUDA_HOME:`, in the
`else` of `if CUDA_HOME is None:`, after `assert CUDA_HOME is not None` or an early raise on None,
as the tested operand of `CUDA_HOME and get_nvcc_cuda_version()`, or passed on as it is: vllm's
setup.py, round 14 AM#11), an environment report or a build-preset
tool, the code's own no-toolkit path runs there: its NPU911 findings (and NPU990 on the uses) are info with the reason
`TOOLKIT_HANDLED`, a scope that runs as written. A file that joins the path unchecked
(`os.path.join(CUDA_HOME, "include")` at import) keeps its error.
"""

from __future__ import annotations

import ast
import re
from dataclasses import replace

from . import astcache
from .astcache import dotted as _dotted
from .astcache import walk_statements
from .fallbacks import falls_back
from .findings import Finding
from .probes import parse_text

VERSION_FALLBACK = ("a CUDA version read in a `try` whose `except` binds a fallback: "
                    "`torch.version.cuda` is None on an NPU host, so the fallback runs there")
NCCL_FALLBACK = ("a CUDA version read in a `try` whose `except` binds a fallback: "
                 "`torch.cuda.nccl.version()` raises on an NPU host (torch without NCCL), so the fallback runs there")

# what reading an attribute of None raises there, and the handlers that catch it
_CAUGHT = frozenset({"Exception", "BaseException", "AttributeError", "TypeError"})
# the source of a finding that reads the CUDA version of the torch build
_VERSION_READ = re.compile(r"\bversion\.cuda\b|\bcuda\.nccl\.version\b")
# probes of torch's CUDA build that raise where torch has none (an NPU host runs torch's CPU build:
# `torch.cuda.nccl.version()` reads `torch._C._nccl_version`, missing there: AttributeError)
_RAISING_PROBES = frozenset({"torch.cuda.nccl.version", "cuda.nccl.version", "nccl.version"})


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
        if isinstance(node, ast.Call) and (_dotted(node.func) or "") in _RAISING_PROBES:
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
    if ("version.cuda" not in text and "nccl.version" not in text) or "try" not in text:
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
    return [replace(f, severity="info", message=f"{f.message} ({NCCL_FALLBACK if 'nccl' in (f.source or '') else VERSION_FALLBACK})")
            if id(f) in hits else f for f in findings]


TOOLKIT_HANDLED = ("a CUDA toolkit path whose absence the file handles: `CUDA_HOME` is None on an NPU host "
                   "without the CUDA toolkit, the file reads it only where it tests it for None and builds "
                   "no extension")
_BUILDS = re.compile(r"\b(?:CUDAExtension|BuildExtension|load_inline)\b|cpp_extension\.load\(|"
                     r"from\s+torch\.utils\.cpp_extension\s+import\s[^\n]*\bload\b")
LEFTOVER = "NPU990"  # the uses of CUDA_HOME the sweep reports beside the import's NPU911
_PASSES_ON = frozenset({"print", "str", "repr", "bool", "info", "debug", "warning", "warn", "echo"})


def _is_home(node: ast.AST) -> bool:
    return (isinstance(node, ast.Name) and node.id == "CUDA_HOME") or (
        isinstance(node, ast.Attribute) and node.attr == "CUDA_HOME")


def _tests_home(test: ast.AST) -> int:
    """1 where `test` true means CUDA_HOME is set (`CUDA_HOME`, `CUDA_HOME is not None and ...`),
    -1 where it means unset (`CUDA_HOME is None`, `not CUDA_HOME`), 0 otherwise."""
    if _is_home(test):
        return 1
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        return -_tests_home(test.operand)
    if isinstance(test, ast.BoolOp) and isinstance(test.op, ast.And):
        return 1 if any(_tests_home(v) == 1 for v in test.values) else 0
    if (isinstance(test, ast.Compare) and len(test.ops) == 1 and _is_home(test.left)
            and isinstance(test.comparators[0], ast.Constant) and test.comparators[0].value is None):
        return 1 if isinstance(test.ops[0], (ast.IsNot, ast.NotEq)) else -1 if isinstance(
            test.ops[0], (ast.Is, ast.Eq)) else 0
    return 0


def _stops(block: list) -> bool:
    """A block that ends the function or the loop without going on (`raise`, `return`)."""
    return bool(block) and isinstance(block[-1], (ast.Raise, ast.Return, ast.Continue, ast.Break))


def _checked_before(stmt: ast.stmt, holder: ast.AST | None) -> bool:
    """Whether a statement before `stmt` in its block stops where CUDA_HOME is unset: `assert
    CUDA_HOME is not None, "CUDA_HOME is not set"` (vllm's `get_nvcc_cuda_version`, round 14 AM#11)
    or `if CUDA_HOME is None: raise ...`: the code states its own error there, no None is used."""
    for field in ("body", "orelse", "finalbody"):
        block = getattr(holder, field, None)
        if isinstance(block, list) and stmt in block:
            break
    else:
        return False
    for earlier in block[:block.index(stmt)]:
        if isinstance(earlier, ast.Assert) and _tests_home(earlier.test) == 1:
            return True
        if isinstance(earlier, ast.If) and _tests_home(earlier.test) == -1 and _stops(earlier.body):
            return True
    return False


def _home_uses_checked(tree: ast.Module) -> bool:
    """Whether the file reads CUDA_HOME (at least once in a test) only where None is handled: in a
    test of an `if`/conditional expression, under a test that it is set (or in the `else` of one
    that it is not), passed on as it is (assigned, returned, printed)."""
    parents: dict[int, ast.AST] = {}
    for node in astcache.walk(tree):
        for child in ast.iter_child_nodes(node):
            parents[id(child)] = node
    tested = False
    for node in astcache.walk(tree):
        if not _is_home(node) or not isinstance(getattr(node, "ctx", None), ast.Load):
            continue
        if isinstance(node, ast.Attribute) and _is_home(parents.get(id(node))):
            continue
        child, parent, safe = node, parents.get(id(node)), False
        if isinstance(parent, (ast.Assign, ast.Return, ast.FormattedValue)) or (
                isinstance(parent, ast.Call) and child in parent.args
                and (_dotted(parent.func) or "").rsplit(".", 1)[-1] in _PASSES_ON):
            safe = True
        elif isinstance(parent, ast.BoolOp) and node in parent.values[:-1]:
            safe = tested = True  # `CUDA_HOME and get_nvcc_cuda_version()`: its truth is tested
        while parent is not None and not safe:
            if isinstance(parent, ast.Assert) and child is parent.test:
                safe = tested = True  # (`assert CUDA_HOME is not None, "CUDA_HOME is not set"`)
                break
            if isinstance(parent, (ast.If, ast.IfExp, ast.While)):
                if child is parent.test:
                    safe = tested = True
                    break
                sign = _tests_home(parent.test)
                in_body = child in parent.body if isinstance(parent.body, list) else child is parent.body
                if (sign == 1 and in_body) or (sign == -1 and not in_body):
                    safe = True
                    break
            if isinstance(parent, ast.BoolOp) and isinstance(parent.op, ast.And):
                before = parent.values[:parent.values.index(child)] if child in parent.values else []
                if any(_tests_home(v) == 1 for v in before):
                    safe = True
                    break
            if isinstance(child, ast.stmt) and _checked_before(child, parent):
                safe = True
                break
            child, parent = parent, parents.get(id(parent))
        if not safe:
            return False
    return tested


def review_toolkit_path(findings: list[Finding], text: str) -> list[Finding]:
    """NPU911 findings on `CUDA_HOME` (and the NPU990 ones on its uses) in a file that reads it
    only where None is handled and builds no extension, lowered to info with the reason (see the
    module's doc)."""
    if "CUDA_HOME" not in text or _BUILDS.search(text):
        return findings
    targets = [f for f in findings if f.code in ("NPU911", LEFTOVER) and not f.fixable and f.cell is None
               and f.severity != "info" and "CUDA_HOME" in f.message]
    if not targets:
        return findings
    tree = parse_text(text)
    if tree is None or not _home_uses_checked(tree):
        return findings
    return [replace(f, severity="info", message=f"{f.message} ({TOOLKIT_HANDLED})") if f in targets else f
            for f in findings]
