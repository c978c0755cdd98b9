"""A writing run refuses a git work tree with uncommitted changes (`--allow-dirty` overrides), so
that the migration is a diff of its own: reviewable with `git diff`, revertible with
`git checkout`/`git restore`, never mixed with the user's unfinished edits.

What counts, under the run's root:
- a tracked file with staged or unstaged changes (added, modified, deleted, renamed), whether
  the run would rewrite it or not: its edits would end up in the same diff as the migration;
- an untracked file the run would rewrite: git holds no copy of it, so the original could not be
  restored. Untracked files the run leaves alone do not count (nor does the shim, ours to write).
Outside a git work tree (or without git) there is nothing to check.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable

from .gitdiff import toplevel
from .safegit import GitError, git

SHOWN = 10  # files named in the message; the rest are counted


@dataclass
class WorkTree:
    top: Path
    changed: list[str] = field(default_factory=list)  # tracked, with uncommitted changes
    untracked: set[Path] = field(default_factory=set)  # absolute, resolved


def status(root: Path) -> WorkTree | None:
    """The uncommitted state under root, or None outside a git work tree."""
    top = toplevel(root)
    if top is None:
        return None
    try:
        out = git(["status", "--porcelain=v1", "-z", "--untracked-files=all", "--", "."], root)
    except GitError:
        return None
    tree = WorkTree(top=top)
    fields = out.split("\0")
    index = 0
    while index < len(fields):
        entry = fields[index]
        index += 1
        if len(entry) < 4:
            continue
        state, path = entry[:2], entry[3:]  # porcelain paths are relative to the top
        if "R" in state or "C" in state:
            index += 1  # a rename or copy is followed by its source path
        if state == "??":
            tree.untracked.add((top / path).resolve())
        elif state != "!!":
            tree.changed.append(path)
    return tree


def _listing(paths: list[str]) -> str:
    shown = [f"  {p}" for p in paths[:SHOWN]]
    if len(paths) > SHOWN:
        shown.append(f"  ... and {len(paths) - SHOWN} more")
    return "\n".join(shown)


def refusal_for_changes(tree: WorkTree, root: Path) -> str | None:
    """The error message when tracked files under root have uncommitted changes."""
    if not tree.changed:
        return None
    return (
        f"{root} is in a git work tree with uncommitted changes; not migrating in place, so that "
        f"the migration is a diff of its own (reviewable, revertible with git):\n"
        f"{_listing(sorted(tree.changed))}\n"
        "Commit or stash them first, or pass --allow-dirty (or --output DIR to write a migrated copy)."
    )


def refusal_for_untracked(tree: WorkTree, root: Path, targets: Iterable[Path]) -> str | None:
    """The error message when the run would rewrite files git does not track."""
    hits = sorted(
        p.relative_to(tree.top).as_posix() for p in (Path(t).resolve() for t in targets) if p in tree.untracked
    )
    if not hits:
        return None
    return (
        f"{root}: the run would rewrite files that git does not track, so their originals could not "
        f"be restored:\n{_listing(hits)}\n"
        "Commit them first (`git add` + `git commit`), or pass --allow-dirty "
        "(or --output DIR to write a migrated copy)."
    )
