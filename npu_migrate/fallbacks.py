"""Guarded optional imports with a fallback, read with the whole file (issue #16, after probes.py).

Run after probes.review_guarded_probes / review_type_check_imports (run.migrate_file), on the
file's `ast` (astcache):

* a `try` that imports a CUDA-only package and, where that import fails (`except ImportError`,
  `except Exception`, a bare `except`), falls back without raising: binds the names to `None`, to
  a stub or to a slower implementation, sets a flag, returns something else (`try: from
  flash_attn.cute import f; return f(q, k, v) except Exception: return sdpa(q, k, v)`). An NPU
  host lacks the package, so the fallback runs there: the package's findings inside the `try`
  body (its import lines, and calls into it that only run when the import worked) are info, with
  that reason (`FALLBACK`). A handler that raises (`raise ImportError("install flash-attn")`) or
  only `pass`es while the names are used elsewhere is no fallback: its findings stay. One that
  binds the names to None counts where the file tests them for None, or, where it also sets a
  flag False (`ops = None; VLLM_AVAILABLE = False`), reads them only in functions that test that
  flag (round 14, AK#20).
* the same shapes whose names the file reads only as the classes of `isinstance`/`issubclass`
  checks, in annotations, or as the arguments of registrations (`register_leaf_module(apex.
  normalization.FusedLayerNorm)`): nothing of the package ever runs, on an NPU host the import
  fails and nothing is registered. Info with the reason `TYPE_ONLY`, which moot.py turns into a
  named skipped scope.
* a `try` whose `except ImportError` skips the test (`pytest.skip(...)`, `unittest.SkipTest`):
  the test (the module, with `allow_module_level=True`) does not run on an NPU host, where the
  package is missing: its findings after the import, in the same function (or module), are info
  with the reason `SKIPPED_TEST` (a moot.py phrase).
Only imports the run reports as a CUDA-only package count (a `torch.distributed` import behind a
skip is none), not one it rewrites (`from flash_attn import flash_attn_func` works on an NPU host
once migrated), and not Triton (triton-ascend installs `triton` there: the `try` body runs). A
per-file finding of the same code that stays at its severity elsewhere in the file absorbs a
fallback's import (findings.merge_per_file lists its line), as in probes.py. Each lowering keeps
the finding, its code and its lines: nothing is dropped here.
"""

from __future__ import annotations

import ast
import re
from dataclasses import replace

from . import astcache
from .astcache import dotted as _dotted
from .astcache import walk_statements
from .findings import Finding
from .probes import (
    GUARDED,
    TYPE_CHECKS,
    bound_names,
    catches_import_error,
    parse_text,
    per_file_code,
    probe_statement,
)

FALLBACK = ("guarded import with a fallback: where the package is missing, as on an NPU host, "
            "the `except` branch runs instead; review that fallback")
TYPE_ONLY = ("guarded import read only by type checks and registrations: "
             "nothing of the package runs on an NPU host, where the import fails")
SKIPPED_TEST = "in a test skipped where the package is missing, as on an NPU host"
# (a moot.AS_WRITTEN phrase) `try: import flash_attn; class Provider: ...; BENCHMARKS["fa"] = Provider
# except ImportError: pass` (round-13 audit AH#27): the `try` body only adds an optional provider
OPTIONAL_BLOCK = ("guarded optional block skipped cleanly: where the package is missing, as on an NPU "
                  "host, the `try` body (which alone reads the package and what it defines) is skipped")

# codes of the uses of a package an NPU host lacks (flash-attn, apex, compiled extensions,
# bitsandbytes, xformers): inside a fallback `try` body they run only where the import worked.
# Not Triton: triton-ascend installs `triton` on an NPU host, so its `try` body runs there.
PACKAGE_CODES = frozenset({"NPU502", "NPU503", "NPU902", "NPU911", "NPU914", "NPU915"})
# packages an NPU host has under the same name (torch itself: `from torch.utils.cpp_extension
# import CUDA_HOME` imports there, as None): their `except` branch may not run there
PRESENT_ON_NPU = frozenset({"triton", "torch"})

