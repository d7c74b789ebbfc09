"""Mapped partitions: ``t.partition(tile).map(map_shape, blocks=n)`` on the host and
``for idx in z.tiles():`` in safe kernels. The suite's mapped kernels (persistent
grouped GEMM, chunked row softmax and LayerNorm on an owned axis, a two-output
``tiles_with`` kernel, a ``tiles_within`` update) agree with numpy in float64 on odd
shapes and several block counts, on the interpreter here (which also checks that each
schedule covered every tile once) and on the GPU where one is; the host checks ``map``'s
arguments before any launch, naming the parameter."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

import cutile
from cutile import api
from cutile.core import Constant, Mut, Tensor, bf16, bid, cdiv, f16, f32, i32, mma, zeros
from cutile_compiler._opdefs.schedule import PythonArithmetic, schedule_coordinates
from compiler_suite import entries, load_suite

BOTH_BACKENDS = True
RNG = np.random.default_rng(14)


SUITE = load_suite().SUITE
KERNELS = entries(SUITE)


def normal(*shape: int, dtype: Any = np.float32) -> np.ndarray:
    return RNG.standard_normal(shape).astype(dtype)


def poisoned(shape: list[int]) -> cutile.Tensor:
    return api.full(shape, np.nan)


# -- the schedule is a bijection ----------------------------------------------------------------
@pytest.mark.interpreter_only
@pytest.mark.parametrize("counts", [(1,), (7,), (1, 1), (5, 3), (3, 5), (13, 7), (2, 3, 5), (4, 1, 9)])
@pytest.mark.parametrize("group", [1, 2, 3, 8])
def test_every_schedule_item_is_a_distinct_tile(counts: tuple[int, ...], group: int) -> None:
    total = int(np.prod(counts))
    for groups in {(1,) * len(counts), (1,) * (len(counts) - 1) + (group,),
                   (1,) * max(len(counts) - 2, 0) + (group, 1)[-len(counts):],
                   (1,) * max(len(counts) - 2, 0) + (group, 2)[-len(counts):]}:
        if len(counts) == 1 and groups != (1,):
            continue
        tiles = [tuple(schedule_coordinates(i, list(counts), groups, PythonArithmetic())) for i in range(total)]
        assert sorted(tiles) == sorted(np.ndindex(*counts)), (counts, groups)


@pytest.mark.interpreter_only
def test_the_grouped_order_is_the_persistent_gemms() -> None:
    # map [G, 1] walks G tile rows down a column before moving right, as the unsafe
    # persistent GEMM of the suite does (its arithmetic, written out).
    tiles_m, tiles_n, group = 7, 5, 3
    for tile in range(tiles_m * tiles_n):
        in_group = group * tiles_n
        first_m = (tile // in_group) * group
        group_m = min(tiles_m - first_m, group)
        expected = (first_m + (tile % in_group) % group_m, (tile % in_group) // group_m)
        assert tuple(schedule_coordinates(tile, [tiles_m, tiles_n], (group, 1), PythonArithmetic())) == expected


# -- the suite's mapped kernels --------------------------------------------------------------------
def gemm_inputs(m: int, n: int, k: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    x, y = normal(m, k, dtype=np.float16), normal(k, n, dtype=np.float16)
    return x, y, x.astype(np.float64) @ y.astype(np.float64)


@pytest.mark.parametrize("blocks", [1, 3, 5, 12, 20])
@pytest.mark.parametrize("map_shape", [[1, 1], [2, 1], [3, 1], [8, 1], [2, 2]])
def test_safe_persistent_gemm_on_any_block_count(map_shape: list[int], blocks: int) -> None:
    x, y, expected = gemm_inputs(200, 136, 40)
    z = poisoned([200, 136]).partition([64, 32]).map(map_shape, blocks=blocks)  # 4 x 5 tiles
    z, _, _ = KERNELS["mapped_gemm"](z, api.from_numpy(x, f16), api.from_numpy(y, f16), BK=16).sync()
    np.testing.assert_allclose(z.to_numpy(), expected, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("shape, tile, blocks", [((37, 1000), (1, 256), 7), ((37, 1000), (4, 128), 3),
                                                 ((5, 33), (2, 16), 1), ((64, 300), (8, 64), 50)])
def test_chunked_softmax_on_an_owned_axis(shape: tuple[int, int], tile: tuple[int, int], blocks: int) -> None:
    x = normal(*shape) * 4
    z = poisoned(list(shape)).partition(list(tile)).map([1, cutile.OWNED], blocks=blocks)
    z, _ = KERNELS["chunked_softmax"](z, api.from_numpy(x)).sync()
    e = np.exp(x.astype(np.float64) - x.max(axis=1, keepdims=True))
    np.testing.assert_allclose(z.to_numpy(), e / e.sum(axis=1, keepdims=True), rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("shape, tile, blocks", [((37, 1000), (1, 256), 4), ((21, 130), (4, 32), 2),
                                                 ((3, 7), (1, 4), 9)])
def test_chunked_layernorm_on_an_owned_axis(shape: tuple[int, int], tile: tuple[int, int], blocks: int) -> None:
    x, w, b = normal(*shape) + 3, normal(shape[1]), normal(shape[1])
    z = poisoned(list(shape)).partition(list(tile)).map([1, cutile.OWNED], blocks=blocks)
    z, _, _, _ = KERNELS["chunked_layernorm"](z, api.from_numpy(x), api.from_numpy(w), api.from_numpy(b),
                                              1e-5).sync()
    x64 = x.astype(np.float64)
    expected = (x64 - x64.mean(axis=1, keepdims=True)) / np.sqrt(x64.var(axis=1, keepdims=True) + 1e-5) * w + b
    np.testing.assert_allclose(z.to_numpy(), expected, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("blocks", [1, 4, 9, 30])
def test_two_outputs_share_one_schedule(blocks: int) -> None:
    x, y = normal(100, 72), normal(100, 72)
    z = poisoned([100, 72]).partition([32, 32]).map([2, 2], blocks=blocks)
    w = poisoned([100, 72]).partition([32, 32]).map([2, 2], blocks=blocks)
    z, w, _, _ = KERNELS["sum_and_product"](z, w, api.from_numpy(x), api.from_numpy(y)).sync()
    np.testing.assert_array_equal(z.to_numpy(), x + y)
    np.testing.assert_array_equal(w.to_numpy(), x * y)


@pytest.mark.parametrize("rows_per_tile, start, count, blocks", [(1, 5, 13, 3), (4, 2, 9, 1), (4, 0, 64, 8),
                                                                 (2, 31, 2, 5)])
def test_a_sub_range_update_writes_only_its_tiles(rows_per_tile: int, start: int, count: int, blocks: int) -> None:
    cache = normal(64, 16)
    new = normal(count, 16)
    z = api.from_numpy(cache.copy()).partition([rows_per_tile, 16]).map([1, 1], blocks=blocks)
    z, _ = KERNELS["cache_update"](z, api.from_numpy(new), start).sync()
    expected = cache.copy()
    first = start * rows_per_tile
    written = -(-count // rows_per_tile) * rows_per_tile  # whole tiles: the last one padded with zeros
    padded = np.zeros((written, 16), np.float32)
    padded[:count] = new
    expected[first:first + written] = padded[:64 - first]
    np.testing.assert_array_equal(z.to_numpy(), expected)


@cutile.entry
def pair_update(keys: Mut[Tensor[f32, ["BS", "D"]]], values: Mut[Tensor[f32, ["BS", "D"]]],
                new_keys: Tensor[f32, [-1, -1]], new_values: Tensor[f32, [-1, -1]], start: i32, BS: Constant[int],
                D: Constant[int]):
    """Two caches' sub-range in one schedule: ``tiles_within``'s partner (values) stores at
    the keys' minted indices."""
    for idx in keys.tiles_within(((start, cdiv(new_keys.shape[0], BS)), None), values):
        r, c = idx
        keys.store(new_keys.load(index=(r - start, c), shape=(BS, D)), idx)
        values.store(new_values.load(index=(r - start, c), shape=(BS, D)), idx)


