"""How the availability guards the fixes add read, once the edits are in (a text pass, like `drop_repeats`).

- An `else:` of an `if` whose only statement is a new guard becomes an `elif` (ruff's PLR5501 flags the
  nested form): `else:` / `if torch.accelerator.is_available():` / `call()` ->
  `elif torch.accelerator.is_available():` / `call()`. A comment on the `else:` line stays on the `elif`
  line; comments between the two move into the block with it.
- A comment right below a newly guarded statement that points up at it (`# ^^ ...`) and speaks of CUDA
  described the unguarded CUDA call ("safe to call even if cuda is not available"): it goes.

Only guards the fixes wrote count (lines `after` changed), never one the project wrote itself.
"""

from __future__ import annotations

import ast
import re

from neuron_migrate.migrate.fixes import AVAILABILITY_GUARD, AVAILABLE

_ELSE = re.compile(r"^(\s*)else\s*:(.*)$", re.DOTALL)
_STALE_COMMENT = re.compile(r"^\s*#\s*\^.*cuda", re.IGNORECASE)


def tidy_new_guards(before: str, after: str) -> str:
    """`after` with the new guards that are all of an `else:` turned into `elif`s, and the up-pointing CUDA
    comments under newly guarded statements dropped."""
    if AVAILABILITY_GUARD not in after:
        return after
    try:
        tree = ast.parse(after)
    except (SyntaxError, ValueError):
        return after
    from neuron_migrate.migrate.layout import changed_lines

    changed = set(changed_lines(before, after))
    lines = after.splitlines(keepends=True)
    # an `if` whose `orelse` is one `if`: an `elif`, or an `else:` holding only that `if`
    owners = {id(n.orelse[0]): n for n in ast.walk(tree) if isinstance(n, ast.If) and len(n.orelse) == 1}
    edits: list[tuple[int, str, ast.If]] = []  # (line index, what to do, the guard)
    for node in ast.walk(tree):
        if not (isinstance(node, ast.If) and node.lineno in changed and _is_new_guard(node, lines)):
            continue
        below = node.end_lineno  # the index of the line after the guarded statement
        if below < len(lines) and _STALE_COMMENT.match(lines[below]):
            edits.append((below, "drop", node))
        if id(node) in owners and _else_line(node, lines) is not None:
            edits.append((node.lineno - 1, "merge", node))
    for index, action, guard in sorted(edits, key=lambda edit: edit[0], reverse=True):
        if action == "drop":
            del lines[index]
        else:
            _merge(lines, _else_line(guard, lines), guard)
    return "".join(lines)


def _is_new_guard(node: ast.If, lines: list[str]) -> bool:
    """`if torch.accelerator.is_available():` with one one-line statement and no `else`."""
    return (
        not node.orelse
        and len(node.body) == 1
        and node.body[0].lineno == node.body[0].end_lineno == node.lineno + 1
        and lines[node.lineno - 1].strip() == AVAILABILITY_GUARD
    )


def _else_line(guard: ast.If, lines: list[str]) -> int | None:
    """The index of the `else:` line right above `guard` (comments between them allowed), when there is
    one: ast shows `elif` and `else:` + `if` alike, the source tells them apart."""
    index = guard.lineno - 2
    while index >= 0 and (not lines[index].strip() or lines[index].lstrip().startswith("#")):
        index -= 1
    return index if index >= 0 and _ELSE.match(lines[index].rstrip("\r\n")) else None


def _merge(lines: list[str], else_index: int, guard: ast.If) -> None:
    """Rewrite `else:` + guard as `elif <guard test>:` and move the guarded statement one level out."""
    line = lines[else_index]
    ending = line[len(line.rstrip("\r\n")) :]
    indent, rest = _ELSE.match(line.rstrip("\r\n")).groups()
    lines[else_index] = f"{indent}elif {AVAILABLE}:{rest}{ending}"
    guard_index = guard.lineno - 1
    guard_indent = lines[guard_index][: len(lines[guard_index]) - len(lines[guard_index].lstrip())]
    body = lines[guard_index + 1]
    lines[guard_index + 1] = guard_indent + body.lstrip(" \t")
    del lines[guard_index]
