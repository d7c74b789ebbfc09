"""Row normalizations: `rms_norm`, `add_rms_norm`, `layer_norm` and
`layer_norm_backward`, over the last dim of any leading shape (`qk_norm` is in
`_qk_norm`: one launch for q and k).

Each is a safe kernel in fp32 arithmetic (f16, bf16, f32 tensors; the weight may be of
another of those dtypes). A row that fits one tile of the config is read once (plain
partitions, one block per ``tile_rows`` rows); a longer one is walked in column chunks by a
persistent kernel whose outputs are mapped ``[1, OWNED]`` (each schedule item owns its
rows whole), reading the row a second time soon after the first (mostly from L2).
LayerNorm's statistics are of each row less its first element (read as a tile of its own),
so that a large mean does not cancel the variance: a one-pass row sums ``d`` and ``d^2`` in
one reduction (`_row_moments`; in f64 for f32 rows, so that an outlier first element does not
cancel it either), a chunked one combines its chunks by Chan's parallel update
of mean and sum of squares. The one-pass kernel masks the columns past the row only when
its tile is wider (``MASKED``), and writes the mean and rstd only in the variant of calls
that return them.

LayerNorm's backward is three kernels: ``dx`` per row (as the forward), then ``dweight``
and ``dbias`` as column sums in two safe stages: blocks of ``(split, column tile)`` sum
their share of the rows into an fp32 partials tensor, and a second kernel sums the splits.

Kernels are made per dtype by factories. Their parameters' annotations are set as
objects after each ``def`` (``kernel.__annotations__``), since the dtype is a variable
there and mypy's cutile plugin reads only a literal dtype in an annotation.
"""

import functools
import inspect
import math
from collections.abc import Mapping
from typing import Any, NamedTuple

import numpy as np

import cutile
from cutile import api, tune
from cutile.core import (
    Constant, DType, Mut, Tensor, arange, bid, f32, f64, fma, i32, minimum, reduce, rsqrt, sum, where, zeros,
)
from cutile_kernels import _rows
from cutile_kernels._operands import KeptPlans, Output, as_tensor, check_same, memory_layout, output, tensor_of
from cutile_kernels._rows import Plan, RowConfig, RowTuning


# -- kernels ----------------------------------------------------------------------------------
# (plain helpers called from the kernels are inlined into them)

def _column_row(v: Any, c: Any, BN: Any) -> Any:  # noqa: N803 (the tile dims' names)
    """Chunk ``c`` of a per-column vector (weight, bias) as a (1, BN) f32 row."""
    return v.load(index=(c,), shape=(BN,)).astype(f32).reshape((1, BN))


def _merged_stats(mean: Any, m2: Any, x: Any, shift: Any, rows: Any, c: Any, n: Any, BM: Any, BN: Any) -> tuple[Any, Any]:  # noqa: N803
    """Rows' running mean and M2 of ``x - shift`` after chunk ``c`` (of the columns below
    ``n``): Chan's update; every earlier chunk is whole. The shift (a value of each row)
    keeps the chunks' sums small whatever the rows' mean, so that their rounding does
    not reach the variance."""
    in_row = arange(BN, i32).reshape((1, BN)) + c * BN < n
    t = where(in_row, x.load(index=(rows, c), shape=(BM, BN)).astype(f32) - shift, 0.0)
    before = (c * BN).astype(f32)
    count = minimum(n - c * BN, BN).astype(f32)
    chunk_mean = sum(t, axis=1, keepdims=True) / count
    d = where(in_row, t - chunk_mean, 0.0)
    delta = chunk_mean - mean
    after = before + count
    return (mean + delta * (count / after),
            m2 + sum(d * d, axis=1, keepdims=True) + delta * delta * (before * count / after))


def _dx_terms(dy: Any, x: Any, w: Any, m: Any, r: Any, rows: Any, c: Any, BM: Any, BN: Any) -> tuple[Any, Any]:  # noqa: N803
    """LayerNorm backward's ``xhat = (x - mean) * rstd`` and ``g = w * dy`` on tile (rows, c)."""
    xhat = (x.load(index=(rows, c), shape=(BM, BN)).astype(f32) - m) * r
    return xhat, dy.load(index=(rows, c), shape=(BM, BN)).astype(f32) * _column_row(w, c, BN)


@functools.cache
def rms_norm_kernel(dtype: DType, wdtype: DType, one_pass: bool, hints: _rows.Hints = ()) -> Any:
    """``z = x * rsqrt(mean(x^2) + eps) * w`` per row."""
    def rms_norm_rows(z: Any, x: Any, w: Any, eps: Any, inv_n: Any, BM: Any, BN: Any) -> None:  # noqa: N803 (the tile dims' names)
        t = x.load(index=(bid(0), 0), shape=(BM, BN)).astype(f32)
        scale = rsqrt(sum(t * t, axis=1, keepdims=True) * inv_n + eps)
        weight = _column_row(w, 0, BN)
        z.store((t * scale * weight).astype(dtype))

    def rms_norm_chunked(z: Any, x: Any, w: Any, eps: Any, inv_n: Any, BM: Any, BN: Any) -> None:  # noqa: N803 (the tile dims' names)
        for idx in z.tiles():
            rows, _ = idx
            squares = zeros((BM, 1), f32)
            for c in range(z.num_tiles(1)):
                t = x.load(index=(rows, c), shape=(BM, BN)).astype(f32)
                squares = squares + sum(t * t, axis=1, keepdims=True)
            scale = rsqrt(squares * inv_n + eps)
            for c in range(z.num_tiles(1)):
                t = x.load(index=(rows, c), shape=(BM, BN)).astype(f32)
                weight = _column_row(w, c, BN)
                z.store((t * scale * weight).astype(dtype), (rows, c))

    return _entry(rms_norm_rows if one_pass else rms_norm_chunked, dtype, wdtype, hints, by_name=True)


