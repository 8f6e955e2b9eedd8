"""Run a trace in a child process and bring back its TraceResult.

The child (`neuron_migrate.opdb.tracer.child`) registers the device, runs the target and writes JSON to a temp
file. The parent never imports torch: it bounds the child's time (`timeout`, then the whole process group is
killed) and memory (`max_memory_mb`, RLIMIT_AS set in the child), and turns a crash, an out-of-memory or a
timeout into one `TraceFailed` line that quotes the child's last stderr lines and carries the error kind.
Before the first trace with the stand-in it builds the C++ extension in a child of its own
(`ensure_extension`), so the one-time compile is never part of a trace's time budget.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

from neuron_migrate.errors import TargetError
from neuron_migrate.model import TraceResult, from_json
from neuron_migrate.opdb.tracer.options import DEVICES, TraceOptions, TraceRequest
from neuron_migrate.opdb.tracer.targets import TargetSpec

__all__ = ["DEVICES", "TraceFailed", "TraceOptions", "ensure_extension", "run_trace", "run_traces"]
_OOM_WORDS = ("MemoryError", "bad_alloc", "Cannot allocate memory", "out of memory")
BUILD_TIMEOUT = 1800.0  # a first build on a loaded 2-core machine takes a few minutes


class TraceFailed(TargetError):
    """A trace that did not finish; `kind` is its error kind (see `verdicts.ERROR_KINDS`)."""

    def __init__(self, message: str, kind: str = "target") -> None:
        super().__init__(message)
        self.kind = kind


def run_trace(spec: TargetSpec, options: TraceOptions) -> TraceResult:
    """Trace one target; a failure of the target is a TraceFailed (a TargetError)."""
    (result,) = run_traces([spec], options)
    if result.error:
        raise TraceFailed(result.error, result.error_kind or "target")
    return result


def ensure_extension(options: TraceOptions) -> str | None:
    """Build the C++ stand-in once, outside any trace's timeout; None when it is ready (or the pure-Python
    stand-in will be used by choice), else the reason the build failed (the trace then says which ran)."""
    import importlib.util

    if options.fake or os.environ.get("NEURON_MIGRATE_STANDIN") == "python":
        return None
    if options.device == "neuron" and importlib.util.find_spec("torch_neuronx") is not None:
        return None  # the real device will run it
    from neuron_migrate.opdb.tracer import extension

    if extension.is_built() or extension.missing_tools():
        return None
    proc = subprocess.run(
        [sys.executable, "-m", "neuron_migrate.opdb.tracer.extension"],
        env=_child_env(options),
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=BUILD_TIMEOUT,
        check=False,
    )
    return None if proc.returncode == 0 else (proc.stderr.strip().splitlines() or ["build failed"])[-1]


def run_traces(specs: list[TargetSpec], options: TraceOptions) -> list[TraceResult]:
    """Trace several targets in ONE child (imports paid once); a failed target comes back with `error` set.

    A crash, timeout or out-of-memory of the child itself raises TraceFailed for the whole batch.
    """
    options.check()
    from neuron_migrate.opdb.db import load_snapshot

    load_snapshot(options.opdb)  # a bad --opdb is the user's mistake: say so before spawning anything
    ensure_extension(options)
    label = ", ".join(s.label for s in specs)
    with tempfile.TemporaryDirectory(prefix="neuron-migrate-trace-") as tmp:
        request, result, log = Path(tmp, "request.json"), Path(tmp, "result.json"), Path(tmp, "child.log")
        resolved = dataclasses.replace(options, root=str(Path(options.root).resolve()))
        request.write_text(TraceRequest(tuple(specs), resolved, str(result)).to_json(), encoding="utf-8")
        code = _run_child(request, log, options, label)
        if code != 0 or not result.is_file():
            raise TraceFailed(*_crash_message(label, code, log, options))
        items = json.loads(result.read_text(encoding="utf-8"))
        if len(items) == 1 and "schema" not in items[0]:
            raise TraceFailed(items[0]["error"], items[0].get("error_kind") or "target")
        for spec, item in zip(specs, items, strict=False):
            if item.get("error") and spec.kind == "script":  # the script's own last words explain its failure
                item["error"] += _tail(log)
    return [from_json(json.dumps(item), TraceResult, "trace child result") for item in items]


def _child_env(options: TraceOptions) -> dict[str, str]:
    env = dict(os.environ)
    package_parent = str(
        Path(__file__).resolve().parents[3]
    )  # works from a source checkout, not only installed
    env["PYTHONPATH"] = os.pathsep.join(filter(None, (package_parent, env.get("PYTHONPATH"))))
    if options.device == "stand-in":
        env["TORCH_DEVICE_BACKEND_AUTOLOAD"] = (
            "0"  # keep an installed torch-neuronx from claiming PrivateUse1
        )
    env.setdefault("PYTHONUNBUFFERED", "1")
    env.setdefault("TOKENIZERS_PARALLELISM", "false")
    return env


def _run_child(request: Path, log: Path, options: TraceOptions, label: str) -> int:
    """Start the child in its own session, wait up to the timeout, kill its whole group if it overruns."""
    command = [sys.executable, "-m", "neuron_migrate.opdb.tracer.child", str(request)]
    with log.open("wb") as out:
        proc = subprocess.Popen(
            command,
            cwd=options.root,
            env=_child_env(options),
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        try:
            return proc.wait(timeout=options.timeout)
        except (subprocess.TimeoutExpired, KeyboardInterrupt) as err:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            if isinstance(err, KeyboardInterrupt):
                raise
            raise TraceFailed(
                f"{label}: timed out after {options.timeout:g} s (raise --timeout, or trace a "
                f"smaller config / --fake){_tail(log)}",
                "timeout",
            ) from None


def _tail(log: Path, lines: int = 3) -> str:
    try:
        text = log.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ""
    kept = [line.strip() for line in text.splitlines() if line.strip()][-lines:]
    return f"; last output: {' | '.join(kept)}" if kept else ""


def _crash_message(label: str, code: int, log: Path, options: TraceOptions) -> tuple[str, str]:
    tail = _tail(log)
    oom = any(word in tail for word in _OOM_WORDS)
    how = f"was killed by signal {signal.Signals(-code).name}" if code < 0 else f"exited with status {code}"
    if oom or (options.max_memory_mb and code in (-signal.SIGKILL, -signal.SIGSEGV, -signal.SIGABRT)):
        limit = f" (limit --max-memory {options.max_memory_mb} MB)" if options.max_memory_mb else ""
        return f"{label}: ran out of memory{limit}; raise --max-memory or trace with --fake{tail}", "memory"
    return f"{label}: the trace process {how}{tail}", "crash"
