"""A finding: one CUDA-only construct, rewritten (fixable) or only reported.

Each finding carries a severity, what the construct does on an NPU host as written: `error` (it
fails there), `warning` (it runs but behaves differently), `info` (it runs; review it). It is the
code's severity from the catalogue (rules/codes*.toml) unless the rule that reported it chose
another (a rule may lower it where it knows more, such as code in a scope that already handles
the NPU).
"""

from __future__ import annotations

import functools
import re
from collections import defaultdict
from dataclasses import asdict, dataclass, replace
from typing import Callable, Iterable, Optional

from . import catalogue


@functools.total_ordering
@dataclass(frozen=True)
class Finding:
    path: str  # relative to the run's root, with forward slashes
    line: int  # 1-based (within the cell when `cell` is set)
    column: int  # 1-based (within the cell when `cell` is set)
    code: str
    message: str
    fixable: bool  # True: npu-migrate rewrites it; False: it is only reported
    source: str = ""  # the construct's source text, whitespace-normalised (for baselines)
    cell: Optional[int] = None  # notebooks: 1-based index of the cell among all cells (not In [n])
    severity: str = ""  # error | warning | info; "" when built: the code's severity is filled in
    # (line, column, source) of the findings merged into this one (`merge_per_file`), in file
    # order: `split_merged` gives them back, so that a baseline counts each of them and
    # --diff-base looks at each line (a new occurrence in a file that has one is still new).
    also: tuple[tuple[int, int, str], ...] = ()

    def __post_init__(self) -> None:
        if not self.severity:
            object.__setattr__(self, "severity", catalogue.severity(self.code))
        elif self.severity not in catalogue.SEVERITIES:
            raise ValueError(f"{self.code}: severity must be error, warning or info, not {self.severity!r}")

    def _order(self) -> tuple:
        # File order: a notebook's findings sort by cell first, then by line within the cell.
        return (self.path, self.cell or 0, self.line, self.column, self.code, self.message,
                self.fixable, self.source)

    def __lt__(self, other: object) -> bool:
        if not isinstance(other, Finding):
            return NotImplemented
        return self._order() < other._order()

    @property
    def location(self) -> str:
        """`line:col`, or `cell_N:line:col` in a notebook (the style of nbQA)."""
        where = f"{self.line}:{self.column}"
        return where if self.cell is None else f"cell_{self.cell}:{where}"

    def as_dict(self) -> dict:
        data = asdict(self)
        if not self.also:
            del data["also"]
        else:
            data["also"] = [list(pair) for pair in self.also]
        return data


MAX_LISTED = 12  # places named in a merged finding's message; the rest are counted


def _place(finding: Finding) -> str:
    return str(finding.line) if finding.cell is None else f"cell_{finding.cell}:{finding.line}"


def _merged(findings: list[Finding]) -> tuple[tuple[int, int, str], ...]:
    return tuple(place for f in findings for place in ((f.line, f.column, f.source), *f.also))


_ALSO = re.compile(r" \(also at [^()]*\)$")
ALSO_LISTED = _ALSO  # (public: the lines a merged finding's message lists, for infojoin31.py)
# (infojoin31.py's joined info note: its lines listed with their reasons, which hold brackets)
_ALSO_JOINED = re.compile(r" \(also at lines? \d[\d, ]*(?: and \d+ more)?(?: for the same reason; at |: ).*\)$", re.S)


_NAMED = re.compile(r"`([^`]+)`")


def renamed(message: str, old: str, new: str) -> str:
    """A message that named its old anchor (`per_token_group_quant_fp8(...)`) naming the new one
    (`torch.float8_e4m3fn`) instead, once the old anchor's place moved away (round-14 AM#33: a
    finding at line 387 named the call at line 250, folded elsewhere)."""
    match = _NAMED.search(message)
    if not match or not old or not new:
        return message
    name = match.group(1)
    stem = name[:-5] if name.endswith("(...)") else None
    if not (name == old or (stem and old.startswith(stem + "("))):
        return message
    if name in new or new in name or (stem and new.startswith(stem + "(")):
        return message
    head = new.split("(", 1)[0]
    shown = f"{head}(...)" if "(" in new and stem is not None else new
    if len(shown) > 80 or "`" in shown:
        return message
    rest = message[match.end(1):]
    if "(" not in shown:
        # (kernels.py's label of a cast helper's call names that call, not a dtype standing in its place:
        # round-21 BF#24, a parameter's FP8 default called "a cast to FP8")
        rest = _CALL_KIND.sub("`", rest, count=1)
    return message[:match.start(1)] + shown + rest


