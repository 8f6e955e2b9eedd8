"""`emulate_cuda()`: this CPU-only process looks like a machine with CUDA devices for the length of a block.

Inside the block `torch.cuda` and `torch.accelerator` report `device_count` CUDA devices (capability
`capability`), tensors placed on them compute on CPU (`placement.py`), and every call with an effect on a
device is recorded, in order, in the returned `Recorder`. Afterwards every replaced attribute is restored.

Recorded (canonical name, normalised arguments): set_device / exchange_device / restore_device, synchronize,
empty_cache, empty_host_cache, reset_peak_memory_stats, reset_accumulated_memory_stats, ipc_collect,
manual_seed (per generator, `cpu` or `cuda:i`), set_rng_state, Stream / Event and their record / wait /
synchronize / elapsed_time, set_stream, nvtx ranges, autocast regions, GradScaler, torch.load onto a device,
torch.compile, init_process_group / new_group / collectives / destroy_process_group, DistributedDataParallel,
tensor transfers host <-> device (`to`), allocations on a device (`alloc`), pin_memory, and the attention
kernels enabled when `scaled_dot_product_attention` runs on a device (`sdpa`).
Not recorded: queries with no effect (`is_available`, `device_count`, current device or stream, memory
counters, device properties and capability, `get_rng_state`): what they answer is part of the program's
results, and rewrites may add or reorder them (an added `if torch.accelerator.is_available():` guard is not a
device call).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch

from tests.differential import accelerator_api, cuda_api, fake_dist, libraries, streams
from tests.differential.calls import Recorder
from tests.differential.cuda_state import EmulatedCuda, activate
from tests.differential.patches import Patches
from tests.differential.placement import Placement

REAL_PARAMETER_NEW = torch.nn.Parameter.__new__
_PLACEMENT: list[Placement] = []


def placement() -> Placement:
    """The tensor side of the emulation in progress."""
    return _PLACEMENT[-1]


def _parameter_new(
    cls: type, data: torch.Tensor | None = None, requires_grad: bool = True
) -> torch.nn.Parameter:
    # Parameter(t) makes a new tensor object in C++, out of the mode's sight: it lives where `t` lives
    param = REAL_PARAMETER_NEW(cls, data, requires_grad)
    if _PLACEMENT and data is not None:
        _PLACEMENT[-1].mark(param, _PLACEMENT[-1].where(data))
    return param


@contextlib.contextmanager
def emulate_cuda(device_count: int = 2, capability: tuple[int, int] = (8, 0)) -> Iterator[Recorder]:
    """The CUDA emulation (see the module docstring); yields the recorder of the device calls."""
    recorder = Recorder()
    cuda = EmulatedCuda(recorder, device_count=device_count, capability=capability)
    patches = Patches()
    mode = Placement(cuda)
    activate(cuda)
    _PLACEMENT.append(mode)
    _clear_caches()
    try:
        _install(patches)
        with mode:
            yield recorder
    finally:
        patches.restore()
        _PLACEMENT.pop()
        activate(None)
        _clear_caches()


def restart() -> Recorder:
    """A fresh machine for the emulation already in progress (a child process installs the emulation once and
    each forked job starts it afresh: installing it costs more than most jobs); returns the new recorder."""
    from tests.differential.cuda_state import _ACTIVE

    old = _ACTIVE[-1]
    recorder = Recorder()
    cuda = EmulatedCuda(recorder, device_count=old.device_count, capability=old.capability)
    _ACTIVE[-1] = cuda
    mode = _PLACEMENT[-1]
    mode.cuda = cuda
    mode.devices.clear()
    mode.pinned.clear()
    fake_dist.reset()
    _clear_caches()
    return recorder


def _install(patches: Patches) -> None:
    replacements = [(getattr(torch.cuda, name), fake) for name, fake in cuda_api.FUNCTIONS.items()]
    replacements += [(getattr(torch.cuda.nvtx, name), fake) for name, fake in cuda_api.NVTX.items()]
    replacements += [
        (getattr(torch.accelerator, name), accelerator_api.recorded(getattr(torch.accelerator, name), name))
        for name in accelerator_api.RECORDED
    ]
    replacements += fake_dist.replacements()
    patches.everywhere(
        replacements, ("torch.cuda", "torch.accelerator", "torch.distributed", "torch.nn.parallel")
    )
    patches.set(torch.cuda, "_exchange_device", accelerator_api._exchange)
    patches.set(torch.cuda, "_maybe_exchange_device", accelerator_api._maybe_exchange)
    patches.set(torch.version, "cuda", cuda_api.CUDA_VERSION)
    patches.set(torch.backends.cudnn, "is_available", lambda: True)
    patches.set(torch.backends.cudnn, "version", lambda: 91000)
    for name, fake in accelerator_api.C_FUNCTIONS.items():
        patches.set(torch._C, name, fake)
    patches.set(torch, "Stream", streams.Stream)
    patches.set(torch, "Event", streams.Event)
    patches.set(torch.nn.Parameter, "__new__", _parameter_new)
    # a CUDA build's kineto profiles CUDA too (the CPU-only build lists only the CPU)
    real = torch.profiler.supported_activities
    everywhere_too = [(real, lambda: real() | {torch.profiler.ProfilerActivity.CUDA})]
    patches.everywhere(everywhere_too, ("torch.profiler", "torch.autograd"))
    libraries.install(patches)
    libraries.install_checked_compile(patches)
    fake_dist.reset()


def _clear_caches() -> None:
    """torch caches two answers that depend on the accelerator (a CPU answer must not leak in or out)."""
    torch.get_device_module.cache_clear()
    torch.accelerator.get_device_capability.cache_clear()
