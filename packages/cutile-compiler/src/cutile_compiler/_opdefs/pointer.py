"""Element-wise access to global memory by index tiles: gather, scatter, atomics.

Each op takes a tensor parameter, one integer index tile per tensor dimension and
(for gather/scatter/atomics) an optional bool mask, all of one shape. On the GPU
they become pointer tiles (the tensor's base pointer offset by the linear index,
strides in elements) fed to ``load_ptr_tko``, ``store_ptr_tko``,
``atomic_rmw_tko`` and ``atomic_cas_tko``; nothing checks bounds there. The front
end makes a gather safe by ANDing the mask of the indices inside the tensor into its
mask (unless ``unchecked=True``, an unsafe kernel's choice); scatters, and atomics
outside a block's own tile, need ``unsafe=True``. The interpreter checks every
index the mask admits and fails with the block and the source line.

Atomic modes take the element types Tile IR's op table gives them
(``cutile_ir.accepted_element_types``): ``add`` on 32/64-bit integers and on f16,
bf16, f32, f64; ``max``/``min``/``and``/``or``/``xor`` on 32/64-bit integers;
``xchg`` and ``cas`` on 32/64-bit integers and f32/f64.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

import cutile_ir as ir

from cutile_compiler import _dtypes as dt
from cutile_compiler._ir import Operation
from cutile_compiler._lowering import element_type, tile_type
from cutile_compiler._opdefs._base import EvalContext, Op, MemoryAccess, RuleError, register
from cutile_compiler._opdefs.elementwise import numpy_dtype
from cutile_compiler._opdefs.shape import ShapeOp
from cutile_compiler._types import KType, TensorType, TileType

if TYPE_CHECKING:
    from cutile_compiler._lowering import Lowering

ORDERS = ("relaxed", "acquire", "release", "acq_rel")
SCOPES = ("tl_blk", "device", "sys")
RMW_MODES = ("add", "max", "min", "and", "or", "xor", "xchg")


def _check_access(types: Sequence[KType], extra: int, op: str, has_mask: bool) -> tuple[TensorType, tuple[int, ...]]:
    """Checks (tensor, *indices, *extra values, mask?) and returns the tensor and the shape."""
    tensor = types[0]
    if not isinstance(tensor, TensorType):
        raise RuleError(f"{op}: expected a tensor, got {tensor}")
    expected = 1 + tensor.rank + extra + (1 if has_mask else 0)
    if len(types) != expected:
        raise RuleError(f"{op}: expected {tensor.rank} index tile(s), {extra} value(s)"
                        f"{' and a mask' if has_mask else ''}, got {len(types) - 1} operands")
    indices = types[1:1 + tensor.rank]
    shape: tuple[int, ...] | None = None
    for axis, index in enumerate(indices):
        if not (isinstance(index, TileType) and index.dtype.is_integer):
            raise RuleError(f"{op}: the index along axis {axis} must be an integer tile, got {index}")
        if shape is None:
            shape = index.shape
        elif index.shape != shape:
            raise RuleError(f"{op}: index tiles must have one shape, got {list(shape)} and {list(index.shape)}")
    assert shape is not None
    for value in types[1 + tensor.rank:]:
        if not isinstance(value, TileType) or value.shape != shape:
            raise RuleError(f"{op}: values and mask must have the indices' shape {list(shape)}, got {value}")
    if has_mask:
        mask = types[-1]
        assert isinstance(mask, TileType)
        if mask.dtype is not dt.bool_:
            raise RuleError(f"{op}: the mask must be a bool tile, got {mask}")
    return tensor, shape


def _split(op: Operation, args: Sequence[Any], extra: int) -> tuple[Any, list[Any], list[Any], Any]:
    tensor_type = op.operands[0].type
    assert isinstance(tensor_type, TensorType)
    rank = tensor_type.rank
    indices = [np.asarray(a) for a in args[1:1 + rank]]
    values = list(args[1 + rank:1 + rank + extra])
    mask = np.asarray(args[-1]) if op.attrs.get("has_mask") else None
    return args[0], indices, values, mask


# -- lowering helpers ---------------------------------------------------------------------
def pointer_tile(ctx: Lowering, op: Operation, args: Sequence[Any]) -> Any:
    """The tile of pointers ``base + sum(index_k * stride_k)`` of an access op."""
    tensor_type = op.operands[0].type
    assert isinstance(tensor_type, TensorType)
    rank = tensor_type.rank
    return offset_pointers(ctx, args[0], tensor_type, list(op.operands[1:1 + rank]), list(args[1:1 + rank]))


#: the most elements a tensor may hold for i32 element offsets to reach all of them
_I32_OFFSETS = 1 << 31


def fits_i32_offsets(tensor_type: TensorType, info: Any) -> bool:
    """Whether every element offset of the tensor fits in i32: only provable for a
    static shape with static strides (dims and strides passed at run time are i32
    each, but their products may not be)."""
    if any(d is None for d in tensor_type.shape):
        return False
    strides = info.strides
    if strides is None or not all(isinstance(s, int) for s in strides):
        return False
    span = sum((int(d) - 1) * abs(int(s)) for d, s in zip(tensor_type.shape, strides) if d)
    return span < _I32_OFFSETS


def _unbroadcast(ctx: Lowering, value: Any, lowered: Any) -> tuple[Any, Any]:
    """(typed value, Tile IR value) of ``value`` before a front-end broadcast made it,
    when one did (same rank), so per-axis arithmetic runs on the smaller tile."""
    producer = ctx.producers.get(value)
    if producer is not None and producer.opdef.key is ShapeOp.BROADCAST:
        source = producer.operands[0]
        if source.type.rank == value.type.rank:  # type: ignore[attr-defined]
            return source, ctx.values[source]
    return value, lowered


def offset_pointers(ctx: Lowering, info: Any, tensor_type: TensorType, index_values: Sequence[Any],
                    index_args: Sequence[Any]) -> Any:
    """The tile of pointers ``base + sum(index_k * stride_k)`` for index tiles of one
    (broadcast) shape. Each axis's product is computed at the shape its index had
    before the front end broadcast it, then broadcast and summed. Offsets are i64
    unless every index is narrower and the tensor's offsets provably fit in i32 (a
    tensor of more than 2**31 elements would otherwise wrap around)."""
    b = ctx.builder
    shape = index_values[0].type.shape
    wide = (any(v.type.dtype.bits == 64 for v in index_values)
            or not fits_i32_offsets(tensor_type, info))
    index_ir = ir.I64 if wide else ir.I32
    linear: Any = None
    for axis, (full, lowered) in enumerate(zip(index_values, index_args)):
        value, index = _unbroadcast(ctx, full, lowered)
        index_type = value.type
        small = index_type.shape
        if index_type.dtype.bits != (64 if wide else 32):
            if index_type.dtype.bits < (64 if wide else 32):
                sign = index_type.dtype.signedness
                index = b.exti(index, signedness=sign, result_types=[ir.tile(small, index_ir)])
            else:
                index = b.trunci(index, result_types=[ir.tile(small, index_ir)])
        stride = info.strides[axis]
        if not (isinstance(stride, int) and stride == 1):
            if isinstance(stride, int):
                scaled_stride = b.constant(stride, ir.tile(small, index_ir))
            else:
                if wide:
                    stride = b.exti(stride, signedness="signed", result_types=[ir.scalar(ir.I64)])
                scaled_stride = _broadcast_scalar(b, stride, small, index_ir)
            index = b.muli(index, scaled_stride)
        if small != shape:
            index = b.broadcast(index, result_types=[ir.tile(shape, index_ir)])
        linear = index if linear is None else b.addi(linear, index)
    pointer_type = ir.ptr(element_type(tensor_type.dtype))
    base = _broadcast_scalar(b, info.pointer, shape, pointer_type)
    return b.offset(base, linear)


def _pointers_and_mask(ctx: Lowering, op: Operation, args: Sequence[Any]) -> tuple[Any, Any]:
    """An access op's pointer tile and its mask (None when it has none), lowered."""
    return pointer_tile(ctx, op, args), (args[-1] if op.attrs.get("has_mask") else None)


