"""Tracing on this machine: the fork server (one process that imports torch + transformers once) and one
isolated child per architecture with its own timeout and memory bound. Used by a local run and by each Ray
task.

A crash of the server itself turns every job it had not finished into a `crash` record.
"""

from __future__ import annotations

import json
import os
import queue
import signal
import subprocess
import sys
import tempfile
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from neuron_migrate.errors import TargetError
from neuron_migrate.fleet.options import FleetOptions

_STARTUP_TIMEOUT = 600.0  # importing torch + transformers on a badly loaded machine


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
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "neuron_migrate.fleet.server"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self.log,
            env=env,
            text=True,
        )
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


def wait_ready(server: Server) -> dict[str, Any]:
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
    return {
        "key": job["key"],
        "model_type": job["model_type"],
        "task": job["task"],
        "architecture": job["architecture"],
        "stage": event.get("stage", "start"),
        "error": f"{cls}: {line}",
        "error_class": cls,
        "error_line": line[:300],
        "error_where": "",
        "trace": None,
        "cpu_error": None,
        "cpu_checked": False,
        "seconds": event.get("seconds"),
        "max_memory_mb": options.max_memory_mb,
    }


def trace_jobs(
    jobs: list[dict[str, Any]],
    options: FleetOptions,
    finish: Callable[[dict[str, Any], dict[str, Any]], None],
    server: Server | None = None,
) -> None:
    """Trace `jobs` through one fork server on this machine (`server`, or a new one; closed at the end);
    `finish(job, record)` as each child ends. A crash of the server itself turns every job it had not
    finished into a `crash` record."""
    server = server or Server()
    try:
        wait_ready(server)
        _run_jobs(server, jobs, options, finish)
    finally:
        server.close()


def _run_jobs(
    server: Server,
    jobs: list[dict[str, Any]],
    options: FleetOptions,
    finish: Callable[[dict[str, Any], dict[str, Any]], None],
) -> None:
    """Hand the jobs to the server and collect a record per job as each child ends."""
    by_key = {job["key"]: job for job in jobs}
    with tempfile.TemporaryDirectory(prefix="neuron-migrate-fleet-") as job_dir:
        server.send(
            {
                "jobs": jobs,
                "parallel": options.jobs,
                "timeout": options.timeout,
                "max_memory_mb": options.max_memory_mb,
                "job_dir": job_dir,
                "options": {
                    "device": options.device,
                    "inference": options.inference,
                    "opdb": options.opdb,
                    "root": str(Path.cwd()),
                    "top_sites": 3,
                    "max_memory_mb": None,
                },
            }
        )
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
            event = {
                "outcome": "crash",
                "exit_code": 1,
                "stage": "start",
                "tail": [f"the fleet server exited: {server.stderr_tail()}"],
            }
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
