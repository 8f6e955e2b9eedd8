"""Streams and events of the emulated CUDA machine: `torch.Stream` / `torch.Event` and their `torch.cuda` kin.

They keep the constructor signatures of torch 2.13 (`torch.Stream(device=None, *, priority=0)`,
`torch.cuda.Stream(device=None, priority=0, **kwargs)`,
`torch.Event(device=None, *, enable_timing=False, ...)`,
`torch.cuda.Event(enable_timing=False, blocking=False, interprocess=False, external=False)`), record what
reaches the device (creation, record, wait, synchronize, switching the current stream) and raise where CUDA
raises (`elapsed_time` on events that were not recorded or not created with `enable_timing=True`). A device
that is not CUDA (`torch.Stream("cpu")`) gets torch's own object.
"""

from __future__ import annotations

from typing import Any

import torch
from typing_extensions import Self

from tests.differential.cuda_state import active

REAL_STREAM = torch.Stream
REAL_EVENT = torch.Event


def _is_cuda(device: Any) -> bool:
    return device is None or isinstance(device, int) or torch.device(device).type == "cuda"


class Stream:
    """`torch.Stream` on the emulated machine."""

    def __new__(cls, device: Any = None, *args: Any, **kwargs: Any) -> Any:
        if not _is_cuda(device):
            return REAL_STREAM(device, *args, **kwargs)
        return super().__new__(cls)

    def __init__(self, device: Any = None, *, priority: int = 0) -> None:
        self._make(device, priority, "torch.Stream")

    def _make(self, device: Any, priority: int, spelled: str, label: str | None = None) -> None:
        cuda = active()
        self.device_index = cuda.check(cuda.resolve(device))
        self.device_type = "cuda"
        self.priority = priority
        self.label = label or cuda.label_stream()
        self.stream_id = 0 if label else cuda.streams_made
        self._previous: list[Stream] = []
        if not label:
            cuda.recorder.record("Stream", cuda.key(device), f"priority={priority}", spelled=spelled)

    @classmethod
    def default(cls, index: int) -> Stream:
        """The default stream of device `index` (it exists from the start; making it is not a call)."""
        stream = super().__new__(cls)
        stream._make(index, 0, "", label=f"default{index}")
        return stream

    @property
    def device(self) -> torch.device:
        return torch.device("cuda", self.device_index)

    @property
    def cuda_stream(self) -> int:
        return 0x1000 + self.stream_id

    def query(self) -> bool:
        return True

    def synchronize(self) -> None:
        active().recorder.record(
            "Stream.synchronize", self.label, spelled=f"{type(self).__name__}.synchronize"
        )

    def wait_event(self, event: Event) -> None:
        active().recorder.record("Stream.wait_event", self.label, event.label)

    def wait_stream(self, stream: Stream) -> None:
        active().recorder.record("Stream.wait_stream", self.label, getattr(stream, "label", repr(stream)))

    def record_event(self, event: Event | None = None) -> Event:
        event = Event() if event is None else event
        event.record(self)
        return event

    def __enter__(self) -> Self:
        self._previous.append(current_stream(self.device_index))
        switch_stream(self, "with Stream")
        return self

    def __exit__(self, *exc: object) -> None:
        switch_stream(self._previous.pop(), "with Stream (exit)")

    def __repr__(self) -> str:
        return f"<torch.Stream device=cuda:{self.device_index} {self.label} priority={self.priority}>"


class CudaStream(Stream):
    """`torch.cuda.Stream`: a `torch.Stream` whose constructor takes the priority positionally."""

    def __new__(cls, device: Any = None, priority: int = 0, **kwargs: Any) -> Any:
        return object.__new__(cls)

    def __init__(self, device: Any = None, priority: int = 0, **kwargs: Any) -> None:
        if device is not None and not isinstance(device, int) and torch.device(device).type != "cuda":
            raise ValueError(f"Expected a cuda device, but got: {device}")
        self._make(device, priority, "torch.cuda.Stream")


def current_stream(index: int) -> Stream:
    cuda = active()
    cuda.check(index)
    if not cuda.current_streams:
        cuda.default_streams = [Stream.default(i) for i in range(cuda.device_count)]
        cuda.current_streams = list(cuda.default_streams)
    return cuda.current_streams[index]


def default_stream(index: int) -> Stream:
    current_stream(index)
    return active().default_streams[index]


def switch_stream(stream: Any, spelled: str) -> None:
    """Make `stream` the current stream of its device (what `torch.cuda.set_stream` and `with stream:` do)."""
    if not isinstance(stream, Stream):
        raise TypeError(f"expected a CUDA stream, got {type(stream).__name__}")
    cuda = active()
    current_stream(stream.device_index)
    cuda.current_streams[stream.device_index] = stream
    cuda.recorder.record("set_stream", stream.label, spelled=spelled)


class Event:
    """`torch.Event` on the emulated machine."""

    def __new__(cls, device: Any = None, *args: Any, **kwargs: Any) -> Any:
        if not _is_cuda(device):
            return REAL_EVENT(device, *args, **kwargs)
        return super().__new__(cls)

    def __init__(
        self,
        device: Any = None,
        *,
        enable_timing: bool = False,
        blocking: bool = False,
        interprocess: bool = False,
    ) -> None:
        self._make(enable_timing, blocking, interprocess, "torch.Event")

    def _make(self, enable_timing: bool, blocking: bool, interprocess: bool, spelled: str) -> None:
        cuda = active()
        self.enable_timing, self.blocking, self.interprocess = (
            bool(enable_timing),
            bool(blocking),
            bool(interprocess),
        )
        self.label = cuda.label_event()
        self.recorded_at: int | None = None
        cuda.recorder.record(
            "Event",
            f"enable_timing={self.enable_timing}",
            f"blocking={self.blocking}",
            f"interprocess={self.interprocess}",
            spelled=spelled,
        )

    def record(self, stream: Stream | None = None) -> None:
        cuda = active()
        stream = current_stream(cuda.current) if stream is None else stream
        self.recorded_at = cuda.tick()
        cuda.recorder.record("Event.record", self.label, stream.label)

    def wait(self, stream: Stream | None = None) -> None:
        cuda = active()
        stream = current_stream(cuda.current) if stream is None else stream
        cuda.recorder.record("Event.wait", self.label, stream.label)

    def query(self) -> bool:
        return True

    def synchronize(self) -> None:
        active().recorder.record("Event.synchronize", self.label)

    def elapsed_time(self, end_event: Event) -> float:
        if not (self.enable_timing and end_event.enable_timing):
            raise RuntimeError("Both events must be created with argument 'enable_timing=True'.")
        if self.recorded_at is None or end_event.recorded_at is None:
            raise RuntimeError("Both events must be recorded before calculating elapsed time.")
        active().recorder.record("Event.elapsed_time", self.label, end_event.label)
        # the emulated clock: one millisecond per event recorded in between
        return float(end_event.recorded_at - self.recorded_at)

    def __repr__(self) -> str:
        return f"<torch.Event {self.label}>"


class CudaEvent(Event):
    """`torch.cuda.Event`: no device argument, the flags are positional."""

    def __new__(cls, *args: Any, **kwargs: Any) -> Any:
        return object.__new__(cls)

    def __init__(
        self,
        enable_timing: bool = False,
        blocking: bool = False,
        interprocess: bool = False,
        external: bool = False,
    ) -> None:
        self._make(enable_timing, blocking, interprocess, "torch.cuda.Event")
