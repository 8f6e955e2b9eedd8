"""`torch.cuda` on the emulated machine: the functions programs call, with torch 2.13's signatures.

Each function has exactly the parameters of the real one (a test holds them equal), so a call with a wrong
keyword raises the same `TypeError`. Device arguments go through torch's own
`torch.cuda._utils._get_device_index`, so `set_device("cuda")` raises the same `ValueError` as on a CUDA
machine; an index that does not exist raises what CUDA raises. Calls with an effect on the device are recorded
(see `emulation.py` for the list); queries (`is_available`, memory counters, properties) are not: their
answers are part of the program's results.
"""

from __future__ import annotations

import collections
from typing import Any

import torch
from torch.cuda._utils import _get_device_index

from tests.differential import streams
from tests.differential.calls import device_key
from tests.differential.cuda_state import active

#: what the emulated machine answers for `torch.version.cuda`
CUDA_VERSION = "12.8"


def _index(device: Any, optional: bool = True) -> int:
    return _get_device_index(device, optional=optional)


def _memory(device: Any):
    """The counters of a device argument, checked the way the CUDA allocator checks it."""
    cuda = active()
    index = _index(device)
    if not 0 <= index < cuda.device_count:
        raise RuntimeError(f"Invalid device argument {index}: did you call init?")
    return cuda.memory[index]


def _record(api: str, *args: Any, spelled: str) -> None:
    active().recorder.record(api, *args, spelled=f"torch.cuda.{spelled}")


# --- devices -----------------------------------------------------------------------------------------------


def is_available() -> bool:
    return True


def device_count() -> int:
    return active().device_count


def current_device() -> int:
    return active().current


def set_device(device):
    index = _index(device, optional=False)
    if index >= 0:
        active().set_current(index)
        _record("set_device", f"cuda:{index}", spelled="set_device")


def synchronize(device=None):
    active().check(_index(device))
    _record("synchronize", device_key(device), spelled="synchronize")


def is_initialized():
    return True


def init():
    return None


def _lazy_init():
    return None


def get_device_properties(device=None):
    cuda = active()
    index = _index(device)
    if index < 0 or index >= cuda.device_count:
        raise AssertionError("Invalid device id")
    return cuda.properties(index)


def get_device_capability(device=None):
    props = get_device_properties(device)
    return props.major, props.minor


def get_device_name(device=None):
    return get_device_properties(device).name


def is_bf16_supported(including_emulation=True):
    # torch: native from compute capability 8.0, emulated (and reported as supported) below
    return get_device_properties(current_device()).major >= 8 or bool(including_emulation)


def is_tf32_supported():
    return get_device_properties(current_device()).major >= 8


def get_arch_list():
    return ["sm_80", "sm_86", "sm_90"]


def can_device_access_peer(device, peer_device):
    return _index(device) != _index(peer_device)


# --- memory ------------------------------------------------------------------------------------------------


