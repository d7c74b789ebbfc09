"""``argmax(x, dim=-1)``: the position of each row's maximum, as torch gives it.

Ties go to the lowest index, and a NaN is larger than every number (the first NaN of
a row wins), as ``torch.argmax``. The result is i64 of shape ``x.shape[:-1]``
(``keepdim=True``: with a last dim of 1).

Two stages, so that a few long rows (decode over a 152k vocabulary) still fill the
GPU: the first splits every row into chunks of ``tile_cols * chunk_tiles`` columns,
one block per (row tile, chunk), each writing its chunk's maximum and first position;
the second reduces each row's chunks. Both are safe kernels; the second runs as the
first's continuation (``then``), so ``argmax.launch(...)`` is one op to time.
"""

# No `from __future__ import annotations`: kernel annotations name the factory's dtypes, which cutile's
# mypy plugin cannot read (it takes literal dtypes such as f32): hence their `type: ignore[misc]`.

import functools
import inspect
from typing import Any

import cutile
from cutile import api, tune
import cutile.core as ct
from cutile.core import Constant, Mut, Tensor, arange, bid, f32, full, i32, i64, where

from cutile_kernels import _pointwise as pw
from cutile_kernels._operands import Operand, as_tensor, derived, output

#: chunk_tiles 0: as many tiles per chunk as keep at least `TARGET_BLOCKS` blocks
SPACE = tune.Space(tile_rows=[1, 2, 4], tile_cols=[512, 1024, 2048, 4096], chunk_tiles=[0, 1, 2, 4, 8, 16],
                   occupancy=[1, 2, 4])
DEFAULT = {"tile_rows": 1, "tile_cols": 2048, "chunk_tiles": 0, "occupancy": 2}
TARGET_BLOCKS = 1024
MAX_CHUNKS = 4096  # the second stage holds a row's chunks in one tile
_NO_INDEX = 2**31 - 1


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


def _better(value: Any, index: Any, best: Any, best_index: Any) -> Any:
    """Whether (value, index) replaces the running (best, best_index): larger, or a NaN
    over a number, or nothing held yet (indices only grow, so ties keep the held)."""
    return (value > best) | ((value != value) & (best == best)) | (best_index == _NO_INDEX)


@functools.lru_cache(maxsize=None)
def argmax_kernels(dtype: Any, occupancy: int) -> tuple[Any, Any]:
    """The two stages for one dtype."""
    tile_max, better = cutile.function(_tile_max), cutile.function(_better)
    entry = cutile.entry(hints={"occupancy": occupancy})

    def argmax_chunks(
            values: Mut[Tensor[f32, ["BM", 1]]],
            indices: Mut[Tensor[i32, ["BM", 1]]],
            x: Tensor[dtype, [-1, -1]],  # type: ignore[misc]
            BM: Constant[int],
            BN: Constant[int],
            SUB: Constant[int],
    ) -> None:
        best = full((BM, 1), -float("inf"), f32)
        best_index = full((BM, 1), _NO_INDEX, i32)
        for s in range(SUB):
            tile = bid(1) * SUB + s
            t = x.load(index=(bid(0), tile), shape=(BM, BN), padding="neg_inf").astype(f32)
            value, index = tile_max(t, tile * BN, BN)
            take = better(value, index, best, best_index)
            best = where(take, value, best)
            best_index = where(take, index, best_index)
        values.store(best)
        indices.store(best_index)

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

    return entry(argmax_chunks), entry(argmax_rows)


def plan(config: dict[str, Any], rows: int, cols: int) -> tuple[int, int, int, int]:
    """(tile rows, tile cols, tiles per chunk, chunks) for a (rows, cols) input."""
    bm = min(int(config["tile_rows"]), pw.next_pow2(rows))
    bn = min(int(config["tile_cols"]), pw.next_pow2(cols))
    tiles = -(-cols // bn)
    sub = int(config["chunk_tiles"])
    if sub == 0:  # the most tiles per chunk that still gives TARGET_BLOCKS blocks, at most 16
        row_tiles = -(-rows // bm)
        sub = 16
        while sub > 1 and row_tiles * -(-tiles // sub) < TARGET_BLOCKS:
            sub //= 2
    sub = max(min(sub, tiles), -(-tiles // MAX_CHUNKS))
    return bm, bn, sub, -(-tiles // sub)


def _setup(config: dict[str, Any], shape: tuple[int, ...]) -> Any:
    """A search's runner for one shape: (rows, cols), bf16."""
    rows, cols = shape
    x = api.randn([rows, cols], "bf16", seed=1)
    return lambda: argmax.launch(x, config=config).op


TUNER = pw.tuner("argmax", SPACE, DEFAULT, _setup, inspect.getsource(argmax_kernels) + inspect.getsource(_tile_max))


def _argmax_launch(x: Any, dim: int = -1, keepdim: bool = False, *, out: Any = None,
                   config: dict[str, Any] | None = None) -> pw.Pending:
    """The position (i64) of the maximum of each row of x along its last dim.

    Args:
        x: f16, bf16 or f32, at least 1-D (rank 2 with any strides, else contiguous).
        dim: the last dim only (-1 or ``x.ndim - 1``).
        keepdim: keep the reduced dim (size 1), as torch.
        out: an i64 array of the result's shape to write.
        config: a config of `SPACE` (default: the tuner's for this shape).
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
    chosen = pw.config_of(fn, config, SPACE, DEFAULT) if config is not None else TUNER.config((rows, cols))
    bm, bn, sub, chunks = plan(chosen, rows, cols)
    x2 = pw.reshaped(xa, (rows, cols), fn, "x")
    # The partials per out (made once: a warmed-up call with out= allocates nothing, so it
    # can be captured in a CUDA graph; out's hold keeps two pending calls from sharing them).
    values, indices = derived(result.tensor, ("partials", rows, chunks), lambda: (
        api.empty([rows, chunks], dtype="f32"), api.empty([rows, chunks], dtype="i32")))
    chunk_kernel, row_kernel = argmax_kernels(xa.tensor.dtype, int(chosen["occupancy"]))
    flat_out = pw.reshaped(Operand.of(result.tensor), (rows,), fn, "out")
    rows_tile = min(pw.next_pow2(rows), max(1, 4096 // pw.next_pow2(chunks)))
    first = chunk_kernel(values.permute(0, 1).partition([bm, 1]), indices.permute(0, 1).partition([bm, 1]), x2,
                         BN=bn, SUB=sub)
    return pw.Pending(first, result.result, then=lambda _: row_kernel(flat_out.partition([rows_tile]), values,
                                                                     indices, CP=pw.next_pow2(chunks)))


argmax = pw.library_function(_argmax_launch)
