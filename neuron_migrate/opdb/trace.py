"""Run a trace in a child process and bring back its TraceResult.

The child (`neuron_migrate.opdb.child`) registers the device, runs the target and writes JSON to a temp file.
The parent never imports torch: it bounds the child's time (`timeout`, then the whole process group is killed)
and memory (`max_memory_mb`, RLIMIT_AS set in the child), and turns a crash, an out-of-memory or a timeout into
one TargetError line that quotes the child's last stderr lines.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path

from neuron_migrate.errors import TargetError, UsageError
from neuron_migrate.model import TraceResult, from_json
from neuron_migrate.opdb.targets import TargetSpec

DEVICES = ("neuron", "stand-in")
_OOM_WORDS = ("MemoryError", "bad_alloc", "Cannot allocate memory", "out of memory")


@dataclass(frozen=True)
class TraceOptions:
    """How to trace. `device`: "neuron" (real torch-neuronx when present, else the stand-in) or "stand-in"."""

    device: str = "neuron"
    fake: bool = False
    inference: bool = False
    opdb: str | None = None
    timeout: float = 600.0
    max_memory_mb: int | None = None
    root: str = "."
    top_sites: int = 10

    def check(self) -> None:
        """Reject values that cannot work, with the fix."""
        if self.device not in DEVICES:
            raise UsageError(f"--device {self.device}: use one of {', '.join(DEVICES)}")
        if self.timeout <= 0:
            raise UsageError(f"--timeout {self.timeout:g}: give a positive number of seconds")
        if self.max_memory_mb is not None and self.max_memory_mb < 256:
            raise UsageError(f"--max-memory {self.max_memory_mb}: give at least 256 (MB); torch alone needs more")
        if not Path(self.root).is_dir():
            raise UsageError(f"{self.root}: the trace root is not a directory")


def run_trace(spec: TargetSpec, options: TraceOptions) -> TraceResult:
    """Trace one target; a failure of the target is a TargetError."""
    (result,) = run_traces([spec], options)
    if result.error:
        raise TargetError(result.error)
    return result


def run_traces(specs: list[TargetSpec], options: TraceOptions) -> list[TraceResult]:
    """Trace several targets in ONE child (imports paid once); a failed target comes back with `error` set.

    A crash, timeout or out-of-memory of the child itself raises TargetError for the whole batch.
    """
    options.check()
    from neuron_migrate.opdb.db import load_snapshot

    load_snapshot(options.opdb)  # a bad --opdb is the user's mistake: say so before spawning anything
    label = ", ".join(s.label for s in specs)
    with tempfile.TemporaryDirectory(prefix="neuron-migrate-trace-") as tmp:
        request, result, log = Path(tmp, "request.json"), Path(tmp, "result.json"), Path(tmp, "child.log")
        payload = {
            "targets": [{"kind": s.kind, "ref": s.ref, "args": list(s.args), "hf_config": s.hf_config} for s in specs],
            "options": {**asdict(options), "root": str(Path(options.root).resolve())},
            "result": str(result),
        }
        request.write_text(json.dumps(payload), encoding="utf-8")
        code = _run_child(request, log, options, label)
        if code != 0 or not result.is_file():
            raise TargetError(_crash_message(label, code, log, options))
        items = json.loads(result.read_text(encoding="utf-8"))
        if len(items) == 1 and "schema" not in items[0]:
            raise TargetError(items[0]["error"])
        for spec, item in zip(specs, items):
            if item.get("error") and spec.kind == "script":  # the script's own last words explain its failure
                item["error"] += _tail(log)
    return [from_json(json.dumps(item), TraceResult, "trace child result") for item in items]


def _child_env(options: TraceOptions) -> dict[str, str]:
    env = dict(os.environ)
    package_parent = str(Path(__file__).resolve().parents[2])  # works from a source checkout, not only installed
    env["PYTHONPATH"] = os.pathsep.join(filter(None, (package_parent, env.get("PYTHONPATH"))))
    if options.device == "stand-in":
        env["TORCH_DEVICE_BACKEND_AUTOLOAD"] = "0"  # keep an installed torch-neuronx from claiming PrivateUse1
    env.setdefault("PYTHONUNBUFFERED", "1")
    env.setdefault("TOKENIZERS_PARALLELISM", "false")
    return env


def _run_child(request: Path, log: Path, options: TraceOptions, label: str) -> int:
    """Start the child in its own session, wait up to the timeout, kill its whole group if it overruns."""
    command = [sys.executable, "-m", "neuron_migrate.opdb.child", str(request)]
    with log.open("wb") as out:
        proc = subprocess.Popen(command, cwd=options.root, env=_child_env(options), stdin=subprocess.DEVNULL,
                                stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            return proc.wait(timeout=options.timeout)
        except (subprocess.TimeoutExpired, KeyboardInterrupt) as err:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            proc.wait()
            if isinstance(err, KeyboardInterrupt):
                raise
            raise TargetError(f"{label}: timed out after {options.timeout:g} s (raise --timeout, or trace a smaller "
                              f"config / --fake){_tail(log)}") from None


def _tail(log: Path, lines: int = 3) -> str:
    try:
        text = log.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ""
    kept = [line.strip() for line in text.splitlines() if line.strip()][-lines:]
    return f"; last output: {' | '.join(kept)}" if kept else ""


def _crash_message(label: str, code: int, log: Path, options: TraceOptions) -> str:
    tail = _tail(log)
    oom = any(word in tail for word in _OOM_WORDS)
    if code < 0:
        how = f"was killed by signal {signal.Signals(-code).name}"
    else:
        how = f"exited with status {code}"
    if oom or (options.max_memory_mb and code in (-signal.SIGKILL, -signal.SIGSEGV, -signal.SIGABRT)):
        limit = f" (limit --max-memory {options.max_memory_mb} MB)" if options.max_memory_mb else ""
        return f"{label}: ran out of memory{limit}; raise --max-memory or trace with --fake{tail}"
    return f"{label}: the trace process {how}{tail}"
