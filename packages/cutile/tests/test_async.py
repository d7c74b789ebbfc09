"""Launches as cuda_async ops: await, schedule, then, zip, ownership while pending,
CUDA graphs (eager replays on the interpreter)."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest

import cutile
from cutile import api
from cutile.core import Mut, Tensor, f32, load_tile_like

BOTH_BACKENDS = True


@cutile.entry
def add(z: Mut[Tensor[f32, ["B"]]], x: Tensor[f32, [-1]], y: Tensor[f32, [-1]]):
    z.store(load_tile_like(x, z) + load_tile_like(y, z))


@cutile.entry
def scale(z: Mut[Tensor[f32, ["B"]]], x: Tensor[f32, [-1]], a: f32):
    z.store(a * load_tile_like(x, z))


def values(n: int, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(n).astype(np.float32)


def test_await_returns_the_tensors() -> None:
    xs, ys = values(1000, 1), values(1000, 2)

    async def main() -> np.ndarray:
        z = api.zeros([1000]).partition([256])
        z, _, _ = await add(z, api.from_numpy(xs), api.from_numpy(ys))
        return z.to_numpy()

    np.testing.assert_array_equal(asyncio.run(main()), xs + ys)


def test_many_concurrent_tasks() -> None:
    async def one(seed: int) -> bool:
        xs, ys = values(512, seed), values(512, seed + 100)
        z, _, _ = await add(api.zeros([512]).partition([128]), api.from_numpy(xs), api.from_numpy(ys))
        return bool(np.array_equal(z.to_numpy(), xs + ys))

    async def main() -> list[bool]:
        return list(await asyncio.gather(*(one(s) for s in range(32))))

    assert all(asyncio.run(main()))


def test_schedule_then_and_zip() -> None:
    xs, ys = values(700, 3), values(700, 4)
    x, y = api.from_numpy(xs), api.from_numpy(ys)
    t = api.zeros([700]).partition([128])
    u = api.zeros([700])
    # then: the second launch reads what the first wrote (same stream, in order)
    chained = add(t, x, y).then(lambda result: scale(u.partition([128]), result[0].unpartition(), 2.0))
    u_part, _ = chained.sync()
    np.testing.assert_allclose(u_part.to_numpy(), 2.0 * (xs + ys), rtol=1e-6)
    # zip: two independent launches, free to run on different streams
    a, b = api.zeros([700]).partition([128]), api.zeros([700]).partition([128])
    (a, _, _), (b, _) = cutile.zip(add(a, x, y), scale(b, x, 3.0)).sync()
    np.testing.assert_array_equal(a.to_numpy(), xs + ys)
    np.testing.assert_allclose(b.to_numpy(), 3.0 * xs, rtol=1e-6)
    future = add(api.zeros([700]).partition([128]), x, y).schedule()
    z, _, _ = future.result()
    np.testing.assert_array_equal(z.to_numpy(), xs + ys)


def test_a_scheduled_launch_owns_its_tensors_until_observed() -> None:
    x, y = api.from_numpy(values(256, 5)), api.from_numpy(values(256, 6))
    z = api.zeros([256]).partition([128])
    future = add(z, x, y).schedule()
    with pytest.raises(cutile.OwnershipError, match="launch of add"):
        z.to_numpy()
    with pytest.raises(cutile.OwnershipError, match="launch of add"):
        scale(api.zeros([256]).partition([128]), z._tensor, 1.0).sync()
    z2, _, _ = future.result()
    assert z2.to_numpy().shape == (256,)


def test_graph_replay_and_update() -> None:
    xs, ys, xs2 = values(512, 7), values(512, 8), values(512, 9)
    x, y = api.from_numpy(xs), api.from_numpy(ys)
    z = api.full([512], np.nan).partition([128])
    graph = add(z, x, y).graph()
    graph.launch().sync()
    np.testing.assert_array_equal(z.to_numpy(), xs + ys)
    graph.update(api.from_numpy(xs2), None)   # x's contents replaced, y kept
    graph.launch().sync()
    np.testing.assert_array_equal(z.to_numpy(), xs2 + ys)
    with pytest.raises(Exception, match="layout"):
        graph.update(api.zeros([100]), None)


def test_graph_updates_add_up_and_their_sources_may_be_dropped() -> None:
    import gc

    x, y = api.ones([256]), api.ones([256])
    z = api.zeros([256]).partition([128])
    graph = add(z, x, y).graph()
    graph.update(api.full([256], 2.0))        # next replay: x <- 2
    graph.update(None, api.full([256], 3.0))  # and y <- 3 (the x update stays)
    gc.collect()                              # the temporary sources are gone
    graph.launch().sync()
    np.testing.assert_array_equal(z.to_numpy(), np.full(256, 5.0, np.float32))


def test_graph_scope_records_several_launches() -> None:
    xs, ys = values(256, 10), values(256, 11)
    x, y = api.from_numpy(xs), api.from_numpy(ys)
    t = api.zeros([256]).partition([128])
    u = api.zeros([256]).partition([128])
    add(t, x, y).compile().sync()                  # warm-up: modules are loaded outside captures
    scale(u, api.zeros([256]), 0.5).compile().sync()
    with cutile.graph_scope("step") as scope:
        add(t, x, y).sync()
        scale(u, t.unpartition(), 0.5).sync()
    graph = scope.graph
    graph.launch().sync()
    np.testing.assert_allclose(u.to_numpy(), 0.5 * (xs + ys), rtol=1e-6)


@pytest.mark.gpu
def test_launching_a_cold_kernel_inside_a_capture_is_refused_clearly() -> None:
    @cutile.entry
    def cold(z: Mut[Tensor[f32, ["B"]]], x: Tensor[f32, [-1]]):
        z.store(load_tile_like(x, z) * 3)

    x = api.ones([128])
    z = api.zeros([128]).partition([128])
    with pytest.raises(cutile.GraphCaptureError, match=r"Warm it up first"):
        with cutile.graph_scope("cold"):
            cold(z, x).sync()


def test_constructors_as_ops_compose_with_launches() -> None:
    n = 1000
    x_op = api.ops.randn([n], seed=3)
    doubled = x_op.then(lambda x: add(api.zeros([n]).partition([128]), x, x))
    z, x, _ = doubled.sync()
    expected = api.randn([n], seed=3).to_numpy()        # the same seed gives the same values
    np.testing.assert_array_equal(x.to_numpy(), expected)
    np.testing.assert_array_equal(z.to_numpy(), expected + expected)
    zeros, ones = cutile.zip(api.ops.zeros([n]), api.ops.ones([n], f32)).sync()
    assert not zeros.to_numpy().any() and (ones.to_numpy() == 1).all()
    u = api.ops.rand([64], seed=1)
    assert np.array_equal(u.sync().to_numpy(), u.sync().to_numpy())  # an op may run again


def test_a_constructor_op_can_be_captured_in_a_graph() -> None:
    op = api.ops.full([256], 2.5)
    op.sync()  # warm-up: the fill kernel is loaded outside the capture
    graph = op.graph()
    result = graph.launch().sync()
    np.testing.assert_array_equal(result.to_numpy(), np.full(256, 2.5, np.float32))


def test_every_path_raises_cutile_errors() -> None:
    """An op reaches the user through sync, zip, then, graphs or constructors as ops:
    whichever it takes, ownership mistakes are cutile.OwnershipError (a CutileError)."""
    x, y = api.ones([256]), api.ones([256])
    z = api.zeros([256]).partition([128])
    pending = add(z, x, y).schedule()  # holds z (pending until observed)
    def reader() -> cutile.Launch:  # reads z, which the pending launch writes
        return scale(api.zeros([256]).partition([128]), z._tensor, 1.0)

    for attempt in (lambda: cutile.zip(reader()).sync(),
                    lambda: api.ops.zeros([4]).then(lambda _: reader()).sync(),
                    lambda: reader().map(lambda r: r).sync()):
        with pytest.raises(cutile.OwnershipError, match=r"written by the pending op launch of add \(parameter 'z'\); "
                                                        r"launch of scale \(parameter 'x'\) may not read it") as info:
            attempt()
        assert isinstance(info.value, cutile.CutileError)
    pending.result()
    with cutile.graph_scope("g"):
        with pytest.raises(cutile.GraphCaptureError, match="cannot start inside a CUDA graph capture"):
            with cutile.batch():
                pass


def test_batch_after_refuses_what_is_not_a_batch() -> None:
    with pytest.raises(cutile.ArgumentTypeError, match="parameter 'after' must be a batch .* got str"):
        with cutile.batch("next", after="layer 0"):  # type: ignore[arg-type]
            pass
