"""Ownership and launch rules (DESIGN section 3), checked before any work."""

from __future__ import annotations

import gc

import numpy as np
import pytest

import cutile
from cutile import api
from cutile.core import Mut, Tensor, f16, f32, load_tile_like

BOTH_BACKENDS = True


@cutile.entry
def add(z: Mut[Tensor[f32, ["B"]]], x: Tensor[f32, [-1]], y: Tensor[f32, [-1]]):
    z.store(load_tile_like(x, z) + load_tile_like(y, z))


@cutile.entry
def copy2d(z: Mut[Tensor[f32, ["BM", "BN"]]], w: Mut[Tensor[f32, ["BM", "BN"]]], x: Tensor[f32, [-1, -1]]):
    t = load_tile_like(x, z)
    z.store(t)
    w.store(t)


def test_partition_consumes_the_tensor() -> None:
    t = api.zeros([256])
    p = t.partition([128])
    with pytest.raises(cutile.OwnershipError, match=r"consumed by partition\(\)"):
        t.to_numpy()
    with pytest.raises(cutile.OwnershipError, match="parameter 'x'.*consumed by partition"):
        add(api.zeros([256]).partition([128]), t, api.ones([256]))
    back = p.unpartition()
    assert back.to_numpy().shape == (256,)
    with pytest.raises(cutile.OwnershipError, match=r"consumed by unpartition\(\)"):
        p.unpartition()


def test_pending_launch_holds_its_tensors() -> None:
    x, y = api.ones([256]), api.ones([256])
    z = api.zeros([256]).partition([128])
    pending = add(z, x, y)
    with pytest.raises(cutile.OwnershipError, match=r"held by the pending launch of add \(parameter 'z'\)"):
        z.to_numpy()
    # Two pending launches may read the same tensor...
    other = add(api.zeros([256]).partition([128]), x, y)
    # ...but not write one that a pending launch holds.
    with pytest.raises(cutile.OwnershipError, match="parameter 'z'.*held by the pending launch of add"):
        add(cutile.Partition(z._tensor, (128,)), x, y)
    z, x, y = pending.sync()
    other.sync()
    np.testing.assert_array_equal(z.to_numpy(), np.full(256, 2, np.float32))
    with pytest.raises(cutile.OwnershipError, match="already run"):
        pending.sync()


def test_dropped_launch_releases_its_tensors() -> None:
    z = api.zeros([256]).partition([128])
    add(z, api.ones([256]), api.ones([256]))  # never run
    gc.collect()
    assert z.to_numpy().shape == (256,)


def test_same_storage_written_and_read_is_refused() -> None:
    z = api.zeros([256]).partition([128])
    with pytest.raises(cutile.LaunchError, match="'z' and 'x' share memory and 'z' is written"):
        add(z, z._tensor, api.ones([256]))


def test_two_writes_to_one_storage_are_refused() -> None:
    t = api.zeros([128, 128])
    z = t.partition([64, 64])
    with pytest.raises(cutile.LaunchError, match="'z' and 'w' share memory"):
        copy2d(z, cutile.Partition(z._tensor, (64, 64)), api.ones([128, 128]))


@pytest.mark.parametrize(
    ("arguments", "error", "message"),
    [
        (lambda: (api.zeros([256]), api.ones([256]), api.ones([256])), cutile.LaunchError,
         r"'z' is Mut\[...\]: pass it partitioned, e.g. z.partition\(\[128\]\)"),
        (lambda: (api.zeros([256]).partition([128]), api.ones([256]).partition([128]), api.ones([256])),
         cutile.LaunchError, "'x' is read-only: pass the tensor, not a partition"),
        (lambda: (api.zeros([256]).partition([128]), api.ones([256], dtype=f16), api.ones([256])),
         cutile.LaunchError, "parameter x expects dtype f32, got f16"),
        (lambda: (api.zeros([256]).partition([128]), api.ones([16, 16]), api.ones([256])),
         cutile.LaunchError, r"parameter x expects rank 1"),
        (lambda: (api.zeros([256]).partition([128]), 3.0, api.ones([256])),
         cutile.LaunchError, "'x' expects a tensor, got float"),
    ],
)
def test_bad_arguments_name_the_parameter(arguments: object, error: type[Exception], message: str) -> None:
    with pytest.raises(error, match=message):
        add(*arguments()).sync()  # type: ignore[operator]


def test_grids_must_agree() -> None:
    z = api.zeros([128, 128]).partition([64, 64])
    w = api.zeros([128, 128]).partition([32, 64])
    with pytest.raises(cutile.LaunchError, match="tile shape"):
        copy2d(z, w, api.ones([128, 128])).sync()
    z2 = api.zeros([128, 256]).partition([64, 64])
    w2 = api.zeros([256, 128]).partition([64, 64])
    with pytest.raises(cutile.LaunchError, match=r"disagree on the grid: 'z' has \[2, 4\] tiles, 'w' \[4, 2\]"):
        copy2d(z2, w2, api.ones([128, 256])).sync()


def test_explicit_grid_must_match_the_partitions() -> None:
    z = api.zeros([256]).partition([128])
    with pytest.raises(cutile.LaunchError, match=r"explicit grid \[3, 1, 1\] disagrees with the grid \[2, 1, 1\]"):
        add(z, api.ones([256]), api.ones([256])).grid(3).sync()


def test_partition_shapes_are_checked() -> None:
    with pytest.raises(ValueError, match="powers of two"):
        api.zeros([100]).partition([100])
    with pytest.raises(ValueError, match="needs 2 tile dims"):
        api.zeros([4, 4]).partition([2])
