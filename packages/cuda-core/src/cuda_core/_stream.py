"""Streams and events.

A `Stream` either owns its handle (created here, destroyed by `close`, by its
context manager or by its finalizer) or borrows one (`Stream.wrap`, e.g. the
current PyTorch stream), which it never destroys.
"""

from __future__ import annotations

import weakref
from typing import Any

from cuda_core import _driver
from cuda_core._device import Device, resolve_device


def stream_handle_of(obj: Any) -> int:
    """The raw ``CUstream`` value of a foreign stream object or int.

    Accepts an int, a cuda_core `Stream`, an object with ``__cuda_stream__()``
    (returning ``(version, handle)``), one with a ``cuda_stream`` attribute
    (PyTorch), or a CuPy stream (``.ptr``; not memory, whose ``.ptr`` is an address).
    """
    if isinstance(obj, int) and not isinstance(obj, bool):
        return obj
    if isinstance(obj, Stream):
        return int(obj.handle)
    protocol = getattr(obj, "__cuda_stream__", None)
    if callable(protocol):
        value = protocol()
        return int(value[1]) if isinstance(value, tuple) else int(value)
    if hasattr(obj, "cuda_stream"):
        return int(obj.cuda_stream)
    if hasattr(obj, "ptr") and "stream" in type(obj).__name__.lower():
        return int(obj.ptr)
    raise TypeError(
        f"cannot take a CUDA stream handle from {type(obj).__name__}: expected an int, "
        "an object with __cuda_stream__, or one with a .cuda_stream attribute"
    )


class Stream:
    """A CUDA stream on a device.

    Create one with `Stream.create`, wrap a foreign handle with `Stream.wrap`, or
    take the legacy default stream with `Stream.default`.
    """

    __slots__ = ("device", "handle", "owned", "_finalizer", "__weakref__")

    def __init__(self, handle: Any, device: Device, *, owned: bool) -> None:
        self.device = device
        self.handle = handle  # a CUstream
        self.owned = owned
        self._finalizer = (
            weakref.finalize(self, _driver.release, _driver.api(), "cuStreamDestroy", handle)
            if owned
            else None
        )

    @classmethod
    def create(
        cls, device: Device | int | None = None, *, non_blocking: bool = True, priority: int = 0
    ) -> Stream:
        """A new stream.

        Args:
            device: the device (default: the current one).
            non_blocking: if True, the stream does not synchronize with the legacy
                default stream (``CU_STREAM_NON_BLOCKING``).
            priority: lower numbers are higher priority; see `priority_range`.
        """
        dev = resolve_device(device)
        api = _driver.api()
        low, high = cls.priority_range(dev)
        if not high <= priority <= low:
            raise ValueError(
                f"Stream.create: priority must lie in [{high}, {low}] (greatest to least), got {priority}"
            )
        flags = int(api.CUstream_flags.CU_STREAM_NON_BLOCKING if non_blocking else api.CUstream_flags.CU_STREAM_DEFAULT)
        handle = _driver.call("cuStreamCreateWithPriority", flags, priority)
        return cls(handle, dev, owned=True)

    @classmethod
    def wrap(cls, foreign: Any, device: Device | int | None = None) -> Stream:
        """Borrows a stream created elsewhere (never destroyed by cuda_core).

        ``foreign`` is an int handle or an object such as
        ``torch.cuda.current_stream()`` (see `stream_handle_of`).
        """
        dev = resolve_device(device)
        handle = _driver.api().CUstream(stream_handle_of(foreign))
        return cls(handle, dev, owned=False)

    @classmethod
    def default(cls, device: Device | int | None = None) -> Stream:
        """The legacy default ("null") stream of the device's context."""
        dev = resolve_device(device)
        return cls(_driver.api().CUstream(0), dev, owned=False)

    @staticmethod
    def priority_range(device: Device | int | None = None) -> tuple[int, int]:
        """(least, greatest) stream priority; greatest is numerically smallest."""
        resolve_device(device)
        least, greatest = _driver.call("cuCtxGetStreamPriorityRange")
        return int(least), int(greatest)

    def __int__(self) -> int:
        return int(self.handle)

    def __cuda_stream__(self) -> tuple[int, int]:
        return (0, int(self.handle))

    def __repr__(self) -> str:
        kind = "owned" if self.owned else "borrowed"
        return f"<Stream 0x{int(self.handle):x} on device {self.device.ordinal} ({kind})>"

    @property
    def closed(self) -> bool:
        return self._finalizer is not None and not self._finalizer.alive

    def _check_open(self) -> None:
        if self.closed:
            raise ValueError("the stream has been closed")

    @property
    def priority(self) -> int:
        self._check_open()
        return int(_driver.call("cuStreamGetPriority", self.handle))

    def synchronize(self) -> None:
        """Blocks until all work queued on the stream has finished."""
        self._check_open()
        self.device.activate()
        _driver.call("cuStreamSynchronize", self.handle)

    def query(self) -> bool:
        """True if all queued work has finished (never blocks)."""
        self._check_open()
        return _driver.query("cuStreamQuery", self.handle)

    def wait(self, event: Event) -> None:
        """Makes later work on this stream wait for ``event`` (no host blocking)."""
        self._check_open()
        _driver.call("cuStreamWaitEvent", self.handle, event.handle, 0)

    def wait_value32(self, address: int, value: int) -> None:
        """Makes later work on this stream wait until the 32-bit word at ``address``
        (device-visible memory, e.g. a mapped `PinnedBuffer`'s `device_ptr`) is at least
        ``value`` (``cuStreamWaitValue32``, GEQ): a gate the host opens by writing it."""
        self._check_open()
        flags = int(_driver.api().CUstreamWaitValue_flags.CU_STREAM_WAIT_VALUE_GEQ)
        _driver.call("cuStreamWaitValue32", self.handle, address, value, flags)

    def record(self, event: Event | None = None) -> Event:
        """Records ``event`` (a new timing-disabled one by default) on this stream."""
        self._check_open()
        if event is None:
            event = Event.create(self.device, timing=False)
        event.record(self)
        return event

    def close(self) -> None:
        """Destroys an owned stream (after its queued work); borrowed ones are left alone."""
        if self._finalizer is not None:
            self._finalizer()

    def __enter__(self) -> Stream:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # Stream capture lives in _graph (begin_capture / end_capture / capture).


