"""The whole-run passes' results, cached: a warm run over an unchanged tree does not run them again.

After the engines, runplan.run_engine hands the run's per-file results to passes that read across
files (wholeprogram.py, importgates.py, optionalext.py, builders.py, ...): they lower findings to
info and name skipped scopes. They parse many files again, so on a large tree (torch: some 13 s)
they cost far more than a warm run's cache hits. Their output is a function of their input:

- every per-file result (the file's bytes, its new text, findings, skipped scopes, whole-program
  facts) and where each file lies (`paths`): one digest of the run (`run_digest`);
- the few files they read that are not in the run: the headers builders.py looks for beside a
  `.cu` file. Each read goes through `read_outside`, which the cached entry lists with what it
  found (a regular file and the digest of its bytes, or nothing); a hit is used only when every
  such read finds the same again.

The entry (cache.Cache.store_review, signed with the per-file entries' key) holds, for each file
whose findings or skipped scopes the passes changed, the new ones; a hit rebuilds the results
from the run's own results and those, every field checked as a per-file entry's is. Anything
malformed or stale is a miss: the passes run, and the result is the same either way.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
from typing import Callable, Optional

from .cache import digest, finding_from_json
from .model import FileResult
from .modpaths import result_bytes

# What the running passes read outside the run, when a run records it: [path, regular file, digest]
_reads: Optional[list] = None


def _probe(path: str) -> tuple[bool, Optional[bytes]]:
    from .source import read_regular  # (never a FIFO or a device, bounded)

    found, data = os.path.isfile(path), None
    if found:
        try:
            data = read_regular(path)
        except OSError:
            data = None
    return found, data


def read_outside(path: str) -> tuple[bool, Optional[bytes]]:
    """(whether `path` is a regular file, its bytes or None when it cannot be read), recorded for
    the cache of the run that asks."""
    found, data = _probe(path)
    if _reads is not None:
        _reads.append([path, found, None if data is None else digest(data)])
    return found, data


def run_digest(results: list[FileResult], paths: dict[str, str]) -> str:
    """A digest of everything of a run's per-file results that the whole-run passes can read."""
    h = hashlib.blake2b(digest_size=16)
    for r in results:
        data = r.original if r.original is not None else result_bytes(r, paths)
        row = [r.relpath, paths.get(r.relpath), None if data is None else digest(data),
               None if r.new is None else digest(r.new), r.encoding, r.skipped, r.suppressed,
               [list(s) for s in r.skipped_scopes], r.facts, [f.as_dict() for f in r.findings]]
        part = json.dumps(row, separators=(",", ":"), sort_keys=True).encode("utf-8", "surrogatepass")
        h.update(b"%d:" % len(part) + part)
    return h.hexdigest()


def _payload(before: list[FileResult], after: list[FileResult], reads: list) -> str:
    changed = [[a.relpath, [f.as_dict() for f in a.findings], [list(s) for s in a.skipped_scopes]]
               for b, a in zip(before, after)
               if a is not b and (a.findings != b.findings or a.skipped_scopes != b.skipped_scopes)]
    return json.dumps({"changed": changed, "reads": reads}, separators=(",", ":"))


def _rebuilt(before: list[FileResult], payload: str) -> list[FileResult]:
    """The results the passes made, from the run's own results and a cached payload; ValueError
    (or TypeError) when the payload is malformed."""
    data = json.loads(payload)
    if not isinstance(data, dict) or set(data) != {"changed", "reads"}:
        raise ValueError("not an object of the known fields")
    reads = data["reads"]
    if not isinstance(reads, list) or not all(
            isinstance(r, list) and len(r) == 3 and isinstance(r[0], str) and isinstance(r[1], bool)
            and isinstance(r[2], (str, type(None))) for r in reads):
        raise ValueError("reads is not a list of [path, found, digest]")
    for path, found, was in reads:
        if [path, found, was] != _reread(path):
            raise LookupError(path)  # a file read outside the run has changed: stale
    index = {r.relpath: i for i, r in enumerate(before)}
    out = list(before)
    if not isinstance(data["changed"], list):
        raise ValueError("changed is not a list")
    for row in data["changed"]:
        if not (isinstance(row, list) and len(row) == 3 and isinstance(row[0], str) and row[0] in index
                and isinstance(row[1], list) and isinstance(row[2], list)):
            raise ValueError("a changed file is not [relpath, findings, skipped scopes] of the run")
        relpath, findings, scopes = row
        if not all(isinstance(s, list) and len(s) == 3 and type(s[0]) is int and type(s[1]) is int
                   and isinstance(s[2], str) and 1 <= s[0] <= s[1] for s in scopes):
            raise ValueError("skipped scopes are not [first line, last line, reason]")
        i = index[relpath]
        out[i] = dataclasses.replace(out[i], findings=[finding_from_json(f, relpath) for f in findings],
                                     skipped_scopes=[(s[0], s[1], s[2]) for s in scopes])
    return out


def _reread(path: str) -> list:
    found, data = _probe(path)
    return [path, found, None if data is None else digest(data)]


def reviewed(results: list[FileResult], paths: dict[str, str], cache,
             passes: Callable[[list[FileResult]], list[FileResult]]) -> list[FileResult]:
    """`passes(results)`, or what an earlier run with the same per-file results got from them."""
    global _reads
    if cache is None or cache.path is None:
        return passes(results)
    run = run_digest(results, paths)
    payload = cache.lookup_review(run)
    if payload is not None:
        try:
            return _rebuilt(results, payload)
        except (ValueError, TypeError, LookupError, RecursionError, MemoryError):
            cache.review_hits -= 1
            cache.forget_review(run)
    outer, _reads = _reads, []
    try:
        out = passes(results)
        reads = _reads
    finally:
        _reads = outer
    if len(out) == len(results) and all(a.relpath == b.relpath for a, b in zip(out, results)):
        cache.store_review(run, _payload(results, out, reads))
    return out
