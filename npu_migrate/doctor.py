"""`npu-migrate doctor`: can the project's interpreter run the migrated code, on an NPU, a CUDA GPU
or the CPU?

The checks are the shim's own (`npu_migrate/shim/doctor.py`, `python -m npu_compat` in a migrated
repository), so the tool and the shim never disagree. That module is loaded from its file:
importing `npu_migrate.shim.doctor` would run `npu_migrate/shim/__init__.py`, which imports
torch, and the doctor must still report (torch: fail, exit 1) where torch is missing.

Which interpreter: the tool often runs in an environment of its own (pipx, a pre-commit hook, a
CI step) that has no torch, so it checks the *project's* interpreter, the first of:

1. `--python PATH`: an interpreter, or a virtual environment's folder;
2. `$VIRTUAL_ENV`, the activated virtual environment;
3. `.venv/` or `venv/` in the current directory or a folder above it, up to the top of its git
   work tree (a folder holding `pyvenv.cfg`);
4. `$CONDA_PREFIX`, the activated conda environment;
5. this tool's own interpreter (a warning when that is a virtual environment of its own, as
   under pipx: it is then most likely not the project's).

Another interpreter than this process's runs the shim's doctor file itself (standard library
only, no import of npu-migrate) and answers in JSON, so a missing torch there is a row of the
table with the install command for that interpreter, never a traceback. An `interpreter` row
heads the table: which one was checked and why.

Output: a green/red table (rich) on a terminal, plain text otherwise or with `--no-color`,
`--json` for machines. Exit code 0 when no check fails, 1 otherwise (2: a `--python` that is not
an interpreter); see the shim module's docstring for which statuses fail and why a CPU-only host
passes unless `--require` says otherwise.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from types import ModuleType

import click
from rich.console import Console
from rich.table import Table
from rich.text import Text

from . import __version__

_MODULE = "npu_migrate._shim_doctor"  # where the loaded shim doctor lives in sys.modules
_STYLES = {"ok": "green", "warn": "yellow", "fail": "bold red", "skip": "dim"}

VENV_NAMES = (".venv", "venv")  # the project's virtual environment, by convention
PROBE_TIMEOUT = 600  # seconds for the doctor in another interpreter (torch_npu's init can be slow)

# Runs the shim's doctor file in the project's interpreter: argv[1] the file, the rest its options.
# Loaded from its file like load_shim_doctor() does, under a name no project uses.
PROBE = (
    "import importlib.util, sys\n"
    "spec = importlib.util.spec_from_file_location('npu_migrate_doctor_probe', sys.argv[1])\n"
    "module = importlib.util.module_from_spec(spec)\n"
    "spec.loader.exec_module(module)\n"
    "sys.exit(module.main(sys.argv[2:]))\n"
)


def doctor_file() -> Path:
    """The shim's doctor.py, the checks both `npu-migrate doctor` and `python -m npu_compat` run."""
    return Path(str(resources.files("npu_migrate").joinpath("shim").joinpath("doctor.py")))


def load_shim_doctor() -> ModuleType:
    """The shim's doctor module, executed from its file without importing `npu_migrate.shim`."""
    loaded = sys.modules.get(_MODULE)
    if loaded is not None:
        return loaded
    path = doctor_file()
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


# --------------------------------------------------------------------------------------------
# Which interpreter runs the project


@dataclass
class Interpreter:
    """The interpreter the doctor checks, and why that one.

    ``python`` is None for this process's own interpreter (the checks run in-process).
    """

    python: str | None
    source: str  # "--python", "$VIRTUAL_ENV", ".venv/", "venv/", "$CONDA_PREFIX", "self"
    status: str  # the interpreter row's status: ok, or warn for a guess
    detail: str
    hint: str = ""

    def as_dict(self) -> dict:
        return {"python": self.python or sys.executable, "source": self.source,
                "in_process": self.python is None}


def venv_python(folder: Path) -> Path | None:
    """The interpreter of the virtual (or conda) environment at ``folder``; None if there is none."""
    for relative in ("bin/python", "bin/python3", "Scripts/python.exe", "python.exe"):
        candidate = folder / relative
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return candidate
    return None


def _is_venv(folder: Path) -> bool:
    return (folder / "pyvenv.cfg").is_file() and venv_python(folder) is not None


def _same_environment(folder: Path) -> bool:
    """Whether ``folder`` is the environment this process runs in."""
    try:
        return folder.resolve() == Path(sys.prefix).resolve()
    except OSError:
        return False


def project_folders(start: Path) -> list[Path]:
    """``start`` and the folders above it up to the top of its git work tree (``start`` alone
    outside one): where the project's ``.venv/`` may be."""
    start = start.resolve()
    chain = [start, *start.parents]
    for index, folder in enumerate(chain):
        if (folder / ".git").exists():
            return chain[:index + 1]
    return [start]


def _environment(folder: Path, source: str, why: str) -> Interpreter:
    if _same_environment(folder):
        return Interpreter(None, source, "ok", f"{sys.executable}: {why} (this tool's own)")
    python = venv_python(folder)
    return Interpreter(str(python), source, "ok", f"{python}: {why}")


def _from_option(value: str) -> Interpreter:
    """``--python PATH``: an interpreter (a path, or a name on PATH) or an environment's folder."""
    path = Path(value).expanduser()
    if path.is_dir():
        if venv_python(path) is None:
            raise click.BadParameter(f"{value}: a folder without bin/python (not a virtual environment)",
                                     param_hint="'--python'")
        return _environment(path, "--python", f"the environment given with --python {value}")
    if not path.exists() and os.sep not in value and shutil.which(value):
        path = Path(shutil.which(value))
    if not path.is_file() or not os.access(path, os.X_OK):
        raise click.BadParameter(f"{value}: no such interpreter", param_hint="'--python'")
    return Interpreter(str(path), "--python", "ok", f"{path}: given with --python")


