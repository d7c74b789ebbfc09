"""`cutile.hold`: an op that does no work and holds tensors from the call that makes it,
first in a ``then`` chain whose later launches are made as it runs."""

from __future__ import annotations

import gc

import numpy as np
import pytest

import cutile
from cutile import api
from cutile.core import Mut, Tensor, f32, load_tile_like

BOTH_BACKENDS = True


@cutile.entry
def add(z: Mut[Tensor[f32, ["B"]]], x: Tensor[f32, [-1]], y: Tensor[f32, [-1]]) -> None:
    z.store(load_tile_like(x, z) + load_tile_like(y, z))


def test_a_hold_refuses_conflicts_from_the_call_until_its_chain_runs() -> None:
    x, y, z = api.ones([256]), api.full([256], 2.0), api.zeros([256])
    op = cutile.hold("two_step", reads=[("x", x)], writes=[("z", z)]).then(
        lambda _: add(z[...].partition([128]), x, y))  # (made only as the chain runs)
    with pytest.raises(cutile.OwnershipError, match=r"held by the pending two_step \(parameter 'z'\)"):
        z.to_numpy()
    with pytest.raises(cutile.OwnershipError, match=r"parameter 'z'.*held by the pending two_step"):
        add(z[:].partition([128]), y, y)
    with pytest.raises(cutile.OwnershipError, match=r"held by the pending two_step \(parameter 'x'\)"):
        x.host_view()  # a write to what it reads
    assert x.to_numpy()[0] == 1.0  # reading it is no conflict
    op.sync()  # the later launch joins the chain's job, which holds z: no conflict with itself
    np.testing.assert_array_equal(z.to_numpy(), np.full(256, 3.0, np.float32))
    z.host_view()[...] = 0  # given back once it ran


def test_a_hold_meeting_a_pending_launch_is_refused_by_name_and_takes_nothing() -> None:
    x, y, z = api.ones([256]), api.ones([256]), api.zeros([256])
    pending = add(z[...].partition([128]), x, y)
    with pytest.raises(cutile.OwnershipError, match=r"two_step: parameter 'out'.*held by the pending launch of add"):
        cutile.hold("two_step", writes=[("out", z)])
    with pytest.raises(cutile.OwnershipError, match=r"two_step: parameter 'inp'.*held by the pending launch of add"):
        cutile.hold("two_step", reads=[("inp", z)])
    pending.sync()
    cutile.hold("two_step", reads=[("x", x)], writes=[("z", z)]).sync()  # the refused ones hold nothing


def test_a_dropped_hold_gives_its_tensors_back() -> None:
    z = api.zeros([64])
    op = cutile.hold("dropped", writes=[("z", z)])
    with pytest.raises(cutile.OwnershipError):
        z.host_view()
    del op
    gc.collect()
    z.host_view()[...] = 1.0


def test_a_hold_refuses_a_consumed_tensor_and_a_foreign_one() -> None:
    z = api.zeros([64])
    taken = z.partition([32])
    with pytest.raises(cutile.OwnershipError, match="held_op: parameter 'z': this tensor object was consumed"):
        cutile.hold("held_op", writes=[("z", z)])
    taken.unpartition()
    with pytest.raises(cutile.ArgumentTypeError, match="held_op: parameter 'x' must be a cutile Tensor"):
        cutile.hold("held_op", reads=[("x", np.zeros(4))])  # type: ignore[list-item]


def test_a_hold_refuses_to_write_read_only_memory() -> None:
    if cutile.backend() != "interpreter":
        pytest.skip("a numpy array's memory is imported on the interpreter only")
    frozen = np.zeros(64, np.float32)
    frozen.flags.writeable = False
    readonly = api.from_dlpack(frozen)  # (its memory: read-only)
    with pytest.raises(cutile.LaunchError, match="held_op: parameter 'out' is written but its memory is read-only"):
        cutile.hold("held_op", writes=[("out", readonly)])
    cutile.hold("held_op", reads=[("x", readonly)]).sync()
