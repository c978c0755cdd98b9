"""A cache of per-file results, keyed by the file's content and everything that decides its result.

A warm `npu-migrate check` over a large tree should cost little more than reading the files:
an entry is reused only when all of these are equal to what produced it:

- the file's bytes (BLAKE2b digest of what the worker read, not of a stat: an edit that keeps
  size and mtime still misses);
- the tool: its version, plus a digest of the rule tables (`rules/*`) and of the engine's own
  source files, so an upgrade, an edited rule table or a development checkout never reuses
  results computed by other code;
- the options that decide one file's result: the enabled codes, the shim name, the opt-in script
  rewrite, and whether the file's folder is a package or holds torch_npu-aware code (both change
  how the file is migrated).

Where: `--cache-dir DIR`, else `$NPU_MIGRATE_CACHE_DIR`, else the user's cache folder
(`$XDG_CACHE_HOME/npu-migrate`, `~/.cache/npu-migrate`). Never inside the project by default,
so a dry run or `check` leaves the repository byte-identical. One JSON file per run root; JSON,
not pickle, so a cache file someone else wrote cannot run code. `--no-cache` (or
`NPU_MIGRATE_NO_CACHE=1`) turns it off. A cache that cannot be read or written is ignored: the
run goes on without it and the result is the same.
"""

from __future__ import annotations

import base64
import functools
import hashlib
import json
import os
import tempfile
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Optional

from . import __version__
from .findings import Finding

FORMAT = 1  # bump when the layout of a cache file changes
ENV_DIR = "NPU_MIGRATE_CACHE_DIR"
ENV_OFF = "NPU_MIGRATE_NO_CACHE"


def default_dir() -> Path:
    configured = os.environ.get(ENV_DIR)
    if configured:
        return Path(configured)
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "npu-migrate"


def disabled_by_env() -> bool:
    return os.environ.get(ENV_OFF, "") not in ("", "0")


def digest(data: bytes) -> str:
    return hashlib.blake2b(data, digest_size=16).hexdigest()


@functools.lru_cache(maxsize=1)
def tool_fingerprint() -> str:
    """The tool version and a digest of the rule tables and the engine's sources."""
    h = hashlib.blake2b(digest_size=16)
    h.update(f"{FORMAT}\0{__version__}\0".encode())
    package = resources.files("npu_migrate")
    try:
        rules = resources.files("npu_migrate.rules")
    except ModuleNotFoundError:
        rules = Path(__file__).resolve().parent.parent / "rules"
    for folder in (package, rules):
        for entry in sorted(folder.iterdir(), key=lambda e: e.name):
            if entry.is_file() and entry.name.endswith((".py", ".toml", ".json")):
                h.update(entry.name.encode() + b"\0" + entry.read_bytes() + b"\0")
    return h.hexdigest()


def options_key(options, relpath: str) -> str:
    """Everything in `options` that can change this one file's result."""
    parent = os.path.dirname(relpath)
    parts = (
        ",".join(sorted(options.enabled)),
        options.shim_name,
        str(options.rewrite_scripts),
        str(parent in options.package_dirs),
        str(parent in options.npu_aware_dirs),
        repr(options.shim_spec_map.get(parent)),  # where this folder's shim import points
        ",".join(sorted(options.first_party)),  # where isort puts the shim import
    )
    return digest("\0".join(parts).encode())


def _result_to_json(result) -> dict:
    return {
        "findings": [f.as_dict() for f in result.findings],
        "new": None if not result.changed else base64.b64encode(result.new).decode("ascii"),
        "encoding": result.encoding,
        "skipped": result.skipped,
        "suppressed": result.suppressed,
    }


def _result_from_json(data: dict, relpath: str, original: bytes):
    from .engine import FileResult

    findings = [Finding(**f) for f in data["findings"]]
    new = base64.b64decode(data["new"]) if data["new"] is not None else None
    return FileResult(relpath=relpath, findings=findings, original=original, new=new,
                      encoding=data["encoding"], skipped=data["skipped"], suppressed=data["suppressed"])


@dataclass
class Cache:
    """The entries of one run root: relpath -> [content digest, options key, result]."""

    path: Optional[Path]
    entries: dict = field(default_factory=dict)
    hits: int = 0
    misses: int = 0
    dirty: bool = False

    @classmethod
    def open(cls, folder: Path, root: Path) -> "Cache":
        name = digest(str(Path(root).absolute()).encode()) + ".json"
        path = Path(folder) / name
        cache = cls(path)
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
            if data.get("tool") == tool_fingerprint() and isinstance(data.get("entries"), dict):
                cache.entries = data["entries"]
        except (OSError, ValueError, AttributeError):
            pass  # missing, unreadable or from another version: start empty
        return cache

    def lookup(self, relpath: str, content_digest: str, key: str, original: bytes):
        entry = self.entries.get(relpath)
        if entry and entry[0] == content_digest and entry[1] == key:
            try:
                result = _result_from_json(entry[2], relpath, original)
            except (KeyError, TypeError, ValueError):
                result = None
            if result is not None:
                self.hits += 1
                return result
        self.misses += 1
        return None

    def store(self, relpath: str, content_digest: str, key: str, result) -> None:
        self.entries[relpath] = [content_digest, key, _result_to_json(result)]
        self.dirty = True

    def save(self, root: Path) -> None:
        """Write the entries back atomically; entries of files that are gone are dropped."""
        if not self.dirty or self.path is None:
            return
        entries = {rel: e for rel, e in self.entries.items() if os.path.exists(os.path.join(root, rel))}
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            ignore = self.path.parent / ".gitignore"  # if someone points --cache-dir into a repo
            if not ignore.exists():
                ignore.write_text("# created by npu-migrate\n*\n")
            fd, tmp = tempfile.mkstemp(prefix=".cache.", suffix=".tmp", dir=self.path.parent)
        except OSError:
            return  # a cache is an optimisation: never fail the run for it
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as handle:
                json.dump({"tool": tool_fingerprint(), "entries": entries}, handle, separators=(",", ":"))
            os.replace(tmp, self.path)
        except (OSError, TypeError, ValueError):
            try:
                os.unlink(tmp)
            except OSError:
                pass


def open_for(root: Path, cache_dir: Optional[str], no_cache: bool) -> Optional[Cache]:
    """The cache of a run over `root`, or None when it is turned off."""
    if no_cache or disabled_by_env():
        return None
    return Cache.open(Path(cache_dir) if cache_dir else default_dir(), root)
