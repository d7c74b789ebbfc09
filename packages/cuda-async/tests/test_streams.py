"""Stream assignment and event dependencies, checked against a fake driver (no GPU).

Fake kernels log ``("kernel", stream, name)``; the fake driver logs event
records, waits (with the stream the awaited event was recorded on) and
synchronizations, so each test reads the exact order of stream operations.
"""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import cuda_core
import gc
import time

import pytest
from cuda_core.testing import FakeDriver
from cuda_async_testkit import while_ticking

import cuda_async as ca


def kernel(fake: FakeDriver, name: str, reads: list[ca.Resource] = (), writes: list[ca.Resource] = ()) -> ca.FnOp[str]:  # type: ignore[assignment]
    def enqueue(stream: cuda_core.Stream | None) -> str:
        assert stream is not None
        fake.enqueue("kernel", stream.handle, name)
        return name

    return ca.DeviceOp.from_fn(enqueue, reads=reads, writes=writes, name=name)


def kernels_by_stream(fake: FakeDriver) -> dict[str, int]:
    return {detail: stream for call, stream, detail in fake.log if call == "kernel"}


def test_a_chain_stays_on_one_stream_with_no_event(fake_driver: FakeDriver) -> None:
    pool = ca.RoundRobin(4)
    x = ca.Resource("x")
    op = kernel(fake_driver, "a", writes=[x]).then(kernel(fake_driver, "b", reads=[x], writes=[x]))
    op.then(kernel(fake_driver, "c", reads=[x], writes=[x])).sync(pool)
    streams = kernels_by_stream(fake_driver)
    assert len(set(streams.values())) == 1
    assert fake_driver.calls["cuEventRecord"] == 0 and fake_driver.calls["cuStreamWaitEvent"] == 0
    assert fake_driver.log[-1] == ("synchronize", streams["a"], None)


def test_an_event_marks_a_point_another_stream_may_need_before_later_work(fake_driver: FakeDriver) -> None:
    pool = ca.RoundRobin(2)
    a, b = pool.streams
    x, y = ca.Resource("x"), ca.Resource("y")
    fake_driver.hold_events = True
    first = kernel(fake_driver, "write x", writes=[x]).then(kernel(fake_driver, "unrelated", writes=[y]))
    future = first.schedule(ca.SingleStream(a))
    del future  # holds back, work pending
    kernel(fake_driver, "read x", reads=[x]).schedule(ca.SingleStream(b)).result()
    (waited,) = fake_driver.waited_events
    position = fake_driver.log.index(("record", int(a), waited))
    # the waited event was recorded between "write x" and "unrelated": the reader
    # waits for the writer only, not for the later unrelated work
    assert fake_driver.log.index(("kernel", int(a), "write x")) < position
    assert position < fake_driver.log.index(("kernel", int(a), "unrelated"))


def test_round_robin_spreads_independent_ops(fake_driver: FakeDriver) -> None:
    pool = ca.RoundRobin(4)
    assert len(pool.streams) == 4 and len({int(s) for s in pool.streams}) == 4
    for i in range(8):
        kernel(fake_driver, f"k{i}", writes=[ca.Resource(f"r{i % 3}")]).sync(pool)
    streams = kernels_by_stream(fake_driver)
    assert [streams[f"k{i}"] for i in range(8)] == [int(s) for s in pool.streams] * 2
    # each job completed before the next: no dependency, not even an event recorded
    assert fake_driver.calls["cuStreamWaitEvent"] == 0 and fake_driver.calls["cuEventRecord"] == 0


