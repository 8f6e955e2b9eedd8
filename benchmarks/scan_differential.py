"""The scan's fast path (pre-pass + per-statement positions) against the full libcst path, file by file.

    .venv/bin/python benchmarks/scan_differential.py FOLDER... [--jobs N]

For every file the byte filter lets through, the findings of `scan_file` (the pre-pass drops the rules that
cannot report; positions come from the innermost statements) are compared with `scan_text` run with every
triggered rule and libcst's whole-module `PositionProvider`. Any difference is printed and the exit status
is 1. `benchmarks/scan.py --differential` runs it over the benchmark's trees.
"""

from __future__ import annotations

import argparse
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict
from pathlib import Path

from neuron_migrate.migrate import analyzer, positions
from neuron_migrate.migrate.cache import ScanCache
from neuron_migrate.migrate.file_scan import scan_file, scan_text
from neuron_migrate.migrate.rule import select_rules
from neuron_migrate.migrate.scanner import ScanOptions, plan
from neuron_migrate.migrate.sources import Selection


class _WholeFile(positions.StatementPositions):
    """The reference: every position from libcst's pass over the whole module."""

    def __getitem__(self, node):
        self._resolve_whole_file()
        return self.resolved[node]


def _both(task: tuple) -> tuple[str, list, list, float, float]:
    rel, text, active, style = task
    start = time.perf_counter()
    fast = [asdict(f) for f in scan_file(rel, text, active, style)]
    middle = time.perf_counter()
    analyzer.StatementPositions = _WholeFile
    try:
        full = [asdict(f) for f in scan_text(rel, text, active, style)]
    finally:
        analyzer.StatementPositions = positions.StatementPositions
    return rel, fast, full, middle - start, time.perf_counter() - middle


def compare(folders: list[Path], jobs: int = 2) -> tuple[int, int, float, float]:
    """(files compared, files that differ, seconds fast, seconds full), printing each difference."""
    rules = select_rules((), ())
    items = []
    for folder in folders:
        options = ScanOptions(paths=(folder,), root=folder, selection=Selection(respect_gitignore=False))
        items += [
            item for item in plan(options, lambda: rules, ScanCache(None, ""), []) if item.findings is None
        ]
    tasks = [(item.source.path.as_posix(), item.text, item.active, item.style) for item in items]
    differ, fast_s, full_s = 0, 0.0, 0.0
    with ProcessPoolExecutor(max_workers=jobs) as pool:
        for rel, fast, full, fast_t, full_t in pool.map(_both, tasks, chunksize=4):
            fast_s, full_s = fast_s + fast_t, full_s + full_t
            if fast != full:
                differ += 1
                only_fast = [f for f in fast if f not in full]
                only_full = [f for f in full if f not in fast]
                print(f"DIFFERS {rel}: only fast {len(only_fast)}, only full {len(only_full)}", flush=True)
                for f in (only_fast + only_full)[:4]:
                    print(
                        f"    {f['code']} {f['line']}:{f['col']}-{f['end_line']}:{f['end_col']} "
                        f"{f['message'][:90]}"
                    )
    return len(tasks), differ, fast_s, full_s


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folders", nargs="+", type=Path)
    parser.add_argument("--jobs", type=int, default=2)
    args = parser.parse_args()
    files, differ, fast_s, full_s = compare(args.folders, args.jobs)
    print(f"{files} files compared, {differ} differ; analysis CPU s: fast {fast_s:.1f}, full {full_s:.1f}")
    sys.exit(1 if differ else 0)


if __name__ == "__main__":
    main()
