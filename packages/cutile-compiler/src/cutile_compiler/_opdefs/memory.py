"""Global memory: tensor shapes, partitions of tensors into tiles, tile loads and stores.

A kernel reaches global memory only through tensors (its parameters) and
partitions of them into equal tiles, or tiles at element offsets (``load_at``); a
load pads the elements outside a tensor and a store writes only the elements inside
it, so no access is ever out of bounds. Which stores (and which reads of Mut
tensors) a safe kernel may make is decided by the front end.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

import numpy as np

import cutile_ir as ir

from cutile_compiler import _dtypes as dt
from cutile_compiler._errors import bounded_repr
from cutile_compiler._ir import Operation, Value
from cutile_compiler._lowering import PartitionInfo, element_type, tile_type
from cutile_compiler._opdefs._base import EvalContext, Op, MemoryAccess, OpDef, RuleError, check_index, register
from cutile_compiler._opdefs.debug import DebugOp
from cutile_compiler._opdefs.elementwise import ElementwiseOp
from cutile_compiler._opdefs.shape import ShapeOp
from cutile_compiler._opdefs.pointer import check_atomic_dtype, check_writable, fits_i32_offsets, rmw_update, tile_ir_atomic_mode
from cutile_compiler._signature import divisibility
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


def congruence(ctx: Lowering, value: Any, depth: int = 0) -> tuple[int, int]:
    """``(m, r)`` such that the compiler can prove the integer scalar ``value`` (of the
    typed IR) is ``r`` modulo ``m``: ``m`` a power of two (at most `_ANY_DIVISOR`, and
    at most 2**bits of the value's dtype, where arithmetic wraps), ``0 <= r < m``. Read
    from how the value was computed: constants, ``+``, ``-``, ``*``, negation, integer
    casts and ``assume(div_by=)``; ``(1, 0)`` when nothing is known."""
    producer = ctx.producers.get(value)
    if producer is None or depth > 32:
        return 1, 0
    key, operands = producer.opdef.key, producer.operands
    modulus, residue = 1, 0
    if key is ShapeOp.CONSTANT:
        number = _static_int(ctx, value)
        if number is not None:
            modulus, residue = _ANY_DIVISOR, number % _ANY_DIVISOR
    elif key in (ElementwiseOp.ADD, ElementwiseOp.SUB, ElementwiseOp.MUL):
        (m1, r1), (m2, r2) = (congruence(ctx, operand, depth + 1) for operand in operands[:2])
        if key is ElementwiseOp.MUL:
            # (r1 + m1 a)(r2 + m2 b) = r1 r2 + r1 m2 b + r2 m1 a + m1 m2 a b
            modulus = min(_ANY_DIVISOR, divisibility(r1, _ANY_DIVISOR) * m2, divisibility(r2, _ANY_DIVISOR) * m1, m1 * m2)
            residue = r1 * r2
        else:
            modulus = min(m1, m2)
            residue = r1 + r2 if key is ElementwiseOp.ADD else r1 - r2
    elif key is ElementwiseOp.NEG:
        modulus, residue = congruence(ctx, operands[0], depth + 1)
        residue = -residue
    elif key is ElementwiseOp.CAST and producer.attrs["dtype"].is_integer \
            and operands[0].type.dtype.is_integer:  # type: ignore[attr-defined]
        # truncation and sign or zero extension keep residues modulo 2**(the narrower width)
        modulus, residue = congruence(ctx, operands[0], depth + 1)
        modulus = min(modulus, 1 << operands[0].type.dtype.bits)  # type: ignore[attr-defined]
    elif key is DebugOp.ASSUME:
        modulus, residue = congruence(ctx, operands[0], depth + 1)
        div_by = int(producer.attrs.get("div_by") or 1)
        if div_by > modulus:
            modulus, residue = div_by, 0
    dtype = getattr(value.type, "dtype", None)
    if dtype is not None and dtype.is_integer:
        modulus = min(modulus, 1 << dtype.bits)
    return modulus, residue % modulus


def _static_int(ctx: Lowering, value: Any) -> int | None:
    """The value of an integer scalar known at compile time (a constant), else None."""
    producer = ctx.producers.get(value)
    if producer is not None:
        number = producer.opdef.static_value(producer.attrs)
        if isinstance(number, int) and not isinstance(number, bool):
            return number
    return None


def _linear(ctx: Lowering, value: Any) -> tuple[Any, int]:
    """``value`` as ``(root, offset)``, ``root + offset`` with a compile-time offset
    (root None for a constant): how two offsets are known to be equal."""
    number = _static_int(ctx, value)
    if number is not None:
        return None, number
    producer = ctx.producers.get(value)
    if producer is not None and producer.opdef.key in (ElementwiseOp.ADD, ElementwiseOp.SUB):
        (root_a, offset_a), (root_b, offset_b) = (_linear(ctx, operand) for operand in producer.operands[:2])
        if root_b is None:
            return root_a, offset_a + offset_b if producer.opdef.key is ElementwiseOp.ADD else offset_a - offset_b
        if root_a is None and producer.opdef.key is ElementwiseOp.ADD:
            return root_b, offset_a + offset_b
    return value, 0


class LoadAt(MemoryAccess):
    """``load_at(t, *start) {shape, padding, latency?, allow_tma?}``: the tile of
    ``shape`` whose first element is at element coordinates ``start`` (run-time
    integer scalars, negative allowed) of tensor t; every element outside t reads
    ``padding``.

    On the GPU: where the start is inside the tensor (``0 <= start_k < dim_k``, one
    uniform branch per block unless known at compile time), a view load, of a
    partition view when every start is provably a multiple of the tile (`congruence`
    of how it was computed), else of a strided view whose traversal stride along each
    axis is the largest power of two known to divide the start (at most the tile);
    elsewhere (a tile hanging over the low edge, or starting past the end), a masked
    pointer load, or the padding itself when the tile provably lies wholly outside.
    Tile IR views are indexed only inside their index space, which is why negative
    starts never reach them. A read-only tensor's start a known number of elements
    past a 16-byte boundary of its contiguous axis is read as the two tiles at the
    boundaries around it, spliced in registers, and loads of one tile share it (see
    `_lower_load_at`)."""

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


#: the widest load of one thread, in bytes (a 128-bit vector): the group of elements an
#: element offset along the contiguous axis is split at (see `_lower_load_at`)
VECTOR_BYTES = 16
#: the worker warps tileiras gives a block unless hinted otherwise
DEFAULT_WORKER_WARPS = 4


@dataclass(frozen=True)
class _Start:
    """One coordinate of a tile's first element: a Tile IR integer scalar (None: 0)
    plus a compile-time ``delta``, with what is known of it (its residue modulo a
    power of two, its value when static, its ``(root, offset)`` form)."""

    value: Any
    bits: int
    extension: str  # how the value widens to i64: "signed" or "unsigned"
    modulus: int
    residue: int
    static: int | None
    linear: tuple[Any, int]
    delta: int = 0

    @property
    def divisor(self) -> int:
        """The largest power of two known to divide the coordinate."""
        return self.modulus if self.residue == 0 else min(self.modulus, divisibility(self.residue, _ANY_DIVISOR))

    def plus(self, delta: int) -> _Start:
        """The coordinate ``delta`` further on."""
        root, offset = self.linear
        return replace(self, residue=(self.residue + delta) % self.modulus,
                       static=None if self.static is None else self.static + delta,
                       linear=(root, offset + delta), delta=self.delta + delta)

    def ir_value(self, ctx: Lowering) -> Any:
        """The coordinate as a Tile IR scalar (made at the insertion point)."""
        b = ctx.builder
        width = ir.scalar(ir.I64 if self.bits == 64 else ir.I32)
        if self.value is None:
            return b.constant(self.delta, width)
        if self.delta == 0:
            return self.value
        if self.delta < 0:
            return b.subi(self.value, b.constant(-self.delta, width))
        return b.addi(self.value, b.constant(self.delta, width))


def _start_of(ctx: Lowering, operand: Value, value: Any) -> _Start:
    """What is known of one coordinate of ``load_at``: ``operand`` of the typed IR,
    ``value`` its Tile IR scalar. A 32- or 64-bit one is kept as its root plus a
    constant (`_linear`: ``j - 1`` as ``j`` and -1), so coordinates moved by a constant
    are computed from the root, as a kernel would write them."""
    dtype = operand.type.dtype  # type: ignore[attr-defined]
    bits = 64 if dtype.bits == 64 else 32
    modulus, residue = congruence(ctx, operand)
    root, offset = _linear(ctx, operand)
    # a u32 coordinate widens without its sign (narrower ones are i32 values already)
    extension = dtype.signedness if dtype.bits == 32 else "signed"
    if dtype.bits in (32, 64):
        base = None if root is None else ctx.values[root]
        delta = offset
    else:  # wrapping at its own width: no constant moved past the cast
        base, delta, root, offset = _as_width(ctx, value, operand.type, bits), 0, operand, 0
    return _Start(base, bits, extension, modulus, residue, _static_int(ctx, operand), (root, offset), delta)


def _lower_load_at(ctx: Lowering, op: Operation, args: Sequence[Any]) -> Sequence[Any]:
    """The tile at element coordinates: one `_tile_at`, or, along the contiguous axis
    one element off a vector boundary (a 16-byte group of elements, ``g``), the two
    tiles at the group boundaries around it, spliced element by element in registers
    (`_splice`): each an aligned view load that tileiras reads a vector at a time,
    where one tile at the element offset is read one element per load. The tiles of a
    read-only tensor are shared between the loads of one kernel that read the same
    tile (`Lowering.reuse`), so ``x[i, j-1]``, ``x[i, j]`` and ``x[i, j+1]`` read three
    tiles (at ``j - g``, ``j``, ``j + g``), the outer two only for the elements used."""
    tensor_type = op.operands[0].type
    assert isinstance(tensor_type, TensorType)
    info = args[0]
    starts = [_start_of(ctx, operand, value) for operand, value in zip(op.operands[1:], args[1:])]
    shape: tuple[int, ...] = op.attrs["shape"]
    token_in = ctx.token_in(op)
    if token_in is None:
        groups = _splice_groups(ctx, tensor_type, info, shape)
        return (_spliced_tile(ctx, op, info, starts, groups, element_type(tensor_type.dtype)),)
    tile, token = _tile_at(ctx, op, info, starts, token_in)
    if token is not None:
        ctx.token_out(op, token)
    return (tile,)


def _spliced_tile(ctx: Lowering, op: Operation, info: Any, starts: list[_Start], groups: Sequence[int],
                  element: ir.ScalarType) -> Any:
    """The tile at ``starts`` of a read-only tensor: along the first axis whose start is
    a known number of elements past a multiple of its group (``groups[axis]``), the
    two tiles at the multiples around it spliced (each of them so made in turn along
    the later axes); else `_tile_at`."""
    shape: tuple[int, ...] = op.attrs["shape"]
    for axis, (start, group) in enumerate(zip(starts, groups)):
        offset = start.residue % group
        if group > 1 and start.modulus >= group and offset:
            moved = [list(starts), list(starts)]
            moved[0][axis], moved[1][axis] = start.plus(-offset), start.plus(group - offset)
            low, high = (_spliced_tile(ctx, op, info, m, groups, element) for m in moved)
            return _splice(ctx, low, high, axis, offset, group, shape, element)
    return _tile_at(ctx, op, info, starts, None)[0]


def _splice_groups(ctx: Lowering, tensor_type: TensorType, info: Any, shape: tuple[int, ...]) -> list[int]:
    """Per axis, the unit `_spliced_tile` splits a start at (1: none). Along the
    contiguous (last, unit-stride) axis, the elements of one vector load, at most the
    tile's extent, where each thread of the block holds whole groups (the tile has at
    least a group per thread: a splice within a group then stays in its registers;
    across threads it would go through shared memory); none for elements narrower
    than a byte, or for a group narrower than the tile in bytecode without strided
    views."""
    groups = [1] * len(shape)
    bits = tensor_type.dtype.bits
    if bits not in (8, 16, 32, 64) or info.strides is None or info.strides[-1] != 1:
        return groups
    group = min(VECTOR_BYTES * 8 // bits, shape[-1])
    if group < shape[-1] and ctx.version < ir.Version.parse("13.3"):
        return groups
    if math.prod(shape) < group * _threads(ctx):
        return groups
    groups[-1] = group
    return groups


def _threads(ctx: Lowering) -> int:
    """The threads of a block that hold a tile: 32 per worker warp, `DEFAULT_WORKER_WARPS`
    unless hinted (the most any target arch is hinted)."""
    warps = [ctx.hints.values_for(arch).get("num_worker_warps", DEFAULT_WORKER_WARPS)
             for arch in ctx.hints.target_archs(ctx.arch)]
    return 32 * max(warps, default=DEFAULT_WORKER_WARPS)


def _splice(ctx: Lowering, low: Any, high: Any, axis: int, offset: int, group: int, shape: tuple[int, ...],
            element: ir.ScalarType) -> Any:
    """The tile starting ``offset`` elements into ``low`` along ``axis`` (``0 < offset <
    group``), where ``high`` is ``low`` moved on by ``group`` elements: with the axis
    cut into groups of ``group``, element k of each group is element ``k + offset`` of
    low's group, or ``k + offset - group`` of high's. Extracts of one element per group
    and a tree of cats (along the contiguous axis, moves within each thread's
    registers)."""
    b = ctx.builder
    before, extent, after = shape[:axis], shape[axis], shape[axis + 1:]
    grouped = (*before, extent // group, group, *after)
    low, high = (b.reshape(t, result_types=[ir.tile(grouped, element)]) for t in (low, high))
    zero = b.constant(0, ir.scalar(ir.I32))
    pieces = []
    for k in range(group):
        source, at = (low, k + offset) if k + offset < group else (high, k + offset - group)
        index = [b.constant(at, ir.scalar(ir.I32)) if a == axis + 1 else zero for a in range(len(grouped))]
        pieces.append(b.extract(source, index, result_types=[ir.tile((*before, extent // group, 1, *after), element)]))
    width = 1
    while len(pieces) > 1:
        width *= 2
        joined = ir.tile((*before, extent // group, width, *after), element)
        pieces = [b.cat(a, c, dim=axis + 1, result_types=[joined]) for a, c in zip(pieces[::2], pieces[1::2])]
    return b.reshape(pieces[0], result_types=[ir.tile(shape, element)])


def _tile_at(ctx: Lowering, op: Operation, info: Any, starts: Sequence[_Start], token_in: Any) -> tuple[Any, Any]:
    """The tile of op's shape at element coordinates ``starts`` (padding outside the
    tensor) and the token after it: one view load where every start is inside the
    tensor, else a masked pointer load, or the padding when the tile provably lies
    wholly outside (branching once, on a uniform condition, unless known at compile
    time). A read-only tensor's tile (no token) is shared with later loads of the same
    tile where it is visible (`Lowering.reuse`)."""
    tensor_type = op.operands[0].type
    assert isinstance(tensor_type, TensorType)
    shape: tuple[int, ...] = op.attrs["shape"]
    padding: str = op.attrs.get("padding", "zero")
    if token_in is not None:
        return _build_tile_at(ctx, op, info, tensor_type, shape, padding, starts, token_in)
    hints = tuple(sorted((k, op.attrs[k]) for k in ("latency", "allow_tma") if k in op.attrs))
    key = ("load_at", info.value, shape, padding, hints, tuple((*s.linear, s.bits) for s in starts))
    return ctx.reuse(key, lambda: _build_tile_at(ctx, op, info, tensor_type, shape, padding, starts, None))


def _build_tile_at(ctx: Lowering, op: Operation, info: Any, tensor_type: TensorType, shape: tuple[int, ...],
                   padding: str, starts: Sequence[_Start], token_in: Any) -> tuple[Any, Any]:
    b = ctx.builder
    rank = tensor_type.rank
    # the traversal stride of the view along each axis: the largest power of two known to
    # divide the start, at most the tile (so tileiras sees the alignment it may vectorize by)
    strides = [min(s.divisor, extent) for s, extent in zip(starts, shape)]
    aligned = [step == extent for step, extent in zip(strides, shape)]
    if all(s.static is not None for s in starts) and all(isinstance(d, int) for d in info.dims):
        inside_known: bool | None = all(0 <= int(s.static) < int(d)  # type: ignore[arg-type]
                                        for s, d in zip(starts, info.dims))
    else:
        inside_known = None
    view_ok = all(aligned) or ctx.version >= ir.Version.parse("13.3")  # strided views are 13.3+
    result_type = tile_type(op.results[0].type)
    start_args = [s.ir_value(ctx) for s in starts]

    def view_load() -> tuple[Any, Any]:
        padded_with = view_padding(padding, tensor_type.dtype)
        if all(aligned):
            view_type: Any = ir.PartitionViewType(shape, info.view_type, (), padded_with)
            view = b.make_partition_view(info.view, result_types=[view_type])
        else:
            view_type = ir.StridedViewType(shape, tuple(strides), info.view_type, (), padded_with)
            view = b.make_strided_view(info.view, result_types=[view_type])
        # inside the tensor every start is >= 0 and below an i32 dim: i32 indices, exact quotients
        index = []
        for start, s, step in zip(start_args, starts, strides):
            narrow = start if s.bits == 32 else b.trunci(start, result_types=[ir.scalar(ir.I32)])
            if step != 1:
                narrow = b.divi(narrow, b.constant(step, ir.scalar(ir.I32)), signedness="unsigned",
                                rounding="zero")
            index.append(narrow)
        return b.load_view_tko(view, index, token_in, memory_ordering_semantics="weak", **ctx.hint_attrs(op))  # type: ignore[no-any-return]

    def padding_tile() -> tuple[Any, Any]:
        return ctx.constant(_padding_value(padding, tensor_type.dtype), op.results[0].type), token_in

    def pointer_load() -> tuple[Any, Any]:
        wide = any(s.bits == 64 for s in starts) or not fits_i32_offsets(tensor_type, info)
        index_ir = ir.I64 if wide else ir.I32
        index_bits = 64 if wide else 32
        inside: Any = None
        linear: Any = None
        for axis in range(rank):
            along = tuple(shape[k] if k == axis else 1 for k in range(rank))
            line = b.iota(result_types=[ir.tile((shape[axis],), index_ir)])
            start = start_args[axis]
            if starts[axis].bits != index_bits:
                start = b.exti(start, signedness=starts[axis].extension, result_types=[ir.scalar(index_ir)])
            lane = b.addi(line, b.broadcast(b.reshape(start, result_types=[ir.tile((1,), index_ir)]),
                                            result_types=[ir.tile((shape[axis],), index_ir)]))
            if rank > 1:
                lane = b.reshape(lane, result_types=[ir.tile(along, index_ir)])
            dim = _dim_value(ctx, info.dims[axis], index_bits)
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
                    wide_stride = _dim_value(ctx, stride, index_bits)
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
        return pointer_load()
    if inside_known is True:
        return view_load()
    if inside_known is False:
        return outside()
    condition: Any = None
    for start, s, dim in zip(start_args, starts, info.dims):
        extent = _dim_value(ctx, dim, s.bits)
        below = b.cmpi(start, extent, comparison_predicate="less_than", signedness="unsigned")
        condition = below if condition is None else b.andi(condition, below)
    chained = token_in is not None
    with b.if_(condition, [result_type] + ([ir.TOKEN] if chained else [])) as branches:
        for branch, build in ((branches.then, view_load), (branches.else_, outside)):
            with branch():
                tile, token = build()
                b.yield_([tile] + ([token] if chained else []))
    return branches.results[0], (branches.results[1] if chained else None)


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
