"""``top_k(x, k, dim=-1, *, largest=True, sorted=True)``: each row's k largest (or
smallest) values and their positions, as ``torch.topk`` gives them.

The kernel language has no sort and no top-k op (nor has Tile IR), so the selection is
built from the reductions it has: k rounds of "take the row's maximum, then remove it".
Each element is first made one i64 *key* whose order is the order wanted: the high
word is the value's bits read as a signed int whose order is the floats' (``-0.0`` read
as ``0.0``, every NaN one key above every number for ``largest``, below for smallest,
and the value negated for smallest), the low word ``2**31 - 1 - column``. So one i64
maximum per round gives the next value and, among equal values, the lowest column (ties
go to the lowest index, as ``torch.topk`` on the CPU); keys are unique, so removing the
round's maximum removes exactly that element. The values returned are read back from
``x`` at the chosen columns (a bounds-checked gather), bit for bit the input's.

Two stages, so that a few long rows (sampling over a 152k vocabulary) still fill the
GPU: the first splits each row into chunks of ``block_elems // tile_rows`` columns, one
block per (row tile, chunk), each writing its chunk's k best keys; the second selects each row's k
best among its chunks' candidates and writes values and indices. A row of one chunk
takes one kernel doing both. All are safe kernels; the second stage runs as the first's
continuation (``then``), so ``top_k.launch(...)`` is one op to time.

Limits: ``k`` at most `MAX_K` (the work grows with k: k rounds over every element), and
rows of at most ``(MAX_CANDIDATES // next_pow2(k)) * MAX_TILE_COLS`` columns (the second
stage holds a row's candidates in one tile).
"""

# No `from __future__ import annotations`: kernel annotations name the factory's dtypes, which cutile's
# mypy plugin cannot read (it takes literal dtypes such as f32): hence their `type: ignore[misc]`.

import functools
import inspect
from typing import Any

import cutile
from cutile import api, tune
import cutile.core as ct
from cutile.core import Constant, Mut, Tensor, arange, bid, bitcast, f32, full, gather, i32, i64, where

from cutile_kernels import _pointwise as pw
from cutile_kernels._operands import Operand, as_tensor, output

#: block_elems: a chunk's elements (tile_rows rows of block_elems // tile_rows columns), an i64 key each
SPACE = tune.Space(tile_rows=[1, 2, 4], block_elems=[1024, 2048, 4096, 8192], occupancy=[1, 2, 4])
DEFAULT = {"tile_rows": 1, "block_elems": 4096, "occupancy": 2}
MAX_K = 64
#: the second stage's tile of one row's candidates (chunks * next_pow2(k) of them) at most
MAX_CANDIDATES = 8192
#: a chunk's columns at most (a longer row than its candidates allow is refused)
MAX_TILE_COLS = 16384
_NO_INDEX = 2**31 - 1
_NO_KEY = -2**63  # below every element's key: padding, removed elements, missing candidates


def _keys(t: Any, first_col: Any, n_cols: Any, BN: int, largest: bool) -> Any:
    """Each element of t (rows x BN, f32) whose column 0 is at ``first_col`` as its i64
    key (see the module doc); columns at or past ``n_cols`` are `_NO_KEY`."""
    cols = (arange(BN, i32) + first_col).reshape((1, BN))
    nan = t != t
    bits = bitcast(where(t == 0.0, 0.0, t), i32)  # -0.0 as 0.0: equal values, one key
    order = where(bits < 0, bits ^ 0x7FFFFFFF, bits)  # signed ints in the floats' order
    if largest:
        order = where(nan, 2**31 - 1, order)
    else:  # (a NaN's order may be -2**31, whose negation overflows: zeroed first)
        order = where(nan, -2**31, -where(nan, 0, order))
    key = order.astype(i64) * 2**32 + (_NO_INDEX - cols).astype(i64)
    return where(cols < n_cols, key, _NO_KEY)


def _select(keys: Any, BM: int, K: int, KP: int) -> Any:
    """Each row's K largest keys in decreasing order, in the first K of KP columns (the
    rest `_NO_KEY`): K rounds of a maximum and its removal."""
    slots = arange(KP, i32).reshape((1, KP))
    best = full((BM, KP), _NO_KEY, i64)
    for j in range(K):
        top = ct.max(keys, axis=1, keepdims=True)
        best = where(slots == j, top, best)
        keys = where(keys == top, _NO_KEY, keys)
    return best


def _columns(best: Any) -> Any:
    """The columns (i32) that keys hold in their low word."""
    return (_NO_INDEX - (best & 0xFFFFFFFF)).astype(i32)


