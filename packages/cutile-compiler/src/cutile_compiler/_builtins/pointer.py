"""The DSL functions that access tensor elements at computed indices (gather,
scatter, atomics), and the atomics of a Mut tensor's own tile."""

from __future__ import annotations

import ast
from collections.abc import Sequence
from typing import Any, TYPE_CHECKING

from cutile_compiler import _dtypes as dt
from cutile_compiler._builtins._base import _convert_value, _hint_attrs, _NUMBER, _static_bool, _tensor_arg, _writable, builtin, family_member, Impl
from cutile_compiler._ir import Value
from cutile_compiler._opdefs import ElementwiseOp, MemoryOp, PointerOp, ShapeOp
from cutile_compiler._opdefs._base import RuleError
from cutile_compiler._opdefs.shape import constant_value
from cutile_compiler._types import broadcast_shapes, TensorType, TileType

if TYPE_CHECKING:
    from cutile_compiler._frontend import FrontEnd


def _access(fe: FrontEnd, node: ast.Call, name: str, tensor: Any, indices: Any, values: Sequence[tuple[Any, str]],
            mask: Any, *, writes: bool, bounds_checked: bool = False
            ) -> tuple[Value, list[Value], list[Value], Value | None]:
    """Checks and broadcasts the operands of a gather, scatter or atomic at ``indices``.
    With ``bounds_checked`` (a gather that is not ``unchecked``) the mask also holds only
    where every index lies inside the tensor, so the access never leaves it."""
    target = _tensor_arg(fe, tensor, node, f"{name}'s tensor")
    ttype = target.type
    assert isinstance(ttype, TensorType)
    if not fe.unsafe:
        if bounds_checked and ttype.mutable:
            raise fe.type_error(
                f"{name} of a Mut tensor in a safe kernel: the blocks write {ttype} tile by tile, and reading it at "
                "computed indices would read other blocks' tiles while they write them (a race). A safe kernel "
                "reads a Mut tensor only through its own tile (.load()); gather from read-only tensors, or use "
                "@cutile.entry(unsafe=True)", node)
        if not bounds_checked:
            raise fe.type_error(
                f"{name} at arbitrary indices needs @cutile.entry(unsafe=True): nothing checks its indices on the GPU"
                + ("; a safe kernel may update its own tile atomically with the Mut tensor's methods "
                   f"(z.{name}(value))" if name.startswith("atomic") else "")
                + ("; a gather without unchecked=True is bounds-checked and allowed in safe kernels"
                   if name == "gather" else ""), node)
    if writes:
        _writable(fe, ttype, name, node)
    items = indices if isinstance(indices, tuple) else (indices,)
    if len(items) != ttype.rank:
        raise fe.type_error(f"{name}: a rank-{ttype.rank} tensor needs {ttype.rank} index tile(s), got {len(items)}", node)
    index_tiles = []
    for axis, item in enumerate(items):
        tile = fe.to_tile(item, node, what=f"{name}'s index along axis {axis}")
        if not tile.type.dtype.is_integer:  # type: ignore[attr-defined]
            raise fe.type_error(f"{name}: indices must be integer tiles, got {tile.type} along axis {axis}", node)
        index_tiles.append(tile)
    value_tiles = [_convert_value(fe, v, ttype.dtype, node, f"{name}'s {what}") for v, what in values]
    mask_tile = None
    if mask is not None:
        mask_tile = fe.to_tile(mask, node, what=f"{name}'s mask")
        if mask_tile.type.dtype is not dt.bool_:  # type: ignore[attr-defined]
            raise fe.type_error(f"{name}'s mask must be a bool tile (a comparison), got {mask_tile.type}", node)
    everything = [*index_tiles, *value_tiles, *([mask_tile] if mask_tile is not None else [])]
    shape = fe.common_shape(everything, node, f"{name}: the shapes of indices, values and mask")
    inside = _inside_mask(fe, node, target, index_tiles) if bounds_checked else None
    index_tiles = [fe.broadcast_to(t, shape, node) for t in index_tiles]
    value_tiles = [fe.broadcast_to(t, shape, node) for t in value_tiles]
    if mask_tile is not None:
        mask_tile = fe.broadcast_to(mask_tile, shape, node)
    if inside is not None:
        inside = fe.broadcast_to(inside, shape, node)
        mask_tile = inside if mask_tile is None else fe.op(ElementwiseOp.AND, [inside, mask_tile], node=node).result
    return target, index_tiles, value_tiles, mask_tile


