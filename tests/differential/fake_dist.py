"""`torch.distributed` and `DistributedDataParallel` on the emulated machine: one rank of a job, no peers.

The rank and world size come from the environment as torchrun sets them (the harness starts the emulation as
rank 1 of 2, so that a lost device index shows). `init_process_group` runs torch's own backend parsing
(`Backend`, `BackendConfig`, which picks NCCL for the emulated accelerator) and device-id checks, and records
the backend per device type: `'nccl'` and `backend=None` are the same call on a CUDA machine,
`'cpu:gloo,cuda:nccl'` is not. Collectives check that a backend serves the tensor's device (NCCL does not take
CPU tensors) and compute what identical peers would give. `DistributedDataParallel` makes torch's checks of
`device_ids` / `output_device` against where the module's parameters are, records them, and moves inputs to
`device_ids[0]` as DDP does.
"""

from __future__ import annotations

import contextlib
import functools
import os
from collections.abc import Iterator
from typing import Any

import torch
import torch.distributed as dist
from torch.distributed.distributed_c10d import Backend, BackendConfig

from tests.differential.calls import device_key
from tests.differential.cuda_state import active
from tests.differential.libraries import bind

REAL = {
    name: getattr(dist, name)
    for name in (
        "init_process_group",
        "is_initialized",
        "get_rank",
        "get_world_size",
        "barrier",
        "all_reduce",
        "broadcast",
        "destroy_process_group",
        "is_nccl_available",
        "get_backend",
        "new_group",
        "all_gather",
    )
}
REAL_DDP = torch.nn.parallel.DistributedDataParallel
_NOT_INITIALIZED = (
    "Default process group has not been initialized, please make sure to call init_process_group."
)


class _Group:
    """The default process group of the emulated job."""

    def __init__(self) -> None:
        self.backends: dict[str, str] | None = None
        self.backend = ""
        self.rank = 0
        self.world_size = 1

    def require(self) -> _Group:
        if self.backends is None:
            raise ValueError(_NOT_INITIALIZED)
        return self

    def check_device(self, tensor: torch.Tensor) -> str:
        kind = tensor.device.type
        if kind not in self.require().backends:
            raise RuntimeError(f"No backend type associated with device type {kind}")
        return device_key(tensor.device)


_GROUP = _Group()


def _record(api: str, *args: Any) -> None:
    active().recorder.record(api, *args, spelled=f"torch.distributed.{api}")


def _env_int(name: str) -> int:
    if name not in os.environ:
        raise ValueError(
            f"Error initializing torch.distributed using env:// rendezvous: environment variable {name} "
            "expected, but not set"
        )
    return int(os.environ[name])


@functools.wraps(REAL["init_process_group"])
def init_process_group(*args: Any, **kwargs: Any) -> None:
    a = bind(REAL["init_process_group"], args, kwargs).arguments
    if _GROUP.backends is not None:
        raise ValueError("trying to initialize the default process group twice!")
    device_id, backend = a["device_id"], a["backend"]
    # torch 2.13's checks of device_id, with the emulated accelerator
    if isinstance(device_id, int):
        device_id = torch.device("cuda", device_id)
    if device_id is not None and device_id.type != "cpu":
        if device_id.type != "cuda":
            raise ValueError(
                f"device_id {device_id} does not match the current compilation's accelerator support: "
                "cuda. Please use a device_id that matches the current accelerator."
            )
        if device_id.index is None:
            raise ValueError("Please use a device_id with index.")
        if device_id.index >= active().device_count:
            raise ValueError(
                f"device_id {device_id} is out of range. Please use a device index less than the number "
                f"of accelerators available: {active().device_count}."
            )
    if backend is None and device_id is not None:
        backend = Backend.default_device_backend_map.get(device_id.type)
    config = BackendConfig(Backend("undefined" if backend is None else backend))
    _GROUP.backends = {kind: str(name) for kind, name in config.get_device_backend_map().items()}
    _GROUP.backend = str(Backend("undefined" if backend is None else backend))
    _GROUP.world_size = a["world_size"] if a["world_size"] != -1 else _env_int("WORLD_SIZE")
    _GROUP.rank = a["rank"] if a["rank"] != -1 else _env_int("RANK")
    served = ",".join(f"{kind}:{name}" for kind, name in sorted(_GROUP.backends.items()))
    _record(
        "init_process_group", served, f"device_id={device_key(device_id) if device_id is not None else None}"
    )


def is_initialized() -> bool:
    return _GROUP.backends is not None


def get_rank(group: Any = None) -> int:
    return _GROUP.require().rank


def get_world_size(group: Any = None) -> int:
    return _GROUP.require().world_size


def get_backend(group: Any = None) -> str:
    group = _GROUP.require()
    if group.backend != "undefined":
        return group.backend
    return ",".join(f"{kind}:{name}" for kind, name in sorted(group.backends.items()))


def is_nccl_available() -> bool:
    return True


