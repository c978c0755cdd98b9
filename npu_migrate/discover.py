"""Which files a run looks at: git-aware, with the usual folders and user globs excluded."""

from __future__ import annotations

import fnmatch
import os
import subprocess
from pathlib import Path

# Folders never entered: VCS data, virtual environments, build output, caches.
SKIP_DIRS = frozenset({
    ".git", ".hg", ".svn", ".venv", "venv", ".env", "env", "__pycache__", "build", "dist",
    "node_modules", "site-packages", ".tox", ".nox", ".eggs", ".mypy_cache", ".pytest_cache",
    ".ruff_cache", ".ipynb_checkpoints",
})


class DiscoveryError(Exception):
    """The root cannot be used (missing, not a directory or file, unreadable)."""


def _excluded(rel: str, patterns: tuple[str, ...]) -> bool:
    parts = rel.split("/")
    for pattern in patterns:
        pattern = pattern.rstrip("/")
        if fnmatch.fnmatch(rel, pattern) or any(fnmatch.fnmatch(p, pattern) for p in parts):
            return True
        if rel.startswith(pattern + "/"):
            return True
    return False


def _git_files(root: Path) -> list[str] | None:
    """Tracked and untracked-but-not-ignored files under root, or None outside a git work tree."""
    try:
        out = subprocess.run(
            ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard", "--", "."],
            cwd=root, capture_output=True, timeout=60, check=True,
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    return sorted({p for p in out.decode("utf-8", "surrogateescape").split("\0") if p})


def _is_venv(path: Path) -> bool:
    return (path / "pyvenv.cfg").is_file()


def _walk_files(root: Path) -> list[str]:
    found = []
    for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
        here = Path(dirpath)
        dirnames[:] = sorted(
            d for d in dirnames
            if d not in SKIP_DIRS and not d.endswith(".egg-info") and not _is_venv(here / d)
        )
        rel_dir = here.relative_to(root).as_posix()
        for name in sorted(filenames):
            found.append(name if rel_dir == "." else f"{rel_dir}/{name}")
    return found


def discover(root: Path, exclude: tuple[str, ...] = (), shim_name: str | None = None) -> list[tuple[str, str]]:
    """(absolute path, relative path) of every Python file under root, sorted.

    Uses git's view (honours .gitignore) inside a work tree, a walk elsewhere. Symbolic links
    are never followed: a linked file is left to its real location.
    """
    if not root.exists():
        raise DiscoveryError(f"{root}: no such file or directory")
    if not root.is_dir():
        raise DiscoveryError(f"{root}: not a directory")
    if not os.access(root, os.R_OK | os.X_OK):
        raise DiscoveryError(f"{root}: permission denied")
    names = _git_files(root)
    if names is None:
        names = _walk_files(root)
    excludes = tuple(exclude) + ((shim_name,) if shim_name else ())
    out = []
    for rel in names:
        if not rel.endswith(".py"):
            continue
        if any(part in SKIP_DIRS or part.endswith(".egg-info") for part in rel.split("/")[:-1]):
            continue
        if _excluded(rel, excludes):
            continue
        path = root / rel
        if path.is_symlink() or not path.is_file():
            continue
        out.append((str(path), rel))
    return out
