"""Scan throughput against TorchFix 0.7.0 and ruff, on real third-party code, in one run.

    .venv/bin/python benchmarks/scan.py [--trees accelerate peft trl torch transformers] [--jobs N]
                                        [--repeat N] [--skip-peers] [--differential] [--phases] [--json FILE]

Trees: `accelerate`, `peft` and `trl` (small pure-Python PyTorch packages, pinned below, installed with
`pip install --no-deps --target benchmarks/.trees/small` on first use) and the installed `torch` and
`transformers` sources. Per tree: neuron-migrate cold (empty cache) and warm (second run, same cache),
`torchfix --select ALL` and `ruff check --select ALL --no-cache`, as wall time with process start-up, as a
user sees it, and the ratios (goal: TorchFix/cold >= 20, cold/ruff <= 5, cold/warm >= 10). Peak RSS of the
cold run (largest process: the parent or one worker) shows whether memory stays flat as trees grow. The peers
live in their own venv (benchmarks/.peers, made on first use: TorchFix pins an older libcst). The package is
byte-compiled first, as an install leaves it, so a run after a source edit does not time the compiler.
`--repeat N` runs every command (each tool alike) N times and keeps its best time: one run of a command on
a shared machine varies by a fifth.

`--check-pr`: on a copy of `transformers`, a warm `check` after a pull request touched 10 files (goal < 2 s).
`--differential`: the fast path against the full libcst path, file by file (`scan_differential.py`); exit 1
on any difference. `--phases`: where a cold single-process scan's seconds go, per stage.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
PEERS = HERE / ".peers"
SMALL = HERE / ".trees" / "small"
SMALL_PINS = {"accelerate": "1.15.0", "peft": "0.21.2", "trl": "1.16.0"}
NM = Path(sys.executable).parent / "neuron-migrate"


def tree(name: str) -> Path:
    if name in SMALL_PINS:
        if not (SMALL / name).is_dir():
            pins = [f"{package}=={version}" for package, version in SMALL_PINS.items()]
            subprocess.run(
                [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", SMALL, *pins],
                check=True,
            )
        return SMALL / name
    spec = importlib.util.find_spec(name)
    if spec is None or spec.origin is None:
        raise SystemExit(f"{name} is not installed in {sys.executable}; install it to benchmark on it")
    return Path(spec.origin).parent


def ensure_peers() -> Path:
    if not (PEERS / "bin" / "torchfix").exists():
        subprocess.run([sys.executable, "-m", "venv", str(PEERS)], check=True)
        subprocess.run(
            [PEERS / "bin" / "pip", "install", "-q", "torchfix==0.7.0", "ruff==0.17.6"], check=True
        )
    return PEERS / "bin"


def timed(cmd: list, cwd: Path | None = None) -> tuple[float, subprocess.CompletedProcess]:
    start = time.perf_counter()
    proc = subprocess.run([str(c) for c in cmd], cwd=cwd, capture_output=True, text=True)
    return time.perf_counter() - start, proc


#: runs argv[2:] and writes to argv[1] the largest resident set of it and its children (Linux: KiB), so a
#: peer run earlier in this process (TorchFix on torch reaches ~1 GB) does not count towards the scan's peak
_PEAK = (
    "import resource, subprocess, sys\n"
    "rc = subprocess.run(sys.argv[2:]).returncode\n"
    "open(sys.argv[1], 'w').write(str(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss))\n"
    "sys.exit(rc)\n"
)


def timed_with_peak(cmd: list, scratch: Path) -> tuple[float, subprocess.CompletedProcess, int]:
    """Like `timed`, plus the peak RSS in MiB of the command and its workers (a ~20 ms wrapper process)."""
    report = scratch / "peak_rss"
    seconds, proc = timed([sys.executable, "-c", _PEAK, report, *cmd])
    return seconds, proc, round(int(report.read_text() or 0) / 1024) if report.exists() else 0


def compile_sources() -> None:
    """Byte-compile neuron-migrate's modules, as `pip install` does: the first run after a source edit would
    otherwise pay for it (0.7 s on accelerate's cold scan, stop 37) and time the compiler, not the scan."""
    import neuron_migrate

    subprocess.run(
        [sys.executable, "-m", "compileall", "-q", Path(neuron_migrate.__file__).parent], check=True
    )


def python_files(folder: Path) -> list[Path]:
    return sorted(p for p in folder.rglob("*.py") if "__pycache__" not in p.parts)


def nm_scan(folder: Path, cache: Path, out: Path, jobs: int) -> list:
    return [
        NM,
        "scan",
        folder,
        "--format",
        "json",
        "--exit-zero",
        "--no-gitignore",
        "--jobs",
        jobs,
        "--cache-dir",
        cache,
        "--output",
        out,
    ]


def bench_tree(name: str, jobs: int, peers: Path | None, repeat: int = 1) -> dict:
    """One row: each command timed `repeat` times and its best time kept (every tool alike: this machine's
    timings of one command vary by a fifth from run to run), the peak RSS the largest of the cold runs."""
    folder = tree(name)
    files = python_files(folder)
    row: dict = {"tree": name, "files": len(files), "lines": sum(p.read_bytes().count(b"\n") for p in files)}
    cold, warm, peak = [], [], 0
    for _ in range(repeat):
        with tempfile.TemporaryDirectory() as tmp:
            cache, out = Path(tmp) / "cache", Path(tmp) / "scan.json"
            seconds, proc, rss = timed_with_peak(nm_scan(folder, cache, out, jobs), Path(tmp))
            if proc.returncode != 0:
                raise SystemExit(f"neuron-migrate failed on {name}: {proc.stderr[-2000:]}")
            cold.append(seconds)
            peak = max(peak, rss)
            data = json.loads(out.read_text())  # the cold run's record: the warm one serves all from cache
            row["findings"] = len(data["findings"])
            row["nm9xx"] = sum(1 for f in data["findings"] if f["code"].startswith("NM9"))
            row["prefiltered"] = data["files_skipped_by_prefilter"]
            warm.append(timed(nm_scan(folder, cache, out, jobs))[0])
            row["warm_from_cache"] = json.loads(out.read_text())["files_from_cache"]
    row["cold"], row["warm"], row["cold_peak_rss_mib"] = min(cold), min(warm), peak
    if peers is not None:
        runs = [timed([peers / "torchfix", "--select", "ALL", folder]) for _ in range(repeat)]
        row["torchfix"], row["torchfix_rc"] = min(t for t, _ in runs), runs[-1][1].returncode
        ruff = [peers / "ruff", "check", "--select", "ALL", "--no-cache", "--exit-zero", "--quiet", folder]
        row["ruff"] = min(timed(ruff)[0] for _ in range(repeat))
    return row


def print_row(row: dict) -> None:
    def ratio(a: str, b: str) -> str:
        if (
            b == "warm" and row["warm_from_cache"] == 0
        ):  # the cache missed: the rule sources changed between runs
            return f"{'no cache':>10}"
        return f"{row[a] / row[b]:>10.1f}" if a in row and b in row else f"{'-':>10}"

    peers = f"{row['torchfix']:>9.1f}{row['ruff']:>7.2f}" if "torchfix" in row else f"{'-':>9}{'-':>7}"
    print(
        f"{row['tree']:<13}{row['files']:>6}{row['lines'] / 1000:>8.0f}k"
        f"{row['cold']:>8.1f}{row['warm']:>7.2f}"
        f"{peers}{ratio('torchfix', 'cold')}{ratio('cold', 'ruff')}{ratio('cold', 'warm')}"
        f"{row['cold_peak_rss_mib']:>8}",
        flush=True,
    )
    print(
        f"{'':<13}{row['findings']} findings, {row['nm9xx']} NM9xx, {row['prefiltered']} files skipped by "
        f"the byte filter, {row['warm_from_cache']} from cache (warm)"
        + (f", torchfix rc {row['torchfix_rc']}" if "torchfix" in row else ""),
        flush=True,
    )


def check_pr(jobs: int) -> dict:
    """Warm `check` of a copy of transformers after 10 files changed (a line appended to each)."""
    with tempfile.TemporaryDirectory() as tmp:
        repo = Path(tmp) / "transformers"
        shutil.copytree(tree("transformers"), repo, ignore=shutil.ignore_patterns("__pycache__"))
        # the main branch's scan fills the cache (`check` uses the default one, in the working folder)
        timed(
            [NM, "scan", repo, "--format", "json", "--exit-zero", "--jobs", jobs, "--output", "scan.json"],
            cwd=tmp,
        )
        for path in python_files(repo)[::200][:10]:
            path.write_text(path.read_text() + "\nx_added_by_the_pull_request = 1\n")
        seconds, proc = timed([NM, "check", repo, "--fail-on-findings", "none"], cwd=tmp)
        return {"check_pr_s": seconds, "check_rc": proc.returncode, "stderr": proc.stderr[-500:]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trees", nargs="+", default=[*SMALL_PINS, "torch", "transformers"])
    parser.add_argument(
        "--jobs", type=int, default=0, help="neuron-migrate worker processes (0: one per CPU)"
    )
    parser.add_argument("--skip-peers", action="store_true", help="only time neuron-migrate")
    parser.add_argument(
        "--repeat", type=int, default=1, help="run every command this many times and keep its best time"
    )
    parser.add_argument("--check-pr", action="store_true", help="time a warm check after a 10-file change")
    parser.add_argument("--differential", action="store_true", help="fast path vs full path, file by file")
    parser.add_argument("--phases", action="store_true", help="where a cold one-process scan's time goes")
    parser.add_argument("--json", type=Path, help="write the rows here")
    args = parser.parse_args()
    if args.differential:
        from scan_differential import compare

        files, differ, fast_s, full_s = compare([tree(name) for name in args.trees])
        print(
            f"differential: {files} files compared, {differ} differ (analysis CPU s: fast {fast_s:.1f}, "
            f"full {full_s:.1f})"
        )
        sys.exit(1 if differ else 0)
    if args.phases:
        from scan_phases import report

        for name in args.trees:
            report(name, tree(name))
        return
    peers = None if args.skip_peers else ensure_peers()
    compile_sources()
    print(
        f"{'tree':<13}{'files':>6}{'lines':>9}{'cold s':>8}{'warm s':>7}{'tfix s':>9}{'ruff s':>7}"
        f"{'tfix/cold':>10}{'cold/ruff':>10}{'cold/warm':>10}{'RSS MiB':>8}"
    )
    rows = []
    for name in args.trees:
        rows.append(bench_tree(name, args.jobs, peers, args.repeat))
        print_row(rows[-1])
    if args.check_pr:
        rows.append(check_pr(args.jobs))
        print(
            f"check after a 10-file change of transformers, warm cache: {rows[-1]['check_pr_s']:.2f} s "
            f"(rc {rows[-1]['check_rc']})"
        )
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2) + "\n")


if __name__ == "__main__":
    main()
