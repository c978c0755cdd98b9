"""Baselines: accept the findings a repository already has, flag only new ones.

An entry is keyed without line numbers, so that unrelated edits (lines inserted above, code moved
within the file) keep it valid:

    (path relative to the baseline file's folder, code, normalised source of the construct) -> count

When a file has more findings with one key than the baseline's count, the first ones in file order
are accepted and the rest are new. When it has fewer, the entry is stale (the construct was fixed,
moved to another file or changed): stale entries are reported, and fail the run with
`--fail-on-stale`.

The file is JSON, sorted, one entry per key, so that it diffs well in review:

    {"npu-migrate-baseline": 1,
     "entries": [{"path": "train.py", "code": "NPU202", "source": "torch.cuda.mem_get_info()", "count": 1}]}
"""

from __future__ import annotations

import json
import os
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable

from .source import read_regular, write_atomic

FORMAT_VERSION = 1
Key = tuple[str, str, str]  # (path, code, source)


class BaselineError(Exception):
    """The baseline file cannot be read or is not a baseline."""


@dataclass(frozen=True)
class Stale:
    path: str
    code: str
    source: str
    missing: int  # how many of the recorded occurrences are gone

    def as_dict(self) -> dict:
        return {"path": self.path, "code": self.code, "source": self.source, "missing": self.missing}


def path_key(baseline_file: Path, file: Path) -> str:
    """A file's path relative to the baseline's folder, with forward slashes."""
    return Path(os.path.relpath(file.absolute(), baseline_file.absolute().parent)).as_posix()


def load(path: Path) -> Counter:
    """The counts of a baseline file: a regular file of at most MAX_INPUT_BYTES (a FIFO or a
    device such as /dev/zero is refused before it is opened)."""
    try:
        data = json.loads(read_regular(path).decode("utf-8"))
    except FileNotFoundError:
        raise BaselineError(f"{path}: baseline file not found (create it with --write-baseline {path})") from None
    except OSError as exc:
        raise BaselineError(f"{path}: cannot read baseline: {exc.strerror or exc}") from None
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as exc:
        what = "nested too deeply" if isinstance(exc, RecursionError) else exc
        raise BaselineError(f"{path}: cannot read baseline: {what}") from None
    if not isinstance(data, dict) or data.get("npu-migrate-baseline") != FORMAT_VERSION:
        raise BaselineError(f"{path}: not an npu-migrate baseline (version {FORMAT_VERSION})")
    counts: Counter = Counter()
    try:
        for entry in data["entries"]:
            counts[(entry["path"], entry["code"], entry["source"])] += int(entry["count"])
    except (KeyError, TypeError, ValueError, OverflowError) as exc:  # OverflowError: "count": Infinity
        raise BaselineError(f"{path}: malformed entry: {exc!r}") from None
    return counts


def dump(counts: Counter) -> str:
    entries = [
        {"path": p, "code": c, "source": s, "count": n}
        for (p, c, s), n in sorted(counts.items())
        if n > 0
    ]
    return json.dumps({"npu-migrate-baseline": FORMAT_VERSION, "entries": entries}, indent=2) + "\n"


def write(path: Path, counts: Counter) -> None:
    """Atomically (temp file + rename)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(path, dump(counts).encode("utf-8"))


def merge(old: Counter, new: Counter, checked_paths: set[str], baseline_file: Path) -> Counter:
    """Refresh a baseline from a run that looked at `checked_paths` only.

    Entries of the files checked are replaced by the run's; entries of other files are kept while
    the file exists (a run over the staged files must not forget the rest of the repository).
    """
    folder = baseline_file.absolute().parent
    out: Counter = Counter()
    for key, count in old.items():
        if key[0] not in checked_paths and (folder / key[0]).exists():
            out[key] = count
    out.update(new)
    return out


def split(
    keyed: Iterable[tuple[Key, object]],
    counts: Counter,
) -> tuple[list, list]:
    """(new, accepted) items; `keyed` must be in file order (line, column) within each key."""
    used: Counter = Counter()
    new, accepted = [], []
    for key, item in keyed:
        if used[key] < counts.get(key, 0):
            used[key] += 1
            accepted.append(item)
        else:
            new.append(item)
    return new, accepted


def stale(
    counts: Counter,
    found: Counter,
    checked_paths: set[str],
    baseline_file: Path,
    checked_dirs: list[Path],
) -> list[Stale]:
    """Entries with fewer occurrences now than recorded, in the files this run covered.

    A recorded file that no longer exists is covered when it lies under a folder the run checked.
    """
    folder = baseline_file.absolute().parent
    out = []
    for key, count in sorted(counts.items()):
        path = key[0]
        if path not in checked_paths:
            full = (folder / path).resolve()
            if full.exists() or not any(_under(full, d) for d in checked_dirs):
                continue
        missing = count - found.get(key, 0)
        if missing > 0:
            out.append(Stale(path, key[1], key[2], missing))
    return out


def _under(path: Path, folder: Path) -> bool:
    try:
        path.relative_to(folder.resolve())
        return True
    except ValueError:
        return False
