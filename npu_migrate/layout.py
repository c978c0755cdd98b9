"""How a migrated project is built and installed, read statically from its packaging metadata.

The runtime shim must live inside what the project's wheel ships, or an installed migrated library
fails with ModuleNotFoundError. This module tells which folders hold the import packages the wheel
ships (`read_layout`), which package a file's shim goes into (`shim_home`), its dotted name
(`import_name`) and which lines of the packaging files must change so that the wheel ships the shim
subpackage too (`packaging_edits`).

Nothing is executed: pyproject.toml is read with tomllib, setup.cfg with configparser and setup.py
through its syntax tree (literal values, `find_packages(...)` / `find_namespace_packages(...)`,
module-level assignments of literals passed by name). Whatever cannot be read that way becomes a
note naming the file; malformed input never raises.

Backends modelled: setuptools (pyproject `[tool.setuptools]`, setup.cfg `[options]`, setup.py, and
automatic discovery as setuptools/discovery.py does it: explicit package-dir, src layout, flat
layout with its reserved names), hatchling, flit, pdm-backend and poetry-core. Any other backend is
"other": the package is guessed from the project name, with a note.
"""

from __future__ import annotations

import ast
import configparser
import io
import os
import re
import tokenize
from dataclasses import dataclass, field
from fnmatch import fnmatchcase
from pathlib import Path
from typing import Any, Iterable, Optional

try:  # Python 3.11+
    import tomllib
except ModuleNotFoundError:  # pragma: no cover - Python 3.10
    import tomli as tomllib  # type: ignore[no-redef]

PYPROJECT = "pyproject.toml"
SETUP_CFG = "setup.cfg"
SETUP_PY = "setup.py"

BACKENDS = {
    "setuptools.build_meta": "setuptools",
    "setuptools.build_meta:__legacy__": "setuptools",
    "hatchling.build": "hatchling",
    "hatchling.ouroboros": "hatchling",
    "flit_core.buildapi": "flit",
    "flit.buildapi": "flit",
    "pdm.backend": "pdm",
    "pdm.pep517.api": "pdm",
    "poetry.core.masonry.api": "poetry",
    "poetry.masonry.api": "poetry",
}

# setuptools/discovery.py: the names a flat layout never ships (FlatLayoutPackageFinder._EXCLUDE),
# plus the patterns its finders always exclude.
_FLAT_RESERVED = (
    "ci", "bin", "debian", "doc", "docs", "documentation", "manpages", "news", "newsfragments",
    "changelog", "test", "tests", "unit_test", "unit_tests", "example", "examples", "scripts",
    "tools", "util", "utils", "python", "build", "dist", "venv", "env", "requirements", "tasks",
    "fabfile", "site_scons", "benchmark", "benchmarks", "exercise", "exercises", "htmlcov", "[._]*",
)
_ALWAYS_EXCLUDE = ("ez_setup", "*__pycache__")
_MAX_DEPTH = 24  # of a package search; a guard against symlink loops


@dataclass(frozen=True)
class Layout:
    """What the project's packaging says about its import packages (all paths relative, POSIX)."""

    root: Path  # the project root given
    packaged: bool  # packaging metadata declares how the project is built/installed
    backend: Optional[str]  # "setuptools", "hatchling", "flit", "pdm", "poetry", "other", None
    packaging_files: tuple[str, ...]  # the packaging files read
    import_roots: tuple[str, ...]  # folders that hold top-level import packages once installed
    packages: tuple[str, ...]  # folders of the top-level import packages the wheel ships, sorted
    notes: tuple[str, ...]  # what could not be read statically, each naming the file
    # (folder, dotted name it is installed as): "src" -> "" for a src layout, "rules" -> "pkg.rules"
    # for a package-dir entry. import_name() resolves a folder by its longest entry.
    import_map: tuple[tuple[str, str], ...] = ()
    name: Optional[str] = None  # the project (distribution) name, where given statically
    _detail: Any = field(default=None, repr=False, compare=False)  # what packaging_edits needs


# ------------------------------------------------------------------------------------------------
# Small helpers


def _norm(path: str) -> str:
    """A relative POSIX folder: no "./", no leading or trailing "/", "" for the root."""
    parts = [p for p in str(path).replace("\\", "/").split("/") if p not in ("", ".")]
    return "/".join(parts)


def _join(*parts: str) -> str:
    return _norm("/".join(p for p in parts if p))


def _parent(folder: str) -> str:
    return folder.rsplit("/", 1)[0] if "/" in folder else ""


def _is_str_list(value: Any) -> bool:
    return isinstance(value, list) and all(isinstance(v, str) for v in value)


def _str_tuple(value: Any) -> Optional[tuple[str, ...]]:
    """A string or a list of strings as a tuple; None for anything else."""
    if isinstance(value, str):
        return (value,)
    if _is_str_list(value):
        return tuple(value)
    return None


def _normalize_name(name: str) -> str:
    """A project name as the module name most backends look for: "My-Pkg.x" -> "my_pkg_x"."""
    return re.sub(r"[-_.]+", "_", name).lower()


def _glob_head(pattern: str) -> str:
    """The literal folder part of a glob/gitignore pattern: "src/pkg/**/*.py" -> "src/pkg"."""
    parts = []
    for part in _norm(pattern.strip()).split("/"):
        if not part or any(c in part for c in "*?[!"):
            break
        parts.append(part)
    return "/".join(parts)


# ------------------------------------------------------------------------------------------------
# Reading the files


@dataclass
class _File:
    relpath: str
    raw: bytes
    text: Optional[str]  # None: not decodable; then `lossy` is all there is
    lossy: str  # the text with undecodable bytes replaced, for best-effort reading
    encoding: str = "utf-8"
    bom: bool = False


def _read_file(root: Path, relpath: str, notes: list[str]) -> Optional[_File]:
    path = root / relpath
    try:
        if not path.is_file():
            return None
        raw = path.read_bytes()
    except OSError as exc:
        notes.append(f"{relpath}: cannot be read ({exc.strerror or exc}); ignored")
        return None
    encoding = "utf-8"
    if relpath.endswith(".py"):  # a coding cookie is valid Python
        try:
            encoding = tokenize.detect_encoding(io.BytesIO(raw).readline)[0]
        except SyntaxError:
            pass
        encoding = "utf-8" if encoding == "utf-8-sig" else encoding
    lossy = raw.decode(encoding, errors="replace")
    bom = lossy.startswith("\ufeff")
    lossy = lossy[1:] if bom else lossy
    try:
        raw.decode(encoding)
    except (UnicodeDecodeError, LookupError):
        notes.append(f"{relpath}: not {encoding} text; read best-effort")
        return _File(relpath, raw, None, lossy, encoding, bom)
    return _File(relpath, raw, lossy, lossy, encoding, bom)


def _load_toml(f: _File, notes: list[str]) -> Optional[dict]:
    if f.text is None:
        return None  # noted already
    try:
        return tomllib.loads(f.text)
    except (tomllib.TOMLDecodeError, ValueError, RecursionError) as exc:
        notes.append(f"{f.relpath}: not valid TOML ({exc}); read best-effort")
        return None