@pytest.mark.parametrize("start, count, blocks", [(5, 13, 3), (0, 64, 8), (63, 1, 2)])
def test_a_sub_range_schedule_shared_by_two_partitions(start: int, count: int, blocks: int) -> None:
    keys, values = normal(64, 16), normal(64, 16)
    new_keys, new_values = normal(count, 16), normal(count, 16)
    k = api.from_numpy(keys.copy()).partition([1, 16]).map([1, 1], blocks=blocks)
    v = api.from_numpy(values.copy()).partition([1, 16]).map([1, 1], blocks=blocks)
    k, v, _, _ = pair_update(k, v, api.from_numpy(new_keys), api.from_numpy(new_values), start).sync()
    keys[start:start + count], values[start:start + count] = new_keys, new_values
    np.testing.assert_array_equal(k.to_numpy(), keys)
    np.testing.assert_array_equal(v.to_numpy(), values)


@pytest.mark.interpreter_only
def test_a_sub_range_past_the_grid_fails_its_run_time_check() -> None:
    z = api.zeros([64, 16]).partition([4, 16]).map([1, 1], blocks=2)
    with pytest.raises(cutile.KernelRuntimeError, match="tiles_within: the range of axis 0 passes the tile grid"):
        KERNELS["cache_update"](z, api.from_numpy(normal(12, 16)), 14).sync()  # tiles 14..16 of 16


