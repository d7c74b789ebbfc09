"""`batch`: many ops enqueued as one job, without a host wait after each.

Inside ``with batch():`` every op run on the thread (``sync``, ``sync_on``,
``schedule``, ``await``) is enqueued at once into one job and its result returned
without waiting, like a `graph_scope` that runs instead of recording. Ops of
one job on one stream are ordered by the stream, so a tensor written by one op
may be passed straight to the next: that is what makes a host loop of small
launches cheap. The job holds every resource its ops touch until the block ends,
where the host waits for the work (or, with ``wait=False``, hands the job to a
future). Outside the batch the usual rules hold: nothing else may write what the
batch holds, or read what it writes, until then.
"""

from __future__ import annotations

import contextvars
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, TypeVar

import cuda_core

from cuda_async import _capture, _streams
from cuda_async._errors import raised
from cuda_async._policy import SchedulingPolicy, default_policy
from cuda_async._ledger import ClaimPlan
from cuda_async._resource import AccessSet, Job

if TYPE_CHECKING:
    from cuda_async._future import DeviceFuture
    from cuda_async._op import DeviceOp, Run

T = TypeVar("T")

# Per thread and per asyncio task (a task started inside the block inherits it).
_active: contextvars.ContextVar[Batch | None] = contextvars.ContextVar("cuda_async_batch", default=None)
BATCH_STREAM: object = object()  # `Batch.enqueue`'s default: the batch's own stream


class Batch:
    """The job of an active `batch` block: ``ops`` counts the ops enqueued so far;
    ``future`` (set at the end of a ``wait=False`` block) completes with the work."""

    __slots__ = ("name", "run", "stream", "ops", "closed", "future", "joins", "_state", "_fast", "__weakref__")

    def __init__(self, name: str, run: Run, stream: cuda_core.Stream | None) -> None:
        self.name = name
        self.run = run
        self.stream = stream
        self.ops = 0
        self.closed = False
        self.future: DeviceFuture[None] | None = None
        # What the native batch path (native/batch_api.h) needs, while the batch is
        # open on a device stream: (job, the job's points, stream, its state, handle,
        # (job, the job it follows or job again): the jobs whose holds a claim joins).
        self._fast: tuple[Any, ...] | None = None
        self._state: _streams.StreamState | None = None
        job = run.job
        if stream is not None:
            self._state = _streams.state(stream)
            self._fast = (job, run.points, stream, self._state, int(stream.handle),
                          (job, job.follows if job.follows is not None else job))
        # Whether a running hold's owner is the batch's job (or a shared op's sub-job
        # of it): ops made in the block join it, so their claims leave its holds out;
        # so do the holds of the job it follows (`batch(after=...)`: ordered before it).
        follows = job.follows
        if follows is None:
            self.joins: Callable[[Job], bool] = lambda owner: owner is job or owner.parent is job
        else:
            self.joins = lambda owner: owner is job or owner.parent is job or owner is follows or owner.parent is follows

    def close(self) -> None:
        """Ends the batch: later ops are refused."""
        self.closed = True
        self._fast = None

    def __repr__(self) -> str:
        return f"<Batch {self.name!r}: {self.ops} op(s)>"

    def commit_step(self, access_set: AccessSet) -> None:
        """Records the accesses of the op `begin_step` let the caller enqueue on the
        batch's stream (as `Job.record` does)."""
        stream, state = self.stream, self._state
        assert stream is not None and state is not None
        self.run.points[stream] = self.run.job.record_steady(access_set, stream, state)

    def enqueue(self, op: DeviceOp[T], stream: cuda_core.Stream | None | object = BATCH_STREAM) -> T:
        """Enqueues ``op`` into the batch's job, on the batch's stream unless one is
        given (None: run on the host, as `DeviceOp.sync_on` does)."""
        if self.closed:
            raise raised.batch(
                f"{op.name!r} was started in the batch {self.name!r} after the batch ended (an asyncio task "
                "started inside the block runs in it): run it outside, or finish it inside the block")
        self.ops += 1
        return op._enqueue(self.run, self.stream if stream is BATCH_STREAM else stream)  # type: ignore[arg-type]


