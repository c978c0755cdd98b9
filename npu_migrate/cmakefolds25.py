"""The CUDA sources of one CMake build target reported once (issue #16, precision wave 25, round-25
audit BR#2, BR#4, BR#8). Whole run (runplan.whole_run_passes, after extfolds19):

* **One note per CMake target** (`fold_cmake_targets`). buildgated.py lowers the NPU912 error of
  every `.cu` that a CUDA-gated CMakeLists.txt builds to info ("not compiled on an NPU host
  (CMakeLists.txt:N builds CUDA sources only when ...)"), one per file; folds19.py folds a leaf
  folder's, and a kernel's architecture variants', but the top-level sources of a build (vLLM's
  `csrc/*.cu`, each a different op) stayed one note each, although the port item is the extension
  they are linked into, as it is for a setup.py `CUDAExtension(sources=[...])`
  (cudasources.py) or a DeepSpeed op builder. Here the CMakeLists.txt that the gate names is read
  (through reviewcache.read_outside) and its targets resolved: `define_extension_target(NAME ...
  SOURCES ...)`, `add_library(NAME ...)`, `cuda_add_library`, `pybind11_add_module`,
  `Python_add_library` and `target_sources(NAME ...)`, whose source items expand `${VAR}`
  through the variables `set(VAR ...)`, `list(APPEND VAR ...)` and `file(GLOB VAR ...)` (matched
  against the run's files) build, in file order (a `set` in an `else`/`elseif` branch adds to
  the value an earlier branch set: both branches' sources count). Conditions are not evaluated:
  the build is already known to be CUDA-only. The open build-gated NPU912 infos of the `.cu`
  files that one target lists, with the same gate text, two or more, fold into the finding of
  the first source the target lists, whose message names the target (its line) and every other
  file with the CMakeLists.txt line that adds it, and what that file's own message added (the
  headers beside it, the folder it already stood for). A `.cu` that no target lists, or that two
  targets list, keeps its finding; an error is never folded (only the build-gated info is), nor a
  source whose name names another platform (platforms.path_platform: its scope is that
  platform's).

Nothing is dropped silently: the kept finding names each folded file and its CMakeLists.txt line.
Cheap first: nothing is read without two build-gated NPU912 infos naming one CMakeLists.txt.
"""

from __future__ import annotations

import fnmatch
import os
import posixpath
import re
from dataclasses import replace

_GATE_FILE = re.compile(r"\(not compiled on an NPU host \(([^\s:()`]*CMakeLists\.txt):\d+ ")
_VAR = re.compile(r"\$\{(\w+)\}")
_PREFIXES = ("${CMAKE_CURRENT_SOURCE_DIR}/", "${CMAKE_CURRENT_LIST_DIR}/", "${CMAKE_SOURCE_DIR}/",
             "${PROJECT_SOURCE_DIR}/")
# (commands that define a target from source items: the name is the first argument)
_TARGETS = {"define_extension_target", "add_library", "cuda_add_library", "pybind11_add_module",
            "python_add_library", "target_sources", "add_executable", "cuda_add_executable"}
_SKIP_WORDS = {"STATIC", "SHARED", "MODULE", "OBJECT", "INTERFACE", "PRIVATE", "PUBLIC", "EXCLUDE_FROM_ALL",
               "WITH_SOABI", "USE_SABI"}


def _cuda_source(relpath: str) -> bool:
    return relpath.lower().endswith(".cu")


# ----------------------------------------------------------------------------- reading a CMakeLists.txt

