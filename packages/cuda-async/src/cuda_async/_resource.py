"""Resources, their access points, and jobs (who holds what is the ledger's, `_ledger`).

A `Resource` stands for a piece of storage that ops read or write (cutile's
tensors wrap their storage in one). Who holds it is the ledger's (`_ledger`:
holds by domain and byte range, pending or running); a resource keeps its
*access points*: the (stream, epoch) of its last writer and of the readers
since, from which cross-stream dependencies are derived (event waits).

A *job* is one submission (`DeviceOp.sync`, `schedule`, `await`): it takes holds
as its leaf ops are enqueued and gives them all back when its completion is
observed by the host.
"""

from __future__ import annotations

import enum
from collections.abc import Hashable
import cuda_core

from cuda_async import _ledger, _streams
from cuda_async._ledger import refusal

_ledger_lock = _ledger.lock  # (both replaced with the native ones by `_native.batch_api`)
_streams_lock = _streams._lock


class Access(enum.IntEnum):
    """How an op uses a resource."""

    READ = 1
    WRITE = 2


_WRITE = Access.WRITE


class Resource:
    """Storage that ops declare they read or write.

    Args:
        name: shown in error messages (e.g. ``"tensor z"``).
        memory: the device memory behind it, if any (used by `copy_from`, e.g.
            when a CUDA graph's inputs are updated).
        layout: any hashable description of the storage (its size and kind,
            say); two resources may replace each other in a graph only if their
            layouts are equal. How one op uses the storage (a tensor's dtype and
            shape over it) is that op's `ResourceView`.

    Where its holds live in the ledger is ``span``: (domain, start, end); by
    default a domain of its own. A subclass for memory that other resources may
    share (views of one allocation, an array imported twice) gives the address
    space and byte range instead, so that overlapping holds see each other.

    Subclass it (or wrap storage in it) and override `copy_from` for storage
    that is not device memory, e.g. host arrays on the interpreter backend.
    """

    __slots__ = ("name", "memory", "layout", "span", "_last_write", "_reads", "__weakref__")

    def __init__(
        self,
        name: str = "",
        *,
        memory: cuda_core.DeviceMemory | None = None,
        layout: Hashable = None,
        span: tuple[Hashable, int, int] | None = None,
    ) -> None:
        self.name = name or f"resource@{id(self):x}"
        self.memory = memory
        self.layout = layout
        # (A domain of its own: its id, unique while a hold keeps the resource alive.)
        self.span: tuple[Hashable, int, int] = span if span is not None else (("resource", id(self)), 0, 1)
        self._last_write: tuple[cuda_core.Stream, int, Job] | None = None
        self._reads: dict[cuda_core.Stream, tuple[int, Job]] = {}

    def __repr__(self) -> str:
        return f"<Resource {self.name!r}{' (held)' if self.is_held else ''}>"

    def copy_from(self, source: Resource, stream: cuda_core.Stream | None) -> None:
        """Copies ``source``'s contents into this resource, queued on ``stream``
        (synchronously when ``stream`` is None).

        The default copies device memory to device memory; override for other storage.
        """
        if self.memory is None or source.memory is None:
            raise NotImplementedError(
                f"{type(self).__name__}.copy_from: {self.name} or {source.name} has no device memory; "
                "override copy_from to copy this kind of storage"
            )
        self.memory.copy_from(source.memory, stream=stream)

    # -- inspection -------------------------------------------------------------
    @property
    def holders(self) -> list[tuple[str, Access]]:
        """(label, access) of every hold on this resource's span: the ops made and not
        yet run that claimed it, and the jobs not yet complete that hold it."""
        return [(label, Access.WRITE if writes else Access.READ) for label, writes in _ledger.holders(*self.span)]

    @property
    def is_held(self) -> bool:
        """Whether any op, claimed or running, holds this resource."""
        return bool(_ledger.holders(*self.span))

    def check_available(self, access: Access = Access.WRITE, *, by: str = "the host") -> None:
        """Raises `OwnershipError` if ``by`` may not use this resource with ``access``
        now (e.g. cutile calls it before reading a tensor back to the host)."""
        _ledger.check(*self.span, access is Access.WRITE, by)

    def wait_for_last_write(self) -> None:
        """Blocks the host until the last write recorded on this resource is done on
        the device: a job's holds may end before its work does (a future dropped
        unwaited, a shared op's inner op once queued), and its record stays until the
        job is seen complete. Nothing to wait for when no write is recorded."""
        last = self._last_write
        if last is not None:
            event, _ = _streams.event_covering(last[0], last[1])
            event.synchronize()


