"""`npu-migrate check [PATHS...]`: flag CUDA-only code, for CI and pre-commit.

It runs the very engine `migrate` runs (`engine.run_files`, nothing written) and reports every
finding, rewritable and report-only, so `check` and `npu-migrate --dry-run` find the same set.
On top of that it keeps to *new* code: `--baseline` accepts recorded findings, `--diff-base`
keeps findings on lines changed since a git revision; suppression comments, per-file ignores
and `[tool.npu-migrate]` in pyproject.toml shape what is checked.

Exit codes (like ruff): 0 no new findings, 1 new findings (or stale baseline entries with
`--fail-on-stale`), 2 the tool failed. `--exit-zero` turns 1 into 0.
"""

from __future__ import annotations

import os
import re
import sys
from collections import Counter, defaultdict
from pathlib import Path
from typing import Optional

import click

from . import baseline as baseline_mod
from . import catalogue, gitdiff, suppress
from .config import Config, ConfigError, check_codes, parse_per_file_ignores, resolve
from .discover import DiscoveryError, _excluded
from .cache import open_for as open_cache
from .engine import FileResult, Options, file_kind, imports_shim, npu_aware_dirs, package_dirs, run_files
from .formats import FORMATS, Item, Report, render


class CheckError(Exception):
    """The run cannot go on (exit 2)."""


def _split(values) -> tuple[str, ...]:
    return tuple(v.strip() for value in values for v in value.split(",") if v.strip())


def _common_folder(paths: list[Path]) -> Path:
    bases = [p if p.is_dir() else p.parent for p in paths]
    return Path(os.path.commonpath([str(b) for b in bases]))


def _display(path: Path, cwd: Path) -> str:
    try:
        return path.relative_to(cwd).as_posix()
    except ValueError:
        return path.as_posix()


def _matches(rel: str, pattern: str) -> bool:
    return _excluded(rel, (pattern,))


def _project_root(cfg: Config, common: Path) -> Path:
    """Where relative paths of the configuration start, and the migration root of --fix."""
    if cfg.root is not None:
        return cfg.root
    top = gitdiff.toplevel(common)
    return top if top is not None else common


def selection(cfg: Config, select, ignore, extend_select) -> frozenset[str]:
    """Command-line options replace the config keys of the same name; ignore wins over select."""
    select = _split(select) or cfg.select
    extend = _split(extend_select) or cfg.extend_select
    ignored = _split(ignore) or cfg.ignore
    where = "command line"
    for values in (select or (), extend, ignored):
        check_codes(tuple(values), where)
    chosen = catalogue.expand_selection(select) if select else set(catalogue.rules())
    chosen |= catalogue.expand_selection(extend)
    return frozenset(chosen - catalogue.expand_selection(ignored))


