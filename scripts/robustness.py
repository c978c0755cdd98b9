#!/usr/bin/env python3
"""The robustness corpus (issue #7): thousands of real files through the engine, in CI.

`npu-migrate --dry-run` promises never to crash, never to write code that does not compile, to
change nothing on a second run, and to leave files without trigger words byte-identical. Unit
tests check this on fixtures; this script checks it on real trees nobody wrote for us: the
installed torch package and the Python standard library.

It runs the engine in-process, as the CLI does (`run.run_files` with worker processes, the
same `Options`: every rule enabled, NPU-aware and package folders computed from the corpus), and
asserts, for every file:
  * no exception escapes the engine (a file that does not parse must become an NPU001/NPU002
    finding, counted as a parse failure);
  * every rewritten file compiles (`compile` on the new bytes, so a coding cookie is honoured;
    a file whose original does not compile with this Python is counted, not blamed);
  * migrating the rewritten bytes again changes nothing;
  * a file without trigger words (the engine's byte prefilter) is left alone: no new bytes;
  * a rewritten file has at least one rewrite finding (no change nobody reports), and the
    engine with every rule switched off leaves it alone: otherwise the rewrite carries edits to
    code no rule touched (libcst does not print everything back byte for byte: `except E :`
    loses its space, Instagram/LibCST#1457).

With `--compare-slices`, every file the engine parsed is migrated a second time from a whole-file
parse (`Options(hot_slices=False)`): new bytes and findings must be the same as with hot slices.

With `--force-parse`, every file without trigger words is also sent through the full pipeline
(hot slices, parse, traversal, code generation) with a trigger word appended in a comment: the
result must be unchanged, nothing may raise, and there may be no findings but parse failures (a
finding there is one the byte prefilter hides in a normal run). That exercises the engine on
all the Python of the corpus, not only on the files that mention CUDA.

    python scripts/robustness.py --corpus both          # CI
    python scripts/robustness.py --corpus stdlib --limit 40
    python scripts/robustness.py --corpus path/to/any/folder

Exit codes: 0 no violation, 1 violations (listed), 2 the corpus cannot be found.
"""

from __future__ import annotations

import argparse
import dataclasses
import multiprocessing
import os
import sys
import time
import warnings
from collections import Counter
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

if str(Path(__file__).resolve().parent) not in sys.path:  # scripts/corpora.py, also when loaded by path
    sys.path.insert(0, str(Path(__file__).resolve().parent))
import corpora  # noqa: E402

from npu_migrate import catalogue
from npu_migrate.engine import PREFILTER, migrate_source
from npu_migrate.model import FileResult, Options
from npu_migrate.run import migrate_path, package_dirs, run_files

PARSE_FAILURE_CODES = frozenset({"NPU001", "NPU002"})
# Appended to files without trigger words by --force-parse: a comment, so nothing may change.
PROBE = b"\n# npu-migrate robustness probe: cuda\n"
SKIP_DIRS = frozenset({"site-packages", "dist-packages", "__pycache__"})
CHUNK = 1000  # files per run_files call: a crash is narrowed down within one chunk
MAX_LISTED = 50  # violations printed in full


@dataclass
class Tally:
    corpus: str
    root: Path
    files: int = 0
    lines: int = 0
    parsed: int = 0
    changed: int = 0
    findings: int = 0
    parse_failures: int = 0
    skipped: Counter = field(default_factory=Counter)
    compiled: int = 0
    original_not_compiling: int = 0
    second_pass: int = 0
    compared: int = 0
    probed: int = 0
    probe_parsed: int = 0
    probe_parse_failures: int = 0
    timings: dict = field(default_factory=dict)
    violations: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def violation(self, rel: str, what: str) -> None:
        self.violations.append(f"{self.corpus}: {rel}: {what}")


# ------------------------------------------------------------------ corpora

def corpus_root(name: str) -> Path:
    return corpora.corpus_root(name)


def corpus_files(root: Path) -> list[tuple[str, str]]:
    """(path, relpath) of every .py file under root; no links, no installed third-party packages."""
    items = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if d not in SKIP_DIRS)
        here = Path(dirpath)
        for name in sorted(filenames):
            path = here / name
            if name.endswith(".py") and not path.is_symlink() and path.is_file():
                items.append((str(path), path.relative_to(root).as_posix()))
    return items


def _spread(items: Sequence, n: int) -> list:
    if n >= len(items):
        return list(items)
    step = len(items) / n
    return [items[int(step * (i + 0.5))] for i in range(n)]


