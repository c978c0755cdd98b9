"""One construct, one finding: report-only findings that restate another one, folded into it.

The precision audits of issue #16 read several findings as one construct reported again:

- the uses of a reported object (`self.nccl = NCCLLibrary()` reported, then every
  `self.nccl.ncclAllReduce(...)`): the uses are the object's places (`fold_object_uses`);
- the code a reported device check guards (NPU110/NPU108: `if torch.cuda.is_available():` in front
  of `torch.version.cuda.split(".")`): the check is left meaning CUDA, so the branch it guards is
  the CUDA-only code it reports (`fold_guarded_branches`);
- findings in one statement (one probe `torch.version.cuda or os.environ["CUDA_VERSION"]`, the
  `NCCL_*` keys of one dict literal or one call, a parametrize label and its skip mark): one
  finding whose message names the others (`fold_statements`).

Nothing is dropped: a folded finding's places go into the kept one's `also` (findings.split_merged
gives them back) and its line into the kept one's message. A finding is only folded into one at
its own severity or a higher one (a use that fails is not hidden under a warning), and never into
one of another moot status (moot.py: an info finding about code an NPU host never runs becomes a
skipped scope; what it absorbed would go with it).
"""

from __future__ import annotations

import ast
import re
from dataclasses import replace

from . import astcache, catalogue, keptgates, moot
from .findings import Finding
from .earlyexits27 import exit_spans, flag_spans
from .kernelaliases26 import fold_into_kernels as fold_kernel_aliases
from .ncclfolds26 import fold_adjacent as fold_adjacent_nccl
from .ncclonly import NCCL_ONLY
from .folding import ALSO as _ALSO, RANK, Fold as _Fold, Place, absorb, may_absorb as _may_absorb
from .folding import named as _named, ours as _ours, places_of as _places, rebuilt as _rebuilt
from .secondary import (fold_after_failing_calls, fold_fp8_into_package_class, move_fp8_defaults_to_calls,
                        review_backend_params)

GUARDS = ("NPU110", "NPU108")
LEFTOVER = "NPU990"  # the catch-all "reference left unchanged": it restates whatever it sits in
_DOTTED = re.compile(r"[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*")


def _parse(text: str) -> ast.Module | None:
    """The file's tree, from the parse the other passes share (astcache)."""
    body = text.encode("utf-8", "surrogatepass")
    return astcache.parse(body[3:] if body.startswith(b"\xef\xbb\xbf") else body)


# ----------------------------------------------------------------------------- uses of a reported object
def fold_object_uses(findings: list[Finding]) -> list[Finding]:
    """NPU990 on `obj.attr...` folded into the finding that reports `obj` itself (`self.nccl`):
    a method of a CUDA-only object is that object again."""
    objects: dict[str, Finding] = {}
    for finding in findings:
        if _ours(finding):
            for _line, _column, source in _places(finding):
                if _DOTTED.fullmatch(source or "") and "." in source:
                    objects.setdefault(source, finding)
    if not objects:
        return findings

    def owner(source: str) -> Finding | None:
        parts = (source or "").split(".")
        return next((objects[".".join(parts[:cut])] for cut in range(len(parts) - 1, 1, -1)
                     if ".".join(parts[:cut]) in objects), None)  # the longest reported prefix

    fold = _Fold(findings)
    leftovers = [f for f in findings if f.code == LEFTOVER and _ours(f)]
    fold.targets.update(id(o) for f in leftovers for p in _places(f) for o in [owner(p[2])] if o is not None)
    for finding in leftovers:
        for place in _places(finding):
            target = owner(place[2])
            # (at the object's own severity: `torch.version.cuda` at import is an error, its
            # `.startswith` behind a None test a warning, two constructs)
            if target is not None and target.severity == finding.severity and fold.movable(finding, target):
                fold.move(finding, [place], target)
    return fold.result()


# ----------------------------------------------------------------------------- the branch a reported check guards
def _within(node: ast.AST, line: int, column: int) -> bool:
    start = (node.lineno, node.col_offset + 1)
    end = (node.end_lineno or node.lineno, (node.end_col_offset or 0) + 1)
    return start <= (line, column) < end