@functools.lru_cache(maxsize=None)
def top_k_kernels(dtype: Any, largest: bool, occupancy: int) -> tuple[Any, Any, Any]:
    """(one pass, chunks, rows): the kernels for one dtype and direction."""
    keys_of, select, columns = cutile.function(_keys), cutile.function(_select), cutile.function(_columns)
    entry = cutile.entry(hints={"occupancy": occupancy})

    def top_k_one_pass(
            values: Mut[Tensor[dtype, ["BM", "KP"]]],  # type: ignore[misc]
            indices: Mut[Tensor[i64, ["BM", "KP"]]],
            x: Tensor[dtype, [-1, -1]],  # type: ignore[misc]
            BM: Constant[int],
            BN: Constant[int],
            K: Constant[int],
            KP: Constant[int],
    ) -> None:
        t = x.load(index=(bid(0), 0), shape=(BM, BN)).astype(f32)
        cols = columns(select(keys_of(t, 0, x.shape[1], BN, largest), BM, K, KP))
        rows = (arange(BM, i32) + bid(0) * BM).reshape((BM, 1))
        values.store(gather(x, (rows, cols)))
        indices.store(cols.astype(i64))

    def top_k_chunks(
            candidates: Mut[Tensor[i64, ["BM", "KP"]]],
            x: Tensor[dtype, [-1, -1]],  # type: ignore[misc]
            BM: Constant[int],
            BN: Constant[int],
            K: Constant[int],
            KP: Constant[int],
    ) -> None:
        t = x.load(index=(bid(0), bid(1)), shape=(BM, BN)).astype(f32)
        candidates.store(select(keys_of(t, bid(1) * BN, x.shape[1], BN, largest), BM, K, KP))

    def top_k_rows(
            values: Mut[Tensor[dtype, ["BM", "KP"]]],  # type: ignore[misc]
            indices: Mut[Tensor[i64, ["BM", "KP"]]],
            candidates: Tensor[i64, [-1, -1]],
            x: Tensor[dtype, [-1, -1]],  # type: ignore[misc]
            BM: Constant[int],
            CP: Constant[int],
            K: Constant[int],
            KP: Constant[int],
    ) -> None:
        found = candidates.load(index=(bid(0), 0), shape=(BM, CP))
        real = arange(CP, i32).reshape((1, CP)) < candidates.shape[1]
        cols = columns(select(where(real, found, _NO_KEY), BM, K, KP))
        rows = (arange(BM, i32) + bid(0) * BM).reshape((BM, 1))
        values.store(gather(x, (rows, cols)))
        indices.store(cols.astype(i64))

    return entry(top_k_one_pass), entry(top_k_chunks), entry(top_k_rows)


