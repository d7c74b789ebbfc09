"""Reductions and scans along one axis of a tile."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from cutile_compiler import _dtypes as dt
from cutile_compiler._ir import Operation
from cutile_compiler._opdefs._base import EvalContext, OpDef, RuleError, register
from cutile_compiler._opdefs.elementwise import numpy_dtype, tile_operand
from cutile_compiler._types import KType, TileType

_REDUCERS: dict[str, Callable[..., Any]] = {
    "sum": np.sum, "prod": np.prod, "max": np.max, "min": np.min,
    "argmax": np.argmax, "argmin": np.argmin,
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

    name = "reduce"

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


class Scan(OpDef):
    """``scan(x) {kind, axis, reverse}``: inclusive prefix sums or products."""

    name = "scan"

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


REDUCE = register(Reduce())
SCAN = register(Scan())
