"""Reductions and scans along one axis of a tile."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

import cutile_ir as ir

from cutile_compiler import _dtypes as dt
from cutile_compiler._ir import Operation
from cutile_compiler._lowering import tile_type
from cutile_compiler._opdefs._base import EvalContext, Op, OpDef, RuleError, register
from cutile_compiler._opdefs.elementwise import Elementwise, ElementwiseOp, numpy_dtype, tile_operand
from cutile_compiler._types import KType, TileType

if TYPE_CHECKING:
    from cutile_compiler._lowering import Lowering

def _is_float(value: Any) -> bool:
    return bool(np.issubdtype(value.dtype, np.floating) or value.dtype.kind == "V")  # (ml_dtypes' bf16: "V")


# Float max and min reduce as the GPU's maxf/minf combine (NaN is a missing value) from
# a NaN identity, so the result does not depend on the reduction's tree: a row of
# numbers and NaN gives the extreme of its numbers, a row of only NaN gives NaN.
def _max(value: Any, axis: int) -> Any:
    return np.fmax.reduce(value, axis=axis) if _is_float(value) else np.max(value, axis=axis)


def _min(value: Any, axis: int) -> Any:
    return np.fmin.reduce(value, axis=axis) if _is_float(value) else np.min(value, axis=axis)


def _arg(extreme: Callable[[Any, int], Any]) -> Callable[..., Any]:
    """argmax/argmin as the lowering's total order picks: the first position of the
    extreme among the numbers (a NaN is below every number); a row of only NaN gives
    its first position, 0, so the result is always a valid index."""
    def arg(value: Any, axis: int) -> Any:
        if not _is_float(value):
            return (np.argmax if extreme is _max else np.argmin)(value, axis=axis)
        hits = (value == np.expand_dims(extreme(value, axis), axis)) & ~np.isnan(value.astype(np.float32))
        return np.argmax(hits, axis=axis)  # (all False, a row of NaN: 0)
    return arg


_REDUCERS: dict[str, Callable[..., Any]] = {
    "sum": np.sum, "prod": np.prod, "max": _max, "min": _min,
    "argmax": _arg(_max), "argmin": _arg(_min),
}
_SCANS: dict[str, Callable[..., Any]] = {"sum": np.cumsum, "prod": np.cumprod}


def _axis(tile: TileType, attrs: dict[str, Any], op: str) -> int:
    axis: int = attrs["axis"]
    if not 0 <= axis < tile.rank:
        raise RuleError(f"{op}: axis {axis} is out of range for a rank-{tile.rank} tile")
    return axis


class Reduce(OpDef):
    """``reduce(x) {kind, axis}``: x reduced along ``axis`` (the axis is removed).

    ``argmax``/``argmin`` give i32 positions (the first one on ties); integer
    sums wrap like the GPU's, float sums of f16/bf16 are accumulated in f32.
    """

    def infer(self, operand_types: Sequence[KType], attrs: dict[str, Any]) -> tuple[KType, ...]:
        tile = tile_operand(operand_types, 0, attrs.get("kind", "reduce"))
        kind = attrs["kind"]
        if kind not in _REDUCERS:
            raise RuleError(f"reduce: unknown reduction {kind!r}")
        axis = _axis(tile, attrs, kind)
        if tile.dtype is dt.bool_ and kind in ("sum", "prod"):
            raise RuleError(f"{kind}: cannot reduce a bool tile; convert it with astype first")
        shape = tile.shape[:axis] + tile.shape[axis + 1 :]
        dtype = dt.i32 if kind in ("argmax", "argmin") else tile.dtype
        return (TileType(dtype, shape),)

    def evaluate(self, ctx: EvalContext, op: Operation, args: Sequence[Any]) -> Sequence[Any]:
        kind, axis = op.attrs["kind"], op.attrs["axis"]
        value = args[0]
        result_type = op.results[0].type
        assert isinstance(result_type, TileType)
        if kind in ("sum", "prod") and value.dtype.kind == "f" and value.dtype.itemsize < 4:
            value = value.astype(np.float32)
        with np.errstate(all="ignore"):
            out = _REDUCERS[kind](value, axis=axis)
        return (np.asarray(out).astype(numpy_dtype(result_type.dtype)),)

    def lower(self, ctx: Lowering, op: Operation, args: Sequence[Any]) -> Sequence[Any]:
        return _lower_reduce(ctx, op, args)


class Scan(OpDef):
    """``scan(x) {kind, axis, reverse}``: inclusive prefix sums or products."""

    def infer(self, operand_types: Sequence[KType], attrs: dict[str, Any]) -> tuple[KType, ...]:
        tile = tile_operand(operand_types, 0, "scan")
        if attrs["kind"] not in _SCANS:
            raise RuleError(f"scan: unknown scan {attrs['kind']!r}")
        _axis(tile, attrs, "cum" + attrs["kind"])
        return (tile,)

    def evaluate(self, ctx: EvalContext, op: Operation, args: Sequence[Any]) -> Sequence[Any]:
        kind, axis = op.attrs["kind"], op.attrs["axis"]
        value = args[0]
        if op.attrs.get("reverse"):
            value = np.flip(value, axis)
        with np.errstate(all="ignore"):
            out = _SCANS[kind](value, axis=axis, dtype=value.dtype)
        if op.attrs.get("reverse"):
            out = np.flip(out, axis)
        return (np.ascontiguousarray(out),)

    def lower(self, ctx: Lowering, op: Operation, args: Sequence[Any]) -> Sequence[Any]:
        return _lower_scan(ctx, op, args)




# -- lowering to Tile IR -------------------------------------------------------------------
def _identity(kind: str, dtype: dt.DType) -> int | float:
    if kind == "sum":
        return 0
    if kind == "prod":
        return 1
    if dtype.is_float:
        return float("nan")  # (maxf and minf leave a NaN operand out; see _max)
    largest: int | float
    if dtype.is_signed:
        largest = (1 << (dtype.bits - 1)) - 1
    else:
        largest = (1 << dtype.bits) - 1
    smallest: int | float = -(1 << (dtype.bits - 1)) if dtype.is_signed else 0
    return smallest if kind in ("max", "argmax") else largest


#: The element-wise op each named reduction and scan combines by
_COMBINERS: dict[str, Op] = {"sum": ElementwiseOp.ADD, "prod": ElementwiseOp.MUL, "max": ElementwiseOp.MAXIMUM,
                             "min": ElementwiseOp.MINIMUM}


def combine(ctx: Lowering, kind: str, dtype: dt.DType, a: Any, b: Any) -> Any:
    """The Tile IR of one step of reduction or scan ``kind`` on scalars a and b: its
    element-wise op's."""
    combiner = _COMBINERS[kind].definition
    assert isinstance(combiner, Elementwise)
    return combiner.emit(ctx, dtype, [a, b])


