"""The ownership ledger: every hold on memory, in one place, pending or running.

A hold is a byte range of a *domain* (a device's address space, or the private
space of one `Resource`) with an access, a label for messages and an owner:

- *pending* (owner None): taken when a layer above makes an op that runs later,
  through a `ClaimPlan` (cutile claims each tensor argument at ``kernel(...)``);
- *running* (owner: a `Job`): taken as the job's ops are enqueued, given back
  when the job's completion is observed. A job starting the op of a claim takes
  the claim's holds over in the same step (`Job.acquire`'s ``claim``).

A write excludes every other overlapping hold; reads exclude writes. Holds are
tuples ``(start, end, writes, label, owner, what)`` (``what``: the resource's name,
for messages) in one list per domain (a `DomainHolds`), released by identity; a
domain's list is never replaced, so a plan may keep it. cuda_async's C API
(native/batch_api.h) takes and gives back holds on these lists for the native
launch paths, under the same lock; nothing else touches them.

A domain's list keeps the holds of jobs (taken and given back by `Job`, in Python
only) at its front, also grouped by owner, and every other hold (pending claims,
synchronous runs' holds: the C API's too, which appends them and removes them by
identity) after them. A check skips the holds of a job it exempts (the batch or
job an op joins, its own) as one group, and scans the others: in a batch whose
job holds hundreds of ranges, a claim or an acquire looks at a few holds.
"""

from __future__ import annotations

import collections
import threading
from collections.abc import Callable, Hashable, Iterable
from typing import TYPE_CHECKING, Any

from cuda_async._errors import raised

if TYPE_CHECKING:
    from cuda_async._resource import Job

# (start, end, writes, label, owner: Job | None while pending, what)
Hold = tuple[int, int, bool, str, Any, str]

lock = threading.RLock()  # (the native one once the extension is loaded: `_native.batch_api`)


class DomainHolds(list[Hold]):
    """The holds of one domain: a list, as the C API reads and changes it (it appends
    holds and removes them by identity; their order means nothing to it), whose first
    ``front`` items are the holds of jobs, also kept in ``owners`` by job in the
    order taken. Only `take` and `give_back` (a `Job`'s, under the lock) change the
    front; every other hold is appended after it and removed from there."""

    __slots__ = ("front", "owners")

    def __init__(self) -> None:
        super().__init__()
        self.front = 0
        self.owners: dict[Any, list[Hold]] = {}

    def take(self, owner: Any, taken: list[Hold]) -> None:
        """Adds running holds of the job ``owner`` (the caller holds `lock`)."""
        front = self.front
        self[front:front] = taken
        self.front = front + len(taken)
        group = self.owners.get(owner)
        if group is None:
            self.owners[owner] = list(taken)
        else:
            group.extend(taken)

    def give_back(self, owner: Any, hold: Hold) -> None:
        """Removes one running hold that `take` added for the job ``owner`` (the caller
        holds `lock`). A job's holds in a domain differ from each other and from every
        other hold (their owner, their range), so it is found by equality."""
        group = self.owners[owner]
        del self[self.index(hold, 0, self.front)]
        self.front -= 1
        group.remove(hold)
        if not group:
            del self.owners[owner]

    def give_back_all(self, owner: Any) -> None:
        """Removes every running hold of the job ``owner`` (the caller holds `lock`)."""
        group = self.owners.pop(owner, None)
        if group is None:
            return
        front = self.front
        if not self.owners:  # they are the whole front
            del self[:front]
        else:
            self[:front] = [hold for hold in self[:front] if hold[4] is not owner]
        self.front = front - len(group)


holds: dict[Hashable, DomainHolds] = {}
# Domains whose list a plan keeps: never removed when empty (device domains never are).
pinned: set[Hashable] = set()
# Claims given back by the garbage collector (a launch freed unrun): it may run in
# the middle of any code, so they are queued here (no lock) and given back by the
# next user of the ledger, under the lock.
dropped: collections.deque[ClaimPlan] = collections.deque()


def domain_list(domain: Hashable) -> DomainHolds:
    """The holds of ``domain`` (the caller holds `lock`)."""
    found = holds.get(domain)
    if found is None:
        found = holds[domain] = DomainHolds()
    return found


