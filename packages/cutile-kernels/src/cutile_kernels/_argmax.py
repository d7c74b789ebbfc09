"""``argmax(x, dim=-1)``: the position of each row's maximum, as torch gives it.

Ties go to the lowest index, and a NaN is larger than every number (the first NaN of
a row wins), as ``torch.argmax``. The result is i64 of shape ``x.shape[:-1]``
(``keepdim=True``: with a last dim of 1).

Two stages, so that a few long rows (decode over a 152k vocabulary) still fill the
GPU: the first splits every row into chunks of ``tile_cols * chunk_tiles`` columns,
one block per (row tile, chunk), each writing its chunk's maximum and first position;
the second reduces each row's chunks. Both are safe kernels; the second runs as the
first's continuation (``then``), so ``argmax.launch(...)`` is one op to time. Rows of
one chunk take one launch (a block per row tile writes the result).

The first stage of f16 and bf16 rows does one integer maximum per element and one
reduction per group of tiles (`GROUP_TILES`): each element is an i32 *key*, the
value's 16 bits made a signed rank in the high half (ordered as the values, ``-0.0``
equal to ``0.0``, every NaN above ``+inf``) and ``0xFFFF -`` its column in the group
in the low half, so the largest key is the maximum at its first column. Each thread
keeps the running maximum of its elements' keys over the group's tiles (the tile loop
unrolled), and the group ends in one i32 max reduce. Per element that is about nine
instructions on sm_90 against the twenty of three reductions per tile (the f32 kernel's
way: a bf16 row was bound by that work, not by memory).

The two first stages want different configs, so the tuning record's buckets hold the
element size (`bucket`: ``(rows, cols, itemsize)``), each with its own default
(`DEFAULTS`); a call asks its own dtype's bucket.
"""

# No `from __future__ import annotations`: kernel annotations name the factory's dtypes, which cutile's
# mypy plugin cannot read (it takes literal dtypes such as f32): hence their `type: ignore[misc]`.

import functools
import inspect
from collections.abc import Sequence
from typing import Any

import cutile
from cutile import api, tune
import cutile.core as ct
from cutile.core import Constant, Mut, Tensor, arange, bf16, bid, f16, f32, full, i16, i32, i64, static_range, where

from cutile_kernels import _pointwise as pw
from cutile_kernels._operands import Operand, as_tensor, derived, output

#: chunk_tiles 0: as many tiles per chunk as keep at least `TARGET_BLOCKS` blocks (at most 16); 32 to 128
#: let a long row be one chunk (151936 columns: 2048x128, 4096x64, 4096x128): one launch, a block a row.
#: (tile_rows 4 is left out: with 4096 columns the 16-bit kernel's 16 unrolled tiles took tileiras 28 s
#: to compile.)
SPACE = tune.Space(tile_rows=[1, 2], tile_cols=[512, 1024, 2048, 4096], chunk_tiles=[0, 1, 2, 4, 8, 16, 32, 64, 128],
                   occupancy=[1, 2, 4])
#: the config without a record, by element size: f32 the three-reduction kernel's, f16/bf16 the
#: key kernel's (equal values; each kernel's own to change)
DEFAULTS = {4: {"tile_rows": 1, "tile_cols": 2048, "chunk_tiles": 0, "occupancy": 2},
            2: {"tile_rows": 1, "tile_cols": 2048, "chunk_tiles": 0, "occupancy": 2}}
TARGET_BLOCKS = 1024
MAX_CHUNKS = 4096  # the second stage holds a row's chunks in one tile
#: a 16-bit group's tiles at most (unrolled)
GROUP_TILES = 16
KEY_COLS = 1 << 16  # a 16-bit group's columns at most: a key's low half holds the column
_NO_INDEX = 2**31 - 1
_NAN_RANK = 0x7FFF  # every NaN's rank: above +inf's (0x7F80 in bf16, 0x7C00 in f16)
_NO_KEY = -2**31  # below every element's key


def _tile_max(t: Any, first_col: Any, BN: int) -> tuple[Any, Any]:
    """Each row's (maximum, first position) of t (rows x BN, f32) whose column 0 is at
    ``first_col``; a NaN is the maximum (its value NaN)."""
    cols = (arange(BN, i32) + first_col).reshape((1, BN))
    nan = t != t
    clean = where(nan, -float("inf"), t)
    top = ct.max(clean, axis=1, keepdims=True)
    at_top = ct.min(where(clean == top, cols, _NO_INDEX), axis=1, keepdims=True)
    at_nan = ct.min(where(nan, cols, _NO_INDEX), axis=1, keepdims=True)
    has_nan = at_nan < _NO_INDEX
    return where(has_nan, float("nan"), top), where(has_nan, at_nan, at_top)


