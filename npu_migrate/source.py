"""Writing migrated files: atomic (temp file + rename), mode kept, never over a file that changed,
never through a symbolic link, and never half-done when the user presses Ctrl-C."""

from __future__ import annotations

import errno
import os
import signal
import stat
import tempfile
import threading
import time
from pathlib import Path

TEMP_SUFFIX = ".npu-migrate.tmp"
# Test-only hook: seconds to sleep in each write (temp file written, not yet renamed), so that a
# test can interrupt a write run half-way (tests/test_bad_input.py). Not for users; unset normally.
WRITE_DELAY_ENV = "NPU_MIGRATE_TEST_WRITE_DELAY"


# The most a run reads of one input file (source, notebook, baseline, pyproject.toml, ...): a
# larger file is reported, never read, so that a stray multi-gigabyte file cannot exhaust memory.
MAX_INPUT_BYTES = 64 * 1024 * 1024


class WriteError(Exception):
    pass


class NotRegularFile(OSError):
    """An input is a FIFO, a device, a socket or a folder: never opened, never read."""

    def __init__(self, path) -> None:
        super().__init__(errno.EINVAL, "not a regular file", str(path))


class FileTooLarge(OSError):
    def __init__(self, path, size: int, limit: int) -> None:
        super().__init__(errno.EFBIG, f"too large ({size} bytes; the limit is {_mib(limit)})", str(path))


def _mib(limit: int) -> str:
    return f"{limit // (1024 * 1024)} MiB" if limit >= 1024 * 1024 else f"{limit} bytes"


_READ_FLAGS = (os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0)
               | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_BINARY", 0))


def read_regular(path, limit: int = MAX_INPUT_BYTES) -> bytes:
    """The bytes of a regular file of at most `limit` bytes; OSError (NotRegularFile, FileTooLarge,
    FileNotFoundError, ...) otherwise. A FIFO or a device is never opened (stat first), and the
    open itself is non-blocking, so a file swapped for a FIFO in between cannot hang the run
    either; a file that grows past the limit while it is read is refused too."""
    try:
        st = os.stat(path)
    except ValueError as exc:  # an embedded NUL byte
        raise OSError(errno.EINVAL, str(exc), str(path)) from None
    if not stat.S_ISREG(st.st_mode):
        raise NotRegularFile(path)
    if st.st_size > limit:
        raise FileTooLarge(path, st.st_size, limit)
    fd = os.open(path, _READ_FLAGS)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise NotRegularFile(path)
        chunks, total = [], 0
        while True:
            chunk = os.read(fd, min(1 << 20, limit + 1 - total))
            if not chunk:
                break
            chunks.append(chunk)
            total += len(chunk)
            if total > limit:
                raise FileTooLarge(path, total, limit)
        return b"".join(chunks)
    finally:
        os.close(fd)


def output_problem(path) -> str | None:
    """Why a file must not be written at `path` (None: it may). Only a regular file is replaced,
    and only in a folder that exists: a FIFO, a device or a link is never written to or through,
    and no folder is created on the way."""
    path = Path(path)
    parent = path.parent
    if not parent.is_dir():
        return f"{path}: the folder {parent} does not exist; create it first"
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return None
    except OSError as exc:
        return f"{path}: cannot be checked ({exc.strerror or exc})"
    if stat.S_ISLNK(st.st_mode):
        return f"{path}: is a symbolic link; not written through it"
    if not stat.S_ISREG(st.st_mode):
        return f"{path}: not a regular file; not overwritten"
    return None


def write_atomic(path: Path, data: bytes, expected: bytes | None = None) -> None:
    """Replace `path` with `data` in one rename.

    `expected` is what the file held when it was read; if it holds something else now (edited
    while the run went on), nothing is written and WriteError says so. A symbolic link or a
    special file at `path` is never replaced or written through.
    """
    path = Path(path)
    if path.is_symlink():
        raise WriteError(f"{path}: is a symbolic link; not written through it")
    try:
        st = path.stat()
        if not stat.S_ISREG(st.st_mode):
            raise WriteError(f"{path}: not a regular file; not overwritten")
        if not st.st_mode & stat.S_IWUSR or not os.access(path, os.W_OK):
            raise WriteError(f"{path}: read-only; not overwritten (make it writable to migrate it)")
        if expected is not None and path.read_bytes() != expected:
            raise WriteError(f"{path}: changed on disk during the run; not overwritten")
    except FileNotFoundError:
        st = None
    # A short name (".<8 random>.npu-migrate.tmp"), in the same folder for an atomic rename: the
    # target's own name in it would exceed the 255-byte limit of a name for long file names.
    fd, tmp = tempfile.mkstemp(prefix=".", suffix=TEMP_SUFFIX, dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        write_delay_hook()  # test-only: widen the window in which a temp file exists
        if expected is not None and st is not None and _changed_since(path, st):
            raise WriteError(f"{path}: changed on disk during the run; not overwritten")
        if st is not None:
            os.chmod(tmp, st.st_mode & 0o7777)
        else:
            os.chmod(tmp, 0o666 & ~_umask())  # mkstemp makes 0600; a new file gets the usual mode
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def _changed_since(path: Path, before: os.stat_result) -> bool:
    """An edit while the temp file was written: the last check before the rename."""
    try:
        now = os.stat(path)
    except OSError:
        return True
    return (now.st_mtime_ns, now.st_size, now.st_ino) != (before.st_mtime_ns, before.st_size, before.st_ino)


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def write_delay_hook() -> None:
    """Sleep as long as the test-only WRITE_DELAY_ENV asks (nothing when it is unset)."""
    delay = os.environ.get(WRITE_DELAY_ENV)
    if delay:
        time.sleep(float(delay))



class InterruptGuard:
    """Defer SIGINT while files are written: the file being written is finished (old or new,
    never half), then the run stops before the next one (`requested` turns true). A second
    SIGINT raises KeyboardInterrupt at once; the rename keeps that file old or new too."""

    def __init__(self) -> None:
        self.requested = False
        self._installed = False
        self._previous = None

    def __enter__(self) -> InterruptGuard:
        if threading.current_thread() is threading.main_thread():
            self._previous = signal.signal(signal.SIGINT, self._handle)
            self._installed = True
        return self

    def _handle(self, signum, frame) -> None:
        if self.requested:
            raise KeyboardInterrupt
        self.requested = True

    def __exit__(self, *exc) -> bool:
        if self._installed:
            previous = self._previous if self._previous is not None else signal.default_int_handler
            signal.signal(signal.SIGINT, previous)
        return False
