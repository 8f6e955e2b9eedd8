"""Where a cold scan's seconds go: one process, no cache, each stage timed by wrapping its function.

    .venv/bin/python benchmarks/scan_phases.py FOLDER      (or: benchmarks/scan.py --phases)

Stages: process start (`neuron-migrate --version`, a separate process), planning (discovery, reading,
hashing, decoding, the byte filter), the pre-pass (`candidates`), `ast.parse`, libcst parsing, the rules'
walk, `settle`, positions, and the rest (sorting, result records). Nested stages are subtracted from the
stage around them, so the column adds up to the total.
"""

from __future__ import annotations

import ast
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path

from neuron_migrate.migrate import analyzer, file_scan, positions, scanner
from neuron_migrate.migrate.scanner import ScanOptions, scan
from neuron_migrate.migrate.sources import Selection

SPENT: dict[str, float] = defaultdict(float)
_STACK: list[str] = []


def _timed(stage: str, function):
    def wrapper(*args, **kwargs):
        _STACK.append(stage)
        start = time.perf_counter()
        try:
            return function(*args, **kwargs)
        finally:
            elapsed = time.perf_counter() - start
            _STACK.pop()
            SPENT[stage] += elapsed
            if _STACK:
                SPENT[_STACK[-1]] -= elapsed  # the enclosing stage's own time excludes this one

    return wrapper


def _instrument() -> None:
    scanner.plan = _timed("plan: discover, read, hash, decode, byte filter", scanner.plan)
    file_scan.candidates = _timed("pre-pass (lexicon + conditions)", file_scan.candidates)
    ast.parse = _timed("ast.parse", ast.parse)
    file_scan.parse = _timed("libcst parse", file_scan.parse)
    file_scan.analyze_module = _timed("rules' walk (analyze_module)", file_scan.analyze_module)
    analyzer.settle = _timed("settle", analyzer.settle)
    positions.StatementPositions._resolve = _timed("positions", positions.StatementPositions._resolve)
    positions.StatementPositions._resolve_whole_file = _timed(
        "positions", positions.StatementPositions._resolve_whole_file
    )


def report(name: str, folder: Path) -> None:
    start = time.perf_counter()
    subprocess.run(
        [Path(sys.executable).parent / "neuron-migrate", "--version"], capture_output=True, check=True
    )
    process_start = time.perf_counter() - start
    if not _STACK and "libcst parse" not in SPENT:
        _instrument()
    SPENT.clear()
    options = ScanOptions(paths=(folder,), root=folder, selection=Selection(respect_gitignore=False), jobs=1)
    start = time.perf_counter()
    result = _timed("rest", scan)(options)
    total = time.perf_counter() - start
    print(
        f"{name}: {result.files_scanned} files, {result.files_skipped_by_prefilter} skipped by the byte "
        f"filter, one process, {total:.2f} s (+ {process_start:.2f} s process start)"
    )
    for stage, seconds in sorted(SPENT.items(), key=lambda item: -item[1]):
        print(f"    {stage:<52}{seconds:>8.2f} s {100 * seconds / total:>5.1f} %")


if __name__ == "__main__":
    for arg in sys.argv[1:]:
        report(Path(arg).name, Path(arg))