def test_zip_forks_onto_other_streams_and_joins_with_events(fake_driver: FakeDriver) -> None:
    pool = ca.RoundRobin(3)
    x, a, b = ca.Resource("x"), ca.Resource("a"), ca.Resource("b")
    producer = kernel(fake_driver, "produce", writes=[x])
    op = producer.then(
        ca.zip(kernel(fake_driver, "left", reads=[x], writes=[a]), kernel(fake_driver, "right", reads=[x], writes=[b]))
    ).then(kernel(fake_driver, "combine", reads=[a, b]))
    op.sync(pool)
    streams = kernels_by_stream(fake_driver)
    main, other = streams["produce"], streams["right"]
    assert streams["left"] == main and other != main and streams["combine"] == main
    log = [(call, stream, detail) for call, stream, detail in fake_driver.log if call != "record"]
    # right waits for produce (fork), combine waits for right (join)
    assert log.index(("wait", other, main)) < log.index(("kernel", other, "right"))
    assert log.index(("kernel", other, "right")) < log.index(("wait", main, other)) < log.index(("kernel", main, "combine"))
    # sync waits for both streams the job used
    assert {(c, s) for c, s, _ in fake_driver.log if c == "synchronize"} == {("synchronize", main), ("synchronize", other)}


def test_no_wait_is_enqueued_for_a_writer_known_complete(fake_driver: FakeDriver) -> None:
    pool = ca.RoundRobin(2)
    x, y = ca.Resource("x"), ca.Resource("y")
    writer = kernel(fake_driver, "write x", writes=[x])
    future = writer.schedule(pool)
    assert future.done()  # the fake's events complete when recorded; x handed back
    # the writer was observed complete, so its access point is forgotten:
    kernel(fake_driver, "read x", reads=[x], writes=[y]).sync(pool)
    assert fake_driver.calls["cuStreamWaitEvent"] == 0  # the writer is known complete: no wait


def test_zip_branches_do_not_wait_for_each_other(fake_driver: FakeDriver) -> None:
    pool = ca.RoundRobin(3)
    ca.zip(kernel(fake_driver, "a"), kernel(fake_driver, "b"), kernel(fake_driver, "c")).sync(pool)
    streams = kernels_by_stream(fake_driver)
    assert len(set(streams.values())) == 3
    log = [(c, s, d) for c, s, d in fake_driver.log if c in ("kernel", "wait")]
    waits = [(s, d) for c, s, d in log if c == "wait"]
    # no fork wait (nothing before the zip); the parent joins both branches after them
    assert waits == [(streams["a"], streams["b"]), (streams["a"], streams["c"])]
    assert log.index(("kernel", streams["c"], "c")) < log.index(("wait", streams["a"], streams["b"]))


def test_zip_branches_after_shared_input_wait_only_for_the_writer(fake_driver: FakeDriver) -> None:
    pool = ca.RoundRobin(2)
    x = ca.Resource("x")
    op = kernel(fake_driver, "w", writes=[x]).then(
        ca.zip(kernel(fake_driver, "r1", reads=[x]), kernel(fake_driver, "r2", reads=[x]))
    )
    op.sync(pool)
    streams = kernels_by_stream(fake_driver)
    log = [(c, s, d) for c, s, d in fake_driver.log if c in ("kernel", "wait")]
    # r2 waits once for the producer (fork point), before r2, and not for r1
    assert log.index(("wait", streams["r2"], streams["w"])) < log.index(("kernel", streams["r2"], "r2"))
    assert [e for e in log if e[0] == "wait"].count(("wait", streams["r2"], streams["w"])) == 1


def test_a_dropped_future_still_orders_later_ops(fake_driver: FakeDriver) -> None:
    pool = ca.RoundRobin(2)
    fake_driver.hold_events = True
    x = ca.Resource("x")
    future = kernel(fake_driver, "write x", writes=[x]).schedule(pool)
    writer_stream = kernels_by_stream(fake_driver)["write x"]
    del future  # holds given back, the work is still pending
    kernel(fake_driver, "read x", reads=[x]).schedule(pool).result()
    streams = kernels_by_stream(fake_driver)
    assert streams["read x"] != writer_stream
    waits = [(s, d) for c, s, d in fake_driver.log if c == "wait"]
    assert waits == [(streams["read x"], writer_stream)]
    # a write after pending reads on other streams waits for the readers (write-after-read)
    kernel(fake_driver, "write x again", writes=[x]).sync(pool)
    assert fake_driver.calls["cuStreamWaitEvent"] == 1  # the read was observed complete: nothing to wait for


