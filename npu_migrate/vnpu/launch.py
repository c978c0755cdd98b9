"""Run a command with the virtual Ascend device (`npu-migrate vnpu`, and the migrated run of
`npu-migrate verify`), or on the plain CPU (verify's original run).

The virtual device is a `torch_npu` stand-in package in `npu_migrate/vnpu/site/`. A command sees it
because this module puts that folder FIRST on `PYTHONPATH` (the caller's `PYTHONPATH` follows it),
so `import torch_npu` in the command, in every subprocess it starts and in `torchrun`'s workers
finds the stand-in before any real torch_npu. The environment of a virtual-device run:

- `PYTHONPATH`: the stand-in's folder, then the caller's `PYTHONPATH`.
- `NPU_MIGRATE_VNPU_COUNT`: how many virtual devices the program sees: `--npus N`, else the number
  of entries of `ASCEND_RT_VISIBLE_DEVICES` (as on a real host, where it selects the devices a
  process sees; an empty value counts as unset), else 1.
- `CUDA_VISIBLE_DEVICES=""`: a CUDA machine hides its GPUs, as an Ascend host has none.
- `PATH`: the folder of the interpreter running npu-migrate first (its virtual environment's
  `bin/`), so that `python` (and `torchrun`) in the command is the interpreter npu-migrate runs
  in, with the torch it sees. The command itself is run as given.

`NPU_MIGRATE_VNPU_SITE` names another folder to use instead of `npu_migrate/vnpu/site` (tests use
it to put a small fake first; a developer can point it at a work-in-progress device).

A CPU run (`cpu_env`) takes the caller's environment without the stand-in (its folder removed from
`PYTHONPATH`, `NPU_MIGRATE_VNPU_COUNT` unset), with `CUDA_VISIBLE_DEVICES=""` and
`TORCH_DEVICE_BACKEND_AUTOLOAD=0` (an installed torch_npu is not loaded behind the program's back),
and the same `PATH`.

Before a run, the command is looked up (`resolve_command`) and, when it is a Python interpreter or
a script with a python `#!` line (`torchrun`, a console script), that interpreter is asked,
without importing torch (a fraction of a second), whether torch is installed and in a version the
virtual device supports (`check_torch`). Failures are `LaunchError`s: the commands print them and
exit 2.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

ENV_SITE = "NPU_MIGRATE_VNPU_SITE"
ENV_COUNT = "NPU_MIGRATE_VNPU_COUNT"
VISIBLE_ENV = "ASCEND_RT_VISIBLE_DEVICES"
DEFAULT_SITE = Path(__file__).resolve().parent / "site"
STAND_IN = "torch_npu"


def supported_torch() -> tuple[str, ...]:
    """The torch releases ("major.minor") the virtual device runs on: the device's own list
    (install.py, which imports torch only when the device is installed into a process). The
    device refuses other versions at import too; the check here says so before CMD starts."""
    from .install import SUPPORTED_TORCH

    return tuple(SUPPORTED_TORCH)


class LaunchError(Exception):
    """A command that cannot start (not found, no usable torch, no virtual device): exit 2."""


# ------------------------------------------------------------------------------ environments


def site_dir(environ: Mapping[str, str] | None = None) -> Path:
    """The folder put first on PYTHONPATH: $NPU_MIGRATE_VNPU_SITE, else npu_migrate/vnpu/site."""
    environ = os.environ if environ is None else environ
    override = environ.get(ENV_SITE)
    return Path(override).absolute() if override else DEFAULT_SITE


def site_problem(site: Path) -> str | None:
    """Why `site` cannot serve as the virtual device (None when it can)."""
    if (site / STAND_IN / "__init__.py").is_file() or (site / f"{STAND_IN}.py").is_file():
        return None
    where = f" (from ${ENV_SITE})" if site != DEFAULT_SITE else ""
    return f"the virtual device is not installed: no {STAND_IN} package in {site}{where}"


def visible_count(environ: Mapping[str, str]) -> int | None:
    """The number of entries of ASCEND_RT_VISIBLE_DEVICES; None when it is unset or empty."""
    value = environ.get(VISIBLE_ENV, "")
    entries = [e for e in value.split(",") if e.strip()]
    return len(entries) or None


def device_count(npus: int | None, environ: Mapping[str, str] | None = None) -> int:
    """`--npus N`, else the entries of ASCEND_RT_VISIBLE_DEVICES, else 1."""
    environ = os.environ if environ is None else environ
    if npus is not None:
        return npus
    return visible_count(environ) or 1


def _tool_path(environ: Mapping[str, str]) -> str:
    """PATH with the folder of this interpreter (its venv's bin/) first, once."""
    bindir = str(Path(sys.executable).absolute().parent)  # not resolved: a venv's python is a link
    rest = [p for p in environ.get("PATH", os.defpath).split(os.pathsep) if p and p != bindir]
    return os.pathsep.join([bindir, *rest])


def _without_site(pythonpath: str, site: Path) -> list[str]:
    entries = [p for p in pythonpath.split(os.pathsep) if p]
    return [p for p in entries if Path(p).absolute() not in (site, DEFAULT_SITE)]


def vnpu_env(npus: int | None = None, environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment of a virtual-device run (see the module's docstring)."""
    environ = dict(os.environ if environ is None else environ)
    site = site_dir(environ)
    env = dict(environ)
    env["PYTHONPATH"] = os.pathsep.join([str(site), *_without_site(environ.get("PYTHONPATH", ""), site)])
    env[ENV_COUNT] = str(device_count(npus, environ))
    env["CUDA_VISIBLE_DEVICES"] = ""
    env["PATH"] = _tool_path(environ)
    return env


def cpu_env(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment of a plain CPU run: no stand-in, CUDA hidden, the same PATH."""
    environ = dict(os.environ if environ is None else environ)
    env = dict(environ)
    rest = _without_site(environ.get("PYTHONPATH", ""), site_dir(environ))
    if rest:
        env["PYTHONPATH"] = os.pathsep.join(rest)
    else:
        env.pop("PYTHONPATH", None)
    env.pop(ENV_COUNT, None)
    env["CUDA_VISIBLE_DEVICES"] = ""
    env["TORCH_DEVICE_BACKEND_AUTOLOAD"] = "0"
    env["PATH"] = _tool_path(environ)
    return env


# ------------------------------------------------------------------------ the command and torch


def resolve_command(cmd: Sequence[str], env: Mapping[str, str], cwd: Path) -> str:
    """The executable CMD[0] names, looked up as the shell would: a name through the PATH of
    `env`, a path (with a slash) from `cwd`. LaunchError when there is none."""
    if not cmd:
        raise LaunchError("no command given: put it after `--`, e.g. `-- python train.py`")
    name = cmd[0]
    if os.sep in name or (os.altsep and os.altsep in name):
        path = Path(name) if os.path.isabs(name) else Path(cwd) / name
        if not path.is_file():
            raise LaunchError(f"command not found: {name} (no such file from {cwd})")
        if not os.access(path, os.X_OK):
            raise LaunchError(f"command not executable: {name} (in {cwd}); "
                              f"run it through its interpreter, e.g. `-- python {name}`")
        return str(path)
    found = shutil.which(name, path=env.get("PATH", os.defpath))
    if found is None:
        raise LaunchError(f"command not found: {name} (looked up on PATH)")
    return found


PYTHON_NAME = re.compile(r"^python(\d+(\.\d+)?)?[tw]?(\.exe)?$")


def interpreter_of(executable: str, env: Mapping[str, str]) -> str | None:
    """The Python interpreter that runs `executable`: itself when it is one (python, python3.11),
    the interpreter of its `#!` line when that names python (torchrun, console scripts, scripts),
    else None (a shell script, a binary: nothing to check)."""
    if PYTHON_NAME.match(Path(executable).name):
        return executable
    try:
        with open(executable, "rb") as handle:
            first = handle.readline(512)
    except OSError:
        return None
    if not first.startswith(b"#!") or b"python" not in first:
        return None
    try:
        words = shlex.split(first[2:].decode("utf-8", "replace").strip())
    except ValueError:
        return None
    if words and Path(words[0]).name == "env":  # #!/usr/bin/env [-S] python3 [-u]
        words = [w for w in words[1:] if not w.startswith("-") and "=" not in w]
        if not words:
            return None
        return shutil.which(words[0], path=env.get("PATH", os.defpath))
    return words[0] if words else None


# Asks an interpreter for torch's version without importing torch (milliseconds, not seconds), and
# whether it can import npu_migrate (the stand-in's code lives there). Line 1: "torch VERSION",
# "missing" or "error ..."; line 2: "npu_migrate yes|no".
_PROBE = """\
import importlib.util, sys
def found(name):
    try:
        return importlib.util.find_spec(name) is not None
    except Exception:
        return False
try:
    spec = importlib.util.find_spec("torch")
except Exception as exc:
    print("error", type(exc).__name__, str(exc).replace("\\n", " "))
    spec = False
if spec is None:
    print("missing")
elif spec:
    version = "unknown"
    try:
        import importlib.metadata as md
        version = md.version("torch")
    except Exception:
        pass
    print("torch", version)
print("npu_migrate", "yes" if found("npu_migrate") else "no")
"""


def release_of(version: str) -> str:
    """"2.13" of "2.13.0+cpu"."""
    return ".".join(version.split("+")[0].split(".")[:2])


def check_torch(interpreter: str, env: Mapping[str, str], cwd: Path, needs_package: bool = False) -> str:
    """torch's version in `interpreter`; LaunchError when torch is missing or unsupported, or
    (needs_package: the stand-in is this package's own) when npu_migrate cannot be imported."""
    try:
        proc = subprocess.run([interpreter, "-c", _PROBE], env=dict(env), cwd=str(cwd),
                              capture_output=True, text=True, timeout=60, check=False)
    except (OSError, subprocess.SubprocessError) as exc:
        raise LaunchError(f"cannot run the interpreter {interpreter}: {exc}") from None
    lines = proc.stdout.splitlines()
    words = lines[0].split() if lines else []
    if proc.returncode != 0 or not words:
        raise LaunchError(f"cannot run the interpreter {interpreter} (exit {proc.returncode}): "
                          f"{tail(proc.stderr, 5).strip()}")
    supported = supported_torch()
    releases = " or ".join(supported)
    if words[0] == "missing":
        raise LaunchError(f"torch is not installed for {interpreter}, which runs the command; "
                          f"install torch {releases} there, or run npu-migrate from the environment "
                          f"that has torch")
    if words[0] != "torch":
        raise LaunchError(f"cannot look up torch in {interpreter}: {proc.stdout.strip()}")
    version = words[1] if len(words) > 1 else "unknown"
    if version != "unknown" and release_of(version) not in supported:
        raise LaunchError(f"torch {version} in {interpreter} is not supported by the virtual device, "
                          f"which runs on torch {releases}")
    if needs_package and lines[-1:] != ["npu_migrate yes"]:
        raise LaunchError(f"the virtual device's torch_npu imports npu_migrate, which {interpreter} (it runs "
                          f"the command) cannot import: install npu-migrate into that environment, or "
                          f"run it from there")
    return version


def preflight(cmd: Sequence[str], env: Mapping[str, str], cwd: Path, site: Path | None = None) -> str:
    """Everything that can be checked before a run: the command exists and, for a run on the
    virtual device (`site`, its folder), the device is there and the interpreter running the
    command has a supported torch. The executable; LaunchError otherwise."""
    if site is not None:
        problem = site_problem(site)
        if problem:
            raise LaunchError(problem)
    executable = resolve_command(cmd, env, cwd)
    if site is not None:
        interpreter = interpreter_of(executable, env)
        if interpreter is not None:
            check_torch(interpreter, env, cwd, needs_package=site == DEFAULT_SITE)
    return executable


# ------------------------------------------------------------------------------------ runs


def tail(text: str, lines: int = 20) -> str:
    """The last `lines` lines of text."""
    return "\n".join(text.splitlines()[-lines:])


def exit_status(returncode: int) -> int:
    """A process's exit code as a shell gives it: 128+N when signal N killed it."""
    return 128 - returncode if returncode < 0 else returncode


def run_inherited(cmd: Sequence[str], env: Mapping[str, str], cwd: Path | None = None,
                  executable: str | None = None) -> int:
    """Run cmd with this process's standard streams; its exit status. While it runs, Ctrl-C goes
    to the command (the terminal signals its whole process group) and this process only waits
    for it to end. The handler that swallows SIGINT here is a function, not SIG_IGN: exec resets
    caught signals to their default, so the command gets Ctrl-C as it would without us."""
    previous = None
    try:
        previous = signal.signal(signal.SIGINT, _wait_for_command)
    except ValueError:  # not the main thread
        previous = None
    try:
        try:
            proc = subprocess.Popen(list(cmd), env=dict(env), cwd=None if cwd is None else str(cwd),
                                    executable=executable)
        except OSError as exc:
            raise LaunchError(f"cannot start {cmd[0]}: {exc.strerror or exc}") from None
        returncode = proc.wait()
    finally:
        if previous is not None:
            signal.signal(signal.SIGINT, previous)
    return exit_status(returncode)


def _wait_for_command(_signum, _frame) -> None:
    """SIGINT while the command runs: the command got it too and decides when to end."""


@dataclass
class RunResult:
    """One captured run."""

    returncode: int | None  # None: killed at the time limit
    stdout: bytes
    stderr: bytes
    seconds: float

    @property
    def timed_out(self) -> bool:
        return self.returncode is None

    def stderr_tail(self, lines: int = 20) -> str:
        return tail(self.stderr.decode("utf-8", "replace"), lines)


def run_captured(cmd: Sequence[str], env: Mapping[str, str], cwd: Path, timeout: float | None = None,
                 executable: str | None = None) -> RunResult:
    """Run cmd in cwd with its output captured, in a session of its own so that at the time limit
    the whole process group (torchrun's workers too) is killed. LaunchError when it cannot start."""
    start = time.perf_counter()
    posix = os.name == "posix"
    try:
        proc = subprocess.Popen(list(cmd), env=dict(env), cwd=str(cwd), executable=executable,
                                stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                start_new_session=posix)
    except OSError as exc:
        raise LaunchError(f"cannot start {cmd[0]} in {cwd}: {exc.strerror or exc}") from None
    try:
        out, err = proc.communicate(timeout=timeout)
        code: int | None = exit_status(proc.returncode)
    except subprocess.TimeoutExpired:
        _kill(proc, posix)
        out, err = proc.communicate()
        code = None
    except BaseException:  # Ctrl-C: never leave the command running
        _kill(proc, posix)
        proc.wait()
        raise
    return RunResult(code, out or b"", err or b"", time.perf_counter() - start)


def _kill(proc: subprocess.Popen, posix: bool) -> None:
    try:
        if posix:
            os.killpg(proc.pid, signal.SIGKILL)
        else:  # pragma: no cover
            proc.kill()
    except (ProcessLookupError, PermissionError):
        pass
