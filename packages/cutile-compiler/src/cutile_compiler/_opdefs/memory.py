"""Global memory: tensor shapes, partitions of tensors into tiles, tile loads and stores.

A kernel reaches global memory only through tensors (its parameters) and
partitions of them into equal tiles; a load pads the elements past a tensor's
end and a store writes only the elements inside it, so no access is ever out of
bounds. Which stores a safe kernel may make is decided by the front end.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

import cutile_ir as ir

from cutile_compiler import _dtypes as dt
from cutile_compiler._errors import bounded_repr
from cutile_compiler._ir import Operation
from cutile_compiler._lowering import PartitionInfo
from cutile_compiler._opdefs._base import EvalContext, Op, MemoryAccess, OpDef, RuleError, check_index, register
from cutile_compiler._opdefs.pointer import check_atomic_dtype, check_writable, rmw_update, tile_ir_atomic_mode
from cutile_compiler._types import KType, PartitionType, TensorType, TileType, tile_shape_problem

if TYPE_CHECKING:
    from cutile_compiler._lowering import Lowering

PADDINGS = ("zero", "neg_zero", "nan", "pos_inf", "neg_inf")


def _tensor(types: Sequence[KType], op: str) -> TensorType:
    if not isinstance(types[0], TensorType):
        raise RuleError(f"{op}: expected a tensor, got {types[0]}")
    return types[0]


def _partition(types: Sequence[KType], op: str) -> PartitionType:
    if not isinstance(types[0], PartitionType):
        raise RuleError(f"{op}: expected a partition, got {types[0]}")
    return types[0]


def _check_index_and_tile(types: Sequence[KType], partition: PartitionType, op: str) -> None:
    """Checks the operands after the partition of a tile write: (*index, value),
    with one coordinate per axis and a value of the partition's tile type."""
    rank = partition.tensor.rank
    check_index(types[1:-1], rank, op)
    value = types[-1] if len(types) >= 2 else None
    if value != partition.tile:
        raise RuleError(f"{op}: the value must be a {partition.tile}, got {value}")


class TensorDim(OpDef):
    """``tensor_dim(t) {axis}``: the extent of a tensor dimension at run time (i32)."""

    def infer(self, operand_types: Sequence[KType], attrs: dict[str, Any]) -> tuple[KType, ...]:
        tensor = _tensor(operand_types, "shape")
        if not 0 <= attrs["axis"] < tensor.rank:
            raise RuleError(f"shape: axis {attrs['axis']} out of range for a rank-{tensor.rank} tensor")
        return (TileType(dt.i32),)

    def evaluate(self, ctx: EvalContext, op: Operation, args: Sequence[Any]) -> Sequence[Any]:
        return (np.asarray(ctx.tensor_shape(args[0])[op.attrs["axis"]], dtype=np.int32),)

    def lower(self, ctx: Lowering, op: Operation, args: Sequence[Any]) -> Sequence[Any]:
        dim = args[0].dims[op.attrs["axis"]]
        if isinstance(dim, int):
            return (ctx.constant(dim, TileType(dt.i32)),)
        return (dim,)


class MakePartition(OpDef):
    """``make_partition(t) {tile_shape, padding}``: t seen as a grid of tiles."""

    def infer(self, operand_types: Sequence[KType], attrs: dict[str, Any]) -> tuple[KType, ...]:
        tensor = _tensor(operand_types, "partition")
        tile_shape: tuple[int, ...] = attrs["tile_shape"]
        if len(tile_shape) != tensor.rank:
            raise RuleError(f"partition: a rank-{tensor.rank} tensor is partitioned with {tensor.rank} tile dims, "
                            f"got {list(tile_shape)}")
        problem = tile_shape_problem(tile_shape)
        if problem is not None:
            raise RuleError(f"partition: {problem}")
        padding = attrs.get("padding", "zero")
        if not (isinstance(padding, str) and padding in PADDINGS):
            raise RuleError(f"partition: padding must be one of {', '.join(PADDINGS)}, got {bounded_repr(padding)}")
        return (PartitionType(tensor, tile_shape, attrs.get("padding", "zero")),)

    def evaluate(self, ctx: EvalContext, op: Operation, args: Sequence[Any]) -> Sequence[Any]:
        return ((args[0], op.attrs["tile_shape"], op.attrs.get("padding", "zero")),)

    def lower(self, ctx: Lowering, op: Operation, args: Sequence[Any]) -> Sequence[Any]:
        tensor = args[0]
        padding = ir.PaddingValue[op.attrs.get("padding", "zero").upper()]
        view_type = ir.PartitionViewType(op.attrs["tile_shape"], tensor.view_type, (), padding)
        return (PartitionInfo(tensor, ctx.builder.make_partition_view(tensor.view, result_types=[view_type])),)


