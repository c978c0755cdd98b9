"""The folding machinery redundant.py and secondary.py share: a finding standing for the places of
others (`absorb`), the places of a finding, and `Fold`, which moves places between the findings
of one file and rebuilds them. A leaf below both, so that neither imports the other's privates."""

from __future__ import annotations

import re
from dataclasses import replace

from . import moot
from .findings import MAX_LISTED, Finding, import_named, renamed, split_merged

RANK = {"info": 0, "warning": 1, "error": 2}
ALSO = re.compile(r" \(also at [^()]*\)$")
_WITH = re.compile(r" \(with `[^()]*\)")
_NAMED = re.compile(r"`([^`]+)`")


def ours(finding: Finding) -> bool:
    return not finding.fixable and finding.cell is None


def places_of(finding: Finding) -> list[tuple[int, int, str]]:
    return [(finding.line, finding.column, finding.source), *finding.also]


def may_absorb(target: Finding, other: Finding) -> bool:
    return RANK[other.severity] <= RANK[target.severity] and moot.is_moot(other) == moot.is_moot(target)


def named(finding: Finding) -> str:
    """What a finding names: the first backticked word of its message, else its source."""
    match = _NAMED.search(ALSO.sub("", finding.message))
    return match.group(1) if match else (finding.source or finding.code)


def _piece_named(piece: Finding) -> str:
    """What a folded piece names: a piece split off a merged finding keeps that finding's message,
    which names the merged finding's first place (`scaled_fp8_quant(...)` in another function, still
    reported there): the piece's own first place is named instead (round-13 audit AI#27)."""
    name = named(piece)
    source = piece.source or ""
    return name if not source or name in source or source in name else source


def absorb(target: Finding, others: list[Finding], name_them: str = "") -> Finding:
    """`target` standing for `others` too: their places in its `also`, their lines in its message
    ("also at lines ..."), and with `name_them` (where they are) what the others name when the
    target does not ("with `NCCL_ALGO`, `NCCL_PROTO` in the same statement")."""
    also = tuple(sorted((*target.also, *((p.line, p.column, p.source) for o in others for p in split_merged(o)))))
    message = ALSO.sub("", target.message)
    if name_them:
        own = named(target)
        # (an earlier "(with ...)" of the same reason is replaced; one of another reason stays: two
        # folds into one finding keep both reasons, and a name it shows is not shown again)
        same = re.compile(r" \(with `[^()]*" + re.escape(name_them) + r"\)")
        kept = same.sub("", message)
        names = [n for n in dict.fromkeys(_piece_named(o) for o in others) if n != own and f"`{n}`" not in kept]
        if names:
            message = kept
            shown = ", ".join(f"`{n}`" for n in names[:MAX_LISTED])
            more = f" and {len(names) - MAX_LISTED} more" if len(names) > MAX_LISTED else ""
            message = f"{message} (with {shown}{more} {name_them})"
    places = list(dict.fromkeys(str(line) for line, _c, _s in also if line != target.line))
    if places:
        more = f" and {len(places) - MAX_LISTED} more" if len(places) > MAX_LISTED else ""
        noun = "line " if len(places) == 1 else "lines "
        message = f"{message} (also at {noun}{', '.join(places[:MAX_LISTED])}{more})"
    return replace(target, message=message, also=also)


Place = tuple  # (line, column, source): one place of a finding (findings.Finding.also)


class Fold:
    """Places of findings moved into other findings. A merged finding (findings.merge_per_file)
    stands for several places: the ones that restate another finding move into it, the others
    stay (anchored at the first of them). A finding that receives places keeps all of its own."""

    def __init__(self, findings: list[Finding]):
        self.findings = findings
        self.moved: dict[int, list[tuple[Finding, list[Place]]]] = {}  # target -> (from, places)
        self.taken: dict[int, set[Place]] = {}  # finding -> its places that moved
        self.targets: set[int] = set()

    def movable(self, finding: Finding, target: Finding) -> bool:
        return (finding is not target and id(finding) not in self.targets and ours(finding) and ours(target)
                and may_absorb(target, finding))

    def move(self, finding: Finding, places: list[Place], target: Finding) -> None:
        places = [p for p in places if p not in self.taken.get(id(finding), set())]
        if not places:
            return
        self.targets.add(id(target))
        self.taken.setdefault(id(finding), set()).update(places)
        self.moved.setdefault(id(target), []).append((finding, places))

    def result(self, name_them: str = "") -> list[Finding]:
        if not self.moved:
            return self.findings
        out = []
        for finding in self.findings:
            taken = self.taken.get(id(finding), set())
            rest = [p for p in places_of(finding) if p not in taken]
            if not rest:
                continue
            kept = rebuilt(finding, rest) if taken else finding
            pieces = [rebuilt(f, places) for f, places in self.moved.get(id(finding), [])]
            out.append(absorb(kept, pieces, name_them) if pieces else kept)
        return out


def drop_taken(out: list, taken: dict) -> None:
    """Take the places folded elsewhere out of their findings, in place: `taken` maps a result's
    index to {id(finding): [places moved]}; a finding with no place left goes, one with some left
    stands for those (`rebuilt`). For the whole-run folds that move places across files
    (fp8storage26.py, fp8optin27.py)."""
    for i, gone in taken.items():
        kept = []
        for finding in out[i].findings:
            if id(finding) not in gone:
                kept.append(finding)
                continue
            rest = [p for p in places_of(finding) if p not in gone[id(finding)]]
            if rest:
                kept.append(rebuilt(finding, rest))
        out[i] = replace(out[i], findings=sorted(kept))


def rebuilt(finding: Finding, places: list[Place]) -> Finding:
    """`finding` standing for `places` only (the first is its anchor)."""
    if places == places_of(finding):
        return finding
    (line, column, source), rest = places[0], places[1:]
    message = ALSO.sub("", finding.message)
    if (line, column) != (finding.line, finding.column):
        # (and an import finding names the module of its new anchor: round-22 BI#2, vLLM's
        # finding at a `mnnvl_cutedsl_moe_finalize` import named the dropped first place's module)
        message = import_named(renamed(message, finding.source or "", source or ""), source or "", column)
    bare = replace(finding, line=line, column=column, source=source, also=tuple(rest), message=message)
    return absorb(bare, []) if rest else bare
