"""Misuse of mapped partitions is refused at compile time: each case is a `TileTypeError`
at the line (and with the caret) of the offending index or call, saying which rule it
broke, on both paths: ``cutile.compile(..., arch="sm_90")`` and the interpreter."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

import cutile
from cutile import api
from cutile.core import Constant, Mut, Tensor, bid, f32, load_tile_like, zeros
from cutile_compiler._errors import TileSyntaxError, TileTypeError
from located_errors import line_of, refused_on_both_paths

OWNED = cutile.OWNED




def grids(z_map: list[Any], w_map: list[Any] | None = None, w_shape: list[int] | None = None,
          w_tile: list[int] | None = None) -> Callable[[], list[Any]]:
    """Arguments (z, w, x): z [48, 40] in [16, 8] tiles mapped by ``z_map``, w likewise
    (or as given), x read-only."""
    def make() -> list[Any]:
        z = api.zeros([48, 40]).partition([16, 8]).map(z_map, blocks=3)
        w = api.zeros(w_shape or [48, 40]).partition(w_tile or [16, 8]).map(w_map or z_map, blocks=3)
        return [z, w, api.from_numpy(np.ones((48, 40), np.float32))]
    return make


@cutile.entry
def streamed(z: Mut[Tensor[f32, [16, 8]]], w: Mut[Tensor[f32, [16, 8]]], x: Tensor[f32, [-1, -1]],
             KIND: Constant[int]):
    t = zeros((16, 8), f32)
    for idx in z.tiles():
        bm, bn = idx
        if KIND == 0:
            z.store(t, (bm + 1, bn))  # <- modified
        if KIND == 1:
            z.store(t, (bn, bm))  # <- swapped
        if KIND == 2:
            for other in z.tiles():
                z.store(t, (bm, other[1]))  # <- mixed
        if KIND == 3:
            w.store(t, idx)  # <- foreign
        if KIND == 4:
            z.store(t, (bm, bid(0)))  # <- not minted
        if KIND == 5:
            z.store(t)  # <- no index
        if KIND == 6:
            z.store(z.load(), idx)  # <- own tile
        if KIND == 7:
            z.store(load_tile_like(x, z), idx)  # <- like
        if KIND == 8:
            z.store(t, idx)
            w.store(t, (bm, bn))  # <- foreign components
    if KIND == 9:
        z.store(t, (0, 0))  # <- outside the loop
    if KIND == 10:
        for idx in x.tiles():  # <- read-only
            pass
    if KIND == 11:
        for idx in z.tiles_with(w):  # <- tiles_with
            z.store(t, idx)
            w.store(t, idx)
    if KIND == 12:
        for idx in z.tiles_within(((bid(0), 1), None)):  # <- block-dependent
            z.store(t, idx)
    if KIND == 13:
        for idx in z.tiles_within(((2, 5), None)):  # <- past the grid
            z.store(t, idx)
    if KIND == 14:
        for idx in z.tiles():
            z.store(t, idx)
        for idx in z.tiles_within(((1, 2), None)):
            z.store(t, idx)  # <- two sub-grids
    if KIND == 16:
        for idx in z.tiles_within(((1, 2), None), w):  # <- tiles_within with w
            z.store(t, idx)
            w.store(t, idx)
    if KIND == 15:  # one sub-grid, iterated twice: accepted
        for idx in z.tiles_within(((1, 2), None)):
            z.store(t, idx)
        for idx in z.tiles_within(((1, 2), None)):
            z.store(z.load(idx) + 1.0, idx)


STREAMED_CASES = [
    (0, "modified", "entry 0 of the index is computed from a minted index (arithmetic on it)"),
    (1, "swapped", "entry 0 of the index is coordinate 1 of a minted index; each streamed entry must stay on its own axis"),
    (2, "mixed", "the streamed entries of the index come from different minted indices"),
    (3, "foreign", "w.store: this index was minted by the schedule of 'z', not of 'w'"),
    (4, "not minted", "entry 1 of the index (i32) was not minted by the schedule of 'z'"),
    (5, "no index", "a store into mapped partition 'z' takes an index of its schedule"),
    (6, "own tile", "a load of mapped partition 'z' takes an index of its schedule: z.load(idx)"),
    (7, "like", "'z' is a mapped partition: its blocks own no tile by block id"),
    (8, "foreign components", "w.store: entry 0 of the index comes from the schedule of 'z', not of 'w'"),
    (9, "outside the loop", "(this store is outside every schedule loop of 'z')"),
    (10, "read-only", "tiles(): 'x' is a read-only tensor, not a mapped partition"),
    (12, "block-dependent", "tiles_within(): the start of axis 0 may differ between blocks"),
    (13, "past the grid", "tiles_within(): the range [2, 7) of axis 0 passes the 3 tiles of 'z' in this launch"),
    (14, "two sub-grids", "'z' is accessed at indices of two schedules with different sub-grids"),
]


@pytest.mark.parametrize("kind, marker, message", STREAMED_CASES, ids=[c[1] for c in STREAMED_CASES])
def test_a_store_into_a_mapped_partition_needs_a_minted_index(kind: int, marker: str, message: str) -> None:
    refused_on_both_paths(streamed, grids([2, 1]), f"# <- {marker}", message, KIND=kind)


def test_tiles_with_needs_equal_tile_and_map_shapes_and_grids() -> None:
    refused_on_both_paths(streamed, grids([2, 1], [1, 1]), "# <- tiles_with",
                          "tiles_with(): 'z' has tile [16, 8] and map [2, 1], 'w' tile [16, 8] and map [1, 1]",
                          KIND=11)
    refused_on_both_paths(streamed, grids([2, 1], w_shape=[48, 48]), "# <- tiles_with",
                          "tiles_with(): this launch passes 'z' with a 3x5 tile grid and 'w' with 3x6", KIND=11)


def test_tiles_within_with_partners_needs_equal_tile_and_map_shapes_and_grids() -> None:
    refused_on_both_paths(streamed, grids([2, 1], [1, 1]), "# <- tiles_within with w",
                          "tiles_within(): 'z' has tile [16, 8] and map [2, 1], 'w' tile [16, 8] and map [1, 1]",
                          KIND=16)
    refused_on_both_paths(streamed, grids([2, 1], w_shape=[48, 48]), "# <- tiles_within with w",
                          "tiles_within(): this launch passes 'z' with a 3x5 tile grid and 'w' with 3x6", KIND=16)


def test_tiles_with_of_equal_partitions_runs() -> None:
    z, w, x = grids([2, 1])()
    z, w, _ = streamed(z, w, x, KIND=11).sync()
    assert not z.to_numpy().any() and not w.to_numpy().any()


@cutile.entry
def rows(z: Mut[Tensor[f32, [1, 16]]], w: Mut[Tensor[f32, [1, 16]]], KIND: Constant[int]):
    t = zeros((1, 16), f32)
    for idx in z.tiles():
        r, _ = idx
        if KIND == 0:
            z.store(t, (r, bid(0)))  # <- unproven
        if KIND == 1:
            z.store(t, (r, 7))  # <- constant out of range
        if KIND == 2:
            for c in range(w.num_tiles(1)):
                z.store(t, (r, c))  # <- another tensor's count
        if KIND == 3:
            for c in range(z.num_tiles(1) + 1):
                z.store(t, (r, c))  # <- arithmetic on the count
        if KIND == 4:
            for c in range(z.num_tiles(1)):
                z.store(t, (r, c))
                z.store(t, (r, 2))
                z.store(t, (r, 0))  # (proven: a loop variable, constants below the 3 tiles)
    if KIND == 5:
        for idx in z.tiles_within(((0, 1), (0, 1))):  # <- owned range
            z.store(t, idx)


def owned_rows() -> list[Any]:
    return [api.zeros([5, 40]).partition([1, 16]).map([1, OWNED], blocks=2),
            api.zeros([5, 40]).partition([1, 16]).map([1, OWNED], blocks=2)]


OWNED_CASES = [
    (0, "unproven", "entry 1 of the index is on an owned axis and must be proven in range: the variable of "
                    "`for c in range(z.num_tiles(1)):` or a constant int below the tile count"),
    (1, "constant out of range", "entry 1 of the index (owned axis) is 7, outside the 3 tiles of 'z' along axis 1"),
    (2, "another tensor's count", "is the variable of a loop over w.num_tiles(1), not over z.num_tiles(1)"),
    (3, "arithmetic on the count", "entry 1 of the index is on an owned axis and must be proven in range"),
    (5, "owned range", "tiles_within(): axis 1 of 'z' is OWNED (each item owns it whole); its range must be None"),
]


@pytest.mark.parametrize("kind, marker, message", OWNED_CASES, ids=[c[1] for c in OWNED_CASES])
def test_an_owned_entry_must_be_proven_in_range(kind: int, marker: str, message: str) -> None:
    refused_on_both_paths(rows, owned_rows, f"# <- {marker}", message, KIND=kind)


def test_proven_owned_entries_are_accepted() -> None:
    z, w = owned_rows()
    z, w = rows(z, w, KIND=4).sync()
    assert not z.to_numpy().any()


@cutile.entry
def plain(z: Mut[Tensor[f32, [16]]], KIND: Constant[int]):
    if KIND == 0:
        for idx in z.tiles():  # <- not mapped
            pass
    if KIND == 1:
        z.store(zeros((16,), f32), (bid(0),))  # <- index on a plain partition


@cutile.entry
def leaving(z: Mut[Tensor[f32, [16]]], KIND: Constant[int]):
    for idx in z.tiles():
        if idx[0] > 1:
            if KIND == 0:
                break  # <- break
            continue
        z.store(zeros((16,), f32) + 2.0, idx)


def test_a_schedule_loop_may_skip_items_but_not_leave_early() -> None:
    make = lambda: [api.zeros([64]).partition([16]).map([1], blocks=2)]  # noqa: E731
    for path in ("compile for sm_90", "interpreter"):
        with pytest.raises(TileSyntaxError) as info:
            if path == "interpreter":
                leaving(*make(), KIND=0).sync()
            else:
                cutile.compile(leaving, *make(), arch="sm_90", KIND=0)
        assert "a schedule loop cannot break" in info.value.message
        assert info.value.location is not None and info.value.location.line == line_of(leaving, "# <- break")
    z = leaving(*make(), KIND=1).sync()
    np.testing.assert_array_equal(z.to_numpy(), np.repeat([2.0, 2.0, 0.0, 0.0], 16))


def test_a_partition_that_is_not_mapped_has_no_schedule() -> None:
    make = lambda: [api.zeros([40]).partition([16])]  # noqa: E731
    refused_on_both_paths(plain, make, "# <- not mapped", "tiles(): 'z' is a Mut tensor partitioned one tile per "
                          "block, not a mapped partition", KIND=0)
    refused_on_both_paths(plain, make, "# <- index on a plain partition", "z.store(tile, index): only a mapped "
                          "partition is stored at an index in a safe kernel", KIND=1)


def test_one_sub_grid_may_be_iterated_twice() -> None:
    z, w, x = grids([2, 1])()
    z, _, _ = streamed(z, w, x, KIND=15).sync()
    expected = np.zeros((48, 40), np.float32)
    expected[16:48] = 1.0
    np.testing.assert_array_equal(z.to_numpy(), expected)


@cutile.entry
def reading(z: Mut[Tensor[f32, [16]]], v: Mut[Tensor[f32, [16]]]):
    for idx in z.tiles():
        z.store(zeros((16,), f32), idx)
    v.store(load_tile_like(z, v))  # <- read by block id


def test_a_mapped_partition_is_not_read_by_block_id() -> None:
    # v's tile b and z's tile b: block b would read a tile the schedule gives another block
    make = lambda: [api.zeros([48]).partition([16]).map([1], blocks=3), api.zeros([48]).partition([16])]  # noqa: E731
    refused_on_both_paths(reading, make, "# <- read by block id",
                          "'z' is a mapped partition: its blocks own no tile by block id")