def run_check(
    paths: tuple[str, ...] = (".",),
    *,
    select=(), ignore=(), extend_select=(), exclude=(), per_file_ignores=(),
    shim_name: Optional[str] = None,
    config_file: Optional[str] = None,
    isolated: bool = False,
    baseline: Optional[str] = None,
    write_baseline: Optional[str] = None,
    diff_base: Optional[str] = None,
    fix: bool = False,
    no_shim: bool = False,
    jobs: int = 1,
    cwd: Optional[Path] = None,
    cache_dir: Optional[str] = None,
    no_cache: bool = False,
) -> tuple[Report, dict]:
    """Everything `check` does but printing. Raises CheckError for exit-2 problems."""
    from .cli import _collect, _shim_name_problem  # lazy: cli imports this module

    cwd = (cwd or Path.cwd()).absolute()
    paths = paths or (".",)
    resolved = [(cwd / p).absolute() if not Path(p).is_absolute() else Path(p) for p in paths]
    for p in resolved:
        if not p.exists() and not p.is_symlink():
            raise CheckError(f"{p}: no such file or directory")
    common = _common_folder(resolved)
    try:
        cfg = resolve(common, config_file, isolated)
        enabled = selection(cfg, select, ignore, extend_select)
        pfi = cfg.per_file_ignores
        if per_file_ignores:
            pfi = parse_per_file_ignores(per_file_ignores, "--per-file-ignores")
    except ConfigError as exc:
        raise CheckError(str(exc)) from None
    excludes = tuple(_split(exclude)) or cfg.exclude
    shim = shim_name or cfg.shim_name or "npu_compat"
    problem = _shim_name_problem(shim)
    if problem:
        raise CheckError(f"shim name {shim!r} {problem}")
    root = _project_root(cfg, common)

    try:
        _root, collected, links = _collect(tuple(str(p) for p in resolved), excludes, shim)
    except DiscoveryError as exc:
        raise CheckError(str(exc)) from None
    warnings = [f"{link} is a symbolic link; skipped (name its target instead)" for link in links]
    items: list[tuple[str, str]] = []
    for path, rel_common in collected:
        full = Path(path)
        try:
            rel = full.relative_to(root).as_posix()
        except ValueError:  # outside the project root: keep migrate's root
            root = _root
            items = [(p, Path(p).relative_to(root).as_posix()) for p, _ in collected]
            break
        items.append((path, rel))
    # Also for files named explicitly (pre-commit passes them): the shim is never checked.
    items = [(p, r) for p, r in items if not _excluded(r, excludes + (shim,))]

    # Per-file ignores: the engine runs each group of files with its own selection, exactly as
    # `migrate --ignore` would (so an ignored rule's constructs stay claimed, not swept).
    groups: dict[frozenset, list[tuple[str, str]]] = defaultdict(list)
    for path, rel in items:
        ignored: set[str] = set()
        for glob, codes in pfi:
            if _matches(rel, glob):
                ignored |= catalogue.expand_selection(codes)
        groups[frozenset(enabled - ignored)].append((path, rel))
    aware = npu_aware_dirs(items)
    packages = package_dirs(root, items)
    results: list[FileResult] = []
    cache = open_cache(root, cache_dir, no_cache)
    for group_enabled, group_items in groups.items():
        options = Options(enabled=group_enabled, shim_name=shim, npu_aware_dirs=aware, package_dirs=packages)
        try:
            results.extend(run_files(group_items, options, jobs=jobs, cache=cache))
        except Exception as exc:  # the engine promises not to raise; if it does, the tool failed
            raise CheckError(f"internal error: {type(exc).__name__}: {exc}") from exc
    if cache is not None:
        cache.save(root)
    results.sort(key=lambda r: r.relpath)

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

    extra: dict = {"root": root, "written": [], "shim": ""}
    if fix:
        kept, fix_errors, fix_notes, written, extra["shim"] = _apply_fix(kept, root, shim, no_shim, blocked_fix)
        if fix_errors:
            raise CheckError("; ".join(fix_errors))
        warnings.extend(fix_notes)
        extra["written"] = written

    # Everything below works on (absolute path, finding) pairs, in file order.
    rows = []
    file_lines: dict = {}  # notebook finding -> the line of the .ipynb text that holds it
    for result, findings in kept:
        full = (root / result.relpath).absolute()
        for f in sorted(findings):
            rows.append((full, f))
            if f.cell is not None:
                file_lines[f] = _notebook_line(result, f)

    report = Report(items=[], files_checked=len(results), suppressed=suppressed, warnings=warnings,
                    enabled=enabled, cwd=cwd, diff_base=diff_base)
    checked_files = [(root / r.relpath).absolute() for r in results]

    if write_baseline:
        target = Path(write_baseline)
        target = target if target.is_absolute() else cwd / target
        counts = Counter((baseline_mod.path_key(target, full), f.code, f.source) for full, f in rows)
        old = Counter()
        if target.exists():
            try:
                old = baseline_mod.load(target)
            except baseline_mod.BaselineError as exc:
                raise CheckError(str(exc)) from None
        checked = {baseline_mod.path_key(target, p) for p in checked_files}
        merged = baseline_mod.merge(old, counts, checked, target)
        try:
            baseline_mod.write(target, merged)
        except OSError as exc:
            raise CheckError(f"{target}: cannot write baseline: {exc}") from None
        extra["baseline_written"] = (target, sum(merged.values()), len(merged))
        return report, extra

    # Baseline.
    base_file = None
    if baseline:
        base_file = Path(baseline) if Path(baseline).is_absolute() else cwd / baseline
    elif cfg.baseline is not None:
        base_file = cfg.baseline
    if base_file is not None:
        try:
            counts = baseline_mod.load(base_file)
        except baseline_mod.BaselineError as exc:
            raise CheckError(str(exc)) from None
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

    occurrences: Counter = Counter()
    out = []
    for full, f in rows:
        shown = _display(full, cwd)
        key = (shown, f.code, f.source)
        occurrences[key] += 1
        out.append(Item(f, shown, occurrences[key], file_line=file_lines.get(f)))
    report.items = sorted(out, key=lambda i: (i.path, i.finding))
    return report, extra


def _notebook_line(result: FileResult, finding) -> int | None:
    """The line of the notebook's JSON text holding a cell's finding (for github, sarif, gitlab
    and --diff-base, which point into the file itself)."""
    from .notebook import NotebookError, file_line

    try:
        return file_line((result.original or b"").decode("utf-8"), finding.cell, finding.line)
    except (NotebookError, UnicodeDecodeError, ValueError):
        return None