def test_a_dropped_future_keeps_its_resources_alive_until_the_work_completes(fake_driver: FakeDriver) -> None:
    import weakref

    pool = ca.RoundRobin(2)
    fake_driver.hold_events = True
    x = ca.Resource("x")
    alive = weakref.ref(x)
    future = kernel(fake_driver, "write x", writes=[x]).schedule(pool)
    del future, x  # dropped while the device still works
    for index in range(4):  # later work on every stream of the pool forgets x's access points
        kernel(fake_driver, f"other {index}", writes=[ca.Resource(f"y{index}")]).schedule(pool)
    gc.collect()
    assert alive() is not None  # its memory must not be freed under the running kernel
    fake_driver.finish_events()
    deadline = time.monotonic() + 5
    while alive() is not None and time.monotonic() < deadline:
        gc.collect()
        time.sleep(0.01)
    assert alive() is None  # released once the poller saw the work complete


def test_a_writer_waits_for_pending_readers_on_other_streams(fake_driver: FakeDriver) -> None:
    pool = ca.RoundRobin(3)
    a, b, c = pool.streams
    x = ca.Resource("x")
    fake_driver.hold_events = True
    readers = [kernel(fake_driver, f"read {i}", reads=[x]).schedule(ca.SingleStream(s)) for i, s in enumerate((a, b))]
    with pytest.raises(ca.OwnershipError, match="x is read by the pending op 'read 0'.*may not write"):
        kernel(fake_driver, "write", writes=[x]).schedule(ca.SingleStream(c))
    del readers  # dropped: holds back, work still pending
    kernel(fake_driver, "write", writes=[x]).schedule(ca.SingleStream(c)).result()
    waits = {(s, d) for call, s, d in fake_driver.log if call == "wait"}
    assert waits == {(int(c), int(a)), (int(c), int(b))}  # write-after-read on both streams


def test_shared_op_consumers_on_other_streams_wait_for_it(fake_driver: FakeDriver) -> None:
    pool = ca.RoundRobin(2)
    w = ca.Resource("w")
    weights = kernel(fake_driver, "init w", writes=[w]).shared()
    fake_driver.hold_events = True
    first = weights.then(kernel(fake_driver, "use 1", reads=[w])).schedule(pool)
    second = weights.then(kernel(fake_driver, "use 2", reads=[w])).schedule(pool)
    streams = kernels_by_stream(fake_driver)
    assert [k for c, _, k in fake_driver.log if c == "kernel"].count("init w") == 1
    assert streams["use 2"] != streams["init w"]
    assert ("wait", streams["use 2"], streams["init w"]) in fake_driver.log
    fake_driver.finish_events()
    first.result(), second.result()


def test_a_driver_error_while_polling_reaches_result_and_await(fake_driver: FakeDriver) -> None:
    from cuda_core.testing import R

    fake_driver.hold_events = True
    for take in ("result", "await"):
        x = ca.Resource("x")
        future = kernel(fake_driver, "failing", writes=[x]).schedule(ca.SingleStream())
        fake_driver.fail_next["cuEventQuery"] = R.CUDA_ERROR_LAUNCH_FAILED
        fake_driver.fail_next["cuEventSynchronize"] = R.CUDA_ERROR_LAUNCH_FAILED
        with pytest.raises(cuda_core.CudaError, match="CUDA_ERROR_LAUNCH_FAILED"):
            if take == "result":
                assert future.done()  # the work is over...
                assert x.is_held  # ...but nobody has seen how it ended yet
                future.result()
            else:
                asyncio.run(_awaited(future))
        assert x.holders == []  # observed: the holds are given back


async def _awaited(future: ca.DeviceFuture[object]) -> object:
    return await future


