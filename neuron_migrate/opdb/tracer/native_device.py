"""The C++ stand-in `neuron` device: real PrivateUse1 tensors over host memory (see `csrc/`).

`install` loads the extension (building it on first use), names PrivateUse1 `neuron`, registers `torch.neuron`
(`neuron_module`), the tensor/module/storage methods (`.neuron()`, `.is_neuron`), the tracked kernels for the
overloads the recorder records as themselves, and autocast. The extension asks back, once per (op, input
dtypes), what the opdb snapshot says; it raises for unsupported ops unless `keep_going`.
"""

from __future__ import annotations

from typing import Any

import torch

from neuron_migrate.opdb.tracer import extension, neuron_module
from neuron_migrate.opdb.tracer.autocast import register_autocast
from neuron_migrate.opdb.tracer.routing import device_kernels, worst_support
from neuron_migrate.opdb.tracer.verdicts import NEURON_PREFIX, STAND_IN_PREFIX

DEVICE_NAME = "neuron"
_LIBS: list[torch.library.Library] = []
_INSTALLED: dict[str, Any] = {}


def _configure(ext: Any, snapshot: Any, keep_going: bool) -> None:
    def resolve(name: str, dtypes: tuple[str, ...]) -> str:
        return worst_support(snapshot, name, dtypes).status

    ext.configure(resolve, NEURON_PREFIX, STAND_IN_PREFIX, str(snapshot.version), keep_going)


def install(snapshot: Any, *, keep_going: bool = False, devices: int = 1) -> None:
    """Register the C++ stand-in in THIS process (irreversible; a second call swaps the snapshot only).

    Raises `extension.ExtensionUnavailable` when the extension cannot be built or loaded here."""
    ext = extension.load()
    if _INSTALLED:
        _configure(ext, snapshot, keep_going)
        if _INSTALLED["snapshot"] is not snapshot:
            ext.register_kernels(device_kernels(snapshot, exclude=set(ext.own_kernels())))
            _INSTALLED["snapshot"] = snapshot
        return
    ext.set_device_count(devices)
    _configure(ext, snapshot, keep_going)
    torch.utils.rename_privateuse1_backend(DEVICE_NAME)
    for name in ("get_fallback_ops", "get_executed_ops", "get_unsupported_ops", "clear_op_tracking"):
        setattr(neuron_module, name, globals()[name])
    torch._register_device_module(DEVICE_NAME, neuron_module)
    torch.utils.generate_methods_for_privateuse1_backend(for_tensor=True, for_module=True, for_storage=True)
    ext.register_kernels(device_kernels(snapshot, exclude=set(ext.own_kernels())))
    impl, fallbacks = torch.library.Library("aten", "IMPL"), torch.library.Library("_", "IMPL")
    register_autocast(impl, fallbacks)
    _LIBS.extend((impl, fallbacks))  # a Library deregisters its kernels when collected
    _INSTALLED["snapshot"] = snapshot


def _tracked() -> dict[str, Any]:
    return extension.load().tracked()


def get_fallback_ops() -> set[str]:
    """Ops (`aten::name.overload`) that ran through the CPU fallback since the last `clear_op_tracking`."""
    return set(_tracked()["fallback"])


def get_executed_ops() -> set[str]:
    """Ops that ran natively on the (stand-in) device since the last `clear_op_tracking`."""
    return set(_tracked()["executed"])


def get_unsupported_ops() -> set[str]:
    """Ops the snapshot marks unsupported that were reached (only with `keep_going`)."""
    return set(_tracked()["unsupported"])


def get_widened_ops() -> dict[tuple[str, tuple[str, ...]], str]:
    """(op, input dtypes) computed in a wider dtype because the CPU kernel lacks theirs, with the note."""
    return {(op, tuple(dtypes.split(","))): note for op, dtypes, note in _tracked()["widened"]}


def clear_op_tracking() -> None:
    """Forget the ops recorded so far."""
    extension.load().clear_tracking()
