"""The read-only walk (`walk.py`) sees what libcst's own visit sees, in the same order, and the unvalidated
parse (`parsing.py`) builds the same tree while leaving validation on for every other node."""

from __future__ import annotations

import libcst as cst
import pytest

from neuron_migrate.migrate.parsing import parse
from neuron_migrate.migrate.walk import SEMANTIC, find, statements, walk

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

#: the rest of Python's forms: the walk reads only the fields whose declared types admit a semantic node, so
#: each form whose semantic children sit in an unusual field is here
EVERY_FORM = """
from . import a as b, c
from .. m import *
global g
async def run(x: "int" = 1, *, y: list[int] | None = None) -> dict[str, int]:
    nonlocal_value = (yield from gen())
    async with lock() as (p, q), other():
        async for i, *rest in stream(*args, **kwargs):
            await step(i)
    del x[1:2:3], y.attr
    assert x is not None, f"{x!r:>{width}} and {y=}"
    raise Err("e") from cause
    total += ~x ** -y @ z // 2 << 1 | 3 & 4 ^ 5
    return {k: v for k, v in items if (w := k)} or {*s} or [*t] or (lambda q=1, *a, **k: q)
def gen():
    yield
    x = a < b <= c != d in e not in f
    print(x[::2], x[...], "con" "cat", b"bytes", 1j, 0x1F, 1_000.5e-3)
    try:
        pass
    except* ValueError as group:
        pass
    while not x and y or z:
        break
    else:
        continue
type Alias[T: int, *Ts, **P] = dict[T, tuple[*Ts]]
class Generic[T](Base[T]):
    attr: T
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


@pytest.mark.parametrize("source", [SOURCE, EVERY_FORM], ids=["source", "every_form"])
@pytest.mark.parametrize("skip", [None, cst.FunctionDef, cst.Arg, cst.IfExp])
def test_walk_visits_the_semantic_nodes_libcst_visits_in_the_same_order(skip, source):
    module = cst.parse_module(source)
    by_libcst, by_walk = _Record(skip), _Record(skip)
    module.visit(by_libcst)
    walk(module, by_walk)
    assert by_walk.seen == by_libcst.seen
    assert len(by_walk.seen) > (200 if skip is None else 40)


def test_find_takes_abstract_classes_and_skips_like_isinstance():
    module = cst.parse_module(EVERY_FORM)
    everything: list[cst.CSTNode] = []

    class All(cst.CSTVisitor):
        def on_visit(self, node: cst.CSTNode) -> bool:
            everything.append(node)
            return True

    walk(module, All())
    for kind in (cst.BaseExpression, cst.BaseSmallStatement, (cst.Name, cst.BaseCompoundStatement)):
        assert find(module, kind) == [n for n in everything if isinstance(n, kind)]
    outer = module.body[3]  # `async def run`: below it, a lambda's names are the lambda's own
    lam = find(outer, cst.Lambda)[0]
    inside = {id(n) for n in find(lam, cst.Name)}
    assert inside and inside <= {id(n) for n in find(outer, cst.Name)}
    assert not inside & {id(n) for n in find(outer, cst.Name, skip=cst.Lambda)}


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