# an import finding of a package (`import of `flashinfer``), a compiled extension module included
# (`import of compiled extension module `colossalai._C``)
_REPORTED_IMPORT = re.compile(r"\bimport (of|from) (compiled extension module )?`")

_SKIPS = frozenset({"skip", "SkipTest", "skipTest"})
_EXITS = frozenset({"exit", "_exit", "quit", "abort"})
_QUIET_HANDLER = frozenset({"print", "warn", "warning", "info", "debug", "error", "exception", "log"})


def _top(stmt: ast.stmt) -> str:
    """The top-level package an import statement reads (`flash_attn` of `from flash_attn.cute
    import f`); "" for a relative import."""
    if isinstance(stmt, ast.ImportFrom):
        return "" if stmt.level else (stmt.module or "").split(".")[0]
    return stmt.names[0].name.split(".")[0] if stmt.names else ""


def _calls(stmt: ast.stmt) -> list[str]:
    return [_dotted(n.func).rpartition(".")[2] for n in ast.walk(stmt) if isinstance(n, ast.Call)]


def _skips(handler: ast.ExceptHandler) -> bool:
    """A handler that skips the test: `pytest.skip(...)`, `raise unittest.SkipTest(...)`."""
    for stmt in handler.body:
        if isinstance(stmt, ast.Raise) and stmt.exc is not None:
            target = stmt.exc.func if isinstance(stmt.exc, ast.Call) else stmt.exc
            if _dotted(target).rpartition(".")[2] in _SKIPS:
                return True
        if isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call) \
                and _dotted(stmt.value.func).rpartition(".")[2] in _SKIPS:
            return True
    return False


def _none_used_unchecked(tree: ast.Module, stmt: ast.Try, handlers: list) -> bool:
    """A handler that binds the imported names to None, where the file uses one of them and never
    tests it (`if svdq_gemm is None`, `if svdq_gemm:`): the "fallback" is a None that is then
    called (sglang's Nunchaku ops), which fails on an NPU host as the import would have."""
    nones = {t.id for h in handlers for s in h.body if isinstance(s, ast.Assign)
             and isinstance(s.value, ast.Constant) and s.value.value is None
             for t in s.targets if isinstance(t, ast.Name)}
    if not nones:
        return False
    inside = range(stmt.lineno, (stmt.end_lineno or stmt.lineno) + 1)
    used, tested = set(), set()
    for node in astcache.walk(tree):
        if isinstance(node, ast.Name) and node.id in nones and isinstance(node.ctx, ast.Load) \
                and node.lineno not in inside:
            used.add(node.id)
        elif isinstance(node, ast.Compare) and isinstance(node.left, ast.Name) and node.left.id in nones \
                and any(isinstance(c, ast.Constant) and c.value is None for c in node.comparators):
            tested.add(node.left.id)
        elif isinstance(node, (ast.If, ast.IfExp, ast.While, ast.Assert)):
            test = node.test.operand if isinstance(node.test, ast.UnaryOp) else node.test
            for operand in (test.values if isinstance(test, ast.BoolOp) else [test]):
                operand = operand.operand if isinstance(operand, ast.UnaryOp) else operand
                if isinstance(operand, ast.Name) and operand.id in nones:
                    tested.add(operand.id)
    unchecked = used - tested
    if unchecked:
        unchecked -= _flag_guarded(tree, stmt, handlers, unchecked, inside)
    return bool(unchecked)


def _flag_guarded(tree: ast.Module, stmt: ast.Try, handlers: list, names: set, inside: range) -> set:
    """The None-bound names whose every read outside the `try` is in a function that tests the flag
    the handler sets False (`except ImportError: ops = None; VLLM_AVAILABLE = False`, then `if not
    VLLM_AVAILABLE: return fallback(x)` before `ops.scaled_fp8_quant(x)`: sglang's benchmark, round
    14 AK#20): the code checks the flag, not the None, and takes its fallback where the import
    failed."""
    flags = {t.id for h in handlers for s in h.body if isinstance(s, ast.Assign)
             and isinstance(s.value, ast.Constant) and s.value.value is False
             for t in s.targets if isinstance(t, ast.Name)}
    flags &= {t.id for s in stmt.body if isinstance(s, ast.Assign) and isinstance(s.value, ast.Constant)
              and s.value.value is True for t in s.targets if isinstance(t, ast.Name)}
    if not flags:
        return set()
    guarded: list[range] = []
    for node in astcache.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and any(
                isinstance(inner, (ast.If, ast.IfExp, ast.Assert)) and any(
                    isinstance(n, ast.Name) and n.id in flags for n in ast.walk(inner.test))
                for inner in ast.walk(node)):
            guarded.append(range(node.lineno, (node.end_lineno or node.lineno) + 1))
    out = set(names)
    for node in astcache.walk(tree):
        if isinstance(node, ast.Name) and node.id in out and isinstance(node.ctx, ast.Load) \
                and node.lineno not in inside and not any(node.lineno in r for r in guarded):
            out.discard(node.id)
    return out


