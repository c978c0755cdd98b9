"""The command line: `npu-migrate PATH...` (migrate), `check`, `rule`, `rules`, `doctor`.

Exit codes (like ruff): 0 nothing left to report, 1 findings remain, 2 the tool failed.

Start-up is kept short (`--help` and a one-file `check` are run from editors, hooks and CI
many times): this module imports only click. Each command imports what it needs (libcst, rich,
the engine) when it runs, and `check` and `doctor` are defined in modules that are imported
only when they are the command asked for (`LAZY_COMMANDS`). The conventions every command
follows are in docs/cli.md.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, NoReturn

import click

from . import __version__

if TYPE_CHECKING:  # pragma: no cover
    from rich.console import Console

    from .render import RunSummary
    from .runplan import MigrateRun

# Subcommands defined in other modules, imported when used: name -> (module, attribute, the
# one-line help `npu-migrate --help` shows without importing them; a test keeps it equal to
# the command's own).
LAZY_COMMANDS = {
    "check": ("npu_migrate.check", "check_command",
              "Report CUDA-only code under PATHS (default: .) without changing it; exit 1 on new..."),
    "doctor": ("npu_migrate.doctor", "doctor_command",
               "Can this machine run the migrated code? Checks torch, torch_npu, CANN and the..."),
    "vnpu": ("npu_migrate.cli_vnpu", "vnpu_command", "Run CMD with a virtual Ascend NPU, on the CPU."),
    "verify": ("npu_migrate.cli_vnpu", "verify_command",
               "Compare CMD in the original (CPU) and migrated (virtual NPU) project."),
}
IMPLICIT = "migrate"  # the command a first argument that is no command's name goes to


class DefaultGroup(click.Group):
    """A group whose first argument, when it is not a subcommand, goes to `migrate`
    (`npu-migrate ./repo --dry-run` is `npu-migrate migrate ./repo --dry-run`).

    A subcommand's name always means the subcommand (as in ruff): a folder of that name is
    `./rules` (or `npu-migrate migrate rules`). When a subcommand is given arguments it does not
    take and a folder of that name exists, the error says so. Usage errors of the implicit
    `migrate` show `npu-migrate [OPTIONS] PATHS...`, the command the user typed."""

    def list_commands(self, ctx):
        return sorted({*self.commands, *LAZY_COMMANDS})

    def get_command(self, ctx, name):
        if name not in self.commands and name in LAZY_COMMANDS:
            import importlib

            module, attribute, _help = LAZY_COMMANDS[name]
            command = getattr(importlib.import_module(module), attribute)
            if not any(param.name == "version" for param in command.params):
                version_option(command)  # -V/--version on every command
            self.add_command(command, name)
        return self.commands.get(name)

    def format_commands(self, ctx, formatter):
        """The command list of `--help`, without importing the lazy commands."""
        rows = []
        limit = formatter.width - 6 - max(len(name) for name in self.list_commands(ctx))
        for name in self.list_commands(ctx):
            command = self.commands.get(name)
            if command is not None:
                if command.hidden:
                    continue
                rows.append((name, command.get_short_help_str(limit)))
            else:
                rows.append((name, LAZY_COMMANDS[name][2]))
        if rows:
            with formatter.section("Commands"):
                formatter.write_dl(rows)

    def parse_args(self, ctx, args):
        if not args:
            args = ["--help"]
        elif args[0] not in self.list_commands(ctx) and args[0] not in ("--help", "-h", "--version", "-V"):
            ctx.meta["npu_migrate.implicit"] = True
            args = [IMPLICIT, *args]
        return super().parse_args(ctx, args)

    def resolve_command(self, ctx, args):
        name, command, rest = super().resolve_command(ctx, args)
        if ctx.meta.get("npu_migrate.implicit") and command is not None:
            command = _Implicit(command)
        return name, command, rest

    def invoke(self, ctx):
        try:
            return super().invoke(ctx)
        except click.UsageError as exc:
            _folder_hint(exc, ctx)
            raise


class _ImplicitContext(click.Context):
    """The context of `migrate` reached without its name: its usage line reads as the user
    typed the command (`npu-migrate [OPTIONS] PATHS...`); the hint names `migrate --help`."""

    def get_usage(self) -> str:
        usage = super().get_usage()
        return usage.replace(f"{self.command_path} ", f"{self.parent.command_path} ", 1) if self.parent else usage


class _Implicit:
    """`migrate` reached without its name (see DefaultGroup): the command itself, made into a
    context of the class above."""

    def __init__(self, command: click.Command) -> None:
        self._command = command

    def __getattr__(self, name):
        return getattr(self._command, name)

    def make_context(self, info_name, args, parent=None, **extra):
        command = self._command
        command.context_class = _ImplicitContext  # (for this context only)
        try:
            return command.make_context(info_name, args, parent=parent, **extra)
        finally:
            del command.context_class


def _folder_hint(exc: click.UsageError, group_ctx: click.Context) -> None:
    """`npu-migrate rules --dry-run` where ./rules is a folder: say how to name the folder."""
    ctx = exc.ctx
    if ctx is None or ctx.parent is not group_ctx or group_ctx.meta.get("npu_migrate.implicit"):
        return
    name = ctx.info_name
    if name and name != IMPLICIT and os.path.isdir(name):
        exc.message += (f"\n(`{name}` is the `{name}` command; to migrate the folder {name}/, "
                        f"write `npu-migrate ./{name}`)")


def _version(ctx: click.Context, _param, value: bool) -> None:
    if value and not ctx.resilient_parsing:
        click.echo(f"npu-migrate {__version__}")
        ctx.exit(0)


def version_option(function):
    """`-V/--version` on every command, as in ruff."""
    return click.option("-V", "--version", is_flag=True, expose_value=False, is_eager=True,
                        callback=_version, help="Print the version and exit.")(function)


@click.group(cls=DefaultGroup, context_settings={"help_option_names": ["-h", "--help"]})
@version_option
def main() -> None:
    """Migrate a PyTorch code base from CUDA to Ascend NPUs (torch_npu) as a reviewable change.

    \b
      npu-migrate ./repo --dry-run   show the diff and every finding; write nothing
      npu-migrate ./repo             write the change and inject the npu_compat shim
      npu-migrate ./repo --report migration.md    also write the migration report
      npu-migrate check .            CI / pre-commit: report new CUDA-only code
      npu-migrate rule NPU101        explain one rule
      npu-migrate doctor             can this machine run the migrated code?
      npu-migrate rules              list every rule code

    A first argument that is not a command is a path to migrate: `npu-migrate PATH` is
    `npu-migrate migrate PATH`. A folder named like a command is `./NAME`.
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
@click.option("-o", "--output-file", type=click.Path(dir_okay=False), default=None, metavar="FILE",
              help="Write what would go to stdout (the diff, findings and summary, or the JSON) to "
                   "FILE instead, as `check -o` does. (A migrated copy is --output-dir.)")
