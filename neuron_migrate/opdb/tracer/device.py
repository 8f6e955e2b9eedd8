"""The stand-in `neuron` device, for machines without Trainium: it fails only where Trainium fails.

Two implementations behind one API:

- `stand-in` — the C++ PrivateUse1 backend (`native_device`, sources in `csrc/`), built on first use: real
  tensors over host memory, synchronize, streams, events with timing, a caching allocator with statistics,
  pinned memory, generators; CPU kernels compute every op, tracked against the opdb snapshot.
- `stand-in-python` — the older pure-Python wrapper-tensor device (`python_device`), the fallback where the
  extension cannot be built (no C++ compiler or ninja). It lacks most of the runtime API.

`NEURON_MIGRATE_STANDIN=auto|cpp|python` chooses (default auto: C++ when it builds). Registration is
process-wide and permanent: call `install` only in a child process (the tracer and `opdb probe` do).
The tracking calls are torch-neuronx's: `get_fallback_ops`, `get_executed_ops`, `clear_op_tracking`.
"""

from __future__ import annotations

import os
from types import ModuleType
from typing import Any

from neuron_migrate.opdb.tracer import python_device
from neuron_migrate.opdb.tracer.extension import ExtensionUnavailable

CHOICES = ("auto", "cpp", "python")
_STATE: dict[str, Any] = {"backend": None, "kind": None, "reason": None}


def install(snapshot: Any = None, *, keep_going: bool = False, prefer: str | None = None) -> str:
    """Register the stand-in in THIS process and return its kind (`stand-in` or `stand-in-python`).

    `snapshot` (default: the newest shipped) decides which ops count as native; with `keep_going`, unsupported
    ops are recorded and computed instead of raising. A second call only swaps the snapshot. Install before
    the process runs its first backward (the autograd engine sizes its per-device queues once)."""
    if snapshot is None:
        from neuron_migrate.opdb.db import load_snapshot

        snapshot = load_snapshot()
    backend = _STATE["backend"]
    if backend is not None:
        backend.install(snapshot, keep_going=keep_going)
        return _STATE["kind"]
    prefer = prefer or os.environ.get("NEURON_MIGRATE_STANDIN") or "auto"
    if prefer not in CHOICES:
        raise ValueError(f"NEURON_MIGRATE_STANDIN={prefer}: use one of {', '.join(CHOICES)}")
    if prefer != "python":
        from neuron_migrate.opdb.tracer import native_device

        try:
            native_device.install(snapshot, keep_going=keep_going)
            _STATE.update(backend=native_device, kind="stand-in")
            return "stand-in"
        except ExtensionUnavailable as err:
            if prefer == "cpp":
                raise
            _STATE["reason"] = str(err)
    python_device.install(snapshot, keep_going=keep_going)
    _STATE.update(backend=python_device, kind="stand-in-python")
    return "stand-in-python"


def kind() -> str | None:
    """`stand-in`, `stand-in-python`, or None before `install`."""
    return _STATE["kind"]


def fallback_reason() -> str | None:
    """Why the pure-Python stand-in runs instead of the C++ one (None when it does not)."""
    return _STATE["reason"]


def is_installed() -> bool:
    """Whether `install` ran in this process (the differential harness checks it did not, before forking)."""
    return _STATE["backend"] is not None


def _backend() -> ModuleType:
    if _STATE["backend"] is None:
        raise RuntimeError("the stand-in neuron device is not installed in this process")
    return _STATE["backend"]


def get_fallback_ops() -> set[str]:
    """Ops (`aten::name.overload`) that ran through the CPU fallback since the last `clear_op_tracking`."""
    return _backend().get_fallback_ops()


def get_executed_ops() -> set[str]:
    """Ops that ran natively on the stand-in since the last `clear_op_tracking`."""
    return _backend().get_executed_ops()


def get_unsupported_ops() -> set[str]:
    """Ops the snapshot marks unsupported that were reached (only with `keep_going`)."""
    return _backend().get_unsupported_ops()


def get_widened_ops() -> dict[tuple[str, tuple[str, ...]], str]:
    """(op, dtypes) the stand-in computed in a wider dtype (its CPU kernel lacks theirs), with the note."""
    return _backend().get_widened_ops()


def clear_op_tracking() -> None:
    """Forget the ops recorded so far."""
    _backend().clear_op_tracking()


allow_foreach = python_device.allow_foreach