def begin_step(access_set: AccessSet, claimed: ClaimPlan | None) -> Batch | None:
    """The start of a leaf op enqueued into the active batch in its steady state (the
    Python twin of the native C API's ``begin``): when this thread records no
    capture and the batch's job holds the op's memory as its previous run left it
    (`Job.is_steady`), ``claimed``'s pending holds are given back (the job's cover
    them) and the batch is returned: the caller enqueues the op's work on
    ``batch.stream`` and calls `Batch.commit_step`. Otherwise None, with nothing
    changed: the caller enqueues the op (`DeviceOp.sync`), which handles every
    state and names every conflict."""
    active = _active.get()
    if active is None or active.closed or _capture._active:  # (a capture on any thread: as the C API)
        return None
    stream, state = active.stream, active._state
    if stream is None or state is None or not active.run.job.is_steady(access_set, stream, state):
        return None
    if claimed is not None:
        claimed.release()
    active.ops += 1  # (as `enqueue` counts: an op started)
    return active


def current() -> Batch | None:
    """The batch active on this thread or asyncio task, or None."""
    return _active.get()


@contextmanager
def batch(name: str = "batch", *, policy: SchedulingPolicy | None = None, wait: bool = True,
          after: Batch | None = None) -> Iterator[Batch]:
    """Runs the ops started on this thread inside the block as one job, enqueued
    in order and returned at once; the block's end waits for them.

    >>> with cuda_async.batch():
    ...     for _ in range(1000):
    ...         z = step(z).sync()     # enqueued; no host wait per op
    >>> # here every op has completed and the tensors are free again

    Args:
        name: shown in errors about the batch's holds.
        policy: where the job's ops run (default: `default_policy`; the first
            stream it gives is the batch's stream; `zip` may fork onto others).
        wait: with False, the block's end does not wait: ``batch.future`` (a
            `DeviceFuture`) completes, and gives the holds back, when the work is done.
        after: an ended ``wait=False`` batch whose work this one continues: its ops
            are queued on that batch's stream after that work, so they may use what
            its job still holds (an output of its last op, say) without waiting for
            it; its holds stay until its future completes (the host waits for it, or
            for this batch, before reading what it wrote). The host can so queue one
            step while the device runs the one before (``policy`` is ``after``'s).
            Only the named batch's holds are exempt: what a batch before it still
            holds is refused (wait for that one first, as a chain of steps does).

    >>> with cuda_async.batch("layer 0", wait=False) as first:
    ...     x = layer(x).sync()
    >>> with cuda_async.batch("layer 1", wait=False, after=first) as second:
    ...     x = layer(x).sync()        # reads the x layer 0 writes: ordered by the stream
    >>> first.future.result()          # layer 0 done (its memory can be freed)
    """
    from cuda_async._future import DeviceFuture, completion_events
    from cuda_async._op import Run

    if _capture.current() is not None:
        raise raised.graph_capture(f"batch {name!r} cannot start inside a CUDA graph capture (a capture records, a batch runs)")
    if current() is not None:
        raise raised.batch(f"batch {name!r}: the batch {current().name!r} is already active on this thread (batches do not nest)")  # type: ignore[union-attr]
    if after is None:
        chosen = policy if policy is not None else default_policy()
        job = Job(name)
        active = Batch(name, Run(job, chosen), chosen.next_stream())
    else:
        _check_after(name, after, policy)
        follows = after.run.job
        job = Job(name, follows=None if follows.released else follows)
        active = Batch(name, Run(job, after.run.policy), after.stream)
    token = _active.set(active)
    try:
        yield active
    except BaseException:
        job.finish(after_error=True)
        raise
    finally:
        active.close()
        _active.reset(token)
    if wait:
        job.finish()
    else:
        active.future = DeviceFuture(job, None, completion_events(job))


def _check_after(name: str, after: Batch, policy: SchedulingPolicy | None) -> None:
    """``after`` must be a batch that ended without waiting (its future holds its job)."""
    if not isinstance(after, Batch):
        raise TypeError(f"batch {name!r}: parameter 'after' takes a Batch, got {type(after).__name__}")
    if policy is not None:
        raise raised.batch(f"batch {name!r}: give 'policy' or 'after', not both (a batch continuing another runs "
                           "on its stream)")
    if not after.closed or after.future is None:
        state = "is still open" if not after.closed else "waited at its end"
        raise raised.batch(f"batch {name!r}: parameter 'after' must be a batch that ended with wait=False; "
                           f"{after.name!r} {state}")
