"""Would a strict maintainer merge what `neuron-migrate fix` writes? Measured on real third-party code.

    .venv/bin/python benchmarks/fix_quality.py [--packages transformers torch accelerate | PATH ...]
        [--unsafe-fixes] [--examples N] [--json FILE] [--compare OLD.json] [--line-length N]

Copies the Python sources of each package (default: transformers, torch and accelerate, those installed) or
folder to a temporary folder, runs the installed `neuron-migrate fix <copy> --write` there (never touching
site-packages), compares every file with its original and prints, per tree and in total:

- rewritten sites (the CLI's "findings fixed") and files changed;
- new lines over the file's line limit (the nearest ruff / black / flake8 `line-length` above the file;
  installed packages carry no configuration: then 88, or the file's longest line when it is longer, since a
  project that writes 120-column lines is not asked to wrap at 88);
- device-idiom repeats in one function or module, and in one statement;
- `if torch.accelerator.is_available():` guards (or `... if ... else ...`) added where an accelerator is
  already certain (an independent AST analysis, not the codemod's);
- identical adjacent statements the fix created; edits of `pin_memory` / `torch.backends.cudnn` lines;
- new `ruff check` findings (rules E4,E7,E9,F,I) and files that `ruff format --check` accepted before only;
- files the fix left unparseable, and crashes (a crashing run is bisected down to its files).

Everything but the first two rows should be 0. `--json` writes the numbers with up to N examples per metric
(file:line and the line); `--compare` puts an earlier record's numbers beside this run's (before → after).
The tests in tests/benchmarks/ feed hand-written pairs with a known count of each defect.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import sys
from pathlib import Path

try:  # imported as benchmarks.fix_quality (the tests)
    from .fixq.bench import bench_tree, resolve
    from .fixq.linelimit import DEFAULT_LINE_LENGTH
    from .fixq.render import examples_text, record, table
except ImportError:  # run as a script: benchmarks/ is sys.path[0]
    from fixq.bench import bench_tree, resolve
    from fixq.linelimit import DEFAULT_LINE_LENGTH
    from fixq.render import examples_text, record, table

DEFAULT_PACKAGES = ("transformers", "torch", "accelerate")


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--packages",
        nargs="+",
        metavar="NAME_OR_PATH",
        help="installed packages or folders (default: those of transformers, torch "
        "and accelerate that are installed)",
    )
    parser.add_argument("--unsafe-fixes", action="store_true", help="also apply the fixes that need review")
    parser.add_argument(
        "--examples", type=int, default=3, metavar="N", help="examples per metric (default 3)"
    )
    parser.add_argument("--json", type=Path, metavar="FILE", help="write the record with examples here")
    parser.add_argument("--compare", type=Path, metavar="OLD", help="an earlier --json record: show old→new")
    parser.add_argument(
        "--line-length",
        type=int,
        default=DEFAULT_LINE_LENGTH,
        metavar="N",
        help=f"limit where no configuration sets one (default {DEFAULT_LINE_LENGTH})",
    )
    parser.add_argument("--timeout", type=float, default=3600.0, help="seconds per fix invocation")
    return parser.parse_args(argv)


def default_packages() -> list[str]:
    return [name for name in DEFAULT_PACKAGES if importlib.util.find_spec(name) is not None]


def main(argv: list[str] | None = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    if args.compare and not args.compare.is_file():
        raise SystemExit(f"fix_quality.py: error: {args.compare}: no such record; pass a file --json wrote")
    baseline = json.loads(args.compare.read_text()) if args.compare else None
    targets = [resolve(spec) for spec in (args.packages or default_packages())]
    results = []
    for target in targets:
        print(f"fixing a copy of {target.name} ({target.folder}) ...", file=sys.stderr, flush=True)
        result = bench_tree(target, args.unsafe_fixes, args.examples, args.line_length, args.timeout)
        print(
            f"  {result.files} files, fix took {result.run.wall:.0f} s "
            f"(load {result.load[0]:.2f} → {result.load[1]:.2f})",
            file=sys.stderr,
            flush=True,
        )
        results.append(result)
    data = record(results, args.unsafe_fixes, args.examples, ["fix_quality.py", *(argv or sys.argv[1:])])
    if args.json:
        args.json.write_text(json.dumps(data, indent=2) + "\n")
    tier = "safe and unsafe fixes" if args.unsafe_fixes else "safe fixes only"
    print(f"neuron-migrate {data['run']['neuron_migrate']}, torch {data['run']['torch']}, {tier}\n")
    print(table(data, baseline))
    print(examples_text(data))
    return 0


if __name__ == "__main__":
    sys.exit(main())
