"""cuda_async on a real GPU (marked ``gpu``; run on the H200).

Kernels are PTX written here and JIT-compiled by the driver: ``sleep_then_store``
spins for a given time on the device (so overlap and ordering are measurable),
``axpy`` is real arithmetic for graph replay, ``inc`` adds one to a counter.
"""

from __future__ import annotations

import asyncio
import struct
import time
from typing import Any

import pytest

import cuda_core as cc

import cuda_async as ca

pytestmark = pytest.mark.gpu

from cuda_core.testing import PTX  # noqa: E402  (the shared sample kernels)
from cuda_async_testkit import while_ticking  # noqa: E402

MS = 1_000_000  # nanoseconds


@pytest.fixture(scope="module")
def module() -> cc.Module:
    return cc.Module.load(PTX.encode())


class Buffer(ca.Resource):
    """Device memory as a resource (what cutile's tensors will wrap)."""

    def __init__(self, name: str, nbytes: int, fill: bytes | None = None) -> None:
        memory = cc.DeviceBuffer.allocate(nbytes)
        if fill is None:
            memory.memset(0)
        else:
            memory.copy_from_host(fill)
        cc.Device(0).synchronize()  # test setup: the legacy-stream memset is done before our streams run
        super().__init__(name, memory=memory, layout=("bytes", nbytes))

    @property
    def buffer(self) -> cc.DeviceBuffer:
        assert isinstance(self.memory, cc.DeviceBuffer)
        return self.memory

    def u32(self) -> int:
        cc.Device(0).synchronize()  # test readback only
        return int(struct.unpack("<I", self.buffer.to_bytes()[:4])[0])

    def floats(self) -> tuple[float, ...]:
        cc.Device(0).synchronize()
        data = self.buffer.to_bytes()
        return struct.unpack(f"<{len(data) // 4}f", data)


def floats(values: list[float]) -> bytes:
    return struct.pack(f"<{len(values)}f", *values)


def sleep_op(
    module: cc.Module, out: Buffer, value: int, ns: int, marks: dict[str, tuple[cc.Event, cc.Event]] | None = None,
    name: str = "sleep",
) -> ca.FnOp[int]:
    function = module.get_function("sleep_then_store")

    def enqueue(stream: cc.Stream | None) -> int:
        assert stream is not None
        start = end = None
        if marks is not None:
            start, end = cc.Event.create(), cc.Event.create()
            start.record(stream)
        cc.launch(function, cc.LaunchConfig(1, 1), out.buffer, cc.KernelArg("u32", value), cc.KernelArg("u64", ns), stream=stream)
        if marks is not None:
            assert start is not None and end is not None
            end.record(stream)
            marks[name] = (start, end)
        return value

    return ca.DeviceOp.from_fn(enqueue, writes=[out], name=name)


def copy_op(dst: Buffer, src: Buffer, name: str = "copy") -> ca.FnOp[Buffer]:
    def enqueue(stream: cc.Stream | None) -> Buffer:
        dst.buffer.copy_from(src.buffer, stream=stream)
        return dst

    return ca.DeviceOp.from_fn(enqueue, reads=[src], writes=[dst], name=name)


