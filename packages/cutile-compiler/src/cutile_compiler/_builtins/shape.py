"""The DSL functions that make tiles (full, zeros, ones, arange) and change their
shape (reshape, broadcast_to, permute, transpose, cat, extract, insert, expand_dims,
flip)."""

from __future__ import annotations

import ast
from typing import Any, TYPE_CHECKING

from cutile_compiler import _dtypes as dt
from cutile_compiler._builtins._base import _axis, _convert_value, _dtype, _index, _NUMBER, _static_int, _static_shape, _tile, builtin
from cutile_compiler._dtypes import DType
from cutile_compiler._ir import Value
from cutile_compiler._types import TileType
from cutile_compiler._opdefs import ShapeOp

if TYPE_CHECKING:
    from cutile_compiler._frontend import FrontEnd


# -- creation ------------------------------------------------------------------------------
@builtin
def full(fe: FrontEnd, node: ast.Call, shape: Any, value: Any, dtype: DType) -> Value:
    """A tile of ``shape`` filled with ``value`` (a number, or a scalar tile)."""
    tile_shape = _static_shape(fe, shape, node) if shape != () else ()
    kind = _dtype(fe, dtype, node)
    if isinstance(value, _NUMBER):
        return fe.constant(value, kind, tile_shape, node)
    scalar = fe.cast(_tile(fe, value, node, "full's value"), kind, node)
    if not scalar.type.is_scalar:  # type: ignore[attr-defined]
        raise fe.type_error(f"full's value must be a number or a scalar, got {scalar.type}", node)
    return fe.broadcast_to(scalar, tile_shape, node)


@builtin
def zeros(fe: FrontEnd, node: ast.Call, shape: Any, dtype: DType) -> Value:
    """A tile of zeros."""
    return fe.constant(0, _dtype(fe, dtype, node), _static_shape(fe, shape, node), node)


@builtin
def ones(fe: FrontEnd, node: ast.Call, shape: Any, dtype: DType) -> Value:
    """A tile of ones."""
    return fe.constant(1, _dtype(fe, dtype, node), _static_shape(fe, shape, node), node)


@builtin
def arange(fe: FrontEnd, node: ast.Call, size: Any, dtype: DType = dt.i32) -> Value:
    """0, 1, ..., size-1 as a 1-D integer tile (size a power of two)."""
    (extent,) = _static_shape(fe, size, node, "arange's size")
    kind = _dtype(fe, dtype, node)
    if kind.is_float:
        values = fe.op(ShapeOp.IOTA, [], {"type": TileType(dt.i32, (extent,))}, node=node).result
        return fe.cast(values, kind, node)
    return fe.op(ShapeOp.IOTA, [], {"type": TileType(kind, (extent,))}, node=node).result


# -- shape ---------------------------------------------------------------------------------
@builtin
def reshape(fe: FrontEnd, node: ast.Call, x: Any, shape: Any) -> Value:
    """The same elements (row-major) in another shape."""
    value = _tile(fe, x, node, "reshape's argument")
    target = _static_shape(fe, shape, node, power_of_two=False) if shape != () else ()
    return fe.op(ShapeOp.RESHAPE, [value], {"shape": target}, node=node).result


@builtin
def broadcast_to(fe: FrontEnd, node: ast.Call, x: Any, shape: Any) -> Value:
    """x repeated along new leading or size-1 dimensions to ``shape``."""
    return fe.broadcast_to(_tile(fe, x, node, "broadcast_to's argument"), _static_shape(fe, shape, node), node)


@builtin
def permute(fe: FrontEnd, node: ast.Call, x: Any, axes: Any) -> Value:
    """x with its dimensions reordered: result dim i is x's dim axes[i]."""
    value = _tile(fe, x, node, "permute's argument")
    perm = tuple(_static_int(fe, a, node, "axes") for a in (axes if isinstance(axes, tuple) else (axes,)))
    return fe.op(ShapeOp.PERMUTE, [value], {"perm": perm}, node=node).result


@builtin
def transpose(fe: FrontEnd, node: ast.Call, x: Any) -> Value:
    """A 2-D tile transposed (the last two dimensions of a 3-D one)."""
    value = _tile(fe, x, node, "transpose's argument")
    rank = value.type.rank  # type: ignore[attr-defined]
    if rank < 2:
        raise fe.type_error(f"transpose needs a tile of rank 2 or more, got {value.type}", node)
    perm = tuple(range(rank - 2)) + (rank - 1, rank - 2)
    return fe.op(ShapeOp.PERMUTE, [value], {"perm": perm}, node=node).result


@builtin
def cat(fe: FrontEnd, node: ast.Call, a: Any, b: Any, axis: int = 0) -> Value:
    """a and b joined along ``axis``."""
    x, y = _tile(fe, a, node, "cat's first tile"), _tile(fe, b, node, "cat's second tile")
    return fe.op(ShapeOp.CAT, [x, y], {"axis": _axis(fe, axis, x.type.rank, node)}, node=node).result  # type: ignore[attr-defined]


