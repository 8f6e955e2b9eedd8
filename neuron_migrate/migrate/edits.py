"""Applying a set of `Edit`s to a text: non-overlapping, de-duplicated, applied back to front."""

from __future__ import annotations

import re
from collections.abc import Iterable
from itertools import pairwise

from neuron_migrate.migrate.fixes import AVAILABILITY_GUARD
from neuron_migrate.model import Edit


class OverlappingEdits(ValueError):
    """Two edits touch the same text; the caller drops the later fix and leaves it for a person."""


def _offsets(text: str) -> list[int]:
    starts = [0]
    for index, char in enumerate(text):
        if char == "\n":
            starts.append(index + 1)
    return starts


def _span(text: str, starts: list[int], edit: Edit) -> tuple[int, int]:
    """The offsets in `text` (whose line starts are `starts`) where `edit` begins and ends."""

    def offset(line: int, col: int) -> int:
        return len(text) if line - 1 >= len(starts) else min(starts[line - 1] + col, len(text))

    return offset(edit.line, edit.col), offset(edit.end_line, edit.end_col)


def apply_edits(text: str, edits: Iterable[Edit]) -> str:
    """`text` with every edit applied; identical edits (e.g. two fixes adding `import torch`) count once."""
    starts = _offsets(text)
    spans = sorted(
        {_whole_line_deletion(text, *_span(text, starts, e), e.text) for e in edits},
        key=_order,
    )
    for (_, end, _), (next_start, _, _) in pairwise(spans):
        if next_start < end:
            raise OverlappingEdits(f"edits overlap at offset {next_start}")
    for start, end, replacement in reversed(_join_adjacent_guards(text, spans)):
        text = text[:start] + replacement + text[end:]
    return text


def nested(text: str, accepted: list[Edit], edits: Iterable[Edit]) -> list[Edit] | None:
    """`accepted` with `edits` added, where an edit that falls inside an accepted one is applied within it:
    the accepted edit keeps the code there verbatim (its text is the source of exactly one stretch of what
    it replaces, and that stretch holds the new edit). `torch.cuda.stream(torch.cuda.Stream())` becomes
    `torch.cuda.Stream()`, which the `torch.Stream()` fix rewrites inside it: applied one after the other,
    the first would keep the CUDA stream. None when an edit overlaps another way."""
    starts = _offsets(text)
    result = list(accepted)
    for edit in edits:
        start, end = _span(text, starts, edit)
        for index, outer in enumerate(result):
            outer_start, outer_end = _span(text, starts, outer)
            if outer.cell != edit.cell or not (outer_start <= start < end <= outer_end) or not outer.text:
                continue
            replaced = text[outer_start:outer_end]
            at = replaced.find(outer.text)
            kept = outer_start + at
            once = at >= 0 and replaced.find(outer.text, at + 1) < 0
            if not once or not kept <= start < end <= kept + len(outer.text):
                return None
            inner = outer.text[: start - kept] + edit.text + outer.text[end - kept :]
            result[index] = Edit(outer.line, outer.col, outer.end_line, outer.end_col, inner, outer.cell)
            break
        else:
            result.append(edit)
    try:
        apply_edits(text, result)
    except OverlappingEdits:
        return None
    return result


def _order(span: tuple[int, int, str]) -> tuple[int, int, int, str]:
    """Position order; of several insertions at one place, import statements come first (what follows may
    use them)."""
    start, end, text = span
    return start, end, 0 if text.lstrip("\n").startswith(("import ", "from ")) else 1, text


def _whole_line_deletion(text: str, start: int, end: int, replacement: str) -> tuple[int, int, str]:
    """A deletion that empties its lines also takes their indentation and line break (no blank lines left);
    one that leaves only a comment moves the comment to the statement's indentation."""
    if replacement:
        return start, end, replacement
    line_start = text.rfind("\n", 0, start) + 1
    if end > start and text[end - 1] == "\n":
        line_end = end
    else:
        newline = text.find("\n", end)
        line_end = len(text) if newline == -1 else newline + 1
    rest = text[end:line_end]
    if text[line_start:start].strip():
        return start, end, replacement
    if rest.strip():  # a trailing comment stays, at the statement's indentation
        return start, end + len(rest) - len(rest.lstrip(" \t")), replacement
    return line_start, line_end, replacement


def _join_adjacent_guards(text: str, spans: list[tuple[int, int, str]]) -> list[tuple[int, int, str]]:
    """Statements guarded one after the other share one `if`: the later ones lose their own guard line.

    Only edits that each turn a whole statement into a guarded block are joined, and only when nothing but a
    line break and the indentation separates them (no comment, no other statement).
    """
    joined = list(spans)
    for index in range(1, len(spans)):
        (previous_start, previous_end, previous), (start, end, replacement) = spans[index - 1], spans[index]
        between = text[previous_end:start]
        head, _, body = replacement.partition("\n")
        if not (
            previous.startswith(AVAILABILITY_GUARD + "\n")
            and head == AVAILABILITY_GUARD
            and body
            and "\n" not in body
            and between.count("\n") == 1
            and not between.strip()
        ):
            continue
        indent = between.rpartition("\n")[2]
        previous_indent = text[text.rfind("\n", 0, previous_start) + 1 : previous_start]
        if previous_indent == indent and body.startswith(indent):  # same block, not the line after a dedent
            joined[index] = (start, end, body[len(indent) :])
    return joined


def drop_repeats(before: str, after: str) -> str:
    """`after` without the statement lines a fix turned into a copy of the line right above them
    (`torch.manual_seed(s)` twice): a call statement repeated verbatim at the same indentation."""
    from neuron_migrate.migrate.layout import changed_lines

    lines = after.splitlines(keepends=True)
    drop = set()
    for number in changed_lines(before, after):
        index = number - 1
        line = lines[index].rstrip("\r\n")
        previous = index - 1
        while previous >= 0 and previous in drop:
            previous -= 1
        if previous < 0 or not line.strip() or lines[previous].rstrip("\r\n") != line:
            continue
        body = line.strip()
        if (
            body.endswith(")")
            and "(" in body
            and "=" not in body.split("(", 1)[0]
            and not body.startswith(("return", "yield", "if ", "while ", "for ", "with ", "del ", "raise"))
        ):
            drop.add(index)
    return "".join(line for i, line in enumerate(lines) if i not in drop)


_POINTS_UP = re.compile(r"^\s*#\s*\^")


def drop_pointers_to_removed(before: str, after: str) -> str:
    """`after` without the comments that point up (`# ^^ safe to call even if cuda is not available`) at a
    statement the fixes removed: under the statement above, they would describe the wrong line."""
    import difflib

    old, new = before.splitlines(keepends=True), after.splitlines(keepends=True)
    drop = set()
    for tag, _, i2, j1, _ in difflib.SequenceMatcher(a=old, b=new, autojunk=False).get_opcodes():
        if tag != "delete" or i2 >= len(old) or j1 >= len(new) or new[j1] != old[i2]:
            continue
        removed, below = old[i2 - 1], old[i2]
        indent = len(removed) - len(removed.lstrip())
        if _POINTS_UP.match(below) and len(below) - len(below.lstrip()) == indent:
            drop.add(j1)
    return "".join(line for i, line in enumerate(new) if i not in drop)