def _toml_guess(text: Optional[str]) -> dict:
    """What an invalid pyproject.toml seems to say, from its table headers and build-backend."""
    guess: dict = {}
    if not text:
        return guess
    for header in ("project", "build-system"):
        if re.search(rf"^\s*\[\s*{header}\s*\]", text, re.M):
            guess[header] = {}
    if re.search(r"^\s*\[\s*tool\.poetry\s*\]", text, re.M):
        guess["tool"] = {"poetry": {}}
    m = re.search(r"""^\s*build-backend\s*=\s*["']([^"']+)["']""", text, re.M)
    if m:
        guess.setdefault("build-system", {})["build-backend"] = m.group(1)
    m = re.search(r"""^\s*name\s*=\s*["']([^"']+)["']""", text, re.M)
    if m and "project" in guess:
        guess["project"]["name"] = m.group(1)
    return guess


def _table(data: Any, *keys: str) -> dict:
    for key in keys:
        data = data.get(key) if isinstance(data, dict) else None
    return data if isinstance(data, dict) else {}


# ------------------------------------------------------------------------------------------------
# setuptools: where the package list comes from


@dataclass
class _Spec:
    """One statement of setuptools' `packages`."""

    kind: str  # "list" | "find" | "dynamic"
    file: str  # the packaging file that says it
    names: tuple[str, ...] = ()  # list
    where: tuple[str, ...] = (".",)  # find
    include: Optional[tuple[str, ...]] = None  # find; None: every name ("*")
    exclude: tuple[str, ...] = ()  # find
    namespaces: bool = True  # find
    include_known: bool = True  # find: False when include= is computed at run time
    what: str = ""  # dynamic: what it is


@dataclass
class _SetuptoolsConfig:
    packages: Optional[_Spec] = None
    package_dir: Optional[dict[str, str]] = None
    modules: bool = False  # py_modules / ext_modules given: no automatic discovery
    modules_file: str = ""


# ---- pyproject.toml [tool.setuptools]


def _setuptools_from_pyproject(data: dict, notes: list[str]) -> _SetuptoolsConfig:
    cfg = _SetuptoolsConfig()
    st = _table(data, "tool", "setuptools")
    where = f"{PYPROJECT}: [tool.setuptools]"
    pkgs = st.get("packages")
    if pkgs is not None:
        if _is_str_list(pkgs):
            cfg.packages = _Spec("list", PYPROJECT, names=tuple(pkgs))
        elif isinstance(pkgs, dict) and isinstance(pkgs.get("find"), dict):
            find = pkgs["find"]
            spec = _Spec("find", PYPROJECT, where=(".",), namespaces=True)
            w = _str_tuple(find.get("where", ["."]))
            inc = find.get("include")
            exc = _str_tuple(find.get("exclude", []))
            ns = find.get("namespaces", True)
            if w is None or (inc is not None and _str_tuple(inc) is None) or exc is None \
                    or not isinstance(ns, bool):
                notes.append(f"{where} packages.find has a value of the wrong type; the package "
                             f"search is read best-effort")
            spec.where = w or (".",)
            spec.include = _str_tuple(inc) if inc is not None else None
            spec.include_known = inc is None or spec.include is not None
            spec.exclude = exc or ()
            spec.namespaces = ns if isinstance(ns, bool) else True
            cfg.packages = spec
        else:
            notes.append(f"{where} packages is neither a list of names nor {{find = ...}}; ignored")
            cfg.packages = _Spec("dynamic", PYPROJECT, what="packages of an unexpected type")
    pdir = st.get("package-dir")
    if pdir is not None:
        if isinstance(pdir, dict) and all(isinstance(v, str) for v in pdir.values()):
            cfg.package_dir = {str(k): _norm(v) for k, v in pdir.items()}
        else:
            notes.append(f"{where} package-dir is not a table of folders; ignored")
    if st.get("py-modules") is not None:
        cfg.modules, cfg.modules_file = True, PYPROJECT
    return cfg


# ---- setup.cfg [options]


def _cfg_list(value: str) -> list[str]:
    """setuptools' list syntax of setup.cfg: one item a line, or comma-separated on one line."""
    chunks = value.splitlines() if "\n" in value else value.split(",")
    return [c.strip() for c in chunks if c.strip()]


def _cfg_dict(value: str) -> dict[str, str]:
    result = {}
    for line in _cfg_list(value):
        key, _, val = line.partition("=")
        result[key.strip()] = val.strip()
    return result


def _parse_cfg(text: str) -> configparser.RawConfigParser:
    parser = configparser.RawConfigParser(strict=False)
    parser.read_string(text)
    return parser


def _cfg_options(parser: configparser.RawConfigParser, section: str) -> dict[str, str]:
    if not parser.has_section(section):
        return {}
    return {k.replace("-", "_").lower(): v for k, v in parser.items(section)}


def _setuptools_from_cfg(parser: configparser.RawConfigParser) -> _SetuptoolsConfig:
    cfg = _SetuptoolsConfig()
    opts = _cfg_options(parser, "options")
    if "packages" in opts:
        value = opts["packages"].strip()
        if value in ("find:", "find_namespace:"):
            find = _cfg_options(parser, "options.packages.find")
            where = _cfg_list(find.get("where", ""))
            inc = _cfg_list(find.get("include", ""))
            cfg.packages = _Spec(
                "find", SETUP_CFG, where=(where[0],) if where else (".",),
                include=tuple(inc) if inc else None,
                exclude=tuple(_cfg_list(find.get("exclude", ""))),
                namespaces=value == "find_namespace:")
        else:
            cfg.packages = _Spec("list", SETUP_CFG, names=tuple(_cfg_list(value)))
    if "package_dir" in opts:
        cfg.package_dir = {k: _norm(v) for k, v in _cfg_dict(opts["package_dir"]).items()}
    if "py_modules" in opts:
        cfg.modules, cfg.modules_file = True, SETUP_CFG
    return cfg


# ---- setup.py, through its syntax tree

_FINDERS = {"find_packages": False, "find_namespace_packages": True}


@dataclass
class _SetupPy:
    config: _SetuptoolsConfig
    call_found: bool = False
    name: Optional[str] = None
    packages_node: Optional[ast.AST] = None  # the literal list of names
    include_node: Optional[ast.AST] = None  # the literal include= list of a finder call


def _module_assignments(tree: ast.Module) -> dict[str, Optional[ast.AST]]:
    """NAME -> value of module-level assignments made once (None where assigned several times)."""
    seen: dict[str, Optional[ast.AST]] = {}

    def record(target: ast.AST, value: Optional[ast.AST]) -> None:
        if isinstance(target, ast.Name):
            seen[target.id] = None if target.id in seen else value

    for stmt in tree.body:
        if isinstance(stmt, ast.Assign):
            for target in stmt.targets:
                record(target, stmt.value if len(stmt.targets) == 1 else None)
        elif isinstance(stmt, ast.AnnAssign) and stmt.value is not None:
            record(stmt.target, stmt.value)
        elif isinstance(stmt, ast.AugAssign):
            record(stmt.target, None)
    return seen


def _is_setup_call(node: ast.AST) -> bool:
    if not isinstance(node, ast.Call):
        return False
    func = node.func
    return (isinstance(func, ast.Name) and func.id == "setup") or \
        (isinstance(func, ast.Attribute) and func.attr == "setup")


def _finder_of(node: ast.AST) -> Optional[bool]:
    """For a call of find_packages / find_namespace_packages: whether it finds namespaces."""
    if not isinstance(node, ast.Call):
        return None
    func = node.func
    name = func.id if isinstance(func, ast.Name) else \
        func.attr if isinstance(func, ast.Attribute) else None
    return _FINDERS.get(name or "")