def _widened(dtype: dt.DType, kind: str) -> dt.DType:
    """Sums and products of 16-bit floats accumulate in f32 (as the interpreter does)."""
    return dt.f32 if kind in ("sum", "prod") and dtype.is_float and dtype.bits < 32 else dtype


def _lower_reduce(ctx: Lowering, op: Operation, args: Sequence[Any]) -> Sequence[Any]:
    builder = ctx.builder
    kind, axis = op.attrs["kind"], op.attrs["axis"]
    source = op.operands[0].type
    assert isinstance(source, TileType)
    if kind in ("argmax", "argmin"):
        return (_lower_arg_reduce(ctx, op, args[0], source, kind, axis),)
    work = _widened(source.dtype, kind)
    value = args[0]
    if work is not source.dtype:
        value = builder.ftof(value, rounding_mode="nearest_even", result_types=[tile_type(source.with_dtype(work))])
    with builder.reduce([value], axis, [_identity(kind, work)]) as body:
        element, accumulator = body.args
        builder.yield_([combine(ctx, kind, work, element, accumulator)])
    result = body.results[0]
    if work is not source.dtype:
        result = builder.ftof(result, rounding_mode="nearest_even", result_types=[tile_type(op.results[0].type)])
    return (result,)


def _lower_arg_reduce(ctx: Lowering, op: Operation, value: Any, source: TileType, kind: str, axis: int) -> Any:
    """argmax/argmin: a two-operand reduce of (value, position) under a total order, so
    that any reduction tree gives the same position: a larger (smaller) value wins, ties
    go to the lower position, and a float NaN is below every number (NaN against NaN: a
    tie). The identity, (NaN, 2**31 - 1), loses to every element."""
    builder = ctx.builder
    positions_1d = builder.iota(result_types=[ir.tile((source.shape[axis],), ir.I32)])
    shape_1 = tuple(source.shape[axis] if i == axis else 1 for i in range(source.rank))
    positions = builder.reshape(positions_1d, result_types=[ir.tile(shape_1, ir.I32)])
    positions = builder.broadcast(positions, result_types=[tile_type(TileType(dt.i32, source.shape))])
    better = "greater_than" if kind == "argmax" else "less_than"
    with builder.reduce([value, positions], axis, [_identity(kind, source.dtype), (1 << 31) - 1]) as body:
        v_new, v_acc, i_new, i_acc = body.args
        earlier = builder.cmpi(i_new, i_acc, comparison_predicate="less_than", signedness="signed")
        if source.dtype.is_float:
            strictly = builder.cmpf(v_new, v_acc, comparison_predicate=better, comparison_ordering="ordered")
            equal = builder.cmpf(v_new, v_acc, comparison_predicate="equal", comparison_ordering="ordered")
            new_is_nan = builder.cmpf(v_new, v_new, comparison_predicate="not_equal", comparison_ordering="unordered")
            acc_is_nan = builder.cmpf(v_acc, v_acc, comparison_predicate="not_equal", comparison_ordering="unordered")
            # a number beats a NaN, beats a worse number, or ties one at a later position
            by_number = builder.ori(acc_is_nan, builder.ori(strictly, builder.andi(equal, earlier)))
            take = builder.select(new_is_nan, builder.andi(acc_is_nan, earlier), by_number)
        else:
            sign = source.dtype.signedness
            strictly = builder.cmpi(v_new, v_acc, comparison_predicate=better, signedness=sign)
            equal = builder.cmpi(v_new, v_acc, comparison_predicate="equal", signedness=sign)
            take = builder.ori(strictly, builder.andi(equal, earlier))
        builder.yield_([builder.select(take, v_new, v_acc), builder.select(take, i_new, i_acc)])
    return body.results[1]


