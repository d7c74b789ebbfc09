"""Safe reads anywhere: element-offset loads (``x.load(at=..., shape=...)``) and
bounds-checked gathers of read-only tensors in safe kernels, against numpy, on odd
shapes with negative and past-the-end offsets and several dtypes; on the
interpreter here and on the GPU where one is. Reads of Mut tensors at other places
stay refused in safe kernels, and ``unchecked=True`` needs ``unsafe=True``."""

from typing import Any

import numpy as np
import pytest

import cutile
import cutile.core as ct
from cutile import api
from cutile.core import Constant, Mut, Tensor, bf16, f16, f32, i32, i64, u8
from cutile_compiler import TileTypeError
from compiler_suite import load_suite
from located_errors import line_of

BOTH_BACKENDS = True
RNG = np.random.default_rng(19)
#: dtype -> the numpy dtype its values are made in (small integers: exact in every one)
DTYPES = {f32: np.float32, f16: np.float16, bf16: np.float32, i32: np.int32}
PADDINGS = {"zero": 0.0, "neg_zero": -0.0, "nan": np.nan, "pos_inf": np.inf, "neg_inf": -np.inf}


SUITE = load_suite()
STENCIL_1D = {d: cutile.entry(SUITE.stencil_1d_kernel(d)) for d in DTYPES}
STENCIL_2D = {d: cutile.entry(SUITE.stencil_2d_kernel(d)) for d in DTYPES}
EMBEDDING = {d: cutile.entry(SUITE.embedding_kernel(d)) for d in (f32, f16, bf16)}


def small_ints(*shape: int) -> np.ndarray:
    return RNG.integers(-8, 9, shape).astype(np.float64)


def tensor_of(values: np.ndarray, dtype: Any) -> Any:
    return api.from_numpy(values.astype(DTYPES[dtype]), dtype)


def result(tensor: Any) -> np.ndarray:
    return np.asarray(tensor.to_numpy()).astype(np.float64)


# -- the stencils and the lookup of the suite --------------------------------------------------
@pytest.mark.parametrize("dtype", list(DTYPES))
@pytest.mark.parametrize("n, block", [(997, 128), (5, 8), (256, 64)])
def test_the_1d_stencil_pads_both_edges(dtype: Any, n: int, block: int) -> None:
    x = small_ints(n)
    y = api.full([n], 99, dtype=dtype).partition([block])
    y, _ = STENCIL_1D[dtype](y, tensor_of(x, dtype)).sync()
    p = np.pad(x, 2)
    expected = p[:-4] + p[4:] - 4 * (p[1:-3] + p[3:-1]) + 6 * p[2:-2]
    np.testing.assert_array_equal(result(y), expected)


@pytest.mark.parametrize("dtype", list(DTYPES))
@pytest.mark.parametrize("shape, tile", [((77, 135), (32, 64)), ((3, 5), (4, 8)), ((64, 128), (16, 32))])
def test_the_2d_five_point_stencil_pads_every_edge(dtype: Any, shape: tuple[int, int], tile: tuple[int, int]) -> None:
    x = small_ints(*shape)
    y = api.full(list(shape), 99, dtype=dtype).partition(list(tile))
    y, _ = STENCIL_2D[dtype](y, tensor_of(x, dtype)).sync()
    p = np.pad(x, 1)
    expected = 4 * x - p[:-2, 1:-1] - p[2:, 1:-1] - p[1:-1, :-2] - p[1:-1, 2:]
    np.testing.assert_array_equal(result(y), expected)