def _inside_mask(fe: FrontEnd, node: ast.Call, tensor: Value, index_tiles: Sequence[Value]) -> Value:
    """Where every index lies inside ``tensor`` (``0 <= index_k < shape[k]``), each axis
    compared at its own index tile's shape (a row index of shape [M, 1] costs M compares)
    and the results broadcast together. One unsigned compare per axis, as a negative
    index read as unsigned is past any extent."""
    inside: Value | None = None
    for axis, index in enumerate(index_tiles):
        unsigned = dt.u64 if index.type.dtype.bits == 64 else dt.u32  # type: ignore[attr-defined]
        extent = fe.cast(fe.op(MemoryOp.TENSOR_DIM, [tensor], {"axis": axis}, node=node).result, unsigned, node)
        index_shape = index.type.shape  # type: ignore[attr-defined]
        below = fe.op(ElementwiseOp.LT, [fe.cast(index, unsigned, node), fe.broadcast_to(extent, index_shape, node)],
                      node=node).result
        if inside is None:
            inside = below
        else:
            shape = fe.common_shape([inside, below], node, "gather: the shapes of indices")
            inside = fe.op(ElementwiseOp.AND, [fe.broadcast_to(inside, shape, node), fe.broadcast_to(below, shape, node)],
                           node=node).result
    assert inside is not None  # a tensor has at least one axis
    return inside


@builtin
def gather(fe: FrontEnd, node: ast.Call, tensor: Any, indices: Any, mask: Any = None, padding: Any = 0,
           latency: int | None = None, unchecked: bool = False) -> Value:
    """The elements of ``tensor`` at ``indices`` (one integer tile per dimension;
    shapes broadcast), where ``mask`` holds and every index lies inside the tensor;
    the other elements read ``padding``. Bounds-checked so, a gather of a read-only
    tensor is allowed in safe kernels. ``unchecked=True`` drops the bounds check (the
    indices must then be in bounds where ``mask`` holds; the interpreter checks) and
    needs ``@cutile.entry(unsafe=True)``, as does a gather of a Mut tensor."""
    if _static_bool(fe, unchecked, node, "gather's unchecked") and not fe.unsafe:
        raise fe.type_error("gather(..., unchecked=True) reads without a bounds check, which only "
                            "@cutile.entry(unsafe=True) kernels may do; leave it out for a bounds-checked gather", node)
    target, index_tiles, _, mask_tile = _access(fe, node, "gather", tensor, indices, [], mask, writes=False,
                                                bounds_checked=not unchecked)
    if not isinstance(padding, _NUMBER):
        raise fe.type_error(f"gather's padding must be a number, got {fe.describe(padding)}", node)
    try:
        padding = constant_value(padding, target.type.dtype)  # type: ignore[attr-defined]
    except RuleError as exc:
        raise fe.type_error(f"gather's padding: {exc}", node) from None
    attrs = {"has_mask": mask_tile is not None, "padding": padding, **_hint_attrs(fe, node, latency, None)}
    operands = [target, *index_tiles, *([mask_tile] if mask_tile is not None else [])]
    return fe.op(PointerOp.GATHER, operands, attrs, node=node).result


@builtin
def scatter(fe: FrontEnd, node: ast.Call, tensor: Any, indices: Any, value: Any, mask: Any = None,
            latency: int | None = None) -> None:
    """Writes ``value`` into the Mut ``tensor`` at ``indices`` where ``mask`` holds.
    Only in ``@cutile.entry(unsafe=True)`` kernels (the interpreter checks bounds and races)."""
    target, index_tiles, values, mask_tile = _access(fe, node, "scatter", tensor, indices, [(value, "value")], mask,
                                                     writes=True)
    attrs = {"has_mask": mask_tile is not None, **_hint_attrs(fe, node, latency, None)}
    fe.op(PointerOp.SCATTER, [target, *index_tiles, *values, *([mask_tile] if mask_tile is not None else [])], attrs, node=node)
    return None


def _atomic(mode: str, fe: FrontEnd, node: ast.Call, tensor: Any, indices: Any, value: Any, mask: Any = None,
            order: str = "relaxed", scope: str = "device") -> Value:
    name = f"atomic_{mode}"
    target, index_tiles, values, mask_tile = _access(fe, node, name, tensor, indices, [(value, "value")], mask,
                                                     writes=True)
    attrs = {"mode": mode, "has_mask": mask_tile is not None, "order": order, "scope": scope}
    operands = [target, *index_tiles, *values, *([mask_tile] if mask_tile is not None else [])]
    return fe.op(PointerOp.ATOMIC_RMW, operands, attrs, node=node).result


def _atomic_doc(mode: str) -> str:
    return (f"Atomically, element by element: ``old = tensor[i]; tensor[i] = {mode}(old, value)`` at "
           "``indices`` (one integer tile per dimension) where ``mask`` holds; returns the old values. "
           "``order``: relaxed, acquire, release or acq_rel; ``scope``: tl_blk, device or sys. "
           "Only in unsafe kernels; a safe kernel updates its own tile with ``z." + f"atomic_{mode}(value)``.")


