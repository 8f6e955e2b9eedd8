"""`torch.neuron` on the C++ stand-in: the device-module functions TorchNeuron documents (device, RNG with its
own generators, streams and events, memory), on top of the extension's runtime and `torch.accelerator`.

Registered as `torch.neuron` by `native_device.install`; importing it alone registers nothing. The stand-in's
memory is host memory, so sizes are real but `total_memory` is this machine's RAM, not a NeuronCore's HBM.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import torch

from neuron_migrate.opdb.tracer import extension

Stream = torch.Stream  # neuron is the process's accelerator, so the generic classes default to it
Event = torch.Event


def _ext() -> Any:
    return extension.load()


def _index(device: Any = None) -> int:
    """A device index from None / int / "neuron:1" / torch.device; None is the current device."""
    if device is None:
        return current_device()
    if isinstance(device, int):
        return device
    device = torch.device(device)
    if device.type != "neuron":
        raise ValueError(f"expected a neuron device, got {device}")
    return current_device() if device.index is None else device.index


# --- device -------------------------------------------------------------------------------------------------


def is_available() -> bool:
    """True: the stand-in always has its devices."""
    return device_count() > 0


def is_initialized() -> bool:
    """True once registered (the stand-in has no lazy runtime)."""
    return True


def init() -> None:
    """Nothing to initialise."""


def _is_in_bad_fork() -> bool:
    return False


def device_count() -> int:
    """How many neuron devices (logical NeuronCores) the stand-in offers."""
    return _ext().device_count()


def current_device() -> int:
    """The current device index of this thread."""
    return _ext().current_device()


def set_device(device: Any) -> None:
    """Make `device` the current device of this thread."""
    _ext().set_device(_index(device))


class device:
    """Context manager that makes `index` the current device for its body."""

    def __init__(self, index: Any) -> None:
        self.index = None if index is None else _index(index)
        self.previous = -1

    def __enter__(self) -> None:
        self.previous = current_device()
        if self.index is not None:
            set_device(self.index)

    def __exit__(self, *exc: object) -> None:
        set_device(self.previous)


def synchronize(device: Any = None) -> None:
    """Wait for the device (the stand-in's kernels have finished when they return)."""
    torch.accelerator.synchronize(_index(device))


def get_device_name(device: Any = None) -> str:
    """The device's name."""
    return f"neuron-migrate stand-in (host memory, CPU kernels), neuron:{_index(device)}"


@dataclass(frozen=True)
class DeviceProperties:
    """What `get_device_properties` returns."""

    name: str
    total_memory: int


def get_device_properties(device: Any = None) -> DeviceProperties:
    """Name and total memory (this machine's RAM) of a device."""
    index = _index(device)
    return DeviceProperties(get_device_name(index), torch.accelerator.get_memory_info(index)[1])


def get_device_capability(device: Any = None) -> dict[str, Any]:
    """`torch.accelerator.get_device_capability` for a neuron device."""
    return torch.accelerator.get_device_capability(torch.device("neuron", _index(device)))


def get_amp_supported_dtype() -> list[torch.dtype]:
    """The dtypes autocast accepts on neuron."""
    return [torch.float16, torch.bfloat16, torch.float32]


def is_bf16_supported() -> bool:
    """Trainium computes bfloat16 natively."""
    return True


# --- random numbers -----------------------------------------------------------------------------------------


def default_generator(device: Any = None) -> torch.Generator:
    """The default generator of a neuron device."""
    return _ext().default_generator(_index(device))


def manual_seed(seed: int) -> None:
    """Seed the current device's default generator."""
    default_generator().manual_seed(int(seed))


def manual_seed_all(seed: int) -> None:
    """Seed every neuron device's default generator (torch.manual_seed calls this)."""
    for index in range(device_count()):
        default_generator(index).manual_seed(int(seed))


def seed() -> int:
    """Seed the current device's generator from a non-deterministic source."""
    return default_generator().seed()


def seed_all() -> None:
    """`seed()` on every device, from one random seed."""
    value = default_generator(0).seed()
    manual_seed_all(value)


def initial_seed() -> int:
    """The current device's initial seed."""
    return default_generator().initial_seed()


def get_rng_state(device: Any = "neuron") -> torch.Tensor:
    """The generator state of a device, as a CPU uint8 tensor."""
    return default_generator(device).get_state()


def set_rng_state(new_state: torch.Tensor, device: Any = "neuron") -> None:
    """Restore a device's generator state."""
    default_generator(device).set_state(new_state)


def get_rng_state_all() -> list[torch.Tensor]:
    """Every device's generator state."""
    return [get_rng_state(index) for index in range(device_count())]


def set_rng_state_all(new_states: list[torch.Tensor]) -> None:
    """Restore every device's generator state."""
    for index, state in enumerate(new_states):
        set_rng_state(state, index)


# --- streams and events -------------------------------------------------------------------------------------


def current_stream(device: Any = None) -> torch.Stream:
    """The current stream of a device."""
    return torch.accelerator.current_stream(_index(device))


def default_stream(device: Any = None) -> torch.Stream:
    """The default (id 0) stream of a device."""
    index = _index(device)
    return torch.Stream(stream_id=0, device_index=index, device_type=current_stream(index).device_type)


def set_stream(stream: torch.Stream) -> None:
    """Make `stream` the current stream of its device."""
    torch.accelerator.set_stream(stream)


@contextlib.contextmanager
def stream(value: torch.Stream | None) -> Iterator[None]:
    """Run the body with `value` as the current stream (None: no change)."""
    if value is None:
        yield
        return
    previous = current_stream(value.device_index)
    set_stream(value)
    try:
        yield
    finally:
        set_stream(previous)


# --- memory -------------------------------------------------------------------------------------------------


def memory_allocated(device: Any = None) -> int:
    """Bytes held by live tensors on a device."""
    return torch.accelerator.memory_allocated(_index(device))


def max_memory_allocated(device: Any = None) -> int:
    """Peak of `memory_allocated` since the last reset."""
    return torch.accelerator.max_memory_allocated(_index(device))


def memory_reserved(device: Any = None) -> int:
    """Bytes the caching allocator holds (live tensors and cached free blocks)."""
    return torch.accelerator.memory_reserved(_index(device))


def max_memory_reserved(device: Any = None) -> int:
    """Peak of `memory_reserved` since the last reset."""
    return torch.accelerator.max_memory_reserved(_index(device))


def memory_stats(device: Any = None) -> dict[str, Any]:
    """The allocator's statistics, with torch.cuda's key names (`allocated_bytes.all.current`, ...)."""
    return dict(torch.accelerator.memory_stats(_index(device)))


def reset_peak_memory_stats(device: Any = None) -> None:
    """Reset the peaks to the current values."""
    torch.accelerator.reset_peak_memory_stats(_index(device))


def reset_accumulated_memory_stats(device: Any = None) -> None:
    """Reset the allocated/freed totals."""
    torch.accelerator.reset_accumulated_memory_stats(_index(device))


def empty_cache() -> None:
    """Return the cached free blocks to the host."""
    torch.accelerator.empty_cache()


def mem_get_info(device: Any = None) -> tuple[int, int]:
    """(free, total) bytes: the stand-in's memory is this machine's."""
    return torch.accelerator.get_memory_info(_index(device))


def memory_summary(device: Any = None, abbreviated: bool = False) -> str:
    """A table of the allocator statistics, in the spirit of torch.cuda.memory_summary."""
    stats = memory_stats(device)
    rows = [
        ("Allocated memory", "allocated_bytes"),
        ("Active memory", "active_bytes"),
        ("Requested memory", "requested_bytes"),
        ("Reserved memory", "reserved_bytes"),
    ]
    pools = ("all",) if abbreviated else ("all", "small_pool", "large_pool")
    lines = [
        f"neuron:{_index(device)} memory summary (stand-in)",
        f"{'metric':<28}{'current':>14}{'peak':>14}{'allocated':>14}{'freed':>14}",
    ]
    for label, key in rows:
        for pool in pools:
            values = [stats.get(f"{key}.{pool}.{m}", 0) for m in ("current", "peak", "allocated", "freed")]
            lines.append(f"{label + ' (' + pool + ')':<28}" + "".join(f"{_bytes(v):>14}" for v in values))
    return "\n".join(lines) + "\n"


def _bytes(value: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(value) < 1024 or unit == "GiB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024  # type: ignore[assignment]
    return str(value)
