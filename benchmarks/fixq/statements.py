"""AST helpers shared by the statement-level metrics, and identical adjacent statements."""

from __future__ import annotations

import ast
import itertools
import warnings
from collections import Counter
from collections.abc import Iterator

from .records import Example, clip


def parse(text: str) -> ast.Module | None:
    """The module, or None when this Python cannot parse it (the fix must never produce such a file)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # invalid escape sequences in third-party code are not our concern
        try:
            return ast.parse(text)
        except (SyntaxError, ValueError):  # ValueError: NUL bytes
            return None


def syntax_error(text: str) -> tuple[int, str]:
    """The 1-based line this Python's parser stops at (1 when it does not say) and why."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            ast.parse(text)
    except SyntaxError as err:
        return err.lineno or 1, err.msg
    except ValueError as err:
        return 1, str(err)
    return 1, "parses"


def dotted(node: ast.AST) -> str | None:
    """`torch.accelerator.is_available` for that attribute chain, None for anything else."""
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        return None
    return ".".join([node.id, *reversed(parts)])


def blocks(tree: ast.AST) -> Iterator[list[ast.stmt]]:
    """Every statement list in the tree: bodies, else branches, finally, handlers and match cases."""
    for node in ast.walk(tree):
        for name in ("body", "orelse", "finalbody"):
            value = getattr(node, name, None)
            if isinstance(value, list) and value and isinstance(value[0], ast.stmt):
                yield value


def _adjacent_pairs(tree: ast.AST) -> Counter[str]:
    """Adjacent statement pairs that are identical (compared as ASTs, so quotes and spacing do not matter)."""
    found: Counter[str] = Counter()
    for block in blocks(tree):
        dumps = [ast.dump(stmt) for stmt in block]
        found.update(a for a, b in itertools.pairwise(dumps) if a == b)
    return found


def adjacent_duplicates(rel: str, before: ast.Module, after: ast.Module, lines: list[str]) -> list[Example]:
    """Identical adjacent statements in `after` beyond those `before` had (the second of each pair)."""
    created = _adjacent_pairs(after) - _adjacent_pairs(before)
    examples = []
    for block in blocks(after):
        for first, second in itertools.pairwise(block):
            key = ast.dump(second)
            if created[key] > 0 and ast.dump(first) == key:
                created[key] -= 1
                examples.append(Example(rel, second.lineno, clip(lines[second.lineno - 1])))
    return examples