def _falls_back(handler: ast.ExceptHandler) -> bool:
    """A handler that goes on without the package: it does not raise, exit or skip at its top
    level, and does more than pass or log (binds a name, sets a flag, returns, imports another)."""
    return _goes_on(handler.body) is True


falls_back = _falls_back  # (versionprobes.py: a CUDA version read in a `try` with a fallback)


def _goes_on(block: list) -> bool | None:
    """True: the statements bind or return something and never raise, exit or skip; False: they
    may stop (a `raise`, `pytest.skip`, `sys.exit`, an `if` one of whose branches stops); None:
    they only pass or log."""
    useful = None
    for stmt in block:
        if isinstance(stmt, ast.Raise):
            return False
        if isinstance(stmt, ast.Expr):
            names = _calls(stmt)
            if any(name in _EXITS or name in _SKIPS for name in names):
                return False
            if isinstance(stmt.value, ast.Constant) or all(name in _QUIET_HANDLER for name in names):
                continue  # (a docstring, a log line)
            useful = True
        elif isinstance(stmt, ast.If):  # (`if is_rocm(): pytest.skip(...)`: may stop, binds nothing)
            branches = [_goes_on(stmt.body), _goes_on(stmt.orelse)]
            if False in branches:
                return False
            useful = True if True in branches else useful
        elif not isinstance(stmt, ast.Pass):
            useful = True
    return useful


goes_on = _goes_on  # (optional13.py: a caller's `except Exception` that warns and goes on)


def _prebound(names: set[str], block: list, try_stmt: ast.Try) -> bool:
    """Whether each name is assigned in `block` before the `try` (`Fast_LN = None` in front of
    `try: from apex... import FastLayerNorm as Fast_LN except ImportError: pass`)."""
    seen: set[str] = set()
    for stmt in block:
        if stmt is try_stmt:
            break
        if isinstance(stmt, (ast.Assign, ast.AnnAssign)):
            targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
            seen.update(t.id for t in targets if isinstance(t, ast.Name))
    return bool(names) and names <= seen


def _prebound_alias(tree: ast.Module, names: set[str], block: list, try_stmt: ast.Try) -> bool:
    """`Fast_LN = None` in front of `try: from apex... import FastLayerNorm; Fast_LN =
    FastLayerNorm except ImportError: pass`: the names the `try` body assigns are bound before it,
    and the imported names are read nowhere outside the `try` body (the file uses the alias)."""
    assigned = {t.id for s in try_stmt.body if isinstance(s, ast.Assign) for t in s.targets if isinstance(t, ast.Name)}
    if not assigned or not _prebound(assigned, block, try_stmt):
        return False
    first, last = try_stmt.body[0].lineno, max(s.end_lineno or s.lineno for s in try_stmt.body)
    return not any(isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load) and n.id in names
                   and not first <= n.lineno <= last for n in astcache.walk(tree))


def _type_only_uses(tree: ast.Module, names: set[str], imports: list[ast.stmt], allowed: set[int] | None = None) -> bool:
    """Whether every read of `names` in the file is inside the class argument of an isinstance/
    issubclass check, an annotation, or the arguments of a `register*` call (`allowed`: the ids
    of those nodes, from _type_check_nodes, when the caller has them)."""
    allowed = _type_check_nodes(tree) if allowed is None else allowed
    used = False
    for node in astcache.walk(tree):
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load) and node.id in names:
            if id(node) not in allowed:
                return False
            used = True
    return used


