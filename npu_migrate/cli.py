"""The command line: `npu-migrate PATH...` (migrate), `npu-migrate rules`.

Exit codes (like ruff): 0 nothing left to report, 1 findings remain, 2 the tool failed.
"""

from __future__ import annotations

import keyword
import os
import re
import sys
from pathlib import Path

import click
from rich.console import Console

from . import __version__, catalogue
from .check import check_command
from .discover import DiscoveryError, discover
from .engine import FileResult, Options, npu_aware_dirs, package_dirs, run_files
from .inject import ShimConflict, check as check_shim, inject
from .render import RunSummary, json_report, print_diffs, print_findings, print_summary, rules_text
from .source import WriteError, write_atomic

IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
# A shim may not take the name of a module the migrated code needs.
RESERVED_SHIM_NAMES = frozenset({"torch", "torch_npu", "torchvision", "numpy", "npu_migrate", "triton"})


def _shim_name_problem(name: str) -> str | None:
    if not IDENTIFIER.match(name):
        return "is not a Python identifier"
    if keyword.iskeyword(name) or keyword.issoftkeyword(name):
        return "is a Python keyword"
    if name in RESERVED_SHIM_NAMES or name in getattr(sys, "stdlib_module_names", ()):
        return "would shadow a module the code needs"
    return None


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
      npu-migrate check .            CI / pre-commit: report new CUDA-only code
      npu-migrate rules              list every rule code
    """


def _collect(paths: tuple[str, ...], exclude: tuple[str, ...], shim_name: str):
    """The run's root and its (path, relpath) items. Root: the common folder of the paths."""
    resolved = [Path(p).absolute() for p in paths]
    for p in resolved:
        if not p.exists():
            raise DiscoveryError(f"{p}: no such file or directory")
    bases = [p if p.is_dir() else p.parent for p in resolved]
    root = Path(os.path.commonpath([str(b) for b in bases]))
    items: dict[str, str] = {}
    skipped_links: list[str] = []
    for p in resolved:
        if p.is_dir():
            for path, rel in discover(p, exclude, shim_name):
                full_rel = Path(path).relative_to(root).as_posix()
                items[path] = full_rel
        elif Path(paths[resolved.index(p)]).is_symlink():
            skipped_links.append(str(p))  # never written through: migrate the link's target instead
        elif p.suffix == ".py" or p.is_file():
            items[str(p)] = p.relative_to(root).as_posix()
    return root, sorted(items.items(), key=lambda kv: kv[1]), skipped_links


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
@click.option("--shim-name", default="npu_compat", show_default=True,
              help="Name of the runtime shim package injected into the repository.")
@click.option("--no-shim", is_flag=True, help="Do not inject the shim (you provide the module yourself).")
@click.option("--select", multiple=True, metavar="CODE",
              help="Only these rule codes or prefixes (NPU1, NPU201, ALL); repeatable or comma-separated.")
@click.option("--ignore", multiple=True, metavar="CODE",
              help="Skip these rule codes or prefixes; repeatable or comma-separated.")
@click.option("--output-format", type=click.Choice(["text", "json"]), default="text", show_default=True)
@click.option("--no-color", is_flag=True, help="Plain text even on a terminal.")
@click.option("-q", "--quiet", is_flag=True, help="Only the summary (text format).")
def migrate_command(paths, dry_run, show_diff, jobs, exclude, shim_name, no_shim, select, ignore,
                    output_format, no_color, quiet):
    """Rewrite CUDA-only code under PATHS (folders or .py files) for Ascend NPUs."""
    err = Console(stderr=True, no_color=no_color, highlight=False, soft_wrap=True,
                  force_terminal=False if no_color else None)
    problem = _shim_name_problem(shim_name)
    if problem:
        err.print(f"error: --shim-name {shim_name!r} {problem}", markup=False)
        sys.exit(2)
    try:
        enabled = catalogue.enabled_codes(_split(select), _split(ignore))
    except ValueError as exc:
        err.print(f"error: {exc}", markup=False)
        sys.exit(2)
    try:
        root, items, skipped_links = _collect(paths, exclude, shim_name)
    except DiscoveryError as exc:
        err.print(f"error: {exc}", markup=False)
        sys.exit(2)
    for link in skipped_links:
        err.print(f"warning: {link} is a symbolic link; skipped (name its target instead)", markup=False)

    color = sys.stdout.isatty() and not no_color and output_format == "text"
    console = Console(no_color=not color, highlight=False, soft_wrap=True, force_terminal=color)
    options = Options(enabled=enabled, shim_name=shim_name, npu_aware_dirs=npu_aware_dirs(items),
                      package_dirs=package_dirs(root, items))
    progress, advance = _progress_runner(err, color and len(items) > 200, len(items))
    jobs = jobs or os.cpu_count() or 1
    if progress:
        with progress:
            results = run_files(items, options, jobs=jobs, progress=advance)
    else:
        results = run_files(items, options, jobs=jobs)

    summary = RunSummary(root=str(root), dry_run=dry_run, results=results)
    # The shim is needed (created, refreshed or re-created) when any file imports it after the run,
    # whether this run or an earlier one rewrote it.
    imports_shim = re.compile(
        rb"^[ \t]*(import|from)[ \t]+" + re.escape(shim_name.encode()) + rb"\b", re.M
    )
    needs_shim = not no_shim and any(
        imports_shim.search(r.new if r.changed else (r.original or b"")) for r in results
    )
    if needs_shim:
        try:
            check_shim(root, shim_name)
        except ShimConflict as exc:
            summary.errors.append(str(exc))
    if not dry_run and not summary.errors:
        _write(results, summary)
        if needs_shim:
            summary.shim = inject(root, shim_name)
    elif dry_run and needs_shim and not summary.errors:
        summary.shim = inject(root, shim_name, dry_run=True)

    if output_format == "json":
        click.echo(json_report(summary))
    else:
        if (dry_run or show_diff) and not quiet:
            print_diffs(console, summary.changed, color)
        if not quiet:
            print_findings(console, summary)
        print_summary(console, summary)
    sys.exit(summary.exit_code())


def _write(results: list[FileResult], summary: RunSummary) -> None:
    root = Path(summary.root)
    for result in results:
        if not result.changed:
            continue
        try:
            write_atomic(root / result.relpath, result.new, expected=result.original)
        except (WriteError, OSError) as exc:
            summary.errors.append(f"{result.relpath}: not written: {exc}")


def _split(values: tuple[str, ...]) -> tuple[str, ...]:
    return tuple(v for value in values for v in value.split(",") if v.strip())


@main.command("rules")
@click.option("--format", "fmt", type=click.Choice(["text", "markdown", "json"]), default="text",
              show_default=True)
def rules_command(fmt):
    """List every rule: code, whether it rewrites or only reports, and its summary."""
    click.echo(rules_text(fmt), nl=False)


main.add_command(check_command)


if __name__ == "__main__":  # pragma: no cover
    main()
