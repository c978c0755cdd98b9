"""The virtual-device commands: `npu-migrate vnpu -- CMD` and `npu-migrate verify PATH -- CMD`
(the work is in npu_migrate/vnpu/launch.py and verify.py)."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from .cli import version_option
from .vnpu import launch
from .vnpu.verify import VerifyRequest, verify

_NPUS_HELP = ("Number of virtual NPUs the program sees (NPU_MIGRATE_VNPU_COUNT). Default: the number "
              "of entries of ASCEND_RT_VISIBLE_DEVICES, else 1.")


@click.command("vnpu", context_settings={"ignore_unknown_options": True, "allow_interspersed_args": False})
@click.option("--npus", type=click.IntRange(min=1), default=None, metavar="N", help=_NPUS_HELP)
@version_option
@click.argument("cmd", nargs=-1, required=True, type=click.UNPROCESSED, metavar="-- CMD [ARGS]...")
def vnpu_command(npus: int | None, cmd: tuple[str, ...]) -> None:
    """Run CMD with a virtual Ascend NPU, on the CPU.

    `import torch_npu` finds a stand-in that runs the NPU path on the CPU, in CMD and in every
    process it starts (torchrun workers too).

    \b
      npu-migrate vnpu -- python -m nanochat_mini.train
      npu-migrate vnpu --npus 2 -- torchrun --nproc_per_node=2 train.py

    The stand-in's folder goes first on PYTHONPATH; CUDA_VISIBLE_DEVICES is set empty; the folder
    of the Python running npu-migrate (its virtual environment's bin/) goes first on PATH, so
    `python` in CMD is that interpreter, with its torch. Exit: CMD's own exit code; 2 when CMD
    is not found, the interpreter running it has no torch (or an unsupported one), or the virtual
    device is missing."""
    env = launch.vnpu_env(npus)
    try:
        executable = launch.preflight(cmd, env, Path.cwd(), launch.site_dir())
        code = launch.run_inherited(cmd, env, executable=executable)
    except launch.LaunchError as exc:
        click.echo(f"error: {exc}", err=True)
        sys.exit(2)
    sys.exit(code)


@click.command("verify")
@click.argument("path", type=click.Path(exists=True, file_okay=False, path_type=Path))
@click.option("--migrated", type=click.Path(exists=True, file_okay=False, path_type=Path), default=None,
              metavar="DIR",
              help="An existing migrated copy of PATH to run (e.g. made with `npu-migrate PATH --output-dir "
                   "DIR`, perhaps edited). Default: migrate PATH into a temporary folder.")
@click.option("--compare", default=None, metavar="FILE",
              help="Compare this file instead of stdout: relative to each run's folder, and written by "
                   "the run (one left from before the run does not count).")
@click.option("--timeout", type=click.FloatRange(min=0, min_open=True), default=None, metavar="S",
              help="Kill a run (and the processes it started) after S seconds. Default: no limit.")
@click.option("--npus", type=click.IntRange(min=1), default=None, metavar="N", help=_NPUS_HELP)
@version_option
@click.argument("cmd", nargs=-1, required=True, type=click.UNPROCESSED, metavar="-- CMD [ARGS]...")
def verify_command(path: Path, migrated: Path | None, compare: str | None, timeout: float | None,
                   npus: int | None, cmd: tuple[str, ...]) -> None:
    """Compare CMD in the original (CPU) and migrated (virtual NPU) project.

    CMD runs in the original project PATH on the CPU and in its migrated copy on the virtual
    NPU; their stdout (or --compare FILE) must be the same.

    \b
      npu-migrate verify fixtures/projects/nanochat_mini -- python -m nanochat_mini.train

    The original runs in PATH without the virtual device and with CUDA hidden
    (CUDA_VISIBLE_DEVICES=""), so a CUDA machine runs its CPU path too. The migrated copy is made
    with `npu-migrate PATH --output-dir` in a temporary folder (kept when the outputs differ), unless
    --migrated names one; CMD runs there, in the same folder relative to the project root, as
    `npu-migrate vnpu` would run it. CMD is run as given, in both: `python` is looked up on PATH,
    whose first folder is that of the Python running npu-migrate. Put `--` before CMD.

    Prints each run's exit code and time, then MATCH or the first differing line. Exit 0 when the
    outputs match; 1 when they differ (a migrated run that fails while the original succeeded
    differs); 2 when a run cannot start, the original does not run on the CPU, or the migration
    fails."""
    request = VerifyRequest(path=path, cmd=cmd, migrated=migrated, compare=compare, timeout=timeout, npus=npus)
    code = verify(request, echo=click.echo, progress=lambda line: click.echo(line, err=True))
    sys.exit(code)
