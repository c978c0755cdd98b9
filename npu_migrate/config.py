"""`[tool.npu-migrate]` in the target's pyproject.toml.

The file is the nearest `pyproject.toml` that has a `[tool.npu-migrate]` table, searched from the
common folder of the paths upward. Keys:

    select = ["ALL"]                  # codes or prefixes; default: every rule
    extend-select = []                # added to select
    ignore = ["NPU990"]               # removed from the selection (wins over select)
    exclude = ["legacy/", "*_pb2.py"] # globs: a path relative to the project root, or any part
    per-file-ignores = { "tests/*" = ["NPU2"] }
    shim-name = "npu_compat"
    baseline = ".npu-migrate-baseline.json"   # relative to the pyproject.toml's folder

A key given on the command line replaces the key of the same name from the file. An unknown key,
a value of the wrong type or an unknown rule code is an error that names the file and the key
(exit 2). So is a table spelt `[tool.npu_migrate]` (the package's import name): it is refused
with a hint rather than read, so that one spelling is the project's, as with ruff's
`[tool.ruff]`, and a typo in it is never silently ignored.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

from . import catalogue
from .source import read_regular

try:  # Python 3.11+
    import tomllib
except ModuleNotFoundError:  # pragma: no cover - Python 3.10
    import tomli as tomllib  # type: ignore[no-redef]

MAX_CONFIG_BYTES = 16 * 1024 * 1024  # a pyproject.toml larger than this is refused, never read

SECTION = "npu-migrate"
MISSPELT = "npu_migrate"  # [tool.npu_migrate]: refused with a hint
LIST_KEYS = ("select", "extend-select", "ignore", "exclude")
CODE_KEYS = ("select", "extend-select", "ignore")
STR_KEYS = ("shim-name", "baseline")
KEYS = (*LIST_KEYS, "per-file-ignores", *STR_KEYS)


class ConfigError(Exception):
    """The configuration is invalid; the message names the file and the key."""


@dataclass
class Config:
    path: Optional[Path] = None  # the pyproject.toml read, if any
    select: Optional[tuple[str, ...]] = None
    extend_select: tuple[str, ...] = ()
    ignore: tuple[str, ...] = ()
    exclude: tuple[str, ...] = ()
    per_file_ignores: tuple[tuple[str, tuple[str, ...]], ...] = ()
    shim_name: Optional[str] = None
    baseline: Optional[Path] = None  # absolute
    unknown: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)  # pyproject.toml files the search could not read

    @property
    def root(self) -> Optional[Path]:
        return self.path.parent if self.path else None


def _where(path: Path, key: str) -> str:
    return f"{path}: [tool.{SECTION}] {key}"


def _strings(path: Path, key: str, value: Any) -> tuple[str, ...]:
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ConfigError(f"{_where(path, key)}: expected a list of strings, got {_short(value)}")
    return tuple(value)


def check_codes(patterns: tuple[str, ...], where: str) -> None:
    try:
        catalogue.expand_selection(patterns)
    except ValueError as exc:
        raise ConfigError(f"{where}: {exc}") from None


def parse_per_file_ignores(items, where: str) -> tuple[tuple[str, tuple[str, ...]], ...]:
    """`{"glob": [codes]}` (file) or `["glob:CODE,CODE", ...]` (command line)."""
    out = []
    if isinstance(items, dict):
        pairs = list(items.items())
    else:
        pairs = []
        for item in items:
            glob, sep, codes = item.rpartition(":")
            if not sep or not glob:
                raise ConfigError(f"{where}: expected GLOB:CODE[,CODE...], got {item!r}")
            pairs.append((glob, [c for c in codes.split(",") if c.strip()]))
    for glob, codes in pairs:
        if isinstance(codes, str):
            codes = [c for c in codes.split(",") if c.strip()]
        if not isinstance(glob, str) or not isinstance(codes, list) or not all(isinstance(c, str) for c in codes):
            raise ConfigError(f"{where}: expected a table of glob = [codes], got {glob!r} = {codes!r}")
        check_codes(tuple(codes), f"{where} {glob!r}")
        out.append((glob, tuple(c.strip() for c in codes)))
    return tuple(out)


def _read(path: Path) -> str:
    """The text of a pyproject.toml: a regular file (never a FIFO or a device), at most
    MAX_CONFIG_BYTES, UTF-8 as TOML requires."""
    try:
        raw = read_regular(path, MAX_CONFIG_BYTES)
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read: {exc.strerror or exc}") from None
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError(
            f"{path}: not UTF-8 text (byte {exc.start}); TOML files must be UTF-8, so its "
            f"[tool.{SECTION}] table cannot be read: save it as UTF-8"
        ) from None


def load(path: Path) -> Config:
    """Read `[tool.npu-migrate]` from one pyproject.toml (an empty Config if it has none)."""
    text = _read(path)
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: invalid TOML: {exc}") from None
    except RecursionError:
        raise ConfigError(f"{path}: invalid TOML: arrays or tables nested too deeply") from None
    tool = data.get("tool", {})
    if not isinstance(tool, dict):
        raise ConfigError(f"{path}: `tool` must be a table, got {_short(tool)}; [tool.{SECTION}] cannot be read")
    if MISSPELT in tool:
        raise ConfigError(f"{path}: [tool.{MISSPELT}] is not read: the table is [tool.{SECTION}] "
                          f"(with a hyphen, as in the command's name); rename it")
    table = tool.get(SECTION)
    config = Config(path=path)
    if table is None:
        return config
    if not isinstance(table, dict):
        raise ConfigError(f"{path}: [tool.{SECTION}] must be a table, got {_short(table)}")
    for key in table:
        if key not in KEYS:
            hint = difflib.get_close_matches(key, KEYS, n=1)
            more = f" (did you mean {hint[0]!r}?)" if hint else f" (known keys: {', '.join(KEYS)})"
            raise ConfigError(f"{_where(path, key)}: unknown key {key!r}{more}")
    for key in LIST_KEYS:
        if key in table:
            values = _strings(path, key, table[key])
            if key in CODE_KEYS:
                check_codes(values, _where(path, key))
            setattr(config, key.replace("-", "_"), values)
    if "per-file-ignores" in table:
        value = table["per-file-ignores"]
        if not isinstance(value, dict):
            raise ConfigError(f"{_where(path, 'per-file-ignores')}: expected a table of glob = [codes]")
        config.per_file_ignores = parse_per_file_ignores(value, _where(path, "per-file-ignores"))
    for key in STR_KEYS:
        if key in table and not isinstance(table[key], str):
            raise ConfigError(f"{_where(path, key)}: expected a string, got {_short(table[key])}")
    config.shim_name = table.get("shim-name")
    if "baseline" in table:
        config.baseline = (path.parent / table["baseline"]).absolute()
    return config


def find(start: Path, warnings: Optional[list[str]] = None) -> Optional[Path]:
    """The nearest pyproject.toml with a [tool.npu-migrate] table, from start upward.

    Only regular files are read (a FIFO named pyproject.toml is passed over, never opened). One
    that is not UTF-8 but names the table is returned (load() then fails with a clear error: the
    run must not go on silently without its configuration); one that cannot be read, or is not
    UTF-8 and does not name the table, is passed over with a line in `warnings`.
    """
    start = start.absolute()
    for folder in [start, *start.parents]:
        candidate = folder / "pyproject.toml"
        if candidate.is_file():
            try:
                raw = read_regular(candidate, MAX_CONFIG_BYTES)
            except OSError as exc:
                if warnings is not None:
                    warnings.append(f"{candidate}: cannot read ({exc.strerror or exc}); "
                                    f"its [tool.{SECTION}] table, if any, is not applied")
                continue
            markers = (f"tool.{SECTION}", f'tool."{SECTION}"', f"tool.{MISSPELT}")
            if any(marker.encode() in raw for marker in markers):
                return candidate
            try:
                raw.decode("utf-8")
            except UnicodeDecodeError as exc:
                if warnings is not None:
                    warnings.append(f"{candidate}: not UTF-8 text (byte {exc.start}); TOML files must "
                                    f"be UTF-8, so it was not read (it names no [tool.{SECTION}] table)")
    return None


def resolve(start: Path, config_file: Optional[str] = None, isolated: bool = False) -> Config:
    if isolated:
        return Config()
    if config_file:
        path = Path(config_file)
        if not path.is_file():
            what = "not a regular file" if path.exists() else "no such configuration file"
            raise ConfigError(f"{config_file}: {what}")
        return load(path.absolute())
    warnings: list[str] = []
    path = find(start, warnings)
    config = load(path) if path else Config()
    config.warnings = warnings + config.warnings
    return config


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."
