"""Folds into the finding that already covers the work (issue #16, precision wave 24, round-24
audits BP#24, BP#39; round 33 HA#36). Whole run (runplan.py, before moot.to_scopes):

* **The generic vLLM note, once per run** (BP#39, `fold_vllm_notes`): NPU916's information "vLLM
  runs on Ascend through the vllm-ascend plugin: import from `vllm`" with no note of its own (not
  the NCCL weight-transfer warning, whose advice is specific) is the same sentence in every file
  that imports vLLM. It is kept once: at the run's NPU916 finding of the highest severity (a
  library module before a test, benchmark, example or script, then path order), whose message
  names the other sites; each other generic note is lowered with FOLDED (moot.NO_WORK, a named
  scope that names where the note is). A run with one such note keeps it as it is; a warning or
  error NPU916 is never folded.
* **A test module beside a Triton kernel module, testing it** (BP#24, `fold_kernel_tests`): the
  NPU913 error of `X_test.py` / `test_X.py` in the folder of `X.py`, which imports from `X`, where
  `X.py` holds an open NPU910 error (its Triton kernels do not run on an NPU), and every FP8 place
  of the finding is an FP8 dtype written as an argument of a call (the dtype handed to the kernel
  under test or to its reference), at least one of them to a function imported from `X`.
  Porting the test is porting the kernel: folded into X's NPU910 error, whose message names the
  test file and its lines (as jitfolds23.py does for the tests of a CUDA JIT kernel). An FP8 cast
  of the test's own (`x.to(torch.float8_e4m3fn)`), a test of another folder's module, or a kernel
  module with no open error keeps the finding.
* **A second vLLM note in one file** (round-33 audit HA#36, `fold_file_notes`, right after the
  two above): a generic NPU916 info (bare, or noting only that the optional `vllm` must be
  installed) beside the same file's open NPU916 warning or error is folded into that finding,
  which lists its line: NPU916 is one finding per file.

An error folds only into an error, never into a scoped (moot) finding; nothing is dropped
silently: the target's message names each folded file and its lines.
"""

from __future__ import annotations

import ast
import dataclasses
import posixpath
import re
from typing import Optional

from . import astcache
from .findings import Finding

FOLDED = "the vLLM note given once for the run at "  # (moot.NO_WORK)
KERNEL_TEST = ("also {what}: a test of this module's Triton kernels beside it, whose FP8 dtypes are the "
               "arguments of those kernels and of their reference; ported with them")
_GENERIC = re.compile(r"^vLLM runs on Ascend through the vllm-ascend plugin: import (?:from )?`[\w.]+`"
                      r"(?: \((?:also at lines? [\d, ]+(?: and \d+ more)?|byte-identical cop[^()]*)\))*$")
_AUX = re.compile(r"(^|/)(tests?|benchmarks?|examples?|scripts?|docs?)(/|$)|(^|/)(test_[^/]*|[^/]*_test)\.py$")
_TEST_FILE = re.compile(r"(^|/)(test_(?P<a>[^/]+)|(?P<b>[^/]+)_test)\.py$")
_RANK = {"info": 0, "warning": 1, "error": 2}
_SHOWN = 5


# (round-33 audit HA#36: an opt-in note that says only that `vllm` must be installed adds nothing to
# the generic note, which assumes vLLM installed with vllm-ascend)
_VLLM_OPTIONAL = " (reached on an NPU host only when the optional package `vllm` is installed"


def _generic(message: str) -> bool:
    """The generic note, bare or followed by one note that vLLM is an optional package here."""
    if _GENERIC.match(message):
        return True
    at = message.find(_VLLM_OPTIONAL)
    if at <= 0 or not _GENERIC.match(message[:at]) or not message.endswith(")"):
        return False
    depth = 0
    for index, char in enumerate(message[at + 1:]):  # (the note's parenthesis closes at the end only)
        depth += (char == "(") - (char == ")")
        if depth == 0 and index < len(message) - at - 2:
            return False
    return depth == 0


def _open(finding: Finding) -> bool:
    from .moot import is_moot

    return not finding.fixable and finding.cell is None and not is_moot(finding)


def _lines(finding: Finding) -> list[int]:
    return sorted({finding.line, *(line for line, _c, _s in finding.also)})


def _shown(lines: list[int]) -> str:
    more = f" and {len(lines) - _SHOWN} more" if len(lines) > _SHOWN else ""
    return ", ".join(map(str, lines[:_SHOWN])) + more


# ----------------------------------------------------------------------------- BP#39: the vLLM note
def fold_vllm_notes(results: list) -> list:
    """Module doc, first shape."""
    notes = [(i, f) for i, r in enumerate(results) for f in r.findings
             if f.code == "NPU916" and _open(f) and f.severity != "info" or
             (f.code == "NPU916" and _open(f) and _GENERIC.match(f.message))]
    generic = [(i, f) for i, f in notes if f.severity == "info"]
    if len(notes) < 2 or not generic:
        return results
    anchor_index, anchor = min(notes, key=lambda p: (-_RANK[p[1].severity], bool(_AUX.search(p[1].path)),
                                                    p[1].path, p[1].line))
    folded = [(i, f) for i, f in generic if f is not anchor]
    if not folded:
        return results
    where = f"{anchor.path}:{anchor.line}"
    out = list(results)
    for index, finding in folded:
        lowered = dataclasses.replace(finding, message=(
            f"{finding.message} ({FOLDED}{where}: on an NPU host this import needs only vllm-ascend "
            "installed, as that note says)"))
        out[index] = dataclasses.replace(out[index], findings=[lowered if f is finding else f
                                                               for f in out[index].findings])
    sites = [f"{f.path}:{f.line}" for _i, f in folded]
    shown = ", ".join(sites[:4]) + (f" and {len(sites) - 4} more" if len(sites) > 4 else "")
    kept = dataclasses.replace(anchor, message=(
        f"{anchor.message} (the note that vLLM runs through vllm-ascend also holds for {len(sites)} more "
        f"import site{'s' if len(sites) > 1 else ''}, given here once: {shown})"))
    out[anchor_index] = dataclasses.replace(out[anchor_index], findings=[kept if f is anchor else f
                                                                         for f in out[anchor_index].findings])
    return out


