"""Guards the fix added where an accelerator is already certain.

Written independently of neuron-migrate's own guard analysis (it checks that analysis, so it must not reuse
it). An accelerator is certain
- in the body of `if T:` where T being true implies one (`torch.accelerator.is_available()`,
  `torch.cuda.is_available()`, `device.type != "cpu"`, `device.type == "cuda"`, a name assigned only from
  such a test, `A and T`, `not F`), and in the `else` of `if F:` where F being false implies one
  (`not T`, `device.type == "cpu"`, `F or X`);
- after `if F: ... return/raise/continue/break/sys.exit()` (or `if T: ... else: <exit>`) in the same block,
  and after `assert T`;
- in everything nested there, function bodies included (availability does not change within a process).

A guard is `if torch.accelerator.is_available():` or `X if torch.accelerator.is_available() else Y` on a line
the fix added; a guard on a line that replaced an original availability test is a rename, not an addition.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Callable

from .records import Example, clip
from .statements import dotted

AVAILABILITY = frozenset({"torch.accelerator.is_available", "torch.cuda.is_available"})
GUARD = "torch.accelerator.is_available"
EXITS = frozenset({"sys.exit", "exit", "quit", "os._exit"})
# An original line that already held an availability test: a guard written over it was renamed, not added.
TESTED_LINE = re.compile(r"\bif\b[^#]*\bis_available\(")


def _is_call_to(node: ast.AST, names: frozenset[str] | str) -> bool:
    names = frozenset({names}) if isinstance(names, str) else names
    return isinstance(node, ast.Call) and dotted(node.func) in names and not node.args and not node.keywords


def _type_test(node: ast.AST) -> str | None:
    """'yes' / 'no' for `x.type` compared with a device string: does the test being true imply one?"""
    if not (isinstance(node, ast.Compare) and len(node.ops) == 1):
        return None
    left, op, right = node.left, node.ops[0], node.comparators[0]
    if isinstance(left, ast.Constant):
        left, right = right, left
    if not (isinstance(left, ast.Attribute) and left.attr == "type"):
        return None
    if isinstance(right, ast.Constant) and isinstance(right.value, str):
        cpu = right.value == "cpu"
        if isinstance(op, ast.NotEq):
            return "yes" if cpu else None
        if isinstance(op, ast.Eq):
            return "no" if cpu else "yes"
    if isinstance(op, ast.In) and isinstance(right, (ast.Tuple, ast.List, ast.Set)):
        values = [e.value for e in right.elts if isinstance(e, ast.Constant)]
        if len(values) == len(right.elts) and values and "cpu" not in values:
            return "yes"
    return None


class Certainty:
    """Answers 'does this test being true (or false) imply an accelerator?' for one module."""

    def __init__(self, tree: ast.Module) -> None:
        self.flags = self._availability_names(tree)

    def _availability_names(self, tree: ast.Module) -> frozenset[str]:
        """Names (and `self.x` chains) every assignment of which is an availability test."""
        good, bad = set(), set()
        for node in ast.walk(tree):
            if isinstance(node, (ast.Assign, ast.AnnAssign)) and node.value is not None:
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                names = [dotted(t) for t in targets]
                (good if self.if_true(node.value) else bad).update(n for n in names if n)
                bad.update(dotted(e) for t in targets if isinstance(t, (ast.Tuple, ast.List)) for e in t.elts)
            elif isinstance(node, (ast.AugAssign, ast.For, ast.AsyncFor, ast.NamedExpr)):
                bad.add(dotted(node.target))
            elif isinstance(node, ast.arg):
                bad.add(node.arg)
        return frozenset(good - bad)

    def if_true(self, test: ast.AST) -> bool:
        """The test being true implies an accelerator."""
        if _is_call_to(test, AVAILABILITY) or _type_test(test) == "yes":
            return True
        if isinstance(test, (ast.Name, ast.Attribute)) and dotted(test) in getattr(self, "flags", ()):
            return True
        if isinstance(test, ast.BoolOp) and isinstance(test.op, ast.And):
            return any(self.if_true(v) for v in test.values)
        if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
            return self.if_false(test.operand)
        return False

    def if_false(self, test: ast.AST) -> bool:
        """The test being false implies an accelerator."""
        if _type_test(test) == "no":
            return True
        if isinstance(test, ast.BoolOp) and isinstance(test.op, ast.Or):
            return any(self.if_false(v) for v in test.values)
        if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
            return self.if_true(test.operand)
        return False


def _exits(block: list[ast.stmt]) -> bool:
    """The block always leaves: its last statement returns, raises, continues, breaks or exits."""
    last = block[-1] if block else None
    if isinstance(last, (ast.Return, ast.Raise, ast.Continue, ast.Break)):
        return True
    call = last.value if isinstance(last, ast.Expr) else None
    return isinstance(call, ast.Call) and dotted(call.func) in EXITS


class _Walker:
    """Walks statements with 'accelerator certain here' and records added guards found where it is."""

    def __init__(self, certainty: Certainty, added: Callable[[int], bool]) -> None:
        self.certainty, self.added, self.hits = certainty, added, []

    def block(self, stmts: list[ast.stmt], certain: bool) -> None:
        for stmt in stmts:
            self.statement(stmt, certain)
            certain = certain or self._establishes(stmt)

    def _establishes(self, stmt: ast.stmt) -> bool:
        """Statements after this one in the same block run only with an accelerator."""
        c = self.certainty
        if isinstance(stmt, ast.Assert):
            return c.if_true(stmt.test)
        if isinstance(stmt, ast.If):
            return (c.if_false(stmt.test) and _exits(stmt.body)) or (
                c.if_true(stmt.test) and _exits(stmt.orelse)
            )
        return False

    def statement(self, stmt: ast.stmt, certain: bool) -> None:
        c = self.certainty
        if isinstance(stmt, (ast.If, ast.While)):
            guard = isinstance(stmt, ast.If) and _is_call_to(stmt.test, GUARD)
            if certain and guard and self.added(stmt.lineno):
                self.hits.append(stmt.lineno)
            self.expression(stmt.test, certain)
            self.block(stmt.body, certain or c.if_true(stmt.test))
            self.block(stmt.orelse, certain or c.if_false(stmt.test))
            return
        for child in ast.iter_child_nodes(stmt):
            if isinstance(child, ast.stmt):
                continue
            if isinstance(child, (ast.ExceptHandler, ast.match_case)):
                self.block(child.body, certain)
            else:
                self.expression(child, certain)
        for name in ("body", "orelse", "finalbody"):
            self.block(getattr(stmt, name, None) or [], certain)

    def expression(self, node: ast.AST, certain: bool) -> None:
        """Conditional expressions: `a if T else b` knows T in `a`; `T and x` knows T in `x`."""
        c = self.certainty
        if isinstance(node, ast.IfExp):
            if certain and _is_call_to(node.test, GUARD) and self.added(node.lineno):
                self.hits.append(node.lineno)
            self.expression(node.test, certain)
            self.expression(node.body, certain or c.if_true(node.test))
            self.expression(node.orelse, certain or c.if_false(node.test))
            return
        if isinstance(node, ast.BoolOp):
            for value in node.values:
                self.expression(value, certain)
                if isinstance(node.op, ast.And):
                    certain = certain or c.if_true(value)
                else:
                    certain = certain or c.if_false(value)
            return
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.stmt):  # a lambda has no statements; defensive for odd nodes
                continue
            self.expression(child, certain)


def guard_lines(tree: ast.Module) -> list[int]:
    """Lines of every `if`/conditional expression testing `torch.accelerator.is_available()`."""
    return sorted(
        n.lineno for n in ast.walk(tree) if isinstance(n, (ast.If, ast.IfExp)) and _is_call_to(n.test, GUARD)
    )


def nested_guards(
    rel: str, after: ast.Module, lines: list[str], added: Callable[[int], bool]
) -> list[Example]:
    """Added guards at places where an accelerator is already certain, as examples (one per guard)."""
    walker = _Walker(Certainty(after), added)
    walker.block(after.body, False)
    return [Example(rel, line, clip(lines[line - 1])) for line in sorted(walker.hits)]