@cutile.entry
def mapped_batched_matmul(z: Mut[Tensor[f32, [1, "BM", "BN"]]], a: Tensor[f16, [-1, -1, "K"]],
                          b: Tensor[f16, [-1, "K", -1]], BM: Constant[int], BN: Constant[int], BK: Constant[int],
                          K: Constant[int]):
    part_a = a.partition([1, BM, BK])
    part_b = b.partition([1, BK, BN])
    for idx in z.tiles():
        i, m, n = idx
        acc = zeros((1, BM, BN), f32)
        for k in range(cdiv(K, BK)):
            acc = mma(part_a.load([i, m, k]), part_b.load([i, k, n]), acc)
        z.store(acc, idx)


@pytest.mark.parametrize("map_shape, blocks", [([1, 2, 1], 5), ([1, 1, 3], 2), ([1, 4, 2], 7)])
def test_a_rank_3_schedule_walks_the_batch_row_major(map_shape: list[int], blocks: int) -> None:
    a, b = normal(3, 100, 48, dtype=np.float16), normal(3, 48, 72, dtype=np.float16)
    z = poisoned([3, 100, 72]).partition([1, 32, 32]).map(map_shape, blocks=blocks)
    z, _, _ = mapped_batched_matmul(z, api.from_numpy(a, f16), api.from_numpy(b, f16), BK=16).sync()
    np.testing.assert_allclose(z.to_numpy(), a.astype(np.float64) @ b.astype(np.float64), rtol=1e-4, atol=1e-4)


@cutile.entry
def affine_i32(z: Mut[Tensor[i32, ["BM", "BN"]]], x: Tensor[i32, [-1, -1]], BM: Constant[int], BN: Constant[int]):
    for idx in z.tiles():
        z.store(x.load(index=idx, shape=(BM, BN)) * 3 - 7, idx)


@cutile.entry
def affine_bf16(z: Mut[Tensor[bf16, ["BM", "BN"]]], x: Tensor[bf16, [-1, -1]], BM: Constant[int], BN: Constant[int]):
    for idx in z.tiles():
        z.store(x.load(index=idx, shape=(BM, BN)) * 2.0 + 1.0, idx)


@pytest.mark.parametrize("blocks", [1, 3, 8])
def test_mapped_stores_of_other_dtypes(blocks: int) -> None:
    import ml_dtypes

    xi = RNG.integers(-1000, 1000, size=(45, 70)).astype(np.int32)
    z = api.full([45, 70], -1, dtype=i32).partition([16, 32]).map([2, 1], blocks=blocks)
    z, _ = affine_i32(z, api.from_numpy(xi)).sync()
    np.testing.assert_array_equal(z.to_numpy(), xi * 3 - 7)
    xb = normal(45, 70).astype(ml_dtypes.bfloat16)
    z = api.full([45, 70], np.nan, dtype=bf16).partition([16, 32]).map([1, 2], blocks=blocks)
    z, _ = affine_bf16(z, api.from_numpy(xb, bf16)).sync()
    np.testing.assert_array_equal(z.to_numpy().astype(np.float64), (xb * 2 + 1).astype(np.float64))


# -- the interpreter's check of the schedule ---------------------------------------------------------
@cutile.entry
def only_block_zero(z: Mut[Tensor[f32, ["B"]]]):
    if bid(0) == 0:
        for idx in z.tiles():  # <- skipped by every other block
            z.store(1.0, idx)


@pytest.mark.interpreter_only
def test_the_interpreter_refuses_a_schedule_that_misses_tiles() -> None:
    z = api.zeros([64]).partition([8]).map([1], blocks=3)
    with pytest.raises(cutile.KernelRuntimeError, match=r"the schedule of 'z' reached tile \[1\] 0 time\(s\)"):
        only_block_zero(z).sync()


