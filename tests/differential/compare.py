"""The first difference between two runs, in words a person can act on."""

from __future__ import annotations

from tests.differential.execution import Outcome


def bound_names(source: str) -> set[str]:
    """The names a program's module-level code assigns (`device = ...`, `for x in ...`, imports)."""
    import ast

    try:
        tree = ast.parse(source)
    except SyntaxError:
        return set()
    names: set[str] = set()
    for stmt in tree.body:
        for node in ast.walk(stmt) if not isinstance(stmt, (ast.FunctionDef, ast.ClassDef)) else ():
            if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
                names.add(node.id)
    return names


def difference(
    original: Outcome, rewritten: Outcome, rewrite_binds: frozenset[str] = frozenset()
) -> str | None:
    """None when the two runs made the same device calls with the same results, else the first difference.

    Compared in the order things happen: the device calls (when one run stops early because it raised, the
    error is the difference), then the error that ended each run, the printed output, the values left in the
    namespace (names only the rewritten code binds do not count: a rewrite may name the device once), the
    results of calling the fragment's functions, and the process-wide settings.
    """
    a, b = [c[0] for c in original.calls], [c[0] for c in rewritten.calls]
    if a != b:
        at = next((i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), min(len(a), len(b)))
        for name, run, other in (("rewritten", rewritten, original), ("original", original, rewritten)):
            if at == len(run.calls) and run.error and run.error != other.error:
                return (
                    f"after {at} identical device calls the {name} code raised {run.error} ({run.error_at}); "
                    f"the other goes on with {_call(other, at)}"
                )
        context = f" (after {original.calls[at - 1][1]})" if at else ""
        return (
            f"device call #{at + 1} differs{context}:\n  original:  {_call(original, at)}\n"
            f"  rewritten: {_call(rewritten, at)}"
        )
    if original.error != rewritten.error:
        return f"the original {_ending(original)}; the rewritten {_ending(rewritten)}"
    if original.stdout != rewritten.stdout:
        lines_a, lines_b = original.stdout.splitlines(), rewritten.stdout.splitlines()
        at = next(
            (i for i, (x, y) in enumerate(zip(lines_a, lines_b, strict=False)) if x != y),
            min(len(lines_a), len(lines_b)),
        )
        return (
            f"printed line {at + 1} differs:\n  original:  {_line(lines_a, at)}\n"
            f"  rewritten: {_line(lines_b, at)}"
        )
    for name, value in original.values.items():
        if name in rewrite_binds:
            continue  # a name the rewrite binds (the device, named once) over one the harness preset
        if rewritten.values.get(name) != value:
            return (
                f"`{name}` differs:\n  original:  {value}\n"
                f"  rewritten: {rewritten.values.get(name, '(not defined)')}"
            )
    for name, value in original.settings.items():
        if rewritten.settings.get(name) != value:
            return f"setting {name} differs: original {value}, rewritten {rewritten.settings.get(name)}"
    return None


def _call(run: Outcome, at: int) -> str:
    return run.calls[at][1] if at < len(run.calls) else "(no more device calls)"


def _line(lines: list[str], at: int) -> str:
    return repr(lines[at]) if at < len(lines) else "(no more output)"


def _ending(run: Outcome) -> str:
    return f"raised {run.error} ({run.error_at})" if run.error else "ran to the end"
