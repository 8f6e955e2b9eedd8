"""The parent side of a fleet run: pick the architectures, reuse cached results, run the rest through the fork
server, and return one raw record per architecture (verdicts and rankings are `fleet.matrix`'s job).

The parent never imports torch or transformers: versions come from package metadata, the architecture list
from the cache or the server. One architecture's failure never stops the run; a crash of the server itself
turns every architecture it had not finished into a `crash` record.
"""

from __future__ import annotations

import hashlib
import json
import os
import queue
import signal
import subprocess
import sys
import tempfile
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import lru_cache
from importlib import metadata
from pathlib import Path
from typing import Any

from neuron_migrate import __version__
from neuron_migrate.errors import TargetError, UsageError
from neuron_migrate.fleet.cache import FleetCache, entry_key
from neuron_migrate.fleet.enumerate import Architecture, check_task, select

_STARTUP_TIMEOUT = 600.0  # importing torch + transformers on a badly loaded machine


BACKENDS = ("local", "ray")


@dataclass(frozen=True)
class FleetOptions:
    """What to trace and how. `max_memory_mb` bounds each child's resident memory (None: unbounded); `shard`
    (I, N) traces the I-th of N slices of the selection; `backend` ray fans the work out on a Ray cluster."""

    task: str = "causal-lm"
    models: tuple[str, ...] = ()
    mode: str = "train"  # train, inference, or both
    jobs: int = 2
    timeout: float = 180.0
    max_memory_mb: int | None = 4096
    device: str = "neuron"
    opdb: str | None = None
    cache_dir: Path | None = Path(".neuron-migrate-cache")
    refresh: bool = False
    list_only: bool = False  # enumerate, trace nothing
    shard: tuple[int, int] | None = None
    backend: str = "local"
    ray_address: str | None = None

    @property
    def modes(self) -> tuple[str, ...]:
        return ("train", "inference") if self.mode == "both" else (self.mode,)

    @property
    def inference(self) -> bool:
        return self.mode == "inference"

    def check(self) -> None:
        """Reject values that cannot work, with the fix."""
        check_task(self.task)
        if self.mode not in ("train", "inference", "both"):
            raise UsageError(f"--mode {self.mode}: use train, inference or both")
        if self.jobs < 1:
            raise UsageError(f"--jobs {self.jobs}: give 1 or more")
        if self.timeout <= 0:
            raise UsageError(f"--timeout {self.timeout:g}: give a positive number of seconds")
        if self.max_memory_mb is not None and self.max_memory_mb < 256:
            raise UsageError(f"--max-memory {self.max_memory_mb}: give at least 256 (MB)")
        if self.device not in ("neuron", "stand-in"):
            raise UsageError(f"--device {self.device}: use neuron or stand-in")
        if self.backend not in BACKENDS:
            raise UsageError(f"--backend {self.backend}: use {' or '.join(BACKENDS)}")


def parse_shard(text: str | None) -> tuple[int, int] | None:
    """`2/4` -> (2, 4): the second of four slices; a bad spelling is a one-line UsageError."""
    if not text:
        return None
    index, sep, count = text.partition("/")
    if not (sep and index.strip().isdigit() and count.strip().isdigit()) or not 1 <= int(index) <= int(count):
        raise UsageError(f"--shard {text}: write I/N with 1 <= I <= N, e.g. --shard 1/4")
    return int(index), int(count)


def shard_slice(archs: list[Architecture], shard: tuple[int, int] | None) -> list[Architecture]:
    """Every N-th architecture from the I-th: slices of similar size and mix (neighbours in name order are
    often one family), stable for the same selection."""
    if shard is None:
        return archs
    index, count = shard
    return archs[index - 1::count]


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


class Server:
    """The fork server process and its event stream (read on a thread so waits can time out)."""

    def __init__(self) -> None:
        package_parent = str(Path(__file__).resolve().parents[2])
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(filter(None, (package_parent, env.get("PYTHONPATH"))))
        env.setdefault("TOKENIZERS_PARALLELISM", "false")
        env.setdefault("TRANSFORMERS_VERBOSITY", "error")
        env.setdefault("HF_HUB_OFFLINE", "1")  # a tiny config never needs the hub; never wait on a network
        self.log = tempfile.TemporaryFile()  # noqa: SIM115 - lives as long as the server
        self.proc = subprocess.Popen([sys.executable, "-m", "neuron_migrate.fleet.server"], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=self.log, env=env, text=True)
        self.events: queue.Queue = queue.Queue()
        self.ready: dict[str, Any] | None = None
        threading.Thread(target=self._pump, daemon=True).start()

    def _pump(self) -> None:
        for line in self.proc.stdout:  # type: ignore[union-attr]
            if line.strip():
                self.events.put(json.loads(line))
        self.events.put(None)

    def next_event(self, timeout: float) -> dict[str, Any] | None:
        """The next event, or None when the server ended; a server silent for `timeout` is killed."""
        try:
            return self.events.get(timeout=timeout)
        except queue.Empty:
            self.close()
            raise TargetError(f"the fleet server sent nothing for {timeout:g} s; it was stopped") from None

    def send(self, request: dict[str, Any]) -> None:
        self.proc.stdin.write(json.dumps(request) + "\n")  # type: ignore[union-attr]
        self.proc.stdin.flush()  # type: ignore[union-attr]

    def stderr_tail(self) -> str:
        self.log.seek(0)
        lines = [ln.strip() for ln in self.log.read().decode(errors="replace").splitlines() if ln.strip()]
        return " | ".join(lines[-3:])

    def close(self) -> None:
        """Stop the server (it takes its running children down) and wait for it."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()


def _ready(server: Server) -> dict[str, Any]:
    """Wait (once) for the server's `ready` event: versions and task mappings."""
    if server.ready is not None:
        return server.ready
    event = server.next_event(_STARTUP_TIMEOUT)
    if event is None or event.get("event") != "ready":
        message = event.get("message") if event else f"the fleet server exited: {server.stderr_tail()}"
        server.close()
        raise TargetError(message)
    server.ready = event
    return event


