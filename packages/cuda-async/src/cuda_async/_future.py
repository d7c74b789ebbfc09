"""`DeviceFuture`: the result of a scheduled op, and the completion poller behind ``await``.

``await`` never blocks the event loop (beyond a bounded inline check of a few
microseconds, which lets small ops complete without a thread hand-off): the
awaiting task parks on an asyncio future, and one process-wide helper thread polls the jobs' completion events
(``cuEventQuery``, which never blocks) and resolves those futures through
``loop.call_soon_threadsafe``. The thread spins briefly after new work (small
kernels finish within microseconds), then backs off exponentially to 1 ms
sleeps, and sleeps on a condition variable when nothing is pending, so it never
keeps a core busy while kernels run long or nothing runs at all.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Generator
from typing import TYPE_CHECKING, Any, Generic, TypeVar

import cuda_core

from cuda_async._resource import Job, Resource

if TYPE_CHECKING:
    import asyncio  # (imported where a future is awaited: an awaiting program has it loaded)

T = TypeVar("T")

_SPIN_S = 100e-6  # poll without sleeping for this long after activity
_FIRST_SLEEP_S = 20e-6
_MAX_SLEEP_S = 1e-3

_await_spin_s = 20e-6

# Keyed by the Device object, not its ordinal: a device of another driver (a test's
# fake, say) is another object, and must never be handed this driver's events.
_event_pool: dict[cuda_core.Device, list[cuda_core.Event]] = {}


def set_await_spin(microseconds: float) -> None:
    """How long ``await`` may poll inline before parking on the poller (default 20 µs;
    0 parks at once). Longer favours latency of small ops, shorter the event loop."""
    global _await_spin_s
    if microseconds < 0:
        raise ValueError(f"set_await_spin: expected a duration >= 0, got {microseconds}")
    _await_spin_s = microseconds * 1e-6


def _take_event(device: cuda_core.Device) -> cuda_core.Event:
    pool = _event_pool.get(device)
    if pool:
        try:
            return pool.pop()
        except IndexError:
            pass
    return cuda_core.Event.create(device, timing=False)


def _give_events(events: list[cuda_core.Event]) -> None:
    for event in events:
        pool = _event_pool.setdefault(event.device, [])
        if len(pool) < 256 and not event.closed:
            pool.append(event)


def completion_events(job: Job) -> list[cuda_core.Event]:
    """One event recorded at the current end of each stream ``job`` used."""
    events = []
    for stream in job.streams:
        event = _take_event(stream.device)
        event.record(stream)
        events.append(event)
    return events


class _Watch:
    __slots__ = ("events", "callback")

    def __init__(self, events: list[cuda_core.Event], callback: Callable[[], None]) -> None:
        self.events = events
        self.callback = callback


class _Poller:
    """One daemon thread that watches events and calls back when all of a watch's are done."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._watches: list[_Watch] = []
        self._added = 0
        self._thread: threading.Thread | None = None

    def watch(self, events: list[cuda_core.Event], callback: Callable[[], None]) -> None:
        """Calls ``callback()`` on the poller thread once every event in ``events`` has completed."""
        with self._cond:
            self._watches.append(_Watch(events, callback))
            self._added += 1
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._loop, name="cuda-async-poller", daemon=True)
                self._thread.start()
            self._cond.notify()

    @property
    def pending(self) -> int:
        """How many watches have not fired yet."""
        with self._cond:
            return len(self._watches)

    def _loop(self) -> None:
        last_activity = time.perf_counter()
        sleep = _FIRST_SLEEP_S
        while True:
            with self._cond:
                while not self._watches:
                    self._cond.wait()
                    last_activity = time.perf_counter()
                    sleep = _FIRST_SLEEP_S
                watches = list(self._watches)
                added = self._added
            fired = [watch for watch in watches if _complete(watch.events)]
            if fired:
                with self._cond:
                    gone = set(map(id, fired))
                    self._watches = [w for w in self._watches if id(w) not in gone]
                for watch in fired:
                    try:
                        watch.callback()
                    except Exception:  # a callback must not kill the poller
                        pass
                last_activity = time.perf_counter()
                sleep = _FIRST_SLEEP_S
                continue
            if time.perf_counter() - last_activity < _SPIN_S:
                time.sleep(0)  # yield the GIL, poll again
                continue
            with self._cond:
                if self._added == added:
                    self._cond.wait(sleep)
                if self._added != added:  # new work: poll eagerly again
                    last_activity = time.perf_counter()
                    sleep = _FIRST_SLEEP_S
                else:
                    sleep = min(sleep * 2, _MAX_SLEEP_S)