@pytest.mark.parametrize("dtype", [f32, f16, bf16])
def test_the_embedding_lookup_reads_zeros_for_ids_outside_the_table(dtype: Any) -> None:
    vocab, width, count = 1001, 200, 37
    table = RNG.standard_normal((vocab, width)).astype(np.float32)
    ids = RNG.integers(0, vocab, count).astype(np.int32)
    ids[[0, 5, 36]] = [-1, vocab, -2**31]  # outside the table: rows of zeros
    ids[7] = vocab - 1
    out = api.full([count, width], np.nan, dtype=dtype).partition([16, 128])
    out, _, _ = EMBEDDING[dtype](out, api.from_numpy(table, dtype), api.from_numpy(ids)).sync()
    stored = np.asarray(api.from_numpy(table, dtype).to_numpy()).astype(np.float64)
    inside = (ids >= 0) & (ids < vocab)
    expected = np.where(inside[:, None], stored[np.clip(ids, 0, vocab - 1)], 0.0)
    np.testing.assert_array_equal(result(out), expected)


# -- element-offset loads at run-time offsets ------------------------------------------------------
def shifted_kernel(pad: str) -> Any:
    def shifted(z: Mut[Tensor[f32, ["B"]]], x: Tensor[f32, [-1]], d: i32, B: Constant[int]):
        z.store(x.load(at=(ct.bid(0) * B + d,), shape=(B,), padding=pad))
    return cutile.entry(shifted)


SHIFTED = {pad: shifted_kernel(pad) for pad in PADDINGS}


@pytest.mark.parametrize("pad", list(PADDINGS))
@pytest.mark.parametrize("d", [-5000, -129, -1, 0, 1, 3, 996, 997, 5000])
def test_a_load_at_an_element_offset_pads_outside_the_tensor(d: int, pad: str) -> None:
    n = 997
    x = RNG.standard_normal(n).astype(np.float32)
    z = api.full([n], 7.0).partition([128])
    z, _ = SHIFTED[pad](z, api.from_numpy(x), d).sync()
    at = np.arange(n) + d
    inside = (at >= 0) & (at < n)
    expected = np.where(inside, x[np.clip(at, 0, n - 1)], PADDINGS[pad])
    np.testing.assert_array_equal(z.to_numpy(), expected.astype(np.float32))


def shifted_by_kernel(dtype: Any, pad: str) -> Any:
    # an offset known at compile time: off a 16-byte boundary, two aligned tiles spliced on the GPU
    def shifted_by(z: Mut[Tensor[dtype, ["B"]]], x: Tensor[dtype, [-1]], D: Constant[int], B: Constant[int]):
        z.store(x.load(at=(ct.bid(0) * B + D,), shape=(B,), padding=pad))
    return cutile.entry(shifted_by)


SHIFTED_BY = {(dtype, pad): shifted_by_kernel(dtype, pad) for dtype, pad in
              ((f32, "nan"), (f16, "neg_inf"), (bf16, "pos_inf"), (i32, "zero"))}


@pytest.mark.parametrize("dtype, pad", list(SHIFTED_BY))
@pytest.mark.parametrize("d", [-3001, -1030, -5, -1, 1, 3, 7, 1021, 1999, 2003])
def test_a_load_at_a_constant_element_offset_pads_outside_the_tensor(dtype: Any, pad: str, d: int) -> None:
    n = 2000
    x = small_ints(n)
    z = api.full([n], 7, dtype=dtype).partition([1024])
    z, _ = SHIFTED_BY[(dtype, pad)](z, tensor_of(x, dtype), D=d).sync()
    at = np.arange(n) + d
    expected = np.where((at >= 0) & (at < n), x[np.clip(at, 0, n - 1)], PADDINGS[pad] if dtype is not i32 else 0)
    np.testing.assert_array_equal(result(z), expected)


@cutile.entry
def window(z: Mut[Tensor[i32, ["BM", "BN"]]], x: Tensor[i32, [-1, -1]], di: i64, dj: i32, BM: Constant[int],
           BN: Constant[int]):
    z.store(x.load(at=(ct.bid(0) * BM + di, ct.bid(1) * BN + dj), shape=(BM, BN), latency=3, allow_tma=True))


