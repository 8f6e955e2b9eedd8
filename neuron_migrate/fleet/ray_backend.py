"""`fleet hf --backend ray`: fan the architectures out over a Ray cluster instead of this machine's cores.

Ray schedules; nothing here does. Each Ray task takes a chunk of architectures and traces them on its node the
way a local run does (`local.trace_jobs`: one fork server that imports torch + transformers once, one isolated
child per architecture with its own timeout and memory bound), and returns the raw records. The parent caches
and reports them exactly as a local run does, so the results are the same (a test holds this).

Connects to `--ray-address` (or `RAY_ADDRESS`), or joins a Ray instance this process already started; without
either, `ray.init()` starts a local one. Every node needs neuron-migrate, torch and transformers installed.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from typing import Any

from neuron_migrate.errors import UsageError


def _ray() -> Any:
    try:
        import ray
    except ImportError:
        raise UsageError("--backend ray needs ray: pip install 'neuron-migrate[ray]'") from None
    return ray


def _trace_chunk(jobs: list[dict[str, Any]], options: dict[str, Any]) -> list[tuple[dict, dict]]:
    """Body of one Ray task: trace `jobs` on this node, return (job, record) pairs."""
    from pathlib import Path

    from neuron_migrate.fleet.local import trace_jobs
    from neuron_migrate.fleet.options import FleetOptions

    fields = {
        **options,
        "cache_dir": None if options.get("cache_dir") is None else Path(options["cache_dir"]),
    }
    done: list[tuple[dict, dict]] = []
    trace_jobs(jobs, FleetOptions(**fields), lambda job, record: done.append((job, record)))
    return done


def chunks(jobs: list[dict[str, Any]], workers: int) -> list[list[dict[str, Any]]]:
    """About two chunks per worker CPU, so a slow chunk does not hold the end of the run alone."""
    if not jobs:
        return []
    count = max(1, min(len(jobs), 2 * max(1, workers)))
    size = math.ceil(len(jobs) / count)
    return [jobs[i : i + size] for i in range(0, len(jobs), size)]


def run_on_ray(
    jobs: list[dict[str, Any]], options: Any, finish: Callable[[dict[str, Any], dict[str, Any]], None]
) -> None:
    """Trace `jobs` as Ray tasks (one CPU each, one architecture at a time inside a task); `finish(job,
    record)` per job as its task returns. A task that fails turns its jobs into `crash` records."""
    ray = _ray()
    if not ray.is_initialized():
        ray.init(address=options.ray_address, include_dashboard=False, log_to_driver=False)
    workers = int(ray.cluster_resources().get("CPU", 1))
    remote = ray.remote(num_cpus=1, max_retries=0)(_trace_chunk)
    # each task runs one child at a time: Ray, not the task, decides how many run on a node
    task_options = {
        **dataclasses.asdict(options),
        "jobs": 1,
        "backend": "local",
        "shard": None,
        "cache_dir": None,
        "models": list(options.models),
    }
    pending = {remote.remote(chunk, task_options): chunk for chunk in chunks(jobs, workers)}
    while pending:
        ready, _ = ray.wait(list(pending), num_returns=1)
        chunk = pending.pop(ready[0])
        try:
            pairs = ray.get(ready[0])
        except Exception as err:
            line = str(err).strip().splitlines()[-1][:300] if str(err).strip() else type(err).__name__
            pairs = [(job, _lost(job, line)) for job in chunk]
        for job, record in pairs:
            finish(job, record)


def _lost(job: dict[str, Any], line: str) -> dict[str, Any]:
    return {
        "key": job["key"],
        "model_type": job["model_type"],
        "task": job["task"],
        "architecture": job["architecture"],
        "stage": "start",
        "outcome": "crash",
        "error": f"RayTaskError: {line}",
        "error_class": "RayTaskError",
        "error_line": line,
        "error_where": "",
        "trace": None,
        "cpu_error": None,
        "cpu_checked": False,
    }