def _broadcast_scalar(b: Any, value: Any, shape: tuple[int, ...], element: Any) -> Any:
    if not shape:
        return value
    ones = b.reshape(value, result_types=[ir.tile((1,) * len(shape), element)])
    return b.broadcast(ones, result_types=[ir.tile(shape, element)])


class Gather(MemoryAccess):
    """``gather(t, *indices, mask?) {has_mask, padding}``: t's elements at the indices;
    masked-off elements read as ``padding``."""

    def infer(self, operand_types: Sequence[KType], attrs: dict[str, Any]) -> tuple[KType, ...]:
        tensor, shape = _check_access(operand_types, 0, "gather", bool(attrs.get("has_mask")))
        return (TileType(tensor.dtype, shape),)

    def evaluate(self, ctx: EvalContext, op: Operation, args: Sequence[Any]) -> Sequence[Any]:
        tensor, indices, _, mask = _split(op, args, 0)
        result = np.asarray(ctx.gather(op, tensor, indices, mask))
        if mask is not None:
            result = np.where(mask, result, np.asarray(op.attrs.get("padding", 0)).astype(result.dtype))
        return (result,)

    def lower(self, ctx: Lowering, op: Operation, args: Sequence[Any]) -> Sequence[Any]:
        b = ctx.builder
        pointers, mask = _pointers_and_mask(ctx, op, args)
        padding = ctx.constant(op.attrs.get("padding", 0), op.results[0].type) if mask is not None else None
        result, token = b.load_ptr_tko(pointers, mask, padding, ctx.token_in(op),
                                       memory_ordering_semantics="weak", **ctx.hint_attrs(op),
                                       result_types=[tile_type(op.results[0].type), ir.TOKEN])
        ctx.token_out(op, token)
        return (result,)