@pytest.mark.interpreter_only
def test_one_block_runs_the_whole_schedule() -> None:
    z = api.zeros([64]).partition([8]).map([1], blocks=1)
    only_block_zero(z).sync()
    np.testing.assert_array_equal(z.to_numpy(), np.ones(64, np.float32))


# -- the host side --------------------------------------------------------------------------------
@pytest.mark.interpreter_only
def test_map_consumes_the_partition_and_unpartition_gives_the_tensor_back() -> None:
    part = api.zeros([100, 40]).partition([16, 16])
    mapped = part.map([4, 1], blocks=6)
    assert (mapped.map_shape, mapped.blocks, mapped.grid, mapped.launch_grid) == ((4, 1), 6, (7, 3), (6,))
    assert repr(mapped) == "Partition(shape=[100, 40], tile=[16, 16], map=[4, 1], blocks=6, dtype=f32, device=cpu)"
    with pytest.raises(cutile.OwnershipError, match="consumed by map"):
        part.unpartition()
    tensor = mapped.unpartition()
    assert tensor.shape == (100, 40)
    with pytest.raises(cutile.OwnershipError, match="consumed by unpartition"):
        mapped.map([1, 1])


@pytest.mark.interpreter_only
def test_the_default_block_count_is_bounded_by_the_streamed_tiles() -> None:
    assert api.zeros([100, 40]).partition([16, 16]).map([1, 1]).blocks == 4  # the interpreter's default
    assert api.zeros([3, 4000]).partition([1, 256]).map([1, cutile.OWNED]).blocks == 3  # 3 rows: 3 items


@pytest.mark.interpreter_only
def test_on_the_gpu_the_default_block_count_is_the_sm_count(make_fake_gpu: Callable[..., Any]) -> None:
    with make_fake_gpu():  # the fake device has 132 SMs
        assert api.empty([4096, 4096]).partition([128, 128]).map([8, 1]).blocks == 132
        assert api.empty([256, 256]).partition([128, 128]).map([8, 1]).blocks == 4


@pytest.mark.parametrize("map_shape, blocks, message", [
    ([8], 4, "map(map_shape=[8]): a rank-2 partition needs 2 map dims, got 1"),
    ([0, 1], 4, "map dims are positive ints (a group size) or cutile.OWNED, got 0 for axis 0"),
    ([2, -1], 4, "got -1 for axis 1"),
    ([True, 1], 4, "got True for axis 0"),
    ([2.0, 1], 4, "got 2.0 for axis 0"),
    ([cutile.OWNED, cutile.OWNED], 4, "every axis is OWNED; at least one axis must be streamed"),
    ([1, 1], 0, "map(blocks=0): blocks is the number of blocks the launch runs, an int >= 1"),
    ([1, 1], -3, "map(blocks=-3)"),
    ([1, 1], True, "map(blocks=True)"),
    ([1, 1], 2.5, "map(blocks=2.5)"),
])
@pytest.mark.interpreter_only
def test_bad_map_arguments_are_refused_naming_the_parameter(map_shape: list[Any], blocks: Any, message: str) -> None:
    part = api.zeros([100, 40]).partition([16, 16])
    with pytest.raises(cutile.LaunchError) as info:
        part.map(map_shape, blocks=blocks)
    assert message in str(info.value)
    part.unpartition()  # a refused map consumes nothing


@pytest.mark.interpreter_only
def test_map_refuses_grouping_a_leading_axis_and_an_empty_grid() -> None:
    with pytest.raises(cutile.LaunchError, match=r"only the last two streamed axes are grouped; axis 0 must be 1"):
        api.zeros([4, 64, 64]).partition([1, 16, 16]).map([2, 1, 1], blocks=2)
    with pytest.raises(cutile.LaunchError, match="no tiles along axis 0"):
        api.zeros([0, 64]).partition([16, 16]).map([1, 1], blocks=2)
    # an owned axis does not count as a streamed one: [1, OWNED, 2] groups the last streamed pair
    assert api.zeros([4, 64, 64]).partition([1, 16, 16]).map([2, cutile.OWNED, 1], blocks=2).map_shape == (2, 0, 1)


