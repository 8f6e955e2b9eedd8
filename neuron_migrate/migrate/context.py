"""What a rule sees of the file it is checking: names, ancestors, bindings, source text, and where to report.

The analyzer's single walk keeps `stack` (the ancestors of the node being visited), the import scopes and the
bindings index up to date. A rule that needs facts the walk has not reached yet (a name assigned further down,
a device slot later in the file) calls `defer`: its callback runs after the walk with `stack` set back to what
it was, so `parent`, `ancestor` and the guard analysis answer as they would have during the visit.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

import libcst as cst

from neuron_migrate.migrate.bindings import Bindings
from neuron_migrate.migrate.fixes import FixSpec
from neuron_migrate.migrate.names import Scopes

T = TypeVar("T")


@dataclass
class PendingFinding:
    """A finding whose positions are resolved after the traversal (only files with findings pay for that).

    `stack` is the node's ancestry at report time (for scopes, guards and "is this inside that region");
    `notes` say why the fix was withdrawn after the walk; `no_change` why the code needs no change at all (the
    finding is then a note, severity info, and says that instead of the rule's advice)."""

    rule: Any
    node: cst.CSTNode
    message: str
    fix: FixSpec | None
    guard: str | None
    stack: tuple[cst.CSTNode, ...] = ()
    region: tuple[cst.CSTNode, ...] = ()  # the code this finding's check guards (its fix waits for it)
    notes: list[str] = field(default_factory=list)
    replacement: str | None = None
    no_change: str | None = None
    #: one of `notes` that replaces the rule's advice (keep this check CUDA's, where the rule says to make it
    #: generic): the message says the problem and this, not both pieces of advice
    advice: str | None = None
    #: its fix turns a CUDA test into one for any accelerator: other devices then run the code it guards
    widens_test: bool = False
    #: its fix was withdrawn: it waits for CUDA code beside it that a person changes first (`settle.tie`)
    tied: bool = False
    #: the check whose own expression holds this finding, when it waits for that check (`"cuda" if <this>
    #: else "cpu"`, the check a person reviews): it is not CUDA code the check guards
    part_of: Any = None


def tests_cuda_availability(test: str) -> bool:
    """Whether the code of a condition asks whether CUDA is there (`torch.cuda.is_available()`,
    `torch.cuda.device_count() > 1`)."""
    return "cuda" in test and ("is_available" in test or "device_count" in test)


class FileContext:
    """Per-file state shared by all rules during one traversal."""

    def __init__(
        self,
        module: cst.Module,
        path: str,
        bound_modules: frozenset[str] = frozenset(),
        source: str | None = None,
    ) -> None:
        self.module = module
        self.path = path
        self._source = source
        self.bound_modules = bound_modules
        self.scopes = Scopes(module)
        self.bindings = Bindings()
        self.stack: list[cst.CSTNode] = []
        self.pending: list[PendingFinding] = []
        self.deferred: list[tuple[Callable[[], None], list[cst.CSTNode]]] = []
        self.calls: list[tuple[cst.Call, str | None]] = []  # calls with arguments, with their callee's name
        self._code: dict[cst.CSTNode, str] = {}
        self._facts: dict[object, Any] = {}

    # --- names -------------------------------------------------------------------------------------------

    def qualified_name(self, node: cst.CSTNode) -> str | None:
        """What a Name/Attribute chain refers to, through imports (`tc.synchronize` ->
        `torch.cuda.synchronize`)."""
        return self.scopes.qualified_name(node)

    def call_name(self, call: cst.Call) -> str | None:
        """The qualified name of the function a call calls."""
        return self.scopes.qualified_name(call.func)

    def module_binds(self, name: str) -> bool:
        """Whether the module's top-level imports bind `name` to the module of that name (e.g. `torch`)."""
        if name in self.bound_modules:
            return True
        return self.scopes.resolve_name(name) == name and name in self.scopes.module_table

    def once(self, key: object, compute: Callable[[], T]) -> T:
        """`compute()`, computed once per file for `key`: a fact about the whole file, or about one node, that
        each finding asks again (in a 1.4 MB file with a thousand findings, asking anew made the analysis
        quadratic). A key that holds a node keeps it alive, so its identity is not reused."""
        if key in self._facts:
            return self._facts[key]
        value = self._facts[key] = compute()
        return value

    @property
    def source(self) -> str:
        """The module's text (the caller's, else regenerated once): a text search that finds nothing spares a
        walk of the tree."""
        if self._source is None:
            self._source = self.module.code
        return self._source

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
        """The source text of a node (generated once per node: rules ask for the same large ones again)."""
        text = self._code.get(node)  # keyed by the node itself (identity), which keeps it alive: no id reuse
        if text is None:
            text = self._code[node] = self.module.code_for_node(node)
        return text

    def excerpt(self, node: cst.CSTNode, limit: int = 50) -> str:
        """A node's source on one line (white space folded), shortened to `limit` characters for a message."""
        return shortened(" ".join(self.code(node).split()), limit)

    def guard(self) -> str | None:
        """The CUDA-availability condition the visited node sits under (`if torch.cuda.is_available():`), if
        any."""
        for child, parent in zip(reversed(self.stack), reversed(self.stack[:-1]), strict=False):
            if isinstance(parent, (cst.If, cst.IfExp)) and child is parent.body:
                test = self.code(parent.test)
                if tests_cuda_availability(test):
                    return test
        return None

    # --- deferring and reporting ---------------------------------------------------------------------------

    def defer(self, callback: Callable[[], None]) -> None:
        """Run `callback` after the walk, with the stack as it is now."""
        self.deferred.append((callback, list(self.stack)))

    def run_deferred(self) -> None:
        walk_stack = self.stack
        for callback, stack in self.deferred:
            self.stack = stack
            callback()
        self.stack = walk_stack
        self.deferred.clear()

    def add(
        self,
        rule: Any,
        node: cst.CSTNode,
        message: str,
        fix: FixSpec | None,
        region: tuple[cst.CSTNode, ...] = (),
        replacement: str | None = None,
        no_change: str | None = None,
    ) -> PendingFinding:
        pending = PendingFinding(
            rule,
            node,
            message,
            fix,
            self.guard(),
            tuple(self.stack),
            region,
            replacement=replacement,
            no_change=no_change,
        )
        if fix is not None and fix.caution:  # what to check before applying it, said in the message
            pending.notes.append(fix.caution)
        self.pending.append(pending)
        return pending


def shortened(text: str, limit: int) -> str:
    """`text`, cut to `limit` characters ending in "..." when it is longer."""
    return text if len(text) <= limit else text[: limit - 3] + "..."