_CALL_KIND = re.compile(r"^` \((?:a cast (?:to|from) FP8|an FP8 configuration)\)")


def _naming_other_packages(finding: Finding, others: list[Finding]) -> Finding:
    """A file's imports of CUDA-only packages merged into one finding (NPU911, `per_file = "code"`)
    name the other packages too: the first import's message names only its own (`import from
    `sgl_kernel``, with `deep_gemm` imports among its places: round-21 audit BH#28)."""
    named = _IMPORT_NAMED.search(finding.message)
    if not named:
        return finding
    own = named.group(2).split(".")[0]
    packages = []
    for other in others:
        match = _IMPORT_NAMED.search(other.message)
        package = match.group(2).split(".")[0] if match else ""
        if package and package != own and package not in packages:
            packages.append(package)
    if not packages:
        return finding
    shown = ", ".join(f"`{p}`" for p in packages)
    return replace(finding, message=f"{finding.message} (with imports of {shown} in this file)")


def split_merged(finding: Finding) -> list[Finding]:
    """The findings a per-file finding stands for (itself when it stands for none): what
    `merge_per_file` joined, with their own places and the message they had, each naming its own
    construct where the message named the first one's (round 17 AX#7: a split-off place of vLLM's
    alloc_conf.py kept naming `torch.cuda.memory._snapshot` at a `_set_allocator_settings` call)."""
    if not finding.also:
        return [finding]
    message = _WITH_IMPORTS.sub("", _ALSO.sub("", _ALSO_JOINED.sub("", finding.message)))
    first = replace(finding, message=message, also=())
    return [first, *(replace(first, line=line, column=column, source=source,
                             message=_nccl_note_own(import_named(renamed(message, finding.source or "", source or ""),
                                                                 source or "", column), source or ""))
                     for line, column, source in finding.also)]


# wording20.py's note on a file's first import of vLLM's NCCL machinery (NPU916), which stands for
# the file's other vLLM imports: a place split off it that names no NCCL (`from vllm.utils.
# network_utils import get_ip, get_open_port`: host and port helpers) does not carry it (round 32 GC#35)
NCCL_TRANSFER = ("an import of vLLM's NCCL communication, a weight transfer or a group: its communicator is "
                 "NCCL's (vLLM's PyNcclCommunicator loads libnccl), which an NPU host does not have: the code "
                 "that calls it needs an HCCL path there, vllm-ascend's where it has one")
_NCCL_WORD = re.compile(r"(?i)nccl")


def _nccl_note_own(message: str, source: str) -> str:
    if _NCCL_WORD.search(source):
        return message
    return message.replace(f" ({NCCL_TRANSFER})", "", 1)


_WITH_IMPORTS = re.compile(r" \(with imports of [^()]* in this file\)")
_IMPORT_NAMED = re.compile(r"\bimport (of|from) `([\w.]+)`")
_IMPORT_SOURCE = re.compile(r"^\s*(?:import\s+([\w.]+)|from\s+([\w.]+)\s+import\b)")
_AT_MODULE_LEVEL = "; imported unguarded at module level, so the module fails to import where it is not installed"


def import_named(message: str, source: str, column: int) -> str:
    """A split-off place of a merged import finding (NPU911 merges a file's imports of CUDA-only
    packages into one) naming its own module (`import of `deep_gemm.utils.layout``), not the first
    place's (`import from `sgl_kernel``: round-21 audit BH#28), and not called a module-level
    import when it is indented."""
    named, imported = _IMPORT_NAMED.search(message), _IMPORT_SOURCE.match(source)
    if not named or not imported:
        return message
    form, module = ("of", imported.group(1)) if imported.group(1) else ("from", imported.group(2))
    message = message[:named.start()] + f"import {form} `{module}`" + message[named.end():]
    return message.replace(_AT_MODULE_LEVEL, "", 1) if column > 1 else message