@click.option("--no-color", is_flag=True, help="Plain text even on a terminal.")
@click.option("-q", "--quiet", is_flag=True,
              help="Print only the summary: no diff, no finding lines (text format; as in `check`).")
@click.option("--allow-dirty", is_flag=True,
              help="Write in place even when the git work tree has uncommitted changes. Without it, "
                   "a writing run stops (exit 2) when a tracked file under the root has staged or "
                   "unstaged changes, or when it would rewrite an untracked file (git could not "
                   "restore it), so that the migration is a diff of its own. Untracked files the "
                   "run leaves alone do not count. No check outside git.")
@click.option("--output-dir", "--output", "output_dir", type=click.Path(), default=None, metavar="DIR",
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
                   "handles the NPU next to CUDA), and every scope an NPU host never runs (a test "
                   "skipped off CUDA, a ROCm-only branch, another vendor's code), runs as written "
                   "(Triton host helpers, a guarded import's fallback, a switch without effect) or "
                   "needs no port work for (FP8 dtype names only). The JSON output always lists them.")
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
@version_option
def migrate_command(output_file, **params):
    """Rewrite CUDA-only code under PATHS (folders, .py files or notebooks) for Ascend NPUs.

    Shell scripts, YAML/TOML configs, Dockerfiles, .env files and .cu sources under PATHS are
    scanned too: reported, and with --rewrite-scripts shell scripts are rewritten.

    [tool.npu-migrate] in pyproject.toml (select, ignore, exclude, per-file-ignores, shim-name)
    applies as it does for `npu-migrate check`."""
    from rich.console import Console

    from .runplan import MigrateRun

    run = MigrateRun(**params)
    err = Console(stderr=True, no_color=run.no_color, highlight=False, soft_wrap=True,
                  force_terminal=False if run.no_color else None)
    state = _WriteState()
    try:
        _migrate(err, state, run, output_file)
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
    from .source import WriteError

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


