"""The command line: `npu-migrate PATH...` (migrate), `npu-migrate rules`.

Exit codes (like ruff): 0 nothing left to report, 1 findings remain, 2 the tool failed.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import NoReturn

import click
from rich.console import Console

from . import __version__, dirty
from .cache import open_for as open_cache
from .check import check_command
from .config import ConfigError, parse_per_file_ignores, resolve as resolve_config
from .discover import DiscoveryError, excluded
from .doctor import doctor_command
from .inject import ShimConflict, ShimWriteError, check_all as check_shims, inject_all, split_folder
from .model import FileResult
from .outtree import Interrupted, OutputError, check_target, write_copy
from .render import RunSummary, json_report, print_diffs, print_findings, print_skipped, print_summary, \
    rules_text
from .run import needed_shims
from .runplan import MigrateRun, collect, common_folder, make_options, resolve_root, run_engine, selection, \
    shim_name_problem, split_codes
from .source import InterruptGuard, WriteError, write_atomic

class DefaultGroup(click.Group):
    """A group whose first argument, when it is not a subcommand, goes to `migrate`."""

    def parse_args(self, ctx, args):
        if args and args[0] not in self.commands and args[0] not in ("--help", "-h", "--version"):
            args = ["migrate", *args]
        elif not args:
            args = ["--help"]
        return super().parse_args(ctx, args)


@click.group(cls=DefaultGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="npu-migrate")
def main() -> None:
    """Migrate a PyTorch code base from CUDA to Ascend NPUs (torch_npu) as a reviewable change.

    \b
      npu-migrate ./repo --dry-run   show the diff and every finding; write nothing
      npu-migrate ./repo             write the change and inject the npu_compat shim
      npu-migrate ./repo --report migration.md    also write the migration report
      npu-migrate check .            CI / pre-commit: report new CUDA-only code
      npu-migrate doctor             can this machine run the migrated code?
      npu-migrate rules              list every rule code
    """


def _progress_runner(console: Console, show: bool, total: int):
    if not show:
        return None, None
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    progress = Progress(
        TextColumn("[bold]migrating"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
        console=console, transient=True,
    )
    task = progress.add_task("files", total=total)
    return progress, (lambda _result: progress.advance(task))


@main.command("migrate")
@click.argument("paths", nargs=-1, required=True, type=click.Path())
@click.option("--dry-run", is_flag=True, help="Show the diff and findings; write nothing.")
@click.option("--diff", "show_diff", is_flag=True, help="Print the diff also when writing.")
@click.option("-j", "--jobs", type=click.IntRange(min=1), default=None,
              help="Worker processes (default: the number of CPUs).")
@click.option("--exclude", multiple=True, metavar="GLOB",
              help="Skip files or folders matching GLOB (relative path or any path part); repeatable.")
@click.option("--shim-name", default=None,
              help="Name of the runtime shim package injected into the project (default: "
                   "`shim-name` of [tool.npu-migrate], else npu_compat).")
@click.option("--no-shim", is_flag=True, help="Do not inject the shim (you provide the module yourself).")
@click.option("--select", multiple=True, metavar="CODE",
              help="Only these rule codes or prefixes (NPU1, NPU201, ALL); repeatable or comma-separated. "
                   "Replaces `select` of the configuration.")
@click.option("--extend-select", multiple=True, metavar="CODE", help="Add codes to the selection.")
@click.option("--ignore", multiple=True, metavar="CODE",
              help="Skip these rule codes or prefixes; repeatable or comma-separated.")
@click.option("--per-file-ignores", multiple=True, metavar="GLOB:CODES",
              help="Ignore codes in matching files, e.g. 'tests/*:NPU2,NPU990'; repeatable.")
@click.option("--config", "config_file", type=click.Path(), default=None,
              help="Read [tool.npu-migrate] from this pyproject.toml instead of searching for one.")
@click.option("--isolated", is_flag=True, help="Ignore every configuration file.")
@click.option("--output-format", type=click.Choice(["text", "json"]), default="text", show_default=True)
@click.option("--no-color", is_flag=True, help="Plain text even on a terminal.")
@click.option("-q", "--quiet", is_flag=True, help="Only the summary (text format).")
@click.option("--allow-dirty", is_flag=True,
              help="Write in place even when the git work tree has uncommitted changes. Without it, "
                   "a writing run stops (exit 2) when a tracked file under the root has staged or "
                   "unstaged changes, or when it would rewrite an untracked file (git could not "
                   "restore it), so that the migration is a diff of its own. Untracked files the "
                   "run leaves alone do not count. No check outside git.")
@click.option("--output", "output_dir", type=click.Path(), default=None, metavar="DIR",
              help="Write a migrated copy of the project to DIR (every file but .git, virtual "
                   "environments and caches; the shim included) and never touch the source. DIR "
                   "must be new or empty and outside the source tree; an earlier copy is not "
                   "refreshed (remove it first).")
@click.option("--cache-dir", type=click.Path(file_okay=False), default=None, metavar="DIR",
              help="Where results are cached, keyed by file content, options and tool version "
                   "(default: $NPU_MIGRATE_CACHE_DIR, else ~/.cache/npu-migrate).")
@click.option("--no-cache", is_flag=True, help="Neither read nor write the result cache.")
@click.option("--show-skipped", is_flag=True,
              help="List every file and platform-aware scope left as its authors wrote it (code that "
                   "imports torch_npu, or a branch, expression, dict or class family that already "
                   "handles the NPU next to CUDA). The JSON output always lists them.")
@click.option("--rewrite-scripts", is_flag=True,
              help="Also rewrite shell launch scripts so they work on both kinds of host (set "
                   "ASCEND_RT_VISIBLE_DEVICES next to CUDA_VISIBLE_DEVICES, npu-smi where nvidia-smi "
                   "ran). Without it, scripts, configs and Dockerfiles are only reported.")
@click.option("--report", "report_file", type=click.Path(dir_okay=False), default=None, metavar="FILE",
              help="Write the migration report: Markdown, or HTML when FILE ends in .html.")
@click.option("--report-csv", "report_csv", type=click.Path(file_okay=False), default=None, metavar="DIR",
              help="Write change_list.csv and unsupported_api.csv (the layout of Huawei's migration "
                   "tool) into DIR.")
@click.option("--emit-requirements", is_flag=True,
              help="Write requirements-npu.txt at the root: the torch_npu release matching the "
                   "repository's torch pin (never over a file npu-migrate did not write).")
def migrate_command(**params):
    """Rewrite CUDA-only code under PATHS (folders, .py files or notebooks) for Ascend NPUs.

    Shell scripts, YAML/TOML configs, Dockerfiles, .env files and .cu sources under PATHS are
    scanned too: reported, and with --rewrite-scripts shell scripts are rewritten.

    [tool.npu-migrate] in pyproject.toml (select, ignore, exclude, per-file-ignores, shim-name)
    applies as it does for `npu-migrate check`."""
    run = MigrateRun(**params)
    err = Console(stderr=True, no_color=run.no_color, highlight=False, soft_wrap=True,
                  force_terminal=False if run.no_color else None)
    state = _WriteState()
    try:
        _migrate(err, state, run)
    except KeyboardInterrupt:  # outside the guarded write phase: between files, never inside one
        _interrupted(err, state)


@dataclass
class _WriteState:
    """How far the writing got, for the message of an interrupted run."""

    started: bool = False  # the write phase began
    total: int = 0
    written: int = 0
    interrupted: bool = False
    target: Path | None = None  # --output DIR


def _fail(err: Console, message: str) -> NoReturn:
    err.print(f"error: {message}", markup=False)
    sys.exit(2)


def _interrupted(err: Console, state: _WriteState) -> NoReturn:
    if state.target is not None:
        message = f"interrupted: nothing written; {state.target} was not created"
    elif not state.started:
        message = "interrupted: no file was written (the run had not started writing)"
    else:
        message = (
            f"interrupted: {state.written} of {state.total} files written; every file is either "
            "unchanged or fully migrated. Run the same command again to finish "
            "(migrated files are not changed twice)."
        )
    err.print(message, markup=False)
    sys.exit(130)


@dataclass(frozen=True)
class _Outputs:
    """Files a run writes besides the migrated code: the report, the CSVs, requirements-npu.txt."""

    report: str | None = None
    csv_dir: str | None = None
    requirements: bool = False


def _write_outputs(err: Console, outputs: _Outputs, summary: RunSummary, root: Path,
                   target: Path | None) -> list[str]:
    """Write what --report, --report-csv and --emit-requirements ask for; the lines to print.
    They are written in a dry run too (they describe the run; the code is still untouched).
    requirements-npu.txt goes to the migrated copy with --output, else to the root."""
    from .report import RequirementsConflict, suggest_requirements, write_csv, write_report, write_requirements

    lines: list[str] = []
    advice = suggest_requirements(root) if root.is_dir() else None
    try:
        if outputs.report:
            write_report(summary, Path(outputs.report), advice)
            lines.append(f"report written to {outputs.report}")
        if outputs.csv_dir:
            for path in write_csv(summary, Path(outputs.csv_dir)):
                lines.append(f"CSV written to {path}")
        if outputs.requirements and advice is not None:
            if summary.dry_run:
                lines.append("requirements-npu.txt not written (dry run); it would pin: "
                             + ", ".join(advice.requirement_lines()))
            else:
                path = write_requirements(target or root, advice)
                lines.append(f"requirements written to {path}: " + ", ".join(advice.requirement_lines()))
    except (RequirementsConflict, WriteError) as exc:
        _fail(err, str(exc))
    except OSError as exc:
        _fail(err, f"cannot write {exc.filename or 'an output file'}: {exc.strerror or exc}")
    return lines


def _check_outputs(err: Console, outputs: _Outputs, root: Path, target: Path | None, dry_run: bool) -> None:
    """Refuse (exit 2) before anything is written when an output cannot be: --report in a folder
    that does not exist (no folder is created for it), --report-csv under one, or any of them,
    requirements-npu.txt included, onto something that is not a regular file (a FIFO would hang)."""
    from .report import REQUIREMENTS_NAME, csv_problem
    from .source import output_problem

    problems = []
    if outputs.report:
        problems.append(output_problem(Path(outputs.report)))
    if outputs.csv_dir:
        problems.append(csv_problem(Path(outputs.csv_dir)))
    if outputs.requirements and not dry_run and target is None and root.is_dir():
        problems.append(output_problem(root / REQUIREMENTS_NAME))
    for problem in problems:
        if problem:
            _fail(err, problem)


def _migrate(err, state: _WriteState, run: MigrateRun) -> NoReturn:
    paths = run.paths
    notes: list[str] = []
    try:
        common = common_folder(paths)
        cfg = resolve_config(common, run.config_file, run.isolated)
        enabled = selection(cfg, run.select, run.ignore, run.extend_select)
        pfi = cfg.per_file_ignores
        if run.per_file_ignores:
            pfi = parse_per_file_ignores(run.per_file_ignores, "--per-file-ignores")
    except (ConfigError, ValueError) as exc:
        _fail(err, str(exc))
    except DiscoveryError as exc:
        _fail(err, str(exc))
    shim_name = run.shim_name if run.shim_name is not None else (cfg.shim_name or "npu_compat")
    problem = shim_name_problem(shim_name)
    if problem:
        _fail(err, f"--shim-name {shim_name!r} {problem}")
    excludes = split_codes(run.exclude) or cfg.exclude
    root = resolve_root(common, cfg.root, paths)
    try:
        _common, items, skipped_links = collect(paths, excludes, shim_name, notes, root=root)
    except DiscoveryError as exc:
        _fail(err, str(exc))
    items = [(p, r) for p, r in items if not excluded(r, excludes + (shim_name,))]
    for link in skipped_links:
        err.print(f"warning: {link} is a symbolic link; skipped (name its target instead)", markup=False)
    for note in dict.fromkeys([*cfg.warnings, *notes]):
        err.print(f"warning: {note}", markup=False)
    if not items and notes and not any(Path(p).is_dir() for p in paths):
        _fail(err, "nothing to migrate: no named path is a Python file")
    dry_run = run.dry_run
    target = None
    if run.output_dir is not None:
        try:
            target = check_target(Path(run.output_dir), root)
        except OutputError as exc:
            _fail(err, str(exc))
    _check_outputs(err, _Outputs(run.report_file, run.report_csv, run.emit_requirements), root, target, dry_run)
    tree = None
    if not dry_run and target is None and not run.allow_dirty:
        tree = dirty.status(root)
        refusal = tree and dirty.refusal_for_changes(tree, root)
        if refusal:
            _fail(err, refusal)

    output_format = run.output_format
    color = sys.stdout.isatty() and not run.no_color and output_format == "text"
    console = Console(no_color=not color, highlight=False, soft_wrap=True, force_terminal=color)
    options = make_options(root, items, enabled, shim_name, run.rewrite_scripts)
    progress, advance = _progress_runner(err, color and len(items) > 200, len(items))
    jobs = run.jobs or os.cpu_count() or 1
    cache = open_cache(root, run.cache_dir, run.no_cache)
    if progress:
        with progress:
            results = run_engine(items, options, pfi, jobs=jobs, progress=advance, cache=cache)
    else:
        results = run_engine(items, options, pfi, jobs=jobs, cache=cache)
    if cache is not None:
        cache.save(root)

    summary = RunSummary(root=str(root), dry_run=dry_run, results=results)
    # A shim is needed (created, refreshed or re-created) where any file imports it after the run,
    # whether this run or an earlier one rewrote it.
    shims = [] if run.no_shim else sorted(needed_shims(results, options))
    try:
        check_shims(root, shims)
    except ShimConflict as exc:
        summary.errors.append(str(exc))
    if shims and not summary.errors:
        packaging_results(summary, root, shims, shim_name, err)
    if tree is not None and not summary.errors:
        refusal = dirty.refusal_for_untracked(tree, root, (root / r.relpath for r in summary.changed))
        if refusal:
            _fail(err, refusal)
    copy = None
    if not dry_run and not summary.errors:
        if target is not None:
            state.target = target
            with InterruptGuard() as guard:
                try:
                    copy = write_copy(root, target, summary.results + summary.packaging, shims, guard)
                except Interrupted:
                    _interrupted(err, state)
                except OSError as exc:
                    _fail(err, f"--output {run.output_dir}: cannot write the copy: {exc}")
            state.target = None
            summary.shim = copy.shim
            summary.errors.extend(copy.errors)
        else:
            _write(summary, shims, state)
            if state.interrupted:
                _interrupted(err, state)
    elif dry_run and shims and not summary.errors:
        summary.shim = "; ".join(inject_all(root, shims, dry_run=True))

    outputs = _Outputs(run.report_file, run.report_csv, run.emit_requirements)
    written = _write_outputs(err, outputs, summary, root, target if copy is not None else None)
    if output_format == "json":
        click.echo(json_report(summary))
        for line in written:
            err.print(line, markup=False, highlight=False)
    else:
        if (dry_run or run.show_diff) and not run.quiet:
            print_diffs(console, summary.changed, color)
        if not run.quiet:
            print_findings(console, summary)
        print_summary(console, summary)
        print_skipped(console, summary, run.show_skipped)
        if copy is not None:
            console.print(f"migrated copy written to {target} ({copy.files} files, "
                          f"{copy.migrated} migrated); {root} was not changed", highlight=False)
        for line in written:
            console.print(line, markup=False, highlight=False)
    sys.exit(summary.exit_code())


def packaging_results(summary: RunSummary, root: Path, shims: list[str], shim_name: str, err) -> None:
    """Packaging files that must list the new shim subpackages for the wheel to ship them: their
    change joins the run's results (shown in the diff, written with the rest)."""
    from .layout import packaging_edits, read_layout

    homes = [split_folder(f)[0] for f in shims if split_folder(f)[0]]
    if not homes:
        return
    layout = read_layout(root)
    edits, problems = packaging_edits(layout, homes, shim_name)
    for problem in problems:
        summary.warnings.append(problem)
    by_path = {r.relpath: r for r in summary.results}
    for rel, (old, new) in sorted(edits.items()):
        result = by_path.get(rel)
        if result is not None and result.changed:  # a setup.py the rules rewrote too
            summary.warnings.append(f"{rel}: also needs the shim listed among its packages; "
                                    f"run npu-migrate again to add it")
        else:
            summary.packaging.append(FileResult(relpath=rel, original=old, new=new))


