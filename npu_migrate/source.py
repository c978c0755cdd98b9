"""Writing migrated files: atomic (temp file + rename), mode kept, never over a file that changed,
never through a symbolic link, and never half-done when the user presses Ctrl-C."""

from __future__ import annotations

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


class WriteError(Exception):
    pass


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
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=TEMP_SUFFIX, dir=path.parent)
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