def _migrate(err, state: _WriteState, run: MigrateRun, output_file: str | None = None) -> NoReturn:
    from rich.console import Console

    from . import dirty
    from .cache import open_for as open_cache
    from .config import ConfigError, parse_per_file_ignores, resolve as resolve_config
    from .discover import DiscoveryError, excluded
    from .inject import ShimConflict, check_all as check_shims, inject_all
    from .outtree import Interrupted, OutputError, check_target, write_copy
    from .render import RunSummary, json_report, print_diffs, print_summary, print_skipped
    from .runplan import NOTHING_READ, collect, common_folder, empty_folder_warnings, make_options, \
        resolve_root, run_engine, selection, shim_name_problem, split_codes
    from .source import InterruptGuard

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
    if not items and not any(Path(p).is_dir() for p in paths):
        _fail(err, f"nothing to migrate: no named path is a file npu-migrate reads ({NOTHING_READ})")
    for line in empty_folder_warnings(paths, items):
        err.print(f"warning: {line}", markup=False)
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
    if not dry_run and target is None and items and dirty.toplevel(root) is None:
        err.print(f"warning: {root} is not in a git work tree: files are rewritten in place and no "
                  "git command can undo it (run with --dry-run first, or write a copy with "
                  "--output-dir DIR)", markup=False)

    output_format = run.output_format
    sink = None
    if output_file is not None:
        try:
            sink = open(output_file, "w", encoding="utf-8")  # noqa: SIM115 (closed at exit below)
        except OSError as exc:
            _fail(err, f"{output_file}: cannot write: {exc.strerror or exc}")
    color = sink is None and sys.stdout.isatty() and not run.no_color and output_format == "text"
    console = Console(file=sink, no_color=not color, highlight=False, soft_wrap=True, force_terminal=color)
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
                    _fail(err, f"--output-dir {run.output_dir}: cannot write the copy: {exc}")
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
        if sink is not None:
            sink.write(json_report(summary) + "\n")
        else:
            click.echo(json_report(summary))
        for line in written:
            err.print(line, markup=False, highlight=False)
        if dry_run:
            err.print(dry_run_line(), markup=False, highlight=False)
    else:
        if (dry_run or run.show_diff) and not run.quiet:
            print_diffs(console, summary.changed, color)
        if not run.quiet:
            print_remaining(console, summary, Path.cwd())
        print_summary(console, summary)
        print_skipped(console, summary, run.show_skipped)
        if copy is not None:
            console.print(f"migrated copy written to {target} ({copy.files} files, "
                          f"{copy.migrated} migrated); {root} was not changed", highlight=False)
        for line in written:
            console.print(line, markup=False, highlight=False)
        if dry_run:
            console.print(dry_run_line(), markup=False, highlight=False)
    if sink is not None:
        sink.close()
    sys.exit(summary.exit_code())


def dry_run_line() -> str:
    return ("dry run: nothing was written. To apply the change, run the same command without "
            "--dry-run (or with --output-dir DIR for a migrated copy).")


def location_text(path: str, finding, file_line: int | None) -> tuple[str, str]:
    """(`path:line:col`, a suffix for the message). A notebook finding points at the line of
    the .ipynb file an editor opens (`nb.ipynb:58`), and names its cell in the message:
    `(cell 6, line 2, column 14)` (the cell's 1-based index among all cells)."""
    if finding.cell is None:
        return f"{path}:{finding.line}:{finding.column}", ""
    where = f"{path}:{file_line}" if file_line is not None else path
    return where, f" (cell {finding.cell}, line {finding.line}, column {finding.column})"