# ----------------------------------------------------------------------------- BP#24: tests beside a kernel module
def _module_name(relpath: str) -> str:
    return relpath[:-3].replace("/", ".")


def _imported_from(tree: ast.Module, module: str) -> set[str]:
    """Names the test imports from `module` (the dotted path's tail must match)."""
    out = set()
    for node in astcache.nodes(tree, (ast.ImportFrom,)):
        absolute = not node.level and node.module and (node.module == module or module.endswith("." + node.module))
        relative = node.level == 1 and node.module == module.rsplit(".", 1)[-1]
        if absolute or relative:
            out.update(a.asname or a.name for a in node.names)
    return out


def _fp8_arguments(tree: ast.Module, lines: list[int], kernels: set[str]) -> bool:
    """Every FP8 dtype on `lines` is an argument of a call, at least one of a kernel's."""
    fp8 = [n for n in astcache.walk(tree) if isinstance(n, ast.Attribute) and n.attr.startswith("float8_")
           and astcache.dotted(n) is not None and astcache.dotted(n).startswith("torch.") and n.lineno in lines]
    if not fp8 or {n.lineno for n in fp8} != set(lines):
        return False
    arguments: dict[int, str] = {}
    for call in astcache.nodes(tree, (ast.Call,)):
        name = (astcache.dotted(call.func) or "").rpartition(".")[2]
        if isinstance(call.func, ast.Attribute) and call.func.attr in ("to", "view", "type"):
            continue  # (a cast of the test's own)
        for argument in [*call.args, *(k.value for k in call.keywords)]:
            arguments[id(argument)] = name
    if not all(id(n) in arguments for n in fp8):
        return False
    return any(arguments[id(n)] in kernels for n in fp8)


def fold_kernel_tests(results: list, paths: Optional[dict] = None) -> list:
    """Module doc, second shape."""
    from .modpaths import result_bytes

    by_path = {r.relpath: i for i, r in enumerate(results)}
    notes: dict[int, list[tuple[int, Finding]]] = {}
    for i, result in enumerate(results):
        match = _TEST_FILE.search(result.relpath)
        if not match:
            continue
        errors = [f for f in result.findings if f.code == "NPU913" and f.severity == "error" and _open(f)]
        if not errors:
            continue
        sibling = posixpath.join(posixpath.dirname(result.relpath), (match.group("a") or match.group("b")) + ".py")
        k = by_path.get(sibling)
        target = None if k is None else next(
            (f for f in results[k].findings if f.code == "NPU910" and f.severity == "error" and _open(f)), None)
        if target is None:
            continue
        data = result_bytes(result, paths or {})
        tree = astcache.parse(data) if data else None
        if tree is None:
            continue
        kernels = _imported_from(tree, _module_name(sibling))
        for finding in errors:
            if kernels and _fp8_arguments(tree, _lines(finding), kernels):
                notes.setdefault(k, []).append((i, finding))
    if not notes:
        return results
    out = list(results)
    for k, folded in notes.items():
        target = next(f for f in out[k].findings if f.code == "NPU910" and f.severity == "error" and _open(f))
        what = ", ".join(f"`{f.source or f.code}` ({f.code}) in `{results[i].relpath}` "
                         f"(line{'s' if len(_lines(f)) > 1 else ''} {_shown(_lines(f))})" for i, f in folded)
        kept = dataclasses.replace(target, message=f"{target.message} ({KERNEL_TEST.format(what=what)})")
        out[k] = dataclasses.replace(out[k], findings=[kept if f is target else f for f in out[k].findings])
        for i, finding in folded:
            out[i] = dataclasses.replace(out[i], findings=[f for f in out[i].findings if f is not finding])
    return out


def fold_file_notes(results: list) -> list:
    """Round-33 audit HA#36: a file's NPU916 info that says only the generic note (bare, or that the
    optional `vllm` must be installed) beside the same file's open NPU916 warning or error (trl's
    `get_ip` import beside its NCCL weight-transfer imports): NPU916 is one finding per file, so the
    info is folded into that finding (folding.absorb: its line listed). A file with no such finding,
    and a note of its own (not the generic one), keep theirs; fold_vllm_notes then gives the
    generic note once per run."""
    from .folding import absorb

    out = list(results)
    for index, result in enumerate(results):
        notes = [f for f in result.findings if f.code == "NPU916" and _open(f)]
        target = next((f for f in sorted(notes) if f.severity != "info"), None)
        folded = [f for f in notes if f.severity == "info" and _generic(f.message)]
        if target is None or not folded:
            continue
        kept = absorb(target, folded)
        gone = {id(f) for f in folded}
        out[index] = dataclasses.replace(result, findings=[kept if f is target else f for f in result.findings
                                                           if id(f) not in gone])
    return out
