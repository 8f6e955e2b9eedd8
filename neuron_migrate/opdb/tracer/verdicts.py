"""What stopped a traced step: the `error_kind` of a TraceResult, and how an exception is told apart.

- `neuron`: the step stopped where Trainium would stop — an op the opdb calls unsupported, or an op that runs
  through the CPU fallback on neuron whose CPU kernel lacks the dtype (the error names op and dtype);
- `stand_in`: a limitation of the stand-in itself (an API it lacks, a dtype it cannot compute): never a neuron
  failure;
- `target`: the user's code or model failed for a reason that is not the device;
- `timeout`, `memory`, `crash`: the bounded child process was stopped (set by the parent, `runner`).

The stand-in's own errors start with one of the two prefixes below; both devices (C++ and Python) raise with
them, so the child classifies an exception by its message.
"""

from __future__ import annotations

ERROR_KINDS = ("neuron", "stand_in", "target", "timeout", "memory", "crash")
NEURON_PREFIX = "fails on neuron: "
STAND_IN_PREFIX = "stand-in limitation: "


def kind_of(message: str) -> str:
    """The error kind an exception message shows: `neuron`, `stand_in`, else `target`."""
    if NEURON_PREFIX in message:
        return "neuron"
    if STAND_IN_PREFIX in message:
        return "stand_in"
    return "target"
