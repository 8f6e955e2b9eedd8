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
import enum
import functools
import typing
from collections.abc import Callable, Iterator

import libcst as cst


def concrete(*bases: type) -> frozenset[type]:
    """Every concrete libcst node class derived from `bases` (type() lookups beat ABC isinstance checks).
    Read from each class's MRO: `issubclass` on libcst's ABCs searches every subclass of a base for each
    class that is not one, and made importing this module take 50 ms."""
    found: set[type] = set()
    for value in vars(cst).values():
        abstract = getattr(value, "__abstractmethods__", None)
        if isinstance(value, type) and _derives(value, bases) and not abstract:
            found.add(value)
    return frozenset(found)


def _derives(cls: type, bases: tuple[type, ...]) -> bool:
    """`issubclass(cls, bases)` for libcst's classes, read from the MRO (see `concrete`)."""
    return any(base in cls.__mro__ for base in bases)


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
    cst.ExceptStarHandler: ("type", "name", "body"),
    cst.MatchCase: ("pattern", "guard", "body"),
    cst.TypeAlias: ("name", "type_parameters", "value"),
}
_FIELDS: dict[type, tuple[str, ...]] = {}


def _child_fields(cls: type) -> tuple[str, ...]:
    """The fields of `cls` that may hold a semantic node, in source order. Most of a node's fields hold
    formatting only (`whitespace_after_func`, `lpar`, `comma`): by their declared types, about 60% of all
    fields, which the walk need not read at all."""
    names = _FIELDS.get(cls)
    if names is None:
        try:
            hints = typing.get_type_hints(cls)
        except Exception:  # an annotation this Python cannot evaluate: read every field
            hints = {}
        declared = [
            f.name for f in dataclasses.fields(cls) if f.name not in hints or _admits_semantic(hints[f.name])
        ]
        first = tuple(name for name in _SOURCE_ORDER.get(cls, ()) if name in declared)
        names = _FIELDS[cls] = first + tuple(name for name in declared if name not in first)
    return names


def _admits_semantic(annotation) -> bool:
    """Whether a field declared `annotation` may hold a semantic node, or a sequence of them."""
    arguments = typing.get_args(annotation)
    if arguments:  # a union, a sequence, a literal: any of its parts
        return any(_admits_semantic(argument) for argument in arguments)
    if not isinstance(annotation, type):
        return not isinstance(annotation, (str, enum.Enum))  # a literal's value is no node
    if not issubclass(annotation, cst.CSTNode):
        return False  # str, bool, None, an enum such as MaybeSentinel
    return any(_derives(kind, (annotation,)) for kind in SEMANTIC)


def walk(node: cst.CSTNode, visitor, kinds: frozenset[type] = SEMANTIC) -> None:
    """Visit `node` and its descendants of the classes `kinds` (semantic ones: a field that holds only
    formatting is never read) depth-first, calling `visitor.on_visit` and `visitor.on_leave` on each (the
    children are skipped when `on_visit` returns a false value)."""
    if visitor.on_visit(node):
        cls = type(node)
        names = _FIELDS.get(cls)
        for name in names if names is not None else _child_fields(cls):
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
    wanted, skipped = _subclass_test(kind), _subclass_test(skip) if skip is not None else None

    class Find(cst.CSTVisitor):
        def on_visit(self, visited: cst.CSTNode) -> bool:
            cls = type(visited)
            if wanted(cls):
                found.append(visited)
            return visited is node or skipped is None or not skipped(cls)

        def on_leave(self, original_node: cst.CSTNode) -> None:
            pass

    walk(node, Find())
    return found


@functools.cache
def _subclass_test(kind: type | tuple[type, ...]) -> Callable[[type], bool]:
    """`issubclass(cls, kind)` as a lookup learnt per class (from its MRO, as `concrete` reads it): libcst's
    node classes are ABCs, whose `isinstance` is a Python-level call where it fails, asked for every node a
    search visits."""
    known: dict[type, bool] = {}
    kinds = kind if isinstance(kind, tuple) else (kind,)

    def test(cls: type) -> bool:
        answer = known.get(cls)
        if answer is None:
            answer = known[cls] = _derives(cls, kinds)
        return answer

    return test


#: the fields of statements (and of their else/except/finally/case parts) that hold nested statements
_NESTED = ("body", "orelse", "handlers", "finalbody", "cases")
#: the classes of statements, of simple ones (no block inside), and of what holds no statement (exact type
#: tests: libcst's `isinstance` on its abstract bases is slow, and `statements` asks about every statement)
STATEMENTS = concrete(cst.BaseCompoundStatement) | {cst.SimpleStatementLine}
_SIMPLE_STATEMENTS = concrete(cst.BaseSmallStatement) | {cst.SimpleStatementLine}
_FLAT = concrete(cst.BaseExpression) | {cst.SimpleStatementSuite}


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
                    kind = type(part)
                    if kind in STATEMENTS:
                        yield part
                    if kind not in _SIMPLE_STATEMENTS:
                        pending.append(part)
            elif value is not None and type(value) not in _FLAT:
                if type(value) is cst.If:  # an elif
                    yield value
                pending.append(value)  # an indented block, an else/finally part, an elif


def innermost_function(stack) -> cst.FunctionDef | None:
    """The innermost `def` on a node's ancestry (`stack`, outermost first), if any."""
    return next((node for node in reversed(stack) if isinstance(node, cst.FunctionDef)), None)
