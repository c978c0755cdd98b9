"""Where the shim goes, and how each migrated file imports it.

A project that declares how it is built (pyproject.toml, setup.cfg or setup.py, read statically by
`layout.py`) is used installed: as a wheel, an editable install, from another folder. Its shim
goes *inside* its own import package, so that every way of installing it ships the shim:

    src/mypkg/models/gpt.py    ->  from mypkg import npu_compat      (shim: src/mypkg/npu_compat/)
    scripts/train.py           ->  try: from mypkg import npu_compat
                                   except ImportError: <put src/ on sys.path>; from mypkg import npu_compat
    tests/test_gpt.py          ->  the same as scripts/

Files outside the packages (scripts, tests, notebooks) import the shim of the project's main
package (the one named like the project, else the first), with a bootstrap that makes the
package importable from a checkout when it is not installed.

A project without packaging (research scripts) keeps one shim at the root, `import npu_compat`,
with the bootstrap for files that run as scripts from a subfolder.

The decision is made once per run (`plan`) and handed to the engine as `Options.shim_specs`: a
`ShimImport` for every folder that holds a migrated file.
"""

from __future__ import annotations

import dataclasses
import posixpath
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Optional

PACKAGING_FILES = ("pyproject.toml", "setup.py", "setup.cfg")


@dataclass(frozen=True)
class ShimImport:
    """How the files of one folder import the shim."""

    name: str  # the name the code uses (`npu_compat.device()`): the shim package's own name
    package: str = ""  # dotted package that holds the shim; "" for the top-level shim at the root
    home: str = ""  # folder (relative to the root) the shim is written into: <home>/<name>/
    to_path_root: str = ""  # POSIX path from the file's folder to the folder that must be on
    #                         sys.path for the import to work ("" when it is the file's own folder)
    in_package: bool = False  # the file is a module of an import package (not a script)

    @property
    def module(self) -> str:
        """The shim's dotted module name (`npu_compat`, `mypkg.npu_compat`)."""
        return f"{self.package}.{self.name}" if self.package else self.name

    @property
    def folder(self) -> str:
        """The shim's folder, relative to the root."""
        return posixpath.join(self.home, self.name) if self.home else self.name

    def bootstrap(self, is_script: bool) -> str:
        """The path to append to sys.path when the import fails, "" for none. A module of a
        package needs one only when it runs as a script (a main guard); other files always."""
        if not self.to_path_root or self.to_path_root == ".":
            return ""
        if self.in_package and not is_script:
            return ""
        return self.to_path_root


def legacy(name: str, relpath: str, in_package: bool) -> ShimImport:
    """The shim at the root of a project without packaging."""
    depth = relpath.count("/")
    return ShimImport(name=name, to_path_root="/".join([".."] * depth), in_package=in_package)


def spec_for(options, relpath: str) -> ShimImport:
    """How the file at `relpath` imports the shim, under the run's options."""
    folder = posixpath.dirname(relpath)
    specs = options.shim_spec_map
    if specs:
        spec = specs.get(folder)
        if spec is not None:
            return spec
    return legacy(options.shim_name, relpath, folder in options.package_dirs)


def project_root(start: Path) -> Path:
    """The root of the project that holds `start` (a folder): out of any import package it is
    in, and up to the folder of the packaging files when `start` is inside one of the packages
    they ship (a src/ layout, a namespace package). A folder that is no part of a package stays
    the root (the user named it)."""
    folder = start.absolute()
    while (folder / "__init__.py").is_file() and folder.parent != folder:
        folder = folder.parent
    if has_packaging(folder):
        return folder
    from .layout import read_layout

    for parent in list(folder.parents)[:3]:
        if has_packaging(parent):
            rel = folder.relative_to(parent).as_posix()
            layout = read_layout(parent)
            if rel in layout.import_roots or any(
                p == rel or p.startswith(rel + "/") or rel.startswith(p + "/") for p in layout.packages
            ):
                return parent
            break
    return folder


def has_packaging(folder: Path) -> bool:
    return any((folder / name).is_file() for name in PACKAGING_FILES)


def _normal(name: str) -> str:
    return re.sub(r"[-_.]+", "_", name).lower()


def main_package(layout) -> Optional[str]:
    """The package that non-package files take the shim from: named like the project, else the
    first in sorted order."""
    packages = sorted(layout.packages)
    if not packages:
        return None
    wanted = _normal(getattr(layout, "name", "") or "")
    for folder in packages:
        if wanted and _normal(posixpath.basename(folder)) == wanted:
            return folder
    return packages[0]


def plan(root: Path, relpaths: Iterable[str], name: str, layout=None) -> tuple:
    """Folder -> ShimImport for the folders of `relpaths`; () for a project without packaging
    (every file then takes the root shim: `legacy`)."""
    from .layout import import_name, read_layout, shim_home

    if layout is None:
        layout = read_layout(root)
    # a top-level shim an earlier run left at the root looks like a package of a flat layout
    own = [p for p in layout.packages if posixpath.basename(p) != name]
    if len(own) != len(layout.packages):
        layout = dataclasses.replace(layout, packages=tuple(own))
    if not layout.packaged or not layout.packages:
        return ()
    main = main_package(layout)
    main_home = shim_home(layout, posixpath.join(main, "__init__.py")) or main
    specs = {}
    for folder in sorted({posixpath.dirname(rel) for rel in relpaths}):
        home = shim_home(layout, posixpath.join(folder, "__x__.py") if folder else "__x__.py")
        in_package = home is not None
        home = home or main_home
        path_root = _import_root(layout, home)
        to_root = posixpath.relpath(path_root or ".", folder or ".")
        specs[folder] = ShimImport(name=name, package=import_name(layout, home), home=home,
                                   to_path_root="" if to_root == "." else to_root,
                                   in_package=in_package)
    return tuple(sorted(specs.items()))


def _import_root(layout, home: str) -> str:
    for root in sorted(layout.import_roots, key=len, reverse=True):
        if root == "" or home == root or home.startswith(root + "/"):
            return root
    return ""