def plan(config: dict[str, Any], rows: int, cols: int, k: int) -> tuple[int, int, int, int]:
    """(tile rows, chunk columns, chunks, k padded to a power of two) for a (rows, cols)
    input; the chunk grows past the config's when the candidates would not fit one tile.

    Raises:
        ArgumentError: rows too long for k (naming ``x``).
    """
    kp = pw.next_pow2(k)
    bm = min(int(config["tile_rows"]), pw.next_pow2(rows))
    bn = min(max(1, int(config["block_elems"]) // bm), pw.next_pow2(cols))
    while -(-cols // bn) * kp > MAX_CANDIDATES and bn < MAX_TILE_COLS:
        bn *= 2
    while bm > 1 and bm * bn > int(config["block_elems"]):  # a grown chunk takes fewer rows
        bm //= 2
    chunks = -(-cols // bn)
    if chunks * kp > MAX_CANDIDATES:
        longest = MAX_CANDIDATES // kp * MAX_TILE_COLS
        raise cutile.ArgumentError(f"top_k(): parameter 'x' has rows of {cols} elements; with k={k} they may have "
                                   f"at most {longest}")
    return bm, bn, chunks, kp


def _setup(config: dict[str, Any], shape: tuple[int, ...]) -> Any:
    """A search's runner for one shape: (rows, cols, k), bf16."""
    rows, cols, k = shape
    x = api.randn([rows, cols], "bf16", seed=1)
    return lambda: top_k.launch(x, k, config=config).op


TUNER = pw.tuner("top_k", SPACE, DEFAULT, _setup,
                 inspect.getsource(top_k_kernels) + inspect.getsource(_keys) + inspect.getsource(_select))


def _top_k_launch(x: Any, k: int, dim: int = -1, *, largest: bool = True, sorted: bool = True, out: Any = None,
                  config: dict[str, Any] | None = None) -> pw.Pending:
    """The k largest (``largest=False``: smallest) elements of each row of x along its
    last dim, and their positions: ``(values, indices)`` as ``torch.topk`` gives them.

    Values are in order (decreasing; increasing for the smallest), equal values by
    increasing index; a NaN ranks above every number (below for the smallest, as
    torch). ``sorted=False`` is accepted and gives the same sorted result (any order is
    allowed then). Built from k rounds of a maximum per chunk of each row, then the same
    over the chunks' candidates (the kernel language has no sort).

    Args:
        x: f16, bf16 or f32, at least 1-D (rank 2 with any strides, else contiguous).
        k: how many per row, 1 to min(`MAX_K` (64), the row's length).
        dim: the last dim only (-1 or ``x.ndim - 1``).
        largest: the largest (True) or the smallest (False).
        sorted: accepted for torch's signature; the result is always sorted.
        out: ``(values, indices)`` to write: x's dtype and i64, of shape
            ``x.shape[:-1] + (k,)``.
        config: a config of `SPACE` (default: the tuner's for this shape).

    Returns:
        ``(values, indices)`` of x's kind (or the arrays of ``out``).
    """
    fn = "top_k"
    xa = as_tensor(x, fn, "x")
    pw.check_dtype(xa, pw.FLOAT_DTYPES, fn, "x")
    shape = xa.shape
    rows, cols = pw.rows_over_last_dim(xa, dim, fn)
    for name, flag in (("largest", largest), ("sorted", sorted)):
        if not isinstance(flag, bool):
            raise cutile.ArgumentTypeError(f"{fn}(): parameter '{name}' must be a bool, got {flag!r}")
    if cols == 0 or rows == 0:
        raise cutile.ArgumentError(f"{fn}(): parameter 'x' of shape {list(shape)} is empty")
    if cols >= _NO_INDEX:
        raise cutile.ArgumentError(f"{fn}(): parameter 'x' has rows of {cols} elements, longer than 2**31 - 2")
    if isinstance(k, bool) or not isinstance(k, int):
        raise cutile.ArgumentTypeError(f"{fn}(): parameter 'k' must be an int, got {k!r}")
    if not 1 <= k <= min(MAX_K, cols):
        why = f"the rows have {cols} elements" if k > cols and cols < MAX_K else f"top_k takes at most {MAX_K}"
        raise cutile.ArgumentError(f"{fn}(): parameter 'k' is {k}; expected 1 to {min(MAX_K, cols)} ({why})")
    chosen = pw.config_of(fn, config, SPACE, DEFAULT) if config is not None else TUNER.config((rows, cols, k))
    bm, bn, chunks, kp = plan(chosen, rows, cols, k)
    result_shape = (*shape[:-1], k)
    out_values, out_indices = _out_pair(out, fn)
    reads = {"x": xa.tensor}
    values = output(out_values, result_shape, xa.tensor.dtype, xa, fn, "out[0]", reads)
    indices = output(out_indices, result_shape, "i64", xa, fn, "out[1]", {**reads, "out[0]": values.tensor})
    x2 = pw.reshaped(xa, (rows, cols), fn, "x")
    values2 = pw.reshaped(Operand.of(values.tensor), (rows, k), fn, "out[0]")
    indices2 = pw.reshaped(Operand.of(indices.tensor), (rows, k), fn, "out[1]")
    one_pass, chunk_kernel, row_kernel = top_k_kernels(xa.tensor.dtype, largest, int(chosen["occupancy"]))

    def finish() -> tuple[Any, Any]:
        return values.result(), indices.result()

    if chunks == 1:
        launch = one_pass(values2.partition([bm, kp]), indices2.partition([bm, kp]), x2, BN=bn, K=k)
        return pw.Pending(launch, finish)
    candidates = api.empty([rows, chunks * kp], dtype="i64")
    first = chunk_kernel(candidates.permute(0, 1).partition([bm, kp]), x2, BN=bn, K=k)
    cp = pw.next_pow2(chunks * kp)
    rows_tile = min(pw.next_pow2(rows), max(1, 4096 // cp))
    return pw.Pending(first, finish, then=lambda _: row_kernel(
        values2.partition([rows_tile, kp]), indices2.partition([rows_tile, kp]), candidates, x2, CP=cp, K=k))


def _out_pair(out: Any, fn: str) -> tuple[Any, Any]:
    """``out=`` as (values, indices), or (None, None)."""
    if out is None:
        return None, None
    if not isinstance(out, (tuple, list)) or len(out) != 2:
        raise cutile.ArgumentTypeError(f"{fn}(): parameter 'out' must be a (values, indices) pair, got "
                                       f"{type(out).__name__}")
    return out[0], out[1]


top_k = pw.library_function(_top_k_launch)
