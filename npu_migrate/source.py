"""Writing migrated files: atomic (temp file + rename), mode kept, never over a file that changed."""

from __future__ import annotations

import os
import stat
import tempfile
from pathlib import Path


class WriteError(Exception):
    pass


def write_atomic(path: Path, data: bytes, expected: bytes | None = None) -> None:
    """Replace `path` with `data` in one rename.

    `expected` is what the file held when it was read; if it holds something else now (edited
    while the run went on), nothing is written and WriteError says so.
    """
    path = Path(path)
    try:
        st = path.stat()
        if not st.st_mode & stat.S_IWUSR or not os.access(path, os.W_OK):
            raise WriteError(f"{path}: read-only; not overwritten (make it writable to migrate it)")
        if expected is not None and path.read_bytes() != expected:
            raise WriteError(f"{path}: changed on disk during the run; not overwritten")
    except FileNotFoundError:
        st = None
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".npu-migrate.tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        if st is not None:
            os.chmod(tmp, st.st_mode & 0o7777)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
