"""Tensors on the emulated CUDA devices: a `TorchFunctionMode` that computes on CPU and keeps CUDA's view.

Every tensor the program places on a CUDA device (`.to("cuda")`, `.cuda()`, a factory with `device="cuda"`, a
module moved there, a checkpoint mapped there) is a CPU tensor the mode remembers as living on `cuda:i`. The
mode answers `.device`, `.is_cuda`, `get_device()` and `repr` as CUDA would, marks the results of operations
on such tensors, draws their random numbers from the device's own (emulated) generator, and raises where CUDA
raises: tensors of two devices in one operation, `.numpy()` of a device tensor, pinning a device tensor, an
index with no device. Transfers host -> device and device -> host, allocations and pinning are recorded.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import torch
from torch.overrides import TorchFunctionMode
from torch.utils._pytree import tree_leaves
from torch.utils.weak import WeakIdKeyDictionary

from tests.differential.calls import device_key
from tests.differential.cuda_state import EmulatedCuda

#: operations CUDA allows between a device tensor and a CPU tensor (copies, indexing with CPU indices)
MIXED_DEVICES_OK = frozenset(
    {
        "copy_",
        "__getitem__",
        "__setitem__",
        "index_put_",
        "_has_compatible_shallow_copy_type",
        "data.__set__",
        "grad.__set__",
        "__reduce_ex__",
        "__deepcopy__",
        "set_",
        "equal",
    }
)
#: torch functions that take a `device` keyword without making a tensor there
NOT_FACTORIES = frozenset({"_parse_to", "device"})


def _name(func: Any) -> str:
    """`to`, `ones`, ... and `device.__get__` for the getter of a Tensor property."""
    if type(func).__name__ == "method-wrapper":
        return f"{func.__self__.__name__}.{func.__name__}"
    return getattr(func, "__name__", repr(func))


class Placement(TorchFunctionMode):
    """The tensor side of the CUDA emulation (see the module docstring)."""

    def __init__(self, cuda: EmulatedCuda) -> None:
        super().__init__()
        self.cuda = cuda
        self.devices: WeakIdKeyDictionary = WeakIdKeyDictionary()
        self.pinned: WeakIdKeyDictionary = WeakIdKeyDictionary()

    # --- bookkeeping -------------------------------------------------------------------------------------

    def where(self, tensor: Any) -> int | None:
        """The emulated CUDA device of `tensor`, None for a CPU tensor."""
        return self.devices.get(tensor) if isinstance(tensor, torch.Tensor) else None

    def mark(self, value: Any, index: int | None) -> None:
        for tensor in tree_leaves(value):
            if not isinstance(tensor, torch.Tensor):
                continue
            if index is None:
                self.devices.pop(tensor, None)
            else:
                self.devices[tensor] = index

    def target(self, device: Any) -> tuple[str, int | None]:
        """(normalised argument, index) of a device argument; index None for a device that is not CUDA."""
        if _is_index(device):
            device = torch.device("cuda", device)
        device = torch.device(device)
        if device.type != "cuda":
            return device_key(device), None
        return device_key(device), self.cuda.check(
            self.cuda.current if device.index is None else device.index
        )

    @contextlib.contextmanager
    def generator_of(self, index: int) -> Iterator[None]:
        """Random numbers for device `index` come from its own generator (the CPU one is left alone)."""
        cpu = torch.default_generator.get_state()
        torch.default_generator.set_state(self.cuda.rng[index])
        try:
            yield
        finally:
            self.cuda.rng[index] = torch.default_generator.get_state()
            torch.default_generator.set_state(cpu)

    # --- dispatch ----------------------------------------------------------------------------------------

    def __torch_function__(self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        kwargs = kwargs or {}
        name = _name(func)
        handler = getattr(self, "on_" + name.replace(".", "_"), None)
        if handler is not None:
            return handler(func, args, kwargs)
        if kwargs.get("device") is not None and name not in NOT_FACTORIES:
            return self.factory(func, args, kwargs)
        return self.propagate(func, name, args, kwargs)

    def propagate(self, func: Any, name: str, args: tuple, kwargs: dict) -> Any:
        tensors = [t for t in tree_leaves((args, kwargs)) if isinstance(t, torch.Tensor)]
        on = {self.where(t) for t in tensors} - {None}
        if not on:
            return func(*args, **kwargs)
        index = min(on)
        if name not in MIXED_DEVICES_OK:
            if len(on) > 1:
                raise RuntimeError(
                    "Expected all tensors to be on the same device, but found at least two devices, "
                    f"cuda:{min(on)} and cuda:{max(on)}!"
                )
            if any(self.where(t) is None and t.dim() > 0 and t.device.type == "cpu" for t in tensors):
                raise RuntimeError(
                    "Expected all tensors to be on the same device, but found at least two devices, "
                    f"cuda:{index} and cpu!"
                )
        if name == "scaled_dot_product_attention":
            self.cuda.recorder.record("sdpa", _sdp_backends())
        if name.endswith((".__get__", ".__set__")):  # attribute access draws no random numbers
            out = func(*args, **kwargs)
        else:
            with self.generator_of(index):
                out = func(*args, **kwargs)
        if not (args and out is args[0]):  # an in-place op keeps its tensor where it is
            self.mark(out, index)
        return out

    def factory(self, func: Any, args: tuple, kwargs: dict) -> Any:
        key, index = self.target(kwargs["device"])
        if index is None:
            return func(*args, **kwargs)
        with self.generator_of(index):
            out = func(*args, **{**kwargs, "device": "cpu"})
        self.mark(out, index)
        self.placed(out, index)
        self.cuda.recorder.record("alloc", key, spelled=_name(func))
        return out

    def place_loaded(self, loaded: Any, index: int) -> None:
        """What `torch.load(map_location=cuda:i)` returns lives on device `index`, modules' tensors
        included."""
        tensors = [t for t in tree_leaves(loaded) if isinstance(t, torch.Tensor)]
        for module in (m for m in tree_leaves(loaded) if isinstance(m, torch.nn.Module)):
            tensors += [*module.parameters(), *module.buffers()]
        for tensor in tensors:
            self.mark(tensor, index)
        self.placed(tensors, index)

    def placed(self, out: Any, index: int) -> None:
        for tensor in tree_leaves(out):
            if isinstance(tensor, torch.Tensor):
                self.cuda.allocate(index, tensor.numel() * tensor.element_size())

    def move(
        self,
        tensor: torch.Tensor,
        key: str,
        index: int | None,
        non_blocking: bool,
        spelled: str,
        dtype: torch.dtype | None = None,
        copy: bool = False,
        memory_format: Any = None,
    ) -> torch.Tensor:
        """`tensor` on device `index` (None: the CPU); a transfer between host and device is recorded."""
        source = self.where(tensor)
        options: dict[str, Any] = {"non_blocking": non_blocking}
        if dtype is not None:
            options["dtype"] = dtype
        if memory_format is not None:
            options["memory_format"] = memory_format
        transfer = source != index
        out = tensor.to("cpu", copy=copy or transfer, **options)
        if transfer or out is not tensor:
            self.mark(out, index)
        if transfer:
            if index is not None:
                self.placed(out, index)
            self.cuda.recorder.record("to", key, f"non_blocking={bool(non_blocking)}", spelled=spelled)
        return out

    # --- handlers, by torch function name ----------------------------------------------------------------

    def on_to(self, func: Any, args: tuple, kwargs: dict) -> Any:
        tensor, rest = args[0], args[1:]
        if rest and isinstance(rest[0], torch.Tensor):
            other = rest[0]
            index = self.where(other)
            key = f"cuda:{index}" if index is not None else "cpu"
            _, dtype, non_blocking, memory_format = torch._C._nn._parse_to(*rest, **kwargs)
            if index is None and other.device.type != "cpu":
                return func(*args, **kwargs)
        else:
            # torch.device(i) names the accelerator's device i: CUDA here
            if rest and _is_index(rest[0]):
                rest = (torch.device("cuda", rest[0]), *rest[1:])
            if _is_index(kwargs.get("device")):
                kwargs = {**kwargs, "device": torch.device("cuda", kwargs["device"])}
            device, dtype, non_blocking, memory_format = torch._C._nn._parse_to(
                *rest, **{k: v for k, v in kwargs.items() if k != "copy"}
            )
            if device is None:
                return self.propagate(func, "to", args, kwargs)
            key, index = self.target(device)
            if index is None and device.type != "cpu":
                return func(*args, **kwargs)
        return self.move(
            tensor, key, index, non_blocking, "Tensor.to", dtype, kwargs.get("copy", False), memory_format
        )

    def on_cuda(self, func: Any, args: tuple, kwargs: dict) -> Any:
        tensor, device, non_blocking, memory_format = _bind_cuda(*args, **kwargs)
        if device is None:
            key, index = "cuda", self.cuda.check(self.cuda.current)
        elif not _is_index(device) and torch.device(device).type != "cuda":
            raise RuntimeError("Invalid device, must be cuda device")
        else:
            key, index = self.target(device)
        return self.move(tensor, key, index, non_blocking, "Tensor.cuda", memory_format=memory_format)

    def on_cpu(self, func: Any, args: tuple, kwargs: dict) -> Any:
        tensor = args[0]
        if self.where(tensor) is None:
            return func(*args, **kwargs)
        return self.move(tensor, "cpu", None, False, "Tensor.cpu")

    def on_type(self, func: Any, args: tuple, kwargs: dict) -> Any:
        tensor = args[0]
        wanted = args[1] if len(args) > 1 else kwargs.get("dtype")
        if wanted is None:
            out = func(*args, **kwargs)
            return out.replace("torch.", "torch.cuda.", 1) if self.where(tensor) is not None else out
        if isinstance(wanted, str):
            name = wanted
        elif type(wanted).__name__ == "tensortype":  # torch.cuda.HalfTensor and its kin
            name = f"{wanted.__module__}.{wanted.__name__}"
        else:
            name = None
        if isinstance(name, str) and name.startswith("torch.cuda."):
            dtype = getattr(torch, name.rsplit(".", 1)[1]).dtype
            return self.move(
                tensor,
                "cuda",
                self.cuda.current,
                bool(kwargs.get("non_blocking", False)),
                "Tensor.type",
                dtype=dtype,
            )
        return self.propagate(func, "type", args, kwargs)

    def on_pin_memory(self, func: Any, args: tuple, kwargs: dict) -> Any:
        tensor = args[0]
        if self.where(tensor) is not None:
            raise RuntimeError(f"cannot pin '{on_type_name(tensor)}' only dense CPU tensors can be pinned")
        out = tensor.clone()
        self.pinned[out] = True
        self.cuda.recorder.record("pin_memory", spelled="Tensor.pin_memory")
        return out

    def on_is_pinned(self, func: Any, args: tuple, kwargs: dict) -> Any:
        return args[0] in self.pinned or func(*args, **kwargs)

    def on_numpy(self, func: Any, args: tuple, kwargs: dict) -> Any:
        index = self.where(args[0])
        if index is not None:
            raise TypeError(
                f"can't convert cuda:{index} device type tensor to numpy. Use Tensor.cpu() to copy the "
                "tensor to host memory first."
            )
        return func(*args, **kwargs)

    def on_device(self, func: Any, args: tuple, kwargs: dict) -> Any:
        # torch.device(0) names the accelerator's device 0
        if len(args) == 1 and _is_index(args[0]) and not kwargs:
            return torch.device("cuda", args[0])
        return func(*args, **kwargs)

    def on_device___get__(self, func: Any, args: tuple, kwargs: dict) -> Any:
        index = self.where(args[0])
        return func(*args, **kwargs) if index is None else torch.device("cuda", index)

    def on_is_cuda___get__(self, func: Any, args: tuple, kwargs: dict) -> Any:
        return self.where(args[0]) is not None or func(*args, **kwargs)

    def on_get_device(self, func: Any, args: tuple, kwargs: dict) -> Any:
        index = self.where(args[0])
        return func(*args, **kwargs) if index is None else index

    def on_data___set__(self, func: Any, args: tuple, kwargs: dict) -> Any:
        out = func(*args, **kwargs)
        self.mark(args[0], self.where(args[1]))  # Module._apply moves a parameter by setting its .data
        return out

    def on___repr__(self, func: Any, args: tuple, kwargs: dict) -> Any:
        text = func(*args, **kwargs)
        index = self.where(args[0])
        return text if index is None else _with_device(text, index)

    def on___format__(self, func: Any, args: tuple, kwargs: dict) -> Any:
        tensor, spec = args[0], args[1] if len(args) > 1 else ""
        if self.where(tensor) is not None and tensor.dim() > 0 and not spec:
            return self.on___repr__(torch.Tensor.__repr__, (tensor,), {})
        return func(*args, **kwargs)


def _is_index(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _bind_cuda(
    tensor: torch.Tensor,
    device: Any = None,
    non_blocking: bool = False,
    memory_format: Any = torch.preserve_format,
) -> tuple[torch.Tensor, Any, bool, Any]:
    """The arguments of
    `Tensor.cuda(device=None, non_blocking=False, memory_format=torch.preserve_format)`."""
    return tensor, device, non_blocking, memory_format


def on_type_name(tensor: torch.Tensor) -> str:
    return torch.Tensor.type(tensor).replace("torch.", "torch.cuda.", 1)


def _with_device(text: str, index: int) -> str:
    """A CPU tensor's repr as CUDA prints it: `device='cuda:i'` after the values."""
    cut = len(text) - 1
    for marker in (", size=", ", dtype=", ", requires_grad=", ", grad_fn="):
        at = text.find(marker)
        if 0 <= at < cut:
            cut = at
    return f"{text[:cut]}, device='cuda:{index}'{text[cut:]}"


def _sdp_backends() -> str:
    """The scaled-dot-product-attention kernels enabled for CUDA (what `sdpa_kernel` / `sdp_kernel`
    choose)."""
    flags = {
        "flash": torch.backends.cuda.flash_sdp_enabled(),
        "mem_efficient": torch.backends.cuda.mem_efficient_sdp_enabled(),
        "math": torch.backends.cuda.math_sdp_enabled(),
        "cudnn": torch.backends.cuda.cudnn_sdp_enabled(),
    }
    return "+".join(name for name, on in flags.items() if on) or "none"
