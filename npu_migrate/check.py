"""`npu-migrate check [PATHS...]`: flag CUDA-only code, for CI and pre-commit.

It runs the very engine `migrate` runs (`run.run_files`, nothing written) and reports every
finding, rewritable and report-only, so `check` and `npu-migrate --dry-run` find the same set.
On top of that it keeps to *new* code: `--baseline` accepts recorded findings, `--diff-base`
keeps findings on lines changed since a git revision; suppression comments, per-file ignores
and `[tool.npu-migrate]` in pyproject.toml shape what is checked.

Exit codes (like ruff): 0 no new findings, 1 new findings (or stale baseline entries with
`--fail-on-stale`), 2 the tool failed. `--exit-zero` turns 1 into 0.
"""

from __future__ import annotations

import dataclasses
import os
import re
import sys
from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING, Optional

import click

from .formats import FORMATS, Item, Report, render

if TYPE_CHECKING:  # pragma: no cover
    from .runplan import CheckRun

# The rest (the engine, rich, git) is imported by the functions that use it: this module defines
# the `check` command, and `npu-migrate check FILE` from an editor or a hook should start fast.


class CheckError(Exception):
    """The run cannot go on (exit 2)."""


def _display(path: Path, cwd: Path) -> str:
    try:
        return path.relative_to(cwd).as_posix()
    except ValueError:
        return path.as_posix()