def test_schedule_records_completion_events_and_done_polls_them(fake_driver: FakeDriver) -> None:
    fake_driver.hold_events = True
    x = ca.Resource("x")
    future = kernel(fake_driver, "slow", writes=[x]).schedule(ca.SingleStream())
    assert not future.done() and x.is_held
    with pytest.raises(ca.OwnershipError, match="pending op 'slow'"):
        kernel(fake_driver, "other", reads=[x]).schedule(ca.SingleStream())
    fake_driver.finish_events()
    assert future.done() and x.holders == []
    events_before = fake_driver.calls["cuEventCreate"]
    kernel(fake_driver, "again", writes=[x]).schedule(ca.SingleStream()).result()
    assert fake_driver.calls["cuEventCreate"] == events_before  # completion events are pooled


def test_await_completes_through_the_poller_without_blocking_the_loop(fake_driver: FakeDriver) -> None:
    fake_driver.hold_events = True
    x = ca.Resource("x")

    async def main() -> tuple[str, int]:
        threading.Timer(0.05, fake_driver.finish_events).start()
        return await while_ticking(kernel(fake_driver, "slow", writes=[x]).schedule(ca.SingleStream()))

    result, ticks = asyncio.run(main())
    assert result == "slow"
    assert ticks >= 10  # the loop kept running while the op was pending
    assert x.holders == []


def test_many_awaits_none_lost(fake_driver: FakeDriver) -> None:
    fake_driver.hold_events = True
    pool = ca.RoundRobin(4)

    async def one(i: int) -> str:
        return await kernel(fake_driver, f"k{i}", writes=[ca.Resource(f"r{i}")]).schedule(pool)

    stop = threading.Event()

    def device() -> None:  # work completes a little after it is enqueued, until stopped
        while not stop.wait(0.005):
            fake_driver.finish_events()

    async def main() -> list[str]:
        thread = threading.Thread(target=device)
        thread.start()
        try:
            return await asyncio.wait_for(asyncio.gather(*(one(i) for i in range(300))), timeout=10)
        finally:
            stop.set()
            thread.join()

    assert asyncio.run(main()) == [f"k{i}" for i in range(300)]


def test_a_cancelled_await_keeps_holds_until_the_work_completes(fake_driver: FakeDriver) -> None:
    fake_driver.hold_events = True
    x = ca.Resource("x")

    async def cancelled() -> None:
        future = kernel(fake_driver, "slow", writes=[x]).schedule(ca.SingleStream())

        async def waiter() -> Any:
            return await future

        task = asyncio.create_task(waiter())
        await asyncio.sleep(0.01)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert x.is_held  # the device work cannot be recalled
        fake_driver.finish_events()
        for _ in range(1000):
            if x.holders == []:
                break
            await asyncio.sleep(0.001)
        assert x.holders == []  # handed back by the poller once the work completed

    asyncio.run(cancelled())


def test_graph_capture_records_on_a_capture_stream_and_replays(fake_driver: FakeDriver) -> None:
    pool = ca.RoundRobin(2)
    x, y = ca.Resource("x"), ca.Resource("y")
    op = kernel(fake_driver, "k1", writes=[x]).then(
        ca.zip(kernel(fake_driver, "k2", reads=[x], writes=[y]), kernel(fake_driver, "k3", reads=[x]))
    )
    graph = op.graph(name="g", policy=pool)
    assert not graph.is_host and graph.node_count == 3
    assert [k for c, _, k in fake_driver.log if c == "kernel"] == []  # recorded, not run
    assert graph.result == ("k2", "k3")
    assert fake_driver.calls["cuStreamWaitEvent"] == 0  # everything on the capture stream
    graph.launch().sync(pool)
    replay = [(c, d) for c, _, d in fake_driver.log if c == "graph"]
    assert replay == [("graph", [("kernel", "k1"), ("kernel", "k2"), ("kernel", "k3")])]
    assert fake_driver.calls["cuGraphLaunch"] == 1


