"""Ownership and launch rules (DESIGN section 3), checked before any work."""

from __future__ import annotations

import gc

import numpy as np
import pytest

import cutile
from cutile import api
from cutile.core import Mut, Tensor, f16, f32, i32, load_tile_like

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
    assert t.consumed_by is None
    p = t.partition([128])
    assert t.consumed_by == "partition()" and p.consumed_by is None
    with pytest.raises(cutile.OwnershipError, match=r"consumed by partition\(\)"):
        t.to_numpy()
    with pytest.raises(cutile.OwnershipError, match="parameter 'x'.*consumed by partition"):
        add(api.zeros([256]).partition([128]), t, api.ones([256]))
    back = p.unpartition()
    assert p.consumed_by == "unpartition()" and back.to_numpy().shape == (256,)
    with pytest.raises(cutile.OwnershipError, match=r"consumed by unpartition\(\)"):
        p.unpartition()


def test_pending_launch_holds_its_tensors() -> None:
    x, y = api.ones([256]), api.ones([256])
    whole = api.zeros([256])
    other_view = whole[:]                    # a second object over the same memory
    z = whole.partition([128])
    pending = add(z, x, y)
    with pytest.raises(cutile.OwnershipError, match=r"held by the pending launch of add \(parameter 'z'\)"):
        z.to_numpy()
    # Two pending launches may read the same tensor...
    other = add(api.zeros([256]).partition([128]), x, y)
    # ...but not write one that a pending launch holds.
    with pytest.raises(cutile.OwnershipError, match="parameter 'z'.*held by the pending launch of add"):
        add(other_view.partition([128]), x, y)
    z, x, y = pending.sync()
    other.sync()
    np.testing.assert_array_equal(z.to_numpy(), np.full(256, 2, np.float32))
    with pytest.raises(cutile.OwnershipError, match="already run"):
        pending.sync()


def test_dropped_launch_releases_its_tensors() -> None:
    z = api.zeros([256]).partition([128])
    add._warned_never_run = False
    with pytest.warns(cutile.LaunchNeverRunWarning, match="launch of add was never run"):
        add(z, api.ones([256]), api.ones([256]))  # never run
        gc.collect()
    assert z.to_numpy().shape == (256,)


def test_same_storage_written_and_read_is_refused() -> None:
    z = api.zeros([256]).partition([128])
    with pytest.raises(cutile.LaunchError, match="'z' and 'x' share memory and 'z' is written"):
        add(z, z._tensor, api.ones([256]))


def test_two_writes_to_one_storage_are_refused() -> None:
    t = api.zeros([128, 128])
    view = t[:, :]
    z = t.partition([64, 64])
    with pytest.raises(cutile.LaunchError, match="'z' and 'w' share memory"):
        copy2d(z, view.partition([64, 64]), api.ones([128, 128]))


