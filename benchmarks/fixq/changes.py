"""Line-level comparison of a file before and after `fix`, and the metrics that only need lines.

The fix output is aligned with the original by difflib: a `Hunk` is one replaced, inserted or deleted run
of lines. Everything here counts what the fix did, never what the original already had: a long line is
new only if its hunk has more long lines than the original run it replaced.
"""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass

from .records import Example, clip

# Code that already works on every device (design: "touch only what must change"); `cudnn.` also matches
# `from torch.backends import cudnn` users.
UNTOUCHABLE = re.compile(r"pin_memory|\bcudnn\.")
#: the pin_memory / cudnn code itself: `pin_memory=<value>`, `.pin_memory()`, `cudnn.<flag>[ = <value>]`
FRAGMENT = re.compile(r"pin_memory\s*(?:=\s*[^,)\n#]+|\(\s*\))|\bcudnn\.[\w.]+(?:\s*=\s*[^\n#]+)?")


@dataclass(frozen=True)
class Hunk:
    """0-based half-open line ranges: `old` in the original, `new` in the fixed file."""

    old: range
    new: range


@dataclass(frozen=True)
class FilePair:
    """One changed file: its report path, its text before and after, and its line limit."""

    rel: str
    before: str
    after: str
    limit: int

    @property
    def before_lines(self) -> list[str]:
        return self.before.splitlines()

    @property
    def after_lines(self) -> list[str]:
        return self.after.splitlines()


def hunks(before: list[str], after: list[str]) -> list[Hunk]:
    """The non-equal runs between two line lists (autojunk off: blank lines must align like any other)."""
    matcher = difflib.SequenceMatcher(None, before, after, autojunk=False)
    return [
        Hunk(range(i1, i2), range(j1, j2)) for tag, i1, i2, j1, j2 in matcher.get_opcodes() if tag != "equal"
    ]


def changed_lines(found: list[Hunk]) -> set[int]:
    """1-based numbers of the fixed file's lines that the fix added or changed."""
    return {j + 1 for h in found for j in h.new}


def long_lines(pair: FilePair, found: list[Hunk]) -> tuple[int, list[Example]]:
    """New lines over the limit: per hunk, the long lines beyond those the replaced original lines had."""
    before, after = pair.before_lines, pair.after_lines
    count, examples = 0, []
    for hunk in found:
        old_long = [before[i] for i in hunk.old if len(before[i]) > pair.limit]
        new_long = [j for j in hunk.new if len(after[j]) > pair.limit and after[j] not in old_long]
        extra = max(0, len([j for j in hunk.new if len(after[j]) > pair.limit]) - len(old_long))
        count += extra
        examples += [
            Example(pair.rel, j + 1, f"[{len(after[j])} > {pair.limit}] {clip(after[j])}")
            for j in new_long[:extra]
        ]
    return count, examples


def _untouchable_part(line: str) -> tuple[str, list[str]]:
    """A line's indentation and its pin_memory / cudnn code, the rest of it ignored."""
    return line[: len(line) - len(line.lstrip())], [f.strip() for f in FRAGMENT.findall(line)]


def untouchable_edits(pair: FilePair, found: list[Hunk]) -> list[Example]:
    """Hunks that changed, added or removed a line using pin_memory or torch.backends.cudnn (one per line).
    A line whose pin_memory / cudnn code and indentation are those of a line it replaces was edited elsewhere
    (`x.pin_memory().cuda()` -> `x.pin_memory().to(device)`): it does not count."""
    before, after = pair.before_lines, pair.after_lines
    examples = []
    for hunk in found:
        old = [before[i] for i in hunk.old if UNTOUCHABLE.search(before[i])]
        new = [j for j in hunk.new if UNTOUCHABLE.search(after[j])]
        old_parts = [_untouchable_part(line) for line in old]
        new_parts = [_untouchable_part(after[j]) for j in new]
        added = [
            j for j, part in zip(new, new_parts, strict=True) if after[j] not in old and part not in old_parts
        ]
        new_lines = {after[j] for j in new}
        removed = [
            line
            for line, part in zip(old, old_parts, strict=True)
            if line not in new_lines and part not in new_parts
        ]
        examples += [Example(pair.rel, j + 1, clip(after[j])) for j in added]
        at = hunk.new.start + 1
        examples += [Example(pair.rel, at, "removed: " + clip(line)) for line in removed[len(added) :]]
    return examples