def _type_check_nodes(tree: ast.Module) -> set[int]:
    """The ids of the nodes inside isinstance/issubclass class arguments, annotations and the
    arguments of `register*` calls."""
    allowed: set[int] = set()
    for node in astcache.walk(tree):
        if isinstance(node, ast.Call):
            func = _dotted(node.func).rpartition(".")[2]
            if func in ("isinstance", "issubclass") and len(node.args) >= 2:
                allowed.update(id(n) for n in ast.walk(node.args[1]))
            elif func.startswith("register") or func.endswith("_register"):
                for arg in [*node.args, *(k.value for k in node.keywords)]:
                    allowed.update(id(n) for n in ast.walk(arg))
        elif isinstance(node, ast.arg) and node.annotation is not None:
            allowed.update(id(n) for n in ast.walk(node.annotation))
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.returns is not None:
            allowed.update(id(n) for n in ast.walk(node.returns))
        elif isinstance(node, ast.AnnAssign):
            allowed.update(id(n) for n in ast.walk(node.annotation))
    return allowed


def _imports_in(block: list) -> list[ast.stmt]:
    """The imports of a `try` body, those under an `if` in it included (`try: if sm120(): from
    flashinfer import f else: from sgl_kernel import f`): each fails where the package is missing."""
    out = []
    for stmt in block:
        if isinstance(stmt, (ast.Import, ast.ImportFrom)):
            out.append(stmt)
        elif isinstance(stmt, ast.If):
            out += _imports_in(stmt.body) + _imports_in(stmt.orelse)
    return out


def classify(tree: ast.Module, interest: set[int] | None = None) -> list[tuple[str, set[int], range]]:
    """(reason, import lines, lines it covers) for each guarded import of the shapes above:
    FALLBACK/TYPE_ONLY cover the `try` body, SKIPPED_TEST the rest of the function or module.
    With `interest` (lines of reported imports), only the `try` statements importing on one."""
    blocks: dict[int, int] = {}
    statements = list(walk_statements(tree, blocks))
    by_id = {}
    for stmt in statements:
        for field in ("body", "orelse", "finalbody"):
            block = getattr(stmt, field, None)
            if isinstance(block, list):
                by_id[id(block)] = block
    by_id[id(tree.body)] = tree.body
    out = []
    type_checks: set[int] | None = None
    for stmt in statements:
        if not isinstance(stmt, ast.Try):
            continue
        handlers = [h for h in stmt.handlers if catches_import_error(h)]
        imports = _imports_in(stmt.body)
        if not handlers or not imports:
            continue
        lines = {s.lineno for s in imports}
        if interest is not None and not lines & interest:
            continue
        present = any(_top(s) in PRESENT_ON_NPU for s in imports)
        body = range(stmt.body[0].lineno, max(s.end_lineno or s.lineno for s in stmt.body) + 1)
        names = set().union(*map(bound_names, imports))
        block = by_id.get(blocks.get(id(stmt), -1), [])
        if any(map(_skips, handlers)) and not present:
            # the rest of the block that holds the `try` (the test's body, or the module's): under
            # `if backend == "flashinfer":` the skip ends that branch only
            end = max((s.end_lineno or s.lineno for s in block), default=stmt.end_lineno or stmt.lineno)
            out.append((SKIPPED_TEST, lines, range(stmt.lineno, end + 1)))
            continue
        if any(isinstance(s, ast.Raise) for h in handlers for s in h.body):
            continue
        if names and type_checks is None:
            type_checks = _type_check_nodes(tree)
        if names and _type_only_uses(tree, names, imports, type_checks):
            out.append((TYPE_ONLY, lines, body))
            continue
        if present or not all(map(probe_statement, stmt.orelse)):
            continue  # (an `else:` that defines what uses the package: not defined where it is missing)
        if all(_falls_back(h) or (h.body and all(isinstance(s, ast.Pass) for s in h.body)
                                  and (_prebound(names, block, stmt) or _prebound_alias(tree, names, block, stmt)))
               for h in handlers) and not _none_used_unchecked(tree, stmt, handlers):
            out.append((FALLBACK, lines, body))
        elif all(_goes_on(h.body) is None for h in handlers) and _self_contained(tree, stmt, names):
            out.append((OPTIONAL_BLOCK, lines, body))
    return out


