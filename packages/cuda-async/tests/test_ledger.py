"""The one ownership ledger: holds by domain and byte range, pending (a `ClaimPlan`'s)
then running (a `Job`'s), one conflict rule for both."""

from __future__ import annotations

import gc

import pytest

import cuda_async as ca
from cuda_async import _ledger


def _plan(domain: str, *spans: tuple[int, int, bool, str]) -> ca.ClaimPlan:
    return ca.ClaimPlan((domain, start, end, writes, f"launch of k (parameter '{name}')", f"k: parameter '{name}'",
                         "memory") for start, end, writes, name in spans)


def _held(domain: str) -> list[tuple[int, int, bool, str, bool]]:
    return [(h[0], h[1], h[2], h[3], h[4] is None) for h in _ledger.holds.get(domain, ())]


def test_claims_exclude_overlapping_writes_but_not_disjoint_ranges_or_shared_reads() -> None:
    domain = "test:claims"
    first = _plan(domain, (0, 100, True, "z"), (200, 300, False, "x"))
    ca.claim(first)
    ca.claim(_plan(domain, (100, 200, True, "w"), (250, 260, False, "y")))  # disjoint write, shared read
    with pytest.raises(ca.OwnershipError, match=r"k: parameter 'a': the tensor is held by the pending launch of k "
                                                r"\(parameter 'z'\), which writes it"):
        ca.claim(_plan(domain, (99, 101, False, "a")))
    with pytest.raises(ca.OwnershipError, match=r"held by the pending launch of k \(parameter 'x'\), which reads it"):
        ca.claim(_plan(domain, (290, 310, True, "b")))
    before = _held(domain)
    with pytest.raises(ca.OwnershipError):  # a refused claim takes nothing, not even its first span
        ca.claim(_plan(domain, (400, 500, True, "c"), (50, 60, True, "d")))
    assert _held(domain) == before
    first.release()
    ca.claim(_plan(domain, (50, 60, True, "d")))  # free once the first claim is given back
    _ledger.holds[domain].clear()


def test_a_job_takes_a_claim_over_in_one_step_and_gives_it_back_when_it_fails() -> None:
    domain = "test:handover"
    z = ca.Resource("tensor z", span=(domain, 0, 64))
    access = ca.AccessSet((), (z,), spans=((z, domain, 0, 64, True, "launch of k (parameter 'z')"),))
    claim = _plan(domain, (0, 64, True, "z"))
    ca.claim(claim)
    job = ca.Job("launch of k")
    job.acquire(access, "launch of k", None, claim)
    assert _held(domain) == [(0, 64, True, "launch of k (parameter 'z')", False)]  # running, not pending
    with pytest.raises(ca.OwnershipError, match=r"tensor z is written by the pending op launch of k \(parameter 'z'\)"):
        ca.check_access(domain, 10, 20, False, "to_numpy")
    other = _plan(domain, (32, 96, False, "x"))
    with pytest.raises(ca.OwnershipError, match="written by the pending op"):
        ca.claim(other)
    job.release(completed=True)
    assert _held(domain) == []
    # A job whose check fails gives the claim back as well: its op did not start. (The
    # claim was made beside the blocker's running hold, as one made in the blocker's
    # batch is; the op then runs in another job.)
    blocker = ca.Job("blocker")
    blocker.acquire(ca.AccessSet((), (z,), spans=((z, domain, 0, 8, True, None),)), "blocker", None)
    claim.claim(lambda owner: owner is blocker)
    with pytest.raises(ca.OwnershipError, match="'blocker'"):
        ca.Job("launch of k").acquire(access, "launch of k", None, claim)
    assert [h[3] for h in _ledger.holds[domain]] == ["blocker"]
    blocker.release(completed=True)


def test_a_dropped_claim_is_given_back_by_the_next_user_of_the_ledger() -> None:
    domain = "test:dropped"
    claim = _plan(domain, (0, 8, True, "z"))
    ca.claim(claim)
    claim.drop()  # as a finalizer does: queued, no lock taken
    assert len(_ledger.holds[domain]) == 1 and len(_ledger.dropped) == 1
    ca.check_access(domain, 0, 8, True, "the host")  # drains the queue first, then finds nothing
    assert _ledger.holds[domain] == [] and not _ledger.dropped


