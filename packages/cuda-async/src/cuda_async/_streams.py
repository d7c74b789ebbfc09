"""Per-stream bookkeeping: positions in a stream's queue and the events that mark them.

Every leaf op enqueued on a stream advances that stream's *epoch*; a resource
remembers the (stream, epoch) of its last writer and readers. Another stream
that must wait for such a point gets an event recorded lazily, only when a wait
is needed, and reused for every later wait on an earlier point: one
``cuEventRecord`` + ``cuStreamWaitEvent`` per cross-stream dependency, none for
work that stays on one stream.
"""

from __future__ import annotations

import threading
import weakref
from dataclasses import dataclass, field

import cuda_core

_lock = threading.RLock()


@dataclass(eq=False)
class StreamState:
    """What cuda_async knows about one stream's queue."""

    epoch: int = 0
    # The newest event recorded on this stream and the epoch it covers.
    event: cuda_core.Event | None = None
    event_epoch: int = -1
    # For each other stream, the epoch of it this stream has already waited for.
    waited: weakref.WeakKeyDictionary[cuda_core.Stream, int] = field(default_factory=weakref.WeakKeyDictionary)


_states: weakref.WeakKeyDictionary[cuda_core.Stream, StreamState] = weakref.WeakKeyDictionary()


def state(stream: cuda_core.Stream) -> StreamState:
    """The bookkeeping of ``stream`` (created on first use)."""
    found = _states.get(stream)
    if found is None:
        with _lock:
            found = _states.get(stream)
            if found is None:
                found = StreamState()
                _states[stream] = found
    return found


def advance(stream: cuda_core.Stream) -> int:
    """Marks the end of a leaf op just enqueued on ``stream``; returns its epoch."""
    st = state(stream)
    with _lock:
        st.epoch += 1
        return st.epoch


def current_epoch(stream: cuda_core.Stream) -> int:
    return state(stream).epoch


def event_covering(stream: cuda_core.Stream, epoch: int) -> cuda_core.Event:
    """An event on ``stream`` that completes no earlier than the point ``epoch``."""
    st = state(stream)
    with _lock:
        if st.event is not None and st.event_epoch >= epoch:
            return st.event
        event = cuda_core.Event.create(stream.device, timing=False)
        event.record(stream)
        st.event, st.event_epoch = event, st.epoch
        return event


def wait_point(waiter: cuda_core.Stream, stream: cuda_core.Stream, epoch: int) -> bool:
    """Makes later work on ``waiter`` wait for ``stream`` up to ``epoch`` (no host
    blocking); returns whether a wait was enqueued."""
    if waiter is stream or epoch <= 0:
        return False
    st = state(waiter)
    with _lock:
        if st.waited.get(stream, 0) >= epoch:
            return False
        event = event_covering(stream, epoch)
        waiter.wait(event)
        st.waited[stream] = state(stream).event_epoch
        return True
