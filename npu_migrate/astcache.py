"""One `ast` parse of a file's bytes, shared by the passes that need it: the hot-slice reduction
(hotslice.py) before libcst, and the scopes read after the engine (testscopes.py). Parsing is the
largest cost after libcst's own; a file is parsed once per process, not once per question."""

from __future__ import annotations

import ast
import functools
from typing import Optional


@functools.lru_cache(maxsize=2)
def parse(body: bytes) -> Optional[ast.Module]:
    """The tree of `body` (UTF-8, no BOM), or None when it does not parse. Callers only read it."""
    try:
        return ast.parse(body)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None