def drain_dropped() -> None:
    """Gives back the claims the garbage collector dropped (the caller holds `lock`)."""
    while dropped:
        try:
            plan = dropped.popleft()
        except IndexError:
            return
        release_locked(plan)


_SMALL_GROUP = 8  # a job holding at most this many ranges of a domain: its holds are scanned before it is asked


def conflict(held: DomainHolds, start: int, end: int, writes: bool,
             exempt: Callable[[Any], bool] | None = None) -> Hold | None:
    """The first hold of ``held`` that a ``writes`` access to ``[start, end)``
    conflicts with, skipping running holds whose owner ``exempt`` accepts: the jobs'
    holds owner by owner (an exempt one's as a whole), then the others in order."""
    front = held.front
    if front > _SMALL_GROUP:  # (a few jobs' holds: scanned with the others, as one list, below)
        for owner, group in held.owners.items():
            if len(group) > _SMALL_GROUP:  # asked once, before its holds
                if owner.released or (exempt is not None and exempt(owner)):
                    continue
                for hold in group:
                    if hold[0] < end and start < hold[1] and (writes or hold[2]):
                        return hold
            else:  # asked only if one of its holds conflicts
                for hold in group:
                    if hold[0] < end and start < hold[1] and (writes or hold[2]):
                        if owner.released or (exempt is not None and exempt(owner)):
                            break
                        return hold
    for hold in held[front:] if front > _SMALL_GROUP else held:
        if hold[0] < end and start < hold[1] and (writes or hold[2]):
            owner = hold[4]
            if owner is not None and (owner.released or (exempt is not None and exempt(owner))):
                continue
            return hold
    return None


def shown(name: str) -> str:
    """An op's name or a holder's label in a message: quoted, unless it quotes what
    it names itself (a label such as "launch of add (parameter 'z')")."""
    return name if "'" in name else repr(name)


def refusal(hold: Hold, writes: bool, by: str, pending_by: str | None = None) -> Exception:
    """The error for ``by`` meeting ``hold``; ``pending_by`` names the requester when
    the hold is a pending one (the caller's own words: "add: parameter 'z'")."""
    if hold[4] is None:
        action = "writes" if hold[2] else "reads"
        return raised.ownership(
            f"{pending_by or by}: the tensor is held by the pending {hold[3]}, which {action} it; "
            "run that operation (.sync()) first", resource=hold[5], holder=hold[3], requester=pending_by or by)
    held = "written" if hold[2] else "read"
    wanted = "write" if writes else "read"
    return raised.ownership(
        f"{hold[5]} is {held} by the pending op {shown(hold[3])}; {shown(by)} may not {wanted} it "
        "until that op completes (sync or await its future first)",
        resource=hold[5], holder=hold[3], requester=by)


def check(domain: Hashable, start: int, end: int, writes: bool, by: str,
          exempt: Callable[[Any], bool] | None = None) -> None:
    """Raises `OwnershipError` if any hold conflicts with ``by`` accessing ``[start,
    end)`` of ``domain`` (the host reading a tensor back, say)."""
    # (cuda_async.check_access is this function)
    with lock:
        drain_dropped()
        held = holds.get(domain)
        if held:
            hold = conflict(held, start, end, writes, exempt)
            if hold is not None:
                raise refusal(hold, writes, by)


