"""What a rule sees of the file it is checking: names, ancestors, source text, and where to report."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import libcst as cst

from neuron_migrate.migrate.names import Scopes

if TYPE_CHECKING:
    from neuron_migrate.migrate.rule import FixSpec, Rule


@dataclass
class PendingFinding:
    """A finding whose positions are resolved after the traversal (only files with findings pay for that)."""

    rule: "Rule"
    node: cst.CSTNode
    message: str
    fix: "FixSpec | None"
    guard: str | None


class FileContext:
    """Per-file state shared by all rules during one traversal."""

    def __init__(self, module: cst.Module, path: str, bound_modules: frozenset[str] = frozenset()) -> None:
        self.module = module
        self.path = path
        self.bound_modules = bound_modules
        self.scopes = Scopes(module)
        self.stack: list[cst.CSTNode] = []
        self.pending: list[PendingFinding] = []

    # --- names -------------------------------------------------------------------------------------------

    def qualified_name(self, node: cst.CSTNode) -> str | None:
        """What a Name/Attribute chain refers to, through imports (`tc.synchronize` -> `torch.cuda.synchronize`)."""
        return self.scopes.qualified_name(node)

    def call_name(self, call: cst.Call) -> str | None:
        """The qualified name of the function a call calls."""
        return self.scopes.qualified_name(call.func)

    def module_binds(self, name: str) -> bool:
        """Whether the module's top-level imports bind `name` to the module of that name (e.g. `torch`)."""
        if name in self.bound_modules:
            return True
        return self.scopes.resolve_name(name) == name and name in self.scopes._stack[0]

    # --- tree --------------------------------------------------------------------------------------------

    @property
    def node(self) -> cst.CSTNode:
        return self.stack[-1]

    @property
    def parent(self) -> cst.CSTNode | None:
        """The parent of the node being visited."""
        return self.stack[-2] if len(self.stack) > 1 else None

    def ancestor(self, levels: int) -> cst.CSTNode | None:
        """The node `levels` up from the one being visited (1 = parent)."""
        return self.stack[-1 - levels] if len(self.stack) > levels else None

    def code(self, node: cst.CSTNode) -> str:
        """The source text of a node."""
        return self.module.code_for_node(node)

    def guard(self) -> str | None:
        """The CUDA-availability condition the visited node sits under (`if torch.cuda.is_available():`), if any."""
        for child, parent in zip(reversed(self.stack), reversed(self.stack[:-1])):
            if isinstance(parent, (cst.If, cst.IfExp)) and child is parent.body:
                test = self.code(parent.test)
                if "cuda" in test and ("is_available" in test or "device_count" in test):
                    return test
        return None

    # --- reporting ---------------------------------------------------------------------------------------

    def add(self, rule: "Rule", node: cst.CSTNode, message: str, fix: "FixSpec | None") -> None:
        self.pending.append(PendingFinding(rule, node, message, fix, self.guard()))