def run_check(run: CheckRun, cwd: Optional[Path] = None) -> tuple[Report, dict]:
    """Everything `check` does but printing. Raises CheckError for exit-2 problems."""
    from . import baseline as baseline_mod
    from . import gitdiff, suppress
    from .cache import open_for as open_cache
    from .config import ConfigError, parse_per_file_ignores, resolve
    from .discover import DiscoveryError, excluded
    from .findings import merge_per_file, split_merged
    from .render import skipped_entries
    from .run import file_kind
    from .runplan import (
        NOTHING_READ,
        collect,
        common_folder,
        empty_folder_warnings,
        make_options,
        resolve_root,
        run_engine,
        selection,
        shim_name_problem,
        split_codes,
    )
    from .source import WriteError

    cwd = (cwd or Path.cwd()).absolute()
    paths = run.paths or (".",)
    baseline, write_baseline, diff_base, fix = run.baseline, run.write_baseline, run.diff_base, run.fix
    resolved = [(cwd / p).absolute() if not Path(p).is_absolute() else Path(p) for p in paths]
    for p in resolved:
        if not p.exists() and not p.is_symlink():
            raise CheckError(f"{p}: no such file or directory")
    try:
        common = common_folder(tuple(str(p) for p in resolved))
    except DiscoveryError as exc:
        raise CheckError(str(exc)) from None
    try:
        cfg = resolve(common, run.config_file, run.isolated)
        enabled = selection(cfg, run.select, run.ignore, run.extend_select)
        pfi = cfg.per_file_ignores
        if run.per_file_ignores:
            pfi = parse_per_file_ignores(run.per_file_ignores, "--per-file-ignores")
    except ConfigError as exc:
        raise CheckError(str(exc)) from None
    excludes = split_codes(run.exclude) or cfg.exclude
    shim = run.shim_name if run.shim_name is not None else (cfg.shim_name or "npu_compat")
    problem = shim_name_problem(shim)
    if problem:
        raise CheckError(f"shim name {shim!r} {problem}")
    # The same root, files and options as `npu-migrate` over the same paths (runplan.py).
    root = resolve_root(common, cfg.root, tuple(str(p) for p in resolved))
    special: list[str] = []  # named files that are not regular files (a FIFO): skipped
    try:
        _root, items, links = collect(tuple(str(p) for p in resolved), excludes, shim, root=root,
                                      warnings=special)
    except DiscoveryError as exc:
        raise CheckError(str(exc)) from None
    warnings = list(cfg.warnings)
    warnings += [f"{link} is a symbolic link; skipped (name its target instead)" for link in links]
    warnings += special
    if not items and not links and not any(p.is_dir() for p in resolved):
        # as `npu-migrate FILE` does: every named file skipped is a mistake, not a pass
        for warning in warnings:
            click.echo(f"warning: {warning}", err=True)
        raise CheckError(f"nothing to check: no named path is a file npu-migrate reads ({NOTHING_READ})")
    warnings += empty_folder_warnings(tuple(str(p) for p in resolved), items, paths)

    # Every input that can fail is read before --fix writes anything: the baseline (or the one
    # --write-baseline refreshes) and the --diff-base revision.
    base_file = None
    if baseline:
        base_file = Path(baseline) if Path(baseline).is_absolute() else cwd / baseline
    elif cfg.baseline is not None:
        base_file = cfg.baseline
    counts: Optional[Counter] = None
    old_baseline = Counter()
    try:
        if write_baseline:
            target = Path(write_baseline)
            target = target if target.is_absolute() else cwd / target
            if target.exists():
                old_baseline = baseline_mod.load(target)
        elif base_file is not None:
            counts = baseline_mod.load(base_file)
    except baseline_mod.BaselineError as exc:
        raise CheckError(str(exc)) from None
    if diff_base and fix and not write_baseline:
        try:
            gitdiff.changed_lines(diff_base, common)  # only to fail before the rewrite
        except gitdiff.GitError as exc:
            raise CheckError(str(exc)) from None
    # Also for files named explicitly (pre-commit passes them): the shim is never checked.
    items = [(p, r) for p, r in items if not excluded(r, excludes + (shim,))]

    options = make_options(root, items, enabled, shim)
    cache = open_cache(root, run.cache_dir, run.no_cache)
    try:
        results = run_engine(items, options, pfi, jobs=run.jobs or os.cpu_count() or 1, cache=cache)
    except Exception as exc:  # the engine promises not to raise; if it does, the tool failed
        raise CheckError(f"internal error: {type(exc).__name__}: {exc}") from exc
    if cache is not None:
        cache.save(root)

    # Suppression comments (a post-filter; see suppress.py for the engine hook).
    suppressed = 0
    kept: list = []  # (FileResult, findings)
    blocked_fix: set[str] = set()
    for result in results:
        if file_kind(result.relpath) != "python":
            # Notebooks and text files apply their comments themselves (per cell / per line of
            # their own syntax); their findings' lines are not lines of a Python file.
            suppressed += result.suppressed
            kept.append((result, result.findings))
            continue
        if not result.findings:  # nothing a comment could drop (most files of a large tree)
            suppressed += getattr(result, "suppressed", 0)
            kept.append((result, []))
            continue
        supp = suppress.parse(result.original or b"")
        findings, dropped = suppress.filter_findings(result.findings, supp)
        if supp.skips_file:
            dropped, findings = len(result.findings), []
            blocked_fix.add(result.relpath)
        elif any(f.fixable and supp.suppresses(f.code, f.line) for f in result.findings):
            blocked_fix.add(result.relpath)  # until the engine honours suppressions itself
        # once the engine honours suppressions itself it counts what it dropped (FileResult.suppressed)
        suppressed += dropped + getattr(result, "suppressed", 0)
        kept.append((result, findings))

    extra: dict = {"root": root, "written": [], "shim": "", "skipped": skipped_entries(results)}
    if fix:
        kept, fix_errors, fix_notes, written, shim_notes = _apply_fix(kept, root, options, run.no_shim, blocked_fix)
        if fix_errors:
            raise CheckError("; ".join(fix_errors))
        warnings.extend(fix_notes)
        extra["written"] = written
        extra["shim"] = "; ".join(shim_notes)
        extra["created_shims"] = [n for n in shim_notes if n.startswith(("created", "refreshed", "restored"))]

    # NPU003: files that import a shim the repository does not hold (after --fix wrote it).
    by_rel = {r.relpath: i for i, (r, _f) in enumerate(kept)}
    for rel, finding in missing_shims([r for r, _f in kept], options, root):
        index = by_rel[rel]
        result, findings = kept[index]
        kept[index] = (result, [*findings, finding])

    # Everything below works on (absolute path, finding) pairs, in file order.
    rows = []
    listed: set = set()  # ids of the places a merged finding listed (the anchor stays the anchor)
    file_lines: dict = {}  # notebook finding -> the line of the .ipynb text that holds it
    for result, findings in kept:
        full = (root / result.relpath).absolute()
        # a finding merged per file is taken apart here, so that the baseline and --diff-base
        # judge each place it stands for; the new ones are merged again below
        parts = [split_merged(finding) if finding.cell is None else [finding] for finding in findings]
        listed.update(id(g) for group in parts for g in group[1:])  # not the anchor the run chose
        for f in sorted(g for group in parts for g in group):
            rows.append((full, f))
            if f.cell is not None:
                file_lines[f] = _notebook_line(result, f)

    report = Report(items=[], files_checked=len(results), suppressed=suppressed, warnings=warnings,
                    enabled=enabled, cwd=cwd, diff_base=diff_base)
    checked_files = [(root / r.relpath).absolute() for r in results]

    if write_baseline:
        target = Path(write_baseline)
        target = target if target.is_absolute() else cwd / target
        found_now = Counter((baseline_mod.path_key(target, full), f.code, f.source) for full, f in rows)
        checked = {baseline_mod.path_key(target, p) for p in checked_files}
        merged = baseline_mod.merge(old_baseline, found_now, checked, target)
        try:
            baseline_mod.write(target, merged)
        except (OSError, WriteError) as exc:  # WriteError: a link or a FIFO at FILE, never written to
            raise CheckError(f"{target}: cannot write baseline: {exc}") from None
        extra["baseline_written"] = (target, sum(merged.values()), len(merged))
        return report, extra

    # Baseline (read above, before anything was written).
    if base_file is not None and counts is not None:
        keyed = [((baseline_mod.path_key(base_file, full), f.code, f.source), (full, f)) for full, f in rows]
        new, accepted = baseline_mod.split(keyed, counts)
        found = Counter(key for key, _ in keyed)
        checked = {baseline_mod.path_key(base_file, p) for p in checked_files}
        dirs = [p for p in resolved if p.is_dir()]
        report.stale = baseline_mod.stale(counts, found, checked, base_file, dirs)
        report.baselined = len(accepted)
        report.baseline = _display(base_file.absolute(), cwd)
        rows = new

    # Diff base.
    if diff_base:
        try:
            changes = gitdiff.changed_lines(diff_base, common)
        except gitdiff.GitError as exc:
            raise CheckError(str(exc)) from None
        inside = [(full, f) for full, f in rows
                  if gitdiff.is_changed(changes, full, file_lines.get(f, f.line))]
        report.outside_diff = len(rows) - len(inside)
        rows = inside

    by_file: dict = {}
    for full, f in rows:
        by_file.setdefault(full, []).append(f)
    rows = [(full, f) for full, found in by_file.items()
            for f in merge_per_file(found, lambda finding: id(finding) in listed)]

    occurrences: Counter = Counter()
    out = []
    for full, f in rows:
        shown = _display(full, cwd)
        key = (shown, f.code, f.source)
        occurrences[key] += 1
        out.append(Item(f, shown, occurrences[key], file_line=file_lines.get(f)))
    report.items = sorted(out, key=lambda i: (i.path, i.finding))
    return report, extra


