"""Timing GPU work: `do_bench` and `do_bench_paired`.

On the GPU backend each rep is timed by two CUDA events recorded around it on one
stream, the *bench stream*: ``stream=`` (a `cuda_core.Stream`, or anything
`cuda_core.Stream.wrap` takes, such as ``torch.cuda.current_stream()``), else cutile's
default stream. While the function runs, that stream is made current for the work it
enqueues: cutile launches (a `cuda_async.SingleStream` policy of it, through
`cuda_async.using_policy`) and, where torch is imported, torch's current stream (a
``torch.cuda.ExternalStream`` of it). Other libraries' work must be put on the stream
by the function itself.

The function may run its work to completion (``lambda: kernel(z, x).sync()``),
enqueue it and return (``lambda: torch.mm(a, b)``), or return a launch or op without
running it (``lambda: kernel(z, x)``). The last two are timed on the device alone: a
returned launch is built first; then the L2 flush, the start event, the function's
work and the end event are queued behind a gate that holds the bench stream
(``cuStreamWaitValue32`` on mapped pinned memory), and the host opens it: the device
runs them back to back, so the host's cost of enqueueing (claims, argument packing,
a library's dispatch) is outside the interval (``gated`` in the result). Whether a
function that returns nothing only enqueues is learned on its second warm-up call,
made with the gate shut: one that waits for its work (the first form) does not come
back until a watchdog opens the gate (0.25 s, once); its reps are bracketed ungated
and include the host's return from the wait. With fewer than two warm-up calls such
a function is bracketed ungated, as Triton's ``do_bench`` does. A returned launch
or op is waited for before the next rep (its tensors are free again). The form is
learned from the first call and must not change. A gated rep whose work is not
enqueued within 10 s (it waited for the device after all) fails with `BenchError`.

Before each rep the L2 cache is flushed (``flush_l2=True``) by a memset over a
buffer twice the device's L2 size, queued before the start event. The memset leaves
the L2 full of its dirty lines, which the rep then writes back while it reads:
``flush_l2="clean"`` follows the memset with a read of a second such buffer (a small
kernel, waited for), so the rep finds the L2 holding clean lines of other memory, as a
bandwidth-bound kernel after other reading kernels does (``l2_clean`` in the result).
Warm-up calls (untimed) absorb the first JIT compile and module load.

On the interpreter backend there is no device: reps are timed by the host's clock
(`time.perf_counter`), the result says so (``timing == "wall-clock"``, and its repr),
and no flush is made (``l2_flushed`` is False).
"""

from __future__ import annotations

import math
import sys
import threading
import time
import traceback
from collections.abc import Callable, Iterator, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

import cuda_async
from cutile._errors import ArgumentError, BenchError

__all__ = ["BenchResult", "PairedResult", "do_bench", "do_bench_paired"]

EVENTS = "cuda-events"
WALL_CLOCK = "wall-clock"
DEFAULT_QUANTILES = (0.2, 0.5, 0.8)
_FALLBACK_L2_BYTES = 128 * 1024**2  # where the device reports no L2 size


def _quantiles_of(samples: Sequence[float], quantiles: Sequence[float]) -> dict[float, float]:
    if not samples:
        return {}
    values = np.quantile(np.asarray(samples, dtype=np.float64), list(quantiles))
    return {q: float(v) for q, v in zip(quantiles, np.atleast_1d(values))}