class ResourceView:
    """A resource as one op uses it, for a CUDA graph's inputs.

    Args:
        resource: the resource.
        layout: what the op's work assumes of the memory, opaque to cuda_async:
            compared with ``==`` and shown with ``str`` (a tensor's dtype, shape and
            strides, say). A graph input is replaced only by one of an equal layout.
        label: who uses it, for messages (e.g. ``"parameter 'x' of launch of add"``).
    """

    __slots__ = ("resource", "layout", "label")

    def __init__(self, resource: Resource, layout: Hashable, label: str = "") -> None:
        if not isinstance(resource, Resource):
            raise TypeError(f"ResourceView: expected a Resource, got {type(resource).__name__}")
        self.resource = resource
        self.layout = layout
        self.label = label or resource.name

    @staticmethod
    def of(resource: Resource) -> ResourceView:
        """The view of an op that says nothing more: the resource's own layout."""
        return ResourceView(resource, resource.layout, resource.name)

    def __repr__(self) -> str:
        return f"<ResourceView {self.label}: {self.layout}>"


def merge_accesses(
    reads: tuple[Resource, ...], writes: tuple[Resource, ...]
) -> tuple[tuple[Resource, Access], ...]:
    """Each resource once, with WRITE winning over READ."""
    merged: dict[Resource, Access] = {r: Access.READ for r in reads}
    for r in writes:
        merged[r] = Access.WRITE
    return tuple(merged.items())


# A hold an op takes: (resource, domain, start, end, writes, label or None: the op's name)
Span = tuple[Resource, Hashable, int, int, bool, "str | None"]


class AccessSet:
    """The resources an op reads and writes, merged once (a resource both read and
    written counts as written), and the holds it takes in the ledger: made once,
    shared by many ops over the same resources (`FnOp.from_accesses`).

    ``spans``: the holds, when they are narrower than the resources' own spans
    (cutile holds each tensor argument's bytes): (resource, domain, start, end,
    writes, label) each, where ``label`` names who in the op uses the memory
    (``"launch of add (parameter 'z')"``: the hold and a conflict it meets are named
    so) or is None (the op's name)."""

    __slots__ = ("accesses", "interest", "spans", "hold_keys", "only_domain", "keys", "resources")

    def __init__(self, reads: tuple[Resource, ...] = (), writes: tuple[Resource, ...] = (),
                 spans: tuple[Span, ...] | None = None) -> None:
        for resource in reads + writes:
            if not isinstance(resource, Resource):
                raise TypeError(f"reads and writes take Resource objects, got {type(resource).__name__}")
        self.accesses = merge_accesses(reads, writes)
        self.interest = interest_of(self.accesses)
        if spans is None:
            spans = tuple((r, *r.span, a is Access.WRITE, None) for r, a in self.accesses)
        self.spans: tuple[Span, ...] = spans
        # (domain, start, end) and writes of each hold: how a job finds its own (`Job.holds`).
        keys = [(domain, start, end) for _, domain, start, end, _, _ in spans]
        self.hold_keys: tuple[tuple[tuple[Hashable, int, int], bool], ...] = tuple(
            zip(keys, [span[4] for span in spans]))
        # For a job holding nothing yet (a graph replay's, say): its holds taken in bulk
        # when they are distinct ranges of one device's domain (`Job.acquire`).
        self.keys = tuple(keys)
        self.resources = dict.fromkeys([span[0] for span in spans])
        domains = {key[0] for key in keys}
        only = next(iter(domains)) if len(domains) == 1 else None
        self.only_domain: Hashable | None = (
            only if only is not None and type(only) is not tuple and len(set(keys)) == len(keys) else None)


def interest_of(accesses: tuple[tuple[Resource, Access], ...]) -> dict[object, int]:
    """``accesses`` as the per-stream bookkeeping keeps them: resource -> 1 (read) or 2 (write)."""
    return {r: 2 if a is _WRITE else 1 for r, a in accesses}


def is_live(resource: object, access: int, stream: cuda_core.Stream, epoch: int) -> bool:
    """Whether ``resource``'s record still points at (``stream``, ``epoch``) for ``access``
    (a completed job's records are forgotten, and nothing will wait for them)."""
    assert isinstance(resource, Resource)
    if access == Access.WRITE:
        last = resource._last_write
        return last is not None and last[0] is stream and last[1] == epoch
    read = resource._reads.get(stream)
    return read is not None and read[0] == epoch


