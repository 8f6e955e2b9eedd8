"""The differential harness: run snippets in child interpreters and compare what they did.

`same_behaviour(original, rewritten)` runs both under the CUDA emulation and returns a `Verdict` naming the
first difference in device calls or results. `run_jobs` / `run_everywhere` run many snippets in one child per
environment (`cuda`, `cpu`, `neuron`; see `child.py`), which is what the tests use: torch is imported three
times per session, not once per snippet.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from tests.differential.compare import difference
from tests.differential.execution import Outcome

ROOT = Path(__file__).resolve().parents[2]
ENVIRONMENTS = ("cuda", "cpu", "neuron")
CHILD_ENV = {"OMP_NUM_THREADS": "1", "TORCH_DEVICE_BACKEND_AUTOLOAD": "0", "PYTHONPATH": str(ROOT)}


@dataclass(frozen=True)
class Job:
    """One snippet to run: its source, and whether it is a fragment that needs stand-ins."""

    source: str
    fragment: bool = False


@dataclass(frozen=True)
class Verdict:
    """The answer of `same_behaviour`."""

    difference: str | None
    original: Outcome
    rewritten: Outcome

    @property
    def same(self) -> bool:
        return self.difference is None


def run_jobs(env: str, jobs: dict[str, Job], timeout: float = 600) -> dict[str, Outcome]:
    """Run each job once in `env`, one child interpreter for all of them; outcomes by job id."""
    payload = json.dumps(
        [{"id": key, "source": job.source, "fragment": job.fragment} for key, job in jobs.items()]
    )
    with tempfile.TemporaryDirectory(prefix="nm-diff-") as scratch:
        results = Path(scratch) / "results.json"
        proc = subprocess.run(
            [sys.executable, "-m", "tests.differential.child", env, str(results)],
            input=payload,
            capture_output=True,
            text=True,
            cwd=ROOT,
            timeout=timeout,
            env={**os.environ, **CHILD_ENV},
            check=False,
        )
        if proc.returncode != 0 or not results.exists():
            raise RuntimeError(f"the {env} child failed (exit {proc.returncode}):\n{proc.stderr[-3000:]}")
        data = json.loads(results.read_text())
    return {key: Outcome.from_json(value) for key, value in data.items()}


def run_everywhere(jobs_by_env: dict[str, dict[str, Job]]) -> dict[str, dict[str, Outcome]]:
    """`run_jobs` for several environments at once."""
    with ThreadPoolExecutor(max_workers=len(jobs_by_env) or 1) as pool:
        futures = {env: pool.submit(run_jobs, env, jobs) for env, jobs in jobs_by_env.items() if jobs}
        return {env: futures[env].result() if env in futures else {} for env in jobs_by_env}


def same_behaviour(original: str, rewritten: str, fragment: bool = False) -> Verdict:
    """Run both programs under the CUDA emulation, each in a fresh process and namespace, and compare."""
    runs = run_jobs("cuda", {"original": Job(original, fragment), "rewritten": Job(rewritten, fragment)})
    return Verdict(difference(runs["original"], runs["rewritten"]), runs["original"], runs["rewritten"])
