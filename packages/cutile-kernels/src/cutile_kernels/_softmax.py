"""Row softmax and log-softmax: ``softmax(x, dim=-1)``, ``log_softmax(x, dim=-1)``.

A row that fits one tile (``next_pow2(cols) <= tile_cols``) is read once: one block per
``tile_rows`` rows, plain partitions. A longer row is walked in column chunks by a
persistent kernel whose output is mapped ``[1, OWNED]`` (each schedule item owns its
rows whole): an online max and sum per lane of the chunk over the chunks, from the
last, then the chunks again from the first, normalized (`chunked_kernel`). fp32
throughout the arithmetic; the exponentials are ``exp2`` with log2(e) folded in (the
chunked kernel's flush to zero: a result below 2**-126 of the row's largest is 0).

Kernels are made per dtype by factories. Their parameters' annotations are set as
objects after each ``def`` (``kernel.__annotations__``), since the dtype is a variable
there and mypy's cutile plugin reads only a literal dtype in an annotation.
"""

import functools
from collections.abc import Mapping
from typing import Any

import numpy as np

import cutile
from cutile import api, tune
from cutile.core import (
    Constant, DType, Mut, Tensor, bid, exp2, f32, fma, full, log2, max, maximum, minimum, sum, where, zeros,
)
from cutile_kernels import _rows
from cutile_kernels._operands import as_tensor, output
from cutile_kernels._rows import Plan, RowConfig, RowTuning

LOG2E = 1.4426950408889634
LN2 = 0.6931471805599453
#: where a running max starts: finite, so that a lane that has seen only -inf (padding,
#: -inf entries) never computes -inf - -inf (NaN); max(LOWEST, -inf) stays LOWEST
LOWEST = -3.4028234663852886e38


@functools.cache
def one_pass_kernel(dtype: DType, log: bool, hints: _rows.Hints = ()) -> Any:
    """Softmax (``log``: log-softmax) of rows that fit one (BM, BN) tile."""
    def softmax_rows(z: Any, x: Any, BM: Any, BN: Any) -> None:  # noqa: N803 (the tile dims' names)
        t = x.load(index=(bid(0), 0), shape=(BM, BN), padding="neg_inf").astype(f32) * LOG2E
        shifted = t - max(t, axis=1, keepdims=True)  # log2 units
        e = exp2(shifted)
        total = sum(e, axis=1, keepdims=True)
        if log:
            z.store(((shifted - log2(total)) * LN2).astype(dtype))
        else:
            z.store((e * (1.0 / total)).astype(dtype))  # one division a row
    softmax_rows.__annotations__ = {
        "z": Mut[Tensor[dtype, ["BM", "BN"]]],
        "x": Tensor[dtype, [-1, -1]],
        "BM": Constant[int],
        "BN": Constant[int],
        "return": None,
    }
    return _rows.entry(softmax_rows, None, f"{'log_' if log else ''}softmax_rows_{dtype}", hints)


