"""The schedule of a mapped partition: which tile each item of a block's share is.

``schedule_item(item, *counts, *starts) {map, tensors}`` turns a flat item number
(``item`` runs over ``bid(0), bid(0) + num_blocks(0), ...`` below the product of
``counts``) into tile coordinates of the streamed axes: the leading streamed axes
in row-major order, the last two grouped by ``map`` (groups of ``map[-2]`` tile
rows, and of ``map[-1]`` tile columns within each group; ``[8, 1]`` is the
grouped order of GEMMs), each coordinate offset by its axis' start (a
``tiles_within`` sub-range; 0 otherwise).

The arithmetic is written once (`schedule_coordinates`) over an `Arithmetic`:
Python ints for the interpreter, Tile IR ops for the GPU. It is a bijection from
``range(prod(counts))`` onto the tiles of the sub-grid, so blocks taking disjoint
item numbers store disjoint tiles; the interpreter checks, per launch, that the
items it ran covered every tile of the sub-grid equally often (`EvalContext.schedule_item`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Generic, Protocol, TypeVar

import numpy as np

import cutile_ir as ir

from cutile_compiler import _dtypes as dt
from cutile_compiler._ir import Operation
from cutile_compiler._opdefs._base import EvalContext, Op, OpDef, RuleError, register
from cutile_compiler._types import KType, TileType

if TYPE_CHECKING:
    from cutile_compiler._lowering import Lowering

N = TypeVar("N")


class Arithmetic(Protocol, Generic[N]):
    """Non-negative integer arithmetic on scalars of one kind (ints, or Tile IR values)."""

    def constant(self, value: int) -> N: ...
    def add(self, a: N, b: N) -> N: ...
    def sub(self, a: N, b: N) -> N: ...
    def mul(self, a: N, b: N) -> N: ...
    def div(self, a: N, b: N) -> N: ...
    def rem(self, a: N, b: N) -> N: ...
    def min(self, a: N, b: N) -> N: ...


def schedule_coordinates(item: N, counts: Sequence[N], groups: Sequence[int], ar: Arithmetic[N]) -> list[N]:
    """The tile (one coordinate per streamed axis, from 0) of schedule item ``item``
    on a grid of ``counts`` tiles, the last two axes grouped by ``groups`` (leading
    axes' groups are 1). Every count is at least 1 and ``item < prod(counts)``."""
    rank = len(counts)
    if rank == 1:
        return [item]
    coordinates: list[N] = []
    inner = item
    if rank == 3:
        plane = ar.mul(counts[1], counts[2])
        coordinates.append(ar.div(item, plane))
        inner = ar.rem(item, plane)
    rows, columns = counts[-2], counts[-1]
    group_rows, group_columns = groups[-2], groups[-1]
    if group_rows == 1 and group_columns == 1:  # row-major
        return [*coordinates, ar.div(inner, columns), ar.rem(inner, columns)]
    gm = ar.constant(group_rows)
    band_size = ar.mul(gm, columns)  # the items of one band of group_rows tile rows
    band = ar.div(inner, band_size)
    first_row = ar.mul(band, gm)
    band_rows = ar.min(ar.sub(rows, first_row), gm)  # the last band may be shorter
    in_band = ar.rem(inner, band_size)
    if group_columns == 1:
        row = ar.add(first_row, ar.rem(in_band, band_rows))
        column = ar.div(in_band, band_rows)
    else:
        gn = ar.constant(group_columns)
        group_size = ar.mul(band_rows, gn)
        group = ar.div(in_band, group_size)
        in_group = ar.rem(in_band, group_size)
        row = ar.add(first_row, ar.rem(in_group, band_rows))
        column = ar.add(ar.mul(group, gn), ar.div(in_group, band_rows))
    return [*coordinates, row, column]


class PythonArithmetic:
    """`Arithmetic` on Python ints (the interpreter's)."""

    def constant(self, value: int) -> int:
        return value

    def add(self, a: int, b: int) -> int:
        return a + b

    def sub(self, a: int, b: int) -> int:
        return a - b

    def mul(self, a: int, b: int) -> int:
        return a * b

    def div(self, a: int, b: int) -> int:
        return a // b

    def rem(self, a: int, b: int) -> int:
        return a % b

    def min(self, a: int, b: int) -> int:
        return a if a < b else b


class TileIRArithmetic:
    """`Arithmetic` emitting i32 Tile IR ops. Every value is non-negative, so division,
    remainder and minimum are the unsigned ones (no sign fix-ups)."""

    def __init__(self, ctx: Lowering) -> None:
        self.ctx = ctx
        self.b = ctx.builder

    def constant(self, value: int) -> Any:
        return self.ctx.constant(value, TileType(dt.i32))

    def add(self, a: Any, b: Any) -> Any:
        return self.b.addi(a, b)

    def sub(self, a: Any, b: Any) -> Any:
        return self.b.subi(a, b)

    def mul(self, a: Any, b: Any) -> Any:
        return self.b.muli(a, b)

    def div(self, a: Any, b: Any) -> Any:
        return self.b.divi(a, b, signedness="unsigned", rounding="zero")

    def rem(self, a: Any, b: Any) -> Any:
        return self.b.remi(a, b, signedness="unsigned")

    def min(self, a: Any, b: Any) -> Any:
        return self.b.mini(a, b, signedness="unsigned")


_I32 = TileType(dt.i32)


class ScheduleItem(OpDef):
    """``schedule_item(item, *counts, *starts) {groups, tensors}``: the tile coordinates
    (one i32 per streamed axis) of schedule item ``item``; ``tensors`` names the mapped
    parameters whose stores it may address (for messages and the interpreter's check)."""

    has_effects = True  # the interpreter records the item: never folded or removed

    def infer(self, operand_types: Sequence[KType], attrs: dict[str, Any]) -> tuple[KType, ...]:
        groups: tuple[int, ...] = attrs["groups"]
        rank = len(groups)
        if not 1 <= rank <= 3 or any(g < 1 for g in groups) or any(g != 1 for g in groups[:-2]):
            raise RuleError(f"schedule_item: groups must be 1 to 3 positive ints, leading ones 1, got {list(groups)}")
        if len(operand_types) != 1 + 2 * rank or any(t != _I32 for t in operand_types):
            raise RuleError(f"schedule_item: takes an i32 item, {rank} counts and {rank} starts")
        return (_I32,) * rank

    def evaluate(self, ctx: EvalContext, op: Operation, args: Sequence[Any]) -> Sequence[Any]:
        rank = len(op.attrs["groups"])
        item = int(args[0])
        counts = [int(a) for a in args[1:1 + rank]]
        starts = [int(a) for a in args[1 + rank:]]
        local = schedule_coordinates(item, counts, op.attrs["groups"], PythonArithmetic())
        tile = tuple(start + c for start, c in zip(starts, local))
        ctx.schedule_item(op, tuple(counts), tuple(starts), tile)
        return tuple(np.asarray(c, dtype=np.int32) for c in tile)

    def lower(self, ctx: Lowering, op: Operation, args: Sequence[Any]) -> Sequence[Any]:
        rank = len(op.attrs["groups"])
        ar = TileIRArithmetic(ctx)
        local = schedule_coordinates(args[0], list(args[1:1 + rank]), op.attrs["groups"], ar)
        starts = args[1 + rank:]
        result: list[ir.Value] = []
        for axis, coordinate in enumerate(local):
            start_op = ctx.producers.get(op.operands[1 + rank + axis])
            is_zero = start_op is not None and start_op.opdef.static_value(start_op.attrs) == 0
            result.append(coordinate if is_zero else ar.add(starts[axis], coordinate))
        return tuple(result)


class ScheduleOp(Op):
    """The schedules of mapped partitions."""

    SCHEDULE_ITEM = ScheduleItem()


register(ScheduleOp)
