"""The fleet fork server: `python -m neuron_migrate.fleet.server` (started by `fleet.runner`, never by hand).

Importing torch and transformers costs 8-13 s per interpreter, far more than tracing a tiny model, so this
process imports them once and forks one child per architecture. The `neuron` device is registered only inside
each child, after the fork (registration is permanent for a process), so every architecture still runs in a
fresh, isolated process with its own timeout and memory bound.

Protocol (JSON lines): the server writes {"event": "ready", versions, mappings} on stdout once preloaded,
reads one line {"jobs": [...], "parallel", "timeout", "max_memory_mb", "options", "job_dir"} from stdin, then
writes {"event": "done", "key", "outcome", ...} per job as each child ends, and exits. Anything the libraries
print goes to stderr, never into the protocol stream.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sys
import time
from collections import deque
from pathlib import Path
from typing import Any, TextIO

_PAGE = os.sysconf("SC_PAGE_SIZE")
_POLL = 0.05  # seconds between checks of the running children


def preload() -> dict[str, Any]:
    """Import what every child needs, so each fork starts warm; returns versions and the task mappings."""
    import torch
    import transformers
    import transformers.modeling_utils

    from neuron_migrate.fleet.enumerate import TASKS, read_mappings
    from neuron_migrate.opdb import hf_inputs, hf_tiny  # noqa: F401
    from neuron_migrate.opdb.tracer import child, device, recorder, targets  # noqa: F401

    for _, auto_class in TASKS.values():
        getattr(transformers, auto_class)  # resolve transformers' lazy attributes before forking
    with contextlib.suppress(ImportError):
        import transformers.loss.loss_utils
    with contextlib.suppress(ImportError):
        import diffusers  # noqa: F401 - optional: `fleet diffusers` forks from here too
    return {"torch": torch.__version__, "transformers": transformers.__version__, "mappings": read_mappings()}


def _rss_mb(pid: int) -> float:
    try:
        with open(f"/proc/{pid}/statm", encoding="ascii") as statm:
            return int(statm.read().split()[1]) * _PAGE / 2**20
    except (OSError, IndexError, ValueError):
        return 0.0


def _kill(pid: int) -> None:
    # Children call setsid first thing; before that the group does not exist yet, so fall back to the pid.
    for kill, target in ((os.killpg, pid), (os.kill, pid)):
        try:
            kill(target, signal.SIGKILL)
            return
        except (ProcessLookupError, PermissionError):
            continue


def _tail(path: Path, lines: int = 3) -> list[str]:
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return []
    return [line.strip() for line in text.splitlines() if line.strip()][-lines:]


class Pool:
    """At most `parallel` forked children, each killed past its timeout or memory bound."""

    def __init__(self, request: dict[str, Any], snapshot: Any, out: TextIO) -> None:
        self.request = request
        self.snapshot = snapshot
        self.out = out
        self.job_dir = Path(request["job_dir"])
        self.running: dict[int, dict[str, Any]] = {}

    def emit(self, event: dict[str, Any]) -> None:
        self.out.write(json.dumps(event) + "\n")
        self.out.flush()

    def start(self, job: dict[str, Any]) -> None:
        pid = os.fork()
        if pid == 0:
            from neuron_migrate.fleet.worker import child_main

            child_main(job, self.request["options"], self.snapshot, self.job_dir)  # never returns
        self.running[pid] = {"job": job, "started": time.monotonic(), "killed": None}

    def police(self) -> None:
        """Kill children past their deadline or memory bound; they are reaped (and reported) by `reap`."""
        now, limit = time.monotonic(), self.request.get("max_memory_mb")
        for pid, run in self.running.items():
            if run["killed"]:
                continue
            if now - run["started"] > self.request["timeout"]:
                run["killed"] = "timeout"
            elif limit and _rss_mb(pid) > limit:
                run["killed"] = "memory"
            if run["killed"]:
                _kill(pid)

    def reap(self) -> bool:
        """Report every child that ended; False when none did."""
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return False
        if pid == 0 or pid not in self.running:
            return False
        run = self.running.pop(pid)
        key = run["job"]["key"]
        stage = self.job_dir / f"{key}.stage"
        code = os.waitstatus_to_exitcode(status)
        if run["killed"]:
            outcome = run["killed"]
        elif code == 0 and (self.job_dir / f"{key}.json").is_file():
            outcome = "ok"
        else:
            outcome = "crash"
        self.emit(
            {
                "event": "done",
                "key": key,
                "outcome": outcome,
                "exit_code": code,
                "seconds": round(time.monotonic() - run["started"], 3),
                "stage": stage.read_text(encoding="utf-8") if stage.is_file() else "start",
                "tail": _tail(self.job_dir / f"{key}.log"),
            }
        )
        return True

    def run(self, jobs: list[dict[str, Any]]) -> None:
        pending = deque(jobs)
        while pending or self.running:
            while pending and len(self.running) < max(1, self.request["parallel"]):
                self.start(pending.popleft())
            self.police()
            if not self.reap():
                time.sleep(_POLL)

    def stop(self, *_: Any) -> None:
        """SIGTERM from the parent: take every running child down with us."""
        for pid in list(self.running):
            _kill(pid)
        os._exit(143)


def main() -> int:
    """Preload, announce, take the job list from stdin, run it, report each job on stdout."""
    out = os.fdopen(os.dup(1), "w", encoding="utf-8")
    os.dup2(2, 1)  # library prints (warnings, banners) must not corrupt the protocol stream
    try:
        ready = preload()
    except ImportError as err:
        out.write(
            json.dumps(
                {
                    "event": "error",
                    "message": f"cannot import {err.name or err}: install the "
                    "fleet's needs with pip install 'neuron-migrate[trace,hf]'",
                }
            )
            + "\n"
        )
        out.flush()
        return 1
    out.write(json.dumps({"event": "ready", **ready}) + "\n")
    out.flush()
    line = sys.stdin.readline()
    if not line.strip():
        return 0
    request = json.loads(line)
    from neuron_migrate.opdb.db import load_snapshot

    snapshot = load_snapshot(request["options"].get("opdb"))
    pool = Pool(request, snapshot, out)
    signal.signal(signal.SIGTERM, pool.stop)
    pool.run(request["jobs"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