class NumTiles(OpDef):
    """``num_tiles(p) {axis}``: how many tiles the partition has along ``axis``
    (a partial last tile counts)."""

    def infer(self, operand_types: Sequence[KType], attrs: dict[str, Any]) -> tuple[KType, ...]:
        partition = _partition(operand_types, "num_tiles")
        if not 0 <= attrs["axis"] < partition.tensor.rank:
            raise RuleError(f"num_tiles: axis {attrs['axis']} out of range for rank {partition.tensor.rank}")
        return (TileType(dt.i32),)

    def evaluate(self, ctx: EvalContext, op: Operation, args: Sequence[Any]) -> Sequence[Any]:
        tensor, tile_shape, _ = args[0]
        axis = op.attrs["axis"]
        extent = ctx.tensor_shape(tensor)[axis]
        return (np.asarray(-(-extent // tile_shape[axis]), dtype=np.int32),)

    def lower(self, ctx: Lowering, op: Operation, args: Sequence[Any]) -> Sequence[Any]:
        rank = len(args[0].tensor.dims)
        shape = ctx.builder.get_index_space_shape(args[0].view, result_types=[ir.scalar(ir.I32)] * rank)
        return (shape[op.attrs["axis"]],)


class TileLoad(MemoryAccess):
    """``tile_load(p, *index) {latency?, tma?}``: the tile at ``index`` of partition p."""

    def infer(self, operand_types: Sequence[KType], attrs: dict[str, Any]) -> tuple[KType, ...]:
        partition = _partition(operand_types, "load")
        check_index(operand_types[1:], partition.tensor.rank, "load")
        return (partition.tile,)

    def evaluate(self, ctx: EvalContext, op: Operation, args: Sequence[Any]) -> Sequence[Any]:
        tensor, tile_shape, padding = args[0]
        index = tuple(int(i) for i in args[1:])
        return (ctx.load(op, tensor, index, tile_shape, padding),)

    def lower(self, ctx: Lowering, op: Operation, args: Sequence[Any]) -> Sequence[Any]:
        tile, token = ctx.builder.load_view_tko(args[0].view, list(args[1:]), ctx.token_in(op),
                                                 memory_ordering_semantics="weak", **ctx.hint_attrs(op))
        ctx.token_out(op, token)
        return (tile,)


class TileStore(MemoryAccess):
    """``tile_store(p, *index, value)``: writes the in-bounds part of a tile."""

    def infer(self, operand_types: Sequence[KType], attrs: dict[str, Any]) -> tuple[KType, ...]:
        partition = _partition(operand_types, "store")
        check_writable(partition.tensor, "store")
        _check_index_and_tile(operand_types, partition, "store")
        return ()

    def evaluate(self, ctx: EvalContext, op: Operation, args: Sequence[Any]) -> Sequence[Any]:
        tensor, tile_shape, _ = args[0]
        rank = len(tile_shape)
        index = tuple(int(i) for i in args[1 : 1 + rank])
        ctx.store(op, tensor, index, tile_shape, args[1 + rank])
        return ()

    def lower(self, ctx: Lowering, op: Operation, args: Sequence[Any]) -> Sequence[Any]:
        partition = args[0]
        rank = len(partition.tensor.dims)
        token = ctx.builder.store_view_tko(args[1 + rank], partition.view, list(args[1:1 + rank]), ctx.token_in(op),
                                           memory_ordering_semantics="weak")
        ctx.token_out(op, token)
        return ()


TILE_ATOMIC_MODES = ("add", "max", "min", "and", "or", "xor")


class TileAtomic(MemoryAccess):
    """``tile_atomic(p, *index, value) {mode, scope}``: atomically combines a whole tile
    into the tile at ``index`` of partition p, element by element (in-bounds part
    only); returns nothing (Tile IR ``atomic_red_view_tko``, relaxed order)."""

    def infer(self, operand_types: Sequence[KType], attrs: dict[str, Any]) -> tuple[KType, ...]:
        partition = _partition(operand_types, "atomic")
        mode = attrs["mode"]
        if mode not in TILE_ATOMIC_MODES:
            raise RuleError(f"atomic: a tile reduction takes one of {', '.join(TILE_ATOMIC_MODES)}, got {mode!r}")
        check_writable(partition.tensor, f"atomic_{mode}")
        if attrs.get("scope", "device") not in ("tl_blk", "device"):
            raise RuleError(f"atomic_{mode}: a tile reduction's scope is 'tl_blk' or 'device', got "
                            f"{bounded_repr(attrs.get('scope'))}")
        check_atomic_dtype(mode, partition.tensor.dtype)
        _check_index_and_tile(operand_types, partition, f"atomic_{mode}")
        return ()

    def evaluate(self, ctx: EvalContext, op: Operation, args: Sequence[Any]) -> Sequence[Any]:
        tensor, tile_shape, _ = args[0]
        rank = len(tile_shape)
        index = [int(i) for i in args[1:1 + rank]]
        extents = ctx.tensor_shape(tensor)
        grids = np.meshgrid(*[np.arange(size) + i * size for i, size in zip(index, tile_shape)], indexing="ij")
        inside = np.ones(tuple(tile_shape), dtype=bool)
        for axis, grid in enumerate(grids):
            inside &= (grid >= 0) & (grid < extents[axis])
        value = np.asarray(args[1 + rank])
        ctx.atomic(op, tensor, grids, inside, rmw_update(op.attrs["mode"], value))
        return ()

    def lower(self, ctx: Lowering, op: Operation, args: Sequence[Any]) -> Sequence[Any]:
        partition = args[0]
        tensor = partition.tensor
        rank = len(tensor.dims)
        tile_shape = op.operands[0].type.tile_shape  # type: ignore[attr-defined]
        # atomic_red_view_tko takes no view with a padding value: a plain partition of the tensor
        plain = ctx.builder.make_partition_view(
            tensor.view, result_types=[ir.PartitionViewType(tile_shape, tensor.view_type)])
        mode = tile_ir_atomic_mode(op.attrs["mode"], tensor.value.type.dtype)
        token = ctx.builder.atomic_red_view_tko(
            plain, list(args[1:1 + rank]), args[1 + rank], ctx.token_in(op),
            memory_ordering_semantics="relaxed", memory_scope=op.attrs.get("scope", "device"), mode=mode)
        ctx.token_out(op, token)
        return ()


class MemoryOp(Op):
    """Tensors, their partitions into tiles, and tile loads, stores and atomics."""

    TENSOR_DIM = TensorDim()
    MAKE_PARTITION = MakePartition()
    NUM_TILES = NumTiles()
    TILE_LOAD = TileLoad()
    TILE_STORE = TileStore()
    TILE_ATOMIC = TileAtomic()


register(MemoryOp)
