"""`DeviceOp`: a lazy operation on a device, typed by its result, and its combinators.

Nothing runs when an op is built. Running it (`sync`, `sync_on`, `schedule`,
``await``) makes a *job*: the op tree is walked once on the host, each leaf
enqueues its work on the stream the policy chose (or runs eagerly when that
stream is None), ownership holds are taken leaf by leaf, and cross-stream
dependencies become event waits. The job's holds are given back when the host
observes its completion.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Generator, Iterable, Sequence
from typing import TYPE_CHECKING, Any, Generic, Protocol, TypeAlias, TypeVar, cast, overload

import cuda_core

from cuda_async import _batch, _capture, _ledger, _streams
from cuda_async._errors import raised
from cuda_async._policy import HostPolicy, SchedulingPolicy, SingleStream, default_policy
from cuda_async._ledger import ClaimPlan
from cuda_async._resource import Access, AccessSet, Job, Resource, ResourceView, is_live

if TYPE_CHECKING:
    from cuda_async._future import DeviceFuture
    from cuda_async._graph import CudaGraph

T = TypeVar("T")
U = TypeVar("U")
A = TypeVar("A")
B = TypeVar("B")
C = TypeVar("C")
D = TypeVar("D")


class PresentsDeviceOp(Protocol[T]):
    """An object that stands for an op (a cutile launch): ``__device_op__()`` gives it.
    The combinators take it wherever they take an op."""

    def __device_op__(self) -> DeviceOp[T]: ...


#: an op, or an object that presents one (what ``then`` and ``zip`` take)
OpLike: TypeAlias = "DeviceOp[T] | PresentsDeviceOp[T]"


class Run:
    """The state of one walk of an op tree: the job, who takes holds (the job, or a
    shared op's own sub-job), the policy, the capture, and the job's last point per stream."""

    __slots__ = ("job", "holder", "policy", "capture", "points", "stream_state")

    def __init__(self, job: Job, policy: SchedulingPolicy, capture: _capture.CaptureState | None = None) -> None:
        self.job = job
        self.holder = job
        self.policy = policy
        self.capture = capture
        self.points: dict[cuda_core.Stream, int] = {}
        # The last stream a leaf was enqueued on, with its bookkeeping (`_streams.state`).
        self.stream_state: tuple[cuda_core.Stream, _streams.StreamState] | None = None

    def branch_stream(self, parent: cuda_core.Stream | None) -> cuda_core.Stream | None:
        """The stream of a new independent branch (`zip`) forked from ``parent``."""
        if self.capture is not None or parent is None:
            return parent
        branch = self.policy.next_stream()
        return parent if branch is None else branch  # a device job never forks onto the host


class DeviceOp(Generic[T]):
    """A lazy operation whose result is a ``T``.

    Build one with `DeviceOp.from_fn` (work enqueued by a Python callable),
    `value`, `zip`, `all_of`, or the combinators `then`, `map`, `shared`; run it
    with `sync`, `sync_on`, `schedule` or ``await``; record it with `graph`.
    """

    name: str = "op"

    # -- construction --------------------------------------------------------
    @staticmethod
    def from_fn(
        fn: Callable[[cuda_core.Stream | None], U],
        *,
        reads: Iterable[Resource] = (),
        writes: Iterable[Resource] = (),
        name: str | None = None,
        allocates: bool = False,
        views: Callable[[], Iterable[ResourceView]] | None = None,
    ) -> FnOp[U]:
        """A leaf op: ``fn(stream)`` enqueues work on ``stream`` and returns the result.

        ``stream`` is None in host mode, where ``fn`` does the work eagerly.

        Args:
            reads: resources the work reads (shared with other readers while pending).
            writes: resources the work writes (exclusive while pending).
            name: shown in errors, e.g. ``"launch of add"``.
            allocates: the op allocates memory, so it cannot be captured into a graph.
            views: how the work uses its resources (`ResourceView`s), asked for
                when the op is captured into a graph: what `CudaGraph.update`
                compares a new input with, and names it by.
        """
        return FnOp(fn, reads=tuple(reads), writes=tuple(writes), name=name, allocates=allocates, views=views)

    # -- combinators ---------------------------------------------------------
    def then(self, next_op: Callable[[T], OpLike[U]] | OpLike[U]) -> DeviceOp[U]:
        """This op, then another on the same stream.

        ``next_op`` is an op, or a function that builds one from this op's result
        (called on the host once this op is enqueued).
        """
        return ThenOp(self, next_op)

    def map(self, fn: Callable[[T], U]) -> DeviceOp[U]:
        """This op with ``fn`` applied to its result on the host.

        ``fn`` runs when the op is enqueued, not when the device finishes: it
        may rearrange handles (tensors, tuples) but must not read device memory.
        """
        return MapOp(self, fn)

    def shared(self) -> SharedOp[T]:
        """An op that runs this one at most once, however many ops consume it.

        The first consumer enqueues it; later consumers (on any stream, in any
        job) get the same result and wait for its completion through an event.
        The resources it writes are handed to its consumers once it is enqueued.
        """
        return SharedOp(self)

    # -- execution -----------------------------------------------------------
    def _enqueue(self, run: Run, stream: cuda_core.Stream | None) -> T:
        raise NotImplementedError

    def schedule(self, policy: SchedulingPolicy | None = None) -> DeviceFuture[T]:
        """Enqueues the op now (stream chosen by ``policy``, default `default_policy`)
        and returns a future for its result; the host does not wait.

        Raises `OwnershipError` at once if a leaf may not use its resources.
        """
        from cuda_async._future import DeviceFuture, completion_events

        taken, result = self._taken_by_capture_or_batch()
        if taken:
            return DeviceFuture.completed(result)
        job, value = submit(self, policy if policy is not None else default_policy())
        return DeviceFuture(job, value, completion_events(job))

    def _taken_by_capture_or_batch(
        self, stream: cuda_core.Stream | None | object = _batch.BATCH_STREAM
    ) -> tuple[bool, Any]:
        """(True, result) when a capture active on this thread records the op or an
        active batch enqueues it (on ``stream``, else on the batch's own); (False,
        None) when the caller runs it as a job of its own."""
        state = _capture.current()
        if state is not None:
            return True, record(state, self)
        active = _batch.current()
        if active is not None:
            return True, active.enqueue(self, stream)
        return False, None

    def sync(self, policy: SchedulingPolicy | None = None) -> T:
        """Runs the op and waits for it; returns its result.

        Inside a graph capture (`graph_scope`) the op is recorded instead, and the
        result is returned without waiting.
        """
        taken, result = self._taken_by_capture_or_batch()
        if taken:
            return cast(T, result)
        return run_to_completion(self, policy if policy is not None else default_policy())

    def sync_on(self, stream: cuda_core.Stream | None) -> T:
        """Runs the whole op on ``stream`` (None: on the host) and waits for it."""
        taken, result = self._taken_by_capture_or_batch(stream)
        if taken:
            return cast(T, result)
        policy: SchedulingPolicy = HostPolicy() if stream is None else SingleStream(stream)
        return run_to_completion(self, policy)

    def __await__(self) -> Generator[Any, None, T]:
        """``await op``: schedules it on the default policy and waits without blocking the loop."""
        return self.schedule().__await__()

    def graph(self, *, name: str | None = None, policy: SchedulingPolicy | None = None) -> CudaGraph[T]:
        """Captures this op into a `CudaGraph` (nothing runs until `CudaGraph.launch`).

        The device is that of ``policy``'s next stream (default policy); a host
        policy gives a host graph, whose replay re-runs the recorded leaves eagerly.
        """
        from cuda_async._graph import graph_scope

        with graph_scope(name or self.name, policy=policy) as scope:
            result = scope.record(self)
        graph = cast("CudaGraph[T]", scope.graph)
        graph.result = result
        return graph

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name!r}>"


class FnOp(DeviceOp[T]):
    """A leaf op made by `DeviceOp.from_fn`."""

    __slots__ = ("fn", "name", "allocates", "access_set", "accesses", "interest", "views", "claim_from")

    def __init__(
        self,
        fn: Callable[[cuda_core.Stream | None], T],
        *,
        reads: tuple[Resource, ...],
        writes: tuple[Resource, ...],
        name: str | None,
        allocates: bool,
        views: Callable[[], Iterable[ResourceView]] | None = None,
    ) -> None:
        try:
            merged = AccessSet(reads, writes)
        except TypeError as exc:
            raise TypeError(f"DeviceOp.from_fn: {exc}") from None
        self.fn = fn
        self.name = name or str(getattr(fn, "__name__", "op"))
        self.allocates = allocates
        self.access_set = merged
        self.accesses = merged.accesses
        self.interest: dict[object, int] = merged.interest
        self.views = views
        self.claim_from: Callable[[], ClaimPlan | None] | None = None

    @classmethod
    def from_accesses(
        cls, fn: Callable[[cuda_core.Stream | None], T], accesses: AccessSet, *, name: str, allocates: bool = False,
        views: Callable[[], Iterable[ResourceView]] | None = None,
        claim_from: Callable[[], ClaimPlan | None] | None = None,
    ) -> FnOp[T]:
        """A leaf op like `DeviceOp.from_fn`, its resources given as an `AccessSet`
        made once: for a caller that makes many ops over the same resources.
        ``claim_from``: called once when the op starts, it hands over the pending
        holds the op's maker claimed for it (`claim`; None: none, or handed over
        already), which its job takes over."""
        op: FnOp[T] = cls.__new__(cls)
        op.fn = fn
        op.name = name
        op.allocates = allocates
        op.access_set = accesses
        op.accesses = accesses.accesses
        op.interest = accesses.interest
        op.views = views
        op.claim_from = claim_from
        return op

    @property
    def reads(self) -> tuple[Resource, ...]:
        """The resources only read."""
        return tuple(r for r, a in self.accesses if a is Access.READ)

    @property
    def writes(self) -> tuple[Resource, ...]:
        """The resources written."""
        return tuple(r for r, a in self.accesses if a is Access.WRITE)

    def _enqueue(self, run: Run, stream: cuda_core.Stream | None) -> T:
        claim = self.claim_from() if self.claim_from is not None else None
        capture = run.capture
        if capture is not None:
            if claim is not None:
                claim.release()  # a recorded op holds nothing: its replays take holds
            run.holder.check(self.access_set, self.name)
            capture.add_leaf(self)
            return self.fn(stream)
        if stream is None:
            run.holder.acquire(self.access_set, self.name, stream, claim)
            _after_device_work(self.access_set)
            return self.fn(stream)
        job = run.job
        if run.holder is job:
            known = run.stream_state
            if known is not None and known[0] is stream:
                state = known[1]
            else:
                state = _streams.state(stream)
                run.stream_state = (stream, state)
            if job.is_steady(self.access_set, stream, state):  # a loop's usual case
                if claim is not None:
                    claim.release()  # (the job's holds cover it)
                result = self.fn(stream)
                run.points[stream] = job.record_steady(self.access_set, stream, state)
                return result
        # Mark the stream's current point first if someone may need it, so that
        # neither this op's waits nor its work end up behind that event.
        _streams.before_enqueue(stream, self.interest, is_live)
        run.holder.acquire(self.access_set, self.name, stream, claim)
        run.job.streams[stream] = None
        result = self.fn(stream)
        run.points[stream] = run.holder.record(self.accesses, stream, self.interest)
        return result


class ValueOp(DeviceOp[T]):
    """A host value as an op (no device work)."""

    def __init__(self, value: T, name: str = "value") -> None:
        self.value = value
        self.name = name

    def _enqueue(self, run: Run, stream: cuda_core.Stream | None) -> T:
        return self.value


class ThenOp(DeviceOp[U], Generic[T, U]):
    def __init__(self, first: DeviceOp[T], next_op: Callable[[T], OpLike[U]] | OpLike[U]) -> None:
        next_op = as_device_op(next_op)  # an object presenting an op (a cutile launch) counts as one
        if not isinstance(first, DeviceOp):
            raise TypeError(f"then: expected a DeviceOp to chain from, got {type(first).__name__}")
        if not (isinstance(next_op, DeviceOp) or callable(next_op)):
            raise TypeError(f"then: expected a DeviceOp or a function returning one, got {type(next_op).__name__}")
        self.first = first
        self.next_op = next_op
        following = next_op.name if isinstance(next_op, DeviceOp) else getattr(next_op, "__name__", "fn")
        if type(first) is ThenOp:  # a chain built in a loop: its head is known
            self._head: str = first._head
            self.name = f"{first._head} then ... {following}"
        else:
            head = self._head = first.name.split(" then ", 1)[0]
            self.name = f"{head} then {following}" if " then " not in first.name else f"{head} then ... {following}"

    def _enqueue(self, run: Run, stream: cuda_core.Stream | None) -> U:
        # A chain built in a loop (op = op.then(k)) nests to the left: walk it
        # iteratively, so that chains of any length need no deep recursion.
        chain: list[ThenOp[Any, Any]] = []
        node: DeviceOp[Any] = self
        while isinstance(node, ThenOp):
            chain.append(node)
            node = node.first
        result: Any = node._enqueue(run, stream)
        for link in reversed(chain):
            following = link.next_op if isinstance(link.next_op, DeviceOp) else as_device_op(link.next_op(result))
            if not isinstance(following, DeviceOp):
                raise TypeError(
                    f"then: the function after {link.first.name!r} must return a DeviceOp, "
                    f"got {type(following).__name__} (use map for host functions)"
                )
            result = following._enqueue(run, stream)
        return cast(U, result)


def as_device_op(item: Any) -> Any:
    """``item`` itself, or the op of an object that presents one through a
    ``__device_op__()`` method (how a layer above, e.g. cutile's launches, plugs in)."""
    if isinstance(item, DeviceOp):
        return item
    present = getattr(item, "__device_op__", None)
    return present() if callable(present) else item


class MapOp(DeviceOp[U], Generic[T, U]):
    def __init__(self, first: DeviceOp[T], fn: Callable[[T], U]) -> None:
        if not callable(fn):
            raise TypeError(f"map: expected a function, got {type(fn).__name__}")
        self.first = first
        self.fn = fn
        self.name = f"{first.name} map {getattr(fn, '__name__', 'fn')}"

    def _enqueue(self, run: Run, stream: cuda_core.Stream | None) -> U:
        return self.fn(self.first._enqueue(run, stream))


class GatherOp(DeviceOp[list[Any]]):
    """Several ops, each on a stream of its own (fork), joined back onto the first."""

    def __init__(self, items: Sequence[OpLike[Any]], name: str) -> None:
        ops: list[DeviceOp[Any]] = [as_device_op(item) for item in items]
        for op in ops:
            if not isinstance(op, DeviceOp):
                raise TypeError(f"{name}: expected DeviceOps, got {type(op).__name__}")
        self.ops = tuple(ops)
        self.name = f"{name}({', '.join(op.name for op in ops)})"

    def _enqueue(self, run: Run, stream: cuda_core.Stream | None) -> list[Any]:
        results: list[Any] = []
        branches: list[cuda_core.Stream] = []
        # Branches depend on this job's work on the parent stream before the fork,
        # not on each other: the fork point is taken before the first branch runs.
        fork = run.points.get(stream, 0) if stream is not None else 0
        if fork and len(self.ops) > 1 and run.capture is None:
            _streams.mark(stream)  # type: ignore[arg-type]  # the fork point, before the first branch
        for index, op in enumerate(self.ops):
            branch = stream if index == 0 else run.branch_stream(stream)
            if branch is not None and stream is not None and branch is not stream:
                if fork:
                    _streams.wait_point(branch, stream, fork)
                branches.append(branch)
            results.append(op._enqueue(run, branch))
        if stream is not None and branches:
            _streams.before_enqueue(stream, {}, is_live)  # mark the parent's point before the join waits
            for branch in branches:  # join: later work on the parent waits for every branch
                end = run.points.get(branch, 0)
                if end:
                    _streams.wait_point(stream, branch, end)
                    run.points[stream] = max(run.points.get(stream, 0), _streams.current_epoch(stream))
        return results


class SharedOp(DeviceOp[T]):
    """Runs its op once; every consumer gets the same result (see `DeviceOp.shared`)."""

    def __init__(self, op: DeviceOp[T]) -> None:
        self.op = op
        self.name = f"shared {op.name}"
        self._lock = threading.RLock()
        self._done = False
        self._value: T | None = None
        self._point: tuple[cuda_core.Stream, int] | None = None

    @property
    def done(self) -> bool:
        """Whether the op has been enqueued (its result is known)."""
        return self._done

    def _enqueue(self, run: Run, stream: cuda_core.Stream | None) -> T:
        if run.capture is not None:
            return self.op._enqueue(run, stream)  # a capture records; it never fills the cache
        with self._lock:
            if not self._done:
                own = Job(self.name, parent=run.job)
                saved, run.holder = run.holder, own
                try:
                    value = self.op._enqueue(run, stream)
                finally:
                    run.holder = saved
                    # The holds go to the consumers (the access points stay); the memory
                    # must stay alive until the enclosing job's work is known done.
                    run.job.retained.extend(own.held)
                    run.job.retained.extend(own.retained)
                    own.release(completed=False)
                self._value = value
                if stream is not None:
                    self._point = (stream, _streams.current_epoch(stream))
                    _streams.mark(stream)  # consumers elsewhere wait for exactly this point
                self._done = True
                return value
        point = self._point
        if point is not None and stream is not None:
            _streams.wait_point(stream, point[0], point[1])
        elif point is not None and stream is None:
            point[0].synchronize()  # a host consumer of device work waits for it
        return self._value  # type: ignore[return-value]


def value(result: T, *, name: str = "value") -> DeviceOp[T]:
    """A host value as an op: no device work, the result is ``result``."""
    return ValueOp(result, name)


@overload
def zip_ops(a: OpLike[A], /) -> DeviceOp[tuple[A]]: ...
@overload
def zip_ops(a: OpLike[A], b: OpLike[B], /) -> DeviceOp[tuple[A, B]]: ...
@overload
def zip_ops(a: OpLike[A], b: OpLike[B], c: OpLike[C], /) -> DeviceOp[tuple[A, B, C]]: ...
@overload
def zip_ops(
    a: OpLike[A], b: OpLike[B], c: OpLike[C], d: OpLike[D], /
) -> DeviceOp[tuple[A, B, C, D]]: ...
@overload
def zip_ops(*ops: OpLike[Any]) -> DeviceOp[tuple[Any, ...]]: ...
def zip_ops(*ops: OpLike[Any]) -> DeviceOp[tuple[Any, ...]]:
    """Several ops as one whose result is the tuple of theirs.

    The ops may run on different streams (the policy chooses one per branch);
    work chained after the zip waits for all of them.
    """
    if not ops:
        raise ValueError("zip: needs at least one op")
    gathered = GatherOp(ops, "zip")
    return MapOp(gathered, tuple)


def all_of(ops: Iterable[DeviceOp[T]]) -> DeviceOp[list[T]]:
    """A list of ops as one op whose result is the list of their results (like `zip`)."""
    return GatherOp(list(ops), "all_of")


def submit(op: DeviceOp[T], policy: SchedulingPolicy) -> tuple[Job, T]:
    """Walks ``op`` once as a new job on ``policy``: everything is enqueued when it returns.

    If the walk fails (an `OwnershipError`, a launch error), the work already
    enqueued is waited for, the job's holds are given back, and the error propagates.
    """
    job = Job(op.name)
    run = Run(job, policy)
    walking = _walking()
    walking.append(job)
    try:
        return job, op._enqueue(run, policy.next_stream())
    except BaseException:
        job.finish(after_error=True)
        raise
    finally:
        walking.pop()


def _after_device_work(access_set: AccessSet) -> None:
    """Blocks the host until the device work an op run on the host must follow is done:
    each resource's last write and, for a write, the reads since. The holds do not order
    it: they may be its own job's (a device op before it in the batch) or a followed
    batch's (`batch(after=...)`), and no stream orders a host op after them."""
    for resource, access in access_set.accesses:
        last = resource._last_write
        points = [] if last is None else [(last[0], last[1])]
        if access is Access.WRITE and resource._reads:
            points += [(other, epoch) for other, (epoch, _) in list(resource._reads.items())]
        for stream, epoch in points:
            event, _ = _streams.event_covering(stream, epoch)
            event.synchronize()


_walks = threading.local()


def _walking() -> list[Job]:
    """The jobs this thread is enqueueing now (innermost last): ops that their
    ``then`` functions make are started inside them."""
    try:
        jobs: list[Job] = _walks.jobs
    except AttributeError:
        jobs = _walks.jobs = []
    return jobs


def claim(plan: ClaimPlan) -> None:
    """Takes ``plan``'s pending holds for an op made now on this thread, to run
    later (cutile claims a launch's tensors at the call): raises `OwnershipError`
    now if any conflicts with another hold, but the running holds of the jobs the
    op would join (the active batch's, and those this thread is enqueueing, whose
    ``then`` functions make ops). The op's start hands the holds over to its job
    (`FnOp.from_accesses`'s ``claim_from``); `ClaimPlan.release` gives them back
    if it never starts."""
    try:
        walking: list[Job] = _walks.jobs  # (`_walking`, without a call: every launch claims)
    except AttributeError:
        walking = _walking()
    active = _batch._active.get()
    if not walking:
        plan.claim(None if active is None else active.joins)
        return
    if active is None and len(walking) == 1:
        job = walking[0]
        plan.claim(lambda owner: owner is job or owner.parent is job)
        return
    joined = set(walking)
    if active is not None:
        joined.add(active.run.job)
    plan.claim(lambda job: job in joined or job.parent in joined)


def run_to_completion(op: DeviceOp[T], policy: SchedulingPolicy) -> T:
    """`submit`, then wait on the host for every stream the job used, then release."""
    job, result = submit(op, policy)
    job.finish()
    return result


def begin_idle_run(accesses: AccessSet, claimed: ClaimPlan, run: ClaimPlan) -> cuda_core.Stream | None:
    """The start of a synchronous run of one leaf op whose memory is idle: what the
    native C API's ``sync_begin`` does, for the Python paths of the layers above.

    Outside any batch and capture, when no running hold overlaps ``claimed``'s
    spans, no access of ``accesses`` is recorded on any stream and the default
    policy's next stream has no access point waiting for an event, ``claimed``'s
    pending holds become ``run``'s (the same spans, owned by a `Job` the caller
    keeps for this) and that stream is returned: the caller enqueues the op's work
    on it, waits for the stream, and calls `end_idle_run`. The job of `DeviceOp.sync`
    would do the same work here, and nothing else: no other op waits, and the run's
    access points are forgotten at its end. Otherwise None, with nothing changed:
    the caller runs the op as a job."""
    if _capture._active or _batch._active.get() is not None:  # (a capture on any thread: as the C API)
        return None
    policy = default_policy()
    if type(policy) is not SingleStream:
        # Asking may change what the policy answers next (RoundRobin's turn): not
        # before the memory is known idle, lest the job's path ask again.
        with _ledger.lock:
            if not _idle_locked(accesses, claimed):
                return None
    stream = policy.next_stream()  # (outside the lock: a policy may run any code)
    if stream is None:
        return None  # host mode: the job's path
    state = _streams.state(stream)
    with _ledger.lock:
        # (another op's access point not yet marked by an event: the job decides)
        if state.interest or not _idle_locked(accesses, claimed):
            return None
        _ledger.hand_over(claimed, run)
    return stream


def _idle_locked(accesses: AccessSet, claimed: ClaimPlan) -> bool:
    """Whether no running hold overlaps ``claimed`` and no access of ``accesses`` is
    recorded on any stream (the caller holds the ledger lock)."""
    if _ledger.dropped:
        _ledger.drain_dropped()
    for resource, _ in accesses.accesses:
        if resource._last_write is not None or resource._reads:
            return False
    return _ledger.idle(claimed)


def end_idle_run(run: ClaimPlan, stream: cuda_core.Stream, *, ran: bool) -> None:
    """Gives ``run``'s holds back after `begin_idle_run` and the wait for ``stream``;
    ``ran``: the op's work was enqueued (the stream advances by one op, as
    `Job.record` counts)."""
    with _ledger.lock:
        _ledger.release_locked(run)
        if ran:
            state = _streams.state(stream)
            with _streams._lock:
                state.epoch += 1


def record(state: _capture.CaptureState, op: DeviceOp[T]) -> T:
    """Records ``op`` into the active capture ``state``: its work is queued on the
    capture stream, where it is recorded instead of run (on the host: run once)."""
    job = Job(f"capture of {op.name}")
    run = Run(job, HostPolicy() if state.stream is None else SingleStream(state.stream), capture=state)
    try:
        result = op._enqueue(run, state.stream)
    except cuda_core.CudaError as exc:
        raise raised.graph_capture(
            f"recording {op.name!r} into the CUDA graph {state.name!r} failed: {exc} "
            "(during capture, work must only be queued on the capture stream: no synchronous "
            "allocation, copy or synchronization)"
        ) from exc
    state.results.append(result)
    return result


__all__ = ["Access", "DeviceOp", "FnOp", "SharedOp", "all_of", "value", "zip_ops"]