@functools.cache
def add_rms_norm_kernel(dtype: DType, wdtype: DType, one_pass: bool, hints: _rows.Hints = ()) -> Any:
    """``s = x + r`` (rounded to the dtype) and ``z = rms_norm(s) * w`` per row."""
    def add_rms_norm_rows(s: Any, z: Any, x: Any, r: Any, w: Any, eps: Any, inv_n: Any, BM: Any, BN: Any) -> None:  # noqa: N803 (the tile dims' names)
        total = (x.load(index=(bid(0), 0), shape=(BM, BN)).astype(f32)
                 + r.load(index=(bid(0), 0), shape=(BM, BN)).astype(f32)).astype(dtype)
        s.store(total)
        t = total.astype(f32)
        scale = rsqrt(sum(t * t, axis=1, keepdims=True) * inv_n + eps)
        weight = _column_row(w, 0, BN)
        z.store((t * scale * weight).astype(dtype))

    def add_rms_norm_chunked(s: Any, z: Any, x: Any, r: Any, w: Any, eps: Any, inv_n: Any, BM: Any, BN: Any) -> None:  # noqa: N803 (the tile dims' names)
        for idx in s.tiles_with(z):
            rows, _ = idx
            squares = zeros((BM, 1), f32)
            for c in range(s.num_tiles(1)):
                total = (x.load(index=(rows, c), shape=(BM, BN)).astype(f32)
                         + r.load(index=(rows, c), shape=(BM, BN)).astype(f32)).astype(dtype)
                s.store(total, (rows, c))
                t = total.astype(f32)
                squares = squares + sum(t * t, axis=1, keepdims=True)
            scale = rsqrt(squares * inv_n + eps)
            for c in range(z.num_tiles(1)):  # (a loop over s's tiles could not index z)
                t = (x.load(index=(rows, c), shape=(BM, BN)).astype(f32)
                     + r.load(index=(rows, c), shape=(BM, BN)).astype(f32)).astype(dtype).astype(f32)
                weight = _column_row(w, c, BN)
                z.store((t * scale * weight).astype(dtype), (rows, c))

    return _entry(add_rms_norm_rows if one_pass else add_rms_norm_chunked, dtype, wdtype, hints, by_name=True)


def _row_moments(t: Any, shift: Any, n: Any, inv_n: Any, eps: Any, BM: Any, BN: Any, MASKED: Any, WIDE: Any) -> tuple[Any, Any, Any]:  # noqa: N803
    """``d = t - shift`` (zero past column ``n`` when ``MASKED``), the rows' mean of d and
    their rstd, from one sweep: the sums of d and d^2 are one reduction (no second one
    waiting on the mean), ``var = E[d^2] - E[d]^2`` clamped at 0 (by a select: ``maxf``
    drops a NaN on sm_90, and a NaN or infinite row must give a NaN rstd). In f32 its
    rounding error is that of E[d^2] times ``1 + (shift - mean)^2 / var``: a few for a shift
    within a few deviations of the mean, whatever the mean (no cancellation), but up to
    about ``n`` when the shift is the row's one outlier. ``WIDE`` (f32 rows) sums in f64,
    with ``1 / n`` in f64 too (an f32 ``1 / n`` would bring its rounding back times
    ``mean_d^2``), which bounds it by about ``n * 2^-53`` for any shift; for 16-bit rows
    the f32 bound is below their precision."""
    d = t - shift
    if MASKED:
        d = where(arange(BN, i32).reshape((1, BN)) < n, d, 0.0)
    if WIDE:
        e = d.astype(f64)
        sums, squares = reduce((e, e * e), 1, lambda acc, v: (acc[0] + v[0], acc[1] + v[1]), (0.0, 0.0))
        inv = 1.0 / n.astype(f64)
        mean_wide = sums.reshape((BM, 1)) * inv
        mean_d = mean_wide.astype(f32)
        raw = (squares.reshape((BM, 1)) * inv - mean_wide * mean_wide).astype(f32)
    else:
        sums, squares = reduce((d, d * d), 1, lambda acc, e: (acc[0] + e[0], acc[1] + e[1]), (0.0, 0.0))
        mean_d = sums.reshape((BM, 1)) * inv_n
        raw = squares.reshape((BM, 1)) * inv_n - mean_d * mean_d
    var = where(raw < 0.0, 0.0, raw)  # (a NaN stays)
    return d, mean_d, rsqrt(var + eps)


def _layer_norm_tile(z: Any, x: Any, w: Any, b: Any, eps: Any, inv_n: Any, n: Any, BM: Any, BN: Any, MASKED: Any) -> tuple[Any, Any]:  # noqa: N803
    """Block's (BM, BN) rows of x normalized into z; returns their mean and rstd. The
    shift is each row's first element, a (BM, 1) load of its own (not waiting on the tile)."""
    t = x.load(index=(bid(0), 0), shape=(BM, BN)).astype(f32)
    shift = x.load(index=(bid(0), 0), shape=(BM, 1)).astype(f32)
    d, mean_d, rstd = _row_moments(t, shift, n, inv_n, eps, BM, BN, MASKED, x.dtype == f32)
    z.store(fma(d - mean_d, rstd * _column_row(w, 0, BN), _column_row(b, 0, BN)).astype(z.dtype))
    return shift + mean_d, rstd


@functools.cache
def layer_norm_kernel(dtype: DType, wdtype: DType, stats: bool, hints: _rows.Hints = ()) -> Any:
    """LayerNorm of rows that fit one tile (`_layer_norm_tile`); with ``stats`` it writes
    each row's mean and rstd too. ``MASKED``: the tile is wider than the rows."""
    def layer_norm_rows(z: Any, x: Any, w: Any, b: Any, eps: Any, inv_n: Any, n: Any, BM: Any, BN: Any, MASKED: Any) -> None:  # noqa: N803 (the tile dims' names)
        _layer_norm_tile(z, x, w, b, eps, inv_n, n, BM, BN, MASKED)

    def layer_norm_rows_stats(z: Any, mean_out: Any, rstd_out: Any, x: Any, w: Any, b: Any, eps: Any, inv_n: Any, n: Any, BM: Any, BN: Any, MASKED: Any) -> None:  # noqa: N803 (the tile dims' names)
        mean, rstd = _layer_norm_tile(z, x, w, b, eps, inv_n, n, BM, BN, MASKED)
        mean_out.store(mean)
        rstd_out.store(rstd)
    return _entry(layer_norm_rows_stats if stats else layer_norm_rows, dtype, wdtype, hints, by_name=True)


