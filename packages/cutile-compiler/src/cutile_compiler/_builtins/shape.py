"""The DSL functions that make tiles (full, zeros, ones, arange) and change their
shape (reshape, broadcast_to, permute, transpose, cat, extract)."""

from __future__ import annotations

import ast
from typing import Any, TYPE_CHECKING

from cutile_compiler import _dtypes as dt
from cutile_compiler._builtins._base import _axis, _dtype, _index, _NUMBER, _static_int, _static_shape, _tile, builtin
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
