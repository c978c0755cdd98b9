"""Draw, and score, the manual precision sample of issue #16 (section 2).

The ecosystem check (`scripts/ecosystem.py --all --keep DIR`) keeps every package's JSON report.
This script draws the audit sample from those reports, the same way every round of the audit has:

* the population is every report-only finding (``fixable`` false) of every package;
* it is sorted (package, path, line, column, code), shuffled with a seed, and taken in that order
  with at most ``--per-package`` findings of one package (vLLM holds about two thirds of the
  population; uncapped, a sample would be mostly vLLM);
* findings already drawn in earlier samples (``--exclude`` their sample files) are skipped, so a
  round's samples are disjoint.

Reviewers classify each finding (TRUE, FALSE, FALSE-WP for false only with knowledge from another
file, REDUNDANT, UNSURE) in the sample file's ``verdict`` column. ``--score`` reads filled-in
samples and prints the bad rate twice: as drawn, and weighted by each package's share of the
population (the per-package cap under-weights the largest package; the weighted figure corrects
for it).

    python scripts/audit_sample.py draw /tmp/eco 1091 /tmp/audit_A.md
    python scripts/audit_sample.py draw /tmp/eco 1093 /tmp/audit_B.md --exclude /tmp/audit_A.md
    python scripts/audit_sample.py score /tmp/eco /tmp/audit_A.md /tmp/audit_B.md

Once the earlier rounds have judged a large part of the population, ``census`` gives a better
estimate than one round's sample. It reads every earlier sample (oldest first: a later verdict on
the same finding wins) and splits today's population into two strata: findings judged before and
still reported (counted exactly, by their latest verdict) and findings never judged, whose bad rate
is estimated from the ``--sample`` files (samples drawn at random from that stratum with
``--exclude`` of every earlier round). A judged finding whose severity has changed since it was
judged is listed: its old verdict may no longer hold. ``--rejudged`` names a file of later
re-judgements, one per line: ``package location code VERDICT``.

    python scripts/audit_sample.py census /tmp/eco --audited /tmp/audit_A.md /tmp/audit_B.md \
        --sample /tmp/audit_C.md
"""

from __future__ import annotations

import argparse
import json
import random
import re
import sys
from collections import Counter, defaultdict
from pathlib import Path

BAD = {"FALSE", "FALSE-WP", "REDUNDANT"}
VERDICTS = BAD | {"TRUE", "UNSURE"}
_ROW = re.compile(r"^\|\s*(\d+)\s*\|\s*([A-Z-]*)\s*\|\s*([^|]+?)\s*\|\s*`?([^|`]+?)`?\s*\|\s*(NPU\d+)\s*\|"
                  r"(?:\s*([a-z]*)\s*\|)?")


def population(tree: Path) -> list[dict]:
    found = []
    for report in sorted(tree.glob("*/npu-migrate.json")):
        package = report.parent.name
        data = json.loads(report.read_text(encoding="utf-8"))
        for item in data.get("findings", []):
            if item.get("fixable"):
                continue
            found.append({"package": package, **item})
    found.sort(key=lambda f: (f["package"], f["path"], f["line"], f.get("column") or 0, f["code"]))
    return found


def _key(package: str, location: str, code: str) -> tuple[str, str, str]:
    return package, location, code


def drawn(paths: list[Path]) -> set[tuple[str, str, str]]:
    keys = set()
    for path in paths:
        for line in path.read_text(encoding="utf-8").splitlines():
            match = _ROW.match(line)
            if match:
                keys.add(_key(match.group(3), match.group(4), match.group(5)))
    return keys


def draw(tree: Path, seed: int, size: int, per_package: int, exclude: list[Path]) -> list[dict]:
    pool = population(tree)
    random.Random(seed).shuffle(pool)
    skip = drawn(exclude)
    taken: list[dict] = []
    per = Counter()
    for item in pool:
        key = _key(item["package"], f"{item['path']}:{item['line']}", item["code"])
        if key in skip or per[item["package"]] >= per_package:
            continue
        per[item["package"]] += 1
        taken.append(item)
        if len(taken) == size:
            break
    return taken


def _cell(text: str) -> str:
    return " ".join(str(text).split()).replace("|", "\\|")