def axpy_op(module: cc.Module, y: Buffer, x: Buffer, a: float, n: int) -> ca.FnOp[Buffer]:
    prepared = cc.PreparedLaunch(module.get_function("axpy"), cc.LaunchConfig((n + 255) // 256, 256), ["ptr", "ptr", "f32", "u32"])

    def enqueue(stream: cc.Stream | None) -> Buffer:
        prepared.launch(stream, y.buffer, x.buffer, a, n)
        return y

    return ca.DeviceOp.from_fn(enqueue, reads=[x], writes=[y], name="axpy")


def interval(base: cc.Event, marks: tuple[cc.Event, cc.Event]) -> tuple[float, float]:
    return base.elapsed_ms(marks[0]), base.elapsed_ms(marks[1])


def test_ops_on_different_streams_overlap_and_on_one_stream_do_not(module: cc.Module) -> None:
    a, b = Buffer("a", 4), Buffer("b", 4)
    marks: dict[str, tuple[cc.Event, cc.Event]] = {}
    both = ca.zip(sleep_op(module, a, 1, 50 * MS, marks, "A"), sleep_op(module, b, 2, 50 * MS, marks, "B"))
    assert both.sync(ca.RoundRobin(2)) == (1, 2)
    base = marks["A"][0]
    (a0, a1), (b0, b1) = interval(base, marks["A"]), interval(base, marks["B"])
    assert a1 - a0 >= 45 and b1 - b0 >= 45
    assert b0 < a1 - 20 and a0 < b1 - 20, f"no overlap: A {a0:.1f}-{a1:.1f} ms, B {b0:.1f}-{b1:.1f} ms"
    assert (a.u32(), b.u32()) == (1, 2)
    # the same zip on one stream runs one after the other
    marks.clear()
    ca.zip(sleep_op(module, a, 3, 20 * MS, marks, "A"), sleep_op(module, b, 4, 20 * MS, marks, "B")).sync_on(cc.Stream.create())
    base = marks["A"][0]
    (a0, a1), (b0, b1) = interval(base, marks["A"]), interval(base, marks["B"])
    assert b0 >= a1 - 0.01


def test_independent_awaited_ops_overlap_on_the_default_pool(module: cc.Module) -> None:
    buffers = [Buffer(f"b{i}", 4) for i in range(4)]
    marks: dict[str, tuple[cc.Event, cc.Event]] = {}

    async def main() -> list[int]:
        ops = [sleep_op(module, buffers[i], i + 10, 40 * MS, marks, f"op{i}") for i in range(4)]
        return list(await asyncio.gather(*(asyncio.ensure_future(_await(op)) for op in ops)))

    with ca.using_policy(ca.RoundRobin(4)):
        start = time.perf_counter()
        assert asyncio.run(main()) == [10, 11, 12, 13]
        wall = time.perf_counter() - start
    base = marks["op0"][0]
    spans = [interval(base, marks[f"op{i}"]) for i in range(4)]
    assert max(s for s, _ in spans) < min(e for _, e in spans), f"not all four overlapped: {spans}"
    assert wall < 0.150, f"4 x 40 ms on 4 streams took {wall * 1e3:.0f} ms"


async def _await(op: ca.DeviceOp[Any]) -> Any:
    return await op


def test_cross_stream_dependency_comes_from_the_resources(module: cc.Module) -> None:
    x, y = Buffer("x", 4), Buffer("y", 4)
    pool = ca.RoundRobin(2)
    # In one job: the copy runs on the other stream and must wait for the writer (30 ms).
    ca.zip(sleep_op(module, x, 42, 30 * MS), copy_op(y, x)).sync(pool)
    assert y.u32() == 42
    # Across jobs: the writer's future is dropped (holds given back, work pending);
    # the reader on another stream still waits for it through an event.
    x2, y2 = Buffer("x2", 4), Buffer("y2", 4)
    streams = pool.streams
    future = sleep_op(module, x2, 7, 30 * MS).schedule(ca.SingleStream(streams[0]))
    del future
    copy_op(y2, x2).sync_on(streams[1])
    assert y2.u32() == 7


def test_ownership_while_the_device_works(module: cc.Module) -> None:
    x, y = Buffer("tensor x", 4), Buffer("tensor y", 4)
    future = sleep_op(module, x, 5, 100 * MS, name="launch of slow").schedule()
    with pytest.raises(ca.OwnershipError, match="tensor x is written by the pending op 'launch of slow'"):
        copy_op(y, x).sync()
    assert not future.done()
    assert future.result() == 5 and x.holders == []
    copy_op(y, x).sync()
    assert y.u32() == 5


def test_graph_replay_equals_eager_results_and_update_takes_new_inputs(module: cc.Module) -> None:
    n = 1000
    xs = [float(i % 17) for i in range(n)]
    x, y = Buffer("x", 4 * n, floats(xs)), Buffer("y", 4 * n, floats([1.0] * n))
    eager_y = Buffer("eager y", 4 * n, floats([1.0] * n))

    def chain(y: Buffer, x: Buffer) -> ca.DeviceOp[Buffer]:
        return axpy_op(module, y, x, 2.0, n).then(lambda y: axpy_op(module, y, x, 0.5, n)).then(
            lambda y: axpy_op(module, y, y, 1.0, n)  # y = 2y
        )

    chain(eager_y, x).sync()
    graph = chain(y, x).graph(name="axpy chain")
    assert not graph.is_host and graph.node_count == 3
    assert y.floats() == tuple([1.0] * n)  # captured, not run
    graph.launch().sync()
    assert y.floats() == eager_y.floats() == tuple(2 * (1.0 + 2.5 * v) for v in xs)
    # new input of the same layout, replayed twice more (awaited once)
    x_new = Buffer("x new", 4 * n, floats([1.0] * n))
    graph.update(x_new)
    graph.launch().sync()
    asyncio.run(_await(graph.launch()))
    chain(eager_y, x_new).sync()
    chain(eager_y, x_new).sync()
    assert y.floats() == eager_y.floats()
    assert x.floats() == (1.0,) * n  # the captured input now holds the new contents
    with pytest.raises(ValueError, match=r"input 0 \(x\) was captured as \(.bytes., 4000\); short is \(.bytes., 8\)"):
        graph.update(Buffer("short", 8))


def test_a_scope_records_several_launches_into_one_graph(module: cc.Module) -> None:
    counter = Buffer("counter", 4)
    inc = module.get_function("inc")

    def bump(stream: cc.Stream | None) -> None:
        cc.launch(inc, cc.LaunchConfig(1, 1), counter.buffer, stream=stream)

    op = ca.DeviceOp.from_fn(bump, writes=[counter], name="inc")
    assert len(inc.param_layout) == 1  # queried before the capture
    with ca.graph_scope("ten incs") as scope:
        for _ in range(10):
            op.sync()
    assert counter.u32() == 0
    graph = scope.graph
    assert graph.node_count == 10
    for _ in range(5):
        graph.launch().sync()
    assert counter.u32() == 50


def test_allocation_and_synchronization_during_capture_are_refused(module: cc.Module) -> None:
    alloc = ca.DeviceOp.from_fn(lambda s: cc.DeviceBuffer.allocate(64, stream=s), name="api.zeros", allocates=True)
    with pytest.raises(ca.GraphCaptureError, match="'api.zeros' allocates memory"):
        alloc.graph()

    def synchronizing(stream: cc.Stream | None) -> None:
        assert stream is not None
        stream.synchronize()

    with pytest.raises(ca.GraphCaptureError, match="no synchronous allocation, copy or synchronization"):
        ca.DeviceOp.from_fn(synchronizing, name="sync inside").graph()
    assert not ca.is_capturing()
    x = Buffer("x", 4)
    sleep_op(module, x, 9, 1000).sync()  # the driver is still usable
    assert x.u32() == 9


def test_many_concurrent_asyncio_tasks_no_lost_completion_no_deadlock(module: cc.Module) -> None:
    count = 256
    buffers = [Buffer(f"t{i}", 4) for i in range(count)]

    async def task(i: int) -> int:
        first = await sleep_op(module, buffers[i], i, (i % 7) * 200_000, name=f"t{i}")
        await asyncio.sleep(0)
        return first + await sleep_op(module, buffers[i], i + 1, 50_000, name=f"t{i} again")

    async def main() -> tuple[list[int], int]:
        return await while_ticking(asyncio.wait_for(asyncio.gather(*(task(i) for i in range(count))), timeout=60))

    with ca.using_policy(ca.RoundRobin(4)):
        results, ticks = asyncio.run(main())
    assert results == [2 * i + 1 for i in range(count)]
    assert [b.u32() for b in buffers] == [i + 1 for i in range(count)]
    assert not any(b.is_held for b in buffers)
    assert ticks > 0


def test_cancelling_a_pending_await(module: cc.Module) -> None:
    x, y = Buffer("x", 4), Buffer("y", 4)

    async def main() -> float:
        future = sleep_op(module, x, 77, 300 * MS, name="long").schedule()
        task = asyncio.create_task(_await_future(future))
        await asyncio.sleep(0.02)
        start = time.perf_counter()
        task.cancel()
        try:
            await task
        except asyncio.CancelledError:
            pass
        assert task.cancelled()
        cancel_latency = time.perf_counter() - start
        assert x.is_held  # the kernel is still running: x stays owned by it
        with pytest.raises(ca.OwnershipError, match="'long'"):
            copy_op(y, x).sync()
        deadline = time.perf_counter() + 5
        while x.is_held and time.perf_counter() < deadline:
            await asyncio.sleep(0.005)  # handed back by the poller when the kernel ends
        assert x.holders == []
        return cancel_latency

    latency = asyncio.run(main())
    assert latency < 0.1, f"cancellation took {latency * 1e3:.1f} ms"
    copy_op(y, x).sync()
    assert y.u32() == 77


async def _await_future(future: ca.DeviceFuture[Any]) -> Any:
    return await future


def test_shared_op_runs_once_for_consumers_on_several_streams(module: cc.Module) -> None:
    w = Buffer("w", 4)
    outs = [Buffer(f"o{i}", 4) for i in range(3)]
    shared = sleep_op(module, w, 123, 20 * MS, name="init w").shared()
    ops = [shared.then(copy_op(out, w)) for out in outs]
    futures = [op.schedule(ca.RoundRobin(3)) for op in ops]
    for future in futures:
        future.result()
    assert [o.u32() for o in outs] == [123] * 3
