"""The rule catalogue: the data tables in `rules/`, loaded once.

Knowledge lives in the tables (codes, messages, guidance, API mappings); the rule families in
`families/` only read them. The tables ship inside the wheel as the package `npu_migrate.rules`.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

try:  # Python 3.11+
    import tomllib
except ModuleNotFoundError:  # pragma: no cover - Python 3.10
    import tomli as tomllib  # type: ignore[no-redef]


@dataclass(frozen=True)
class Rule:
    code: str
    name: str
    fixable: bool
    message: str
    guidance: str
    effort: str = "auto"  # auto (rewritten), review (check the decision), manual (port by hand)
    # what the construct does on an NPU host as written: error (fails), warning (runs but
    # differs), info (runs; review); "" only for a table that does not say (the catalogue test fails)
    severity: str = ""
    # "code": one finding per file (the other places listed); "message": one per file and message
    per_file: str = ""
    # with per_file = "message": messages matching this pattern are one group per file (one API
    # family reported as one finding: a CUDA graph capture and the CUDAGraph object it records into)
    merge_group: str = ""

    @property
    def family(self) -> str:
        return FAMILIES.get(self.code[3], "other")


SEVERITIES = ("error", "warning", "info")  # most severe first
DEFAULT_SEVERITY = "warning"  # a finding whose code's table gives none
PER_FILE = ("code", "message")

FAMILIES = {
    "0": "tool",
    "1": "device placement and device strings",
    "2": "torch.cuda API",
    "3": "distributed",
    "4": "AMP and precision",
    "5": "attention kernels",
    "6": "CLI flags and environment variables",
    "7": "scripts, configs and notebooks",
    "9": "not migratable",
}

CODE_RE = re.compile(r"^NPU\d{3}$")


def _rules_dir():
    try:
        return resources.files("npu_migrate.rules")
    except ModuleNotFoundError:
        return Path(__file__).resolve().parent.parent / "rules"


def read_table(name: str) -> dict[str, Any]:
    """Read `rules/<name>` from the installed package, or from the checkout as a fallback."""
    try:
        data = _rules_dir().joinpath(name).read_bytes()
    except FileNotFoundError:
        data = (Path(__file__).resolve().parent.parent / "rules" / name).read_bytes()
    return tomllib.loads(data.decode("utf-8"))


def code_tables() -> list[str]:
    """`codes.toml` and every `codes_*.toml` beside it (one per area), sorted."""
    names = sorted(
        entry.name for entry in _rules_dir().iterdir()
        if entry.name.startswith("codes") and entry.name.endswith(".toml")
    )
    return names or ["codes.toml"]


@functools.lru_cache(maxsize=None)
def rules() -> dict[str, Rule]:
    table: dict[str, Any] = {}
    origin: dict[str, str] = {}
    for name in code_tables():
        for code, row in read_table(name).items():
            if code in table:
                raise ValueError(f"rules/{name}: {code} is also defined in rules/{origin[code]}")
            table[code] = row
            origin[code] = name
    out = {}
    for code, row in sorted(table.items()):
        if not CODE_RE.match(code):
            raise ValueError(f"rules/{origin[code]}: {code!r} is not a rule code (NPU + three digits)")
        out[code] = Rule(
            code=code,
            name=row["name"],
            fixable=bool(row["fixable"]),
            message=row["message"],
            guidance=row["guidance"],
            effort=row.get("effort", "auto" if row["fixable"] else "review"),
            severity=row.get("severity", ""),
            per_file=row.get("per_file", ""),
            merge_group=row.get("merge_group", ""),
        )
        if out[code].effort not in ("auto", "review", "manual"):
            raise ValueError(f"rules/{origin[code]}: {code}: effort must be auto, review or manual")
        # (a missing severity loads, so that a table added by hand still runs; tests/test_catalogue.py
        # fails on it)
        if out[code].severity not in ("", *SEVERITIES):
            raise ValueError(f"rules/{origin[code]}: {code}: severity must be error, warning or info")
        if out[code].per_file not in ("", *PER_FILE):
            raise ValueError(f"rules/{origin[code]}: {code}: per_file must be \"code\" or \"message\"")
    return out


@functools.lru_cache(maxsize=None)
def absent_packages() -> frozenset:
    """Top-level packages with no NPU build (rules/sweep.toml [guard] modules, and the packages
    only probed for: scopes.toml `probed_without_npu_build`), but those an NPU host may have all
    the same (scopes.toml `installed_on_npu`: triton-ascend installs `triton`)."""
    modules = read_table("sweep.toml")["guard"]["modules"]
    platform = read_table("scopes.toml")["platform"]
    present = platform.get("installed_on_npu", ())
    return frozenset([*(m.split(".")[0] for m in modules), *platform.get("probed_without_npu_build", ())]) - set(present)


@functools.lru_cache(maxsize=None)
def cuda_api() -> dict[str, Any]:
    return read_table("cuda_api.toml")


@functools.lru_cache(maxsize=None)
def device_table() -> dict[str, Any]:
    return read_table("device.toml")


@functools.lru_cache(maxsize=None)
def distributed_table() -> dict[str, Any]:
    return read_table("distributed.toml")


@functools.lru_cache(maxsize=None)
def env_table() -> dict[str, Any]:
    return read_table("env.toml")


def rule(code: str) -> Rule:
    return rules()[code]


def severity(code: str) -> str:
    """The code's severity; DEFAULT_SEVERITY for a code no table defines or whose table is silent."""
    found = rules().get(code)
    return (found.severity if found is not None else "") or DEFAULT_SEVERITY


def expand_selection(patterns: list[str] | tuple[str, ...]) -> set[str]:
    """Codes matched by `--select/--ignore` patterns: a full code, a prefix (`NPU2`), or `ALL`."""
    codes = set(rules())
    chosen: set[str] = set()
    for pattern in patterns:
        p = pattern.strip().upper()
        if not p:
            continue
        if p == "ALL":
            chosen |= codes
            continue
        matched = {c for c in codes if c.startswith(p)}
        if not matched:
            raise ValueError(f"unknown rule code or prefix: {pattern!r} (see `npu-migrate rules`)")
        chosen |= matched
    return chosen


def enabled_codes(select: tuple[str, ...] = (), ignore: tuple[str, ...] = ()) -> frozenset[str]:
    base = expand_selection(select) if select else set(rules())
    return frozenset(base - expand_selection(ignore))