atomic_add = family_member(_atomic, "add", "atomic_add", _atomic_doc("add"))
atomic_max = family_member(_atomic, "max", "atomic_max", _atomic_doc("max"))
atomic_min = family_member(_atomic, "min", "atomic_min", _atomic_doc("min"))
atomic_and = family_member(_atomic, "and", "atomic_and", _atomic_doc("and"))
atomic_or = family_member(_atomic, "or", "atomic_or", _atomic_doc("or"))
atomic_xor = family_member(_atomic, "xor", "atomic_xor", _atomic_doc("xor"))
atomic_xchg = family_member(_atomic, "xchg", "atomic_xchg", _atomic_doc("xchg"))


@builtin
def atomic_cas(fe: FrontEnd, node: ast.Call, tensor: Any, indices: Any, expected: Any, value: Any, mask: Any = None,
               order: str = "relaxed", scope: str = "device") -> Value:
    """Atomically, element by element: where ``tensor[i] == expected`` (bit for bit),
    writes ``value``; returns the old values. Only in unsafe kernels; a safe kernel
    uses ``z.atomic_cas(expected, value)`` on its own tile."""
    target, index_tiles, values, mask_tile = _access(
        fe, node, "atomic_cas", tensor, indices, [(expected, "expected value"), (value, "value")], mask, writes=True)
    attrs = {"has_mask": mask_tile is not None, "order": order, "scope": scope}
    operands = [target, *index_tiles, *values, *([mask_tile] if mask_tile is not None else [])]
    return fe.op(PointerOp.ATOMIC_CAS, operands, attrs, node=node).result


def _own_tile_access(fe: FrontEnd, node: ast.Call, tensor: Value) -> tuple[list[Value], Value]:
    """The element indices of this block's own tile of a Mut tensor, and the mask of
    those inside the tensor."""
    ttype = tensor.type
    assert isinstance(ttype, TensorType) and ttype.tile_shape is not None
    shape = ttype.tile_shape
    indices: list[Value] = []
    inside: Value | None = None
    for axis, extent in enumerate(shape):
        iota = fe.op(ShapeOp.IOTA, [], {"type": TileType(dt.i32, (extent,))}, node=node).result
        start = fe.op(ElementwiseOp.MUL, [fe.block_id(axis), fe.constant(extent, dt.i32, node=node)], node=node).result
        line = fe.op(ElementwiseOp.ADD, [iota, fe.broadcast_to(start, (extent,), node)], node=node).result
        along = tuple(extent if k == axis else 1 for k in range(len(shape)))
        index = fe.broadcast_to(fe.op(ShapeOp.RESHAPE, [line], {"shape": along}, node=node).result, shape, node)
        dim = fe.op(MemoryOp.TENSOR_DIM, [tensor], {"axis": axis}, node=node).result
        below = fe.op(ElementwiseOp.LT, [index, fe.broadcast_to(dim, shape, node)], node=node).result
        inside = below if inside is None else fe.op(ElementwiseOp.AND, [inside, below], node=node).result
        indices.append(index)
    assert inside is not None
    return indices, inside


def _own_values(fe: FrontEnd, node: ast.Call, tensor: Value, values: Sequence[tuple[Any, str]], name: str) -> list[Value]:
    ttype = tensor.type
    assert isinstance(ttype, TensorType)
    _writable(fe, ttype, name, node)
    assert ttype.tile_shape is not None  # every Mut tensor has a tile of its own (the signature sees to it)
    result = []
    for value, what in values:
        tile = _convert_value(fe, value, ttype.dtype, node, f"{name}'s {what}")
        if tile.type.shape != ttype.tile_shape:  # type: ignore[attr-defined]
            if broadcast_shapes(tile.type.shape, ttype.tile_shape) != ttype.tile_shape:  # type: ignore[attr-defined]
                raise fe.type_error(f"{name}: this block's tile has shape {list(ttype.tile_shape)}, the {what} "
                                    f"{list(tile.type.shape)}", node)  # type: ignore[attr-defined]
            tile = fe.broadcast_to(tile, ttype.tile_shape, node)
        result.append(tile)
    return result


def _own_atomic(mode: str) -> Impl:
    def impl(fe: FrontEnd, node: ast.Call, tensor: Value, value: Any, order: Any = "relaxed",
             scope: Any = "device") -> Value:
        name = f"atomic_{mode}"
        values = _own_values(fe, node, tensor, [(value, "value")], name)
        indices, inside = _own_tile_access(fe, node, tensor)
        attrs = {"mode": mode, "has_mask": True, "order": order, "scope": scope}
        return fe.op(PointerOp.ATOMIC_RMW, [tensor, *indices, *values, inside], attrs, node=node).result
    return impl


def _own_atomic_cas(fe: FrontEnd, node: ast.Call, tensor: Value, expected: Any, value: Any, order: Any = "relaxed",
                    scope: Any = "device") -> Value:
    values = _own_values(fe, node, tensor, [(expected, "expected value"), (value, "value")], "atomic_cas")
    indices, inside = _own_tile_access(fe, node, tensor)
    attrs = {"has_mask": True, "order": order, "scope": scope}
    return fe.op(PointerOp.ATOMIC_CAS, [tensor, *indices, *values, inside], attrs, node=node).result
