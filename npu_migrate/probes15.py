"""Probes whose answer on an NPU host is "no": an availability check, a test skip, a None check
(issue #16, round-14 audits AK/AM). Run per file after fallbacks.review_fallbacks (run.migrate_file),
before the per-file merge, on the file's `ast` (astcache):

* **Behind an availability check of an NVIDIA-only package** (`GATED`, a moot.PHRASES phrase). `if
  is_te_available(): import transformer_engine as te` (peft's GPU tests, AK#30), or a function that
  first says `if not is_transformer_engine_available(): raise ImportError(...)` and imports
  `transformer_engine.pytorch` after it (accelerate's utils/transformer_engine.py, AM#32), or
  says `assert _deep_gemm_available, "deep_gemm is required"` first (round 23: a lower-case flag
  named for the package counts in an `assert`): the
  package has no NPU build (rules/sweep.toml `[availability] never_on_npu`), so the check is
  False on an NPU host and the import is never reached there. The import's finding is info naming
  the check, which moot.py turns into a named skipped scope. Only a check that names the imported
  package (`is_<pkg>_available`, its initials: `is_te_available`, `<PKG>_AVAILABLE`) counts; an
  import of the same package with no such check before it keeps its error.
* **Behind a selector of the package's own backend** (`SELECTOR`, a moot.PHRASES phrase). `if
  should_use_flashinfer_cutlass_moe_fp4_allgather(): from flashinfer import ...` (sglang's MoE
  dispatcher, round 14 AL#40): a call without arguments named `[should_|can_]use_<pkg>...` picks
  that package's backend, which an NPU host lacking the package never selects. A selector that does
  not name the imported package (`if use_fast_path():`) keeps the error.
* **After `pytest.importorskip("pkg")`** (`fallbacks.SKIPPED_TEST`, a moot.PHRASES phrase). The
  statement before it in the same test skips the test where the package is missing, as on an NPU
  host (vllm's weight-cache test, AM#10): the import of that package after it is never reached
  there. An importorskip of another package does not count; neither do torch or triton, which an
  NPU host has (triton-ascend installs `triton`).
* **`torch.version.cuda` read where the code checks it for None** (`VERSION_CHECKED`, a moot.AS_WRITTEN
  phrase). `cuda_version = torch.version.cuda; return cuda_version is not None and Version(cuda_version)
  >= Version("12.9")` (vllm's utils/flashinfer.py, AK#6): it is None on an NPU host and the code's own
  answer for a build without CUDA runs there as written. Only where the version is bound to a name
  whose every read in its function is a None test or sits behind one (`x is not None and ...`,
  under `if x is not None:`, after `if x is None: return ...`); a read used unchecked
  (`int(torch.version.cuda.split(".")[0])`) keeps its warning.

Each lowering keeps the finding, its code and its lines, with the reason in its message: nothing is
dropped here.
"""

from __future__ import annotations

import ast
import functools
import re
from dataclasses import replace

from . import astcache, catalogue
from .findings import Finding
from .capgates import importorskip_module
from .probes import parse_text

GATED = "behind an availability check an NPU host fails"
# `if should_use_flashinfer_cutlass_moe_fp4_allgather(): from flashinfer import ...` (round 14, AL#40)
SELECTOR = "behind a selector of the package's own backend, which an NPU host lacking the package never selects"
VERSION_CHECKED = ("`torch.version.cuda` read where the code checks it for None: it is None on an NPU "
                   "host, and the code's own answer for a build without CUDA runs there")
# packages an NPU host has under the same name: its importorskip passes there
_PRESENT_ON_NPU = frozenset({"torch", "triton"})

_IMPORT = re.compile(r"\bimport (?:of|from) (?:compiled extension module )?`([\w.]+)`")
_CHECK_CALL = re.compile(r"^_?(?:is|has)_(\w+?)_(?:available|installed)$")
_SELECTOR_CALL = re.compile(r"^_?(?:should_|can_)?use_(\w+)$")
_CHECK_FLAG = re.compile(r"^_?(?:HAS_|IS_)?(\w+?)_(?:AVAILABLE|INSTALLED)$")
# `_mslk_available` (round 23, BL#23): the same flag in lower case, named for the package itself
# (read only in an `assert` before the import: `assert _mslk_available, "mslk is required"`)
_CHECK_LOWER = re.compile(r"^_?(?:has_|is_)?([a-z]\w*?)_(?:available|installed)$")
_BLOCKS = ("body", "orelse", "finalbody")


@functools.lru_cache(maxsize=1)
def never_on_npu() -> frozenset:
    """rules/sweep.toml `[availability] never_on_npu`: packages an NPU host never has installed."""
    return frozenset(catalogue.read_table("sweep.toml").get("availability", {}).get("never_on_npu", ()))


def _names(package: str, core: str) -> bool:
    """Whether the `core` of a check (`te` of `is_te_available`) names the package
    (`transformer_engine`): the same name without underscores, or its initials."""
    core, package = core.lower(), package.lower()
    if core.replace("_", "") == package.replace("_", ""):
        return True
    parts = [p for p in package.split("_") if p]
    return len(parts) > 1 and core == "".join(p[0] for p in parts)


