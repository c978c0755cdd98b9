"""Library modules that raise ImportError where an optional package is missing (issue #16, policy
P1, round-34 audit IA#3 and IA#36). A whole-run pass (runplan.whole_run_passes, right after
optpkgexit29.py, whose scripts exit where the package is missing: this is the same choice made by a
library module that refuses to load).

Two module-level shapes:

    from vllm.utils.import_utils import has_helion          # `return _has_module("helion")`

    if not has_helion():
        raise ImportError("... requires helion to be installed. Install it with: pip install helion")

    import helion.language as hl
    ...
        out = torch.empty((m, d), device=input.device, dtype=torch.float8_e4m3fn)   # NPU913

(vLLM's Helion op `kernels/helion/ops/silu_mul_fp8.py`, IA#3: the matching test line is already info
through optpkgtests28.py's reading of the same probe), and

    try:
        from checkpoint_engine.worker import update_weights_from_ipc
    except ImportError:
        raise ImportError("checkpoint-engine is not installed. "
                          "Please install it with: pip install sglang[checkpoint-engine]")
    ...
            return f"GPU-{torch.cuda.get_device_properties(device_id).uuid!s}"      # NPU931

(SGLang's checkpoint-engine worker, IA#36: the package is one of the project's extras). Everything
after the guard runs only where the package imports, so an NPU host reaches it only once a user
installs that package: an explicit choice. The open errors and warnings on the lines after the guard
become info "reached on an NPU host only when the optional package `helion` is installed: the module
raises ImportError where it is missing (...)". Never dropped, never a scope (the package may be
installed there).

The decision, per Python file with open findings:
* `if not probe(): raise ImportError(...)` (or ModuleNotFoundError) at the module's top level with
  no `else:`, the probe a plain call with no arguments that optpkgtests28's Probes resolve to a
  package P (a lookup by name a few calls deep), P not a package of the run nor one an NPU host has
  (torch, Triton, scopes.toml installed_on_npu);
* or a top-level `try` importing a package P (absolute import, not a package of the run, not one an
  NPU host has) every handler of which catches ImportError or ModuleNotFoundError and ends in a
  `raise`, where P is optional: a probe the file calls resolves to P, or a handler's message names
  an extra of a project (`pip install sglang[checkpoint-engine]`);
* only the places on lines after the guard are lowered.

Kept as they were (the nearest true cases): a `raise ImportError` unless a package the project does
not probe imports (a required dependency whose message only says `pip install einops`: the module
loads wherever the project is installed), a probe of a package an NPU host has (`has_triton()`), a
handler that falls back instead of raising, a guard inside a function, and the places before it.
"""

from __future__ import annotations

import ast
import dataclasses
import re

from . import astcache
from .findings import lower_pieces, merge_per_file
from .modpaths import RunTexts
from .optpkgtests28 import Probes, is_open

PROBED = ("reached on an NPU host only when the optional package `{package}` is installed: the module raises "
          "ImportError where it is missing (`if not {probe}(): raise`, line {line}; `{probe}()`, {where}, "
          "looks the package up)")
EXTRA = ("reached on an NPU host only when the optional package `{package}` is installed: the module raises "
         "ImportError where it is missing (line {line}: `{hint}`, an extra of the project)")
_IMPORT_ERRORS = frozenset({"ImportError", "ModuleNotFoundError"})
_EXTRA_HINT = re.compile(r"pip install ['\"]?[\w.-]+\[[\w,.-]+\]")


def _raises_import_error(body: list) -> bool:
    """The block ends in `raise ImportError(...)` / `raise ModuleNotFoundError(...)`."""
    last = body[-1] if body else None
    if not isinstance(last, ast.Raise) or last.exc is None:
        return False
    target = last.exc.func if isinstance(last.exc, ast.Call) else last.exc
    return (astcache.dotted(target) or "").rpartition(".")[2] in _IMPORT_ERRORS


def _catches_import(handler: ast.ExceptHandler) -> bool:
    kinds = handler.type.elts if isinstance(handler.type, ast.Tuple) else [handler.type]
    return handler.type is not None and any(isinstance(k, ast.Name) and k.id in _IMPORT_ERRORS for k in kinds)


