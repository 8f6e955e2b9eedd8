"""The typed records the CLI side hands to the trace child: `TraceOptions` (how to trace) and `TraceRequest`
(what to trace, how, and where to write the result). The request travels as JSON and is rebuilt into these
records in the child, so nothing downstream reads options by string keys."""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from neuron_migrate.errors import UsageError
from neuron_migrate.opdb.tracer.targets import TargetSpec

DEVICES = ("neuron", "stand-in")


@dataclass(frozen=True)
class TraceOptions:
    """How to trace. `device`: "neuron" (real torch-neuronx when present, else the stand-in) or "stand-in".

    `steps` applies to scripts: None stops once the op set is stable (after the first optimizer step that adds
    no new (op, dtypes, phase)), N stops after N optimizer steps, 0 runs the script to its end."""

    device: str = "neuron"
    fake: bool = False
    inference: bool = False
    opdb: str | None = None
    timeout: float = 600.0
    max_memory_mb: int | None = None
    root: str = "."
    top_sites: int = 10
    steps: int | None = None

    def check(self) -> None:
        """Reject values that cannot work, with the fix."""
        if self.device not in DEVICES:
            raise UsageError(f"--device {self.device}: use one of {', '.join(DEVICES)}")
        if self.timeout <= 0:
            raise UsageError(f"--timeout {self.timeout:g}: give a positive number of seconds")
        if self.max_memory_mb is not None and self.max_memory_mb < 256:
            raise UsageError(
                f"--max-memory {self.max_memory_mb}: give at least 256 (MB); torch alone needs more"
            )
        if self.steps is not None and self.steps < 0:
            raise UsageError(f"--steps {self.steps}: give 0 (run the script to its end) or a number of steps")
        if not Path(self.root).is_dir():
            raise UsageError(f"{self.root}: the trace root is not a directory")

    @staticmethod
    def coerce(value: TraceOptions | dict[str, Any]) -> TraceOptions:
        """A TraceOptions from itself or from a dict of its fields (unknown keys ignored)."""
        if isinstance(value, TraceOptions):
            return value
        names = {f.name for f in dataclasses.fields(TraceOptions)}
        return TraceOptions(**{k: v for k, v in value.items() if k in names})


@dataclass(frozen=True)
class TraceRequest:
    """One child's work: the targets, the options (root resolved) and the result file to write."""

    targets: tuple[TargetSpec, ...]
    options: TraceOptions
    result: str

    def to_json(self) -> str:
        """The request as the child reads it."""
        return json.dumps(
            {
                "targets": [dataclasses.asdict(t) for t in self.targets],
                "options": dataclasses.asdict(self.options),
                "result": self.result,
            }
        )

    @staticmethod
    def from_json(text: str) -> TraceRequest:
        """Rebuild a request written by `to_json`."""
        data = json.loads(text)
        targets = tuple(
            TargetSpec(t["kind"], t["ref"], tuple(t["args"]), dict(t["hf_config"])) for t in data["targets"]
        )
        return TraceRequest(targets, TraceOptions(**data["options"]), data["result"])
