"""`--output DIR`: write a migrated copy of the project and never touch the source tree.

The copy holds the whole project (`discover.project_files`: git's view in a work tree, else every
file but VCS data, virtual environments and caches), so it runs as the original does; migrated
files and the shim are written into it. It is built in a temporary folder beside DIR and renamed
to DIR at the end, so DIR holds a complete copy or does not exist: an interrupted or failed run
leaves nothing behind. DIR must be new or empty and outside the source tree; an earlier copy is
not refreshed in place (hand edits made in it would be lost): remove it to make a new one.
"""

from __future__ import annotations

import os
import secrets
import shutil
from dataclasses import dataclass, field
from pathlib import Path

from .discover import COPY_SKIP_DIRS, project_files
from .inject import inject_all
from .model import FileResult
from .source import TEMP_SUFFIX, InterruptGuard, write_delay_hook


class OutputError(Exception):
    """DIR cannot take the copy (inside the source, not empty, not a folder)."""


class Interrupted(Exception):
    def __init__(self, done: int, total: int) -> None:
        super().__init__(f"{done} of {total}")
        self.done, self.total = done, total


@dataclass
class CopyOutcome:
    files: int = 0  # files and links in the copy
    migrated: int = 0  # of which written in their migrated form
    shim: str = ""
    errors: list[str] = field(default_factory=list)


def check_target(out: Path, root: Path) -> Path:
    """The real path DIR stands for; OutputError unless it is a new or empty folder outside root."""
    target = Path(out).absolute().resolve()
    real_root = Path(root).resolve()
    if target == real_root or real_root in target.parents:
        raise OutputError(
            f"--output {out}: inside the source tree {root}; choose a folder outside it "
            "(the copy would otherwise be copied and migrated again)"
        )
    if target in real_root.parents:
        raise OutputError(f"--output {out}: holds the source tree {root}; choose a new or empty folder")
    if target.exists():
        if not target.is_dir():
            raise OutputError(f"--output {out}: exists and is not a folder")
        if any(target.iterdir()):
            raise OutputError(
                f"--output {out}: exists and is not empty; choose a new or empty folder "
                "(an earlier copy is not refreshed in place, so edits made in it are never lost: "
                "remove it to make a new one)"
            )
    return target


def write_copy(
    root: Path,
    target: Path,
    results: list[FileResult],
    shims: list[str],
    guard: InterruptGuard,
) -> CopyOutcome:
    """Copy the project at root to target with the changed results in their migrated form and the
    shim injected into each folder of `shims` (relative: `npu_compat`, `src/mypkg/npu_compat`). Raises Interrupted when guard saw SIGINT; target is then
    not created."""
    notes: list[str] = []
    migrated = {r.relpath: r for r in results if r.changed}
    names = sorted(set(project_files(root, notes)) | set(migrated))
    outcome = CopyOutcome(errors=list(notes))
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.parent / f".{target.name}.{secrets.token_hex(4)}{TEMP_SUFFIX}"
    os.mkdir(tmp)
    try:
        for rel in names:
            if guard.requested:
                raise Interrupted(outcome.migrated, len(migrated))
            try:
                wrote_new = _copy_one(root, tmp, rel, migrated.get(rel))
            except OSError as exc:
                outcome.errors.append(f"{rel}: not copied: {exc.strerror or exc}")
                continue
            except _Stale:
                outcome.errors.append(f"{rel}: changed on disk during the run; copied unmigrated")
                wrote_new = False
            outcome.files += 1
            if wrote_new:
                outcome.migrated += 1
                write_delay_hook()
        if guard.requested:
            raise Interrupted(outcome.migrated, len(migrated))
        outcome.shim = "; ".join(f"{line} in {target}" for line in inject_all(tmp, shims))
        _move_into_place(tmp, target)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return outcome


class _Stale(Exception):
    pass


def _copy_one(root: Path, tmp: Path, rel: str, result: FileResult | None) -> bool:
    """Copy one entry; True when it was written in its migrated form."""
    src, dst = root / rel, tmp / rel
    dst.parent.mkdir(parents=True, exist_ok=True)
    if src.is_symlink():
        os.symlink(os.readlink(src), dst)  # the link itself; never followed
        return False
    if src.is_dir():  # a submodule or a nested repository: copied whole, links kept as links
        shutil.copytree(src, dst, symlinks=True, ignore=shutil.ignore_patterns(*COPY_SKIP_DIRS))
        return False
    if not src.is_file():
        raise OSError(f"not a regular file: {src}")
    if result is None:
        shutil.copy2(src, dst)
        return False
    data = src.read_bytes()
    if data != result.original:
        shutil.copy2(src, dst)
        raise _Stale()
    with open(dst, "xb") as handle:
        handle.write(result.new)
    shutil.copymode(src, dst)
    return True


def _move_into_place(tmp: Path, target: Path) -> None:
    try:
        os.replace(tmp, target)  # POSIX: a new name, or over an empty folder
    except OSError:
        if target.is_dir() and not any(target.iterdir()):
            target.rmdir()
            os.replace(tmp, target)
        else:
            raise