def test_check_access_can_leave_running_holds_out() -> None:
    domain = "test:pending-only"
    z = ca.Resource("tensor z", span=(domain, 0, 16))
    job = ca.Job("op")
    job.acquire(ca.AccessSet((), (z,)), "op", None)
    ca.check_access(domain, 0, 16, True, "unpartition()", lambda owner: True)  # running holds exempt
    with pytest.raises(ca.OwnershipError):
        ca.check_access(domain, 0, 16, True, "unpartition()")
    job.release(completed=True)


def test_the_domains_of_resources_of_their_own_do_not_accumulate() -> None:
    before = len(_ledger.holds)
    for _ in range(50):
        resource = ca.Resource("scratch")
        ca.DeviceOp.from_fn(lambda stream: None, reads=(), writes=(resource,), name="op", allocates=False).sync()
        del resource
    gc.collect()
    assert len(_ledger.holds) <= before + 1


def test_a_fresh_jobs_holds_on_one_domain_are_taken_and_given_back_whole_and_still_checked() -> None:
    domain = "test:bulk"
    tensors = [ca.Resource(f"tensor {i}", span=(domain, 100 * i, 100 * i + 50)) for i in range(4)]

    def access(first: int, written: bool) -> ca.AccessSet:
        chosen = tuple(tensors[first:first + 2])
        spans = tuple((t, domain, t.span[1], t.span[2], written, f"launch (parameter '{t.name}')") for t in chosen)
        return ca.AccessSet(() if written else chosen, chosen if written else (), spans=spans)

    a, b = ca.Job("a"), ca.Job("b")
    a.acquire(access(0, True), "a", None)  # tensors 0, 1 written
    with pytest.raises(ca.OwnershipError,
                       match=r"tensor 1 is written by the pending op launch \(parameter 'tensor 1'\)"):
        ca.Job("c").acquire(access(1, False), "c", None)  # overlaps tensor 1: refused, nothing taken
    assert [h[3] for h in _ledger.holds[domain]] == ["launch (parameter 'tensor 0')", "launch (parameter 'tensor 1')"]
    b.acquire(access(2, False), "b", None)  # tensors 2, 3 read: disjoint
    assert [h[4] for h in _ledger.holds[domain]] == [a, a, b, b]
    a.release(completed=True)  # a's holds are not the end of the list: given back one by one
    assert [h[4] for h in _ledger.holds[domain]] == [b, b]
    b.release(completed=True)  # the end of the list: given back at once
    assert _ledger.holds[domain] == []
    again = ca.Job("again")
    again.acquire(access(1, True), "again", None)  # tensor 1 is free again
    again.acquire(access(0, True), "again", None)  # a job holding something takes the general path
    assert [h[0] for h in _ledger.holds[domain]] == [100, 200, 0]
    again.release(completed=True)
    assert _ledger.holds[domain] == []