def find_interpreter(python: str | None = None, cwd: Path | None = None,
                     environ: dict | None = None) -> Interpreter:
    """The project's interpreter (see the module's docstring for the order)."""
    environ = os.environ if environ is None else environ
    if python:
        return _from_option(python)
    active = environ.get("VIRTUAL_ENV")
    if active and venv_python(Path(active)) is not None:
        return _environment(Path(active), "$VIRTUAL_ENV", f"the activated virtual environment {active}")
    for folder in project_folders(cwd or Path.cwd()):
        for name in VENV_NAMES:
            if _is_venv(folder / name):
                return _environment(folder / name, f"{name}/", f"the project's virtual environment {folder / name}")
    conda = environ.get("CONDA_PREFIX")
    if conda and venv_python(Path(conda)) is not None:
        return _environment(Path(conda), "$CONDA_PREFIX", f"the activated conda environment {conda}")
    looked = ", ".join(f"{name}/" for name in VENV_NAMES)
    hint = "run it from the project's folder, activate its environment or pass --python PATH"
    if sys.prefix != sys.base_prefix:  # the tool's own virtual environment (pipx, a hook, CI)
        return Interpreter(None, "self", "warn",
                           f"{sys.executable}: this tool's own environment, which may not be the "
                           f"project's (no {looked} here, no $VIRTUAL_ENV)", hint)
    return Interpreter(None, "self", "ok",
                       f"{sys.executable}: this tool's interpreter (no {looked} here, no $VIRTUAL_ENV)")


def _probe_env() -> dict:
    """The environment for the project's interpreter: this one's, less what only this tool's
    interpreter should see."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONHOME", "PYTHONEXECUTABLE")}
    env["PYTHONIOENCODING"] = "utf-8"
    return env


def probe(doctor: ModuleType, interpreter: Interpreter, require: str | None):
    """Run the doctor's checks in ``interpreter.python``: its Report, or a Report with one fail row
    saying why the checks could not run."""
    argv = [interpreter.python, "-c", PROBE, str(doctor_file()), "--json"]
    if require:
        argv += ["--require", require]

    def failed(detail: str):
        return doctor.Report("unknown", [doctor.Check(
            "checks", "fail", detail,
            f"check that {interpreter.python} is a working Python 3, or pass --python PATH")])

    try:
        proc = subprocess.run(argv, capture_output=True, text=True, encoding="utf-8", errors="replace",
                              env=_probe_env(), timeout=PROBE_TIMEOUT, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        return failed(f"the checks did not finish in {PROBE_TIMEOUT} s")
    except OSError as exc:
        return failed(f"{interpreter.python} cannot be run: {exc.strerror or exc}")
    try:
        payload = json.loads(proc.stdout)
        checks = [doctor.Check(c["name"], c["status"], c["detail"], c.get("hint", ""))
                  for c in payload["checks"]]
        return doctor.Report(str(payload["host"]), checks)
    except (ValueError, KeyError, TypeError):
        lines = [line for line in (proc.stderr or proc.stdout).splitlines() if line.strip()]
        last = lines[-1].strip() if lines else "no output"
        return failed(f"the checks could not run there (exit {proc.returncode}): {last[:300]}")


# --------------------------------------------------------------------------------------------
# Output


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
@click.option("--python", "python", metavar="PATH", default=None,
              help="The project's interpreter, or its virtual environment's folder (default: "
                   "$VIRTUAL_ENV, else .venv/ or venv/ here or above, else this tool's).")
@click.option("--json", "as_json", is_flag=True, help="Print a JSON object (checks, summary, exit_code).")
@click.option("--no-color", is_flag=True, help="Plain text even on a terminal.")
@click.option("--require", type=click.Choice(["npu", "cuda", "any"]), default=None,
              help="Fail unless this accelerator is present (any: an NPU or a CUDA GPU).")
@click.pass_context
def doctor_command(ctx: click.Context, python: str | None, as_json: bool, no_color: bool,
                   require: str | None) -> None:
    """Can this machine run the migrated code? Checks torch, torch_npu, CANN and the driver, the
    devices, a tiny computation, the visible-device variables and HCCL (or the CUDA equivalents),
    in the project's interpreter (--python, else its virtual environment). Exit 1 when a check
    fails."""
    doctor = load_shim_doctor()
    probes = (ctx.obj or {}).get("doctor_probes") if isinstance(ctx.obj, dict) else None
    interpreter = None
    if probes is not None:  # tests: a faked machine, in this process
        report = doctor.run_checks(probes, require=require)
    else:
        interpreter = find_interpreter(python)
        if interpreter.python is None:
            report = doctor.run_checks(None, require=require)
        else:
            report = probe(doctor, interpreter, require)
        report.checks.insert(0, doctor.Check("interpreter", interpreter.status, interpreter.detail,
                                             interpreter.hint))
    if as_json:
        extra = {"tool": {"name": "npu-migrate", "version": __version__}}
        if interpreter is not None:
            extra["interpreter"] = interpreter.as_dict()
        click.echo(doctor.render_json(report, extra), nl=False)
    elif sys.stdout.isatty() and not no_color and "NO_COLOR" not in os.environ:
        print_rich(report, Console(highlight=False, soft_wrap=False), doctor.summary_line(report))
    else:
        click.echo(doctor.render_text(report, color=False), nl=False)
    ctx.exit(report.exit_code)