def _read_setup_py(text: str, notes: list[str]) -> _SetupPy:
    result = _SetupPy(_SetuptoolsConfig())
    try:
        tree = ast.parse(text, filename=SETUP_PY)
    except (SyntaxError, ValueError) as exc:
        line = getattr(exc, "lineno", None)
        notes.append(f"{SETUP_PY}: not valid Python{f' (line {line})' if line else ''}; "
                     f"its setup() arguments are unknown")
        return result
    assigns = _module_assignments(tree)

    def resolve(node: ast.AST) -> ast.AST:
        if isinstance(node, ast.Name) and assigns.get(node.id) is not None:
            return assigns[node.id]  # type: ignore[return-value]
        return node

    def literal(node: ast.AST) -> tuple[bool, Any]:
        try:
            return True, ast.literal_eval(resolve(node))
        except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
            return False, None

    calls = [n for n in ast.walk(tree) if _is_setup_call(n)]
    if not calls:
        notes.append(f"{SETUP_PY}: no setup(...) call found; its arguments are unknown")
        return result
    if len(calls) > 1:
        notes.append(f"{SETUP_PY}: {len(calls)} setup(...) calls; the first one is read")
    call = calls[0]
    result.call_found = True

    keywords: dict[str, ast.AST] = {}
    unread_kwargs = False
    for kw in call.keywords:
        if kw.arg is not None:
            keywords[kw.arg] = kw.value
            continue
        value = resolve(kw.value)  # setup(**NAME) with NAME a dict literal or dict(...) call
        if isinstance(value, ast.Dict) and all(isinstance(k, ast.Constant) and isinstance(k.value, str)
                                               for k in value.keys):
            for k, v in zip(value.keys, value.values):
                keywords.setdefault(k.value, v)  # type: ignore[union-attr]
        elif isinstance(value, ast.Call) and isinstance(value.func, ast.Name) \
                and value.func.id == "dict" and not value.args:
            for sub in value.keywords:
                if sub.arg is None:
                    unread_kwargs = True
                else:
                    keywords.setdefault(sub.arg, sub.value)
        else:
            unread_kwargs = True
    cfg = result.config

    if "name" in keywords:
        ok, value = literal(keywords["name"])
        result.name = value if ok and isinstance(value, str) else None

    if "packages" in keywords:
        node = resolve(keywords["packages"])
        finder = _finder_of(node)
        ok, value = literal(node)
        if ok and isinstance(value, (list, tuple)) and all(isinstance(v, str) for v in value):
            cfg.packages = _Spec("list", SETUP_PY, names=tuple(value))
            result.packages_node = node
        elif finder is not None:
            cfg.packages = _find_call(node, finder, literal, resolve, result, notes)  # type: ignore[arg-type]
        else:
            what = ast.get_source_segment(text, keywords["packages"]) or "an expression"
            what = what if len(what) <= 60 else what[:57] + "..."
            notes.append(f"{SETUP_PY}: packages={what} is computed at run time; the packages are "
                         f"guessed as setuptools' automatic discovery would find them")
            cfg.packages = _Spec("dynamic", SETUP_PY, what=f"packages={what}")
    elif unread_kwargs:
        notes.append(f"{SETUP_PY}: setup(**...) passes arguments that cannot be read statically; "
                     f"the packages are guessed as setuptools' automatic discovery would find them")
        cfg.packages = _Spec("dynamic", SETUP_PY, what="setup(**...) arguments")

    if "package_dir" in keywords:
        ok, value = literal(keywords["package_dir"])
        if ok and isinstance(value, dict) and all(isinstance(k, str) and isinstance(v, str)
                                                  for k, v in value.items()):
            cfg.package_dir = {k: _norm(v) for k, v in value.items()}
        else:
            notes.append(f"{SETUP_PY}: package_dir= is computed at run time; ignored")
    for key in ("py_modules", "ext_modules"):
        if key in keywords:
            ok, value = literal(keywords[key])
            if not ok or value:
                cfg.modules, cfg.modules_file = True, SETUP_PY
    return result


def _find_call(node: ast.Call, namespaces: bool, literal, resolve, result: _SetupPy,
               notes: list[str]) -> _Spec:
    spec = _Spec("find", SETUP_PY, namespaces=namespaces)
    args: dict[str, ast.AST] = dict(zip(("where", "exclude", "include"), node.args))
    args.update({kw.arg: kw.value for kw in node.keywords if kw.arg})
    if any(kw.arg is None for kw in node.keywords) or len(node.args) > 3:
        notes.append(f"{SETUP_PY}: the arguments of {ast.unparse(node.func)}(...) cannot be read "
                     f"statically; the search is read best-effort")
    if "where" in args:
        ok, value = literal(args["where"])
        if ok and isinstance(value, str):
            spec.where = (value,)
        else:
            notes.append(f"{SETUP_PY}: where= of {ast.unparse(node.func)}(...) is computed at run "
                         f"time; the project root is assumed")
    for key in ("include", "exclude"):
        if key not in args:
            continue
        ok, value = literal(args[key])
        if ok and isinstance(value, str):
            value = (value,)
        if ok and isinstance(value, (list, tuple, set)) and all(isinstance(v, str) for v in value):
            if key == "include":
                spec.include = tuple(value)
                target = resolve(args[key])
                result.include_node = target if isinstance(target, (ast.List, ast.Tuple)) else None
            else:
                spec.exclude = tuple(value)
        else:
            notes.append(f"{SETUP_PY}: {key}= of {ast.unparse(node.func)}(...) is computed at run "
                         f"time; ignored")
            if key == "include":
                spec.include_known = False
    return spec


# ---- the package search of setuptools (PackageFinder / PEP420PackageFinder), statically


def _could_match_below(name: str, patterns: tuple[str, ...]) -> bool:
    """Whether some pattern can match a name below package `name` ("name.x...")."""
    below = name + "."
    for pattern in patterns:
        lit = re.split(r"[*?\[]", pattern, maxsplit=1)[0]
        if below.startswith(lit) or lit.startswith(below):
            return True
    return False


def _find(root: Path, where: str, include: Optional[tuple[str, ...]], exclude: tuple[str, ...],
          namespaces: bool) -> list[tuple[str, str]]:
    """(dotted name, folder) of the top-most packages setuptools' finder would return."""
    include = include or ("*",)
    exclude = tuple(exclude) + _ALWAYS_EXCLUDE
    found: list[tuple[str, str]] = []
    base = root / where if where not in ("", ".") else root

    def walk(folder: Path, prefix: str, rel: str, depth: int) -> None:
        if depth > _MAX_DEPTH:
            return
        try:
            entries = sorted(e.name for e in os.scandir(folder) if e.is_dir())
        except OSError:
            return
        for name in entries:
            full = folder / name
            package = f"{prefix}{name}"
            if "." in name or not (namespaces or (full / "__init__.py").is_file()):
                continue
            if any(fnmatchcase(package, p) for p in include) and \
                    not any(fnmatchcase(package, p) for p in exclude):
                found.append((package, _join(rel, name)))
                continue  # what is below ships with it, as far as the top-level folders go
            if f"{package}*" in exclude or f"{package}.*" in exclude:
                continue
            if _could_match_below(package, include):
                walk(full, package + ".", _join(rel, name), depth + 1)

    walk(base, "", _norm(where), 0)
    return found


