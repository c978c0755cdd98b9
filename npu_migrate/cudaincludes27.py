"""A folder of CUDA headers that only one CMake target's sources include, folded into that target's
note (issue #16, round 26 BV#6). Whole run, from runplan.whole_run_passes (after cmakefolds25.py).

folds19 reports a folder of CUDA headers with no `.cu` beside it once ("5 CUDA headers in
`csrc/ext/`, reported once for the folder; also b.cuh, c.cuh"), and cmakefolds25 reports the `.cu`
sources of one CMake target once, naming each source and the headers beside it. A header folder is
no port item of its own: it is compiled only as part of the sources that include it, so when every
file that includes it (following headers up to the sources) is a source, or a header beside a
source, that one target note already names, the folder note is redundant with it:

    csrc/ext/cute_utils.cuh            (header note, "reported once for the folder")
      <- csrc/kernels/mainloop.cuh     (a header beside kernels/launch.cu)
      <- csrc/kernels/launch.cu        (named in the note of the CMake target `_C`)

The folder note folds into the target note, whose message names the headers and the includers that
tie them to it ("also the CUDA headers of `csrc/ext/` (cute_utils.cuh, ...), included only through
this target's sources: `csrc/kernels/mainloop.cuh`, ...").

Decided on the include relation (`#include "x"` or `<x>` resolved against the includer's folder,
then as a path suffix of the project's files; the project's C/C++ files are read from the run's
root, so a `.cpp` or `.h` with no finding counts too). The folder note keeps its finding when a file
that includes it, directly or through other headers, is a source no target note names (a `.cpp` of
a CPU build, a `.cu` with its own finding), when the sources reached belong to two target notes,
when an including header is included by nothing, when nothing includes the folder at all, or when
the folder note is of a higher severity than the target note (an error never folds into an info).

Round 34 (IA#27): a lone header's own build-gated note (the only header of its folder, so no folder
note: vLLM's `csrc/quantization/w8a8/fp8/nvidia/quant_utils.cuh`) is read as a folder of one and
folds the same way ("the CUDA header `path`, included only through this target's sources: ...");
a header a target note already names is left alone. A listed source whose entry goes on after its
CMakeLists.txt line ("; also `helper.cu`, whose ...") counts as named by the note.
"""

from __future__ import annotations

import os
import posixpath
import re
from dataclasses import replace

_HEADER_EXT = (".cuh", ".h", ".hpp", ".hh", ".hxx", ".inl", ".inc")
_SOURCE_EXT = (".cu", ".cpp", ".cc", ".cxx", ".c")
_FOLDER_NOTE = re.compile(r"CUDA headers in `([^`]+)/`, reported once for the folder; also ([^()]*)\)")
_TARGET = re.compile(r"\(the CUDA sources of the CMake target `([^`]+)`")
# (a listed source may carry more after its headers: "; also `helper.cu`, whose ...", round 34 IA#27)
_LISTED = re.compile(r"`([^`]+\.cu)` \(CMakeLists\.txt:\d+(?:; with the CUDA headers? beside it: ([^();]*))?[;)]")
_GATED = "(not compiled on an NPU host ("
_BESIDE = re.compile(r"with the CUDA headers? beside it: ([^()]*)\)")
_INCLUDE = re.compile(rb'^[ \t]*#[ \t]*include[ \t]*["<]([^">]+)[">]', re.MULTILINE)
_SKIP_DIRS = {".git", "node_modules", "build", "dist", "__pycache__", ".venv", "venv", "third_party_build"}
_MAX_FILES = 20000
_MAX_DEPTH = 8


def _is_note(finding) -> bool:
    from .folding import ours

    return finding.code == "NPU912" and ours(finding)


def _names(text: str) -> list[str]:
    return [n.strip() for n in text.split(",") if n.strip() and "/" not in n.strip() and " " not in n.strip()]


def _covered(relpath: str, message: str) -> set[str]:
    """The files a target note stands for: its own, each listed source and the headers beside it."""
    out = {relpath}
    own = _BESIDE.search(message.split("(the CUDA sources of the CMake target", 1)[0])
    if own:
        out.update(posixpath.join(posixpath.dirname(relpath), n) for n in _names(own.group(1)))
    for source, beside in _LISTED.findall(message):
        out.add(source)
        out.update(posixpath.join(posixpath.dirname(source), n) for n in _names(beside or ""))
    return out


def _c_files(root: str) -> list[str]:
    out = []
    for folder, dirs, files in os.walk(root):
        dirs[:] = sorted(d for d in dirs if d not in _SKIP_DIRS and not d.startswith("."))
        for name in sorted(files):
            if name.lower().endswith(_HEADER_EXT + _SOURCE_EXT):
                out.append(posixpath.relpath(os.path.join(folder, name).replace(os.sep, "/"),
                                             root.replace(os.sep, "/")))
                if len(out) > _MAX_FILES:
                    return []
    return out