@builtin
def extract(fe: FrontEnd, node: ast.Call, x: Any, index: Any, shape: Any) -> Value:
    """The sub-tile of ``shape`` at tile coordinates ``index`` of x."""
    value = _tile(fe, x, node, "extract's argument")
    sub = _static_shape(fe, shape, node)
    return fe.op(ShapeOp.EXTRACT, [value, *_index(fe, index, node)], {"shape": sub}, node=node).result


def _expand(fe: FrontEnd, value: Value, axis: int, node: ast.AST) -> Value:
    shape: tuple[int, ...] = value.type.shape  # type: ignore[attr-defined]
    return fe.op(ShapeOp.RESHAPE, [value], {"shape": shape[:axis] + (1,) + shape[axis:]}, node=node).result


@builtin
def expand_dims(fe: FrontEnd, node: ast.Call, x: Any, axis: int) -> Value:
    """x with a new dimension of size 1 at ``axis`` (negative counts from the end of the
    result); ``x[:, None]`` is the same."""
    value = _tile(fe, x, node, "expand_dims's argument")
    return _expand(fe, value, _axis(fe, axis, value.type.rank + 1, node), node)  # type: ignore[attr-defined]


@builtin
def flip(fe: FrontEnd, node: ast.Call, x: Any, axis: Any = None) -> Value:
    """x with the order of its elements along ``axis`` reversed (an int, a tuple of them,
    or None: every axis, as numpy's flip)."""
    value = _tile(fe, x, node, "flip's argument")
    rank: int = value.type.rank  # type: ignore[attr-defined]
    axes = range(rank) if axis is None else axis if isinstance(axis, tuple) else (axis,)
    for along in sorted({_axis(fe, a, rank, node) for a in axes}):
        value = _flip_axis(fe, value, along, node)
    return value


def _flip_axis(fe: FrontEnd, value: Value, along: int, node: ast.AST) -> Value:
    tile: TileType = value.type  # type: ignore[assignment]
    extent = tile.shape[along]
    # Reversing n = 2**k indices complements each of their k bits: swap the two halves
    # of every block of 2, 4, ... n elements (each step a reshape, two extracts, a cat).
    before, after = tile.shape[:along], tile.shape[along + 1:]
    half = 1
    while half < extent:
        blocks = extent // (2 * half)
        split = before + (blocks, 2, half) + after
        parts = fe.op(ShapeOp.RESHAPE, [value], {"shape": split}, node=node).result
        sub = before + (blocks, 1, half) + after
        pair = len(before) + 1
        halves = []
        for which in (1, 0):
            index = [fe.constant(which if a == pair else 0, dt.i32, node=node) for a in range(len(split))]
            halves.append(fe.op(ShapeOp.EXTRACT, [parts, *index], {"shape": sub}, node=node).result)
        swapped = fe.op(ShapeOp.CAT, halves, {"axis": pair}, node=node).result
        value = fe.op(ShapeOp.RESHAPE, [swapped], {"shape": tile.shape}, node=node).result
        half *= 2
    return value


@builtin
def insert(fe: FrontEnd, node: ast.Call, x: Any, index: Any, value: Any) -> Value:
    """x with its sub-tile at tile coordinates ``index`` (x split into tiles of value's
    shape) replaced by ``value``: the inverse of extract. Needs tileiras 13.4+ on the GPU."""
    tile = _tile(fe, x, node, "insert's tile")
    sub = _convert_value(fe, value, tile.type.dtype, node, "insert's value")  # type: ignore[attr-defined]
    if sub.type.rank == 0 and tile.type.rank > 0:  # type: ignore[attr-defined]
        sub = fe.op(ShapeOp.RESHAPE, [sub], {"shape": (1,) * tile.type.rank}, node=node).result  # type: ignore[attr-defined]
    return fe.op(ShapeOp.INSERT, [tile, sub, *_index(fe, index, node)], node=node).result


@builtin
def pack_to_bytes(fe: FrontEnd, node: ast.Call, x: Any) -> Value:
    """x's bits (flattened, row-major) as a 1-D u8 tile: little-endian within each element;
    4-bit elements two to a byte, the even-numbered one in the low half."""
    value = _tile(fe, x, node, "pack_to_bytes's argument")
    if value.type.rank != 1:  # type: ignore[attr-defined]
        value = fe.op(ShapeOp.RESHAPE, [value], {"shape": (value.type.size,)}, node=node).result  # type: ignore[attr-defined]
    return fe.op(ShapeOp.PACK, [value], node=node).result


@builtin
def unpack_from_bytes(fe: FrontEnd, node: ast.Call, x: Any, dtype: DType) -> Value:
    """A 1-D u8 tile's bytes read as a 1-D tile of ``dtype`` (the inverse of
    pack_to_bytes): how kernels read f4e2m1fn data, which tensors hold as bytes."""
    value = _tile(fe, x, node, "unpack_from_bytes's argument")
    return fe.op(ShapeOp.UNPACK, [value], {"dtype": _dtype(fe, dtype, node)}, node=node).result