class Scatter(MemoryAccess):
    """``scatter(t, *indices, value, mask?) {has_mask}``: writes value's elements at
    the indices (where the mask holds)."""

    def infer(self, operand_types: Sequence[KType], attrs: dict[str, Any]) -> tuple[KType, ...]:
        tensor, _ = _check_access(operand_types, 1, "scatter", bool(attrs.get("has_mask")))
        check_writable(tensor, "scatter")
        _check_value_dtypes(operand_types, tensor, 1, "scatter: the values")
        return ()

    def evaluate(self, ctx: EvalContext, op: Operation, args: Sequence[Any]) -> Sequence[Any]:
        tensor, indices, values, mask = _split(op, args, 1)
        ctx.scatter(op, tensor, indices, values[0], mask)
        return ()

    def lower(self, ctx: Lowering, op: Operation, args: Sequence[Any]) -> Sequence[Any]:
        info = args[0]
        rank = len(info.dims)
        pointers, mask = _pointers_and_mask(ctx, op, args)
        token = ctx.builder.store_ptr_tko(pointers, args[1 + rank], mask, ctx.token_in(op),
                                          memory_ordering_semantics="weak", **ctx.hint_attrs(op))
        ctx.token_out(op, token)
        return ()


_RMW: dict[str, Callable[[Any, Any], Any]] = {
    "add": lambda old, v: old + v, "max": max, "min": min,
    "and": lambda old, v: old & v, "or": lambda old, v: old | v, "xor": lambda old, v: old ^ v,
    "xchg": lambda old, v: v,
}


def rmw_update(mode: str, value: Any) -> Callable[[Any, int], Any]:
    """The interpreter's per-element update of atomic ``mode`` with operand tile ``value``:
    (old element, flat position in the tile) -> new element."""
    function = _RMW[mode]
    flat = np.asarray(value).reshape(-1)
    kind = flat.dtype

    def update(old: Any, position: int) -> Any:
        with np.errstate(all="ignore"):
            return kind.type(function(kind.type(old), flat[position]))

    return update


def _tile_ir_atomic(mode: str, dtype: dt.DType) -> tuple[str, str | None]:
    """The Tile IR op and mode atomic ``mode`` on ``dtype`` lowers to."""
    if mode == "cas":
        return "atomic_cas_tko", None
    return "atomic_rmw_tko", tile_ir_atomic_mode(mode, dtype)