def _notebook_line(result, finding) -> int | None:
    """The line of the notebook's JSON text holding a cell's finding (every format points into
    the file itself: text, github, sarif, gitlab, and --diff-base)."""
    from .runplan import notebook_file_line

    return notebook_file_line(result.original, finding)


def _apply_fix(kept, root: Path, options, no_shim: bool, blocked: set[str]):
    """Write the rewrites (like `migrate`), with `root` as the migration root; inject the shims."""
    from .inject import (
        ShimConflict,
        ShimWriteError,
        check_all,
        inject_all,
        shim_not_written,
        why_none_writable,
    )
    from .run import needed_shims
    from .source import WriteError, write_atomic

    errors: list[str] = []
    warnings: list[str] = []
    to_write = [(r, fs) for r, fs in kept if r.changed and r.relpath not in blocked]
    for r, _ in kept:
        if r.changed and r.relpath in blocked:
            warnings.append(f"{r.relpath}: not rewritten: it has suppression comments on rewritable code")
    shims = [] if no_shim else sorted(needed_shims([r for r, _ in to_write], options))
    try:
        check_all(root, shims)
        # no shim for nothing: when no file to rewrite can be written, nothing is
        unwritable = why_none_writable(root, [r for r, _ in to_write]) if to_write and shims else None
        if unwritable is not None:
            return kept, [*unwritable, shim_not_written(len(to_write))], warnings, [], []
        # the shim first: a rewritten file never lands without the module it imports
        shim_notes = inject_all(root, shims)
    except ShimConflict as exc:
        return kept, [str(exc)], warnings, [], []
    except ShimWriteError as exc:
        return kept, [f"{exc}; no file was rewritten"], warnings, [], []
    written = set()
    for r, _ in to_write:
        try:
            write_atomic(root / r.relpath, r.new, expected=r.original)
            written.add(r.relpath)
        except (WriteError, OSError) as exc:
            errors.append(f"{r.relpath}: not written: {exc}")
    out = []
    for r, findings in kept:
        if r.relpath in written:
            findings = [f for f in findings if not f.fixable]
            r = dataclasses.replace(r, original=r.new, new=None)  # the file now holds the new text
        out.append((r, findings))
    return out, errors, warnings, sorted(written), shim_notes