def _keys16(t: Any, low: Any) -> Any:
    """Each element of t (rows x BN, f16 or bf16) as its i32 key: its rank in the high
    half, ``low`` (``0xFFFF -`` its column in the group) in the low half."""
    if t.dtype == bf16:
        bits = t.astype(f32).bitcast(i32)  # bf16's bits in the high half (the widening is a shift)
    else:
        bits = t.bitcast(i16).astype(i32) << 16
    negative = bits >> 31  # 0 or -1
    # sign and magnitude to two's complement: a negative value's rank is -magnitude (-0.0 ranks 0)
    key = ((bits & 0x7FFF0000) ^ negative) - negative + low
    return where(t != t, (_NAN_RANK << 16) + low, key)


def _value16(rank: Any, dtype: Any) -> Any:
    """The f32 value of a 16-bit rank (NaN for `_NAN_RANK`)."""
    bits = where(rank < 0, (0 - rank) | 0x8000, rank)
    return bits.astype(i16).bitcast(dtype).astype(f32)


def _better(value: Any, index: Any, best: Any, best_index: Any) -> Any:
    """Whether (value, index) replaces the running (best, best_index): larger, or a NaN
    over a number, or nothing held yet (indices only grow, so ties keep the held)."""
    return (value > best) | ((value != value) & (best == best)) | (best_index == _NO_INDEX)


def _chunk_max(x: Any, row_tile: Any, first_tile: Any, tiles: Any, BM: int, BN: int) -> tuple[Any, Any]:
    """The (maximum, first position) of each row of row tile ``row_tile`` of x over its
    ``tiles`` tiles from ``first_tile``: three reductions per tile."""
    best = full((BM, 1), -float("inf"), f32)
    best_index = full((BM, 1), _NO_INDEX, i32)
    for s in range(tiles):
        tile = first_tile + s
        t = x.load(index=(row_tile, tile), shape=(BM, BN), padding="neg_inf").astype(f32)
        value, index = _tile_max(t, tile * BN, BN)
        take = _better(value, index, best, best_index)
        best = where(take, value, best)
        best_index = where(take, index, best_index)
    return best, best_index


def _chunk_max16(x: Any, row_tile: Any, first_tile: Any, groups: Any, BM: int, BN: int,
                 GROUP: int) -> tuple[Any, Any]:
    """As `_chunk_max` over ``groups`` groups of GROUP tiles of an f16 or bf16 x: one
    i32 maximum per element, one reduction per group."""
    best = full((BM, 1), -float("inf"), f32)
    best_index = full((BM, 1), _NO_INDEX, i32)
    low = 0xFFFF - arange(BN, i32).reshape((1, BN))
    for g in range(groups):
        group_tile = first_tile + g * GROUP
        running = full((BM, BN), _NO_KEY, i32)
        for s in static_range(GROUP):
            t = x.load(index=(row_tile, group_tile + s), shape=(BM, BN), padding="neg_inf")
            running = ct.maximum(running, _keys16(t, low) - s * BN)  # (the column in the group)
        top = ct.max(running, axis=1, keepdims=True)
        value = _value16(top >> 16, x.dtype)
        index = group_tile * BN + (0xFFFF - (top & 0xFFFF))
        take = _better(value, index, best, best_index)
        best = where(take, value, best)
        best_index = where(take, index, best_index)
    return best, best_index


