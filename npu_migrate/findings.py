"""A finding: one CUDA-only construct, rewritten (fixable) or only reported."""

from __future__ import annotations

import functools
from dataclasses import asdict, dataclass
from typing import Optional


@functools.total_ordering
@dataclass(frozen=True)
class Finding:
    path: str  # relative to the run's root, with forward slashes
    line: int  # 1-based (within the cell when `cell` is set)
    column: int  # 1-based (within the cell when `cell` is set)
    code: str
    message: str
    fixable: bool  # True: npu-migrate rewrites it; False: it is only reported
    source: str = ""  # the construct's source text, whitespace-normalised (for baselines)
    cell: Optional[int] = None  # notebooks: 1-based index of the cell among all cells (not In [n])

    def _order(self) -> tuple:
        # File order: a notebook's findings sort by cell first, then by line within the cell.
        return (self.path, self.cell or 0, self.line, self.column, self.code, self.message,
                self.fixable, self.source)

    def __lt__(self, other: object) -> bool:
        if not isinstance(other, Finding):
            return NotImplemented
        return self._order() < other._order()

    @property
    def location(self) -> str:
        """`line:col`, or `cell_N:line:col` in a notebook (the style of nbQA)."""
        where = f"{self.line}:{self.column}"
        return where if self.cell is None else f"cell_{self.cell}:{where}"

    def as_dict(self) -> dict:
        return asdict(self)