def missing_shims(results, options, root: Path) -> list:
    """NPU003: a file imports a shim that is not in the repository (missing, incomplete, or not
    committed to git), so that a fresh clone or a wheel built from one cannot import it."""
    from . import gitdiff
    from .inject import TEMPLATE_FILES
    from .model import tool_finding
    from .run import needed_shims

    if "NPU003" not in options.enabled:
        return []
    # what the files hold now (a rewrite `check` only proposes is not there yet)
    needed = needed_shims([dataclasses.replace(r, new=None) for r in results], options)
    tracked = gitdiff.tracked_files(root) if needed else None
    problems: dict[str, str] = {}
    for folder in needed:
        base = root / folder
        missing = [name for name in TEMPLATE_FILES if not (base / name).is_file()]
        if len(missing) == len(TEMPLATE_FILES):
            problems[folder] = f"{folder}/ does not exist; run npu-migrate to create it"
        elif missing:
            problems[folder] = (f"{folder}/ is incomplete ({', '.join(missing)} missing); "
                                "run npu-migrate to restore it")
        elif tracked is not None:
            untracked = [n for n in TEMPLATE_FILES if f"{folder}/{n}" not in tracked]
            if untracked:
                problems[folder] = (f"{folder}/ is not committed to git ({', '.join(untracked)}); "
                                    f"git add {folder}")
    findings = []
    for folder, problem in sorted(problems.items()):
        for rel in needed[folder]:
            findings.append((rel, tool_finding("NPU003", rel, problem, _import_line(results, rel, options))))
    return findings


def _import_line(results, rel: str, options) -> int:
    """The line of the file's shim import (1 when it cannot be told, such as in a notebook)."""
    from .run import file_kind

    name = re.escape(options.shim_name)
    for r in results:
        if r.relpath == rel and file_kind(rel) == "python":
            data = (r.new if r.changed else r.original) or b""
            text = data.decode("utf-8", "replace")
            m = re.search(rf"^[ \t]*(import|from)[ \t]+[^\n]*\b{name}\b", text, re.M)
            if m:
                return text.count("\n", 0, m.start()) + 1
    return 1


@click.command("check")
@click.argument("paths", nargs=-1, type=click.Path())
@click.option("--select", multiple=True, metavar="CODE",
              help="Only these codes or prefixes (NPU1, NPU201, ALL); replaces `select` of the config.")
@click.option("--extend-select", multiple=True, metavar="CODE", help="Add codes to the selection.")
@click.option("--ignore", multiple=True, metavar="CODE", help="Skip these codes or prefixes.")
@click.option("--exclude", multiple=True, metavar="GLOB",
              help="Skip files matching GLOB (path from the project root, or any path part).")
@click.option("--per-file-ignores", multiple=True, metavar="GLOB:CODES",
              help="Ignore codes in matching files, e.g. 'tests/*:NPU2,NPU990'; repeatable.")
@click.option("--shim-name", default=None, help="Name of the shim package (default npu_compat).")
@click.option("--config", "config_file", type=click.Path(), default=None,
              help="Read [tool.npu-migrate] from this pyproject.toml instead of searching for one.")
@click.option("--isolated", is_flag=True, help="Ignore every configuration file.")
@click.option("--baseline", type=click.Path(), default=None,
              help="Accept the findings recorded in this baseline file.")
@click.option("--write-baseline", type=click.Path(), default=None, metavar="FILE",
              help="Record the current findings in FILE (created or refreshed) and exit 0.")
@click.option("--fail-on-stale", is_flag=True, help="Exit 1 when the baseline has stale entries.")
@click.option("--diff-base", metavar="REF", default=None,
              help="Only findings on lines added or changed since merge-base(REF, HEAD).")
@click.option("--output-format", type=click.Choice(FORMATS), default="text", show_default=True)
@click.option("-o", "--output-file", type=click.Path(dir_okay=False), default=None, metavar="FILE",
              help="Write what would go to stdout (the findings in the output format) to FILE instead.")
