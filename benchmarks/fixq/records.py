"""What the benchmark counts: one `Tally` (a count and a few example locations) per metric."""

from __future__ import annotations

from dataclasses import dataclass, field

# Metric keys in table order, with the row label. `rewritten_sites` is the only one that should be non-zero.
METRICS: dict[str, str] = {
    "rewritten_sites": "rewritten sites (findings fixed)",
    "files_changed": "files changed",
    "long_lines": "new lines over the line limit",
    "idiom_repeats": "device idiom repeated in a function/module",
    "idiom_repeats_in_statement": "  of which repeated in one statement",
    "nested_guards": "guards added where an accelerator is certain",
    "adjacent_duplicates": "identical adjacent statements created",
    "pin_memory_cudnn_edits": "pin_memory / cudnn edits",
    "ruff_new_findings": "new ruff check findings",
    "ruff_format_regressions": "files ruff-formatted before, not after",
    "broken_by_fix": "files the fix left unparseable",
    "crashes": "fix crashes (files)",
    "input_unparseable": "input files Python cannot parse (info)",
}

# Rows that are information, not defects: they are not expected to be zero.
INFORMATION = frozenset({"rewritten_sites", "files_changed", "input_unparseable"})


@dataclass(frozen=True)
class Example:
    """One offending location: a path relative to the benchmarked tree's parent, a 1-based line, its text."""

    file: str
    line: int
    text: str

    def as_dict(self) -> dict:
        return {"file": self.file, "line": self.line, "text": self.text}


@dataclass
class Tally:
    """A metric's count and its examples (kept per file so a report can spread them over files)."""

    count: int = 0
    examples: list[Example] = field(default_factory=list)

    def add(self, examples: list[Example], count: int | None = None) -> None:
        """Count `count` defects (default: one per example) and keep the examples."""
        self.count += len(examples) if count is None else count
        self.examples.extend(examples)

    def merge(self, other: Tally) -> None:
        self.count += other.count
        self.examples.extend(other.examples)

    def spread(self, limit: int) -> list[Example]:
        """Up to `limit` examples, one file after another, so one noisy file cannot fill the list."""
        by_file: dict[str, list[Example]] = {}
        for example in self.examples:
            by_file.setdefault(example.file, []).append(example)
        chosen: list[Example] = []
        queues = [list(v) for v in by_file.values()]
        while len(chosen) < limit and any(queues):
            for queue in queues:
                if queue and len(chosen) < limit:
                    chosen.append(queue.pop(0))
        return chosen


def clip(text: str, width: int = 240) -> str:
    """A source line for a report: without its indentation, and cut when very long (its length is kept)."""
    text = text.strip()
    return text if len(text) <= width else f"{text[:width]}… ({len(text)} chars)"