def _lower_scan(ctx: Lowering, op: Operation, args: Sequence[Any]) -> Sequence[Any]:
    builder = ctx.builder
    kind, axis = op.attrs["kind"], op.attrs["axis"]
    source = op.operands[0].type
    assert isinstance(source, TileType)
    with builder.scan([args[0]], axis, [_identity(kind, source.dtype)], reverse=bool(op.attrs.get("reverse"))) as body:
        element, accumulator = body.args
        builder.yield_([combine(ctx, kind, source.dtype, element, accumulator)])
    return (body.results[0],)


# -- reductions and scans with a user's combining function ----------------------------------------
def _fn_types(operand_types: Sequence[KType], attrs: dict[str, Any], op: str) -> list[TileType]:
    tiles = [tile_operand(operand_types, i, op) for i in range(len(operand_types))]
    if not tiles:
        raise RuleError(f"{op}: needs at least one tile")
    shape = tiles[0].shape
    for tile in tiles[1:]:
        if tile.shape != shape:
            raise RuleError(f"{op}: the tiles must have one shape, got {list(shape)} and {list(tile.shape)}")
    _axis(tiles[0], attrs, op)
    identities = attrs["identities"]
    if len(identities) != len(tiles):
        raise RuleError(f"{op}: {len(tiles)} tile(s) need {len(tiles)} identity value(s), got {len(identities)}")
    return tiles


def _run_combine(ctx: EvalContext, op: Operation, elements: Sequence[Any], accumulators: Sequence[Any]) -> list[Any]:
    args: list[Any] = []
    for element, accumulator in zip(elements, accumulators):
        args += [element, accumulator]
    ended = ctx.run_block(op.regions[0], args)
    return [np.asarray(v) for v in ended.values]


