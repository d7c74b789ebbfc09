"""Scheduling policies: which stream the next op runs on.

A policy makes one decision, the stream; everything else (ordering, events,
completion) is the ops'. ``None`` as a stream means *host mode*: ops run
eagerly on the calling thread with no driver at all (cutile's interpreter
backend), under the same ownership rules.
"""

from __future__ import annotations

import contextvars
import itertools
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Protocol, runtime_checkable

import cuda_core


@runtime_checkable
class SchedulingPolicy(Protocol):
    """Anything with ``next_stream()``: a user-defined policy needs nothing more."""

    def next_stream(self) -> cuda_core.Stream | None:
        """The stream for the next op (None: run on the host, eagerly)."""
        ...


class HostPolicy:
    """Runs every op eagerly on the host (stream None): the interpreter's policy."""

    def next_stream(self) -> None:
        """Always None: the op runs on the host."""
        return None

    def __repr__(self) -> str:
        return "HostPolicy()"


class SingleStream:
    """Every op on one stream: strict submission order, no overlap.

    Args:
        stream: the stream (default: a new non-blocking one, created on first use).
        device: the device of the new stream (default: the current one).
    """

    def __init__(self, stream: cuda_core.Stream | None = None, *, device: cuda_core.Device | int | None = None) -> None:
        self._stream = stream
        self._device = device
        self._lock = threading.Lock()

    @property
    def stream(self) -> cuda_core.Stream:
        """The stream (created on first access if none was given)."""
        if self._stream is None:
            with self._lock:
                if self._stream is None:
                    self._stream = cuda_core.Stream.create(self._device)
        return self._stream

    def next_stream(self) -> cuda_core.Stream:
        """The one stream."""
        return self._stream if self._stream is not None else self.stream

    def __repr__(self) -> str:
        return f"SingleStream({self._stream!r})"


class RoundRobin:
    """A pool of streams used in turn, so that independent ops may overlap.

    Args:
        num_streams: pool size (default 4), ignored when ``streams`` is given.
        device: the device of the streams (default: the current one).
        streams: use these streams instead of creating new ones.

    Streams are created on first use, so building a policy never touches the driver.
    """

    def __init__(
        self,
        num_streams: int = 4,
        *,
        device: cuda_core.Device | int | None = None,
        streams: Sequence[cuda_core.Stream] | None = None,
    ) -> None:
        if streams is None and num_streams < 1:
            raise ValueError(f"RoundRobin: num_streams must be >= 1, got {num_streams}")
        if streams is not None and not streams:
            raise ValueError("RoundRobin: streams must not be empty")
        self._num = len(streams) if streams is not None else num_streams
        self._device = device
        self._streams: tuple[cuda_core.Stream, ...] | None = tuple(streams) if streams is not None else None
        self._counter = itertools.count()
        self._lock = threading.Lock()

    @property
    def streams(self) -> tuple[cuda_core.Stream, ...]:
        """The pool (created on first access)."""
        if self._streams is None:
            with self._lock:
                if self._streams is None:
                    self._streams = tuple(cuda_core.Stream.create(self._device) for _ in range(self._num))
        return self._streams

    def next_stream(self) -> cuda_core.Stream:
        """The next stream of the pool, in turn (thread-safe). (cuda_async's native
        sync path does the same in C for this class: keep the two alike.)"""
        streams = self._streams if self._streams is not None else self.streams
        return streams[next(self._counter) % len(streams)]

    def __repr__(self) -> str:
        return f"RoundRobin({self._num})"


_default: SchedulingPolicy | None = None
_default_lock = threading.Lock()
_scoped: contextvars.ContextVar[SchedulingPolicy | None] = contextvars.ContextVar("cuda_async_policy", default=None)


def default_policy() -> SchedulingPolicy:
    """The policy ops use when none is given.

    In order: the innermost `using_policy` block, the one set by
    `set_default_policy`, else a `RoundRobin` of 4 streams on device 0 where a
    GPU is present and `HostPolicy` where none is.
    """
    scoped = _scoped.get()
    if scoped is not None:
        return scoped
    global _default
    if _default is None:
        with _default_lock:
            if _default is None:
                # (on device 0, not on whichever device is current when its streams are made)
                _default = RoundRobin(4, device=0) if cuda_core.is_available() else HostPolicy()
    return _default


def set_default_policy(policy: SchedulingPolicy | None) -> None:
    """Sets the process-wide default policy (None: back to the automatic choice)."""
    global _default
    if policy is not None and not isinstance(policy, SchedulingPolicy):
        raise TypeError(f"set_default_policy: expected an object with next_stream(), got {type(policy).__name__}")
    with _default_lock:
        _default = policy


@contextmanager
def using_policy(policy: SchedulingPolicy) -> Iterator[SchedulingPolicy]:
    """Makes ``policy`` the default inside the block (per thread and asyncio task)."""
    if not isinstance(policy, SchedulingPolicy):
        raise TypeError(f"using_policy: expected an object with next_stream(), got {type(policy).__name__}")
    token = _scoped.set(policy)
    try:
        yield policy
    finally:
        _scoped.reset(token)
