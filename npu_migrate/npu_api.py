"""The torch_npu API-surface table (``rules/torch_npu_api.json``).

The table is generated from real torch_npu wheels by ``scripts/build_npu_api_table.py``
(without importing them).  Names under ``torch.npu`` are stored as ``torch_npu.npu.<name>``
since ``torch.npu`` *is* ``torch_npu.npu``; every lookup here accepts either spelling.
"""

from __future__ import annotations

import functools
import json
from pathlib import Path

TABLE_FILE = "torch_npu_api.json"

_ALIASES = (("torch.npu", "torch_npu.npu"),)

# Parameter kinds that can be passed by keyword.
_KEYWORD_KINDS = ("positional_or_keyword", "keyword_only")


def _read_table_text() -> str:
    try:
        from importlib.resources import files

        resource = files("npu_migrate.rules").joinpath(TABLE_FILE)
        if resource.is_file():
            return resource.read_text(encoding="utf-8")
    except (ModuleNotFoundError, FileNotFoundError, NotADirectoryError):
        pass
    # Running from a source checkout that is not installed: <repo>/rules/.
    path = Path(__file__).resolve().parent.parent / "rules" / TABLE_FILE
    return path.read_text(encoding="utf-8")


@functools.lru_cache(maxsize=None)
def load_table() -> dict:
    """The whole table: ``{"versions": [...], "names": {qualname: entry}, ...}``.

    Cached: treat the result as read-only.
    """
    return json.loads(_read_table_text())


def canonical(qualname: str) -> str:
    """``torch.npu.X`` -> ``torch_npu.npu.X``; other names unchanged."""
    for alias, real in _ALIASES:
        if qualname == alias or qualname.startswith(alias + "."):
            return real + qualname[len(alias):]
    return qualname


def versions() -> list[str]:
    """The torch_npu versions the table was built from, oldest first."""
    return [v["version"] for v in load_table()["versions"]]


def lookup(qualname: str) -> dict | None:
    """The table entry of a name (kind, versions, params ...), or None."""
    return load_table()["names"].get(canonical(qualname))


def has_name(qualname: str, version: str | None = None) -> bool:
    """Whether torch_npu has this name (in ``version`` if given, else in any scanned version)."""
    entry = lookup(qualname)
    if entry is None:
        return False
    return version is None or version in entry["versions"]


def keywords(qualname: str, version: str | None = None) -> set[str] | None:
    """Names of the parameters that can be passed by keyword; None when unknown.

    Unknown means the name is absent or its signature is not in the table (for example
    objects defined by the C extension).  For classes these are the constructor's
    parameters.  Without ``version``, parameters of any scanned version are included.
    ``**kwargs`` is not expanded (see :func:`accepts_any_keyword`).
    """
    entry = lookup(qualname)
    if entry is None or "params" not in entry:
        return None
    if version is not None and version not in entry["versions"]:
        return None
    return {
        p["name"]
        for p in entry["params"]
        if p.get("kind", "positional_or_keyword") in _KEYWORD_KINDS
        and (version is None or version in p.get("versions", entry["versions"]))
    }


def accepts_any_keyword(qualname: str) -> bool:
    """Whether the signature has a ``**kwargs`` parameter."""
    entry = lookup(qualname) or {}
    return any(p.get("kind") == "var_keyword" for p in entry.get("params", ()))
