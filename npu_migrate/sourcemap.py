"""Where every node of a parsed module sits in its text, from one plain code generation.

libcst's PositionProvider tracks positions token by token and costs more than parsing. Here one
ordinary codegen pass records, for each node, the index of its first and last token; the text of
any node and the line/column of its start then follow from a running sum of token lengths. This
is what lets the engine skip statements without trigger words at every nesting level, and give
findings their positions, at the cost of one codegen.
"""

from __future__ import annotations

import bisect
import re
from dataclasses import dataclass, field
from itertools import accumulate

import libcst as cst
from libcst._nodes.internal import CodegenState

_NEWLINE = re.compile(r"\r\n|\r|\n")


@dataclass
class _RecordingState(CodegenState):
    starts: dict = field(default_factory=dict)
    ends: dict = field(default_factory=dict)

    def before_codegen(self, node: cst.CSTNode) -> None:
        self.starts[id(node)] = len(self.tokens)

    def after_codegen(self, node: cst.CSTNode) -> None:
        self.ends[id(node)] = len(self.tokens)


class SourceMap:
    def __init__(self, module: cst.Module) -> None:
        state = _RecordingState(default_indent=module.default_indent, default_newline=module.default_newline)
        module._codegen(state)
        self.text = "".join(state.tokens)
        self._offsets = list(accumulate(map(len, state.tokens), initial=0))
        self._starts = state.starts
        self._ends = state.ends
        self._line_starts: list[int] | None = None

    def text_of(self, node: cst.CSTNode) -> str:
        """The source text of an original node (with a statement's leading comments), or ""."""
        start = self._starts.get(id(node))
        if start is None:
            return ""
        end = min(self._ends[id(node)], len(self._offsets) - 1)
        return self.text[self._offsets[start]:self._offsets[end]]

    def position(self, node: cst.CSTNode) -> tuple[int, int]:
        """(line, column), both 1-based, where an original expression or small statement starts."""
        start = self._starts.get(id(node))
        if start is None:
            return 0, 0
        char = self._offsets[min(start, len(self._offsets) - 1)]
        if self._line_starts is None:
            self._line_starts = [0] + [m.end() for m in _NEWLINE.finditer(self.text)]
        line = bisect.bisect_right(self._line_starts, char)
        return line, char - self._line_starts[line - 1] + 1
