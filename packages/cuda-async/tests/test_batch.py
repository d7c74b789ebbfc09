"""`batch`: many ops as one job, enqueued without a host wait after each."""

from __future__ import annotations

import pytest
from cuda_core.testing import FakeDriver
from cuda_async_testkit import HostTensor, add, scale
from test_streams import kernel, kernels_by_stream

import cuda_async as ca


def test_ops_in_a_batch_run_at_once_and_hold_their_resources_until_the_end() -> None:
    z, x, y = HostTensor("tensor z", [0, 0]), HostTensor("tensor x", [1, 2]), HostTensor("tensor y", [3, 4])
    with ca.batch("loop") as active:
        for _ in range(3):
            add(z, z, y).sync()  # z written by one op is passed straight to the next
        assert z.data == [9, 12]  # host mode: each op ran when synced
        assert z.holders == [("launch of add", ca.Access.WRITE)]
        with pytest.raises(ca.OwnershipError, match="tensor z is written by the pending op 'launch of add'"):
            z.check_available(ca.Access.READ, by="to_numpy()")
        assert active.ops == 3
    assert not z.is_held and not x.is_held and not y.is_held


def test_await_and_schedule_inside_a_batch_return_completed_results() -> None:
    import asyncio

    z, x, y = HostTensor("tensor z", [0, 0]), HostTensor("tensor x", [1, 2]), HostTensor("tensor y", [3, 4])

    async def main() -> None:
        with ca.batch():
            await add(z, x, y)
            future = scale(z, 2.0).schedule()
            assert future.done()
        assert z.data == [8, 12]

    asyncio.run(main())


def test_another_job_cannot_touch_what_a_batch_holds() -> None:
    import threading

    z, x, y = HostTensor("tensor z", [0, 0]), HostTensor("tensor x", [1, 2]), HostTensor("tensor y", [3, 4])
    errors: list[BaseException] = []

    def other_thread() -> None:  # not in the batch: its op is a job of its own
        try:
            scale(z, 2.0).sync()
        except ca.OwnershipError as exc:
            errors.append(exc)

    with ca.batch("step"):
        add(z, x, y).sync()
        worker = threading.Thread(target=other_thread)
        worker.start()
        worker.join()
    assert len(errors) == 1 and "tensor z is written by the pending op 'launch of add'" in str(errors[0])
    scale(z, 2.0).sync()  # after the batch the tensors are free again
    assert z.data == [8, 12]


def test_an_error_inside_the_batch_releases_everything() -> None:
    z, x, y = HostTensor("tensor z", [0, 0]), HostTensor("tensor x", [1, 2]), HostTensor("tensor y", [3, 4])
    with pytest.raises(ZeroDivisionError):
        with ca.batch():
            add(z, x, y).sync()
            _ = 1 / 0
    assert not z.is_held
    scale(z, 2.0).sync()


def test_batches_do_not_nest_and_refuse_graph_captures() -> None:
    with ca.batch("outer"):
        with pytest.raises(ca.BatchError, match="batch 'inner': the batch 'outer' is already active"):
            with ca.batch("inner"):
                pass
        with pytest.raises(ca.GraphCaptureError, match="inside the batch 'outer'"):
            with ca.graph_scope("g"):
                pass
    with ca.graph_scope("g"):
        with pytest.raises(ca.GraphCaptureError, match="cannot start inside a CUDA graph capture"):
            with ca.batch("b"):
                pass


def test_a_device_batch_uses_one_stream_and_waits_once_at_the_end(fake_driver: FakeDriver) -> None:
    pool = ca.RoundRobin(4)
    x = ca.Resource("x")
    with ca.batch("loop", policy=pool):
        for index in range(5):
            kernel(fake_driver, f"k{index}", reads=[x], writes=[x]).sync()
        assert fake_driver.calls["cuStreamSynchronize"] == 0  # nothing waited for yet
        assert x.is_held
    streams = kernels_by_stream(fake_driver)
    assert len(set(streams.values())) == 1
    assert fake_driver.calls["cuEventRecord"] == 0 and fake_driver.calls["cuStreamWaitEvent"] == 0
    assert fake_driver.calls["cuStreamSynchronize"] == 1 and fake_driver.log[-1][0] == "synchronize"
    assert not x.is_held