@pytest.mark.parametrize(
    ("arguments", "error", "message"),
    [
        (lambda: (api.zeros([256]), api.ones([256]), api.ones([256])), cutile.LaunchError,
         r"'z' is Mut\[...\]: pass it partitioned, e.g. z.partition\(\[128\]\)"),
        (lambda: (api.zeros([256]).partition([128]), api.ones([256]).partition([128]), api.ones([256])),
         cutile.LaunchError, "'x' is read-only: pass the tensor, not a partition"),
        (lambda: (api.zeros([256]).partition([128]), api.ones([256], dtype=f16), api.ones([256])),
         cutile.LaunchError, "parameter 'x' expects dtype f32, got f16"),
        (lambda: (api.zeros([256]).partition([128]), api.ones([16, 16]), api.ones([256])),
         cutile.LaunchError, r"parameter 'x' expects rank 1"),
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


def test_partitions_come_only_from_tensors() -> None:
    with pytest.raises(TypeError, match=r"made by Tensor.partition"):
        cutile.Partition(api.zeros([8]), (8,))


def test_unpartition_while_a_launch_holds_the_tensor_is_refused() -> None:
    z = api.zeros([256]).partition([128])
    pending = add(z, api.ones([256]), api.ones([256]))
    with pytest.raises(cutile.OwnershipError, match="held by the pending launch of add"):
        z.unpartition()
    pending.sync()
    assert z.unpartition().to_numpy().shape == (256,)


def test_a_launch_run_again_is_checked_again() -> None:
    x = api.ones([256])
    z = api.zeros([256]).partition([128])
    first = add(z, x, x)
    first.sync_on(None)
    t = z.unpartition()
    reader = add(api.zeros([256]).partition([128]), t, x)      # pending: holds t for reading
    with pytest.raises(cutile.OwnershipError, match="held by the pending launch of add"):
        first.sync_on(None)                                     # would write t under the reader
    reader.sync()
    with pytest.raises(cutile.OwnershipError, match="already run"):
        first.sync()


@pytest.mark.interpreter_only
def test_memory_imported_twice_is_one_memory() -> None:
    array = np.zeros(256, np.float32)
    a, b = api.from_dlpack(array), api.from_dlpack(array)
    with pytest.raises(cutile.LaunchError, match="'z' and 'x' share memory"):
        add(a.partition([128]), b, api.ones([256]))


@pytest.mark.interpreter_only
def test_outputs_whose_elements_share_memory_or_are_read_only_are_refused() -> None:
    base = np.zeros(4, np.float32)
    repeated = np.lib.stride_tricks.as_strided(base, (256,), (0,))   # every element is base[0]
    with pytest.raises(cutile.LaunchError, match="make elements share memory"):
        add(api.from_dlpack(repeated).partition([128]), api.ones([256]), api.ones([256]))
    frozen = np.zeros(256, np.float32)
    frozen.flags.writeable = False
    with pytest.raises(cutile.LaunchError, match="its memory is read-only"):
        add(api.from_dlpack(frozen).partition([128]), api.ones([256]), api.ones([256]))


@pytest.mark.interpreter_only
def test_host_views_respect_pending_launches() -> None:
    z = api.zeros([256]).partition([128])
    pending = add(z, api.ones([256]), api.ones([256]))
    with pytest.raises(cutile.OwnershipError):
        z._tensor.host_view()
    pending.sync()


@cutile.entry
def shifted(z: Mut[Tensor[f32, ["B"]]], x: Tensor[f32, [-1]], k: i32, a: f32):
    z.store(load_tile_like(x, z) * a + k.astype(f32))


def test_scalar_arguments_are_checked_and_numpy_scalars_accepted() -> None:
    x = api.ones([128])
    z, _ = shifted(api.zeros([128]).partition([128]), x, np.int32(2), np.float32(0.5)).sync()
    np.testing.assert_array_equal(z.to_numpy(), np.full(128, 2.5, np.float32))
    with pytest.raises(cutile.LaunchError, match="parameter 'k' is a i32 scalar; 1099511627776 does not fit"):
        shifted(api.zeros([128]).partition([128]), x, 2**40, 1.0)
    with pytest.raises(cutile.LaunchError, match="parameter 'k' is a i32 scalar, got 1.5"):
        shifted(api.zeros([128]).partition([128]), x, 1.5, 1.0)


def test_an_empty_launch_does_nothing() -> None:
    z, _, _ = add(api.zeros([0]).partition([128]), api.ones([0]), api.ones([0])).sync()
    assert z.to_numpy().shape == (0,)


def test_launches_on_disjoint_bytes_of_one_tensor_hold_only_their_own_bytes() -> None:
    # One ledger by byte range: the two halves of one tensor are different memory, for
    # pending launches and running ones alike; an overlapping third is refused.
    whole = api.zeros([512])
    x, y = api.ones([256]), api.full([256], 2.0)
    low, high = whole[0:256].partition([128]), whole[256:512].partition([128])
    first = add(low, x, y)  # pending: holds bytes [0, 1024)
    second = add(high, x, y)  # pending too: [1024, 2048) is free
    with pytest.raises(cutile.OwnershipError, match=r"held by the pending launch of add \(parameter 'z'\)"):
        add(whole[128:384].partition([128]), x, y)
    future = first.schedule()  # running now
    with pytest.raises(cutile.OwnershipError, match=r"written by the pending op launch of add \(parameter 'z'\)"):
        add(whole[0:256].partition([128]), x, y)
    second.sync()
    future.result()
    np.testing.assert_array_equal(whole.to_numpy(), np.full(512, 3.0, np.float32))