def _package_path(name: str, package_dir: dict[str, str]) -> str:
    """The folder of package `name` given package_dir (setuptools' find_package_path)."""
    parts = name.split(".")
    for i in range(len(parts), 0, -1):
        partial = ".".join(parts[:i])
        if partial in package_dir:
            return _join(package_dir[partial], *parts[i:])
    return _join(package_dir.get("", ""), *parts)


def _flat_candidates(root: Path) -> list[str]:
    """Top-level folders setuptools' flat-layout discovery would take as packages."""
    result = []
    try:
        names = sorted(e.name for e in os.scandir(root) if e.is_dir())
    except OSError:
        return result
    for name in names:
        if "." in name or not (name.isidentifier() or name.endswith("-stubs")):
            continue
        if any(fnmatchcase(name, p) for p in _FLAT_RESERVED + _ALWAYS_EXCLUDE):
            continue
        result.append(name)
    return result


@dataclass
class _Found:
    packages: list[str] = field(default_factory=list)  # top-level shipped package folders
    import_map: dict[str, str] = field(default_factory=dict)  # folder -> dotted prefix


def _setuptools_packages(root: Path, cfg: _SetuptoolsConfig, notes: list[str]) -> _Found:
    found = _Found()
    pdir = dict(cfg.package_dir or {})
    named = {k: v for k, v in pdir.items() if k}
    found.import_map[pdir.get("", "")] = ""
    found.import_map.update({folder: name for name, folder in named.items()})
    spec = cfg.packages
    if spec is not None and spec.kind == "list":
        folders = sorted({_package_path(name, pdir) for name in spec.names}, key=len)
        for folder in folders:  # keep the folders that no other listed folder holds
            if not any(folder.startswith(top + "/") or top == "" for top in found.packages):
                found.packages.append(folder)
        return found
    if spec is not None and spec.kind == "find":
        wheres = [_norm(w) for w in spec.where]
        for wrel in wheres:
            found.packages.extend(folder for _, folder in
                                  _find(root, wrel, spec.include, spec.exclude, spec.namespaces))
            if wrel and "" not in pdir:  # setuptools fills package_dir from where
                found.import_map[wrel] = ""
        if len(wheres) == 1 and wheres[0] and "" not in pdir:
            found.import_map.pop("", None)
            if spec.file == SETUP_PY:
                notes.append(f"{SETUP_PY}: the packages are searched in {wheres[0]}/ but "
                             f"package_dir has no '' entry for it; {wheres[0]}/ is taken as the "
                             f"import root")
        return found
    if spec is None and cfg.modules:
        return found  # py_modules / ext_modules only: no automatic discovery
    # Automatic discovery (setuptools/discovery.py), also the best guess when `packages` is
    # computed at run time: explicit package-dir entries, else src layout, else flat layout.
    if named:
        found.packages.extend(named.values())
        return found
    src = pdir.get("", "src")
    if (root / src).is_dir():
        found.import_map = {src: ""}
        found.packages.extend(folder for _, folder in _find(root, src, None, (), True))
        return found
    tops = [t for t in _flat_candidates(root) if not t.endswith("-stubs")]
    if len(tops) > 1:
        where = spec.file if spec is not None else "the project"
        notes.append(f"{where}: setuptools' automatic discovery finds several top-level packages "
                     f"in a flat layout ({', '.join(tops)}) and refuses to build until the packages "
                     f"are listed")
    found.packages.extend(tops)
    return found


# ------------------------------------------------------------------------------------------------
# The other backends


def _project_name(data: dict) -> Optional[str]:
    for table in (_table(data, "project"), _table(data, "tool", "poetry")):
        if isinstance(table.get("name"), str):
            return table["name"]
    return None


def _apply_sources(found: _Found, sources: Any, notes: list[str]) -> None:
    if isinstance(sources, list) and all(isinstance(s, str) for s in sources):
        for s in sources:
            found.import_map[_norm(s)] = ""
    elif isinstance(sources, dict) and all(isinstance(v, str) for v in sources.values()):
        for old, new in sources.items():
            found.import_map[_norm(old)] = _norm(new).replace("/", ".")
    elif sources is not None:
        notes.append(f"{PYPROJECT}: [tool.hatch.build] sources is neither a list nor a table; "
                     f"ignored")


def _hatch_packages(root: Path, data: dict, notes: list[str]) -> _Found:
    found = _Found()
    build = _table(data, "tool", "hatch", "build")
    wheel = _table(build, "targets", "wheel")

    def option(key: str) -> Any:
        return wheel.get(key, build.get(key))

    sources = option("sources")
    found.import_map[""] = ""
    for key in ("packages", "only-include", "include"):
        value = option(key)
        if value is None:
            continue
        if not _is_str_list(value):
            notes.append(f"{PYPROJECT}: [tool.hatch.build] {key} is not a list of paths; ignored")
            continue
        if key == "include":
            notes.append(f"{PYPROJECT}: [tool.hatch.build] include patterns are approximated by "
                         f"their folders")
        for entry in value:
            folder = _norm(entry) if key != "include" else _glob_head(entry)
            if not folder or not (root / folder).is_dir():
                continue
            found.packages.append(folder)
            if key == "packages":
                found.import_map[_parent(folder)] = ""
        _apply_sources(found, sources, notes)
        return found
    _apply_sources(found, sources, notes)
    name = _project_name(data)
    if not name:
        notes.append(f"{PYPROJECT}: hatchling finds the package from the project name, which is "
                     f"not given statically")
        return found
    candidates = list(dict.fromkeys([re.sub(r"[^\w\d.]+", "_", name), _normalize_name(name)]))
    for cand in candidates:
        if (root / cand / "__init__.py").is_file():
            found.packages.append(cand)
            return found
        if (root / "src" / cand / "__init__.py").is_file():
            found.packages.append(f"src/{cand}")
            found.import_map["src"] = ""
            return found
        if (root / f"{cand}.py").is_file():
            return found
        nested = sorted(root.glob(f"*/{cand}/__init__.py"))
        if len(nested) == 1:
            found.packages.append(nested[0].relative_to(root).parts[0])
            return found
    notes.append(f"{PYPROJECT}: hatchling finds no package named after the project "
                 f"({' or '.join(candidates)}) and refuses to build until "
                 f"[tool.hatch.build.targets.wheel] packages is given")
    return found


def _flit_packages(root: Path, data: dict, notes: list[str]) -> _Found:
    found = _Found()
    flit = _table(data, "tool", "flit")
    module = _table(flit, "module").get("name") or _table(flit, "metadata").get("module")
    if not isinstance(module, str):
        name = _project_name(data)
        module = name.replace("-", "_") if name else None
    if not module:
        notes.append(f"{PYPROJECT}: flit takes the module from the project name, which is not "
                     f"given statically")
        return found
    path = module.replace(".", "/")
    for base in ("", "src"):
        if (root / base / path).is_dir():
            found.packages.append(_join(base, path))
            found.import_map[base] = ""
            return found
        if (root / base / f"{path}.py").is_file():
            found.import_map[base] = ""
            return found
    notes.append(f"{PYPROJECT}: flit looks for module {module} at {path}/ or src/{path}/, which "
                 f"do not exist")
    return found