def _polarity(test: ast.AST, line: int, column: int) -> bool | None:
    """True when the `if` test is true only where the check at (line, column) is (the check, a
    conjunct of an `and`, a `==`); False when it is true only where the check is false (`not`,
    `!=`); None when neither follows (an `or`, a call around it)."""
    node = test
    positive = True
    while True:
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
            positive = not positive
            node = node.operand
        elif isinstance(node, ast.BoolOp):
            inner = next((v for v in node.values if _within(v, line, column)), None)
            if inner is None:
                return None
            if isinstance(node.op, ast.And) is not positive:
                return None  # (`a or check`, `not (a and check)`: the branch runs without the check)
            node = inner
        elif isinstance(node, ast.Compare) and len(node.ops) == 1:
            if isinstance(node.ops[0], (ast.NotEq, ast.IsNot, ast.NotIn)):
                positive = not positive
            return positive
        elif isinstance(node, (ast.Call, ast.Attribute, ast.Name, ast.Compare)):
            return positive if _within(node, line, column) else None
        else:
            return None


def _guarded_spans(tree: ast.Module, line: int, column: int) -> list[tuple[int, int]]:
    """Line spans of the branch the CUDA check at (line, column) guards: the body of the `if`
    whose test is true only with the check, or the `else` of one true only without it."""
    spans = []
    for stmt in astcache.walk_statements(tree):
        if not isinstance(stmt, ast.If) or not _within(stmt.test, line, column):
            continue
        polarity = _polarity(stmt.test, line, column)
        block = stmt.body if polarity else stmt.orelse if polarity is False else []
        if block:
            spans.append((block[0].lineno, block[-1].end_lineno or block[-1].lineno))
    spans += exit_spans(tree, line, column)  # (`if not check: return`, then the guarded code)
    return spans + flag_spans(tree, spans)  # (`if self._pinned:` set true only in that code)


def fold_guarded_branches(findings: list[Finding], tree: ast.Module) -> list[Finding]:
    """Findings in the branch that an NPU110/NPU108 check guards folded into the check's finding:
    the check is left meaning CUDA, so an NPU host does not take the branch, and the finding on
    the check already says that the branch is CUDA-only code."""
    fold = _Fold(findings)
    guards = [f for f in findings if f.code in GUARDS and _ours(f)]
    fold.targets.update(id(g) for g in guards)
    for guard in guards:
        spans = [s for line, column, _s in _places(guard) for s in _guarded_spans(tree, line, column)]
        if not spans:
            continue
        for finding in findings:
            if not fold.movable(finding, guard) and not _kept_gate_absorbs(guard, finding, fold):
                continue
            inside = [p for p in _places(finding) if any(a <= p[0] <= b for a, b in spans)]
            if inside:
                fold.move(finding, inside, guard)
    return fold.result()


def _kept_gate_absorbs(guard: Finding, finding: Finding, fold: "_Fold") -> bool:
    """A check left meaning CUDA (NPU110) keeps an NPU host out of its branch, so what fails in
    the branch (an error: `torch.cuda.memory._record_memory_history()`) does not fail there: it
    folds into the check, whatever its severity. A check lowered because an NPU host runs its
    fallback (keptgates.py) takes its branch along into its named scope: an NPU host does not
    take that branch either."""
    return (guard.code == "NPU110" and finding is not guard and id(finding) not in fold.targets
            and _ours(finding) and (moot.is_moot(finding) == moot.is_moot(guard)
                                    or (moot.is_moot(guard) and keptgates.FALLBACK in guard.message)))


# ----------------------------------------------------------------------------- one statement
def _units(tree: ast.Module) -> list[tuple[int, int]]:
    """Line spans of the file's statements, as one reads them: a simple statement whole; of a
    compound one its header (an `if`'s test, a `for`'s target and iterable, a `with`'s items) and
    each decorator."""
    spans = []
    for stmt in astcache.walk_statements(tree):
        parts: list[ast.AST] = []
        if isinstance(stmt, (ast.If, ast.While)):
            parts = [stmt.test]
        elif isinstance(stmt, (ast.For, ast.AsyncFor)):
            parts = [ast.Tuple(elts=[stmt.target, stmt.iter], lineno=stmt.target.lineno,
                               col_offset=stmt.target.col_offset, end_lineno=stmt.iter.end_lineno,
                               end_col_offset=stmt.iter.end_col_offset)]
        elif isinstance(stmt, (ast.With, ast.AsyncWith)):
            parts = [item.context_expr for item in stmt.items]
        elif isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            parts = list(stmt.decorator_list)
        elif isinstance(stmt, (ast.Try, ast.Match, ast.excepthandler)) or hasattr(stmt, "body"):
            parts = []
        else:
            parts = [stmt]
        spans.extend((p.lineno, p.end_lineno or p.lineno) for p in parts)
    return spans


