"""A read-only walk over a libcst tree that skips formatting nodes, for every analysis that only looks.

libcst's own `node.visit(visitor)` rebuilds each node's children as it goes (it is the transformer's
machinery) and visits whitespace, commas and parentheses, most of a tree's nodes. Walking the dataclass fields
directly and skipping formatting is several times faster. `walk` takes a `cst.CSTVisitor` unchanged: it calls
`on_visit` (which dispatches to `visit_<Node>`; a false result skips the node's children) and `on_leave`
(`leave_<Node>`), as libcst does, so a visitor works with either. What it does not offer: formatting nodes
(`Comment`, whitespace, punctuation, operators) and the per-attribute hooks (`visit_Call_func`).
Children come in source order, as with libcst's `visit` (a class's fields are in source order except in the
few classes `_SOURCE_ORDER` lists: a `FunctionDef`'s body is declared before its decorators).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator

import libcst as cst


def concrete(*bases: type) -> frozenset[type]:
    """Every concrete libcst node class derived from `bases` (type() lookups beat ABC isinstance checks)."""
    found: set[type] = set()
    for value in vars(cst).values():
        if (
            isinstance(value, type)
            and issubclass(value, bases)
            and not getattr(value, "__abstractmethods__", None)
        ):
            found.add(value)
    return frozenset(found)


#: node classes that only carry formatting; no analysis looks at them, and they are most of a tree's nodes
FORMATTING = concrete(
    cst.BaseParenthesizableWhitespace,
    cst.TrailingWhitespace,
    cst.EmptyLine,
    cst.Comment,
    cst.Newline,
    cst.Comma,
    cst.Semicolon,
    cst.Colon,
    cst.Dot,
    cst.AssignEqual,
    cst.LeftParen,
    cst.RightParen,
    cst.LeftSquareBracket,
    cst.RightSquareBracket,
    cst.LeftCurlyBrace,
    cst.RightCurlyBrace,
    cst.BaseBinaryOp,
    cst.BaseBooleanOp,
    cst.BaseCompOp,
    cst.BaseUnaryOp,
    cst.BaseAugOp,
    cst.Asynchronous,
    cst.ImportStar,
)
SEMANTIC = concrete(cst.CSTNode) - FORMATTING
#: the node classes whose fields are not declared in source order: their children in source order (the other
#: fields, formatting only, follow)
_SOURCE_ORDER: dict[type, tuple[str, ...]] = {
    cst.FunctionDef: ("decorators", "name", "type_parameters", "params", "returns", "body"),
    cst.ClassDef: ("decorators", "name", "type_parameters", "bases", "keywords", "body"),
    cst.Parameters: ("posonly_params", "posonly_ind", "params", "star_arg", "kwonly_params", "star_kwarg"),
    cst.Arg: ("keyword", "value"),
    cst.IfExp: ("body", "test", "orelse"),
    cst.ExceptHandler: ("type", "name", "body"),
    cst.MatchCase: ("pattern", "guard", "body"),
}
_FIELDS: dict[type, tuple[str, ...]] = {}


def _child_fields(cls: type) -> tuple[str, ...]:
    names = _FIELDS.get(cls)
    if names is None:
        declared = [f.name for f in dataclasses.fields(cls)]
        first = tuple(name for name in _SOURCE_ORDER.get(cls, ()) if name in declared)
        names = _FIELDS[cls] = first + tuple(name for name in declared if name not in first)
    return names


def walk(node: cst.CSTNode, visitor, kinds: frozenset[type] = SEMANTIC) -> None:
    """Visit `node` and its descendants of the classes `kinds` depth-first, calling `visitor.on_visit` and
    `visitor.on_leave` on each (the children are skipped when `on_visit` returns a false value)."""
    if visitor.on_visit(node):
        for name in _child_fields(type(node)):
            value = getattr(node, name)
            kind = type(value)
            if kind in kinds:
                walk(value, visitor, kinds)
            elif kind is list or kind is tuple:
                for item in value:
                    if type(item) in kinds:
                        walk(item, visitor, kinds)
    visitor.on_leave(node)


def find(
    node: cst.CSTNode, kind: type | tuple[type, ...], skip: type | tuple[type, ...] | None = None
) -> list:
    """The nodes of class `kind` (or of one of the classes) at or under `node`, in source order; below
    `node`, nodes of class `skip` are not searched (`find(function, cst.Return, skip=cst.FunctionDef)`: a
    nested function's returns are its own)."""
    found: list = []

    class Find(cst.CSTVisitor):
        def on_visit(self, visited: cst.CSTNode) -> bool:
            if isinstance(visited, kind):
                found.append(visited)
            return visited is node or skip is None or not isinstance(visited, skip)

        def on_leave(self, original_node: cst.CSTNode) -> None:
            pass

    walk(node, Find())
    return found


#: the fields of statements (and of their else/except/finally/case parts) that hold nested statements
_NESTED = ("body", "orelse", "handlers", "finalbody", "cases")


def statements(node: cst.CSTNode) -> Iterator[cst.CSTNode]:
    """Every statement in the blocks under `node` (a module, a function, a compound statement), at any depth,
    functions and classes included, without visiting an expression: a fraction of `walk`'s cost for a question
    about definitions (`def`s by name, decorators). Each statement once; the order is not the source's."""
    pending = [node]
    while pending:
        holder = pending.pop()
        for name in _NESTED:
            value = getattr(holder, name, None)
            if isinstance(value, (list, tuple)):
                for part in value:
                    if isinstance(part, (cst.BaseCompoundStatement, cst.SimpleStatementLine)):
                        yield part
                    if not isinstance(part, (cst.SimpleStatementLine, cst.BaseSmallStatement)):
                        pending.append(part)
            elif value is not None and not isinstance(value, (cst.SimpleStatementSuite, cst.BaseExpression)):
                if isinstance(value, cst.If):  # an elif
                    yield value
                pending.append(value)  # an indented block, an else/finally part, an elif


def innermost_function(stack) -> cst.FunctionDef | None:
    """The innermost `def` on a node's ancestry (`stack`, outermost first), if any."""
    return next((node for node in reversed(stack) if isinstance(node, cst.FunctionDef)), None)