def sample(items: list[tuple[str, str]], limit: int) -> list[tuple[str, str]]:
    """`limit` files spread over the corpus, half of them (when there are) with trigger words."""
    hot, cold = [], []
    for item in items:
        (hot if PREFILTER.search(Path(item[0]).read_bytes()) else cold).append(item)
    picked = _spread(hot, min(len(hot), (limit + 1) // 2))
    picked += _spread(cold, min(len(cold), limit - len(picked)))
    return sorted(picked, key=lambda item: item[1])


# ------------------------------------------------------------------ workers

def _parallel(fn: Callable, tasks: list, jobs: int, size: Callable[[object], int]) -> list:
    """fn over tasks in worker processes (fn must not raise), largest first so no worker idles
    at the end while another still has a big file."""
    tasks = sorted(tasks, key=size, reverse=True)
    if jobs <= 1 or len(tasks) < 4:
        return [fn(t) for t in tasks]
    context = multiprocessing.get_context("fork" if hasattr(os, "fork") else "spawn")
    chunk = 1 if len(tasks) < 500 else 4
    with ProcessPoolExecutor(max_workers=jobs, mp_context=context) as pool:
        return list(pool.map(fn, tasks, chunksize=chunk))


def _compile_error(data: bytes, path: str) -> str | None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # invalid escape sequences and the like are not our concern
        try:
            compile(data, path, "exec", dont_inherit=True)
        except Exception as exc:  # SyntaxError, ValueError (NUL bytes), RecursionError, ...
            return f"{type(exc).__name__}: {exc}"
    return None


def recheck(task: tuple[str, str, bytes, bytes, Options]) -> dict:
    """A rewritten file: does it compile, does a second migration leave it alone, and does the
    engine with no rule enabled leave the original alone (nothing changed that no rule changed)?"""
    path, rel, original, new, options = task
    out: dict = {"rel": rel, "compile_error": None, "original_compiles": True, "again": None, "error": None,
                 "collateral": None}
    out["compile_error"] = _compile_error(new, path)
    if out["compile_error"]:
        out["original_compiles"] = _compile_error(original, path) is None
    try:
        again = migrate_source(new, rel, options)
        idle = migrate_source(original, rel, dataclasses.replace(options, enabled=frozenset()))
    except Exception as exc:
        out["error"] = f"{type(exc).__name__}: {exc}"
        return out
    if again.new is not None and again.new != new:
        out["again"] = f"second pass changes it again ({_lines_differ(new, again.new)} lines differ)"
    if idle.new is not None and idle.new != original:
        out["collateral"] = (f"with every rule off the engine still changes {_lines_differ(original, idle.new)} "
                             "lines: the rewrite alters code no rule touched")
    return out


def _lines_differ(a: bytes, b: bytes) -> int:
    left, right = a.splitlines(), b.splitlines()
    return sum(x != y for x, y in zip(left, right)) + abs(len(left) - len(right))


def compare(task: tuple[str, str, bytes | None, list, Options]) -> dict:
    """A parsed file: does a whole-file parse give what the hot slices gave?"""
    path, rel, new, findings, options = task
    out: dict = {"rel": rel, "error": None, "differs": None, "note": None}
    source = Path(path).read_bytes()
    whole_options = dataclasses.replace(options, hot_slices=False)
    try:
        whole = migrate_source(source, rel, whole_options)
        if whole.new != new:
            idle = migrate_source(source, rel, dataclasses.replace(whole_options, enabled=frozenset()))
    except Exception as exc:
        out["error"] = f"{type(exc).__name__}: {exc}"
        return out
    if whole.new != new:
        if idle.new is not None and idle.new != source:
            out["note"] = ("new bytes differ from a whole-file parse, which alters code no rule touched "
                           "(libcst round trip); the hot slices avoid it")
        else:
            out["differs"] = "new bytes differ between hot slices and a whole-file parse"
    elif sorted(whole.findings) != sorted(findings):
        missed = sorted(set(whole.findings) - set(findings))
        added = sorted(set(findings) - set(whole.findings))
        parts = [f"hot slices miss {f.code} line {f.line}" for f in missed[:2]]
        parts += [f"hot slices add {f.code} line {f.line}" for f in added[:2]]
        out["differs"] = f"findings differ from a whole-file parse: {'; '.join(parts) or 'order or count'}"
    return out


def probe(task: tuple[str, str, Options]) -> dict:
    """A file without trigger words, sent through the whole pipeline with a trigger comment."""
    path, rel, options = task
    out: dict = {"rel": rel, "error": None, "parsed": False, "changed": False, "codes": []}
    try:
        source = Path(path).read_bytes() + PROBE
        result = migrate_source(source, rel, options)
    except Exception as exc:
        out["error"] = f"{type(exc).__name__}: {exc}"
        return out
    out["parsed"] = result.skipped is None
    out["changed"] = result.new is not None and result.new != source
    out["codes"] = sorted({f.code for f in result.findings})
    return out


# ------------------------------------------------------------------ passes

def first_pass(items: list[tuple[str, str]], options: Options, jobs: int, tally: Tally) -> list[FileResult]:
    """run_files over the corpus, chunk by chunk; a chunk that raises is redone file by file."""
    results: list[FileResult] = []
    for start in range(0, len(items), CHUNK):
        chunk = items[start:start + CHUNK]
        try:
            results.extend(run_files(chunk, options, jobs=jobs))
            continue
        except Exception as exc:  # the engine promises not to raise: find the file(s)
            tally.notes.append(f"run_files raised {type(exc).__name__} on files {start}..; retried one by one")
        for item in chunk:
            try:
                results.append(migrate_path((item[0], item[1], options)))
            except Exception as exc:
                tally.violation(item[1], f"engine raised {type(exc).__name__}: {exc}")
    return results


def check_results(results: list[FileResult], items: dict[str, str], tally: Tally) -> tuple[list, list]:
    """Counts and per-file invariants; returns the rewritten files and the parsed files."""
    rewritten, parsed = [], []
    for r in results:
        original = r.original or b""
        codes = {f.code for f in r.findings}
        tally.findings += len(r.findings)
        if r.skipped:
            tally.skipped[r.skipped] += 1
        elif not codes & PARSE_FAILURE_CODES:
            tally.parsed += 1
            parsed.append((items[r.relpath], r.relpath, r.new, list(r.findings)))
        if codes & PARSE_FAILURE_CODES:
            tally.parse_failures += 1
            if "NPU001" in codes and _compile_error(original, items[r.relpath]) is None:
                tally.notes.append(f"{r.relpath}: NPU001 although this Python compiles it")
            if r.new is not None:
                tally.violation(r.relpath, "a file that failed to parse was rewritten")
        if not PREFILTER.search(original) and r.new is not None:
            tally.violation(r.relpath, "no trigger words, yet the engine returned new bytes")
        if r.skipped and r.new is not None:
            tally.violation(r.relpath, f"skipped ({r.skipped}), yet the engine returned new bytes")
        if r.changed:
            tally.changed += 1
            if not any(f.fixable for f in r.findings):
                tally.violation(r.relpath, "changed, but no rewrite finding says why")
            rewritten.append((items[r.relpath], r.relpath, original, r.new))
    return rewritten, parsed


def second_pass(rewritten: list[tuple], options: Options, jobs: int, tally: Tally) -> None:
    tasks = [(path, rel, original, new, options) for path, rel, original, new in rewritten]
    for out in _parallel(recheck, tasks, jobs, size=lambda task: len(task[3])):
        rel = out["rel"]
        tally.second_pass += 1
        if out["compile_error"] is None:
            tally.compiled += 1
        elif out["original_compiles"]:
            tally.violation(rel, f"rewritten file does not compile: {out['compile_error']}")
        else:
            tally.original_not_compiling += 1
        if out["error"]:
            tally.violation(rel, f"second pass raised {out['error']}")
        if out["again"]:
            tally.violation(rel, out["again"])
        if out["collateral"]:
            tally.violation(rel, out["collateral"])


def compare_pass(parsed: list[tuple], options: Options, jobs: int, tally: Tally) -> None:
    tasks = [(path, rel, new, findings, options) for path, rel, new, findings in parsed]
    for out in _parallel(compare, tasks, jobs, size=lambda task: os.path.getsize(task[0])):
        tally.compared += 1
        if out["error"]:
            tally.violation(out["rel"], f"whole-file parse raised {out['error']}")
        elif out["differs"]:
            tally.violation(out["rel"], out["differs"])
        if out["note"]:
            tally.notes.append(f"{out['rel']}: {out['note']}")


def probe_pass(items: list[tuple[str, str]], options: Options, jobs: int, tally: Tally) -> None:
    tasks = [(path, rel, options) for path, rel in items]
    for out in _parallel(probe, tasks, jobs, size=lambda task: os.path.getsize(task[0])):
        rel = out["rel"]
        tally.probed += 1
        if out["error"]:
            tally.violation(rel, f"probe: engine raised {out['error']}")
            continue
        tally.probe_parsed += out["parsed"]
        failures = set(out["codes"]) & PARSE_FAILURE_CODES
        if failures:
            tally.probe_parse_failures += 1
        if out["changed"]:
            tally.violation(rel, "probe: a file without trigger words was changed once parsed")
        others = sorted(set(out["codes"]) - PARSE_FAILURE_CODES)
        if others:
            tally.violation(rel, f"probe: once parsed, the engine reports {', '.join(others)} here, but the "
                                 "prefilter skips the file (no trigger word): prefilter and rules disagree")


def run_corpus(name: str, jobs: int, limit: int | None, force_parse: bool = False,
               compare_slices: bool = False) -> Tally:
    root = corpus_root(name)
    items = corpus_files(root)
    if limit is not None:
        items = sample(items, limit)
    tally = Tally(name, root, files=len(items))
    by_rel = {rel: path for path, rel in items}
    cold = []
    for path, rel in items:
        data = Path(path).read_bytes()
        tally.lines += data.count(b"\n") + (1 if data and not data.endswith(b"\n") else 0)
        if not PREFILTER.search(data):
            cold.append((path, rel))
    options = Options(enabled=catalogue.enabled_codes(),
                      package_dirs=package_dirs(root, items))

    started = time.perf_counter()
    results = first_pass(items, options, jobs, tally)
    tally.timings["first pass"] = time.perf_counter() - started
    seen = {r.relpath for r in results}
    for rel in sorted(set(by_rel) - seen):
        if not any(v.startswith(f"{name}: {rel}: ") for v in tally.violations):
            tally.violation(rel, "no result came back for this file")
    rewritten, parsed = check_results(results, by_rel, tally)
    del results

    started = time.perf_counter()
    second_pass(rewritten, options, jobs, tally)
    tally.timings["second pass"] = time.perf_counter() - started
    if compare_slices:
        started = time.perf_counter()
        compare_pass(parsed, options, jobs, tally)
        tally.timings["compare slices"] = time.perf_counter() - started
    if force_parse:
        started = time.perf_counter()
        probe_pass(cold, options, jobs, tally)
        tally.timings["probe"] = time.perf_counter() - started
    return tally


# ------------------------------------------------------------------ report

def report(t: Tally) -> str:
    skipped = "; ".join(f"{reason} {n:,}" for reason, n in sorted(t.skipped.items())) or "none"
    timing = ", ".join(f"{k} {v:.1f} s" for k, v in t.timings.items())
    lines = [
        f"{t.corpus}: {t.root}",
        (f"  files {t.files:,} ({t.lines:,} lines): parsed {t.parsed:,}, changed {t.changed:,}, "
         f"findings {t.findings:,}, parse failures {t.parse_failures:,}"),
        f"  skipped: {skipped}",
        f"  rewritten files: {t.compiled:,} of {t.second_pass:,} compile"
        + (f" ({t.original_not_compiling} whose original does not compile either)" if t.original_not_compiling else "")
        + f"; second pass: {t.second_pass:,} files migrated again",
    ]
    if "compare slices" in t.timings:
        lines.append(f"  compare slices: {t.compared:,} parsed files migrated again from a whole-file parse")
    if "probe" in t.timings:
        lines.append(f"  probe (--force-parse): {t.probed:,} files without trigger words, parsed "
                     f"{t.probe_parsed:,}, parse failures {t.probe_parse_failures:,}")
    lines.append(f"  elapsed {sum(t.timings.values()):.1f} s ({timing})")
    lines.append(f"  violations: {len(t.violations)}")
    lines += [f"  note: {n}" for n in t.notes[:MAX_LISTED]]
    return "\n".join(lines)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--corpus", default="both", metavar="torch|stdlib|both|DIR",
                        help="the installed torch package, the standard library, both (default), or a folder")
    parser.add_argument("--limit", type=int, default=None, metavar="N",
                        help="only N files per corpus (half with trigger words), for quick runs")
    parser.add_argument("-j", "--jobs", type=int, default=os.cpu_count() or 1,
                        help="worker processes (default: the number of CPUs)")
    parser.add_argument("--force-parse", action="store_true",
                        help="also parse files without trigger words (with a probe comment); slower")
    parser.add_argument("--compare-slices", action="store_true",
                        help="also migrate every parsed file from a whole-file parse and compare; slower")
    args = parser.parse_args(argv)
    if args.compare_slices and "hot_slices" not in {f.name for f in dataclasses.fields(Options)}:
        parser.error("--compare-slices: this engine has no hot slices (Options.hot_slices)")
    if args.limit is not None and args.limit < 1:
        parser.error("--limit must be at least 1")
    if args.jobs < 1:
        parser.error("--jobs must be at least 1")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    names = ("torch", "stdlib") if args.corpus == "both" else (args.corpus,)
    started = time.perf_counter()
    tallies = []
    for name in names:
        try:
            tally = run_corpus(name, args.jobs, args.limit, args.force_parse, args.compare_slices)
        except LookupError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2
        print(report(tally), flush=True)
        tallies.append(tally)
    violations = [v for t in tallies for v in t.violations]
    print(f"total: {sum(t.files for t in tallies):,} files, {len(violations)} violations, "
          f"{time.perf_counter() - started:.1f} s with -j {args.jobs}")
    if violations:
        print("violations:")
        for v in violations[:MAX_LISTED]:
            print(f"  {v}")
        if len(violations) > MAX_LISTED:
            print(f"  ... and {len(violations) - MAX_LISTED} more")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
