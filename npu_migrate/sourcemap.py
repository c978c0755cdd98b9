"""Where every node of a parsed module sits in its text, from one plain code generation.

libcst's PositionProvider tracks positions token by token and costs more than parsing. Here one
ordinary codegen pass records, for each node, the index of its first and last token; the text of
any node and the line/column of its start then follow from a running sum of token lengths. This
is what lets the engine skip statements without trigger words at every nesting level, and give
findings their positions, at the cost of one codegen. The same tokens then serve the code of the
migrated module wherever it still holds the original statements (`SourceMap.code`).
"""

from __future__ import annotations

import bisect
import contextlib
import re
from dataclasses import dataclass, field
from itertools import accumulate
from typing import Callable, Optional

import libcst as cst
from libcst._nodes.internal import CodegenState

_NEWLINE = re.compile(r"\r\n|\r|\n")

# Nodes that hold only whitespace, comments or punctuation (operators included). No rule looks
# at them or reports them, so traversals skip them and the source map does not record them:
# they are more than half of the nodes of a module.
_TRIVIA_BASES = frozenset({
    cst.BaseParenthesizableWhitespace, cst.TrailingWhitespace, cst.EmptyLine, cst.Newline,
    cst.Comment, cst.Comma, cst.Dot, cst.Colon, cst.Semicolon, cst.AssignEqual, cst.LeftParen,
    cst.RightParen, cst.LeftSquareBracket, cst.RightSquareBracket, cst.LeftCurlyBrace,
    cst.RightCurlyBrace, cst.BaseBinaryOp, cst.BaseBooleanOp, cst.BaseCompOp, cst.BaseUnaryOp,
    cst.BaseAugOp, cst.ImportStar, cst.Asynchronous,
})
# The bases are ABCs: `issubclass` on them walks the ABC registries (~45 ms at every start), while
# libcst's node classes are real subclasses, so their MRO says the same at a fraction of the cost.
TRIVIA: frozenset[type] = frozenset(
    cls for cls in vars(cst).values()
    if isinstance(cls, type) and not _TRIVIA_BASES.isdisjoint(cls.__mro__)
)


_NO_OP = contextlib.nullcontext()


@dataclass
class _State(CodegenState):
    def record_syntactic_position(self, node, *, start_node=None, end_node=None):
        # CodegenState's version does nothing either, as a generator-based context manager that
        # every expression enters and leaves: a shared do-nothing object costs far less.
        return _NO_OP


@dataclass
class _RecordingState(_State):
    starts: dict = field(default_factory=dict)
    ends: dict = field(default_factory=dict)

    def before_codegen(self, node: cst.CSTNode) -> None:
        if type(node) not in TRIVIA:
            self.starts[id(node)] = len(self.tokens)

    def after_codegen(self, node: cst.CSTNode) -> None:
        if type(node) not in TRIVIA:
            self.ends[id(node)] = len(self.tokens)


class SourceMap:
    def __init__(self, module: cst.Module, restore: Optional[Callable[[str], str]] = None) -> None:
        """`restore`: puts hot-slice placeholders back into a piece of text (none: no placeholders)."""
        self._restore = restore
        state = _RecordingState(default_indent=module.default_indent, default_newline=module.default_newline)
        module._codegen(state)
        self._tokens = state.tokens
        self.text = "".join(state.tokens)
        self._offsets = list(accumulate(map(len, state.tokens), initial=0))
        self._starts = state.starts
        self._ends = state.ends
        self._line_starts: list[int] | None = None

    def text_of(self, node: cst.CSTNode) -> str:
        """The source text of an original node (with a statement's leading comments), or "".

        Not for TRIVIA nodes (not recorded)."""
        start = self._starts.get(id(node))
        if start is None:
            return ""
        end = min(self._ends[id(node)], len(self._offsets) - 1)
        return self.text[self._offsets[start]:self._offsets[end]]

    def original_text(self) -> str:
        """The whole text, with the statements a hot slice left out put back."""
        return self._restore(self.text) if self._restore is not None else self.text

    def original_text_of(self, node: cst.CSTNode) -> str:
        """`text_of`, with the statements a hot slice left out put back: the file's own text."""
        text = self.text_of(node)
        return self._restore(text) if self._restore is not None else text

    def code(self, new_module: cst.Module) -> str:
        """`new_module.code`, for a module the rule dispatcher made from this one.

        Generating code walks every node. The statements the new module shares with the original
        (the rule dispatcher hands back untouched nodes themselves) are, token for token, what the map's
        codegen produced for them: same node, same indentation around it. So those tokens are
        reused, and only the statements on the way to a change are generated again.
        """
        spliced = new_module.visit(_Splicer(self))
        state = _State(default_indent=new_module.default_indent, default_newline=new_module.default_newline)
        spliced._codegen(state)
        return "".join(state.tokens)

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


@dataclass(frozen=True)
class _Verbatim(cst.BaseStatement):
    """An original statement, as the tokens its codegen produced (see SourceMap.code)."""

    tokens: tuple

    def _visit_and_replace_children(self, visitor) -> "_Verbatim":
        return self

    def _codegen_impl(self, state: CodegenState) -> None:
        state.tokens.extend(self.tokens)


# Nodes on the way from a module to its statements: the only ones the splicer enters.
_HOLDS_STATEMENTS = (
    cst.Module, cst.BaseCompoundStatement, cst.IndentedBlock, cst.Else, cst.ExceptHandler,
    cst.ExceptStarHandler, cst.Finally, cst.MatchCase,
)


class _Splicer(cst.CSTTransformer):
    """Swap each original statement of a new module for its recorded tokens."""

    def __init__(self, source_map: SourceMap) -> None:
        super().__init__()
        self.map = source_map

    def on_visit(self, node: cst.CSTNode) -> bool:
        return id(node) not in self.map._starts and isinstance(node, _HOLDS_STATEMENTS)

    def on_leave(self, original_node, updated_node):
        start = self.map._starts.get(id(original_node))
        if start is None or not isinstance(original_node, cst.BaseStatement):
            return updated_node
        return _Verbatim(tuple(self.map._tokens[start:self.map._ends[id(original_node)]]))