SMALL_BLOCK = 3  # statements: an `if` block this short, of simple statements, reads as one probe


def _small_blocks(tree: ast.Module) -> list[tuple[int, int]]:
    """Line spans of the short `if` (and `else`) blocks of simple statements: `default =
    torch.version.cuda` then `version = os.environ.get("CUDA_VERSION", default)` is one probe."""
    spans = []
    for stmt in astcache.walk_statements(tree):
        if isinstance(stmt, ast.If):
            for block in (stmt.body, stmt.orelse):
                if 1 < len(block) <= SMALL_BLOCK and not any(hasattr(s, "body") for s in block):
                    spans.append((block[0].lineno, block[-1].end_lineno or block[-1].lineno))
    return spans


def _joins(anchor: Finding, other: Finding) -> bool:
    """Whether `other` restates `anchor` when both sit in one statement: the same code (one
    construct's parts: the NCCL keys of one dict), a leftover reference (NPU990 says no more than
    the finding it sits in), or anything under a reported CUDA check."""
    return (other.code == anchor.code or other.code == LEFTOVER or anchor.code in GUARDS
            or (anchor.code == LEFTOVER and other.code in GUARDS and LABEL_GATE in other.message))


# a kept check whose branch only adds the "cuda" label (rewrite_gates.py): in one statement with the
# leftover label it guards (`[("cpu", ...)] + ([("cuda", ...)] if torch.cuda.is_available() else [])`,
# a parametrize list), the label's finding says it all (#16 round 9, xformers test_profiler)
LABEL_GATE = 'it guards adding the label "cuda"'


def fold_statements(findings: list[Finding], spans: list[tuple[int, int]], where: str = "in the same statement",
                    joins=None) -> list[Finding]:
    """Findings in one statement (one line span of `_units`; or of `_small_blocks`) folded into
    one: the first of the highest severity stands for the places that restate it (`joins`,
    `_joins` by default) at its severity or lower."""
    joins = joins or _joins
    if not spans:
        return findings
    groups: dict[tuple[int, int], list[tuple[Finding, Place]]] = {}
    for finding in sorted(findings):
        if not _ours(finding):
            continue
        for place in _places(finding):
            holding = [s for s in spans if s[0] <= place[0] <= s[1]]
            if holding:  # the smallest statement that holds the place
                groups.setdefault(min(holding, key=lambda s: s[1] - s[0]), []).append((finding, place))
    fold = _Fold(findings)
    for span in sorted(groups):
        pieces = [(f, p) for f, p in groups[span] if p not in fold.taken.get(id(f), set())]
        owners = list(dict.fromkeys(f for f, _p in pieces))
        while len(owners) > 1:
            anchor = max(owners, key=lambda f: RANK[f.severity])  # (the first of the highest)
            fold.targets.add(id(anchor))
            for finding in owners:
                if finding is not anchor and joins(anchor, finding) and fold.movable(finding, anchor):
                    fold.move(finding, [p for f, p in pieces if f is finding], anchor)
            owners = [f for f in owners if f is not anchor and id(f) not in fold.taken]
    return fold.result(name_them=where)


# ----------------------------------------------------------------------------- NCCL variables set in Python
NCCL_BLOCK = 12  # lines: NCCL variables set this close, in one function, are one block of settings


def _functions(tree: ast.Module) -> list[tuple[int, int]]:
    return [(n.lineno, n.end_lineno or n.lineno) for n in astcache.walk(tree)
            if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]