def _packages(body: list) -> list[str]:
    out: list[str] = []
    for stmt in body:
        if isinstance(stmt, ast.Import):
            out += [a.name.split(".")[0] for a in stmt.names]
        elif isinstance(stmt, ast.ImportFrom) and stmt.module and not stmt.level:
            out.append(stmt.module.split(".")[0])
    return list(dict.fromkeys(out))


def _negated_probe(test: ast.AST) -> str | None:
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not) and isinstance(test.operand, ast.Call) \
            and isinstance(test.operand.func, ast.Name) and not test.operand.args and not test.operand.keywords:
        return test.operand.func.id
    return None


def _extra_hint(handlers: list) -> str | None:
    for handler in handlers:
        for node in ast.walk(handler):
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                found = _EXTRA_HINT.search(node.value)
                if found:
                    return found.group(0)
    return None


def _guard(tree: ast.Module, own: frozenset, probes: Probes, relpath: str) -> tuple[int, str] | None:
    """(the first line after the guard, the reason) of the module's raise-unless-installed guard, or None."""
    called = None
    for stmt in tree.body:
        if isinstance(stmt, ast.If) and not stmt.orelse and _raises_import_error(stmt.body):
            name = _negated_probe(stmt.test)
            found = probes.resolve(tree, relpath, name) if name else None
            if found is not None and found[0] not in own:
                return (stmt.end_lineno or stmt.lineno) + 1, PROBED.format(
                    package=found[0], probe=name, line=stmt.lineno, where=found[1])
        if not (isinstance(stmt, ast.Try) and stmt.handlers and not stmt.orelse
                and all(_catches_import(h) and _raises_import_error(h.body) for h in stmt.handlers)):
            continue
        packages = [p for p in _packages(stmt.body) if p not in own and p not in probes.present]
        if not packages:
            continue
        after = (stmt.end_lineno or stmt.lineno) + 1
        hint = _extra_hint(stmt.handlers)
        if hint is not None:
            return after, EXTRA.format(package=packages[0], line=stmt.handlers[0].lineno, hint=hint)
        flat = ast.Module(body=[*tree.body, *stmt.body], type_ignores=[])
        if called is None:
            called = dict.fromkeys(n.func.id for n in astcache.walk(tree) if isinstance(n, ast.Call)
                                   and isinstance(n.func, ast.Name) and not n.args and not n.keywords)
        for name in called:
            found = probes.resolve(flat, relpath, name)
            if found is not None and found[0] in packages:
                return after, PROBED.format(package=found[0], probe=name, line=stmt.lineno, where=found[1])
    return None


def review(results: list, paths: dict) -> list:
    """The results, with the open findings after a library module's raise-unless-installed guard on an
    optional package lowered to info (this module's docstring)."""
    candidates = [i for i, r in enumerate(results) if r.relpath.endswith(".py") and any(is_open(f) for f in r.findings)]
    if not candidates:
        return results
    text_of = RunTexts(results, paths)
    probes = None
    out = list(results)
    # (the run's top-level packages, as optpkgexit29 reads them)
    top = frozenset(p.removesuffix(".py") for r in results
                    for p in [r.relpath.split("/")[1 if r.relpath.startswith("src/") else 0]])
    for i in candidates:
        data = text_of(i)
        if not data or not re.search(rb"^(if not \w+\(\):|try:)\s*$", data, re.M) \
                or not re.search(rb"^\s+raise (ImportError|ModuleNotFoundError)\b", data, re.M):
            continue
        tree = astcache.parse(data)
        if tree is None:
            continue
        probes = probes or Probes(results, text_of)
        try:
            found = _guard(tree, top, probes, results[i].relpath)
        except RecursionError:
            continue
        if found is None:
            continue
        first, why = found

        def reason_of(line: int, first=first, why=why) -> str | None:
            return why if line >= first else None

        changed, findings = False, []
        for finding in results[i].findings:
            pieces = lower_pieces(finding, reason_of) if is_open(finding) else None
            if pieces is None:
                findings.append(finding)
                continue
            lowered = [p for p in pieces if p.severity == "info" and why in p.message]
            findings.extend(merge_per_file(lowered) + [p for p in pieces if p not in lowered])
            changed = True
        if changed:
            out[i] = dataclasses.replace(results[i], findings=sorted(findings))
    return out