def write_sample(items: list[dict], out: Path, tree: Path, seed: int) -> None:
    lines = [
        f"# Audit sample: seed {seed}, {len(items)} report-only findings of {tree}",
        "",
        "Fill the verdict column with TRUE, FALSE, FALSE-WP, REDUNDANT or UNSURE, and give the reason",
        "under the table, one paragraph per number.",
        "",
        "| # | verdict | package | location | code | severity | message | source |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for number, item in enumerate(items, 1):
        lines.append(
            f"| {number} |  | {item['package']} | `{item['path']}:{item['line']}` | {item['code']} | "
            f"{item.get('severity', '')} | {_cell(item['message'])} | `{_cell(item.get('source') or '')}` |"
        )
    out.write_text("\n".join(lines) + "\n", encoding="utf-8")


def score(tree: Path, samples: list[Path]) -> str:
    pool = population(tree)
    share = Counter(item["package"] for item in pool)
    total = sum(share.values())
    per_package: dict[str, Counter] = defaultdict(Counter)
    overall = Counter()
    for path in samples:
        for line in path.read_text(encoding="utf-8").splitlines():
            match = _ROW.match(line)
            if not match:
                continue
            verdict = match.group(2)
            if not verdict:  # not judged yet
                continue
            per_package[match.group(3)][verdict] += 1
            overall[verdict] += 1
    judged = sum(overall.values())
    bad = sum(overall[v] for v in BAD)
    out = [f"{judged} findings judged: " + ", ".join(f"{v} {n}" for v, n in sorted(overall.items()))]
    unknown = set(overall) - VERDICTS
    if unknown:
        out.append("unknown verdicts (counted as not false): " + ", ".join(sorted(unknown)))
    if judged:
        out.append(f"false or redundant, as drawn: {bad}/{judged} = {100 * bad / judged:.1f}%")
        # (the interval leaves UNSURE out, as census does; an uncapped draw, --per-package at least
        # the largest package's count, is a simple random sample: its rate is the population's)
        decided = judged - overall["UNSURE"]
        low, high = _wilson(bad, decided)
        out.append(f"95% interval (Wilson, {bad}/{decided} decided): {100 * low:.1f}% to {100 * high:.1f}%")
    weighted = 0.0
    covered = 0
    for package, verdicts in sorted(per_package.items()):
        n = sum(verdicts.values())
        rate = sum(verdicts[v] for v in BAD) / n
        weighted += rate * share[package]
        covered += share[package]
        out.append(f"  {package}: {sum(verdicts[v] for v in BAD)}/{n} bad, {share[package]} in the population")
    if covered:
        out.append(f"false or redundant, weighted by population share (of the {covered}/{total} findings "
                   f"in sampled packages): {100 * weighted / covered:.1f}%")
    return "\n".join(out)


def verdicts(paths: list[Path]) -> dict[tuple[str, str, str], tuple[str, str, str]]:
    """(package, location, code) -> (verdict, severity when judged, "sample#row"), later files winning."""
    found = {}
    for path in paths:
        for line in path.read_text(encoding="utf-8").splitlines():
            match = _ROW.match(line)
            if match and match.group(2):
                key = _key(match.group(3), match.group(4), match.group(5))
                found[key] = (match.group(2), match.group(6) or "", f"{path.stem}#{match.group(1)}")
    return found


def _wilson(bad: int, n: int, z: float = 1.96) -> tuple[float, float]:
    if not n:
        return 0.0, 1.0
    p = bad / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * ((p * (1 - p) / n + z * z / (4 * n * n)) ** 0.5) / (1 + z * z / n)
    return max(0.0, centre - half), min(1.0, centre + half)


def census(tree: Path, audited: list[Path], samples: list[Path], rejudged: Path | list[Path] | None = None) -> str:
    pool = population(tree)
    judged = verdicts(audited + samples)
    for path in [rejudged] if isinstance(rejudged, Path) else rejudged or []:
        for line in path.read_text(encoding="utf-8").splitlines():
            parts = line.split()
            if len(parts) == 4 and not line.startswith("#"):
                package, location, code, verdict = parts
                old = judged.get(_key(package, location, code), ("", "", ""))
                # (judged again as reported today: no severity of its own to go stale against)
                judged[_key(package, location, code)] = (verdict, "", f"{old[2]} re-judged")
    sampled = set(verdicts(samples))
    known = Counter()
    never = Counter()
    bad_rows, stale = [], []
    for item in pool:
        key = _key(item["package"], f"{item['path']}:{item['line']}", item["code"])
        if key not in judged:
            never[item["package"]] += 1
            continue
        verdict, severity, where = judged[key]
        stratum = "sampled" if key in sampled else "known"
        known[(stratum, verdict)] += 1
        if verdict in BAD and stratum == "known":
            bad_rows.append(f"  {where}: {item['package']} {key[1]} {item['code']} {item.get('severity', '')} ({verdict})")
        if severity and item.get("severity") and severity != item.get("severity"):
            stale.append(f"  {where}: {item['package']} {key[1]} {item['code']} judged {verdict} as "
                         f"{severity}, now {item['severity']}")
    total = len(pool)
    k_n = sum(n for (s, _), n in known.items() if s == "known")
    k_bad = sum(n for (s, v), n in known.items() if s == "known" and v in BAD)
    s_n = sum(n for (s, v), n in known.items() if s == "sampled" and v != "UNSURE")
    s_bad = sum(n for (s, v), n in known.items() if s == "sampled" and v in BAD)
    u = sum(never.values())
    out = [f"{total} report-only findings today",
           f"judged in an earlier round and still reported: {k_n}, of which false or redundant: {k_bad}",
           f"never judged before the new samples: {u + sum(n for (s, _), n in known.items() if s == 'sampled')}"
           f" ({', '.join(f'{p} {n}' for p, n in never.most_common())} left unjudged)"]
    gone = len(sampled) - sum(n for (s, _), n in known.items() if s == "sampled")
    if sampled and gone:
        # (the rate of a sample holds for the tree it was drawn from: once the findings it judged
        # are fixed, only a new sample of today's never-judged findings measures them)
        out.append(f"{gone} of the {len(sampled)} sampled findings are no longer reported: the estimate "
                   f"below is the sample's rate applied to today's unjudged stratum; draw a new sample "
                   f"to measure this tree")
    if s_n:
        rate = s_bad / s_n
        low, high = _wilson(s_bad, s_n)
        sampled_all = sum(n for (s, _), n in known.items() if s == "sampled")
        stratum = u + sampled_all
        estimate = k_bad + rate * stratum
        out.append(f"new samples: {s_bad}/{s_n} false or redundant = {100 * rate:.1f}% "
                   f"(95% interval {100 * low:.1f}% to {100 * high:.1f}%)")
        out.append(f"estimated false or redundant in the whole population: {k_bad} + {100 * rate:.1f}% of "
                   f"{stratum} = {estimate:.0f} of {total} = {100 * estimate / total:.1f}% "
                   f"({100 * (k_bad + low * stratum) / total:.1f}% to {100 * (k_bad + high * stratum) / total:.1f}%)")
    else:
        out.append(f"lower bound (the unjudged counted as true): {k_bad}/{total} = {100 * k_bad / total:.1f}%")
    if bad_rows:
        out.append("judged false or redundant earlier and still reported:")
        out.extend(sorted(bad_rows))
    if stale:
        out.append("severity changed since the verdict (re-check these):")
        out.extend(sorted(stale))
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    d = sub.add_parser("draw", help="draw a sample")
    d.add_argument("tree", type=Path, help="an ecosystem.py --keep folder")
    d.add_argument("seed", type=int)
    d.add_argument("out", type=Path)
    d.add_argument("--size", type=int, default=40)
    d.add_argument("--per-package", type=int, default=8)
    d.add_argument("--exclude", type=Path, action="append", default=[])
    s = sub.add_parser("score", help="score filled-in samples")
    s.add_argument("tree", type=Path)
    s.add_argument("samples", type=Path, nargs="+")
    c = sub.add_parser("census", help="estimate the whole population's bad rate from every round")
    c.add_argument("tree", type=Path)
    c.add_argument("--audited", type=Path, nargs="*", default=[], help="earlier rounds' samples, oldest first")
    c.add_argument("--sample", type=Path, nargs="*", default=[],
                   help="samples drawn at random from the findings no earlier round judged")
    c.add_argument("--rejudged", type=Path, action="append", default=[],
                   help="lines 'package location code VERDICT' that override (oldest first; repeatable)")
    args = parser.parse_args(argv)
    if args.command == "census":
        print(census(args.tree, args.audited, args.sample, args.rejudged))
        return 0
    if args.command == "draw":
        items = draw(args.tree, args.seed, args.size, args.per_package, args.exclude)
        if not items:
            print(f"error: no report-only findings under {args.tree}", file=sys.stderr)
            return 1
        write_sample(items, args.out, args.tree, args.seed)
        print(f"{len(items)} findings written to {args.out}")
        return 0
    print(score(args.tree, args.samples))
    return 0


if __name__ == "__main__":
    sys.exit(main())