def _self_contained(tree: ast.Module, stmt: ast.Try, imported: set[str]) -> bool:
    """A `try` body whose imported names, and every name it binds besides (a class, a function, a
    flag), are read nowhere in the file outside that body, each function or class it defines being
    read inside it (registered there: `BENCHMARKS["fa"] = Provider`): where the import fails the
    whole optional block is skipped and nothing else misses it. No `else`/`finally` (they run on)."""
    if stmt.orelse or stmt.finalbody or not imported:
        return False
    defined: set[str] = set()
    for node in stmt.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            defined.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            defined.update(t.id for t in targets if isinstance(t, ast.Name))
        elif not isinstance(node, (ast.Import, ast.ImportFrom, ast.Expr)):
            return False  # (an `if`, a loop, a nested `try`: keep to the plain shape)
    first, last = stmt.body[0].lineno, max(s.end_lineno or s.lineno for s in stmt.body)
    watched = imported | defined
    read_inside: set[str] = set()
    for node in astcache.walk(tree):
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load) and node.id in watched:
            if not first <= node.lineno <= last:
                return False
            read_inside.add(node.id)
    defs = {n.name for n in stmt.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))}
    return defs <= read_inside


def review_fallbacks(findings: list[Finding], text: str) -> list[Finding]:
    """Report-only findings inside guarded imports with a fallback, read only by type checks, or
    behind a test skip lowered to info with the reason (classify)."""
    if "try" not in text or "except" not in text:
        return findings
    if not any(not f.fixable and f.cell is None for f in findings):
        return findings
    tree = parse_text(text)
    if tree is None:
        return findings
    # only an import the run reports as a package missing on an NPU host makes the `except` branch
    # run there: not one it rewrites (`from flash_attn import flash_attn_func` -> npu_compat works
    # once migrated), not `from torch.distributed.tensor.parallel import ...` behind a skip; one
    # such import in the `try` is enough (`from flash_attn.flash_attn_interface import
    # _flash_attn_varlen_forward` beside a rewritten one still fails)
    missing = {f.line for f in findings if not f.fixable and f.cell is None and _REPORTED_IMPORT.search(f.message)}
    if not missing:
        return findings
    shapes = [shape for shape in classify(tree, missing) if shape[1] & missing]
    if not shapes:
        return findings
    hits = {id(f): reason for f in findings for reason in [_shape_of(f, shapes)] if reason}
    # a finding of a per-file code that stays at its severity elsewhere in the file absorbs the
    # fallback's (findings.merge_per_file lists its line): left to be merged, as probes.py does
    real = {(f.code, f.severity) for f in findings
            if not f.fixable and f.cell is None and f.severity != "info" and id(f) not in hits}
    out = []
    for finding in findings:
        reason = hits.get(id(finding))
        if reason in (FALLBACK, OPTIONAL_BLOCK) and per_file_code(finding.code) and (finding.code, finding.severity) in real:
            reason = None
        if reason is not None:
            message = finding.message
            for old in (GUARDED, TYPE_CHECKS):
                message = message.replace(f" ({old})", "")
            finding = replace(finding, severity="info", message=f"{message} ({reason})")
        out.append(finding)
    return out


def _shape_of(finding: Finding, shapes: list) -> str | None:
    """The reason of the first shape that covers the finding, or None."""
    if finding.fixable or finding.cell is not None:
        return None
    for reason, lines, covered in shapes:
        if finding.severity == "info" and not (reason not in (FALLBACK, OPTIONAL_BLOCK) and _probe_info(finding)):
            continue
        if reason == SKIPPED_TEST:
            hit = finding.line in covered
        else:
            hit = finding.line in lines or (finding.line in covered and finding.code in PACKAGE_CODES)
        if hit:
            return reason
    return None


def _probe_info(finding: Finding) -> bool:
    """An info finding a probe lowered already (probes.GUARDED / TYPE_CHECKS): a sharper reason
    (read only by type checks, a skipped test) replaces that one."""
    return GUARDED in finding.message or TYPE_CHECKS in finding.message
