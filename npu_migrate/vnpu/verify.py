"""`npu-migrate verify PATH -- CMD`: run CMD in the original project on the CPU and in its migrated
copy on the virtual device, and compare what they print (or a file they write).

    preflight (CMD found in PATH, the virtual device present, torch in CMD's interpreter)
    -> migrated copy (`npu-migrate PATH --output-dir TMP`, unless --migrated DIR names one)
    -> original run: cwd PATH, the CPU environment (launch.cpu_env)
    -> migrated run: cwd the copy (the same folder inside it), the virtual device (launch.vnpu_env)
    -> compare stdout, or --compare FILE (relative to each run's folder), line by line

Exit codes: 0 the outputs match; 1 they differ (a migrated run that fails or outlasts --timeout
while the original succeeded is a difference); 2 nothing to compare: a run cannot start, the
original does not run on the CPU (fails, or outlasts --timeout), the migration fails, or the
original run does not produce --compare FILE.

A temporary copy is removed when the outputs match and kept (its folder printed) when they
differ, so the difference can be looked at.
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from . import launch
from .launch import LaunchError, RunResult

MATCH, DIFFER, FAILED = 0, 1, 2
TAIL_LINES = 20


@dataclass(frozen=True)
class VerifyRequest:
    path: Path  # the original project
    cmd: tuple[str, ...]
    migrated: Path | None = None  # an existing migrated copy; None: make one
    compare: str | None = None  # a file relative to each run's folder; None: stdout
    timeout: float | None = None  # seconds per run
    npus: int | None = None


class VerifyFailed(Exception):
    """Nothing to compare (exit 2); the message says why."""

    def __init__(self, message: str, detail: str = "") -> None:
        super().__init__(message)
        self.detail = detail


@dataclass
class Comparison:
    same: bool
    line: int = 0  # 1-based number of the first differing line
    original: str | None = None  # its text; None: the output ended before it
    migrated: str | None = None
    lines: int = 0  # lines compared when they match
    note: str = ""


def compare_outputs(original: bytes, migrated: bytes) -> Comparison:
    """Line by line; the first line that differs. A line whose text is the same but whose end is
    not (CRLF against LF, a final newline missing) differs too, with a note saying so."""
    a = original.decode("utf-8", "replace").splitlines(keepends=True)
    b = migrated.decode("utf-8", "replace").splitlines(keepends=True)
    for i in range(max(len(a), len(b))):
        left = a[i] if i < len(a) else None
        right = b[i] if i < len(b) else None
        if left != right:
            left_text, right_text = _text(left), _text(right)
            note = "the same text; the line endings differ" if left_text == right_text else ""
            return Comparison(False, i + 1, left_text, right_text, note=note)
    if original != migrated:  # the same text after decoding: bytes that are not UTF-8
        return Comparison(False, 1, None, None, note="the bytes differ where they are not UTF-8")
    return Comparison(True, lines=len(a))


def _text(line: str | None) -> str | None:
    """A line without its end."""
    if line is None:
        return None
    parts = line.splitlines()
    return parts[0] if parts else ""


def migrated_folder(path: Path) -> tuple[Path, Path]:
    """(the project root that `npu-migrate PATH --output-dir` copies, PATH relative to it): the copy
    holds the whole root, and the migrated run starts in the same folder inside it."""
    from ..config import ConfigError
    from ..config import resolve as resolve_config
    from ..discover import DiscoveryError
    from ..runplan import common_folder, resolve_root

    try:
        common = common_folder((str(path),))
        cfg = resolve_config(common, None, False)
        root = resolve_root(common, cfg.root, (str(path),))
        return root, path.resolve().relative_to(root.resolve())
    except (ConfigError, DiscoveryError, ValueError, OSError):
        return path, Path(".")


def migrate_copy(path: Path, target: Path) -> subprocess.CompletedProcess:
    """`python -m npu_migrate PATH --output-dir TARGET` in a process of its own (its exit is its own;
    findings remaining, exit 1, are fine)."""
    env = dict(os.environ)
    package_parent = str(Path(__file__).resolve().parents[2])
    env["PYTHONPATH"] = os.pathsep.join(p for p in (package_parent, env.get("PYTHONPATH")) if p)
    return subprocess.run(
        [sys.executable, "-m", "npu_migrate", str(path), "--output-dir", str(target), "--quiet", "--no-color"],
        env=env, cwd=str(path), capture_output=True, text=True, check=False,
    )


def _stamp(file: Path) -> tuple[int, int] | None:
    try:
        st = file.stat()
    except OSError:
        return None
    return st.st_mtime_ns, st.st_size


def _seconds(run: RunResult) -> str:
    return f"{run.seconds:.2f} s"


def _status(run: RunResult, timeout: float | None) -> str:
    if run.timed_out:
        return f"killed after {timeout:g} s (--timeout)"
    return f"exit {run.returncode} in {_seconds(run)}"


def _indent(text: str) -> str:
    return "\n".join("    " + line for line in text.splitlines()) if text.strip() else "    (empty)"


@dataclass
class _Temp:
    """The temporary folder of a run's migrated copy, and whether to keep it."""

    folder: Path | None = None
    keep: bool = False


