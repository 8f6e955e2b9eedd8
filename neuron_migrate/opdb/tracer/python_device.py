"""The pure-Python stand-in for TorchNeuron's `neuron` device (PrivateUse1): the fallback where the C++
stand-in (`native_device`) cannot be built, e.g. on a machine without a C++ compiler. Results name it
`stand-in-python`.

Tensors on it are `NeuronTensor` wrappers that claim device `neuron:0` and hold a CPU tensor; every ATen op
that reaches them runs on CPU. Which ops count as running "on the device" comes from an opdb snapshot: per op
and dtype, `native` ops are recorded as executed, `cpu_fallback` and `unknown` ops as fallbacks (what
TorchNeuron's boxed CPU fallback does with an op it has no kernel for) and `unsupported` ops raise
`RuntimeError` naming the op and dtype. The tracking calls are the ones torch-neuronx offers:
`get_fallback_ops`, `get_executed_ops`, `clear_op_tracking`.

Because the wrappers claim a PrivateUse1 device, composite ops decompose the way they do on a PrivateUse1
backend (e.g. SDPA takes the math path, not CPU flash attention). Registration is process-wide and cannot be
undone: call `install` only in a child process (the tracer and `opdb probe` do), never in a test runner or the
CLI.

What it cannot do, because a Python-only backend has no C++ device guard, allocator or hooks: synchronize,
events' timing, allocator statistics, `empty_cache`, pinned memory, `torch.Generator("neuron")`, and the
wrapper tensors are not plain tensors (`.tolist()` / printing of some values, `torch.save` of the wrapper
class, Dynamo warns). It does not widen dtypes either: a CPU dtype gap of a native op is a stand-in limitation
here.
"""

from __future__ import annotations

import threading
from typing import Any

import torch

from neuron_migrate.opdb.tracer.autocast import register_autocast
from neuron_migrate.opdb.tracer.routing import (
    call_op,
    op_dtypes,
    op_name,
    op_route,
    run_composite,
    worst_support,
)
from neuron_migrate.opdb.tracer.verdicts import NEURON_PREFIX, STAND_IN_PREFIX

DEVICE_NAME = "neuron"
_DEVICE = torch.device("cpu")  # replaced by neuron:0 once registered
_LOCK = threading.Lock()


class _Tracking:
    """What the device ran, by op name, since the last `clear_op_tracking` (sets, no counts, like
    torch-neuronx)."""

    def __init__(self) -> None:
        self.executed: set[str] = set()
        self.fallback: set[str] = set()
        self.unsupported: set[str] = set()
        self.snapshot: Any = None
        self.keep_going = False
        self.installed = False
        self.status_cache: dict[tuple[str, tuple[str, ...]], str] = {}


_STATE = _Tracking()


# --- the public tracking API (same names as torch_neuronx) ------------------------------------------------


def get_fallback_ops() -> set[str]:
    """Ops (`aten::name.overload`) that ran through the CPU fallback since the last `clear_op_tracking`."""
    with _LOCK:
        return set(_STATE.fallback)


def get_executed_ops() -> set[str]:
    """Ops that ran natively on the (stand-in) device since the last `clear_op_tracking`."""
    with _LOCK:
        return set(_STATE.executed)


def get_unsupported_ops() -> set[str]:
    """Ops the snapshot marks unsupported that were reached (only non-empty with
    `install(keep_going=True)`)."""
    with _LOCK:
        return set(_STATE.unsupported)


def clear_op_tracking() -> None:
    """Forget the ops recorded so far."""
    with _LOCK:
        _STATE.executed.clear()
        _STATE.fallback.clear()
        _STATE.unsupported.clear()


def is_installed() -> bool:
    """Whether `install` ran in this process."""
    return _STATE.installed


def _track(name: str, dtypes: tuple[str, ...]) -> None:
    """Record one call by its snapshot status; an unsupported op raises like it would for a user."""
    key = (name, dtypes)
    status = _STATE.status_cache.get(key)
    if status is None:
        status = _STATE.status_cache[key] = worst_support(_STATE.snapshot, name, dtypes).status
    if status == "native":
        bucket = _STATE.executed
    elif status == "unsupported":
        if not _STATE.keep_going:
            shown = "/".join(dtypes) or "no tensor inputs"
            raise RuntimeError(
                f"{NEURON_PREFIX}{name} ({shown}) is not supported on the neuron device "
                f"(opdb {_STATE.snapshot.version}); "
                "it has no neuron kernel and no CPU fallback"
            )
        bucket = _STATE.unsupported
    else:  # cpu_fallback and unknown: an op without a neuron kernel takes the boxed CPU fallback
        bucket = _STATE.fallback
    if name not in bucket:
        with _LOCK:
            bucket.add(name)


# --- the wrapper tensor -------------------------------------------------------------------------------------