def test_a_batch_that_does_not_wait_hands_its_job_to_a_future(fake_driver: FakeDriver) -> None:
    x = ca.Resource("x")
    fake_driver.hold_events = True
    with ca.batch("background", policy=ca.RoundRobin(2), wait=False) as active:
        kernel(fake_driver, "k", writes=[x]).sync()
    assert active.future is not None and x.is_held
    assert fake_driver.calls["cuStreamSynchronize"] == 0
    fake_driver.finish_events()
    active.future.result()
    assert not x.is_held


def test_ops_on_another_stream_inside_a_batch_wait_for_the_batch_s_writes(fake_driver: FakeDriver) -> None:
    pool = ca.RoundRobin(2)
    x = ca.Resource("x")
    with ca.batch("fork", policy=pool):
        kernel(fake_driver, "write x", writes=[x]).sync()
        ca.zip(kernel(fake_driver, "a", reads=[x]), kernel(fake_driver, "b", reads=[x])).sync()
    streams = kernels_by_stream(fake_driver)
    assert streams["a"] == streams["write x"] and streams["b"] != streams["write x"]
    # "b" runs on the other stream after waiting for the write
    assert ("wait", streams["b"], streams["write x"]) in fake_driver.log


def test_an_op_started_in_a_batch_after_it_ended_is_refused() -> None:
    z, x, y = HostTensor("tensor z", [0, 0]), HostTensor("tensor x", [1, 2]), HostTensor("tensor y", [3, 4])
    with ca.batch("short") as active:
        add(z, x, y).sync()
    with pytest.raises(ca.BatchError, match="started in the batch 'short' after the batch ended"):
        active.enqueue(add(z, x, y))
    assert not z.is_held


def test_sync_on_the_host_inside_a_device_batch_runs_on_the_host(fake_driver: FakeDriver) -> None:
    ran_on: list[object] = []
    op = ca.DeviceOp.from_fn(lambda stream: ran_on.append(stream), name="probe")
    with ca.batch("b", policy=ca.RoundRobin(2)):
        op.sync_on(None)
        op.sync()
    assert ran_on[0] is None and ran_on[1] is not None


def _layer_writing(fake_driver: FakeDriver, x: ca.Resource) -> ca.Batch:
    """A batch writing x on a two-stream pool, ended without waiting, its events held."""
    fake_driver.hold_events = True
    with ca.batch("layer 0", policy=ca.RoundRobin(2), wait=False) as first:
        kernel(fake_driver, "write x", writes=[x]).sync()
    return first


def _finish(fake_driver: FakeDriver, *batches: ca.Batch) -> None:
    """Completes the held events, then each batch's future."""
    fake_driver.finish_events()
    for done in batches:
        assert done.future is not None
        done.future.result()


def test_a_batch_after_another_uses_what_it_holds_on_its_stream_without_waiting(fake_driver: FakeDriver) -> None:
    x, y = ca.Resource("x"), ca.Resource("y")
    fake_driver.hold_events = True
    with ca.batch("layer 0", policy=ca.RoundRobin(2), wait=False) as first:
        kernel(fake_driver, "write x", writes=[x]).sync()
    with ca.batch("layer 1", wait=False, after=first) as second:
        kernel(fake_driver, "read x, write y", reads=[x], writes=[y]).sync()  # not refused: ordered by the stream
        kernel(fake_driver, "write x again", writes=[x]).sync()
    streams = kernels_by_stream(fake_driver)
    assert len(set(streams.values())) == 1 and fake_driver.calls["cuStreamWaitEvent"] == 0
    assert fake_driver.calls["cuStreamSynchronize"] == 0
    # The first batch's holds stay until its future completes; the host may not read x meanwhile.
    assert x.holders == [("write x", ca.Access.WRITE), ("write x again", ca.Access.WRITE)]
    with pytest.raises(ca.OwnershipError, match="x is written by the pending op"):
        x.check_available(ca.Access.READ, by="the host")
    fake_driver.finish_events()
    assert first.future is not None and second.future is not None
    first.future.result()
    assert y.is_held and x.is_held  # the second batch's own holds
    second.future.result()
    assert [x.is_held, y.is_held] == [False, False]


def test_a_fork_in_a_following_batch_waits_for_the_work_before(fake_driver: FakeDriver) -> None:
    """A zip's second branch runs on another stream, where the earlier batch's holds
    being no conflict would be a race: its stream waits for x's recorded write point on
    the batch stream (the ordering every reader on another stream gets)."""
    x, y, z = ca.Resource("x"), ca.Resource("y"), ca.Resource("z")
    first = _layer_writing(fake_driver, x)
    with ca.batch("layer 1", wait=False, after=first) as second:
        ca.zip(kernel(fake_driver, "write y", writes=[y]), kernel(fake_driver, "read x, write z", reads=[x],
                                                                 writes=[z])).sync()
    streams = kernels_by_stream(fake_driver)
    assert streams["read x, write z"] != streams["write x"]  # (the branch's own stream)
    waits = [(stream, detail) for call, stream, detail in fake_driver.log if call == "wait"]
    assert any(stream == streams["read x, write z"] for stream, _ in waits), fake_driver.log
    _finish(fake_driver, first, second)


