"""Loops of launches: a call that passes the same objects again reuses what they
imply (its binding) but is still checked for what may have changed; `cutile.batch`
enqueues many launches with one wait at the end. Run on both backends."""

from __future__ import annotations

import gc
import weakref

import numpy as np
import pytest

import cutile
from cutile import api
from cutile.core import Constant, Mut, Tensor, f32, load_tile_like

BOTH_BACKENDS = True


@cutile.entry
def accumulate(z: Mut[Tensor[f32, ["B"]]], x: Tensor[f32, [-1]], a: f32):
    z.store(load_tile_like(z, z) + a * load_tile_like(x, z))


@cutile.entry
def scaled(z: Mut[Tensor[f32, ["B"]]], x: Tensor[f32, [-1]], S: Constant[float]):
    z.store(S * load_tile_like(x, z))


def test_a_loop_of_launches_over_the_same_objects_is_right_every_time() -> None:
    n = 1000  # a tail: 1000 = 7 * 128 + 104
    xs = np.random.default_rng(0).standard_normal(n).astype(np.float32)
    x = api.from_numpy(xs)
    z = api.zeros([n]).partition([128])
    expected = np.zeros(n, np.float64)
    for step in range(6):
        a = 0.5 * step - 1.0  # a run-time scalar that changes every call
        z, x = accumulate(z, x, a).sync()
        expected += a * xs.astype(np.float64)
    np.testing.assert_allclose(z.to_numpy(), expected, rtol=1e-5, atol=1e-5)


def test_a_constant_that_changes_selects_new_code() -> None:
    x = api.from_numpy(np.arange(256, dtype=np.float32))
    z = api.zeros([256]).partition([128])
    z, x = scaled(z, x, 2.0).sync()
    np.testing.assert_array_equal(z.to_numpy(), 2 * np.arange(256, dtype=np.float32))
    z, x = scaled(z, x, 3.0).sync()
    np.testing.assert_array_equal(z.to_numpy(), 3 * np.arange(256, dtype=np.float32))
    z, x = scaled(z, x, -0.0).sync()
    assert np.all(np.signbit(z.to_numpy()[1:]))  # -0.0 * positive: not the code of 0.0
    z, x = scaled(z, x, 0.0).sync()
    assert not np.any(np.signbit(z.to_numpy()))


@cutile.entry
def scaled_rows(z: Mut[Tensor[f32, ["BM", "BN"]]], x: Tensor[f32, [-1, "N"]], S: Constant[float],
                N: Constant[int]):
    z.store(S * load_tile_like(x, z) + N)


def test_a_call_with_keyword_constants_and_inferred_ones_reuses_its_binding_only_when_they_match() -> None:
    xs = np.random.default_rng(1).standard_normal((50, 70)).astype(np.float32)
    x = api.from_numpy(xs)
    z = api.full([50, 70], np.nan).partition([16, 32])
    z, x = scaled_rows(z, x, S=2.0).sync()  # N inferred from x, S by keyword
    binding, previous = scaled_rows._object_binding, 2.0
    for scale in (2.0, 2.0, 3.0, 3.0, -0.0, 0.0):
        z, x = scaled_rows(z, x, S=scale).sync()
        np.testing.assert_array_equal(z.to_numpy(), scale * xs + 70)
        reused = scaled_rows._object_binding is binding
        assert reused == (scale == previous and str(scale) == str(previous)), scale  # (-0.0 is other code)
        binding, previous = scaled_rows._object_binding, scale
    ones = api.ones([300])
    acc = api.zeros([300]).partition([128])
    for step in range(3):  # a run-time scalar by keyword: the binding is reused, the value is this call's
        acc, ones = accumulate(acc, ones, a=step + 1).sync()
    np.testing.assert_array_equal(acc.to_numpy(), np.full(300, 6.0, np.float32))
    z, x = scaled_rows(z, x, 3.0, N=70).sync()  # the inferred constant given: another call form, still right
    np.testing.assert_array_equal(z.to_numpy(), 3.0 * xs + 70)
    with pytest.raises(cutile.LaunchError, match="unexpected keyword|got an unexpected"):
        scaled_rows(z, x, T=1.0)
    with pytest.raises(cutile.LaunchError, match="multiple values"):
        scaled_rows(z, x, 2.0, S=2.0)


