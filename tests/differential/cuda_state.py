"""The state of the emulated CUDA machine: devices, the current device, generators, streams, events, memory.

Everything the emulated APIs return comes from here and is deterministic, so the original and the rewritten
program see the same values when they make the same calls: memory counters grow with the bytes placed on a
device, event timings are the number of event records between two events, streams and events get labels in
creation order.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch

from tests.differential.calls import Recorder, device_key

#: CUDA's default generator seed (`default_rng_seed_val` in c10), the state before anyone seeds
DEFAULT_CUDA_SEED = 67280421310721
MIB = 1 << 20


def invalid_ordinal() -> Exception:
    """What CUDA raises for a device index that does not exist (torch 2.13 raises AcceleratorError)."""
    return torch.AcceleratorError("CUDA error: invalid device ordinal")


@dataclass
class Memory:
    """The caching allocator's counters of one device, in bytes."""

    allocated: int = 0
    peak: int = 0
    reserved: int = 0
    peak_reserved: int = 0
    allocations: int = 0

    def add(self, nbytes: int) -> None:
        self.allocated += nbytes
        self.allocations += 1
        self.peak = max(self.peak, self.allocated)
        # the allocator reserves whole 2 MiB segments
        self.reserved = max(self.reserved, -(-self.allocated // (2 * MIB)) * 2 * MIB)
        self.peak_reserved = max(self.peak_reserved, self.reserved)

    def stats(self) -> dict[str, int]:
        """The keys of `torch.cuda.memory_stats()` that programs read."""
        return {
            "allocated_bytes.all.current": self.allocated,
            "allocated_bytes.all.peak": self.peak,
            "reserved_bytes.all.current": self.reserved,
            "reserved_bytes.all.peak": self.peak_reserved,
            "allocation.all.current": self.allocations,
            "num_alloc_retries": 0,
            "num_ooms": 0,
        }


@dataclass
class DeviceProperties:
    """What `torch.cuda.get_device_properties` returns (the fields programs read)."""

    name: str
    major: int
    minor: int
    total_memory: int
    multi_processor_count: int = 108
    is_integrated: int = 0
    is_multi_gpu_board: int = 0
    L2_cache_size: int = 40 * MIB
    uuid: str = field(default="GPU-emulated")

    def __repr__(self) -> str:
        return (
            f"_CudaDeviceProperties(name='{self.name}', major={self.major}, minor={self.minor}, "
            f"total_memory={self.total_memory // MIB}MB, multi_processor_count={self.multi_processor_count})"
        )


class EmulatedCuda:
    """One emulated machine with `device_count` CUDA devices of compute capability `capability`."""

    def __init__(
        self,
        recorder: Recorder,
        device_count: int = 2,
        capability: tuple[int, int] = (8, 0),
        total_memory: int = 80 * 1024 * MIB,
    ) -> None:
        self.recorder = recorder
        self.device_count = device_count
        self.capability = capability
        self.total_memory = total_memory
        self.current = 0
        self.memory = [Memory() for _ in range(device_count)]
        self.rng = [_seeded_state(DEFAULT_CUDA_SEED) for _ in range(device_count)]
        self.initial_seeds = [DEFAULT_CUDA_SEED] * device_count
        self.streams_made = 0
        self.events_made = 0
        self.records = 0  # event records so far: the emulated clock
        self.default_streams: list[Any] = []
        self.current_streams: list[Any] = []

    # --- devices --------------------------------------------------------------------------------------------

    def check(self, index: int) -> int:
        """`index` if that device exists, else CUDA's invalid-ordinal error."""
        if not 0 <= index < self.device_count:
            raise invalid_ordinal()
        return index

    def resolve(self, device: Any) -> int:
        """The index a device argument means (None / no index: the current device)."""
        if device is None:
            return self.current
        if isinstance(device, int):
            return device
        device = torch.device(device)
        return self.current if device.index is None else device.index

    def set_current(self, index: int) -> None:
        if index >= 0:
            self.current = self.check(index)

    def properties(self, index: int) -> DeviceProperties:
        major, minor = self.capability
        return DeviceProperties("NVIDIA A100-SXM4-80GB (emulated)", major, minor, self.total_memory)

    # --- generators --------------------------------------------------------------------------------------

    def seed(self, index: int, seed: int, spelled: str) -> None:
        """Seed one device's generator; a seed that leaves the generator as it is (seeded with the same value
        and not drawn from since) changes nothing and is not recorded."""
        state = _seeded_state(seed)
        if not torch.equal(self.rng[index], state):
            self.recorder.record("manual_seed", f"cuda:{index}", str(seed), spelled=spelled, nested=True)
        self.rng[index] = state
        self.initial_seeds[index] = seed

    # --- streams and events ------------------------------------------------------------------------------

    def label_stream(self) -> str:
        self.streams_made += 1
        return f"stream{self.streams_made}"

    def label_event(self) -> str:
        self.events_made += 1
        return f"event{self.events_made}"

    def tick(self) -> int:
        self.records += 1
        return self.records

    def allocate(self, index: int, nbytes: int) -> None:
        self.memory[self.check(index)].add(nbytes)

    def key(self, device: Any) -> str:
        return device_key(device)


_SEEDED: dict[int, torch.Tensor] = {}


def _seeded_state(seed: int) -> torch.Tensor:
    """The state of a generator freshly seeded with `seed` (emulated devices draw with CPU generators)."""
    if seed not in _SEEDED:
        _SEEDED[seed] = torch.Generator().manual_seed(seed).get_state()
    return _SEEDED[seed].clone()


_ACTIVE: list[EmulatedCuda] = []


def active() -> EmulatedCuda:
    """The emulated machine of the `emulate_cuda()` block in progress."""
    if not _ACTIVE:
        raise RuntimeError("no CUDA emulation is active")
    return _ACTIVE[-1]


def activate(cuda: EmulatedCuda | None) -> None:
    """Make `cuda` the active machine (None: end the innermost one)."""
    if cuda is None:
        _ACTIVE.pop()
    else:
        _ACTIVE.append(cuda)