@click.option("--statistics", is_flag=True, help="Counts per code instead of the findings.")
@click.option("--exit-zero", is_flag=True, help="Exit 0 even when there are new findings.")
@click.option("--fix", is_flag=True,
              help="Rewrite what can be rewritten (as `npu-migrate` does, rooted at the project root).")
@click.option("--no-shim", is_flag=True, help="With --fix: do not inject the shim.")
@click.option("-j", "--jobs", type=click.IntRange(min=1), default=None, help="Worker processes.")
@click.option("-q", "--quiet", is_flag=True,
              help="Print only the summary: no finding lines (text format; as in `npu-migrate PATH`).")
@click.option("--no-color", is_flag=True, help="Plain text even on a terminal.")
@click.option("--cache-dir", type=click.Path(file_okay=False), default=None, metavar="DIR",
              help="Where results are cached, keyed by file content, options and tool version "
                   "(default: $NPU_MIGRATE_CACHE_DIR, else ~/.cache/npu-migrate).")
@click.option("--no-cache", is_flag=True, help="Neither read nor write the result cache.")
@click.option("--show-skipped", is_flag=True,
              help="List (on stderr) every file and platform-aware scope left as its authors wrote it, "
                   "and every scope an NPU host never runs, runs as written or needs no port work for.")
def check_command(quiet, **params):
    """Report CUDA-only code under PATHS (default: .) without changing it; exit 1 on new findings.

    Each finding says what `npu-migrate` would do; `[*]` marks those it can rewrite (with
    `npu-migrate PATH` or `check --fix`). `npu-migrate rule CODE` explains a code."""
    from .render import skipped_line, skipped_summary
    from .runplan import CheckRun

    run = CheckRun(**params)
    output_format, output_file = run.output_format, run.output_file
    if run.statistics and output_format not in ("text", "json"):
        click.echo("error: --statistics works with --output-format text or json", err=True)
        sys.exit(2)
    try:
        report, extra = run_check(run)
    except CheckError as exc:
        click.echo(f"error: {exc}", err=True)
        sys.exit(2)
    for warning in report.warnings:
        click.echo(f"warning: {warning}", err=True)
    for rel in extra.get("written", ()):
        click.echo(f"rewrote {_display((extra['root'] / rel).absolute(), Path.cwd().absolute())}", err=True)
    if extra.get("shim"):
        click.echo(extra["shim"], err=True)
    for line in extra.get("created_shims", ()):
        folder = line.split(" shim ", 1)[1].split("/ ", 1)[0]
        click.echo(f"the shim {folder}/ was {line.split(' ', 1)[0]}: add it to git with the rewritten "
                   f"files (git add {folder}), or a fresh clone cannot import them", err=True)
    if extra.get("skipped"):
        if run.show_skipped:
            for entry in extra["skipped"]:
                click.echo(f"skipped {skipped_line(entry)}", err=True)
        click.echo(skipped_summary(extra["skipped"], run.show_skipped), err=True)
    if "baseline_written" in extra:
        target, total, keys = extra["baseline_written"]
        click.echo(f"wrote {target}: {total} findings in {keys} entries", err=True)
        sys.exit(0)
    color = output_file is None and output_format == "text" and sys.stdout.isatty() and not run.no_color \
        and "NO_COLOR" not in os.environ
    report.skipped = extra.get("skipped", [])
    text = render(output_format, report, statistics=run.statistics, color=color, quiet=quiet,
                  fail_on_stale=run.fail_on_stale)
    if output_file:
        try:
            Path(output_file).write_text(text, encoding="utf-8")
        except OSError as exc:
            click.echo(f"error: {output_file}: {exc}", err=True)
            sys.exit(2)
        if output_format != "text":  # still tell a human in the log what happened
            from .formats import summary_lines

            click.echo("\n".join(summary_lines(report)), err=True)
    else:
        click.echo(text, nl=False, color=color)
        if output_format in ("github",) and report.items:
            from .formats import summary_lines

            click.echo("\n".join(summary_lines(report)), err=True)
    # Info findings are review notes (a CUDA reference inside a platform-aware scope): listed, but
    # they never fail the check.
    failing = [item for item in report.items if item.finding.severity != "info"]
    failed = bool(failing) or (run.fail_on_stale and bool(report.stale))
    sys.exit(1 if failed and not run.exit_zero else 0)