def _commands(text: str) -> list[tuple[int, str, list[str], list[int]]]:
    """(line, lower-cased command name, argument tokens, the line of each token) of each command of
    a CMake file; comments and quotes are read as CMake does (a quoted argument is one token,
    without its quotes)."""
    out = []
    i, n, line = 0, len(text), 1
    name_re = re.compile(r"[A-Za-z_]\w*")
    while i < n:
        ch = text[i]
        if ch == "\n":
            line += 1
            i += 1
            continue
        if ch == "#":
            end = text.find("\n", i)
            i = n if end < 0 else end
            continue
        match = name_re.match(text, i)
        if not match:
            i += 1
            continue
        j = match.end()
        while j < n and text[j] in " \t":
            j += 1
        if j >= n or text[j] != "(":
            i = match.end()
            continue
        start_line, name = line, match.group(0).lower()
        tokens, lines, depth, k, current = [], [], 1, j + 1, ""
        while k < n and depth:
            c = text[k]
            if c == "\n":
                line += 1
            if c == '"':
                end = k + 1
                while end < n and text[end] != '"':
                    if text[end] == "\\":
                        end += 1
                    end += 1
                if not current:
                    lines.append(line)
                line += text.count("\n", k, end)
                current += text[k + 1:end] or ";"
                k = end + 1
                continue
            if c == "#" and not current:
                end = text.find("\n", k)
                k = n if end < 0 else end
                continue
            if c == "(":
                depth += 1
            elif c == ")":
                depth -= 1
                if not depth:
                    break
            if c in " \t\r\n()":
                if current:
                    tokens.append(current)
                current = ""
            else:
                if not current:
                    lines.append(line)
                current += c
            k += 1
        if current:
            tokens.append(current)
        out.append((start_line, name, tokens, lines))
        i = k + 1
    return out


def _norm(item: str) -> str:
    for prefix in _PREFIXES:
        if item.startswith(prefix):
            item = item[len(prefix):]
    return item[2:] if item.startswith("./") else item


def targets(text: str, files: list[str]) -> dict[str, tuple[int, list[tuple[str, int]]]]:
    """{target: (line, [(source, line of the command that adds it)])} of a CMake file's text,
    sources relative to its folder; `files` (paths relative to that folder) resolve `file(GLOB)`."""
    values: dict[str, list[tuple[str, int]]] = {}
    branch: list[bool] = []  # (per open `if`: whether an `else`/`elseif` of it has been reached)
    found: dict[str, tuple[int, list[tuple[str, int]]]] = {}

    def expand(token: str, line: int, seen: frozenset = frozenset()) -> list[tuple[str, int]]:
        whole = _VAR.fullmatch(token)
        if whole and whole.group(1) not in seen:
            return [item for value, at in values.get(whole.group(1), [])
                    for item in expand(value, at, seen | {whole.group(1)})]
        out = []
        for part in token.split(";"):
            part = _norm(part)
            if part and not _VAR.search(part):
                out.append((part, line))
            elif _VAR.fullmatch(part):
                out += expand(part, line, seen)
        return out

    for line, name, args, at in _commands(text):
        lines = dict(enumerate(at))
        if name == "if":
            branch.append(False)
        elif name in ("else", "elseif") and branch:
            branch[-1] = True
        elif name == "endif" and branch:
            branch.pop()
        elif name == "set" and args:
            items = [(a, lines.get(k + 1, line)) for k, a in enumerate(args[1:])
                     if a not in ("CACHE", "PARENT_SCOPE", "FORCE")]
            values[args[0]] = values.get(args[0], []) + items if branch and branch[-1] else items
        elif name == "list" and len(args) >= 2 and args[0].upper() == "APPEND":
            values[args[1]] = values.get(args[1], []) + [(a, lines.get(k + 2, line)) for k, a in enumerate(args[2:])]
        elif name == "file" and len(args) >= 3 and args[0].upper() in ("GLOB", "GLOB_RECURSE"):
            patterns = [_norm(a) for a in args[2:] if a.upper() not in ("RELATIVE", "CONFIGURE_DEPENDS")]
            hits = sorted(f for f in files if any(fnmatch.fnmatchcase(f, p) for p in patterns))
            values[args[1]] = [(f, line) for f in hits]
        elif name in _TARGETS and args:
            target = args[0]
            if name == "define_extension_target":
                if "SOURCES" not in args:
                    continue
                base = args.index("SOURCES") + 1
                rest = args[base:]
                stop = next((k for k, a in enumerate(rest) if re.fullmatch(r"[A-Z][A-Z_0-9]*", a)), len(rest))
                items = [(a, lines.get(base + k, line)) for k, a in enumerate(rest[:stop])]
            else:
                items = [(a, lines.get(k + 1, line)) for k, a in enumerate(args[1:]) if a not in _SKIP_WORDS]
            sources = [s for token, at_line in items for s in expand(token, at_line)]
            old = found.get(target)
            found[target] = (old[0] if old else line, (old[1] if old else []) + sources)
    return found