def _apply_fix(kept, root: Path, shim: str, no_shim: bool, blocked: set[str]):
    """Write the rewrites (like `migrate`), with `root` as the migration root; inject the shim."""
    from .inject import ShimConflict, check as check_shim, inject
    from .source import WriteError, write_atomic

    errors: list[str] = []
    warnings: list[str] = []
    to_write = [(r, fs) for r, fs in kept if r.changed and r.relpath not in blocked]
    for r, _ in kept:
        if r.changed and r.relpath in blocked:
            warnings.append(f"{r.relpath}: not rewritten: it has suppression comments on rewritable code")
    needs_shim = not no_shim and any(imports_shim(r, shim) for r, _ in to_write)
    if needs_shim:
        try:
            check_shim(root, shim)
        except ShimConflict as exc:
            return kept, [str(exc)], warnings, [], ""
    written = set()
    for r, _ in to_write:
        try:
            write_atomic(root / r.relpath, r.new, expected=r.original)
            written.add(r.relpath)
        except (WriteError, OSError) as exc:
            errors.append(f"{r.relpath}: not written: {exc}")
    shim_note = ""
    if needs_shim and not errors:
        shim_note = inject(root, shim)
    out = []
    for r, findings in kept:
        if r.relpath in written:
            findings = [f for f in findings if not f.fixable]
        out.append((r, findings))
    return out, errors, warnings, sorted(written), shim_note


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
@click.option("-o", "--output-file", type=click.Path(), default=None, help="Write the report here.")
@click.option("--statistics", is_flag=True, help="Counts per code instead of the findings.")
@click.option("--exit-zero", is_flag=True, help="Exit 0 even when there are new findings.")
@click.option("--fix", is_flag=True,
              help="Rewrite what can be rewritten (as `npu-migrate` does, rooted at the project root).")
@click.option("--no-shim", is_flag=True, help="With --fix: do not inject the shim.")
@click.option("-j", "--jobs", type=click.IntRange(min=1), default=None, help="Worker processes.")
@click.option("--no-color", is_flag=True, help="Plain text even on a terminal.")
@click.option("--cache-dir", type=click.Path(file_okay=False), default=None, metavar="DIR",
              help="Where results are cached, keyed by file content, options and tool version "
                   "(default: $NPU_MIGRATE_CACHE_DIR, else ~/.cache/npu-migrate).")
@click.option("--no-cache", is_flag=True, help="Neither read nor write the result cache.")
def check_command(paths, select, extend_select, ignore, exclude, per_file_ignores, shim_name,
                  config_file, isolated, baseline, write_baseline, fail_on_stale, diff_base,
                  output_format, output_file, statistics, exit_zero, fix, no_shim, jobs, no_color,
                  cache_dir, no_cache):
    """Report CUDA-only code under PATHS (default: .) without changing it; exit 1 on new findings."""
    if statistics and output_format not in ("text", "json"):
        click.echo("error: --statistics works with --output-format text or json", err=True)
        sys.exit(2)
    try:
        report, extra = run_check(
            tuple(paths) or (".",), select=select, ignore=ignore, extend_select=extend_select,
            exclude=exclude, per_file_ignores=per_file_ignores, shim_name=shim_name,
            config_file=config_file, isolated=isolated, baseline=baseline,
            write_baseline=write_baseline, diff_base=diff_base, fix=fix, no_shim=no_shim,
            jobs=jobs or os.cpu_count() or 1, cache_dir=cache_dir, no_cache=no_cache,
        )
    except CheckError as exc:
        click.echo(f"error: {exc}", err=True)
        sys.exit(2)
    for warning in report.warnings:
        click.echo(f"warning: {warning}", err=True)
    for rel in extra.get("written", ()):
        click.echo(f"rewrote {_display((extra['root'] / rel).absolute(), Path.cwd().absolute())}", err=True)
    if extra.get("shim"):
        click.echo(extra["shim"], err=True)
    if "baseline_written" in extra:
        target, total, keys = extra["baseline_written"]
        click.echo(f"wrote {target}: {total} findings in {keys} entries", err=True)
        sys.exit(0)
    color = output_file is None and output_format == "text" and sys.stdout.isatty() and not no_color \
        and "NO_COLOR" not in os.environ
    text = render(output_format, report, statistics=statistics, color=color)
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
    failed = bool(report.items) or (fail_on_stale and bool(report.stale))
    sys.exit(1 if failed and not exit_zero else 0)