@functools.cache
def layer_norm_chunked_kernel(dtype: DType, wdtype: DType, hints: _rows.Hints = ()) -> Any:
    """LayerNorm of rows of any length on an output mapped ``[1, OWNED]``: the statistics
    chunk by chunk (Chan's update, shifted by each row's first element), then the
    normalized chunks."""
    def layer_norm_chunked(z: Any, x: Any, w: Any, b: Any, eps: Any, inv_n: Any, n: Any, BM: Any, BN: Any) -> None:  # noqa: N803 (the tile dims' names)
        for idx in z.tiles():
            rows, _ = idx
            shift = x.load(index=(rows, 0), shape=(BM, 1)).astype(f32)
            mean = zeros((BM, 1), f32)
            m2 = zeros((BM, 1), f32)
            for c in range(z.num_tiles(1)):
                mean, m2 = _merged_stats(mean, m2, x, shift, rows, c, n, BM, BN)
            rstd = rsqrt(m2 * inv_n + eps)
            for c in range(z.num_tiles(1)):
                t = x.load(index=(rows, c), shape=(BM, BN)).astype(f32) - shift
                weight = _column_row(w, c, BN)
                bias = _column_row(b, c, BN)
                z.store(((t - mean) * rstd * weight + bias).astype(dtype), (rows, c))
    return _entry(layer_norm_chunked, dtype, wdtype, hints, by_name=True)


@functools.cache
def layer_norm_stats_kernel(dtype: DType, hints: _rows.Hints = ()) -> Any:
    """Each row's mean and rstd, its columns in chunks of BN (Chan's update, shifted by
    the row's first element)."""
    def layer_norm_stats(mean_out: Any, rstd_out: Any, x: Any, eps: Any, inv_n: Any, n: Any, chunks: Any, BM: Any, BN: Any) -> None:  # noqa: N803 (the tile dims' names)
        shift = x.load(index=(bid(0), 0), shape=(BM, 1)).astype(f32)
        mean = zeros((BM, 1), f32)
        m2 = zeros((BM, 1), f32)
        for c in range(chunks):
            mean, m2 = _merged_stats(mean, m2, x, shift, bid(0), c, n, BM, BN)
        mean_out.store(mean + shift)
        rstd_out.store(rsqrt(m2 * inv_n + eps))
    return _entry(layer_norm_stats, dtype, dtype, hints, by_name=True)


@functools.cache
def layer_norm_apply_kernel(dtype: DType, wdtype: DType, hints: _rows.Hints = ()) -> Any:
    """``z = (x - mean) * rstd * w + b`` on (BM, BN) tiles, from the rows' statistics."""
    def layer_norm_apply(z: Any, x: Any, mean: Any, rstd: Any, w: Any, b: Any, BM: Any, BN: Any) -> None:  # noqa: N803 (the tile dims' names)
        t = x.load(index=(bid(0), bid(1)), shape=(BM, BN)).astype(f32)
        m = mean.load(index=(bid(0), 0), shape=(BM, 1))
        r = rstd.load(index=(bid(0), 0), shape=(BM, 1))
        weight = _column_row(w, bid(1), BN)
        bias = _column_row(b, bid(1), BN)
        z.store(((t - m) * r * weight + bias).astype(dtype))
    return _entry(layer_norm_apply, dtype, wdtype, hints, by_name=True)


@functools.cache
def layer_norm_dx_kernel(dtype: DType, wdtype: DType, one_pass: bool, hints: _rows.Hints = ()) -> Any:
    """LayerNorm's input gradient per row: with ``xhat = (x - mean) * rstd`` and
    ``g = w * dy``, ``dx = rstd * (g - mean(g) - xhat * mean(g * xhat))``."""
    def layer_norm_dx_rows(dx: Any, dy: Any, x: Any, w: Any, mean: Any, rstd: Any, inv_n: Any, BM: Any, BN: Any) -> None:  # noqa: N803 (the tile dims' names)
        m = mean.load(index=(bid(0), 0), shape=(BM, 1))
        r = rstd.load(index=(bid(0), 0), shape=(BM, 1))
        xhat = (x.load(index=(bid(0), 0), shape=(BM, BN)).astype(f32) - m) * r
        # zero outside the row: w pads with 0
        g = dy.load(index=(bid(0), 0), shape=(BM, BN)).astype(f32) * _column_row(w, 0, BN)
        mean_g = sum(g, axis=1, keepdims=True) * inv_n
        mean_gx = sum(g * xhat, axis=1, keepdims=True) * inv_n
        dx.store(((g - mean_g - xhat * mean_gx) * r).astype(dtype))

    def layer_norm_dx_chunked(dx: Any, dy: Any, x: Any, w: Any, mean: Any, rstd: Any, inv_n: Any, BM: Any, BN: Any) -> None:  # noqa: N803 (the tile dims' names)
        for idx in dx.tiles():
            rows, _ = idx
            m = mean.load(index=(rows, 0), shape=(BM, 1))
            r = rstd.load(index=(rows, 0), shape=(BM, 1))
            sum_g = zeros((BM, 1), f32)
            sum_gx = zeros((BM, 1), f32)
            for c in range(dx.num_tiles(1)):
                xhat, g = _dx_terms(dy, x, w, m, r, rows, c, BM, BN)
                sum_g = sum_g + sum(g, axis=1, keepdims=True)
                sum_gx = sum_gx + sum(g * xhat, axis=1, keepdims=True)
            mean_g = sum_g * inv_n
            mean_gx = sum_gx * inv_n
            for c in range(dx.num_tiles(1)):
                xhat, g = _dx_terms(dy, x, w, m, r, rows, c, BM, BN)
                dx.store(((g - mean_g - xhat * mean_gx) * r).astype(dtype), (rows, c))

    return _entry(layer_norm_dx_rows if one_pass else layer_norm_dx_chunked, dtype, wdtype, hints, by_name=True)