@pytest.mark.parametrize("di, dj", [(-1, 0), (0, -1), (2, 3), (-40, 65), (50, -70), (-3, -200), (100, 100)])
def test_a_2d_window_at_offsets_of_mixed_dtypes(di: int, dj: int) -> None:
    x = RNG.integers(-1000, 1000, (45, 67)).astype(np.int32)
    z = api.full([45, 67], -7, dtype=i32).partition([16, 32])
    z, _ = window(z, api.from_numpy(x), di, dj).sync()
    rows, cols = np.arange(45)[:, None] + di, np.arange(67)[None, :] + dj
    inside = (rows >= 0) & (rows < 45) & (cols >= 0) & (cols < 67)
    expected = np.where(inside, x[np.clip(rows, 0, 44), np.clip(cols, 0, 66)], 0)  # integers pad with 0
    np.testing.assert_array_equal(z.to_numpy(), expected)


@cutile.entry
def tile_steps(z: Mut[Tensor[f32, ["B"]]], x: Tensor[f32, [-1]], STEP: Constant[int], B: Constant[int]):
    # (bid + STEP) * B is a multiple of B: tile-aligned, wholly outside or inside
    z.store(x.load(at=((ct.bid(0) + STEP) * B,), shape=(B,), padding="neg_inf"))


@pytest.mark.parametrize("step", [-2, -1, 0, 1, 3])
def test_a_tile_aligned_offset_reads_whole_tiles_or_padding(step: int) -> None:
    x = RNG.standard_normal(200).astype(np.float32)
    z = api.full([200], 7.0).partition([64])
    z, _ = tile_steps(z, api.from_numpy(x), STEP=step).sync()
    at = np.arange(256)[:200] + step * 64
    expected = np.where((at >= 0) & (at < 200), x[np.clip(at, 0, 199)], -np.inf).astype(np.float32)
    np.testing.assert_array_equal(z.to_numpy(), expected)


@cutile.entry
def constant_offsets(z: Mut[Tensor[f32, [64]]], x: Tensor[f32, [100]]):
    z.store(x.load(at=(-3,), shape=(64,)) + x.load(at=40, shape=64) + x.load(at=(64,), shape=(64,)))


def test_constant_offsets_of_a_static_tensor_need_no_branch() -> None:
    x = RNG.standard_normal(100).astype(np.float32)
    z, _ = constant_offsets(api.zeros([64]).partition([64]), api.from_numpy(x)).sync()
    p = np.concatenate([np.zeros(3), x, np.zeros(64)])
    np.testing.assert_allclose(z.to_numpy(), p[0:64] + p[43:107] + p[67:131], rtol=1e-6, atol=1e-6)  # f32 sums
    mlir = cutile.compile(constant_offsets, api.meta([64]).partition([64]), api.meta([100]), arch="sm_90").mlir
    # at -3: over the low edge (a masked pointer load; 64 f32 are too few to splice,
    # under 4 per thread); at 40 inside (a strided view stepping 8 elements, the largest
    # power of two dividing 40); at 64 a multiple of the tile, inside (a partition
    # view); no run-time branch
    assert " if " not in mlir and mlir.count("load_ptr_tko") == 1 and " cat " not in mlir
    assert "traversal_strides=[8]" in mlir and "load_view_tko weak %pview" in mlir


def test_loads_at_offsets_compile_for_sm_90_and_sm_100() -> None:
    for arch in ("sm_90", "sm_100"):
        compiled = cutile.compile(window, api.meta([45, 67], dtype=i32).partition([16, 32]),
                                  api.meta([45, 67], dtype=i32), 1, 1, arch=arch)
        assert compiled.cubin[:4] == b"\x7fELF"
        assert "make_strided_view" in compiled.mlir and "load_ptr_tko" in compiled.mlir


