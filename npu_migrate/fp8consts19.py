"""FP8 (NPU913) places that are a module's dtype constant, or that flags16 gave back inside code
only another platform's dispatch reaches (issue #16, round 19). Whole run, from
runplan.whole_run_passes (after flags16.py, whose `unfold_fp8` gives some places back as their
own NPU913).

* **A module-level FP8 dtype constant in a module whose import already fails** (`fold_constants`):
  `fp8_dtype = torch.float8_e4m3fn` (or `torch.float8_e4m3fnuz if _is_hip else
  torch.float8_e4m3fn`, or `FP8_MAX = torch.finfo(torch.float8_e4m3fn).max`), assigned at module
  level (in a module-level `if`/`else`/`try` too) below an unguarded module-level import that the
  file reports as an error (NPU910 `import triton`, NPU911 a CUDA-only package): the constant only
  names a dtype, and on an NPU host the module never gets past that import to use it. Its place
  folds into that import's finding, which names it ("with `torch.float8_e4m3fn` ...": nothing is
  dropped). Where no such import precedes it, a constant that the file never uses where it computes
  (only `torch.finfo(...)`, comparisons, or not read at all: other modules import it) becomes
  information (`FP8 dtype constant`: its uses, elsewhere, are where FP8 compute happens); one the
  file casts to or allocates with (`x.to(FP8_DTYPE)`, `torch.empty(..., dtype=FP8_DTYPE)`) keeps
  its error: the constant stands for that compute, which names no FP8 dtype itself.
* **FP8 uses given back inside a dispatch span** (`review_unfolded`): flags16.unfold_fp8 gives
  the FP8 uses folded into a CUDA-only import under a false flag (`if _is_cuda: from sgl_kernel
  import bmm_fp8`) back as their own NPU913 error. It runs after wholeprogram lowered the findings
  inside dispatch.py's spans (a method the file calls only under `x == E.MEMBER`, for a member
  the project produces only in blocks false on an NPU host: SGLang's
  `forward_absorb_fused_mla_rope_prepare`, reached only through `AttnForwardMethod.MLA_FUSED_ROPE`,
  which `_dispatch_mla_subtype` returns only under `if _is_hip:`), so those uses stood as errors in
  code an NPU host never reaches. Such a finding whose every place lies in one of those spans is
  lowered as wholeprogram lowers the others: info, "in a branch an NPU host does not take" with
  dispatch's reason (a named scope); unfold_fp8's note ("reported on its own") is dropped, no
  longer true. The same FP8 use in a method an NPU host may select (SGLang's minicpm3 `forward`,
  whose own branch calls `bmm_fp8` the same way) stays an error: an FP8 checkpoint goes there.

Kept as FP8 compute: FP8 places in the module's functions (a cast, a factory with an FP8 dtype),
a constant the file computes with and no failing import precedes, an unfolded FP8 use outside a
dispatch span. Not done here: an FP8 dtype given to a weight `Parameter` (checkpoint storage, as
in the quantization schemes' `create_weights`): it is the only FP8 trace of a scheme whose kernels
name no FP8 dtype, so it stays an error.
"""

from __future__ import annotations

import ast
import dataclasses
import re

from . import astcache
from .findings import Finding

FP8 = "NPU913"
_IMPORT_CODES = frozenset({"NPU910", "NPU911"})
_FINFO = frozenset({"finfo", "iinfo"})
_LIMITS = frozenset({"max", "min", "eps", "tiny", "smallest_normal", "resolution", "bits"})
# how a folded constant is named in the import's finding (folding.absorb: "(with `X` FOLDED)")
FOLDED = ("in a module-level FP8 dtype constant below this import, which fails first on an NPU host; "
          "the module's kernels are where FP8 is computed")
CONSTANT = ("FP8 dtype constant: the file only names it (in `torch.finfo`, comparisons, or for other "
            "modules to import); its uses are where FP8 compute happens")


def _open(finding: Finding, codes) -> bool:
    from .moot import is_moot

    return (finding.code in codes and not finding.fixable and finding.cell is None and finding.severity == "error"
            and not is_moot(finding))


def review(results: list, paths: dict) -> list:
    """The run's results with the two shapes of the module's doc reviewed."""
    from .modpaths import RunTexts

    results = fold_constants(results, RunTexts(results, paths))
    return review_unfolded(results, paths)


# ----------------------------------------------------------------------------- module-level constants
def _is_fp8(node: ast.AST) -> bool:
    return isinstance(node, ast.Attribute) and node.attr.startswith("float8_")


