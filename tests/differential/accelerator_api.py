"""`torch.accelerator` on the emulated machine: torch's own Python functions over an emulated C layer.

torch 2.13's `torch.accelerator` functions are thin Python wrappers over `torch._C._accelerator_*`. The
emulation replaces only that C layer (`C_FUNCTIONS`), so signatures (positional-only parameters), argument
checks (`set_device_index("cuda")` raises `ValueError`, `synchronize("cpu")` a device-type mismatch) and
return conventions are torch's. The public functions with an effect on the device are wrapped once more
(`RECORDED`) to record the call with its argument as the program passed it.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from typing import Any

import torch

from tests.differential import streams
from tests.differential.calls import device_key
from tests.differential.cuda_state import active

#: dtypes a CUDA device can allocate (what `get_device_capability()["supported_dtypes"]` lists on CUDA)
SUPPORTED_DTYPES = frozenset(
    {
        torch.bool,
        torch.uint8,
        torch.int8,
        torch.int16,
        torch.int32,
        torch.int64,
        torch.float16,
        torch.bfloat16,
        torch.float32,
        torch.float64,
        torch.complex64,
        torch.complex128,
        torch.float8_e4m3fn,
        torch.float8_e5m2,
    }
)


def _device(index: int) -> int:
    return active().check(index)


def _exchange(index: int) -> int:
    cuda = active()
    if index < 0:
        return -1
    previous = cuda.current
    cuda.set_current(index)
    cuda.recorder.record("exchange_device", f"cuda:{index}", spelled="device_index (enter)")
    return previous


def _maybe_exchange(index: int) -> int:
    cuda = active()
    if index < 0:
        return -1
    previous = cuda.current
    cuda.set_current(index)
    cuda.recorder.record("restore_device", f"cuda:{index}", spelled="device_index (exit)")
    return previous


def _set_stream(stream: Any) -> None:
    streams.switch_stream(stream, "torch.accelerator.set_stream")
    active().set_current(stream.device_index)


def _reset_peak(index: int) -> None:
    counters = active().memory[_device(index)]
    counters.peak, counters.peak_reserved = counters.allocated, counters.reserved


def _empty_cache() -> None:
    for counters in active().memory:
        counters.reserved = -(-counters.allocated // (2 << 20)) * (2 << 20)


def _free_and_total(index: int) -> tuple[int, int]:
    cuda = active()
    return cuda.total_memory - cuda.memory[_device(index)].reserved, cuda.total_memory


#: torch._C name -> emulation
C_FUNCTIONS: dict[str, Callable[..., Any]] = {
    "_accelerator_getAccelerator": lambda: torch.device("cuda"),
    "_get_accelerator": lambda: torch.device("cuda"),
    "_accelerator_getDeviceIndex": lambda: active().current,
    "_accelerator_setDeviceIndex": lambda index: active().set_current(index),
    "_accelerator_exchangeDevice": _exchange,
    "_accelerator_maybeExchangeDevice": _maybe_exchange,
    "_accelerator_synchronizeDevice": _device,
    "_accelerator_getStream": lambda index: streams.current_stream(_device(index)),
    "_accelerator_setStream": _set_stream,
    "_accelerator_isAllocatorInitialized": lambda: True,
    "_accelerator_emptyCache": _empty_cache,
    "_accelerator_emptyHostCache": lambda: None,
    "_accelerator_getDeviceStats": lambda index: active().memory[_device(index)].stats(),
    "_accelerator_resetPeakStats": _reset_peak,
    "_accelerator_resetAccumulatedStats": lambda index: setattr(
        active().memory[_device(index)], "allocations", 0
    ),
    "_accelerator_getMemoryInfo": _free_and_total,
    "_accelerator_getDeviceCapability": lambda index: (
        {"supported_dtypes": set(SUPPORTED_DTYPES)} if _device(index) >= 0 else {}
    ),
    "_accelerator_hooks_device_count": lambda: active().device_count,
}


def _set_device_key(device: Any) -> str | None:
    """`cuda:i`, or None for a negative index (torch then changes nothing)."""
    if isinstance(device, int):
        return None if device < 0 else device_key(device)
    return device_key(torch.device(device))


#: public function -> (canonical call, how its one argument is normalised); None: the call takes no argument
RECORDED: dict[str, tuple[str, Callable[[Any], str | None] | None]] = {
    "synchronize": ("synchronize", device_key),
    "set_device_index": ("set_device", _set_device_key),
    "set_device_idx": ("set_device", _set_device_key),
    "empty_cache": ("empty_cache", None),
    "empty_host_cache": ("empty_host_cache", None),
    "reset_peak_memory_stats": ("reset_peak_memory_stats", device_key),
    "reset_accumulated_memory_stats": ("reset_accumulated_memory_stats", device_key),
}


def recorded(real: Callable[..., Any], name: str) -> Callable[..., Any]:
    """`real` (a torch.accelerator function), recording its call once it returned."""
    api, normalise = RECORDED[name]
    signature = inspect.signature(real)

    @functools.wraps(real)
    def call(*args: Any, **kwargs: Any) -> Any:
        recorder = active().recorder
        with recorder.outer():
            result = real(*args, **kwargs)  # torch raises its own TypeError for a call that does not bind
        bound = signature.bind(*args, **kwargs)
        bound.apply_defaults()
        values = list(bound.arguments.values())
        arguments = (normalise(values[0]),) if normalise and values else ()
        if None not in arguments:
            recorder.record(api, *arguments, spelled=f"torch.accelerator.{name}")
        return result

    return call
