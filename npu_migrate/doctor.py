"""`npu-migrate doctor`: can this machine run the migrated code, on an NPU, a CUDA GPU or the CPU?

The checks are the shim's own (`npu_migrate/shim/doctor.py`, `python -m npu_compat` in a migrated
repository), so the tool and the shim never disagree. That module is loaded from its file:
importing `npu_migrate.shim.doctor` would run `npu_migrate/shim/__init__.py`, which imports
torch, and the doctor must still report (torch: fail, exit 1) where torch is missing.

Output: a green/red table (rich) on a terminal, plain text otherwise or with `--no-color`,
`--json` for machines. Exit code 0 when no check fails, 1 otherwise; see the shim module's
docstring for which statuses fail and why a CPU-only host passes unless `--require` says otherwise.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from importlib import resources
from types import ModuleType

import click
from rich.console import Console
from rich.table import Table
from rich.text import Text

from . import __version__

_MODULE = "npu_migrate._shim_doctor"  # where the loaded shim doctor lives in sys.modules
_STYLES = {"ok": "green", "warn": "yellow", "fail": "bold red", "skip": "dim"}


def load_shim_doctor() -> ModuleType:
    """The shim's doctor module, executed from its file without importing `npu_migrate.shim`."""
    loaded = sys.modules.get(_MODULE)
    if loaded is not None:
        return loaded
    path = resources.files("npu_migrate").joinpath("shim").joinpath("doctor.py")
    spec = importlib.util.spec_from_file_location(_MODULE, str(path))
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load the shim doctor from {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[_MODULE] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[_MODULE]
        raise
    return module


def rich_table(report) -> Table:
    """The report as a rich table: one row per check, the status coloured, hints dimmed below."""
    table = Table(title=f"npu-migrate {__version__} doctor: {report.host} host", title_justify="left")
    table.add_column("check", no_wrap=True)
    table.add_column("status", no_wrap=True)
    table.add_column("detail")
    for check in report.checks:
        detail = Text(check.detail)
        if check.hint:
            detail.append("\nhint: " + check.hint, style="dim")
        table.add_row(check.name, Text(check.status, style=_STYLES[check.status]), detail)
    return table


def print_rich(report, console: Console, summary: str) -> None:
    console.print(rich_table(report))
    style = "bold red" if report.exit_code else "bold green"
    console.print(Text(summary, style=style))


@click.command("doctor")
@click.option("--json", "as_json", is_flag=True, help="Print a JSON object (checks, summary, exit_code).")
@click.option("--no-color", is_flag=True, help="Plain text even on a terminal.")
@click.option("--require", type=click.Choice(["npu", "cuda", "any"]), default=None,
              help="Fail unless this accelerator is present (any: an NPU or a CUDA GPU).")
@click.pass_context
def doctor_command(ctx: click.Context, as_json: bool, no_color: bool, require: str | None) -> None:
    """Check this machine: torch / torch_npu versions, CANN, driver, devices, a tiny computation,
    visible-device variables, HCCL (or the CUDA equivalents). Exit 1 when a check fails."""
    doctor = load_shim_doctor()
    probes = (ctx.obj or {}).get("doctor_probes") if isinstance(ctx.obj, dict) else None
    report = doctor.run_checks(probes, require=require)
    if as_json:
        click.echo(doctor.render_json(report, {"tool": {"name": "npu-migrate", "version": __version__}}),
                   nl=False)
    elif sys.stdout.isatty() and not no_color and "NO_COLOR" not in os.environ:
        print_rich(report, Console(highlight=False, soft_wrap=False), doctor.summary_line(report))
    else:
        click.echo(doctor.render_text(report, color=False), nl=False)
    ctx.exit(report.exit_code)
