"""Where a module calls each name: the node stack of every call `name(...)` and `x.name(...)`, the names it
also uses otherwise (a value passed on, not a call), and what each function refers to, found in one walk the
first time a rule asks (`cuda_context`: who calls a test helper; `entry`: where a script's function is
called; `cuda_ties`: which functions work together).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import NamedTuple

import libcst as cst

from neuron_migrate.migrate.walk import find, walk


class CallSite(NamedTuple):
    """One call: its ancestry from the module down to the `Call` node, and whether it calls a plain name
    (`helper(...)`) rather than an attribute (`self.helper(...)`)."""

    stack: tuple[cst.CSTNode, ...]
    by_name: bool

    def caller(self) -> tuple[cst.FunctionDef | None, cst.ClassDef | None]:
        """The innermost function around the call and the class whose body defines that function, if any
        (`(None, None)` at module level or directly in a class body)."""
        for index in range(len(self.stack) - 1, -1, -1):
            node = self.stack[index]
            if isinstance(node, cst.FunctionDef):
                owner = self.stack[index - 2] if index >= 2 else None
                return node, owner if isinstance(owner, cst.ClassDef) else None
        return None, None


class Unit(NamedTuple):
    """An outermost function: the `id` of the class whose body defines it (None for a module-level function),
    its name, and what its code refers to, nested functions included: a name as itself (`helper`), an
    attribute or method of its own instance or class as `.name` (`self._device`, `cls.build`)."""

    owner: int | None
    refers: set[str]
    name: str


@dataclass
class Calls:
    """The module's calls by the name they call, the names that also stand other than as a called function
    or the name of a top-level `def`, and each outermost function (a module-level function or a method) as
    a `Unit`, by the function's `id`."""

    sites: dict[str, list[CallSite]] = field(default_factory=dict)
    named: set[str] = field(default_factory=set)
    units: dict[int, Unit] = field(default_factory=dict)


#: the names by which a method refers to its own instance or class
_OWN = frozenset({"self", "cls"})


def calls_in(ctx) -> Calls:
    """The file's `Calls`, found on first use."""
    return ctx.once(calls_in, lambda: _collect(ctx.module))


def _collect(module: cst.Module) -> Calls:
    calls = Calls()
    top_level = {id(s) for s in module.body if isinstance(s, cst.FunctionDef)}

    class Collect(cst.CSTVisitor):
        def __init__(self) -> None:
            super().__init__()
            self.stack: list[cst.CSTNode] = []
            self.unit: set[str] | None = None  # what the outermost function being walked refers to
            self.unit_node: cst.FunctionDef | None = None

        def on_visit(self, node: cst.CSTNode) -> bool:
            parent = self.stack[-1] if self.stack else None
            self.stack.append(node)
            kind = type(node)  # exact type tests: see `names.dotted`
            if kind is cst.Name:
                self._name(node, parent)
                if self.unit is not None:
                    self._refer(node, parent)
            elif kind is cst.FunctionDef and self.unit is None:
                owner = self.stack[-3] if len(self.stack) > 2 else None
                owner_id = id(owner) if type(owner) is cst.ClassDef else None
                self.unit, self.unit_node = set(), node
                calls.units[id(node)] = Unit(owner_id, self.unit, node.name.value)
            return True

        def on_leave(self, original_node: cst.CSTNode) -> None:
            self.stack.pop()
            if original_node is self.unit_node:
                self.unit = self.unit_node = None

        def _refer(self, node: cst.Name, parent: cst.CSTNode | None) -> None:
            kind = type(parent)
            if kind is cst.Attribute:
                if parent.attr is node and type(parent.value) is cst.Name and parent.value.value in _OWN:
                    self.unit.add("." + node.value)
                elif parent.value is node:
                    self.unit.add(node.value)
            elif not ((kind is cst.FunctionDef or kind is cst.ClassDef) and parent.name is node):
                self.unit.add(node.value)

        def _name(self, node: cst.Name, parent: cst.CSTNode | None) -> None:
            grand = self.stack[-3] if len(self.stack) > 2 else None
            kind = type(parent)
            if kind is cst.Call and parent.func is node:
                calls.sites.setdefault(node.value, []).append(CallSite(tuple(self.stack[:-1]), True))
            elif (
                kind is cst.Attribute
                and parent.attr is node
                and type(grand) is cst.Call
                and grand.func is parent
            ):
                calls.sites.setdefault(node.value, []).append(CallSite(tuple(self.stack[:-2]), False))
            elif not (kind is cst.FunctionDef and id(parent) in top_level):
                calls.named.add(node.value)

    walk(module, Collect())
    return calls


def top_level_names(ctx) -> list[tuple[cst.CSTNode, frozenset[str]]]:
    """Each top-level statement of the file with the names (`Name` nodes) in it, found on first use: what the
    module's definitions refer to, for the analyses that follow who uses whom across them."""
    return ctx.once(
        top_level_names,
        lambda: [(s, frozenset(n.value for n in find(s, cst.Name))) for s in ctx.module.body],
    )
