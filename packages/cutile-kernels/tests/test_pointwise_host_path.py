"""The GPU backend's host side of the pointwise functions, on cuda_core's fake driver (no
GPU needed): the grid each launch is given (kv_cache_update's persistent blocks, rope's
token blocks, the flat and row forms of the element-wise functions, embedding's tiles)
and that the caller's tensors stay usable after the launch. The kernels compile with
tileiras for the fake sm_90 device; the fake driver records launches instead of running
them. (The fake's allocations are 1 MiB apart: every tensor here stays below that.)"""

import importlib
from collections.abc import Iterator
from typing import Any

import pytest

from cuda_core.testing import FakeDriver
from cutile import api
from host_path_testkit import fake_gpu, register_layout

import cutile_kernels as ck

FACTORIES = [importlib.import_module(f"cutile_kernels._{m}").__dict__[f] for m, f in
             [("rope", "rope_kernel"), ("activations", "pointwise_kernel"), ("embedding", "embedding_kernel"),
              ("kv_cache", "cache_update_kernel")]]


@pytest.fixture
def fake() -> Iterator[FakeDriver]:
    with fake_gpu(*FACTORIES) as driver:
        yield driver


def run(fake: FakeDriver, pending: Any) -> dict[str, Any]:
    """Registers the pending launch's kernel with the fake (its parameter layout, as the
    cubin declares it), runs it, and gives the launch the driver recorded."""
    compiled = register_layout(fake, pending.launch)
    pending.run()
    record: dict[str, Any] = fake.launches[-1]
    assert record["function"] == compiled.name
    return record


def test_kv_cache_update_runs_its_blocks_over_the_new_rows_only(fake: FakeDriver) -> None:
    cache, new = api.empty([4, 64, 2, 128], dtype="bf16"), api.empty([4, 32, 2, 128], dtype="bf16")
    record = run(fake, ck.kv_cache_update.launch(cache, new, 16, config={"tile_rows": 16, "tile_cols": 128,
                                                                          "max_blocks": 528}))
    assert record["grid"] == (4 * 2 * 2, 1, 1)  # items: batch x row tiles (32 / 16) x column tiles (256 / 128)
    step, position = api.empty([4, 1, 2, 128], dtype="bf16"), api.empty([1], dtype="i64")
    record = run(fake, ck.kv_cache_update.launch(cache, step, position,
                                                 config={"tile_rows": 16, "tile_cols": 1024, "max_blocks": 2}))
    assert record["grid"] == (2, 1, 1)  # capped at max_blocks; a positions tensor: one row per tile
    kv_cache_update_again = ck.kv_cache_update.launch(cache, new, 0)  # the cache was given back
    kv_cache_update_again.cancel()


def test_rope_runs_one_block_per_config_share_of_tokens(fake: FakeDriver) -> None:
    q, k = api.empty([40, 8, 64], dtype="bf16"), api.empty([40, 2, 64], dtype="bf16")
    positions = api.empty([40], dtype="i64")
    record = run(fake, ck.rope.launch(q, k, positions, config={"block_elems": 1024, "occupancy": 2}))
    assert record["grid"] == (20, 1, 1)  # 2 tokens of 8 heads x 64 per block, each block walking its two
    record = run(fake, ck.rope.launch(q, k, positions, inplace=True, config={"block_elems": 512, "occupancy": 1}))
    assert record["grid"] == (40, 1, 1)


def test_rope_of_many_tokens_makes_its_table_of_angles_first(fake: FakeDriver) -> None:
    from cutile_kernels import _rope

    q, k = api.empty([100, 8, 64], dtype="bf16"), api.empty([100, 2, 64], dtype="bf16")
    positions = api.empty([100], dtype="i64")
    pending = ck.rope.launch(q, k, positions, config={"block_elems": 1024, "occupancy": 2})
    register_layout(fake, pending.launch)  # the table's kernel
    rotation = _rope.rope_kernel(q.dtype, positions.dtype, True, False, 2, True)
    table = api.empty([100, 64], dtype="f32")
    made_for_its_layout = rotation(*_rope.partitions(api.empty([100, 8, 64], dtype="bf16"),
                                                     api.empty([100, 2, 64], dtype="bf16"), 50, True),
                                   q, k, table, 0.5, D=64, NEOX=True)
    register_layout(fake, made_for_its_layout)
    made_for_its_layout.cancel()
    before = len(fake.launches)
    pending.run()
    table_launch, rotation_launch = fake.launches[before:]
    assert table_launch["grid"] == (-(-100 // _rope.TABLE_TILE_TOKENS), 1, 1)
    assert rotation_launch["grid"] == (50, 1, 1)  # 2 tokens of 8 heads x 64 per block, as without the table


def test_element_wise_functions_pick_the_flat_or_the_row_form(fake: FakeDriver) -> None:
    gate, up = api.empty([200, 300], dtype="bf16"), api.empty([200, 300], dtype="bf16")
    config = {"block_elems": 4096, "occupancy": 2}
    assert run(fake, ck.silu_mul.launch(gate, up, config=config))["grid"] == (-(-60_000 // 4096), 1, 1)
    bias = api.empty([300], dtype="bf16")
    assert run(fake, ck.add.launch(gate, bias, config=config))["grid"] == (200 // 8, 1, 1)  # 8 x 512 tiles
    fused = api.empty([200, 600], dtype="bf16")
    assert run(fake, ck.silu_mul.launch(fused[:, :300], fused[:, 300:], config=config))["grid"] == (25, 1, 1)


def test_a_small_element_wise_call_spreads_over_blocks_under_the_default_config(fake: FakeDriver) -> None:
    # A decode step's gate and up (one token): the default's 4096-element blocks would
    # make one to three blocks; it is spread over at least MIN_BLOCKS of >= 256 elements.
    fused = api.empty([1, 2 * 9728], dtype="bf16")
    assert run(fake, ck.silu_mul.launch(fused[:, :9728], fused[:, 9728:]))["grid"] == (1, -(-9728 // 1024), 1)
    gate, up = api.empty([1, 3072], dtype="bf16"), api.empty([1, 3072], dtype="bf16")
    assert run(fake, ck.silu_mul.launch(gate, up))["grid"] == (3072 // 256, 1, 1)
    big_gate, big_up = api.empty([200, 300], dtype="bf16"), api.empty([200, 300], dtype="bf16")
    assert run(fake, ck.silu_mul.launch(big_gate, big_up))["grid"] == (-(-60_000 // 4096), 1, 1)  # the default's
    # a config given is the caller's: never changed
    config = {"block_elems": 4096, "occupancy": 2}
    assert run(fake, ck.silu_mul.launch(gate, up, config=config))["grid"] == (1, 1, 1)


def test_embedding_tiles_rows_and_columns(fake: FakeDriver) -> None:
    table, ids = api.empty([100, 2048], dtype="bf16"), api.empty([512], dtype="i32")
    record = run(fake, ck.embedding.launch(ids, table, config={"tile_rows": 8, "tile_cols": 1024, "occupancy": 2}))
    assert record["grid"] == (64, 2, 1)