def test_a_job_outside_the_following_batch_is_still_refused(fake_driver: FakeDriver) -> None:
    import threading

    x = ca.Resource("x")
    first = _layer_writing(fake_driver, x)
    errors: list[BaseException] = []

    def other_thread() -> None:  # not in the following batch: a job of its own
        try:
            kernel(fake_driver, "other", reads=[x]).sync()
        except ca.OwnershipError as exc:
            errors.append(exc)

    with ca.batch("layer 1", wait=False, after=first) as second:
        worker = threading.Thread(target=other_thread)
        worker.start()
        worker.join()
    assert len(errors) == 1 and "x is written by the pending op 'write x'" in str(errors[0])
    _finish(fake_driver, first, second)


def test_a_host_op_in_a_following_batch_may_not_touch_what_the_device_work_before_holds(fake_driver: FakeDriver) -> None:
    x = ca.Resource("x")
    fake_driver.hold_events = True
    with ca.batch("layer 0", policy=ca.RoundRobin(2), wait=False) as first:
        kernel(fake_driver, "write x", writes=[x]).sync()
    on_host = ca.DeviceOp.from_fn(lambda stream: None, reads=[x], name="host read")
    with pytest.raises(ca.OwnershipError, match="x is written by the pending op 'write x'"):
        with ca.batch("layer 1", after=first):
            on_host.sync_on(None)  # not ordered after the device's work by any stream
    fake_driver.finish_events()
    assert first.future is not None
    first.future.result()
    assert not x.is_held


def test_a_host_op_after_device_work_on_what_it_holds_waits_for_that_work(fake_driver: FakeDriver) -> None:
    """Holding a resource already (its own batch's device op, or a followed batch's)
    does not order a host op after the device work on it: the host waits for it first."""
    x = ca.Resource("x")
    seen: list[int] = []
    first = _layer_writing(fake_driver, x)
    with ca.batch("layer 1", wait=False, after=first) as second:
        kernel(fake_driver, "read x", reads=[x]).sync()  # (the job holds x now)
        on_host = ca.DeviceOp.from_fn(lambda stream: seen.append(fake_driver.calls["cuEventSynchronize"]),
                                      reads=[x], name="host read")
        on_host.sync_on(None)
    assert seen and seen[0] >= 1  # the write's event was waited for before the host read ran
    _finish(fake_driver, first, second)


def test_a_batch_after_another_on_the_host_runs_at_once() -> None:
    z, x, y = HostTensor("tensor z", [0, 0]), HostTensor("tensor x", [1, 2]), HostTensor("tensor y", [3, 4])
    with ca.batch("first", wait=False) as first:
        add(z, x, y).sync()
    with ca.batch("second", after=first):
        scale(z, 2.0).sync()  # reads and writes what the first holds (its work is done)
    assert z.data == [8, 12] and z.is_held  # the first batch's hold, until its future is observed
    assert first.future is not None
    first.future.result()
    assert not z.is_held


def test_after_takes_only_a_batch_that_ended_without_waiting() -> None:
    with ca.batch("waited") as waited:
        pass
    with pytest.raises(ca.BatchError, match="'after' must be a batch that ended with wait=False; 'waited' waited"):
        with ca.batch("next", after=waited):
            pass
    import threading

    errors: list[BaseException] = []

    def other_thread(open_batch: ca.Batch) -> None:
        try:
            with ca.batch("next", after=open_batch):
                pass
        except ca.BatchError as exc:
            errors.append(exc)

    with ca.batch("open", wait=False) as open_batch:
        worker = threading.Thread(target=other_thread, args=(open_batch,))
        worker.start()
        worker.join()
    assert len(errors) == 1 and "'open' is still open" in str(errors[0])
    with pytest.raises(ca.BatchError, match="give 'policy' or 'after', not both"):
        with ca.batch("next", policy=ca.SingleStream(), after=open_batch):
            pass
    with pytest.raises(TypeError, match="parameter 'after' takes a Batch, got str"):
        with ca.batch("next", after="open"):  # type: ignore[arg-type]
            pass
