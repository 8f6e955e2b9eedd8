"""The torch APIs outside `torch.cuda` / `torch.accelerator` that reach the device: recorded or emulated.

- `torch.amp.autocast` (entering a region) and `torch.amp.GradScaler` (construction) run as they are, with
  their configuration recorded: device type, dtype, enabled (after torch's own checks), scaler constants.
- `torch.manual_seed` records the CPU generator's seeding (the CUDA generators record theirs); a seed that
  leaves the generator as it already is records nothing.
- `torch.load(map_location=<a CUDA device>)` loads on CPU and places the result on the emulated device (an
  index that does not exist raises torch's error); other map locations are torch's own.
- `torch.compile` is validated (signature, `mode` and `options` together, known modes) and returns the
  function unchanged, in every environment: compiling takes tens of seconds per call on this machine. Under
  the emulation the call is recorded.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from typing import Any

import torch

from tests.differential.calls import device_key
from tests.differential.cuda_state import _seeded_state, active
from tests.differential.patches import Patches

REAL_LOAD = torch.load
REAL_MANUAL_SEED = torch.random.manual_seed
REAL_COMPILE = torch.compile
REAL_AUTOCAST_ENTER = torch.amp.autocast_mode.autocast.__enter__
REAL_SCALER_INIT = torch.amp.GradScaler.__init__
#: torch 2.13's compile modes (a test holds this equal to torch._inductor.list_mode_options())
COMPILE_MODES = ("default", "lite", "reduce-overhead", "max-autotune-no-cudagraphs", "max-autotune")


def bind(real: Callable[..., Any], args: tuple, kwargs: dict) -> inspect.BoundArguments:
    """`args`/`kwargs` bound to `real`'s parameters (defaults applied); a call that does not bind raises the
    TypeError the real function raises."""
    try:
        bound = inspect.signature(real).bind(*args, **kwargs)
    except TypeError:
        real(*args, **kwargs)  # raises torch's own TypeError (the message users would see)
        raise
    bound.apply_defaults()
    return bound


def _autocast_enter(self: Any) -> Any:
    out = REAL_AUTOCAST_ENTER(self)
    active().recorder.record(
        "autocast",
        str(self.device),
        str(self.fast_dtype),
        f"enabled={self._enabled}",
        f"cache_enabled={self._cache_enabled}",
        spelled=type(self).__module__ + ".autocast",
    )
    return out


@functools.wraps(REAL_SCALER_INIT)
def _scaler_init(self: Any, *args: Any, **kwargs: Any) -> None:
    recorder = active().recorder
    with recorder.outer():
        REAL_SCALER_INIT(self, *args, **kwargs)
    bound = bind(REAL_SCALER_INIT, (self, *args), kwargs).arguments
    recorder.record(
        "GradScaler",
        str(bound["device"]),
        f"enabled={self._enabled}",
        *(f"{k}={bound[k]}" for k in ("init_scale", "growth_factor", "backoff_factor", "growth_interval")),
        spelled=type(self).__module__ + ".GradScaler",
    )


@functools.wraps(REAL_MANUAL_SEED)
def _manual_seed(seed: Any) -> Any:
    if not torch.equal(torch.default_generator.get_state(), _seeded_state(int(seed))):
        active().recorder.record(
            "manual_seed", "cpu", str(int(seed)), spelled="torch.manual_seed", nested=True
        )
    return REAL_MANUAL_SEED(seed)


@functools.wraps(REAL_LOAD)
def _load(*args: Any, **kwargs: Any) -> Any:
    bound = bind(REAL_LOAD, args, kwargs)
    location = bound.arguments["map_location"]
    if isinstance(location, int) and not isinstance(location, bool):
        location = torch.device("cuda", location)
    if not isinstance(location, (str, torch.device)) or torch.device(location).type != "cuda":
        return REAL_LOAD(*args, **kwargs)
    cuda = active()
    device = torch.device(location)
    index = cuda.current if device.index is None else device.index
    if index >= cuda.device_count:
        raise RuntimeError(
            f"Attempting to deserialize object on CUDA device {index} but torch.cuda.device_count() "
            f"is {cuda.device_count}. Please use torch.load with map_location to map your storages to "
            "an existing device."
        )
    bound.arguments["map_location"] = "cpu"
    loaded = REAL_LOAD(*bound.args, **bound.kwargs)
    from tests.differential.emulation import placement

    placement().place_loaded(loaded, index)
    cuda.recorder.record("torch.load", device_key(location), spelled="torch.load")
    return loaded


@functools.wraps(REAL_COMPILE)
def checked_compile(*args: Any, **kwargs: Any) -> Any:
    """torch.compile's checks without compiling (see the module docstring)."""
    arguments = bind(REAL_COMPILE, args, kwargs).arguments
    mode, options = arguments["mode"], arguments["options"]
    if mode is not None and options is not None:
        raise RuntimeError(
            "Either mode or options can be specified, but both can't be specified at the same time."
        )
    if mode is not None and mode not in COMPILE_MODES:
        raise RuntimeError(f"Unrecognized mode={mode}, should be one of: {', '.join(COMPILE_MODES)}")
    from tests.differential.cuda_state import _ACTIVE

    if _ACTIVE:
        _ACTIVE[-1].recorder.record(
            "torch.compile",
            *(f"{k}={arguments[k]!r}" for k in ("mode", "backend", "fullgraph", "dynamic", "options")),
            spelled="torch.compile",
        )
    model = arguments["model"]
    return model if model is not None else (lambda fn: fn)


def install_checked_compile(patches: Patches) -> None:
    """`torch.compile` (and `nn.Module.compile`, which calls it) without compiling."""
    patches.set(torch, "compile", checked_compile)


def install(patches: Patches) -> None:
    """The recorders above, for one emulated run."""
    patches.set(torch.amp.autocast_mode.autocast, "__enter__", _autocast_enter)
    patches.set(torch.amp.GradScaler, "__init__", _scaler_init)
    patches.set(torch, "manual_seed", _manual_seed)
    patches.set(torch.random, "manual_seed", _manual_seed)
    patches.set(torch, "load", _load)
    patches.set(torch.serialization, "load", _load)
