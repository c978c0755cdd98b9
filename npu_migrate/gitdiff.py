"""`--diff-base REF`: the lines added or changed since merge-base(REF, HEAD).

The comparison is merge-base -> working tree (`git diff -U0 <merge-base>`), so committed,
staged and unstaged edits all count, and an untracked file counts as entirely new. A finding is
on a changed line when the line where its construct starts was added or changed.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Optional

from .safegit import GitError, git

HUNK = re.compile(r"^@@ -\d+(?:,\d+)? \+(\d+)(?:,(\d+))? @@")
WHOLE_FILE = None  # a file that is new as a whole


def _git(args: list[str], cwd: Path) -> str:
    return git(args, cwd)  # safegit: nothing the repository configures runs


def toplevel(folder: Path) -> Optional[Path]:
    try:
        return Path(_git(["rev-parse", "--show-toplevel"], folder).strip())
    except GitError:
        return None


def tracked_files(folder: Path) -> Optional[set[str]]:
    """Paths (relative to `folder`, POSIX) that git tracks or has staged under `folder`; None
    outside a git work tree."""
    try:
        out = _git(["ls-files", "-z", "--cached", "--", "."], folder)
    except GitError:
        return None
    return {name for name in out.split("\0") if name}


def changed_lines(ref: str, folder: Path) -> dict[Path, Optional[set[int]]]:
    """Absolute path -> changed line numbers (None: the whole file is new), for the work tree
    that contains `folder`."""
    top = toplevel(folder)
    if top is None:
        raise GitError(f"--diff-base needs a git work tree; {folder} is not in one")
    try:
        base = _git(["merge-base", ref, "HEAD"], top).strip()
    except GitError as exc:
        raise GitError(
            f"cannot find the merge base of {ref!r} and HEAD ({exc}); "
            "in CI, fetch the history (actions/checkout with fetch-depth: 0)"
        ) from None
    diff = _git(["diff", "-U0", "--no-color", "-M", base, "--"], top)  # + safegit's diff flags
    out: dict[Path, Optional[set[int]]] = {}
    current: Optional[set[int]] = None
    for line in diff.splitlines():
        if line.startswith("+++ "):
            name = line[4:]
            if name == "/dev/null":
                current = None  # a deletion: nothing added
                continue
            if name.startswith("b/"):
                name = name[2:]
            current = out.setdefault((top / name).resolve(), set())
            continue
        match = HUNK.match(line)
        if match and current is not None:
            start = int(match.group(1))
            count = int(match.group(2)) if match.group(2) is not None else 1
            current.update(range(start, start + count))
    untracked = _git(["ls-files", "-z", "--others", "--exclude-standard"], top)
    for name in untracked.split("\0"):
        if name:
            out[(top / name).resolve()] = WHOLE_FILE
    return out


def is_changed(changes: dict[Path, Optional[set[int]]], path: Path, line: int) -> bool:
    key = path.resolve()
    if key not in changes:
        return False
    lines = changes[key]
    return lines is WHOLE_FILE or line in lines
