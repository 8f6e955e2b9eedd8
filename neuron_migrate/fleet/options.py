"""What a fleet run traces and how: the options record, shards."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from neuron_migrate.errors import UsageError
from neuron_migrate.fleet.enumerate import Architecture, check_task

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
    return archs[index - 1 :: count]