@dataclass(frozen=True)
class BenchResult:
    """The times of one function's reps, in milliseconds.

    ``timing`` is ``"cuda-events"`` (device time between events on the bench stream)
    or ``"wall-clock"`` (host time: the interpreter backend).
    """

    samples_ms: tuple[float, ...]
    quantiles_ms: dict[float, float]
    timing: str
    l2_flushed: bool
    warmup: int
    gated: bool = False
    l2_clean: bool = False  # the flush ended with a read sweep (``flush_l2="clean"``)

    @property
    def reps(self) -> int:
        return len(self.samples_ms)

    @property
    def median_ms(self) -> float:
        return float(np.median(self.samples_ms))

    @property
    def min_ms(self) -> float:
        return min(self.samples_ms)

    @property
    def max_ms(self) -> float:
        return max(self.samples_ms)

    @property
    def mean_ms(self) -> float:
        return float(np.mean(self.samples_ms))

    def __repr__(self) -> str:
        qs = ", ".join(f"q{round(q * 100)}={v:.4g}" for q, v in self.quantiles_ms.items())
        flushed = ", L2 flushed" + (" and clean" if self.l2_clean else "") if self.l2_flushed else ""
        how = self.timing + flushed + (", host-gated" if self.gated else "")
        if self.timing == WALL_CLOCK:
            how += " (interpreter backend: host time, not device time)"
        return (f"BenchResult(median={self.median_ms:.4g} ms, min={self.min_ms:.4g} ms, {qs}, "
                f"reps={self.reps}, timing={how})")


@dataclass(frozen=True)
class PairedResult:
    """Two functions timed rep by rep in alternation; ``ratios`` are b/a of each pair
    (above 1: b is slower), ``ratio`` their median, ``ratio_quantiles`` their spread.
    A pair whose a took no measurable time gives ``inf`` (or 1.0 when b took none either)."""

    a: BenchResult
    b: BenchResult
    ratios: tuple[float, ...]
    ratio_quantiles: dict[float, float]

    @property
    def timing(self) -> str:
        return self.a.timing

    @property
    def ratio(self) -> float:
        return float(np.median(self.ratios))

    def __repr__(self) -> str:
        qs = ", ".join(f"q{round(q * 100)}={v:.4g}" for q, v in self.ratio_quantiles.items())
        return (f"PairedResult(b/a={self.ratio:.4g} ({qs}), a median={self.a.median_ms:.4g} ms, "
                f"b median={self.b.median_ms:.4g} ms, pairs={len(self.ratios)}, timing={self.timing}"
                f"{' (interpreter backend: host time)' if self.timing == WALL_CLOCK else ''})")


# -- arguments -------------------------------------------------------------------------------

def _check_callable(fn: Any, name: str) -> None:
    if not callable(fn):
        raise ArgumentError(f"{name} must be a callable that runs or returns the work to time, "
                            f"got {type(fn).__name__}")