def _pdm_packages(root: Path, data: dict, notes: list[str]) -> _Found:
    found = _Found()
    build = _table(data, "tool", "pdm", "build")
    pdir = build.get("package-dir")
    if pdir is not None and not isinstance(pdir, str):
        notes.append(f"{PYPROJECT}: [tool.pdm.build] package-dir is not a folder; ignored")
        pdir = None
    pdir = _norm(pdir) if isinstance(pdir, str) else ("src" if (root / "src").is_dir() else "")
    found.import_map[pdir] = ""
    includes = build.get("includes")
    if includes is not None and not _is_str_list(includes):
        notes.append(f"{PYPROJECT}: [tool.pdm.build] includes is not a list of paths; ignored")
        includes = None
    if includes:
        for entry in includes:
            folder = _glob_head(entry)
            if not folder or not (root / folder).is_dir():
                continue
            if folder == pdir:  # the whole package-dir
                found.packages.extend(_top_regular_packages(root, pdir))
            elif pdir and not folder.startswith(pdir + "/"):  # shipped at its own path
                found.packages.append(folder.split("/")[0])
                found.import_map[""] = ""
            else:
                found.packages.append(_join(pdir, folder[len(pdir):].strip("/").split("/")[0]))
        return found
    found.packages.extend(_top_regular_packages(root, pdir))
    return found


def _top_regular_packages(root: Path, folder: str) -> list[str]:
    base = root / folder if folder else root
    try:
        names = sorted(e.name for e in os.scandir(base) if e.is_dir())
    except OSError:
        return []
    return [_join(folder, n) for n in names
            if n.isidentifier() and n not in ("tests", "test") and (base / n / "__init__.py").is_file()]


def _poetry_packages(root: Path, data: dict, notes: list[str]) -> _Found:
    found = _Found()
    poetry = _table(data, "tool", "poetry")
    pkgs = poetry.get("packages")
    if pkgs is not None:
        if not isinstance(pkgs, list) or not all(isinstance(p, dict) for p in pkgs):
            notes.append(f"{PYPROJECT}: [tool.poetry] packages is not a list of tables; ignored")
            pkgs = None
    if pkgs:
        for entry in pkgs:
            include, base = entry.get("include"), entry.get("from", "")
            fmt = entry.get("format")
            if not isinstance(include, str) or not isinstance(base, str):
                notes.append(f"{PYPROJECT}: [tool.poetry] packages entry {entry!r} is not "
                             f"readable; ignored")
                continue
            if fmt is not None and "wheel" not in ([fmt] if isinstance(fmt, str) else fmt):
                continue
            if "to" in entry:
                notes.append(f"{PYPROJECT}: [tool.poetry] packages entry {include!r} is installed "
                             f"under another name (to=); its import name is approximated")
            head = _glob_head(include)
            folder = _join(_norm(base), head.split("/")[0] if head != _norm(include) else head)
            if head and (root / folder).is_dir():
                found.packages.append(folder)
                found.import_map[_norm(base)] = ""
        return found
    name = _project_name(data)
    if not name:
        notes.append(f"{PYPROJECT}: poetry finds the package from the project name, which is not "
                     f"given statically")
        return found
    module = _normalize_name(name)
    for base in ("", "src"):
        if (root / base / module).is_dir():
            found.packages.append(_join(base, module))
            found.import_map[base] = ""
            return found
    notes.append(f"{PYPROJECT}: poetry looks for package {module} at {module}/ or src/{module}/, "
                 f"which do not exist")
    return found


def _other_packages(root: Path, data: dict, backend_name: str, notes: list[str]) -> _Found:
    found = _Found()
    name = _project_name(data)
    bases = ["", "src"]
    source = _table(data, "tool", "maturin").get("python-source")
    if isinstance(source, str):
        bases.insert(0, _norm(source))
    module = _normalize_name(name) if name else None
    for base in bases:
        if module and (root / base / module).is_dir():
            found.packages.append(_join(base, module))
            found.import_map[base] = ""
            break
    where = f" at {found.packages[0]}/" if found.packages else ""
    notes.append(f"{PYPROJECT}: build backend {backend_name!r} is not modelled; the wheel is "
                 f"assumed to ship the package named after the project{where}")
    return found


# ------------------------------------------------------------------------------------------------
# read_layout


@dataclass
class _Detail:
    files: dict[str, _File]
    pyproject: Optional[dict]
    setuptools: Optional[_SetuptoolsConfig] = None
    setup_py: Optional[_SetupPy] = None


def read_layout(root: Path) -> Layout:
    """Read the project's packaging metadata under `root`; never executes anything, never raises
    on malformed input (see `Layout.notes`)."""
    root = Path(root)
    notes: list[str] = []
    files: dict[str, _File] = {}
    for rel in (PYPROJECT, SETUP_CFG, SETUP_PY):
        f = _read_file(root, rel, notes)
        if f is not None:
            files[rel] = f

    data: Optional[dict] = None
    if PYPROJECT in files:
        data = _load_toml(files[PYPROJECT], notes)
    pdata = data if data is not None else _toml_guess(files[PYPROJECT].lossy if PYPROJECT in files
                                                      else None)
    cfg_parser: Optional[configparser.RawConfigParser] = None
    cfg_packaging = False
    if SETUP_CFG in files:
        try:
            cfg_parser = _parse_cfg(files[SETUP_CFG].lossy)
            cfg_packaging = any(cfg_parser.has_section(s) for s in ("metadata", "options"))
        except configparser.Error as exc:
            first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            notes.append(f"{SETUP_CFG}: not a valid configuration file ({first}); ignored")
            cfg_packaging = re.search(r"^\s*\[\s*(metadata|options)\b", files[SETUP_CFG].lossy,
                                      re.MULTILINE) is not None

    system = _table(pdata, "build-system")
    has_poetry = bool(_table(pdata, "tool", "poetry")) or "poetry" in _table(pdata, "tool")
    packaged = bool("project" in pdata or "build-system" in pdata or has_poetry
                    or SETUP_PY in files or cfg_packaging)
    detail = _Detail(files, data)
    name = _project_name(pdata)
    if name is None and cfg_parser is not None:
        name = _cfg_options(cfg_parser, "metadata").get("name") or None
    if not packaged:
        return Layout(root, False, None, tuple(files), (), (), tuple(notes), (("", ""),), name,
                      detail)

    backend_name = system.get("build-backend")
    if backend_name is not None and not isinstance(backend_name, str):
        notes.append(f"{PYPROJECT}: [build-system] build-backend is not a string; setuptools is "
                     f"assumed")
        backend_name = None
    if backend_name is None:
        # PEP 517: no backend means setuptools' legacy one
        backend = "poetry" if has_poetry and SETUP_PY not in files else "setuptools"
        if backend == "poetry":
            notes.append(f"{PYPROJECT}: [tool.poetry] without a [build-system] build-backend; "
                         f"poetry-core is assumed")
    else:
        backend = BACKENDS.get(backend_name.strip(), "other")

    read = [PYPROJECT] if PYPROJECT in files else []
    if backend == "setuptools":
        configs = []
        if SETUP_PY in files:
            detail.setup_py = _read_setup_py(files[SETUP_PY].lossy, notes)
            configs.append(detail.setup_py.config)
            name = name or detail.setup_py.name
        if cfg_parser is not None:
            configs.append(_setuptools_from_cfg(cfg_parser))
        if data is not None:
            configs.append(_setuptools_from_pyproject(data, notes))
        merged = _SetuptoolsConfig()
        for cfg in configs:  # later files win, as setuptools applies them in this order
            merged.packages = cfg.packages or merged.packages
            merged.package_dir = cfg.package_dir if cfg.package_dir is not None else merged.package_dir
            if cfg.modules:
                merged.modules, merged.modules_file = True, cfg.modules_file
        said = [c.packages.file for c in configs if c.packages is not None]
        if len(said) > 1:
            notes.append(f"packages are given in {' and '.join(said)}; {said[-1]} wins")
        detail.setuptools = merged
        found = _setuptools_packages(root, merged, notes)
        read = [r for r in (PYPROJECT, SETUP_CFG, SETUP_PY) if r in files]
    elif backend == "hatchling":
        found = _hatch_packages(root, pdata, notes)
    elif backend == "flit":
        found = _flit_packages(root, pdata, notes)
    elif backend == "pdm":
        found = _pdm_packages(root, pdata, notes)
    elif backend == "poetry":
        found = _poetry_packages(root, pdata, notes)
    else:
        found = _other_packages(root, pdata, str(backend_name), notes)

    packages = sorted(set(found.packages))
    if not packages:
        notes.append(f"{read[0] if read else 'the project'}: no import package that the wheel "
                     f"ships was found (modules only?); the shim cannot go inside a package")
    import_map = tuple(sorted(found.import_map.items()))
    roots = set()
    for folder in packages:  # the entry of import_map each shipped package resolves through
        base, prefix = _resolve(import_map, folder)
        if not prefix:
            roots.add(base)
        elif "." not in prefix and base.rsplit("/", 1)[-1] == prefix:  # "pkg" = "lib/pkg"
            roots.add(_parent(base))
    if not packages:
        roots = {base for base, prefix in import_map if not prefix}
    return Layout(root, True, backend, tuple(read), tuple(sorted(roots)), tuple(packages),
                  tuple(notes), import_map, name, detail)