def empty_cache():
    memory = active().memory
    for counters in memory:
        counters.reserved = -(-counters.allocated // (2 << 20)) * (2 << 20)
    _record("empty_cache", spelled="empty_cache")


def memory_allocated(device=None):
    return _memory(device).allocated


def max_memory_allocated(device=None):
    return _memory(device).peak


def memory_reserved(device=None):
    return _memory(device).reserved


def max_memory_reserved(device=None):
    return _memory(device).peak_reserved


def memory_cached(device=None):
    return memory_reserved(device)


def max_memory_cached(device=None):
    return max_memory_reserved(device)


def memory_stats(device=None):
    return collections.OrderedDict(sorted(_memory(device).stats().items()))


def memory_summary(device=None, abbreviated=False):
    counters = _memory(device)
    return (
        f"|  emulated CUDA memory summary, device {_index(device)}  |\n"
        f"|  allocated {counters.allocated} B, peak {counters.peak} B, reserved {counters.reserved} B  |"
    )


def mem_get_info(device=None):
    cuda = active()
    counters = _memory(device)
    return cuda.total_memory - counters.reserved, cuda.total_memory


def reset_peak_memory_stats(device=None):
    counters = _memory(device)
    counters.peak, counters.peak_reserved = counters.allocated, counters.reserved
    _record("reset_peak_memory_stats", device_key(device), spelled="reset_peak_memory_stats")


def reset_max_memory_allocated(device=None):
    # deprecated by torch: it is reset_peak_memory_stats
    counters = _memory(device)
    counters.peak, counters.peak_reserved = counters.allocated, counters.reserved
    _record("reset_peak_memory_stats", device_key(device), spelled="reset_max_memory_allocated")


def reset_max_memory_cached(device=None):
    counters = _memory(device)
    counters.peak, counters.peak_reserved = counters.allocated, counters.reserved
    _record("reset_peak_memory_stats", device_key(device), spelled="reset_max_memory_cached")


def reset_accumulated_memory_stats(device=None):
    _memory(device).allocations = 0
    _record("reset_accumulated_memory_stats", device_key(device), spelled="reset_accumulated_memory_stats")


def ipc_collect():
    _record("ipc_collect", spelled="ipc_collect")


# --- random number generators -------------------------------------------------------------------------------


def manual_seed(seed):
    cuda = active()
    cuda.seed(cuda.current, int(seed), "torch.cuda.manual_seed")


def manual_seed_all(seed):
    cuda = active()
    for index in range(cuda.device_count):
        cuda.seed(index, int(seed), "torch.cuda.manual_seed_all")


def seed():
    manual_seed(0x5EED)  # a random seed on CUDA; a fixed one here, so that runs compare


def seed_all():
    manual_seed_all(0x5EED)


def initial_seed():
    cuda = active()
    return cuda.initial_seeds[cuda.current]


def _rng_index(device: Any) -> int:
    # torch.cuda.random takes the index of any device (even "cpu") and indexes default_generators with it
    if isinstance(device, str):
        device = torch.device(device)
    elif isinstance(device, int):
        device = torch.device("cuda", device)
    cuda = active()
    index = cuda.current if device.index is None else device.index
    if not 0 <= index < cuda.device_count:
        raise IndexError("tuple index out of range")
    return index


def get_rng_state(device="cuda"):
    return active().rng[_rng_index(device)].clone()


def set_rng_state(new_state, device="cuda"):
    cuda = active()
    index = _rng_index(device)
    torch.Generator().set_state(new_state)  # torch's own check of the state's size and type
    cuda.rng[index] = new_state.clone()
    cuda.recorder.record("set_rng_state", f"cuda:{index}", spelled="torch.cuda.set_rng_state")


def get_rng_state_all():
    return [get_rng_state(i) for i in range(device_count())]


def set_rng_state_all(new_states):
    for index, state in enumerate(new_states):
        set_rng_state(state, index)


# --- streams -----------------------------------------------------------------------------------------------


def current_stream(device=None):
    return streams.current_stream(active().check(_index(device)))


def default_stream(device=None):
    return streams.default_stream(active().check(_index(device)))


def set_stream(stream):
    if stream is None:
        return
    streams.switch_stream(stream, "torch.cuda.set_stream")


class StreamContext:
    """`torch.cuda.stream(s)`: `s` is the current stream inside the block (None: nothing changes)."""

    def __init__(self, stream):
        self.stream = stream
        self.previous = None

    def __enter__(self):
        if self.stream is None:
            return None
        self.previous = streams.current_stream(self.stream.device_index)
        streams.switch_stream(self.stream, "torch.cuda.stream")
        return self.stream

    def __exit__(self, *exc):
        if self.stream is not None:
            streams.switch_stream(self.previous, "torch.cuda.stream (exit)")
        return False


def stream(stream):
    return StreamContext(stream)


# --- NVTX ranges (torch.cuda.nvtx) --------------------------------------------------------------------------


def range_push(msg):
    active().recorder.record("nvtx.range_push", msg, spelled="torch.cuda.nvtx.range_push")
    return 0


def range_pop():
    active().recorder.record("nvtx.range_pop", spelled="torch.cuda.nvtx.range_pop")
    return 0


def mark(msg):
    active().recorder.record("nvtx.mark", msg, spelled="torch.cuda.nvtx.mark")


#: name -> emulation, for `torch.cuda` (and the submodules that export the same object)
FUNCTIONS: dict[str, Any] = {
    name: globals()[name]
    for name in (
        "is_available",
        "device_count",
        "current_device",
        "set_device",
        "synchronize",
        "is_initialized",
        "init",
        "_lazy_init",
        "get_device_properties",
        "get_device_capability",
        "get_device_name",
        "is_bf16_supported",
        "is_tf32_supported",
        "get_arch_list",
        "can_device_access_peer",
        "empty_cache",
        "memory_allocated",
        "max_memory_allocated",
        "memory_reserved",
        "max_memory_reserved",
        "memory_cached",
        "max_memory_cached",
        "memory_stats",
        "memory_summary",
        "mem_get_info",
        "reset_peak_memory_stats",
        "reset_max_memory_allocated",
        "reset_max_memory_cached",
        "reset_accumulated_memory_stats",
        "ipc_collect",
        "manual_seed",
        "manual_seed_all",
        "seed",
        "seed_all",
        "initial_seed",
        "get_rng_state",
        "set_rng_state",
        "get_rng_state_all",
        "set_rng_state_all",
        "current_stream",
        "default_stream",
        "set_stream",
        "stream",
    )
}
FUNCTIONS.update(Stream=streams.CudaStream, Event=streams.CudaEvent, StreamContext=StreamContext)
#: torch.cuda.nvtx
NVTX: dict[str, Any] = {"range_push": range_push, "range_pop": range_pop, "mark": mark}