def fold_nccl_settings(findings: list[Finding], tree: ast.Module) -> list[Finding]:
    """NCCL tuning variables (NPU602) set a few lines apart in one function (`os.environ[
    "NCCL_CUMEM_ENABLE"] = ...`, then `os.environ["NCCL_NVLS_ENABLE"] = ...`): one block of
    settings, one decision on an NPU host (which HCCL settings, if any, replace it), so one finding
    that names the others (as fold_adjacent_lines does for a script's block, NPU703). The round-9
    reviewers read a finding per variable as redundant. A determinism setting (NCCL_ALGO,
    NCCL_PROTO: HCCL_DETERMINISTIC on an NPU host) and a tuning one stay apart: two decisions."""
    ours = sorted(f for f in findings if f.code == "NPU602" and _ours(f))
    if len(ours) < 2:
        return findings
    functions = _functions(tree)

    def scope(line: int):
        holding = [s for s in functions if s[0] <= line <= s[1]]
        return min(holding, key=lambda s: s[1] - s[0]) if holding else None

    fold = _Fold(findings)
    anchors: dict[tuple, tuple[Finding, Finding]] = {}  # (determinism?, NCCL-only?) -> (anchor, previous)
    for finding in ours:
        # (an NCCL-only setting lowered by ncclonly.py is no port work: it joins no setting to port)
        kind = (bool(DETERMINISM.search(finding.message)), NCCL_ONLY in finding.message)
        anchor, previous = anchors.get(kind, (None, None))
        if anchor is not None and finding.line - previous.line <= NCCL_BLOCK \
                and scope(finding.line) == scope(anchor.line) and fold.movable(finding, anchor):
            fold.targets.add(id(anchor))
            fold.move(finding, _places(finding), anchor)
        else:
            anchor = finding
        anchors[kind] = (anchor, finding)
    return [_name_counterparts(f) for f in fold.result(name_them="in the same block")]


def _name_counterparts(finding: Finding) -> Finding:
    """A block's finding names the HCCL counterparts (rules/env.toml `[hccl_counterpart]`) of the
    variables folded into it: the anchor's own message speaks only for its own variable, and a
    porter reading "no one-to-one HCCL counterpart (with `NCCL_IB_TIMEOUT` ... in the same block)"
    would take it for all of them."""
    if finding.code not in ("NPU602", "NPU703"):
        return finding
    env = catalogue.env_table()
    pairs = env.get("hccl_counterpart", {})
    own = _variable(finding.source)
    message = finding.message
    if finding.code == "NPU703" and own in pairs and _NO_COUNTERPART_FILES in message:
        # (a script's variable: the Python one, NPU602, is named by labels9.py)
        values = env.get("hccl_counterpart_values", {}).get(own)
        message = message.replace(_NO_COUNTERPART_FILES, (
            f"has the HCCL counterpart `{pairs[own]}` (CANN), which an NPU host reads instead; left unchanged: "
            f"set `{pairs[own]}` by hand for NPU runs" + (f"; values: {values}" if values else "")), 1)
    named = [(n, pairs[n]) for n in dict.fromkeys(_variable(s) for _l, _c, s in finding.also)
             if n in pairs and n != own and f"`{pairs[n]}`" not in message]
    if named:
        note = " (HCCL counterparts: " + ", ".join(f"`{n}` -> `{h}`" for n, h in named) + ")"
        match = _ALSO.search(message)
        at = match.start() if match else len(message)
        message = message[:at] + note + message[at:]
    return finding if message == finding.message else replace(finding, message=message)


_NO_COUNTERPART_FILES = "has no one-to-one Ascend counterpart; left unchanged"  # (NPU703's message)


def _variable(source: str | None) -> str:
    """The NCCL variable a finding's source names (`"NCCL_IB_TC"`, `export NCCL_IB_TC=...`)."""
    match = re.search(r"\b(?:TORCH_)?NCCL_[A-Z0-9_]+", source or "")
    return match.group(0) if match else ""


# ----------------------------------------------------------------------------- a backend parameter and its callers
UNSEEN_BACKEND = "NPU304"
LITERAL_CALLERS = "every call of the function in this file passes a backend literal that npu-migrate rewrites"


def _enclosing_function(tree: ast.Module, line: int, name: str):
    """The innermost function around `line` with a parameter `name`."""
    best = None
    for node in astcache.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.lineno <= line <= (node.end_lineno or 0):
            params = [a.arg for a in (*node.args.posonlyargs, *node.args.args, *node.args.kwonlyargs)]
            if name in params and (best is None or node.lineno > best.lineno):
                best = node
    return best


