"""The usual states of a loop of leaf ops, run without the general path's work: a
synchronous run whose memory is idle (`begin_idle_run` / `end_idle_run`), a leaf
repeated in one job on one stream (`Job.is_steady`: a batch's, `begin_batch_step`
/ `Batch.commit_step`, or a chain's). Each leaves the ledger and the streams'
bookkeeping as the general path (the job of `DeviceOp.sync`, `Job.acquire` and
`Job.record`) leaves them, and declines every other state, changing nothing."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from cuda_core.testing import FakeDriver
from test_streams import kernel

import cuda_async as ca
from cuda_async import _capture, _ledger, _streams


def _accesses(reads: tuple[ca.Resource, ...], writes: tuple[ca.Resource, ...]) -> ca.AccessSet:
    """An op's resources, each hold named for its resource (as cutile names a launch's by parameter)."""
    spans = tuple((r, *r.span, r in writes, f"op ({r.name})") for r in reads + writes)
    return ca.AccessSet(reads, writes, spans=spans)


def _claim_plan(accesses: ca.AccessSet) -> ca.ClaimPlan:
    """What a pending op over ``accesses`` claims, named as its running holds are."""
    return ca.ClaimPlan((domain, start, end, writes, label or "op", f"op: {r.name}", r.name)
                        for r, domain, start, end, writes, label in accesses.spans)


def _state(resources: list[ca.Resource], stream: Any) -> list[Any]:
    """The ledger's holds on ``resources`` and their access points (epochs relative to the stream's)."""
    now = _streams.current_epoch(stream) if stream is not None else 0
    out: list[Any] = []
    for r in resources:
        last = r._last_write
        domain, start, end = r.span
        holds = [h for h in _ledger.holds.get(domain, ()) if h[0] < end and start < h[1]]
        out.append((sorted((h[4].name if h[4] is not None else "(pending)", h[2], h[3]) for h in holds),
                    None if last is None else (last[0] is stream, now - last[1], last[2].name),
                    sorted((s is stream, now - e, job.name) for s, (e, job) in r._reads.items())))
    return out


def _leaf(fake: FakeDriver, accesses: ca.AccessSet, claim: ca.ClaimPlan | None, seen: list[Any],
          fail: bool = False) -> ca.FnOp[str]:
    """A leaf over ``accesses`` that enqueues a kernel (noting the holds on its memory
    as it does); its claim, if any, is handed to its job when it starts."""
    taken = [claim]

    def enqueue(stream: Any) -> str:
        seen.append(_state([r for r, _ in accesses.accesses], stream))
        if fail:
            raise RuntimeError("enqueue failed")
        fake.enqueue("kernel", stream.handle, "k")
        return "k"

    def hand_over() -> ca.ClaimPlan | None:
        given, taken[0] = taken[0], None
        return given

    return ca.FnOp.from_accesses(enqueue, accesses, name="op", claim_from=hand_over)


def test_an_idle_synchronous_run_leaves_what_a_job_leaves(fake_driver: FakeDriver) -> None:
    outcomes = []
    stream = ca.SingleStream()
    for idle_path in (False, True):
        x, z = ca.Resource("x"), ca.Resource("z")
        accesses = _accesses((x,), (z,))
        claim = _claim_plan(accesses)
        run = claim.owned_by(ca.Job("op"))
        seen: list[Any] = []
        with ca.using_policy(stream):
            epoch = _streams.current_epoch(stream.stream)
            for _ in range(3):
                ca.claim(claim)
                if idle_path:
                    started = ca.begin_idle_run(accesses, claim, run)
                    assert started is stream.stream
                    _leaf(fake_driver, accesses, None, seen).fn(started)
                    started.synchronize()
                    ca.end_idle_run(run, started, ran=True)
                else:
                    _leaf(fake_driver, accesses, claim, seen).sync()
        outcomes.append((seen, _state([x, z], stream.stream), _streams.current_epoch(stream.stream) - epoch))
    assert outcomes[0] == outcomes[1]
    seen, after, advanced = outcomes[1]
    # While it ran, the memory was held by running holds named as the claim named them.
    assert seen[0][1][0] == [("op", True, "op (z)")] and seen[0][0][0] == [("op", False, "op (x)")]
    assert after == [([], None, []), ([], None, [])] and advanced == 3  # idle again, three ops later


def test_an_idle_run_declines_busy_memory_a_batch_a_capture_and_the_host(fake_driver: FakeDriver) -> None:
    class Counting(ca.SingleStream):
        asked = 0

        def next_stream(self) -> Any:
            Counting.asked += 1
            return super().next_stream()

    x, z = ca.Resource("x"), ca.Resource("z")
    accesses = _accesses((x,), (z,))
    claim = _claim_plan(accesses)
    run = claim.owned_by(ca.Job("op"))
    ca.claim(claim)

    def declines(policy: ca.SchedulingPolicy) -> None:
        before = _state([x, z], None)
        with ca.using_policy(policy):
            assert ca.begin_idle_run(accesses, claim, run) is None
        assert _state([x, z], None) == before  # nothing changed: the claim is still pending
        assert ("(pending)", True, "op (z)") in before[1][0]

    fake_driver.hold_events = True
    busy = kernel(fake_driver, "reader", reads=[x]).schedule(ca.SingleStream())  # a running hold on x
    counting = Counting()
    declines(counting)
    assert Counting.asked == 0  # not asked before the memory was known idle (it may count turns)
    fake_driver.finish_events()
    busy.result()
    with ca.batch(policy=ca.SingleStream()):
        declines(ca.SingleStream())
    _capture._active.append(object())  # type: ignore[arg-type]  # a capture on some thread or task
    try:
        declines(ca.SingleStream())
    finally:
        _capture._active.pop()
    declines(ca.HostPolicy())  # host mode: the job's path
    other = ca.SingleStream()
    y = ca.Resource("y")
    _streams.state(other.stream).interest = {y: 2}  # another op's point, not yet marked by an event
    declines(other)
    _streams.state(other.stream).interest = {}
    with ca.using_policy(other):
        assert ca.begin_idle_run(accesses, claim, run) is other.stream
    ca.end_idle_run(run, other.stream, ran=False)
    assert _state([x, z], None) == [([], None, []), ([], None, [])]


def _general_path(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every leaf takes the general path (before_enqueue, acquire, record)."""
    monkeypatch.setattr(ca.Job, "is_steady", lambda self, access_set, stream, state: False)