@functools.cache
def chunked_kernel(dtype: DType, log: bool, hints: _rows.Hints = ()) -> Any:
    """Softmax (``log``: log-softmax) of rows of any length, in (BM, BN) chunks, on an
    output mapped ``[1, OWNED]``.

    Pass 1 keeps a running max ``m`` and sum ``s`` (of ``exp(x - m)``) per lane of the
    chunk, in registers: no block-wide reduction in the loop, one exp2 an element (of
    ``-|x - m|``, the smaller of the two relative to the larger); the lanes are reduced
    once a row. The maxima are of x itself (not of ``x * log2(e)``, whose rounding at
    large magnitudes would not cancel in ``x - max``). Pass 1 walks the chunks from the
    last, so that the chunks pass 2 reads first (from the first) are those read last,
    still in L2. Both loops load chunk ``c + 1`` before chunk ``c``'s math, which lets
    tileiras keep loads in flight (the last iteration's is clamped to a chunk in range: a
    view is indexed only inside its index space; that load is of a chunk already read)."""
    def softmax_chunked(z: Any, x: Any, BM: Any, BN: Any) -> None:  # noqa: N803 (the tile dims' names)
        for idx in z.tiles():
            rows, _ = idx
            chunks = z.num_tiles(1)
            m = full((BM, BN), LOWEST, f32)  # each lane's running max
            s = zeros((BM, BN), f32)  # each lane's sum of exp(x - m)
            ahead = x.load(index=(rows, chunks - 1), shape=(BM, BN), padding="neg_inf")
            for c in range(chunks):
                t = ahead.astype(f32)
                ahead = x.load(index=(rows, maximum(chunks - 2 - c, 0)), shape=(BM, BN), padding="neg_inf")
                # NaN stays NaN in e (maxf and minf would drop it on sm_90): its row's sum is NaN
                e = exp2(abs(t - m) * -LOG2E, flush_to_zero=True)
                s = where(t > m, fma(s, e, 1.0), s + e)
                m = maximum(m, t)
            row_max = max(m, axis=1, keepdims=True)
            row_sum = sum(s * exp2((m - row_max) * LOG2E, flush_to_zero=True), axis=1, keepdims=True)
            shift = row_max + log2(row_sum) * LN2  # log-softmax is x - shift
            scale = 1.0 / row_sum
            ahead = x.load(index=(rows, 0), shape=(BM, BN), padding="neg_inf")
            for c in range(chunks):
                t = ahead.astype(f32)
                ahead = x.load(index=(rows, minimum(c + 1, chunks - 1)), shape=(BM, BN), padding="neg_inf")
                if log:
                    z.store((t - shift).astype(dtype), (rows, c))
                else:
                    z.store((exp2((t - row_max) * LOG2E, flush_to_zero=True) * scale).astype(dtype), (rows, c))
    softmax_chunked.__annotations__ = {
        "z": Mut[Tensor[dtype, ["BM", "BN"]]],
        "x": Tensor[dtype, [-1, -1]],
        "BM": Constant[int],
        "BN": Constant[int],
        "return": None,
    }
    return _rows.entry(softmax_chunked, None, f"{'log_' if log else ''}softmax_chunked_{dtype}", hints)


def _launch(out2d: cutile.Tensor, x2d: cutile.Tensor, log: bool, config: RowConfig) -> Any:
    rows, cols = x2d.shape
    tile_rows, tile_cols, one_pass = config.tile(cols)
    dtype = x2d.dtype
    if one_pass:
        return one_pass_kernel(dtype, log, config.hints)(out2d.partition([tile_rows, tile_cols]), x2d)
    return chunked_kernel(dtype, log, config.hints)(_rows.persistent(out2d, (tile_rows, tile_cols), config.occupancy),
                                                    x2d)


def _plan(function: str, x: Any, dim: Any, out: Any, log: bool, config: Mapping[str, int | str] | None) -> Plan:
    operand = as_tensor(x, function, "x")  # the result is of its kind
    source = operand.tensor
    dtype = _rows.float_dtype(source, function, "x")
    ndim = source.ndim
    if ndim == 0:
        raise cutile.ArgumentError(f"{function}: x is a scalar; expected at least one dim")
    if isinstance(dim, bool) or not isinstance(dim, (int, np.integer)) or not -ndim <= int(dim) < ndim:
        raise cutile.ArgumentError(f"{function}: dim {dim!r} is out of range for x of {ndim} dims")
    axis = int(dim) % ndim
    order = [a for a in range(ndim) if a != axis] + [axis]  # the softmax dim last
    inverse = [order.index(a) for a in range(ndim)]
    moved = source if axis == ndim - 1 else source.permute(order)
    if out is None:
        result = api.empty(list(moved.shape), dtype)
        given = None
    else:
        given_tensor = output(out, source.shape, dtype, operand, function, "out", {"x": source}).tensor
        result = given_tensor if axis == ndim - 1 else given_tensor.permute(order)
        given = out

    def finish() -> Any:
        if given is not None:
            return given
        return operand.as_kind(result if axis == ndim - 1 else result.permute(inverse), function)

    if source.size == 0:
        if moved.shape[-1] == 0 and source.size == 0 and all(moved.shape[:-1]):
            raise cutile.ArgumentError(f"{function}: x has rows of length 0 along dim {dim}")
        return Plan(None, finish)
    x2d = _rows.rows_view(moved, function, "x")
    out2d = _rows.rows_view(result, function, "out", writable=True)
    rows, cols = x2d.shape
    chosen = RowConfig.of(config) if config is not None else _TUNING[log].config(rows, cols, dtype)
    return Plan(_launch(out2d, x2d, log, chosen), finish)