def test_reused_objects_are_still_checked_for_ownership() -> None:
    x = api.ones([256])
    z = api.zeros([256]).partition([128])
    z, x = accumulate(z, x, 1.0).sync()
    pending = accumulate(z, x, 1.0)  # the same objects: holds are still taken
    with pytest.raises(cutile.OwnershipError, match="held by the pending launch of accumulate"):
        accumulate(z, x, 1.0)
    z, x = pending.sync()
    whole = z.unpartition()
    with pytest.raises(cutile.OwnershipError, match=r"parameter 'z'.*consumed by unpartition\(\)"):
        accumulate(z, x, 1.0)
    np.testing.assert_array_equal(whole.to_numpy(), np.full(256, 2, np.float32))


def test_a_binding_does_not_keep_tensors_or_their_memory_alive() -> None:
    x = api.ones([256])
    z = api.zeros([256]).partition([128])
    z, x = accumulate(z, x, 1.0).sync()
    alive, memory = weakref.ref(x), weakref.ref(x._storage)
    del x
    gc.collect()
    assert alive() is None and memory() is None


def test_a_batch_runs_a_loop_of_launches_and_holds_its_tensors_until_the_end() -> None:
    n = 300
    x = api.from_numpy(np.full(n, 2, np.float32))
    z = api.zeros([n]).partition([128])
    with cutile.batch() as active:
        for _ in range(10):
            z, x = accumulate(z, x, 0.5).sync()
        with pytest.raises(cutile.OwnershipError, match=r"written by the pending op launch of accumulate \(parameter 'z'\)"):
            z.to_numpy()
        assert active.ops == 10
    np.testing.assert_array_equal(z.to_numpy(), np.full(n, 10, np.float32))


def test_a_batch_that_does_not_wait_completes_through_its_future() -> None:
    x = api.ones([256])
    z = api.zeros([256]).partition([128])
    with cutile.batch(wait=False) as active:
        z, x = accumulate(z, x, 1.0).sync()
        z, x = accumulate(z, x, 1.0).sync()
    assert active.future is not None
    active.future.result()
    np.testing.assert_array_equal(z.to_numpy(), np.full(256, 2, np.float32))


def test_a_dead_object_of_the_last_call_never_matches_a_wrong_argument() -> None:
    x = api.ones([256])
    z = api.zeros([256]).partition([128])
    z, x = accumulate(z, x, 1.0).sync()
    del x
    gc.collect()
    with pytest.raises(cutile.LaunchError, match="parameter 'x' expects a tensor, got NoneType"):
        accumulate(z, None, 1.0)


@pytest.mark.interpreter_only
def test_a_batch_belongs_to_its_own_asyncio_task() -> None:
    import asyncio

    async def batching() -> None:
        x = api.ones([256])
        z = api.zeros([256]).partition([128])
        with cutile.batch("task A"):
            z, x = accumulate(z, x, 1.0).sync()
            await asyncio.sleep(0.01)  # the other task runs while this batch is open

    async def other() -> np.ndarray:
        await asyncio.sleep(0)
        x = api.ones([256])
        z = api.zeros([256]).partition([128])
        z, x = await accumulate(z, x, 2.0)  # not in task A's batch: done when awaited
        return z.to_numpy()

    async def main() -> np.ndarray:
        _, result = await asyncio.gather(batching(), other())
        return result

    np.testing.assert_array_equal(asyncio.run(main()), np.full(256, 2, np.float32))


def test_batch_mistakes_are_cutile_errors() -> None:
    with cutile.batch("outer"):
        with pytest.raises(cutile.BatchError, match="batch 'inner': the batch 'outer' is already active"):
            with cutile.batch("inner"):
                pass
    x = api.ones([256])
    z = api.zeros([256]).partition([128])
    with cutile.graph_scope("g"):
        with pytest.raises(cutile.GraphCaptureError, match="cannot start inside a CUDA graph capture"):
            with cutile.batch():
                pass

    async def late() -> None:  # started inside the batch, so it runs in it, but too late
        await asyncio.sleep(0)
        accumulate(z, x, 1.0).sync()

    async def main() -> None:
        with cutile.batch():
            task = asyncio.get_running_loop().create_task(late())
        with pytest.raises(cutile.BatchError, match="after the batch ended"):
            await task

    import asyncio

    asyncio.run(main())