def _write(summary: RunSummary, shims: list[str], state: _WriteState) -> None:
    """Write the shim, then every changed file, each atomically. The shim goes first: a migrated
    file never lands without the module it imports (if the shim cannot be written, no file is).
    SIGINT stops the run between two files (state.interrupted), never inside one. When files are
    to be rewritten and none of them can be (read-only, changed on disk), no shim is written."""
    from .inject import shim_not_written, why_none_writable

    root = Path(summary.root)
    todo = summary.changed
    state.total = len(todo)
    state.started = True
    unwritable = why_none_writable(root, todo) if todo and shims else None
    if unwritable is not None:
        summary.errors.extend(unwritable)
        summary.errors.append(shim_not_written(len(todo)))
        return
    with InterruptGuard() as guard:
        try:
            try:
                summary.shim = "; ".join(inject_all(root, shims))
            except ShimWriteError as exc:
                summary.errors.append(f"{exc}; no file was rewritten, as they would import it")
                return
            for result in todo:
                if guard.requested:
                    state.interrupted = True
                    break
                try:
                    write_atomic(root / result.relpath, result.new, expected=result.original)
                except (WriteError, OSError) as exc:
                    summary.errors.append(f"{result.relpath}: not written: {exc}")
                    continue
                state.written += 1
        except KeyboardInterrupt:  # a second Ctrl-C: the file being written is old or new
            state.interrupted = True