@pytest.mark.parametrize("shape", ["batch", "chain", "batch step"])
def test_a_repeated_leaf_records_what_the_general_path_records(
        fake_driver: FakeDriver, monkeypatch: pytest.MonkeyPatch, shape: str) -> None:
    outcomes = []
    for general in (True, False):
        with monkeypatch.context() as patch:
            if general:
                _general_path(patch)
            x, z = ca.Resource("x"), ca.Resource("z")
            accesses = _accesses((x,), (z,))
            seen: list[Any] = []

            def made() -> ca.FnOp[str]:
                claim = _claim_plan(accesses)
                ca.claim(claim)
                return _leaf(fake_driver, accesses, claim, seen)

            with ca.batch(policy=ca.SingleStream()) as active:
                if shape == "chain":
                    op: ca.DeviceOp[Any] = made()
                    for _ in range(4):
                        op = op.then(lambda _: made())
                    op.sync()
                else:
                    made().sync()  # the first takes the batch's holds
                    for _ in range(4):
                        if shape == "batch step" and not general:
                            claim = _claim_plan(accesses)
                            ca.claim(claim)
                            step = ca.begin_batch_step(accesses, claim)
                            assert step is active
                            _leaf(fake_driver, accesses, None, seen).fn(step.stream)
                            step.commit_step(accesses)
                        else:
                            made().sync()
                outcomes.append((seen, _state([x, z], active.stream), active.ops, list(active.run.points.values())))
            assert _state([x, z], active.stream) == [([], None, []), ([], None, [])]
    assert outcomes[0] == outcomes[1]
    assert outcomes[1][1][1][0] == [("batch", True, "op (z)")]  # the claims were given back: the job's hold remains


def test_a_steady_leaf_that_fails_gives_its_claim_back(fake_driver: FakeDriver) -> None:
    x, z = ca.Resource("x"), ca.Resource("z")
    accesses = _accesses((x,), (z,))
    seen: list[Any] = []
    with ca.batch(policy=ca.SingleStream()) as active:
        _leaf(fake_driver, accesses, None, seen).sync()
        before = _state([x, z], active.stream)
        claim = _claim_plan(accesses)
        ca.claim(claim)
        stream = active.stream
        assert stream is not None and active.run.job.is_steady(accesses, stream, _streams.state(stream))
        with pytest.raises(RuntimeError, match="enqueue failed"):
            _leaf(fake_driver, accesses, claim, seen, fail=True).sync()
        assert _state([x, z], active.stream) == before  # no pending hold left, nothing recorded


def test_is_steady_declines_every_other_state(fake_driver: FakeDriver) -> None:
    x, z, w = ca.Resource("x"), ca.Resource("z"), ca.Resource("w")
    accesses = _accesses((x,), (z,))
    seen: list[Any] = []
    pool = ca.RoundRobin(2)
    first, second = pool.streams
    with ca.batch(policy=ca.SingleStream(first)) as active:
        job = active.run.job
        steady: Callable[..., bool] = lambda a, s=first: job.is_steady(a, s, _streams.state(s))  # noqa: E731
        assert not steady(accesses)  # the job holds nothing yet
        _leaf(fake_driver, accesses, None, seen).sync()
        assert steady(accesses)
        assert not steady(accesses, second)  # a stream the job has not used
        assert not steady(_accesses((x,), (z, w)))  # w is not held
        assert not steady(_accesses((), (x,)))  # x is held for reading only
        kernel(fake_driver, "other", writes=[w]).sync()  # the stream's unmarked point is another op's
        assert not steady(accesses)
        _leaf(fake_driver, accesses, None, seen).sync()
        assert steady(accesses)
        kernel(fake_driver, "read z elsewhere", reads=[z]).sync_on(second)  # z read on another stream
        assert not steady(accesses)
        _leaf(fake_driver, accesses, None, seen).sync()  # the general path: it waits for that read
        assert steady(accesses)
        dropped = _claim_plan(_accesses((), (ca.Resource("v"),)))
        dropped.claim()
        dropped.drop()  # a claim the garbage collector gave back, not yet drained
        assert not steady(accesses)
        _leaf(fake_driver, accesses, None, seen).sync()
        assert not _ledger.dropped and steady(accesses)