@functools.cache
def layer_norm_partials_kernel(dtype: DType) -> Any:
    """Block (split, column tile) sums ``dy * xhat`` and ``dy`` over its split's rows
    (``tiles`` row tiles from ``split * tiles``) into its (1, BN) tile of the partials."""
    def layer_norm_partials(dw: Any, db: Any, dy: Any, x: Any, mean: Any, rstd: Any, tiles: Any, BM: Any, BN: Any) -> None:  # noqa: N803 (the tile dims' names)
        acc_w = zeros((1, BN), f32)
        acc_b = zeros((1, BN), f32)
        for i in range(tiles):
            row_tile = bid(0) * tiles + i
            g = dy.load(index=(row_tile, bid(1)), shape=(BM, BN)).astype(f32)  # rows past the end read 0
            xhat = ((x.load(index=(row_tile, bid(1)), shape=(BM, BN)).astype(f32)
                     - mean.load(index=(row_tile, 0), shape=(BM, 1))) * rstd.load(index=(row_tile, 0), shape=(BM, 1)))
            acc_w = acc_w + sum(g * xhat, axis=0, keepdims=True)
            acc_b = acc_b + sum(g, axis=0, keepdims=True)
        dw.store(acc_w)
        db.store(acc_b)
    layer_norm_partials.__annotations__ = {
        "dw": Mut[Tensor[f32, [1, "BN"]]],
        "db": Mut[Tensor[f32, [1, "BN"]]],
        "dy": Tensor[dtype, [-1, -1]],
        "x": Tensor[dtype, [-1, -1]],
        "mean": Tensor[f32, [-1, -1]],
        "rstd": Tensor[f32, [-1, -1]],
        "tiles": i32,
        "BM": Constant[int],
        "BN": Constant[int],
        "return": None,
    }
    return _entry(layer_norm_partials, dtype, dtype)


@functools.cache
def column_sum_kernel(wdtype: DType) -> Any:
    """``dw = sum(partials_w, axis=0)``, ``db = sum(partials_b, axis=0)`` (SP >= the splits)."""
    def column_sums(dw: Any, db: Any, pw: Any, pb: Any, SP: Any, BN: Any) -> None:  # noqa: N803 (the tile dims' names)
        dw.store(sum(pw.load(index=(0, bid(0)), shape=(SP, BN)), axis=0).astype(wdtype))
        db.store(sum(pb.load(index=(0, bid(0)), shape=(SP, BN)), axis=0).astype(wdtype))
    column_sums.__annotations__ = {
        "dw": Mut[Tensor[wdtype, ["BN"]]],
        "db": Mut[Tensor[wdtype, ["BN"]]],
        "pw": Tensor[f32, [-1, -1]],
        "pb": Tensor[f32, [-1, -1]],
        "SP": Constant[int],
        "BN": Constant[int],
        "return": None,
    }
    return _entry(column_sums, wdtype, wdtype)


@functools.cache
def zero_kernel(dtype: DType) -> Any:
    def zero(z: Any, B: Any) -> None:  # noqa: N803 (the tile dims' names)
        z.store(zeros((B,), dtype))
    zero.__annotations__ = {
        "z": Mut[Tensor[dtype, ["B"]]],
        "B": Constant[int],
        "return": None,
    }
    return _entry(zero, dtype, dtype)


def _entry(function: Any, dtype: DType, wdtype: DType, hints: _rows.Hints = (), *, by_name: bool = False) -> Any:
    """``function`` as a kernel; with ``by_name`` its annotations come from its parameters'
    names (`_parameter_kinds`)."""
    annotations = None
    if by_name:
        kinds = _parameter_kinds(dtype, wdtype)
        annotations = {name: kinds[name] for name in inspect.signature(function).parameters}
    return _rows.entry(function, annotations, f"{function.__name__}_{dtype}_{wdtype}", hints)


def _parameter_kinds(dtype: DType, wdtype: DType) -> dict[str, Any]:
    """What each parameter name means in the norm kernels: outputs are (BM, BN) tiles of
    rows (the per-row statistics (BM, 1) in f32), inputs rows of x's dtype, per-column
    vectors of the weight's, statistics f32."""
    tile, stat_tile = Mut[Tensor[dtype, ["BM", "BN"]]], Mut[Tensor[f32, ["BM", 1]]]
    rows, column, stats = Tensor[dtype, [-1, -1]], Tensor[wdtype, [-1]], Tensor[f32, [-1, -1]]
    return {"z": tile, "s": tile, "dx": tile, "mean_out": stat_tile, "rstd_out": stat_tile,
            "x": rows, "r": rows, "dy": rows, "w": column, "b": column, "mean": stats, "rstd": stats,
            "eps": f32, "inv_n": f32, "n": i32, "chunks": i32, "BM": Constant[int], "BN": Constant[int],
            "MASKED": Constant[bool]}


# -- calls ---------------------------------------------------------------------------------------

class _Rows:
    """A call's main input as rows, and what its results are made of."""

    def __init__(self, function: str, x: Any, name: str = "x") -> None:
        self.function = function
        self.operand = as_tensor(x, function, name)  # results are of its kind
        self.tensor = self.operand.tensor
        self.reads: dict[str, cutile.Tensor] = {name: self.tensor}  # the inputs outputs may not overlap
        self.dtype = _rows.float_dtype(self.tensor, function, name)
        if self.tensor.ndim == 0:
            raise cutile.ArgumentError(f"{function}: {name} is a scalar; expected at least one dim")
        self.shape = tuple(self.tensor.shape)
        self.cols = self.shape[-1]
        self.rows = math.prod(self.shape[:-1])
        if self.cols == 0 and self.rows:
            raise cutile.ArgumentError(f"{function}: {name} has rows of length 0 (its last dim)")
        self.empty = self.rows == 0

    def view(self, tensor: cutile.Tensor, name: str, *, writable: bool = False) -> cutile.Tensor:
        return _rows.rows_view(tensor, self.function, name, writable=writable)

    def like(self, value: Any, name: str) -> cutile.Tensor:
        """Another input of x's shape and dtype, as rows."""
        tensor = tensor_of(value, self.function, name)
        check_same(tensor, self.shape, self.dtype, self.function, name)
        self.reads[name] = tensor
        return self.view(tensor, name)

    def stats(self, value: Any, name: str) -> cutile.Tensor:
        """A per-row f32 statistic (mean, rstd) given as input: any shape of ``rows`` elements."""
        tensor = tensor_of(value, self.function, name)
        self.reads[name] = tensor
        if tensor.dtype != f32 or tensor.size != self.rows:
            raise cutile.ArgumentError(f"{self.function}: {name} must be f32 with one value per row ({self.rows}), "
                                       f"got {tensor.dtype} of shape {list(tensor.shape)}")
        if not tensor.is_contiguous:
            tensor = api.copy(tensor)
        return tensor.reshape(self.rows, 1)

    def config(self, tuning: RowTuning, given: Mapping[str, int | str] | None) -> RowConfig:
        return RowConfig.of(given) if given is not None else tuning.config(self.rows, self.cols, self.dtype)

    @property
    def stats_shape(self) -> list[int]:
        return [*self.shape[:-1], 1]