# -- bounds-checked gathers ---------------------------------------------------------------------
@cutile.entry
def gathered(z: Mut[Tensor[f32, ["B"]]], x: Tensor[f32, [-1, -1]], rows: Tensor[i64, [-1]], cols: Tensor[u8, [-1]],
             B: Constant[int]):
    r = rows.load(index=(ct.bid(0),), shape=(B,))
    c = cols.load(index=(ct.bid(0),), shape=(B,))
    keep = (ct.arange(B, i32) % 3) != 0
    z.store(ct.gather(x, (r, c), mask=keep, padding=-1.5))


def test_a_gather_reads_padding_outside_the_tensor_and_where_the_mask_is_off() -> None:
    x = RNG.standard_normal((30, 20)).astype(np.float32)
    rows = RNG.integers(-40, 70, 100).astype(np.int64)
    rows[:4] = [-2**62, 2**62, 29, 30]
    cols = RNG.integers(0, 30, 100).astype(np.uint8)
    z = api.full([100], np.nan).partition([32])
    z, _, _, _ = gathered(z, api.from_numpy(x), api.from_numpy(rows), api.from_numpy(cols)).sync()
    inside = (rows >= 0) & (rows < 30) & (cols < 20)
    keep = (np.arange(128)[:100] % 32) % 3 != 0
    expected = np.where(inside & keep, x[np.clip(rows, 0, 29), np.clip(cols, 0, 19)], -1.5)
    np.testing.assert_array_equal(z.to_numpy(), expected.astype(np.float32))


@cutile.entry
def table_copy(out: Mut[Tensor[f32, ["BM", "BN"]]], src: Tensor[f32, [-1, -1]]):
    out.store(ct.load_tile_like(src, out))


@cutile.entry(unsafe=True)
def lookup(out: Mut[Tensor[f32, ["BM", "BN"]]], table: Tensor[f32, [-1, -1]], ids: Tensor[i32, [-1]],
           UNCHECKED: Constant[bool], BM: Constant[int], BN: Constant[int]):
    rows = ids.load(index=(ct.bid(0),), shape=(BM,)).reshape((BM, 1))
    cols = ct.arange(BN, i32).reshape((1, BN))
    out.store(ct.gather(table, (rows, cols), unchecked=UNCHECKED))  # <- lookup


@pytest.mark.interpreter_only
def test_checked_mode_a_bounds_checked_gather_never_reads_outside(monkeypatch: pytest.MonkeyPatch) -> None:
    # The table is rows 3..12 of a buffer whose other rows nothing ever wrote: checked
    # mode fails any read of those, and any unmasked index outside the table fails the
    # interpreter's bounds check. The bounds mask, computed by the kernel's own ops as
    # the GPU computes it, must therefore exclude every index outside the table.
    monkeypatch.setenv("CUTILE_CHECKED", "1")
    values = RNG.standard_normal((10, 16)).astype(np.float32)
    buffer = api.empty([16, 16])
    filled, _ = table_copy(buffer[3:13].partition([16, 16]), api.from_numpy(values)).sync()
    table = filled.unpartition()
    ids = np.array([-3, -1, 0, 9, 10, 12, 13, 5], np.int32)
    out = api.empty([8, 16]).partition([8, 16])
    out, _, _ = lookup(out, table, api.from_numpy(ids), UNCHECKED=False).sync()
    inside = (ids >= 0) & (ids < 10)
    np.testing.assert_array_equal(out.to_numpy(), np.where(inside[:, None], values[np.clip(ids, 0, 9)], 0.0))
    # the same read without the check reaches outside the table, which checked mode reports
    with pytest.raises(cutile.KernelRuntimeError) as info:
        lookup(api.empty([8, 16]).partition([8, 16]), table, api.from_numpy(ids), UNCHECKED=True).sync()
    assert "gather of 'table' at index [-3, 0] is out of bounds for shape [10, 16]" in str(info.value)
    assert info.value.location is not None and info.value.location.line == line_of(lookup, "# <- lookup")