def print_remaining(console, summary: RunSummary, cwd: Path) -> None:
    """The findings a run leaves to the user (what it cannot rewrite), under a heading, with
    the guidance of each code once at the end."""
    from . import catalogue
    from .runplan import notebook_file_line, shown_path

    colours = {"error": "red", "warning": "yellow", "info": "blue"}
    by_path = {r.relpath: r for r in summary.results}
    left = [f for f in summary.findings if not f.fixable]
    if not left:
        return
    noun = "finding" if len(left) == 1 else "findings"
    console.print(f"\n[bold]{len(left)} {noun} to review by hand[/] (npu-migrate does not rewrite these):",
                  highlight=False)
    for f in left:
        result = by_path.get(f.path)
        file_line = notebook_file_line(result.original if result else None, f) if f.cell is not None else None
        where, cell = location_text(shown_path(Path(summary.root), f.path, cwd), f, file_line)
        console.print(f"[bold]{_escape(where)}[/]: [red]{f.code}[/] {_escape(f.message)}{cell} "
                      f"[{colours.get(f.severity, 'yellow')}]\\[{f.severity}][/]", highlight=False)
    console.print("\n[bold]What to do[/] (`npu-migrate rule CODE` explains a rule):", highlight=False)
    rules = catalogue.rules()
    for code in sorted({f.code for f in left}):
        rule = rules.get(code)
        if rule is not None:
            guidance = " ".join(rule.guidance.split())
            console.print(f"  [red]{code}[/] {rule.name}: {_escape(guidance)}", highlight=False)
    console.print("")


def _escape(text: str) -> str:
    from rich.markup import escape

    return escape(text)


def needed_shims(results, options):
    """run.needed_shims (here so that tests can replace it; run.py loads the engine)."""
    from .run import needed_shims as plan

    return plan(results, options)


def packaging_results(summary: RunSummary, root: Path, shims: list[str], shim_name: str, err) -> None:
    """Packaging files that must list the new shim subpackages for the wheel to ship them: their
    change joins the run's results (shown in the diff, written with the rest)."""
    from .inject import split_folder
    from .layout import packaging_edits, read_layout
    from .model import FileResult

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
    from .inject import ShimWriteError, inject_all, shim_not_written, why_none_writable
    from .source import InterruptGuard, WriteError, write_atomic

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
@version_option
def rules_command(fmt):
    """List every rule: code, whether it rewrites or only reports, and its summary."""
    from .render import rules_text

    click.echo(rules_text(fmt), nl=False)


@main.command("rule")
@click.argument("code", required=False, metavar="CODE")
@click.option("--all", "show_all", is_flag=True, help="Explain every rule.")
@click.option("--output-format", type=click.Choice(["text", "json"]), default="text", show_default=True)
@version_option
def rule_command(code, show_all, output_format):
    """Explain one rule: what it finds, why, an example, the fix and its severity."""
    import json

    from .ruledocs import rule_json, rule_text

    if show_all == bool(code):
        raise click.UsageError("give one rule code (NPU101), or --all")
    from . import catalogue

    rules = catalogue.rules()
    if show_all:
        codes = list(rules)
    else:
        wanted = code.strip().upper()
        if wanted not in rules:
            import difflib

            close = difflib.get_close_matches(wanted, list(rules), n=3, cutoff=0.6)
            hint = f" (did you mean {', '.join(close)}?)" if close else " (`npu-migrate rules` lists them)"
            raise click.BadParameter(f"unknown rule code {code!r}{hint}", param_hint="CODE")
        codes = [wanted]
    if output_format == "json":
        payload = [rule_json(c) for c in codes]
        click.echo(json.dumps(payload if show_all else payload[0], indent=2))
    else:
        click.echo("\n".join(rule_text(c) for c in codes), nl=False)


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
