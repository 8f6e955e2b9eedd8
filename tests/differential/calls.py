"""What the CUDA emulation records: one `Call` per call that reaches a device, with its arguments normalised.

Two programs behave the same on CUDA when they make the same calls in the same order. The names are canonical
(the `torch.accelerator` vocabulary where one exists), so `torch.cuda.synchronize()` and
`torch.accelerator.synchronize()` are one call; the API the program spelled is kept for messages only.

Device arguments are normalised the way the device sees them: `None`, `"cuda"`, `torch.device("cuda")` and
`torch.device("cuda", None)` all mean "the current CUDA device" and become `"cuda"`; an int `i`, `"cuda:i"`
and `torch.device("cuda", i)` become `"cuda:i"`. `"cuda:0"` stays different from `"cuda"` (they differ as soon
as the current device is not 0).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

import torch

_DEVICE_STRING = re.compile(r"^([a-z_0-9]+)(?::(-?\d+))?$")


def device_key(value: Any, kind: str = "cuda") -> str:
    """The normalised form of a device argument (see the module docstring); anything else gets its repr."""
    if value is None:
        return kind
    if isinstance(value, bool):  # a bool is an int to Python, never a device
        return repr(value)
    if isinstance(value, int):
        return f"{kind}:{value}"
    if isinstance(value, torch.device):
        return value.type if value.index is None else f"{value.type}:{value.index}"
    if isinstance(value, str) and (m := _DEVICE_STRING.match(value)):
        return m[1] if m[2] is None else f"{m[1]}:{int(m[2])}"
    return repr(value)


@dataclass(frozen=True)
class Call:
    """One call that reached the (emulated) device: canonical API, normalised arguments, and what was
    spelled."""

    api: str
    args: tuple[str, ...] = ()
    spelled: str = field(default="", compare=False)

    def __str__(self) -> str:
        where = f"  [{self.spelled}]" if self.spelled and self.spelled != self.api else ""
        return f"{self.api}({', '.join(self.args)}){where}"

    @property
    def key(self) -> str:
        """What is compared: the canonical call without the spelling."""
        return f"{self.api}({', '.join(self.args)})"


class Recorder:
    """The ordered log of device calls of one run.

    `outer` marks a public API call in progress: the calls it makes internally (torch.accelerator's
    `memory_allocated` calls `memory_stats`, `synchronize` asks for the current index) are part of it and not
    recorded again.
    """

    def __init__(self) -> None:
        self.calls: list[Call] = []
        self.depth = 0

    def record(self, api: str, *args: Any, spelled: str = "", nested: bool = False) -> None:
        """Append a call, unless it happens inside another recorded call (`nested`: record it anyway, for
        effects that stay visible after the outer call, such as the generators `torch.manual_seed` seeds)."""
        if self.depth == 0 or nested:
            self.calls.append(
                Call(api, tuple(a if isinstance(a, str) else repr(a) for a in args), spelled or api)
            )

    def outer(self) -> _Outer:
        return _Outer(self)


class _Outer:
    def __init__(self, recorder: Recorder) -> None:
        self.recorder = recorder

    def __enter__(self) -> None:
        self.recorder.depth += 1

    def __exit__(self, *exc: object) -> None:
        self.recorder.depth -= 1