class _Done:
    """What an `async_op=True` collective returns."""

    def wait(self, timeout: Any = None) -> bool:
        return True

    def is_completed(self) -> bool:
        return True


def all_reduce(
    tensor: torch.Tensor, op: Any = dist.ReduceOp.SUM, group: Any = None, async_op: bool = False
) -> Any:
    where = _GROUP.check_device(tensor)
    world = _GROUP.world_size
    if op == dist.ReduceOp.SUM:
        tensor.mul_(world)  # every rank of the emulated job holds the same values
    elif op == dist.ReduceOp.PRODUCT:
        tensor.pow_(world)
    _record("all_reduce", where, str(op))
    return _Done() if async_op else None


def all_gather(tensor_list: list, tensor: torch.Tensor, group: Any = None, async_op: bool = False) -> Any:
    where = _GROUP.check_device(tensor)
    for out in tensor_list:
        out.copy_(tensor)
    _record("all_gather", where)
    return _Done() if async_op else None


def broadcast(
    tensor: torch.Tensor, src: Any = None, group: Any = None, async_op: bool = False, group_src: Any = None
) -> Any:
    _record("broadcast", _GROUP.check_device(tensor), f"src={src}")
    return _Done() if async_op else None


def barrier(group: Any = None, async_op: bool = False, device_ids: Any = None, timeout: Any = None) -> Any:
    _GROUP.require()
    _record("barrier", f"device_ids={device_ids}")
    return _Done() if async_op else None


def new_group(
    ranks: Any = None,
    timeout: Any = None,
    backend: Any = None,
    pg_options: Any = None,
    use_local_synchronization: bool = False,
    group_desc: Any = None,
    device_id: Any = None,
    sort_ranks: bool = True,
) -> Any:
    _GROUP.require()
    served = str(Backend(backend)) if backend is not None else "default"
    _record("new_group", f"ranks={ranks}", served)
    return object()


def destroy_process_group(group: Any = None) -> None:
    _GROUP.require()
    _GROUP.backends = None
    _record("destroy_process_group")


class DistributedDataParallel(torch.nn.Module):
    """DDP on one emulated rank: torch's argument checks, no gradient buckets (there are no peers)."""

    @functools.wraps(REAL_DDP.__init__)
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        a = bind(REAL_DDP.__init__, (self, *args), kwargs).arguments
        super().__init__()
        module, device_ids, output_device = a["module"], a["device_ids"], a["output_device"]
        _GROUP.require()
        params = list(module.parameters())
        kinds = {p.device.type for p in params if p.device.type != "meta"}
        if len(kinds) != 1:
            raise ValueError(
                "DistributedDataParallel's input module must be on the same type of devices, but input "
                f"module parameters locate in {kinds}."
            )
        on = {p.device for p in params}
        if not device_ids or kinds == {"cpu"} or len(on) > 1:
            if device_ids or output_device:
                raise ValueError(
                    "DistributedDataParallel device_ids and output_device arguments only work with "
                    "single-device/multiple-device GPU modules or CPU modules, but got device_ids "
                    f"{device_ids}, output_device {output_device}, and module parameters {on}."
                )
            self.device_ids, self.output_device = None, None
        else:
            from torch._utils import _get_device_index

            self.device_ids = [_get_device_index(d, True) for d in device_ids]
            self.output_device = _get_device_index(
                device_ids[0] if output_device is None else output_device, True
            )
        self.module = module
        if params:
            _GROUP.check_device(params[0])
        _record(
            "DistributedDataParallel",
            f"device_ids={self.device_ids}",
            f"output_device={self.output_device}",
            "module_on=" + ",".join(sorted(device_key(d) for d in on)),
        )

    def forward(self, *inputs: Any, **kwargs: Any) -> Any:
        if self.device_ids:
            target = torch.device("cuda", self.device_ids[0])
            inputs = tuple(t.to(target) if isinstance(t, torch.Tensor) else t for t in inputs)
            kwargs = {k: v.to(target) if isinstance(v, torch.Tensor) else v for k, v in kwargs.items()}
        return self.module(*inputs, **kwargs)

    @contextlib.contextmanager
    def no_sync(self) -> Iterator[None]:
        yield


def replacements() -> list[tuple[Any, Any]]:
    """(real, emulated) pairs for `torch.distributed` and DDP."""
    fakes = {
        "init_process_group": init_process_group,
        "is_initialized": is_initialized,
        "get_rank": get_rank,
        "get_world_size": get_world_size,
        "barrier": barrier,
        "all_reduce": all_reduce,
        "broadcast": broadcast,
        "destroy_process_group": destroy_process_group,
        "is_nccl_available": is_nccl_available,
        "get_backend": get_backend,
        "new_group": new_group,
        "all_gather": all_gather,
    }
    return [(REAL[name], fake) for name, fake in fakes.items()] + [(REAL_DDP, DistributedDataParallel)]


def reset() -> None:
    """Each run starts with no process group."""
    _GROUP.backends = None
