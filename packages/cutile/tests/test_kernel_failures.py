"""Kernels that fail at run time on the interpreter say which block failed, where,
and why: a false assert, an index out of bounds, a wrong assume, a race between
blocks through scatter. (Interpreter only: on the GPU a failed assert or a wild
access poisons the context for the rest of the process.)"""


import numpy as np
import pytest

import cutile
import cutile.core as ct
from cutile import api
from cutile import KernelRuntimeError
from cutile.core import Constant, Mut, Tensor, f32, i32, load_tile_like
from located_errors import line_of


@cutile.entry
def asserting(z: Mut[Tensor[f32, ["B"]]], x: Tensor[f32, [-1]]):
    t = load_tile_like(x, z)
    assert t < 10.0, "values must stay below 10"  # <- tile assert
    z.store(t)


def test_a_false_assert_names_the_block_the_line_and_the_element() -> None:
    x = np.zeros(200, np.float32)
    x[150] = 11
    with pytest.raises(KernelRuntimeError) as info:
        asserting(api.zeros([200]).partition([64]), api.from_numpy(x)).sync()
    text = str(info.value)
    assert info.value.location is not None and info.value.location.line == line_of(asserting, "# <- tile assert")
    assert "in block (2, 0, 0): assert failed: values must stay below 10 (element [22] of the condition is false)" in text
    assert text.splitlines()[-1].strip().startswith("^")


@cutile.entry(unsafe=True)
def wild(z: Mut[Tensor[f32, ["B"]]], x: Tensor[f32, [-1]], idx: Tensor[i32, [-1]], KIND: Constant[int]):
    i = load_tile_like(idx, z)
    if KIND == 0:
        z.store(ct.gather(x, i, unchecked=True))  # <- gather
    elif KIND == 1:
        ct.scatter(z, i, load_tile_like(x, z))  # <- scatter
    else:
        ct.atomic_add(z, i, 1.0)  # <- atomic


@pytest.mark.parametrize("kind, what, marker", [(0, "gather of 'x'", "# <- gather"),
                                                (1, "scatter of 'z'", "# <- scatter"),
                                                (2, "atomic update of 'z'", "# <- atomic")])
def test_an_index_out_of_bounds_is_refused(kind: int, what: str, marker: str) -> None:
    idx = np.arange(64, dtype=np.int32)
    idx[5] = 64
    with pytest.raises(KernelRuntimeError) as info:
        wild(api.zeros([64]).partition([64]), api.zeros([64]), api.from_numpy(idx), KIND=kind).sync()
    assert f"in block (0, 0, 0): {what} at index [64] is out of bounds for shape [64] (element [5]" in str(info.value)
    assert info.value.location is not None and info.value.location.line == line_of(wild, marker)


def test_two_blocks_scattering_to_one_element_race() -> None:
    idx = np.arange(128, dtype=np.int32) % 64
    with pytest.raises(KernelRuntimeError, match=r"race: blocks \(0, 0, 0\) and \(1, 0, 0\) both write element \[0\] of 'z'"):
        wild(api.zeros([128]).partition([64]), api.zeros([128]), api.from_numpy(idx), KIND=1).sync()


def test_atomics_of_several_blocks_on_one_element_are_no_race() -> None:
    idx = np.zeros(128, dtype=np.int32)
    z, *_ = wild(api.zeros([128]).partition([64]), api.zeros([128]), api.from_numpy(idx), KIND=2).sync()
    assert z.to_numpy()[0] == 128


@cutile.entry
def assuming(z: Mut[Tensor[i32, ["B"]]], x: Tensor[i32, [-1]]):
    z.store(ct.assume(load_tile_like(x, z), div_by=4))  # <- assume


def test_a_wrong_assume_is_caught() -> None:
    with pytest.raises(KernelRuntimeError, match="assume does not hold: a value is not divisible by 4"):
        assuming(api.zeros([64], dtype=i32).partition([64]), api.from_numpy(np.arange(64, dtype=np.int32))).sync()


@cutile.entry
def chatty(z: Mut[Tensor[i32, ["B"]]]):
    bx, _, _ = ct.get_tile_block_id()
    print("block %d says\nhi", bx)
    z.store(bx)


def test_prints_of_several_blocks_carry_the_block_id(capsys: pytest.CaptureFixture[str]) -> None:
    chatty(api.zeros([4], dtype=i32).partition([2])).sync()
    assert capsys.readouterr().out == ("[block (0, 0, 0)] block 0 says\n[block (0, 0, 0)] hi\n"
                                       "[block (1, 0, 0)] block 1 says\n[block (1, 0, 0)] hi\n")


@cutile.entry
def no_mut():
    print("block %d", ct.bid(0))


def test_a_kernel_without_mut_tensors_needs_an_explicit_grid(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(cutile.LaunchError, match=r"no Mut tensor decides the grid; set it with .grid\(x, y, z\)"):
        no_mut().sync()
    no_mut().grid(2).sync()
    assert capsys.readouterr().out == "[block (0, 0, 0)] block 0\n[block (1, 0, 0)] block 1\n"
