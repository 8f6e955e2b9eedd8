"""Scan throughput against TorchFix 0.7.0 and ruff, on real third-party code, in one run.

    .venv/bin/python benchmarks/scan.py [--packages torch transformers] [--jobs N] [--skip-peers]

Scans the Python sources of the installed `torch` and `transformers` packages with neuron-migrate cold (empty
cache) and warm (second run, same cache), `torchfix --select ALL` and `ruff check --select ALL --no-cache`,
and prints files/s for each and the ratios. The peers live in their own venv (benchmarks/.peers, created on
first use: TorchFix pins an older libcst) so they never change neuron-migrate's environment.
Wall times include process start-up, as a user sees them.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
PEERS = HERE / ".peers"


def package_dir(name: str) -> Path:
    spec = importlib.util.find_spec(name)
    if spec is None or spec.origin is None:
        raise SystemExit(f"{name} is not installed in {sys.executable}; install it to benchmark on it")
    return Path(spec.origin).parent


def ensure_peers() -> Path:
    if not (PEERS / "bin" / "torchfix").exists():
        subprocess.run([sys.executable, "-m", "venv", str(PEERS)], check=True)
        subprocess.run([PEERS / "bin" / "pip", "install", "-q", "torchfix==0.7.0", "ruff"], check=True)
    return PEERS / "bin"


def timed(cmd: list, cwd: Path | None = None) -> tuple[float, subprocess.CompletedProcess]:
    start = time.perf_counter()
    proc = subprocess.run([str(c) for c in cmd], cwd=cwd, capture_output=True, text=True)
    return time.perf_counter() - start, proc


def count_files(folder: Path) -> int:
    return sum(1 for _ in folder.rglob("*.py"))


def bench_package(name: str, jobs: int, peers: Path | None) -> dict:
    folder = package_dir(name)
    files = count_files(folder)
    nm = [Path(sys.executable).parent / "neuron-migrate", "scan", folder, "--format", "json", "--exit-zero",
          "--no-gitignore", "--jobs", jobs]
    row: dict = {"package": name, "files": files}
    with tempfile.TemporaryDirectory() as cache:
        out = Path(cache) / "scan.json"
        row["cold"], proc = timed([*nm, "--cache-dir", Path(cache) / "c", "--output", out])
        if proc.returncode != 0:
            raise SystemExit(f"neuron-migrate failed on {name}: {proc.stderr[-2000:]}")
        data = json.loads(out.read_text())  # the cold run's record: the warm one serves every file from cache
        row["findings"] = len(data["findings"])
        row["nm9xx"] = sum(1 for f in data["findings"] if f["code"].startswith("NM9"))
        row["prefiltered"] = data["files_skipped_by_prefilter"]
        row["warm"], _ = timed([*nm, "--cache-dir", Path(cache) / "c", "--output", out])
        row["warm_from_cache"] = json.loads(out.read_text())["files_from_cache"]
    if peers is not None:
        row["torchfix"], proc = timed([peers / "torchfix", "--select", "ALL", folder])
        row["torchfix_rc"] = proc.returncode
        row["ruff"], _ = timed([peers / "ruff", "check", "--select", "ALL", "--no-cache", "--exit-zero", "--quiet",
                                folder])
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--packages", nargs="+", default=["torch", "transformers"])
    parser.add_argument("--jobs", type=int, default=0, help="neuron-migrate worker processes (0: one per CPU)")
    parser.add_argument("--skip-peers", action="store_true", help="only time neuron-migrate")
    args = parser.parse_args()
    peers = None if args.skip_peers else ensure_peers()
    print(f"{'package':<13}{'files':>6}{'nm cold':>10}{'nm warm':>10}{'torchfix':>10}{'ruff':>9}"
          f"{'cold/tfix':>11}{'warm/cold':>11}{'cold/ruff':>11}  (files/s; ratios = speed-ups)")
    for name in args.packages:
        row = bench_package(name, args.jobs, peers)
        rate = {k: row["files"] / row[k] for k in ("cold", "warm", "torchfix", "ruff") if k in row}
        line = (f"{name:<13}{row['files']:>6}{rate['cold']:>10.0f}{rate['warm']:>10.0f}"
                f"{rate.get('torchfix', float('nan')):>10.1f}{rate.get('ruff', float('nan')):>9.0f}"
                f"{row.get('torchfix', 0) / row['cold'] if 'torchfix' in row else float('nan'):>11.1f}"
                f"{row['cold'] / row['warm']:>11.1f}"
                f"{row.get('ruff', 0) / row['cold'] if 'ruff' in row else float('nan'):>11.2f}")
        print(line, flush=True)
        print(f"{'':<13}wall s: nm cold {row['cold']:.1f}, warm {row['warm']:.1f}"
              + (f", torchfix {row['torchfix']:.1f} (rc {row['torchfix_rc']}), ruff {row['ruff']:.1f}"
                 if "torchfix" in row else "")
              + f"; {row['findings']} findings, {row['nm9xx']} NM9xx, {row['prefiltered']} files pre-filtered (cold), "
              + f"{row['warm_from_cache']} from cache (warm)")


if __name__ == "__main__":
    main()