class ReduceWith(OpDef):
    """``reduce_fn(*xs) {axis, identities} [body]``: xs reduced along ``axis`` by the
    body, which gets (element, accumulator) scalar pairs per tile and yields the new
    accumulators. The body must be associative and commutative (the GPU combines
    in a tree); the interpreter folds in index order, all other positions at once."""

    def infer(self, operand_types: Sequence[KType], attrs: dict[str, Any]) -> tuple[KType, ...]:
        tiles = _fn_types(operand_types, attrs, "reduce")
        axis = attrs["axis"]
        return tuple(TileType(t.dtype, t.shape[:axis] + t.shape[axis + 1:]) for t in tiles)

    def evaluate(self, ctx: EvalContext, op: Operation, args: Sequence[Any]) -> Sequence[Any]:
        axis = op.attrs["axis"]
        values = [np.moveaxis(np.asarray(a), axis, 0) for a in args]
        accumulators = [np.full(v.shape[1:], identity, dtype=v.dtype)
                        for v, identity in zip(values, op.attrs["identities"])]
        with np.errstate(all="ignore"):
            for position in range(values[0].shape[0]):
                new = _run_combine(ctx, op, [v[position] for v in values], accumulators)
                accumulators = [np.broadcast_to(n, a.shape).astype(a.dtype) for n, a in zip(new, accumulators)]
        return [np.ascontiguousarray(a) for a in accumulators]

    def lower(self, ctx: Lowering, op: Operation, args: Sequence[Any]) -> Sequence[Any]:
        with ctx.builder.reduce(list(args), op.attrs["axis"], list(op.attrs["identities"])) as body:
            _lower_combine(ctx, op, body.args)
        return list(body.results)


class ScanWith(OpDef):
    """``scan_fn(*xs) {axis, identities, reverse} [body]``: inclusive scans of xs along
    ``axis`` combined by the body (as for ``reduce_fn``)."""

    def infer(self, operand_types: Sequence[KType], attrs: dict[str, Any]) -> tuple[KType, ...]:
        return tuple(_fn_types(operand_types, attrs, "scan"))

    def evaluate(self, ctx: EvalContext, op: Operation, args: Sequence[Any]) -> Sequence[Any]:
        axis = op.attrs["axis"]
        values = [np.moveaxis(np.asarray(a), axis, 0) for a in args]
        accumulators = [np.full(v.shape[1:], identity, dtype=v.dtype)
                        for v, identity in zip(values, op.attrs["identities"])]
        outputs = [np.empty_like(v) for v in values]
        length = values[0].shape[0]
        order = range(length - 1, -1, -1) if op.attrs.get("reverse") else range(length)
        with np.errstate(all="ignore"):
            for position in order:
                new = _run_combine(ctx, op, [v[position] for v in values], accumulators)
                accumulators = [np.broadcast_to(n, a.shape).astype(a.dtype) for n, a in zip(new, accumulators)]
                for out, accumulator in zip(outputs, accumulators):
                    out[position] = accumulator
        return [np.ascontiguousarray(np.moveaxis(out, 0, axis)) for out in outputs]

    def lower(self, ctx: Lowering, op: Operation, args: Sequence[Any]) -> Sequence[Any]:
        with ctx.builder.scan(list(args), op.attrs["axis"], list(op.attrs["identities"]),
                              reverse=bool(op.attrs.get("reverse"))) as body:
            _lower_combine(ctx, op, body.args)
        return list(body.results)


def _lower_combine(ctx: Lowering, op: Operation, ir_args: Sequence[Any]) -> None:
    region = op.regions[0]
    for ours, theirs in zip(region.args, ir_args):
        ctx.values[ours] = theirs
    ctx.regions.append(("reduce", []))
    try:
        with ctx.region_tokens():  # a print inside starts from the chain outside; nothing flows out
            ctx.lower_block(region)
    finally:
        ctx.regions.pop()


class ReductionOp(Op):
    """Reductions and scans along an axis, by a named combiner or a kernel's function."""

    REDUCE = Reduce()
    SCAN = Scan()
    REDUCE_FN = ReduceWith()
    SCAN_FN = ScanWith()


register(ReductionOp)
