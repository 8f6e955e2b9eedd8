"""Repeats of the device idiom `torch.accelerator.current_accelerator(check_available=True) or
torch.device("cpu")`: the design asks to name the device once, so a second copy in one function (or in
module-level code), or in one statement, is a defect. Matched on the AST, so either quote style and the
`(...).type` form count alike.
"""

from __future__ import annotations

import ast
from collections import Counter
from dataclasses import dataclass

from .records import Example, clip
from .statements import dotted

SCOPES = (ast.FunctionDef, ast.AsyncFunctionDef)


def is_device_idiom(node: ast.AST) -> bool:
    """True for `torch.accelerator.current_accelerator(check_available=True) or torch.device("cpu")`."""
    if not (isinstance(node, ast.BoolOp) and isinstance(node.op, ast.Or) and len(node.values) == 2):
        return False
    query, fallback = node.values
    return (
        isinstance(query, ast.Call)
        and dotted(query.func) == "torch.accelerator.current_accelerator"
        and not query.args
        and any(
            k.arg == "check_available" and isinstance(k.value, ast.Constant) and k.value.value is True
            for k in query.keywords
        )
        and isinstance(fallback, ast.Call)
        and dotted(fallback.func) == "torch.device"
        and len(fallback.args) == 1
        and not fallback.keywords
        and isinstance(fallback.args[0], ast.Constant)
        and fallback.args[0].value == "cpu"
    )


@dataclass(frozen=True)
class Use:
    """One occurrence: its function (`<module>` outside functions), the statement holding it, its line."""

    scope: str  # qualified name, `#2` for a second definition of the same name (property setters, overloads)
    statement: int  # id of the innermost statement: only compared within one version of the file
    line: int


def idiom_uses(tree: ast.Module) -> list[Use]:
    """Every idiom occurrence with the function and the innermost statement that hold it."""
    uses: list[Use] = []
    defined: Counter[str] = Counter()

    def visit(node: ast.AST, scope: str, statement: int) -> None:
        if isinstance(node, SCOPES):
            name = node.name if scope == "<module>" else f"{scope}.{node.name}"
            defined[name] += 1
            scope = name if defined[name] == 1 else f"{name}#{defined[name]}"
        if isinstance(node, ast.stmt):
            statement = id(node)
        if is_device_idiom(node):
            uses.append(Use(scope, statement, node.lineno))
        for child in ast.iter_child_nodes(node):
            visit(child, scope, statement)

    visit(tree, "<module>", 0)
    return uses


def _repeats(uses: list[Use]) -> tuple[Counter[str], Counter[str]]:
    """Per scope: copies beyond the first in the scope, and beyond the first in each statement."""
    per_scope = Counter(u.scope for u in uses)
    per_statement = Counter((u.scope, u.statement) for u in uses)
    in_scope = Counter({s: n - 1 for s, n in per_scope.items() if n > 1})
    in_statement: Counter[str] = Counter()
    for (scope, _), n in per_statement.items():
        in_statement[scope] += n - 1
    return in_scope, +in_statement


def idiom_repeats(
    rel: str, before: ast.Module, after: ast.Module, lines: list[str]
) -> tuple[list[Example], list[Example]]:
    """Repeats the fix added (per function, and the subset inside one statement): the later copies."""
    new = idiom_uses(after)
    old_scope, old_statement = _repeats(idiom_uses(before))
    new_scope, new_statement = _repeats(new)
    results = []
    for added, key in (
        (new_scope - old_scope, lambda u: u.scope),
        (new_statement - old_statement, lambda u: (u.scope, u.statement)),
    ):
        seen: Counter = Counter()
        examples = []
        for use in new:
            seen[key(use)] += 1
            if seen[key(use)] > 1 and added[use.scope] > 0:
                added[use.scope] -= 1
                examples.append(Example(rel, use.line, clip(lines[use.line - 1])))
        results.append(examples)
    return results[0], results[1]