def _dtype_value(node: ast.AST) -> bool:
    """An FP8 dtype, a conditional between dtypes one of which is FP8, or a `finfo` limit of one."""
    if _is_fp8(node):
        return True
    if isinstance(node, ast.IfExp):
        branches = (node.body, node.orelse)
        return all(isinstance(b, (ast.Attribute, ast.Name)) for b in branches) and any(map(_is_fp8, branches))
    if isinstance(node, ast.Attribute) and node.attr in _LIMITS:
        node = node.value
    if isinstance(node, ast.Call) and len(node.args) == 1 and not node.keywords:
        name = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
        return name in _FINFO and _dtype_value(node.args[0])
    return False


def _module_statements(tree: ast.Module):
    """The module's statements, those of its module-level `if`/`try`/`with` blocks included."""
    stack = list(reversed(tree.body))
    while stack:
        stmt = stack.pop()
        yield stmt
        if isinstance(stmt, (ast.If, ast.Try, ast.With)) or type(stmt).__name__ == "TryStar":
            blocks = [getattr(stmt, f, None) or [] for f in ("body", "orelse", "finalbody")]
            blocks += [h.body for h in getattr(stmt, "handlers", ()) or ()]
            stack.extend(reversed([s for block in blocks for s in block]))


def constants(tree: ast.Module) -> list[tuple[ast.stmt, list[str]]]:
    """(assignment, names it binds) of the module-level FP8 dtype constants."""
    out = []
    for stmt in _module_statements(tree):
        if isinstance(stmt, ast.Assign) and stmt.value is not None:
            targets = stmt.targets
        elif isinstance(stmt, ast.AnnAssign) and stmt.value is not None:
            targets = [stmt.target]
        else:
            continue
        if targets and all(isinstance(t, ast.Name) for t in targets) and _dtype_value(stmt.value):
            out.append((stmt, [t.id for t in targets]))
    return out


def _within(node: ast.AST, line: int, column: int) -> bool:
    start = (node.lineno, node.col_offset + 1)
    end = (node.end_lineno or node.lineno, (node.end_col_offset or 0) + 1)
    return start <= (line, column) < end


def _computed_with(tree: ast.Module, names: set[str], definitions: set[int]) -> list[int]:
    """Lines where the file reads one of `names` other than as a `finfo`/`iinfo` argument, a
    comparison's side, or in the constants' own definitions."""
    skip: set[int] = set()
    for node in astcache.walk(tree):
        if isinstance(node, ast.Call) and (getattr(node.func, "attr", None) or getattr(node.func, "id", None)) in _FINFO:
            skip.update(id(a) for a in node.args)
        elif isinstance(node, ast.Compare):
            skip.update(id(s) for s in (node.left, *node.comparators))
    lines = []
    for node in astcache.walk(tree):
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load) and node.id in names \
                and id(node) not in skip and node.lineno not in definitions:
            lines.append(node.lineno)
    return sorted(set(lines))


def _failing_import(findings: list[Finding], tree: ast.Module) -> dict[int, Finding]:
    """{line: finding} of the unguarded module-level imports the file reports as open errors."""
    top = {s.lineno for s in tree.body if isinstance(s, (ast.Import, ast.ImportFrom))}
    out: dict[int, Finding] = {}
    for finding in findings:
        if _open(finding, _IMPORT_CODES):
            for line, _c, _s in [(finding.line, finding.column, finding.source), *finding.also]:
                if line in top:
                    out.setdefault(line, finding)
    return out


def _review_constants(findings: list[Finding], tree: ast.Module) -> list[Finding]:
    from .folding import ALSO, Fold, places_of

    consts = constants(tree)
    if not consts:
        return findings
    imports = _failing_import(findings, tree)
    fold = Fold(findings)
    lowered: dict[int, Finding] = {}
    for finding in findings:
        if not _open(finding, (FP8,)):
            continue
        places = places_of(finding)
        holders = [next((c for c in consts if _within(c[0].value, line, column)), None) for line, column, _s in places]
        ours = [p for p, c in zip(places, holders) if c is not None]
        if not ours:
            continue
        first = min(ours)[0]
        before = [line for line in imports if line < first]
        if before:
            target = imports[min(before)]
            if fold.movable(finding, target):
                fold.targets.add(id(target))
                fold.move(finding, ours, target)
            continue
        if len(ours) != len(places):
            continue  # (the file computes in FP8 elsewhere: its finding stands)
        names = {n for c in holders for n in c[1]}
        definitions = {line for c in holders for line in range(c[0].lineno, (c[0].end_lineno or c[0].lineno) + 1)}
        if _computed_with(tree, names, definitions):
            continue  # (the constant stands for the compute the file does with it)
        shown = ", ".join(f"`{n}`" for n in sorted(names))
        also = ALSO.search(finding.message)
        lowered[id(finding)] = dataclasses.replace(finding, severity="info", message=(
            f"{ALSO.sub('', finding.message)} ({CONSTANT}: {shown}){also.group(0) if also else ''}"))
    out = fold.result(name_them=FOLDED)
    return [lowered.get(id(f), f) for f in out]


