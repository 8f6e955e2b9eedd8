"""The parent side of a fleet run: pick the architectures, reuse cached results, trace the rest on this
machine (`fleet.local`) or on Ray (`fleet.ray_backend`), and return one raw record per architecture (verdicts
and rankings are `fleet.matrix`'s job).

The parent never imports torch or transformers: versions come from package metadata, the architecture list
from the cache or the server. One architecture's failure never stops the run; a crash of the server itself
turns every architecture it had not finished into a `crash` record.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import lru_cache
from importlib import metadata
from pathlib import Path
from typing import Any

from neuron_migrate import __version__
from neuron_migrate.errors import UsageError
from neuron_migrate.fleet.cache import FleetCache, entry_key
from neuron_migrate.fleet.enumerate import Architecture, select
from neuron_migrate.fleet.local import Server, trace_jobs, wait_ready
from neuron_migrate.fleet.options import FleetOptions, shard_slice


@dataclass
class FleetRun:
    """Raw outcome of a run: versions, the architectures in order, one record per (model type, mode)."""

    versions: dict[str, str | None]
    opdb_version: str
    opdb_pre_release: bool
    architectures: list[Architecture]
    records: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)
    traced: int = 0
    from_cache: int = 0
    selection: tuple[str, ...] = ()  # the whole run's model types, before sharding
    shard: str | None = None
    ran_on: str = "stand-in"  # torch-neuronx when a real device runs the steps


def _version(name: str) -> str | None:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


@lru_cache(maxsize=1)
def tracer_digest() -> str:
    """A hash of the tracer's and the fleet's source, so a changed tracer is a changed neuron-migrate version
    even between releases (as the scan cache does with its rules)."""
    package = Path(__file__).resolve().parents[1]
    digest = hashlib.sha256()
    for folder in ("opdb", "fleet"):
        for path in sorted((package / folder).rglob("*.py")):
            digest.update(path.relative_to(package).as_posix().encode())
            digest.update(path.read_bytes())
    return digest.hexdigest()[:16]


def local_versions() -> dict[str, str | None]:
    """Versions that key the cache, read from package metadata (no imports)."""
    versions = {name: _version(name) for name in ("torch", "transformers", "torch-neuronx", "diffusers")}
    for needed, extra in (("torch", "trace"), ("transformers", "hf")):
        if versions[needed] is None:
            raise UsageError(f"fleet needs {needed}: pip install 'neuron-migrate[{extra}]'")
    versions["neuron-migrate"] = f"{__version__}+{tracer_digest()}"
    return versions


def run_fleet(
    options: FleetOptions,
    on_record: Callable[[dict[str, Any]], None] | None = None,
    on_plan: Callable[[list[Architecture]], None] | None = None,
) -> FleetRun:
    """Trace every selected architecture in every mode (cached ones are reused). `on_plan` gets the
    architecture list once it is known; `on_record` is called with each raw record as it ends."""
    from neuron_migrate.opdb.db import load_snapshot, snapshot_to_dict
    from neuron_migrate.opdb.tracer.targets import hf_config_kwargs

    options.check()
    snapshot = load_snapshot(options.opdb)
    digest = entry_key({"snapshot": snapshot_to_dict(snapshot)})
    versions = local_versions()
    cache = FleetCache(options.cache_dir)
    server: Server | None = None
    try:
        listed = f"{versions['transformers']}-diffusers-{versions['diffusers']}"
        mappings = cache.get_mappings(listed)
        if mappings is None:
            server = Server()
            mappings = wait_ready(server)["mappings"]
            cache.put_mappings(listed, mappings)
        everything = select(mappings, options.task, options.models)
        archs = shard_slice(everything, options.shard)
        run = FleetRun(
            versions,
            snapshot.version,
            bool(snapshot.pre_release),
            archs,
            selection=tuple(a.model_type for a in everything),
            shard=f"{options.shard[0]}/{options.shard[1]}" if options.shard else None,
            ran_on="torch-neuronx"
            if options.device == "neuron" and versions["torch-neuronx"]
            else "stand-in",
        )
        if options.list_only:
            return run
        if on_plan:
            on_plan(archs)
        jobs = []
        for arch in archs:
            for mode in options.modes:
                key = entry_key(
                    {
                        "model_type": arch.model_type,
                        "task": arch.task,
                        "mode": mode,
                        "device": options.device,
                        "config": hf_config_kwargs(arch.model_type, {}),
                        "opdb": [snapshot.version, digest],
                        **versions,
                    }
                )
                cached = None if options.refresh else cache.get(key)
                if (
                    cached
                    and cached.get("outcome") == "memory"
                    and cached.get("max_memory_mb") != options.max_memory_mb
                ):
                    cached = None  # killed under another bound: try again under this one
                if cached is not None:
                    run.records[(arch.model_type, mode)] = {**cached, "cached": True}
                    run.from_cache += 1
                    if on_record:
                        on_record(run.records[(arch.model_type, mode)])
                    continue
                jobs.append(
                    {
                        "key": key,
                        "model_type": arch.model_type,
                        "task": arch.task,
                        "mode": mode,
                        "inference": mode == "inference",
                        "architecture": arch.architecture,
                        "hf_config": {},
                    }
                )
        if server is not None and options.backend == "ray":
            server.close()  # it only listed the architectures; Ray's workers start their own
            server = None

        def finish(job: dict[str, Any], record: dict[str, Any]) -> None:
            record.setdefault("outcome", "crash")
            record["hf_config"] = job["hf_config"]
            cache.put(job["key"], record)
            run.records[(job["model_type"], job["mode"])] = {**record, "cached": False}
            run.traced += 1
            if on_record:
                on_record(run.records[(job["model_type"], job["mode"])])

        if jobs and options.backend == "ray":
            from neuron_migrate.fleet.ray_backend import run_on_ray

            run_on_ray(jobs, options, finish)
        elif jobs:
            trace_jobs(jobs, options, finish, server)
            server = None  # trace_jobs closed it
        return run
    finally:
        if server is not None:
            server.close()
