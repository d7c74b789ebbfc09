"""The ownership rules for work in flight (host mode: a scheduled op is pending
until the host observes its completion)."""

from __future__ import annotations

import asyncio
import gc

import pytest
from cuda_async_testkit import HostTensor, add, scale

import cuda_async as ca


def tensors() -> tuple[HostTensor, HostTensor, HostTensor]:
    return HostTensor("tensor z", [0, 0]), HostTensor("tensor x", [1, 2]), HostTensor("tensor y", [3, 4])


def test_a_written_resource_cannot_be_read_or_written_by_another_op() -> None:
    z, x, y = tensors()
    pending = add(z, x, y).schedule()
    assert z.is_held and z.holders == [("launch of add", ca.Access.WRITE)]
    with pytest.raises(ca.OwnershipError, match="tensor z is written by the pending op 'launch of add'") as info:
        scale(z, 2.0).sync()
    assert info.value.holder == "launch of add" and info.value.resource == "tensor z"
    assert info.value.requester == "launch of scale"
    with pytest.raises(ca.OwnershipError, match="may not read"):
        add(HostTensor("w", [0, 0]), z, y).sync()
    pending.result()
    scale(z, 2.0).sync()  # handed back on completion
    assert z.data == [8, 12]


def test_several_pending_ops_may_read_one_resource_but_none_may_write_it() -> None:
    z1, x, y = tensors()
    z2 = HostTensor("tensor z2", [0, 0])
    first = add(z1, x, y).schedule()
    second = add(z2, x, y).schedule()  # x and y read by both: allowed
    assert len(x.holders) == 2
    with pytest.raises(ca.OwnershipError, match="tensor x is read by the pending op 'launch of add'.*may not write"):
        scale(x, 2.0).sync()
    first.result()
    with pytest.raises(ca.OwnershipError):
        scale(x, 2.0).sync()  # still read by the second
    assert second.done()
    scale(x, 2.0).sync()
    assert x.data == [2, 4] and x.holders == []


def test_one_job_may_use_its_own_resources_in_order() -> None:
    z, x, y = tensors()
    op = add(z, x, y).then(lambda out: scale(out[0], 10.0)).then(lambda out: add(out[0], out[0], y))
    assert op.sync()[0].data == [43, 64]


def test_the_refused_op_enqueues_nothing_and_takes_nothing() -> None:
    z, x, y = tensors()
    w = HostTensor("w", [0, 0])
    pending = scale(x, 2.0).schedule()
    with pytest.raises(ca.OwnershipError):
        add(w, x, y).sync()
    assert w.data == [0, 0] and w.holders == [] and y.holders == []
    pending.result()


def test_a_refusal_in_the_middle_of_a_job_gives_back_what_the_job_took() -> None:
    z, x, y = tensors()
    w = HostTensor("w", [5, 5])
    pending = scale(w, 2.0).schedule()
    with pytest.raises(ca.OwnershipError, match="w is written"):
        add(z, x, y).then(lambda out: add(w, out[0], y)).sync()
    assert z.holders == [] and x.holders == []
    pending.result()


def test_await_hands_back_the_holds() -> None:
    # (a cancelled await: test_streams.test_a_cancelled_await_keeps_holds_until_the_work_completes)
    z, x, y = tensors()

    async def main() -> None:
        await add(z, x, y)
        assert z.holders == []
        future = scale(z, 2.0).schedule()
        assert z.is_held
        await future
        assert z.holders == []

    asyncio.run(main())


def test_a_dropped_future_gives_its_holds_back() -> None:
    z, x, y = tensors()
    future = add(z, x, y).schedule()
    assert z.is_held
    del future
    gc.collect()
    assert z.holders == []


def test_graph_launch_holds_the_captured_resources() -> None:
    z, x, y = tensors()
    graph = add(z, x, y).graph()
    pending = graph.launch().schedule()
    with pytest.raises(ca.OwnershipError, match="replay of launch of add"):
        scale(z, 2.0).sync()
    pending.result()


def test_check_available_for_host_access() -> None:
    z, x, y = tensors()
    z.check_available(ca.Access.READ)
    pending = add(z, x, y).schedule()
    with pytest.raises(ca.OwnershipError, match="'to_numpy' may not read"):
        z.check_available(ca.Access.READ, by="to_numpy")
    x.check_available(ca.Access.READ)
    with pytest.raises(ca.OwnershipError):
        x.check_available(ca.Access.WRITE)
    pending.result()
    z.check_available()


def test_a_resource_read_and_written_by_one_op_counts_as_written() -> None:
    x = HostTensor("x", [1])
    op = ca.DeviceOp.from_fn(lambda s: None, reads=[x], writes=[x], name="inplace")
    pending = op.schedule()
    assert x.holders == [("inplace", ca.Access.WRITE)]
    pending.result()