def _complete(events: list[cuda_core.Event]) -> bool:
    """Whether every event has completed. A driver error counts as completion (the
    work is over): whoever takes the result then waits on the events, which raises it."""
    try:
        return _all_recorded_work_done(events)
    except cuda_core.CudaError:
        return True


def _all_recorded_work_done(events: list[cuda_core.Event]) -> bool:
    for event in events:
        event.device.activate()
        if not event.query():
            return False
    return True


poller = _Poller()


class DeviceFuture(Generic[T]):
    """A scheduled op: its work is enqueued; the result is available once it completes.

    `result` waits on the host; ``await`` waits without blocking the event loop;
    `done` asks without waiting. The job's resources are handed back the first
    time the host observes completion through any of them (or when the future is
    dropped; later ops are still ordered after its work through events).
    """

    __slots__ = ("_job", "_value", "_events", "_observed", "_abandoned", "_watched", "__weakref__")

    def __init__(self, job: Job, value: T, events: list[cuda_core.Event]) -> None:
        self._job = job
        self._value = value
        self._events = events
        self._observed = False
        self._abandoned = False
        self._watched = False  # the poller holds the events: they must not be recycled

    @classmethod
    def completed(cls, value: T) -> DeviceFuture[T]:
        """A future that is already done with ``value``."""
        future = cls(Job("completed"), value, [])
        future._finish()
        return future

    @property
    def name(self) -> str:
        """The name of the scheduled op."""
        return self._job.name

    def __repr__(self) -> str:
        state = "done" if self._observed else "pending"
        return f"<DeviceFuture {self._job.name!r} {state}>"

    def _finish(self) -> None:
        if not self._observed:
            self._observed = True
            self._job.release(completed=True)
            events, self._events = self._events, []
            if not self._watched:
                _give_events(events)

    def done(self) -> bool:
        """Whether the work has completed (never blocks); True hands the resources back."""
        if self._observed:
            return True
        try:
            if not _all_recorded_work_done(self._events):
                return False
        except cuda_core.CudaError:
            return True  # over, with an error that `result` (and `await`) raise: not observed yet
        self._finish()
        return True

    def result(self) -> T:
        """Blocks the calling thread until the work has completed; returns the result."""
        if not self._observed:
            try:
                for event in self._events:
                    event.synchronize()
            finally:
                self._finish()
        return self._value

    def _device_done(self, loop: asyncio.AbstractEventLoop, waiter: asyncio.Future[None]) -> None:
        # On the poller thread.
        if self._abandoned:
            self._finish()
        try:
            loop.call_soon_threadsafe(_resolve, waiter)
        except RuntimeError:  # the loop has been closed
            self._finish()

    def __await__(self) -> Generator[Any, None, T]:
        if self.done():
            return self.result()  # (returns at once, or raises the driver's error)
        # Small kernels finish within microseconds: a bounded check first saves the
        # two thread hand-offs of the poller path (the loop is held for at most
        # the spin budget, see `set_await_spin`).
        if _await_spin_s > 0:
            deadline = time.perf_counter() + _await_spin_s
            while time.perf_counter() < deadline:
                if self.done():
                    return self.result()
        import asyncio

        loop = asyncio.get_running_loop()
        waiter: asyncio.Future[None] = loop.create_future()
        self._watched = True
        poller.watch(self._events, lambda: self._device_done(loop, waiter))
        try:
            yield from waiter
        except asyncio.CancelledError:
            # The device work cannot be recalled: its resources stay held until it
            # completes, then the poller hands them back.
            self._abandoned = True
            self.done()
            raise
        return self.result()

    def __del__(self) -> None:
        if not self._observed and not self._job.released:
            # Dropped unobserved: give the holds back; the access points stay, so later
            # ops on other streams still wait for this work through events.
            resources = list(self._job.held) + self._job.retained
            self._job.release(completed=False)
            events = self._events
            if events and not self._watched:
                # Keep the resources (and so their memory) alive until the work
                # completes, so that nothing the device still uses is freed under it.
                try:
                    poller.watch(events, lambda: _keep_until_done(resources, events))
                except Exception:  # at interpreter exit the poller may not start
                    pass


def _keep_until_done(resources: list[Resource], events: list[cuda_core.Event]) -> None:
    """Poller callback of a dropped future: the work is done; the resources it
    kept alive may go."""
    resources.clear()
    _give_events(events)


def _resolve(waiter: asyncio.Future[None]) -> None:
    if not waiter.done():
        waiter.set_result(None)
