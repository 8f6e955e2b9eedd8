"""One benchmarked tree: copy it, run `fix` on the copy, and tally every metric over the changed files."""

from __future__ import annotations

import importlib.util
import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from .analysis import analyse
from .changes import FilePair
from .linelimit import DEFAULT_LINE_LENGTH, line_length, search_boundary
from .lint import lint_deltas
from .records import METRICS, Example, Tally
from .runner import FixRun, copy_sources, run_fix
from .statements import parse


@dataclass(frozen=True)
class Target:
    """A tree to fix: an installed package (no configuration above it counts) or a folder."""

    name: str
    folder: Path
    boundary: Path  # where the line-length configuration search stops


@dataclass
class TreeResult:
    """The tallies of one tree and how its fix run went."""

    target: Target
    files: int
    run: FixRun
    load: tuple[float, float]  # 1-minute load average before and after the fix run
    tallies: dict[str, Tally] = field(default_factory=lambda: {m: Tally() for m in METRICS})


def resolve(spec: str) -> Target:
    """`transformers` (an installed package) or a folder path."""
    path = Path(spec)
    if path.is_dir():
        folder = path.resolve()
        return Target(folder.name, folder, search_boundary(folder))
    found = importlib.util.find_spec(spec) if spec.isidentifier() else None
    if found is None or not found.submodule_search_locations:
        raise SystemExit(f"{spec}: neither a folder nor an installed package here; pass a path or install it")
    folder = Path(next(iter(found.submodule_search_locations))).resolve()
    return Target(spec, folder, folder)


def _text(data: bytes) -> str:
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError:
        return data.decode("latin-1")


def _pairs(target: Target, after_root: Path, rels: list[str], default: int) -> list[FilePair]:
    source_parent = target.folder.parent
    pairs = []
    for rel in rels:
        old, new = (source_parent / rel).read_bytes(), (after_root / rel).read_bytes()
        if old != new:
            configured = line_length(source_parent / rel, target.boundary, None)
            # nothing configured: the default, or the file's own longest line (a fix may write as wide as
            # the file already is, never wider)
            limit = configured or max(default, *(len(line) for line in _text(old).splitlines()), 0)
            pairs.append(FilePair(rel, _text(old), _text(new), limit))
    return pairs


def _unparseable_inputs(target: Target, rels: list[str]) -> list[Example]:
    source_parent = target.folder.parent
    return [
        Example(rel, 1, "Python cannot parse the original")
        for rel in rels
        if parse(_text((source_parent / rel).read_bytes())) is None
    ]


def bench_tree(
    target: Target,
    unsafe: bool,
    examples: int,
    default: int = DEFAULT_LINE_LENGTH,
    timeout: float = 3600.0,
    command: list[str] | None = None,
) -> TreeResult:
    """Fix a temporary copy of `target` and measure the result; the target itself is only read."""
    with tempfile.TemporaryDirectory(prefix="fix-quality-") as tmp:
        after_root, before_root = Path(tmp) / "after", Path(tmp) / "before"
        rels = copy_sources(target.folder, after_root)
        copy_sources(target.folder, before_root)  # the same tree for ruff, never site-packages itself
        load = os.getloadavg()[0]
        run = run_fix(after_root, target.folder, rels, unsafe, command, timeout)
        result = TreeResult(target, len(rels), run, (load, os.getloadavg()[0]))
        pairs = _pairs(target, after_root, rels, default)
        for pair in pairs:
            for metric, tally in analyse(pair).items():
                result.tallies[metric].merge(tally)
        findings, formats = lint_deltas(before_root, after_root, pairs, examples)
    tallies = result.tallies
    tallies["ruff_new_findings"].merge(findings)
    tallies["ruff_format_regressions"].merge(formats)
    tallies["input_unparseable"].add(_unparseable_inputs(target, rels))
    tallies["crashes"].add([Example(rel, 1, why) for rel, why in run.crashes])
    tallies["rewritten_sites"].add([], run.sites or 0)
    return result