def _checks(test: ast.AST, package: str, lower: bool = False) -> tuple[int, str]:
    """(1, check) where `test` true means the package is there, (-1, check) where it means it is
    missing, (0, "") otherwise; `lower`: a lower-case flag (`_mslk_available`) counts too."""
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        sign, shown = _checks(test.operand, package, lower)
        return -sign, shown
    if isinstance(test, ast.BoolOp) and isinstance(test.op, ast.And):
        for value in test.values:
            sign, shown = _checks(value, package, lower)
            if sign == 1:
                return 1, shown
        return 0, ""
    if isinstance(test, ast.Call) and not test.args:
        name = astcache.dotted(test.func).rpartition(".")[2]
        found = _CHECK_CALL.match(name)
        if found and _names(package, found.group(1)):
            return 1, f"{name}()"
        return 0, ""
    if isinstance(test, (ast.Name, ast.Attribute)):
        name = astcache.dotted(test).rpartition(".")[2]
        found = _CHECK_FLAG.match(name) or (_CHECK_LOWER.match(name) if lower else None)
        if found and (name.isupper() or found.re is _CHECK_LOWER) and _names(package, found.group(1)):
            return 1, name
    return 0, ""


def _selects(test: ast.AST, package: str) -> str:
    """`should_use_flashinfer_cutlass_moe_fp4_allgather()` (a call without arguments whose name, after
    `use_`, starts with the package's name), alone or as an operand of an `and`: the check shown, or ""."""
    if isinstance(test, ast.BoolOp) and isinstance(test.op, ast.And):
        return next((shown for value in test.values for shown in [_selects(value, package)] if shown), "")
    if isinstance(test, ast.Call) and not test.args and not test.keywords:
        name = astcache.dotted(test.func).rpartition(".")[2]
        found = _SELECTOR_CALL.match(name)
        core = found.group(1).lower() if found else ""
        if core == package.lower() or core.startswith(package.lower() + "_"):
            return f"{name}()"
    return ""


def _stops(block: list) -> bool:
    return bool(block) and isinstance(block[-1], (ast.Raise, ast.Return))




def _holders(tree: ast.Module) -> dict[int, tuple[ast.AST, list]]:
    """id(statement) -> (the statement (or module) that holds it, the block it is in); a statement
    of an `except` handler or a `case` is held by its `try` or `match`."""
    out: dict[int, tuple[ast.AST, list]] = {}
    stack: list[ast.AST] = [tree]
    while stack:
        node = stack.pop()
        for field in _BLOCKS:
            block = getattr(node, field, None)
            if isinstance(block, list):
                for child in block:
                    if isinstance(child, ast.stmt):
                        out[id(child)] = (node, block)
                        stack.append(child)
        for handler in getattr(node, "handlers", ()) or ():
            for child in handler.body:
                out[id(child)] = (node, handler.body)  # (its `try` statement holds it)
                stack.append(child)
        for case in getattr(node, "cases", ()) or ():
            for child in case.body:
                out[id(child)] = (node, case.body)
                stack.append(child)
    return out


def _reason(stmt: ast.stmt, package: str, holders: dict) -> str | None:
    """Why an NPU host never reaches the import statement of `package`, or None."""
    gated = package in never_on_npu()
    current = stmt
    while id(current) in holders:
        holder, block = holders[id(current)]
        if gated and isinstance(holder, ast.If):
            sign, shown = _checks(holder.test, package)
            if (sign == 1 and block is holder.body) or (sign == -1 and block is holder.orelse):
                return f"{GATED}: `{shown}`, and `{package}` has no NPU build"
            shown = _selects(holder.test, package) if block is holder.body else ""
            if shown:
                return f"{SELECTOR}: `{shown}`, and `{package}` has no NPU build"
        for earlier in block[:block.index(current)]:
            asked = importorskip_module(earlier)
            if asked and asked.split(".")[0] == package and package not in _PRESENT_ON_NPU:
                from .fallbacks import SKIPPED_TEST  # (fallbacks imports probes, as this module does)

                return f'{SKIPPED_TEST}: `pytest.importorskip("{asked}")` before it'
            if gated and isinstance(earlier, ast.If) and _stops(earlier.body):
                sign, shown = _checks(earlier.test, package)
                if sign == -1:
                    return f"{GATED}: `{shown}`, and `{package}` has no NPU build"
            if gated and isinstance(earlier, ast.Assert):  # (`assert _mslk_available, "..."`, round 23)
                sign, shown = _checks(earlier.test, package, lower=True)
                if sign == 1:
                    return f"{GATED}: `assert {shown}`, and `{package}` has no NPU build"
        if isinstance(holder, ast.Module):
            break
        current = holder
    return None


# ----------------------------------------------------------------------------- torch.version.cuda
def _is_none(node: ast.AST) -> bool:
    return isinstance(node, ast.Constant) and node.value is None