def _check_count(value: Any, name: str, least: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < least:
        raise ArgumentError(f"{name} must be an int >= {least}, got {value!r}")
    return value


def _check_quantiles(quantiles: Any) -> tuple[float, ...]:
    if isinstance(quantiles, (str, bytes)) or not isinstance(quantiles, Sequence):
        raise ArgumentError(f"quantiles must be a sequence of numbers in [0, 1], got {quantiles!r}")
    checked: list[float] = []
    for q in quantiles:
        if isinstance(q, bool) or not isinstance(q, (int, float)) or not 0.0 <= q <= 1.0:
            raise ArgumentError(f"quantiles must be numbers in [0, 1], got {q!r} in {list(quantiles)!r}")
        checked.append(float(q))
    return tuple(checked)


def _check_flush(value: Any) -> str | None:
    """The flush asked for: ``"write"`` (True), ``"clean"`` or None (False)."""
    if value is True or value == "write":
        return "write"
    if value == "clean":
        return "clean"
    if value is False:
        return None
    raise ArgumentError(f"flush_l2 must be True, False, 'write' or 'clean', got {value!r}")


# -- the two clocks --------------------------------------------------------------------------

class _Timer:
    """Runs one rep of a function and measures it; `finish` gives the times."""

    timing = WALL_CLOCK
    l2_flushed = l2_clean = False

    def __init__(self) -> None:
        self.policy: Any = cuda_async.default_policy()
        self._pending: list[tuple[float, float]] = []

    @contextmanager
    def current(self) -> Iterator[None]:
        yield

    def schedule(self, fn: Callable[[], Any], value: Any) -> Any:
        """Queues a launch or op that ``fn`` returned (not yet waited for); else None."""
        deferred = _deferred(value)
        return None if deferred is None else deferred.schedule(self.policy)

    def untimed(self, fn: Callable[[], Any]) -> None:
        with self.current():
            _wait(self.schedule(fn, fn()))
        self.synchronize()

    def timed(self, fn: Callable[[], Any]) -> None:
        with self.current():
            start = time.perf_counter()
            _wait(self.schedule(fn, fn()))
            self._pending.append((start, time.perf_counter()))

    def gated(self, fn: Callable[[], Any]) -> bool:
        """Were ``fn``'s reps queued behind a gate (see `_EventTimer`)?"""
        return False

    def synchronize(self) -> None:
        pass

    def finish(self) -> list[float]:
        times = [(end - start) * 1e3 for start, end in self._pending]
        self._pending.clear()
        return times


class _StreamGate:
    """Holds a stream's later work until the host opens the gate: a ``cuStreamWaitValue32``
    on a word of mapped pinned memory that the host then writes. Work queued while the
    gate is shut runs back to back once it opens, so the host's time to enqueue it (a
    launch's claims and packing, a library's dispatch) is not inside the events around it.

    A watchdog opens the gate after ``timeout`` seconds, so work that waits for the
    device while the gate is shut (a synchronize inside the function) cannot hang the
    process: `Shut.tripped` then says so.
    """

    WATCHDOG_S = 10.0  # a timed rep's limit
    PROBE_S = 0.25  # a warm-up call's, to learn whether a function waits for its work

    def __init__(self, stream: Any) -> None:
        import cuda_core

        self.stream = stream
        self._cuda_core = cuda_core
        self._word = cuda_core.PinnedBuffer.allocate(4, device=stream.device, mapped=True)
        self._value = self._word.view().cast("I")
        self._value[0] = 0
        self._address = self._word.device_ptr
        self._shut_count = 0
        self._lock = threading.Lock()

    def _open(self, shut: _Shut, *, by_watchdog: bool = False) -> None:
        with self._lock:
            if self._value[0] < shut.count:
                if by_watchdog:
                    shut.where = _waiting_in(shut.thread)
                self._value[0] = shut.count
                shut.tripped = by_watchdog

    @contextmanager
    def shut(self, timeout: float) -> Iterator[_Shut]:
        self._shut_count += 1
        shut = _Shut(self._shut_count, threading.get_ident())
        self.stream.wait_value32(self._address, shut.count)
        watchdog = threading.Timer(timeout, self._open, args=(shut,), kwargs={"by_watchdog": True})
        watchdog.daemon = True
        watchdog.start()
        try:
            # A finalizer freeing device memory synchronously on this thread (the garbage
            # collector runs anywhere) would wait for the held work: releases wait instead.
            with self._cuda_core.releases_deferred():
                yield shut
        finally:
            watchdog.cancel()
            self._open(shut)


@dataclass
class _Shut:
    count: int
    thread: int  # the thread that shut the gate (whose wait the watchdog reports)
    tripped: bool = False
    where: str = ""  # where that thread was when the watchdog opened the gate


def _waiting_in(thread: int, depth: int = 4) -> str:
    """The innermost frames of ``thread`` (file:line in function), for a report of what it waited in."""
    # Called by the watchdog before it opens the gate: it must not raise (the gate would
    # stay shut) nor read source files (lookup_lines=False).
    try:
        frame = sys._current_frames().get(thread)
        if frame is None:
            return ""
        frames = traceback.StackSummary.extract(traceback.walk_stack(frame), limit=depth, lookup_lines=False)
        return " <- ".join(f"{Path(f.filename).name}:{f.lineno} in {f.name}" for f in frames)
    except Exception:
        return ""


_RETURNS, _ENQUEUES, _WAITS, _UNPROBED = "returns its work", "enqueues", "waits", "unprobed"


class _EventTimer(_Timer):
    """Device time between two events on the bench stream.

    What a function does is learned from its first two calls: one that returns a
    launch or op is built on the host first and its work queued behind a shut
    `_StreamGate` together with the L2 flush and the two events, then the gate
    opened: the interval is the device's alone. One that returns nothing is called
    once more with the gate shut (a warm-up call): if it comes back while the gate is
    still shut it only enqueues (a torch op) and its reps are gated the same way;
    if it waits for the device (the watchdog opened the gate) its reps are bracketed
    ungated and include the host's return from the wait. Without a second warm-up call
    the reps are bracketed ungated, as Triton's ``do_bench`` does.
    """

    timing = EVENTS

    def __init__(self, stream: Any, flush_l2: str | None) -> None:
        import cuda_core
        from cutile import _gpu

        if stream is None:
            self.stream = _gpu.default_stream()
        elif isinstance(stream, cuda_core.Stream):
            self.stream = stream
        else:
            try:
                self.stream = cuda_core.Stream.wrap(stream)
            except TypeError as exc:
                raise ArgumentError(f"stream: {exc}") from None
        self.policy = cuda_async.SingleStream(self.stream)
        self._events: list[tuple[Any, Any]] = []
        self._cuda_core = cuda_core
        self._flush: Any = None
        self._sweep: Callable[[Any], None] | None = None
        self.l2_flushed, self.l2_clean = flush_l2 is not None, flush_l2 == "clean"
        if flush_l2 is not None:
            device = self.stream.device
            l2 = device.l2_cache_size or _FALLBACK_L2_BYTES
            # Twice the L2: what a rep leaves in it is written over whatever the policy.
            self._flush = cuda_core.DeviceBuffer.allocate(-(-2 * l2 // 4) * 4, stream=self.stream)
            if self.l2_clean:
                from cutile._l2_sweep import sweep

                self._sweep = sweep(l2, device.ordinal)
        self._torch_stream = _torch_stream_of(self.stream)
        self._kinds: dict[int, str] = {}  # id(fn) -> what it does, learned from its first calls
        self._gate_: _StreamGate | None = None

    @property
    def _gate(self) -> _StreamGate:
        if self._gate_ is None:
            self._gate_ = _StreamGate(self.stream)
        return self._gate_

    @contextmanager
    def current(self) -> Iterator[None]:
        with ExitStack() as stack:
            stack.enter_context(cuda_async.using_policy(self.policy))
            if self._torch_stream is not None:  # (torch is never imported here: only used if it was)
                stack.enter_context(sys.modules["torch"].cuda.stream(self._torch_stream))
            yield

    def _learn_form(self, fn: Callable[[], Any], value: Any) -> None:
        deferred = _is_deferred(value)
        known = self._kinds.setdefault(id(fn), _RETURNS if deferred else _UNPROBED)
        if deferred != (known == _RETURNS):
            first, now = ("a launch or op", f"a {type(value).__name__}") if known == _RETURNS else (
                "nothing to run", f"a {type(value).__name__}")
            raise ArgumentError(f"fn must return the same kind of thing on every call: it returned {first} "
                                f"on its first call and {now} now")

    def schedule(self, fn: Callable[[], Any], value: Any) -> Any:
        self._learn_form(fn, value)
        return super().schedule(fn, value)

    def untimed(self, fn: Callable[[], Any]) -> None:
        if self._kinds.get(id(fn)) != _UNPROBED:
            super().untimed(fn)
            return
        with self.current():
            with self._gate.shut(_StreamGate.PROBE_S) as shut:
                value = fn()
            self._learn_form(fn, value)
        self._kinds[id(fn)] = _WAITS if shut.tripped else _ENQUEUES
        self.synchronize()

    def _flush_l2(self) -> None:
        if self._flush is not None:
            self._flush.memset(0, width=4, stream=self.stream)
        if self._sweep is not None:
            self._sweep(self.stream)

    def _new_events(self) -> tuple[Any, Any]:
        return self._cuda_core.Event.create(self.stream.device), self._cuda_core.Event.create(self.stream.device)

    def _bracket(self, queue: Callable[[], Any], *, flushed: bool = False,
                 events: tuple[Any, Any] | None = None) -> Any:
        """Queues the flush (unless ``flushed``: queued already), the start event,
        ``queue()``'s work and the end event (``events``: made already)."""
        if not flushed:
            self._flush_l2()
        start, end = events if events is not None else self._new_events()
        start.record(self.stream)
        pending = queue()
        end.record(self.stream)
        self._events.append((start, end))
        return pending

    def timed(self, fn: Callable[[], Any]) -> None:
        kind = self._kinds.get(id(fn))
        with self.current():
            if kind not in (_RETURNS, _ENQUEUES):
                _wait(self._bracket(lambda: self.schedule(fn, fn())))
                return
            queue: Callable[[], Any]
            if kind == _RETURNS:
                returned = fn()  # built on the host, nothing queued yet
                self._learn_form(fn, returned)
                work = _deferred(returned)
                queue = lambda: work.schedule(self.policy)  # noqa: E731
            else:
                queue = lambda: self.schedule(fn, fn())  # noqa: E731
            # The flush is queued before the gate: it still runs before the start event,
            # and a driver call that waits for the stream (a cuMemsetD32Async of the flush
            # behind a shut gate stalled until the watchdog opened it, on the H200) does
            # not meet the gate.
            # The events too: a cuEventCreate behind the shut gate stalled likewise (the
            # bench_gemv sweep on the H200, once a shape).
            self._flush_l2()
            events = self._new_events()
            with self._gate.shut(_StreamGate.WATCHDOG_S) as shut:
                pending = self._bracket(queue, flushed=True, events=events)
            if shut.tripped:
                _wait(pending)  # (the watchdog opened the gate: the rep's work ran; nothing may stay pending)
                raise BenchError(
                    f"the work of a rep was not enqueued within {_StreamGate.WATCHDOG_S:g} s while the "
                    "bench stream was gated: the function waited for the device (it did not in warm-up) "
                    "or compiled (warm up with the same arguments)"
                    + (f"; it was waiting in {shut.where}" if shut.where else ""))
            _wait(pending)

    def gated(self, fn: Callable[[], Any]) -> bool:
        return self._kinds.get(id(fn)) in (_RETURNS, _ENQUEUES)

    def synchronize(self) -> None:
        self.stream.synchronize()

    def finish(self) -> list[float]:
        self.synchronize()
        times = [start.elapsed_ms(end) for start, end in self._events]
        self._events.clear()
        return times


def _is_deferred(value: Any) -> bool:
    return _deferred(value) is not None


def _deferred(value: Any) -> Any:
    """What to schedule for ``value``: a launch or op itself, the op an object presents
    (`cuda_async.PresentsDeviceOp`: a `cutile_kernels` function's pending work), or None."""
    if isinstance(value, cuda_async.DeviceOp) or _is_launch(value):
        return value
    if hasattr(type(value), "__device_op__"):
        return value.__device_op__()
    return None


def _is_launch(value: Any) -> bool:
    from cutile._launch import Launch

    return isinstance(value, Launch)


def _wait(pending: Any) -> None:
    if pending is not None:
        pending.result()


def _torch_stream_of(stream: Any) -> Any:
    """A torch stream of ``stream`` where torch is imported with CUDA, else None."""
    torch = sys.modules.get("torch")
    if torch is None or not torch.cuda.is_available():
        return None
    return torch.cuda.ExternalStream(int(stream.handle))


def _timer(stream: Any, flush_l2: str | None) -> _Timer:
    from cutile._backend import current

    if current() == "gpu":
        return _EventTimer(stream, flush_l2)
    if stream is not None:
        raise ArgumentError("stream: the interpreter backend runs on the host; it takes no stream "
                            f"(got {stream!r})")
    return _Timer()


# -- the public functions --------------------------------------------------------------------

def do_bench(fn: Callable[[], Any], *, warmup: int = 10, reps: int = 100, stream: Any = None,
             flush_l2: bool | str = True, quantiles: Sequence[float] = DEFAULT_QUANTILES) -> BenchResult:
    """Times ``fn`` over ``reps`` reps after ``warmup`` untimed calls.

    Args:
        fn: a callable that enqueues its work on the current stream or runs it, or
            returns a launch/op to queue (see the module docstring).
        warmup: untimed calls first (they absorb the JIT compile).
        reps: timed calls.
        stream: the bench stream (GPU backend only); default: cutile's stream.
        flush_l2: flush the L2 cache before each rep (GPU backend): True (a memset),
            ``"clean"`` (the memset, then a read sweep: the L2 left clean) or False.
        quantiles: the quantiles reported in ``quantiles_ms``.
    Raises:
        ArgumentError: a malformed argument (the message names it).
    """
    timer, warmup, reps, qs = _setup({"fn": fn}, warmup, reps, stream, flush_l2, quantiles)
    for _ in range(warmup):
        timer.untimed(fn)
    for _ in range(reps):
        timer.timed(fn)
    return _result(timer, fn, tuple(timer.finish()), qs, warmup)


def _setup(functions: dict[str, Any], warmup: Any, reps: Any, stream: Any, flush_l2: Any,
           quantiles: Any) -> tuple[_Timer, int, int, tuple[float, ...]]:
    """The checked arguments of a bench (each error names its parameter) and its timer."""
    for name, fn in functions.items():
        _check_callable(fn, name)
    checked_warmup = _check_count(warmup, "warmup", 0)
    checked_reps = _check_count(reps, "reps", 1)
    flush = _check_flush(flush_l2)
    qs = _check_quantiles(quantiles)
    return _timer(stream, flush), checked_warmup, checked_reps, qs


def _result(timer: _Timer, fn: Callable[[], Any], samples: tuple[float, ...], qs: tuple[float, ...],
            warmup: int) -> BenchResult:
    return BenchResult(samples, _quantiles_of(samples, qs), timer.timing, timer.l2_flushed, warmup, timer.gated(fn),
                       timer.l2_clean)


def _ratio(a: float, b: float) -> float:
    if a > 0:
        return b / a
    return 1.0 if b <= 0 else math.inf


def do_bench_paired(a: Callable[[], Any], b: Callable[[], Any], *, warmup: int = 10, reps: int = 100,
                    stream: Any = None, flush_l2: bool | str = True,
                    quantiles: Sequence[float] = DEFAULT_QUANTILES) -> PairedResult:
    """Times ``a`` and ``b`` in alternation, ``reps`` pairs after ``warmup`` untimed
    calls of each, and gives each pair's ratio b/a: drift of the clocks and of the
    device (temperature, other work) touches both arms alike. Even pairs run a first,
    odd ones b first. Arguments as `do_bench`'s (``quantiles`` of the ratios)."""
    timer, warmup, reps, qs = _setup({"a": a, "b": b}, warmup, reps, stream, flush_l2, quantiles)
    for _ in range(warmup):
        timer.untimed(a)
        timer.untimed(b)
    for rep in range(reps):
        first, second = (a, b) if rep % 2 == 0 else (b, a)
        timer.timed(first)
        timer.timed(second)
    times = timer.finish()
    a_times = tuple(times[2 * i + (i % 2)] for i in range(reps))
    b_times = tuple(times[2 * i + 1 - (i % 2)] for i in range(reps))
    ratios = tuple(_ratio(x, y) for x, y in zip(a_times, b_times))
    return PairedResult(_result(timer, a, a_times, qs, warmup), _result(timer, b, b_times, qs, warmup),
                        ratios, _quantiles_of(ratios, qs))