@main.command("rules")
@click.option("--format", "fmt", type=click.Choice(["text", "markdown", "json"]), default="text",
              show_default=True)
def rules_command(fmt):
    """List every rule: code, whether it rewrites or only reports, and its summary."""
    click.echo(rules_text(fmt), nl=False)


main.add_command(check_command)
main.add_command(doctor_command)


def run() -> NoReturn:
    """The console entry point (`npu-migrate`, `python -m npu_migrate`): `main`, with a Ctrl-C
    that no command handles itself ending in one line, `interrupted`, and exit 130, never a
    traceback nor click's "Aborted!" with exit 1 (which `check` uses for findings). After the
    command, a Ctrl-C during shutdown (atexit handlers, worker pools) ends the process quietly."""
    try:
        try:
            code = main(standalone_mode=False)
        except click.exceptions.Abort:  # click's form of a Ctrl-C inside a command
            raise KeyboardInterrupt from None
        except click.ClickException as exc:  # usage errors: as click shows them, exit 2
            exc.show()
            code = exc.exit_code
    except KeyboardInterrupt:
        _quiet_exit_on_sigint()
        sys.stderr.write("interrupted\n")
        code = 130
    except SystemExit as exc:
        code = exc.code
    _quiet_exit_on_sigint()
    sys.exit(code)


def _quiet_exit_on_sigint() -> None:
    """From here on, Ctrl-C ends the process at once with 130 (output flushed first)."""
    import signal
    import threading

    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError, AttributeError):
            pass
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGINT, lambda *_: os._exit(130))


if __name__ == "__main__":  # pragma: no cover
    run()