# -- what stays refused -------------------------------------------------------------------------
@cutile.entry
def refused(z: Mut[Tensor[f32, ["B"]]], x: Tensor[f32, [-1]], KIND: Constant[int]):
    i = ct.arange(64, i32)
    if KIND == 0:
        z.store(z.load(at=(ct.bid(0) * 64 + 1,), shape=(64,)))  # <- mut load_at
    elif KIND == 1:
        z.store(ct.gather(z, i))  # <- mut gather
    elif KIND == 2:
        z.store(ct.gather(x, i, unchecked=True))  # <- unchecked
    elif KIND == 3:
        ct.scatter(z, i, 1.0)  # <- scatter
    elif KIND == 4:
        ct.atomic_add(z, i, 1.0)  # <- atomic
    elif KIND == 5:
        z.store(x.load(at=(0,), index=(0,), shape=(64,)))  # <- both
    elif KIND == 6:
        z.store(x.load(at=(0,)))  # <- no shape
    elif KIND == 7:
        z.store(x.load(at=(0, 1), shape=(64,)))  # <- two coordinates
    else:
        z.store(x.load(at=(ct.bid(0).astype(f32),), shape=(64,)))  # <- float coordinate


@pytest.mark.interpreter_only
@pytest.mark.parametrize("kind, marker, message", [
    (0, "# <- mut load_at", "load(at=...) of a Mut tensor in a safe kernel: the blocks write mut tensor<?xf32, tile "
                           "[64]> tile by tile, and a tile at other element coordinates overlaps other blocks' tiles"),
    (1, "# <- mut gather", "gather of a Mut tensor in a safe kernel: the blocks write mut tensor<?xf32, tile [64]> "
                           "tile by tile, and reading it at computed indices would read other blocks' tiles"),
    (2, "# <- unchecked", "gather(..., unchecked=True) reads without a bounds check, which only "
                          "@cutile.entry(unsafe=True) kernels may do"),
    (3, "# <- scatter", "scatter at arbitrary indices needs @cutile.entry(unsafe=True)"),
    (4, "# <- atomic", "atomic_add at arbitrary indices needs @cutile.entry(unsafe=True)"),
    (5, "# <- both", "load() takes either index= (tile coordinates) or at= (element coordinates), not both"),
    (6, "# <- no shape", "load(at=...) needs shape="),
    (7, "# <- two coordinates", "load: at= needs 1 element coordinate(s), got 2"),
    (8, "# <- float coordinate", "load: at= coordinate 0 must be an integer scalar, got f32"),
])
def test_reads_that_could_race_or_escape_are_refused_at_their_line(kind: int, marker: str, message: str) -> None:
    for path in ("compile for sm_90", "interpreter"):
        args = [api.zeros([128]).partition([64]), api.zeros([128])]
        with pytest.raises(TileTypeError) as info:
            if path == "interpreter":
                refused(*args, KIND=kind).sync()
            else:
                cutile.compile(refused, *args, KIND=kind, arch="sm_90")
        error = info.value
        assert message in error.message, (path, error.message)
        assert error.location is not None and error.location.line == line_of(refused, marker), (path, str(error))
        assert str(error).splitlines()[-1].strip().startswith("^"), (path, str(error))


@cutile.entry(unsafe=True)
def reads_its_neighbour(z: Mut[Tensor[f32, ["B"]]], x: Tensor[f32, [-1]]):
    z.store(x.load(at=(ct.bid(0) * 64,), shape=(64,)))
    z.store(z.load(at=(ct.bid(0) * 64 + 64,), shape=(64,)))  # <- neighbour


@pytest.mark.interpreter_only
def test_in_an_unsafe_kernel_a_mut_tensor_read_at_an_offset_is_race_checked() -> None:
    with pytest.raises(cutile.KernelRuntimeError) as info:
        reads_its_neighbour(api.zeros([256]).partition([64]), api.zeros([256])).sync()
    assert "race: block (0, 0, 0) reads element [64] of 'z' and block (1, 0, 0) writes it" in str(info.value)