class NeuronTensor(torch.Tensor):
    """A tensor that claims device `neuron:0` and keeps its data in a CPU tensor (`elem`)."""

    elem: torch.Tensor
    __slots__ = ["elem"]

    @staticmethod
    def __new__(cls, elem: torch.Tensor, requires_grad: bool = False) -> NeuronTensor:
        out = torch.Tensor._make_wrapper_subclass(
            cls,
            elem.size(),
            strides=elem.stride(),
            storage_offset=elem.storage_offset(),
            dtype=elem.dtype,
            layout=elem.layout,
            requires_grad=requires_grad,
            device=_DEVICE,
        )
        out.elem = elem
        return out

    def __repr__(self, *, tensor_contents: Any = None) -> str:
        return f"NeuronTensor({self.elem!r}, device='{_DEVICE}')"

    __torch_function__ = torch._C._disabled_torch_function_impl

    @classmethod
    def __torch_dispatch__(cls, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        name = op_name(func)
        route = "silent" if name is None else op_route(_STATE.snapshot, func, name)
        if route == "decompose":  # no neuron kernel but a composite one: a backend runs that, callees decide
            return run_composite(func, args, kwargs)
        if route == "record":
            _track(name, op_dtypes(args, kwargs))
        wrap = True
        device = kwargs.get("device")
        if device is not None:
            device = torch.device(device)
            wrap = device.type == DEVICE_NAME
            kwargs = {**kwargs, "device": torch.device("cpu")}
        inputs = {}
        cargs = _unwrap(args, inputs)
        ckwargs = _unwrap(kwargs, inputs)
        try:
            out = call_op(func, cargs, ckwargs)
        except (RuntimeError, NotImplementedError) as err:
            raise _dtype_gap(name, args, kwargs, err) from None
        return _rewrap(out, inputs, wrap)


def _dtype_gap(name: str | None, args: Any, kwargs: Any, err: Exception) -> Exception:
    """A CPU kernel without the dtype: a neuron failure for a CPU-fallback op, else a stand-in limitation."""
    text = str(err)
    if name is None or "not implemented for '" not in text:
        return err
    dtypes = op_dtypes(args, kwargs)
    status = worst_support(_STATE.snapshot, name, dtypes).status
    shown = "/".join(dtypes) or "no tensor inputs"
    if status == "cpu_fallback":
        return RuntimeError(
            f"{NEURON_PREFIX}{name} ({shown}) runs through the CPU fallback on neuron, and the CPU "
            f"kernel does not take this dtype: {text}"
        )
    return NotImplementedError(
        f"{STAND_IN_PREFIX}{name} ({shown}) is {status} on neuron in the opdb, but the "
        f"pure-Python stand-in computes on the CPU, whose kernel does not take this dtype: {text}"
    )


def get_widened_ops() -> dict[tuple[str, tuple[str, ...]], str]:
    """Ops computed in a wider dtype: never, on this stand-in (see the module docstring)."""
    return {}


def _unwrap(value: Any, seen: dict[int, Any] | None = None) -> Any:
    if isinstance(value, torch.Tensor):
        inner = value.elem if isinstance(value, NeuronTensor) else value
        if seen is not None:
            seen[id(inner)] = (inner, value)
        return inner
    if isinstance(value, (list, tuple)):
        return type(value)(_unwrap(v, seen) for v in value)
    if isinstance(value, dict):
        return {k: _unwrap(v, seen) for k, v in value.items()}
    return value


def _rewrap(value: Any, inputs: dict[int, Any], wrap: bool) -> Any:
    # In-place and out= ops return their input: hand back the same object so identity (and autograd) holds.
    if isinstance(value, torch.Tensor):
        same = inputs.get(id(value))
        if same is not None and same[0] is value:
            return same[1]
        return NeuronTensor(value) if wrap else value
    if isinstance(value, (list, tuple)):
        return type(value)(_rewrap(v, inputs, wrap) for v in value)
    return value


# --- per-op PrivateUse1 kernels: a boxed Python fallback breaks under dispatch modes (see notes section 3) --


def _factory(func: Any) -> Any:
    name = op_name(func)

    def kernel(*args: Any, **kwargs: Any) -> Any:
        route = op_route(_STATE.snapshot, func, name)
        if route == "decompose":  # e.g. arange.start_step -> arange.start_out on a fresh neuron tensor
            return run_composite(func, args, kwargs)
        out = func(*args, **{**kwargs, "device": torch.device("cpu")})
        if route == "record":
            _track(name, op_dtypes((), {}, out))
        return _rewrap(out, {}, True)

    return kernel


def _factory_ops() -> list[Any]:
    """Every aten overload that makes tensors from no tensor input and takes `device=`: these reach a
    backend's own kernel, never a tensor subclass, so each needs a PrivateUse1 kernel (a boxed fallback breaks
    under modes)."""
    found = []
    for schema in torch._C._jit_get_all_schemas():
        if not schema.name.startswith("aten::") or schema.is_mutable:
            continue
        names = {a.name for a in schema.arguments}
        tensors = any("Tensor" in str(a.type) for a in schema.arguments)
        returns = schema.returns and all(str(r.type) == "Tensor" for r in schema.returns)
        if "device" in names and not tensors and returns:
            packet = getattr(torch.ops.aten, schema.name[len("aten::") :], None)
            func = getattr(packet, schema.overload_name or "default", None) if packet is not None else None
            if func is not None:
                found.append(func)
    return found


def _copy_kernel(self: Any, src: Any, non_blocking: bool = False) -> Any:
    # Reached with the Python key excluded (e.g. torch.tensor(..., device='neuron') copies into a new
    # wrapper).
    _track("aten::copy_", op_dtypes((self, src), {}))
    target = self.elem if isinstance(self, NeuronTensor) else self
    target.copy_(src.elem if isinstance(src, NeuronTensor) else src)
    return self


def _register_kernels(lib: torch.library.Library) -> None:
    lib.impl("copy_", _copy_kernel, "PrivateUse1")
    for func in _factory_ops():
        overload = func._overloadname
        qualified = func._schema.name.split("::", 1)[1] + ("" if overload == "default" else f".{overload}")
        lib.impl(qualified, _factory(func), "PrivateUse1")


# --- the device module (torch.neuron) -----------------------------------------------------------------------


class NeuronModule:
    """What torch expects of `torch.<backend>`; RNG state is the CPU generator's, since the data lives on
    CPU."""

    @staticmethod
    def is_available() -> bool:
        return True

    @staticmethod
    def is_initialized() -> bool:
        return True

    @staticmethod
    def device_count() -> int:
        return 1

    @staticmethod
    def current_device() -> int:
        return 0

    @staticmethod
    def set_device(device: Any) -> None:
        return None

    @staticmethod
    def synchronize(device: Any = None) -> None:
        return None

    @staticmethod
    def _is_in_bad_fork() -> bool:
        return False

    @staticmethod
    def manual_seed(seed: int) -> None:
        return None  # torch.manual_seed already seeded the CPU generator every NeuronTensor op draws from

    manual_seed_all = manual_seed

    @staticmethod
    def get_rng_state(device: Any = None) -> torch.Tensor:
        return torch.get_rng_state()

    @staticmethod
    def set_rng_state(new_state: torch.Tensor, device: Any = None) -> None:
        torch.set_rng_state(new_state)

    @staticmethod
    def get_amp_supported_dtype() -> list[torch.dtype]:
        return [torch.float16, torch.bfloat16, torch.float32]

    @staticmethod
    def is_bf16_supported() -> bool:
        return True

    @staticmethod
    def get_device_name(device: Any = None) -> str:
        return "neuron-migrate stand-in (CPU)"

    get_fallback_ops = staticmethod(get_fallback_ops)
    get_executed_ops = staticmethod(get_executed_ops)
    clear_op_tracking = staticmethod(clear_op_tracking)


_LIBS: list[torch.library.Library] = []


def allow_foreach(tensor_type: type) -> None:
    """Let torch.optim pick its foreach (multi-tensor) kernels for parameters of this tensor type, as it does
    for parameters on a real PrivateUse1 device (they are plain tensors there)."""
    from torch.optim import optimizer

    if tensor_type not in optimizer._foreach_supported_types:
        optimizer._foreach_supported_types.append(tensor_type)


def install(snapshot: Any = None, *, keep_going: bool = False) -> None:
    """Register the stand-in `neuron` device in THIS process (irreversible; a second call only swaps
    snapshot).

    `snapshot` (default: the newest shipped opdb snapshot) decides which ops count as native. With
    `keep_going`, unsupported ops are recorded (`get_unsupported_ops`) and computed instead of raising, so a
    trace can list all of them rather than stop at the first. Install before the process runs its first
    backward: the autograd engine sizes its per-device queues once, and a later neuron backward then fails
    an internal assert.
    """
    global _DEVICE
    if snapshot is None:
        from neuron_migrate.opdb.db import load_snapshot

        snapshot = load_snapshot()
    with _LOCK:
        _STATE.snapshot = snapshot
        _STATE.keep_going = keep_going
        _STATE.status_cache.clear()
    if _STATE.installed:
        return
    from torch.utils.backend_registration import _setup_privateuseone_for_python_backend

    _setup_privateuseone_for_python_backend(DEVICE_NAME, backend_module=NeuronModule())
    _DEVICE = torch.device(DEVICE_NAME, 0)
    impl = torch.library.Library("aten", "IMPL")
    _register_kernels(impl)
    fallbacks = torch.library.Library("_", "IMPL")
    register_autocast(impl, fallbacks)
    _LIBS.extend((impl, fallbacks))  # a Library deregisters its kernels when collected
    # Optimizers take the foreach path only for plain tensor types; a real neuron parameter is a plain tensor.
    allow_foreach(NeuronTensor)
    _STATE.installed = True
