"""How the files of a run name each other: the dotted names a `.py` file may be imported by, the
file a relative import names, and a file's bytes. A leaf module (it imports nothing of the
package), so that every whole-run pass (wholeprogram.py, importgates.py, tritonguards.py,
fp8tests.py, optests.py, ...) shares one copy without an import circle through testscopes.py."""

from __future__ import annotations

from collections import defaultdict
from typing import Optional


def module_names(relpath: str) -> list[str]:
    """The dotted names a .py file may be imported by, longest first (the package root is not
    known: `src/pkg/a.py` is `src.pkg.a`, `pkg.a` or `a`), at least two parts long unless the
    file is at the top."""
    parts = relpath[:-3].split("/")
    if parts[-1] == "__init__":
        parts = parts[:-1]
    if not parts:
        return []
    names = [".".join(parts[i:]) for i in range(len(parts))]
    return [n for n in names if "." in n] or names[-1:]


def resolve_relative(importer: str, dots: int, module: str) -> str:
    """The relpath stem (`pkg/sub/mod`) a relative `from ..mod import` in `importer` names."""
    folder = importer.rsplit("/", 1)[0] if "/" in importer else ""
    parts = folder.split("/") if folder else []
    if dots > 1:
        parts = parts[:len(parts) - (dots - 1)] if dots - 1 <= len(parts) else []
    if module:
        parts += module.split(".")
    return "/".join(parts)


class RunTexts:
    """The bytes of a run's results by index, each read on the first ask (`texts(i)`, or
    `texts.get(i, default)` where a dict is expected): the whole-run passes read only the files
    their cheap tests select."""

    def __init__(self, results: list, paths: dict[str, str]) -> None:
        self.results, self.paths, self.cache = results, paths, {}

    def __call__(self, i: int) -> Optional[bytes]:
        if i not in self.cache:
            self.cache[i] = result_bytes(self.results[i], self.paths)
        return self.cache[i]

    def get(self, i: int, default=None):
        found = self(i)
        return found if found is not None else default


class RunModules:
    """The run's Python modules by dotted name (`by_name`: name -> result index, the first file
    that holds it) and their trees, each parsed on the first ask (`tree(i)`); the whole-run passes
    that follow names across modules extend it (flags16, flagcalls19, fp8folds19)."""

    def __init__(self, results: list, text_of) -> None:
        self.results, self.text_of = results, text_of
        self.by_name: dict[str, int] = {}
        self.trees: dict = {}
        for i, result in enumerate(results):
            if result.relpath.endswith(".py"):
                for name in module_names(result.relpath):
                    self.by_name.setdefault(name, i)

    def tree(self, i: int):
        if i not in self.trees:
            from . import astcache

            data = self.text_of(i)
            self.trees[i] = astcache.parse(data) if data else None
        return self.trees[i]


def open_python(results: list, wanted) -> list[int]:
    """The indices of the run's .py results holding a finding `wanted` (a whole-run pass's
    candidates)."""
    return [i for i, r in enumerate(results) if r.relpath.endswith(".py") and any(wanted(f) for f in r.findings)]


def parsed(indices, text_of, word: bytes = b""):
    """(i, tree) of each file of `indices` (in order) whose bytes hold `word`, its tree parsed by
    astcache (None: it does not parse, the caller decides); each file read only when reached. The
    preamble every whole-run pass repeated: the files holding an open finding, or the files naming
    a unit, read and parsed."""
    from . import astcache

    for i in indices:
        data = text_of(i)
        if not data or word not in data:
            continue
        yield i, astcache.parse(data)


def result_bytes(result, paths: dict[str, str]) -> Optional[bytes]:
    """A FileResult's bytes: from the result, or read again from its path (None when unreadable)."""
    if result.original is not None:
        return result.original
    path = paths.get(result.relpath)
    if path is None:
        return None
    try:
        with open(path, "rb") as handle:
            return handle.read()
    except OSError:
        return None


class ImportIndex:
    """Which file of a run an import names: by relpath stem for a relative import (resolved by
    wholeprogram.file_facts), by every dotted name of the file for an absolute one."""

    def __init__(self, results, python) -> None:
        self.by_stem = {results[i].relpath[:-3]: i for i in python}
        self.by_dotted: dict[str, set[int]] = defaultdict(set)
        for i in python:
            for name in module_names(results[i].relpath):
                self.by_dotted[name].add(i)

    def files(self, imports, importer: int) -> list[tuple[int, int]]:
        """[(imported file, line)] of a file's `(name, line, relative)` imports, itself left out."""
        out = []
        for name, line, relative in imports:
            if relative:
                found = {self.by_stem[name]} if name in self.by_stem else set()
                if f"{name}/__init__" in self.by_stem:
                    found.add(self.by_stem[f"{name}/__init__"])
            else:
                found = self.by_dotted.get(name, set())
            out.extend((j, line) for j in found if j != importer)
        return out