def test_graph_launch_waits_for_a_pending_writer_on_another_stream(fake_driver: FakeDriver) -> None:
    pool = ca.RoundRobin(2)
    x, y = ca.Resource("x"), ca.Resource("y")
    graph = kernel(fake_driver, "use x", reads=[x], writes=[y]).graph(policy=pool)
    fake_driver.hold_events = True
    future = kernel(fake_driver, "fill x", writes=[x]).schedule(pool)
    with pytest.raises(ca.OwnershipError, match="'fill x'"):
        graph.launch().schedule(pool)
    writer_stream = kernels_by_stream(fake_driver)["fill x"]
    del future
    other = next(s for s in pool.streams if int(s) != writer_stream)
    graph.launch().schedule(ca.SingleStream(other)).result()
    launch_stream = next(s for c, s, _ in fake_driver.log if c == "graph")
    assert launch_stream == int(other)
    assert ("wait", launch_stream, writer_stream) in fake_driver.log


def test_update_copies_device_memory_into_the_captured_input(fake_driver: FakeDriver) -> None:
    class Buffer(ca.Resource):
        def copy_from(self, source: ca.Resource, stream: cuda_core.Stream | None) -> None:
            assert stream is not None
            fake_driver.enqueue("copy", stream.handle, (source.name, self.name))

    x, y, x2 = Buffer("x", layout=(4, "f32")), Buffer("y", layout=(4, "f32")), Buffer("x2", layout=(4, "f32"))
    graph = kernel(fake_driver, "k", reads=[x], writes=[y]).graph(policy=ca.SingleStream())
    graph.update(x2)
    graph.launch().sync_on(graph.stream)
    calls = [(c, d) for c, _, d in fake_driver.log if c in ("copy", "graph")]
    assert calls == [("copy", ("x2", "x")), ("graph", [("kernel", "k")])]


def test_sync_inside_a_scope_records_and_never_synchronizes(fake_driver: FakeDriver) -> None:
    pool = ca.RoundRobin(2)
    with ca.graph_scope("scope", policy=pool) as scope:
        kernel(fake_driver, "a").sync(pool)
        kernel(fake_driver, "b").sync_on(pool.streams[1])
        with pytest.raises(ca.GraphCaptureError, match="allocates"):
            ca.DeviceOp.from_fn(lambda s: None, allocates=True, name="alloc").sync()
    assert fake_driver.calls["cuStreamSynchronize"] == 0
    assert scope.graph.node_count == 2 and scope.graph.result == ["a", "b"]


def test_a_failed_capture_is_ended_and_reported(fake_driver: FakeDriver) -> None:
    def bad(stream: cuda_core.Stream | None) -> None:
        raise cuda_core.CudaError(900, "CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED", "operation not permitted when stream is capturing", "cuMemAlloc")

    with pytest.raises(ca.GraphCaptureError, match="no synchronous allocation"):
        ca.DeviceOp.from_fn(bad, name="bad").graph(policy=ca.SingleStream())
    assert fake_driver.capturing == {} and not ca.is_capturing()


def test_pooled_events_never_cross_to_another_drivers_device() -> None:
    # A scheduled op's completion events go back to a pool when it completes; a device of
    # another driver (a later test's fake, or the real one after a fake) is another
    # Device object and gets events of its own driver only.
    from cuda_async import _future
    from cuda_core.testing import use_fake_driver

    pooled: list[cuda_core.Event] = []
    for _ in range(2):
        with use_fake_driver() as fake, ca.using_policy(ca.SingleStream()):
            device = cuda_core.Device(0)
            taken = _future._take_event(device)  # from the pool, or made: this driver's either way
            assert taken.device is device
            _future._give_events([taken])
            future = kernel(fake, "k", writes=[ca.Resource("z")]).schedule()
            fake.finish_events()
            future.result()
            pooled.extend(_future._event_pool.get(device, []))
            assert pooled
    assert len({event.device for event in pooled}) == 2  # each driver's device kept its own events