def test_the_launch_grid_is_the_block_count_and_must_agree_when_explicit() -> None:
    x, y, expected = gemm_inputs(64, 64, 16)
    args = (api.from_numpy(x, f16), api.from_numpy(y, f16))
    z = poisoned([64, 64]).partition([32, 32]).map([2, 1], blocks=3)
    launch = KERNELS["mapped_gemm"](z, *args, BK=16)
    assert launch.plan().grid == (3, 1, 1)
    z, _, _ = launch.sync()
    np.testing.assert_allclose(z.to_numpy(), expected, rtol=1e-4, atol=1e-4)
    with pytest.raises(cutile.LaunchError, match=r"the explicit grid \[4, 1, 1\] disagrees with the grid \[3, 1, 1\]"):
        KERNELS["mapped_gemm"](z, *args, BK=16).grid(4).sync()


@pytest.mark.interpreter_only
def test_a_mapped_partition_compiles_ahead_of_time_from_placeholders() -> None:
    z = api.meta([1000, 700], f32).partition([128, 128]).map([8, 1], blocks=132)
    assert repr(z) == "meta(shape=[1000, 700], dtype=f32, tile=[128, 128], map=[8, 1], blocks=132)"
    compiled = cutile.compile(KERNELS["mapped_gemm"], z, api.meta([1000, 64], f16), api.meta([64, 700], f16), BK=64,
                              arch="sm_90")
    assert "get_num_tile_blocks" in compiled.mlir and compiled.cubin[:4] == b"\x7fELF"


@pytest.mark.interpreter_only
def test_the_gpu_backend_launches_blocks_by_1_by_1(make_fake_gpu: Callable[..., Any]) -> None:
    from cutile import _gpu

    kernel = KERNELS["sum_and_product"]
    with make_fake_gpu(kernels=[kernel]) as fake:
        x = api.from_numpy(np.zeros((100, 72), np.float32))
        y = api.from_numpy(np.zeros((100, 72), np.float32))
        z = api.empty([100, 72]).partition([32, 32]).map([2, 2], blocks=5)
        w = api.empty([100, 72]).partition([32, 32]).map([2, 2], blocks=5)
        launch = kernel(z, w, x, y)
        compiled = kernel.compiled(launch.plan().spec, "sm_90")
        fake.kernels[compiled.name] = _gpu.fake_param_layout(compiled.abi)
        launch.sync()
        (record,) = [r for r in fake.launches if r["grid"] == (5, 1, 1)]
        assert record["block"] == (1, 1, 1)


@pytest.mark.interpreter_only
def test_even_an_unsafe_kernel_runs_a_mapped_partition_on_its_blocks() -> None:
    kernel = cutile.entry(unsafe=True)(SUITE["sum_and_product"][0])
    x = api.from_numpy(np.zeros((100, 72), np.float32))
    z = api.zeros([100, 72]).partition([32, 32]).map([2, 2], blocks=5)
    w = api.zeros([100, 72]).partition([32, 32]).map([2, 2], blocks=5)
    with pytest.raises(cutile.LaunchError, match=r"disagrees with the grid \[5, 1, 1\] of the mapped partition 'z'"):
        kernel(z, w, x, x).grid(5, 2).sync()
    kernel(z, w, x, x).grid(5).sync()


@pytest.mark.interpreter_only
def test_map_while_a_launch_holds_the_partition_is_refused() -> None:
    x = api.from_numpy(np.ones(256, np.float32))
    z = api.zeros([256]).partition([128])
    pending = KERNELS["add"](z, x, x)
    with pytest.raises(cutile.OwnershipError, match="held by the pending launch of add"):
        z.map([1], blocks=2)
    pending.sync()
    mapped = z.map([1], blocks=2)
    only_block_zero(mapped.unpartition().partition([128]).map([1], blocks=1)).sync()


@cutile.entry
def unpacked_target(z: Mut[Tensor[f32, [8, 8]]], x: Tensor[f32, [-1, -1]]):
    for bm, bn in z.tiles():  # the loop's target may unpack the index: its entries are the minted coordinates
        z.store(x.load(index=(bm, bn), shape=(8, 8)) + 1.0, (bm, bn))


@pytest.mark.parametrize("blocks", [1, 7])
def test_a_schedule_loop_may_unpack_its_index(blocks: int) -> None:
    x = normal(30, 20)
    z = poisoned([30, 20]).partition([8, 8]).map([2, 1], blocks=blocks)
    z, _ = unpacked_target(z, api.from_numpy(x)).sync()
    np.testing.assert_array_equal(z.to_numpy(), x + 1)