class ClaimPlan:
    """The pending holds an op takes each time it is made over the same memory:
    made once (cutile: per binding of a kernel's arguments), claimed by every op.

    ``spans``: (domain, start, end, writes, label, by, what) per hold, where
    ``label`` names the holder in others' messages ("launch of add (parameter
    'z')"), ``by`` the requester in its own ("add: parameter 'z'") and ``what`` the
    memory ("tensor memory on cuda:0"). A hold the plan takes is the very tuple it
    made (``entries``): given back by identity."""

    __slots__ = ("lists", "entries", "labels", "requesters", "_checks", "_takes", "_gives")

    def __init__(self, spans: Iterable[tuple[Hashable, int, int, bool, str, str, str]]) -> None:
        listed = list(spans)
        with lock:
            lists = tuple(domain_list(span[0]) for span in listed)
            pinned.update(span[0] for span in listed)
        entries: tuple[Hold, ...] = tuple((s, e, w, label, None, what) for _, s, e, w, label, _, what in listed)
        self._made(lists, entries, tuple(span[4] for span in listed), tuple(span[5] for span in listed))

    def _made(self, lists: tuple[DomainHolds, ...], entries: tuple[Hold, ...], labels: tuple[str, ...],
              requesters: tuple[str, ...]) -> None:
        self.lists, self.entries, self.labels, self.requesters = lists, entries, labels, requesters
        # What `claim` and `release_locked` walk on every call, zipped once.
        self._checks = tuple(zip(lists, entries, labels, requesters))
        self._takes = tuple(zip(lists, entries))
        self._gives = self._takes[::-1]  # latest first

    def over(self, ranges: list[tuple[int, int]]) -> ClaimPlan:
        """The same holds (domains, accesses, labels) over other byte ranges, one
        (start, end) per hold: another call's memory in the same layouts."""
        plan: ClaimPlan = ClaimPlan.__new__(ClaimPlan)
        entries = tuple((start, end, w, label, None, what)
                        for (start, end), (_, _, w, label, _, what) in zip(ranges, self.entries, strict=True))
        plan._made(self.lists, entries, self.labels, self.requesters)
        return plan

    def owned_by(self, owner: Job) -> ClaimPlan:
        """The same holds as running ones of ``owner`` (a native synchronous run's)."""
        plan: ClaimPlan = ClaimPlan.__new__(ClaimPlan)
        entries = tuple((s, e, w, label, owner, what) for s, e, w, label, _, what in self.entries)
        plan._made(self.lists, entries, self.labels, self.requesters)
        return plan

    def claim(self, joined: Callable[[Any], bool] | None = None) -> None:
        """Takes the holds, after checking that none conflicts with another hold
        (but running holds of the jobs ``joined`` accepts: those the op will run in).
        Raises `OwnershipError` before taking anything."""
        with lock:
            if dropped:
                drain_dropped()
            for held, entry, label, by in self._checks:
                if held:
                    hold = conflict(held, entry[0], entry[1], entry[2], joined)
                    if hold is not None:
                        raise refusal(hold, entry[2], label, by)
            for held, entry in self._takes:  # appended after every check
                held.append(entry)

    def release(self) -> None:
        """Gives back the holds `claim` took (once per claim)."""
        with lock:
            if dropped:
                drain_dropped()
            release_locked(self)

    def drop(self) -> None:
        """Gives the holds back from a finalizer (queued; safe anywhere)."""
        dropped.append(self)


def remove(held: DomainHolds, hold: Hold) -> None:
    """Removes ``hold``, a hold after the jobs' (a claim's, a run's), from ``held``
    by identity (the latest such entry)."""
    if held and held[-1] is hold:  # the usual case: the latest holds go first
        held.pop()
        return
    for index in range(len(held) - 1, held.front - 1, -1):
        if held[index] is hold:
            del held[index]
            return


def release_locked(plan: ClaimPlan) -> None:
    """Gives back the holds of ``plan`` (the caller holds `lock`), latest first."""
    for held, entry in plan._gives:
        if held and held[-1] is entry:  # the usual case, without a call
            held.pop()
        else:
            remove(held, entry)


def idle(plan: ClaimPlan) -> bool:
    """Whether no running hold overlaps any of ``plan``'s spans (the caller holds
    `lock`): its pending holds may then become a run's without another check, as
    every hold taken since the claim was checked against them."""
    for held, entry in zip(plan.lists, plan.entries):
        start, end = entry[0], entry[1]
        for hold in held:
            if hold[4] is not None and hold[0] < end and start < hold[1]:
                return False
    return True


def hand_over(claimed: ClaimPlan, run: ClaimPlan) -> None:
    """Replaces ``claimed``'s pending holds with ``run``'s (the same spans, running;
    the caller holds `lock`)."""
    release_locked(claimed)  # first: the claim's holds are the latest, popped without a search
    for held, entry in zip(run.lists, run.entries):
        held.append(entry)


def holders(domain: Hashable, start: int, end: int) -> list[tuple[str, bool]]:
    """(label, writes) of the holds, pending or running, overlapping ``[start, end)`` of ``domain``."""
    with lock:
        drain_dropped()
        return [(hold[3], hold[2]) for hold in holds.get(domain, ())
                if hold[0] < end and start < hold[1] and (hold[4] is None or not hold[4].released)]
