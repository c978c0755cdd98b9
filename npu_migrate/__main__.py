"""`python -m npu_migrate` is the `npu-migrate` command."""

import os
import sys


def _drop_current_folder() -> None:
    """`python -m` puts the current folder first on sys.path, so a run inside a project would
    import the project's click.py, rich.py or typing.py instead of the real ones, and run them.
    Drop it before anything else is imported, unless npu_migrate itself was imported from there
    (running from the tool's own checkout). The console script `npu-migrate` and `python -P`
    (PYTHONSAFEPATH) do not put it there."""
    if not sys.path or getattr(sys.flags, "safe_path", False):  # (3.11+)
        return
    try:
        first = os.path.realpath(sys.path[0] or os.curdir)
        if first != os.path.realpath(os.getcwd()):
            return
    except OSError:  # the current folder is gone
        return
    if os.path.dirname(os.path.dirname(os.path.realpath(__file__))) != first:
        del sys.path[0]


_drop_current_folder()

try:
    from .cli import run  # noqa: E402  (after the guard)
except KeyboardInterrupt:  # Ctrl-C while click, rich and libcst load
    sys.stderr.write("interrupted\n")
    sys.exit(130)

run()
