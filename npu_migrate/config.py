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
a value of the wrong type or an unknown rule code is an error that names it (exit 2).
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

from . import catalogue

try:  # Python 3.11+
    import tomllib
except ModuleNotFoundError:  # pragma: no cover - Python 3.10
    import tomli as tomllib  # type: ignore[no-redef]

SECTION = "npu-migrate"
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

    @property
    def root(self) -> Optional[Path]:
        return self.path.parent if self.path else None


def _where(path: Path, key: str) -> str:
    return f"{path}: [tool.{SECTION}] {key}"


def _strings(path: Path, key: str, value: Any) -> tuple[str, ...]:
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ConfigError(f"{_where(path, key)}: expected a list of strings, got {value!r}")
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


def load(path: Path) -> Config:
    """Read `[tool.npu-migrate]` from one pyproject.toml (an empty Config if it has none)."""
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{path}: cannot read: {exc}") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: invalid TOML: {exc}") from None
    table = data.get("tool", {}).get(SECTION)
    config = Config(path=path)
    if table is None:
        return config
    if not isinstance(table, dict):
        raise ConfigError(f"{path}: [tool.{SECTION}] must be a table")
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
            raise ConfigError(f"{_where(path, key)}: expected a string, got {table[key]!r}")
    config.shim_name = table.get("shim-name")
    if "baseline" in table:
        config.baseline = (path.parent / table["baseline"]).absolute()
    return config


def find(start: Path) -> Optional[Path]:
    """The nearest pyproject.toml with a [tool.npu-migrate] table, from start upward."""
    start = start.absolute()
    for folder in [start, *start.parents]:
        candidate = folder / "pyproject.toml"
        if candidate.is_file():
            try:
                text = candidate.read_text(encoding="utf-8")
            except (OSError, UnicodeDecodeError):
                continue
            if f"tool.{SECTION}" in text or f'tool."{SECTION}"' in text:
                return candidate
    return None


def resolve(start: Path, config_file: Optional[str] = None, isolated: bool = False) -> Config:
    if isolated:
        return Config()
    if config_file:
        path = Path(config_file)
        if not path.is_file():
            raise ConfigError(f"{config_file}: no such configuration file")
        return load(path.absolute())
    path = find(start)
    return load(path) if path else Config()