def stands_for_copies(finding: Finding) -> bool:
    """A Python file's finding that also stands for byte-identical copies of the file
    (textfiles._group_identical_sources): the copies are other modules, with importers and callers
    of their own, so a reason read on this file's callers in other files (testcallers27: reached
    only from tests) does not hold for them; a reason read on the file's own text (a CUDA op
    builder class, a branch of the file) holds for every copy."""
    return finding.path.endswith(".py") and "(byte-identical cop" in finding.message


def lower_pieces(finding: Finding, reason_of: Callable[[int], Optional[str]],
                 tidy: Optional[Callable[[Finding], Finding]] = None) -> Optional[list[Finding]]:
    """Split a merged finding into the places it stands for and lower each place `reason_of(line)`
    gives a reason for to info, with the reason in its message; the other places are merged again.
    None when no place is lowered (the finding stays as it is). `tidy` rewrites each place first."""
    pieces = [tidy(p) for p in split_merged(finding)] if tidy else split_merged(finding)
    lowered, kept = [], []
    for piece in pieces:
        why = reason_of(piece.line)
        if why is None:
            kept.append(piece)
        else:
            lowered.append(replace(piece, severity="info", message=f"{piece.message} ({why})"))
    if not lowered:
        return None
    return lowered + (merge_per_file(kept) if kept else [])


def merge_per_file(findings: Iterable[Finding], secondary: Optional[Callable[[Finding], bool]] = None) -> list[Finding]:
    """One finding per file for the codes whose catalogue entry says `per_file`.

    `per_file = "code"`: the first finding of the code in the file stands for all of them (an
    ecosystem such as Triton or apex: ten import lines say no more than one); `"message"`: one per
    distinct message (NPU934 names the package: one per package). The finding kept is the first
    in file order; its message lists the lines of the others ("also at lines 4, 9"), and findings
    of other codes are untouched. Rewrites (fixable findings) are never merged: each is a change.
    `secondary` says which findings should not stand for their group when another can: a type
    annotation (`graphs: dict[int, torch.cuda.CUDAGraph]`) names the API, a call uses it, so the
    first finding that is not secondary is kept and the others are listed.
    """
    ordered = sorted(findings)
    groups: dict[tuple, list[Finding]] = defaultdict(list)
    keys: list[Optional[tuple]] = []
    for finding in ordered:
        rule = catalogue.rules().get(finding.code)
        mode = rule.per_file if rule is not None and not finding.fixable else ""
        if not mode:
            keys.append(None)
            continue
        text = ""
        if mode == "message":
            text = finding.message
            match = re.search(rule.merge_group, text) if rule.merge_group else None
            if match:  # one group per named group of the pattern that matched, else per pattern
                text = next((name for name, value in match.groupdict().items() if value), rule.merge_group)
        key = (finding.path, finding.code, finding.severity, text)
        groups[key].append(finding)
        keys.append(key)
    if secondary is not None:
        for key, group in groups.items():
            primary = next((f for f in group if not secondary(f)), group[0])
            if primary is not group[0]:
                groups[key] = [primary, *(f for f in group if f is not primary)]
    for key, group in groups.items():  # (an NCCL import heads its group with wording20's note: _nccl_note_own)
        noted = next((f for f in group if f" ({NCCL_TRANSFER})" in f.message), None)
        if noted is not None and noted is not group[0] and f" ({NCCL_TRANSFER})" not in group[0].message:
            groups[key] = [noted, *(f for f in group if f is not noted)]
    out = []
    for finding, key in zip(ordered, keys):
        if key is None:
            out.append(finding)
            continue
        group = groups[key]
        if group[0] is not finding:
            continue  # merged into the first of its group
        others = list(dict.fromkeys(_place(f) for f in group[1:] if _place(f) != _place(finding)))
        finding = _naming_other_packages(finding, group[1:])
        if others:
            shown = ", ".join(others[:MAX_LISTED])
            more = f" and {len(others) - MAX_LISTED} more" if len(others) > MAX_LISTED else ""
            noun = "" if finding.cell is not None else "line " if len(others) == 1 else "lines "
            finding = replace(finding, message=f"{finding.message} (also at {noun}{shown}{more})",
                              also=_merged(group[1:]))
        elif len(group) > 1:
            finding = replace(finding, also=_merged(group[1:]))
        out.append(finding)
    return out
