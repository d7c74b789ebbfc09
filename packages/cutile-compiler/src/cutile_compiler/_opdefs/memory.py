"""Global memory: tensor shapes, partitions of tensors into tiles, tile loads and stores.

A kernel reaches global memory only through tensors (its parameters) and
partitions of them into equal tiles, or tiles at element offsets (``load_at``); a
load pads the elements outside a tensor and a store writes only the elements inside
it, so no access is ever out of bounds. Which stores (and which reads of Mut
tensors) a safe kernel may make is decided by the front end.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

import cutile_ir as ir

from cutile_compiler import _dtypes as dt
from cutile_compiler._errors import bounded_repr
from cutile_compiler._ir import Operation
from cutile_compiler._lowering import PartitionInfo, element_type, tile_type
from cutile_compiler._opdefs._base import EvalContext, Op, MemoryAccess, OpDef, RuleError, check_index, register
from cutile_compiler._opdefs.debug import DebugOp
from cutile_compiler._opdefs.elementwise import ElementwiseOp
from cutile_compiler._opdefs.shape import ShapeOp
from cutile_compiler._opdefs.pointer import check_atomic_dtype, check_writable, fits_i32_offsets, rmw_update, tile_ir_atomic_mode
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


def _checked_padding(op: str, tile_shape: tuple[int, ...], attrs: dict[str, Any]) -> str:
    """Checks the tile shape of a partition or an element-offset load and gives its
    ``padding`` attribute, checked too (default ``zero``)."""
    problem = tile_shape_problem(tile_shape)
    if problem is not None:
        raise RuleError(f"{op}: {problem}")
    padding = attrs.get("padding", "zero")
    if not (isinstance(padding, str) and padding in PADDINGS):
        raise RuleError(f"{op}: padding must be one of {', '.join(PADDINGS)}, got {bounded_repr(padding)}")
    return padding


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
        return (PartitionType(tensor, tile_shape, _checked_padding("partition", tile_shape, attrs)),)

    def evaluate(self, ctx: EvalContext, op: Operation, args: Sequence[Any]) -> Sequence[Any]:
        return ((args[0], op.attrs["tile_shape"], op.attrs.get("padding", "zero")),)

    def lower(self, ctx: Lowering, op: Operation, args: Sequence[Any]) -> Sequence[Any]:
        tensor = args[0]
        tensor_type = op.operands[0].type
        assert isinstance(tensor_type, TensorType)
        padding = view_padding(op.attrs.get("padding", "zero"), tensor_type.dtype)
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


def view_padding(padding: str, dtype: dt.DType) -> ir.PaddingValue:
    """A view's padding: the one asked for floats; zero for integers and bools, which
    hold no NaN or infinity (as the interpreter pads)."""
    return ir.PaddingValue[(padding if dtype.is_float else "zero").upper()]


def _padding_value(padding: str, dtype: dt.DType) -> float:
    """The number a padded element holds: the padding's for floats, 0 for integers and
    bools (which hold no NaN or infinity), as the interpreter pads."""
    return PADDING_VALUES[padding] if dtype.is_float else 0.0


#: the value of each padding, as loads give it for float tensors
PADDING_VALUES = {"zero": 0.0, "neg_zero": -0.0, "nan": float("nan"), "pos_inf": float("inf"),
                  "neg_inf": float("-inf")}

#: a power of two past any divisibility the analysis below reports (a zero is divisible by anything)
_ANY_DIVISOR = 1 << 30


def divisibility(ctx: Lowering, value: Any, depth: int = 0) -> int:
    """The largest power of two the compiler can prove divides the integer scalar
    ``value`` (of the typed IR), from how it was computed: constants, ``+``, ``-``,
    ``*``, negation, integer casts and ``assume(div_by=)``; 1 when nothing is known."""
    producer = ctx.producers.get(value)
    if producer is None or depth > 32:
        return 1
    key, operands = producer.opdef.key, producer.operands
    if key is ShapeOp.CONSTANT:
        number = _static_int(ctx, value)
        if number is None:
            return 1
        return _ANY_DIVISOR if number == 0 else min(_ANY_DIVISOR, number & -number)
    if key is ElementwiseOp.MUL:
        return min(_ANY_DIVISOR, divisibility(ctx, operands[0], depth + 1) * divisibility(ctx, operands[1], depth + 1))
    if key in (ElementwiseOp.ADD, ElementwiseOp.SUB):
        return min(divisibility(ctx, operands[0], depth + 1), divisibility(ctx, operands[1], depth + 1))
    if key is ElementwiseOp.NEG or (key is ElementwiseOp.CAST and producer.attrs["dtype"].is_integer
                                    and operands[0].type.dtype.is_integer):  # type: ignore[attr-defined]
        return divisibility(ctx, operands[0], depth + 1)
    if key is DebugOp.ASSUME:
        return max(int(producer.attrs.get("div_by") or 1), divisibility(ctx, operands[0], depth + 1))
    return 1


def _static_int(ctx: Lowering, value: Any) -> int | None:
    """The value of an integer scalar known at compile time (a constant), else None."""
    producer = ctx.producers.get(value)
    if producer is not None:
        number = producer.opdef.static_value(producer.attrs)
        if isinstance(number, int) and not isinstance(number, bool):
            return number
    return None


class LoadAt(MemoryAccess):
    """``load_at(t, *start) {shape, padding, latency?, allow_tma?}``: the tile of
    ``shape`` whose first element is at element coordinates ``start`` (run-time
    integer scalars, negative allowed) of tensor t; every element outside t reads
    ``padding``.

    On the GPU: where the start is inside the tensor (``0 <= start_k < dim_k``, one
    uniform branch per block unless known at compile time), a view load, of a
    partition view when every start is provably a multiple of the tile (divisibility
    of how it was computed), else of a strided view advancing one element per index
    along the axes that are not; elsewhere (a tile hanging over the low edge, or
    starting past the end), a masked pointer load, or the padding itself when the
    tile provably lies wholly outside. Tile IR views are indexed only inside their
    index space, which is why negative starts never reach them."""


    def infer(self, operand_types: Sequence[KType], attrs: dict[str, Any]) -> tuple[KType, ...]:
        tensor = _tensor(operand_types, "load")
        shape: tuple[int, ...] = attrs["shape"]
        if len(shape) != tensor.rank:
            raise RuleError(f"load: a rank-{tensor.rank} tensor is read in tiles of rank {tensor.rank}, "
                            f"got shape {list(shape)}")
        _checked_padding("load", shape, attrs)
        starts = operand_types[1:]
        if len(starts) != tensor.rank:
            raise RuleError(f"load: at= needs {tensor.rank} element coordinate(s), got {len(starts)}")
        for position, start in enumerate(starts):
            if not (isinstance(start, TileType) and start.is_scalar and start.dtype.is_integer):
                raise RuleError(f"load: at= coordinate {position} must be an integer scalar, got {start}")
        return (TileType(tensor.dtype, shape),)

    def evaluate(self, ctx: EvalContext, op: Operation, args: Sequence[Any]) -> Sequence[Any]:
        start = tuple(int(a) for a in args[1:])
        return (ctx.load_at(op, args[0], start, op.attrs["shape"], op.attrs.get("padding", "zero")),)

    def lower(self, ctx: Lowering, op: Operation, args: Sequence[Any]) -> Sequence[Any]:
        return _lower_load_at(ctx, op, args)




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




# -- lowering of load_at ---------------------------------------------------------------------
def _as_width(ctx: Lowering, value: Any, ktype: KType, bits: int) -> Any:
    """An integer scalar as a ``bits``-wide Tile IR integer (sign- or zero-extended by
    its dtype, or truncated)."""
    assert isinstance(ktype, TileType)
    target = ir.I64 if bits == 64 else ir.I32
    if ktype.dtype.bits == bits:
        return value
    if ktype.dtype.bits < bits:
        return ctx.builder.exti(value, signedness=ktype.dtype.signedness, result_types=[ir.scalar(target)])
    return ctx.builder.trunci(value, result_types=[ir.scalar(target)])


def _dim_value(ctx: Lowering, dim: Any, bits: int) -> Any:
    """A tensor dim (a static int or an i32 entry parameter) as a ``bits``-wide scalar."""
    target = ir.I64 if bits == 64 else ir.I32
    if isinstance(dim, int):
        return ctx.builder.constant(dim, ir.scalar(target))
    if bits == 64:
        return ctx.builder.exti(dim, signedness="signed", result_types=[ir.scalar(ir.I64)])
    return dim


def _lower_load_at(ctx: Lowering, op: Operation, args: Sequence[Any]) -> Sequence[Any]:
    b = ctx.builder
    info = args[0]
    tensor_type = op.operands[0].type
    assert isinstance(tensor_type, TensorType)
    rank = tensor_type.rank
    shape: tuple[int, ...] = op.attrs["shape"]
    padding: str = op.attrs.get("padding", "zero")
    starts = list(op.operands[1:])
    bits = [64 if s.type.dtype.bits == 64 else 32 for s in starts]  # type: ignore[attr-defined]
    start_args = [_as_width(ctx, a, s.type, w) for a, s, w in zip(args[1:], starts, bits)]
    aligned = [divisibility(ctx, s) % extent == 0 for s, extent in zip(starts, shape)]
    static = [_static_int(ctx, s) for s in starts]
    if all(v is not None for v in static) and all(isinstance(d, int) for d in info.dims):
        inside_known: bool | None = all(0 <= int(v) < int(d) for v, d in zip(static, info.dims))  # type: ignore[arg-type]
    else:
        inside_known = None
    view_ok = all(aligned) or ctx.version >= ir.Version.parse("13.3")  # strided views are 13.3+
    result_type = tile_type(op.results[0].type)
    token_in = ctx.token_in(op)

    def view_load() -> tuple[Any, Any]:
        strides = [extent if ok else 1 for extent, ok in zip(shape, aligned)]
        padded_with = view_padding(padding, tensor_type.dtype)
        if all(aligned):
            view_type: Any = ir.PartitionViewType(shape, info.view_type, (), padded_with)
            view = b.make_partition_view(info.view, result_types=[view_type])
        else:
            view_type = ir.StridedViewType(shape, tuple(strides), info.view_type, (), padded_with)
            view = b.make_strided_view(info.view, result_types=[view_type])
        # inside the tensor every start is >= 0 and below an i32 dim: i32 indices, exact quotients
        index = []
        for start, width, step in zip(start_args, bits, strides):
            narrow = start if width == 32 else b.trunci(start, result_types=[ir.scalar(ir.I32)])
            if step != 1:
                narrow = b.divi(narrow, b.constant(step, ir.scalar(ir.I32)), signedness="unsigned",
                                rounding="zero")
            index.append(narrow)
        return b.load_view_tko(view, index, token_in, memory_ordering_semantics="weak", **ctx.hint_attrs(op))  # type: ignore[no-any-return]

    def padding_tile() -> tuple[Any, Any]:
        return ctx.constant(_padding_value(padding, tensor_type.dtype), op.results[0].type), token_in

    def pointer_load() -> tuple[Any, Any]:
        wide = any(w == 64 for w in bits) or not fits_i32_offsets(tensor_type, info)
        index_ir = ir.I64 if wide else ir.I32
        inside: Any = None
        linear: Any = None
        for axis in range(rank):
            along = tuple(shape[axis] if k == axis else 1 for k in range(rank))
            line = b.iota(result_types=[ir.tile((shape[axis],), index_ir)])
            start = _as_width(ctx, args[1 + axis], starts[axis].type, 64 if wide else 32)
            lane = b.addi(line, b.broadcast(b.reshape(start, result_types=[ir.tile((1,), index_ir)]),
                                            result_types=[ir.tile((shape[axis],), index_ir)]))
            if rank > 1:
                lane = b.reshape(lane, result_types=[ir.tile(along, index_ir)])
            dim = _dim_value(ctx, info.dims[axis], 64 if wide else 32)
            dims = b.broadcast(b.reshape(dim, result_types=[ir.tile((1,) * rank, index_ir)]),
                               result_types=[ir.tile(along, index_ir)])
            # one unsigned compare: a negative coordinate read as unsigned is past any dim
            below = b.cmpi(lane, dims, comparison_predicate="less_than", signedness="unsigned")
            below = b.broadcast(below, result_types=[ir.tile(shape, ir.I1)]) if along != shape else below
            inside = below if inside is None else b.andi(inside, below)
            stride = info.strides[axis]
            offset = lane
            if not (isinstance(stride, int) and stride == 1):
                if isinstance(stride, int):
                    step = b.constant(stride, ir.tile(along, index_ir))
                else:
                    wide_stride = _dim_value(ctx, stride, 64 if wide else 32)
                    step = b.broadcast(b.reshape(wide_stride, result_types=[ir.tile((1,) * rank, index_ir)]),
                                       result_types=[ir.tile(along, index_ir)])
                offset = b.muli(lane, step)
            offset = b.broadcast(offset, result_types=[ir.tile(shape, index_ir)]) if along != shape else offset
            linear = offset if linear is None else b.addi(linear, offset)
        pointer_type = ir.ptr(element_type(tensor_type.dtype))
        base = b.broadcast(b.reshape(info.pointer, result_types=[ir.tile((1,) * rank, pointer_type)]),
                           result_types=[ir.tile(shape, pointer_type)])
        pointers = b.offset(base, linear)
        fill = ctx.constant(_padding_value(padding, tensor_type.dtype), op.results[0].type)
        hints = {"optimization_hints": h} if (h := _latency_hints(ctx, op)) is not None else {}
        return b.load_ptr_tko(pointers, inside, fill, token_in, memory_ordering_semantics="weak", **hints,  # type: ignore[no-any-return]
                              result_types=[result_type, ir.TOKEN])

    outside = padding_tile if all(aligned) else pointer_load
    if not view_ok:
        tile, token = pointer_load()
    elif inside_known is True:
        tile, token = view_load()
    elif inside_known is False:
        tile, token = outside()
    else:
        condition: Any = None
        for start, width, dim in zip(start_args, bits, info.dims):
            extent = _dim_value(ctx, dim, width)
            below = b.cmpi(start, extent, comparison_predicate="less_than", signedness="unsigned")
            condition = below if condition is None else b.andi(condition, below)
        chained = token_in is not None
        with b.if_(condition, [result_type] + ([ir.TOKEN] if chained else [])) as branches:
            for branch, build in ((branches.then, view_load), (branches.else_, outside)):
                with branch():
                    tile, token = build()
                    b.yield_([tile] + ([token] if chained else []))
        tile = branches.results[0]
        token = branches.results[1] if chained else None
    if token_in is not None and token is not None:
        ctx.token_out(op, token)
    return (tile,)


def _latency_hints(ctx: Lowering, op: Operation) -> Any:
    """The pointer load's hints: its latency only (a pointer load takes no TMA)."""
    if "latency" not in op.attrs:
        return None
    return ir.OptimizationHints.of({arch: {"latency": op.attrs["latency"]} for arch in ctx.hints.target_archs(ctx.arch)})


class MemoryOp(Op):
    """Tensors, their partitions into tiles, and tile loads, stores and atomics."""

    TENSOR_DIM = TensorDim()
    MAKE_PARTITION = MakePartition()
    NUM_TILES = NumTiles()
    TILE_LOAD = TileLoad()
    TILE_STORE = TileStore()
    TILE_ATOMIC = TileAtomic()
    LOAD_AT = LoadAt()


register(MemoryOp)