def _failure_record(job: dict[str, Any], event: dict[str, Any], options: FleetOptions) -> dict[str, Any]:
    """A record for a child that produced none: timed out, hit the memory bound, or died."""
    outcome = event["outcome"]
    tail = event.get("tail") or []
    if outcome == "timeout":
        cls, line = "Timeout", f"no result after {options.timeout:g} s (raise --timeout)"
    elif outcome == "memory":
        cls, line = "MemoryLimit", f"resident memory passed {options.max_memory_mb} MB (raise --max-memory)"
    else:
        code = event.get("exit_code", 0)
        cls = f"Crash({signal.Signals(-code).name})" if code < 0 else f"Crash(exit {code})"
        line = tail[-1] if tail else "no output"
    return {"key": job["key"], "model_type": job["model_type"], "task": job["task"],
            "architecture": job["architecture"], "stage": event.get("stage", "start"), "error": f"{cls}: {line}",
            "error_class": cls, "error_line": line[:300], "error_where": "", "trace": None,
            "cpu_error": None, "cpu_checked": False, "seconds": event.get("seconds"),
            "max_memory_mb": options.max_memory_mb}


def run_fleet(options: FleetOptions, on_record: Callable[[dict[str, Any]], None] | None = None,
              on_plan: Callable[[list[Architecture]], None] | None = None) -> FleetRun:
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
            mappings = _ready(server)["mappings"]
            cache.put_mappings(listed, mappings)
        everything = select(mappings, options.task, options.models)
        archs = shard_slice(everything, options.shard)
        run = FleetRun(versions, snapshot.version, bool(snapshot.pre_release), archs,
                       selection=tuple(a.model_type for a in everything),
                       shard=f"{options.shard[0]}/{options.shard[1]}" if options.shard else None,
                       ran_on="torch-neuronx" if options.device == "neuron" and versions["torch-neuronx"] else
                       "stand-in")
        if options.list_only:
            return run
        if on_plan:
            on_plan(archs)
        jobs = []
        for arch in archs:
            for mode in options.modes:
                key = entry_key({"model_type": arch.model_type, "task": arch.task, "mode": mode,
                                 "device": options.device, "config": hf_config_kwargs(arch.model_type, {}),
                                 "opdb": [snapshot.version, digest], **versions})
                cached = None if options.refresh else cache.get(key)
                if cached and cached.get("outcome") == "memory" and \
                        cached.get("max_memory_mb") != options.max_memory_mb:
                    cached = None  # killed under another bound: try again under this one
                if cached is not None:
                    run.records[(arch.model_type, mode)] = {**cached, "cached": True}
                    run.from_cache += 1
                    if on_record:
                        on_record(run.records[(arch.model_type, mode)])
                    continue
                jobs.append({"key": key, "model_type": arch.model_type, "task": arch.task, "mode": mode,
                             "inference": mode == "inference", "architecture": arch.architecture, "hf_config": {}})
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


def trace_jobs(jobs: list[dict[str, Any]], options: FleetOptions,
               finish: Callable[[dict[str, Any], dict[str, Any]], None], server: Server | None = None) -> None:
    """Trace `jobs` through one fork server on this machine (`server`, or a new one; closed at the end);
    `finish(job, record)` as each child ends. A crash of the server itself turns every job it had not
    finished into a `crash` record."""
    server = server or Server()
    try:
        _ready(server)
        _run_jobs(server, jobs, options, finish)
    finally:
        server.close()


def _run_jobs(server: Server, jobs: list[dict[str, Any]], options: FleetOptions,
              finish: Callable[[dict[str, Any], dict[str, Any]], None]) -> None:
    """Hand the jobs to the server and collect a record per job as each child ends."""
    by_key = {job["key"]: job for job in jobs}
    with tempfile.TemporaryDirectory(prefix="neuron-migrate-fleet-") as job_dir:
        server.send({"jobs": jobs, "parallel": options.jobs, "timeout": options.timeout,
                     "max_memory_mb": options.max_memory_mb, "job_dir": job_dir,
                     "options": {"device": options.device, "inference": options.inference, "opdb": options.opdb,
                                 "root": str(Path.cwd()), "top_sites": 3, "max_memory_mb": None}})
        # The server enforces each child's timeout; this bound only catches a server that hangs itself.
        silence = options.timeout * 2 + 60
        while by_key:
            event = server.next_event(silence)
            if event is None:
                break
            job = by_key.pop(event["key"], None)
            if job is None:
                continue
            finish(job, _read_record(Path(job_dir), job, event, options))
        for job in list(by_key.values()):  # the server died under these
            event = {"outcome": "crash", "exit_code": 1, "stage": "start",
                     "tail": [f"the fleet server exited: {server.stderr_tail()}"]}
            finish(job, {**_failure_record(job, event, options), "outcome": "crash"})


def _read_record(job_dir: Path, job: dict[str, Any], event: dict[str, Any], options: FleetOptions) -> dict:
    if event["outcome"] == "ok":
        try:
            record = json.loads((job_dir / f"{job['key']}.json").read_text(encoding="utf-8"))
            record["outcome"] = "ok"
            return record
        except (OSError, ValueError):
            event = {**event, "outcome": "crash"}
    return {**_failure_record(job, event, options), "outcome": event["outcome"]}
