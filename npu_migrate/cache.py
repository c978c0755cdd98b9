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

A file may have several entries, one per options key (`MAX_VARIANTS`, newest last): one run can
migrate a file twice with different options (crossgates22's second pass), and each result is kept
so that a warm run hits both.

Where: `--cache-dir DIR`, else `$NPU_MIGRATE_CACHE_DIR`, else the user's cache folder
(`$XDG_CACHE_HOME/npu-migrate`, `~/.cache/npu-migrate`). Never inside the project by default,
so a dry run or `check` leaves the repository byte-identical. One JSON file per run root; JSON,
not pickle, so a cache file someone else wrote cannot run code. `--no-cache` (or
`NPU_MIGRATE_NO_CACHE=1`) turns it off. A cache that cannot be read or written is ignored: the
run goes on without it and the result is the same.

Trust: a cache file may come from somewhere an attacker can reach (a CI cache restored from a
shared store, a world-writable `$NPU_MIGRATE_CACHE_DIR`), and an entry's new text is written into
the project. So each entry carries an HMAC-SHA256 under a per-user secret key kept outside the
cache folder (`$XDG_CONFIG_HOME/npu-migrate/cache-key`, else `~/.config/npu-migrate/cache-key`,
created 0600; refused when it is not ours, is readable or writable by others, or is a link). An
entry whose MAC does not verify, or whose fields do not have the expected types and shapes, is
a miss: the file is migrated again, and the run says so once (`Cache.warnings`, and the `warn`
callback). A cache folder or file owned by another user or writable by others is not used at
all (said once; the run goes on without a cache). What is read is bounded (`MAX_FILE_BYTES`);
malformed or deeply nested JSON is ignored, never a crash.
"""

from __future__ import annotations

import base64
import codecs
import errno
import functools
import hashlib
import hmac
import json
import os
import secrets
import stat
import tempfile
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Callable, Optional

from . import __version__
from .findings import Finding
from .model import FileResult

FORMAT = 3  # bump when the layout of a cache file changes (3: a list of variants per file)
ENV_DIR = "NPU_MIGRATE_CACHE_DIR"
ENV_OFF = "NPU_MIGRATE_NO_CACHE"
MAX_FILE_BYTES = 256 * 1024 * 1024  # a larger cache file is not read (ignored, then rewritten)
MAX_REVIEWS = 4  # whole-run results kept per run root (a full run and the subsets run beside it)
# results kept per file, each under other options: a run migrates some files twice (crossgates22
# migrates a file again with the CUDA-only names it imports), and a warm run must hit both
MAX_VARIANTS = 4
KEY_NAME = "cache-key"


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


class CacheRefused(Exception):
    """The cache (its folder, file or key) cannot be trusted or used; the message says why."""


def key_path() -> Path:
    """Where the per-user secret that signs cache entries lives: outside any cache folder."""
    base = os.environ.get("XDG_CONFIG_HOME") or os.path.join(os.path.expanduser("~"), ".config")
    return Path(base) / "npu-migrate" / KEY_NAME


def _not_ours(st: os.stat_result, what: str, private: bool = False) -> Optional[str]:
    """Why `what` (of stat `st`) is not to be trusted, or None: owned by another user, or
    writable by others (with `private`: any access by others). POSIX only: elsewhere the mode
    bits do not describe who may write."""
    if os.name != "posix":
        return None
    if hasattr(os, "geteuid") and st.st_uid != os.geteuid():
        return f"{what} is owned by another user (uid {st.st_uid})"
    if private and st.st_mode & 0o077:
        return f"{what} is accessible to other users (mode {stat.S_IMODE(st.st_mode):04o}; it must be 0600)"
    if st.st_mode & 0o022:
        return f"{what} is writable by other users (mode {stat.S_IMODE(st.st_mode):04o})"
    return None


def _open_regular(path: Path, what: str):
    """A file object on `path` for reading, never through a link nor blocking on a FIFO; the
    stat of what was opened. FileNotFoundError when it is not there; CacheRefused otherwise."""
    flags = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0)
    try:
        fd = os.open(path, flags)
    except FileNotFoundError:
        raise
    except OSError as exc:
        if exc.errno == errno.ELOOP or os.path.islink(path):
            raise CacheRefused(f"{what} {path} is a symbolic link") from None
        raise CacheRefused(f"cannot read {what} {path}: {exc.strerror or exc}") from None
    handle = os.fdopen(fd, "rb")
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise CacheRefused(f"{what} {path} is not a regular file")
    except BaseException:
        handle.close()
        raise
    return handle, st


def _read_key(path: Path) -> bytes:
    handle, st = _open_regular(path, "the cache key")
    with handle:
        problem = _not_ours(st, f"the cache key {path}", private=True)
        if problem:
            raise CacheRefused(problem)
        text = handle.read(200).strip()
    try:
        key = bytes.fromhex(text.decode("ascii"))
    except (UnicodeDecodeError, ValueError):
        key = b""
    if len(key) != 32:
        raise CacheRefused(f"the cache key {path} is malformed (delete it: a new one is made)")
    return key


def load_key(path: Optional[Path] = None) -> bytes:
    """The per-user cache key: read, or made (32 random bytes, hex, mode 0600) on first use.
    CacheRefused when it cannot be made or is not to be trusted."""
    path = Path(path) if path is not None else key_path()
    folder = path.parent
    try:
        folder.mkdir(parents=True, exist_ok=True, mode=0o700)
        st = os.stat(folder)
    except OSError as exc:
        raise CacheRefused(f"cannot make the cache key folder {folder}: {exc.strerror or exc}") from None
    if not stat.S_ISDIR(st.st_mode):
        raise CacheRefused(f"the cache key folder {folder} is not a folder")
    problem = _not_ours(st, f"the cache key folder {folder}")
    if problem:
        raise CacheRefused(problem)
    try:
        return _read_key(path)
    except FileNotFoundError:
        pass
    # Written whole to a temp file, then linked into place: a run beside this one reads either
    # no key or a complete one, and the first link wins.
    try:
        fd, tmp = tempfile.mkstemp(prefix=".cache-key.", dir=folder)  # mode 0600
        try:
            with os.fdopen(fd, "w", encoding="ascii") as handle:
                handle.write(secrets.token_hex(32) + "\n")
                handle.flush()
                os.fsync(handle.fileno())
            try:
                os.link(tmp, path)
            except FileExistsError:
                pass  # another run made it first: use theirs
            except OSError:  # a file system without hard links
                if not os.path.lexists(path):
                    os.replace(tmp, path)
        finally:
            if os.path.lexists(tmp):
                os.unlink(tmp)
    except OSError as exc:
        raise CacheRefused(f"cannot make the cache key {path}: {exc.strerror or exc}") from None
    try:
        return _read_key(path)
    except FileNotFoundError:
        raise CacheRefused(f"cannot make the cache key {path}") from None


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
    def files(folder, prefix: str = ""):
        # every subpackage too: the rule families live in npu_migrate/families/
        for entry in sorted(folder.iterdir(), key=lambda e: e.name):
            if entry.is_dir() and entry.name not in ("__pycache__", "rules") and not entry.name.startswith("."):
                yield from files(entry, f"{prefix}{entry.name}/")
            elif entry.is_file() and entry.name.endswith((".py", ".toml", ".json")):
                yield prefix + entry.name, entry

    for folder in (package, rules):
        for name, entry in files(folder):
            h.update(name.encode() + b"\0" + entry.read_bytes() + b"\0")
    return h.hexdigest()


def options_key(options, relpath: str) -> str:
    """Everything in `options` that can change this one file's result."""
    parent = os.path.dirname(relpath)
    parts = (
        ",".join(sorted(options.enabled)),
        options.shim_name,
        str(options.rewrite_scripts),
        str(parent in options.package_dirs),
        repr(options.shim_spec_map.get(parent)),  # where this folder's shim import points
        ",".join(sorted(options.first_party)),  # where isort puts the shim import
        # and which ecosystem imports are the project's own
        repr(sorted(options.sibling_classes(relpath).items())),  # per-device classes left as written
        repr(options.modules_near(relpath)),  # what its relative imports resolve to (probes.py)
        repr(sorted(options.foreign_bound(relpath).items())),  # CUDA-only names it imports (crossgates22.py)
    )
    return digest("\0".join(parts).encode())


def _result_to_json(result) -> dict:
    return {
        "findings": [f.as_dict() for f in result.findings],
        "new": None if not result.changed else base64.b64encode(result.new).decode("ascii"),
        "encoding": result.encoding,
        "skipped": result.skipped,
        "suppressed": result.suppressed,
        "skipped_scopes": [list(scope) for scope in result.skipped_scopes],
        **({"facts": result.facts} if result.facts is not None else {}),
    }


# The fields of a cached Finding and the types each may hold (bool is not an int here).
_FINDING_FIELDS = {
    "path": (str,), "line": (int,), "column": (int,), "code": (str,), "message": (str,),
    "fixable": (bool,), "source": (str,), "cell": (int, type(None)), "severity": (str,),
    "also": (list,),
}
_RESULT_FIELDS = {"findings", "new", "encoding", "skipped", "suppressed"}


def _is(value, types: tuple) -> bool:
    """isinstance, with True and False never taken for ints."""
    if isinstance(value, bool) and bool not in types:
        return False
    return isinstance(value, types)


def finding_from_json(data, relpath: str) -> Finding:
    """A Finding of file `relpath` from its cached dict; ValueError when a field is missing,
    unknown, of the wrong type, or places it outside the file."""
    return _finding_from_json(data, relpath)


def _finding_from_json(data, relpath: str) -> Finding:
    if not isinstance(data, dict) or not set(data) <= set(_FINDING_FIELDS):
        raise ValueError("a finding is not an object of the known fields")
    for name, types in _FINDING_FIELDS.items():
        if name in data and not _is(data[name], types):
            raise ValueError(f"a finding's {name} has the wrong type")
        if name not in data and name not in ("source", "cell", "severity", "also"):
            raise ValueError(f"a finding has no {name}")
    if data["path"] != relpath or data["line"] < 1 or data["column"] < 1:
        raise ValueError("a finding's place is not in this file")
    if data.get("cell") is not None and data["cell"] < 1:
        raise ValueError("a finding's cell is out of range")
    if "also" in data:
        places = data["also"]
        if not all(isinstance(p, list) and len(p) == 3 and _is(p[0], (int,)) and _is(p[1], (int,))
                   and isinstance(p[2], str) for p in places):
            raise ValueError("a finding's merged places are not [line, column, source] lists")
        data = {**data, "also": tuple((line, column, source) for line, column, source in places)}
    return Finding(**data)


def _result_from_json(data, relpath: str, original: bytes):
    """A FileResult from a cached entry's result; ValueError (or TypeError) when any field is
    missing, unknown, or of the wrong type or shape."""
    if isinstance(data, str):
        data = json.loads(data)
    if not isinstance(data, dict) or set(data) - {"skipped_scopes", "facts"} != _RESULT_FIELDS:
        raise ValueError("the result is not an object of the known fields")
    facts = _facts_from_json(data["facts"]) if "facts" in data else None
    scopes = data.get("skipped_scopes", [])
    if not isinstance(scopes, list) or not all(
        isinstance(s, list) and len(s) == 3 and _is(s[0], (int,)) and _is(s[1], (int,)) and isinstance(s[2], str)
        and 1 <= s[0] <= s[1] for s in scopes
    ):
        raise ValueError("skipped_scopes is not a list of [first line, last line, reason]")
    if not isinstance(data["findings"], list):
        raise ValueError("findings is not a list")
    findings = [_finding_from_json(f, relpath) for f in data["findings"]]
    new = data["new"]
    if new is not None:
        if not isinstance(new, str):
            raise ValueError("new is not text")
        new = base64.b64decode(new.encode("ascii"), validate=True)
    encoding = data["encoding"]
    if not isinstance(encoding, str):
        raise ValueError("encoding is not text")
    try:
        codecs.lookup(encoding)  # the diff decodes the text with it
    except LookupError:
        raise ValueError(f"unknown encoding {encoding!r}") from None
    skipped, suppressed = data["skipped"], data["suppressed"]
    if not _is(skipped, (str, type(None))) or not _is(suppressed, (int,)) or suppressed < 0:
        raise ValueError("skipped or suppressed has the wrong type")
    return FileResult(relpath=relpath, findings=findings, original=original, new=new,
                      encoding=encoding, skipped=skipped, suppressed=suppressed,
                      skipped_scopes=[(s[0], s[1], s[2]) for s in scopes], facts=facts)


def _facts_from_json(facts) -> dict:
    """A file's whole-program facts (wholeprogram.file_facts), every field checked for its shape."""
    def rows(value, *kinds) -> bool:
        # exact types (what json.loads gives): `type(True) is bool`, so no bool passes for an int;
        # a plain loop, as a warm run checks some 100,000 rows
        if type(value) is not list:
            return False
        width = len(kinds)
        for row in value:
            if type(row) is not list or len(row) != width:
                return False
            for item, kind in zip(row, kinds):
                if type(item) not in kind:
                    return False
        return True

    if not isinstance(facts, dict) or set(facts) != {"imports", "blocks", "classes", "npu_classes", "cu", "bound"}:
        raise ValueError("facts is not an object of the known fields")
    if not (rows(facts["imports"], (str,), (int,), (bool,)) and rows(facts["blocks"], (int,), (int,), (str,))
            and isinstance(facts["classes"], list) and all(isinstance(c, str) for c in facts["classes"])
            and rows(facts["npu_classes"], (str,), (list,))
            and all(isinstance(b, str) for _name, bases in facts["npu_classes"] for b in bases)
            and rows(facts["cu"], (str,), (str,)) and rows(facts["bound"], (str,), (str,))):
        raise ValueError("facts has a field of the wrong shape")
    return facts


def _stderr_warning(message: str) -> None:
    import click

    click.echo(f"warning: {message}", err=True)


def _plural(count: int, one: str, many: str) -> str:
    return f"{count} {one if count == 1 else many}"


@dataclass
class Cache:
    """The entries of one run root: relpath -> a list of [content digest, options key, result
    JSON, MAC], one per options key, newest last.

    Only entries whose MAC verifies under this user's key are kept when the file is read; a
    result is still checked field by field before it is used. `warnings` lists what was wrong
    (each kind of problem once per run); `warn`, when set, is called with each as it is found."""

    path: Optional[Path]
    entries: dict = field(default_factory=dict)
    hits: int = 0
    misses: int = 0
    dirty: bool = False
    warnings: list = field(default_factory=list)
    warn: Optional[Callable[[str], None]] = field(default=None, repr=False)
    # run digest -> [payload, MAC]: what the whole-run passes made of a run's per-file results
    # (reviewcache.py), newest last, at most MAX_REVIEWS
    reviews: dict = field(default_factory=dict)
    review_hits: int = 0
    _key: Optional[bytes] = field(default=None, repr=False)
    _said: set = field(default_factory=set, repr=False)

    @classmethod
    def open(cls, folder: Path, root: Path, warn: Optional[Callable[[str], None]] = None) -> "Cache":
        name = digest(str(Path(root).absolute()).encode()) + ".json"
        path = Path(folder) / name
        cache = cls(path, warn=warn)
        try:
            check_folder(Path(folder))
            _key_outside(key_path(), Path(folder))
            cache._key = load_key()
            raw = _read_cache_file(path)
        except CacheTooLarge:
            cache._note("size", f"cache file {path} is larger than {MAX_FILE_BYTES >> 20} MiB; "
                                "not read (it is rewritten)")
            return cache
        except CacheRefused as exc:
            cache._refuse(str(exc))
            return cache
        if raw is not None:
            cache._load(raw)
        return cache

    # -- messages

    def _note(self, kind: str, message: str) -> None:
        """Say `message`, unless a message of this kind was said already in this run."""
        if kind in self._said:
            return
        self._said.add(kind)
        self.warnings.append(message)
        if self.warn is not None:
            self.warn(message)

    def _refuse(self, why: str) -> None:
        """Run without the cache: nothing is read or written."""
        self.path = None
        self.entries = {}
        self._key = None
        self._note("refused", f"result cache not used: {why}")

    # -- integrity

    def _root_id(self) -> str:
        return self.path.name if self.path is not None else ""

    def _key_id(self) -> str:
        return hmac.new(self._key or b"", b"npu-migrate cache key id", hashlib.sha256).hexdigest()[:16]

    def _mac(self, relpath: str, content_digest: str, key: str, payload: str) -> str:
        mac = hmac.new(self._key or b"", digestmod=hashlib.sha256)
        for part in (str(FORMAT), tool_fingerprint(), self._root_id(), relpath, content_digest, key, payload):
            data = part.encode("utf-8", "surrogatepass")
            mac.update(b"%d:" % len(data) + data)
        return mac.hexdigest()

    def _verified(self, relpath, entry) -> bool:
        if not isinstance(relpath, str) or not isinstance(entry, list) or len(entry) != 4:
            return False
        if not all(isinstance(part, str) for part in entry):
            return False
        content_digest, key, payload, mac = entry
        if len(mac) != 64 or not mac.isascii():
            return False
        expected = self._mac(relpath, content_digest, key, payload)
        return hmac.compare_digest(expected.encode("ascii"), mac.encode("ascii"))

    def _load(self, raw: bytes) -> None:
        try:
            data = json.loads(raw.decode("utf-8"))
        except (UnicodeDecodeError, ValueError, RecursionError, MemoryError):
            self._note("malformed", f"cache file {self.path} is not valid JSON; ignored (it is rewritten)")
            return
        if not isinstance(data, dict):
            self._note("malformed", f"cache file {self.path} is malformed; ignored (it is rewritten)")
            return
        if data.get("tool") != tool_fingerprint():
            return  # written by another version of the tool: start empty
        entries = data.get("entries")
        if not isinstance(entries, dict):
            self._note("malformed", f"cache file {self.path} is malformed; ignored (it is rewritten)")
            return
        if data.get("key") != self._key_id():
            if entries:
                self._note("foreign", f"cache file {self.path} was not written with this user's cache key "
                                      f"(restored from another machine or user?); its "
                                      f"{_plural(len(entries), 'entry is', 'entries are')} ignored and "
                                      "the files migrated again")
            return
        bad = 0
        for relpath, variants in entries.items():
            if not isinstance(variants, list) or not variants or len(variants) > MAX_VARIANTS:
                bad += 1
                continue
            kept = []
            for entry in variants:
                if self._verified(relpath, entry):
                    kept.append(entry)
                else:
                    bad += 1
            if kept:
                self.entries[relpath] = kept
        reviews = data.get("reviews", {})
        for run, entry in (reviews.items() if isinstance(reviews, dict) else ()):
            if (isinstance(entry, list) and len(entry) == 2 and all(isinstance(part, str) for part in entry)
                    and self._verified("\0review", [run, "", *entry])):
                self.reviews[run] = entry
            else:
                bad += 1
        if bad:
            self.dirty = True  # rewrite the file without them
            self._note("tampered", f"{_plural(bad, 'entry', 'entries')} of cache file {self.path} failed "
                                   "verification (tampered or corrupt); ignored and the files migrated again")

    # -- use

    def lookup(self, relpath: str, content_digest: str, key: str, original: bytes):
        variants = self.entries.get(relpath, ())
        for entry in variants:
            if entry[0] != content_digest or entry[1] != key:
                continue
            try:
                result = _result_from_json(entry[2], relpath, original)
            except (ValueError, TypeError, RecursionError, MemoryError):
                self._drop(relpath, entry)
                self._note("shape", f"a cache entry of {relpath} in {self.path} is malformed; "
                                    "ignored and the file migrated again")
                break
            self.hits += 1
            return result
        self.misses += 1
        return None

    def _drop(self, relpath: str, entry: list) -> None:
        kept = [e for e in self.entries.get(relpath, ()) if e is not entry]
        if kept:
            self.entries[relpath] = kept
        else:
            self.entries.pop(relpath, None)
        self.dirty = True

    def store(self, relpath: str, content_digest: str, key: str, result) -> None:
        """Keep `result` beside the file's other results for this content (under other options
        keys); results for other content, and the oldest beyond MAX_VARIANTS, are dropped."""
        if self._key is None or self.path is None:
            return  # no cache in this run
        payload = json.dumps(_result_to_json(result), separators=(",", ":"))
        mac = self._mac(relpath, content_digest, key, payload)
        variants = [e for e in self.entries.get(relpath, ()) if e[0] == content_digest and e[1] != key]
        variants.append([content_digest, key, payload, mac])
        self.entries[relpath] = variants[-MAX_VARIANTS:]
        self.dirty = True

    def lookup_review(self, run: str) -> Optional[str]:
        """The payload stored for a run whose per-file results digest to `run` (reviewcache.py
        checks its fields), or None."""
        entry = self.reviews.get(run)
        if entry is None:
            return None
        self.review_hits += 1
        return entry[0]

    def forget_review(self, run: str) -> None:
        """Drop an entry found malformed or stale."""
        if self.reviews.pop(run, None) is not None:
            self.dirty = True

    def store_review(self, run: str, payload: str) -> None:
        if self._key is None or self.path is None:
            return
        self.reviews.pop(run, None)
        self.reviews[run] = [payload, self._mac("\0review", run, "", payload)]
        while len(self.reviews) > MAX_REVIEWS:
            del self.reviews[next(iter(self.reviews))]
        self.dirty = True

    def save(self, root: Path) -> None:
        """Write the entries back atomically; entries of files that are gone are dropped."""
        if not self.dirty or self.path is None or self._key is None:
            return
        entries = {rel: e for rel, e in self.entries.items() if os.path.exists(os.path.join(root, rel))}
        folder = self.path.parent
        try:
            folder.mkdir(parents=True, exist_ok=True, mode=0o700)
            check_folder(folder)
            ignore = folder / ".gitignore"  # if someone points --cache-dir into a repo
            if not os.path.lexists(ignore):
                # never through a link: O_EXCL fails on any name that is there, a dangling link too
                fd = os.open(ignore, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o644)
                with os.fdopen(fd, "w") as handle:
                    handle.write("# created by npu-migrate\n*\n")
            fd, tmp = tempfile.mkstemp(prefix=".cache.", suffix=".tmp", dir=folder)
        except CacheRefused as exc:
            self._refuse(str(exc))
            return
        except OSError:
            return  # a cache is an optimisation: never fail the run for it
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as handle:
                json.dump({"tool": tool_fingerprint(), "key": self._key_id(), "entries": entries,
                           "reviews": self.reviews}, handle,
                          separators=(",", ":"))
            os.replace(tmp, self.path)
        except (OSError, TypeError, ValueError):
            try:
                os.unlink(tmp)
            except OSError:
                pass


def _key_outside(key: Path, folder: Path) -> None:
    """CacheRefused when the key would live in the cache folder: a cache restored from elsewhere
    would then bring its own key, and its MACs would verify."""
    key_dir = os.path.realpath(key.parent)
    cache_dir = os.path.realpath(folder)
    if os.path.commonpath([key_dir, cache_dir]) == cache_dir:
        raise CacheRefused(f"the cache key {key} is inside the cache folder {folder}; "
                           "move the cache folder (--cache-dir) or set XDG_CONFIG_HOME elsewhere")


def check_folder(folder: Path) -> None:
    """CacheRefused when the cache folder is there and is not a folder, is owned by another user
    or is writable by others (anyone could then plant or swap the cache file). A folder that is
    not there yet is fine: it is made 0700."""
    try:
        st = os.stat(folder)
    except FileNotFoundError:
        return
    except OSError as exc:
        raise CacheRefused(f"cannot use the cache folder {folder}: {exc.strerror or exc}") from None
    if not stat.S_ISDIR(st.st_mode):
        raise CacheRefused(f"the cache folder {folder} is not a folder")
    problem = _not_ours(st, f"the cache folder {folder}")
    if problem:
        raise CacheRefused(problem)


class CacheTooLarge(Exception):
    """The cache file is larger than MAX_FILE_BYTES: not read, and replaced when it is saved."""


def _read_cache_file(path: Path) -> Optional[bytes]:
    """The bytes of the cache file (at most MAX_FILE_BYTES + 1 of them), None when there is none;
    CacheRefused when it is a link, not a regular file, owned by another user or writable by
    others."""
    try:
        handle, st = _open_regular(path, "the cache file")
    except FileNotFoundError:
        return None
    with handle:
        problem = _not_ours(st, f"the cache file {path}")
        if problem:
            raise CacheRefused(problem)
        if st.st_size > MAX_FILE_BYTES:
            raise CacheTooLarge(path)
        try:
            data = handle.read(MAX_FILE_BYTES + 1)  # bounded, whatever the size said
        except OSError as exc:
            raise CacheRefused(f"cannot read the cache file {path}: {exc.strerror or exc}") from None
    if len(data) > MAX_FILE_BYTES:
        raise CacheTooLarge(path)
    return data


def open_for(root: Path, cache_dir: Optional[str], no_cache: bool,
             warn: Optional[Callable[[str], None]] = _stderr_warning) -> Optional[Cache]:
    """The cache of a run over `root`, or None when it is turned off. Problems with it are said
    through `warn` (default: a `warning: ...` line on stderr), each kind once per run."""
    if no_cache or disabled_by_env():
        return None
    return Cache.open(Path(cache_dir) if cache_dir else default_dir(), root, warn=warn)