def verify(req: VerifyRequest, echo: Callable[[str], None], progress: Callable[[str], None]) -> int:
    """Run the check; print the summary with `echo` (stdout) and progress lines and errors with
    `progress` (stderr); the exit code (0 match, 1 differ, 2 failure)."""
    temp = _Temp()
    try:
        return _verify(req, echo, progress, temp)
    except VerifyFailed as exc:
        temp.keep = False
        progress(f"error: {exc}")
        if exc.detail:
            progress(exc.detail)
        return FAILED
    finally:
        if temp.folder is not None:
            if temp.keep:
                progress(f"migrated copy kept in {temp.folder}")
            else:
                shutil.rmtree(temp.folder, ignore_errors=True)


def _verify(req: VerifyRequest, echo, progress, temp: _Temp) -> int:
    path = req.path.absolute()
    cmd = tuple(req.cmd)
    shown = shlex.join(cmd)
    cpu = launch.cpu_env()
    device = launch.vnpu_env(req.npus)
    site = launch.site_dir()
    try:
        executable = launch.preflight(cmd, cpu, path)
        launch.preflight(cmd, device, path, site)
    except LaunchError as exc:
        raise VerifyFailed(str(exc)) from None

    if req.migrated is not None:
        migrated = req.migrated.absolute()
        progress(f"using the migrated copy {migrated}")
    else:
        temp.folder = Path(tempfile.mkdtemp(prefix="npu-migrate-verify-"))
        root, inside = migrated_folder(path)
        copy = temp.folder / (root.name or "project")
        progress(f"migrating {root} into {copy} ...")
        proc = migrate_copy(path, copy)
        if proc.returncode not in (0, 1) or not copy.is_dir():
            raise VerifyFailed(f"the migration failed: exit {proc.returncode}",
                               _indent(launch.tail(proc.stderr + proc.stdout, TAIL_LINES)))
        migrated = copy / inside
    try:
        migrated_exe = launch.preflight(cmd, device, migrated, site)
    except LaunchError as exc:
        raise VerifyFailed(f"in the migrated copy: {exc}") from None

    compare_file = Path(req.compare) if req.compare else None
    before_original = _stamp(path / compare_file) if compare_file else None
    progress(f"running original on the CPU: {shown}  (in {path}) ...")
    try:
        original = launch.run_captured(cmd, cpu, path, req.timeout, executable)
    except LaunchError as exc:
        raise VerifyFailed(str(exc)) from None
    if original.timed_out:
        raise VerifyFailed(f"the original does not run on the CPU: killed after {req.timeout:g} s (--timeout)",
                           _indent(original.stderr_tail(TAIL_LINES)))
    if original.returncode != 0:
        raise VerifyFailed(f"the original does not run on the CPU: exit {original.returncode}",
                           "stderr (last lines):\n" + _indent(original.stderr_tail(TAIL_LINES)))

    before_migrated = _stamp(migrated / compare_file) if compare_file else None
    count = device[launch.ENV_COUNT]
    progress(f"running migrated on the virtual NPU ({count} device{'' if count == '1' else 's'}): {shown}  "
             f"(in {migrated}) ...")
    try:
        result = launch.run_captured(cmd, device, migrated, req.timeout, migrated_exe)
    except LaunchError as exc:
        raise VerifyFailed(f"in the migrated copy: {exc}") from None

    echo(f"original (CPU):         {_status(original, req.timeout)}")
    echo(f"migrated (virtual NPU): {_status(result, req.timeout)}")
    temp.keep = True
    if result.timed_out or result.returncode != 0:
        echo("DIFFER: the migrated run failed while the original succeeded")
        echo("stderr of the migrated run (last lines):")
        echo(_indent(result.stderr_tail(TAIL_LINES)))
        return DIFFER

    what = "stdout"
    if compare_file is not None:
        what = str(compare_file)
        # A file the run did not write (there before, same time and size after) is not its output:
        # a stale copy must not make a match.
        first = _read(path / compare_file)
        if first is None or (before_original is not None and before_original == _stamp(path / compare_file)):
            raise VerifyFailed(f"the original run wrote no {compare_file} (in {path})"
                               + (" (the file there is from before the run)" if first is not None else ""))
        second = _read(migrated / compare_file)
        if second is None or (before_migrated is not None and before_migrated == _stamp(migrated / compare_file)):
            echo(f"DIFFER: the migrated run wrote no {compare_file} (in {migrated})"
                 + (" (the file there is from before the run)" if second is not None else ""))
            return DIFFER
    else:
        first, second = original.stdout, result.stdout
    outcome = compare_outputs(first, second)
    if outcome.same:
        echo(f"{what}: MATCH ({outcome.lines} line{'' if outcome.lines == 1 else 's'})")
        temp.keep = False
        return MATCH
    echo(f"{what}: DIFFER at line {outcome.line}")
    column = _first_column(outcome.original, outcome.migrated)
    echo(f"  original: {_line(outcome.original, column)}")
    echo(f"  migrated: {_line(outcome.migrated, column)}")
    if column is not None and not outcome.note:
        echo(f"  (from column {column + 1})")
    if outcome.note:
        echo(f"  ({outcome.note})")
    return DIFFER