@functools.lru_cache(maxsize=None)
def argmax_kernels(dtype: Any, occupancy: int) -> tuple[Any, Any, Any]:
    """The two stages for one dtype, and the one pass of rows that are one chunk."""
    entry = cutile.entry(hints={"occupancy": occupancy})

    def argmax_chunks(
            values: Mut[Tensor[f32, ["BM", 1]]],
            indices: Mut[Tensor[i32, ["BM", 1]]],
            x: Tensor[dtype, [-1, -1]],  # type: ignore[misc]
            BM: Constant[int],
            BN: Constant[int],
            SUB: Constant[int],
    ) -> None:
        best, best_index = _chunk_max(x, bid(0), bid(1) * SUB, SUB, BM, BN)
        values.store(best)
        indices.store(best_index)

    def argmax_chunks16(
            values: Mut[Tensor[f32, ["BM", 1]]],
            indices: Mut[Tensor[i32, ["BM", 1]]],
            x: Tensor[dtype, [-1, -1]],  # type: ignore[misc]
            BM: Constant[int],
            BN: Constant[int],
            SUB: Constant[int],
            GROUP: Constant[int],
    ) -> None:
        first_tile = bid(1) * SUB
        # the chunk's groups that hold columns of the row (a run-time count: a loop tileiras need not unroll)
        groups = ct.minimum(SUB // GROUP, ct.cdiv(ct.cdiv(x.shape[1], BN) - first_tile, GROUP))
        best, best_index = _chunk_max16(x, bid(0), first_tile, groups, BM, BN, GROUP)
        values.store(best)
        indices.store(best_index)

    def argmax_one_pass(
            out: Mut[Tensor[i64, ["BM"]]],
            x: Tensor[dtype, [-1, -1]],  # type: ignore[misc]
            BM: Constant[int],
            BN: Constant[int],
            GROUP: Constant[int],
    ) -> None:
        if x.dtype in (f16, bf16):
            _, best_index = _chunk_max16(x, bid(0), 0, ct.cdiv(x.shape[1], GROUP * BN), BM, BN, GROUP)
        else:
            _, best_index = _chunk_max(x, bid(0), 0, ct.cdiv(x.shape[1], BN), BM, BN)
        out.store(best_index.reshape((BM,)).astype(i64))

    def argmax_rows(
            out: Mut[Tensor[i64, ["BM"]]],
            values: Tensor[f32, [-1, -1]],
            indices: Tensor[i32, [-1, -1]],
            BM: Constant[int],
            CP: Constant[int],
    ) -> None:
        v = values.load(index=(bid(0), 0), shape=(BM, CP), padding="neg_inf")
        i = indices.load(index=(bid(0), 0), shape=(BM, CP))
        real = arange(CP, i32).reshape((1, CP)) < values.shape[1]
        nan = (v != v) & real
        clean = where(nan | ~real, -float("inf"), v)
        top = ct.max(clean, axis=1, keepdims=True)
        at_top = ct.min(where((clean == top) & real, i, _NO_INDEX), axis=1)
        at_nan = ct.min(where(nan, i, _NO_INDEX), axis=1)
        out.store(where(at_nan < _NO_INDEX, at_nan, at_top).astype(i64))

    chunks = argmax_chunks16 if is_16_bit(dtype) else argmax_chunks
    return entry(chunks), entry(argmax_rows), entry(argmax_one_pass)


def is_16_bit(dtype: Any) -> bool:
    """Whether dtype's first stage is the key kernel (f16, bf16)."""
    return str(dtype) in ("f16", "bf16")


def plan(config: dict[str, Any], rows: int, cols: int, keys: bool) -> tuple[int, int, int, int, int]:
    """(tile rows, tile cols, tiles per chunk, tiles per group of the 16-bit kernel,
    chunks) for a (rows, cols) input; ``keys``: the 16-bit kernel's (its chunks hold
    whole groups), else f32's (a group of one tile)."""
    bm = min(int(config["tile_rows"]), pw.next_pow2(rows))
    bn = min(int(config["tile_cols"]), pw.next_pow2(cols))
    group = max(1, min(GROUP_TILES, KEY_COLS // bn)) if keys else 1
    tiles = -(-cols // bn)
    sub = int(config["chunk_tiles"])
    if sub == 0:  # the most tiles per chunk that still gives TARGET_BLOCKS blocks, at most 16
        row_tiles = -(-rows // bm)
        sub = 16
        while sub > 1 and row_tiles * -(-tiles // sub) < TARGET_BLOCKS:
            sub //= 2
    sub = max(min(sub, tiles), -(-tiles // MAX_CHUNKS))
    if sub > group:  # whole groups
        sub = -(-sub // group) * group
    return bm, bn, sub, min(sub, group), -(-tiles // sub)


def bucket(shape: Sequence[int]) -> str:
    """A (rows, cols, itemsize) shape's bucket, ``"8192x262144x16bit"``: f32 and 16-bit
    rows run different kernels, so each element size has its own winners."""
    rows, cols, itemsize = shape
    return f"{pw.next_pow2(rows)}x{pw.next_pow2(cols)}x{8 * itemsize}bit"


def _setup(config: dict[str, Any], shape: tuple[int, ...]) -> Any:
    """A search's runner for one (rows, cols, itemsize) shape: f32 rows for itemsize 4,
    else bf16."""
    rows, cols, itemsize = shape
    x = api.randn([rows, cols], "f32" if itemsize == 4 else "bf16", seed=1)
    return lambda: argmax.launch(x, config=config).op


_SOURCE = "".join(inspect.getsource(f) for f in (argmax_kernels, _chunk_max, _chunk_max16, _tile_max, _keys16,
                                                 _value16, _better, plan))
#: by element size, each with its default; one record and cache (one name) holding the buckets
#: of both (`bucket`): ``TUNERS[4].make_record`` searches f16/bf16 shapes too (their setup's dtype)
TUNERS = {itemsize: pw.tuner("argmax", SPACE, default, _setup, _SOURCE, bucket=bucket)
          for itemsize, default in DEFAULTS.items()}
TUNER = TUNERS[4]  # (the record's maker: bench_pointwise.py --record)


def _argmax_launch(x: Any, dim: int = -1, keepdim: bool = False, *, out: Any = None,
                   config: dict[str, Any] | None = None) -> pw.Pending:
    """The position (i64) of the maximum of each row of x along its last dim.

    Args:
        x: f16, bf16 or f32, at least 1-D (rank 2 with any strides, else contiguous).
        dim: the last dim only (-1 or ``x.ndim - 1``).
        keepdim: keep the reduced dim (size 1), as torch.
        out: an i64 array of the result's shape to write.
        config: a config of `SPACE` (default: the record's winner for this shape and element
            size, else `DEFAULTS`).
    """
    fn = "argmax"
    xa = as_tensor(x, fn, "x")
    pw.check_dtype(xa, pw.FLOAT_DTYPES, fn, "x")
    shape = xa.shape
    rows, cols = pw.rows_over_last_dim(xa, dim, fn)
    if cols == 0 or rows == 0:
        raise cutile.ArgumentError(f"{fn}(): parameter 'x' of shape {list(shape)} is empty")
    if cols >= _NO_INDEX:
        raise cutile.ArgumentError(f"{fn}(): rows of {cols} elements are longer than 2**31 - 2")
    result_shape = (*shape[:-1], 1) if keepdim else shape[:-1]
    result = output(out, result_shape, "i64", xa, fn)
    keys = is_16_bit(xa.tensor.dtype)
    itemsize = 2 if keys else 4
    if config is not None:
        chosen = pw.config_of(fn, config, SPACE, DEFAULTS[itemsize])
    else:
        chosen = TUNERS[itemsize].config((rows, cols, itemsize))
    bm, bn, sub, group, chunks = plan(chosen, rows, cols, keys)
    if keys and bn > KEY_COLS:
        raise cutile.ArgumentError(f"{fn}(): config['tile_cols'] of {bn} is more than the {KEY_COLS} columns a tile of "
                                   f"{xa.tensor.dtype} rows may have")
    x2 = pw.reshaped(xa, (rows, cols), fn, "x")
    chunk_kernel, row_kernel, one_pass = argmax_kernels(xa.tensor.dtype, int(chosen["occupancy"]))
    flat_out = pw.reshaped(Operand.of(result.tensor), (rows,), fn, "out")
    if chunks == 1:  # rows of one chunk: one launch, no partials
        return pw.Pending(one_pass(flat_out.partition([bm]), x2, BN=bn, GROUP=group), result.result)
    # The partials per out (made once: a warmed-up call with out= allocates nothing, so it
    # can be captured in a CUDA graph; out's hold keeps two pending calls from sharing them).
    values, indices = derived(result.tensor, ("partials", rows, chunks), lambda: (
        api.empty([rows, chunks], dtype="f32"), api.empty([rows, chunks], dtype="i32")))
    rows_tile = min(pw.next_pow2(rows), max(1, 4096 // pw.next_pow2(chunks)))
    groups = {"GROUP": group} if keys else {}
    first = chunk_kernel(values.permute(0, 1).partition([bm, 1]), indices.permute(0, 1).partition([bm, 1]), x2,
                         BN=bn, SUB=sub, **groups)
    return pw.Pending(first, result.result, then=lambda _: row_kernel(flat_out.partition([rows_tile]), values,
                                                                     indices, CP=pw.next_pow2(chunks)))


argmax = pw.library_function(_argmax_launch)