# ------------------------------------------------------------------------------------------------
# Names and homes


def _resolve(import_map: Iterable[tuple[str, str]], folder: str) -> tuple[str, str]:
    """The entry of import_map with the longest folder that holds `folder` (("", "") if none)."""
    best = ("", "")
    for base, prefix in import_map:
        if (base == "" or folder == base or folder.startswith(base + "/")) \
                and len(base) >= len(best[0]):
            best = (base, prefix)
    return best


def import_name(layout: Layout, folder: str) -> str:
    """The dotted import name of a package folder: "src/mypkg" -> "mypkg"."""
    folder = _norm(folder)
    base, prefix = _resolve(layout.import_map, folder)
    rest = folder[len(base):].strip("/") if base else folder
    parts = ([prefix] if prefix else []) + (rest.split("/") if rest else [])
    return ".".join(parts)


def shim_home(layout: Layout, relpath: str) -> Optional[str]:
    """The folder of the package the shim of the Python file at `relpath` goes into: the first
    regular package (with __init__.py) from the shipped top-level package down to the file's
    folder, or the top-level folder itself for a pure namespace package. None when the file is
    not inside a package the wheel ships, or the project is not packaged."""
    if not layout.packaged or not layout.packages:
        return None
    rel = _norm(relpath)
    top: Optional[str] = None
    for pkg in layout.packages:
        if (pkg == "" or rel.startswith(pkg + "/")) and (top is None or len(pkg) > len(top)):
            top = pkg
    if top is None:
        return None
    below = rel[len(top):].strip("/").split("/")[:-1]
    folder = top
    for part in [None, *below]:
        if part is not None:
            folder = _join(folder, part)
        if (layout.root / folder / "__init__.py").is_file():
            return folder
    return top


# ------------------------------------------------------------------------------------------------
# Text edits: append names to a list, keeping the file's style


def _newline(text: str) -> str:
    return "\r\n" if "\r\n" in text else "\n"


def _skip_space_comments(text: str, pos: int, end: int) -> int:
    while pos < end:
        c = text[pos]
        if c in " \t\r\n":
            pos += 1
        elif c == "#":
            nl = text.find("\n", pos, end)
            pos = end if nl < 0 else nl
        else:
            break
    return pos


def _append_items(text: str, open_pos: int, close_pos: int, items: list[tuple[int, int]],
                  names: list[str]) -> str:
    """Append string items to the bracketed list text[open_pos:close_pos + 1]."""
    if not items:
        quoted = ", ".join(f'"{n}"' for n in names)
        return text[:open_pos + 1] + quoted + text[open_pos + 1:]
    last_s, last_e = items[-1]
    item_text = text[last_s:last_e]
    q = next((c for c in item_text if c in "\"'"), '"')
    new = [f"{q}{n}{q}" for n in names]
    after = _skip_space_comments(text, last_e, close_pos)
    trailing = after < close_pos and text[after] == ","
    comma_end = after + 1 if trailing else last_e
    if "\n" in text[last_e:close_pos]:  # the bracket closes on a later line: one line per item
        line_start = text.rfind("\n", 0, last_s) + 1
        lead = text[line_start:last_s]
        indent = lead if not lead.strip() else lead[:len(lead) - len(lead.lstrip())]
        eol = text.find("\n", comma_end, close_pos)
        if eol < 0:  # a leading-comma style: fall back to the one-line form below
            return _append_inline(text, items, trailing, comma_end, new)
        if text[eol - 1] == "\r":
            eol -= 1
        nl = _newline(text)
        if trailing:
            block = "".join(f"{nl}{indent}{item}," for item in new)
            return text[:eol] + block + text[eol:]
        block = "".join(f",{nl}{indent}{item}" for item in new)
        # the comma after the old last item goes with the first new line
        return text[:last_e] + "," + text[last_e:eol] + block[1:] + text[eol:]
    return _append_inline(text, items, trailing, comma_end, new)


def _append_inline(text: str, items: list[tuple[int, int]], trailing: bool, comma_end: int,
                   new: list[str]) -> str:
    """`["a", "b"]` -> `["a", "b", "c"]`, with the separator the list uses."""
    sep = ", "
    if len(items) > 1:
        between = text[items[-2][1]:items[-1][0]]
        if "," in between and "\n" not in between:
            sep = "," + between.split(",", 1)[1]
    if trailing:
        return text[:comma_end] + "".join(f"{sep[1:]}{item}," for item in new) + text[comma_end:]
    last_e = items[-1][1]
    return text[:last_e] + "".join(f"{sep}{item}" for item in new) + text[last_e:]


# ---- TOML: where each value is (structure only; the file has been parsed by tomllib already)


class _ScanError(Exception):
    pass


@dataclass
class _Span:
    start: int
    end: int  # exclusive
    items: Optional[list[tuple[int, int]]] = None  # for an array


_BARE_KEY = re.compile(r"[A-Za-z0-9_-]+")