_ASSIGNMENT = re.compile(rb"^[ \t]*\w+[ \t]*(?::[^=\n]*)?=(?!=)[^\n]*float8_")


def fold_constants(results: list, text_of) -> list:
    out = list(results)
    for i, result in enumerate(results):
        if not result.relpath.endswith(".py") or not any(_open(f, (FP8,)) for f in result.findings):
            continue
        data = text_of(i)
        if not data or b"float8_" not in data:
            continue
        lines = data.split(b"\n")
        if not any(0 < n <= len(lines) and (not lines[n - 1][:1].isspace() or _ASSIGNMENT.match(lines[n - 1]))
                   for f in result.findings if _open(f, (FP8,)) for n in [f.line, *(p[0] for p in f.also)]):
            continue  # (cheap: a place on an unindented line, or on an assignment's line)
        tree = astcache.parse(data)
        if tree is None:
            continue
        findings = _review_constants(result.findings, tree)
        if findings is not result.findings:
            out[i] = dataclasses.replace(result, findings=sorted(findings))
    return out


# ----------------------------------------------------------------------------- FP8 uses unfolded inside a dispatch span
_UNFOLDED = ("this FP8 use is reported on its own",)
# (flags16.unfold_fp8's note, no longer true once the use is lowered: it names the untaken import's
# branch first, which moot.py would read as the finding's reason)
_UNFOLD_NOTE = re.compile(r" \(in code that computes with [^()]*this FP8 use is reported on its own\)")


def _unfolded(finding: Finding) -> bool:
    from .flags16 import UNFOLDED

    return _open(finding, (FP8,)) and any(mark in finding.message for mark in (*_UNFOLDED, UNFOLDED))


def review_unfolded(results: list, paths: dict) -> list:
    """FP8 uses flags16.unfold_fp8 gave back as their own NPU913 errors (or merged into the
    file's NPU913) whose every place lies in a span dispatch.gates proves an NPU host never enters
    (a method called only under `x == E.MEMBER` for a member produced only off NPU): info, in a
    branch an NPU host does not take, with dispatch's reason. Only those findings: the others
    inside the spans were lowered by wholeprogram before the unfold."""
    wanted = [i for i, r in enumerate(results) if r.relpath.endswith(".py") and any(map(_unfolded, r.findings))]
    if not wanted:
        return results
    from .dispatch import gates
    from .folding import ALSO
    from .modpaths import result_bytes
    from .wholeprogram import file_facts

    python = [i for i, r in enumerate(results) if r.relpath.endswith(".py")]
    texts = {i: result_bytes(results[i], paths) for i in python}
    facts: dict[int, dict] = {}

    def facts_of(i: int) -> dict:
        if i not in facts:
            facts[i] = results[i].facts if results[i].facts is not None else file_facts(results[i].relpath,
                                                                                        texts.get(i) or b"")
        return facts[i]

    spans = gates(results, python, texts, facts_of)
    out = list(results)
    for i in wanted:
        if not spans.get(i):
            continue
        findings, changed = [], False
        for finding in results[i].findings:
            lines = [finding.line, *(line for line, _c, _s in finding.also)]
            inside = [next((why for first, last, why in spans[i] if first <= n <= last), None) for n in lines]
            if _unfolded(finding) and all(inside):
                reasons = "; ".join(dict.fromkeys(inside))
                message = _UNFOLD_NOTE.sub("", finding.message)
                also = ALSO.search(message)
                message = (f"{ALSO.sub('', message)} (in a branch an NPU host does not take: {reasons})"
                           f"{also.group(0) if also else ''}")
                finding = dataclasses.replace(finding, severity="info", message=message)
                changed = True
            findings.append(finding)
        if changed:
            out[i] = dataclasses.replace(results[i], findings=findings)
    return out