def atomic_dtypes(mode: str) -> tuple[dt.DType, ...]:
    """The dtypes atomic ``mode`` (``"add"``, ..., ``"xchg"``, ``"cas"``) takes: those whose
    element type the Tile IR op it lowers to accepts, by cutile_ir's op table (the one
    definition, which the IR verifier checks)."""
    return tuple(d for d in dt.ALL_DTYPES
                 if element_type(d) in ir.accepted_element_types(*_tile_ir_atomic(mode, d)))


def _describe_dtypes(dtypes: Sequence[dt.DType]) -> str:
    """``32/64-bit integers, f16, bf16, f32 or f64``."""
    widths = sorted({d.bits for d in dtypes if d.is_integer})
    parts = ["/".join(map(str, widths)) + "-bit integers"] if widths else []
    parts += [d.name for d in dtypes if not d.is_integer]
    return parts[0] if len(parts) == 1 else ", ".join(parts[:-1]) + " or " + parts[-1]


def check_atomic_dtype(mode: str, dtype: dt.DType) -> None:
    """Refuses an atomic on a dtype the GPU's atomic for ``mode`` does not take."""
    accepted = atomic_dtypes(mode)
    if dtype not in accepted:
        what = _describe_dtypes(accepted) if accepted else "no dtype"
        raise RuleError(f"atomic_{mode}: the GPU's atomics take {what}, not {dtype}")


def check_writable(tensor: TensorType, op: str) -> None:
    """Only tensors declared ``Mut[...]`` may be written (stores, scatters, atomics)."""
    if not tensor.mutable:
        raise RuleError(f"{op}: the tensor is not declared Mut[...], so the kernel may not write it")


def tile_ir_atomic_mode(mode: str, dtype: dt.DType) -> str:
    """Tile IR's name for atomic ``mode`` on ``dtype``: float add and unsigned
    max/min are modes of their own there."""
    if mode == "add" and dtype.is_float:
        return "addf"
    if mode in ("max", "min") and dtype.kind == "uint":
        return "u" + mode
    return mode


def _check_order(attrs: dict[str, Any], op: str) -> None:
    if attrs.get("order", "relaxed") not in ORDERS:
        raise RuleError(f"{op}: order must be one of {', '.join(map(repr, ORDERS))}, got {attrs.get('order')!r}")
    if attrs.get("scope", "device") not in SCOPES:
        raise RuleError(f"{op}: scope must be one of {', '.join(map(repr, SCOPES))}, got {attrs.get('scope')!r}")


def _check_atomic(types: Sequence[KType], attrs: dict[str, Any], extra: int,
                  mode: str) -> tuple[TensorType, tuple[int, ...]]:
    """Checks the operands and attributes of an element-wise atomic (``extra`` value
    operands); returns the tensor and the shape, as `_check_access`."""
    op = f"atomic_{mode}"
    tensor, shape = _check_access(types, extra, op, bool(attrs.get("has_mask")))
    check_writable(tensor, op)
    check_atomic_dtype(mode, tensor.dtype)
    _check_order(attrs, op)
    return tensor, shape


def _check_value_dtypes(types: Sequence[KType], tensor: TensorType, count: int, what: str) -> None:
    """The ``count`` value operands after the indices must have the tensor's dtype."""
    for value in types[1 + tensor.rank:1 + tensor.rank + count]:
        assert isinstance(value, TileType)
        if value.dtype is not tensor.dtype:
            raise RuleError(f"{what} must be {tensor.dtype}, got {value.dtype}")


