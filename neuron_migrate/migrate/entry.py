"""Whether an accelerator is certain when a function starts: every call of it in the module is at a place
where one is (`bench.py`'s `time_ms()`, only called after `main()`'s `if not torch.cuda.is_available(): raise
SystemExit(...)`). The guard analysis (`guards.accelerator`) asks this when nothing inside the function tells.

Only for functions nothing outside the module can call: a top-level function of a script (a module that runs
`if __name__ == "__main__":`) or a private one (`_name`), called by its name and never named otherwise (a
function passed as a value may be called from anywhere).
"""

from __future__ import annotations

import weakref
from collections.abc import Callable

import libcst as cst

#: per file: the call sites (as node stacks) of each candidate function, by name; None for a function that is
#: also named otherwise
_SITES: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
#: per file: the answer per function id (False while it is being computed: a recursive call is no evidence)
_ANSWERS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def certain_on_entry(ctx, function: cst.FunctionDef, presence: Callable) -> bool:
    """Whether every call of `function` is where `presence(ctx, stack)` says an accelerator is certain."""
    answers = _ANSWERS.setdefault(ctx, {})
    if id(function) not in answers:
        answers[id(function)] = False
        sites = _call_sites(ctx, function)
        answers[id(function)] = bool(sites) and all(presence(ctx, stack) == "certain" for stack in sites)
    return answers[id(function)]


def _call_sites(ctx, function: cst.FunctionDef) -> list[tuple[cst.CSTNode, ...]] | None:
    """The call sites of `function`, or None when it is no candidate (the module is walked once, and only
    when a candidate is asked about)."""
    module = ctx.module
    name = function.name.value
    if function not in module.body or not (name.startswith("_") or _is_script(module)):
        return None
    sites = _SITES.get(ctx)
    if sites is None:
        sites = _SITES[ctx] = _collect(module)
    return sites.get(name)


def _is_script(module: cst.Module) -> bool:
    return any(_is_main_guard(statement) for statement in module.body)


def _collect(module: cst.Module) -> dict[str, list[tuple[cst.CSTNode, ...]] | None]:
    script = _is_script(module)
    defined = {
        s.name.value: s
        for s in module.body
        if isinstance(s, cst.FunctionDef) and (script or s.name.value.startswith("_"))
    }
    sites: dict[str, list[tuple[cst.CSTNode, ...]] | None] = {name: [] for name in defined}

    class Collect(cst.CSTVisitor):
        def __init__(self) -> None:
            super().__init__()
            self.stack: list[cst.CSTNode] = []

        def on_visit(self, node: cst.CSTNode) -> bool:
            parent = self.stack[-1] if self.stack else None
            self.stack.append(node)
            if isinstance(node, cst.Name) and node.value in defined and sites[node.value] is not None:
                if isinstance(parent, cst.Call) and parent.func is node:
                    sites[node.value].append(tuple(self.stack[:-1]))  # the call's own stack
                elif not (isinstance(parent, cst.FunctionDef) and parent is defined[node.value]):
                    sites[node.value] = None  # named as a value: callable from anywhere
            return True

        def on_leave(self, original_node: cst.CSTNode) -> None:
            self.stack.pop()

    module.visit(Collect())
    return sites


def _is_main_guard(statement: cst.CSTNode) -> bool:
    """`if __name__ == "__main__":`."""
    test = statement.test if isinstance(statement, cst.If) else None
    return (
        isinstance(test, cst.Comparison)
        and isinstance(test.left, cst.Name)
        and test.left.value == "__name__"
        and any(
            isinstance(c.comparator, cst.SimpleString) and c.comparator.evaluated_value == "__main__"
            for c in test.comparisons
        )
    )