def _caller_literals(tree: ast.Module, function, name: str) -> list[tuple[int, int]] | None:
    """(line, column) of the string literals that the calls of `function` in this file pass for
    its parameter `name` (its default when a call leaves it out); None when there is no call or
    one passes anything else (a variable, `*args`, `**kwargs`)."""
    positional = [a.arg for a in (*function.args.posonlyargs, *function.args.args)]
    defaults = dict(zip(positional[len(positional) - len(function.args.defaults):], function.args.defaults))
    defaults.update((a.arg, d) for a, d in zip(function.args.kwonlyargs, function.args.kw_defaults) if d is not None)
    index = positional.index(name) if name in positional else None
    method = bool(positional) and positional[0] in ("self", "cls")
    calls = [n for n in astcache.walk(tree) if isinstance(n, ast.Call) and (
        (isinstance(n.func, ast.Name) and n.func.id == function.name)
        or (isinstance(n.func, ast.Attribute) and n.func.attr == function.name))]
    if not calls:
        return None
    out = []
    for call in calls:
        if any(isinstance(a, ast.Starred) for a in call.args) or any(k.arg is None for k in call.keywords):
            return None
        value = next((k.value for k in call.keywords if k.arg == name), None)
        if value is None and index is not None:
            at = index - (1 if method and isinstance(call.func, ast.Attribute) else 0)
            if 0 <= at < len(call.args):
                value = call.args[at]
        if value is None:
            value = defaults.get(name)
        if not (isinstance(value, ast.Constant) and isinstance(value.value, str)):
            return None
        out.append((value.lineno, value.col_offset + 1))
    return out


def fold_backend_callers(findings: list[Finding], tree: ast.Module) -> list[Finding]:
    """NPU304 on a function's parameter (`new_group(ranks, backend=backend)` in `def get(self,
    ranks, backend="nccl")`) when every call of the function in this file passes a string literal
    (or leaves the default, a literal): those literals are the backend. The ones reported (NPU990
    on `"nccl"`) fold into the NPU304 finding, which names them; where every one is rewritten
    instead, that place of the finding is lowered to info with the reason."""
    reported = {(p[0], p[1]) for f in findings if _ours(f) and f.code == LEFTOVER for p in _places(f)}
    folds: dict[int, set[tuple[int, int]]] = {}  # NPU304 finding -> the reported literals it takes
    out = []
    for finding in findings:
        if finding.code != UNSEEN_BACKEND or not _ours(finding) or finding.severity == "info":
            out.append(finding)
            continue
        kept, lowered, taken = [], [], set()
        for place in _places(finding):
            literals = None
            if re.fullmatch(r"[A-Za-z_]\w*", place[2] or ""):
                function = _enclosing_function(tree, place[0], place[2])
                literals = _caller_literals(tree, function, place[2]) if function is not None else None
            if literals and not reported.intersection(literals):
                lowered.append((place, literals))
                continue
            kept.append(place)
            if literals:
                taken.update(literals)
        if not lowered:
            out.append(finding)
            if taken:
                folds[id(finding)] = taken
            continue
        if kept:
            rest = _rebuilt(finding, kept)
            out.append(rest)
            if taken:
                folds[id(rest)] = taken
        for (line, column, source), literals in lowered:
            lines = sorted({at for at, _c in literals})
            noun = "line" if len(lines) == 1 else "lines"
            out.append(replace(finding, line=line, column=column, source=source, also=(), severity="info",
                               message=f"{_ALSO.sub('', finding.message)} ({LITERAL_CALLERS}: {noun} "
                                       f"{', '.join(map(str, lines))})"))
    if not folds:
        return sorted(out)
    fold = _Fold(out)
    fold.targets.update(folds)
    for target in out:
        if id(target) not in folds:
            continue
        for finding in out:
            if finding.code == LEFTOVER and fold.movable(finding, target):
                fold.move(finding, [p for p in _places(finding) if (p[0], p[1]) in folds[id(target)]], target)
    return sorted(fold.result(name_them="passed by the calls of the function in this file"))