class Event:
    """A CUDA event: a marker in a stream that the host or other streams can wait on."""

    __slots__ = ("device", "handle", "timing", "_finalizer", "__weakref__")

    def __init__(self, handle: Any, device: Device, *, timing: bool) -> None:
        self.device = device
        self.handle = handle
        self.timing = timing
        self._finalizer = weakref.finalize(self, _driver.release, _driver.api(), "cuEventDestroy", handle)

    @classmethod
    def create(
        cls,
        device: Device | int | None = None,
        *,
        timing: bool = True,
        blocking_sync: bool = False,
    ) -> Event:
        """A new event.

        Args:
            timing: record timestamps (needed for `elapsed_ms`); timing-disabled
                events are cheaper to record and wait on.
            blocking_sync: `synchronize` yields the CPU instead of spinning.
        """
        dev = resolve_device(device)
        flags_enum = _driver.api().CUevent_flags
        flags = 0
        if not timing:
            flags |= int(flags_enum.CU_EVENT_DISABLE_TIMING)
        if blocking_sync:
            flags |= int(flags_enum.CU_EVENT_BLOCKING_SYNC)
        handle = _driver.call("cuEventCreate", flags)
        return cls(handle, dev, timing=timing)

    def __repr__(self) -> str:
        return f"<Event 0x{int(self.handle):x} on device {self.device.ordinal}>"

    @property
    def closed(self) -> bool:
        return not self._finalizer.alive

    def record(self, stream: Stream) -> None:
        """Marks the current end of ``stream``'s queue."""
        if self.closed:
            raise ValueError("the event has been closed")
        _driver.call("cuEventRecord", self.handle, stream.handle)

    def synchronize(self) -> None:
        """Blocks until the work before the recorded point has finished."""
        _driver.call("cuEventSynchronize", self.handle)

    def query(self) -> bool:
        """True if the recorded work has finished (never blocks)."""
        return _driver.query("cuEventQuery", self.handle)

    def elapsed_ms(self, end: Event) -> float:
        """Milliseconds between this event and ``end`` (both recorded and complete)."""
        if not (self.timing and end.timing):
            raise ValueError("Event.elapsed_ms: both events must be created with timing=True")
        return float(_driver.call("cuEventElapsedTime", self.handle, end.handle))

    def close(self) -> None:
        self._finalizer()

    def __enter__(self) -> Event:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()
