"""Line and column of nodes, computed only where a finding needs them.

libcst's PositionProvider over a whole module costs more than parsing it. Findings are rare, so
positions are resolved per top-level statement, on demand: the statement alone is wrapped in a
module of its own, and its first line is known from the code generated for the statements
before it.
"""

from __future__ import annotations

import libcst as cst
from libcst.metadata import MetadataWrapper, PositionProvider


def _count_lines(code: str, newline: str) -> int:
    return code.count("\n") if "\n" in newline else code.count("\r")


class LazyPositions:
    def __init__(self, module: cst.Module, statement_code: list[str]) -> None:
        self.module = module
        newline = module.default_newline
        self._first_line: dict[int, int] = {}
        line = 1 + sum(_count_lines(module.code_for_node(h), newline) for h in module.header)
        for statement, code in zip(module.body, statement_code):
            self._first_line[id(statement)] = line
            line += _count_lines(code, newline)
        self._resolved: dict[int, dict] = {}

    def position(self, node: cst.CSTNode, top: cst.CSTNode | None) -> tuple[int, int]:
        """(line, column), 1-based, of `node` inside the top-level statement `top`."""
        if top is None or id(top) not in self._first_line:
            return 0, 0
        table = self._resolved.get(id(top))
        if table is None:
            alone = self.module.with_changes(header=(), body=[top], footer=())
            table = MetadataWrapper(alone, unsafe_skip_copy=True).resolve(PositionProvider)
            self._resolved[id(top)] = table
        code_range = table.get(node)
        if code_range is None:
            return 0, 0
        return self._first_line[id(top)] + code_range.start.line - 1, code_range.start.column + 1