def _weight(call: _Rows, value: Any, name: str) -> cutile.Tensor:
    tensor = call.reads[name] = _rows.vector(value, call.cols, call.function, name)
    return tensor


def _finish(call: _Rows, results: list[Output]) -> Any:
    def finish() -> Any:
        made = tuple(result.result() for result in results)
        return made[0] if len(made) == 1 else made
    return finish


def _plan_rms_norm(x: Any, weight: Any, eps: float = 1e-6, *, out: Any = None,
                   config: Mapping[str, int | str] | None = None) -> Plan:
    """RMSNorm over the last dim: ``x * rsqrt(mean(x^2, -1) + eps) * weight``.

    Args:
        x: f16, bf16 or f32, any leading shape; a cutile tensor or any DLPack / CUDA Array
            Interface tensor.
        weight: shape ``(x.shape[-1],)``, f16, bf16 or f32.
        out: the result (x's shape and dtype); else a new tensor of x's kind.
        config: a row config (`ROW_SPACE`'s parameters) instead of the tuned one.
    Returns:
        the normalized x (``rms_norm.launch(..., out=)``: the pending launch).
    """
    call = _Rows("rms_norm", x)
    w = _weight(call, weight, "weight")
    eps = _rows.check_eps(eps, call.function)
    result = output(out, call.shape, call.dtype, call.operand, call.function, "out", call.reads)
    if call.empty:
        return Plan(None, _finish(call, [result]))
    chosen = call.config(_TUNING["rms_norm"], config)
    tile_rows, tile_cols, one_pass = chosen.tile(call.cols)
    z = call.view(result.tensor, "out", writable=True)
    target = z.partition([tile_rows, tile_cols]) if one_pass else _rows.persistent(z, (tile_rows, tile_cols),
                                                                                    chosen.occupancy)
    launch = rms_norm_kernel(call.dtype, w.dtype, one_pass, chosen.hints)(target, call.view(call.tensor, "x"), w, eps,
                                                                           1.0 / call.cols)
    return Plan(launch, _finish(call, [result]))


class _AddRmsNormPlan(NamedTuple):
    """What a checked `add_rms_norm` of 2-D cutile tensors with both outputs given
    launches, from its layouts alone: the kernel, its tile and whether a row takes one
    pass, the blocks per SM of a persistent one, and ``1 / cols``."""

    kernel: Any
    tile: tuple[int, int]
    one_pass: bool
    occupancy: int
    inv_cols: float


# (the operands' layouts and memory) -> the plan of an add_rms_norm call in them (the memory
# is in the key: the outputs' overlap checks depend on it)
_ADD_RMS_NORM_PLANS: KeptPlans[_AddRmsNormPlan] = KeptPlans()


def _layout(t: Any) -> tuple[Any, ...] | None:
    return memory_layout(t) if type(t) is cutile.Tensor and t.ndim == 2 else None


def _add_rms_norm_key(x: Any, residual: Any, weight: Any, out: Any, config: Any) -> tuple[Any, ...] | None:
    """The key of a call of 2-D cutile tensors (the weight 1-D), both outputs given and no config=."""
    if config is not None or type(out) is not tuple or len(out) != 2 or type(weight) is not cutile.Tensor:
        return None
    layouts = (_layout(x), _layout(residual), _layout(out[0]), _layout(out[1]))
    if None in layouts:
        return None
    return (*layouts, memory_layout(weight))


def _plan_add_rms_norm(x: Any, residual: Any, weight: Any, eps: float = 1e-6, *, out: Any = None,
                       config: Mapping[str, int | str] | None = None) -> Plan:
    """The residual add and RMSNorm of a transformer block in one pass:
    ``sum = x + residual`` (rounded to x's dtype) and ``normed = rms_norm(sum, weight, eps)``.

    Args:
        x, residual: one shape and dtype (f16, bf16, f32).
        weight: shape ``(x.shape[-1],)``.
        out: None or a tuple ``(sum, normed)`` (either may be None).
    Returns:
        ``(sum, normed)``, of x's kind.
    """
    key = _add_rms_norm_key(x, residual, weight, out, config)
    kept = _ADD_RMS_NORM_PLANS.get(key) if key is not None else None
    if kept is not None:  # every check but those of what can change (eps, consumed tensors) came out so
        eps = _rows.check_eps(eps, "add_rms_norm")
        s, z = out[0].permute(0, 1), out[1].permute(0, 1)  # (a view refuses a consumed tensor)
        if kept.one_pass:
            targets = (s.partition(list(kept.tile)), z.partition(list(kept.tile)))
        else:
            targets = (_rows.persistent(s, kept.tile, kept.occupancy), _rows.persistent(z, kept.tile, kept.occupancy))
        launch = kept.kernel(*targets, x.permute(0, 1), residual.permute(0, 1), weight, eps, kept.inv_cols)
        sum_out, normed_out = out
        return Plan(launch, lambda: (sum_out, normed_out))
    call = _Rows("add_rms_norm", x)
    r = call.like(residual, "residual")
    w = _weight(call, weight, "weight")
    eps = _rows.check_eps(eps, call.function)
    given = _rows.outputs(out, 2, call.function, "sum, normed")
    results = [output(given[0], call.shape, call.dtype, call.operand, call.function, "out[0] (sum)", call.reads),
               output(given[1], call.shape, call.dtype, call.operand, call.function, "out[1] (normed)", call.reads)]
    if call.empty:
        return Plan(None, _finish(call, results))
    chosen = call.config(_TUNING["add_rms_norm"], config)
    tile_rows, tile_cols, one_pass = chosen.tile(call.cols)
    s = call.view(results[0].tensor, "out[0] (sum)", writable=True)
    z = call.view(results[1].tensor, "out[1] (normed)", writable=True)
    if one_pass:
        targets = (s.partition([tile_rows, tile_cols]), z.partition([tile_rows, tile_cols]))
    else:
        targets = (_rows.persistent(s, (tile_rows, tile_cols), chosen.occupancy),
                   _rows.persistent(z, (tile_rows, tile_cols), chosen.occupancy))
    kernel = add_rms_norm_kernel(call.dtype, w.dtype, one_pass, chosen.hints)
    launch = kernel(*targets, call.view(call.tensor, "x"), r, w, eps, 1.0 / call.cols)
    if key is not None:  # (2-D cutile tensors: read as they are, as the kept plan reads them)
        _ADD_RMS_NORM_PLANS.keep(key, _AddRmsNormPlan(kernel, (tile_rows, tile_cols), one_pass, chosen.occupancy,
                                                      1.0 / call.cols))
    return Plan(launch, _finish(call, results))


