"""Which line of the user's program caused an error on the virtual NPU.

An error raised inside torch (a leftover ``"cuda"`` device) or inside the virtual device (an
operation mixing ``npu`` and ``cpu`` tensors) is reported against the innermost frame that is
not part of torch, the virtual device, the standard library, installed packages or the injected
shim (``npu_compat``): the user's file and line. It is attached to the exception as a PEP 678
note, so the exception's own message stays exactly PyTorch's.
"""

from __future__ import annotations

import os
import sys
import sysconfig
import traceback

NOTE_PREFIX = "[virtual NPU] raised by "

_internal: tuple[str, ...] | None = None


def _internal_dirs() -> tuple[str, ...]:
    global _internal
    if _internal is None:
        dirs = {os.path.dirname(os.path.abspath(__file__))}
        try:
            import torch

            dirs.add(os.path.dirname(os.path.abspath(torch.__file__)))
        except ImportError:  # pragma: no cover
            pass
        for key in ("stdlib", "platstdlib", "purelib", "platlib", "scripts"):
            path = sysconfig.get_paths().get(key)
            if path:
                dirs.add(os.path.abspath(path))
        _internal = tuple(sorted(d.rstrip(os.sep) + os.sep for d in dirs))
    return _internal


def is_internal(filename: str) -> bool:
    if not filename or filename.startswith("<"):
        return True
    path = os.path.abspath(filename)
    if f"{os.sep}npu_compat{os.sep}" in path or f"{os.sep}site-packages{os.sep}" in path:
        return True
    return path.startswith(_internal_dirs())


def user_frame_of_stack(frame=None) -> tuple[str, int] | None:
    """(file, line) of the innermost user frame of the current call stack."""
    frame = frame or sys._getframe(1)
    while frame is not None:
        if not is_internal(frame.f_code.co_filename):
            return frame.f_code.co_filename, frame.f_lineno
        frame = frame.f_back
    return None


def user_frame_of_traceback(tb) -> tuple[str, int] | None:
    """(file, line) of the innermost user frame of a traceback."""
    found = None
    for summary in traceback.extract_tb(tb):
        if not is_internal(summary.filename):
            found = (summary.filename, summary.lineno)
    return found


def add_note(exc: BaseException, where: tuple[str, int] | None) -> None:
    if where is None:
        return
    note = f"{NOTE_PREFIX}{where[0]}, line {where[1]}"
    notes = getattr(exc, "__notes__", None) or []
    if note in notes:
        return
    if hasattr(exc, "add_note"):
        exc.add_note(note)
    else:  # Python 3.10: no PEP 678; the note is printed by the excepthook below
        exc.__notes__ = [*notes, note]


def report_user_frame(exc: BaseException) -> str | None:
    """Attach the user's ``file, line`` to ``exc`` (a note) and return ``"file:line"``.

    The launcher may call it on any exception; the virtual device's excepthook calls it for
    uncaught ones.
    """
    where = user_frame_of_traceback(exc.__traceback__)
    if where is None:
        notes = [n for n in getattr(exc, "__notes__", None) or [] if n.startswith(NOTE_PREFIX)]
        if notes:
            file, _, line = notes[-1][len(NOTE_PREFIX):].rpartition(", line ")
            return f"{file}:{line}"
        return None
    add_note(exc, where)
    return f"{where[0]}:{where[1]}"


def install_excepthook() -> None:
    """Uncaught exceptions get the user's file and line as a note (once per process)."""
    previous = sys.excepthook
    if getattr(previous, "_vnpu", False):
        return

    def hook(exc_type, exc, tb):
        try:
            if exc is not None and exc.__traceback__ is None:
                exc.__traceback__ = tb
            report_user_frame(exc)
            if sys.version_info < (3, 11) and getattr(exc, "__notes__", None):
                previous(exc_type, exc, tb)
                for note in exc.__notes__:
                    print(note, file=sys.stderr)
                return
        except Exception:  # noqa: BLE001, S110  (never hide the original error)
            pass
        previous(exc_type, exc, tb)

    hook._vnpu = True
    sys.excepthook = hook
