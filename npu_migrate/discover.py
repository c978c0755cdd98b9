"""Which files a run looks at: git-aware, with the usual folders and user globs excluded."""

from __future__ import annotations

import fnmatch
import os
import stat
from pathlib import Path

from .safegit import GitError, git

# Folders never entered: VCS data, virtual environments, build output, caches.
SKIP_DIRS = frozenset({
    ".git", ".hg", ".svn", ".venv", "venv", ".env", "env", "__pycache__", "build", "dist",
    "node_modules", "site-packages", ".tox", ".nox", ".eggs", ".mypy_cache", ".pytest_cache",
    ".ruff_cache", ".ipynb_checkpoints",
})
# Folders a migrated copy (`--output`) leaves out: VCS data, virtual environments and caches only;
# build/, env/ and the rest may hold what the project needs to run.
COPY_SKIP_DIRS = frozenset({
    ".git", ".hg", ".svn", ".venv", "venv", "__pycache__", ".tox", ".nox", ".mypy_cache",
    ".pytest_cache", ".ruff_cache", ".ipynb_checkpoints",
})


class DiscoveryError(Exception):
    """The root cannot be used (missing, not a directory or file, unreadable)."""


def excluded(rel: str, patterns: tuple[str, ...]) -> bool:
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
        out = git(["ls-files", "-z", "--cached", "--others", "--exclude-standard", "--", "."], root, timeout=60)
    except GitError:
        return None
    names = sorted({p for p in out.split("\0") if p})
    # Nothing listed: the folder is empty, or git ignores all of it (a virtual environment or a
    # site-packages inside a work tree, named explicitly). Walking it is what the user asked for.
    return names or None


def _is_venv(path: Path) -> bool:
    return os.path.isfile(path / "pyvenv.cfg")  # False, not an error, in an unreadable folder


def _walk_files(root: Path, keep_dir=None, links: bool = False, notes: list[str] | None = None) -> list[str]:
    """Relative paths of the files under root, never entering a symbolic link. `keep_dir(parent,
    name)` decides which folders are entered (default: not SKIP_DIRS, eggs or venvs); with `links`,
    links to folders are listed too. Folders that cannot be read go to `notes`."""
    keep_dir = keep_dir or _discover_dir
    found = []

    def unreadable(exc: OSError) -> None:
        if notes is not None:
            notes.append(f"{exc.filename}: cannot read folder ({exc.strerror}); its files are left out")

    for dirpath, dirnames, filenames in os.walk(root, followlinks=False, onerror=unreadable):
        here = Path(dirpath)
        rel_dir = here.relative_to(root).as_posix()
        prefix = "" if rel_dir == "." else f"{rel_dir}/"
        linked = sorted(d for d in dirnames if (here / d).is_symlink())
        if links:
            found.extend(prefix + d for d in linked)
        dirnames[:] = sorted(d for d in dirnames if d not in linked and keep_dir(here, d))
        found.extend(prefix + name for name in sorted(filenames))
    return found


def _discover_dir(parent: Path, name: str) -> bool:
    return name not in SKIP_DIRS and not name.endswith(".egg-info") and not _is_venv(parent / name)


def _copy_dir(parent: Path, name: str) -> bool:
    return name not in COPY_SKIP_DIRS and not _is_venv(parent / name)


class _Ancestors:
    """Whether any folder on a relative path passes `test` (cached per folder). With os.path.islink:
    git's index can still list `a/b.py` after `a` became a link, and writing there would write
    through the link; with _is_venv: a virtual environment git does not ignore."""

    def __init__(self, root: Path, test) -> None:
        self.root, self.test = root, test
        self._cache: dict[str, bool] = {}

    def __call__(self, rel: str) -> bool:
        parts = rel.split("/")[:-1]
        for i in range(1, len(parts) + 1):
            folder = "/".join(parts[:i])
            if folder not in self._cache:
                self._cache[folder] = bool(self.test(self.root / folder))
            if self._cache[folder]:
                return True
        return False


def project_files(root: Path, notes: list[str] | None = None) -> list[str]:
    """Everything a copy of the project holds (`--output`), as relative paths: git's view (tracked
    and untracked-but-not-ignored) in a work tree, a walk elsewhere; VCS data, virtual environments
    and caches left out. Symbolic links are listed themselves, never entered; a listed folder (a
    submodule or a nested repository) is copied whole."""
    names = _git_files(root)
    if names is None:
        names = _walk_files(root, _copy_dir, links=True, notes=notes)
    through_link, in_venv = _Ancestors(root, os.path.islink), _Ancestors(root, _is_venv)
    out = []
    for rel in names:
        rel = rel.rstrip("/")
        if any(part in COPY_SKIP_DIRS for part in rel.split("/")):
            continue
        if through_link(rel) or in_venv(rel):
            continue
        out.append(rel)
    return sorted(out)


def is_target(rel: str) -> bool:
    """Files a run reads: Python sources, notebooks, and the scripts, configs, Dockerfiles, .env
    files and CUDA sources that textfiles.py scans (patterns.md G38)."""
    from .textfiles import target_kind  # lazy: textfiles pulls in the catalogue

    return rel.endswith((".py", ".ipynb")) or target_kind(rel) is not None


def discover(
    root: Path,
    exclude: tuple[str, ...] = (),
    shim_name: str | None = None,
    notes: list[str] | None = None,
) -> list[tuple[str, str]]:
    """(absolute path, relative path) of every file a run reads under root (`is_target`), sorted.

    Uses git's view (honours .gitignore) inside a work tree, a walk elsewhere. Symbolic links
    are never followed, neither to files nor to folders (so a link loop or a link out of the root
    is never entered): a linked file is left to its real location. Linked .py files and folders
    that cannot be read are named in `notes` when it is given.
    """
    if not root.exists():
        if os.path.lexists(root):
            raise DiscoveryError(f"{root}: a broken symbolic link or a symbolic link loop")
        raise DiscoveryError(f"{root}: no such file or directory")
    if not root.is_dir():
        raise DiscoveryError(f"{root}: not a directory")
    if not os.access(root, os.R_OK | os.X_OK):
        raise DiscoveryError(f"{root}: permission denied")
    names = _git_files(root)
    if names is None:
        names = _walk_files(root, notes=notes)
    excludes = tuple(exclude) + ((shim_name,) if shim_name else ())
    through_link = _Ancestors(root, os.path.islink)
    out = []
    for rel in names:
        if not is_target(rel):
            continue
        if any(part in SKIP_DIRS or part.endswith(".egg-info") for part in rel.split("/")[:-1]):
            continue
        if excluded(rel, excludes):
            continue
        path = root / rel
        if through_link(rel):
            continue
        try:
            mode = os.lstat(path).st_mode
        except (FileNotFoundError, NotADirectoryError):
            continue  # tracked but deleted
        except OSError as exc:  # its folder cannot be searched
            if notes is not None:
                notes.append(f"{path}: cannot be read ({exc.strerror}); skipped")
            continue
        if stat.S_ISLNK(mode):
            if notes is not None:
                notes.append(f"{path}: a symbolic link; not followed (migrate its target where it lives)")
            continue
        if stat.S_ISREG(mode):
            out.append((str(path), rel))
    return out