# ----------------------------------------------------------------------------- the pass

def fold_cmake_targets(results: list, paths: dict) -> list:
    """Module's doc: the build-gated NPU912 infos of one CMake target's `.cu` sources, folded
    into the first listed source's finding."""
    from .folds19 import extra_of, gated
    from .platforms import path_platform

    by_cmake: dict[str, list[int]] = {}
    for i, r in enumerate(results):
        if not _cuda_source(r.relpath) or path_platform(r.relpath) is not None:
            continue
        gates = [g for g in map(gated, r.findings) if g is not None]
        if len(gates) != 1:
            continue
        match = _GATE_FILE.search(gates[0])
        if match:
            by_cmake.setdefault(match.group(1), []).append(i)
    out = list(results)
    for cmake_rel, members in by_cmake.items():
        if len(members) < 2:
            continue
        out = _fold_one(out, paths, cmake_rel, members, gated, extra_of)
    return out


def _root(relpath: str, path: str) -> str | None:
    path = path.replace("\\", "/")
    return path[:-len(relpath)] if path.endswith(relpath) else None


def _fold_one(results: list, paths: dict, cmake_rel: str, members: list[int], gated, extra_of) -> list:
    from .reviewcache import read_outside

    root = next((_root(results[i].relpath, paths[results[i].relpath]) for i in members
                 if paths.get(results[i].relpath)), None)
    if root is None:
        return results
    _found, data = read_outside(os.path.join(root, cmake_rel))
    if data is None:
        return results
    folder = posixpath.dirname(cmake_rel)
    prefix = folder + "/" if folder else ""
    files = [r.relpath[len(prefix):] for r in results if r.relpath.startswith(prefix)]
    found = targets(data.decode("utf-8", "replace"), files)
    listed: dict[str, list[str]] = {}
    for target, (_line, sources) in found.items():
        for source, _at in sources:
            listed.setdefault(prefix + source, [])
            if target not in listed[prefix + source]:
                listed[prefix + source].append(target)
    index = {results[i].relpath: i for i in members}
    out = list(results)
    for target, (target_line, sources) in found.items():
        order: list[tuple[int, int]] = []
        for source, at in sources:
            rel = prefix + source
            i = index.get(rel)
            if i is not None and listed.get(rel) == [target] and all(k != i for k, _ in order):
                order.append((i, at))
        by_gate: dict[str, list[tuple[int, int]]] = {}
        for i, at in order:
            gate = next(g for g in map(gated, out[i].findings) if g is not None)
            by_gate.setdefault(gate, []).append((i, at))
        for group in by_gate.values():
            if len(group) < 2:
                continue
            (first, first_at), rest = group[0], group[1:]
            named = []
            for i, at in rest:
                finding = next(f for f in out[i].findings if gated(f) is not None)
                extra = extra_of(finding.message)
                name = f"`{results[i].relpath}` ({cmake_rel}:{at}" + (f"; {extra})" if extra else ")")
                named.append(name)
            note = (f"(the CUDA sources of the CMake target `{target}` ({cmake_rel}:{target_line}) are one port "
                    f"item: this one ({cmake_rel}:{first_at}) and {len(rest)} other"
                    f"{'s' if len(rest) > 1 else ''} that the same CUDA-gated build compiles, reported once "
                    f"here: {', '.join(named)})")
            k = next(n for n, f in enumerate(out[first].findings) if gated(f) is not None)
            findings = list(out[first].findings)
            findings[k] = replace(findings[k], message=f"{findings[k].message} {note}")
            out[first] = replace(out[first], findings=findings)
            for i, _at in rest:
                out[i] = replace(out[i], findings=[f for f in out[i].findings if gated(f) is None])
    return out
