"""Wall time of a full `fleet hf` run against one `trace --hf` process per architecture, in one run.

Per-architecture outcome counts, and the naive peer measured in the same run: one fresh interpreter per
architecture (`neuron-migrate trace --hf X`).

    .venv/bin/python benchmarks/fleet.py [--task causal-lm] [--inference] [--jobs 2] [--peer-sample 3]
                                         [--models a,b,...] [--keep DIR]

It prints the machine load (1-minute load average from /proc/loadavg, before and after): on a shared 2-core
machine the numbers mean little without it.

The fleet run is cold (an empty cache, so every architecture is traced) and goes through the real CLI, so the
time includes importing torch + transformers once in the fork server. The peer traces `--peer-sample`
architectures, one `trace --hf` process each, one after the other; its per-architecture time is multiplied by
the number of architectures divided by --jobs to estimate the peer's full run (a ratio, not a measurement of
the whole peer run, which would take far longer). A second, warm fleet run shows what the cache saves.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def cli(*args: str, cwd: Path) -> tuple[float, subprocess.CompletedProcess]:
    start = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, "-m", "neuron_migrate", *args], cwd=cwd, capture_output=True, text=True, check=False
    )
    return time.perf_counter() - start, proc


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--task", default="causal-lm")
    parser.add_argument("--inference", action="store_true")
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--models", default=None)
    parser.add_argument("--peer-sample", type=int, default=3)
    parser.add_argument("--keep", type=Path, default=None, help="write fleet.json/md/html here")
    args = parser.parse_args()

    load_before = os.getloadavg()[0]
    with tempfile.TemporaryDirectory(prefix="nm-fleet-bench-") as tmp:
        work = Path(tmp)
        pages = args.keep or work / "pages"
        pages.mkdir(parents=True, exist_ok=True)
        common = [
            "fleet",
            "hf",
            "--task",
            args.task,
            "--jobs",
            str(args.jobs),
            "--cache-dir",
            str(work / "cache"),
            "--inference" if args.inference else "--train",
        ] + (["--models", args.models] if args.models else [])
        cold, proc = cli(*common, "--output-dir", str(pages), cwd=work)
        if proc.returncode != 0:
            raise SystemExit(f"fleet failed ({proc.returncode}): {proc.stderr[-2000:]}")
        result = json.loads((pages / "fleet.json").read_text())
        warm, proc = cli(*common, "--format", "json", cwd=work)
        if proc.returncode != 0:
            raise SystemExit(f"warm fleet failed: {proc.stderr[-2000:]}")
        archs = [a for a in result["architectures"] if a["mode"] == result["modes"][0]]
        verdicts = Counter(a["verdict"] for a in archs)
        outcomes = Counter(a["outcome"] for a in archs)
        errors = Counter(a["error_class"] for a in archs if a["error_class"])
        print(
            f"fleet hf --task {args.task} ({', '.join(result['modes'])}) --jobs {args.jobs}: {len(archs)} "
            "architectures"
        )
        print(f"  cold wall time  {cold:8.1f} s  ({cold / max(1, len(archs)):.2f} s per architecture)")
        print(f"  warm (cached)   {warm:8.1f} s")
        print(
            "  verdicts        "
            + ", ".join(
                f"{v}={verdicts.get(v, 0)}"
                for v in ("native", "fallbacks", "fails_on_neuron", "stand_in_limitation", "does_not_build")
            )
        )
        print("  outcomes        " + ", ".join(f"{k}={n}" for k, n in sorted(outcomes.items())))
        print("  error classes   " + ", ".join(f"{k}={n}" for k, n in errors.most_common(8)))
        s = result["summaries"][result["modes"][0]]
        print(
            f"  shares          runs {s['runs_share']:.1%}, native {s['native_share']:.1%} of all; "
            f"runs {s['runs_share_of_buildable']:.1%}, native {s['native_share_of_buildable']:.1%} of the "
            f"{s['buildable']} that build ({s['buildable'] / max(1, s['total']):.1%} build)"
        )
        print(
            "  top ops (blocks/fails in/slows) "
            + ", ".join(
                f"{r['op']} ({r['blocks']}/{r['fails']}/{r['slows']})"
                for r in result["rankings"][result["modes"][0]][:5]
            )
        )
        sample = [a["model_type"] for a in archs if a["verdict"] in ("native", "fallbacks")][
            : args.peer_sample
        ]
        if sample:
            spent = 0.0
            for model in sample:
                seconds, proc = cli(
                    "trace",
                    "--hf",
                    model,
                    "--format",
                    "json",
                    "--output",
                    str(work / "p.json"),
                    *(["--inference"] if args.inference else []),
                    cwd=work,
                )
                spent += seconds
            per = spent / len(sample)
            peer = per * len(archs) / args.jobs
            print(
                f"  peer: one `trace --hf X` process per architecture: {per:.1f} s each over {len(sample)} "
                f"({', '.join(sample)}); estimated full run with {args.jobs} at once {peer:.0f} s; "
                f"fleet is {peer / cold:.1f}x faster"
            )
    print(
        f"  machine load    {load_before:.2f} before, {os.getloadavg()[0]:.2f} after (1-min load average, "
        f"{os.cpu_count()} cores)"
    )


if __name__ == "__main__":
    main()