class Job:
    """One submission: the holds it took, the streams it used, its completion."""

    __slots__ = ("name", "parent", "follows", "streams", "held", "holds", "domains", "holds_all_of", "retained",
                 "released", "__weakref__")

    def __init__(self, name: str, *, parent: Job | None = None, follows: Job | None = None) -> None:
        self.name = name
        self.parent = parent
        # The job whose work this one's is queued after on the same stream (a batch
        # continuing another, `batch(after=...)`): its holds are no conflict for this
        # job's ops, as the stream orders them after its work.
        self.follows = follows
        self.streams: dict[cuda_core.Stream, None] = {}
        self.held: dict[Resource, None] = {}
        # Its holds in the ledger, by (domain, start, end): (the domain's list, the hold).
        self.holds: dict[tuple[Hashable, int, int], tuple[_ledger.DomainHolds, _ledger.Hold]] = {}
        # The domains it holds ranges of (their lists give its holds back at once).
        self.domains: dict[Hashable, _ledger.DomainHolds] = {}
        # The last access set every hold of which the job was found to hold as strongly
        # (its holds only grow stronger until `release`): a loop's op is asked once.
        self.holds_all_of: AccessSet | None = None
        # Resources the job's work uses but no longer holds (a shared op's, handed on
        # to its consumers): kept alive, so their memory stays valid, until release.
        self.retained: list[Resource] = []
        self.released = False

    def __repr__(self) -> str:
        return f"<Job {self.name!r}{' released' if self.released else ''}>"

    def check(self, access_set: AccessSet, op_name: str) -> None:
        """Raises `OwnershipError` if any hold of ``access_set`` conflicts with another
        job's or a pending op's (a graph capture checks, and takes nothing)."""
        with _ledger_lock:
            _ledger.drain_dropped()
            self._check_locked(access_set.spans, op_name)

    def _check_locked(self, spans: tuple[Span, ...], op_name: str, on_stream: bool = True) -> None:
        holds = _ledger.holds
        parent = self.parent
        follows = self.follows if parent is None else parent.follows
        # An op run on the host is ordered after the followed job's work only when that
        # ran on the host too (used no stream: it is done).
        if follows is None or (not on_stream and follows.streams):
            mine = lambda owner: owner is self or owner is parent  # noqa: E731
        else:
            mine = lambda owner: (owner is self or owner is parent or owner is follows  # noqa: E731
                                  or owner.parent is follows)
        for _, domain, start, end, writes, label in spans:
            held = holds.get(domain)
            if held:
                hold = _ledger.conflict(held, start, end, writes, mine)
                if hold is not None:
                    raise refusal(hold, writes, label or op_name)

    def acquire(
        self,
        access_set: AccessSet,
        op_name: str,
        stream: cuda_core.Stream | None,
        claim: _ledger.ClaimPlan | None = None,
    ) -> None:
        """Checks the op's holds against other jobs' and pending ops', and takes them
        (named by the spans' labels where they give one, else by ``op_name``);
        the pending holds of ``claim`` (the op's own, taken when it was made) become
        the job's in the same step (given back, also when the check fails: the op
        did not start). On ``stream``, makes it wait (events) for earlier
        conflicting accesses on other streams.

        Raises `OwnershipError` before taking anything if any hold conflicts.
        """
        with _ledger_lock:
            if claim is not None:
                _ledger.release_locked(claim)
            if _ledger.dropped:
                _ledger.drain_dropped()
            held = self.held
            holds = self.holds
            spans = access_set.spans
            domain = access_set.only_domain
            if not holds and domain is not None:  # a fresh job's holds on one device: taken in bulk
                self._check_locked(spans, op_name, stream is not None)
                listed = _ledger.domain_list(domain)
                taken = [(start, end, writes, label or op_name, self, resource.name)
                         for resource, _, start, end, writes, label in spans]
                listed.take(self, taken)
                self.domains[domain] = listed
                holds.update(zip(access_set.keys, [(listed, hold) for hold in taken]))
                held.update(access_set.resources)
                if stream is not None:
                    self._wait_for(access_set, stream)
                return
            # The usual case in a loop: the job holds all of them already, as strongly.
            for _, domain, start, end, writes, _ in spans:
                mine = holds.get((domain, start, end))
                if mine is None or (writes and not mine[1][2]):
                    self._check_locked(spans, op_name, stream is not None)
                    break
            for resource, domain, start, end, writes, label in spans:
                key = (domain, start, end)
                previous = holds.get(key)
                if previous is None or (writes and not previous[1][2]):
                    listed = _ledger.domain_list(domain)
                    hold = (start, end, writes, label or op_name, self, resource.name)
                    listed.take(self, [hold])
                    self.domains[domain] = listed
                    if previous is not None:
                        listed.give_back(self, previous[1])
                    holds[key] = (listed, hold)
                held[resource] = None
            if stream is not None:
                self._wait_for(access_set, stream)

    def _wait_for(self, access_set: AccessSet, stream: cuda_core.Stream) -> None:
        """Makes ``stream`` wait (events) for the earlier conflicting accesses of
        ``access_set``'s resources on other streams (the caller holds the ledger's lock)."""
        for resource, access in access_set.accesses:
            last = resource._last_write
            if last is not None and last[0] is not stream:
                _streams.wait_point(stream, last[0], last[1])
            if access is Access.WRITE and resource._reads:
                for other, (epoch, _) in list(resource._reads.items()):
                    if other is not stream:
                        _streams.wait_point(stream, other, epoch)

    def is_steady(self, access_set: AccessSet, stream: cuda_core.Stream, state: _streams.StreamState) -> bool:
        """Whether a leaf op over ``access_set`` finds the state a leaf op repeated in
        this job on ``stream`` (``state``: its bookkeeping) usually finds: the job has
        used the stream and holds every hold of ``access_set`` as strongly already,
        every access's last point is on the stream, and the access points the stream
        has not marked with an event are all superseded by the op's. Then `acquire`
        would take nothing (it would give the op's claim back: the job's holds cover
        it) and make no wait, and `_streams.before_enqueue` would record no event: the
        caller gives the claim back, enqueues the op on the stream and calls
        `record_steady`. Otherwise the caller takes the general
        path, which checks and names every conflict.

        Asked without the locks, by the thread walking the job: what it reads is the
        job's own (its streams and holds, changed only by its walk until it is
        released) or guarded by the job's holds (no other job writes what it holds,
        nor reads what it writes); the stream's interest is replaced whole, never
        changed in place (and replaced by `record_steady`, under the locks)."""
        if _ledger.dropped or stream not in self.streams:
            return False  # (claims dropped by the garbage collector: the general path gives them back)
        if access_set is not self.holds_all_of:
            holds = self.holds
            for key, writes in access_set.hold_keys:
                mine = holds.get(key)
                if mine is None or (writes and not mine[1][2]):
                    return False
            self.holds_all_of = access_set
        for resource, access in access_set.accesses:
            last = resource._last_write
            if last is not None and last[0] is not stream:
                return False
            if access is _WRITE:
                reads = resource._reads
                if reads and (len(reads) > 1 or stream not in reads):
                    return False
        pending = state.interest
        if pending and pending is not access_set.interest:
            interest = access_set.interest
            for marked, before in pending.items():
                now = interest.get(marked, 0)
                if not (now == 2 if before == 2 else now > 0):
                    return False
        return True

    def record_steady(self, access_set: AccessSet, stream: cuda_core.Stream, state: _streams.StreamState) -> int:
        """`record` for an op enqueued on the stream of ``state`` after `is_steady`."""
        with _ledger_lock, _streams_lock:
            epoch = state.epoch = state.epoch + 1
            state.interest = access_set.interest
            write, read = (stream, epoch, self), (epoch, self)
            for resource, access in access_set.accesses:
                if access is _WRITE:
                    resource._last_write = write
                    resource._reads.clear()
                else:
                    resource._reads[stream] = read
        return epoch

    def record(
        self,
        accesses: tuple[tuple[Resource, Access], ...],
        stream: cuda_core.Stream,
        interest: dict[object, int],
    ) -> int:
        """Notes that an op with ``accesses`` (``interest``: the same, as `interest_of`
        makes it) has just been enqueued on ``stream``."""
        epoch = _streams.advance(stream, interest)
        with _ledger_lock:
            for resource, access in accesses:
                if access is Access.WRITE:
                    resource._last_write = (stream, epoch, self)
                    resource._reads.clear()
                else:
                    resource._reads[stream] = (epoch, self)
        return epoch

    def finish(self, *, after_error: bool = False) -> None:
        """Waits on the host for every stream the job used, then releases it as
        completed. ``after_error``: a driver error while waiting is dropped (the
        error that ended the job matters more)."""
        try:
            for stream in self.streams:
                stream.synchronize()
        except cuda_core.CudaError:
            if not after_error:
                raise
        finally:
            self.release(completed=True)

    def release(self, *, completed: bool) -> None:
        """Gives every hold back. With ``completed`` (the device work is known to be
        done) the job's access points are forgotten too: nothing needs to wait for them."""
        with _ledger_lock:
            if self.released:
                return
            self.released = True
            if completed and self.streams:
                used = self.held if not self.retained else {**self.held, **dict.fromkeys(self.retained)}
                _streams.forget(self.streams, used)
            # By domain: a domain's list gives a job's holds back at once (a graph's job
            # holds hundreds of ranges of one device).
            for domain, listed in self.domains.items():
                listed.give_back_all(self)
                if not listed and type(domain) is tuple and domain not in _ledger.pinned:  # a resource's own: not kept
                    _ledger.holds.pop(domain, None)
            self.domains.clear()
            self.holds.clear()
            self.holds_all_of = None
            if completed:
                for resource in self.held:
                    last = resource._last_write
                    if last is not None and last[2] is self:
                        resource._last_write = None
                    reads = resource._reads
                    if reads:
                        for stream, (_, job) in list(reads.items()):
                            if job is self:
                                del reads[stream]
            self.held.clear()
            self.retained.clear()
            self.follows = None  # (an earlier job matters only while this one runs)