def _plan_layer_norm(x: Any, weight: Any, bias: Any, eps: float = 1e-5, *, return_stats: bool = False,
                     out: Any = None, config: Mapping[str, int | str] | None = None) -> Plan:
    """LayerNorm over the last dim: ``(x - mean) * rsqrt(var + eps) * weight + bias``
    (the biased variance, as torch's).

    Args:
        x: f16, bf16 or f32, any leading shape.
        weight, bias: shape ``(x.shape[-1],)``, one dtype.
        return_stats: also return each row's mean and rstd (f32, shape
            ``x.shape[:-1] + (1,)``), what `layer_norm_backward` takes.
        out: the result; with ``return_stats`` a tuple ``(y, mean, rstd)`` (each may be None).
    Returns:
        y, or ``(y, mean, rstd)``.
    """
    call = _Rows("layer_norm", x)
    w = _weight(call, weight, "weight")
    b = _weight(call, bias, "bias")
    if b.dtype != w.dtype:
        raise cutile.ArgumentTypeError(f"layer_norm: bias has dtype {b.dtype} and weight {w.dtype}; they must agree")
    eps = _rows.check_eps(eps, call.function)
    given = _rows.outputs(out, 3, call.function, "y, mean, rstd") if return_stats else [out, None, None]
    y_name = "out[0] (y)" if return_stats else "out"
    results = [output(given[0], call.shape, call.dtype, call.operand, call.function, y_name, call.reads)]
    if return_stats:  # (made only when returned: the kernels without them write none)
        results += [output(given[1], call.stats_shape, f32, call.operand, call.function, "out[1] (mean)", call.reads),
                    output(given[2], call.stats_shape, f32, call.operand, call.function, "out[2] (rstd)", call.reads)]
    finish = _finish(call, results)
    if call.empty:
        return Plan(None, finish)
    chosen = call.config(_TUNING["layer_norm"], config)
    tile_rows, tile_cols, one_pass = chosen.tile(call.cols)
    x2d = call.view(call.tensor, "x")
    z = call.view(results[0].tensor, "out", writable=True)
    scalars = (eps, 1.0 / call.cols, call.cols)
    if not return_stats:
        if one_pass:
            launch = layer_norm_kernel(call.dtype, w.dtype, False, chosen.hints)(
                z.partition([tile_rows, tile_cols]), x2d, w, b, *scalars, MASKED=tile_cols > call.cols)
        else:
            launch = layer_norm_chunked_kernel(call.dtype, w.dtype, chosen.hints)(
                _rows.persistent(z, (tile_rows, tile_cols), chosen.occupancy), x2d, w, b, *scalars)
        return Plan(launch, finish)
    mean, rstd = (r.tensor.reshape(call.rows, 1) for r in results[1:])
    if one_pass:
        launch = layer_norm_kernel(call.dtype, w.dtype, True, chosen.hints)(
            z.partition([tile_rows, tile_cols]), mean.partition([tile_rows, 1]), rstd.partition([tile_rows, 1]),
            x2d, w, b, *scalars, MASKED=tile_cols > call.cols)
        return Plan(launch, finish)
    chunks = -(-call.cols // tile_cols)
    stats = layer_norm_stats_kernel(call.dtype, chosen.hints)(mean.partition([tile_rows, 1]),
                                                              rstd.partition([tile_rows, 1]), x2d, *scalars, chunks,
                                                              BN=tile_cols)

    def apply(written: tuple[cutile.Partition, ...]) -> Any:
        means, rstds = (p.unpartition() for p in written[:2])
        return layer_norm_apply_kernel(call.dtype, w.dtype, chosen.hints)(z.partition([tile_rows, tile_cols]),
                                                                          call.view(call.tensor, "x"), means, rstds,
                                                                          w, b)
    return Plan(_rows.then(stats, apply), finish)


#: the column-sum stage of LayerNorm's backward: tiles of (rows, columns), and the
#: blocks its first kernel aims for (a few per SM of an H200). Wide, short tiles: each
#: row of a tile is 4 KiB (f32) or 2 KiB (bf16) read in one piece; (32, 64) tiles read
#: 256-byte pieces and took 1.3 of the 1.85 ms of a 16384 x 8192 f32 backward on the H200,
#: (4, 1024) ones give 0.79 ms in all (bf16 1.52 -> 0.64). Not a tuned parameter: the
#: record's configs are the input-gradient kernel's, whose speed this stage does not change
PARTIAL_TILE = (4, 1024)
PARTIAL_BLOCKS = 528
MAX_SPLITS = 64


def _plan_layer_norm_backward(dy: Any, x: Any, weight: Any, mean: Any, rstd: Any, *, out: Any = None,
                              config: Mapping[str, int | str] | None = None) -> Plan:
    """LayerNorm's gradients: ``(dx, dweight, dbias)`` from the output gradient ``dy``, the
    forward's input ``x``, ``weight``, and the ``mean`` and ``rstd`` that
    ``layer_norm(..., return_stats=True)`` returns.

    Args:
        dy: x's shape and dtype.
        mean, rstd: f32, one value per row (any shape of that size).
        out: None or a tuple ``(dx, dweight, dbias)`` (each may be None).
    Returns:
        ``(dx, dweight, dbias)``: dx of x's dtype, dweight and dbias of weight's.
    """
    call = _Rows("layer_norm_backward", x)
    g = call.like(dy, "dy")
    w = _weight(call, weight, "weight")
    m, r = call.stats(mean, "mean"), call.stats(rstd, "rstd")
    given = _rows.outputs(out, 3, call.function, "dx, dweight, dbias")
    results = [output(given[0], call.shape, call.dtype, call.operand, call.function, "out[0] (dx)", call.reads),
               output(given[1], [call.cols], w.dtype, call.operand, call.function, "out[1] (dweight)", call.reads),
               output(given[2], [call.cols], w.dtype, call.operand, call.function, "out[2] (dbias)", call.reads)]
    finish = _finish(call, results)
    if call.empty:
        return Plan(None, _zero_gradients(call, results, finish))
    chosen = call.config(_TUNING["layer_norm_backward"], config)
    tile_rows, tile_cols, one_pass = chosen.tile(call.cols)
    x2d = call.view(call.tensor, "x")
    dx = call.view(results[0].tensor, "out[0] (dx)", writable=True)
    target = dx.partition([tile_rows, tile_cols]) if one_pass else _rows.persistent(dx, (tile_rows, tile_cols),
                                                                                     chosen.occupancy)
    dx_launch = layer_norm_dx_kernel(call.dtype, w.dtype, one_pass, chosen.hints)(target, g, x2d, w, m, r,
                                                                                   1.0 / call.cols)

    part_rows, part_cols = PARTIAL_TILE
    part_cols = min(part_cols, _rows.next_pow2(call.cols))
    row_tiles = -(-call.rows // part_rows)
    col_tiles = -(-call.cols // part_cols)
    splits = min(row_tiles, MAX_SPLITS, max(1, PARTIAL_BLOCKS // col_tiles))
    tiles_per_split = -(-row_tiles // splits)
    splits = -(-row_tiles // tiles_per_split)  # no split left without rows
    pw, pb = api.empty([splits, call.cols], f32), api.empty([splits, call.cols], f32)
    partials = layer_norm_partials_kernel(call.dtype)(
        pw.permute(0, 1).partition([1, part_cols]), pb.permute(0, 1).partition([1, part_cols]),
        call.view(g, "dy"), call.view(call.tensor, "x"), m.permute(0, 1), r.permute(0, 1), tiles_per_split,
        BM=part_rows)
    padded_splits = _rows.next_pow2(splits)
    sum_cols = max(1, min(_rows.next_pow2(call.cols), 4096 // padded_splits))

    def sums(written: tuple[cutile.Partition, ...]) -> Any:
        return column_sum_kernel(w.dtype)(results[1].tensor.reshape(call.cols).partition([sum_cols]),
                                          results[2].tensor.reshape(call.cols).partition([sum_cols]),
                                          *(p.unpartition() for p in written[:2]), padded_splits)
    work = _rows.then(dx_launch, lambda _: partials, sums)
    return Plan(work, finish)


def _zero_gradients(call: _Rows, results: list[Output], finish: Any) -> Any:
    """No rows: dx is empty and the weight's gradients are zeros."""
    def zero_and_finish() -> Any:
        if call.cols:
            for result in results[1:]:
                tile = min(4096, _rows.next_pow2(call.cols))
                zero_kernel(result.tensor.dtype)(result.tensor.reshape(call.cols).partition([tile])).sync()
        return finish()
    return zero_and_finish


rms_norm = _rows.row_function(_plan_rms_norm)
add_rms_norm = _rows.row_function(_plan_add_rms_norm)
layer_norm = _rows.row_function(_plan_layer_norm)
layer_norm_backward = _rows.row_function(_plan_layer_norm_backward)


# -- tuning ---------------------------------------------------------------------------------------

def _inputs(rows: int, cols: int, dtype: DType) -> tuple[Any, ...]:
    x, xv = _rows.random_rows(rows, cols, dtype, seed=0, scale=2.0, shift=0.5)
    w, wv = _rows.random_rows(1, cols, dtype, seed=1)
    sample = _rows.checked_rows(rows)
    return x, xv, w.reshape(cols), wv[0], sample


def _rms_reference(xv: Any, wv: Any) -> Any:
    return xv / np.sqrt((xv * xv).mean(axis=1, keepdims=True) + 1e-6) * wv


def _build_rms_norm(config: tune.Config, rows: int, cols: int, dtype: DType) -> tuple[Any, Any]:
    def data() -> tuple[Any, ...]:
        x, xv, w, wv, sample = _inputs(rows, cols, dtype)
        return x, w, sample, _rms_reference(xv[sample], wv)
    x, w, sample, expected = _rows.cached(("rms_norm", rows, cols, dtype), data)
    out = _rows.poisoned([rows, cols], dtype)
    return (lambda: rms_norm.launch(x, w, 1e-6, out=out, config=config),
            lambda: _rows.close(out, expected, dtype, sample))


def _build_add_rms_norm(config: tune.Config, rows: int, cols: int, dtype: DType) -> tuple[Any, Any]:
    def data() -> tuple[Any, ...]:
        x, xv, w, wv, sample = _inputs(rows, cols, dtype)
        r, rv = _rows.random_rows(rows, cols, dtype, seed=2)
        sv = xv[sample] + rv[sample]
        return x, r, w, sample, sv, _rms_reference(sv, wv)
    x, r, w, sample, sv, expected = _rows.cached(("add_rms_norm", rows, cols, dtype), data)
    total, normed = _rows.poisoned([rows, cols], dtype), _rows.poisoned([rows, cols], dtype, slot=1)

    def check() -> bool:
        return _rows.close(total, sv, dtype, sample) and _rows.close(normed, expected, dtype, sample)
    return lambda: add_rms_norm.launch(x, r, w, 1e-6, out=(total, normed), config=config), check


def _layer_norm_reference(xv: Any, wv: Any, bv: Any, eps: float) -> tuple[Any, Any, Any]:
    mean = xv.mean(axis=1, keepdims=True)
    rstd = 1.0 / np.sqrt(xv.var(axis=1, keepdims=True) + eps)
    return (xv - mean) * rstd * wv + bv, mean, rstd


def _build_layer_norm(config: tune.Config, rows: int, cols: int, dtype: DType) -> tuple[Any, Any]:
    def data() -> tuple[Any, ...]:
        x, xv, w, wv, sample = _inputs(rows, cols, dtype)
        b, bv = _rows.random_rows(1, cols, dtype, seed=3)
        return x, w, b.reshape(cols), sample, _layer_norm_reference(xv[sample], wv, bv[0], 1e-5)[0]
    x, w, b, sample, expected = _rows.cached(("layer_norm", rows, cols, dtype), data)
    out = _rows.poisoned([rows, cols], dtype)
    return (lambda: layer_norm.launch(x, w, b, 1e-5, out=out, config=config),
            lambda: _rows.close(out, expected, dtype, sample))


def _build_layer_norm_backward(config: tune.Config, rows: int, cols: int, dtype: DType) -> tuple[Any, Any]:
    def data() -> tuple[Any, ...]:
        x, xv, w, wv, sample = _inputs(rows, cols, dtype)
        dy, gv = _rows.random_rows(rows, cols, dtype, seed=4)
        _, mean, rstd = _layer_norm_reference(xv, wv, 0.0, 1e-5)
        m, r = api.from_numpy(mean.astype(np.float32)), api.from_numpy(rstd.astype(np.float32))
        dx, dw, db = layer_norm_backward_reference(gv, xv, wv, mean, rstd)
        return x, w, dy, m, r, sample, dx[sample], dw, db
    x, w, dy, m, r, sample, dx_rows, dw_all, db_all = _rows.cached(("layer_norm_backward", rows, cols, dtype), data)
    dx = _rows.poisoned([rows, cols], dtype)
    dw, db = _rows.poisoned([cols], w.dtype), _rows.poisoned([cols], w.dtype, slot=1)

    def check() -> bool:
        return (_rows.close(dx, dx_rows, dtype, sample) and _rows.close(dw, dw_all, dtype)
                and _rows.close(db, db_all, dtype))
    return lambda: layer_norm_backward.launch(dy, x, w, m, r, out=(dx, dw, db), config=config), check


def layer_norm_backward_reference(dy: Any, x: Any, weight: Any, mean: Any, rstd: Any) -> tuple[Any, Any, Any]:
    """LayerNorm's gradients in numpy (float64), rows as the last-but-one axis."""
    cols = x.shape[-1]
    dy, x = dy.reshape(-1, cols), x.reshape(-1, cols)
    mean, rstd = mean.reshape(-1, 1), rstd.reshape(-1, 1)
    xhat = (x - mean) * rstd
    g = dy * weight
    dx = (g - g.mean(axis=1, keepdims=True) - xhat * (g * xhat).mean(axis=1, keepdims=True)) * rstd
    return dx, (dy * xhat).sum(axis=0), dy.sum(axis=0)


def layer_norm_default(rows: int, cols: int, dtype: Any) -> tune.Config:
    """`_rows.default_config`, but a 16-bit row tile of 8192 elements (which it gives 8
    worker warps, 2 blocks an SM) takes 4 worker warps and 4 blocks an SM: the best of the
    configs timed on the H200 for 16384 x 8192 bf16 (0.87x of copy bandwidth against 0.61;
    f32 rows keep the generic default, 0.88x there)."""
    config = _rows.default_config(rows, cols, dtype)
    elements = int(config["tile_rows"]) * _rows.next_pow2(cols)
    if _rows.itemsize_of(dtype) == 2 and config["num_worker_warps"] == 8 and elements <= 4 * _rows.ELEMENTS_PER_WARP:
        return {**config, "occupancy": 4, "num_worker_warps": 4}
    return config


#: what each function's record hashes: the factories of the kernels it launches, the
#: helpers they inline and their parameters' kinds (so that editing one function's kernels
#: stales its record alone)
_SOURCES = {
    "rms_norm": _rows.source_of(rms_norm_kernel, _column_row, _parameter_kinds),
    "add_rms_norm": _rows.source_of(add_rms_norm_kernel, _column_row, _parameter_kinds),
    "layer_norm": _rows.source_of(layer_norm_kernel, layer_norm_chunked_kernel, layer_norm_stats_kernel,
                                  layer_norm_apply_kernel, _layer_norm_tile, _row_moments, _merged_stats, _column_row,
                                  _parameter_kinds),
    "layer_norm_backward": _rows.source_of(layer_norm_dx_kernel, layer_norm_partials_kernel, column_sum_kernel,
                                           zero_kernel, _dx_terms, _column_row, _parameter_kinds),
}
_TUNING = {
    "rms_norm": RowTuning("rms_norm", _SOURCES["rms_norm"], _build_rms_norm),
    "add_rms_norm": RowTuning("add_rms_norm", _SOURCES["add_rms_norm"], _build_add_rms_norm),
    "layer_norm": RowTuning("layer_norm", _SOURCES["layer_norm"], _build_layer_norm, default=layer_norm_default),
    "layer_norm_backward": RowTuning("layer_norm_backward", _SOURCES["layer_norm_backward"],
                                     _build_layer_norm_backward),
}


def tuning(name: str) -> RowTuning:
    """The configs of ``name`` (``rms_norm``, ``add_rms_norm`` (qk_norm uses rms_norm's),
    ``layer_norm``, ``layer_norm_backward``): its tuner, `RowTuning.search` and `RowTuning.record`."""
    if name not in _TUNING:
        raise cutile.ArgumentError(f"tuning: no row kernel {name!r}; expected one of {sorted(_TUNING)}")
    return _TUNING[name]
