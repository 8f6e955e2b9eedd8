"""All per-file metrics of one changed file, from its text before and after `fix`."""

from __future__ import annotations

import sys
from collections.abc import Callable

from .changes import FilePair, Hunk, hunks, long_lines, untouchable_edits
from .guards import TESTED_LINE, guard_lines, nested_guards
from .idioms import idiom_repeats
from .records import Example, Tally, clip
from .statements import adjacent_duplicates, parse, syntax_error


def added_guard(pair: FilePair, found: list[Hunk], guards: list[int]) -> Callable[[int], bool]:
    """Which guard lines the fix added. In a hunk, the first k guards replaced the hunk's k original
    availability tests (renames such as `torch.cuda.is_available()` -> `torch.accelerator...`); the rest
    are new."""
    before = pair.before_lines
    added: set[int] = set()
    for hunk in found:
        renamed = sum(1 for i in hunk.old if TESTED_LINE.search(before[i]))
        inside = [line for line in guards if hunk.new.start < line <= hunk.new.stop]
        added.update(inside[renamed:])
    return added.__contains__


def analyse(pair: FilePair) -> dict[str, Tally]:
    """Every line and AST metric for one file; a file the fix left unparseable gets only line metrics."""
    tallies: dict[str, Tally] = {}

    def record(metric: str, examples: list[Example], count: int | None = None) -> None:
        tallies.setdefault(metric, Tally()).add(examples, count)

    before_lines, after_lines = pair.before_lines, pair.after_lines
    found = hunks(before_lines, after_lines)
    record("files_changed", [], 1)
    count, examples = long_lines(pair, found)
    record("long_lines", examples, count)
    record("pin_memory_cudnn_edits", untouchable_edits(pair, found))
    before, after = parse(pair.before), parse(pair.after)
    if before is None:  # counted once per tree by the caller, changed or not; nothing to compare with
        return tallies
    if after is None:
        at, why = syntax_error(pair.after)
        line = after_lines[at - 1] if 0 < at <= len(after_lines) else ""
        version = ".".join(map(str, sys.version_info[:2]))
        record("broken_by_fix", [Example(pair.rel, at, f"Python {version}: {why}: {clip(line)}")])
        return tallies
    in_scope, in_statement = idiom_repeats(pair.rel, before, after, after_lines)
    record("idiom_repeats", in_scope)
    record("idiom_repeats_in_statement", in_statement)
    record(
        "nested_guards",
        nested_guards(pair.rel, after, after_lines, added_guard(pair, found, guard_lines(after))),
    )
    record("adjacent_duplicates", adjacent_duplicates(pair.rel, before, after, after_lines))
    return tallies
