"""The data every engine shares, below all of them: a run's `Options`, one file's `FileResult`,
and `tool_finding`, the findings the tool reports about itself (a file it cannot read, parse or
finish: NPU001-NPU003) rather than a rule about the code.

The Python engine (engine.py), the notebook engine (notebook.py), the text-file engine
(textfiles.py), the run (run.py), the cache and the commands all speak these; this module imports
none of them.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from typing import Optional

from . import catalogue
from .findings import Finding


@dataclass(frozen=True)
class Options:
    enabled: frozenset
    shim_name: str = "npu_compat"
    package_dirs: frozenset = frozenset()  # relative dirs with an __init__.py
    hot_slices: bool = True  # parse only statements a rule can act on (hotslice.py)
    rewrite_scripts: bool = False  # opt-in: rewrite launch scripts (shell), not only report them
    # folder -> placement.ShimImport, for a packaged project (placement.plan); () for the root shim
    shim_specs: tuple = ()
    # top-level names of the project's own modules and packages (isort's first party)
    first_party: frozenset = frozenset()
    # (relpath, class name, reason): classes in a per-device class family spread over the modules
    # of one folder, left as written (families/platform.py, sibling_class_families)
    platform_classes: frozenset = frozenset()
    # relpaths of the run's Python modules (`pkg/mod.py`): an import of the project's own that
    # resolves to one is Python, not a compiled extension, whatever its name (probes.py)
    python_modules: frozenset = frozenset()
    # (importer relpath, module as its imports resolve, name, what): names other modules of the
    # run bind to CUDA-only code that the importer's device checks may guard (crossgates22.py)
    foreign_cuda_only: frozenset = frozenset()

    @functools.cached_property
    def _modules_by_folder(self) -> dict:
        by_folder: dict[str, list[str]] = {}
        for rel in self.python_modules:
            folder, _, name = rel.rpartition("/")
            by_folder.setdefault(folder, []).append(name)
        return {folder: tuple(sorted(names)) for folder, names in by_folder.items()}

    def modules_near(self, relpath: str) -> tuple:
        """The Python modules of the file's folder and its parent's (what a relative import of
        the file most often names): the part of `python_modules` its cache key holds."""
        folder = relpath.rpartition("/")[0]
        parent = folder.rpartition("/")[0] if folder else None
        return (self._modules_by_folder.get(folder, ()),
                self._modules_by_folder.get(parent, ()) if parent is not None else ())

    @functools.cached_property
    def shim_spec_map(self) -> dict:
        return dict(self.shim_specs)

    @functools.cached_property
    def _platform_class_map(self) -> dict:
        by_file: dict[str, dict[str, str]] = {}
        for relpath, name, reason in self.platform_classes:
            by_file.setdefault(relpath, {})[name] = reason
        return by_file

    @functools.cached_property
    def _foreign_map(self) -> dict:
        by_file: dict[str, dict] = {}
        for relpath, module, name, what in self.foreign_cuda_only:
            by_file.setdefault(relpath, {})[(module, name)] = what
        return by_file

    def foreign_bound(self, relpath: str) -> dict:
        """(module, name) -> what CUDA-only code another module binds to a name the file imports."""
        return self._foreign_map.get(relpath, {})

    def sibling_classes(self, relpath: str) -> dict[str, str]:
        """Class name -> reason for the file's classes in a per-device class family."""
        return self._platform_class_map.get(relpath, {})


@dataclass
class FileResult:
    relpath: str
    findings: list[Finding] = field(default_factory=list)
    original: Optional[bytes] = None
    new: Optional[bytes] = None  # None: no change
    encoding: str = "utf-8"
    skipped: Optional[str] = None  # why the file was not parsed (no trigger words, NPU-aware)
    # platform-aware scopes the rules left alone: (first line, last line, reason), in file order
    skipped_scopes: list[tuple[int, int, str]] = field(default_factory=list)
    suppressed: int = 0  # constructs left alone because a comment said so
    # not for the cache: the file ran out of time or killed the process migrating it (the
    # machine's load, the time budget or a fixed libcst may give another answer next time)
    uncached: bool = False
    # what the whole-program pass needs of a .py file (wholeprogram.file_facts), kept in its cache
    # entry; None: computed from the text when needed
    facts: Optional[dict] = None

    @property
    def changed(self) -> bool:
        return self.new is not None and self.new != self.original


def tool_finding(code: str, relpath: str, detail: str, line: int = 1, column: int = 1) -> Finding:
    rule = catalogue.rule(code)
    return Finding(relpath, line, column, code, f"{rule.message}: {detail}", False, "")


class HeavyFile(BaseException):
    """A heavy file met while isolate_heavy is on: the caller (an in-process run of run.py's
    run_files) migrates it again in a process of its own, which it can kill. Not an Exception:
    no `except Exception` swallows it. (Raised by the engine; here so that run.py can catch it
    without importing the engine.)"""


_HEAVY = {"isolate": False}  # whether a heavy file raises HeavyFile in this process


def isolate_heavy(on: bool) -> None:
    """In this process from now on, a heavy file raises HeavyFile (on) or is parsed here (off)."""
    _HEAVY["isolate"] = on


def heavy_isolated() -> bool:
    return _HEAVY["isolate"]