def _toml_spans(text: str) -> dict[tuple[str, ...], _Span]:
    spans: dict[tuple[str, ...], _Span] = {}
    n = len(text)

    def ws(pos: int, newlines: bool) -> int:
        while pos < n:
            c = text[pos]
            if c in " \t" or (newlines and c in "\r\n"):
                pos += 1
            elif c == "#" and newlines:
                nl = text.find("\n", pos)
                pos = n if nl < 0 else nl
            else:
                break
        return pos

    def string(pos: int) -> tuple[str, int]:
        for delim in ('"""', "'''"):
            if text.startswith(delim, pos):
                end = pos + 3
                while True:
                    end = text.find(delim, end)
                    if end < 0:
                        raise _ScanError("unterminated string")
                    if delim == '"""' and _escaped(text, end):
                        end += 1
                        continue
                    while text.startswith(delim[0], end + 3):  # up to two quotes before it
                        end += 1
                    return text[pos + 3:end], end + 3
        q = text[pos]
        end = pos + 1
        while True:
            end = text.find(q, end)
            if end < 0 or "\n" in text[pos:end]:
                raise _ScanError("unterminated string")
            if q == '"' and _escaped(text, end):
                end += 1
                continue
            return text[pos + 1:end], end + 1

    def key(pos: int) -> tuple[tuple[str, ...], int]:
        parts = []
        while True:
            pos = ws(pos, False)
            if pos < n and text[pos] in "\"'":
                part, pos = string(pos)
            else:
                m = _BARE_KEY.match(text, pos)
                if not m:
                    raise _ScanError(f"bad key at {pos}")
                part, pos = m.group(0), m.end()
            parts.append(part)
            pos = ws(pos, False)
            if pos < n and text[pos] == ".":
                pos += 1
                continue
            return tuple(parts), pos

    def value(pos: int, path: tuple[str, ...]) -> int:
        start = pos
        c = text[pos] if pos < n else ""
        items = None
        if c in "\"'":
            _, pos = string(pos)
        elif c == "[":
            items = []
            pos += 1
            while True:
                pos = ws(pos, True)
                if pos < n and text[pos] == "]":
                    pos += 1
                    break
                item_start = pos
                pos = value(pos, path + (str(len(items)),))
                items.append((item_start, pos))
                pos = ws(pos, True)
                if pos < n and text[pos] == ",":
                    pos += 1
                elif pos < n and text[pos] == "]":
                    pos += 1
                    break
                else:
                    raise _ScanError(f"bad array at {pos}")
        elif c == "{":
            pos += 1
            while True:
                pos = ws(pos, False)
                if pos < n and text[pos] == "}":
                    pos += 1
                    break
                keys, pos = key(pos)
                if pos >= n or text[pos] != "=":
                    raise _ScanError(f"bad inline table at {pos}")
                pos = value(ws(pos + 1, False), path + keys)
                pos = ws(pos, False)
                if pos < n and text[pos] == ",":
                    pos += 1
                elif pos < n and text[pos] == "}":
                    pos += 1
                    break
                else:
                    raise _ScanError(f"bad inline table at {pos}")
        else:
            m = re.compile(r"[^,\]}\r\n#]*").match(text, pos)
            pos = m.end() if m else pos
            while pos > start and text[pos - 1] in " \t":
                pos -= 1
            if pos == start:
                raise _ScanError(f"no value at {pos}")
        spans[path] = _Span(start, pos, items)
        return pos

    table: tuple[str, ...] = ()
    pos = 0
    while True:
        pos = ws(pos, True)
        if pos >= n:
            return spans
        if text.startswith("[[", pos):
            keys, pos = key(pos + 2)
            if not text.startswith("]]", pos):
                raise _ScanError("bad header")
            table, pos = keys + ("[[]]",), pos + 2
        elif text[pos] == "[":
            keys, pos = key(pos + 1)
            if not text.startswith("]", pos):
                raise _ScanError("bad header")
            table, pos = keys, pos + 1
        else:
            keys, pos = key(pos)
            if pos >= n or text[pos] != "=":
                raise _ScanError(f"expected '=' at {pos}")
            pos = value(ws(pos + 1, False), table + keys)
        pos = ws(pos, False)
        if pos < n and text[pos] == "#":
            nl = text.find("\n", pos)
            pos = n if nl < 0 else nl
        if pos < n and text[pos] not in "\r\n":
            raise _ScanError(f"unexpected text at {pos}")


def _escaped(text: str, pos: int) -> bool:
    count = 0
    while pos - count - 1 >= 0 and text[pos - count - 1] == "\\":
        count += 1
    return count % 2 == 1


def _toml_append(text: str, path: tuple[str, ...], names: list[str]) -> Optional[str]:
    try:
        spans = _toml_spans(text)
    except _ScanError:
        return None
    span = spans.get(path)
    if span is None or span.items is None:
        return None
    return _append_items(text, span.start, span.end - 1, span.items, names)


# ---- setup.cfg: an option's lines


def _cfg_append(text: str, section: str, option: str, names: list[str]) -> Optional[str]:
    """Append names to a list option of setup.cfg, one a line when it has one a line."""
    lines = re.findall(r"[^\n]*\n|[^\n]+\Z", text)
    current = None
    key_line = last_line = key_indent = -1
    in_value = target = False
    for i, line in enumerate(lines):  # configparser's reading: sections, options, continuations
        stripped = line.strip()
        if not stripped or stripped[0] in "#;":
            continue
        indent = len(line) - len(line.lstrip())
        if in_value and indent > key_indent:
            if target:
                last_line = i
            continue
        in_value = target = False
        header = re.match(r"\[(.+)\]$", stripped)
        if header:
            current = header.group(1)
            continue
        m = re.match(r"(.*?)\s*[=:]", stripped)
        if m:
            in_value, key_indent = True, indent
            target = current == section and m.group(1).replace("-", "_").lower() == option
            if target:
                key_line = last_line = i
    if key_line < 0:
        return None
    nl = _newline(text)
    if last_line > key_line:  # one item a line: a new line like the last one
        line = lines[last_line]
        indent = line[:len(line) - len(line.lstrip())]
        if not line.endswith("\n"):
            lines[last_line] = line + nl
        lines[last_line + 1:last_line + 1] = [f"{indent}{n}{nl}" for n in names]
        return "".join(lines)
    line = lines[key_line]
    body = line.rstrip("\r\n")
    ending = line[len(body):]
    value = re.split(r"[=:]", body, maxsplit=1)[1].strip()
    if not value:  # "packages =" and nothing else: continuation lines
        added = "".join(f"{nl}    {n}" for n in names)
        lines[key_line] = body.rstrip() + added + ending
        return "".join(lines)
    kept = body.rstrip()
    lines[key_line] = kept + "".join(f", {n}" for n in names) + body[len(kept):] + ending
    return "".join(lines)


# ---- setup.py: a list literal found by the syntax tree


def _py_offsets(text: str) -> list[int]:
    starts, pos = [0], 0
    while True:
        pos = text.find("\n", pos)
        if pos < 0:
            return starts
        pos += 1
        starts.append(pos)


def _py_pos(text: str, starts: list[int], lineno: int, col: int) -> int:
    start = starts[lineno - 1]
    line = text[start:starts[lineno] if lineno < len(starts) else len(text)]
    return start + len(line.encode("utf-8")[:col].decode("utf-8", errors="ignore"))


def _py_append(text: str, which: str, names: list[str]) -> Optional[str]:
    """Append names to the literal list setup.py passes as packages= or include= of a finder."""
    spec = _setup_py_spec(text)
    node = None if spec is None else spec.packages_node if which == "packages" \
        else spec.include_node
    if not isinstance(node, (ast.List, ast.Tuple)) or node.end_lineno is None:
        return None
    starts = _py_offsets(text)
    start = _py_pos(text, starts, node.lineno, node.col_offset)
    end = _py_pos(text, starts, node.end_lineno, node.end_col_offset)  # type: ignore[arg-type]
    if text[start] not in "[(" or text[end - 1] not in "])":
        return None  # a tuple without parentheses
    items = [(_py_pos(text, starts, e.lineno, e.col_offset),
              _py_pos(text, starts, e.end_lineno, e.end_col_offset))  # type: ignore[arg-type]
             for e in node.elts]
    return _append_items(text, start, end - 1, items, names)


