"""Source positions of the few nodes a file's findings need, without a position pass over the whole file.

libcst's `PositionProvider` regenerates the code of the entire module to place every node; on large files
that costs more than parsing and all the rules together. Findings need positions for a handful of nodes, so
positions are resolved one top-level statement at a time: the statement is placed in a module of its own
(its columns are the file's, since top-level statements start at column 0) and shifted by the number of
lines before it, which Python's own `ast` parser (C, fast) gives. The shift is checked by comparing the
statement's text with the file's lines at that place; if `ast` cannot parse the file, or anything does not
line up, the whole module is resolved the old way, so a position is never a guess.
"""

from __future__ import annotations

import ast

import libcst as cst
from libcst.metadata import CodeRange, CodePosition, MetadataWrapper, PositionProvider


class StatementPositions:
    """`positions[node]` -> CodeRange, for any node inside a top-level statement of `module`."""

    def __init__(self, module: cst.Module, source: str, top_of: dict[int, int]) -> None:
        self.module = module
        self.source = source
        self.lines = source.splitlines(keepends=True)
        self.top_of = top_of  # id(node) -> index of its top-level statement in module.body
        self.resolved: dict[cst.CSTNode, CodeRange] = {}
        self.done: set[int] = set()
        self.first_lines: list[int] | None = None  # per top-level statement: its first line, from ast
        self.whole_file = False

    def __getitem__(self, node: cst.CSTNode) -> CodeRange:
        found = self.resolved.get(node)
        if found is not None:
            return found
        index = self.top_of.get(id(node))
        if self.whole_file or index is None or index < 0 or index in self.done or not self._resolve_statement(index):
            self._resolve_whole_file()
        return self.resolved[node]

    def _resolve_whole_file(self) -> None:
        if not self.whole_file:
            self.resolved = dict(MetadataWrapper(self.module, unsafe_skip_copy=True).resolve(PositionProvider))
            self.whole_file = True

    def _resolve_statement(self, index: int) -> bool:
        """Resolve the positions of statement `index`'s nodes; False when the shortcut does not apply."""
        self.done.add(index)
        first_line = self._first_line(index)
        if first_line is None:
            return False
        statement = self.module.body[index]
        alone = self.module.with_changes(body=[statement], header=[], footer=[])
        text = alone.code
        shift = first_line - 1 - len(getattr(statement, "leading_lines", ()))
        if shift < 0 or not "".join(self.lines[shift:shift + text.count("\n") + 1]).startswith(text):
            return False
        for node, where in MetadataWrapper(alone, unsafe_skip_copy=True).resolve(PositionProvider).items():
            self.resolved[node] = CodeRange(CodePosition(where.start.line + shift, where.start.column),
                                            CodePosition(where.end.line + shift, where.end.column))
        return True

    def _first_line(self, index: int) -> int | None:
        """The first line of top-level statement `index` (its first decorator, for a decorated definition)."""
        if self.first_lines is None:
            self.first_lines = _first_lines(self.module, self.source) or []
        return self.first_lines[index] if index < len(self.first_lines) else None


def _first_lines(module: cst.Module, source: str) -> list[int] | None:
    """Per libcst top-level statement, the line `ast` says it starts on; None when the two do not pair up."""
    try:
        body = ast.parse(source).body
    except (SyntaxError, ValueError):
        return None
    starts: list[int] = []
    cursor = 0
    for statement in module.body:
        if cursor >= len(body):
            return None
        node = body[cursor]
        decorators = getattr(node, "decorator_list", [])
        starts.append(min([node.lineno, *(d.lineno for d in decorators)]))
        # `a = 1; b = 2` is one libcst line and two ast statements
        cursor += len(statement.body) if isinstance(statement, cst.SimpleStatementLine) else 1
    return starts if cursor == len(body) else None
