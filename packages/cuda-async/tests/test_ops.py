"""DeviceOp semantics in host mode: laziness, results, combinators, execution forms."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from cuda_async_testkit import Counter, HostTensor, add, scale

import cuda_async as ca


def tensors() -> tuple[HostTensor, HostTensor, HostTensor]:
    return HostTensor("z", [0, 0, 0]), HostTensor("x", [1, 2, 3]), HostTensor("y", [10, 20, 30])


def test_an_op_is_lazy_until_run() -> None:
    counter = Counter()
    z, x, y = tensors()
    op = add(z, x, y, counter)
    assert counter.calls == [] and z.data == [0, 0, 0]
    assert op.sync() == (z, x, y)
    assert counter.calls == ["launch of add"] and z.data == [11, 22, 33]
    op.sync()  # an op may be run again: it is a description, not a one-shot
    assert counter.calls == ["launch of add"] * 2


def test_from_fn_passes_none_as_the_stream_in_host_mode() -> None:
    seen: list[Any] = []
    def probe(stream: object) -> int:
        seen.append(stream)
        return 7

    op = ca.DeviceOp.from_fn(probe, name="probe")
    assert op.sync() == 7 and op.sync_on(None) == 7
    assert seen == [None, None]
    assert op.name == "probe" and "probe" in repr(op)


def test_from_fn_refuses_non_resources() -> None:
    with pytest.raises(TypeError, match="Resource objects"):
        ca.DeviceOp.from_fn(lambda s: None, reads=[[1.0]])  # type: ignore[list-item]


def test_a_leaf_reports_its_accesses_with_write_winning() -> None:
    x, y, z = ca.Resource("x"), ca.Resource("y"), ca.Resource("z")
    op = ca.DeviceOp.from_fn(lambda s: None, reads=[x, y, z], writes=[z], name="k")
    assert op.reads == (x, y) and op.writes == (z,)  # z is both read and written: a write


def test_then_chains_and_passes_the_result() -> None:
    counter = Counter()
    z, x, y = tensors()
    op = add(z, x, y, counter).then(lambda out: scale(out[0], 2.0, counter))
    assert counter.calls == []
    (result,) = op.sync()
    assert result is z and z.data == [22, 44, 66]
    assert counter.calls == ["launch of add", "launch of scale"]
    # then with an op (result ignored)
    again = scale(z, 0.5, counter).then(ca.value("done"))
    assert again.sync() == "done" and z.data == [11, 22, 33]


def test_long_chains_need_no_deep_recursion() -> None:
    counter = HostTensor("c", [0])
    one = HostTensor("one", [1])
    op: ca.DeviceOp[Any] = add(counter, counter, one)
    for _ in range(4999):
        op = op.then(add(counter, counter, one))
    op.sync()
    assert counter.data == [5000]
    assert len(op.name) < 200


def test_then_refuses_a_function_that_returns_no_op() -> None:
    op: ca.DeviceOp[Any] = ca.value(1).then(lambda v: v + 1)  # type: ignore[arg-type, return-value]
    with pytest.raises(TypeError, match="must return a DeviceOp.*use map"):
        op.sync()
    with pytest.raises(TypeError, match="DeviceOp or a function"):
        ca.value(1).then(3)  # type: ignore[arg-type]


def test_map_applies_a_host_function() -> None:
    z, x, y = tensors()
    op = add(z, x, y).map(lambda out: sum(out[0].data))
    assert op.sync() == 66
    assert ca.value(20).map(lambda v: v + 1).map(str).sync() == "21"


def test_zip_and_all_of() -> None:
    z1, x, y = tensors()
    z2 = HostTensor("z2", [0, 0, 0])
    pair = ca.zip(add(z1, x, y), ca.value("tag"))
    (out, tag) = pair.sync()
    assert tag == "tag" and out[0] is z1 and z1.data == [11, 22, 33]
    ops = [add(z2, x, y).map(lambda out: out[0].data[0]), ca.value(5)]
    assert ca.all_of(ops).sync() == [11, 5]
    assert ca.zip(ca.value(1), ca.value(2), ca.value(3)).sync() == (1, 2, 3)
    with pytest.raises(ValueError, match="at least one"):
        ca.zip()
    with pytest.raises(TypeError, match="expected DeviceOps"):
        ca.all_of([1, 2])  # type: ignore[arg-type]


def test_shared_runs_once_for_many_consumers() -> None:
    counter = Counter()
    z, x, y = tensors()
    shared = add(z, x, y, counter).shared()
    first = shared.map(lambda out: out[0].data[0])
    second = shared.map(lambda out: out[0].data[2])
    assert not shared.done
    assert ca.zip(first, second).sync() == (11, 33)
    assert first.sync() == 11  # a later job: no rerun
    assert counter.calls == ["launch of add"] and shared.done


def test_shared_hands_its_writes_to_consumers_in_other_jobs() -> None:
    z, x, y = tensors()
    shared = add(z, x, y).shared()
    pending = shared.then(lambda out: scale(HostTensor("w", [1]), 3.0)).schedule()
    # the shared op's write of z was handed over once it was enqueued: a reader may use it
    assert shared.map(lambda out: out[0].data).sync() == [11, 22, 33]
    pending.result()


def test_schedule_returns_a_future() -> None:
    z, x, y = tensors()
    future = add(z, x, y).schedule()
    assert "pending" in repr(future) and future.name == "launch of add"
    assert future.done() and future.result() == (z, x, y)
    assert "done" in repr(future)
    assert ca.DeviceFuture.completed(3).result() == 3


def test_await_inside_asyncio() -> None:
    z, x, y = tensors()

    async def main() -> tuple[Any, int]:
        out = await add(z, x, y)
        doubled = await ca.value(21).map(lambda v: 2 * v)
        return out, doubled

    out, doubled = asyncio.run(main())
    assert out[0].data == [11, 22, 33] and doubled == 42


def test_many_concurrent_tasks_all_complete() -> None:
    async def one(i: int) -> int:
        z = HostTensor(f"z{i}", [0])
        x, y = HostTensor(f"x{i}", [i]), HostTensor(f"y{i}", [1])
        out = await add(z, x, y)
        await asyncio.sleep(0)
        return int(out[0].data[0])

    async def main() -> list[int]:
        return await asyncio.gather(*(one(i) for i in range(500)))

    assert asyncio.run(main()) == [i + 1 for i in range(500)]


def test_a_failing_op_raises_from_sync_and_gives_its_holds_back() -> None:
    z, x, y = tensors()

    def boom(stream: object) -> None:
        raise RuntimeError("kernel failed")

    op = add(z, x, y).then(ca.DeviceOp.from_fn(boom, writes=[x], name="boom"))
    with pytest.raises(RuntimeError, match="kernel failed"):
        op.sync()
    assert z.holders == [] and x.holders == []
    add(z, x, y).sync()
