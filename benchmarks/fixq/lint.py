"""Ruff before and after: new `ruff check` findings and files that `ruff format --check` stops accepting.

A fixed rule set (ruff's defaults E4, E7, E9, F plus I for import order) with each file's own line limit, and
`--isolated` so no configuration found around the temporary copies changes the rules between runs.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from collections import Counter
from pathlib import Path

from .changes import FilePair, changed_lines, hunks
from .records import Example, Tally, clip

RULES = "E4,E7,E9,F,I"
CHUNK = 400  # files per ruff call: keeps command lines short
NUMBER = re.compile(r"\d+")


def ruff_command() -> str:
    """Ruff from this environment (a dev dependency of neuron-migrate)."""
    exe = Path(sys.executable).parent / "ruff"
    found = str(exe) if exe.exists() else shutil.which("ruff")
    if found is None:
        raise SystemExit("ruff is not installed in this environment: run `make install` (dev extra) first")
    return found


def _chunks(items: list[str]) -> list[list[str]]:
    return [items[i : i + CHUNK] for i in range(0, len(items), CHUNK)]


def check(root: Path, rels: list[str], limit: int) -> dict[str, list[dict]]:
    """`ruff check` findings per file (relative path), as ruff's JSON records."""
    found: dict[str, list[dict]] = {}
    for part in _chunks(rels):
        proc = subprocess.run(
            [
                ruff_command(),
                "check",
                "--isolated",
                "--no-cache",
                "--select",
                RULES,
                "--line-length",
                str(limit),
                "--output-format",
                "json",
                "--exit-zero",
                "--quiet",
                *part,
            ],
            cwd=root,
            capture_output=True,
            text=True,
            check=False,
        )
        for record in json.loads(proc.stdout or "[]"):
            rel = Path(record["filename"]).resolve().relative_to(root.resolve()).as_posix()
            found.setdefault(rel, []).append(record)
    return found


def format_failures(root: Path, rels: list[str], limit: int) -> dict[str, list[tuple[int, int]]]:
    """Files `ruff format --check` would reformat or cannot parse, with the line spans it would rewrite."""
    failed: dict[str, list[tuple[int, int]]] = {}
    for part in _chunks(rels):
        proc = subprocess.run(
            [
                ruff_command(),
                "format",
                "--check",
                "--isolated",
                "--no-cache",
                "--line-length",
                str(limit),
                "--output-format",
                "json",
                *part,
            ],
            cwd=root,
            capture_output=True,
            text=True,
            check=False,
        )
        for record in json.loads(proc.stdout or "[]"):
            rel = Path(record["filename"]).resolve().relative_to(root.resolve()).as_posix()
            edits = (record.get("fix") or {}).get("edits") or [record]
            spans = [(e["location"]["row"], e["end_location"]["row"]) for e in edits]
            failed.setdefault(rel, []).extend(spans)
    return failed


def _key(record: dict) -> tuple[str, str]:
    """Code and message, without line numbers (`Redefinition of unused x from line 17` moves when the fix
    adds lines) and without advice after `;`, which depends on the files around (first-party or not)."""
    message = NUMBER.sub("N", (record.get("message") or "").split(";")[0])
    return record.get("code") or "syntax", message


def new_findings(pair: FilePair, before: list[dict], after: list[dict]) -> list[Example]:
    """Findings in `after` beyond those of the same code and message in `before`; on changed lines first."""
    extra = Counter(map(_key, after)) - Counter(map(_key, before))
    touched = changed_lines(hunks(pair.before_lines, pair.after_lines))
    lines = pair.after_lines
    ordered = sorted(after, key=lambda r: (r["location"]["row"] not in touched, r["location"]["row"]))
    examples = []
    for record in ordered:
        if extra[_key(record)] > 0:
            extra[_key(record)] -= 1
            row = record["location"]["row"]
            text = lines[row - 1] if 0 < row <= len(lines) else ""
            label = f"{_key(record)[0]} {record['message']}"
            examples.append(Example(pair.rel, row, f"{label}: {clip(text, 160)}"))
    return sorted(examples, key=lambda e: e.line)


def format_example(pair: FilePair, spans: list[tuple[int, int]]) -> Example:
    """Where ruff would reformat the fixed file: the first fixed line inside a span it rewrites."""
    touched = changed_lines(hunks(pair.before_lines, pair.after_lines))
    inside = sorted(line for line in touched for start, end in spans if start <= line <= end)
    line = inside[0] if inside else min((start for start, _ in spans), default=1)
    text = pair.after_lines[line - 1] if 0 < line <= len(pair.after_lines) else ""
    return Example(pair.rel, line, clip(text))


def lint_deltas(
    before_root: Path, after_root: Path, pairs: list[FilePair], examples: int
) -> tuple[Tally, Tally]:
    """(new ruff check findings, format regressions) over the changed files, grouped by line limit.

    Both roots must hold the whole tree, not only the changed files: ruff's import rules classify a module
    as first-party by the folders it sees."""
    findings, formats = Tally(), Tally()
    by_limit: dict[int, list[FilePair]] = {}
    for pair in pairs:
        by_limit.setdefault(pair.limit, []).append(pair)
    for limit, group in sorted(by_limit.items()):
        rels = [p.rel for p in group]
        old, new = check(before_root, rels, limit), check(after_root, rels, limit)
        for pair in group:
            extra = new_findings(pair, old.get(pair.rel, []), new.get(pair.rel, []))
            findings.add(extra[:examples], len(extra))
        was_failing = format_failures(before_root, rels, limit)
        for rel, spans in format_failures(after_root, rels, limit).items():
            if rel not in was_failing:
                pair = next(p for p in group if p.rel == rel)
                formats.add([format_example(pair, spans)])
    return findings, formats