def fold_redundant(findings: list[Finding], text: str) -> list[Finding]:
    """A Python file's report-only findings with the ones that restate another folded into it
    (after the per-file merge: findings.merge_per_file)."""
    if not any(_ours(f) for f in findings):
        return findings
    findings = fold_object_uses(findings)
    # (imported here: labelflow.py reads libcst, which a warm `check` never needs to load)
    from .labelflow import fold_kept_label_keys

    findings = fold_kept_label_keys(findings, absorb)  # (a per-device table behind a kept label)
    tree = _parse(text)
    if tree is None:
        return findings
    if any(f.code in GUARDS for f in findings):
        findings = fold_guarded_branches(findings, tree)
    if any(f.code == UNSEEN_BACKEND for f in findings):
        findings = fold_backend_callers(findings, tree)
        # (secondary.py: a parameter passed through whose every value the file shows)
        findings = review_backend_params(findings, tree)
    # (secondary.py: a finding reached only after a call whose CUDA build, reported here, fails)
    findings = fold_fp8_into_package_class(fold_after_failing_calls(findings, tree), tree)
    from .foldbackend import review as fold_backend_imports

    findings = fold_backend_imports(findings, tree)  # (after / into a failing CUDA-only import: foldbackend.py)
    from .redundant14 import fold_after_own_build

    findings = fold_after_own_build(findings, tree)  # (after the function's own CUDA build: redundant14.py)
    findings = move_fp8_defaults_to_calls(findings, tree, text)  # (an FP8 default every call overrides)
    findings = fold_statements(findings, _units(tree))
    findings = fold_kernel_aliases(findings, tree)  # (`libdevice = tl.extra.cuda.libdevice`: kernelaliases26.py)
    if sum(f.code == "NPU602" for f in findings) > 1:  # (after the statements: one dict's keys first)
        findings = fold_nccl_settings(findings, tree)
        findings = fold_adjacent_nccl(findings, tree, DETERMINISM.search)  # (one branch's block: ncclfolds26.py)
    # (a short `if` block: only leftover references join; other codes there are distinct constructs)
    findings = fold_statements(findings, _small_blocks(tree), "in the same `if` block",
                               lambda anchor, other: other.code == LEFTOVER)
    return sorted(name_determinism(findings))


# ----------------------------------------------------------------------------- NCCL variables
NCCL_CODES = ("NPU602", "NPU703")
DETERMINISM = re.compile(r"`(NCCL_ALGO|NCCL_PROTO)`")
DETERMINISM_HINT = "set for reproducible reductions? on an NPU host: HCCL_DETERMINISTIC=true"


def name_determinism(findings: list[Finding]) -> list[Finding]:
    """NPU602/NPU703 naming NCCL_ALGO or NCCL_PROTO (what a determinism block sets): the message
    names HCCL's switch for it."""
    return [replace(f, message=_with_hint(f.message))
            if f.code in NCCL_CODES and DETERMINISM.search(f.message) and DETERMINISM_HINT not in f.message else f
            for f in findings]


def _with_hint(message: str) -> str:
    also = _ALSO.search(message)
    head = message[:also.start()] if also else message
    return f"{head} ({DETERMINISM_HINT}){also.group(0) if also else ''}"


def fold_same_line(findings: list[Finding]) -> list[Finding]:
    """A script's NCCL variables set on one line (`export NCCL_ALGO=Ring NCCL_PROTO=Simple`,
    `NCCL_DEBUG=INFO NCCL_IB_DISABLE=1 torchrun ...`): one finding that names the others."""
    fold = _Fold(findings)
    first: dict[tuple, Finding] = {}
    for finding in sorted(findings):
        if finding.code not in NCCL_CODES or not _ours(finding):
            continue
        for place in _places(finding):
            anchor = first.setdefault((finding.code, place[0]), finding)
            if anchor is not finding and fold.movable(finding, anchor):
                fold.targets.add(id(anchor))
                fold.move(finding, [place], anchor)
    return name_determinism(fold.result(name_them="on the same line"))


BLOCK_GAP = 2  # lines between two settings of one block (a comment line between them)


