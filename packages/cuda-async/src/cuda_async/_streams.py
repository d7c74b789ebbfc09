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
from collections.abc import Callable
from typing import Any
from dataclasses import dataclass, field

import cuda_core


_lock = threading.RLock()  # (the native one once the extension is loaded: `_native.batch_api`)


_HISTORY = 16  # events kept per stream


@dataclass(eq=False, slots=True)  # slots: cuda_async's native batch path reads them
class StreamState:
    """What cuda_async knows about one stream's queue."""

    epoch: int = 0
    # Recent events recorded on this stream, with the epoch each covers (ascending).
    events: list[tuple[int, cuda_core.Event]] = field(default_factory=list)
    # Resources whose access point is the current epoch and not yet marked by an event
    # (resource -> access as an int: 1 read, 2 write).
    interest: dict[object, int] = field(default_factory=dict)
    # For each other stream, the epoch of it this stream has already waited for.
    waited: weakref.WeakKeyDictionary[cuda_core.Stream, int] = field(default_factory=weakref.WeakKeyDictionary)


_states: weakref.WeakKeyDictionary[cuda_core.Stream, StreamState] = weakref.WeakKeyDictionary()


# The last stream looked up, weakly, with its state: a loop of ops on one stream
# skips the weak dictionary.
_last: tuple[weakref.ref[cuda_core.Stream], StreamState] | None = None


def state(stream: cuda_core.Stream) -> StreamState:
    """The bookkeeping of ``stream`` (created on first use)."""
    global _last
    last = _last
    if last is not None and last[0]() is stream:
        return last[1]
    found = _states.get(stream)
    if found is None:
        with _lock:
            found = _states.get(stream)
            if found is None:
                found = StreamState()
                _states[stream] = found
    _last = (weakref.ref(stream), found)
    return found


def advance(stream: cuda_core.Stream, interest: dict[object, int]) -> int:
    """Marks the end of a leaf op just enqueued on ``stream``; returns its epoch.

    ``interest``: the resources whose access point is now this epoch.
    """
    st = state(stream)
    with _lock:
        st.epoch += 1
        st.interest = interest
        return st.epoch


def forget(streams: dict[cuda_core.Stream, None], resources: dict[Any, None]) -> None:
    """Drops ``resources`` from the streams' pending interest once the work that
    used them is known complete: nothing will wait for them, and the bookkeeping
    must not keep their memory alive."""
    with _lock:
        for stream in streams:
            st = state(stream)
            interest = st.interest
            if interest and not interest.keys().isdisjoint(resources):
                st.interest = {r: a for r, a in interest.items() if r not in resources}  # shared dicts stay intact


def current_epoch(stream: cuda_core.Stream) -> int:
    return state(stream).epoch


def before_enqueue(
    stream: cuda_core.Stream, accesses: dict[object, int], is_live: Callable[[object, int, cuda_core.Stream, int], bool]
) -> None:
    """Called before a leaf with ``accesses`` is enqueued on ``stream``: if another
    stream may later need to wait for exactly the current point (a resource whose
    record the new leaf does not supersede), an event is recorded there now, so
    that the wait will not also cover the new work."""
    st = state(stream)
    if not st.interest:
        return
    with _lock:
        for resource, access in st.interest.items():
            new = accesses.get(resource, 0)
            superseded = new == 2 if access == 2 else new > 0
            if not superseded and is_live(resource, access, stream, st.epoch):
                if not st.events or st.events[-1][0] < st.epoch:
                    _record(stream, st)
                break
        st.interest = {}


def _record(stream: cuda_core.Stream, st: StreamState) -> cuda_core.Event:
    # Waits already enqueued are unaffected by re-recording an event, and only
    # the history hands events out: the oldest one is recycled once it is full.
    if len(st.events) >= _HISTORY:
        event = st.events.pop(0)[1]
    else:
        event = cuda_core.Event.create(stream.device, timing=False)
    event.record(stream)
    st.events.append((st.epoch, event))
    return event


def mark(stream: cuda_core.Stream) -> None:
    """Records an event at the current point of ``stream`` (if none marks it yet)."""
    st = state(stream)
    with _lock:
        if st.epoch and (not st.events or st.events[-1][0] < st.epoch):
            _record(stream, st)


def event_covering(stream: cuda_core.Stream, epoch: int) -> tuple[cuda_core.Event, int]:
    """The earliest known event on ``stream`` that completes no earlier than the
    point ``epoch`` (recorded now if there is none), and the epoch it covers."""
    st = state(stream)
    with _lock:
        for covered, event in st.events:
            if covered >= epoch:
                return event, covered
        return _record(stream, st), st.epoch


def wait_point(waiter: cuda_core.Stream, stream: cuda_core.Stream, epoch: int) -> bool:
    """Makes later work on ``waiter`` wait for ``stream`` up to ``epoch`` (no host
    blocking); returns whether a wait was enqueued."""
    if waiter is stream or epoch <= 0:
        return False
    st = state(waiter)
    with _lock:
        if st.waited.get(stream, 0) >= epoch:
            return False
        event, covered = event_covering(stream, epoch)
        waiter.wait(event)
        st.waited[stream] = covered
        return True