def _includers(root: str, files: list[str]) -> dict[str, set[str]]:
    """{file: the files that include it}."""
    from .reviewcache import read_outside

    known = set(files)
    by_name: dict[str, list[str]] = {}
    for f in files:
        by_name.setdefault(posixpath.basename(f), []).append(f)
    out: dict[str, set[str]] = {}
    for f in files:
        _found, data = read_outside(os.path.join(root, f))
        if not data or b"include" not in data:
            continue
        for raw in _INCLUDE.findall(data):
            name = raw.decode("utf-8", "replace").strip()
            near = posixpath.normpath(posixpath.join(posixpath.dirname(f), name))
            if near in known:
                targets = [near]
            else:
                targets = [c for c in by_name.get(posixpath.basename(name), ())
                           if c == name or c.endswith("/" + name)]
            for t in targets:
                if t != f:
                    out.setdefault(t, set()).add(f)
    return out


def _root(results: list, paths: dict) -> str | None:
    for r in results:
        path = paths.get(r.relpath)
        if path:
            path = path.replace("\\", "/")
            if path.endswith(r.relpath):
                return path[:-len(r.relpath)] or "."
    return None


def fold(results: list, paths: dict) -> list:
    """Module's doc."""
    from .folding import RANK

    folder_notes = []
    target_notes = []
    for i, r in enumerate(results):
        for f in r.findings:
            if not _is_note(f):
                continue
            if r.relpath.lower().endswith(_HEADER_EXT) and _FOLDER_NOTE.search(f.message):
                folder_notes.append((i, f))
            elif _TARGET.search(f.message):
                target_notes.append((i, f))
            elif r.relpath.lower().endswith(_HEADER_EXT) and _GATED in f.message:
                folder_notes.append((i, f))  # (a lone header's own note, round 34 IA#27: a folder of one)
    if not folder_notes or not target_notes:
        return results
    root = _root(results, paths)
    if root is None:
        return results
    files = _c_files(root)
    if not files:
        return results
    includers = _includers(root, files)
    owner: dict[str, int] = {}  # covered file -> index in target_notes (-1: two notes)
    for n, (i, f) in enumerate(target_notes):
        for c in _covered(results[i].relpath, f.message):
            owner[c] = n if owner.get(c, n) == n else -1
    moves: dict[int, list] = {}
    for i, f in folder_notes:
        match = _FOLDER_NOTE.search(f.message)
        if match:
            folder = match.group(1)
            members = {results[i].relpath} | {posixpath.join(folder, n) for n in _names(match.group(2))}
        elif results[i].relpath in owner:  # (already named by a target note: not this pass's)
            continue
        else:
            members = {results[i].relpath}
        reached, through, ok = set(), set(), True
        frontier, seen = list(members), set(members)
        for _depth in range(_MAX_DEPTH):
            following = []
            for h in frontier:
                for inc in sorted(includers.get(h, ())):
                    if inc in members or inc in seen:
                        continue
                    seen.add(inc)
                    if inc in owner:
                        if owner[inc] < 0:
                            ok = False
                        reached.add(owner[inc])
                        through.add(inc)
                    elif inc.lower().endswith(_HEADER_EXT):
                        if not includers.get(inc):
                            ok = False
                        following.append(inc)
                    else:
                        ok = False
            frontier = following
            if not frontier or not ok:
                break
        if frontier:
            ok = False
        if ok and len(reached) == 1:
            n = next(iter(reached))
            if RANK[f.severity] <= RANK[target_notes[n][1].severity]:  # (never an error into an info)
                moves.setdefault(n, []).append((i, f, sorted(members), sorted(through)))
    if not moves:
        return results
    out = list(results)
    gone: dict[int, set] = {}
    for n, moved in moves.items():
        k, target = target_notes[n]
        notes = []
        for i, f, members, through in moved:
            folder = posixpath.dirname(results[i].relpath)
            shown = ", ".join(posixpath.basename(m) for m in members)
            via = ", ".join(f"`{t}`" for t in through[:3]) + (f" and {len(through) - 3} more" if len(through) > 3 else "")
            what = (f"the CUDA header `{results[i].relpath}`" if len(members) == 1
                    else f"the CUDA headers of `{folder}/` ({shown})")
            notes.append(f"{what}, included only through this target's sources: {via}")
            gone.setdefault(i, set()).add(id(f))
        message = f"{target.message} (also {'; '.join(notes)})"
        out[k] = replace(out[k], findings=sorted(replace(x, message=message) if x is target else x
                                                 for x in out[k].findings))
    for i, ids in gone.items():
        out[i] = replace(out[i], findings=sorted(x for x in out[i].findings if id(x) not in ids))
    return out