def _plan_softmax(x: Any, dim: int = -1, *, out: Any = None, config: Mapping[str, int | str] | None = None) -> Plan:
    """Softmax of ``x`` along ``dim``: ``exp(x - max) / sum(exp(x - max))``.

    Args:
        x: f16, bf16 or f32; a cutile tensor or any DLPack / CUDA Array Interface tensor.
        dim: the dim to normalize (any; the others are rows).
        out: the result's tensor (same shape and dtype as x); else a new one of x's kind.
        config: a row config (`ROW_SPACE`'s parameters) instead of the tuned one.
    Returns:
        the softmax, of x's kind (or ``out``). ``softmax.launch(..., out=)`` returns the
        pending launch instead.
    """
    return _plan("softmax", x, dim, out, False, config)


def _plan_log_softmax(x: Any, dim: int = -1, *, out: Any = None, config: Mapping[str, int | str] | None = None) -> Plan:
    """Log-softmax of ``x`` along ``dim``: ``x - max - log(sum(exp(x - max)))``; arguments
    as `softmax`'s."""
    return _plan("log_softmax", x, dim, out, True, config)


softmax = _rows.row_function(_plan_softmax)
log_softmax = _rows.row_function(_plan_log_softmax)


def _build(log: bool) -> _rows.Build:
    def data(rows: int, cols: int, dtype: DType) -> tuple[Any, Any, Any]:
        x, values = _rows.random_rows(rows, cols, dtype, seed=0, scale=3.0)
        sample = _rows.checked_rows(rows)
        shifted = values[sample] - values[sample].max(axis=1, keepdims=True)
        logs = shifted - np.log(np.exp(shifted).sum(axis=1, keepdims=True))
        return x, sample, logs if log else np.exp(logs)

    def build(config: tune.Config, rows: int, cols: int, dtype: DType) -> tuple[Any, Any]:
        x, sample, expected = _rows.cached(("softmax", log, rows, cols, dtype), lambda: data(rows, cols, dtype))
        out = _rows.poisoned([rows, cols], dtype)
        function = log_softmax if log else softmax
        return (lambda: function.launch(x, out=out, config=config),
                lambda: _rows.close(out, expected, dtype, sample))
    return build


def default_config(rows: int, cols: int, dtype: Any) -> tune.Config:
    """`_rows.default_config`, but a row longer than its widest tile goes in chunks of
    32 KiB (8192 columns of f32, 16384 of two bytes) on one block an SM: the chunked
    kernel's registers then hold a chunk in flight beside the one it works on (fewer
    instructions an element than smaller chunks, whose loads tileiras pipelines deeper
    at the cost of register moves), and with few rows in flight more of a row's chunks
    stay in L2 between its passes."""
    config = _rows.default_config(rows, cols, dtype)
    if RowConfig.of(config).tile(cols)[2]:
        return config
    return {"tile_rows": 1, "tile_cols": 32768 // _rows.itemsize_of(dtype), "occupancy": 1, "num_worker_warps": 8}


#: 32-bit registers an SM has (sm_90, sm_100)
SM_REGISTERS = 65536


def fits(config: tune.Config, cols: int) -> bool:
    """`_rows.fits`, and for the chunked kernel a config whose registers may hold it:
    at least 64 a thread and 2.5 per chunk element it holds (the running max and sum,
    the chunk, the next one in flight). Tileiras gives a block 4 warps beside its worker
    warps (its TMA stores); configs below that budget spilled in its sm_90 code, and
    some just above it spill a little (f32 chunks of 16384): a search finds those slow."""
    if not _rows.fits(config, cols):
        return False
    row = RowConfig.of(config)
    tile_rows, tile_cols, one_pass = row.tile(cols)
    if one_pass:
        return True
    registers = SM_REGISTERS // (32 * row.occupancy * (row.num_worker_warps + 4))  # a thread's
    held = tile_rows * tile_cols // (32 * row.num_worker_warps)  # chunk elements a thread holds
    return registers >= 64 and 2 * registers >= 5 * held


# (the constants the kernels read are part of what they compute)
_SOURCE = _rows.source_of(one_pass_kernel, chunked_kernel) + f"\nLOG2E={LOG2E} LN2={LN2} LOWEST={LOWEST}"
_TUNING = {log: RowTuning(f"{'log_' if log else ''}softmax", _SOURCE, _build(log), default=default_config, fit=fits)
           for log in (False, True)}


def tuning(log: bool = False) -> RowTuning:
    """The configs of softmax (``log``: log_softmax): its tuner, `RowTuning.search` and `RowTuning.record`."""
    return _TUNING[log]