SHOWN_CHARS = 160  # a longer differing line is shown around its first difference


def _first_column(a: str | None, b: str | None) -> int | None:
    """0-based index of the first character where two lines part; None when one is missing."""
    if a is None or b is None or a == b:
        return None
    return next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))


def _line(text: str | None, column: int | None = None) -> str:
    """A line as shown in the summary: as is, or quoted when blank, padded or unprintable; a long
    one cut to SHOWN_CHARS around `column`."""
    if text is None:
        return "(end of output)"
    if len(text) > SHOWN_CHARS:
        start = max(0, min((column or 0) - SHOWN_CHARS // 2, len(text) - SHOWN_CHARS))
        cut = text[start:start + SHOWN_CHARS]
        return (f"[{start} characters] " if start else "") + _plain(cut) + (
            f" [{len(text) - start - SHOWN_CHARS} more characters]" if start + SHOWN_CHARS < len(text) else "")
    return _plain(text)


def _plain(text: str) -> str:
    return text if text and text.strip() == text and text.isprintable() else repr(text)


def _read(file: Path) -> bytes | None:
    try:
        return file.read_bytes()
    except OSError:
        return None


def run_verify(path: Path, cmd: Sequence[str], migrated: Path | None = None, compare: str | None = None,
               timeout: float | None = None, npus: int | None = None,
               echo: Callable[[str], None] = print, progress: Callable[[str], None] = print) -> int:
    """Convenience entry for scripts and tests."""
    return verify(VerifyRequest(Path(path), tuple(cmd), migrated, compare, timeout, npus), echo, progress)
