"""The read-only walk (`walk.py`) sees what libcst's own visit sees, in the same order, and the unvalidated
parse (`parsing.py`) builds the same tree while leaving validation on for every other node."""

from __future__ import annotations

import libcst as cst
import pytest

from neuron_migrate.migrate.parsing import parse
from neuron_migrate.migrate.walk import SEMANTIC, statements, walk

#: every class whose fields are not declared in source order, and a little of everything else
SOURCE = """
import torch

@decorate(flag=True)
@other
class Model(Base, metaclass=Meta):
    def forward(self, a, /, b: int = 1, *args, c, d=2, **kwargs) -> "Out":
        x = a if torch.cuda.is_available() else b
        try:
            y = f(x, device="cuda")
        except (ValueError, KeyError) as err:
            y = g(err)
        match y:
            case [first, *rest] if first > 0:
                return lambda z: z + first
            case _:
                return [k for k in rest if k]
"""


class _Record(cst.CSTVisitor):
    def __init__(self, skip: type | None = None) -> None:
        super().__init__()
        self.seen: list[tuple[str, int]] = []
        self.skip = skip

    def on_visit(self, node: cst.CSTNode) -> bool:
        if type(node) in SEMANTIC:
            self.seen.append(("visit", id(node)))
        return not (self.skip and isinstance(node, self.skip))

    def on_leave(self, original_node: cst.CSTNode) -> None:
        if type(original_node) in SEMANTIC:
            self.seen.append(("leave", id(original_node)))


@pytest.mark.parametrize("skip", [None, cst.FunctionDef, cst.Arg, cst.IfExp])
def test_walk_visits_the_semantic_nodes_libcst_visits_in_the_same_order(skip):
    module = cst.parse_module(SOURCE)
    by_libcst, by_walk = _Record(skip), _Record(skip)
    module.visit(by_libcst)
    walk(module, by_walk)
    assert by_walk.seen == by_libcst.seen
    assert len(by_walk.seen) > (200 if skip is None else 40)


BLOCKS = (
    """
def top():
    if a:
        def in_if(): pass
    elif b:
        x = 1
    else:
        while c:
            y = 2
        else:
            for i in d: z = 3
    try:
        pass
    except E:
        class InHandler:
            def method(self):
                with f() as g:
                    return g
    else:
        h = 4
    finally:
        k = 5
"""
    + SOURCE
)


def test_statements_finds_every_statement_a_full_walk_finds():
    module = cst.parse_module(BLOCKS)
    found: list[cst.CSTNode] = []

    class Statements(cst.CSTVisitor):
        def on_visit(self, node: cst.CSTNode) -> bool:
            if isinstance(node, (cst.BaseCompoundStatement, cst.SimpleStatementLine)):
                found.append(node)
            return True

    walk(module, Statements())
    listed = list(statements(module))
    assert len(listed) == len({id(n) for n in listed}) == len(found) > 25
    assert {id(n) for n in listed} == {id(n) for n in found}


def test_walk_dispatches_to_visit_and_leave_methods():
    calls: list[str] = []

    class Names(cst.CSTVisitor):
        def visit_Name(self, node: cst.Name) -> None:
            calls.append(node.value)

        def visit_Lambda(self, node: cst.Lambda) -> bool:
            return False  # its children are skipped

        def leave_ClassDef(self, original_node: cst.ClassDef) -> None:
            calls.append("/class")

    walk(cst.parse_module(SOURCE), Names())
    assert calls[:4] == ["torch", "decorate", "flag", "True"]
    assert "z" not in calls and calls[-1] == "/class"


def test_parse_builds_the_tree_libcst_builds_and_keeps_validation_for_other_nodes():
    module = parse(SOURCE)
    assert module.deep_equals(cst.parse_module(SOURCE)) and module.code == SOURCE
    with pytest.raises(cst.ParserSyntaxError):
        parse("def broken(:\n")
    with pytest.raises(cst.CSTValidationError):  # validation is back on after both parses
        cst.Name("")