def test_a_domains_job_holds_stay_before_its_other_holds_and_an_exempt_job_is_skipped_whole() -> None:
    domain = "test:front"
    tensors = [ca.Resource(f"tensor {i}", span=(domain, 100 * i, 100 * i + 50)) for i in range(6)]

    def access(index: int, written: bool = True) -> ca.AccessSet:
        t = tensors[index]
        spans = ((t, domain, t.span[1], t.span[2], written, f"launch (parameter '{t.name}')"),)
        return ca.AccessSet(() if written else (t,), (t,) if written else (), spans=spans)

    job, other = ca.Job("job"), ca.Job("other")
    job.acquire(access(0), "job", None)
    pending = _plan(domain, (200, 250, True, "p"))
    ca.claim(pending)
    other.acquire(access(3, written=False), "other", None)  # a read: another owner, taken after the claim
    job.acquire(access(1), "job", None)
    listed = _ledger.holds[domain]
    # The jobs' holds in the order taken, the pending claim after them.
    assert [(h[0], h[4]) for h in listed] == [(0, job), (300, other), (100, job), (200, None)]
    assert listed.front == 3 and list(listed.owners) == [job, other]
    assert [h[0] for h in listed.owners[job]] == [0, 100]
    # A claim joining `job` passes its holds.
    joined = _plan(domain, (10, 20, True, "a"), (110, 120, False, "b"))
    joined.claim(lambda owner: owner is job)
    joined.release()
    # Everything else is still refused, by whichever hold it meets.
    with pytest.raises(ca.OwnershipError, match=r"tensor 1 is written by the pending op launch \(parameter 'tensor 1'\)"):
        ca.claim(_plan(domain, (120, 130, False, "c")))
    with pytest.raises(ca.OwnershipError, match=r"held by the pending launch of k \(parameter 'p'\), which writes it"):
        _plan(domain, (210, 220, False, "d")).claim(lambda owner: True)  # pending holds are never exempt
    with pytest.raises(ca.OwnershipError, match=r"tensor 3 is read by the pending op"):
        _plan(domain, (300, 310, True, "e")).claim(lambda owner: owner is job)
    ca.claim(read := _plan(domain, (300, 310, False, "f")))  # reads share
    read.release()
    with pytest.raises(ca.OwnershipError, match="tensor 0 is written"):
        ca.check_access(domain, 0, 1, False, "the host")
    # A job upgrading a read to a write gives the read back from the front.
    other.acquire(access(3), "other", None)
    assert [(h[0], h[2], h[4]) for h in listed] == [(0, True, job), (100, True, job), (300, True, other),
                                                    (200, True, None)]
    assert listed.front == 3 and [h[2] for h in listed.owners[other]] == [True]
    job.release(completed=True)  # another owner's holds stay, in order, before the claim
    assert [(h[0], h[4]) for h in listed] == [(300, other), (200, None)]
    assert listed.front == 1 and list(listed.owners) == [other]
    ca.claim(again := _plan(domain, (0, 150, True, "g")))  # job's memory is free
    again.release()
    other.release(completed=True)
    assert listed == [(200, 250, True, "launch of k (parameter 'p')", None, "memory")] and listed.front == 0
    pending.release()
    assert listed == [] and not listed.owners


def test_a_check_among_a_batch_jobs_many_holds_finds_what_it_must() -> None:
    # The decode step's state: one job holding hundreds of ranges of the device, each
    # new op checking its spans. The job's own holds are exempt for its ops, and met by
    # everyone else's.
    domain = "test:many"
    job = ca.Job("batch")
    for i in range(300):
        r = ca.Resource(f"tensor {i}", span=(domain, 1000 * i, 1000 * i + 512))
        job.acquire(ca.AccessSet((), (r,), spans=((r, domain, 1000 * i, 1000 * i + 512, True, None),)), "batch", None)
    listed = _ledger.holds[domain]
    assert listed.front == len(listed) == 300
    mine = lambda owner: owner is job  # noqa: E731
    group = listed.owners[job]

    class Unread(list):  # type: ignore[type-arg]
        def __iter__(self):  # type: ignore[no-untyped-def]
            raise AssertionError("an exempt job's holds were scanned")

    for i in range(0, 300, 7):
        joined = _plan(domain, (1000 * i, 1000 * i + 8, True, "z"))
        listed.owners[job] = Unread(group)  # (a check joining the job does not look at its holds)
        joined.claim(mine)
        listed.owners[job] = group
        assert listed[-1] is joined.entries[0] and listed.front == 300
        with pytest.raises(ca.OwnershipError, match=rf"tensor {i} is written by the pending op 'batch'"):
            ca.claim(_plan(domain, (1000 * i + 500, 1000 * i + 600, False, "x")))
        joined.release()
    ca.claim(gap := _plan(domain, (512, 1000, True, "gap")))  # between two holds: free
    gap.release()
    job.release(completed=True)
    assert listed == [] and listed.front == 0
