"""Tile creation and shape operations: constant, iota, broadcast, reshape,
permute, cat, extract, insert, and the byte views pack and unpack."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

import cutile_ir as ir
from cutile_compiler import _dtypes as dt
from cutile_compiler._dtypes import DType, fits
from cutile_compiler._errors import bounded_repr
from cutile_compiler._ir import Operation
from cutile_compiler._lowering import tile_type
from cutile_compiler._opdefs._base import EvalContext, Op, OpDef, RuleError, check_index, register
from cutile_compiler._opdefs.elementwise import numpy_dtype, tile_operand
from cutile_compiler._types import KType, TileType

if TYPE_CHECKING:
    from cutile_compiler._lowering import Lowering


def stored_float(number: float, dtype: dt.DType) -> float:
    """``number`` as ``dtype`` stores it (rounded to nearest even; inf where it
    overflows, or where the format has no inf), by cutile_ir's element codec: no
    numpy view of bf16 or fp8 needed."""
    try:
        return float(ir.decode_element(ir.encode_element(float(number), dtype.ir_type), dtype.ir_type))
    except ir.IRTypeError:  # out of the range of a format without inf
        return math.inf


def largest_finite(dtype: dt.DType) -> float:
    """The largest finite value of a float ``dtype``, from its bit fields."""
    fmt = dtype.float_format
    assert fmt is not None, dtype
    if fmt.has_inf:  # IEEE-like: the largest exponent below inf's, every mantissa bit set
        return float((2 - 2.0 ** -fmt.mantissa_bits) * 2.0 ** ((1 << fmt.exponent_bits) - 2 - fmt.bias))
    values = (float(ir.decode_element(bits.to_bytes(1, "little"), dtype.ir_type)) for bits in range(1 << fmt.width))
    return max(v for v in values if math.isfinite(v))  # (formats without inf are 8 bits or fewer)


def constant_value(value: bool | int | float, dtype: DType) -> bool | int | float:
    """``value`` as a constant of ``dtype`` (an int for integer dtypes, a float for
    float ones), or `RuleError` when it has no such value: the one rule for every
    constant of a kernel. An int is exact or refused; a finite number that would
    round to an infinity (or, for f8e4m3fn, to NaN) is refused; inf and nan written
    explicitly stay floats."""
    if dtype.is_integer:
        if isinstance(value, float):
            raise RuleError(f"the float {bounded_repr(value)} cannot become a {dtype} value; use an int or astype")
        if not fits(int(value), dtype):
            low, high = (-(1 << (dtype.bits - 1)), (1 << (dtype.bits - 1)) - 1) if dtype.is_signed else (0, (1 << dtype.bits) - 1)
            raise RuleError(f"the constant {bounded_repr(value)} does not fit in {dtype} ({low} to {high})")
        return int(value)
    if dtype.is_float:
        if isinstance(value, float) and not math.isfinite(value):
            return value  # inf and nan written as such
        try:
            number = float(value)
        except OverflowError:  # an int past the f64 range
            number = math.inf
        if math.isfinite(number) and math.isfinite(stored_float(number, dtype)):
            return number
        largest = largest_finite(dtype)
        raise RuleError(f"the constant {bounded_repr(value)} does not fit in {dtype} (its largest finite value is "
                        f"{largest:g})")
    return bool(value)


class Constant(OpDef):
    """``constant {value, type}``: a tile of one repeated value (``value`` a Python
    number) or of given values (``value`` a tuple of the tile's elements, row-major)."""

    def infer(self, operand_types: Sequence[KType], attrs: dict[str, Any]) -> tuple[KType, ...]:
        tile: TileType = attrs["type"]
        value = attrs["value"]
        if isinstance(value, tuple) and len(value) != tile.size:
            raise RuleError(f"constant: {len(value)} values given for a tile of {tile.size}")
        for item in value if isinstance(value, tuple) else (value,):
            constant_value(item, tile.dtype)
        return (tile,)

    def static_value(self, attrs: dict[str, Any]) -> bool | int | float | None:
        value = attrs["value"]
        return None if isinstance(value, tuple) else value

    def evaluate(self, ctx: EvalContext, op: Operation, args: Sequence[Any]) -> Sequence[Any]:
        tile: TileType = op.attrs["type"]
        value = op.attrs["value"]
        np_type = numpy_dtype(tile.dtype)
        if isinstance(value, tuple):
            return (np.array(value, dtype=np_type).reshape(tile.shape),)
        return (np.full(tile.shape, value, dtype=np_type),)

    def lower(self, ctx: Lowering, op: Operation, args: Sequence[Any]) -> Sequence[Any]:
        tile: TileType = op.attrs["type"]
        value = op.attrs["value"]
        values = list(value) if isinstance(value, tuple) else value
        return (ctx.builder.constant(values, tile_type(tile)),)


class Iota(OpDef):
    """``iota {type}``: 0, 1, ..., n-1 as a 1-D integer tile."""

    def infer(self, operand_types: Sequence[KType], attrs: dict[str, Any]) -> tuple[KType, ...]:
        tile: TileType = attrs["type"]
        if tile.rank != 1 or not tile.dtype.is_integer:
            raise RuleError(f"arange: the result must be a 1-D integer tile, got {tile}")
        if not fits(tile.shape[0] - 1, tile.dtype):  # its last value would wrap
            raise RuleError(f"arange({tile.shape[0]}, {tile.dtype}): its last value {tile.shape[0] - 1} does not fit "
                            f"in {tile.dtype}; use a wider integer dtype")
        return (tile,)

    def evaluate(self, ctx: EvalContext, op: Operation, args: Sequence[Any]) -> Sequence[Any]:
        tile: TileType = op.attrs["type"]
        return (np.arange(tile.shape[0], dtype=numpy_dtype(tile.dtype)),)

    def lower(self, ctx: Lowering, op: Operation, args: Sequence[Any]) -> Sequence[Any]:
        return (ctx.builder.iota(result_types=[tile_type(op.attrs["type"])]),)


class Broadcast(OpDef):
    """``broadcast(x) {shape}``: x repeated along its size-1 dimensions (same rank)."""

    def infer(self, operand_types: Sequence[KType], attrs: dict[str, Any]) -> tuple[KType, ...]:
        tile = tile_operand(operand_types, 0, "broadcast_to")
        shape: tuple[int, ...] = attrs["shape"]
        if len(shape) != tile.rank or any(s != d and s != 1 for s, d in zip(tile.shape, shape)):
            raise RuleError(f"broadcast_to: a tile of shape {list(tile.shape)} cannot broadcast to {list(shape)}")
        return (tile.with_shape(shape),)

    def evaluate(self, ctx: EvalContext, op: Operation, args: Sequence[Any]) -> Sequence[Any]:
        return (np.broadcast_to(args[0], op.attrs["shape"]).copy(),)

    def lower(self, ctx: Lowering, op: Operation, args: Sequence[Any]) -> Sequence[Any]:
        return (ctx.builder.broadcast(args[0], result_types=[tile_type(op.results[0].type)]),)


class Reshape(OpDef):
    """``reshape(x) {shape}``: the same elements in row-major order, another shape."""

    def infer(self, operand_types: Sequence[KType], attrs: dict[str, Any]) -> tuple[KType, ...]:
        tile = tile_operand(operand_types, 0, "reshape")
        shape: tuple[int, ...] = attrs["shape"]
        if math.prod(shape) != tile.size:
            raise RuleError(f"reshape: cannot reshape {list(tile.shape)} ({tile.size} elements) to {list(shape)}")
        return (tile.with_shape(shape),)

    def evaluate(self, ctx: EvalContext, op: Operation, args: Sequence[Any]) -> Sequence[Any]:
        return (np.reshape(args[0], op.attrs["shape"]),)

    def lower(self, ctx: Lowering, op: Operation, args: Sequence[Any]) -> Sequence[Any]:
        return (ctx.builder.reshape(args[0], result_types=[tile_type(op.results[0].type)]),)


class Permute(OpDef):
    """``permute(x) {perm}``: dimensions reordered (``transpose`` for 2-D)."""

    def infer(self, operand_types: Sequence[KType], attrs: dict[str, Any]) -> tuple[KType, ...]:
        tile = tile_operand(operand_types, 0, "permute")
        perm: tuple[int, ...] = attrs["perm"]
        if sorted(perm) != list(range(tile.rank)):
            raise RuleError(f"permute: {list(perm)} is not a permutation of the {tile.rank} dimensions")
        return (tile.with_shape(tuple(tile.shape[p] for p in perm)),)

    def evaluate(self, ctx: EvalContext, op: Operation, args: Sequence[Any]) -> Sequence[Any]:
        return (np.transpose(args[0], op.attrs["perm"]).copy(),)

    def lower(self, ctx: Lowering, op: Operation, args: Sequence[Any]) -> Sequence[Any]:
        return (ctx.builder.permute(args[0], permutation=list(op.attrs["perm"]),
                                    result_types=[tile_type(op.results[0].type)]),)


class Cat(OpDef):
    """``cat(a, b) {axis}``: two tiles joined along ``axis``."""

    def infer(self, operand_types: Sequence[KType], attrs: dict[str, Any]) -> tuple[KType, ...]:
        a = tile_operand(operand_types, 0, "cat")
        b = tile_operand(operand_types, 1, "cat")
        axis: int = attrs["axis"]
        if a.dtype is not b.dtype or a.rank != b.rank:
            raise RuleError(f"cat: tiles must have the same dtype and rank, got {a} and {b}")
        if not 0 <= axis < a.rank:
            raise RuleError(f"cat: axis {axis} is out of range for rank {a.rank}")
        if any(x != y for i, (x, y) in enumerate(zip(a.shape, b.shape)) if i != axis):
            raise RuleError(f"cat: shapes {list(a.shape)} and {list(b.shape)} differ outside axis {axis}")
        shape = list(a.shape)
        shape[axis] += b.shape[axis]
        return (a.with_shape(tuple(shape)),)

    def evaluate(self, ctx: EvalContext, op: Operation, args: Sequence[Any]) -> Sequence[Any]:
        return (np.concatenate([args[0], args[1]], axis=op.attrs["axis"]),)

    def lower(self, ctx: Lowering, op: Operation, args: Sequence[Any]) -> Sequence[Any]:
        return (ctx.builder.cat(args[0], args[1], dim=op.attrs["axis"], result_types=[tile_type(op.results[0].type)]),)


class Extract(OpDef):
    """``extract(x, *index) {shape}``: the sub-tile of ``shape`` at tile index ``index``
    (x split into tiles of ``shape``)."""

    def infer(self, operand_types: Sequence[KType], attrs: dict[str, Any]) -> tuple[KType, ...]:
        tile = tile_operand(operand_types, 0, "extract")
        shape: tuple[int, ...] = attrs["shape"]
        if len(shape) != tile.rank:
            raise RuleError(f"extract: the shape {list(shape)} has rank {len(shape)}, the tile rank {tile.rank}")
        check_index(operand_types[1:], tile.rank, "extract")
        if any(d % s for d, s in zip(tile.shape, shape)):
            raise RuleError(f"extract: shape {list(shape)} does not divide the tile's {list(tile.shape)}")
        return (tile.with_shape(shape),)

    def check_static(self, operand_types: Sequence[KType], static_values: Sequence[Any],
                     attrs: dict[str, Any]) -> None:
        tile = operand_types[0]
        assert isinstance(tile, TileType)
        shape: tuple[int, ...] = attrs["shape"]
        for axis, (index, size, extent) in enumerate(zip(static_values[1:], shape, tile.shape)):
            if index is not None and not 0 <= index < extent // size:
                raise RuleError(f"extract: index {index} is out of range along axis {axis}: {list(tile.shape)} holds "
                                f"{extent // size} sub-tiles of {size} there (indices 0 to {extent // size - 1})")

    def evaluate(self, ctx: EvalContext, op: Operation, args: Sequence[Any]) -> Sequence[Any]:
        shape: tuple[int, ...] = op.attrs["shape"]
        value = args[0]
        slices = []
        for axis, (index, size) in enumerate(zip(args[1:], shape)):
            start = int(index) * size
            if not 0 <= start <= value.shape[axis] - size:
                raise IndexError(f"extract: index {int(index)} is out of range along axis {axis}")
            slices.append(slice(start, start + size))
        return (value[tuple(slices)].copy(),)

    def lower(self, ctx: Lowering, op: Operation, args: Sequence[Any]) -> Sequence[Any]:
        indices = [ctx.index_i32(a, v.type) for a, v in zip(args[1:], op.operands[1:])]
        return (ctx.builder.extract(args[0], indices, result_types=[tile_type(op.results[0].type)]),)


class Insert(OpDef):
    """``insert(x, value, *index)``: x with the sub-tile at tile index ``index`` (x
    split into tiles of value's shape) replaced by ``value``; the inverse of
    `Extract`. Tile IR's ``insert`` appeared in bytecode 13.4."""

    def infer(self, operand_types: Sequence[KType], attrs: dict[str, Any]) -> tuple[KType, ...]:
        tile = tile_operand(operand_types, 0, "insert")
        value = tile_operand(operand_types, 1, "insert")
        if value.dtype is not tile.dtype:
            raise RuleError(f"insert: the value's dtype {value.dtype} differs from the tile's {tile.dtype}")
        if value.rank != tile.rank:
            raise RuleError(f"insert: the value has rank {value.rank}, the tile rank {tile.rank}")
        check_index(operand_types[2:], tile.rank, "insert")
        if any(d % s for d, s in zip(tile.shape, value.shape)):
            raise RuleError(f"insert: the value's shape {list(value.shape)} does not divide the tile's "
                            f"{list(tile.shape)}")
        return (tile,)

    def check_static(self, operand_types: Sequence[KType], static_values: Sequence[Any],
                     attrs: dict[str, Any]) -> None:
        tile, value = operand_types[0], operand_types[1]
        assert isinstance(tile, TileType) and isinstance(value, TileType)
        for axis, (index, size, extent) in enumerate(zip(static_values[2:], value.shape, tile.shape)):
            if index is not None and not 0 <= index < extent // size:
                raise RuleError(f"insert: index {index} is out of range along axis {axis}: {list(tile.shape)} holds "
                                f"{extent // size} sub-tiles of {size} there (indices 0 to {extent // size - 1})")

    def evaluate(self, ctx: EvalContext, op: Operation, args: Sequence[Any]) -> Sequence[Any]:
        result = np.array(args[0], copy=True)
        value = args[1]
        slices = []
        for axis, (index, size) in enumerate(zip(args[2:], value.shape)):
            start = int(index) * size
            if not 0 <= start <= result.shape[axis] - size:
                raise ctx.runtime_error(op, f"insert: index {int(index)} is out of range along axis {axis}")
            slices.append(slice(start, start + size))
        result[tuple(slices)] = value
        return (result,)

    def lower(self, ctx: Lowering, op: Operation, args: Sequence[Any]) -> Sequence[Any]:
        ctx.require_version(op.location, ir.V13_4, "insert")
        indices = [ctx.index_i32(a, v.type) for a, v in zip(args[2:], op.operands[2:])]
        return (ctx.builder.insert(args[1], args[0], indices),)


def _nibbles(values: Any) -> Any:
    """The 4-bit codes of an f4e2m1fn array (ml_dtypes keeps each in a byte's low bits)."""
    return np.ascontiguousarray(values).view(np.uint8) & np.uint8(0xF)


class Pack(OpDef):
    """``pack(x)``: a 1-D tile's bits as bytes (u8), element 0's first: little-endian
    within an element, and for 4-bit elements element 2i in the low half of byte i.
    Tile IR's ``pack`` (bytecode 13.3+); 8-bit elements are a ``bitcast``."""

    def infer(self, operand_types: Sequence[KType], attrs: dict[str, Any]) -> tuple[KType, ...]:
        tile = tile_operand(operand_types, 0, "pack_to_bytes")
        if tile.rank != 1 or tile.dtype.is_bool or (tile.size * tile.dtype.bits) % 8:
            raise RuleError(f"pack_to_bytes: needs a 1-D tile of whole bytes (not bool), got {tile}")
        return (TileType(dt.u8, (tile.size * tile.dtype.bits // 8,)),)

    def evaluate(self, ctx: EvalContext, op: Operation, args: Sequence[Any]) -> Sequence[Any]:
        source = op.operands[0].type
        assert isinstance(source, TileType)
        if source.dtype.bits == 4:
            codes = _nibbles(args[0])
            return ((codes[0::2] | (codes[1::2] << np.uint8(4))).astype(np.uint8),)
        return (np.ascontiguousarray(args[0]).view(np.uint8).copy(),)

    def lower(self, ctx: Lowering, op: Operation, args: Sequence[Any]) -> Sequence[Any]:
        result = tile_type(op.results[0].type)
        source = op.operands[0].type
        assert isinstance(source, TileType)
        if source.dtype.bits == 8:
            return (ctx.builder.bitcast(args[0], result_types=[result]),)
        return (ctx.builder.pack(args[0], result_types=[result]),)


class Unpack(OpDef):
    """``unpack(x) {dtype}``: a 1-D u8 (or i8) tile's bytes read as values of ``dtype``,
    the inverse of `Pack`. Tile IR's ``unpack`` (bytecode 13.3+); 8-bit ``dtype`` is a
    ``bitcast``."""

    def infer(self, operand_types: Sequence[KType], attrs: dict[str, Any]) -> tuple[KType, ...]:
        tile = tile_operand(operand_types, 0, "unpack_from_bytes")
        target: DType = attrs["dtype"]
        if tile.rank != 1 or tile.dtype not in (dt.u8, dt.i8):
            raise RuleError(f"unpack_from_bytes: needs a 1-D tile of u8 bytes, got {tile}")
        if target.is_bool or (tile.size * 8) % target.bits:
            raise RuleError(f"unpack_from_bytes: {tile.size} bytes do not hold whole {target} values")
        return (TileType(target, (tile.size * 8 // target.bits,)),)

    def evaluate(self, ctx: EvalContext, op: Operation, args: Sequence[Any]) -> Sequence[Any]:
        target: DType = op.attrs["dtype"]
        data = np.ascontiguousarray(args[0]).view(np.uint8)
        if target.bits == 4:
            codes = np.empty(2 * data.size, dtype=np.uint8)
            codes[0::2], codes[1::2] = data & np.uint8(0xF), data >> np.uint8(4)
            return (codes.view(numpy_dtype(target)),)
        return (data.view(numpy_dtype(target)).copy(),)

    def lower(self, ctx: Lowering, op: Operation, args: Sequence[Any]) -> Sequence[Any]:
        result = tile_type(op.results[0].type)
        target: DType = op.attrs["dtype"]
        if target.bits == 8:
            return (ctx.builder.bitcast(args[0], result_types=[result]),)
        return (ctx.builder.unpack(args[0], result_types=[result]),)


class ShapeOp(Op):
    """Tiles made from constants and reshaped."""

    CONSTANT = Constant()
    IOTA = Iota()
    BROADCAST = Broadcast()
    RESHAPE = Reshape()
    PERMUTE = Permute()
    CAT = Cat()
    EXTRACT = Extract()
    INSERT = Insert()
    PACK = Pack()
    UNPACK = Unpack()


register(ShapeOp)