def fold_adjacent_lines(findings: list[Finding], lines: list[str]) -> list[Finding]:
    """A block of NCCL variables (NPU703) set on consecutive lines of a script or config (a
    recipe's `env:` block of NCCL fabric switches, an `export NCCL_IB_*` run): one finding that
    names the others. The block is one decision on an NPU host (which HCCL settings, if any,
    replace it); the round-7 reviewers read a finding per line as redundant. A variable's later
    uses come along (its `also` places); a variable set apart from the block (another line
    between them that is not blank or a comment: `env:` of another section), and the CUDA build
    variables (a wheel index beside CUDA_HOME: two decisions), keep their own findings. `lines`:
    the file's lines."""
    ours = sorted(f for f in findings if f.code == "NPU703" and _ours(f) and _named(f).startswith("NCCL_"))
    if len(ours) < 2:
        return [_name_counterparts(f) for f in findings]
    fold = _Fold(findings)
    anchor = previous = None
    for finding in ours:
        if (anchor is not None and finding.line - previous.line <= BLOCK_GAP and fold.movable(finding, anchor)
                and all(not text.strip() or text.lstrip().startswith("#")
                        for text in lines[previous.line:finding.line - 1])):
            fold.targets.add(id(anchor))
            fold.move(finding, _places(finding), anchor)
        else:
            anchor = finding
        previous = finding
    return [_name_counterparts(f) for f in name_determinism(fold.result(name_them="in the same block"))]


# ----------------------------------------------------------------------------- a Dockerfile's CUDA base image
IMAGE = "NPU707"
IMAGE_PARTS = ("NPU708",)  # what a CUDA image's Dockerfile installs on it: CUDA wheels, CUDA-only packages


# the CUDA image's own build variables (`ARG CUDA_VERSION`, `ENV CUDA_HOME`, TORCH_CUDA_ARCH_LIST,
# the cuXXX wheel index): they parametrise the CUDA image, which its NPU707 finding replaces as a whole
IMAGE_VARIABLE = re.compile(r"CUDA|CUDNN|NCCL_(VERSION|ROOT|HOME)\b")


def _image_build_variable(finding: Finding) -> bool:
    return finding.code == "NPU703" and bool(IMAGE_VARIABLE.search(_named(finding)))


def fold_into_base_image(findings: list[Finding]) -> list[Finding]:
    """A Dockerfile built on a CUDA base image (NPU707): its CUDA wheel index and CUDA-only
    package installs (NPU708), and the image's CUDA build variables (NPU703 `CUDA_VERSION`,
    `TORCH_CUDA_ARCH_LIST`, `NCCL_VERSION`), are part of that image's port, one finding whose
    message names them ("with `flash-attn`, ..."); a Dockerfile without a CUDA image keeps them,
    and NCCL runtime settings (`ENV NCCL_NET_PLUGIN=ofi`) stay findings of their own."""
    image = next((f for f in sorted(findings) if f.code == IMAGE and _ours(f)), None)
    if image is None:
        return _fold_nccl_build_paths(findings)
    parts = [f for f in findings if (f.code in IMAGE_PARTS or _image_build_variable(f)) and _ours(f)
             and _may_absorb(image, f)]
    if not parts:
        return findings
    kept = absorb(image, parts, name_them="in the same Dockerfile")
    gone = {id(f) for f in parts}
    return [kept if f is image else f for f in findings if id(f) not in gone]


NCCL_BUILD = re.compile(r"NCCL_(ROOT|HOME)\b")  # (not NCCL_VERSION: a version pin of its own)


def _fold_nccl_build_paths(findings: list[Finding]) -> list[Finding]:
    """A Dockerfile without a CUDA base image that builds a CUDA extension (`TORCH_CUDA_ARCH_LIST`,
    `CUDA_HOME`: an NPU703 of its own) and locates NCCL for that build (`NCCL_ROOT="$(python3 -c
    'import nvidia.nccl...')"`, `NCCL_HOME`): the NCCL path is a part of that CUDA build, not an NCCL
    runtime setting, so it joins the build variable's finding ("with `NCCL_ROOT` in the same
    Dockerfile"). NCCL runtime settings (`ENV NCCL_NET_PLUGIN=ofi`) keep their own findings."""
    nccl = [f for f in findings if f.code == "NPU703" and _ours(f) and NCCL_BUILD.match(_named(f))]
    build = next((f for f in sorted(findings) if _image_build_variable(f) and _ours(f)
                  and not _named(f).startswith("NCCL_")), None)
    parts = [f for f in nccl if build is not None and _may_absorb(build, f)]
    if not parts:
        return findings
    kept = absorb(build, parts, name_them="in the same Dockerfile")
    gone = {id(f) for f in parts}
    return [kept if f is build else f for f in findings if id(f) not in gone]