class AtomicRmw(MemoryAccess):
    """``atomic_rmw(t, *indices, value, mask?) {mode, order, scope, has_mask}``: for
    each element in turn, ``old = t[i]; t[i] = mode(old, value)``; returns the old values."""

    def infer(self, operand_types: Sequence[KType], attrs: dict[str, Any]) -> tuple[KType, ...]:
        mode = attrs["mode"]
        if mode not in RMW_MODES:
            raise RuleError(f"atomic: unknown mode {mode!r} (one of {', '.join(RMW_MODES)})")
        tensor, shape = _check_atomic(operand_types, attrs, 1, mode)
        _check_value_dtypes(operand_types, tensor, 1, f"atomic_{mode}: the value")
        return (TileType(tensor.dtype, shape),)

    def evaluate(self, ctx: EvalContext, op: Operation, args: Sequence[Any]) -> Sequence[Any]:
        tensor, indices, values, mask = _split(op, args, 1)
        value = np.asarray(values[0])
        update = rmw_update(op.attrs["mode"], value)
        return (np.asarray(ctx.atomic(op, tensor, indices, mask, update)).astype(value.dtype),)

    def lower(self, ctx: Lowering, op: Operation, args: Sequence[Any]) -> Sequence[Any]:
        info = args[0]
        rank = len(info.dims)
        tensor_type = op.operands[0].type
        assert isinstance(tensor_type, TensorType)
        mode = tile_ir_atomic_mode(op.attrs["mode"], tensor_type.dtype)
        pointers, mask = _pointers_and_mask(ctx, op, args)
        result, token = ctx.builder.atomic_rmw_tko(
            pointers, args[1 + rank], mask, ctx.token_in(op), mode=mode,
            memory_ordering_semantics=op.attrs.get("order", "relaxed"),
            memory_scope=op.attrs.get("scope", "device"),
            result_types=[tile_type(op.results[0].type), ir.TOKEN])
        ctx.token_out(op, token)
        return (result,)


class AtomicCas(MemoryAccess):
    """``atomic_cas(t, *indices, expected, value, mask?) {order, scope, has_mask}``:
    for each element in turn, ``old = t[i]; if old == expected: t[i] = value``
    (floats compared bit for bit); returns the old values (``expected`` where masked)."""

    def infer(self, operand_types: Sequence[KType], attrs: dict[str, Any]) -> tuple[KType, ...]:
        tensor, shape = _check_atomic(operand_types, attrs, 2, "cas")
        _check_value_dtypes(operand_types, tensor, 2, "atomic_cas: expected and new values")
        return (TileType(tensor.dtype, shape),)

    def evaluate(self, ctx: EvalContext, op: Operation, args: Sequence[Any]) -> Sequence[Any]:
        tensor, indices, values, mask = _split(op, args, 2)
        expected = np.ascontiguousarray(values[0])
        new = np.asarray(values[1]).reshape(-1)
        bits = np.dtype(f"u{expected.dtype.itemsize}")
        expected_bits = expected.reshape(-1).view(bits)
        kind = expected.dtype

        def update(old: Any, position: int) -> Any:
            same = np.asarray(old, dtype=kind).reshape(1).view(bits)[0] == expected_bits[position]
            return new[position] if same else kind.type(old)

        old = np.asarray(ctx.atomic(op, tensor, indices, mask, update)).astype(kind)
        if mask is not None:
            old = np.where(mask, old, expected)
        return (old,)

    def lower(self, ctx: Lowering, op: Operation, args: Sequence[Any]) -> Sequence[Any]:
        info = args[0]
        rank = len(info.dims)
        pointers, mask = _pointers_and_mask(ctx, op, args)
        result, token = ctx.builder.atomic_cas_tko(
            pointers, args[1 + rank], args[2 + rank], mask, ctx.token_in(op),
            memory_ordering_semantics=op.attrs.get("order", "relaxed"),
            memory_scope=op.attrs.get("scope", "device"),
            result_types=[tile_type(op.results[0].type), ir.TOKEN])
        ctx.token_out(op, token)
        return (result,)


class PointerOp(Op):
    """Element-wise access by index tiles: gathers, scatters and atomics."""

    GATHER = Gather()
    SCATTER = Scatter()
    ATOMIC_RMW = AtomicRmw()
    ATOMIC_CAS = AtomicCas()


register(PointerOp)

__all__ = ["ORDERS", "PointerOp", "RMW_MODES", "SCOPES", "numpy_dtype"]
