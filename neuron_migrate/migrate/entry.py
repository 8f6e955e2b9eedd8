"""Whether an accelerator is certain when a function starts: every call of it in the module is at a place
where one is (`bench.py`'s `time_ms()`, only called after `main()`'s `if not torch.cuda.is_available(): raise
SystemExit(...)`). The guard analysis (`guards.accelerator`) asks this when nothing inside the function tells.

Only for functions nothing outside the module calls: a top-level function of a script (a module that runs
`if __name__ == "__main__":`), called by its name and never named otherwise (a function passed as a value may
be called from anywhere). A private function (`_name`) of a library is no such function: another module of
the package may import it (composer's system profiler calls `memory_monitor._get_memory_report()` without the
CUDA test its own module's caller makes, and the unguarded `torch.accelerator.memory_stats()` would raise on
a CPU-only machine, where `torch.cuda.memory_stats()` returned `{}`).
"""

from __future__ import annotations

from collections.abc import Callable

import libcst as cst

from neuron_migrate.migrate.call_sites import calls_in
from neuron_migrate.migrate.device_literals import literal_value


def certain_on_entry(ctx, function: cst.FunctionDef, presence: Callable) -> bool:
    """Whether every call of `function` is where `presence(ctx, stack)` says an accelerator is certain."""
    # per file, the answer per function id (False while it is being computed: a recursive call is no evidence)
    answers = ctx.once(certain_on_entry, dict)
    if id(function) not in answers:
        answers[id(function)] = False
        sites = _call_sites(ctx, function)
        answers[id(function)] = bool(sites) and all(presence(ctx, stack) == "certain" for stack in sites)
    return answers[id(function)]


def _call_sites(ctx, function: cst.FunctionDef) -> list[tuple[cst.CSTNode, ...]] | None:
    """The stacks of the calls of `function`, or None when it is no candidate or is also named otherwise
    (passed as a value, called as an attribute)."""
    module = ctx.module
    name = function.name.value
    if function not in module.body or not _is_script(module):
        return None
    calls = calls_in(ctx)
    sites = calls.sites.get(name, [])
    if name in calls.named or not all(site.by_name for site in sites):
        return None
    return [site.stack for site in sites]


def _is_script(module: cst.Module) -> bool:
    return any(_is_main_guard(statement) for statement in module.body)


def _is_main_guard(statement: cst.CSTNode) -> bool:
    """`if __name__ == "__main__":`."""
    test = statement.test if isinstance(statement, cst.If) else None
    return (
        isinstance(test, cst.Comparison)
        and isinstance(test.left, cst.Name)
        and test.left.value == "__name__"
        and any(
            isinstance(c.comparator, cst.SimpleString) and literal_value(c.comparator) == "__main__"
            for c in test.comparisons
        )
    )