def _tests(test: ast.AST, name: str) -> int:
    """1 where `test` true means `name` is not None, -1 where it means None, 0 otherwise."""
    if isinstance(test, ast.Name) and test.id == name:
        return 1
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        return -_tests(test.operand, name)
    if isinstance(test, ast.BoolOp) and isinstance(test.op, ast.And):
        return 1 if any(_tests(v, name) == 1 for v in test.values) else 0
    if isinstance(test, ast.BoolOp) and isinstance(test.op, ast.Or):
        return -1 if any(_tests(v, name) == -1 for v in test.values) else 0
    if (isinstance(test, ast.Compare) and len(test.ops) == 1 and isinstance(test.left, ast.Name)
            and test.left.id == name and _is_none(test.comparators[0])):
        return 1 if isinstance(test.ops[0], (ast.IsNot, ast.NotEq)) else -1 if isinstance(
            test.ops[0], (ast.Is, ast.Eq)) else 0
    return 0


def _read_checked(node: ast.Name, parents: dict, holders: dict) -> bool:
    """Whether a read of the version's name is a None test or sits behind one."""
    name = node.id
    child, parent = node, parents.get(id(node))
    if isinstance(parent, ast.Compare) and parent.left is node and len(parent.ops) == 1 \
            and _is_none(parent.comparators[0]):
        return True
    while parent is not None:
        if isinstance(parent, (ast.If, ast.IfExp, ast.While, ast.Assert)) and child is parent.test:
            return _tests(parent.test, name) != 0  # (`if not cuda_version:`: a None test itself)
        if isinstance(parent, ast.BoolOp) and child in parent.values:
            before = parent.values[:parent.values.index(child)]
            want = 1 if isinstance(parent.op, ast.And) else -1
            if any(_tests(v, name) == want for v in before):
                return True
        if isinstance(parent, (ast.If, ast.IfExp, ast.While)) and child is not parent.test:
            sign = _tests(parent.test, name)
            in_body = child in parent.body if isinstance(parent.body, list) else child is parent.body
            if (sign == 1 and in_body) or (sign == -1 and not in_body):
                return True
        if isinstance(child, ast.stmt) and id(child) in holders:
            _holder, block = holders[id(child)]
            for earlier in block[:block.index(child)]:
                if isinstance(earlier, ast.If) and _tests(earlier.test, name) == -1 and _stops(earlier.body):
                    return True
        if isinstance(parent, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.Module)):
            return False
        child, parent = parent, parents.get(id(parent))
    return False


def _version_checked(tree: ast.Module, line: int, holders: dict) -> bool:
    """Whether line `line` binds `torch.version.cuda` to a name every read of which in its
    function (or module) is a None test or behind one, and at least one read is such a test."""
    assign = next((s for s in astcache.walk_statements(tree) if s.lineno == line and isinstance(s, ast.Assign)
                   and len(s.targets) == 1 and isinstance(s.targets[0], ast.Name)
                   and astcache.dotted(s.value) == "torch.version.cuda"), None)
    if assign is None:
        return False
    name = assign.targets[0].id
    scope = holders.get(id(assign), (tree, None))[0]
    while not isinstance(scope, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Module)):
        scope = holders.get(id(scope), (tree, None))[0]
    if isinstance(scope, ast.Module):
        return False  # (a module-level name other modules may import and read unchecked)
    parents: dict[int, ast.AST] = {}
    reads = []
    for node in ast.walk(scope):
        for inner in ast.iter_child_nodes(node):
            parents[id(inner)] = node
        if isinstance(node, ast.Name) and node.id == name and isinstance(node.ctx, ast.Load):
            reads.append(node)
    return bool(reads) and all(_read_checked(read, parents, holders) for read in reads)


def review(findings: list[Finding], text: str) -> list[Finding]:
    """Import findings behind an availability check of an NVIDIA-only package or after
    `pytest.importorskip` of it, and `torch.version.cuda` reads checked for None, lowered to info
    with the reason (see the module's doc)."""
    open_ = [f for f in findings if not f.fixable and f.cell is None and f.severity != "info"]
    if not open_ or not ("_available" in text or "_AVAILABLE" in text or "importorskip" in text
                         or "version.cuda" in text or "_installed" in text or "_INSTALLED" in text
                         or "use_" in text):
        return findings
    imports = {}
    versions = set()
    for finding in open_:
        found = _IMPORT.search(finding.message)
        if found:
            imports[id(finding)] = found.group(1).split(".")[0]
        elif finding.code == "NPU990" and "torch.version.cuda" in (finding.source or "") \
                and "version.cuda" in text:
            versions.add(id(finding))
    if not imports and not versions:
        return findings
    tree = parse_text(text)
    if tree is None:
        return findings
    holders = _holders(tree)
    statements = {}
    for stmt in astcache.walk_statements(tree):
        if isinstance(stmt, (ast.Import, ast.ImportFrom)):
            statements.setdefault(stmt.lineno, stmt)
    out = []
    for finding in findings:
        reason = None
        if id(finding) in imports and finding.line in statements:
            reason = _reason(statements[finding.line], imports[id(finding)], holders)
        elif id(finding) in versions and _version_checked(tree, finding.line, holders):
            reason = VERSION_CHECKED
        if reason is not None:
            finding = replace(finding, severity="info", message=f"{finding.message} ({reason})")
        out.append(finding)
    return out