# ------------------------------------------------------------------------------------------------
# packaging_edits


def _encode(f: _File, text: str) -> bytes:
    return (("\ufeff" if f.bom else "") + text).encode(f.encoding)


def _pyproject_values(text: str, *path: str) -> Optional[list]:
    try:
        value: Any = tomllib.loads(text)
    except (tomllib.TOMLDecodeError, ValueError, RecursionError):
        return None
    for key in path:
        value = value.get(key) if isinstance(value, dict) else None
    return value if isinstance(value, list) else None


def _cfg_values(text: str, section: str, option: str) -> Optional[list[str]]:
    try:
        opts = _cfg_options(_parse_cfg(text), section)
    except configparser.Error:
        return None
    return _cfg_list(opts[option]) if option in opts else None


def _setup_py_spec(text: str) -> Optional[_SetupPy]:
    result = _read_setup_py(text, [])
    return result if result.call_found else None


def packaging_edits(layout: Layout, homes: Iterable[str], shim_name: str
                    ) -> tuple[dict[str, tuple[bytes, bytes]], list[str]]:
    """The edits of packaging files (relpath -> (old bytes, new bytes)) that make the wheel ship
    `<import_name(home)>.<shim_name>` for every home, and the problems that need the user (one
    sentence each, naming the file and what to add). Nothing when the packaging already ships new
    subpackages (a package search, automatic discovery, whole folders). Idempotent."""
    detail: Optional[_Detail] = layout._detail
    homes = [_norm(h) for h in homes]
    edits: dict[str, tuple[bytes, bytes]] = {}
    problems: list[str] = []
    if not layout.packaged or detail is None:
        return edits, problems
    names: list[str] = []
    for home in homes:
        base = import_name(layout, home)
        if base:
            names.append(f"{base}.{shim_name}")
    names = sorted(set(names))
    if not names:
        return edits, problems

    if layout.backend != "setuptools" or detail.setuptools is None:
        _check_globbed_backends(layout, detail, homes, shim_name, problems)
        return edits, problems

    spec = detail.setuptools.packages
    if spec is None:
        return edits, problems  # automatic discovery ships every subfolder
    listed = ", ".join(repr(n) for n in names)
    if spec.kind == "dynamic":
        problems.append(f"{spec.file}: {spec.what} cannot be read statically; make sure the "
                        f"packages include {listed}")
        return edits, problems

    if spec.kind == "list":
        missing = [n for n in names if n not in spec.names]
        option, pypath, cfg_where = "packages", ("tool", "setuptools", "packages"), \
            ("options", "packages")
    else:
        excluded = [n for n in names if any(fnmatchcase(n, p) for p in spec.exclude)]
        for n in excluded:
            problems.append(f"{spec.file}: the package search excludes {n!r}; remove the exclude "
                            f"pattern that matches it")
        if not spec.include_known:
            problems.append(f"{spec.file}: include= of the package search cannot be read "
                            f"statically; make sure it matches {listed}")
            return edits, problems
        if spec.include is None:
            return edits, problems
        missing = [n for n in names if n not in excluded
                   and not any(fnmatchcase(n, p) for p in spec.include)]
        option, pypath, cfg_where = "include", ("tool", "setuptools", "packages", "find", "include"), \
            ("options.packages.find", "include")
    if not missing:
        return edits, problems

    f = detail.files.get(spec.file)
    new: Optional[str] = None
    if f is not None and f.text is not None:
        if spec.file == PYPROJECT:
            new = _toml_append(f.text, pypath, missing)
            ok = new is not None and all(n in (_pyproject_values(new, *pypath) or []) for n in missing)
        elif spec.file == SETUP_CFG:
            new = _cfg_append(f.text, cfg_where[0], cfg_where[1], missing)
            ok = new is not None and all(n in (_cfg_values(new, *cfg_where) or []) for n in missing)
        else:
            new = _py_append(f.text, option if option == "include" else "packages", missing)
            after = _setup_py_spec(new) if new is not None else None
            spec_after = after.config.packages if after else None
            ok = spec_after is not None and all(
                n in spec_after.names if spec_after.kind == "list" else
                any(fnmatchcase(n, p) for p in spec_after.include or ("*",)) for n in missing)
        if ok and new is not None:
            edits[spec.file] = (f.raw, _encode(f, new))
            return edits, problems
    where = {PYPROJECT: "[tool.setuptools] " + ("packages" if option == "packages"
                                                else "packages.find include"),
             SETUP_CFG: f"[{cfg_where[0]}] {cfg_where[1]}",
             SETUP_PY: f"{'packages' if option == 'packages' else 'include'}= of setup()"}[spec.file]
    problems.append(f"{spec.file}: cannot edit {where} safely; add {', '.join(repr(n) for n in missing)} "
                    f"to it")
    return edits, problems


def _glob_match(pattern: str, path: str) -> bool:
    """A path glob with ** (any folders) against a relative POSIX path, or a folder prefix."""
    pattern = _norm(pattern)
    if not any(c in pattern for c in "*?["):
        return path == pattern or path.startswith(pattern + "/")
    regex = ""
    for part in re.split(r"(\*\*/?)", pattern):
        if part.startswith("**"):
            regex += "(?:.*/)?" if part.endswith("/") else ".*"
        else:
            regex += re.sub(r"\\\*", "[^/]*", re.sub(r"\\\?", "[^/]", re.escape(part)))
    return re.fullmatch(regex, path) is not None or re.match(regex + "/", path) is not None


def _check_globbed_backends(layout: Layout, detail: _Detail, homes: Iterable[str],
                            shim_name: str, problems: list[str]) -> None:
    """Backends that ship folders: only include patterns narrower than a folder can miss the shim."""
    data = detail.pyproject or {}
    patterns: list[str] = []
    where = ""
    if layout.backend == "pdm":
        value = _table(data, "tool", "pdm", "build").get("includes")
        patterns, where = (value if _is_str_list(value) else []), "[tool.pdm.build] includes"
    elif layout.backend == "poetry":
        pkgs = _table(data, "tool", "poetry").get("packages")
        if isinstance(pkgs, list):
            patterns = [_join(_norm(p.get("from", "")), p["include"]) for p in pkgs
                        if isinstance(p, dict) and isinstance(p.get("include"), str)
                        and isinstance(p.get("from", ""), str)]
        where = "[tool.poetry] packages"
    elif layout.backend == "hatchling":
        build = _table(data, "tool", "hatch", "build")
        value = _table(build, "targets", "wheel").get("include", build.get("include"))
        patterns, where = (value if _is_str_list(value) else []), "[tool.hatch.build] include"
    if not patterns:
        return
    for home in sorted(set(homes)):
        target = _join(home, shim_name, "__init__.py")
        if not any(_glob_match(p, target) for p in patterns):
            problems.append(f"{PYPROJECT}: {where} does not match {target}; add "
                            f"\"{_join(home, shim_name)}\" to it")
